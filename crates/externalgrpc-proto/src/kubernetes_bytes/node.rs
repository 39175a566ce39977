//! `nodeBytes`: a template node (or any node) as the plain protobuf `k8s.io.api.core.v1.Node`.

use ferroscale_model::{Node, Taint};
use ferroscale_objects::node_from_k8s;
use k8s_openapi::api::core::v1 as core;
use k8s_pb::api::core::v1 as pb;

use super::meta::{
    MetadataFields, condition_status_text, describe, object_meta_from_pb, object_meta_to_pb,
    present, quantities_from_pb, quantities_to_pb, text, time_from_pb, time_to_pb,
};
use super::{CodecError, decode_message};

/// Decodes `nodeBytes` into a model node: labels, annotations, taints, capacity, allocatable,
/// conditions, provider id. Fields the model has no use for are skipped; a malformed quantity or
/// taint effect is an error naming the field and the value.
pub fn decode_node(bytes: &[u8]) -> Result<Node, CodecError> {
    let node: pb::Node = decode_message("Node", bytes)?;
    let node = node_to_k8s(&node)?;
    Ok(node_from_k8s(&node)?)
}

/// Encodes a model node as `nodeBytes`, readable by Go's `Node.Unmarshal` (every quantity a valid
/// Kubernetes quantity string). The bytes always start with `0a`, the tag of `metadata`.
pub fn encode_node(node: &Node) -> Vec<u8> {
    prost::Message::encode_to_vec(&node_to_pb(node))
}

fn node_to_k8s(node: &pb::Node) -> Result<core::Node, CodecError> {
    let object = describe("Node", node.metadata.as_ref());
    let metadata = object_meta_from_pb(&object, node.metadata.as_ref())?;
    let spec = node.spec.as_ref().map(|spec| -> Result<_, CodecError> {
        let mut taints = Vec::with_capacity(spec.taints.len());
        for (i, taint) in spec.taints.iter().enumerate() {
            taints.push(core::Taint {
                key: text(&taint.key),
                value: present(&taint.value),
                effect: text(&taint.effect),
                time_added: time_from_pb(
                    &object,
                    &format!("spec.taints[{i}].timeAdded"),
                    taint.time_added.as_ref(),
                )?,
            });
        }
        Ok(core::NodeSpec {
            provider_id: present(&spec.provider_id),
            unschedulable: spec.unschedulable,
            taints: (!taints.is_empty()).then_some(taints),
            ..core::NodeSpec::default()
        })
    });
    let status = node.status.as_ref().map(|status| -> Result<_, CodecError> {
        let mut conditions = Vec::with_capacity(status.conditions.len());
        for (i, condition) in status.conditions.iter().enumerate() {
            conditions.push(core::NodeCondition {
                type_: text(&condition.r#type),
                status: text(&condition.status),
                last_transition_time: time_from_pb(
                    &object,
                    &format!("status.conditions[{i}].lastTransitionTime"),
                    condition.last_transition_time.as_ref(),
                )?,
                ..core::NodeCondition::default()
            });
        }
        Ok(core::NodeStatus {
            capacity: quantities_from_pb(&status.capacity),
            allocatable: quantities_from_pb(&status.allocatable),
            conditions: (!conditions.is_empty()).then_some(conditions),
            ..core::NodeStatus::default()
        })
    });
    Ok(core::Node {
        metadata,
        spec: spec.transpose()?,
        status: status.transpose()?,
    })
}

fn node_to_pb(node: &Node) -> pb::Node {
    let metadata = object_meta_to_pb(MetadataFields {
        name: &node.name,
        namespace: None,
        uid: &node.uid,
        labels: &node.labels,
        annotations: &node.annotations,
        owner_references: &[],
        creation_time: node.creation_time,
        deletion_time: None,
    });
    let spec = pb::NodeSpec {
        provider_id: Some(node.provider_id.clone()),
        unschedulable: Some(node.unschedulable),
        taints: node.taints.iter().map(taint_to_pb).collect(),
        ..pb::NodeSpec::default()
    };
    let status = pb::NodeStatus {
        capacity: quantities_to_pb(&node.capacity),
        allocatable: quantities_to_pb(&node.allocatable),
        conditions: conditions_to_pb(node),
        ..pb::NodeStatus::default()
    };
    pb::Node {
        metadata: Some(metadata),
        spec: Some(spec),
        status: Some(status),
    }
}

fn taint_to_pb(taint: &Taint) -> pb::Taint {
    pb::Taint {
        key: Some(taint.key.clone()),
        value: Some(taint.value.clone()),
        effect: Some(taint.effect.as_str().to_string()),
        time_added: taint.time_added.map(time_to_pb),
    }
}

/// The conditions the model keeps: `Ready` when the node reports readiness at all, and the
/// pressure conditions only when they hold. Every readiness-relevant condition carries the model's
/// latest transition time, so reading them back yields the same time.
fn conditions_to_pb(node: &Node) -> Vec<pb::NodeCondition> {
    let conditions = &node.conditions;
    let transition = conditions.last_transition.map(time_to_pb);
    let condition = |kind: &str, status: &str, transition: Option<_>| pb::NodeCondition {
        r#type: Some(kind.to_string()),
        status: Some(status.to_string()),
        last_transition_time: transition,
        ..pb::NodeCondition::default()
    };
    let mut out = Vec::new();
    if let Some(ready) = conditions.ready {
        out.push(condition("Ready", condition_status_text(ready), transition));
    }
    if conditions.disk_pressure {
        out.push(condition("DiskPressure", "True", transition));
    }
    if conditions.network_unavailable {
        out.push(condition("NetworkUnavailable", "True", transition));
    }
    if conditions.suspended {
        out.push(condition("Suspended", "True", None));
    }
    out
}
