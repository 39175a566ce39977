//! The cluster snapshot: nodes with the pods placed on them, and what-if branches.
//!
//! A what-if branch ([`Snapshot::branch`]) copies nothing. While a branch is open every mutation
//! records its inverse in an undo log; dropping the [`Branch`] replays the log back to the branch
//! point and [`Branch::commit`] keeps the changes (and folds the log into the enclosing branch, if
//! any). Both cost time proportional to the changes made on the branch, never to the size of the
//! cluster. Branches nest, and since reverting is what dropping does, a branch cannot be left
//! open by an early return, a `?` or a panic.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut, Range};
use std::sync::Arc;

use ferroscale_model::{
    ClaimAllocation, ClaimConsumer, CsiNode, DraObjects, HostPort, Labels, Node, Pod,
    ResourceClaim, ResourceSlice, Resources, TaintEffect, VolumeSource,
};

use crate::dra::{DraState, DraUndo, DraUnfit, NodeAllocation, PodPlan, PoolUtilization};
use crate::filters::{FilterSwitches, InterPodPlan};
use crate::scheduler_config::SchedulerProfile;
use crate::topology::{NamespaceLabels, TopologyIndex, TopologyView};
use crate::volumes::VolumeCatalogue;

use capacity_index::CapacityIndex;

mod capacity_index;

/// How many slots in a row that cannot fit a search reads before it asks the capacity index to
/// jump.
const PROBED_SLOTS: usize = 8;

/// Stable handle of a node within one snapshot. Handles of removed nodes are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A node and what is placed on it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    /// The pods placed here. Being in this list is what places a pod: a pod the removal
    /// simulation moved here (shared, not copied) keeps the `node_name` of the node it really
    /// runs on, which no filter reads for placed pods.
    pub pods: Vec<Arc<Pod>>,
    /// Sum of the placed pods' requests, with `pods` counting the pods.
    pub requested: Resources,
    /// Host ports in use on the node.
    pub host_ports: Vec<HostPort>,
}

impl NodeInfo {
    fn new(node: Arc<Node>) -> NodeInfo {
        NodeInfo {
            node,
            pods: Vec::new(),
            requested: Resources::default(),
            host_ports: Vec::new(),
        }
    }

    /// Allocatable minus requested.
    pub fn free(&self) -> Resources {
        self.node.allocatable.minus(&self.requested)
    }
}

/// What is left on a node, packed densely per slot so that `find_node` can reject full nodes
/// without touching the node itself. Extended resources are not summarised; the full filters check
/// them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FitSummary {
    pub cpu_milli: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub pods: i64,
    /// Live and not cordoned.
    pub open: bool,
    /// Has a taint that can reject pods (NoSchedule or NoExecute).
    pub tainted: bool,
    /// Some placed pod uses a host port.
    pub ports_in_use: bool,
}

impl FitSummary {
    fn of(info: &NodeInfo) -> FitSummary {
        let a = &info.node.allocatable;
        let r = &info.requested;
        FitSummary {
            cpu_milli: a.cpu_milli.saturating_sub(r.cpu_milli),
            memory: a.memory.saturating_sub(r.memory),
            ephemeral_storage: a.ephemeral_storage.saturating_sub(r.ephemeral_storage),
            pods: a.pods.saturating_sub(r.pods),
            open: !info.node.unschedulable,
            tainted: info
                .node
                .taints
                .iter()
                .any(|t| t.effect != TaintEffect::PreferNoSchedule),
            ports_in_use: !info.host_ports.is_empty(),
        }
    }

    /// The amounts a pod needs, in the same shape (`pods` is 1).
    pub fn wanted_by(pod: &Pod) -> FitSummary {
        FitSummary {
            cpu_milli: pod.requests.cpu_milli,
            memory: pod.requests.memory,
            ephemeral_storage: pod.requests.ephemeral_storage,
            pods: 1,
            open: true,
            tainted: false,
            ports_in_use: !pod.host_ports.is_empty(),
        }
    }

    /// True when the node-local filters certainly accept a pod wanting `wants` that has no node
    /// name, node selector, node affinity or extended resource request: the node is open, has
    /// room, has no taint that could reject, and no host port that could conflict.
    pub fn admits_unconstrained(&self, wants: &FitSummary) -> bool {
        self.may_fit(wants) && !self.tainted && !(self.ports_in_use && wants.ports_in_use)
    }

    /// False only when the node certainly rejects a pod wanting `wants`.
    pub fn may_fit(&self, wants: &FitSummary) -> bool {
        self.open
            && wants.pods <= self.pods
            && (wants.cpu_milli <= 0 || wants.cpu_milli <= self.cpu_milli)
            && (wants.memory <= 0 || wants.memory <= self.memory)
            && (wants.ephemeral_storage <= 0 || wants.ephemeral_storage <= self.ephemeral_storage)
    }
}

#[derive(Debug, Clone)]
enum Undo {
    AddedNode(NodeId),
    /// Boxed, as is a DRA change: the log holds one entry per change of a branch, and the
    /// common entries (a pod placed or taken off) are a few words.
    RemovedNode(NodeId, Box<NodeInfo>),
    AddedPod(NodeId),
    RemovedPod(NodeId, usize, Arc<Pod>),
    /// A pod placed at this position of the node's pods (not at the end).
    InsertedPod(NodeId, usize),
    /// The node object of a slot replaced; the previous one.
    ReplacedNode(NodeId, Arc<Node>),
    /// A change of a claim's allocation or reservation.
    Dra(Box<DraUndo>),
}

/// An in-memory cluster on which scheduling is simulated.
///
/// Besides the nodes and their pods, the snapshot keeps the topology indexes the inter-pod filters
/// read (see the private `topology` module). They are registered by the filters the first time a
/// pod needs them (which is why [`crate::check`] and [`crate::find_node`] take `&mut Snapshot`)
/// and kept up to date by the same four internal functions (`attach_node`, `detach_node`,
/// `attach_pod`, `detach_pod`) that both the public mutations and the undo log go through, so
/// branching and reverting stay proportional to the changes made on the branch.
///
/// The snapshot is plain data, `Send` and `Sync`: no lock inside, and no cell but the per-node
/// counts of the topology indexes, atomics filled the first time a filter reads a node (see the
/// private `topology` module).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    slots: Vec<Option<NodeInfo>>,
    /// Per slot, kept equal to `FitSummary::of` the slot's node (closed for dead slots).
    fit_summaries: Vec<FitSummary>,
    /// Maxima of `fit_summaries` over ranges of slots, updated with them: searches skip whole
    /// ranges of slots that certainly cannot take a pod.
    capacity: CapacityIndex,
    by_name: HashMap<String, NodeId>,
    live_nodes: usize,
    pod_count: usize,
    /// Placed pods with at least one required anti-affinity term: when zero, the symmetric
    /// anti-affinity check is skipped without touching the indexes.
    pods_with_anti_affinity: usize,
    undo: Vec<Undo>,
    fork_points: Vec<usize>,
    namespace_labels: NamespaceLabels,
    topology: TopologyIndex,
    /// The scheduler profile the filters follow, and the switches resolved from it once.
    profile: Arc<SchedulerProfile>,
    switches: FilterSwitches,
    /// Claims, volumes, classes and CSINodes of the cluster, for the volume filters.
    volumes: Arc<VolumeCatalogue>,
    /// CSINodes of nodes that exist only in the simulation (template copies, placeholders).
    simulated_csi_nodes: HashMap<String, Arc<CsiNode>>,
    /// `false` when CSINodes are ignored (`--enable-csi-node-aware-scheduling=false`).
    ignore_csi_nodes: bool,
    /// Namespace → claim name → how many placed pods use the claim (ReadWriteOncePod).
    claim_users: HashMap<String, HashMap<String, u32>>,
    /// Device classes, claims and slices, and which devices and claims are allocated now.
    dra: DraState,
}

impl Snapshot {
    pub fn new() -> Snapshot {
        Snapshot::default()
    }

    /// An empty snapshot whose filters follow `profile` (`--scheduler-config-file`).
    pub fn with_scheduler_profile(profile: Arc<SchedulerProfile>) -> Snapshot {
        let mut snapshot = Snapshot::new();
        snapshot.set_scheduler_profile(profile);
        snapshot
    }

    /// Makes the filters follow `profile` from now on. Not part of what-if branches.
    pub fn set_scheduler_profile(&mut self, profile: Arc<SchedulerProfile>) {
        self.switches = FilterSwitches::of(&profile);
        self.profile = profile;
        // Prepared plans were made under the previous profile.
        self.topology.plans().clear();
    }

    /// The scheduler profile the filters follow.
    pub fn scheduler_profile(&self) -> &SchedulerProfile {
        &self.profile
    }

    pub(crate) fn filter_switches(&self) -> FilterSwitches {
        self.switches
    }

    /// The storage objects the volume filters read from now on. Not part of what-if branches.
    pub fn set_volume_catalogue(&mut self, catalogue: Arc<VolumeCatalogue>) {
        self.volumes = catalogue;
    }

    pub fn volume_catalogue(&self) -> &VolumeCatalogue {
        &self.volumes
    }

    /// Records the CSINode of a node that exists only in the simulation (a template copy): its
    /// per-driver volume limits then apply to it. Not part of what-if branches; a later call for
    /// the same node name replaces it.
    pub fn set_simulated_csi_node(&mut self, csi_node: CsiNode) {
        self.simulated_csi_nodes
            .insert(csi_node.node_name.clone(), Arc::new(csi_node));
    }

    /// Whether NodeVolumeLimits reads CSINodes at all; without them no node has volume limits,
    /// as upstream's simulation without `--enable-csi-node-aware-scheduling`.
    pub fn set_csi_node_limits(&mut self, enabled: bool) {
        self.ignore_csi_nodes = !enabled;
    }

    /// The CSINode of a node: the cluster's, or the one recorded for a simulated node.
    pub fn csi_node(&self, node_name: &str) -> Option<&CsiNode> {
        if self.ignore_csi_nodes {
            return None;
        }
        self.simulated_csi_nodes
            .get(node_name)
            .or_else(|| self.volumes.csi_nodes.get(node_name))
            .map(|c| &**c)
    }

    /// Whether a placed pod uses this claim (directly or as a generic ephemeral volume).
    pub fn claim_in_use(&self, namespace: &str, claim: &str) -> bool {
        self.claim_users
            .get(namespace)
            .and_then(|claims| claims.get(claim))
            .is_some_and(|n| *n > 0)
    }

    /// The DRA objects the DynamicResources filter reads from now on: device classes, claim
    /// templates, claims (their allocations and reservations become the state the branches
    /// start from: allocated devices are in use) and ResourceSlices (node-local ones attach to
    /// their node by name, others reach the nodes their scope selects). Not part of what-if
    /// branches; call it once per loop, before branching.
    pub fn set_dra_objects(&mut self, objects: &DraObjects) {
        self.dra.set_objects(objects);
    }

    /// The node-local ResourceSlices of a node that exists only in the simulation (a template
    /// copy, an upcoming node), already made for it with [`ResourceSlice::for_node_copy`]. Not
    /// part of what-if branches; a later call for the same node name replaces them.
    pub fn set_simulated_resource_slices(&mut self, node_name: &str, slices: Vec<ResourceSlice>) {
        self.dra.set_simulated_slices(node_name, slices);
    }

    /// Adds ResourceClaims the cluster does not have, made in the simulation for pods that do
    /// not exist yet (proactive scale-up's fake pods own copies of their sample's claims): the
    /// DynamicResources filter then resolves them like the cluster's, and an allocated one takes
    /// its devices. Part of what-if branches (a reverted branch drops them). A claim whose
    /// namespace and name the snapshot knows already is skipped; returns how many were added.
    pub fn add_resource_claims(
        &mut self,
        claims: impl IntoIterator<Item = Arc<ResourceClaim>>,
    ) -> usize {
        let mut changes = Vec::new();
        let mut added = 0;
        for claim in claims {
            if self.dra.add_claim(claim, &mut changes) {
                added += 1;
            }
        }
        self.record_dra(changes);
        added
    }

    /// Per pool of the node's local slices (cluster or simulated): devices in total and
    /// allocated now, branches included.
    pub fn device_pools(&self, node: NodeId) -> Vec<PoolUtilization> {
        self.node(node)
            .map(|info| self.dra.device_pools(&info.node.name))
            .unwrap_or_default()
    }

    /// The claim's allocation in the snapshot now (`None` when it is not allocated or unknown).
    pub fn claim_allocation(&self, namespace: &str, name: &str) -> Option<&ClaimAllocation> {
        self.dra.claim_allocation(namespace, name)
    }

    /// The pods the claim is reserved for in the snapshot now.
    pub fn claim_reserved_for(&self, namespace: &str, name: &str) -> &[ClaimConsumer] {
        self.dra.claim_reserved_for(namespace, name)
    }

    /// The per-pod part of the DynamicResources filter for `pod` (compiling its selectors on
    /// first use); the plan of the pod's previous check when nothing changed since. Give it
    /// back with [`Snapshot::dra_learn`].
    pub(crate) fn dra_plan(&mut self, pod: &Pod) -> Result<PodPlan, DraUnfit> {
        self.dra.plan(pod)
    }

    pub(crate) fn dra(&self) -> &DraState {
        &self.dra
    }

    /// Keeps what a filter run learnt: the plan itself (for the pod's next check), the selector
    /// verdicts it evaluated, and the allocation it found for the pod on the node it accepted
    /// (for `add_pod` to reuse).
    pub(crate) fn dra_learn(&mut self, plan: PodPlan, fit: Option<(&Pod, &str, NodeAllocation)>) {
        self.dra.keep_plan(plan);
        if let Some((pod, node, allocation)) = fit {
            self.dra.remember_fit(pod, node, allocation);
        }
    }

    /// Adds a node. A node with the same name replaces nothing: names must be unique, and adding a
    /// duplicate returns the existing handle unchanged.
    pub fn add_node(&mut self, node: Arc<Node>) -> NodeId {
        if let Some(id) = self.by_name.get(&node.name) {
            return *id;
        }
        let id = NodeId(self.slots.len() as u32);
        self.slots.push(None);
        self.attach_node(id, NodeInfo::new(node));
        self.record(Undo::AddedNode(id));
        id
    }

    /// Removes a node with everything placed on it, and returns its pods.
    pub fn remove_node(&mut self, id: NodeId) -> Vec<Arc<Pod>> {
        let Some(info) = self.detach_node(id) else {
            return Vec::new();
        };
        let pods = info.pods.clone();
        self.record(Undo::RemovedNode(id, Box::new(info)));
        for pod in &pods {
            if pod.has_resource_claims() {
                self.release_claims(pod);
            }
        }
        pods
    }

    /// Places a pod on a node without checking whether it fits (callers check with
    /// [`crate::check`] first when that matters).
    pub fn add_pod(&mut self, id: NodeId, pod: Arc<Pod>) {
        if self.node(id).is_none() {
            return;
        }
        // Only pods with device claims pay for a second handle on the pod.
        let with_claims = pod.has_resource_claims().then(|| pod.clone());
        self.attach_pod(id, pod, None);
        self.record(Undo::AddedPod(id));
        if let Some(pod) = with_claims {
            self.place_claims(id, &pod);
        }
    }

    /// The DynamicResources part of placing a pod: its claims are allocated on the node (when
    /// they are not yet and devices are free) and reserved for it.
    #[inline(never)]
    fn place_claims(&mut self, id: NodeId, pod: &Pod) {
        let Some(node) = self.node(id).map(|info| info.node.clone()) else {
            return;
        };
        let mut changes = Vec::new();
        self.dra
            .place_pod(pod, &node.name, &node.labels, &mut changes);
        self.record_dra(changes);
    }

    /// The DynamicResources part of removing a pod: its reservations go, and its claims that
    /// no pod uses any more are deallocated.
    #[inline(never)]
    fn release_claims(&mut self, pod: &Pod) {
        let mut changes = Vec::new();
        self.dra.unplace_pod(pod, &mut changes);
        self.record_dra(changes);
    }

    /// Places a pod at `position` among the node's pods (at the end when `position` is past
    /// it), without checking whether it fits. The kept snapshot of the loop uses it to keep
    /// every node's pods in the order a snapshot built from the same pod list has.
    pub fn insert_pod(&mut self, id: NodeId, position: usize, pod: Arc<Pod>) {
        let Some(info) = self.node(id) else {
            return;
        };
        let position = position.min(info.pods.len());
        let with_claims = pod.has_resource_claims().then(|| pod.clone());
        self.attach_pod(id, pod, Some(position));
        self.record(Undo::InsertedPod(id, position));
        if let Some(pod) = with_claims {
            self.place_claims(id, &pod);
        }
    }

    /// Removes the pod at `position` among the node's pods; returns it.
    pub fn remove_pod_at(&mut self, id: NodeId, position: usize) -> Option<Arc<Pod>> {
        let pod = self.detach_pod(id, position)?;
        self.record(Undo::RemovedPod(id, position, pod.clone()));
        if pod.has_resource_claims() {
            self.release_claims(&pod);
        }
        Some(pod)
    }

    /// Replaces the object of a node in its slot, keeping its pods (in their order) and its
    /// handle: a Node update (labels, taints, allocatable, conditions). The indexes are
    /// recomputed for the node; when the new object equals the old one only the handle on it
    /// changes. Returns `false` when `id` is not a live node or the new object has another name.
    pub fn replace_node(&mut self, id: NodeId, node: Arc<Node>) -> bool {
        let Some(info) = self.slots.get_mut(id.index()).and_then(Option::as_mut) else {
            return false;
        };
        if info.node.name != node.name {
            return false;
        }
        let previous = self.set_node_object(id, node);
        self.record(Undo::ReplacedNode(id, previous));
        true
    }

    /// Makes `node` the object of a live slot; returns the previous object. An equal object
    /// only changes the handle; another one is taken out and put back with the node's pods, so
    /// every index sees the new object.
    fn set_node_object(&mut self, id: NodeId, node: Arc<Node>) -> Arc<Node> {
        if let Some(info) = self.slots.get_mut(id.index()).and_then(Option::as_mut)
            && *info.node == *node
        {
            return std::mem::replace(&mut info.node, node);
        }
        self.swap_node_object(id, node)
    }

    /// Takes the node out of its slot and puts it back with `node` as its object; returns the
    /// previous object.
    fn swap_node_object(&mut self, id: NodeId, node: Arc<Node>) -> Arc<Node> {
        let Some(mut info) = self.detach_node(id) else {
            return node;
        };
        let previous = std::mem::replace(&mut info.node, node);
        self.attach_node(id, info);
        previous
    }

    /// Forgets what the simulation recorded for nodes that exist only in it (the CSINodes and
    /// ResourceSlices of template copies and placeholders): they are not part of what-if
    /// branches, so a snapshot kept across loops drops them when a loop ends. Returns whether
    /// simulated ResourceSlices were recorded; the DRA catalogue was built with them, so such
    /// a snapshot is not kept.
    pub fn forget_simulated_objects(&mut self) -> bool {
        self.simulated_csi_nodes.clear();
        self.dra.has_simulated_slices()
    }

    /// Removes the pod with this uid from a node; returns it.
    pub fn remove_pod(&mut self, id: NodeId, uid: &str) -> Option<Arc<Pod>> {
        let index = self.node(id)?.pods.iter().position(|p| p.uid == uid)?;
        self.remove_pod_at(id, index)
    }

    /// Opens a what-if branch: the returned guard is the snapshot (it derefs to it), and every
    /// change made through it is undone when it is dropped unless [`Branch::commit`] keeps them.
    /// Branches nest: `branch.branch()` opens one inside another.
    #[inline]
    pub fn branch(&mut self) -> Branch<'_> {
        self.fork();
        let depth = self.fork_points.len();
        Branch {
            snapshot: self,
            depth,
        }
    }

    /// Opens a what-if branch that the caller must close with exactly one [`Snapshot::revert`] or
    /// [`Snapshot::commit`]. Private: outside this module only [`Snapshot::branch`]'s guard opens
    /// branches, so none can be left open.
    #[inline]
    fn fork(&mut self) {
        self.fork_points.push(self.undo.len());
    }

    /// Discards every change since the matching [`Snapshot::fork`].
    #[inline]
    fn revert(&mut self) {
        let Some(point) = self.fork_points.pop() else {
            return;
        };
        while self.undo.len() > point {
            let Some(op) = self.undo.pop() else { break };
            self.apply_undo(op);
        }
    }

    /// Keeps every change since the matching [`Snapshot::fork`].
    #[inline]
    fn commit(&mut self) {
        if self.fork_points.pop().is_some() && self.fork_points.is_empty() {
            self.undo.clear();
        }
    }

    /// Number of open branches.
    #[inline]
    pub fn fork_depth(&self) -> usize {
        self.fork_points.len()
    }

    pub fn node(&self, id: NodeId) -> Option<&NodeInfo> {
        self.slots.get(id.index()).and_then(Option::as_ref)
    }

    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// Live nodes in insertion order.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &NodeInfo)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|info| (NodeId(i as u32), info)))
    }

    /// One past the largest node handle ever issued; handles below it may be dead.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    pub fn node_count(&self) -> usize {
        self.live_nodes
    }

    pub fn pod_count(&self) -> usize {
        self.pod_count
    }

    /// Labels of a namespace, used by affinity terms with a namespace selector. A namespace without
    /// recorded labels is treated as having none. Not recorded in the undo log: namespaces are not
    /// part of what-if branches.
    pub fn set_namespace_labels(&mut self, namespace: impl Into<String>, labels: Labels) {
        let namespace = namespace.into();
        if self.namespace_labels.get(&namespace) == Some(&labels) {
            return;
        }
        self.namespace_labels.insert(namespace, labels);
        // Counts registered with namespace selectors were evaluated against the old labels.
        self.topology.forget_matchers();
    }

    pub fn namespace_labels(&self, namespace: &str) -> Option<&Labels> {
        self.namespace_labels.get(namespace)
    }

    pub(crate) fn fit_summaries(&self) -> &[FitSummary] {
        &self.fit_summaries
    }

    /// The first slot in `slots` whose node the filters do not certainly reject for `pod` on
    /// capacity alone: every slot before it in the range is dead, cordoned, or lacks the pod
    /// count, cpu, memory or ephemeral storage the pod requests. A search over nodes (from the
    /// slot it last tried + 1 up to the end of its range) uses it to skip impossible nodes
    /// without visiting them, at O(log n) per skipped range. It only rules nodes out, never in:
    /// the slot returned still needs the full filters. When the scheduler profile disables
    /// NodeUnschedulable or NodeResourcesFit, capacity rules nothing out and this is the first
    /// slot of the range.
    pub fn next_slot_with_room(&self, pod: &Pod, slots: Range<usize>) -> Option<usize> {
        let end = slots.end.min(self.slots.len());
        if slots.start >= end {
            return None;
        }
        if !self.capacity_rules_out() {
            return Some(slots.start);
        }
        self.next_slot_that_may_fit(&FitSummary::wanted_by(pod), slots.start, end)
    }

    /// Whether a slot whose summary does not `may_fit` a pod is certainly rejected by the
    /// filters: the summary stands for NodeUnschedulable and NodeResourcesFit, and with either
    /// disabled the node itself decides.
    pub(crate) fn capacity_rules_out(&self) -> bool {
        self.switches.capacity_rules_out()
    }

    /// [`Snapshot::next_slot_with_room`] for an already computed request, when capacity rules
    /// nodes out.
    pub(crate) fn next_slot_that_may_fit(
        &self,
        wants: &FitSummary,
        from: usize,
        to: usize,
    ) -> Option<usize> {
        self.first_slot_that_may_fit_where(wants, from, to, |_| true)
    }

    /// The first slot in `from..to` whose summary may fit `wants` and that `accepts`. Slots are
    /// read one after another, as a plain scan does, while they may fit (most searches end
    /// within a few slots, or visit nodes other filters reject); after a run of
    /// [`PROBED_SLOTS`] slots that cannot, the capacity index jumps to the next one that may,
    /// skipping whole ranges of full nodes.
    #[inline(always)]
    pub(crate) fn first_slot_that_may_fit_where(
        &self,
        wants: &FitSummary,
        from: usize,
        to: usize,
        mut accepts: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        let to = to.min(self.fit_summaries.len());
        let mut slot = from;
        let mut misses = 0;
        while slot < to {
            if self.fit_summaries[slot].may_fit(wants) {
                if accepts(slot) {
                    return Some(slot);
                }
                misses = 0;
                slot += 1;
            } else {
                slot += 1;
                misses += 1;
                if misses == PROBED_SLOTS {
                    misses = 0;
                    slot = self.capacity.first_may_fit(wants, slot, to)?;
                }
            }
        }
        None
    }

    pub(crate) fn has_pods_with_anti_affinity(&self) -> bool {
        self.pods_with_anti_affinity > 0
    }

    /// The topology indexes, as the filters read them per node.
    pub(crate) fn topology(&self) -> TopologyView<'_> {
        TopologyView {
            index: &self.topology,
            slots: &self.slots,
            namespaces: &self.namespace_labels,
        }
    }

    /// The inter-pod filter plan for `pod`, registering the indexes it reads on first use.
    pub(crate) fn inter_pod_plan(&mut self, pod: &Pod) -> Arc<InterPodPlan> {
        InterPodPlan::for_pod(
            &mut self.topology,
            &self.slots,
            &self.namespace_labels,
            (self.switches, &self.profile),
            pod,
        )
    }

    /// Logs DRA changes for undo, boxed only when a branch is open to take them.
    fn record_dra(&mut self, changes: Vec<DraUndo>) {
        if !self.fork_points.is_empty() {
            self.undo.extend(
                changes
                    .into_iter()
                    .map(|change| Undo::Dra(Box::new(change))),
            );
        }
    }

    fn record(&mut self, op: Undo) {
        if !self.fork_points.is_empty() {
            self.undo.push(op);
        }
    }

    // The four functions below are the only places that change nodes and pods: mutations and
    // undo both go through them, which keeps the indexes consistent in both directions.

    /// Puts `info` (possibly with pods, when undoing a removal) into its slot.
    fn attach_node(&mut self, id: NodeId, mut info: NodeInfo) {
        let pods = std::mem::take(&mut info.pods);
        info.requested = Resources::default();
        info.host_ports.clear();
        for pod in &pods {
            Self::account_pod(&mut info, pod, true);
        }
        self.by_name.insert(info.node.name.clone(), id);
        self.live_nodes += 1;
        let node = info.node.clone();
        if self.slots.len() <= id.index() {
            self.slots.resize_with(id.index() + 1, || None);
        }
        if self.fit_summaries.len() <= id.index() {
            self.fit_summaries
                .resize(id.index() + 1, FitSummary::default());
        }
        // The slot's summary and capacity entry change once, with every pod accounted.
        let summary = FitSummary::of(&info);
        self.fit_summaries[id.index()] = summary;
        self.capacity
            .update(id.index(), &summary, &self.fit_summaries);
        self.slots[id.index()] = Some(info);
        self.topology
            .node_added(id.index(), &node, &self.slots, &self.namespace_labels);
        for pod in &pods {
            self.count_pod(id, pod, true);
        }
        if let Some(info) = self.slots[id.index()].as_mut() {
            info.pods = pods;
        }
    }

    /// Takes the node out of its slot with its pods (in their order; `requested` and
    /// `host_ports` still account for them).
    fn detach_node(&mut self, id: NodeId) -> Option<NodeInfo> {
        let info = self.slots.get_mut(id.index()).and_then(Option::as_mut)?;
        let pods = std::mem::take(&mut info.pods);
        // Pods leave last first, with the bookkeeping `remove_pod` does; the slot's summary and
        // capacity entry change once, as the slot dies.
        for pod in pods.iter().rev() {
            self.count_pod(id, pod, false);
        }
        self.topology.node_removed(id.index());
        let mut info = self.slots.get_mut(id.index()).and_then(Option::take)?;
        self.fit_summaries[id.index()] = FitSummary::default();
        self.capacity
            .update(id.index(), &FitSummary::default(), &self.fit_summaries);
        self.by_name.remove(&info.node.name);
        self.live_nodes -= 1;
        info.pods = pods;
        Some(info)
    }

    /// Places `pod` at `position` (at the end when `None`).
    fn attach_pod(&mut self, id: NodeId, pod: Arc<Pod>, position: Option<usize>) {
        let Some(info) = self.slots.get_mut(id.index()).and_then(Option::as_mut) else {
            return;
        };
        Self::account_pod(info, &pod, true);
        let summary = FitSummary::of(info);
        self.fit_summaries[id.index()] = summary;
        self.capacity
            .update(id.index(), &summary, &self.fit_summaries);
        self.count_pod(id, &pod, true);
        let Some(info) = self.slots[id.index()].as_mut() else {
            return;
        };
        match position {
            Some(p) if p <= info.pods.len() => info.pods.insert(p, pod),
            _ => info.pods.push(pod),
        }
    }

    fn detach_pod(&mut self, id: NodeId, index: usize) -> Option<Arc<Pod>> {
        let info = self.slots.get_mut(id.index()).and_then(Option::as_mut)?;
        if index >= info.pods.len() {
            return None;
        }
        let pod = info.pods.remove(index);
        Self::account_pod(info, &pod, false);
        let summary = FitSummary::of(info);
        self.fit_summaries[id.index()] = summary;
        self.capacity
            .update(id.index(), &summary, &self.fit_summaries);
        self.count_pod(id, &pod, false);
        Some(pod)
    }

    /// The snapshot-wide bookkeeping of a pod arriving on (`adding`) or leaving slot `id`: the
    /// counts, the claims' users and the topology indexes. The slot's own accounting is the
    /// caller's.
    fn count_pod(&mut self, id: NodeId, pod: &Pod, adding: bool) {
        let anti_affinity = !pod.pod_anti_affinity.is_empty();
        if adding {
            self.pod_count += 1;
            self.pods_with_anti_affinity += usize::from(anti_affinity);
        } else {
            self.pod_count -= 1;
            self.pods_with_anti_affinity -= usize::from(anti_affinity);
        }
        if pod.has_checked_volumes() {
            Self::count_claim_users(&mut self.claim_users, pod, adding);
        }
        self.topology
            .pod_changed(id.index(), pod, adding, &self.slots, &self.namespace_labels);
    }

    fn count_claim_users(
        users: &mut HashMap<String, HashMap<String, u32>>,
        pod: &Pod,
        adding: bool,
    ) {
        for volume in &pod.volumes {
            let claim = match &volume.source {
                VolumeSource::PersistentVolumeClaim { claim_name } => claim_name.clone(),
                VolumeSource::Ephemeral => pod.ephemeral_claim_name(&volume.name),
                _ => continue,
            };
            let count = users
                .entry(pod.namespace.to_string())
                .or_default()
                .entry(claim)
                .or_default();
            if adding {
                *count += 1;
            } else {
                *count = count.saturating_sub(1);
            }
        }
    }

    fn account_pod(info: &mut NodeInfo, pod: &Pod, adding: bool) {
        if adding {
            info.requested.add(&pod.requests);
            info.requested.pods += 1;
            info.host_ports.extend(pod.host_ports.iter().cloned());
        } else {
            info.requested.sub(&pod.requests);
            info.requested.pods -= 1;
            for hp in &pod.host_ports {
                if let Some(i) = info.host_ports.iter().position(|x| x == hp) {
                    info.host_ports.swap_remove(i);
                }
            }
        }
    }

    fn apply_undo(&mut self, op: Undo) {
        match op {
            Undo::AddedNode(id) => {
                self.detach_node(id);
                if id.index() + 1 == self.slots.len() {
                    self.slots.pop();
                    self.fit_summaries.truncate(self.slots.len());
                }
            }
            Undo::RemovedNode(id, info) => self.attach_node(id, *info),
            Undo::AddedPod(id) => {
                if let Some(last) = self
                    .node(id)
                    .and_then(|info| info.pods.len().checked_sub(1))
                {
                    self.detach_pod(id, last);
                }
            }
            Undo::RemovedPod(id, index, pod) => self.attach_pod(id, pod, Some(index)),
            Undo::InsertedPod(id, index) => {
                self.detach_pod(id, index);
            }
            Undo::ReplacedNode(id, previous) => {
                self.set_node_object(id, previous);
            }
            Undo::Dra(change) => self.dra.undo(*change),
        }
    }

    /// Compares every index with one recomputed from the placed pods. For tests.
    #[cfg(test)]
    pub(crate) fn assert_indexes_consistent(&self) {
        let carriers: usize = self
            .slots
            .iter()
            .flatten()
            .map(|i| {
                i.pods
                    .iter()
                    .filter(|p| !p.pod_anti_affinity.is_empty())
                    .count()
            })
            .sum();
        assert_eq!(self.pods_with_anti_affinity, carriers);
        for (i, slot) in self.slots.iter().enumerate() {
            let expected = slot.as_ref().map(FitSummary::of).unwrap_or_default();
            assert_eq!(self.fit_summaries[i], expected, "fit summary of slot {i}");
        }
        self.capacity.assert_matches(&self.fit_summaries);
        self.topology
            .assert_consistent(&self.slots, &self.namespace_labels);
        self.dra.assert_consistent();
    }

    /// The claims' allocations and reservations, to compare two states. For tests.
    #[cfg(test)]
    pub(crate) fn dra_summary(&self) -> Vec<(String, Option<ClaimAllocation>, Vec<ClaimConsumer>)> {
        self.dra.state_summary()
    }
}

/// An open what-if branch of a [`Snapshot`], from [`Snapshot::branch`]. It derefs to the snapshot,
/// so everything (including opening a nested branch) goes through it. Dropping it reverts every
/// change made since it was opened; [`Branch::commit`] keeps them instead.
#[must_use = "a branch reverts its changes as soon as it is dropped"]
#[derive(Debug)]
pub struct Branch<'s> {
    snapshot: &'s mut Snapshot,
    /// `fork_depth()` while this branch is open: it owns that fork point and any above it.
    depth: usize,
}

impl Branch<'_> {
    /// Keeps every change made on this branch (in the enclosing branch, if any, which can still
    /// revert them).
    pub fn commit(self) {
        // Forks opened inside through `Snapshot::fork` and left open are kept with this one; the
        // drop that follows finds nothing left to revert.
        while self.snapshot.fork_depth() >= self.depth {
            self.snapshot.commit();
        }
    }

    /// Discards every change made on this branch; the same as dropping it, spelled out.
    pub fn revert(self) {}
}

impl Drop for Branch<'_> {
    // Inlined like the rest of the branch API: an empty branch costs a few nanoseconds, and
    // callers open one per simulated what-if.
    #[inline]
    fn drop(&mut self) {
        // Also closes forks opened inside through `Snapshot::fork` and left open.
        while self.snapshot.fork_depth() >= self.depth {
            self.snapshot.revert();
        }
    }
}

impl Deref for Branch<'_> {
    type Target = Snapshot;

    fn deref(&self) -> &Snapshot {
        self.snapshot
    }
}

impl DerefMut for Branch<'_> {
    fn deref_mut(&mut self) -> &mut Snapshot {
        self.snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(Node::new(name, Resources::new(4000, 8 << 30)))
    }

    fn pod(name: &str, cpu: i64) -> Arc<Pod> {
        let mut p = Pod::new("default", name);
        p.requests = Resources::new(cpu, 0);
        Arc::new(p)
    }

    #[test]
    fn revert_restores_everything_changed_on_the_branch() {
        let mut s = Snapshot::new();
        let a = s.add_node(node("a"));
        s.add_pod(a, pod("p1", 1000));
        s.fork();
        let b = s.add_node(node("b"));
        s.add_pod(b, pod("p2", 500));
        s.add_pod(a, pod("p3", 500));
        s.remove_pod(a, "uid-default-p1");
        s.remove_node(a);
        assert_eq!(s.node_count(), 1);
        s.revert();
        assert_eq!(s.node_count(), 1);
        assert_eq!(s.pod_count(), 1);
        assert!(s.node_id("b").is_none());
        let info = s.node(a).unwrap();
        assert_eq!(info.pods.len(), 1);
        assert_eq!(info.requested.cpu_milli, 1000);
        assert_eq!(info.requested.pods, 1);
    }

    /// What a caller's what-if step looks like: it stops at the first pod that has no node.
    fn place_all(s: &mut Snapshot, target: &str, pods: &[Arc<Pod>]) -> Result<(), String> {
        let mut branch = s.branch();
        for p in pods {
            let id = branch
                .node_id(target)
                .ok_or_else(|| format!("no node {target} for {}", p.name))?;
            branch.add_pod(id, p.clone());
            if branch.node(id).unwrap().free().cpu_milli < 0 {
                return Err(format!("{} does not fit", p.name));
            }
        }
        branch.commit();
        Ok(())
    }

    #[test]
    fn a_dropped_branch_reverts_even_on_an_early_return() {
        let mut s = Snapshot::new();
        let a = s.add_node(node("a"));
        s.add_pod(a, pod("p0", 1000));

        // `?` leaves before the commit: the branch reverts as it is dropped.
        let result = place_all(&mut s, "a", &[pod("p1", 2000), pod("p2", 2000)]);
        assert_eq!(result, Err("p2 does not fit".to_string()));
        assert_eq!(s.pod_count(), 1);
        assert_eq!(s.node(a).unwrap().requested.cpu_milli, 1000);
        assert_eq!(s.fork_depth(), 0);
        s.assert_indexes_consistent();

        // The same with the error from an `ok_or_else(..)?` on the first pod.
        assert!(place_all(&mut s, "missing", &[pod("p1", 100)]).is_err());
        assert_eq!((s.pod_count(), s.fork_depth()), (1, 0));

        // A plain drop at the end of a scope reverts too.
        {
            let mut branch = s.branch();
            branch.add_node(node("b"));
            branch.remove_node(a);
            assert_eq!(branch.node_count(), 1);
        }
        assert_eq!(s.node_count(), 1);
        assert_eq!(s.node_id("a"), Some(a));
        assert!(s.node_id("b").is_none());
        assert_eq!(s.pod_count(), 1);

        // Only a commit keeps the changes.
        place_all(&mut s, "a", &[pod("p1", 1000), pod("p2", 1000)]).unwrap();
        assert_eq!((s.pod_count(), s.fork_depth()), (3, 0));
    }

    #[test]
    fn a_panic_on_a_branch_leaves_the_snapshot_reverted() {
        let mut s = Snapshot::new();
        let a = s.add_node(node("a"));
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut branch = s.branch();
            branch.add_pod(a, pod("p1", 100));
            panic!("a caller's bug");
        }));
        assert!(unwound.is_err());
        assert_eq!((s.pod_count(), s.fork_depth()), (0, 0));
    }

    #[test]
    fn nested_branches_commit_into_the_enclosing_one() {
        let mut s = Snapshot::new();
        let a = s.add_node(node("a"));
        {
            let mut outer = s.branch();
            outer.add_pod(a, pod("p1", 100));
            {
                let mut inner = outer.branch();
                inner.add_pod(a, pod("p2", 100));
                assert_eq!(inner.fork_depth(), 2);
                inner.commit();
            }
            {
                let mut dropped = outer.branch();
                dropped.add_pod(a, pod("p3", 100));
            }
            assert_eq!(outer.pod_count(), 2);
            assert_eq!(outer.fork_depth(), 1);
            // Dropping the outer branch takes the committed inner changes with it.
        }
        assert_eq!(s.pod_count(), 0);
        {
            let mut outer = s.branch();
            outer.add_pod(a, pod("p4", 100));
            // A fork opened by hand inside a branch and never closed is closed with it.
            outer.fork();
            outer.add_pod(a, pod("p5", 100));
            outer.commit();
        }
        assert_eq!((s.pod_count(), s.fork_depth()), (2, 0));
        s.assert_indexes_consistent();
    }

    #[test]
    fn the_snapshot_can_move_to_and_be_shared_between_threads() {
        fn send_and_sync<T: Send + Sync>() {}
        send_and_sync::<Snapshot>();
    }

    #[test]
    fn commit_keeps_changes_and_nested_forks_work() {
        let mut s = Snapshot::new();
        let a = s.add_node(node("a"));
        s.fork();
        s.add_pod(a, pod("p1", 100));
        s.fork();
        s.add_pod(a, pod("p2", 100));
        s.commit();
        assert_eq!(s.pod_count(), 2);
        s.revert();
        assert_eq!(s.pod_count(), 0);
        s.fork();
        s.add_pod(a, pod("p3", 100));
        s.commit();
        assert_eq!(s.pod_count(), 1);
        assert_eq!(s.fork_depth(), 0);
    }
}

#[cfg(test)]
mod consistency_tests;
