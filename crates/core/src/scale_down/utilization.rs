//! Node utilization as scale-down measures it (docs/behaviour.md SD-50–SD-54): the share of
//! allocatable that pod requests take, the larger of cpu and memory, the GPU share alone on GPU
//! nodes, or on nodes with local DRA devices the share of devices allocated in their fullest
//! pool (docs/dra.md DRA-130).
//!
//! Long-terminating and expendable pods do not count. DaemonSet and mirror pods count unless their
//! ignore flag is set; then their requests leave the numerator **and** the allocatable.

use std::time::Duration;

use ferroscale_model::resources::NVIDIA_GPU;
use ferroscale_model::{Node, Pod, Resources, Timestamp};
use ferroscale_scheduling::PoolUtilization;

/// Grace period the API server gives a pod without `terminationGracePeriodSeconds`.
const DEFAULT_GRACE: Duration = Duration::from_secs(30);
/// Extra time after the grace period before a terminating pod is ignored.
const LONG_TERMINATING_MARGIN: Duration = Duration::from_secs(30);

/// The resource that decided a node's utilization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UtilizationResource {
    Cpu,
    Memory,
    Gpu,
    /// The node's local DRA devices (its fullest pool).
    Devices,
}

impl UtilizationResource {
    pub fn as_str(&self) -> &'static str {
        match self {
            UtilizationResource::Cpu => "cpu",
            UtilizationResource::Memory => "memory",
            UtilizationResource::Gpu => "gpu",
            UtilizationResource::Devices => "devices",
        }
    }
}

/// A node's utilization: each resource's share and the one compared with the threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Utilization {
    pub cpu: f64,
    pub memory: f64,
    /// Set on GPU nodes only.
    pub gpu: Option<f64>,
    /// Set on nodes with local DRA devices (and no GPU label) only: the highest share of devices
    /// allocated in one of the node's pools.
    pub devices: Option<f64>,
    /// The value compared with the threshold: `gpu` on GPU nodes, `devices` on nodes with local
    /// devices, else max(cpu, memory).
    pub value: f64,
    pub resource: UtilizationResource,
}

/// Whether the pod was deleted long enough ago (deletion time + grace period + 30 s) that it no
/// longer counts anywhere in scale-down.
pub fn is_long_terminating(pod: &Pod, now: Timestamp) -> bool {
    let Some(deleted) = pod.deletion_time else {
        return false;
    };
    let grace = pod
        .termination_grace_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(DEFAULT_GRACE, Duration::from_secs);
    now > deleted + grace + LONG_TERMINATING_MARGIN
}

/// How utilization is measured for one node.
#[derive(Debug, Clone, Copy)]
pub(super) struct UtilizationRules<'a> {
    pub now: Timestamp,
    pub ignore_daemonsets: bool,
    pub ignore_mirror_pods: bool,
    pub expendable_cutoff: i32,
    /// The provider's GPU label key; empty when the provider has none.
    pub gpu_label: &'a str,
}

impl UtilizationRules<'_> {
    /// A node with the provider's GPU label is measured by its GPUs only.
    pub fn is_gpu_node(&self, node: &Node) -> bool {
        !self.gpu_label.is_empty() && node.labels.contains_key(self.gpu_label)
    }

    /// `Err` names the resource whose allocatable is zero (upstream cannot measure such a node and
    /// never removes it).
    pub fn measure<'p>(
        &self,
        node: &Node,
        pods: impl IntoIterator<Item = &'p std::sync::Arc<Pod>>,
    ) -> Result<Utilization, &'static str> {
        let mut counted = Resources::default();
        let mut ignored = Resources::default();
        for pod in pods {
            if is_long_terminating(pod, self.now) || pod.is_expendable(self.expendable_cutoff) {
                continue;
            }
            let left_out = (self.ignore_daemonsets && pod.is_daemonset_pod())
                || (self.ignore_mirror_pods && pod.is_mirror_pod());
            if left_out {
                ignored.add(&pod.requests);
            } else {
                counted.add(&pod.requests);
            }
        }
        if self.is_gpu_node(node) {
            let allocatable = node.allocatable.get(NVIDIA_GPU) - ignored.get(NVIDIA_GPU);
            let gpu = if allocatable > 0 {
                counted.get(NVIDIA_GPU) as f64 / allocatable as f64
            } else {
                0.0
            };
            return Ok(Utilization {
                cpu: share(
                    counted.cpu_milli,
                    node.allocatable.cpu_milli - ignored.cpu_milli,
                ),
                memory: share(counted.memory, node.allocatable.memory - ignored.memory),
                gpu: Some(gpu),
                devices: None,
                value: gpu,
                resource: UtilizationResource::Gpu,
            });
        }
        let cpu_allocatable = node.allocatable.cpu_milli - ignored.cpu_milli;
        if cpu_allocatable <= 0 {
            return Err("cpu");
        }
        let memory_allocatable = node.allocatable.memory - ignored.memory;
        if memory_allocatable <= 0 {
            return Err("memory");
        }
        let cpu = counted.cpu_milli as f64 / cpu_allocatable as f64;
        let memory = counted.memory as f64 / memory_allocatable as f64;
        let (value, resource) = if memory > cpu {
            (memory, UtilizationResource::Memory)
        } else {
            (cpu, UtilizationResource::Cpu)
        };
        Ok(Utilization {
            cpu,
            memory,
            gpu: None,
            devices: None,
            value,
            resource,
        })
    }
}

impl UtilizationRules<'_> {
    /// [`Self::measure`] for a node whose local device pools are `pools` (from
    /// `Snapshot::device_pools`). As upstream does, a node with local devices and no GPU label is
    /// measured by its devices alone: the highest share of allocated devices among its pools
    /// (docs/dra.md DRA-130). Its cpu and memory shares are kept for reports only.
    pub fn measure_with_devices<'p>(
        &self,
        node: &Node,
        pods: impl IntoIterator<Item = &'p std::sync::Arc<Pod>>,
        pools: &[PoolUtilization],
    ) -> Result<Utilization, &'static str> {
        let devices = highest_pool_share(pools);
        let measured = self.measure(node, pods);
        let Some(devices) = devices.filter(|_| !self.is_gpu_node(node)) else {
            return measured;
        };
        let (cpu, memory) = measured.map_or((0.0, 0.0), |u| (u.cpu, u.memory));
        Ok(Utilization {
            cpu,
            memory,
            gpu: None,
            devices: Some(devices),
            value: devices,
            resource: UtilizationResource::Devices,
        })
    }
}

/// The highest `allocated / total` among the pools, a pool without devices counting 0; `None`
/// when the node has no local pool.
pub fn highest_pool_share(pools: &[PoolUtilization]) -> Option<f64> {
    pools
        .iter()
        .map(|p| {
            if p.total > 0 {
                p.allocated.min(p.total) as f64 / p.total as f64
            } else {
                0.0
            }
        })
        .reduce(f64::max)
}

/// `used / allocatable`, 0 when nothing is allocatable (informational only on GPU nodes).
fn share(used: i64, allocatable: i64) -> f64 {
    if allocatable > 0 {
        used as f64 / allocatable as f64
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferroscale_model::pod::{DAEMONSET_POD, MIRROR_POD};

    use super::*;

    const GIB: i64 = 1 << 30;

    fn rules() -> UtilizationRules<'static> {
        UtilizationRules {
            now: Timestamp::from_secs(10_000),
            ignore_daemonsets: false,
            ignore_mirror_pods: false,
            expendable_cutoff: -10,
            gpu_label: "",
        }
    }

    fn pod(name: &str, cpu: i64, memory: i64) -> Arc<Pod> {
        let mut p = Pod::new("default", name);
        p.requests = Resources::new(cpu, memory);
        Arc::new(p)
    }

    fn node() -> Node {
        Node::new("n", Resources::new(4000, 8 * GIB))
    }

    /// docs/behaviour.md SD-52.
    #[test]
    fn s52_the_larger_of_cpu_and_memory_counts() {
        let u = rules()
            .measure(&node(), &[pod("a", 400, 4 * GIB + 1)])
            .unwrap();
        assert!((u.cpu - 0.1).abs() < 1e-9);
        assert!(u.memory > 0.5);
        assert_eq!(u.value, u.memory);
        assert_eq!(u.resource, UtilizationResource::Memory);
    }

    /// docs/behaviour.md SD-53.
    #[test]
    fn s53_ignored_daemonset_requests_leave_numerator_and_allocatable() {
        let mut ds = Pod::new("kube-system", "ds");
        ds.annotations.insert(DAEMONSET_POD.into(), "true".into());
        ds.requests = Resources::new(1000, 0);
        let pods = [Arc::new(ds), pod("a", 1500, GIB)];
        let counted = rules().measure(&node(), &pods).unwrap();
        assert!((counted.cpu - 2500.0 / 4000.0).abs() < 1e-9);
        let ignoring = UtilizationRules {
            ignore_daemonsets: true,
            ..rules()
        };
        let u = ignoring.measure(&node(), &pods).unwrap();
        assert!((u.cpu - 1500.0 / 3000.0).abs() < 1e-9, "{}", u.cpu);
    }

    #[test]
    fn mirror_pods_are_ignored_only_with_their_flag() {
        let mut mirror = Pod::new("kube-system", "etcd");
        mirror.annotations.insert(MIRROR_POD.into(), "x".into());
        mirror.requests = Resources::new(2000, 0);
        let pods = [Arc::new(mirror)];
        assert!((rules().measure(&node(), &pods).unwrap().cpu - 0.5).abs() < 1e-9);
        let ignoring = UtilizationRules {
            ignore_mirror_pods: true,
            ..rules()
        };
        assert_eq!(ignoring.measure(&node(), &pods).unwrap().cpu, 0.0);
    }

    #[test]
    fn long_terminating_and_expendable_pods_do_not_count() {
        let r = rules();
        let mut terminating = Pod::new("default", "t");
        terminating.requests = Resources::new(2000, 0);
        // Deleted 61 s ago with the default 30 s grace: 30 + 30 s have passed.
        terminating.deletion_time = Some(r.now - Duration::from_secs(61));
        let mut expendable = Pod::new("default", "e");
        expendable.requests = Resources::new(2000, 0);
        expendable.priority = Some(-11);
        let u = r
            .measure(
                &node(),
                &[Arc::new(terminating.clone()), Arc::new(expendable)],
            )
            .unwrap();
        assert_eq!(u.cpu, 0.0);
        // Deleted 59 s ago: still counts.
        terminating.deletion_time = Some(r.now - Duration::from_secs(59));
        let u = r.measure(&node(), &[Arc::new(terminating)]).unwrap();
        assert!((u.cpu - 0.5).abs() < 1e-9);
    }

    /// docs/behaviour.md SD-54.
    #[test]
    fn s54_gpu_nodes_are_measured_by_gpu_only() {
        let mut n = node();
        n.labels.insert("gpu-type".into(), "t4".into());
        n.allocatable.set(NVIDIA_GPU, 10);
        let mut p = Pod::new("default", "g");
        p.requests = Resources::new(3600, 0);
        p.requests.set(NVIDIA_GPU, 3);
        let gpu_rules = UtilizationRules {
            gpu_label: "gpu-type",
            ..rules()
        };
        let u = gpu_rules.measure(&n, &[Arc::new(p)]).unwrap();
        assert!((u.value - 0.3).abs() < 1e-9);
        assert_eq!(u.resource, UtilizationResource::Gpu);
        assert!((u.cpu - 0.9).abs() < 1e-9);
        // Missing GPU allocatable: utilization 0.
        n.allocatable.set(NVIDIA_GPU, 0);
        assert_eq!(gpu_rules.measure(&n, &[]).unwrap().value, 0.0);
    }

    fn pool(pool: &str, total: usize, allocated: usize) -> PoolUtilization {
        PoolUtilization {
            driver: "gpu.example.com".into(),
            pool: pool.into(),
            total,
            allocated,
        }
    }

    /// docs/dra.md DRA-130: the fullest pool decides, cpu and memory do not.
    #[test]
    fn nodes_with_local_devices_are_measured_by_their_fullest_pool() {
        let pools = [pool("a", 10, 4), pool("b", 4, 3), pool("empty", 0, 0)];
        let u = rules()
            .measure_with_devices(&node(), &[pod("a", 100, GIB / 8)], &pools)
            .unwrap();
        assert_eq!(u.resource, UtilizationResource::Devices);
        assert!((u.value - 0.75).abs() < 1e-9, "{}", u.value);
        assert_eq!(u.devices, Some(u.value));
        assert!((u.cpu - 0.025).abs() < 1e-9, "cpu is kept for reports");
        // No local pool: the usual measure.
        let plain = rules()
            .measure_with_devices(&node(), &[pod("a", 100, GIB / 8)], &[])
            .unwrap();
        assert_eq!(plain.resource, UtilizationResource::Cpu);
        assert_eq!(plain.devices, None);
    }

    #[test]
    fn zero_allocatable_cannot_be_measured() {
        let n = Node::new("n", Resources::new(0, GIB));
        assert_eq!(rules().measure(&n, &[]), Err("cpu"));
    }
}
