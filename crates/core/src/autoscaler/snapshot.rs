//! The loop's snapshot built from scratch, a pure step: from the gathered objects and the
//! cluster-state report to the snapshot the decide steps share, the pending pods and the pods of
//! nodes being drained. The loop keeps its snapshot across loops instead (`super::kept`); this
//! straightforward build is the reference the kept one is checked against.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ferroscale_model::Pod;
use ferroscale_scheduling::{NodeId, Snapshot};

use crate::cluster_state::ClusterStateReport;
use crate::kubernetes::ClusterObjects;
use crate::options::AutoscalingOptions;
use crate::scale_up::{NodeGroupView, inject_upcoming_nodes};

/// What [`build_snapshot`] reads.
pub(super) struct SnapshotInput<'a> {
    pub(super) objects: &'a ClusterObjects,
    /// This iteration's cluster state: upcoming nodes per group, and the registered nodes of
    /// scaling-up groups that are still starting.
    pub(super) report: &'a ClusterStateReport,
    /// The node groups as gathered (their templates stand in for upcoming nodes).
    pub(super) views: &'a [NodeGroupView],
    /// Nodes whose scale-down deletion drains them.
    pub(super) draining: &'a HashSet<String>,
    pub(super) options: &'a AutoscalingOptions,
}

/// The loop's view for the decide steps.
pub(super) struct LoopSnapshot {
    /// Registered nodes with their bound pods, and a placeholder per upcoming node.
    pub(super) snapshot: Snapshot,
    /// Every pod not bound to a node (the scale-up plan does its own intake filtering).
    pub(super) pending: Vec<Arc<Pod>>,
    /// Recreatable pods of nodes being drained, with `node_name` cleared.
    pub(super) draining_pods: Vec<Arc<Pod>>,
}

/// Builds the snapshot, the pending pods and the draining pods. Pure.
pub(super) fn build_snapshot(input: SnapshotInput<'_>) -> LoopSnapshot {
    let SnapshotInput {
        objects,
        report,
        views,
        draining,
        options,
    } = input;
    // Registered nodes (minus the still-starting nodes of scaling-up
    // groups, which placeholders replace) with their scheduled pods, expendable pods excluded.
    let registered_upcoming: HashSet<&str> = report
        .groups
        .iter()
        .flat_map(|g| g.registered_upcoming.iter().map(String::as_str))
        .collect();
    let cutoff = options.expendable_pods_priority_cutoff;
    let allowed = &options.allowed_scheduler_names;
    let pods: Vec<&Arc<Pod>> = objects
        .pods
        .iter()
        .filter(|p| {
            allowed.is_empty()
                || allowed
                    .iter()
                    .any(|s| s.as_str() == p.scheduler_name.as_str())
        })
        .filter(|p| p.deletion_time.is_none() && !p.is_terminal())
        .collect();
    // The set-up (profile, volume catalogue, DRA objects, namespaces) is the kept one's: what
    // this reference checks is where nodes and pods go.
    let mut snapshot = super::kept::empty_snapshot(objects, options);
    // The handle of every added node by name, kept here with a fast hasher so that placing a
    // bound pod costs no SipHash of its node's name; consecutive pods of one node (the usual
    // order) reuse the last answer.
    let mut node_ids: HashMap<&str, NodeId, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(objects.nodes.len(), Default::default());
    for node in &objects.nodes {
        if !registered_upcoming.contains(node.name.as_str()) {
            let id = snapshot.add_node(node.clone());
            node_ids.entry(node.name.as_str()).or_insert(id);
        }
    }
    let mut pending: Vec<Arc<Pod>> = Vec::new();
    let mut last: Option<(&str, Option<NodeId>)> = None;
    for pod in &pods {
        match pod.node_name.as_deref() {
            Some(name) => {
                if pod.is_expendable(cutoff) {
                    continue;
                }
                let id = match last {
                    Some((last_name, id)) if last_name == name => id,
                    _ => {
                        let id = node_ids.get(name).copied();
                        last = Some((name, id));
                        id
                    }
                };
                if let Some(id) = id {
                    snapshot.add_pod(id, (*pod).clone());
                }
            }
            None => pending.push((*pod).clone()),
        }
    }
    // A placeholder for every upcoming node of every group (docs/behaviour.md LOOP-112).
    for view in views {
        let upcoming = report.group(&view.id).map_or(0, |g| g.upcoming);
        if upcoming > 0 {
            inject_upcoming_nodes(&mut snapshot, view, upcoming);
        }
    }

    // docs/behaviour.md SU-15: recreatable pods of nodes being drained are planned for as if
    // pending.
    let draining_pods: Vec<Arc<Pod>> = pods
        .iter()
        .filter(|p| {
            p.node_name
                .as_ref()
                .is_some_and(|n| draining.contains(n.as_str()))
        })
        .filter(|p| !p.is_mirror_pod() && !p.is_daemonset_pod())
        .map(|p| {
            let mut pod = (***p).clone();
            pod.node_name = None;
            Arc::new(pod)
        })
        .collect();
    LoopSnapshot {
        snapshot,
        pending,
        draining_pods,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::{Node, Resources};

    /// Every bound pod lands on the node it names, whether the pods of a node come in a run or
    /// interleaved with others; pods of a node not in the cluster are left out, and unbound pods
    /// are pending.
    #[test]
    fn bound_pods_land_on_their_own_nodes_in_any_order() {
        let nodes: Vec<Arc<Node>> = (0..4)
            .map(|i| Arc::new(Node::new(format!("n{i}"), Resources::new(64_000, 64 << 30))))
            .collect();
        let pods: Vec<Arc<Pod>> = (0..30)
            .map(|i| {
                let mut pod = Pod::new("ns", format!("p{i}"));
                pod.node_name = match i {
                    0..10 => Some(ferroscale_model::format_compact!("n{}", i / 5)),
                    10..20 => Some(ferroscale_model::format_compact!("n{}", i % 4)),
                    20..25 => Some("gone".into()),
                    _ => None,
                };
                Arc::new(pod)
            })
            .collect();
        let objects = ClusterObjects {
            nodes,
            pods: Arc::new(pods.clone()),
            ..ClusterObjects::default()
        };
        let built = build_snapshot(SnapshotInput {
            objects: &objects,
            report: &ClusterStateReport::default(),
            views: &[],
            draining: &HashSet::new(),
            options: &AutoscalingOptions::default(),
        });
        for pod in &pods {
            let on: Vec<&str> = built
                .snapshot
                .nodes()
                .filter(|(_, info)| info.pods.iter().any(|p| Arc::ptr_eq(p, pod)))
                .map(|(_, info)| info.node.name.as_str())
                .collect();
            let expected: Vec<&str> = pod
                .node_name
                .as_deref()
                .filter(|n| *n != "gone")
                .into_iter()
                .collect();
            assert_eq!(on, expected, "{}", pod.name);
        }
        assert_eq!(built.snapshot.pod_count(), 20);
        assert_eq!(built.pending.len(), 5);
    }
}
