//! The port itself: mutual TLS that admits only clients with a valid certificate from the client
//! CA, plaintext only when chosen, TLS files that cannot be used reported by name before serving,
//! the standard health service, and a shutdown that lets calls in flight finish.

mod support;

use std::sync::Arc;

use ferroscale_externalgrpc_proto::v1::cloud_provider_server::SERVICE_NAME;
use ferroscale_externalgrpc_proto::v1::{NodeGroupIncreaseSizeRequest, RefreshRequest};
use ferroscale_externalgrpc_sdk::{ProviderServer, ServeError, Tls, TlsError, TlsFile};
use support::*;
use tonic::transport::Endpoint;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// A Refresh over TLS presenting `identity`; Err describes where it failed (handshake or call).
async fn refresh_over_tls(
    pki: &Pki,
    server: &Running,
    identity: Option<&KeyedCertificate>,
) -> Result<(), String> {
    let mut client = pki
        .client(server.address, identity)
        .await
        .map_err(|error| format!("connect: {error:?}"))?;
    client
        .refresh(RefreshRequest {})
        .await
        .map(|_| ())
        .map_err(|status| format!("call: {status:?}"))
}

#[tokio::test]
async fn mutual_tls_accepts_a_client_certificate_signed_by_the_client_ca() {
    let pki = Pki::generate();
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let server = start(cloud.clone(), pki.server_tls()).await;
    // The generated client insists on ALPN h2 over TLS, so success also shows the server offers it.
    refresh_over_tls(&pki, &server, Some(&pki.client))
        .await
        .expect("a client with a valid certificate is served");
    assert_eq!(cloud.log.count("refresh"), 1);
}

#[tokio::test]
async fn mutual_tls_refuses_clients_without_a_valid_certificate() {
    let pki = Pki::generate();
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let server = start(cloud.clone(), pki.server_tls()).await;
    // Each is refused for its own reason, which the client learns from the TLS alert.
    let cases = [
        ("no client certificate", None, "CertificateRequired"),
        (
            "a certificate signed by another CA",
            Some(&pki.client_signed_by_other_ca),
            "UnknownCA",
        ),
        (
            "an expired certificate",
            Some(&pki.expired_client),
            "CertificateExpired",
        ),
    ];
    for (case, identity, alert) in cases {
        match refresh_over_tls(&pki, &server, identity).await {
            Ok(()) => panic!("a client with {case} was served"),
            Err(error) => assert!(error.contains(alert), "{case}: {error}"),
        }
    }
    // A plaintext client does not get through either.
    let plaintext = match plain_client(server.address).await {
        Ok(mut client) => client.refresh(RefreshRequest {}).await.map(|_| ()).is_ok(),
        Err(_) => false,
    };
    assert!(
        !plaintext,
        "a plaintext client was served by the mTLS server"
    );
    assert!(cloud.log.all().is_empty(), "{:?}", cloud.log.all());
    // The server is still up for a legitimate client.
    refresh_over_tls(&pki, &server, Some(&pki.client))
        .await
        .expect("a client with a valid certificate is served");
}

#[tokio::test]
async fn a_plaintext_server_does_not_speak_tls() {
    let pki = Pki::generate();
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let server = start(cloud.clone(), Tls::Insecure).await;
    assert!(
        refresh_over_tls(&pki, &server, Some(&pki.client))
            .await
            .is_err()
    );
    let mut client = plain_client(server.address).await.unwrap();
    client.refresh(RefreshRequest {}).await.unwrap();
}

/// Serving with these TLS files fails; the error is returned.
async fn serve_error(tls: Tls) -> TlsError {
    let cloud = FakeCloud::new(Pricing::Offered);
    let address = "127.0.0.1:0".parse().unwrap();
    match ProviderServer::new(cloud)
        .serve(address, tls, std::future::pending())
        .await
    {
        Err(ServeError::Tls(error)) => error,
        other => panic!("expected a TLS error, got {other:?}"),
    }
}

#[tokio::test]
async fn unusable_tls_files_are_reported_by_file_and_path_before_serving() {
    let pki = Pki::generate();
    let cert = pki.path("tls.crt");
    let key = pki.path("tls.key");
    let ca = pki.path("ca.crt");

    let missing = pki.path("absent.crt");
    match serve_error(Tls::mutual(&missing, &key, &ca)).await {
        TlsError::Read { file, path, .. } => {
            assert_eq!(file, TlsFile::ServerCertificate);
            assert_eq!(path, missing);
        }
        other => panic!("{other}"),
    }

    // A key that belongs to another certificate.
    let other_key = pki.write("other.key", &pki.client.key);
    let error = serve_error(Tls::mutual(&cert, &other_key, &ca)).await;
    assert!(
        matches!(error, TlsError::CertificateAndKey { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("other.key"), "{error}");

    // A CA bundle that holds a key instead of certificates.
    let not_a_bundle = pki.write("not-a-bundle.crt", &pki.client.key);
    let error = serve_error(Tls::mutual(&cert, &key, &not_a_bundle)).await;
    assert!(
        matches!(
            error,
            TlsError::NoCertificate {
                file: TlsFile::ClientCa,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("not-a-bundle.crt"), "{error}");

    // A key file holding a certificate.
    let error = serve_error(Tls::mutual(&cert, &cert, &ca)).await;
    assert!(matches!(error, TlsError::NoPrivateKey { .. }), "{error}");
    assert!(error.to_string().contains("tls.crt"), "{error}");
}

#[tokio::test]
async fn health_service_reports_the_externalgrpc_service_serving() {
    let (server, _client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let channel = Endpoint::from_shared(format!("http://{}", server.address))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in [SERVICE_NAME, ""] {
        let status = health
            .check(HealthCheckRequest {
                service: service.to_string(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "service {service:?}");
    }
}

#[tokio::test]
async fn shutdown_lets_a_call_in_flight_finish() {
    let gate = Arc::new(Gate::default());
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered).with_refresh_gate(gate.clone()));
    let (mut server, client) = plain(cloud.clone()).await;

    let mut in_flight_client = client.clone();
    let in_flight = tokio::spawn(async move { in_flight_client.refresh(RefreshRequest {}).await });
    gate.entered.notified().await;

    server.request_shutdown();
    // While the call is held, the server keeps running: wait for it to stop accepting, which
    // shows the shutdown has begun, then check `serve` has not returned.
    let address = server.address;
    while tokio::net::TcpStream::connect(address).await.is_ok() {
        tokio::task::yield_now().await;
    }
    assert!(
        !server.has_stopped(),
        "serve returned with a call in flight"
    );

    gate.release.notify_one();
    let answer = in_flight.await.unwrap();
    assert!(answer.is_ok(), "the call in flight failed: {answer:?}");
    server.stop().await.expect("serve returns cleanly");
    assert_eq!(cloud.log.count("refresh"), 1);
}

// A current-thread runtime (the default of `tokio::test`), so the server's tasks log through the
// subscriber set for this thread.
#[tokio::test]
async fn each_call_is_logged_with_method_group_duration_and_code_and_failures_warn() {
    let (log, _guard) = capture_log();

    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    client
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 1,
            id: "ng-1".into(),
        })
        .await
        .unwrap();
    client
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 1,
            id: "ng-9".into(),
        })
        .await
        .unwrap_err();

    let text = log.text();
    let lines: Vec<&str> = text.lines().collect();
    let started = lines
        .iter()
        .find(|line| line.contains("WITHOUT TLS"))
        .expect("plaintext serving is announced");
    assert!(started.contains("WARN"), "{started}");
    let call_lines: Vec<&&str> = lines
        .iter()
        .filter(|line| line.contains("NodeGroupIncreaseSize"))
        .collect();
    assert_eq!(call_lines.len(), 2, "{text}");
    let (ok, failed) = (call_lines[0], call_lines[1]);
    for (line, level, group, code) in [
        (ok, "DEBUG", "ng-1", "code=Ok"),
        (failed, "WARN", "ng-9", "code=NotFound"),
    ] {
        assert!(line.contains(level), "{line}");
        assert!(line.contains(&format!("group=\"{group}\"")), "{line}");
        assert!(line.contains("elapsed_ms="), "{line}");
        assert!(line.contains(code), "{line}");
    }
    assert!(failed.contains("error="), "{failed}");
    assert!(failed.contains("no such node group"), "{failed}");
    assert!(!ok.contains("object="), "absent fields are left out: {ok}");
}

/// The lines of `log` containing `needle`, once there are at least `count` (the server writes
/// them from its own tasks, possibly after the client has learnt of the refusal).
async fn wait_for_lines(log: &CapturedLog, needle: &str, count: usize) -> Vec<String> {
    for _ in 0..500 {
        let lines: Vec<String> = log
            .text()
            .lines()
            .filter(|line| line.contains(needle))
            .map(str::to_string)
            .collect();
        if lines.len() >= count {
            return lines;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("fewer than {count} lines with {needle:?}:\n{}", log.text());
}

const REFUSED: &str = "refused a client's TLS handshake";

// A current-thread runtime (the default of `tokio::test`), so the server's tasks log through the
// subscriber set for this thread.
#[tokio::test]
async fn a_refused_tls_handshake_is_a_warning_naming_the_peer_and_the_reason() {
    let (log, _guard) = capture_log();
    let pki = Pki::generate();
    let server = start(Arc::new(FakeCloud::new(Pricing::Offered)), pki.server_tls()).await;

    let cases = [
        (None, "no certificate"),
        (Some(&pki.client_signed_by_other_ca), "unknownissuer"),
        (Some(&pki.expired_client), "expired"),
    ];
    for (count, (identity, reason)) in cases.into_iter().enumerate() {
        assert!(refresh_over_tls(&pki, &server, identity).await.is_err());
        let lines = wait_for_lines(&log, REFUSED, count + 1).await;
        let line = &lines[count];
        assert!(line.contains("WARN"), "{line}");
        assert!(line.contains("peer=127.0.0.1:"), "{line}");
        assert!(line.to_lowercase().contains(reason), "{reason}: {line}");
    }
}

#[tokio::test]
async fn refused_handshakes_are_logged_at_a_bounded_rate() {
    let (log, _guard) = capture_log();
    let pki = Pki::generate();
    let server = start(Arc::new(FakeCloud::new(Pricing::Offered)), pki.server_tls()).await;
    // A scanner: many clients without a certificate in a row.
    for _ in 0..25 {
        assert!(refresh_over_tls(&pki, &server, None).await.is_err());
    }
    wait_for_lines(&log, REFUSED, 10).await;
    // Give stragglers the time to be written, were they going to be.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let logged = log.text().lines().filter(|l| l.contains(REFUSED)).count();
    assert_eq!(logged, 10, "{}", log.text());
    // A legitimate client is still served.
    refresh_over_tls(&pki, &server, Some(&pki.client))
        .await
        .expect("a client with a valid certificate is served");
}

/// Sends and receives message bytes as they are, to put malformed protobuf on the wire.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        buffer: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use prost::bytes::BufMut;
        buffer.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        buffer: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use prost::bytes::Buf;
        Ok(Some(buffer.copy_to_bytes(buffer.remaining()).to_vec()))
    }
}

#[tokio::test]
async fn a_request_that_is_not_valid_protobuf_is_invalid_argument() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (server, _client) = plain(cloud.clone()).await;
    let channel = Endpoint::from_shared(format!("http://{}", server.address))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    let cases: [(&str, Vec<u8>); 3] = [
        // Field 1 (delta, a varint) whose varint never ends.
        ("NodeGroupIncreaseSize", vec![0x08, 0xff, 0xff]),
        // Field 1 (id, a string) announcing 5 bytes and carrying 1.
        ("NodeGroupTargetSize", vec![0x0a, 0x05, b'n']),
        // A field with the reserved wire type 7.
        ("Refresh", vec![0x0f]),
    ];
    for (method, bytes) in cases {
        grpc.ready().await.unwrap();
        let path = format!("/{SERVICE_NAME}/{method}");
        let status = grpc
            .unary(
                tonic::Request::new(bytes),
                path.parse::<tonic::codegen::http::uri::PathAndQuery>()
                    .unwrap(),
                RawCodec,
            )
            .await
            .expect_err("malformed protobuf is refused");
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{method}: {status:?}"
        );
        assert!(status.message().contains(method), "{status:?}");
    }
    assert!(cloud.log.mutations().is_empty(), "{:?}", cloud.log.all());

    // A well-formed call on the same connection is served as before.
    grpc.ready().await.unwrap();
    let answer = grpc
        .unary(
            tonic::Request::new(Vec::new()),
            format!("/{SERVICE_NAME}/Refresh")
                .parse::<tonic::codegen::http::uri::PathAndQuery>()
                .unwrap(),
            RawCodec,
        )
        .await;
    assert!(answer.is_ok(), "{answer:?}");
}
