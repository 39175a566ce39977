//! The scale-down decision, stage by stage (see the module documentation of `scale_down`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::{CompactString, Node, Pod, Timestamp};
use ferroscale_scheduling::{NodeId, Snapshot};

use super::choose::{CapacityMargin, ChooseContext, Removable, choose_nodes_to_delete};
use super::drainability::{DrainRules, PdbTracker, PodDrain};
use super::eligibility::{
    Eligibility, GroupScaleDownOptions, check_eligibility_with, is_being_deleted, looks_empty,
};
use super::evictions::evict_daemonset_pod;
use super::measure_memo::{Kept, MeasureMemo};
use super::simulation::RemovalSimulator;
use super::soft_taints::plan_soft_taints;
use super::trackers::LatencyUpdate;
use super::{
    BlockingPod, ControllerIndex, DeletionsInProgress, PlannedMove, ScaleDownInput, ScaleDownPlan,
    ScaleDownState, ScaleDownStatus, UnneededNode, UnremovableNode, UnremovableReason, Utilization,
};
use crate::FastSet;
use crate::options::AutoscalingOptions;
use crate::parallel::Workers;
use crate::scale_up::{NodeGroupView, ProviderFacts, is_upcoming_node};

/// The pods the simulation placed in this loop, by address: the snapshot holds the same `Arc`s
/// for the whole search (a placed pod is added as the very `Arc` it was given), so no address
/// is reused while the set is read, and an address is a third of a uid in the table.
#[derive(Default)]
struct SimulatedPods(foldhash::HashSet<usize>);

impl SimulatedPods {
    fn address(pod: &Arc<Pod>) -> usize {
        Arc::as_ptr(pod) as usize
    }

    fn insert(&mut self, pod: &Arc<Pod>) {
        self.0.insert(Self::address(pod));
    }

    fn contains(&self, pod: &Arc<Pod>) -> bool {
        self.0.contains(&Self::address(pod))
    }
}

/// A node that passed eligibility and waits for its removal simulation.
struct Candidate {
    id: NodeId,
    node: Arc<Node>,
    group: usize,
    utilization: Utilization,
    empty: bool,
    was_unneeded: bool,
}

/// The loop's inputs every stage reads.
struct PlanContext<'a> {
    now: Timestamp,
    node_groups: &'a [NodeGroupView],
    deletions_in_progress: &'a DeletionsInProgress,
    state: &'a ScaleDownState,
    options: &'a AutoscalingOptions,
}

/// Decides this loop's scale-down. Pure: reads the input, leaves the snapshot unchanged, returns
/// the plan and the next state.
///
/// The stages, in order: the nodes and their groups, the pods of ongoing deletions put back,
/// candidates and eligibility, removal simulation (all on a branch of the snapshot that is
/// dropped afterwards), unneeded tracking, cooldown and the choice of nodes to delete (with the
/// capacity margin, computed when a node reaches the resource-limit check), soft taints, and the
/// optional measurements.
pub fn plan_scale_down(input: ScaleDownInput<'_>) -> ScaleDownPlan {
    let ScaleDownInput {
        now,
        snapshot,
        node_groups,
        node_group_of,
        pdbs,
        controllers,
        deletions_in_progress,
        state,
        options,
        provider,
        scale_down_disabled_this_loop,
        workers,
        measure_memo,
    } = input;
    let loop_interval = state.loop_interval(now, options.scan_interval);
    let mut next_state = state.clone();
    next_state.note_loop(now);
    if !options.scale_down_enabled {
        return ScaleDownPlan::empty(ScaleDownStatus::NotTried, next_state);
    }
    next_state.unremovable_until.retain(|_, until| *until > now);
    let mut plan = ScaleDownPlan::empty(ScaleDownStatus::NoCandidates, ScaleDownState::new());
    let ctx = PlanContext {
        now,
        node_groups,
        deletions_in_progress,
        state,
        options,
    };

    // Everything up to the `drop(branch)` below runs on a branch, which the drop reverts.
    let mut branch = snapshot.branch();
    let snapshot: &mut Snapshot = &mut branch;
    let cluster = ClusterNodes::of(snapshot, node_group_of, &ctx);
    let mut search = RemovalSearch::new(&cluster, pdbs, controllers, &ctx, loop_interval);
    search.place_recently_evicted(snapshot, deletions_in_progress, controllers);
    let candidates = find_candidates(
        snapshot,
        &cluster,
        &ctx,
        provider.gpu_label,
        workers,
        &mut plan,
        measure_memo,
    );
    let removables = search.run(snapshot, candidates, &ctx, &mut next_state, &mut plan);
    drop(branch);

    // Unneeded tracking (docs/behaviour.md SD-107): kept since-times, new ones start now, absent
    // ones are forgotten.
    next_state.unneeded_since = plan
        .unneeded
        .iter()
        .map(|u| (u.node.clone(), u.since))
        .collect();
    let in_cooldown = scale_down_disabled_this_loop
        || (!options.scale_down_delay_type_local && globally_in_cooldown(state, now, options));
    choose_deletions(&mut plan, in_cooldown, removables, &cluster, &ctx, provider);
    plan_soft_taints_of(&mut plan, &cluster, options);
    measure(&mut plan, &mut next_state, node_groups, options, now);
    plan.next_state = next_state;
    plan
}

/// The snapshot's nodes, the node group of each, and the nodes no pod may move to.
struct ClusterNodes {
    nodes: Vec<(NodeId, Arc<Node>)>,
    /// Per snapshot slot (`NodeId::index`), the index into the plan's node groups of a node of
    /// a group: read once or twice per node and loop, so a slot table, not a hashed map.
    group_of: Vec<Option<usize>>,
    registered_per_group: Vec<usize>,
    /// Upcoming nodes and nodes being deleted: no destination, no candidate, no capacity.
    not_destinations: FastSet<NodeId>,
    /// Per snapshot slot, whether the node there is upcoming or being deleted by the autoscaler
    /// (docs/behaviour.md SD-103): never a candidate. Read twice per node and loop, so decided
    /// once, here, where each node is read anyway.
    not_candidates: Vec<bool>,
}

impl ClusterNodes {
    fn of(
        snapshot: &Snapshot,
        node_group_of: &dyn Fn(&Node) -> Option<usize>,
        ctx: &PlanContext<'_>,
    ) -> ClusterNodes {
        let nodes: Vec<(NodeId, Arc<Node>)> = snapshot
            .nodes()
            .map(|(id, info)| (id, info.node.clone()))
            .collect();
        let mut group_of = vec![None; snapshot.slot_count()];
        let mut registered_per_group = vec![0usize; ctx.node_groups.len()];
        let mut not_destinations = FastSet::default();
        let mut not_candidates = vec![false; snapshot.slot_count()];
        for (id, node) in &nodes {
            if let Some(g) = node_group_of(node).filter(|g| *g < ctx.node_groups.len()) {
                if let Some(slot) = group_of.get_mut(id.index()) {
                    *slot = Some(g);
                }
                if let Some(count) = registered_per_group.get_mut(g) {
                    *count += 1;
                }
            }
            let not_candidate = not_a_candidate(node, ctx.deletions_in_progress);
            if let Some(slot) = not_candidates.get_mut(id.index()) {
                *slot = not_candidate;
            }
            if not_candidate || is_being_deleted(node, ctx.now) {
                not_destinations.insert(*id);
            }
        }
        ClusterNodes {
            nodes,
            group_of,
            registered_per_group,
            not_destinations,
            not_candidates,
        }
    }

    /// Whether the node in slot `id` is upcoming or being deleted: never a candidate.
    fn not_a_candidate(&self, id: NodeId) -> bool {
        self.not_candidates.get(id.index()).copied().unwrap_or(true)
    }

    /// The index into the plan's node groups of the node in slot `id`, when it is in a group.
    fn group_of(&self, id: NodeId) -> Option<usize> {
        self.group_of.get(id.index()).copied().flatten()
    }

    /// The room the resource limits leave below their minimums (docs/behaviour.md SD-83), over
    /// the nodes that count as capacity.
    fn capacity_margin(
        &self,
        options: &AutoscalingOptions,
        provider: &ProviderFacts<'_>,
    ) -> CapacityMargin {
        CapacityMargin::new(
            self.nodes
                .iter()
                .filter(|(id, node)| {
                    !self.not_destinations.contains(id) && !is_virtual_kubelet(node)
                })
                .map(|(_, node)| node.as_ref()),
            options,
            provider,
        )
    }
}

/// Upcoming nodes and nodes being deleted are never candidates.
fn not_a_candidate(node: &Node, deletions_in_progress: &DeletionsInProgress) -> bool {
    is_upcoming_node(node) || deletions_in_progress.contains(&node.name)
}

/// Each node's eligibility and whether it looks empty; `None` for a node that is no candidate or
/// whose group is at its minimum size or in local cooldown. A node's eligibility reads that node
/// only, so the nodes are checked in parallel; the verdicts come in node order
/// (docs/behaviour.md SU-112). Measurements go through `memo`, when there is one, which is left
/// holding this loop's.
fn eligibility_verdicts(
    snapshot: &Snapshot,
    cluster: &ClusterNodes,
    ctx: &PlanContext<'_>,
    in_local_cooldown: &HashSet<&str>,
    gpu_label: &str,
    workers: &Workers,
    memo: Option<&mut MeasureMemo>,
) -> Vec<Option<(Eligibility, bool)>> {
    let (now, options) = (ctx.now, ctx.options);
    let cutoff = options.expendable_pods_priority_cutoff;
    let kept = memo.as_deref();
    let checked = workers.map(&cluster.nodes, |(id, node)| {
        if cluster.not_a_candidate(*id) {
            return (None, Kept::Nothing);
        }
        let group = cluster.group_of(*id).and_then(|g| ctx.node_groups.get(g));
        if group.is_some_and(|g| {
            g.target_size <= g.min_size || in_local_cooldown.contains(g.id.as_str())
        }) {
            return (None, Kept::Nothing);
        }
        let Some(info) = snapshot.node(*id) else {
            return (None, Kept::Nothing);
        };
        let device_pools = snapshot.device_pools(*id);
        let mut known_empty = None;
        let mut to_keep = Kept::Nothing;
        let eligibility = check_eligibility_with(node, group, now, options, gpu_label, |rules| {
            let measured = MeasureMemo::measure(
                kept,
                id.index(),
                &info.node,
                &info.pods,
                &device_pools,
                rules,
            );
            known_empty = measured.empty;
            to_keep = measured.kept;
            measured.measure
        });
        // Only an eligible node's emptiness is read (it orders the candidates).
        let empty = match eligibility {
            Eligibility::Eligible(_) => {
                known_empty.unwrap_or_else(|| looks_empty(&info.pods, now, cutoff))
            }
            Eligibility::Unremovable(..) => false,
        };
        (Some((eligibility, empty)), to_keep)
    });
    let (verdicts, to_keep): (Vec<_>, Vec<_>) = checked.into_iter().unzip();
    if let Some(memo) = memo {
        memo.keep_only(cluster.nodes.iter().map(|(id, _)| id.index()).zip(to_keep));
    }
    verdicts
}

/// Candidates (docs/behaviour.md SD-103) and eligibility (SD-50–SD-63): the nodes whose removal
/// is simulated, empty ones first, then the ones unneeded last loop, then the rest. The nodes
/// that cannot go are listed in the plan's unremovable nodes.
fn find_candidates(
    snapshot: &Snapshot,
    cluster: &ClusterNodes,
    ctx: &PlanContext<'_>,
    gpu_label: &str,
    workers: &Workers,
    plan: &mut ScaleDownPlan,
    memo: Option<&mut MeasureMemo>,
) -> Vec<Candidate> {
    let PlanContext {
        now,
        node_groups,
        deletions_in_progress: _,
        state,
        options,
    } = *ctx;
    let in_local_cooldown = groups_in_local_cooldown(node_groups, state, now, options);
    let verdicts = eligibility_verdicts(
        snapshot,
        cluster,
        ctx,
        &in_local_cooldown,
        gpu_label,
        workers,
        memo,
    );
    let mut candidates: Vec<Candidate> = Vec::new();
    // Most nodes of a busy cluster are unremovable: room for all of them at once, rather than
    // moving the list as it doubles.
    plan.unremovable.reserve(cluster.nodes.len());
    for ((id, node), verdict) in cluster.nodes.iter().zip(verdicts) {
        if cluster.not_a_candidate(*id) || snapshot.node(*id).is_none() {
            continue;
        }
        let group_index = cluster.group_of(*id);
        let group = group_index.and_then(|g| node_groups.get(g));
        let unremovable = |reason, utilization| UnremovableNode {
            node: node.name.as_str().into(),
            group_id: group.map(|g| g.id.as_str().into()),
            reason,
            blocking_pod: None,
            pod: None,
            utilization,
        };
        if let Some(group) = group {
            if group.target_size <= group.min_size {
                let reason = UnremovableReason::NodeGroupMinSizeReached;
                plan.unremovable.push(unremovable(reason, None));
                continue;
            }
            if in_local_cooldown.contains(group.id.as_str()) {
                continue;
            }
        }
        // Every node that got this far was checked above.
        match verdict {
            None => {}
            Some((Eligibility::Unremovable(reason, utilization), _)) => {
                plan.unremovable.push(unremovable(reason, utilization));
            }
            Some((Eligibility::Eligible(utilization), empty)) => {
                let Some(group) = group_index else { continue };
                candidates.push(Candidate {
                    id: *id,
                    node: node.clone(),
                    group,
                    utilization,
                    empty,
                    was_unneeded: state.is_unneeded(&node.name),
                });
            }
        }
    }
    candidates.sort_by_key(|c| (!c.empty, !c.was_unneeded));
    candidates
}

/// A candidate's pods, sorted by what its removal does with them.
#[derive(Default)]
struct PodsOnNode {
    /// Pods that must find a place elsewhere.
    movable: Vec<Arc<Pod>>,
    daemonset_pods: Vec<Arc<Pod>>,
    /// The first pod whose completion the removal waits for.
    on_completion_pod: Option<String>,
}

/// Sorts the pods of a node by the drainability rules; `Err` names the first pod that blocks
/// the node's removal.
fn classify_pods(
    pods: &[Arc<Pod>],
    rules: &DrainRules<'_>,
    pdb_tracker: &PdbTracker,
    options: &AutoscalingOptions,
) -> Result<PodsOnNode, BlockingPod> {
    let mut sorted = PodsOnNode::default();
    for pod in pods {
        if pod.is_expendable(options.expendable_pods_priority_cutoff) {
            continue;
        }
        match rules.classify(pod, pdb_tracker) {
            PodDrain::Skip => {}
            PodDrain::DaemonSet => sorted.daemonset_pods.push(pod.clone()),
            PodDrain::Move => sorted.movable.push(pod.clone()),
            PodDrain::WaitForCompletion => {
                sorted.on_completion_pod.get_or_insert_with(|| pod.key());
            }
            PodDrain::Block(rule) => {
                return Err(BlockingPod {
                    pod: pod.key(),
                    rule,
                });
            }
        }
    }
    Ok(sorted)
}

/// Removal simulation (docs/behaviour.md SD-104), until the search-stop rule (SD-105) or the
/// non-empty candidate limits (SD-116) say enough: what it has placed so far and the budgets it
/// counts down.
struct RemovalSearch<'a> {
    simulator: RemovalSimulator,
    /// Pods placed by the simulation rather than really running where the snapshot shows them:
    /// they are never evicted from the node they were simulated onto. Every pod to move is
    /// looked up, hence the fast (seeded) hasher.
    simulated_pods: SimulatedPods,
    rules: DrainRules<'a>,
    pdb_tracker: PdbTracker<'a>,
    non_empty_limit: NonEmptyCandidateLimit,
    search_limit: usize,
    /// Unneeded nodes found, zero-or-max ones not counted.
    found: usize,
}

impl<'a> RemovalSearch<'a> {
    fn new(
        cluster: &ClusterNodes,
        pdbs: &'a [ferroscale_model::PodDisruptionBudget],
        controllers: &'a ControllerIndex,
        ctx: &PlanContext<'_>,
        loop_interval: Duration,
    ) -> RemovalSearch<'a> {
        let (now, options) = (ctx.now, ctx.options);
        RemovalSearch {
            simulator: RemovalSimulator::new(now, cluster.not_destinations.clone()),
            simulated_pods: SimulatedPods::default(),
            rules: DrainRules::from_options(now, controllers, options),
            pdb_tracker: PdbTracker::new(pdbs),
            non_empty_limit: NonEmptyCandidateLimit::new(options, cluster.nodes.len()),
            search_limit: search_limit(ctx.state.unneeded_count(), options, loop_interval),
            found: 0,
        }
    }

    /// Simulates the candidates' removals in order: the removable ones, and in the plan the
    /// unneeded, unremovable and skipped nodes.
    fn run(
        &mut self,
        snapshot: &mut Snapshot,
        candidates: Vec<Candidate>,
        ctx: &PlanContext<'_>,
        next_state: &mut ScaleDownState,
        plan: &mut ScaleDownPlan,
    ) -> Vec<Removable> {
        let mut removables = Vec::new();
        let mut candidates = candidates.into_iter();
        while let Some(candidate) = candidates.next() {
            if self.found >= self.search_limit {
                plan.skipped.push(candidate.node.name.clone());
                plan.skipped.extend(candidates.map(|c| c.node.name.clone()));
                break;
            }
            if next_state
                .unremovable_until
                .contains_key(&candidate.node.name)
            {
                let reason = UnremovableReason::RecentlyUnremovable;
                plan.unremovable
                    .push(unremovable(&candidate, ctx, reason, None, None));
                continue;
            }
            if !self.non_empty_limit.admits(&candidate) {
                // Candidates come sorted, so every one left is an additional non-empty
                // candidate too.
                plan.skipped.push(candidate.node.name.clone());
                plan.skipped.extend(candidates.map(|c| c.node.name.clone()));
                break;
            }
            if let Some(removable) = self.simulate(snapshot, &candidate, ctx, next_state, plan) {
                removables.push(removable);
            }
        }
        removables
    }

    /// One candidate: its pods sorted, then their moves simulated. A node whose pods block it or
    /// cannot move waits out `--unremovable-node-recheck-timeout`.
    fn simulate(
        &mut self,
        snapshot: &mut Snapshot,
        candidate: &Candidate,
        ctx: &PlanContext<'_>,
        next_state: &mut ScaleDownState,
        plan: &mut ScaleDownPlan,
    ) -> Option<Removable> {
        let (now, options) = (ctx.now, ctx.options);
        let info = snapshot.node(candidate.id)?;
        let recheck_at = now + options.unremovable_node_recheck_timeout;
        let pods = match classify_pods(&info.pods, &self.rules, &self.pdb_tracker, options) {
            Ok(pods) => pods,
            Err(blocking) => {
                let reason = UnremovableReason::BlockedByPod;
                plan.unremovable
                    .push(unremovable(candidate, ctx, reason, Some(blocking), None));
                next_state
                    .unremovable_until
                    .insert(candidate.node.name.clone(), recheck_at);
                return None;
            }
        };
        let risky = !self
            .pdb_tracker
            .fits_together(pods.movable.iter().map(Arc::as_ref));
        let moves = match self
            .simulator
            .remove_node(snapshot, candidate.id, &pods.movable)
        {
            Ok(moves) => moves,
            Err(pod) => {
                let reason = UnremovableReason::NoPlaceToMovePods;
                plan.unremovable
                    .push(unremovable(candidate, ctx, reason, None, Some(pod.key())));
                next_state
                    .unremovable_until
                    .insert(candidate.node.name.clone(), recheck_at);
                return None;
            }
        };
        Some(self.removable(candidate, ctx, pods, risky, moves, plan))
    }

    /// A candidate whose removal the simulation allowed: counted, listed as unneeded, and
    /// returned with the pods to evict and where they go.
    fn removable(
        &mut self,
        candidate: &Candidate,
        ctx: &PlanContext<'_>,
        pods: PodsOnNode,
        risky: bool,
        moves: Vec<PlannedMove>,
        plan: &mut ScaleDownPlan,
    ) -> Removable {
        let (now, options) = (ctx.now, ctx.options);
        let PodsOnNode {
            movable,
            daemonset_pods,
            on_completion_pod,
        } = pods;
        let group = ctx.node_groups.get(candidate.group);
        // Pods that really run on the node (not simulated arrivals) are the ones to evict.
        let pods_to_evict: Vec<Arc<Pod>> = movable
            .iter()
            .filter(|p| !self.simulated_pods.contains(p))
            .cloned()
            .collect();
        self.pdb_tracker.consume(movable.iter().map(Arc::as_ref));
        for planned in &moves {
            self.simulated_pods.insert(&planned.pod);
        }
        let empty = movable.is_empty();
        let since = ctx
            .state
            .unneeded_since
            .get(&candidate.node.name)
            .copied()
            .unwrap_or(now);
        if !group.is_some_and(|g| g.zero_or_max()) {
            self.found += 1;
        }
        self.non_empty_limit.found(candidate);
        plan.unneeded.push(UnneededNode {
            node: candidate.node.name.clone(),
            group_id: group.map(|g| g.id.clone()).unwrap_or_default(),
            since,
            utilization: candidate.utilization,
            empty,
            ready: candidate.node.is_ready(),
            risky,
        });
        let ds_flag = if empty {
            options.daemonset_eviction_for_empty_nodes
        } else {
            options.daemonset_eviction_for_occupied_nodes
        };
        Removable {
            node: candidate.node.clone(),
            group: candidate.group,
            since,
            utilization: candidate.utilization,
            empty,
            risky,
            on_completion_pod,
            pods_to_evict: if empty { Vec::new() } else { pods_to_evict },
            moves,
            daemonset_pods: daemonset_pods
                .into_iter()
                .filter(|p| evict_daemonset_pod(p, ds_flag))
                .collect(),
        }
    }

    /// 3.4: pods that ongoing deletions evicted and their controllers have not re-created yet
    /// take their room before any removal is simulated. Known owners get at most desired −
    /// current pods back; pods of unknown owners always.
    fn place_recently_evicted(
        &mut self,
        snapshot: &mut Snapshot,
        deletions: &DeletionsInProgress,
        controllers: &ControllerIndex,
    ) {
        let mut placed_per_owner: HashMap<(String, CompactString, String), i32> = HashMap::new();
        for pod in &deletions.recently_evicted {
            if let Some(owner) = pod.controller()
                && matches!(
                    owner.kind.as_str(),
                    "StatefulSet" | "Job" | "ReplicaSet" | "ReplicationController"
                )
                && let Some(replicas) = controllers.get(&owner.kind, &pod.namespace, &owner.name)
            {
                let key = (
                    owner.kind.clone(),
                    pod.namespace.clone(),
                    owner.name.clone(),
                );
                let placed = placed_per_owner.entry(key).or_default();
                if *placed >= replicas.desired - replicas.current {
                    continue;
                }
                *placed += 1;
            }
            if self.simulator.place(snapshot, pod).is_some() {
                self.simulated_pods.insert(pod);
            }
        }
    }
}

/// A candidate that cannot go, and why.
fn unremovable(
    candidate: &Candidate,
    ctx: &PlanContext<'_>,
    reason: UnremovableReason,
    blocking_pod: Option<BlockingPod>,
    pod: Option<String>,
) -> UnremovableNode {
    UnremovableNode {
        node: candidate.node.name.as_str().into(),
        group_id: ctx
            .node_groups
            .get(candidate.group)
            .map(|g| g.id.as_str().into()),
        reason,
        blocking_pod,
        pod,
        utilization: Some(candidate.utilization),
    }
}

/// Cooldown (docs/behaviour.md SD-58, SD-101) and the choice of nodes to delete (SD-108, SD-82,
/// SD-83): the plan's status and its nodes to delete.
fn choose_deletions(
    plan: &mut ScaleDownPlan,
    in_cooldown: bool,
    removables: Vec<Removable>,
    cluster: &ClusterNodes,
    ctx: &PlanContext<'_>,
    provider: &ProviderFacts<'_>,
) {
    plan.in_cooldown = in_cooldown;
    plan.status = if plan.unneeded.is_empty() {
        ScaleDownStatus::NoCandidates
    } else if plan.in_cooldown {
        ScaleDownStatus::InCooldown
    } else {
        let chosen = choose_nodes_to_delete(
            removables,
            ChooseContext {
                now: ctx.now,
                options: ctx.options,
                groups: ctx.node_groups,
                deletions: ctx.deletions_in_progress,
                margin: &|| cluster.capacity_margin(ctx.options, provider),
                registered_per_group: &cluster.registered_per_group,
                gpu_label: provider.gpu_label,
            },
        );
        plan.empty_to_delete = chosen.empty;
        plan.drain_to_delete = chosen.drain;
        plan.held_back = chosen.held_back;
        if !plan.empty_to_delete.is_empty() || !plan.drain_to_delete.is_empty() {
            ScaleDownStatus::NodeDeleteStarted
        } else if chosen.budget_exhausted {
            ScaleDownStatus::InProgress
        } else {
            ScaleDownStatus::NoNodeDeleted
        }
    };
    if plan.in_cooldown && plan.status == ScaleDownStatus::NoCandidates {
        plan.status = ScaleDownStatus::InCooldown;
    }
}

/// Soft taints (docs/behaviour.md SD-90), whatever the status.
fn plan_soft_taints_of(
    plan: &mut ScaleDownPlan,
    cluster: &ClusterNodes,
    options: &AutoscalingOptions,
) {
    let unneeded: FastSet<&str> = plan.unneeded.iter().map(|u| u.node.as_str()).collect();
    let deleting: FastSet<&str> = plan.nodes_to_delete().map(|r| r.node.as_str()).collect();
    let soft = plan_soft_taints(
        cluster
            .nodes
            .iter()
            .map(|(id, node)| (node.as_ref(), cluster.group_of(*id).is_some())),
        &unneeded,
        &deleting,
        options.max_bulk_soft_taint_count,
    );
    plan.soft_taints_to_add = soft.add;
    plan.soft_taints_to_remove = soft.remove;
}

/// The optional measurements (docs/behaviour.md OBS-120, OBS-121).
fn measure(
    plan: &mut ScaleDownPlan,
    next_state: &mut ScaleDownState,
    node_groups: &[NodeGroupView],
    options: &AutoscalingOptions,
    now: Timestamp,
) {
    if options.max_node_skip_eval_time_tracker_enabled {
        plan.max_node_skip_eval = Some(next_state.skip_eval.update(&plan.skipped, now));
    }
    if options.node_removal_latency_tracking_enabled {
        plan.removal_latencies =
            next_state
                .removal_latency
                .update(latency_update(plan, node_groups, options, now));
    }
}

/// What the removal-latency tracker needs from a finished plan.
fn latency_update<'p>(
    plan: &'p ScaleDownPlan,
    node_groups: &[NodeGroupView],
    options: &AutoscalingOptions,
    now: Timestamp,
) -> LatencyUpdate<'p> {
    let unneeded = plan
        .unneeded
        .iter()
        .map(|u| {
            let group = node_groups.iter().find(|g| g.id == u.group_id);
            let group_options = GroupScaleDownOptions::of(group, options);
            let threshold = if u.ready {
                group_options.unneeded_time
            } else {
                group_options.unready_time
            };
            (u.node.as_str(), threshold)
        })
        .collect();
    let reasons = plan
        .held_back
        .iter()
        .chain(&plan.unremovable)
        .map(|u| (u.node.as_str(), u.reason))
        .collect();
    let deleted = plan.nodes_to_delete().map(|r| r.node.as_str()).collect();
    LatencyUpdate {
        now,
        unneeded,
        reasons,
        deleted,
    }
}

/// docs/behaviour.md SD-116, `--scale-down-non-empty-candidates-count`,
/// `--scale-down-candidates-pool-ratio`, `--scale-down-candidates-pool-min-count`: every
/// candidate that looks empty and every non-empty one unneeded in the previous loop is simulated;
/// the other non-empty candidates are simulated only while fewer than `count` non-empty nodes
/// were found, and only the first max(ceil(ratio × nodes), min-count) of them. A count of zero or
/// less lifts the limit.
struct NonEmptyCandidateLimit {
    /// `None`: no limit.
    count: Option<usize>,
    pool: usize,
    found_previous: usize,
    found_additional: usize,
    seen_additional: usize,
}

impl NonEmptyCandidateLimit {
    fn new(options: &AutoscalingOptions, node_count: usize) -> NonEmptyCandidateLimit {
        let count = usize::try_from(options.scale_down_non_empty_candidates_count)
            .ok()
            .filter(|count| *count > 0);
        // The ratio is finite and non-negative (`set` refuses anything else); the cast saturates.
        let by_ratio =
            (node_count as f64 * options.scale_down_candidates_pool_ratio).ceil() as usize;
        let min = usize::try_from(options.scale_down_candidates_pool_min_count).unwrap_or(0);
        NonEmptyCandidateLimit {
            count,
            pool: by_ratio.max(min),
            found_previous: 0,
            found_additional: 0,
            seen_additional: 0,
        }
    }

    /// Whether `candidate` is simulated; `false` once the additional candidates are exhausted.
    fn admits(&mut self, candidate: &Candidate) -> bool {
        let Some(count) = self.count else {
            return true;
        };
        if candidate.empty || candidate.was_unneeded {
            return true;
        }
        let additional = count.saturating_sub(self.found_previous);
        if self.found_additional >= additional || self.seen_additional >= self.pool {
            return false;
        }
        self.seen_additional += 1;
        true
    }

    /// `candidate`'s removal simulation succeeded.
    fn found(&mut self, candidate: &Candidate) {
        if candidate.empty {
            return;
        }
        if candidate.was_unneeded {
            self.found_previous += 1;
        } else {
            self.found_additional += 1;
        }
    }
}

fn is_virtual_kubelet(node: &Node) -> bool {
    node.label("type") == Some("virtual-kubelet")
}

/// Whether `last + delay` is still in the future.
fn within(last: Option<Timestamp>, delay: Duration, now: Timestamp) -> bool {
    last.is_some_and(|last| now < last + delay)
}

/// docs/behaviour.md SD-58, SD-101, global mode: a recent scale-up, failure or deletion start
/// suspends deletions.
fn globally_in_cooldown(
    state: &ScaleDownState,
    now: Timestamp,
    options: &AutoscalingOptions,
) -> bool {
    within(state.last_scale_up, options.scale_down_delay_after_add, now)
        || within(
            state.last_failure,
            options.scale_down_delay_after_failure,
            now,
        )
        || within(
            state.last_deletion_start,
            options.scale_down_delay_after_delete,
            now,
        )
}

/// docs/behaviour.md SD-102, `--scale-down-delay-type-local`: groups whose nodes are not candidates
/// this loop.
fn groups_in_local_cooldown<'g>(
    groups: &'g [NodeGroupView],
    state: &ScaleDownState,
    now: Timestamp,
    options: &AutoscalingOptions,
) -> HashSet<&'g str> {
    if !options.scale_down_delay_type_local {
        return HashSet::new();
    }
    groups
        .iter()
        .filter(|g| {
            within(
                state.group_last_scale_up.get(&g.id).copied(),
                options.scale_down_delay_after_add,
                now,
            ) || within(
                state.group_last_failure.get(&g.id).copied(),
                options.scale_down_delay_after_failure,
                now,
            ) || within(
                state.group_last_deletion_start.get(&g.id).copied(),
                options.scale_down_delay_after_delete,
                now,
            )
        })
        .map(|g| g.id.as_str())
        .collect()
}

/// 3.4 search-stop rule: stop once this many unneeded nodes (zero-or-max nodes not counted) were
/// found: min(previous unneeded + 2P, P × max(1, U / I) + P).
fn search_limit(
    previous_unneeded: usize,
    options: &AutoscalingOptions,
    interval: Duration,
) -> usize {
    let p = options.max_scale_down_parallelism;
    let ratio = if interval.is_zero() {
        1
    } else {
        usize::try_from(options.scale_down_unneeded_time.as_nanos() / interval.as_nanos())
            .unwrap_or(usize::MAX)
    };
    let by_time = p.saturating_mul(ratio.max(1)).saturating_add(p);
    previous_unneeded
        .saturating_add(p.saturating_mul(2))
        .min(by_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks docs/behaviour.md SD-105.
    #[test]
    fn search_limit_follows_the_documented_formula() {
        let options = AutoscalingOptions::default(); // P = 10, U = 10 m
        let ten_s = Duration::from_secs(10);
        // Fresh start: 0 + 2P.
        assert_eq!(search_limit(0, &options, ten_s), 20);
        // Many unneeded: capped by P × U/I + P = 10 × 60 + 10.
        assert_eq!(search_limit(1000, &options, ten_s), 610);
        // Loops slower than the unneeded time: P × 1 + P.
        assert_eq!(search_limit(1000, &options, Duration::from_secs(3600)), 20);
    }
}
