//! Carrying out one pass's plan through [`NodeObjectApi`] (and, before a deletion, the
//! provider's `HasInstance`). Each write is preceded by a read of the Node from the API server,
//! checked against the plan by the rules, and made with that read's `resourceVersion` as a
//! precondition, so a Node that changed in between is left for the next pass.

use std::sync::Arc;

use ferroscale_model::time::format_duration;
use ferroscale_model::{Node, Timestamp};

use crate::cloud::{CloudError, CloudProvider};
use crate::events::{Event, EventObject};
use crate::kubernetes::ClusterError;

use super::rules::{self, Deletion, Initialization, LabelKept, UNINITIALIZED_TAINT, reasons};
use super::{NodeInitializationWrite, NodeObjectApi};

/// How often an initialization that met a concurrent change is tried again within one pass.
const CONFLICT_ATTEMPTS: usize = 3;

/// What became of one planned write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionOutcome {
    /// Labels set and taint removed (or, in dry-run mode, would have been).
    Initialized {
        node: String,
        group: String,
        labels: Vec<(String, String)>,
        kept: Vec<LabelKept>,
    },
    /// The Node object was deleted (or, in dry-run mode, would have been).
    Deleted {
        node: String,
        group: String,
        provider_id: String,
    },
    /// Not done: the Node is not as planned any more (or the provider says its instance exists).
    /// `forget` ends the node's deletion streak.
    Skipped {
        node: String,
        reason: String,
        forget: bool,
    },
    /// The write failed; the next pass tries again.
    Failed {
        node: String,
        deletion: bool,
        error: String,
    },
}

/// Initializes one node (CNC-101–CNC-104).
pub(super) async fn initialize(
    planned: &Initialization,
    writes: &dyn NodeObjectApi,
    dry_run: bool,
) -> ActionOutcome {
    let skipped = |reason: String| ActionOutcome::Skipped {
        node: planned.node.clone(),
        reason,
        forget: false,
    };
    let failed = |error: ClusterError| ActionOutcome::Failed {
        node: planned.node.clone(),
        deletion: false,
        error: error.to_string(),
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let live = match writes.read_node(&planned.node).await {
            Ok(Some(live)) => live,
            Ok(None) => return skipped(format!("node {} no longer exists", planned.node)),
            Err(error) => return failed(error),
        };
        if let Err(reason) = rules::check_before_initializing(&live.node, planned) {
            return skipped(reason);
        }
        let (labels, kept) = rules::labels_to_write(&live.node, &planned.template_labels);
        let done = ActionOutcome::Initialized {
            node: planned.node.clone(),
            group: planned.group.clone(),
            labels: labels.clone(),
            kept,
        };
        if dry_run {
            return done;
        }
        let write = NodeInitializationWrite {
            node: planned.node.clone(),
            uid: planned.uid.clone(),
            resource_version: live.resource_version,
            add_labels: labels,
            remove_taint: UNINITIALIZED_TAINT.to_string(),
        };
        match writes.initialize_node(&write).await {
            Ok(()) => return done,
            Err(ClusterError::Conflict { .. }) if attempts < CONFLICT_ATTEMPTS => continue,
            Err(ClusterError::NotFound { .. }) => {
                return skipped(format!("node {} no longer exists", planned.node));
            }
            Err(error) => return failed(error),
        }
    }
}

/// Deletes one Node whose instance is gone (CNC-105–CNC-109): the provider's `HasInstance`
/// first (an instance it says exists keeps the node), then the Node read back and checked, then
/// the deletion with its uid and `resourceVersion` as preconditions.
pub(super) async fn delete(
    planned: &Deletion,
    cached: Option<&Arc<Node>>,
    cloud: &dyn CloudProvider,
    writes: &dyn NodeObjectApi,
    dry_run: bool,
) -> ActionOutcome {
    let skipped = |reason: String, forget: bool| ActionOutcome::Skipped {
        node: planned.node.clone(),
        reason,
        forget,
    };
    if let Some(node) = cached {
        match cloud.has_instance(node).await {
            Ok(true) => {
                return skipped(
                    format!(
                        "the provider says the instance {} of node {} exists",
                        planned.provider_id, planned.node
                    ),
                    true,
                );
            }
            Ok(false) | Err(CloudError::NotImplemented) => {}
            Err(error) => {
                return skipped(
                    format!(
                        "HasInstance for node {} failed: {error}; nothing is deleted while the \
                         provider fails",
                        planned.node
                    ),
                    true,
                );
            }
        }
    }
    let live = match writes.read_node(&planned.node).await {
        Ok(Some(live)) => live,
        Ok(None) => {
            return skipped(format!("node {} no longer exists", planned.node), true);
        }
        Err(error) => {
            return ActionOutcome::Failed {
                node: planned.node.clone(),
                deletion: true,
                error: error.to_string(),
            };
        }
    };
    if let Err(reason) = rules::check_before_deleting(&live.node, planned) {
        return skipped(reason, true);
    }
    let done = ActionOutcome::Deleted {
        node: planned.node.clone(),
        group: planned.group.clone(),
        provider_id: planned.provider_id.clone(),
    };
    if dry_run {
        return done;
    }
    match writes
        .delete_node(&planned.node, &planned.uid, &live.resource_version)
        .await
    {
        Ok(()) => done,
        Err(ClusterError::NotFound { .. }) => {
            skipped(format!("node {} no longer exists", planned.node), true)
        }
        Err(ClusterError::Conflict { message, .. }) => skipped(
            format!(
                "node {} changed after it was read back ({message}); it is looked at again",
                planned.node
            ),
            true,
        ),
        Err(error) => ActionOutcome::Failed {
            node: planned.node.clone(),
            deletion: true,
            error: error.to_string(),
        },
    }
}

/// The event an outcome is recorded with, if any.
pub(super) fn event_of(
    outcome: &ActionOutcome,
    planned_deletion: Option<&Deletion>,
    now: Timestamp,
) -> Option<Event> {
    match outcome {
        ActionOutcome::Initialized {
            node,
            group,
            labels,
            kept,
        } => {
            let mut message = format!(
                "initialized node {node} from node group {group}'s template: removed the \
                 {UNINITIALIZED_TAINT} taint"
            );
            if !labels.is_empty() {
                let set: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                message.push_str(&format!(", set {}", set.join(", ")));
            }
            for label in kept {
                message.push_str(&format!(
                    "; kept the node's own {}={} (the template says {})",
                    label.key, label.node_value, label.template_value
                ));
            }
            Some(Event::normal(
                EventObject::Node(node.clone()),
                reasons::SYNCED,
                message,
            ))
        }
        ActionOutcome::Deleted {
            node,
            group,
            provider_id,
        } => {
            let since = planned_deletion
                .map(|d| {
                    format!(
                        " for {} ({} refreshes)",
                        format_duration(now.since(d.streak.since)),
                        d.streak.passes
                    )
                })
                .unwrap_or_default();
            Some(Event::normal(
                EventObject::Node(node.clone()),
                reasons::DELETING_NODE,
                format!(
                    "deleted node {node}: node group {group} has not listed its instance \
                     {provider_id}{since} and the node is not Ready"
                ),
            ))
        }
        ActionOutcome::Failed {
            node,
            deletion: true,
            error,
        } => Some(Event::warning(
            EventObject::Node(node.clone()),
            reasons::DELETING_NODE_FAILED,
            format!("failed deleting node {node}: {error}"),
        )),
        ActionOutcome::Failed {
            node,
            deletion: false,
            error,
        } => Some(Event::warning(
            EventObject::Node(node.clone()),
            reasons::NOT_INITIALIZED,
            format!("initializing node {node} failed: {error}; it is tried again"),
        )),
        ActionOutcome::Skipped { .. } => None,
    }
}
