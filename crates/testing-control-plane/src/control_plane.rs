//! Starting, restarting and stopping one control plane: the command lines of the components, the
//! admin kubeconfig, the order of start-up and what "ready" means for each component.

use std::env;
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tempfile::TempDir;

use crate::Error;
use crate::binaries::Binaries;
use crate::pki::{ClientCertificate, Pki, PkiFiles};
use crate::probe;
use crate::process::{Launch, Running, log_tail};

/// Annotation that puts a node under kwok's management: kwok makes it Ready and runs its pods.
pub const FAKE_NODE_ANNOTATION_KEY: &str = "kwok.x-k8s.io/node";
/// Value of [`FAKE_NODE_ANNOTATION_KEY`] that kwok is told to select.
pub const FAKE_NODE_ANNOTATION_VALUE: &str = "fake";
/// When set (to anything but empty), the instance directory with its logs and etcd data is kept after
/// the control plane stops, and its path is printed.
pub const KEEP_DIR_ENV: &str = "FERROSCALE_CONTROL_PLANE_KEEP";

/// How many times a start-up is retried when a component lost a port to another test.
const START_ATTEMPTS: usize = 3;
/// How long a component stopped on purpose gets to shut down cleanly before it is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
const KWOK_CONFIG: &str = include_str!("kwok-stages.yaml");
/// Every request at metadata level, once it has completed (watches also when they start).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";
const AUDIT_LOG_FILE: &str = "kube-apiserver-audit.log";

/// Which components run besides etcd and kube-apiserver. All run by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// kube-scheduler, which binds pending pods to nodes.
    pub scheduler: bool,
    /// kube-controller-manager: ReplicaSets and Deployments make pods, PodDisruptionBudgets get
    /// their status, the node lifecycle controller watches node heartbeats, and more.
    pub controller_manager: bool,
    /// kwok, the stand-in kubelet of nodes annotated `kwok.x-k8s.io/node: fake`.
    pub kwok: bool,
    /// How long each component may take to become ready. Generous, because parallel tests share two
    /// cores and each API server start costs several seconds of CPU.
    pub startup_timeout: Duration,
    /// A `KubeSchedulerConfiguration` (YAML text) for kube-scheduler's `--config`, for tests of a
    /// non-default scheduler profile. kube-scheduler then ignores its `--kubeconfig` flag, so the
    /// text needs no `clientConnection`: the harness adds one pointing at the admin kubeconfig
    /// (and `leaderElection.leaderElect: false`) unless the text sets them.
    pub scheduler_config: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            scheduler: true,
            controller_manager: true,
            kwok: true,
            startup_timeout: Duration::from_secs(180),
            scheduler_config: None,
        }
    }
}

/// Ports picked for one instance.
#[derive(Debug, Clone, Copy)]
struct Ports {
    etcd_client: u16,
    etcd_peer: u16,
    apiserver: u16,
    scheduler: u16,
    controller_manager: u16,
    kwok: u16,
}

/// The running processes; `None` for one not started (or stopped on purpose).
#[derive(Debug, Default)]
struct Processes {
    etcd: Option<Running>,
    apiserver: Option<Running>,
    controller_manager: Option<Running>,
    scheduler: Option<Running>,
    kwok: Option<Running>,
}

/// A running control plane. Dropping it (or [`ControlPlane::stop`]) kills every process group and
/// deletes the instance directory.
///
/// Starting and restarting block the calling thread until the components are ready; from an async
/// test, call them through `tokio::task::spawn_blocking` if other tasks must keep running meanwhile.
#[derive(Debug)]
pub struct ControlPlane {
    processes: Mutex<Processes>,
    apiserver_launch: Launch,
    ports: Ports,
    options: Options,
    tls: Arc<rustls::ClientConfig>,
    kubeconfig: PathBuf,
    ca_certificate_pem: String,
    pki_files: PkiFiles,
    /// How many client certificates [`ControlPlane::issue_client_certificate`] has issued: each
    /// gets files of its own, even for a name issued before.
    issued_client_certificates: AtomicUsize,
    logs_dir: PathBuf,
    // Last: the directory goes only after the processes using it are stopped (Drop stops them first).
    dir: Option<TempDir>,
}

impl ControlPlane {
    /// Starts every component ([`Options::default`]) and waits until each is ready.
    pub fn start() -> Result<Self, Error> {
        Self::start_with(Options::default())
    }

    /// Starts etcd and kube-apiserver plus the components `options` asks for.
    pub fn start_with(options: Options) -> Result<Self, Error> {
        let binaries = Binaries::locate()?;
        let mut attempt = 1;
        loop {
            match Self::start_once(&binaries, &options) {
                Err(error) if error.is_port_clash() && attempt < START_ATTEMPTS => attempt += 1,
                result => return result,
            }
        }
    }

    fn start_once(binaries: &Binaries, options: &Options) -> Result<Self, Error> {
        let dir = tempfile::Builder::new()
            .prefix("ferroscale-control-plane-")
            .tempdir()
            .map_err(|source| Error::Io {
                action: "create the control plane's temporary directory".into(),
                source,
            })?;
        let pki_dir = dir.path().join("pki");
        let logs_dir = dir.path().join("logs");
        for sub in [&pki_dir, &logs_dir] {
            fs::create_dir_all(sub).map_err(|source| Error::Io {
                action: format!("create {}", sub.display()),
                source,
            })?;
        }
        let pki = Pki::generate()?;
        let pki_files = pki.write(&pki_dir)?;
        let ports = free_ports()?;
        let kubeconfig = dir.path().join("admin.kubeconfig");
        write_kubeconfig(&kubeconfig, ports.apiserver, &pki_files)?;
        let kwok_config = dir.path().join("kwok.yaml");
        fs::write(&kwok_config, KWOK_CONFIG).map_err(|source| Error::Io {
            action: format!("write {}", kwok_config.display()),
            source,
        })?;

        let audit_policy = dir.path().join("audit-policy.yaml");
        fs::write(&audit_policy, AUDIT_POLICY).map_err(|source| Error::Io {
            action: format!("write {}", audit_policy.display()),
            source,
        })?;
        let mut apiserver_args = apiserver_args(ports, &pki_files);
        apiserver_args.extend([
            format!("--audit-policy-file={}", path_arg(&audit_policy)),
            format!(
                "--audit-log-path={}",
                path_arg(&logs_dir.join(AUDIT_LOG_FILE))
            ),
        ]);
        let apiserver_launch = Launch {
            component: "kube-apiserver",
            program: binaries.kube_apiserver.clone(),
            args: apiserver_args,
            log: logs_dir.join("kube-apiserver.log"),
        };
        let control_plane = ControlPlane {
            processes: Mutex::new(Processes::default()),
            apiserver_launch,
            ports,
            options: options.clone(),
            tls: Arc::new(pki.admin_tls_config()?),
            kubeconfig,
            ca_certificate_pem: pki.ca_certificate_pem().to_owned(),
            pki_files,
            issued_client_certificates: AtomicUsize::new(0),
            logs_dir,
            dir: Some(dir),
        };
        if let Err(error) = control_plane.launch_all(binaries, &kwok_config) {
            control_plane.print_logs_after_failure(&error);
            return Err(error);
        }
        Ok(control_plane)
    }

    fn launch_all(&self, binaries: &Binaries, kwok_config: &Path) -> Result<(), Error> {
        let ports = self.ports;
        let timeout = self.options.startup_timeout;
        let files = &self.pki_files;
        let kubeconfig = path_arg(&self.kubeconfig);

        let etcd_dir = self.dir_path().join("etcd");
        let mut etcd = self
            .launch("etcd", &binaries.etcd, etcd_args(ports, &etcd_dir))
            .spawn()?;
        let etcd_ready = etcd.wait_ready(timeout, || probe::http_ok(ports.etcd_client, "/health"));
        self.lock().etcd = Some(etcd);
        etcd_ready?;

        self.start_apiserver_locked(&mut self.lock())?;

        // Both controllers serve /healthz over TLS with the instance's serving certificate, so the
        // probes verify them like the API server.
        let serving = [
            format!("--tls-cert-file={}", path_arg(&files.serving_certificate)),
            format!("--tls-private-key-file={}", path_arg(&files.serving_key)),
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--bind-address=127.0.0.1".to_owned(),
            "--leader-elect=false".to_owned(),
        ];
        if self.options.controller_manager {
            let mut args = serving.to_vec();
            args.extend([
                format!("--secure-port={}", ports.controller_manager),
                format!("--root-ca-file={}", path_arg(&files.ca_certificate)),
                format!(
                    "--service-account-private-key-file={}",
                    path_arg(&files.service_account_key)
                ),
                format!(
                    "--cluster-signing-cert-file={}",
                    path_arg(&files.ca_certificate)
                ),
                format!("--cluster-signing-key-file={}", path_arg(&files.ca_key)),
                "--use-service-account-credentials=false".to_owned(),
            ]);
            let mut process = self
                .launch(
                    "kube-controller-manager",
                    &binaries.kube_controller_manager,
                    args,
                )
                .spawn()?;
            let ready = process.wait_ready(timeout, || {
                probe::https_ok(ports.controller_manager, "/healthz", &self.tls)
            });
            self.lock().controller_manager = Some(process);
            ready?;
        }
        if self.options.scheduler {
            let mut args = serving.to_vec();
            args.push(format!("--secure-port={}", ports.scheduler));
            if let Some(config) = &self.options.scheduler_config {
                let path = self.dir_path().join("kube-scheduler-config.yaml");
                let text = scheduler_config_with_connection(config, &self.kubeconfig)?;
                fs::write(&path, text).map_err(|source| Error::Io {
                    action: format!("write {}", path.display()),
                    source,
                })?;
                args.push(format!("--config={}", path_arg(&path)));
            }
            let mut process = self
                .launch("kube-scheduler", &binaries.kube_scheduler, args)
                .spawn()?;
            let ready = process.wait_ready(timeout, || {
                probe::https_ok(ports.scheduler, "/healthz", &self.tls)
            });
            self.lock().scheduler = Some(process);
            ready?;
        }
        if self.options.kwok {
            let args = vec![
                format!("--kubeconfig={kubeconfig}"),
                format!("--config={}", path_arg(kwok_config)),
                format!(
                    "--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION_KEY}={FAKE_NODE_ANNOTATION_VALUE}"
                ),
                // kwok keeps each fake node's Lease fresh, which is what the node lifecycle
                // controller reads as the kubelet's heartbeat.
                "--node-lease-duration-seconds=40".to_owned(),
                // Pod IPs are only written into pod status; a /16 does not run out in big tests.
                "--cidr=10.244.0.0/16".to_owned(),
                format!("--server-address=127.0.0.1:{}", ports.kwok),
            ];
            let mut process = self.launch("kwok", &binaries.kwok, args).spawn()?;
            let ready = process.wait_ready(timeout, || probe::http_ok(ports.kwok, "/healthz"));
            self.lock().kwok = Some(process);
            ready?;
        }
        Ok(())
    }

    fn launch(&self, component: &'static str, program: &Path, args: Vec<String>) -> Launch {
        Launch {
            component,
            program: program.to_path_buf(),
            args,
            log: self.logs_dir.join(format!("{component}.log")),
        }
    }

    /// Path of the admin kubeconfig (user in `system:masters`, certificates referenced by path).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// `https://127.0.0.1:<port>` of the API server.
    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.ports.apiserver)
    }

    /// PEM of the instance's CA, which signed the API server's serving certificate and the admin
    /// client certificate.
    pub fn ca_certificate_pem(&self) -> &str {
        &self.ca_certificate_pem
    }

    /// Paths of the instance's certificates and keys.
    pub fn pki_files(&self) -> &PkiFiles {
        &self.pki_files
    }

    /// Issues a client certificate signed by the instance's CA whose subject is the common name
    /// `common_name`, for a test that needs clients told apart by name: a process given it
    /// authenticates to a server that requires client certificates of this CA (a provider served
    /// with mutual TLS learns the name; to the API server it is the user `common_name`, in no
    /// group). The certificate and its key are written as PEM files in the instance's directory,
    /// new files at every call.
    pub fn issue_client_certificate(&self, common_name: &str) -> Result<ClientCertificate, Error> {
        let number = self
            .issued_client_certificates
            .fetch_add(1, Ordering::Relaxed);
        // The name only helps a reader of the directory; the number keeps the files apart.
        let readable: String = common_name
            .chars()
            .take(64)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        crate::pki::issue_client_certificate(
            &self.pki_files,
            common_name,
            &format!("client-{number}-{readable}"),
        )
    }

    /// The API server's audit log: one JSON event per request (metadata only: who, with which
    /// User-Agent, what, when), for tests that check what a client sent.
    pub fn audit_log_path(&self) -> PathBuf {
        self.logs_dir.join(AUDIT_LOG_FILE)
    }

    /// Directory of the components' logs, one `<component>.log` each.
    pub fn logs_dir(&self) -> &Path {
        &self.logs_dir
    }

    /// Stops the API server (SIGTERM, killed after a grace period), starts it again on the same port
    /// with the same data, and waits until it is ready. Clients see connection errors meanwhile.
    pub fn restart_apiserver(&self) -> Result<(), Error> {
        let mut processes = self.lock();
        let running = processes.apiserver.take().ok_or(Error::ApiServerState(
            "not running, so it cannot be restarted",
        ))?;
        running.terminate(SHUTDOWN_GRACE);
        self.start_apiserver_locked(&mut processes)
    }

    /// Stops the API server, leaving the others running, for tests of an API server that is away for
    /// a while; [`ControlPlane::start_apiserver`] brings it back.
    pub fn stop_apiserver(&self) -> Result<(), Error> {
        let running = self
            .lock()
            .apiserver
            .take()
            .ok_or(Error::ApiServerState("already stopped"))?;
        running.terminate(SHUTDOWN_GRACE);
        Ok(())
    }

    /// Stops kube-scheduler for good, leaving the others running: pending pods keep whatever
    /// condition it gave them and are never bound, as when a scheduler is down or far behind a
    /// burst. (Starting without it, [`Options::scheduler`], leaves new pods without the
    /// `Unschedulable` condition that makes an autoscaler act.)
    pub fn stop_scheduler(&self) -> Result<(), Error> {
        let running = self
            .lock()
            .scheduler
            .take()
            .ok_or(Error::SchedulerNotRunning)?;
        running.terminate(SHUTDOWN_GRACE);
        Ok(())
    }

    /// Freezes kube-scheduler (SIGSTOP) until [`ControlPlane::resume_scheduler`]: pods created
    /// meanwhile stay pending without a scheduling verdict, and the scheduler catches up once
    /// thawed, with the view it had when it froze.
    pub fn pause_scheduler(&self) -> Result<(), Error> {
        let processes = self.lock();
        let running = processes
            .scheduler
            .as_ref()
            .ok_or(Error::SchedulerNotRunning)?;
        running.set_paused(true);
        Ok(())
    }

    /// Thaws kube-scheduler after [`ControlPlane::pause_scheduler`].
    pub fn resume_scheduler(&self) -> Result<(), Error> {
        let processes = self.lock();
        let running = processes
            .scheduler
            .as_ref()
            .ok_or(Error::SchedulerNotRunning)?;
        running.set_paused(false);
        Ok(())
    }

    /// Starts the API server stopped by [`ControlPlane::stop_apiserver`] and waits until it is ready.
    pub fn start_apiserver(&self) -> Result<(), Error> {
        let mut processes = self.lock();
        if processes.apiserver.is_some() {
            return Err(Error::ApiServerState("already running"));
        }
        self.start_apiserver_locked(&mut processes)
    }

    fn start_apiserver_locked(
        &self,
        processes: &mut MutexGuard<'_, Processes>,
    ) -> Result<(), Error> {
        let mut apiserver = self.apiserver_launch.spawn()?;
        let port = self.ports.apiserver;
        let ready = apiserver.wait_ready(self.options.startup_timeout, || {
            probe::https_ok(port, "/readyz", &self.tls)?;
            // Ready can come a moment before the API server has made its own namespaces; tests
            // create objects in "default" straight away.
            probe::https_ok(port, "/api/v1/namespaces/default", &self.tls)
        });
        processes.apiserver = Some(apiserver);
        ready
    }

    /// Stops every component and deletes the instance directory (unless
    /// `FERROSCALE_CONTROL_PLANE_KEEP` is set). Dropping the control plane does the same.
    pub fn stop(self) {
        drop(self);
    }

    fn kill_all(&self) {
        let mut processes = self.lock();
        // Clients first, storage last, so no component spends its last moments logging retries.
        for running in [
            processes.kwok.take(),
            processes.scheduler.take(),
            processes.controller_manager.take(),
            processes.apiserver.take(),
            processes.etcd.take(),
        ]
        .into_iter()
        .flatten()
        {
            running.kill();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Processes> {
        // A panic while holding the lock leaves the processes as they were; teardown must still work.
        self.processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn dir_path(&self) -> &Path {
        self.dir.as_ref().map_or(&self.logs_dir, |dir| dir.path())
    }

    fn print_logs_after_failure(&self, error: &Error) {
        eprintln!("control plane: start-up failed: {error}");
        let Ok(entries) = fs::read_dir(&self.logs_dir) else {
            return;
        };
        let mut logs: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
        logs.sort();
        for log in logs {
            eprintln!("---- end of {} ----\n{}", log.display(), log_tail(&log));
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.kill_all();
        if env::var_os(KEEP_DIR_ENV).is_some_and(|value| !value.is_empty())
            && let Some(dir) = self.dir.take()
        {
            eprintln!("control plane: kept {}", dir.keep().display());
        }
    }
}

fn etcd_args(ports: Ports, data_dir: &Path) -> Vec<String> {
    let client = format!("http://127.0.0.1:{}", ports.etcd_client);
    let peer = format!("http://127.0.0.1:{}", ports.etcd_peer);
    vec![
        "--name=test".to_owned(),
        format!("--data-dir={}", path_arg(data_dir)),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=test={peer}"),
        // The data dies with the test: durability is not worth an fsync per write on a shared disk.
        "--unsafe-no-fsync=true".to_owned(),
        "--log-level=warn".to_owned(),
    ]
}

fn apiserver_args(ports: Ports, files: &PkiFiles) -> Vec<String> {
    vec![
        format!("--etcd-servers=http://127.0.0.1:{}", ports.etcd_client),
        "--bind-address=127.0.0.1".to_owned(),
        "--advertise-address=127.0.0.1".to_owned(),
        format!("--secure-port={}", ports.apiserver),
        format!("--tls-cert-file={}", path_arg(&files.serving_certificate)),
        format!("--tls-private-key-file={}", path_arg(&files.serving_key)),
        format!("--client-ca-file={}", path_arg(&files.ca_certificate)),
        // The controllers' delegated authentication reads the front-proxy CA from the API server;
        // without one configured they log an error every few seconds. No front proxy is used.
        format!(
            "--requestheader-client-ca-file={}",
            path_arg(&files.ca_certificate)
        ),
        "--requestheader-allowed-names=front-proxy-client".to_owned(),
        "--requestheader-username-headers=X-Remote-User".to_owned(),
        "--requestheader-group-headers=X-Remote-Group".to_owned(),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".to_owned(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
        format!(
            "--service-account-key-file={}",
            path_arg(&files.service_account_public_key)
        ),
        format!(
            "--service-account-signing-key-file={}",
            path_arg(&files.service_account_key)
        ),
        "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
        "--authorization-mode=RBAC".to_owned(),
        "--allow-privileged=true".to_owned(),
        // Loopback addresses are not valid endpoints, so the API server must not publish its own.
        "--endpoint-reconciler-type=none".to_owned(),
        // Without it a pod is refused until the controller manager has made its namespace's default
        // ServiceAccount, which makes tests that create a namespace and then pods flaky; kwok runs no
        // containers, so the token the plugin would mount is of no use.
        "--disable-admission-plugins=ServiceAccount".to_owned(),
        "--profiling=false".to_owned(),
    ]
}

/// Picks distinct free loopback ports by binding them all at once and releasing them together.
fn free_ports() -> Result<Ports, Error> {
    let listeners = (0..6)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| Error::Io {
            action: "find free loopback ports".into(),
            source,
        })?;
    let ports = listeners
        .iter()
        .map(|listener| listener.local_addr().map(|address| address.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| Error::Io {
            action: "read the port of a loopback listener".into(),
            source,
        })?;
    let [
        etcd_client,
        etcd_peer,
        apiserver,
        scheduler,
        controller_manager,
        kwok,
    ] = ports[..]
    else {
        unreachable!("six listeners were bound");
    };
    Ok(Ports {
        etcd_client,
        etcd_peer,
        apiserver,
        scheduler,
        controller_manager,
        kwok,
    })
}

fn write_kubeconfig(path: &Path, apiserver_port: u16, files: &PkiFiles) -> Result<(), Error> {
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "ferroscale-test",
            "cluster": {
                "server": format!("https://127.0.0.1:{apiserver_port}"),
                "certificate-authority": path_arg(&files.ca_certificate),
            },
        }],
        "users": [{
            "name": crate::pki::ADMIN_USER,
            "user": {
                "client-certificate": path_arg(&files.admin_certificate),
                "client-key": path_arg(&files.admin_key),
            },
        }],
        "contexts": [{
            "name": "ferroscale-test",
            "context": { "cluster": "ferroscale-test", "user": crate::pki::ADMIN_USER },
        }],
        "current-context": "ferroscale-test",
    });
    let yaml = serde_yaml_ng::to_string(&kubeconfig)?;
    fs::write(path, yaml).map_err(|source| Error::Io {
        action: format!("write {}", path.display()),
        source,
    })
}

/// The scheduler configuration with the connection settings kube-scheduler needs when it reads
/// `--config` (which makes it ignore `--kubeconfig`): the admin kubeconfig and no leader election,
/// each only where the text does not set it.
fn scheduler_config_with_connection(config: &str, kubeconfig: &Path) -> Result<String, Error> {
    let invalid = |problem: String| Error::Io {
        action: "read the scheduler configuration of Options::scheduler_config".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, problem),
    };
    let mut document: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(config).map_err(|error| invalid(error.to_string()))?;
    let serde_yaml_ng::Value::Mapping(root) = &mut document else {
        return Err(invalid(
            "a KubeSchedulerConfiguration must be a YAML mapping".into(),
        ));
    };
    root.entry("clientConnection".into()).or_insert_with(|| {
        serde_yaml_ng::Value::Mapping(
            [("kubeconfig".into(), path_arg(kubeconfig).into())]
                .into_iter()
                .collect(),
        )
    });
    root.entry("leaderElection".into()).or_insert_with(|| {
        serde_yaml_ng::Value::Mapping([("leaderElect".into(), false.into())].into_iter().collect())
    });
    Ok(serde_yaml_ng::to_string(&document)?)
}

/// A path as a command-line argument. Temporary directories have UTF-8 names; anything else would be
/// replaced lossily and the component would report the file missing, naming it.
fn path_arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduler_configuration_gets_the_connection_kube_scheduler_needs() {
        let config = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
";
        let text = scheduler_config_with_connection(config, Path::new("/tmp/admin.kubeconfig"))
            .expect("valid YAML");
        let document: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
        assert_eq!(
            document["clientConnection"]["kubeconfig"].as_str(),
            Some("/tmp/admin.kubeconfig")
        );
        assert_eq!(
            document["leaderElection"]["leaderElect"].as_bool(),
            Some(false)
        );
        assert_eq!(
            document["profiles"][0]["schedulerName"].as_str(),
            Some("default-scheduler")
        );
    }

    #[test]
    fn connection_settings_the_configuration_has_are_kept() {
        let config = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /elsewhere
";
        let text = scheduler_config_with_connection(config, Path::new("/tmp/admin.kubeconfig"))
            .expect("valid YAML");
        let document: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
        assert_eq!(
            document["clientConnection"]["kubeconfig"].as_str(),
            Some("/elsewhere")
        );
    }

    #[test]
    fn a_configuration_that_is_not_a_mapping_is_refused() {
        let error = scheduler_config_with_connection("- a list", Path::new("/k"))
            .expect_err("not a mapping");
        assert!(
            error.to_string().contains("must be a YAML mapping"),
            "{error}"
        );
    }
}
