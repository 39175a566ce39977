//! Act: every call that changes the cloud or the cluster, in one place. The decide modules
//! (`scale_up`, `scale_down`, `cluster_state`) are pure and never import this module; the loop
//! (`autoscaler`) calls these steps and keeps its own bookkeeping, and nothing here imports the
//! loop (`scripts/check-architecture.sh` checks both).
//!
//! - [`scale_up`]: resizing node groups for a scale-up or min-size plan;
//! - [`deletions`]: scale-down deletions (taint, drain, cloud deletion, rollback), their
//!   re-check against live objects, soft taints and the clean-up of taints a previous process
//!   left behind;
//! - [`repairs`]: what cluster state asks for — reverting timed-out scale-ups, deleting
//!   instances that never registered or failed to be created, fixing incorrect target sizes.
//!
//! Each step lists its calls as [`PlannedAction`]s — in dry-run mode the calls it would have
//! made, none of which it makes — and returns them with their results in an [`ActRecord`].

pub mod deletions;
pub mod repairs;
pub mod scale_up;

use crate::cloud::CloudError;
use crate::events::Event;
use deletions::RemovalKind;

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

/// What an act step did: the calls it made (or, in dry-run mode, would have made) in order, the
/// ones that failed with their error, and the events it wants published.
#[derive(Debug, Clone, Default)]
pub struct ActRecord {
    pub planned_actions: Vec<PlannedAction>,
    pub action_errors: Vec<(PlannedAction, CloudError)>,
    pub events: Vec<Event>,
}

impl ActRecord {
    /// Records a call and its error, if any.
    pub fn record(&mut self, action: PlannedAction, result: Result<(), CloudError>) {
        if let Err(error) = result {
            self.action_errors.push((action.clone(), error));
        }
        self.planned_actions.push(action);
    }

    /// Records a call whose result is reported elsewhere (or that dry-run mode only lists).
    pub fn plan(&mut self, action: PlannedAction) {
        self.planned_actions.push(action);
    }
}
