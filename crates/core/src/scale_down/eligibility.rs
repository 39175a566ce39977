//! Candidates and eligibility (docs/behaviour.md SD-103, SD-50–SD-63, SD-111): which nodes may be
//! simulated for removal at all, in upstream's order of checks, and the order the candidates are
//! simulated in.

use std::time::Duration;

use ferroscale_model::taints::TO_BE_DELETED;
use ferroscale_model::{Node, Pod, Timestamp};

use super::utilization::{Utilization, UtilizationRules, is_long_terminating};
use super::{BEING_DELETED_TAINT_MAX_AGE, SCALE_DOWN_DISABLED_ANNOTATION, UnremovableReason};
use crate::options::AutoscalingOptions;
use crate::scale_up::NodeGroupView;

/// A `ToBeDeletedByClusterAutoscaler` taint younger than five minutes: someone is deleting the
/// node. A taint whose time cannot be read is treated as fresh, so the node is left alone.
pub(crate) fn is_being_deleted(node: &Node, now: Timestamp) -> bool {
    node.taints
        .iter()
        .filter(|t| t.key == TO_BE_DELETED)
        .any(|t| {
            let added = t
                .value
                .parse::<i64>()
                .ok()
                .map(Timestamp::from_secs)
                .or(t.time_added);
            match added {
                Some(added) => now < added + BEING_DELETED_TAINT_MAX_AGE,
                None => true,
            }
        })
}

pub(super) fn scale_down_disabled_by_annotation(node: &Node) -> bool {
    node.annotations
        .get(SCALE_DOWN_DISABLED_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// Thresholds and switches after the group's overrides (`GetOptions`).
#[derive(Debug, Clone, Copy)]
pub(super) struct GroupScaleDownOptions {
    pub utilization_threshold: f64,
    pub gpu_utilization_threshold: f64,
    pub unneeded_time: Duration,
    pub unready_time: Duration,
    pub ignore_daemonsets_utilization: bool,
}

impl GroupScaleDownOptions {
    pub fn of(group: Option<&NodeGroupView>, options: &AutoscalingOptions) -> Self {
        let o = group.map(|g| &g.options);
        GroupScaleDownOptions {
            utilization_threshold: o
                .and_then(|o| o.scale_down_utilization_threshold)
                .unwrap_or(options.scale_down_utilization_threshold),
            gpu_utilization_threshold: o
                .and_then(|o| o.scale_down_gpu_utilization_threshold)
                .unwrap_or(options.scale_down_gpu_utilization_threshold),
            unneeded_time: o
                .and_then(|o| o.scale_down_unneeded_time)
                .unwrap_or(options.scale_down_unneeded_time),
            unready_time: o
                .and_then(|o| o.scale_down_unready_time)
                .unwrap_or(options.scale_down_unready_time),
            ignore_daemonsets_utilization: o
                .and_then(|o| o.ignore_daemonsets_utilization)
                .unwrap_or(options.ignore_daemonsets_utilization),
        }
    }
}

/// The verdict of checks 1–5 of 3.3 on one candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Eligibility {
    Eligible(Utilization),
    Unremovable(UnremovableReason, Option<Utilization>),
}

/// Runs the eligibility checks in upstream's order. `group` is `None` for nodes outside
/// autoscaled groups. The measurement is left to `measure`, given the rules to measure by (the
/// caller may have kept the answer from the last loop).
pub(super) fn check_eligibility_with(
    node: &Node,
    group: Option<&NodeGroupView>,
    now: Timestamp,
    options: &AutoscalingOptions,
    gpu_label: &str,
    measure: impl FnOnce(&UtilizationRules<'_>) -> Result<Utilization, &'static str>,
) -> Eligibility {
    use UnremovableReason as R;
    if is_being_deleted(node, now) {
        return Eligibility::Unremovable(R::CurrentlyBeingDeleted, None);
    }
    if scale_down_disabled_by_annotation(node) {
        return Eligibility::Unremovable(R::ScaleDownDisabledAnnotation, None);
    }
    let Some(group) = group else {
        return Eligibility::Unremovable(R::NotAutoscaled, None);
    };
    if !options.scale_down_unready_enabled && !node.is_ready() {
        return Eligibility::Unremovable(R::ScaleDownUnreadyDisabled, None);
    }
    let group_options = GroupScaleDownOptions::of(Some(group), options);
    let rules = UtilizationRules {
        now,
        ignore_daemonsets: group_options.ignore_daemonsets_utilization,
        ignore_mirror_pods: options.ignore_mirror_pods_utilization,
        expendable_cutoff: options.expendable_pods_priority_cutoff,
        gpu_label,
    };
    // A node with local DRA devices is measured by them and compared with the ordinary
    // threshold, as upstream does (docs/dra.md DRA-130).
    let Ok(utilization) = measure(&rules) else {
        return Eligibility::Unremovable(R::UnexpectedError, None);
    };
    let threshold = if rules.is_gpu_node(node) {
        group_options.gpu_utilization_threshold
    } else {
        group_options.utilization_threshold
    };
    if utilization.value > threshold {
        return Eligibility::Unremovable(R::NotUnderutilized, Some(utilization));
    }
    Eligibility::Eligible(utilization)
}

/// Whether any pod would need a new place if the node went: everything except mirror,
/// long-terminating, DaemonSet and expendable pods. Used to simulate empty nodes first
/// (docs/behaviour.md SD-103).
pub(super) fn looks_empty<'p>(
    pods: impl IntoIterator<Item = &'p std::sync::Arc<Pod>>,
    now: Timestamp,
    expendable_cutoff: i32,
) -> bool {
    pods.into_iter().all(|p| {
        p.is_mirror_pod()
            || p.is_daemonset_pod()
            || is_long_terminating(p, now)
            || p.is_expendable(expendable_cutoff)
    })
}

#[cfg(test)]
mod tests {
    use ferroscale_model::{Resources, Taint, TaintEffect};
    use ferroscale_scheduling::PoolUtilization;

    use super::*;

    /// The checks with the measurement of `pods` made on the spot.
    fn check_eligibility<'p>(
        node: &Node,
        pods: impl IntoIterator<Item = &'p std::sync::Arc<Pod>>,
        group: Option<&NodeGroupView>,
        now: Timestamp,
        options: &AutoscalingOptions,
        gpu_label: &str,
        device_pools: &[PoolUtilization],
    ) -> Eligibility {
        check_eligibility_with(node, group, now, options, gpu_label, |rules| {
            rules.measure_with_devices(node, pods, device_pools)
        })
    }

    fn node() -> Node {
        Node::new("n", Resources::new(1000, 1 << 30))
    }

    #[test]
    fn fresh_deletion_taint_marks_a_node_being_deleted_for_five_minutes() {
        let now = Timestamp::from_secs(10_000);
        let mut n = node();
        assert!(!is_being_deleted(&n, now));
        n.taints.push(Taint::new(
            TO_BE_DELETED,
            (now.secs() - 299).to_string(),
            TaintEffect::NoSchedule,
        ));
        assert!(is_being_deleted(&n, now));
        n.taints[0].value = (now.secs() - 301).to_string();
        assert!(!is_being_deleted(&n, now));
        n.taints[0].value = "garbage".into();
        assert!(is_being_deleted(&n, now), "unreadable time: leave it alone");
    }

    #[test]
    fn checks_run_in_order() {
        let now = Timestamp::from_secs(10_000);
        let options = AutoscalingOptions::default();
        let group = NodeGroupView::new("g", 0, 10, 5, None);
        let mut n = node();
        n.annotations
            .insert(SCALE_DOWN_DISABLED_ANNOTATION.into(), "true".into());
        // The annotation is checked before group membership.
        assert_eq!(
            check_eligibility(&n, &[], None, now, &options, "", &[]),
            Eligibility::Unremovable(UnremovableReason::ScaleDownDisabledAnnotation, None)
        );
        n.annotations.clear();
        assert_eq!(
            check_eligibility(&n, &[], None, now, &options, "", &[]),
            Eligibility::Unremovable(UnremovableReason::NotAutoscaled, None)
        );
        assert!(matches!(
            check_eligibility(&n, &[], Some(&group), now, &options, "", &[]),
            Eligibility::Eligible(_)
        ));
    }

    #[test]
    fn group_overrides_win_over_flags() {
        let options = AutoscalingOptions::default();
        let mut group = NodeGroupView::new("g", 0, 10, 5, None);
        group.options.scale_down_utilization_threshold = Some(0.8);
        let o = GroupScaleDownOptions::of(Some(&group), &options);
        assert_eq!(o.utilization_threshold, 0.8);
        assert_eq!(o.unneeded_time, options.scale_down_unneeded_time);
    }
}
