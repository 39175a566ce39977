//! The scheduler's DynamicResources filter: whether the ResourceClaims of a pod can be allocated
//! devices reachable from a node, and the allocation state (which devices are in use, which
//! claims are allocated and reserved for which pods) that the snapshot keeps through what-if
//! branches.
//!
//! * The **catalogue** ([`crate::Snapshot::set_dra_objects`]) indexes the cluster's DeviceClasses, claims
//!   and ResourceSlices once per loop. Slices count only in the highest generation of their pool;
//!   node-local slices attach to their node by name, the others (node selector, all nodes,
//!   per-device selection) are matched against each node. Nodes that exist only in the
//!   simulation get their own node-local slices ([`crate::Snapshot::set_simulated_resource_slices`]),
//!   and claims made in the simulation (for pods that do not exist yet) join the cluster's
//!   ([`crate::Snapshot::add_resource_claims`]).
//! * Devices with the same driver, attributes and capacity share a *shape*: a selector's verdict
//!   is computed once per shape (template copies of a node all have the same shapes), and
//!   every expression is compiled once (the private `cel` module).
//! * The **plan** of a pod (the scheduler's PreFilter) resolves its claims and rejects the pod on
//!   every node when a claim is missing, not made yet, being deleted, reserved for too many pods
//!   or names a class that does not exist. A pod checked against node after node (the
//!   estimator's scans) keeps its plan while nothing changes (`DraState::plan`).
//! * The **allocator** (the private `allocator` module) then looks, per node, for devices for every claim of the
//!   pod that is not allocated yet, as the scheduler's structured allocator does: requests in
//!   order, `firstAvailable` alternatives in order, exact counts and `All`, admin access,
//!   `matchAttribute` and `distinctAttribute` constraints, with backtracking.
//!   A node none of whose devices is free is turned away before the search when the search
//!   could only fail there, and a rejection's explanation is kept as counts and shared names,
//!   formatted only when read ([`DraUnfit::detail`]).
//! * The **state** (claim allocations, reservations, devices in use) changes through
//!   `Snapshot::add_pod` and `Snapshot::remove_pod`, and every change is recorded for the undo
//!   log (`DraUndo`) so that a reverted branch leaves it exactly as it was.

mod allocator;
mod cel;

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use ferroscale_model::{
    ClaimAllocation, ClaimConsumer, CompactString, Device, DeviceClass, DeviceScope, DraObjects,
    Labels, Pod, ResourceClaim, ResourceSlice,
};

pub(crate) use allocator::{NodeAllocation, PodPlan};
use cel::{CompileError, Selector};

/// Why the DynamicResources filter rejected a pod on a node.
///
/// `Display` is kube-scheduler's wording (what events and `explain` show as the reason);
/// [`DraUnfit::detail`] is the longer explanation naming the claim, the request and the selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraUnfit {
    /// The claim, as `namespace/name` (for a template claim not made yet: the namespace and the
    /// name of the pod's claim entry). Shared with the pod's plan: verdicts are made often.
    pub claim: Arc<str>,
    /// Boxed: verdicts are passed around by value on the filters' hot path.
    pub reason: Box<DraReason>,
}

/// What went wrong with [`DraUnfit::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DraReason {
    /// The pod names a claim that does not exist.
    ClaimNotFound,
    /// The claim of a template entry has not been made by the control plane yet; `pod` is the
    /// pod's `namespace/name`.
    ClaimNotCreated { pod: String },
    /// The claim named in the pod's status is not owned by the pod (`namespace/name`).
    ClaimNotOwned { pod: String },
    /// The claim is being deleted.
    ClaimDeleting,
    /// The claim is allocated and reserved for as many pods as a claim can be.
    ClaimInUse,
    /// The claim is allocated with devices this node cannot reach.
    NotAvailableOnNode,
    /// A request names a device class that does not exist.
    ClassNotFound { request: String, class: String },
    /// No set of devices reachable from the node satisfies every claim of the pod. `request`
    /// names the first request that could not be satisfied and `selector` the selector (a CEL
    /// expression, or the class name when the class has no selector) that rejected the most
    /// candidate devices, when one did; `note` says what stood in the way. (Shared strings and
    /// counts rather than text: the estimator's scans make many of these and read none.)
    CannotAllocate {
        request: Option<Arc<str>>,
        selector: Option<Arc<str>>,
        note: AllocationNote,
    },
    /// A selector failed to compile or to evaluate. `class` is set when the selector is the
    /// class's, `index` is its position in the class's or the request's list.
    SelectorError {
        request: String,
        class: Option<String>,
        index: usize,
        expression: String,
        message: String,
        compile: bool,
    },
    /// The allocator gave up on the claim for another reason (a pool being updated while a
    /// request asks for all devices, a constraint that cannot hold for all devices).
    AllocationError { request: String, message: String },
}

/// What stood in the way of an allocation, for [`DraReason::CannotAllocate`]; its `Display` is
/// the few words the detail shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocationNote {
    /// Not diagnosed: a scan that only needed yes or no.
    NotDiagnosed,
    /// The node reaches no device.
    NoDevices,
    /// Fewer of the node's devices match the request than it needs.
    TooFewMatching {
        matching: usize,
        devices: usize,
        class: Arc<str>,
        needed: usize,
    },
    /// Enough devices match, but fewer of them are free than the request needs.
    TooFewFree {
        free: usize,
        matching: usize,
        needed: usize,
    },
    /// Each request alone could be satisfied, but not all of them with the constraints.
    NoCombination,
}

impl fmt::Display for AllocationNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocationNote::NotDiagnosed => Ok(()),
            AllocationNote::NoDevices => f.write_str("the node has no devices"),
            AllocationNote::TooFewMatching {
                matching,
                devices,
                class,
                needed,
            } => write!(
                f,
                "{matching} of the node's {devices} devices match class {class}, {needed} needed"
            ),
            AllocationNote::TooFewFree {
                free,
                matching,
                needed,
            } => write!(
                f,
                "{free} of the {matching} matching devices are free, {needed} needed"
            ),
            AllocationNote::NoCombination => f.write_str(
                "no combination of free matching devices satisfies all requests and constraints \
                 together",
            ),
        }
    }
}

impl DraUnfit {
    pub(crate) fn new(claim: impl Into<Arc<str>>, reason: DraReason) -> DraUnfit {
        DraUnfit {
            claim: claim.into(),
            reason: Box::new(reason),
        }
    }

    /// The longer explanation naming claim, request and selector, for `explain`.
    pub fn detail(&self) -> String {
        let claim = &self.claim;
        match &*self.reason {
            DraReason::ClaimNotFound => format!("claim {claim} does not exist"),
            DraReason::ClaimNotCreated { pod } => format!(
                "the claim of pod {pod} for its entry {} has not been created from its template yet",
                claim.rsplit('/').next().unwrap_or(claim)
            ),
            DraReason::ClaimNotOwned { pod } => {
                format!("claim {claim} is not owned by pod {pod}")
            }
            DraReason::ClaimDeleting => format!("claim {claim} is being deleted"),
            DraReason::ClaimInUse => format!(
                "claim {claim} is already reserved for {} pods, the most a claim can be",
                ferroscale_model::dra::MAX_CLAIM_CONSUMERS
            ),
            DraReason::NotAvailableOnNode => {
                format!("claim {claim} is allocated with devices that this node cannot reach")
            }
            DraReason::ClassNotFound { request, class } => {
                format!("claim {claim}, request {request}: device class {class} does not exist")
            }
            DraReason::CannotAllocate {
                request,
                selector,
                note,
            } => {
                let mut text = format!("claim {claim}");
                if let Some(request) = request {
                    text.push_str(&format!(", request {request}"));
                }
                text.push_str(&format!(": {note}"));
                if let Some(selector) = selector {
                    text.push_str(&format!(" (selector {selector:?})"));
                }
                text
            }
            DraReason::SelectorError {
                request,
                class,
                expression,
                message,
                compile,
                ..
            } => {
                let kind = if *compile { "compile" } else { "runtime" };
                let owner = match class {
                    Some(class) => format!("selector of class {class}"),
                    None => "selector".to_string(),
                };
                format!(
                    "claim {claim}, request {request}: {owner} {expression:?}: CEL {kind} error: {message}"
                )
            }
            DraReason::AllocationError { request, message } => {
                format!("claim {claim}, request {request}: {message}")
            }
        }
    }

    /// Whether the verdict holds for every node: a problem of the claim itself, found before
    /// looking at any node (the scheduler's PreFilter).
    pub fn is_per_pod(&self) -> bool {
        !matches!(
            *self.reason,
            DraReason::NotAvailableOnNode
                | DraReason::CannotAllocate { .. }
                | DraReason::AllocationError { .. }
                | DraReason::SelectorError { compile: false, .. }
        )
    }

    /// The claim's name without its namespace.
    fn claim_name(&self) -> &str {
        self.claim.split_once('/').map_or(&self.claim, |(_, n)| n)
    }
}

impl fmt::Display for DraUnfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.reason {
            DraReason::ClaimNotFound => write!(
                f,
                "resourceclaim.resource.k8s.io {:?} not found",
                self.claim_name()
            ),
            DraReason::ClaimNotCreated { pod } => {
                write!(f, "pod {pod:?}: ResourceClaim not created yet")
            }
            DraReason::ClaimNotOwned { pod } => write!(
                f,
                "ResourceClaim {} was not created for pod {pod} (pod is not owner)",
                self.claim
            ),
            DraReason::ClaimDeleting => {
                write!(f, "resourceclaim {:?} is being deleted", self.claim_name())
            }
            DraReason::ClaimInUse => f.write_str("resourceclaim in use"),
            DraReason::NotAvailableOnNode => f.write_str("resourceclaim not available on the node"),
            DraReason::ClassNotFound { request, class } => {
                write!(f, "request {request}: device class {class} does not exist")
            }
            DraReason::CannotAllocate { .. } => f.write_str("cannot allocate all claims"),
            DraReason::SelectorError {
                class,
                index,
                message,
                compile,
                ..
            } => {
                let kind = if *compile { "compile" } else { "runtime" };
                match class {
                    Some(class) => write!(
                        f,
                        "class {class}: selector #{index}: CEL {kind} error: {message}"
                    ),
                    None => write!(
                        f,
                        "claim {}: selector #{index}: CEL {kind} error: {message}",
                        self.claim
                    ),
                }
            }
            DraReason::AllocationError { request, message } => {
                write!(f, "claim {}, request {request}: {message}", self.claim)
            }
        }
    }
}

/// Devices of one pool local to a node: how many there are and how many are allocated now.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolUtilization {
    pub driver: String,
    pub pool: String,
    pub total: usize,
    pub allocated: usize,
}

/// A selector's verdict on a device: selected or not, or why it could not be evaluated.
pub(crate) type Verdict = Result<bool, Arc<str>>;

/// Index of a device in the catalogue.
pub(crate) type DeviceIdx = u32;
/// Index of a claim in the state.
pub(crate) type ClaimIdx = u32;

/// One device of a current slice.
#[derive(Debug, Clone)]
pub(crate) struct DeviceEntry {
    slice: Arc<ResourceSlice>,
    index: usize,
    /// Devices with equal driver, attributes and capacity share a shape.
    shape: u32,
}

impl DeviceEntry {
    pub(crate) fn device(&self) -> &Device {
        &self.slice.devices[self.index]
    }

    pub(crate) fn driver(&self) -> &str {
        &self.slice.driver
    }

    pub(crate) fn pool_name(&self) -> &str {
        &self.slice.pool
    }

    /// Where the device can be used from.
    pub(crate) fn scope(&self) -> &DeviceScope {
        if self.slice.per_device_node_selection {
            self.device()
                .scope
                .as_ref()
                .unwrap_or(&DeviceScope::AllNodes)
        } else {
            &self.slice.scope
        }
    }
}

/// A pool: the slices of its highest generation.
#[derive(Debug, Clone)]
struct PoolEntry {
    driver: String,
    name: String,
    slice_count: i64,
    /// Indexes into `Catalogue::slices` of the slices of `generation`.
    slices: Vec<u32>,
    /// Two devices of the pool have the same name.
    duplicate_device: bool,
}

impl PoolEntry {
    /// All slices of the generation are there: devices can be allocated from the pool.
    fn is_complete(&self) -> bool {
        self.slices.len() as i64 >= self.slice_count
    }

    /// Why no device can be allocated from the pool now, in the allocator's words: a pool
    /// missing slices is "being updated", one naming a device twice is "invalid".
    fn unusable(&self) -> Option<&'static str> {
        if !self.is_complete() {
            Some("being updated")
        } else if self.duplicate_device {
            Some("invalid")
        } else {
            None
        }
    }
}

/// A slice of a pool's current generation and its devices.
#[derive(Debug, Clone)]
struct SliceEntry {
    slice: Arc<ResourceSlice>,
    pool: u32,
    /// The first of its devices in `Catalogue::devices` (they are consecutive).
    first_device: DeviceIdx,
}

/// Devices and pools, as the allocator reads them.
#[derive(Debug, Default, Clone)]
pub(crate) struct Catalogue {
    devices: Vec<DeviceEntry>,
    /// (driver, pool, device) → the device, for claims' allocation results.
    device_ids: HashMap<(String, String, String), DeviceIdx>,
    pools: Vec<PoolEntry>,
    pool_ids: HashMap<(String, String), u32>,
    slices: Vec<SliceEntry>,
    /// Node name → its node-local slices (current generation).
    node_slices: HashMap<String, Vec<u32>>,
    /// The same for nodes that exist only in the simulation; they take precedence.
    simulated_node_slices: HashMap<String, Vec<u32>>,
    /// Slices that are not node-local (selector, all nodes, per-device selection).
    shared_slices: Vec<u32>,
    /// Shape hash → shapes with that hash, each with a device that has it.
    shapes: HashMap<u64, Vec<(u32, DeviceIdx)>>,
    shape_count: u32,
}

impl Catalogue {
    /// Adds slices, keeping only each pool's highest generation among them; `simulated_node`
    /// names the simulated node they belong to.
    fn add_slices(&mut self, slices: &[Arc<ResourceSlice>], simulated_node: Option<&str>) {
        // The highest generation of each pool among these slices.
        let mut newest: HashMap<(&str, &str), i64> = HashMap::new();
        for slice in slices {
            let generation = newest
                .entry((slice.driver.as_str(), slice.pool.as_str()))
                .or_insert(slice.pool_generation);
            *generation = (*generation).max(slice.pool_generation);
        }
        let mut pools_here: HashMap<(&str, &str), u32> = HashMap::new();
        let mut seen: std::collections::HashSet<(u32, &str)> = std::collections::HashSet::new();
        for slice in slices {
            let key = (slice.driver.as_str(), slice.pool.as_str());
            if newest.get(&key) != Some(&slice.pool_generation) {
                continue;
            }
            let pool = *pools_here.entry(key).or_insert_with(|| {
                let id = self.pools.len() as u32;
                self.pools.push(PoolEntry {
                    driver: slice.driver.clone(),
                    name: slice.pool.clone(),
                    slice_count: slice.pool_slice_count,
                    slices: Vec::new(),
                    duplicate_device: false,
                });
                // A later call for the same pool (a simulated node's slices set again)
                // replaces it.
                self.pool_ids
                    .insert((slice.driver.clone(), slice.pool.clone()), id);
                id
            });
            let slice_id = self.slices.len() as u32;
            let first_device = self.devices.len() as DeviceIdx;
            self.pools[pool as usize].slices.push(slice_id);
            for index in 0..slice.devices.len() {
                let id = self.devices.len() as DeviceIdx;
                let shape = self.shape_of(&slice.driver, &slice.devices[index]);
                self.device_ids.insert(
                    (
                        slice.driver.clone(),
                        slice.pool.clone(),
                        slice.devices[index].name.clone(),
                    ),
                    id,
                );
                self.devices.push(DeviceEntry {
                    slice: slice.clone(),
                    index,
                    shape,
                });
            }
            self.slices.push(SliceEntry {
                slice: slice.clone(),
                pool,
                first_device,
            });
            for device in &slice.devices {
                if !seen.insert((pool, device.name.as_str())) {
                    self.pools[pool as usize].duplicate_device = true;
                }
            }
            match (simulated_node, slice.node_name()) {
                (Some(node), _) => self
                    .simulated_node_slices
                    .entry(node.to_string())
                    .or_default()
                    .push(slice_id),
                (None, Some(node)) if !slice.per_device_node_selection => self
                    .node_slices
                    .entry(node.to_string())
                    .or_default()
                    .push(slice_id),
                _ => self.shared_slices.push(slice_id),
            }
        }
    }

    /// The shape id of a device, registering a new shape when no device had it before.
    fn shape_of(&mut self, driver: &str, device: &Device) -> u32 {
        let mut hasher = DefaultHasher::new();
        driver.hash(&mut hasher);
        device.attributes.hash(&mut hasher);
        device.capacity.hash(&mut hasher);
        let hash = hasher.finish();
        let candidates = self.shapes.entry(hash).or_default();
        for (shape, representative) in candidates.iter() {
            let other = &self.devices[*representative as usize];
            if other.driver() == driver
                && other.device().attributes == device.attributes
                && other.device().capacity == device.capacity
            {
                return *shape;
            }
        }
        let shape = self.shape_count;
        self.shape_count += 1;
        // The device being added gets the next index.
        candidates.push((shape, self.devices.len() as DeviceIdx));
        shape
    }

    pub(crate) fn device(&self, id: DeviceIdx) -> &DeviceEntry {
        &self.devices[id as usize]
    }

    pub(crate) fn shape_count(&self) -> usize {
        self.shape_count as usize
    }

    /// The node-local slices of a node: simulated ones if it has some, else the cluster's.
    fn local_slices(&self, node_name: &str) -> &[u32] {
        self.simulated_node_slices
            .get(node_name)
            .or_else(|| self.node_slices.get(node_name))
            .map_or(&[], Vec::as_slice)
    }

    /// The devices a node can reach, in catalogue order, from usable pools only, and the first
    /// unusable pool the node reaches (as `driver/pool`) with why, if any.
    pub(crate) fn reachable(
        &self,
        node_name: &str,
        labels: &Labels,
        out: &mut Vec<DeviceIdx>,
    ) -> Option<(String, &'static str)> {
        let mut incomplete = None;
        let mut take = |slice_id: u32, out: &mut Vec<DeviceIdx>, per_device: bool| {
            let entry = &self.slices[slice_id as usize];
            let pool = &self.pools[entry.pool as usize];
            let count = entry.slice.devices.len() as DeviceIdx;
            let devices = entry.first_device..entry.first_device + count;
            let mut reached = false;
            for id in devices {
                if per_device && !self.device(id).scope().reaches(node_name, labels) {
                    continue;
                }
                reached = true;
                if pool.unusable().is_none() {
                    out.push(id);
                }
            }
            if reached
                && incomplete.is_none()
                && let Some(why) = pool.unusable()
            {
                incomplete = Some((format!("{}/{}", pool.driver, pool.name), why));
            }
        };
        for slice_id in self.local_slices(node_name) {
            take(*slice_id, out, false);
        }
        for slice_id in &self.shared_slices {
            let slice = &self.slices[*slice_id as usize].slice;
            if slice.per_device_node_selection {
                take(*slice_id, out, true);
            } else if slice.scope.reaches(node_name, labels) {
                take(*slice_id, out, false);
            }
        }
        incomplete
    }
}

/// A claim and its state in the snapshot now.
#[derive(Debug, Clone)]
pub(crate) struct ClaimEntry {
    pub(crate) claim: Arc<ResourceClaim>,
    pub(crate) allocation: Option<Arc<ClaimAllocation>>,
    /// The devices of `allocation` that are in use because of it (not admin access).
    pub(crate) devices: Vec<DeviceIdx>,
    pub(crate) reserved_for: Vec<ClaimConsumer>,
}

/// One change of the DRA state, recorded so that a branch can revert it.
#[derive(Debug, Clone)]
pub(crate) enum DraUndo {
    /// A consumer was appended to the claim's `reserved_for`.
    Reserved(ClaimIdx),
    /// The consumer was removed from this position of the claim's `reserved_for`.
    Unreserved(ClaimIdx, usize, ClaimConsumer),
    /// The claim got an allocation.
    Allocated(ClaimIdx),
    /// The claim lost this allocation, which took these devices.
    Deallocated(ClaimIdx, Arc<ClaimAllocation>, Vec<DeviceIdx>),
    /// A claim was added after the cluster's (the last one of the state).
    Added,
}

/// Compiled selectors, by expression.
#[derive(Debug, Default, Clone)]
pub(crate) struct SelectorCache {
    by_source: HashMap<String, u32>,
    compiled: Vec<Result<Arc<Selector>, CompileError>>,
    /// (selector, shape) → verdict, filled as devices are looked at.
    verdicts: HashMap<(u32, u32), Verdict>,
}

impl SelectorCache {
    /// The id of the expression, compiling it on first use.
    pub(crate) fn id(&mut self, source: &str) -> u32 {
        if let Some(id) = self.by_source.get(source) {
            return *id;
        }
        let id = self.compiled.len() as u32;
        self.compiled.push(Selector::compile(source).map(Arc::new));
        self.by_source.insert(source.to_string(), id);
        id
    }

    pub(crate) fn get(&self, id: u32) -> &Result<Arc<Selector>, CompileError> {
        &self.compiled[id as usize]
    }

    pub(crate) fn verdict(&self, selector: u32, shape: u32) -> Option<&Verdict> {
        self.verdicts.get(&(selector, shape))
    }
}

/// Everything the DynamicResources filter knows, and the allocation state of claims.
#[derive(Debug, Default, Clone)]
pub(crate) struct DraState {
    pub(crate) catalogue: Catalogue,
    classes: HashMap<String, Arc<DeviceClass>>,
    pub(crate) claims: Vec<ClaimEntry>,
    claim_ids: HashMap<String, HashMap<String, ClaimIdx>>,
    /// Per device, how many claims use it now (admin access does not count).
    pub(crate) in_use: Vec<u32>,
    /// The cluster's slices and the simulated nodes' ones, to rebuild the catalogue.
    cluster_slices: Vec<Arc<ResourceSlice>>,
    simulated_slices: HashMap<String, Vec<Arc<ResourceSlice>>>,
    pub(crate) selectors: SelectorCache,
    /// Changes whenever the catalogue, an allocation or a reservation changes (never goes
    /// back), so a cached plan or allocation is known to be computed on the state of now.
    pub(crate) epoch: u64,
    /// The allocation the last `check` found for a pod on a node, for `add_pod` to reuse.
    last_fit: Option<LastFit>,
    /// The plan of the pod checked last: a pod checked against node after node (the
    /// estimator's scans) resolves its claims once. Only used while `epoch` is the plan's, so
    /// a stale plan is never used. Behind a mutex only to keep the snapshot `Sync` (a plan has
    /// cells); it is always reached through `&mut self`, without locking.
    kept_plan: KeptPlan,
}

/// The kept plan of [`DraState`]. A copy of the snapshot starts without one: it is only a cache
/// (a missing plan is prepared again), and a plan's cells cannot be shared between copies.
#[derive(Debug, Default)]
struct KeptPlan(Mutex<Option<PodPlan>>);

impl Clone for KeptPlan {
    fn clone(&self) -> KeptPlan {
        KeptPlan::default()
    }
}

/// What the last successful `check` of a pod with claims found.
#[derive(Debug, Clone)]
struct LastFit {
    pod_uid: CompactString,
    node: String,
    epoch: u64,
    allocation: NodeAllocation,
}

impl DraState {
    pub(crate) fn set_objects(&mut self, objects: &DraObjects) {
        self.classes = objects
            .classes
            .iter()
            .map(|c| (c.name.clone(), c.clone()))
            .collect();
        self.cluster_slices = objects.slices.clone();
        self.claims.clear();
        self.claim_ids.clear();
        for claim in &objects.claims {
            let id = self.claims.len() as ClaimIdx;
            self.claims.push(ClaimEntry {
                claim: claim.clone(),
                allocation: claim.allocation.clone().map(Arc::new),
                devices: Vec::new(),
                reserved_for: claim.reserved_for.clone(),
            });
            self.claim_ids
                .entry(claim.namespace.clone())
                .or_default()
                .insert(claim.name.clone(), id);
        }
        self.rebuild_catalogue();
    }

    /// Adds a claim the cluster does not have (one made in the simulation, e.g. for a pod that
    /// does not exist yet), with its allocation's devices in use. A claim whose namespace and name
    /// are known already is not added (`false`): a claim never replaces another, whose
    /// allocation pods may hold.
    pub(crate) fn add_claim(&mut self, claim: Arc<ResourceClaim>, undo: &mut Vec<DraUndo>) -> bool {
        if self.claim_id(&claim.namespace, &claim.name).is_some() {
            return false;
        }
        let id = self.claims.len() as ClaimIdx;
        self.claim_ids
            .entry(claim.namespace.clone())
            .or_default()
            .insert(claim.name.clone(), id);
        self.claims.push(ClaimEntry {
            allocation: claim.allocation.clone().map(Arc::new),
            devices: Vec::new(),
            reserved_for: claim.reserved_for.clone(),
            claim,
        });
        let devices = self.resolve_devices(id);
        for d in &devices {
            self.in_use[*d as usize] += 1;
        }
        self.claims[id as usize].devices = devices;
        self.epoch += 1;
        undo.push(DraUndo::Added);
        true
    }

    /// Whether simulated nodes' slices were ever recorded.
    pub(crate) fn has_simulated_slices(&self) -> bool {
        !self.simulated_slices.is_empty()
    }

    pub(crate) fn set_simulated_slices(&mut self, node_name: &str, slices: Vec<ResourceSlice>) {
        // Callers set the same slices for a template copy again and again: nothing changes then
        // (and the catalogue does not grow).
        let unchanged = self.simulated_slices.get(node_name).is_some_and(|current| {
            current.len() == slices.len() && current.iter().zip(&slices).all(|(a, b)| **a == *b)
        });
        if unchanged {
            return;
        }
        let slices: Vec<Arc<ResourceSlice>> = slices.into_iter().map(Arc::new).collect();
        // Devices are appended: existing device ids (and what is allocated on them) stay valid.
        self.catalogue.simulated_node_slices.remove(node_name);
        self.catalogue.add_slices(&slices, Some(node_name));
        self.simulated_slices.insert(node_name.to_string(), slices);
        self.in_use.resize(self.catalogue.devices.len(), 0);
        self.epoch += 1;
    }

    /// Rebuilds the catalogue from the cluster's and the simulated slices, and marks the
    /// devices of every allocated claim in use.
    fn rebuild_catalogue(&mut self) {
        self.catalogue = Catalogue::default();
        self.catalogue.add_slices(&self.cluster_slices, None);
        for (node, slices) in &self.simulated_slices {
            self.catalogue.add_slices(slices, Some(node));
        }
        self.in_use = vec![0; self.catalogue.devices.len()];
        for id in 0..self.claims.len() {
            let devices = self.resolve_devices(id as ClaimIdx);
            for d in &devices {
                self.in_use[*d as usize] += 1;
            }
            self.claims[id].devices = devices;
        }
        self.selectors.verdicts.clear();
        self.last_fit = None;
        self.epoch += 1;
    }

    /// The devices a claim's allocation keeps in use (admin access excluded).
    fn resolve_devices(&self, claim: ClaimIdx) -> Vec<DeviceIdx> {
        let Some(allocation) = &self.claims[claim as usize].allocation else {
            return Vec::new();
        };
        allocation
            .devices
            .iter()
            .filter(|d| !d.admin_access)
            .filter_map(|d| {
                self.catalogue
                    .device_ids
                    .get(&(d.driver.clone(), d.pool.clone(), d.device.clone()))
                    .copied()
            })
            .collect()
    }

    pub(crate) fn class(&self, name: &str) -> Option<&Arc<DeviceClass>> {
        self.classes.get(name)
    }

    pub(crate) fn claim_id(&self, namespace: &str, name: &str) -> Option<ClaimIdx> {
        self.claim_ids.get(namespace)?.get(name).copied()
    }

    pub(crate) fn claim_allocation(&self, namespace: &str, name: &str) -> Option<&ClaimAllocation> {
        let id = self.claim_id(namespace, name)?;
        self.claims[id as usize].allocation.as_deref()
    }

    pub(crate) fn claim_reserved_for(&self, namespace: &str, name: &str) -> &[ClaimConsumer] {
        self.claim_id(namespace, name)
            .map_or(&[], |id| &self.claims[id as usize].reserved_for)
    }

    /// Devices per pool of the node's local slices, and how many are in use.
    pub(crate) fn device_pools(&self, node_name: &str) -> Vec<PoolUtilization> {
        let mut by_pool: HashMap<u32, (usize, usize)> = HashMap::new();
        for slice_id in self.catalogue.local_slices(node_name) {
            let entry = &self.catalogue.slices[*slice_id as usize];
            let counts = by_pool.entry(entry.pool).or_default();
            for i in 0..entry.slice.devices.len() {
                let id = entry.first_device as usize + i;
                counts.0 += 1;
                if self.in_use.get(id).is_some_and(|n| *n > 0) {
                    counts.1 += 1;
                }
            }
        }
        let mut pools: Vec<PoolUtilization> = by_pool
            .into_iter()
            .map(|(pool, (total, allocated))| {
                let pool = &self.catalogue.pools[pool as usize];
                PoolUtilization {
                    driver: pool.driver.clone(),
                    pool: pool.name.clone(),
                    total,
                    allocated,
                }
            })
            .collect();
        pools.sort();
        pools
    }

    /// Remembers what a successful check of `pod` on `node` found, for `add_pod`.
    pub(crate) fn remember_fit(&mut self, pod: &Pod, node: &str, allocation: NodeAllocation) {
        self.last_fit = Some(LastFit {
            pod_uid: pod.uid.clone(),
            node: node.to_string(),
            epoch: self.epoch,
            allocation,
        });
    }

    /// The allocation remembered for this pod and node, if nothing changed since.
    fn take_fit(&mut self, pod: &Pod, node: &str) -> Option<NodeAllocation> {
        let fit = self.last_fit.take()?;
        (fit.pod_uid == pod.uid && fit.node == node && fit.epoch == self.epoch)
            .then_some(fit.allocation)
    }

    /// The per-pod part of the filter for `pod`: the plan kept from the pod's last check when
    /// nothing changed since, a new one otherwise.
    pub(crate) fn plan(&mut self, pod: &Pod) -> Result<PodPlan, DraUnfit> {
        let epoch = self.epoch;
        let kept = self
            .kept_plan
            .0
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match kept {
            Some(plan) if plan.is_current(pod, epoch) => Ok(plan),
            _ => PodPlan::prepare(self, pod),
        }
    }

    /// Takes back a plan after a check: its selector verdicts go to the cache, and the plan is
    /// kept for the pod's next check.
    pub(crate) fn keep_plan(&mut self, plan: PodPlan) {
        self.keep_verdicts(plan.new_verdicts());
        if plan.epoch() == self.epoch {
            *self
                .kept_plan
                .0
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner) = Some(plan);
        }
    }

    /// Stores selector verdicts a plan computed, for the plans to come.
    pub(crate) fn keep_verdicts(&mut self, verdicts: Vec<((u32, u32), Verdict)>) {
        self.selectors.verdicts.extend(verdicts);
    }

    /// The claims of a pod that exist, in the order of its entries.
    fn pod_claims(&self, pod: &Pod) -> Vec<ClaimIdx> {
        pod.resource_claims
            .iter()
            .filter_map(|entry| pod.resource_claim_name(entry))
            .filter_map(|name| self.claim_id(&pod.namespace, name))
            .collect()
    }

    /// What the scheduler's Reserve does when `pod` is placed on the node: allocates the pod's
    /// claims that are not allocated yet (when devices for all of them are available there) and
    /// reserves every claim of the pod for it. Returns the changes, for the undo log.
    pub(crate) fn place_pod(
        &mut self,
        pod: &Pod,
        node_name: &str,
        labels: &Labels,
        undo: &mut Vec<DraUndo>,
    ) {
        let claims = self.pod_claims(pod);
        if claims.is_empty() {
            return;
        }
        let pending = claims
            .iter()
            .any(|c| self.claims[*c as usize].allocation.is_none());
        if pending {
            let allocation = match self.take_fit(pod, node_name) {
                Some(allocation) => Some(allocation),
                None => self.allocate_now(pod, node_name, labels),
            };
            if let Some(allocation) = allocation {
                for (claim, result, devices) in allocation.claims {
                    if self.claims[claim as usize].allocation.is_none() {
                        self.set_allocation(claim, Some(Arc::new(result)), devices);
                        undo.push(DraUndo::Allocated(claim));
                    }
                }
            }
        }
        for claim in claims {
            let entry = &mut self.claims[claim as usize];
            if entry.reserved_for.iter().any(|c| c.uid == pod.uid) {
                continue;
            }
            entry.reserved_for.push(ClaimConsumer {
                resource: "pods".to_string(),
                name: pod.name.to_string(),
                uid: pod.uid.to_string(),
            });
            undo.push(DraUndo::Reserved(claim));
            self.epoch += 1;
        }
    }

    /// Runs the allocator for `pod` on a node, outside any check.
    fn allocate_now(
        &mut self,
        pod: &Pod,
        node_name: &str,
        labels: &Labels,
    ) -> Option<NodeAllocation> {
        let plan = PodPlan::prepare(self, pod).ok()?;
        let outcome = plan.allocate(self, node_name, labels, false);
        self.keep_verdicts(plan.new_verdicts());
        outcome.ok()
    }

    /// The pod leaves its node: its reservations go, and a claim left with no consumer loses
    /// its allocation (so that it can be allocated again elsewhere).
    pub(crate) fn unplace_pod(&mut self, pod: &Pod, undo: &mut Vec<DraUndo>) {
        for claim in self.pod_claims(pod) {
            let entry = &mut self.claims[claim as usize];
            let Some(position) = entry.reserved_for.iter().position(|c| c.uid == pod.uid) else {
                continue;
            };
            let consumer = entry.reserved_for.remove(position);
            undo.push(DraUndo::Unreserved(claim, position, consumer));
            self.epoch += 1;
            if entry.reserved_for.is_empty()
                && let Some(allocation) = entry.allocation.clone()
            {
                let devices = entry.devices.clone();
                self.set_allocation(claim, None, Vec::new());
                undo.push(DraUndo::Deallocated(claim, allocation, devices));
            }
        }
    }

    /// Reverts one recorded change.
    pub(crate) fn undo(&mut self, op: DraUndo) {
        match op {
            DraUndo::Reserved(claim) => {
                self.claims[claim as usize].reserved_for.pop();
                self.epoch += 1;
            }
            DraUndo::Unreserved(claim, position, consumer) => {
                let reserved = &mut self.claims[claim as usize].reserved_for;
                let position = position.min(reserved.len());
                reserved.insert(position, consumer);
                self.epoch += 1;
            }
            DraUndo::Allocated(claim) => self.set_allocation(claim, None, Vec::new()),
            DraUndo::Deallocated(claim, allocation, devices) => {
                self.set_allocation(claim, Some(allocation), devices);
            }
            DraUndo::Added => {
                // Undone in reverse order: the added claim is the last one.
                let Some(entry) = self.claims.pop() else {
                    return;
                };
                for d in &entry.devices {
                    self.in_use[*d as usize] = self.in_use[*d as usize].saturating_sub(1);
                }
                if let Some(names) = self.claim_ids.get_mut(&entry.claim.namespace) {
                    names.remove(&entry.claim.name);
                }
                self.epoch += 1;
            }
        }
    }

    /// Gives the claim an allocation (or none), `devices` being the devices it takes.
    fn set_allocation(
        &mut self,
        claim: ClaimIdx,
        allocation: Option<Arc<ClaimAllocation>>,
        devices: Vec<DeviceIdx>,
    ) {
        for d in std::mem::take(&mut self.claims[claim as usize].devices) {
            self.in_use[d as usize] = self.in_use[d as usize].saturating_sub(1);
        }
        self.claims[claim as usize].allocation = allocation;
        for d in &devices {
            self.in_use[*d as usize] += 1;
        }
        self.claims[claim as usize].devices = devices;
        self.epoch += 1;
    }

    /// Compares the state with one recomputed from the claims' allocations. For tests.
    #[cfg(test)]
    pub(crate) fn assert_consistent(&self) {
        let mut expected = vec![0u32; self.catalogue.devices.len()];
        for (id, claim) in self.claims.iter().enumerate() {
            let devices = self.resolve_devices(id as ClaimIdx);
            assert_eq!(
                claim.devices,
                devices,
                "devices of claim {}",
                claim.claim.key()
            );
            for d in devices {
                expected[d as usize] += 1;
            }
            let uids: std::collections::HashSet<&str> =
                claim.reserved_for.iter().map(|c| c.uid.as_str()).collect();
            assert_eq!(uids.len(), claim.reserved_for.len(), "duplicate consumers");
        }
        assert_eq!(self.in_use, expected, "devices in use");
    }

    /// A summary of the allocation state, to compare two snapshots. For tests.
    #[cfg(test)]
    pub(crate) fn state_summary(
        &self,
    ) -> Vec<(String, Option<ClaimAllocation>, Vec<ClaimConsumer>)> {
        self.claims
            .iter()
            .map(|c| {
                (
                    c.claim.key(),
                    c.allocation.as_deref().cloned(),
                    c.reserved_for.clone(),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
