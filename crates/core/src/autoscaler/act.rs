//! The loop's act steps: resizing groups for a scale-up plan, reverting timed-out scale-ups,
//! deleting unregistered and failed instances, fixing incorrect sizes, starting scale-down
//! deletions and applying soft taints. Each records its calls in the outcome's planned actions
//! (the calls it would make, in dry-run mode, where nothing is called) and its failures, typed,
//! in the outcome's action errors.

use std::collections::HashMap;
use std::sync::Arc;

use ferroscale_model::dra::{DeviceScope, ResourceSlice};
use ferroscale_model::{Node, Timestamp};

use crate::accelerators::AcceleratorLabels;
use crate::actuation::{
    ActuationProgress, NodeDeletion, RemovalKind, apply_soft_taints, remove_leftover_taints,
};
use crate::cloud::{CloudError, CloudProvider, NodeGroup};
use crate::cluster_state::{ClusterStateReport, InstanceToDelete};
use crate::events::{Event, EventObject, reasons};
use crate::kubernetes::ClusterApi;
use crate::scale_down::ScaleDownPlan;
use crate::scale_up::{NodeGroupView, ScaleUpExecution, ScaleUpPlan, execute_scale_up};

use super::{
    Autoscaler, LiveRecheck, LoopError, LoopOutcome, PlannedAction, ScaleDownStep, Stopwatch,
};

impl Autoscaler {
    /// Act on a plan of group increases (scale-up or min-size enforcement): resize through the
    /// cloud, then register each success as a scale-up request and a scale-down cooldown start.
    /// In dry-run mode the resizes are only listed, and there is no execution.
    pub(super) async fn execute_increases(
        &mut self,
        plan: &ScaleUpPlan,
        groups: &[Arc<dyn NodeGroup>],
        now: Timestamp,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) -> Option<ScaleUpExecution> {
        for increase in plan.increases.iter().filter(|i| i.delta() > 0) {
            outcome.planned_actions.push(PlannedAction::IncreaseSize {
                group_id: increase.group_id.clone(),
                delta: increase.delta(),
            });
        }
        if self.options.dry_run {
            return None;
        }
        let mut execution =
            execute_scale_up(plan, groups, &mut self.backoff, now, &self.options).await;
        for increase in &execution.succeeded {
            self.registry
                .register_scale_up(&increase.group_id, increase.delta(), now);
            self.scale_down_state
                .record_scale_up(&increase.group_id, now);
        }
        events.append(&mut execution.events);
        Some(execution)
    }

    /// Removes the deletion taints an earlier process left on nodes of autoscaled groups (once
    /// per process).
    pub(super) async fn clean_up_leftover_taints(
        &mut self,
        cloud: &dyn CloudProvider,
        cluster: &dyn ClusterApi,
        now: Timestamp,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) -> Result<(), LoopError> {
        let nodes = cluster.gather_nodes().await.map_err(LoopError::Gather)?;
        if self.options.dry_run {
            for node in nodes
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
        let cleaned = remove_leftover_taints(cloud, cluster, &nodes, now, &self.options).await;
        for event in &cleaned.events {
            if let EventObject::Node(node) = &event.object {
                outcome
                    .planned_actions
                    .push(PlannedAction::RemoveLeftoverTaint { node: node.clone() });
            }
        }
        // What the API server refused now is retried every loop (docs/behaviour.md SD-120).
        for (node, key, uncordon) in cleaned.failed {
            self.deletions.owe_untaint(&node, key, uncordon);
        }
        events.extend(cleaned.events);
        Ok(())
    }

    /// Lowers the target of groups whose scale-up timed out by the nodes that never came.
    pub(super) async fn revert_timed_out_scale_ups(
        &self,
        groups: &[Arc<dyn NodeGroup>],
        report: &ClusterStateReport,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) {
        for timed_out in &report.timed_out_scale_ups {
            if timed_out.missing == 0 {
                continue;
            }
            let delta = -(i64::try_from(timed_out.missing).unwrap_or(i64::MAX));
            let action = PlannedAction::DecreaseTargetSize {
                group_id: timed_out.group_id.clone(),
                delta,
            };
            let result = self.act_decrease(groups, &timed_out.group_id, delta).await;
            if let Err(e) = &result {
                events.push(Event::warning(
                    EventObject::StatusConfigMap,
                    reasons::FAILED_TO_REVERT_SCALE_UP,
                    format!(
                        "failed to revert the scale-up of {} by {}: {e}",
                        timed_out.group_id, timed_out.missing
                    ),
                ));
            }
            outcome.record_action(action, result);
        }
    }

    /// Deletes instances that stayed unregistered too long.
    pub(super) async fn delete_long_unregistered(
        &self,
        groups: &[Arc<dyn NodeGroup>],
        report: &ClusterStateReport,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) {
        for (group_id, batch) in by_group(&report.long_unregistered_to_delete) {
            let (action, result) = self.delete_instances(groups, &group_id, &batch).await;
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
            outcome.record_action(action, result);
        }
    }

    /// Deletes instances whose creation failed.
    pub(super) async fn delete_failed_instances(
        &self,
        groups: &[Arc<dyn NodeGroup>],
        report: &ClusterStateReport,
        outcome: &mut LoopOutcome,
    ) {
        for (group_id, batch) in by_group(&report.failed_instances_to_delete) {
            let (action, result) = self.delete_instances(groups, &group_id, &batch).await;
            outcome.record_action(action, result);
        }
    }

    /// Fixes incorrect target sizes. True when the iteration ends here:
    /// a size was fixed (or, in dry-run mode, would have been).
    pub(super) async fn fix_incorrect_sizes(
        &self,
        groups: &[Arc<dyn NodeGroup>],
        report: &ClusterStateReport,
        outcome: &mut LoopOutcome,
    ) -> bool {
        if !report.incorrect_sizes_to_fix.is_empty() {
            let mut fixed = false;
            for fix in &report.incorrect_sizes_to_fix {
                let action = PlannedAction::DecreaseTargetSize {
                    group_id: fix.group_id.clone(),
                    delta: fix.delta,
                };
                let result = self.act_decrease(groups, &fix.group_id, fix.delta).await;
                fixed |= result.is_ok();
                outcome.record_action(action, result);
            }
            if fixed || self.options.dry_run {
                return true;
            }
        }
        false
    }

    /// Starts the deletions the scale-down plan chose (taint, then drain or delete), and, with
    /// no post-taint delay, moves them on at once.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start_deletions(
        &mut self,
        cloud: &dyn CloudProvider,
        cluster: &dyn ClusterApi,
        step: &ScaleDownStep<'_>,
        plan: &ScaleDownPlan,
        clock: &dyn Stopwatch,
        outcome: &mut LoopOutcome,
        events: &mut Vec<Event>,
    ) {
        let ScaleDownStep {
            gathered,
            views,
            now,
            ..
        } = *step;
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
        if !self.options.dry_run && !requests.is_empty() {
            self.remember_accelerators(cloud, step, &requests);
            let started_groups: Vec<String> = requests.iter().map(|r| r.group_id.clone()).collect();
            let progress = self
                .deletions
                .start_measured(requests, cluster, now, &self.options, clock)
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
            if self.deletions.delay_after_taint(&self.options).is_zero() {
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
    }

    /// The accelerator labels of the nodes whose deletion starts, for the scale-down counters of
    /// the iteration that sees them go (docs/behaviour.md OBS-123): the node, its group's
    /// template and its own ResourceSlices, as they are now.
    fn remember_accelerators(
        &mut self,
        cloud: &dyn CloudProvider,
        step: &ScaleDownStep<'_>,
        requests: &[NodeDeletion],
    ) {
        let available = cloud.available_gpu_types();
        let local_slices: Vec<&ResourceSlice> = step
            .gathered
            .objects
            .dra
            .slices
            .iter()
            .filter(|slice| matches!(slice.scope, DeviceScope::Node(_)))
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
            let labels = AcceleratorLabels::of(
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

    /// Adds and removes the plan's soft taints.
    pub(super) async fn apply_soft_taints(
        &self,
        cluster: &dyn ClusterApi,
        step: &ScaleDownStep<'_>,
        plan: &ScaleDownPlan,
        outcome: &mut LoopOutcome,
    ) {
        let ScaleDownStep { gathered, now, .. } = *step;
        // Soft taints, also in cooldown (docs/behaviour.md, Scale-down).
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
    }

    async fn act_decrease(
        &self,
        groups: &[Arc<dyn NodeGroup>],
        group_id: &str,
        delta: i64,
    ) -> Result<(), CloudError> {
        if self.options.dry_run {
            return Ok(());
        }
        let group = groups
            .iter()
            .find(|g| g.id() == group_id)
            .ok_or_else(|| CloudError::NodeGroupDoesNotExist(group_id.to_string()))?;
        group.decrease_target_size(delta).await
    }

    /// Deletes instances of one group through their placeholder nodes (`ForceDeleteNodes` when
    /// asked, falling back to `DeleteNodes` when the provider does not offer it).
    async fn delete_instances(
        &self,
        groups: &[Arc<dyn NodeGroup>],
        group_id: &str,
        batch: &[&InstanceToDelete],
    ) -> (PlannedAction, Result<(), CloudError>) {
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
                Err(CloudError::NodeGroupDoesNotExist(group_id.to_string())),
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
        (action, result)
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

pub(super) fn record_progress(
    outcome: &mut LoopOutcome,
    events: &mut Vec<Event>,
    progress: ActuationProgress,
) {
    events.extend(progress.events);
    outcome.actuation.extend(progress.reports);
    outcome.deleted_nodes.extend(progress.completed);
    outcome.failed_deletions.extend(progress.failed);
}
