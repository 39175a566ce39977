//! Error bodies that echo the request: whatever answers (the API, a proxy, a broken endpoint) may
//! send back the `Authorization` header it received, with the API key and a signature valid for
//! minutes. Neither those nor the secret may reach the errors the provider returns (which the
//! core logs), the status `serve-provider` sends its gRPC client, or any log line.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use ferroscale_core::cloud::CloudProvider;
use ferroscale_externalgrpc_proto::v1::NodeGroupIncreaseSizeRequest;
use ferroscale_externalgrpc_proto::v1::cloud_provider_client::CloudProviderClient;
use ferroscale_externalgrpc_sdk::{ProviderServer, Tls};
use ferroscale_testing_exoscale::Endpoint;
use support::*;
use tonic::transport::Endpoint as GrpcEndpoint;

/// Log output captured in memory.
#[derive(Clone, Default)]
struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl CapturedLog {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Asserts `text` quotes none of the credentials the fake saw.
fn assert_no_credentials(text: &str, signatures: &[String], what: &str) {
    assert!(!text.contains(KEY), "{what} holds the API key: {text}");
    assert!(
        !text.contains(SECRET),
        "{what} holds the API secret: {text}"
    );
    for signature in signatures {
        assert!(
            !text.contains(signature.as_str()),
            "{what} holds a request signature: {text}"
        );
    }
}

// A current-thread runtime (the default of `tokio::test`), so every task logs through the
// subscriber set for this thread.
#[tokio::test]
async fn echoed_credentials_reach_neither_errors_nor_logs() {
    let log = CapturedLog::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let fake = fake().await;
    let pool = fake.add_instance_pool("workers", 1);
    let provider = provider(&fake, &[]);
    let group = provider
        .node_group_for_node(&node(&first_member(&fake, &pool)))
        .await
        .unwrap()
        .expect("the pool's group");

    // A scale PUT refused (4xx) and reads failing (5xx, retried), each answer echoing the request.
    fake.fail_next_echoing_request(Endpoint::ScaleInstancePool, 403, 1);
    let scale_error = group.increase_size(1).await.unwrap_err().to_string();
    fake.fail_next_echoing_request(Endpoint::GetInstancePool, 502, 3);
    let refresh_error = provider.refresh().await.unwrap_err().to_string();

    // The same refusal through the externalgrpc service, as `serve-provider` serves it.
    let provider: Arc<dyn CloudProvider> = Arc::new(provider);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(ProviderServer::from_arc(provider).serve_on(
        listener,
        Tls::Insecure,
        std::future::pending(),
    ));
    let channel = GrpcEndpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    fake.fail_next_echoing_request(Endpoint::ScaleInstancePool, 403, 1);
    let status = CloudProviderClient::new(channel)
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            id: pool.clone(),
            delta: 1,
        })
        .await
        .unwrap_err();
    let grpc_error = status.message().to_string();

    let signatures: Vec<String> = fake
        .requests()
        .iter()
        .filter_map(|request| request.header("authorization"))
        .filter_map(|header| header.rsplit_once("signature="))
        .map(|(_, signature)| signature.to_string())
        .collect();
    assert!(!signatures.is_empty(), "the requests were signed");
    // The fake did echo them: the redaction is what keeps them out.
    let echoes = fake
        .requests()
        .iter()
        .filter(|request| request.status == 403 || request.status == 502)
        .count();
    assert_eq!(echoes, 5);

    for (what, text) in [
        ("the scale error", &scale_error),
        ("the refresh error", &refresh_error),
        ("the gRPC status", &grpc_error),
    ] {
        assert_no_credentials(text, &signatures, what);
        // What the answer said besides is still there, to explain the failure.
        assert!(text.contains("injected"), "{what}: {text}");
        assert!(text.contains("[redacted]"), "{what}: {text}");
    }
    let logged = log.text();
    assert!(
        logged.contains("injected 403"),
        "the failure is logged: {logged}"
    );
    assert!(
        logged.contains("externalgrpc call failed"),
        "the server logs the failed call: {logged}"
    );
    assert_no_credentials(&logged, &signatures, "the log");
}
