//! Synthetic clusters for the scale-up benchmarks (`crates/core/benches`) and the tests that keep
//! them honest (`crates/core/tests/bench_fixtures.rs`); compiled only with the cargo feature
//! `bench-fixtures`, which nothing outside this crate's benches and tests turns on.
//!
//! Every fixture is deterministic: same arguments, same cluster. Pods belong to ReplicaSets so that
//! equivalence groups form as they would in a real cluster.

use std::sync::Arc;

use ferroscale_model::labels::{HOSTNAME, ZONE};
use ferroscale_model::node::ConditionStatus;
use ferroscale_model::{
    LabelSelector, NodeInclusionPolicy, OwnerRef, Pod, PodAffinityTerm, PodCondition, Resources,
    Timestamp, TopologySpreadConstraint, UnsatisfiableAction,
};
use ferroscale_scheduling::Snapshot;

use crate::backoff::NodeGroupBackoff;
use crate::cloud::NodeTemplate;
use crate::options::AutoscalingOptions;
use crate::scale_up::{NodeGroupView, ProviderFacts, ScaleUpInput, ScaleUpPlan, plan_scale_up};

const GIB: i64 = 1 << 30;
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// Everything one `plan_scale_up` call needs.
pub struct ScaleUpFixture {
    pub snapshot: Snapshot,
    pub pending: Vec<Arc<Pod>>,
    pub groups: Vec<NodeGroupView>,
    pub options: AutoscalingOptions,
    pub backoff: NodeGroupBackoff,
    pub now: Timestamp,
}

impl ScaleUpFixture {
    /// The input for one plan, on the fixture's snapshot itself: the plan leaves pods that fit
    /// existing nodes placed. [`ScaleUpFixture::plan_on_branch`] repeats a plan on an unchanged
    /// snapshot.
    pub fn input(&mut self) -> ScaleUpInput<'_> {
        Self::input_on(
            &mut self.snapshot,
            &self.pending,
            &self.groups,
            &self.backoff,
            &self.options,
            self.now,
        )
    }

    /// Plans once on a branch of the snapshot that is reverted afterwards, so every call sees the
    /// same cluster.
    pub fn plan_on_branch(&mut self) -> ScaleUpPlan {
        let mut branch = self.snapshot.branch();
        plan_scale_up(Self::input_on(
            &mut branch,
            &self.pending,
            &self.groups,
            &self.backoff,
            &self.options,
            self.now,
        ))
    }

    fn input_on<'a>(
        snapshot: &'a mut Snapshot,
        pending: &'a [Arc<Pod>],
        groups: &'a [NodeGroupView],
        backoff: &'a NodeGroupBackoff,
        options: &'a AutoscalingOptions,
        now: Timestamp,
    ) -> ScaleUpInput<'a> {
        ScaleUpInput {
            now,
            snapshot,
            pending_pods: pending,
            draining_pods: &[],
            node_groups: groups,
            backoff,
            options,
            priority_config: None,
            provider: ProviderFacts::default(),
            seed: 42,
        }
    }
}

fn node(name: &str, zone: &str, cpu: i64, memory: i64) -> ferroscale_model::Node {
    let mut n = ferroscale_model::Node::new(name, Resources::new(cpu, memory));
    n.allocatable.pods = 110;
    n.capacity.pods = 110;
    n.labels.insert(ZONE.into(), zone.into());
    n.labels.insert(
        "node.kubernetes.io/instance-type".into(),
        format!("c{}", cpu / 1000),
    );
    n
}

fn owned_pod(name: String, owner: &str, cpu: i64, memory: i64) -> Pod {
    let mut p = Pod::new("default", name);
    p.owner_references.push(OwnerRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: owner.into(),
        uid: format!("uid-{owner}"),
        controller: true,
    });
    p.labels.insert("app".into(), owner.into());
    p.requests = Resources::new(cpu, memory);
    p
}

fn unschedulable(mut p: Pod) -> Pod {
    p.scheduled_condition = Some(PodCondition {
        status: ConditionStatus::False,
        reason: "Unschedulable".into(),
        last_transition: None,
    });
    p
}

/// `count` node groups of 16-CPU / 64 GiB nodes (the last ones bigger), spread over three zones.
fn node_groups(count: usize) -> Vec<NodeGroupView> {
    (0..count)
        .map(|i| {
            let cpu = if i % 2 == 0 { 16_000 } else { 32_000 };
            let zone = ZONES[i % ZONES.len()];
            let template = NodeTemplate {
                node: node("example", zone, cpu, cpu / 1000 * 4 * GIB),
                pods: Vec::new(),
                csi_node: None,
                resource_slices: Vec::new(),
            };
            NodeGroupView::new(format!("group-{i}"), 0, 5000, 0, Some(template))
        })
        .collect()
}

/// A cluster of `nodes` nodes each running `pods_per_node` pods that leave no room for the
/// pending pods, plus `pending` unschedulable pods from `shapes` ReplicaSets, and `groups` node
/// groups. Scenario (a) is `busy_cluster(1000, 30, 30_000, 3, 5)`.
pub fn busy_cluster(
    nodes: usize,
    pods_per_node: usize,
    pending: usize,
    shapes: usize,
    groups: usize,
) -> ScaleUpFixture {
    let mut snapshot = Snapshot::new();
    let per_pod_cpu = 15_800 / pods_per_node.max(1) as i64;
    for n in 0..nodes {
        let name = format!("node-{n}");
        let id = snapshot.add_node(Arc::new(node(&name, ZONES[n % 3], 16_000, 64 * GIB)));
        for k in 0..pods_per_node {
            let mut p = owned_pod(
                format!("running-{n}-{k}"),
                &format!("svc-{}", k % 50),
                per_pod_cpu,
                GIB,
            );
            p.node_name = Some(name.clone());
            snapshot.add_pod(id, Arc::new(p));
        }
    }
    let shapes = shapes.max(1);
    let pending = (0..pending)
        .map(|i| {
            let shape = i % shapes;
            let cpu = 500 * (shape as i64 + 1);
            unschedulable(owned_pod(
                format!("pending-{i}"),
                &format!("batch-{shape}"),
                cpu,
                GIB,
            ))
        })
        .map(Arc::new)
        .collect();
    ScaleUpFixture {
        snapshot,
        pending,
        groups: node_groups(groups),
        options: AutoscalingOptions::default(),
        backoff: NodeGroupBackoff::default(),
        now: Timestamp::from_secs(100_000),
    }
}

fn anti_affinity_to_self(mut p: Pod, topology_key: &str) -> Pod {
    let app = p.labels.get("app").cloned().unwrap_or_default();
    p.pod_anti_affinity.push(PodAffinityTerm {
        label_selector: Some(LabelSelector::from_labels([("app", app)])),
        topology_key: topology_key.into(),
        ..PodAffinityTerm::default()
    });
    p
}

fn affinity_to_self(mut p: Pod, topology_key: &str) -> Pod {
    let app = p.labels.get("app").cloned().unwrap_or_default();
    p.pod_affinity.push(PodAffinityTerm {
        label_selector: Some(LabelSelector::from_labels([("app", app)])),
        topology_key: topology_key.into(),
        ..PodAffinityTerm::default()
    });
    p
}

fn spread(mut p: Pod, topology_key: &str) -> Pod {
    let app = p.labels.get("app").cloned().unwrap_or_default();
    p.topology_spread.push(TopologySpreadConstraint {
        max_skew: 1,
        topology_key: topology_key.into(),
        when_unsatisfiable: UnsatisfiableAction::DoNotSchedule,
        label_selector: Some(LabelSelector::from_labels([("app", app)])),
        min_domains: None,
        node_affinity_policy: NodeInclusionPolicy::Honor,
        node_taints_policy: NodeInclusionPolicy::Ignore,
    });
    p
}

/// Scenario (b): `nodes` busy nodes with 30 running pods each, and `pending` pods of which half
/// have required hostname anti-affinity among themselves, a quarter a zone topology spread, and
/// the rest no constraint.
pub fn constrained_cluster(nodes: usize, pending: usize) -> ScaleUpFixture {
    let mut fixture = busy_cluster(nodes, 30, 0, 1, 5);
    fixture.pending = (0..pending)
        .map(|i| {
            let p = owned_pod(format!("pending-{i}"), "", 1000, 2 * GIB);
            let p = match i % 4 {
                0 | 1 => anti_affinity_to_self(relabel(p, "db"), HOSTNAME),
                2 => spread(relabel(p, "web"), ZONE),
                _ => relabel(p, "batch"),
            };
            Arc::new(unschedulable(p))
        })
        .collect();
    fixture
}

/// Gives the pod a ReplicaSet and `app` label named `owner`.
fn relabel(mut p: Pod, owner: &str) -> Pod {
    p.labels.insert("app".into(), owner.into());
    if let Some(o) = p.owner_references.first_mut() {
        o.name = owner.into();
        o.uid = format!("uid-{owner}");
    }
    p
}

/// Scenario (c), Karpenter's mix: `pending` pods in five equal parts (plain, zone spread, hostname
/// spread, zone self-affinity, hostname anti-affinity) onto an empty cluster with `groups` groups.
pub fn karpenter_mix(pending: usize, groups: usize) -> ScaleUpFixture {
    let mut fixture = busy_cluster(0, 0, 0, 1, groups);
    fixture.pending = (0..pending)
        .map(|i| {
            let p = owned_pod(format!("pending-{i}"), "", 1000, 2 * GIB);
            let p = match i % 5 {
                0 => relabel(p, "plain"),
                1 => spread(relabel(p, "zone-spread"), ZONE),
                2 => spread(relabel(p, "host-spread"), HOSTNAME),
                3 => affinity_to_self(relabel(p, "zone-affinity"), ZONE),
                _ => anti_affinity_to_self(relabel(p, "host-anti"), HOSTNAME),
            };
            Arc::new(unschedulable(p))
        })
        .collect();
    fixture
}
