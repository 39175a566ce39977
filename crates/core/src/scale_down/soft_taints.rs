//! Soft taints (docs/behaviour.md SD-90): `DeletionCandidateOfClusterAutoscaler:PreferNoSchedule`
//! on unneeded nodes, so the scheduler prefers other nodes for new pods, and off again when a node
//! is needed. Removals go first; at most `--max-bulk-soft-taint-count` node updates per loop, the
//! rest wait for the next loop. Nodes marked `ToBeDeletedByClusterAutoscaler` are left alone.

use ferroscale_model::Node;
use ferroscale_model::taints::{DELETION_CANDIDATE, TO_BE_DELETED};

use crate::FastSet;

/// The soft-taint updates of one loop.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct SoftTaintPlan {
    pub add: Vec<String>,
    pub remove: Vec<String>,
}

/// `nodes` are the cluster's nodes with whether each belongs to an autoscaled group; `unneeded`
/// the nodes unneeded after this loop; `deleting` the nodes this loop starts deleting (they get
/// the hard taint instead).
pub(super) fn plan_soft_taints<'n>(
    nodes: impl IntoIterator<Item = (&'n Node, bool)>,
    unneeded: &FastSet<&str>,
    deleting: &FastSet<&str>,
    max_updates: usize,
) -> SoftTaintPlan {
    let mut plan = SoftTaintPlan::default();
    if max_updates == 0 {
        return plan;
    }
    let mut to_add = Vec::new();
    for (node, autoscaled) in nodes {
        if node.has_taint(TO_BE_DELETED) || deleting.contains(node.name.as_str()) {
            continue;
        }
        let tainted = node.has_taint(DELETION_CANDIDATE);
        let is_unneeded = unneeded.contains(node.name.as_str());
        if tainted && !is_unneeded && autoscaled {
            plan.remove.push(node.name.clone());
        } else if !tainted && is_unneeded {
            to_add.push(node.name.clone());
        }
    }
    plan.remove.truncate(max_updates);
    let room = max_updates - plan.remove.len();
    to_add.truncate(room);
    plan.add = to_add;
    plan
}
