//! Upstream's `RunOnce` benchmark workloads (`pkg/core/bench/benchmark_runonce_test.go` in
//! `sigs.k8s.io/cluster-autoscaler`) on the simulator's in-memory cloud and cluster, for the
//! whole-loop benchmarks (`crates/sim/benches/runonce_upstream.rs`, `runonce_memory.rs`) and the
//! test that checks their decisions (`crates/sim/tests/upstream_runonce.rs`).
//!
//! Each workload is built fresh by [`RunOnceWorkload::prepare`]: a [`SimulatedCloud`] with one
//! node group `ng1`, a [`Cluster`] holding the nodes and pods, and a new [`Autoscaler`] with
//! upstream's options. [`PreparedLoop::run_once`] is the one thing a benchmark times: the real
//! `Autoscaler::run_once` gathering through [`SimulatedProvider`] and [`SimClusterApi`], building
//! its snapshot, deciding, and acting (the resize calls, the taint writes). [`PreparedLoop::check`]
//! then compares what the fakes hold with upstream's verified outcome: the group's target size
//! after a scale-up, the number of nodes carrying `ToBeDeletedByClusterAutoscaler` after a
//! scale-down.
//!
//! Parameters follow upstream's file: nodes of 10 CPUs (10,000 millicores) and 10,000 bytes of
//! memory with room for 100 pods, one group of 0…10,000 nodes, pods without a controller, the
//! least-waste expander, the binpacking estimator, at most 10,000 nodes and the cores and memory
//! of 10,000 nodes in total, predicate parallelism 1. Options upstream's file does not set keep
//! Ferroscale's defaults (upstream's flag defaults; so a tainted node is drained in a later loop,
//! after `--node-delete-delay-after-taint`, as upstream drains outside its `RunOnce`), with four
//! exceptions stated where they are set: scale-down is off in the scale-up workloads (upstream's
//! options leave it off there), the memory limit is rounded up to whole GiB, the scale-down
//! workloads let every node be a non-empty candidate, and at five times upstream's size their
//! parallelism and candidate count (2,000) grow five times too.

use std::sync::Arc;
use std::time::Duration;

use ferroscale_core::autoscaler::{Autoscaler, LoopOutcome};
use ferroscale_core::options::{AutoscalingOptions, OptionError};
use ferroscale_model::node::ConditionStatus;
use ferroscale_model::taints::TO_BE_DELETED;
use ferroscale_model::{
    AllocatedDevice, AllocationMode, ClaimAllocation, ClaimConsumer, ClaimSpec, DeviceClass,
    DeviceRequest, DeviceRequestKind, ExactDeviceRequest, Node, NodeConditions, NodeOperator,
    NodeRequirement, NodeSelector, NodeSelectorTerm, Pod, PodClaimSource, PodCondition,
    PodResourceClaim, ResourceClaim, Resources, Timestamp,
};
use ferroscale_objects::K8sObject;
use futures::executor::block_on;
use thiserror::Error;

use crate::api::SimClusterApi;
use crate::clock::SimClock;
use crate::cloud::{GroupSpec, SimulatedCloud, SimulatedProvider};
use crate::cluster::Cluster;
use crate::dra::GroupDevices;
use crate::runner::InstantStopwatch;

/// CPU of every node, in millicores (upstream's `nodeCPU`, 10 CPUs).
pub const NODE_CPU_MILLI: i64 = 10_000;
/// Memory of every node, in bytes (upstream's `nodeMem`).
pub const NODE_MEMORY: i64 = 10_000;
/// Pods a node has room for (upstream's `BuildTestNode` capacity).
const NODE_PODS: i64 = 100;
/// The largest size of the one node group, and the cluster's node limit (`maxNGSize`).
pub const MAX_GROUP_SIZE: usize = 10_000;
/// The one node group.
pub const GROUP: &str = "ng1";
const NAMESPACE: &str = "default";
const DRA_DRIVER: &str = "gpu.nvidia.com";
const DRA_CLASS: &str = "default-class";
/// When the cluster was set up; upstream's loop runs 10 s later.
const SETUP_TIME: Timestamp = Timestamp(1_000_000_000);
const LOOP_DELAY: Duration = Duration::from_secs(10);
/// Nothing in the workloads waits for a new node; the delay only has to be positive.
const PROVISIONING_DELAY: Duration = Duration::from_secs(60);
const SEED: u64 = 17;

/// One of upstream's four `RunOnce` benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Workload {
    /// `BenchmarkRunOnceScaleUp`, `setupScaleUp(1000)`: 50 pending pods per wanted node, each
    /// 1/50 of a node, onto a group at size zero.
    ScaleUp,
    /// `BenchmarkRunOnceScaleDown`, `setupScaleDown60Percent(2000)`: 40 pods of 1 % on every
    /// node; 60 % of the nodes can go.
    ScaleDown,
    /// `BenchmarkRunOnceScaleUpDRA`, `setupScaleUpDRA(500)`: 8 pending pods per wanted node, each
    /// with its own claim for one of the template's 8 devices.
    ScaleUpDra,
    /// `BenchmarkRunOnceScaleDownDRA`, `setupScaleDownDRA60Percent(800)`: 4 pods per node, each
    /// holding one of the node's 10 devices; 60 % of the nodes can go.
    ScaleDownDra,
}

impl Workload {
    pub const ALL: [Workload; 4] = [
        Workload::ScaleUp,
        Workload::ScaleDown,
        Workload::ScaleUpDra,
        Workload::ScaleDownDra,
    ];

    /// The name benchmarks and the memory binary use.
    pub fn name(self) -> &'static str {
        match self {
            Workload::ScaleUp => "scale-up",
            Workload::ScaleDown => "scale-down",
            Workload::ScaleUpDra => "scale-up-dra",
            Workload::ScaleDownDra => "scale-down-dra",
        }
    }

    pub fn from_name(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == name)
    }

    /// Upstream's benchmark function.
    pub fn upstream_benchmark(self) -> &'static str {
        match self {
            Workload::ScaleUp => "BenchmarkRunOnceScaleUp",
            Workload::ScaleDown => "BenchmarkRunOnceScaleDown",
            Workload::ScaleUpDra => "BenchmarkRunOnceScaleUpDRA",
            Workload::ScaleDownDra => "BenchmarkRunOnceScaleDownDRA",
        }
    }

    /// The node count upstream passes to the setup function.
    pub fn upstream_nodes(self) -> usize {
        match self {
            Workload::ScaleUp => 1000,
            Workload::ScaleDown => 2000,
            Workload::ScaleUpDra => 500,
            Workload::ScaleDownDra => 800,
        }
    }

    /// Pods per node: pending pods per wanted node, or running pods per existing node.
    fn pods_per_node(self) -> usize {
        match self {
            Workload::ScaleUp => 50,
            Workload::ScaleDown => 40,
            Workload::ScaleUpDra => 8,
            Workload::ScaleDownDra => 4,
        }
    }

    fn scales_up(self) -> bool {
        matches!(self, Workload::ScaleUp | Workload::ScaleUpDra)
    }
}

/// What upstream verifies after its `RunOnce`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// The group's target size (`verifyTargetSize`).
    TargetSize(usize),
    /// Nodes tainted `ToBeDeletedByClusterAutoscaler` (`verifyToBeDeleted`).
    Tainted(usize),
}

/// What the fakes hold after a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    pub target_size: usize,
    pub tainted: usize,
}

/// A workload at a size: upstream's (`scale` 1) or a multiple of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunOnceWorkload {
    pub workload: Workload,
    pub scale: usize,
}

/// The workload could not be built.
#[derive(Debug, Error)]
pub enum WorkloadError {
    #[error("upstream's option --{flag}={value} was refused: {source}")]
    Option {
        flag: &'static str,
        value: String,
        source: OptionError,
    },
}

/// The loop did not reach upstream's verified outcome.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{workload}: expected {expected:?}, the fakes hold {observed:?}")]
pub struct OutcomeMismatch {
    pub workload: String,
    pub expected: Expected,
    pub observed: Observed,
}

impl RunOnceWorkload {
    pub fn new(workload: Workload, scale: usize) -> RunOnceWorkload {
        RunOnceWorkload {
            workload,
            scale: scale.max(1),
        }
    }

    /// `scale-up`, `scale-down-dra ×5`, ...
    pub fn label(&self) -> String {
        if self.scale == 1 {
            self.workload.name().to_string()
        } else {
            format!("{} x{}", self.workload.name(), self.scale)
        }
    }

    /// Wanted nodes (scale-up) or existing nodes (scale-down).
    pub fn nodes(&self) -> usize {
        self.workload.upstream_nodes() * self.scale
    }

    pub fn pods(&self) -> usize {
        self.nodes() * self.workload.pods_per_node()
    }

    /// Upstream's verified outcome, scaled.
    pub fn expected(&self) -> Expected {
        if self.workload.scales_up() {
            Expected::TargetSize(self.nodes())
        } else {
            Expected::Tainted(self.nodes() * 3 / 5)
        }
    }

    /// Builds the fakes and a fresh autoscaler (everything a benchmark leaves out of its timing).
    pub fn prepare(&self) -> Result<PreparedLoop, WorkloadError> {
        let options = self.options()?;
        let clock = SimClock::new(SETUP_TIME);
        let nodes = self.nodes();
        let scale_down = !self.workload.scales_up();
        let devices = match self.workload {
            Workload::ScaleUpDra => vec![gpus(8)],
            Workload::ScaleDownDra => vec![gpus(10)],
            Workload::ScaleUp | Workload::ScaleDown => Vec::new(),
        };
        let existing_nodes: Vec<Node> = if scale_down {
            (0..nodes)
                .map(|i| node(&format!("{GROUP}-node-{i}")))
                .collect()
        } else {
            Vec::new()
        };
        let spec = GroupSpec {
            cloud_controller_manager: true,
            id: GROUP.to_string(),
            min_size: 0,
            max_size: MAX_GROUP_SIZE,
            initial_size: 0,
            provisioning_delay: PROVISIONING_DELAY,
            failures: Vec::new(),
            price_per_hour: 1.0,
            template: node("n-template"),
            existing_nodes,
            csi_drivers: Vec::new(),
            devices: devices.clone(),
        };
        let cloud = Arc::new(SimulatedCloud::new(clock.clone(), vec![spec], Vec::new()));
        let mut cluster = Cluster::new(Vec::new());
        cluster.set_group_devices(GROUP, devices);
        if matches!(self.workload, Workload::ScaleUpDra | Workload::ScaleDownDra) {
            cluster.add_dra_object(&K8sObject::DeviceClass(DeviceClass {
                name: DRA_CLASS.to_string(),
                selectors: Vec::new(),
                extended_resource_name: None,
            }));
        }
        let group = cloud.groups().first().cloned();
        let mut node_names = Vec::with_capacity(nodes);
        for existing in group.iter().flat_map(|g| &g.spec().existing_nodes) {
            let mut node = existing.clone();
            if let Some(group) = &group {
                node.provider_id = group.provider_id_of(&node.name);
            }
            node_names.push(node.name.clone());
            cluster.add_node(node, Some(GROUP.to_string()));
        }
        self.add_pods(&mut cluster, &node_names);
        clock.advance_to(SETUP_TIME + LOOP_DELAY);
        Ok(PreparedLoop {
            workload: *self,
            provider: SimulatedProvider::new(cloud.clone()),
            cloud,
            cluster,
            autoscaler: Autoscaler::new(options, SEED),
            now: SETUP_TIME + LOOP_DELAY,
        })
    }

    /// Upstream's options for the workload.
    pub fn options(&self) -> Result<AutoscalingOptions, WorkloadError> {
        let max_cores = (NODE_CPU_MILLI / 1000) as usize * MAX_GROUP_SIZE;
        // Upstream's memory limit is 10,000 nodes' worth, 100,000,000 bytes; the flag counts whole
        // GiB, so 1 GiB stands for it. Neither binds: the largest workload asks for 50,000,000.
        let mut settings: Vec<(&'static str, String)> = vec![
            ("scale-down-unneeded-time", "1m".into()),
            ("scale-down-unready-time", "1m".into()),
            ("scale-down-utilization-threshold", "0.5".into()),
            ("max-node-provision-time", "10m".into()),
            ("estimator", "binpacking".into()),
            ("expander", "least-waste".into()),
            ("max-binpacking-time", "60s".into()),
            ("max-nodegroup-binpacking-duration", "60s".into()),
            ("cores-total", format!("0:{max_cores}")),
            ("memory-total", "0:1".into()),
            ("max-nodes-total", MAX_GROUP_SIZE.to_string()),
            ("predicate-parallelism", "1".into()),
        ];
        if self.workload.scales_up() {
            settings.extend([
                ("max-nodes-per-scaleup", MAX_GROUP_SIZE.to_string()),
                ("scale-up-from-zero", "true".into()),
                // Upstream's scale-up runs set no scale-down options: scale-down stays off.
                ("scale-down-enabled", "false".into()),
            ]);
        } else {
            // Upstream's 2,000 (parallelism, non-empty candidates) is its node count at most: the
            // larger workloads scale it with the nodes, so 60 % of them still go in one loop.
            let per_loop = (2000 * self.scale).to_string();
            settings.extend([
                ("scale-down-unneeded-time", "0s".into()),
                ("max-scale-down-parallelism", per_loop.clone()),
                ("max-drain-parallelism", per_loop.clone()),
                ("scale-down-delay-after-add", "0s".into()),
                ("scale-down-enabled", "true".into()),
                ("scale-down-non-empty-candidates-count", per_loop),
                ("scale-down-unready-enabled", "true".into()),
                ("scale-down-simulation-timeout", "60s".into()),
                // Upstream 1.36 has no candidate pool (it accepts the flags without effect) and
                // marks 60 % of the nodes in one loop: every node may be a non-empty candidate.
                ("scale-down-candidates-pool-ratio", "1".into()),
            ]);
        }
        let mut options = AutoscalingOptions::default();
        for (flag, value) in settings {
            if let Err(source) = options.set(flag, &value) {
                return Err(WorkloadError::Option {
                    flag,
                    value,
                    source,
                });
            }
        }
        Ok(options)
    }

    fn add_pods(&self, cluster: &mut Cluster, node_names: &[String]) {
        let nodes = self.nodes();
        let per_node = self.workload.pods_per_node() as i64;
        // The pod list and its indexes sized once, not grown by doubling (a third of their
        // memory spare at upstream's size).
        cluster.reserve_pods(self.pods());
        match self.workload {
            Workload::ScaleUp => {
                for i in 0..self.pods() {
                    let pod = pod(
                        &format!("pod-{i}"),
                        NODE_CPU_MILLI / per_node,
                        NODE_MEMORY / per_node,
                    );
                    cluster.add_pod(unschedulable(pod), SETUP_TIME, None);
                }
            }
            Workload::ScaleDown => {
                for i in 0..self.pods() {
                    let mut pod = pod(&format!("pod-{i}"), NODE_CPU_MILLI / 100, NODE_MEMORY / 100);
                    bind_evictable(&mut pod, &node_names[i % nodes]);
                    cluster.add_pod(pod, SETUP_TIME, None);
                }
            }
            Workload::ScaleUpDra => {
                // Half the node's CPU and memory when its 8 devices are taken: devices decide.
                let cpu = NODE_CPU_MILLI / (per_node * 2);
                let memory = NODE_MEMORY / (per_node * 2);
                for i in 0..self.pods() {
                    cluster.add_dra_object(&K8sObject::ResourceClaim(claim(i)));
                    let pod = with_claim(pod(&format!("pod-dra-{i}"), cpu, memory), i);
                    cluster.add_pod(unschedulable(pod), SETUP_TIME, None);
                }
            }
            Workload::ScaleDownDra => {
                // Half the node's CPU and memory when all 10 devices are taken.
                let cpu = NODE_CPU_MILLI / 20;
                let memory = NODE_MEMORY / 20;
                let mut pods = Vec::with_capacity(self.pods());
                for i in 0..self.pods() {
                    let node = &node_names[i % nodes];
                    let mut pod = with_claim(pod(&format!("pod-dra-{i}"), cpu, memory), i);
                    bind_evictable(&mut pod, node);
                    // Pods spread round the nodes, so each node's k-th pod holds device k.
                    let device = format!("gpu-{}", i / nodes);
                    let claim = allocated(claim(i), node, &device, &pod);
                    cluster.add_dra_object(&K8sObject::ResourceClaim(claim));
                    pods.push(pod);
                }
                for pod in pods {
                    cluster.add_pod(pod, SETUP_TIME, None);
                }
            }
        }
    }
}

/// The fakes and a fresh autoscaler, ready for one loop.
pub struct PreparedLoop {
    workload: RunOnceWorkload,
    cloud: Arc<SimulatedCloud>,
    provider: SimulatedProvider,
    cluster: Cluster,
    autoscaler: Autoscaler,
    now: Timestamp,
}

impl PreparedLoop {
    /// The whole loop: gather, snapshot, decide, act. The only part a benchmark times.
    pub fn run_once(&mut self) -> LoopOutcome {
        let stopwatch = InstantStopwatch::start();
        let api = SimClusterApi::new(&mut self.cluster, self.now);
        block_on(
            self.autoscaler
                .run_once(&self.provider, &api, self.now, &stopwatch),
        )
    }

    /// What [`PreparedLoop::run_once`] runs the loop with, for a caller that wraps the two
    /// contracts (the benchmark that times every call into the fakes).
    pub fn parts(&mut self) -> LoopParts<'_> {
        LoopParts {
            autoscaler: &mut self.autoscaler,
            provider: &self.provider,
            api: SimClusterApi::new(&mut self.cluster, self.now),
            now: self.now,
        }
    }

    pub fn workload(&self) -> RunOnceWorkload {
        self.workload
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The group's target size and the nodes tainted for deletion, as the fakes hold them now.
    pub fn observed(&self) -> Observed {
        Observed {
            target_size: self
                .cloud
                .group(GROUP)
                .map_or(0, |group| group.current_target()),
            tainted: self
                .cluster
                .nodes()
                .filter(|n| n.node.has_taint(TO_BE_DELETED))
                .count(),
        }
    }

    /// Upstream's verification: after a scale-up the group's target size, after a scale-down the
    /// number of tainted nodes, is the expected one.
    pub fn check(&self) -> Result<Observed, OutcomeMismatch> {
        let observed = self.observed();
        let expected = self.workload.expected();
        let holds = match expected {
            Expected::TargetSize(size) => observed.target_size == size,
            Expected::Tainted(count) => observed.tainted == count,
        };
        if holds {
            Ok(observed)
        } else {
            Err(OutcomeMismatch {
                workload: self.workload.label(),
                expected,
                observed,
            })
        }
    }
}

/// The autoscaler and the two contracts of one prepared loop.
pub struct LoopParts<'a> {
    pub autoscaler: &'a mut Autoscaler,
    pub provider: &'a SimulatedProvider,
    pub api: SimClusterApi<'a>,
    pub now: Timestamp,
}

/// A node of upstream's benchmarks: 10 CPUs, 10,000 bytes, 100 pods, ready since set-up, created
/// long before (upstream's test nodes have no creation time).
fn node(name: &str) -> Node {
    let mut node = Node::new(name, Resources::new(NODE_CPU_MILLI, NODE_MEMORY));
    node.allocatable.pods = NODE_PODS;
    node.capacity.pods = NODE_PODS;
    node.creation_time = Timestamp(0);
    node.conditions = NodeConditions {
        ready: Some(ConditionStatus::True),
        last_transition: Some(SETUP_TIME),
        ..NodeConditions::default()
    };
    node
}

/// A pod without controller (upstream's `BuildTestPod`), created at set-up.
fn pod(name: &str, cpu_milli: i64, memory: i64) -> Pod {
    let mut pod = Pod::new(NAMESPACE, name);
    pod.requests = Resources::new(cpu_milli, memory);
    pod.creation_time = SETUP_TIME;
    pod
}

/// Marked `PodScheduled=False`, reason `Unschedulable`, as upstream's `MarkUnschedulable`.
fn unschedulable(mut pod: Pod) -> Pod {
    pod.scheduled_condition = Some(Box::new(PodCondition {
        status: ConditionStatus::False,
        reason: "Unschedulable".to_string(),
        last_transition: Some(SETUP_TIME),
    }));
    pod
}

/// Bound to `node` and annotated safe to evict.
fn bind_evictable(pod: &mut Pod, node: &str) {
    pod.node_name = Some(node.into());
    pod.annotations.insert(
        ferroscale_model::pod::SAFE_TO_EVICT.to_string(),
        "true".to_string(),
    );
}

/// `count` devices `gpu-0`… of upstream's driver on every node of the group (one node-local slice
/// in a pool named after the node, as upstream's slices).
fn gpus(count: usize) -> GroupDevices {
    GroupDevices {
        driver: DRA_DRIVER.to_string(),
        name_prefix: "gpu".to_string(),
        count,
        attributes: Default::default(),
        capacity: Default::default(),
    }
}

/// The pod uses claim `claim-<i>`.
fn with_claim(mut pod: Pod, i: usize) -> Pod {
    let name = format!("claim-{i}");
    pod.resource_claims.push(PodResourceClaim {
        name: name.clone(),
        source: PodClaimSource::Claim(name),
    });
    pod
}

/// Claim `claim-<i>`: one device of `default-class` whose driver is upstream's.
fn claim(i: usize) -> ResourceClaim {
    let name = format!("claim-{i}");
    ResourceClaim {
        namespace: NAMESPACE.to_string(),
        uid: name.clone(),
        name,
        spec: ClaimSpec {
            requests: vec![DeviceRequest {
                name: "req-0".to_string(),
                kind: DeviceRequestKind::Exactly(ExactDeviceRequest {
                    device_class_name: DRA_CLASS.to_string(),
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

/// The claim allocated `device` of `node`'s pool and reserved for `pod`.
fn allocated(mut claim: ResourceClaim, node: &str, device: &str, pod: &Pod) -> ResourceClaim {
    claim.allocation = Some(ClaimAllocation {
        devices: vec![AllocatedDevice {
            request: "req-0".to_string(),
            driver: DRA_DRIVER.to_string(),
            pool: node.to_string(),
            device: device.to_string(),
            admin_access: false,
        }],
        node_selector: Some(NodeSelector {
            terms: vec![NodeSelectorTerm {
                match_expressions: Vec::new(),
                match_fields: vec![NodeRequirement {
                    key: "metadata.name".to_string(),
                    operator: NodeOperator::In,
                    values: vec![node.to_string()],
                }],
            }],
        }),
    });
    claim.reserved_for.push(ClaimConsumer {
        resource: "pods".to_string(),
        name: pod.name.to_string(),
        uid: pod.uid.to_string(),
    });
    claim
}
