//! Dynamic Resource Allocation (`resource.k8s.io/v1`) as the scheduler's DynamicResources filter
//! needs it: the devices nodes publish (ResourceSlices), the classes that select them
//! (DeviceClasses), and what pods ask for (ResourceClaims and ResourceClaimTemplates).
//!
//! Device selectors stay CEL source text here; compiling and evaluating them is the filter's job
//! (`ferroscale_scheduling::dra`), so this crate keeps no dependency beyond `thiserror`.
//!
//! Attribute and capacity names are always fully qualified (`<domain>/<id>`): a bare `<id>` read
//! from the API is qualified with the slice's driver name at the boundary, as the scheduler's CEL
//! environment does.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::labels::NodeSelector;
use crate::quantity::Quantity;

/// The most pods one claim can be reserved for (`status.reservedFor` is limited to this).
pub const MAX_CLAIM_CONSUMERS: usize = 256;

/// The value of one device attribute.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeviceAttribute {
    Int(i64),
    Bool(bool),
    String(String),
    /// A semantic version (`1.2.3`), compared as one by CEL's `semver` functions.
    Version(String),
}

/// Which nodes can reach the devices of a slice (or of one device, with per-device selection).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DeviceScope {
    /// `nodeName`: devices local to one node.
    Node(String),
    /// `nodeSelector`: devices reachable from the nodes the selector matches.
    Selector(NodeSelector),
    /// `allNodes: true`.
    #[default]
    AllNodes,
}

impl DeviceScope {
    /// Whether a node with this name and labels can use devices of this scope.
    pub fn reaches(&self, node_name: &str, node_labels: &crate::labels::Labels) -> bool {
        match self {
            DeviceScope::Node(name) => name == node_name,
            DeviceScope::Selector(selector) => selector.matches(node_name, node_labels),
            DeviceScope::AllNodes => true,
        }
    }
}

/// One device of a slice.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Device {
    pub name: String,
    /// Fully qualified attribute name → value.
    pub attributes: BTreeMap<String, DeviceAttribute>,
    /// Fully qualified capacity name → amount.
    pub capacity: BTreeMap<String, Quantity>,
    /// The device's own node selection, for slices with `perDeviceNodeSelection: true`.
    pub scope: Option<DeviceScope>,
}

/// A ResourceSlice: some or all devices of one pool of one driver.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceSlice {
    pub name: String,
    pub driver: String,
    /// `spec.pool.name`. Devices are identified by (driver, pool, device name).
    pub pool: String,
    /// `spec.pool.generation`: only the slices of a pool's highest generation count.
    pub pool_generation: i64,
    /// `spec.pool.resourceSliceCount`: a pool is complete when this many slices of its highest
    /// generation exist.
    pub pool_slice_count: i64,
    /// The slice's node selection; with `perDeviceNodeSelection` each device carries its own.
    pub scope: DeviceScope,
    pub per_device_node_selection: bool,
    pub devices: Vec<Device>,
}

impl ResourceSlice {
    /// The node whose local devices this slice publishes, if it is node-local.
    pub fn node_name(&self) -> Option<&str> {
        match &self.scope {
            DeviceScope::Node(name) => Some(name),
            _ => None,
        }
    }

    /// This node-local slice as a copy of its node would publish it: on `node_name`, in a pool of
    /// its own (`<pool>-<suffix>`), so that devices of two copies of one template are distinct
    /// devices, as they are on two real nodes.
    pub fn for_node_copy(&self, node_name: &str, suffix: &str) -> ResourceSlice {
        ResourceSlice {
            name: format!("{}-{suffix}", self.name),
            pool: format!("{}-{suffix}", self.pool),
            scope: DeviceScope::Node(node_name.to_string()),
            ..self.clone()
        }
    }
}

/// A DeviceClass: selectors every device allocated for the class must pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceClass {
    pub name: String,
    /// CEL expressions (`spec.selectors[].cel.expression`).
    pub selectors: Vec<String>,
    /// `spec.extendedResourceName`, when the class also backs an extended resource.
    pub extended_resource_name: Option<String>,
}

/// How many devices a request wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllocationMode {
    /// `ExactCount` with `count` (default 1).
    ExactCount(u32),
    /// `All`: every matching device of the pool(s) reachable from the node, at least one.
    All,
}

impl Default for AllocationMode {
    fn default() -> Self {
        AllocationMode::ExactCount(1)
    }
}

/// A request for devices of one class (`exactly`, or one `firstAvailable` alternative).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExactDeviceRequest {
    pub device_class_name: String,
    /// CEL expressions, in addition to the class's.
    pub selectors: Vec<String>,
    pub allocation_mode: AllocationMode,
    /// `adminAccess: true`: the devices may be in use by other claims and stay usable by them.
    pub admin_access: bool,
}

/// One alternative of a `firstAvailable` request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceSubRequest {
    pub name: String,
    pub request: ExactDeviceRequest,
}

/// What one named request of a claim asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceRequestKind {
    Exactly(ExactDeviceRequest),
    /// The first alternative that can be satisfied wins (in order).
    FirstAvailable(Vec<DeviceSubRequest>),
}

/// `spec.devices.requests[]` of a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRequest {
    pub name: String,
    pub kind: DeviceRequestKind,
}

/// `spec.devices.constraints[]` of a claim.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceConstraint {
    /// The requests (or `request/subrequest`) the constraint applies to; empty means all.
    pub requests: Vec<String>,
    /// Fully qualified attribute every device of those requests must share.
    pub match_attribute: Option<String>,
    /// Fully qualified attribute every device of those requests must have a distinct value of.
    pub distinct_attribute: Option<String>,
}

/// `spec` of a claim or of a claim template.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClaimSpec {
    pub requests: Vec<DeviceRequest>,
    pub constraints: Vec<DeviceConstraint>,
}

/// One allocated device (`status.allocation.devices.results[]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllocatedDevice {
    /// The request (or `request/subrequest`) the device was allocated for.
    pub request: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    pub admin_access: bool,
}

/// `status.allocation` of a claim.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClaimAllocation {
    pub devices: Vec<AllocatedDevice>,
    /// The nodes the allocation is usable from; `None` means every node.
    pub node_selector: Option<NodeSelector>,
}

/// An entry of `status.reservedFor`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ClaimConsumer {
    /// `resource` (`pods` for a pod).
    pub resource: String,
    pub name: String,
    pub uid: String,
}

/// A ResourceClaim.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceClaim {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub spec: ClaimSpec,
    pub allocation: Option<ClaimAllocation>,
    pub reserved_for: Vec<ClaimConsumer>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// UID of the pod that owns the claim as its controller (claims made from a template).
    pub owner_pod_uid: Option<String>,
}

impl ResourceClaim {
    /// `namespace/name`, for messages.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn is_allocated(&self) -> bool {
        self.allocation.is_some()
    }
}

/// A ResourceClaimTemplate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceClaimTemplate {
    pub namespace: String,
    pub name: String,
    pub spec: ClaimSpec,
}

/// Where a pod's claim comes from (`spec.resourceClaims[]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PodClaimSource {
    /// `resourceClaimName`: a claim shared by name.
    Claim(String),
    /// `resourceClaimTemplateName`: the control plane makes a claim for the pod; its name is in
    /// the pod's `status.resourceClaimStatuses`.
    Template(String),
}

/// One entry of a pod's `spec.resourceClaims`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodResourceClaim {
    pub name: String,
    pub source: PodClaimSource,
}

/// One entry of a pod's `status.resourceClaimStatuses`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodResourceClaimStatus {
    pub name: String,
    /// The generated claim's name; `None` when no claim is needed.
    pub claim_name: Option<String>,
}

/// The cluster's DRA objects, as Gather read them.
#[derive(Debug, Clone, Default)]
pub struct DraObjects {
    pub slices: Vec<Arc<ResourceSlice>>,
    pub classes: Vec<Arc<DeviceClass>>,
    pub claims: Vec<Arc<ResourceClaim>>,
    pub templates: Vec<Arc<ResourceClaimTemplate>>,
}

impl DraObjects {
    pub fn is_empty(&self) -> bool {
        self.slices.is_empty()
            && self.classes.is_empty()
            && self.claims.is_empty()
            && self.templates.is_empty()
    }
}

/// Complete pools per driver among `slices`: a pool (driver, pool name) is complete when the
/// slices of its highest generation number exactly its `resourceSliceCount`. Readiness compares a
/// node's count with its group template's (docs/dra.md DRA-129): a node that publishes fewer
/// complete pools of a driver than its template has not finished publishing its devices.
pub fn complete_pools_by_driver<'a>(
    slices: impl IntoIterator<Item = &'a ResourceSlice>,
) -> BTreeMap<String, usize> {
    // (driver, pool) -> (newest generation, its slice count, slices of it seen).
    let mut pools: BTreeMap<(&str, &str), (i64, i64, i64)> = BTreeMap::new();
    for slice in slices {
        let entry = pools
            .entry((slice.driver.as_str(), slice.pool.as_str()))
            .or_insert((slice.pool_generation, slice.pool_slice_count, 0));
        if slice.pool_generation > entry.0 {
            *entry = (slice.pool_generation, slice.pool_slice_count, 0);
        } else if slice.pool_generation < entry.0 {
            continue;
        }
        entry.2 += 1;
    }
    let mut complete: BTreeMap<String, usize> = BTreeMap::new();
    for ((driver, _), (_, expected, seen)) in pools {
        if seen == expected {
            *complete.entry(driver.to_string()).or_default() += 1;
        }
    }
    complete
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Labels;

    #[test]
    fn a_node_copy_of_a_slice_gets_its_own_pool_and_node() {
        let slice = ResourceSlice {
            name: "tmpl-gpu".into(),
            driver: "gpu.example.com".into(),
            pool: "tmpl".into(),
            scope: DeviceScope::Node("tmpl".into()),
            devices: vec![Device {
                name: "gpu-0".into(),
                ..Device::default()
            }],
            ..ResourceSlice::default()
        };
        let copy = slice.for_node_copy("new-1", "new-1");
        assert_eq!(copy.node_name(), Some("new-1"));
        assert_eq!(copy.pool, "tmpl-new-1");
        assert_ne!(copy.pool, slice.pool);
        assert_eq!(copy.devices, slice.devices);
        assert!(copy.scope.reaches("new-1", &Labels::new()));
        assert!(!copy.scope.reaches("tmpl", &Labels::new()));
    }

    fn slice(driver: &str, pool: &str, generation: i64, count: i64) -> ResourceSlice {
        ResourceSlice {
            name: format!("{pool}-{generation}"),
            driver: driver.into(),
            pool: pool.into(),
            pool_generation: generation,
            pool_slice_count: count,
            scope: DeviceScope::Node("n".into()),
            ..ResourceSlice::default()
        }
    }

    #[test]
    fn a_pool_counts_once_all_slices_of_its_newest_generation_are_there() {
        let gpu = "gpu.example.com";
        // One pool in two slices, only one of them published: not complete.
        assert!(complete_pools_by_driver(&[slice(gpu, "a", 1, 2)]).is_empty());
        // Both published: one complete pool.
        let both = [slice(gpu, "a", 1, 2), slice(gpu, "a", 1, 2)];
        assert_eq!(complete_pools_by_driver(&both).get(gpu), Some(&1));
        // A newer generation with one of its two slices replaces the complete older one.
        let updating = [
            slice(gpu, "a", 1, 2),
            slice(gpu, "a", 1, 2),
            slice(gpu, "a", 2, 2),
        ];
        assert!(complete_pools_by_driver(&updating).is_empty());
        // Pools of other drivers and other pools count separately.
        let mixed = [
            slice(gpu, "a", 1, 1),
            slice(gpu, "b", 3, 1),
            slice("nic.example.com", "a", 1, 1),
        ];
        let pools = complete_pools_by_driver(&mixed);
        assert_eq!(pools.get(gpu), Some(&2));
        assert_eq!(pools.get("nic.example.com"), Some(&1));
    }
}
