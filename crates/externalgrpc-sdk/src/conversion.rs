//! What the wire messages mean in the core's terms and back: the minimal node a client describes,
//! pricing periods, instances and per-group options (docs/externalgrpc.md GRPC-31, without the
//! example server's quirks GRPC-Q1–GRPC-Q3).

use std::time::Duration;

use ferroscale_core::cloud::{GroupOptions, Instance, InstanceState, InstanceStatus};
use ferroscale_externalgrpc_proto::v1;
use ferroscale_model::{Node, Timestamp};

const NANOS_PER_SECOND: i32 = 1_000_000_000;
const NANOS_PER_MILLI: i32 = 1_000_000;

/// The node a client describes (docs/externalgrpc.md GRPC-14, GRPC-31): identity and metadata maps
/// only. Taints, resources and conditions do not travel, so they are left empty; providers identify
/// nodes by provider id or name, and read their labels and annotations.
pub(crate) fn node_from_wire(node: &v1::ExternalGrpcNode) -> Node {
    Node {
        name: node.name.clone(),
        provider_id: node.provider_id.clone(),
        labels: (&node.labels).into(),
        annotations: (&node.annotations).into(),
        ..Node::default()
    }
}

/// How a node of a delete request is matched against instance ids: by provider id, or by name for
/// a node without one (docs/externalgrpc.md GRPC-23). Placeholder nodes of unregistered instances
/// carry the instance id in both.
pub(crate) fn instance_key(node: &v1::ExternalGrpcNode) -> &str {
    if node.provider_id.is_empty() {
        &node.name
    } else {
        &node.provider_id
    }
}

/// A short description of a node for messages and logs.
pub(crate) fn describe_node(node: &v1::ExternalGrpcNode) -> String {
    match (node.name.is_empty(), node.provider_id.is_empty()) {
        (false, false) => format!("{} (providerID {})", node.name, node.provider_id),
        (false, true) => format!("{} (no providerID)", node.name),
        (true, false) => format!("with providerID {}", node.provider_id),
        (true, true) => "with neither name nor providerID".to_string(),
    }
}

/// Why a request field could not be read; the caller names the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    pub field: &'static str,
    pub reason: String,
}

impl FieldError {
    pub(crate) fn missing(field: &'static str) -> FieldError {
        FieldError {
            field,
            reason: "is missing".to_string(),
        }
    }
}

/// A pricing period bound. The model keeps milliseconds; finer precision does not change a price.
pub(crate) fn timestamp_from_wire(
    field: &'static str,
    time: Option<prost_types::Timestamp>,
) -> Result<Timestamp, FieldError> {
    let time = time.ok_or(FieldError::missing(field))?;
    if !(0..NANOS_PER_SECOND).contains(&time.nanos) {
        return Err(FieldError {
            field,
            reason: format!(
                "has nanos {}, outside 0..=999999999 (seconds {})",
                time.nanos, time.seconds
            ),
        });
    }
    Ok(Timestamp(
        time.seconds
            .saturating_mul(1000)
            .saturating_add(i64::from(time.nanos / NANOS_PER_MILLI)),
    ))
}

/// Sizes are `int32` on the wire. A size beyond `i32::MAX` is sent as `i32::MAX`: both mean
/// "practically unlimited", and refusing to list a group for it would help no one.
pub(crate) fn size_to_wire(size: usize) -> i32 {
    i32::try_from(size).unwrap_or(i32::MAX)
}

/// An instance as the client reads it (docs/externalgrpc.md GRPC-12). An instance without status is
/// sent without the `status` message, which the client reads as "no status", like state 0. Error
/// info always travels with the instance's state (1, 2 or 3), never with state 0, which would make
/// the client drop it (docs/externalgrpc.md GRPC-22).
pub(crate) fn instance_to_wire(instance: &Instance) -> v1::Instance {
    v1::Instance {
        id: instance.id.clone(),
        status: instance.status.as_ref().map(instance_status_to_wire),
    }
}

fn instance_status_to_wire(status: &InstanceStatus) -> v1::InstanceStatus {
    use v1::instance_status::InstanceState as WireState;
    let state = match status.state {
        InstanceState::Running => WireState::InstanceRunning,
        InstanceState::Creating => WireState::InstanceCreating,
        InstanceState::Deleting => WireState::InstanceDeleting,
    };
    v1::InstanceStatus {
        instance_state: state as i32,
        error_info: status.error.as_ref().map(|error| v1::InstanceErrorInfo {
            // The client keeps error info only when its code is non-empty: a provider that left
            // the code empty still gets its error through, under the class name.
            error_code: if error.code.is_empty() {
                error.class.to_string()
            } else {
                error.code.clone()
            },
            error_message: error.message.clone(),
            instance_error_class: error.class as i32,
        }),
    }
}

/// The options a group uses, as sent back to the client: every field the provider overrides, and
/// the client's own default for every other (docs/externalgrpc.md GRPC-13, GRPC-25: the client
/// takes every field of a present answer as is, so nothing may be left at zero). The three
/// durations are always set.
///
/// Two core options have no field on the wire (max node startup time, non-atomic scale-up to
/// max); overrides of those cannot reach the client.
pub(crate) fn options_to_wire(
    overrides: &GroupOptions,
    defaults: &v1::NodeGroupAutoscalingOptions,
) -> Result<v1::NodeGroupAutoscalingOptions, FieldError> {
    let duration = |field: &'static str,
                    overridden: Option<Duration>,
                    default: Option<prost_types::Duration>|
     -> Result<prost_types::Duration, FieldError> {
        match overridden {
            Some(duration) => Ok(duration_to_wire(duration)),
            None => default.ok_or(FieldError {
                field,
                reason: "is missing, and the provider does not override it: a client must send \
                         all seven defaults"
                    .to_string(),
            }),
        }
    };
    Ok(v1::NodeGroupAutoscalingOptions {
        scale_down_utilization_threshold: overrides
            .scale_down_utilization_threshold
            .unwrap_or(defaults.scale_down_utilization_threshold),
        scale_down_gpu_utilization_threshold: overrides
            .scale_down_gpu_utilization_threshold
            .unwrap_or(defaults.scale_down_gpu_utilization_threshold),
        zero_or_max_node_scaling: overrides
            .zero_or_max_node_scaling
            .unwrap_or(defaults.zero_or_max_node_scaling),
        ignore_daemon_sets_utilization: overrides
            .ignore_daemonsets_utilization
            .unwrap_or(defaults.ignore_daemon_sets_utilization),
        scale_down_unneeded_duration: Some(duration(
            "defaults.scaleDownUnneededDuration",
            overrides.scale_down_unneeded_time,
            defaults.scale_down_unneeded_or_legacy(),
        )?),
        scale_down_unready_duration: Some(duration(
            "defaults.scaleDownUnreadyDuration",
            overrides.scale_down_unready_time,
            defaults.scale_down_unready_or_legacy(),
        )?),
        max_node_provision_duration: Some(duration(
            "defaults.MaxNodeProvisionDuration",
            overrides.max_node_provision_time,
            defaults.max_node_provision_or_legacy(),
        )?),
        ..v1::NodeGroupAutoscalingOptions::default()
    }
    .with_legacy_fields())
}

fn duration_to_wire(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        // Below one billion, so it fits.
        nanos: i32::try_from(duration.subsec_nanos()).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use ferroscale_core::cloud::{ErrorClass, InstanceErrorInfo};

    use super::*;

    fn wire_time(seconds: i64, nanos: i32) -> Option<prost_types::Timestamp> {
        Some(prost_types::Timestamp { seconds, nanos })
    }

    #[test]
    fn pricing_times_keep_milliseconds_and_go_zero_time() {
        assert_eq!(
            timestamp_from_wire("startTimestamp", wire_time(1_700_000_000, 250_999_999)),
            Ok(Timestamp(1_700_000_000_250))
        );
        // Go's zero time, which the upstream client sends as it is.
        assert_eq!(
            timestamp_from_wire("startTimestamp", wire_time(-62_135_596_800, 0)),
            Ok(Timestamp(-62_135_596_800_000))
        );
    }

    #[test]
    fn malformed_or_missing_times_name_the_field() {
        let missing = timestamp_from_wire("endTimestamp", None).unwrap_err();
        assert_eq!(missing.field, "endTimestamp");
        let bad = timestamp_from_wire("startTimestamp", wire_time(5, -1)).unwrap_err();
        assert_eq!(bad.field, "startTimestamp");
        assert!(bad.reason.contains("nanos -1"), "{}", bad.reason);
    }

    #[test]
    fn error_info_without_code_still_reaches_the_client() {
        let instance = Instance {
            id: "cloud://i-1".to_string(),
            status: Some(InstanceStatus {
                state: InstanceState::Creating,
                error: Some(InstanceErrorInfo {
                    class: ErrorClass::OutOfResources,
                    code: String::new(),
                    message: "no capacity in zone a".to_string(),
                }),
            }),
        };
        let wire = instance_to_wire(&instance);
        let status = wire.status.unwrap();
        assert_eq!(status.instance_state, 2);
        let error = status.error_info.unwrap();
        assert!(!error.error_code.is_empty());
        assert_eq!(error.instance_error_class, 1);
        assert_eq!(error.error_message, "no capacity in zone a");
    }

    #[test]
    fn sizes_beyond_int32_saturate() {
        assert_eq!(size_to_wire(7), 7);
        assert_eq!(size_to_wire(usize::MAX), i32::MAX);
    }
}
