//! Races between the scheduler and a scale-down (upstream's kubernetes/autoscaler #3886, #5790):
//! a pod is bound to a node after scale-down chose the node as empty and before its deletion
//! taint landed. Ferroscale looks at the node's pods again after the taint, from the API server
//! itself, so the node is kept (docs/behaviour.md SD-89, SD-110).

use std::time::Duration;

use ferroscale_core::events::reasons;
use ferroscale_testing_faults::api_proxy::{Action, Matcher, RequestClass, Rule};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;

use crate::harness::{APPS, TO_BE_DELETED, has_taint, wait_until};
use crate::rig::{QUICK_SCALE_DOWN, Rig, RigOptions};

/// How long a test waits for a request it holds to arrive.
const HOLD_WAIT: Duration = Duration::from_secs(120);

/// The scheduler binds a new pod to the node scale-down chose as empty while the update that
/// taints the node is held in the replica's API proxy — and the replica's pod watch is stalled
/// too, so its cache never hears of the pod. When the taint lands, the post-taint check lists the
/// node's pods from the API server, finds the pod, and gives the node back: it is untainted,
/// uncordoned and never deleted while the pod runs there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_bound_while_the_deletion_taint_is_in_flight_keeps_its_node() {
    let rig = Rig::start(RigOptions {
        flags: QUICK_SCALE_DOWN,
        ..RigOptions::default()
    })
    .await;
    rig.busy_nodes(2).await;
    let cluster = &rig.cluster;

    let faults = rig.replicas[0].proxy.faults();
    let hold = faults.add_rule(Rule::new(
        Matcher::any()
            .resource("nodes")
            .class(RequestClass::Update)
            .class(RequestClass::Patch)
            .body_contains(TO_BE_DELETED),
        Action::Hold,
    ));
    // One pod goes: its node is empty, and scale-down chooses it.
    cluster.scale_app("web", 1).await;
    let held = faults
        .wait_for_held(hold, HOLD_WAIT)
        .await
        .expect("the update adding the deletion taint reaches the proxy");
    let node = held
        .request
        .name()
        .expect("the held update names its node")
        .to_string();
    assert!(
        !has_taint(
            &cluster.nodes().get(&node).await.expect("node"),
            TO_BE_DELETED
        ),
        "the taint has not landed"
    );

    // The replica's view of pods freezes; then the Deployment grows again and the scheduler
    // binds the new pod to the only node with room: the one being removed.
    let stall = faults.stall_watches(Matcher::any().class(RequestClass::Watch).resource("pods"));
    cluster.scale_app("web", 2).await;
    let running = cluster.wait_running("web", 2).await;
    assert!(
        running.values().any(|n| *n == node),
        "the scheduler bound the new pod to {node}: {running:?}"
    );
    faults.remove_rule(hold);
    assert!(faults.release(held.id), "the held update goes on");

    // The taint lands, then comes off again once the node's pods are read.
    wait_until(&format!("{node} to be given back"), async || {
        let refused = node_events(&rig, &node)
            .await
            .iter()
            .any(|(reason, message)| {
                reason == reasons::SCALE_DOWN_FAILED && message.contains("node is not empty")
            });
        let current = cluster.nodes().get(&node).await.expect("the node stays");
        refused
            && !has_taint(&current, TO_BE_DELETED)
            && current.spec.and_then(|s| s.unschedulable) != Some(true)
    })
    .await;
    // Several scan intervals and unneeded times later the node and its pod are still there.
    for _ in 0..15 {
        let running = cluster.running_pods("web").await;
        assert!(
            running.values().any(|n| *n == node),
            "the pod keeps running on {node}: {running:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(!rig.invariants.deleted_nodes().contains(&node));
    faults.resume(stall);
    rig.assert_settled().await;
}

/// `(reason, message)` of the Events about `node`.
pub async fn node_events(rig: &Rig, node: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(rig.cluster.client.clone(), APPS)
        .list(&ListParams::default().fields(&format!("involvedObject.name={node}")))
        .await
        .map(|list| list.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("Node"))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}
