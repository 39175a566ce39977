//! Drives the real kube-scheduler on the test control plane: applies a generated case, creates its
//! pending pods one at a time, reads each one's outcome, and judges it against Ferroscale's
//! verdict on the cluster as it was at that moment.
//!
//! A pod left unschedulable is deleted once observed, so it cannot be bound later behind the
//! runner's back when the cluster changes: every pod after it sees exactly the pods bound so far.
//! The control plane runs without a controller manager and without kwok: nothing else writes to
//! nodes or pods (no not-ready taints, no evictions), and deleted objects go at once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::node::v1::{Overhead, RuntimeClass};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use crate::generate::{Case, GeneratorSettings, OWNER_ANNOTATION, RUNTIME_CLASS, owner_reference};
use crate::verdict::{
    Disagreement, Observation, Outcome, compare, ferroscale_verdicts, message_counts_all_nodes,
    parse_scheduler_message,
};

/// How long the scheduler may take to decide on one pod, or a deletion to be done.
const DECISION_LIMIT: Duration = Duration::from_secs(60);
/// Time for the scheduler's informers to deliver a case's nodes and running pods before the first
/// pending pod (nodes and pods arrive on different watches).
const SETTLE: Duration = Duration::from_millis(500);
const POLL: Duration = Duration::from_millis(50);
/// The claim annotation naming the node the scheduler chose for a WaitForFirstConsumer claim.
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// A family of cases: one scheduler configuration given to both sides, and generator settings.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    /// The KubeSchedulerConfiguration for kube-scheduler's `--config` and Ferroscale's parser;
    /// `None` runs both with their defaults.
    pub scheduler_config: Option<&'static str>,
    pub settings: GeneratorSettings,
}

/// The scheduler's default profile.
pub const DEFAULT_PROFILE: Family = Family {
    name: "default-profile",
    scheduler_config: None,
    settings: GeneratorSettings {
        owned_pod_probability: 0.2,
        volumes: false,
        dra: false,
    },
};

/// The default profile with storage in every case: bound claims with zonal and node-local
/// volumes, WaitForFirstConsumer classes with allowed topologies, unbound Immediate claims,
/// missing claims, ReadWriteOncePod and per-node CSI volume limits.
pub const VOLUMES: Family = Family {
    name: "volumes",
    scheduler_config: None,
    settings: GeneratorSettings {
        owned_pod_probability: 0.2,
        volumes: true,
        dra: false,
    },
};

/// The default profile with devices in every case: GPUs on most nodes with CEL-selected models
/// and memory, FPGAs reachable from one zone or from every node, and pods claiming devices by
/// count, all of a class, or the first available alternative, alone or through a shared claim.
pub const DRA: Family = Family {
    name: "dra",
    scheduler_config: None,
    settings: GeneratorSettings {
        owned_pod_probability: 0.2,
        volumes: false,
        dra: true,
    },
};

/// A profile without the TaintToleration filter, with a hard zone spread default for controlled
/// pods (`defaultingType: List`), and with NodeResourcesFit ignoring one extended resource.
pub const CONFIGURED_PROFILE: Family = Family {
    name: "configured-profile",
    scheduler_config: Some(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter:
      disabled:
      - name: TaintToleration
  pluginConfig:
  - name: PodTopologySpread
    args:
      defaultingType: List
      defaultConstraints:
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: DoNotSchedule
  - name: NodeResourcesFit
    args:
      ignoredResources:
      - example.com/foo
",
    ),
    settings: GeneratorSettings {
        owned_pod_probability: 0.6,
        volumes: false,
        dra: false,
    },
};

/// Why a case could not be run (the harness, not a verdict).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("Kubernetes API: {action}: {source}")]
    Api {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error("timed out after {DECISION_LIMIT:?} waiting until {0}")]
    Timeout(String),
    #[error("Ferroscale could not judge pod {pod} of case {case}: {source}")]
    Verdict {
        case: u32,
        pod: String,
        #[source]
        source: crate::verdict::VerdictError,
    },
}

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> RunError {
    let action = action.into();
    move |source| RunError::Api { action, source }
}

/// What one case (or a whole run) produced.
#[derive(Debug, Default)]
pub struct Tally {
    pub cases: usize,
    pub pods: usize,
    pub bound: usize,
    pub unschedulable: usize,
    /// Pods whose outcome the scheduler reached before it had seen the whole case (not judged).
    pub races: usize,
    /// How often kube-scheduler gave each reason (summed over nodes of unschedulable pods): which
    /// filters the run exercised.
    pub reasons: BTreeMap<String, usize>,
    pub disagreements: Vec<Disagreement>,
}

impl Tally {
    pub fn add(&mut self, other: Tally) {
        self.cases += other.cases;
        self.pods += other.pods;
        self.bound += other.bound;
        self.unschedulable += other.unschedulable;
        self.races += other.races;
        for (reason, count) in other.reasons {
            *self.reasons.entry(reason).or_default() += count;
        }
        self.disagreements.extend(other.disagreements);
    }
}

/// Runs cases of one family against one control plane.
pub struct Runner {
    client: Client,
    family: Family,
}

impl Runner {
    /// Connects and creates what every case shares (the RuntimeClass with overhead).
    pub async fn new(client: Client, family: Family) -> Result<Runner, RunError> {
        let runtime_classes: Api<RuntimeClass> = Api::all(client.clone());
        let class = RuntimeClass {
            metadata: ObjectMeta {
                name: Some(RUNTIME_CLASS.into()),
                ..ObjectMeta::default()
            },
            handler: "runc".into(),
            overhead: Some(Overhead {
                pod_fixed: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity("250m".into())),
                    ("memory".to_string(), Quantity("128Mi".into())),
                ])),
            }),
            scheduling: None,
        };
        match runtime_classes.create(&PostParams::default(), &class).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(source) => return Err(api_error("create the RuntimeClass")(source)),
        }
        Ok(Runner { client, family })
    }

    /// Applies the case, schedules its pending pods one at a time, judges each, and removes the
    /// case's objects.
    pub async fn run(&self, case: &Case) -> Result<Tally, RunError> {
        let result = self.run_inner(case).await;
        let cleanup = self.clean_up(case).await;
        let tally = result?;
        cleanup?;
        Ok(tally)
    }

    async fn run_inner(&self, case: &Case) -> Result<Tally, RunError> {
        let post = PostParams::default();
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        for namespace in &case.namespaces {
            namespaces
                .create(&post, namespace)
                .await
                .map_err(api_error("create a namespace"))?;
        }
        let mut owners = BTreeMap::new();
        for replica_set in &case.replica_sets {
            let ns = replica_set
                .metadata
                .namespace
                .as_deref()
                .unwrap_or_default();
            let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), ns);
            let created = api
                .create(&post, replica_set)
                .await
                .map_err(api_error("create a ReplicaSet"))?;
            owners.insert(
                created.metadata.name.clone().unwrap_or_default(),
                created.metadata.uid.clone().unwrap_or_default(),
            );
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        for node in &case.nodes {
            nodes
                .create(&post, node)
                .await
                .map_err(api_error("create a node"))?;
            // The API server's admission taints every new node not-ready; the node lifecycle
            // controller (not running here) removes the taint once the kubelet reports Ready.
            // Setting the generated taints back stands in for it.
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let taints = node.spec.as_ref().and_then(|s| s.taints.clone());
            let patch = serde_json::json!({ "spec": { "taints": taints } });
            nodes
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api_error(format!("reset the taints of node {name}")))?;
        }
        self.create_storage(case).await?;
        self.create_devices(case).await?;
        for pod in &case.running {
            let pod = with_owner(pod, &owners);
            self.pods(&pod)
                .create(&post, &pod)
                .await
                .map_err(api_error("create a running pod"))?;
        }
        tokio::time::sleep(SETTLE).await;

        let mut tally = Tally {
            cases: 1,
            ..Tally::default()
        };
        for pending in &case.pending {
            let pod = with_owner(pending, &owners);
            let api = self.pods(&pod);
            let stored = api
                .create(&post, &pod)
                .await
                .map_err(api_error("create a pending pod"))?;
            let name = stored.metadata.name.clone().unwrap_or_default();
            let claims = claim_names(&stored);
            let mut outcome = self.outcome(&api, &name, &claims).await?;
            let mut observation = self.observe(case, stored.clone(), outcome.clone()).await?;
            // The scheduler counted fewer nodes than the case has: it decided before its informers
            // delivered the whole case. It retries when they do; give it the chance once.
            if !message_counts_all_nodes(&observation) {
                tokio::time::sleep(Duration::from_secs(2)).await;
                outcome = self.outcome(&api, &name, &claims).await?;
                observation = self.observe(case, stored, outcome.clone()).await?;
            }
            tally.pods += 1;
            match &outcome {
                Outcome::Bound(_) => {
                    tally.bound += 1;
                    // A pod whose claim waits for provisioning stays in the scheduler's PreBind
                    // (no provisioner runs here) and is never bound: it goes, as if it had failed.
                    if !claims.is_empty() && !self.is_bound(&api, &name).await? {
                        self.delete_pod(&api, &name).await?;
                    }
                }
                Outcome::Unschedulable(message) => {
                    tally.unschedulable += 1;
                    for (reason, count) in parse_scheduler_message(message)
                        .map(|counts| counts.reasons)
                        .unwrap_or_default()
                    {
                        *tally.reasons.entry(reason).or_default() += count;
                    }
                    self.delete_pod(&api, &name).await?;
                }
            }
            if !message_counts_all_nodes(&observation) {
                tally.races += 1;
                continue;
            }
            let verdicts =
                ferroscale_verdicts(&observation).map_err(|source| RunError::Verdict {
                    case: case.index,
                    pod: name.clone(),
                    source,
                })?;
            if let Err(problem) = compare(&observation, &verdicts) {
                tally.disagreements.push(Disagreement {
                    observation,
                    ferroscale: verdicts,
                    problem,
                });
            }
        }
        Ok(tally)
    }

    fn pods(&self, pod: &Pod) -> Api<Pod> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        Api::namespaced(self.client.clone(), ns)
    }

    async fn is_bound(&self, api: &Api<Pod>, name: &str) -> Result<bool, RunError> {
        let pod = api
            .get(name)
            .await
            .map_err(api_error(format!("read pod {name}")))?;
        Ok(pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some())
    }

    /// Waits until the pod is bound, one of its claims is given the scheduler's node to provision
    /// for (`volume.kubernetes.io/selected-node`, set in PreBind once the node is chosen), or the
    /// pod is marked unschedulable.
    async fn outcome(
        &self,
        api: &Api<Pod>,
        name: &str,
        claims: &[String],
    ) -> Result<Outcome, RunError> {
        let start = Instant::now();
        let namespace = api.namespace().unwrap_or("default").to_string();
        let claims_api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &namespace);
        while start.elapsed() < DECISION_LIMIT {
            let pod = api
                .get(name)
                .await
                .map_err(api_error(format!("read pod {name}")))?;
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                return Ok(Outcome::Bound(node));
            }
            for claim in claims {
                let selected = claims_api
                    .get_opt(claim)
                    .await
                    .map_err(api_error(format!("read claim {claim}")))?
                    .and_then(|c| c.metadata.annotations)
                    .and_then(|a| a.get(SELECTED_NODE).cloned());
                if let Some(node) = selected {
                    return Ok(Outcome::Bound(node));
                }
            }
            let unschedulable = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .find(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                });
            if let Some(condition) = unschedulable {
                return Ok(Outcome::Unschedulable(
                    condition.message.clone().unwrap_or_default(),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
        Err(RunError::Timeout(format!(
            "kube-scheduler decided on pod {name}"
        )))
    }

    /// The cluster as the scheduler saw it for `pod`: every node, every namespace, and the pods
    /// bound before it.
    async fn observe(
        &self,
        case: &Case,
        pod: Pod,
        outcome: Outcome,
    ) -> Result<Observation, RunError> {
        let lp = ListParams::default();
        let nodes = Api::<Node>::all(self.client.clone())
            .list(&lp)
            .await
            .map_err(api_error("list nodes"))?
            .items;
        // Only the case's namespaces hold pods, so only their labels can matter to a
        // namespaceSelector; the others (earlier cases', kube-system, ...) are left out.
        let case_namespaces: Vec<Option<String>> = case
            .namespaces
            .iter()
            .map(|n| n.metadata.name.clone())
            .collect();
        let namespaces = Api::<Namespace>::all(self.client.clone())
            .list(&lp)
            .await
            .map_err(api_error("list namespaces"))?
            .items
            .into_iter()
            .filter(|n| case_namespaces.contains(&n.metadata.name))
            .collect();
        let name = pod.metadata.name.clone();
        let namespace = pod.metadata.namespace.clone();
        let mut bound_pods = Vec::new();
        for ns in &case.namespaces {
            let ns = ns.metadata.name.as_deref().unwrap_or_default();
            let pods = Api::<Pod>::namespaced(self.client.clone(), ns)
                .list(&lp)
                .await
                .map_err(api_error("list pods"))?
                .items;
            bound_pods.extend(pods.into_iter().filter(|p| {
                p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
                    && !(p.metadata.name == name && p.metadata.namespace == namespace)
            }));
        }
        let prefix = format!("c{}-", case.index);
        let ours = |name: &Option<String>| name.as_deref().is_some_and(|n| n.starts_with(&prefix));
        let storage_classes = Api::<StorageClass>::all(self.client.clone())
            .list(&lp)
            .await
            .map_err(api_error("list storage classes"))?
            .items
            .into_iter()
            .filter(|c| ours(&c.metadata.name))
            .collect();
        let volumes = Api::<PersistentVolume>::all(self.client.clone())
            .list(&lp)
            .await
            .map_err(api_error("list volumes"))?
            .items
            .into_iter()
            .filter(|v| ours(&v.metadata.name))
            .collect();
        let csi_nodes = Api::<CSINode>::all(self.client.clone())
            .list(&lp)
            .await
            .map_err(api_error("list CSINodes"))?
            .items
            .into_iter()
            .filter(|c| ours(&c.metadata.name))
            .collect();
        let mut claims = Vec::new();
        for ns in &case.namespaces {
            let ns = ns.metadata.name.as_deref().unwrap_or_default();
            claims.extend(
                Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), ns)
                    .list(&lp)
                    .await
                    .map_err(api_error("list claims"))?
                    .items,
            );
        }
        let device_classes = Api::<DeviceClass>::all(self.client.clone())
            .list(&lp)
            .await
            .map_err(api_error("list device classes"))?
            .items
            .into_iter()
            .filter(|c| ours(&c.metadata.name))
            .collect();
        // Slices are named after their node or the case: both start with the case's prefix.
        let resource_slices = Api::<ResourceSlice>::all(self.client.clone())
            .list(&lp)
            .await
            .map_err(api_error("list resource slices"))?
            .items
            .into_iter()
            .filter(|s| ours(&s.metadata.name))
            .collect();
        let mut resource_claims = Vec::new();
        for ns in &case.namespaces {
            let ns = ns.metadata.name.as_deref().unwrap_or_default();
            resource_claims.extend(
                Api::<ResourceClaim>::namespaced(self.client.clone(), ns)
                    .list(&lp)
                    .await
                    .map_err(api_error("list resource claims"))?
                    .items,
            );
        }
        Ok(Observation {
            device_classes,
            resource_slices,
            resource_claims,
            storage_classes,
            volumes,
            claims,
            csi_nodes,
            seed: case.seed,
            case: case.index,
            family: self.family.name.to_string(),
            scheduler_config: self.family.scheduler_config.map(str::to_string),
            namespaces,
            nodes,
            bound_pods,
            pod,
            outcome,
        })
    }

    async fn delete_pod(&self, api: &Api<Pod>, name: &str) -> Result<(), RunError> {
        let now = DeleteParams::default().grace_period(0);
        match api.delete(name, &now).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(source) => return Err(api_error(format!("delete pod {name}"))(source)),
        }
        let start = Instant::now();
        while start.elapsed() < DECISION_LIMIT {
            match api.get_opt(name).await {
                Ok(None) => return Ok(()),
                Ok(Some(_)) => tokio::time::sleep(POLL).await,
                Err(source) => return Err(api_error(format!("read pod {name}"))(source)),
            }
        }
        Err(RunError::Timeout(format!("pod {name} was deleted")))
    }

    /// Creates the case's storage classes, volumes, claims and CSINodes, and marks each bound
    /// volume/claim pair Bound as the volume controller (not running here) would.
    async fn create_storage(&self, case: &Case) -> Result<(), RunError> {
        let post = PostParams::default();
        let storage = &case.storage;
        let classes: Api<StorageClass> = Api::all(self.client.clone());
        for class in &storage.classes {
            classes
                .create(&post, class)
                .await
                .map_err(api_error("create a storage class"))?;
        }
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        for volume in &storage.volumes {
            let name = volume.metadata.name.as_deref().unwrap_or_default();
            volumes
                .create(&post, volume)
                .await
                .map_err(api_error(format!("create volume {name}")))?;
            let status = serde_json::json!({ "status": { "phase": "Bound" } });
            volumes
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .map_err(api_error(format!("mark volume {name} Bound")))?;
        }
        for claim in &storage.claims {
            let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
            let name = claim.metadata.name.as_deref().unwrap_or_default();
            let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
            api.create(&post, claim)
                .await
                .map_err(api_error(format!("create claim {ns}/{name}")))?;
            let spec = claim.spec.as_ref();
            if spec.and_then(|s| s.volume_name.as_ref()).is_some() {
                let status = serde_json::json!({ "status": {
                    "phase": "Bound",
                    "accessModes": spec.and_then(|s| s.access_modes.clone()),
                    "capacity": { "storage": "1Gi" },
                } });
                api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .map_err(api_error(format!("mark claim {ns}/{name} Bound")))?;
            }
        }
        let csi_nodes: Api<CSINode> = Api::all(self.client.clone());
        for csi_node in &storage.csi_nodes {
            csi_nodes
                .create(&post, csi_node)
                .await
                .map_err(api_error("create a CSINode"))?;
        }
        Ok(())
    }

    /// Creates the case's device classes, resource slices and resource claims.
    async fn create_devices(&self, case: &Case) -> Result<(), RunError> {
        let post = PostParams::default();
        let devices = &case.devices;
        let classes: Api<DeviceClass> = Api::all(self.client.clone());
        for class in &devices.classes {
            classes
                .create(&post, class)
                .await
                .map_err(api_error("create a device class"))?;
        }
        let slices: Api<ResourceSlice> = Api::all(self.client.clone());
        for slice in &devices.slices {
            slices
                .create(&post, slice)
                .await
                .map_err(api_error("create a resource slice"))?;
        }
        for claim in &devices.claims {
            let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
            let name = claim.metadata.name.as_deref().unwrap_or_default();
            Api::<ResourceClaim>::namespaced(self.client.clone(), ns)
                .create(&post, claim)
                .await
                .map_err(api_error(format!("create resource claim {ns}/{name}")))?;
        }
        Ok(())
    }

    /// Deletes the case's DRA objects; the scheduler's delete protection on allocated claims
    /// (removed by the controller manager, not running here) is dropped first.
    async fn delete_devices(&self, case: &Case) -> Result<(), RunError> {
        let dp = DeleteParams::default();
        for claim in &case.devices.claims {
            let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
            let name = claim.metadata.name.as_deref().unwrap_or_default();
            let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), ns);
            unprotect_and_delete(&api, name, &format!("resource claim {ns}/{name}")).await?;
        }
        let slices: Api<ResourceSlice> = Api::all(self.client.clone());
        for slice in &case.devices.slices {
            let name = slice.metadata.name.as_deref().unwrap_or_default();
            ignore_missing(slices.delete(name, &dp).await)
                .map_err(api_error("delete a resource slice"))?;
        }
        let classes: Api<DeviceClass> = Api::all(self.client.clone());
        for class in &case.devices.classes {
            let name = class.metadata.name.as_deref().unwrap_or_default();
            ignore_missing(classes.delete(name, &dp).await)
                .map_err(api_error("delete a device class"))?;
        }
        Ok(())
    }

    /// Deletes the case's storage; the protection finalizers (removed by controllers that do not
    /// run here) are dropped first.
    async fn delete_storage(&self, case: &Case) -> Result<(), RunError> {
        let dp = DeleteParams::default();
        for claim in &case.storage.claims {
            let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
            let name = claim.metadata.name.as_deref().unwrap_or_default();
            let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
            unprotect_and_delete(&api, name, &format!("claim {ns}/{name}")).await?;
        }
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        for volume in &case.storage.volumes {
            let name = volume.metadata.name.as_deref().unwrap_or_default();
            unprotect_and_delete(&volumes, name, &format!("volume {name}")).await?;
        }
        let classes: Api<StorageClass> = Api::all(self.client.clone());
        for class in &case.storage.classes {
            let name = class.metadata.name.as_deref().unwrap_or_default();
            ignore_missing(classes.delete(name, &dp).await)
                .map_err(api_error("delete a storage class"))?;
        }
        let csi_nodes: Api<CSINode> = Api::all(self.client.clone());
        for csi_node in &case.storage.csi_nodes {
            let name = csi_node.metadata.name.as_deref().unwrap_or_default();
            ignore_missing(csi_nodes.delete(name, &dp).await)
                .map_err(api_error("delete a CSINode"))?;
        }
        Ok(())
    }

    /// Deletes the case's pods and nodes (at once, no grace) and its ReplicaSets. Namespaces stay
    /// Terminating without a controller manager; they are empty and named per case.
    async fn clean_up(&self, case: &Case) -> Result<(), RunError> {
        for namespace in &case.namespaces {
            let ns = namespace.metadata.name.as_deref().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            let pods = api
                .list(&ListParams::default())
                .await
                .map_err(api_error("list pods to delete"))?;
            for pod in pods.items {
                let name = pod.metadata.name.unwrap_or_default();
                self.delete_pod(&api, &name).await?;
            }
            let replica_sets: Api<ReplicaSet> = Api::namespaced(self.client.clone(), ns);
            for rs in &case.replica_sets {
                if rs.metadata.namespace.as_deref() == Some(ns) {
                    let name = rs.metadata.name.as_deref().unwrap_or_default();
                    ignore_missing(replica_sets.delete(name, &DeleteParams::default()).await)
                        .map_err(api_error("delete a ReplicaSet"))?;
                }
            }
            let namespaces: Api<Namespace> = Api::all(self.client.clone());
            ignore_missing(namespaces.delete(ns, &DeleteParams::default()).await)
                .map_err(api_error("delete a namespace"))?;
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        for node in &case.nodes {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            ignore_missing(nodes.delete(name, &DeleteParams::default()).await)
                .map_err(api_error("delete a node"))?;
        }
        self.delete_storage(case).await?;
        self.delete_devices(case).await?;
        // Let the scheduler's informers drop the case before the next one arrives.
        tokio::time::sleep(SETTLE).await;
        Ok(())
    }
}

/// The pod with the owner reference its generator annotation asks for, now that the ReplicaSets
/// (and their uids) exist.
fn with_owner(pod: &Pod, owners: &BTreeMap<String, String>) -> Pod {
    let mut pod = pod.clone();
    if let Some(owner) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(OWNER_ANNOTATION))
        .cloned()
    {
        let uid = owners.get(&owner).cloned().unwrap_or_default();
        pod.metadata.owner_references = Some(vec![owner_reference(&owner, &uid)]);
    }
    pod
}

/// The claims a pod's volumes name.
fn claim_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect()
}

/// Deletes an object whose finalizers a controller that does not run here would remove (claim
/// and volume protection, the scheduler's delete protection of allocated ResourceClaims): they
/// are dropped first. A missing object is already gone.
async fn unprotect_and_delete<K>(api: &Api<K>, name: &str, what: &str) -> Result<(), RunError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let unprotect = serde_json::json!({ "metadata": { "finalizers": null } });
    ignore_missing(
        api.patch(name, &PatchParams::default(), &Patch::Merge(&unprotect))
            .await,
    )
    .map_err(api_error(format!("unprotect {what}")))?;
    ignore_missing(api.delete(name, &DeleteParams::default()).await)
        .map_err(api_error(format!("delete {what}")))
}

fn ignore_missing<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error),
    }
}
