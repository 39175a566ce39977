//! Each node's utilization and emptiness, kept from one loop to the next.
//!
//! Measuring a node reads every pod on it: at 65,000 nodes and a million pods, a million pods per
//! loop, most of them unchanged. The memo keeps, per snapshot slot, what the last loop measured
//! together with the node and the pods it measured (shared handles, which also keep their
//! addresses from being reused). A loop whose node in that slot is the same object with the same
//! pod objects in the same order, measured by the same rules, takes the kept answer after reading
//! only the two lists of handles.
//!
//! An answer that depends on the clock is never kept: a node with a pod that is being deleted
//! (whether it is long-terminating changes with time) or with local DRA devices (whose allocation
//! lives outside the pod list) is measured every loop. Debug builds measure a kept node again and
//! compare.

use std::sync::Arc;

use ferroscale_model::{Node, Pod};
use ferroscale_scheduling::PoolUtilization;

use super::eligibility::looks_empty;
use super::utilization::{Utilization, UtilizationRules};
use crate::same_arcs;

/// What one node measured; `Err` names the resource with zero allocatable.
pub(super) type Measure = Result<Utilization, &'static str>;

/// The rules a kept answer was measured by, less the clock (kept answers do not depend on it).
#[derive(Debug, Clone, PartialEq, Eq)]
struct RulesKey {
    ignore_daemonsets: bool,
    ignore_mirror_pods: bool,
    expendable_cutoff: i32,
    gpu_label: String,
}

impl RulesKey {
    fn of(rules: &UtilizationRules<'_>) -> RulesKey {
        RulesKey {
            ignore_daemonsets: rules.ignore_daemonsets,
            ignore_mirror_pods: rules.ignore_mirror_pods,
            expendable_cutoff: rules.expendable_cutoff,
            gpu_label: rules.gpu_label.to_string(),
        }
    }

    fn matches(&self, rules: &UtilizationRules<'_>) -> bool {
        self.ignore_daemonsets == rules.ignore_daemonsets
            && self.ignore_mirror_pods == rules.ignore_mirror_pods
            && self.expendable_cutoff == rules.expendable_cutoff
            && self.gpu_label == rules.gpu_label
    }
}

/// One slot's kept measurement.
#[derive(Debug)]
pub(super) struct Measured {
    node: Arc<Node>,
    pods: Vec<Arc<Pod>>,
    rules: RulesKey,
    measure: Measure,
    empty: bool,
}

/// Per snapshot slot (`NodeId::index`), the last loop's measurement of the node there.
#[derive(Debug, Default)]
pub struct MeasureMemo {
    /// Boxed: a slot is one word, so a loop moves 65,000 words, not 65,000 measurements.
    slots: Vec<Option<Box<Measured>>>,
}

/// Whether a measurement of `pods` can be kept: none of them is being deleted.
fn keepable(pods: &[Arc<Pod>], has_devices: bool) -> bool {
    !has_devices && pods.iter().all(|pod| pod.deletion_time.is_none())
}

/// What a node's measurement leaves in the memo for the next loop.
pub(super) enum Kept {
    Nothing,
    /// The memo answered; its entry stays.
    Reused,
    /// Measured afresh, and keepable.
    Fresh(Box<Measured>),
}

/// One node's measurement as [`MeasureMemo::measure`] made it.
pub(super) struct NodeMeasure {
    pub measure: Measure,
    /// Whether the node looks empty, when that was known on the way (always when kept).
    pub empty: Option<bool>,
    pub kept: Kept,
}

impl MeasureMemo {
    /// Measures `node` with `pods` (in slot `slot`) by `rules`: from `memo` when it holds the
    /// same objects measured by the same rules, else afresh, and then, when the answer can be
    /// kept and there is a memo, with the entry to keep. Debug builds measure a kept answer again
    /// and compare.
    pub(super) fn measure(
        memo: Option<&MeasureMemo>,
        slot: usize,
        node: &Arc<Node>,
        pods: &[Arc<Pod>],
        device_pools: &[PoolUtilization],
        rules: &UtilizationRules<'_>,
    ) -> NodeMeasure {
        let (now, cutoff) = (rules.now, rules.expendable_cutoff);
        // Only keepable measurements are kept, and the pods are the same objects: no pod needs
        // reading to know this one is keepable too.
        let has_devices = !device_pools.is_empty();
        if let Some((measure, empty)) = memo
            .filter(|_| !has_devices)
            .and_then(|memo| memo.get(slot, node, pods, rules))
        {
            debug_assert!(
                measure == rules.measure_with_devices(node, pods, device_pools)
                    && empty == looks_empty(pods, now, cutoff),
                "the kept measurement of node {} differs from a fresh one",
                node.name
            );
            return NodeMeasure {
                measure,
                empty: Some(empty),
                kept: Kept::Reused,
            };
        }
        let measure = rules.measure_with_devices(node, pods, device_pools);
        if memo.is_none() || !keepable(pods, has_devices) {
            return NodeMeasure {
                measure,
                empty: None,
                kept: Kept::Nothing,
            };
        }
        let empty = looks_empty(pods, now, cutoff);
        NodeMeasure {
            measure,
            empty: Some(empty),
            kept: Kept::Fresh(MeasureMemo::entry(node, pods, rules, measure, empty)),
        }
    }

    /// Keeps this loop's measurements only — what the memo answered and what was measured
    /// afresh, per slot: nodes that left, changed or were not checked drop out.
    pub(super) fn keep_only(&mut self, kept: impl IntoIterator<Item = (usize, Kept)>) {
        let mut next = MeasureMemo {
            slots: (0..self.slots.len()).map(|_| None).collect(),
        };
        for (slot, kept) in kept {
            match kept {
                Kept::Nothing => {}
                Kept::Reused => {
                    if let Some(measured) = self.slots.get_mut(slot).and_then(Option::take) {
                        next.put(slot, measured);
                    }
                }
                Kept::Fresh(measured) => next.put(slot, measured),
            }
        }
        *self = next;
    }

    /// The kept measurement of `node` with `pods` in slot `slot`, when it was made of the same
    /// objects by the same rules: `(utilization, looks empty)`.
    fn get(
        &self,
        slot: usize,
        node: &Arc<Node>,
        pods: &[Arc<Pod>],
        rules: &UtilizationRules<'_>,
    ) -> Option<(Measure, bool)> {
        let kept = self.slots.get(slot)?.as_ref()?;
        let same = Arc::ptr_eq(&kept.node, node)
            && same_arcs(&kept.pods, pods)
            && kept.rules.matches(rules);
        same.then_some((kept.measure, kept.empty))
    }

    /// A fresh measurement to keep for the next loop (see [`keepable`]).
    fn entry(
        node: &Arc<Node>,
        pods: &[Arc<Pod>],
        rules: &UtilizationRules<'_>,
        measure: Measure,
        empty: bool,
    ) -> Box<Measured> {
        Box::new(Measured {
            node: node.clone(),
            pods: pods.to_vec(),
            rules: RulesKey::of(rules),
            measure,
            empty,
        })
    }

    /// Keeps `measured` for slot `slot`, replacing what was kept there.
    fn put(&mut self, slot: usize, measured: Box<Measured>) {
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, || None);
        }
        self.slots[slot] = Some(measured);
    }
}

#[cfg(test)]
mod tests {
    use ferroscale_model::{Resources, Timestamp};

    use super::*;

    fn rules_with(gpu_label: &str) -> UtilizationRules<'_> {
        UtilizationRules {
            now: Timestamp::from_secs(1_000),
            ignore_daemonsets: false,
            ignore_mirror_pods: false,
            expendable_cutoff: -10,
            gpu_label,
        }
    }

    fn pod(name: &str) -> Arc<Pod> {
        let mut pod = Pod::new("default", name);
        pod.requests = Resources::new(500, 1 << 20);
        Arc::new(pod)
    }

    /// A kept answer is given back only for the same node object, the same pod objects in the
    /// same order and the same rules; an equal copy of a pod is another pod.
    #[test]
    fn a_kept_measurement_answers_only_for_the_same_objects() {
        let node = Arc::new(Node::new("n", Resources::new(2_000, 1 << 30)));
        let pods = vec![pod("a"), pod("b")];
        let rules = rules_with("");
        let measure = rules.measure(&node, &pods);
        let mut memo = MeasureMemo::default();
        memo.put(3, MeasureMemo::entry(&node, &pods, &rules, measure, false));
        assert_eq!(memo.get(3, &node, &pods, &rules), Some((measure, false)));
        assert_eq!(memo.get(2, &node, &pods, &rules), None, "another slot");
        let copy = Arc::new((*node).clone());
        assert_eq!(
            memo.get(3, &copy, &pods, &rules),
            None,
            "another node object"
        );
        let swapped = vec![pods[1].clone(), pods[0].clone()];
        assert_eq!(memo.get(3, &node, &swapped, &rules), None, "another order");
        let renewed = vec![pods[0].clone(), Arc::new((*pods[1]).clone())];
        assert_eq!(
            memo.get(3, &node, &renewed, &rules),
            None,
            "another pod object"
        );
        assert_eq!(memo.get(3, &node, &pods[..1], &rules), None, "a pod less");
        assert_eq!(
            memo.get(3, &node, &pods, &rules_with("gpu")),
            None,
            "other rules"
        );
    }

    /// The next loop's memo holds what was carried or put, nothing else.
    #[test]
    fn the_next_memo_keeps_only_this_loops_measurements() {
        let node = Arc::new(Node::new("n", Resources::new(2_000, 1 << 30)));
        let pods = vec![pod("a")];
        let rules = rules_with("");
        let measure = rules.measure(&node, &pods);
        let mut memo = MeasureMemo::default();
        for slot in [0, 1, 2] {
            memo.put(
                slot,
                MeasureMemo::entry(&node, &pods, &rules, measure, true),
            );
        }
        let fresh = MeasureMemo::entry(&node, &pods, &rules, measure, true);
        memo.keep_only([
            (0, Kept::Nothing),
            (1, Kept::Reused),
            (3, Kept::Fresh(fresh)),
        ]);
        assert!(memo.get(0, &node, &pods, &rules).is_none());
        assert!(memo.get(1, &node, &pods, &rules).is_some());
        assert!(memo.get(2, &node, &pods, &rules).is_none());
        assert!(memo.get(3, &node, &pods, &rules).is_some());
    }

    /// A pod being deleted makes the answer depend on the clock; local devices make it depend on
    /// allocations outside the pods. Neither is kept.
    #[test]
    fn answers_that_depend_on_the_clock_or_devices_are_not_kept() {
        let mut deleting = (*pod("a")).clone();
        deleting.deletion_time = Some(Timestamp::from_secs(900));
        assert!(keepable(&[pod("b")], false));
        assert!(!keepable(&[pod("b"), Arc::new(deleting)], false));
        assert!(!keepable(&[pod("b")], true));
    }
}
