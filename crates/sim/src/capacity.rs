//! The simulated cluster's capacity-API objects (PodTemplates, ProvisioningRequests,
//! CapacityBuffers, CapacityQuotas) and what the API server does with the engine's writes to them.
//!
//! - Status writes replace the object's status at once, so the next loop's Gather reads them back,
//!   as it would read the status subresource of a live object. Each write that changes a
//!   condition is kept as a [`ConditionChange`], so reports can show a request's life (accepted,
//!   provisioned, booked, expired or failed, with times) and a buffer's conditions.
//! - `ensure_buffer_pod_template` creates or updates the PodTemplate a buffer that points at a
//!   workload (`scalableRef`) is read through, named `capacitybuffer-<buffer>-pod-template`, with a generation
//!   that moves only when the pod shape changes.
//! - A buffer's `scalableRef` is resolved against the workloads the simulator knows: the
//!   controllers implied by the pods they own (ReplicaSet, StatefulSet, ReplicationController,
//!   Job), and a Deployment through the ReplicaSets named `<deployment>-<hash>` it would own. The
//!   object's replicas are its live pods, its ready replicas those that are bound, and its pod
//!   shape one of its live pods.
//!
//! Scenarios without capacity objects never get here.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferroscale_model::{
    ApiCondition, CapacityBuffer, CapacityBufferStatus, CapacityObjects, CapacityQuota,
    CompactString, ConditionStatus, Node, Pod, PodTemplate, ProvisioningRequest,
    ProvisioningRequestStatus, Quantity, ScalableObject, ScalableRef, Timestamp,
};
use ferroscale_objects::K8sObject;

/// Kinds a buffer's `scalableRef` may name that the simulator can resolve.
const RESOLVABLE_KINDS: &[&str] = &[
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "ReplicationController",
    "Job",
];

/// Which object a condition change happened on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum CapacityObjectRef {
    /// `namespace/name`.
    ProvisioningRequest(String),
    /// `namespace/name`.
    CapacityBuffer(String),
}

/// One condition of a request or a buffer that appeared or changed status or reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionChange {
    pub object: CapacityObjectRef,
    /// When the simulated API server took the write.
    pub at: Timestamp,
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
}

/// A write about an object that does not exist (deleted, or never created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoSuchObject {
    pub kind: &'static str,
    pub name: String,
}

/// The capacity-API objects of the simulated cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterCapacity {
    /// Everything but `scalables`, which Gather resolves from the workloads each time.
    objects: CapacityObjects,
    /// Every condition change so far, in write order.
    history: Vec<ConditionChange>,
    /// Objects created so far, for unique uids.
    created: usize,
}

impl ClusterCapacity {
    /// Whether the scenario has any capacity object at all.
    pub fn is_empty(&self) -> bool {
        let o = &self.objects;
        o.pod_templates.is_empty()
            && o.provisioning_requests.is_empty()
            && o.buffers.is_empty()
            && o.quotas.is_empty()
    }

    /// The objects as they are now (without resolved scalables).
    pub fn objects(&self) -> &CapacityObjects {
        &self.objects
    }

    /// Every condition change so far, in write order.
    pub fn history(&self) -> &[ConditionChange] {
        &self.history
    }

    fn next_uid(&mut self, kind: &str, key: &str) -> String {
        self.created += 1;
        format!("sim-{kind}-{}-{key}", self.created)
    }

    /// Keeps `object` when it is a capacity-API object (created at `now`); returns whether it was
    /// one.
    pub fn add(&mut self, object: &K8sObject, now: Timestamp) -> bool {
        match object {
            K8sObject::PodTemplate(t) => self.add_pod_template(t.clone()),
            K8sObject::ProvisioningRequest(r) => self.add_provisioning_request(r.clone(), now),
            K8sObject::CapacityBuffer(b) => self.add_buffer(b.clone(), now),
            K8sObject::CapacityQuota(q) => self.add_quota(q.clone()),
            _ => return false,
        }
        true
    }

    /// Adds a PodTemplate, replacing one of the same namespace and name (as `kubectl apply`).
    pub fn add_pod_template(&mut self, mut template: PodTemplate) {
        if template.uid.is_empty() {
            template.uid = self.next_uid("podtemplate", &template.name);
        }
        template.generation = template.generation.max(1);
        let list = &mut self.objects.pod_templates;
        list.retain(|t| !(t.namespace == template.namespace && t.name == template.name));
        list.push(Arc::new(template));
    }

    /// Adds a ProvisioningRequest created at `now` (or replaces one of the same key).
    pub fn add_provisioning_request(&mut self, mut request: ProvisioningRequest, now: Timestamp) {
        if request.uid.is_empty() {
            request.uid = self.next_uid("provreq", &request.name);
        }
        request.creation_time = now;
        request.generation = request.generation.max(1);
        let list = &mut self.objects.provisioning_requests;
        list.retain(|r| !(r.namespace == request.namespace && r.name == request.name));
        list.push(Arc::new(request));
    }

    /// Adds a CapacityBuffer created at `now` (or replaces one of the same key).
    pub fn add_buffer(&mut self, mut buffer: CapacityBuffer, now: Timestamp) {
        if buffer.uid.is_empty() {
            buffer.uid = self.next_uid("buffer", &buffer.name);
        }
        buffer.creation_time = now;
        buffer.generation = buffer.generation.max(1);
        let list = &mut self.objects.buffers;
        list.retain(|b| !(b.namespace == buffer.namespace && b.name == buffer.name));
        list.push(Arc::new(buffer));
    }

    /// Adds a CapacityQuota (or replaces one of the same name).
    pub fn add_quota(&mut self, mut quota: CapacityQuota) {
        if quota.uid.is_empty() {
            quota.uid = self.next_uid("quota", &quota.name);
        }
        quota.generation = quota.generation.max(1);
        let list = &mut self.objects.quotas;
        list.retain(|q| q.name != quota.name);
        list.push(Arc::new(quota));
    }

    /// The request's status subresource takes `status`; returns the conditions that changed.
    pub fn update_provisioning_request_status(
        &mut self,
        namespace: &str,
        name: &str,
        status: &ProvisioningRequestStatus,
        now: Timestamp,
    ) -> Result<Vec<ConditionChange>, NoSuchObject> {
        let request = self
            .objects
            .provisioning_requests
            .iter_mut()
            .find(|r| r.namespace == namespace && r.name == name)
            .ok_or_else(|| NoSuchObject {
                kind: "ProvisioningRequest",
                name: format!("{namespace}/{name}"),
            })?;
        let changes = condition_changes(
            CapacityObjectRef::ProvisioningRequest(request.key()),
            &request.status.conditions,
            &status.conditions,
            now,
        );
        Arc::make_mut(request).status = status.clone();
        self.history.extend(changes.iter().cloned());
        Ok(changes)
    }

    /// The buffer's status subresource takes `status`; returns the conditions that changed.
    pub fn update_buffer_status(
        &mut self,
        namespace: &str,
        name: &str,
        status: &CapacityBufferStatus,
        now: Timestamp,
    ) -> Result<Vec<ConditionChange>, NoSuchObject> {
        let buffer = self
            .objects
            .buffers
            .iter_mut()
            .find(|b| b.namespace == namespace && b.name == name)
            .ok_or_else(|| NoSuchObject {
                kind: "CapacityBuffer",
                name: format!("{namespace}/{name}"),
            })?;
        let changes = condition_changes(
            CapacityObjectRef::CapacityBuffer(buffer.key()),
            &buffer.status.conditions,
            &status.conditions,
            now,
        );
        Arc::make_mut(buffer).status = status.clone();
        self.history.extend(changes.iter().cloned());
        Ok(changes)
    }

    /// Creates or updates the PodTemplate `capacitybuffer-<buffer>-pod-template` with the scalable's pod shape;
    /// returns its name and generation (which moves only when the shape changes).
    pub fn ensure_buffer_pod_template(
        &mut self,
        buffer: &CapacityBuffer,
        pod: &Arc<Pod>,
    ) -> (String, i64) {
        let name = ferroscale_capacity::buffers::managed_pod_template_name(&buffer.name);
        let templates = &mut self.objects.pod_templates;
        let existing = templates
            .iter()
            .position(|t| t.namespace == buffer.namespace && t.name == name);
        let (uid, generation) = match existing.map(|i| &templates[i]) {
            Some(t) if same_shape(&t.pod, pod) => return (name, t.generation),
            Some(t) => (t.uid.clone(), t.generation.saturating_add(1)),
            None => (String::new(), 1),
        };
        let uid = if uid.is_empty() {
            self.next_uid("podtemplate", &name)
        } else {
            uid
        };
        let mut shape = Pod::clone(pod);
        shape.namespace = buffer.namespace.as_str().into();
        shape.name = name.as_str().into();
        shape.node_name = None;
        shape.uid = CompactString::default();
        self.add_pod_template(PodTemplate {
            namespace: buffer.namespace.clone(),
            name: name.clone(),
            uid,
            generation,
            pod: Arc::new(shape),
        });
        (name, generation)
    }

    /// What Gather resolves for every distinct `scalableRef` of the buffers, from `pods` (the live
    /// pods).
    pub fn resolve_scalables<'a>(
        &self,
        pods: impl Iterator<Item = &'a Arc<Pod>> + Clone,
    ) -> Vec<Arc<ScalableObject>> {
        let mut refs: BTreeMap<(String, ScalableRef), ()> = BTreeMap::new();
        for buffer in &self.objects.buffers {
            if let Some(reference) = &buffer.spec.scalable_ref {
                refs.insert((buffer.namespace.clone(), reference.clone()), ());
            }
        }
        refs.into_keys()
            .map(|(namespace, reference)| {
                Arc::new(resolve_scalable(&namespace, &reference, pods.clone()))
            })
            .collect()
    }
}

/// Whether two pods have the same shape for a template (what a pod of the workload asks for).
fn same_shape(template: &Pod, pod: &Pod) -> bool {
    template.requests == pod.requests
        && template.labels == pod.labels
        && template.node_selector == pod.node_selector
        && template.tolerations == pod.tolerations
}

/// Whether `pod` belongs to the workload `reference` names in `namespace`.
fn owned_by(pod: &Pod, namespace: &str, reference: &ScalableRef) -> bool {
    if pod.namespace != namespace {
        return false;
    }
    let Some(owner) = pod.controller() else {
        return false;
    };
    if reference.kind == "Deployment" {
        // A Deployment's ReplicaSets are named `<deployment>-<pod-template-hash>`.
        return owner.kind == "ReplicaSet"
            && owner
                .name
                .strip_prefix(reference.name.as_str())
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|hash| !hash.is_empty() && !hash.contains('-'));
    }
    owner.kind == reference.kind && owner.name == reference.name
}

fn resolve_scalable<'a>(
    namespace: &str,
    reference: &ScalableRef,
    pods: impl Iterator<Item = &'a Arc<Pod>>,
) -> ScalableObject {
    let mut object = ScalableObject {
        namespace: namespace.to_string(),
        reference: reference.clone(),
        replicas: 0,
        ready_replicas: Some(0),
        pod: None,
        error: None,
    };
    if !RESOLVABLE_KINDS.contains(&reference.kind.as_str()) {
        object.error = Some(format!(
            "{} {namespace}/{}: the simulator resolves only {} objects",
            reference.kind,
            reference.name,
            RESOLVABLE_KINDS.join(", ")
        ));
        return object;
    }
    let mut ready = 0i32;
    for pod in pods.filter(|p| owned_by(p, namespace, reference)) {
        object.replicas = object.replicas.saturating_add(1);
        if pod.node_name.is_some() {
            ready = ready.saturating_add(1);
        }
        object.pod.get_or_insert_with(|| pod.clone());
    }
    object.ready_replicas = Some(ready);
    if object.pod.is_none() {
        object.error = Some(format!(
            "{} {namespace}/{} has no pods in the simulated cluster",
            reference.kind, reference.name
        ));
    }
    object
}

/// Conditions of `new` that are not in `old` with the same status and reason.
fn condition_changes(
    object: CapacityObjectRef,
    old: &[ApiCondition],
    new: &[ApiCondition],
    now: Timestamp,
) -> Vec<ConditionChange> {
    new.iter()
        .filter(|c| {
            !old.iter()
                .any(|o| o.type_ == c.type_ && o.status == c.status && o.reason == c.reason)
        })
        .map(|c| ConditionChange {
            object: object.clone(),
            at: now,
            type_: c.type_.clone(),
            status: c.status,
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
        .collect()
}

/// A quota's usage now: what the nodes it selects add up to, by the resource names its limits
/// use (`nodes` counts nodes, the others sum the nodes' capacity).
pub fn quota_usage<'a>(
    quota: &CapacityQuota,
    nodes: impl Iterator<Item = &'a Node>,
) -> BTreeMap<String, Quantity> {
    let mut sums: BTreeMap<&str, i64> = quota.limits.keys().map(|k| (k.as_str(), 0)).collect();
    for node in nodes.filter(|n| quota.selector.as_ref().is_none_or(|s| s.matches(&n.labels))) {
        for (resource, used) in sums.iter_mut() {
            let add = match *resource {
                "nodes" => 1,
                "cpu" => node.capacity.cpu_milli,
                other => node.capacity.get(other),
            };
            *used = used.saturating_add(add);
        }
    }
    sums.into_iter()
        .map(|(resource, used)| {
            let quantity = match resource {
                "cpu" => Quantity::from_millis(used),
                _ => Quantity::from_units(used),
            };
            (resource.to_string(), quantity)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::{OwnerRef, Resources, provisioning_conditions};

    fn condition(type_: &str, status: ConditionStatus, reason: &str) -> ApiCondition {
        ApiCondition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: format!("{type_} {reason}"),
            ..ApiCondition::default()
        }
    }

    fn request(name: &str) -> ProvisioningRequest {
        ProvisioningRequest {
            namespace: "default".into(),
            name: name.into(),
            uid: String::new(),
            generation: 1,
            creation_time: Timestamp::from_secs(0),
            deleting: false,
            class: ferroscale_model::CHECK_CAPACITY_CLASS.into(),
            pod_sets: Vec::new(),
            parameters: BTreeMap::new(),
            status: ProvisioningRequestStatus::default(),
        }
    }

    #[test]
    fn status_writes_land_and_record_only_changed_conditions() {
        let mut capacity = ClusterCapacity::default();
        capacity.add_provisioning_request(request("job"), Timestamp::from_secs(0));
        let accepted = ProvisioningRequestStatus {
            conditions: vec![condition(
                provisioning_conditions::ACCEPTED,
                ConditionStatus::True,
                "Accepted",
            )],
            ..ProvisioningRequestStatus::default()
        };
        let changes = capacity
            .update_provisioning_request_status(
                "default",
                "job",
                &accepted,
                Timestamp::from_secs(10),
            )
            .unwrap();
        assert_eq!(changes.len(), 1);
        // The same status again is no change.
        let again = capacity
            .update_provisioning_request_status(
                "default",
                "job",
                &accepted,
                Timestamp::from_secs(20),
            )
            .unwrap();
        assert!(again.is_empty());
        let mut provisioned = accepted.clone();
        provisioned.conditions.push(condition(
            provisioning_conditions::PROVISIONED,
            ConditionStatus::True,
            "CapacityIsFound",
        ));
        capacity
            .update_provisioning_request_status(
                "default",
                "job",
                &provisioned,
                Timestamp::from_secs(30),
            )
            .unwrap();
        assert_eq!(
            capacity.objects().provisioning_requests[0].status,
            provisioned
        );
        let life: Vec<(u64, &str)> = capacity
            .history()
            .iter()
            .map(|c| {
                (
                    c.at.since(Timestamp::from_secs(0)).as_secs(),
                    c.type_.as_str(),
                )
            })
            .collect();
        assert_eq!(life, [(10, "Accepted"), (30, "Provisioned")]);
        assert_eq!(
            capacity.update_provisioning_request_status(
                "default",
                "gone",
                &accepted,
                Timestamp::from_secs(40)
            ),
            Err(NoSuchObject {
                kind: "ProvisioningRequest",
                name: "default/gone".into()
            })
        );
    }

    fn owned(name: &str, kind: &str, owner: &str, node: Option<&str>) -> Arc<Pod> {
        let mut pod = Pod::new("default", name);
        pod.requests = Resources::new(500, 1 << 30);
        pod.node_name = node.map(Into::into);
        pod.owner_references.push(OwnerRef {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: owner.into(),
            uid: format!("uid-{owner}"),
            controller: true,
        });
        Arc::new(pod)
    }

    fn buffer(reference: ScalableRef) -> CapacityBuffer {
        CapacityBuffer {
            namespace: "default".into(),
            name: "spare".into(),
            uid: String::new(),
            generation: 1,
            creation_time: Timestamp::from_secs(0),
            spec: ferroscale_model::CapacityBufferSpec {
                scalable_ref: Some(reference),
                percentage: Some(50),
                ..Default::default()
            },
            status: CapacityBufferStatus::default(),
        }
    }

    #[test]
    fn scalable_refs_resolve_against_the_pods_workloads() {
        let mut capacity = ClusterCapacity::default();
        let deployment = ScalableRef {
            api_group: "apps".into(),
            kind: "Deployment".into(),
            name: "web".into(),
        };
        capacity.add_buffer(buffer(deployment.clone()), Timestamp::from_secs(0));
        let pods = [
            owned("web-abc12-1", "ReplicaSet", "web-abc12", Some("n1")),
            owned("web-abc12-2", "ReplicaSet", "web-abc12", None),
            // Another Deployment's ReplicaSet whose name starts alike.
            owned("web-api-x1-1", "ReplicaSet", "web-api-x1", Some("n1")),
        ];
        let resolved = capacity.resolve_scalables(pods.iter());
        assert_eq!(resolved.len(), 1);
        assert_eq!(resolved[0].reference, deployment);
        assert_eq!(
            (resolved[0].replicas, resolved[0].ready_replicas),
            (2, Some(1))
        );
        assert!(resolved[0].pod.is_some() && resolved[0].error.is_none());

        let missing = ScalableRef {
            api_group: "apps".into(),
            kind: "StatefulSet".into(),
            name: "db".into(),
        };
        let mut other = ClusterCapacity::default();
        other.add_buffer(buffer(missing), Timestamp::from_secs(0));
        let resolved = other.resolve_scalables(pods.iter());
        assert!(resolved[0].pod.is_none());
        assert!(
            resolved[0]
                .error
                .as_deref()
                .unwrap()
                .contains("StatefulSet default/db")
        );
    }

    #[test]
    fn buffer_templates_move_generation_only_when_the_shape_changes() {
        let mut capacity = ClusterCapacity::default();
        let b = buffer(ScalableRef {
            api_group: "apps".into(),
            kind: "ReplicaSet".into(),
            name: "web".into(),
        });
        let pod = owned("web-1", "ReplicaSet", "web", Some("n1"));
        assert_eq!(
            capacity.ensure_buffer_pod_template(&b, &pod),
            ("capacitybuffer-spare-pod-template".to_string(), 1)
        );
        assert_eq!(capacity.ensure_buffer_pod_template(&b, &pod).1, 1);
        let mut bigger = Pod::clone(&pod);
        bigger.requests = Resources::new(1000, 1 << 30);
        assert_eq!(
            capacity.ensure_buffer_pod_template(&b, &Arc::new(bigger)).1,
            2
        );
        let template = capacity
            .objects()
            .pod_template("default", "capacitybuffer-spare-pod-template");
        assert_eq!(template.unwrap().pod.requests.cpu_milli, 1000);
        assert!(template.unwrap().pod.node_name.is_none());
    }

    #[test]
    fn quota_usage_counts_the_selected_nodes() {
        let mut limits = BTreeMap::new();
        limits.insert("cpu".to_string(), Quantity::from_units(16));
        limits.insert("nodes".to_string(), Quantity::from_units(3));
        let quota = CapacityQuota {
            name: "team-a".into(),
            uid: String::new(),
            generation: 1,
            selector: Some(ferroscale_model::LabelSelector::from_labels([(
                "team", "a",
            )])),
            limits,
            conditions: Vec::new(),
        };
        let mut a = Node::new("a1", Resources::new(4000, 8 << 30));
        a.labels.insert("team".into(), "a".into());
        let b = Node::new("b1", Resources::new(8000, 8 << 30));
        let usage = quota_usage(&quota, [&a, &b].into_iter());
        assert_eq!(usage["cpu"], Quantity::from_units(4));
        assert_eq!(usage["nodes"], Quantity::from_units(1));
    }
}
