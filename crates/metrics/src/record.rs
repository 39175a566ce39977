//! How one loop's [`LoopOutcome`] fills the registry: gauges are set, counters incremented,
//! histograms and the summary observed, each as upstream updates it (docs/behaviour.md OBS-101,
//! OBS-120–OBS-128).

use std::time::Duration;

use ferroscale_core::AutoscalingOptions;
use ferroscale_core::accelerators::AcceleratorLabels;
use ferroscale_core::act::deletions::{ActuationStep, RemovalKind};
use ferroscale_core::act::scale_up::ScaleUpExecution;
use ferroscale_core::autoscaler::{
    GatherCall, GatherFailure, LoopError, LoopOutcome, PlannedAction,
};
use ferroscale_core::scale_up::BinpackingEstimate;
use ferroscale_model::{ConditionStatus, Quantity};
use prometheus::IntCounterVec;

use crate::registry::{
    AutoscalerMetrics, NODE_STATES, PerNodeGroupMetrics, SKIPPED_PODS_REQUESTOR,
    UNREMOVABLE_REASONS,
};

/// The `reason` of a scale-up the cloud refused, and of the nodes it did not create.
const CLOUD_PROVIDER_ERROR: &str = "cloudProviderError";
/// The `reason` of a scale-up whose nodes did not register in time.
const TIMEOUT: &str = "timeout";

impl AutoscalerMetrics {
    /// Everything one iteration tells: gauges are set, counters incremented. `loop_duration` is
    /// the wall time of `run_once` as the caller measured it.
    pub fn record_loop(
        &self,
        outcome: &LoopOutcome,
        options: &AutoscalingOptions,
        loop_duration: Duration,
    ) {
        let now_secs = outcome.now.secs();
        self.function_duration_quantile_seconds.advance_to(now_secs);
        let activity = |name: &str| self.last_activity.with_label_values(&[name]).set(now_secs);
        activity("main");
        self.observe_function("main", loop_duration);
        self.set_limits(options);
        self.pending_node_deletions
            .set(as_gauge(outcome.pending_node_deletions));

        // A failed gather call does not end the iteration, but it is a provider call that
        // failed: counted with the provider errors that end one, and logged.
        if !outcome.gather_failures.is_empty() {
            self.errors_total
                .with_label_values(&["cloudProviderError"])
                .inc_by(outcome.gather_failures.len() as u64);
            log_gather_failures(&outcome.gather_failures);
        }
        if let Some(error) = &outcome.error {
            let error_type = match error {
                LoopError::Gather(_) => "apiCallError",
                LoopError::Refresh(_) | LoopError::NodeGroups(_) => "cloudProviderError",
            };
            self.errors_total.with_label_values(&[error_type]).inc();
            // The iteration stopped before the cluster state was computed: keep the last values.
            return;
        }
        self.ferroscale.record(outcome);
        // A view that may be behind the API server is an API failure too: the iteration went
        // on without scale-down (docs/behaviour.md LOOP-121), and it is not a successful one.
        if !outcome.caches_behind.is_empty() {
            self.errors_total.with_label_values(&["apiCallError"]).inc();
        } else {
            activity("mainSuccessful");
        }
        for (function, millis) in &outcome.function_millis {
            self.observe_function(function, Duration::from_secs_f64(millis.max(0.0) / 1000.0));
        }
        if let Some(resources) = outcome.cluster_resources {
            self.set_cluster_resources(resources.cores, resources.memory_bytes);
        }
        for (kind, count) in &outcome.node_taints {
            self.node_taints_count
                .with_label_values(&[kind])
                .set(as_gauge(*count));
        }

        self.record_cluster_state(outcome, options);
        self.record_device_mismatches(outcome);
        if outcome.ended_early.is_none() {
            activity("autoscaling");
            self.record_pending_pods(outcome);
        }
        self.record_scale_up(outcome);
        if options.emit_per_nodegroup_metrics
            && let Some(per_group) = self.per_node_group_metrics()
        {
            per_group.record(outcome);
        }
        self.record_scale_down(outcome);
    }

    /// Health, node counts, node groups and their bounds.
    fn record_cluster_state(&self, outcome: &LoopOutcome, options: &AutoscalingOptions) {
        let state = &outcome.cluster_state;
        self.cluster_safe_to_autoscale
            .set(i64::from(state.cluster_healthy));
        let total = &state.total;
        for (label, count) in NODE_STATES.iter().zip([
            total.ready,
            total.unready,
            total.not_started,
            total.suspended,
            total.long_unregistered,
            total.unregistered,
        ]) {
            self.nodes_count
                .with_label_values(&[label])
                .set(as_gauge(count));
        }
        let autoprovisioned = outcome.node_groups.iter().filter(|g| !g.exists).count();
        self.node_groups_count
            .with_label_values(&["autoscaled"])
            .set(as_gauge(outcome.node_groups.len() - autoprovisioned));
        self.node_groups_count
            .with_label_values(&["autoprovisioned"])
            .set(as_gauge(autoprovisioned));
        let max_sum: usize = outcome.node_groups.iter().map(|g| g.max_size).sum();
        let max_nodes = if options.max_nodes_total > 0 {
            max_sum.min(options.max_nodes_total)
        } else {
            max_sum
        };
        self.max_nodes_count.set(as_gauge(max_nodes));
    }

    /// `dra_node_template_resources_mismatch`: the drivers of this loop's templates only, so a
    /// driver no group uses any more is dropped (docs/behaviour.md OBS-129).
    fn record_device_mismatches(&self, outcome: &LoopOutcome) {
        self.dra_node_template_resources_mismatch.reset();
        for (driver, mismatch) in &outcome.cluster_state.device_mismatches {
            for (kind, count) in [("missing", mismatch.missing), ("extra", mismatch.extra)] {
                self.dra_node_template_resources_mismatch
                    .with_label_values(&[driver, kind])
                    .set(count as f64);
            }
        }
    }

    /// `unschedulable_pods_count` and `skipped_pods_count`.
    fn record_pending_pods(&self, outcome: &LoopOutcome) {
        let unschedulable = outcome
            .pending_pods
            .iter()
            .filter(|pod| {
                pod.scheduled_condition.as_ref().is_some_and(|c| {
                    c.status == ConditionStatus::False && c.reason == "Unschedulable"
                })
            })
            .count();
        self.unschedulable_pods_count
            .with_label_values(&["unschedulable"])
            .set(as_gauge(unschedulable));
        self.unschedulable_pods_count
            .with_label_values(&["scheduler_unprocessed"])
            .set(as_gauge(outcome.pending_pods.len() - unschedulable));
        // Ferroscale's simulation of pending pods takes every pod (docs/behaviour.md SU-111).
        self.skipped_pods_count
            .with_label_values(&[SKIPPED_PODS_REQUESTOR])
            .set(0);
    }

    /// The scale-up plans' observations and the resizes' counters, GPU and DRA labels from each
    /// group's template (docs/behaviour.md OBS-123, OBS-126, OBS-127).
    fn record_scale_up(&self, outcome: &LoopOutcome) {
        for plan in [&outcome.scale_up, &outcome.min_size_enforcement]
            .into_iter()
            .flatten()
        {
            for reason in &plan.skipped_scale_events {
                self.skipped_scale_events_count
                    .with_label_values(&["up", reason])
                    .inc();
            }
        }
        // Every estimate the iteration made, the salvo rounds' too (min-size enforcement makes
        // none).
        for plan in outcome.scale_up.iter().chain(&outcome.salvo_rounds) {
            for estimate in &plan.binpacking_estimates {
                self.observe_binpacking(estimate);
            }
        }
        if let Some(plan) = &outcome.scale_up {
            self.last_activity
                .with_label_values(&["scaleUp"])
                .set(outcome.now.secs());
            self.overflowing_controllers_count
                .set(as_gauge(plan.overflowing_controllers));
        }
        let labels_of = |group: &str| {
            outcome
                .group_accelerators
                .get(group)
                .cloned()
                .unwrap_or_default()
        };
        for execution in [&outcome.scale_up_execution, &outcome.min_size_execution]
            .into_iter()
            .flatten()
        {
            self.record_execution(execution, &labels_of);
        }
        for timed_out in &outcome.cluster_state.timed_out_scale_ups {
            self.count_failed_scale_up(TIMEOUT, &labels_of(&timed_out.group_id));
            self.failed_node_creations_total
                .with_label_values(&[TIMEOUT])
                .inc_by(timed_out.missing as u64);
        }
    }

    fn record_execution(
        &self,
        execution: &ScaleUpExecution,
        labels_of: &dyn Fn(&str) -> AcceleratorLabels,
    ) {
        for increase in &execution.succeeded {
            count_by_accelerator(
                (&self.scaled_up_nodes_total, &self.scaled_up_gpu_nodes_total),
                &[],
                &labels_of(&increase.group_id),
                increase.delta() as u64,
            );
        }
        for (index, (increase, _)) in execution.failed.iter().enumerate() {
            let reason = execution
                .failed_scale_up_reasons
                .get(index)
                .copied()
                .unwrap_or(CLOUD_PROVIDER_ERROR);
            self.count_failed_scale_up(reason, &labels_of(&increase.group_id));
            self.failed_node_creations_total
                .with_label_values(&[reason])
                .inc_by(increase.delta() as u64);
        }
    }

    fn count_failed_scale_up(&self, reason: &str, labels: &AcceleratorLabels) {
        count_by_accelerator(
            (
                &self.failed_scale_ups_total,
                &self.failed_gpu_scale_ups_total,
            ),
            &[reason],
            labels,
            1,
        );
    }

    /// `binpacking_heterogeneity`: the template's instance type and CPU count as a Kubernetes
    /// quantity, the namespaces in buckets that keep the label's values few, as upstream.
    fn observe_binpacking(&self, estimate: &BinpackingEstimate) {
        let namespaces = match estimate.namespaces {
            0..=5 => estimate.namespaces.to_string(),
            6..=10 => "6-10".to_string(),
            _ => "11+".to_string(),
        };
        let cpu = Quantity::from_millis(estimate.cpu_capacity_milli).to_string();
        self.binpacking_heterogeneity
            .with_label_values(&[&estimate.instance_type, &cpu, &namespaces])
            .observe(estimate.equivalence_groups as f64);
    }

    /// The scale-down plan's gauges, the deletions' counters and the evictions.
    fn record_scale_down(&self, outcome: &LoopOutcome) {
        if let Some(plan) = &outcome.scale_down {
            self.last_activity
                .with_label_values(&["scaleDown"])
                .set(outcome.now.secs());
            if let Some(skipped) = plan.max_node_skip_eval {
                self.max_node_skip_eval_duration_seconds
                    .set(skipped.as_secs_f64());
            }
            for latency in &plan.removal_latencies {
                self.node_removal_latency_seconds
                    .with_label_values(&[
                        if latency.deleted { "true" } else { "false" },
                        latency.delay_reason.as_str(),
                    ])
                    .observe(latency.latency.as_secs_f64());
            }
            self.unneeded_nodes_count.set(as_gauge(plan.unneeded.len()));
            self.scale_down_in_cooldown.set(i64::from(plan.in_cooldown));
            for reason in UNREMOVABLE_REASONS {
                let count = plan
                    .unremovable
                    .iter()
                    .filter(|node| node.reason == reason)
                    .count();
                self.unremovable_nodes_count
                    .with_label_values(&[reason.as_str()])
                    .set(as_gauge(count));
            }
        }
        for deleted in &outcome.deleted_nodes {
            let reason = if deleted.unready {
                "unready"
            } else {
                match deleted.kind {
                    RemovalKind::Empty => "empty",
                    RemovalKind::Drain => "underutilized",
                }
            };
            let labels = outcome
                .deleted_node_accelerators
                .get(&deleted.node)
                .cloned()
                .unwrap_or_default();
            count_by_accelerator(
                (
                    &self.scaled_down_nodes_total,
                    &self.scaled_down_gpu_nodes_total,
                ),
                &[reason],
                &labels,
                1,
            );
        }
        for report in &outcome.actuation {
            match &report.step {
                ActuationStep::EvictionsStarted { pods, .. } => self
                    .evicted_pods_total
                    .with_label_values(&["succeeded"])
                    .inc_by(pods.len() as u64),
                ActuationStep::EvictionsRetrying { remaining, .. } => self
                    .evicted_pods_total
                    .with_label_values(&["failed"])
                    .inc_by(remaining.len() as u64),
                _ => {}
            }
        }
        if !outcome.dry_run {
            let removed = outcome
                .cluster_state
                .long_unregistered_to_delete
                .iter()
                .filter(|instance| {
                    !outcome.action_errors.iter().any(|(action, _)| {
                        matches!(action, PlannedAction::DeleteInstances { instance_ids, .. }
                            if instance_ids.contains(&instance.instance_id))
                    })
                })
                .count();
            self.old_unregistered_nodes_removed_count
                .inc_by(removed as u64);
        }
    }
}

impl PerNodeGroupMetrics {
    /// One loop's values. Series of groups that disappeared, and backoff reasons that ended, are
    /// dropped rather than left at their last value.
    pub(crate) fn record(&self, outcome: &LoopOutcome) {
        for gauge in [
            &self.node_group_min_count,
            &self.node_group_max_count,
            &self.node_group_target_count,
            &self.node_group_healthiness,
            &self.node_group_backoff_status,
            &self.nodes_count_per_node_group,
        ] {
            gauge.reset();
        }
        for group in &outcome.node_groups {
            let id = group.id.as_str();
            self.node_group_min_count
                .with_label_values(&[id])
                .set(as_gauge(group.min_size));
            self.node_group_max_count
                .with_label_values(&[id])
                .set(as_gauge(group.max_size));
            self.node_group_target_count
                .with_label_values(&[id])
                .set(as_gauge(group.target_size));
        }
        for state in &outcome.cluster_state.groups {
            let id = state.group_id.as_str();
            self.node_group_healthiness
                .with_label_values(&[id])
                .set(i64::from(state.healthy));
            let counts = &state.counts;
            for (label, count) in NODE_STATES.iter().zip([
                counts.ready,
                counts.unready,
                counts.not_started,
                counts.suspended,
                counts.long_unregistered,
                counts.unregistered,
            ]) {
                self.nodes_count_per_node_group
                    .with_label_values(&[label, id])
                    .set(as_gauge(count));
            }
        }
        for group in &outcome.node_groups {
            let id = group.id.as_str();
            match outcome.node_group_backoffs.get(id) {
                Some(code) => {
                    let reason = if code.is_empty() { "unknown" } else { code };
                    self.node_group_backoff_status
                        .with_label_values(&[id, reason])
                        .set(1);
                }
                None => self
                    .node_group_backoff_status
                    .with_label_values(&[id, ""])
                    .set(0),
            }
        }
    }
}

pub(crate) fn as_gauge(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Logs one iteration's gather failures: a warning per failure, except NodeGroupForNode, which
/// can fail for every node outside the groups and is summed up in one line.
fn log_gather_failures(failures: &[GatherFailure]) {
    let (lookups, others): (Vec<&GatherFailure>, Vec<&GatherFailure>) = failures
        .iter()
        .partition(|failure| failure.call == GatherCall::NodeGroupForNode);
    for failure in others {
        tracing::warn!(
            call = %failure.call,
            subject = %failure.subject,
            error = %failure.error,
            "provider call failed while gathering; the iteration went on without its answer"
        );
    }
    if let Some(first) = lookups.first() {
        tracing::warn!(
            call = %first.call,
            failed = lookups.len(),
            first = %first.subject,
            error = %first.error,
            "provider call failed while gathering; the nodes stay outside every group this iteration"
        );
    }
}

/// Adds `count` to a counter labelled `leading` then by accelerator (`gpu_resource_name`,
/// `gpu_name`, `dra_drivers`) and, for a GPU node, to its GPU-only twin labelled `leading` then
/// `gpu_resource_name`, `gpu_name`: upstream counts a GPU node's scale-up, failed scale-up or
/// scale-down in both.
fn count_by_accelerator(
    (all, gpu_only): (&IntCounterVec, &IntCounterVec),
    leading: &[&str],
    labels: &AcceleratorLabels,
    count: u64,
) {
    let mut values = leading.to_vec();
    values.extend([
        labels.gpu_resource_name.as_str(),
        labels.gpu_name.as_str(),
        labels.dra_drivers.as_str(),
    ]);
    all.with_label_values(&values).inc_by(count);
    if labels.has_gpu() {
        values.truncate(leading.len() + 2);
        gpu_only.with_label_values(&values).inc_by(count);
    }
}
