//! The Helm chart `deploy/helm/ferroscale`, rendered by the pinned helm (`helm template`, no cluster
//! needed) the way a user installs it: with its default values and with a values file of their
//! own. What an install depends on is checked on the rendered objects: they are valid Kubernetes
//! objects, the same kinds as the plain manifests of `deploy/manifests`, with exactly the same RBAC
//! rules; the Deployment runs as the ServiceAccount the RBAC binds, the Service and the
//! PodDisruptionBudget select its pods; the container's arguments are accepted by the
//! `ferroscale run` built from this workspace; and with the externalgrpc provider, the cloud config
//! the chart writes is read by the provider's own parser and names files where they are mounted.
//! With the clusterapi provider, what it reads from its environment and flags is what the values
//! say, the management cluster's kubeconfig is the mounted Secret, and the management RBAC is that
//! of `deploy/clusterapi`; with the exoscale provider, the credentials come from the Secret's keys
//! (never from the rendered text) and read back into the provider's configuration.
//!
//! helm comes from `scripts/control-plane/build.sh` (found by `locate_helm`); without it the tests
//! fail and say how to build it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::Command;

use ferroscale_provider_clusterapi::ClusterApiConfig;
use ferroscale_provider_clusterapi::discovery::DiscoverySpec;
use ferroscale_provider_exoscale::{ExoscaleConfig, NodeGroupSpec};
use ferroscale_provider_externalgrpc::ExternalGrpcConfig;
use ferroscale_testing_control_plane::locate_helm;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvVar, PodSpec, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;

// Values files in upstream's schema, and the monitoring objects.
#[path = "helm_chart/monitoring.rs"]
mod monitoring;
#[path = "helm_chart/upstream_values.rs"]
mod upstream_values;

const RELEASE: &str = "autoscaler";
const NAMESPACE: &str = "cluster-tools";

/// A values file as a user would write one: several values changed at once.
const USER_VALUES: &str = "\
replicaCount: 2
leaderElect: true
scanInterval: 30s
verbosity: 4
port: 9090
extraArgs:
  - --expander=least-waste
  - --scale-down-unneeded-time=5m
  - --max-nodes-total=50
priorityClassName: \"\"
";

/// The externalgrpc provider with mutual TLS from a Secret, as its values file would say.
const EXTERNALGRPC_VALUES: &str = "\
cloudProvider: externalgrpc
externalgrpc:
  address: provider.cloud-tools.svc:8086
  grpcTimeout: 10s
  tlsSecret: provider-client-certificate
";

/// The clusterapi provider with every value of its section changed from the default.
const CLUSTERAPI_VALUES: &str = "\
cloudProvider: clusterapi
clusterapi:
  autoDiscovery:
    - clusterapi:namespace=team-a
    - clusterapi:clusterName=prod,autoscale=true
  managementKubeconfigSecret: {name: prod-kubeconfig}
  cloudConfigAuthoritative: true
  group: cluster.example.com
  version: v1beta2
  scaleZeroDefaultArch: arm64
";

/// The exoscale provider with bounds for two pools and another API environment.
const EXOSCALE_VALUES: &str = "\
cloudProvider: exoscale
exoscale:
  credentialsSecret: exoscale-production
  nodes:
    - 1:10:workers
    - 2:4:gpu:a100
  apiEnvironment: ppapi
";

/// An argument no version of `ferroscale run` knows, appended to the rendered ones: the parser
/// reports every problem of a command line at once, so when this is the only one reported, every
/// rendered argument was accepted. Without it the binary would go on to bind the port and talk to
/// a cluster.
const SENTINEL_FLAG: &str = "--not-a-flag-helm-chart-test";

fn deploy_dir() -> PathBuf {
    // Tests run in the package's directory; absolute, as helm and the binary get it too.
    std::env::current_dir()
        .expect("the test's working directory")
        .join("../../deploy")
}

fn chart_dir() -> PathBuf {
    deploy_dir().join("helm/ferroscale")
}

/// `helm template` of the chart in [`NAMESPACE`], with a values file when given: the rendered text,
/// or helm's error output when it refuses.
fn helm_template(values: Option<&str>) -> Result<String, String> {
    helm_template_in(&chart_dir(), values.as_slice())
}

/// `helm template` of the chart at `chart` in [`NAMESPACE`] with these values files, each
/// overriding the ones before it (as several `--values` do).
fn helm_template_in(chart: &Path, values_files: &[&str]) -> Result<String, String> {
    let helm = locate_helm().expect("helm for rendering the chart");
    // helm's own configuration, cache and plugins of whoever runs the tests must not matter.
    let helm_home = tempfile::tempdir().expect("temporary helm home");
    let mut command = Command::new(helm);
    command
        .arg("template")
        .arg(RELEASE)
        .arg(chart)
        .args(["--namespace", NAMESPACE])
        .env("HELM_CACHE_HOME", helm_home.path().join("cache"))
        .env("HELM_CONFIG_HOME", helm_home.path().join("config"))
        .env("HELM_DATA_HOME", helm_home.path().join("data"))
        .env_remove("KUBECONFIG");
    for (index, values) in values_files.iter().enumerate() {
        let file = helm_home.path().join(format!("values-{index}.yaml"));
        std::fs::write(&file, values).expect("write the values file");
        command.arg("--values").arg(file);
    }
    let output = command.output().expect("run helm template");
    if output.status.success() {
        Ok(String::from_utf8(output.stdout).expect("helm prints UTF-8"))
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// The objects of a multi-document YAML text, empty documents (a template that rendered nothing)
/// left out.
fn documents(text: &str, origin: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|document| {
            Value::deserialize(document).unwrap_or_else(|e| panic!("{origin} is not YAML: {e}"))
        })
        .filter(|document| !document.is_null())
        .collect()
}

fn kind_of(object: &Value) -> &str {
    object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("an object without a kind: {object:?}"))
}

/// The objects of one rendering, by kind.
struct Rendered {
    objects: Vec<Value>,
}

impl Rendered {
    fn of(values: Option<&str>) -> Self {
        Self::of_chart(&chart_dir(), values.as_slice())
    }

    /// The chart at `chart` rendered with these values files, the later ones overriding.
    fn of_chart(chart: &Path, values_files: &[&str]) -> Self {
        let text = helm_template_in(chart, values_files)
            .unwrap_or_else(|e| panic!("helm template failed: {e}"));
        Rendered {
            objects: documents(&text, "helm template's output"),
        }
    }

    /// The objects of one kind, as JSON-like values (for kinds k8s-openapi has no type for).
    fn all(&self, kind: &str) -> Vec<&Value> {
        self.objects
            .iter()
            .filter(|object| kind_of(object) == kind)
            .collect()
    }

    /// The object of this kind with this name, if the chart renders one.
    fn named<T: DeserializeOwned>(&self, kind: &str, name: &str) -> Option<T> {
        let object = self.objects.iter().find(|object| {
            kind_of(object) == kind
                && object["metadata"].get("name").and_then(Value::as_str) == Some(name)
        })?;
        Some(
            serde_yaml_ng::from_value(object.clone())
                .unwrap_or_else(|e| panic!("the rendered {kind} {name} is not valid: {e}")),
        )
    }

    /// The only object of this kind, as its typed Kubernetes API object.
    fn one<T: DeserializeOwned>(&self, kind: &str) -> T {
        let mut matching = self.objects.iter().filter(|object| kind_of(object) == kind);
        let object = matching
            .next()
            .unwrap_or_else(|| panic!("the chart renders no {kind}"));
        assert!(matching.next().is_none(), "the chart renders two {kind}s");
        serde_yaml_ng::from_value(object.clone())
            .unwrap_or_else(|e| panic!("the rendered {kind} is not a valid {kind}: {e}"))
    }

    fn pod(&self) -> PodSpec {
        let deployment: Deployment = self.one("Deployment");
        deployment
            .spec
            .and_then(|spec| spec.template.spec)
            .expect("the Deployment's pod spec")
    }

    fn container(&self) -> Container {
        let containers = self.pod().containers;
        assert_eq!(containers.len(), 1, "{containers:?}");
        containers.into_iter().next().expect("one container")
    }

    /// The file the container sees at `path`, when a volume mounts it: the ConfigMap or Secret
    /// behind the volume, and the key in it.
    fn mounted_file(&self, path: &Path) -> Option<MountedFile> {
        let mounts = self.container().volume_mounts.unwrap_or_default();
        let (mount, key) = mounts.iter().find_map(|mount| {
            let key = path.strip_prefix(&mount.mount_path).ok()?;
            Some((mount, key.to_str()?.to_owned()))
        })?;
        let volumes = self.pod().volumes.unwrap_or_default();
        let volume = volumes
            .into_iter()
            .find(|volume| volume.name == mount.name)?;
        match (volume.config_map, volume.secret) {
            (Some(config_map), None) => Some(MountedFile::ConfigMap {
                name: config_map.name,
                key,
            }),
            (None, Some(secret)) => {
                // A Secret volume with items holds each item's key under the item's path.
                let key = match &secret.items {
                    Some(items) => items.iter().find(|item| item.path == key)?.key.clone(),
                    None => key,
                };
                Some(MountedFile::Secret {
                    name: secret.secret_name?,
                    key,
                })
            }
            _ => None,
        }
    }

    fn args(&self) -> Vec<String> {
        self.container().args.unwrap_or_default()
    }

    /// Every value of a repeatable `--flag=value`, in order.
    fn flag_values(&self, flag: &str) -> Vec<String> {
        let prefix = format!("{flag}=");
        self.args()
            .iter()
            .filter_map(|arg| arg.strip_prefix(&prefix).map(str::to_owned))
            .collect()
    }

    fn env(&self) -> Vec<EnvVar> {
        self.container().env.unwrap_or_default()
    }

    /// The literal value of an environment variable of the container.
    fn env_value(&self, name: &str) -> Option<String> {
        self.env()
            .into_iter()
            .find(|var| var.name == name)
            .and_then(|var| var.value)
    }

    /// The value of `--flag=value` in the container's arguments (the last one, as the parser does).
    fn flag(&self, flag: &str) -> Option<String> {
        let prefix = format!("{flag}=");
        self.args()
            .iter()
            .rev()
            .find_map(|arg| arg.strip_prefix(&prefix).map(str::to_owned))
    }
}

#[derive(Debug, PartialEq, Eq)]
enum MountedFile {
    ConfigMap { name: String, key: String },
    Secret { name: String, key: String },
}

/// One permission: (API group, resource, resource name or "*" for all, verb). Rules are compared
/// as the set of these, so two ways of writing the same grant compare equal and any grant more or
/// less does not.
type Grant = (String, String, String, String);

fn grants(rules: &[PolicyRule]) -> BTreeSet<Grant> {
    let mut grants = BTreeSet::new();
    for rule in rules {
        assert!(
            rule.non_resource_urls.as_ref().is_none_or(Vec::is_empty),
            "{rule:?}"
        );
        let all = vec!["*".to_owned()];
        let names = rule
            .resource_names
            .as_ref()
            .filter(|names| !names.is_empty())
            .unwrap_or(&all);
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for name in names {
                    for verb in &rule.verbs {
                        grants.insert((
                            group.clone(),
                            resource.clone(),
                            name.clone(),
                            verb.clone(),
                        ));
                    }
                }
            }
        }
    }
    grants
}

/// The objects of the plain manifests the chart stands for (the kwok example ConfigMaps are not
/// part of the chart: they describe the user's node groups).
fn plain_manifests() -> Vec<Value> {
    ["deployment.yaml", "rbac.yaml"]
        .iter()
        .flat_map(|name| {
            let path = deploy_dir().join("manifests").join(name);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            documents(&text, name)
        })
        .collect()
}

fn plain<T: DeserializeOwned>(kind: &str) -> T {
    let object = plain_manifests()
        .into_iter()
        .find(|object| kind_of(object) == kind)
        .unwrap_or_else(|| panic!("deploy/manifests has no {kind}"));
    serde_yaml_ng::from_value(object).unwrap_or_else(|e| panic!("the plain {kind}: {e}"))
}

/// The objects of `deploy/<path>`.
fn deploy_objects(path: &str) -> Vec<Value> {
    let file = deploy_dir().join(path);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    documents(&text, path)
}

fn deploy_object<T: DeserializeOwned>(path: &str, kind: &str) -> T {
    let object = deploy_objects(path)
        .into_iter()
        .find(|object| kind_of(object) == kind)
        .unwrap_or_else(|| panic!("deploy/{path} has no {kind}"));
    serde_yaml_ng::from_value(object).unwrap_or_else(|e| panic!("the {kind} of {path}: {e}"))
}

/// The grants of `deploy/clusterapi/rbac-management.yaml`, what the provider needs on the
/// management cluster.
fn plain_management_grants() -> BTreeSet<Grant> {
    let role: ClusterRole = deploy_object("clusterapi/rbac-management.yaml", "ClusterRole");
    let grants = grants(&role.rules.unwrap_or_default());
    assert!(!grants.is_empty());
    grants
}

/// The name the chart gives the management cluster's ClusterRole and its binding.
fn management_role_name() -> String {
    format!("{RELEASE}-clusterapi-management")
}

fn kinds(objects: &[Value]) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for object in objects {
        *kinds.entry(kind_of(object).to_owned()).or_default() += 1;
    }
    kinds
}

/// Runs the built `ferroscale` with the container's arguments and [`SENTINEL_FLAG`]; returns the
/// error lines it printed.
fn ferroscale_errors(args: &[String]) -> Vec<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_ferroscale"))
        .args(args)
        .arg(SENTINEL_FLAG)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run ferroscale");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(2),
        "ferroscale {args:?} {SENTINEL_FLAG} should refuse the unknown flag; stderr:\n{stderr}"
    );
    stderr
        .lines()
        .filter(|line| line.starts_with("error:"))
        .map(str::to_owned)
        .collect()
}

fn assert_accepted_by_ferroscale_run(rendered: &Rendered) {
    let args = rendered.args();
    assert_eq!(args.first().map(String::as_str), Some("run"), "{args:?}");
    let errors = ferroscale_errors(&args);
    assert!(
        errors.len() == 1 && errors[0].contains(SENTINEL_FLAG),
        "`ferroscale {}` refused more than the test's own unknown flag: {errors:#?}",
        args.join(" ")
    );
}

fn assert_same<T: PartialEq + Debug>(what: &str, chart: T, plain: T) {
    assert_eq!(
        chart, plain,
        "{what}: the chart differs from deploy/manifests"
    );
}

#[test]
fn default_values_render_the_objects_of_the_plain_manifests_in_the_release_namespace() {
    let rendered = Rendered::of(None);
    assert_same(
        "kinds of objects",
        kinds(&rendered.objects),
        kinds(&plain_manifests()),
    );
    for object in &rendered.objects {
        let kind = kind_of(object);
        let namespace = object["metadata"].get("namespace").and_then(Value::as_str);
        match kind {
            "ClusterRole" | "ClusterRoleBinding" => assert_eq!(namespace, None, "{object:?}"),
            _ => assert_eq!(namespace, Some(NAMESPACE), "{kind} {object:?}"),
        }
    }
    // Typed parsing: every object is a valid one of its kind (numbers where numbers go, ...).
    let _: Deployment = rendered.one("Deployment");
    let _: Service = rendered.one("Service");
    let _: PodDisruptionBudget = rendered.one("PodDisruptionBudget");
    let _: ServiceAccount = rendered.one("ServiceAccount");
    let _: ClusterRoleBinding = rendered.one("ClusterRoleBinding");
    let _: RoleBinding = rendered.one("RoleBinding");
}

#[test]
fn the_externalgrpc_provider_adds_only_its_cloud_config() {
    let mut expected = kinds(&plain_manifests());
    *expected.entry("ConfigMap".to_owned()).or_default() += 1;
    assert_same(
        "kinds of objects",
        kinds(&Rendered::of(Some(EXTERNALGRPC_VALUES)).objects),
        expected,
    );
}

#[test]
fn the_rbac_rules_are_exactly_those_of_the_plain_manifests() {
    let plain_cluster_role: ClusterRole = plain("ClusterRole");
    let plain_role: Role = plain("Role");
    let plain_cluster_grants = grants(&plain_cluster_role.rules.unwrap_or_default());
    let plain_namespace_grants = grants(&plain_role.rules.unwrap_or_default());
    assert!(!plain_cluster_grants.is_empty() && !plain_namespace_grants.is_empty());

    for values in [None, Some(USER_VALUES)] {
        let rendered = Rendered::of(values);
        let cluster_role: ClusterRole = rendered.one("ClusterRole");
        let role: Role = rendered.one("Role");
        assert!(cluster_role.aggregation_rule.is_none());
        assert_same(
            "ClusterRole rules",
            grants(&cluster_role.rules.unwrap_or_default()),
            plain_cluster_grants.clone(),
        );
        assert_same(
            "Role rules",
            grants(&role.rules.unwrap_or_default()),
            plain_namespace_grants.clone(),
        );
    }
}

#[test]
fn without_kwok_the_autoscaler_may_not_create_or_delete_nodes() {
    // Only the kwok provider writes Node objects; other providers' machines register themselves.
    let plain_cluster_role: ClusterRole = plain("ClusterRole");
    let node_writes: BTreeSet<Grant> = ["create", "delete"]
        .iter()
        .map(|verb| ("".into(), "nodes".into(), "*".into(), (*verb).into()))
        .collect();
    let plain_grants = grants(&plain_cluster_role.rules.unwrap_or_default());
    assert!(node_writes.is_subset(&plain_grants), "{plain_grants:?}");

    for values in [EXTERNALGRPC_VALUES, CLUSTERAPI_VALUES, EXOSCALE_VALUES] {
        let rendered = Rendered::of(Some(values));
        let cluster_role: ClusterRole = rendered
            .named("ClusterRole", RELEASE)
            .expect("the autoscaler's ClusterRole");
        assert_same(
            "ClusterRole rules without kwok",
            grants(&cluster_role.rules.unwrap_or_default()),
            plain_grants.difference(&node_writes).cloned().collect(),
        );
        let plain_role: Role = plain("Role");
        let role: Role = rendered.one("Role");
        assert_same(
            "Role rules",
            grants(&role.rules.unwrap_or_default()),
            grants(&plain_role.rules.unwrap_or_default()),
        );
    }
}

/// docs/cloud-node-controller.md CNC-112: with `--cloud-node-controller` in the arguments, however
/// it is written, the ClusterRole also grants `delete` on nodes (`update` it has already); written
/// false, or absent, it does not.
#[test]
fn the_cloud_node_controller_may_delete_nodes_and_only_it() {
    let plain_cluster_role: ClusterRole = plain("ClusterRole");
    let plain_grants = grants(&plain_cluster_role.rules.unwrap_or_default());
    let grant = |verb: &str| -> Grant { ("".into(), "nodes".into(), "*".into(), verb.into()) };
    let without_kwok: BTreeSet<Grant> = plain_grants
        .iter()
        .filter(|g| **g != grant("create") && **g != grant("delete"))
        .cloned()
        .collect();
    let with_delete: BTreeSet<Grant> = without_kwok
        .iter()
        .cloned()
        .chain([grant("delete")])
        .collect();
    for (arguments, expected) in [
        ("extraArgs:\n  cloud-node-controller: true\n", &with_delete),
        ("extraArgs:\n  cloud-node-controller: null\n", &with_delete),
        ("extraArgs: [--cloud-node-controller=true]\n", &with_delete),
        ("extraArgs: [--cloud-node-controller]\n", &with_delete),
        ("customArgs: [--cloud-node-controller=1]\n", &with_delete),
        (
            "extraArgs:\n  cloud-node-controller: false\n",
            &without_kwok,
        ),
        ("extraArgs:\n  v: 4\n", &without_kwok),
    ] {
        let rendered = Rendered::of_chart(&chart_dir(), &[EXTERNALGRPC_VALUES, arguments]);
        let cluster_role: ClusterRole = rendered
            .named("ClusterRole", RELEASE)
            .expect("the autoscaler's ClusterRole");
        assert_same(
            arguments,
            grants(&cluster_role.rules.unwrap_or_default()),
            expected.clone(),
        );
        assert_accepted_by_ferroscale_run(&rendered);
    }
}

#[test]
fn the_deployment_runs_as_the_service_account_that_the_rbac_binds() {
    for values in [
        None,
        Some(USER_VALUES),
        Some(EXTERNALGRPC_VALUES),
        Some(CLUSTERAPI_VALUES),
        Some(EXOSCALE_VALUES),
    ] {
        let rendered = Rendered::of(values);
        let account: ServiceAccount = rendered.one("ServiceAccount");
        let account_name = account.metadata.name.expect("ServiceAccount name");
        let deployment: Deployment = rendered.one("Deployment");
        let runs_as = deployment
            .spec
            .and_then(|spec| spec.template.spec)
            .and_then(|pod| pod.service_account_name);
        assert_eq!(runs_as.as_deref(), Some(account_name.as_str()));

        let cluster_role: ClusterRole = rendered
            .named("ClusterRole", RELEASE)
            .expect("the autoscaler's ClusterRole");
        let cluster_binding: ClusterRoleBinding = rendered
            .named("ClusterRoleBinding", RELEASE)
            .expect("the autoscaler's ClusterRoleBinding");
        assert_eq!(cluster_binding.role_ref.kind, "ClusterRole");
        assert_eq!(
            Some(cluster_binding.role_ref.name),
            cluster_role.metadata.name
        );
        let role: Role = rendered.one("Role");
        let binding: RoleBinding = rendered.one("RoleBinding");
        assert_eq!(binding.role_ref.kind, "Role");
        assert_eq!(Some(binding.role_ref.name), role.metadata.name);
        assert_eq!(role.metadata.namespace.as_deref(), Some(NAMESPACE));
        assert_eq!(binding.metadata.namespace.as_deref(), Some(NAMESPACE));

        for subjects in [cluster_binding.subjects, binding.subjects] {
            let subjects: Vec<_> = subjects
                .unwrap_or_default()
                .into_iter()
                .map(|s| (s.kind, s.name, s.namespace))
                .collect();
            assert_eq!(
                subjects,
                [(
                    "ServiceAccount".to_owned(),
                    account_name.clone(),
                    Some(NAMESPACE.to_owned())
                )]
            );
        }
        // The Lease and status ConfigMap go where the Role allows them.
        assert_eq!(rendered.flag("--namespace").as_deref(), Some(NAMESPACE));
    }
}

#[test]
fn the_service_and_the_disruption_budget_select_the_autoscaler_pods_on_its_port() {
    // The binary's own default address when the chart passes none, as upstream's chart does.
    let default_address = ferroscale_flags::lookup("address")
        .expect("--address is a flag")
        .default;
    for (values, address, container_port, service_port) in [
        (None, None, 8085, 8085),
        (Some(USER_VALUES), Some(":9090"), 9090, 8085),
        (
            Some("port: 9191\nservice: {servicePort: 80}\n"),
            Some(":9191"),
            9191,
            80,
        ),
    ] {
        let rendered = Rendered::of(values);
        let deployment: Deployment = rendered.one("Deployment");
        let spec = deployment.spec.expect("Deployment spec");
        let pod_labels = spec
            .template
            .metadata
            .and_then(|m| m.labels)
            .unwrap_or_default();
        let selected = |selector: &BTreeMap<String, String>| {
            !selector.is_empty()
                && selector
                    .iter()
                    .all(|(key, value)| pod_labels.get(key) == Some(value))
        };
        assert!(selected(&spec.selector.match_labels.unwrap_or_default()));

        let service: Service = rendered.one("Service");
        let service_spec = service.spec.expect("Service spec");
        assert!(selected(&service_spec.selector.unwrap_or_default()));
        let budget: PodDisruptionBudget = rendered.one("PodDisruptionBudget");
        let budget_selector = budget.spec.and_then(|spec| spec.selector);
        assert!(selected(
            &budget_selector
                .and_then(|s| s.match_labels)
                .unwrap_or_default()
        ));

        // /metrics and /health-check: the address the binary listens on is the container port
        // the probes and the Service's target use.
        assert_eq!(rendered.flag("--address").as_deref(), address);
        let listens_on = address.unwrap_or(default_address);
        assert_eq!(listens_on, format!(":{container_port}"));
        let container = rendered.container();
        let ports = container.ports.unwrap_or_default();
        assert_eq!(
            ports
                .iter()
                .map(|p| (p.name.as_deref(), p.container_port))
                .collect::<Vec<_>>(),
            [(Some("http"), container_port)]
        );
        let service_ports = service_spec.ports.unwrap_or_default();
        assert_eq!(service_ports.len(), 1, "{service_ports:?}");
        assert_eq!(service_ports[0].port, service_port);
        assert_eq!(
            service_ports[0].target_port,
            Some(IntOrString::String("http".to_owned()))
        );
        for probe in [container.liveness_probe, container.readiness_probe] {
            let get = probe.and_then(|p| p.http_get).expect("an HTTP probe");
            assert_eq!(get.path.as_deref(), Some("/health-check"));
            assert_eq!(get.port, IntOrString::String("http".to_owned()));
        }
    }
}

#[test]
fn the_rendered_arguments_are_accepted_by_ferroscale_run() {
    assert_accepted_by_ferroscale_run(&Rendered::of(None));
    assert_accepted_by_ferroscale_run(&Rendered::of(Some(USER_VALUES)));
    let without_election = Rendered::of(Some("leaderElect: false\n"));
    assert_eq!(
        without_election.flag("--leader-elect").as_deref(),
        Some("false")
    );
    assert_accepted_by_ferroscale_run(&without_election);
    let externalgrpc = Rendered::of(Some(EXTERNALGRPC_VALUES));
    assert_eq!(
        externalgrpc.flag("--cloud-provider").as_deref(),
        Some("externalgrpc")
    );
    assert_accepted_by_ferroscale_run(&externalgrpc);
}

#[test]
fn the_externalgrpc_cloud_config_is_mounted_and_names_the_mounted_tls_files() {
    let rendered = Rendered::of(Some(EXTERNALGRPC_VALUES));
    let path = PathBuf::from(rendered.flag("--cloud-config").expect("--cloud-config"));
    let Some(MountedFile::ConfigMap { name, key }) = rendered.mounted_file(&path) else {
        panic!(
            "--cloud-config={} is not a mounted ConfigMap key",
            path.display()
        );
    };
    let config_map: ConfigMap = rendered.one("ConfigMap");
    assert_eq!(config_map.metadata.name.as_deref(), Some(name.as_str()));
    let data = config_map.data.unwrap_or_default();
    let text = data
        .get(&key)
        .unwrap_or_else(|| panic!("ConfigMap {name} has no key {key}: {data:?}"));

    // What the provider will read at start-up.
    let config = ExternalGrpcConfig::from_yaml(&key, text)
        .unwrap_or_else(|e| panic!("the rendered cloud config is refused: {e}\n{text}"));
    assert_eq!(config.address.written, "provider.cloud-tools.svc:8086");
    assert_eq!(config.grpc_timeout, std::time::Duration::from_secs(10));
    let tls = config.tls.expect("mutual TLS with a tlsSecret");
    for (file, secret_key) in [
        (&tls.cert, "tls.crt"),
        (&tls.key, "tls.key"),
        (&tls.ca_cert, "ca.crt"),
    ] {
        assert_eq!(
            rendered.mounted_file(file),
            Some(MountedFile::Secret {
                name: "provider-client-certificate".to_owned(),
                key: secret_key.to_owned(),
            }),
            "{}",
            file.display()
        );
    }
    // The kwok provider's setting is not passed to another provider.
    let env = rendered.container().env.unwrap_or_default();
    assert!(
        env.iter().all(|var| var.name != "KWOK_PROVIDER_CONFIGMAP"),
        "{env:?}"
    );

    // Without a Secret: a plain connection, and nothing mounted for TLS.
    let plain_values = "cloudProvider: externalgrpc\nexternalgrpc: {address: \"[fd00::1]:8086\"}\n";
    let rendered = Rendered::of(Some(plain_values));
    let config_map: ConfigMap = rendered.one("ConfigMap");
    let text = config_map
        .data
        .unwrap_or_default()
        .into_values()
        .next()
        .expect("the cloud config");
    let config = ExternalGrpcConfig::from_yaml("plain", &text)
        .unwrap_or_else(|e| panic!("the rendered cloud config is refused: {e}\n{text}"));
    assert_eq!(config.address.written, "[fd00::1]:8086");
    assert_eq!(config.tls, None);
    assert_eq!(rendered.pod().volumes.unwrap_or_default().len(), 1);
}

#[test]
fn changing_the_externalgrpc_config_restarts_the_pods() {
    let pod_annotations = |values: &str| {
        let deployment: Deployment = Rendered::of(Some(values)).one("Deployment");
        deployment
            .spec
            .and_then(|spec| spec.template.metadata)
            .and_then(|metadata| metadata.annotations)
            .unwrap_or_default()
    };
    let before = pod_annotations(EXTERNALGRPC_VALUES);
    assert!(!before.is_empty());
    let after = pod_annotations(&EXTERNALGRPC_VALUES.replace("10s", "20s"));
    assert_ne!(before, after);
    assert_eq!(before, pod_annotations(EXTERNALGRPC_VALUES));
}

#[test]
fn a_values_file_sets_the_replicas_and_appends_extra_flags_verbatim() {
    let defaults = Rendered::of(None);
    let deployment: Deployment = defaults.one("Deployment");
    assert_eq!(deployment.spec.and_then(|s| s.replicas), Some(1));
    assert_eq!(defaults.flag("--expander"), None);

    let rendered = Rendered::of(Some(USER_VALUES));
    let deployment: Deployment = rendered.one("Deployment");
    assert_eq!(deployment.spec.and_then(|s| s.replicas), Some(2));
    let args = rendered.args();
    let extra = [
        "--expander=least-waste",
        "--scale-down-unneeded-time=5m",
        "--max-nodes-total=50",
    ];
    // Last, in the user's order, so a user's flag overrides one the chart sets.
    assert!(args.ends_with(&extra.map(String::from)), "{args:?}");
    assert_eq!(rendered.flag("--scan-interval").as_deref(), Some("30s"));
    assert_eq!(rendered.flag("--v").as_deref(), Some("4"));
    assert_eq!(rendered.flag("--cloud-provider").as_deref(), Some("kwok"));
    assert_eq!(
        rendered.pod().priority_class_name,
        None,
        "an empty priorityClassName sets none"
    );
}

#[test]
fn an_extra_flag_ferroscale_refuses_is_named_when_the_chart_runs() {
    // The chart passes extra flags through untouched; the binary then refuses a flag value it
    // cannot use, naming the flag and the value, rather than ignoring it.
    let rendered = Rendered::of(Some("extraArgs: [--enable-provisioning-requests=maybe]\n"));
    let errors = ferroscale_errors(&rendered.args());
    assert!(
        errors
            .iter()
            .any(|e| e.contains("--enable-provisioning-requests") && e.contains("maybe")),
        "{errors:#?}"
    );
    // The same flag with a value it takes is accepted.
    assert_accepted_by_ferroscale_run(&Rendered::of(Some(
        "extraArgs: [--enable-provisioning-requests=true]\n",
    )));
}

#[test]
fn values_the_binary_cannot_use_fail_the_install_with_the_value_named() {
    for (values, named) in [
        ("cloudProvider: aws\n", "cloudProvider"),
        ("cloudProvider: externalgrpc\n", "externalgrpc.address"),
        (
            "cloudProvider: externalgrpc\nexternalgrpc: {address: provider}\n",
            "externalgrpc/address",
        ),
        ("replicas: 2\n", "replicas"),
        ("extraArgs: [expander=least-waste]\n", "extraArgs"),
        ("port: \"8085\"\n", "port"),
        ("cloudProvider: gce\n", "cloudProvider"),
        (
            "clusterapi: {autoDiscovery: \"clusterapi:namespace=a\"}\n",
            "clusterapi/autoDiscovery",
        ),
        // The flag's whole value, as docs/clusterapi.md writes it, not only the part after it.
        (
            "clusterapi: {autoDiscovery: [namespace=team-a]}\n",
            "clusterapi/autoDiscovery/0",
        ),
        (
            "clusterapi: {managementKubeconfigSecret: prod-kubeconfig}\n",
            "clusterapi/managementKubeconfigSecret",
        ),
        (
            "clusterapi: {managementRbac: \"no\"}\n",
            "clusterapi/managementRbac",
        ),
        (
            "clusterapi: {scaleZeroDefaultArch: arm}\n",
            "clusterapi/scaleZeroDefaultArch",
        ),
        ("clusterapi: {namespace: team-a}\n", "namespace"),
        // The exoscale provider cannot scale from zero: a minimum of 0 is refused at install.
        (
            "exoscale: {nodes: [\"0:10:workers\"]}\n",
            "exoscale/nodes/0",
        ),
        ("exoscale: {nodes: [\"1:10\"]}\n", "exoscale/nodes/0"),
        (
            "exoscale: {credentialsSecret: \"\"}\n",
            "exoscale/credentialsSecret",
        ),
    ] {
        match helm_template(Some(values)) {
            Ok(text) => panic!("helm rendered {values:?}:\n{text}"),
            Err(error) => assert!(error.contains(named), "{values:?}: {error}"),
        }
    }
}

/// The Cluster API provider's start-up configuration from the container's environment and its
/// `--node-group-auto-discovery` flags, as the binary builds it.
fn clusterapi_config(rendered: &Rendered) -> ClusterApiConfig {
    ClusterApiConfig::from_env(
        |name| rendered.env_value(name),
        &rendered.flag_values("--node-group-auto-discovery"),
    )
    .unwrap_or_else(|e| panic!("the clusterapi provider refuses the rendered configuration: {e}"))
}

#[test]
fn the_clusterapi_values_reach_the_provider_as_flags_and_environment() {
    let rendered = Rendered::of(Some(CLUSTERAPI_VALUES));
    assert_accepted_by_ferroscale_run(&rendered);
    assert_eq!(
        rendered.flag("--cloud-provider").as_deref(),
        Some("clusterapi")
    );
    assert_eq!(
        rendered
            .flag("--clusterapi-cloud-config-authoritative")
            .as_deref(),
        Some("true")
    );
    let config = clusterapi_config(&rendered);
    assert_eq!(
        config.discovery,
        [
            DiscoverySpec {
                namespace: "team-a".to_owned(),
                ..DiscoverySpec::default()
            },
            DiscoverySpec {
                cluster_name: "prod".to_owned(),
                labels: [("autoscale".to_owned(), "true".to_owned())].into(),
                ..DiscoverySpec::default()
            },
        ]
    );
    assert_eq!(config.keys.group(), "cluster.example.com");
    assert_eq!(config.version.as_deref(), Some("v1beta2"));
    assert_eq!(config.default_architecture, "arm64");
    // No other provider's settings.
    let env = rendered.env();
    assert!(
        env.iter().all(|var| var.name == "POD_NAMESPACE"
            || var.name == "SERVICE_ACCOUNT"
            || var.name.starts_with("CAPI_")),
        "{env:?}"
    );

    // Only the provider selected: the provider's defaults, nothing the values did not ask for.
    let defaults = Rendered::of(Some("cloudProvider: clusterapi\n"));
    assert_accepted_by_ferroscale_run(&defaults);
    assert_eq!(defaults.flag("--cloud-config"), None);
    assert_eq!(
        defaults.flag("--clusterapi-cloud-config-authoritative"),
        None
    );
    let config = clusterapi_config(&defaults);
    assert!(config.discovery.is_empty(), "{:?}", config.discovery);
    assert_eq!(config.keys.group(), "cluster.x-k8s.io");
    assert_eq!(config.version, None);
    assert_eq!(config.default_architecture, "amd64");
    assert!(
        defaults
            .env()
            .iter()
            .all(|var| !var.name.starts_with("CAPI_")),
        "{:?}",
        defaults.env()
    );
    assert_eq!(defaults.pod().volumes, None);

    // The values of the section are the clusterapi provider's only.
    let kwok = Rendered::of(Some(&CLUSTERAPI_VALUES.replace("clusterapi\n", "kwok\n")));
    assert_eq!(kwok.flag("--cloud-provider").as_deref(), Some("kwok"));
    assert!(kwok.flag_values("--node-group-auto-discovery").is_empty());
    assert_eq!(kwok.flag("--cloud-config"), None);
    assert_eq!(kwok.env_value("CAPI_GROUP"), None);
}

#[test]
fn the_management_kubeconfig_secret_is_mounted_read_only_as_the_cloud_config() {
    for (values, key) in [
        (CLUSTERAPI_VALUES.to_owned(), "value"),
        (
            CLUSTERAPI_VALUES.replace(
                "{name: prod-kubeconfig}",
                "{name: prod-kubeconfig, key: management.conf}",
            ),
            "management.conf",
        ),
    ] {
        let rendered = Rendered::of(Some(&values));
        let path = PathBuf::from(rendered.flag("--cloud-config").expect("--cloud-config"));
        assert_eq!(
            rendered.mounted_file(&path),
            Some(MountedFile::Secret {
                name: "prod-kubeconfig".to_owned(),
                key: key.to_owned(),
            }),
            "--cloud-config={}",
            path.display()
        );
        let mounts = rendered.container().volume_mounts.unwrap_or_default();
        assert!(
            mounts
                .iter()
                .filter(|mount| path.starts_with(&mount.mount_path))
                .all(|mount| mount.read_only == Some(true)),
            "{mounts:?}"
        );
        assert_accepted_by_ferroscale_run(&rendered);
        // A Secret the user creates: the chart renders none.
        assert!(
            rendered.objects.iter().all(|o| kind_of(o) != "Secret"),
            "{:?}",
            kinds(&rendered.objects)
        );
    }
}

#[test]
fn the_management_rbac_is_that_of_deploy_clusterapi_for_the_chart_service_account() {
    let plain = plain_management_grants();
    let name = management_role_name();
    for (values, group) in [
        ("cloudProvider: clusterapi\n", "cluster.x-k8s.io"),
        // A renamed Cluster API group is the one the provider then reads and scales.
        (CLUSTERAPI_VALUES, "cluster.example.com"),
    ] {
        let rendered = Rendered::of(Some(values));
        let role: ClusterRole = rendered
            .named("ClusterRole", &name)
            .unwrap_or_else(|| panic!("{values:?} renders no ClusterRole {name}"));
        let expected: BTreeSet<Grant> = plain
            .iter()
            .map(|(api_group, resource, names, verb)| {
                let api_group = if api_group == "cluster.x-k8s.io" {
                    group
                } else {
                    api_group
                };
                (
                    api_group.to_owned(),
                    resource.clone(),
                    names.clone(),
                    verb.clone(),
                )
            })
            .collect();
        assert_eq!(
            grants(&role.rules.unwrap_or_default()),
            expected,
            "{values:?}: the management ClusterRole differs from deploy/clusterapi/rbac-management.yaml"
        );
        assert_eq!(clusterapi_config(&rendered).keys.group(), group);

        let binding: ClusterRoleBinding = rendered
            .named("ClusterRoleBinding", &name)
            .unwrap_or_else(|| panic!("{values:?} renders no ClusterRoleBinding {name}"));
        assert_eq!(
            (
                binding.role_ref.kind.as_str(),
                binding.role_ref.name.as_str()
            ),
            ("ClusterRole", name.as_str())
        );
        let account: ServiceAccount = rendered.one("ServiceAccount");
        let subjects: Vec<_> = binding
            .subjects
            .unwrap_or_default()
            .into_iter()
            .map(|s| (s.kind, s.name, s.namespace))
            .collect();
        assert_eq!(
            subjects,
            [(
                "ServiceAccount".to_owned(),
                account.metadata.name.expect("ServiceAccount name"),
                Some(NAMESPACE.to_owned())
            )]
        );
        let mut expected_kinds = kinds(&plain_manifests());
        *expected_kinds.entry("ClusterRole".to_owned()).or_default() += 1;
        *expected_kinds
            .entry("ClusterRoleBinding".to_owned())
            .or_default() += 1;
        assert_same("kinds of objects", kinds(&rendered.objects), expected_kinds);
    }

    // Not when disabled (the management cluster is elsewhere) nor for another provider.
    for values in [
        "cloudProvider: clusterapi\nclusterapi: {managementRbac: false}\n",
        "clusterapi: {managementRbac: true}\n",
        EXTERNALGRPC_VALUES,
        EXOSCALE_VALUES,
    ] {
        let rendered = Rendered::of(Some(values));
        assert!(
            rendered
                .named::<ClusterRole>("ClusterRole", &name)
                .is_none()
                && rendered
                    .named::<ClusterRoleBinding>("ClusterRoleBinding", &name)
                    .is_none(),
            "{values:?} grants the management cluster's RBAC"
        );
        let cluster_roles = rendered
            .objects
            .iter()
            .filter(|o| kind_of(o) == "ClusterRole")
            .count();
        assert_eq!(cluster_roles, 1, "{values:?}");
    }
}

/// The container's environment with every Secret reference resolved against `secret`, as the
/// kubelet would: the names it cannot resolve are left out.
fn resolved_env(env: &[EnvVar], secret: &Secret) -> BTreeMap<String, String> {
    let data = secret.string_data.clone().unwrap_or_default();
    env.iter()
        .filter_map(|var| {
            if let Some(value) = &var.value {
                return Some((var.name.clone(), value.clone()));
            }
            let reference = var.value_from.as_ref()?.secret_key_ref.as_ref()?;
            (Some(&reference.name) == secret.metadata.name.as_ref())
                .then(|| data.get(&reference.key))
                .flatten()
                .map(|value| (var.name.clone(), value.clone()))
        })
        .collect()
}

#[test]
fn the_exoscale_credentials_come_from_the_secret_keys_and_reach_the_provider() {
    let rendered = Rendered::of(Some(EXOSCALE_VALUES));
    assert_accepted_by_ferroscale_run(&rendered);
    assert_eq!(
        rendered.flag("--cloud-provider").as_deref(),
        Some("exoscale")
    );
    let nodes: Vec<NodeGroupSpec> = rendered
        .flag_values("--nodes")
        .iter()
        .map(|spec| {
            NodeGroupSpec::parse(spec)
                .unwrap_or_else(|e| panic!("the provider refuses --nodes={spec}: {e:?}"))
        })
        .collect();
    assert_eq!(
        nodes,
        [
            NodeGroupSpec {
                min: 1,
                max: 10,
                name: "workers".to_owned()
            },
            NodeGroupSpec {
                min: 2,
                max: 4,
                name: "gpu:a100".to_owned()
            },
        ]
    );

    // Each credential is a reference to its key of the Secret; none is written in the chart.
    let env = rendered.env();
    for (variable, key) in [
        ("EXOSCALE_API_KEY", "api-key"),
        ("EXOSCALE_API_SECRET", "api-secret"),
        ("EXOSCALE_ZONE", "api-zone"),
    ] {
        let var = env
            .iter()
            .find(|var| var.name == variable)
            .unwrap_or_else(|| panic!("no {variable} in {env:?}"));
        assert_eq!(var.value, None, "{var:?}");
        let reference = var
            .value_from
            .as_ref()
            .and_then(|from| from.secret_key_ref.clone())
            .unwrap_or_else(|| panic!("{variable} is not from a Secret: {var:?}"));
        assert_eq!(
            (reference.name.as_str(), reference.key.as_str()),
            ("exoscale-production", key)
        );
    }
    assert!(
        rendered.objects.iter().all(|o| kind_of(o) != "Secret"),
        "{:?}",
        kinds(&rendered.objects)
    );
    assert_same(
        "kinds of objects",
        kinds(&rendered.objects),
        kinds(&plain_manifests()),
    );
    assert_eq!(rendered.env_value("KWOK_PROVIDER_CONFIGMAP"), None);

    // With the documented Secret of deploy/exoscale, the provider reads all it needs.
    let secret: Secret = deploy_object("exoscale/secret.yaml", "Secret");
    let defaults = Rendered::of(Some("cloudProvider: exoscale\n"));
    assert_accepted_by_ferroscale_run(&defaults);
    assert!(defaults.flag_values("--nodes").is_empty());
    let environment = resolved_env(&defaults.env(), &secret);
    let config = ExoscaleConfig::from_lookup(|name| environment.get(name).cloned())
        .unwrap_or_else(|e| panic!("the provider refuses the rendered environment: {e}"));
    let data = secret.string_data.clone().unwrap_or_default();
    assert_eq!(Some(&config.zone), data.get("api-zone"));
    assert_eq!(
        Some(config.api_key.expose()),
        data.get("api-key").map(String::as_str)
    );
    assert_eq!(
        Some(config.api_secret.expose()),
        data.get("api-secret").map(String::as_str)
    );
    assert_eq!(config.environment, "api");
    // The same environment as the plain manifest of deploy/exoscale.
    let plain: Deployment = deploy_object("exoscale/autoscaler.yaml", "Deployment");
    let plain_env = plain
        .spec
        .and_then(|spec| spec.template.spec)
        .and_then(|pod| pod.containers.into_iter().next())
        .and_then(|container| container.env)
        .unwrap_or_default();
    assert_eq!(
        defaults
            .env()
            .into_iter()
            .filter(|var| var.name.starts_with("EXOSCALE_"))
            .collect::<Vec<_>>(),
        plain_env
    );

    // Another API environment, with the same credentials.
    let environment = resolved_env(
        &Rendered::of(Some(
            &EXOSCALE_VALUES.replace("exoscale-production", "exoscale-api-credentials"),
        ))
        .env(),
        &secret,
    );
    let config = ExoscaleConfig::from_lookup(|name| environment.get(name).cloned())
        .unwrap_or_else(|e| panic!("the provider refuses the rendered environment: {e}"));
    assert_eq!(config.environment, "ppapi");
}

#[test]
fn the_capacity_crds_are_rendered_only_when_asked_and_equal_the_plain_manifests() {
    let crds = |objects: &[Value]| -> Vec<Value> {
        objects
            .iter()
            .filter(|o| kind_of(o) == "CustomResourceDefinition")
            .cloned()
            .collect()
    };
    assert!(crds(&Rendered::of(None).objects).is_empty());
    let rendered = Rendered::of(Some("crds:\n  install: true\n"));
    let mut plain = Vec::new();
    for file in [
        "crds/autoscaling.x-k8s.io_provisioningrequests.yaml",
        "crds/autoscaling.x-k8s.io_capacitybuffers.yaml",
        "crds/autoscaling.x-k8s.io_capacityquotas.yaml",
    ] {
        plain.extend(deploy_objects(file));
    }
    assert_same("capacity CRDs", crds(&rendered.objects), plain);
}
