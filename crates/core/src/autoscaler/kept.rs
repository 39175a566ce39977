//! The loop's snapshot, kept from one loop to the next (docs/behaviour.md LOOP-124).
//!
//! Building the snapshot from scratch costs every node and every bound pod each loop, whether
//! the cluster changed or not. [`KeptSnapshot`] keeps the registered nodes with their bound pods
//! (the base) and where each gathered pod is between loops, and applies only what changed since
//! the last loop's objects. Gather hands out the caches' own `Arc`s, so an object that did not change is
//! the same allocation as last time: comparing handles finds the changes without reading the
//! objects.
//!
//! The kept base is, at every loop, what a snapshot built from the same objects would be: the
//! same nodes in the same order, each with the same pods in the same order (the order of the
//! gathered pod list), the same indexes. The loop then works on a branch of it
//! ([`KeptSnapshot::open`]): the registered nodes still starting are taken out, the upcoming
//! nodes' placeholders go in, and scale-up and scale-down simulate on top; dropping the branch
//! at the end of the loop undoes all of it.
//!
//! When the change is not one the base can take in place, the base is built again from
//! scratch ([`Rebuild`]): the first loop, changed volume objects or namespaces, DRA objects in
//! the cluster (the DynamicResources state keeps what it learnt per pod), a new node before an
//! existing one in the gathered order, a new node while pods name nodes the base does not
//! hold, or a quarter of the pods changed at once.

use std::collections::HashSet;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;

use ferroscale_model::{Namespace, Node, Pod};
use ferroscale_scheduling::{Branch, NodeId, Snapshot, VolumeCatalogue};
use hashbrown::HashTable;

use crate::cluster_state::ClusterStateReport;
use crate::kubernetes::ClusterObjects;
use crate::options::AutoscalingOptions;
use crate::scale_up::{BoundPodsOfControllers, NodeGroupView, inject_upcoming_nodes};

use crate::{FastMap, same_arcs};

/// Why the base was built from scratch instead of changed in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rebuild {
    /// No base yet (the first loop, or the previous one could not be kept).
    First,
    /// Claims, volumes, storage classes or CSINodes changed: the volume catalogue is built anew.
    Volumes,
    /// Namespaces or their labels changed: the topology indexes evaluated selectors against them.
    Namespaces,
    /// The cluster has DRA objects: the DynamicResources state is built each loop.
    Dra,
    /// A loop recorded ResourceSlices for simulated nodes into the DRA catalogue.
    SimulatedSlices,
    /// A node came before an existing one in the gathered order, or two nodes share a name.
    NodeOrder,
    /// A node appeared while some pods name a node the base does not hold (perhaps this one).
    StrandedPods,
    /// So many pods changed that building from scratch is cheaper.
    ManyChanges,
    /// The base did not hold a pod where the kept bookkeeping placed it (a defect; rebuilding
    /// is always correct).
    Inconsistent,
}

impl Rebuild {
    pub fn as_str(self) -> &'static str {
        match self {
            Rebuild::First => "first",
            Rebuild::Volumes => "volumes",
            Rebuild::Namespaces => "namespaces",
            Rebuild::Dra => "dra",
            Rebuild::SimulatedSlices => "simulated-slices",
            Rebuild::NodeOrder => "node-order",
            Rebuild::StrandedPods => "stranded-pods",
            Rebuild::ManyChanges => "many-changes",
            Rebuild::Inconsistent => "inconsistent",
        }
    }
}

impl fmt::Display for Rebuild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one refresh did to the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnapshotRefresh {
    /// Why the base was built from scratch; `None` when it was changed in place.
    pub rebuilt: Option<Rebuild>,
    /// Nodes added, removed or replaced in place.
    pub node_changes: usize,
    /// Pods added, removed or replaced in place (every pod when rebuilt).
    pub pod_changes: usize,
}

/// Where a gathered pod is in the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Placed on this node.
    Node(NodeId),
    /// Bound to this node but expendable: not placed, but drained with it.
    Expendable(NodeId),
    /// Not bound: one of the pending pods.
    Pending,
    /// Bound to a node the base does not hold.
    Orphan,
    /// Not part of the snapshot: terminal, being deleted, or another scheduler's.
    Out,
}

/// The inputs besides nodes and pods that the base was built with; any change rebuilds it.
#[derive(Default)]
struct BuiltWith {
    volumes: ferroscale_model::VolumeObjects,
    namespaces: Vec<Namespace>,
}

impl BuiltWith {
    fn of(objects: &ClusterObjects) -> BuiltWith {
        BuiltWith {
            volumes: objects.volumes.clone(),
            namespaces: objects.namespaces.clone(),
        }
    }

    fn rebuild_for(&self, objects: &ClusterObjects) -> Option<Rebuild> {
        let (old, new) = (&self.volumes, &objects.volumes);
        if !objects.dra.is_empty() {
            return Some(Rebuild::Dra);
        }
        if !(same_arcs(&old.claims, &new.claims)
            && same_arcs(&old.volumes, &new.volumes)
            && same_arcs(&old.storage_classes, &new.storage_classes)
            && same_arcs(&old.csi_nodes, &new.csi_nodes))
        {
            return Some(Rebuild::Volumes);
        }
        (self.namespaces != objects.namespaces).then_some(Rebuild::Namespaces)
    }
}

/// The part of the options that decides which pods are in the snapshot.
struct PodRules<'a> {
    allowed_schedulers: &'a [String],
    expendable_cutoff: i32,
}

/// The kept base and the bookkeeping that finds each gathered pod in it.
struct Kept {
    base: Snapshot,
    /// The node list last applied, in gathered order, and each node's handle.
    nodes: Vec<Arc<Node>>,
    node_slots: Vec<NodeId>,
    /// Live nodes of the base by name.
    node_ids: FastMap<String, NodeId>,
    /// The pod list last applied, in gathered order, and where each pod is. Between
    /// [`KeptSnapshot::open`] and [`KeptSnapshot::close`] the list is the loop's (`awaiting`):
    /// the loop hands it over when it ends instead of the base copying a million handles.
    pods: Arc<Vec<Arc<Pod>>>,
    awaiting_pods: bool,
    places: Vec<Place>,
    /// The pods of `pods` by uid, to tell a pod that went from one that came; built the first
    /// time a walk needs it, then kept up to date.
    uids: Option<HashTable<Arc<Pod>>>,
    hasher: foldhash::fast::RandomState,
    /// Per slot: expendable pods bound to it.
    expendable_on: Vec<u32>,
    /// Pods bound to a node the base does not hold (orphans, and pods of removed nodes).
    stranded: usize,
    /// The controllers' bound pods among `pods`, moved by every pod the walk takes out or puts in.
    bound_of_controllers: BoundPodsOfControllers,
    built_with: BuiltWith,
}

/// The snapshot kept across loops. See the module documentation.
#[derive(Default)]
pub(crate) struct KeptSnapshot {
    kept: Option<Box<Kept>>,
    /// Why the last base was dropped at the end of a loop, for the next refresh to report.
    dropped: Option<Rebuild>,
}

/// The loop's view: a branch of the kept base, with the pending and draining pods.
pub(super) struct LoopView<'a> {
    /// The base without the registered nodes still starting, with a placeholder per upcoming
    /// node; dropping it undoes whatever the loop did to it.
    pub(super) snapshot: Branch<'a>,
    /// Every pod not bound to a node, in gathered order.
    pub(super) pending: Vec<Arc<Pod>>,
    /// Recreatable pods of nodes being drained, with `node_name` cleared.
    pub(super) draining_pods: Vec<Arc<Pod>>,
    /// The controllers' pods bound to nodes, among every gathered pod (proactive scale-up's
    /// count).
    pub(super) bound_of_controllers: &'a BoundPodsOfControllers,
}

/// What [`KeptSnapshot::open`] reads besides the kept base.
pub(super) struct ViewInput<'a> {
    /// This iteration's cluster state: upcoming nodes per group, and the registered nodes of
    /// scaling-up groups that are still starting.
    pub(super) report: &'a ClusterStateReport,
    /// The node groups as gathered (their templates stand in for upcoming nodes).
    pub(super) views: &'a [NodeGroupView],
    /// Nodes whose scale-down deletion drains them.
    pub(super) draining: &'a HashSet<String>,
}

impl KeptSnapshot {
    /// Brings the base up to `objects` (in place when it can, from scratch otherwise) and opens
    /// the loop's branch of it: the registered nodes still starting are taken out, a
    /// placeholder per upcoming node goes in (docs/behaviour.md LOOP-111, LOOP-112).
    pub(super) fn open(
        &mut self,
        objects: &ClusterObjects,
        options: &AutoscalingOptions,
        input: ViewInput<'_>,
    ) -> (SnapshotRefresh, LoopView<'_>) {
        let refresh = self.refresh(objects, options);
        let kept = self
            .kept
            .get_or_insert_with(|| Box::new(Kept::empty(objects, options)));
        (refresh, kept.view(input, &objects.pods))
    }

    fn refresh(
        &mut self,
        objects: &ClusterObjects,
        options: &AutoscalingOptions,
    ) -> SnapshotRefresh {
        let rules = PodRules {
            allowed_schedulers: &options.allowed_scheduler_names,
            expendable_cutoff: options.expendable_pods_priority_cutoff,
        };
        let reason = match self.kept.as_mut() {
            None => self.dropped.take().unwrap_or(Rebuild::First),
            Some(kept) if kept.awaiting_pods => Rebuild::First,
            Some(kept) => match kept.built_with.rebuild_for(objects) {
                Some(reason) => reason,
                None => match kept.apply(objects, &rules) {
                    Ok(refresh) => return refresh,
                    Err(reason) => reason,
                },
            },
        };
        let mut kept = Box::new(Kept::empty(objects, options));
        // An empty base takes any objects in place.
        let refresh = kept.apply(objects, &rules).unwrap_or_default();
        self.kept = Some(kept);
        SnapshotRefresh {
            rebuilt: Some(reason),
            ..refresh
        }
    }

    /// Ends a loop whose view was dropped, taking back the loop's pod list (the one `open` was
    /// given): what the loop recorded outside its branch goes too.
    pub(super) fn close(&mut self, pods: Arc<Vec<Arc<Pod>>>) {
        let Some(kept) = self.kept.as_mut() else {
            return;
        };
        if kept.base.forget_simulated_objects() {
            // The DRA catalogue holds the simulated nodes' slices: the next loop rebuilds.
            self.kept = None;
            self.dropped = Some(Rebuild::SimulatedSlices);
            return;
        }
        if kept.awaiting_pods {
            kept.pods = pods;
            kept.awaiting_pods = false;
        }
    }
}

/// An empty snapshot set up for `objects`: the filters follow the scheduler profile of
/// `--scheduler-config-file` (docs/behaviour.md SCHED-101); the volume filters read the cluster's
/// claims, volumes, classes and CSINodes (docs/behaviour.md VOL-101–VOL-108); the
/// DynamicResources filter reads the cluster's devices, classes and claims, whose allocations
/// are the devices in use (docs/dra.md DRA-121); namespace selectors read the namespaces' labels.
pub(super) fn empty_snapshot(objects: &ClusterObjects, options: &AutoscalingOptions) -> Snapshot {
    let mut snapshot = Snapshot::with_scheduler_profile(options.scheduler_profile());
    snapshot.set_volume_catalogue(Arc::new(VolumeCatalogue::new(&objects.volumes)));
    snapshot.set_csi_node_limits(options.enable_csi_node_aware_scheduling);
    snapshot.set_dra_objects(&objects.dra);
    for ns in &objects.namespaces {
        snapshot.set_namespace_labels(ns.name.clone(), ns.labels.clone());
    }
    snapshot
}

/// Bookkeeping for one walk over the pods: how many pods of each node the walk has put in their
/// final position so far.
struct Cursors {
    on_node: Vec<u32>,
}

impl Cursors {
    fn at(&self, id: NodeId) -> usize {
        self.on_node.get(id.index()).map_or(0, |n| *n as usize)
    }

    fn advance(&mut self, id: NodeId) {
        if let Some(n) = self.on_node.get_mut(id.index()) {
            *n += 1;
        }
    }
}

impl Kept {
    fn view(&mut self, input: ViewInput<'_>, pods: &[Arc<Pod>]) -> LoopView<'_> {
        let draining_pods = self.draining_pods(pods, input.draining);
        let pending = pods
            .iter()
            .zip(&self.places)
            .filter(|(_, place)| **place == Place::Pending)
            .map(|(pod, _)| pod.clone())
            .collect();
        let mut snapshot = self.base.branch();
        // The still-starting registered nodes of scaling-up groups: placeholders replace them.
        for group in &input.report.groups {
            for name in &group.registered_upcoming {
                if let Some(id) = snapshot.node_id(name) {
                    snapshot.remove_node(id);
                }
            }
        }
        for view in input.views {
            let upcoming = input.report.group(&view.id).map_or(0, |g| g.upcoming);
            if upcoming > 0 {
                inject_upcoming_nodes(&mut snapshot, view, upcoming);
            }
        }
        LoopView {
            snapshot,
            pending,
            draining_pods,
            bound_of_controllers: &self.bound_of_controllers,
        }
    }

    fn empty(objects: &ClusterObjects, options: &AutoscalingOptions) -> Kept {
        Kept {
            base: empty_snapshot(objects, options),
            nodes: Vec::new(),
            node_slots: Vec::new(),
            node_ids: FastMap::default(),
            pods: Arc::default(),
            places: Vec::new(),
            uids: None,
            awaiting_pods: false,
            hasher: foldhash::fast::RandomState::default(),
            expendable_on: Vec::new(),
            stranded: 0,
            bound_of_controllers: BoundPodsOfControllers::default(),
            built_with: BuiltWith::of(objects),
        }
    }

    /// Applies the change from the last objects to `objects`; an error asks for a rebuild.
    fn apply(
        &mut self,
        objects: &ClusterObjects,
        rules: &PodRules<'_>,
    ) -> Result<SnapshotRefresh, Rebuild> {
        let node_changes = self.apply_nodes(&objects.nodes)?;
        let pod_changes = self.apply_pods(&objects.pods, rules)?;
        Ok(SnapshotRefresh {
            rebuilt: None,
            node_changes,
            pod_changes,
        })
    }

    /// Removes the nodes that went, replaces the ones that changed and adds the new ones. The
    /// base's live nodes stay in gathered order: survivors keep their relative order and new
    /// nodes come after every survivor, or the base is rebuilt.
    fn apply_nodes(&mut self, new: &[Arc<Node>]) -> Result<usize, Rebuild> {
        if same_arcs(&self.nodes, new) {
            return Ok(0);
        }
        let mut index: FastMap<&str, usize> = FastMap::default();
        index.reserve(new.len());
        for (n, node) in new.iter().enumerate() {
            // Two nodes of one name: a base built from scratch keeps the first, as
            // `Snapshot::add_node` does; a kept one is rebuilt.
            if index.insert(node.name.as_str(), n).is_some() && !self.nodes.is_empty() {
                return Err(Rebuild::NodeOrder);
            }
        }
        let mut slots: Vec<Option<NodeId>> = vec![None; new.len()];
        let mut removed: Vec<NodeId> = Vec::new();
        let mut replaced: Vec<(NodeId, Arc<Node>)> = Vec::new();
        let mut last_survivor: Option<usize> = None;
        for (old, &slot) in self.nodes.iter().zip(&self.node_slots) {
            match index.get(old.name.as_str()) {
                Some(&n) => {
                    if last_survivor.is_some_and(|last| n <= last) {
                        return Err(Rebuild::NodeOrder);
                    }
                    last_survivor = Some(n);
                    slots[n] = Some(slot);
                    if !Arc::ptr_eq(old, &new[n]) {
                        replaced.push((slot, new[n].clone()));
                    }
                }
                None => removed.push(slot),
            }
        }
        let first_added = slots.iter().position(Option::is_none);
        if let (Some(first), Some(last)) = (first_added, last_survivor)
            && first < last
        {
            return Err(Rebuild::NodeOrder);
        }
        let mut changes = removed.len() + replaced.len();
        for slot in removed {
            let Some(info) = self.base.node(slot) else {
                return Err(Rebuild::Inconsistent);
            };
            let name = info.node.name.clone();
            self.stranded += info.pods.len() + self.expendable_on_slot(slot);
            self.base.remove_node(slot);
            self.node_ids.remove(&name);
        }
        for (slot, node) in replaced {
            if !self.base.replace_node(slot, node) {
                return Err(Rebuild::Inconsistent);
            }
        }
        if first_added.is_some() && self.stranded > 0 {
            return Err(Rebuild::StrandedPods);
        }
        for (n, slot) in slots.iter_mut().enumerate() {
            if slot.is_none() {
                let id = self.base.add_node(new[n].clone());
                self.node_ids.insert(new[n].name.clone(), id);
                *slot = Some(id);
                changes += 1;
            }
        }
        self.node_slots = slots.into_iter().flatten().collect();
        self.nodes = new.to_vec();
        self.expendable_on.resize(self.base.slot_count(), 0);
        Ok(changes)
    }

    fn expendable_on_slot(&self, slot: NodeId) -> usize {
        self.expendable_on
            .get(slot.index())
            .map_or(0, |n| *n as usize)
    }

    /// Walks the last pod list and the new one side by side. A pod that is the same allocation
    /// in both stays where it is; one whose uid is in both was updated and moves; one only in
    /// the old list went; one only in the new list came. Each change happens at the position the
    /// walk has reached on its node, so every node's pods stay in gathered order.
    fn apply_pods(
        &mut self,
        new: &Arc<Vec<Arc<Pod>>>,
        rules: &PodRules<'_>,
    ) -> Result<usize, Rebuild> {
        let old = std::mem::take(&mut self.pods);
        self.awaiting_pods = true;
        // The same list as last time (a quiet cluster's watch cache hands it out again), or
        // a list of the same pods.
        if Arc::ptr_eq(&old, new) || same_arcs(&old, new) {
            return Ok(0);
        }
        let old_places = std::mem::take(&mut self.places);
        // The places describe the list the last loop gave back; any other list is not one the
        // walk can follow.
        if old_places.len() != old.len() {
            return Err(Rebuild::Inconsistent);
        }
        let mut places: Vec<Place> = Vec::with_capacity(new.len());
        let mut cursors = Cursors {
            on_node: vec![0; self.base.slot_count()],
        };
        // Past this many changes, a build from scratch does less work (a build from an empty
        // base is never cut short).
        let limit = if old.is_empty() {
            usize::MAX
        } else {
            new.len() / 4 + 64
        };
        let (mut i, mut j, mut changes) = (0, 0, 0usize);
        // Pods the walk added before it first needed the uid table (which starts from `old`).
        let mut added_before_table: Vec<usize> = Vec::new();
        loop {
            match (old.get(i), new.get(j)) {
                (Some(o), Some(n)) if Arc::ptr_eq(o, n) => {
                    let place = old_places[i];
                    if let Place::Node(id) = place {
                        cursors.advance(id);
                    }
                    places.push(place);
                    i += 1;
                    j += 1;
                    continue;
                }
                (Some(o), Some(n)) if o.uid == n.uid => {
                    self.take_out(o, old_places[i], &cursors)?;
                    self.remember_uid(n);
                    places.push(self.put_in(n, rules, &mut cursors));
                    i += 1;
                    j += 1;
                }
                (Some(o), Some(n))
                    if self.knows_uid(&n.uid, &old, &new[..j], &added_before_table) =>
                {
                    // `n` is further on in the old list, so `o` went.
                    self.take_out(o, old_places[i], &cursors)?;
                    self.forget_uid(o);
                    i += 1;
                }
                (Some(o), None) => {
                    self.take_out(o, old_places[i], &cursors)?;
                    self.forget_uid(o);
                    i += 1;
                }
                (_, Some(n)) => {
                    if self.uids.is_none() && !old.is_empty() {
                        added_before_table.push(j);
                    }
                    self.remember_uid(n);
                    places.push(self.put_in(n, rules, &mut cursors));
                    j += 1;
                }
                (None, None) => break,
            }
            changes += 1;
            if changes > limit {
                return Err(Rebuild::ManyChanges);
            }
        }
        self.places = places;
        Ok(changes)
    }

    /// Takes a pod that went (or changed) out of the base, from the position the walk reached
    /// on its node.
    fn take_out(&mut self, pod: &Arc<Pod>, place: Place, cursors: &Cursors) -> Result<(), Rebuild> {
        self.bound_of_controllers.remove(pod);
        match place {
            Place::Node(id) if self.base.node(id).is_some() => {
                let taken = self.base.remove_pod_at(id, cursors.at(id));
                if !taken.is_some_and(|taken| Arc::ptr_eq(&taken, pod)) {
                    return Err(Rebuild::Inconsistent);
                }
            }
            Place::Expendable(id) if self.base.node(id).is_some() => {
                if let Some(n) = self.expendable_on.get_mut(id.index()) {
                    *n = n.saturating_sub(1);
                }
            }
            Place::Node(_) | Place::Expendable(_) | Place::Orphan => {
                self.stranded = self.stranded.saturating_sub(1);
            }
            Place::Pending | Place::Out => {}
        }
        Ok(())
    }

    /// Puts a pod that came (or changed) where the snapshot has it: on its node at the walk's
    /// position there, or nowhere (the pending pods are read from the places when a loop opens
    /// its view).
    fn put_in(&mut self, pod: &Arc<Pod>, rules: &PodRules<'_>, cursors: &mut Cursors) -> Place {
        self.bound_of_controllers.add(pod);
        let scheduled_by_us = rules.allowed_schedulers.is_empty()
            || rules
                .allowed_schedulers
                .iter()
                .any(|name| name.as_str() == pod.scheduler_name.as_str());
        if !scheduled_by_us || pod.deletion_time.is_some() || pod.is_terminal() {
            return Place::Out;
        }
        let Some(node) = pod.node_name.as_deref() else {
            return Place::Pending;
        };
        let Some(&id) = self.node_ids.get(node) else {
            self.stranded += 1;
            return Place::Orphan;
        };
        if pod.is_expendable(rules.expendable_cutoff) {
            if let Some(n) = self.expendable_on.get_mut(id.index()) {
                *n += 1;
            }
            return Place::Expendable(id);
        }
        self.base.insert_pod(id, cursors.at(id), pod.clone());
        cursors.advance(id);
        Place::Node(id)
    }

    /// Whether a pod of this uid is in the last list or came earlier in this walk. The first
    /// call of a walk without a table builds it: from the last list, and the pods this walk
    /// added so far (`walked[k]` for each `k` in `added`).
    fn knows_uid(
        &mut self,
        uid: &str,
        old: &[Arc<Pod>],
        walked: &[Arc<Pod>],
        added: &[usize],
    ) -> bool {
        if self.uids.is_none() {
            self.uids = Some(HashTable::with_capacity(old.len()));
            for pod in old
                .iter()
                .chain(added.iter().filter_map(|k| walked.get(*k)))
            {
                self.remember_uid(pod);
            }
        }
        let hash = self.hasher.hash_one(uid);
        self.uids
            .as_ref()
            .is_some_and(|uids| uids.find(hash, |p| p.uid == uid).is_some())
    }

    /// Records a pod that came, or the new object of one that changed (until the table is
    /// built, the lists are the record).
    fn remember_uid(&mut self, pod: &Arc<Pod>) {
        let Some(uids) = self.uids.as_mut() else {
            return;
        };
        let hasher = &self.hasher;
        match uids.entry(
            hasher.hash_one(pod.uid.as_str()),
            |p| p.uid == pod.uid,
            |p| hasher.hash_one(p.uid.as_str()),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut entry) => *entry.get_mut() = pod.clone(),
            hashbrown::hash_table::Entry::Vacant(entry) => {
                entry.insert(pod.clone());
            }
        }
    }

    fn forget_uid(&mut self, pod: &Arc<Pod>) {
        let Some(uids) = self.uids.as_mut() else {
            return;
        };
        let hash = self.hasher.hash_one(pod.uid.as_str());
        if let Ok(entry) = uids.find_entry(hash, |p| Arc::ptr_eq(p, pod)) {
            entry.remove();
        }
    }

    /// Recreatable pods of the draining nodes (docs/behaviour.md SU-15), in gathered order, as
    /// pending copies: the pods bound to them by name that are neither terminal, being deleted,
    /// another scheduler's, mirror pods nor DaemonSet pods.
    fn draining_pods(&self, pods: &[Arc<Pod>], draining: &HashSet<String>) -> Vec<Arc<Pod>> {
        if draining.is_empty() {
            return Vec::new();
        }
        let mut slots = vec![false; self.base.slot_count()];
        for name in draining {
            if let Some(id) = self.node_ids.get(name.as_str()) {
                slots[id.index()] = true;
            }
        }
        let live = |id: NodeId| self.base.node(id).is_some();
        pods.iter()
            .zip(&self.places)
            .filter(|(pod, place)| match **place {
                Place::Node(id) | Place::Expendable(id) if live(id) => slots[id.index()],
                Place::Node(_) | Place::Expendable(_) | Place::Orphan => pod
                    .node_name
                    .as_ref()
                    .is_some_and(|name| draining.contains(name.as_str())),
                Place::Pending | Place::Out => false,
            })
            .filter(|(pod, _)| !pod.is_mirror_pod() && !pod.is_daemonset_pod())
            .map(|(pod, _)| {
                let mut pod = (**pod).clone();
                pod.node_name = None;
                Arc::new(pod)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
