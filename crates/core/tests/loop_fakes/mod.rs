//! Small, honest fakes of the cloud and the Kubernetes API for the loop tests: they keep state
//! the way the real systems would and record every mutating call, so tests can assert what the
//! autoscaler did — and what it did not do.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use ferroscale_core::cloud::{
    CloudError, CloudProvider, GroupOptions, Instance, NodeGroup, NodeTemplate, ResourceLimits,
};
use ferroscale_core::events::Event;
use ferroscale_core::kubernetes::{
    ClusterApi, ClusterError, ClusterObjects, EvictionError, StatusConfigMap, WorkloadController,
};
use ferroscale_model::{Node, OwnerRef, Pod, PodPhase, Resources, Taint, Timestamp};

mod actuation;
#[allow(unused_imports)] // only the actuation tests use it
pub use actuation::ActuationFixture;

/// Every mutating call, as text, in order (shared by the cloud and the cluster fakes).
pub type CallLog = Arc<Mutex<Vec<String>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn node(name: &str, cpu_milli: i64, memory: i64) -> Node {
    let mut resources = Resources::new(cpu_milli, memory);
    resources.pods = 110;
    let mut node = Node::new(name, resources);
    node.provider_id = format!("fake://{name}");
    node
}

pub fn pod_on(name: &str, node: &str, cpu_milli: i64) -> Pod {
    let mut pod = Pod::new("default", name);
    pod.requests = Resources::new(cpu_milli, 0);
    pod.node_name = Some(node.into());
    pod.phase = PodPhase::Running;
    pod.owner_references.push(OwnerRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "web".into(),
        uid: "uid-rs-web".into(),
        controller: true,
    });
    pod
}

pub fn daemonset_pod_on(name: &str, node: &str) -> Pod {
    let mut pod = Pod::new("kube-system", name);
    pod.node_name = Some(node.into());
    pod.phase = PodPhase::Running;
    pod.owner_references.push(OwnerRef {
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        name: "agent".into(),
        uid: "uid-ds-agent".into(),
        controller: true,
    });
    pod
}

// ---------------------------------------------------------------------------------------------
// Cloud
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
pub struct FakeGroup {
    pub id: String,
    pub min: usize,
    pub max: usize,
    pub target: Mutex<usize>,
    /// Instance ids (`fake://<node>`).
    pub instances: Mutex<Vec<String>>,
    pub template: NodeTemplate,
    pub fail_delete: Mutex<bool>,
    /// Read calls that fail with a provider error, by method name (`nodes`, `target_size`,
    /// `get_options`, `template_node_info`).
    pub failing: Mutex<HashSet<&'static str>>,
    pub log: CallLog,
}

impl FakeGroup {
    fn fails(&self, method: &str) -> Result<(), CloudError> {
        if lock(&self.failing).contains(method) {
            return Err(CloudError::Provider(format!(
                "{method} of {} timed out",
                self.id
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl NodeGroup for FakeGroup {
    fn id(&self) -> &str {
        &self.id
    }
    fn min_size(&self) -> usize {
        self.min
    }
    fn max_size(&self) -> usize {
        self.max
    }
    async fn target_size(&self) -> Result<usize, CloudError> {
        self.fails("target_size")?;
        Ok(*lock(&self.target))
    }
    async fn increase_size(&self, delta: usize) -> Result<(), CloudError> {
        lock(&self.log).push(format!("cloud.increase_size {} {delta}", self.id));
        let mut target = lock(&self.target);
        if *target + delta > self.max {
            return Err(CloudError::InvalidRequest("over max".into()));
        }
        *target += delta;
        Ok(())
    }
    async fn delete_nodes(&self, nodes: &[Node]) -> Result<(), CloudError> {
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        lock(&self.log).push(format!(
            "cloud.delete_nodes {} {}",
            self.id,
            names.join(",")
        ));
        if *lock(&self.fail_delete) {
            return Err(CloudError::Provider("quota exceeded".into()));
        }
        let mut instances = lock(&self.instances);
        for node in nodes {
            if let Some(i) = instances.iter().position(|id| *id == node.provider_id) {
                instances.remove(i);
                let mut target = lock(&self.target);
                *target = target.saturating_sub(1);
            }
        }
        Ok(())
    }
    async fn decrease_target_size(&self, delta: i64) -> Result<(), CloudError> {
        lock(&self.log).push(format!("cloud.decrease_target_size {} {delta}", self.id));
        let mut target = lock(&self.target);
        *target = target.saturating_sub(usize::try_from(-delta).unwrap_or(0));
        Ok(())
    }
    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        self.fails("nodes")?;
        Ok(lock(&self.instances)
            .iter()
            .map(|id| Instance::running(id.clone()))
            .collect())
    }
    async fn template_node_info(&self) -> Result<NodeTemplate, CloudError> {
        self.fails("template_node_info")?;
        Ok(self.template.clone())
    }
    async fn get_options(&self) -> Result<Option<GroupOptions>, CloudError> {
        self.fails("get_options")?;
        Err(CloudError::NotImplemented)
    }
}

pub struct FakeCloud {
    pub groups: Vec<Arc<FakeGroup>>,
    pub log: CallLog,
    /// Nodes asked about with `node_group_for_node`, in order (kept apart from the call log,
    /// which lists what changes the cloud or the cluster).
    pub lookups: Arc<Mutex<Vec<String>>>,
    /// Hourly price of a group's nodes, by group id (a node is priced by the group id its name
    /// contains); a node without one has no price (NotImplemented).
    pub prices: Arc<Mutex<BTreeMap<String, f64>>>,
    /// Nodes the provider keeps out of scale-down (`scale_down_vetoes`).
    pub vetoed: Arc<Mutex<HashSet<String>>>,
    /// Read calls that fail with a provider error, by method name (`node_group_for_node`,
    /// `resource_limits`, `node_price_per_hour`).
    pub failing: Arc<Mutex<HashSet<&'static str>>>,
}

impl FakeCloud {
    fn fails(&self, method: &str) -> Result<(), CloudError> {
        if lock(&self.failing).contains(method) {
            return Err(CloudError::Provider(format!("{method} timed out")));
        }
        Ok(())
    }
}

impl FakeCloud {
    pub fn new(log: CallLog) -> FakeCloud {
        FakeCloud {
            groups: Vec::new(),
            log,
            lookups: Arc::default(),
            prices: Arc::default(),
            vetoed: Arc::default(),
            failing: Arc::default(),
        }
    }

    /// A group of 4-core, 16 GiB nodes.
    pub fn add_group(&mut self, id: &str, min: usize, max: usize) -> Arc<FakeGroup> {
        let template = NodeTemplate {
            node: node(&format!("{id}-template"), 4000, 16 << 30),
            pods: Vec::new(),
            csi_node: None,
            resource_slices: Vec::new(),
        };
        self.add_group_with_template(id, min, max, template)
    }

    /// A group whose new nodes look like `template`.
    pub fn add_group_with_template(
        &mut self,
        id: &str,
        min: usize,
        max: usize,
        template: NodeTemplate,
    ) -> Arc<FakeGroup> {
        let group = Arc::new(FakeGroup {
            id: id.to_string(),
            min,
            max,
            target: Mutex::new(0),
            instances: Mutex::new(Vec::new()),
            template,
            fail_delete: Mutex::new(false),
            failing: Mutex::default(),
            log: self.log.clone(),
        });
        self.groups.push(group.clone());
        group
    }

    pub fn group(&self, id: &str) -> &Arc<FakeGroup> {
        self.groups
            .iter()
            .find(|g| g.id == id)
            .expect("test group exists")
    }

    /// Registers an instance for `node` in the group (as if the cloud created it).
    pub fn add_instance(&self, group: &str, node: &Node) {
        let group = self.group(group);
        lock(&group.instances).push(node.provider_id.clone());
        let count = lock(&group.instances).len();
        let mut target = lock(&group.target);
        *target = (*target).max(count);
    }
}

#[async_trait]
impl CloudProvider for FakeCloud {
    fn name(&self) -> &str {
        "fake"
    }
    fn gpu_label(&self) -> &str {
        "fake/gpu"
    }
    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        Ok(self
            .groups
            .iter()
            .map(|g| g.clone() as Arc<dyn NodeGroup>)
            .collect())
    }
    async fn node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        lock(&self.lookups).push(node.name.clone());
        self.fails("node_group_for_node")?;
        Ok(self
            .groups
            .iter()
            .find(|g| lock(&g.instances).contains(&node.provider_id))
            .map(|g| g.clone() as Arc<dyn NodeGroup>))
    }
    async fn node_price_per_hour(&self, node: &Node, _start: Timestamp) -> Result<f64, CloudError> {
        self.fails("node_price_per_hour")?;
        lock(&self.prices)
            .iter()
            .find(|(group, _)| node.name.contains(group.as_str()))
            .map(|(_, price)| *price)
            .ok_or(CloudError::NotImplemented)
    }
    async fn scale_down_vetoes(&self, nodes: &[Arc<Node>]) -> HashSet<String> {
        let vetoed = lock(&self.vetoed);
        nodes
            .iter()
            .filter(|n| vetoed.contains(&n.name))
            .map(|n| n.name.clone())
            .collect()
    }
    fn resource_limits(&self) -> Result<Option<ResourceLimits>, CloudError> {
        self.fails("resource_limits")?;
        Ok(None)
    }
    async fn refresh(&self) -> Result<(), CloudError> {
        Ok(())
    }
    async fn cleanup(&self) -> Result<(), CloudError> {
        lock(&self.log).push("cloud.cleanup".into());
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Kubernetes
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
pub struct ClusterState {
    pub nodes: BTreeMap<String, Node>,
    /// By `namespace/name`.
    pub pods: BTreeMap<String, Pod>,
    /// Pods whose eviction a PDB refuses.
    pub pdb_protected: HashSet<String>,
    pub events: Vec<Event>,
    pub status: Option<StatusConfigMap>,
    /// Evicted pods disappear at once (true) or stay until the test removes them (false).
    pub evictions_remove_pods: bool,
    /// Workload controllers `gather` reports as existing.
    pub controllers: Vec<WorkloadController>,
    /// Claims, volumes, storage classes and CSINodes `gather` reports.
    pub volumes: ferroscale_model::VolumeObjects,
    /// ResourceSlices, DeviceClasses, ResourceClaims and claim templates `gather` reports.
    pub dra: ferroscale_model::DraObjects,
    /// ProvisioningRequests, buffers, quotas and PodTemplates `gather` reports; the status writes
    /// land here, so the next loop reads them back.
    pub capacity: ferroscale_model::CapacityObjects,
    /// `gather` fails (the API server does not answer).
    pub fail_gather: bool,
    /// Node updates that remove a taint fail (the API server refuses them).
    pub fail_untaints: bool,
    /// `gather` reports these kinds as read from a view that may be behind.
    pub behind: Vec<String>,
}

pub struct FakeCluster {
    pub state: Mutex<ClusterState>,
    pub log: CallLog,
}

impl FakeCluster {
    pub fn new(log: CallLog) -> FakeCluster {
        FakeCluster {
            state: Mutex::new(ClusterState {
                evictions_remove_pods: true,
                ..ClusterState::default()
            }),
            log,
        }
    }

    pub fn state(&self) -> MutexGuard<'_, ClusterState> {
        lock(&self.state)
    }

    pub fn add_node(&self, node: Node) {
        self.state().nodes.insert(node.name.clone(), node);
    }

    pub fn add_pod(&self, pod: Pod) {
        self.state().pods.insert(pod.key(), pod);
    }

    pub fn node(&self, name: &str) -> Option<Node> {
        self.state().nodes.get(name).cloned()
    }

    pub fn events_with(&self, reason: &str) -> Vec<Event> {
        self.state()
            .events
            .iter()
            .filter(|e| e.reason == reason)
            .cloned()
            .collect()
    }
}

#[async_trait]
impl ClusterApi for FakeCluster {
    async fn gather(&self) -> Result<ClusterObjects, ClusterError> {
        let state = self.state();
        if state.fail_gather {
            return Err(ClusterError::Api("the API server does not answer".into()));
        }
        Ok(ClusterObjects {
            behind: state.behind.clone(),
            nodes: state.nodes.values().cloned().map(Arc::new).collect(),
            pods: Arc::new(state.pods.values().cloned().map(Arc::new).collect()),
            controllers: state.controllers.clone(),
            volumes: state.volumes.clone(),
            dra: state.dra.clone(),
            capacity: state.capacity.clone(),
            ..ClusterObjects::default()
        })
    }
    async fn node(&self, name: &str) -> Result<Option<Arc<Node>>, ClusterError> {
        Ok(self.state().nodes.get(name).cloned().map(Arc::new))
    }
    async fn pods_on_node(&self, node: &str) -> Result<Vec<Arc<Pod>>, ClusterError> {
        Ok(self
            .state()
            .pods
            .values()
            .filter(|p| p.node_name.as_deref() == Some(node))
            .cloned()
            .map(Arc::new)
            .collect())
    }
    async fn taint_node(&self, node: &str, taint: Taint, cordon: bool) -> Result<(), ClusterError> {
        lock(&self.log).push(format!(
            "kube.taint {node} {}={}:{} cordon={cordon}",
            taint.key,
            taint.value,
            taint.effect.as_str()
        ));
        let mut state = self.state();
        let n = state.nodes.get_mut(node).ok_or(ClusterError::NotFound {
            kind: "node",
            name: node.to_string(),
        })?;
        n.taints.retain(|t| t.key != taint.key);
        n.taints.push(taint);
        if cordon {
            n.unschedulable = true;
        }
        Ok(())
    }
    async fn untaint_node(
        &self,
        node: &str,
        taint_key: &str,
        uncordon: bool,
    ) -> Result<(), ClusterError> {
        lock(&self.log).push(format!(
            "kube.untaint {node} {taint_key} uncordon={uncordon}"
        ));
        let mut state = self.state();
        if state.fail_untaints {
            return Err(ClusterError::Api(
                "503 the API server is unavailable".into(),
            ));
        }
        let n = state.nodes.get_mut(node).ok_or(ClusterError::NotFound {
            kind: "node",
            name: node.to_string(),
        })?;
        n.taints.retain(|t| t.key != taint_key);
        if uncordon {
            n.unschedulable = false;
        }
        Ok(())
    }
    async fn evict_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_seconds: i64,
    ) -> Result<(), EvictionError> {
        let key = format!("{namespace}/{name}");
        lock(&self.log).push(format!("kube.evict {key} grace={grace_seconds}"));
        let mut state = self.state();
        if state.pdb_protected.contains(&key) {
            return Err(EvictionError::DisruptionBudget {
                pod: key,
                message: "Cannot evict pod as it would violate the pod's disruption budget".into(),
            });
        }
        if !state.pods.contains_key(&key) {
            return Err(EvictionError::NotFound { pod: key });
        }
        if state.evictions_remove_pods {
            state.pods.remove(&key);
        }
        Ok(())
    }
    async fn pod_status(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Pod>>, ClusterError> {
        Ok(self
            .state()
            .pods
            .get(&format!("{namespace}/{name}"))
            .cloned()
            .map(Arc::new))
    }
    async fn publish_events(&self, events: &[Event]) {
        self.state().events.extend(events.iter().cloned());
    }
    async fn write_status(&self, status: &StatusConfigMap) -> Result<(), ClusterError> {
        lock(&self.log).push("kube.write_status".into());
        self.state().status = Some(status.clone());
        Ok(())
    }
    async fn delete_status(&self, namespace: &str, name: &str) -> Result<(), ClusterError> {
        lock(&self.log).push(format!("kube.delete_status {namespace}/{name}"));
        self.state().status = None;
        Ok(())
    }
    async fn update_provisioning_request_status(
        &self,
        namespace: &str,
        name: &str,
        status: &ferroscale_model::ProvisioningRequestStatus,
    ) -> Result<(), ClusterError> {
        lock(&self.log).push(format!(
            "kube.update_provisioning_request_status {namespace}/{name}"
        ));
        let mut state = self.state();
        let request = state
            .capacity
            .provisioning_requests
            .iter_mut()
            .find(|r| r.namespace == namespace && r.name == name)
            .ok_or_else(|| ClusterError::NotFound {
                kind: "ProvisioningRequest",
                name: format!("{namespace}/{name}"),
            })?;
        Arc::make_mut(request).status = status.clone();
        Ok(())
    }
    async fn update_capacity_buffer_status(
        &self,
        namespace: &str,
        name: &str,
        status: &ferroscale_model::CapacityBufferStatus,
    ) -> Result<(), ClusterError> {
        lock(&self.log).push(format!(
            "kube.update_capacity_buffer_status {namespace}/{name}"
        ));
        let mut state = self.state();
        let buffer = state
            .capacity
            .buffers
            .iter_mut()
            .find(|b| b.namespace == namespace && b.name == name)
            .ok_or_else(|| ClusterError::NotFound {
                kind: "CapacityBuffer",
                name: format!("{namespace}/{name}"),
            })?;
        Arc::make_mut(buffer).status = status.clone();
        Ok(())
    }
    async fn ensure_buffer_pod_template(
        &self,
        buffer: &ferroscale_model::CapacityBuffer,
        scalable: &ferroscale_model::ScalableObject,
    ) -> Result<(String, i64), ClusterError> {
        let name = ferroscale_capacity::buffers::managed_pod_template_name(&buffer.name);
        lock(&self.log).push(format!(
            "kube.ensure_buffer_pod_template {}/{name}",
            buffer.namespace
        ));
        let Some(pod) = &scalable.pod else {
            return Err(ClusterError::Api(format!(
                "no pod shape resolved for {}/{}",
                scalable.reference.kind, scalable.reference.name
            )));
        };
        let mut state = self.state();
        let templates = &mut state.capacity.pod_templates;
        let existing = templates
            .iter()
            .position(|t| t.namespace == buffer.namespace && t.name == name);
        let generation = match existing {
            Some(i) if templates[i].pod == *pod => templates[i].generation,
            Some(i) => templates[i].generation + 1,
            None => 1,
        };
        let template = Arc::new(ferroscale_model::PodTemplate {
            namespace: buffer.namespace.clone(),
            name: name.clone(),
            uid: format!("uid-template-{}-{name}", buffer.namespace),
            generation,
            pod: pod.clone(),
        });
        match existing {
            Some(i) => templates[i] = template,
            None => templates.push(template),
        }
        Ok((name, generation))
    }
}

/// The calls recorded so far that start with `prefix`.
pub fn calls(log: &CallLog, prefix: &str) -> Vec<String> {
    lock(log)
        .iter()
        .filter(|c| c.starts_with(prefix))
        .cloned()
        .collect()
}

pub fn t(secs: i64) -> Timestamp {
    Timestamp::from_secs(secs)
}

// ---------------------------------------------------------------------------------------------
// Driving the loop
// ---------------------------------------------------------------------------------------------

/// One `run_once` at `now`, without measuring Decide time.
pub fn run(
    autoscaler: &mut ferroscale_core::autoscaler::Autoscaler,
    cloud: &FakeCloud,
    cluster: &FakeCluster,
    now: Timestamp,
) -> ferroscale_core::autoscaler::LoopOutcome {
    futures::executor::block_on(autoscaler.run_once(
        cloud,
        cluster,
        now,
        &ferroscale_core::autoscaler::NoStopwatch,
    ))
}

/// A pod of ReplicaSet `web` that the scheduler marked unschedulable at `created`.
pub fn pending_pod(name: &str, cpu_milli: i64, created: Timestamp) -> Pod {
    let mut pod = pod_on(name, "x", cpu_milli);
    pod.node_name = None;
    pod.phase = PodPhase::Pending;
    pod.creation_time = created;
    pod.requests = Resources::new(cpu_milli, 1 << 30);
    pod.scheduled_condition = Some(Box::new(ferroscale_model::PodCondition {
        status: ferroscale_model::ConditionStatus::False,
        reason: "Unschedulable".into(),
        last_transition: Some(created),
    }));
    pod
}
