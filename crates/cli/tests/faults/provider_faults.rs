//! The cloud misbehaves: a resize carried out whose answer is lost, a deletion that fails for
//! part of its batch, a provider down for minutes, machines that never become nodes. No double
//! increase, no node deleted twice, failed deletions untainted and retried, backoff as upstream,
//! and no runaway growth (docs/reliability.md).

use std::time::{Duration, Instant};

use ferroscale_testing_faults::provider::{
    CallRecord, CallResult, Fault, Injection, LostAnswer, Method, PHANTOM_ID_PREFIX,
};

use crate::harness::{App, TO_BE_DELETED, has_taint, wait_until};
use crate::rig::{QUICK_SCALE_DOWN, Rig, RigOptions};

/// Whether the cloud carried the call out, whatever its caller heard.
fn carried_out(call: &CallRecord) -> bool {
    matches!(
        call.carried_out.as_ref().unwrap_or(&call.result),
        CallResult::Ok
    )
}

fn calls_of(rig: &Rig, method: Method) -> Vec<CallRecord> {
    rig.provider
        .call_log()
        .records()
        .into_iter()
        .filter(|c| c.method == method)
        .collect()
}

/// `scaleUp.status` of the group in the status ConfigMap.
async fn scale_up_status(rig: &Rig) -> Option<String> {
    let status = rig.cluster.status().await?;
    let status: serde_yaml_ng::Value = serde_yaml_ng::from_str(&status).ok()?;
    status["nodeGroups"]
        .as_sequence()?
        .iter()
        .find(|g| g["name"].as_str() == Some("general"))
        .and_then(|g| g["scaleUp"]["status"].as_str().map(str::to_string))
}

/// IncreaseSize times out (no answer within the client's deadline) but the cloud carried it
/// out. The group is backed off as after any failed scale-up, the nodes the cloud made serve the
/// pods, and nobody asks for them a second time. (The soak also loses answers as UNAVAILABLE.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_increase_that_timed_out_but_was_carried_out_is_not_asked_again() {
    let rig = Rig::start(RigOptions::default()).await;
    rig.wait_for_first_iteration().await;
    rig.inject_once(
        Method::IncreaseSize,
        Fault::AnswerLost {
            answer: LostAnswer::Timeout,
        },
    );
    rig.cluster.create_app(App::new("web", 3, "3")).await;
    wait_until("the failed scale-up to back the group off", async || {
        scale_up_status(&rig).await.as_deref() == Some("Backoff")
    })
    .await;
    rig.cluster.wait_running("web", 3).await;
    rig.cluster.wait_pool_ready(3).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        rig.nodes_the_cloud_made(),
        3,
        "the cloud was asked for the three nodes once"
    );
    assert_eq!(rig.invariants.peak_nodes(), 3);
    rig.assert_settled().await;
}

/// Three empty nodes go in one DeleteNodes call (`--node-deletion-batcher-interval`); the cloud
/// deletes the first and fails the call. The other two are untainted, considered again after
/// `--unremovable-node-recheck-timeout`, and removed by later calls; no node is deleted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_that_fails_for_part_of_its_batch_is_rolled_back_and_retried() {
    let flags: Vec<&str> = QUICK_SCALE_DOWN
        .iter()
        .copied()
        .chain([
            "--node-deletion-batcher-interval=3s",
            "--unremovable-node-recheck-timeout=15s",
            "--scale-down-delay-after-failure=5s",
        ])
        .collect();
    let rig = Rig::start(RigOptions {
        flags: &flags,
        ..RigOptions::default()
    })
    .await;
    rig.wait_for_first_iteration().await;
    rig.cluster.create_app(App::new("web", 3, "3")).await;
    rig.cluster.wait_running("web", 3).await;
    let nodes = rig.cluster.wait_pool_ready(3).await;
    rig.inject_once(Method::DeleteNodes, Fault::PartialDelete { deleted: 1 });
    rig.cluster.scale_app("web", 0).await;
    let failed = rig
        .provider
        .call_log()
        .wait_for_call(
            |c| c.method == Method::DeleteNodes && c.result != CallResult::InFlight,
            Duration::from_secs(120),
        )
        .await
        .expect("the batch's DeleteNodes call");
    assert!(matches!(failed.result, CallResult::Error(_)), "{failed}");
    let survivors: Vec<String> = failed.details.nodes[1..]
        .iter()
        .map(|n| n.name.clone())
        .collect();
    assert!(
        !survivors.is_empty(),
        "the batch had more than one node: {failed}"
    );
    // The survivors are untainted (rolled back) before anything else happens to them.
    wait_until("the failed deletions to be rolled back", async || {
        let pool = rig.cluster.pool_nodes().await;
        survivors.iter().all(|name| {
            pool.iter()
                .filter(|n| n.metadata.name.as_ref() == Some(name))
                .all(|n| !has_taint(n, TO_BE_DELETED))
        })
    })
    .await;
    // Retried later, and all gone in the end.
    wait_until("every empty node removed", async || {
        rig.cluster.pool_nodes().await.is_empty()
    })
    .await;
    // The invariants' watch sees each node go within a poll.
    wait_until("the invariants' watch to see every node go", async || {
        rig.invariants.deleted_nodes().len() == nodes.len()
    })
    .await;
    rig.assert_settled().await;
}

/// The provider is down (its port closed) for two minutes while pods wait. The replica keeps
/// running, reports the failures and fails its health check; when the provider is back, the
/// pods get exactly the nodes they need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_down_for_minutes_is_survived_and_then_served() {
    let mut rig = Rig::start(RigOptions {
        flags: &["--max-failing-time=30s"],
        ..RigOptions::default()
    })
    .await;
    rig.wait_for_first_iteration().await;
    rig.served.stop().await;
    let down = Instant::now();
    rig.cluster.create_app(App::new("web", 2, "3")).await;
    rig.wait_for_health(0, false).await;
    assert!(
        rig.process(0)
            .metric("cluster_autoscaler_errors_total{type=\"cloudProviderError\"}")
            .unwrap_or(0.0)
            > 0.0
    );
    tokio::time::sleep(Duration::from_secs(120).saturating_sub(down.elapsed())).await;
    assert!(
        rig.replicas[0]
            .process
            .as_mut()
            .expect("running")
            .is_running(),
        "a provider down for minutes is not fatal"
    );
    assert!(rig.cluster.pool_nodes().await.is_empty());
    rig.served
        .start_again()
        .await
        .expect("the provider is back");
    rig.cluster.wait_running("web", 2).await;
    rig.cluster.wait_pool_ready(2).await;
    rig.wait_for_health(0, true).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        rig.invariants.peak_nodes(),
        2,
        "no runaway after the outage"
    );
    rig.assert_settled().await;
}

/// The cloud accepts every resize but its machines never become nodes. However long that lasts,
/// the group's target stays bounded: after `--max-node-provision-time` the instances are
/// deleted, the scale-up counts as failed and the group is backed off, growing again only after
/// the backoff. When the cloud delivers again, the pods run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_that_never_become_nodes_keep_the_group_bounded() {
    let rig = Rig::start(RigOptions {
        flags: &[
            "--max-node-provision-time=20s",
            "--initial-node-group-backoff-duration=40s",
        ],
        ..RigOptions::default()
    })
    .await;
    rig.wait_for_first_iteration().await;
    let never = rig
        .provider
        .inject(Injection::new(Method::IncreaseSize, Fault::NeverRegister).in_group("general"))
        .expect("inject");
    rig.cluster.create_app(App::new("web", 2, "3")).await;
    let started = Instant::now();
    let mut peak_target = 0usize;
    while started.elapsed() < Duration::from_secs(150) {
        peak_target = peak_target.max(rig.provider.phantoms("general").len());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let increases = calls_of(&rig, Method::IncreaseSize);
    let deleted_phantoms: usize = calls_of(&rig, Method::DeleteNodes)
        .iter()
        .filter(|c| carried_out(c))
        .flat_map(|c| c.details.nodes.iter())
        .filter(|n| n.provider_id.starts_with(PHANTOM_ID_PREFIX))
        .count();
    eprintln!(
        "in 150 s: {} IncreaseSize calls, at most {peak_target} machines waiting at once, \
         {deleted_phantoms} deleted",
        increases.len()
    );
    assert!(peak_target <= 2, "never more machines than the pods need");
    assert!(
        deleted_phantoms >= 2,
        "machines that did not register in time are deleted"
    );
    // 20 s to give up, then 40 s, 80 s... of backoff: three attempts at most in 150 s.
    assert!(
        increases.len() <= 3,
        "growth is bounded by provision time and backoff: {increases:?}"
    );
    assert!(rig.cluster.pool_nodes().await.is_empty());

    // The cloud works again: after the backoff the pods get real nodes.
    rig.provider.remove(never);
    rig.cluster.wait_running("web", 2).await;
    rig.cluster.wait_pool_ready(2).await;
    rig.assert_settled().await;
}
