//! The API server errors for minutes while the cluster keeps changing: the replica's view falls
//! behind, and a node that looks empty in it is not (docs/behaviour.md LOOP-121). Ferroscale
//! does not act on that view, says so in its health check and metrics, keeps running, and acts
//! correctly once the API server answers again.

use std::time::{Duration, Instant, SystemTime};

use ferroscale_testing_faults::api_proxy::{Action, Matcher, RequestClass, Rule};
use ferroscale_testing_faults::provider::Method;

use crate::harness::{App, TO_BE_DELETED, has_taint, wait_until};
use crate::rig::{Rig, RigOptions};

const API_CALL_ERRORS: &str = "cluster_autoscaler_errors_total{type=\"apiCallError\"}";

/// Each phase of errors lasts this long: "minutes" in all, well past the unneeded time and
/// `--max-failing-time`.
const PHASE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minutes_of_api_errors_never_scale_down_on_a_stale_view() {
    let mut rig = Rig::start(RigOptions {
        flags: &[
            "--scale-down-unneeded-time=30s",
            "--scale-down-delay-after-add=0s",
            "--node-delete-delay-after-taint=2s",
            "--max-failing-time=30s",
        ],
        ..RigOptions::default()
    })
    .await;
    let nodes = rig.busy_nodes(2).await;
    let cluster = &rig.cluster;

    // One pod goes; the replica sees its node empty and starts its unneeded time.
    cluster.scale_app("web", 1).await;
    cluster.wait_running("web", 1).await;
    let busy = cluster.running_pods("web").await;
    let emptied = nodes
        .iter()
        .find(|n| !busy.values().any(|b| b == *n))
        .expect("one node emptied")
        .clone();
    tokio::time::sleep(Duration::from_secs(4)).await;

    // Phase 1: the replica's lists and watches fail, and its watches are cut. Meanwhile a new
    // pod is bound to the emptied node, which the replica's view still shows empty.
    let faults = rig.replicas[0].proxy.faults();
    let outage = Instant::now();
    let refuse_reads = faults.add_rule(Rule::new(
        Matcher::any()
            .class(RequestClass::List)
            .class(RequestClass::Watch),
        Action::respond(503),
    ));
    let dropped = faults.drop_watches(&Matcher::any());
    assert!(dropped > 0, "the replica's watches were cut");
    cluster.create_app(App::new("late", 1, "3")).await;
    let late = cluster.wait_running("late", 1).await;
    assert_eq!(
        late.values().next(),
        Some(&emptied),
        "late runs on the emptied node"
    );
    wait_until("the replica to count failing API calls", async || {
        rig.process(0).metric(API_CALL_ERRORS).unwrap_or(0.0) > 0.0
    })
    .await;
    rig.wait_for_health(0, false).await;
    tokio::time::sleep(PHASE.saturating_sub(outage.elapsed())).await;

    // Phase 2: every request is throttled (429 with Retry-After), writes included — except the
    // Lease's, as API Priority and Fairness keeps leader election in a priority level of its
    // own. (A leader whose renewals fail stops and exits, as upstream; the leadership tests and
    // the soak cover that.)
    faults.remove_rule(refuse_reads);
    let leases_pass = faults.add_rule(Rule::new(
        Matcher::any().resource("leases"),
        Action::Delay(Duration::ZERO),
    ));
    let throttle = faults.add_rule(Rule::new(
        Matcher::any(),
        Action::Respond {
            status: 429,
            retry_after: Some(1),
        },
    ));
    tokio::time::sleep(PHASE).await;
    assert!(
        rig.replicas[0]
            .process
            .as_mut()
            .expect("running")
            .is_running(),
        "minutes of API errors are not fatal"
    );
    faults.remove_rule(throttle);
    faults.remove_rule(leases_pass);

    // Nothing was removed, or even tainted (soft taints included), on the stale view: the
    // replica did not so much as try to write a node.
    let outage_began = SystemTime::now() - outage.elapsed();
    let node_writes: Vec<String> = faults
        .log()
        .iter()
        .filter(|entry| entry.received_at >= outage_began)
        .filter(|entry| entry.request.resource() == Some("nodes"))
        .filter(|entry| {
            matches!(
                entry.request.class,
                RequestClass::Update | RequestClass::Patch
            )
        })
        .map(|entry| format!("{:?} {:?}", entry.request.class, entry.request.name()))
        .collect();
    assert!(
        node_writes.is_empty(),
        "no node write was attempted during the outage: {node_writes:?}"
    );
    let deletions = rig
        .provider
        .call_log()
        .records()
        .iter()
        .filter(|c| c.method == Method::DeleteNodes)
        .count();
    assert_eq!(deletions, 0, "no node deleted during the outage");
    assert!(
        !has_taint(
            &cluster.nodes().get(&emptied).await.expect("node"),
            TO_BE_DELETED
        ),
        "the node the stale view showed empty was never tainted"
    );

    // The API server answers again: the replica catches up, is healthy again, keeps both nodes
    // (both are busy), and grows the group for a new pod.
    rig.wait_for_health(0, true).await;
    cluster.scale_app("late", 2).await;
    cluster.wait_running("late", 2).await;
    for node in &nodes {
        assert!(
            cluster.nodes().get_opt(node).await.expect("read").is_some(),
            "{node} is busy and stays"
        );
    }
    rig.assert_settled().await;
}
