//! The catalogue of every flag `ferroscale run` knows: upstream's whole flag set (its own flags,
//! klog's, component-base's logging, leader-election and feature-gate flags) and Ferroscale's own.
//!
//! It is the one place a flag is described. `ferroscale run --help` and `docs/flags.md` are
//! rendered from it; the command line accepts a name only if it is listed here; a scenario's
//! `options:` accept the same names. Each entry says how far Ferroscale supports the flag
//! ([`Support`]) and who applies it ([`Scope`]): engine flags go through
//! `ferroscale_core::AutoscalingOptions::set`, process flags are parsed by the
//! binary. Tests hold the catalogue, the parsers, the help text and the generated document
//! together, so a flag cannot exist in one of them only.
//!
//! It is a crate of its own, not a module of the engine: the command line and the simulator (a
//! scenario's `options:`) both read it, the simulator sits below the command line, and the engine
//! itself never needs to know a flag's help text.

/// The syntax of a flag's value, as upstream's `--help` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// `true`/`false` (Go's syntax: also `1`, `t`, `F`, ...); a bare `--flag` means true.
    Bool,
    Int,
    Float,
    /// Go syntax: `90s`, `10m`, `1h30m`.
    Duration,
    String,
    /// A string; the flag can be given several times and every value counts.
    Repeated,
    /// Comma-separated values.
    CommaList,
}

impl ValueType {
    /// The type word `--help` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            ValueType::Bool => "bool",
            ValueType::Int => "int",
            ValueType::Float => "float",
            ValueType::Duration => "duration",
            ValueType::String => "string",
            ValueType::Repeated => "strings (repeatable)",
            ValueType::CommaList => "strings (comma-separated)",
        }
    }
}

/// The part of the autoscaler a flag configures; `--help` and `docs/flags.md` are grouped by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    Provider,
    Loop,
    ScaleUp,
    ScaleDown,
    NodeGroups,
    ApiAccess,
    Logging,
    Diagnostics,
    /// Features Ferroscale does not have yet (refused by name).
    NotYet,
    /// Flags of cloud providers Ferroscale does not build.
    OtherProviders,
    /// Flags upstream does not have.
    FerroscaleOnly,
}

impl Group {
    pub const ALL: [Group; 11] = [
        Group::Provider,
        Group::Loop,
        Group::ScaleUp,
        Group::ScaleDown,
        Group::NodeGroups,
        Group::ApiAccess,
        Group::Logging,
        Group::Diagnostics,
        Group::FerroscaleOnly,
        Group::OtherProviders,
        Group::NotYet,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Group::Provider => "Cloud provider",
            Group::Loop => "The loop",
            Group::ScaleUp => "Scale-up",
            Group::ScaleDown => "Scale-down",
            Group::NodeGroups => "Node groups and cluster limits",
            Group::ApiAccess => "API access and leader election",
            Group::Logging => "Logging",
            Group::Diagnostics => "Health and diagnostics",
            Group::NotYet => "Not supported yet (refused by name)",
            Group::OtherProviders => "Other cloud providers (accepted, no effect)",
            Group::FerroscaleOnly => "Ferroscale only",
        }
    }
}

/// Who applies a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The decision engine, through `AutoscalingOptions::set`; scenarios can set it too.
    Engine,
    /// The process (`ferroscale run`): API access, logging, HTTP endpoints, leader election. A
    /// scenario accepts the name and ignores it: nothing in a simulation depends on it.
    Process,
}

/// How far Ferroscale supports a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Upstream's flag, with upstream's meaning and default.
    Upstream,
    /// Ferroscale's own flag.
    Ferroscale,
    /// Configures only a cloud provider Ferroscale does not build (the named one): accepted, and
    /// `run` warns once at start that it has no effect, as upstream ignores it for other providers.
    OtherProvider(&'static str),
    /// Belongs to a feature Ferroscale does not have yet (the named one): refused by name, so
    /// nobody believes it is in effect.
    NotYet(&'static str),
}

/// One flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    /// Without the leading dashes.
    pub name: &'static str,
    pub value: ValueType,
    /// As upstream prints it (Go duration syntax); empty for none.
    pub default: &'static str,
    pub group: Group,
    pub scope: Scope,
    pub support: Support,
    /// One line, for `--help`.
    pub help: &'static str,
    /// Where Ferroscale's meaning needed a decision or differs from upstream: for docs/flags.md.
    pub note: &'static str,
}

impl Flag {
    const fn new(
        name: &'static str,
        value: ValueType,
        default: &'static str,
        group: Group,
        scope: Scope,
        help: &'static str,
    ) -> Flag {
        Flag {
            name,
            value,
            default,
            group,
            scope,
            support: Support::Upstream,
            help,
            note: "",
        }
    }

    const fn note(mut self, note: &'static str) -> Flag {
        self.note = note;
        self
    }

    const fn ferroscale(mut self) -> Flag {
        self.support = Support::Ferroscale;
        self.group = Group::FerroscaleOnly;
        self
    }

    /// Whether `run` accepts the flag (everything but [`Support::NotYet`]).
    pub fn accepted(&self) -> bool {
        !matches!(self.support, Support::NotYet(_))
    }
}

use Group::*;
use Scope::{Engine, Process};
use ValueType::{Bool, CommaList, Float, Int, Repeated, String as Text};

const fn engine(
    name: &'static str,
    value: ValueType,
    default: &'static str,
    group: Group,
    help: &'static str,
) -> Flag {
    Flag::new(name, value, default, group, Engine, help)
}

const fn process(
    name: &'static str,
    value: ValueType,
    default: &'static str,
    group: Group,
    help: &'static str,
) -> Flag {
    Flag::new(name, value, default, group, Process, help)
}

const fn other_provider(
    name: &'static str,
    value: ValueType,
    default: &'static str,
    provider: &'static str,
) -> Flag {
    let mut flag = Flag::new(name, value, default, OtherProviders, Process, "");
    flag.support = Support::OtherProvider(provider);
    flag
}

// Every upstream flag is implemented after issue 16; kept for flags upstream adds next.
#[allow(dead_code)]
const fn not_yet(
    name: &'static str,
    value: ValueType,
    default: &'static str,
    feature: &'static str,
) -> Flag {
    let mut flag = Flag::new(name, value, default, NotYet, Engine, "");
    flag.support = Support::NotYet(feature);
    flag
}

const DUR: ValueType = ValueType::Duration;

/// Every flag, grouped; within a group in the order `--help` lists them.
#[rustfmt::skip]
pub const FLAGS: &[Flag] = &[
    // --- provider ---
    engine("cloud-provider", Text, "", Provider,
        "The cloud provider to build: kwok, externalgrpc, clusterapi or exoscale.")
        .note("Required: upstream's default depends on how its binary was built, and Ferroscale has no build without a choice."),
    process("cloud-config", Text, "", Provider,
        "The provider's configuration file (externalgrpc: address and TLS files; clusterapi: the management cluster's kubeconfig; kwok: instead of its ConfigMap)."),
    process("clusterapi-cloud-config-authoritative", Bool, "false", Provider,
        "Cluster API: without --cloud-config, reach the management cluster in-cluster rather than through --kubeconfig."),
    engine("node-group-auto-discovery", Repeated, "", Provider,
        "Which node groups to manage, e.g. clusterapi:namespace=NS,clusterName=NAME,KEY=VALUE."),
    engine("nodes", Repeated, "", Provider,
        "A static node group as <min>:<max>:<name> (Exoscale pools and nodepools)."),
    process("cluster-name", Text, "", Provider,
        "The name of the autoscaled cluster, for providers that need it.")
        .note("None of the providers Ferroscale builds reads it (Cluster API selects clusters with clusterName= in --node-group-auto-discovery); accepted and logged at start."),
    // --- the loop ---
    engine("scan-interval", DUR, "10s", Loop,
        "How often the cluster is re-evaluated for scale-up and scale-down."),
    process("frequent-loops-enabled", Bool, "true", Loop,
        "Start a loop at once after one that acted, and early when new unschedulable pods appear."),
    engine("namespace", Text, "kube-system", Loop,
        "The namespace Ferroscale runs in: status ConfigMap, priority-expander ConfigMap, leader-election Lease."),
    engine("write-status-configmap", Bool, "true", Loop,
        "Write the status ConfigMap."),
    engine("status-config-map-name", Text, "cluster-autoscaler-status", Loop,
        "The name of the status ConfigMap."),
    engine("record-duplicated-events", Bool, "false", Loop,
        "Record every event, even one repeated within five minutes."),
    engine("ok-total-unready-count", Int, "3", Loop,
        "Unready nodes always tolerated before the cluster counts as unhealthy."),
    engine("max-total-unready-percentage", Float, "45", Loop,
        "Above this percentage of unready nodes (and --ok-total-unready-count), autoscaling halts."),
    engine("scale-up-from-zero", Bool, "true", Loop,
        "Scale up even when the cluster has no ready node."),
    engine("dry-run", Bool, "false", Loop,
        "Decide and report every action, but change nothing in the cluster or the cloud.")
        .ferroscale(),
    // --- scale-up ---
    engine("expander", CommaList, "least-waste", ScaleUp,
        "How to choose among node groups: random, most-pods, least-waste, least-nodes, price, priority, grpc; a list is applied in order."),
    engine("estimator", Text, "binpacking", ScaleUp,
        "How many nodes a scale-up needs; binpacking is the only estimator."),
    engine("expendable-pods-priority-cutoff", Int, "-10", ScaleUp,
        "Pods with a priority below this never trigger a scale-up and never block a scale-down."),
    engine("new-pod-scale-up-delay", DUR, "0s", ScaleUp,
        "Pods younger than this do not trigger a scale-up."),
    engine("max-nodes-per-scaleup", Int, "1000", ScaleUp,
        "The most nodes one estimation adds (a bound on work, not a rate limit)."),
    engine("max-binpacking-time", DUR, "5m0s", ScaleUp,
        "Time budget of the estimations of one scale-up.")
        .note("Accepted and reported; Ferroscale never reads the clock while deciding, so estimation is bounded by --max-nodes-per-scaleup instead and the same input always gives the same decision."),
    engine("max-nodegroup-binpacking-duration", DUR, "10s", ScaleUp,
        "Time budget of the estimation for one node group.")
        .note("As --max-binpacking-time."),
    engine("balance-similar-node-groups", Bool, "false", ScaleUp,
        "Split a scale-up across node groups that are alike."),
    engine("balancing-ignore-label", Repeated, "", ScaleUp,
        "A label to ignore, besides the built-in ones, when comparing node groups."),
    engine("balancing-label", Repeated, "", ScaleUp,
        "Compare node groups by these labels only."),
    engine("memory-difference-ratio", Float, "0.015", ScaleUp,
        "Largest memory-capacity difference between similar node groups, as a ratio."),
    engine("max-allocatable-difference-ratio", Float, "0.05", ScaleUp,
        "Largest allocatable difference between similar node groups, as a ratio."),
    engine("max-free-difference-ratio", Float, "0.05", ScaleUp,
        "Largest free-resource difference between similar node groups, as a ratio."),
    engine("parallel-scale-up", Bool, "false", ScaleUp,
        "Resize the node groups of one scale-up concurrently."),
    engine("scale-from-unschedulable", Bool, "false", ScaleUp,
        "Ignore .spec.unschedulable of node-group templates."),
    engine("force-ds", Bool, "false", ScaleUp,
        "Count every pending DaemonSet pod in templates built from real nodes."),
    engine("bypassed-scheduler-names", CommaList, "", ScaleUp,
        "Pods of these schedulers count as unschedulable at once, without waiting for their scheduler."),
    engine("allowed-scheduler-names", CommaList, "", ScaleUp,
        "When set, only pods of these schedulers are considered."),
    engine("enforce-node-group-min-size", Bool, "false", ScaleUp,
        "Scale node groups below their minimum size up to it."),
    engine("initial-node-group-backoff-duration", DUR, "5m0s", ScaleUp,
        "First backoff of a node group after a failed scale-up."),
    engine("max-node-group-backoff-duration", DUR, "30m0s", ScaleUp,
        "Longest backoff of a node group."),
    engine("node-group-backoff-reset-timeout", DUR, "3h0m0s", ScaleUp,
        "A node group's backoff is forgotten after this long without failure."),
    engine("max-node-provision-time", DUR, "15m0s", ScaleUp,
        "How long a requested node may take to register (per-group overridable)."),
    engine("max-node-startup-time", DUR, "15m0s", ScaleUp,
        "How long a registered node may take to become ready (per-group overridable)."),
    engine("startup-taint", Repeated, "", ScaleUp,
        "A taint that nodes lose once started: ignored in templates, and its nodes count as not ready yet."),
    engine("ignore-taint", Repeated, "", ScaleUp,
        "Deprecated upstream name of --startup-taint."),
    engine("startup-taint-prefix", Repeated, "", ScaleUp,
        "Taints whose key starts with this prefix are startup taints."),
    engine("status-taint", Repeated, "", ScaleUp,
        "A taint ignored in templates that does not make its node unready."),
    // --- scale-down ---
    engine("scale-down-enabled", Bool, "true", ScaleDown,
        "Remove nodes that are not needed (deprecated upstream)."),
    engine("scale-down-delay-after-add", DUR, "10m0s", ScaleDown,
        "How long after a scale-up scale-down resumes."),
    engine("scale-down-delay-after-delete", DUR, "0s", ScaleDown,
        "How long after a node deletion scale-down resumes."),
    engine("scale-down-delay-after-failure", DUR, "3m0s", ScaleDown,
        "How long after a failed scale-down scale-down resumes."),
    engine("scale-down-delay-type-local", Bool, "false", ScaleDown,
        "Apply the three delays per node group instead of cluster-wide."),
    engine("scale-down-unneeded-time", DUR, "10m0s", ScaleDown,
        "How long a node must be unneeded before it is removed."),
    engine("scale-down-unready-time", DUR, "20m0s", ScaleDown,
        "How long an unready node must be unneeded before it is removed."),
    engine("scale-down-unready-enabled", Bool, "true", ScaleDown,
        "Remove unready nodes at all."),
    engine("scale-down-utilization-threshold", Float, "0.5", ScaleDown,
        "A node whose CPU and memory request ratios are both below this is a removal candidate."),
    engine("scale-down-gpu-utilization-threshold", Float, "0.5", ScaleDown,
        "The same threshold for GPU nodes, on GPU requests only."),
    engine("max-scale-down-parallelism", Int, "10", ScaleDown,
        "The most nodes (empty and drained) deleted at the same time."),
    engine("max-empty-bulk-delete", Int, "10", ScaleDown,
        "Old upstream name of --max-scale-down-parallelism.")
        .note("Removed upstream; Ferroscale keeps it as an alias so older manifests keep working.")
        .ferroscale(),
    engine("max-drain-parallelism", Int, "1", ScaleDown,
        "The most nodes drained and deleted at the same time."),
    engine("max-bulk-soft-taint-count", Int, "10", ScaleDown,
        "The most nodes soft-tainted or untainted per loop; 0 turns soft tainting off."),
    engine("max-bulk-soft-taint-time", DUR, "3s", ScaleDown,
        "Time budget of soft tainting per loop.")
        .note("Accepted and reported; soft tainting is bounded by --max-bulk-soft-taint-count instead."),
    engine("max-graceful-termination-sec", Int, "600", ScaleDown,
        "The longest grace period a drained pod gets."),
    engine("max-pod-eviction-time", DUR, "2m0s", ScaleDown,
        "How long an eviction is retried before the drain fails."),
    engine("cordon-node-before-terminating", Bool, "true", ScaleDown,
        "Also mark a node unschedulable when tainting it for deletion."),
    engine("daemonset-eviction-for-empty-nodes", Bool, "false", ScaleDown,
        "Evict DaemonSet pods from empty nodes before deleting them."),
    engine("daemonset-eviction-for-occupied-nodes", Bool, "true", ScaleDown,
        "Evict DaemonSet pods from drained nodes before deleting them."),
    engine("ignore-daemonsets-utilization", Bool, "false", ScaleDown,
        "Leave DaemonSet pods out of node utilization."),
    engine("ignore-mirror-pods-utilization", Bool, "false", ScaleDown,
        "Leave mirror pods out of node utilization."),
    engine("skip-nodes-with-custom-controller-pods", Bool, "true", ScaleDown,
        "Never remove a node with pods of controllers other than the built-in ones."),
    engine("skip-nodes-with-local-storage", Bool, "true", ScaleDown,
        "Never remove a node with pods using local storage (emptyDir, hostPath)."),
    engine("skip-nodes-with-system-pods", Bool, "true", ScaleDown,
        "Do not remove a node with kube-system pods without a PodDisruptionBudget."),
    engine("min-replica-count", Int, "0", ScaleDown,
        "A ReplicaSet or ReplicationController with fewer replicas blocks the removal of its pods' nodes."),
    engine("blocking-system-pod-distruption-timeout", DUR, "1h0m0s", ScaleDown,
        "A kube-system pod without a budget stops blocking scale-down once older than this."),
    engine("unremovable-node-recheck-timeout", DUR, "5m0s", ScaleDown,
        "How long a node that could not be removed is skipped before it is simulated again."),
    engine("node-delete-delay-after-taint", DUR, "5s", ScaleDown,
        "Wait between tainting a node and draining or deleting it."),
    engine("node-deletion-delay-timeout", DUR, "2m0s", ScaleDown,
        "How long deletion waits for delay-deletion.cluster-autoscaler.kubernetes.io/ annotations."),
    engine("node-deletion-candidate-ttl", DUR, "0s", ScaleDown,
        "Deletion-candidate taints younger than this restore unneeded timers after a restart."),
    engine("scale-down-simulation-timeout", DUR, "30s", ScaleDown,
        "Time budget of the removal simulation.")
        .note("Accepted and reported; the simulation is bounded by node counts instead, so decisions never depend on machine speed."),
    // --- node groups and cluster limits ---
    engine("max-nodes-total", Int, "0", NodeGroups,
        "The most nodes in the cluster; 0 is no limit."),
    engine("cores-total", Text, "0:320000", NodeGroups,
        "Cluster cores as <min>:<max>."),
    engine("memory-total", Text, "0:6400000", NodeGroups,
        "Cluster memory in GiB as <min>:<max>."),
    engine("gpu-total", Repeated, "", NodeGroups,
        "Cluster GPUs of one type as <type>:<min>:<max>."),
    engine("force-delete-unregistered-nodes", Bool, "false", NodeGroups,
        "Remove instances that never registered even below the group's minimum size."),
    engine("force-delete-failed-nodes", Bool, "false", NodeGroups,
        "Remove instances that failed to be created even below the group's minimum size."),
    // --- API access and leader election ---
    process("kubeconfig", Text, "", ApiAccess,
        "The kubeconfig of the cluster; empty means the in-cluster service account."),
    engine("leader-elect", Bool, "true", ApiAccess,
        "Act only while holding the leader-election Lease."),
    process("leader-elect-lease-duration", DUR, "15s", ApiAccess,
        "How long a Lease holds without renewal."),
    process("leader-elect-renew-deadline", DUR, "10s", ApiAccess,
        "How long the leader keeps trying to renew before it stops acting."),
    process("leader-elect-retry-period", DUR, "2s", ApiAccess,
        "Wait between attempts to take or renew the Lease."),
    process("leader-elect-resource-name", Text, "cluster-autoscaler", ApiAccess,
        "The name of the Lease."),
    process("leader-elect-resource-namespace", Text, "", ApiAccess,
        "Accepted; the Lease lives in --namespace, as upstream's does.")
        .note("Upstream creates the lock in --namespace whatever this flag says; Ferroscale does the same."),
    process("leader-elect-resource-lock", Text, "leases", ApiAccess,
        "The lock object type; only leases exists."),
    // --- logging ---
    process("v", Int, "0", Logging,
        "Log verbosity: 0 warnings and errors, 1-4 decisions, 5-8 every provider call, 9 everything.")
        .note("Ferroscale's info lines are V 1, debug lines V 5, trace lines V 9; RUST_LOG, when set, replaces --v and --vmodule."),
    process("logtostderr", Bool, "true", Logging,
        "Log to standard error; false writes to --log-file or --log-dir instead."),
    // --- health and diagnostics ---
    process("address", Text, ":8085", Diagnostics,
        "The address of /metrics and /health-check."),
    process("max-inactivity", DUR, "10m0s", Diagnostics,
        "/health-check fails when no loop ran for this long."),
    process("max-failing-time", DUR, "15m0s", Diagnostics,
        "/health-check fails when no loop succeeded for this long."),
    process("max-startup-time", DUR, "20m0s", Diagnostics,
        "/health-check allows this long for the first successful loop."),
    // --- Ferroscale only ---
    process("unschedulable-pods-batching-window", DUR, "100ms", Loop,
        "The first new unschedulable pod of a burst starts an iteration this long after it.")
        .note("With --frequent-loops-enabled; it also replaces upstream's 2 s wait for new pods. docs/behaviour.md LOOP-116.")
        .ferroscale(),
    process("unschedulable-pods-batching-idle-gap", DUR, "1s", Loop,
        "Pods arriving after a burst's first iteration are batched until none has arrived for this long; 0 turns the batching off.")
        .note("A pod after a quiet gap this long starts a new burst. docs/behaviour.md LOOP-117, LOOP-119.")
        .ferroscale(),
    process("unschedulable-pods-batching-max-window", DUR, "10s", Loop,
        "The longest a batch after a burst's first iteration waits while pods keep arriving.")
        .note("No iteration starts while a batch is open, so a burst costs a few resizes per group. docs/behaviour.md LOOP-117, LOOP-118.")
        .ferroscale(),
    process("cache-sync-timeout", DUR, "5m0s", Loop,
        "Give up when the first list of the cluster takes longer than this.")
        .ferroscale(),
    engine("cloud-node-controller", Bool, "false", Provider,
        "Initialize new Nodes (labels from their node group's template, uninitialized taint removed) and delete Nodes whose instance is gone, for clouds without a cloud-controller-manager.")
        .note("Leader only, after each loop; keep it off where a cloud-controller-manager or the Cluster API controllers already do this. docs/cloud-node-controller.md.")
        .ferroscale(),
    engine("cloud-node-removal-grace-period", DUR, "1m0s", Provider,
        "How long a Node must have been not Ready and missing from its node group's instances, on two consecutive refreshes at least, before --cloud-node-controller deletes it.")
        .note("Counted from the first refresh that found it so; a refresh with any provider error deletes nothing and starts the count again. docs/cloud-node-controller.md CNC-106.")
        .ferroscale(),
    // --- implemented by this other pieces (refused until they land) ---
    process("kubernetes", Text, "", ApiAccess,
        "The API server's URL, overriding the kubeconfig's or the in-cluster one.")
        .note("Query keys inClusterConfig, insecure and auth are read; apiVersion is ignored; other keys are refused by name. Ignored, with a warning, when --kubeconfig is set."),
    process("kube-client-qps", Float, "5", ApiAccess,
        "Requests per second every Kubernetes client of the process may make (token bucket).")
        .note("One token bucket per API server, shared by every client of the process: lists, watches (counted when opened) and their relists, writes, events, the provider's clients; a separate management cluster has its own, leader election has its own. 0 means 5 and a negative value means no limit, as client-go."),
    process("kube-client-burst", Int, "10", ApiAccess,
        "Requests that may go at once before --kube-client-qps applies.")
        .note("Must be positive when the rate is, as client-go requires."),
    process("kube-api-content-type", Text, "application/vnd.kubernetes.protobuf", ApiAccess,
        "The encoding asked of the API server.")
        .note("kube-rs speaks JSON: the protobuf value is accepted and answered with JSON (one line at start says so); application/json is accepted; anything else is refused."),
    process("user-agent", Text, "cluster-autoscaler", ApiAccess,
        "The User-Agent of every request to the API server.")
        .note("Sent as <value>/<version> (<os>/<arch>) ferroscale on every request to the API server."),
    process("feature-gates", CommaList, "", ApiAccess,
        "Kubernetes feature gates as Name=true|false,...")
        .note("The syntax is checked. Gates Ferroscale always simulates (SidecarContainers, NodeInclusionPolicyInPodTopologySpread, MatchLabelKeysInPodTopologySpread, MatchLabelKeysInPodAffinity) cannot be turned off; other gates change nothing in the simulation and get one warning each; unknown names are accepted, unlike upstream's registry."),
    process("vmodule", CommaList, "", Logging,
        "Per-source verbosity as pattern=N,...: a file name without .rs, a path with /, or a module path with ::.")
        .note("klog matches Go file names; Ferroscale matches Rust source files the same way, and module paths too. Refused with --logging-format=json, as upstream."),
    process("alsologtostderr", Bool, "false", Logging,
        "With log files, write lines to standard error too (from --alsologtostderrthreshold up)."),
    process("alsologtostderrthreshold", Text, "INFO", Logging,
        "The lowest severity --alsologtostderr copies to standard error."),
    process("stderrthreshold", Text, "INFO", Logging,
        "Lines at or above this severity (INFO, WARNING, ERROR, FATAL or 0-3) go to standard error.")
        .note("Upstream's main sets INFO before reading the flags (its help prints 2) and turns klog's legacy rule off, so the threshold applies with --logtostderr too; Ferroscale does the same."),
    process("legacy-stderr-threshold-behavior", Bool, "false", Logging,
        "klog's old rule: with --logtostderr, --stderrthreshold is ignored and every line goes to standard error.")
        .note("Upstream's main sets false (its help prints true)."),
    process("log-dir", Text, "", Logging,
        "With --logtostderr=false, write one file per severity in this directory (klog's names; the temporary directory if unusable)."),
    process("log-file", Text, "", Logging,
        "With --logtostderr=false, write every line to this file."),
    process("log-file-max-size", Int, "1800", Logging,
        "Largest log file in MB; 0 is no limit. A full --log-file starts over; a full --log-dir file is followed by a new one."),
    process("skip-headers", Bool, "false", Logging,
        "Leave the klog header (Lmmdd hh:mm:ss.uuuuuu thread file:line]) out of every line."),
    process("skip-log-headers", Bool, "false", Logging,
        "Leave the header block out of new log files."),
    process("add-dir-header", Bool, "false", Logging,
        "Name the source file with its directory in the header."),
    process("one-output", Bool, "false", Logging,
        "With --log-dir, write each line only to its own severity's file."),
    process("log-flush-frequency", DUR, "5s", Logging,
        "Longest time between log flushes.")
        .note("Accepted; lines are written unbuffered, so every line is flushed at once."),
    process("log-backtrace-at", Text, ":0", Logging,
        "Log a backtrace with the line logged at file:line (a Rust source file, e.g. run.rs:480)."),
    process("logging-format", Text, "text", Logging,
        "text (klog lines) or json (Kubernetes JSON lines: ts, caller, msg, v, then key/values)."),
    process("log-text-split-stream", Bool, "false", Logging,
        "Text format: lines below ERROR to standard output, errors to standard error.")
        .note("An alpha option upstream, which wants the LoggingAlphaOptions feature gate for it; Ferroscale does not."),
    process("log-text-info-buffer-size", Text, "0", Logging,
        "Text format with split streams: how much of the info stream may be buffered.")
        .note("Accepted and checked; lines are written unbuffered, which every size allows."),
    process("log-json-split-stream", Bool, "false", Logging,
        "JSON format: lines below ERROR to standard output, errors to standard error.")
        .note("As --log-text-split-stream."),
    process("log-json-info-buffer-size", Text, "0", Logging,
        "JSON format with split streams: how much of the info stream may be buffered.")
        .note("As --log-text-info-buffer-size."),
    process("debugging-snapshot-enabled", Bool, "false", Diagnostics,
        "Serve /snapshotz: a request waits for the next loop, which answers with its cluster snapshot as JSON.")
        .note("The wait is bounded (504 after max(2 scan intervals, 60 s)); one request at a time (429). ?format=scenario answers with the same loop as a scenario file for ferroscale simulate, a Ferroscale extension."),
    process("profiling", Bool, "false", Diagnostics,
        "Serve CPU and heap profiles in pprof format at /debug/pprof/profile?seconds=N and /debug/pprof/heap.")
        .note("Heap profiles come from jemalloc's sampling profiler (one sample per 512 KiB allocated), which records nothing without this flag; they report the bytes in use (inuse_space) only, not Go's alloc_space and object counts."),
    process("snapshot-scenario", Text, "", Diagnostics,
        "Write the first loop that gathered the cluster to this file as a scenario, so ferroscale simulate and explain replay what the live loop saw (use with --dry-run).")
        .ferroscale(),
    engine("scheduler-config-file", Text, "", Loop,
        "A KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) whose single profile the simulated scheduler filters follow.")
        .note("Read once at start, at most 1 MiB. Disabled Filter plugins, PodTopologySpread default constraints and NodeResourcesFit ignored resources are honoured; anything else (scoring included, which upstream ignores) is refused by field path and value. Default spread constraints count the pods of the pod's controller, since Services are not read (docs/behaviour.md SCHED-101 to SCHED-105)."),
    engine("enable-csi-node-aware-scheduling", Bool, "true", Loop,
        "Read CSINodes (the cluster's and the node-group templates') so the simulated NodeVolumeLimits filter limits CSI volumes per node.")
        .note("Off, no node (real or template) has volume limits in the simulation; the other volume filters run either way (docs/behaviour.md VOL-107)."),
    engine("enable-dynamic-resource-allocation", Bool, "true", Loop,
        "Simulate Dynamic Resource Allocation: ResourceClaims, DeviceClasses and ResourceSlices (deprecated upstream, always on).")
        .note("Locked to true as in upstream 1.36: false is refused at start-up (docs/dra.md DRA-120)."),
    engine("unready-nodes-scope", Text, "cluster", Loop,
        "Which nodes the unready check counts: cluster (every node) or autoscaled (nodes of node groups).")
        .note("autoscaled also counts nodes whose node-group lookup failed, as upstream; the status ConfigMap's totals stay cluster-wide (docs/behaviour.md CS-107)."),
    engine("node-info-cache-expire-time", DUR, "87600h0m0s", NodeGroups,
        "How long a node-group template built from a real node is kept.")
        .note("docs/behaviour.md SU-108."),
    engine("scaleup-simulation-for-skipped-node-groups-enabled", Bool, "false", ScaleUp,
        "Also simulate scale-up for node groups skipped in this loop.")
        .note("Changes what pods are told (the rejecting filter on the skipped group's template), never a decision (docs/behaviour.md SU-109)."),
    engine("enable-proactive-scaleup", Bool, "true", ScaleUp,
        "Scale up for pods that controllers are about to create.")
        .note("Default true where upstream's is false: a Deployment whose ReplicaSet creates its pods over seconds gets its nodes in one resize instead of one per batch of pods (docs/behaviour.md LOOP-120); false restores upstream. As upstream's pod-injection processor: ReplicaSets, Jobs and StatefulSets, a five-minute backoff for a controller whose injected pods were not helped, no events on injected pods (docs/behaviour.md SU-110). In the simulator a controller's replicas are its live pods plus the pods its `create` events with a `rate` have still to create."),
    engine("pod-injection-limit", Int, "5000", ScaleUp,
        "The most pending pods, real and injected, proactive scale-up works with.")
        .note("A negative limit injects nothing, as upstream."),
    engine("async-node-groups", Bool, "false", NodeGroups,
        "Create and delete node groups asynchronously.")
        .note("No effect: none of Ferroscale's providers creates node groups (docs/behaviour.md LOOP-115)."),
    engine("enable-graceful-degradation", Bool, "false", ScaleUp,
        "Bound the scheduling simulation of pending pods and go on with part of them.")
        .note("Accepted; Ferroscale's simulation of pending pods is bounded by counts and always plans with every pod, so it never needs to degrade (docs/behaviour.md SU-111)."),
    engine("pending-pods-batching-timeout", DUR, "4m0s", ScaleUp,
        "Time budget of that simulation.")
        .note("Accepted and reported, as the other time budgets."),
    engine("fastpath-binpacking-enabled", Bool, "false", ScaleUp,
        "Estimate the last group of pods arithmetically.")
        .note("docs/behaviour.md SU-111."),
    engine("salvo-scale-up", Bool, "false", ScaleUp,
        "Allow several scale-ups in one loop.")
        .note("docs/behaviour.md SU-114."),
    engine("salvo-scale-up-budget", DUR, "1m0s", ScaleUp,
        "Time budget of the further scale-ups of one loop.")
        .note("Accepted and reported; the rounds end by count, never by clock."),
    engine("predicate-parallelism", Int, "4", ScaleUp,
        "The most threads checking scheduler filters.")
        .note("Values below 1 are refused, as upstream. Ferroscale plans on min(this, the machine's cores) threads (no pool for 1): node groups' estimates and nodes' eligibility checks run in parallel, each worker on its own copy of the snapshot; the plan is the same for every value (docs/behaviour.md SU-112)."),
    engine("cluster-snapshot-parallelism", Int, "16", ScaleUp,
        "Deprecated upstream; see --predicate-parallelism.")
        .note("Unused, as upstream."),
    engine("scheduler-verbosity", Int, "-1", Logging,
        "Verbosity of scheduler-simulation logs; at most --v, -1 means --v.")
        .note("-1 means --v; a value above --v is lowered to it, as upstream."),
    engine("enable-inter-pod-affinity-hostname-fast-path", Bool, "false", ScaleUp,
        "Upstream's scheduler feature gate for hostname inter-pod affinity.")
        .note("No observable change: Ferroscale's inter-pod affinity already counts hostname terms per node, which is what the gate speeds up upstream."),
    engine("scale-down-non-empty-candidates-count", Int, "30", ScaleDown,
        "The most non-empty nodes simulated for removal per loop; 0 or less is no limit.")
        .note("Upstream 1.36 accepts this and the two pool flags without effect; Ferroscale gives them their older upstream meaning on top of its removal-search bound, the stricter winning (docs/behaviour.md SD-116)."),
    engine("scale-down-candidates-pool-ratio", Float, "0.1", ScaleDown,
        "Extra candidates, as a ratio of the nodes, when earlier candidates are no longer valid.")
        .note("As --scale-down-non-empty-candidates-count."),
    engine("scale-down-candidates-pool-min-count", Int, "50", ScaleDown,
        "At least this many extra candidates.")
        .note("As --scale-down-non-empty-candidates-count."),
    engine("node-deletion-batcher-interval", DUR, "0s", ScaleDown,
        "Gather the deletions of a node group for this long and send them in one call.")
        .note("docs/behaviour.md SD-117."),
    engine("drain-priority-config", Text, "", ScaleDown,
        "Drain pods in priority bands as priority:seconds,...; excludes --max-graceful-termination-sec.")
        .note("Refused together with a --max-graceful-termination-sec other than 600, as upstream; negative seconds are refused (docs/behaviour.md SD-118)."),
    engine("dynamic-node-delete-delay-after-taint-enabled", Bool, "false", ScaleDown,
        "Derive the wait after tainting from the API server's observed latency.")
        .note("The wait is twice the worst taint latency of the last hour, measured by reading each tainted node back once rather than watching for up to 30 s (docs/behaviour.md SD-119)."),
    engine("max-node-skip-eval-time-tracker-enabled", Bool, "false", Diagnostics,
        "Track the longest time a node was skipped by scale-down (metric).")
        .note("Fills cluster_autoscaler_max_node_skip_eval_duration_seconds (docs/behaviour.md OBS-120)."),
    engine("node-removal-latency-tracking-enabled", Bool, "false", Diagnostics,
        "Track how long unneeded nodes take to be removed (metric).")
        .note("Fills cluster_autoscaler_node_removal_latency_seconds (docs/behaviour.md OBS-121)."),
    engine("emit-per-nodegroup-metrics", Bool, "false", Diagnostics,
        "Emit metrics per node group.")
        .note("Series of groups or backoffs that are gone are dropped rather than kept at their last value (docs/behaviour.md OBS-122)."),
    // --- other cloud providers ---
    other_provider("aws-use-static-instance-list", Bool, "false", "AWS"),
    other_provider("bulk-mig-instances-listing-enabled", Bool, "false", "GCE"),
    other_provider("gce-concurrent-refreshes", Int, "1", "GCE"),
    other_provider("gce-mig-instances-min-refresh-wait-time", DUR, "5s", "GCE"),
    other_provider("regional", Bool, "false", "GCE"),
    other_provider("cloud-provider-gce-lb-src-cidrs", CommaList, "", "GCE"),
    other_provider("cloud-provider-gce-l7lb-src-cidrs", CommaList, "", "GCE"),
    // --- not yet ---
    engine("enable-provisioning-requests", Bool, "false", ScaleUp,
        "Handle ProvisioningRequests (autoscaling.x-k8s.io): check-capacity and best-effort-atomic-scale-up classes.")
        .note("Loops alternate between one request and the ordinary pending pods, as upstream; a request's capacity is booked in the loop's snapshot until its pods arrive or ten minutes pass (docs/provisioning-requests.md)."),
    engine("provisioning-request-initial-backoff-time", DUR, "1m0s", ScaleUp,
        "The first wait before a request whose capacity was not found is tried again."),
    engine("provisioning-request-max-backoff-time", DUR, "10m0s", ScaleUp,
        "The longest wait between tries of one request (the wait doubles at every retry)."),
    engine("provisioning-request-max-backoff-cache-size", Int, "1000", ScaleUp,
        "How many requests' backoff is remembered; the least recently used is forgotten first."),
    engine("check-capacity-batch-processing", Bool, "false", ScaleUp,
        "Check several check-capacity requests in one loop."),
    engine("check-capacity-provisioning-request-max-batch-size", Int, "10", ScaleUp,
        "The most check-capacity requests one loop checks with batch processing."),
    engine("check-capacity-provisioning-request-batch-timebox", DUR, "10s", ScaleUp,
        "Stop checking a batch once this much Decide time has passed.")
        .note("Measured with the loop's stopwatch, as the other time budgets; the request being checked when it runs out is finished first."),
    engine("check-capacity-processor-instance", Text, "", ScaleUp,
        "Handle only check-capacity requests whose processorInstance parameter names this instance.")
        .note("As upstream: when set, requests without the parameter are handled only if their class is this name followed by the check-capacity class, and best-effort-atomic requests are left alone."),
    engine("capacity-buffer-controller-enabled", Bool, "false", ScaleUp,
        "Resolve CapacityBuffers into their status: pod template, replicas and the ReadyForProvisioning condition.")
        .note("Runs in the loop, only on the leader, for buffers of the active-capacity strategy; statuses are written only when they change and never with --dry-run (docs/capacity-buffers.md CB-101–CB-107)."),
    engine("capacity-buffer-pod-injection-enabled", Bool, "false", ScaleUp,
        "Add the virtual pods of ready CapacityBuffers to the pods scale-up plans for.")
        .note("The virtual pods that fit existing nodes stay in the snapshot scale-down works on, so the spare capacity they hold is not removed; no event names them (docs/capacity-buffers.md CB-108–CB-111)."),
    engine("capacity-buffer-pod-dry-run-enabled", Bool, "true", ScaleUp,
        "Build the managed pod template of a scalableRef buffer through a server dry-run of its pod, so webhooks and defaulting apply.")
        .note("No-op without --capacity-buffer-controller-enabled. Needs permission to create pods; no pod is created."),
    engine("capacity-buffer-ready-replicas-enabled", Bool, "true", ScaleUp,
        "Write each CapacityBuffer's status.readyReplicas: how many of its virtual pods fit existing nodes.")
        .note("No-op without --capacity-buffer-pod-injection-enabled (docs/capacity-buffers.md CB-112)."),
    engine("capacity-quotas-enabled", Bool, "false", NodeGroups,
        "Enforce CapacityQuota objects: scale-up never adds nodes beyond a quota whose selector matches the new node's labels.")
        .note("Usage counts matching nodes' capacity, upcoming nodes included; see docs/capacity-quotas.md."),
    engine("grpc-expander-url", Text, "", ScaleUp,
        "Address (host:port) of the service the grpc expander asks.")
        .note("Upstream's expander.proto over TLS, 5 s deadline; on error every option is kept. See docs/grpc-expander.md."),
    engine("grpc-expander-cert", Text, "", ScaleUp,
        "PEM certificate the grpc expander's server must present or chain to; required with --expander=grpc."),
];

/// Upstream's flag names are normalised as its command line does: `--log_dir` is `--log-dir`.
pub fn normalise(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains('_') {
        std::borrow::Cow::Owned(name.replace('_', "-"))
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

/// The flag of this name (underscores or dashes), if it exists.
pub fn lookup(name: &str) -> Option<&'static Flag> {
    let name = normalise(name);
    FLAGS.iter().find(|flag| flag.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_core::{AutoscalingOptions, OptionError};

    #[test]
    fn names_are_unique_and_lower_case() {
        let mut seen = std::collections::HashSet::new();
        for flag in FLAGS {
            assert!(seen.insert(flag.name), "--{} is listed twice", flag.name);
            assert!(
                flag.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "--{}",
                flag.name
            );
            if flag.accepted() && !matches!(flag.support, Support::OtherProvider(_)) {
                assert!(!flag.help.is_empty(), "--{} has no description", flag.name);
            }
        }
    }

    /// Every engine flag is known to `AutoscalingOptions::set`, and setting its documented default
    /// changes nothing: the catalogue's defaults are the engine's.
    #[test]
    fn engine_defaults_are_the_options_defaults() {
        for flag in FLAGS
            .iter()
            .filter(|f| f.scope == Scope::Engine && f.accepted())
        {
            let mut options = AutoscalingOptions::default();
            if flag.default.is_empty() {
                let result = options.set(flag.name, "x");
                assert!(
                    !matches!(result, Err(OptionError::UnknownFlag { .. })),
                    "--{} is not known to the engine",
                    flag.name
                );
                continue;
            }
            options
                .set(flag.name, flag.default)
                .unwrap_or_else(|e| panic!("--{}={}: {e}", flag.name, flag.default));
            assert_eq!(
                options,
                AutoscalingOptions::default(),
                "--{}={} is not the engine's default",
                flag.name,
                flag.default
            );
        }
    }

    #[test]
    fn underscores_are_dashes() {
        assert_eq!(
            lookup("max_nodes_total").map(|f| f.name),
            Some("max-nodes-total")
        );
        assert_eq!(lookup("scan_interval").unwrap().name, "scan-interval");
        assert!(lookup("no-such-flag").is_none());
    }
}
