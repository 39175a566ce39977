//! What the externalgrpc provider costs per autoscaler loop, over real loopback sockets with
//! mutual TLS, against the counting test double of the integration tests:
//!
//! - `loop/100_groups_1000_nodes`: one iteration of the real engine (`Autoscaler::run_once`) with
//!   this provider as its cloud and an in-memory cluster (the simulator's) holding the 1,000
//!   registered nodes, with the GPU label and types already known. Before measuring, it prints how
//!   many RPCs one warm loop makes, per method, and how many a lookup of every node's group would
//!   add.
//! - `call/raw_tonic_target_size` vs `call/provider_target_size`: one `NodeGroupTargetSize` through
//!   the bare generated client on a tonic TLS channel, and through the provider's node group
//!   (deadline, timing, logging, conversion). The difference is the latency the provider adds.
//!   A summary line prints both means.
//!
//! Run: `cargo bench -p ferroscale-provider-externalgrpc`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use ferroscale_core::autoscaler::{Autoscaler, Stopwatch};
use ferroscale_core::cloud::{CloudProvider, NodeGroup};
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_externalgrpc_proto::v1::cloud_provider_client::CloudProviderClient;
use ferroscale_externalgrpc_proto::v1::{Instance, NodeGroupTargetSizeRequest};
use ferroscale_model::{Node, Resources, Timestamp};
use ferroscale_provider_externalgrpc::ExternalGrpcProvider;
use ferroscale_sim::api::SimClusterApi;
use ferroscale_sim::cluster::Cluster;
use support::*;
use tokio::runtime::Runtime;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

const GROUPS: usize = 100;
const NODES_PER_GROUP: usize = 10;

fn provider_id(group: usize, node: usize) -> String {
    format!("bench:///ng-{group}/n-{node}")
}

/// 100 groups of 10 registered nodes each.
fn bench_cloud() -> Arc<FakeCloud> {
    let mut script = Script {
        gpu_label: "cloud.example/gpu".to_string(),
        ..Script::default()
    };
    for g in 0..GROUPS {
        let id = format!("ng-{g}");
        let message = group(&id, 0, 50);
        script.groups.push(message.clone());
        script
            .target_sizes
            .insert(id.clone(), NODES_PER_GROUP as i32);
        let mut instances = Vec::with_capacity(NODES_PER_GROUP);
        for n in 0..NODES_PER_GROUP {
            script
                .owner_by_provider_id
                .insert(provider_id(g, n), message.clone());
            instances.push(Instance {
                id: provider_id(g, n),
                status: None,
            });
        }
        script.instances.insert(id, instances);
    }
    FakeCloud::new(script)
}

fn cluster_nodes() -> Vec<Node> {
    (0..GROUPS)
        .flat_map(|g| {
            (0..NODES_PER_GROUP).map(move |n| {
                let mut node = Node::new(format!("ng-{g}-n-{n}"), Resources::new(4000, 16 << 30));
                node.provider_id = provider_id(g, n);
                node
            })
        })
        .collect()
}

/// The engine's stopwatch for the pure planning calls; this bench times whole loops instead.
struct Unmeasured;

impl Stopwatch for Unmeasured {
    fn elapsed_millis(&self) -> f64 {
        0.0
    }
}

/// The 1,000 nodes registered in an in-memory cluster, each under its group.
fn bench_cluster(nodes: &[Node]) -> Cluster {
    let mut cluster = Cluster::new(Vec::new());
    for node in nodes {
        let group = node
            .name
            .rsplit_once("-n-")
            .map(|(group, _)| group.to_string());
        cluster.add_node(node.clone(), group);
    }
    cluster
}

/// One iteration of the real engine with the provider as its cloud.
async fn engine_loop(
    provider: &ExternalGrpcProvider,
    autoscaler: &mut Autoscaler,
    cluster: &mut Cluster,
) {
    let now = Timestamp::from_secs(1_800_000_000);
    let api = SimClusterApi::new(cluster, now);
    std::hint::black_box(autoscaler.run_once(provider, &api, now, &Unmeasured).await);
}

struct Fixture {
    runtime: Runtime,
    cloud: Arc<FakeCloud>,
    // Keep the server and the certificates alive for the benchmark.
    _server: RunningServer,
    _pki: Pki,
    provider: ExternalGrpcProvider,
    raw_client: CloudProviderClient<Channel>,
    nodes: Vec<Node>,
}

fn fixture() -> Fixture {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => panic!("building the runtime: {error}"),
    };
    let pki = Pki::generate();
    let cloud = bench_cloud();
    let (server, provider, raw_client) = runtime.block_on(async {
        let server = serve_mtls(cloud.clone(), &pki, &pki.ca).await;
        let address = format!("localhost:{}", server.address.port());
        let provider = mtls_provider(&address, &pki, &pki.ca);
        let read = |path: &std::path::Path| match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) => panic!("reading {}: {error}", path.display()),
        };
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read(&pki.ca)))
            .identity(Identity::from_pem(
                read(&pki.client_cert),
                read(&pki.client_key),
            ))
            .domain_name("localhost");
        let endpoint = match Endpoint::from_shared(format!("https://{address}"))
            .and_then(|endpoint| endpoint.tls_config(tls))
        {
            Ok(endpoint) => endpoint,
            Err(error) => panic!("raw endpoint: {error}"),
        };
        let raw_client = CloudProviderClient::new(endpoint.connect_lazy());
        (server, provider, raw_client)
    });
    Fixture {
        runtime,
        cloud,
        _server: server,
        _pki: pki,
        provider,
        raw_client,
        nodes: cluster_nodes(),
    }
}

fn print_rpcs_per_loop(fixture: &Fixture) {
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    let mut cluster = bench_cluster(&fixture.nodes);
    fixture.runtime.block_on(async {
        // Warm: the connection is up, the GPU label and types and the templates are known.
        engine_loop(&fixture.provider, &mut autoscaler, &mut cluster).await;
        engine_loop(&fixture.provider, &mut autoscaler, &mut cluster).await;
        fixture.cloud.forget_calls();
        engine_loop(&fixture.provider, &mut autoscaler, &mut cluster).await;
        let received = fixture.cloud.received();
        let mut per_method: BTreeMap<&str, usize> = BTreeMap::new();
        for method in &received.methods {
            *per_method.entry(method).or_default() += 1;
        }
        println!(
            "externalgrpc RPCs per engine loop at {GROUPS} groups / {} nodes (warm): {} \
             ({per_method:?})",
            fixture.nodes.len(),
            received.methods.len()
        );
        fixture.cloud.forget_calls();
        for node in &fixture.nodes {
            let _ = fixture.provider.node_group_for_node(node).await;
        }
        println!(
            "externalgrpc NodeGroupForNode calls if every node's group were looked up (as \
             upstream's core does each loop): {}",
            fixture.cloud.total_calls()
        );
    });
}

/// Mean latency of `calls` sequential calls, after a warm-up.
fn mean_latency<F, Fut>(runtime: &Runtime, calls: u32, mut call: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    runtime.block_on(async {
        for _ in 0..100 {
            call().await;
        }
        let started = Instant::now();
        for _ in 0..calls {
            call().await;
        }
        started.elapsed() / calls
    })
}

fn first_group(fixture: &Fixture) -> Arc<dyn NodeGroup> {
    let groups = fixture
        .runtime
        .block_on(fixture.provider.node_groups())
        .unwrap_or_default();
    match groups.into_iter().next() {
        Some(group) => group,
        None => panic!("the bench cloud has groups"),
    }
}

fn benches(c: &mut Criterion) {
    let fixture = fixture();
    print_rpcs_per_loop(&fixture);

    let group = first_group(&fixture);
    let raw = |client: CloudProviderClient<Channel>| async move {
        let mut client = client;
        let _ = client
            .node_group_target_size(NodeGroupTargetSizeRequest {
                id: "ng-0".to_string(),
            })
            .await;
    };
    let raw_mean = mean_latency(&fixture.runtime, 2000, || raw(fixture.raw_client.clone()));
    let provider_mean = mean_latency(&fixture.runtime, 2000, || {
        let group = group.clone();
        async move {
            let _ = group.target_size().await;
        }
    });
    println!(
        "externalgrpc NodeGroupTargetSize over loopback mTLS, mean of 2000: raw tonic client \
         {raw_mean:?}, provider {provider_mean:?}, added {:?}",
        provider_mean.saturating_sub(raw_mean)
    );

    let mut calls = c.benchmark_group("call");
    calls.bench_function("raw_tonic_target_size", |b| {
        b.iter_custom(|iterations| {
            fixture.runtime.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    raw(fixture.raw_client.clone()).await;
                }
                started.elapsed()
            })
        })
    });
    calls.bench_function("provider_target_size", |b| {
        b.iter_custom(|iterations| {
            fixture.runtime.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    let _ = group.target_size().await;
                }
                started.elapsed()
            })
        })
    });
    calls.finish();

    let mut loops = c.benchmark_group("loop");
    loops.sample_size(10);
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    let mut cluster = bench_cluster(&fixture.nodes);
    loops.bench_function("100_groups_1000_nodes", |b| {
        b.iter_custom(|iterations| {
            fixture.runtime.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    engine_loop(&fixture.provider, &mut autoscaler, &mut cluster).await;
                }
                started.elapsed()
            })
        })
    });
    loops.finish();
}

criterion_group! {
    name = externalgrpc;
    config = Criterion::default().measurement_time(Duration::from_secs(5));
    targets = benches
}
criterion_main!(externalgrpc);
