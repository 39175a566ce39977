//! Executing a scale-up plan (docs/behaviour.md SU-40, SU-44, SU-49): resize each group through the
//! cloud provider, record events, and back off groups whose resize failed.
//!
//! Without `--parallel-scale-up` the groups are resized one after another and the first failure
//! stops the rest; with it every resize runs concurrently. This is the Act layer, so it is async,
//! but it uses only `futures` (no runtime of its own).

use std::collections::HashSet;
use std::sync::Arc;

use ferroscale_model::Timestamp;
use futures::future::join_all;

use crate::backoff::{BackoffReason, NodeGroupBackoff};
use crate::cloud::{CloudError, ErrorClass, NodeGroup};
use crate::events::{Event, EventObject, reasons};
use crate::options::AutoscalingOptions;

use crate::scale_up::{GroupIncrease, ScaleUpPlan, ScaleUpStatus};

use super::{ActRecord, PlannedAction};

/// Backoff code and `failed_scale_ups_total` reason for a failed resize.
pub const CLOUD_PROVIDER_ERROR: &str = "cloudProviderError";

/// What happened when a plan was executed.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleUpExecution {
    /// `Successful` when every resize succeeded; `Error` when one failed; the plan's own status when
    /// it had nothing to execute.
    pub status: ScaleUpStatus,
    /// Resizes the cloud accepted: register each as a scale-up request in cluster state.
    pub succeeded: Vec<GroupIncrease>,
    /// Resizes the cloud refused, with its error. Each was backed off.
    pub failed: Vec<(GroupIncrease, CloudError)>,
    /// Resizes not attempted because an earlier one failed (sequential mode).
    pub not_attempted: Vec<GroupIncrease>,
    /// The events of the execution. The loop moves them into its own events (de-duplicated,
    /// published, and kept in `LoopOutcome::events`) rather than copying one per triggering pod,
    /// so in a loop's outcome this is empty.
    pub events: Vec<Event>,
    /// `scaled_up_nodes_total` increment.
    pub scaled_up_nodes: usize,
    /// `failed_scale_ups_total{reason}` increments, one entry per failed resize.
    pub failed_scale_up_reasons: Vec<&'static str>,
    /// `failed_node_creations_total` increment (sum of failed deltas).
    pub failed_node_creations: usize,
}

async fn resize(
    group: Option<&Arc<dyn NodeGroup>>,
    increase: &GroupIncrease,
) -> Result<(), CloudError> {
    let Some(group) = group else {
        return Err(CloudError::NodeGroupDoesNotExist(increase.group_id.clone()));
    };
    let delta = increase.delta();
    if increase.atomic {
        match group.atomic_increase_size(delta).await {
            Err(CloudError::NotImplemented) => {}
            other => return other,
        }
    }
    group.increase_size(delta).await
}

fn announce(increase: &GroupIncrease) -> Event {
    Event::normal(
        EventObject::StatusConfigMap,
        reasons::SCALED_UP_GROUP,
        format!(
            "Scale-up: setting group {} size to {} instead of {} (max: {})",
            increase.group_id, increase.new_target, increase.current_target, increase.max_size
        ),
    )
}

fn confirm(increase: &GroupIncrease) -> Event {
    Event::normal(
        EventObject::StatusConfigMap,
        reasons::SCALED_UP_GROUP,
        format!(
            "Scale-up: group {} size set to {} instead of {} (max: {})",
            increase.group_id, increase.new_target, increase.current_target, increase.max_size
        ),
    )
}

/// Acts on a plan of group increases (a scale-up or min-size enforcement): lists each resize,
/// then, unless in dry-run mode, executes them ([`execute_scale_up`]). The execution's events
/// move into the record. `None`: dry-run mode, nothing executed.
pub async fn increase_sizes(
    plan: &ScaleUpPlan,
    groups: &[Arc<dyn NodeGroup>],
    backoff: &mut NodeGroupBackoff,
    now: Timestamp,
    options: &AutoscalingOptions,
) -> (ActRecord, Option<ScaleUpExecution>) {
    let mut record = ActRecord::default();
    for increase in plan.increases.iter().filter(|i| i.delta() > 0) {
        record.plan(PlannedAction::IncreaseSize {
            group_id: increase.group_id.clone(),
            delta: increase.delta(),
        });
    }
    if options.dry_run {
        return (record, None);
    }
    let mut execution = execute_scale_up(plan, groups, backoff, now, options).await;
    record.events.append(&mut execution.events);
    (record, Some(execution))
}

/// Applies `plan` through `groups` (looked up by id). Failed groups are backed off at `now` with
/// class `Other` and code `cloudProviderError`. On success every triggering pod gets
/// `TriggeredScaleUp`.
pub async fn execute_scale_up(
    plan: &ScaleUpPlan,
    groups: &[Arc<dyn NodeGroup>],
    backoff: &mut NodeGroupBackoff,
    now: Timestamp,
    options: &AutoscalingOptions,
) -> ScaleUpExecution {
    let mut execution = ScaleUpExecution {
        status: plan.status.clone(),
        succeeded: Vec::new(),
        failed: Vec::new(),
        not_attempted: Vec::new(),
        events: Vec::new(),
        scaled_up_nodes: 0,
        failed_scale_up_reasons: Vec::new(),
        failed_node_creations: 0,
    };
    let increases: Vec<&GroupIncrease> = plan.increases.iter().filter(|i| i.delta() > 0).collect();
    if plan.status != ScaleUpStatus::Successful || increases.is_empty() {
        return execution;
    }
    let find = |id: &str| groups.iter().find(|g| g.id() == id);

    let outcomes: Vec<(GroupIncrease, Option<Result<(), CloudError>>)> =
        if options.parallel_scale_up {
            let mut seen = HashSet::new();
            if let Some(dup) = increases.iter().find(|i| !seen.insert(i.group_id.as_str())) {
                execution.status = ScaleUpStatus::Error(format!(
                    "internal error: group {} appears twice in one parallel scale-up",
                    dup.group_id
                ));
                return execution;
            }
            execution
                .events
                .extend(increases.iter().map(|i| announce(i)));
            let results = join_all(increases.iter().map(|i| resize(find(&i.group_id), i))).await;
            increases
                .iter()
                .zip(results)
                .map(|(i, r)| ((*i).clone(), Some(r)))
                .collect()
        } else {
            let mut outcomes = Vec::new();
            let mut failed = false;
            for increase in &increases {
                if failed {
                    outcomes.push(((*increase).clone(), None));
                    continue;
                }
                execution.events.push(announce(increase));
                let result = resize(find(&increase.group_id), increase).await;
                failed = result.is_err();
                outcomes.push(((*increase).clone(), Some(result)));
            }
            outcomes
        };

    for (increase, outcome) in outcomes {
        match outcome {
            None => execution.not_attempted.push(increase),
            Some(Ok(())) => {
                execution.scaled_up_nodes += increase.delta();
                execution.events.push(confirm(&increase));
                execution.succeeded.push(increase);
            }
            Some(Err(error)) => {
                let message = format!(
                    "Scale-up: failed to increase group {} to {}: {error}",
                    increase.group_id, increase.new_target
                );
                execution.events.push(Event::warning(
                    EventObject::StatusConfigMap,
                    reasons::FAILED_TO_SCALE_UP_GROUP,
                    message.clone(),
                ));
                backoff.backoff(
                    &increase.group_id,
                    now,
                    BackoffReason::new(ErrorClass::Other, CLOUD_PROVIDER_ERROR, message),
                );
                execution.failed_scale_up_reasons.push(CLOUD_PROVIDER_ERROR);
                execution.failed_node_creations += increase.delta();
                execution.failed.push((increase, error));
            }
        }
    }

    if let Some((first, error)) = execution.failed.first() {
        execution.status = ScaleUpStatus::Error(format!(
            "failed to increase node group {}: {error}",
            first.group_id
        ));
    } else {
        execution.status = ScaleUpStatus::Successful;
    }
    if !execution.succeeded.is_empty() {
        let resizes = execution
            .succeeded
            .iter()
            .map(|i| {
                format!(
                    "{{{} {}->{} (max: {})}}",
                    i.group_id, i.current_target, i.new_target, i.max_size
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        // One message for every pod (there can be hundreds of thousands), formatted once.
        let message = format!("pod triggered scale-up: [{resizes}]");
        execution.events.reserve(plan.triggering_pods.len());
        for pod in &plan.triggering_pods {
            execution.events.push(Event::normal(
                EventObject::Pod(pod.clone()),
                reasons::TRIGGERED_SCALE_UP,
                message.clone(),
            ));
        }
    }
    execution
}
