//! The kube-scheduler Filter plugins, as the autoscaler simulates them: whether a pod fits a node
//! in a snapshot, and if not, which filter rejected it.
//!
//! Filters run in the order of the scheduler's default profile, and the verdict is the one of the
//! first filter that rejects:
//!
//! 1. **NodeUnschedulable** — a cordoned node is rejected outright. The scheduler would let a pod
//!    that tolerates `node.kubernetes.io/unschedulable` through, but the autoscaler's simulation
//!    never considers cordoned nodes, so neither do we.
//! 2. **NodeName** — a pod whose `node_name` is set may only go to that node. The model has no
//!    separate "requested node" for unbound pods, so for pending pods this filter never rejects;
//!    callers that re-place pods of a node (drain simulation) must clear `node_name` first, as
//!    upstream does.
//! 3. **TaintToleration** — every `NoSchedule`/`NoExecute` taint must be tolerated.
//! 4. **NodeAffinity** — the node selector and required node affinity must match.
//! 5. **NodePorts** — no requested host port may conflict with one in use.
//! 6. **NodeResourcesFit** — pod count first, then cpu, memory, ephemeral storage and extended
//!    resources (only those the pod requests).
//! 7. **PodTopologySpread** — hard (`DoNotSchedule`) constraints only.
//! 8. **InterPodAffinity** — required affinity, then required anti-affinity, then the placed pods'
//!    anti-affinity against the incoming pod.
//!
//! The scheduler splits each plugin into PreFilter (work per pod) and Filter (work per node). Here
//! PreFilter becomes an [`InterPodPlan`]: the ids of the snapshot indexes (see
//! [`crate::topology`]) the pod's constraints read, registered on first use. The per-node part is
//! then a handful of array lookups. [`find_node`] builds the plan once per call; [`check`] builds it
//! per call, and only for pods with inter-pod constraints (or when a placed pod has required
//! anti-affinity).

use std::fmt;

use ferroscale_model::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
use ferroscale_model::taints::first_untolerated;
use ferroscale_model::{
    NodeInclusionPolicy, Pod, Taint, TopologySpreadConstraint, UnsatisfiableAction,
};

use crate::snapshot::{FitSummary, NodeId, NodeInfo, Snapshot};
use crate::topology::{
    DomainCountsId, ExistingTermId, KeyId, NodeEligibility, PodClause, PodMatcher, SpreadViewId,
    TopologyIndex,
};

/// Which filter rejected a pod; stable, for aggregation and counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnfitKind {
    NodeUnschedulable,
    NodeName,
    NodeAffinity,
    TaintToleration,
    NodePorts,
    InsufficientResource,
    PodAffinity,
    PodAntiAffinity,
    ExistingPodAntiAffinity,
    TopologySpread,
    NodeMissing,
}

/// Why a pod does not fit a node. `Display` gives the scheduler's wording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    NodeUnschedulable,
    NodeName,
    NodeAffinity,
    UntoleratedTaint {
        key: String,
        value: String,
        effect: &'static str,
    },
    NodePorts,
    InsufficientResource(String),
    PodAffinity,
    PodAntiAffinity,
    ExistingPodAntiAffinity,
    TopologySpread {
        topology_key: String,
    },
    /// The spread constraint's topology key is missing from the node's labels.
    TopologySpreadMissingLabel {
        topology_key: String,
    },
    NodeMissing,
}

impl Unfit {
    pub fn kind(&self) -> UnfitKind {
        match self {
            Unfit::NodeUnschedulable => UnfitKind::NodeUnschedulable,
            Unfit::NodeName => UnfitKind::NodeName,
            Unfit::NodeAffinity => UnfitKind::NodeAffinity,
            Unfit::UntoleratedTaint { .. } => UnfitKind::TaintToleration,
            Unfit::NodePorts => UnfitKind::NodePorts,
            Unfit::InsufficientResource(_) => UnfitKind::InsufficientResource,
            Unfit::PodAffinity => UnfitKind::PodAffinity,
            Unfit::PodAntiAffinity => UnfitKind::PodAntiAffinity,
            Unfit::ExistingPodAntiAffinity => UnfitKind::ExistingPodAntiAffinity,
            Unfit::TopologySpread { .. } | Unfit::TopologySpreadMissingLabel { .. } => {
                UnfitKind::TopologySpread
            }
            Unfit::NodeMissing => UnfitKind::NodeMissing,
        }
    }

    /// Filters whose verdict cannot change by placing more pods on other nodes: resources, ports
    /// and every node-only check. Affinity and spread verdicts depend on the rest of the cluster.
    pub fn is_local_to_node(&self) -> bool {
        !matches!(
            self.kind(),
            UnfitKind::PodAffinity
                | UnfitKind::PodAntiAffinity
                | UnfitKind::ExistingPodAntiAffinity
                | UnfitKind::TopologySpread
        )
    }
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfit::NodeUnschedulable => f.write_str("node(s) were unschedulable"),
            Unfit::NodeName => f.write_str("node(s) didn't match the requested node name"),
            Unfit::NodeAffinity => f.write_str("node(s) didn't match Pod's node affinity/selector"),
            Unfit::UntoleratedTaint { key, value, effect } => {
                if value.is_empty() {
                    write!(f, "node(s) had untolerated taint {{{key}: }} ({effect})")
                } else {
                    write!(
                        f,
                        "node(s) had untolerated taint {{{key}: {value}}} ({effect})"
                    )
                }
            }
            Unfit::NodePorts => {
                f.write_str("node(s) didn't have free ports for the requested pod ports")
            }
            Unfit::InsufficientResource(name) if name == "pods" => f.write_str("Too many pods"),
            Unfit::InsufficientResource(name) => write!(f, "Insufficient {name}"),
            Unfit::PodAffinity => f.write_str("node(s) didn't match pod affinity rules"),
            Unfit::PodAntiAffinity => f.write_str("node(s) didn't match pod anti-affinity rules"),
            Unfit::ExistingPodAntiAffinity => {
                f.write_str("node(s) didn't satisfy existing pods anti-affinity rules")
            }
            Unfit::TopologySpread { .. } => {
                f.write_str("node(s) didn't match pod topology spread constraints")
            }
            Unfit::TopologySpreadMissingLabel { topology_key } => write!(
                f,
                "node(s) didn't match pod topology spread constraints (missing required label {topology_key})"
            ),
            Unfit::NodeMissing => f.write_str("node not found in the snapshot"),
        }
    }
}

/// Runs the filters, in the scheduler's order, for `pod` on `node`. The pod must not already be
/// placed in the snapshot.
pub fn check(snapshot: &Snapshot, pod: &Pod, node: NodeId) -> Result<(), Unfit> {
    let info = snapshot.node(node).ok_or(Unfit::NodeMissing)?;
    check_node_local(pod, info).map_err(Rejected::into_unfit)?;
    if !needs_inter_pod_filters(snapshot, pod) {
        return Ok(());
    }
    let mut topology = snapshot.topology();
    let plan = InterPodPlan::prepare(&mut topology, snapshot, pod);
    plan.check(&topology, node).map_err(Rejected::into_unfit)
}

/// The first node, in handle order starting at `start` and wrapping around, on which `pod` fits.
/// Starting one past the previous match spreads consecutive pods the way upstream's round-robin
/// placement does. Cordoned nodes are skipped, as in the autoscaler.
///
/// Only the yes/no answer matters here, so the cheapest test runs first: the snapshot's compact
/// per-node capacity summary rejects most full nodes without touching the node itself.
pub fn find_node(snapshot: &Snapshot, pod: &Pod, start: usize) -> Option<NodeId> {
    let slots = snapshot.slot_count();
    if slots == 0 {
        return None;
    }
    let start = start % slots;
    let wants = FitSummary::wanted_by(pod);
    let summaries = snapshot.fit_summaries();
    // A pod without node-level constraints passes the node-local filters wherever the summary
    // says so, and the node itself need not be read at all.
    let unconstrained = pod.node_name.is_none()
        && pod.node_selector.is_empty()
        && pod.required_node_affinity.is_none()
        && pod.requests.extended().next().is_none();
    let local_ok = |i: usize| {
        summaries.get(i).is_some_and(|s| {
            if unconstrained && s.admits_unconstrained(&wants) {
                true
            } else {
                s.may_fit(&wants)
                    && snapshot
                        .node(NodeId(i as u32))
                        .is_some_and(|info| check_node_local(pod, info).is_ok())
            }
        })
    };
    let mut order = (start..slots).chain(0..start);
    if !needs_inter_pod_filters(snapshot, pod) {
        return order.find(|i| local_ok(*i)).map(|i| NodeId(i as u32));
    }
    let mut topology = snapshot.topology();
    let plan = InterPodPlan::prepare(&mut topology, snapshot, pod);
    order
        .find(|i| local_ok(*i) && plan.check(&topology, NodeId(*i as u32)).is_ok())
        .map(|i| NodeId(i as u32))
}

/// A rejection as the filters produce it: borrowed, so that scanning thousands of nodes allocates
/// nothing. Turned into an [`Unfit`] only when a caller asks why.
#[derive(Debug)]
enum Rejected<'a> {
    NodeUnschedulable,
    NodeName,
    Taint(&'a Taint),
    NodeAffinity,
    NodePorts,
    Resource(&'a str),
    Spread(&'a TopologySpreadConstraint),
    SpreadMissingLabel(&'a TopologySpreadConstraint),
    PodAffinity,
    PodAntiAffinity,
    ExistingPodAntiAffinity,
}

impl Rejected<'_> {
    fn into_unfit(self) -> Unfit {
        match self {
            Rejected::NodeUnschedulable => Unfit::NodeUnschedulable,
            Rejected::NodeName => Unfit::NodeName,
            Rejected::Taint(t) => Unfit::UntoleratedTaint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.as_str(),
            },
            Rejected::NodeAffinity => Unfit::NodeAffinity,
            Rejected::NodePorts => Unfit::NodePorts,
            Rejected::Resource(name) => Unfit::InsufficientResource(name.to_string()),
            Rejected::Spread(c) => Unfit::TopologySpread {
                topology_key: c.topology_key.clone(),
            },
            Rejected::SpreadMissingLabel(c) => Unfit::TopologySpreadMissingLabel {
                topology_key: c.topology_key.clone(),
            },
            Rejected::PodAffinity => Unfit::PodAffinity,
            Rejected::PodAntiAffinity => Unfit::PodAntiAffinity,
            Rejected::ExistingPodAntiAffinity => Unfit::ExistingPodAntiAffinity,
        }
    }
}

fn needs_inter_pod_filters(snapshot: &Snapshot, pod: &Pod) -> bool {
    !pod.pod_affinity.is_empty()
        || !pod.pod_anti_affinity.is_empty()
        || pod.topology_spread.iter().any(is_hard)
        || snapshot.has_pods_with_anti_affinity()
}

fn is_hard(constraint: &TopologySpreadConstraint) -> bool {
    constraint.when_unsatisfiable == UnsatisfiableAction::DoNotSchedule
}

/// Filters 1 to 6: everything that only looks at the node and what is on it.
fn check_node_local<'a>(pod: &'a Pod, info: &'a NodeInfo) -> Result<(), Rejected<'a>> {
    let node = &info.node;
    if node.unschedulable {
        return Err(Rejected::NodeUnschedulable);
    }
    if pod
        .node_name
        .as_ref()
        .is_some_and(|name| *name != node.name)
    {
        return Err(Rejected::NodeName);
    }
    if let Some(t) = first_untolerated(&node.taints, &pod.tolerations) {
        return Err(Rejected::Taint(t));
    }
    if !pod
        .node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v))
        || pod
            .required_node_affinity
            .as_ref()
            .is_some_and(|a| !a.matches(&node.name, &node.labels))
    {
        return Err(Rejected::NodeAffinity);
    }
    // Port 0 means "no host port" and never conflicts.
    if pod
        .host_ports
        .iter()
        .any(|hp| hp.port != 0 && info.host_ports.iter().any(|used| used.conflicts_with(hp)))
    {
        return Err(Rejected::NodePorts);
    }
    check_resources(pod, info)
}

/// NodeResourcesFit, without building the node's free-resource vector.
fn check_resources<'a>(pod: &'a Pod, info: &'a NodeInfo) -> Result<(), Rejected<'a>> {
    let allocatable = &info.node.allocatable;
    let used = &info.requested;
    if used.pods.saturating_add(1) > allocatable.pods {
        return Err(Rejected::Resource(PODS));
    }
    let wants = &pod.requests;
    let short =
        |asked: i64, total: i64, taken: i64| asked > 0 && asked > total.saturating_sub(taken);
    if short(wants.cpu_milli, allocatable.cpu_milli, used.cpu_milli) {
        return Err(Rejected::Resource(CPU));
    }
    if short(wants.memory, allocatable.memory, used.memory) {
        return Err(Rejected::Resource(MEMORY));
    }
    if short(
        wants.ephemeral_storage,
        allocatable.ephemeral_storage,
        used.ephemeral_storage,
    ) {
        return Err(Rejected::Resource(EPHEMERAL_STORAGE));
    }
    for (name, asked) in wants.extended() {
        if short(asked, allocatable.get(name), used.get(name)) {
            return Err(Rejected::Resource(name));
        }
    }
    Ok(())
}

/// One hard spread constraint, resolved against the snapshot indexes.
#[derive(Debug)]
struct SpreadCheck<'a> {
    constraint: &'a TopologySpreadConstraint,
    key: KeyId,
    view: SpreadViewId,
    /// The incoming pod matches the constraint's selector (it would count itself).
    self_match: bool,
}

/// The PreFilter state of the inter-pod filters for one pod: which indexes to read per node.
/// Valid until the snapshot changes.
#[derive(Debug)]
pub(crate) struct InterPodPlan<'a> {
    spread: Vec<SpreadCheck<'a>>,
    /// Per required affinity term: its key and the counts of pods matching *all* terms.
    affinity: Vec<(KeyId, DomainCountsId)>,
    /// No placed pod matches all the affinity terms, and the pod matches them itself: the first
    /// pod of a group with affinity to itself may go anywhere its topology keys exist.
    affinity_first_of_group: bool,
    /// Per required anti-affinity term: its key and the counts of pods matching it.
    anti_affinity: Vec<(KeyId, DomainCountsId)>,
    /// Placed pods' anti-affinity terms that match the incoming pod.
    existing_anti_affinity: Vec<(KeyId, ExistingTermId)>,
}

impl<'a> InterPodPlan<'a> {
    pub(crate) fn prepare(
        topology: &mut TopologyIndex,
        snapshot: &Snapshot,
        pod: &'a Pod,
    ) -> InterPodPlan<'a> {
        let slots = snapshot.slots();
        let namespaces = snapshot.all_namespace_labels();

        let mut spread = Vec::new();
        let hard: Vec<&TopologySpreadConstraint> =
            pod.topology_spread.iter().filter(|c| is_hard(c)).collect();
        if !hard.is_empty() {
            let mut required_keys: Vec<String> =
                hard.iter().map(|c| c.topology_key.clone()).collect();
            required_keys.sort();
            required_keys.dedup();
            let has_node_affinity =
                !pod.node_selector.is_empty() || pod.required_node_affinity.is_some();
            for constraint in hard {
                let key = topology.key_id(&constraint.topology_key, slots);
                // The scheduler counts nothing for an empty selector (and an absent one matches
                // nothing); both become the never-matching clause.
                let counted = constraint.label_selector.clone().filter(|s| !s.is_empty());
                let matcher = PodMatcher {
                    clauses: vec![PodClause::for_spread(counted, &pod.namespace)],
                    skip_terminating: true,
                };
                let eligibility = NodeEligibility {
                    required_keys: required_keys.clone(),
                    node_affinity: (constraint.node_affinity_policy == NodeInclusionPolicy::Honor
                        && has_node_affinity)
                        .then(|| {
                            (
                                pod.node_selector.clone(),
                                pod.required_node_affinity.clone(),
                            )
                        }),
                    tolerations: (constraint.node_taints_policy == NodeInclusionPolicy::Honor)
                        .then(|| pod.tolerations.clone()),
                };
                let view = topology.spread_view(matcher, key, eligibility, slots, namespaces);
                let self_match = constraint
                    .label_selector
                    .as_ref()
                    .is_some_and(|s| s.matches(&pod.labels));
                spread.push(SpreadCheck {
                    constraint,
                    key,
                    view,
                    self_match,
                });
            }
        }

        let mut affinity = Vec::new();
        let mut affinity_first_of_group = false;
        if !pod.pod_affinity.is_empty() {
            let clauses: Vec<PodClause> = pod
                .pod_affinity
                .iter()
                .map(|t| PodClause::from_term(t, &pod.namespace))
                .collect();
            let self_match = clauses.iter().all(|c| c.matches(pod, namespaces));
            let matcher = PodMatcher {
                clauses,
                skip_terminating: false,
            };
            for term in &pod.pod_affinity {
                let key = topology.key_id(&term.topology_key, slots);
                let counts = topology.domain_counts(matcher.clone(), key, slots, namespaces);
                affinity.push((key, counts));
            }
            affinity_first_of_group =
                self_match && affinity.iter().all(|(_, c)| topology.domain_total(*c) == 0);
        }

        let anti_affinity = pod
            .pod_anti_affinity
            .iter()
            .map(|term| {
                let key = topology.key_id(&term.topology_key, slots);
                let matcher = PodMatcher {
                    clauses: vec![PodClause::from_term(term, &pod.namespace)],
                    skip_terminating: false,
                };
                (key, topology.domain_counts(matcher, key, slots, namespaces))
            })
            .collect();

        let existing_anti_affinity = if snapshot.has_pods_with_anti_affinity() {
            topology.existing_terms_matching(pod, namespaces)
        } else {
            Vec::new()
        };

        InterPodPlan {
            spread,
            affinity,
            affinity_first_of_group,
            anti_affinity,
            existing_anti_affinity,
        }
    }

    /// Filters 7 and 8 for one node.
    fn check(&self, topology: &TopologyIndex, node: NodeId) -> Result<(), Rejected<'a>> {
        let id = node.index();
        for s in &self.spread {
            let Some(value) = topology.node_value(s.key, id) else {
                return Err(Rejected::SpreadMissingLabel(s.constraint));
            };
            let numbers = topology.spread_numbers(s.view, value);
            // Fewer eligible domains than minDomains (default 1) make the global minimum 0.
            let min_domains = s.constraint.min_domains.unwrap_or(1).max(1) as u32;
            let global_min = if numbers.domains < min_domains {
                0
            } else {
                i64::from(numbers.global_min)
            };
            let skew = i64::from(numbers.matching) + i64::from(s.self_match) - global_min;
            if skew > i64::from(s.constraint.max_skew) {
                return Err(Rejected::Spread(s.constraint));
            }
        }

        if !self.affinity.is_empty() {
            let mut matching_pods_everywhere = true;
            for (key, counts) in &self.affinity {
                // Every term's topology key must exist on the node, even for the first pod.
                let value = topology.node_value(*key, id).ok_or(Rejected::PodAffinity)?;
                if topology.domain_count(*counts, value) == 0 {
                    matching_pods_everywhere = false;
                }
            }
            if !matching_pods_everywhere && !self.affinity_first_of_group {
                return Err(Rejected::PodAffinity);
            }
        }

        for (key, counts) in &self.anti_affinity {
            if let Some(value) = topology.node_value(*key, id)
                && topology.domain_count(*counts, value) > 0
            {
                return Err(Rejected::PodAntiAffinity);
            }
        }

        for (key, term) in &self.existing_anti_affinity {
            if let Some(value) = topology.node_value(*key, id)
                && topology.existing_term_count(*term, value) > 0
            {
                return Err(Rejected::ExistingPodAntiAffinity);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
