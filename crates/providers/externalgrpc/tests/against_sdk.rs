//! Ferroscale's externalgrpc client against Ferroscale's SDK server, over real loopback sockets
//! with real certificates: the served cloud is a scenario's simulated cloud (the one
//! `ferroscale serve-provider --cloud-provider=sim` serves). The pair agrees on groups, templates,
//! sizes and instances; the server refuses clients whose certificate is missing, from another CA
//! or expired, and the client refuses a server its CA did not sign.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ferroscale_core::cloud::{CloudProvider, InstanceState};
use ferroscale_externalgrpc_sdk::{ProviderServer, Tls};
use ferroscale_model::Timestamp;
use ferroscale_provider_externalgrpc::ExternalGrpcProvider;
use ferroscale_sim::scenario::parse_scenario;
use ferroscale_sim::served::ServedSimulation;
use support::*;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

const SCENARIO: &str = r#"
apiVersion: ferroscale/v1alpha1
kind: Scenario
name: pair
duration: 1h
nodeGroups:
  - id: small
    minSize: 1
    maxSize: 4
    initialSize: 1
    provisioningDelay: 0s
    template:
      metadata:
        labels: {pool: small}
      status:
        capacity: {cpu: "2", memory: 8Gi, pods: "110"}
        allocatable: {cpu: "2", memory: 8Gi, pods: "110"}
  - id: large
    minSize: 0
    maxSize: 3
    provisioningDelay: 0s
    template:
      metadata:
        labels: {pool: large}
      status:
        capacity: {cpu: "16", memory: 64Gi, pods: "110"}
        allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
"#;

/// The SDK server on a free loopback port, serving the scenario's cloud with mutual TLS from
/// `pki`; stops when dropped.
struct Served {
    address: String,
    _stop: oneshot::Sender<()>,
}

async fn serve(pki: &Pki) -> Served {
    let scenario = ok(
        parse_scenario(SCENARIO, "pair.yaml", std::path::Path::new(".")),
        "scenario",
    );
    let clock = Arc::new(|| Timestamp::from_secs(1_800_000_000));
    let cloud = ServedSimulation::new(&scenario, clock);
    let listener = ok(TcpListener::bind("127.0.0.1:0").await, "bind");
    let port = ok(listener.local_addr(), "address").port();
    let (stop, stopped) = oneshot::channel::<()>();
    let tls = Tls::mutual(&pki.server_cert, &pki.server_key, &pki.ca);
    tokio::spawn(async move {
        let _ = ProviderServer::new(cloud)
            .serve_on(listener, tls, async {
                let _ = stopped.await;
            })
            .await;
    });
    Served {
        address: format!("localhost:{port}"),
        _stop: stop,
    }
}

fn client(
    served: &Served,
    cert: &std::path::Path,
    key: &std::path::Path,
    ca: &std::path::Path,
) -> ExternalGrpcProvider {
    let file = mtls_config(&served.address, cert, key, ca);
    provider_from(&file.path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_drives_the_sdk_server_over_mutual_tls() {
    let pki = Pki::generate();
    let served = serve(&pki).await;
    let provider = client(&served, &pki.client_cert, &pki.client_key, &pki.ca);
    ok(provider.refresh().await, "refresh");
    let groups = ok(provider.node_groups().await, "node groups");
    let bounds: Vec<(String, usize, usize)> = groups
        .iter()
        .map(|g| (g.id().to_string(), g.min_size(), g.max_size()))
        .collect();
    assert_eq!(
        bounds,
        vec![("small".to_string(), 1, 4), ("large".to_string(), 0, 3)]
    );
    let large = groups.iter().find(|g| g.id() == "large").expect("large");
    let template = ok(large.template_node_info().await, "template");
    assert_eq!(template.node.allocatable.cpu_milli, 16_000);
    assert_eq!(
        template.node.labels.get("pool").map(String::as_str),
        Some("large")
    );

    assert_eq!(ok(large.target_size().await, "target"), 0);
    ok(large.increase_size(2).await, "increase");
    assert_eq!(ok(large.target_size().await, "target"), 2);
    let over = large.increase_size(5).await;
    assert!(over.is_err(), "beyond the max size is refused: {over:?}");
    ok(provider.refresh().await, "refresh");
    let instances = ok(large.nodes().await, "instances");
    assert_eq!(instances.len(), 2);
    assert!(
        instances
            .iter()
            .all(|i| i.status.as_ref().map(|s| s.state) == Some(InstanceState::Running)),
        "{instances:?}"
    );
    // The instance becomes a node: the client finds its group by providerID.
    let mut node = template.node.clone();
    node.name = "large-0".to_string();
    node.provider_id = instances[0].id.clone();
    let owner = ok(
        provider.node_group_for_node(&node).await,
        "node group for node",
    );
    assert_eq!(owner.map(|g| g.id().to_string()).as_deref(), Some("large"));
}

/// Each refused connection shows up as a failed call, never as an answer.
async fn refused(provider: &ExternalGrpcProvider, why: &str) {
    let answer = tokio::time::timeout(Duration::from_secs(30), provider.node_groups()).await;
    match answer {
        Ok(Err(_)) => {}
        Ok(Ok(groups)) => panic!("{why}: the call succeeded with {} groups", groups.len()),
        Err(_) => panic!("{why}: the call neither failed nor answered within 30 s"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_server_refuses_clients_without_a_valid_certificate() {
    let pki = Pki::generate();
    let served = serve(&pki).await;
    refused(
        &client(
            &served,
            &pki.other_client_cert,
            &pki.other_client_key,
            &pki.ca,
        ),
        "a client certificate from another CA",
    )
    .await;
    refused(
        &client(
            &served,
            &pki.expired_client_cert,
            &pki.expired_client_key,
            &pki.ca,
        ),
        "an expired client certificate",
    )
    .await;
    let no_certificate = config_file(&format!("address: \"{}\"\n", served.address));
    refused(
        &provider_from(&no_certificate.path),
        "a plaintext client without a certificate",
    )
    .await;
    // And the client refuses a server its CA did not sign.
    refused(
        &client(&served, &pki.client_cert, &pki.client_key, &pki.other_ca),
        "a server certificate from a CA the client does not trust",
    )
    .await;
}
