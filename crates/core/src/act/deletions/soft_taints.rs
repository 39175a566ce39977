//! Soft taints (docs/behaviour.md SD-90): `DeletionCandidateOfClusterAutoscaler:PreferNoSchedule`
//! on unneeded nodes, so the scheduler prefers other nodes for new pods and unneeded nodes drain
//! naturally.

use std::sync::Arc;

use ferroscale_model::taints::{DELETION_CANDIDATE, TO_BE_DELETED};
use ferroscale_model::{Node, Taint, TaintEffect, Timestamp};

use crate::act::{ActRecord, PlannedAction};
use crate::kubernetes::ClusterApi;
use crate::options::AutoscalingOptions;
use crate::scale_down::ScaleDownPlan;

/// What applying soft taints did this loop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SoftTaintUpdate {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Updates that failed, with the error; retried next loop because the plan asks again.
    pub errors: Vec<(String, String)>,
    /// Updates left for later loops because of `--max-bulk-soft-taint-count`.
    pub deferred: usize,
}

/// The soft taint as placed at `now`.
pub fn deletion_candidate_taint(now: Timestamp) -> Taint {
    Taint {
        time_added: Some(now),
        ..Taint::new(
            DELETION_CANDIDATE,
            now.secs().to_string(),
            TaintEffect::PreferNoSchedule,
        )
    }
}

/// Removes the soft taint from `to_remove`, then adds it to `to_add`, at most
/// `--max-bulk-soft-taint-count` updates in all (removals first, as upstream). Nodes already
/// carrying `ToBeDeletedByClusterAutoscaler`, or already in the wanted state, are skipped.
/// Nothing is done when the count is 0 (soft tainting disabled) or in dry-run mode.
pub async fn apply_soft_taints(
    cluster: &dyn ClusterApi,
    nodes: &[&Node],
    to_add: &[String],
    to_remove: &[String],
    now: Timestamp,
    options: &AutoscalingOptions,
) -> SoftTaintUpdate {
    let mut update = SoftTaintUpdate::default();
    let budget = options.max_bulk_soft_taint_count;
    if budget == 0 || options.dry_run {
        return update;
    }
    let find = |name: &str| nodes.iter().find(|n| n.name == name);
    let removals = to_remove.iter().filter(|name| {
        find(name).is_some_and(|n| n.has_taint(DELETION_CANDIDATE) && !n.has_taint(TO_BE_DELETED))
    });
    let additions = to_add.iter().filter(|name| {
        find(name).is_some_and(|n| !n.has_taint(DELETION_CANDIDATE) && !n.has_taint(TO_BE_DELETED))
    });
    let mut used = 0;
    for name in removals {
        if used >= budget {
            update.deferred += 1;
            continue;
        }
        used += 1;
        match cluster.untaint_node(name, DELETION_CANDIDATE, false).await {
            Ok(()) => update.removed.push(name.clone()),
            Err(e) => update.errors.push((name.clone(), e.to_string())),
        }
    }
    for name in additions {
        if used >= budget {
            update.deferred += 1;
            continue;
        }
        used += 1;
        match cluster
            .taint_node(name, deletion_candidate_taint(now), false)
            .await
        {
            Ok(()) => update.added.push(name.clone()),
            Err(e) => update.errors.push((name.clone(), e.to_string())),
        }
    }
    update
}

/// The plan's soft taints as the loop applies them (docs/behaviour.md SD-90, also in cooldown):
/// every removal and addition listed, then applied ([`apply_soft_taints`]).
pub async fn apply_plan_soft_taints(
    cluster: &dyn ClusterApi,
    nodes: &[Arc<Node>],
    plan: &ScaleDownPlan,
    now: Timestamp,
    options: &AutoscalingOptions,
) -> (ActRecord, SoftTaintUpdate) {
    let mut record = ActRecord::default();
    for node in &plan.soft_taints_to_remove {
        record.plan(PlannedAction::RemoveSoftTaint { node: node.clone() });
    }
    for node in &plan.soft_taints_to_add {
        record.plan(PlannedAction::AddSoftTaint { node: node.clone() });
    }
    let nodes: Vec<&Node> = nodes.iter().map(|n| n.as_ref()).collect();
    let update = apply_soft_taints(
        cluster,
        &nodes,
        &plan.soft_taints_to_add,
        &plan.soft_taints_to_remove,
        now,
        options,
    )
    .await;
    (record, update)
}
