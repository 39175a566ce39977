//! A Kubernetes Node as the autoscaler needs it: identity, labels, taints, capacity, readiness.

use crate::labels::{HOSTNAME, Labels};
use crate::resources::Resources;
use crate::taints::Taint;
use crate::time::Timestamp;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

/// The node conditions that decide readiness (docs/behaviour.md CS-101).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeConditions {
    /// `None` when the node reports no `Ready` condition at all (treated as not ready).
    pub ready: Option<ConditionStatus>,
    pub disk_pressure: bool,
    pub network_unavailable: bool,
    /// Condition `Suspended=True`: the machine is paused; counted apart from ready and unready.
    pub suspended: bool,
    /// Latest transition time among the readiness-relevant conditions.
    pub last_transition: Option<Timestamp>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    pub name: String,
    pub uid: String,
    pub labels: Labels,
    pub annotations: Labels,
    pub taints: Vec<Taint>,
    pub capacity: Resources,
    pub allocatable: Resources,
    pub unschedulable: bool,
    pub provider_id: String,
    pub creation_time: Timestamp,
    pub conditions: NodeConditions,
}

const READINESS_TAINTS: [&str; 3] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/network-unavailable",
];

impl Node {
    /// A Ready, schedulable node with the hostname label set, capacity equal to allocatable.
    pub fn new(name: impl Into<String>, allocatable: Resources) -> Node {
        let name = name.into();
        let mut labels = Labels::new();
        labels.insert(HOSTNAME.to_string(), name.clone());
        Node {
            uid: format!("uid-{name}"),
            labels,
            capacity: allocatable.clone(),
            allocatable,
            conditions: NodeConditions {
                ready: Some(ConditionStatus::True),
                ..NodeConditions::default()
            },
            name,
            ..Node::default()
        }
    }

    /// Upstream readiness: `Ready=True`, no disk pressure, network available, and none of the
    /// readiness taints.
    pub fn is_ready(&self) -> bool {
        self.conditions.ready == Some(ConditionStatus::True)
            && !self.conditions.disk_pressure
            && !self.conditions.network_unavailable
            && !self
                .taints
                .iter()
                .any(|t| READINESS_TAINTS.contains(&t.key.as_str()))
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    pub fn has_taint(&self, key: &str) -> bool {
        self.taints.iter().any(|t| t.key == key)
    }
}

/// Annotation on the placeholders the autoscaler puts in its snapshot for requested-but-not-ready
/// nodes.
pub const UPCOMING_NODE_ANNOTATION: &str = "cluster-autoscaler.k8s.io/upcoming-node";

/// Whether a snapshot node is such a placeholder.
pub fn is_upcoming_node(node: &Node) -> bool {
    node.annotations
        .get(UPCOMING_NODE_ANNOTATION)
        .is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taints::TaintEffect;

    #[test]
    fn readiness_follows_conditions_and_taints() {
        let mut n = Node::new("n1", Resources::new(1000, 1 << 30));
        assert!(n.is_ready());
        assert_eq!(n.label(HOSTNAME), Some("n1"));
        n.conditions.disk_pressure = true;
        assert!(!n.is_ready());
        n.conditions.disk_pressure = false;
        n.taints.push(Taint::new(
            "node.kubernetes.io/not-ready",
            "",
            TaintEffect::NoSchedule,
        ));
        assert!(!n.is_ready());
        n.taints.clear();
        n.conditions.ready = None;
        assert!(!n.is_ready());
    }
}
