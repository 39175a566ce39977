//! The kwok provider as `ferroscale serve-provider --cloud-provider=kwok` serves it: the
//! externalgrpc service of the SDK over the provider, against the real control plane, called as
//! an upstream client calls it (a 5 s deadline on every call).
//!
//! - A large `NodeGroupIncreaseSize` answers within the client's deadline and every node follows.
//! - After `Cleanup`, `NodeGroupNodes` and `NodeGroupTargetSize` no longer report the deleted
//!   nodes, even before the next `Refresh` (upstream's client asks for nodes at start-up, before
//!   refreshing).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroscale_externalgrpc_proto::v1::cloud_provider_client::CloudProviderClient;
use ferroscale_externalgrpc_proto::v1::{
    CleanupRequest, NodeGroupIncreaseSizeRequest, NodeGroupNodesRequest, NodeGroupTargetSizeRequest,
};
use ferroscale_externalgrpc_sdk::{ProviderServer, Tls};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use support::*;
use tokio::sync::oneshot;
use tonic::transport::{Channel, Endpoint};

/// The deadline an upstream client puts on every call.
const CLIENT_DEADLINE: Duration = Duration::from_secs(5);

/// The kwok provider of the control plane, served on a loopback port; the sender stops it.
async fn serve_kwok(client: &kube::Client) -> (CloudProviderClient<Channel>, oneshot::Sender<()>) {
    let provider = build_provider(client).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        ProviderServer::from_arc(Arc::new(provider))
            .serve_on(listener, Tls::Insecure, async {
                let _ = stopped.await;
            })
            .await
            .expect("the server runs");
    });
    let channel = Endpoint::from_shared(format!("http://{address}"))
        .expect("a loopback URL")
        .connect()
        .await
        .expect("connect to the served provider");
    (CloudProviderClient::new(channel), stop)
}

/// `message` with the upstream client's deadline.
fn with_deadline<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(CLIENT_DEADLINE);
    request
}

async fn instance_ids(grpc: &mut CloudProviderClient<Channel>) -> Vec<String> {
    grpc.node_group_nodes(with_deadline(NodeGroupNodesRequest {
        id: "workers".to_string(),
    }))
    .await
    .expect("NodeGroupNodes")
    .into_inner()
    .instances
    .into_iter()
    .map(|instance| instance.id)
    .collect()
}

async fn target_size(grpc: &mut CloudProviderClient<Channel>) -> i32 {
    grpc.node_group_target_size(with_deadline(NodeGroupTargetSizeRequest {
        id: "workers".to_string(),
    }))
    .await
    .expect("NodeGroupTargetSize")
    .into_inner()
    .target_size
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_nodes_in_one_increase_answer_within_the_client_deadline() {
    const NEW_NODES: usize = 500;
    let control_plane = start_control_plane().await;
    let client = client_for(&control_plane).await;
    configure(&client, 0, 600).await;
    let (mut grpc, _stop) = serve_kwok(&client).await;

    let started = Instant::now();
    let answer = grpc
        .node_group_increase_size(with_deadline(NodeGroupIncreaseSizeRequest {
            id: "workers".to_string(),
            delta: NEW_NODES as i32,
        }))
        .await;
    // Measured for the record (docs/testing.md), never asserted.
    println!(
        "IncreaseSize({NEW_NODES}) answered in {} ms: {:?}",
        started.elapsed().as_millis(),
        answer
            .as_ref()
            .map(|_| "OK")
            .map_err(|status| status.code())
    );
    answer.expect("IncreaseSize answers OK within the client's deadline");
    assert_eq!(
        target_size(&mut grpc).await,
        NEW_NODES as i32,
        "the new target is reported at once"
    );
    assert_eq!(instance_ids(&mut grpc).await.len(), NEW_NODES);

    // Every node follows: the Node objects exist, and the instances are those nodes.
    let nodes: Api<Node> = Api::all(client.clone());
    let mut created: Vec<String> = wait_node_count(&nodes, NEW_NODES)
        .await
        .into_iter()
        .map(|name| format!("kwok:{name}"))
        .collect();
    println!(
        "all {NEW_NODES} Node objects existed {} ms after the call",
        started.elapsed().as_millis()
    );
    let mut instances = instance_ids(&mut grpc).await;
    created.sort();
    instances.sort();
    assert_eq!(instances, created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_cleanup_nodes_and_target_size_report_no_deleted_node_before_a_refresh() {
    let control_plane = start_control_plane().await;
    let client = client_for(&control_plane).await;
    configure(&client, 0, 5).await;
    let (mut grpc, _stop) = serve_kwok(&client).await;
    let nodes: Api<Node> = Api::all(client.clone());

    grpc.node_group_increase_size(with_deadline(NodeGroupIncreaseSizeRequest {
        id: "workers".to_string(),
        delta: 3,
    }))
    .await
    .expect("IncreaseSize");
    wait_node_count(&nodes, 3).await;

    grpc.cleanup(with_deadline(CleanupRequest {}))
        .await
        .expect("Cleanup");
    assert!(node_names(&nodes).await.is_empty(), "Cleanup deletes them");
    // No Refresh in between, as upstream's client at start-up.
    assert_eq!(instance_ids(&mut grpc).await, Vec::<String>::new());
    assert_eq!(target_size(&mut grpc).await, 0);
}
