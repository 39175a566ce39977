//! Synthetic clusters for the scale-down benchmarks and tests.
//!
//! Every fixture is deterministic. Nodes are either busy (above the utilization threshold) or
//! underutilized; pods belong to ReplicaSets that exist, so the drainability rules pass and the
//! work is the removal simulation itself.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::labels::ZONE;
use ferroscale_model::{Node, OwnerRef, Pod, PodPhase, Resources, Timestamp};
use ferroscale_scheduling::Snapshot;

use ferroscale_core::options::AutoscalingOptions;
use ferroscale_core::parallel::Workers;
use ferroscale_core::scale_down::{
    ControllerIndex, DeletionsInProgress, ScaleDownInput, ScaleDownPlan, ScaleDownState,
    plan_scale_down,
};
use ferroscale_core::scale_up::{NodeGroupView, ProviderFacts};

const GIB: i64 = 1 << 30;
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const OWNERS: usize = 50;

/// Everything one `plan_scale_down` call needs. The plan reverts its snapshot changes, so the
/// fixture can be planned again and again.
pub struct ScaleDownFixture {
    pub snapshot: Snapshot,
    pub groups: Vec<NodeGroupView>,
    pub group_of: HashMap<String, usize>,
    pub controllers: ControllerIndex,
    pub deletions: DeletionsInProgress,
    pub state: ScaleDownState,
    pub options: AutoscalingOptions,
    pub now: Timestamp,
    /// Underutilized nodes in the cluster.
    pub underutilized: usize,
    /// The threads the plan may use; one unless a benchmark or test says otherwise.
    pub workers: Workers,
}

impl ScaleDownFixture {
    pub fn plan(&mut self) -> ScaleDownPlan {
        let group_of = &self.group_of;
        let lookup = |node: &Node| group_of.get(node.name.as_str()).copied();
        let provider = ProviderFacts::default();
        plan_scale_down(ScaleDownInput {
            now: self.now,
            snapshot: &mut self.snapshot,
            node_groups: &self.groups,
            node_group_of: &lookup,
            pdbs: &[],
            controllers: &self.controllers,
            deletions_in_progress: &self.deletions,
            state: &self.state,
            options: &self.options,
            provider: &provider,
            scale_down_disabled_this_loop: false,
            workers: &self.workers,
            measure_memo: None,
        })
    }

    /// Plans once and keeps the resulting state, as the loop does; returns the plan.
    pub fn advance(&mut self, by: Duration) -> ScaleDownPlan {
        let plan = self.plan();
        self.state = plan.next_state.clone();
        self.now = self.now + by;
        plan
    }
}

/// The shape of a synthetic cluster: `nodes` nodes of `node_cpu_milli` CPUs in one group with
/// min size `group_min`; the first `nodes - underutilized` carry `busy_pods` pods of
/// `pod_cpu_milli`, the rest `idle_pods` pods.
#[derive(Debug, Clone, Copy)]
pub struct ClusterShape {
    pub nodes: usize,
    pub underutilized: usize,
    pub node_cpu_milli: i64,
    pub pod_cpu_milli: i64,
    pub busy_pods: usize,
    pub idle_pods: usize,
    pub group_min: usize,
}

impl ClusterShape {
    /// Upstream scalability scenario 4: 1,000 nodes, ~52,000 pods, 700 nodes ~70 % full and 300
    /// ~30 % full, group min size 970.
    pub fn upstream_scenario_4() -> ClusterShape {
        ClusterShape {
            nodes: 1000,
            underutilized: 300,
            node_cpu_milli: 9000,
            pod_cpu_milli: 100,
            busy_pods: 63,
            idle_pods: 27,
            group_min: 970,
        }
    }

    /// 5,000 nodes, 150,000 pods, 20 % of the nodes underutilized (35 %), the rest 85 % full.
    pub fn large_20_percent_underutilized() -> ClusterShape {
        ClusterShape {
            nodes: 5000,
            underutilized: 1000,
            node_cpu_milli: 8000,
            pod_cpu_milli: 200,
            busy_pods: 34,
            idle_pods: 14,
            group_min: 0,
        }
    }

    /// Scenario 4's proportions at another size (for the scaling table).
    pub fn scenario_4_scaled(nodes: usize) -> ClusterShape {
        let underutilized = nodes * 3 / 10;
        ClusterShape {
            nodes,
            underutilized,
            group_min: nodes - nodes.min(30),
            ..ClusterShape::upstream_scenario_4()
        }
    }

    pub fn pod_count(&self) -> usize {
        (self.nodes - self.underutilized) * self.busy_pods + self.underutilized * self.idle_pods
    }
}

fn node(name: String, zone: &str, cpu: i64) -> Node {
    let mut n = Node::new(name, Resources::new(cpu, 64 * GIB));
    n.allocatable.pods = 110;
    n.capacity.pods = 110;
    n.labels.insert(ZONE.into(), zone.into());
    n
}

fn pod(name: String, owner: usize, node: &str, cpu: i64) -> Pod {
    let owner_name = format!("app-{owner}");
    let mut p = Pod::new("default", name);
    p.owner_references.push(OwnerRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: owner_name.clone(),
        uid: format!("uid-{owner_name}"),
        controller: true,
    });
    p.labels.insert("app".into(), owner_name);
    p.requests = Resources::new(cpu, 256 << 20);
    p.node_name = Some(node.into());
    p.phase = PodPhase::Running;
    p
}

/// Builds the cluster. With `steady`, the state already tracks every underutilized node as
/// unneeded for eleven minutes (the loop has run for a while), so the search-stop rule lets the
/// whole candidate set be simulated, the worst case; otherwise the state is fresh.
pub fn underutilized_cluster(shape: ClusterShape, steady: bool) -> ScaleDownFixture {
    let now = Timestamp::from_secs(1_000_000);
    let mut snapshot = Snapshot::new();
    let mut group_of = HashMap::with_capacity(shape.nodes);
    let mut state = ScaleDownState::new();
    let busy = shape.nodes - shape.underutilized.min(shape.nodes);
    let mut pod_index = 0usize;
    for i in 0..shape.nodes {
        let name = format!("node-{i:05}");
        let id = snapshot.add_node(Arc::new(node(
            name.clone(),
            ZONES[i % ZONES.len()],
            shape.node_cpu_milli,
        )));
        let pods = if i < busy {
            shape.busy_pods
        } else {
            shape.idle_pods
        };
        for _ in 0..pods {
            let p = pod(
                format!("pod-{pod_index:06}"),
                pod_index % OWNERS,
                &name,
                shape.pod_cpu_milli,
            );
            snapshot.add_pod(id, Arc::new(p));
            pod_index += 1;
        }
        if steady && i >= busy {
            state
                .unneeded_since
                .insert(name.clone(), now - Duration::from_secs(660));
        }
        group_of.insert(name, 0);
    }
    let mut controllers = ControllerIndex::new();
    let per_owner = i32::try_from(pod_index / OWNERS).unwrap_or(i32::MAX);
    for owner in 0..OWNERS {
        controllers.insert(
            "ReplicaSet",
            "default",
            format!("app-{owner}"),
            ferroscale_core::scale_down::ControllerReplicas {
                desired: per_owner,
                current: per_owner,
            },
        );
    }
    if steady {
        state.last_loop = Some(now - Duration::from_secs(10));
        state.shortest_loop_interval = Some(Duration::from_secs(10));
    }
    ScaleDownFixture {
        workers: Workers::sequential(),
        snapshot,
        groups: vec![NodeGroupView::new(
            "pool",
            shape.group_min,
            shape.nodes,
            shape.nodes,
            None,
        )],
        group_of,
        controllers,
        deletions: DeletionsInProgress::default(),
        state,
        options: AutoscalingOptions::default(),
        now,
        underutilized: shape.underutilized,
    }
}
