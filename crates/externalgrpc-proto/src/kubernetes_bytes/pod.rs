//! `pod_bytes`: a pod to price, as the plain protobuf `k8s.io.api.core.v1.Pod`.

use ferroscale_model::{
    HostPort, NodeInclusionPolicy, NodeOperator, NodeRequirement, NodeSelector, Pod,
    PodAffinityTerm, PodPhase, Protocol, RestartPolicy, TaintEffect, Toleration,
    TolerationOperator, TopologySpreadConstraint, UnsatisfiableAction, Volume, VolumeSource,
};
use ferroscale_objects::{PriorityClasses, pod_from_k8s};
use k8s_openapi::api::core::v1 as core;
use k8s_pb::api::core::v1 as pb;

use super::meta::{
    MetadataFields, condition_status_text, describe, label_selector_from_pb, label_selector_to_pb,
    object_meta_from_pb, object_meta_to_pb, present, present_list, present_map, quantities_from_pb,
    quantities_to_pb, text, time_from_pb, time_to_pb,
};
use super::{CodecError, decode_message};

/// The one container an encoded pod has: the model keeps a pod's effective requests (containers,
/// init containers and overhead already combined), not its containers.
const EFFECTIVE_REQUESTS_CONTAINER: &str = "effective-requests";

/// Decodes `pod_bytes` into a model pod with everything the scheduler looks at: effective
/// requests, constraints, priority, owner, phase. A pod naming a priority class without a resolved
/// `spec.priority` is an error unless the class is a built-in one (the API server resolves the
/// priority at admission, so pods from a cluster always carry it).
pub fn decode_pod(bytes: &[u8]) -> Result<Pod, CodecError> {
    let pod: pb::Pod = decode_message("Pod", bytes)?;
    let pod = pod_to_k8s(&pod)?;
    Ok(pod_from_k8s(&pod, &PriorityClasses::default())?)
}

/// Encodes a model pod as `pod_bytes`, readable by Go's `Pod.Unmarshal`. The pod gets a single
/// container named `effective-requests` that requests the model's effective requests and holds its
/// host ports, so decoding the bytes yields the same model pod.
pub fn encode_pod(pod: &Pod) -> Vec<u8> {
    prost::Message::encode_to_vec(&pod_to_pb(pod))
}

fn pod_to_k8s(pod: &pb::Pod) -> Result<core::Pod, CodecError> {
    let object = describe("Pod", pod.metadata.as_ref());
    let metadata = object_meta_from_pb(&object, pod.metadata.as_ref())?;
    let spec = pod.spec.as_ref().map(spec_to_k8s);
    let status = match pod.status.as_ref() {
        None => None,
        Some(status) => {
            let mut conditions = Vec::with_capacity(status.conditions.len());
            for (i, condition) in status.conditions.iter().enumerate() {
                conditions.push(core::PodCondition {
                    type_: text(&condition.r#type),
                    status: text(&condition.status),
                    reason: present(&condition.reason),
                    last_transition_time: time_from_pb(
                        &object,
                        &format!("status.conditions[{i}].lastTransitionTime"),
                        condition.last_transition_time.as_ref(),
                    )?,
                    ..core::PodCondition::default()
                });
            }
            Some(core::PodStatus {
                phase: present(&status.phase),
                nominated_node_name: present(&status.nominated_node_name),
                conditions: (!conditions.is_empty()).then_some(conditions),
                ..core::PodStatus::default()
            })
        }
    };
    Ok(core::Pod {
        metadata,
        spec,
        status,
    })
}

fn spec_to_k8s(spec: &pb::PodSpec) -> core::PodSpec {
    core::PodSpec {
        containers: spec.containers.iter().map(container_to_k8s).collect(),
        init_containers: non_empty(spec.init_containers.iter().map(container_to_k8s).collect()),
        overhead: quantities_from_pb(&spec.overhead),
        affinity: spec.affinity.as_ref().map(affinity_to_k8s),
        tolerations: non_empty(spec.tolerations.iter().map(toleration_to_k8s).collect()),
        topology_spread_constraints: non_empty(
            spec.topology_spread_constraints
                .iter()
                .map(spread_to_k8s)
                .collect(),
        ),
        volumes: non_empty(spec.volumes.iter().map(volume_to_k8s).collect()),
        restart_policy: present(&spec.restart_policy),
        priority: spec.priority,
        priority_class_name: present(&spec.priority_class_name),
        scheduler_name: present(&spec.scheduler_name),
        node_name: present(&spec.node_name),
        node_selector: present_map(&spec.node_selector),
        termination_grace_period_seconds: spec.termination_grace_period_seconds,
        ..core::PodSpec::default()
    }
}

fn non_empty<T>(items: Vec<T>) -> Option<Vec<T>> {
    (!items.is_empty()).then_some(items)
}

fn container_to_k8s(container: &pb::Container) -> core::Container {
    core::Container {
        name: text(&container.name),
        resources: container
            .resources
            .as_ref()
            .map(|resources| core::ResourceRequirements {
                limits: quantities_from_pb(&resources.limits),
                requests: quantities_from_pb(&resources.requests),
                ..core::ResourceRequirements::default()
            }),
        ports: non_empty(
            container
                .ports
                .iter()
                .map(|port| core::ContainerPort {
                    container_port: port.container_port.unwrap_or(0),
                    host_port: port.host_port,
                    host_ip: present(&port.host_ip),
                    name: present(&port.name),
                    protocol: present(&port.protocol),
                })
                .collect(),
        ),
        restart_policy: present(&container.restart_policy),
        ..core::Container::default()
    }
}

fn affinity_to_k8s(affinity: &pb::Affinity) -> core::Affinity {
    let terms = |terms: &[pb::PodAffinityTerm]| non_empty(terms.iter().map(term_to_k8s).collect());
    core::Affinity {
        node_affinity: affinity
            .node_affinity
            .as_ref()
            .map(|node| core::NodeAffinity {
                required_during_scheduling_ignored_during_execution: node
                    .required_during_scheduling_ignored_during_execution
                    .as_ref()
                    .map(node_selector_to_k8s),
                ..core::NodeAffinity::default()
            }),
        pod_affinity: affinity.pod_affinity.as_ref().map(|pod| core::PodAffinity {
            required_during_scheduling_ignored_during_execution: terms(
                &pod.required_during_scheduling_ignored_during_execution,
            ),
            ..core::PodAffinity::default()
        }),
        pod_anti_affinity: affinity
            .pod_anti_affinity
            .as_ref()
            .map(|pod| core::PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: terms(
                    &pod.required_during_scheduling_ignored_during_execution,
                ),
                ..core::PodAntiAffinity::default()
            }),
    }
}

pub(super) fn node_selector_to_k8s(selector: &pb::NodeSelector) -> core::NodeSelector {
    let requirements = |requirements: &[pb::NodeSelectorRequirement]| {
        non_empty(
            requirements
                .iter()
                .map(|requirement| core::NodeSelectorRequirement {
                    key: text(&requirement.key),
                    operator: text(&requirement.operator),
                    values: present_list(&requirement.values),
                })
                .collect(),
        )
    };
    core::NodeSelector {
        node_selector_terms: selector
            .node_selector_terms
            .iter()
            .map(|term| core::NodeSelectorTerm {
                match_expressions: requirements(&term.match_expressions),
                match_fields: requirements(&term.match_fields),
            })
            .collect(),
    }
}

fn term_to_k8s(term: &pb::PodAffinityTerm) -> core::PodAffinityTerm {
    core::PodAffinityTerm {
        label_selector: term.label_selector.as_ref().map(label_selector_from_pb),
        namespaces: present_list(&term.namespaces),
        namespace_selector: term.namespace_selector.as_ref().map(label_selector_from_pb),
        topology_key: text(&term.topology_key),
        match_label_keys: present_list(&term.match_label_keys),
        mismatch_label_keys: present_list(&term.mismatch_label_keys),
    }
}

fn toleration_to_k8s(toleration: &pb::Toleration) -> core::Toleration {
    core::Toleration {
        key: present(&toleration.key),
        operator: present(&toleration.operator),
        value: present(&toleration.value),
        effect: present(&toleration.effect),
        toleration_seconds: toleration.toleration_seconds,
    }
}

fn spread_to_k8s(constraint: &pb::TopologySpreadConstraint) -> core::TopologySpreadConstraint {
    core::TopologySpreadConstraint {
        max_skew: constraint.max_skew.unwrap_or(0),
        topology_key: text(&constraint.topology_key),
        when_unsatisfiable: text(&constraint.when_unsatisfiable),
        label_selector: constraint
            .label_selector
            .as_ref()
            .map(label_selector_from_pb),
        min_domains: constraint.min_domains,
        node_affinity_policy: present(&constraint.node_affinity_policy),
        node_taints_policy: present(&constraint.node_taints_policy),
        match_label_keys: present_list(&constraint.match_label_keys),
    }
}

/// Only the kind of source matters to the model (local storage or claim); other sources stay
/// absent and read as "other".
fn volume_to_k8s(volume: &pb::Volume) -> core::Volume {
    let source = volume.volume_source.as_ref();
    core::Volume {
        name: text(&volume.name),
        host_path: source.and_then(|s| s.host_path.as_ref()).map(|host_path| {
            core::HostPathVolumeSource {
                path: text(&host_path.path),
                type_: present(&host_path.r#type),
            }
        }),
        empty_dir: source.and_then(|s| s.empty_dir.as_ref()).map(|empty_dir| {
            core::EmptyDirVolumeSource {
                medium: present(&empty_dir.medium),
                ..core::EmptyDirVolumeSource::default()
            }
        }),
        persistent_volume_claim: source.and_then(|s| s.persistent_volume_claim.as_ref()).map(
            |claim| core::PersistentVolumeClaimVolumeSource {
                claim_name: text(&claim.claim_name),
                read_only: claim.read_only,
            },
        ),
        ephemeral: source
            .and_then(|s| s.ephemeral.as_ref())
            .map(|_| core::EphemeralVolumeSource::default()),
        ..core::Volume::default()
    }
}

fn pod_to_pb(pod: &Pod) -> pb::Pod {
    let metadata = object_meta_to_pb(MetadataFields {
        name: &pod.name,
        namespace: Some(&pod.namespace),
        uid: &pod.uid,
        labels: &pod.labels,
        annotations: &pod.annotations,
        owner_references: &pod.owner_references,
        creation_time: pod.creation_time,
        deletion_time: pod.deletion_time,
    });
    let container = pb::Container {
        name: Some(EFFECTIVE_REQUESTS_CONTAINER.to_string()),
        resources: Some(pb::ResourceRequirements {
            requests: quantities_to_pb(&pod.requests),
            ..pb::ResourceRequirements::default()
        }),
        ports: pod.host_ports.iter().map(host_port_to_pb).collect(),
        ..pb::Container::default()
    };
    let has_affinity = pod.required_node_affinity.is_some()
        || !pod.pod_affinity.is_empty()
        || !pod.pod_anti_affinity.is_empty();
    let affinity = has_affinity.then(|| pb::Affinity {
        node_affinity: pod
            .required_node_affinity
            .as_ref()
            .map(|selector| pb::NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(node_selector_to_pb(
                    selector,
                )),
                ..pb::NodeAffinity::default()
            }),
        pod_affinity: (!pod.pod_affinity.is_empty()).then(|| pb::PodAffinity {
            required_during_scheduling_ignored_during_execution: pod
                .pod_affinity
                .iter()
                .map(term_to_pb)
                .collect(),
            ..pb::PodAffinity::default()
        }),
        pod_anti_affinity: (!pod.pod_anti_affinity.is_empty()).then(|| pb::PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: pod
                .pod_anti_affinity
                .iter()
                .map(term_to_pb)
                .collect(),
            ..pb::PodAntiAffinity::default()
        }),
    });
    let spec = pb::PodSpec {
        containers: vec![container],
        restart_policy: Some(restart_policy_text(pod.restart_policy).to_string()),
        termination_grace_period_seconds: pod.termination_grace_seconds,
        node_selector: (&pod.node_selector).into(),
        node_name: Some(pod.node_name.as_deref().unwrap_or_default().to_string()),
        affinity,
        scheduler_name: Some(pod.scheduler_name.to_string()),
        tolerations: pod.tolerations.iter().map(toleration_to_pb).collect(),
        priority: pod.priority,
        topology_spread_constraints: pod.topology_spread.iter().map(spread_to_pb).collect(),
        volumes: pod.volumes.iter().map(volume_to_pb).collect(),
        ..pb::PodSpec::default()
    };
    let status = pb::PodStatus {
        phase: Some(phase_text(pod.phase).to_string()),
        nominated_node_name: Some(
            pod.nominated_node_name
                .as_deref()
                .unwrap_or_default()
                .to_string(),
        ),
        conditions: pod
            .scheduled_condition
            .iter()
            .map(|condition| pb::PodCondition {
                r#type: Some("PodScheduled".to_string()),
                status: Some(condition_status_text(condition.status).to_string()),
                reason: Some(condition.reason.clone()),
                last_transition_time: Some(
                    condition
                        .last_transition
                        .map(time_to_pb)
                        .unwrap_or_default(),
                ),
                ..pb::PodCondition::default()
            })
            .collect(),
        ..pb::PodStatus::default()
    };
    pb::Pod {
        metadata: Some(metadata),
        spec: Some(spec),
        status: Some(status),
    }
}

/// A host port needs a container port too; the model no longer knows it, and the host port
/// number is a valid stand-in.
fn host_port_to_pb(host_port: &HostPort) -> pb::ContainerPort {
    pb::ContainerPort {
        container_port: Some(i32::from(host_port.port)),
        host_port: Some(i32::from(host_port.port)),
        protocol: Some(protocol_text(host_port.protocol).to_string()),
        host_ip: Some(host_port.host_ip.clone()),
        name: None,
    }
}

pub(super) fn node_selector_to_pb(selector: &NodeSelector) -> pb::NodeSelector {
    let requirements = |requirements: &[NodeRequirement]| {
        requirements
            .iter()
            .map(|requirement| pb::NodeSelectorRequirement {
                key: Some(requirement.key.clone()),
                operator: Some(node_operator_text(requirement.operator).to_string()),
                values: requirement.values.clone(),
            })
            .collect()
    };
    pb::NodeSelector {
        node_selector_terms: selector
            .terms
            .iter()
            .map(|term| pb::NodeSelectorTerm {
                match_expressions: requirements(&term.match_expressions),
                match_fields: requirements(&term.match_fields),
            })
            .collect(),
    }
}

/// `matchLabelKeys` were merged into the selector when the pod was read, so the merged selector
/// says it all.
fn term_to_pb(term: &PodAffinityTerm) -> pb::PodAffinityTerm {
    pb::PodAffinityTerm {
        label_selector: term.label_selector.as_ref().map(label_selector_to_pb),
        namespaces: term.namespaces.clone(),
        topology_key: Some(term.topology_key.clone()),
        namespace_selector: term.namespace_selector.as_ref().map(label_selector_to_pb),
        match_label_keys: Vec::new(),
        mismatch_label_keys: Vec::new(),
    }
}

fn toleration_to_pb(toleration: &Toleration) -> pb::Toleration {
    pb::Toleration {
        key: Some(toleration.key.clone()),
        operator: Some(
            match toleration.operator {
                TolerationOperator::Equal => "Equal",
                TolerationOperator::Exists => "Exists",
            }
            .to_string(),
        ),
        value: Some(toleration.value.clone()),
        effect: Some(
            toleration
                .effect
                .as_ref()
                .map(TaintEffect::as_str)
                .unwrap_or_default()
                .to_string(),
        ),
        toleration_seconds: None,
    }
}

fn spread_to_pb(constraint: &TopologySpreadConstraint) -> pb::TopologySpreadConstraint {
    let policy = |policy: NodeInclusionPolicy| {
        Some(
            match policy {
                NodeInclusionPolicy::Honor => "Honor",
                NodeInclusionPolicy::Ignore => "Ignore",
            }
            .to_string(),
        )
    };
    pb::TopologySpreadConstraint {
        max_skew: Some(constraint.max_skew),
        topology_key: Some(constraint.topology_key.clone()),
        when_unsatisfiable: Some(
            match constraint.when_unsatisfiable {
                UnsatisfiableAction::DoNotSchedule => "DoNotSchedule",
                UnsatisfiableAction::ScheduleAnyway => "ScheduleAnyway",
            }
            .to_string(),
        ),
        label_selector: constraint.label_selector.as_ref().map(label_selector_to_pb),
        min_domains: constraint.min_domains,
        node_affinity_policy: policy(constraint.node_affinity_policy),
        node_taints_policy: policy(constraint.node_taints_policy),
        match_label_keys: Vec::new(),
    }
}

/// The model keeps only the kind of a volume; "other" becomes an empty downward-API volume, a
/// source that neither stores data on the node nor refers to any object.
fn volume_to_pb(volume: &Volume) -> pb::Volume {
    let source = match &volume.source {
        VolumeSource::HostPath => pb::VolumeSource {
            host_path: Some(pb::HostPathVolumeSource {
                path: Some(String::new()),
                r#type: None,
            }),
            ..pb::VolumeSource::default()
        },
        VolumeSource::EmptyDir { memory_medium } => pb::VolumeSource {
            empty_dir: Some(pb::EmptyDirVolumeSource {
                medium: Some(if *memory_medium { "Memory" } else { "" }.to_string()),
                size_limit: None,
            }),
            ..pb::VolumeSource::default()
        },
        VolumeSource::PersistentVolumeClaim { claim_name } => pb::VolumeSource {
            persistent_volume_claim: Some(pb::PersistentVolumeClaimVolumeSource {
                claim_name: Some(claim_name.clone()),
                read_only: Some(false),
            }),
            ..pb::VolumeSource::default()
        },
        // The wire form keeps only the kind of a volume; an ephemeral or inline CSI volume
        // travels as "other" (the provider side never schedules by volumes).
        VolumeSource::Ephemeral | VolumeSource::Csi { .. } | VolumeSource::Other => {
            pb::VolumeSource {
                downward_api: Some(pb::DownwardAPIVolumeSource::default()),
                ..pb::VolumeSource::default()
            }
        }
    };
    pb::Volume {
        name: Some(volume.name.clone()),
        volume_source: Some(source),
    }
}

fn node_operator_text(operator: NodeOperator) -> &'static str {
    match operator {
        NodeOperator::In => "In",
        NodeOperator::NotIn => "NotIn",
        NodeOperator::Exists => "Exists",
        NodeOperator::DoesNotExist => "DoesNotExist",
        NodeOperator::Gt => "Gt",
        NodeOperator::Lt => "Lt",
    }
}

fn restart_policy_text(policy: RestartPolicy) -> &'static str {
    match policy {
        RestartPolicy::Always => "Always",
        RestartPolicy::OnFailure => "OnFailure",
        RestartPolicy::Never => "Never",
    }
}

fn phase_text(phase: PodPhase) -> &'static str {
    match phase {
        PodPhase::Pending => "Pending",
        PodPhase::Running => "Running",
        PodPhase::Succeeded => "Succeeded",
        PodPhase::Failed => "Failed",
        PodPhase::Unknown => "Unknown",
    }
}

fn protocol_text(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
    }
}
