//! The autoscaler's options: every upstream flag the engine implements, under its upstream name and
//! with its upstream default and syntax.
//!
//! The CLI and the scenario file's `options:` block both feed flags through [`AutoscalingOptions::set`]
//! one at a time (flag name without the leading dashes, value as text), then call
//! [`AutoscalingOptions::validate`] once for the rules that involve several flags. Parsing happens
//! here, at the boundary; the engine only ever sees typed values.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::parse_go_duration;
use ferroscale_scheduling::SchedulerProfile;
use thiserror::Error;

/// A flag that could not be applied. Every variant names the flag and, where there is one, the value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OptionError {
    #[error("unknown flag --{flag}")]
    UnknownFlag { flag: String },
    #[error("invalid value {value:?} for flag --{flag}: {reason}")]
    InvalidValue {
        flag: String,
        value: String,
        reason: String,
    },
    #[error("flag --{flag} is not supported by Ferroscale yet ({feature})")]
    NotSupported { flag: String, feature: String },
}

impl OptionError {
    fn invalid(flag: &str, value: &str, reason: impl Into<String>) -> OptionError {
        OptionError::InvalidValue {
            flag: flag.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// One step of the `--expander` chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpanderName {
    Random,
    MostPods,
    LeastWaste,
    LeastNodes,
    Price,
    Priority,
    /// Accepted by the parser so that upstream configurations give a clear error in `validate`.
    Grpc,
}

impl ExpanderName {
    pub fn as_str(&self) -> &'static str {
        match self {
            ExpanderName::Random => "random",
            ExpanderName::MostPods => "most-pods",
            ExpanderName::LeastWaste => "least-waste",
            ExpanderName::LeastNodes => "least-nodes",
            ExpanderName::Price => "price",
            ExpanderName::Priority => "priority",
            ExpanderName::Grpc => "grpc",
        }
    }
}

impl fmt::Display for ExpanderName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ExpanderName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "random" => ExpanderName::Random,
            "most-pods" => ExpanderName::MostPods,
            "least-waste" => ExpanderName::LeastWaste,
            "least-nodes" => ExpanderName::LeastNodes,
            "price" => ExpanderName::Price,
            "priority" => ExpanderName::Priority,
            "grpc" => ExpanderName::Grpc,
            other => {
                return Err(format!(
                    "unknown expander {other:?} (valid: random, most-pods, least-waste, least-nodes, price, priority, grpc)"
                ));
            }
        })
    }
}

/// A `<min>:<max>` bound, as `--cores-total` and `--memory-total` write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinMax {
    pub min: i64,
    pub max: i64,
}

/// One `--gpu-total <type>:<min>:<max>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuLimit {
    pub gpu_type: String,
    pub min: i64,
    pub max: i64,
}

// --- scheduler configuration (--scheduler-config-file) ---

/// A `--scheduler-config-file` as read: where it came from and the profile parsed from it.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfigFile {
    pub path: String,
    pub profile: Arc<SchedulerProfile>,
}

impl SchedulerConfigFile {
    /// Reads and parses the file at `path` (an empty path means none, as upstream). The file is
    /// read here, at the option boundary, so that deciding never touches the file system; it must
    /// be a regular file of at most [`ferroscale_scheduling::scheduler_config::MAX_FILE_BYTES`].
    fn read(flag: &str, path: &str) -> Result<Option<SchedulerConfigFile>, OptionError> {
        use ferroscale_scheduling::scheduler_config::{MAX_FILE_BYTES, parse};
        use std::io::Read;

        if path.is_empty() {
            return Ok(None);
        }
        let fail = |reason: String| OptionError::invalid(flag, path, reason);
        let file = std::fs::File::open(path).map_err(|e| fail(format!("cannot open it: {e}")))?;
        let metadata = file
            .metadata()
            .map_err(|e| fail(format!("cannot read it: {e}")))?;
        if !metadata.is_file() {
            return Err(fail("not a regular file".to_string()));
        }
        let too_large = |bytes: u64| {
            fail(format!(
                "{bytes} bytes: larger than the {MAX_FILE_BYTES} bytes a scheduler configuration may have"
            ))
        };
        if metadata.len() > MAX_FILE_BYTES {
            return Err(too_large(metadata.len()));
        }
        // The length can change between the check and the read: never read past the limit.
        let mut text = String::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| fail(format!("cannot read it: {e}")))?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(too_large(text.len() as u64));
        }
        let profile = parse(&text).map_err(|e| fail(e.to_string()))?;
        Ok(Some(SchedulerConfigFile {
            path: path.to_string(),
            profile: Arc::new(profile),
        }))
    }
}

/// Every flag the engine implements. `Default` gives the upstream defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoscalingOptions {
    // --- scale-up ---
    /// `expander`: the chain of expanders, applied in order (docs/behaviour.md SU-33).
    pub expander: Vec<ExpanderName>,
    /// `expendable-pods-priority-cutoff`: pods with a priority strictly below never trigger scale-up.
    pub expendable_pods_priority_cutoff: i32,
    /// `new-pod-scale-up-delay`: minimum pod age before it may trigger a scale-up.
    pub new_pod_scale_up_delay: Duration,
    /// While every pending pod is younger than this, scale-up waits for the rest of the burst
    /// (docs/behaviour.md SU-09: 2 s upstream, the default). Not a flag of its own: `ferroscale
    /// run` sets it from `--unschedulable-pods-batching-window` when loops are event-driven.
    pub new_pods_window: Duration,
    /// `max-nodes-total`: cluster node cap, 0 = none.
    pub max_nodes_total: usize,
    /// `cores-total`: cluster cores `min:max`.
    pub cores_total: MinMax,
    /// `memory-total`: cluster memory `min:max` in GiB.
    pub memory_total_gib: MinMax,
    /// `gpu-total` (repeatable).
    pub gpu_total: Vec<GpuLimit>,
    /// `max-nodes-per-scaleup`: node cap of one estimation, 0 = none.
    pub max_nodes_per_scaleup: usize,
    /// `max-binpacking-time` and `max-nodegroup-binpacking-duration` are accepted and kept for
    /// reporting, but the engine never reads the clock while deciding: binpacking is bounded by
    /// `max_nodes_per_scaleup` instead (see `scale_up::estimator`).
    pub max_binpacking_time: Duration,
    pub max_nodegroup_binpacking_duration: Duration,
    /// `balance-similar-node-groups`.
    pub balance_similar_node_groups: bool,
    /// `balancing-ignore-label` (repeatable).
    pub balancing_ignore_labels: Vec<String>,
    /// `balancing-label` (repeatable): when set, similarity compares only these labels.
    pub balancing_labels: Vec<String>,
    pub memory_difference_ratio: f64,
    pub max_allocatable_difference_ratio: f64,
    pub max_free_difference_ratio: f64,
    pub initial_node_group_backoff_duration: Duration,
    pub max_node_group_backoff_duration: Duration,
    pub node_group_backoff_reset_timeout: Duration,
    pub max_node_provision_time: Duration,
    pub max_node_startup_time: Duration,
    pub scan_interval: Duration,
    /// `bypassed-scheduler-names` (comma-separated).
    pub bypassed_scheduler_names: Vec<String>,
    /// `allowed-scheduler-names` (comma-separated); empty allows every scheduler.
    pub allowed_scheduler_names: Vec<String>,
    pub enforce_node_group_min_size: bool,
    pub parallel_scale_up: bool,
    pub scale_up_from_zero: bool,
    pub scale_from_unschedulable: bool,
    /// `enable-csi-node-aware-scheduling`: the simulation reads CSINodes (the cluster's and the
    /// templates') for the NodeVolumeLimits filter; off, no node has volume limits.
    pub enable_csi_node_aware_scheduling: bool,
    pub force_ds: bool,
    /// `startup-taint` and its deprecated alias `ignore-taint` (repeatable).
    pub startup_taints: Vec<String>,
    /// `startup-taint-prefix` (repeatable).
    pub startup_taint_prefixes: Vec<String>,
    /// `status-taint` (repeatable).
    pub status_taints: Vec<String>,

    // --- cluster health and wiring ---
    pub ok_total_unready_count: usize,
    pub max_total_unready_percentage: f64,
    /// `force-delete-unregistered-nodes`: remove long-unregistered instances even below min size.
    pub force_delete_unregistered_nodes: bool,
    /// `force-delete-failed-nodes`: remove instances that failed to be created even below min size.
    pub force_delete_failed_nodes: bool,
    pub namespace: String,
    pub write_status_configmap: bool,
    pub cloud_provider: String,
    pub nodes: Vec<String>,
    pub node_group_auto_discovery: Vec<String>,
    pub leader_elect: bool,

    // --- scale-down (stored for the scale-down engine) ---
    pub scale_down_enabled: bool,
    pub scale_down_delay_after_add: Duration,
    pub scale_down_delay_after_delete: Duration,
    pub scale_down_delay_after_failure: Duration,
    pub scale_down_unneeded_time: Duration,
    pub scale_down_unready_time: Duration,
    pub scale_down_utilization_threshold: f64,
    pub scale_down_gpu_utilization_threshold: f64,
    pub max_scale_down_parallelism: usize,
    pub max_drain_parallelism: usize,
    pub max_bulk_soft_taint_count: usize,
    pub max_graceful_termination_sec: i64,
    pub max_pod_eviction_time: Duration,
    pub cordon_node_before_terminating: bool,
    pub daemonset_eviction_for_empty_nodes: bool,
    pub daemonset_eviction_for_occupied_nodes: bool,
    pub ignore_daemonsets_utilization: bool,
    pub skip_nodes_with_custom_controller_pods: bool,
    pub skip_nodes_with_local_storage: bool,
    pub skip_nodes_with_system_pods: bool,
    /// `scale-down-unready-enabled`: whether unready nodes may be removed at all.
    pub scale_down_unready_enabled: bool,
    /// `ignore-mirror-pods-utilization`: leave mirror pods out of node utilization.
    pub ignore_mirror_pods_utilization: bool,
    /// `unremovable-node-recheck-timeout`: how long a node that failed the removal simulation is
    /// skipped before it is simulated again.
    pub unremovable_node_recheck_timeout: Duration,
    /// `scale-down-delay-type-local`: apply the three scale-down delays per node group.
    pub scale_down_delay_type_local: bool,
    /// `min-replica-count`: with custom-controller checks on, a ReplicaSet or ReplicationController
    /// with fewer replicas blocks the drain of its pods' nodes.
    pub min_replica_count: i32,
    /// `blocking-system-pod-distruption-timeout` (sic, upstream spelling): a kube-system pod
    /// without a PDB stops blocking scale-down once it is older than this.
    pub blocking_system_pod_distruption_timeout: Duration,
    /// `scale-down-simulation-timeout` and `max-bulk-soft-taint-time` are accepted and kept for
    /// reporting, but the engine never reads the clock while deciding: the removal search is bounded
    /// by the node-count stop rule and soft tainting by `max_bulk_soft_taint_count` instead.
    pub scale_down_simulation_timeout: Duration,
    pub max_bulk_soft_taint_time: Duration,

    // --- actuation and the loop ---
    /// Compute and report every decision without calling any mutating cloud or cluster method
    /// (ferroscale's own flag; upstream has no equivalent).
    pub dry_run: bool,
    /// Wait between tainting a node and draining or deleting it.
    pub node_delete_delay_after_taint: Duration,
    /// How long deletion waits for `delay-deletion.cluster-autoscaler.kubernetes.io/` annotations.
    pub node_deletion_delay_timeout: Duration,
    /// Soft taints younger than this restore unneeded timers; stale ones are cleaned at start-up.
    pub node_deletion_candidate_ttl: Duration,
    /// Disables the per (reason, object) five-minute event deduplication.
    pub record_duplicated_events: bool,
    pub status_config_map_name: String,

    // --- scheduler configuration (--scheduler-config-file) ---
    /// `scheduler-config-file`: the kube-scheduler profile every simulated filter follows, read and
    /// parsed once when the flag is set (docs/behaviour.md SCHED-101). `None` (upstream's default,
    /// an empty path): kube-scheduler's default profile.
    pub scheduler_config: Option<SchedulerConfigFile>,
    // --- scale-down candidates, deletion batching, drain bands, scale-down metrics (issue 13) ---
    /// Non-empty candidates found per loop before the search stops (docs/behaviour.md SD-116);
    /// zero or negative: no limit.
    pub scale_down_non_empty_candidates_count: i64,
    /// Share of all nodes that forms the pool of additional non-empty candidates (SD-116).
    pub scale_down_candidates_pool_ratio: f64,
    /// Smallest pool of additional non-empty candidates (SD-116).
    pub scale_down_candidates_pool_min_count: i64,
    /// Deletions of one node group that become ready within this long go out in one
    /// `DeleteNodes` call (docs/behaviour.md SD-117); zero deletes each at once.
    pub node_deletion_batcher_interval: Duration,
    /// `--drain-priority-config`: eviction bands, sorted by ascending priority; empty means one
    /// band capped by `--max-graceful-termination-sec` (docs/behaviour.md SD-118).
    pub drain_priority_config: Vec<DrainPriorityBand>,
    /// Post-taint wait derived from the observed taint latency (docs/behaviour.md SD-119).
    pub dynamic_node_delete_delay_after_taint_enabled: bool,
    /// Fill `max_node_skip_eval_duration_seconds` (docs/behaviour.md OBS-120).
    pub max_node_skip_eval_time_tracker_enabled: bool,
    /// Fill `node_removal_latency_seconds` (docs/behaviour.md OBS-121).
    pub node_removal_latency_tracking_enabled: bool,
    /// Register and fill the per-node-group gauges (docs/behaviour.md OBS-122).
    pub emit_per_nodegroup_metrics: bool,
    // --- issue 13: scale-up, loop and cluster-state flags (one block; see docs/behaviour.md) ---
    /// `estimator`: the scale-up estimator; `binpacking` is the only one upstream has
    /// (docs/behaviour.md SU-107).
    pub estimator: EstimatorName,
    /// `unready-nodes-scope`: which nodes the cluster-wide unready check counts
    /// (docs/behaviour.md CS-107).
    pub unready_nodes_scope: UnreadyNodesScope,
    /// `node-info-cache-expire-time`: how long a template taken from a real node is reused once
    /// the group has no good node any more (docs/behaviour.md SU-108).
    pub node_info_cache_expire_time: Duration,
    /// `scaleup-simulation-for-skipped-node-groups-enabled`: pods that were not helped are also
    /// checked against the templates of skipped groups, so that their messages name the filter
    /// that rejects them there (docs/behaviour.md SU-109).
    pub scaleup_simulation_for_skipped_node_groups_enabled: bool,
    /// `enable-proactive-scaleup`: fake pods for the replicas controllers still have to create
    /// (docs/behaviour.md SU-110).
    pub enable_proactive_scaleup: bool,
    /// `pod-injection-limit`: fake pods are dropped while the unschedulable pods, fake ones
    /// included, exceed this count (a negative value drops them all, as upstream).
    pub pod_injection_limit: i64,
    /// `async-node-groups`: asynchronous creation of node groups. No Ferroscale provider creates
    /// node groups, so there is nothing to make asynchronous (docs/behaviour.md LOOP-115).
    pub async_node_groups: bool,
    /// `enable-graceful-degradation` and `pending-pods-batching-timeout`: upstream stops
    /// filter-out-schedulable after this wall-clock time. Kept for reporting; Ferroscale's
    /// filter-out-schedulable is bounded by counts and never stops on time
    /// (docs/behaviour.md SU-111).
    pub enable_graceful_degradation: bool,
    pub pending_pods_batching_timeout: Duration,
    /// `fastpath-binpacking-enabled`: one pod group per estimate is counted arithmetically
    /// after filling one node (docs/behaviour.md SU-111).
    pub fastpath_binpacking_enabled: bool,
    /// `salvo-scale-up` and `salvo-scale-up-budget`: further scale-up rounds in one iteration for
    /// the pods still not helped (docs/behaviour.md SU-114). The budget is kept for reporting:
    /// the rounds end by count.
    pub salvo_scale_up: bool,
    pub salvo_scale_up_budget: Duration,
    /// `predicate-parallelism`: the most threads filter checks may use (at least 1;
    /// docs/behaviour.md SU-112): the size of the autoscaler's pool of workers
    /// ([`crate::parallel::Workers::for_machine`]), at most the machine's cores.
    pub predicate_parallelism: i64,
    /// `cluster-snapshot-parallelism`: deprecated upstream in favour of `predicate-parallelism`;
    /// accepted and unused, as upstream.
    pub cluster_snapshot_parallelism: i64,
    /// `scheduler-verbosity`: the log level of the embedded scheduler code; -1 means `--v`, and a
    /// value above `--v` is lowered to it ([`AutoscalingOptions::effective_scheduler_verbosity`]).
    pub scheduler_verbosity: i64,
    /// `enable-inter-pod-affinity-hostname-fast-path`: upstream's scheduler feature gate for a
    /// faster inter-pod affinity check on `kubernetes.io/hostname`; it changes no result, and
    /// Ferroscale's filter already counts hostname domains per node (docs/behaviour.md SU-113).
    pub enable_inter_pod_affinity_hostname_fast_path: bool,
    // --- issue 16: ProvisioningRequests ---
    /// `--enable-provisioning-requests` (docs/provisioning-requests.md).
    pub enable_provisioning_requests: bool,
    /// `--provisioning-request-initial-backoff-time`: the first wait before a request whose
    /// capacity was not found is tried again; doubled at every retry.
    pub provisioning_request_initial_backoff_time: Duration,
    /// `--provisioning-request-max-backoff-time`: the longest such wait.
    pub provisioning_request_max_backoff_time: Duration,
    /// `--provisioning-request-max-backoff-cache-size`: requests whose backoff is remembered
    /// (the least recently used is forgotten first).
    pub provisioning_request_max_backoff_cache_size: usize,
    /// `--check-capacity-batch-processing`.
    pub check_capacity_batch_processing: bool,
    /// `--check-capacity-provisioning-request-max-batch-size`.
    pub check_capacity_provisioning_request_max_batch_size: usize,
    /// `--check-capacity-provisioning-request-batch-timebox`.
    pub check_capacity_provisioning_request_batch_timebox: Duration,
    /// `--check-capacity-processor-instance`: which check-capacity requests this instance
    /// handles; when set, best-effort-atomic requests are left to another instance.
    pub check_capacity_processor_instance: String,
    // --- issue 16: CapacityBuffers ---
    /// `capacity-buffer-controller-enabled`: the loop resolves every CapacityBuffer of the
    /// active-capacity strategy into its status (pod template, replicas, conditions), writing the
    /// managed PodTemplate of `scalableRef` buffers (docs/capacity-buffers.md CB-101).
    pub capacity_buffer_controller_enabled: bool,
    /// `capacity-buffer-pod-injection-enabled`: the virtual pods of ready buffers join the
    /// scale-up's pending pods (docs/capacity-buffers.md CB-108).
    pub capacity_buffer_pod_injection_enabled: bool,
    /// `capacity-buffer-pod-dry-run-enabled`: the pod shape of a `scalableRef` buffer goes
    /// through a server dry-run before it becomes the managed template. Read where Gather
    /// resolves scalable objects; no-op without the controller.
    pub capacity_buffer_pod_dry_run_enabled: bool,
    /// `capacity-buffer-ready-replicas-enabled`: the loop writes each buffer's
    /// `status.readyReplicas` (its virtual pods that fit existing nodes); no-op without pod
    /// injection (docs/capacity-buffers.md CB-112).
    pub capacity_buffer_ready_replicas_enabled: bool,
    // --- issue 16: CapacityQuotas ---
    /// `capacity-quotas-enabled`: CapacityQuota objects cap scale-up (docs/capacity-quotas.md).
    pub capacity_quotas_enabled: bool,
    // --- issue 16: the gRPC expander ---
    /// `grpc-expander-url`: the address (`host:port`) of the service `grpc` in `--expander` asks
    /// (docs/grpc-expander.md).
    pub grpc_expander_url: String,
    /// `grpc-expander-cert`: the PEM certificate the gRPC expander's server certificate must chain
    /// to; required, as upstream allows no insecure connection.
    pub grpc_expander_cert: String,
    // --- issue 31: the cloud node controller ---
    /// `cloud-node-controller`: after each loop the leader initializes Nodes that carry the
    /// uninitialized taint and deletes Nodes whose instance is gone
    /// (docs/cloud-node-controller.md).
    pub cloud_node_controller: bool,
    /// `cloud-node-removal-grace-period`: how long a Node must have been a deletion candidate
    /// (not Ready, placed in a group that no longer lists its instance), on at least two
    /// consecutive passes, before the controller deletes it.
    pub cloud_node_removal_grace_period: Duration,
}

/// `--estimator` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EstimatorName {
    Binpacking,
}

impl FromStr for EstimatorName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "binpacking" => Ok(EstimatorName::Binpacking),
            other => Err(format!("unknown estimator {other:?} (valid: binpacking)")),
        }
    }
}

/// `--unready-nodes-scope` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnreadyNodesScope {
    /// Every node of the cluster counts.
    Cluster,
    /// Only nodes of autoscaled node groups, and nodes whose group could not be looked up.
    Autoscaled,
}

impl FromStr for UnreadyNodesScope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cluster" => Ok(UnreadyNodesScope::Cluster),
            "autoscaled" => Ok(UnreadyNodesScope::Autoscaled),
            other => Err(format!(
                "unknown scope {other:?} (valid: cluster, autoscaled)"
            )),
        }
    }
}

/// One band of `--drain-priority-config`: pods whose priority is at least `priority` (and below
/// the next band's) are evicted together with at most `grace_seconds` of grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainPriorityBand {
    pub priority: i32,
    pub grace_seconds: i64,
}

/// The default of `--max-graceful-termination-sec`; any other value conflicts with
/// `--drain-priority-config`.
pub const MAX_GRACEFUL_TERMINATION_SEC_DEFAULT: i64 = 600;

const MINUTE: u64 = 60;

impl Default for AutoscalingOptions {
    fn default() -> Self {
        AutoscalingOptions {
            expander: vec![ExpanderName::LeastWaste],
            expendable_pods_priority_cutoff: -10,
            new_pod_scale_up_delay: Duration::ZERO,
            new_pods_window: Duration::from_secs(2),
            max_nodes_total: 0,
            cores_total: MinMax {
                min: 0,
                max: 320_000,
            },
            memory_total_gib: MinMax {
                min: 0,
                max: 6_400_000,
            },
            gpu_total: Vec::new(),
            max_nodes_per_scaleup: 1000,
            max_binpacking_time: Duration::from_secs(5 * MINUTE),
            max_nodegroup_binpacking_duration: Duration::from_secs(10),
            balance_similar_node_groups: false,
            balancing_ignore_labels: Vec::new(),
            balancing_labels: Vec::new(),
            memory_difference_ratio: 0.015,
            max_allocatable_difference_ratio: 0.05,
            max_free_difference_ratio: 0.05,
            initial_node_group_backoff_duration: Duration::from_secs(5 * MINUTE),
            max_node_group_backoff_duration: Duration::from_secs(30 * MINUTE),
            node_group_backoff_reset_timeout: Duration::from_secs(180 * MINUTE),
            max_node_provision_time: Duration::from_secs(15 * MINUTE),
            max_node_startup_time: Duration::from_secs(15 * MINUTE),
            scan_interval: Duration::from_secs(10),
            bypassed_scheduler_names: Vec::new(),
            allowed_scheduler_names: Vec::new(),
            enforce_node_group_min_size: false,
            parallel_scale_up: false,
            scale_up_from_zero: true,
            scale_from_unschedulable: false,
            enable_csi_node_aware_scheduling: true,
            force_ds: false,
            startup_taints: Vec::new(),
            startup_taint_prefixes: Vec::new(),
            status_taints: Vec::new(),
            ok_total_unready_count: 3,
            max_total_unready_percentage: 45.0,
            force_delete_unregistered_nodes: false,
            force_delete_failed_nodes: false,
            namespace: "kube-system".to_string(),
            write_status_configmap: true,
            cloud_provider: String::new(),
            nodes: Vec::new(),
            node_group_auto_discovery: Vec::new(),
            leader_elect: true,
            scale_down_enabled: true,
            scale_down_delay_after_add: Duration::from_secs(10 * MINUTE),
            scale_down_delay_after_delete: Duration::ZERO,
            scale_down_delay_after_failure: Duration::from_secs(3 * MINUTE),
            scale_down_unneeded_time: Duration::from_secs(10 * MINUTE),
            scale_down_unready_time: Duration::from_secs(20 * MINUTE),
            scale_down_utilization_threshold: 0.5,
            scale_down_gpu_utilization_threshold: 0.5,
            max_scale_down_parallelism: 10,
            max_drain_parallelism: 1,
            max_bulk_soft_taint_count: 10,
            max_graceful_termination_sec: 600,
            max_pod_eviction_time: Duration::from_secs(2 * MINUTE),
            cordon_node_before_terminating: true,
            daemonset_eviction_for_empty_nodes: false,
            daemonset_eviction_for_occupied_nodes: true,
            ignore_daemonsets_utilization: false,
            skip_nodes_with_custom_controller_pods: true,
            skip_nodes_with_local_storage: true,
            skip_nodes_with_system_pods: true,
            scale_down_unready_enabled: true,
            ignore_mirror_pods_utilization: false,
            unremovable_node_recheck_timeout: Duration::from_secs(5 * MINUTE),
            scale_down_delay_type_local: false,
            min_replica_count: 0,
            blocking_system_pod_distruption_timeout: Duration::from_secs(60 * MINUTE),
            scale_down_simulation_timeout: Duration::from_secs(30),
            max_bulk_soft_taint_time: Duration::from_secs(3),
            dry_run: false,
            node_delete_delay_after_taint: Duration::from_secs(5),
            node_deletion_delay_timeout: Duration::from_secs(2 * MINUTE),
            node_deletion_candidate_ttl: Duration::ZERO,
            record_duplicated_events: false,
            status_config_map_name: "cluster-autoscaler-status".to_string(),
            // --- scheduler configuration ---
            scheduler_config: None,
            scale_down_non_empty_candidates_count: 30,
            scale_down_candidates_pool_ratio: 0.1,
            scale_down_candidates_pool_min_count: 50,
            node_deletion_batcher_interval: Duration::ZERO,
            drain_priority_config: Vec::new(),
            dynamic_node_delete_delay_after_taint_enabled: false,
            max_node_skip_eval_time_tracker_enabled: false,
            node_removal_latency_tracking_enabled: false,
            emit_per_nodegroup_metrics: false,
            // issue 13: scale-up, loop and cluster-state flags.
            estimator: EstimatorName::Binpacking,
            unready_nodes_scope: UnreadyNodesScope::Cluster,
            node_info_cache_expire_time: Duration::from_secs(87_600 * 60 * MINUTE),
            scaleup_simulation_for_skipped_node_groups_enabled: false,
            // Ferroscale's default; upstream's is false (ARCHITECTURE.md, deliberate differences).
            enable_proactive_scaleup: true,
            pod_injection_limit: 5000,
            async_node_groups: false,
            enable_graceful_degradation: false,
            pending_pods_batching_timeout: Duration::from_secs(4 * MINUTE),
            fastpath_binpacking_enabled: false,
            salvo_scale_up: false,
            salvo_scale_up_budget: Duration::from_secs(MINUTE),
            predicate_parallelism: 4,
            cluster_snapshot_parallelism: 16,
            scheduler_verbosity: -1,
            enable_inter_pod_affinity_hostname_fast_path: false,
            // --- issue 16: ProvisioningRequests ---
            enable_provisioning_requests: false,
            provisioning_request_initial_backoff_time: Duration::from_secs(60),
            provisioning_request_max_backoff_time: Duration::from_secs(600),
            provisioning_request_max_backoff_cache_size: 1000,
            check_capacity_batch_processing: false,
            check_capacity_provisioning_request_max_batch_size: 10,
            check_capacity_provisioning_request_batch_timebox: Duration::from_secs(10),
            check_capacity_processor_instance: String::new(),
            // --- issue 16: CapacityBuffers ---
            capacity_buffer_controller_enabled: false,
            capacity_buffer_pod_injection_enabled: false,
            capacity_buffer_pod_dry_run_enabled: true,
            capacity_buffer_ready_replicas_enabled: true,
            // --- issue 16: CapacityQuotas ---
            capacity_quotas_enabled: false,
            // --- issue 16: the gRPC expander ---
            grpc_expander_url: String::new(),
            grpc_expander_cert: String::new(),
            // --- issue 31: the cloud node controller ---
            cloud_node_controller: false,
            cloud_node_removal_grace_period: Duration::from_secs(MINUTE),
        }
    }
}

/// Go's `strconv.ParseBool`, which upstream boolean flags use.
fn parse_bool(flag: &str, value: &str) -> Result<bool, OptionError> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(OptionError::invalid(
            flag,
            value,
            "expected a boolean (true or false)",
        )),
    }
}

fn parse_duration(flag: &str, value: &str) -> Result<Duration, OptionError> {
    parse_go_duration(value).map_err(|e| OptionError::invalid(flag, value, e.reason))
}

fn parse_number<T: FromStr>(flag: &str, value: &str, what: &str) -> Result<T, OptionError> {
    value
        .trim()
        .parse()
        .map_err(|_| OptionError::invalid(flag, value, format!("expected {what}")))
}

fn parse_ratio(flag: &str, value: &str) -> Result<f64, OptionError> {
    let v: f64 = parse_number(flag, value, "a number")?;
    if !v.is_finite() || v < 0.0 {
        return Err(OptionError::invalid(
            flag,
            value,
            "expected a non-negative number",
        ));
    }
    Ok(v)
}

fn parse_min_max(flag: &str, value: &str) -> Result<MinMax, OptionError> {
    let (min, max) = value
        .split_once(':')
        .ok_or_else(|| OptionError::invalid(flag, value, "expected <min>:<max>"))?;
    let min: i64 = parse_number(flag, min, "an integer minimum")
        .map_err(|_| OptionError::invalid(flag, value, "minimum is not an integer"))?;
    let max: i64 = parse_number(flag, max, "an integer maximum")
        .map_err(|_| OptionError::invalid(flag, value, "maximum is not an integer"))?;
    check_min_max(flag, value, min, max)?;
    Ok(MinMax { min, max })
}

fn check_min_max(flag: &str, value: &str, min: i64, max: i64) -> Result<(), OptionError> {
    if min < 0 {
        return Err(OptionError::invalid(
            flag,
            value,
            "minimum must be at least 0",
        ));
    }
    if max < min {
        return Err(OptionError::invalid(
            flag,
            value,
            "maximum must not be below the minimum",
        ));
    }
    Ok(())
}

fn parse_gpu_limit(flag: &str, value: &str) -> Result<GpuLimit, OptionError> {
    let mut parts = value.split(':');
    let (Some(gpu_type), Some(min), Some(max), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(OptionError::invalid(
            flag,
            value,
            "expected <type>:<min>:<max>",
        ));
    };
    if gpu_type.is_empty() {
        return Err(OptionError::invalid(flag, value, "GPU type is empty"));
    }
    let min: i64 = min
        .trim()
        .parse()
        .map_err(|_| OptionError::invalid(flag, value, "minimum is not an integer"))?;
    let max: i64 = max
        .trim()
        .parse()
        .map_err(|_| OptionError::invalid(flag, value, "maximum is not an integer"))?;
    check_min_max(flag, value, min, max)?;
    Ok(GpuLimit {
        gpu_type: gpu_type.to_string(),
        min,
        max,
    })
}

/// Comma-separated names, empty items dropped (`a,,b` is `a,b`; the empty string is no names).
fn parse_name_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn parse_expander_chain(flag: &str, value: &str) -> Result<Vec<ExpanderName>, OptionError> {
    let names = parse_name_list(value);
    if names.is_empty() {
        return Err(OptionError::invalid(
            flag,
            value,
            "at least one expander is required",
        ));
    }
    let chain = names
        .iter()
        .map(|n| {
            n.parse::<ExpanderName>()
                .map_err(|reason| OptionError::invalid(flag, value, reason))
        })
        .collect::<Result<Vec<_>, _>>()?;
    check_expander_chain(flag, value, &chain)?;
    Ok(chain)
}

fn check_expander_chain(
    flag: &str,
    value: &str,
    chain: &[ExpanderName],
) -> Result<(), OptionError> {
    if chain.is_empty() {
        return Err(OptionError::invalid(
            flag,
            value,
            "at least one expander is required",
        ));
    }
    for (i, name) in chain.iter().enumerate() {
        if chain[..i].contains(name) {
            return Err(OptionError::invalid(
                flag,
                value,
                format!("expander {name} is listed twice"),
            ));
        }
        if *name == ExpanderName::Random && i + 1 < chain.len() {
            return Err(OptionError::invalid(
                flag,
                value,
                "random always picks a single option, so no expander may follow it",
            ));
        }
    }
    Ok(())
}

/// `--drain-priority-config`: `priority:seconds` pairs separated by commas (for example
/// `10000:20,1000:100,0:60`), returned by ascending priority. Upstream refuses a value it cannot
/// parse; so does this, naming the pair. An empty value means no bands.
fn parse_drain_priority(flag: &str, value: &str) -> Result<Vec<DrainPriorityBand>, OptionError> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    let mut bands = Vec::new();
    for item in value.split(',') {
        let (priority, seconds) = item.split_once(':').ok_or_else(|| {
            OptionError::invalid(
                flag,
                value,
                format!("{item:?} is not a priority and a grace period separated by ':'"),
            )
        })?;
        let priority: i32 = priority.parse().map_err(|_| {
            OptionError::invalid(
                flag,
                value,
                format!("priority {priority:?} is not an integer"),
            )
        })?;
        let grace_seconds: i64 = seconds.parse().map_err(|_| {
            OptionError::invalid(
                flag,
                value,
                format!("grace period {seconds:?} is not an integer number of seconds"),
            )
        })?;
        if grace_seconds < 0 {
            return Err(OptionError::invalid(
                flag,
                value,
                format!("grace period {grace_seconds} is negative"),
            ));
        }
        bands.push(DrainPriorityBand {
            priority,
            grace_seconds,
        });
    }
    bands.sort_by_key(|band| band.priority);
    Ok(bands)
}

fn format_drain_priority(bands: &[DrainPriorityBand]) -> String {
    bands
        .iter()
        .map(|b| format!("{}:{}", b.priority, b.grace_seconds))
        .collect::<Vec<_>>()
        .join(",")
}

impl AutoscalingOptions {
    /// Applies one flag by its upstream name (no leading dashes) with upstream syntax. Repeatable
    /// flags (`gpu-total`, `balancing-ignore-label`, `balancing-label`, `startup-taint`, ...) append;
    /// every other flag replaces its value.
    pub fn set(&mut self, flag: &str, value: &str) -> Result<(), OptionError> {
        let f = flag;
        let v = value;
        match flag {
            "expander" => self.expander = parse_expander_chain(f, v)?,
            "expendable-pods-priority-cutoff" => {
                self.expendable_pods_priority_cutoff = parse_number(f, v, "an integer")?
            }
            "new-pod-scale-up-delay" => self.new_pod_scale_up_delay = parse_duration(f, v)?,
            "max-nodes-total" => {
                self.max_nodes_total = parse_number(f, v, "a non-negative integer")?
            }
            "cores-total" => self.cores_total = parse_min_max(f, v)?,
            "memory-total" => self.memory_total_gib = parse_min_max(f, v)?,
            "gpu-total" => self.gpu_total.push(parse_gpu_limit(f, v)?),
            "max-nodes-per-scaleup" => {
                self.max_nodes_per_scaleup = parse_number(f, v, "a non-negative integer")?
            }
            "max-binpacking-time" => self.max_binpacking_time = parse_duration(f, v)?,
            "max-nodegroup-binpacking-duration" => {
                self.max_nodegroup_binpacking_duration = parse_duration(f, v)?
            }
            "balance-similar-node-groups" => self.balance_similar_node_groups = parse_bool(f, v)?,
            "balancing-ignore-label" => self.balancing_ignore_labels.push(v.to_string()),
            "balancing-label" => self.balancing_labels.push(v.to_string()),
            "memory-difference-ratio" => self.memory_difference_ratio = parse_ratio(f, v)?,
            "max-allocatable-difference-ratio" => {
                self.max_allocatable_difference_ratio = parse_ratio(f, v)?
            }
            "max-free-difference-ratio" => self.max_free_difference_ratio = parse_ratio(f, v)?,
            "initial-node-group-backoff-duration" => {
                self.initial_node_group_backoff_duration = parse_duration(f, v)?
            }
            "max-node-group-backoff-duration" => {
                self.max_node_group_backoff_duration = parse_duration(f, v)?
            }
            "node-group-backoff-reset-timeout" => {
                self.node_group_backoff_reset_timeout = parse_duration(f, v)?
            }
            "max-node-provision-time" => self.max_node_provision_time = parse_duration(f, v)?,
            "max-node-startup-time" => self.max_node_startup_time = parse_duration(f, v)?,
            "scan-interval" => self.scan_interval = parse_duration(f, v)?,
            "bypassed-scheduler-names" => self.bypassed_scheduler_names = parse_name_list(v),
            "allowed-scheduler-names" => self.allowed_scheduler_names = parse_name_list(v),
            "enforce-node-group-min-size" => self.enforce_node_group_min_size = parse_bool(f, v)?,
            "parallel-scale-up" => self.parallel_scale_up = parse_bool(f, v)?,
            "scale-up-from-zero" => self.scale_up_from_zero = parse_bool(f, v)?,
            "scale-from-unschedulable" => self.scale_from_unschedulable = parse_bool(f, v)?,
            "enable-csi-node-aware-scheduling" => {
                self.enable_csi_node_aware_scheduling = parse_bool(f, v)?
            }
            // Deprecated and locked to true upstream: DRA is always simulated, so there is no
            // field to set, only a value to refuse (docs/dra.md DRA-120).
            "enable-dynamic-resource-allocation" => {
                if !parse_bool(f, v)? {
                    return Err(OptionError::invalid(
                        f,
                        v,
                        "--enable-dynamic-resource-allocation is deprecated and must be true: \
                         dynamic resource allocation cannot be turned off",
                    ));
                }
            }
            "force-ds" => self.force_ds = parse_bool(f, v)?,
            "startup-taint" | "ignore-taint" => self.startup_taints.push(v.to_string()),
            "startup-taint-prefix" => self.startup_taint_prefixes.push(v.to_string()),
            "status-taint" => self.status_taints.push(v.to_string()),
            "ok-total-unready-count" => {
                self.ok_total_unready_count = parse_number(f, v, "a non-negative integer")?
            }
            "max-total-unready-percentage" => {
                self.max_total_unready_percentage = parse_ratio(f, v)?
            }
            "force-delete-unregistered-nodes" => {
                self.force_delete_unregistered_nodes = parse_bool(f, v)?
            }
            "force-delete-failed-nodes" => self.force_delete_failed_nodes = parse_bool(f, v)?,
            "namespace" => self.namespace = v.to_string(),
            "write-status-configmap" => self.write_status_configmap = parse_bool(f, v)?,
            "cloud-provider" => self.cloud_provider = v.to_string(),
            "nodes" => self.nodes.push(v.to_string()),
            "node-group-auto-discovery" => self.node_group_auto_discovery.push(v.to_string()),
            "leader-elect" => self.leader_elect = parse_bool(f, v)?,
            "scale-down-enabled" => self.scale_down_enabled = parse_bool(f, v)?,
            "scale-down-delay-after-add" => self.scale_down_delay_after_add = parse_duration(f, v)?,
            "scale-down-delay-after-delete" => {
                self.scale_down_delay_after_delete = parse_duration(f, v)?
            }
            "scale-down-delay-after-failure" => {
                self.scale_down_delay_after_failure = parse_duration(f, v)?
            }
            "scale-down-unneeded-time" => self.scale_down_unneeded_time = parse_duration(f, v)?,
            "scale-down-unready-time" => self.scale_down_unready_time = parse_duration(f, v)?,
            "scale-down-utilization-threshold" => {
                self.scale_down_utilization_threshold = parse_ratio(f, v)?
            }
            "scale-down-gpu-utilization-threshold" => {
                self.scale_down_gpu_utilization_threshold = parse_ratio(f, v)?
            }
            // `max-empty-bulk-delete` no longer exists upstream; it is kept as an alias.
            "max-scale-down-parallelism" | "max-empty-bulk-delete" => {
                self.max_scale_down_parallelism = parse_number(f, v, "a non-negative integer")?
            }
            "max-drain-parallelism" => {
                self.max_drain_parallelism = parse_number(f, v, "a non-negative integer")?
            }
            "max-bulk-soft-taint-count" => {
                self.max_bulk_soft_taint_count = parse_number(f, v, "a non-negative integer")?
            }
            "max-graceful-termination-sec" => {
                self.max_graceful_termination_sec = parse_number(f, v, "an integer")?
            }
            "max-pod-eviction-time" => self.max_pod_eviction_time = parse_duration(f, v)?,
            "cordon-node-before-terminating" => {
                self.cordon_node_before_terminating = parse_bool(f, v)?
            }
            "daemonset-eviction-for-empty-nodes" => {
                self.daemonset_eviction_for_empty_nodes = parse_bool(f, v)?
            }
            "daemonset-eviction-for-occupied-nodes" => {
                self.daemonset_eviction_for_occupied_nodes = parse_bool(f, v)?
            }
            "ignore-daemonsets-utilization" => {
                self.ignore_daemonsets_utilization = parse_bool(f, v)?
            }
            "skip-nodes-with-custom-controller-pods" => {
                self.skip_nodes_with_custom_controller_pods = parse_bool(f, v)?
            }
            "skip-nodes-with-local-storage" => {
                self.skip_nodes_with_local_storage = parse_bool(f, v)?
            }
            "skip-nodes-with-system-pods" => self.skip_nodes_with_system_pods = parse_bool(f, v)?,
            "scale-down-unready-enabled" => self.scale_down_unready_enabled = parse_bool(f, v)?,
            "ignore-mirror-pods-utilization" => {
                self.ignore_mirror_pods_utilization = parse_bool(f, v)?
            }
            "unremovable-node-recheck-timeout" => {
                self.unremovable_node_recheck_timeout = parse_duration(f, v)?
            }
            "scale-down-delay-type-local" => self.scale_down_delay_type_local = parse_bool(f, v)?,
            "min-replica-count" => self.min_replica_count = parse_number(f, v, "an integer")?,
            "blocking-system-pod-distruption-timeout" => {
                self.blocking_system_pod_distruption_timeout = parse_duration(f, v)?
            }
            "scale-down-simulation-timeout" => {
                self.scale_down_simulation_timeout = parse_duration(f, v)?
            }
            "max-bulk-soft-taint-time" => self.max_bulk_soft_taint_time = parse_duration(f, v)?,
            "dry-run" => self.dry_run = parse_bool(f, v)?,
            "node-delete-delay-after-taint" => {
                self.node_delete_delay_after_taint = parse_duration(f, v)?
            }
            "node-deletion-delay-timeout" => {
                self.node_deletion_delay_timeout = parse_duration(f, v)?
            }
            "node-deletion-candidate-ttl" => {
                self.node_deletion_candidate_ttl = parse_duration(f, v)?
            }
            "record-duplicated-events" => self.record_duplicated_events = parse_bool(f, v)?,
            "status-config-map-name" => self.status_config_map_name = v.to_string(),
            // --- scheduler configuration ---
            "scheduler-config-file" => self.scheduler_config = SchedulerConfigFile::read(f, v)?,
            // --- scale-down candidates, deletion batching, drain bands, scale-down metrics ---
            "scale-down-non-empty-candidates-count" => {
                self.scale_down_non_empty_candidates_count = parse_number(f, v, "an integer")?
            }
            "scale-down-candidates-pool-ratio" => {
                self.scale_down_candidates_pool_ratio = parse_ratio(f, v)?
            }
            "scale-down-candidates-pool-min-count" => {
                self.scale_down_candidates_pool_min_count = parse_number(f, v, "an integer")?
            }
            "node-deletion-batcher-interval" => {
                self.node_deletion_batcher_interval = parse_duration(f, v)?
            }
            "drain-priority-config" => self.drain_priority_config = parse_drain_priority(f, v)?,
            "dynamic-node-delete-delay-after-taint-enabled" => {
                self.dynamic_node_delete_delay_after_taint_enabled = parse_bool(f, v)?
            }
            "max-node-skip-eval-time-tracker-enabled" => {
                self.max_node_skip_eval_time_tracker_enabled = parse_bool(f, v)?
            }
            "node-removal-latency-tracking-enabled" => {
                self.node_removal_latency_tracking_enabled = parse_bool(f, v)?
            }
            "emit-per-nodegroup-metrics" => self.emit_per_nodegroup_metrics = parse_bool(f, v)?,
            // issue 13: scale-up, loop and cluster-state flags.
            "estimator" => {
                self.estimator = v
                    .parse()
                    .map_err(|reason: String| OptionError::invalid(f, v, reason))?
            }
            "unready-nodes-scope" => {
                self.unready_nodes_scope = v
                    .parse()
                    .map_err(|reason: String| OptionError::invalid(f, v, reason))?
            }
            "node-info-cache-expire-time" => {
                self.node_info_cache_expire_time = parse_duration(f, v)?
            }
            "scaleup-simulation-for-skipped-node-groups-enabled" => {
                self.scaleup_simulation_for_skipped_node_groups_enabled = parse_bool(f, v)?
            }
            "enable-proactive-scaleup" => self.enable_proactive_scaleup = parse_bool(f, v)?,
            "pod-injection-limit" => self.pod_injection_limit = parse_number(f, v, "an integer")?,
            "async-node-groups" => self.async_node_groups = parse_bool(f, v)?,
            "enable-graceful-degradation" => self.enable_graceful_degradation = parse_bool(f, v)?,
            "pending-pods-batching-timeout" => {
                self.pending_pods_batching_timeout = parse_duration(f, v)?
            }
            "fastpath-binpacking-enabled" => self.fastpath_binpacking_enabled = parse_bool(f, v)?,
            "salvo-scale-up" => self.salvo_scale_up = parse_bool(f, v)?,
            "salvo-scale-up-budget" => self.salvo_scale_up_budget = parse_duration(f, v)?,
            "predicate-parallelism" => {
                self.predicate_parallelism = parse_number(f, v, "an integer")?
            }
            "cluster-snapshot-parallelism" => {
                self.cluster_snapshot_parallelism = parse_number(f, v, "an integer")?
            }
            "scheduler-verbosity" => self.scheduler_verbosity = parse_number(f, v, "an integer")?,
            "enable-inter-pod-affinity-hostname-fast-path" => {
                self.enable_inter_pod_affinity_hostname_fast_path = parse_bool(f, v)?
            }
            // --- issue 16: ProvisioningRequests ---
            "enable-provisioning-requests" => self.enable_provisioning_requests = parse_bool(f, v)?,
            "provisioning-request-initial-backoff-time" => {
                self.provisioning_request_initial_backoff_time = parse_duration(f, v)?
            }
            "provisioning-request-max-backoff-time" => {
                self.provisioning_request_max_backoff_time = parse_duration(f, v)?
            }
            "provisioning-request-max-backoff-cache-size" => {
                self.provisioning_request_max_backoff_cache_size =
                    parse_number(f, v, "a non-negative integer")?
            }
            "check-capacity-batch-processing" => {
                self.check_capacity_batch_processing = parse_bool(f, v)?
            }
            "check-capacity-provisioning-request-max-batch-size" => {
                self.check_capacity_provisioning_request_max_batch_size =
                    parse_number(f, v, "a non-negative integer")?
            }
            "check-capacity-provisioning-request-batch-timebox" => {
                self.check_capacity_provisioning_request_batch_timebox = parse_duration(f, v)?
            }
            "check-capacity-processor-instance" => {
                self.check_capacity_processor_instance = v.to_string()
            }
            // --- issue 16: CapacityBuffers ---
            "capacity-buffer-controller-enabled" => {
                self.capacity_buffer_controller_enabled = parse_bool(f, v)?
            }
            "capacity-buffer-pod-injection-enabled" => {
                self.capacity_buffer_pod_injection_enabled = parse_bool(f, v)?
            }
            "capacity-buffer-pod-dry-run-enabled" => {
                self.capacity_buffer_pod_dry_run_enabled = parse_bool(f, v)?
            }
            "capacity-buffer-ready-replicas-enabled" => {
                self.capacity_buffer_ready_replicas_enabled = parse_bool(f, v)?
            }
            // --- issue 16: CapacityQuotas ---
            "capacity-quotas-enabled" => self.capacity_quotas_enabled = parse_bool(f, v)?,
            // --- issue 16: the gRPC expander ---
            "grpc-expander-url" => self.grpc_expander_url = v.to_string(),
            "grpc-expander-cert" => self.grpc_expander_cert = v.to_string(),
            // --- issue 31: the cloud node controller ---
            "cloud-node-controller" => self.cloud_node_controller = parse_bool(f, v)?,
            "cloud-node-removal-grace-period" => {
                self.cloud_node_removal_grace_period = parse_duration(f, v)?
            }
            _ => {
                return Err(OptionError::UnknownFlag {
                    flag: flag.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Checks the rules that involve several flags or that a direct field assignment could break.
    pub fn validate(&self) -> Result<(), OptionError> {
        let chain_text = self
            .expander
            .iter()
            .map(ExpanderName::as_str)
            .collect::<Vec<_>>()
            .join(",");
        check_expander_chain("expander", &chain_text, &self.expander)?;
        // Upstream exits when the grpc expander has no certificate (no insecure connection) or
        // cannot dial; an address is needed to dial at all (docs/grpc-expander.md GX-105).
        if self.expander.contains(&ExpanderName::Grpc) {
            if self.grpc_expander_url.is_empty() {
                return Err(OptionError::invalid(
                    "grpc-expander-url",
                    "",
                    "the grpc expander needs the address of its service",
                ));
            }
            if self.grpc_expander_cert.is_empty() {
                return Err(OptionError::invalid(
                    "grpc-expander-cert",
                    "",
                    "the grpc expander needs a certificate: insecure connections are not allowed",
                ));
            }
        }
        let text = |m: MinMax| format!("{}:{}", m.min, m.max);
        check_min_max(
            "cores-total",
            &text(self.cores_total),
            self.cores_total.min,
            self.cores_total.max,
        )?;
        check_min_max(
            "memory-total",
            &text(self.memory_total_gib),
            self.memory_total_gib.min,
            self.memory_total_gib.max,
        )?;
        for gpu in &self.gpu_total {
            let value = format!("{}:{}:{}", gpu.gpu_type, gpu.min, gpu.max);
            check_min_max("gpu-total", &value, gpu.min, gpu.max)?;
        }
        if !self.allowed_scheduler_names.is_empty()
            && let Some(outside) = self
                .bypassed_scheduler_names
                .iter()
                .find(|name| !self.allowed_scheduler_names.contains(name))
        {
            return Err(OptionError::invalid(
                "bypassed-scheduler-names",
                &self.bypassed_scheduler_names.join(","),
                format!("scheduler {outside:?} is not in --allowed-scheduler-names"),
            ));
        }
        // Drain bands replace the single grace cap, so both at once is refused, as upstream does
        // (docs/behaviour.md SD-118).
        if !self.drain_priority_config.is_empty()
            && self.max_graceful_termination_sec != MAX_GRACEFUL_TERMINATION_SEC_DEFAULT
        {
            return Err(OptionError::invalid(
                "drain-priority-config",
                &format_drain_priority(&self.drain_priority_config),
                "could not use --drain-priority-config together with --max-graceful-termination-sec",
            ));
        }
        if self.initial_node_group_backoff_duration > self.max_node_group_backoff_duration {
            return Err(OptionError::invalid(
                "initial-node-group-backoff-duration",
                &ferroscale_model::time::format_duration(self.initial_node_group_backoff_duration),
                "must not exceed --max-node-group-backoff-duration",
            ));
        }
        // issue 13: scale-up, loop and cluster-state flags.
        if self.predicate_parallelism < 1 {
            return Err(OptionError::invalid(
                "predicate-parallelism",
                &self.predicate_parallelism.to_string(),
                "must be at least 1",
            ));
        }
        Ok(())
    }

    /// The scheduler profile the simulated filters follow: the `--scheduler-config-file` one, or
    /// kube-scheduler's default profile.
    pub fn scheduler_profile(&self) -> Arc<SchedulerProfile> {
        self.scheduler_config
            .as_ref()
            .map_or_else(Arc::default, |c| c.profile.clone())
    }

    /// The scheduler's log level under `--v=verbosity`, as upstream derives it: -1 (or any
    /// negative value) means `--v`, and a value above `--v` is lowered to `--v`.
    pub fn effective_scheduler_verbosity(&self, verbosity: i64) -> i64 {
        if self.scheduler_verbosity < 0 {
            verbosity
        } else {
            self.scheduler_verbosity.min(verbosity)
        }
    }

    /// `memory-total` converted to bytes.
    pub fn memory_total_bytes(&self) -> MinMax {
        let gib = |v: i64| v.saturating_mul(1 << 30);
        MinMax {
            min: gib(self.memory_total_gib.min),
            max: gib(self.memory_total_gib.max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(flag: &str, value: &str) -> Result<AutoscalingOptions, OptionError> {
        let mut o = AutoscalingOptions::default();
        o.set(flag, value)?;
        Ok(o)
    }

    #[test]
    fn defaults_are_upstream_defaults() {
        let o = AutoscalingOptions::default();
        assert_eq!(o.expander, vec![ExpanderName::LeastWaste]);
        assert_eq!(o.expendable_pods_priority_cutoff, -10);
        assert_eq!(o.max_nodes_per_scaleup, 1000);
        assert_eq!(
            o.cores_total,
            MinMax {
                min: 0,
                max: 320_000
            }
        );
        assert_eq!(
            o.initial_node_group_backoff_duration,
            Duration::from_secs(300)
        );
        assert_eq!(
            o.node_group_backoff_reset_timeout,
            Duration::from_secs(3 * 3600)
        );
        assert!(o.scale_up_from_zero);
        assert!(o.validate().is_ok());
    }

    /// docs/behaviour.md SU-34.
    #[test]
    fn s34_random_followed_by_another_expander_is_refused() {
        let err = set("expander", "random,most-pods").unwrap_err();
        assert!(matches!(&err, OptionError::InvalidValue { flag, value, .. }
            if flag == "expander" && value == "random,most-pods"));
        assert!(err.to_string().contains("no expander may follow"));
        // Direct assignment is caught by validate.
        let o = AutoscalingOptions {
            expander: vec![ExpanderName::Random, ExpanderName::MostPods],
            ..AutoscalingOptions::default()
        };
        assert!(o.validate().is_err());
    }

    #[test]
    fn expander_chain_rules() {
        assert_eq!(
            set("expander", "priority,least-waste").unwrap().expander,
            vec![ExpanderName::Priority, ExpanderName::LeastWaste]
        );
        assert!(set("expander", "most-pods,random").is_ok());
        let dup = set("expander", "most-pods,most-pods").unwrap_err();
        assert!(dup.to_string().contains("listed twice"), "{dup}");
        let unknown = set("expander", "cheapest").unwrap_err();
        assert!(unknown.to_string().contains("\"cheapest\""), "{unknown}");
        assert!(set("expander", "").is_err());
        // docs/grpc-expander.md GX-105: grpc needs an address and a certificate.
        assert!(set("expander", "grpc").unwrap().validate().is_err());
        let mut grpc = set("expander", "grpc,least-waste").unwrap();
        grpc.set("grpc-expander-url", "expander.example:8443")
            .unwrap();
        assert!(grpc.validate().is_err(), "no certificate");
        grpc.set("grpc-expander-cert", "/etc/expander/ca.pem")
            .unwrap();
        assert!(grpc.validate().is_ok());
    }

    #[test]
    fn unknown_flag_names_the_flag() {
        let err = set("no-such-flag", "1").unwrap_err();
        assert_eq!(
            err,
            OptionError::UnknownFlag {
                flag: "no-such-flag".into()
            }
        );
        assert_eq!(err.to_string(), "unknown flag --no-such-flag");
    }

    #[test]
    fn bad_values_name_flag_and_value() {
        for (flag, value) in [
            ("scan-interval", "10 seconds"),
            ("balance-similar-node-groups", "yes"),
            ("max-nodes-total", "-1"),
            ("cores-total", "16"),
            ("cores-total", "10:5"),
            ("cores-total", "-1:5"),
            ("memory-total", "a:b"),
            ("gpu-total", "nvidia-t4:1"),
            ("gpu-total", "nvidia-t4:4:2"),
            ("gpu-total", ":0:2"),
            ("memory-difference-ratio", "-0.1"),
            ("expendable-pods-priority-cutoff", "low"),
        ] {
            let err = set(flag, value).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains(flag) && text.contains(value),
                "{flag}={value}: {text}"
            );
        }
    }

    #[test]
    fn upstream_syntax_is_accepted() {
        let mut o = AutoscalingOptions::default();
        o.set("scan-interval", "1m30s").unwrap();
        o.set("cores-total", "8:100").unwrap();
        o.set("memory-total", "1:64").unwrap();
        o.set("gpu-total", "nvidia-t4:0:4").unwrap();
        o.set("gpu-total", "nvidia-a100:1:8").unwrap();
        o.set("balancing-ignore-label", "a").unwrap();
        o.set("balancing-ignore-label", "b").unwrap();
        o.set("balance-similar-node-groups", "true").unwrap();
        o.set("parallel-scale-up", "1").unwrap();
        o.set("max-empty-bulk-delete", "20").unwrap();
        assert_eq!(o.scan_interval, Duration::from_secs(90));
        assert_eq!(o.cores_total, MinMax { min: 8, max: 100 });
        assert_eq!(
            o.memory_total_bytes(),
            MinMax {
                min: 1 << 30,
                max: 64 << 30
            }
        );
        assert_eq!(o.gpu_total.len(), 2);
        assert_eq!(o.gpu_total[1].gpu_type, "nvidia-a100");
        assert_eq!(o.balancing_ignore_labels, vec!["a", "b"]);
        assert!(o.balance_similar_node_groups && o.parallel_scale_up);
        assert_eq!(o.max_scale_down_parallelism, 20);
    }

    /// docs/behaviour.md SU-107: `binpacking` is accepted, anything else is refused naming the
    /// valid values.
    #[test]
    fn estimator_accepts_binpacking_only() {
        assert_eq!(
            set("estimator", "binpacking").unwrap().estimator,
            EstimatorName::Binpacking
        );
        let err = set("estimator", "oldbinpacking").unwrap_err().to_string();
        assert!(
            err.contains("--estimator")
                && err.contains("oldbinpacking")
                && err.contains("valid: binpacking"),
            "{err}"
        );
    }

    /// docs/behaviour.md CS-107.
    #[test]
    fn unready_nodes_scope_values() {
        assert_eq!(
            AutoscalingOptions::default().unready_nodes_scope,
            UnreadyNodesScope::Cluster
        );
        assert_eq!(
            set("unready-nodes-scope", "autoscaled")
                .unwrap()
                .unready_nodes_scope,
            UnreadyNodesScope::Autoscaled
        );
        let err = set("unready-nodes-scope", "all").unwrap_err().to_string();
        assert!(
            err.contains("unready-nodes-scope") && err.contains("cluster, autoscaled"),
            "{err}"
        );
    }

    /// docs/behaviour.md SU-110–SU-114: the issue-13 scale-up flags parse with upstream's syntax
    /// and defaults.
    #[test]
    fn issue_13_scale_up_flags_parse_with_upstream_defaults() {
        let o = AutoscalingOptions::default();
        assert_eq!(
            o.node_info_cache_expire_time,
            Duration::from_secs(87_600 * 3600)
        );
        assert_eq!(o.pod_injection_limit, 5000);
        assert_eq!(o.pending_pods_batching_timeout, Duration::from_secs(240));
        assert_eq!(
            (o.predicate_parallelism, o.cluster_snapshot_parallelism),
            (4, 16)
        );
        assert_eq!(o.scheduler_verbosity, -1);
        assert!(o.enable_proactive_scaleup && !o.async_node_groups);
        assert!(!o.enable_graceful_degradation && !o.fastpath_binpacking_enabled);
        assert!(!o.salvo_scale_up);
        assert_eq!(o.salvo_scale_up_budget, Duration::from_secs(60));
        assert!(!o.scaleup_simulation_for_skipped_node_groups_enabled);
        assert!(!o.enable_inter_pod_affinity_hostname_fast_path);
        let mut o = AutoscalingOptions::default();
        for (flag, value) in [
            ("node-info-cache-expire-time", "90m"),
            ("scaleup-simulation-for-skipped-node-groups-enabled", "true"),
            ("enable-proactive-scaleup", "false"),
            ("pod-injection-limit", "-1"),
            ("async-node-groups", "true"),
            ("enable-graceful-degradation", "true"),
            ("pending-pods-batching-timeout", "30s"),
            ("fastpath-binpacking-enabled", "true"),
            ("salvo-scale-up", "true"),
            ("salvo-scale-up-budget", "30s"),
            ("cluster-snapshot-parallelism", "2"),
            ("scheduler-verbosity", "7"),
            ("enable-inter-pod-affinity-hostname-fast-path", "true"),
        ] {
            o.set(flag, value)
                .unwrap_or_else(|e| panic!("{flag}={value}: {e}"));
        }
        assert_eq!(o.node_info_cache_expire_time, Duration::from_secs(5400));
        assert_eq!(o.pod_injection_limit, -1);
        assert!(o.validate().is_ok());
        for (flag, value) in [
            ("pod-injection-limit", "many"),
            ("pending-pods-batching-timeout", "4 minutes"),
            ("scheduler-verbosity", "high"),
            ("async-node-groups", "yes"),
        ] {
            let err = set(flag, value).unwrap_err().to_string();
            assert!(err.contains(flag) && err.contains(value), "{err}");
        }
    }

    /// docs/behaviour.md SU-112: upstream refuses a `--predicate-parallelism` below 1.
    #[test]
    fn predicate_parallelism_below_one_is_refused() {
        assert!(
            set("predicate-parallelism", "1")
                .unwrap()
                .validate()
                .is_ok()
        );
        for value in ["0", "-3"] {
            let err = set("predicate-parallelism", value)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("predicate-parallelism") && err.contains(value),
                "{err}"
            );
        }
    }

    /// docs/behaviour.md SU-113: `--scheduler-verbosity` -1 follows `--v`, and a value above
    /// `--v` is lowered to it.
    #[test]
    fn scheduler_verbosity_follows_v() {
        let o = AutoscalingOptions::default();
        assert_eq!(o.effective_scheduler_verbosity(4), 4);
        let o = set("scheduler-verbosity", "2").unwrap();
        assert_eq!(o.effective_scheduler_verbosity(4), 2);
        let o = set("scheduler-verbosity", "9").unwrap();
        assert_eq!(o.effective_scheduler_verbosity(4), 4);
    }

    #[test]
    fn bypassed_schedulers_must_be_allowed() {
        let mut o = AutoscalingOptions::default();
        o.set("bypassed-scheduler-names", "a,b").unwrap();
        assert!(
            o.validate().is_ok(),
            "no allow-list means every scheduler is allowed"
        );
        o.set("allowed-scheduler-names", "a").unwrap();
        let err = o.validate().unwrap_err();
        assert!(
            err.to_string().contains("bypassed-scheduler-names")
                && err.to_string().contains("\"b\"")
        );
        o.set("allowed-scheduler-names", "a,b,c").unwrap();
        assert!(o.validate().is_ok());
    }

    // --- scheduler configuration (--scheduler-config-file) ---

    /// A file of this test's own under the system temporary directory.
    fn temp_file(name: &str, text: &[u8]) -> String {
        let dir = std::env::temp_dir().join(format!("ferroscale-options-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    #[test]
    fn scheduler_config_file_is_read_once_into_a_typed_profile() {
        use ferroscale_scheduling::FilterPlugin;
        let o = AutoscalingOptions::default();
        assert_eq!(o.scheduler_config, None);
        assert_eq!(*o.scheduler_profile(), SchedulerProfile::default());

        let path = temp_file(
            "sched.yaml",
            b"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- plugins:
    filter:
      disabled: [{name: TaintToleration}]
  pluginConfig:
  - name: NodeResourcesFit
    args: {ignoredResources: [example.com/dongle]}
",
        );
        let o = set("scheduler-config-file", &path).unwrap();
        let config = o.scheduler_config.as_ref().unwrap();
        assert_eq!(config.path, path);
        assert!(
            !o.scheduler_profile()
                .is_enabled(FilterPlugin::TaintToleration)
        );
        assert!(o.scheduler_profile().ignores_resource("example.com/dongle"));
        // An empty value is upstream's default: no file.
        let mut o = o;
        o.set("scheduler-config-file", "").unwrap();
        assert_eq!(o.scheduler_config, None);
    }

    #[test]
    fn scheduler_config_file_errors_name_the_file_the_field_and_the_value() {
        let path = temp_file(
            "refused.yaml",
            b"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 50
",
        );
        let e = set("scheduler-config-file", &path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "invalid value {path:?} for flag --scheduler-config-file: percentageOfNodesToScore: 50: not supported"
            )),
            "{e}"
        );

        let missing = format!("{path}.missing");
        let e = set("scheduler-config-file", &missing)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("{missing:?}")) && e.contains("cannot open it"),
            "{e}"
        );

        let dir = std::env::temp_dir().display().to_string();
        let e = set("scheduler-config-file", &dir).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");

        let big = temp_file("big.yaml", &vec![b'#'; 2 << 20]);
        let e = set("scheduler-config-file", &big).unwrap_err().to_string();
        assert!(
            e.contains("2097152 bytes: larger than the 1048576 bytes"),
            "{e}"
        );
    }
}
