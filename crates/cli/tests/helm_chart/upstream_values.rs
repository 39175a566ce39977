//! Values files written for upstream's `cluster-autoscaler` chart (9.x), rendered by this chart.
//!
//! The expected container arguments are written out by hand from upstream's templates, as facts:
//! `--cloud-provider`, then `--namespace` (with the Cluster API mode `kubeconfig-incluster`,
//! `clusterAPIConfigMapsNamespace` or `kube-system`), one `--nodes=<minSize>:<maxSize>:<name>` per
//! `autoscalingGroups` item, the clusterapi provider's `--node-group-auto-discovery` and the
//! flags of its mode, then `extraArgs` in key order (a key's text from its first `_` dropped, a
//! null value giving the flag alone), then `customArgs` verbatim. Upstream's command starts with
//! `./cluster-autoscaler` where this chart's arguments start with `run`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use ferroscale_core::scale_up::PriorityConfig;
use ferroscale_provider_clusterapi::discovery::DiscoverySpec;
use ferroscale_provider_exoscale::NodeGroupSpec;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Affinity, ConfigMap, EnvVar, PodSecurityContext, Secret, SecurityContext, Service,
    ServiceAccount, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_yaml_ng::Value;

use super::{
    MountedFile, NAMESPACE, RELEASE, Rendered, assert_accepted_by_ferroscale_run, chart_dir,
    clusterapi_config, grants, helm_template_in, kind_of, kinds, management_role_name, plain,
    plain_management_grants, plain_manifests,
};

/// Every key of upstream's values at upstream's default, as an operator's values file copied from
/// upstream's chart carries them (the keys of several 9.x versions: `azureClusterName` of the
/// older ones, `civo*` of the newer). Only `cloudProvider` (upstream's default is `aws`) and the
/// image are the operator's own here; the files below add the settings of each provider.
const UPSTREAM_DEFAULTS: &str = r#"
affinity: {}
additionalLabels: {}
autoDiscovery:
  clusterName:
  namespace:
  tags:
    - k8s.io/cluster-autoscaler/enabled
    - k8s.io/cluster-autoscaler/{{ .Values.autoDiscovery.clusterName }}
  roles:
    - worker
  labels: []
autoscalingGroups: []
autoscalingGroupsnamePrefix: []
awsAccessKeyID: ""
awsRegion: us-east-1
awsSecretAccessKey: ""
azureClientID: ""
azureClientSecret: ""
azureResourceGroup: ""
azureSubscriptionID: ""
azureTenantID: ""
azureUseManagedIdentityExtension: false
azureUseWorkloadIdentityExtension: false
azureUserAssignedIdentityID: ""
azureVMType: vmss
azureEnableForceDelete: false
azureClusterName: ""
azureNodeResourceGroup: ""
civoApiUrl: https://api.civo.com
civoApiKey: ""
civoClusterID: ""
civoRegion: ""
cloudConfigPath: ""
cloudProvider: kwok
clusterAPICloudConfigPath: /etc/kubernetes/mgmt-kubeconfig
clusterAPIConfigMapsNamespace: ""
clusterAPIKubeconfigSecret: ""
clusterAPIMode: incluster-incluster
clusterAPIWorkloadKubeconfigPath: /etc/kubernetes/value
containerSecurityContext: {}
customArgs: []
deployment:
  annotations: {}
dnsPolicy: ClusterFirst
envFromConfigMap: ""
envFromSecret: ""
expanderPriorities: {}
extraArgs:
  logtostderr: true
  stderrthreshold: info
  v: 4
extraEnv: {}
extraEnvConfigMaps: {}
extraEnvSecrets: {}
extraObjects: []
extraVolumeMounts: []
extraVolumes: []
extraVolumeSecrets: {}
initContainers: []
fullnameOverride: ""
hostNetwork: false
image:
  repository: registry.example.com/ferroscale
  tag: "0.1.0"
  pullPolicy: IfNotPresent
  pullSecrets: []
kubeTargetVersionOverride: ""
kwokConfigMapName: kwok-provider-config
magnumCABundlePath: /etc/kubernetes/ca-bundle.crt
magnumClusterName: ""
nameOverride: ""
nodeSelector: {}
podAnnotations: {}
podDisruptionBudget:
  maxUnavailable: 1
podLabels: {}
priorityClassName: system-cluster-critical
priorityConfigMapAnnotations: {}
prometheusRule:
  enabled: false
  additionalLabels: {}
  namespace: monitoring
  interval:
  rules: []
rbac:
  create: true
  pspEnabled: false
  clusterScoped: true
  serviceAccount:
    annotations: {}
    create: true
    name: ""
    automountServiceAccountToken: true
replicaCount: 1
resources: {}
revisionHistoryLimit: 10
secretKeyRefNameOverride: ""
securityContext: {}
service:
  create: true
  annotations: {}
  labels: {}
  clusterIP: ""
  externalIPs: []
  loadBalancerIP: ""
  loadBalancerSourceRanges: []
  servicePort: 8085
  portName: http
  type: ClusterIP
serviceMonitor:
  enabled: false
  interval: 10s
  namespace: monitoring
  selector:
    release: prometheus-operator
  path: /metrics
  annotations: {}
  relabelings: {}
  metricRelabelings: {}
tolerations: []
topologySpreadConstraints: []
updateStrategy: {}
vpa:
  enabled: false
  updateMode: Auto
  containerPolicy: {}
"#;

/// The kwok provider under upstream's keys: its ConfigMap's name, the auto-discovery name that
/// makes upstream's chart render its Deployment, and flags.
const UPSTREAM_KWOK: &str = "
cloudProvider: kwok
kwokConfigMapName: kwok-templates
autoDiscovery:
  clusterName: kwok-cluster
extraArgs:
  expander: least-waste
  scale-down-delay-after-add: 2m
";

/// The externalgrpc provider: upstream's chart has no key for its cloud config, so it is a
/// Secret mounted through `extraVolumeSecrets` and named by `extraArgs`.
const UPSTREAM_EXTERNALGRPC: &str = "
cloudProvider: externalgrpc
autoscalingGroups:
  - {name: pool-a, minSize: 1, maxSize: 5}
extraArgs:
  cloud-config: /etc/externalgrpc/cloud-config.yaml
  scale-down-unneeded-time: 5m
extraVolumeSecrets:
  externalgrpc-config:
    name: externalgrpc-cloud-config
    mountPath: /etc/externalgrpc
";

/// The clusterapi provider with the management cluster elsewhere: its kubeconfig from a Secret
/// mounted where `clusterAPICloudConfigPath` says.
const UPSTREAM_CLUSTERAPI: &str = "
cloudProvider: clusterapi
autoDiscovery:
  clusterName: prod
  namespace: team-a
  labels:
    - autoscale: \"true\"
clusterAPIMode: incluster-kubeconfig
extraVolumeSecrets:
  management-kubeconfig:
    name: management-kubeconfig
    mountPath: /etc/kubernetes
    items:
      - {key: value, path: mgmt-kubeconfig}
";

/// The exoscale provider: bounds of two pools and the credentials' Secret.
const UPSTREAM_EXOSCALE: &str = "
cloudProvider: exoscale
autoscalingGroups:
  - {name: workers, minSize: 1, maxSize: 10}
  - {name: gpu, minSize: 2, maxSize: 4}
secretKeyRefNameOverride: exoscale-credentials
extraArgs:
  v: 2
";

/// Every generic Kubernetes key of upstream's values set away from its default.
const UPSTREAM_GENERIC: &str = r#"
fullnameOverride: scaler
replicaCount: 2
revisionHistoryLimit: 3
image:
  repository: registry.example.com/ferroscale
  tag: "1.2.3"
  pullPolicy: Always
  pullSecrets: [registry-credentials]
additionalLabels: {team: platform}
podLabels: {tier: control}
podAnnotations: {example.com/note: autoscaler}
deployment:
  annotations: {owner: platform}
updateStrategy:
  type: RollingUpdate
  rollingUpdate: {maxSurge: 0, maxUnavailable: 1}
priorityClassName: autoscaler-critical
dnsPolicy: Default
hostNetwork: true
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: node-role.kubernetes.io/control-plane, operator: Exists}
nodeSelector: {kubernetes.io/os: linux}
tolerations:
  - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: DoNotSchedule
    labelSelector: {matchLabels: {app.kubernetes.io/instance: autoscaler}}
securityContext: {runAsUser: 65532, fsGroup: 65532}
containerSecurityContext:
  runAsUser: 65532
  readOnlyRootFilesystem: true
resources:
  requests: {cpu: 200m, memory: 500Mi}
  limits: {memory: 2Gi}
initContainers:
  - {name: wait, image: busybox, command: [sh, -c, "true"]}
extraArgs:
  scale-down-unneeded-time: 5m
  v: 2
customArgs: [--max-nodes-total=100]
extraEnv: {RUST_BACKTRACE: "1", GOMAXPROCS: 2}
extraEnvConfigMaps:
  FROM_CONFIG: {name: settings, key: config-key}
  FROM_OWN_CONFIG: {key: own-key}
extraEnvSecrets:
  FROM_SECRET: {name: credentials, key: token}
envFromConfigMap: env-config
envFromSecret: env-secret
extraVolumes:
  - name: ca-bundle
    configMap: {name: ca-bundle}
extraVolumeMounts:
  - {name: ca-bundle, mountPath: /etc/ssl/custom, readOnly: true}
extraVolumeSecrets:
  tls:
    name: autoscaler-tls
    mountPath: /etc/tls
    items: [{key: tls.crt, path: cert.pem}]
  own: {mountPath: /etc/own}
rbac:
  serviceAccount:
    name: autoscaler-identity
    annotations: {iam.example.com/role: autoscaler}
    automountServiceAccountToken: false
service:
  annotations: {service.example.com/internal: "true"}
  labels: {exposed: "no"}
  clusterIP: 10.0.0.85
  externalIPs: [192.0.2.10]
  loadBalancerIP: 192.0.2.11
  loadBalancerSourceRanges: [192.0.2.0/24]
  servicePort: 9085
  portName: metrics
  type: LoadBalancer
serviceMonitor:
  enabled: true
  interval: 30s
  namespace: observability
  selector: {release: kube-prometheus}
  path: /metrics
  annotations: {example.com/note: scraped}
  relabelings:
    - {sourceLabels: [__meta_kubernetes_pod_node_name], targetLabel: node}
  metricRelabelings:
    - {action: drop, regex: go_.*, sourceLabels: [__name__]}
prometheusRule:
  enabled: true
  additionalLabels: {release: kube-prometheus}
  namespace: observability
  interval: 1m
  defaultRules: false
  rules:
    - alert: AutoscalerDown
      expr: 'absent(up{service="{{ include "ferroscale.fullname" . }}"})'
      for: 5m
podDisruptionBudget:
  minAvailable: 1
  maxUnavailable: null
vpa:
  enabled: true
  updateMode: Initial
  containerPolicy:
    minAllowed: {cpu: 20m, memory: 50Mi}
extraObjects:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: "{{ .Release.Name }}-extra"}
    data: {release: "{{ .Release.Name }}"}
  - |
    apiVersion: v1
    kind: Secret
    metadata:
      name: {{ .Release.Name }}-extra-text
    stringData: {note: text}
kubeTargetVersionOverride: 1.30.0
"#;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

/// The chart rendered with upstream's defaults and then `values`, as `helm install -f
/// upstream-defaults.yaml -f values.yaml` would.
fn with_upstream_defaults(values: &str) -> Rendered {
    Rendered::of_chart(&chart_dir(), &[UPSTREAM_DEFAULTS, values])
}

/// The container's arguments as upstream's chart renders them: after `run`, which stands where
/// upstream's command has its binary.
fn upstream_args(rendered: &Rendered) -> Vec<String> {
    let args = rendered.args();
    assert_eq!(args.first().map(String::as_str), Some("run"), "{args:?}");
    args[1..].to_vec()
}

/// A values key as YAML, deserialized into the type the rendered object holds it as.
fn value_of<T: serde::de::DeserializeOwned>(values: &str, path: &[&str]) -> T {
    let mut value: Value = serde_yaml_ng::from_str(values).expect("the values are YAML");
    for key in path {
        value = value
            .get(*key)
            .unwrap_or_else(|| panic!("no {path:?} in the values"))
            .clone();
    }
    serde_yaml_ng::from_value(value).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

#[test]
fn a_values_file_copied_from_upstream_renders_at_upstreams_defaults() {
    let rendered = with_upstream_defaults("cloudProvider: kwok\n");
    assert_eq!(
        upstream_args(&rendered),
        strings(&[
            "--cloud-provider=kwok",
            &format!("--namespace={NAMESPACE}"),
            "--logtostderr=true",
            "--stderrthreshold=info",
            "--v=4",
        ])
    );
    assert_accepted_by_ferroscale_run(&rendered);
    // The keys of other clouds at their defaults add nothing.
    super::assert_same(
        "kinds of objects",
        kinds(&rendered.objects),
        kinds(&plain_manifests()),
    );
}

#[test]
fn the_kwok_provider_under_upstreams_values_gets_upstreams_arguments() {
    let rendered = with_upstream_defaults(UPSTREAM_KWOK);
    assert_eq!(
        upstream_args(&rendered),
        strings(&[
            "--cloud-provider=kwok",
            &format!("--namespace={NAMESPACE}"),
            "--expander=least-waste",
            "--logtostderr=true",
            "--scale-down-delay-after-add=2m",
            "--stderrthreshold=info",
            "--v=4",
        ])
    );
    assert_accepted_by_ferroscale_run(&rendered);
    assert_eq!(
        rendered.env_value("KWOK_PROVIDER_CONFIGMAP").as_deref(),
        Some("kwok-templates")
    );
    // The older name of the key still works, and wins.
    let older = Rendered::of(Some("kwok: {configMap: older-name}\n"));
    assert_eq!(
        older.env_value("KWOK_PROVIDER_CONFIGMAP").as_deref(),
        Some("older-name")
    );
}

#[test]
fn the_externalgrpc_provider_under_upstreams_values_reads_the_mounted_cloud_config() {
    let rendered = with_upstream_defaults(UPSTREAM_EXTERNALGRPC);
    assert_eq!(
        upstream_args(&rendered),
        strings(&[
            "--cloud-provider=externalgrpc",
            &format!("--namespace={NAMESPACE}"),
            "--nodes=1:5:pool-a",
            "--cloud-config=/etc/externalgrpc/cloud-config.yaml",
            "--logtostderr=true",
            "--scale-down-unneeded-time=5m",
            "--stderrthreshold=info",
            "--v=4",
        ])
    );
    assert_accepted_by_ferroscale_run(&rendered);
    let path = PathBuf::from(rendered.flag("--cloud-config").expect("--cloud-config"));
    assert_eq!(
        rendered.mounted_file(&path),
        Some(MountedFile::Secret {
            name: "externalgrpc-cloud-config".to_owned(),
            key: "cloud-config.yaml".to_owned(),
        })
    );
    // The chart writes no cloud config of its own then.
    assert!(
        rendered.all("ConfigMap").is_empty(),
        "{:?}",
        kinds(&rendered.objects)
    );
    // Ferroscale's externalgrpc.address and a --cloud-config of the values would be two.
    let error = helm_template_in(
        &chart_dir(),
        &[
            UPSTREAM_EXTERNALGRPC,
            "externalgrpc: {address: provider:8086}\n",
        ],
    )
    .expect_err("two --cloud-config");
    assert!(
        error.contains("externalgrpc.address") && error.contains("/etc/externalgrpc"),
        "{error}"
    );
}

#[test]
fn the_clusterapi_provider_under_upstreams_values_gets_each_modes_arguments() {
    let rendered = with_upstream_defaults(UPSTREAM_CLUSTERAPI);
    assert_eq!(
        upstream_args(&rendered),
        strings(&[
            "--cloud-provider=clusterapi",
            &format!("--namespace={NAMESPACE}"),
            "--node-group-auto-discovery=clusterapi:clusterName=prod,namespace=team-a,autoscale=true",
            "--cloud-config=/etc/kubernetes/mgmt-kubeconfig",
            "--logtostderr=true",
            "--stderrthreshold=info",
            "--v=4",
        ])
    );
    assert_accepted_by_ferroscale_run(&rendered);
    // The provider reads the one discovery spec the values describe.
    assert_eq!(
        clusterapi_config(&rendered).discovery,
        [DiscoverySpec {
            cluster_name: "prod".to_owned(),
            namespace: "team-a".to_owned(),
            labels: [("autoscale".to_owned(), "true".to_owned())].into(),
        }]
    );
    let path = PathBuf::from(rendered.flag("--cloud-config").expect("--cloud-config"));
    assert_eq!(
        rendered.mounted_file(&path),
        Some(MountedFile::Secret {
            name: "management-kubeconfig".to_owned(),
            key: "value".to_owned(),
        })
    );
    // The management cluster is elsewhere: its permissions are not the chart's to grant.
    assert!(
        rendered
            .named::<ClusterRole>("ClusterRole", &management_role_name())
            .is_none()
    );

    // Each mode, as upstream's template renders it (after the discovery flag).
    let discovery = "--node-group-auto-discovery=clusterapi:clusterName=prod";
    for (mode, namespace, mode_args) in [
        ("incluster-incluster", NAMESPACE, vec![]),
        (
            "kubeconfig-incluster",
            "kube-system",
            vec![
                "--kubeconfig=/etc/kubernetes/value",
                "--clusterapi-cloud-config-authoritative",
            ],
        ),
        (
            "kubeconfig-kubeconfig",
            NAMESPACE,
            vec![
                "--kubeconfig=/etc/kubernetes/value",
                "--cloud-config=/etc/kubernetes/mgmt-kubeconfig",
            ],
        ),
        (
            "single-kubeconfig",
            NAMESPACE,
            vec!["--kubeconfig=/etc/kubernetes/value"],
        ),
    ] {
        let values = format!(
            "cloudProvider: clusterapi\nautoDiscovery: {{clusterName: prod}}\nclusterAPIMode: {mode}\n"
        );
        let rendered = with_upstream_defaults(&values);
        let mut expected = strings(&[
            "--cloud-provider=clusterapi",
            &format!("--namespace={namespace}"),
            discovery,
        ]);
        expected.extend(strings(&mode_args));
        expected.extend(strings(&[
            "--logtostderr=true",
            "--stderrthreshold=info",
            "--v=4",
        ]));
        assert_eq!(upstream_args(&rendered), expected, "{mode}");
        assert_accepted_by_ferroscale_run(&rendered);
        // Upstream grants the Cluster API permissions only when the management cluster is the
        // pod's own.
        let in_cluster = mode.ends_with("-incluster");
        assert_eq!(
            rendered
                .named::<ClusterRole>("ClusterRole", &management_role_name())
                .is_some(),
            in_cluster,
            "{mode}"
        );
    }

    // kubeconfig-incluster: the workload cluster's kubeconfig Secret is mounted where
    // --kubeconfig reads it, and the status lives in clusterAPIConfigMapsNamespace.
    let rendered = with_upstream_defaults(
        "cloudProvider: clusterapi\nautoDiscovery: {namespace: team-a}\n\
         clusterAPIMode: kubeconfig-incluster\nclusterAPIKubeconfigSecret: prod-kubeconfig\n\
         clusterAPIConfigMapsNamespace: autoscaling\n",
    );
    assert_eq!(rendered.flag("--namespace").as_deref(), Some("autoscaling"));
    assert_eq!(
        rendered.flag("--node-group-auto-discovery").as_deref(),
        Some("clusterapi:namespace=team-a")
    );
    let kubeconfig = PathBuf::from(rendered.flag("--kubeconfig").expect("--kubeconfig"));
    assert_eq!(
        rendered.mounted_file(&kubeconfig),
        Some(MountedFile::Secret {
            name: "prod-kubeconfig".to_owned(),
            key: "value".to_owned(),
        })
    );
    assert_accepted_by_ferroscale_run(&rendered);
    assert_eq!(
        clusterapi_config(&rendered).discovery,
        [DiscoverySpec {
            namespace: "team-a".to_owned(),
            ..DiscoverySpec::default()
        }]
    );
}

#[test]
fn the_exoscale_provider_under_upstreams_values_reads_its_bounds_and_secret() {
    let rendered = with_upstream_defaults(UPSTREAM_EXOSCALE);
    assert_eq!(
        upstream_args(&rendered),
        strings(&[
            "--cloud-provider=exoscale",
            &format!("--namespace={NAMESPACE}"),
            "--nodes=1:10:workers",
            "--nodes=2:4:gpu",
            "--logtostderr=true",
            "--stderrthreshold=info",
            "--v=2",
        ])
    );
    assert_accepted_by_ferroscale_run(&rendered);
    let nodes: Vec<NodeGroupSpec> = rendered
        .flag_values("--nodes")
        .iter()
        .map(|spec| NodeGroupSpec::parse(spec).unwrap_or_else(|e| panic!("--nodes={spec}: {e:?}")))
        .collect();
    assert_eq!(
        nodes.iter().map(|n| (n.min, n.max)).collect::<Vec<_>>(),
        [(1, 10), (2, 4)]
    );
    for variable in ["EXOSCALE_API_KEY", "EXOSCALE_API_SECRET", "EXOSCALE_ZONE"] {
        let reference = rendered
            .env()
            .into_iter()
            .find(|var| var.name == variable)
            .and_then(|var| var.value_from?.secret_key_ref)
            .unwrap_or_else(|| panic!("{variable} is not from a Secret"));
        assert_eq!(reference.name, "exoscale-credentials", "{variable}");
    }
    // A group that would start from zero is refused at install, as the provider would refuse it.
    let error = helm_template_in(
        &chart_dir(),
        &[
            UPSTREAM_EXOSCALE,
            "autoscalingGroups: [{name: workers, minSize: 0, maxSize: 10}]\n",
        ],
    )
    .expect_err("a minimum of 0");
    assert!(
        error.contains("autoscalingGroups[0].minSize") && error.contains("zero"),
        "{error}"
    );
}

#[test]
fn extra_args_render_as_upstreams_in_key_order_with_its_special_forms() {
    let rendered = with_upstream_defaults(
        "extraArgs:\n  v: null\n  balancing-ignore-label_2: zone\n  balancing-ignore-label_1: arch\n  \
         scale-down-enabled: null\n  skip-nodes-with-local-storage: false\n  \
         scale-down-utilization-threshold: 0.6\n  max-node-provision-time: 15m0s\n\
         customArgs: [--balance-similar-node-groups, --expander=random]\n",
    );
    assert_eq!(
        upstream_args(&rendered),
        strings(&[
            "--cloud-provider=kwok",
            &format!("--namespace={NAMESPACE}"),
            // Sorted by the whole key; the part from "_" on only tells repeated flags apart.
            "--balancing-ignore-label=arch",
            "--balancing-ignore-label=zone",
            "--logtostderr=true",
            "--max-node-provision-time=15m0s",
            // A null value: the flag alone (a default's null removes it, as for v).
            "--scale-down-enabled",
            "--scale-down-utilization-threshold=0.6",
            "--skip-nodes-with-local-storage=false",
            "--stderrthreshold=info",
            "--balance-similar-node-groups",
            "--expander=random",
        ])
    );
    assert_accepted_by_ferroscale_run(&rendered);
}

#[test]
fn ferroscales_single_flag_additions_come_before_extra_args() {
    let rendered = Rendered::of(Some(
        "scanInterval: 30s\nverbosity: 2\nleaderElect: false\nport: 9090\n\
         extraArgs: {v: 5, expander: least-waste}\n",
    ));
    assert_eq!(
        upstream_args(&rendered),
        strings(&[
            "--cloud-provider=kwok",
            &format!("--namespace={NAMESPACE}"),
            "--address=:9090",
            "--scan-interval=30s",
            "--leader-elect=false",
            "--v=2",
            "--expander=least-waste",
            "--logtostderr=true",
            "--stderrthreshold=info",
            "--v=5",
        ])
    );
    // The parser keeps the last value of a flag: extraArgs wins.
    assert_eq!(rendered.flag("--v").as_deref(), Some("5"));
    assert_accepted_by_ferroscale_run(&rendered);
}

#[test]
fn every_generic_key_renders_what_upstreams_chart_renders() {
    let rendered = with_upstream_defaults(UPSTREAM_GENERIC);
    let values = UPSTREAM_GENERIC;
    assert_eq!(
        upstream_args(&rendered),
        strings(&[
            "--cloud-provider=kwok",
            &format!("--namespace={NAMESPACE}"),
            "--logtostderr=true",
            "--scale-down-unneeded-time=5m",
            "--stderrthreshold=info",
            "--v=2",
            "--max-nodes-total=100",
        ])
    );
    assert_accepted_by_ferroscale_run(&rendered);

    // Names: fullnameOverride for the chart's objects, the ServiceAccount's own name.
    let deployment: Deployment = rendered
        .named("Deployment", "scaler")
        .expect("the Deployment named by fullnameOverride");
    let account: ServiceAccount = rendered
        .named("ServiceAccount", "autoscaler-identity")
        .expect("the ServiceAccount named by rbac.serviceAccount.name");
    assert_eq!(account.automount_service_account_token, Some(false));
    assert_eq!(
        account.metadata.annotations,
        Some(value_of(values, &["rbac", "serviceAccount", "annotations"]))
    );
    for kind in [
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
    ] {
        assert!(
            rendered
                .objects
                .iter()
                .any(|o| kind_of(o) == kind && o["metadata"]["name"].as_str() == Some("scaler")),
            "no {kind} named scaler"
        );
    }
    let binding: ClusterRoleBinding = rendered.one("ClusterRoleBinding");
    let role_binding: RoleBinding = rendered.one("RoleBinding");
    for subjects in [binding.subjects, role_binding.subjects] {
        let names: Vec<_> = subjects
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["autoscaler-identity"]);
    }
    // additionalLabels on every object the chart renders (extraObjects are the user's own).
    for object in &rendered.objects {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if name.contains("extra") {
            continue;
        }
        assert_eq!(
            object["metadata"]["labels"]["team"].as_str(),
            Some("platform"),
            "{} {name}",
            kind_of(object)
        );
    }

    // The Deployment and its pod.
    let metadata = deployment.metadata;
    assert_eq!(
        metadata.annotations,
        Some(value_of(values, &["deployment", "annotations"]))
    );
    let spec = deployment.spec.expect("Deployment spec");
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(spec.revision_history_limit, Some(3));
    let strategy = spec.strategy.expect("updateStrategy");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let rolling = strategy.rolling_update.expect("rollingUpdate");
    assert_eq!(
        (rolling.max_surge, rolling.max_unavailable),
        (Some(IntOrString::Int(0)), Some(IntOrString::Int(1)))
    );
    // Like upstream's chart, podLabels are part of the selector.
    let selector = spec.selector.match_labels.unwrap_or_default();
    assert_eq!(selector.get("tier").map(String::as_str), Some("control"));
    let template_metadata = spec.template.metadata.expect("pod metadata");
    let pod_labels = template_metadata.labels.unwrap_or_default();
    assert!(
        selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
        "{selector:?} {pod_labels:?}"
    );
    assert_eq!(pod_labels.get("team").map(String::as_str), Some("platform"));
    assert_eq!(
        template_metadata.annotations,
        Some(value_of(values, &["podAnnotations"]))
    );
    let pod = spec.template.spec.expect("pod spec");
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("autoscaler-identity")
    );
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("autoscaler-critical")
    );
    assert_eq!(pod.dns_policy.as_deref(), Some("Default"));
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(
        pod.image_pull_secrets
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.name)
            .collect::<Vec<_>>(),
        ["registry-credentials"]
    );
    let init: Vec<String> = pod
        .init_containers
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(init, ["wait"]);

    // Placement, exactly as written.
    assert_eq!(
        pod.affinity,
        Some(value_of::<Affinity>(values, &["affinity"]))
    );
    assert_eq!(pod.node_selector, Some(value_of(values, &["nodeSelector"])));
    assert_eq!(
        pod.tolerations,
        Some(value_of::<Vec<Toleration>>(values, &["tolerations"]))
    );
    assert_eq!(
        pod.topology_spread_constraints,
        Some(value_of::<Vec<TopologySpreadConstraint>>(
            values,
            &["topologySpreadConstraints"]
        ))
    );
    assert_eq!(
        pod.security_context,
        Some(value_of::<PodSecurityContext>(values, &["securityContext"]))
    );

    let container = rendered.container();
    assert_eq!(
        container.image.as_deref(),
        Some("registry.example.com/ferroscale:1.2.3")
    );
    assert_eq!(container.image_pull_policy.as_deref(), Some("Always"));
    assert_eq!(container.resources, Some(value_of(values, &["resources"])));
    // The values' container securityContext keys, over the chart's hardened defaults (helm merges
    // a values map into the default one).
    let security: SecurityContext = container.security_context.clone().expect("securityContext");
    assert_eq!(security.run_as_user, Some(65532));
    assert_eq!(security.read_only_root_filesystem, Some(true));

    // Environment: upstream's map of values, references with the full name as the default, and
    // envFrom.
    let env: BTreeMap<String, EnvVar> = rendered
        .env()
        .into_iter()
        .map(|var| (var.name.clone(), var))
        .collect();
    assert_eq!(env["RUST_BACKTRACE"].value.as_deref(), Some("1"));
    assert_eq!(env["GOMAXPROCS"].value.as_deref(), Some("2"));
    let config_ref = |name: &str| {
        let reference = env[name]
            .value_from
            .clone()
            .and_then(|from| from.config_map_key_ref)
            .unwrap_or_else(|| panic!("{name} is not from a ConfigMap"));
        (reference.name, reference.key)
    };
    assert_eq!(
        config_ref("FROM_CONFIG"),
        ("settings".to_owned(), "config-key".to_owned())
    );
    assert_eq!(
        config_ref("FROM_OWN_CONFIG"),
        ("scaler".to_owned(), "own-key".to_owned())
    );
    let secret_ref = env["FROM_SECRET"]
        .value_from
        .clone()
        .and_then(|from| from.secret_key_ref)
        .expect("FROM_SECRET from a Secret");
    assert_eq!(
        (secret_ref.name.as_str(), secret_ref.key.as_str()),
        ("credentials", "token")
    );
    let env_from: Vec<(Option<String>, Option<String>)> = container
        .env_from
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|from| {
            (
                from.secret_ref.map(|r| r.name),
                from.config_map_ref.map(|r| r.name),
            )
        })
        .collect();
    assert_eq!(
        env_from,
        [
            (Some("env-secret".to_owned()), None),
            (None, Some("env-config".to_owned()))
        ]
    );

    // Volumes: the Secrets of extraVolumeSecrets (read-only, the full name by default, items
    // kept), extraVolumes and their mounts.
    assert_eq!(
        rendered.mounted_file(&PathBuf::from("/etc/tls/cert.pem")),
        Some(MountedFile::Secret {
            name: "autoscaler-tls".to_owned(),
            key: "tls.crt".to_owned(),
        })
    );
    assert_eq!(
        rendered.mounted_file(&PathBuf::from("/etc/own/token")),
        Some(MountedFile::Secret {
            name: "scaler".to_owned(),
            key: "token".to_owned(),
        })
    );
    assert_eq!(
        rendered.mounted_file(&PathBuf::from("/etc/ssl/custom/ca.crt")),
        Some(MountedFile::ConfigMap {
            name: "ca-bundle".to_owned(),
            key: "ca.crt".to_owned(),
        })
    );
    let mounts = container.volume_mounts.unwrap_or_default();
    assert!(
        mounts.iter().all(|mount| mount.read_only == Some(true)),
        "{mounts:?}"
    );

    // The Service.
    let service: Service = rendered.one("Service");
    assert_eq!(
        service.metadata.annotations,
        Some(value_of(values, &["service", "annotations"]))
    );
    assert_eq!(
        service
            .metadata
            .labels
            .unwrap_or_default()
            .get("exposed")
            .map(String::as_str),
        Some("no")
    );
    let service_spec = service.spec.expect("Service spec");
    assert_eq!(service_spec.type_.as_deref(), Some("LoadBalancer"));
    assert_eq!(service_spec.cluster_ip.as_deref(), Some("10.0.0.85"));
    assert_eq!(
        service_spec.external_ips,
        Some(vec!["192.0.2.10".to_owned()])
    );
    assert_eq!(service_spec.load_balancer_ip.as_deref(), Some("192.0.2.11"));
    assert_eq!(
        service_spec.load_balancer_source_ranges,
        Some(vec!["192.0.2.0/24".to_owned()])
    );
    let ports: Vec<_> = service_spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.name, p.port, p.target_port))
        .collect();
    assert_eq!(
        ports,
        [(
            Some("metrics".to_owned()),
            9085,
            Some(IntOrString::String("http".to_owned()))
        )]
    );

    // The disruption budget: minAvailable, upstream's maxUnavailable removed by its null.
    let budget: PodDisruptionBudget = rendered.one("PodDisruptionBudget");
    let budget_spec = budget.spec.expect("PDB spec");
    assert_eq!(budget_spec.min_available, Some(IntOrString::Int(1)));
    assert_eq!(budget_spec.max_unavailable, None);

    // The VerticalPodAutoscaler aims at the Deployment's container.
    let vpa = rendered.all("VerticalPodAutoscaler");
    assert_eq!(vpa.len(), 1);
    let vpa = &vpa[0]["spec"];
    assert_eq!(vpa["targetRef"]["kind"].as_str(), Some("Deployment"));
    assert_eq!(vpa["targetRef"]["name"].as_str(), Some("scaler"));
    assert_eq!(vpa["updatePolicy"]["updateMode"].as_str(), Some("Initial"));
    let policy = &vpa["resourcePolicy"]["containerPolicies"][0];
    assert_eq!(
        policy["containerName"].as_str(),
        Some(container.name.as_str())
    );
    assert_eq!(policy["minAllowed"]["memory"].as_str(), Some("50Mi"));

    // extraObjects, objects and texts alike, through tpl.
    let extra: ConfigMap = rendered
        .named("ConfigMap", &format!("{RELEASE}-extra"))
        .expect("the extra ConfigMap");
    assert_eq!(
        extra
            .data
            .unwrap_or_default()
            .get("release")
            .map(String::as_str),
        Some(RELEASE)
    );
    let extra_text: Secret = rendered
        .named("Secret", &format!("{RELEASE}-extra-text"))
        .expect("the extra Secret written as text");
    assert!(extra_text.string_data.is_some());
}

#[test]
fn the_service_monitor_and_prometheus_rule_follow_upstreams_keys() {
    let rendered = with_upstream_defaults(UPSTREAM_GENERIC);
    let monitors = rendered.all("ServiceMonitor");
    assert_eq!(monitors.len(), 1);
    let monitor = monitors[0];
    assert_eq!(
        monitor["metadata"]["namespace"].as_str(),
        Some("observability")
    );
    assert_eq!(
        monitor["metadata"]["labels"]["release"].as_str(),
        Some("kube-prometheus")
    );
    assert_eq!(
        monitor["metadata"]["annotations"]["example.com/note"].as_str(),
        Some("scraped")
    );
    // It finds the Service in the release namespace, by its labels and its port's name.
    let service: Service = rendered.one("Service");
    let service_labels = service.metadata.labels.unwrap_or_default();
    let selector: BTreeMap<String, String> =
        serde_yaml_ng::from_value(monitor["spec"]["selector"]["matchLabels"].clone())
            .expect("matchLabels");
    assert!(
        !selector.is_empty()
            && selector
                .iter()
                .all(|(k, v)| service_labels.get(k) == Some(v)),
        "{selector:?} {service_labels:?}"
    );
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"][0].as_str(),
        Some(NAMESPACE)
    );
    let endpoint = &monitor["spec"]["endpoints"][0];
    let port_name = service
        .spec
        .and_then(|s| s.ports)
        .and_then(|p| p.into_iter().next())
        .and_then(|p| p.name);
    assert_eq!(endpoint["port"].as_str(), port_name.as_deref());
    assert_eq!(endpoint["path"].as_str(), Some("/metrics"));
    assert_eq!(endpoint["interval"].as_str(), Some("30s"));
    assert_eq!(
        endpoint["relabelings"],
        value_of::<Value>(UPSTREAM_GENERIC, &["serviceMonitor", "relabelings"])
    );
    assert_eq!(
        endpoint["metricRelabelings"],
        value_of::<Value>(UPSTREAM_GENERIC, &["serviceMonitor", "metricRelabelings"])
    );

    let rules = rendered.all("PrometheusRule");
    assert_eq!(rules.len(), 1);
    let rule = rules[0];
    assert_eq!(
        rule["metadata"]["namespace"].as_str(),
        Some("observability")
    );
    assert_eq!(
        rule["metadata"]["labels"]["release"].as_str(),
        Some("kube-prometheus")
    );
    let groups = rule["spec"]["groups"].as_sequence().expect("groups");
    // defaultRules: false, so only upstream's group, named after the release's objects, its rules
    // run through tpl.
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0]["name"].as_str(), Some("scaler"));
    assert_eq!(groups[0]["interval"].as_str(), Some("1m"));
    assert_eq!(
        groups[0]["rules"][0]["expr"].as_str(),
        Some("absent(up{service=\"scaler\"})")
    );

    // Neither by default.
    let defaults = with_upstream_defaults("cloudProvider: kwok\n");
    assert!(defaults.all("ServiceMonitor").is_empty());
    assert!(defaults.all("PrometheusRule").is_empty());
}

#[test]
fn the_priority_expander_configmap_is_what_ferroscale_reads() {
    let ranked = "extraArgs: {expander: \"priority,least-waste\"}\n\
                  priorityConfigMapAnnotations: {example.com/owner: platform}\n";
    for priorities in [
        "expanderPriorities:\n  10: [\".*\"]\n  50: [\"^big-.*\", \"^huge$\"]\n",
        "expanderPriorities: |\n  10:\n    - .*\n  50:\n    - ^big-.*\n    - ^huge$\n",
    ] {
        let rendered = with_upstream_defaults(&format!("{ranked}{priorities}"));
        let config_map: ConfigMap = rendered
            .named("ConfigMap", "cluster-autoscaler-priority-expander")
            .unwrap_or_else(|| panic!("no priority ConfigMap for {priorities:?}"));
        assert_eq!(config_map.metadata.namespace.as_deref(), Some(NAMESPACE));
        assert_eq!(rendered.flag("--namespace").as_deref(), Some(NAMESPACE));
        assert_eq!(
            config_map.metadata.annotations,
            Some([("example.com/owner".to_owned(), "platform".to_owned())].into())
        );
        let text = config_map
            .data
            .unwrap_or_default()
            .remove("priorities")
            .expect("the priorities key");
        let config = PriorityConfig::parse(text);
        assert!(config.error().is_none(), "{:?}", config.error());
        assert_eq!(config.priority_of("big-pool").ok(), Some(Some(50)));
        assert_eq!(config.priority_of("huge").ok(), Some(Some(50)));
        assert_eq!(config.priority_of("small").ok(), Some(Some(10)));
        assert_accepted_by_ferroscale_run(&rendered);
    }
    // Only when the expander uses it, in either form of extraArgs.
    let priorities = "expanderPriorities: {10: [\".*\"]}\n";
    for (values, expected) in [
        (
            format!("extraArgs: {{expander: least-waste}}\n{priorities}"),
            false,
        ),
        (priorities.to_owned(), false),
        ("extraArgs: {expander: priority}\n".to_owned(), false),
        (
            format!("extraArgs: [--expander=priority]\n{priorities}"),
            true,
        ),
    ] {
        let rendered = Rendered::of(Some(&values));
        assert_eq!(
            rendered
                .named::<ConfigMap>("ConfigMap", "cluster-autoscaler-priority-expander")
                .is_some(),
            expected,
            "{values:?}"
        );
    }
}

/// The rules of the chart's ClusterRole and Role (named `name`), as grants.
fn rbac_grants(
    rendered: &Rendered,
    name: &str,
) -> (BTreeSet<super::Grant>, BTreeSet<super::Grant>) {
    let cluster_role: ClusterRole = rendered
        .named("ClusterRole", name)
        .expect("the autoscaler's ClusterRole");
    let role: Role = rendered.named("Role", name).expect("the autoscaler's Role");
    (
        grants(&cluster_role.rules.unwrap_or_default()),
        grants(&role.rules.unwrap_or_default()),
    )
}

#[test]
fn the_rbac_under_upstreams_values_is_what_ferroscale_needs_and_nothing_more() {
    let plain_cluster_role: ClusterRole = plain("ClusterRole");
    let plain_role: Role = plain("Role");
    let plain_cluster = grants(&plain_cluster_role.rules.unwrap_or_default());
    let plain_namespace = grants(&plain_role.rules.unwrap_or_default());
    let node_writes: BTreeSet<super::Grant> = ["create", "delete"]
        .iter()
        .map(|verb| ("".into(), "nodes".into(), "*".into(), (*verb).into()))
        .collect();
    let without_node_writes: BTreeSet<super::Grant> =
        plain_cluster.difference(&node_writes).cloned().collect();
    for (values, name, cluster_expected) in [
        (UPSTREAM_KWOK, RELEASE, &plain_cluster),
        (UPSTREAM_EXTERNALGRPC, RELEASE, &without_node_writes),
        (UPSTREAM_CLUSTERAPI, RELEASE, &without_node_writes),
        (UPSTREAM_EXOSCALE, RELEASE, &without_node_writes),
        // Named by its fullnameOverride.
        (UPSTREAM_GENERIC, "scaler", &plain_cluster),
    ] {
        let rendered = with_upstream_defaults(values);
        let (cluster, namespace) = rbac_grants(&rendered, name);
        assert_eq!(&cluster, cluster_expected, "{values}");
        assert_eq!(namespace, plain_namespace, "{values}");
    }

    // clusterScoped: false (upstream: only namespaced permissions): no ClusterRole, and the
    // management rules of an in-cluster management cluster go in a Role of the release namespace.
    let rendered = with_upstream_defaults(
        "cloudProvider: clusterapi\nautoDiscovery: {namespace: team-a}\n\
         rbac: {clusterScoped: false}\n",
    );
    assert!(
        rendered.all("ClusterRole").is_empty(),
        "{:?}",
        kinds(&rendered.objects)
    );
    assert!(rendered.all("ClusterRoleBinding").is_empty());
    let management: Role = rendered
        .named("Role", &management_role_name())
        .expect("the management rules as a Role");
    assert_eq!(management.metadata.namespace.as_deref(), Some(NAMESPACE));
    assert_eq!(
        grants(&management.rules.unwrap_or_default()),
        plain_management_grants()
    );
    let binding: RoleBinding = rendered
        .named("RoleBinding", &management_role_name())
        .expect("its binding");
    assert_eq!(binding.role_ref.kind, "Role");

    // rbac.create: false renders no RBAC and no ServiceAccount; the pod runs as the named one.
    let rendered = with_upstream_defaults(
        "cloudProvider: clusterapi\nrbac: {create: false, serviceAccount: {name: provided}}\n",
    );
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ] {
        assert!(rendered.all(kind).is_empty(), "{kind}");
    }
    assert_eq!(
        rendered.pod().service_account_name.as_deref(),
        Some("provided")
    );
    // serviceAccount.create: false without a name: the namespace's default account, still bound.
    let rendered = with_upstream_defaults("rbac: {serviceAccount: {create: false}}\n");
    assert!(rendered.all("ServiceAccount").is_empty());
    assert_eq!(
        rendered.pod().service_account_name.as_deref(),
        Some("default")
    );
    let binding: ClusterRoleBinding = rendered.one("ClusterRoleBinding");
    assert_eq!(
        binding
            .subjects
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.name)
            .collect::<Vec<_>>(),
        ["default"]
    );
}

/// Upstream's keys for clouds Ferroscale does not ship, each with a value other than upstream's
/// default.
const OTHER_CLOUD_VALUES: &[(&str, &str)] = &[
    ("awsAccessKeyID", "AKIAEXAMPLE"),
    ("awsRegion", "eu-west-1"),
    ("awsSecretAccessKey", "secret"),
    ("azureClientID", "client"),
    ("azureClientSecret", "secret"),
    ("azureClusterName", "aks"),
    ("azureEnableForceDelete", "true"),
    ("azureNodeResourceGroup", "MC_group"),
    ("azureResourceGroup", "group"),
    ("azureSubscriptionID", "subscription"),
    ("azureTenantID", "tenant"),
    ("azureUseManagedIdentityExtension", "true"),
    ("azureUseWorkloadIdentityExtension", "true"),
    ("azureUserAssignedIdentityID", "identity"),
    ("azureVMType", "standard"),
    ("civoApiKey", "key"),
    ("civoApiUrl", "https://civo.example.com"),
    ("civoClusterID", "cluster"),
    ("civoRegion", "LON1"),
    ("magnumCABundlePath", "/etc/ca.crt"),
    ("magnumClusterName", "magnum"),
    (
        "autoscalingGroupsnamePrefix",
        "[{name: ig, minSize: 0, maxSize: 3}]",
    ),
    ("cloudConfigPath", "/etc/cloud.conf"),
];

#[test]
fn keys_of_clouds_ferroscale_does_not_ship_fail_the_install_naming_the_key() {
    for (key, value) in OTHER_CLOUD_VALUES {
        let values = format!("{key}: {value}\n");
        match helm_template_in(&chart_dir(), &[UPSTREAM_DEFAULTS, &values]) {
            Ok(_) => panic!("{values:?} rendered"),
            Err(error) => assert!(
                error.contains(&format!("{key} is ")) && error.contains("does not ship"),
                "{values:?}: {error}"
            ),
        }
    }
    for (values, named) in [
        ("autoDiscovery: {tags: [team=a]}\n", "autoDiscovery.tags"),
        ("autoDiscovery: {roles: [master]}\n", "autoDiscovery.roles"),
        ("rbac: {pspEnabled: true}\n", "rbac.pspEnabled"),
    ] {
        let error = helm_template_in(&chart_dir(), &[UPSTREAM_DEFAULTS, values]).expect_err(values);
        assert!(error.contains(named), "{values:?}: {error}");
    }
    // Several at once are all named.
    let error = helm_template_in(
        &chart_dir(),
        &[
            UPSTREAM_DEFAULTS,
            "awsRegion: eu-west-1\ncivoRegion: LON1\n",
        ],
    )
    .expect_err("two refused keys");
    assert!(
        error.contains("awsRegion is \"eu-west-1\"") && error.contains("civoRegion is \"LON1\""),
        "{error}"
    );
    // The older defaults of the keys whose default changed between upstream's versions.
    with_upstream_defaults("awsRegion: \"\"\nazureVMType: AKS\n");
}

#[test]
fn a_cloud_provider_ferroscale_does_not_ship_fails_naming_the_value() {
    for provider in ["aws", "azure", "gce", "magnum", "civo", "hetzner", "oci"] {
        let values = format!("cloudProvider: {provider}\n");
        let error =
            helm_template_in(&chart_dir(), &[UPSTREAM_DEFAULTS, &values]).expect_err(&values);
        assert!(
            error.contains(&format!("cloudProvider \"{provider}\"")),
            "{values:?}: {error}"
        );
    }
}

#[test]
fn the_older_list_forms_of_extra_args_and_extra_env_still_work() {
    let rendered = Rendered::of(Some(
        "extraArgs: [--expander=least-waste, --v=3]\n\
         extraEnv: [{name: FROM_FIELD, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]\n",
    ));
    assert!(
        rendered
            .args()
            .ends_with(&strings(&["--expander=least-waste", "--v=3"])),
        "{:?}",
        rendered.args()
    );
    let var = rendered
        .env()
        .into_iter()
        .find(|var| var.name == "FROM_FIELD")
        .expect("the listed variable");
    assert_eq!(
        var.value_from
            .and_then(|from| from.field_ref)
            .map(|field| field.field_path)
            .as_deref(),
        Some("spec.nodeName")
    );
}
