//! Cluster API on the test control plane: installs the real Cluster API CRDs (fetched from the
//! published `sigs.k8s.io/cluster-api` module by `scripts/control-plane/build.sh`), optionally under
//! another group so the autoscaler's `CAPI_GROUP` override meets a real API server, plus a small
//! infrastructure machine template CRD for scale-from-zero tests; builds MachineDeployment,
//! MachineSet and MachinePool objects that the real schemas accept; and waits for Machines.
//!
//! [`MachineController`] plays Cluster API's own controllers (MachineDeployment, MachineSet,
//! Machine, MachinePool) so that scaling a resource creates and deletes Machines and kwok Nodes.

pub mod controller;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::binaries::locate_cluster_api_crds;

pub use controller::{
    FAIL_PROVISIONING_ANNOTATION, MachineController, OMIT_PROVIDER_ID_ANNOTATION,
    PROVIDER_ID_SCHEME, PROVISIONING_DELAY_ANNOTATION,
};

/// Cluster API's own group; `install_cluster_api_crds` can install the CRDs under another one.
pub const CLUSTER_API_GROUP: &str = "cluster.x-k8s.io";
/// Group of infrastructure providers' objects, and of [`TEST_MACHINE_TEMPLATE_KIND`].
pub const INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The infrastructure machine template of the tests (`status.capacity`, `status.nodeInfo`).
pub const TEST_MACHINE_TEMPLATE_KIND: &str = "TestMachineTemplate";
/// The only served version of [`TEST_MACHINE_TEMPLATE_KIND`].
pub const TEST_MACHINE_TEMPLATE_VERSION: &str = "v1beta1";
/// Cluster-scoped label and annotation keys that `CAPI_GROUP` does not rename.
pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
pub const REVISION_ANNOTATION: &str = "machinedeployment.clusters.x-k8s.io/revision";
/// Prefix of the scale-from-zero capacity annotations on a scalable resource.
pub const CAPACITY_ANNOTATION_PREFIX: &str = "capacity.cluster-autoscaler.kubernetes.io/";

const TEST_MACHINE_TEMPLATE_CRD: &str = include_str!("crds/test-machine-template.yaml");
/// Who owns the fields the test support writes (server-side apply).
const FIELD_MANAGER: &str = "ferroscale-testing";
/// How long a CRD may take to be Established and served; seconds normally.
const CRD_READY_TIMEOUT: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Why Cluster API objects could not be installed, created or waited for.
///
/// `Debug` prints the same text as `Display`, as for [`crate::Error`]: tests end in `.expect(..)`.
#[derive(thiserror::Error)]
pub enum ClusterApiError {
    #[error(transparent)]
    Locate(#[from] crate::Error),

    #[error("could not read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{source_name} is not a usable CRD manifest: {problem}")]
    Manifest {
        source_name: String,
        problem: String,
    },

    #[error("{action} failed: {source}")]
    Api {
        action: String,
        #[source]
        source: kube::Error,
    },

    #[error("{what} within {timeout:?}; last seen: {last_seen}")]
    Timeout {
        what: String,
        timeout: Duration,
        last_seen: String,
    },
}

impl fmt::Debug for ClusterApiError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, formatter)
    }
}

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> ClusterApiError {
    let action = action.into();
    move |source| ClusterApiError::Api { action, source }
}

/// The kinds of Cluster API objects the test support knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterApiKind {
    Cluster,
    MachineDeployment,
    MachineSet,
    Machine,
    MachinePool,
}

impl ClusterApiKind {
    pub fn kind(self) -> &'static str {
        match self {
            ClusterApiKind::Cluster => "Cluster",
            ClusterApiKind::MachineDeployment => "MachineDeployment",
            ClusterApiKind::MachineSet => "MachineSet",
            ClusterApiKind::Machine => "Machine",
            ClusterApiKind::MachinePool => "MachinePool",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            ClusterApiKind::Cluster => "clusters",
            ClusterApiKind::MachineDeployment => "machinedeployments",
            ClusterApiKind::MachineSet => "machinesets",
            ClusterApiKind::Machine => "machines",
            ClusterApiKind::MachinePool => "machinepools",
        }
    }
}

/// One group/version of the Cluster API objects: where to send requests, and the group-prefixed
/// keys (`<group>/delete-machine`, ...) that `CAPI_GROUP` renames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterApi {
    pub group: String,
    pub version: String,
}

impl ClusterApi {
    pub fn new(group: impl Into<String>, version: impl Into<String>) -> Self {
        ClusterApi {
            group: group.into(),
            version: version.into(),
        }
    }

    /// `<group>/<version>`.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    pub fn api_resource(&self, kind: ClusterApiKind) -> ApiResource {
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version(),
            kind: kind.kind().to_owned(),
            plural: kind.plural().to_owned(),
        }
    }

    /// The objects of one kind in one namespace.
    pub fn namespaced(
        &self,
        client: &Client,
        kind: ClusterApiKind,
        namespace: &str,
    ) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), namespace, &self.api_resource(kind))
    }

    /// The objects of one kind in every namespace (for lists).
    pub fn all(&self, client: &Client, kind: ClusterApiKind) -> Api<DynamicObject> {
        Api::all_with(client.clone(), &self.api_resource(kind))
    }

    /// A key under the group: `key("delete-machine")` is `<group>/delete-machine`.
    pub fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.group)
    }

    /// The Cluster API versions before v1beta2 reference objects by `apiVersion`, v1beta2 and
    /// later by `apiGroup`.
    pub(crate) fn references_by_api_group(&self) -> bool {
        !matches!(self.version.as_str(), "v1alpha3" | "v1alpha4" | "v1beta1")
    }
}

/// What [`install_cluster_api_crds`] found served once the CRDs were in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledClusterApi {
    pub group: String,
    /// The group's preferred version in discovery (what the autoscaler picks without `CAPI_VERSION`).
    pub preferred_version: String,
    /// Every version discovery lists for the group, preferred first.
    pub served_versions: Vec<String>,
}

impl InstalledClusterApi {
    /// The group at its preferred version.
    pub fn preferred(&self) -> ClusterApi {
        ClusterApi::new(self.group.clone(), self.preferred_version.clone())
    }
}

/// Installs the Cluster API CRDs fetched by `scripts/control-plane/build.sh` (Cluster,
/// MachineDeployment, MachineSet, Machine, MachinePool) under `group`, and the
/// [`TEST_MACHINE_TEMPLATE_KIND`] CRD under [`INFRASTRUCTURE_GROUP`]; then waits until every CRD is
/// Established and discovery lists each of its resources in every version.
///
/// With a `group` other than [`CLUSTER_API_GROUP`] the CRDs' `spec.group` and name are rewritten,
/// so the same schemas are served under that group. Server-side apply: installing twice, or under
/// two groups on one API server, is fine.
pub async fn install_cluster_api_crds(
    client: &Client,
    group: &str,
) -> Result<InstalledClusterApi, ClusterApiError> {
    let mut crds = Vec::new();
    for path in locate_cluster_api_crds()? {
        let text = std::fs::read_to_string(&path).map_err(|source| ClusterApiError::Read {
            path: path.clone(),
            source,
        })?;
        for crd in crd_documents(&text, &path.display().to_string())? {
            crds.push(with_group(crd, group, &path.display().to_string())?);
        }
    }
    crds.extend(crd_documents(
        TEST_MACHINE_TEMPLATE_CRD,
        "crates/testing-control-plane/src/crds/test-machine-template.yaml",
    )?);

    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::new();
    for crd in &crds {
        let name = string_at(crd, &["metadata", "name"])
            .unwrap_or_default()
            .to_owned();
        api.patch(&name, &apply, &Patch::Apply(crd))
            .await
            .map_err(api_error(format!("applying CRD {name}")))?;
        names.push(name);
    }
    for name in &names {
        wait_until_served(client, name).await?;
    }
    discovered_group(client, group).await
}

/// The CustomResourceDefinitions among the YAML documents of one file.
pub(crate) fn crd_documents(text: &str, source_name: &str) -> Result<Vec<Value>, ClusterApiError> {
    let mut crds = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(document).map_err(|error| ClusterApiError::Manifest {
            source_name: source_name.to_owned(),
            problem: error.to_string(),
        })?;
        if value.is_null() {
            continue;
        }
        if value.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
            return Err(ClusterApiError::Manifest {
                source_name: source_name.to_owned(),
                problem: format!(
                    "kind is {:?}, not CustomResourceDefinition",
                    value.get("kind")
                ),
            });
        }
        crds.push(value);
    }
    if crds.is_empty() {
        return Err(ClusterApiError::Manifest {
            source_name: source_name.to_owned(),
            problem: "it holds no CustomResourceDefinition".to_owned(),
        });
    }
    Ok(crds)
}

/// The CRD served under `group`: `spec.group` replaced and `metadata.name` made `<plural>.<group>`,
/// as the API server requires of a CRD's name.
fn with_group(mut crd: Value, group: &str, source_name: &str) -> Result<Value, ClusterApiError> {
    let plural = string_at(&crd, &["spec", "names", "plural"])
        .ok_or_else(|| ClusterApiError::Manifest {
            source_name: source_name.to_owned(),
            problem: "spec.names.plural is missing".to_owned(),
        })?
        .to_owned();
    let not_a_map = |field: &str| ClusterApiError::Manifest {
        source_name: source_name.to_owned(),
        problem: format!("{field} is not a map"),
    };
    crd.get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| not_a_map("spec"))?
        .insert("group".to_owned(), json!(group));
    let metadata = crd
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| not_a_map("metadata"))?;
    metadata.insert("name".to_owned(), json!(format!("{plural}.{group}")));
    if is_protected_group(group) {
        // The API server refuses CRDs in the Kubernetes project's own groups (test.k8s.io, the
        // CAPI_GROUP example) unless they say whether the API was approved; "unapproved" is
        // accepted and only reported in a condition.
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or_else(|| not_a_map("metadata.annotations"))?;
        annotations.insert(
            "api-approved.kubernetes.io".to_owned(),
            json!("unapproved, Ferroscale test copy of a Cluster API CRD"),
        );
    }
    Ok(crd)
}

/// Groups under `k8s.io` and `kubernetes.io` belong to the Kubernetes project.
fn is_protected_group(group: &str) -> bool {
    ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|domain| group == *domain || group.ends_with(&format!(".{domain}")))
}

pub(crate) fn string_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(value, |value, key| value.get(key))
        .and_then(Value::as_str)
}

/// Waits until the CRD is Established and discovery lists its plural in every served version.
pub(crate) async fn wait_until_served(client: &Client, name: &str) -> Result<(), ClusterApiError> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let deadline = tokio::time::Instant::now() + CRD_READY_TIMEOUT;
    loop {
        let last_seen = match api.get(name).await {
            Ok(crd) => match crd_served_problem(client, &crd).await {
                None => return Ok(()),
                Some(problem) => problem,
            },
            Err(error) => format!("reading the CRD: {error}"),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(ClusterApiError::Timeout {
                what: format!("CRD {name} was not Established and served"),
                timeout: CRD_READY_TIMEOUT,
                last_seen,
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// What still keeps the CRD from being usable, or `None` when it is.
async fn crd_served_problem(client: &Client, crd: &CustomResourceDefinition) -> Option<String> {
    let established = crd
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Established" && condition.status == "True")
        });
    if !established {
        return Some("not Established yet".to_owned());
    }
    let group = &crd.spec.group;
    let plural = &crd.spec.names.plural;
    for version in crd.spec.versions.iter().filter(|version| version.served) {
        let api_version = format!("{group}/{}", version.name);
        match client.list_api_group_resources(&api_version).await {
            Ok(list)
                if list
                    .resources
                    .iter()
                    .any(|resource| &resource.name == plural) => {}
            Ok(_) => {
                return Some(format!(
                    "discovery of {api_version} does not list {plural} yet"
                ));
            }
            Err(error) => return Some(format!("discovery of {api_version}: {error}")),
        }
    }
    None
}

async fn discovered_group(
    client: &Client,
    group: &str,
) -> Result<InstalledClusterApi, ClusterApiError> {
    let groups = client
        .list_api_groups()
        .await
        .map_err(api_error("listing API groups"))?;
    let found = groups
        .groups
        .into_iter()
        .find(|candidate| candidate.name == group)
        .ok_or_else(|| ClusterApiError::Manifest {
            source_name: format!("discovery of group {group}"),
            problem: "the group is not listed although its CRDs are served".to_owned(),
        })?;
    let served_versions: Vec<String> = found
        .versions
        .into_iter()
        .map(|version| version.version)
        .collect();
    let preferred_version = found
        .preferred_version
        .map(|preferred| preferred.version)
        .or_else(|| served_versions.first().cloned())
        .unwrap_or_default();
    Ok(InstalledClusterApi {
        group: group.to_owned(),
        preferred_version,
        served_versions,
    })
}

/// A MachineDeployment, MachineSet or MachinePool for a test, with the fields the real CRD schemas
/// require (`spec.clusterName`, `spec.selector`, `spec.template.spec.{clusterName,bootstrap,
/// infrastructureRef}`) and the autoscaler's annotations. Build the object with
/// [`ScalableResource::machine_deployment`], [`ScalableResource::machine_set`] or
/// [`ScalableResource::machine_pool`] and create it with [`create_object`].
#[derive(Debug, Clone)]
pub struct ScalableResource {
    pub api: ClusterApi,
    pub namespace: String,
    pub name: String,
    /// `spec.clusterName` of the resource and its template (default `test-cluster`).
    pub cluster_name: String,
    pub replicas: u32,
    /// `<group>/cluster-api-autoscaler-node-group-min-size`, when set.
    pub min_size: Option<u32>,
    /// `<group>/cluster-api-autoscaler-node-group-max-size`, when set.
    pub max_size: Option<u32>,
    /// `capacity.cluster-autoscaler.kubernetes.io/cpu`, when set; also the CPU of the kwok Nodes.
    pub capacity_cpu: Option<String>,
    /// `capacity.cluster-autoscaler.kubernetes.io/memory`, when set; also the memory of the Nodes.
    pub capacity_memory: Option<String>,
    /// Further annotations (other capacity keys, the controller's knobs, paused, ...).
    pub annotations: BTreeMap<String, String>,
    /// Labels of the resource itself (matched by auto-discovery label filters).
    pub labels: BTreeMap<String, String>,
    /// `spec.template.metadata.labels`: copied to Machines and to their Nodes.
    pub node_labels: BTreeMap<String, String>,
    /// Name of a [`TEST_MACHINE_TEMPLATE_KIND`] in the same namespace for `infrastructureRef`;
    /// without it the ref names a template that does not exist (the schemas require a ref).
    pub infrastructure_template: Option<String>,
}

impl ScalableResource {
    pub fn new(api: &ClusterApi, namespace: &str, name: &str) -> Self {
        ScalableResource {
            api: api.clone(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            cluster_name: "test-cluster".to_owned(),
            replicas: 0,
            min_size: None,
            max_size: None,
            capacity_cpu: None,
            capacity_memory: None,
            annotations: BTreeMap::new(),
            labels: BTreeMap::new(),
            node_labels: BTreeMap::new(),
            infrastructure_template: None,
        }
    }

    pub fn replicas(mut self, replicas: u32) -> Self {
        self.replicas = replicas;
        self
    }

    pub fn size_limits(mut self, min: u32, max: u32) -> Self {
        self.min_size = Some(min);
        self.max_size = Some(max);
        self
    }

    pub fn capacity(mut self, cpu: &str, memory: &str) -> Self {
        self.capacity_cpu = Some(cpu.to_owned());
        self.capacity_memory = Some(memory.to_owned());
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.to_owned(), value.to_owned());
        self
    }

    pub fn node_label(mut self, key: &str, value: &str) -> Self {
        self.node_labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The label that selects this resource's Machines (the selector of a MachineDeployment or
    /// MachineSet, and a label of every Machine made from it).
    pub fn selector_label(&self) -> (String, String) {
        (
            "testing.ferroscale.dev/node-group".to_owned(),
            self.name.clone(),
        )
    }

    /// `key=value` of [`ScalableResource::selector_label`], for list calls and [`wait_for_machines`].
    pub fn label_selector(&self) -> String {
        let (key, value) = self.selector_label();
        format!("{key}={value}")
    }

    pub fn machine_deployment(&self) -> Value {
        let mut object = self.common(ClusterApiKind::MachineDeployment);
        object["spec"]["selector"] = self.selector();
        object
    }

    pub fn machine_set(&self) -> Value {
        let mut object = self.common(ClusterApiKind::MachineSet);
        object["spec"]["selector"] = self.selector();
        object
    }

    pub fn machine_pool(&self) -> Value {
        self.common(ClusterApiKind::MachinePool)
    }

    fn selector(&self) -> Value {
        let (key, value) = self.selector_label();
        json!({ "matchLabels": { key: value } })
    }

    fn common(&self, kind: ClusterApiKind) -> Value {
        let mut annotations = self.annotations.clone();
        if let Some(min) = self.min_size {
            annotations.insert(
                self.api.key("cluster-api-autoscaler-node-group-min-size"),
                min.to_string(),
            );
        }
        if let Some(max) = self.max_size {
            annotations.insert(
                self.api.key("cluster-api-autoscaler-node-group-max-size"),
                max.to_string(),
            );
        }
        if let Some(cpu) = &self.capacity_cpu {
            annotations.insert(format!("{CAPACITY_ANNOTATION_PREFIX}cpu"), cpu.clone());
        }
        if let Some(memory) = &self.capacity_memory {
            annotations.insert(
                format!("{CAPACITY_ANNOTATION_PREFIX}memory"),
                memory.clone(),
            );
        }
        let mut template_labels = self.node_labels.clone();
        let (key, value) = self.selector_label();
        template_labels.insert(key, value);
        let template_name = self
            .infrastructure_template
            .clone()
            .unwrap_or_else(|| format!("{}-template", self.name));
        json!({
            "apiVersion": self.api.api_version(),
            "kind": kind.kind(),
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": self.labels,
                "annotations": annotations,
            },
            "spec": {
                "clusterName": self.cluster_name,
                "replicas": self.replicas,
                "template": {
                    "metadata": { "labels": template_labels },
                    "spec": {
                        "clusterName": self.cluster_name,
                        "bootstrap": { "dataSecretName": format!("{}-bootstrap", self.name) },
                        "infrastructureRef": self.infrastructure_ref(&template_name),
                    },
                },
            },
        })
    }

    fn infrastructure_ref(&self, template_name: &str) -> Value {
        if self.api.references_by_api_group() {
            json!({
                "apiGroup": INFRASTRUCTURE_GROUP,
                "kind": TEST_MACHINE_TEMPLATE_KIND,
                "name": template_name,
            })
        } else {
            json!({
                "apiVersion": format!("{INFRASTRUCTURE_GROUP}/{TEST_MACHINE_TEMPLATE_VERSION}"),
                "kind": TEST_MACHINE_TEMPLATE_KIND,
                "name": template_name,
                "namespace": self.namespace,
            })
        }
    }
}

impl ScalableResource {
    /// Creates this resource as a MachineDeployment, MachineSet or MachinePool (`kind`).
    pub async fn create(
        &self,
        client: &Client,
        kind: ClusterApiKind,
    ) -> Result<DynamicObject, ClusterApiError> {
        let object = match kind {
            ClusterApiKind::MachineDeployment => self.machine_deployment(),
            ClusterApiKind::MachineSet => self.machine_set(),
            ClusterApiKind::MachinePool => self.machine_pool(),
            other => {
                return Err(ClusterApiError::Manifest {
                    source_name: format!("{} {}/{}", other.kind(), self.namespace, self.name),
                    problem: "a ScalableResource is a MachineDeployment, MachineSet or MachinePool"
                        .to_owned(),
                });
            }
        };
        create_object(client, &self.api, kind, &object).await
    }
}

/// Creates a Cluster API object built by [`ScalableResource`] (or by hand) in its namespace.
pub async fn create_object(
    client: &Client,
    api: &ClusterApi,
    kind: ClusterApiKind,
    object: &Value,
) -> Result<DynamicObject, ClusterApiError> {
    let namespace = string_at(object, &["metadata", "namespace"]).unwrap_or("default");
    let name = string_at(object, &["metadata", "name"]).unwrap_or_default();
    let typed: DynamicObject =
        serde_json::from_value(object.clone()).map_err(|error| ClusterApiError::Manifest {
            source_name: format!("{} {namespace}/{name}", kind.kind()),
            problem: error.to_string(),
        })?;
    api.namespaced(client, kind, namespace)
        .create(&Default::default(), &typed)
        .await
        .map_err(api_error(format!(
            "creating {} {namespace}/{name}",
            kind.kind()
        )))
}

/// Creates a [`TEST_MACHINE_TEMPLATE_KIND`] and sets its status: `capacity` (resource name →
/// quantity, e.g. `cpu` → `8`) and, when given, `nodeInfo` (architecture, operating system).
pub async fn create_test_machine_template(
    client: &Client,
    namespace: &str,
    name: &str,
    capacity: &BTreeMap<String, String>,
    node_info: Option<(&str, &str)>,
) -> Result<DynamicObject, ClusterApiError> {
    let resource = test_machine_template_resource();
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource);
    let object = DynamicObject::new(name, &resource)
        .within(namespace)
        .data(json!({ "spec": { "template": { "spec": {} } } }));
    api.create(&Default::default(), &object)
        .await
        .map_err(api_error(format!(
            "creating {TEST_MACHINE_TEMPLATE_KIND} {namespace}/{name}"
        )))?;
    let mut status = json!({ "capacity": capacity });
    if let Some((architecture, operating_system)) = node_info {
        status["nodeInfo"] =
            json!({ "architecture": architecture, "operatingSystem": operating_system });
    }
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .map_err(api_error(format!(
        "setting the status of {TEST_MACHINE_TEMPLATE_KIND} {namespace}/{name}"
    )))
}

/// The API resource of [`TEST_MACHINE_TEMPLATE_KIND`].
pub fn test_machine_template_resource() -> ApiResource {
    ApiResource {
        group: INFRASTRUCTURE_GROUP.to_owned(),
        version: TEST_MACHINE_TEMPLATE_VERSION.to_owned(),
        api_version: format!("{INFRASTRUCTURE_GROUP}/{TEST_MACHINE_TEMPLATE_VERSION}"),
        kind: TEST_MACHINE_TEMPLATE_KIND.to_owned(),
        plural: "testmachinetemplates".to_owned(),
    }
}

/// Waits until exactly `count` Machines in `namespace` match `label_selector` and every one of them
/// is Running with a `status.nodeRef` (none being deleted), and returns them sorted by name.
pub async fn wait_for_machines(
    client: &Client,
    api: &ClusterApi,
    namespace: &str,
    label_selector: &str,
    count: usize,
    timeout: Duration,
) -> Result<Vec<DynamicObject>, ClusterApiError> {
    let machines = api.namespaced(client, ClusterApiKind::Machine, namespace);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last_seen = match machines
            .list(&ListParams::default().labels(label_selector))
            .await
        {
            Ok(list) => {
                let mut items = list.items;
                items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                let running = items.iter().filter(|machine| is_running(machine)).count();
                if items.len() == count && running == count {
                    return Ok(items);
                }
                describe_machines(&items)
            }
            Err(error) => format!("listing Machines: {error}"),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(ClusterApiError::Timeout {
                what: format!(
                    "{namespace} did not get exactly {count} running Machines matching {label_selector}"
                ),
                timeout,
                last_seen,
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Running, with a Node, and not being deleted.
pub fn is_running(machine: &DynamicObject) -> bool {
    machine.metadata.deletion_timestamp.is_none()
        && machine.data["status"]["phase"].as_str() == Some("Running")
        && machine.data["status"]["nodeRef"]["name"].is_string()
}

/// One line per Machine: name, phase, node, deleting — for timeout messages.
pub fn describe_machines(machines: &[DynamicObject]) -> String {
    if machines.is_empty() {
        return "no Machines".to_owned();
    }
    machines
        .iter()
        .map(|machine| {
            format!(
                "{} (phase {}, node {}{})",
                machine.metadata.name.as_deref().unwrap_or("?"),
                machine.data["status"]["phase"].as_str().unwrap_or("-"),
                machine.data["status"]["nodeRef"]["name"]
                    .as_str()
                    .unwrap_or("-"),
                if machine.metadata.deletion_timestamp.is_some() {
                    ", deleting"
                } else {
                    ""
                },
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renamed_group_renames_the_crd_and_its_group_only() {
        let crd = json!({
            "kind": "CustomResourceDefinition",
            "metadata": { "name": "machines.cluster.x-k8s.io" },
            "spec": { "group": "cluster.x-k8s.io", "names": { "plural": "machines", "kind": "Machine" } },
        });
        let renamed = with_group(crd, "test.k8s.io", "test").expect("renamed");
        assert_eq!(renamed["metadata"]["name"], "machines.test.k8s.io");
        assert_eq!(renamed["spec"]["group"], "test.k8s.io");
        assert_eq!(renamed["spec"]["names"]["kind"], "Machine");
        assert!(
            renamed["metadata"]["annotations"]["api-approved.kubernetes.io"]
                .as_str()
                .is_some_and(|value| value.starts_with("unapproved")),
            "{renamed}"
        );
        let other = json!({
            "metadata": { "name": "machines.cluster.x-k8s.io" },
            "spec": { "group": "cluster.x-k8s.io", "names": { "plural": "machines" } },
        });
        let renamed = with_group(other, "example.com", "test").expect("renamed");
        assert!(
            renamed["metadata"].get("annotations").is_none(),
            "{renamed}"
        );
    }

    #[test]
    fn a_crd_without_a_plural_is_refused_with_its_source() {
        let crd = json!({ "kind": "CustomResourceDefinition", "metadata": {}, "spec": {} });
        let error = with_group(crd, "test.k8s.io", "broken.yaml").expect_err("no plural");
        assert!(error.to_string().contains("broken.yaml"), "{error}");
        assert!(error.to_string().contains("spec.names.plural"), "{error}");
    }

    #[test]
    fn a_manifest_of_another_kind_is_refused() {
        let error = crd_documents("kind: ConfigMap\n", "cm.yaml").expect_err("not a CRD");
        assert!(error.to_string().contains("cm.yaml"), "{error}");
        assert!(crd_documents(TEST_MACHINE_TEMPLATE_CRD, "template").is_ok());
    }

    #[test]
    fn v1beta2_objects_reference_their_template_by_group_and_v1beta1_by_api_version() {
        let v1beta2 =
            ScalableResource::new(&ClusterApi::new("cluster.x-k8s.io", "v1beta2"), "ns", "md");
        let reference =
            &v1beta2.machine_deployment()["spec"]["template"]["spec"]["infrastructureRef"];
        assert_eq!(reference["apiGroup"], INFRASTRUCTURE_GROUP);
        assert!(reference.get("apiVersion").is_none());
        let v1beta1 =
            ScalableResource::new(&ClusterApi::new("cluster.x-k8s.io", "v1beta1"), "ns", "md");
        let reference = &v1beta1.machine_set()["spec"]["template"]["spec"]["infrastructureRef"];
        assert_eq!(
            reference["apiVersion"],
            "infrastructure.cluster.x-k8s.io/v1beta1"
        );
    }

    #[test]
    fn annotations_use_the_group_in_effect() {
        let resource =
            ScalableResource::new(&ClusterApi::new("test.k8s.io", "v1beta2"), "ns", "ms")
                .size_limits(1, 5)
                .capacity("8", "32Gi");
        let object = resource.machine_set();
        let annotations = &object["metadata"]["annotations"];
        assert_eq!(
            annotations["test.k8s.io/cluster-api-autoscaler-node-group-min-size"],
            "1"
        );
        assert_eq!(
            annotations["test.k8s.io/cluster-api-autoscaler-node-group-max-size"],
            "5"
        );
        assert_eq!(
            annotations["capacity.cluster-autoscaler.kubernetes.io/cpu"],
            "8"
        );
        let (key, value) = resource.selector_label();
        assert_eq!(
            object["spec"]["selector"]["matchLabels"][&key],
            json!(value)
        );
        assert_eq!(
            object["spec"]["template"]["metadata"]["labels"][&key],
            json!(value)
        );
    }
}
