//! The simulated cluster behind the engine's [`ClusterApi`]: what the live binary reads from and
//! writes to the API server, answered by the in-memory [`Cluster`] at one simulated instant.
//!
//! The runner lends its cluster to a [`SimClusterApi`] for the length of one engine loop; every
//! write (taints, evictions, events, the status ConfigMap) is applied to the cluster at once and
//! logged, so the runner can put drains, refusals and rollbacks on the timeline afterwards.

use foldhash::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use ferroscale_core::cloud_node_controller::{LiveNode, NodeInitializationWrite, NodeObjectApi};
use ferroscale_core::events::Event;
use ferroscale_core::kubernetes::{
    ClusterApi, ClusterError, ClusterObjects, EvictionError, StatusConfigMap, WorkloadController,
};
use ferroscale_model::{
    CapacityBuffer, CapacityBufferStatus, CapacityObjects, Node, Pod, ProvisioningRequestStatus,
    ScalableObject, Taint, Timestamp,
};

use crate::capacity::{ConditionChange, NoSuchObject};
use crate::cluster::{Cluster, Eviction, EvictionRefusal};

/// A write the engine made to the cluster during one loop.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterAction {
    Tainted {
        node: String,
        taint: Taint,
        cordon: bool,
    },
    Untainted {
        node: String,
        taint_key: String,
        uncordon: bool,
    },
    Evicted(Eviction),
    /// An eviction the (simulated) API server refused.
    EvictionRefused {
        pod: String,
        node: Option<String>,
        reason: String,
    },
}

/// Everything the engine wrote during one loop, in call order.
#[derive(Debug, Clone, Default)]
pub struct ApiLog {
    pub actions: Vec<ClusterAction>,
    pub events: Vec<Event>,
    pub status: Option<StatusConfigMap>,
    /// Conditions of ProvisioningRequests and CapacityBuffers the status writes changed.
    pub conditions: Vec<ConditionChange>,
}

/// The cluster as the engine's [`ClusterApi`] sees it during one loop at `now`.
pub struct SimClusterApi<'c> {
    cluster: Mutex<&'c mut Cluster>,
    now: Timestamp,
    log: Mutex<ApiLog>,
}

/// Kinds of controllers whose existence is implied by the pods they own.
const WORKLOAD_KINDS: &[&str] = &["ReplicaSet", "ReplicationController", "StatefulSet", "Job"];

impl<'c> SimClusterApi<'c> {
    pub fn new(cluster: &'c mut Cluster, now: Timestamp) -> SimClusterApi<'c> {
        SimClusterApi {
            cluster: Mutex::new(cluster),
            now,
            log: Mutex::new(ApiLog::default()),
        }
    }

    fn cluster(&self) -> MutexGuard<'_, &'c mut Cluster> {
        // Every critical section only reads or applies one whole change, so the state behind a
        // poisoned lock is still consistent.
        self.cluster.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn log(&self) -> MutexGuard<'_, ApiLog> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the engine wrote; ends the loan of the cluster.
    pub fn into_log(self) -> ApiLog {
        self.log
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The objects Gather would read from the API server now.
pub fn gather_objects(cluster: &Cluster) -> ClusterObjects {
    let GatheredPods {
        pods,
        workloads: mut controllers,
        ..
    } = gathered_pods(cluster);
    controllers.extend(daemonset_controllers(cluster));
    let capacity = capacity_objects(cluster, &pods);
    ClusterObjects {
        nodes: cluster.node_objects(),
        controllers,
        pods,
        pdbs: cluster.pdbs_with_status(),
        daemonsets: cluster.daemonsets().to_vec(),
        namespaces: cluster.namespaces().to_vec(),
        priority_expander_config: None,
        volumes: cluster.storage().objects().clone(),
        dra: cluster.dra().objects().clone(),
        capacity,
        // The simulated cluster is read directly: never behind, everything readable.
        behind: Vec::new(),
        missing_permissions: Vec::new(),
    }
}

/// The live pods and the workload controllers implied from them, as Gather last handed them out:
/// the same shared list loop after loop while no pod changed (the generation of the cluster's pod
/// records did not move), as `ferroscale run`'s pod cache hands it out, so that the engine's kept
/// snapshot finds nothing to walk and no million `Arc`s are cloned and dropped per loop.
#[derive(Debug, Clone, Default)]
pub(crate) struct GatheredPods {
    generation: u64,
    pods: Arc<Vec<Arc<Pod>>>,
    workloads: Vec<WorkloadController>,
}

fn gathered_pods(cluster: &Cluster) -> GatheredPods {
    let generation = cluster.pods_generation();
    let mut kept = cluster.gathered_pods();
    if let Some(gathered) = kept.as_ref().filter(|g| g.generation == generation) {
        // Every debug build (every simulator test and scenario run by the tests) checks that an
        // unmoved generation means unchanged pods.
        #[cfg(debug_assertions)]
        {
            let fresh: Vec<Arc<Pod>> = cluster.live_pods().map(|r| r.pod.clone()).collect();
            debug_assert!(
                fresh.len() == gathered.pods.len()
                    && fresh
                        .iter()
                        .zip(gathered.pods.iter())
                        .all(|(a, b)| Arc::ptr_eq(a, b)),
                "a pod changed without moving the pod records' generation"
            );
            debug_assert!(
                workload_controllers(cluster) == gathered.workloads,
                "the implied controllers changed without moving the pod records' generation"
            );
        }
        return gathered.clone();
    }
    let pods: Arc<Vec<Arc<Pod>>> = Arc::new(cluster.live_pods().map(|r| r.pod.clone()).collect());
    let workloads = workload_controllers(cluster);
    let gathered = GatheredPods {
        generation,
        pods,
        workloads,
    };
    *kept = Some(gathered.clone());
    gathered
}

/// The capacity-API objects Gather reads, with every buffer's `scalableRef` resolved against the
/// live workloads.
fn capacity_objects(cluster: &Cluster, live: &[Arc<Pod>]) -> CapacityObjects {
    let capacity = cluster.capacity();
    if capacity.is_empty() {
        return CapacityObjects::default();
    }
    let mut objects = capacity.objects().clone();
    objects.scalables = capacity.resolve_scalables(live.iter());
    objects
}

/// Workload controllers exist as long as they own pods and the scenario has not deleted them (the
/// simulator has no Deployments or ReplicaSets of its own); their replicas are the number of live
/// pods they own plus the pods a `create` with a `rate` has still to make for them, as a
/// ReplicaSet's `spec.replicas` counts pods it has not created yet. DaemonSets come from the
/// scenario's objects ([`daemonset_controllers`]). A controller is listed where its first live
/// pod is, with that pod's reference's uid. The pods are counted by the owner id their records
/// hold: each distinct owner is read once, not every pod's reference.
fn workload_controllers(cluster: &Cluster) -> Vec<WorkloadController> {
    /// What an owner id stands for in this count.
    #[derive(Clone, Copy)]
    enum Seen {
        Not,
        /// Not a workload controller, or deleted.
        Skipped,
        Controller(usize),
    }
    let owners = cluster.owners();
    let mut seen = vec![Seen::Not; owners.len()];
    let mut by_key: HashMap<(&str, &str, &str), usize> = HashMap::default();
    let mut controllers: Vec<WorkloadController> = Vec::new();
    let mut counts: Vec<i32> = Vec::new();
    for record in cluster.live_pods() {
        let Some(id) = record.owner else {
            continue;
        };
        let Some(slot) = seen.get_mut(id as usize) else {
            continue;
        };
        let index = match *slot {
            Seen::Skipped => continue,
            Seen::Controller(index) => index,
            Seen::Not => {
                let Some(owner) = owners.get(id) else {
                    continue;
                };
                if !WORKLOAD_KINDS.contains(&owner.kind.as_str())
                    || cluster.owner_deleted(&owner.kind, &owner.namespace, &owner.name)
                {
                    *slot = Seen::Skipped;
                    continue;
                }
                let key = (
                    owner.kind.as_str(),
                    owner.namespace.as_str(),
                    owner.name.as_str(),
                );
                let index = *by_key.entry(key).or_insert_with(|| {
                    controllers.push(WorkloadController {
                        kind: owner.kind.clone(),
                        namespace: owner.namespace.clone(),
                        name: owner.name.clone(),
                        uid: owner.uid.clone(),
                        replicas: Some(0),
                    });
                    counts.push(0);
                    controllers.len() - 1
                });
                *slot = Seen::Controller(index);
                index
            }
        };
        counts[index] = counts[index].saturating_add(1);
    }
    for (controller, live) in controllers.iter_mut().zip(counts) {
        let announced =
            cluster.announced_pods(&controller.kind, &controller.namespace, &controller.name);
        let announced = i32::try_from(announced).unwrap_or(i32::MAX);
        controller.replicas = Some(live.saturating_add(announced));
    }
    #[cfg(debug_assertions)]
    debug_assert!(
        controllers == workload_controllers_by_scan(cluster),
        "the pod records' owner ids imply other controllers than the pods' references"
    );
    controllers
}

/// [`workload_controllers`] read from every live pod's controller reference: what the owner ids
/// must agree with (checked in debug builds, which every simulator test runs).
#[cfg(debug_assertions)]
fn workload_controllers_by_scan(cluster: &Cluster) -> Vec<WorkloadController> {
    let mut by_owner: HashMap<(&str, &str, &str), usize> = HashMap::default();
    let mut controllers: Vec<WorkloadController> = Vec::new();
    for record in cluster.live_pods() {
        let pod = &record.pod;
        let Some(owner) = pod.controller() else {
            continue;
        };
        if !WORKLOAD_KINDS.contains(&owner.kind.as_str()) || cluster.controller_deleted(pod) {
            continue;
        }
        let key = (
            owner.kind.as_str(),
            pod.namespace.as_str(),
            owner.name.as_str(),
        );
        let index = *by_owner.entry(key).or_insert_with(|| {
            controllers.push(WorkloadController {
                kind: owner.kind.clone(),
                namespace: pod.namespace.to_string(),
                name: owner.name.clone(),
                uid: owner.uid.clone(),
                replicas: Some(0),
            });
            controllers.len() - 1
        });
        let replicas = controllers[index].replicas.get_or_insert(0);
        *replicas = replicas.saturating_add(1);
    }
    for controller in &mut controllers {
        let announced =
            cluster.announced_pods(&controller.kind, &controller.namespace, &controller.name);
        let announced = i32::try_from(announced).unwrap_or(i32::MAX);
        controller.replicas = controller.replicas.map(|n| n.saturating_add(announced));
    }
    controllers
}

/// The scenario's DaemonSets as controllers.
fn daemonset_controllers(cluster: &Cluster) -> impl Iterator<Item = WorkloadController> + '_ {
    cluster.daemonsets().iter().map(|ds| WorkloadController {
        kind: "DaemonSet".to_string(),
        namespace: ds.namespace.clone(),
        name: ds.name.clone(),
        uid: ds.uid.clone(),
        replicas: None,
    })
}

fn node_not_found(node: &str) -> ClusterError {
    ClusterError::NotFound {
        kind: "Node",
        name: node.to_string(),
    }
}

#[async_trait]
impl ClusterApi for SimClusterApi<'_> {
    async fn gather(&self) -> Result<ClusterObjects, ClusterError> {
        Ok(gather_objects(&self.cluster()))
    }

    async fn gather_nodes(&self) -> Result<Vec<Arc<Node>>, ClusterError> {
        Ok(self.cluster().nodes().map(|n| n.node.clone()).collect())
    }

    async fn node(&self, name: &str) -> Result<Option<Arc<Node>>, ClusterError> {
        Ok(self.cluster().node(name).map(|n| n.node.clone()))
    }

    async fn pods_on_node(&self, node: &str) -> Result<Vec<Arc<Pod>>, ClusterError> {
        let cluster = self.cluster();
        let entry = cluster.node(node).ok_or_else(|| node_not_found(node))?;
        Ok(cluster
            .snapshot()
            .node(entry.id)
            .map(|info| info.pods.clone())
            .unwrap_or_default())
    }

    async fn taint_node(&self, node: &str, taint: Taint, cordon: bool) -> Result<(), ClusterError> {
        if !self.cluster().taint(node, taint.clone(), cordon) {
            return Err(node_not_found(node));
        }
        self.log().actions.push(ClusterAction::Tainted {
            node: node.to_string(),
            taint,
            cordon,
        });
        Ok(())
    }

    async fn untaint_node(
        &self,
        node: &str,
        taint_key: &str,
        uncordon: bool,
    ) -> Result<(), ClusterError> {
        if !self.cluster().untaint(node, taint_key, uncordon) {
            return Err(node_not_found(node));
        }
        self.log().actions.push(ClusterAction::Untainted {
            node: node.to_string(),
            taint_key: taint_key.to_string(),
            uncordon,
        });
        Ok(())
    }

    async fn evict_pod(
        &self,
        namespace: &str,
        name: &str,
        _grace_seconds: i64,
    ) -> Result<(), EvictionError> {
        let pod = format!("{namespace}/{name}");
        let (result, node) = {
            let mut cluster = self.cluster();
            let node = cluster
                .live_pod(namespace, name)
                .and_then(|r| r.pod.node_name.as_deref().map(str::to_string));
            (cluster.evict(namespace, name, self.now), node)
        };
        match result {
            Ok(eviction) => {
                self.log().actions.push(ClusterAction::Evicted(eviction));
                Ok(())
            }
            Err(EvictionRefusal::NotFound) => Err(EvictionError::NotFound { pod }),
            Err(EvictionRefusal::DisruptionBudget { pdb, allowed }) => {
                let message =
                    format!("PodDisruptionBudget {pdb} allows {allowed} disruption(s) now");
                self.log().actions.push(ClusterAction::EvictionRefused {
                    pod: pod.clone(),
                    node,
                    reason: message.clone(),
                });
                Err(EvictionError::DisruptionBudget { pod, message })
            }
        }
    }

    async fn pod_status(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Pod>>, ClusterError> {
        Ok(self
            .cluster()
            .live_pod(namespace, name)
            .map(|r| r.pod.clone()))
    }

    async fn publish_events(&self, events: &[Event]) {
        self.log().events.extend_from_slice(events);
    }

    async fn write_status(&self, status: &StatusConfigMap) -> Result<(), ClusterError> {
        self.log().status = Some(status.clone());
        Ok(())
    }

    async fn delete_status(&self, _namespace: &str, _name: &str) -> Result<(), ClusterError> {
        self.log().status = None;
        Ok(())
    }

    async fn update_provisioning_request_status(
        &self,
        namespace: &str,
        name: &str,
        status: &ProvisioningRequestStatus,
    ) -> Result<(), ClusterError> {
        let changes = self
            .cluster()
            .capacity_mut()
            .update_provisioning_request_status(namespace, name, status, self.now)
            .map_err(no_such_object)?;
        self.log().conditions.extend(changes);
        Ok(())
    }

    async fn update_capacity_buffer_status(
        &self,
        namespace: &str,
        name: &str,
        status: &CapacityBufferStatus,
    ) -> Result<(), ClusterError> {
        let changes = self
            .cluster()
            .capacity_mut()
            .update_buffer_status(namespace, name, status, self.now)
            .map_err(no_such_object)?;
        self.log().conditions.extend(changes);
        Ok(())
    }

    async fn ensure_buffer_pod_template(
        &self,
        buffer: &CapacityBuffer,
        scalable: &ScalableObject,
    ) -> Result<(String, i64), ClusterError> {
        let Some(pod) = &scalable.pod else {
            return Err(ClusterError::Api(format!(
                "CapacityBuffer {}: no pod shape for {} {}/{}: {}",
                buffer.key(),
                scalable.reference.kind,
                scalable.namespace,
                scalable.reference.name,
                scalable.error.as_deref().unwrap_or("not resolved")
            )));
        };
        Ok(self
            .cluster()
            .capacity_mut()
            .ensure_buffer_pod_template(buffer, pod))
    }
}

/// The cloud node controller's writes (docs/cloud-node-controller.md), applied at once: the
/// simulated API server has one version of each Node per loop, and nothing changes a Node
/// between the controller's read and its write.
#[async_trait]
impl NodeObjectApi for SimClusterApi<'_> {
    async fn read_node(&self, name: &str) -> Result<Option<LiveNode>, ClusterError> {
        Ok(self.cluster().node(name).map(|entry| LiveNode {
            node: (*entry.node).clone(),
            resource_version: SIMULATED_RESOURCE_VERSION.to_string(),
        }))
    }

    async fn initialize_node(&self, write: &NodeInitializationWrite) -> Result<(), ClusterError> {
        let now = self.now;
        if self.cluster().initialize_node(
            &write.node,
            &write.uid,
            &write.add_labels,
            &write.remove_taint,
            now,
        ) {
            Ok(())
        } else {
            Err(node_not_found(&write.node))
        }
    }

    async fn delete_node(
        &self,
        name: &str,
        uid: &str,
        _resource_version: &str,
    ) -> Result<(), ClusterError> {
        let now = self.now;
        let mut cluster = self.cluster();
        match cluster.node(name) {
            Some(entry) if entry.node.uid == uid => {
                cluster.remove_node(name, now);
                Ok(())
            }
            Some(_) => Err(ClusterError::Conflict {
                kind: "Node",
                name: name.to_string(),
                message: format!("the Node's uid is no longer {uid}"),
            }),
            None => Err(node_not_found(name)),
        }
    }
}

/// The `resourceVersion` every simulated Node reads with.
const SIMULATED_RESOURCE_VERSION: &str = "1";

fn no_such_object(e: NoSuchObject) -> ClusterError {
    ClusterError::NotFound {
        kind: e.kind,
        name: e.name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::{LabelSelector, OwnerRef, PodDisruptionBudget, Resources};
    use futures::executor::block_on;

    fn owned_pod(name: &str, kind: &str, owner: &str) -> Pod {
        let mut pod = Pod::new("default", name);
        pod.requests = Resources::new(100, 0);
        pod.labels.insert("app".into(), owner.into());
        pod.owner_references.push(OwnerRef {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: owner.into(),
            uid: format!("uid-{owner}"),
            controller: true,
        });
        pod
    }

    fn cluster() -> Cluster {
        let mut cluster = Cluster::new(Vec::new());
        let mut node = Node::new("n1", Resources::new(4000, 8 << 30));
        node.allocatable.pods = 110;
        cluster.add_node(node, None);
        cluster.set_pdbs(vec![PodDisruptionBudget {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(LabelSelector::from_labels([("app", "web")])),
            max_unavailable: Some(ferroscale_model::IntOrPercent::Int(1)),
            ..PodDisruptionBudget::default()
        }]);
        for i in 0..3 {
            let pod = owned_pod(&format!("web-{i}"), "ReplicaSet", "web");
            cluster.add_pod(pod, Timestamp::from_secs(0), None);
        }
        cluster.add_pod(
            owned_pod("db-0", "StatefulSet", "db"),
            Timestamp::from_secs(0),
            None,
        );
        cluster.add_pod(Pod::new("default", "bare"), Timestamp::from_secs(0), None);
        cluster.schedule(Timestamp::from_secs(0));
        cluster
    }

    #[test]
    fn gather_implies_controllers_from_their_pods_and_computes_budgets() {
        let cluster = cluster();
        let objects = gather_objects(&cluster);
        assert_eq!(objects.nodes.len(), 1);
        assert_eq!(objects.pods.len(), 5);
        let replicas: Vec<(&str, &str, Option<i32>)> = objects
            .controllers
            .iter()
            .map(|c| (c.kind.as_str(), c.name.as_str(), c.replicas))
            .collect();
        assert_eq!(
            replicas,
            [
                ("ReplicaSet", "web", Some(3)),
                ("StatefulSet", "db", Some(1))
            ]
        );
        assert_eq!(objects.pdbs[0].disruptions_allowed, Some(1));
    }

    /// Gather hands out the same pod list while no pod changed, as the live pod cache does, and a
    /// new one with the changed pod as soon as one did.
    #[test]
    fn gather_shares_the_pod_list_until_a_pod_changes() {
        let mut cluster = cluster();
        let first = gather_objects(&cluster);
        let again = gather_objects(&cluster);
        assert!(Arc::ptr_eq(&first.pods, &again.pods));
        assert_eq!(first.controllers, again.controllers);

        assert_eq!(cluster.touch_pods(5), 1);
        let touched = gather_objects(&cluster);
        assert!(!Arc::ptr_eq(&first.pods, &touched.pods));
        assert_eq!(touched.pods.len(), first.pods.len());
        let changed = touched
            .pods
            .iter()
            .zip(first.pods.iter())
            .filter(|(now, before)| !Arc::ptr_eq(now, before))
            .count();
        assert_eq!(changed, 1);
        // A controller deleted by the scenario is gone from the next gather although no pod
        // record changed.
        cluster.delete_controller("ReplicaSet", "default", "web");
        let after = gather_objects(&cluster);
        assert!(after.controllers.iter().all(|c| c.name != "web"));
    }

    #[test]
    fn writes_are_applied_and_logged() {
        let mut cluster = cluster();
        let api = SimClusterApi::new(&mut cluster, Timestamp::from_secs(60));
        let taint = Taint::new(
            ferroscale_model::taints::TO_BE_DELETED,
            "60",
            ferroscale_model::TaintEffect::NoSchedule,
        );
        block_on(api.taint_node("n1", taint, true)).unwrap();
        assert!(
            block_on(api.taint_node(
                "nope",
                Taint::new("k", "v", ferroscale_model::TaintEffect::NoSchedule),
                false
            ))
            .is_err()
        );
        block_on(api.evict_pod("default", "web-0", 30)).unwrap();
        // The budget allows one disruption; the re-created pod is still pending.
        let refused = block_on(api.evict_pod("default", "web-1", 30));
        assert!(matches!(
            refused,
            Err(EvictionError::DisruptionBudget { .. })
        ));
        assert!(matches!(
            block_on(api.evict_pod("default", "gone", 30)),
            Err(EvictionError::NotFound { .. })
        ));
        assert!(
            block_on(api.pod_status("default", "web-0"))
                .unwrap()
                .is_none()
        );
        assert_eq!(block_on(api.pods_on_node("n1")).unwrap().len(), 4);
        let log = api.into_log();
        assert!(matches!(
            &log.actions[0],
            ClusterAction::Tainted { cordon: true, .. }
        ));
        assert!(matches!(&log.actions[1], ClusterAction::Evicted(e) if e.replacement.is_some()));
        assert!(matches!(
            &log.actions[2],
            ClusterAction::EvictionRefused { .. }
        ));
        assert_eq!(cluster.pending_count(), 1);
    }

    #[test]
    fn capacity_writes_are_read_back_by_the_next_gather() {
        use ferroscale_model::{
            ApiCondition, CapacityBufferSpec, ConditionStatus, ProvisioningRequest, ScalableRef,
        };
        let mut cluster = cluster();
        cluster.capacity_mut().add_provisioning_request(
            ProvisioningRequest {
                namespace: "default".into(),
                name: "batch".into(),
                uid: String::new(),
                generation: 1,
                creation_time: Timestamp::from_secs(0),
                deleting: false,
                class: ferroscale_model::CHECK_CAPACITY_CLASS.into(),
                pod_sets: Vec::new(),
                parameters: Default::default(),
                status: Default::default(),
            },
            Timestamp::from_secs(0),
        );
        let web = ScalableRef {
            api_group: "apps".into(),
            kind: "ReplicaSet".into(),
            name: "web".into(),
        };
        cluster.capacity_mut().add_buffer(
            CapacityBuffer {
                namespace: "default".into(),
                name: "spare".into(),
                uid: String::new(),
                generation: 1,
                creation_time: Timestamp::from_secs(0),
                spec: CapacityBufferSpec {
                    scalable_ref: Some(web.clone()),
                    replicas: Some(2),
                    ..Default::default()
                },
                status: Default::default(),
            },
            Timestamp::from_secs(0),
        );
        let api = SimClusterApi::new(&mut cluster, Timestamp::from_secs(60));
        let objects = block_on(api.gather()).unwrap();
        let scalable = objects.capacity.scalable("default", &web).unwrap().clone();
        assert_eq!(scalable.replicas, 3);
        let buffer = objects.capacity.buffers[0].clone();
        let (template, generation) =
            block_on(api.ensure_buffer_pod_template(&buffer, &scalable)).unwrap();
        let status = ProvisioningRequestStatus {
            conditions: vec![ApiCondition {
                type_: "Provisioned".into(),
                status: ConditionStatus::True,
                reason: "CapacityIsFound".into(),
                ..ApiCondition::default()
            }],
            ..Default::default()
        };
        block_on(api.update_provisioning_request_status("default", "batch", &status)).unwrap();
        let buffer_status = CapacityBufferStatus {
            pod_template_ref: Some(template.clone()),
            replicas: Some(2),
            pod_template_generation: Some(generation),
            ..Default::default()
        };
        block_on(api.update_capacity_buffer_status("default", "spare", &buffer_status)).unwrap();
        assert!(matches!(
            block_on(api.update_capacity_buffer_status("default", "gone", &buffer_status)),
            Err(ClusterError::NotFound {
                kind: "CapacityBuffer",
                ..
            })
        ));

        let next = block_on(api.gather()).unwrap();
        assert_eq!(next.capacity.provisioning_requests[0].status, status);
        assert_eq!(next.capacity.buffers[0].status, buffer_status);
        let read = next.capacity.pod_template("default", &template).unwrap();
        assert_eq!(read.pod.requests.cpu_milli, 100);
        let log = api.into_log();
        assert_eq!(log.conditions.len(), 1);
        assert_eq!(log.conditions[0].type_, "Provisioned");
    }
}
