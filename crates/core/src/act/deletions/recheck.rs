//! The re-check against live objects before a node is removed (docs/behaviour.md SD-89, SD-110).

use std::sync::Arc;

use ferroscale_model::{Node, Pod, PodDisruptionBudget, Timestamp};

use crate::kubernetes::ClusterObjects;
use crate::options::AutoscalingOptions;
use crate::scale_down::{ControllerIndex, first_blocking_pod};

use super::{EmptinessRecheck, RecheckRefusal, RemovalKind, RemovalRecheck};

/// An empty node must still be empty, and no pod on any node may block its removal under the
/// drainability rules with the PDBs and controllers as they are now.
pub struct LiveRecheck<'a> {
    now: Timestamp,
    controllers: ControllerIndex,
    pdbs: &'a [PodDisruptionBudget],
    options: &'a AutoscalingOptions,
}

impl<'a> LiveRecheck<'a> {
    /// The re-check against `objects`, freshly read.
    pub fn new(
        objects: &'a ClusterObjects,
        now: Timestamp,
        options: &'a AutoscalingOptions,
    ) -> Self {
        LiveRecheck {
            now,
            controllers: ControllerIndex::of(&objects.controllers),
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
    ) -> Result<(), RecheckRefusal> {
        EmptinessRecheck.recheck(node, kind, live_pods)?;
        match first_blocking_pod(
            live_pods,
            self.now,
            &self.controllers,
            self.pdbs,
            self.options,
        ) {
            None => Ok(()),
            Some(block) => Err(block.into()),
        }
    }
}
