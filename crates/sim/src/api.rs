//! The simulated cluster behind the engine's [`ClusterApi`]: what the live binary reads from and
//! writes to the API server, answered by the in-memory [`Cluster`] at one simulated instant.
//!
//! The runner lends its cluster to a [`SimClusterApi`] for the length of one engine loop; every
//! write (taints, evictions, events, the status ConfigMap) is applied to the cluster at once and
//! logged, so the runner can put drains, refusals and rollbacks on the timeline afterwards.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use ferroscale_core::events::Event;
use ferroscale_core::kubernetes::{
    ClusterApi, ClusterError, ClusterObjects, EvictionError, StatusConfigMap, WorkloadController,
};
use ferroscale_model::{Node, Pod, Taint, Timestamp};

use crate::cluster::{Cluster, Eviction, EvictionRefusal};

/// A write the engine made to the cluster during one loop.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterAction {
    Tainted {
        node: String,
        taint: Taint,
        cordon: bool,
    },
    Untainted {
        node: String,
        taint_key: String,
        uncordon: bool,
    },
    Evicted(Eviction),
    /// An eviction the (simulated) API server refused.
    EvictionRefused {
        pod: String,
        node: Option<String>,
        reason: String,
    },
}

/// Everything the engine wrote during one loop, in call order.
#[derive(Debug, Clone, Default)]
pub struct ApiLog {
    pub actions: Vec<ClusterAction>,
    pub events: Vec<Event>,
    pub status: Option<StatusConfigMap>,
}

/// The cluster as the engine's [`ClusterApi`] sees it during one loop at `now`.
pub struct SimClusterApi<'c> {
    cluster: Mutex<&'c mut Cluster>,
    now: Timestamp,
    log: Mutex<ApiLog>,
}

/// Kinds of controllers whose existence is implied by the pods they own.
const WORKLOAD_KINDS: &[&str] = &["ReplicaSet", "ReplicationController", "StatefulSet", "Job"];

impl<'c> SimClusterApi<'c> {
    pub fn new(cluster: &'c mut Cluster, now: Timestamp) -> SimClusterApi<'c> {
        SimClusterApi {
            cluster: Mutex::new(cluster),
            now,
            log: Mutex::new(ApiLog::default()),
        }
    }

    fn cluster(&self) -> MutexGuard<'_, &'c mut Cluster> {
        // Every critical section only reads or applies one whole change, so the state behind a
        // poisoned lock is still consistent.
        self.cluster.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn log(&self) -> MutexGuard<'_, ApiLog> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the engine wrote; ends the loan of the cluster.
    pub fn into_log(self) -> ApiLog {
        self.log
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The objects Gather would read from the API server now.
pub fn gather_objects(cluster: &Cluster) -> ClusterObjects {
    let pods: Vec<Arc<Pod>> = cluster.live_pods().map(|r| r.pod.clone()).collect();
    ClusterObjects {
        nodes: cluster.nodes().map(|n| n.node.clone()).collect(),
        controllers: implied_controllers(cluster, &pods),
        pods,
        pdbs: cluster.pdbs_with_status(),
        daemonsets: cluster.daemonsets().to_vec(),
        namespaces: cluster.namespaces().to_vec(),
        priority_expander_config: None,
    }
}

/// Workload controllers exist as long as they own pods (the simulator has no Deployments or
/// ReplicaSets of its own); their replicas are the number of live pods they own. DaemonSets come
/// from the scenario's objects.
fn implied_controllers(cluster: &Cluster, pods: &[Arc<Pod>]) -> Vec<WorkloadController> {
    let mut by_owner: HashMap<(&str, &str, &str), (usize, i32)> = HashMap::new();
    let mut controllers: Vec<WorkloadController> = Vec::new();
    for pod in pods {
        let Some(owner) = pod.controller() else {
            continue;
        };
        if !WORKLOAD_KINDS.contains(&owner.kind.as_str()) {
            continue;
        }
        let key = (
            owner.kind.as_str(),
            pod.namespace.as_str(),
            owner.name.as_str(),
        );
        match by_owner.get_mut(&key) {
            Some((_, replicas)) => *replicas = replicas.saturating_add(1),
            None => {
                by_owner.insert(key, (controllers.len(), 1));
                controllers.push(WorkloadController {
                    kind: owner.kind.clone(),
                    namespace: pod.namespace.clone(),
                    name: owner.name.clone(),
                    uid: owner.uid.clone(),
                    replicas: Some(0),
                });
            }
        }
    }
    for (index, replicas) in by_owner.into_values() {
        if let Some(controller) = controllers.get_mut(index) {
            controller.replicas = Some(replicas);
        }
    }
    controllers.extend(cluster.daemonsets().iter().map(|ds| WorkloadController {
        kind: "DaemonSet".to_string(),
        namespace: ds.namespace.clone(),
        name: ds.name.clone(),
        uid: ds.uid.clone(),
        replicas: None,
    }));
    controllers
}

fn node_not_found(node: &str) -> ClusterError {
    ClusterError::NotFound {
        kind: "Node",
        name: node.to_string(),
    }
}

#[async_trait]
impl ClusterApi for SimClusterApi<'_> {
    async fn gather(&self) -> Result<ClusterObjects, ClusterError> {
        Ok(gather_objects(&self.cluster()))
    }

    async fn node(&self, name: &str) -> Result<Option<Arc<Node>>, ClusterError> {
        Ok(self.cluster().node(name).map(|n| n.node.clone()))
    }

    async fn pods_on_node(&self, node: &str) -> Result<Vec<Arc<Pod>>, ClusterError> {
        let cluster = self.cluster();
        let entry = cluster.node(node).ok_or_else(|| node_not_found(node))?;
        Ok(cluster
            .snapshot()
            .node(entry.id)
            .map(|info| info.pods.clone())
            .unwrap_or_default())
    }

    async fn taint_node(&self, node: &str, taint: Taint, cordon: bool) -> Result<(), ClusterError> {
        if !self.cluster().taint(node, taint.clone(), cordon) {
            return Err(node_not_found(node));
        }
        self.log().actions.push(ClusterAction::Tainted {
            node: node.to_string(),
            taint,
            cordon,
        });
        Ok(())
    }

    async fn untaint_node(
        &self,
        node: &str,
        taint_key: &str,
        uncordon: bool,
    ) -> Result<(), ClusterError> {
        if !self.cluster().untaint(node, taint_key, uncordon) {
            return Err(node_not_found(node));
        }
        self.log().actions.push(ClusterAction::Untainted {
            node: node.to_string(),
            taint_key: taint_key.to_string(),
            uncordon,
        });
        Ok(())
    }

    async fn evict_pod(
        &self,
        namespace: &str,
        name: &str,
        _grace_seconds: i64,
    ) -> Result<(), EvictionError> {
        let pod = format!("{namespace}/{name}");
        let (result, node) = {
            let mut cluster = self.cluster();
            let node = cluster
                .live_pod(namespace, name)
                .and_then(|r| r.pod.node_name.clone());
            (cluster.evict(namespace, name, self.now), node)
        };
        match result {
            Ok(eviction) => {
                self.log().actions.push(ClusterAction::Evicted(eviction));
                Ok(())
            }
            Err(EvictionRefusal::NotFound) => Err(EvictionError::NotFound { pod }),
            Err(EvictionRefusal::DisruptionBudget { pdb, allowed }) => {
                let message =
                    format!("PodDisruptionBudget {pdb} allows {allowed} disruption(s) now");
                self.log().actions.push(ClusterAction::EvictionRefused {
                    pod: pod.clone(),
                    node,
                    reason: message.clone(),
                });
                Err(EvictionError::DisruptionBudget { pod, message })
            }
        }
    }

    async fn pod_status(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Pod>>, ClusterError> {
        Ok(self
            .cluster()
            .live_pod(namespace, name)
            .map(|r| r.pod.clone()))
    }

    async fn publish_events(&self, events: &[Event]) {
        self.log().events.extend_from_slice(events);
    }

    async fn write_status(&self, status: &StatusConfigMap) -> Result<(), ClusterError> {
        self.log().status = Some(status.clone());
        Ok(())
    }

    async fn delete_status(&self, _namespace: &str, _name: &str) -> Result<(), ClusterError> {
        self.log().status = None;
        Ok(())
    }
}
