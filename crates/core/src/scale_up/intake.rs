//! Which pods drive a scale-up (docs/behaviour.md SU-01–SU-15, and the pod classification of
//! LOOP-109): unschedulable pods and unprocessed pods of bypassed schedulers, minus expendable
//! pods, plus the pods of nodes being drained; then pods that fit existing or upcoming nodes are
//! placed there (filter-out-schedulable), DaemonSet pods and young pods are dropped.

use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::pod::POD_SCALE_UP_DELAY;
use ferroscale_model::{ConditionStatus, Pod, Timestamp, parse_go_duration};
use ferroscale_scheduling::{NodeId, Snapshot, find_node};

use crate::options::AutoscalingOptions;

use super::equivalence::{EquivalenceMemo, group_pods_counting_overflow};

/// The same window for GPU pods, which tend to arrive in slower batches.
pub(super) const NEW_GPU_POD_WINDOW: Duration = Duration::from_secs(30);

/// How the scheduler sees a pending pod.
fn is_unprocessed_by_bypassed_scheduler(pod: &Pod, options: &AutoscalingOptions) -> bool {
    options
        .bypassed_scheduler_names
        .iter()
        .any(|name| name.as_str() == pod.scheduler_name.as_str())
        && pod
            .scheduled_condition
            .as_ref()
            .is_none_or(|c| c.status == ConditionStatus::False && c.reason.is_empty())
}

/// Classifies the pending pods, places nominated pods on their nominated node, and returns the
/// candidates before the filter-out-schedulable step.
pub(super) fn collect_candidates(
    snapshot: &mut Snapshot,
    pending: &[Arc<Pod>],
    draining: &[Arc<Pod>],
    options: &AutoscalingOptions,
) -> Vec<Arc<Pod>> {
    let cutoff = options.expendable_pods_priority_cutoff;
    let mut candidates = Vec::new();
    for pod in pending {
        if !options.allowed_scheduler_names.is_empty()
            && !options
                .allowed_scheduler_names
                .iter()
                .any(|name| name.as_str() == pod.scheduler_name.as_str())
        {
            continue;
        }
        if pod.deletion_time.is_some() || pod.is_bound() || pod.is_terminal() {
            continue;
        }
        if pod.is_expendable(cutoff) {
            continue;
        }
        if let Some(nominated) = &pod.nominated_node_name {
            // Waiting for preemption on that node: it counts as placed there.
            if let Some(id) = snapshot.node_id(nominated) {
                snapshot.add_pod(id, pod.clone());
            }
            continue;
        }
        if pod.is_marked_unschedulable() || is_unprocessed_by_bypassed_scheduler(pod, options) {
            candidates.push(pod.clone());
        }
    }
    for pod in draining {
        let recreatable = !pod.is_mirror_pod()
            && !pod.is_daemonset_pod()
            && pod.deletion_time.is_none()
            && !pod.is_expendable(cutoff);
        if recreatable {
            let mut copy = (**pod).clone();
            copy.node_name = None;
            candidates.push(Arc::new(copy));
        }
    }
    candidates
}

/// Packs candidates, highest priority first, into the snapshot's existing and upcoming nodes. Pods
/// that fit stay placed. Once a pod of an equivalence group fits nowhere, its equal siblings are
/// not simulated again (the similar-pod memo). Returns the pods that still need room, the keys
/// of the placed ones, and how many controllers had too many shapes for the memo (upstream's
/// `overflowing_controllers_count`, docs/behaviour.md OBS-126).
pub(super) fn filter_out_schedulable(
    snapshot: &mut Snapshot,
    candidates: Vec<Arc<Pod>>,
    memo: Option<&mut EquivalenceMemo>,
) -> (Vec<Arc<Pod>>, Vec<String>, usize) {
    if candidates.is_empty() {
        return (candidates, Vec::new(), 0);
    }
    let fresh;
    let (groups, overflowing): (&[Vec<usize>], usize) = match memo {
        Some(memo) => memo.group(&candidates),
        None => {
            fresh = group_pods_counting_overflow(&candidates);
            (&fresh.0, fresh.1)
        }
    };
    if snapshot.node_count() == 0 {
        return (candidates, Vec::new(), overflowing);
    }
    let mut group_of = vec![0usize; candidates.len()];
    for (g, members) in groups.iter().enumerate() {
        for &m in members {
            group_of[m] = g;
        }
    }
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(candidates[i].priority.unwrap_or(0)));
    let mut fits_nowhere = vec![false; groups.len()];
    let mut placed = vec![false; candidates.len()];
    let mut next_start = 0usize;
    for i in order {
        let g = group_of[i];
        if fits_nowhere[g] {
            continue;
        }
        match find_node(snapshot, &candidates[i], next_start) {
            Some(NodeId(id)) => {
                snapshot.add_pod(NodeId(id), candidates[i].clone());
                placed[i] = true;
                next_start = id as usize + 1;
            }
            None => fits_nowhere[g] = true,
        }
    }
    let mut remaining = Vec::new();
    let mut schedulable = Vec::new();
    for (pod, placed) in candidates.into_iter().zip(placed) {
        if placed {
            schedulable.push(pod.key());
        } else {
            remaining.push(pod);
        }
    }
    (remaining, schedulable, overflowing)
}

/// The delay a pod must wait before it may trigger a scale-up: the global delay, or the pod's
/// `pod-scale-up-delay` annotation when that parses and is not smaller.
fn scale_up_delay(pod: &Pod, global: Duration) -> Duration {
    pod.annotations
        .get(POD_SCALE_UP_DELAY)
        .and_then(|v| parse_go_duration(v).ok())
        .filter(|d| *d >= global)
        .unwrap_or(global)
}

/// Drops DaemonSet pods (a new node cannot help a pod pinned to another node) and pods younger
/// than their scale-up delay.
pub(super) fn drop_daemonset_and_young(
    pods: Vec<Arc<Pod>>,
    now: Timestamp,
    options: &AutoscalingOptions,
) -> Vec<Arc<Pod>> {
    let global = options.new_pod_scale_up_delay;
    pods.into_iter()
        // The annotation only ever lengthens the delay: a pod younger than the global delay is
        // dropped without reading its owners or annotations.
        .filter(|p| now.since(p.creation_time) > global)
        .filter(|p| !p.is_daemonset_pod())
        .filter(|p| now.since(p.creation_time) > scale_up_delay(p, global))
        .collect()
}

/// True when the loop should wait for more pods: no bypassed schedulers, and the oldest pod is
/// younger than `new_pods_window` (2 s upstream) or the oldest GPU pod younger than 30 s.
pub(super) fn all_pods_new(
    pods: &[Arc<Pod>],
    now: Timestamp,
    options: &AutoscalingOptions,
) -> bool {
    if !options.bypassed_scheduler_names.is_empty() {
        return false;
    }
    let oldest = pods.iter().map(|p| p.creation_time).min();
    let oldest_gpu = pods
        .iter()
        .filter(|p| p.requests_gpu())
        .map(|p| p.creation_time)
        .min();
    oldest.is_some_and(|t| now.since(t) < options.new_pods_window)
        || oldest_gpu.is_some_and(|t| now.since(t) < NEW_GPU_POD_WINDOW)
}
