//! Indexes that make the inter-pod filters (pod affinity, pod anti-affinity, topology spread)
//! cost O(1) per node instead of a scan over every pod in the cluster.
//!
//! The kube-scheduler recomputes these counts in PreFilter for every pod it schedules, by walking
//! every pod of the cluster. The autoscaler places tens of thousands of pods per loop, so here the
//! counts live inside the snapshot and follow every mutation (and every undo) incrementally:
//!
//! * **Topology keys** (`kubernetes.io/hostname`, `topology.kubernetes.io/zone`, ...) are registered
//!   the first time a filter needs them; each node's value for a key is interned to a small integer.
//! * **Pod matchers** (label selectors plus namespace scope) count, per node, how many placed pods
//!   they match. Registering one reads no pod: a node's pods are counted the first time a filter
//!   asks about that node, or when a count over every node (below) needs them all. The snapshot
//!   is rebuilt every loop, so a matcher registered with one scan over the placed pods cost a
//!   scan of every pod of the cluster per matcher per loop, even when the filter then looked at a
//!   handful of nodes.
//! * **Domain counts** sum a matcher per value of a topology key (inter-pod affinity and
//!   anti-affinity of the incoming pod). Anti-affinity on a key whose every value is held by one
//!   node at most (`kubernetes.io/hostname` in practice) reads the matcher's count of the node
//!   itself, counted on demand; they become sums per value, with every node counted, when a
//!   value comes to be held by two nodes.
//! * **Spread views** sum a matcher per value of a topology key over the nodes that a spread
//!   constraint considers eligible, and track the global minimum over eligible domains.
//! * **Existing anti-affinity terms** of placed pods count, per topology value, how many placed pods
//!   carry each distinct term (the symmetric check). These are maintained eagerly, because they are
//!   driven by the placed pods rather than by queries.
//!
//! Registration never changes what the snapshot means, so it is not recorded in the undo log:
//! an index registered on a branch stays valid after the branch is reverted, because the undo
//! replays go through the same update functions as the original mutations. The same holds for a
//! node counted on demand: its count follows every later change of its pods, and a node not yet
//! counted is counted from the pods it has when asked.
//!
//! Counting on demand happens behind `&`, through the [`TopologyView`] the filters read: the
//! per-node counts are atomics written once with the number the node's pods give, so a snapshot
//! read from several threads stays `Sync` and every reader sees the same number.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use ferroscale_model::taints::first_untolerated;
use ferroscale_model::{
    LabelSelector, Labels, Node, NodeSelector, OwnerRef, Pod, PodAffinityTerm, ThinVec, Toleration,
};

use crate::filters::PlanCache;
use crate::snapshot::NodeInfo;

/// Interned id of a topology key.
pub(crate) type KeyId = u32;
/// Interned id of a value of one topology key.
pub(crate) type ValueId = u32;
const NO_VALUE: ValueId = u32::MAX;
/// A matcher's count of a node whose pods it has not read yet.
const UNCOUNTED: u32 = u32::MAX;

/// Labels of the namespaces, by name.
pub(crate) type NamespaceLabels = HashMap<String, Labels>;

static NO_LABELS: std::sync::LazyLock<Labels> = std::sync::LazyLock::new(Labels::new);

/// Which namespaces a pod affinity term (or spread constraint) looks at.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum NamespaceScope {
    /// An empty namespace selector selects every namespace.
    All,
    /// The listed names, plus every namespace whose labels match the selector. A namespace the
    /// snapshot knows no labels for is matched as having none.
    Listed {
        names: Vec<String>,
        selector: Option<LabelSelector>,
    },
}

impl NamespaceScope {
    fn contains(&self, namespace: &str, namespaces: &NamespaceLabels) -> bool {
        match self {
            NamespaceScope::All => true,
            NamespaceScope::Listed { names, selector } => {
                names.iter().any(|n| n == namespace)
                    || selector
                        .as_ref()
                        .is_some_and(|s| s.matches(namespaces.get(namespace).unwrap_or(&NO_LABELS)))
            }
        }
    }

    fn only(namespace: &str) -> NamespaceScope {
        NamespaceScope::Listed {
            names: vec![namespace.to_string()],
            selector: None,
        }
    }
}

/// The controller a counted pod must have: default spread constraints count the pods of the
/// incoming pod's ReplicaSet, StatefulSet or ReplicationController.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ControllerKey {
    api_version: String,
    kind: String,
    name: String,
}

impl ControllerKey {
    fn controls(&self, pod: &Pod) -> bool {
        pod.controller().is_some_and(|o| {
            o.name == self.name && o.kind == self.kind && o.api_version == self.api_version
        })
    }
}

/// One label selector in one namespace scope (and, for default spread constraints, one
/// controller). An absent selector matches no pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PodClause {
    pub selector: Option<LabelSelector>,
    pub namespaces: NamespaceScope,
    pub controller: Option<ControllerKey>,
}

impl PodClause {
    /// The clause of an affinity term written by a pod in `owner_namespace`: no names and no
    /// namespace selector mean the owner's namespace; an empty namespace selector means all.
    pub fn from_term(term: &PodAffinityTerm, owner_namespace: &str) -> PodClause {
        let namespaces = match &term.namespace_selector {
            Some(selector) if selector.is_empty() => NamespaceScope::All,
            None if term.namespaces.is_empty() => NamespaceScope::only(owner_namespace),
            selector => {
                let mut names = term.namespaces.clone();
                names.sort();
                names.dedup();
                NamespaceScope::Listed {
                    names,
                    selector: selector.clone(),
                }
            }
        };
        PodClause {
            selector: term.label_selector.clone(),
            namespaces,
            controller: None,
        }
    }

    /// The pods a spread constraint counts: its selector, in the incoming pod's namespace.
    pub fn for_spread(selector: Option<LabelSelector>, namespace: &str) -> PodClause {
        PodClause {
            selector,
            namespaces: NamespaceScope::only(namespace),
            controller: None,
        }
    }

    /// The pods a default spread constraint counts: those of the same controller, in the incoming
    /// pod's namespace.
    pub fn same_controller(owner: &OwnerRef, namespace: &str) -> PodClause {
        PodClause {
            selector: Some(LabelSelector::default()),
            namespaces: NamespaceScope::only(namespace),
            controller: Some(ControllerKey {
                api_version: owner.api_version.clone(),
                kind: owner.kind.clone(),
                name: owner.name.clone(),
            }),
        }
    }

    pub fn matches(&self, pod: &Pod, namespaces: &NamespaceLabels) -> bool {
        let Some(selector) = &self.selector else {
            return false;
        };
        // The selector first: it rules out most pods of a cluster, and reading the namespace too
        // would touch one more allocation per pod.
        selector.matches(&pod.labels)
            && self.namespaces.contains(&pod.namespace, namespaces)
            && self.controller.as_ref().is_none_or(|c| c.controls(pod))
    }
}

/// A conjunction of clauses: a pod is counted when it matches all of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PodMatcher {
    pub clauses: Vec<PodClause>,
    /// Topology spread does not count pods that are being deleted; affinity does.
    pub skip_terminating: bool,
}

impl PodMatcher {
    fn matches(&self, pod: &Pod, namespaces: &NamespaceLabels) -> bool {
        !(self.skip_terminating && pod.deletion_time.is_some())
            && self.clauses.iter().all(|c| c.matches(pod, namespaces))
    }
}

/// Which nodes form domains for one spread constraint of one pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct NodeEligibility {
    /// Every topology key of the pod's hard spread constraints: a node lacking any of them is not
    /// counted for any constraint.
    pub required_keys: Vec<String>,
    /// `nodeAffinityPolicy: Honor` with a pod that has a node selector or required node affinity.
    pub node_affinity: Option<(Labels, Option<Box<NodeSelector>>)>,
    /// `nodeTaintsPolicy: Honor`: the pod's tolerations.
    pub tolerations: Option<ThinVec<Toleration>>,
}

impl NodeEligibility {
    fn admits(&self, node: &Node) -> bool {
        self.required_keys
            .iter()
            .all(|k| node.labels.contains_key(k))
            && self
                .node_affinity
                .as_ref()
                .is_none_or(|(selector, affinity)| {
                    selector.iter().all(|(k, v)| node.labels.get(k) == Some(v))
                        && affinity
                            .as_ref()
                            .is_none_or(|a| a.matches(&node.name, &node.labels))
                })
            && self
                .tolerations
                .as_ref()
                .is_none_or(|t| first_untolerated(&node.taints, t).is_none())
    }
}

#[derive(Debug, Clone)]
struct KeyIndex {
    name: String,
    value_ids: HashMap<String, ValueId>,
    /// Value of this key on each node slot, `NO_VALUE` when the node lacks the label.
    node_values: Vec<ValueId>,
    /// Live nodes holding each value.
    holders: Vec<u32>,
    /// Values held by more than one live node: while zero, a domain of this key is one node.
    shared_values: u32,
}

impl KeyIndex {
    fn new(name: &str) -> KeyIndex {
        KeyIndex {
            name: name.to_string(),
            value_ids: HashMap::new(),
            node_values: Vec::new(),
            holders: Vec::new(),
            shared_values: 0,
        }
    }

    /// Records the value of the node put into slot `id`; true when another live node holds the
    /// same value, which it did not share before.
    fn set_node(&mut self, id: usize, node: &Node) -> bool {
        let value = match node.labels.get(&self.name) {
            Some(v) => {
                let next = self.value_ids.len() as ValueId;
                *self.value_ids.entry(v.clone()).or_insert(next)
            }
            None => NO_VALUE,
        };
        grow(&mut self.node_values, id, NO_VALUE);
        self.node_values[id] = value;
        if value == NO_VALUE {
            return false;
        }
        grow(&mut self.holders, value as usize, 0);
        self.holders[value as usize] += 1;
        let now_shared = self.holders[value as usize] == 2;
        if now_shared {
            self.shared_values += 1;
        }
        now_shared
    }

    /// The node in slot `id` is going away.
    fn unset_node(&mut self, id: usize) {
        let Some(v) = self.value(id) else {
            return;
        };
        if let Some(n) = self.holders.get_mut(v as usize) {
            *n = n.saturating_sub(1);
            if *n == 1 {
                self.shared_values = self.shared_values.saturating_sub(1);
            }
        }
    }

    fn value(&self, id: usize) -> Option<ValueId> {
        self.node_values.get(id).copied().filter(|v| *v != NO_VALUE)
    }
}

#[derive(Debug)]
struct MatcherIndex {
    matcher: PodMatcher,
    /// Matching pods per node slot, `UNCOUNTED` until something reads the slot.
    per_node: Vec<AtomicU32>,
    /// Every live slot is counted. Set when a sum over all nodes needs them, and true from then
    /// on: a node put into a slot later starts counted (at zero, before its pods arrive).
    complete: bool,
    domain_counts: Vec<usize>,
    spread_views: Vec<usize>,
}

impl Clone for MatcherIndex {
    fn clone(&self) -> MatcherIndex {
        MatcherIndex {
            matcher: self.matcher.clone(),
            per_node: self
                .per_node
                .iter()
                .map(|n| AtomicU32::new(n.load(Ordering::Relaxed)))
                .collect(),
            complete: self.complete,
            domain_counts: self.domain_counts.clone(),
            spread_views: self.spread_views.clone(),
        }
    }
}

/// Pods on the node in `slot` that `matcher` counts (none for an empty slot).
fn pods_matching(
    matcher: &PodMatcher,
    slot: Option<&Option<NodeInfo>>,
    namespaces: &NamespaceLabels,
) -> u32 {
    slot.and_then(Option::as_ref).map_or(0, |info| {
        info.pods
            .iter()
            .filter(|p| matcher.matches(p, namespaces))
            .count() as u32
    })
}

impl MatcherIndex {
    fn new(matcher: PodMatcher, slots: usize) -> MatcherIndex {
        MatcherIndex {
            matcher,
            per_node: (0..slots).map(|_| AtomicU32::new(UNCOUNTED)).collect(),
            complete: false,
            domain_counts: Vec::new(),
            spread_views: Vec::new(),
        }
    }

    /// Matching pods on the node in slot `id`, counted from its pods the first time.
    fn count(&self, id: usize, slots: &[Option<NodeInfo>], namespaces: &NamespaceLabels) -> u32 {
        let cell = self.per_node.get(id);
        if let Some(n) = cell.map(|c| c.load(Ordering::Relaxed))
            && n != UNCOUNTED
        {
            return n;
        }
        let n = pods_matching(&self.matcher, slots.get(id), namespaces);
        if let Some(cell) = cell {
            cell.store(n, Ordering::Relaxed);
        }
        n
    }

    /// Counts every live slot not counted yet.
    fn complete(&mut self, slots: &[Option<NodeInfo>], namespaces: &NamespaceLabels) {
        if self.complete {
            return;
        }
        if self.per_node.len() < slots.len() {
            self.per_node
                .resize_with(slots.len(), || AtomicU32::new(UNCOUNTED));
        }
        for (i, slot) in slots.iter().enumerate() {
            let n = self.per_node[i].get_mut();
            if slot.is_some() && *n == UNCOUNTED {
                *n = pods_matching(&self.matcher, Some(slot), namespaces);
            }
        }
        self.complete = true;
    }

    /// The count of slot `id` of a complete matcher.
    fn counted(&self, id: usize) -> u32 {
        self.per_node
            .get(id)
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }
}

#[derive(Debug, Clone)]
struct DomainCounts {
    matcher: usize,
    key: KeyId,
    /// The domains are single nodes (no value of the key is held by two live nodes): the count
    /// of a domain is the matcher's count of its node, and `per_value` and `total` are not kept.
    per_node: bool,
    per_value: Vec<u32>,
    /// Matching pods on nodes that have the key at all.
    total: u64,
}

#[derive(Debug, Clone)]
struct EligibilityIndex {
    eligibility: NodeEligibility,
    per_node: Vec<bool>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SpreadDomain {
    eligible_nodes: u32,
    count: u32,
}

/// The minimum count over the active domains, kept in O(1) amortised per ±1 change with a
/// histogram of how many active domains hold each count.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct MinTracker {
    domains_with_count: Vec<u32>,
    min: u32,
    active: u32,
}

impl MinTracker {
    fn activate(&mut self, count: u32) {
        grow(&mut self.domains_with_count, count as usize, 0);
        self.domains_with_count[count as usize] += 1;
        self.min = if self.active == 0 {
            count
        } else {
            self.min.min(count)
        };
        self.active += 1;
    }

    fn deactivate(&mut self, count: u32) {
        if let Some(slot) = self.domains_with_count.get_mut(count as usize) {
            *slot = slot.saturating_sub(1);
        }
        self.active = self.active.saturating_sub(1);
        if self.active == 0 {
            self.min = 0;
        } else if count == self.min {
            self.advance_min();
        }
    }

    fn change(&mut self, from: u32, to: u32) {
        if let Some(slot) = self.domains_with_count.get_mut(from as usize) {
            *slot = slot.saturating_sub(1);
        }
        grow(&mut self.domains_with_count, to as usize, 0);
        self.domains_with_count[to as usize] += 1;
        if to < self.min {
            self.min = to;
        } else if from == self.min {
            self.advance_min();
        }
    }

    fn advance_min(&mut self) {
        let start = self.min as usize;
        if let Some(offset) = self.domains_with_count[start.min(self.domains_with_count.len())..]
            .iter()
            .position(|n| *n > 0)
        {
            self.min = (start + offset) as u32;
        }
    }
}

#[derive(Debug, Clone)]
struct SpreadView {
    key: KeyId,
    eligibility: usize,
    domains: Vec<SpreadDomain>,
    tracker: MinTracker,
}

#[derive(Debug, Clone)]
struct ExistingTerm {
    clause: PodClause,
    key: KeyId,
    /// Placed pods carrying this term, per value of the key.
    per_value: Vec<u32>,
    /// Placed pods carrying this term anywhere (also on nodes lacking the key).
    carriers: u32,
}

/// Id of a registered domain count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DomainCountsId(usize);
/// Id of a registered spread view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpreadViewId(usize);
/// Id of an existing pod's anti-affinity term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExistingTermId(usize);

/// What a spread constraint sees in one domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpreadNumbers {
    /// Matching pods in the node's domain (0 if the domain is not eligible).
    pub matching: u32,
    /// Minimum over eligible domains.
    pub global_min: u32,
    /// Number of eligible domains.
    pub domains: u32,
}

/// Every index of one snapshot, owned by it: filters register what they need through the
/// snapshot's `&mut` entry points, and read it through `&`.
#[derive(Debug, Default, Clone)]
pub(crate) struct TopologyIndex {
    keys: Vec<KeyIndex>,
    key_ids: HashMap<String, KeyId>,
    matchers: Vec<MatcherIndex>,
    matcher_ids: HashMap<PodMatcher, usize>,
    domain_counts: Vec<DomainCounts>,
    domain_count_ids: HashMap<(usize, KeyId), usize>,
    eligibilities: Vec<EligibilityIndex>,
    eligibility_ids: HashMap<NodeEligibility, usize>,
    spread_views: Vec<SpreadView>,
    spread_view_ids: HashMap<(usize, KeyId, usize), usize>,
    existing_terms: Vec<ExistingTerm>,
    existing_term_ids: HashMap<(PodClause, KeyId), usize>,
    /// Prepared filter plans by pod shape; they hold ids into the indexes above.
    plans: PlanCache,
}

/// The indexes as the filters read them, with the nodes and namespaces that the counts made on
/// demand read.
#[derive(Clone, Copy)]
pub(crate) struct TopologyView<'a> {
    pub index: &'a TopologyIndex,
    pub slots: &'a [Option<NodeInfo>],
    pub namespaces: &'a NamespaceLabels,
}

impl TopologyView<'_> {
    pub fn node_value(&self, key: KeyId, node: usize) -> Option<ValueId> {
        self.index.node_value(key, node)
    }

    /// Matching pods in the domain of the node in slot `node`, whose value of the key is
    /// `value`.
    pub fn domain_count(&self, id: DomainCountsId, node: usize, value: ValueId) -> u32 {
        self.index
            .domain_count(id, node, value, self.slots, self.namespaces)
    }

    pub fn domain_total(&self, id: DomainCountsId) -> u64 {
        self.index.domain_total(id)
    }

    pub fn spread_numbers(&self, id: SpreadViewId, value: ValueId) -> SpreadNumbers {
        self.index.spread_numbers(id, value)
    }

    pub fn existing_term_count(&self, id: ExistingTermId, value: ValueId) -> u32 {
        self.index.existing_term_count(id, value)
    }
}

fn grow<T: Clone>(v: &mut Vec<T>, index: usize, fill: T) {
    if v.len() <= index {
        v.resize(index + 1, fill);
    }
}

fn live(slots: &[Option<NodeInfo>]) -> impl Iterator<Item = (usize, &NodeInfo)> {
    slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.as_ref().map(|info| (i, info)))
}

impl TopologyIndex {
    // ----- registration (lazy) -----

    pub fn key_id(&mut self, name: &str, slots: &[Option<NodeInfo>]) -> KeyId {
        if let Some(id) = self.key_ids.get(name) {
            return *id;
        }
        let mut key = KeyIndex::new(name);
        grow(
            &mut key.node_values,
            slots.len().saturating_sub(1),
            NO_VALUE,
        );
        for (i, info) in live(slots) {
            key.set_node(i, &info.node);
        }
        let id = self.keys.len() as KeyId;
        self.keys.push(key);
        self.key_ids.insert(name.to_string(), id);
        id
    }

    fn matcher_id(&mut self, matcher: PodMatcher, slots: &[Option<NodeInfo>]) -> usize {
        if let Some(id) = self.matcher_ids.get(&matcher) {
            return *id;
        }
        // No pod is read here: see the module's documentation.
        let id = self.matchers.len();
        self.matchers
            .push(MatcherIndex::new(matcher.clone(), slots.len()));
        self.matcher_ids.insert(matcher, id);
        id
    }

    /// The matcher's counts summed per value of `key`, with the sum over every value: what
    /// inter-pod affinity reads.
    pub fn domain_counts(
        &mut self,
        matcher: PodMatcher,
        key: KeyId,
        slots: &[Option<NodeInfo>],
        namespaces: &NamespaceLabels,
    ) -> DomainCountsId {
        let id = self.register_domain_counts(matcher, key, false, slots, namespaces);
        self.sum_domain_counts(id.0, slots, namespaces);
        id
    }

    /// The matcher's counts per domain of `key`, without the sum over every value: what
    /// inter-pod anti-affinity reads. While every value of the key is held by one node at most,
    /// a domain's count is its node's, counted when a filter first asks about the node.
    pub fn anti_affinity_counts(
        &mut self,
        matcher: PodMatcher,
        key: KeyId,
        slots: &[Option<NodeInfo>],
        namespaces: &NamespaceLabels,
    ) -> DomainCountsId {
        let per_node = self.keys[key as usize].shared_values == 0;
        self.register_domain_counts(matcher, key, per_node, slots, namespaces)
    }

    fn register_domain_counts(
        &mut self,
        matcher: PodMatcher,
        key: KeyId,
        per_node: bool,
        slots: &[Option<NodeInfo>],
        namespaces: &NamespaceLabels,
    ) -> DomainCountsId {
        let m = self.matcher_id(matcher, slots);
        if let Some(id) = self.domain_count_ids.get(&(m, key)) {
            return DomainCountsId(*id);
        }
        let id = self.domain_counts.len();
        self.domain_counts.push(DomainCounts {
            matcher: m,
            key,
            per_node: true,
            per_value: Vec::new(),
            total: 0,
        });
        self.matchers[m].domain_counts.push(id);
        self.domain_count_ids.insert((m, key), id);
        if !per_node {
            self.sum_domain_counts(id, slots, namespaces);
        }
        DomainCountsId(id)
    }

    /// Turns domain counts read per node into sums per value, counting every node; from then on
    /// [`Self::pod_changed`] keeps the sums.
    fn sum_domain_counts(
        &mut self,
        id: usize,
        slots: &[Option<NodeInfo>],
        namespaces: &NamespaceLabels,
    ) {
        let counts = &mut self.domain_counts[id];
        if !counts.per_node {
            return;
        }
        let matcher = &mut self.matchers[counts.matcher];
        matcher.complete(slots, namespaces);
        let key_index = &self.keys[counts.key as usize];
        counts.per_value.clear();
        counts.total = 0;
        for (i, _) in live(slots) {
            let n = matcher.counted(i);
            if let Some(v) = key_index.value(i) {
                grow(&mut counts.per_value, v as usize, 0);
                counts.per_value[v as usize] += n;
                counts.total += u64::from(n);
            }
        }
        counts.per_node = false;
    }

    fn eligibility_id(
        &mut self,
        eligibility: NodeEligibility,
        slots: &[Option<NodeInfo>],
    ) -> usize {
        if let Some(id) = self.eligibility_ids.get(&eligibility) {
            return *id;
        }
        let mut per_node = vec![false; slots.len()];
        for (i, info) in live(slots) {
            per_node[i] = eligibility.admits(&info.node);
        }
        let id = self.eligibilities.len();
        self.eligibilities.push(EligibilityIndex {
            eligibility: eligibility.clone(),
            per_node,
        });
        self.eligibility_ids.insert(eligibility, id);
        id
    }

    pub fn spread_view(
        &mut self,
        matcher: PodMatcher,
        key: KeyId,
        eligibility: NodeEligibility,
        slots: &[Option<NodeInfo>],
        namespaces: &NamespaceLabels,
    ) -> SpreadViewId {
        let m = self.matcher_id(matcher, slots);
        let e = self.eligibility_id(eligibility, slots);
        if let Some(id) = self.spread_view_ids.get(&(m, key, e)) {
            return SpreadViewId(*id);
        }
        // The global minimum needs every domain's count.
        self.matchers[m].complete(slots, namespaces);
        let mut domains: Vec<SpreadDomain> = Vec::new();
        let key_index = &self.keys[key as usize];
        for (i, _) in live(slots) {
            if !self.eligibilities[e]
                .per_node
                .get(i)
                .copied()
                .unwrap_or(false)
            {
                continue;
            }
            if let Some(v) = key_index.value(i) {
                grow(&mut domains, v as usize, SpreadDomain::default());
                let d = &mut domains[v as usize];
                d.eligible_nodes += 1;
                d.count += self.matchers[m].counted(i);
            }
        }
        let mut tracker = MinTracker::default();
        for d in domains.iter().filter(|d| d.eligible_nodes > 0) {
            tracker.activate(d.count);
        }
        let id = self.spread_views.len();
        self.spread_views.push(SpreadView {
            key,
            eligibility: e,
            domains,
            tracker,
        });
        self.matchers[m].spread_views.push(id);
        self.spread_view_ids.insert((m, key, e), id);
        SpreadViewId(id)
    }

    /// Forgets every lazily registered matcher and what depends on it; called when namespace
    /// labels change, since namespace selectors were evaluated against the old labels.
    pub fn forget_matchers(&mut self) {
        self.matchers.clear();
        self.matcher_ids.clear();
        self.domain_counts.clear();
        self.domain_count_ids.clear();
        self.spread_views.clear();
        self.spread_view_ids.clear();
        self.plans.clear();
    }

    // ----- queries -----

    pub fn node_value(&self, key: KeyId, node: usize) -> Option<ValueId> {
        self.keys.get(key as usize).and_then(|k| k.value(node))
    }

    /// Matching pods in the domain of the node in slot `node`, whose value of the key is
    /// `value`.
    fn domain_count(
        &self,
        id: DomainCountsId,
        node: usize,
        value: ValueId,
        slots: &[Option<NodeInfo>],
        namespaces: &NamespaceLabels,
    ) -> u32 {
        let Some(counts) = self.domain_counts.get(id.0) else {
            return 0;
        };
        if counts.per_node {
            // No other live node holds `value` (else the counts were summed per value).
            return self.matchers[counts.matcher].count(node, slots, namespaces);
        }
        counts.per_value.get(value as usize).copied().unwrap_or(0)
    }

    /// Matching pods on every node that has the key (kept only for [`Self::domain_counts`]).
    pub fn domain_total(&self, id: DomainCountsId) -> u64 {
        self.domain_counts.get(id.0).map_or(0, |c| c.total)
    }

    pub fn spread_numbers(&self, id: SpreadViewId, value: ValueId) -> SpreadNumbers {
        let Some(view) = self.spread_views.get(id.0) else {
            return SpreadNumbers {
                matching: 0,
                global_min: 0,
                domains: 0,
            };
        };
        let domain = view
            .domains
            .get(value as usize)
            .copied()
            .unwrap_or_default();
        SpreadNumbers {
            matching: if domain.eligible_nodes > 0 {
                domain.count
            } else {
                0
            },
            global_min: view.tracker.min,
            domains: view.tracker.active,
        }
    }

    /// The placed pods' anti-affinity terms that `pod` matches, with their topology keys.
    /// Terms are never forgotten (a term whose carriers all left just counts zero everywhere),
    /// so a plan can remember how many it has seen and look only at newer ones.
    pub fn existing_terms_matching(
        &self,
        pod: &Pod,
        namespaces: &NamespaceLabels,
        skip: usize,
    ) -> Vec<(KeyId, ExistingTermId)> {
        self.existing_terms
            .iter()
            .enumerate()
            .skip(skip)
            .filter(|(_, t)| t.clause.matches(pod, namespaces))
            .map(|(i, t)| (t.key, ExistingTermId(i)))
            .collect()
    }

    /// Number of distinct anti-affinity terms placed pods have ever brought.
    pub fn existing_term_count_total(&self) -> usize {
        self.existing_terms.len()
    }

    pub fn plans(&mut self) -> &mut PlanCache {
        &mut self.plans
    }

    pub fn existing_term_count(&self, id: ExistingTermId, value: ValueId) -> u32 {
        self.existing_terms
            .get(id.0)
            .and_then(|t| t.per_value.get(value as usize))
            .copied()
            .unwrap_or(0)
    }

    // ----- maintenance (called by every snapshot mutation and every undo) -----

    /// A node has been put into slot `id`, without its pods (they follow through
    /// [`Self::pod_changed`]); `slots` already holds it.
    pub fn node_added(
        &mut self,
        id: usize,
        node: &Node,
        slots: &[Option<NodeInfo>],
        namespaces: &NamespaceLabels,
    ) {
        let mut now_shared: Vec<KeyId> = Vec::new();
        for (k, key) in self.keys.iter_mut().enumerate() {
            if key.set_node(id, node) {
                now_shared.push(k as KeyId);
            }
        }
        for m in &mut self.matchers {
            if m.per_node.len() <= id {
                m.per_node.resize_with(id + 1, || AtomicU32::new(UNCOUNTED));
            }
            // Counted: the node has no pod yet.
            *m.per_node[id].get_mut() = 0;
        }
        for e in &mut self.eligibilities {
            grow(&mut e.per_node, id, false);
            e.per_node[id] = e.eligibility.admits(node);
        }
        for view in &mut self.spread_views {
            if !self.eligibilities[view.eligibility].per_node[id] {
                continue;
            }
            let Some(v) = self.keys[view.key as usize].value(id) else {
                continue;
            };
            grow(&mut view.domains, v as usize, SpreadDomain::default());
            let d = &mut view.domains[v as usize];
            d.eligible_nodes += 1;
            if d.eligible_nodes == 1 {
                view.tracker.activate(d.count);
            }
        }
        // A domain of two nodes is no longer one node's count.
        for c in 0..self.domain_counts.len() {
            if self.domain_counts[c].per_node && now_shared.contains(&self.domain_counts[c].key) {
                self.sum_domain_counts(c, slots, namespaces);
            }
        }
    }

    /// The node in slot `id` is going away; its pods have already been removed.
    pub fn node_removed(&mut self, id: usize) {
        for key in &mut self.keys {
            key.unset_node(id);
        }
        for view in &mut self.spread_views {
            if !self.eligibilities[view.eligibility]
                .per_node
                .get(id)
                .copied()
                .unwrap_or(false)
            {
                continue;
            }
            let Some(v) = self.keys[view.key as usize].value(id) else {
                continue;
            };
            let Some(d) = view.domains.get_mut(v as usize) else {
                continue;
            };
            d.eligible_nodes = d.eligible_nodes.saturating_sub(1);
            if d.eligible_nodes == 0 {
                view.tracker.deactivate(d.count);
            }
        }
        for e in &mut self.eligibilities {
            if let Some(slot) = e.per_node.get_mut(id) {
                *slot = false;
            }
        }
    }

    /// A pod was placed on (`adding`) or removed from the node in slot `id`.
    pub fn pod_changed(
        &mut self,
        id: usize,
        pod: &Pod,
        adding: bool,
        slots: &[Option<NodeInfo>],
        namespaces: &NamespaceLabels,
    ) {
        let step = |n: u32| if adding { n + 1 } else { n.saturating_sub(1) };
        for m in &mut self.matchers {
            // A node not counted yet is counted from its pods when asked; a complete matcher
            // (every sum over nodes) has every live node counted.
            let Some(count) = m.per_node.get_mut(id).map(AtomicU32::get_mut) else {
                continue;
            };
            if *count == UNCOUNTED || !m.matcher.matches(pod, namespaces) {
                continue;
            }
            *count = step(*count);
            for &c in &m.domain_counts {
                let counts = &mut self.domain_counts[c];
                if counts.per_node {
                    continue;
                }
                let Some(v) = self.keys[counts.key as usize].value(id) else {
                    continue;
                };
                grow(&mut counts.per_value, v as usize, 0);
                counts.per_value[v as usize] = step(counts.per_value[v as usize]);
                counts.total = if adding {
                    counts.total + 1
                } else {
                    counts.total.saturating_sub(1)
                };
            }
            for &s in &m.spread_views {
                let view = &mut self.spread_views[s];
                if !self.eligibilities[view.eligibility]
                    .per_node
                    .get(id)
                    .copied()
                    .unwrap_or(false)
                {
                    continue;
                }
                let Some(v) = self.keys[view.key as usize].value(id) else {
                    continue;
                };
                grow(&mut view.domains, v as usize, SpreadDomain::default());
                let d = &mut view.domains[v as usize];
                let before = d.count;
                d.count = step(before);
                if d.eligible_nodes > 0 && d.count != before {
                    view.tracker.change(before, d.count);
                }
            }
        }
        for term in &pod.pod_anti_affinity {
            let key = self.key_id(&term.topology_key, slots);
            let clause = PodClause::from_term(term, &pod.namespace);
            let t = match self.existing_term_ids.get(&(clause.clone(), key)) {
                Some(t) => *t,
                None => {
                    let t = self.existing_terms.len();
                    self.existing_terms.push(ExistingTerm {
                        clause: clause.clone(),
                        key,
                        per_value: Vec::new(),
                        carriers: 0,
                    });
                    self.existing_term_ids.insert((clause, key), t);
                    t
                }
            };
            let value = self.keys[key as usize].value(id);
            let existing = &mut self.existing_terms[t];
            existing.carriers = step(existing.carriers);
            if let Some(v) = value {
                grow(&mut existing.per_value, v as usize, 0);
                existing.per_value[v as usize] = step(existing.per_value[v as usize]);
            }
        }
    }

    /// How many node slots the registered matchers have counted so far. For tests.
    #[cfg(test)]
    pub fn nodes_counted(&self) -> usize {
        self.matchers
            .iter()
            .flat_map(|m| &m.per_node)
            .filter(|n| n.load(Ordering::Relaxed) != UNCOUNTED)
            .count()
    }

    /// Recomputes every registered index from the placed pods and compares; panics on the first
    /// difference. For tests.
    #[cfg(test)]
    pub fn assert_consistent(&self, slots: &[Option<NodeInfo>], namespaces: &NamespaceLabels) {
        for key in &self.keys {
            let mut holders: HashMap<ValueId, u32> = HashMap::new();
            for (i, info) in live(slots) {
                let expected = info.node.labels.get(&key.name).map(|v| key.value_ids[v]);
                assert_eq!(key.value(i), expected, "value of {} on node {i}", key.name);
                if let Some(v) = expected {
                    *holders.entry(v).or_default() += 1;
                }
            }
            for (v, n) in key.holders.iter().enumerate() {
                let expected = holders.get(&(v as ValueId)).copied().unwrap_or(0);
                assert_eq!(*n, expected, "holders of value {v} of {}", key.name);
            }
            let shared = holders.values().filter(|n| **n > 1).count() as u32;
            assert_eq!(key.shared_values, shared, "shared values of {}", key.name);
        }
        for m in &self.matchers {
            for (i, info) in live(slots) {
                let expected = info
                    .pods
                    .iter()
                    .filter(|p| m.matcher.matches(p, namespaces))
                    .count();
                let counted = m
                    .per_node
                    .get(i)
                    .map_or(UNCOUNTED, |n| n.load(Ordering::Relaxed));
                assert!(
                    !m.complete || counted != UNCOUNTED,
                    "node {i} not counted by a complete matcher"
                );
                if counted != UNCOUNTED {
                    assert_eq!(counted as usize, expected, "matcher count of node {i}");
                }
            }
            for &c in &m.domain_counts {
                let counts = &self.domain_counts[c];
                if counts.per_node {
                    assert_eq!(
                        self.keys[counts.key as usize].shared_values, 0,
                        "domains of one node counted per node"
                    );
                    continue;
                }
                assert!(m.complete, "sums per value of an incomplete matcher");
                let mut per_value: HashMap<ValueId, u32> = HashMap::new();
                for (i, _) in live(slots) {
                    if let Some(v) = self.keys[counts.key as usize].value(i) {
                        *per_value.entry(v).or_default() += m.counted(i);
                    }
                }
                for (v, n) in counts.per_value.iter().enumerate() {
                    assert_eq!(
                        *n,
                        per_value.get(&(v as ValueId)).copied().unwrap_or(0),
                        "domain"
                    );
                }
                assert_eq!(
                    counts.total,
                    per_value.values().map(|n| u64::from(*n)).sum::<u64>()
                );
            }
            for &s in &m.spread_views {
                assert!(m.complete, "spread view of an incomplete matcher");
                let view = &self.spread_views[s];
                let mut domains: HashMap<ValueId, SpreadDomain> = HashMap::new();
                for (i, info) in live(slots) {
                    let eligible = self.eligibilities[view.eligibility]
                        .eligibility
                        .admits(&info.node);
                    assert_eq!(self.eligibilities[view.eligibility].per_node[i], eligible);
                    if let (true, Some(v)) = (eligible, self.keys[view.key as usize].value(i)) {
                        let d = domains.entry(v).or_default();
                        d.eligible_nodes += 1;
                        d.count += m.counted(i);
                    }
                }
                for (v, d) in view.domains.iter().enumerate() {
                    let expected = domains.get(&(v as ValueId)).copied().unwrap_or_default();
                    assert_eq!(d.eligible_nodes, expected.eligible_nodes, "eligible nodes");
                    if d.eligible_nodes > 0 {
                        assert_eq!(d.count, expected.count, "spread count");
                    }
                }
                let active: Vec<u32> = domains.values().map(|d| d.count).collect();
                assert_eq!(view.tracker.active as usize, active.len(), "active domains");
                if let Some(min) = active.iter().min() {
                    assert_eq!(view.tracker.min, *min, "global minimum");
                }
            }
        }
        for term in &self.existing_terms {
            let mut per_value: HashMap<ValueId, u32> = HashMap::new();
            let mut carriers = 0;
            for (i, info) in live(slots) {
                let n = info
                    .pods
                    .iter()
                    .flat_map(|p| p.pod_anti_affinity.iter().map(move |t| (p, t)))
                    .filter(|(p, t)| {
                        PodClause::from_term(t, &p.namespace) == term.clause
                            && self.key_ids.get(&t.topology_key) == Some(&term.key)
                    })
                    .count() as u32;
                carriers += n;
                if let Some(v) = self.keys[term.key as usize].value(i) {
                    *per_value.entry(v).or_default() += n;
                }
            }
            assert_eq!(term.carriers, carriers, "anti-affinity carriers");
            for (v, n) in term.per_value.iter().enumerate() {
                assert_eq!(
                    *n,
                    per_value.get(&(v as ValueId)).copied().unwrap_or(0),
                    "anti counts"
                );
            }
        }
    }
}
