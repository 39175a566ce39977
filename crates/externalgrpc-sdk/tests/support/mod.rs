//! What the SDK's tests share: a small in-memory cloud implementing the core traits (two groups,
//! instances, a template, options, GPU types, pricing) that records every call it receives, a
//! throwaway PKI written to a tempdir, and helpers that start the server on a loopback port and
//! dial it with the generated client.

#![allow(dead_code)] // Each test binary uses its own part of this module.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use ferroscale_core::cloud::{
    CloudError, CloudProvider, ErrorClass, GroupOptions, Instance, InstanceErrorInfo,
    InstanceState, InstanceStatus, NodeGroup, NodeTemplate, PricingModel,
};
use ferroscale_externalgrpc_proto::v1::cloud_provider_client::CloudProviderClient;
use ferroscale_externalgrpc_sdk::{ProviderServer, ServeError, Tls};
use ferroscale_model::{Node, Pod, Resources, Taint, TaintEffect, Timestamp};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tokio::net::TcpListener;
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

pub const GPU_LABEL: &str = "cloud.example/accelerator";
pub const GPU_TYPES: [&str; 2] = ["nvidia-a100", "nvidia-tesla-t4"];
/// Price of a node per hour, and of a pod per requested CPU core per hour.
pub const NODE_HOURLY: f64 = 1.5;
pub const CORE_HOURLY: f64 = 0.5;

/// Every call the provider and its groups received, in order, e.g. `"ng-1 increase_size 2"`.
#[derive(Debug, Default, Clone)]
pub struct CallLog(Arc<Mutex<Vec<String>>>);

impl CallLog {
    fn lock(&self) -> MutexGuard<'_, Vec<String>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push(&self, call: String) {
        self.lock().push(call);
    }

    pub fn all(&self) -> Vec<String> {
        self.lock().clone()
    }

    /// The calls that change something in the cloud.
    pub fn mutations(&self) -> Vec<String> {
        self.all()
            .into_iter()
            .filter(|call| {
                call.contains("increase_size")
                    || call.contains("delete_nodes")
                    || call.contains("decrease_target_size")
            })
            .collect()
    }

    pub fn count(&self, needle: &str) -> usize {
        self.lock()
            .iter()
            .filter(|call| call.contains(needle))
            .count()
    }
}

/// Holds a provider call until the test releases it, and tells the test when the call started.
#[derive(Debug, Default)]
pub struct Gate {
    pub entered: Notify,
    pub release: Notify,
}

#[derive(Debug)]
struct GroupState {
    target: usize,
    instances: Vec<Instance>,
}

#[derive(Debug)]
pub struct FakeGroup {
    id: String,
    min: usize,
    max: usize,
    template: Option<Node>,
    options: Result<Option<GroupOptions>, CloudError>,
    state: Mutex<GroupState>,
    log: CallLog,
}

impl FakeGroup {
    fn state(&self) -> MutexGuard<'_, GroupState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn target(&self) -> usize {
        self.state().target
    }

    pub fn instance_ids(&self) -> Vec<String> {
        self.state()
            .instances
            .iter()
            .map(|instance| instance.id.clone())
            .collect()
    }
}

/// Deliberately naive about bounds and membership: it does whatever it is asked, so the tests
/// show that the server's own checks keep such a provider from over-growing or deleting foreign
/// nodes.
#[async_trait]
impl NodeGroup for FakeGroup {
    fn id(&self) -> &str {
        &self.id
    }
    fn min_size(&self) -> usize {
        self.min
    }
    fn max_size(&self) -> usize {
        self.max
    }
    fn debug(&self) -> String {
        format!("fake group {} ({}..{})", self.id, self.min, self.max)
    }
    async fn target_size(&self) -> Result<usize, CloudError> {
        self.log.push(format!("{} target_size", self.id));
        Ok(self.target())
    }
    async fn increase_size(&self, delta: usize) -> Result<(), CloudError> {
        self.log.push(format!("{} increase_size {delta}", self.id));
        let mut state = self.state();
        state.target += delta;
        for _ in 0..delta {
            let id = format!("fake://{}/new-{}", self.id, state.instances.len());
            state.instances.push(Instance {
                id,
                status: Some(InstanceStatus {
                    state: InstanceState::Creating,
                    error: None,
                }),
            });
        }
        Ok(())
    }
    async fn delete_nodes(&self, nodes: &[Node]) -> Result<(), CloudError> {
        let names: Vec<&str> = nodes.iter().map(|node| node.name.as_str()).collect();
        self.log
            .push(format!("{} delete_nodes {}", self.id, names.join(",")));
        let mut state = self.state();
        // By provider id, or by name for a node without one (as the server matches them).
        state.instances.retain(|instance| {
            nodes.iter().all(|node| {
                let key = if node.provider_id.is_empty() {
                    &node.name
                } else {
                    &node.provider_id
                };
                key != &instance.id
            })
        });
        state.target = state.target.saturating_sub(nodes.len());
        Ok(())
    }
    async fn decrease_target_size(&self, delta: i64) -> Result<(), CloudError> {
        self.log
            .push(format!("{} decrease_target_size {delta}", self.id));
        let mut state = self.state();
        state.target = state
            .target
            .saturating_sub(usize::try_from(delta.unsigned_abs()).unwrap_or(usize::MAX));
        Ok(())
    }
    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        self.log.push(format!("{} nodes", self.id));
        Ok(self.state().instances.clone())
    }
    async fn template_node_info(&self) -> Result<NodeTemplate, CloudError> {
        self.log.push(format!("{} template_node_info", self.id));
        match &self.template {
            Some(node) => Ok(NodeTemplate {
                node: node.clone(),
                pods: vec![Pod::new("kube-system", "daemonset-pod")],
                csi_node: None,
                resource_slices: Vec::new(),
            }),
            None => Err(CloudError::NotImplemented),
        }
    }
    async fn get_options(&self) -> Result<Option<GroupOptions>, CloudError> {
        self.log.push(format!("{} get_options", self.id));
        self.options.clone()
    }
}

/// Prices by the hour: a node costs [`NODE_HOURLY`], a pod [`CORE_HOURLY`] per requested core.
#[derive(Debug)]
struct HourlyPricing {
    log: CallLog,
    /// A price call that fails, to tell real failures from "not offered".
    failing: bool,
}

fn hours(start: Timestamp, end: Timestamp) -> f64 {
    (end.millis() - start.millis()) as f64 / 3_600_000.0
}

impl PricingModel for HourlyPricing {
    fn node_price(&self, node: &Node, start: Timestamp, end: Timestamp) -> Result<f64, CloudError> {
        self.log.push(format!("node_price {}", node.name));
        if self.failing {
            return Err(CloudError::Provider("price list unavailable".to_string()));
        }
        Ok(NODE_HOURLY * hours(start, end))
    }
    fn pod_price(&self, pod: &Pod, start: Timestamp, end: Timestamp) -> Result<f64, CloudError> {
        self.log
            .push(format!("pod_price {}/{}", pod.namespace, pod.name));
        if self.failing {
            return Err(CloudError::Provider("price list unavailable".to_string()));
        }
        Ok(CORE_HOURLY * pod.requests.cpu_milli as f64 / 1000.0 * hours(start, end))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pricing {
    Offered,
    NotOffered,
    Failing,
}

/// A cloud with two groups:
///
/// - `ng-1` (1..5, target 2): a registered running instance `fake://ng-1/a` (node `a`) and an
///   instance still being created `fake://ng-1/b` that ran out of quota (not registered); a
///   template node with labels, a taint and resources; option overrides for the utilisation
///   threshold and the unneeded duration only;
/// - `ng-2` (0..3, target 1): one running instance `fake://ng-2/c` (node `c`), no template and no
///   per-group options (both NotImplemented).
#[derive(Debug)]
pub struct FakeCloud {
    pub groups: Vec<Arc<FakeGroup>>,
    pricing: Pricing,
    pub log: CallLog,
    refresh_error: Mutex<Option<CloudError>>,
    /// When set, `refresh` waits on it.
    refresh_gate: Option<Arc<Gate>>,
}

pub const NG1_OVERRIDDEN_THRESHOLD: f64 = 0.25;
pub const NG1_OVERRIDDEN_UNNEEDED: Duration = Duration::from_secs(300);

pub fn template_node() -> Node {
    let mut node = Node::new("template-ng-1", Resources::new(4000, 16 << 30));
    node.labels
        .insert(GPU_LABEL.to_string(), "nvidia-tesla-t4".to_string());
    node.labels.insert(
        "node.kubernetes.io/instance-type".to_string(),
        "m5.xlarge".to_string(),
    );
    node.taints
        .push(Taint::new("dedicated", "batch", TaintEffect::NoSchedule));
    node
}

impl FakeCloud {
    pub fn new(pricing: Pricing) -> FakeCloud {
        let log = CallLog::default();
        let ng1 = FakeGroup {
            id: "ng-1".to_string(),
            min: 1,
            max: 5,
            template: Some(template_node()),
            options: Ok(Some(GroupOptions {
                scale_down_utilization_threshold: Some(NG1_OVERRIDDEN_THRESHOLD),
                scale_down_unneeded_time: Some(NG1_OVERRIDDEN_UNNEEDED),
                ..GroupOptions::default()
            })),
            state: Mutex::new(GroupState {
                target: 2,
                instances: vec![
                    Instance::running("fake://ng-1/a"),
                    Instance {
                        id: "fake://ng-1/b".to_string(),
                        status: Some(InstanceStatus {
                            state: InstanceState::Creating,
                            error: Some(InstanceErrorInfo {
                                class: ErrorClass::OutOfResources,
                                code: "QUOTA_EXCEEDED".to_string(),
                                message: "instance quota reached".to_string(),
                            }),
                        }),
                    },
                ],
            }),
            log: log.clone(),
        };
        let ng2 = FakeGroup {
            id: "ng-2".to_string(),
            min: 0,
            max: 3,
            template: None,
            options: Err(CloudError::NotImplemented),
            state: Mutex::new(GroupState {
                target: 1,
                instances: vec![Instance::running("fake://ng-2/c")],
            }),
            log: log.clone(),
        };
        FakeCloud {
            groups: vec![Arc::new(ng1), Arc::new(ng2)],
            pricing,
            log,
            refresh_error: Mutex::new(None),
            refresh_gate: None,
        }
    }

    /// Replaces what `get_options` of group `id` answers. Only before the cloud is shared.
    pub fn with_group_options(
        mut self,
        id: &str,
        options: Result<Option<GroupOptions>, CloudError>,
    ) -> FakeCloud {
        let group = self
            .groups
            .iter_mut()
            .find(|group| group.id == id)
            .and_then(Arc::get_mut)
            .unwrap_or_else(|| panic!("group {id} is missing or already shared"));
        group.options = options;
        self
    }

    pub fn with_refresh_gate(mut self, gate: Arc<Gate>) -> FakeCloud {
        self.refresh_gate = Some(gate);
        self
    }

    pub fn fail_next_refresh(&self, error: CloudError) {
        *self
            .refresh_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(error);
    }

    pub fn group(&self, id: &str) -> &FakeGroup {
        self.groups
            .iter()
            .find(|group| group.id == id)
            .map(|group| &**group)
            .unwrap_or_else(|| panic!("the fake cloud has no group {id}"))
    }
}

#[async_trait]
impl CloudProvider for FakeCloud {
    fn name(&self) -> &str {
        "fake"
    }
    fn gpu_label(&self) -> &str {
        self.log.push("gpu_label".to_string());
        GPU_LABEL
    }
    fn available_gpu_types(&self) -> Vec<String> {
        self.log.push("available_gpu_types".to_string());
        GPU_TYPES.iter().map(|name| name.to_string()).collect()
    }
    fn pricing(&self) -> Result<Arc<dyn PricingModel>, CloudError> {
        self.log.push("pricing".to_string());
        match self.pricing {
            Pricing::NotOffered => Err(CloudError::NotImplemented),
            Pricing::Offered | Pricing::Failing => Ok(Arc::new(HourlyPricing {
                log: self.log.clone(),
                failing: self.pricing == Pricing::Failing,
            })),
        }
    }
    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        self.log.push("node_groups".to_string());
        Ok(self
            .groups
            .iter()
            .map(|group| group.clone() as Arc<dyn NodeGroup>)
            .collect())
    }
    async fn node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        self.log
            .push(format!("node_group_for_node {}", node.provider_id));
        Ok(self
            .groups
            .iter()
            .find(|group| {
                group
                    .state()
                    .instances
                    .iter()
                    .any(|instance| instance.id == node.provider_id)
            })
            .map(|group| group.clone() as Arc<dyn NodeGroup>))
    }
    async fn refresh(&self) -> Result<(), CloudError> {
        self.log.push("refresh".to_string());
        if let Some(gate) = &self.refresh_gate {
            gate.entered.notify_one();
            gate.release.notified().await;
        }
        let error = self
            .refresh_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        error.map_or(Ok(()), Err)
    }
    async fn cleanup(&self) -> Result<(), CloudError> {
        self.log.push("cleanup".to_string());
        Ok(())
    }
}

/// A server serving on a loopback port until [`Running::stop`].
pub struct Running {
    pub address: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    handle: JoinHandle<Result<(), ServeError>>,
}

impl Running {
    /// Fires the shutdown future; the server task is left to finish.
    pub fn request_shutdown(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Whether `serve` has returned.
    pub fn has_stopped(&self) -> bool {
        self.handle.is_finished()
    }

    /// Fires the shutdown future and waits for `serve` to return.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        self.request_shutdown();
        self.handle.await.expect("the server task panicked")
    }
}

/// Serves `cloud` on a fresh loopback port.
pub async fn start(cloud: Arc<FakeCloud>, tls: Tls) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let address = listener.local_addr().expect("loopback address");
    let (shutdown, shutdown_signal) = oneshot::channel::<()>();
    let handle = tokio::spawn(
        ProviderServer::from_arc(cloud).serve_on(listener, tls, async {
            let _ = shutdown_signal.await;
        }),
    );
    Running {
        address,
        shutdown: Some(shutdown),
        handle,
    }
}

/// Serves `cloud` over plaintext HTTP/2 and dials it.
pub async fn plain(cloud: Arc<FakeCloud>) -> (Running, CloudProviderClient<Channel>) {
    let server = start(cloud, Tls::Insecure).await;
    let client = plain_client(server.address)
        .await
        .expect("dial the plaintext server");
    (server, client)
}

pub async fn plain_client(
    address: SocketAddr,
) -> Result<CloudProviderClient<Channel>, tonic::transport::Error> {
    let channel = Endpoint::from_shared(format!("http://{address}"))?
        .connect()
        .await?;
    Ok(CloudProviderClient::new(channel))
}

/// A certificate and its key, PEM.
#[derive(Debug, Clone)]
pub struct KeyedCertificate {
    pub cert: String,
    pub key: String,
}

/// A throwaway PKI in a tempdir: the CA signing server and client certificates, a second CA no
/// one trusts, and client certificates for every case the server must refuse.
pub struct Pki {
    pub dir: tempfile::TempDir,
    /// The CA that signs the server's and the clients' certificates.
    issuer: CertifiedIssuer<'static, KeyPair>,
    pub ca: String,
    pub server: KeyedCertificate,
    pub client: KeyedCertificate,
    pub client_signed_by_other_ca: KeyedCertificate,
    pub expired_client: KeyedCertificate,
}

fn certificate_authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA")
}

fn leaf(
    ca: &CertifiedIssuer<'static, KeyPair>,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
    expired: bool,
) -> KeyedCertificate {
    let key = KeyPair::generate().expect("leaf key");
    let mut params = CertificateParams::new(
        names
            .iter()
            .map(|name| (*name).to_string())
            .collect::<Vec<_>>(),
    )
    .expect("leaf parameters");
    params
        .distinguished_name
        .push(DnType::CommonName, names.first().copied().unwrap_or("leaf"));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    if expired {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let cert = params.signed_by(&key, ca).expect("leaf certificate");
    KeyedCertificate {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

impl Pki {
    pub fn generate() -> Pki {
        let ca = certificate_authority("externalgrpc test CA");
        let other_ca = certificate_authority("someone else's CA");
        let client_name = ["cluster-autoscaler-grpc-client"];
        let pki = Pki {
            dir: tempfile::tempdir().expect("tempdir"),
            ca: ca.pem(),
            server: leaf(
                &ca,
                &["localhost", "127.0.0.1"],
                ExtendedKeyUsagePurpose::ServerAuth,
                false,
            ),
            client: leaf(
                &ca,
                &client_name,
                ExtendedKeyUsagePurpose::ClientAuth,
                false,
            ),
            client_signed_by_other_ca: leaf(
                &other_ca,
                &client_name,
                ExtendedKeyUsagePurpose::ClientAuth,
                false,
            ),
            expired_client: leaf(&ca, &client_name, ExtendedKeyUsagePurpose::ClientAuth, true),
            issuer: ca,
        };
        pki.write("tls.crt", &pki.server.cert);
        pki.write("tls.key", &pki.server.key);
        pki.write("ca.crt", &pki.ca);
        pki
    }

    /// A valid client certificate whose common name is `name`.
    pub fn client_named(&self, name: &str) -> KeyedCertificate {
        leaf(
            &self.issuer,
            &[name],
            ExtendedKeyUsagePurpose::ClientAuth,
            false,
        )
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, contents).expect("write a PEM file");
        path
    }

    /// The server's mutual TLS, in the cert-manager secret layout.
    pub fn server_tls(&self) -> Tls {
        Tls::mutual(
            self.path("tls.crt"),
            self.path("tls.key"),
            self.path("ca.crt"),
        )
    }

    /// Dials `address` with TLS, trusting the test CA, presenting `identity` if any. The result
    /// of the first RPC tells whether the server accepted the client: with TLS 1.3 a refused
    /// client certificate surfaces only then.
    pub async fn client(
        &self,
        address: SocketAddr,
        identity: Option<&KeyedCertificate>,
    ) -> Result<CloudProviderClient<Channel>, tonic::transport::Error> {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .domain_name("localhost");
        if let Some(identity) = identity {
            tls = tls.identity(Identity::from_pem(&identity.cert, &identity.key));
        }
        let channel = Endpoint::from_shared(format!("https://{address}"))?
            .tls_config(tls)?
            .connect()
            .await?;
        Ok(CloudProviderClient::new(channel))
    }
}

/// Log output captured in memory, for tests of what an operator reads.
#[derive(Clone, Default)]
pub struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl CapturedLog {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures every line logged at debug level or above on this thread until the guard is dropped.
/// Use a current-thread runtime (the default of `tokio::test`), so that the server's tasks log
/// through it too.
pub fn capture_log() -> (CapturedLog, tracing::subscriber::DefaultGuard) {
    let log = CapturedLog::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (log, tracing::subscriber::set_default(subscriber))
}
