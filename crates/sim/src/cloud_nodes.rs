//! The cloud node controller in the simulator (docs/behaviour.md SIM-106): with
//! `cloud-node-controller` in a scenario's options, the real
//! `ferroscale_core::cloud_node_controller::CloudNodeController` runs after each engine loop,
//! on that loop's refresh of the simulated cloud, against the simulated cluster; what it did
//! becomes timeline lines and per-group counts for the reports. Groups without a
//! cloud-controller-manager (`cloudControllerManager: false`) give it work: their new nodes
//! register uninitialized, and their Nodes outlive their machines.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferroscale_core::cloud::CloudProvider;
use ferroscale_core::cloud_node_controller::{
    ActionOutcome, CloudNodeController, CloudNodeOutcome, WatchedRefresh,
};
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::Timestamp;
use ferroscale_model::time::format_duration;
use futures::executor::block_on;

use crate::api::SimClusterApi;
use crate::cloud::{SimulatedCloud, SimulatedProvider};
use crate::record::{EntryKind, TimelineEntry};
use crate::runner::names_with_more;

/// Names shown in one timeline line before "and N more".
const NAMES_SHOWN: usize = 5;

/// The controller and the provider the engine loop uses while it is on (the simulated cloud
/// with its refreshes recorded).
pub(crate) struct SimCloudNodes {
    controller: CloudNodeController,
    provider: WatchedRefresh<SimulatedProvider>,
}

impl SimCloudNodes {
    pub(crate) fn new(cloud: Arc<SimulatedCloud>) -> SimCloudNodes {
        SimCloudNodes {
            controller: CloudNodeController::new(),
            provider: WatchedRefresh::new(Arc::new(SimulatedProvider::new(cloud))),
        }
    }

    /// The provider the engine loop runs against.
    pub(crate) fn provider(&self) -> &dyn CloudProvider {
        &self.provider
    }

    /// One pass after the loop at `now`.
    pub(crate) fn pass(
        &mut self,
        api: &SimClusterApi<'_>,
        now: Timestamp,
        options: &AutoscalingOptions,
    ) -> CloudNodeOutcome {
        block_on(self.controller.run_once(
            &self.provider,
            self.provider.last_refresh(),
            api,
            api,
            now,
            options,
        ))
    }
}

/// The timeline lines of a pass: initializations and deletions per group, nodes kept at the
/// last look, failed writes, and the events saying why a node is left uninitialized.
pub(crate) fn timeline_entries(outcome: &CloudNodeOutcome) -> Vec<TimelineEntry> {
    let at = outcome.now;
    let mut entries = Vec::new();
    let mut initialized: BTreeMap<&str, (Vec<&str>, Vec<String>)> = BTreeMap::new();
    let mut deleted: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for action in &outcome.actions {
        match action {
            ActionOutcome::Initialized {
                node,
                group,
                labels,
                ..
            } => {
                let entry = initialized.entry(group).or_default();
                entry.0.push(node);
                for (key, value) in labels {
                    let label = format!("{key}={value}");
                    if !entry.1.contains(&label) {
                        entry.1.push(label);
                    }
                }
            }
            ActionOutcome::Deleted { node, group, .. } => {
                deleted.entry(group).or_default().push(node);
            }
            ActionOutcome::Skipped { node, reason, .. } => entries.push(TimelineEntry {
                at,
                kind: EntryKind::CloudNode,
                what: format!("the cloud node controller left node {node} as it is"),
                why: reason.clone(),
            }),
            ActionOutcome::Failed { node, error, .. } => entries.push(TimelineEntry {
                at,
                kind: EntryKind::Failure,
                what: format!("the cloud node controller's write to node {node} failed"),
                why: error.clone(),
            }),
        }
    }
    for (group, (nodes, labels)) in initialized {
        let set = if labels.is_empty() {
            String::new()
        } else {
            format!("set {} and ", labels.join(", "))
        };
        entries.push(TimelineEntry {
            at,
            kind: EntryKind::CloudNode,
            what: format!(
                "the cloud node controller initialized {} node(s) of {group}: {}",
                nodes.len(),
                names_with_more(&nodes, NAMES_SHOWN)
            ),
            why: format!(
                "{set}removed the uninitialized taint, from the group's template; pods can land \
                 there now"
            ),
        });
    }
    for (group, nodes) in deleted {
        let gone_for = outcome
            .plan
            .delete
            .iter()
            .filter(|d| nodes.contains(&d.node.as_str()))
            .map(|d| at.since(d.streak.since))
            .max()
            .unwrap_or_default();
        entries.push(TimelineEntry {
            at,
            kind: EntryKind::CloudNode,
            what: format!(
                "the cloud node controller deleted {} Node object(s) of {group}: {}",
                nodes.len(),
                names_with_more(&nodes, NAMES_SHOWN)
            ),
            why: format!(
                "their machines left the group (not listed for up to {}) and they were not Ready",
                format_duration(gone_for)
            ),
        });
    }
    for event in &outcome.events {
        if event.reason == ferroscale_core::cloud_node_controller::rules::reasons::NOT_INITIALIZED {
            entries.push(TimelineEntry {
                at,
                kind: EntryKind::CloudNode,
                what: format!("{} on {}", event.reason, event.object),
                why: event.message.clone(),
            });
        }
    }
    entries
}
