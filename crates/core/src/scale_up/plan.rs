//! The scale-up decision: intake, estimation per node group, expanders, capping and balancing,
//! put together into a [`ScaleUpPlan`].

use std::collections::BTreeMap;
use std::sync::Arc;

use ferroscale_model::Pod;
use ferroscale_scheduling::{Snapshot, Unfit, check};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::cloud::NodeTemplate;
use crate::events::{Event, EventObject, reasons};
use crate::options::{AutoscalingOptions, ExpanderName};

use super::balancing::{BalanceTarget, split, templates_similar};
use super::equivalence::group_pods;
use super::estimator::{NodeLimiter, estimate};
use super::expander::{ChainOutcome, ExpanderContext, ExpansionOption, choose};
use super::external::{ExpanderQuery, ExpanderQueryOption};
use super::intake::{
    all_pods_new, collect_candidates, drop_daemonset_and_young, filter_out_schedulable,
};
use super::limits::{Headroom, NodeUsage, quota_skip_reason, skipped_event_reasons};
use super::quota::CAPACITY_QUOTA_LIMITED;
use super::template::{add_template_copy, is_upcoming_node, sanitize_template};
use super::{
    BinpackingEstimate, ExpansionSummary, ExternalExpanderStep, GroupIncrease, NodeGroupView,
    PodVerdict, ScaleUpInput, ScaleUpPlan, ScaleUpStatus, skip_reasons,
};

/// What the plan learnt about one node group.
struct GroupState<'a> {
    view: &'a NodeGroupView,
    /// Why the group cannot grow, if it cannot.
    skip: Option<String>,
    /// The sanitised template (valid groups only).
    template: Option<NodeTemplate>,
    usage: NodeUsage,
    /// Per equivalence group: fits an empty template node, or the filter that failed.
    verdicts: Vec<Result<(), Unfit>>,
}

impl GroupState<'_> {
    fn is_valid(&self) -> bool {
        self.skip.is_none() && self.template.is_some()
    }

    fn fits(&self, equivalence_group: usize) -> bool {
        self.verdicts
            .get(equivalence_group)
            .is_some_and(Result::is_ok)
    }
}

/// Why each group cannot grow (docs/behaviour.md SU-104), in upstream order.
fn skip_reason(
    view: &NodeGroupView,
    ctx: &PlanContext<'_>,
    headroom: &Headroom,
    usage: &NodeUsage,
    skipped_events: &mut Vec<String>,
    events: &mut Vec<Event>,
) -> Option<String> {
    if view.exists && !view.healthy {
        return Some(skip_reasons::NOT_READY.to_string());
    }
    if view.exists && ctx.backoff.is_backed_off(&view.id, ctx.now) {
        return Some(skip_reasons::BACKOFF.to_string());
    }
    if view.target_size >= view.max_size {
        return Some(skip_reasons::MAX_SIZE_REACHED.to_string());
    }
    let jump = if view.zero_or_max() {
        view.max_size - view.target_size
    } else {
        1
    };
    if view.zero_or_max()
        && ctx.options.max_nodes_total > 0
        && ctx.cluster_nodes + jump > ctx.options.max_nodes_total
    {
        return Some(skip_reasons::ATOMIC_EXCEEDS_MAX_NODES_TOTAL.to_string());
    }
    view.template.as_ref()?;
    let exceeded = headroom.exceeded_by(usage, jump);
    if !exceeded.is_empty() {
        skipped_events.extend(skipped_event_reasons(&exceeded));
        // A CapacityQuota that stops a group says so on itself (docs/capacity-quotas.md CQ-106).
        for quota in &exceeded {
            if let Some(name) = &quota.quota_name {
                events.push(Event::warning(
                    EventObject::CapacityQuota(name.clone()),
                    CAPACITY_QUOTA_LIMITED,
                    format!("node group {} not scaled up: {}", view.id, quota.message()),
                ));
            }
        }
        return Some(quota_skip_reason(&exceeded));
    }
    None
}

/// Says which CapacityQuotas cap (or stop) the chosen option at `fit` of its `wanted` nodes, on
/// the quota and on the status ConfigMap (docs/capacity-quotas.md CQ-107).
fn quota_cap_events(
    headroom: &Headroom,
    state: &GroupState<'_>,
    wanted: usize,
    fit: usize,
    events: &mut Vec<Event>,
) {
    for exceeded in headroom.exceeded_by(&state.usage, wanted) {
        let Some(name) = exceeded.quota_name.clone() else {
            continue;
        };
        let message = format!(
            "capping scale-up of node group {} from {wanted} to {fit} nodes: {}",
            state.view.id,
            exceeded.message()
        );
        events.push(Event::warning(
            EventObject::CapacityQuota(name),
            CAPACITY_QUOTA_LIMITED,
            message.clone(),
        ));
        events.push(Event::warning(
            EventObject::StatusConfigMap,
            CAPACITY_QUOTA_LIMITED,
            message,
        ));
    }
}

/// The options `grpc` is asked about, with their pods and their groups' template nodes.
fn external_query(options: &[ExpansionOption<'_>], pods: &[Arc<Pod>]) -> ExpanderQuery {
    ExpanderQuery {
        options: options
            .iter()
            .map(|o| ExpanderQueryOption {
                group_id: o.group_id.to_string(),
                node_count: o.node_count,
                pods: o.pods.iter().map(|&i| pods[i].clone()).collect(),
                debug: format!(
                    "node group {}: {} new nodes for {} pods",
                    o.group_id,
                    o.node_count,
                    o.pods.len()
                ),
            })
            .collect(),
        templates: options
            .iter()
            .map(|o| (o.group_id.to_string(), o.template.node.clone()))
            .collect(),
    }
}

/// One node group's estimate, prepared before the estimates run in parallel.
struct EstimateJob<'s, 'g> {
    state_index: usize,
    template: &'s NodeTemplate,
    /// The equivalence groups the template takes.
    fitting: Vec<&'g [usize]>,
    limits: Vec<i64>,
}

/// What `job`'s estimate works on, for `binpacking_heterogeneity` (docs/behaviour.md OBS-127).
fn binpacking_estimate(
    group_id: &str,
    job: &EstimateJob<'_, '_>,
    pods: &[Arc<Pod>],
) -> BinpackingEstimate {
    let node = &job.template.node;
    let namespaces: std::collections::HashSet<&str> = job
        .fitting
        .iter()
        .filter_map(|members| members.first())
        .map(|&first| pods[first].namespace.as_str())
        .collect();
    BinpackingEstimate {
        group_id: group_id.to_string(),
        instance_type: node
            .labels
            .get(ferroscale_model::labels::INSTANCE_TYPE)
            .cloned()
            .unwrap_or_default(),
        cpu_capacity_milli: node.capacity.cpu_milli,
        namespaces: namespaces.len(),
        equivalence_groups: job.fitting.len(),
    }
}

/// Inputs shared by the steps of one plan.
struct PlanContext<'a> {
    now: ferroscale_model::Timestamp,
    options: &'a AutoscalingOptions,
    backoff: &'a crate::backoff::NodeGroupBackoff,
    cluster_nodes: usize,
}

/// Checks each equivalence group's first pod against one empty copy of the template.
fn template_verdicts(
    snapshot: &mut Snapshot,
    template: &NodeTemplate,
    pods: &[Arc<Pod>],
    groups: &[Vec<usize>],
) -> Vec<Result<(), Unfit>> {
    // The template copy exists only on this branch.
    let mut branch = snapshot.branch();
    let name = format!("{}-check", template.node.name);
    let id = add_template_copy(&mut branch, template, &name, false);
    groups
        .iter()
        .map(|g| check(&mut branch, &pods[g[0]], id))
        .collect()
}

/// What a pod is told about a group whose template rejects it: the filter's reason, and for the
/// DynamicResources filter the longer explanation that names the claim, the request and the
/// selector no device of the template passed (docs/dra.md DRA-128).
fn rejection_reason(unfit: &Unfit) -> String {
    match unfit {
        Unfit::Dra(dra) => dra.detail(),
        other => other.to_string(),
    }
}

/// `pod didn't trigger scale-up: 2 <reason>, 1 <reason>`.
fn not_triggered_message(verdict: &PodVerdict) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, reason) in &verdict.per_group {
        *counts.entry(reason.as_str()).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    if parts.is_empty() {
        "pod didn't trigger scale-up: no node group can be scaled up".to_string()
    } else {
        format!("pod didn't trigger scale-up: {}", parts.join(", "))
    }
}

/// Fills `pods_not_helped` (and their events when nothing is scaled up): the plan is final.
fn finish(
    plan: &mut ScaleUpPlan,
    pods: &[Arc<Pod>],
    helped: &[bool],
    reason_for: impl Fn(usize) -> Vec<(String, String)>,
) {
    for (i, pod) in pods.iter().enumerate() {
        if helped.get(i).copied().unwrap_or(false) {
            continue;
        }
        plan.pods_not_helped.push(PodVerdict {
            pod: pod.key(),
            per_group: reason_for(i),
        });
    }
    if plan.status != ScaleUpStatus::Successful {
        for verdict in &plan.pods_not_helped {
            plan.events.push(Event::normal(
                EventObject::Pod(verdict.pod.clone()),
                reasons::NOT_TRIGGER_SCALE_UP,
                not_triggered_message(verdict),
            ));
        }
    }
}

/// The pending pods' equivalence groups (docs/behaviour.md SU-103), and each pod's group.
struct Equivalence {
    /// Pod indices per equivalence group.
    groups: Vec<Vec<usize>>,
    /// The equivalence group of each pod.
    group_of: Vec<usize>,
}

impl Equivalence {
    fn of(pods: &[Arc<Pod>]) -> Equivalence {
        let groups = group_pods(pods);
        let mut group_of = vec![0usize; pods.len()];
        for (g, members) in groups.iter().enumerate() {
            for &m in members {
                group_of[m] = g;
            }
        }
        Equivalence { groups, group_of }
    }
}

/// Why each pod that no option helps was not helped, per node group: the filter its template
/// failed, or the reason the group was skipped.
struct NotHelpedReasons<'s, 'v> {
    states: &'s [GroupState<'v>],
    group_of: &'s [usize],
}

impl NotHelpedReasons<'_, '_> {
    fn of(&self, pod: usize) -> Vec<(String, String)> {
        self.states
            .iter()
            .filter_map(|s| {
                // A skipped group's verdict exists only with
                // --scaleup-simulation-for-skipped-node-groups-enabled (docs/behaviour.md SU-109).
                let reason = match (&s.skip, s.verdicts.get(self.group_of[pod])) {
                    (_, Some(Err(unfit))) => rejection_reason(unfit),
                    (Some(skip), _) => skip.clone(),
                    _ => return None,
                };
                Some((s.view.id.clone(), reason))
            })
            .collect()
    }
}

/// Decides whether and how to scale up (docs/behaviour.md, Scale-up). Pure: no clock, no I/O;
/// randomness only from `input.seed`. See [`ScaleUpInput`] for what stays placed in the snapshot.
///
/// The stages, in order: intake, equivalence groups and the node groups' verdicts, similar
/// groups, estimation, expanders, capping, balancing.
pub fn plan_scale_up(input: ScaleUpInput<'_>) -> ScaleUpPlan {
    let ScaleUpInput {
        now,
        snapshot,
        pending_pods,
        draining_pods,
        node_groups,
        backoff,
        options,
        priority_config,
        provider,
        seed,
        external_expander,
        all_or_nothing,
        workers,
        equivalence,
    } = input;
    let mut plan = ScaleUpPlan::empty(ScaleUpStatus::NotNeeded);
    let intake_input = IntakeInput {
        pending_pods,
        draining_pods,
        node_groups,
        now,
        options,
        equivalence,
    };
    let Some(pods) = intake(snapshot, intake_input, &mut plan) else {
        return plan;
    };
    let ctx = PlanContext {
        now,
        options,
        backoff,
        cluster_nodes: snapshot.node_count(),
    };
    let equivalence = Equivalence::of(&pods);
    let mut headroom = Headroom::from_snapshot(snapshot, options, provider);
    let states = assess_node_groups(
        snapshot,
        node_groups,
        &ctx,
        &headroom,
        provider.gpu_label,
        &pods,
        &equivalence,
        &mut plan,
    );
    let similar = similar_groups(&states, equivalence.groups.len(), options);
    let jobs = estimate_jobs(&states, &similar, &equivalence, &ctx);
    plan.binpacking_estimates = jobs
        .iter()
        .map(|job| binpacking_estimate(&states[job.state_index].view.id, job, &pods))
        .collect();
    let expansion_options = expansion_options(
        snapshot,
        workers,
        &jobs,
        &states,
        &pods,
        &ctx,
        all_or_nothing,
    );

    let reasons = NotHelpedReasons {
        states: &states,
        group_of: &equivalence.group_of,
    };
    if expansion_options.is_empty() {
        return refuse(plan, ScaleUpStatus::NoOptionsAvailable, &pods, &reasons);
    }
    let expander_ctx = ExpanderContext {
        pods: &pods,
        priority_config,
        cluster_nodes: ctx.cluster_nodes,
    };
    let expanders = ExpandersInput {
        expander_ctx: &expander_ctx,
        chain: &options.expander,
        external_expander,
        seed,
    };
    let Some(chosen) = run_expanders(expansion_options, expanders, &mut plan) else {
        return plan;
    };
    let best_state = &states[chosen.state_index];
    let new_nodes = cap_new_nodes(&chosen, best_state, &headroom, &ctx, &mut plan.events);
    let atomic = best_state.view.zero_or_max();
    if new_nodes == 0 || ((atomic || all_or_nothing) && new_nodes < chosen.option.node_count) {
        let why = "the cluster node limit or resource limits leave no room";
        return refuse(plan, no_room(&chosen, why), &pods, &reasons);
    }
    let participants = balancing_participants(&chosen, &states, &similar, &equivalence, options);
    plan.increases = balance(new_nodes, &participants, &states, &mut headroom, atomic);
    if plan.increases.is_empty() {
        return refuse(plan, no_room(&chosen, "no group has room"), &pods, &reasons);
    }
    succeed(&mut plan, &chosen, &participants, &states, &pods, &reasons);
    plan
}

/// A final plan that helps no pod: `status` says why, and every pod its reasons.
fn refuse(
    mut plan: ScaleUpPlan,
    status: ScaleUpStatus,
    pods: &[Arc<Pod>],
    reasons: &NotHelpedReasons<'_, '_>,
) -> ScaleUpPlan {
    plan.status = status;
    finish(&mut plan, pods, &[], |pod| reasons.of(pod));
    plan
}

/// The error of a chosen option the limits leave no room for.
fn no_room(chosen: &Chosen<'_>, why: &str) -> ScaleUpStatus {
    ScaleUpStatus::Error(format!(
        "cannot scale up node group {}: {why}",
        chosen.option.group_id
    ))
}

/// What intake reads besides the snapshot.
struct IntakeInput<'a> {
    pending_pods: &'a [Arc<Pod>],
    draining_pods: &'a [Arc<Pod>],
    node_groups: &'a [NodeGroupView],
    now: ferroscale_model::Timestamp,
    options: &'a AutoscalingOptions,
    equivalence: Option<&'a mut super::EquivalenceMemo>,
}

/// 2.1, intake: the pods that need a new node. `None` when the plan is final: there are none,
/// `--max-nodes-total` ready nodes exist already, or every pod is still too young.
fn intake(
    snapshot: &mut Snapshot,
    input: IntakeInput<'_>,
    plan: &mut ScaleUpPlan,
) -> Option<Vec<Arc<Pod>>> {
    let IntakeInput {
        pending_pods,
        draining_pods,
        node_groups,
        now,
        options,
        equivalence,
    } = input;
    let candidates = collect_candidates(snapshot, pending_pods, draining_pods, options);
    let (remaining, schedulable, overflowing) =
        filter_out_schedulable(snapshot, candidates, equivalence);
    plan.pods_schedulable_on_existing = schedulable;
    plan.overflowing_controllers = overflowing;
    let pods = drop_daemonset_and_young(remaining, now, options);
    if pods.is_empty() {
        return None;
    }
    if options.max_nodes_total > 0 {
        let ready = snapshot
            .nodes()
            .filter(|(_, i)| {
                i.node.is_ready() && !i.node.unschedulable && !is_upcoming_node(&i.node)
            })
            .count();
        if ready >= options.max_nodes_total {
            plan.status = ScaleUpStatus::LimitedByMaxNodesTotal;
            plan.events.push(Event::warning(
                EventObject::StatusConfigMap,
                reasons::MAX_NODES_TOTAL_REACHED,
                format!(
                    "Max total nodes in cluster reached: {}",
                    options.max_nodes_total
                ),
            ));
            let all_groups = |_| {
                node_groups
                    .iter()
                    .map(|g| {
                        (
                            g.id.clone(),
                            skip_reasons::MAX_TOTAL_NODES_REACHED.to_string(),
                        )
                    })
                    .collect()
            };
            finish(plan, &pods, &[], all_groups);
            return None;
        }
    }
    if all_pods_new(&pods, now, options) {
        plan.status = ScaleUpStatus::InCooldown;
        plan.skip_scale_down_this_loop = true;
        return None;
    }
    Some(pods)
}

/// 2.5: what each node group can do: why it is skipped, its sanitised template, its resource
/// usage per node, and which equivalence groups fit an empty template node.
#[allow(clippy::too_many_arguments)]
fn assess_node_groups<'v>(
    snapshot: &mut Snapshot,
    node_groups: &'v [NodeGroupView],
    ctx: &PlanContext<'_>,
    headroom: &Headroom,
    gpu_label: &str,
    pods: &[Arc<Pod>],
    equivalence: &Equivalence,
    plan: &mut ScaleUpPlan,
) -> Vec<GroupState<'v>> {
    let options = ctx.options;
    let mut states: Vec<GroupState<'_>> = Vec::with_capacity(node_groups.len());
    for view in node_groups {
        let template = view
            .template
            .as_ref()
            .map(|t| sanitize_template(t, &view.id, "template", options));
        let usage = template
            .as_ref()
            .map(|t| headroom.template_usage(&t.node, gpu_label))
            .unwrap_or_default();
        let skip = skip_reason(
            view,
            ctx,
            headroom,
            &usage,
            &mut plan.skipped_scale_events,
            &mut plan.events,
        )
        .or_else(|| {
            template
                .is_none()
                .then(|| skip_reasons::NOT_READY.to_string())
        });
        states.push(GroupState {
            view,
            skip,
            template,
            usage,
            verdicts: Vec::new(),
        });
    }
    // With --scaleup-simulation-for-skipped-node-groups-enabled a skipped group's template is
    // checked too, only so that a pod it could never take is reported with the filter that
    // rejects it rather than the skip reason (docs/behaviour.md SU-109). On one thread: a
    // template check is one filter check per equivalence group, cheaper than a worker's copy of
    // the snapshot.
    let simulate_skipped = options.scaleup_simulation_for_skipped_node_groups_enabled;
    for state in &mut states {
        state.verdicts = match (&state.skip, &state.template) {
            (None, Some(t)) => template_verdicts(snapshot, t, pods, &equivalence.groups),
            (Some(_), Some(t)) if simulate_skipped => {
                template_verdicts(snapshot, t, pods, &equivalence.groups)
            }
            _ => Vec::new(),
        };
    }
    states
}

/// For each group, the similar groups (docs/behaviour.md SU-107): for the estimator's capacity
/// limit and for balancing. Empty without `--balance-similar-node-groups`.
fn similar_groups(
    states: &[GroupState<'_>],
    equivalence_groups: usize,
    options: &AutoscalingOptions,
) -> Vec<Vec<usize>> {
    states
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if !options.balance_similar_node_groups || !s.is_valid() || s.view.zero_or_max() {
                return Vec::new();
            }
            states
                .iter()
                .enumerate()
                .filter(|(j, other)| {
                    *j != i
                        && other.is_valid()
                        && !other.view.zero_or_max()
                        && matches!((&s.template, &other.template),
                            (Some(a), Some(b)) if templates_similar(a, b, options))
                        && (0..equivalence_groups).all(|g| !s.fits(g) || other.fits(g))
                })
                .map(|(j, _)| j)
                .collect()
        })
        .collect()
}

/// 2.6: one estimate per valid group that some equivalence group fits, with the limits on the
/// nodes it may add.
fn estimate_jobs<'s, 'g>(
    states: &'s [GroupState<'_>],
    similar: &[Vec<usize>],
    equivalence: &'g Equivalence,
    ctx: &PlanContext<'_>,
) -> Vec<EstimateJob<'s, 'g>> {
    let options = ctx.options;
    let mut jobs = Vec::new();
    for (i, state) in states.iter().enumerate() {
        let Some(template) = &state.template else {
            continue;
        };
        if !state.is_valid() {
            continue;
        }
        let fitting: Vec<&[usize]> = equivalence
            .groups
            .iter()
            .enumerate()
            .filter(|(g, _)| state.fits(*g))
            .map(|(_, members)| members.as_slice())
            .collect();
        if fitting.is_empty() {
            continue;
        }
        let room = |s: &GroupState<'_>| s.view.max_size as i64 - s.view.target_size as i64;
        let similar_room: i64 =
            room(state) + similar[i].iter().map(|&j| room(&states[j])).sum::<i64>();
        let mut limits = vec![
            i64::try_from(options.max_nodes_per_scaleup).unwrap_or(i64::MAX),
            if similar_room > 0 { similar_room } else { -1 },
        ];
        if options.max_nodes_total > 0 {
            let left = options.max_nodes_total as i64 - ctx.cluster_nodes as i64;
            limits.push(if left > 0 { left } else { -1 });
        }
        jobs.push(EstimateJob {
            state_index: i,
            template,
            fitting,
            limits,
        });
    }
    jobs
}

/// 2.6: runs the estimates and keeps the options that add nodes and place pods. Every estimate
/// runs on a what-if branch of its own and depends only on its group, so the groups are
/// estimated in parallel, each worker on its own copy of the snapshot, and the options are then
/// taken in group order (docs/behaviour.md SU-112). Each option comes with its group's index.
fn expansion_options<'s>(
    snapshot: &mut Snapshot,
    workers: &crate::parallel::Workers,
    jobs: &[EstimateJob<'s, '_>],
    states: &'s [GroupState<'_>],
    pods: &[Arc<Pod>],
    ctx: &PlanContext<'_>,
    all_or_nothing: bool,
) -> Vec<(usize, ExpansionOption<'s>)> {
    let placements = jobs
        .iter()
        .flat_map(|job| &job.fitting)
        .map(|members| members.len())
        .sum();
    let estimates = workers.map_on_snapshots(snapshot, jobs, placements, |snapshot, job| {
        estimate(
            snapshot,
            job.template,
            pods,
            &job.fitting,
            NodeLimiter::new(&job.limits),
            ctx.options.fastpath_binpacking_enabled,
        )
    });
    let mut options = Vec::new();
    for (job, result) in jobs.iter().zip(estimates) {
        let state = &states[job.state_index];
        let mut node_count = result.node_count;
        if state.view.zero_or_max() && node_count > 0 {
            node_count = state.view.max_size - state.view.target_size;
        }
        if node_count == 0 || result.placed.is_empty() {
            continue;
        }
        if all_or_nothing && result.placed.len() < pods.len() {
            continue;
        }
        options.push((
            job.state_index,
            ExpansionOption {
                group_id: &state.view.id,
                exists: state.view.exists,
                template: job.template,
                price_per_hour: state.view.price_per_hour,
                node_count,
                pods: result.placed,
            },
        ));
    }
    options
}

/// The option the expanders chose, with its group's index and how many options they saw.
struct Chosen<'s> {
    option: ExpansionOption<'s>,
    state_index: usize,
    options_considered: usize,
}

/// What the expander chain reads besides the options.
struct ExpandersInput<'a> {
    expander_ctx: &'a ExpanderContext<'a>,
    chain: &'a [ExpanderName],
    external_expander: ExternalExpanderStep<'a>,
    seed: u64,
}

/// 2.7: the expander chain. `None` when the plan is final: the chain must ask the external
/// expander first, leaves nothing, or chooses an option of no known group.
fn run_expanders<'s>(
    expansion_options: Vec<(usize, ExpansionOption<'s>)>,
    input: ExpandersInput<'_>,
    plan: &mut ScaleUpPlan,
) -> Option<Chosen<'s>> {
    let ExpandersInput {
        expander_ctx,
        chain,
        external_expander,
        seed,
    } = input;
    let options_considered = expansion_options.len();
    let state_of: BTreeMap<&str, usize> = expansion_options
        .iter()
        .map(|(i, o)| (o.group_id, *i))
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let chosen = match choose(
        expansion_options.into_iter().map(|(_, o)| o).collect(),
        chain,
        expander_ctx,
        external_expander,
        &mut rng,
        &mut plan.events,
    ) {
        ChainOutcome::Chosen(chosen) => chosen,
        ChainOutcome::AskExternal(asked) => {
            plan.status = ScaleUpStatus::NotTried;
            plan.external_query = Some(external_query(&asked, expander_ctx.pods));
            return None;
        }
    };
    let Some(best) = chosen.filter(|o| o.node_count > 0) else {
        plan.status = ScaleUpStatus::NoOptionsAvailable;
        let filtered = |_| vec![(String::new(), skip_reasons::FILTERED_OUT.to_string())];
        finish(plan, expander_ctx.pods, &[], filtered);
        return None;
    };
    let Some(&state_index) = state_of.get(best.group_id) else {
        plan.status = ScaleUpStatus::Error("chosen option has no node group".to_string());
        return None;
    };
    Some(Chosen {
        option: best,
        state_index,
        options_considered,
    })
}

/// 2.8: the chosen option's node count, capped by `--max-nodes-total` and by the resource
/// limits and CapacityQuotas, with the events that say so.
fn cap_new_nodes(
    chosen: &Chosen<'_>,
    best_state: &GroupState<'_>,
    headroom: &Headroom,
    ctx: &PlanContext<'_>,
    events: &mut Vec<Event>,
) -> usize {
    let (best, options) = (&chosen.option, ctx.options);
    let mut new_nodes = best.node_count;
    if options.max_nodes_total > 0 && ctx.cluster_nodes + new_nodes > options.max_nodes_total {
        new_nodes = options.max_nodes_total.saturating_sub(ctx.cluster_nodes);
        events.push(Event::warning(
            EventObject::StatusConfigMap,
            reasons::MAX_NODES_TOTAL_REACHED,
            format!(
                "Max total nodes in cluster reached: {}; capping scale-up of {} from {} to {} nodes",
                options.max_nodes_total, best.group_id, best.node_count, new_nodes
            ),
        ));
    }
    let fit = headroom.nodes_that_fit(&best_state.usage);
    if fit < new_nodes {
        quota_cap_events(headroom, best_state, new_nodes, fit, events);
        new_nodes = fit;
    }
    new_nodes
}

/// 2.9: the groups the new nodes are shared between: the chosen one first, then, with
/// `--balance-similar-node-groups` and a group that is not atomic, its similar groups that take
/// every equivalence group the option placed.
fn balancing_participants(
    chosen: &Chosen<'_>,
    states: &[GroupState<'_>],
    similar: &[Vec<usize>],
    equivalence: &Equivalence,
    options: &AutoscalingOptions,
) -> Vec<usize> {
    let best_index = chosen.state_index;
    let mut placed_groups: Vec<usize> = chosen
        .option
        .pods
        .iter()
        .map(|&p| equivalence.group_of[p])
        .collect();
    placed_groups.sort_unstable();
    placed_groups.dedup();
    let mut participants = vec![best_index];
    if options.balance_similar_node_groups && !states[best_index].view.zero_or_max() {
        participants.extend(
            similar[best_index]
                .iter()
                .copied()
                .filter(|&j| placed_groups.iter().all(|&g| states[j].fits(g))),
        );
    }
    participants
}

/// 2.9: splits `new_nodes` between the participants, each capped by what the limits still
/// admit, and consumes the headroom they take.
fn balance(
    new_nodes: usize,
    participants: &[usize],
    states: &[GroupState<'_>],
    headroom: &mut Headroom,
    atomic: bool,
) -> Vec<GroupIncrease> {
    let targets: Vec<BalanceTarget> = participants
        .iter()
        .map(|&i| BalanceTarget {
            index: i,
            current: states[i].view.target_size,
            max: states[i].view.max_size,
        })
        .collect();
    let mut increases = Vec::new();
    for (index, added) in split(new_nodes, &targets) {
        let state = &states[index];
        let added = added.min(headroom.nodes_that_fit(&state.usage));
        if added == 0 {
            continue;
        }
        headroom.consume(&state.usage, added);
        increases.push(GroupIncrease {
            group_id: state.view.id.clone(),
            current_target: state.view.target_size,
            new_target: state.view.target_size + added,
            max_size: state.view.max_size,
            atomic,
        });
    }
    increases
}

/// A successful plan: the pods the chosen option helps, the summary of the choice, and the
/// verdicts of the pods it does not help.
fn succeed(
    plan: &mut ScaleUpPlan,
    chosen: &Chosen<'_>,
    participants: &[usize],
    states: &[GroupState<'_>],
    pods: &[Arc<Pod>],
    reasons: &NotHelpedReasons<'_, '_>,
) {
    let best = &chosen.option;
    plan.status = ScaleUpStatus::Successful;
    let mut helped = vec![false; pods.len()];
    for &p in &best.pods {
        helped[p] = true;
        plan.triggering_pods.push(pods[p].key());
    }
    plan.chosen = Some(ExpansionSummary {
        group_id: best.group_id.to_string(),
        estimated_nodes: best.node_count,
        pod_count: best.pods.len(),
        similar_groups: participants
            .iter()
            .skip(1)
            .map(|&i| states[i].view.id.clone())
            .collect(),
        options_considered: chosen.options_considered,
    });
    finish(plan, pods, &helped, |pod| reasons.of(pod));
}
