//! Salvo scale-up (`--salvo-scale-up`, docs/behaviour.md SU-114): after a successful scale-up the
//! loop plans again within the same iteration for the pods that are still not helped, so pods
//! that need different node groups get them in one iteration instead of one iteration each.
//!
//! Before each further round the groups just grown get upcoming placeholders for their new nodes
//! and the pods that triggered the growth are placed on them, so the next round plans only for
//! what is left. Rounds stop when one does not succeed in full, triggers nothing, or leaves no pod
//! behind. Upstream also stops when `--salvo-scale-up-budget` of wall-clock time is spent; the
//! decision step never reads the clock, and every round that goes on has placed at least one pod
//! of a backlog that only shrinks, so the rounds end by count. The budget is kept for reporting.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ferroscale_model::{Pod, Timestamp};
use ferroscale_scheduling::{Snapshot, find_node};

use crate::act::scale_up::ScaleUpExecution;
use crate::events::Event;
use crate::scale_up::{
    ExternalExpanderStep, GroupIncrease, NodeGroupView, ProviderFacts, ScaleUpInput, ScaleUpPlan,
    ScaleUpStatus, inject_upcoming_nodes, plan_scale_up,
};

use super::gather::Gathered;
use super::{Autoscaler, DecideTimer, LoopOutcome};

/// What the first round left for the next ones.
pub(super) struct SalvoStart<'a> {
    pub(super) now: Timestamp,
    pub(super) gathered: &'a Gathered,
    /// The node groups as the first round saw them.
    pub(super) views: &'a [NodeGroupView],
    /// The pending pods the first round was given (fake ones included) and the pods of nodes
    /// being drained.
    pub(super) pending: &'a [Arc<Pod>],
    pub(super) draining: &'a [Arc<Pod>],
    pub(super) provider: ProviderFacts<'a>,
    pub(super) seed: u64,
}

/// The resizes a round carried out (or, in dry-run, planned); `None` when the round did not
/// succeed in full.
fn grown(plan: &ScaleUpPlan, execution: Option<&ScaleUpExecution>) -> Option<Vec<GroupIncrease>> {
    if plan.status != ScaleUpStatus::Successful || plan.triggering_pods.is_empty() {
        return None;
    }
    let increases = match execution {
        Some(execution) if execution.failed.is_empty() && execution.not_attempted.is_empty() => {
            execution.succeeded.clone()
        }
        Some(_) => return None,
        None => plan.increases.clone(),
    };
    (!increases.is_empty()).then_some(increases)
}

/// Adds a later round's execution to the iteration's, so metrics and reports see every resize.
fn merge(total: &mut Option<ScaleUpExecution>, round: ScaleUpExecution) {
    match total {
        None => *total = Some(round),
        Some(total) => {
            total.succeeded.extend(round.succeeded);
            total.failed.extend(round.failed);
            total.not_attempted.extend(round.not_attempted);
            total.events.extend(round.events);
            total.scaled_up_nodes += round.scaled_up_nodes;
            total
                .failed_scale_up_reasons
                .extend(round.failed_scale_up_reasons);
            total.failed_node_creations += round.failed_node_creations;
            if round.status != ScaleUpStatus::Successful {
                total.status = round.status;
            }
        }
    }
}

impl Autoscaler {
    /// The further rounds after `first` (which has been executed already); each round's plan is
    /// kept in `outcome.salvo_rounds` and its execution merged into `outcome.scale_up_execution`.
    pub(super) async fn salvo_scale_ups(
        &mut self,
        start: SalvoStart<'_>,
        first: &ScaleUpPlan,
        snapshot: &mut Snapshot,
        timer: &mut DecideTimer<'_>,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) {
        let by_key: HashMap<String, Arc<Pod>> = start
            .pending
            .iter()
            .chain(start.draining)
            .map(|p| (p.key(), p.clone()))
            .collect();
        let draining: HashSet<String> = start.draining.iter().map(|p| p.key()).collect();
        let mut views = start.views.to_vec();
        let mut last_plan = first.clone();
        let mut last_execution = outcome.scale_up_execution.clone();
        let mut round: u64 = 0;
        while let Some(increases) = grown(&last_plan, last_execution.as_ref()) {
            round += 1;
            // The new nodes, as upcoming placeholders, with the pods that asked for them.
            for increase in &increases {
                if let Some(view) = views.iter_mut().find(|v| v.id == increase.group_id) {
                    inject_upcoming_nodes(snapshot, view, increase.delta());
                    view.target_size = view.target_size.max(increase.new_target);
                }
            }
            for key in &last_plan.triggering_pods {
                if let Some(pod) = by_key.get(key)
                    && let Some(id) = find_node(snapshot, pod, 0)
                {
                    snapshot.add_pod(id, pod.clone());
                }
            }
            let (backlog_draining, backlog_pending): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) = last_plan
                .pods_not_helped
                .iter()
                .filter_map(|verdict| by_key.get(&verdict.pod).cloned())
                .partition(|pod| draining.contains(&pod.key()));
            if backlog_pending.is_empty() && backlog_draining.is_empty() {
                break;
            }
            let priority_config = start.gathered.objects.priority_expander_config.as_deref();
            let plan = timer.time("scaleUp", || {
                plan_scale_up(ScaleUpInput {
                    now: start.now,
                    snapshot,
                    pending_pods: &backlog_pending,
                    draining_pods: &backlog_draining,
                    node_groups: &views,
                    backoff: &self.backoff,
                    options: &self.options,
                    priority_config,
                    provider: start.provider,
                    seed: start.seed.wrapping_add(round),
                    // Salvo rounds do not call out: `grpc` keeps every option there.
                    external_expander: ExternalExpanderStep::Skip,
                    all_or_nothing: false,
                    workers: &self.workers,
                    equivalence: None,
                })
            });
            events.extend(plan.events.iter().cloned());
            let execution = self
                .execute_increases(&plan, &start.gathered.groups, start.now, outcome, events)
                .await;
            if let Some(execution) = execution.clone() {
                merge(&mut outcome.scale_up_execution, execution);
            }
            outcome.salvo_rounds.push(plan.clone());
            last_plan = plan;
            last_execution = execution;
        }
    }
}
