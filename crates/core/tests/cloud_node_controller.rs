//! The cloud node controller end to end against the loop's fakes: what one pass asks the
//! provider, what it writes through `NodeObjectApi`, and what it leaves alone
//! (docs/cloud-node-controller.md).

mod loop_fakes;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use ferroscale_core::AutoscalingOptions;
use ferroscale_core::cloud::{
    CloudError, CloudProvider, NodeGroup, NodeTemplate, PricingModel, ResourceLimits,
};
use ferroscale_core::cloud_node_controller::rules::{UNINITIALIZED_TAINT, reasons};
use ferroscale_core::cloud_node_controller::{
    ActionOutcome, CloudNodeController, CloudNodeOutcome, LiveNode, NodeInitializationWrite,
    NodeObjectApi, WatchedRefresh,
};
use ferroscale_core::cluster_state::{NodeReadiness, ReadinessRules};
use ferroscale_core::kubernetes::ClusterError;
use ferroscale_model::labels::{INSTANCE_TYPE, ZONE};
use ferroscale_model::{ConditionStatus, Node, Taint, TaintEffect, Timestamp};
use futures::executor::block_on;
use loop_fakes::{CallLog, FakeCloud, FakeCluster, node, t};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The loop's fake cloud, with what a provider of a cloud without a CCM says about nodes whose
/// machine is gone: `NodeGroupForNode` still places them (by provider-ID scheme), `HasInstance`
/// answers as set, and the refresh can fail.
struct Cloud {
    inner: FakeCloud,
    /// Node name → group, for nodes the fake's instance lists no longer hold.
    placed: Mutex<HashMap<String, String>>,
    has_instance: Mutex<Result<bool, CloudError>>,
    refresh_fails: Mutex<bool>,
    calls: Mutex<Vec<String>>,
}

impl Cloud {
    fn new(log: CallLog) -> Cloud {
        Cloud {
            inner: FakeCloud::new(log),
            placed: Mutex::default(),
            has_instance: Mutex::new(Err(CloudError::NotImplemented)),
            refresh_fails: Mutex::new(false),
            calls: Mutex::default(),
        }
    }

    fn calls(&self, prefix: &str) -> Vec<String> {
        lock(&self.calls)
            .iter()
            .filter(|c| c.starts_with(prefix))
            .cloned()
            .collect()
    }
}

#[async_trait]
impl CloudProvider for Cloud {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn gpu_label(&self) -> &str {
        self.inner.gpu_label()
    }
    fn resource_limits(&self) -> Result<Option<ResourceLimits>, CloudError> {
        self.inner.resource_limits()
    }
    fn pricing(&self) -> Result<Arc<dyn PricingModel>, CloudError> {
        self.inner.pricing()
    }
    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        self.inner.node_groups().await
    }
    async fn node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        lock(&self.calls).push(format!("NodeGroupForNode {}", node.name));
        if let Some(group) = lock(&self.placed).get(&node.name) {
            return Ok(Some(self.inner.group(group).clone() as Arc<dyn NodeGroup>));
        }
        self.inner.node_group_for_node(node).await
    }
    async fn has_instance(&self, node: &Node) -> Result<bool, CloudError> {
        lock(&self.calls).push(format!("HasInstance {}", node.name));
        lock(&self.has_instance).clone()
    }
    async fn refresh(&self) -> Result<(), CloudError> {
        if *lock(&self.refresh_fails) {
            return Err(CloudError::Unavailable("connection refused".into()));
        }
        self.inner.refresh().await
    }
}

/// `NodeObjectApi` over the fake cluster, with a resource version per node that every write
/// (and [`Writes::touch`], standing for anyone else's) moves on.
struct Writes {
    cluster: Arc<FakeCluster>,
    versions: Mutex<BTreeMap<String, u64>>,
    /// Initializations refused with a conflict before one goes through.
    conflicts: Mutex<usize>,
    /// The node whose kubelet comes back (Ready) just as it is read back.
    ready_when_read: Mutex<Option<String>>,
    /// The node someone else updates just after it is read back.
    touched_after_read: Mutex<Option<String>>,
    log: Mutex<Vec<String>>,
}

impl Writes {
    fn new(cluster: &Arc<FakeCluster>) -> Writes {
        Writes {
            cluster: cluster.clone(),
            versions: Mutex::default(),
            conflicts: Mutex::new(0),
            ready_when_read: Mutex::default(),
            touched_after_read: Mutex::default(),
            log: Mutex::default(),
        }
    }

    fn version(&self, node: &str) -> String {
        lock(&self.versions)
            .get(node)
            .copied()
            .unwrap_or(1)
            .to_string()
    }

    /// Someone else updated the node.
    fn touch(&self, node: &str) {
        *lock(&self.versions).entry(node.to_string()).or_insert(1) += 1;
    }

    fn log(&self) -> Vec<String> {
        lock(&self.log).clone()
    }
}

#[async_trait]
impl NodeObjectApi for Writes {
    async fn read_node(&self, name: &str) -> Result<Option<LiveNode>, ClusterError> {
        if lock(&self.ready_when_read).as_deref() == Some(name) {
            if let Some(node) = self.cluster.state().nodes.get_mut(name) {
                node.conditions.ready = Some(ConditionStatus::True);
            }
            self.touch(name);
        }
        let live = self.cluster.node(name).map(|node| LiveNode {
            node,
            resource_version: self.version(name),
        });
        if lock(&self.touched_after_read).as_deref() == Some(name) {
            self.touch(name);
        }
        Ok(live)
    }

    async fn initialize_node(&self, write: &NodeInitializationWrite) -> Result<(), ClusterError> {
        let conflict = ClusterError::Conflict {
            kind: "Node",
            name: write.node.clone(),
            message: "the object has been modified".into(),
        };
        {
            let mut conflicts = lock(&self.conflicts);
            if *conflicts > 0 {
                *conflicts -= 1;
                self.touch(&write.node);
                return Err(conflict);
            }
        }
        if self.version(&write.node) != write.resource_version {
            return Err(conflict);
        }
        {
            let mut state = self.cluster.state();
            let node = state
                .nodes
                .get_mut(&write.node)
                .filter(|n| n.uid == write.uid)
                .ok_or(conflict)?;
            for (key, value) in &write.add_labels {
                if !node.labels.contains_key(key.as_str()) {
                    node.labels.insert(key.clone(), value.clone());
                }
            }
            node.taints.retain(|t| t.key != write.remove_taint);
        }
        lock(&self.log).push(format!(
            "initialize {} at {} {:?}",
            write.node, write.resource_version, write.add_labels
        ));
        self.touch(&write.node);
        Ok(())
    }

    async fn delete_node(
        &self,
        name: &str,
        uid: &str,
        resource_version: &str,
    ) -> Result<(), ClusterError> {
        let mut state = self.cluster.state();
        let Some(node) = state.nodes.get(name) else {
            return Err(ClusterError::NotFound {
                kind: "Node",
                name: name.to_string(),
            });
        };
        if node.uid != uid || self.version(name) != resource_version {
            return Err(ClusterError::Conflict {
                kind: "Node",
                name: name.to_string(),
                message: "Precondition failed".into(),
            });
        }
        state.nodes.remove(name);
        lock(&self.log).push(format!("delete {name} uid={uid} at {resource_version}"));
        Ok(())
    }
}

fn not_ready(mut node: Node) -> Node {
    node.conditions.ready = Some(ConditionStatus::Unknown);
    node
}

fn uninitialized(mut node: Node) -> Node {
    node.taints.push(Taint::new(
        UNINITIALIZED_TAINT,
        "true",
        TaintEffect::NoSchedule,
    ));
    node
}

/// A cluster with group `metal` (template in zone-a, instance type m.large): node `live` with a
/// machine, node `fresh` registered uninitialized with a machine, node `gone` whose machine the
/// group no longer lists (placed there by the provider, not Ready), and `outsider`, not Ready,
/// uninitialized and in no group.
struct World {
    cloud: WatchedRefresh<Cloud>,
    cluster: Arc<FakeCluster>,
    writes: Writes,
    controller: CloudNodeController,
    options: AutoscalingOptions,
}

impl World {
    fn new() -> World {
        let log = CallLog::default();
        let mut cloud = Cloud::new(log.clone());
        let mut template = node("metal-template", 4000, 16 << 30);
        template.labels.insert(ZONE.into(), "zone-a".into());
        template
            .labels
            .insert(INSTANCE_TYPE.into(), "m.large".into());
        template.labels.insert("pool".into(), "metal".into());
        cloud.inner.add_group_with_template(
            "metal",
            0,
            10,
            NodeTemplate {
                node: template,
                pods: Vec::new(),
                csi_node: None,
                resource_slices: Vec::new(),
            },
        );
        let cluster = Arc::new(FakeCluster::new(log));
        let live = node("live", 4000, 16 << 30);
        let fresh = uninitialized(node("fresh", 4000, 16 << 30));
        let gone = not_ready(node("gone", 4000, 16 << 30));
        let outsider = uninitialized(not_ready(node("outsider", 4000, 16 << 30)));
        cloud.inner.add_instance("metal", &live);
        cloud.inner.add_instance("metal", &fresh);
        lock(&cloud.placed).insert("gone".into(), "metal".into());
        for node in [live, fresh, gone, outsider] {
            cluster.add_node(node);
        }
        let options = AutoscalingOptions {
            cloud_node_controller: true,
            cloud_node_removal_grace_period: Duration::from_secs(60),
            ..AutoscalingOptions::default()
        };
        World {
            cloud: WatchedRefresh::new(Arc::new(cloud)),
            writes: Writes::new(&cluster),
            cluster,
            controller: CloudNodeController::new(),
            options,
        }
    }

    fn cloud(&self) -> &Cloud {
        self.cloud.inner()
    }

    /// The loop's refresh, then one pass at `now`.
    fn pass(&mut self, now: Timestamp) -> CloudNodeOutcome {
        let _ = block_on(self.cloud.refresh());
        self.pass_without_refresh(now)
    }

    fn pass_without_refresh(&mut self, now: Timestamp) -> CloudNodeOutcome {
        block_on(self.controller.run_once(
            &self.cloud,
            self.cloud.last_refresh(),
            self.cluster.as_ref(),
            &self.writes,
            now,
            &self.options,
        ))
    }

    fn node_names(&self) -> Vec<String> {
        self.cluster.state().nodes.keys().cloned().collect()
    }

    fn has_node(&self, name: &str) -> bool {
        self.cluster.node(name).is_some()
    }

    fn event_reasons(&self) -> Vec<&'static str> {
        self.cluster
            .state()
            .events
            .iter()
            .map(|e| e.reason)
            .collect()
    }
}

/// docs/cloud-node-controller.md CNC-101–CNC-107: one pass initializes `fresh` (labels added,
/// taint removed, in one write at the version read back), tells why `outsider` is left alone,
/// and only starts counting for `gone`; the next pass a minute later deletes `gone` with its
/// uid and version as preconditions. `live` and `outsider` are never touched.
#[test]
fn new_nodes_are_initialized_and_a_gone_node_is_deleted_on_the_second_pass() {
    let mut world = World::new();
    let first = world.pass(t(0));
    assert_eq!(first.skipped, None);
    assert_eq!(
        world.writes.log(),
        [format!(
            "initialize fresh at 1 {:?}",
            vec![
                (ZONE.to_string(), "zone-a".to_string()),
                (INSTANCE_TYPE.to_string(), "m.large".to_string())
            ]
        )]
    );
    let fresh = world.cluster.node("fresh").expect("fresh");
    assert!(!fresh.has_taint(UNINITIALIZED_TAINT));
    assert_eq!(fresh.label(ZONE), Some("zone-a"));
    assert_eq!(
        fresh.label("pool"),
        None,
        "only the cloud labels are copied"
    );
    assert_eq!(first.plan.waiting.len(), 1);
    assert_eq!(
        world.event_reasons(),
        [reasons::NOT_INITIALIZED, reasons::SYNCED]
    );
    // Only the possible candidates were looked up, and HasInstance only before deleting.
    assert_eq!(
        world.cloud().calls("NodeGroupForNode"),
        ["NodeGroupForNode gone", "NodeGroupForNode outsider"]
    );
    assert!(world.cloud().calls("HasInstance").is_empty());

    let second = world.pass(t(61));
    assert_eq!(
        second.deleted().collect::<Vec<_>>(),
        [("gone", "metal")],
        "{second:?}"
    );
    assert_eq!(world.cloud().calls("HasInstance"), ["HasInstance gone"]);
    assert_eq!(
        world.writes.log().last().map(String::as_str),
        Some("delete gone uid=uid-gone at 1")
    );
    assert_eq!(world.node_names(), ["fresh", "live", "outsider"]);
    let events = world.cluster.events_with(reasons::DELETING_NODE);
    assert_eq!(events.len(), 1);
    assert!(
        events[0].message.contains(
            "node group metal has not listed its instance fake://gone for 1m1s (2 refreshes)"
        ),
        "{}",
        events[0].message
    );
    // Many passes later the outsider is still there, still tainted, and was told about once.
    for at in 2..10 {
        world.pass(t(at * 60));
    }
    let outsider = world.cluster.node("outsider").expect("outsider");
    assert!(outsider.has_taint(UNINITIALIZED_TAINT));
    assert_eq!(world.cluster.events_with(reasons::NOT_INITIALIZED).len(), 1);
}

/// CNC-108: a pass without a new refresh decides nothing; a failed refresh deletes nothing and
/// the passes before it no longer count.
#[test]
fn no_new_refresh_or_a_failed_refresh_deletes_nothing() {
    let mut world = World::new();
    world.pass(t(0));
    let again = world.pass_without_refresh(t(100));
    assert_eq!(
        again.skipped.as_deref(),
        Some("no provider refresh since the last pass")
    );
    *lock(&world.cloud().refresh_fails) = true;
    let failing = world.pass(t(200));
    assert!(failing.actions.is_empty());
    assert!(
        failing
            .skipped
            .as_deref()
            .is_some_and(|s| s.contains("Refresh for the cloud provider failed")),
        "{failing:?}"
    );
    assert!(world.has_node("gone"));
    *lock(&world.cloud().refresh_fails) = false;
    let after = world.pass(t(300));
    assert_eq!(after.deleted().count(), 0, "one pass since the failure");
    assert_eq!(world.pass(t(360)).deleted().count(), 1);
    assert!(!world.has_node("gone"));
}

/// CNC-108: a group whose instances cannot be read holds every deletion back.
#[test]
fn a_failing_instance_list_holds_deletions_back() {
    let mut world = World::new();
    world.pass(t(0));
    world
        .cloud()
        .inner
        .group("metal")
        .failing
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert("nodes");
    for at in [100, 200, 300] {
        let outcome = world.pass(t(at));
        assert_eq!(outcome.deleted().count(), 0);
        assert!(outcome.plan.deletions_held.is_some());
    }
    assert!(world.has_node("gone"));
}

/// CNC-109: a node whose instance the provider says exists, or that is Ready when read back
/// from the API server, is kept and its count starts again.
#[test]
fn the_last_looks_keep_a_node_that_came_back() {
    let mut world = World::new();
    world.pass(t(0));
    *lock(&world.cloud().has_instance) = Ok(true);
    let outcome = world.pass(t(100));
    assert!(
        matches!(
            outcome.actions.last(),
            Some(ActionOutcome::Skipped { reason, forget: true, .. })
                if reason.contains("says the instance fake://gone of node gone exists")
        ),
        "{outcome:?}"
    );
    assert!(world.has_node("gone"));
    assert_eq!(world.controller.memory().streak("gone", "uid-gone"), None);

    *lock(&world.cloud().has_instance) = Ok(false);
    world.pass(t(200));
    *lock(&world.writes.ready_when_read) = Some("gone".into());
    let outcome = world.pass(t(300));
    assert!(
        matches!(
            outcome.actions.last(),
            Some(ActionOutcome::Skipped { reason, .. }) if reason.contains("is Ready again")
        ),
        "{outcome:?}"
    );
    assert!(world.has_node("gone"));
    assert_eq!(world.controller.memory().streak("gone", "uid-gone"), None);
}

/// CNC-109: a Node that changed after it was read back is not deleted (the precondition on its
/// version fails), and an initialization that meets a concurrent change is tried again.
#[test]
fn writes_carry_the_version_read_back() {
    let mut world = World::new();
    *lock(&world.writes.conflicts) = 2;
    world.pass(t(0));
    assert_eq!(
        world.writes.log().len(),
        1,
        "initialized on the third attempt"
    );
    assert!(world.writes.log()[0].starts_with("initialize fresh at 3"));

    *lock(&world.writes.touched_after_read) = Some("gone".into());
    let outcome = world.pass(t(61));
    assert_eq!(outcome.deleted().count(), 0);
    assert!(
        matches!(
            outcome.actions.last(),
            Some(ActionOutcome::Skipped { reason, .. })
                if reason.contains("changed after it was read back")
        ),
        "{outcome:?}"
    );
    assert!(world.has_node("gone"));
}

/// CNC-110: in dry-run mode the writes are decided and checked, nothing is written and no
/// event is published.
#[test]
fn dry_run_writes_nothing() {
    let mut world = World::new();
    world.options.dry_run = true;
    let first = world.pass(t(0));
    let second = world.pass(t(61));
    assert_eq!(
        first.initialized().collect::<Vec<_>>(),
        [("fresh", "metal")]
    );
    assert_eq!(second.deleted().collect::<Vec<_>>(), [("gone", "metal")]);
    assert!(world.writes.log().is_empty());
    assert!(world.cluster.state().events.is_empty());
    assert!(!first.events.is_empty());
    assert_eq!(world.node_names(), ["fresh", "gone", "live", "outsider"]);
}

/// The wrapper forwards the provider and counts its refreshes, failed ones included.
#[test]
fn the_watched_refresh_records_each_refresh() {
    let world = World::new();
    assert_eq!(world.cloud.last_refresh(), None);
    block_on(world.cloud.refresh()).expect("refresh");
    *lock(&world.cloud().refresh_fails) = true;
    assert!(block_on(world.cloud.refresh()).is_err());
    let last = world.cloud.last_refresh().expect("a refresh");
    assert_eq!(last.generation, 2);
    assert!(last.result.is_err());
    assert_eq!(world.cloud.name(), "fake");
    let groups = block_on(world.cloud.node_groups()).expect("groups");
    assert_eq!(
        groups
            .iter()
            .map(|g| g.id().to_string())
            .collect::<HashSet<_>>(),
        HashSet::from(["metal".to_string()])
    );
}

/// CNC-111: with the controller on, a registered node waiting for its initialization counts as
/// still starting (a startup taint, docs/behaviour.md CS-102), so the loop does not ask for its
/// pods' capacity again; with it off, readiness is as before.
#[test]
fn with_the_controller_on_an_uninitialized_node_is_still_starting() {
    let fresh = uninitialized(node("fresh", 4000, 16 << 30));
    let on = AutoscalingOptions {
        cloud_node_controller: true,
        ..AutoscalingOptions::default()
    };
    assert_eq!(
        ReadinessRules::from_options(&on, "").readiness(&fresh),
        NodeReadiness::StartupTainted
    );
    assert_eq!(
        ReadinessRules::from_options(&AutoscalingOptions::default(), "").readiness(&fresh),
        NodeReadiness::Ready
    );
}
