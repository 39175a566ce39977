//! The typed model the decision engine works on.
//!
//! Everything that comes from outside the process (YAML, API JSON, protobuf, annotations) is parsed
//! once, at the boundary, into these types. Nothing here performs I/O or reads the clock; the only
//! fallible functions are parsers, and their errors name the offending value.

pub mod capacity;
pub mod dra;
pub mod labels;
pub mod node;
pub mod pod;
pub mod quantity;
pub mod resources;
pub mod taints;
pub mod time;
pub mod volumes;
pub mod workloads;

pub use capacity::{
    ACTIVE_CAPACITY_STRATEGY, ApiCondition, BEST_EFFORT_ATOMIC_CLASS, CAPACITY_API_GROUP,
    CHECK_CAPACITY_CLASS, CONSUME_PROVISIONING_REQUEST_ANNOTATION, CapacityBuffer,
    CapacityBufferSpec, CapacityBufferStatus, CapacityObjects, CapacityQuota,
    PROVISIONING_CLASS_ANNOTATION, PodSet, PodTemplate, ProvisioningRequest,
    ProvisioningRequestStatus, ScalableObject, ScalableRef, find_condition,
    provisioning_conditions,
};
/// The model's inline string (see [`Pod`]): up to 24 bytes without an allocation.
pub use compact_str::{CompactString, format_compact};
pub use dra::{
    AllocatedDevice, AllocationMode, ClaimAllocation, ClaimConsumer, ClaimSpec, Device,
    DeviceAttribute, DeviceClass, DeviceConstraint, DeviceRequest, DeviceRequestKind, DeviceScope,
    DeviceSubRequest, DraObjects, ExactDeviceRequest, PodClaimSource, PodResourceClaim,
    PodResourceClaimStatus, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
pub use labels::{
    LabelOperator, LabelRequirement, LabelSelector, Labels, LabelsIter, NodeOperator,
    NodeRequirement, NodeSelector, NodeSelectorTerm,
};
pub use node::{ConditionStatus, Node, NodeConditions};
pub use pod::{
    ContainerRequests, HostPort, NodeInclusionPolicy, OwnerRef, Pod, PodAffinityTerm, PodCondition,
    PodPhase, Protocol, RestartPolicy, TopologySpreadConstraint, UnsatisfiableAction, Volume,
    VolumeSource, effective_requests,
};
pub use quantity::{Quantity, QuantityError};
pub use resources::{ResourceName, Resources};
pub use taints::{Taint, TaintEffect, Toleration, TolerationOperator};
/// The one-pointer vector of the model's mostly empty lists (see [`Pod`]).
pub use thin_vec::{ThinVec, thin_vec};
pub use time::{DurationError, Timestamp, parse_go_duration};
pub use volumes::{
    AccessMode, ClaimPhase, ClaimRef, CsiNode, CsiNodeDriver, PersistentVolume,
    PersistentVolumeClaim, StorageClass, TopologyRequirement, TopologySelectorTerm,
    VolumeBindingMode, VolumeObjects, VolumePhase,
};
pub use workloads::{
    DaemonSet, IntOrPercent, Namespace, PodDisruptionBudget, PreemptionPolicy, PriorityClass,
};
