//! What a live loop gathered ([`LoopCapture`]), written back as Kubernetes objects: as the JSON
//! of the debugging snapshot (`/snapshotz`) and as a scenario file that `ferroscale simulate` and
//! `explain` replay (docs/scenario.md, "Replaying a live cluster").
//!
//! The model keeps what the engine decides with, not the objects as the API server stored them,
//! so the objects written here carry exactly that: a pod's effective requests become one
//! container's requests, a volume keeps its kind (host path, `emptyDir`, claim, other), and
//! fields the engine never reads are not written. Reading the objects back gives the same model
//! (checked by this module's tests).

use std::collections::BTreeSet;
use std::time::Duration;

use ferroscale_core::autoscaler::{LoopCapture, LoopOutcome};
use ferroscale_core::cluster_state::status::format_rfc3339;
use ferroscale_core::kubernetes::ClusterObjects;
use ferroscale_model::labels::{LabelOperator, LabelSelector, NodeOperator, NodeRequirement};
use ferroscale_model::pod::{
    NodeInclusionPolicy, PodAffinityTerm, PodPhase, Protocol, RestartPolicy, UnsatisfiableAction,
    VolumeSource,
};
use ferroscale_model::resources::CPU;
use ferroscale_model::taints::TolerationOperator;
use ferroscale_model::time::format_duration;
use ferroscale_model::{
    AccessMode, ClaimPhase, ConditionStatus, CsiNode, DaemonSet, IntOrPercent, Labels, Namespace,
    Node, NodeSelector, PersistentVolume, PersistentVolumeClaim, Pod, PodDisruptionBudget,
    Resources, StorageClass, Timestamp, VolumeBindingMode, VolumePhase,
};
use ferroscale_model::{
    AllocationMode, ClaimSpec, DeviceAttribute, DeviceClass, DeviceRequestKind, DeviceScope,
    ExactDeviceRequest, PodClaimSource, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use serde_json::{Map, Value, json};

/// Workload kinds whose pods scale-down may move only while the controller exists.
const CONTROLLER_KINDS: [&str; 4] = ["ReplicationController", "ReplicaSet", "Job", "StatefulSet"];

/// Flags of `run` that make no sense in a replay: the groups come from the scenario, and a replay
/// exists to act (in simulation) rather than to plan only.
const NOT_REPLAYED: [&str; 6] = [
    "dry-run",
    "cloud-provider",
    "leader-elect",
    "nodes",
    "node-group-auto-discovery",
    "namespace",
];

/// How timestamps are written: as they were, or moved so that the captured loop's time is the
/// simulation's start (time 0).
#[derive(Debug, Clone, Copy)]
pub struct TimeBase {
    /// Subtracted from every timestamp, in milliseconds.
    offset_millis: i64,
}

impl TimeBase {
    /// Times as they were.
    pub const ABSOLUTE: TimeBase = TimeBase { offset_millis: 0 };

    /// Times relative to `origin`, which becomes the epoch (the simulation's start).
    pub fn relative_to(origin: Timestamp) -> TimeBase {
        TimeBase {
            offset_millis: origin.millis(),
        }
    }

    fn write(&self, t: Timestamp) -> String {
        format_rfc3339(Timestamp(t.millis().saturating_sub(self.offset_millis)))
    }
}

fn labels(map: &Labels) -> Value {
    Value::Object(
        map.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

/// A resource list as Kubernetes writes it: CPU in millicores, everything else in units.
pub fn resource_list(resources: &Resources) -> Value {
    Value::Object(
        resources
            .iter()
            .map(|(name, value)| {
                let quantity = if name == CPU {
                    format!("{value}m")
                } else {
                    value.to_string()
                };
                (name.to_string(), Value::String(quantity))
            })
            .collect(),
    )
}

fn status_word(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

/// Inserts `value` under `key` unless it is empty (an empty string, list or map, or null).
fn put(map: &mut Map<String, Value>, key: &str, value: Value) {
    let empty = match &value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    if !empty {
        map.insert(key.to_string(), value);
    }
}

/// A `v1` Node.
pub fn node_object(node: &Node, time: TimeBase) -> Value {
    let mut metadata = Map::new();
    put(&mut metadata, "name", json!(node.name));
    put(&mut metadata, "uid", json!(node.uid));
    put(&mut metadata, "labels", labels(&node.labels));
    put(&mut metadata, "annotations", labels(&node.annotations));
    metadata.insert(
        "creationTimestamp".into(),
        json!(time.write(node.creation_time)),
    );
    let mut spec = Map::new();
    let taints: Vec<Value> = node
        .taints
        .iter()
        .map(|t| {
            let mut taint = Map::new();
            taint.insert("key".into(), json!(t.key));
            put(&mut taint, "value", json!(t.value));
            taint.insert("effect".into(), json!(t.effect.as_str()));
            if let Some(added) = t.time_added {
                taint.insert("timeAdded".into(), json!(time.write(added)));
            }
            Value::Object(taint)
        })
        .collect();
    put(&mut spec, "taints", Value::Array(taints));
    if node.unschedulable {
        spec.insert("unschedulable".into(), json!(true));
    }
    put(&mut spec, "providerID", json!(node.provider_id));
    let transition = node.conditions.last_transition.map(|t| time.write(t));
    let condition = |kind: &str, status: &str| {
        let mut condition = json!({"type": kind, "status": status});
        if let Some(at) = &transition {
            condition["lastTransitionTime"] = json!(at);
        }
        condition
    };
    let mut conditions = Vec::new();
    if let Some(ready) = node.conditions.ready {
        conditions.push(condition("Ready", status_word(ready)));
    }
    if node.conditions.disk_pressure {
        conditions.push(condition("DiskPressure", "True"));
    }
    if node.conditions.network_unavailable {
        conditions.push(condition("NetworkUnavailable", "True"));
    }
    if node.conditions.suspended {
        conditions.push(json!({"type": "Suspended", "status": "True"}));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec,
        "status": {
            "capacity": resource_list(&node.capacity),
            "allocatable": resource_list(&node.allocatable),
            "conditions": conditions,
        },
    })
}

fn label_selector(selector: &LabelSelector) -> Value {
    let mut out = Map::new();
    put(&mut out, "matchLabels", labels(&selector.match_labels));
    let expressions: Vec<Value> = selector
        .match_expressions
        .iter()
        .map(|r| {
            let operator = match r.operator {
                LabelOperator::In => "In",
                LabelOperator::NotIn => "NotIn",
                LabelOperator::Exists => "Exists",
                LabelOperator::DoesNotExist => "DoesNotExist",
            };
            let mut requirement = json!({"key": r.key, "operator": operator});
            if !r.values.is_empty() {
                requirement["values"] = json!(r.values);
            }
            requirement
        })
        .collect();
    put(&mut out, "matchExpressions", Value::Array(expressions));
    Value::Object(out)
}

fn node_requirements(requirements: &[NodeRequirement]) -> Value {
    Value::Array(
        requirements
            .iter()
            .map(|r| {
                let operator = match r.operator {
                    NodeOperator::In => "In",
                    NodeOperator::NotIn => "NotIn",
                    NodeOperator::Exists => "Exists",
                    NodeOperator::DoesNotExist => "DoesNotExist",
                    NodeOperator::Gt => "Gt",
                    NodeOperator::Lt => "Lt",
                };
                let mut requirement = json!({"key": r.key, "operator": operator});
                if !r.values.is_empty() {
                    requirement["values"] = json!(r.values);
                }
                requirement
            })
            .collect(),
    )
}

fn affinity_term(term: &PodAffinityTerm) -> Value {
    let mut out = Map::new();
    if let Some(selector) = &term.label_selector {
        out.insert("labelSelector".into(), label_selector(selector));
    }
    put(&mut out, "namespaces", json!(term.namespaces));
    if let Some(selector) = &term.namespace_selector {
        out.insert("namespaceSelector".into(), label_selector(selector));
    }
    out.insert("topologyKey".into(), json!(term.topology_key));
    Value::Object(out)
}

fn policy(policy: NodeInclusionPolicy) -> &'static str {
    match policy {
        NodeInclusionPolicy::Honor => "Honor",
        NodeInclusionPolicy::Ignore => "Ignore",
    }
}

/// A pod's `spec` (also a DaemonSet's pod template spec). Its effective requests become the
/// requests of a single container, which carries the host ports too.
fn pod_spec(pod: &Pod) -> Map<String, Value> {
    let mut container = Map::new();
    container.insert("name".into(), json!("workload"));
    let requests = resource_list(&pod.requests);
    if requests.as_object().is_some_and(|r| !r.is_empty()) {
        container.insert("resources".into(), json!({"requests": requests}));
    }
    let ports: Vec<Value> = pod
        .host_ports
        .iter()
        .map(|p| {
            let protocol = match p.protocol {
                Protocol::Tcp => "TCP",
                Protocol::Udp => "UDP",
                Protocol::Sctp => "SCTP",
            };
            let mut port =
                json!({"containerPort": p.port, "hostPort": p.port, "protocol": protocol});
            if !p.host_ip.is_empty() {
                port["hostIP"] = json!(p.host_ip);
            }
            port
        })
        .collect();
    put(&mut container, "ports", Value::Array(ports));

    let mut spec = Map::new();
    spec.insert("containers".into(), json!([container]));
    if let Some(priority) = pod.priority {
        spec.insert("priority".into(), json!(priority));
    }
    put(&mut spec, "schedulerName", json!(pod.scheduler_name));
    if let Some(node) = &pod.node_name {
        spec.insert("nodeName".into(), json!(node));
    }
    let restart = match pod.restart_policy {
        RestartPolicy::Always => "Always",
        RestartPolicy::OnFailure => "OnFailure",
        RestartPolicy::Never => "Never",
    };
    spec.insert("restartPolicy".into(), json!(restart));
    if let Some(grace) = pod.termination_grace_seconds {
        spec.insert("terminationGracePeriodSeconds".into(), json!(grace));
    }
    put(&mut spec, "nodeSelector", labels(&pod.node_selector));
    let mut affinity = Map::new();
    if let Some(selector) = &pod.required_node_affinity {
        affinity.insert(
            "nodeAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": node_selector(selector)}),
        );
    }
    for (key, terms) in [
        ("podAffinity", &pod.pod_affinity),
        ("podAntiAffinity", &pod.pod_anti_affinity),
    ] {
        if !terms.is_empty() {
            let terms: Vec<Value> = terms.iter().map(affinity_term).collect();
            affinity.insert(
                key.into(),
                json!({"requiredDuringSchedulingIgnoredDuringExecution": terms}),
            );
        }
    }
    put(&mut spec, "affinity", Value::Object(affinity));
    let tolerations: Vec<Value> = pod
        .tolerations
        .iter()
        .map(|t| {
            let mut toleration = Map::new();
            put(&mut toleration, "key", json!(t.key));
            let operator = match t.operator {
                TolerationOperator::Equal => "Equal",
                TolerationOperator::Exists => "Exists",
            };
            toleration.insert("operator".into(), json!(operator));
            put(&mut toleration, "value", json!(t.value));
            if let Some(effect) = t.effect {
                toleration.insert("effect".into(), json!(effect.as_str()));
            }
            Value::Object(toleration)
        })
        .collect();
    put(&mut spec, "tolerations", Value::Array(tolerations));
    let spread: Vec<Value> = pod
        .topology_spread
        .iter()
        .map(|c| {
            let mut constraint = json!({
                "maxSkew": c.max_skew,
                "topologyKey": c.topology_key,
                "whenUnsatisfiable": match c.when_unsatisfiable {
                    UnsatisfiableAction::DoNotSchedule => "DoNotSchedule",
                    UnsatisfiableAction::ScheduleAnyway => "ScheduleAnyway",
                },
                "nodeAffinityPolicy": policy(c.node_affinity_policy),
                "nodeTaintsPolicy": policy(c.node_taints_policy),
            });
            if let Some(selector) = &c.label_selector {
                constraint["labelSelector"] = label_selector(selector);
            }
            if let Some(domains) = c.min_domains {
                constraint["minDomains"] = json!(domains);
            }
            constraint
        })
        .collect();
    put(&mut spec, "topologySpreadConstraints", Value::Array(spread));
    let volumes: Vec<Value> = pod
        .volumes
        .iter()
        .map(|v| match &v.source {
            VolumeSource::HostPath => json!({"name": v.name, "hostPath": {"path": "/"}}),
            VolumeSource::EmptyDir { memory_medium } => {
                let medium = if *memory_medium { "Memory" } else { "" };
                json!({"name": v.name, "emptyDir": {"medium": medium}})
            }
            VolumeSource::PersistentVolumeClaim { claim_name } => {
                json!({"name": v.name, "persistentVolumeClaim": {"claimName": claim_name}})
            }
            VolumeSource::Ephemeral => {
                json!({"name": v.name, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
            }
            VolumeSource::Csi { driver } => json!({"name": v.name, "csi": {"driver": driver}}),
            VolumeSource::Other => json!({"name": v.name, "configMap": {"name": v.name}}),
        })
        .collect();
    put(&mut spec, "volumes", Value::Array(volumes));
    let claims: Vec<Value> = pod
        .resource_claims
        .iter()
        .map(|c| match &c.source {
            PodClaimSource::Claim(name) => json!({"name": c.name, "resourceClaimName": name}),
            PodClaimSource::Template(name) => {
                json!({"name": c.name, "resourceClaimTemplateName": name})
            }
        })
        .collect();
    put(&mut spec, "resourceClaims", Value::Array(claims));
    spec
}

fn object_metadata(
    namespace: &str,
    name: &str,
    uid: &str,
    object_labels: &Labels,
    annotations: &Labels,
) -> Map<String, Value> {
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name));
    metadata.insert("namespace".into(), json!(namespace));
    put(&mut metadata, "uid", json!(uid));
    put(&mut metadata, "labels", labels(object_labels));
    put(&mut metadata, "annotations", labels(annotations));
    metadata
}

/// A `v1` Pod.
pub fn pod_object(pod: &Pod, time: TimeBase) -> Value {
    let mut metadata = object_metadata(
        &pod.namespace,
        &pod.name,
        &pod.uid,
        &pod.labels,
        &pod.annotations,
    );
    let owners: Vec<Value> = pod
        .owner_references
        .iter()
        .map(|o| {
            json!({"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid,
                   "controller": o.controller})
        })
        .collect();
    put(&mut metadata, "ownerReferences", Value::Array(owners));
    metadata.insert(
        "creationTimestamp".into(),
        json!(time.write(pod.creation_time)),
    );
    if let Some(deleted) = pod.deletion_time {
        metadata.insert("deletionTimestamp".into(), json!(time.write(deleted)));
    }
    let phase = match pod.phase {
        PodPhase::Pending => "Pending",
        PodPhase::Running => "Running",
        PodPhase::Succeeded => "Succeeded",
        PodPhase::Failed => "Failed",
        PodPhase::Unknown => "Unknown",
    };
    let mut status = Map::new();
    status.insert("phase".into(), json!(phase));
    if let Some(nominated) = &pod.nominated_node_name {
        status.insert("nominatedNodeName".into(), json!(nominated));
    }
    if let Some(condition) = &pod.scheduled_condition {
        let mut scheduled =
            json!({"type": "PodScheduled", "status": status_word(condition.status)});
        if !condition.reason.is_empty() {
            scheduled["reason"] = json!(condition.reason);
        }
        if let Some(at) = condition.last_transition {
            scheduled["lastTransitionTime"] = json!(time.write(at));
        }
        status.insert("conditions".into(), json!([scheduled]));
    }
    let claim_statuses: Vec<Value> = pod
        .resource_claim_statuses
        .iter()
        .map(|s| match &s.claim_name {
            Some(claim) => json!({"name": s.name, "resourceClaimName": claim}),
            None => json!({"name": s.name}),
        })
        .collect();
    if !claim_statuses.is_empty() {
        status.insert("resourceClaimStatuses".into(), Value::Array(claim_statuses));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": pod_spec(pod),
        "status": status,
    })
}

fn int_or_percent(value: IntOrPercent) -> Value {
    match value {
        IntOrPercent::Int(n) => json!(n),
        IntOrPercent::Percent(p) => json!(format!("{p}%")),
    }
}

/// A `policy/v1` PodDisruptionBudget, with the disruptions the controller last allowed.
pub fn pdb_object(pdb: &PodDisruptionBudget) -> Value {
    let metadata = object_metadata(
        &pdb.namespace,
        &pdb.name,
        &pdb.uid,
        &Labels::new(),
        &Labels::new(),
    );
    let mut spec = Map::new();
    if let Some(selector) = &pdb.selector {
        spec.insert("selector".into(), label_selector(selector));
    }
    if let Some(min) = pdb.min_available {
        spec.insert("minAvailable".into(), int_or_percent(min));
    }
    if let Some(max) = pdb.max_unavailable {
        spec.insert("maxUnavailable".into(), int_or_percent(max));
    }
    let mut object = json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata,
        "spec": spec,
    });
    if let Some(allowed) = pdb.disruptions_allowed {
        object["status"] = json!({"disruptionsAllowed": allowed, "currentHealthy": 0,
                                  "desiredHealthy": 0, "expectedPods": 0});
    }
    object
}

/// An `apps/v1` DaemonSet whose pod template is the DaemonSet's model pod.
pub fn daemonset_object(daemonset: &DaemonSet, time: TimeBase) -> Value {
    let mut metadata = object_metadata(
        &daemonset.namespace,
        &daemonset.name,
        &daemonset.uid,
        &daemonset.labels,
        &Labels::new(),
    );
    metadata.insert(
        "creationTimestamp".into(),
        json!(time.write(daemonset.creation_time)),
    );
    let template = &daemonset.pod_template;
    let mut template_metadata = Map::new();
    put(&mut template_metadata, "labels", labels(&template.labels));
    put(
        &mut template_metadata,
        "annotations",
        labels(&template.annotations),
    );
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": labels(&template.labels)},
            "template": {"metadata": template_metadata, "spec": pod_spec(template)},
        },
    })
}

/// A `v1` Namespace.
pub fn namespace_object(namespace: &Namespace) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(namespace.name));
    put(&mut metadata, "labels", labels(&namespace.labels));
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})
}

fn access_modes(modes: &[AccessMode]) -> Value {
    Value::Array(
        modes
            .iter()
            .map(|m| {
                json!(match m {
                    AccessMode::ReadWriteOnce => "ReadWriteOnce",
                    AccessMode::ReadOnlyMany => "ReadOnlyMany",
                    AccessMode::ReadWriteMany => "ReadWriteMany",
                    AccessMode::ReadWriteOncePod => "ReadWriteOncePod",
                })
            })
            .collect(),
    )
}

fn node_selector(selector: &NodeSelector) -> Value {
    let terms: Vec<Value> = selector
        .terms
        .iter()
        .map(|t| {
            let mut term = Map::new();
            put(
                &mut term,
                "matchExpressions",
                node_requirements(&t.match_expressions),
            );
            put(&mut term, "matchFields", node_requirements(&t.match_fields));
            Value::Object(term)
        })
        .collect();
    json!({"nodeSelectorTerms": terms})
}

/// A `v1` PersistentVolumeClaim with what the volume filters read (and its pod owner by uid,
/// for generic ephemeral volumes).
pub fn claim_object(claim: &PersistentVolumeClaim) -> Value {
    let mut metadata = object_metadata(
        &claim.namespace,
        &claim.name,
        &claim.uid,
        &Labels::new(),
        &Labels::new(),
    );
    if let Some(node) = &claim.selected_node {
        metadata.insert(
            "annotations".into(),
            json!({ ferroscale_model::volumes::SELECTED_NODE: node }),
        );
    }
    let owners: Vec<Value> = claim
        .owner_uids
        .iter()
        .map(|uid| json!({"apiVersion": "v1", "kind": "Pod", "name": "", "uid": uid}))
        .collect();
    put(&mut metadata, "ownerReferences", Value::Array(owners));
    let mut spec = Map::new();
    put(&mut spec, "accessModes", access_modes(&claim.access_modes));
    if let Some(class) = &claim.storage_class_name {
        spec.insert("storageClassName".into(), json!(class));
    }
    if let Some(volume) = &claim.volume_name {
        spec.insert("volumeName".into(), json!(volume));
    }
    spec.insert(
        "resources".into(),
        json!({"requests": {"storage": claim.requested_storage.to_string()}}),
    );
    let phase = match claim.phase {
        ClaimPhase::Pending => "Pending",
        ClaimPhase::Bound => "Bound",
        ClaimPhase::Lost => "Lost",
    };
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase},
    })
}

/// A `v1` PersistentVolume. Its source is written as CSI when it has a driver, else as a local
/// volume (the simulation reads neither beyond the driver).
pub fn volume_object(volume: &PersistentVolume) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(volume.name));
    put(&mut metadata, "labels", labels(&volume.labels));
    let mut spec = Map::new();
    spec.insert(
        "capacity".into(),
        json!({"storage": volume.capacity_storage.to_string()}),
    );
    put(&mut spec, "accessModes", access_modes(&volume.access_modes));
    if let Some(class) = &volume.storage_class_name {
        spec.insert("storageClassName".into(), json!(class));
    }
    match &volume.csi_driver {
        Some(driver) => {
            spec.insert(
                "csi".into(),
                json!({"driver": driver, "volumeHandle": volume.name}),
            );
        }
        None => {
            spec.insert("local".into(), json!({"path": "/"}));
        }
    }
    if let Some(claim) = &volume.claim_ref {
        let mut reference = Map::new();
        reference.insert("namespace".into(), json!(claim.namespace));
        reference.insert("name".into(), json!(claim.name));
        put(&mut reference, "uid", json!(claim.uid));
        spec.insert("claimRef".into(), Value::Object(reference));
    }
    if let Some(affinity) = &volume.node_affinity {
        spec.insert(
            "nodeAffinity".into(),
            json!({"required": node_selector(affinity)}),
        );
    }
    let phase = match volume.phase {
        VolumePhase::Pending => "Pending",
        VolumePhase::Available => "Available",
        VolumePhase::Bound => "Bound",
        VolumePhase::Released => "Released",
        VolumePhase::Failed => "Failed",
    };
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase},
    })
}

/// A `storage.k8s.io/v1` StorageClass.
pub fn storage_class_object(class: &StorageClass) -> Value {
    let mode = match class.binding_mode {
        VolumeBindingMode::Immediate => "Immediate",
        VolumeBindingMode::WaitForFirstConsumer => "WaitForFirstConsumer",
    };
    let mut object = json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": class.name},
        "provisioner": class.provisioner,
        "volumeBindingMode": mode,
    });
    if !class.allowed_topologies.is_empty() {
        object["allowedTopologies"] = Value::Array(
            class
                .allowed_topologies
                .iter()
                .map(|t| {
                    let expressions: Vec<Value> = t
                        .requirements
                        .iter()
                        .map(|r| json!({"key": r.key, "values": r.values}))
                        .collect();
                    json!({"matchLabelExpressions": expressions})
                })
                .collect(),
        );
    }
    object
}

/// `{cel: {expression}}` selectors.
fn cel_selectors(selectors: &[String]) -> Value {
    Value::Array(
        selectors
            .iter()
            .map(|e| json!({"cel": {"expression": e}}))
            .collect(),
    )
}

/// A device request's class, selectors, mode and admin access (`exactly` or a `firstAvailable`
/// alternative).
fn exact_request(request: &ExactDeviceRequest) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("deviceClassName".into(), json!(request.device_class_name));
    if !request.selectors.is_empty() {
        out.insert("selectors".into(), cel_selectors(&request.selectors));
    }
    match request.allocation_mode {
        AllocationMode::ExactCount(count) => {
            out.insert("allocationMode".into(), json!("ExactCount"));
            out.insert("count".into(), json!(count));
        }
        AllocationMode::All => {
            out.insert("allocationMode".into(), json!("All"));
        }
    }
    if request.admin_access {
        out.insert("adminAccess".into(), json!(true));
    }
    out
}

/// `spec` of a claim (and of a template's claim): its requests and constraints.
fn claim_spec(spec: &ClaimSpec) -> Value {
    let requests: Vec<Value> = spec
        .requests
        .iter()
        .map(|r| match &r.kind {
            DeviceRequestKind::Exactly(exact) => {
                json!({"name": r.name, "exactly": exact_request(exact)})
            }
            DeviceRequestKind::FirstAvailable(alternatives) => {
                let subs: Vec<Value> = alternatives
                    .iter()
                    .map(|sub| {
                        let mut out = exact_request(&sub.request);
                        out.insert("name".into(), json!(sub.name));
                        Value::Object(out)
                    })
                    .collect();
                json!({"name": r.name, "firstAvailable": subs})
            }
        })
        .collect();
    let constraints: Vec<Value> = spec
        .constraints
        .iter()
        .map(|c| {
            let mut out = Map::new();
            if !c.requests.is_empty() {
                out.insert("requests".into(), json!(c.requests));
            }
            if let Some(attribute) = &c.match_attribute {
                out.insert("matchAttribute".into(), json!(attribute));
            }
            if let Some(attribute) = &c.distinct_attribute {
                out.insert("distinctAttribute".into(), json!(attribute));
            }
            Value::Object(out)
        })
        .collect();
    let mut devices = Map::new();
    put(&mut devices, "requests", Value::Array(requests));
    put(&mut devices, "constraints", Value::Array(constraints));
    json!({ "devices": devices })
}

/// A `resource.k8s.io/v1` DeviceClass.
pub fn device_class_object(class: &DeviceClass) -> Value {
    let mut spec = Map::new();
    if !class.selectors.is_empty() {
        spec.insert("selectors".into(), cel_selectors(&class.selectors));
    }
    if let Some(name) = &class.extended_resource_name {
        spec.insert("extendedResourceName".into(), json!(name));
    }
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": class.name},
        "spec": spec,
    })
}

/// A `resource.k8s.io/v1` ResourceClaimTemplate.
pub fn claim_template_object(template: &ResourceClaimTemplate) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template.name, "namespace": template.namespace},
        "spec": {"spec": claim_spec(&template.spec)},
    })
}

/// A `resource.k8s.io/v1` ResourceClaim with its allocation and reservations. The owning pod is
/// known by UID only, which is all the engine reads of it.
pub fn resource_claim_object(claim: &ResourceClaim) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(claim.name));
    metadata.insert("namespace".into(), json!(claim.namespace));
    if !claim.uid.is_empty() {
        metadata.insert("uid".into(), json!(claim.uid));
    }
    if let Some(owner) = &claim.owner_pod_uid {
        metadata.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "", "uid": owner,
                    "controller": true}]),
        );
    }
    if claim.deleting {
        // The moment is not kept; only that the claim is going matters.
        metadata.insert("deletionTimestamp".into(), json!("1970-01-01T00:00:00Z"));
    }
    let mut status = Map::new();
    if let Some(allocation) = &claim.allocation {
        let results: Vec<Value> = allocation
            .devices
            .iter()
            .map(|d| {
                let mut out = json!({"request": d.request, "driver": d.driver, "pool": d.pool,
                                     "device": d.device});
                if d.admin_access {
                    out["adminAccess"] = json!(true);
                }
                out
            })
            .collect();
        let mut allocated = json!({"devices": {"results": results}});
        if let Some(selector) = &allocation.node_selector {
            allocated["nodeSelector"] = node_selector(selector);
        }
        status.insert("allocation".into(), allocated);
    }
    let reserved: Vec<Value> = claim
        .reserved_for
        .iter()
        .map(|c| json!({"resource": c.resource, "name": c.name, "uid": c.uid}))
        .collect();
    put(&mut status, "reservedFor", Value::Array(reserved));
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": claim_spec(&claim.spec),
        "status": status,
    })
}

/// `nodeName`, `nodeSelector` or `allNodes` of a slice or a device.
fn put_scope(out: &mut Map<String, Value>, scope: &DeviceScope) {
    match scope {
        DeviceScope::Node(name) => out.insert("nodeName".into(), json!(name)),
        DeviceScope::Selector(selector) => {
            out.insert("nodeSelector".into(), node_selector(selector))
        }
        DeviceScope::AllNodes => out.insert("allNodes".into(), json!(true)),
    };
}

/// A `resource.k8s.io/v1` ResourceSlice.
pub fn resource_slice_object(slice: &ResourceSlice) -> Value {
    let devices: Vec<Value> = slice
        .devices
        .iter()
        .map(|d| {
            let mut out = Map::new();
            out.insert("name".into(), json!(d.name));
            let attributes: Map<String, Value> = d
                .attributes
                .iter()
                .map(|(name, value)| {
                    let value = match value {
                        DeviceAttribute::Int(v) => json!({"int": v}),
                        DeviceAttribute::Bool(v) => json!({"bool": v}),
                        DeviceAttribute::String(v) => json!({"string": v}),
                        DeviceAttribute::Version(v) => json!({"version": v}),
                    };
                    (name.clone(), value)
                })
                .collect();
            if !attributes.is_empty() {
                out.insert("attributes".into(), Value::Object(attributes));
            }
            let capacity: Map<String, Value> = d
                .capacity
                .iter()
                .map(|(name, q)| (name.clone(), json!({"value": q.to_string()})))
                .collect();
            if !capacity.is_empty() {
                out.insert("capacity".into(), Value::Object(capacity));
            }
            if let Some(scope) = &d.scope {
                put_scope(&mut out, scope);
            }
            Value::Object(out)
        })
        .collect();
    let mut spec = Map::new();
    spec.insert("driver".into(), json!(slice.driver));
    spec.insert(
        "pool".into(),
        json!({"name": slice.pool, "generation": slice.pool_generation,
               "resourceSliceCount": slice.pool_slice_count}),
    );
    if slice.per_device_node_selection {
        spec.insert("perDeviceNodeSelection".into(), json!(true));
    } else {
        put_scope(&mut spec, &slice.scope);
    }
    spec.insert("devices".into(), Value::Array(devices));
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice.name},
        "spec": spec,
    })
}

/// A `storage.k8s.io/v1` CSINode.
pub fn csi_node_object(csi_node: &CsiNode) -> Value {
    let drivers: Vec<Value> = csi_node
        .drivers
        .iter()
        .map(|d| {
            let mut driver = json!({"name": d.name, "nodeID": csi_node.node_name});
            if let Some(count) = d.allocatable_count {
                driver["allocatable"] = json!({ "count": count });
            }
            if !d.topology_keys.is_empty() {
                driver["topologyKeys"] = json!(d.topology_keys);
            }
            driver
        })
        .collect();
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": csi_node.node_name},
        "spec": {"drivers": drivers},
    })
}

/// The pods of the snapshot: those that occupy or wait for a node (not finished, not being
/// deleted), as the loop's snapshot counts them.
fn live_pods(objects: &ClusterObjects) -> impl Iterator<Item = &Pod> {
    objects
        .pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| p.deletion_time.is_none() && !p.is_terminal())
}

/// The debugging snapshot in upstream's shape: `NodeList` (each node with its pods),
/// `UnscheduledPodsCanBeScheduled` (pending pods the loop found room for on existing or upcoming
/// nodes), `TemplateNodes` (each group's template with its pods), `Error`, `StartTimestamp`
/// and `EndTimestamp`.
pub fn debugging_snapshot(
    capture: &LoopCapture,
    schedulable_on_existing: &[String],
    ended: Timestamp,
) -> Value {
    let time = TimeBase::ABSOLUTE;
    let pods: Vec<&Pod> = live_pods(&capture.objects).collect();
    let node_list: Vec<Value> = capture
        .objects
        .nodes
        .iter()
        .map(|node| {
            let on_node: Vec<Value> = pods
                .iter()
                .filter(|p| p.node_name.as_deref() == Some(node.name.as_str()))
                .map(|p| pod_object(p, time))
                .collect();
            json!({"Node": node_object(node, time), "Pods": on_node})
        })
        .collect();
    let wanted: BTreeSet<&str> = schedulable_on_existing.iter().map(String::as_str).collect();
    let schedulable: Vec<Value> = pods
        .iter()
        .filter(|p| p.node_name.is_none() && wanted.contains(p.key().as_str()))
        .map(|p| pod_object(p, time))
        .collect();
    let templates: Map<String, Value> = capture
        .node_groups
        .iter()
        .filter_map(|group| {
            let template = group.template.as_ref()?;
            let pods: Vec<Value> = template.pods.iter().map(|p| pod_object(p, time)).collect();
            Some((
                group.id.clone(),
                json!({"Node": node_object(&template.node, time), "Pods": pods}),
            ))
        })
        .collect();
    json!({
        "NodeList": node_list,
        "UnscheduledPodsCanBeScheduled": schedulable,
        "StartTimestamp": format_rfc3339(capture.now),
        "EndTimestamp": format_rfc3339(ended),
        "TemplateNodes": templates,
    })
}

/// What a loop decided, in one line: each scale-up (`group current → new` target) and the nodes
/// scale-down found unneeded. The header of a written scenario carries it for the loop the
/// scenario was taken from, to compare with the simulation's first loop.
pub fn loop_decisions(outcome: &LoopOutcome) -> String {
    let increases: Vec<String> = outcome
        .scale_up
        .iter()
        .chain(&outcome.min_size_enforcement)
        .flat_map(|plan| &plan.increases)
        .map(|i| format!("{} {} → {}", i.group_id, i.current_target, i.new_target))
        .collect();
    let mut unneeded: Vec<&str> = outcome
        .scale_down
        .iter()
        .flat_map(|plan| &plan.unneeded)
        .map(|n| n.node.as_str())
        .collect();
    unneeded.sort_unstable();
    let or_none = |list: Vec<String>| {
        if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        }
    };
    format!(
        "scale-up: {}; unneeded nodes: {}",
        or_none(increases),
        or_none(unneeded.into_iter().map(str::to_string).collect())
    )
}

/// The header line of [`loop_decisions`] in a written scenario.
pub const DECIDED_PREFIX: &str = "# The live loop decided: ";

/// How long a written scenario simulates unless told otherwise.
pub const DEFAULT_REPLAY_DURATION: Duration = Duration::from_secs(30 * 60);

/// The capture as a scenario file (docs/scenario.md, "Replaying a live cluster"): the capture's
/// time is the simulation's start; each node group keeps its bounds, its template and its
/// nodes (by name, listed under `nodes:`) and its template's CSI drivers (`csiDrivers:`); every
/// node, pod (bound or pending), PodDisruptionBudget, DaemonSet, Namespace, claim, volume, storage
/// class and CSINode goes under `objects:`; a pod's controller that no longer existed is
/// deleted at time 0 so that scale-down finds it missing, as the live loop did; `flags` (the
/// engine flags `run` was given, by upstream name) become `options:`.
/// `decided` is the loop's outcome, when known: its decisions go in the header.
pub fn scenario_yaml(
    capture: &LoopCapture,
    flags: &[(String, String)],
    duration: Duration,
    decided: Option<&LoopOutcome>,
) -> Result<String, serde_yaml_ng::Error> {
    let time = TimeBase::relative_to(capture.now);
    let mut options = Map::new();
    for (flag, value) in flags {
        if !NOT_REPLAYED.contains(&flag.as_str()) {
            options.insert(flag.clone(), json!(value));
        }
    }
    let groups: Vec<Value> = capture
        .node_groups
        .iter()
        .filter_map(|group| {
            let members: Vec<&str> = capture
                .objects
                .nodes
                .iter()
                .filter(|n| capture.group_of_node.get(&n.name) == Some(&group.id))
                .map(|n| n.name.as_str())
                .collect();
            // Without a template the live loop could not scale the group up either; a group
            // with nodes replays with its first node as the template.
            let template = match &group.template {
                Some(template) => template.node.clone(),
                None => {
                    let first = capture
                        .objects
                        .nodes
                        .iter()
                        .find(|n| members.first() == Some(&n.name.as_str()))?;
                    (**first).clone()
                }
            };
            let mut template = node_object(&template, time);
            // A template describes any new node: no identity of its own.
            if let Some(metadata) = template["metadata"].as_object_mut() {
                for key in ["name", "uid", "creationTimestamp"] {
                    metadata.remove(key);
                }
            }
            if let Some(spec) = template["spec"].as_object_mut() {
                spec.remove("providerID");
            }
            let mut out = json!({
                "id": group.id,
                "minSize": group.min_size,
                "maxSize": group.max_size,
                // The group's nodes are the live ones (`nodes:`), not new empty ones.
                "initialSize": 0,
                "template": template,
            });
            if !members.is_empty() {
                out["nodes"] = json!(members);
            }
            // The template's CSINode: the group's nodes report the same drivers and limits.
            let drivers: Vec<Value> = group
                .template
                .as_ref()
                .and_then(|t| t.csi_node.as_ref())
                .map(|csi| {
                    csi.drivers
                        .iter()
                        .map(|d| match d.allocatable_count {
                            Some(count) => json!({"name": d.name, "count": count}),
                            None => json!({"name": d.name}),
                        })
                        .collect()
                })
                .unwrap_or_default();
            if !drivers.is_empty() {
                out["csiDrivers"] = Value::Array(drivers);
            }
            Some(out)
        })
        .collect();

    let objects = &capture.objects;
    let mut written: Vec<Value> = Vec::new();
    written.extend(objects.namespaces.iter().map(namespace_object));
    written.extend(objects.nodes.iter().map(|n| node_object(n, time)));
    written.extend(objects.daemonsets.iter().map(|d| daemonset_object(d, time)));
    written.extend(objects.pdbs.iter().map(pdb_object));
    let volumes = &objects.volumes;
    written.extend(
        volumes
            .storage_classes
            .iter()
            .map(|c| storage_class_object(c)),
    );
    written.extend(volumes.volumes.iter().map(|v| volume_object(v)));
    written.extend(volumes.claims.iter().map(|c| claim_object(c)));
    written.extend(volumes.csi_nodes.iter().map(|c| csi_node_object(c)));
    let dra = &objects.dra;
    written.extend(dra.classes.iter().map(|c| device_class_object(c)));
    written.extend(dra.templates.iter().map(|t| claim_template_object(t)));
    written.extend(dra.claims.iter().map(|c| resource_claim_object(c)));
    written.extend(dra.slices.iter().map(|s| resource_slice_object(s)));
    // DaemonSet pods are started on each node by the simulator from the DaemonSets above.
    let daemonsets: BTreeSet<(&str, &str)> = objects
        .daemonsets
        .iter()
        .map(|d| (d.namespace.as_str(), d.name.as_str()))
        .collect();
    let started_by_simulator = |pod: &Pod| {
        pod.controller().is_some_and(|c| {
            c.kind == "DaemonSet" && daemonsets.contains(&(pod.namespace.as_str(), c.name.as_str()))
        })
    };
    written.extend(
        live_pods(objects)
            .filter(|p| !started_by_simulator(p))
            .map(|p| pod_object(p, time)),
    );

    // The simulator treats every controller its pods name as existing: those the live loop did
    // not find are deleted before the first loop.
    let existing: BTreeSet<(&str, &str, &str)> = objects
        .controllers
        .iter()
        .map(|c| (c.kind.as_str(), c.namespace.as_str(), c.name.as_str()))
        .collect();
    let missing: BTreeSet<(&str, &str, &str)> = live_pods(objects)
        .filter_map(|p| {
            let c = p.controller()?;
            let key = (c.kind.as_str(), p.namespace.as_str(), c.name.as_str());
            (CONTROLLER_KINDS.contains(&key.0) && !existing.contains(&key)).then_some(key)
        })
        .collect();
    let events: Vec<Value> = missing
        .into_iter()
        .map(|(kind, namespace, name)| {
            json!({"at": "0s", "deleteController": {"kind": kind, "namespace": namespace, "name": name}})
        })
        .collect();

    let mut scenario = Map::new();
    scenario.insert("apiVersion".into(), json!(crate::scenario::API_VERSION));
    scenario.insert("kind".into(), json!(crate::scenario::KIND));
    scenario.insert(
        "name".into(),
        json!(format!("replay-{}", format_rfc3339(capture.now))),
    );
    scenario.insert("duration".into(), json!(format_duration(duration)));
    put(&mut scenario, "options", Value::Object(options));
    scenario.insert("nodeGroups".into(), Value::Array(groups));
    let inline: Vec<Value> = written
        .into_iter()
        .map(|o| json!({ "inline": o }))
        .collect();
    put(&mut scenario, "objects", Value::Array(inline));
    put(&mut scenario, "events", Value::Array(events));
    let mut header = format!(
        "# What a live Ferroscale loop saw at {} (the simulation's time 0). Replay it with\n\
         # `ferroscale simulate FILE` or `ferroscale explain FILE` (docs/scenario.md,\n\
         # \"Replaying a live cluster\").\n",
        format_rfc3339(capture.now)
    );
    if let Some(outcome) = decided {
        header.push_str(&format!("{DECIDED_PREFIX}{}\n", loop_decisions(outcome)));
    }
    Ok(header + &serde_yaml_ng::to_string(&Value::Object(scenario))?)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use ferroscale_core::AutoscalingOptions;
    use ferroscale_core::cloud::NodeTemplate;
    use ferroscale_core::kubernetes::WorkloadController;
    use ferroscale_core::scale_up::NodeGroupView;
    use ferroscale_model::labels::{LabelRequirement, NodeSelector, NodeSelectorTerm};
    use ferroscale_model::pod::{
        HostPort, OwnerRef, PodCondition, TopologySpreadConstraint, Volume,
    };
    use ferroscale_model::taints::{Taint, TaintEffect, Toleration};
    use ferroscale_model::thin_vec;
    use ferroscale_objects::k8s_openapi::api::core::v1 as core;
    use ferroscale_objects::{PriorityClasses, node_from_k8s, pod_from_k8s};

    use super::*;
    use crate::scenario::{ScenarioAction, parse_scenario};

    fn selector() -> LabelSelector {
        LabelSelector {
            match_labels: [("app".to_string(), "web".to_string())].into(),
            match_expressions: vec![LabelRequirement {
                key: "tier".into(),
                operator: LabelOperator::NotIn,
                values: vec!["batch".into()],
            }],
        }
    }

    fn rich_node() -> Node {
        let mut node = Node::new("n-1", Resources::new(3500, 15 << 30));
        node.capacity = Resources::new(4000, 16 << 30);
        node.capacity.set("pods", 110);
        node.allocatable.set("pods", 100);
        node.allocatable.set("nvidia.com/gpu", 1);
        node.capacity.set("nvidia.com/gpu", 1);
        node.labels.insert("zone".into(), "a".into());
        node.annotations.insert("note".into(), "true".into());
        node.taints.push(Taint {
            key: "dedicated".into(),
            value: "gpu".into(),
            effect: TaintEffect::NoSchedule,
            time_added: Some(Timestamp::from_secs(1_700_000_000)),
        });
        node.unschedulable = true;
        node.provider_id = "kwok://n-1".into();
        node.creation_time = Timestamp::from_secs(1_700_000_100);
        node.conditions.disk_pressure = true;
        node.conditions.last_transition = Some(Timestamp::from_secs(1_700_000_200));
        node
    }

    fn rich_pod() -> Pod {
        let mut pod = Pod::new("shop", "web-1");
        pod.uid = "u-1".into();
        pod.labels.insert("app".into(), "web".into());
        pod.annotations.insert(
            "cluster-autoscaler.kubernetes.io/safe-to-evict".into(),
            "false".into(),
        );
        pod.owner_references.push(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-6c7f".into(),
            uid: "rs-1".into(),
            controller: true,
        });
        pod.priority = Some(1000);
        pod.node_name = Some("n-1".into());
        pod.nominated_node_name = Some("n-2".into());
        pod.phase = PodPhase::Running;
        pod.restart_policy = RestartPolicy::OnFailure;
        pod.scheduled_condition = Some(Box::new(PodCondition {
            status: ConditionStatus::True,
            reason: String::new(),
            last_transition: Some(Timestamp::from_secs(1_700_000_300)),
        }));
        pod.creation_time = Timestamp::from_secs(1_700_000_250);
        pod.termination_grace_seconds = Some(45);
        pod.requests = Resources::new(250, 512 << 20);
        pod.requests.set("ephemeral-storage", 1 << 30);
        pod.node_selector.insert("zone".into(), "a".into());
        pod.required_node_affinity = Some(Box::new(NodeSelector {
            terms: vec![NodeSelectorTerm {
                match_expressions: vec![NodeRequirement {
                    key: "size".into(),
                    operator: NodeOperator::Gt,
                    values: vec!["3".into()],
                }],
                match_fields: vec![NodeRequirement {
                    key: "metadata.name".into(),
                    operator: NodeOperator::In,
                    values: vec!["n-1".into()],
                }],
            }],
        }));
        pod.pod_anti_affinity.push(PodAffinityTerm {
            label_selector: Some(selector()),
            namespaces: vec!["shop".into()],
            namespace_selector: Some(LabelSelector::default()),
            topology_key: "kubernetes.io/hostname".into(),
        });
        pod.pod_affinity.push(PodAffinityTerm {
            label_selector: None,
            namespaces: Vec::new(),
            namespace_selector: None,
            topology_key: "zone".into(),
        });
        pod.tolerations.push(Toleration {
            key: "dedicated".into(),
            operator: TolerationOperator::Equal,
            value: "gpu".into(),
            effect: Some(TaintEffect::NoSchedule),
        });
        pod.tolerations.push(Toleration {
            key: String::new(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: None,
        });
        pod.host_ports.push(HostPort {
            port: 8080,
            protocol: Protocol::Udp,
            host_ip: "10.0.0.1".into(),
        });
        pod.topology_spread.push(TopologySpreadConstraint {
            max_skew: 2,
            topology_key: "zone".into(),
            when_unsatisfiable: UnsatisfiableAction::ScheduleAnyway,
            label_selector: Some(selector()),
            min_domains: Some(3),
            node_affinity_policy: NodeInclusionPolicy::Ignore,
            node_taints_policy: NodeInclusionPolicy::Honor,
        });
        for (name, source) in [
            ("host", VolumeSource::HostPath),
            (
                "scratch",
                VolumeSource::EmptyDir {
                    memory_medium: true,
                },
            ),
            (
                "data",
                VolumeSource::PersistentVolumeClaim {
                    claim_name: "data-web-1".into(),
                },
            ),
            ("config", VolumeSource::Other),
        ] {
            pod.volumes.push(Volume {
                name: name.into(),
                source,
            });
        }
        pod.resource_claims = thin_vec![
            ferroscale_model::PodResourceClaim {
                name: "gpu".into(),
                source: PodClaimSource::Template("one-gpu".into()),
            },
            ferroscale_model::PodResourceClaim {
                name: "shared".into(),
                source: PodClaimSource::Claim("team-gpu".into()),
            },
        ];
        pod.resource_claim_statuses = thin_vec![ferroscale_model::PodResourceClaimStatus {
            name: "gpu".into(),
            claim_name: Some("web-1-gpu-bcdfg".into()),
        }];
        pod
    }

    /// DeviceClasses, templates, claims (allocated and reserved, owned by a pod, being deleted) and
    /// slices (node-local and per-device) of the live loop, and pods' claims, are written so that
    /// reading the scenario gives the same DRA objects.
    #[test]
    fn a_written_scenario_keeps_dra_objects() {
        const DRA: &str = r#"
apiVersion: ferroscale/v1alpha1
kind: Scenario
duration: 1m
objects:
  - inline: {apiVersion: resource.k8s.io/v1, kind: DeviceClass, metadata: {name: gpu}, spec: {selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}], extendedResourceName: example.com/gpu}}
  - inline: {apiVersion: resource.k8s.io/v1, kind: ResourceClaimTemplate, metadata: {name: two-gpus, namespace: ml}, spec: {spec: {devices: {requests: [{name: gpus, exactly: {deviceClassName: gpu, allocationMode: ExactCount, count: 2, selectors: [{cel: {expression: 'device.attributes["gpu.example.com"].model == "a100"'}}]}}, {name: any, firstAvailable: [{name: big, deviceClassName: gpu, allocationMode: All}, {name: small, deviceClassName: gpu}]}], constraints: [{requests: [gpus], matchAttribute: gpu.example.com/numa}]}}}}
  - inline:
      apiVersion: resource.k8s.io/v1
      kind: ResourceClaim
      metadata:
        name: train-0-gpu-bcdfg
        namespace: ml
        uid: claim-uid
        deletionTimestamp: "2026-01-01T00:00:00Z"
        ownerReferences: [{apiVersion: v1, kind: Pod, name: train-0, uid: pod-uid, controller: true}]
      spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu, adminAccess: true}}]}}
      status:
        allocation:
          devices: {results: [{request: gpu, driver: gpu.example.com, pool: node-1, device: gpu-0, adminAccess: true}]}
          nodeSelector: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [node-1]}]}]}
        reservedFor: [{resource: pods, name: train-0, uid: pod-uid}]
  - inline:
      apiVersion: resource.k8s.io/v1
      kind: ResourceSlice
      metadata: {name: node-1-gpu}
      spec:
        driver: gpu.example.com
        pool: {name: node-1, generation: 3, resourceSliceCount: 1}
        nodeName: node-1
        devices:
          - name: gpu-0
            attributes: {model: {string: a100}, numa: {int: 1}, healthy: {bool: true}, fw: {version: 1.2.3}}
            capacity: {memory: {value: 80Gi}}
  - inline:
      apiVersion: resource.k8s.io/v1
      kind: ResourceSlice
      metadata: {name: fabric}
      spec:
        driver: fabric.example.com
        pool: {name: fabric, generation: 1, resourceSliceCount: 1}
        perDeviceNodeSelection: true
        devices:
          - {name: link-0, allNodes: true}
          - {name: link-1, nodeSelector: {nodeSelectorTerms: [{matchExpressions: [{key: rack, operator: In, values: [r1]}]}]}}
"#;
        use ferroscale_objects::K8sObject;
        let read = parse_scenario(DRA, "dra.yaml", std::path::Path::new("."))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut capture = capture();
        for object in &read.objects {
            let dra = &mut capture.objects.dra;
            match object {
                K8sObject::DeviceClass(c) => dra.classes.push(Arc::new(c.clone())),
                K8sObject::ResourceClaimTemplate(t) => dra.templates.push(Arc::new(t.clone())),
                K8sObject::ResourceClaim(c) => dra.claims.push(Arc::new(c.clone())),
                K8sObject::ResourceSlice(s) => dra.slices.push(Arc::new(s.clone())),
                _ => {}
            }
        }
        assert_eq!(capture.objects.dra.slices.len(), 2);
        let text = scenario_yaml(&capture, &[], DEFAULT_REPLAY_DURATION, None).unwrap();
        let replayed = parse_scenario(&text, "replay.yaml", std::path::Path::new("."))
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let dra_objects = |objects: &[K8sObject]| -> Vec<K8sObject> {
            objects
                .iter()
                .filter(|o| {
                    matches!(
                        o,
                        K8sObject::DeviceClass(_)
                            | K8sObject::ResourceClaimTemplate(_)
                            | K8sObject::ResourceClaim(_)
                            | K8sObject::ResourceSlice(_)
                    )
                })
                .cloned()
                .collect()
        };
        assert_eq!(dra_objects(&replayed.objects), dra_objects(&read.objects));
    }

    #[test]
    fn a_written_node_reads_back_as_the_same_node() {
        let node = rich_node();
        let written = node_object(&node, TimeBase::ABSOLUTE);
        let object: core::Node = serde_json::from_value(written).unwrap();
        assert_eq!(node_from_k8s(&object).unwrap(), node);
    }

    #[test]
    fn a_written_pod_reads_back_as_the_same_pod() {
        let pod = rich_pod();
        let written = pod_object(&pod, TimeBase::ABSOLUTE);
        let object: core::Pod = serde_json::from_value(written).unwrap();
        assert_eq!(
            pod_from_k8s(&object, &PriorityClasses::default()).unwrap(),
            pod
        );
    }

    #[test]
    fn relative_times_put_the_capture_at_the_epoch() {
        let node = rich_node();
        let written = node_object(
            &node,
            TimeBase::relative_to(Timestamp::from_secs(1_700_000_160)),
        );
        assert_eq!(
            written["metadata"]["creationTimestamp"],
            json!("1969-12-31T23:59:00Z")
        );
    }

    fn capture() -> LoopCapture {
        let mut group_node = Node::new("pool-a-0", Resources::new(4000, 16 << 30));
        group_node.provider_id = "kwok://pool-a-0".into();
        let outside = Node::new("control-plane", Resources::new(2000, 8 << 30));
        let mut bound = Pod::new("shop", "web-0");
        bound.node_name = Some("pool-a-0".into());
        bound.phase = PodPhase::Running;
        bound.owner_references.push(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "gone".into(),
            uid: "rs-gone".into(),
            controller: true,
        });
        let mut pending = Pod::new("shop", "web-1");
        pending.creation_time = Timestamp::from_secs(1_700_000_000);
        pending.requests = Resources::new(3000, 1 << 30);
        pending.owner_references.push(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web".into(),
            uid: "rs-web".into(),
            controller: true,
        });
        let mut finished = Pod::new("shop", "job-0");
        finished.phase = PodPhase::Succeeded;
        let template = NodeTemplate {
            node: Node::new("pool-a-template", Resources::new(4000, 16 << 30)),
            pods: Vec::new(),
            csi_node: None,
            resource_slices: Vec::new(),
        };
        LoopCapture {
            now: Timestamp::from_secs(1_700_000_000),
            objects: ClusterObjects {
                nodes: vec![Arc::new(group_node), Arc::new(outside)],
                pods: Arc::new(vec![Arc::new(bound), Arc::new(pending), Arc::new(finished)]),
                pdbs: vec![PodDisruptionBudget {
                    namespace: "shop".into(),
                    name: "web".into(),
                    uid: "pdb-1".into(),
                    selector: Some(selector()),
                    min_available: Some(IntOrPercent::Percent(50)),
                    max_unavailable: None,
                    disruptions_allowed: Some(1),
                }],
                controllers: vec![WorkloadController {
                    kind: "ReplicaSet".into(),
                    namespace: "shop".into(),
                    name: "web".into(),
                    uid: "rs-web".into(),
                    replicas: Some(2),
                }],
                ..ClusterObjects::default()
            },
            node_groups: vec![NodeGroupView::new("pool-a", 1, 7, 1, Some(template))],
            group_of_node: BTreeMap::from([("pool-a-0".to_string(), "pool-a".to_string())]),
            options: AutoscalingOptions::default(),
        }
    }

    #[test]
    fn a_written_scenario_keeps_groups_members_objects_options_and_missing_controllers() {
        let flags = vec![
            ("cloud-provider".to_string(), "kwok".to_string()),
            ("dry-run".to_string(), "true".to_string()),
            ("expander".to_string(), "least-waste".to_string()),
        ];
        let text = scenario_yaml(&capture(), &flags, DEFAULT_REPLAY_DURATION, None).unwrap();
        let scenario = parse_scenario(&text, "replay.yaml", std::path::Path::new("."))
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(
            scenario.options,
            vec![("expander".to_string(), "least-waste".to_string())]
        );
        let group = &scenario.node_groups[0];
        assert_eq!(
            (group.id.as_str(), group.min_size, group.max_size),
            ("pool-a", 1, 7)
        );
        assert_eq!(group.nodes, vec!["pool-a-0".to_string()]);
        assert_eq!(group.template.allocatable, Resources::new(4000, 16 << 30));
        let pods: Vec<&str> = scenario
            .objects
            .iter()
            .filter_map(|o| match o {
                ferroscale_objects::K8sObject::Pod(p) => Some(p.name.as_str()),
                _ => None,
            })
            .collect();
        // The finished pod is not part of the loop's snapshot.
        assert_eq!(pods, ["web-0", "web-1"]);
        // web-0's ReplicaSet did not exist for the live loop.
        assert!(matches!(
            &scenario.events[..],
            [event] if matches!(&event.action,
                ScenarioAction::DeleteController { kind, namespace, name }
                    if kind == "ReplicaSet" && namespace == "shop" && name == "gone")
        ));
        // The capture's time is the simulation's start: web-1 was created at the capture.
        let web_1 = scenario.objects.iter().find_map(|o| match o {
            ferroscale_objects::K8sObject::Pod(p) if p.name == "web-1" => Some(p),
            _ => None,
        });
        assert_eq!(web_1.map(|p| p.creation_time), Some(Timestamp(0)));
    }

    /// Claims, volumes, classes and CSINodes of the live loop, and its templates' CSI drivers, come
    /// back from the written scenario as they were captured.
    #[test]
    fn a_written_scenario_keeps_storage_objects_and_template_csi_drivers() {
        use ferroscale_model::labels::{NodeSelectorTerm, ZONE};
        use ferroscale_model::{
            ClaimRef, CsiNodeDriver, NodeOperator, TopologyRequirement, TopologySelectorTerm,
        };
        let mut capture = capture();
        let driver = |count| CsiNodeDriver {
            name: "ebs.csi.aws.com".into(),
            allocatable_count: count,
            topology_keys: vec![ZONE.into()],
        };
        let claim = PersistentVolumeClaim {
            namespace: "shop".into(),
            name: "data-db-0".into(),
            uid: "claim-1".into(),
            storage_class_name: Some("zonal".into()),
            volume_name: Some("pv-1".into()),
            access_modes: vec![AccessMode::ReadWriteOncePod],
            phase: ClaimPhase::Bound,
            selected_node: Some("pool-a-0".into()),
            requested_storage: 10 << 30,
            deleting: false,
            owner_uids: vec!["uid-shop-db-0".into()],
        };
        let mut volume = PersistentVolume {
            name: "pv-1".into(),
            storage_class_name: Some("zonal".into()),
            access_modes: vec![AccessMode::ReadWriteOncePod],
            capacity_storage: 10 << 30,
            node_affinity: Some(NodeSelector {
                terms: vec![NodeSelectorTerm {
                    match_expressions: vec![NodeRequirement {
                        key: ZONE.into(),
                        operator: NodeOperator::In,
                        values: vec!["zone-b".into()],
                    }],
                    match_fields: Vec::new(),
                }],
            }),
            claim_ref: Some(ClaimRef {
                namespace: "shop".into(),
                name: "data-db-0".into(),
                uid: "claim-1".into(),
            }),
            csi_driver: Some("ebs.csi.aws.com".into()),
            phase: VolumePhase::Bound,
            deleting: false,
            ..PersistentVolume::default()
        };
        volume.labels.insert(ZONE.into(), "zone-b".into());
        let class = StorageClass {
            name: "zonal".into(),
            provisioner: "ebs.csi.aws.com".into(),
            binding_mode: VolumeBindingMode::WaitForFirstConsumer,
            allowed_topologies: vec![TopologySelectorTerm {
                requirements: vec![TopologyRequirement {
                    key: ZONE.into(),
                    values: vec!["zone-b".into()],
                }],
            }],
        };
        let csi_node = CsiNode {
            node_name: "pool-a-0".into(),
            drivers: vec![driver(Some(25))],
        };
        capture.objects.volumes.claims.push(Arc::new(claim.clone()));
        capture
            .objects
            .volumes
            .volumes
            .push(Arc::new(volume.clone()));
        capture
            .objects
            .volumes
            .storage_classes
            .push(Arc::new(class.clone()));
        capture
            .objects
            .volumes
            .csi_nodes
            .push(Arc::new(csi_node.clone()));
        if let Some(template) = capture.node_groups[0].template.as_mut() {
            template.csi_node = Some(CsiNode {
                node_name: "pool-a-template".into(),
                drivers: vec![
                    driver(Some(16)),
                    CsiNodeDriver {
                        name: "efs.csi.aws.com".into(),
                        allocatable_count: None,
                        topology_keys: Vec::new(),
                    },
                ],
            });
        }
        let text = scenario_yaml(&capture, &[], DEFAULT_REPLAY_DURATION, None).unwrap();
        let scenario = parse_scenario(&text, "replay.yaml", std::path::Path::new("."))
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let find = |f: &dyn Fn(&ferroscale_objects::K8sObject) -> bool| {
            scenario.objects.iter().find(|o| f(o)).cloned()
        };
        use ferroscale_objects::K8sObject;
        assert_eq!(
            find(&|o| matches!(o, K8sObject::PersistentVolumeClaim(_))),
            Some(K8sObject::PersistentVolumeClaim(claim))
        );
        assert_eq!(
            find(&|o| matches!(o, K8sObject::PersistentVolume(_))),
            Some(K8sObject::PersistentVolume(volume))
        );
        assert_eq!(
            find(&|o| matches!(o, K8sObject::StorageClass(_))),
            Some(K8sObject::StorageClass(class))
        );
        let Some(K8sObject::CsiNode(read)) = find(&|o| matches!(o, K8sObject::CsiNode(_))) else {
            panic!("a CSINode in {text}")
        };
        assert_eq!(read.node_name, "pool-a-0");
        assert_eq!(read.drivers[0].allocatable_count, Some(25));
        let drivers: Vec<(&str, Option<i32>)> = scenario.node_groups[0]
            .csi_drivers
            .iter()
            .map(|d| (d.name.as_str(), d.allocatable_count))
            .collect();
        assert_eq!(
            drivers,
            vec![("ebs.csi.aws.com", Some(16)), ("efs.csi.aws.com", None)]
        );
    }

    #[test]
    fn a_replayed_groups_nodes_join_it_as_they_are() {
        let text = scenario_yaml(&capture(), &[], DEFAULT_REPLAY_DURATION, None).unwrap();
        let scenario = parse_scenario(&text, "replay.yaml", std::path::Path::new(".")).unwrap();
        let options = crate::runner::options_for(&scenario, &[]).unwrap();
        let simulation = crate::runner::Simulation::new(&scenario, options);
        let member = simulation.cluster().node("pool-a-0").expect("pool-a-0");
        assert_eq!(member.group.as_deref(), Some("pool-a"));
        assert_eq!(member.node.provider_id, "sim://pool-a/pool-a-0");
        let outside = simulation
            .cluster()
            .node("control-plane")
            .expect("control-plane");
        assert_eq!(outside.group, None);
        let group = simulation.cloud().group("pool-a").expect("group pool-a");
        let target = futures::executor::block_on(ferroscale_core::cloud::NodeGroup::target_size(
            group.as_ref(),
        ));
        assert_eq!(target, Ok(1));
        // A new instance does not take a replayed node's name.
        assert_eq!(group.node_name(0), "pool-a-0");
    }

    #[test]
    fn a_group_member_must_be_a_node_of_the_scenario() {
        let text = scenario_yaml(&capture(), &[], DEFAULT_REPLAY_DURATION, None)
            .unwrap()
            .replace("- pool-a-0", "- pool-a-9");
        let error = parse_scenario(&text, "replay.yaml", std::path::Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("nodeGroups[0].nodes[0]") && error.contains("pool-a-9"),
            "{error}"
        );
    }

    #[test]
    fn the_debugging_snapshot_has_upstreams_fields() {
        let snapshot = debugging_snapshot(
            &capture(),
            &["shop/web-1".to_string()],
            Timestamp::from_secs(1_700_000_001),
        );
        assert_eq!(snapshot["NodeList"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            snapshot["NodeList"][0]["Node"]["metadata"]["name"],
            "pool-a-0"
        );
        assert_eq!(
            snapshot["NodeList"][0]["Pods"][0]["metadata"]["name"],
            "web-0"
        );
        assert_eq!(
            snapshot["UnscheduledPodsCanBeScheduled"][0]["metadata"]["name"],
            "web-1"
        );
        assert_eq!(snapshot["StartTimestamp"], "2023-11-14T22:13:20Z");
        assert_eq!(snapshot["EndTimestamp"], "2023-11-14T22:13:21Z");
        assert!(snapshot["TemplateNodes"]["pool-a"]["Node"].is_object());
    }
}
