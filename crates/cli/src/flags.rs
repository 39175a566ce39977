//! The flags of `ferroscale run`, in upstream syntax: `--flag=value`, `--flag value`, a single dash
//! too, bare `--flag` for booleans, repeated flags for lists. Engine flags go through
//! `AutoscalingOptions::set`; the flags of the process itself (provider, API access, HTTP address,
//! leader election, logging, liveness) are parsed here. Which names exist, their types and who
//! applies them come from the one catalogue, `ferroscale_flags`. Upstream flags of
//! features Ferroscale does not have yet, and unknown flags, are refused all at once, by name;
//! flags of cloud providers Ferroscale does not build are accepted and reported, so `run` can warn.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ferroscale_flags::{Scope, Support, ValueType};

use crate::batching::BatchingWindows;
use crate::logging::LoggingFlags;
use ferroscale_core::{AutoscalingOptions, OptionError};
use ferroscale_metrics::HealthLimits;
use ferroscale_model::parse_go_duration;

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

impl LeaderElectionFlags {
    /// The orderings two replicas' safety rests on, which client-go refuses too: a leader stops
    /// acting a renew deadline after its last renewal was sent, so that deadline must end before
    /// the lease can expire for a candidate; and a deadline shorter than the retry period would
    /// give up before the first renewal was even tried.
    pub fn validate(&self) -> Result<(), String> {
        if self.renew_deadline >= self.lease_duration {
            return Err(format!(
                "--leader-elect-renew-deadline ({:?}) must be shorter than \
                 --leader-elect-lease-duration ({:?}): otherwise a leader that cannot renew \
                 would still act after another replica took the lease over",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period >= self.renew_deadline {
            return Err(format!(
                "--leader-elect-retry-period ({:?}) must be shorter than \
                 --leader-elect-renew-deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }
}

/// When iterations start besides every `--scan-interval` (docs/behaviour.md
/// LOOP-103–LOOP-105, LOOP-116–LOOP-119).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopTiming {
    /// `--frequent-loops-enabled` (upstream, default true): start at once after an iteration
    /// that scaled up or started a deletion, and wake early for new unschedulable pods.
    pub frequent_loops: bool,
    /// `--unschedulable-pods-batching-window`, `--unschedulable-pods-batching-idle-gap` and
    /// `--unschedulable-pods-batching-max-window` (Ferroscale): how the wake-ups for new
    /// unschedulable pods are batched (see [`crate::batching`]).
    pub windows: BatchingWindows,
}

impl Default for LoopTiming {
    fn default() -> Self {
        LoopTiming {
            frequent_loops: true,
            windows: BatchingWindows::default(),
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

/// An upstream flag that configures only a cloud provider Ferroscale does not build: accepted (its
/// value checked) and named in a warning at start, as upstream ignores it for other providers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredFlag {
    pub flag: String,
    pub provider: &'static str,
}

// ---- API access (`--kube-client-qps`, `--kube-client-burst`, `--kube-api-content-type`,
// `--user-agent`, `--kubernetes`, `--cluster-name`, `--feature-gates`) ----

/// How `run` reaches the API servers, and the two flags upstream passes along with them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ApiAccessFlags {
    /// Rate limit, User-Agent, content type and `--kubernetes` of every Kubernetes client.
    pub access: ferroscale_kube::ApiAccess,
    /// `--cluster-name`: none of the providers Ferroscale builds reads it (upstream's neither).
    pub cluster_name: String,
    /// `--feature-gates`, in the order given (a later setting of a gate wins).
    pub feature_gates: Vec<FeatureGate>,
}

/// One `Name=bool` of `--feature-gates`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureGate {
    pub name: String,
    pub enabled: bool,
}

/// The API-access flags' arm of `parse_run_flags`: `Ok(false)` when `flag` is not one of them.
fn parse_api_access_flag(
    flags: &mut ApiAccessFlags,
    flag: &str,
    value: &str,
) -> Result<bool, String> {
    let invalid = |reason: &str| format!("invalid value {value:?} for flag --{flag}: {reason}");
    match flag {
        "kube-client-qps" => {
            flags.access.qps = value
                .trim()
                .parse()
                .map_err(|_| invalid("expected a number"))?
        }
        "kube-client-burst" => {
            flags.access.burst = value
                .trim()
                .parse()
                .map_err(|_| invalid("expected an integer"))?
        }
        "kube-api-content-type" => {
            flags.access.content_type =
                ferroscale_kube::ContentType::parse(value).map_err(|e| e.to_string())?
        }
        "user-agent" => flags.access.user_agent = value.to_string(),
        "kubernetes" => {
            flags.access.master = if value.trim().is_empty() {
                None
            } else {
                Some(ferroscale_kube::MasterUrl::parse(value).map_err(|e| e.to_string())?)
            }
        }
        "cluster-name" => flags.cluster_name = value.to_string(),
        "feature-gates" => flags.feature_gates.extend(parse_feature_gates(value)?),
        _ => return Ok(false),
    }
    Ok(true)
}

/// Kubernetes feature gates whose behaviour Ferroscale's scheduler simulation always has (they
/// are on by default in Kubernetes 1.36, most locked on): setting one to false is refused, since
/// Ferroscale cannot simulate the scheduler without it. Every other gate has no effect.
pub const SIMULATED_FEATURE_GATES: &[&str] = &[
    "SidecarContainers",
    "NodeInclusionPolicyInPodTopologySpread",
    "MatchLabelKeysInPodTopologySpread",
    "MatchLabelKeysInPodAffinity",
];

/// `--feature-gates=Name=bool,Name=bool`, as Kubernetes components read it: pairs separated by
/// commas (blank ones skipped), the value a Go boolean. The error names the pair.
pub fn parse_feature_gates(value: &str) -> Result<Vec<FeatureGate>, String> {
    let mut gates = Vec::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let invalid = |reason: &str| {
            format!("invalid value {value:?} for flag --feature-gates: {pair:?}: {reason}")
        };
        let Some((name, enabled)) = pair.split_once('=') else {
            return Err(invalid("expected Name=true or Name=false"));
        };
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(invalid(
                "a gate name is letters and digits, e.g. PodLevelResources",
            ));
        }
        let Some(enabled) = parse_bool(enabled.trim()) else {
            return Err(invalid(&format!(
                "gate {name}: {:?} is not true or false",
                enabled.trim()
            )));
        };
        if !enabled && SIMULATED_FEATURE_GATES.contains(&name) {
            return Err(invalid(&format!(
                "gate {name} cannot be disabled: Ferroscale always simulates the scheduler with it"
            )));
        }
        gates.push(FeatureGate {
            name: name.to_string(),
            enabled,
        });
    }
    Ok(gates)
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
    /// The logging flags (`--v`, `--vmodule`, `--logtostderr`, ..., `--logging-format`).
    pub logging: LoggingFlags,
    pub health: HealthLimits,
    pub static_node_groups: Vec<StaticNodeGroup>,
    pub loop_timing: LoopTiming,
    /// `--cache-sync-timeout` (Ferroscale, default 5m): how long the watch caches may take for
    /// their first list before `run` gives up with an error.
    pub cache_sync_timeout: Duration,
    /// Flags of other cloud providers that were given; `run` warns about each once.
    pub ignored_flags: Vec<IgnoredFlag>,
    pub api_access: ApiAccessFlags,
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

/// Whether a flag is a boolean (a bare `--flag` means true and never takes the next argument).
fn is_boolean(flag: &str) -> bool {
    ferroscale_flags::lookup(flag).is_some_and(|spec| spec.value == ValueType::Bool)
}

fn known_flag(flag: &str) -> bool {
    ferroscale_flags::lookup(flag).is_some()
}

/// Checks a value against its flag's type, for flags whose value is not used.
fn check_value(flag: &str, value_type: ValueType, value: &str) -> Result<(), String> {
    let invalid =
        |expected: &str| format!("invalid value {value:?} for flag --{flag}: expected {expected}");
    match value_type {
        ValueType::Bool => parse_bool(value)
            .map(drop)
            .ok_or_else(|| invalid("true or false")),
        ValueType::Int => value
            .trim()
            .parse::<i64>()
            .map(drop)
            .map_err(|_| invalid("an integer")),
        ValueType::Float => value
            .trim()
            .parse::<f64>()
            .map(drop)
            .map_err(|_| invalid("a number")),
        ValueType::Duration => duration(flag, value).map(drop),
        ValueType::String | ValueType::Repeated | ValueType::CommaList => Ok(()),
    }
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
        // Upstream's command line treats `_` in a name as `-` (`--log_dir` is `--log-dir`).
        if let Some((flag, value)) = stripped.split_once('=') {
            pairs.push((
                ferroscale_flags::normalise(flag).into_owned(),
                value.to_string(),
            ));
            continue;
        }
        let stripped = ferroscale_flags::normalise(stripped).into_owned();
        let stripped = stripped.as_str();
        if matches!(stripped, "help" | "h") || is_bool(stripped) || !known(stripped) {
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
    let mut logging = LoggingFlags::default();
    let mut health = HealthLimits::default();
    let mut static_node_groups = Vec::new();
    let mut loop_timing = LoopTiming::default();
    let mut cache_sync_timeout = Duration::from_secs(300);
    let mut api_access = ApiAccessFlags::default();
    let mut ignored_flags = Vec::new();
    let mut debugging = DebuggingFlags::default();
    let mut engine_flags = Vec::new();

    for (flag, value) in &pairs {
        let Some(spec) = ferroscale_flags::lookup(flag) else {
            unknown.push(format!("--{flag}"));
            continue;
        };
        match spec.support {
            Support::NotYet(feature) => {
                unsupported.push(format!("--{flag} ({feature})"));
                continue;
            }
            Support::OtherProvider(provider) => {
                match check_value(flag, spec.value, value) {
                    // One warning per flag, however often it is given.
                    Ok(()) if ignored_flags.iter().any(|i: &IgnoredFlag| &i.flag == flag) => {}
                    Ok(()) => ignored_flags.push(IgnoredFlag {
                        flag: flag.clone(),
                        provider,
                    }),
                    Err(e) => errors.push(e),
                }
                continue;
            }
            Support::Upstream | Support::Ferroscale => {}
        }
        match parse_api_access_flag(&mut api_access, flag, value) {
            Ok(true) => continue,
            Ok(false) => {}
            Err(e) => {
                errors.push(e);
                continue;
            }
        }
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
            // Logging (crate::logging): klog's flags with upstream's defaults.
            other if crate::logging::is_flag(other) => record(logging.set(other, value)),
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
                record(duration(flag, value).map(|d| loop_timing.windows.first = d))
            }
            "unschedulable-pods-batching-idle-gap" => {
                record(duration(flag, value).map(|d| loop_timing.windows.idle = d))
            }
            "unschedulable-pods-batching-max-window" => {
                record(duration(flag, value).map(|d| loop_timing.windows.max = d))
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
            // A process flag of the catalogue without an arm above: the catalogue test catches it.
            other if spec.scope == Scope::Process => {
                errors.push(format!("--{other} is listed but not parsed (a Ferroscale bug)"))
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
            "upstream flags not supported by Ferroscale yet: {}",
            unsupported.join(", ")
        ));
    }
    if !unknown.is_empty() {
        errors.push(format!("unknown flags: {}", unknown.join(", ")));
    }
    if let Err(e) = options.validate() {
        errors.push(e.to_string());
    }
    if let Err(e) = logging.validate() {
        errors.push(e);
    }
    // The combinations client-go refuses, and a User-Agent that is not a header value.
    if let Err(e) = api_access.access.rate_limit() {
        errors.push(e.to_string());
    }
    if let Err(e) = api_access.access.user_agent_header() {
        errors.push(e.to_string());
    }
    leader_election.enabled = options.leader_elect;
    if leader_election.enabled
        && let Err(e) = leader_election.validate()
    {
        errors.push(e);
    }
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
            logging,
            health,
            static_node_groups,
            loop_timing,
            cache_sync_timeout,
            ignored_flags,
            api_access,
            debugging,
            engine_flags,
        }))),
        _ => Err(errors.join("\n")),
    }
}

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

    /// A renew deadline that does not end before the lease would let a leader that cannot renew
    /// act after a standby took over; client-go refuses it too. Without leader election the
    /// durations do not matter.
    #[test]
    fn leader_election_durations_must_leave_the_leader_time_to_stop() {
        let error = parse(&[
            "--cloud-provider=kwok",
            "--leader-elect-lease-duration=10s",
            "--leader-elect-renew-deadline=10s",
        ])
        .unwrap_err();
        assert!(
            error.contains("--leader-elect-renew-deadline (10s) must be shorter than --leader-elect-lease-duration (10s)"),
            "{error}"
        );
        let error = parse(&[
            "--cloud-provider=kwok",
            "--leader-elect-renew-deadline=2s",
            "--leader-elect-retry-period=2s",
        ])
        .unwrap_err();
        assert!(
            error.contains("--leader-elect-retry-period (2s)"),
            "{error}"
        );
        assert!(
            parse(&[
                "--cloud-provider=kwok",
                "--leader-elect=false",
                "--leader-elect-lease-duration=1s",
            ])
            .is_ok()
        );
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
            "--unschedulable-pods-batching-idle-gap=2s",
            "--unschedulable-pods-batching-max-window=30s",
        ])
        .unwrap();
        assert_eq!(
            flags.loop_timing,
            LoopTiming {
                frequent_loops: false,
                windows: BatchingWindows {
                    first: Duration::from_secs(1),
                    idle: Duration::from_secs(2),
                    max: Duration::from_secs(30),
                },
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
        assert_eq!(flags.logging.verbosity, 5);
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
        assert_eq!(
            flags.loop_timing.windows,
            BatchingWindows {
                first: Duration::from_millis(100),
                idle: Duration::from_secs(1),
                max: Duration::from_secs(10),
            },
            "docs/behaviour.md LOOP-116, LOOP-117"
        );
    }

    /// The logging flags upstream's Helm chart renders by default, and klog's underscore
    /// spellings, are accepted and mean what they mean upstream.
    #[test]
    fn the_upstream_charts_logging_flags_are_accepted() {
        use crate::logging::{LogFormat, Severity};
        let flags = parse(&[
            "--cloud-provider=clusterapi",
            "--logtostderr=true",
            "--stderrthreshold=info",
            "--v=4",
        ])
        .unwrap();
        assert!(flags.logging.log_to_stderr);
        assert_eq!(flags.logging.stderr_threshold, Severity::Info);
        assert_eq!(flags.logging.verbosity, 4);
        let flags = parse(&[
            "--cloud-provider=kwok",
            "--logtostderr=false",
            "--log_file",
            "/var/log/ca.log",
            "--skip_log_headers",
            "--logging-format=json",
        ])
        .unwrap();
        assert!(!flags.logging.log_to_stderr && flags.logging.skip_log_headers);
        assert_eq!(
            flags.logging.log_file.as_deref(),
            Some(std::path::Path::new("/var/log/ca.log"))
        );
        assert_eq!(flags.logging.format, LogFormat::Json);
        let err = parse(&["--cloud-provider=kwok", "--stderrthreshold=loud"]).unwrap_err();
        assert!(
            err.contains("--stderrthreshold") && err.contains("\"loud\""),
            "{err}"
        );
        let err = parse(&[
            "--cloud-provider=kwok",
            "--logging-format=json",
            "--vmodule=run=5",
        ])
        .unwrap_err();
        assert!(err.contains("--vmodule"), "{err}");
    }

    #[test]
    fn unknown_flags_are_named_together_and_implemented_ones_are_not() {
        let err = parse(&[
            "--cloud-provider=kwok",
            "--enable-provisioning-requests",
            "--no-such-flag=1",
            "--also-not-a-flag",
        ])
        .unwrap_err();
        assert!(
            err.contains("unknown flags: --no-such-flag, --also-not-a-flag"),
            "{err}"
        );
        assert!(!err.contains("enable-provisioning-requests"), "{err}");
    }

    /// Flags of providers Ferroscale does not build are accepted once each for the warning, and
    /// their values are still checked.
    #[test]
    fn other_providers_flags_are_accepted_for_a_warning() {
        let flags = parse(&[
            "--cloud-provider=kwok",
            "--regional",
            "--gce-concurrent-refreshes=4",
            "--regional=true",
            "--aws-use-static-instance-list=false",
        ])
        .unwrap();
        let ignored: Vec<(&str, &str)> = flags
            .ignored_flags
            .iter()
            .map(|i| (i.flag.as_str(), i.provider))
            .collect();
        assert_eq!(
            ignored,
            [
                ("regional", "GCE"),
                ("gce-concurrent-refreshes", "GCE"),
                ("aws-use-static-instance-list", "AWS")
            ]
        );
        let err = parse(&["--cloud-provider=kwok", "--gce-concurrent-refreshes=many"]).unwrap_err();
        assert!(
            err.contains("\"many\" for flag --gce-concurrent-refreshes"),
            "{err}"
        );
    }

    /// Upstream's command line reads `_` as `-` in flag names.
    #[test]
    fn underscores_in_names_are_dashes() {
        let flags = parse(&[
            "--cloud_provider=kwok",
            "--scan_interval",
            "20s",
            "--dry_run",
        ])
        .unwrap();
        assert_eq!(flags.options.scan_interval, Duration::from_secs(20));
        assert!(flags.options.dry_run);
    }

    /// Every flag of the catalogue that `run` accepts is parsed, and its documented default is
    /// what `run` uses when the flag is absent: the catalogue, `--help` and docs/flags.md cannot
    /// promise a flag or a default the parser does not have.
    #[test]
    fn every_accepted_flag_parses_at_its_documented_default() {
        // What was given is recorded for replay scenarios; what matters is what it means.
        let meaning = |mut flags: RunFlags| {
            flags.engine_flags.clear();
            format!("{flags:?}")
        };
        let baseline = meaning(parse(&["--cloud-provider=kwok"]).unwrap());
        for flag in ferroscale_flags::FLAGS
            .iter()
            .filter(|f| matches!(f.support, Support::Upstream | Support::Ferroscale))
        {
            if flag.name == "cloud-provider" {
                continue;
            }
            let argument = format!("--{}={}", flag.name, flag.default);
            match parse(&["--cloud-provider=kwok", &argument]) {
                Ok(parsed) if flag.default.is_empty() => {
                    let _ = parsed;
                }
                Ok(parsed) => assert_eq!(
                    meaning(parsed),
                    baseline,
                    "{argument} is not what run does without the flag"
                ),
                // An empty value may be refused (--nodes=), but never for want of a parser.
                Err(e) if flag.default.is_empty() && !e.contains("not parsed") => {}
                Err(e) => panic!("{argument}: {e}"),
            }
        }
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
            ("--unschedulable-pods-batching-idle-gap=1", "\"1\""),
            ("--unschedulable-pods-batching-max-window=soon", "\"soon\""),
        ] {
            let err = parse(&["--cloud-provider=kwok", argument]).unwrap_err();
            assert!(err.contains(expected), "{argument}: {err}");
        }
        let err = parse(&["--cloud-provider=kwok", "--scan-interval"]).unwrap_err();
        assert!(err.contains("needs an argument: --scan-interval"), "{err}");
        let err = parse(&["--cloud-provider=kwok", "stray"]).unwrap_err();
        assert!(err.contains("\"stray\""), "{err}");
    }

    // ---- API access ----

    #[test]
    fn api_access_flags_have_upstream_defaults() {
        let flags = parse(&["--cloud-provider=kwok"]).unwrap().api_access;
        assert_eq!(flags.access.qps, 5.0);
        assert_eq!(flags.access.burst, 10);
        assert_eq!(flags.access.user_agent, "cluster-autoscaler");
        assert_eq!(
            flags.access.content_type,
            ferroscale_kube::ContentType::Protobuf
        );
        assert_eq!(flags.access.master, None);
        assert_eq!(flags.cluster_name, "");
        assert!(flags.feature_gates.is_empty());
    }

    #[test]
    fn api_access_flags_are_parsed() {
        let flags = parse(&[
            "--cloud-provider=kwok",
            "--kube-client-qps=0.5",
            "--kube-client-burst",
            "3",
            "--kube-api-content-type=application/json",
            "--user-agent=my-autoscaler",
            "--kubernetes=https://10.0.0.1:6443",
            "--cluster-name=prod",
            "--feature-gates=PodLevelResources=false, SidecarContainers=true,",
            "--feature-gates=PodLevelResources=true",
        ])
        .unwrap()
        .api_access;
        assert_eq!(flags.access.qps, 0.5);
        assert_eq!(flags.access.burst, 3);
        assert_eq!(
            flags.access.content_type,
            ferroscale_kube::ContentType::Json
        );
        assert_eq!(flags.access.user_agent, "my-autoscaler");
        assert_eq!(
            flags.access.master.map(|m| m.server.to_string()),
            Some("https://10.0.0.1:6443/".to_string())
        );
        assert_eq!(flags.cluster_name, "prod");
        let gates: Vec<(&str, bool)> = flags
            .feature_gates
            .iter()
            .map(|g| (g.name.as_str(), g.enabled))
            .collect();
        assert_eq!(
            gates,
            vec![
                ("PodLevelResources", false),
                ("SidecarContainers", true),
                ("PodLevelResources", true)
            ]
        );
        // A negative QPS turns the limit off, whatever the burst.
        let flags = parse(&[
            "--cloud-provider=kwok",
            "--kube-client-qps=-1",
            "--kube-client-burst=0",
        ])
        .unwrap();
        assert_eq!(flags.api_access.access.rate_limit().unwrap(), None);
    }

    #[test]
    fn bad_api_access_values_name_flag_and_value() {
        for (argument, expected) in [
            ("--kube-client-qps=fast", "\"fast\""),
            ("--kube-client-burst=1.5", "\"1.5\""),
            ("--kube-client-burst=0", "--kube-client-burst"),
            (
                "--kube-api-content-type=application/yaml",
                "application/yaml",
            ),
            ("--kubernetes=10.0.0.1:6443", "--kubernetes=10.0.0.1:6443"),
            ("--user-agent=", "--user-agent"),
            ("--feature-gates=PodLevelResources", "\"PodLevelResources\""),
            ("--feature-gates=PodLevelResources=maybe", "\"maybe\""),
            ("--feature-gates=Bad-Name=true", "\"Bad-Name=true\""),
            (
                "--feature-gates=SidecarContainers=false",
                "SidecarContainers cannot be disabled",
            ),
        ] {
            let err = parse(&["--cloud-provider=kwok", argument]).unwrap_err();
            assert!(err.contains(expected), "{argument}: {err}");
        }
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
        let deploy = std::path::Path::new("../../deploy");
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
