//! The runner: plays a scenario in accelerated, simulated time against the real engine.
//!
//! Time jumps from one interesting instant to the next: a scenario event, a node finishing its
//! provisioning, an engine loop (every `scan-interval`), an expectation. At each instant events
//! fire first, then provisioned nodes register, then the scheduler stand-in binds what fits, then,
//! on loop instants, the engine runs: the real `Autoscaler::run_once` against the simulated cloud
//! and the simulated cluster (lent through [`SimClusterApi`]), with its pure decision steps timed
//! by a wall-clock [`InstantStopwatch`]. What it did is recorded: samples, the timeline (scale-ups,
//! unneeded timers, drains, blocked removals, cooldowns, failures) and the summary.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroscale_core::act::scale_up::ScaleUpExecution;
use ferroscale_core::autoscaler::{Autoscaler, LoopOutcome, Stopwatch};
use ferroscale_core::cloud::{CloudProvider, NodeGroup};
use ferroscale_core::cloud_node_controller::CloudNodeOutcome;
use ferroscale_core::cluster_state::InstanceToDelete;
use ferroscale_core::events::{EventObject, reasons};
use ferroscale_core::options::{AutoscalingOptions, ExpanderName, OptionError};
use ferroscale_core::scale_down::{
    ScaleDownPlan, UnneededNode, UnremovableNode, UnremovableReason,
};
use ferroscale_core::scale_up::{NodeGroupView, ScaleUpPlan, ScaleUpStatus};
use ferroscale_flags::{Scope, Support};
use ferroscale_model::taints::TO_BE_DELETED;
use ferroscale_model::time::format_duration;
use ferroscale_model::{CompactString, LabelSelector, Timestamp};
use ferroscale_objects::K8sObject;
use ferroscale_scheduling::{Snapshot, find_node};
use futures::executor::block_on;
use thiserror::Error;

use crate::api::{ApiLog, ClusterAction, SimClusterApi};
use crate::capacity_record::CapacityRecorder;
use crate::clock::SimClock;
use crate::cloud::{FailingCall, FailureWindow, GroupSpec, SimulatedCloud, SimulatedProvider};
use crate::cloud_nodes::SimCloudNodes;
use crate::cluster::{Cluster, Eviction, NodeRefusal};
use crate::record::{
    CloudNodeSummary, EntryKind, ExpectationOutcome, GroupSummary, LoopSample, Percentiles,
    PodSummary, SimulationResult, Summary, TimelineEntry,
};
use crate::scenario::{
    Check, CheckTime, CloudOperation, Expectation, Limits, MIN_SCAN_INTERVAL, Scenario,
    ScenarioAction, ScenarioEvent, copy_name, group_digits,
};

/// Simulated time starts at the epoch, so every timestamp reads as "time since start".
pub const SIMULATION_START: Timestamp = Timestamp(0);

/// Names listed in a timeline line before "and N more".
const NAMES_SHOWN: usize = 5;

/// `a, b, c and 7 more`.
pub(crate) fn names_with_more<S: AsRef<str>>(names: &[S], shown: usize) -> String {
    let mut text = names
        .iter()
        .take(shown)
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > shown {
        text.push_str(&format!(" and {} more", names.len() - shown));
    }
    text
}

/// `nodes-9` before `nodes-10`: names compared with their numeric suffixes as numbers.
pub(crate) fn natural_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn split(s: &str) -> (&str, u64) {
        let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (head, tail) = s.split_at(s.len() - digits);
        (head, tail.parse().unwrap_or(0))
    }
    split(a).cmp(&split(b)).then_with(|| a.cmp(b))
}

/// `0.3` → `30%`.
pub(crate) fn percent(value: f64) -> String {
    format!("{:.0}%", value * 100.0)
}

fn percent_range(low: f64, high: f64) -> String {
    if percent(low) == percent(high) {
        percent(low)
    } else {
        format!("{}–{}", percent(low), percent(high))
    }
}

/// The detail of a blocked removal worth a timeline line, `None` for ordinary reasons (busy
/// nodes, nodes still waiting out their unneeded time).
pub(crate) fn blocked_reason(node: &UnremovableNode) -> Option<String> {
    match node.reason {
        UnremovableReason::BlockedByPod => Some(match &node.blocking_pod {
            Some(b) => format!("pod {} ({})", b.pod, b.rule),
            None => "a pod blocks it".to_string(),
        }),
        UnremovableReason::NoPlaceToMovePods => Some(match &node.pod {
            Some(pod) => format!("pod {pod} fits nowhere else"),
            None => "its pods fit nowhere else".to_string(),
        }),
        UnremovableReason::BlockedByOnCompletionPod => Some(match &node.pod {
            Some(pod) => format!("pod {pod} must complete first"),
            None => "a pod must complete first".to_string(),
        }),
        UnremovableReason::NodeGroupMinSizeReached => {
            Some("its group is at its minimum size".to_string())
        }
        UnremovableReason::MinimalResourceLimitExceeded => {
            Some("the cluster would fall below a minimum resource limit".to_string())
        }
        UnremovableReason::AtomicScaleDownFailed => {
            Some("its zero-or-max group cannot be removed as a whole".to_string())
        }
        UnremovableReason::ScaleDownDisabledAnnotation => {
            Some("annotated scale-down-disabled".to_string())
        }
        _ => None,
    }
}

/// Measures the engine's pure decision steps in wall-clock time; the core has no clock.
#[derive(Debug, Clone, Copy)]
pub struct InstantStopwatch {
    origin: Instant,
}

impl InstantStopwatch {
    pub fn start() -> InstantStopwatch {
        InstantStopwatch {
            origin: Instant::now(),
        }
    }
}

impl Stopwatch for InstantStopwatch {
    fn elapsed_millis(&self) -> f64 {
        self.origin.elapsed().as_secs_f64() * 1000.0
    }
}

/// Options that could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SettingsError {
    /// A flag from the scenario's `options:` block.
    #[error("options.{flag}: {source}")]
    ScenarioOption {
        flag: String,
        #[source]
        source: OptionError,
    },
    /// A `--set flag=value` override.
    #[error("--set {flag}={value}: {source}")]
    Override {
        flag: String,
        value: String,
        #[source]
        source: OptionError,
    },
    /// The combination of flags is invalid.
    #[error("{0}")]
    Invalid(#[source] OptionError),
    /// The scenario's duration at this scan interval needs more engine loops than a run may have.
    #[error(
        "duration {} at scan-interval {} makes {} engine loops; a run may have at most {} \
         (lengthen scan-interval or shorten the duration)",
        format_duration(*duration),
        format_duration(*scan_interval),
        group_digits(*loops),
        group_digits(*limit)
    )]
    TooManyLoops {
        duration: Duration,
        scan_interval: Duration,
        loops: u64,
        limit: u64,
    },
}

/// The options a run uses: upstream defaults, then the scenario's `options:` block, then the
/// overrides (`--set`), validated together.
pub fn options_for(
    scenario: &Scenario,
    overrides: &[(String, String)],
) -> Result<AutoscalingOptions, SettingsError> {
    options_for_with(scenario, overrides, &Limits::DEFAULT)
}

/// [`options_for`] within the given limits.
pub fn options_for_with(
    scenario: &Scenario,
    overrides: &[(String, String)],
    limits: &Limits,
) -> Result<AutoscalingOptions, SettingsError> {
    let mut options = AutoscalingOptions::default();
    for (flag, value) in &scenario.options {
        set_for_simulation(&mut options, flag, value).map_err(|source| {
            SettingsError::ScenarioOption {
                flag: flag.clone(),
                source,
            }
        })?;
    }
    for (flag, value) in overrides {
        set_for_simulation(&mut options, flag, value).map_err(|source| {
            SettingsError::Override {
                flag: flag.clone(),
                value: value.clone(),
                source,
            }
        })?;
    }
    options.validate().map_err(SettingsError::Invalid)?;
    let loops = scenario
        .duration
        .as_nanos()
        .div_ceil(options.scan_interval.as_nanos().max(1));
    let loops = u64::try_from(loops).unwrap_or(u64::MAX);
    if loops > limits.loops {
        return Err(SettingsError::TooManyLoops {
            duration: scenario.duration,
            scan_interval: options.scan_interval,
            loops,
            limit: limits.loops,
        });
    }
    Ok(options)
}

/// Sets one flag, then applies what a simulation needs beyond the flag's syntax: a scan interval
/// of at least [`MIN_SCAN_INTERVAL`] and utilization thresholds that are fractions.
fn set_for_simulation(
    options: &mut AutoscalingOptions,
    flag: &str,
    value: &str,
) -> Result<(), OptionError> {
    // The names of `ferroscale run`: engine flags apply; the process's own flags (logging, API
    // access, ...) and other providers' flags change nothing in a simulation and are accepted.
    let Some(spec) = ferroscale_flags::lookup(flag) else {
        return Err(OptionError::UnknownFlag {
            flag: flag.to_string(),
        });
    };
    match (spec.support, spec.scope) {
        (Support::NotYet(feature), _) => {
            return Err(OptionError::NotSupported {
                flag: spec.name.to_string(),
                feature: feature.to_string(),
            });
        }
        (Support::OtherProvider(_), _) | (_, Scope::Process) => return Ok(()),
        (Support::Upstream | Support::Ferroscale, Scope::Engine) => {}
    }
    let flag = spec.name;
    options.set(flag, value)?;
    let refuse = |reason: String| {
        Err(OptionError::InvalidValue {
            flag: flag.to_string(),
            value: value.to_string(),
            reason,
        })
    };
    match flag {
        "scan-interval" if options.scan_interval < MIN_SCAN_INTERVAL => refuse(format!(
            "a simulation loops at most once per {}",
            format_duration(MIN_SCAN_INTERVAL)
        )),
        "scale-down-utilization-threshold"
            if !(0.0..=1.0).contains(&options.scale_down_utilization_threshold) =>
        {
            refuse("a utilization threshold is a fraction between 0 and 1".to_string())
        }
        "scale-down-gpu-utilization-threshold"
            if !(0.0..=1.0).contains(&options.scale_down_gpu_utilization_threshold) =>
        {
            refuse("a utilization threshold is a fraction between 0 and 1".to_string())
        }
        _ => Ok(()),
    }
}

/// How far a long run has got, for progress output.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub simulated: Duration,
    pub total: Duration,
    pub loops: usize,
    pub nodes: usize,
    pub pending_pods: usize,
}

/// What one engine loop decided and did.
#[derive(Debug, Clone)]
pub struct LoopReport {
    pub at: Timestamp,
    /// Everything `run_once` returned.
    pub outcome: LoopOutcome,
    /// What the engine wrote to the cluster during the loop.
    pub log: ApiLog,
    pub decide_millis: f64,
}

/// Per-group counters for the summary.
#[derive(Debug, Clone, Default)]
struct GroupStats {
    min_size: usize,
    max_size: usize,
    initial: usize,
    peak: usize,
    scale_ups: usize,
    added: usize,
    removed: usize,
    /// `cloudControllerManager` of the scenario.
    cloud_controller_manager: bool,
    /// Nodes the cloud node controller initialized, and Node objects it deleted.
    initialized: usize,
    node_objects_deleted: usize,
}

/// A scenario being played.
pub struct Simulation<'p> {
    name: String,
    end: Timestamp,
    options: AutoscalingOptions,
    scan_interval: Duration,
    clock: SimClock,
    cloud: Arc<SimulatedCloud>,
    provider: SimulatedProvider,
    cluster: Cluster,
    autoscaler: Autoscaler,
    events: Vec<ScenarioEvent>,
    next_event: usize,
    /// Expectations with their index in the scenario, and the outcome once checked.
    expectations: Vec<(Expectation, Option<ExpectationOutcome>)>,
    next_loop: Timestamp,
    group_ids: Vec<String>,
    stats: Vec<GroupStats>,
    samples: Vec<LoopSample>,
    timeline: Vec<TimelineEntry>,
    notes: Vec<String>,
    /// The last "not helped" and "plan error" lines, so a stuck state is reported once, not
    /// every loop.
    last_not_helped: String,
    last_plan_error: String,
    last_loop_error: String,
    /// Pods evicted by drains so far.
    evictions: usize,
    /// Scale-down bookkeeping for the timeline: unneeded nodes and since when, the blocked
    /// reason last reported per node, whether scale-down was in cooldown.
    unneeded: BTreeMap<String, Timestamp>,
    blocked: BTreeMap<String, String>,
    in_cooldown: bool,
    removed_this_loop: usize,
    evicted_this_loop: usize,
    /// The status ConfigMap's content as last written.
    final_status: Option<String>,
    /// The cloud's instance removals when the runner last looked for nodes whose machine is
    /// gone: while unchanged, none can be.
    removals_seen: Option<u64>,
    /// What the timeline said so far about requests, buffers and quotas.
    capacity: CapacityRecorder,
    /// With `cloud-node-controller`: the controller, run after each engine loop.
    cloud_nodes: Option<SimCloudNodes>,
    /// Nodes of groups without a cloud-controller-manager whose machine is gone and whose Node
    /// object is still there.
    left_behind: BTreeSet<String>,
    progress: Option<ProgressReporter<'p>>,
}

/// Receives a [`Progress`] after every engine loop.
type ProgressReporter<'p> = Box<dyn FnMut(&Progress) + 'p>;

fn at(offset: Duration) -> Timestamp {
    SIMULATION_START + offset
}

fn seconds(t: Timestamp) -> f64 {
    t.since(SIMULATION_START).as_secs_f64()
}

/// The simulated cloud's view of the scenario's node groups, times relative to the start.
pub fn group_specs(scenario: &Scenario) -> Vec<GroupSpec> {
    scenario
        .node_groups
        .iter()
        .map(|group| group_spec(group, &scenario.objects))
        .collect()
}

fn group_spec(group: &crate::scenario::ScenarioNodeGroup, objects: &[K8sObject]) -> GroupSpec {
    let existing_nodes = group
        .nodes
        .iter()
        .filter_map(|name| {
            objects.iter().find_map(|o| match o {
                K8sObject::Node(node) if &node.name == name => Some(node.clone()),
                _ => None,
            })
        })
        .collect();
    GroupSpec {
        existing_nodes,
        id: group.id.clone(),
        min_size: group.min_size,
        max_size: group.max_size,
        initial_size: group.initial_size,
        provisioning_delay: group.provisioning_delay,
        failures: group
            .failures
            .iter()
            .map(|w| FailureWindow {
                call: match w.operation {
                    CloudOperation::IncreaseSize => FailingCall::IncreaseSize,
                    CloudOperation::DeleteNodes => FailingCall::DeleteNodes,
                    CloudOperation::DecreaseTargetSize => FailingCall::DecreaseTargetSize,
                    CloudOperation::InstanceCreation => FailingCall::InstanceCreation,
                },
                from: at(w.from),
                to: at(w.to),
                class: w.error_class,
            })
            .collect(),
        price_per_hour: group.price_per_hour.unwrap_or(0.0),
        template: group.template.clone(),
        csi_drivers: group.csi_drivers.clone(),
        devices: group.devices.clone(),
        cloud_controller_manager: group.cloud_controller_manager,
    }
}

/// `app=web,tier in (a,b)`-style text of a selector, for the timeline.
pub(crate) fn describe_selector(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for r in &selector.match_expressions {
        parts.push(format!(
            "{} {:?} ({})",
            r.key,
            r.operator,
            r.values.join(",")
        ));
    }
    if parts.is_empty() {
        "every pod".to_string()
    } else {
        parts.join(",")
    }
}

/// The expectation in words, as the summary and failure messages show it.
pub fn describe_expectation(expectation: &Expectation) -> String {
    let when = match expectation.at {
        CheckTime::End => "at end".to_string(),
        CheckTime::At(d) => format!("at {}", crate::report::short_duration(d.as_secs_f64())),
    };
    match &expectation.check {
        Check::GroupNodes { group, min, max } => {
            format!("group {group} nodes in [{min},{max}] {when}")
        }
        Check::PendingPods(n) => format!("pending pods = {n} {when}"),
        Check::RunningPods(n) => format!("running pods = {n} {when}"),
        Check::TotalNodes { min, max } => format!("total nodes in [{min},{max}] {when}"),
        Check::NodesRemoved {
            group: Some(group),
            min,
            max,
        } => format!("nodes removed from group {group} in [{min},{max}] {when}"),
        Check::NodesRemoved {
            group: None,
            min,
            max,
        } => format!("nodes removed in [{min},{max}] {when}"),
        Check::LostPods(n) => format!("lost pods = {n} {when}"),
    }
}

impl<'p> Simulation<'p> {
    /// Sets up the cloud (initial nodes Ready at time 0), the initial objects and the clock.
    pub fn new(scenario: &Scenario, options: AutoscalingOptions) -> Simulation<'p> {
        Simulation::with_groups(scenario, options, group_specs(scenario))
    }

    /// Like [`Simulation::new`], with the simulated cloud's groups given explicitly: the
    /// scenario's groups (see [`group_specs`]) adjusted, for instance with failure windows the
    /// scenario format has no words for (instances that fail to be created).
    pub fn with_groups(
        scenario: &Scenario,
        options: AutoscalingOptions,
        specs: Vec<GroupSpec>,
    ) -> Simulation<'p> {
        let clock = SimClock::new(SIMULATION_START);
        let daemonsets: Vec<_> = scenario
            .objects
            .iter()
            .filter_map(|o| match o {
                K8sObject::DaemonSet(d) => Some(d.clone()),
                _ => None,
            })
            .collect();
        let group_ids: Vec<String> = specs.iter().map(|g: &GroupSpec| g.id.clone()).collect();
        let specs_bounds: Vec<(usize, usize, bool)> = specs
            .iter()
            .map(|g| (g.min_size, g.max_size, g.cloud_controller_manager))
            .collect();
        let cloud = Arc::new(SimulatedCloud::new(
            clock.clone(),
            specs,
            daemonsets.clone(),
        ));
        cloud.set_node_limit(scenario.node_limit);
        let provider = SimulatedProvider::new(cloud.clone());
        let mut cluster = Cluster::new(daemonsets);
        for group in cloud.groups() {
            let spec = group.spec();
            cluster.set_group_csi_drivers(&spec.id, spec.csi_drivers.clone());
            cluster.set_group_devices(&spec.id, spec.devices.clone());
        }
        // The scheduler stand-in follows the same kube-scheduler profile the engine simulates.
        cluster.set_scheduler_profile(options.scheduler_profile());
        let mut stats: Vec<GroupStats> = specs_bounds
            .iter()
            .map(
                |(min_size, max_size, cloud_controller_manager)| GroupStats {
                    min_size: *min_size,
                    max_size: *max_size,
                    cloud_controller_manager: *cloud_controller_manager,
                    ..GroupStats::default()
                },
            )
            .collect();

        // A replayed cluster's nodes join their groups as they are, with the group's provider ids.
        for (i, group) in cloud.groups().iter().enumerate() {
            for node in &group.spec().existing_nodes {
                let mut node = node.clone();
                node.provider_id = group.provider_id_of(&node.name);
                stats[i].initial += 1;
                stats[i].peak += 1;
                cluster.add_node(node, Some(group.spec().id.clone()));
            }
        }
        for provisioned in cloud.provision(SIMULATION_START) {
            if let Some(i) = group_ids.iter().position(|g| *g == provisioned.group) {
                stats[i].initial += 1;
                stats[i].peak += 1;
            }
            cluster.add_node(provisioned.node, Some(provisioned.group));
        }
        let mut notes = Vec::new();
        let mut pdbs = Vec::new();
        for object in &scenario.objects {
            match object {
                K8sObject::Node(node) if cluster.node(&node.name).is_none() => {
                    cluster.add_node(node.clone(), None);
                }
                K8sObject::Namespace(ns) => cluster.add_namespace(ns.clone()),
                K8sObject::PodDisruptionBudget(pdb) => pdbs.push(pdb.clone()),
                other => {
                    if !cluster.add_dra_object(other)
                        && !cluster.capacity_mut().add(other, SIMULATION_START)
                    {
                        cluster.add_storage_object(other);
                    }
                }
            }
        }
        cluster.set_pdbs(pdbs);
        for object in &scenario.objects {
            if let K8sObject::Pod(pod) = object {
                let mut pod = pod.clone();
                pod.scheduled_condition = None;
                cluster.add_pod(pod, SIMULATION_START, None);
            }
        }
        notes.extend(scenario.warnings.iter().cloned());
        let refusals = cluster.take_refusals();

        // `options_for` refuses shorter intervals; a caller that built options itself gets the
        // shortest a simulation runs, not a loop per millisecond.
        let scan_interval = options.scan_interval.max(MIN_SCAN_INTERVAL);
        let mut simulation = Simulation {
            name: scenario.name.clone(),
            end: at(scenario.duration),
            autoscaler: Autoscaler::new(options.clone(), scenario.seed),
            options,
            scan_interval,
            clock,
            cloud,
            provider,
            cluster,
            events: scenario.events.clone(),
            next_event: 0,
            expectations: scenario.expect.iter().map(|e| (e.clone(), None)).collect(),
            next_loop: SIMULATION_START,
            group_ids,
            stats,
            samples: Vec::new(),
            timeline: Vec::new(),
            notes,
            last_not_helped: String::new(),
            last_plan_error: String::new(),
            last_loop_error: String::new(),
            evictions: 0,
            unneeded: BTreeMap::new(),
            blocked: BTreeMap::new(),
            in_cooldown: false,
            removed_this_loop: 0,
            evicted_this_loop: 0,
            final_status: None,
            removals_seen: None,
            capacity: CapacityRecorder::default(),
            cloud_nodes: None,
            left_behind: BTreeSet::new(),
            progress: None,
        };
        if simulation.options.cloud_node_controller {
            simulation.cloud_nodes = Some(SimCloudNodes::new(simulation.cloud.clone()));
        }
        simulation.record_refusals(SIMULATION_START, refusals);
        simulation
    }

    /// Timeline lines for pods refused by the node their `spec.nodeName` named.
    fn record_refusals(&mut self, now: Timestamp, refusals: Vec<NodeRefusal>) {
        for refusal in refusals {
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Scenario,
                what: format!(
                    "node {} refused {} pod(s) bound to it by name ({})",
                    refusal.node, refusal.pods, refusal.reason
                ),
                why: "no room left on the node, as its kubelet would refuse them; they wait \
                      for the scheduler"
                    .to_string(),
            });
        }
    }

    /// Calls `report` after every engine loop (throttling is the caller's business).
    pub fn on_progress(&mut self, report: impl FnMut(&Progress) + 'p) {
        self.progress = Some(Box::new(report));
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    pub fn cloud(&self) -> &Arc<SimulatedCloud> {
        &self.cloud
    }

    pub fn options(&self) -> &AutoscalingOptions {
        &self.options
    }

    /// Why a node's removal was last reported blocked (the pod and rule, min size, ...), kept
    /// while scale-down skips rechecking it.
    pub fn last_blocked_reason(&self, node: &str) -> Option<&str> {
        self.blocked.get(node).map(String::as_str)
    }

    /// The engine, with its memory across loops (backoff, deletions in progress, ...).
    pub fn autoscaler(&self) -> &Autoscaler {
        &self.autoscaler
    }

    /// Plays the scenario up to and including the next engine loop and returns what that loop
    /// did; `None` once no loop is left before the end.
    pub fn next_loop(&mut self) -> Option<LoopReport> {
        if self.next_loop >= self.end {
            return None;
        }
        let loop_at = self.next_loop;
        self.play_until(loop_at);
        let report = self.engine_loop(loop_at);
        self.next_loop = loop_at + self.scan_interval;
        if self.cloud.node_limit_exceeded().is_some() {
            // The run would have allocated more nodes than a run may have: it ends here, and the
            // result says why (`SimulationResult::node_limit_exceeded`).
            self.end = loop_at;
        }
        if let Some(progress) = self.progress.as_mut() {
            progress(&Progress {
                simulated: loop_at.since(SIMULATION_START),
                total: self.end.since(SIMULATION_START),
                loops: self.samples.len(),
                nodes: self.cluster.node_count(),
                pending_pods: self.cluster.pending_count(),
            });
        }
        Some(report)
    }

    /// Runs the engine once more at the time of the last loop, without playing the scenario: the
    /// cluster holds what the last loop left (its writes included). For the benchmarks of a loop
    /// in which nothing, or only a chosen part, changed (`large_cluster ... steady`).
    pub fn repeat_loop(&mut self) -> LoopReport {
        let at = (self.next_loop - self.scan_interval).max(SIMULATION_START);
        self.engine_loop(at)
    }

    /// Replaces every `every`-th live pod by an updated copy (a changed annotation, as a status
    /// update makes a new object): a change of that share of the pods for the engine's next loop,
    /// nothing the scheduler reads. Returns how many pods changed. For the benchmarks.
    pub fn touch_pods(&mut self, every: usize) -> usize {
        self.cluster.touch_pods(every)
    }

    /// Plays the scenario up to the next engine loop (events, provisioning, scheduling) without
    /// running it, so that the setup and the loop can be told apart (the benchmarks time them
    /// separately); the next [`Simulation::next_loop`] then only runs the loop.
    pub fn play_to_next_loop(&mut self) {
        if self.next_loop < self.end {
            self.play_until(self.next_loop);
        }
    }

    /// Plays the rest of the scenario and returns everything it produced.
    pub fn finish(mut self) -> SimulationResult {
        self.play_to_end();
        self.into_result()
    }

    /// Plays the rest of the scenario, leaving the final state inspectable.
    pub fn play_to_end(&mut self) {
        while self.next_loop().is_some() {}
        let end = self.end;
        self.play_until(end);
        self.check_expectations_before(Timestamp(i64::MAX));
    }

    /// Processes every instant up to and including `until` (events, provisioning, scheduling),
    /// checking expectations whose time has passed.
    fn play_until(&mut self, until: Timestamp) {
        loop {
            let now = self.clock.now();
            let next_event = self.events.get(self.next_event).map(|e| at(e.at));
            let next_ready = self.cloud.next_ready_time(now);
            let candidates = [next_event, next_ready];
            let next = candidates
                .iter()
                .flatten()
                .copied()
                .filter(|t| *t <= until)
                .min();
            let step = next.unwrap_or(until).max(now);
            // Expectations see the state after everything at their own time happened.
            self.check_expectations_before(step);
            self.clock.advance_to(step);
            self.fire_events(step);
            self.register_nodes(step);
            self.cluster.schedule(step);
            if next.is_none() || step >= until {
                break;
            }
        }
    }

    fn fire_events(&mut self, now: Timestamp) {
        while let Some(event) = self.events.get(self.next_event) {
            if at(event.at) > now {
                break;
            }
            let event = event.clone();
            self.next_event += 1;
            let shape = Some(self.next_event);
            let (what, why) = match &event.action {
                ScenarioAction::CreateObject(object) => {
                    self.cluster.capacity_mut().add(object, now);
                    (format!("created {}", object.describe()), String::new())
                }
                ScenarioAction::Create {
                    count,
                    pod,
                    bind,
                    first_copy,
                    still_to_create,
                } => {
                    self.cluster.reserve_pods(*count);
                    self.cluster.announce_pods(pod, *still_to_create);
                    // Only the first and last names go into the timeline.
                    let mut names: (Option<String>, Option<String>) = (None, None);
                    for i in 0..*count {
                        let mut copy = pod.clone();
                        if let Some(name) = copy_name(&pod.name, *count, *first_copy, i) {
                            copy.name = name.into();
                        }
                        copy.uid = CompactString::default();
                        copy.creation_time = now;
                        copy.scheduled_condition = None;
                        if let Some(placement) = bind {
                            copy.node_name = Some(placement.node_for(i).into());
                        }
                        if i == 0 {
                            names.0 = Some(copy.name.to_string());
                        } else if i + 1 == *count {
                            names.1 = Some(copy.name.to_string());
                        }
                        self.cluster.add_pod(copy, now, shape);
                    }
                    let range = match names {
                        (Some(first), Some(last)) => format!(" {first} … {last}"),
                        (Some(first), None) => format!(" {first}"),
                        _ => String::new(),
                    };
                    (
                        format!(
                            "created {count} pod(s){range} in namespace {}",
                            pod.namespace
                        ),
                        format!(
                            "each requests {} mCPU, {} memory",
                            pod.requests.cpu_milli,
                            ferroscale_model::resources::format_bytes(pod.requests.memory)
                        ),
                    )
                }
                ScenarioAction::Delete { selector, count } => {
                    let deleted = self.cluster.delete_pods(selector, None, *count, now);
                    (
                        format!(
                            "deleted {deleted} pod(s) matching {}",
                            describe_selector(selector)
                        ),
                        count.map(|c| format!("asked for {c}")).unwrap_or_default(),
                    )
                }
                ScenarioAction::Cordon { node } => {
                    let known = self.cluster.cordon(node);
                    (
                        format!("cordoned node {node}"),
                        if known { "" } else { "no such node" }.into(),
                    )
                }
                ScenarioAction::Uncordon { node } => {
                    let known = self.cluster.uncordon(node);
                    (
                        format!("uncordoned node {node}"),
                        if known { "" } else { "no such node" }.into(),
                    )
                }
                ScenarioAction::DeleteController {
                    kind,
                    namespace,
                    name,
                } => {
                    self.cluster.delete_controller(kind, namespace, name);
                    (
                        format!("deleted {kind} {namespace}/{name}, orphaning its pods"),
                        "nothing re-creates them if they are evicted".to_string(),
                    )
                }
                ScenarioAction::RemoveNode { node } => {
                    let lost = self
                        .cluster
                        .node(node)
                        .is_some_and(|n| self.cloud.lose_instance(&n.node.provider_id));
                    (
                        format!("the cloud lost the machine of node {node}"),
                        if lost {
                            ""
                        } else {
                            "no such node in any group"
                        }
                        .into(),
                    )
                }
            };
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Scenario,
                what,
                why,
            });
            let refusals = self.cluster.take_refusals();
            self.record_refusals(now, refusals);
        }
    }

    fn register_nodes(&mut self, now: Timestamp) {
        let provisioned = self.cloud.provision(now);
        if provisioned.is_empty() {
            return;
        }
        let mut per_group: BTreeMap<String, usize> = BTreeMap::new();
        for p in provisioned {
            *per_group.entry(p.group.clone()).or_default() += 1;
            self.cluster.add_node(p.node, Some(p.group));
        }
        for (group, count) in per_group {
            if let Some(i) = self.group_ids.iter().position(|g| *g == group) {
                self.stats[i].added += count;
            }
            let uninitialized = self
                .cloud
                .group(&group)
                .is_some_and(|g| !g.spec().cloud_controller_manager);
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::NodesReady,
                what: format!("{count} node(s) of {group} became Ready"),
                why: if uninitialized {
                    "uninitialized: the group has no cloud-controller-manager, so they carry \
                     the uninitialized taint and lack the template's zone and instance-type \
                     labels"
                        .to_string()
                } else {
                    String::new()
                },
            });
        }
        self.update_peaks();
    }

    /// Drops nodes whose instance the cloud no longer has (deleted through the provider or lost).
    fn remove_vanished_nodes(&mut self, now: Timestamp) {
        // Checking every node against every instance costs a set of every provider id per loop.
        let removals = self.cloud.instance_removals();
        if self.removals_seen == Some(removals) {
            return;
        }
        self.removals_seen = Some(removals);
        let instances = self.cloud.instance_ids();
        let vanished: Vec<(String, String, Option<String>)> = self
            .cluster
            .nodes()
            .filter(|n| n.group.is_some() && !instances.contains(&n.node.provider_id))
            .filter(|n| !self.left_behind.contains(&n.node.name))
            .map(|n| {
                (
                    n.node.name.clone(),
                    n.node.provider_id.clone(),
                    n.group.clone(),
                )
            })
            .collect();
        let mut removed_by_autoscaler: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut left_behind: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, provider_id, group) in vanished {
            // docs/behaviour.md SIM-106: without a cloud-controller-manager the Node stays.
            let keeps_node = group
                .as_deref()
                .and_then(|g| self.cloud.group(g))
                .is_some_and(|g| !g.spec().cloud_controller_manager);
            let requeued = if keeps_node {
                self.left_behind.insert(name.clone());
                left_behind
                    .entry(group.clone().unwrap_or_default())
                    .or_default()
                    .push(name.clone());
                self.cluster.machine_gone(&name, now)
            } else {
                self.cluster.remove_node(&name, now)
            };
            if let Some(i) = group
                .as_ref()
                .and_then(|g| self.group_ids.iter().position(|x| x == g))
            {
                self.stats[i].removed += 1;
            }
            self.removed_this_loop += 1;
            if self.cloud.deleted_through_api(&provider_id) && requeued == 0 {
                removed_by_autoscaler
                    .entry(group.unwrap_or_default())
                    .or_default()
                    .push(name);
                continue;
            }
            let (kind, what) = if self.cloud.deleted_through_api(&provider_id) {
                (
                    EntryKind::ScaleDown,
                    format!("node {name} was removed by the autoscaler"),
                )
            } else {
                (
                    EntryKind::Failure,
                    format!("node {name} was removed by the cloud"),
                )
            };
            self.timeline.push(TimelineEntry {
                at: now,
                kind,
                what,
                why: format!("{requeued} pod(s) went back to pending"),
            });
        }
        for (group, names) in removed_by_autoscaler {
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::ScaleDown,
                what: format!(
                    "{} node(s) of {group} removed by the autoscaler: {}",
                    names.len(),
                    names_with_more(&names, NAMES_SHOWN)
                ),
                why: "their machines were deleted (DeleteNodes) and the nodes left the cluster"
                    .to_string(),
            });
        }
        for (group, names) in left_behind {
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::CloudNode,
                what: format!(
                    "{} Node object(s) of {group} outlive their machines: {}",
                    names.len(),
                    names_with_more(&names, NAMES_SHOWN)
                ),
                why: "the group has no cloud-controller-manager: the Nodes stay, not Ready, \
                      until something deletes them"
                    .to_string(),
            });
        }
    }

    /// What the cloud node controller did: timeline lines and the groups' counts.
    fn record_cloud_nodes(&mut self, outcome: &CloudNodeOutcome) {
        for (_, group) in outcome.initialized() {
            if let Some(i) = self.group_ids.iter().position(|g| g == group) {
                self.stats[i].initialized += 1;
            }
        }
        for (node, group) in outcome.deleted() {
            self.left_behind.remove(node);
            if let Some(i) = self.group_ids.iter().position(|g| g == group) {
                self.stats[i].node_objects_deleted += 1;
            }
        }
        self.timeline
            .extend(crate::cloud_nodes::timeline_entries(outcome));
    }

    /// Raises the groups' peaks to their node counts now; returns the counts.
    fn update_peaks(&mut self) -> Vec<usize> {
        let counts = self.nodes_per_group();
        for (stats, count) in self.stats.iter_mut().zip(&counts) {
            stats.peak = stats.peak.max(*count);
        }
        counts
    }

    fn nodes_per_group(&self) -> Vec<usize> {
        self.group_ids
            .iter()
            .map(|group| self.cluster.nodes_in_group(group))
            .collect()
    }

    /// One engine loop at `now`: the real `Autoscaler::run_once` against the simulated cloud and
    /// the cluster lent to it through [`SimClusterApi`].
    fn engine_loop(&mut self, now: Timestamp) -> LoopReport {
        // What the cloud and the cluster did since the last loop: nodes whose machine is gone
        // leave, and the scheduler stand-in has placed what fits.
        self.remove_vanished_nodes(now);
        self.cluster.schedule(now);

        let stopwatch = InstantStopwatch::start();
        let api = SimClusterApi::new(&mut self.cluster, now);
        let provider: &dyn CloudProvider = match &self.cloud_nodes {
            Some(cloud_nodes) => cloud_nodes.provider(),
            None => &self.provider,
        };
        let outcome = block_on(self.autoscaler.run_once(provider, &api, now, &stopwatch));
        // The cloud node controller, on this loop's refresh (docs/behaviour.md SIM-106).
        let cloud_node_outcome = self
            .cloud_nodes
            .as_mut()
            .map(|cloud_nodes| cloud_nodes.pass(&api, now, &self.options));
        let log = api.into_log();
        if let Some(cloud_node_outcome) = &cloud_node_outcome {
            self.record_cloud_nodes(cloud_node_outcome);
        }
        if let Some(status) = &log.status {
            self.final_status = Some(status.status_yaml.clone());
        }
        self.record_loop(now, &outcome, &log);
        LoopReport {
            at: now,
            decide_millis: outcome.decide_millis,
            outcome,
            log,
        }
    }

    fn record_loop(&mut self, now: Timestamp, outcome: &LoopOutcome, log: &ApiLog) {
        if let Some(error) = &outcome.error {
            let line = error.to_string();
            if line != self.last_loop_error {
                self.last_loop_error = line.clone();
                self.timeline.push(TimelineEntry {
                    at: now,
                    kind: EntryKind::Failure,
                    what: "the engine loop stopped early".to_string(),
                    why: line,
                });
            }
        } else {
            self.last_loop_error.clear();
        }
        self.record_cluster_state(now, outcome);
        if let (Some(plan), Some(execution)) = (&outcome.scale_up, &outcome.scale_up_execution) {
            self.record_scale_up(now, plan, execution, &outcome.node_groups);
        }
        if let Some(plan) = &outcome.scale_down {
            self.record_scale_down(now, plan);
        }
        self.record_cluster_writes(now, log);
        for failed in &outcome.failed_deletions {
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::ScaleDownFailure,
                what: format!(
                    "removal of node {} ({}) failed and was rolled back",
                    failed.node, failed.group_id
                ),
                why: failed.reason.to_string(),
            });
        }
        self.record_events(now, outcome);
        let capacity =
            (self.capacity).after_loop(now, &self.cluster, &log.conditions, &outcome.events);
        self.timeline.extend(capacity);

        let nodes = self.update_peaks();
        let targets = self
            .group_ids
            .iter()
            .map(|g| self.cloud.group(g).map_or(0, |g| g.current_target()))
            .collect();
        self.samples.push(LoopSample {
            at: now,
            nodes,
            targets,
            pending_pods: self
                .cluster
                .pending_pods()
                .filter(|r| r.is_workload())
                .count(),
            decide_millis: outcome.decide_millis,
            unneeded_nodes: outcome.scale_down.as_ref().map_or(0, |p| p.unneeded.len()),
            nodes_being_deleted: self.autoscaler.deletions().in_progress().len(),
            nodes_removed: std::mem::take(&mut self.removed_this_loop),
            pods_evicted: std::mem::take(&mut self.evicted_this_loop),
        });
    }

    /// Whether a node is gone or on its way out (tainted for deletion or being deleted).
    fn is_going(&self, node: &str) -> bool {
        self.cluster.node(node).is_none_or(|n| {
            n.node.taints.iter().any(|t| t.key == TO_BE_DELETED)
                || self.autoscaler.deletions().is_deleting(node)
        })
    }

    /// Unneeded timers starting and stopping, blocked removals that changed, cooldown transitions
    /// and removals the plan started.
    fn record_scale_down(&mut self, now: Timestamp, plan: &ScaleDownPlan) {
        // Unneeded timers.
        let current: BTreeMap<String, &UnneededNode> =
            plan.unneeded.iter().map(|u| (u.node.clone(), u)).collect();
        let mut started: Vec<&UnneededNode> = current
            .values()
            .filter(|u| !self.unneeded.contains_key(&u.node))
            .copied()
            .collect();
        started.sort_by(|a, b| natural_order(&a.node, &b.node));
        if !started.is_empty() {
            let names: Vec<&str> = started.iter().map(|u| u.node.as_str()).collect();
            let empty = started.iter().filter(|u| u.empty).count();
            let (low, high) = started.iter().fold((f64::MAX, 0.0f64), |(lo, hi), u| {
                (lo.min(u.utilization.value), hi.max(u.utilization.value))
            });
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Unneeded,
                what: format!(
                    "{} node(s) became unneeded: {}",
                    started.len(),
                    names_with_more(&names, NAMES_SHOWN)
                ),
                why: format!(
                    "utilization {} ({empty} empty); removable once unneeded for more than {}",
                    percent_range(low, high),
                    crate::report::short_duration(
                        self.options.scale_down_unneeded_time.as_secs_f64()
                    )
                ),
            });
        }
        let mut stopped: Vec<String> = self
            .unneeded
            .keys()
            .filter(|node| !current.contains_key(*node))
            // Nodes that are being deleted or gone left the set because they are going.
            .filter(|node| !self.is_going(node))
            .cloned()
            .collect();
        stopped.sort_by(|a, b| natural_order(a, b));
        if !stopped.is_empty() {
            let reasons: BTreeMap<&str, usize> = stopped
                .iter()
                .filter_map(|n| plan.unremovable.iter().find(|u| u.node == *n))
                .fold(BTreeMap::new(), |mut counts, u| {
                    *counts.entry(u.reason.as_str()).or_default() += 1;
                    counts
                });
            let why = if reasons.is_empty() {
                "their timers were reset".to_string()
            } else {
                format!(
                    "timers reset: {}",
                    reasons
                        .iter()
                        .map(|(r, n)| format!("{r} ({n})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Unneeded,
                what: format!(
                    "{} node(s) no longer unneeded: {}",
                    stopped.len(),
                    names_with_more(&stopped, NAMES_SHOWN)
                ),
                why,
            });
        }
        self.unneeded = current
            .iter()
            .map(|(node, u)| (node.clone(), u.since))
            .collect();

        // Blocked removals, reported when a node's reason changes.
        let mut blocked: BTreeMap<String, String> = BTreeMap::new();
        // Whether a node is going is asked only of nodes with something to report: most
        // unremovable nodes of a large cluster (not underutilized) have nothing.
        for node in plan.unremovable.iter().chain(&plan.held_back) {
            let line = if node.reason == UnremovableReason::RecentlyUnremovable {
                self.blocked.get(node.node.as_str()).cloned()
            } else {
                blocked_reason(node)
            };
            if let Some(line) = line.filter(|_| !self.is_going(&node.node)) {
                blocked.insert(node.node.to_string(), line);
            }
        }
        let mut changed: BTreeMap<String, Vec<(&str, &str)>> = BTreeMap::new();
        for (node, line) in &blocked {
            if self.blocked.get(node) != Some(line) {
                let reason = plan
                    .unremovable
                    .iter()
                    .chain(&plan.held_back)
                    .find(|u| u.node == *node)
                    .map(|u| match &u.blocking_pod {
                        Some(b) => format!("{} ({})", u.reason, b.rule),
                        None => u.reason.to_string(),
                    })
                    .unwrap_or_default();
                changed
                    .entry(reason)
                    .or_default()
                    .push((node.as_str(), line.as_str()));
            }
        }
        let mut lines = Vec::new();
        for (reason, mut details) in changed {
            details.sort_by(|a, b| natural_order(a.0, b.0));
            let same_detail = details.windows(2).all(|w| w[0].1 == w[1].1);
            let why = match details.first() {
                Some((_, line)) if same_detail => {
                    let names: Vec<&str> = details.iter().map(|d| d.0).collect();
                    format!("{line}: {}", names_with_more(&names, NAMES_SHOWN))
                }
                _ => {
                    let items: Vec<String> = details
                        .iter()
                        .map(|(node, line)| format!("{node}: {line}"))
                        .collect();
                    names_with_more(&items, 3)
                }
            };
            lines.push(TimelineEntry {
                at: now,
                kind: EntryKind::ScaleDownBlocked,
                what: format!("{} node(s) cannot be removed: {reason}", details.len()),
                why,
            });
        }
        self.timeline.extend(lines);
        self.blocked = blocked;

        // Cooldown transitions.
        // Only worth a line while there is something to remove.
        let cooldown_matters = plan.in_cooldown && !plan.unneeded.is_empty();
        if cooldown_matters != self.in_cooldown && (cooldown_matters || !plan.in_cooldown) {
            self.in_cooldown = cooldown_matters;
            let (what, why) = if cooldown_matters {
                (
                    "scale-down in cooldown: no node is removed for now".to_string(),
                    format!(
                        "after a scale-up it waits {}, after a deletion {}, after a failure {}; \
                         {} node(s) unneeded meanwhile",
                        crate::report::short_duration(
                            self.options.scale_down_delay_after_add.as_secs_f64()
                        ),
                        crate::report::short_duration(
                            self.options.scale_down_delay_after_delete.as_secs_f64()
                        ),
                        crate::report::short_duration(
                            self.options.scale_down_delay_after_failure.as_secs_f64()
                        ),
                        plan.unneeded.len()
                    ),
                )
            } else {
                (
                    "scale-down cooldown over".to_string(),
                    format!("{} node(s) unneeded", plan.unneeded.len()),
                )
            };
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Cooldown,
                what,
                why,
            });
        }

        // Removals started.
        let mut empty_by_group: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for removal in &plan.empty_to_delete {
            empty_by_group
                .entry(&removal.group_id)
                .or_default()
                .push(&removal.node);
        }
        let unneeded_for = |node: &str| {
            self.unneeded
                .get(node)
                .map(|since| crate::report::short_duration(now.since(*since).as_secs_f64()))
                .unwrap_or_default()
        };
        let mut lines = Vec::new();
        for (group, nodes) in empty_by_group {
            let first = nodes.first().copied().unwrap_or_default();
            lines.push(TimelineEntry {
                at: now,
                kind: EntryKind::ScaleDown,
                what: format!(
                    "removing {} empty node(s) of {group}: {}",
                    nodes.len(),
                    names_with_more(&nodes, NAMES_SHOWN)
                ),
                why: format!("unneeded for {} (e.g. {first})", unneeded_for(first)),
            });
        }
        for removal in &plan.drain_to_delete {
            let destinations: BTreeMap<&str, usize> =
                removal.moves.iter().fold(BTreeMap::new(), |mut d, m| {
                    *d.entry(m.destination.as_str()).or_default() += 1;
                    d
                });
            let destinations: Vec<String> = destinations
                .iter()
                .map(|(node, n)| format!("{n} to {node}"))
                .collect();
            lines.push(TimelineEntry {
                at: now,
                kind: EntryKind::ScaleDown,
                what: format!(
                    "draining node {} of {} ({} used): {} pod(s) to move",
                    removal.node,
                    removal.group_id,
                    percent(removal.utilization.value),
                    removal.pods_to_evict.len()
                ),
                why: format!(
                    "unneeded for {}; simulated destinations: {}",
                    unneeded_for(&removal.node),
                    names_with_more(&destinations, 3)
                ),
            });
        }
        self.timeline.extend(lines);
    }

    /// Failed instance creations, timed-out scale-ups and failed cloud calls, with the backoff
    /// they caused.
    fn record_cluster_state(&mut self, now: Timestamp, outcome: &LoopOutcome) {
        let report = &outcome.cluster_state;
        let mut backed_off: Vec<String> = Vec::new();
        let mut failed: BTreeMap<&str, Vec<&InstanceToDelete>> = BTreeMap::new();
        for instance in &report.failed_instances_to_delete {
            failed.entry(&instance.group_id).or_default().push(instance);
        }
        for (group, instances) in failed {
            let why = instances
                .iter()
                .find_map(|i| i.error.as_ref())
                .map(|e| format!("{}: {}", e.class, e.message))
                .unwrap_or_default();
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Failure,
                what: format!(
                    "{} instance(s) of {group} failed to be created; deleting them",
                    instances.len()
                ),
                why,
            });
            backed_off.push(group.to_string());
        }
        for timed_out in &report.timed_out_scale_ups {
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Failure,
                what: format!(
                    "scale-up of {} timed out: {} requested node(s) never registered",
                    timed_out.group_id, timed_out.missing
                ),
                why: "the target size is decreased again".to_string(),
            });
            backed_off.push(timed_out.group_id.clone());
        }
        for (action, error) in &outcome.action_errors {
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Failure,
                what: format!("{action:?} failed"),
                why: error.to_string(),
            });
        }
        backed_off.dedup();
        for group in backed_off {
            if let Some(entry) = self.autoscaler.backoff().active(&group, now) {
                self.timeline.push(TimelineEntry {
                    at: now,
                    kind: EntryKind::Backoff,
                    what: format!(
                        "{group} backed off until {} ({} s)",
                        entry.backoff_until,
                        entry.duration.as_secs()
                    ),
                    why: "other groups are considered meanwhile".to_string(),
                });
            }
        }
    }

    fn record_scale_up(
        &mut self,
        now: Timestamp,
        plan: &ScaleUpPlan,
        execution: &ScaleUpExecution,
        views: &[NodeGroupView],
    ) {
        let expander = self
            .options
            .expander
            .iter()
            .map(ExpanderName::as_str)
            .collect::<Vec<_>>()
            .join(",");
        for increase in &execution.succeeded {
            if let Some(i) = self.group_ids.iter().position(|g| *g == increase.group_id) {
                self.stats[i].scale_ups += 1;
            }
            let why = match &plan.chosen {
                Some(chosen) => {
                    let mut why = format!(
                        "{expander} chose {} among {} option(s): {} node(s) estimated for {} pod(s)",
                        chosen.group_id,
                        chosen.options_considered,
                        chosen.estimated_nodes,
                        chosen.pod_count
                    );
                    if !chosen.similar_groups.is_empty() {
                        why.push_str(&format!(
                            "; balanced with {}",
                            chosen.similar_groups.join(", ")
                        ));
                    }
                    why
                }
                None => String::new(),
            };
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::ScaleUp,
                what: format!(
                    "{} {} → {} (+{}) for {} pending pod(s)",
                    increase.group_id,
                    increase.current_target,
                    increase.new_target,
                    increase.delta(),
                    plan.triggering_pods.len()
                ),
                why,
            });
        }
        for (increase, error) in &execution.failed {
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Failure,
                what: format!(
                    "IncreaseSize of {} by {} failed",
                    increase.group_id,
                    increase.delta()
                ),
                why: error.to_string(),
            });
            if let Some(entry) = self.autoscaler.backoff().active(&increase.group_id, now) {
                self.timeline.push(TimelineEntry {
                    at: now,
                    kind: EntryKind::Backoff,
                    what: format!(
                        "{} backed off until {} ({} s)",
                        increase.group_id,
                        entry.backoff_until,
                        entry.duration.as_secs()
                    ),
                    why: "other groups are considered meanwhile".to_string(),
                });
            }
        }
        if let ScaleUpStatus::Error(message) = &plan.status
            && *message != self.last_plan_error
        {
            self.last_plan_error = message.clone();
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Failure,
                what: "scale-up could not be planned".to_string(),
                why: message.clone(),
            });
        }

        // Pods not helped, aggregated per group and reason; repeated only when it changes.
        let acted = !execution.succeeded.is_empty() || !execution.failed.is_empty();
        if !acted && !plan.pods_not_helped.is_empty() {
            let line = not_helped_reasons(plan, views);
            if line != self.last_not_helped {
                self.last_not_helped = line.clone();
                self.timeline.push(TimelineEntry {
                    at: now,
                    kind: EntryKind::NotHelped,
                    what: format!(
                        "{} pending pod(s) cannot be helped",
                        plan.pods_not_helped.len()
                    ),
                    why: line,
                });
            }
        } else if plan.pods_not_helped.is_empty() {
            self.last_not_helped.clear();
        }
    }

    /// Drains as the cluster saw them: taints, evictions (one line per node and loop), refused
    /// evictions and rollbacks.
    fn record_cluster_writes(&mut self, now: Timestamp, log: &ApiLog) {
        let mut evicted: BTreeMap<String, Vec<&Eviction>> = BTreeMap::new();
        let mut tainted: Vec<&str> = Vec::new();
        let mut untainted: Vec<&str> = Vec::new();
        let mut refused: BTreeMap<String, Vec<(&str, &str)>> = BTreeMap::new();
        for action in &log.actions {
            match action {
                ClusterAction::Tainted { node, taint, .. } if taint.key == TO_BE_DELETED => {
                    tainted.push(node);
                }
                ClusterAction::Untainted {
                    node, taint_key, ..
                } if taint_key == TO_BE_DELETED => {
                    untainted.push(node);
                }
                ClusterAction::Tainted { .. } | ClusterAction::Untainted { .. } => {}
                ClusterAction::Evicted(eviction) => {
                    let node = eviction.node.clone().unwrap_or_default();
                    evicted.entry(node).or_default().push(eviction);
                }
                ClusterAction::EvictionRefused { pod, node, reason } => {
                    refused
                        .entry(node.clone().unwrap_or_default())
                        .or_default()
                        .push((pod.as_str(), reason.as_str()));
                }
            }
        }
        if !untainted.is_empty() {
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::ScaleDownFailure,
                what: format!(
                    "untainted {} node(s): their removal was rolled back: {}",
                    untainted.len(),
                    names_with_more(&untainted, NAMES_SHOWN)
                ),
                why: "the nodes stay and take pods again".to_string(),
            });
        }
        if !tainted.is_empty() {
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Drain,
                what: format!(
                    "tainted {} node(s) {TO_BE_DELETED}:NoSchedule: {}",
                    tainted.len(),
                    names_with_more(&tainted, NAMES_SHOWN)
                ),
                why: "no new pod lands on them before they go".to_string(),
            });
        }
        for (node, evictions) in evicted {
            self.evicted_this_loop += evictions.len();
            self.evictions += evictions.len();
            let moved: Vec<&str> = evictions
                .iter()
                .filter(|e| e.replacement.is_some())
                .map(|e| e.pod.as_str())
                .collect();
            let daemon = evictions.iter().filter(|e| e.daemonset).count();
            let lost = evictions.len() - moved.len() - daemon;
            let mut parts = Vec::new();
            if !moved.is_empty() {
                parts.push(format!(
                    "{} re-created by their controllers as pending pods: {}",
                    moved.len(),
                    names_with_more(&moved, NAMES_SHOWN)
                ));
            }
            if daemon > 0 {
                parts.push(format!("{daemon} DaemonSet pod(s) go with the node"));
            }
            if lost > 0 {
                parts.push(format!("{lost} had no controller and are gone for good"));
            }
            let why = parts.join("; ");
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Drain,
                what: format!("evicted {} pod(s) from node {node}", evictions.len()),
                why,
            });
        }
        for (node, pods) in refused {
            let (first_pod, reason) = pods[0];
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::ScaleDownBlocked,
                what: format!(
                    "{} eviction(s) from node {node} refused, e.g. {first_pod}",
                    pods.len()
                ),
                why: reason.to_string(),
            });
        }
    }

    /// Engine events the timeline does not show otherwise: scale-down failures and node removals.
    fn record_events(&mut self, now: Timestamp, outcome: &LoopOutcome) {
        for event in &outcome.events {
            let kind = match event.reason {
                reasons::SCALE_DOWN_FAILED => EntryKind::ScaleDownFailure,
                _ => continue,
            };
            // Failed deletions of nodes already have their line.
            if let EventObject::Node(node) = &event.object
                && outcome.failed_deletions.iter().any(|f| f.node == *node)
            {
                continue;
            }
            self.timeline.push(TimelineEntry {
                at: now,
                kind,
                what: format!("{} on {}", event.reason, event.object),
                why: event.message.clone(),
            });
        }
    }

    /// Checks every unchecked expectation whose time is before `before`, on the current state.
    fn check_expectations_before(&mut self, before: Timestamp) {
        let end = self.end;
        let pending: Vec<usize> = (0..self.expectations.len())
            .filter(|i| {
                let (e, outcome) = &self.expectations[*i];
                let when = match e.at {
                    CheckTime::End => end,
                    CheckTime::At(d) => at(d),
                };
                outcome.is_none() && when < before
            })
            .collect();
        for i in pending {
            let outcome = self.evaluate(&self.expectations[i].0);
            let now = self.clock.now();
            self.timeline.push(TimelineEntry {
                at: now,
                kind: EntryKind::Expectation,
                what: format!(
                    "{}: {}",
                    if outcome.ok { "holds" } else { "FAILED" },
                    outcome.description
                ),
                why: format!("observed {}", outcome.observed),
            });
            self.expectations[i].1 = Some(outcome);
        }
    }

    fn evaluate(&self, expectation: &Expectation) -> ExpectationOutcome {
        let description = describe_expectation(expectation);
        let workload = || self.cluster.pods().iter().filter(|r| r.is_workload());
        let (ok, observed) = match &expectation.check {
            Check::GroupNodes { group, min, max } => {
                match self.group_ids.iter().position(|g| g == group) {
                    Some(i) => {
                        let n = self.nodes_per_group().get(i).copied().unwrap_or(0);
                        (*min <= n && n <= *max, n.to_string())
                    }
                    None => (false, format!("no node group {group}")),
                }
            }
            Check::PendingPods(expected) => {
                let n = workload().filter(|r| r.is_pending()).count();
                (n == *expected, n.to_string())
            }
            Check::RunningPods(expected) => {
                let n = workload().filter(|r| r.is_running()).count();
                (n == *expected, n.to_string())
            }
            Check::TotalNodes { min, max } => {
                let n = self.cluster.node_count();
                (*min <= n && n <= *max, n.to_string())
            }
            Check::NodesRemoved { group, min, max } => {
                let n: usize = self
                    .group_ids
                    .iter()
                    .zip(&self.stats)
                    .filter(|(id, _)| group.as_ref().is_none_or(|g| g == *id))
                    .map(|(_, stats)| stats.removed)
                    .sum();
                (*min <= n && n <= *max, n.to_string())
            }
            Check::LostPods(expected) => {
                let n = self.cluster.pods().iter().filter(|r| r.is_lost()).count();
                (n == *expected, n.to_string())
            }
        };
        ExpectationOutcome {
            description,
            ok,
            observed,
        }
    }

    /// Pending pods that no group's template can ever host (nor any node: those would be bound).
    fn never_schedulable(&self) -> usize {
        let mut templates = Snapshot::with_scheduler_profile(self.options.scheduler_profile());
        for group in self.cloud.groups() {
            if let Ok(template) = block_on(group.template_node_info()) {
                let id = templates.add_node(Arc::new(template.node));
                for pod in template.pods {
                    templates.add_pod(id, Arc::new(pod));
                }
            }
        }
        self.cluster
            .pending_pods()
            .filter(|r| r.is_workload())
            .filter(|r| find_node(&mut templates, &r.pod, 0).is_none())
            .count()
    }

    /// Everything the run produced so far (call after [`Simulation::play_to_end`]).
    pub fn into_result(self) -> SimulationResult {
        let end = self.end;
        let final_nodes = self.nodes_per_group();
        let left_behind_of = |group: &str| {
            self.left_behind
                .iter()
                .filter(|name| {
                    self.cluster
                        .node(name)
                        .is_some_and(|n| n.group.as_deref() == Some(group))
                })
                .count()
        };
        let groups = self
            .group_ids
            .iter()
            .zip(&self.stats)
            .zip(&final_nodes)
            .map(|((id, stats), final_size)| {
                (
                    id.clone(),
                    GroupSummary {
                        min_size: stats.min_size,
                        max_size: stats.max_size,
                        final_size: *final_size,
                        peak_size: stats.peak.max(*final_size),
                        scale_ups: stats.scale_ups,
                        nodes_added: stats.added,
                        nodes_removed: stats.removed,
                        resize: crate::resize_calls::of_group(&self.cloud, id, SIMULATION_START),
                        cloud_nodes: cloud_node_summary(stats, left_behind_of(id)),
                    },
                )
            })
            .collect();
        let workload: Vec<_> = self
            .cluster
            .pods()
            .iter()
            .filter(|r| r.is_workload())
            .collect();
        // Every pod that waited for the scheduler counts, started or not: one that never got a
        // node waited until it was deleted or the run ended. Leaving those out would report the
        // lucky few.
        let waited: Vec<_> = workload
            .iter()
            .filter(|r| r.was_scheduled || r.bound_at.is_none())
            .collect();
        let mut waits: Vec<f64> = waited
            .iter()
            .map(|r| {
                let until = r
                    .bound_at
                    .or(r.deleted_at)
                    .unwrap_or(end)
                    .max(r.pending_since);
                until.since(r.pending_since).as_secs_f64()
            })
            .collect();
        let never_started = waited.iter().filter(|r| r.bound_at.is_none()).count();
        let pods = PodSummary {
            created: workload.iter().filter(|r| r.replaces.is_none()).count(),
            running: workload.iter().filter(|r| r.is_running()).count(),
            pending: workload.iter().filter(|r| r.is_pending()).count(),
            never_schedulable: self.never_schedulable(),
            wait_seconds: rounded_percentiles(Percentiles::of(&mut waits), 3),
            never_started,
            evicted: self.evictions,
            lost: workload.iter().filter(|r| r.is_lost()).count(),
        };
        let (node_hours, cost) = self.cloud.node_hours_and_cost(end);
        let mut decide: Vec<f64> = self.samples.iter().map(|s| s.decide_millis).collect();
        let summary = Summary {
            scenario: self.name.clone(),
            simulated_seconds: end.since(SIMULATION_START).as_secs(),
            groups,
            pods,
            node_hours: rounded(node_hours, 3),
            cost: rounded(cost, 3),
            loops: self.samples.len(),
            decide_millis: rounded_percentiles(Percentiles::of(&mut decide), 3),
            expectations: self
                .expectations
                .into_iter()
                .filter_map(|(_, o)| o)
                .collect(),
            capacity: self.capacity.summary(&self.cluster),
        };
        SimulationResult {
            summary,
            initial_nodes: self.stats.iter().map(|s| s.initial).collect(),
            group_ids: self.group_ids,
            scan_interval_secs: self.scan_interval.as_secs_f64(),
            samples: self.samples,
            timeline: self.timeline,
            notes: self.notes,
            final_status: self.final_status,
            node_limit_exceeded: self.cloud.node_limit_exceeded().map(|e| e.to_string()),
        }
    }
}

/// A group's line of the cloud node controller's counts: for a group without a
/// cloud-controller-manager always, for another only when the controller touched its nodes.
fn cloud_node_summary(stats: &GroupStats, left_behind: usize) -> Option<CloudNodeSummary> {
    let touched = stats.initialized + stats.node_objects_deleted + left_behind > 0;
    (!stats.cloud_controller_manager || touched).then_some(CloudNodeSummary {
        cloud_controller_manager: stats.cloud_controller_manager,
        initialized: stats.initialized,
        node_objects_deleted: stats.node_objects_deleted,
        left_behind,
    })
}

/// Rounds for the summary: simulated figures to what they mean, not to float noise.
fn rounded(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

fn rounded_percentiles(p: Percentiles, decimals: i32) -> Percentiles {
    Percentiles {
        p50: rounded(p.p50, decimals),
        p99: rounded(p.p99, decimals),
        max: rounded(p.max, decimals),
    }
}

/// `group: reason (n pods); ...` over every pod the plan could not help.
fn not_helped_reasons(plan: &ScaleUpPlan, views: &[NodeGroupView]) -> String {
    let mut counts: BTreeMap<(usize, String, String), usize> = BTreeMap::new();
    for verdict in &plan.pods_not_helped {
        for (group, reason) in &verdict.per_group {
            let order = views
                .iter()
                .position(|v| v.id == *group)
                .unwrap_or(usize::MAX);
            *counts
                .entry((order, group.clone(), reason.clone()))
                .or_default() += 1;
        }
    }
    if counts.is_empty() {
        return format!("{:?}", plan.status);
    }
    counts
        .into_iter()
        .map(|((_, group, reason), n)| format!("{group}: {reason} ({n})"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Plays a whole scenario.
pub fn simulate(scenario: &Scenario, options: AutoscalingOptions) -> SimulationResult {
    Simulation::new(scenario, options).finish()
}

/// Simulated seconds since the start, for callers formatting times.
pub fn simulated_seconds(t: Timestamp) -> f64 {
    seconds(t)
}
