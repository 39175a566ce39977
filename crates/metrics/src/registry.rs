//! The metrics registry with upstream's names, types and labels (docs/behaviour.md OBS-101, all
//! prefixed `cluster_autoscaler_`). How one loop's outcome fills it is in [`crate::record`].
//!
//! Counters of the standard label values (error types, failure reasons, scale-down reasons,
//! eviction results, skipped-event reasons) are created at zero so that dashboards and alerts see
//! the series before the first occurrence, as upstream does. Every family is described by a
//! [`Family`] as it is registered, so tests and documentation can list what `/metrics` serves.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ferroscale_core::AutoscalingOptions;
use ferroscale_core::scale_down::UnremovableReason;
use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use thiserror::Error;

use crate::summary::SlidingSummaryVec;

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
pub(crate) const FAILED_SCALE_UP_REASONS: [&str; 3] =
    ["cloudProviderError", "apiCallError", "timeout"];
pub(crate) const SCALE_DOWN_REASONS: [&str; 3] = ["empty", "underutilized", "unready"];
const EVICTION_RESULTS: [&str; 2] = ["succeeded", "failed"];
const SKIPPED_DIRECTIONS: [&str; 2] = ["up", "down"];
const SKIPPED_REASONS: [&str; 2] = ["CpuResourceLimit", "MemoryResourceLimit"];
/// The one `requestor` of `skipped_pods_count`: upstream's filter-out-schedulable step.
pub(crate) const SKIPPED_PODS_REQUESTOR: &str = "filter-out-pod-list-processor";
pub(crate) const NODE_STATES: [&str; 6] = [
    "ready",
    "unready",
    "notStarted",
    "suspended",
    "longUnregistered",
    "unregistered",
];
pub(crate) const UNREMOVABLE_REASONS: [UnremovableReason; 15] = [
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
pub(crate) const DURATION_BUCKET_COUNT: usize = 150;
const DURATION_FIRST_BUCKET: f64 = 0.1;
const DURATION_LAST_BUCKET: f64 = 1800.0;

#[derive(Debug, Error)]
pub enum MetricsError {
    #[error("metric registry: {0}")]
    Prometheus(#[from] prometheus::Error),
}

/// A metric type as the text format's `# TYPE` line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        }
    }
}

/// One metric family Ferroscale serves.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Family {
    /// The full name, `cluster_autoscaler_` included.
    pub name: String,
    pub kind: Kind,
    /// Label names in registration order (`le` and `quantile` are not listed).
    pub labels: Vec<String>,
    /// Registered only with `--emit-per-nodegroup-metrics` (docs/behaviour.md OBS-122).
    pub per_node_group: bool,
}

impl Family {
    /// The series names a scrape shows for this family: histograms and summaries add `_sum` and
    /// `_count`, histograms `_bucket` too.
    pub fn series_names(&self) -> Vec<String> {
        let suffixes: &[&str] = match self.kind {
            Kind::Counter | Kind::Gauge => &[""],
            Kind::Histogram => &["_bucket", "_sum", "_count"],
            Kind::Summary => &["", "_sum", "_count"],
        };
        suffixes
            .iter()
            .map(|suffix| format!("{}{suffix}", self.name))
            .collect()
    }
}

fn name(short: &str) -> String {
    format!("{PREFIX}{short}")
}

/// Registers metrics and describes each as it goes.
struct Registrar<'r> {
    registry: &'r Registry,
    families: Vec<Family>,
    per_node_group: bool,
}

impl Registrar<'_> {
    fn add<C: Collector + Clone + 'static>(
        &mut self,
        collector: C,
        kind: Kind,
    ) -> Result<C, MetricsError> {
        for desc in collector.desc() {
            self.families.push(Family {
                name: desc.fq_name.clone(),
                kind,
                labels: desc.variable_labels.clone(),
                per_node_group: self.per_node_group,
            });
        }
        self.registry.register(Box::new(collector.clone()))?;
        Ok(collector)
    }

    fn gauge(&mut self, short: &str, help: &str) -> Result<IntGauge, MetricsError> {
        self.add(IntGauge::new(name(short), help)?, Kind::Gauge)
    }

    fn float_gauge(&mut self, short: &str, help: &str) -> Result<Gauge, MetricsError> {
        self.add(Gauge::new(name(short), help)?, Kind::Gauge)
    }

    fn gauge_vec(
        &mut self,
        short: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntGaugeVec, MetricsError> {
        self.add(
            IntGaugeVec::new(Opts::new(name(short), help), labels)?,
            Kind::Gauge,
        )
    }

    fn float_gauge_vec(
        &mut self,
        short: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<GaugeVec, MetricsError> {
        self.add(
            GaugeVec::new(Opts::new(name(short), help), labels)?,
            Kind::Gauge,
        )
    }

    fn counter(&mut self, short: &str, help: &str) -> Result<IntCounter, MetricsError> {
        self.add(IntCounter::new(name(short), help)?, Kind::Counter)
    }

    fn counter_vec(
        &mut self,
        short: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntCounterVec, MetricsError> {
        self.add(
            IntCounterVec::new(Opts::new(name(short), help), labels)?,
            Kind::Counter,
        )
    }

    fn histogram_vec(
        &mut self,
        short: &str,
        help: &str,
        buckets: Vec<f64>,
        labels: &[&str],
    ) -> Result<HistogramVec, MetricsError> {
        self.add(
            HistogramVec::new(
                HistogramOpts::new(name(short), help).buckets(buckets),
                labels,
            )?,
            Kind::Histogram,
        )
    }

    fn summary_vec(
        &mut self,
        short: &str,
        help: &str,
        label: &str,
    ) -> Result<SlidingSummaryVec, MetricsError> {
        self.add(
            SlidingSummaryVec::new(&name(short), help, label)?,
            Kind::Summary,
        )
    }
}

/// Every metric the engine fills.
#[derive(Clone)]
pub struct AutoscalerMetrics {
    registry: Registry,
    families: Vec<Family>,
    /// Ferroscale's own series (`ferroscale_*`), not among upstream's `families`.
    pub(crate) ferroscale: crate::ferroscale::FerroscaleMetrics,
    pub(crate) cluster_safe_to_autoscale: IntGauge,
    pub(crate) nodes_count: IntGaugeVec,
    pub(crate) node_groups_count: IntGaugeVec,
    pub(crate) unschedulable_pods_count: IntGaugeVec,
    pub(crate) skipped_pods_count: IntGaugeVec,
    pub(crate) max_nodes_count: IntGauge,
    pub(crate) cluster_cpu_current_cores: Gauge,
    pub(crate) cpu_limits_cores: IntGaugeVec,
    pub(crate) cluster_memory_current_bytes: Gauge,
    pub(crate) memory_limits_bytes: IntGaugeVec,
    pub(crate) last_activity: IntGaugeVec,
    pub(crate) function_duration_seconds: HistogramVec,
    pub(crate) function_duration_quantile_seconds: SlidingSummaryVec,
    pub(crate) pending_node_deletions: IntGauge,
    pub(crate) errors_total: IntCounterVec,
    pub(crate) scaled_up_nodes_total: IntCounterVec,
    pub(crate) scaled_up_gpu_nodes_total: IntCounterVec,
    pub(crate) failed_scale_ups_total: IntCounterVec,
    pub(crate) failed_node_creations_total: IntCounterVec,
    pub(crate) failed_gpu_scale_ups_total: IntCounterVec,
    pub(crate) scaled_down_nodes_total: IntCounterVec,
    pub(crate) scaled_down_gpu_nodes_total: IntCounterVec,
    pub(crate) evicted_pods_total: IntCounterVec,
    pub(crate) unneeded_nodes_count: IntGauge,
    pub(crate) unremovable_nodes_count: IntGaugeVec,
    pub(crate) scale_down_in_cooldown: IntGauge,
    pub(crate) old_unregistered_nodes_removed_count: IntCounter,
    pub(crate) overflowing_controllers_count: IntGauge,
    pub(crate) skipped_scale_events_count: IntCounterVec,
    pub(crate) created_node_groups_total: IntCounterVec,
    pub(crate) deleted_node_groups_total: IntCounterVec,
    pub(crate) node_taints_count: IntGaugeVec,
    pub(crate) inconsistent_instances_migs_count: IntGauge,
    pub(crate) binpacking_heterogeneity: HistogramVec,
    /// Filled with `--max-node-skip-eval-time-tracker-enabled` (docs/behaviour.md OBS-120).
    pub(crate) max_node_skip_eval_duration_seconds: Gauge,
    /// Filled with `--node-removal-latency-tracking-enabled` (docs/behaviour.md OBS-121).
    pub(crate) node_removal_latency_seconds: HistogramVec,
    pub(crate) dra_node_template_resources_mismatch: GaugeVec,
    /// Registered on the first loop with `--emit-per-nodegroup-metrics` (docs/behaviour.md
    /// OBS-122), as upstream registers them only with the flag.
    pub(crate) per_node_group: Arc<OnceLock<Result<PerNodeGroupMetrics, String>>>,
}

/// The per-node-group gauges of `--emit-per-nodegroup-metrics`.
#[derive(Clone)]
pub(crate) struct PerNodeGroupMetrics {
    pub(crate) node_group_min_count: IntGaugeVec,
    pub(crate) node_group_max_count: IntGaugeVec,
    pub(crate) node_group_target_count: IntGaugeVec,
    pub(crate) node_group_healthiness: IntGaugeVec,
    pub(crate) node_group_backoff_status: IntGaugeVec,
    pub(crate) nodes_count_per_node_group: IntGaugeVec,
}

impl PerNodeGroupMetrics {
    fn register(registry: &Registry) -> Result<(PerNodeGroupMetrics, Vec<Family>), MetricsError> {
        let mut r = Registrar {
            registry,
            families: Vec::new(),
            per_node_group: true,
        };
        let group = &["node_group"];
        let metrics = PerNodeGroupMetrics {
            node_group_min_count: r.gauge_vec(
                "node_group_min_count",
                "Smallest size the node group may have.",
                group,
            )?,
            node_group_max_count: r.gauge_vec(
                "node_group_max_count",
                "Largest size the node group may have.",
                group,
            )?,
            node_group_target_count: r.gauge_vec(
                "node_group_target_count",
                "The node group's target size.",
                group,
            )?,
            node_group_healthiness: r.gauge_vec(
                "node_group_healthiness",
                "1 when the node group is healthy enough to be autoscaled, else 0.",
                group,
            )?,
            node_group_backoff_status: r.gauge_vec(
                "node_group_backoff_status",
                "1 while the node group is backed off from scale-up, with the backoff's reason; else 0.",
                &["node_group", "reason"],
            )?,
            nodes_count_per_node_group: r.gauge_vec(
                "nodes_count_per_node_group",
                "Nodes of each node group, by state.",
                &["state", "node_group"],
            )?,
        };
        Ok((metrics, r.families))
    }
}

impl AutoscalerMetrics {
    pub fn new() -> Result<AutoscalerMetrics, MetricsError> {
        let registry = Registry::new();
        let mut r = Registrar {
            registry: &registry,
            families: Vec::new(),
            per_node_group: false,
        };
        let gpu = ["gpu_resource_name", "gpu_name"];
        let accelerators = ["gpu_resource_name", "gpu_name", "dra_drivers"];
        let with_reason = |labels: &[&'static str]| -> Vec<&'static str> {
            std::iter::once("reason")
                .chain(labels.iter().copied())
                .collect()
        };
        let factor = (DURATION_LAST_BUCKET / DURATION_FIRST_BUCKET)
            .powf(1.0 / (DURATION_BUCKET_COUNT - 1) as f64);
        let metrics = AutoscalerMetrics {
            cluster_safe_to_autoscale: r.gauge(
                "cluster_safe_to_autoscale",
                "1 when the cluster is healthy enough to be autoscaled, else 0.",
            )?,
            nodes_count: r.gauge_vec("nodes_count", "Nodes of the cluster, by state.", &["state"])?,
            node_groups_count: r.gauge_vec(
                "node_groups_count",
                "Node groups the autoscaler manages, by type.",
                &["node_group_type"],
            )?,
            unschedulable_pods_count: r.gauge_vec(
                "unschedulable_pods_count",
                "Pending pods the autoscaler considered, by whether the scheduler marked them unschedulable.",
                &["type"],
            )?,
            skipped_pods_count: r.gauge_vec(
                "skipped_pods_count",
                "Pending pods left out of the scheduling simulation for lack of time (always 0: the simulation takes every pod).",
                &["requestor"],
            )?,
            max_nodes_count: r.gauge(
                "max_nodes_count",
                "Largest number of nodes all node groups together may have.",
            )?,
            cluster_cpu_current_cores: r.float_gauge(
                "cluster_cpu_current_cores",
                "CPU cores of the cluster's nodes, those being deleted left out.",
            )?,
            cpu_limits_cores: r.gauge_vec(
                "cpu_limits_cores",
                "The cluster-wide CPU bounds in cores (--cores-total).",
                &["direction"],
            )?,
            cluster_memory_current_bytes: r.float_gauge(
                "cluster_memory_current_bytes",
                "Memory of the cluster's nodes in bytes, those being deleted left out.",
            )?,
            memory_limits_bytes: r.gauge_vec(
                "memory_limits_bytes",
                "The cluster-wide memory bounds in bytes (--memory-total).",
                &["direction"],
            )?,
            last_activity: r.gauge_vec(
                "last_activity",
                "Unix time at which a part of the autoscaler's loop last ran.",
                &["activity"],
            )?,
            function_duration_seconds: r.histogram_vec(
                "function_duration_seconds",
                "Seconds spent in the parts of the autoscaler's loop.",
                prometheus::exponential_buckets(
                    DURATION_FIRST_BUCKET,
                    factor,
                    DURATION_BUCKET_COUNT,
                )?,
                &["function"],
            )?,
            function_duration_quantile_seconds: r.summary_vec(
                "function_duration_quantile_seconds",
                "Quantiles over the last hour of the seconds spent in the parts of the autoscaler's loop.",
                "function",
            )?,
            pending_node_deletions: r.gauge(
                "pending_node_deletions",
                "Node deletions started and neither finished nor rolled back yet.",
            )?,
            errors_total: r.counter_vec(
                "errors_total",
                "Failures of the autoscaler's loop, by type.",
                &["type"],
            )?,
            scaled_up_nodes_total: r.counter_vec(
                "scaled_up_nodes_total",
                "Nodes the autoscaler asked for.",
                &accelerators,
            )?,
            scaled_up_gpu_nodes_total: r.counter_vec(
                "scaled_up_gpu_nodes_total",
                "GPU nodes the autoscaler asked for, by GPU.",
                &gpu,
            )?,
            failed_scale_ups_total: r.counter_vec(
                "failed_scale_ups_total",
                "Scale-ups of a node group that failed.",
                &with_reason(&accelerators),
            )?,
            failed_node_creations_total: r.counter_vec(
                "failed_node_creations_total",
                "Nodes asked for that were never created.",
                &["reason"],
            )?,
            failed_gpu_scale_ups_total: r.counter_vec(
                "failed_gpu_scale_ups_total",
                "Scale-ups of a GPU node group that failed, by GPU.",
                &with_reason(&gpu),
            )?,
            scaled_down_nodes_total: r.counter_vec(
                "scaled_down_nodes_total",
                "Nodes the autoscaler removed.",
                &with_reason(&accelerators),
            )?,
            scaled_down_gpu_nodes_total: r.counter_vec(
                "scaled_down_gpu_nodes_total",
                "GPU nodes the autoscaler removed, by reason and GPU.",
                &with_reason(&gpu),
            )?,
            evicted_pods_total: r.counter_vec(
                "evicted_pods_total",
                "Pods the autoscaler evicted, by whether the eviction was accepted.",
                &["eviction_result"],
            )?,
            unneeded_nodes_count: r.gauge(
                "unneeded_nodes_count",
                "Nodes the autoscaler currently finds unneeded.",
            )?,
            unremovable_nodes_count: r.gauge_vec(
                "unremovable_nodes_count",
                "Nodes the autoscaler currently cannot remove, by reason.",
                &["reason"],
            )?,
            scale_down_in_cooldown: r.gauge(
                "scale_down_in_cooldown",
                "1 while scale-down waits out a cooldown, else 0.",
            )?,
            old_unregistered_nodes_removed_count: r.counter(
                "old_unregistered_nodes_removed_count",
                "Instances removed because they never registered as nodes in time.",
            )?,
            overflowing_controllers_count: r.gauge(
                "overflowing_controllers_count",
                "Controllers whose pending pods come in too many shapes to be simulated as groups of equals.",
            )?,
            skipped_scale_events_count: r.counter_vec(
                "skipped_scale_events_count",
                "Scale-ups or scale-downs the autoscaler left out, by direction and reason.",
                &["direction", "reason"],
            )?,
            created_node_groups_total: r.counter_vec(
                "created_node_groups_total",
                "Node groups created by node auto-provisioning (always 0: no provider of Ferroscale creates node groups).",
                &["group_type"],
            )?,
            deleted_node_groups_total: r.counter_vec(
                "deleted_node_groups_total",
                "Node groups deleted by node auto-provisioning (always 0: no provider of Ferroscale creates node groups).",
                &["group_type"],
            )?,
            node_taints_count: r.gauge_vec(
                "node_taints_count",
                "Taints on the cluster's nodes, by type.",
                &["type"],
            )?,
            inconsistent_instances_migs_count: r.gauge(
                "inconsistent_instances_migs_count",
                "GCE managed instance groups whose instance lists disagree (always 0: Ferroscale has no GCE provider).",
            )?,
            binpacking_heterogeneity: r.histogram_vec(
                "binpacking_heterogeneity",
                "Groups of equal pods in one node group's binpacking estimate.",
                prometheus::exponential_buckets(1.0, 2.0, 6)?,
                &["instance_type", "cpu_count", "namespace_count"],
            )?,
            max_node_skip_eval_duration_seconds: r.float_gauge(
                "max_node_skip_eval_duration_seconds",
                "Longest time a scale-down candidate has been left out of the removal simulation.",
            )?,
            // ~1 s to ~24 min: 19 buckets growing by 1.5, as upstream.
            node_removal_latency_seconds: r.histogram_vec(
                "node_removal_latency_seconds",
                "Time an unneeded node waited beyond its threshold until it was removed \
                 (deleted=true) or became needed again (deleted=false).",
                prometheus::exponential_buckets(1.0, 1.5, 19)?,
                &["deleted", "delay_reason"],
            )?,
            dra_node_template_resources_mismatch: r.float_gauge_vec(
                "dra_node_template_resources_mismatch",
                "Differences between the DRA devices ready nodes publish and those their group's template promised, by driver.",
                &["driver", "mismatch_type"],
            )?,
            families: Vec::new(),
            per_node_group: Arc::new(OnceLock::new()),
            ferroscale: crate::ferroscale::FerroscaleMetrics::register(&registry)?,
            registry: registry.clone(),
        };
        let metrics = AutoscalerMetrics {
            families: r.families,
            ..metrics
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
        self.skipped_pods_count
            .with_label_values(&[SKIPPED_PODS_REQUESTOR])
            .set(0);
        // Node auto-provisioning's counters, with the group type upstream uses by default, so
        // that a query on them finds a zero rather than nothing.
        self.created_node_groups_total.with_label_values(&[""]);
        self.deleted_node_groups_total.with_label_values(&[""]);
        self.inconsistent_instances_migs_count.set(0);
        self.cluster_safe_to_autoscale.set(0);
    }

    /// Every family `/metrics` can serve, the per-node-group ones included, sorted by name.
    pub fn families(&self) -> Vec<Family> {
        let mut families = self.families.clone();
        // The per-node-group gauges as they would be registered (on a registry of their own,
        // which is then thrown away).
        if let Ok((_, per_group)) = PerNodeGroupMetrics::register(&Registry::new()) {
            families.extend(per_group);
        }
        families.sort();
        families
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

    /// `function_duration_seconds{function}` and `function_duration_quantile_seconds{function}`,
    /// observed at the latest loop time recorded.
    pub fn observe_function(&self, function: &str, duration: Duration) {
        let seconds = duration.as_secs_f64();
        self.function_duration_seconds
            .with_label_values(&[function])
            .observe(seconds);
        self.function_duration_quantile_seconds
            .observe_now(function, seconds);
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

    /// The per-node-group gauges, registered on first use (`--emit-per-nodegroup-metrics`,
    /// docs/behaviour.md OBS-122). A registration failure is logged once and the gauges stay
    /// away.
    pub(crate) fn per_node_group_metrics(&self) -> Option<&PerNodeGroupMetrics> {
        let registered = self.per_node_group.get_or_init(|| {
            PerNodeGroupMetrics::register(&self.registry)
                .map(|(metrics, _)| metrics)
                .map_err(|error| {
                    tracing::error!(%error, "registering the per-node-group metrics");
                    error.to_string()
                })
        });
        registered.as_ref().ok()
    }
}
