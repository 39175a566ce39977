//! The leader dies or loses the API server at the worst moments, with a standby running
//! (upstream's kubernetes/autoscaler #3949, #5048: a leader restarted mid-drain leaves the node
//! tainted with pods on it and the group stuck). The next leader finishes or rolls back within a
//! bounded time, never asks the cloud again for what the dead leader already asked, and a leader
//! cut off from the API server stops before its Lease can expire
//! (docs/behaviour.md LOOP-91, LOOP-122, SD-120; docs/reliability.md).

use std::time::{Duration, SystemTime};

use ferroscale_testing_faults::api_proxy::{Action, Matcher, PartitionMode, RequestClass, Rule};
use ferroscale_testing_faults::provider::{Fault, LostAnswer, Method};

use crate::harness::{App, TO_BE_DELETED, has_taint, wait_until};
use crate::rig::{QUICK_SCALE_DOWN, Rig, RigOptions};

/// How long the test waits for a call or a request it is about to act on.
const ARRIVAL: Duration = Duration::from_secs(120);

/// The first leader waits ten minutes between tainting a node and deleting it, which leaves all
/// the time in the world to kill it there; the standby has the usual two seconds.
const SLOW_AFTER_TAINT: &[&str] = &["--node-delete-delay-after-taint=10m"];

/// After the recovery, the group still grows: a third pod gets a third node.
async fn the_group_still_grows(rig: &Rig) {
    rig.cluster.scale_app("web", 3).await;
    rig.cluster.wait_running("web", 3).await;
}

/// The leader is killed after it tainted a node for deletion. The standby takes over, removes
/// the leftover taint in its first iteration, and then removes the still empty node itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_after_tainting_leaves_no_taint_and_no_stuck_group() {
    let mut rig = Rig::start(RigOptions {
        replicas: 2,
        flags: QUICK_SCALE_DOWN,
        first_leader_flags: SLOW_AFTER_TAINT,
        ..RigOptions::default()
    })
    .await;
    let nodes = rig.busy_nodes(2).await;
    rig.cluster.scale_app("web", 1).await;
    let mut tainted = String::new();
    wait_until("the leader to taint the empty node", async || {
        for node in rig.cluster.pool_nodes().await {
            if has_taint(&node, TO_BE_DELETED) {
                tainted = node.metadata.name.unwrap_or_default();
                return true;
            }
        }
        false
    })
    .await;
    rig.kill(0);
    let killed_at = SystemTime::now();
    rig.wait_for_new_leader(0).await;

    // Rolled back (untainted) or finished (removed): either way, within a bounded time.
    wait_until(
        &format!("{tainted} untainted or removed"),
        async || match rig
            .cluster
            .nodes()
            .get_opt(&tainted)
            .await
            .expect("read node")
        {
            Some(node) => !has_taint(&node, TO_BE_DELETED),
            None => true,
        },
    )
    .await;
    let recovered = SystemTime::now()
        .duration_since(killed_at)
        .unwrap_or_default();
    eprintln!("recovered {recovered:?} after the leader was killed");
    // The empty node goes in the end (the standby's own scale-down), the busy one stays.
    wait_until(
        &format!("{tainted} removed by the new leader"),
        async || {
            rig.cluster
                .nodes()
                .get_opt(&tainted)
                .await
                .expect("read node")
                .is_none()
        },
    )
    .await;
    assert!(nodes.contains(&tainted));
    the_group_still_grows(&rig).await;
    rig.assert_settled().await;
}

/// The leader is killed while it drains a node: the eviction of the node's pod is on its way
/// (held in the leader's API proxy when the leader dies, then let through). The standby takes
/// over, the evicted pod runs elsewhere, and the drained node is untainted or removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_mid_eviction_leaves_no_taint_and_loses_no_pod() {
    let mut rig = Rig::start(RigOptions {
        replicas: 2,
        flags: QUICK_SCALE_DOWN,
        ..RigOptions::default()
    })
    .await;
    let cluster = &rig.cluster;
    // Two nodes each running one small pod once the big pods go: both underutilized, and
    // either small pod fits next to the other.
    cluster.create_app(App::new("big", 2, "3")).await;
    cluster.wait_running("big", 2).await;
    let nodes = cluster.wait_pool_ready(2).await;
    for (app, node, other) in [
        ("small-a", &nodes[0], &nodes[1]),
        ("small-b", &nodes[1], &nodes[0]),
    ] {
        cluster.cordon(other, true).await;
        cluster.create_app(App::new(app, 1, "500m")).await;
        let placed = cluster.wait_running(app, 1).await;
        cluster.cordon(other, false).await;
        assert_eq!(placed.values().next(), Some(node), "{app} on {node}");
    }
    let faults = rig.replicas[0].proxy.faults();
    let hold = faults.add_rule(Rule::new(
        Matcher::any().class(RequestClass::Eviction),
        Action::Hold,
    ));
    cluster.delete_app("big").await;
    let held = faults
        .wait_for_held(hold, ARRIVAL)
        .await
        .expect("the leader evicts a small pod");
    rig.kill(0);
    // The eviction the dead leader sent still reaches the API server.
    faults.remove_rule(hold);
    faults.release(held.id);
    rig.wait_for_new_leader(0).await;

    wait_until("no node tainted for deletion", async || {
        rig.cluster
            .pool_nodes()
            .await
            .iter()
            .all(|node| !has_taint(node, TO_BE_DELETED))
    })
    .await;
    rig.assert_settled().await;
    the_group_still_grows_with(&rig, "small-a").await;
}

/// A new pod of `app` (500m) still gets a place: the group is not stuck.
async fn the_group_still_grows_with(rig: &Rig, app: &str) {
    rig.cluster.scale_app(app, 2).await;
    rig.cluster.wait_running(app, 2).await;
}

/// The leader is killed after it asked the cloud to delete a node; the cloud deletes it but the
/// answer never reaches anyone. The standby does not delete it again, cleans up, and the group
/// goes on working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_after_delete_nodes_is_not_followed_by_a_second_deletion() {
    let mut rig = Rig::start(RigOptions {
        replicas: 2,
        flags: QUICK_SCALE_DOWN,
        ..RigOptions::default()
    })
    .await;
    rig.busy_nodes(2).await;
    rig.inject_once(
        Method::DeleteNodes,
        Fault::AnswerLost {
            answer: LostAnswer::Timeout,
        },
    );
    rig.cluster.scale_app("web", 1).await;
    let call = rig
        .provider
        .call_log()
        .wait_for_call(|c| c.method == Method::DeleteNodes, ARRIVAL)
        .await
        .expect("the leader deletes the empty node");
    rig.kill(0);
    let deleted = call.details.nodes[0].name.clone();
    rig.wait_for_new_leader(0).await;
    wait_until(&format!("{deleted} gone"), async || {
        rig.cluster
            .nodes()
            .get_opt(&deleted)
            .await
            .expect("read")
            .is_none()
    })
    .await;
    rig.cluster.wait_pool_ready(1).await;
    the_group_still_grows(&rig).await;
    rig.assert_settled().await;
}

/// The leader is killed right after it asked the cloud for nodes, before the answer came back.
/// The new leader counts the nodes on their way from the cloud's target size and does not ask
/// for them again: the pods get exactly the nodes they need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_after_increase_size_is_not_followed_by_a_second_increase() {
    let mut rig = Rig::start(RigOptions {
        replicas: 2,
        ..RigOptions::default()
    })
    .await;
    rig.inject_once(
        Method::IncreaseSize,
        Fault::AnswerLost {
            answer: LostAnswer::Timeout,
        },
    );
    rig.cluster.create_app(App::new("web", 3, "3")).await;
    rig.provider
        .call_log()
        .wait_for_call(|c| c.method == Method::IncreaseSize, ARRIVAL)
        .await
        .expect("the leader asks for nodes");
    rig.kill(0);
    rig.wait_for_new_leader(0).await;
    rig.cluster.wait_running("web", 3).await;
    rig.cluster.wait_pool_ready(3).await;
    // Several scan intervals later, still three nodes and no further resize.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(rig.cluster.pool_nodes().await.len(), 3);
    assert_eq!(
        rig.nodes_the_cloud_made(),
        3,
        "the cloud was asked for exactly the three nodes"
    );
    assert_eq!(rig.invariants.peak_nodes(), 3);
    rig.assert_settled().await;
}

/// The leader loses the API server (its proxy goes silent) for longer than the lease. It stops
/// calling the cloud before the standby can take the Lease over, so the two never act at once,
/// and it exits; the new leader serves the next pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_stops_before_its_lease_can_expire() {
    let mut rig = Rig::start(RigOptions {
        replicas: 2,
        ..RigOptions::default()
    })
    .await;
    rig.busy_nodes(2).await;
    let cut_at = SystemTime::now();
    rig.replicas[0]
        .proxy
        .faults()
        .partition(PartitionMode::Silent);
    let leader = rig.wait_for_new_leader(0).await;
    assert_eq!(leader, 1);
    let took_over = rig
        .invariants
        .tenures()
        .last()
        .map(|t| t.acquired)
        .expect("the new tenure");
    // The cut-off leader's last call to the cloud came before the takeover.
    let last_call = rig
        .provider
        .call_log()
        .records()
        .iter()
        .filter(|c| c.caller.as_deref() == Some("replica-0"))
        .map(|c| c.arrived)
        .max()
        .expect("replica-0 called the cloud while it led");
    let margin = took_over.duration_since(last_call).unwrap_or_default();
    eprintln!(
        "cut off at +0 s; last cloud call at +{:?}; takeover at +{:?} ({margin:?} later)",
        last_call.duration_since(cut_at).unwrap_or_default(),
        took_over.duration_since(cut_at).unwrap_or_default()
    );
    assert!(
        last_call < took_over,
        "replica-0 called the cloud after replica-1 took over"
    );
    // It gives up and exits, as upstream does when it loses the Lease.
    wait_until("the cut-off leader to exit", async || {
        rig.replicas[0]
            .process
            .as_mut()
            .is_some_and(|p| !p.is_running())
    })
    .await;
    rig.replicas[0].proxy.faults().heal();
    the_group_still_grows(&rig).await;
    rig.assert_settled().await;
    rig.kill(0);
}
