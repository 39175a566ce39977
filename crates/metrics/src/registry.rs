//! The metrics registry with the upstream names, types and labels (docs/behaviour.md OBS-101, all
//! prefixed `cluster_autoscaler_`), and how one loop's outcome fills it.
//!
//! Counters of the standard label values (error types, failure reasons, scale-down reasons,
//! eviction results, skipped-event reasons) are created at zero so that dashboards and alerts see
//! the series before the first occurrence, as upstream does.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ferroscale_core::AutoscalingOptions;
use ferroscale_core::actuation::{ActuationStep, RemovalKind};
use ferroscale_core::autoscaler::{
    GatherCall, GatherFailure, LoopError, LoopOutcome, PlannedAction,
};
use ferroscale_core::scale_down::UnremovableReason;
use ferroscale_model::ConditionStatus;
use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};
use thiserror::Error;

const PREFIX: &str = "cluster_autoscaler_";

/// The error types of `errors_total`.
pub const ERROR_TYPES: [&str; 7] = [
    "cloudProviderError",
    "apiCallError",
    "internalError",
    "transientError",
    "configurationError",
    "nodeGroupDoesNotExistError",
    "unexpectedScaleDownStateError",
];
const FAILED_SCALE_UP_REASONS: [&str; 3] = ["cloudProviderError", "apiCallError", "timeout"];
const SCALE_DOWN_REASONS: [&str; 3] = ["empty", "underutilized", "unready"];
const EVICTION_RESULTS: [&str; 2] = ["succeeded", "failed"];
const SKIPPED_DIRECTIONS: [&str; 2] = ["up", "down"];
const SKIPPED_REASONS: [&str; 2] = ["CpuResourceLimit", "MemoryResourceLimit"];
const NODE_STATES: [&str; 6] = [
    "ready",
    "unready",
    "notStarted",
    "suspended",
    "longUnregistered",
    "unregistered",
];
const UNREMOVABLE_REASONS: [UnremovableReason; 15] = [
    UnremovableReason::ScaleDownDisabledAnnotation,
    UnremovableReason::ScaleDownUnreadyDisabled,
    UnremovableReason::NotAutoscaled,
    UnremovableReason::NotUnneededLongEnough,
    UnremovableReason::NotUnreadyLongEnough,
    UnremovableReason::NodeGroupMinSizeReached,
    UnremovableReason::AtomicScaleDownFailed,
    UnremovableReason::MinimalResourceLimitExceeded,
    UnremovableReason::CurrentlyBeingDeleted,
    UnremovableReason::NotUnderutilized,
    UnremovableReason::RecentlyUnremovable,
    UnremovableReason::NoPlaceToMovePods,
    UnremovableReason::BlockedByPod,
    UnremovableReason::BlockedByOnCompletionPod,
    UnremovableReason::UnexpectedError,
];
/// `function_duration_seconds`: 150 exponential buckets from 0.1 s to 1800 s.
const DURATION_BUCKET_COUNT: usize = 150;
const DURATION_FIRST_BUCKET: f64 = 0.1;
const DURATION_LAST_BUCKET: f64 = 1800.0;

#[derive(Debug, Error)]
pub enum MetricsError {
    #[error("metric registry: {0}")]
    Prometheus(#[from] prometheus::Error),
}

/// Every metric the engine fills.
#[derive(Clone)]
pub struct AutoscalerMetrics {
    registry: Registry,
    /// Ferroscale's own series (`ferroscale_*`).
    ferroscale: crate::ferroscale::FerroscaleMetrics,
    pub cluster_safe_to_autoscale: IntGauge,
    pub nodes_count: IntGaugeVec,
    pub node_groups_count: IntGaugeVec,
    pub unschedulable_pods_count: IntGaugeVec,
    pub max_nodes_count: IntGauge,
    pub cluster_cpu_current_cores: Gauge,
    pub cpu_limits_cores: IntGaugeVec,
    pub cluster_memory_current_bytes: Gauge,
    pub memory_limits_bytes: IntGaugeVec,
    pub last_activity: IntGaugeVec,
    pub function_duration_seconds: HistogramVec,
    pub errors_total: IntCounterVec,
    pub scaled_up_nodes_total: IntCounterVec,
    pub failed_scale_ups_total: IntCounterVec,
    pub failed_node_creations_total: IntCounterVec,
    pub scaled_down_nodes_total: IntCounterVec,
    pub evicted_pods_total: IntCounterVec,
    pub unneeded_nodes_count: IntGauge,
    pub unremovable_nodes_count: IntGaugeVec,
    pub scale_down_in_cooldown: IntGauge,
    pub old_unregistered_nodes_removed_count: IntCounter,
    pub skipped_scale_events_count: IntCounterVec,
    /// Filled with `--max-node-skip-eval-time-tracker-enabled` (docs/behaviour.md OBS-120).
    pub max_node_skip_eval_duration_seconds: Gauge,
    /// Filled with `--node-removal-latency-tracking-enabled` (docs/behaviour.md OBS-121).
    pub node_removal_latency_seconds: HistogramVec,
    /// Registered on the first loop with `--emit-per-nodegroup-metrics` (docs/behaviour.md
    /// OBS-122), as upstream registers them only with the flag.
    per_node_group: Arc<OnceLock<Result<PerNodeGroupMetrics, String>>>,
}

/// The per-node-group gauges of `--emit-per-nodegroup-metrics`.
#[derive(Clone)]
pub struct PerNodeGroupMetrics {
    pub node_group_min_count: IntGaugeVec,
    pub node_group_max_count: IntGaugeVec,
    pub node_group_target_count: IntGaugeVec,
    pub node_group_healthiness: IntGaugeVec,
    pub node_group_backoff_status: IntGaugeVec,
    pub nodes_count_per_node_group: IntGaugeVec,
}

impl PerNodeGroupMetrics {
    fn register(registry: &Registry) -> Result<PerNodeGroupMetrics, MetricsError> {
        let gauge_vec =
            |short: &str, help: &str, labels: &[&str]| -> Result<IntGaugeVec, MetricsError> {
                let metric = IntGaugeVec::new(Opts::new(name(short), help), labels)?;
                registry.register(Box::new(metric.clone()))?;
                Ok(metric)
            };
        Ok(PerNodeGroupMetrics {
            node_group_min_count: gauge_vec(
                "node_group_min_count",
                "Minimum number of nodes in the node group.",
                &["node_group"],
            )?,
            node_group_max_count: gauge_vec(
                "node_group_max_count",
                "Maximum number of nodes in the node group.",
                &["node_group"],
            )?,
            node_group_target_count: gauge_vec(
                "node_group_target_count",
                "Target number of nodes in the node group.",
                &["node_group"],
            )?,
            node_group_healthiness: gauge_vec(
                "node_group_healthiness",
                "Whether or not the node group is healthy enough for autoscaling: 1 if it is, 0 otherwise.",
                &["node_group"],
            )?,
            node_group_backoff_status: gauge_vec(
                "node_group_backoff_status",
                "Whether or not the node group is backed off from scale-up: 1 if it is, 0 otherwise.",
                &["node_group", "reason"],
            )?,
            nodes_count_per_node_group: gauge_vec(
                "nodes_count_per_node_group",
                "Number of nodes per node group in the cluster.",
                &["state", "node_group"],
            )?,
        })
    }

    /// One loop's values. Series of groups that disappeared, and backoff reasons that ended, are
    /// dropped rather than left at their last value.
    fn record(&self, outcome: &LoopOutcome) {
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

fn name(short: &str) -> String {
    format!("{PREFIX}{short}")
}

impl AutoscalerMetrics {
    pub fn new() -> Result<AutoscalerMetrics, MetricsError> {
        let registry = Registry::new();
        let gauge = |short: &str, help: &str| -> Result<IntGauge, MetricsError> {
            let metric = IntGauge::new(name(short), help)?;
            registry.register(Box::new(metric.clone()))?;
            Ok(metric)
        };
        let gauge_vec =
            |short: &str, help: &str, labels: &[&str]| -> Result<IntGaugeVec, MetricsError> {
                let metric = IntGaugeVec::new(Opts::new(name(short), help), labels)?;
                registry.register(Box::new(metric.clone()))?;
                Ok(metric)
            };
        let float_gauge = |short: &str, help: &str| -> Result<Gauge, MetricsError> {
            let metric = Gauge::new(name(short), help)?;
            registry.register(Box::new(metric.clone()))?;
            Ok(metric)
        };
        let counter_vec =
            |short: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, MetricsError> {
                let metric = IntCounterVec::new(Opts::new(name(short), help), labels)?;
                registry.register(Box::new(metric.clone()))?;
                Ok(metric)
            };
        let factor = (DURATION_LAST_BUCKET / DURATION_FIRST_BUCKET)
            .powf(1.0 / (DURATION_BUCKET_COUNT - 1) as f64);
        let function_duration_seconds = HistogramVec::new(
            HistogramOpts::new(
                name("function_duration_seconds"),
                "Time taken by various parts of the autoscaler loop.",
            )
            .buckets(prometheus::exponential_buckets(
                DURATION_FIRST_BUCKET,
                factor,
                DURATION_BUCKET_COUNT,
            )?),
            &["function"],
        )?;
        registry.register(Box::new(function_duration_seconds.clone()))?;
        let old_unregistered_nodes_removed_count = IntCounter::new(
            name("old_unregistered_nodes_removed_count"),
            "Number of unregistered nodes removed by the autoscaler.",
        )?;
        registry.register(Box::new(old_unregistered_nodes_removed_count.clone()))?;
        // ~1 s to ~24 min: 19 buckets growing by 1.5, as upstream.
        let node_removal_latency_seconds = HistogramVec::new(
            HistogramOpts::new(
                name("node_removal_latency_seconds"),
                "Time an unneeded node waited beyond its threshold until it was removed \
                 (deleted=true) or became needed again (deleted=false).",
            )
            .buckets(prometheus::exponential_buckets(1.0, 1.5, 19)?),
            &["deleted", "delay_reason"],
        )?;
        registry.register(Box::new(node_removal_latency_seconds.clone()))?;
        // GPU and DRA labels stay empty: the engine does not report them per node yet.
        let gpu_labels = ["gpu_resource_name", "gpu_name", "dra_drivers"];
        let metrics = AutoscalerMetrics {
            cluster_safe_to_autoscale: gauge(
                "cluster_safe_to_autoscale",
                "Whether or not the cluster is healthy enough for autoscaling: 1 if it is, 0 otherwise.",
            )?,
            nodes_count: gauge_vec("nodes_count", "Number of nodes in the cluster.", &["state"])?,
            node_groups_count: gauge_vec(
                "node_groups_count",
                "Number of node groups managed by the autoscaler.",
                &["node_group_type"],
            )?,
            unschedulable_pods_count: gauge_vec(
                "unschedulable_pods_count",
                "Number of unschedulable pods in the cluster.",
                &["type"],
            )?,
            max_nodes_count: gauge(
                "max_nodes_count",
                "Maximum number of nodes in all node groups.",
            )?,
            cluster_cpu_current_cores: float_gauge(
                "cluster_cpu_current_cores",
                "Current number of cores in the cluster, minus deleting nodes.",
            )?,
            cpu_limits_cores: gauge_vec(
                "cpu_limits_cores",
                "Minimum and maximum number of cores in the cluster.",
                &["direction"],
            )?,
            cluster_memory_current_bytes: float_gauge(
                "cluster_memory_current_bytes",
                "Current number of bytes of memory in the cluster, minus deleting nodes.",
            )?,
            memory_limits_bytes: gauge_vec(
                "memory_limits_bytes",
                "Minimum and maximum number of bytes of memory in the cluster.",
                &["direction"],
            )?,
            last_activity: gauge_vec(
                "last_activity",
                "Last time certain part of the autoscaler logic executed (Unix seconds).",
                &["activity"],
            )?,
            function_duration_seconds,
            errors_total: counter_vec(
                "errors_total",
                "The number of autoscaler loops that ended with an error.",
                &["type"],
            )?,
            scaled_up_nodes_total: counter_vec(
                "scaled_up_nodes_total",
                "Number of nodes added by the autoscaler.",
                &gpu_labels,
            )?,
            failed_scale_ups_total: counter_vec(
                "failed_scale_ups_total",
                "Number of times scale-up operation has failed.",
                &["reason", "gpu_resource_name", "gpu_name", "dra_drivers"],
            )?,
            failed_node_creations_total: counter_vec(
                "failed_node_creations_total",
                "Number of nodes that failed creation.",
                &["reason"],
            )?,
            scaled_down_nodes_total: counter_vec(
                "scaled_down_nodes_total",
                "Number of nodes removed by the autoscaler.",
                &["reason", "gpu_resource_name", "gpu_name", "dra_drivers"],
            )?,
            evicted_pods_total: counter_vec(
                "evicted_pods_total",
                "Number of pods evicted by the autoscaler.",
                &["eviction_result"],
            )?,
            unneeded_nodes_count: gauge(
                "unneeded_nodes_count",
                "Number of nodes currently considered unneeded by the autoscaler.",
            )?,
            unremovable_nodes_count: gauge_vec(
                "unremovable_nodes_count",
                "Number of nodes currently considered unremovable by the autoscaler.",
                &["reason"],
            )?,
            scale_down_in_cooldown: gauge(
                "scale_down_in_cooldown",
                "Whether or not the scale down is in cooldown: 1 if it is, 0 otherwise.",
            )?,
            old_unregistered_nodes_removed_count,
            skipped_scale_events_count: counter_vec(
                "skipped_scale_events_count",
                "Count of scaling events that the autoscaler decided to skip.",
                &["direction", "reason"],
            )?,
            max_node_skip_eval_duration_seconds: float_gauge(
                "max_node_skip_eval_duration_seconds",
                "Maximum time a node has been skipped by the scale-down simulation.",
            )?,
            node_removal_latency_seconds,
            per_node_group: Arc::new(OnceLock::new()),
            ferroscale: crate::ferroscale::FerroscaleMetrics::register(&registry)?,
            registry,
        };
        metrics.initialise_standard_series();
        Ok(metrics)
    }

    fn initialise_standard_series(&self) {
        for error_type in ERROR_TYPES {
            self.errors_total.with_label_values(&[error_type]);
        }
        for reason in FAILED_SCALE_UP_REASONS {
            self.failed_scale_ups_total
                .with_label_values(&[reason, "", "", ""]);
            self.failed_node_creations_total
                .with_label_values(&[reason]);
        }
        for reason in SCALE_DOWN_REASONS {
            self.scaled_down_nodes_total
                .with_label_values(&[reason, "", "", ""]);
        }
        for result in EVICTION_RESULTS {
            self.evicted_pods_total.with_label_values(&[result]);
        }
        for direction in SKIPPED_DIRECTIONS {
            for reason in SKIPPED_REASONS {
                self.skipped_scale_events_count
                    .with_label_values(&[direction, reason]);
            }
        }
        self.scaled_up_nodes_total.with_label_values(&["", "", ""]);
        self.cluster_safe_to_autoscale.set(0);
    }

    /// The Prometheus text exposition format of every metric.
    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        // Encoding into memory only fails on a malformed metric family, which the registry
        // rules out at registration; an empty answer is the safe fallback.
        if let Err(error) = TextEncoder::new().encode(&self.registry.gather(), &mut buffer) {
            tracing::error!(%error, "encoding metrics");
        }
        String::from_utf8(buffer).unwrap_or_default()
    }

    /// `function_duration_seconds{function}`.
    pub fn observe_function(&self, function: &str, duration: Duration) {
        self.function_duration_seconds
            .with_label_values(&[function])
            .observe(duration.as_secs_f64());
    }

    /// `cluster_cpu_current_cores` and `cluster_memory_current_bytes` (docs/behaviour.md LOOP-110),
    /// which the caller computes from the node list.
    pub fn set_cluster_resources(&self, cores: f64, memory_bytes: f64) {
        self.cluster_cpu_current_cores.set(cores);
        self.cluster_memory_current_bytes.set(memory_bytes);
    }

    /// `cpu_limits_cores` and `memory_limits_bytes` from `--cores-total` / `--memory-total`.
    pub fn set_limits(&self, options: &AutoscalingOptions) {
        let memory = options.memory_total_bytes();
        self.cpu_limits_cores
            .with_label_values(&["minimum"])
            .set(options.cores_total.min);
        self.cpu_limits_cores
            .with_label_values(&["maximum"])
            .set(options.cores_total.max);
        self.memory_limits_bytes
            .with_label_values(&["minimum"])
            .set(memory.min);
        self.memory_limits_bytes
            .with_label_values(&["maximum"])
            .set(memory.max);
    }

    /// Everything one iteration tells: gauges are set, counters incremented. `loop_duration` is
    /// the wall time of `run_once` as the caller measured it.
    pub fn record_loop(
        &self,
        outcome: &LoopOutcome,
        options: &AutoscalingOptions,
        loop_duration: Duration,
    ) {
        let now_secs = outcome.now.secs();
        let activity = |name: &str| self.last_activity.with_label_values(&[name]).set(now_secs);
        activity("main");
        self.observe_function("main", loop_duration);
        self.set_limits(options);

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

        if outcome.ended_early.is_none() {
            activity("autoscaling");
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
        }

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
        if outcome.scale_up.is_some() {
            activity("scaleUp");
        }
        for execution in [&outcome.scale_up_execution, &outcome.min_size_execution]
            .into_iter()
            .flatten()
        {
            self.scaled_up_nodes_total
                .with_label_values(&["", "", ""])
                .inc_by(execution.scaled_up_nodes as u64);
            for reason in &execution.failed_scale_up_reasons {
                self.failed_scale_ups_total
                    .with_label_values(&[reason, "", "", ""])
                    .inc();
            }
            if execution.failed_node_creations > 0 {
                let reason = execution
                    .failed_scale_up_reasons
                    .first()
                    .copied()
                    .unwrap_or("cloudProviderError");
                self.failed_node_creations_total
                    .with_label_values(&[reason])
                    .inc_by(execution.failed_node_creations as u64);
            }
        }

        if options.emit_per_nodegroup_metrics {
            self.record_per_node_group(outcome);
        }
        if let Some(plan) = &outcome.scale_down {
            activity("scaleDown");
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
            self.scaled_down_nodes_total
                .with_label_values(&[reason, "", "", ""])
                .inc();
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
            let removed = state
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

impl AutoscalerMetrics {
    /// `--emit-per-nodegroup-metrics` (docs/behaviour.md OBS-122): registers the gauges on first
    /// use, then fills them. A registration failure is logged once and the gauges stay away.
    fn record_per_node_group(&self, outcome: &LoopOutcome) {
        let registered = self.per_node_group.get_or_init(|| {
            PerNodeGroupMetrics::register(&self.registry).map_err(|error| {
                tracing::error!(%error, "registering the per-node-group metrics");
                error.to_string()
            })
        });
        if let Ok(metrics) = registered {
            metrics.record(outcome);
        }
    }
}

fn as_gauge(count: usize) -> i64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_core::actuation::{ActuationReport, CompletedDeletion};
    use ferroscale_core::autoscaler::ClusterResources;
    use ferroscale_core::cloud::CloudError;
    use ferroscale_core::scale_down::{
        ScaleDownPlan, ScaleDownState, ScaleDownStatus, UnremovableNode,
    };
    use ferroscale_model::Timestamp;

    fn line_value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn standard_counters_exist_at_zero_before_anything_happens() {
        let metrics = AutoscalerMetrics::new().unwrap();
        let text = metrics.render();
        for error_type in ERROR_TYPES {
            let series = format!("cluster_autoscaler_errors_total{{type=\"{error_type}\"}}");
            assert_eq!(line_value(&text, &series), Some(0.0), "{series}\n{text}");
        }
        for series in [
            "cluster_autoscaler_evicted_pods_total{eviction_result=\"failed\"}",
            "cluster_autoscaler_scaled_down_nodes_total{dra_drivers=\"\",gpu_name=\"\",gpu_resource_name=\"\",reason=\"empty\"}",
            "cluster_autoscaler_skipped_scale_events_count{direction=\"up\",reason=\"CpuResourceLimit\"}",
            "cluster_autoscaler_failed_scale_ups_total{dra_drivers=\"\",gpu_name=\"\",gpu_resource_name=\"\",reason=\"timeout\"}",
            "cluster_autoscaler_old_unregistered_nodes_removed_count",
        ] {
            assert_eq!(line_value(&text, series), Some(0.0), "{series}\n{text}");
        }
        assert!(text.contains("# TYPE cluster_autoscaler_errors_total counter"));
    }

    #[test]
    fn a_loop_outcome_fills_gauges_and_counters() {
        let metrics = AutoscalerMetrics::new().unwrap();
        let mut options = AutoscalingOptions::default();
        options.set("cores-total", "2:64").unwrap();
        options.set("max-nodes-total", "7").unwrap();
        let mut outcome = LoopOutcome {
            now: Timestamp::from_secs(1_700_000_000),
            ..LoopOutcome::default()
        };
        outcome.cluster_state.cluster_healthy = true;
        outcome.cluster_state.total.ready = 3;
        outcome.cluster_state.total.unready = 1;
        outcome.deleted_nodes.push(CompletedDeletion {
            node: "n1".into(),
            group_id: "g".into(),
            kind: RemovalKind::Drain,
            unready: false,
        });
        outcome.actuation.push(ActuationReport {
            at: outcome.now,
            node: "n1".into(),
            group_id: "g".into(),
            kind: RemovalKind::Drain,
            step: ActuationStep::EvictionsStarted {
                pods: vec!["default/a".into(), "default/b".into()],
                daemonset_pods: vec![],
            },
        });
        let mut plan = ScaleDownPlan::empty(ScaleDownStatus::InCooldown, ScaleDownState::new());
        plan.in_cooldown = true;
        plan.unremovable.push(UnremovableNode {
            node: "n2".into(),
            group_id: Some("g".into()),
            reason: UnremovableReason::NotUnderutilized,
            blocking_pod: None,
            pod: None,
            utilization: None,
        });
        outcome.scale_down = Some(plan);
        outcome.cluster_resources = Some(ClusterResources {
            cores: 12.5,
            memory_bytes: 3.0e10,
        });
        outcome.function_millis = vec![("scaleUp", 40.0), ("findUnneeded", 10.0)];
        metrics.record_loop(&outcome, &options, Duration::from_millis(250));
        let text = metrics.render();
        for (series, value) in [
            ("cluster_autoscaler_cluster_safe_to_autoscale", 1.0),
            ("cluster_autoscaler_nodes_count{state=\"ready\"}", 3.0),
            ("cluster_autoscaler_nodes_count{state=\"unready\"}", 1.0),
            ("cluster_autoscaler_nodes_count{state=\"notStarted\"}", 0.0),
            ("cluster_autoscaler_max_nodes_count", 0.0),
            (
                "cluster_autoscaler_cpu_limits_cores{direction=\"minimum\"}",
                2.0,
            ),
            (
                "cluster_autoscaler_cpu_limits_cores{direction=\"maximum\"}",
                64.0,
            ),
            ("cluster_autoscaler_last_activity{activity=\"main\"}", 1.7e9),
            (
                "cluster_autoscaler_last_activity{activity=\"scaleDown\"}",
                1.7e9,
            ),
            (
                "cluster_autoscaler_scaled_down_nodes_total{dra_drivers=\"\",gpu_name=\"\",gpu_resource_name=\"\",reason=\"underutilized\"}",
                1.0,
            ),
            (
                "cluster_autoscaler_evicted_pods_total{eviction_result=\"succeeded\"}",
                2.0,
            ),
            ("cluster_autoscaler_scale_down_in_cooldown", 1.0),
            ("cluster_autoscaler_unneeded_nodes_count", 0.0),
            (
                "cluster_autoscaler_unremovable_nodes_count{reason=\"NotUnderutilized\"}",
                1.0,
            ),
            (
                "cluster_autoscaler_unremovable_nodes_count{reason=\"BlockedByPod\"}",
                0.0,
            ),
            (
                "cluster_autoscaler_function_duration_seconds_count{function=\"main\"}",
                1.0,
            ),
            (
                "cluster_autoscaler_function_duration_seconds_sum{function=\"main\"}",
                0.25,
            ),
            (
                "cluster_autoscaler_function_duration_seconds_sum{function=\"scaleUp\"}",
                0.04,
            ),
            (
                "cluster_autoscaler_function_duration_seconds_count{function=\"findUnneeded\"}",
                1.0,
            ),
            ("cluster_autoscaler_cluster_cpu_current_cores", 12.5),
            ("cluster_autoscaler_cluster_memory_current_bytes", 3.0e10),
        ] {
            assert_eq!(line_value(&text, series), Some(value), "{series}\n{text}");
        }
        assert_eq!(
            text.matches("cluster_autoscaler_function_duration_seconds_bucket{function=\"main\"")
                .count(),
            DURATION_BUCKET_COUNT + 1,
            "150 buckets and +Inf"
        );
    }

    /// Failed gather calls do not fail the iteration, but each is counted as a provider error.
    #[test]
    fn gather_failures_count_as_cloud_provider_errors() {
        use ferroscale_core::autoscaler::GatherSubject;
        let metrics = AutoscalerMetrics::new().unwrap();
        let options = AutoscalingOptions::default();
        let failure = |call, subject| GatherFailure {
            call,
            subject,
            error: CloudError::Provider("timeout".into()),
        };
        let mut outcome = LoopOutcome {
            now: Timestamp::from_secs(1_700_000_000),
            ..LoopOutcome::default()
        };
        outcome.gather_failures = vec![
            failure(GatherCall::TargetSize, GatherSubject::Group("pool".into())),
            failure(
                GatherCall::NodeGroupForNode,
                GatherSubject::Node("n1".into()),
            ),
            failure(GatherCall::ResourceLimits, GatherSubject::Provider),
        ];
        metrics.record_loop(&outcome, &options, Duration::ZERO);
        let text = metrics.render();
        assert_eq!(
            line_value(
                &text,
                "cluster_autoscaler_errors_total{type=\"cloudProviderError\"}"
            ),
            Some(3.0)
        );
        assert_eq!(
            line_value(
                &text,
                "cluster_autoscaler_last_activity{activity=\"mainSuccessful\"}"
            ),
            Some(1.7e9),
            "the iteration itself succeeded"
        );
    }

    #[test]
    fn a_failed_loop_counts_its_error_type_and_keeps_the_cluster_gauges() {
        let metrics = AutoscalerMetrics::new().unwrap();
        let options = AutoscalingOptions::default();
        let mut healthy = LoopOutcome::default();
        healthy.cluster_state.cluster_healthy = true;
        metrics.record_loop(&healthy, &options, Duration::ZERO);
        let failed = LoopOutcome {
            error: Some(LoopError::Refresh(CloudError::Provider("boom".into()))),
            ..LoopOutcome::default()
        };
        metrics.record_loop(&failed, &options, Duration::ZERO);
        metrics.record_loop(&failed, &options, Duration::ZERO);
        let text = metrics.render();
        assert_eq!(
            line_value(
                &text,
                "cluster_autoscaler_errors_total{type=\"cloudProviderError\"}"
            ),
            Some(2.0)
        );
        assert_eq!(
            line_value(
                &text,
                "cluster_autoscaler_errors_total{type=\"apiCallError\"}"
            ),
            Some(0.0)
        );
        assert_eq!(
            line_value(&text, "cluster_autoscaler_cluster_safe_to_autoscale"),
            Some(1.0)
        );
    }
}
