//! [`KubeCluster`]: the engine's [`ClusterApi`] over a real API server.
//!
//! Reads come from the watch caches ([`ClusterCaches`]), except where the engine needs the state
//! of one object *now* (`node`, `pod_status`), which is a GET. Writes are the few the engine makes:
//! node taints and cordoning (read–modify–replace guarded by the resourceVersion, retried on
//! conflict), evictions through the `policy/v1` Eviction subresource, core/v1 Events, and the
//! status ConfigMap.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferroscale_core::events::{Event, EventObject};
use ferroscale_core::kubernetes::{
    ClusterApi, ClusterError, ClusterObjects, EvictionError, STATUS_LAST_UPDATED_ANNOTATION,
    StatusConfigMap,
};
use ferroscale_model::{CAPACITY_API_GROUP, Node, Pod, Taint, TaintEffect};
use ferroscale_objects::node_from_k8s;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::jiff;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

use crate::api_access::ApiServer;
use crate::caches::ClusterCaches;
use crate::capacity::{self, ScalableResolver};

/// The component name upstream events and writes carry; dashboards filter on it.
pub const COMPONENT: &str = "cluster-autoscaler";

/// Conflicting node updates are retried this often (upstream: 750 ms) ...
const CONFLICT_RETRY_INTERVAL: Duration = Duration::from_millis(750);
/// ... for this long (upstream: 5 s).
const CONFLICT_RETRY_LIMIT: Duration = Duration::from_secs(5);

/// The autoscaler's own objects.
#[derive(Debug, Clone)]
pub struct KubeClusterConfig {
    /// `--namespace`: where the status ConfigMap and the priority expander's ConfigMap live.
    pub namespace: String,
    /// `--status-config-map-name` (default `cluster-autoscaler-status`).
    pub status_configmap: String,
    /// The priority expander's ConfigMap, the object of its events.
    pub priority_expander_configmap: String,
    /// `--capacity-buffer-pod-dry-run-enabled`: a scalable workload's template becomes a pod
    /// through a dry-run creation (admission applied) rather than as written.
    pub buffer_pod_dry_run: bool,
}

impl KubeClusterConfig {
    /// Upstream names in `namespace`.
    pub fn new(namespace: impl Into<String>) -> KubeClusterConfig {
        KubeClusterConfig {
            namespace: namespace.into(),
            status_configmap: "cluster-autoscaler-status".to_string(),
            priority_expander_configmap: "cluster-autoscaler-priority-expander".to_string(),
            buffer_pod_dry_run: false,
        }
    }
}

/// The live cluster.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    caches: ClusterCaches,
    config: KubeClusterConfig,
    scalables: Arc<ScalableResolver>,
}

impl std::fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCluster")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl KubeCluster {
    /// Connects to `server` (within its request budget) and uses `caches` (started against the
    /// same cluster and namespace) for reads.
    ///
    /// The client built here does not retry on its own: kube-rs by default retries HTTP 429 up to
    /// 15 times with backoff, and a PodDisruptionBudget refusing an eviction *is* a 429, so one
    /// eviction call would block the drain for many minutes instead of returning
    /// [`EvictionError::DisruptionBudget`]. The engine owns retries (every 10 s for evictions,
    /// docs/behaviour.md SD-85) and this type retries node-update conflicts itself.
    pub fn new(
        server: &ApiServer,
        caches: ClusterCaches,
        config: KubeClusterConfig,
    ) -> Result<KubeCluster, ClusterError> {
        let client = server
            .client_without_retry()
            .map_err(|e| ClusterError::Api(e.to_string()))?;
        let scalables = Arc::new(ScalableResolver::new(
            client.clone(),
            config.buffer_pod_dry_run,
        ));
        Ok(KubeCluster {
            client,
            caches,
            config,
            scalables,
        })
    }

    pub fn caches(&self) -> &ClusterCaches {
        &self.caches
    }

    pub(crate) fn nodes(&self) -> Api<core::Node> {
        Api::all(self.client.clone())
    }

    /// Read–modify–replace of a node. The replace carries the resourceVersion that was read, so a
    /// concurrent writer makes it fail with 409 instead of being overwritten; then the node is read
    /// again, every [`CONFLICT_RETRY_INTERVAL`] for up to [`CONFLICT_RETRY_LIMIT`]. `modify`
    /// returns whether it changed anything (no write otherwise).
    async fn update_node(
        &self,
        name: &str,
        modify: impl Fn(&mut core::Node) -> bool,
    ) -> Result<(), ClusterError> {
        let nodes = self.nodes();
        let deadline = Instant::now() + CONFLICT_RETRY_LIMIT;
        loop {
            let mut node = nodes
                .get(name)
                .await
                .map_err(|e| cluster_error("Node", name, e))?;
            if !modify(&mut node) {
                return Ok(());
            }
            match nodes.replace(name, &PostParams::default(), &node).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(status))
                    if status.is_conflict()
                        && Instant::now() + CONFLICT_RETRY_INTERVAL < deadline =>
                {
                    tracing::debug!(node = name, "node changed while updating it; retrying");
                    tokio::time::sleep(CONFLICT_RETRY_INTERVAL).await;
                }
                Err(e) => return Err(cluster_error("Node", name, e)),
            }
        }
    }

    /// The involved object and the namespace of an event about `object`.
    fn involved_object(
        &self,
        object: &EventObject,
        pod_uids: &BTreeMap<String, String>,
        node_uids: &BTreeMap<String, String>,
    ) -> (String, core::ObjectReference) {
        let configmap = |name: &str| {
            (
                self.config.namespace.clone(),
                core::ObjectReference {
                    api_version: Some("v1".to_string()),
                    kind: Some("ConfigMap".to_string()),
                    namespace: Some(self.config.namespace.clone()),
                    name: Some(name.to_string()),
                    ..core::ObjectReference::default()
                },
            )
        };
        match object {
            EventObject::StatusConfigMap => configmap(&self.config.status_configmap),
            EventObject::PriorityConfigMap => configmap(&self.config.priority_expander_configmap),
            EventObject::Pod(key) => {
                let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
                (
                    namespace.to_string(),
                    core::ObjectReference {
                        api_version: Some("v1".to_string()),
                        kind: Some("Pod".to_string()),
                        namespace: Some(namespace.to_string()),
                        name: Some(name.to_string()),
                        uid: pod_uids.get(key).cloned(),
                        ..core::ObjectReference::default()
                    },
                )
            }
            // Nodes have no namespace; their events go to `default`, as kubectl expects them.
            EventObject::Node(name) => (
                "default".to_string(),
                core::ObjectReference {
                    api_version: Some("v1".to_string()),
                    kind: Some("Node".to_string()),
                    name: Some(name.clone()),
                    uid: node_uids.get(name).cloned(),
                    ..core::ObjectReference::default()
                },
            ),
            EventObject::ProvisioningRequest(key) => {
                capacity_object("ProvisioningRequest", "v1", key)
            }
            EventObject::CapacityBuffer(key) => capacity_object("CapacityBuffer", "v1beta1", key),
            EventObject::CapacityQuota(name) => (
                "default".to_string(),
                core::ObjectReference {
                    api_version: Some(format!("{CAPACITY_API_GROUP}/v1beta1")),
                    kind: Some("CapacityQuota".to_string()),
                    name: Some(name.clone()),
                    ..core::ObjectReference::default()
                },
            ),
        }
    }
}

/// The involved object of an event about a namespaced kind of the capacity APIs.
fn capacity_object(kind: &str, version: &str, key: &str) -> (String, core::ObjectReference) {
    let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
    (
        namespace.to_string(),
        core::ObjectReference {
            api_version: Some(format!("{CAPACITY_API_GROUP}/{version}")),
            kind: Some(kind.to_string()),
            namespace: Some(namespace.to_string()),
            name: Some(name.to_string()),
            ..core::ObjectReference::default()
        },
    )
}

/// Maps an API error on object `kind name` into the engine's error.
pub(crate) fn cluster_error(kind: &'static str, name: &str, error: kube::Error) -> ClusterError {
    match &error {
        kube::Error::Api(status) if status.is_not_found() => ClusterError::NotFound {
            kind,
            name: name.to_string(),
        },
        kube::Error::Api(status) if status.is_conflict() => ClusterError::Conflict {
            kind,
            name: name.to_string(),
            message: status.message.clone(),
        },
        _ => ClusterError::Api(format!("{kind} {name}: {error}")),
    }
}

fn k8s_taint(taint: &Taint) -> core::Taint {
    core::Taint {
        key: taint.key.clone(),
        value: Some(taint.value.clone()).filter(|v| !v.is_empty()),
        effect: taint.effect.as_str().to_string(),
        // The API only accepts timeAdded on NoExecute taints.
        time_added: taint
            .time_added
            .filter(|_| taint.effect == TaintEffect::NoExecute)
            .and_then(|t| jiff::Timestamp::from_millisecond(t.0).ok())
            .map(meta::Time),
    }
}

#[async_trait]
impl ClusterApi for KubeCluster {
    async fn gather(&self) -> Result<ClusterObjects, ClusterError> {
        if !self.caches.synced() {
            return Err(ClusterError::Api(
                "the watch caches have not completed their first list".to_string(),
            ));
        }
        let mut objects = self.caches.objects();
        if objects
            .capacity
            .buffers
            .iter()
            .any(|b| b.spec.scalable_ref.is_some())
        {
            objects.capacity.scalables = self
                .scalables
                .resolve(
                    &objects.capacity.buffers,
                    &objects.pods,
                    &self.caches.priority_classes(),
                )
                .await;
        }
        Ok(objects)
    }

    async fn gather_nodes(&self) -> Result<Vec<Arc<Node>>, ClusterError> {
        if !self.caches.synced() {
            return Err(ClusterError::Api(
                "the watch caches have not completed their first list".to_string(),
            ));
        }
        Ok(self.caches.nodes())
    }

    async fn node(&self, name: &str) -> Result<Option<Arc<Node>>, ClusterError> {
        let Some(node) = self
            .nodes()
            .get_opt(name)
            .await
            .map_err(|e| cluster_error("Node", name, e))?
        else {
            return Ok(None);
        };
        node_from_k8s(&node)
            .map(|n| Some(Arc::new(n)))
            .map_err(|e| ClusterError::Api(e.to_string()))
    }

    /// Read from the API server, not the watch cache: this is the last look at a node before
    /// its pods are evicted or it is deleted, and a pod bound a moment ago (or while the pod
    /// watch lags or is down) must be seen (docs/behaviour.md SD-110).
    async fn pods_on_node(&self, node: &str) -> Result<Vec<Arc<Pod>>, ClusterError> {
        let pods: Api<core::Pod> = Api::all(self.client.clone());
        let listed = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await
            .map_err(|e| cluster_error("Pod", &format!("on node {node}"), e))?;
        listed
            .items
            .iter()
            .map(|pod| {
                self.caches
                    .convert_pod(pod)
                    .map(Arc::new)
                    .map_err(|e| ClusterError::Api(e.to_string()))
            })
            .collect()
    }

    async fn taint_node(&self, node: &str, taint: Taint, cordon: bool) -> Result<(), ClusterError> {
        let wanted = k8s_taint(&taint);
        self.update_node(node, |object| {
            let spec = object.spec.get_or_insert_with(Default::default);
            let taints = spec.taints.get_or_insert_with(Vec::new);
            let already = taints.iter().any(|t| {
                t.key == wanted.key && t.effect == wanted.effect && t.value == wanted.value
            }) && taints.iter().filter(|t| t.key == wanted.key).count() == 1;
            let cordoned = spec.unschedulable == Some(true);
            if already && (cordoned || !cordon) {
                return false;
            }
            taints.retain(|t| t.key != wanted.key);
            taints.push(wanted.clone());
            if cordon {
                spec.unschedulable = Some(true);
            }
            true
        })
        .await?;
        tracing::info!(node, taint = %taint.key, cordon, "tainted node");
        Ok(())
    }

    async fn untaint_node(
        &self,
        node: &str,
        taint_key: &str,
        uncordon: bool,
    ) -> Result<(), ClusterError> {
        self.update_node(node, |object| {
            let spec = object.spec.get_or_insert_with(Default::default);
            let mut changed = false;
            if let Some(taints) = spec.taints.as_mut() {
                let before = taints.len();
                taints.retain(|t| t.key != taint_key);
                changed = taints.len() != before;
            }
            if uncordon && spec.unschedulable == Some(true) {
                spec.unschedulable = None;
                changed = true;
            }
            changed
        })
        .await?;
        tracing::info!(node, taint = taint_key, uncordon, "removed taint from node");
        Ok(())
    }

    async fn evict_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_seconds: i64,
    ) -> Result<(), EvictionError> {
        let pod = format!("{namespace}/{name}");
        let eviction = policy::Eviction {
            metadata: meta::ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                ..meta::ObjectMeta::default()
            },
            delete_options: Some(meta::DeleteOptions {
                grace_period_seconds: Some(grace_seconds.max(0)),
                ..meta::DeleteOptions::default()
            }),
        };
        let pods: Api<core::Pod> = Api::namespaced(self.client.clone(), namespace);
        // The answer is a Status we do not need; take it as untyped JSON.
        let result: Result<serde_json::Value, kube::Error> = pods
            .create_subresource("eviction", name, &PostParams::default(), &eviction)
            .await;
        match result {
            Ok(_) => {
                tracing::info!(pod, grace_seconds, "evicted pod");
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 429 => {
                Err(EvictionError::DisruptionBudget {
                    pod,
                    message: status.message.clone(),
                })
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                Err(EvictionError::NotFound { pod })
            }
            Err(e) => Err(EvictionError::Other {
                pod,
                message: e.to_string(),
            }),
        }
    }

    async fn pod_status(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Pod>>, ClusterError> {
        let pods: Api<core::Pod> = Api::namespaced(self.client.clone(), namespace);
        let key = format!("{namespace}/{name}");
        let Some(pod) = pods
            .get_opt(name)
            .await
            .map_err(|e| cluster_error("Pod", &key, e))?
        else {
            return Ok(None);
        };
        self.caches
            .convert_pod(&pod)
            .map(|p| Some(Arc::new(p)))
            .map_err(|e| ClusterError::Api(e.to_string()))
    }

    async fn publish_events(&self, events: &[Event]) {
        let pod_keys: Vec<&str> = events
            .iter()
            .filter_map(|e| match &e.object {
                EventObject::Pod(key) => Some(key.as_str()),
                _ => None,
            })
            .collect();
        let node_names: Vec<&str> = events
            .iter()
            .filter_map(|e| match &e.object {
                EventObject::Node(name) => Some(name.as_str()),
                _ => None,
            })
            .collect();
        let (pod_uids, node_uids) = self.caches.uids(&pod_keys, &node_names);
        for (index, event) in events.iter().enumerate() {
            let (namespace, involved) = self.involved_object(&event.object, &pod_uids, &node_uids);
            let now = jiff::Timestamp::now();
            let object_name = involved.name.clone().unwrap_or_default();
            let record = core::Event {
                metadata: meta::ObjectMeta {
                    // Unique per object and instant, as client-go names them.
                    name: Some(format!("{object_name}.{:x}", now.as_nanosecond())),
                    namespace: Some(namespace.clone()),
                    ..meta::ObjectMeta::default()
                },
                involved_object: involved,
                reason: Some(event.reason.to_string()),
                message: Some(event.message.clone()),
                type_: Some(if event.warning { "Warning" } else { "Normal" }.to_string()),
                source: Some(core::EventSource {
                    component: Some(COMPONENT.to_string()),
                    host: None,
                }),
                reporting_component: Some(COMPONENT.to_string()),
                first_timestamp: Some(meta::Time(now)),
                last_timestamp: Some(meta::Time(now)),
                count: Some(1),
                ..core::Event::default()
            };
            let api: Api<core::Event> = Api::namespaced(self.client.clone(), &namespace);
            // Events are best effort: a lost event must never fail a loop, nor hold it up. When
            // the API server did not answer at all, the next events would each wait as long
            // again (a request timeout apiece): they are dropped with this one.
            match api.create(&PostParams::default(), &record).await {
                Ok(_) => {}
                Err(error @ kube::Error::Api(_)) => {
                    tracing::warn!(%event, %error, "could not record event");
                }
                Err(error) => {
                    tracing::warn!(
                        %event,
                        %error,
                        dropped = events.len() - index - 1,
                        "could not reach the API server to record an event; dropping the \
                         iteration's remaining events"
                    );
                    return;
                }
            }
        }
    }

    async fn write_status(&self, status: &StatusConfigMap) -> Result<(), ClusterError> {
        // Read, then replace (or create): the verbs upstream's Helm chart grants on this one
        // ConfigMap (get and update by name, create), so Ferroscale runs under that Role as it
        // is. The replace carries the resourceVersion read; a conflict (someone wrote in between)
        // is retried with a fresh read.
        let api: Api<core::ConfigMap> = Api::namespaced(self.client.clone(), &status.namespace);
        let key = format!("{}/{}", status.namespace, status.name);
        let error = |e| cluster_error("ConfigMap", &key, e);
        let started = Instant::now();
        loop {
            let written = match api.get_opt(&status.name).await.map_err(error)? {
                Some(mut configmap) => {
                    configmap
                        .metadata
                        .annotations
                        .get_or_insert_with(BTreeMap::new)
                        .insert(
                            STATUS_LAST_UPDATED_ANNOTATION.to_string(),
                            status.last_updated.clone(),
                        );
                    configmap
                        .data
                        .get_or_insert_with(BTreeMap::new)
                        .insert("status".to_string(), status.status_yaml.clone());
                    api.replace(&status.name, &PostParams::default(), &configmap)
                        .await
                }
                None => {
                    let configmap = core::ConfigMap {
                        metadata: meta::ObjectMeta {
                            name: Some(status.name.clone()),
                            namespace: Some(status.namespace.clone()),
                            annotations: Some(BTreeMap::from([(
                                STATUS_LAST_UPDATED_ANNOTATION.to_string(),
                                status.last_updated.clone(),
                            )])),
                            ..meta::ObjectMeta::default()
                        },
                        data: Some(BTreeMap::from([(
                            "status".to_string(),
                            status.status_yaml.clone(),
                        )])),
                        ..core::ConfigMap::default()
                    };
                    api.create(&PostParams::default(), &configmap).await
                }
            };
            match written.map_err(error) {
                Ok(_) => return Ok(()),
                // Written (or created) by someone else between the read and the write.
                Err(ClusterError::Conflict { .. }) if started.elapsed() < CONFLICT_RETRY_LIMIT => {
                    tokio::time::sleep(CONFLICT_RETRY_INTERVAL).await;
                }
                Err(other) => return Err(other),
            }
        }
    }

    async fn delete_status(&self, namespace: &str, name: &str) -> Result<(), ClusterError> {
        let api: Api<core::ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            // Already gone is what deleting wanted.
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
            Err(e) => Err(cluster_error(
                "ConfigMap",
                &format!("{namespace}/{name}"),
                e,
            )),
        }
    }
    async fn update_provisioning_request_status(
        &self,
        namespace: &str,
        name: &str,
        status: &ferroscale_model::ProvisioningRequestStatus,
    ) -> Result<(), ClusterError> {
        capacity::update_provisioning_request_status(&self.client, namespace, name, status).await
    }
    async fn update_capacity_buffer_status(
        &self,
        namespace: &str,
        name: &str,
        status: &ferroscale_model::CapacityBufferStatus,
    ) -> Result<(), ClusterError> {
        capacity::update_capacity_buffer_status(&self.client, namespace, name, status).await
    }
    async fn ensure_buffer_pod_template(
        &self,
        buffer: &ferroscale_model::CapacityBuffer,
        scalable: &ferroscale_model::ScalableObject,
    ) -> Result<(String, i64), ClusterError> {
        capacity::ensure_buffer_pod_template(&self.client, &self.scalables, buffer, scalable).await
    }
}
