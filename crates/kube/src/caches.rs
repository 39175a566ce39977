//! Watch caches that hold the cluster already converted into the model.
//!
//! One kube-runtime watcher per kind (retried with a growing delay, so a failed watch or an API
//! server restart is retried and re-listed without anyone noticing but the log). Each watch
//! event is converted into the model the moment it arrives and the converted object is kept, keyed
//! by uid; [`ClusterCaches`] hands those out without converting or listing anything again. This is
//! why there is no kube-runtime reflector here: a reflector keeps the raw objects (managed fields
//! and all), and we never need them again once converted.
//!
//! An object that does not convert (a quantity the model cannot hold, an unknown operator, ...) is
//! kept out of the model with a warning naming the object, the field and the value, and counted in
//! [`ClusterCaches::conversion_failures`]; every other object keeps flowing.
//!
//! The DRA kinds (`resource.k8s.io/v1` ResourceSlices, DeviceClasses, ResourceClaims and
//! ResourceClaimTemplates) are optional: on an API server that does not serve that API version
//! (older than v1.34, or the API turned off), the list answers 404, and the cache counts as synced
//! and empty ("no DRA objects") instead of holding start-up back. It keeps asking, less and less
//! often, and fills up once the API appears.
//!
//! A watch that fails is retried with kube-runtime's backoff. Its failure is logged naming the API
//! server and the cause, once; identical failures of any watcher are then summed up once per
//! [`REPEAT_WINDOW`](crate::repeated::REPEAT_WINDOW) (an API server that does not answer fails
//! every watcher together). While the first lists run, [`ClusterCaches::wait_until_ready`]
//! reports which caches are synced and how many objects each has listed.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use ferroscale_core::kubernetes::{ClusterObjects, WorkloadController};
use ferroscale_core::scale_up::PriorityConfig;
use ferroscale_model::capacity::{CapacityBuffer, CapacityQuota, PodTemplate, ProvisioningRequest};
use ferroscale_model::{
    CapacityObjects, CsiNode, DaemonSet, DeviceClass, DraObjects, Namespace, Node,
    PersistentVolume, PersistentVolumeClaim, Pod, PodDisruptionBudget, PriorityClass,
    ResourceClaim, ResourceClaimTemplate, ResourceSlice, StorageClass, Timestamp, VolumeObjects,
};
use ferroscale_objects::ferroscale_capacity_apis::{
    capacity_buffer, capacity_quota, provisioning_request,
};
use ferroscale_objects::{
    ConvertError, PriorityClasses, capacity_buffer_from_k8s, capacity_quota_from_k8s,
    csi_node_from_k8s, daemonset_from_k8s, device_class_from_k8s, namespace_from_k8s,
    node_from_k8s, pdb_from_k8s, pod_from_k8s, pod_template_from_k8s, priority_class_from_k8s,
    provisioning_request_from_k8s, pv_from_k8s, pvc_from_k8s, resource_claim_from_k8s,
    resource_claim_template_from_k8s, resource_slice_from_k8s, storage_class_from_k8s,
};
use futures::StreamExt;
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::resource::v1 as resource;
use k8s_openapi::api::scheduling::v1 as scheduling;
use k8s_openapi::api::storage::v1 as storage;
use kube::runtime::watcher as watch_stream;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use thiserror::Error;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::repeated::{RepeatedWarnings, Verdict, error_chain};

/// The priority expander reads this key of its ConfigMap.
const PRIORITY_EXPANDER_KEY: &str = "priorities";

/// How often [`ClusterCaches::wait_until_ready`] says how far the first lists have got.
pub const SYNC_PROGRESS_INTERVAL: Duration = Duration::from_secs(15);

/// Where the caches look for the autoscaler's own objects.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// `--namespace`: where the priority expander's ConfigMap lives.
    pub autoscaler_namespace: String,
    /// Name of the priority expander's ConfigMap (upstream: `cluster-autoscaler-priority-expander`).
    pub priority_expander_configmap: String,
    /// The API server's URL, named in every watch failure and progress report (the client's
    /// errors do not say which server they could not reach).
    pub api_server: String,
    /// Which capacity kinds are watched (each only while its feature is on).
    pub capacity: CapacityWatches,
}

/// The capacity kinds to watch. A kind not watched is an empty, synced cache; so is a watched kind
/// whose API the server does not serve (its CRD is not installed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapacityWatches {
    /// ProvisioningRequests (`autoscaling.x-k8s.io/v1`).
    pub provisioning_requests: bool,
    /// CapacityBuffers (`autoscaling.x-k8s.io/v1beta1`).
    pub buffers: bool,
    /// CapacityQuotas (`autoscaling.x-k8s.io/v1beta1`).
    pub quotas: bool,
}

impl CapacityWatches {
    /// PodTemplates are read when requests or buffers are: both point at them.
    pub fn pod_templates(&self) -> bool {
        self.provisioning_requests || self.buffers
    }
}

impl CacheConfig {
    /// The upstream ConfigMap name in `namespace`.
    pub fn new(autoscaler_namespace: impl Into<String>) -> CacheConfig {
        CacheConfig {
            autoscaler_namespace: autoscaler_namespace.into(),
            priority_expander_configmap: "cluster-autoscaler-priority-expander".to_string(),
            api_server: String::new(),
            capacity: CapacityWatches::default(),
        }
    }

    /// The same, watching the capacity kinds `capacity` asks for.
    pub fn with_capacity(mut self, capacity: CapacityWatches) -> CacheConfig {
        self.capacity = capacity;
        self
    }

    /// The same, naming `url` as the API server in log lines and errors.
    pub fn with_api_server(mut self, url: impl Into<String>) -> CacheConfig {
        self.api_server = url.into();
        self
    }
}

/// "the API server at <url>", or "the API server" when the URL is not known.
fn describe_server(url: &str) -> String {
    if url.is_empty() {
        "the API server".to_string()
    } else {
        format!("the API server at {url}")
    }
}

/// The caches did not finish their first list in time.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "the watch caches did not sync with {server} within {timeout:?}; {progress}",
    server = describe_server(api_server)
)]
pub struct NotSynced {
    pub timeout: Duration,
    /// The API server's URL (empty when not known).
    pub api_server: String,
    /// How far each cache got, including the last error of those that fail.
    pub progress: SyncProgress,
}

/// How far one watch cache has got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheProgress {
    pub kind: &'static str,
    /// Its first list completed.
    pub synced: bool,
    /// Objects held (synced), or listed so far by the list in progress.
    pub objects: usize,
    /// The error of its last attempt, while it keeps failing.
    pub failing: Option<String>,
    /// It had synced, lost its watch, and is listing the kind again (it serves the contents
    /// from before the loss meanwhile).
    pub relisting: bool,
}

/// A cache that may not show the cluster as it is now: its watch fails, or it is re-listing
/// after losing its watch. Scale-down does not act on such a view (docs/behaviour.md LOOP-121).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BehindCache {
    pub kind: &'static str,
    pub reason: String,
}

impl std::fmt::Display for BehindCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.reason)
    }
}

/// How far every watch cache has got: which are synced, what has been listed so far, what fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncProgress(pub Vec<CacheProgress>);

impl SyncProgress {
    /// The kinds whose first list has not completed.
    pub fn pending(&self) -> Vec<&'static str> {
        self.0
            .iter()
            .filter(|c| !c.synced)
            .map(|c| c.kind)
            .collect()
    }

    /// The last error of the caches that fail, if any do.
    pub fn last_error(&self) -> Option<&str> {
        self.0.iter().find_map(|c| c.failing.as_deref())
    }

    /// The synced caches that may be behind the API server now.
    pub fn behind(&self) -> Vec<BehindCache> {
        self.0
            .iter()
            .filter(|c| c.synced)
            .filter_map(|c| {
                let reason = match (&c.failing, c.relisting) {
                    (Some(error), _) => format!("watch failing: {error}"),
                    (None, true) => "re-listing after a lost watch".to_string(),
                    (None, false) => return None,
                };
                Some(BehindCache {
                    kind: c.kind,
                    reason,
                })
            })
            .collect()
    }
}

impl std::fmt::Display for SyncProgress {
    /// `synced: Node (3 objects), ...; listing: Pod (120 so far), ...; failing: Job, ...: <error>`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let synced: Vec<String> = self
            .0
            .iter()
            .filter(|c| c.synced)
            .map(|c| format!("{} ({})", c.kind, c.objects))
            .collect();
        let listing: Vec<String> = self
            .0
            .iter()
            .filter(|c| !c.synced && c.failing.is_none())
            .map(|c| format!("{} ({} so far)", c.kind, c.objects))
            .collect();
        let failing: Vec<&str> = self
            .0
            .iter()
            .filter(|c| !c.synced && c.failing.is_some())
            .map(|c| c.kind)
            .collect();
        let mut parts = Vec::new();
        if !synced.is_empty() {
            parts.push(format!("synced: {}", synced.join(", ")));
        }
        if !listing.is_empty() {
            parts.push(format!("listing: {}", listing.join(", ")));
        }
        if !failing.is_empty() {
            let error = self.last_error().unwrap_or_default();
            parts.push(format!("failing: {}: {error}", failing.join(", ")));
        }
        f.write_str(&parts.join("; "))
    }
}

/// Converted objects of one kind, keyed by uid.
#[derive(Debug)]
struct KindStore<M> {
    kind: &'static str,
    /// The kind's API may be missing from the API server (see the module doc).
    optional: bool,
    /// The API group/version of an optional kind, for the log line saying it is not served.
    api: &'static str,
    /// A kind the engine can run without when its identity may not read it (see
    /// [`Dispensable`]); `None` for the kinds it cannot act without.
    dispensable: Option<Dispensable>,
    state: RwLock<StoreState<M>>,
    /// The last list [`KindStore::shared_values`] handed out, with the generation it was made at.
    shared: Mutex<Option<(u64, Arc<Vec<M>>)>>,
}

/// A kind Ferroscale runs without when the API server forbids reading it (docs/behaviour.md
/// LOOP-123): the identity upstream's Helm chart grants cannot list PriorityClasses or the DRA
/// objects, and an operator who swaps the image keeps that identity. The kinds scale-down safety
/// rests on (nodes, pods, PodDisruptionBudgets, workload controllers, namespaces) are not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dispensable {
    /// `<plural>.<group>` (or `<plural>` for the core group), as RBAC rules name it.
    resource: &'static str,
    /// What the engine does without the kind.
    lost: &'static str,
}

/// A kind left out because the API server forbids listing or watching it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPermission {
    pub kind: &'static str,
    /// `<plural>.<group>`, as RBAC rules name it.
    pub resource: &'static str,
    /// What the engine does without it.
    pub lost: &'static str,
}

impl std::fmt::Display for MissingPermission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "list/watch {}: {}", self.resource, self.lost)
    }
}

#[derive(Debug)]
struct StoreState<M> {
    objects: BTreeMap<String, M>,
    /// Objects kept out because they did not convert: uid → the conversion error.
    rejected: BTreeMap<String, String>,
    /// While the watcher re-lists (after start or a lost watch): the new contents, swapped in whole
    /// at the end so that objects deleted while the watch was down disappear.
    relisting: Option<(BTreeMap<String, M>, BTreeMap<String, String>)>,
    /// The first list completed.
    synced: bool,
    /// While the watch keeps failing: the last error and how many attempts failed in a row.
    failing: Option<(String, u64)>,
    /// An optional kind whose API the server does not serve: held as synced and empty.
    not_served: bool,
    /// Moves with every write: a list handed out at one generation is current while it stays.
    generation: u64,
    /// A dispensable kind the API server forbids this identity to read: held as synced and
    /// empty.
    forbidden: bool,
}

impl<M> KindStore<M> {
    fn new(kind: &'static str) -> KindStore<M> {
        KindStore {
            kind,
            optional: false,
            api: "",
            dispensable: None,
            state: RwLock::new(StoreState {
                objects: BTreeMap::new(),
                rejected: BTreeMap::new(),
                relisting: None,
                synced: false,
                failing: None,
                not_served: false,
                forbidden: false,
                generation: 0,
            }),
            shared: Mutex::new(None),
        }
    }

    /// The same store, for a kind the engine runs without when it may not read it.
    fn dispensable(mut self, resource: &'static str, lost: &'static str) -> KindStore<M> {
        self.dispensable = Some(Dispensable { resource, lost });
        self
    }

    /// A store for a kind whose API the server may not serve (see the module doc).
    fn optional(kind: &'static str) -> KindStore<M> {
        KindStore::optional_in(kind, "resource.k8s.io/v1")
    }

    /// The same for a kind of another API group/version.
    fn optional_in(kind: &'static str, api: &'static str) -> KindStore<M> {
        KindStore {
            optional: true,
            api,
            ..KindStore::new(kind)
        }
    }

    /// A store nothing watches (its feature is off): synced and empty for good.
    fn unwatched(self) -> KindStore<M> {
        self.write().synced = true;
        self
    }

    /// The API server answered that it does not serve this optional kind: the cache holds no
    /// objects and counts as synced. Returns whether this is news (the kind was served, or not
    /// known to be missing, until now), for logging it once.
    fn record_not_served(&self) -> bool {
        self.record_empty_by_design(|state| &mut state.not_served)
    }

    /// The API server forbids this identity to read this dispensable kind: like a kind not
    /// served, the cache holds no objects and counts as synced. Returns whether this is news, for
    /// warning once.
    fn record_forbidden(&self) -> bool {
        self.record_empty_by_design(|state| &mut state.forbidden)
    }

    /// Empties the cache and counts it as synced, setting the flag `why` selects; returns whether
    /// the flag was not set yet.
    fn record_empty_by_design(&self, why: fn(&mut StoreState<M>) -> &mut bool) -> bool {
        let mut state = self.write();
        let news = !std::mem::replace(why(&mut state), true);
        state.objects.clear();
        state.rejected.clear();
        state.relisting = None;
        state.failing = None;
        state.synced = true;
        news
    }

    /// The permission this store lacks, while it lacks it.
    fn missing_permission(&self) -> Option<MissingPermission> {
        let dispensable = self.dispensable?;
        self.read().forbidden.then_some(MissingPermission {
            kind: self.kind,
            resource: dispensable.resource,
            lost: dispensable.lost,
        })
    }

    fn read(&self) -> RwLockReadGuard<'_, StoreState<M>> {
        // A panic while holding the lock cannot leave a half-applied event (each is one insert or
        // remove), so the data behind a poisoned lock is still consistent.
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, StoreState<M>> {
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        state.generation = state.generation.wrapping_add(1);
        state
    }

    /// Applies one watch event; `convert` runs outside the lock.
    fn apply<K>(&self, event: Event<K>, convert: impl Fn(&K) -> Result<M, ConvertError>)
    where
        K: Resource,
    {
        match event {
            Event::Init => self.write().relisting = Some((BTreeMap::new(), BTreeMap::new())),
            Event::InitApply(object) => {
                let key = object_key(&object);
                let converted = self.convert_logged(&object, &convert);
                let mut state = self.write();
                if let Some((objects, rejected)) = state.relisting.as_mut() {
                    match converted {
                        Ok(model) => {
                            objects.insert(key, model);
                        }
                        Err(error) => {
                            rejected.insert(key, error);
                        }
                    }
                }
            }
            Event::InitDone => {
                let mut state = self.write();
                if let Some((objects, rejected)) = state.relisting.take() {
                    state.objects = objects;
                    state.rejected = rejected;
                }
                state.synced = true;
                tracing::debug!(
                    kind = self.kind,
                    objects = state.objects.len(),
                    "watch cache listed"
                );
            }
            Event::Apply(object) => {
                let key = object_key(&object);
                let converted = self.convert_logged(&object, &convert);
                let mut state = self.write();
                match converted {
                    Ok(model) => {
                        state.rejected.remove(&key);
                        state.objects.insert(key, model);
                    }
                    Err(error) => {
                        // A stale model of an object that changed is worse than none.
                        state.objects.remove(&key);
                        state.rejected.insert(key, error);
                    }
                }
            }
            Event::Delete(object) => {
                let key = object_key(&object);
                let mut state = self.write();
                state.objects.remove(&key);
                state.rejected.remove(&key);
            }
        }
    }

    fn convert_logged<K: Resource>(
        &self,
        object: &K,
        convert: &impl Fn(&K) -> Result<M, ConvertError>,
    ) -> Result<M, String> {
        convert(object).map_err(|error| {
            tracing::warn!(
                kind = self.kind,
                object = %error.object,
                field = %error.field,
                value = %error.value,
                "{error}; the object is left out of the model"
            );
            error.to_string()
        })
    }

    fn values(&self) -> Vec<M>
    where
        M: Clone,
    {
        self.read().objects.values().cloned().collect()
    }

    /// The objects as one shared list: the same list (the same `Arc`) as the last call while no
    /// write came in between, so a loop over a quiet cluster neither copies nor reads it.
    fn shared_values(&self) -> Arc<Vec<M>>
    where
        M: Clone,
    {
        let state = self.read();
        let mut shared = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((generation, list)) = shared.as_ref()
            && *generation == state.generation
        {
            return list.clone();
        }
        let list = Arc::new(state.objects.values().cloned().collect::<Vec<M>>());
        *shared = Some((state.generation, list.clone()));
        list
    }

    /// Records a failed attempt of the watch.
    fn record_failure(&self, error: &str) {
        let mut state = self.write();
        let attempts = state.failing.as_ref().map_or(0, |(_, n)| *n);
        state.failing = Some((error.to_string(), attempts + 1));
    }

    /// Records that the watch delivers again; returns how many attempts had failed in a row.
    fn record_success(&self) -> Option<u64> {
        let mut state = self.write();
        state.not_served = false;
        if std::mem::take(&mut state.forbidden) {
            tracing::info!(
                kind = self.kind,
                "{} may be read again; it is back in the model",
                self.dispensable.map_or(self.kind, |d| d.resource)
            );
        }
        state.failing.take().map(|(_, attempts)| attempts)
    }

    fn progress(&self) -> CacheProgress {
        let state = self.read();
        let objects = match (&state.relisting, state.synced) {
            (Some((listed, rejected)), false) => listed.len() + rejected.len(),
            _ => state.objects.len() + state.rejected.len(),
        };
        CacheProgress {
            kind: self.kind,
            synced: state.synced,
            objects,
            failing: state.failing.as_ref().map(|(error, _)| error.clone()),
            // A kind not served or not readable is empty by design, not behind: its watcher's
            // next attempt announces a list that will not come.
            relisting: state.synced
                && state.relisting.is_some()
                && !state.not_served
                && !state.forbidden,
        }
    }
}

/// The priority expander's configuration from its ConfigMap, parsed here, as the watch event
/// arrives, so that the loops that read it never parse it again. A malformed text is kept with
/// its error, which the expander reports.
fn priority_expander_config(configmap: &core::ConfigMap) -> Option<Arc<PriorityConfig>> {
    let text = configmap.data.as_ref()?.get(PRIORITY_EXPANDER_KEY)?;
    Some(Arc::new(PriorityConfig::parse(text.as_str())))
}

/// The uid, or `namespace/name` for the odd object without one (never from a real API server).
fn object_key<K: Resource>(object: &K) -> String {
    let meta = object.meta();
    match meta.uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid.to_string(),
        _ => format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        ),
    }
}

/// Every cache, shared between the watcher tasks and the readers.
#[derive(Debug)]
struct Stores {
    nodes: KindStore<Arc<Node>>,
    pods: KindStore<Arc<Pod>>,
    pdbs: KindStore<PodDisruptionBudget>,
    daemonsets: KindStore<DaemonSet>,
    replica_sets: KindStore<WorkloadController>,
    stateful_sets: KindStore<WorkloadController>,
    jobs: KindStore<WorkloadController>,
    replication_controllers: KindStore<WorkloadController>,
    namespaces: KindStore<Namespace>,
    /// The storage objects the volume filters read: where a pod's claims and volumes can be
    /// used, and how many volumes of each CSI driver a node can attach.
    claims: KindStore<Arc<PersistentVolumeClaim>>,
    volumes: KindStore<Arc<PersistentVolume>>,
    storage_classes: KindStore<Arc<StorageClass>>,
    csi_nodes: KindStore<Arc<CsiNode>>,
    /// The DRA objects the DynamicResources filter reads (optional kinds: see the module doc).
    resource_slices: KindStore<Arc<ResourceSlice>>,
    device_classes: KindStore<Arc<DeviceClass>>,
    resource_claims: KindStore<Arc<ResourceClaim>>,
    claim_templates: KindStore<Arc<ResourceClaimTemplate>>,
    priority_class_objects: KindStore<PriorityClass>,
    /// The capacity APIs (optional kinds, watched only while their features are on) and the
    /// PodTemplates they point at.
    pod_templates: KindStore<Arc<PodTemplate>>,
    provisioning_requests: KindStore<Arc<ProvisioningRequest>>,
    buffers: KindStore<Arc<CapacityBuffer>>,
    quotas: KindStore<Arc<CapacityQuota>>,
    /// `data.priorities` of the priority expander's ConfigMap (`None` without that key), parsed
    /// once per version of the ConfigMap.
    priority_expander: KindStore<Option<Arc<PriorityConfig>>>,
    /// Name → value, rebuilt whenever a PriorityClass changes; pods are converted with it.
    priority_classes: RwLock<PriorityClasses>,
    /// Signalled when the pod watch reports a pod the scheduler has just found no node for; holds
    /// at most one wake-up until the loop takes it.
    unschedulable_pod: tokio::sync::Notify,
    /// How many such pods were reported, and when the latest was: the loop's batching reads them.
    unschedulable_arrivals: std::sync::Mutex<UnschedulableArrivals>,
    /// The API server's URL, for log lines.
    api_server: String,
    /// Watch failures already logged, so that identical ones are summed up.
    warnings: RepeatedWarnings,
}

impl Stores {
    fn new(api_server: String, capacity: CapacityWatches) -> Stores {
        // A kind nothing will watch starts synced and empty.
        fn watched<M>(store: KindStore<M>, on: bool) -> KindStore<M> {
            if on { store } else { store.unwatched() }
        }
        const DRA: &str = "Dynamic Resource Allocation is blind: pods that claim devices get no \
                           scale-up, and nodes running them are kept";
        const STORAGE: &str = "pods whose volumes need these objects get no scale-up, and nodes \
                               running them are kept";
        Stores {
            pod_templates: watched(
                KindStore::new("PodTemplate").dispensable(
                    "podtemplates",
                    "ProvisioningRequests and CapacityBuffers that point at a PodTemplate are not \
                     acted on",
                ),
                capacity.pod_templates(),
            ),
            provisioning_requests: watched(
                KindStore::optional_in("ProvisioningRequest", "autoscaling.x-k8s.io/v1")
                    .dispensable(
                        "provisioningrequests.autoscaling.x-k8s.io",
                        "ProvisioningRequests are not acted on",
                    ),
                capacity.provisioning_requests,
            ),
            buffers: watched(
                KindStore::optional_in("CapacityBuffer", "autoscaling.x-k8s.io/v1beta1")
                    .dispensable(
                        "capacitybuffers.autoscaling.x-k8s.io",
                        "CapacityBuffers get no headroom",
                    ),
                capacity.buffers,
            ),
            // Not dispensable: a quota that cannot be read would not be enforced.
            quotas: watched(
                KindStore::optional_in("CapacityQuota", "autoscaling.x-k8s.io/v1beta1"),
                capacity.quotas,
            ),
            api_server,
            warnings: RepeatedWarnings::default(),
            nodes: KindStore::new("Node"),
            pods: KindStore::new("Pod"),
            pdbs: KindStore::new("PodDisruptionBudget"),
            daemonsets: KindStore::new("DaemonSet"),
            replica_sets: KindStore::new("ReplicaSet"),
            stateful_sets: KindStore::new("StatefulSet"),
            jobs: KindStore::new("Job"),
            replication_controllers: KindStore::new("ReplicationController"),
            namespaces: KindStore::new("Namespace"),
            claims: KindStore::new("PersistentVolumeClaim")
                .dispensable("persistentvolumeclaims", STORAGE),
            volumes: KindStore::new("PersistentVolume").dispensable("persistentvolumes", STORAGE),
            storage_classes: KindStore::new("StorageClass")
                .dispensable("storageclasses.storage.k8s.io", STORAGE),
            csi_nodes: KindStore::new("CSINode").dispensable(
                "csinodes.storage.k8s.io",
                "nodes count as able to attach any number of CSI volumes",
            ),
            resource_slices: KindStore::optional("ResourceSlice")
                .dispensable("resourceslices.resource.k8s.io", DRA),
            device_classes: KindStore::optional("DeviceClass")
                .dispensable("deviceclasses.resource.k8s.io", DRA),
            resource_claims: KindStore::optional("ResourceClaim")
                .dispensable("resourceclaims.resource.k8s.io", DRA),
            claim_templates: KindStore::optional("ResourceClaimTemplate")
                .dispensable("resourceclaimtemplates.resource.k8s.io", DRA),
            priority_class_objects: KindStore::new("PriorityClass").dispensable(
                "priorityclasses.scheduling.k8s.io",
                "pods count with the priority in their spec (which the API server sets on every \
                 pod); a DaemonSet whose pods name another class than the two built-in ones \
                 counts at the global default or 0",
            ),
            priority_expander: KindStore::new("ConfigMap").dispensable(
                "configmaps",
                "the priority expander has no priorities and picks as without its ConfigMap",
            ),
            unschedulable_pod: tokio::sync::Notify::new(),
            unschedulable_arrivals: std::sync::Mutex::new(UnschedulableArrivals::default()),
            priority_classes: RwLock::new(PriorityClasses::default()),
        }
    }

    /// `(kind, synced, rejected)` for every store.
    /// A pod newly marked unschedulable: counted, timed, and the waiting loop woken.
    fn record_unschedulable_arrival(&self) {
        {
            let mut arrivals = self
                .unschedulable_arrivals
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            arrivals.count += 1;
            arrivals.latest = Some(std::time::Instant::now());
        }
        self.unschedulable_pod.notify_one();
    }

    fn summaries(&self) -> Vec<(&'static str, bool, usize)> {
        fn summary<M>(store: &KindStore<M>) -> (&'static str, bool, usize) {
            let state = store.read();
            (store.kind, state.synced, state.rejected.len())
        }
        vec![
            summary(&self.nodes),
            summary(&self.pods),
            summary(&self.pdbs),
            summary(&self.daemonsets),
            summary(&self.replica_sets),
            summary(&self.stateful_sets),
            summary(&self.jobs),
            summary(&self.replication_controllers),
            summary(&self.namespaces),
            summary(&self.claims),
            summary(&self.volumes),
            summary(&self.storage_classes),
            summary(&self.csi_nodes),
            summary(&self.resource_slices),
            summary(&self.device_classes),
            summary(&self.resource_claims),
            summary(&self.claim_templates),
            summary(&self.priority_class_objects),
            summary(&self.priority_expander),
            summary(&self.pod_templates),
            summary(&self.provisioning_requests),
            summary(&self.buffers),
            summary(&self.quotas),
        ]
    }

    fn progress(&self) -> SyncProgress {
        SyncProgress(vec![
            self.nodes.progress(),
            self.pods.progress(),
            self.pdbs.progress(),
            self.daemonsets.progress(),
            self.replica_sets.progress(),
            self.stateful_sets.progress(),
            self.jobs.progress(),
            self.replication_controllers.progress(),
            self.namespaces.progress(),
            self.claims.progress(),
            self.volumes.progress(),
            self.storage_classes.progress(),
            self.csi_nodes.progress(),
            self.resource_slices.progress(),
            self.device_classes.progress(),
            self.resource_claims.progress(),
            self.claim_templates.progress(),
            self.priority_class_objects.progress(),
            self.priority_expander.progress(),
            self.pod_templates.progress(),
            self.provisioning_requests.progress(),
            self.buffers.progress(),
            self.quotas.progress(),
        ])
    }

    /// The dispensable kinds the API server forbids this identity to read, now.
    fn missing_permissions(&self) -> Vec<MissingPermission> {
        [
            self.claims.missing_permission(),
            self.volumes.missing_permission(),
            self.storage_classes.missing_permission(),
            self.csi_nodes.missing_permission(),
            self.resource_slices.missing_permission(),
            self.device_classes.missing_permission(),
            self.resource_claims.missing_permission(),
            self.claim_templates.missing_permission(),
            self.priority_class_objects.missing_permission(),
            self.priority_expander.missing_permission(),
            self.pod_templates.missing_permission(),
            self.provisioning_requests.missing_permission(),
            self.buffers.missing_permission(),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn priority_classes(&self) -> RwLockReadGuard<'_, PriorityClasses> {
        self.priority_classes
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn rebuild_priority_classes(&self) {
        let classes = self.priority_class_objects.values();
        let mut rebuilt = PriorityClasses::new(classes.iter());
        if self.priority_class_objects.read().forbidden {
            rebuilt = rebuilt.incomplete();
        }
        *self
            .priority_classes
            .write()
            .unwrap_or_else(|p| p.into_inner()) = rebuilt;
    }
}

/// Aborts the watcher tasks when the last handle to the caches goes.
#[derive(Debug)]
struct WatcherTasks(Vec<JoinHandle<()>>);

impl Drop for WatcherTasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// The cluster as the watchers last saw it, converted into the model. Cheap to clone; the watchers
/// stop when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct ClusterCaches {
    stores: Arc<Stores>,
    _tasks: Arc<WatcherTasks>,
}

impl ClusterCaches {
    /// Starts one watcher per kind on the current tokio runtime. Returns at once; see
    /// [`ClusterCaches::wait_until_ready`].
    pub fn start(client: Client, config: &CacheConfig) -> ClusterCaches {
        let stores = Arc::new(Stores::new(config.api_server.clone(), config.capacity));
        let all = watcher::Config::default();
        let mut tasks = Vec::new();

        tasks.push(spawn_watch(
            Api::<core::Node>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.nodes,
            |_, node| node_from_k8s(node).map(Arc::new),
        ));
        tasks.push(spawn_watch(
            Api::<core::Pod>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.pods,
            |stores, object| {
                let pod = pod_from_k8s(object, &stores.priority_classes())?;
                let now = Timestamp::from_system_time(std::time::SystemTime::now());
                if is_freshly_unschedulable(&pod, now) {
                    let cached = stores.pods.read().objects.get(&object_key(object)).cloned();
                    if !same_unschedulable_verdict(cached.as_deref(), &pod) {
                        stores.record_unschedulable_arrival();
                    }
                }
                Ok(Arc::new(pod))
            },
        ));
        tasks.push(spawn_watch(
            Api::<policy::PodDisruptionBudget>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.pdbs,
            |_, pdb| pdb_from_k8s(pdb),
        ));
        tasks.push(spawn_watch(
            Api::<apps::DaemonSet>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.daemonsets,
            |stores, daemonset| daemonset_from_k8s(daemonset, &stores.priority_classes()),
        ));
        tasks.push(spawn_watch(
            Api::<apps::ReplicaSet>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.replica_sets,
            |_, rs| Ok(controller(rs, rs.spec.as_ref().and_then(|s| s.replicas))),
        ));
        tasks.push(spawn_watch(
            Api::<apps::StatefulSet>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.stateful_sets,
            |_, ss| Ok(controller(ss, ss.spec.as_ref().and_then(|s| s.replicas))),
        ));
        tasks.push(spawn_watch(
            Api::<batch::Job>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.jobs,
            |_, job| {
                Ok(controller(
                    job,
                    job.spec.as_ref().and_then(|s| s.parallelism),
                ))
            },
        ));
        tasks.push(spawn_watch(
            Api::<core::ReplicationController>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.replication_controllers,
            |_, rc| Ok(controller(rc, rc.spec.as_ref().and_then(|s| s.replicas))),
        ));
        tasks.push(spawn_watch(
            Api::<core::Namespace>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.namespaces,
            |_, namespace| Ok(namespace_from_k8s(namespace)),
        ));
        tasks.push(spawn_watch(
            Api::<core::PersistentVolumeClaim>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.claims,
            |_, claim| pvc_from_k8s(claim).map(Arc::new),
        ));
        tasks.push(spawn_watch(
            Api::<core::PersistentVolume>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.volumes,
            |_, volume| pv_from_k8s(volume).map(Arc::new),
        ));
        tasks.push(spawn_watch(
            Api::<storage::StorageClass>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.storage_classes,
            |_, class| storage_class_from_k8s(class).map(Arc::new),
        ));
        tasks.push(spawn_watch(
            Api::<storage::CSINode>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.csi_nodes,
            |_, csi_node| csi_node_from_k8s(csi_node).map(Arc::new),
        ));
        tasks.push(spawn_watch(
            Api::<resource::ResourceSlice>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.resource_slices,
            |_, slice| resource_slice_from_k8s(slice).map(Arc::new),
        ));
        tasks.push(spawn_watch(
            Api::<resource::DeviceClass>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.device_classes,
            |_, class| device_class_from_k8s(class).map(Arc::new),
        ));
        tasks.push(spawn_watch(
            Api::<resource::ResourceClaim>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.resource_claims,
            |_, claim| resource_claim_from_k8s(claim).map(Arc::new),
        ));
        tasks.push(spawn_watch(
            Api::<resource::ResourceClaimTemplate>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.claim_templates,
            |_, template| resource_claim_template_from_k8s(template).map(Arc::new),
        ));
        tasks.push(spawn_watch_then(
            Api::<scheduling::PriorityClass>::all(client.clone()),
            all.clone(),
            &stores,
            |s| &s.priority_class_objects,
            |_, class| priority_class_from_k8s(class),
            Stores::rebuild_priority_classes,
        ));
        if config.capacity.pod_templates() {
            tasks.push(spawn_watch(
                Api::<core::PodTemplate>::all(client.clone()),
                all.clone(),
                &stores,
                |s| &s.pod_templates,
                |stores, template| {
                    pod_template_from_k8s(template, &stores.priority_classes()).map(Arc::new)
                },
            ));
        }
        if config.capacity.provisioning_requests {
            tasks.push(spawn_watch(
                Api::<provisioning_request::v1::ProvisioningRequest>::all(client.clone()),
                all.clone(),
                &stores,
                |s| &s.provisioning_requests,
                |_, request| provisioning_request_from_k8s(request).map(Arc::new),
            ));
        }
        if config.capacity.buffers {
            tasks.push(spawn_watch(
                Api::<capacity_buffer::v1beta1::CapacityBuffer>::all(client.clone()),
                all.clone(),
                &stores,
                |s| &s.buffers,
                |_, buffer| capacity_buffer_from_k8s(buffer).map(Arc::new),
            ));
        }
        if config.capacity.quotas {
            tasks.push(spawn_watch(
                Api::<capacity_quota::v1beta1::CapacityQuota>::all(client.clone()),
                all.clone(),
                &stores,
                |s| &s.quotas,
                |_, quota| capacity_quota_from_k8s(quota).map(Arc::new),
            ));
        }
        tasks.push(spawn_watch(
            Api::<core::ConfigMap>::namespaced(client, &config.autoscaler_namespace),
            watcher::Config::default().fields(&format!(
                "metadata.name={}",
                config.priority_expander_configmap
            )),
            &stores,
            |s| &s.priority_expander,
            |_, configmap| Ok(priority_expander_config(configmap)),
        ));

        ClusterCaches {
            stores,
            _tasks: Arc::new(WatcherTasks(tasks)),
        }
    }

    /// Every watcher has completed its first list (later re-lists keep serving the previous
    /// contents until they complete, so this stays true).
    pub fn synced(&self) -> bool {
        self.stores.summaries().iter().all(|(_, synced, _)| *synced)
    }

    /// The kinds left out now because the API server forbids this identity to read them
    /// (docs/behaviour.md LOOP-123).
    pub fn missing_permissions(&self) -> Vec<MissingPermission> {
        self.stores.missing_permissions()
    }

    /// How far every cache has got.
    pub fn progress(&self) -> SyncProgress {
        self.stores.progress()
    }

    /// The caches that may be behind the API server now (docs/behaviour.md LOOP-121).
    pub fn behind(&self) -> Vec<BehindCache> {
        self.stores.progress().behind()
    }

    /// Waits until [`ClusterCaches::synced`], saying every [`SYNC_PROGRESS_INTERVAL`] how far
    /// the caches have got (a warning while one of them fails, else at info level); fails after
    /// `timeout` with the same account.
    pub async fn wait_until_ready(&self, timeout: Duration) -> Result<(), NotSynced> {
        let server = describe_server(&self.stores.api_server);
        let started = Instant::now();
        let deadline = started + timeout;
        let mut next_report = started + SYNC_PROGRESS_INTERVAL;
        loop {
            if self.synced() {
                tracing::info!(
                    "watch caches synced with {server} after {:.1} s: {}",
                    started.elapsed().as_secs_f64(),
                    self.progress()
                );
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(NotSynced {
                    timeout,
                    api_server: self.stores.api_server.clone(),
                    progress: self.progress(),
                });
            }
            if now >= next_report {
                next_report = now + SYNC_PROGRESS_INTERVAL;
                let progress = self.progress();
                let waited = started.elapsed().as_secs();
                if progress.last_error().is_some() {
                    tracing::warn!(
                        "still waiting for the watch caches of {server} ({waited} s of {} s): {progress}",
                        timeout.as_secs()
                    );
                } else {
                    tracing::info!(
                        "still waiting for the watch caches of {server} ({waited} s of {} s): {progress}",
                        timeout.as_secs()
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(50).min(deadline - now)).await;
        }
    }

    /// How many objects currently in the cluster are left out of the model because they did not
    /// convert (each was logged when its event arrived).
    pub fn conversion_failures(&self) -> usize {
        self.stores.summaries().iter().map(|(_, _, n)| n).sum()
    }

    /// Everything one loop needs, from the caches.
    pub fn objects(&self) -> ClusterObjects {
        // Before anything is read: a cache that falls behind while the others are read is
        // caught by the next iteration.
        let behind = self.behind().iter().map(ToString::to_string).collect();
        let stores = &self.stores;
        let daemonsets = stores.daemonsets.values();
        let mut controllers: Vec<WorkloadController> = daemonsets
            .iter()
            .map(|ds| WorkloadController {
                kind: "DaemonSet".to_string(),
                namespace: ds.namespace.clone(),
                name: ds.name.clone(),
                uid: ds.uid.clone(),
                replicas: None,
            })
            .collect();
        for store in [
            &stores.replica_sets,
            &stores.stateful_sets,
            &stores.jobs,
            &stores.replication_controllers,
        ] {
            controllers.extend(store.values());
        }
        let missing_permissions = stores
            .missing_permissions()
            .iter()
            .map(ToString::to_string)
            .collect();
        ClusterObjects {
            behind,
            missing_permissions,
            nodes: stores.nodes.values(),
            pods: stores.pods.shared_values(),
            pdbs: stores.pdbs.values(),
            daemonsets,
            controllers,
            namespaces: stores.namespaces.values(),
            volumes: VolumeObjects {
                claims: stores.claims.values(),
                volumes: stores.volumes.values(),
                storage_classes: stores.storage_classes.values(),
                csi_nodes: stores.csi_nodes.values(),
            },
            dra: DraObjects {
                slices: stores.resource_slices.values(),
                classes: stores.device_classes.values(),
                claims: stores.resource_claims.values(),
                templates: stores.claim_templates.values(),
            },
            priority_expander_config: stores
                .priority_expander
                .values()
                .into_iter()
                .find_map(|priorities| priorities),
            // Scalable objects are resolved by `KubeCluster::gather`, which can ask the API server.
            capacity: CapacityObjects {
                pod_templates: stores.pod_templates.values(),
                provisioning_requests: stores.provisioning_requests.values(),
                buffers: stores.buffers.values(),
                scalables: Vec::new(),
                quotas: stores.quotas.values(),
            },
        }
    }

    /// The PriorityClasses pods are converted with.
    pub(crate) fn priority_classes(&self) -> PriorityClasses {
        self.stores.priority_classes().clone()
    }

    /// Every node, from the cache.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.stores.nodes.values()
    }

    /// A node by name, from the cache.
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        let state = self.stores.nodes.read();
        state.objects.values().find(|n| n.name == name).cloned()
    }

    /// The pods bound to `node`, from the cache.
    pub fn pods_on_node(&self, node: &str) -> Vec<Arc<Pod>> {
        let state = self.stores.pods.read();
        state
            .objects
            .values()
            .filter(|p| p.node_name.as_deref() == Some(node))
            .cloned()
            .collect()
    }

    /// Uids of the named pods (`namespace/name`) and nodes that the caches know, for events.
    pub(crate) fn uids(
        &self,
        pods: &[&str],
        nodes: &[&str],
    ) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let mut pod_uids = BTreeMap::new();
        if !pods.is_empty() {
            // Matched by (namespace, name) without formatting every cached pod's key: a loop's
            // events name a few pods, the cache holds tens of thousands.
            let wanted: std::collections::HashSet<(&str, &str)> =
                pods.iter().filter_map(|key| key.split_once('/')).collect();
            let state = self.stores.pods.read();
            for pod in state.objects.values() {
                if wanted.contains(&(pod.namespace.as_str(), pod.name.as_str())) {
                    pod_uids.insert(pod.key(), pod.uid.to_string());
                }
            }
        }
        let mut node_uids = BTreeMap::new();
        if !nodes.is_empty() {
            let state = self.stores.nodes.read();
            for node in state.objects.values() {
                if nodes.contains(&node.name.as_str()) {
                    node_uids.insert(node.name.clone(), node.uid.clone());
                }
            }
        }
        (pod_uids, node_uids)
    }

    /// Completes when the pod watch has reported an unbound pod that the scheduler marked
    /// `Unschedulable` less than [`FRESH_UNSCHEDULABLE`] ago (docs/behaviour.md LOOP-105). A report
    /// that arrives while nobody waits is kept, one at most, for the next call.
    pub async fn unschedulable_pod_seen(&self) {
        self.stores.unschedulable_pod.notified().await;
    }

    /// How many pods the pod watch has reported newly marked unschedulable, and when the latest
    /// was reported (docs/behaviour.md LOOP-105): the loop compares two readings to learn whether
    /// pods arrived in between, and batches them by time (LOOP-116–LOOP-118).
    pub fn unschedulable_arrivals(&self) -> UnschedulableArrivals {
        *self
            .stores
            .unschedulable_arrivals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Converts a pod read outside the watch (a live GET) with the cached priority classes.
    pub(crate) fn convert_pod(&self, pod: &core::Pod) -> Result<Pod, ConvertError> {
        pod_from_k8s(pod, &self.stores.priority_classes())
    }
}

/// How recent a pod's `PodScheduled=False/Unschedulable` transition must be to wake the loop:
/// older ones were already seen by an earlier iteration (docs/behaviour.md LOOP-105).
pub const FRESH_UNSCHEDULABLE: Duration = Duration::from_secs(10);

/// An unbound, live pod whose scheduling failed within [`FRESH_UNSCHEDULABLE`] of `now`. A
/// condition without a transition time counts as fresh: waking once too often costs one loop.
fn is_freshly_unschedulable(pod: &Pod, now: Timestamp) -> bool {
    if pod.is_bound() || pod.is_terminal() || !pod.is_marked_unschedulable() {
        return false;
    }
    let changed = pod
        .scheduled_condition
        .as_ref()
        .and_then(|condition| condition.last_transition);
    changed.is_none_or(|changed| now.since(changed) < FRESH_UNSCHEDULABLE)
}

/// The pods the pod watch reported newly marked unschedulable since the caches started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnschedulableArrivals {
    /// How many reports so far.
    pub count: u64,
    /// When the latest report arrived.
    pub latest: Option<std::time::Instant>,
}

/// Whether the cached version of a pod already carried the unschedulable verdict `updated` has:
/// the scheduler rewrites a pending pod's condition message as the cluster changes, and a pod
/// reported once must not keep a batch of the loop open (docs/behaviour.md LOOP-105).
fn same_unschedulable_verdict(cached: Option<&Pod>, updated: &Pod) -> bool {
    let transition = |pod: &Pod| {
        pod.scheduled_condition
            .as_ref()
            .map(|condition| condition.last_transition)
    };
    cached.is_some_and(|cached| {
        !cached.is_bound()
            && cached.is_marked_unschedulable()
            && transition(cached) == transition(updated)
    })
}

/// A workload controller as the drain rules see it.
fn controller<K: Resource<DynamicType = ()>>(
    object: &K,
    replicas: Option<i32>,
) -> WorkloadController {
    WorkloadController {
        kind: K::kind(&()).into_owned(),
        namespace: object.namespace().unwrap_or_default(),
        name: object.name_any(),
        uid: object.uid().unwrap_or_default(),
        replicas,
    }
}

fn spawn_watch<K, M>(
    api: Api<K>,
    config: watcher::Config,
    stores: &Arc<Stores>,
    store: fn(&Stores) -> &KindStore<M>,
    convert: fn(&Stores, &K) -> Result<M, ConvertError>,
) -> JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    M: Send + Sync + 'static,
{
    spawn_watch_then(api, config, stores, store, convert, |_| {})
}

/// Runs one watcher until aborted, applying each event to its store and then calling `after`.
fn spawn_watch_then<K, M>(
    api: Api<K>,
    config: watcher::Config,
    stores: &Arc<Stores>,
    store: fn(&Stores) -> &KindStore<M>,
    convert: fn(&Stores, &K) -> Result<M, ConvertError>,
    after: fn(&Stores),
) -> JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    M: Send + Sync + 'static,
{
    let stores = Arc::clone(stores);
    tokio::spawn(async move {
        let kind = store(&stores).kind;
        let mut events = std::pin::pin!(watch_stream(api, config));
        let mut retry = RetryDelay::default();
        // After a failure: whether the next attempt has yet to prove itself.
        let mut recovering = false;
        loop {
            let next = if recovering {
                // A quiet kind delivers no event once its watch is back, so an attempt that has
                // not failed for a while counts as running again. (`next` is cancel-safe: the
                // watcher keeps its attempt in progress.)
                match tokio::time::timeout(WATCH_RECOVERY_QUIET, events.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        recovering = false;
                        retry.reset();
                        report_resumed(&stores, kind, store(&stores).record_success());
                        continue;
                    }
                }
            } else {
                events.next().await
            };
            let Some(event) = next else { break };
            match event {
                Ok(event) => {
                    // `Init` only announces another list attempt; anything else means the API
                    // server answered.
                    let answered = !matches!(event, Event::Init);
                    if answered {
                        retry.reset();
                        recovering = false;
                        report_resumed(&stores, kind, store(&stores).record_success());
                    }
                    store(&stores).apply(event, |object| convert(&stores, object));
                    after(&stores);
                }
                // The watcher re-lists or resumes by itself at the next poll; the delay spaces
                // the attempts out.
                Err(error) if store(&stores).optional && is_not_served(&error) => {
                    if store(&stores).record_not_served() {
                        tracing::info!(
                            kind,
                            "{} does not serve {kind} ({}); taking it as none and asking again \
                             later",
                            describe_server(&stores.api_server),
                            store(&stores).api
                        );
                    }
                    tokio::time::sleep(retry.next_delay()).await;
                }
                Err(error) if is_forbidden(&error) && store(&stores).dispensable.is_some() => {
                    if store(&stores).record_forbidden() {
                        warn_forbidden(&stores, store(&stores));
                        after(&stores);
                    }
                    tokio::time::sleep(retry.next_delay()).await;
                }
                Err(error) => {
                    let error = error_chain(&error);
                    store(&stores).record_failure(&error);
                    log_watch_failure(&stores, kind, &error);
                    tokio::time::sleep(retry.next_delay()).await;
                    recovering = true;
                }
            }
        }
    })
}

/// After a failed watch, how long the next attempt must go without failing to count as running
/// again when no event arrives (the kind may simply not change).
const WATCH_RECOVERY_QUIET: Duration = Duration::from_secs(10);

/// Logs that a watch works again after `failed_attempts` (from `record_success`), if it had
/// failed.
fn report_resumed(stores: &Stores, kind: &'static str, failed_attempts: Option<u64>) {
    if let Some(attempts) = failed_attempts {
        tracing::info!(
            kind,
            "the watch of {} resumed after {attempts} failed attempts",
            describe_server(&stores.api_server)
        );
    }
}

/// Says once that the identity may not read a dispensable kind, what the engine does without it,
/// and what to grant.
fn warn_forbidden<M>(stores: &Stores, store: &KindStore<M>) {
    let Some(dispensable) = store.dispensable else {
        return;
    };
    tracing::warn!(
        kind = store.kind,
        "{} forbids this identity to list/watch {} (403); running without them: {}. Grant list \
         and watch on {} to restore it",
        describe_server(&stores.api_server),
        dispensable.resource,
        dispensable.lost,
        dispensable.resource
    );
}

/// The API server answered 403 to the list or watch: the identity may not read the kind.
fn is_forbidden(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 403,
        _ => false,
    }
}

/// The API server answered 404 to the list or watch: it does not serve the kind's API version.
fn is_not_served(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 404,
        _ => false,
    }
}

/// The wait before a failed watch is tried again: 800 ms doubling up to 30 s (kube-runtime's
/// default backoff), back to 800 ms once the API server answers. kube-runtime's own backoff
/// cannot be used as is: the watcher reports the start of every list attempt as an event, which
/// resets that backoff, so a watch against a server that refuses connections was retried every
/// 800 ms for ever — eleven watches, a dozen requests and log lines a second.
#[derive(Debug)]
struct RetryDelay {
    next: Duration,
}

impl RetryDelay {
    const FIRST: Duration = Duration::from_millis(800);
    const MAX: Duration = Duration::from_secs(30);

    fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        delay
    }

    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

impl Default for RetryDelay {
    fn default() -> Self {
        RetryDelay { next: Self::FIRST }
    }
}

/// The first failure of its text, then one line per window with the count of identical ones.
fn log_watch_failure(stores: &Stores, kind: &'static str, error: &str) {
    let server = describe_server(&stores.api_server);
    match stores.warnings.note(error, kind, Instant::now()) {
        Verdict::Log => tracing::warn!(kind, "watch of {server} failed; retrying: {error}"),
        Verdict::LogWithSummary(held_back) => {
            tracing::warn!(
                kind,
                "watch of {server} failed; retrying: {error} ({held_back})"
            )
        }
        Verdict::Suppress => tracing::debug!(kind, "watch of {server} failed; retrying: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::{ConditionStatus, PodCondition, PodPhase};

    fn unschedulable(changed: Option<Timestamp>) -> Pod {
        Pod {
            scheduled_condition: Some(Box::new(PodCondition {
                status: ConditionStatus::False,
                reason: "Unschedulable".to_string(),
                last_transition: changed,
            })),
            ..Pod::default()
        }
    }

    #[test]
    fn failed_watches_are_retried_less_and_less_often_until_the_server_answers() {
        let mut retry = RetryDelay::default();
        let delays: Vec<u64> = (0..8)
            .map(|_| retry.next_delay().as_millis() as u64)
            .collect();
        assert_eq!(
            delays,
            [800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000]
        );
        retry.reset();
        assert_eq!(retry.next_delay(), Duration::from_millis(800));
    }

    #[test]
    fn only_a_recent_unschedulable_verdict_on_a_live_unbound_pod_wakes_the_loop() {
        let now = Timestamp::from_secs(1_000);
        assert!(is_freshly_unschedulable(
            &unschedulable(Some(Timestamp::from_secs(995))),
            now
        ));
        assert!(is_freshly_unschedulable(&unschedulable(None), now));
        assert!(
            !is_freshly_unschedulable(&unschedulable(Some(Timestamp::from_secs(985))), now),
            "a verdict older than 10 s was seen by an earlier loop"
        );
        let mut bound = unschedulable(Some(now));
        bound.node_name = Some("n1".into());
        assert!(!is_freshly_unschedulable(&bound, now));
        let mut finished = unschedulable(Some(now));
        finished.phase = PodPhase::Failed;
        assert!(!is_freshly_unschedulable(&finished, now));
        let mut waiting = unschedulable(Some(now));
        waiting.scheduled_condition = None;
        assert!(!is_freshly_unschedulable(&waiting, now));
    }

    /// docs/behaviour.md LOOP-105: a pod is reported once per unschedulable verdict, not at each
    /// update of a pod the scheduler still cannot place.
    #[test]
    fn a_pod_already_seen_unschedulable_is_not_reported_again() {
        let verdict = unschedulable(Some(Timestamp::from_secs(995)));
        assert!(!same_unschedulable_verdict(None, &verdict), "a new pod");
        assert!(same_unschedulable_verdict(Some(&verdict), &verdict));
        let again = unschedulable(Some(Timestamp::from_secs(999)));
        assert!(
            !same_unschedulable_verdict(Some(&verdict), &again),
            "a new verdict after the pod was tried again"
        );
        let mut waiting = verdict.clone();
        waiting.scheduled_condition = None;
        assert!(!same_unschedulable_verdict(Some(&waiting), &verdict));
        let mut bound = verdict.clone();
        bound.node_name = Some("n1".into());
        assert!(!same_unschedulable_verdict(Some(&bound), &verdict));
    }

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: "the server could not find the requested resource".into(),
            ..kube::core::Status::failure("", "")
        }))
    }

    /// Only a 404 means "this API is not served"; a refused or failing request is a failure
    /// that must hold start-up back like any other kind's.
    #[test]
    fn only_a_404_answer_means_the_api_is_not_served() {
        assert!(is_not_served(&watcher::Error::InitialListFailed(
            api_error(404)
        )));
        assert!(is_not_served(&watcher::Error::WatchStartFailed(api_error(
            404
        ))));
        assert!(!is_not_served(&watcher::Error::InitialListFailed(
            api_error(403)
        )));
        assert!(!is_not_served(&watcher::Error::InitialListFailed(
            api_error(500)
        )));
        assert!(!is_not_served(&watcher::Error::NoResourceVersion));
    }

    fn slice(uid: &str) -> resource::ResourceSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "uid": uid},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        }))
        .expect("ResourceSlice")
    }

    /// A cluster without the DRA API starts: its DRA caches are synced and empty, the miss is
    /// news once, and the cache fills once the API answers.
    #[test]
    fn an_optional_kind_the_server_does_not_serve_is_synced_and_empty() {
        let store: KindStore<Arc<ResourceSlice>> = KindStore::optional("ResourceSlice");
        let convert = |s: &resource::ResourceSlice| resource_slice_from_k8s(s).map(Arc::new);
        store.apply(Event::Init, convert);
        assert!(!store.progress().synced);
        assert!(store.record_not_served(), "the first miss is logged");
        assert!(!store.record_not_served(), "later ones are not");
        let progress = store.progress();
        assert!(progress.synced);
        assert_eq!(progress.failing, None);
        assert!(store.values().is_empty());

        assert_eq!(store.record_success(), None);
        store.apply(Event::Init, convert);
        store.apply(Event::InitApply(slice("s1")), convert);
        store.apply(Event::InitDone, convert);
        let slices = store.values();
        assert_eq!(slices.len(), 1);
        assert_eq!(slices[0].devices[0].name, "gpu-0");
        assert!(store.record_not_served(), "served, then gone again: news");
        assert!(store.values().is_empty(), "a removed API holds no objects");
    }

    /// docs/behaviour.md LOOP-123: a 403 on a dispensable kind leaves it synced and empty, named
    /// as a missing permission until it can be read again; the kinds the engine cannot act
    /// without are not dispensable, so a 403 on them is an ordinary failure that holds start-up.
    #[test]
    fn a_dispensable_kind_the_identity_may_not_read_is_synced_empty_and_named() {
        let forbidden = |code| watcher::Error::InitialListFailed(api_error(code));
        assert!(is_forbidden(&forbidden(403)));
        assert!(!is_forbidden(&forbidden(404)));
        assert!(!is_forbidden(&forbidden(500)));
        assert!(is_forbidden(&watcher::Error::WatchStartFailed(api_error(
            403
        ))));

        let stores = Stores::new(String::new(), CapacityWatches::default());
        assert!(stores.nodes.dispensable.is_none());
        assert!(stores.pods.dispensable.is_none());
        assert!(stores.pdbs.dispensable.is_none());
        assert!(
            stores.quotas.dispensable.is_none(),
            "an unread quota is not enforced"
        );
        let store = &stores.priority_class_objects;
        assert!(!store.progress().synced);
        assert!(
            store.record_forbidden(),
            "the first refusal is warned about"
        );
        assert!(!store.record_forbidden(), "later ones are not");
        assert!(store.progress().synced);
        let missing = stores.missing_permissions();
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert_eq!(missing[0].resource, "priorityclasses.scheduling.k8s.io");
        assert!(
            missing[0]
                .to_string()
                .starts_with("list/watch priorityclasses.scheduling.k8s.io: "),
            "{}",
            missing[0]
        );
        stores.rebuild_priority_classes();
        assert!(stores.priority_classes().is_incomplete());
        // The watcher's next attempt announces a list; the empty kind is still not behind, or
        // scale-down would never run under such an identity.
        let convert = |c: &scheduling::PriorityClass| priority_class_from_k8s(c);
        store.apply(Event::Init, convert);
        assert!(
            stores.progress().behind().is_empty(),
            "{:?}",
            stores.progress()
        );

        // Granted later: the next answer puts it back.
        store.record_success();
        assert!(stores.missing_permissions().is_empty());
        stores.rebuild_priority_classes();
        assert!(!stores.priority_classes().is_incomplete());
    }

    /// docs/behaviour.md LOOP-121: a synced cache is behind while its watch fails and while it
    /// re-lists after losing its watch (serving its old contents meanwhile); a cache that never
    /// synced is the start-up's business, not behind.
    #[test]
    fn a_synced_cache_is_behind_while_its_watch_fails_or_it_relists() {
        let store: KindStore<Arc<ResourceSlice>> = KindStore::new("ResourceSlice");
        let convert = |s: &resource::ResourceSlice| resource_slice_from_k8s(s).map(Arc::new);
        let behind =
            |store: &KindStore<Arc<ResourceSlice>>| SyncProgress(vec![store.progress()]).behind();
        store.record_failure("connection refused");
        assert!(behind(&store).is_empty(), "not synced yet: not behind");
        store.apply(Event::Init, convert);
        store.apply(Event::InitApply(slice("s1")), convert);
        store.apply(Event::InitDone, convert);
        assert_eq!(store.record_success(), Some(1));
        assert!(behind(&store).is_empty(), "synced and watching");

        store.record_failure("503 Service Unavailable");
        assert_eq!(
            behind(&store),
            vec![BehindCache {
                kind: "ResourceSlice",
                reason: "watch failing: 503 Service Unavailable".to_string()
            }]
        );
        // The watch comes back with a new list: behind until it is complete, and the old
        // contents are served meanwhile.
        store.record_success();
        store.apply(Event::Init, convert);
        store.apply(Event::InitApply(slice("s2")), convert);
        assert_eq!(
            behind(&store)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec!["ResourceSlice: re-listing after a lost watch"]
        );
        assert_eq!(store.values().len(), 1);
        store.apply(Event::InitDone, convert);
        assert!(behind(&store).is_empty());
    }

    /// docs/behaviour.md LOOP-124: while nothing is written to a cache, every loop gets the same
    /// shared list (nothing copied, and the kept snapshot sees at once that nothing changed);
    /// any event, a deletion or a re-list included, gives the next loop a new list with it.
    #[test]
    fn a_quiet_cache_hands_out_the_same_list_and_a_write_a_new_one() {
        let store: KindStore<Arc<ResourceSlice>> = KindStore::new("ResourceSlice");
        let convert = |s: &resource::ResourceSlice| resource_slice_from_k8s(s).map(Arc::new);
        store.apply(Event::Init, convert);
        store.apply(Event::InitApply(slice("s1")), convert);
        store.apply(Event::InitDone, convert);
        let first = store.shared_values();
        let again = store.shared_values();
        assert!(
            Arc::ptr_eq(&first, &again),
            "nothing written: the same list"
        );
        assert_eq!(first.len(), 1);

        store.apply(Event::Apply(slice("s2")), convert);
        let applied = store.shared_values();
        assert!(!Arc::ptr_eq(&first, &applied));
        assert_eq!(applied.len(), 2);
        assert_eq!(first.len(), 1, "a list handed out never changes");

        store.apply(Event::Delete(slice("s1")), convert);
        let deleted = store.shared_values();
        assert_eq!(
            deleted.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            vec!["s2"]
        );
        store.apply(Event::Init, convert);
        store.apply(Event::InitApply(slice("s3")), convert);
        store.apply(Event::InitDone, convert);
        let relisted = store.shared_values();
        assert_eq!(
            relisted.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            vec!["s3"]
        );
        assert!(Arc::ptr_eq(&relisted, &store.shared_values()));
    }

    /// A capacity kind whose feature is off is never watched, and must not hold up the first sync.
    #[test]
    fn capacity_kinds_are_synced_and_empty_while_their_features_are_off() {
        let off = Stores::new(String::new(), CapacityWatches::default());
        for store in [off.provisioning_requests.progress(), off.buffers.progress()] {
            assert!(store.synced && store.objects == 0, "{store:?}");
        }
        assert!(off.quotas.progress().synced && off.pod_templates.progress().synced);
        let on = Stores::new(
            String::new(),
            CapacityWatches {
                provisioning_requests: true,
                buffers: false,
                quotas: true,
            },
        );
        assert!(!on.provisioning_requests.progress().synced);
        assert!(
            !on.pod_templates.progress().synced,
            "requests need PodTemplates"
        );
        assert!(!on.quotas.progress().synced);
        assert!(on.buffers.progress().synced);
    }

    fn priority_configmap(priorities: &str) -> core::ConfigMap {
        core::ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("cluster-autoscaler-priority-expander".into()),
                namespace: Some("kube-system".into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                PRIORITY_EXPANDER_KEY.to_string(),
                priorities.to_string(),
            )])),
            ..Default::default()
        }
    }

    /// Loops read the configuration parsed when the ConfigMap arrived: the same parsed value until
    /// the ConfigMap changes, then the new one.
    #[test]
    fn the_priority_config_is_parsed_per_configmap_version_not_per_loop() {
        let store: KindStore<Option<Arc<PriorityConfig>>> = KindStore::new("ConfigMap");
        let convert = |cm: &core::ConfigMap| Ok(priority_expander_config(cm));
        store.apply(Event::Apply(priority_configmap("10:\n  - .*\n")), convert);
        let first_loop = store.values().into_iter().flatten().next();
        let second_loop = store.values().into_iter().flatten().next();
        let (Some(first), Some(second)) = (first_loop, second_loop) else {
            panic!("the ConfigMap is cached");
        };
        assert!(Arc::ptr_eq(&first, &second), "not parsed again");
        assert_eq!(first.text(), "10:\n  - .*\n");

        store.apply(
            Event::Apply(priority_configmap("10: ['(unclosed']")),
            convert,
        );
        let changed = store.values().into_iter().flatten().next();
        let Some(changed) = changed else {
            panic!("a malformed ConfigMap stays in the cache for the expander to report");
        };
        assert!(!Arc::ptr_eq(&first, &changed));
        assert!(changed.error().is_some());
    }
}
