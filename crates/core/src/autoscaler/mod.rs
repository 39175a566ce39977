//! The main loop (spec 1.3): one [`Autoscaler::run_once`] per iteration, in upstream order —
//! gather from the cloud and the cluster, decide with the pure planners, act through the
//! [`CloudProvider`] and [`ClusterApi`] traits, and report what happened in a [`LoopOutcome`].
//!
//! The core never reads the clock: the caller passes the loop's `now` and a [`Stopwatch`] that
//! measures the time spent in the pure planning calls.

mod recorder;

use std::sync::Arc;

use ferroscale_model::{Pod, Timestamp};
use ferroscale_scheduling::Snapshot;

use crate::actuation::DeletionTracker;
use crate::backoff::NodeGroupBackoff;
use crate::cloud::{CloudError, CloudProvider, NodeGroup};
use crate::events::Event;
use crate::kubernetes::{ClusterApi, ClusterError};
use crate::options::AutoscalingOptions;
use crate::scale_up::{
    NodeGroupView, ProviderFacts, ScaleUpExecution, ScaleUpInput, ScaleUpPlan, execute_scale_up,
    inject_upcoming_nodes, plan_scale_up,
};
pub use recorder::{EVENT_REPEAT_INTERVAL, EventRecorder};

/// Measures elapsed time for the caller; the core has no clock of its own.
pub trait Stopwatch {
    /// Milliseconds since an arbitrary origin fixed by the implementation.
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

/// Why an iteration ended before reaching scale-down.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoopError {
    #[error("cloud provider refresh failed: {0}")]
    Refresh(CloudError),
    #[error("listing node groups failed: {0}")]
    NodeGroups(CloudError),
    #[error("reading the cluster failed: {0}")]
    Gather(ClusterError),
}

/// Everything one iteration decided and did.
#[derive(Debug, Clone, Default)]
pub struct LoopOutcome {
    pub now: Timestamp,
    /// Set when the iteration stopped on an error (not counted: unhealthy cluster, size fixes).
    pub error: Option<LoopError>,
    pub scale_up: Option<ScaleUpPlan>,
    pub scale_up_execution: Option<ScaleUpExecution>,
    /// Every event of the iteration, as published (after deduplication).
    pub events: Vec<Event>,
    /// Time spent in the pure planning calls, as measured by the caller's stopwatch.
    pub decide_millis: f64,
    /// Pending pods handed to the scale-up plan.
    pub pending_pods: Vec<Arc<Pod>>,
    /// Node groups as gathered, in provider order.
    pub node_groups: Vec<NodeGroupView>,
}

/// The autoscaler's memory across iterations.
pub struct Autoscaler {
    options: AutoscalingOptions,
    seed: u64,
    backoff: NodeGroupBackoff,
    deletions: DeletionTracker,
    first_loop_done: bool,
    iterations: u64,
}

impl Autoscaler {
    pub fn new(options: AutoscalingOptions, seed: u64) -> Autoscaler {
        Autoscaler {
            backoff: NodeGroupBackoff::from_options(&options),
            options,
            seed,
            deletions: DeletionTracker::new(),
            first_loop_done: false,
            iterations: 0,
        }
    }

    pub fn options(&self) -> &AutoscalingOptions {
        &self.options
    }

    pub fn backoff(&self) -> &NodeGroupBackoff {
        &self.backoff
    }

    pub fn deletions(&self) -> &DeletionTracker {
        &self.deletions
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
            ..LoopOutcome::default()
        };
        let seed = self.seed.wrapping_add(self.iterations);
        self.iterations += 1;
        self.first_loop_done = true;

        let objects = match cluster.gather().await {
            Ok(objects) => objects,
            Err(e) => {
                outcome.error = Some(LoopError::Gather(e));
                return outcome;
            }
        };
        if let Err(e) = cloud.refresh().await {
            outcome.error = Some(LoopError::Refresh(e));
            return outcome;
        }
        let groups: Vec<Arc<dyn NodeGroup>> = match cloud.node_groups().await {
            Ok(groups) => groups,
            Err(e) => {
                outcome.error = Some(LoopError::NodeGroups(e));
                return outcome;
            }
        };

        let mut views = Vec::with_capacity(groups.len());
        let mut registered = vec![0usize; groups.len()];
        for node in &objects.nodes {
            if let Ok(Some(group)) = cloud.node_group_for_node(node).await
                && let Some(i) = groups.iter().position(|g| g.id() == group.id())
            {
                registered[i] += 1;
            }
        }
        for group in &groups {
            let target = group.target_size().await;
            let mut view = NodeGroupView::new(
                group.id(),
                group.min_size(),
                group.max_size(),
                target.clone().unwrap_or(0),
                group.template_node_info().await.ok(),
            );
            view.options = group.get_options().await.ok().flatten().unwrap_or_default();
            view.healthy = target.is_ok();
            views.push(view);
        }

        let mut snapshot = Snapshot::new();
        for ns in &objects.namespaces {
            snapshot.set_namespace_labels(ns.name.clone(), ns.labels.clone());
        }
        for node in &objects.nodes {
            snapshot.add_node(node.clone());
        }
        let cutoff = self.options.expendable_pods_priority_cutoff;
        let mut pending = Vec::new();
        for pod in &objects.pods {
            if pod.is_terminal() || pod.deletion_time.is_some() {
                continue;
            }
            match pod.node_name.as_deref() {
                Some(name) => {
                    if !pod.is_expendable(cutoff)
                        && let Some(id) = snapshot.node_id(name)
                    {
                        snapshot.add_pod(id, pod.clone());
                    }
                }
                None => pending.push(pod.clone()),
            }
        }
        for (view, registered) in views.iter().zip(&registered) {
            let upcoming = view.target_size.saturating_sub(*registered);
            if upcoming > 0 && !self.backoff.is_backed_off(&view.id, now) {
                inject_upcoming_nodes(&mut snapshot, view, upcoming);
            }
        }

        let started = stopwatch.elapsed_millis();
        let plan = plan_scale_up(ScaleUpInput {
            now,
            snapshot: &mut snapshot,
            pending_pods: &pending,
            draining_pods: &[],
            node_groups: &views,
            backoff: &self.backoff,
            options: &self.options,
            priority_config: objects.priority_expander_config.as_deref(),
            provider: ProviderFacts {
                gpu_label: cloud.gpu_label(),
                resource_limits: None,
            },
            seed,
        });
        outcome.decide_millis += stopwatch.elapsed_millis() - started;

        let execution = if self.options.dry_run {
            None
        } else {
            Some(execute_scale_up(&plan, &groups, &mut self.backoff, now, &self.options).await)
        };
        outcome.events.extend(plan.events.iter().cloned());
        if let Some(execution) = &execution {
            outcome.events.extend(execution.events.iter().cloned());
        }
        cluster.publish_events(&outcome.events).await;
        outcome.scale_up = Some(plan);
        outcome.scale_up_execution = execution;
        outcome.pending_pods = pending;
        outcome.node_groups = views;
        outcome
    }
}
