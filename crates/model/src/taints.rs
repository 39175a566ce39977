//! Node taints and pod tolerations, with the well-known taint keys the autoscaler reads and writes.

use crate::time::Timestamp;

/// Taint put on a node chosen for deletion (NoSchedule; value = Unix seconds).
pub const TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";
/// Soft taint on nodes that are unneeded (PreferNoSchedule; value = Unix seconds).
pub const DELETION_CANDIDATE: &str = "DeletionCandidateOfClusterAutoscaler";
pub const STARTUP_TAINT_PREFIX: &str = "startup-taint.cluster-autoscaler.kubernetes.io/";
pub const IGNORE_TAINT_PREFIX: &str = "ignore-taint.cluster-autoscaler.kubernetes.io/";
pub const STATUS_TAINT_PREFIX: &str = "status-taint.cluster-autoscaler.kubernetes.io/";

/// Taints that node conditions put on nodes; they never belong on a template of a new node.
pub const CONDITION_TAINTS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/unschedulable",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/network-unavailable",
    "node.kubernetes.io/pid-pressure",
    "node.cloudprovider.kubernetes.io/uninitialized",
    "node.cloudprovider.kubernetes.io/shutdown",
    "cloud.google.com/impending-node-termination",
    "NodeWithImpairedVolumes",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn parse(s: &str) -> Option<TaintEffect> {
        match s {
            "NoSchedule" => Some(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
            "NoExecute" => Some(TaintEffect::NoExecute),
            _ => None,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: TaintEffect,
    pub time_added: Option<Timestamp>,
}

impl Taint {
    pub fn new(key: impl Into<String>, value: impl Into<String>, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
            time_added: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TolerationOperator {
    #[default]
    Equal,
    Exists,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Toleration {
    /// Empty with `Exists` tolerates every key.
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    /// `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// The scheduler's `ToleratesTaint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

/// The first taint with effect NoSchedule or NoExecute that no toleration tolerates: the taint that
/// makes the scheduler's TaintToleration filter reject a pod. PreferNoSchedule never rejects.
pub fn first_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints.iter().find(|t| {
        t.effect != TaintEffect::PreferNoSchedule && !tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tol(
        key: &str,
        op: TolerationOperator,
        value: &str,
        effect: Option<TaintEffect>,
    ) -> Toleration {
        Toleration {
            key: key.into(),
            operator: op,
            value: value.into(),
            effect,
        }
    }

    #[test]
    fn toleration_rules() {
        let t = Taint::new("gpu", "true", TaintEffect::NoSchedule);
        use TolerationOperator::*;
        assert!(tol("gpu", Equal, "true", None).tolerates(&t));
        assert!(tol("gpu", Equal, "true", Some(TaintEffect::NoSchedule)).tolerates(&t));
        assert!(!tol("gpu", Equal, "true", Some(TaintEffect::NoExecute)).tolerates(&t));
        assert!(!tol("gpu", Equal, "false", None).tolerates(&t));
        assert!(tol("gpu", Exists, "", None).tolerates(&t));
        assert!(tol("", Exists, "", None).tolerates(&t));
        assert!(!tol("other", Exists, "", None).tolerates(&t));
    }

    #[test]
    fn prefer_no_schedule_never_rejects() {
        let taints = vec![
            Taint::new("soft", "", TaintEffect::PreferNoSchedule),
            Taint::new("hard", "x", TaintEffect::NoExecute),
        ];
        assert_eq!(
            first_untolerated(&taints, &[]).map(|t| t.key.as_str()),
            Some("hard")
        );
        let ok = [tol("hard", TolerationOperator::Exists, "", None)];
        assert!(first_untolerated(&taints, &ok).is_none());
    }
}
