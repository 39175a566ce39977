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

mod recorder;
mod templates;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use ferroscale_model::{Node, Pod, Timestamp};
use ferroscale_scheduling::Snapshot;
use futures::StreamExt;

use crate::actuation::{
    ActuationProgress, ActuationReport, ActuationStep, CompletedDeletion, DeletionTracker,
    EmptinessRecheck, FailedDeletion, NodeDeletion, RemovalKind, RemovalRecheck, SoftTaintUpdate,
    apply_soft_taints, remove_leftover_taints,
};
use crate::backoff::NodeGroupBackoff;
use crate::cloud::{CloudError, CloudProvider, Instance, NodeGroup};
use crate::cluster_state::status::{StatusInput, format_go_time};
use crate::cluster_state::{
    ClusterStateRegistry, ClusterStateReport, GroupObservation, InstanceToDelete, StatusReport,
    render_status_yaml,
};
use crate::events::{Event, EventObject, reasons};
use crate::kubernetes::{ClusterApi, ClusterError, ClusterObjects, StatusConfigMap};
use crate::options::{AutoscalingOptions, ExpanderName};
use crate::scale_down::{
    ControllerIndex, ControllerReplicas, DeletionInProgress, DeletionsInProgress, RecheckBlock,
    ScaleDownInput, ScaleDownPlan, ScaleDownState, first_blocking_pod, plan_scale_down,
};
use crate::scale_up::{
    NodeGroupView, ProviderFacts, ScaleUpExecution, ScaleUpInput, ScaleUpPlan, execute_scale_up,
    inject_upcoming_nodes, plan_min_size_enforcement, plan_scale_up,
};

pub use recorder::{EVENT_REPEAT_INTERVAL, EventRecorder};
pub use templates::{TemplateCache, TemplateSource, daemonset_runs_on};

/// Measures elapsed time for the caller; the core has no clock of its own.
pub trait Stopwatch {
    /// Milliseconds since an origin fixed by the implementation.
    fn elapsed_millis(&self) -> f64;
}

/// A stopwatch that never advances, for callers that do not measure.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoStopwatch;

impl Stopwatch for NoStopwatch {
    fn elapsed_millis(&self) -> f64 {
        0.0
    }
}

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

/// A mutating call the iteration made — or, in dry-run mode, would have made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedAction {
    IncreaseSize {
        group_id: String,
        delta: usize,
    },
    DecreaseTargetSize {
        group_id: String,
        delta: i64,
    },
    /// `DeleteNodes` (or `ForceDeleteNodes`) of instances without a usable node.
    DeleteInstances {
        group_id: String,
        instance_ids: Vec<String>,
        force: bool,
    },
    /// Start a scale-down deletion (taint, then drain or delete).
    StartNodeDeletion {
        node: String,
        group_id: String,
        kind: RemovalKind,
    },
    AddSoftTaint {
        node: String,
    },
    RemoveSoftTaint {
        node: String,
    },
    RemoveLeftoverTaint {
        node: String,
    },
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
    pub scale_up_execution: Option<ScaleUpExecution>,
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
    /// Mutating calls made (or, in dry-run mode, that would have been made), in order.
    pub planned_actions: Vec<PlannedAction>,
    /// Cloud or cluster calls that failed outside scale-up and actuation, with the error.
    pub action_errors: Vec<(PlannedAction, String)>,
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
    /// `scaleUp`, `findUnneeded`, `writeStatus`).
    pub function_millis: Vec<(&'static str, f64)>,
    /// Capacity of the nodes not being deleted (docs/behaviour.md LOOP-110); `None` when the
    /// iteration stopped before the nodes were gathered.
    pub cluster_resources: Option<ClusterResources>,
    /// Unbound pods handed to the scale-up plan.
    pub pending_pods: Vec<Arc<Pod>>,
    /// Node groups as gathered, in provider order.
    pub node_groups: Vec<NodeGroupView>,
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

/// How many NodeGroupForNode calls may be in flight at once while gathering.
const NODE_GROUP_LOOKUP_CONCURRENCY: usize = 16;

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

/// The autoscaler's memory across iterations.
pub struct Autoscaler {
    options: AutoscalingOptions,
    seed: u64,
    backoff: NodeGroupBackoff,
    registry: ClusterStateRegistry,
    scale_down_state: ScaleDownState,
    deletions: DeletionTracker,
    templates: TemplateCache,
    recorder: EventRecorder,
    previous_status: Option<StatusReport>,
    first_loop_done: bool,
    iterations: u64,
    /// When the first iteration ran (for the "no ready nodes" grace of docs/behaviour.md LOOP-108).
    started_at: Option<Timestamp>,
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
        let took = (self.stopwatch.elapsed_millis() - started).max(0.0);
        self.total += took;
        match self
            .by_function
            .iter_mut()
            .find(|(name, _)| *name == function)
        {
            Some((_, millis)) => *millis += took,
            None => self.by_function.push((function, took)),
        }
        value
    }
}

/// What gather produced for the rest of the iteration.
struct Gathered {
    objects: ClusterObjects,
    groups: Vec<Arc<dyn NodeGroup>>,
    views: Vec<NodeGroupView>,
    /// Node name → index into `groups`.
    group_of_node: HashMap<String, usize>,
    /// Per group: `Nodes()` (`None` when the call failed).
    instances: Vec<Option<Vec<Instance>>>,
    /// Nodes of a group that the provider keeps out of scale-down this loop
    /// (`CloudProvider::scale_down_vetoes`).
    scale_down_vetoed: HashSet<String>,
}

impl Autoscaler {
    pub fn new(options: AutoscalingOptions, seed: u64) -> Autoscaler {
        Autoscaler {
            backoff: NodeGroupBackoff::from_options(&options),
            registry: ClusterStateRegistry::new(&options),
            recorder: EventRecorder::new(options.record_duplicated_events),
            options,
            seed,
            scale_down_state: ScaleDownState::new(),
            deletions: DeletionTracker::new(),
            templates: TemplateCache::default(),
            previous_status: None,
            first_loop_done: false,
            iterations: 0,
            started_at: None,
        }
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
    /// binary may call it between iterations so drains progress at their own pace).
    pub async fn advance_actuation(
        &mut self,
        cloud: &dyn CloudProvider,
        cluster: &dyn ClusterApi,
        now: Timestamp,
    ) -> ActuationProgress {
        if self.deletions.is_idle() || self.options.dry_run {
            return ActuationProgress::default();
        }
        let groups = cloud.node_groups().await.unwrap_or_default();
        // The re-check needs fresh PDBs and controllers; without them nothing is removed.
        let Ok(objects) = cluster.gather().await else {
            return ActuationProgress::default();
        };
        let recheck = LiveRecheck::new(&objects, now, &self.options);
        let progress = self
            .deletions
            .advance(&groups, cluster, &recheck, now, &self.options)
            .await;
        self.absorb(&progress, now);
        progress
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
    /// Act on a plan of group increases (scale-up or min-size enforcement): resize through the
    /// cloud, then register each success as a scale-up request and a scale-down cooldown start.
    async fn execute_increases(
        &mut self,
        plan: &ScaleUpPlan,
        groups: &[Arc<dyn NodeGroup>],
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> ScaleUpExecution {
        let execution = execute_scale_up(plan, groups, &mut self.backoff, now, &self.options).await;
        for increase in &execution.succeeded {
            self.registry
                .register_scale_up(&increase.group_id, increase.delta(), now);
            self.scale_down_state
                .record_scale_up(&increase.group_id, now);
        }
        events.extend(execution.events.iter().cloned());
        execution
    }

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
        self.previous_status = Some(status.clone());
        outcome.status = Some(status);

        let events = self.recorder.filter(events, now);
        if !self.options.dry_run && !events.is_empty() {
            cluster.publish_events(&events).await;
        }
        outcome.events = events;
        outcome.decide_millis = timer.total;
        outcome.function_millis = timer.by_function;
        self.iterations += 1;
        outcome
    }

    /// The iteration up to (not including) the status report.
    async fn iterate(
        &mut self,
        cloud: &dyn CloudProvider,
        cluster: &dyn ClusterApi,
        now: Timestamp,
        timer: &mut DecideTimer<'_>,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) -> Result<(), LoopError> {
        let dry_run = self.options.dry_run;
        let seed = self.seed.wrapping_add(self.iterations);

        // 1. First-iteration clean-up of taints an earlier process left behind.
        if !self.first_loop_done {
            self.first_loop_done = true;
            let objects = cluster.gather().await.map_err(LoopError::Gather)?;
            if dry_run {
                for node in objects
                    .nodes
                    .iter()
                    .filter(|n| n.has_taint(ferroscale_model::taints::TO_BE_DELETED))
                {
                    outcome
                        .planned_actions
                        .push(PlannedAction::RemoveLeftoverTaint {
                            node: node.name.clone(),
                        });
                }
            }
            let cleaned =
                remove_leftover_taints(cloud, cluster, &objects.nodes, now, &self.options).await;
            for event in &cleaned {
                if let EventObject::Node(node) = &event.object {
                    outcome
                        .planned_actions
                        .push(PlannedAction::RemoveLeftoverTaint { node: node.clone() });
                }
            }
            events.extend(cleaned);
        }

        // 8. Refresh the cloud's view, then move running deletions forward so the snapshot
        // gathered below sees their effects.
        cloud.refresh().await.map_err(LoopError::Refresh)?;
        let groups = cloud.node_groups().await.map_err(LoopError::NodeGroups)?;
        if !dry_run && !self.deletions.is_idle() {
            // Fresh objects for the drainability re-check (docs/behaviour.md SD-110). If they
            // cannot be read, the deletions wait: when in doubt, no node is removed.
            if let Ok(fresh) = cluster.gather().await {
                let recheck = LiveRecheck::new(&fresh, now, &self.options);
                let progress = self
                    .deletions
                    .advance(&groups, cluster, &recheck, now, &self.options)
                    .await;
                self.absorb(&progress, now);
                record_progress(outcome, events, progress);
            }
        }

        // 2-6, 12. Gather the cluster and the groups.
        let objects = cluster.gather().await.map_err(LoopError::Gather)?;
        // 5. Cluster resource metrics: capacity of the nodes not being deleted.
        outcome.cluster_resources = Some(cluster_resources(&objects.nodes, now));
        let gathered = self.gather_groups(cloud, groups, objects, now).await;
        outcome.node_groups = gathered.views.clone();

        // 3. Actionable-cluster check (only without scale-up from zero).
        if !self.options.scale_up_from_zero {
            let ready = gathered
                .objects
                .nodes
                .iter()
                .filter(|n| n.is_ready() && !n.unschedulable)
                .count();
            let problem = if gathered.objects.nodes.is_empty() {
                Some("Cluster has no nodes".to_string())
            } else if ready == 0 {
                Some("Cluster has no ready nodes".to_string())
            } else {
                None
            };
            if let Some(message) = problem {
                self.scale_down_state.clear_unneeded();
                let grace = std::time::Duration::from_secs(600);
                let started = self.started_at.unwrap_or(now);
                if gathered.objects.nodes.is_empty() || now.since(started) >= grace {
                    events.push(Event::warning(
                        EventObject::StatusConfigMap,
                        reasons::CLUSTER_UNHEALTHY,
                        message.clone(),
                    ));
                }
                outcome.ended_early = Some(EarlyEnd::NotActionable(message));
                return Ok(());
            }
        }

        // 13. Cluster-state update.
        let observations: Vec<GroupObservation> = gathered
            .views
            .iter()
            .enumerate()
            .map(|(i, view)| {
                let nodes: Vec<Arc<Node>> = gathered
                    .objects
                    .nodes
                    .iter()
                    .filter(|n| gathered.group_of_node.get(&n.name) == Some(&i))
                    .cloned()
                    .collect();
                let instances = gathered.instances.get(i).cloned().flatten();
                let known = instances.is_some();
                let mut observation =
                    GroupObservation::new(view.clone(), instances.unwrap_or_default(), nodes);
                observation.instances_known = known;
                observation
            })
            .collect();
        // GPU nodes whose GPUs have not appeared in allocatable yet are not ready
        // (docs/behaviour.md CS-102).
        self.registry.set_gpu_label(cloud.gpu_label());
        let report = timer.time("updateClusterState", || {
            self.registry.update(
                now,
                &observations,
                &gathered.objects.nodes,
                &mut self.backoff,
                &self.options,
            )
        });
        events.extend(report.events.iter().cloned());
        outcome.cluster_state = report.clone();
        let mut views = gathered.views.clone();
        for view in &mut views {
            if view.exists {
                view.healthy = view.healthy && report.group(&view.id).is_none_or(|g| g.healthy);
            }
        }

        // 4.4: revert timed-out scale-ups.
        for timed_out in &report.timed_out_scale_ups {
            if timed_out.missing == 0 {
                continue;
            }
            let delta = -(i64::try_from(timed_out.missing).unwrap_or(i64::MAX));
            let action = PlannedAction::DecreaseTargetSize {
                group_id: timed_out.group_id.clone(),
                delta,
            };
            if let Err(e) = self
                .act_decrease(&gathered.groups, &timed_out.group_id, delta)
                .await
            {
                events.push(Event::warning(
                    EventObject::StatusConfigMap,
                    reasons::FAILED_TO_REVERT_SCALE_UP,
                    format!(
                        "failed to revert the scale-up of {} by {}: {e}",
                        timed_out.group_id, timed_out.missing
                    ),
                ));
                outcome.action_errors.push((action.clone(), e));
            }
            outcome.planned_actions.push(action);
        }

        // 14. Long-unregistered instances.
        for (group_id, batch) in by_group(&report.long_unregistered_to_delete) {
            let (action, result) = self
                .delete_instances(&gathered.groups, &group_id, &batch)
                .await;
            let ids = batch
                .iter()
                .map(|i| i.instance_id.as_str())
                .collect::<Vec<_>>()
                .join(",");
            match &result {
                Ok(()) => events.push(Event::normal(
                    EventObject::StatusConfigMap,
                    reasons::DELETE_UNREGISTERED,
                    format!("Removed unregistered node(s) {ids} of group {group_id}"),
                )),
                Err(e) => events.push(Event::warning(
                    EventObject::StatusConfigMap,
                    reasons::DELETE_UNREGISTERED_FAILED,
                    format!("Failed to remove unregistered node(s) {ids} of group {group_id}: {e}"),
                )),
            }
            if let Err(e) = result {
                outcome.action_errors.push((action.clone(), e));
            }
            outcome.planned_actions.push(action);
        }

        // 15. Health gate.
        if !report.cluster_healthy {
            self.scale_down_state.clear_unneeded();
            events.extend(report.cluster_unhealthy_event());
            outcome.ended_early = Some(EarlyEnd::ClusterUnhealthy);
            return Ok(());
        }

        // 16. Instances that failed to be created.
        for (group_id, batch) in by_group(&report.failed_instances_to_delete) {
            let (action, result) = self
                .delete_instances(&gathered.groups, &group_id, &batch)
                .await;
            if let Err(e) = result {
                outcome.action_errors.push((action.clone(), e));
            }
            outcome.planned_actions.push(action);
        }

        // 17. Incorrect sizes: fix and end the iteration.
        if !report.incorrect_sizes_to_fix.is_empty() {
            let mut fixed = false;
            for fix in &report.incorrect_sizes_to_fix {
                let action = PlannedAction::DecreaseTargetSize {
                    group_id: fix.group_id.clone(),
                    delta: fix.delta,
                };
                match self
                    .act_decrease(&gathered.groups, &fix.group_id, fix.delta)
                    .await
                {
                    Ok(()) => fixed = true,
                    Err(e) => outcome.action_errors.push((action.clone(), e)),
                }
                outcome.planned_actions.push(action);
            }
            if fixed || dry_run {
                outcome.ended_early = Some(EarlyEnd::SizesFixed);
                return Ok(());
            }
        }

        // 10, 19. Snapshot: registered nodes (minus the still-starting nodes of scaling-up
        // groups, which placeholders replace) with their scheduled pods, expendable pods excluded.
        let registered_upcoming: HashSet<String> = report
            .groups
            .iter()
            .flat_map(|g| g.registered_upcoming.iter().cloned())
            .collect();
        let cutoff = self.options.expendable_pods_priority_cutoff;
        let allowed = &self.options.allowed_scheduler_names;
        let pods: Vec<&Arc<Pod>> = gathered
            .objects
            .pods
            .iter()
            .filter(|p| allowed.is_empty() || allowed.contains(&p.scheduler_name))
            .filter(|p| p.deletion_time.is_none() && !p.is_terminal())
            .collect();
        let mut base = Snapshot::new();
        for ns in &gathered.objects.namespaces {
            base.set_namespace_labels(ns.name.clone(), ns.labels.clone());
        }
        for node in &gathered.objects.nodes {
            if !registered_upcoming.contains(&node.name) {
                base.add_node(node.clone());
            }
        }
        let mut pending: Vec<Arc<Pod>> = Vec::new();
        for pod in &pods {
            match pod.node_name.as_deref() {
                Some(name) => {
                    if !pod.is_expendable(cutoff)
                        && let Some(id) = base.node_id(name)
                    {
                        base.add_pod(id, (*pod).clone());
                    }
                }
                None => pending.push((*pod).clone()),
            }
        }

        // docs/behaviour.md SU-15: recreatable pods of nodes being drained are planned for as if
        // pending.
        let draining: HashSet<String> = self
            .deletions
            .in_progress()
            .into_iter()
            .filter(|d| d.kind == RemovalKind::Drain)
            .map(|d| d.node)
            .collect();
        let draining_pods: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| p.node_name.as_ref().is_some_and(|n| draining.contains(n)))
            .filter(|p| !p.is_mirror_pod() && !p.is_daemonset_pod())
            .map(|p| {
                let mut pod = (***p).clone();
                pod.node_name = None;
                Arc::new(pod)
            })
            .collect();

        // 19-23. Scale-up on a branch with the upcoming placeholders.
        let gpu_label = cloud.gpu_label().to_string();
        let limits = cloud.resource_limits().ok().flatten();
        let provider = ProviderFacts {
            gpu_label: &gpu_label,
            resource_limits: limits.as_ref(),
        };
        // Placeholders and the pods the plan leaves placed live on a branch, discarded after.
        base.fork();
        self.inject_upcoming(&mut base, &views);
        let plan = timer.time("scaleUp", || {
            plan_scale_up(ScaleUpInput {
                now,
                snapshot: &mut base,
                pending_pods: &pending,
                draining_pods: &draining_pods,
                node_groups: &views,
                backoff: &self.backoff,
                options: &self.options,
                priority_config: gathered.objects.priority_expander_config.as_deref(),
                provider,
                seed,
            })
        });
        base.revert();
        events.extend(plan.events.iter().cloned());
        for increase in plan.increases.iter().filter(|i| i.delta() > 0) {
            outcome.planned_actions.push(PlannedAction::IncreaseSize {
                group_id: increase.group_id.clone(),
                delta: increase.delta(),
            });
        }
        if !dry_run {
            let execution = self
                .execute_increases(&plan, &gathered.groups, now, events)
                .await;
            outcome.scale_up_execution = Some(execution);
        }
        let skip_scale_down = plan.skip_scale_down_this_loop;
        outcome.scale_up = Some(plan);
        outcome.pending_pods = pending;

        // 24. Scale-down.
        if self.options.scale_down_enabled {
            self.scale_down(
                cluster,
                &gathered,
                &views,
                &mut base,
                skip_scale_down,
                provider,
                now,
                timer,
                outcome,
                events,
            )
            .await;
        }

        // 25. Min-size enforcement.
        if self.options.enforce_node_group_min_size {
            base.fork();
            self.inject_upcoming(&mut base, &views);
            let targets: Vec<NodeGroupView> = views
                .iter()
                .map(|v| {
                    let mut v = v.clone();
                    if let Some(execution) = &outcome.scale_up_execution
                        && let Some(i) = execution.succeeded.iter().find(|i| i.group_id == v.id)
                    {
                        v.target_size = i.new_target;
                    }
                    v
                })
                .collect();
            let min_plan = timer.time("scaleUp", || {
                plan_min_size_enforcement(
                    &base,
                    &targets,
                    &self.backoff,
                    now,
                    &self.options,
                    provider,
                )
            });
            base.revert();
            for increase in min_plan.increases.iter().filter(|i| i.delta() > 0) {
                outcome.planned_actions.push(PlannedAction::IncreaseSize {
                    group_id: increase.group_id.clone(),
                    delta: increase.delta(),
                });
            }
            if !dry_run {
                let execution = self
                    .execute_increases(&min_plan, &gathered.groups, now, events)
                    .await;
                outcome.min_size_execution = Some(execution);
            }
            outcome.min_size_enforcement = Some(min_plan);
        }
        Ok(())
    }

    /// Scale-down: plan, start deletions, soft taints (docs/behaviour.md LOOP-113, and the
    /// Scale-down section).
    #[allow(clippy::too_many_arguments)]
    async fn scale_down(
        &mut self,
        cluster: &dyn ClusterApi,
        gathered: &Gathered,
        views: &[NodeGroupView],
        snapshot: &mut Snapshot,
        skip_this_loop: bool,
        provider: ProviderFacts<'_>,
        now: Timestamp,
        timer: &mut DecideTimer<'_>,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) {
        let dry_run = self.options.dry_run;
        // Nominated pods count where they are going (docs/behaviour.md LOOP-111).
        let cutoff = self.options.expendable_pods_priority_cutoff;
        snapshot.fork();
        for pod in &gathered.objects.pods {
            if pod.node_name.is_none()
                && pod.deletion_time.is_none()
                && !pod.is_expendable(cutoff)
                && let Some(nominated) = pod.nominated_node_name.as_deref()
                && let Some(id) = snapshot.node_id(nominated)
            {
                let mut placed = (**pod).clone();
                placed.node_name = Some(nominated.to_string());
                snapshot.add_pod(id, Arc::new(placed));
            }
        }
        let controllers = controller_index(&gathered.objects);
        let in_progress = self.deletions.in_progress();
        let deletions = DeletionsInProgress {
            nodes: in_progress
                .iter()
                .map(|d| DeletionInProgress {
                    node: d.node.clone(),
                    group_id: d.group_id.clone(),
                    drain: d.kind == RemovalKind::Drain,
                })
                .collect(),
            recently_evicted: self.deletions.evicted_pods(),
        };
        let index: HashMap<&str, usize> = views
            .iter()
            .enumerate()
            .map(|(i, v)| (v.id.as_str(), i))
            .collect();
        // A node the provider vetoed is not a scale-down candidate this loop: like a node outside
        // every group, it is neither unneeded nor removed.
        let node_group_of = |node: &str| -> Option<usize> {
            if gathered.scale_down_vetoed.contains(node) {
                return None;
            }
            let group = gathered.group_of_node.get(node)?;
            let id = gathered.groups.get(*group)?.id();
            index.get(id).copied()
        };
        let plan = timer.time("findUnneeded", || {
            plan_scale_down(ScaleDownInput {
                now,
                snapshot: &mut *snapshot,
                node_groups: views,
                node_group_of: &node_group_of,
                pdbs: &gathered.objects.pdbs,
                controllers: &controllers,
                deletions_in_progress: &deletions,
                state: &self.scale_down_state,
                options: &self.options,
                provider: &provider,
                scale_down_disabled_this_loop: skip_this_loop,
            })
        });
        snapshot.revert();
        self.scale_down_state = plan.next_state.clone();
        events.extend(plan.events.iter().cloned());

        let nodes_by_name: HashMap<&str, &Arc<Node>> = gathered
            .objects
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n))
            .collect();
        let requests: Vec<NodeDeletion> = plan
            .empty_to_delete
            .iter()
            .map(|r| (r, RemovalKind::Empty))
            .chain(plan.drain_to_delete.iter().map(|r| (r, RemovalKind::Drain)))
            .filter_map(|(removal, kind)| {
                let node = nodes_by_name.get(removal.node.as_str())?;
                let zero_or_max = views
                    .iter()
                    .find(|v| v.id == removal.group_id)
                    .is_some_and(NodeGroupView::zero_or_max);
                Some(NodeDeletion {
                    node: (*node).clone(),
                    group_id: removal.group_id.clone(),
                    kind,
                    zero_or_max,
                    unready: !removal.ready,
                    utilization: removal.utilization.value,
                    pods_to_reschedule: removal.pods_to_evict.iter().map(|p| p.key()).collect(),
                })
            })
            .collect();
        for request in &requests {
            outcome
                .planned_actions
                .push(PlannedAction::StartNodeDeletion {
                    node: request.node.name.clone(),
                    group_id: request.group_id.clone(),
                    kind: request.kind,
                });
        }
        if !dry_run && !requests.is_empty() {
            let started_groups: Vec<String> = requests.iter().map(|r| r.group_id.clone()).collect();
            let progress = self
                .deletions
                .start(requests, cluster, now, &self.options)
                .await;
            if progress.start_error.is_some() {
                for group in &started_groups {
                    self.scale_down_state.record_failure(group, now);
                }
            } else {
                for group in &started_groups {
                    self.scale_down_state.record_deletion_start(group, now);
                }
            }
            record_progress(outcome, events, progress);
            // With no post-taint delay the deletions can go on right away.
            if self.options.node_delete_delay_after_taint.is_zero() {
                let progress = self
                    .deletions
                    .advance(
                        &gathered.groups,
                        cluster,
                        &LiveRecheck::new(&gathered.objects, now, &self.options),
                        now,
                        &self.options,
                    )
                    .await;
                self.absorb(&progress, now);
                record_progress(outcome, events, progress);
            }
        }

        // 3.9 soft taints, also in cooldown.
        for node in &plan.soft_taints_to_remove {
            outcome
                .planned_actions
                .push(PlannedAction::RemoveSoftTaint { node: node.clone() });
        }
        for node in &plan.soft_taints_to_add {
            outcome
                .planned_actions
                .push(PlannedAction::AddSoftTaint { node: node.clone() });
        }
        let nodes: Vec<&Node> = gathered.objects.nodes.iter().map(|n| n.as_ref()).collect();
        outcome.soft_taints = apply_soft_taints(
            cluster,
            &nodes,
            &plan.soft_taints_to_add,
            &plan.soft_taints_to_remove,
            now,
            &self.options,
        )
        .await;
        outcome.scale_down = Some(plan);
    }

    /// Reads the node groups: which node belongs to which, targets, instances, options and
    /// templates.
    async fn gather_groups(
        &mut self,
        cloud: &dyn CloudProvider,
        groups: Vec<Arc<dyn NodeGroup>>,
        objects: ClusterObjects,
        now: Timestamp,
    ) -> Gathered {
        // Per group, concurrently: instances, target size and options. A remote provider then
        // costs a few round trips per loop, not one per group after another.
        let per_group = futures::future::join_all(groups.iter().map(|group| async move {
            let (instances, target, options) =
                futures::join!(group.nodes(), group.target_size(), group.get_options());
            (instances.ok(), target, options.ok().flatten())
        }))
        .await;
        // A node whose providerID is an instance of a group belongs to that group; only the
        // other nodes are asked about with NodeGroupForNode (concurrently), so the calls per loop
        // grow with the nodes outside any group, not with every node.
        let mut group_of_instance: HashMap<&str, usize> = HashMap::new();
        for (i, (instances, _, _)) in per_group.iter().enumerate() {
            for instance in instances.iter().flatten() {
                group_of_instance.entry(instance.id.as_str()).or_insert(i);
            }
        }
        let mut group_of_node = HashMap::new();
        let mut unresolved = Vec::new();
        for node in &objects.nodes {
            match group_of_instance.get(node.provider_id.as_str()) {
                Some(i) if !node.provider_id.is_empty() => {
                    group_of_node.insert(node.name.clone(), *i);
                }
                _ => unresolved.push(node),
            }
        }
        let answers: Vec<_> = futures::stream::iter(unresolved)
            .map(|node| async move { (node, cloud.node_group_for_node(node).await) })
            .buffer_unordered(NODE_GROUP_LOOKUP_CONCURRENCY)
            .collect()
            .await;
        for (node, answer) in answers {
            if let Ok(Some(group)) = answer
                && let Some(i) = groups.iter().position(|g| g.id() == group.id())
            {
                group_of_node.insert(node.name.clone(), i);
            }
        }
        let mut pods_by_node: HashMap<&str, Vec<Arc<Pod>>> = HashMap::new();
        for pod in &objects.pods {
            if let Some(node) = pod.node_name.as_deref() {
                pods_by_node.entry(node).or_default().push(pod.clone());
            }
        }
        let pods_on = |node: &str| pods_by_node.get(node).cloned().unwrap_or_default();
        let ids: Vec<&str> = groups.iter().map(|g| g.id()).collect();
        self.templates.retain_groups(&ids);

        let mut views = Vec::with_capacity(groups.len());
        let mut instances = Vec::with_capacity(groups.len());
        for (i, (group, (group_instances, target, options))) in
            groups.iter().zip(per_group).enumerate()
        {
            let nodes: Vec<Arc<Node>> = objects
                .nodes
                .iter()
                .filter(|n| group_of_node.get(&n.name) == Some(&i))
                .cloned()
                .collect();
            let template = templates::choose_template(
                group.as_ref(),
                &nodes,
                &pods_on,
                &objects.daemonsets,
                &mut self.templates,
                now,
                &self.options,
            )
            .await
            .map(|(t, _)| t);
            let mut view = NodeGroupView::new(
                group.id(),
                group.min_size(),
                group.max_size(),
                target.clone().unwrap_or(0),
                template,
            );
            view.exists = group.exist();
            view.options = options.unwrap_or_default();
            // A group whose target cannot be read is not ready for scale-up.
            view.healthy = target.is_ok();
            views.push(view);
            instances.push(group_instances);
        }
        if self.options.expander.contains(&ExpanderName::Price) {
            // One price per group template and loop; a group without a price falls back to the
            // expander's estimate from the template's resources.
            let prices = futures::future::join_all(views.iter().map(|view| async move {
                match &view.template {
                    Some(template) => cloud.node_price_per_hour(&template.node, now).await.ok(),
                    None => None,
                }
            }))
            .await;
            for (view, price) in views.iter_mut().zip(prices) {
                view.price_per_hour = price;
            }
        }
        let grouped: Vec<Arc<Node>> = objects
            .nodes
            .iter()
            .filter(|n| group_of_node.contains_key(&n.name))
            .cloned()
            .collect();
        let scale_down_vetoed = if self.options.scale_down_enabled && !grouped.is_empty() {
            cloud.scale_down_vetoes(&grouped).await
        } else {
            HashSet::new()
        };
        Gathered {
            objects,
            groups,
            views,
            group_of_node,
            instances,
            scale_down_vetoed,
        }
    }

    /// Adds placeholders for every group's upcoming nodes (docs/behaviour.md LOOP-112).
    fn inject_upcoming(&self, snapshot: &mut Snapshot, views: &[NodeGroupView]) {
        for view in views {
            let upcoming = self.registry.upcoming_nodes(&view.id);
            if upcoming > 0 {
                inject_upcoming_nodes(snapshot, view, upcoming);
            }
        }
    }

    async fn act_decrease(
        &self,
        groups: &[Arc<dyn NodeGroup>],
        group_id: &str,
        delta: i64,
    ) -> Result<(), String> {
        if self.options.dry_run {
            return Ok(());
        }
        let group = groups
            .iter()
            .find(|g| g.id() == group_id)
            .ok_or_else(|| format!("node group {group_id} no longer exists"))?;
        group
            .decrease_target_size(delta)
            .await
            .map_err(|e| e.to_string())
    }

    /// Deletes instances of one group through their placeholder nodes (`ForceDeleteNodes` when
    /// asked, falling back to `DeleteNodes` when the provider does not offer it).
    async fn delete_instances(
        &self,
        groups: &[Arc<dyn NodeGroup>],
        group_id: &str,
        batch: &[&InstanceToDelete],
    ) -> (PlannedAction, Result<(), String>) {
        let force = batch.iter().any(|i| i.force);
        let action = PlannedAction::DeleteInstances {
            group_id: group_id.to_string(),
            instance_ids: batch.iter().map(|i| i.instance_id.clone()).collect(),
            force,
        };
        if self.options.dry_run {
            return (action, Ok(()));
        }
        let Some(group) = groups.iter().find(|g| g.id() == group_id) else {
            return (
                action,
                Err(format!("node group {group_id} no longer exists")),
            );
        };
        let nodes: Vec<Node> = batch.iter().map(|i| i.placeholder.clone()).collect();
        let result = if force {
            match group.force_delete_nodes(&nodes).await {
                Err(CloudError::NotImplemented) => group.delete_nodes(&nodes).await,
                other => other,
            }
        } else {
            group.delete_nodes(&nodes).await
        };
        (action, result.map_err(|e| e.to_string()))
    }
}

/// Instances grouped by node group, in first-seen order.
fn by_group(instances: &[InstanceToDelete]) -> Vec<(String, Vec<&InstanceToDelete>)> {
    let mut groups: Vec<(String, Vec<&InstanceToDelete>)> = Vec::new();
    for instance in instances {
        match groups.iter_mut().find(|(g, _)| *g == instance.group_id) {
            Some((_, batch)) => batch.push(instance),
            None => groups.push((instance.group_id.clone(), vec![instance])),
        }
    }
    groups
}

fn record_progress(
    outcome: &mut LoopOutcome,
    events: &mut Vec<Event>,
    progress: ActuationProgress,
) {
    events.extend(progress.events);
    outcome.actuation.extend(progress.reports);
    outcome.deleted_nodes.extend(progress.completed);
    outcome.failed_deletions.extend(progress.failed);
}

/// The owners that exist, with their replicas, for drainability rule 3.
fn controller_index(objects: &ClusterObjects) -> ControllerIndex {
    let mut controllers = ControllerIndex::new();
    for c in &objects.controllers {
        let replicas = c.replicas.unwrap_or(0);
        controllers.insert(
            c.kind.clone(),
            c.namespace.clone(),
            c.name.clone(),
            ControllerReplicas {
                desired: replicas,
                current: replicas,
            },
        );
    }
    controllers
}

/// docs/behaviour.md SD-89, SD-110 against live objects: an empty node must still be empty, and no
/// pod on any node may block its removal under the drainability rules with the PDBs and controllers
/// as they are now.
struct LiveRecheck<'a> {
    now: Timestamp,
    controllers: ControllerIndex,
    pdbs: &'a [ferroscale_model::PodDisruptionBudget],
    options: &'a AutoscalingOptions,
}

impl<'a> LiveRecheck<'a> {
    fn new(objects: &'a ClusterObjects, now: Timestamp, options: &'a AutoscalingOptions) -> Self {
        LiveRecheck {
            now,
            controllers: controller_index(objects),
            pdbs: &objects.pdbs,
            options,
        }
    }
}

impl RemovalRecheck for LiveRecheck<'_> {
    fn recheck(
        &self,
        node: &Node,
        kind: RemovalKind,
        live_pods: &[Arc<Pod>],
    ) -> Result<(), String> {
        EmptinessRecheck.recheck(node, kind, live_pods)?;
        match first_blocking_pod(
            live_pods,
            self.now,
            &self.controllers,
            self.pdbs,
            self.options,
        ) {
            None => Ok(()),
            Some(RecheckBlock::Blocked { pod, rule }) => Err(format!(
                "pod {pod} now blocks the removal ({})",
                rule.as_str()
            )),
            Some(RecheckBlock::WaitingForCompletion { pod }) => Err(format!(
                "pod {pod} is annotated safe-to-evict: on-completion and still running"
            )),
        }
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
