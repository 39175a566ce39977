//! Reaction time of `ferroscale run` on a real control plane at scale: 1,000 kwok nodes running
//! 30,000 pods, then bursts of pods that fit nowhere. For each burst it measures, from outside
//! the autoscaler, the time from the first pod of the burst being marked `Unschedulable` by the
//! real scheduler to the first Node the kwok provider creates for it (the kwok provider's
//! `IncreaseSize` creates Node objects, so a new Node is that call's effect). It also samples
//! Ferroscale's resident memory and CPU seconds per loop.
//!
//! Run: `cargo bench -p ferroscale --bench live_cluster` (needs the control-plane binaries of
//! `scripts/control-plane/build.sh`). Knobs: `FERROSCALE_BENCH_NODES` (1000),
//! `FERROSCALE_BENCH_PODS_PER_NODE` (30), `FERROSCALE_BENCH_BURSTS` (10),
//! `FERROSCALE_BENCH_BURST_PODS` (20). Results go to standard output; docs/benchmarks.md keeps
//! them with the machine they ran on.

#[allow(dead_code)]
#[path = "../tests/live/harness.rs"]
mod harness;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use harness::{App, Autoscaler, Cluster, POOL_LABEL};
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    support::run_live_bench("live_cluster", bench());
}

async fn bench() {
    let nodes = knob("FERROSCALE_BENCH_NODES", 1000);
    let pods_per_node = knob("FERROSCALE_BENCH_PODS_PER_NODE", 30);
    let bursts = knob("FERROSCALE_BENCH_BURSTS", 10);
    let burst_pods = knob("FERROSCALE_BENCH_BURST_PODS", 20);

    let cluster = Cluster::start().await;
    // The group starts at `nodes` through min-size enforcement, so its nodes are the provider's own.
    cluster.set_pool_bounds(nodes, nodes * 3).await;
    let started = Instant::now();
    let autoscaler = cluster.start_autoscaler_logging(
        "bench",
        &[
            "--scale-down-enabled=false",
            "--enforce-node-group-min-size=true",
            "--scan-interval=10s",
            "--max-nodes-total=0",
        ],
        "warn,ferroscale=info",
    );
    cluster.wait_pool_ready(nodes).await;
    println!(
        "{nodes} kwok nodes Ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    println!("ferroscale run is process {:?}", autoscaler.pid());
    // The watch caches' memory: resident memory with no pods, then after each third of the pods
    // (a loop has run over each stage before it is read).
    let names = cluster.pool_node_names().await;
    let mut stages = vec![(0, settled_rss(&autoscaler).await)];
    let started = Instant::now();
    let thirds = [pods_per_node / 3, pods_per_node * 2 / 3, pods_per_node];
    let mut bound = 0;
    for per_node in thirds {
        fill_nodes(&cluster, &names, bound, per_node).await;
        bound = per_node;
        stages.push((names.len() * per_node, settled_rss(&autoscaler).await));
    }
    println!(
        "{} pods bound and Running after {:.1} s",
        nodes * pods_per_node,
        started.elapsed().as_secs_f64()
    );
    for (pods, rss) in &stages {
        println!("RSS with {pods} pods: {rss:.1} MiB");
    }
    if let (Some((first_pods, first_rss)), Some((last_pods, last_rss))) =
        (stages.first(), stages.last())
        && last_pods > first_pods
    {
        println!(
            "watch caches: {:.1} MiB per 10,000 pods",
            (last_rss - first_rss) / (*last_pods - *first_pods) as f64 * 10_000.0
        );
    }
    let quiet = sample(&autoscaler, Duration::from_secs(60)).await;
    println!(
        "steady state: RSS {:.0} MiB (peak so far {:.0} MiB), {:.3} CPU s per loop over {} loops",
        quiet.rss_mib, quiet.peak_mib, quiet.cpu_per_loop, quiet.loops
    );

    let mut latencies = Vec::new();
    let before_bursts = Usage::now(&autoscaler);
    let functions_before = function_seconds(&autoscaler);
    for burst in 0..bursts {
        let latency = one_burst(&cluster, burst, burst_pods).await;
        println!(
            "burst {burst}: {burst_pods} pods, unschedulable → first new node {:.0} ms",
            latency.as_secs_f64() * 1000.0
        );
        latencies.push(latency);
    }
    let during = Usage::now(&autoscaler).since(&before_bursts);
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    println!(
        "median {:.0} ms, min {:.0} ms, max {:.0} ms over {bursts} bursts",
        median.as_secs_f64() * 1000.0,
        latencies[0].as_secs_f64() * 1000.0,
        latencies[latencies.len() - 1].as_secs_f64() * 1000.0
    );
    println!(
        "during bursts: RSS {:.0} MiB (peak of the whole run {:.0} MiB), {:.3} CPU s per loop over {} loops",
        during.rss_mib, during.peak_mib, during.cpu_per_loop, during.loops
    );
    // Where a loop's wall time went during the bursts: each `function_duration_seconds` series'
    // growth, per loop.
    let functions_after = function_seconds(&autoscaler);
    let per_loop: Vec<String> = functions_after
        .iter()
        .map(|(function, seconds)| {
            let grew = seconds - functions_before.get(function).copied().unwrap_or(0.0);
            format!("{function} {:.1} ms", grew * 1000.0 / during.loops as f64)
        })
        .collect();
    println!("during bursts, per loop: {}", per_loop.join(", "));
}

/// The `function_duration_seconds` sums by function.
fn function_seconds(autoscaler: &Autoscaler) -> std::collections::BTreeMap<String, f64> {
    const PREFIX: &str = "cluster_autoscaler_function_duration_seconds_sum{function=\"";
    let text = autoscaler.metrics().unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(PREFIX)?;
            let (function, rest) = rest.split_once('"')?;
            let value = rest.rsplit_once(' ')?.1.parse().ok()?;
            Some((function.to_string(), value))
        })
        .collect()
}

/// Resident memory once two scan intervals have passed (two loops over what the caches hold),
/// after the pods have all been listed.
async fn settled_rss(autoscaler: &Autoscaler) -> f64 {
    tokio::time::sleep(Duration::from_secs(20)).await;
    Usage::now(autoscaler).rss_mib
}

/// Binds small pods `from..per_node` straight to every node of `names` (no scheduler), 16
/// creates at a time, and waits until kwok reports all of them Running.
async fn fill_nodes(cluster: &Cluster, names: &[String], from: usize, per_node: usize) {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), harness::APPS);
    let work = names
        .iter()
        .flat_map(|node| (from..per_node).map(move |i| (node.clone(), format!("fill-{node}-{i}"))));
    futures::stream::iter(work)
        .map(|(node, name)| {
            let pods = pods.clone();
            async move {
                pods.create(&PostParams::default(), &filler(&name, &node))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .expect("create filler pods");
    let expected = names.len() * per_node;
    // Every 5 s and for up to 15 minutes: each look lists every filler pod, which on a machine
    // shared with builds slowed kwok down more than it told (the harness polls every 250 ms
    // for 4 minutes).
    let deadline = Instant::now() + FILL_LIMIT;
    loop {
        let list = pods
            .list(&ListParams::default().labels("app=fill"))
            .await
            .expect("list");
        let running = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "gave up after {FILL_LIMIT:?} waiting for {expected} filler pods Running ({running} are)"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// How long the filler pods may take to run.
const FILL_LIMIT: Duration = Duration::from_secs(900);

fn filler(name: &str, node: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([("app".to_string(), "fill".to_string())])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.to_string()),
            containers: vec![Container {
                name: "app".to_string(),
                image: Some("registry.example/fill:1".to_string()),
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([
                        ("cpu".to_string(), Quantity("100m".to_string())),
                        ("memory".to_string(), Quantity("64Mi".to_string())),
                    ])),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            tolerations: Some(vec![
                serde_json::from_value(serde_json::json!({
                    "key": "kwok-provider", "operator": "Exists", "effect": "NoSchedule"
                }))
                .expect("toleration"),
            ]),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// Creates a Deployment of `count` 3-CPU pods (they fit on no filled node) and times the first
/// `Unschedulable` verdict to the first new pool Node, both as seen by watches from here.
async fn one_burst(cluster: &Cluster, burst: usize, count: usize) -> Duration {
    let app = format!("burst-{burst}");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), harness::APPS);
    let nodes: Api<Node> = cluster.nodes();
    let node_version = nodes
        .list_metadata(&ListParams::default().labels(POOL_LABEL).limit(1))
        .await
        .expect("nodes version")
        .metadata
        .resource_version
        .expect("resourceVersion");
    let pod_params = WatchParams::default().labels(&format!("app={app}"));
    let node_params = WatchParams::default().labels(POOL_LABEL);
    // No pod of this burst exists yet, so the watch can start anywhere ("0": the API server's
    // cache, with the objects it holds as ADDED events); a version read from a list can be ahead
    // of that cache on a loaded control plane, and such a watch ends at once.
    let mut pod_events = pods
        .watch(&pod_params, "0")
        .await
        .expect("watch pods")
        .boxed();
    let mut node_events = nodes
        .watch(&node_params, &node_version)
        .await
        .expect("watch nodes")
        .boxed();

    let first_unschedulable = async {
        while let Some(event) = pod_events.next().await {
            match event {
                Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod))
                    if is_unschedulable(&pod) =>
                {
                    return Instant::now();
                }
                Ok(WatchEvent::Error(error)) => eprintln!("pod watch: {error:?}"),
                Err(error) => eprintln!("pod watch: {error}"),
                Ok(_) => {}
            }
        }
        panic!("the pod watch ended before a pod was marked unschedulable")
    };
    let first_node = async {
        while let Some(event) = node_events.next().await {
            match event {
                Ok(WatchEvent::Added(_)) => return Instant::now(),
                Ok(WatchEvent::Error(error)) => eprintln!("node watch: {error:?}"),
                Err(error) => eprintln!("node watch: {error}"),
                Ok(_) => {}
            }
        }
        panic!("the node watch ended before a node was added")
    };
    let replicas = i32::try_from(count).expect("burst size fits an i32");
    cluster.create_app(App::new(&app, replicas, "3")).await;
    let (unschedulable, added) = tokio::time::timeout(
        harness::WAIT_LIMIT,
        futures::future::join(first_unschedulable, first_node),
    )
    .await
    .expect("a burst is served within the wait limit");
    // Let the burst's nodes arrive before the next one, so bursts do not overlap.
    tokio::time::sleep(Duration::from_secs(15)).await;
    added.saturating_duration_since(unschedulable)
}

fn is_unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

/// Process counters read from /proc.
struct Usage {
    rss_mib: f64,
    /// `VmHWM`: the highest resident memory since the process started.
    peak_mib: f64,
    cpu_seconds: f64,
    loops: f64,
}

impl Usage {
    fn now(autoscaler: &Autoscaler) -> Usage {
        let pid = autoscaler.pid().expect("autoscaler runs");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kib = |field: &str| -> f64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0.0)
        };
        let rss_kib = kib("VmRSS:");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command name: utime and stime are the 14th and 15th of the line.
        let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // SAFETY: sysconf has no preconditions.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Usage {
            rss_mib: rss_kib / 1024.0,
            peak_mib: kib("VmHWM:") / 1024.0,
            cpu_seconds: (ticks(11) + ticks(12)) / per_second.max(1.0),
            loops: autoscaler
                .metric("cluster_autoscaler_function_duration_seconds_count{function=\"main\"}")
                .unwrap_or(0.0),
        }
    }

    fn since(&self, earlier: &Usage) -> Sample {
        let loops = (self.loops - earlier.loops).max(1.0);
        Sample {
            rss_mib: self.rss_mib,
            peak_mib: self.peak_mib,
            cpu_per_loop: (self.cpu_seconds - earlier.cpu_seconds) / loops,
            loops: loops as u64,
        }
    }
}

struct Sample {
    rss_mib: f64,
    peak_mib: f64,
    cpu_per_loop: f64,
    loops: u64,
}

async fn sample(autoscaler: &Autoscaler, window: Duration) -> Sample {
    let before = Usage::now(autoscaler);
    tokio::time::sleep(window).await;
    Usage::now(autoscaler).since(&before)
}
