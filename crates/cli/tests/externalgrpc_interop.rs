//! Interoperability of Ferroscale's externalgrpc implementations with a Go peer (issue 5).
//!
//! The peer is `test-tools/externalgrpc-interop`, built by `scripts/control-plane/build.sh` with the
//! Go gRPC and protobuf libraries and the Kubernetes Go types that upstream's client and example
//! server are built on (upstream's own client package cannot be fetched from the module proxy; the
//! tool's package comment says what it uses instead). It runs both ways:
//!
//! - the Go client against `ferroscale serve-provider --cloud-provider=sim`, over mutual TLS and
//!   plaintext: what it reports must match the scenario the server was given;
//! - Ferroscale's client (`ExternalGrpcProvider`) against the Go server's fixed in-memory cloud:
//!   what the provider returns must match that cloud;
//! - a client certificate from another CA must be refused by Ferroscale's server.
//!
//! A missing tool fails the tests with the build command; it never skips them.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use ferroscale_core::cloud::{
    CloudError, CloudProvider, ErrorClass, GroupOptions, InstanceErrorInfo, InstanceState,
    InstanceStatus,
};
use ferroscale_model::{Node, Taint, TaintEffect, Timestamp};
use ferroscale_provider_externalgrpc::{ExternalGrpcProvider, NodeGroupDefaults};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use serde_json::Value;
use tempfile::TempDir;

mod support;
use support::free_port;

/// How long a process may take to start listening, and the Go client to finish its sequence
/// (about twenty calls, each with a 5 s deadline). Generous: the machine is shared.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// The scenario served to the Go client: a CPU group with two running instances that provision
/// slowly (so an increase stays unregistered and can be cancelled), and an empty, tainted GPU group.
const SCENARIO: &str = r#"
apiVersion: ferroscale/v1alpha1
kind: Scenario
name: externalgrpc-interop
duration: 1h
nodeGroups:
  - id: interop-cpu
    minSize: 1
    maxSize: 6
    initialSize: 2
    provisioningDelay: 30m
    template:
      metadata:
        labels:
          topology.kubernetes.io/zone: zone-a
          node.kubernetes.io/instance-type: interop.large
      status:
        capacity: {cpu: "4", memory: 16Gi, pods: "110"}
        allocatable: {cpu: 3920m, memory: 15Gi, pods: "110"}
  - id: interop-gpu
    minSize: 0
    maxSize: 3
    initialSize: 0
    provisioningDelay: 30m
    template:
      metadata:
        labels:
          sim.ferroscale.dev/gpu-type: nvidia-tesla-t4
      spec:
        taints:
          - {key: nvidia.com/gpu, value: present, effect: NoSchedule}
      status:
        capacity: {cpu: "8", memory: 32Gi, pods: "110", nvidia.com/gpu: "1"}
        allocatable: {cpu: 7910m, memory: 30Gi, pods: "110", nvidia.com/gpu: "1"}
"#;

const GIB: i64 = 1 << 30;

#[test]
fn go_client_sees_the_served_scenario_over_mutual_tls() {
    let pki = Pki::generate();
    let server = FerroscaleServer::start(&pki, Security::MutualTls);
    let run = GoClient::run(server.address, Some(pki.client_files()));
    assert!(run.status.success(), "{}\n{}", run.describe(), server.log());
    assert_report_matches_scenario(&run.report);
}

#[test]
fn go_client_sees_the_served_scenario_over_plaintext() {
    let pki = Pki::generate();
    let server = FerroscaleServer::start(&pki, Security::Insecure);
    let run = GoClient::run(server.address, None);
    assert!(run.status.success(), "{}\n{}", run.describe(), server.log());
    assert_report_matches_scenario(&run.report);
}

#[test]
fn a_client_certificate_from_another_ca_is_refused() {
    let pki = Pki::generate();
    let server = FerroscaleServer::start(&pki, Security::MutualTls);

    let refused = GoClient::run(server.address, Some(pki.foreign_client_files()));
    assert!(!refused.status.success(), "{}", refused.describe());
    let refresh = &refused.report["failures"]["Refresh"];
    // The handshake fails, so the Go client never has a connection: UNAVAILABLE, not an answer.
    assert_eq!(refresh["codeName"], "Unavailable", "{}", refused.describe());
    assert_eq!(refused.report["nodeGroups"], serde_json::json!([]));

    // The same server still serves a client whose certificate its CA signed.
    let accepted = GoClient::run(server.address, Some(pki.client_files()));
    assert!(
        accepted.status.success(),
        "{}\n{}",
        accepted.describe(),
        server.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferroscale_client_reads_and_resizes_the_go_cloud_over_mutual_tls() {
    let pki = Pki::generate();
    let go_server = GoServer::start(Some(pki.server_files()));
    let provider = pki.provider_for(go_server.address);

    provider.refresh().await.expect("Refresh");
    assert_eq!(provider.gpu_label(), "interop.test/accelerator");
    let mut gpu_types = provider.available_gpu_types();
    gpu_types.sort();
    assert_eq!(gpu_types, ["nvidia-a100", "nvidia-tesla-t4"]);

    let groups = provider.node_groups().await.expect("NodeGroups");
    let bounds: Vec<_> = groups
        .iter()
        .map(|g| (g.id().to_string(), g.min_size(), g.max_size()))
        .collect();
    assert_eq!(
        bounds,
        [
            ("interop-general".to_string(), 0, 10),
            ("interop-gpu".to_string(), 1, 3)
        ]
    );
    let (general, gpu) = (&groups[0], &groups[1]);
    assert_eq!(general.debug(), "interop-general: general purpose, zone a");

    // Templates: Go's Node.Marshal bytes decoded into the model.
    let template = general
        .template_node_info()
        .await
        .expect("general template");
    let node = &template.node;
    assert_eq!(node.capacity.cpu_milli, 4000);
    assert_eq!(node.capacity.memory, 16 * GIB);
    assert_eq!(node.capacity.pods, 110);
    assert_eq!(node.allocatable.cpu_milli, 3920);
    assert_eq!(node.allocatable.memory, 15 * GIB);
    assert_eq!(label(node, "topology.kubernetes.io/zone"), "interop-zone-a");
    assert_eq!(
        label(node, "node.kubernetes.io/instance-type"),
        "interop.large"
    );
    assert!(node.taints.is_empty(), "{:?}", node.taints);
    assert!(node.is_ready(), "the template says Ready=True: {node:?}");

    let template = gpu.template_node_info().await.expect("gpu template");
    let node = &template.node;
    assert_eq!(node.capacity.cpu_milli, 8000);
    assert_eq!(node.allocatable.cpu_milli, 7910);
    assert_eq!(node.allocatable.memory, 30 * GIB);
    assert_eq!(node.allocatable.get("nvidia.com/gpu"), 1);
    assert_eq!(label(node, "interop.test/accelerator"), "nvidia-tesla-t4");
    assert_eq!(
        node.taints,
        [Taint::new(
            "nvidia.com/gpu",
            "present",
            TaintEffect::NoSchedule
        )]
    );
    let gpu_config = provider
        .node_gpu_config(node)
        .expect("the GPU label and nvidia.com/gpu make it a GPU node");
    assert_eq!(gpu_config.gpu_type, "nvidia-tesla-t4");

    // Sizes and instances with their states and error information.
    assert_eq!(general.target_size().await.expect("general size"), 2);
    assert_eq!(gpu.target_size().await.expect("gpu size"), 3);
    let instances = gpu.nodes().await.expect("gpu instances");
    let seen: Vec<_> = instances
        .iter()
        .map(|i| (i.id.as_str(), i.status.clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (
                "interop://gpu/g-0",
                Some(status(InstanceState::Running, None))
            ),
            (
                "interop://gpu/g-1",
                Some(status(
                    InstanceState::Creating,
                    Some(InstanceErrorInfo {
                        class: ErrorClass::OutOfResources,
                        code: "QUOTA_EXCEEDED".into(),
                        message: "GPU quota exhausted in interop-zone-b".into(),
                    })
                ))
            ),
            (
                "interop://gpu/g-2",
                Some(status(InstanceState::Deleting, None))
            ),
            ("interop://gpu/g-3", None),
        ]
    );

    // Options: an override for one group, none for the other.
    assert_eq!(
        general.get_options().await.expect("general options"),
        Some(GroupOptions {
            scale_down_utilization_threshold: Some(0.3),
            scale_down_gpu_utilization_threshold: Some(0.4),
            scale_down_unneeded_time: Some(Duration::from_secs(300)),
            scale_down_unready_time: Some(Duration::from_secs(900)),
            max_node_provision_time: Some(Duration::from_secs(600)),
            zero_or_max_node_scaling: Some(false),
            ignore_daemonsets_utilization: Some(true),
            ..GroupOptions::default()
        })
    );
    assert_eq!(gpu.get_options().await.expect("gpu options"), None);

    // Which group owns a node: by providerID; the Go server's empty nodeGroup means "none".
    let owned = node_named("gpu-node-0", "interop://gpu/g-0");
    let owner = provider
        .node_group_for_node(&owned)
        .await
        .expect("NodeGroupForNode")
        .expect("g-0 belongs to interop-gpu");
    assert_eq!(
        (owner.id(), owner.min_size(), owner.max_size()),
        ("interop-gpu", 1, 3)
    );
    let foreign = node_named("control-plane", "elsewhere://control-plane");
    assert!(
        provider
            .node_group_for_node(&foreign)
            .await
            .expect("NodeGroupForNode")
            .is_none()
    );

    // The Go server implements no pricing: its status 12 is NotImplemented here.
    let price = provider
        .node_price(&owned, Timestamp(0), Timestamp(3_600_000))
        .await;
    assert!(
        matches!(price, Err(CloudError::NotImplemented)),
        "{price:?}"
    );

    // Resizing moves the Go cloud's sizes: up, a cancelled request, a deleted node.
    general.increase_size(1).await.expect("IncreaseSize");
    assert_eq!(general.target_size().await.expect("size"), 3);
    let instances = general.nodes().await.expect("instances");
    assert_eq!(
        instances
            .iter()
            .filter(|i| i.status.as_ref().map(|s| s.state) == Some(InstanceState::Creating))
            .count(),
        1,
        "{instances:?}"
    );
    general
        .decrease_target_size(-1)
        .await
        .expect("DecreaseTargetSize");
    assert_eq!(general.target_size().await.expect("size"), 2);
    general
        .delete_nodes(&[node_named("general-1", "interop://general/i-1")])
        .await
        .expect("DeleteNodes");
    assert_eq!(general.target_size().await.expect("size"), 1);
    let remaining: Vec<_> = general
        .nodes()
        .await
        .expect("instances")
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(remaining, ["interop://general/i-0"]);

    // The Go server's refusal (code 2, its own text) reaches the caller.
    let error = general
        .increase_size(20)
        .await
        .expect_err("beyond the maximum");
    assert!(
        error.to_string().contains("size increase too large"),
        "{error}"
    );
    drop(go_server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferroscale_client_reads_the_go_cloud_over_plaintext() {
    let go_server = GoServer::start(None);
    let config = TempDir::new().expect("temporary directory");
    let path = config.path().join("cloud-config.yaml");
    std::fs::write(&path, format!("address: \"{}\"\n", go_server.address))
        .expect("write the cloud config");
    let provider = ExternalGrpcProvider::from_config_file(&path, NodeGroupDefaults::default())
        .expect("plaintext provider");
    provider.refresh().await.expect("Refresh");
    let groups = provider.node_groups().await.expect("NodeGroups");
    let ids: Vec<_> = groups.iter().map(|g| g.id().to_string()).collect();
    assert_eq!(ids, ["interop-general", "interop-gpu"]);
    assert_eq!(groups[1].target_size().await.expect("size"), 3);
}

/// What the Go client must have seen of [`SCENARIO`] after its sequence (see the tool's client.go):
/// every call answered, the templates decoded by Go's `Node.Unmarshal`, and the size of the CPU
/// group moving up by one and back.
fn assert_report_matches_scenario(report: &Value) {
    assert_eq!(report["failures"], serde_json::json!({}), "{report:#}");

    let groups = report["nodeGroups"].as_array().expect("nodeGroups");
    let bounds: Vec<_> = groups
        .iter()
        .map(|g| serde_json::json!([g["id"], g["minSize"], g["maxSize"]]))
        .collect();
    assert_eq!(
        bounds,
        [
            serde_json::json!(["interop-cpu", 1, 6]),
            serde_json::json!(["interop-gpu", 0, 3])
        ],
        "{report:#}"
    );
    let (cpu, gpu) = (&groups[0], &groups[1]);

    let template = &cpu["template"];
    assert_eq!(
        template["firstByte"], "0a",
        "plain Node bytes: {template:#}"
    );
    assert_eq!(template["capacityMilli"]["cpu"], 4000);
    assert_eq!(template["capacityMilli"]["memory"], 16 * GIB * 1000);
    assert_eq!(template["capacityMilli"]["pods"], 110_000);
    assert_eq!(template["allocatableMilli"]["cpu"], 3920);
    assert_eq!(template["allocatableMilli"]["memory"], 15 * GIB * 1000);
    assert_eq!(template["labels"]["topology.kubernetes.io/zone"], "zone-a");
    assert_eq!(
        template["labels"]["node.kubernetes.io/instance-type"],
        "interop.large"
    );
    assert_eq!(template["taints"], serde_json::json!([]));
    assert_eq!(template["conditions"]["Ready"], "True");

    let template = &gpu["template"];
    assert_eq!(template["firstByte"], "0a");
    assert_eq!(template["capacityMilli"]["cpu"], 8000);
    assert_eq!(template["capacityMilli"]["nvidia.com/gpu"], 1000);
    assert_eq!(template["allocatableMilli"]["cpu"], 7910);
    assert_eq!(
        template["labels"]["sim.ferroscale.dev/gpu-type"],
        "nvidia-tesla-t4"
    );
    assert_eq!(
        template["taints"],
        serde_json::json!([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    );

    assert_eq!(cpu["targetSize"], 2);
    assert_eq!(gpu["targetSize"], 0);
    assert_eq!(states(&cpu["instances"]), [Some(1), Some(1)], "{report:#}");
    assert!(
        ids(&cpu["instances"])
            .iter()
            .all(|id| id.starts_with("sim://interop-cpu/")),
        "{report:#}"
    );
    assert_eq!(gpu["instances"], serde_json::json!([]));
    // The simulated cloud has no per-group options: the options message is left out.
    assert_eq!(cpu["optionsAnswer"], "none");
    assert_eq!(gpu["optionsAnswer"], "none");

    let resize = &report["resize"];
    assert_eq!(resize["group"], "interop-cpu");
    assert_eq!(resize["targetBefore"], 2);
    assert_eq!(resize["targetAfterIncrease"], 3);
    let mut after_increase = states(&resize["instancesAfterIncrease"]);
    after_increase.sort();
    assert_eq!(after_increase, [Some(1), Some(1), Some(2)], "{report:#}");
    assert_eq!(resize["targetAfterDecrease"], 2);
    assert_eq!(
        ids(&resize["instancesAfterDecrease"]),
        ids(&cpu["instances"]),
        "the cancelled request is gone, the running instances stay: {report:#}"
    );

    assert_eq!(report["gpuLabel"], "sim.ferroscale.dev/gpu-type");
    assert_eq!(report["gpuTypes"], serde_json::json!([]));
    // A node outside every group: OK with an empty nodeGroup (bytes 0a 00), never an error.
    assert_eq!(
        report["foreignNode"],
        serde_json::json!({"nodeGroupPresent": true, "id": "", "minSize": 0, "maxSize": 0, "debug": ""})
    );
    let owned = &report["ownedNode"];
    assert_eq!(owned["id"], "interop-cpu", "{report:#}");
    assert_eq!(owned["minSize"], 1);
    assert_eq!(owned["maxSize"], 6);
    assert_eq!(owned["debug"], cpu["debug"]);
}

fn states(instances: &Value) -> Vec<Option<i64>> {
    instances
        .as_array()
        .map(|list| list.iter().map(|i| i["state"].as_i64()).collect())
        .unwrap_or_default()
}

fn ids(instances: &Value) -> Vec<String> {
    instances
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|i| i["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn label<'a>(node: &'a Node, key: &str) -> &'a str {
    node.labels.get(key).map(String::as_str).unwrap_or("")
}

fn status(state: InstanceState, error: Option<InstanceErrorInfo>) -> InstanceStatus {
    InstanceStatus { state, error }
}

fn node_named(name: &str, provider_id: &str) -> Node {
    Node {
        name: name.to_string(),
        provider_id: provider_id.to_string(),
        ..Node::default()
    }
}

fn interop_tool() -> PathBuf {
    match ferroscale_testing_control_plane::locate_externalgrpc_interop() {
        Ok(path) => path,
        Err(error) => panic!("{error}"),
    }
}

/// The three files one side of mutual TLS needs: its certificate and key, and the CA that signs
/// the other side.
#[derive(Clone)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

/// Certificates for one test: a CA, a server certificate for 127.0.0.1 and localhost, a client
/// certificate, and a client certificate of an unrelated CA.
struct Pki {
    dir: TempDir,
}

impl Pki {
    fn generate() -> Pki {
        match Pki::try_generate() {
            Ok(pki) => pki,
            Err(error) => panic!("generating test certificates: {error}"),
        }
    }

    fn try_generate() -> Result<Pki, Box<dyn std::error::Error>> {
        let pki = Pki {
            dir: TempDir::new()?,
        };
        let ca = certificate_authority("externalgrpc interop CA")?;
        let foreign_ca = certificate_authority("unrelated CA")?;
        std::fs::write(pki.path("ca.crt"), ca.pem())?;

        let server_key = KeyPair::generate()?;
        let mut server = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])?;
        server
            .distinguished_name
            .push(DnType::CommonName, "externalgrpc interop server");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        std::fs::write(
            pki.path("server.crt"),
            server.signed_by(&server_key, &ca)?.pem(),
        )?;
        std::fs::write(pki.path("server.key"), server_key.serialize_pem())?;

        for (prefix, issuer) in [("client", &ca), ("foreign-client", &foreign_ca)] {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(vec!["cluster-autoscaler-grpc-client".into()])?;
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            let certificate = params.signed_by(&key, issuer)?;
            std::fs::write(pki.path(&format!("{prefix}.crt")), certificate.pem())?;
            std::fs::write(pki.path(&format!("{prefix}.key")), key.serialize_pem())?;
        }
        Ok(pki)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn server_files(&self) -> TlsFiles {
        TlsFiles {
            cert: self.path("server.crt"),
            key: self.path("server.key"),
            ca: self.path("ca.crt"),
        }
    }

    fn client_files(&self) -> TlsFiles {
        TlsFiles {
            cert: self.path("client.crt"),
            key: self.path("client.key"),
            ca: self.path("ca.crt"),
        }
    }

    fn foreign_client_files(&self) -> TlsFiles {
        TlsFiles {
            cert: self.path("foreign-client.crt"),
            key: self.path("foreign-client.key"),
            ca: self.path("ca.crt"),
        }
    }

    /// Ferroscale's client with the client certificate, through a cloud config file as a user
    /// writes it. Must be called inside the Tokio runtime.
    fn provider_for(&self, address: SocketAddr) -> ExternalGrpcProvider {
        let client = self.client_files();
        let path = self.path("cloud-config.yaml");
        let yaml = format!(
            "address: \"{address}\"\ncert: {}\nkey: {}\ncacert: {}\ngrpc_timeout: 10s\n",
            client.cert.display(),
            client.key.display(),
            client.ca.display()
        );
        std::fs::write(&path, yaml).expect("write the cloud config");
        ExternalGrpcProvider::from_config_file(&path, NodeGroupDefaults::default())
            .expect("mutual-TLS provider")
    }
}

fn certificate_authority(name: &str) -> Result<CertifiedIssuer<'static, KeyPair>, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate()?)
}

#[derive(Clone, Copy)]
enum Security {
    MutualTls,
    Insecure,
}

/// `ferroscale serve-provider --cloud-provider=sim` serving [`SCENARIO`]; killed when dropped.
struct FerroscaleServer {
    child: Child,
    address: SocketAddr,
    log_path: PathBuf,
    _dir: TempDir,
}

impl FerroscaleServer {
    /// Starts the server on a free port. Another test can take the port between the moment it
    /// is found free and the moment the server binds it; then the server exits naming the
    /// address in use, and it is started again on another port.
    fn start(pki: &Pki, security: Security) -> FerroscaleServer {
        for _ in 0..5 {
            match FerroscaleServer::start_once(pki, security) {
                Ok(server) => return server,
                Err(log) if log.contains("Address already in use") => continue,
                Err(log) => panic!("serve-provider exited:\n{log}"),
            }
        }
        panic!("serve-provider found no free port in 5 attempts");
    }

    fn start_once(pki: &Pki, security: Security) -> Result<FerroscaleServer, String> {
        let dir = TempDir::new().expect("temporary directory");
        let scenario = dir.path().join("interop-scenario.yaml");
        std::fs::write(&scenario, SCENARIO).expect("write the scenario");
        let address: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("loopback address");
        let mut arguments = vec![
            "serve-provider".to_string(),
            "--cloud-provider=sim".to_string(),
            format!("--scenario={}", scenario.display()),
            format!("--address={address}"),
            "--v=5".to_string(),
        ];
        match security {
            Security::MutualTls => {
                let files = pki.server_files();
                arguments.push(format!("--cert={}", files.cert.display()));
                arguments.push(format!("--key-cert={}", files.key.display()));
                arguments.push(format!("--ca-cert={}", files.ca.display()));
            }
            Security::Insecure => arguments.push("--insecure".to_string()),
        }
        let log_path = dir.path().join("serve-provider.log");
        let log = File::create(&log_path).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_ferroscale"))
            .args(&arguments)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file handle"))
            .stderr(log)
            .spawn()
            .expect("start ferroscale serve-provider");
        let mut server = FerroscaleServer {
            child,
            address,
            log_path,
            _dir: dir,
        };
        server.wait_until_listening()?;
        Ok(server)
    }

    /// Ok once the port answers and the server is still running (a connection could reach
    /// another test's listener on the same port); Err with the log when the server exited.
    fn wait_until_listening(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let answered = TcpStream::connect(self.address).is_ok();
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exit {status}:\n{}", self.log()));
            }
            if answered {
                thread::sleep(Duration::from_millis(200));
                if let Ok(Some(status)) = self.child.try_wait() {
                    return Err(format!("exit {status}:\n{}", self.log()));
                }
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "serve-provider did not listen on {} within {START_TIMEOUT:?}:\n{}",
                self.address,
                self.log()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for FerroscaleServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Go server's in-memory cloud (`externalgrpc-interop server`); killed when dropped.
struct GoServer {
    child: Child,
    address: SocketAddr,
    /// Kept open so the server never writes to a closed pipe.
    _stdout: BufReader<ChildStdout>,
    _dir: TempDir,
}

impl GoServer {
    fn start(tls: Option<TlsFiles>) -> GoServer {
        let dir = TempDir::new().expect("temporary directory");
        let mut command = Command::new(interop_tool());
        command.args(["server", "--address=127.0.0.1:0"]);
        add_tls_flags(&mut command, tls.as_ref());
        let log_path = dir.path().join("go-server.log");
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(&log_path).expect("log file"))
            .spawn()
            .expect("start the Go interop server");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        // The server prints "ready: listening on ADDR (MODE)" once it listens, or exits.
        let mut line = String::new();
        let read = stdout.read_line(&mut line);
        let address = line
            .strip_prefix("ready: listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|address| address.parse().ok());
        let Some(address) = address else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the Go interop server did not start ({read:?}, first line {line:?}):\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        };
        GoServer {
            child,
            address,
            _stdout: stdout,
            _dir: dir,
        }
    }
}

impl Drop for GoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One run of the Go client's sequence (`externalgrpc-interop client`).
struct GoClient {
    status: ExitStatus,
    report: Value,
    stdout: String,
    stderr: String,
}

impl GoClient {
    fn run(address: SocketAddr, tls: Option<TlsFiles>) -> GoClient {
        let dir = TempDir::new().expect("temporary directory");
        let (stdout_path, stderr_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
        let mut command = Command::new(interop_tool());
        command.args([
            "client".to_string(),
            format!("--address={address}"),
            "--group=interop-cpu".to_string(),
        ]);
        add_tls_flags(&mut command, tls.as_ref());
        let mut child = command
            .stdin(Stdio::null())
            .stdout(File::create(&stdout_path).expect("stdout file"))
            .stderr(File::create(&stderr_path).expect("stderr file"))
            .spawn()
            .expect("start the Go interop client");
        let status = wait_with_timeout(&mut child, CLIENT_TIMEOUT);
        let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
        let (stdout, stderr) = (read(&stdout_path), read(&stderr_path));
        let report = serde_json::from_str(&stdout).unwrap_or_else(|error| {
            panic!("the Go client printed no JSON report ({error}):\n{stdout}\n{stderr}")
        });
        GoClient {
            status,
            report,
            stdout,
            stderr,
        }
    }

    fn describe(&self) -> String {
        format!(
            "Go client {}:\n{}\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

fn add_tls_flags(command: &mut Command, tls: Option<&TlsFiles>) {
    if let Some(files) = tls {
        command.arg(format!("--cert={}", files.cert.display()));
        command.arg(format!("--key={}", files.key.display()));
        command.arg(format!("--cacert={}", files.ca.display()));
    }
}

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the Go client did not finish within {timeout:?}");
            }
            Err(error) => panic!("waiting for the Go client: {error}"),
        }
    }
}
