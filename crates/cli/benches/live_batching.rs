//! Resize calls and reaction of `ferroscale run` for one burst of a Deployment's pods (issue 18),
//! measured the way the issue measured them: `ferroscale run --cloud-provider=externalgrpc`
//! against `ferroscale serve-provider --cloud-provider=kwok` on the test control plane. For each
//! burst size a fresh control plane gets a Deployment of that many 500m pods created at once
//! (eight fit a 4-CPU kwok node); the ReplicaSet controller then creates them at its client rate.
//!
//! Per burst it prints the `IncreaseSize` calls per group (counted in the provider server's log
//! of every call it serves), the nodes added, the time from the first pod marked `Unschedulable`
//! to the first new Node (the call's effect, so an upper bound of the call's time), and the time
//! from the Deployment's creation and from the first `Unschedulable` to all pods Running.
//!
//! Run: `cargo bench -p ferroscale --bench live_batching` (needs the control-plane binaries of
//! `scripts/control-plane/build.sh`). Knobs: `FERROSCALE_BENCH_BURST_SIZES` (`300,2000`),
//! `FERROSCALE_BENCH_RUNS` (1 run per size), `FERROSCALE_BENCH_FLAGS` (more flags of `ferroscale
//! run`, space-separated), `FERROSCALE_BINARY` to run another build of the binary (e.g. the
//! base of a change) and `FERROSCALE_BENCH_LOG_DIR` to keep both processes' logs of each burst. Results go to standard output; docs/benchmarks.md keeps
//! them with the machine they ran on.

#[allow(dead_code)]
#[path = "../tests/live/harness.rs"]
mod harness;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::{App, Cluster, POOL_LABEL};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, WatchEvent, WatchParams};

fn main() {
    support::run_live_bench("live_batching", bench());
}

async fn bench() {
    let sizes: Vec<usize> = std::env::var("FERROSCALE_BENCH_BURST_SIZES")
        .unwrap_or_else(|_| "300,2000".to_string())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let runs: usize = std::env::var("FERROSCALE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for size in sizes {
        for run in 0..runs {
            let burst = one_burst(size).await;
            println!(
                "burst of {size} pods (run {run}): IncreaseSize calls {:?}, {} nodes added; \
                 unschedulable → first new node {:.0} ms; created → all Running {:.1} s; \
                 first unschedulable → all Running {:.1} s; pods marked unschedulable over {:.1} s",
                burst.calls,
                burst.nodes,
                burst.reaction.as_secs_f64() * 1000.0,
                burst.created_to_running.as_secs_f64(),
                burst.unschedulable_to_running.as_secs_f64(),
                burst.unschedulable_spread.as_secs_f64(),
            );
        }
    }
}

struct Burst {
    calls: std::collections::BTreeMap<String, usize>,
    nodes: usize,
    reaction: Duration,
    created_to_running: Duration,
    unschedulable_to_running: Duration,
    unschedulable_spread: Duration,
}

async fn one_burst(size: usize) -> Burst {
    let cluster = Cluster::start().await;
    cluster.set_pool_bounds(0, size).await;
    let (server, cloud_config) = cluster.start_provider_server("provider-server");
    let cloud_config = format!("--cloud-config={}", cloud_config.display());
    let extra = std::env::var("FERROSCALE_BENCH_FLAGS").unwrap_or_default();
    let mut flags = vec![
        "--cloud-provider=externalgrpc",
        &cloud_config,
        "--scale-down-enabled=false",
        "--scan-interval=10s",
    ];
    flags.extend(extra.split_whitespace());
    let autoscaler = cluster.start_autoscaler_logging("bench", &flags, "warn,ferroscale=info");
    harness::wait_until("the status ConfigMap of the first iteration", async || {
        cluster.status().await.is_some()
    })
    .await;

    let app = "burst";
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), harness::APPS);
    let nodes: Api<Node> = cluster.nodes();
    let pod_version = current_version(&pods, "").await;
    let node_version = current_version(&nodes, POOL_LABEL).await;
    let mut pod_events = pods
        .watch(
            &WatchParams::default().labels(&format!("app={app}")),
            &pod_version,
        )
        .await
        .expect("watch pods")
        .boxed();
    let mut node_events = nodes
        .watch(&WatchParams::default().labels(POOL_LABEL), &node_version)
        .await
        .expect("watch nodes")
        .boxed();
    let first_node = tokio::spawn(async move {
        while let Some(event) = node_events.next().await {
            if let Ok(WatchEvent::Added(_)) = event {
                return Instant::now();
            }
        }
        panic!("the node watch ended before a node was added")
    });

    let created = Instant::now();
    cluster
        .create_app(App::new(app, i32::try_from(size).expect("fits"), "500m"))
        .await;
    let mut first_unschedulable = None;
    let mut last_unschedulable = None;
    let mut running = BTreeSet::new();
    let all_running = tokio::time::timeout(Duration::from_secs(900), async {
        while let Some(event) = pod_events.next().await {
            match event {
                Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) => {
                    if harness::is_marked_unschedulable(&pod) {
                        first_unschedulable.get_or_insert_with(Instant::now);
                        last_unschedulable = Some(Instant::now());
                    }
                    if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                        running.insert(pod.metadata.name.clone().unwrap_or_default());
                        if running.len() == size {
                            return Instant::now();
                        }
                    }
                }
                Ok(WatchEvent::Error(error)) => panic!("pod watch: {error:?}"),
                _ => {}
            }
        }
        // The API server ends watches after a while: count the rest by listing, once a second.
        loop {
            let list = pods
                .list(&ListParams::default().labels(&format!("app={app}")))
                .await
                .expect("list pods");
            let running = list
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            if running == size {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await
    .expect("every pod runs within 15 minutes");
    let first_node = first_node.await.expect("node watch task");
    let first_unschedulable = first_unschedulable.expect("a pod was marked unschedulable");
    // For a look at the timeline of one burst: both processes' logs, kept where asked.
    if let Ok(dir) = std::env::var("FERROSCALE_BENCH_LOG_DIR") {
        let dir = std::path::Path::new(&dir);
        std::fs::create_dir_all(dir).expect("create FERROSCALE_BENCH_LOG_DIR");
        std::fs::write(dir.join(format!("autoscaler-{size}.log")), autoscaler.log())
            .expect("keep the autoscaler's log");
        std::fs::write(dir.join(format!("provider-{size}.log")), server.log())
            .expect("keep the provider server's log");
    }
    let last_unschedulable = last_unschedulable.unwrap_or(first_unschedulable);
    Burst {
        calls: harness::increase_size_calls(&server.log()),
        nodes: cluster.pool_nodes().await.len(),
        reaction: first_node.saturating_duration_since(first_unschedulable),
        created_to_running: all_running.saturating_duration_since(created),
        unschedulable_to_running: all_running.saturating_duration_since(first_unschedulable),
        unschedulable_spread: last_unschedulable.saturating_duration_since(first_unschedulable),
    }
}

async fn current_version<K>(api: &Api<K>, labels: &str) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list_metadata(&ListParams::default().labels(labels).limit(1))
        .await
        .expect("list for a resourceVersion")
        .metadata
        .resource_version
        .expect("resourceVersion")
}
