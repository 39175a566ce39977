//! The main loop (docs/behaviour.md LOOP-106): one [`Autoscaler::run_once`] per iteration, in
//! upstream order — first-run clean-up, gather from the cloud and the cluster, cluster-state update
//! and the clean-ups it asks for, the health gate, scale-up, scale-down with actuation, min-size
//! enforcement, and the status report — returning everything decided and done in a
//! [`LoopOutcome`].
//!
//! The core never reads the clock: the caller passes the loop's `now`, and a [`Stopwatch`] that
//! measures the time spent in the pure planning calls. Scale-down deletions are state machines
//! ([`DeletionTracker`]) advanced by each iteration's `now`; a live binary may also call
//! [`Autoscaler::advance_actuation`] between iterations.
//!
//! With `--dry-run` everything is computed and reported in [`LoopOutcome::planned_actions`], and
//! no mutating cloud or cluster method is called (events and the status ConfigMap are returned,
//! not written).

mod buffers;
mod external_expander;
mod gather;
mod iteration;
mod kept;
mod provisioning;
mod recorder;
mod salvo;
#[cfg(test)]
mod snapshot;
mod templates;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ferroscale_model::{Node, Pod, Timestamp};

use crate::accelerators::AcceleratorLabels;
use crate::act::deletions::{
    ActuationProgress, ActuationReport, ActuationStep, CompletedDeletion, DeletionTracker,
    FailedDeletion, LiveRecheck, SoftTaintUpdate,
};
use crate::act::scale_up::ScaleUpExecution;
use crate::backoff::NodeGroupBackoff;
use crate::cloud::{CloudError, CloudProvider};
use crate::cluster_state::status::{StatusInput, format_go_time};
use crate::cluster_state::{
    ClusterStateRegistry, ClusterStateReport, StatusReport, render_status_yaml,
};
use crate::events::Event;
use crate::kubernetes::{ClusterApi, ClusterError, ClusterObjects, StatusConfigMap};
use crate::options::AutoscalingOptions;
use crate::parallel::Workers;
use crate::scale_down::{ScaleDownPlan, ScaleDownState};
use crate::scale_up::{ExternalExpander, NodeGroupView, ScaleUpPlan};

pub use crate::act::PlannedAction;
pub use crate::stopwatch::{NoStopwatch, Stopwatch};
pub use external_expander::EXTERNAL_EXPANDER_FAILED;
pub use gather::{GatherCall, GatherFailure, GatherSubject};
pub use kept::{Rebuild, SnapshotRefresh};
pub use provisioning::RequestUpdate;
pub use recorder::{EVENT_REPEAT_INTERVAL, EventRecorder};
pub use templates::{TemplateCache, TemplateSource, daemonset_runs_on};

/// Why an iteration stopped on an error (upstream counts these in `errors_total`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoopError {
    #[error("reading the cluster failed: {0}")]
    Gather(ClusterError),
    #[error("cloud provider refresh failed: {0}")]
    Refresh(CloudError),
    #[error("listing node groups failed: {0}")]
    NodeGroups(CloudError),
}

/// Why an iteration ended before scale-up without an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EarlyEnd {
    /// docs/behaviour.md LOOP-108: no nodes, or no ready nodes (only with
    /// `--scale-up-from-zero=false`).
    NotActionable(String),
    /// docs/behaviour.md CS-64: too many unready nodes.
    ClusterUnhealthy,
    /// docs/behaviour.md CS-47: a node-group target size was corrected.
    SizesFixed,
}

/// Everything one iteration decided and did.
#[derive(Debug, Clone, Default)]
pub struct LoopOutcome {
    pub now: Timestamp,
    pub dry_run: bool,
    /// Set when the iteration stopped on an error.
    pub error: Option<LoopError>,
    /// Set when the iteration ended early without an error.
    pub ended_early: Option<EarlyEnd>,
    pub cluster_state: ClusterStateReport,
    pub scale_up: Option<ScaleUpPlan>,
    /// Every resize of this iteration's scale-up, salvo rounds included.
    pub scale_up_execution: Option<ScaleUpExecution>,
    /// The plans of the further rounds of `--salvo-scale-up` (docs/behaviour.md SU-114), after
    /// the first one in `scale_up`.
    pub salvo_rounds: Vec<ScaleUpPlan>,
    pub scale_down: Option<ScaleDownPlan>,
    pub min_size_enforcement: Option<ScaleUpPlan>,
    pub min_size_execution: Option<ScaleUpExecution>,
    /// Steps reached by scale-down deletions this iteration.
    pub actuation: Vec<ActuationReport>,
    /// Deletions the cloud carried out this iteration.
    pub deleted_nodes: Vec<CompletedDeletion>,
    /// Deletions abandoned (and rolled back) this iteration.
    pub failed_deletions: Vec<FailedDeletion>,
    pub soft_taints: SoftTaintUpdate,
    /// Nodes that still carry a deletion taint the autoscaler tried and failed to remove; it
    /// tries again next loop (docs/behaviour.md SD-120).
    pub untaints_owed: Vec<String>,
    /// The kinds Gather read from a view that may be behind the cluster, with why: scale-down
    /// did not act this loop (docs/behaviour.md LOOP-121).
    pub caches_behind: Vec<String>,
    /// How the kept snapshot took in this loop's objects (docs/behaviour.md LOOP-124); `None`
    /// when the loop ended before the snapshot.
    pub snapshot_refresh: Option<SnapshotRefresh>,
    /// The kinds left out of the view for want of permission (docs/behaviour.md LOOP-123).
    pub missing_permissions: Vec<String>,
    /// Mutating calls made (or, in dry-run mode, that would have been made), in order.
    pub planned_actions: Vec<PlannedAction>,
    /// Cloud calls that failed outside scale-up and actuation, with the provider's error (a group
    /// that disappeared since gather is `CloudError::NodeGroupDoesNotExist`).
    pub action_errors: Vec<(PlannedAction, CloudError)>,
    /// Provider calls that failed while gathering; the iteration went on without their answers
    /// (see [`GatherFailure`]).
    pub gather_failures: Vec<GatherFailure>,
    /// Conditions set on ProvisioningRequests this iteration, in order (written unless dry-run).
    pub provisioning_requests: Vec<RequestUpdate>,
    /// The status report of the iteration (always set once `run_once` returns).
    pub status: Option<StatusReport>,
    /// The status ConfigMap written (or, in dry-run mode, that would have been written).
    pub status_configmap: Option<StatusConfigMap>,
    /// Writing the status ConfigMap failed.
    pub status_error: Option<String>,
    /// Every event of the iteration that passed deduplication (published unless dry-run).
    pub events: Vec<Event>,
    /// Time spent in the pure planning calls, as measured by the caller's stopwatch.
    pub decide_millis: f64,
    /// `decide_millis` split by upstream `function_duration_seconds` label (`updateClusterState`,
    /// `scaleUp`, `findUnneeded`, `writeStatus`), and the provider's refresh
    /// (`cloudProviderRefresh`, a call out, not part of `decide_millis`).
    pub function_millis: Vec<(&'static str, f64)>,
    /// Capacity of the nodes not being deleted (docs/behaviour.md LOOP-110); `None` when the
    /// iteration stopped before the nodes were gathered.
    pub cluster_resources: Option<ClusterResources>,
    /// Unbound pods handed to the scale-up plan.
    pub pending_pods: Vec<Arc<Pod>>,
    /// Node groups as gathered, in provider order.
    pub node_groups: Vec<NodeGroupView>,
    /// Groups backed off from scale-up at the end of the iteration, with the backoff's error code
    /// (for `node_group_backoff_status`, docs/behaviour.md OBS-122).
    pub node_group_backoffs: BTreeMap<String, String>,
    /// The accelerator labels of each group's template node, by group id, for the scale-up
    /// counters (docs/behaviour.md OBS-123); groups without a template are absent.
    pub group_accelerators: BTreeMap<String, AcceleratorLabels>,
    /// The accelerator labels of the nodes in `deleted_nodes`, by node name, as they were when
    /// their deletion started (docs/behaviour.md OBS-123).
    pub deleted_node_accelerators: BTreeMap<String, AcceleratorLabels>,
    /// The taints of every node gathered, by the type `node_taints_count` reports them under,
    /// every type present (docs/behaviour.md OBS-124); empty when the iteration stopped before
    /// reading the nodes.
    pub node_taints: BTreeMap<&'static str, usize>,
    /// Node deletions started and neither finished nor rolled back when the iteration ended
    /// (`pending_node_deletions`, docs/behaviour.md OBS-125).
    pub pending_node_deletions: usize,
    /// What the iteration gathered, when [`Autoscaler::capture_next_loop`] asked for it and the
    /// iteration got as far as gathering.
    pub capture: Option<Arc<LoopCapture>>,
}

/// What one iteration gathered, handed out only on request (the debugging snapshot, and the
/// scenario a live loop is replayed from): the cluster objects, the node groups with their
/// bounds, target sizes and templates, which group each node belongs to, and the options.
#[derive(Debug, Clone)]
pub struct LoopCapture {
    pub now: Timestamp,
    pub objects: ClusterObjects,
    /// In provider order.
    pub node_groups: Vec<NodeGroupView>,
    /// Node name → id of the group it belongs to; nodes of no group are absent.
    pub group_of_node: BTreeMap<String, String>,
    pub options: AutoscalingOptions,
}

impl LoopOutcome {
    /// The iteration scaled a group up or began removing a node: with `--frequent-loops-enabled`
    /// the next iteration starts at once rather than after `--scan-interval` (docs/behaviour.md
    /// LOOP-104).
    pub fn acted(&self) -> bool {
        let scaled_up = [&self.scale_up_execution, &self.min_size_execution]
            .into_iter()
            .flatten()
            .any(|execution| !execution.succeeded.is_empty());
        let deletion_started = self
            .actuation
            .iter()
            .any(|report| matches!(report.step, ActuationStep::Tainted));
        scaled_up || deletion_started
    }
}

/// Summed capacity of the cluster's nodes, for `cluster_cpu_current_cores` and
/// `cluster_memory_current_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ClusterResources {
    pub cores: f64,
    pub memory_bytes: f64,
}

/// Sums the capacity of every node that is not being deleted (docs/behaviour.md LOOP-110).
fn cluster_resources(nodes: &[Arc<Node>], now: Timestamp) -> ClusterResources {
    nodes
        .iter()
        .filter(|node| !crate::scale_down::eligibility::is_being_deleted(node, now))
        .fold(ClusterResources::default(), |mut sum, node| {
            sum.cores += node.capacity.cpu_milli as f64 / 1000.0;
            sum.memory_bytes += node.capacity.memory as f64;
            sum
        })
}

/// The accelerator labels of every group's template node (docs/behaviour.md OBS-123).
fn group_accelerators(
    cloud: &dyn CloudProvider,
    views: &[NodeGroupView],
) -> BTreeMap<String, AcceleratorLabels> {
    let available = cloud.available_gpu_types();
    views
        .iter()
        .filter_map(|view| {
            let template = view.template.as_ref()?;
            let slices: Vec<&ferroscale_model::dra::ResourceSlice> =
                template.resource_slices.iter().collect();
            let gpu = cloud.node_gpu_config(&template.node);
            let labels =
                AcceleratorLabels::of(&template.node, gpu.as_ref(), &available, None, &slices);
            Some((view.id.clone(), labels))
        })
        .collect()
}

/// The autoscaler's memory across iterations.
pub struct Autoscaler {
    options: AutoscalingOptions,
    seed: u64,
    backoff: NodeGroupBackoff,
    registry: ClusterStateRegistry,
    scale_down_state: ScaleDownState,
    deletions: DeletionTracker,
    templates: TemplateCache,
    /// The pods of the nodes templates are built from, kept while the pod list stays the same.
    example_pods: gather::ExamplePods,
    /// The pending pods' equivalence groups, kept while the pending pods stay the same (behind
    /// a lock because the scale-up plan is made through `&self`).
    equivalence: std::sync::Mutex<crate::scale_up::EquivalenceMemo>,
    /// Each node's utilization and emptiness, kept while the node and its pods stay the same.
    measure_memo: crate::scale_down::MeasureMemo,
    /// ProvisioningRequests' retry backoff and whose turn the next loop is.
    provisioning: provisioning::ProvisioningState,
    /// Controllers whose fake pods were not helped, by uid, until when they get none
    /// (docs/behaviour.md SU-110).
    injection_backoff: HashMap<String, Timestamp>,
    recorder: EventRecorder,
    previous_status: Option<StatusReport>,
    first_loop_done: bool,
    iterations: u64,
    /// When the first iteration ran (for the "no ready nodes" grace of docs/behaviour.md LOOP-108).
    started_at: Option<Timestamp>,
    /// The next iteration copies what it gathers into [`LoopOutcome::capture`].
    capture_next: bool,
    /// This iteration does (taken from `capture_next` when it starts).
    capturing: bool,
    /// The service `grpc` in `--expander` calls (docs/grpc-expander.md); `None`: `grpc` keeps
    /// every option.
    external_expander: Option<Arc<dyn ExternalExpander>>,
    /// Decide's worker threads, started once (`--predicate-parallelism`, at most the cores).
    workers: Workers,
    /// The accelerator labels of the nodes being deleted, taken when their deletion started, for
    /// the scale-down counters of the iteration that sees them go.
    deletion_accelerators: HashMap<String, AcceleratorLabels>,
    /// The snapshot's registered nodes and bound pods, kept from one loop to the next
    /// (docs/behaviour.md LOOP-124).
    kept: kept::KeptSnapshot,
}

/// Measures the pure calls of one iteration.
struct DecideTimer<'s> {
    stopwatch: &'s dyn Stopwatch,
    total: f64,
    /// Per upstream `function` label, in first-use order.
    by_function: Vec<(&'static str, f64)>,
}

impl DecideTimer<'_> {
    /// Runs `f`, adding its time to the total and to `function` (an upstream
    /// `function_duration_seconds` label).
    fn time<T>(&mut self, function: &'static str, f: impl FnOnce() -> T) -> T {
        let started = self.stopwatch.elapsed_millis();
        let value = f();
        let took = self.since(started);
        self.total += took;
        self.add(function, took);
        value
    }

    /// Awaits `call` (a call out of the process, not part of Decide's total) and records its
    /// time under `function`.
    async fn time_call<T>(&mut self, function: &'static str, call: impl Future<Output = T>) -> T {
        let started = self.stopwatch.elapsed_millis();
        let value = call.await;
        let took = self.since(started);
        self.add(function, took);
        value
    }

    fn since(&self, started: f64) -> f64 {
        (self.stopwatch.elapsed_millis() - started).max(0.0)
    }

    fn add(&mut self, function: &'static str, took: f64) {
        match self
            .by_function
            .iter_mut()
            .find(|(name, _)| *name == function)
        {
            Some((_, millis)) => *millis += took,
            None => self.by_function.push((function, took)),
        }
    }
}

impl Autoscaler {
    pub fn new(options: AutoscalingOptions, seed: u64) -> Autoscaler {
        let options_parallelism = options.predicate_parallelism;
        Autoscaler {
            backoff: NodeGroupBackoff::from_options(&options),
            registry: ClusterStateRegistry::new(&options),
            recorder: EventRecorder::new(options.record_duplicated_events),
            provisioning: provisioning::ProvisioningState::new(&options),
            options,
            seed,
            scale_down_state: ScaleDownState::new(),
            deletions: DeletionTracker::new(),
            templates: TemplateCache::default(),
            example_pods: gather::ExamplePods::default(),
            equivalence: Default::default(),
            measure_memo: Default::default(),
            injection_backoff: HashMap::new(),
            previous_status: None,
            first_loop_done: false,
            iterations: 0,
            started_at: None,
            capture_next: false,
            capturing: false,
            external_expander: None,
            workers: Workers::for_machine(options_parallelism),
            deletion_accelerators: HashMap::new(),
            kept: kept::KeptSnapshot::default(),
        }
    }

    /// Wires the service that `grpc` in `--expander` asks (docs/grpc-expander.md).
    pub fn with_external_expander(mut self, expander: Arc<dyn ExternalExpander>) -> Autoscaler {
        self.external_expander = Some(expander);
        self
    }

    /// Asks the next iteration to hand out what it gathers ([`LoopOutcome::capture`]). Copying
    /// is cheap (nodes and pods are shared), and only a loop that was asked pays for it.
    pub fn capture_next_loop(&mut self) {
        self.capture_next = true;
    }

    pub fn options(&self) -> &AutoscalingOptions {
        &self.options
    }

    pub fn backoff(&self) -> &NodeGroupBackoff {
        &self.backoff
    }

    pub fn registry(&self) -> &ClusterStateRegistry {
        &self.registry
    }

    pub fn scale_down_state(&self) -> &ScaleDownState {
        &self.scale_down_state
    }

    pub fn deletions(&self) -> &DeletionTracker {
        &self.deletions
    }

    /// Advances the scale-down deletions in progress to `now` (run_once does this too; a live
    /// binary may call it between iterations so drains progress at their own pace). When the
    /// node groups or the cluster cannot be read nothing moves (a deletion whose group seems
    /// gone would be abandoned, and the re-check needs fresh PDBs and controllers), and the
    /// error says which read failed.
    pub async fn advance_actuation(
        &mut self,
        cloud: &dyn CloudProvider,
        cluster: &dyn ClusterApi,
        now: Timestamp,
    ) -> Result<ActuationProgress, LoopError> {
        if self.deletions.is_idle() || self.options.dry_run {
            return Ok(ActuationProgress::default());
        }
        let groups = cloud.node_groups().await.map_err(LoopError::NodeGroups)?;
        let objects = cluster.gather().await.map_err(LoopError::Gather)?;
        if !objects.behind.is_empty() {
            return Ok(ActuationProgress::default());
        }
        let recheck = LiveRecheck::new(&objects, now, &self.options);
        let progress = self
            .deletions
            .advance(&groups, cluster, &recheck, now, &self.options)
            .await;
        self.absorb(&progress, now);
        Ok(progress)
    }

    /// Shutdown (docs/behaviour.md LOOP-97): deletes the status ConfigMap (with
    /// `--write-status-configmap`) and lets the provider clean up.
    pub async fn shutdown(
        &mut self,
        cloud: &dyn CloudProvider,
        cluster: &dyn ClusterApi,
    ) -> Result<(), String> {
        let mut errors = Vec::new();
        if self.options.write_status_configmap
            && !self.options.dry_run
            && let Err(e) = cluster
                .delete_status(
                    &self.options.namespace,
                    &self.options.status_config_map_name,
                )
                .await
        {
            errors.push(format!("deleting the status ConfigMap: {e}"));
        }
        if let Err(e) = cloud.cleanup().await {
            errors.push(format!("cloud provider clean-up: {e}"));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// Records what actuation did in the registry and the scale-down state.
    fn absorb(&mut self, progress: &ActuationProgress, now: Timestamp) {
        for done in &progress.completed {
            self.registry
                .register_scale_down(&done.group_id, &done.node, now);
        }
        for failed in &progress.failed {
            if failed.cloud_error {
                // A refused cloud deletion starts --scale-down-delay-after-failure: for its group in
                // the local delay mode (as upstream), and, unlike upstream, globally too, so a cloud
                // that keeps refusing deletions does not get node after node drained for nothing.
                self.scale_down_state.record_failure(&failed.group_id, now);
            }
            // A node whose removal failed is not tried again at once: upstream would re-taint and
            // re-drain it in the very next loop, evicting the pods that came back after the
            // rollback, every scan interval. It waits out --unremovable-node-recheck-timeout like a
            // node whose removal simulation failed, and its unneeded timer starts over.
            self.scale_down_state.unneeded_since.remove(&failed.node);
            self.scale_down_state.unremovable_until.insert(
                failed.node.clone(),
                now + self.options.unremovable_node_recheck_timeout,
            );
        }
    }

    /// One iteration at `now`.
    pub async fn run_once(
        &mut self,
        cloud: &dyn CloudProvider,
        cluster: &dyn ClusterApi,
        now: Timestamp,
        stopwatch: &dyn Stopwatch,
    ) -> LoopOutcome {
        let mut outcome = LoopOutcome {
            now,
            dry_run: self.options.dry_run,
            ..LoopOutcome::default()
        };
        let mut timer = DecideTimer {
            stopwatch,
            total: 0.0,
            by_function: Vec::new(),
        };
        let mut events: Vec<Event> = Vec::new();
        self.started_at.get_or_insert(now);
        // One request, one iteration: an iteration that stops before gathering answers it
        // without a capture.
        self.capturing = std::mem::take(&mut self.capture_next);
        let result = self
            .iterate(cloud, cluster, now, &mut timer, &mut outcome, &mut events)
            .await;
        if let Err(error) = result {
            outcome.error = Some(error);
        }

        // Deferred to the end of the iteration whatever happened (docs/behaviour.md LOOP-107):
        // status and events.
        let candidates = outcome
            .scale_down
            .as_ref()
            .map(|plan| {
                let mut per_group: BTreeMap<String, usize> = BTreeMap::new();
                for node in &plan.unneeded {
                    *per_group.entry(node.group_id.clone()).or_default() += 1;
                }
                per_group
            })
            .unwrap_or_default();
        let initializing = match &outcome.ended_early {
            Some(EarlyEnd::NotActionable(message)) => Some(message.clone()),
            _ => None,
        };
        let status = timer.time("writeStatus", || {
            StatusReport::build(StatusInput {
                now,
                cluster_state: &outcome.cluster_state,
                backoff: &self.backoff,
                scale_down_candidates: &candidates,
                initializing,
                missing_permissions: &outcome.missing_permissions,
                previous: self.previous_status.as_ref(),
            })
        });
        if self.options.write_status_configmap {
            let configmap = StatusConfigMap {
                namespace: self.options.namespace.clone(),
                name: self.options.status_config_map_name.clone(),
                last_updated: format_go_time(now),
                status_yaml: render_status_yaml(&status),
                written_at: now,
            };
            if !self.options.dry_run
                && let Err(e) = cluster.write_status(&configmap).await
            {
                outcome.status_error = Some(e.to_string());
            }
            outcome.status_configmap = Some(configmap);
        }
        outcome.node_group_backoffs = outcome
            .node_groups
            .iter()
            .filter_map(|group| {
                let entry = self.backoff.active(&group.id, now)?;
                Some((group.id.clone(), entry.reason.code.clone()))
            })
            .collect();
        self.previous_status = Some(status.clone());
        outcome.status = Some(status);

        let events = self.recorder.filter(events, now);
        if !self.options.dry_run && !events.is_empty() {
            cluster.publish_events(&events).await;
        }
        outcome.events = events;
        outcome.decide_millis = timer.total;
        outcome.function_millis = timer.by_function;
        self.report_deletions(&mut outcome);
        self.iterations += 1;
        outcome
    }

    /// The deletions' part of the outcome's observations: how many are still pending, and the
    /// accelerator labels of those that finished (docs/behaviour.md OBS-123, OBS-125).
    fn report_deletions(&mut self, outcome: &mut LoopOutcome) {
        outcome.pending_node_deletions = self.deletions.pending_count();
        for deleted in &outcome.deleted_nodes {
            if let Some(labels) = self.deletion_accelerators.remove(&deleted.node) {
                outcome
                    .deleted_node_accelerators
                    .insert(deleted.node.clone(), labels);
            }
        }
        let deletions = &self.deletions;
        self.deletion_accelerators
            .retain(|node, _| deletions.is_deleting(node));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::Resources;
    use ferroscale_model::taints::{TO_BE_DELETED, Taint, TaintEffect};

    #[test]
    fn cluster_resources_sum_capacity_and_skip_nodes_being_deleted() {
        let now = Timestamp::from_secs(1_000_000);
        let node = |name: &str, cpu_milli: i64, memory: i64| {
            let mut node = Node::new(name, Resources::new(cpu_milli / 2, memory / 2));
            node.capacity = Resources::new(cpu_milli, memory);
            node
        };
        let mut deleting = node("deleting", 8000, 1 << 30);
        deleting.taints.push(Taint::new(
            TO_BE_DELETED,
            (now.secs() - 10).to_string(),
            TaintEffect::NoSchedule,
        ));
        let nodes = vec![
            Arc::new(node("a", 4000, 16 << 30)),
            Arc::new(node("b", 2500, 8 << 30)),
            Arc::new(deleting),
        ];
        let sum = cluster_resources(&nodes, now);
        assert_eq!(sum.cores, 6.5);
        assert_eq!(sum.memory_bytes, (24_i64 << 30) as f64);
    }
}
