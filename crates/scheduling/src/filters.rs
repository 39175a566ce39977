//! The kube-scheduler Filter plugins, as the autoscaler simulates them: whether a pod fits a node
//! in a snapshot, and if not, which filter rejected it.

use std::fmt;

use ferroscale_model::Pod;
use ferroscale_model::taints::first_untolerated;

use crate::snapshot::{NodeId, Snapshot};

/// Which filter rejected a pod; stable, for aggregation and counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnfitKind {
    NodeUnschedulable,
    NodeName,
    NodeAffinity,
    TaintToleration,
    NodePorts,
    InsufficientResource,
    PodAffinity,
    PodAntiAffinity,
    ExistingPodAntiAffinity,
    TopologySpread,
    NodeMissing,
}

/// Why a pod does not fit a node. `Display` gives the scheduler's wording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    NodeUnschedulable,
    NodeName,
    NodeAffinity,
    UntoleratedTaint { key: String, value: String, effect: &'static str },
    NodePorts,
    InsufficientResource(String),
    PodAffinity,
    PodAntiAffinity,
    ExistingPodAntiAffinity,
    TopologySpread { topology_key: String },
    /// The spread constraint's topology key is missing from the node's labels.
    TopologySpreadMissingLabel { topology_key: String },
    NodeMissing,
}

impl Unfit {
    pub fn kind(&self) -> UnfitKind {
        match self {
            Unfit::NodeUnschedulable => UnfitKind::NodeUnschedulable,
            Unfit::NodeName => UnfitKind::NodeName,
            Unfit::NodeAffinity => UnfitKind::NodeAffinity,
            Unfit::UntoleratedTaint { .. } => UnfitKind::TaintToleration,
            Unfit::NodePorts => UnfitKind::NodePorts,
            Unfit::InsufficientResource(_) => UnfitKind::InsufficientResource,
            Unfit::PodAffinity => UnfitKind::PodAffinity,
            Unfit::PodAntiAffinity => UnfitKind::PodAntiAffinity,
            Unfit::ExistingPodAntiAffinity => UnfitKind::ExistingPodAntiAffinity,
            Unfit::TopologySpread { .. } | Unfit::TopologySpreadMissingLabel { .. } => {
                UnfitKind::TopologySpread
            }
            Unfit::NodeMissing => UnfitKind::NodeMissing,
        }
    }

    /// Filters whose verdict cannot change by placing more pods on other nodes: resources, ports
    /// and every node-only check. Affinity and spread verdicts depend on the rest of the cluster.
    pub fn is_local_to_node(&self) -> bool {
        !matches!(
            self.kind(),
            UnfitKind::PodAffinity
                | UnfitKind::PodAntiAffinity
                | UnfitKind::ExistingPodAntiAffinity
                | UnfitKind::TopologySpread
        )
    }
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfit::NodeUnschedulable => f.write_str("node(s) were unschedulable"),
            Unfit::NodeName => f.write_str("node(s) didn't match the requested node name"),
            Unfit::NodeAffinity => f.write_str("node(s) didn't match Pod's node affinity/selector"),
            Unfit::UntoleratedTaint { key, value, effect } => {
                if value.is_empty() {
                    write!(f, "node(s) had untolerated taint {{{key}: }} ({effect})")
                } else {
                    write!(f, "node(s) had untolerated taint {{{key}: {value}}} ({effect})")
                }
            }
            Unfit::NodePorts => {
                f.write_str("node(s) didn't have free ports for the requested pod ports")
            }
            Unfit::InsufficientResource(name) => write!(f, "Insufficient {name}"),
            Unfit::PodAffinity => f.write_str("node(s) didn't match pod affinity rules"),
            Unfit::PodAntiAffinity => f.write_str("node(s) didn't match pod anti-affinity rules"),
            Unfit::ExistingPodAntiAffinity => {
                f.write_str("node(s) didn't satisfy existing pods anti-affinity rules")
            }
            Unfit::TopologySpread { .. } => {
                f.write_str("node(s) didn't match pod topology spread constraints")
            }
            Unfit::TopologySpreadMissingLabel { topology_key } => write!(
                f,
                "node(s) didn't match pod topology spread constraints (missing required label {topology_key})"
            ),
            Unfit::NodeMissing => f.write_str("node not found in the snapshot"),
        }
    }
}

/// Runs the filters, in the scheduler's order, for `pod` on `node`. The pod must not already be
/// placed in the snapshot.
pub fn check(snapshot: &Snapshot, pod: &Pod, node: NodeId) -> Result<(), Unfit> {
    let info = snapshot.node(node).ok_or(Unfit::NodeMissing)?;
    let n = &info.node;
    if n.unschedulable {
        return Err(Unfit::NodeUnschedulable);
    }
    if !pod.node_selector.iter().all(|(k, v)| n.labels.get(k) == Some(v))
        || pod.required_node_affinity.as_ref().is_some_and(|a| !a.matches(&n.name, &n.labels))
    {
        return Err(Unfit::NodeAffinity);
    }
    if let Some(t) = first_untolerated(&n.taints, &pod.tolerations) {
        return Err(Unfit::UntoleratedTaint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.as_str(),
        });
    }
    if pod.host_ports.iter().any(|hp| info.host_ports.iter().any(|used| used.conflicts_with(hp))) {
        return Err(Unfit::NodePorts);
    }
    if let Some(name) = pod.requests.first_insufficient(&info.free()) {
        return Err(Unfit::InsufficientResource(name.to_string()));
    }
    if info.requested.pods + 1 > n.allocatable.pods {
        return Err(Unfit::InsufficientResource("pods".to_string()));
    }
    Ok(())
}

/// The first node, in handle order starting at `start` and wrapping around, on which `pod` fits.
/// Starting one past the previous match spreads consecutive pods the way upstream's round-robin
/// placement does.
pub fn find_node(snapshot: &Snapshot, pod: &Pod, start: usize) -> Option<NodeId> {
    let slots = snapshot.slot_count();
    if slots == 0 {
        return None;
    }
    let start = start % slots;
    (start..slots)
        .chain(0..start)
        .map(|i| NodeId(i as u32))
        .find(|id| snapshot.node(*id).is_some() && check(snapshot, pod, *id).is_ok())
}
