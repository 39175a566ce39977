//! One iteration, stage by stage (docs/behaviour.md LOOP-106): what is owed from earlier
//! iterations, the cloud's refresh and the deletions in progress, gather, the actionable-cluster
//! check, the cluster-state update and the repairs it asks for, the snapshot, scale-up,
//! scale-down, min-size enforcement. Each stage is a method with its own inputs; the calls that
//! change the cloud or the cluster are `crate::act`'s, and the bookkeeping of what they did (the
//! registry, the scale-down state, the outcome) is the loop's.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ferroscale_model::{Pod, Timestamp};
use ferroscale_scheduling::Snapshot;

use crate::act::ActRecord;
use crate::act::deletions::{
    ActuationProgress, DeletionTarget, LiveRecheck, NodeDeletion, RemovalKind,
    apply_plan_soft_taints, clean_up_leftover_taints, deletion_requests, planned_starts,
    start_deletions,
};
use crate::act::repairs::Repairs;
use crate::act::scale_up::ScaleUpExecution;
use crate::act::scale_up::increase_sizes;
use crate::cloud::{CloudProvider, NodeGroup};
use crate::cluster_state::{ClusterStateReport, ReadinessRules};
use crate::events::{Event, EventObject, reasons};
use crate::kubernetes::{ClusterApi, WorkloadController};
use crate::scale_down::{
    ControllerIndex, DeletionInProgress, DeletionsInProgress, ScaleDownInput, ScaleDownPlan,
    plan_scale_down,
};
use crate::scale_up::{
    BoundPodsOfControllers, ExternalExpanderStep, FakePods, INJECTION_BACKOFF, NodeGroupView,
    ProviderFacts, ScaleUpInput, ScaleUpPlan, plan_min_size_enforcement, plan_scale_up,
    proactive_fake_pods,
};
use crate::stopwatch::Stopwatch;
use ferroscale_capacity::buffers::Injection;

use super::gather::{self, Gathered};
use super::kept::{LoopView, ViewInput};
use super::provisioning::{RequestsInput, RequestsTurn};
use super::salvo::SalvoStart;
use super::{
    Autoscaler, DecideTimer, EarlyEnd, LoopError, LoopOutcome, cluster_resources,
    group_accelerators,
};

/// What the scale-up, scale-down and min-size stages read besides the snapshot.
#[derive(Clone, Copy)]
pub(super) struct Stage<'a> {
    pub(super) gathered: &'a Gathered,
    /// The controllers' bound pods among the gathered ones, kept with the snapshot.
    pub(super) bound_of_controllers: &'a BoundPodsOfControllers,
    /// The node groups with this iteration's health.
    pub(super) views: &'a [NodeGroupView],
    /// Scale-up asked to skip scale-down this loop.
    pub(super) skip_this_loop: bool,
    pub(super) provider: ProviderFacts<'a>,
    pub(super) now: Timestamp,
}

/// The loop's view after gather and the cluster-state update.
struct Assessed {
    report: ClusterStateReport,
    /// The node groups with this iteration's health.
    views: Vec<NodeGroupView>,
}

/// The pods this loop's scale-up plans for beyond the pending ones.
struct ExtraPods {
    /// Proactive scale-up's fake pods (docs/behaviour.md SU-110).
    fakes: Vec<Arc<Pod>>,
    /// CapacityBuffers' virtual pods (docs/capacity-buffers.md CB-108).
    buffers: Injection,
}

impl LoopOutcome {
    /// Takes in what an act step did: its calls and failures here, its events in `events`.
    pub(super) fn absorb(&mut self, record: ActRecord, events: &mut Vec<Event>) {
        self.planned_actions.extend(record.planned_actions);
        self.action_errors.extend(record.action_errors);
        events.extend(record.events);
    }

    /// Takes in what the deletions in progress did.
    pub(super) fn absorb_progress(&mut self, progress: ActuationProgress, events: &mut Vec<Event>) {
        events.extend(progress.events);
        self.actuation.extend(progress.reports);
        self.deleted_nodes.extend(progress.completed);
        self.failed_deletions.extend(progress.failed);
    }
}

impl Autoscaler {
    /// The iteration up to (not including) the status report.
    pub(super) async fn iterate(
        &mut self,
        cloud: &dyn CloudProvider,
        cluster: &dyn ClusterApi,
        now: Timestamp,
        timer: &mut DecideTimer<'_>,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) -> Result<(), LoopError> {
        let seed = self.seed.wrapping_add(self.iterations);
        self.settle_earlier_work(cloud, cluster, now, outcome, events)
            .await?;
        // Refresh the cloud's view, then move running deletions forward so the snapshot
        // gathered below sees their effects.
        timer
            .time_call("cloudProviderRefresh", cloud.refresh())
            .await
            .map_err(LoopError::Refresh)?;
        let groups = cloud.node_groups().await.map_err(LoopError::NodeGroups)?;
        self.advance_deletions(cluster, &groups, now, outcome, events)
            .await;
        let mut gathered = self.gather(cloud, cluster, groups, now, outcome).await?;
        // The CapacityBuffer controller (docs/capacity-buffers.md CB-101).
        self.reconcile_buffers(cluster, &mut gathered.objects.capacity, now, events)
            .await;
        if let Some(end) = self.not_actionable(&gathered, now, events) {
            outcome.ended_early = Some(end);
            return Ok(());
        }
        let Assessed { report, views } =
            self.update_cluster_state(cloud, &mut gathered, now, timer, outcome, events);
        if let Some(end) = self
            .repair(&gathered.groups, &report, outcome, events)
            .await
        {
            outcome.ended_early = Some(end);
            return Ok(());
        }
        // The kept snapshot is taken out for the loop (its branch borrows it while the stages
        // borrow the autoscaler) and put back when the branch is gone.
        let mut kept = std::mem::take(&mut self.kept);
        let draining = self.draining_nodes();
        let view = ViewInput {
            report: &report,
            views: &views,
            draining: &draining,
        };
        let (
            refresh,
            LoopView {
                snapshot: mut base,
                mut pending,
                draining_pods,
                bound_of_controllers,
            },
        ) = kept.open(&gathered.objects, &self.options, view);
        outcome.snapshot_refresh = Some(refresh);
        let gpu_label = cloud.gpu_label().to_string();
        let provider = ProviderFacts {
            gpu_label: &gpu_label,
            resource_limits: gathered.resource_limits.as_ref(),
            capacity_quotas: &gathered.objects.capacity.quotas,
        };
        let step = Stage {
            gathered: &gathered,
            bound_of_controllers,
            views: &views,
            skip_this_loop: false,
            provider,
            now,
        };
        let skip_scale_down = self
            .scale_up(
                cluster,
                step,
                seed,
                &mut base,
                &mut pending,
                &draining_pods,
                timer,
                outcome,
                events,
            )
            .await;
        outcome.pending_pods = pending;
        let step = Stage {
            skip_this_loop: skip_scale_down,
            ..step
        };
        self.scale_down_unless_behind(cloud, cluster, step, &mut base, timer, outcome, events)
            .await;
        self.enforce_min_size(step, &base, timer, outcome, events)
            .await;
        // Undoes the loop's placeholders and simulations: the base is the cluster again.
        drop(base);
        kept.close(gathered.objects.pods.clone());
        self.kept = kept;
        Ok(())
    }

    /// What earlier iterations or processes left: taints an earlier rollback or clean-up could
    /// not remove (docs/behaviour.md SD-120), and on the first iteration the deletion taints an
    /// earlier process left behind; until the nodes can be read that clean-up is tried again
    /// every iteration (docs/behaviour.md LOOP-91).
    async fn settle_earlier_work(
        &mut self,
        cloud: &dyn CloudProvider,
        cluster: &dyn ClusterApi,
        now: Timestamp,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) -> Result<(), LoopError> {
        if !self.options.dry_run && !self.deletions.owed_untaints().is_empty() {
            let settled = self.deletions.settle_owed_untaints(cluster).await;
            events.extend(settled.events);
        }
        if !self.first_loop_done {
            let nodes = cluster.gather_nodes().await.map_err(LoopError::Gather)?;
            let record = clean_up_leftover_taints(
                cloud,
                cluster,
                &mut self.deletions,
                &nodes,
                now,
                &self.options,
            )
            .await;
            outcome.absorb(record, events);
            self.first_loop_done = true;
        }
        outcome.untaints_owed = self.deletions.owed_untaints().nodes();
        Ok(())
    }

    /// Moves the deletions in progress forward against fresh objects for the drainability
    /// re-check (docs/behaviour.md SD-110). If they cannot be read, or the view may be behind
    /// the cluster (docs/behaviour.md LOOP-121), the deletions wait: when in doubt, no node is
    /// removed.
    async fn advance_deletions(
        &mut self,
        cluster: &dyn ClusterApi,
        groups: &[Arc<dyn NodeGroup>],
        now: Timestamp,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) {
        if self.options.dry_run || self.deletions.is_idle() {
            return;
        }
        if let Ok(fresh) = cluster.gather().await
            && fresh.behind.is_empty()
        {
            let recheck = LiveRecheck::new(&fresh, now, &self.options);
            let progress = self
                .deletions
                .advance(groups, cluster, &recheck, now, &self.options)
                .await;
            self.absorb(&progress, now);
            outcome.absorb_progress(progress, events);
        }
    }

    /// Gather: the cluster's objects and the node groups, with what the outcome reports of them.
    async fn gather(
        &mut self,
        cloud: &dyn CloudProvider,
        cluster: &dyn ClusterApi,
        groups: Vec<Arc<dyn NodeGroup>>,
        now: Timestamp,
        outcome: &mut LoopOutcome,
    ) -> Result<Gathered, LoopError> {
        let objects = cluster.gather().await.map_err(LoopError::Gather)?;
        outcome.caches_behind = objects.behind.clone();
        outcome.missing_permissions = objects.missing_permissions.clone();
        // Cluster resource metrics (docs/behaviour.md LOOP-110): capacity of the nodes not being
        // deleted.
        outcome.cluster_resources = Some(cluster_resources(&objects.nodes, now));
        let gathered = gather::gather_groups(
            cloud,
            groups,
            objects,
            &mut self.templates,
            &mut self.example_pods,
            now,
            &self.options,
        )
        .await;
        outcome.node_groups = gathered.views.clone();
        outcome.gather_failures = gathered.failures.clone();
        outcome.group_accelerators = group_accelerators(cloud, &gathered.views);
        outcome.node_taints = ReadinessRules::from_options(&self.options, cloud.gpu_label())
            .count_taints(gathered.objects.nodes.iter().map(|node| node.as_ref()));
        if self.capturing {
            outcome.capture = Some(Arc::new(gathered.capture(now, &self.options)));
        }
        Ok(gathered)
    }

    /// The actionable-cluster check (docs/behaviour.md LOOP-108), only without scale-up from
    /// zero: a cluster with no nodes, or no ready ones, ends the iteration.
    fn not_actionable(
        &mut self,
        gathered: &Gathered,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Option<EarlyEnd> {
        if self.options.scale_up_from_zero {
            return None;
        }
        let nodes = &gathered.objects.nodes;
        let ready = nodes
            .iter()
            .filter(|n| n.is_ready() && !n.unschedulable)
            .count();
        let message = if nodes.is_empty() {
            "Cluster has no nodes".to_string()
        } else if ready == 0 {
            "Cluster has no ready nodes".to_string()
        } else {
            return None;
        };
        self.scale_down_state.clear_unneeded();
        let grace = std::time::Duration::from_secs(600);
        let started = self.started_at.unwrap_or(now);
        if nodes.is_empty() || now.since(started) >= grace {
            events.push(Event::warning(
                EventObject::StatusConfigMap,
                reasons::CLUSTER_UNHEALTHY,
                message.clone(),
            ));
        }
        Some(EarlyEnd::NotActionable(message))
    }

    /// The cluster-state update: the registry's report, and the node groups with this
    /// iteration's health. GPU nodes whose GPUs have not appeared in allocatable yet are not
    /// ready (docs/behaviour.md CS-102).
    fn update_cluster_state(
        &mut self,
        cloud: &dyn CloudProvider,
        gathered: &mut Gathered,
        now: Timestamp,
        timer: &mut DecideTimer<'_>,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) -> Assessed {
        let observations = gathered.take_observations();
        self.registry.set_gpu_label(cloud.gpu_label());
        self.registry
            .set_lookup_failed_nodes(gathered.lookup_failed_nodes());
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
        Assessed { report, views }
    }

    /// What the report asks for, in upstream order: revert timed-out scale-ups and delete
    /// long-unregistered instances (docs/behaviour.md CS-45, CS-46), the health gate (CS-64),
    /// delete instances that failed to be created, fix incorrect sizes (CS-47). The gate and a
    /// fixed size end the iteration.
    async fn repair(
        &mut self,
        groups: &[Arc<dyn NodeGroup>],
        report: &ClusterStateReport,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) -> Option<EarlyEnd> {
        let repairs = Repairs {
            groups,
            report,
            dry_run: self.options.dry_run,
        };
        outcome.absorb(repairs.revert_timed_out_scale_ups().await, events);
        outcome.absorb(repairs.delete_long_unregistered().await, events);
        if !report.cluster_healthy {
            self.scale_down_state.clear_unneeded();
            events.extend(report.cluster_unhealthy_event());
            return Some(EarlyEnd::ClusterUnhealthy);
        }
        outcome.absorb(repairs.delete_failed_instances().await, events);
        let (record, ends) = repairs.fix_incorrect_sizes().await;
        outcome.absorb(record, events);
        ends.then_some(EarlyEnd::SizesFixed)
    }

    /// The nodes whose scale-down deletion drains them: their recreatable pods are planned for
    /// as if pending (docs/behaviour.md SU-15).
    fn draining_nodes(&self) -> HashSet<String> {
        self.deletions
            .in_progress()
            .into_iter()
            .filter(|d| d.kind == RemovalKind::Drain)
            .map(|d| d.node)
            .collect()
    }

    /// Scale-up: the plan (or a ProvisioningRequests turn's), its execution, salvo rounds, and
    /// the backoff of controllers whose fake pods were not helped. Whether scale-down is skipped
    /// this loop.
    ///
    /// The upcoming placeholders, and the pods the plan places (nominated pods, and pods that
    /// fit existing or upcoming nodes), stay in the snapshot for the rest of the loop, as
    /// upstream keeps them: scale-down then counts a node that pending pods will land on as
    /// used, even while the scheduler has not bound them (stopped, slow or behind a burst).
    #[allow(clippy::too_many_arguments)]
    async fn scale_up(
        &mut self,
        cluster: &dyn ClusterApi,
        step: Stage<'_>,
        seed: u64,
        base: &mut Snapshot,
        pending: &mut Vec<Arc<Pod>>,
        draining_pods: &[Arc<Pod>],
        timer: &mut DecideTimer<'_>,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) -> bool {
        let Stage {
            gathered,
            bound_of_controllers,
            views,
            provider,
            now,
            ..
        } = step;
        // ProvisioningRequests (docs/provisioning-requests.md): bookings, consumer pods, and on a
        // request turn the plan executed in place of the ordinary one.
        let requests = RequestsInput {
            gathered,
            views,
            provider,
            now,
            seed,
        };
        let mut requests = self
            .provisioning_requests(cluster, requests, base, pending, timer, outcome, events)
            .await;
        let extra = self
            .extra_pods(
                cluster,
                gathered,
                bound_of_controllers,
                base,
                pending,
                requests.is_some(),
                now,
                events,
            )
            .await;
        let planned_pods: Cow<'_, [Arc<Pod>]> =
            if extra.fakes.is_empty() && extra.buffers.pods.is_empty() {
                Cow::Borrowed(pending.as_slice())
            } else {
                let more = extra.buffers.pods.iter().chain(&extra.fakes);
                pending.iter().chain(more).cloned().collect()
            };
        let input = PlanInput {
            step,
            seed,
            pending: &planned_pods,
            draining: draining_pods,
        };
        let plan = match &mut requests {
            Some(turn) => turn.take_plan(),
            None => self.plan_scale_up(input, base, timer, events).await,
        };
        events.extend(plan.events.iter().cloned());
        outcome.scale_up_execution = self
            .execute_increases(&plan, &gathered.groups, now, outcome, events)
            .await;
        self.follow_up_scale_up(
            cluster, input, requests, &plan, base, timer, outcome, events,
        )
        .await;
        if !extra.fakes.is_empty() {
            self.back_off_unhelped_controllers(&extra.fakes, &plan, now, outcome, events);
        }
        self.report_buffer_pods(cluster, &extra.buffers, base, events)
            .await;
        let skip_scale_down = plan.skip_scale_down_this_loop;
        outcome.scale_up = Some(plan);
        skip_scale_down
    }

    /// The pods scale-up plans for beyond the pending ones. Proactive scale-up
    /// (docs/behaviour.md SU-110): fake pods for the replicas controllers have not created yet
    /// join the pending pods of this plan only, and their own copies of their sample's claims
    /// join the snapshot for the rest of the loop (docs/dra.md DRA-134), like the fakes placed on
    /// nodes; a controller whose fake pods could not be helped gets none for a while, as
    /// upstream. CapacityBuffers' virtual pods join them too (docs/capacity-buffers.md CB-108).
    #[allow(clippy::too_many_arguments)]
    async fn extra_pods(
        &mut self,
        cluster: &dyn ClusterApi,
        gathered: &Gathered,
        bound_of_controllers: &BoundPodsOfControllers,
        base: &mut Snapshot,
        pending: &[Arc<Pod>],
        requests_turn: bool,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> ExtraPods {
        self.injection_backoff.retain(|_, until| *until > now);
        let FakePods {
            pods: fakes,
            claims: fake_claims,
        } = if self.options.enable_proactive_scaleup && !requests_turn {
            let controllers: Vec<WorkloadController> = gathered
                .objects
                .controllers
                .iter()
                .filter(|c| !self.injection_backoff.contains_key(&c.uid))
                .cloned()
                .collect();
            proactive_fake_pods(
                &controllers,
                bound_of_controllers,
                pending,
                &gathered.objects.dra.claims,
                self.options.pod_injection_limit,
            )
        } else {
            FakePods::default()
        };
        if !fake_claims.is_empty() {
            base.add_resource_claims(fake_claims);
        }
        let buffers = self
            .inject_buffer_pods(cluster, &gathered.objects.capacity, now, events)
            .await;
        ExtraPods { fakes, buffers }
    }

    /// The ordinary scale-up plan. With `grpc` in the chain, a first plan on a throw-away
    /// branch finds what to ask the external expander (docs/grpc-expander.md GX-101).
    async fn plan_scale_up(
        &self,
        input: PlanInput<'_, '_>,
        base: &mut Snapshot,
        timer: &mut DecideTimer<'_>,
        events: &mut Vec<Event>,
    ) -> ScaleUpPlan {
        let query = if self.external_expander_wanted() {
            timer.time("scaleUp", || {
                self.scale_up_plan(input, &mut base.branch(), ExternalExpanderStep::Ask)
                    .external_query
            })
        } else {
            None
        };
        let external_answer = self.external_expander_answer(query, events).await;
        let external_step = external_answer
            .as_ref()
            .map_or(ExternalExpanderStep::Skip, ExternalExpanderStep::Answer);
        timer.time("scaleUp", || self.scale_up_plan(input, base, external_step))
    }

    /// Decide: one scale-up plan on `snapshot`.
    fn scale_up_plan(
        &self,
        input: PlanInput<'_, '_>,
        snapshot: &mut Snapshot,
        external_expander: ExternalExpanderStep<'_>,
    ) -> ScaleUpPlan {
        let step = input.step;
        // Poisoned only by a panic mid-grouping; a fresh memo is then as good.
        let mut equivalence = self
            .equivalence
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        plan_scale_up(ScaleUpInput {
            now: step.now,
            snapshot,
            pending_pods: input.pending,
            draining_pods: input.draining,
            node_groups: step.views,
            backoff: &self.backoff,
            options: &self.options,
            priority_config: step.gathered.objects.priority_expander_config.as_deref(),
            provider: step.provider,
            seed: input.seed,
            external_expander,
            all_or_nothing: false,
            workers: &self.workers,
            equivalence: Some(&mut equivalence),
        })
    }

    /// After the first scale-up: a ProvisioningRequests turn is finished with its execution,
    /// or, with `--salvo-scale-up`, further rounds plan for what the first left.
    #[allow(clippy::too_many_arguments)]
    async fn follow_up_scale_up(
        &mut self,
        cluster: &dyn ClusterApi,
        input: PlanInput<'_, '_>,
        requests: Option<RequestsTurn>,
        plan: &ScaleUpPlan,
        base: &mut Snapshot,
        timer: &mut DecideTimer<'_>,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) {
        let now = input.step.now;
        if let Some(turn) = requests {
            let execution = outcome.scale_up_execution.clone();
            self.finish_requests_turn(cluster, turn, execution.as_ref(), now, outcome, events)
                .await;
        } else if self.options.salvo_scale_up {
            let start = SalvoStart {
                now,
                gathered: input.step.gathered,
                views: input.step.views,
                pending: input.pending,
                draining: input.draining,
                provider: input.step.provider,
                seed: input.seed,
            };
            self.salvo_scale_ups(start, plan, base, timer, outcome, events)
                .await;
        }
    }

    /// The controllers of fake pods the last round could not help are backed off; fake pods
    /// exist only in this plan, so no event names them.
    fn back_off_unhelped_controllers(
        &mut self,
        fakes: &[Arc<Pod>],
        plan: &ScaleUpPlan,
        now: Timestamp,
        outcome: &LoopOutcome,
        events: &mut Vec<Event>,
    ) {
        let owner_of: HashMap<String, String> = fakes
            .iter()
            .filter_map(|p| p.controller().map(|o| (p.key(), o.uid.clone())))
            .collect();
        let last = outcome.salvo_rounds.last().unwrap_or(plan);
        for verdict in &last.pods_not_helped {
            if let Some(uid) = owner_of.get(&verdict.pod) {
                self.injection_backoff
                    .insert(uid.clone(), now + INJECTION_BACKOFF);
            }
        }
        let fake_keys: HashSet<String> = fakes.iter().map(|p| p.key()).collect();
        events.retain(|e| !matches!(&e.object, EventObject::Pod(key) if fake_keys.contains(key)));
    }

    /// Acts on a plan of group increases (scale-up or min-size enforcement) and registers each
    /// success as a scale-up request and a scale-down cooldown start. In dry-run mode the
    /// resizes are only listed, and there is no execution.
    pub(super) async fn execute_increases(
        &mut self,
        plan: &ScaleUpPlan,
        groups: &[Arc<dyn NodeGroup>],
        now: Timestamp,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) -> Option<ScaleUpExecution> {
        let (record, execution) =
            increase_sizes(plan, groups, &mut self.backoff, now, &self.options).await;
        for increase in execution.iter().flat_map(|e| &e.succeeded) {
            self.registry
                .register_scale_up(&increase.group_id, increase.delta(), now);
            self.scale_down_state
                .record_scale_up(&increase.group_id, now);
        }
        outcome.absorb(record, events);
        execution
    }

    /// Scale-down, never on a view that may be behind the cluster (docs/behaviour.md
    /// LOOP-121): what made a node look unneeded may be old news, so its timer starts over
    /// once the view is current again.
    #[allow(clippy::too_many_arguments)]
    async fn scale_down_unless_behind(
        &mut self,
        cloud: &dyn CloudProvider,
        cluster: &dyn ClusterApi,
        step: Stage<'_>,
        snapshot: &mut Snapshot,
        timer: &mut DecideTimer<'_>,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) {
        if !self.options.scale_down_enabled {
            return;
        }
        if !outcome.caches_behind.is_empty() {
            self.scale_down_state.clear_unneeded();
            return;
        }
        let plan = self.decide_scale_down(&step, snapshot, timer);
        events.extend(plan.events.iter().cloned());
        self.start_deletions(
            cloud,
            cluster,
            &step,
            &plan,
            timer.stopwatch,
            outcome,
            events,
        )
        .await;
        let nodes = &step.gathered.objects.nodes;
        let (record, soft_taints) =
            apply_plan_soft_taints(cluster, nodes, &plan, step.now, &self.options).await;
        outcome.absorb(record, events);
        outcome.soft_taints = soft_taints;
        outcome.scale_down = Some(plan);
    }

    /// Decide: this loop's scale-down plan, on the snapshot as scale-up left it (pending pods
    /// placed where they fit; nominated pods already count where they are going,
    /// docs/behaviour.md LOOP-111). Keeps the plan's next scale-down state.
    fn decide_scale_down(
        &mut self,
        step: &Stage<'_>,
        snapshot: &mut Snapshot,
        timer: &mut DecideTimer<'_>,
    ) -> ScaleDownPlan {
        let Stage {
            gathered,
            views,
            provider,
            now,
            ..
        } = *step;
        let controllers = ControllerIndex::of(&gathered.objects.controllers);
        let deletions = self.deletions_in_progress();
        // Each gathered group's index among the views, found once per group rather than once
        // per node.
        let index: HashMap<&str, usize> = views
            .iter()
            .enumerate()
            .map(|(i, v)| (v.id.as_str(), i))
            .collect();
        let view_of_group: Vec<Option<usize>> = gathered
            .groups
            .iter()
            .map(|group| index.get(group.id()).copied())
            .collect();
        // A node the provider vetoed is not a scale-down candidate this loop: like a node outside
        // every group, it is neither unneeded nor removed.
        let finder = gathered.group_finder();
        let node_group_of = |node: &ferroscale_model::Node| -> Option<usize> {
            if gathered.scale_down_vetoed.contains(&node.name) {
                return None;
            }
            let group = finder.group_of(node)?;
            view_of_group.get(group).copied().flatten()
        };
        let measure_memo = &mut self.measure_memo;
        let plan = timer.time("findUnneeded", || {
            plan_scale_down(ScaleDownInput {
                now,
                snapshot,
                node_groups: views,
                node_group_of: &node_group_of,
                pdbs: &gathered.objects.pdbs,
                controllers: &controllers,
                deletions_in_progress: &deletions,
                state: &self.scale_down_state,
                options: &self.options,
                provider: &provider,
                scale_down_disabled_this_loop: step.skip_this_loop,
                workers: &self.workers,
                measure_memo: Some(measure_memo),
            })
        });
        self.scale_down_state = plan.next_state.clone();
        plan
    }

    /// The deletions in progress as scale-down's decision sees them.
    fn deletions_in_progress(&self) -> DeletionsInProgress {
        DeletionsInProgress {
            nodes: self
                .deletions
                .in_progress()
                .iter()
                .map(|d| DeletionInProgress {
                    node: d.node.clone(),
                    group_id: d.group_id.clone(),
                    drain: d.kind == RemovalKind::Drain,
                })
                .collect(),
            recently_evicted: self.deletions.evicted_pods(),
        }
    }

    /// Starts the deletions the scale-down plan chose, and keeps the books: the accelerator
    /// labels of the nodes, the scale-down cooldown or failure of their groups, and what the
    /// deletions did.
    #[allow(clippy::too_many_arguments)]
    async fn start_deletions(
        &mut self,
        cloud: &dyn CloudProvider,
        cluster: &dyn ClusterApi,
        step: &Stage<'_>,
        plan: &ScaleDownPlan,
        clock: &dyn Stopwatch,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) {
        let (gathered, now) = (step.gathered, step.now);
        let requests = deletion_requests(plan, &gathered.objects.nodes, step.views);
        outcome.absorb(planned_starts(&requests), events);
        if self.options.dry_run || requests.is_empty() {
            return;
        }
        self.remember_accelerators(cloud, step, &requests);
        let started_groups: Vec<String> = requests.iter().map(|r| r.group_id.clone()).collect();
        let recheck = LiveRecheck::new(&gathered.objects, now, &self.options);
        let target = DeletionTarget {
            groups: &gathered.groups,
            cluster,
            recheck: &recheck,
        };
        let started = start_deletions(
            &mut self.deletions,
            requests,
            target,
            now,
            &self.options,
            clock,
        )
        .await;
        for group in &started_groups {
            if started.started.start_error.is_some() {
                self.scale_down_state.record_failure(group, now);
            } else {
                self.scale_down_state.record_deletion_start(group, now);
            }
        }
        outcome.absorb_progress(started.started, events);
        if let Some(progress) = started.advanced {
            self.absorb(&progress, now);
            outcome.absorb_progress(progress, events);
        }
    }

    /// The accelerator labels of the nodes whose deletion starts, for the scale-down counters of
    /// the iteration that sees them go (docs/behaviour.md OBS-123): the node, its group's
    /// template and its own ResourceSlices, as they are now.
    fn remember_accelerators(
        &mut self,
        cloud: &dyn CloudProvider,
        step: &Stage<'_>,
        requests: &[NodeDeletion],
    ) {
        let available = cloud.available_gpu_types();
        let local_slices: Vec<&ferroscale_model::dra::ResourceSlice> = step
            .gathered
            .objects
            .dra
            .slices
            .iter()
            .filter(|slice| matches!(slice.scope, ferroscale_model::dra::DeviceScope::Node(_)))
            .map(|slice| slice.as_ref())
            .collect();
        for request in requests {
            let template = step
                .views
                .iter()
                .find(|view| view.id == request.group_id)
                .and_then(|view| view.template.as_ref())
                .map(|template| &template.node);
            let gpu = cloud.node_gpu_config(&request.node);
            let labels = crate::accelerators::AcceleratorLabels::of(
                &request.node,
                gpu.as_ref(),
                &available,
                template,
                &local_slices,
            );
            self.deletion_accelerators
                .insert(request.node.name.clone(), labels);
        }
    }

    /// Min-size enforcement (the snapshot holds the upcoming placeholders already). Salvo
    /// rounds may have grown a group more than once: the last target wins.
    async fn enforce_min_size(
        &mut self,
        step: Stage<'_>,
        base: &Snapshot,
        timer: &mut DecideTimer<'_>,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) {
        if !self.options.enforce_node_group_min_size {
            return;
        }
        let targets: Vec<NodeGroupView> = step
            .views
            .iter()
            .map(|v| {
                let mut v = v.clone();
                if let Some(execution) = &outcome.scale_up_execution
                    && let Some(target) = execution
                        .succeeded
                        .iter()
                        .filter(|i| i.group_id == v.id)
                        .map(|i| i.new_target)
                        .max()
                {
                    v.target_size = target;
                }
                v
            })
            .collect();
        let min_plan = timer.time("scaleUp", || {
            plan_min_size_enforcement(
                base,
                &targets,
                &self.backoff,
                step.now,
                &self.options,
                step.provider,
            )
        });
        outcome.min_size_execution = self
            .execute_increases(&min_plan, &step.gathered.groups, step.now, outcome, events)
            .await;
        outcome.min_size_enforcement = Some(min_plan);
    }
}

/// What one scale-up plan of this loop reads.
#[derive(Clone, Copy)]
struct PlanInput<'s, 'p> {
    step: Stage<'s>,
    seed: u64,
    /// The pending pods with the extra ones.
    pending: &'p [Arc<Pod>],
    draining: &'p [Arc<Pod>],
}
