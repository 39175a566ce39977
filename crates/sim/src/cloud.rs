//! The simulated cloud: node groups that implement the real `CloudProvider` / `NodeGroup` contract
//! against a simulated clock.
//!
//! `IncreaseSize` creates instances in `Creating` state that turn into Ready nodes once the group's
//! provisioning delay has passed on the simulated clock ([`SimulatedCloud::provision`], called by the
//! runner). Failure windows make calls fail, or make the instances requested inside them fail to be
//! created, the way a stocked-out or over-quota cloud does. The async methods never wait: they resolve
//! at once, so the runner drives them with `futures::executor::block_on`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use ferroscale_core::cloud::{
    CloudError, CloudProvider, ErrorClass, GroupOptions, Instance, InstanceErrorInfo,
    InstanceState, InstanceStatus, NodeGroup, NodeTemplate, PricingModel,
};
use ferroscale_core::cloud_node_controller::rules::{CLOUD_LABELS, UNINITIALIZED_TAINT};
use ferroscale_model::labels::HOSTNAME;
use ferroscale_model::taints::first_untolerated;
use ferroscale_model::time::format_duration;
use ferroscale_model::{
    ConditionStatus, CsiNode, CsiNodeDriver, DaemonSet, Node, NodeConditions, Pod, PodPhase, Taint,
    TaintEffect, Timestamp,
};

use crate::dra::{GroupDevices, node_slices};
use crate::scenario::group_digits;

/// Provider ids look like `sim://<group>/<node name>`, so the group of a node is known without a
/// search.
const PROVIDER_ID_SCHEME: &str = "sim://";

/// Label key the simulated cloud uses to mark GPU nodes.
pub const SIM_GPU_LABEL: &str = "sim.ferroscale.dev/gpu-type";

/// A scale-up the simulated cloud refused because the run would have had more nodes at once than a
/// run may have (the scenario limit `nodes`, docs/scenario.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLimitExceeded {
    pub group: String,
    pub at: Timestamp,
    /// Instances every group had when the call came.
    pub existing: usize,
    /// The nodes the call asked for.
    pub requested: usize,
    pub limit: usize,
}

impl std::fmt::Display for NodeLimitExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "at {} of simulated time node group {} asked for {} more node(s) while the cloud \
             held {}, more than the {} nodes a run may have at once",
            format_duration(self.at.since(crate::runner::SIMULATION_START)),
            self.group,
            group_digits(self.requested as u64),
            group_digits(self.existing as u64),
            group_digits(self.limit as u64)
        )
    }
}

/// The instances every group holds together, against the most a run may have. Shared by the
/// groups: a scale-up reserves its nodes here before any instance is allocated, so a scenario
/// whose groups allow millions of nodes costs memory only for the nodes it really creates.
#[derive(Debug)]
struct NodeBudget {
    limit: AtomicUsize,
    existing: AtomicUsize,
    exceeded: Mutex<Option<NodeLimitExceeded>>,
}

impl NodeBudget {
    fn unlimited() -> NodeBudget {
        NodeBudget {
            limit: AtomicUsize::new(usize::MAX),
            existing: AtomicUsize::new(0),
            exceeded: Mutex::new(None),
        }
    }

    /// Takes `count` nodes from the budget, or remembers (the first) refusal and returns it.
    fn reserve(&self, group: &str, count: usize, at: Timestamp) -> Result<(), NodeLimitExceeded> {
        let limit = self.limit.load(Ordering::Relaxed);
        self.existing
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |existing| {
                existing.checked_add(count).filter(|total| *total <= limit)
            })
            .map(|_| ())
            .map_err(|existing| {
                let refusal = NodeLimitExceeded {
                    group: group.to_string(),
                    at,
                    existing,
                    requested: count,
                    limit,
                };
                self.exceeded
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert_with(|| refusal.clone());
                refusal
            })
    }

    fn release(&self, count: usize) {
        // Saturating: instances that existed before a limit was set were counted too.
        let _ = self
            .existing
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |existing| {
                Some(existing.saturating_sub(count))
            });
    }
}

/// What a failure window makes fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailingCall {
    IncreaseSize,
    DeleteNodes,
    DecreaseTargetSize,
    /// `IncreaseSize` succeeds but the instances requested in the window are never created: they
    /// stay in `Creating` with error information, as after a stockout.
    InstanceCreation,
}

/// A half-open window `[from, to)` of simulated time in which `call` fails with `class`.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureWindow {
    pub call: FailingCall,
    pub from: Timestamp,
    pub to: Timestamp,
    pub class: ErrorClass,
}

impl FailureWindow {
    pub fn contains(&self, at: Timestamp) -> bool {
        self.from <= at && at < self.to
    }
}

/// Everything the simulated cloud needs to know about one node group.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    pub id: String,
    pub min_size: usize,
    pub max_size: usize,
    /// Nodes that exist, Ready and empty, at the start of the simulation.
    pub initial_size: usize,
    /// Time from `IncreaseSize` to the node being Ready.
    pub provisioning_delay: Duration,
    /// Fault injection.
    pub failures: Vec<FailureWindow>,
    pub price_per_hour: f64,
    /// The node every new instance of the group registers as (name, uid and provider id are
    /// replaced per instance).
    pub template: Node,
    /// Nodes that are instances of the group at the start as they are (a replayed live
    /// cluster's), besides the `initial_size` empty ones; their provider ids are replaced.
    pub existing_nodes: Vec<Node>,
    /// The CSI drivers (with volume limits) the group's nodes report in their CSINode.
    pub csi_drivers: Vec<CsiNodeDriver>,
    /// The DRA devices the group's nodes publish as ResourceSlices.
    pub devices: Vec<GroupDevices>,
    /// Whether a cloud-controller-manager initializes the group's new nodes and deletes a Node
    /// with its machine. Without one, nodes added during the run register uninitialized and the
    /// runner leaves a Node behind when its machine goes (docs/behaviour.md SIM-106).
    pub cloud_controller_manager: bool,
}

/// One machine of a simulated group.
#[derive(Debug, Clone)]
struct SimInstance {
    node_name: String,
    provider_id: String,
    state: InstanceState,
    error: Option<InstanceErrorInfo>,
    requested_at: Timestamp,
    ready_at: Timestamp,
    /// Whether the runner has been handed the node of this instance.
    registered: bool,
    /// Whether its node registers with the uninitialized taint and without the cloud labels
    /// (a node the run adds to a group without a cloud-controller-manager).
    uninitialized: bool,
}

/// How long one instance was paid for, for the node-hours and cost summary.
#[derive(Debug, Clone, PartialEq)]
pub struct BilledInstance {
    pub group: String,
    pub from: Timestamp,
    /// `None` while the instance still exists.
    pub to: Option<Timestamp>,
}

#[derive(Debug, Default)]
struct GroupState {
    target: usize,
    instances: Vec<SimInstance>,
    next_index: usize,
    /// Instances already deleted, for billing.
    deleted: Vec<(Timestamp, Timestamp)>,
    /// Provider ids of instances removed through `DeleteNodes` (rather than lost), so the runner
    /// can tell the autoscaler's removals from the cloud's.
    deleted_through_api: std::collections::HashSet<String>,
    /// Instances removed so far (deleted, lost or cancelled), so the runner can tell that no
    /// node can have lost its machine since it last looked.
    removals: u64,
    /// Every `IncreaseSize` call received, for the resize-call counts of the reports.
    resize_calls: crate::resize_calls::ResizeCallLog,
}

/// A simulated node group. Shared between the cloud and the engine through `Arc`.
#[derive(Debug)]
pub struct SimulatedNodeGroup {
    spec: GroupSpec,
    budget: Arc<NodeBudget>,
    daemonsets: Arc<Vec<DaemonSet>>,
    clock: crate::clock::SimClock,
    state: Mutex<GroupState>,
}

/// A node that has just finished provisioning and registers with the cluster.
#[derive(Debug, Clone)]
pub struct ProvisionedNode {
    pub group: String,
    pub node: Node,
}

impl SimulatedNodeGroup {
    pub fn spec(&self) -> &GroupSpec {
        &self.spec
    }

    fn state(&self) -> MutexGuard<'_, GroupState> {
        // A panic while holding the lock can only come from a bug in this module; the state is
        // still consistent enough to report, so poisoning is not propagated.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The failure window covering a call to `call` at `at`, if any.
    fn failure(&self, call: FailingCall, at: Timestamp) -> Option<&FailureWindow> {
        self.spec
            .failures
            .iter()
            .find(|w| w.call == call && w.contains(at))
    }

    /// The error a call fails with inside a failure window.
    fn injected_error(
        &self,
        call: FailingCall,
        what: &str,
        now: Timestamp,
    ) -> Result<(), CloudError> {
        match self.failure(call, now) {
            Some(window) => Err(CloudError::Provider(format!(
                "{}: simulated failure of {what} on group {} (failing from {} to {})",
                window.class, self.spec.id, window.from, window.to
            ))),
            None => Ok(()),
        }
    }

    /// The `IncreaseSize` calls this group received so far.
    pub fn resize_calls(&self) -> crate::resize_calls::ResizeCallLog {
        self.state().resize_calls.clone()
    }

    /// The provider id of this group's instance behind node `node_name`.
    pub fn provider_id_of(&self, node_name: &str) -> String {
        format!("{PROVIDER_ID_SCHEME}{}/{node_name}", self.spec.id)
    }

    /// Name of the `index`-th node ever created in this group: `<group>-<index>`, counting from 0.
    pub fn node_name(&self, index: usize) -> String {
        format!("{}-{index}", self.spec.id)
    }

    fn new_instance(
        &self,
        state: &mut GroupState,
        now: Timestamp,
        ready_at: Timestamp,
    ) -> SimInstance {
        // A replayed node may already carry a `<group>-<n>` name. Only replayed nodes can: the
        // others are numbered in order, so a group without any skips the search (it made a
        // scale-up of n nodes cost n² name comparisons).
        let mut node_name = self.node_name(state.next_index);
        state.next_index += 1;
        while !self.spec.existing_nodes.is_empty()
            && state.instances.iter().any(|i| i.node_name == node_name)
        {
            node_name = self.node_name(state.next_index);
            state.next_index += 1;
        }
        let error = self
            .failure(FailingCall::InstanceCreation, now)
            .map(|w| InstanceErrorInfo {
                class: w.class,
                code: "SimulatedCreationFailure".to_string(),
                message: format!(
                    "instance {node_name} of group {} could not be created ({})",
                    self.spec.id, w.class
                ),
            });
        SimInstance {
            provider_id: self.provider_id_of(&node_name),
            node_name,
            state: InstanceState::Creating,
            error,
            requested_at: now,
            ready_at,
            registered: false,
            uninitialized: !self.spec.cloud_controller_manager,
        }
    }

    /// The node an instance registers as: the template with the instance's identity, Ready since
    /// `at`; without a cloud-controller-manager, as a kubelet with `--cloud-provider=external`
    /// registers it (uninitialized taint, no zone, region or instance-type label).
    fn node_for(&self, instance: &SimInstance, at: Timestamp) -> Node {
        let mut node = self.spec.template.clone();
        if instance.uninitialized {
            for key in CLOUD_LABELS {
                node.labels.remove(key);
            }
            node.taints.retain(|t| t.key != UNINITIALIZED_TAINT);
            node.taints.push(Taint::new(
                UNINITIALIZED_TAINT,
                "true",
                TaintEffect::NoSchedule,
            ));
        }
        node.name = instance.node_name.clone();
        node.uid = format!("uid-node-{}", instance.node_name);
        node.provider_id = instance.provider_id.clone();
        node.labels
            .insert(HOSTNAME.to_string(), instance.node_name.clone());
        node.creation_time = at;
        node.conditions = NodeConditions {
            ready: Some(ConditionStatus::True),
            last_transition: Some(at),
            ..NodeConditions::default()
        };
        node
    }

    /// Marks every healthy instance whose delay has passed as Running and returns their nodes.
    fn provision(&self, now: Timestamp) -> Vec<ProvisionedNode> {
        let mut state = self.state();
        let mut ready = Vec::new();
        for i in 0..state.instances.len() {
            let instance = &state.instances[i];
            if instance.registered || instance.error.is_some() || instance.ready_at > now {
                continue;
            }
            let node = self.node_for(instance, instance.ready_at);
            let instance = &mut state.instances[i];
            instance.state = InstanceState::Running;
            instance.registered = true;
            ready.push(ProvisionedNode {
                group: self.spec.id.clone(),
                node,
            });
        }
        ready
    }

    /// Removes instances by provider id (a cloud-side failure or a scenario event), outside the
    /// `NodeGroup` contract: no size checks. Returns how many were removed.
    fn remove_instances(&self, provider_ids: &[&str], now: Timestamp) -> usize {
        let mut state = self.state();
        let before = state.instances.len();
        let mut removed = Vec::new();
        state.instances.retain(|i| {
            let gone = provider_ids.contains(&i.provider_id.as_str());
            if gone {
                removed.push((i.requested_at, now));
            }
            !gone
        });
        let count = before - state.instances.len();
        self.budget.release(count);
        state.target = state.target.saturating_sub(count);
        state.deleted.extend(removed);
        state.removals += count as u64;
        count
    }

    fn billing(&self) -> Vec<BilledInstance> {
        let state = self.state();
        let group = &self.spec.id;
        state
            .deleted
            .iter()
            .map(|(from, to)| BilledInstance {
                group: group.clone(),
                from: *from,
                to: Some(*to),
            })
            .chain(state.instances.iter().map(|i| BilledInstance {
                group: group.clone(),
                from: i.requested_at,
                to: None,
            }))
            .collect()
    }

    /// Target size without going through the async contract (for reports).
    pub fn current_target(&self) -> usize {
        self.state().target
    }
}

/// Whether a DaemonSet would run a pod on `node`: its node selector and required node affinity
/// match and every NoSchedule/NoExecute taint is tolerated.
pub fn daemonset_runs_on(daemonset: &DaemonSet, node: &Node) -> bool {
    let pod = &daemonset.pod_template;
    pod.node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v))
        && pod
            .required_node_affinity
            .as_ref()
            .is_none_or(|a| a.matches(&node.name, &node.labels))
        && first_untolerated(&node.taints, &pod.tolerations).is_none()
}

/// The pod a DaemonSet runs on `node`, bound to it.
pub fn daemonset_pod_for(daemonset: &DaemonSet, node: &Node) -> Pod {
    let mut pod = daemonset.pod_template.clone();
    pod.namespace = daemonset.namespace.as_str().into();
    pod.name = ferroscale_model::format_compact!("{}-{}", daemonset.name, node.name);
    pod.uid = ferroscale_model::format_compact!(
        "uid-{}-{}-{}",
        daemonset.namespace,
        daemonset.name,
        node.name
    );
    pod.node_name = Some(node.name.as_str().into());
    pod.phase = PodPhase::Running;
    pod.creation_time = node.creation_time;
    pod
}

#[async_trait]
impl NodeGroup for SimulatedNodeGroup {
    fn id(&self) -> &str {
        &self.spec.id
    }

    fn min_size(&self) -> usize {
        self.spec.min_size
    }

    fn max_size(&self) -> usize {
        self.spec.max_size
    }

    async fn target_size(&self) -> Result<usize, CloudError> {
        Ok(self.state().target)
    }

    async fn increase_size(&self, delta: usize) -> Result<(), CloudError> {
        let now = self.clock.now();
        self.state()
            .resize_calls
            .record(now, delta, self.spec.provisioning_delay);
        if delta == 0 {
            return Err(CloudError::InvalidRequest(format!(
                "group {}: size increase must be positive",
                self.spec.id
            )));
        }
        self.injected_error(
            FailingCall::IncreaseSize,
            &format!("IncreaseSize({delta})"),
            now,
        )?;
        let mut state = self.state();
        let new_target = state.target + delta;
        if new_target > self.spec.max_size {
            return Err(CloudError::InvalidRequest(format!(
                "group {}: size increase too large: desired {new_target}, max {}",
                self.spec.id, self.spec.max_size
            )));
        }
        self.budget
            .reserve(&self.spec.id, delta, now)
            .map_err(|refusal| CloudError::InvalidRequest(refusal.to_string()))?;
        let ready_at = now + self.spec.provisioning_delay;
        for _ in 0..delta {
            let instance = self.new_instance(&mut state, now, ready_at);
            state.instances.push(instance);
        }
        state.target = new_target;
        Ok(())
    }

    async fn delete_nodes(&self, nodes: &[Node]) -> Result<(), CloudError> {
        let now = self.clock.now();
        self.injected_error(FailingCall::DeleteNodes, "DeleteNodes", now)?;
        {
            let state = self.state();
            for node in nodes {
                if !state
                    .instances
                    .iter()
                    .any(|i| i.provider_id == node.provider_id)
                {
                    return Err(CloudError::InvalidRequest(format!(
                        "node {} (provider id {:?}) does not belong to group {}",
                        node.name, node.provider_id, self.spec.id
                    )));
                }
            }
            if state.target < self.spec.min_size + nodes.len() {
                return Err(CloudError::InvalidRequest(format!(
                    "group {}: deleting {} node(s) would take the size {} below the minimum {}",
                    self.spec.id,
                    nodes.len(),
                    state.target,
                    self.spec.min_size
                )));
            }
        }
        let ids: Vec<&str> = nodes.iter().map(|n| n.provider_id.as_str()).collect();
        self.remove_instances(&ids, now);
        self.state()
            .deleted_through_api
            .extend(ids.iter().map(|id| id.to_string()));
        Ok(())
    }

    async fn decrease_target_size(&self, delta: i64) -> Result<(), CloudError> {
        let now = self.clock.now();
        if delta >= 0 {
            return Err(CloudError::InvalidRequest(format!(
                "group {}: size decrease must be negative, got {delta}",
                self.spec.id
            )));
        }
        self.injected_error(FailingCall::DecreaseTargetSize, "DecreaseTargetSize", now)?;
        let count = usize::try_from(delta.unsigned_abs()).unwrap_or(usize::MAX);
        let mut state = self.state();
        let unregistered = state.instances.iter().filter(|i| !i.registered).count();
        if count > unregistered {
            return Err(CloudError::InvalidRequest(format!(
                "group {}: attempt to delete existing nodes: target {}, decrease {count}, only {unregistered} not registered",
                self.spec.id, state.target
            )));
        }
        // Cancel the most recent requests first: they are the furthest from completion.
        let mut cancelled = 0;
        let mut index = state.instances.len();
        while cancelled < count && index > 0 {
            index -= 1;
            if !state.instances[index].registered {
                let instance = state.instances.remove(index);
                state.deleted.push((instance.requested_at, now));
                state.removals += 1;
                cancelled += 1;
            }
        }
        self.budget.release(cancelled);
        state.target = state.target.saturating_sub(count);
        Ok(())
    }

    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        Ok(self
            .state()
            .instances
            .iter()
            .map(|i| Instance {
                id: i.provider_id.clone(),
                status: Some(InstanceStatus {
                    state: i.state,
                    error: i.error.clone(),
                }),
            })
            .collect())
    }

    async fn template_node_info(&self) -> Result<NodeTemplate, CloudError> {
        let name = format!("{}-template", self.spec.id);
        let mut node = self.spec.template.clone();
        node.name = name.clone();
        node.uid = format!("uid-template-{}", self.spec.id);
        node.provider_id = format!("{PROVIDER_ID_SCHEME}{}/{name}", self.spec.id);
        node.labels.insert(HOSTNAME.to_string(), name);
        node.conditions = NodeConditions {
            ready: Some(ConditionStatus::True),
            ..NodeConditions::default()
        };
        let pods = self
            .daemonsets
            .iter()
            .filter(|ds| daemonset_runs_on(ds, &node))
            .map(|ds| daemonset_pod_for(ds, &node))
            .collect();
        // The template reports the drivers its nodes will, so their volume limits are simulated.
        let name_of_template = node.name.clone();
        let csi_node = (!self.spec.csi_drivers.is_empty()).then(|| CsiNode {
            node_name: node.name.clone(),
            drivers: self.spec.csi_drivers.clone(),
        });
        Ok(NodeTemplate {
            node,
            pods,
            csi_node,
            // ... and the devices its nodes publish, so claims are simulated on new nodes.
            resource_slices: node_slices(&name_of_template, &self.spec.devices),
        })
    }

    async fn get_options(&self) -> Result<Option<GroupOptions>, CloudError> {
        Ok(None)
    }
}

/// The simulated cloud: every group of the scenario.
#[derive(Debug)]
pub struct SimulatedCloud {
    clock: crate::clock::SimClock,
    budget: Arc<NodeBudget>,
    groups: Vec<Arc<SimulatedNodeGroup>>,
    by_id: BTreeMap<String, usize>,
}

impl SimulatedCloud {
    /// Creates the groups with their initial instances, Ready at the clock's current time.
    pub fn new(
        clock: crate::clock::SimClock,
        specs: Vec<GroupSpec>,
        daemonsets: Vec<DaemonSet>,
    ) -> SimulatedCloud {
        let daemonsets = Arc::new(daemonsets);
        let now = clock.now();
        let budget = Arc::new(NodeBudget::unlimited());
        let mut by_id = BTreeMap::new();
        let groups: Vec<Arc<SimulatedNodeGroup>> = specs
            .into_iter()
            .enumerate()
            .map(|(index, spec)| {
                by_id.insert(spec.id.clone(), index);
                let group = SimulatedNodeGroup {
                    spec,
                    budget: budget.clone(),
                    daemonsets: daemonsets.clone(),
                    clock: clock.clone(),
                    state: Mutex::new(GroupState::default()),
                };
                {
                    let mut state = group.state();
                    for node in &group.spec.existing_nodes {
                        // Registered already: the runner adds these nodes itself.
                        state.instances.push(SimInstance {
                            node_name: node.name.clone(),
                            provider_id: group.provider_id_of(&node.name),
                            state: InstanceState::Running,
                            error: None,
                            requested_at: now,
                            ready_at: now,
                            registered: true,
                            uninitialized: false,
                        });
                    }
                    for _ in 0..group.spec.initial_size {
                        let mut instance = group.new_instance(&mut state, now, now);
                        // Initial nodes exist whatever the failure windows say, and were
                        // initialized before the run started.
                        instance.error = None;
                        instance.uninitialized = false;
                        state.instances.push(instance);
                    }
                    state.target = state.instances.len();
                    // Nodes at time 0 were bounded when the scenario was read.
                    budget.existing.fetch_add(state.target, Ordering::AcqRel);
                }
                Arc::new(group)
            })
            .collect();
        SimulatedCloud {
            clock,
            budget,
            groups,
            by_id,
        }
    }

    /// Bounds the nodes every group may hold at once: a scale-up past it is refused before any
    /// instance is allocated, and remembered ([`SimulatedCloud::node_limit_exceeded`]).
    pub fn set_node_limit(&self, limit: usize) {
        self.budget.limit.store(limit, Ordering::Relaxed);
    }

    /// The first scale-up refused for the node limit, if any.
    pub fn node_limit_exceeded(&self) -> Option<NodeLimitExceeded> {
        self.budget
            .exceeded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn clock(&self) -> &crate::clock::SimClock {
        &self.clock
    }

    pub fn groups(&self) -> &[Arc<SimulatedNodeGroup>] {
        &self.groups
    }

    pub fn group(&self, id: &str) -> Option<&Arc<SimulatedNodeGroup>> {
        self.by_id.get(id).and_then(|i| self.groups.get(*i))
    }

    /// Every instance whose provisioning delay has passed becomes Running; their nodes are
    /// returned for registration, in group order.
    pub fn provision(&self, now: Timestamp) -> Vec<ProvisionedNode> {
        self.groups.iter().flat_map(|g| g.provision(now)).collect()
    }

    /// The earliest time after `now` at which a pending instance becomes Ready, if any.
    pub fn next_ready_time(&self, now: Timestamp) -> Option<Timestamp> {
        self.groups
            .iter()
            .filter_map(|g| {
                g.state()
                    .instances
                    .iter()
                    .filter(|i| !i.registered && i.error.is_none() && i.ready_at > now)
                    .map(|i| i.ready_at)
                    .min()
            })
            .min()
    }

    /// The group a provider id belongs to, from the id itself.
    pub fn group_of_provider_id(&self, provider_id: &str) -> Option<&Arc<SimulatedNodeGroup>> {
        let rest = provider_id.strip_prefix(PROVIDER_ID_SCHEME)?;
        let (group, _) = rest.rsplit_once('/')?;
        self.group(group)
    }

    /// Whether the instance behind a node still exists.
    pub fn instance_exists(&self, provider_id: &str) -> bool {
        self.group_of_provider_id(provider_id).is_some_and(|g| {
            g.state()
                .instances
                .iter()
                .any(|i| i.provider_id == provider_id)
        })
    }

    /// The provider ids of every instance of every group, to check many nodes at once (one
    /// [`SimulatedCloud::instance_exists`] per node scans its group's instances: quadratic over
    /// a whole cluster).
    pub fn instance_ids(&self) -> foldhash::HashSet<String> {
        let mut ids = foldhash::HashSet::default();
        for group in &self.groups {
            ids.extend(
                group
                    .state()
                    .instances
                    .iter()
                    .map(|i| i.provider_id.clone()),
            );
        }
        ids
    }

    /// How many instances every group has removed so far: while it stays the same, every node
    /// that had a machine still has it.
    pub fn instance_removals(&self) -> u64 {
        self.groups.iter().map(|g| g.state().removals).sum()
    }

    /// Whether the instance was removed by a `DeleteNodes` call (the autoscaler's doing).
    pub fn deleted_through_api(&self, provider_id: &str) -> bool {
        self.group_of_provider_id(provider_id)
            .is_some_and(|g| g.state().deleted_through_api.contains(provider_id))
    }

    /// Removes a node's instance as the cloud would when a machine dies (no size checks). Returns
    /// whether an instance was removed.
    pub fn lose_instance(&self, provider_id: &str) -> bool {
        let now = self.clock.now();
        self.group_of_provider_id(provider_id)
            .is_some_and(|g| g.remove_instances(&[provider_id], now) > 0)
    }

    /// Every instance ever created, with the time it was paid for.
    pub fn billing(&self) -> Vec<BilledInstance> {
        self.groups.iter().flat_map(|g| g.billing()).collect()
    }

    /// Node-hours and cost up to `now` (instances count from the request, as clouds bill them).
    pub fn node_hours_and_cost(&self, now: Timestamp) -> (f64, f64) {
        let mut hours = 0.0;
        let mut cost = 0.0;
        for bill in self.billing() {
            let end = bill.to.unwrap_or(now).min(now);
            let h = end.since(bill.from).as_secs_f64() / 3600.0;
            hours += h;
            cost += h * self
                .group(&bill.group)
                .map_or(0.0, |g| g.spec.price_per_hour);
        }
        (hours, cost)
    }

    fn price_of_node(&self, node: &Node) -> f64 {
        if let Some(group) = self.group_of_provider_id(&node.provider_id) {
            return group.spec.price_per_hour;
        }
        // A sanitised template may have lost its provider id: recognise the group by its labels.
        fn comparable(labels: &ferroscale_model::Labels) -> Vec<(&String, &String)> {
            labels
                .iter()
                .filter(|(k, _)| k.as_str() != HOSTNAME)
                .collect()
        }
        let wanted = comparable(&node.labels);
        self.groups
            .iter()
            .find(|g| comparable(&g.spec.template.labels) == wanted)
            .map_or(0.0, |g| g.spec.price_per_hour)
    }
}

/// Prices of the simulated cloud: nodes cost their group's hourly price; pods cost a share
/// proportional to their cpu and memory requests at a fixed reference rate.
#[derive(Debug)]
pub struct SimulatedPricing {
    node_prices: Vec<(String, f64)>,
    cloud: Arc<SimulatedCloud>,
}

/// Reference rates for pod prices (per core-hour and per GiB-hour), in the same currency as the
/// scenario's node prices.
const POD_PRICE_PER_CORE_HOUR: f64 = 0.033;
const POD_PRICE_PER_GIB_HOUR: f64 = 0.0045;

impl PricingModel for SimulatedPricing {
    fn node_price(&self, node: &Node, start: Timestamp, end: Timestamp) -> Result<f64, CloudError> {
        let hours = end.since(start).as_secs_f64() / 3600.0;
        let per_hour = self
            .node_prices
            .iter()
            .find(|(group, _)| {
                node.provider_id
                    .starts_with(&format!("{PROVIDER_ID_SCHEME}{group}/"))
            })
            .map_or_else(|| self.cloud.price_of_node(node), |(_, price)| *price);
        Ok(per_hour * hours)
    }

    fn pod_price(&self, pod: &Pod, start: Timestamp, end: Timestamp) -> Result<f64, CloudError> {
        let hours = end.since(start).as_secs_f64() / 3600.0;
        let cores = pod.requests.cpu_milli as f64 / 1000.0;
        let gib = pod.requests.memory as f64 / f64::from(1u32 << 30);
        Ok((cores * POD_PRICE_PER_CORE_HOUR + gib * POD_PRICE_PER_GIB_HOUR) * hours)
    }
}

/// The `CloudProvider` face of the simulated cloud.
#[derive(Debug, Clone)]
pub struct SimulatedProvider {
    cloud: Arc<SimulatedCloud>,
}

impl SimulatedProvider {
    pub fn new(cloud: Arc<SimulatedCloud>) -> SimulatedProvider {
        SimulatedProvider { cloud }
    }

    pub fn cloud(&self) -> &Arc<SimulatedCloud> {
        &self.cloud
    }
}

#[async_trait]
impl CloudProvider for SimulatedProvider {
    fn name(&self) -> &str {
        "simulated"
    }

    fn gpu_label(&self) -> &str {
        SIM_GPU_LABEL
    }

    fn pricing(&self) -> Result<Arc<dyn PricingModel>, CloudError> {
        Ok(Arc::new(SimulatedPricing {
            node_prices: self
                .cloud
                .groups
                .iter()
                .map(|g| (g.spec.id.clone(), g.spec.price_per_hour))
                .collect(),
            cloud: self.cloud.clone(),
        }))
    }

    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        Ok(self
            .cloud
            .groups
            .iter()
            .map(|g| g.clone() as Arc<dyn NodeGroup>)
            .collect())
    }

    async fn node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        Ok(self
            .cloud
            .group_of_provider_id(&node.provider_id)
            .map(|g| g.clone() as Arc<dyn NodeGroup>))
    }

    async fn has_instance(&self, node: &Node) -> Result<bool, CloudError> {
        Ok(self.cloud.instance_exists(&node.provider_id))
    }

    async fn refresh(&self) -> Result<(), CloudError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SimClock;
    use ferroscale_model::Resources;
    use futures::executor::block_on;

    fn spec(id: &str) -> GroupSpec {
        GroupSpec {
            cloud_controller_manager: true,
            csi_drivers: Vec::new(),
            devices: Vec::new(),
            id: id.to_string(),
            min_size: 0,
            max_size: 5,
            initial_size: 1,
            provisioning_delay: Duration::from_secs(60),
            failures: vec![
                FailureWindow {
                    call: FailingCall::IncreaseSize,
                    from: Timestamp::from_secs(600),
                    to: Timestamp::from_secs(1200),
                    class: ErrorClass::OutOfResources,
                },
                FailureWindow {
                    call: FailingCall::InstanceCreation,
                    from: Timestamp::from_secs(2000),
                    to: Timestamp::from_secs(2100),
                    class: ErrorClass::Other,
                },
            ],
            price_per_hour: 0.5,
            template: Node::new("t", Resources::new(4000, 16 << 30)),
            existing_nodes: Vec::new(),
        }
    }

    fn cloud() -> (SimClock, SimulatedCloud) {
        let clock = SimClock::new(Timestamp::from_secs(0));
        let cloud = SimulatedCloud::new(clock.clone(), vec![spec("a")], Vec::new());
        (clock, cloud)
    }

    #[test]
    fn nodes_become_ready_after_the_provisioning_delay() {
        let (clock, cloud) = cloud();
        let initial = cloud.provision(clock.now());
        assert_eq!(initial.len(), 1);
        assert_eq!(initial[0].node.name, "a-0");
        let group = cloud.group("a").unwrap().clone();
        clock.advance_to(Timestamp::from_secs(10));
        block_on(group.increase_size(2)).unwrap();
        assert_eq!(block_on(group.target_size()).unwrap(), 3);
        let creating = block_on(group.nodes())
            .unwrap()
            .iter()
            .filter(|i| i.status.as_ref().unwrap().state == InstanceState::Creating)
            .count();
        assert_eq!(creating, 2);
        assert!(cloud.provision(Timestamp::from_secs(69)).is_empty());
        assert_eq!(
            cloud.next_ready_time(Timestamp::from_secs(10)),
            Some(Timestamp::from_secs(70))
        );
        let ready = cloud.provision(Timestamp::from_secs(70));
        assert_eq!(ready.len(), 2);
        assert!(ready.iter().all(|p| p.node.is_ready()));
        assert_eq!(ready[0].node.creation_time, Timestamp::from_secs(70));
    }

    #[test]
    fn increase_fails_inside_the_window_and_over_max() {
        let (clock, cloud) = cloud();
        let group = cloud.group("a").unwrap().clone();
        clock.advance_to(Timestamp::from_secs(600));
        let err = block_on(group.increase_size(1)).unwrap_err();
        assert!(err.to_string().contains("OutOfResource"), "{err}");
        clock.advance_to(Timestamp::from_secs(1200));
        block_on(group.increase_size(1)).unwrap();
        assert!(block_on(group.increase_size(4)).is_err());
        assert_eq!(block_on(group.target_size()).unwrap(), 2);
    }

    #[test]
    fn instances_requested_in_a_creation_failure_window_never_register() {
        let (clock, cloud) = cloud();
        let group = cloud.group("a").unwrap().clone();
        clock.advance_to(Timestamp::from_secs(2000));
        block_on(group.increase_size(1)).unwrap();
        cloud.provision(Timestamp::from_secs(0));
        assert!(cloud.provision(Timestamp::from_secs(5000)).is_empty());
        let failed: Vec<_> = block_on(group.nodes())
            .unwrap()
            .into_iter()
            .filter(|i| i.status.as_ref().and_then(|s| s.error.as_ref()).is_some())
            .collect();
        assert_eq!(failed.len(), 1);
        // The engine removes failed instances with DeleteNodes and placeholder nodes.
        let placeholder = Node {
            provider_id: failed[0].id.clone(),
            ..Node::default()
        };
        block_on(group.delete_nodes(&[placeholder])).unwrap();
        assert_eq!(block_on(group.target_size()).unwrap(), 1);
    }

    #[test]
    fn decrease_target_only_cancels_unregistered_instances() {
        let (clock, cloud) = cloud();
        cloud.provision(clock.now());
        let group = cloud.group("a").unwrap().clone();
        block_on(group.increase_size(2)).unwrap();
        assert!(block_on(group.decrease_target_size(-3)).is_err());
        block_on(group.decrease_target_size(-2)).unwrap();
        assert_eq!(block_on(group.target_size()).unwrap(), 1);
        assert!(cloud.provision(Timestamp::from_secs(1000)).is_empty());
    }

    #[test]
    fn delete_nodes_refuses_foreign_nodes_and_going_below_min() {
        let (clock, cloud) = cloud();
        let nodes = cloud.provision(clock.now());
        let group = cloud.group("a").unwrap().clone();
        let stranger = Node {
            provider_id: "sim://b/b-0".into(),
            ..Node::default()
        };
        assert!(block_on(group.delete_nodes(&[stranger])).is_err());
        block_on(group.delete_nodes(&[nodes[0].node.clone()])).unwrap();
        assert_eq!(block_on(group.target_size()).unwrap(), 0);
        assert!(!cloud.instance_exists(&nodes[0].node.provider_id));
    }

    /// The runner skips its check of every node against the cloud while this count stands still,
    /// so every way an instance goes must move it.
    #[test]
    fn instance_removals_count_deletions_losses_and_cancellations() {
        let (clock, cloud) = cloud();
        let nodes = cloud.provision(clock.now());
        let group = cloud.group("a").unwrap().clone();
        assert_eq!(cloud.instance_removals(), 0);
        block_on(group.increase_size(3)).unwrap();
        assert_eq!(cloud.instance_removals(), 0);
        block_on(group.decrease_target_size(-1)).unwrap();
        assert_eq!(cloud.instance_removals(), 1);
        let more = cloud.provision(Timestamp::from_secs(1000));
        assert_eq!(more.len(), 2);
        assert!(cloud.lose_instance(&more[0].node.provider_id));
        assert_eq!(cloud.instance_removals(), 2);
        block_on(group.delete_nodes(&[nodes[0].node.clone()])).unwrap();
        assert_eq!(cloud.instance_removals(), 3);
    }

    #[test]
    fn billing_counts_from_request_to_deletion() {
        let (clock, cloud) = cloud();
        let nodes = cloud.provision(clock.now());
        clock.advance_to(Timestamp::from_secs(1800));
        assert!(cloud.lose_instance(&nodes[0].node.provider_id));
        let (hours, cost) = cloud.node_hours_and_cost(Timestamp::from_secs(7200));
        assert!((hours - 0.5).abs() < 1e-9);
        assert!((cost - 0.25).abs() < 1e-9);
    }

    #[test]
    fn provider_maps_nodes_to_groups_and_prices_them() {
        let (clock, cloud) = cloud();
        let nodes = cloud.provision(clock.now());
        let provider = SimulatedProvider::new(Arc::new(cloud));
        let group = block_on(provider.node_group_for_node(&nodes[0].node))
            .unwrap()
            .unwrap();
        assert_eq!(group.id(), "a");
        let template = block_on(group.template_node_info()).unwrap();
        let price = provider
            .pricing()
            .unwrap()
            .node_price(
                &template.node,
                Timestamp::from_secs(0),
                Timestamp::from_secs(7200),
            )
            .unwrap();
        assert!((price - 1.0).abs() < 1e-9);
    }
}
