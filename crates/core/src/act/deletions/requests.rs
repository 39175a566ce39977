//! Starting the deletions a scale-down plan chose (docs/behaviour.md SD-81): the requests for
//! the tracker, the taints, and, with no post-taint delay, the first step of each deletion at once.

use std::collections::HashMap;
use std::sync::Arc;

use ferroscale_model::{Node, Timestamp};

use crate::cloud::NodeGroup;
use crate::kubernetes::ClusterApi;
use crate::options::AutoscalingOptions;
use crate::scale_down::ScaleDownPlan;
use crate::scale_up::NodeGroupView;
use crate::stopwatch::Stopwatch;

use super::super::{ActRecord, PlannedAction};
use super::{ActuationProgress, DeletionTracker, NodeDeletion, RemovalKind, RemovalRecheck};

/// The plan's empty and drained removals as deletion requests, in plan order, for the nodes that
/// exist in `nodes`.
pub fn deletion_requests(
    plan: &ScaleDownPlan,
    nodes: &[Arc<Node>],
    views: &[NodeGroupView],
) -> Vec<NodeDeletion> {
    // Most loops delete nothing: no map of every node's name for them.
    if plan.empty_to_delete.is_empty() && plan.drain_to_delete.is_empty() {
        return Vec::new();
    }
    let nodes_by_name: HashMap<&str, &Arc<Node>> =
        nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    plan.empty_to_delete
        .iter()
        .map(|r| (r, RemovalKind::Empty))
        .chain(plan.drain_to_delete.iter().map(|r| (r, RemovalKind::Drain)))
        .filter_map(|(removal, kind)| {
            let node = nodes_by_name.get(removal.node.as_str())?;
            let zero_or_max = views
                .iter()
                .find(|v| v.id == removal.group_id)
                .is_some_and(NodeGroupView::zero_or_max);
            Some(NodeDeletion {
                node: (*node).clone(),
                group_id: removal.group_id.clone(),
                kind,
                zero_or_max,
                unready: !removal.ready,
                utilization: removal.utilization.value,
                pods_to_reschedule: removal.pods_to_evict.iter().map(|p| p.key()).collect(),
            })
        })
        .collect()
}

/// The requests as the calls they start.
pub fn planned_starts(requests: &[NodeDeletion]) -> ActRecord {
    let mut record = ActRecord::default();
    for request in requests {
        record.plan(PlannedAction::StartNodeDeletion {
            node: request.node.name.clone(),
            group_id: request.group_id.clone(),
            kind: request.kind,
        });
    }
    record
}

/// What starting a batch of deletions did: the taints, and with no post-taint delay the first
/// advance of every deletion in progress.
pub struct StartedDeletions {
    pub started: ActuationProgress,
    pub advanced: Option<ActuationProgress>,
}

/// Where started deletions run and what they are re-checked against.
pub struct DeletionTarget<'a> {
    pub groups: &'a [Arc<dyn NodeGroup>],
    pub cluster: &'a dyn ClusterApi,
    pub recheck: &'a dyn RemovalRecheck,
}

/// Starts `requests` on `tracker` (taint, then drain or delete), and, with no post-taint delay,
/// moves the deletions on at once.
pub async fn start_deletions(
    tracker: &mut DeletionTracker,
    requests: Vec<NodeDeletion>,
    target: DeletionTarget<'_>,
    now: Timestamp,
    options: &AutoscalingOptions,
    clock: &dyn Stopwatch,
) -> StartedDeletions {
    let started = tracker
        .start_measured(requests, target.cluster, now, options, clock)
        .await;
    let advanced = if tracker.delay_after_taint(options).is_zero() {
        let progress = tracker
            .advance(target.groups, target.cluster, target.recheck, now, options)
            .await;
        Some(progress)
    } else {
        None
    };
    StartedDeletions { started, advanced }
}
