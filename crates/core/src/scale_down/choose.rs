//! Choosing the nodes to delete among the unneeded ones (docs/behaviour.md SD-108) and cropping
//! them to the parallelism budgets (docs/behaviour.md SD-82, SD-83).
//!
//! Checks per node, in order: the scale-down-disabled annotation, unneeded long enough (strictly
//! longer than the Ready or unready threshold), the group's min size counting deletions in
//! progress and nodes already chosen, the cluster's resource minimums across the whole batch,
//! zero-or-max groups going as a whole, and on-completion pods still running.

use std::cell::LazyCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use ferroscale_model::resources::NVIDIA_GPU;
use ferroscale_model::{Node, Pod, Timestamp};

use super::eligibility::{GroupScaleDownOptions, scale_down_disabled_by_annotation};
use super::{
    DeletionsInProgress, NodeRemoval, PlannedMove, UnremovableNode, UnremovableReason, Utilization,
};
use crate::options::AutoscalingOptions;
use crate::scale_up::{NodeGroupView, ProviderFacts};

/// An unneeded node with everything its deletion needs.
#[derive(Debug, Clone)]
pub(super) struct Removable {
    pub node: Arc<Node>,
    pub group: usize,
    pub since: Timestamp,
    pub utilization: Utilization,
    pub empty: bool,
    pub risky: bool,
    /// A running `safe-to-evict: on-completion` pod (`namespace/name`).
    pub on_completion_pod: Option<String>,
    pub pods_to_evict: Vec<Arc<Pod>>,
    pub moves: Vec<PlannedMove>,
    pub daemonset_pods: Vec<Arc<Pod>>,
}

impl Removable {
    fn into_removal(self, group_id: &str) -> NodeRemoval {
        NodeRemoval {
            node: self.node.name.clone(),
            group_id: group_id.to_string(),
            utilization: self.utilization,
            ready: self.node.is_ready(),
            pods_to_evict: self.pods_to_evict,
            moves: self.moves,
            daemonset_pods_to_evict: self.daemonset_pods,
        }
    }
}

/// What one node adds to the cluster's capacity: cores rounded up, memory bytes, GPUs by type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct NodeCapacity {
    pub cores: i64,
    pub memory: i64,
    pub gpu: Option<(String, i64)>,
}

impl NodeCapacity {
    pub fn of(node: &Node, gpu_label: &str) -> NodeCapacity {
        let gpu = (!gpu_label.is_empty())
            .then(|| node.labels.get(gpu_label))
            .flatten()
            .map(|gpu_type| (gpu_type.clone(), node.allocatable.get(NVIDIA_GPU)))
            .filter(|(_, count)| *count > 0);
        NodeCapacity {
            cores: (node.capacity.cpu_milli.max(0) + 999) / 1000,
            memory: node.capacity.memory,
            gpu,
        }
    }
}

/// Cluster capacity above the resource minimums (`--cores-total`, `--memory-total`, `--gpu-total`
/// minima, or the provider's limits). Removals are accepted while every margin stays ≥ 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CapacityMargin {
    cores: i64,
    memory: i64,
    /// `(gpu type, margin)` for types with a minimum.
    gpus: Vec<(String, i64)>,
}

impl CapacityMargin {
    /// `nodes` are the nodes that count towards cluster capacity (being-deleted ones excluded).
    pub fn new<'n>(
        nodes: impl IntoIterator<Item = &'n Node>,
        options: &AutoscalingOptions,
        provider: &ProviderFacts<'_>,
    ) -> CapacityMargin {
        let (min_cores, min_memory, gpu_minimums): (i64, i64, Vec<(String, i64)>) =
            match provider.resource_limits {
                Some(limits) => (
                    limits.min("cpu"),
                    limits.min("memory"),
                    limits
                        .min
                        .iter()
                        .filter(|(name, _)| name != "cpu" && name != "memory")
                        .cloned()
                        .collect(),
                ),
                None => (
                    options.cores_total.min,
                    options.memory_total_bytes().min,
                    options
                        .gpu_total
                        .iter()
                        .map(|g| (g.gpu_type.clone(), g.min))
                        .collect(),
                ),
            };
        let mut margin = CapacityMargin {
            cores: -min_cores,
            memory: -min_memory,
            gpus: gpu_minimums.into_iter().map(|(t, min)| (t, -min)).collect(),
        };
        for node in nodes {
            let c = NodeCapacity::of(node, provider.gpu_label);
            margin.cores = margin.cores.saturating_add(c.cores);
            margin.memory = margin.memory.saturating_add(c.memory);
            if let Some((gpu_type, count)) = c.gpu
                && let Some(entry) = margin.gpus.iter_mut().find(|(t, _)| *t == gpu_type)
            {
                entry.1 = entry.1.saturating_add(count);
            }
        }
        margin
    }

    /// Whether removing these nodes keeps every margin ≥ 0.
    fn allows(&self, removed: &[NodeCapacity]) -> bool {
        let mut after = self.clone();
        after.subtract(removed);
        after.cores >= 0 && after.memory >= 0 && after.gpus.iter().all(|(_, m)| *m >= 0)
    }

    fn subtract(&mut self, removed: &[NodeCapacity]) {
        for c in removed {
            self.cores = self.cores.saturating_sub(c.cores);
            self.memory = self.memory.saturating_sub(c.memory);
            if let Some((gpu_type, count)) = &c.gpu
                && let Some(entry) = self.gpus.iter_mut().find(|(t, _)| t == gpu_type)
            {
                entry.1 = entry.1.saturating_sub(*count);
            }
        }
    }
}

/// What [`choose_nodes_to_delete`] reads besides the unneeded nodes.
pub(super) struct ChooseContext<'a> {
    pub now: Timestamp,
    pub options: &'a AutoscalingOptions,
    pub groups: &'a [NodeGroupView],
    pub deletions: &'a DeletionsInProgress,
    /// The capacity margin, computed (a pass over every node) only when a node gets as far as
    /// the resource-limit check: most loops delete nothing.
    pub margin: &'a dyn Fn() -> CapacityMargin,
    /// Registered nodes per group (same indexes as `groups`), for zero-or-max groups.
    pub registered_per_group: &'a [usize],
    pub gpu_label: &'a str,
}

/// The nodes to delete this loop and the unneeded nodes held back.
#[derive(Debug, Default)]
pub(super) struct Chosen {
    pub empty: Vec<NodeRemoval>,
    pub drain: Vec<NodeRemoval>,
    pub held_back: Vec<UnremovableNode>,
    /// Nodes passed every check but the budgets left no room for any of them.
    pub budget_exhausted: bool,
}

fn held(r: &Removable, group_id: &str, reason: UnremovableReason) -> UnremovableNode {
    UnremovableNode {
        node: r.node.name.as_str().into(),
        group_id: Some(group_id.into()),
        reason,
        blocking_pod: None,
        pod: (reason == UnremovableReason::BlockedByOnCompletionPod)
            .then(|| r.on_completion_pod.clone())
            .flatten(),
        utilization: Some(r.utilization),
    }
}

/// A removable node as the choice handles it: with its position in the removal search's list, by
/// which the nodes taken are then moved out of the list (their pods and moves not copied).
#[derive(Clone, Copy)]
struct Ranked<'r> {
    at: usize,
    removable: &'r Removable,
}

impl std::ops::Deref for Ranked<'_> {
    type Target = Removable;

    fn deref(&self) -> &Removable {
        self.removable
    }
}

/// Runs 3.6 over the unneeded nodes (empty first, then non-risky drains, then risky drains) and
/// crops the result to the 3.7 budgets.
pub(super) fn choose_nodes_to_delete(removables: Vec<Removable>, ctx: ChooseContext<'_>) -> Chosen {
    use UnremovableReason as R;
    let mut chosen = Chosen::default();
    let mut order: Vec<Ranked<'_>> = removables
        .iter()
        .enumerate()
        .map(|(at, removable)| Ranked { at, removable })
        .collect();
    // Stable: simulation order within each class.
    order.sort_by_key(|r| (!r.empty, r.risky));

    // Used up by the nodes chosen; computed the first time it is read.
    let mut margin = LazyCell::new(ctx.margin);
    let mut chosen_per_group: BTreeMap<usize, usize> = BTreeMap::new();
    let mut accepted: Vec<Ranked<'_>> = Vec::new();
    // Zero-or-max groups: the nodes that passed the per-node checks, decided as a whole below.
    let mut atomic: BTreeMap<usize, Vec<Ranked<'_>>> = BTreeMap::new();

    for r in order {
        let Some(group) = ctx.groups.get(r.group) else {
            continue;
        };
        if scale_down_disabled_by_annotation(&r.node) {
            chosen
                .held_back
                .push(held(&r, &group.id, R::ScaleDownDisabledAnnotation));
            continue;
        }
        let group_options = GroupScaleDownOptions::of(Some(group), ctx.options);
        let ready = r.node.is_ready();
        let (threshold, too_young) = if ready {
            (group_options.unneeded_time, R::NotUnneededLongEnough)
        } else {
            (group_options.unready_time, R::NotUnreadyLongEnough)
        };
        // A zero threshold means "no wait": the node goes in the loop that finds it unneeded,
        // as upstream applies the check only to a positive time (docs/behaviour.md SD-108).
        if !threshold.is_zero() && ctx.now.since(r.since) <= threshold {
            chosen.held_back.push(held(&r, &group.id, too_young));
            continue;
        }
        if group.zero_or_max() {
            atomic.entry(r.group).or_default().push(r);
            continue;
        }
        let already = chosen_per_group.get(&r.group).copied().unwrap_or(0);
        let remaining = group
            .target_size
            .saturating_sub(ctx.deletions.in_group(&group.id))
            .saturating_sub(already);
        if remaining <= group.min_size {
            chosen
                .held_back
                .push(held(&r, &group.id, R::NodeGroupMinSizeReached));
            continue;
        }
        let capacity = NodeCapacity::of(&r.node, ctx.gpu_label);
        if !margin.allows(std::slice::from_ref(&capacity)) {
            chosen
                .held_back
                .push(held(&r, &group.id, R::MinimalResourceLimitExceeded));
            continue;
        }
        if r.on_completion_pod.is_some() {
            chosen
                .held_back
                .push(held(&r, &group.id, R::BlockedByOnCompletionPod));
            continue;
        }
        LazyCell::force_mut(&mut margin).subtract(std::slice::from_ref(&capacity));
        *chosen_per_group.entry(r.group).or_default() += 1;
        accepted.push(r);
    }

    // Zero-or-max groups go as a whole or not at all.
    let mut atomic_accepted: Vec<(usize, Vec<Ranked<'_>>)> = Vec::new();
    for (group_index, nodes) in atomic {
        let Some(group) = ctx.groups.get(group_index) else {
            continue;
        };
        let registered = ctx
            .registered_per_group
            .get(group_index)
            .copied()
            .unwrap_or(0);
        let whole = nodes.len() == group.target_size || nodes.len() == registered;
        let capacities: Vec<NodeCapacity> = nodes
            .iter()
            .map(|r| NodeCapacity::of(&r.node, ctx.gpu_label))
            .collect();
        let remaining = group
            .target_size
            .saturating_sub(ctx.deletions.in_group(&group.id))
            .saturating_sub(nodes.len());
        let reason = if !whole {
            Some(R::AtomicScaleDownFailed)
        } else if remaining < group.min_size {
            Some(R::NodeGroupMinSizeReached)
        } else if !margin.allows(&capacities) {
            Some(R::MinimalResourceLimitExceeded)
        } else if nodes.iter().any(|r| r.on_completion_pod.is_some()) {
            Some(R::BlockedByOnCompletionPod)
        } else {
            None
        };
        match reason {
            Some(reason) => {
                for r in &nodes {
                    let reason =
                        if reason == R::BlockedByOnCompletionPod && r.on_completion_pod.is_none() {
                            R::AtomicScaleDownFailed
                        } else {
                            reason
                        };
                    chosen.held_back.push(held(r, &group.id, reason));
                }
            }
            None => {
                LazyCell::force_mut(&mut margin).subtract(&capacities);
                atomic_accepted.push((group_index, nodes));
            }
        }
    }

    let picks = crop_to_budgets(accepted, atomic_accepted, &ctx);
    chosen.budget_exhausted = picks.wanted > 0 && picks.empty.is_empty() && picks.drain.is_empty();
    let mut slots: Vec<Option<Removable>> = removables.into_iter().map(Some).collect();
    let mut take =
        |(at, group_id): (usize, &str)| slots[at].take().map(|r| r.into_removal(group_id));
    chosen.empty = picks.empty.into_iter().filter_map(&mut take).collect();
    chosen.drain = picks.drain.into_iter().filter_map(&mut take).collect();
    chosen
}

/// The nodes the budgets let go, by position in the removal search's list and with their
/// group's id, and how many passed every other check.
struct Picks<'g> {
    empty: Vec<(usize, &'g str)>,
    drain: Vec<(usize, &'g str)>,
    wanted: usize,
}

/// 3.7: zero-or-max groups first (whole; one may overflow the budget when nothing else was
/// taken), then empty nodes up to the total budget, then drains up to the smaller of the total and
/// drain budgets; nodes are taken group by group in order of first appearance.
fn crop_to_budgets<'g>(
    accepted: Vec<Ranked<'_>>,
    atomic: Vec<(usize, Vec<Ranked<'_>>)>,
    ctx: &ChooseContext<'g>,
) -> Picks<'g> {
    let in_progress = ctx.deletions.empty_count() + ctx.deletions.drain_count();
    let mut total_budget = ctx
        .options
        .max_scale_down_parallelism
        .saturating_sub(in_progress);
    let mut drain_budget = ctx
        .options
        .max_drain_parallelism
        .saturating_sub(ctx.deletions.drain_count());
    let mut picks = Picks {
        empty: Vec::new(),
        drain: Vec::new(),
        wanted: accepted.len() + atomic.iter().map(|(_, n)| n.len()).sum::<usize>(),
    };

    let mut taken_any = false;
    for (group_index, nodes) in atomic {
        let Some(group) = ctx.groups.get(group_index) else {
            continue;
        };
        if nodes.len() > total_budget && taken_any {
            continue;
        }
        if nodes.len() > total_budget && total_budget == 0 {
            continue;
        }
        total_budget = total_budget.saturating_sub(nodes.len());
        taken_any = true;
        for r in nodes {
            if r.empty {
                picks.empty.push((r.at, &group.id));
            } else {
                drain_budget = drain_budget.saturating_sub(1);
                picks.drain.push((r.at, &group.id));
            }
        }
    }

    let (empty, drain): (Vec<Ranked<'_>>, Vec<Ranked<'_>>) =
        accepted.into_iter().partition(|r| r.empty);
    for r in group_by_group(empty) {
        if total_budget == 0 {
            break;
        }
        let Some(group) = ctx.groups.get(r.group) else {
            continue;
        };
        total_budget -= 1;
        picks.empty.push((r.at, &group.id));
    }
    for r in group_by_group(drain) {
        if total_budget == 0 || drain_budget == 0 {
            break;
        }
        let Some(group) = ctx.groups.get(r.group) else {
            continue;
        };
        total_budget -= 1;
        drain_budget -= 1;
        picks.drain.push((r.at, &group.id));
    }
    picks
}

/// The nodes reordered so that each group's nodes are together, groups in order of first
/// appearance, nodes in their original order within a group.
fn group_by_group(nodes: Vec<Ranked<'_>>) -> Vec<Ranked<'_>> {
    let mut first_seen: Vec<usize> = Vec::new();
    for r in &nodes {
        if !first_seen.contains(&r.group) {
            first_seen.push(r.group);
        }
    }
    let mut out = Vec::with_capacity(nodes.len());
    for group in first_seen {
        out.extend(nodes.iter().filter(|r| r.group == group).copied());
    }
    out
}
