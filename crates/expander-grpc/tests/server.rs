//! The gRPC expander client against a test server built on the same stack (tonic with rustls):
//! answers, error statuses, a server slower than the deadline, and TLS that trusts only the given
//! certificate (docs/grpc-expander.md).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferroscale_core::scale_up::{ExpanderQuery, ExpanderQueryOption, ExternalExpander};
use ferroscale_expander_grpc::proto::expander_server::{Expander, ExpanderServer};
use ferroscale_expander_grpc::proto::{BestOptionsRequest, BestOptionsResponse};
use ferroscale_expander_grpc::{GrpcExpander, GrpcExpanderError};
use ferroscale_externalgrpc_proto::{decode_node, decode_pod};
use ferroscale_model::{Node, Pod, Resources};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

/// What the test server does with a call.
#[derive(Clone)]
enum Behaviour {
    /// Answers these node group ids.
    Answer(Vec<&'static str>),
    /// Fails with this status.
    Fail(tonic::Code),
    /// Answers only after this long.
    Slow(Duration),
}

struct TestExpander {
    behaviour: Behaviour,
    received: Arc<Mutex<Vec<BestOptionsRequest>>>,
}

#[tonic::async_trait]
impl Expander for TestExpander {
    async fn best_options(
        &self,
        request: Request<BestOptionsRequest>,
    ) -> Result<Response<BestOptionsResponse>, Status> {
        let request = request.into_inner();
        let ids: Vec<String> = request
            .options
            .iter()
            .map(|o| o.node_group_id.clone())
            .collect();
        self.received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(request);
        let answer = match &self.behaviour {
            Behaviour::Answer(keep) => keep.iter().map(|s| s.to_string()).collect(),
            Behaviour::Fail(code) => return Err(Status::new(*code, "the model is not loaded")),
            Behaviour::Slow(delay) => {
                tokio::time::sleep(*delay).await;
                ids
            }
        };
        Ok(Response::new(BestOptionsResponse {
            options: answer
                .into_iter()
                .map(|id| ferroscale_expander_grpc::proto::Option {
                    node_group_id: id,
                    ..Default::default()
                })
                .collect(),
        }))
    }
}

/// A CA, a server certificate for `localhost` signed by it, and an unrelated CA.
struct Pki {
    dir: tempfile::TempDir,
    server_cert: String,
    server_key: String,
}

impl Pki {
    fn generate() -> Pki {
        let ca = authority("expander test CA");
        let other = authority("some other CA");
        let key = KeyPair::generate().expect("server key");
        let params =
            CertificateParams::new(vec!["localhost".to_string()]).expect("server parameters");
        let cert = params.signed_by(&key, &ca).expect("server certificate");
        let dir = tempfile::tempdir().expect("temporary directory");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("write CA");
        std::fs::write(dir.path().join("other-ca.pem"), other.pem()).expect("write other CA");
        std::fs::write(dir.path().join("not-a-cert.pem"), "hello").expect("write junk");
        Pki {
            dir,
            server_cert: cert.pem(),
            server_key: key.serialize_pem(),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA")
}

/// Serves the test expander over TLS on a loopback port; returns its address and what it got.
async fn serve(
    pki: &Pki,
    behaviour: Behaviour,
) -> (SocketAddr, Arc<Mutex<Vec<BestOptionsRequest>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let address = listener.local_addr().expect("local address");
    let received = Arc::new(Mutex::new(Vec::new()));
    let service = TestExpander {
        behaviour,
        received: received.clone(),
    };
    let tls =
        ServerTlsConfig::new().identity(Identity::from_pem(&pki.server_cert, &pki.server_key));
    let router = Server::builder()
        .tls_config(tls)
        .expect("server TLS")
        .add_service(ExpanderServer::new(service));
    tokio::spawn(router.serve_with_incoming(TcpIncoming::from(listener)));
    (address, received)
}

fn pod(name: &str) -> Arc<Pod> {
    let mut pod = Pod::new("default", name);
    pod.requests = Resources::new(1000, 1 << 30);
    Arc::new(pod)
}

fn query() -> ExpanderQuery {
    let option = |id: &str, pods: &[&str]| ExpanderQueryOption {
        group_id: id.to_string(),
        node_count: 2,
        pods: pods.iter().map(|p| pod(p)).collect(),
        debug: format!("option {id}"),
    };
    let mut templates = BTreeMap::new();
    for id in ["small", "large"] {
        let mut node = Node::new(format!("{id}-template"), Resources::new(4000, 16 << 30));
        node.labels.insert("pool".to_string(), id.to_string());
        templates.insert(id.to_string(), node);
    }
    ExpanderQuery {
        options: vec![
            option("small", &["p0", "p1"]),
            option("large", &["p0", "p1", "p2"]),
        ],
        templates,
    }
}

fn url(address: SocketAddr) -> String {
    format!("localhost:{}", address.port())
}

/// docs/grpc-expander.md GX-106: over TLS, the service gets every option with its node count,
/// pods and its group's template node (Kubernetes protobuf bytes), and its answer comes back.
#[tokio::test]
async fn gx106_the_service_answers_over_tls_and_sees_options_pods_and_templates() {
    let pki = Pki::generate();
    let (address, received) = serve(&pki, Behaviour::Answer(vec!["large"])).await;
    let expander = GrpcExpander::new(&url(address), &pki.file("ca.pem")).expect("client");
    let answer = expander.best_options(&query()).await;
    assert_eq!(answer, Ok(vec!["large".to_string()]));

    let received = received.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(received.len(), 1);
    let request = &received[0];
    let options: Vec<(&str, i32, usize)> = request
        .options
        .iter()
        .map(|o| (o.node_group_id.as_str(), o.node_count, o.pod_bytes.len()))
        .collect();
    assert_eq!(options, vec![("small", 2, 2), ("large", 2, 3)]);
    let pods: Vec<String> = request.options[1]
        .pod_bytes
        .iter()
        .map(|b| decode_pod(b).expect("pod bytes decode").key())
        .collect();
    assert_eq!(pods, vec!["default/p0", "default/p1", "default/p2"]);
    let large = decode_node(&request.node_bytes_map["large"]).expect("node bytes decode");
    assert_eq!(large.name, "large-template");
    assert_eq!(large.label("pool"), Some("large"));
    assert_eq!(request.node_bytes_map.len(), 2);
}

/// docs/grpc-expander.md GX-104: an error status is an error the engine falls back from, and it
/// names the service and the status.
#[tokio::test]
async fn an_error_status_is_reported() {
    let pki = Pki::generate();
    let (address, _) = serve(&pki, Behaviour::Fail(tonic::Code::Unavailable)).await;
    let expander = GrpcExpander::new(&url(address), &pki.file("ca.pem")).expect("client");
    let error = expander.best_options(&query()).await.expect_err("fails");
    assert!(error.0.contains("Unavailable"), "{error}");
    assert!(error.0.contains("the model is not loaded"), "{error}");
    assert!(error.0.contains(&url(address)), "{error}");
}

/// docs/grpc-expander.md GX-104: a server slower than the deadline is an error, not a hang.
#[tokio::test]
async fn a_server_slower_than_the_deadline_is_an_error() {
    let pki = Pki::generate();
    let (address, received) = serve(&pki, Behaviour::Slow(Duration::from_secs(60))).await;
    let expander = GrpcExpander::with_deadline(
        &url(address),
        &pki.file("ca.pem"),
        Duration::from_millis(300),
    )
    .expect("client");
    let error = expander
        .best_options(&query())
        .await
        .expect_err("times out");
    assert_eq!(received.lock().unwrap_or_else(|e| e.into_inner()).len(), 1);
    assert!(!error.0.is_empty());
}

/// docs/grpc-expander.md GX-105: a server whose certificate does not chain to the configured one
/// is not talked to, and the call fails.
#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused() {
    let pki = Pki::generate();
    let (address, received) = serve(&pki, Behaviour::Answer(vec!["small"])).await;
    let expander = GrpcExpander::new(&url(address), &pki.file("other-ca.pem")).expect("client");
    assert!(expander.best_options(&query()).await.is_err());
    assert!(
        received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    );
}

/// docs/grpc-expander.md GX-105: a missing or non-PEM certificate file is a start-up error that
/// names the file.
#[test]
fn bad_certificate_files_are_named() {
    let pki = Pki::generate();
    let missing = pki.file("missing.pem");
    match GrpcExpander::new("localhost:1", &missing) {
        Err(GrpcExpanderError::ReadCertificate { path, .. }) => {
            assert_eq!(path, missing.display().to_string())
        }
        other => panic!("expected a read error, got {other:?}"),
    }
    let junk = pki.file("not-a-cert.pem");
    assert_eq!(
        GrpcExpander::new("localhost:1", &junk).err(),
        Some(GrpcExpanderError::NoCertificate {
            path: junk.display().to_string()
        })
    );
}
