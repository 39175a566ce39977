//! What the integration tests and the benchmark share: a counting test double of an externalgrpc
//! service served over real loopback sockets (plaintext or mutual TLS), certificates generated
//! with rcgen into a temporary directory, and cloud config files.
//!
//! The double answers from a scripted state, counts calls per wire method, keeps every request,
//! and can be told to fail or stall any method.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ferroscale_externalgrpc_proto::v1::cloud_provider_server::{
    CloudProvider, CloudProviderServer,
};
use ferroscale_externalgrpc_proto::v1::*;
use ferroscale_provider_externalgrpc::{ExternalGrpcProvider, NodeGroupDefaults};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

/// How the double answers `NodeGroupTemplateNodeInfo` for a group.
#[derive(Clone, Debug)]
pub enum TemplateAnswer {
    /// OK with these `nodeBytes` (may be empty).
    Bytes(Vec<u8>),
    /// OK with the bytes in the pre-1.35 field 1 only.
    LegacyBytes(Vec<u8>),
    /// OK with these `nodeBytes` and these `resourceSliceBytes` entries.
    WithSlices(Vec<u8>, Vec<Vec<u8>>),
}

/// How the double answers `NodeGroupForNode` for a node outside every group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotAutoscaledAnswer {
    /// `nodeGroup` present with id "" (what upstream's example server sends).
    EmptyGroup,
    /// `nodeGroup` absent.
    Absent,
}

/// The scripted state of the double.
#[derive(Default)]
pub struct Script {
    pub groups: Vec<NodeGroup>,
    /// providerID → the group message to answer with.
    pub owner_by_provider_id: HashMap<String, NodeGroup>,
    pub not_autoscaled: Option<NotAutoscaledAnswer>,
    pub gpu_label: String,
    pub gpu_types: Vec<String>,
    pub target_sizes: HashMap<String, i32>,
    pub instances: HashMap<String, Vec<Instance>>,
    /// Absent → status 12.
    pub templates: HashMap<String, TemplateAnswer>,
    /// Absent group → status 12; `Some(None)` → OK without options.
    pub options: HashMap<String, Option<NodeGroupAutoscalingOptions>>,
    /// `None` → status 12.
    pub node_price: Option<f64>,
    pub pod_price: Option<f64>,
    /// Wire method name → the status every call of it answers.
    pub failures: HashMap<&'static str, Status>,
    /// Wire method name → how long every call of it sleeps before answering.
    pub delays: HashMap<&'static str, Duration>,
}

/// Everything the double was asked.
#[derive(Default, Clone)]
pub struct Received {
    /// Wire method names in the order they were called.
    pub methods: Vec<&'static str>,
    /// The `grpc-timeout` header of each call, in the same order (`None` when missing).
    pub grpc_timeouts: Vec<Option<String>>,
    pub node_group_for_node: Vec<ExternalGrpcNode>,
    pub increase: Vec<NodeGroupIncreaseSizeRequest>,
    pub decrease: Vec<NodeGroupDecreaseTargetSizeRequest>,
    pub delete: Vec<NodeGroupDeleteNodesRequest>,
    pub options: Vec<NodeGroupAutoscalingOptionsRequest>,
    pub node_price: Vec<PricingNodePriceRequest>,
    pub pod_price: Vec<PricingPodPriceRequest>,
}

/// The counting test double.
#[derive(Default)]
pub struct FakeCloud {
    script: Mutex<Script>,
    received: Mutex<Received>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl FakeCloud {
    pub fn new(script: Script) -> Arc<FakeCloud> {
        Arc::new(FakeCloud {
            script: Mutex::new(script),
            received: Mutex::new(Received::default()),
        })
    }

    /// Changes the script while the double serves.
    pub fn script(&self) -> MutexGuard<'_, Script> {
        lock(&self.script)
    }

    pub fn received(&self) -> Received {
        lock(&self.received).clone()
    }

    /// Calls of one wire method so far.
    pub fn calls(&self, method: &str) -> usize {
        lock(&self.received)
            .methods
            .iter()
            .filter(|m| **m == method)
            .count()
    }

    pub fn total_calls(&self) -> usize {
        lock(&self.received).methods.len()
    }

    pub fn forget_calls(&self) {
        *lock(&self.received) = Received::default();
    }

    /// Counts the call, then fails or stalls it as scripted.
    async fn enter<T>(&self, method: &'static str, request: &Request<T>) -> Result<(), Status> {
        {
            let mut received = lock(&self.received);
            received.methods.push(method);
            received.grpc_timeouts.push(
                request
                    .metadata()
                    .get("grpc-timeout")
                    .and_then(|value| value.to_str().ok())
                    .map(str::to_string),
            );
        }
        let (failure, delay) = {
            let script = self.script();
            (
                script.failures.get(method).cloned(),
                script.delays.get(method).copied(),
            )
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        match failure {
            Some(status) => Err(status),
            None => Ok(()),
        }
    }
}

fn unimplemented(method: &str) -> Status {
    Status::unimplemented(format!("{method} is not implemented by this test cloud"))
}

#[tonic::async_trait]
impl CloudProvider for FakeCloud {
    async fn node_groups(
        &self,
        request: Request<NodeGroupsRequest>,
    ) -> Result<Response<NodeGroupsResponse>, Status> {
        self.enter("NodeGroups", &request).await?;
        Ok(Response::new(NodeGroupsResponse {
            node_groups: self.script().groups.clone(),
        }))
    }

    async fn node_group_for_node(
        &self,
        request: Request<NodeGroupForNodeRequest>,
    ) -> Result<Response<NodeGroupForNodeResponse>, Status> {
        self.enter("NodeGroupForNode", &request).await?;
        let node = request.into_inner().node.unwrap_or_default();
        lock(&self.received).node_group_for_node.push(node.clone());
        let script = self.script();
        let node_group = match script.owner_by_provider_id.get(&node.provider_id) {
            Some(group) => Some(group.clone()),
            None => match script.not_autoscaled {
                Some(NotAutoscaledAnswer::Absent) => None,
                _ => Some(NodeGroup::default()),
            },
        };
        Ok(Response::new(NodeGroupForNodeResponse { node_group }))
    }

    async fn pricing_node_price(
        &self,
        request: Request<PricingNodePriceRequest>,
    ) -> Result<Response<PricingNodePriceResponse>, Status> {
        self.enter("PricingNodePrice", &request).await?;
        lock(&self.received).node_price.push(request.into_inner());
        match self.script().node_price {
            Some(price) => Ok(Response::new(PricingNodePriceResponse { price })),
            None => Err(unimplemented("PricingNodePrice")),
        }
    }

    async fn pricing_pod_price(
        &self,
        request: Request<PricingPodPriceRequest>,
    ) -> Result<Response<PricingPodPriceResponse>, Status> {
        self.enter("PricingPodPrice", &request).await?;
        lock(&self.received).pod_price.push(request.into_inner());
        match self.script().pod_price {
            Some(price) => Ok(Response::new(PricingPodPriceResponse { price })),
            None => Err(unimplemented("PricingPodPrice")),
        }
    }

    async fn gpu_label(
        &self,
        request: Request<GpuLabelRequest>,
    ) -> Result<Response<GpuLabelResponse>, Status> {
        self.enter("GPULabel", &request).await?;
        Ok(Response::new(GpuLabelResponse {
            label: self.script().gpu_label.clone(),
        }))
    }

    async fn get_available_gpu_types(
        &self,
        request: Request<GetAvailableGpuTypesRequest>,
    ) -> Result<Response<GetAvailableGpuTypesResponse>, Status> {
        self.enter("GetAvailableGPUTypes", &request).await?;
        // Values carry something the client must ignore.
        let gpu_types = self
            .script()
            .gpu_types
            .iter()
            .map(|name| {
                (
                    name.clone(),
                    prost_types::Any {
                        type_url: "type.example/ignored".to_string(),
                        value: vec![1, 2, 3],
                    },
                )
            })
            .collect::<BTreeMap<_, _>>();
        Ok(Response::new(GetAvailableGpuTypesResponse { gpu_types }))
    }

    async fn cleanup(
        &self,
        request: Request<CleanupRequest>,
    ) -> Result<Response<CleanupResponse>, Status> {
        self.enter("Cleanup", &request).await?;
        Ok(Response::new(CleanupResponse {}))
    }

    async fn refresh(
        &self,
        request: Request<RefreshRequest>,
    ) -> Result<Response<RefreshResponse>, Status> {
        self.enter("Refresh", &request).await?;
        Ok(Response::new(RefreshResponse {}))
    }

    async fn node_group_target_size(
        &self,
        request: Request<NodeGroupTargetSizeRequest>,
    ) -> Result<Response<NodeGroupTargetSizeResponse>, Status> {
        self.enter("NodeGroupTargetSize", &request).await?;
        let id = request.into_inner().id;
        match self.script().target_sizes.get(&id) {
            Some(target_size) => Ok(Response::new(NodeGroupTargetSizeResponse {
                target_size: *target_size,
            })),
            None => Err(Status::unknown(format!("node group {id} not found"))),
        }
    }

    async fn node_group_increase_size(
        &self,
        request: Request<NodeGroupIncreaseSizeRequest>,
    ) -> Result<Response<NodeGroupIncreaseSizeResponse>, Status> {
        self.enter("NodeGroupIncreaseSize", &request).await?;
        lock(&self.received).increase.push(request.into_inner());
        Ok(Response::new(NodeGroupIncreaseSizeResponse {}))
    }

    async fn node_group_delete_nodes(
        &self,
        request: Request<NodeGroupDeleteNodesRequest>,
    ) -> Result<Response<NodeGroupDeleteNodesResponse>, Status> {
        self.enter("NodeGroupDeleteNodes", &request).await?;
        lock(&self.received).delete.push(request.into_inner());
        Ok(Response::new(NodeGroupDeleteNodesResponse {}))
    }

    async fn node_group_decrease_target_size(
        &self,
        request: Request<NodeGroupDecreaseTargetSizeRequest>,
    ) -> Result<Response<NodeGroupDecreaseTargetSizeResponse>, Status> {
        self.enter("NodeGroupDecreaseTargetSize", &request).await?;
        lock(&self.received).decrease.push(request.into_inner());
        Ok(Response::new(NodeGroupDecreaseTargetSizeResponse {}))
    }

    async fn node_group_nodes(
        &self,
        request: Request<NodeGroupNodesRequest>,
    ) -> Result<Response<NodeGroupNodesResponse>, Status> {
        self.enter("NodeGroupNodes", &request).await?;
        let id = request.into_inner().id;
        Ok(Response::new(NodeGroupNodesResponse {
            instances: self
                .script()
                .instances
                .get(&id)
                .cloned()
                .unwrap_or_default(),
        }))
    }

    async fn node_group_template_node_info(
        &self,
        request: Request<NodeGroupTemplateNodeInfoRequest>,
    ) -> Result<Response<NodeGroupTemplateNodeInfoResponse>, Status> {
        self.enter("NodeGroupTemplateNodeInfo", &request).await?;
        let id = request.into_inner().id;
        match self.script().templates.get(&id) {
            Some(TemplateAnswer::Bytes(bytes)) => {
                Ok(Response::new(NodeGroupTemplateNodeInfoResponse {
                    node_bytes: bytes.clone(),
                    ..Default::default()
                }))
            }
            Some(TemplateAnswer::LegacyBytes(bytes)) => {
                Ok(Response::new(NodeGroupTemplateNodeInfoResponse {
                    legacy_node_info: bytes.clone(),
                    ..Default::default()
                }))
            }
            Some(TemplateAnswer::WithSlices(bytes, slices)) => {
                Ok(Response::new(NodeGroupTemplateNodeInfoResponse {
                    node_bytes: bytes.clone(),
                    resource_slice_bytes: slices.clone(),
                    ..Default::default()
                }))
            }
            None => Err(unimplemented("NodeGroupTemplateNodeInfo")),
        }
    }

    async fn node_group_get_options(
        &self,
        request: Request<NodeGroupAutoscalingOptionsRequest>,
    ) -> Result<Response<NodeGroupAutoscalingOptionsResponse>, Status> {
        self.enter("NodeGroupGetOptions", &request).await?;
        let request = request.into_inner();
        let id = request.id.clone();
        lock(&self.received).options.push(request);
        match self.script().options.get(&id) {
            Some(options) => Ok(Response::new(NodeGroupAutoscalingOptionsResponse {
                node_group_autoscaling_options: *options,
            })),
            None => Err(unimplemented("NodeGroupGetOptions")),
        }
    }
}

/// A group message.
pub fn group(id: &str, min_size: i32, max_size: i32) -> NodeGroup {
    NodeGroup {
        id: id.to_string(),
        min_size,
        max_size,
        debug: format!("{id} ({min_size}..{max_size})"),
    }
}

/// A running double; stops when dropped.
pub struct RunningServer {
    pub address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The loopback address with an ephemeral port.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Serves `cloud` in plaintext (h2c) on an ephemeral loopback port.
pub async fn serve_plain(cloud: Arc<FakeCloud>) -> RunningServer {
    serve_plain_at(cloud, loopback()).await
}

/// Serves `cloud` in plaintext (h2c) at `address`.
pub async fn serve_plain_at(cloud: Arc<FakeCloud>, address: SocketAddr) -> RunningServer {
    match try_serve(cloud, Server::builder(), address).await {
        Ok(server) => server,
        Err(error) => panic!("serving at {address}: {error}"),
    }
}

/// Serves `cloud` with the server certificate of `pki` on an ephemeral loopback port, requiring
/// a client certificate signed by `client_ca`.
pub async fn serve_mtls(cloud: Arc<FakeCloud>, pki: &Pki, client_ca: &Path) -> RunningServer {
    let tls = server_tls(&pki.server_cert, &pki.server_key, client_ca);
    match try_serve(cloud, tls, loopback()).await {
        Ok(server) => server,
        Err(error) => panic!("serving: {error}"),
    }
}

/// A TLS server builder with this certificate, requiring client certificates from `client_ca`.
pub fn server_tls(cert: &Path, key: &Path, client_ca: &Path) -> Server {
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(read(cert), read(key)))
        .client_ca_root(Certificate::from_pem(read(client_ca)));
    match Server::builder().tls_config(tls) {
        Ok(builder) => builder,
        Err(error) => panic!("server TLS configuration: {error}"),
    }
}

/// Serves `cloud` with `builder` at `address`; fails when the address cannot be bound.
pub async fn try_serve(
    cloud: Arc<FakeCloud>,
    builder: Server,
    address: SocketAddr,
) -> std::io::Result<RunningServer> {
    let listener = TcpListener::bind(address).await?;
    let address = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let service = CloudProviderServer::from_arc(cloud);
    tokio::spawn(async move {
        let _ = builder
            .serve_with_incoming_shutdown(service, TcpIncoming::from(listener), async {
                let _ = stopped.await;
            })
            .await;
    });
    Ok(RunningServer {
        address,
        stop: Some(stop),
    })
}

fn read(path: &Path) -> Vec<u8> {
    match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) => panic!("reading {}: {error}", path.display()),
    }
}

/// Certificates written to a temporary directory: a CA signing a server certificate (for
/// `localhost`, `127.0.0.1` and `::1`) and a client certificate, and a second, unrelated CA with
/// its own client certificate.
pub struct Pki {
    pub dir: TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// A server certificate from the same CA for `elsewhere.example` only.
    pub wrong_name_server_cert: PathBuf,
    pub wrong_name_server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub other_ca: PathBuf,
    pub other_client_cert: PathBuf,
    pub other_client_key: PathBuf,
    /// A client certificate of the first CA that expired in 2021.
    pub expired_client_cert: PathBuf,
    pub expired_client_key: PathBuf,
}

impl Pki {
    pub fn generate() -> Pki {
        match Pki::try_generate() {
            Ok(pki) => pki,
            Err(error) => panic!("generating test certificates: {error}"),
        }
    }

    fn try_generate() -> Result<Pki, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = |name: &str| dir.path().join(name);

        let (ca_pem, ca) = certificate_authority("externalgrpc test CA")?;
        let (other_ca_pem, other_ca) = certificate_authority("unrelated test CA")?;

        let server_key = KeyPair::generate()?;
        let mut server = CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ])?;
        server
            .distinguished_name
            .push(DnType::CommonName, "externalgrpc test server");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server = server.signed_by(&server_key, &ca)?;

        let wrong_name_key = KeyPair::generate()?;
        let mut wrong_name = CertificateParams::new(vec!["elsewhere.example".to_string()])?;
        wrong_name.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let wrong_name = wrong_name.signed_by(&wrong_name_key, &ca)?;

        let client = |issuer: &CertifiedIssuer<'static, KeyPair>| {
            let key = KeyPair::generate()?;
            let mut params =
                CertificateParams::new(vec!["cluster-autoscaler-grpc-client".to_string()])?;
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            let certificate = params.signed_by(&key, issuer)?;
            Ok::<_, rcgen::Error>((certificate.pem(), key.serialize_pem()))
        };
        let (client_cert, client_key) = client(&ca)?;
        let (other_client_cert, other_client_key) = client(&other_ca)?;
        let expired_key = KeyPair::generate()?;
        let mut expired =
            CertificateParams::new(vec!["cluster-autoscaler-grpc-client".to_string()])?;
        expired.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        expired.not_before = rcgen::date_time_ymd(2020, 1, 1);
        expired.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let expired = expired.signed_by(&expired_key, &ca)?;

        let pki = Pki {
            ca: path("ca.crt"),
            server_cert: path("server.crt"),
            server_key: path("server.key"),
            wrong_name_server_cert: path("wrong-name.crt"),
            wrong_name_server_key: path("wrong-name.key"),
            client_cert: path("tls.crt"),
            client_key: path("tls.key"),
            other_ca: path("other-ca.crt"),
            other_client_cert: path("other-tls.crt"),
            other_client_key: path("other-tls.key"),
            expired_client_cert: path("expired-tls.crt"),
            expired_client_key: path("expired-tls.key"),
            dir,
        };
        std::fs::write(&pki.ca, ca_pem)?;
        std::fs::write(&pki.server_cert, server.pem())?;
        std::fs::write(&pki.server_key, server_key.serialize_pem())?;
        std::fs::write(&pki.wrong_name_server_cert, wrong_name.pem())?;
        std::fs::write(&pki.wrong_name_server_key, wrong_name_key.serialize_pem())?;
        std::fs::write(&pki.client_cert, client_cert)?;
        std::fs::write(&pki.client_key, client_key)?;
        std::fs::write(&pki.other_ca, other_ca_pem)?;
        std::fs::write(&pki.other_client_cert, other_client_cert)?;
        std::fs::write(&pki.other_client_key, other_client_key)?;
        std::fs::write(&pki.expired_client_cert, expired.pem())?;
        std::fs::write(&pki.expired_client_key, expired_key.serialize_pem())?;
        Ok(pki)
    }

    /// Writes `contents` to a new file in the certificate directory.
    pub fn write(&self, name: &str, contents: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        if let Err(error) = std::fs::write(&path, contents) {
            panic!("writing {}: {error}", path.display());
        }
        path
    }
}

fn certificate_authority(
    name: &str,
) -> Result<(String, CertifiedIssuer<'static, KeyPair>), rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
    Ok((issuer.pem(), issuer))
}

/// A cloud config file in its own temporary directory.
pub struct ConfigFile {
    pub dir: TempDir,
    pub path: PathBuf,
}

pub fn config_file(yaml: &str) -> ConfigFile {
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(error) => panic!("creating a temporary directory: {error}"),
    };
    let path = dir.path().join("cloud-config.yaml");
    let written = std::fs::File::create(&path).and_then(|mut file| file.write_all(yaml.as_bytes()));
    if let Err(error) = written {
        panic!("writing {}: {error}", path.display());
    }
    ConfigFile { dir, path }
}

/// A provider for a plaintext service at `address` with this `grpc_timeout`.
pub fn plain_provider(address: SocketAddr, grpc_timeout: &str) -> ExternalGrpcProvider {
    let file = config_file(&format!(
        "address: \"{address}\"\ngrpc_timeout: {grpc_timeout}\n"
    ));
    provider_from(&file.path)
}

/// A provider using mutual TLS with the client certificate of `pki`, trusting `ca`.
pub fn mtls_provider(address: &str, pki: &Pki, ca: &Path) -> ExternalGrpcProvider {
    let file = mtls_config(address, &pki.client_cert, &pki.client_key, ca);
    provider_from(&file.path)
}

pub fn mtls_config(address: &str, cert: &Path, key: &Path, ca: &Path) -> ConfigFile {
    config_file(&format!(
        "address: \"{address}\"\ncert: {}\nkey: {}\ncacert: {}\n",
        cert.display(),
        key.display(),
        ca.display()
    ))
}

pub fn provider_from(path: &Path) -> ExternalGrpcProvider {
    match ExternalGrpcProvider::from_config_file(path, NodeGroupDefaults::default()) {
        Ok(provider) => provider,
        Err(error) => panic!("building the provider: {error}"),
    }
}

/// Unwraps a result a test needs, with the error in the panic message.
pub fn ok<T, E: std::fmt::Display>(result: Result<T, E>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("{what}: {error}"),
    }
}
