//! The cluster objects besides nodes and pods that the engine reads: DaemonSets (their pods land on
//! every new node, so templates must include them), PodDisruptionBudgets (they gate evictions during
//! scale-down), PriorityClasses (they give pods their priority) and Namespaces (their labels feed
//! namespace selectors in pod affinity terms).

use crate::labels::{LabelSelector, Labels};
use crate::pod::Pod;
use crate::time::Timestamp;

/// A DaemonSet: the pod it would run on a node, as a complete model pod (requests, tolerations,
/// node affinity), so the engine can decide whether a template node would receive one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DaemonSet {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: Labels,
    /// The pod template, converted like any pod. Its namespace is the DaemonSet's, its name is the
    /// DaemonSet's name, and it carries a controller owner reference to the DaemonSet.
    pub pod_template: Pod,
    pub creation_time: Timestamp,
}

/// An absolute number or a percentage, as `minAvailable` / `maxUnavailable` allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntOrPercent {
    Int(i32),
    /// Whole percent, 0..=100 or more as written.
    Percent(i32),
}

impl IntOrPercent {
    /// The absolute value against `total`, rounding percentages up as the disruption controller
    /// does.
    pub fn resolve(&self, total: i32) -> i32 {
        match *self {
            IntOrPercent::Int(n) => n,
            IntOrPercent::Percent(p) => {
                let scaled = i64::from(p) * i64::from(total);
                i32::try_from((scaled + 99).div_euclid(100)).unwrap_or(i32::MAX)
            }
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodDisruptionBudget {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `None` (absent in the object) selects no pod; an empty selector selects every pod in the
    /// namespace (policy/v1 semantics).
    pub selector: Option<LabelSelector>,
    pub min_available: Option<IntOrPercent>,
    pub max_unavailable: Option<IntOrPercent>,
    /// `status.disruptionsAllowed` as last computed by the controller, when the object has a status.
    pub disruptions_allowed: Option<i32>,
}

impl PodDisruptionBudget {
    /// Whether the budget covers this pod.
    pub fn covers(&self, pod: &Pod) -> bool {
        pod.namespace == self.namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PreemptionPolicy {
    #[default]
    PreemptLowerPriority,
    Never,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriorityClass {
    pub name: String,
    pub value: i32,
    /// The class pods without a `priorityClassName` get.
    pub global_default: bool,
    pub preemption_policy: PreemptionPolicy,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Namespace {
    pub name: String,
    pub labels: Labels,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_up() {
        assert_eq!(IntOrPercent::Percent(50).resolve(3), 2);
        assert_eq!(IntOrPercent::Percent(10).resolve(10), 1);
        assert_eq!(IntOrPercent::Percent(0).resolve(7), 0);
        assert_eq!(IntOrPercent::Int(4).resolve(100), 4);
    }

    #[test]
    fn pdb_without_selector_covers_nothing() {
        let mut pod = Pod::new("web", "p");
        pod.labels.insert("app".into(), "web".into());
        let mut pdb = PodDisruptionBudget {
            namespace: "web".into(),
            ..Default::default()
        };
        assert!(!pdb.covers(&pod));
        pdb.selector = Some(LabelSelector::default());
        assert!(pdb.covers(&pod));
        pdb.namespace = "other".into();
        assert!(!pdb.covers(&pod));
    }
}
