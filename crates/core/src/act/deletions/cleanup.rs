//! First-iteration clean-up (docs/behaviour.md LOOP-91): a process that stopped mid-deletion leaves
//! `ToBeDeletedByClusterAutoscaler` taints behind, which would keep pods off perfectly good
//! nodes forever. The first loop of a new process removes them from autoscaled nodes, and, when
//! soft tainting is disabled, stale `DeletionCandidateOfClusterAutoscaler` taints too.

use std::sync::Arc;

use ferroscale_model::taints::{DELETION_CANDIDATE, TO_BE_DELETED};
use ferroscale_model::{Node, Taint, Timestamp};

use crate::act::{ActRecord, PlannedAction};
use crate::cloud::CloudProvider;
use crate::events::{Event, EventObject, reasons};
use crate::kubernetes::{ClusterApi, ClusterError};
use crate::options::AutoscalingOptions;

use super::DeletionTracker;

/// When a taint was placed: its `timeAdded`, else its value read as Unix seconds (how the
/// autoscaler writes it).
fn placed_at(taint: &Taint) -> Option<Timestamp> {
    taint
        .time_added
        .or_else(|| taint.value.parse::<i64>().ok().map(Timestamp::from_secs))
}

/// Whether a soft taint is stale at `now`: every one when the TTL is zero, else those older than
/// the TTL (or without a readable time).
fn stale_candidate(taint: &Taint, now: Timestamp, options: &AutoscalingOptions) -> bool {
    if options.node_deletion_candidate_ttl.is_zero() {
        return true;
    }
    placed_at(taint).is_none_or(|t| now.since(t) > options.node_deletion_candidate_ttl)
}

/// What the start-up clean-up did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeftoverTaints {
    /// `ClusterAutoscalerCleanup` events: Normal when removed, Warning when the update failed.
    pub events: Vec<Event>,
    /// `(node, taint key, uncordon)` of the removals that failed, for the caller to owe
    /// (docs/behaviour.md SD-120).
    pub failed: Vec<(String, &'static str, bool)>,
}

/// Removes leftover deletion taints from the autoscaled nodes among `nodes`. Nodes outside any
/// node group are left alone. Calls nothing in dry-run mode.
pub async fn remove_leftover_taints(
    cloud: &dyn CloudProvider,
    cluster: &dyn ClusterApi,
    nodes: &[Arc<Node>],
    now: Timestamp,
    options: &AutoscalingOptions,
) -> LeftoverTaints {
    let mut cleaned = LeftoverTaints::default();
    let soft_tainting_disabled = options.max_bulk_soft_taint_count == 0;
    for node in nodes {
        let mut keys: Vec<(&str, bool)> = Vec::new();
        if node.has_taint(TO_BE_DELETED) {
            keys.push((TO_BE_DELETED, options.cordon_node_before_terminating));
        }
        if soft_tainting_disabled
            && node
                .taints
                .iter()
                .any(|t| t.key == DELETION_CANDIDATE && stale_candidate(t, now, options))
        {
            keys.push((DELETION_CANDIDATE, false));
        }
        if keys.is_empty() || options.dry_run {
            continue;
        }
        if !matches!(cloud.node_group_for_node(node).await, Ok(Some(_))) {
            continue;
        }
        for (key, uncordon) in keys {
            let object = EventObject::Node(node.name.clone());
            match cluster.untaint_node(&node.name, key, uncordon).await {
                Ok(()) => cleaned.events.push(Event::normal(
                    object,
                    reasons::CLUSTER_AUTOSCALER_CLEANUP,
                    format!("removed {key} taint left by an earlier run"),
                )),
                Err(ClusterError::NotFound { .. }) => {}
                Err(e) => {
                    cleaned.events.push(Event::warning(
                        object,
                        reasons::CLUSTER_AUTOSCALER_CLEANUP,
                        format!("failed to remove {key} taint left by an earlier run: {e}"),
                    ));
                    cleaned.failed.push((node.name.clone(), key, uncordon));
                }
            }
        }
    }
    cleaned
}

/// The start-up clean-up as the loop runs it (docs/behaviour.md LOOP-91): in dry-run mode every
/// node with a leftover deletion taint is listed; otherwise each removal is listed, and the
/// removals the API server refused are owed on `tracker`, to be retried every loop
/// (docs/behaviour.md SD-120).
pub async fn clean_up_leftover_taints(
    cloud: &dyn CloudProvider,
    cluster: &dyn ClusterApi,
    tracker: &mut DeletionTracker,
    nodes: &[Arc<Node>],
    now: Timestamp,
    options: &AutoscalingOptions,
) -> ActRecord {
    let mut record = ActRecord::default();
    if options.dry_run {
        for node in nodes.iter().filter(|n| n.has_taint(TO_BE_DELETED)) {
            record.plan(PlannedAction::RemoveLeftoverTaint {
                node: node.name.clone(),
            });
        }
    }
    let cleaned = remove_leftover_taints(cloud, cluster, nodes, now, options).await;
    for event in &cleaned.events {
        if let EventObject::Node(node) = &event.object {
            record.plan(PlannedAction::RemoveLeftoverTaint { node: node.clone() });
        }
    }
    for (node, key, uncordon) in cleaned.failed {
        tracker.owe_untaint(&node, key, uncordon);
    }
    record.events = cleaned.events;
    record
}
