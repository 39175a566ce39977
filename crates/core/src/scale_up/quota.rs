//! CapacityQuotas (`--capacity-quotas-enabled`, docs/capacity-quotas.md): caps on what the nodes a
//! quota's selector matches may add up to, next to the cluster-wide limits of [`super::limits`].
//!
//! A quota's usage is the sum over the snapshot's nodes its selector matches (upcoming placeholders
//! included, virtual-kubelet nodes excluded, as for the cluster-wide limits): cores rounded up per
//! node, memory in bytes, `nodes` one per node, the provider's GPU type (label value) with the
//! node's allocatable GPUs, and every extended resource of the node's capacity under its own name.
//! A template node counts against every quota whose selector matches the template's labels; the
//! plan may add only as many nodes as leave every such quota within its limits.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferroscale_model::capacity::{CapacityQuota, find_condition};
use ferroscale_model::labels::{LabelOperator, LabelSelector, Labels};
use ferroscale_model::resources::NVIDIA_GPU;
use ferroscale_model::{ConditionStatus, Node};

/// The quota condition a validator sets; a quota whose condition is explicitly `False` is not
/// enforced.
pub const VALID_CONDITION: &str = "cluster-autoscaler.kubernetes.io/valid";

/// Reason of the events that say a CapacityQuota capped or stopped a scale-up.
pub const CAPACITY_QUOTA_LIMITED: &str = "ScaleUpLimitedByCapacityQuota";

/// The resource name counting nodes.
pub const NODES_RESOURCE: &str = "nodes";

/// What one node adds to a quota's usage, per resource name.
pub(super) type QuotaDelta = BTreeMap<String, i64>;

/// What one node adds, for each resource a quota can limit.
pub(super) fn quota_delta(node: &Node, gpu_label: &str) -> QuotaDelta {
    let mut delta = QuotaDelta::new();
    delta.insert(
        "cpu".to_string(),
        (node.capacity.cpu_milli.max(0) + 999) / 1000,
    );
    delta.insert("memory".to_string(), node.capacity.memory.max(0));
    delta.insert(NODES_RESOURCE.to_string(), 1);
    for (name, value) in node.capacity.extended() {
        if value > 0 {
            delta.insert(name.to_string(), value);
        }
    }
    if !gpu_label.is_empty()
        && let Some(gpu_type) = node.labels.get(gpu_label)
    {
        let count = node.allocatable.get(NVIDIA_GPU);
        if count > 0 {
            delta.insert(gpu_type.clone(), count);
        }
    }
    delta
}

/// Why a quota is not enforced, if it is not: upstream skips a quota whose selector does not
/// parse, and one a validator marked invalid.
pub fn quota_ignored_reason(quota: &CapacityQuota) -> Option<String> {
    if let Some(condition) = find_condition(&quota.conditions, VALID_CONDITION)
        && condition.status == ConditionStatus::False
    {
        return Some(format!(
            "CapacityQuota {}: condition {VALID_CONDITION} is False ({})",
            quota.name, condition.message
        ));
    }
    if let Some(selector) = &quota.selector
        && let Some(problem) = selector_problem(selector)
    {
        return Some(format!(
            "CapacityQuota {}: spec.selector is invalid: {problem}",
            quota.name
        ));
    }
    None
}

/// What makes a label selector unusable: `In`/`NotIn` need values, `Exists`/`DoesNotExist` take
/// none.
fn selector_problem(selector: &LabelSelector) -> Option<String> {
    selector.match_expressions.iter().find_map(|r| {
        let needs_values = matches!(r.operator, LabelOperator::In | LabelOperator::NotIn);
        match (needs_values, r.values.is_empty()) {
            (true, true) => Some(format!(
                "key {:?}: operator {:?} needs at least one value",
                r.key, r.operator
            )),
            (false, false) => Some(format!(
                "key {:?}: operator {:?} takes no values, got {:?}",
                r.key, r.operator, r.values
            )),
            _ => None,
        }
    })
}

/// One quota's remaining room.
#[derive(Debug, Clone, PartialEq, Eq)]
struct QuotaRoom {
    /// `CapacityQuota/<name>`, upstream's quota ID (what skip reasons name).
    id: String,
    name: String,
    selector: Option<LabelSelector>,
    /// Remaining room per limited resource (never below zero).
    left: BTreeMap<String, i64>,
}

impl QuotaRoom {
    fn applies_to(&self, labels: &Labels) -> bool {
        self.selector.as_ref().is_none_or(|s| s.matches(labels))
    }
}

/// A quota a scale-up would exceed and the resources it would exceed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ExceededQuota {
    pub id: String,
    /// The CapacityQuota's name; `None` for the cluster-wide limits.
    pub quota_name: Option<String>,
    pub resources: Vec<String>,
}

impl ExceededQuota {
    /// Upstream's wording: `exceeded quota: "<id>", resources: cpu, memory`.
    pub fn message(&self) -> String {
        format!(
            "exceeded quota: {:?}, resources: {}",
            self.id,
            self.resources.join(", ")
        )
    }
}

/// The enforced CapacityQuotas with their room, for one plan.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct QuotaRooms {
    rooms: Vec<QuotaRoom>,
}

impl QuotaRooms {
    /// Room left under each enforced quota, given the nodes of the snapshot (`nodes` yields the
    /// nodes that count: the caller leaves virtual-kubelet nodes out).
    pub fn new<'n>(
        quotas: &[Arc<CapacityQuota>],
        nodes: impl Iterator<Item = &'n Node>,
        gpu_label: &str,
    ) -> QuotaRooms {
        let mut rooms: Vec<QuotaRoom> = quotas
            .iter()
            .filter(|q| quota_ignored_reason(q).is_none())
            .map(|q| QuotaRoom {
                id: format!("CapacityQuota/{}", q.name),
                name: q.name.clone(),
                selector: q.selector.clone().filter(|s| !s.is_empty()),
                left: q
                    .limits
                    .iter()
                    .map(|(resource, limit)| (resource.clone(), limit.value().max(0)))
                    .collect(),
            })
            .collect();
        if rooms.is_empty() {
            return QuotaRooms { rooms };
        }
        for node in nodes {
            let matching: Vec<usize> = (0..rooms.len())
                .filter(|&i| rooms[i].applies_to(&node.labels))
                .collect();
            if matching.is_empty() {
                continue;
            }
            let delta = quota_delta(node, gpu_label);
            for i in matching {
                for (resource, left) in rooms[i].left.iter_mut() {
                    if let Some(used) = delta.get(resource) {
                        *left = left.saturating_sub(*used).max(0);
                    }
                }
            }
        }
        QuotaRooms { rooms }
    }

    pub fn is_empty(&self) -> bool {
        self.rooms.is_empty()
    }

    /// Indices of the quotas a node with these labels counts against.
    pub fn matching(&self, labels: &Labels) -> Vec<usize> {
        (0..self.rooms.len())
            .filter(|&i| self.rooms[i].applies_to(labels))
            .collect()
    }

    /// How many nodes adding `delta` each fit under the quotas `matching`.
    pub fn nodes_that_fit(&self, matching: &[usize], delta: &QuotaDelta) -> usize {
        let mut n = usize::MAX;
        for &i in matching {
            for (resource, left) in &self.rooms[i].left {
                let per_node = delta.get(resource).copied().unwrap_or(0);
                if per_node > 0 {
                    n = n.min(usize::try_from(left / per_node).unwrap_or(usize::MAX));
                }
            }
        }
        n
    }

    /// The quotas (of `matching`) that `count` nodes adding `delta` each would exceed.
    pub fn exceeded_by(
        &self,
        matching: &[usize],
        delta: &QuotaDelta,
        count: usize,
    ) -> Vec<ExceededQuota> {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        matching
            .iter()
            .filter_map(|&i| {
                let room = &self.rooms[i];
                let resources: Vec<String> = room
                    .left
                    .iter()
                    .filter(|(resource, left)| {
                        delta.get(*resource).is_some_and(|per_node| {
                            *per_node > 0 && per_node.saturating_mul(count) > **left
                        })
                    })
                    .map(|(resource, _)| resource.clone())
                    .collect();
                (!resources.is_empty()).then(|| ExceededQuota {
                    id: room.id.clone(),
                    quota_name: Some(room.name.clone()),
                    resources,
                })
            })
            .collect()
    }

    /// Takes `count` nodes adding `delta` each out of the quotas `matching`.
    pub fn consume(&mut self, matching: &[usize], delta: &QuotaDelta, count: usize) {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        for &i in matching {
            for (resource, left) in self.rooms[i].left.iter_mut() {
                if let Some(per_node) = delta.get(resource) {
                    *left = left.saturating_sub(per_node.saturating_mul(count)).max(0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::Resources;
    use ferroscale_model::capacity::ApiCondition;
    use ferroscale_model::labels::LabelRequirement;
    use ferroscale_model::quantity::Quantity;

    fn node(name: &str, cpu_milli: i64, memory_gib: i64, pool: &str) -> Node {
        let mut n = Node::new(name, Resources::new(cpu_milli, memory_gib << 30));
        n.labels.insert("pool".to_string(), pool.to_string());
        n
    }

    fn quota(name: &str, pool: Option<&str>, limits: &[(&str, &str)]) -> Arc<CapacityQuota> {
        Arc::new(CapacityQuota {
            name: name.to_string(),
            uid: format!("uid-{name}"),
            generation: 1,
            selector: pool.map(|p| LabelSelector::from_labels([("pool", p)])),
            limits: limits
                .iter()
                .map(|(r, v)| (r.to_string(), Quantity::parse(v).expect("test quantity")))
                .collect(),
            conditions: Vec::new(),
        })
    }

    fn nodes() -> Vec<Node> {
        vec![
            node("a1", 4000, 16, "a"),
            node("a2", 4000, 16, "a"),
            node("b1", 8000, 32, "b"),
        ]
    }

    /// docs/capacity-quotas.md CQ-101: usage counts only the nodes the selector matches.
    #[test]
    fn cq101_usage_counts_matching_nodes_only() {
        let ns = nodes();
        let rooms = QuotaRooms::new(&[quota("qa", Some("a"), &[("cpu", "12")])], ns.iter(), "");
        let template = node("t", 4000, 16, "a");
        let matching = rooms.matching(&template.labels);
        // 12 cores - 8 used by a1, a2 = 4 left: one more 4-core node.
        assert_eq!(
            rooms.nodes_that_fit(&matching, &quota_delta(&template, "")),
            1
        );
        let other = node("t", 4000, 16, "b");
        assert!(rooms.matching(&other.labels).is_empty());
    }

    /// docs/capacity-quotas.md CQ-102: a quota without selector covers every node; `nodes` counts nodes.
    #[test]
    fn cq102_nodes_limit_and_missing_selector_cover_every_node() {
        let ns = nodes();
        let rooms = QuotaRooms::new(&[quota("all", None, &[("nodes", "5")])], ns.iter(), "");
        let template = node("t", 1000, 1, "z");
        let matching = rooms.matching(&template.labels);
        let delta = quota_delta(&template, "");
        assert_eq!(rooms.nodes_that_fit(&matching, &delta), 2);
        let exceeded = rooms.exceeded_by(&matching, &delta, 3);
        assert_eq!(exceeded.len(), 1);
        assert_eq!(
            exceeded[0].message(),
            "exceeded quota: \"CapacityQuota/all\", resources: nodes"
        );
        assert!(rooms.exceeded_by(&matching, &delta, 2).is_empty());
    }

    /// docs/capacity-quotas.md CQ-103: the tightest of several matching quotas wins, and consuming room is remembered.
    #[test]
    fn cq103_every_matching_quota_caps_and_consumption_is_remembered() {
        let ns = nodes();
        let mut rooms = QuotaRooms::new(
            &[
                quota("loose", None, &[("memory", "1Ti")]),
                quota("tight", Some("a"), &[("memory", "64Gi")]),
            ],
            ns.iter(),
            "",
        );
        let template = node("t", 4000, 16, "a");
        let matching = rooms.matching(&template.labels);
        let delta = quota_delta(&template, "");
        assert_eq!(rooms.nodes_that_fit(&matching, &delta), 2);
        rooms.consume(&matching, &delta, 1);
        assert_eq!(rooms.nodes_that_fit(&matching, &delta), 1);
    }

    /// docs/capacity-quotas.md CQ-104: quotas with an invalid selector or a False validity condition are not enforced.
    #[test]
    fn cq104_invalid_quotas_are_ignored() {
        let mut bad_selector = (*quota("bad", Some("a"), &[("cpu", "1")])).clone();
        if let Some(s) = bad_selector.selector.as_mut() {
            s.match_expressions.push(LabelRequirement {
                key: "zone".to_string(),
                operator: LabelOperator::In,
                values: Vec::new(),
            });
        }
        let mut invalid = (*quota("invalid", None, &[("cpu", "1")])).clone();
        invalid.conditions.push(ApiCondition {
            type_: VALID_CONDITION.to_string(),
            status: ConditionStatus::False,
            reason: "Invalid".to_string(),
            message: "nope".to_string(),
            last_transition: ferroscale_model::Timestamp::default(),
            observed_generation: 1,
        });
        assert!(quota_ignored_reason(&bad_selector).is_some());
        assert!(quota_ignored_reason(&invalid).is_some());
        let ns = nodes();
        let rooms = QuotaRooms::new(&[Arc::new(bad_selector), Arc::new(invalid)], ns.iter(), "");
        assert!(rooms.is_empty());
    }

    /// docs/capacity-quotas.md CQ-105: extended resources and the provider's GPU type count under their names.
    #[test]
    fn cq105_extended_resources_and_gpu_types_count() {
        let mut gpu_node = node("g", 8000, 32, "gpu");
        gpu_node.capacity.set(NVIDIA_GPU, 2);
        gpu_node.allocatable.set(NVIDIA_GPU, 2);
        gpu_node
            .labels
            .insert("accelerator".to_string(), "a100".to_string());
        let delta = quota_delta(&gpu_node, "accelerator");
        assert_eq!(delta.get(NVIDIA_GPU), Some(&2));
        assert_eq!(delta.get("a100"), Some(&2));
        let existing = [gpu_node.clone()];
        let rooms = QuotaRooms::new(
            &[quota("gpus", Some("gpu"), &[(NVIDIA_GPU, "3")])],
            existing.iter(),
            "accelerator",
        );
        let matching = rooms.matching(&gpu_node.labels);
        assert_eq!(rooms.nodes_that_fit(&matching, &delta), 0);
    }
}
