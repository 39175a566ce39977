//! Who is calling: over mutual TLS the provider learns the identity of the client's certificate
//! for the duration of each call; over plaintext there is none. (The log line is checked in
//! `caller_log.rs`.)

mod support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ferroscale_core::cloud::{CloudError, CloudProvider, Instance, NodeGroup};
use ferroscale_externalgrpc_proto::v1::{NodeGroupIncreaseSizeRequest, RefreshRequest};
use ferroscale_externalgrpc_sdk::{Tls, caller};
use ferroscale_model::Node;
use support::{KeyedCertificate, Pki, plain_client};
use tokio::net::TcpListener;

/// What `caller()` answered in each provider method, in order: `"refresh replica-7"`.
#[derive(Debug, Default, Clone)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn record(&self, method: &str) {
        let who = caller().unwrap_or_else(|| "<none>".to_string());
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(format!("{method} {who}"));
    }

    fn all(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// One group `workers` (0..10) whose methods record who called them.
#[derive(Debug)]
struct Workers {
    seen: Seen,
}

#[async_trait]
impl NodeGroup for Workers {
    fn id(&self) -> &str {
        "workers"
    }
    fn min_size(&self) -> usize {
        0
    }
    fn max_size(&self) -> usize {
        10
    }
    async fn target_size(&self) -> Result<usize, CloudError> {
        self.seen.record("target_size");
        Ok(0)
    }
    async fn increase_size(&self, _delta: usize) -> Result<(), CloudError> {
        self.seen.record("increase_size");
        Ok(())
    }
    async fn delete_nodes(&self, _nodes: &[Node]) -> Result<(), CloudError> {
        Ok(())
    }
    async fn decrease_target_size(&self, _delta: i64) -> Result<(), CloudError> {
        Ok(())
    }
    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        Ok(Vec::new())
    }
}

struct AuditedCloud {
    workers: Arc<Workers>,
    seen: Seen,
}

impl AuditedCloud {
    fn new() -> (AuditedCloud, Seen) {
        let seen = Seen::default();
        let cloud = AuditedCloud {
            workers: Arc::new(Workers { seen: seen.clone() }),
            seen: seen.clone(),
        };
        (cloud, seen)
    }
}

#[async_trait]
impl CloudProvider for AuditedCloud {
    fn name(&self) -> &str {
        "audited"
    }
    fn gpu_label(&self) -> &str {
        "example.com/gpu"
    }
    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        Ok(vec![self.workers.clone()])
    }
    async fn node_group_for_node(
        &self,
        _node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        Ok(None)
    }
    async fn refresh(&self) -> Result<(), CloudError> {
        self.seen.record("refresh");
        Ok(())
    }
}

/// Serves `cloud` on a loopback port until the test ends.
async fn serve(cloud: AuditedCloud, tls: Tls) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let address = listener.local_addr().expect("loopback address");
    tokio::spawn(
        ferroscale_externalgrpc_sdk::ProviderServer::new(cloud).serve_on(
            listener,
            tls,
            std::future::pending(),
        ),
    );
    address
}

async fn refresh_and_grow(pki: &Pki, address: std::net::SocketAddr, identity: &KeyedCertificate) {
    let mut client = pki
        .client(address, Some(identity))
        .await
        .expect("dial with a client certificate");
    client
        .refresh(RefreshRequest {})
        .await
        .expect("Refresh is served");
    client
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 1,
            id: "workers".to_string(),
        })
        .await
        .expect("IncreaseSize is served");
}

#[tokio::test]
async fn over_mutual_tls_the_provider_learns_the_common_name_of_each_clients_certificate() {
    let pki = Pki::generate();
    let (cloud, seen) = AuditedCloud::new();
    let address = serve(cloud, pki.server_tls()).await;

    refresh_and_grow(&pki, address, &pki.client_named("replica-7")).await;
    refresh_and_grow(&pki, address, &pki.client_named("replica-8")).await;

    // The bounds check the server makes before IncreaseSize (target_size) runs inside the call
    // too, so everything the provider does for a call sees its client.
    assert_eq!(
        seen.all(),
        [
            "refresh replica-7",
            "target_size replica-7",
            "increase_size replica-7",
            "refresh replica-8",
            "target_size replica-8",
            "increase_size replica-8",
        ]
    );
    // Outside a call there is no caller.
    assert_eq!(caller(), None);
}

#[tokio::test]
async fn over_plaintext_the_provider_learns_no_identity() {
    let (cloud, seen) = AuditedCloud::new();
    let address = serve(cloud, Tls::Insecure).await;
    let mut client = plain_client(address).await.expect("dial plaintext");
    client
        .refresh(RefreshRequest {})
        .await
        .expect("Refresh is served");
    assert_eq!(seen.all(), ["refresh <none>"]);
}
