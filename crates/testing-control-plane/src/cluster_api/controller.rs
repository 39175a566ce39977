//! A stand-in for Cluster API's controllers in tests: keeps Machines and kwok Nodes in step with the
//! replicas of MachineDeployments, MachineSets and MachinePools, the way the real controllers and an
//! infrastructure provider would, so the autoscaler's Cluster API provider can be tested end to end
//! against a real API server.
//!
//! It polls every 200 ms (no watch machinery, simplicity first), works with any group and version,
//! and with the management and workload clusters on one API server or on two. Odd objects and
//! failed requests are logged to stderr and retried on the next pass; the controller never panics.
//!
//! What it does, per pass:
//! - MachineDeployment (when served): owns one MachineSet named `<md>-ms` (label
//!   `cluster.x-k8s.io/deployment-name`, revision annotation one above any other MachineSet of the
//!   deployment, same selector, template and cluster name) whose replicas follow the deployment's.
//!   Other MachineSets (old revisions a test made by hand) are left alone.
//! - MachineSet: keeps the count of its live Machines equal to `spec.replicas`; scale-down removes
//!   Machines annotated `<group>/delete-machine` first, then the newest.
//! - Machine (only those it created, which carry its finalizer): creates a kwok Node named after the
//!   Machine, then sets `spec.providerID` and `status.nodeRef`/`status.phase: Running`. A deleted
//!   Machine's Node is deleted before the finalizer is removed, so "deleting" is observable.
//! - MachinePool (when served): keeps kwok Nodes named `<pool>-<n>` and `spec.providerIDList` in
//!   step with `spec.replicas`.
//!
//! Knobs, as annotations on the MachineSet or its MachineDeployment (the MachineSet's win):
//! [`PROVISIONING_DELAY_ANNOTATION`], [`OMIT_PROVIDER_ID_ANNOTATION`],
//! [`FAIL_PROVISIONING_ANNOTATION`]. Node capacity comes from the
//! `capacity.cluster-autoscaler.kubernetes.io/{cpu,memory,maxPods}` annotations of the same
//! objects (or the MachinePool), else 4 CPU, 16Gi and 110 pods.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{
    CAPACITY_ANNOTATION_PREFIX, ClusterApi, ClusterApiError, ClusterApiKind, DEPLOYMENT_NAME_LABEL,
    REVISION_ANNOTATION, api_error,
};
use crate::{FAKE_NODE_ANNOTATION_KEY, FAKE_NODE_ANNOTATION_VALUE};

/// On a MachineSet or MachineDeployment: how long a new Machine stays without a Node (phase
/// `Provisioning`, no `status.nodeRef`), as `500ms`, `5s` or a number of seconds.
pub const PROVISIONING_DELAY_ANNOTATION: &str = "testing.ferroscale.dev/provisioning-delay";
/// On a MachineSet or MachineDeployment: `"true"` leaves `spec.providerID` of its Machines unset,
/// so the autoscaler must find Machines through the Node's `<group>/machine` annotations.
pub const OMIT_PROVIDER_ID_ANNOTATION: &str = "testing.ferroscale.dev/omit-provider-id";
/// On a MachineSet or MachineDeployment: a non-empty value fails the provisioning of its Machines
/// with that message (phase `Failed`, no Node). Under v1beta2 the message is stored in
/// `status.deprecated.v1beta1.failureMessage`, because v1beta2 has no `status.failureMessage`
/// and, with no conversion webhook, a `status.failureMessage` written through v1beta1 is pruned.
pub const FAIL_PROVISIONING_ANNOTATION: &str = "testing.ferroscale.dev/fail-provisioning";
/// Provider IDs of the Nodes are `test:///<namespace>/<node name>`; the last segment is what the
/// autoscaler's normalisation keeps.
pub const PROVIDER_ID_SCHEME: &str = "test://";

/// Marks the Machines this controller made and keeps them until their Node is gone.
const FINALIZER: &str = "testing.ferroscale.dev/machine-controller";
/// Labels that tie a MachinePool's Nodes to it (labels, so they can be listed by selector).
const POOL_NAMESPACE_LABEL: &str = "testing.ferroscale.dev/machine-pool-namespace";
const POOL_NAME_LABEL: &str = "testing.ferroscale.dev/machine-pool";
const PASS_INTERVAL: Duration = Duration::from_millis(200);
const DEFAULT_CPU: &str = "4";
const DEFAULT_MEMORY: &str = "16Gi";
const DEFAULT_PODS: &str = "110";
/// Which field manager the controller's patches are recorded under.
const FIELD_MANAGER: &str = "ferroscale-test-machine-controller";

/// The running test controller; [`MachineController::stop`] (or dropping it) ends it.
pub struct MachineController {
    task: JoinHandle<()>,
}

impl MachineController {
    /// Starts the controller for `group`/`version` of the management cluster, with Nodes in the
    /// workload cluster (the same client twice for a single cluster). Fails when discovery of
    /// `group/version` fails; which of MachineDeployments and MachinePools are served is read once.
    pub async fn start(
        management: Client,
        workload: Client,
        group: &str,
        version: &str,
    ) -> Result<MachineController, ClusterApiError> {
        let api = ClusterApi::new(group, version);
        let resources = management
            .list_api_group_resources(&api.api_version())
            .await
            .map_err(api_error(format!("discovery of {}", api.api_version())))?;
        let served = |kind: ClusterApiKind| {
            resources
                .resources
                .iter()
                .any(|resource| resource.name == kind.plural())
        };
        let mut controller = Controller {
            deployments_served: served(ClusterApiKind::MachineDeployment),
            pools_served: served(ClusterApiKind::MachinePool),
            management,
            workload,
            api,
            first_seen: HashMap::new(),
        };
        let task = tokio::spawn(async move {
            loop {
                controller.pass().await;
                tokio::time::sleep(PASS_INTERVAL).await;
            }
        });
        Ok(MachineController { task })
    }

    /// Stops the controller and waits until it has stopped (it is cancelled between requests or
    /// in the middle of one; objects are left as they are).
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for MachineController {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Controller {
    management: Client,
    workload: Client,
    api: ClusterApi,
    deployments_served: bool,
    pools_served: bool,
    /// When each Machine (by uid) was first seen unprovisioned, for the provisioning delay.
    first_seen: HashMap<String, Instant>,
}

/// The behaviour knobs and capacity annotations in effect for one Machine or pool.
#[derive(Debug, Default)]
struct Knobs {
    delay: Duration,
    omit_provider_id: bool,
    failure_message: Option<String>,
    cpu: Option<String>,
    memory: Option<String>,
    max_pods: Option<String>,
}

impl Knobs {
    /// Reads the annotations of the objects in order of precedence (first wins).
    fn from_objects(objects: &[&DynamicObject]) -> Knobs {
        let lookup = |key: &str| {
            objects.iter().find_map(|object| {
                object
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|annotations| annotations.get(key))
                    .filter(|value| !value.is_empty())
                    .cloned()
            })
        };
        let delay = match lookup(PROVISIONING_DELAY_ANNOTATION) {
            None => Duration::ZERO,
            Some(text) => parse_delay(&text).unwrap_or_else(|| {
                log(&format!(
                    "{PROVISIONING_DELAY_ANNOTATION}={text:?} is not a duration (500ms, 5s, 5); no delay"
                ));
                Duration::ZERO
            }),
        };
        Knobs {
            delay,
            omit_provider_id: lookup(OMIT_PROVIDER_ID_ANNOTATION).as_deref() == Some("true"),
            failure_message: lookup(FAIL_PROVISIONING_ANNOTATION),
            cpu: lookup(&format!("{CAPACITY_ANNOTATION_PREFIX}cpu")),
            memory: lookup(&format!("{CAPACITY_ANNOTATION_PREFIX}memory")),
            max_pods: lookup(&format!("{CAPACITY_ANNOTATION_PREFIX}maxPods")),
        }
    }

    fn node_resources(&self) -> Value {
        json!({
            "cpu": self.cpu.as_deref().unwrap_or(DEFAULT_CPU),
            "memory": self.memory.as_deref().unwrap_or(DEFAULT_MEMORY),
            "pods": self.max_pods.as_deref().filter(|pods| *pods != "0").unwrap_or(DEFAULT_PODS),
        })
    }
}

fn parse_delay(text: &str) -> Option<Duration> {
    let text = text.trim();
    if let Some(millis) = text.strip_suffix("ms") {
        return millis.trim().parse().ok().map(Duration::from_millis);
    }
    let seconds = text.strip_suffix('s').unwrap_or(text).trim();
    seconds
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

fn log(message: &str) {
    eprintln!("test machine controller: {message}");
}

fn name_of(object: &DynamicObject) -> &str {
    object.metadata.name.as_deref().unwrap_or_default()
}

fn namespace_of(object: &DynamicObject) -> &str {
    object.metadata.namespace.as_deref().unwrap_or_default()
}

fn is_deleting(object: &DynamicObject) -> bool {
    object.metadata.deletion_timestamp.is_some()
}

fn replicas_of(object: &DynamicObject) -> usize {
    object.data["spec"]["replicas"]
        .as_u64()
        .and_then(|replicas| usize::try_from(replicas).ok())
        .unwrap_or(0)
}

fn annotation<'a>(object: &'a DynamicObject, key: &str) -> Option<&'a str> {
    object
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(key))
        .map(String::as_str)
}

/// The name of the object's owner of `kind` (first such owner reference).
fn owner_name<'a>(object: &'a DynamicObject, kind: &str) -> Option<&'a str> {
    object
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|owner| owner.kind == kind)
        .map(|owner| owner.name.as_str())
}

fn is_owned_by(object: &DynamicObject, owner: &DynamicObject, kind: &str) -> bool {
    object
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|owners| {
            owners.iter().any(|reference| {
                reference.kind == kind
                    && reference.name == name_of(owner)
                    && Some(&reference.uid) == owner.metadata.uid.as_ref()
            })
        })
}

fn owner_reference(api: &ClusterApi, kind: ClusterApiKind, owner: &DynamicObject) -> Value {
    json!({
        "apiVersion": api.api_version(),
        "kind": kind.kind(),
        "name": name_of(owner),
        "uid": owner.metadata.uid.as_deref().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|map| {
            map.iter()
                .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn provider_id(namespace: &str, node_name: &str) -> String {
    format!("{PROVIDER_ID_SCHEME}/{namespace}/{node_name}")
}

/// 404 on a delete or get means the object is already gone.
fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

impl Controller {
    async fn pass(&mut self) {
        if self.deployments_served
            && let Err(error) = self.reconcile_deployments().await
        {
            log(&error.to_string());
        }
        if let Err(error) = self.reconcile_machine_sets().await {
            log(&error.to_string());
        }
        if let Err(error) = self.reconcile_machines().await {
            log(&error.to_string());
        }
        if self.pools_served
            && let Err(error) = self.reconcile_machine_pools().await
        {
            log(&error.to_string());
        }
    }

    async fn list(&self, kind: ClusterApiKind) -> Result<Vec<DynamicObject>, ClusterApiError> {
        self.api
            .all(&self.management, kind)
            .list(&ListParams::default())
            .await
            .map(|list| list.items)
            .map_err(api_error(format!("listing {}", kind.plural())))
    }

    fn namespaced(&self, kind: ClusterApiKind, namespace: &str) -> Api<DynamicObject> {
        self.api.namespaced(&self.management, kind, namespace)
    }

    async fn create(&self, kind: ClusterApiKind, body: Value) -> Result<(), ClusterApiError> {
        let namespace = body["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let what = format!(
            "creating {} {namespace}/{}",
            kind.kind(),
            body["metadata"]["name"]
                .as_str()
                .or(body["metadata"]["generateName"].as_str())
                .unwrap_or_default()
        );
        let object: DynamicObject =
            serde_json::from_value(body).map_err(|error| ClusterApiError::Manifest {
                source_name: what.clone(),
                problem: error.to_string(),
            })?;
        match self
            .namespaced(kind, &namespace)
            .create(&PostParams::default(), &object)
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if is_conflict(&error) => Ok(()),
            Err(error) => Err(api_error(what)(error)),
        }
    }

    async fn merge_patch(
        &self,
        kind: ClusterApiKind,
        object: &DynamicObject,
        patch: Value,
        status: bool,
    ) -> Result<(), ClusterApiError> {
        let api = self.namespaced(kind, namespace_of(object));
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let patch = Patch::Merge(&patch);
        let result = if status {
            api.patch_status(name_of(object), &params, &patch).await
        } else {
            api.patch(name_of(object), &params, &patch).await
        };
        result.map(drop).map_err(api_error(format!(
            "patching {} {}/{}",
            kind.kind(),
            namespace_of(object),
            name_of(object)
        )))
    }

    /// Each MachineDeployment owns a MachineSet `<md>-ms` whose replicas follow its own.
    async fn reconcile_deployments(&self) -> Result<(), ClusterApiError> {
        let deployments = self.list(ClusterApiKind::MachineDeployment).await?;
        let sets = self.list(ClusterApiKind::MachineSet).await?;
        for deployment in deployments.iter().filter(|md| !is_deleting(md)) {
            let namespace = namespace_of(deployment);
            let set_name = format!("{}-ms", name_of(deployment));
            let replicas = replicas_of(deployment);
            let owned = sets
                .iter()
                .find(|set| namespace_of(set) == namespace && name_of(set) == set_name);
            let result = match owned {
                Some(set) if replicas_of(set) != replicas => {
                    let patch = json!({ "spec": { "replicas": replicas } });
                    self.merge_patch(ClusterApiKind::MachineSet, set, patch, false)
                        .await
                }
                Some(_) => Ok(()),
                None => {
                    let body = self.machine_set_for(deployment, &set_name, &sets);
                    self.create(ClusterApiKind::MachineSet, body).await
                }
            };
            if let Err(error) = result {
                log(&error.to_string());
            }
        }
        Ok(())
    }

    fn machine_set_for(
        &self,
        deployment: &DynamicObject,
        set_name: &str,
        sets: &[DynamicObject],
    ) -> Value {
        let namespace = namespace_of(deployment);
        let deployment_name = name_of(deployment);
        // One revision above every other MachineSet of the deployment, so the one made here is
        // the newest even when a test made "old revision" MachineSets first.
        let newest_other = sets
            .iter()
            .filter(|set| namespace_of(set) == namespace)
            .filter(|set| {
                set.metadata
                    .labels
                    .as_ref()
                    .and_then(|labels| labels.get(DEPLOYMENT_NAME_LABEL))
                    .is_some_and(|name| name == deployment_name)
            })
            .filter_map(|set| annotation(set, REVISION_ANNOTATION)?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let spec = &deployment.data["spec"];
        let mut labels = string_map(&spec["template"]["metadata"]["labels"]);
        labels.insert(DEPLOYMENT_NAME_LABEL.to_owned(), deployment_name.to_owned());
        json!({
            "apiVersion": self.api.api_version(),
            "kind": ClusterApiKind::MachineSet.kind(),
            "metadata": {
                "name": set_name,
                "namespace": namespace,
                "labels": labels,
                "annotations": { REVISION_ANNOTATION: (newest_other + 1).to_string() },
                "ownerReferences": [owner_reference(&self.api, ClusterApiKind::MachineDeployment, deployment)],
            },
            "spec": {
                "clusterName": spec["clusterName"],
                "replicas": replicas_of(deployment),
                "selector": spec["selector"],
                "template": spec["template"],
            },
        })
    }

    /// Creates or deletes Machines until each MachineSet has `spec.replicas` live ones.
    async fn reconcile_machine_sets(&self) -> Result<(), ClusterApiError> {
        let sets = self.list(ClusterApiKind::MachineSet).await?;
        let machines = self.list(ClusterApiKind::Machine).await?;
        for set in sets.iter().filter(|set| !is_deleting(set)) {
            let mut live: Vec<&DynamicObject> = machines
                .iter()
                .filter(|machine| namespace_of(machine) == namespace_of(set))
                .filter(|machine| is_owned_by(machine, set, ClusterApiKind::MachineSet.kind()))
                .filter(|machine| !is_deleting(machine))
                .collect();
            let desired = replicas_of(set);
            for _ in live.len()..desired {
                if let Err(error) = self
                    .create(ClusterApiKind::Machine, self.machine_for(set))
                    .await
                {
                    log(&error.to_string());
                }
            }
            if live.len() > desired {
                let delete_key = self.api.key("delete-machine");
                // Marked Machines first, then the newest.
                live.sort_by(|a, b| {
                    let marked =
                        |machine: &DynamicObject| annotation(machine, &delete_key).is_some();
                    marked(b)
                        .cmp(&marked(a))
                        .then_with(|| {
                            b.metadata
                                .creation_timestamp
                                .cmp(&a.metadata.creation_timestamp)
                        })
                        .then_with(|| name_of(b).cmp(name_of(a)))
                });
                for machine in &live[..live.len() - desired] {
                    let result = self
                        .namespaced(ClusterApiKind::Machine, namespace_of(machine))
                        .delete(name_of(machine), &DeleteParams::default())
                        .await;
                    match result {
                        Ok(_) => {}
                        Err(error) if is_not_found(&error) => {}
                        Err(error) => log(&format!(
                            "deleting Machine {}/{}: {error}",
                            namespace_of(machine),
                            name_of(machine)
                        )),
                    }
                }
            }
        }
        Ok(())
    }

    fn machine_for(&self, set: &DynamicObject) -> Value {
        let spec = &set.data["spec"];
        let template = &spec["template"];
        let mut labels = string_map(&template["metadata"]["labels"]);
        labels.extend(string_map(&spec["selector"]["matchLabels"]));
        let cluster_name = spec["clusterName"]
            .as_str()
            .or(template["spec"]["clusterName"].as_str())
            .unwrap_or_default();
        labels.insert(self.api.key("cluster-name"), cluster_name.to_owned());
        labels.insert(self.api.key("set-name"), name_of(set).to_owned());
        if let Some(deployment) = set
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(DEPLOYMENT_NAME_LABEL))
        {
            labels.insert(DEPLOYMENT_NAME_LABEL.to_owned(), deployment.clone());
        }
        json!({
            "apiVersion": self.api.api_version(),
            "kind": ClusterApiKind::Machine.kind(),
            "metadata": {
                "generateName": format!("{}-", name_of(set)),
                "namespace": namespace_of(set),
                "labels": labels,
                "finalizers": [FINALIZER],
                "ownerReferences": [owner_reference(&self.api, ClusterApiKind::MachineSet, set)],
            },
            "spec": {
                "clusterName": cluster_name,
                "bootstrap": template["spec"]["bootstrap"],
                "infrastructureRef": template["spec"]["infrastructureRef"],
            },
        })
    }

    /// Provisions the Machines this controller made, and finishes deleting them.
    async fn reconcile_machines(&mut self) -> Result<(), ClusterApiError> {
        let machines = self.list(ClusterApiKind::Machine).await?;
        let sets = self.list(ClusterApiKind::MachineSet).await?;
        let deployments = if self.deployments_served {
            self.list(ClusterApiKind::MachineDeployment).await?
        } else {
            Vec::new()
        };
        let ours = |machine: &&DynamicObject| {
            machine
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == FINALIZER)
        };
        for machine in machines.iter().filter(ours) {
            let result = if is_deleting(machine) {
                if let Some(uid) = &machine.metadata.uid {
                    self.first_seen.remove(uid);
                }
                self.finish_deletion(machine).await
            } else if machine.data["status"]["phase"] == "Failed"
                || machine.data["status"]["nodeRef"]["name"].is_string()
            {
                Ok(())
            } else {
                let set = owner_name(machine, ClusterApiKind::MachineSet.kind()).and_then(|name| {
                    sets.iter().find(|set| {
                        namespace_of(set) == namespace_of(machine) && name_of(set) == name
                    })
                });
                let deployment = set
                    .and_then(|set| owner_name(set, ClusterApiKind::MachineDeployment.kind()))
                    .and_then(|name| {
                        deployments.iter().find(|md| {
                            namespace_of(md) == namespace_of(machine) && name_of(md) == name
                        })
                    });
                let knobs =
                    Knobs::from_objects(&set.into_iter().chain(deployment).collect::<Vec<_>>());
                let node_labels = set
                    .map(|set| string_map(&set.data["spec"]["template"]["metadata"]["labels"]))
                    .unwrap_or_default();
                self.provision(machine, &knobs, node_labels).await
            };
            if let Err(error) = result {
                log(&error.to_string());
            }
        }
        Ok(())
    }

    async fn provision(
        &mut self,
        machine: &DynamicObject,
        knobs: &Knobs,
        node_labels: BTreeMap<String, String>,
    ) -> Result<(), ClusterApiError> {
        if let Some(message) = &knobs.failure_message {
            // Every shape a version may have; the schema in effect prunes the others.
            let status = json!({ "status": {
                "phase": "Failed",
                "failureReason": "CreateError",
                "failureMessage": message,
                "deprecated": { "v1beta1": { "failureReason": "CreateError", "failureMessage": message } },
            }});
            return self
                .merge_patch(ClusterApiKind::Machine, machine, status, true)
                .await;
        }
        let uid = machine.metadata.uid.clone().unwrap_or_default();
        let first_seen = *self
            .first_seen
            .entry(uid.clone())
            .or_insert_with(Instant::now);
        if first_seen.elapsed() < knobs.delay {
            if machine.data["status"]["phase"] != "Provisioning" {
                let status = json!({ "status": { "phase": "Provisioning" } });
                self.merge_patch(ClusterApiKind::Machine, machine, status, true)
                    .await?;
            }
            return Ok(());
        }
        let namespace = namespace_of(machine);
        let name = name_of(machine);
        let provider_id = provider_id(namespace, name);
        let annotations = BTreeMap::from([
            (self.api.key("machine"), name.to_owned()),
            (self.api.key("cluster-namespace"), namespace.to_owned()),
            (
                self.api.key("cluster-name"),
                machine.data["spec"]["clusterName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            ),
        ]);
        self.create_node(name, &provider_id, node_labels, annotations, knobs)
            .await?;
        if !knobs.omit_provider_id {
            let spec = json!({ "spec": { "providerID": provider_id } });
            self.merge_patch(ClusterApiKind::Machine, machine, spec, false)
                .await?;
        }
        // v1beta2's nodeRef has only a name; older versions name the kind too.
        let node_ref = if self.api.references_by_api_group() {
            json!({ "name": name })
        } else {
            json!({ "kind": "Node", "apiVersion": "v1", "name": name })
        };
        let status = json!({ "status": { "phase": "Running", "nodeRef": node_ref } });
        self.merge_patch(ClusterApiKind::Machine, machine, status, true)
            .await?;
        self.first_seen.remove(&uid);
        Ok(())
    }

    /// Creates a kwok Node (already there counts as done).
    async fn create_node(
        &self,
        name: &str,
        provider_id: &str,
        mut labels: BTreeMap<String, String>,
        mut annotations: BTreeMap<String, String>,
        knobs: &Knobs,
    ) -> Result<(), ClusterApiError> {
        labels.insert("kubernetes.io/hostname".to_owned(), name.to_owned());
        annotations.insert(
            FAKE_NODE_ANNOTATION_KEY.to_owned(),
            FAKE_NODE_ANNOTATION_VALUE.to_owned(),
        );
        let resources = knobs.node_resources();
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": { "name": name, "labels": labels, "annotations": annotations },
            "spec": { "providerID": provider_id },
            "status": { "capacity": resources, "allocatable": resources },
        }))
        .map_err(|error| ClusterApiError::Manifest {
            source_name: format!("Node {name}"),
            problem: error.to_string(),
        })?;
        match Api::<Node>::all(self.workload.clone())
            .create(&PostParams::default(), &node)
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if is_conflict(&error) => Ok(()),
            Err(error) => Err(api_error(format!("creating Node {name}"))(error)),
        }
    }

    /// Deletes the Machine's Node, and once it is gone lets the Machine go.
    async fn finish_deletion(&self, machine: &DynamicObject) -> Result<(), ClusterApiError> {
        let node_name = machine.data["status"]["nodeRef"]["name"]
            .as_str()
            .unwrap_or(name_of(machine));
        let nodes = Api::<Node>::all(self.workload.clone());
        match nodes.delete(node_name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(error) if is_not_found(&error) => {}
            Err(error) => return Err(api_error(format!("deleting Node {node_name}"))(error)),
        }
        match nodes.get_opt(node_name).await {
            Ok(None) => {}
            Ok(Some(_)) => return Ok(()), // still going; the next pass looks again
            Err(error) => return Err(api_error(format!("reading Node {node_name}"))(error)),
        }
        let remaining: Vec<&String> = machine
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|finalizer| *finalizer != FINALIZER)
            .collect();
        // The resourceVersion makes this a compare-and-swap: another writer's finalizer is never
        // dropped by accident.
        let patch = json!({ "metadata": {
            "finalizers": remaining,
            "resourceVersion": machine.metadata.resource_version,
        }});
        match self
            .merge_patch(ClusterApiKind::Machine, machine, patch, false)
            .await
        {
            Err(ClusterApiError::Api { source, .. })
                if is_not_found(&source) || is_conflict(&source) =>
            {
                Ok(())
            }
            other => other,
        }
    }

    /// Keeps each MachinePool's Nodes and `spec.providerIDList` in step with its replicas.
    async fn reconcile_machine_pools(&self) -> Result<(), ClusterApiError> {
        let pools = self.list(ClusterApiKind::MachinePool).await?;
        for pool in pools.iter().filter(|pool| !is_deleting(pool)) {
            if let Err(error) = self.reconcile_machine_pool(pool).await {
                log(&error.to_string());
            }
        }
        Ok(())
    }

    async fn reconcile_machine_pool(&self, pool: &DynamicObject) -> Result<(), ClusterApiError> {
        let namespace = namespace_of(pool);
        let name = name_of(pool);
        let nodes_api = Api::<Node>::all(self.workload.clone());
        let selector = format!("{POOL_NAMESPACE_LABEL}={namespace},{POOL_NAME_LABEL}={name}");
        let all_nodes = nodes_api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_error(format!(
                "listing the Nodes of MachinePool {namespace}/{name}"
            )))?
            .items;
        let taken: Vec<String> = all_nodes
            .iter()
            .filter_map(|node| node.metadata.name.clone())
            .collect();
        let mut members: Vec<Node> = all_nodes
            .into_iter()
            .filter(|node| node.metadata.deletion_timestamp.is_none())
            .collect();
        members.sort_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        });
        let mut member_names: Vec<String> = members
            .iter()
            .filter_map(|node| node.metadata.name.clone())
            .collect();
        let desired = replicas_of(pool);
        if member_names.len() < desired {
            let knobs = Knobs::from_objects(&[pool]);
            let mut labels = string_map(&pool.data["spec"]["template"]["metadata"]["labels"]);
            labels.insert(POOL_NAMESPACE_LABEL.to_owned(), namespace.to_owned());
            labels.insert(POOL_NAME_LABEL.to_owned(), name.to_owned());
            let annotations =
                BTreeMap::from([(self.api.key("cluster-namespace"), namespace.to_owned())]);
            let mut index = 0;
            while member_names.len() < desired {
                let node_name = format!("{name}-{index}");
                index += 1;
                if taken.contains(&node_name) || member_names.contains(&node_name) {
                    continue;
                }
                self.create_node(
                    &node_name,
                    &provider_id(namespace, &node_name),
                    labels.clone(),
                    annotations.clone(),
                    &knobs,
                )
                .await?;
                member_names.push(node_name);
            }
        }
        while member_names.len() > desired {
            // The newest go first.
            let Some(node_name) = member_names.pop() else {
                break;
            };
            match nodes_api.delete(&node_name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(error) if is_not_found(&error) => {}
                Err(error) => return Err(api_error(format!("deleting Node {node_name}"))(error)),
            }
        }
        let provider_ids: Vec<String> = member_names
            .iter()
            .map(|node| provider_id(namespace, node))
            .collect();
        let current: Vec<&str> = pool.data["spec"]["providerIDList"]
            .as_array()
            .map(|list| list.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if current != provider_ids {
            let patch = json!({ "spec": { "providerIDList": provider_ids } });
            self.merge_patch(ClusterApiKind::MachinePool, pool, patch, false)
                .await?;
        }
        if pool.data["status"]["replicas"].as_u64() != Some(provider_ids.len() as u64) {
            let status = json!({ "status": { "replicas": provider_ids.len() } });
            self.merge_patch(ClusterApiKind::MachinePool, pool, status, true)
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_read_in_milliseconds_seconds_or_bare_seconds() {
        assert_eq!(parse_delay("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_delay("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_delay("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_delay("soon"), None);
        assert_eq!(parse_delay("-1s"), None);
    }

    fn object_with(annotations: &[(&str, &str)]) -> DynamicObject {
        let mut object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineSet",
            "metadata": { "name": "ms", "namespace": "ns" },
        }))
        .expect("object");
        object.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
        );
        object
    }

    #[test]
    fn the_machine_set_knobs_win_over_the_deployment_and_defaults_fill_the_rest() {
        let set = object_with(&[
            (PROVISIONING_DELAY_ANNOTATION, "3s"),
            ("capacity.cluster-autoscaler.kubernetes.io/cpu", "8"),
        ]);
        let deployment = object_with(&[
            (PROVISIONING_DELAY_ANNOTATION, "9s"),
            (OMIT_PROVIDER_ID_ANNOTATION, "true"),
            ("capacity.cluster-autoscaler.kubernetes.io/cpu", "2"),
            ("capacity.cluster-autoscaler.kubernetes.io/memory", "8Gi"),
        ]);
        let knobs = Knobs::from_objects(&[&set, &deployment]);
        assert_eq!(knobs.delay, Duration::from_secs(3));
        assert!(knobs.omit_provider_id);
        assert_eq!(knobs.failure_message, None);
        assert_eq!(
            knobs.node_resources(),
            json!({ "cpu": "8", "memory": "8Gi", "pods": "110" })
        );
        let defaults = Knobs::from_objects(&[&object_with(&[])]);
        assert_eq!(
            defaults.node_resources(),
            json!({ "cpu": "4", "memory": "16Gi", "pods": "110" })
        );
    }

    #[test]
    fn provider_ids_end_in_the_node_name() {
        assert_eq!(provider_id("ns", "ms-abcde"), "test:///ns/ms-abcde");
    }
}
