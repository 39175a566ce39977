//! The cloud node controller (`--cloud-node-controller`, docs/cloud-node-controller.md): for
//! clusters whose cloud has no cloud-controller-manager, it does the two jobs of one that the
//! provider interface can answer for. New Nodes that register with the
//! `node.cloudprovider.kubernetes.io/uninitialized` taint get their node group's topology and
//! instance-type labels and lose the taint; Nodes whose instance has left its node group are
//! deleted once that is certain.
//!
//! An act-side controller next to the loop, not inside it: the binary (and the simulator) run
//! one pass after each loop iteration, in the leader only, on the answers of the provider
//! refresh that iteration made ([`WatchedRefresh`] records it). A pass is gather (the Nodes from
//! the cache, then the provider: [`gather`]), decide (pure: [`rules::decide`]), act (through
//! [`NodeObjectApi`], each write checked against a fresh read: [`act`]).

pub mod act;
mod gather;
pub mod refresh;
pub mod rules;

use std::sync::Arc;

use async_trait::async_trait;
use ferroscale_model::{Node, Timestamp};

use crate::cloud::CloudProvider;
use crate::events::Event;
use crate::kubernetes::{ClusterApi, ClusterError};
use crate::options::AutoscalingOptions;

pub use act::ActionOutcome;
pub use refresh::{RefreshRecord, WatchedRefresh};
pub use rules::{Plan, ProviderFailure};

/// A Node read from the API server itself (not a cache), with the version a write must match.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveNode {
    pub node: Node,
    pub resource_version: String,
}

/// Initializing one Node in one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInitializationWrite {
    pub node: String,
    pub uid: String,
    /// The version read back; the write fails with `ClusterError::Conflict` if the object moved on.
    pub resource_version: String,
    /// Labels to add; a label the object already has is left as it is.
    pub add_labels: Vec<(String, String)>,
    /// Every taint with this key is removed.
    pub remove_taint: String,
}

/// The writes of the cloud node controller, the only component of Ferroscale that changes Node
/// metadata beyond taints and deletes Node objects. The live binary implements it over the API
/// server (`ferroscale_kube::KubeCluster`), the simulator over its cluster.
#[async_trait]
pub trait NodeObjectApi: Send + Sync {
    /// The Node as the API server has it now; `Ok(None)` when it does not exist.
    async fn read_node(&self, name: &str) -> Result<Option<LiveNode>, ClusterError>;
    /// Adds the labels (keeping those the object has) and removes the taint, in one update of
    /// the object of that uid at that version.
    async fn initialize_node(&self, write: &NodeInitializationWrite) -> Result<(), ClusterError>;
    /// Deletes the Node object, only if its uid and `resourceVersion` are still these
    /// (`ClusterError::Conflict` otherwise, `ClusterError::NotFound` when it is gone).
    async fn delete_node(
        &self,
        name: &str,
        uid: &str,
        resource_version: &str,
    ) -> Result<(), ClusterError>;
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CloudNodeOutcome {
    pub now: Timestamp,
    /// `--dry-run`: the writes were decided and checked, not made, and no event was published.
    pub dry_run: bool,
    /// Why the pass decided nothing: no refresh since the last pass, the refresh failed, the
    /// Nodes could not be read.
    pub skipped: Option<String>,
    /// Provider calls that failed on this pass (the refresh included): no Node was deleted.
    pub provider_failures: Vec<ProviderFailure>,
    pub plan: Plan,
    /// What became of each planned write, initializations first.
    pub actions: Vec<ActionOutcome>,
    /// Every event of the pass (published unless dry-run).
    pub events: Vec<Event>,
}

impl CloudNodeOutcome {
    /// Nodes initialized this pass, with their group.
    pub fn initialized(&self) -> impl Iterator<Item = (&str, &str)> {
        self.actions.iter().filter_map(|a| match a {
            ActionOutcome::Initialized { node, group, .. } => Some((node.as_str(), group.as_str())),
            _ => None,
        })
    }

    /// Node objects deleted this pass, with the group the provider placed them in.
    pub fn deleted(&self) -> impl Iterator<Item = (&str, &str)> {
        self.actions.iter().filter_map(|a| match a {
            ActionOutcome::Deleted { node, group, .. } => Some((node.as_str(), group.as_str())),
            _ => None,
        })
    }
}

/// The controller and its memory across passes (deletion streaks, events already published).
#[derive(Debug, Default)]
pub struct CloudNodeController {
    memory: rules::Memory,
    /// The generation of the refresh the last pass worked on.
    refresh_seen: Option<u64>,
}

impl CloudNodeController {
    pub fn new() -> CloudNodeController {
        CloudNodeController::default()
    }

    /// What the controller remembers (for tests and reports).
    pub fn memory(&self) -> &rules::Memory {
        &self.memory
    }

    /// One pass, after a loop iteration: `refresh` is the provider's latest refresh
    /// ([`WatchedRefresh::last_refresh`]). A pass without a new successful refresh decides
    /// nothing; a failed refresh also ends every deletion streak (CNC-108).
    pub async fn run_once(
        &mut self,
        cloud: &dyn CloudProvider,
        refresh: Option<RefreshRecord>,
        cluster: &dyn ClusterApi,
        writes: &dyn NodeObjectApi,
        now: Timestamp,
        options: &AutoscalingOptions,
    ) -> CloudNodeOutcome {
        let mut outcome = CloudNodeOutcome {
            now,
            dry_run: options.dry_run,
            ..CloudNodeOutcome::default()
        };
        match refresh {
            None => {
                outcome.skipped = Some("the provider has not been refreshed yet".to_string());
                return outcome;
            }
            Some(record) if Some(record.generation) == self.refresh_seen => {
                outcome.skipped = Some("no provider refresh since the last pass".to_string());
                return outcome;
            }
            Some(RefreshRecord {
                generation,
                result: Err(error),
            }) => {
                self.refresh_seen = Some(generation);
                self.memory.forget_streaks();
                let failure = ProviderFailure {
                    call: "Refresh",
                    subject: "the cloud provider".to_string(),
                    error: error.to_string(),
                };
                outcome.skipped = Some(format!("{failure}: nothing is initialized or deleted"));
                outcome.plan.deletions_held = Some(failure.to_string());
                outcome.provider_failures.push(failure);
                return outcome;
            }
            Some(RefreshRecord { generation, .. }) => self.refresh_seen = Some(generation),
        }
        // The Nodes first, then the provider: a Node seen here whose machine exists is listed
        // by the provider's answers that follow.
        let nodes = match cluster.gather_nodes().await {
            Ok(nodes) => nodes,
            Err(error) => {
                outcome.skipped = Some(format!("the nodes cannot be read: {error}"));
                return outcome;
            }
        };
        let answers = gather::ask_provider(cloud, &nodes).await;
        outcome.provider_failures = answers.failures.clone();
        let plan = rules::decide(
            rules::DecideInput {
                now,
                nodes: &nodes,
                answers: &answers,
                removal_grace_period: options.cloud_node_removal_grace_period,
            },
            &mut self.memory,
        );
        let mut events = plan.events.clone();
        for planned in &plan.initialize {
            let action = act::initialize(planned, writes, options.dry_run).await;
            let event = act::event_of(&action, None, now);
            self.absorb(&action, &nodes, &planned.uid, event, &mut events);
            outcome.actions.push(action);
        }
        for planned in &plan.delete {
            let cached = nodes.iter().find(|n| n.name == planned.node);
            let action = act::delete(planned, cached, cloud, writes, options.dry_run).await;
            let event = act::event_of(&action, Some(planned), now);
            self.absorb(&action, &nodes, &planned.uid, event, &mut events);
            outcome.actions.push(action);
        }
        if !options.dry_run && !events.is_empty() {
            cluster.publish_events(&events).await;
        }
        outcome.plan = plan;
        outcome.events = events;
        outcome
    }

    /// Reports what happened back into the memory, and keeps the action's event (a failure's
    /// only when it says something new about the node).
    fn absorb(
        &mut self,
        action: &ActionOutcome,
        nodes: &[Arc<Node>],
        uid: &str,
        event: Option<Event>,
        events: &mut Vec<Event>,
    ) {
        match action {
            ActionOutcome::Initialized { node, .. } | ActionOutcome::Deleted { node, .. } => {
                self.memory.forget(node, uid);
                events.extend(event);
            }
            ActionOutcome::Skipped { node, forget, .. } => {
                if *forget {
                    self.memory.forget_streak(node, uid);
                }
            }
            ActionOutcome::Failed { node, .. } => {
                let cached = nodes.iter().find(|n| n.name == *node && n.uid == uid);
                if let (Some(cached), Some(event)) = (cached, event) {
                    events.extend(self.memory.report_once(cached, event));
                }
            }
        }
    }
}
