//! The in-memory cluster and the scheduler stand-in.
//!
//! Holds every registered node and every pod, and keeps a scheduling [`Snapshot`] of the nodes with
//! their bound pods up to date incrementally, so neither the scheduler stand-in nor the engine has
//! to rebuild it each loop. The stand-in places pending pods the way kube-scheduler would, with the
//! same filters the engine simulates (`find_node`, round-robin start) in priority order; a pod that
//! fits no node is marked `PodScheduled=False`, reason `Unschedulable`, which is what the engine
//! reacts to.
//!
//! It also plays the parts of the API server and the controllers that scale-down meets: node
//! taints and cordons, the Eviction API refusing evictions a PodDisruptionBudget does not allow
//! (disruptions computed the way the disruption controller does), and workload controllers that
//! re-create an evicted pod as a new pending pod, so a drain moves workloads and a pod nobody
//! re-creates shows up as lost. The storage controllers live in [`crate::storage`], the DRA
//! controllers (claims made from templates, allocations written back on binding, released when
//! pods end, devices published by group nodes) in [`crate::dra`].

use std::collections::HashSet;

// Maps keyed by pod uid, pod key and node name hold every pod of a 1,000,000-pod scenario: the
// hasher is foldhash's fast one (SipHash's resistance to collision attacks buys nothing on keys
// the simulator builds itself, and hashing was a tenth of building the pods).
use foldhash::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ferroscale_model::resources::PODS;
use ferroscale_model::{
    CompactString, ConditionStatus, CsiNodeDriver, DaemonSet, LabelSelector, Namespace, Node, Pod,
    PodCondition, PodDisruptionBudget, PodPhase, Taint, Timestamp,
};
use ferroscale_objects::K8sObject;
use ferroscale_scheduling::{NodeId, SchedulerProfile, Snapshot, find_node};

use crate::api::GatheredPods;
use crate::capacity::ClusterCapacity;
use crate::cloud::{daemonset_pod_for, daemonset_runs_on};
use crate::dra::{ClusterDra, GroupDevices};
use crate::storage::ClusterStorage;

mod owners;
mod pod_table;

pub(crate) use owners::{OwnerId, Owners};
use pod_table::{ByName, ByUid, PodTable};

/// The taint kube-controller-manager puts on a node whose kubelet stopped reporting.
const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// Index of a pod in [`Cluster::pods`]; stable for the whole run.
pub type PodIndex = usize;

/// Every pod record, read as a slice; every way to change one goes through a method that moves
/// `generation`, so that Gather can hand the engine the same shared pod list for as long as no
/// pod changed (as `ferroscale run`'s pod cache does), without a pass over the pods to find out.
#[derive(Debug, Default)]
struct PodRecords {
    records: Vec<PodRecord>,
    generation: u64,
}

impl std::ops::Deref for PodRecords {
    type Target = [PodRecord];

    fn deref(&self) -> &[PodRecord] {
        &self.records
    }
}

impl PodRecords {
    /// Moves the generation: every mutable access below calls it, and the cluster does directly
    /// when something Gather derives from the pods changes without a record changing (a
    /// controller deleted, pods announced).
    fn changed(&mut self) {
        self.generation += 1;
    }

    fn get_mut(&mut self, index: PodIndex) -> Option<&mut PodRecord> {
        self.changed();
        self.records.get_mut(index)
    }

    fn iter_mut(&mut self) -> std::slice::IterMut<'_, PodRecord> {
        self.changed();
        self.records.iter_mut()
    }

    fn push(&mut self, record: PodRecord) {
        self.changed();
        self.records.push(record);
    }

    fn reserve(&mut self, additional: usize) {
        self.records.reserve(additional);
    }
}

impl std::ops::Index<PodIndex> for PodRecords {
    type Output = PodRecord;

    fn index(&self, index: PodIndex) -> &PodRecord {
        &self.records[index]
    }
}

impl std::ops::IndexMut<PodIndex> for PodRecords {
    fn index_mut(&mut self, index: PodIndex) -> &mut PodRecord {
        self.changed();
        &mut self.records[index]
    }
}

/// A pod and its life in the simulation.
#[derive(Debug, Clone)]
pub struct PodRecord {
    pub pod: Arc<Pod>,
    /// When it (last) started waiting for a node.
    pub pending_since: Timestamp,
    pub bound_at: Option<Timestamp>,
    pub deleted_at: Option<Timestamp>,
    /// Bound by the scheduler stand-in (not created already bound): its wait counts.
    pub was_scheduled: bool,
    /// Pods created from the same template share a shape: once one fails to fit in a scheduling
    /// pass, the others are not tried again in that pass (capacity only shrinks within a pass).
    pub shape: Option<usize>,
    /// How the pod ended, once `deleted_at` is set.
    pub end: Option<PodEnd>,
    /// The pod this one was re-created for by its controller after an eviction.
    pub replaces: Option<PodIndex>,
    /// Its controller reference, in the cluster's [`Owners`].
    pub(crate) owner: Option<OwnerId>,
}

/// Why a pod is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodEnd {
    /// A scenario `delete` event (the workload was scaled down on purpose).
    DeletedByScenario,
    /// Evicted (a drain); `replacement` is the pod its controller created instead, `None` when no
    /// controller re-creates it.
    Evicted { replacement: Option<PodIndex> },
    /// A DaemonSet pod whose node went away.
    NodeGone,
}

impl PodRecord {
    pub fn is_pending(&self) -> bool {
        self.deleted_at.is_none() && self.pod.node_name.is_none()
    }

    pub fn is_running(&self) -> bool {
        self.deleted_at.is_none() && self.pod.node_name.is_some()
    }

    /// DaemonSet pods are infrastructure, not workload: summaries leave them out.
    pub fn is_workload(&self) -> bool {
        !self.pod.is_daemonset_pod()
    }

    /// An evicted pod nobody re-created: its workload lost a replica.
    pub fn is_lost(&self) -> bool {
        self.is_workload() && self.end == Some(PodEnd::Evicted { replacement: None })
    }
}

/// Why an eviction was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionRefusal {
    /// No such pod (already gone): the Eviction API answers 404, which callers treat as done.
    NotFound,
    /// A PodDisruptionBudget covering the pod allows no disruption now (HTTP 429).
    DisruptionBudget { pdb: String, allowed: i32 },
}

/// A successful eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub pod: String,
    /// The node it ran on.
    pub node: Option<String>,
    /// `namespace/name` of the pod its controller created instead, if any.
    pub replacement: Option<String>,
    /// A DaemonSet pod: it goes with its node and is not re-created elsewhere.
    pub daemonset: bool,
}

/// Controller kinds whose controller re-creates an evicted pod (DaemonSet pods are not re-created
/// on a node that is being removed: they do not tolerate its deletion taint).
const RECREATING_CONTROLLERS: &[&str] =
    &["ReplicaSet", "ReplicationController", "StatefulSet", "Job"];

/// A registered node.
#[derive(Debug, Clone)]
pub struct ClusterNode {
    pub node: Arc<Node>,
    /// The node group id, `None` for nodes no group manages.
    pub group: Option<String>,
    pub id: NodeId,
}

/// What one scheduling pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulingOutcome {
    pub bound: usize,
    /// Pods marked unschedulable for the first time in this pass.
    pub newly_unschedulable: usize,
}

/// Nodes, pods and the scheduler stand-in.
#[derive(Debug, Default)]
pub struct Cluster {
    snapshot: Snapshot,
    nodes: HashMap<String, ClusterNode>,
    /// Node names in registration order.
    node_order: Vec<String>,
    pods: PodRecords,
    pod_by_uid: PodTable<ByUid>,
    /// Every controller a pod named, by the id its records hold.
    owners: Owners,
    /// Pods waiting for a node, in no particular order.
    pending: Vec<PodIndex>,
    /// Pods created since the last scheduling pass.
    fresh: Vec<PodIndex>,
    /// Set when capacity may have appeared (a node registered or was uncordoned, a pod went away):
    /// every pending pod is tried again, not only the fresh ones.
    capacity_changed: bool,
    round_robin: usize,
    daemonsets: Vec<DaemonSet>,
    pdbs: Vec<PodDisruptionBudget>,
    namespaces: Vec<Namespace>,
    /// Claims, volumes, classes and CSINodes, with the controllers that change them.
    storage: ClusterStorage,
    /// ResourceSlices, DeviceClasses, ResourceClaims and templates, with the controllers that
    /// change them.
    dra: ClusterDra,
    /// PodTemplates, ProvisioningRequests, CapacityBuffers and CapacityQuotas, with the status the
    /// engine last wrote.
    capacity: ClusterCapacity,
    /// The DRA objects changed in a way the snapshot did not make itself (a claim made or
    /// deleted, slices published or removed, a node re-added): it reads them again before it
    /// next places a pod.
    dra_stale: bool,
    /// Live pods (not deleted) by `namespace/name`.
    live_by_key: PodTable<ByName>,
    /// Re-creations so far, for unique names of re-created pods.
    recreated: usize,
    /// Controllers deleted by the scenario by name, with their (kind, namespace): they no longer
    /// exist and no longer re-create their pods. Keyed by name so that the check for every pod of
    /// every loop looks up a `&str` without building a key.
    deleted_controllers: HashMap<String, Vec<(String, String)>>,
    /// Pods a controller's `create` with a `rate` has still to make, by the controller's
    /// (kind, namespace, name): the controller already counts them among its replicas. A few
    /// entries at most (one per rated `create` under way), so a list.
    announced: Vec<((String, String, String), usize)>,
    /// Pods bound by name to a node they did not fit on, since the last [`Cluster::take_refusals`].
    refusals: Vec<NodeRefusal>,
    /// Nodes whose object changed (taints, cordon) since the scheduler stand-in's snapshot last
    /// read them, with the order of their last change. The snapshot has no in-place node update:
    /// a change re-adds the node with its pods, which the engine's taint writes (a whole
    /// scale-down's worth in one loop) would pay for each time although nothing reads the
    /// snapshot's copy of the node until the next scheduling pass. So the change is applied to the
    /// cluster's node at once and to the snapshot when it is next needed
    /// ([`Cluster::refresh_changed_nodes`]), in the order the nodes last changed, which leaves the
    /// snapshot's nodes in the order eager re-adding would have (the stand-in's round-robin start
    /// depends on it).
    changed_nodes: HashMap<String, u64>,
    /// Counter giving `changed_nodes` their order.
    node_changes: u64,
    /// What Gather last derived from the pods, reused while their generation stays.
    gathered_pods: Mutex<Option<GatheredPods>>,
    /// The nodes in registration order as Gather last listed them; `None` once a node came, went
    /// or changed. Listing them walks the order and finds each node by name, which at 65,000
    /// nodes costs more than the rest of a quiet loop's Gather.
    gathered_nodes: Mutex<Option<Vec<Arc<Node>>>>,
    /// Registered nodes per group, kept as nodes come and go: read every loop.
    nodes_per_group: HashMap<String, usize>,
}

/// Pods whose `spec.nodeName` named a node that had no room for them: the node refused them, as a
/// kubelet's admission does (`OutOfpods`, `OutOfcpu`, ...), and they wait for the scheduler like new
/// pods (as the replacement a controller creates for a refused pod would).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRefusal {
    pub node: String,
    /// The kubelet's reason, e.g. `OutOfpods`.
    pub reason: String,
    pub pods: usize,
}

impl Cluster {
    pub fn new(daemonsets: Vec<DaemonSet>) -> Cluster {
        Cluster {
            daemonsets,
            ..Cluster::default()
        }
    }

    /// Sets the PodDisruptionBudgets the Eviction API honours.
    pub fn set_pdbs(&mut self, pdbs: Vec<PodDisruptionBudget>) {
        self.pdbs = pdbs;
    }

    /// PodDisruptionBudgets with `disruptions_allowed` as the disruption controller would compute
    /// it now.
    pub fn pdbs_with_status(&self) -> Vec<PodDisruptionBudget> {
        self.pdbs
            .iter()
            .map(|pdb| {
                let mut pdb = pdb.clone();
                pdb.disruptions_allowed = Some(self.disruptions_allowed(&pdb));
                pdb
            })
            .collect()
    }

    pub fn daemonsets(&self) -> &[DaemonSet] {
        &self.daemonsets
    }

    pub fn add_namespace(&mut self, namespace: Namespace) {
        self.snapshot
            .set_namespace_labels(namespace.name.clone(), namespace.labels.clone());
        self.namespaces.push(namespace);
    }

    pub fn namespaces(&self) -> &[Namespace] {
        &self.namespaces
    }

    /// Keeps a claim, volume, storage class or CSINode; returns false for any other object.
    pub fn add_storage_object(&mut self, object: &K8sObject) -> bool {
        let added = self.storage.add(object);
        if added {
            self.storage_changed();
        }
        added
    }

    /// The capacity-API objects as they are now (statuses the engine wrote included).
    pub fn capacity(&self) -> &ClusterCapacity {
        &self.capacity
    }

    /// The capacity-API objects, to add objects or take the engine's writes.
    pub fn capacity_mut(&mut self) -> &mut ClusterCapacity {
        &mut self.capacity
    }

    /// The CSI drivers (and their volume limits) every node of `group` reports once registered.
    pub fn set_group_csi_drivers(&mut self, group: &str, drivers: Vec<CsiNodeDriver>) {
        self.storage.set_group_drivers(group, drivers);
    }

    /// The storage objects as they are now (claims bound by the scheduler stand-in included).
    pub fn storage(&self) -> &ClusterStorage {
        &self.storage
    }

    /// Keeps a ResourceSlice, DeviceClass, ResourceClaim or ResourceClaimTemplate; returns false
    /// for any other object.
    pub fn add_dra_object(&mut self, object: &K8sObject) -> bool {
        let added = self.dra.add(object);
        if added {
            self.dra_stale = true;
        }
        added
    }

    /// The devices every node of `group` publishes as ResourceSlices once registered.
    pub fn set_group_devices(&mut self, group: &str, devices: Vec<GroupDevices>) {
        self.dra.set_group_devices(group, devices);
    }

    /// The DRA objects as they are now (claims made, allocated and reserved by the simulated
    /// control plane included).
    pub fn dra(&self) -> &ClusterDra {
        &self.dra
    }

    /// Gives the scheduler stand-in's snapshot the DRA objects as they are now, if they changed
    /// behind its back.
    fn sync_dra(&mut self) {
        self.refresh_changed_nodes();
        if self.dra_stale {
            self.dra.load_into(&mut self.snapshot);
            self.dra_stale = false;
        }
    }

    /// A pod no longer uses its claims (`deleted`: the pod is gone, and the claims it owns with
    /// it).
    fn release_claims(&mut self, pod: &Pod, deleted: bool) {
        if pod.has_resource_claims() && self.dra.release(pod, deleted) {
            self.dra_stale = true;
        }
    }

    /// The scheduler stand-in reads the storage objects as they are now.
    fn storage_changed(&mut self) {
        self.snapshot.set_volume_catalogue(self.storage.catalogue());
    }

    /// Deletes a workload controller, orphaning its pods.
    pub fn delete_controller(&mut self, kind: &str, namespace: &str, name: &str) {
        let entry = (kind.to_string(), namespace.to_string());
        let deleted = self
            .deleted_controllers
            .entry(name.to_string())
            .or_default();
        if !deleted.contains(&entry) {
            deleted.push(entry);
        }
        self.pods.changed();
    }

    /// `pod`'s controller has `count` more pods to create after the ones being created now (0:
    /// none, the controller has created all it wants). Pods without a controller announce
    /// nothing.
    pub fn announce_pods(&mut self, pod: &Pod, count: usize) {
        let Some(owner) = pod.controller() else {
            return;
        };
        let key = (
            owner.kind.clone(),
            pod.namespace.to_string(),
            owner.name.clone(),
        );
        self.announced.retain(|(k, _)| *k != key);
        if count > 0 {
            self.announced.push((key, count));
        }
        self.pods.changed();
    }

    /// How many pods the controller `(kind, namespace, name)` has still to create.
    pub fn announced_pods(&self, kind: &str, namespace: &str, name: &str) -> usize {
        self.announced
            .iter()
            .find(|((k, ns, n), _)| k == kind && ns == namespace && n == name)
            .map_or(0, |(_, count)| *count)
    }

    /// Whether the pod's controller was deleted by the scenario.
    pub fn controller_deleted(&self, pod: &Pod) -> bool {
        pod.controller()
            .is_some_and(|c| self.owner_deleted(&c.kind, &pod.namespace, &c.name))
    }

    /// Whether the scenario deleted the controller `kind` `namespace/name`.
    pub fn owner_deleted(&self, kind: &str, namespace: &str, name: &str) -> bool {
        self.deleted_controllers
            .get(name)
            .is_some_and(|deleted| deleted.iter().any(|(k, ns)| k == kind && ns == namespace))
    }

    /// The controllers pods named, by the id each pod record holds.
    pub(crate) fn owners(&self) -> &Owners {
        &self.owners
    }

    /// Replaces every `every`-th live pod by a copy with a changed annotation (what an update
    /// of the pod's status makes: a new object, nothing the scheduler reads). Returns how many.
    pub fn touch_pods(&mut self, every: usize) -> usize {
        let mut touched = 0;
        for record in self
            .pods
            .iter_mut()
            .filter(|r| r.deleted_at.is_none())
            .step_by(every.max(1))
        {
            let mut pod = (*record.pod).clone();
            let generation = pod
                .annotations
                .get("ferroscale.bench/touched")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            pod.annotations.insert(
                "ferroscale.bench/touched".to_string(),
                (generation + 1).to_string(),
            );
            record.pod = Arc::new(pod);
            touched += 1;
        }
        touched
    }

    /// Live pods: bound and pending, not deleted.
    pub fn live_pods(&self) -> impl Iterator<Item = &PodRecord> {
        self.pods.iter().filter(|r| r.deleted_at.is_none())
    }

    /// The live pod `namespace/name`.
    pub fn live_pod(&self, namespace: &str, name: &str) -> Option<&PodRecord> {
        self.live_by_key
            .get((namespace, name), &self.pods)
            .and_then(|i| self.pods.get(i))
    }

    /// Disruptions a budget allows now: healthy (bound) covered pods minus the healthy count it
    /// demands of the expected count (every live covered pod: the controllers keep them).
    pub fn disruptions_allowed(&self, pdb: &PodDisruptionBudget) -> i32 {
        let mut expected = 0i32;
        let mut healthy = 0i32;
        for record in self.live_pods() {
            if pdb.covers(&record.pod) {
                expected = expected.saturating_add(1);
                if record.pod.is_bound() {
                    healthy = healthy.saturating_add(1);
                }
            }
        }
        let desired_healthy = match (pdb.max_unavailable, pdb.min_available) {
            (Some(max_unavailable), _) => expected - max_unavailable.resolve(expected),
            (None, Some(min_available)) => min_available.resolve(expected),
            (None, None) => 0,
        };
        (healthy - desired_healthy).max(0)
    }

    /// Registered nodes with their bound pods, as the scheduler stand-in sees them. A node's
    /// taints and cordon written since the last scheduling pass reach it with the next pass
    /// (or [`Cluster::snapshot_mut`]); [`Cluster::node`] has them at once.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Mutable access for the engine, which forks and reverts; callers must leave the snapshot as
    /// they found it (every fork reverted). Every node in it is up to date.
    pub fn snapshot_mut(&mut self) -> &mut Snapshot {
        self.refresh_changed_nodes();
        &mut self.snapshot
    }

    pub fn node(&self, name: &str) -> Option<&ClusterNode> {
        self.nodes.get(name)
    }

    /// The nodes' objects in registration order, as [`Cluster::nodes`] lists them, from the last
    /// listing while no node came, went or changed.
    pub fn node_objects(&self) -> Vec<Arc<Node>> {
        let mut kept = self
            .gathered_nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(nodes) = kept.as_ref() {
            // Every debug build (every simulator test) checks that the kept list is current.
            debug_assert!(
                nodes.len() == self.nodes.len()
                    && nodes
                        .iter()
                        .zip(self.nodes())
                        .all(|(kept, node)| Arc::ptr_eq(kept, &node.node)),
                "a node changed without the kept node list being dropped"
            );
            return nodes.clone();
        }
        let nodes: Vec<Arc<Node>> = self.nodes().map(|n| n.node.clone()).collect();
        *kept = Some(nodes.clone());
        nodes
    }

    /// How many registered nodes `group` has.
    pub fn nodes_in_group(&self, group: &str) -> usize {
        let count = self.nodes_per_group.get(group).copied().unwrap_or(0);
        debug_assert_eq!(
            count,
            self.nodes
                .values()
                .filter(|n| n.group.as_deref() == Some(group))
                .count(),
            "the count of group {group}'s nodes drifted"
        );
        count
    }

    /// Drops the kept node list: a node came, went or changed.
    fn nodes_changed(&mut self) {
        *self
            .gathered_nodes
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Registered nodes in registration order.
    pub fn nodes(&self) -> impl Iterator<Item = &ClusterNode> {
        self.node_order
            .iter()
            .filter_map(|name| self.nodes.get(name))
    }

    /// Registered nodes in no particular order (cheaper than [`Cluster::nodes`]).
    pub fn nodes_unordered(&self) -> impl Iterator<Item = &ClusterNode> {
        self.nodes.values()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn pods(&self) -> &[PodRecord] {
        &self.pods
    }

    /// Gather's kept pod list (see [`GatheredPods`]).
    pub(crate) fn gathered_pods(&self) -> MutexGuard<'_, Option<GatheredPods>> {
        self.gathered_pods
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves whenever a pod record changes, or what Gather derives from the pods (implied
    /// controllers) may have: equal generations mean the same live pods, the same objects.
    pub fn pods_generation(&self) -> u64 {
        self.pods.generation
    }

    pub fn pod_index(&self, uid: &str) -> Option<PodIndex> {
        self.pod_by_uid.get(uid, &self.pods)
    }

    /// Pending pods (not deleted, not bound).
    pub fn pending_pods(&self) -> impl Iterator<Item = &PodRecord> {
        self.pending.iter().filter_map(|i| self.pods.get(*i))
    }

    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Pending pods the scheduler has marked unschedulable: what drives a scale-up.
    pub fn unschedulable_pods(&self) -> Vec<Arc<Pod>> {
        self.pending_pods()
            .filter(|r| r.pod.is_marked_unschedulable())
            .map(|r| r.pod.clone())
            .collect()
    }

    /// Makes the scheduler stand-in follow a kube-scheduler profile (`--scheduler-config-file`).
    pub fn set_scheduler_profile(&mut self, profile: Arc<SchedulerProfile>) {
        self.snapshot.set_scheduler_profile(profile);
    }

    /// Registers a Ready node and starts the DaemonSet pods that belong on it.
    pub fn add_node(&mut self, node: Node, group: Option<String>) {
        if self.nodes.contains_key(&node.name) {
            return;
        }
        // A node changed before this one registered comes before it in the snapshot.
        self.refresh_changed_nodes();
        let node = Arc::new(node);
        let id = self.snapshot.add_node(node.clone());
        if self.storage.node_registered(&node.name, group.as_deref()) {
            self.storage_changed();
        }
        // Node-local slices attach to their node by name when the snapshot reads them.
        if self.dra.node_registered(&node.name, group.as_deref()) || !self.dra.is_empty() {
            self.dra_stale = true;
        }
        let daemon_pods: Vec<Pod> = self
            .daemonsets
            .iter()
            .filter(|ds| daemonset_runs_on(ds, &node))
            .map(|ds| daemonset_pod_for(ds, &node))
            .collect();
        self.node_order.push(node.name.clone());
        self.nodes_changed();
        if let Some(group) = &group {
            *self.nodes_per_group.entry(group.clone()).or_default() += 1;
        }
        self.nodes.insert(
            node.name.clone(),
            ClusterNode {
                node: node.clone(),
                group,
                id,
            },
        );
        for pod in daemon_pods {
            let index = self.insert_pod(pod, node.creation_time, None);
            self.bind(index, id, node.creation_time);
        }
        self.capacity_changed = true;
    }

    /// Removes a node. Its workload pods go back to pending as their controllers would recreate
    /// them; its DaemonSet pods disappear with it. Returns how many pods went back to pending.
    pub fn remove_node(&mut self, name: &str, now: Timestamp) -> usize {
        let Some(entry) = self.nodes.remove(name) else {
            return 0;
        };
        self.nodes_changed();
        if let Some(count) = entry
            .group
            .as_ref()
            .and_then(|group| self.nodes_per_group.get_mut(group))
        {
            *count -= 1;
        }
        self.node_order.retain(|n| n != name);
        self.changed_nodes.remove(name);
        if self.storage.node_removed(name) {
            self.storage_changed();
        }
        if self.dra.node_removed(name) {
            self.dra_stale = true;
        }
        let mut requeued = 0;
        for pod in self.snapshot.remove_node(entry.id) {
            // Its devices went with the node: the pod waits for new ones (a DaemonSet pod is
            // gone, with the claims it owned).
            let daemonset = pod.is_daemonset_pod();
            self.release_claims(&pod, daemonset);
            let Some(index) = self.pod_by_uid.get(&pod.uid, &self.pods) else {
                continue;
            };
            if daemonset {
                self.live_by_key.remove_if_filed(index, &self.pods);
            }
            let Some(record) = self.pods.get_mut(index) else {
                continue;
            };
            if daemonset {
                record.deleted_at = Some(now);
                record.end = Some(PodEnd::NodeGone);
                continue;
            }
            let pod = Arc::make_mut(&mut record.pod);
            pod.node_name = None;
            pod.phase = PodPhase::Pending;
            pod.scheduled_condition = None;
            record.pending_since = now;
            record.bound_at = None;
            self.pending.push(index);
            self.fresh.push(index);
            requeued += 1;
        }
        requeued
    }

    /// The machine behind a node is gone but nothing deletes its Node object (a group without a
    /// cloud-controller-manager): its pods end as [`Cluster::remove_node`] ends them (workload
    /// pods back to pending, DaemonSet pods gone) and the Node stays, not Ready
    /// (`Ready=Unknown`), with the unreachable taints kube-controller-manager's node lifecycle
    /// controller puts on it, so nothing is scheduled there. The 40-odd seconds that controller
    /// takes to notice and the pods' five minutes of toleration are not simulated. Returns the
    /// pods that went back to pending.
    pub fn machine_gone(&mut self, name: &str, now: Timestamp) -> usize {
        let Some(entry) = self.nodes.get(name) else {
            return 0;
        };
        let group = entry.group.clone();
        let mut node = (*entry.node).clone();
        let requeued = self.remove_node(name, now);
        node.conditions.ready = Some(ConditionStatus::Unknown);
        node.conditions.last_transition = Some(now);
        node.taints.retain(|t| t.key != UNREACHABLE_TAINT);
        node.taints.push(Taint::new(
            UNREACHABLE_TAINT,
            "",
            ferroscale_model::TaintEffect::NoSchedule,
        ));
        let mut no_execute = Taint::new(
            UNREACHABLE_TAINT,
            "",
            ferroscale_model::TaintEffect::NoExecute,
        );
        no_execute.time_added = Some(now);
        node.taints.push(no_execute);
        self.add_node(node, group);
        requeued
    }

    /// Initializes a node as a cloud node controller does: `labels` it does not have are added
    /// and every taint with `taint_key` removed; the DaemonSet pods that run on it now start, as
    /// the DaemonSet controller would start them once the taint is gone. Returns false for an
    /// unknown node or one with another uid.
    pub fn initialize_node(
        &mut self,
        name: &str,
        uid: &str,
        labels: &[(String, String)],
        taint_key: &str,
        now: Timestamp,
    ) -> bool {
        let Some(entry) = self.nodes.get(name) else {
            return false;
        };
        if entry.node.uid != uid {
            return false;
        }
        let mut node = (*entry.node).clone();
        for (key, value) in labels {
            if !node.labels.contains_key(key.as_str()) {
                node.labels.insert(key.clone(), value.clone());
            }
        }
        node.taints.retain(|t| t.key != taint_key);
        self.replace_node(name, node.clone());
        self.refresh_changed_nodes();
        self.capacity_changed = true;
        let Some(id) = self.nodes.get(name).map(|n| n.id) else {
            return true;
        };
        let daemon_pods: Vec<Pod> = self
            .daemonsets
            .iter()
            .filter(|ds| daemonset_runs_on(ds, &node))
            .map(|ds| daemonset_pod_for(ds, &node))
            .filter(|pod| {
                !self
                    .live_by_key
                    .contains((&pod.namespace, &pod.name), &self.pods)
            })
            .collect();
        for pod in daemon_pods {
            let index = self.insert_pod(pod, now, None);
            self.bind(index, id, now);
        }
        true
    }

    /// Marks a node unschedulable (`kubectl cordon`). Returns false for an unknown node.
    pub fn cordon(&mut self, name: &str) -> bool {
        let Some(entry) = self.nodes.get(name) else {
            return false;
        };
        if entry.node.unschedulable {
            return true;
        }
        let mut node = (*entry.node).clone();
        node.unschedulable = true;
        self.replace_node(name, node);
        true
    }

    /// Clears `spec.unschedulable` again.
    pub fn uncordon(&mut self, name: &str) -> bool {
        let Some(entry) = self.nodes.get(name) else {
            return false;
        };
        if !entry.node.unschedulable {
            return true;
        }
        let mut node = (*entry.node).clone();
        node.unschedulable = false;
        self.replace_node(name, node);
        self.capacity_changed = true;
        true
    }

    /// Adds `taint` to a node (replacing one with the same key and effect), and cordons it when
    /// asked. Returns false for an unknown node.
    pub fn taint(&mut self, name: &str, taint: Taint, cordon: bool) -> bool {
        let Some(entry) = self.nodes.get(name) else {
            return false;
        };
        let mut node = (*entry.node).clone();
        node.taints
            .retain(|t| !(t.key == taint.key && t.effect == taint.effect));
        node.taints.push(taint);
        if cordon {
            node.unschedulable = true;
        }
        self.replace_node(name, node);
        true
    }

    /// Removes every taint with `key` from a node, and uncordons it when asked. Returns false for
    /// an unknown node.
    pub fn untaint(&mut self, name: &str, key: &str, uncordon: bool) -> bool {
        let Some(entry) = self.nodes.get(name) else {
            return false;
        };
        let mut node = (*entry.node).clone();
        node.taints.retain(|t| t.key != key);
        if uncordon {
            node.unschedulable = false;
        }
        self.replace_node(name, node);
        self.capacity_changed = true;
        true
    }

    /// Evicts a live pod through the simulated Eviction API: refused while a budget covering it
    /// allows no disruption; otherwise the pod is deleted at once (grace periods take no simulated
    /// time) and, when a workload controller owns it, re-created as a new pending pod.
    pub fn evict(
        &mut self,
        namespace: &str,
        name: &str,
        now: Timestamp,
    ) -> Result<Eviction, EvictionRefusal> {
        let Some(index) = self.live_by_key.get((namespace, name), &self.pods) else {
            return Err(EvictionRefusal::NotFound);
        };
        let pod = self.pods[index].pod.clone();
        for pdb in &self.pdbs {
            if pdb.covers(&pod) {
                let allowed = self.disruptions_allowed(pdb);
                if allowed < 1 {
                    return Err(EvictionRefusal::DisruptionBudget {
                        pdb: format!("{}/{}", pdb.namespace, pdb.name),
                        allowed,
                    });
                }
            }
        }
        self.remove_live_pod(index, now);
        let recreates = pod
            .controller()
            .is_some_and(|c| RECREATING_CONTROLLERS.contains(&c.kind.as_str()))
            && !self.controller_deleted(&pod);
        let replacement = if recreates {
            let mut copy = (*pod).clone();
            let stateful = pod.controller().is_some_and(|c| c.kind == "StatefulSet");
            self.recreated += 1;
            if !stateful {
                copy.name = ferroscale_model::format_compact!("{}-r{}", pod.name, self.recreated);
            }
            copy.uid = CompactString::default();
            copy.node_name = None;
            copy.nominated_node_name = None;
            copy.phase = PodPhase::Pending;
            copy.scheduled_condition = None;
            copy.creation_time = now;
            copy.deletion_time = None;
            // The new pod gets claims of its own from the resourceclaim controller.
            copy.resource_claim_statuses.clear();
            let shape = self.pods[index].shape;
            let new_index = self.add_pod(copy, now, shape);
            self.pods[new_index].replaces = Some(index);
            Some(new_index)
        } else {
            None
        };
        self.pods[index].end = Some(PodEnd::Evicted { replacement });
        Ok(Eviction {
            pod: pod.key(),
            node: pod.node_name.as_deref().map(str::to_string),
            replacement: replacement.map(|i| self.pods[i].pod.key()),
            daemonset: pod.is_daemonset_pod(),
        })
    }

    /// Marks a live pod deleted and takes it off its node.
    fn remove_live_pod(&mut self, index: PodIndex, now: Timestamp) {
        let Some(record) = self.pods.get_mut(index) else {
            return;
        };
        if record.deleted_at.is_some() {
            return;
        }
        record.deleted_at = Some(now);
        let uid = record.pod.uid.clone();
        let node_name = record.pod.node_name.clone();
        self.live_by_key.remove_if_filed(index, &self.pods);
        match node_name.and_then(|n| self.nodes.get(n.as_str())) {
            Some(entry) => {
                self.snapshot.remove_pod(entry.id, &uid);
                self.capacity_changed = true;
            }
            None => {
                self.pending.retain(|i| *i != index);
                self.fresh.retain(|i| *i != index);
            }
        }
        let pod = self.pods[index].pod.clone();
        self.release_claims(&pod, true);
    }

    /// Gives a node a new object (taints, cordon): the cluster's copy (what Gather and the engine
    /// read) at once, the scheduler stand-in's snapshot before it next reads nodes.
    fn replace_node(&mut self, name: &str, node: Node) {
        let Some(entry) = self.nodes.get_mut(name) else {
            return;
        };
        entry.node = Arc::new(node);
        self.nodes_changed();
        self.node_changes += 1;
        self.changed_nodes
            .insert(name.to_string(), self.node_changes);
        if !self.dra.is_empty() {
            self.dra_stale = true;
        }
    }

    /// Brings the snapshot's copies of changed nodes up to date, re-adding each (the snapshot has
    /// no in-place node update) with its pods, in the order the nodes last changed.
    fn refresh_changed_nodes(&mut self) {
        if self.changed_nodes.is_empty() {
            return;
        }
        let mut changed: Vec<(u64, String)> = self
            .changed_nodes
            .drain()
            .map(|(name, order)| (order, name))
            .collect();
        changed.sort_unstable();
        for (_, name) in changed {
            let Some(entry) = self.nodes.get_mut(&name) else {
                continue;
            };
            let pods = self.snapshot.remove_node(entry.id);
            let id = self.snapshot.add_node(entry.node.clone());
            for pod in pods {
                self.snapshot.add_pod(id, pod);
            }
            entry.id = id;
        }
    }

    /// Adds a pod. A pod with `spec.nodeName` of a registered node is bound at once; any other pod
    /// waits for the scheduler (a `nodeName` of an unknown node is cleared, as if the pod had been
    /// recreated). Returns its index.
    ///
    /// A pod named to a node without room for it (pod count or resources) is refused by that node
    /// and waits too; [`Cluster::take_refusals`] says which. DaemonSet pods are exempt: the
    /// simulated DaemonSet controller places them with their node.
    pub fn add_pod(&mut self, mut pod: Pod, now: Timestamp, shape: Option<usize>) -> PodIndex {
        let mut target = pod
            .node_name
            .as_ref()
            .and_then(|n| self.nodes.get(n.as_str()))
            .map(|n| n.id);
        if let Some(id) = target
            && !pod.is_daemonset_pod()
            && let Some(info) = self.snapshot.node(id)
        {
            // The pod's requests leave out the pod slot it takes.
            let mut wants = pod.requests.clone();
            wants.set(PODS, 1);
            if let Some(resource) = wants.first_insufficient(&info.free()) {
                let reason = format!("OutOf{resource}");
                let node = info.node.name.clone();
                self.note_refusal(&node, &reason);
                target = None;
            }
        }
        if target.is_none() {
            pod.node_name = None;
            pod.phase = PodPhase::Pending;
        }
        let index = self.insert_pod(pod, now, shape);
        match target {
            Some(id) => {
                self.bind(index, id, now);
                self.bind_claims(index, id);
            }
            None => {
                self.pending.push(index);
                self.fresh.push(index);
            }
        }
        index
    }

    /// Makes room for `additional` more pods at once (a scenario's `create.count`), rather than
    /// growing the pod list and its indexes step by step, rehashing as they go.
    pub fn reserve_pods(&mut self, additional: usize) {
        self.pods.reserve(additional);
        self.pod_by_uid.reserve(additional, &self.pods);
        self.live_by_key.reserve(additional, &self.pods);
    }

    fn note_refusal(&mut self, node: &str, reason: &str) {
        // Copies bound to one node arrive together: only the latest entry needs a look.
        match self
            .refusals
            .last_mut()
            .filter(|r| r.node == node && r.reason == reason)
        {
            Some(refusal) => refusal.pods += 1,
            None => self.refusals.push(NodeRefusal {
                node: node.to_string(),
                reason: reason.to_string(),
                pods: 1,
            }),
        }
    }

    /// Pods refused by the node their `spec.nodeName` named, per node and reason, since the last
    /// call.
    pub fn take_refusals(&mut self) -> Vec<NodeRefusal> {
        std::mem::take(&mut self.refusals)
    }

    fn insert_pod(&mut self, mut pod: Pod, now: Timestamp, shape: Option<usize>) -> PodIndex {
        let index = self.pods.len();
        if pod.uid.is_empty() || self.pod_by_uid.contains(&pod.uid, &self.pods) {
            pod.uid = sized_uid(index, &pod.namespace, &pod.name).into();
        }
        if pod.has_checked_volumes() && self.storage.adopt_ephemeral_claims(&pod) {
            self.storage_changed();
        }
        if pod.has_resource_claims() && self.dra.make_template_claims(&mut pod) {
            self.dra_stale = true;
        }
        let owner = pod
            .controller()
            .map(|c| self.owners.id_of(&c.kind, &pod.namespace, &c.name, &c.uid));
        self.pods.push(PodRecord {
            owner,
            pod: Arc::new(pod),
            pending_since: now,
            bound_at: None,
            deleted_at: None,
            was_scheduled: false,
            shape,
            end: None,
            replaces: None,
        });
        self.pod_by_uid.insert(index, &self.pods);
        self.live_by_key.insert(index, &self.pods);
        index
    }

    fn bind(&mut self, index: PodIndex, node: NodeId, now: Timestamp) {
        let Some(node_name) = self.snapshot.node(node).map(|n| n.node.name.as_str()) else {
            return;
        };
        let Some(record) = self.pods.get_mut(index) else {
            return;
        };
        let pod = Arc::make_mut(&mut record.pod);
        // A pod created bound by name already names its node: keep that string.
        if pod.node_name.as_deref() != Some(node_name) {
            pod.node_name = Some(node_name.into());
        }
        pod.phase = PodPhase::Running;
        pod.scheduled_condition = Some(Box::new(PodCondition {
            status: ConditionStatus::True,
            reason: String::new(),
            last_transition: Some(now),
        }));
        record.bound_at = Some(now);
        let pod = record.pod.clone();
        if !pod.has_resource_claims() {
            self.snapshot.add_pod(node, pod);
            return;
        }
        // The snapshot allocates the pod's claims on the node and reserves them for it, as the
        // scheduler's Reserve does; the claim objects then show what it wrote.
        self.sync_dra();
        self.snapshot.add_pod(node, pod.clone());
        // The snapshot made this change itself: it needs no re-read.
        self.dra.write_back(&pod, &self.snapshot);
    }

    /// The volume binder's part of binding a pod: its unbound claims get volumes usable on the
    /// node (see [`crate::storage`]).
    fn bind_claims(&mut self, index: PodIndex, node: NodeId) {
        let Some(record) = self.pods.get(index) else {
            return;
        };
        if !record.pod.has_checked_volumes() {
            return;
        }
        let pod = record.pod.clone();
        let Some(node) = self.snapshot.node(node).map(|n| n.node.clone()) else {
            return;
        };
        if self.storage.bind_claims(&pod, &node) {
            self.storage_changed();
        }
    }

    /// Deletes pods matching `selector` (all of them, or `count`), pending ones first, then the
    /// most recently created, as a ReplicaSet scaling down would. Returns how many were deleted.
    pub fn delete_pods(
        &mut self,
        selector: &LabelSelector,
        namespace: Option<&str>,
        count: Option<usize>,
        now: Timestamp,
    ) -> usize {
        let mut victims: Vec<PodIndex> = (0..self.pods.len())
            .filter(|i| {
                let r = &self.pods[*i];
                r.deleted_at.is_none()
                    && r.is_workload()
                    && namespace.is_none_or(|ns| r.pod.namespace == ns)
                    && selector.matches(&r.pod.labels)
            })
            .collect();
        victims.sort_by_key(|i| {
            let r = &self.pods[*i];
            (
                r.is_running(),
                std::cmp::Reverse(r.pod.creation_time),
                std::cmp::Reverse(*i),
            )
        });
        victims.truncate(count.unwrap_or(usize::MAX));
        let deleted: HashSet<PodIndex> = victims.iter().copied().collect();
        for index in &victims {
            let record = &mut self.pods[*index];
            record.deleted_at = Some(now);
            record.end = Some(PodEnd::DeletedByScenario);
            self.live_by_key.remove_if_filed(*index, &self.pods);
            let record = &self.pods[*index];
            if let Some(node_name) = &record.pod.node_name
                && let Some(entry) = self.nodes.get(node_name.as_str())
            {
                self.snapshot.remove_pod(entry.id, &record.pod.uid);
                self.capacity_changed = true;
            }
            let pod = self.pods[*index].pod.clone();
            self.release_claims(&pod, true);
        }
        self.pending.retain(|i| !deleted.contains(i));
        self.fresh.retain(|i| !deleted.contains(i));
        victims.len()
    }

    /// One pass of the scheduler stand-in: pending pods in priority order (highest first, then
    /// oldest) are bound to the first node that fits, starting one past the previous match; the
    /// rest are marked unschedulable. When nothing changed since the last pass only the new pods
    /// are tried: the verdict for the others could not have changed.
    pub fn schedule(&mut self, now: Timestamp) -> SchedulingOutcome {
        self.refresh_changed_nodes();
        let mut candidates: Vec<PodIndex> = if self.capacity_changed {
            self.pending.clone()
        } else {
            std::mem::take(&mut self.fresh)
        };
        self.fresh.clear();
        self.capacity_changed = false;
        if candidates.is_empty() {
            return SchedulingOutcome::default();
        }
        self.sync_dra();
        candidates.sort_by_key(|i| {
            let r = &self.pods[*i];
            (
                std::cmp::Reverse(r.pod.priority.unwrap_or(0)),
                r.pending_since,
                *i,
            )
        });
        let mut outcome = SchedulingOutcome::default();
        let mut failed_shapes: HashSet<usize> = HashSet::new();
        let mut bound: HashSet<PodIndex> = HashSet::new();
        for index in candidates {
            let record = &self.pods[index];
            let known_misfit = record.shape.is_some_and(|s| failed_shapes.contains(&s));
            let placed = if known_misfit {
                None
            } else {
                find_node(&mut self.snapshot, &record.pod, self.round_robin)
            };
            match placed {
                Some(node) => {
                    self.round_robin = node.index() + 1;
                    self.bind(index, node, now);
                    self.bind_claims(index, node);
                    self.pods[index].was_scheduled = true;
                    bound.insert(index);
                    outcome.bound += 1;
                }
                None => {
                    if let Some(shape) = record.shape {
                        failed_shapes.insert(shape);
                    }
                    // Read first: a pod already marked is left as it is (its record and the
                    // pod list Gather hands out unchanged).
                    if !self.pods[index].pod.is_marked_unschedulable() {
                        let record = &mut self.pods[index];
                        Arc::make_mut(&mut record.pod).scheduled_condition =
                            Some(Box::new(PodCondition {
                                status: ConditionStatus::False,
                                reason: "Unschedulable".to_string(),
                                last_transition: Some(now),
                            }));
                        outcome.newly_unschedulable += 1;
                    }
                }
            }
        }
        if !bound.is_empty() {
            self.pending.retain(|i| !bound.contains(i));
        }
        outcome
    }
}

/// `uid-sim-<index>-<namespace>-<name>`, allocated once at its final size (a million pods are
/// named this way when a large scenario starts).
fn sized_uid(index: PodIndex, namespace: &str, name: &str) -> String {
    use std::fmt::Write;
    let mut uid = String::with_capacity(8 + 20 + 1 + namespace.len() + 1 + name.len());
    // Writing into a String cannot fail.
    let _ = write!(uid, "uid-sim-{index}-{namespace}-{name}");
    uid
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::{IntOrPercent, Resources};

    fn node(name: &str, cpu: i64) -> Node {
        let mut n = Node::new(name, Resources::new(cpu, 8 << 30));
        n.allocatable.pods = 110;
        n.capacity.pods = 110;
        n
    }

    fn pod(name: &str, cpu: i64) -> Pod {
        let mut p = Pod::new("default", name);
        p.requests = Resources::new(cpu, 0);
        p.labels.insert("app".into(), "web".into());
        p
    }

    #[test]
    fn pods_that_fit_are_bound_and_the_rest_marked_unschedulable() {
        let mut c = Cluster::new(Vec::new());
        c.add_node(node("n1", 2000), None);
        for i in 0..3 {
            c.add_pod(
                pod(&format!("p{i}"), 1000),
                Timestamp::from_secs(0),
                Some(0),
            );
        }
        let out = c.schedule(Timestamp::from_secs(1));
        assert_eq!(
            out,
            SchedulingOutcome {
                bound: 2,
                newly_unschedulable: 1
            }
        );
        let waiting = c.unschedulable_pods();
        assert_eq!(waiting.len(), 1);
        let cond = waiting[0].scheduled_condition.clone().unwrap();
        assert_eq!(cond.last_transition, Some(Timestamp::from_secs(1)));
        // A new node makes room: the waiting pod is bound on the next pass.
        c.add_node(node("n2", 2000), None);
        let out = c.schedule(Timestamp::from_secs(5));
        assert_eq!(out.bound, 1);
        assert_eq!(c.pending_count(), 0);
        assert_eq!(c.snapshot().pod_count(), 3);
    }

    #[test]
    fn higher_priority_pods_are_placed_first() {
        let mut c = Cluster::new(Vec::new());
        c.add_node(node("n1", 1000), None);
        c.add_pod(pod("low", 1000), Timestamp::from_secs(0), None);
        let mut high = pod("high", 1000);
        high.priority = Some(100);
        c.add_pod(high, Timestamp::from_secs(0), None);
        c.schedule(Timestamp::from_secs(0));
        let waiting = c.unschedulable_pods();
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].name, "low");
    }

    #[test]
    fn round_robin_spreads_consecutive_pods() {
        let mut c = Cluster::new(Vec::new());
        c.add_node(node("n1", 4000), None);
        c.add_node(node("n2", 4000), None);
        c.add_pod(pod("a", 100), Timestamp::from_secs(0), None);
        c.add_pod(pod("b", 100), Timestamp::from_secs(0), None);
        c.schedule(Timestamp::from_secs(0));
        let hosts: HashSet<_> = c
            .pods()
            .iter()
            .filter_map(|r| r.pod.node_name.clone())
            .collect();
        assert_eq!(hosts.len(), 2);
    }

    #[test]
    fn deleting_pods_frees_capacity_and_removing_a_node_requeues_its_pods() {
        let mut c = Cluster::new(Vec::new());
        c.add_node(node("n1", 1000), None);
        c.add_pod(pod("a", 1000), Timestamp::from_secs(0), None);
        let mut other = pod("b", 1000);
        other.labels.insert("app".into(), "db".into());
        c.add_pod(other, Timestamp::from_secs(1), None);
        c.schedule(Timestamp::from_secs(1));
        assert_eq!(c.pending_count(), 1);
        let deleted = c.delete_pods(
            &LabelSelector::from_labels([("app", "web")]),
            None,
            None,
            Timestamp::from_secs(2),
        );
        assert_eq!(deleted, 1);
        c.schedule(Timestamp::from_secs(2));
        assert_eq!(c.pending_count(), 0);
        assert_eq!(c.remove_node("n1", Timestamp::from_secs(3)), 1);
        assert_eq!(c.pending_count(), 1);
        assert_eq!(c.snapshot().node_count(), 0);
    }

    #[test]
    fn cordoned_nodes_take_no_new_pods() {
        let mut c = Cluster::new(Vec::new());
        c.add_node(node("n1", 4000), None);
        assert!(c.cordon("n1"));
        c.add_pod(pod("a", 100), Timestamp::from_secs(0), None);
        c.schedule(Timestamp::from_secs(0));
        assert_eq!(c.unschedulable_pods().len(), 1);
        assert!(c.uncordon("n1"));
        c.schedule(Timestamp::from_secs(1));
        assert_eq!(c.pending_count(), 0);
    }

    fn owned(name: &str, kind: &str) -> Pod {
        let mut p = pod(name, 100);
        p.owner_references.push(ferroscale_model::OwnerRef {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: "owner".into(),
            uid: "owner-uid".into(),
            controller: true,
        });
        p
    }

    fn pdb(
        min_available: Option<IntOrPercent>,
        max_unavailable: Option<IntOrPercent>,
    ) -> PodDisruptionBudget {
        PodDisruptionBudget {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(LabelSelector::from_labels([("app", "web")])),
            min_available,
            max_unavailable,
            ..PodDisruptionBudget::default()
        }
    }

    /// Four bound web pods owned by a ReplicaSet, on two nodes.
    fn four_web_pods(budget: PodDisruptionBudget) -> Cluster {
        let mut c = Cluster::new(Vec::new());
        c.set_pdbs(vec![budget]);
        c.add_node(node("n1", 4000), None);
        c.add_node(node("n2", 4000), None);
        for i in 0..4 {
            c.add_pod(
                owned(&format!("web-{i}"), "ReplicaSet"),
                Timestamp::from_secs(0),
                None,
            );
        }
        c.schedule(Timestamp::from_secs(0));
        assert_eq!(c.pending_count(), 0);
        c
    }

    #[test]
    fn disruptions_allowed_follow_min_available_and_max_unavailable() {
        let c = four_web_pods(pdb(Some(IntOrPercent::Int(3)), None));
        assert_eq!(c.pdbs_with_status()[0].disruptions_allowed, Some(1));
        let c = four_web_pods(pdb(Some(IntOrPercent::Percent(50)), None));
        assert_eq!(c.pdbs_with_status()[0].disruptions_allowed, Some(2));
        let c = four_web_pods(pdb(None, Some(IntOrPercent::Percent(10))));
        // 10 % of 4 rounds up to one pod.
        assert_eq!(c.pdbs_with_status()[0].disruptions_allowed, Some(1));
        let c = four_web_pods(pdb(None, Some(IntOrPercent::Int(0))));
        assert_eq!(c.pdbs_with_status()[0].disruptions_allowed, Some(0));
    }

    #[test]
    fn evictions_are_refused_once_the_budget_is_spent_and_allowed_again_when_pods_run() {
        let mut c = four_web_pods(pdb(None, Some(IntOrPercent::Int(1))));
        let now = Timestamp::from_secs(10);
        let first = c.evict("default", "web-0", now).unwrap();
        // The ReplicaSet re-creates the pod as a new pending pod.
        let replacement = first.replacement.clone().unwrap();
        assert_ne!(replacement, "default/web-0");
        assert_eq!(c.pending_count(), 1);
        // While the replacement is pending the budget is spent.
        assert!(matches!(
            c.evict("default", "web-1", now),
            Err(EvictionRefusal::DisruptionBudget { allowed: 0, .. })
        ));
        // Once it runs again, one more disruption is allowed.
        c.schedule(Timestamp::from_secs(11));
        assert_eq!(c.pending_count(), 0);
        assert!(
            c.evict("default", "web-1", Timestamp::from_secs(12))
                .is_ok()
        );
        assert_eq!(
            c.evict("default", "web-0", now),
            Err(EvictionRefusal::NotFound)
        );
        assert!(c.pods().iter().all(|r| !r.is_lost()));
    }

    #[test]
    fn evicted_pods_without_a_controller_are_lost_and_stateful_pods_keep_their_name() {
        let mut c = Cluster::new(Vec::new());
        c.add_node(node("n1", 4000), None);
        c.add_pod(pod("bare", 100), Timestamp::from_secs(0), None);
        let mut db = owned("db-0", "StatefulSet");
        db.labels.insert("app".into(), "db".into());
        c.add_pod(db, Timestamp::from_secs(0), None);
        c.schedule(Timestamp::from_secs(0));
        let bare = c.evict("default", "bare", Timestamp::from_secs(5)).unwrap();
        assert_eq!(bare.replacement, None);
        let db = c.evict("default", "db-0", Timestamp::from_secs(5)).unwrap();
        assert_eq!(db.replacement.as_deref(), Some("default/db-0"));
        let lost: Vec<_> = c.pods().iter().filter(|r| r.is_lost()).collect();
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].pod.name, "bare");
        assert!(
            c.live_pod("default", "db-0")
                .is_some_and(|r| r.is_pending())
        );
    }

    #[test]
    fn taints_keep_new_pods_away_until_removed() {
        let mut c = Cluster::new(Vec::new());
        c.add_node(node("n1", 4000), None);
        let taint = Taint::new(
            ferroscale_model::taints::TO_BE_DELETED,
            "0",
            ferroscale_model::TaintEffect::NoSchedule,
        );
        assert!(c.taint("n1", taint, true));
        assert!(c.node("n1").is_some_and(|n| n.node.unschedulable));
        c.add_pod(pod("a", 100), Timestamp::from_secs(0), None);
        c.schedule(Timestamp::from_secs(0));
        assert_eq!(c.unschedulable_pods().len(), 1);
        assert!(c.untaint("n1", ferroscale_model::taints::TO_BE_DELETED, true));
        c.schedule(Timestamp::from_secs(1));
        assert_eq!(c.pending_count(), 0);
        assert!(!c.taint(
            "nope",
            Taint::new("k", "v", ferroscale_model::TaintEffect::NoSchedule),
            false
        ));
    }

    /// The snapshot's nodes, in slot order, with their taint keys and cordon.
    fn snapshot_nodes(c: &mut Cluster) -> Vec<(String, Vec<String>, bool)> {
        c.snapshot_mut()
            .nodes()
            .map(|(_, info)| {
                let node = &info.node;
                let taints = node.taints.iter().map(|t| t.key.clone()).collect();
                (node.name.clone(), taints, node.unschedulable)
            })
            .collect()
    }

    /// Node writes reach the scheduler stand-in's snapshot later than the cluster's nodes, but
    /// the snapshot ends up as re-adding each node at every write would leave it: the same
    /// objects, the same pods, and the nodes in the same order (a written node moves to the end,
    /// which the stand-in's round-robin start depends on).
    #[test]
    fn node_writes_leave_the_snapshot_as_re_adding_each_node_would() {
        let mut c = Cluster::new(Vec::new());
        // The order re-adding at every write gives: a written node goes to the end.
        let mut expected: Vec<String> = Vec::new();
        let moved = |expected: &mut Vec<String>, name: &str| {
            expected.retain(|n| n != name);
            expected.push(name.to_string());
        };
        for i in 0..6 {
            c.add_node(node(&format!("n{i}"), 4000), None);
            expected.push(format!("n{i}"));
        }
        for i in 0..6 {
            let mut p = pod(&format!("p{i}"), 100);
            p.node_name = Some(ferroscale_model::format_compact!("n{i}"));
            c.add_pod(p, Timestamp::from_secs(0), None);
        }
        let taint = |key: &str| Taint::new(key, "v", ferroscale_model::TaintEffect::NoSchedule);
        assert!(c.taint("n1", taint("a"), true));
        moved(&mut expected, "n1");
        assert!(c.taint("n3", taint("a"), false));
        moved(&mut expected, "n3");
        assert!(c.taint("n1", taint("b"), false));
        moved(&mut expected, "n1");
        // The engine reads the written node at once, and its pods stay with it.
        assert!(
            c.node("n1")
                .is_some_and(|n| n.node.unschedulable && n.node.taints.len() == 2)
        );
        assert_eq!(
            c.snapshot()
                .node(c.node("n1").unwrap().id)
                .map(|i| i.pods.len()),
            Some(1)
        );
        // A node registering after the writes comes after the written nodes.
        c.add_node(node("n6", 4000), None);
        expected.push("n6".to_string());
        assert!(c.cordon("n0"));
        moved(&mut expected, "n0");
        assert!(c.untaint("n3", "a", false));
        moved(&mut expected, "n3");
        // A written node that leaves is not re-added.
        assert!(c.taint("n4", taint("a"), false));
        c.remove_node("n4", Timestamp::from_secs(1));
        expected.retain(|n| n != "n4");
        assert!(c.uncordon("n0"));
        moved(&mut expected, "n0");

        let nodes = snapshot_nodes(&mut c);
        let names: Vec<&str> = nodes.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, expected);
        for (name, taints, cordoned) in &nodes {
            let live = &c.node(name).unwrap().node;
            let live_taints: Vec<String> = live.taints.iter().map(|t| t.key.clone()).collect();
            assert_eq!(
                (taints, *cordoned),
                (&live_taints, live.unschedulable),
                "{name}"
            );
        }
        assert_eq!(c.snapshot().pod_count(), 5);
        for name in ["n0", "n1", "n2", "n3", "n5"] {
            let info = c.snapshot().node(c.node(name).unwrap().id).unwrap();
            assert_eq!(info.pods.len(), 1, "{name}");
        }
        // The next pass sees the cordon and the taints: a pod that tolerates nothing lands on a
        // node without either.
        c.add_pod(pod("new", 100), Timestamp::from_secs(2), None);
        c.schedule(Timestamp::from_secs(2));
        let placed = c
            .live_pod("default", "new")
            .and_then(|r| r.pod.node_name.clone());
        let placed = placed.expect("a free node takes the pod");
        assert!(
            ["n0", "n2", "n3", "n5", "n6"].contains(&placed.as_str()),
            "{placed}"
        );
    }

    #[test]
    fn daemonset_pods_start_on_matching_new_nodes() {
        let mut ds_pod = pod("agent", 100);
        ds_pod.owner_references.push(ferroscale_model::OwnerRef {
            api_version: "apps/v1".into(),
            kind: "DaemonSet".into(),
            name: "agent".into(),
            uid: "ds".into(),
            controller: true,
        });
        let ds = DaemonSet {
            namespace: "kube-system".into(),
            name: "agent".into(),
            pod_template: ds_pod,
            ..DaemonSet::default()
        };
        let mut c = Cluster::new(vec![ds]);
        c.add_node(node("n1", 1000), None);
        let info = c.snapshot().node(c.node("n1").unwrap().id).unwrap();
        assert_eq!(info.requested.cpu_milli, 100);
        assert!(c.pods().iter().all(|r| !r.is_workload()));
    }
}
