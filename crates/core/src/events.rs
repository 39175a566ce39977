//! Kubernetes events the engine decides to emit. The Act layer (or the simulator) records them;
//! the Decide layer only describes them, with the upstream reasons so that dashboards and alerts
//! written for upstream keep working.

use std::fmt;

/// The object an event is recorded on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventObject {
    /// The status ConfigMap, where upstream records cluster-level events.
    StatusConfigMap,
    /// The priority expander's ConfigMap.
    PriorityConfigMap,
    /// A pod, as `namespace/name`.
    Pod(String),
    /// A node, by name.
    Node(String),
    /// A ProvisioningRequest, as `namespace/name`.
    ProvisioningRequest(String),
    /// A CapacityBuffer, as `namespace/name`.
    CapacityBuffer(String),
    /// A CapacityQuota (cluster-scoped), by name.
    CapacityQuota(String),
}

impl fmt::Display for EventObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventObject::StatusConfigMap => f.write_str("configmap/cluster-autoscaler-status"),
            EventObject::PriorityConfigMap => {
                f.write_str("configmap/cluster-autoscaler-priority-expander")
            }
            EventObject::Pod(name) => write!(f, "pod/{name}"),
            EventObject::Node(name) => write!(f, "node/{name}"),
            EventObject::ProvisioningRequest(key) => write!(f, "provisioningrequest/{key}"),
            EventObject::CapacityBuffer(key) => write!(f, "capacitybuffer/{key}"),
            EventObject::CapacityQuota(name) => write!(f, "capacityquota/{name}"),
        }
    }
}

/// One event: what it is about, the upstream reason, Normal or Warning, and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub object: EventObject,
    pub reason: &'static str,
    pub warning: bool,
    pub message: String,
}

impl Event {
    pub fn normal(object: EventObject, reason: &'static str, message: impl Into<String>) -> Event {
        Event {
            object,
            reason,
            warning: false,
            message: message.into(),
        }
    }

    pub fn warning(object: EventObject, reason: &'static str, message: impl Into<String>) -> Event {
        Event {
            object,
            reason,
            warning: true,
            message: message.into(),
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.warning { "Warning" } else { "Normal" };
        write!(
            f,
            "{kind} {} {}: {}",
            self.reason, self.object, self.message
        )
    }
}

/// Upstream event reasons.
pub mod reasons {
    pub const SCALED_UP_GROUP: &str = "ScaledUpGroup";
    pub const FAILED_TO_SCALE_UP_GROUP: &str = "FailedToScaleUpGroup";
    pub const TRIGGERED_SCALE_UP: &str = "TriggeredScaleUp";
    pub const NOT_TRIGGER_SCALE_UP: &str = "NotTriggerScaleUp";
    pub const MAX_NODES_TOTAL_REACHED: &str = "MaxNodesTotalReached";
    pub const PRIORITY_CONFIG_MAP_INVALID: &str = "PriorityConfigMapInvalid";
    pub const PRIORITY_CONFIG_MAP_NOT_MATCHED_GROUP: &str = "PriorityConfigMapNotMatchedGroup";
    pub const PRIORITY_CONFIG_MAP_NO_GROUP_MATCHED: &str = "PriorityConfigMapNoGroupMatched";

    // Scale-down, cluster state and the loop (docs/behaviour.md OBS-102).
    pub const SCALE_DOWN: &str = "ScaleDown";
    pub const SCALE_DOWN_EMPTY: &str = "ScaleDownEmpty";
    pub const SCALE_DOWN_FAILED: &str = "ScaleDownFailed";
    pub const SCALE_UP_TIMED_OUT: &str = "ScaleUpTimedOut";
    pub const FAILED_TO_REVERT_SCALE_UP: &str = "FailedToRevertScaleUp";
    pub const SCALE_UP_FAILED: &str = "ScaleUpFailed";
    pub const CLUSTER_UNHEALTHY: &str = "ClusterUnhealthy";
    pub const DELETE_UNREGISTERED: &str = "DeleteUnregistered";
    pub const DELETE_UNREGISTERED_FAILED: &str = "DeleteUnregisteredFailed";
    pub const CLUSTER_AUTOSCALER_CLEANUP: &str = "ClusterAutoscalerCleanup";
}
