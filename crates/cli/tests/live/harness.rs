//! What every end-to-end test needs: a real control plane with kwok, Ferroscale's own deploy
//! manifests applied to it (least-privilege RBAC and the kwok provider's example ConfigMaps), the
//! `ferroscale run` binary started as a separate process with the ServiceAccount's token, and
//! small readers of what a user would look at: nodes, pods, events, the Lease, `/metrics`.
//!
//! The autoscaler's log goes to a file that is printed when a test fails, so a red test shows
//! what Ferroscale was thinking.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ferroscale_core::events::reasons;
use ferroscale_testing_control_plane::ControlPlane;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Event, Node, Pod, PodSpec, PodTemplateSpec, ResourceRequirements,
    ServiceAccount, Toleration,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::de::DeserializeOwned;

use crate::support::free_port;

/// Where the autoscaler lives and keeps its status, Lease and the kwok provider's ConfigMaps.
pub const NAMESPACE: &str = "kube-system";
/// Namespace of the test workloads.
pub const APPS: &str = "default";
/// The node group of `deploy/manifests/kwok-provider-config.yaml`: 4 CPU, 16Gi, 0 to 20 nodes.
pub const POOL_LABEL: &str = "pool=general";
pub const TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";

/// Generous for a loaded 2-core machine; the steps normally take seconds.
pub const WAIT_LIMIT: Duration = Duration::from_secs(240);

/// Kubernetes' default `terminationGracePeriodSeconds`: how long a process has between SIGTERM
/// and SIGKILL.
pub const TERMINATION_GRACE_PERIOD: Duration = Duration::from_secs(30);

/// A control plane with Ferroscale's manifests applied.
pub struct Cluster {
    pub control_plane: ControlPlane,
    pub client: Client,
    dir: tempfile::TempDir,
    /// A kubeconfig that authenticates as the `ferroscale` ServiceAccount of deploy/manifests.
    service_account_kubeconfig: PathBuf,
    /// That ServiceAccount's token.
    service_account_token: String,
}

impl Cluster {
    pub async fn start() -> Cluster {
        let control_plane = tokio::task::spawn_blocking(ControlPlane::start)
            .await
            .expect("control-plane start task")
            .expect("start the test control plane");
        let client = admin_client(control_plane.kubeconfig_path()).await;
        for manifest in ["rbac.yaml", "kwok-provider-config.yaml"] {
            apply_manifest(&client, &deploy_dir().join("manifests").join(manifest)).await;
        }
        let mut dir = tempfile::tempdir().expect("temporary directory");
        // With the control plane's keep switch, the processes' logs stay too.
        if std::env::var_os(ferroscale_testing_control_plane::KEEP_DIR_ENV)
            .is_some_and(|value| !value.is_empty())
        {
            dir.disable_cleanup(true);
            eprintln!("keeping the test's logs in {}", dir.path().display());
        }
        let token = service_account_token(&client, "ferroscale").await;
        let service_account_kubeconfig = dir.path().join("ferroscale.kubeconfig");
        write_token_kubeconfig(
            &control_plane.server_url(),
            &control_plane,
            &token,
            &service_account_kubeconfig,
        );
        Cluster {
            control_plane,
            client,
            dir,
            service_account_kubeconfig,
            service_account_token: token,
        }
    }

    /// Starts `ferroscale run --cloud-provider=kwok` as the ServiceAccount, with `flags` after
    /// the defaults (a later flag wins).
    pub fn start_autoscaler(&self, name: &str, flags: &[&str]) -> Autoscaler {
        self.start_autoscaler_logging(name, flags, "info,ferroscale=debug,ferroscale_core=debug")
    }

    /// [`Cluster::start_autoscaler`] with its own `RUST_LOG` filter.
    pub fn start_autoscaler_logging(
        &self,
        name: &str,
        flags: &[&str],
        log_filter: &str,
    ) -> Autoscaler {
        self.start_autoscaler_with_env(name, flags, log_filter, &[])
    }

    /// [`Cluster::start_autoscaler_logging`] with extra environment variables (a provider's
    /// credentials or API group).
    pub fn start_autoscaler_with_env(
        &self,
        name: &str,
        flags: &[&str],
        log_filter: &str,
        env: &[(&str, &str)],
    ) -> Autoscaler {
        let port = free_port();
        let mut arguments = vec![
            "run".to_string(),
            "--cloud-provider=kwok".to_string(),
            format!("--kubeconfig={}", self.service_account_kubeconfig.display()),
            format!("--namespace={NAMESPACE}"),
            format!("--address=127.0.0.1:{port}"),
            "--leader-elect=false".to_string(),
            "--scan-interval=2s".to_string(),
            "--v=4".to_string(),
            // client-go's default of 5 requests per second makes a loop that writes events and
            // status wait seconds after its resize; the tests read metrics as soon as pods run.
            // The limit itself is tested with its own flags (api_access.rs).
            "--kube-client-qps=200".to_string(),
            "--kube-client-burst=400".to_string(),
        ];
        arguments.extend(flags.iter().map(|flag| flag.to_string()));
        self.spawn_ferroscale(name, &arguments, port, log_filter, env)
    }

    /// Starts `ferroscale serve-provider --cloud-provider=kwok` as the ServiceAccount, serving mutual
    /// TLS with the control plane's serving certificate and requiring client certificates of its
    /// CA. Returns the process and a cloud-config file for `run --cloud-provider=externalgrpc` that
    /// connects with the admin client certificate of the same CA.
    pub fn start_provider_server(&self, name: &str) -> (Autoscaler, PathBuf) {
        self.start_provider_server_for(name, &[])
    }

    /// [`Cluster::start_provider_server`] with `flags` after the defaults (a later flag wins),
    /// e.g. `--cloud-provider=clusterapi`.
    pub fn start_provider_server_for(&self, name: &str, flags: &[&str]) -> (Autoscaler, PathBuf) {
        let port = free_port();
        let pki = self.control_plane.pki_files();
        let mut arguments = vec![
            "serve-provider".to_string(),
            "--cloud-provider=kwok".to_string(),
            format!("--kubeconfig={}", self.service_account_kubeconfig.display()),
            format!("--namespace={NAMESPACE}"),
            format!("--address=127.0.0.1:{port}"),
            format!("--cert={}", pki.serving_certificate.display()),
            format!("--key-cert={}", pki.serving_key.display()),
            format!("--ca-cert={}", pki.ca_certificate.display()),
            "--v=5".to_string(),
        ];
        arguments.extend(flags.iter().map(|flag| flag.to_string()));
        let server = self.spawn_ferroscale(name, &arguments, port, "info,ferroscale=debug", &[]);
        let cloud_config = self.dir.path().join(format!("{name}-cloud-config.yaml"));
        std::fs::write(
            &cloud_config,
            format!(
                "address: \"127.0.0.1:{port}\"\ncert: {}\nkey: {}\ncacert: {}\ngrpc_timeout: 10s\n",
                pki.admin_certificate.display(),
                pki.admin_key.display(),
                pki.ca_certificate.display(),
            ),
        )
        .expect("write the externalgrpc cloud config");
        (server, cloud_config)
    }

    /// Starts the binary the way upstream's Helm chart starts upstream's image: as
    /// `./cluster-autoscaler` from the image's root directory, with exactly `arguments` (the
    /// chart's container arguments) plus what running outside a Pod needs, the admin kubeconfig
    /// and a free metrics port. No `RUST_LOG`: the flags alone decide what is logged.
    pub fn start_as_upstream_image(
        &self,
        name: &str,
        arguments: &[&str],
        env: &[(&str, &str)],
    ) -> Autoscaler {
        self.start_as_upstream_image_as(name, arguments, env, self.control_plane.kubeconfig_path())
    }

    /// [`Cluster::start_as_upstream_image`] authenticating with `kubeconfig` (another identity
    /// than the admin's, such as the ServiceAccount upstream's chart creates).
    pub fn start_as_upstream_image_as(
        &self,
        name: &str,
        arguments: &[&str],
        env: &[(&str, &str)],
        kubeconfig: &Path,
    ) -> Autoscaler {
        let root = self.dir.path().join(format!("{name}-image-root"));
        std::fs::create_dir_all(&root).expect("image root directory");
        let program = root.join("cluster-autoscaler");
        std::fs::copy(env!("CARGO_BIN_EXE_ferroscale"), &program).expect("copy the binary");
        let port = free_port();
        let mut all: Vec<String> = arguments.iter().map(|a| a.to_string()).collect();
        all.push(format!("--kubeconfig={}", kubeconfig.display()));
        all.push(format!("--address=127.0.0.1:{port}"));
        let log_path = self.dir.path().join(format!("{name}.log"));
        let log = File::create(&log_path).expect("log file");
        let child = Command::new("./cluster-autoscaler")
            .current_dir(&root)
            .args(&all)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file handle"))
            .stderr(log)
            .spawn()
            .expect("start ./cluster-autoscaler");
        Autoscaler {
            name: name.to_string(),
            child: Some(child),
            port,
            log_path,
        }
    }

    /// The kubeconfig `ferroscale run` authenticates with (the `ferroscale` ServiceAccount).
    pub fn service_account_kubeconfig(&self) -> &Path {
        &self.service_account_kubeconfig
    }

    /// A kubeconfig as the `ferroscale` ServiceAccount that reaches the API server at `server`
    /// (a fault-injecting proxy in front of it, with the API server's own certificate), written
    /// into the scratch directory as `<name>.kubeconfig`.
    #[allow(dead_code)] // the fault tests use it
    pub fn service_account_kubeconfig_via(&self, name: &str, server: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        write_token_kubeconfig(
            server,
            &self.control_plane,
            &self.service_account_token,
            &path,
        );
        path
    }

    /// A kubeconfig that authenticates as the ServiceAccount `name` of [`NAMESPACE`] (created
    /// beforehand), written into the scratch directory as `<name>.kubeconfig`.
    #[allow(dead_code)] // the upstream RBAC test uses it
    pub async fn service_account_kubeconfig_of(&self, name: &str) -> PathBuf {
        let token = service_account_token(&self.client, name).await;
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        write_token_kubeconfig(
            &self.control_plane.server_url(),
            &self.control_plane,
            &token,
            &path,
        );
        path
    }

    /// A scratch directory that lives as long as the cluster.
    pub fn scratch_dir(&self) -> &Path {
        self.dir.path()
    }

    fn spawn_ferroscale(
        &self,
        name: &str,
        arguments: &[String],
        port: u16,
        log_filter: &str,
        env: &[(&str, &str)],
    ) -> Autoscaler {
        let log_path = self.dir.path().join(format!("{name}.log"));
        let log = File::create(&log_path).expect("log file");
        let child = Command::new(ferroscale_binary())
            .args(arguments)
            .env_remove("RUST_LOG")
            .env("RUST_LOG", log_filter)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file handle"))
            .stderr(log)
            .spawn()
            .expect("start the ferroscale binary");
        Autoscaler {
            name: name.to_string(),
            child: Some(child),
            port,
            log_path,
        }
    }

    /// Rewrites the kwok templates ConfigMap of deploy/manifests so that its group has these
    /// bounds (before the autoscaler starts and reads them).
    pub async fn set_pool_bounds(&self, min: usize, max: usize) {
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client.clone(), NAMESPACE);
        let templates = configmaps
            .get("kwok-provider-templates")
            .await
            .expect("templates ConfigMap");
        let text = templates
            .data
            .and_then(|d| d.get("templates").cloned())
            .expect("templates key");
        let text = text
            .replace("min-count: \"0\"", &format!("min-count: \"{min}\""))
            .replace("max-count: \"20\"", &format!("max-count: \"{max}\""));
        self.use_templates(text).await;
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), APPS)
    }

    pub fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), APPS)
    }

    /// The kwok group's nodes, sorted by name.
    pub async fn pool_nodes(&self) -> Vec<Node> {
        let mut nodes = self
            .nodes()
            .list(&ListParams::default().labels(POOL_LABEL))
            .await
            .expect("list nodes")
            .items;
        nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        nodes
    }

    pub async fn pool_node_names(&self) -> Vec<String> {
        self.pool_nodes()
            .await
            .into_iter()
            .filter_map(|node| node.metadata.name)
            .collect()
    }

    /// Pods of the app with label `app=<app>` that kwok reports Running, by name → node.
    pub async fn running_pods(&self, app: &str) -> BTreeMap<String, String> {
        self.pods()
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .expect("list pods")
            .items
            .into_iter()
            .filter(|pod| {
                pod.metadata.deletion_timestamp.is_none()
                    && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .filter_map(|pod| Some((pod.metadata.name?, pod.spec?.node_name?)))
            .collect()
    }

    /// Reasons of every Event in `namespace` about objects of `kind`.
    pub async fn event_reasons(&self, namespace: &str, kind: &str) -> Vec<String> {
        Api::<Event>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|event| event.involved_object.kind.as_deref() == Some(kind))
            .filter_map(|event| event.reason)
            .collect()
    }

    /// The nodes Ferroscale announced it is removing (`ScaleDown` / `ScaleDownEmpty` Events): a
    /// record that outlives the node, unlike its deletion taint.
    pub async fn nodes_scaled_down(&self) -> BTreeSet<String> {
        Api::<Event>::namespaced(self.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|event| event.involved_object.kind.as_deref() == Some("Node"))
            .filter(|event| {
                matches!(
                    event.reason.as_deref(),
                    Some(reasons::SCALE_DOWN | reasons::SCALE_DOWN_EMPTY)
                )
            })
            .filter_map(|event| event.involved_object.name)
            .collect()
    }

    /// The `cluster-autoscaler-status` ConfigMap's `status`, once written.
    pub async fn status(&self) -> Option<String> {
        self.status_in(NAMESPACE).await
    }

    /// The status ConfigMap of an autoscaler started with `--namespace=<namespace>`.
    pub async fn status_in(&self, namespace: &str) -> Option<String> {
        Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
            .get_opt("cluster-autoscaler-status")
            .await
            .expect("read the status ConfigMap")
            .and_then(|configmap| configmap.data?.get("status").cloned())
    }

    /// A Deployment of `replicas` pods labelled `app=<name>`, each requesting `cpu`.
    pub async fn create_app(&self, app: App<'_>) {
        let labels = BTreeMap::from([("app".to_string(), app.name.to_string())]);
        let requests = BTreeMap::from([
            ("cpu".to_string(), Quantity(app.cpu.to_string())),
            ("memory".to_string(), Quantity("256Mi".to_string())),
        ]);
        let deployment = Deployment {
            metadata: ObjectMeta {
                name: Some(app.name.to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(app.replicas),
                selector: LabelSelector {
                    match_labels: Some(labels.clone()),
                    ..LabelSelector::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        annotations: (!app.annotations.is_empty()).then(|| {
                            app.annotations
                                .iter()
                                .map(|(k, v)| (k.to_string(), v.to_string()))
                                .collect()
                        }),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "app".to_string(),
                            image: Some("registry.example/app:1".to_string()),
                            resources: Some(ResourceRequirements {
                                requests: Some(requests),
                                ..ResourceRequirements::default()
                            }),
                            ..Container::default()
                        }],
                        // The kwok provider taints its nodes so that only workloads meant for fake
                        // nodes land there (the kwok provider's `skipTaint`).
                        tolerations: Some(vec![Toleration {
                            key: Some("kwok-provider".to_string()),
                            operator: Some("Equal".to_string()),
                            value: Some("true".to_string()),
                            effect: Some("NoSchedule".to_string()),
                            ..Toleration::default()
                        }]),
                        // Evicted pods go at once: kwok runs no containers.
                        termination_grace_period_seconds: Some(0),
                        ..PodSpec::default()
                    }),
                },
                ..DeploymentSpec::default()
            }),
            ..Deployment::default()
        };
        self.deployments()
            .create(&PostParams::default(), &deployment)
            .await
            .expect("create Deployment");
    }

    /// Marks a node unschedulable (or schedulable again), as `kubectl cordon` does.
    pub async fn cordon(&self, node: &str, unschedulable: bool) {
        self.nodes()
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "spec": { "unschedulable": unschedulable } })),
            )
            .await
            .expect("cordon node");
    }

    pub async fn scale_app(&self, name: &str, replicas: i32) {
        self.deployments()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "spec": { "replicas": replicas } })),
            )
            .await
            .expect("scale Deployment");
    }

    pub async fn delete_app(&self, name: &str) {
        self.deployments()
            .delete(name, &DeleteParams::foreground())
            .await
            .expect("delete Deployment");
    }

    /// Replaces the kwok provider's templates (before the autoscaler starts and reads them).
    pub async fn use_templates(&self, templates: String) {
        Api::<ConfigMap>::namespaced(self.client.clone(), NAMESPACE)
            .patch(
                "kwok-provider-templates",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"data": {"templates": templates}})),
            )
            .await
            .expect("replace the kwok templates");
    }

    /// Waits until `app` has `replicas` Running pods, and returns them (name → node).
    pub async fn wait_running(&self, app: &str, replicas: usize) -> BTreeMap<String, String> {
        let mut running = BTreeMap::new();
        wait_until(&format!("{replicas} Running pods of {app}"), async || {
            running = self.running_pods(app).await;
            running.len() == replicas
        })
        .await;
        running
    }

    /// Waits until the kwok group has no node left, and returns the nodes seen carrying
    /// [`TO_BE_DELETED`] on the way (a scale-down taints before it deletes).
    pub async fn wait_pool_removed(&self) -> BTreeSet<String> {
        let mut tainted = BTreeSet::new();
        wait_until("the idle pool to be removed", async || {
            let nodes = self.pool_nodes().await;
            for node in &nodes {
                if has_taint(node, TO_BE_DELETED) {
                    tainted.extend(node.metadata.name.clone());
                }
            }
            nodes.is_empty()
        })
        .await;
        tainted
    }

    /// Waits until the kwok group has exactly `count` nodes, every one Ready.
    pub async fn wait_pool_ready(&self, count: usize) -> Vec<String> {
        wait_until(&format!("{count} Ready nodes in the pool"), async || {
            let nodes = self.pool_nodes().await;
            nodes.len() == count && nodes.iter().all(is_ready)
        })
        .await;
        self.pool_node_names().await
    }
}

/// What `Cluster::create_app` creates.
pub struct App<'a> {
    pub name: &'a str,
    pub replicas: i32,
    pub cpu: &'a str,
    pub annotations: &'a [(&'a str, &'a str)],
}

impl<'a> App<'a> {
    pub fn new(name: &'a str, replicas: i32, cpu: &'a str) -> App<'a> {
        App {
            name,
            replicas,
            cpu,
            annotations: &[],
        }
    }
}

/// A `ferroscale` process (`run` or `serve-provider`); killed when dropped, its log printed if the
/// test failed.
pub struct Autoscaler {
    name: String,
    child: Option<Child>,
    port: u16,
    log_path: PathBuf,
}

impl Autoscaler {
    /// The `/metrics` text, or `None` while the server does not answer.
    pub fn metrics(&self) -> Option<String> {
        http_get(self.port, "/metrics")
    }

    /// The body of a 200 answer to `GET path` on the process's `--address`, or `None`.
    pub fn http_get(&self, path: &str) -> Option<String> {
        http_get(self.port, path)
    }

    /// Sum of every sample of `name` (all label sets) in `/metrics`; 0 when absent.
    pub fn metric_sum(&self, name: &str) -> f64 {
        self.metrics()
            .map(|text| metric_sum(&text, name))
            .unwrap_or(0.0)
    }

    /// The value of one exact series (`name{labels}` as Prometheus prints it), if present.
    pub fn metric(&self, series: &str) -> Option<f64> {
        self.metrics()?.lines().find_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            (key == series).then(|| value.parse().ok())?
        })
    }

    /// The process id while it runs (the benchmark reads its memory and CPU time).
    #[allow(dead_code)]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running (it never exits on its own in these tests).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// SIGTERM, as the kubelet stops a pod, then [`Autoscaler::wait_for_exit`].
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        self.signal(libc::SIGTERM);
        self.wait_for_exit()
    }

    /// Sends `signal` (SIGTERM, SIGSTOP, SIGCONT, ...) to the process.
    pub fn signal(&self, signal: libc::c_int) {
        let child = self.child.as_ref().expect("the process was started");
        let pid = libc::pid_t::try_from(child.id()).expect("a process id fits pid_t");
        // SAFETY: kill(2) with the process id of our own child and a valid signal number.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(sent, 0, "send signal {signal} to {}", self.name);
    }

    /// Waits for the process to exit for at most [`TERMINATION_GRACE_PERIOD`] (after which the
    /// kubelet would kill it, as this does). Returns the exit status, `None` when it had to be
    /// killed.
    pub fn wait_for_exit(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let deadline = std::time::Instant::now() + TERMINATION_GRACE_PERIOD;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// SIGKILL: a crash, nothing cleaned up.
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Autoscaler {
    fn drop(&mut self) {
        self.crash();
        if std::thread::panicking() {
            let log = self.log();
            let start = log.len().saturating_sub(20_000);
            let start = (start..log.len())
                .find(|i| log.is_char_boundary(*i))
                .unwrap_or(log.len());
            eprintln!(
                "---- last lines of autoscaler {} ({}) ----\n{}",
                self.name,
                self.log_path.display(),
                &log[start..]
            );
        }
    }
}

/// Polls `check` every 250 ms until it holds; panics with `what` after [`WAIT_LIMIT`].
pub async fn wait_until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up after {WAIT_LIMIT:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The binary the tests start: this build's, unless `FERROSCALE_BINARY` names another (the
/// benchmarks compare a change with its base that way).
fn ferroscale_binary() -> PathBuf {
    std::env::var_os("FERROSCALE_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_ferroscale")))
}

/// `IncreaseSize` calls per group in the log of `ferroscale serve-provider` at `--v=5`, which
/// logs every call it serves (`"externalgrpc call" method="NodeGroupIncreaseSize" group="…"`).
pub fn increase_size_calls(log: &str) -> BTreeMap<String, usize> {
    let mut calls = BTreeMap::new();
    for line in log.lines() {
        if !line.contains("\"externalgrpc call")
            || !line.contains("method=\"NodeGroupIncreaseSize\"")
        {
            continue;
        }
        let group = line
            .split_once("group=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map_or("", |(group, _)| group);
        *calls.entry(group.to_string()).or_default() += 1;
    }
    calls
}

pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// Whether the scheduler has marked `pod` unschedulable (`PodScheduled=False`, reason
/// `Unschedulable`).
pub fn is_marked_unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

pub fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .is_some_and(|taints| taints.iter().any(|taint| taint.key == key))
}

pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            let metric = key.split('{').next()?;
            (metric == name).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

pub fn deploy_dir() -> PathBuf {
    // Tests run in the package's directory; absolute, as helm and the binary get it too.
    std::env::current_dir()
        .expect("the test's working directory")
        .join("../../deploy")
}

pub async fn admin_client(kubeconfig: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("read the admin kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client configuration");
    Client::try_from(config).expect("client")
}

/// Creates every object of a shipped manifest, as `kubectl apply` would on an empty cluster.
pub async fn apply_manifest(client: &Client, path: &Path) {
    let text = std::fs::read_to_string(path).expect("read manifest");
    apply_manifest_text(client, &text, &path.display().to_string()).await;
}

/// [`apply_manifest`] of a manifest held in memory; `origin` names it in failures.
pub async fn apply_manifest_text(client: &Client, text: &str, origin: &str) {
    use serde::Deserialize;
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = serde_json::Value::deserialize(document)
            .unwrap_or_else(|e| panic!("{origin} does not parse: {e}"));
        let Some(kind) = value
            .get("kind")
            .and_then(|k| k.as_str())
            .map(str::to_string)
        else {
            continue;
        };
        match kind.as_str() {
            "ServiceAccount" => create_namespaced::<ServiceAccount>(client, value).await,
            "Role" => create_namespaced::<Role>(client, value).await,
            "RoleBinding" => create_namespaced::<RoleBinding>(client, value).await,
            "ConfigMap" => create_namespaced::<ConfigMap>(client, value).await,
            "Deployment" => create_namespaced::<Deployment>(client, value).await,
            "ClusterRole" => create_cluster_wide::<ClusterRole>(client, value).await,
            "ClusterRoleBinding" => create_cluster_wide::<ClusterRoleBinding>(client, value).await,
            other => panic!("{origin}: no test support for kind {other}"),
        }
    }
}

async fn create_namespaced<K>(client: &Client, value: serde_json::Value)
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(value).expect("manifest object");
    let namespace = object
        .meta()
        .namespace
        .clone()
        .unwrap_or_else(|| NAMESPACE.to_string());
    Api::<K>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &object)
        .await
        .expect("create manifest object");
}

async fn create_cluster_wide<K>(client: &Client, value: serde_json::Value)
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(value).expect("manifest object");
    Api::<K>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
        .expect("create manifest object");
}

async fn service_account_token(client: &Client, name: &str) -> String {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("token for the {name} ServiceAccount: {e}"))
        .status
        .and_then(|status| status.token)
        .expect("a token in the token request's status")
}

fn write_token_kubeconfig(server: &str, control_plane: &ControlPlane, token: &str, path: &Path) {
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": server,
            "certificate-authority": control_plane.pki_files().ca_certificate,
        }}],
        "users": [{"name": "ferroscale", "user": {"token": token}}],
        "contexts": [{"name": "ferroscale", "context": {"cluster": "test", "user": "ferroscale"}}],
        "current-context": "ferroscale",
    });
    std::fs::write(
        path,
        serde_yaml_ng::to_string(&kubeconfig).expect("kubeconfig YAML"),
    )
    .expect("write the ServiceAccount kubeconfig");
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    // The debugging snapshot answers after the next loop (scan interval 2 s).
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
}
