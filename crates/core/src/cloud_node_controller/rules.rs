//! The cloud node controller's rules (docs/cloud-node-controller.md CNC-101–CNC-112): pure
//! functions of the Nodes as the watch cache shows them, what the provider answered on this
//! pass, the controller's memory of earlier passes, and the time. No I/O, no clock.
//!
//! Two halves:
//! - **initialization**: a Node carrying [`UNINITIALIZED_TAINT`] whose provider ID is an
//!   instance of a node group gets the [`CLOUD_LABELS`] that group's template declares and
//!   loses the taint, in one write;
//! - **lifecycle**: a Node the provider still places in a group, whose instance that group (and
//!   every other) no longer lists, and which is not Ready, is deleted once that has held on two
//!   consecutive passes and for `--cloud-node-removal-grace-period`.
//!
//! Everything leans towards leaving a Node alone: a pass on which any provider call failed
//! deletes nothing and forgets every streak; a Node the provider places in no group, a Node
//! without a provider ID and a Ready Node are never deleted; and the act step checks the Node
//! read back from the API server against [`check_before_deleting`] before it deletes with
//! preconditions.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::labels::{INSTANCE_TYPE, REGION, REGION_BETA, ZONE, ZONE_BETA};
use ferroscale_model::{ConditionStatus, Labels, Node, Timestamp};

use crate::events::{Event, EventObject};

/// The taint a kubelet started with `--cloud-provider=external` registers its Node with, until a
/// cloud node controller has initialized it. Matched by key, whatever its effect.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The legacy (beta) name of `node.kubernetes.io/instance-type`.
pub const INSTANCE_TYPE_BETA: &str = "beta.kubernetes.io/instance-type";
/// The labels initialization copies from a node group's template when the template has them
/// (docs/cloud-node-controller.md CNC-102): topology and instance type, current and legacy names.
pub const CLOUD_LABELS: [&str; 6] = [
    ZONE,
    REGION,
    INSTANCE_TYPE,
    ZONE_BETA,
    REGION_BETA,
    INSTANCE_TYPE_BETA,
];
/// A node must be seen gone on at least this many consecutive passes before it is deleted.
pub const GONE_PASSES: u32 = 2;

/// Event reasons. `Synced`, `DeletingNode` and `DeletingNodeFailed` are the reasons a
/// cloud-controller-manager's node controllers record for the same happenings.
pub mod reasons {
    /// A Node was initialized (labels set, taint removed).
    pub const SYNCED: &str = "Synced";
    /// A Node with the uninitialized taint is left as it is, and why.
    pub const NOT_INITIALIZED: &str = "CloudNodeNotInitialized";
    /// A Node whose instance is gone was deleted.
    pub const DELETING_NODE: &str = "DeletingNode";
    /// Deleting such a Node failed.
    pub const DELETING_NODE_FAILED: &str = "DeletingNodeFailed";
}

/// One provider call that failed on this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderFailure {
    /// The provider method, by its upstream name (`NodeGroups`, `Nodes`, `NodeGroupForNode`,
    /// `TemplateNodeInfo`, `Refresh`).
    pub call: &'static str,
    /// What it was about: `the cloud provider`, `node group <id>`, `node <name>`.
    pub subject: String,
    pub error: String,
}

impl fmt::Display for ProviderFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} for {} failed: {}",
            self.call, self.subject, self.error
        )
    }
}

/// What one node group answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupAnswers {
    pub id: String,
    /// The provider IDs of its instances (any state); `None` when `Nodes()` failed.
    pub instances: Option<HashSet<String>>,
    /// The [`CLOUD_LABELS`] of its template, when the template was asked for (only groups with a
    /// Node to initialize are); `Err` says why there is none.
    pub template: Option<Result<Labels, String>>,
}

/// Everything the provider answered on one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderAnswers {
    /// Every node group, in the provider's order; empty when `NodeGroups()` failed.
    pub groups: Vec<GroupAnswers>,
    /// `NodeGroupForNode` for the nodes [`nodes_to_place`] chose, by node name: the group's id,
    /// or `None` when the provider places the node in no group.
    pub placements: HashMap<String, Option<String>>,
    /// Calls that failed, in the order they were made.
    pub failures: Vec<ProviderFailure>,
}

impl ProviderAnswers {
    /// Answers of a pass on which the provider failed before anything could be asked.
    pub fn failed(failure: ProviderFailure) -> ProviderAnswers {
        ProviderAnswers {
            failures: vec![failure],
            ..ProviderAnswers::default()
        }
    }

    /// Whether every call answered: only then may a Node be deleted (CNC-108).
    pub fn complete(&self) -> bool {
        self.failures.is_empty()
    }

    fn group(&self, id: &str) -> Option<&GroupAnswers> {
        self.groups.iter().find(|g| g.id == id)
    }
}

/// Which group lists each provider ID (the first group, in the provider's order, when two do).
#[derive(Debug, Default)]
pub struct InstanceIndex<'a> {
    group_of: HashMap<&'a str, &'a str>,
}

impl<'a> InstanceIndex<'a> {
    pub fn new(groups: &'a [GroupAnswers]) -> InstanceIndex<'a> {
        let mut group_of = HashMap::new();
        for group in groups {
            for id in group.instances.iter().flatten() {
                group_of.entry(id.as_str()).or_insert(group.id.as_str());
            }
        }
        InstanceIndex { group_of }
    }

    /// The group whose instances include `provider_id`.
    pub fn group_of(&self, provider_id: &str) -> Option<&'a str> {
        if provider_id.is_empty() {
            return None;
        }
        self.group_of.get(provider_id).copied()
    }
}

/// Whether a node reports anything but `Ready=True` (`False`, `Unknown`, or no `Ready` condition
/// at all), as a cloud node lifecycle controller reads it. Pressure conditions and readiness
/// taints do not count: a node under disk pressure has a live kubelet.
pub fn is_not_ready(node: &Node) -> bool {
    node.conditions.ready != Some(ConditionStatus::True)
}

pub fn is_uninitialized(node: &Node) -> bool {
    node.has_taint(UNINITIALIZED_TAINT)
}

/// The nodes to ask `NodeGroupForNode` about: those that could be deletion candidates — a
/// provider ID that no group lists, and not Ready. Ready nodes and listed nodes are never asked,
/// so a healthy cluster costs no lookup.
pub fn nodes_to_place<'n>(nodes: &'n [Arc<Node>], index: &InstanceIndex<'_>) -> Vec<&'n Arc<Node>> {
    nodes
        .iter()
        .filter(|node| {
            !node.provider_id.is_empty()
                && index.group_of(&node.provider_id).is_none()
                && is_not_ready(node)
        })
        .collect()
}

/// The groups whose template is needed: those listing an uninitialized node.
pub fn templates_to_read(nodes: &[Arc<Node>], index: &InstanceIndex<'_>) -> BTreeSet<String> {
    nodes
        .iter()
        .filter(|node| is_uninitialized(node))
        .filter_map(|node| index.group_of(&node.provider_id))
        .map(str::to_string)
        .collect()
}

/// A Node as the controller remembers it: by name and uid, so that a Node deleted and registered
/// again under the same name starts afresh.
type NodeKey = (String, String);

fn key_of(node: &Node) -> NodeKey {
    (node.name.clone(), node.uid.clone())
}

/// How long a node has been a deletion candidate: since the first pass that found it gone (its
/// provider ID in no group's instances, placed in a group, not Ready), and on how many
/// consecutive passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoneStreak {
    pub since: Timestamp,
    pub passes: u32,
}

/// What the controller remembers between passes.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    gone: HashMap<NodeKey, GoneStreak>,
    /// The message of the last `CloudNodeNotInitialized` (or failure) event published per node,
    /// so that a node left alone for the same reason gets one event, not one per pass.
    reported: HashMap<NodeKey, String>,
}

impl Memory {
    /// The deletion streak of a node, if it is a candidate.
    pub fn streak(&self, node: &str, uid: &str) -> Option<GoneStreak> {
        self.gone.get(&(node.to_string(), uid.to_string())).copied()
    }

    /// Forgets a node's streak: the next pass that finds it gone starts counting again.
    pub fn forget_streak(&mut self, node: &str, uid: &str) {
        self.gone.remove(&(node.to_string(), uid.to_string()));
    }

    /// Forgets the node entirely (it was deleted or initialized).
    pub fn forget(&mut self, node: &str, uid: &str) {
        let key = (node.to_string(), uid.to_string());
        self.gone.remove(&key);
        self.reported.remove(&key);
    }

    /// Forgets every streak (a pass on which the provider failed).
    pub fn forget_streaks(&mut self) {
        self.gone.clear();
    }

    /// An event about `node` unless the same message was the last one published about it.
    pub fn report_once(&mut self, node: &Node, event: Event) -> Option<Event> {
        let key = key_of(node);
        if self.reported.get(&key) == Some(&event.message) {
            return None;
        }
        self.reported.insert(key, event.message.clone());
        Some(event)
    }
}

/// Initializing one node: the template's cloud labels (those the node lacks are added when the
/// act step writes) and the taint to remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initialization {
    pub node: String,
    pub uid: String,
    pub provider_id: String,
    pub group: String,
    /// Every [`CLOUD_LABELS`] entry the group's template has, in that order.
    pub template_labels: Vec<(String, String)>,
}

/// Deleting one Node whose instance is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    pub node: String,
    pub uid: String,
    pub provider_id: String,
    /// The group the provider places the node in.
    pub group: String,
    pub streak: GoneStreak,
}

/// A candidate kept this pass, and until when at least.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub node: String,
    pub group: String,
    pub streak: GoneStreak,
    /// When the grace period ends (the node also needs [`GONE_PASSES`] passes).
    pub not_before: Timestamp,
}

/// What one pass decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub initialize: Vec<Initialization>,
    pub delete: Vec<Deletion>,
    /// Deletion candidates still within their grace period or first pass.
    pub waiting: Vec<Waiting>,
    /// Why no Node may be deleted this pass, when the provider's answers were incomplete.
    pub deletions_held: Option<String>,
    /// Events decided here (nodes left uninitialized and why); those of the writes come from the
    /// act step.
    pub events: Vec<Event>,
}

/// The inputs of one decision.
#[derive(Debug, Clone, Copy)]
pub struct DecideInput<'a> {
    pub now: Timestamp,
    /// The Nodes as the watch cache shows them, read before the provider was asked.
    pub nodes: &'a [Arc<Node>],
    pub answers: &'a ProviderAnswers,
    /// `--cloud-node-removal-grace-period`.
    pub removal_grace_period: Duration,
}

/// The decision of one pass. Updates `memory` (streaks and reported events) and returns what to
/// do.
pub fn decide(input: DecideInput<'_>, memory: &mut Memory) -> Plan {
    let DecideInput {
        now,
        nodes,
        answers,
        removal_grace_period,
    } = input;
    let present: HashSet<NodeKey> = nodes.iter().map(|n| key_of(n)).collect();
    memory.gone.retain(|key, _| present.contains(key));
    memory.reported.retain(|key, _| present.contains(key));

    let index = InstanceIndex::new(&answers.groups);
    let mut plan = Plan::default();
    if !answers.complete() {
        // docs/cloud-node-controller.md CNC-108: nothing is deleted on a pass with failed
        // answers, and the passes before it no longer count.
        memory.forget_streaks();
        plan.deletions_held = Some(
            answers
                .failures
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        );
    }
    for node in nodes {
        if is_uninitialized(node) {
            initialization_rule(node, answers, &index, memory, &mut plan);
        }
        if answers.complete() {
            lifecycle_rule(
                node,
                answers,
                &index,
                now,
                removal_grace_period,
                memory,
                &mut plan,
            );
        }
    }
    plan
}

/// docs/cloud-node-controller.md CNC-101–CNC-104.
fn initialization_rule(
    node: &Node,
    answers: &ProviderAnswers,
    index: &InstanceIndex<'_>,
    memory: &mut Memory,
    plan: &mut Plan,
) {
    let not_initialized = |message: String| {
        Event::warning(
            EventObject::Node(node.name.clone()),
            reasons::NOT_INITIALIZED,
            message,
        )
    };
    if node.provider_id.is_empty() {
        let event = not_initialized(format!(
            "node {} is left uninitialized: it has no spec.providerID, and Ferroscale can only \
             recognise a node by it (start its kubelet with --provider-id)",
            node.name
        ));
        plan.events.extend(memory.report_once(node, event));
        return;
    }
    let Some(group) = index.group_of(&node.provider_id) else {
        // With a group's instances unknown the node may well be one of them: say nothing.
        if answers.complete() {
            let event = not_initialized(format!(
                "node {} is left uninitialized: its provider ID {:?} is not an instance of any \
                 node group of the provider",
                node.name, node.provider_id
            ));
            plan.events.extend(memory.report_once(node, event));
        }
        return;
    };
    match answers.group(group).and_then(|g| g.template.as_ref()) {
        Some(Ok(labels)) => plan.initialize.push(Initialization {
            node: node.name.clone(),
            uid: node.uid.clone(),
            provider_id: node.provider_id.clone(),
            group: group.to_string(),
            template_labels: cloud_labels(labels),
        }),
        Some(Err(reason)) => {
            let event = not_initialized(format!(
                "node {} of node group {group} is left uninitialized: the group's template \
                 cannot be read: {reason}",
                node.name
            ));
            plan.events.extend(memory.report_once(node, event));
        }
        // Not asked (the gather step asks for every group listing such a node): next pass.
        None => {}
    }
}

/// docs/cloud-node-controller.md CNC-105–CNC-107. Only called on a pass where every provider
/// call answered.
fn lifecycle_rule(
    node: &Node,
    answers: &ProviderAnswers,
    index: &InstanceIndex<'_>,
    now: Timestamp,
    removal_grace_period: Duration,
    memory: &mut Memory,
    plan: &mut Plan,
) {
    let key = key_of(node);
    let placed = answers
        .placements
        .get(&node.name)
        .and_then(Option::as_deref)
        .filter(|group| answers.group(group).is_some());
    let candidate = !node.provider_id.is_empty()
        && index.group_of(&node.provider_id).is_none()
        && is_not_ready(node);
    let (true, Some(group)) = (candidate, placed) else {
        memory.gone.remove(&key);
        return;
    };
    let streak = memory
        .gone
        .entry(key)
        .and_modify(|s| s.passes = s.passes.saturating_add(1))
        .or_insert(GoneStreak {
            since: now,
            passes: 1,
        });
    let not_before = streak.since + removal_grace_period;
    if streak.passes >= GONE_PASSES && now >= not_before {
        plan.delete.push(Deletion {
            node: node.name.clone(),
            uid: node.uid.clone(),
            provider_id: node.provider_id.clone(),
            group: group.to_string(),
            streak: *streak,
        });
    } else {
        plan.waiting.push(Waiting {
            node: node.name.clone(),
            group: group.to_string(),
            streak: *streak,
            not_before,
        });
    }
}

/// The [`CLOUD_LABELS`] entries of a template's labels, in that order.
pub fn cloud_labels(labels: &Labels) -> Vec<(String, String)> {
    CLOUD_LABELS
        .iter()
        .filter_map(|key| Some((key.to_string(), labels.get(*key)?.clone())))
        .collect()
}

/// Only the [`CLOUD_LABELS`] of `labels`, as a label map.
pub fn cloud_label_map(labels: &Labels) -> Labels {
    let mut map = Labels::new();
    for (key, value) in cloud_labels(labels) {
        map.insert(key, value);
    }
    map
}

/// A template label the node already has with another value: the node's is kept (CNC-103).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelKept {
    pub key: String,
    pub node_value: String,
    pub template_value: String,
}

/// What initializing `node` writes: the template labels it lacks, and those it has with another
/// value (kept as they are).
pub fn labels_to_write(
    node: &Node,
    template_labels: &[(String, String)],
) -> (Vec<(String, String)>, Vec<LabelKept>) {
    let mut add = Vec::new();
    let mut kept = Vec::new();
    for (key, value) in template_labels {
        match node.labels.get(key.as_str()) {
            None => add.push((key.clone(), value.clone())),
            Some(own) if own != value => kept.push(LabelKept {
                key: key.clone(),
                node_value: own.clone(),
                template_value: value.clone(),
            }),
            Some(_) => {}
        }
    }
    (add, kept)
}

/// The Node read back is the object decided about: same uid, same provider ID.
fn still_the_same_node(
    live: &Node,
    name: &str,
    uid: &str,
    provider_id: &str,
) -> Result<(), String> {
    if live.uid != uid {
        return Err(format!(
            "node {name} was replaced (uid {uid} is now {})",
            live.uid
        ));
    }
    if live.provider_id != provider_id {
        return Err(format!(
            "node {name}'s provider ID changed from {provider_id:?} to {:?}",
            live.provider_id
        ));
    }
    Ok(())
}

/// The last look before initializing: the Node read back from the API server is still the one
/// decided about and still carries the taint (CNC-104).
pub fn check_before_initializing(live: &Node, planned: &Initialization) -> Result<(), String> {
    still_the_same_node(live, &planned.node, &planned.uid, &planned.provider_id)?;
    if !is_uninitialized(live) {
        return Err(format!(
            "node {} no longer has the {UNINITIALIZED_TAINT} taint",
            planned.node
        ));
    }
    Ok(())
}

/// The last look before deleting: the Node read back from the API server is still the one
/// decided about, with the same provider ID, and still not Ready (CNC-108).
pub fn check_before_deleting(live: &Node, planned: &Deletion) -> Result<(), String> {
    still_the_same_node(live, &planned.node, &planned.uid, &planned.provider_id)?;
    if !is_not_ready(live) {
        return Err(format!("node {} is Ready again", planned.node));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
