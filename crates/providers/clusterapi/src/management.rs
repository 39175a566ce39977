//! The management cluster as the provider sees it: which Cluster API group/version the server
//! serves (docs/clusterapi.md CAPI-04, CAPI-05), watch caches of the scalable resources and
//! Machines (CAPI-59), the workload cluster's Nodes, lazily started caches of infrastructure
//! templates (CAPI-47) and warning Events
//! for objects the provider skips.
//!
//! Freshness comes from the watches, so `Refresh` has nothing to do and every lookup reads memory.
//! Lookups by provider id scan the (small) Machine and MachinePool caches instead of keeping
//! indexes: a management cluster holds hundreds of Machines, and the engine only asks about nodes
//! it could not map through the groups' instance lists.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event as K8sEvent, Node as K8sNode, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersion;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;

/// Errors that stop the provider from starting (all fatal, as upstream).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("API group {group} is not served by the management cluster")]
    GroupNotServed { group: String },
    #[error("listing the resources of {group_version} on the management cluster: {source}")]
    Resources {
        group_version: String,
        source: kube::Error,
    },
    #[error("discovering API group {group} on the management cluster: {source}")]
    Discovery { group: String, source: kube::Error },
    #[error("{group_version} does not serve {resource}")]
    MissingResource {
        group_version: String,
        resource: &'static str,
    },
    #[error("the initial list of {what} did not complete within {timeout:?}")]
    SyncTimeout { what: String, timeout: Duration },
}

/// The Cluster API resources the management cluster serves in the group/version in effect.
#[derive(Debug, Clone)]
pub struct CapiResources {
    pub group: String,
    pub version: String,
    pub machine_deployments: Option<ApiResource>,
    pub machine_sets: ApiResource,
    pub machines: ApiResource,
    pub machine_pools: Option<ApiResource>,
}

impl CapiResources {
    /// docs/clusterapi.md CAPI-04: `CAPI_VERSION` verbatim when set, else the group's preferred
    /// version. MachineSets and Machines must be served; MachineDeployments and MachinePools are
    /// optional.
    pub async fn discover(
        client: &Client,
        group: &str,
        version_override: Option<&str>,
    ) -> Result<CapiResources, StartError> {
        let api_group = match version_override {
            Some(version) => {
                let gv = GroupVersion::gv(group, version);
                kube::discovery::pinned_group(client, &gv)
                    .await
                    .map_err(|source| StartError::Resources {
                        group_version: format!("{group}/{version}"),
                        source,
                    })?
            }
            None => {
                kube::discovery::group(client, group)
                    .await
                    .map_err(|source| match &source {
                        kube::Error::Discovery(_) => StartError::GroupNotServed {
                            group: group.to_string(),
                        },
                        _ => StartError::Discovery {
                            group: group.to_string(),
                            source,
                        },
                    })?
            }
        };
        let version = match version_override {
            Some(version) => version.to_string(),
            None => api_group
                .preferred_version()
                .ok_or_else(|| StartError::GroupNotServed {
                    group: group.to_string(),
                })?
                .to_string(),
        };
        let served: Vec<ApiResource> = api_group
            .versioned_resources(&version)
            .into_iter()
            .map(|(resource, _)| resource)
            .collect();
        let find = |plural: &str| served.iter().find(|r| r.plural == plural).cloned();
        let group_version = format!("{group}/{version}");
        // Upstream assumes these two exist; a server without them cannot be autoscaled, so say so
        // at start-up rather than on the first watch error.
        let machine_sets = find("machinesets").ok_or_else(|| StartError::MissingResource {
            group_version: group_version.clone(),
            resource: "machinesets",
        })?;
        let machines = find("machines").ok_or_else(|| StartError::MissingResource {
            group_version: group_version.clone(),
            resource: "machines",
        })?;
        Ok(CapiResources {
            group: group.to_string(),
            version,
            machine_deployments: find("machinedeployments"),
            machine_sets,
            machines,
            machine_pools: find("machinepools"),
        })
    }
}

/// One watch cache; its task stops when the last handle goes.
#[derive(Clone)]
pub struct WatchedStore<K: kube::Resource + 'static>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    pub store: Store<K>,
    _task: Arc<AbortOnDrop>,
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<K: kube::Resource + Clone + 'static> fmt::Debug for WatchedStore<K>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchedStore")
            .field("objects", &self.store.len())
            .finish()
    }
}

/// Watches `resource` (in `namespace`, or everywhere) into a store.
pub fn watch_dynamic(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> WatchedStore<DynamicObject> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    watch_into_store(
        api,
        reflector::store::Writer::new(resource.clone()),
        format!("management cluster {}", resource.plural),
    )
}

/// Watches the workload cluster's Nodes (provider-id and node-name lookups, docs/clusterapi.md
/// CAPI-59).
pub fn watch_nodes(client: &Client) -> WatchedStore<K8sNode> {
    watch_into_store(
        Api::all(client.clone()),
        reflector::store::Writer::default(),
        "workload cluster nodes".to_string(),
    )
}

/// Runs a watch into `writer`'s store on a task, with kube-runtime's default backoff so a lost
/// watch re-lists instead of ending. Managed fields are dropped: nothing reads them and they are
/// most of an object's size.
fn watch_into_store<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    what: String,
) -> WatchedStore<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + fmt::Debug + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Send + Sync,
{
    let store = writer.as_reader();
    let stream = reflector(
        writer,
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|o: &mut K| o.managed_fields_mut().clear()),
    );
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(error) = event {
                tracing::warn!(watch = %what, %error, "watch failed; retrying");
            }
        }
    });
    WatchedStore {
        store,
        _task: Arc::new(AbortOnDrop(task)),
    }
}

/// Waits for a store's initial list, bounded (docs/clusterapi.md CAPI-Q8: upstream waits forever).
pub async fn wait_synced<K: kube::Resource + Clone + 'static>(
    store: &Store<K>,
    what: &str,
    timeout: Duration,
) -> Result<(), StartError>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    match tokio::time::timeout(timeout, store.wait_until_ready()).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(StartError::SyncTimeout {
            what: what.to_string(),
            timeout,
        }),
    }
}

/// Caches of infrastructure machine templates, one per resource, started on first use
/// (docs/clusterapi.md CAPI-47, CAPI-59).
pub struct InfrastructureCaches {
    client: Client,
    namespace: Option<String>,
    sync_timeout: Duration,
    stores: tokio::sync::Mutex<HashMap<String, WatchedStore<DynamicObject>>>,
}

impl fmt::Debug for InfrastructureCaches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InfrastructureCaches")
            .field("namespace", &self.namespace)
            .finish()
    }
}

/// Why an infrastructure template could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TemplateLookupError {
    #[error("discovering API group {group}: {source}")]
    Discovery { group: String, source: kube::Error },
    #[error("no version of API group {group} serves kind {kind}")]
    KindNotServed { group: String, kind: String },
    #[error("the cache of {resource} did not sync within {timeout:?} (is it readable?)")]
    SyncTimeout { resource: String, timeout: Duration },
}

impl InfrastructureCaches {
    pub fn new(client: Client, namespace: Option<String>, sync_timeout: Duration) -> Self {
        InfrastructureCaches {
            client,
            namespace,
            sync_timeout,
            stores: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The version for a v1beta2-style reference (`apiGroup` + `kind`): the first version of the
    /// group, in the server's order (preferred first), whose resources include the kind.
    pub async fn version_for_kind(
        &self,
        group: &str,
        kind: &str,
    ) -> Result<String, TemplateLookupError> {
        let api_group = kube::discovery::group(&self.client, group)
            .await
            .map_err(|source| TemplateLookupError::Discovery {
                group: group.to_string(),
                source,
            })?;
        api_group
            .versions()
            .find(|version| {
                api_group
                    .versioned_resources(version)
                    .iter()
                    .any(|(resource, _)| resource.kind == kind)
            })
            .map(str::to_string)
            .ok_or_else(|| TemplateLookupError::KindNotServed {
                group: group.to_string(),
                kind: kind.to_string(),
            })
    }

    /// The object `namespace/name` of `resource` from its cache (`None` when absent).
    pub async fn get(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<DynamicObject>>, TemplateLookupError> {
        let key = format!("{}/{}", resource.api_version, resource.plural);
        let watched = {
            let mut stores = self.stores.lock().await;
            stores
                .entry(key.clone())
                .or_insert_with(|| watch_dynamic(&self.client, resource, self.namespace.as_deref()))
                .clone()
        };
        if wait_synced(&watched.store, &key, self.sync_timeout)
            .await
            .is_err()
        {
            // Forget it so a later call (after RBAC is fixed) starts a fresh watch.
            self.stores.lock().await.remove(&key);
            return Err(TemplateLookupError::SyncTimeout {
                resource: key,
                timeout: self.sync_timeout,
            });
        }
        Ok(watched
            .store
            .find(|o| o.namespace().as_deref() == Some(namespace) && o.name_any() == name))
    }
}

/// Warning Events on management-cluster objects the provider had to skip (a bad annotation, a
/// missing template), once per object and problem so a loop every 10 s does not flood the API.
pub struct WarningEvents {
    client: Client,
    reported: Mutex<HashSet<(String, String)>>,
}

impl fmt::Debug for WarningEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WarningEvents")
    }
}

impl WarningEvents {
    pub fn new(client: Client) -> Self {
        WarningEvents {
            client,
            reported: Mutex::new(HashSet::new()),
        }
    }

    /// Logs the problem and, the first time it is seen for this object, records a Warning Event
    /// on the object. Failing to record the Event is logged, never fatal.
    pub async fn warn(&self, object: &DynamicObject, reason: &str, message: &str) {
        let uid = object.uid().unwrap_or_default();
        let kind = object
            .types
            .as_ref()
            .map(|t| t.kind.clone())
            .unwrap_or_default();
        let namespace = object.namespace().unwrap_or_default();
        let name = object.name_any();
        tracing::warn!(kind = %kind, namespace = %namespace, name = %name, reason, "{message}");
        let first = self
            .reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((uid.clone(), message.to_string()));
        if !first {
            return;
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        let event = K8sEvent {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}.")),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: object.types.as_ref().map(|t| t.api_version.clone()),
                kind: Some(kind.clone()),
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                uid: Some(uid),
                resource_version: object.resource_version(),
                ..ObjectReference::default()
            },
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            type_: Some("Warning".to_string()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            count: Some(1),
            reporting_component: Some("cluster-autoscaler".to_string()),
            reporting_instance: Some("ferroscale".to_string()),
            action: Some("Autoscaling".to_string()),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some("cluster-autoscaler".to_string()),
                host: None,
            }),
            ..K8sEvent::default()
        };
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        if let Err(error) = api.create(&PostParams::default(), &event).await {
            tracing::warn!(%error, kind = %kind, name = %name, "recording a warning Event");
        }
    }
}
