//! Building the loop's snapshot, a pure step: from the
//! gathered objects and the cluster-state report to the snapshot the decide steps share, the
//! pending pods and the pods of nodes being drained.

use std::collections::HashSet;
use std::sync::Arc;

use ferroscale_model::Pod;
use ferroscale_scheduling::{Snapshot, VolumeCatalogue};

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
        .filter(|p| allowed.is_empty() || allowed.contains(&p.scheduler_name))
        .filter(|p| p.deletion_time.is_none() && !p.is_terminal())
        .collect();
    // The filters follow the scheduler profile of `--scheduler-config-file` (docs/behaviour.md
    // SCHED-101), resolved once here for the whole loop.
    let mut snapshot = Snapshot::with_scheduler_profile(options.scheduler_profile());
    // The volume filters read the cluster's claims, volumes, classes and CSINodes
    // (docs/behaviour.md VOL-101–VOL-108); placeholders and template copies carry their group's CSINode.
    snapshot.set_volume_catalogue(Arc::new(VolumeCatalogue::new(&objects.volumes)));
    snapshot.set_csi_node_limits(options.enable_csi_node_aware_scheduling);
    // The DynamicResources filter reads the cluster's devices, classes and claims; the claims'
    // allocations are the devices in use (docs/dra.md DRA-121).
    snapshot.set_dra_objects(&objects.dra);
    for ns in &objects.namespaces {
        snapshot.set_namespace_labels(ns.name.clone(), ns.labels.clone());
    }
    for node in &objects.nodes {
        if !registered_upcoming.contains(node.name.as_str()) {
            snapshot.add_node(node.clone());
        }
    }
    let mut pending: Vec<Arc<Pod>> = Vec::new();
    for pod in &pods {
        match pod.node_name.as_deref() {
            Some(name) => {
                if !pod.is_expendable(cutoff)
                    && let Some(id) = snapshot.node_id(name)
                {
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
        .filter(|p| p.node_name.as_ref().is_some_and(|n| draining.contains(n)))
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
