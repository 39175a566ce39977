//! "What would Ferroscale do on my cluster?" end to end: a live `ferroscale run --dry-run`
//! writes its first loop's snapshot as a scenario (`--snapshot-scenario`), `ferroscale simulate`
//! and `explain` accept the file, and the simulation's first loop decides what the live loop
//! decided: the same scale-up of the same group to the same size, and the same unneeded nodes.
//! The same loop data is served as upstream's debugging snapshot on `/snapshotz`.

use std::process::Command;
use std::time::Duration;

use ferroscale_sim::replay::{DECIDED_PREFIX, loop_decisions};
use ferroscale_sim::runner::{Simulation, options_for};
use ferroscale_sim::scenario::load_scenario;
use kube::api::ListParams;

use crate::harness::{App, Cluster, is_marked_unschedulable, wait_until};
use crate::{two_nodes_with_one_small_pod_each, wait_for_first_status};

/// Whether every pod of `app` waits with the scheduler's `Unschedulable` verdict.
async fn unschedulable(cluster: &Cluster, app: &str, replicas: usize) -> bool {
    let pods = cluster
        .pods()
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list pods")
        .items;
    pods.len() == replicas && pods.iter().all(is_marked_unschedulable)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_dry_run_loop_replays_as_a_scenario_with_the_same_decisions() {
    let cluster = Cluster::start().await;
    // Two pool nodes made by a real scale-up, each left with one 500m pod: both underutilized.
    let mut builder = cluster.start_autoscaler("builder", &[]);
    wait_for_first_status(&cluster).await;
    let nodes = two_nodes_with_one_small_pod_each(&cluster, &[], &[]).await;
    // Killed, not stopped: a clean shutdown's provider Cleanup would delete the kwok nodes.
    builder.crash();
    cluster.delete_app("big").await;
    wait_until("the big pods to be gone", async || {
        cluster.running_pods("big").await.is_empty()
    })
    .await;
    // Two pods of 3.6 CPU: no node has room (3.5 CPU free each), a new 4-CPU node holds one.
    cluster.create_app(App::new("wide", 2, "3600m")).await;
    wait_until("the wide pods to be unschedulable", async || {
        unschedulable(&cluster, "wide", 2).await
    })
    .await;
    // The simulator acts on pending pods older than 2 s; the live loop (frequent loops) on pods
    // older than its batching window. Older than both, the two see the same pods.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("replay.yaml");
    let snapshot_flag = format!("--snapshot-scenario={}", file.display());
    let live = cluster.start_autoscaler(
        "dry-run",
        &["--dry-run", "--debugging-snapshot-enabled", &snapshot_flag],
    );
    wait_until("the replay scenario to be written", async || file.exists()).await;
    let text = std::fs::read_to_string(&file).expect("read the replay scenario");
    let decided = text
        .lines()
        .find_map(|line| line.strip_prefix(DECIDED_PREFIX))
        .expect("the live loop's decisions in the header")
        .to_string();
    // The live loop wanted two nodes for the wide pods and found one of the small pods' nodes
    // unneeded (its pod fits beside the other's).
    assert!(decided.contains("general 2 → 4"), "{decided}");
    assert!(
        nodes.iter().any(|node| decided.contains(node.as_str())),
        "{decided}"
    );

    // Upstream's debugging snapshot of a later loop: every node with its pods, the templates.
    let snapshot = live.http_get("/snapshotz").expect("/snapshotz answers");
    let snapshot: serde_json::Value = serde_json::from_str(&snapshot).expect("JSON");
    let listed: Vec<&str> = snapshot["NodeList"]
        .as_array()
        .expect("NodeList")
        .iter()
        .filter_map(|n| n["Node"]["metadata"]["name"].as_str())
        .collect();
    for node in &nodes {
        assert!(listed.contains(&node.as_str()), "{listed:?}");
    }
    assert!(snapshot["TemplateNodes"]["general"]["Node"].is_object());
    let scenario_answer = live
        .http_get("/snapshotz?format=scenario")
        .expect("/snapshotz?format=scenario answers");
    assert!(scenario_answer.contains("kind: Scenario"));

    // The simulation's first loop decides what the live loop decided.
    let scenario = load_scenario(&file).expect("the replay scenario loads");
    let options = options_for(&scenario, &[]).expect("the replay scenario's options");
    let mut simulation = Simulation::new(&scenario, options);
    let first = simulation.next_loop().expect("a first loop");
    assert_eq!(loop_decisions(&first.outcome), decided, "{text}");

    // And the command line accepts it.
    let binary = env!("CARGO_BIN_EXE_ferroscale");
    let simulate = Command::new(binary)
        .args(["simulate", &file.display().to_string(), "--output", "json"])
        .output()
        .expect("run ferroscale simulate");
    assert!(
        simulate.status.success(),
        "{}",
        String::from_utf8_lossy(&simulate.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&simulate.stdout).expect("simulate's JSON summary");
    assert!(
        summary["groups"]["general"]["peakSize"].as_u64() >= Some(4),
        "{summary}"
    );
    let explain = Command::new(binary)
        .args(["explain", &file.display().to_string()])
        .output()
        .expect("run ferroscale explain");
    assert!(explain.status.success());
    let explained = String::from_utf8_lossy(&explain.stdout);
    assert!(explained.contains("general 2 → 4"), "{explained}");
}
