//! The removal simulation (docs/behaviour.md SD-104): on a branch of the snapshot, replace the node
//! by a pod-less copy that carries the `ToBeDeletedByClusterAutoscaler:NoSchedule` taint (so
//! topology-spread domains keep counting it), and place its movable pods one by one, highest
//! priority first, on other nodes. Success commits the branch, so later candidates see the pods
//! moved and the node gone; the first pod without a place reverts it.

use std::sync::Arc;

use ferroscale_model::taints::TO_BE_DELETED;
use ferroscale_model::{CompactString, Pod, Taint, TaintEffect, Timestamp};
use ferroscale_scheduling::{NodeId, Snapshot, find_node_for_unbound, fits_by_node_alone};

use super::PlannedMove;
use crate::FastSet;

/// Places pods on the nodes of a snapshot, skipping the nodes that may not receive pods (removed
/// in this loop, or being deleted).
pub(super) struct RemovalSimulator {
    /// Nodes that are no pod destination.
    excluded: FastSet<NodeId>,
    /// Where the next search starts, one past the previous match, to spread pods the way
    /// upstream's round-robin placement does.
    next_start: usize,
    now: Timestamp,
    /// Whether [`RemovalSimulator::fits_elsewhere`] may refuse a removal before simulating it;
    /// off only in the test that compares both ways.
    quick_refusal: bool,
}

impl RemovalSimulator {
    pub fn new(now: Timestamp, excluded: FastSet<NodeId>) -> RemovalSimulator {
        RemovalSimulator {
            excluded,
            next_start: 0,
            now,
            quick_refusal: true,
        }
    }

    /// The first node, other than the excluded ones, that fits `pod` once it leaves its node: its
    /// `node_name` does not pin it. The pod must not be placed in the snapshot.
    pub fn find_destination(&mut self, snapshot: &mut Snapshot, pod: &Pod) -> Option<NodeId> {
        let slots = snapshot.slot_count();
        let mut start = self.next_start;
        // Every excluded match moves the search one slot on; at most `excluded + 1` searches.
        for _ in 0..=self.excluded.len() {
            let found = find_node_for_unbound(snapshot, pod, start)?;
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

    /// Places `pod` wherever it fits and returns the node. The snapshot shares the pod, whose
    /// `node_name` still names the node it really runs on: the snapshot places pods by slot and
    /// no filter reads a placed pod's `node_name`, so no copy is made per simulated move.
    pub fn place(&mut self, snapshot: &mut Snapshot, pod: &Arc<Pod>) -> Option<NodeId> {
        let destination = self.find_destination(snapshot, pod)?;
        snapshot.add_pod(destination, pod.clone());
        Some(destination)
    }

    /// Whether the first pod to move off `node` may find a place, answered without simulating the
    /// removal where that is exact. Most candidates that stay fail on their first pod; simulating
    /// their removal (taking every pod off, adding the tainted copy, then undoing it all) costs
    /// as much as a successful one. When the pod's fit is decided by each node alone, taking
    /// pods off `node` changes no other node for it, so searching the snapshot as it is, with
    /// `node` itself excluded, finds a place exactly when the simulation would. Otherwise the
    /// answer is "maybe" (`true`) and the simulation decides.
    fn fits_elsewhere(&mut self, snapshot: &mut Snapshot, node: NodeId, pod: &Pod) -> bool {
        if !self.quick_refusal || !fits_by_node_alone(snapshot, pod) {
            return true;
        }
        let newly_excluded = self.excluded.insert(node);
        let saved_start = self.next_start;
        let found = self.find_destination(snapshot, pod).is_some();
        self.next_start = saved_start;
        if newly_excluded {
            self.excluded.remove(&node);
        }
        found
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

        if let Some(first) = order.first()
            && !self.fits_elsewhere(snapshot, node, first)
        {
            return Err((*first).clone());
        }

        // Returning without the commit below reverts the branch as it drops.
        let mut branch = snapshot.branch();
        // Removing the node releases its pods' claims, so each moved pod's claims are allocated
        // again where `place` puts it, by the DynamicResources filter (docs/dra.md DRA-132).
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
                .map(|i| CompactString::from(i.node.name.as_str()))
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

#[cfg(test)]
mod tests {
    use ferroscale_model::labels::ZONE;
    use ferroscale_model::{HostPort, LabelSelector, Node, PodAffinityTerm, Protocol, Resources};
    use proptest::prelude::*;

    use super::*;

    /// A pod: cpu in tenths of a node, its app, and what constrains it.
    #[derive(Debug, Clone)]
    struct PodShape {
        tenths: i64,
        app: u8,
        priority: i32,
        /// Required anti-affinity to pods of this app in the same zone.
        anti_affinity: Option<u8>,
        host_port: bool,
        /// Node selector on this zone.
        zone_selector: Option<u8>,
    }

    fn pod_shape() -> impl Strategy<Value = PodShape> {
        (
            1i64..7,
            0u8..2,
            0i32..3,
            proptest::option::weighted(0.3, 0u8..2),
            proptest::bool::weighted(0.15),
            proptest::option::weighted(0.15, 0u8..3),
        )
            .prop_map(
                |(tenths, app, priority, anti_affinity, host_port, zone_selector)| PodShape {
                    tenths,
                    app,
                    priority,
                    anti_affinity,
                    host_port,
                    zone_selector,
                },
            )
    }

    /// Nodes of one cpu in three zones, each with the pods that fit of the ones drawn for it.
    fn cluster(nodes: &[(u8, Vec<PodShape>)]) -> (Snapshot, Vec<NodeId>) {
        let mut snapshot = Snapshot::new();
        let mut ids = Vec::new();
        let mut serial = 0;
        for (i, (zone, pods)) in nodes.iter().enumerate() {
            let mut allocatable = Resources::new(1000, 1 << 30);
            allocatable.pods = 110;
            let mut node = Node::new(format!("n{i}"), allocatable);
            node.labels.insert(ZONE.into(), format!("z{zone}"));
            let id = snapshot.add_node(Arc::new(node));
            ids.push(id);
            let mut used = 0;
            for shape in pods {
                if used + shape.tenths > 10 {
                    continue;
                }
                used += shape.tenths;
                serial += 1;
                let mut pod = Pod::new("default", format!("p{serial}"));
                pod.node_name = Some(ferroscale_model::format_compact!("n{i}"));
                pod.requests = Resources::new(shape.tenths * 100, 1 << 20);
                pod.priority = Some(shape.priority);
                pod.labels
                    .insert("app".into(), ["web", "db"][shape.app as usize].into());
                if let Some(app) = shape.anti_affinity {
                    pod.pod_anti_affinity.push(PodAffinityTerm {
                        label_selector: Some(LabelSelector::from_labels([(
                            "app",
                            ["web", "db"][app as usize],
                        )])),
                        namespaces: vec![],
                        namespace_selector: None,
                        topology_key: ZONE.into(),
                    });
                }
                if shape.host_port {
                    pod.host_ports.push(HostPort {
                        port: 8080,
                        protocol: Protocol::Tcp,
                        host_ip: String::new(),
                    });
                }
                if let Some(zone) = shape.zone_selector {
                    pod.node_selector.insert(ZONE.into(), format!("z{zone}"));
                }
                snapshot.add_pod(id, Arc::new(pod));
            }
        }
        (snapshot, ids)
    }

    /// What a removal's outcome says: the moves as (pod, destination), or the pod left without a
    /// place.
    fn outcome(
        result: &Result<Vec<PlannedMove>, Arc<Pod>>,
    ) -> Result<Vec<(String, String)>, String> {
        match result {
            Ok(moves) => Ok(moves
                .iter()
                .map(|m| (m.pod.uid.to_string(), m.destination.to_string()))
                .collect()),
            Err(pod) => Err(pod.uid.to_string()),
        }
    }

    /// Where every pod of the snapshot is.
    fn placement(snapshot: &Snapshot) -> Vec<(String, Vec<String>)> {
        snapshot
            .nodes()
            .map(|(_, info)| {
                let pods = info.pods.iter().map(|p| p.uid.to_string()).collect();
                (info.node.name.clone(), pods)
            })
            .collect()
    }

    fn shape(tenths: i64, app: u8, priority: i32) -> PodShape {
        PodShape {
            tenths,
            app,
            priority,
            anti_affinity: None,
            host_port: false,
            zone_selector: None,
        }
    }

    /// The first pod to move fits only in its own zone, where a pod leaving with it repels it:
    /// the node can go, which a search of the snapshot before the removal would deny.
    #[test]
    fn a_pod_repelled_by_a_pod_leaving_with_it_is_not_refused() {
        let repelling = PodShape {
            anti_affinity: Some(0),
            ..shape(1, 1, 0)
        };
        let (mut snapshot, ids) = cluster(&[
            (0, vec![shape(5, 0, 10), repelling]),
            (0, vec![shape(5, 1, 0)]),
            (1, vec![shape(8, 1, 0)]),
        ]);
        let mut simulator = RemovalSimulator::new(Timestamp::from_secs(1000), FastSet::default());
        let pods = snapshot.node(ids[0]).unwrap().pods.clone();
        let moves = simulator.remove_node(&mut snapshot, ids[0], &pods);
        assert_eq!(
            outcome(&moves),
            Ok(vec![
                ("uid-default-p1".to_string(), "n1".to_string()),
                ("uid-default-p2".to_string(), "n2".to_string()),
            ])
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Refusing a removal from the first pod's search, without simulating it, decides every
        /// candidate as the full simulation does, and leaves the snapshot and the search position
        /// as it would: nodes are removed one after another, in order, both ways.
        #[test]
        fn quick_refusal_decides_as_the_full_simulation(
            nodes in proptest::collection::vec(
                (0u8..2, proptest::collection::vec(pod_shape(), 0..6)),
                2..9,
            )
        ) {
            let (snapshot, ids) = cluster(&nodes);
            let now = Timestamp::from_secs(1000);
            let mut quick = (snapshot.clone(), RemovalSimulator::new(now, FastSet::default()));
            let mut full = (snapshot, RemovalSimulator::new(now, FastSet::default()));
            full.1.quick_refusal = false;
            for id in ids {
                let movable = |s: &Snapshot| s.node(id).map(|i| i.pods.clone()).unwrap_or_default();
                let pods = movable(&quick.0);
                prop_assert_eq!(&pods, &movable(&full.0));
                let by_quick = quick.1.remove_node(&mut quick.0, id, &pods);
                let by_full = full.1.remove_node(&mut full.0, id, &pods);
                prop_assert_eq!(outcome(&by_quick), outcome(&by_full));
                prop_assert_eq!(quick.1.next_start, full.1.next_start);
                prop_assert_eq!(&quick.1.excluded, &full.1.excluded);
                prop_assert_eq!(placement(&quick.0), placement(&full.0));
            }
        }
    }
}
