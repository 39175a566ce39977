//! The removal simulation (docs/behaviour.md SD-104): on a branch of the snapshot, replace the node
//! by a pod-less copy that carries the `ToBeDeletedByClusterAutoscaler:NoSchedule` taint (so
//! topology-spread domains keep counting it), and place its movable pods one by one, highest
//! priority first, on other nodes. Success commits the branch, so later candidates see the pods
//! moved and the node gone; the first pod without a place reverts it.

use std::collections::HashSet;
use std::sync::Arc;

use ferroscale_model::taints::TO_BE_DELETED;
use ferroscale_model::{Pod, Taint, TaintEffect, Timestamp};
use ferroscale_scheduling::{NodeId, Snapshot, find_node};

use super::PlannedMove;

/// Places pods on the nodes of a snapshot, skipping the nodes that may not receive pods (removed
/// in this loop, or being deleted).
pub(super) struct RemovalSimulator {
    /// Nodes that are no pod destination.
    excluded: HashSet<NodeId>,
    /// Where the next search starts, one past the previous match, to spread pods the way
    /// upstream's round-robin placement does.
    next_start: usize,
    now: Timestamp,
}

impl RemovalSimulator {
    pub fn new(now: Timestamp, excluded: HashSet<NodeId>) -> RemovalSimulator {
        RemovalSimulator {
            excluded,
            next_start: 0,
            now,
        }
    }

    /// The first node, other than the excluded ones, that fits `pod`. The pod must not be placed
    /// in the snapshot and must have no `node_name` (that would pin it to one node).
    pub fn find_destination(&mut self, snapshot: &mut Snapshot, pod: &Pod) -> Option<NodeId> {
        let slots = snapshot.slot_count();
        let mut start = self.next_start;
        // Every excluded match moves the search one slot on; at most `excluded + 1` searches.
        for _ in 0..=self.excluded.len() {
            let found = find_node(snapshot, pod, start)?;
            if !self.excluded.contains(&found) {
                self.next_start = found.index() + 1;
                return Some(found);
            }
            start = found.index() + 1;
            if start >= slots && self.excluded.len() >= slots {
                return None;
            }
        }
        None
    }

    /// Places a copy of `pod` (with `node_name` cleared) wherever it fits and returns the node.
    pub fn place(&mut self, snapshot: &mut Snapshot, pod: &Pod) -> Option<NodeId> {
        let mut unbound = pod.clone();
        unbound.node_name = None;
        let destination = self.find_destination(snapshot, &unbound)?;
        let name = snapshot.node(destination)?.node.name.clone();
        unbound.node_name = Some(name);
        snapshot.add_pod(destination, Arc::new(unbound));
        Some(destination)
    }

    /// Simulates removing `node`: on success the change stays in the snapshot and the planned
    /// destinations are returned; on failure the snapshot is unchanged and the pod that found no
    /// place is returned.
    pub fn remove_node(
        &mut self,
        snapshot: &mut Snapshot,
        node: NodeId,
        movable: &[Arc<Pod>],
    ) -> Result<Vec<PlannedMove>, Arc<Pod>> {
        let Some(info) = snapshot.node(node) else {
            return Ok(Vec::new());
        };
        // The node's pods that hold ResourceClaims leave it first, one by one, so that their
        // claims lose the node's devices and can be allocated again where the pods land (the
        // DynamicResources filter runs in `place`; docs/dra.md DRA-132).
        let claim_pods: Vec<String> = info
            .pods
            .iter()
            .filter(|p| p.has_resource_claims())
            .map(|p| p.uid.clone())
            .collect();
        let mut replacement = (*info.node).clone();
        replacement.taints.push(Taint {
            time_added: Some(self.now),
            ..Taint::new(
                TO_BE_DELETED,
                self.now.secs().to_string(),
                TaintEffect::NoSchedule,
            )
        });
        replacement.unschedulable = true;
        let mut order: Vec<&Arc<Pod>> = movable.iter().collect();
        // Highest priority first; the sort is stable so equal priorities keep node order.
        order.sort_by_key(|p| std::cmp::Reverse(p.priority.unwrap_or(0)));

        // Returning without the commit below reverts the branch as it drops.
        let mut branch = snapshot.branch();
        for uid in &claim_pods {
            branch.remove_pod(node, uid);
        }
        branch.remove_node(node);
        let copy = branch.add_node(Arc::new(replacement));
        self.excluded.insert(copy);
        let saved_start = self.next_start;
        let mut moves = Vec::with_capacity(order.len());
        for pod in order {
            let Some(destination) = self.place(&mut branch, pod) else {
                self.excluded.remove(&copy);
                self.next_start = saved_start;
                return Err(pod.clone());
            };
            let name = branch
                .node(destination)
                .map(|i| i.node.name.clone())
                .unwrap_or_default();
            moves.push(PlannedMove {
                pod: pod.clone(),
                destination: name,
            });
        }
        branch.commit();
        Ok(moves)
    }
}
