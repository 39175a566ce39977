//! Connecting to the service over real loopback sockets (docs/externalgrpc.md GRPC-03, GRPC-04):
//! mutual TLS with certificates generated for the test, refusal of servers and clients outside the
//! trusted CA, plaintext with a loud warning, start-up errors that name the file at fault, an
//! unreachable service that is not a start-up error, and the per-call deadline.

mod support;

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferroscale_core::cloud::{CloudError, CloudProvider};
use ferroscale_provider_externalgrpc::{
    ConnectionError, ExternalGrpcError, ExternalGrpcProvider, NodeGroupDefaults,
};
use support::*;
use tracing_subscriber::fmt::MakeWriter;

fn one_group_cloud() -> Arc<FakeCloud> {
    FakeCloud::new(Script {
        groups: vec![group("ng-1", 1, 10)],
        ..Script::default()
    })
}

fn provider_error(path: &std::path::Path) -> ExternalGrpcError {
    match ExternalGrpcProvider::from_config_file(path, NodeGroupDefaults::default()) {
        Ok(_) => panic!("the provider was built from {}", path.display()),
        Err(error) => error,
    }
}

/// A provider error's text, which is what the operator reads.
fn message(error: Result<impl Sized, CloudError>) -> String {
    match error {
        Ok(_) => panic!("the call succeeded"),
        Err(error) => error.to_string(),
    }
}

#[tokio::test]
async fn mutual_tls_with_certificates_from_the_configured_ca_works() {
    let pki = Pki::generate();
    let cloud = one_group_cloud();
    let server = serve_mtls(cloud.clone(), &pki, &pki.ca).await;
    for host in ["127.0.0.1", "localhost"] {
        let address = format!("{host}:{}", server.address.port());
        let provider = mtls_provider(&address, &pki, &pki.ca);
        let groups = ok(provider.node_groups().await, "node groups over mTLS");
        assert_eq!(
            groups
                .iter()
                .map(|g| g.id().to_string())
                .collect::<Vec<_>>(),
            ["ng-1"]
        );
    }
    assert_eq!(cloud.calls("NodeGroups"), 2);
}

#[tokio::test]
async fn mutual_tls_to_a_bracketed_ipv6_address_verifies_its_ip_san() {
    let pki = Pki::generate();
    let cloud = one_group_cloud();
    let tls = server_tls(&pki.server_cert, &pki.server_key, &pki.ca);
    let Ok(server) = try_serve(cloud.clone(), tls, "[::1]:0".parse().unwrap_or(loopback())).await
    else {
        eprintln!("skipped: this machine has no IPv6 loopback");
        return;
    };
    let provider = mtls_provider(&format!("[::1]:{}", server.address.port()), &pki, &pki.ca);
    let groups = ok(
        provider.node_groups().await,
        "node groups over mTLS to [::1]",
    );
    assert_eq!(groups.len(), 1);
}

#[tokio::test]
async fn a_server_whose_certificate_is_not_signed_by_the_configured_ca_is_refused() {
    let pki = Pki::generate();
    let cloud = one_group_cloud();
    let server = serve_mtls(cloud.clone(), &pki, &pki.ca).await;
    let address = format!("127.0.0.1:{}", server.address.port());
    // The client trusts only the unrelated CA, so the server's certificate does not verify.
    let provider = mtls_provider(&address, &pki, &pki.other_ca);
    let text = message(provider.node_groups().await);
    assert!(text.contains("NodeGroups"), "{text}");
    assert!(text.contains("status 14"), "{text}");
    assert_eq!(
        cloud.calls("NodeGroups"),
        0,
        "no request reached the server"
    );
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused_by_the_server() {
    let pki = Pki::generate();
    let cloud = one_group_cloud();
    let server = serve_mtls(cloud.clone(), &pki, &pki.ca).await;
    let address = format!("127.0.0.1:{}", server.address.port());
    let file = mtls_config(
        &address,
        &pki.other_client_cert,
        &pki.other_client_key,
        &pki.ca,
    );
    let provider = provider_from(&file.path);
    assert!(provider.node_groups().await.is_err());
    assert_eq!(
        cloud.calls("NodeGroups"),
        0,
        "no request reached the server"
    );
}

#[tokio::test]
async fn a_server_certificate_for_another_name_is_refused() {
    let pki = Pki::generate();
    let cloud = one_group_cloud();
    let tls = server_tls(
        &pki.wrong_name_server_cert,
        &pki.wrong_name_server_key,
        &pki.ca,
    );
    let server = ok(try_serve(cloud.clone(), tls, loopback()).await, "serving");
    // Signed by the trusted CA, but for elsewhere.example, not for the host of the address.
    let provider = mtls_provider(
        &format!("127.0.0.1:{}", server.address.port()),
        &pki,
        &pki.ca,
    );
    let text = message(provider.node_groups().await);
    assert!(text.contains("status 14"), "{text}");
    assert_eq!(cloud.calls("NodeGroups"), 0);
}

#[tokio::test]
async fn a_plaintext_client_cannot_talk_to_a_tls_server() {
    let pki = Pki::generate();
    let cloud = one_group_cloud();
    let server = serve_mtls(cloud.clone(), &pki, &pki.ca).await;
    let provider = plain_provider(server.address, "2s");
    assert!(provider.node_groups().await.is_err());
    assert_eq!(cloud.calls("NodeGroups"), 0);
}

/// Collects what the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        let bytes = self.0.lock().map(|bytes| bytes.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if let Ok(mut buffer) = self.0.lock() {
            buffer.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

fn capturing(level: tracing::Level) -> (Captured, impl tracing::Subscriber) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(level)
        .with_ansi(false)
        .finish();
    (captured, subscriber)
}

#[tokio::test]
async fn plaintext_works_and_warns_loudly_that_it_is_unauthenticated() {
    let cloud = one_group_cloud();
    let server = serve_plain(cloud.clone()).await;
    let file = config_file(&format!(
        "address: \"{}\"\nkey: /ignored/tls.key\n",
        server.address
    ));
    let (captured, subscriber) = capturing(tracing::Level::WARN);
    let provider = tracing::subscriber::with_default(subscriber, || provider_from(&file.path));
    let log = captured.text();
    assert!(log.contains("WARN"), "{log}");
    assert!(log.contains("PLAINTEXT"), "{log}");
    assert!(log.contains(&server.address.to_string()), "{log}");

    let groups = ok(provider.node_groups().await, "node groups over h2c");
    assert_eq!(groups.len(), 1);
}

#[tokio::test]
async fn mutual_tls_logs_no_key_material() {
    let pki = Pki::generate();
    let cloud = one_group_cloud();
    let server = serve_mtls(cloud.clone(), &pki, &pki.ca).await;
    let address = format!("127.0.0.1:{}", server.address.port());
    let (captured, subscriber) = capturing(tracing::Level::TRACE);
    let provider =
        tracing::subscriber::with_default(subscriber, || mtls_provider(&address, &pki, &pki.ca));
    let log = captured.text();
    assert!(log.contains("mutual TLS"), "{log}");
    assert!(!log.contains("PRIVATE KEY"), "{log}");
    assert!(!log.contains("PLAINTEXT"), "{log}");
    drop(provider);
}

#[tokio::test]
async fn unreadable_or_unusable_tls_files_are_start_up_errors_naming_the_file() {
    let pki = Pki::generate();
    let address = "127.0.0.1:1";
    let missing = pki.dir.path().join("missing.pem");
    let not_pem = pki.write("not-pem.crt", b"this is not a certificate\n");

    // Unreadable files, each named with its key.
    for (cert, key, ca, named) in [
        (&missing, &pki.client_key, &pki.ca, "cert"),
        (&pki.client_cert, &missing, &pki.ca, "key"),
        (&pki.client_cert, &pki.client_key, &missing, "cacert"),
    ] {
        let file = mtls_config(address, cert, key, ca);
        let error = provider_error(&file.path);
        assert!(
            matches!(
                &error,
                ExternalGrpcError::Connection(ConnectionError::ReadFile { key, .. }) if *key == named
            ),
            "{error}"
        );
        assert!(error.to_string().contains("missing.pem"), "{error}");
    }

    // Files without the PEM block they must hold.
    let file = mtls_config(address, &not_pem, &pki.client_key, &pki.ca);
    let error = provider_error(&file.path).to_string();
    assert!(
        error.contains("not-pem.crt") && error.contains("certificate"),
        "{error}"
    );
    let file = mtls_config(address, &pki.client_cert, &not_pem, &pki.ca);
    let error = provider_error(&file.path).to_string();
    assert!(
        error.contains("not-pem.crt") && error.contains("private key"),
        "{error}"
    );
    let file = mtls_config(address, &pki.client_cert, &pki.client_key, &not_pem);
    let error = provider_error(&file.path).to_string();
    assert!(
        error.contains("not-pem.crt") && error.contains("cacert"),
        "{error}"
    );

    // A key that belongs to another certificate.
    let file = mtls_config(address, &pki.client_cert, &pki.other_client_key, &pki.ca);
    let error = provider_error(&file.path);
    assert!(
        matches!(
            &error,
            ExternalGrpcError::Connection(ConnectionError::KeyDoesNotMatch { .. })
        ),
        "{error}"
    );
    let text = error.to_string();
    assert!(
        text.contains("tls.crt") && text.contains("other-tls.key"),
        "{text}"
    );
    assert!(!text.contains("PRIVATE KEY"), "{text}");
}

#[tokio::test]
async fn an_unreachable_service_is_not_a_start_up_error_and_each_call_dials_again() {
    // Bind and drop a port so that nothing listens on it.
    let address = {
        let listener = ok(std::net::TcpListener::bind(loopback()), "binding a port");
        ok(listener.local_addr(), "reading its address")
    };
    let provider = plain_provider(address, "2s");
    let text = message(provider.refresh().await);
    assert!(text.contains("externalgrpc Refresh"), "{text}");
    assert!(text.contains("status 14"), "{text}");

    // The service comes up on that port later: the next call dials again and succeeds.
    let cloud = one_group_cloud();
    let _server = serve_plain_at(cloud.clone(), address).await;
    ok(provider.refresh().await, "refresh once the service is up");
    assert_eq!(cloud.calls("Refresh"), 1);
}

#[tokio::test]
async fn a_call_that_outlives_grpc_timeout_fails_with_a_deadline_error_naming_the_call() {
    let cloud = one_group_cloud();
    cloud.script().target_sizes.insert("ng-1".to_string(), 3);
    cloud
        .script()
        .delays
        .insert("NodeGroupTargetSize", Duration::from_secs(5));
    let server = serve_plain(cloud.clone()).await;
    let provider = plain_provider(server.address, "200ms");
    let groups = ok(provider.node_groups().await, "node groups");
    let group = groups
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("one group"));
    let text = message(group.target_size().await);
    assert!(text.contains("NodeGroupTargetSize"), "{text}");
    assert!(text.contains("\"ng-1\""), "{text}");
    assert!(text.contains("status 4 DeadlineExceeded"), "{text}");
    assert!(text.contains("200ms"), "{text}");
}

#[tokio::test]
async fn a_zero_or_negative_grpc_timeout_fails_every_call_at_once_without_sending_it() {
    let cloud = one_group_cloud();
    let server = serve_plain(cloud.clone()).await;
    for timeout in ["0s", "-1s"] {
        let provider = plain_provider(server.address, timeout);
        let text = message(provider.refresh().await);
        assert!(
            text.contains("status 4 DeadlineExceeded"),
            "{timeout}: {text}"
        );
    }
    assert_eq!(cloud.total_calls(), 0);
}
