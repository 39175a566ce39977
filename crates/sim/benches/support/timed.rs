//! Where one loop's time goes: the two contracts wrapped so that every call into the fakes is
//! timed. The loop's wall time then splits into the time inside the fakes (gathering, resizes,
//! taints, events, the status), the decide calls the loop times itself (`function_millis`), and
//! the rest: the engine's own part of gather, building the snapshot, and acting. On a machine
//! shared with other work, the thread's own CPU time and its wait for a CPU
//! (`/proc/thread-self/schedstat`) say how much of the wall time was the loop's.
//!
//! The wrappers pass every call through unchanged, default methods included, so the loop decides
//! and acts as it does on the bare fakes.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ferroscale_core::autoscaler::LoopOutcome;
use ferroscale_sim::runner::InstantStopwatch;
use ferroscale_sim::upstream_runonce::PreparedLoop;
use futures::executor::block_on;

use async_trait::async_trait;
use ferroscale_core::cloud::{
    CloudError, CloudProvider, GpuConfig, GroupOptions, Instance, NodeGroup, NodeTemplate,
    PricingModel, ResourceLimits,
};
use ferroscale_core::events::Event;
use ferroscale_core::kubernetes::{
    ClusterApi, ClusterError, ClusterObjects, EvictionError, StatusConfigMap,
};
use ferroscale_model::{
    CapacityBuffer, CapacityBufferStatus, Node, Pod, ProvisioningRequestStatus, ScalableObject,
    Taint, Timestamp,
};

/// Calls and time spent in one contract method.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallTime {
    pub calls: usize,
    pub total: Duration,
}

/// Time spent in the fakes, per contract method (`ClusterApi::gather`, `NodeGroup::increase_size`,
/// ...).
#[derive(Debug, Clone, Default)]
pub struct CallTimes {
    pub by_method: BTreeMap<&'static str, CallTime>,
}

impl CallTimes {
    pub fn total(&self) -> Duration {
        self.by_method.values().map(|c| c.total).sum()
    }
}

impl fmt::Display for CallTimes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (method, time) in &self.by_method {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(
                f,
                "{method} {:.1} ms ({}×)",
                time.total.as_secs_f64() * 1000.0,
                time.calls
            )?;
        }
        Ok(())
    }
}

/// Shared by every wrapper of one loop.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<CallTimes>>);

impl Recorder {
    fn add(&self, method: &'static str, took: Duration) {
        let mut times = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = times.by_method.entry(method).or_default();
        entry.calls += 1;
        entry.total += took;
    }

    pub fn take(&self) -> CallTimes {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    async fn time<T>(&self, method: &'static str, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let value = call.await;
        self.add(method, started.elapsed());
        value
    }

    fn time_sync<T>(&self, method: &'static str, call: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let value = call();
        self.add(method, started.elapsed());
        value
    }
}

/// Where one loop's time went.
#[derive(Debug, Clone)]
pub struct LoopPhases {
    pub wall: Duration,
    /// `LoopOutcome::decide_millis`.
    pub decide_millis: f64,
    /// `LoopOutcome::function_millis`: decide by upstream's function label.
    pub function_millis: Vec<(&'static str, f64)>,
    /// Time inside the in-memory cloud and cluster, per contract method.
    pub fakes: CallTimes,
    /// The thread's time on a CPU and waiting for one during the loop, where the kernel tells.
    pub on_cpu: Option<Duration>,
    pub waiting: Option<Duration>,
}

impl LoopPhases {
    /// Wall time neither in decide nor in the fakes, in milliseconds.
    pub fn engine_rest_millis(&self) -> f64 {
        millis(self.wall) - self.decide_millis - millis(self.fakes.total())
    }
}

impl fmt::Display for LoopPhases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let split: Vec<String> = self
            .function_millis
            .iter()
            .filter(|(_, millis)| *millis >= 0.05)
            .map(|(function, millis)| format!("{function} {millis:.1}"))
            .collect();
        let fakes = CallTimes {
            by_method: self
                .fakes
                .by_method
                .iter()
                .filter(|(_, time)| time.total >= Duration::from_micros(50))
                .map(|(method, time)| (*method, *time))
                .collect(),
        };
        write!(
            f,
            "whole loop {:.1} ms = decide {:.1} ms ({}) + in the fakes {:.1} ms ({fakes}) + the engine's gather, snapshot and act {:.1} ms",
            millis(self.wall),
            self.decide_millis,
            split.join(", "),
            millis(self.fakes.total()),
            self.engine_rest_millis()
        )?;
        if let (Some(on_cpu), Some(waiting)) = (self.on_cpu, self.waiting) {
            write!(
                f,
                "; on a CPU {:.1} ms, waiting for one {:.1} ms",
                millis(on_cpu),
                millis(waiting)
            )?;
        }
        Ok(())
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// This thread's time on a CPU and waiting in the run queue so far (nanoseconds in
/// `/proc/thread-self/schedstat`).
fn schedstat() -> Option<(Duration, Duration)> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    let on_cpu = fields.next()??;
    let waiting = fields.next()??;
    Some((Duration::from_nanos(on_cpu), Duration::from_nanos(waiting)))
}

/// The whole loop, with every call into the fakes timed.
pub fn run_once_with_phases(prepared: &mut PreparedLoop) -> (LoopOutcome, LoopPhases) {
    let recorder = Recorder::default();
    let parts = prepared.parts();
    let cluster = TimedCluster {
        inner: &parts.api,
        recorder: recorder.clone(),
    };
    let cloud = TimedCloud {
        inner: parts.provider,
        recorder: recorder.clone(),
    };
    let stopwatch = InstantStopwatch::start();
    let sched_before = schedstat();
    let started = Instant::now();
    let outcome = block_on(
        parts
            .autoscaler
            .run_once(&cloud, &cluster, parts.now, &stopwatch),
    );
    let wall = started.elapsed();
    let sched = sched_before
        .zip(schedstat())
        .map(|((cpu0, wait0), (cpu1, wait1))| {
            (cpu1.saturating_sub(cpu0), wait1.saturating_sub(wait0))
        });
    let phases = LoopPhases {
        wall,
        decide_millis: outcome.decide_millis,
        function_millis: outcome.function_millis.clone(),
        fakes: recorder.take(),
        on_cpu: sched.map(|(cpu, _)| cpu),
        waiting: sched.map(|(_, wait)| wait),
    };
    (outcome, phases)
}

/// A [`ClusterApi`] whose every call is timed.
pub struct TimedCluster<'a> {
    pub inner: &'a dyn ClusterApi,
    pub recorder: Recorder,
}

#[async_trait]
impl ClusterApi for TimedCluster<'_> {
    async fn gather(&self) -> Result<ClusterObjects, ClusterError> {
        self.recorder
            .time("ClusterApi::gather", self.inner.gather())
            .await
    }

    async fn gather_nodes(&self) -> Result<Vec<Arc<Node>>, ClusterError> {
        self.recorder
            .time("ClusterApi::gather_nodes", self.inner.gather_nodes())
            .await
    }

    async fn node(&self, name: &str) -> Result<Option<Arc<Node>>, ClusterError> {
        self.recorder
            .time("ClusterApi::node", self.inner.node(name))
            .await
    }

    async fn pods_on_node(&self, node: &str) -> Result<Vec<Arc<Pod>>, ClusterError> {
        self.recorder
            .time("ClusterApi::pods_on_node", self.inner.pods_on_node(node))
            .await
    }

    async fn taint_node(&self, node: &str, taint: Taint, cordon: bool) -> Result<(), ClusterError> {
        self.recorder
            .time(
                "ClusterApi::taint_node",
                self.inner.taint_node(node, taint, cordon),
            )
            .await
    }

    async fn untaint_node(
        &self,
        node: &str,
        taint_key: &str,
        uncordon: bool,
    ) -> Result<(), ClusterError> {
        self.recorder
            .time(
                "ClusterApi::untaint_node",
                self.inner.untaint_node(node, taint_key, uncordon),
            )
            .await
    }

    async fn evict_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_seconds: i64,
    ) -> Result<(), EvictionError> {
        self.recorder
            .time(
                "ClusterApi::evict_pod",
                self.inner.evict_pod(namespace, name, grace_seconds),
            )
            .await
    }

    async fn pod_status(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Pod>>, ClusterError> {
        self.recorder
            .time(
                "ClusterApi::pod_status",
                self.inner.pod_status(namespace, name),
            )
            .await
    }

    async fn publish_events(&self, events: &[Event]) {
        self.recorder
            .time(
                "ClusterApi::publish_events",
                self.inner.publish_events(events),
            )
            .await
    }

    async fn write_status(&self, status: &StatusConfigMap) -> Result<(), ClusterError> {
        self.recorder
            .time("ClusterApi::write_status", self.inner.write_status(status))
            .await
    }

    async fn delete_status(&self, namespace: &str, name: &str) -> Result<(), ClusterError> {
        self.recorder
            .time(
                "ClusterApi::delete_status",
                self.inner.delete_status(namespace, name),
            )
            .await
    }

    async fn update_provisioning_request_status(
        &self,
        namespace: &str,
        name: &str,
        status: &ProvisioningRequestStatus,
    ) -> Result<(), ClusterError> {
        self.recorder
            .time(
                "ClusterApi::update_provisioning_request_status",
                self.inner
                    .update_provisioning_request_status(namespace, name, status),
            )
            .await
    }

    async fn update_capacity_buffer_status(
        &self,
        namespace: &str,
        name: &str,
        status: &CapacityBufferStatus,
    ) -> Result<(), ClusterError> {
        self.recorder
            .time(
                "ClusterApi::update_capacity_buffer_status",
                self.inner
                    .update_capacity_buffer_status(namespace, name, status),
            )
            .await
    }

    async fn ensure_buffer_pod_template(
        &self,
        buffer: &CapacityBuffer,
        scalable: &ScalableObject,
    ) -> Result<(String, i64), ClusterError> {
        self.recorder
            .time(
                "ClusterApi::ensure_buffer_pod_template",
                self.inner.ensure_buffer_pod_template(buffer, scalable),
            )
            .await
    }
}

/// A [`CloudProvider`] whose every call, and every call to its groups, is timed.
pub struct TimedCloud<'a> {
    pub inner: &'a dyn CloudProvider,
    pub recorder: Recorder,
}

impl TimedCloud<'_> {
    fn wrap(&self, group: Arc<dyn NodeGroup>) -> Arc<dyn NodeGroup> {
        Arc::new(TimedGroup {
            inner: group,
            recorder: self.recorder.clone(),
        })
    }
}

#[async_trait]
impl CloudProvider for TimedCloud<'_> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn gpu_label(&self) -> &str {
        self.inner.gpu_label()
    }

    fn available_gpu_types(&self) -> Vec<String> {
        self.inner.available_gpu_types()
    }

    fn node_gpu_config(&self, node: &Node) -> Option<GpuConfig> {
        self.inner.node_gpu_config(node)
    }

    fn resource_limits(&self) -> Result<Option<ResourceLimits>, CloudError> {
        self.recorder
            .time_sync("CloudProvider::resource_limits", || {
                self.inner.resource_limits()
            })
    }

    fn pricing(&self) -> Result<Arc<dyn PricingModel>, CloudError> {
        self.recorder
            .time_sync("CloudProvider::pricing", || self.inner.pricing())
    }

    async fn node_price_per_hour(&self, node: &Node, start: Timestamp) -> Result<f64, CloudError> {
        self.recorder
            .time(
                "CloudProvider::node_price_per_hour",
                self.inner.node_price_per_hour(node, start),
            )
            .await
    }

    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        let groups = self
            .recorder
            .time("CloudProvider::node_groups", self.inner.node_groups())
            .await?;
        Ok(groups.into_iter().map(|g| self.wrap(g)).collect())
    }

    async fn node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        let group = self
            .recorder
            .time(
                "CloudProvider::node_group_for_node",
                self.inner.node_group_for_node(node),
            )
            .await?;
        Ok(group.map(|g| self.wrap(g)))
    }

    async fn has_instance(&self, node: &Node) -> Result<bool, CloudError> {
        self.recorder
            .time("CloudProvider::has_instance", self.inner.has_instance(node))
            .await
    }

    async fn scale_down_vetoes(&self, nodes: &[Arc<Node>]) -> HashSet<String> {
        self.recorder
            .time(
                "CloudProvider::scale_down_vetoes",
                self.inner.scale_down_vetoes(nodes),
            )
            .await
    }

    async fn refresh(&self) -> Result<(), CloudError> {
        self.recorder
            .time("CloudProvider::refresh", self.inner.refresh())
            .await
    }

    async fn cleanup(&self) -> Result<(), CloudError> {
        self.recorder
            .time("CloudProvider::cleanup", self.inner.cleanup())
            .await
    }
}

#[derive(Debug)]
struct TimedGroup {
    inner: Arc<dyn NodeGroup>,
    recorder: Recorder,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Recorder")
    }
}

#[async_trait]
impl NodeGroup for TimedGroup {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn min_size(&self) -> usize {
        self.inner.min_size()
    }

    fn max_size(&self) -> usize {
        self.inner.max_size()
    }

    fn debug(&self) -> String {
        self.inner.debug()
    }

    fn exist(&self) -> bool {
        self.inner.exist()
    }

    fn autoprovisioned(&self) -> bool {
        self.inner.autoprovisioned()
    }

    async fn target_size(&self) -> Result<usize, CloudError> {
        self.recorder
            .time("NodeGroup::target_size", self.inner.target_size())
            .await
    }

    async fn increase_size(&self, delta: usize) -> Result<(), CloudError> {
        self.recorder
            .time("NodeGroup::increase_size", self.inner.increase_size(delta))
            .await
    }

    async fn atomic_increase_size(&self, delta: usize) -> Result<(), CloudError> {
        self.recorder
            .time(
                "NodeGroup::atomic_increase_size",
                self.inner.atomic_increase_size(delta),
            )
            .await
    }

    async fn delete_nodes(&self, nodes: &[Node]) -> Result<(), CloudError> {
        self.recorder
            .time("NodeGroup::delete_nodes", self.inner.delete_nodes(nodes))
            .await
    }

    async fn force_delete_nodes(&self, nodes: &[Node]) -> Result<(), CloudError> {
        self.recorder
            .time(
                "NodeGroup::force_delete_nodes",
                self.inner.force_delete_nodes(nodes),
            )
            .await
    }

    async fn decrease_target_size(&self, delta: i64) -> Result<(), CloudError> {
        self.recorder
            .time(
                "NodeGroup::decrease_target_size",
                self.inner.decrease_target_size(delta),
            )
            .await
    }

    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        self.recorder
            .time("NodeGroup::nodes", self.inner.nodes())
            .await
    }

    async fn template_node_info(&self) -> Result<NodeTemplate, CloudError> {
        self.recorder
            .time(
                "NodeGroup::template_node_info",
                self.inner.template_node_info(),
            )
            .await
    }

    async fn get_options(&self) -> Result<Option<GroupOptions>, CloudError> {
        self.recorder
            .time("NodeGroup::get_options", self.inner.get_options())
            .await
    }
}
