//! Synthetic clusters for the engine's benchmarks (`crates/core/benches`) and the tests that keep
//! them honest (`crates/core/tests/bench_fixtures.rs`): scale-up clusters here, scale-down ones in
//! [`scale_down`]. Test support, not the engine: crates take it as a dev-dependency only, and
//! `scripts/check-architecture.sh` fails if the binary's crates depend on it.
//!
//! Every fixture is deterministic: same arguments, same cluster. Pods belong to ReplicaSets so that
//! equivalence groups form as they would in a real cluster.

use std::sync::Arc;

use ferroscale_model::labels::{HOSTNAME, ZONE};
use ferroscale_model::node::ConditionStatus;
use ferroscale_model::{
    AllocatedDevice, AllocationMode, ClaimAllocation, ClaimConsumer, ClaimSpec, Device,
    DeviceClass, DeviceRequest, DeviceRequestKind, DeviceScope, DraObjects, ExactDeviceRequest,
    LabelSelector, NodeInclusionPolicy, NodeOperator, NodeRequirement, NodeSelector,
    NodeSelectorTerm, OwnerRef, Pod, PodAffinityTerm, PodClaimSource, PodCondition,
    PodResourceClaim, ResourceClaim, ResourceSlice, Resources, Timestamp, TopologySpreadConstraint,
    UnsatisfiableAction,
};
use ferroscale_scheduling::Snapshot;

use ferroscale_core::backoff::NodeGroupBackoff;
use ferroscale_core::cloud::NodeTemplate;
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_core::parallel::Workers;
use ferroscale_core::scale_up::{
    ExternalExpanderStep, NodeGroupView, ProviderFacts, ScaleUpInput, ScaleUpPlan, plan_scale_up,
};

pub mod scale_down;

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
    /// The threads the plan may use; one unless a benchmark or test says otherwise.
    pub workers: Workers,
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
            &self.workers,
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
            &self.workers,
        ))
    }

    fn input_on<'a>(
        snapshot: &'a mut Snapshot,
        pending: &'a [Arc<Pod>],
        groups: &'a [NodeGroupView],
        backoff: &'a NodeGroupBackoff,
        options: &'a AutoscalingOptions,
        now: Timestamp,
        workers: &'a Workers,
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
            external_expander: ExternalExpanderStep::Skip,
            all_or_nothing: false,
            workers,
            equivalence: None,
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
    p.scheduled_condition = Some(Box::new(PodCondition {
        status: ConditionStatus::False,
        reason: "Unschedulable".into(),
        last_transition: None,
    }));
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
            p.node_name = Some(name.as_str().into());
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
        workers: Workers::sequential(),
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

// ---------------------------------------------------------------------------------------------
// Dynamic Resource Allocation: upstream's two DRA workloads of
// `pkg/core/bench/benchmark_runonce_test.go`, with every parameter taken from there.
// ---------------------------------------------------------------------------------------------

/// CPU (milli) and memory (bytes) of every node of upstream's DRA benchmarks.
const DRA_NODE_CPU: i64 = 10_000;
const DRA_NODE_MEMORY: i64 = 10_000;
/// The largest size of upstream's one node group (`maxNGSize`).
const DRA_MAX_GROUP_SIZE: usize = 10_000;
const DRA_DRIVER: &str = "gpu.nvidia.com";
const DRA_CLASS: &str = "default-class";

/// A node of upstream's DRA benchmarks (10 CPUs, 10,000 bytes), ready.
fn dra_node(name: &str) -> ferroscale_model::Node {
    let mut n = ferroscale_model::Node::new(name, Resources::new(DRA_NODE_CPU, DRA_NODE_MEMORY));
    n.allocatable.pods = 110;
    n.capacity.pods = 110;
    n
}

/// One node-local slice of `devices` devices `gpu-0`… in pool `pool`, complete in one slice.
fn dra_slice(name: &str, node: &str, pool: &str, devices: usize) -> ResourceSlice {
    ResourceSlice {
        name: name.into(),
        driver: DRA_DRIVER.into(),
        pool: pool.into(),
        pool_generation: 0,
        pool_slice_count: 1,
        scope: DeviceScope::Node(node.into()),
        per_device_node_selection: false,
        devices: (0..devices)
            .map(|j| Device {
                name: format!("gpu-{j}"),
                ..Device::default()
            })
            .collect(),
    }
}

/// Claim `claim-<i>` of upstream's DRA benchmarks: one device of `default-class` whose driver is
/// `gpu.nvidia.com`.
fn dra_claim(i: usize) -> ResourceClaim {
    let name = format!("claim-{i}");
    ResourceClaim {
        namespace: "default".into(),
        uid: name.clone(),
        name,
        spec: ClaimSpec {
            requests: vec![DeviceRequest {
                name: "req-0".into(),
                kind: DeviceRequestKind::Exactly(ExactDeviceRequest {
                    device_class_name: DRA_CLASS.into(),
                    selectors: vec![format!("device.driver == \"{DRA_DRIVER}\"")],
                    allocation_mode: AllocationMode::ExactCount(1),
                    admin_access: false,
                }),
            }],
            constraints: Vec::new(),
        },
        ..ResourceClaim::default()
    }
}

/// Pod `pod-dra-<i>` (no controller, as upstream's `BuildTestPod`) using claim `claim-<i>`.
fn dra_pod(i: usize, cpu: i64, memory: i64) -> Pod {
    let mut p = Pod::new("default", format!("pod-dra-{i}"));
    p.requests = Resources::new(cpu, memory);
    p.resource_claims.push(PodResourceClaim {
        name: format!("claim-{i}"),
        source: PodClaimSource::Claim(format!("claim-{i}")),
    });
    p
}

/// The device class of upstream's DRA benchmarks: no selector of its own.
fn dra_class() -> Arc<DeviceClass> {
    Arc::new(DeviceClass {
        name: DRA_CLASS.into(),
        selectors: Vec::new(),
        extended_resource_name: None,
    })
}

/// Upstream's `BenchmarkRunOnceScaleUpDRA` (`setupScaleUpDRA(500)`): an empty cluster, one node
/// group (0…10,000) whose template node (10 CPUs, 10,000 bytes of memory) has one node-local
/// slice of 8 devices, and `nodes × 8` unschedulable pods, each asking 1/16 of the node's CPU and
/// memory and one device through its own claim. Devices decide: the answer is `nodes` new nodes.
/// `--max-nodes-per-scaleup` is 10,000, as upstream sets it.
pub fn dra_scale_up(nodes: usize) -> ScaleUpFixture {
    const PODS_PER_NODE: usize = 8;
    let template = NodeTemplate {
        node: dra_node("n-template"),
        pods: Vec::new(),
        csi_node: None,
        resource_slices: vec![dra_slice(
            "rs-template",
            "n-template",
            "n-template",
            PODS_PER_NODE,
        )],
    };
    let cpu = DRA_NODE_CPU / (PODS_PER_NODE as i64 * 2);
    let memory = DRA_NODE_MEMORY / (PODS_PER_NODE as i64 * 2);
    let total = nodes * PODS_PER_NODE;
    let mut objects = DraObjects {
        classes: vec![dra_class()],
        ..DraObjects::default()
    };
    let pending = (0..total)
        .map(|i| {
            objects.claims.push(Arc::new(dra_claim(i)));
            Arc::new(unschedulable(dra_pod(i, cpu, memory)))
        })
        .collect();
    let mut snapshot = Snapshot::new();
    snapshot.set_dra_objects(&objects);
    let options = AutoscalingOptions {
        max_nodes_per_scaleup: DRA_MAX_GROUP_SIZE,
        max_nodes_total: DRA_MAX_GROUP_SIZE,
        ..AutoscalingOptions::default()
    };
    ScaleUpFixture {
        workers: Workers::sequential(),
        snapshot,
        pending,
        groups: vec![NodeGroupView::new(
            "ng1",
            0,
            DRA_MAX_GROUP_SIZE,
            0,
            Some(template),
        )],
        options,
        backoff: NodeGroupBackoff::default(),
        now: Timestamp::from_secs(100_000),
    }
}

/// Upstream's `BenchmarkRunOnceScaleDownDRA` (`setupScaleDownDRA60Percent(800)`): `nodes` ready
/// nodes of one group (0…10,000), each with one node-local slice of 10 devices in a pool named
/// after the node, and `nodes × 4` running pods (`safe-to-evict`, pod `i` on node `i mod nodes`),
/// each asking 1/20 of a node's CPU and memory and holding one allocated device through its own
/// claim: 40 % device utilization everywhere. The options are upstream's for the run: no unneeded
/// time, scale-down and drain parallelism 2,000, no delay after add, 2,000 non-empty candidates,
/// unready scale-down on. Devices decide: 60 % of the nodes can go. The state is the one after a
/// first loop, which found every node unneeded.
pub fn dra_scale_down(nodes: usize) -> crate::scale_down::ScaleDownFixture {
    use std::collections::HashMap;

    use ferroscale_core::scale_down::{ControllerIndex, DeletionsInProgress, ScaleDownState};

    const DEVICES_PER_NODE: usize = 10;
    const PODS_PER_NODE: usize = 4;
    let cpu = DRA_NODE_CPU / (DEVICES_PER_NODE as i64 * 2);
    let memory = DRA_NODE_MEMORY / (DEVICES_PER_NODE as i64 * 2);
    let names: Vec<String> = (0..nodes).map(|i| format!("ng1-node-{i}")).collect();
    let mut objects = DraObjects {
        classes: vec![dra_class()],
        ..DraObjects::default()
    };
    for name in &names {
        objects.slices.push(Arc::new(dra_slice(
            &format!("rs-{name}"),
            name,
            name,
            DEVICES_PER_NODE,
        )));
    }
    let mut pods = Vec::with_capacity(nodes * PODS_PER_NODE);
    for i in 0..nodes * PODS_PER_NODE {
        let node = &names[i % nodes];
        let mut pod = dra_pod(i, cpu, memory);
        pod.node_name = Some(node.as_str().into());
        pod.phase = ferroscale_model::PodPhase::Running;
        pod.annotations
            .insert(ferroscale_model::pod::SAFE_TO_EVICT.into(), "true".into());
        let mut claim = dra_claim(i);
        claim.allocation = Some(ClaimAllocation {
            devices: vec![AllocatedDevice {
                request: "req-0".into(),
                driver: DRA_DRIVER.into(),
                pool: node.clone(),
                device: format!("gpu-{}", i / nodes),
                admin_access: false,
            }],
            node_selector: Some(NodeSelector {
                terms: vec![NodeSelectorTerm {
                    match_expressions: Vec::new(),
                    match_fields: vec![NodeRequirement {
                        key: "metadata.name".into(),
                        operator: NodeOperator::In,
                        values: vec![node.clone()],
                    }],
                }],
            }),
        });
        claim.reserved_for.push(ClaimConsumer {
            resource: "pods".into(),
            name: pod.name.to_string(),
            uid: pod.uid.to_string(),
        });
        objects.claims.push(Arc::new(claim));
        pods.push(pod);
    }
    let mut snapshot = Snapshot::new();
    snapshot.set_dra_objects(&objects);
    let mut ids = Vec::with_capacity(nodes);
    let mut group_of = HashMap::with_capacity(nodes);
    for name in &names {
        ids.push(snapshot.add_node(Arc::new(dra_node(name))));
        group_of.insert(name.clone(), 0);
    }
    for (i, pod) in pods.into_iter().enumerate() {
        snapshot.add_pod(ids[i % nodes], Arc::new(pod));
    }
    let options = upstream_options(UPSTREAM_SCALE_DOWN_OPTIONS);
    let mut fixture = crate::scale_down::ScaleDownFixture {
        workers: Workers::sequential(),
        snapshot,
        groups: vec![NodeGroupView::new(
            "ng1",
            0,
            DRA_MAX_GROUP_SIZE,
            nodes,
            None,
        )],
        group_of,
        controllers: ControllerIndex::new(),
        deletions: DeletionsInProgress::default(),
        state: ScaleDownState::new(),
        options,
        now: Timestamp::from_secs(1_000_000),
        underutilized: nodes,
    };
    // Upstream deletes in its one RunOnce because a node unneeded for exactly the unneeded time
    // (zero) qualifies there; Ferroscale wants strictly longer, so the first loop runs here and
    // the fixture's plans are the second loop, 10 s later, which deletes.
    fixture.advance(std::time::Duration::from_secs(10));
    fixture
}

// ---------------------------------------------------------------------------------------------
// Upstream's two plain RunOnce workloads of `pkg/core/bench/benchmark_runonce_test.go` (nodes of
// 10 CPUs and 10,000 bytes, one group 0…10,000, pods without a controller), for the decide steps
// alone: the growth from 1× to 5× shows whether planning is linear in the cluster.
// ---------------------------------------------------------------------------------------------

/// The options of upstream's two `RunOnce` scale-down workloads. Upstream's run leaves the
/// candidate pool unset and expects 60 % of the nodes marked in one loop, so no pool limits the
/// non-empty candidates there: every node may be one (`--scale-down-candidates-pool-ratio=1`).
const UPSTREAM_SCALE_DOWN_OPTIONS: &[(&str, &str)] = &[
    ("scale-down-unneeded-time", "0s"),
    ("max-scale-down-parallelism", "2000"),
    ("max-drain-parallelism", "2000"),
    ("scale-down-delay-after-add", "0s"),
    ("scale-down-enabled", "true"),
    ("scale-down-non-empty-candidates-count", "2000"),
    ("scale-down-unready-enabled", "true"),
    ("scale-down-simulation-timeout", "60s"),
    ("scale-down-candidates-pool-ratio", "1"),
];

/// Sets upstream's benchmark options by flag name.
fn upstream_options(flags: &[(&str, &str)]) -> AutoscalingOptions {
    let mut options = AutoscalingOptions::default();
    for (flag, value) in flags {
        if let Err(error) = options.set(flag, value) {
            unreachable!("upstream's benchmark option --{flag}={value}: {error}");
        }
    }
    options
}

/// Upstream's `BenchmarkRunOnceScaleUp` (`setupScaleUp(1000)` at `nodes` = 1,000): an empty
/// cluster, one node group (0…10,000) whose template node has 10 CPUs and 10,000 bytes, and
/// `nodes × 50` unschedulable pods without a controller, each asking 1/50 of the node's CPU and
/// memory; least-waste, `--max-nodes-per-scaleup` 10,000. The answer is `nodes` new nodes.
pub fn upstream_scale_up(nodes: usize) -> ScaleUpFixture {
    const PODS_PER_NODE: usize = 50;
    let template = NodeTemplate {
        node: dra_node("n-template"),
        pods: Vec::new(),
        csi_node: None,
        resource_slices: Vec::new(),
    };
    let cpu = DRA_NODE_CPU / PODS_PER_NODE as i64;
    let memory = DRA_NODE_MEMORY / PODS_PER_NODE as i64;
    let pending = (0..nodes * PODS_PER_NODE)
        .map(|i| {
            let mut p = Pod::new("default", format!("pod-{i}"));
            p.requests = Resources::new(cpu, memory);
            Arc::new(unschedulable(p))
        })
        .collect();
    let max = DRA_MAX_GROUP_SIZE.to_string();
    let options = upstream_options(&[
        ("expander", "least-waste"),
        ("max-nodes-per-scaleup", &max),
        ("max-nodes-total", &max),
        ("scale-up-from-zero", "true"),
    ]);
    ScaleUpFixture {
        workers: Workers::sequential(),
        snapshot: Snapshot::new(),
        pending,
        groups: vec![NodeGroupView::new(
            "ng1",
            0,
            DRA_MAX_GROUP_SIZE,
            0,
            Some(template),
        )],
        options,
        backoff: NodeGroupBackoff::default(),
        now: Timestamp::from_secs(100_000),
    }
}

/// Upstream's `BenchmarkRunOnceScaleDown` (`setupScaleDown60Percent(2000)` at `nodes` = 2,000):
/// `nodes` ready nodes of one group (0…10,000) and `nodes × 40` running pods without a
/// controller (`safe-to-evict`, pod `i` on node `i mod nodes`), each asking 1 % of a node's CPU
/// and memory: 40 % utilization everywhere, so 60 % of the nodes can go. The options are
/// upstream's for the run: no unneeded time, scale-down and drain parallelism 2,000, no delay
/// after add, 2,000 non-empty candidates, unready scale-down on. The state is fresh: the plan is
/// the first loop's.
pub fn upstream_scale_down(nodes: usize) -> crate::scale_down::ScaleDownFixture {
    use std::collections::HashMap;

    use ferroscale_core::scale_down::{ControllerIndex, DeletionsInProgress, ScaleDownState};

    const PODS_PER_NODE: usize = 40;
    let cpu = DRA_NODE_CPU / 100;
    let memory = DRA_NODE_MEMORY / 100;
    let names: Vec<String> = (0..nodes).map(|i| format!("ng1-node-{i}")).collect();
    let mut snapshot = Snapshot::new();
    let mut ids = Vec::with_capacity(nodes);
    let mut group_of = HashMap::with_capacity(nodes);
    for name in &names {
        ids.push(snapshot.add_node(Arc::new(dra_node(name))));
        group_of.insert(name.clone(), 0);
    }
    for i in 0..nodes * PODS_PER_NODE {
        let mut pod = Pod::new("default", format!("pod-{i}"));
        pod.requests = Resources::new(cpu, memory);
        pod.node_name = Some(names[i % nodes].as_str().into());
        pod.phase = ferroscale_model::PodPhase::Running;
        pod.annotations
            .insert(ferroscale_model::pod::SAFE_TO_EVICT.into(), "true".into());
        snapshot.add_pod(ids[i % nodes], Arc::new(pod));
    }
    let options = upstream_options(UPSTREAM_SCALE_DOWN_OPTIONS);
    crate::scale_down::ScaleDownFixture {
        workers: Workers::sequential(),
        snapshot,
        groups: vec![NodeGroupView::new(
            "ng1",
            0,
            DRA_MAX_GROUP_SIZE,
            nodes,
            None,
        )],
        group_of,
        controllers: ControllerIndex::new(),
        deletions: DeletionsInProgress::default(),
        state: ScaleDownState::new(),
        options,
        now: Timestamp::from_secs(1_000_000),
        underutilized: nodes,
    }
}
