//! Wire messages ↔ the core's cloud model (docs/externalgrpc.md GRPC-12–GRPC-14): group bounds,
//! instances and their states, per-group options and their defaults, and pricing times. Pure
//! functions; an answer the core cannot use is refused with the field and value at fault, never
//! half-read.

use std::time::Duration;

use ferroscale_core::cloud::{
    ErrorClass, GroupOptions, Instance, InstanceErrorInfo, InstanceState, InstanceStatus,
};
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_externalgrpc_proto::v1;
use ferroscale_model::Timestamp;

/// The seven per-group options the core sends with every `NodeGroupGetOptions`
/// (docs/externalgrpc.md GRPC-13):
/// the global values from its flags, which a server may override per group.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeGroupDefaults {
    pub scale_down_utilization_threshold: f64,
    pub scale_down_gpu_utilization_threshold: f64,
    pub scale_down_unneeded_time: Duration,
    pub scale_down_unready_time: Duration,
    pub max_node_provision_time: Duration,
    pub zero_or_max_node_scaling: bool,
    pub ignore_daemonsets_utilization: bool,
}

impl Default for NodeGroupDefaults {
    /// Upstream's flag defaults.
    fn default() -> NodeGroupDefaults {
        NodeGroupDefaults {
            scale_down_utilization_threshold: 0.5,
            scale_down_gpu_utilization_threshold: 0.5,
            scale_down_unneeded_time: Duration::from_secs(10 * 60),
            scale_down_unready_time: Duration::from_secs(20 * 60),
            max_node_provision_time: Duration::from_secs(15 * 60),
            zero_or_max_node_scaling: false,
            ignore_daemonsets_utilization: false,
        }
    }
}

impl NodeGroupDefaults {
    /// The defaults the engine runs with. Zero-or-max scaling has no global flag: it is off.
    pub fn from_options(options: &AutoscalingOptions) -> NodeGroupDefaults {
        NodeGroupDefaults {
            scale_down_utilization_threshold: options.scale_down_utilization_threshold,
            scale_down_gpu_utilization_threshold: options.scale_down_gpu_utilization_threshold,
            scale_down_unneeded_time: options.scale_down_unneeded_time,
            scale_down_unready_time: options.scale_down_unready_time,
            max_node_provision_time: options.max_node_provision_time,
            zero_or_max_node_scaling: false,
            ignore_daemonsets_utilization: options.ignore_daemonsets_utilization,
        }
    }

    /// The request's `defaults`: all seven fields, the three durations always present.
    pub(crate) fn to_wire(&self) -> v1::NodeGroupAutoscalingOptions {
        v1::NodeGroupAutoscalingOptions {
            scale_down_utilization_threshold: self.scale_down_utilization_threshold,
            scale_down_gpu_utilization_threshold: self.scale_down_gpu_utilization_threshold,
            zero_or_max_node_scaling: self.zero_or_max_node_scaling,
            ignore_daemon_sets_utilization: self.ignore_daemonsets_utilization,
            scale_down_unneeded_duration: Some(wire_duration(self.scale_down_unneeded_time)),
            scale_down_unready_duration: Some(wire_duration(self.scale_down_unready_time)),
            max_node_provision_duration: Some(wire_duration(self.max_node_provision_time)),
            ..Default::default()
        }
    }
}

/// An override as the core takes it. Scalars are taken as sent (proto3 cannot tell "absent"
/// from zero). A duration the server left out is `None`, which the core reads as "use the
/// default": upstream reads it as zero, which would make nodes removable at once. The durations
/// of peers older than upstream 1.35 are read from their old fields. Options not on the wire
/// (max node startup time, non-atomic scale-up to max) stay `None`.
pub(crate) fn group_options(
    options: &v1::NodeGroupAutoscalingOptions,
) -> Result<GroupOptions, String> {
    let duration = |field: &str, value: Option<prost_types::Duration>| {
        value
            .map(|value| {
                model_duration(value)
                    .map_err(|reason| format!("field {field} = {value:?}: {reason}"))
            })
            .transpose()
    };
    Ok(GroupOptions {
        scale_down_utilization_threshold: Some(options.scale_down_utilization_threshold),
        scale_down_gpu_utilization_threshold: Some(options.scale_down_gpu_utilization_threshold),
        scale_down_unneeded_time: duration(
            "scaleDownUnneededDuration",
            options.scale_down_unneeded_or_legacy(),
        )?,
        scale_down_unready_time: duration(
            "scaleDownUnreadyDuration",
            options.scale_down_unready_or_legacy(),
        )?,
        max_node_provision_time: duration(
            "MaxNodeProvisionDuration",
            options.max_node_provision_or_legacy(),
        )?,
        max_node_startup_time: None,
        zero_or_max_node_scaling: Some(options.zero_or_max_node_scaling),
        allow_non_atomic_scale_up_to_max: None,
        ignore_daemonsets_utilization: Some(options.ignore_daemon_sets_utilization),
    })
}

/// The bounds of a group message, checked: both non-negative and min ≤ max.
pub(crate) fn group_bounds(group: &v1::NodeGroup) -> Result<(usize, usize), String> {
    let non_negative = |field: &str, value: i32| {
        usize::try_from(value).map_err(|_| format!("{field} {value} is negative"))
    };
    let min = non_negative("minSize", group.min_size)?;
    let max = non_negative("maxSize", group.max_size)?;
    if min > max {
        return Err(format!(
            "minSize {min} is greater than maxSize {max}, so no size is allowed"
        ));
    }
    Ok((min, max))
}

/// One instance (docs/externalgrpc.md GRPC-12): no status at all when the status is absent or its
/// state is 0 (any error info is then dropped, as upstream does); error info only with a non-empty
/// code.
///
/// The core's model knows states 1/2/3 and error classes 1/99 only: an unknown state is read as
/// "no status", an unknown error class as `Other` (99). Both are logged.
pub(crate) fn instance(wire: v1::Instance) -> Instance {
    let status = wire.status.and_then(|status| {
        let state = match status.instance_state {
            0 => return None,
            1 => InstanceState::Running,
            2 => InstanceState::Creating,
            3 => InstanceState::Deleting,
            unknown => {
                tracing::warn!(
                    instance = %wire.id,
                    state = unknown,
                    "externalgrpc NodeGroupNodes: unknown instance state, read as no status"
                );
                return None;
            }
        };
        let error = status
            .error_info
            .filter(|info| !info.error_code.is_empty())
            .map(|info| InstanceErrorInfo {
                class: error_class(&wire.id, info.instance_error_class),
                code: info.error_code,
                message: info.error_message,
            });
        Some(InstanceStatus { state, error })
    });
    Instance {
        id: wire.id,
        status,
    }
}

fn error_class(instance: &str, class: i32) -> ErrorClass {
    match class {
        1 => ErrorClass::OutOfResources,
        99 => ErrorClass::Other,
        unknown => {
            tracing::warn!(
                instance,
                class = unknown,
                "externalgrpc NodeGroupNodes: unknown instance error class, read as Other (99)"
            );
            ErrorClass::Other
        }
    }
}

/// A model time (milliseconds since the epoch) as a protobuf timestamp, to the nanosecond.
pub(crate) fn wire_timestamp(time: Timestamp) -> prost_types::Timestamp {
    let millis = time.millis();
    prost_types::Timestamp {
        seconds: millis.div_euclid(1000),
        // In 0..1000, so the product fits an i32.
        nanos: (millis.rem_euclid(1000) * 1_000_000) as i32,
    }
}

fn wire_duration(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        // Below one billion, so it fits an i32.
        nanos: duration.subsec_nanos() as i32,
    }
}

fn model_duration(duration: prost_types::Duration) -> Result<Duration, &'static str> {
    if duration.seconds < 0 || duration.nanos < 0 {
        return Err("a negative duration");
    }
    if duration.nanos >= 1_000_000_000 {
        return Err("nanos out of range");
    }
    Ok(Duration::new(
        duration.seconds.unsigned_abs(),
        duration.nanos.unsigned_abs(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_times_become_timestamps_to_the_nanosecond_including_before_the_epoch() {
        assert_eq!(
            wire_timestamp(Timestamp(1_700_000_000_123)),
            prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 123_000_000
            }
        );
        assert_eq!(
            wire_timestamp(Timestamp(-1)),
            prost_types::Timestamp {
                seconds: -1,
                nanos: 999_000_000
            }
        );
    }

    #[test]
    fn bounds_must_be_non_negative_and_ordered() {
        let group = |min_size, max_size| v1::NodeGroup {
            id: "ng".to_string(),
            min_size,
            max_size,
            debug: String::new(),
        };
        assert_eq!(group_bounds(&group(0, 0)), Ok((0, 0)));
        assert_eq!(group_bounds(&group(1, 10)), Ok((1, 10)));
        assert!(group_bounds(&group(5, 3)).is_err_and(|e| e.contains("minSize 5")));
        assert!(group_bounds(&group(-1, 3)).is_err_and(|e| e.contains("minSize -1")));
        assert!(group_bounds(&group(0, -3)).is_err_and(|e| e.contains("maxSize -3")));
    }

    #[test]
    fn durations_that_are_negative_or_malformed_are_refused() {
        let duration = |seconds, nanos| prost_types::Duration { seconds, nanos };
        assert_eq!(model_duration(duration(90, 5)), Ok(Duration::new(90, 5)));
        assert!(model_duration(duration(-1, 0)).is_err());
        assert!(model_duration(duration(0, -1)).is_err());
        assert!(model_duration(duration(0, 1_000_000_000)).is_err());
    }
}
