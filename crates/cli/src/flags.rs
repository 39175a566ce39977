//! The flags of `ferroscale run`, in upstream syntax: `--flag=value`, `--flag value`, a single dash
//! too, bare `--flag` for booleans, repeated flags for lists. Engine flags go through
//! `AutoscalingOptions::set`; the flags of the process itself (provider, API access, HTTP address,
//! leader election, logging, liveness) are parsed here. Known upstream flags that Ferroscale does
//! not implement, and unknown flags, are refused all at once, by name.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ferroscale_core::{AutoscalingOptions, OptionError};
use ferroscale_metrics::HealthLimits;
use ferroscale_model::parse_go_duration;

/// Upstream flags that Ferroscale does not implement: refused rather than silently ignored, so
/// nobody believes a setting is in effect when it is not.
pub const UNSUPPORTED_UPSTREAM_FLAGS: &[&str] = &[
    "add-dir-header",
    "alsologtostderr",
    "async-node-groups",
    "aws-use-static-instance-list",
    "bulk-mig-instances-listing-enabled",
    "capacity-buffer-controller-enabled",
    "capacity-buffer-pod-dry-run-enabled",
    "capacity-buffer-pod-injection-enabled",
    "capacity-quotas-enabled",
    "check-capacity-batch-processing",
    "check-capacity-processor-instance",
    "check-capacity-provisioning-request-batch-timebox",
    "check-capacity-provisioning-request-max-batch-size",
    "cloud-provider-gce-l7lb-src-cidrs",
    "cloud-provider-gce-lb-src-cidrs",
    "cluster-name",
    "cluster-snapshot-parallelism",
    "drain-priority-config",
    "dynamic-node-delete-delay-after-taint-enabled",
    "emit-per-nodegroup-metrics",
    "enable-csi-node-aware-scheduling",
    "enable-dynamic-resource-allocation",
    "enable-graceful-degradation",
    "enable-proactive-scaleup",
    "enable-provisioning-requests",
    "fastpath-binpacking-enabled",
    "feature-gates",
    "gce-concurrent-refreshes",
    "gce-mig-instances-min-refresh-wait-time",
    "grpc-expander-cert",
    "grpc-expander-url",
    "kube-api-content-type",
    "kube-client-burst",
    "kube-client-qps",
    "kubernetes",
    "log-backtrace-at",
    "log-dir",
    "log-file",
    "log-file-max-size",
    "log-flush-frequency",
    "logging-format",
    "max-node-skip-eval-time-tracker-enabled",
    "node-deletion-batcher-interval",
    "node-info-cache-expire-time",
    "node-removal-latency-tracking-enabled",
    "one-output",
    "pending-pods-batching-timeout",
    "pod-injection-limit",
    "predicate-parallelism",
    "provisioning-request-initial-backoff-time",
    "provisioning-request-max-backoff-cache-size",
    "provisioning-request-max-backoff-time",
    "regional",
    "salvo-scale-up",
    "salvo-scale-up-budget",
    "scale-down-candidates-pool-min-count",
    "scale-down-candidates-pool-ratio",
    "scale-down-non-empty-candidates-count",
    "scaleup-simulation-for-skipped-node-groups-enabled",
    "scheduler-config-file",
    "scheduler-verbosity",
    "skip-headers",
    "skip-log-headers",
    "stderrthreshold",
    "user-agent",
    "vmodule",
];

/// What the provider errors list as built.
const BUILT_PROVIDERS: &str = "kwok, externalgrpc, clusterapi, exoscale";

/// The cloud provider to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloudProviderKind {
    Kwok,
    /// An out-of-tree provider over gRPC; `--cloud-config` names its connection file.
    ExternalGrpc,
    /// Cluster API: `--cloud-config` is the management cluster's kubeconfig.
    ClusterApi,
    /// Exoscale SKS nodepools and Instance Pools; credentials from the environment.
    Exoscale,
}

/// Leader election settings (`--leader-elect*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionFlags {
    pub enabled: bool,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub resource_name: String,
}

/// When iterations start besides every `--scan-interval` (docs/behaviour.md
/// LOOP-103–LOOP-105).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopTiming {
    /// `--frequent-loops-enabled` (upstream, default true): start at once after an iteration
    /// that scaled up or started a deletion, and wake early for a new unschedulable pod.
    pub frequent_loops: bool,
    /// `--unschedulable-pods-batching-window` (Ferroscale, default 300ms): after the first new
    /// unschedulable pod wakes the loop, how long to wait for the rest of its burst so that one
    /// iteration plans for all of them.
    pub batching_window: Duration,
}

impl Default for LoopTiming {
    fn default() -> Self {
        LoopTiming {
            frequent_loops: true,
            batching_window: Duration::from_millis(300),
        }
    }
}

// Debugging endpoints and the replay file.
/// `--debugging-snapshot-enabled`, `--profiling` (upstream, both default false) and
/// `--snapshot-scenario` (Ferroscale).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DebuggingFlags {
    /// Serve the next loop's snapshot on `/snapshotz` (docs/operations.md).
    pub snapshot_enabled: bool,
    /// Serve CPU and heap profiles on `/debug/pprof/`.
    pub profiling: bool,
    /// Write the first loop's snapshot to this file as a scenario for `ferroscale simulate`.
    pub snapshot_scenario: Option<PathBuf>,
}

/// One static group of `--nodes=<min>:<max>:<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticNodeGroup {
    pub min: usize,
    pub max: usize,
    pub name: String,
}

/// Everything `ferroscale run` was told.
#[derive(Debug, Clone)]
pub struct RunFlags {
    pub options: AutoscalingOptions,
    pub cloud_provider: CloudProviderKind,
    pub cloud_config: Option<PathBuf>,
    pub kubeconfig: Option<PathBuf>,
    /// `--clusterapi-cloud-config-authoritative`: an empty `--cloud-config` means the in-cluster
    /// configuration for the management cluster instead of `--kubeconfig`.
    pub clusterapi_cloud_config_authoritative: bool,
    pub address: SocketAddr,
    pub leader_election: LeaderElectionFlags,
    /// `--v`: 1 decisions and errors, 5 every provider call.
    pub verbosity: u8,
    pub health: HealthLimits,
    pub static_node_groups: Vec<StaticNodeGroup>,
    pub loop_timing: LoopTiming,
    /// `--cache-sync-timeout` (Ferroscale, default 5m): how long the watch caches may take for
    /// their first list before `run` gives up with an error.
    pub cache_sync_timeout: Duration,
    pub debugging: DebuggingFlags,
    /// The engine flags given, by upstream name, in command-line order: a replay scenario's
    /// `options:`.
    pub engine_flags: Vec<(String, String)>,
}

/// What the command line asked for.
#[derive(Debug)]
pub enum RunCommand {
    Run(Box<RunFlags>),
    Help,
}

/// Flags parsed here rather than by the engine's options.
fn is_process_flag(flag: &str) -> bool {
    matches!(
        flag,
        "address"
            | "cloud-config"
            | "kubeconfig"
            | "clusterapi-cloud-config-authoritative"
            | "v"
            | "logtostderr"
            | "leader-elect-lease-duration"
            | "leader-elect-renew-deadline"
            | "leader-elect-retry-period"
            | "leader-elect-resource-name"
            | "leader-elect-resource-namespace"
            | "leader-elect-resource-lock"
            | "max-inactivity"
            | "max-failing-time"
            | "max-startup-time"
            | "frequent-loops-enabled"
            | "unschedulable-pods-batching-window"
            | "cache-sync-timeout"
            // Debugging endpoints and the replay file.
            | "debugging-snapshot-enabled"
            | "profiling"
            | "snapshot-scenario"
    )
}

/// Whether a flag is a boolean (a bare `--flag` means true and never takes the next argument).
fn is_boolean(flag: &str) -> bool {
    if matches!(
        flag,
        "logtostderr"
            | "frequent-loops-enabled"
            | "clusterapi-cloud-config-authoritative"
            | "debugging-snapshot-enabled"
            | "profiling"
    ) {
        return true;
    }
    if is_process_flag(flag) {
        return false;
    }
    // A boolean engine flag accepts "true" and refuses anything that is not a boolean; string
    // flags accept both, numeric and duration flags refuse both.
    let mut probe = AutoscalingOptions::default();
    probe.set(flag, "true").is_ok() && probe.set(flag, "not-a-boolean").is_err()
}

fn known_flag(flag: &str) -> bool {
    is_process_flag(flag)
        || !matches!(
            AutoscalingOptions::default().set(flag, ""),
            Err(OptionError::UnknownFlag { .. })
        )
}

/// Go's `strconv.ParseBool`, which upstream's flags use.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

pub fn duration(flag: &str, value: &str) -> Result<Duration, String> {
    parse_go_duration(value).map_err(|e| format!("invalid value {value:?} for flag --{flag}: {e}"))
}

fn parse_static_group(value: &str) -> Result<StaticNodeGroup, String> {
    let invalid = |reason: &str| format!("invalid value {value:?} for flag --nodes: {reason}");
    let mut parts = value.splitn(3, ':');
    let (Some(min), Some(max), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(invalid("expected <min>:<max>:<name>"));
    };
    let min: usize = min
        .trim()
        .parse()
        .map_err(|_| invalid("minimum is not a non-negative integer"))?;
    let max: usize = max
        .trim()
        .parse()
        .map_err(|_| invalid("maximum is not a non-negative integer"))?;
    if max < min {
        return Err(invalid("maximum must not be below the minimum"));
    }
    if name.trim().is_empty() {
        return Err(invalid("the group name is empty"));
    }
    Ok(StaticNodeGroup {
        min,
        max,
        name: name.trim().to_string(),
    })
}

/// Splits the arguments into (flag, value) pairs in upstream syntax. `is_bool` says which flags
/// are booleans (a bare flag means true and never takes the next argument); `known` says which
/// flags exist (an unknown bare flag does not swallow the next argument either: it is reported by
/// name later).
pub fn split_upstream_flags(
    args: &[String],
    is_bool: impl Fn(&str) -> bool,
    known: impl Fn(&str) -> bool,
) -> Result<Vec<(String, String)>, Vec<String>> {
    let mut pairs = Vec::new();
    let mut errors = Vec::new();
    let mut index = 0;
    while index < args.len() {
        let argument = &args[index];
        index += 1;
        let Some(stripped) = argument
            .strip_prefix("--")
            .or_else(|| argument.strip_prefix('-'))
            .filter(|s| !s.is_empty())
        else {
            errors.push(format!(
                "unexpected argument {argument:?}: only flags are expected"
            ));
            continue;
        };
        if let Some((flag, value)) = stripped.split_once('=') {
            pairs.push((flag.to_string(), value.to_string()));
        } else if matches!(stripped, "help" | "h") || is_bool(stripped) || !known(stripped) {
            // Unknown flags are reported later by name; do not swallow the next argument for them.
            pairs.push((stripped.to_string(), "true".to_string()));
        } else if let Some(value) = args.get(index) {
            pairs.push((stripped.to_string(), value.clone()));
            index += 1;
        } else {
            errors.push(format!("flag needs an argument: --{stripped}"));
        }
    }
    if errors.is_empty() {
        Ok(pairs)
    } else {
        Err(errors)
    }
}

/// Parses the arguments after `run`. The error lists every problem found, one per line.
pub fn parse_run_flags(args: &[String]) -> Result<RunCommand, String> {
    let pairs =
        split_upstream_flags(args, is_boolean, known_flag).map_err(|errors| errors.join("\n"))?;
    if pairs.iter().any(|(flag, _)| flag == "help" || flag == "h") {
        return Ok(RunCommand::Help);
    }
    let mut options = AutoscalingOptions::default();
    let mut errors = Vec::new();
    let mut unsupported = Vec::new();
    let mut unknown = Vec::new();
    let mut cloud_config = None;
    let mut kubeconfig = None;
    let mut clusterapi_cloud_config_authoritative = false;
    let mut address_text = ":8085".to_string();
    let mut leader_election = LeaderElectionFlags {
        enabled: true,
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
        resource_name: "cluster-autoscaler".to_string(),
    };
    let mut verbosity = 0u8;
    let mut health = HealthLimits::default();
    let mut static_node_groups = Vec::new();
    let mut loop_timing = LoopTiming::default();
    let mut cache_sync_timeout = Duration::from_secs(300);
    let mut debugging = DebuggingFlags::default();
    let mut engine_flags = Vec::new();

    for (flag, value) in &pairs {
        let mut record = |result: Result<(), String>| {
            if let Err(e) = result {
                errors.push(e);
            }
        };
        match flag.as_str() {
            "address" => address_text = value.clone(),
            "cloud-config" => {
                cloud_config = Some(PathBuf::from(value)).filter(|p| !p.as_os_str().is_empty())
            }
            "kubeconfig" => {
                kubeconfig = Some(PathBuf::from(value)).filter(|p| !p.as_os_str().is_empty())
            }
            "clusterapi-cloud-config-authoritative" => match parse_bool(value) {
                Some(v) => clusterapi_cloud_config_authoritative = v,
                None => errors.push(format!(
                    "invalid value {value:?} for flag --clusterapi-cloud-config-authoritative: expected true or false"
                )),
            },
            "v" => record(value.trim().parse().map(|v| verbosity = v).map_err(|_| {
                format!(
                    "invalid value {value:?} for flag --v: expected a small non-negative integer"
                )
            })),
            // Logs always go to standard error; only the default is accepted.
            "logtostderr" => {
                if parse_bool(value) != Some(true) {
                    errors.push(format!("--logtostderr={value} is not supported: Ferroscale always logs to standard error"));
                }
            }
            "leader-elect-lease-duration" => {
                record(duration(flag, value).map(|d| leader_election.lease_duration = d))
            }
            "leader-elect-renew-deadline" => {
                record(duration(flag, value).map(|d| leader_election.renew_deadline = d))
            }
            "leader-elect-retry-period" => {
                record(duration(flag, value).map(|d| leader_election.retry_period = d))
            }
            "leader-elect-resource-name" => leader_election.resource_name = value.clone(),
            // Upstream creates the lock in --namespace whatever this says (docs/behaviour.md
            // LOOP-102).
            "leader-elect-resource-namespace" => {}
            "leader-elect-resource-lock" => {
                if value != "leases" {
                    errors.push(format!("invalid value {value:?} for flag --leader-elect-resource-lock: only leases is supported"));
                }
            }
            "max-inactivity" => record(duration(flag, value).map(|d| health.max_inactivity = d)),
            "max-failing-time" => {
                record(duration(flag, value).map(|d| health.max_failing_time = d))
            }
            "frequent-loops-enabled" => match parse_bool(value) {
                Some(enabled) => loop_timing.frequent_loops = enabled,
                None => errors.push(format!(
                    "invalid value {value:?} for flag --frequent-loops-enabled: expected true or false"
                )),
            },
            "unschedulable-pods-batching-window" => {
                record(duration(flag, value).map(|d| loop_timing.batching_window = d))
            }
            "cache-sync-timeout" => {
                record(duration(flag, value).map(|d| cache_sync_timeout = d))
            }
            "max-startup-time" => {
                record(duration(flag, value).map(|d| health.max_startup_time = d))
            }
            "nodes" => match parse_static_group(value) {
                Ok(group) => {
                    static_node_groups.push(group);
                    record(options.set(flag, value).map_err(|e| e.to_string()));
                }
                Err(e) => errors.push(e),
            },
            // Debugging endpoints and the replay file.
            "debugging-snapshot-enabled" | "profiling" => match parse_bool(value) {
                Some(enabled) if flag == "profiling" => debugging.profiling = enabled,
                Some(enabled) => debugging.snapshot_enabled = enabled,
                None => errors.push(format!(
                    "invalid value {value:?} for flag --{flag}: expected true or false"
                )),
            },
            "snapshot-scenario" => {
                if value.is_empty() {
                    errors.push("--snapshot-scenario needs a file name".to_string());
                } else {
                    debugging.snapshot_scenario = Some(PathBuf::from(value));
                }
            }
            other if UNSUPPORTED_UPSTREAM_FLAGS.contains(&other) => {
                unsupported.push(format!("--{other}"))
            }
            other => match options.set(other, value) {
                Ok(()) => engine_flags.push((other.to_string(), value.clone())),
                Err(OptionError::UnknownFlag { flag }) => unknown.push(format!("--{flag}")),
                Err(e) => errors.push(e.to_string()),
            },
        }
    }
    if !unsupported.is_empty() {
        errors.push(format!(
            "upstream flags not implemented by Ferroscale: {}",
            unsupported.join(", ")
        ));
    }
    if !unknown.is_empty() {
        errors.push(format!("unknown flags: {}", unknown.join(", ")));
    }
    if let Err(e) = options.validate() {
        errors.push(e.to_string());
    }
    leader_election.enabled = options.leader_elect;
    let cloud_provider = match options.cloud_provider.as_str() {
        "kwok" => Some(CloudProviderKind::Kwok),
        "externalgrpc" => {
            if cloud_config.is_none() {
                errors.push(
                    "--cloud-provider=externalgrpc needs --cloud-config=FILE (address, key, cert, cacert, grpc_timeout)"
                        .to_string(),
                );
            }
            Some(CloudProviderKind::ExternalGrpc)
        }
        "clusterapi" => Some(CloudProviderKind::ClusterApi),
        "exoscale" => Some(CloudProviderKind::Exoscale),
        "" => {
            errors.push(format!(
                "--cloud-provider is required (built: {BUILT_PROVIDERS})"
            ));
            None
        }
        other => {
            errors.push(format!(
                "--cloud-provider={other}: not supported by Ferroscale (built: {BUILT_PROVIDERS})"
            ));
            None
        }
    };
    let address = match ferroscale_metrics::parse_address(&address_text) {
        Ok(address) => Some(address),
        Err(e) => {
            errors.push(e.to_string());
            None
        }
    };
    match (errors.is_empty(), cloud_provider, address) {
        (true, Some(cloud_provider), Some(address)) => Ok(RunCommand::Run(Box::new(RunFlags {
            options,
            cloud_provider,
            cloud_config,
            kubeconfig,
            clusterapi_cloud_config_authoritative,
            address,
            leader_election,
            verbosity,
            health,
            static_node_groups,
            loop_timing,
            cache_sync_timeout,
            debugging,
            engine_flags,
        }))),
        _ => Err(errors.join("\n")),
    }
}

pub const RUN_USAGE: &str = "\
Usage: ferroscale [run] --cloud-provider=kwok|externalgrpc|clusterapi|exoscale [FLAGS]

Runs the autoscaler against the cluster: every --scan-interval one loop of scale-up and
scale-down decisions, carried out through the cloud provider and the Kubernetes API.
Flags use the upstream Cluster Autoscaler's names and syntax (--flag=value or --flag value;
repeat a flag for lists), for example:

  --cloud-provider=kwok            the provider: kwok, externalgrpc, clusterapi or exoscale
  --cloud-config=FILE              provider configuration (kwok: instead of its ConfigMap;
                                   externalgrpc: the server's address and TLS files;
                                   clusterapi: the management cluster's kubeconfig)
  --kubeconfig=FILE                API access (default: in-cluster service account)
  --clusterapi-cloud-config-authoritative
                                   clusterapi: without --cloud-config, reach the management
                                   cluster in-cluster rather than through --kubeconfig
  --node-group-auto-discovery=clusterapi:namespace=NS,clusterName=NAME,KEY=VALUE
                                   clusterapi: which scalable resources to manage (repeatable)
  --nodes=MIN:MAX:NAME             exoscale: bounds of the pool or nodepool NAME (repeatable)
  --namespace=kube-system          status ConfigMap, leader-election Lease
  --address=:8085                  /metrics and /health-check
  --scan-interval=10s              loop period
  --frequent-loops-enabled=true    loop again at once after acting, and early for new
                                   unschedulable pods
  --unschedulable-pods-batching-window=300ms
                                   (Ferroscale) wait this long after the first new
                                   unschedulable pod so one loop sees its whole burst
  --cache-sync-timeout=5m          (Ferroscale) give up when the first list of the cluster
                                   takes longer
  --leader-elect=true              and --leader-elect-lease-duration, -renew-deadline,
                                   -retry-period, -resource-name
  --v=1                            1: decisions and errors, 5: every provider call
  --dry-run                        decide and report, change nothing

Every engine flag of docs/flags (expander, scale-down-*, max-nodes-total, ...) is accepted.
Upstream flags Ferroscale does not implement are refused by name.";

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &[&str]) -> Vec<String> {
        text.iter().map(|s| s.to_string()).collect()
    }

    fn parse(text: &[&str]) -> Result<RunFlags, String> {
        match parse_run_flags(&args(text))? {
            RunCommand::Run(flags) => Ok(*flags),
            RunCommand::Help => Err("help".into()),
        }
    }

    #[test]
    fn upstream_syntax_forms_are_all_accepted() {
        let flags = parse(&[
            "--cloud-provider=kwok",
            "--scan-interval",
            "30s",
            "-expander=priority,least-waste",
            "--balance-similar-node-groups",
            "--balancing-ignore-label=a",
            "--balancing-ignore-label",
            "b",
            "--dry-run=true",
            "--leader-elect=false",
            "--leader-elect-lease-duration=20s",
            "--v=5",
            "--address=127.0.0.1:9999",
            "--max-inactivity=5m",
            "--nodes=0:10:pool-a",
            "--logtostderr",
            "--frequent-loops-enabled=false",
            "--unschedulable-pods-batching-window=1s",
        ])
        .unwrap();
        assert_eq!(
            flags.loop_timing,
            LoopTiming {
                frequent_loops: false,
                batching_window: Duration::from_secs(1),
            }
        );
        assert_eq!(flags.cloud_provider, CloudProviderKind::Kwok);
        assert_eq!(flags.options.scan_interval, Duration::from_secs(30));
        assert!(flags.options.balance_similar_node_groups);
        assert_eq!(flags.options.balancing_ignore_labels, vec!["a", "b"]);
        assert!(flags.options.dry_run);
        assert!(!flags.leader_election.enabled);
        assert_eq!(
            flags.leader_election.lease_duration,
            Duration::from_secs(20)
        );
        assert_eq!(flags.verbosity, 5);
        assert_eq!(flags.address, "127.0.0.1:9999".parse().unwrap());
        assert_eq!(flags.health.max_inactivity, Duration::from_secs(300));
        assert_eq!(
            flags.static_node_groups,
            vec![StaticNodeGroup {
                min: 0,
                max: 10,
                name: "pool-a".into()
            }]
        );
    }

    #[test]
    fn debugging_flags_and_the_replay_file() {
        let flags = parse(&["--cloud-provider=kwok"]).unwrap();
        assert_eq!(flags.debugging, DebuggingFlags::default());
        let flags = parse(&[
            "--cloud-provider=kwok",
            "--debugging-snapshot-enabled",
            "--profiling=true",
            "--snapshot-scenario",
            "replay.yaml",
            "--expander=least-waste",
            "--scan-interval",
            "5s",
        ])
        .unwrap();
        assert_eq!(
            flags.debugging,
            DebuggingFlags {
                snapshot_enabled: true,
                profiling: true,
                snapshot_scenario: Some(PathBuf::from("replay.yaml")),
            }
        );
        // The engine flags, as given, for the replay scenario's options.
        assert_eq!(
            flags.engine_flags,
            vec![
                ("cloud-provider".to_string(), "kwok".to_string()),
                ("expander".to_string(), "least-waste".to_string()),
                ("scan-interval".to_string(), "5s".to_string()),
            ]
        );
        let err = parse(&["--cloud-provider=kwok", "--profiling=maybe"]).unwrap_err();
        assert!(err.contains("--profiling"), "{err}");
    }

    #[test]
    fn defaults_are_upstream_defaults() {
        let flags = parse(&["--cloud-provider", "kwok"]).unwrap();
        assert_eq!(flags.address, "0.0.0.0:8085".parse().unwrap());
        assert!(flags.leader_election.enabled);
        assert_eq!(flags.leader_election.resource_name, "cluster-autoscaler");
        assert_eq!(flags.options.namespace, "kube-system");
        assert_eq!(flags.health, HealthLimits::default());
        assert!(flags.loop_timing.frequent_loops);
    }

    #[test]
    fn unsupported_and_unknown_flags_are_named_together() {
        let err = parse(&[
            "--cloud-provider=kwok",
            "--enable-provisioning-requests",
            "--kube-client-qps=50",
            "--no-such-flag=1",
            "--also-not-a-flag",
        ])
        .unwrap_err();
        assert!(
            err.contains(
                "not implemented by Ferroscale: --enable-provisioning-requests, --kube-client-qps"
            ),
            "{err}"
        );
        assert!(
            err.contains("unknown flags: --no-such-flag, --also-not-a-flag"),
            "{err}"
        );
    }

    #[test]
    fn clusterapi_and_exoscale_take_their_upstream_flags() {
        let flags = parse(&[
            "--cloud-provider=clusterapi",
            "--cloud-config=/etc/management/kubeconfig",
            "--kubeconfig=/etc/workload/kubeconfig",
            "--clusterapi-cloud-config-authoritative",
            "--node-group-auto-discovery=clusterapi:namespace=team-a",
            "--node-group-auto-discovery=clusterapi:clusterName=prod",
        ])
        .unwrap();
        assert_eq!(flags.cloud_provider, CloudProviderKind::ClusterApi);
        assert!(flags.clusterapi_cloud_config_authoritative);
        assert_eq!(
            flags.options.node_group_auto_discovery,
            vec!["clusterapi:namespace=team-a", "clusterapi:clusterName=prod"]
        );
        let flags = parse(&["--cloud-provider=clusterapi"]).unwrap();
        assert!(
            !flags.clusterapi_cloud_config_authoritative,
            "false by default"
        );
        let err = parse(&[
            "--cloud-provider=clusterapi",
            "--clusterapi-cloud-config-authoritative=maybe",
        ])
        .unwrap_err();
        assert!(
            err.contains("--clusterapi-cloud-config-authoritative"),
            "{err}"
        );

        let flags = parse(&["--cloud-provider=exoscale", "--nodes=2:10:workers"]).unwrap();
        assert_eq!(flags.cloud_provider, CloudProviderKind::Exoscale);
        assert_eq!(flags.options.nodes, vec!["2:10:workers"]);
    }

    #[test]
    fn providers_are_checked() {
        for (provider, expected) in [
            ("externalgrpc", "needs --cloud-config"),
            ("gce", "not supported"),
        ] {
            let err = parse(&[&format!("--cloud-provider={provider}")]).unwrap_err();
            assert!(err.contains(provider) && err.contains(expected), "{err}");
        }
        let err = parse(&["--scan-interval=10s"]).unwrap_err();
        assert!(err.contains("--cloud-provider is required"), "{err}");
    }

    #[test]
    fn bad_values_name_flag_and_value() {
        for (argument, expected) in [
            ("--scan-interval=soon", "\"soon\""),
            ("--nodes=5:1:g", "\"5:1:g\""),
            ("--nodes=1:5", "<min>:<max>:<name>"),
            ("--address=8085", "\"8085\""),
            ("--v=loud", "\"loud\""),
            ("--leader-elect-retry-period=2", "\"2\""),
            ("--leader-elect-resource-lock=endpoints", "\"endpoints\""),
            ("--frequent-loops-enabled=often", "\"often\""),
            ("--unschedulable-pods-batching-window=5", "\"5\""),
        ] {
            let err = parse(&["--cloud-provider=kwok", argument]).unwrap_err();
            assert!(err.contains(expected), "{argument}: {err}");
        }
        let err = parse(&["--cloud-provider=kwok", "--scan-interval"]).unwrap_err();
        assert!(err.contains("needs an argument: --scan-interval"), "{err}");
        let err = parse(&["--cloud-provider=kwok", "stray"]).unwrap_err();
        assert!(err.contains("\"stray\""), "{err}");
    }

    #[test]
    fn a_bare_boolean_does_not_swallow_the_next_flag() {
        let flags = parse(&["--dry-run", "--cloud-provider", "kwok"]).unwrap();
        assert!(flags.options.dry_run);
        assert!(matches!(
            parse_run_flags(&args(&["--help"])),
            Ok(RunCommand::Help)
        ));
    }

    /// Every plain manifest and the chart's metadata parse as YAML, and the Deployment's
    /// arguments are flags `ferroscale run` accepts. (The rendered chart is checked by
    /// tests/helm_chart.rs.)
    #[test]
    fn deploy_manifests_parse_and_their_flags_are_accepted() {
        let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
        let mut files = vec![
            deploy.join("helm/ferroscale/Chart.yaml"),
            deploy.join("helm/ferroscale/values.yaml"),
        ];
        let mut manifests: Vec<_> = std::fs::read_dir(deploy.join("manifests"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        manifests.sort();
        assert!(manifests.len() >= 3, "{manifests:?}");
        files.extend(manifests);
        let mut deployment_args = None;
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for document in serde_yaml_ng::Deserializer::from_str(&text) {
                use serde::Deserialize;
                let value = serde_yaml_ng::Value::deserialize(document)
                    .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                if value.get("kind").and_then(|k| k.as_str()) == Some("Deployment") {
                    let args = &value["spec"]["template"]["spec"]["containers"][0]["args"];
                    deployment_args = Some(
                        args.as_sequence()
                            .unwrap()
                            .iter()
                            .map(|a| a.as_str().unwrap().to_string())
                            .collect::<Vec<_>>(),
                    );
                }
            }
        }
        let args = deployment_args.expect("a Deployment in deploy/manifests");
        assert_eq!(args.first().map(String::as_str), Some("run"));
        let flags = match parse_run_flags(&args[1..]) {
            Ok(RunCommand::Run(flags)) => flags,
            other => panic!("{other:?}"),
        };
        assert_eq!(flags.cloud_provider, CloudProviderKind::Kwok);
        assert_eq!(flags.address.port(), 8085);
    }
}
