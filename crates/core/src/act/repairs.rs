//! What the cluster-state report asks the loop to repair through the cloud (docs/behaviour.md
//! CS-45, CS-46, CS-47): scale-ups that timed out lower their group's target by the nodes that
//! never came, instances that stayed unregistered too long or failed to be created are deleted,
//! and incorrect target sizes are fixed. In dry-run mode each call is only listed.

use std::sync::Arc;

use ferroscale_model::Node;

use crate::cloud::{CloudError, NodeGroup};
use crate::cluster_state::{ClusterStateReport, InstanceToDelete};
use crate::events::{Event, EventObject, reasons};

use super::{ActRecord, PlannedAction};

/// The node groups the repairs call, and whether they only list their calls.
#[derive(Clone, Copy)]
pub struct Repairs<'a> {
    pub groups: &'a [Arc<dyn NodeGroup>],
    pub report: &'a ClusterStateReport,
    pub dry_run: bool,
}

impl Repairs<'_> {
    /// Lowers the target of groups whose scale-up timed out by the nodes that never came.
    pub async fn revert_timed_out_scale_ups(&self) -> ActRecord {
        let mut record = ActRecord::default();
        for timed_out in &self.report.timed_out_scale_ups {
            if timed_out.missing == 0 {
                continue;
            }
            let delta = -(i64::try_from(timed_out.missing).unwrap_or(i64::MAX));
            let action = PlannedAction::DecreaseTargetSize {
                group_id: timed_out.group_id.clone(),
                delta,
            };
            let result = self.decrease(&timed_out.group_id, delta).await;
            if let Err(e) = &result {
                record.events.push(Event::warning(
                    EventObject::StatusConfigMap,
                    reasons::FAILED_TO_REVERT_SCALE_UP,
                    format!(
                        "failed to revert the scale-up of {} by {}: {e}",
                        timed_out.group_id, timed_out.missing
                    ),
                ));
            }
            record.record(action, result);
        }
        record
    }

    /// Deletes instances that stayed unregistered too long.
    pub async fn delete_long_unregistered(&self) -> ActRecord {
        let mut record = ActRecord::default();
        for (group_id, batch) in by_group(&self.report.long_unregistered_to_delete) {
            let (action, result) = self.delete_instances(&group_id, &batch).await;
            let ids = batch
                .iter()
                .map(|i| i.instance_id.as_str())
                .collect::<Vec<_>>()
                .join(",");
            record.events.push(match &result {
                Ok(()) => Event::normal(
                    EventObject::StatusConfigMap,
                    reasons::DELETE_UNREGISTERED,
                    format!("Removed unregistered node(s) {ids} of group {group_id}"),
                ),
                Err(e) => Event::warning(
                    EventObject::StatusConfigMap,
                    reasons::DELETE_UNREGISTERED_FAILED,
                    format!("Failed to remove unregistered node(s) {ids} of group {group_id}: {e}"),
                ),
            });
            record.record(action, result);
        }
        record
    }

    /// Deletes instances whose creation failed.
    pub async fn delete_failed_instances(&self) -> ActRecord {
        let mut record = ActRecord::default();
        for (group_id, batch) in by_group(&self.report.failed_instances_to_delete) {
            let (action, result) = self.delete_instances(&group_id, &batch).await;
            record.record(action, result);
        }
        record
    }

    /// Fixes incorrect target sizes. The flag is true when the iteration ends here: a size was
    /// fixed (or, in dry-run mode, would have been).
    pub async fn fix_incorrect_sizes(&self) -> (ActRecord, bool) {
        let mut record = ActRecord::default();
        if self.report.incorrect_sizes_to_fix.is_empty() {
            return (record, false);
        }
        let mut fixed = false;
        for fix in &self.report.incorrect_sizes_to_fix {
            let action = PlannedAction::DecreaseTargetSize {
                group_id: fix.group_id.clone(),
                delta: fix.delta,
            };
            let result = self.decrease(&fix.group_id, fix.delta).await;
            fixed |= result.is_ok();
            record.record(action, result);
        }
        (record, fixed || self.dry_run)
    }

    async fn decrease(&self, group_id: &str, delta: i64) -> Result<(), CloudError> {
        if self.dry_run {
            return Ok(());
        }
        self.group(group_id)?.decrease_target_size(delta).await
    }

    fn group(&self, group_id: &str) -> Result<&Arc<dyn NodeGroup>, CloudError> {
        self.groups
            .iter()
            .find(|g| g.id() == group_id)
            .ok_or_else(|| CloudError::NodeGroupDoesNotExist(group_id.to_string()))
    }

    /// Deletes instances of one group through their placeholder nodes (`ForceDeleteNodes` when
    /// asked, falling back to `DeleteNodes` when the provider does not offer it).
    async fn delete_instances(
        &self,
        group_id: &str,
        batch: &[&InstanceToDelete],
    ) -> (PlannedAction, Result<(), CloudError>) {
        let force = batch.iter().any(|i| i.force);
        let action = PlannedAction::DeleteInstances {
            group_id: group_id.to_string(),
            instance_ids: batch.iter().map(|i| i.instance_id.clone()).collect(),
            force,
        };
        if self.dry_run {
            return (action, Ok(()));
        }
        let group = match self.group(group_id) {
            Ok(group) => group,
            Err(e) => return (action, Err(e)),
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
