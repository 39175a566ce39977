//! The scale-down actuation statements of docs/behaviour.md (SD-81, SD-84–SD-89, SD-92, SD-93,
//! SD-109, SD-113, SD-114), driven through the
//! `DeletionTracker` with recording fakes of the cloud and the Kubernetes API.

mod loop_fakes;

use std::sync::Arc;
use std::time::Duration;

use ferroscale_core::act::deletions::{
    ActuationProgress, DeletionFailure, RecheckRefusal, RemovalKind,
};
use ferroscale_core::cloud::NodeGroup;
use ferroscale_core::events::{EventObject, reasons};
use ferroscale_model::TaintEffect;
use ferroscale_model::taints::TO_BE_DELETED;
use futures::executor::block_on;
use loop_fakes::*;

/// docs/behaviour.md SD-81.
#[test]
fn s81_empty_node_is_tainted_cordoned_and_deleted_after_five_seconds() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2"]);
    let start = t(1_700_000_000);
    let progress = f.start(vec![f.request("n1", RemovalKind::Empty)], start);
    assert!(progress.start_error.is_none());

    let n1 = f.cluster.node("n1").expect("node kept");
    let taint = n1
        .taints
        .iter()
        .find(|t| t.key == TO_BE_DELETED)
        .expect("ToBeDeleted taint placed");
    assert_eq!(
        taint.value, "1700000000",
        "value is the Unix time in seconds"
    );
    assert_eq!(taint.effect, TaintEffect::NoSchedule);
    assert!(n1.unschedulable, "cordoned by default");

    f.advance(start + Duration::from_secs(4));
    assert!(calls(&f.log, "cloud.delete_nodes").is_empty(), "waits 5 s");
    let progress = f.advance(start + Duration::from_secs(5));
    assert_eq!(
        calls(&f.log, "cloud.delete_nodes"),
        vec!["cloud.delete_nodes pool n1"]
    );
    assert_eq!(progress.completed.len(), 1);
    assert!(f.tracker.is_idle());
}

/// docs/behaviour.md SD-84.
#[test]
fn s84_drained_pods_are_evicted_with_grace_capped_at_max_graceful_termination() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2"]);
    let mut long = pod_on("long", "n1", 100);
    long.termination_grace_seconds = Some(900);
    f.cluster.add_pod(long);
    f.cluster.add_pod(pod_on("default-grace", "n1", 100));
    let mut short = pod_on("short", "n1", 100);
    short.termination_grace_seconds = Some(5);
    f.cluster.add_pod(short);

    f.start(vec![f.request("n1", RemovalKind::Drain)], t(0));
    f.advance(t(5));
    let mut evictions = calls(&f.log, "kube.evict");
    evictions.sort();
    assert_eq!(
        evictions,
        vec![
            "kube.evict default/default-grace grace=30",
            "kube.evict default/long grace=600",
            "kube.evict default/short grace=5",
        ]
    );
    // The pods are gone, so the node goes in the same step.
    assert_eq!(calls(&f.log, "cloud.delete_nodes").len(), 1);
}

/// docs/behaviour.md SD-85.
#[test]
fn s85_eviction_refused_by_pdb_for_two_minutes_aborts_and_rolls_back() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2"]);
    f.cluster.add_pod(pod_on("guarded", "n1", 100));
    f.cluster
        .state()
        .pdb_protected
        .insert("default/guarded".into());

    f.start(vec![f.request("n1", RemovalKind::Drain)], t(0));
    let mut now = t(5);
    let mut last = ActuationProgress::default();
    while now <= t(5 + 130) && !f.tracker.is_idle() {
        last = f.advance(now);
        now = now + Duration::from_secs(10);
    }
    let attempts = calls(&f.log, "kube.evict").len();
    assert!(
        attempts >= 12,
        "retried every 10 s for 2 minutes, got {attempts} attempts"
    );
    assert!(f.tracker.is_idle(), "the deletion was abandoned");
    assert!(calls(&f.log, "cloud.delete_nodes").is_empty());
    assert_eq!(last.failed.len(), 1);

    let n1 = f.cluster.node("n1").expect("node kept");
    assert!(!n1.has_taint(TO_BE_DELETED), "taint removed");
    assert!(!n1.unschedulable, "uncordoned");
    let failures: Vec<_> = last
        .events
        .iter()
        .filter(|e| e.reason == reasons::SCALE_DOWN_FAILED)
        .collect();
    assert!(
        failures
            .iter()
            .any(|e| e.object == EventObject::Node("n1".into()))
    );
    assert!(
        failures
            .iter()
            .any(|e| e.object == EventObject::Pod("default/guarded".into()))
    );
}

/// docs/behaviour.md SD-86.
#[test]
fn s86_daemonset_pods_evicted_on_drained_nodes_but_not_on_empty_ones() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2"]);
    f.cluster.add_pod(pod_on("app", "n1", 100));
    f.cluster.add_pod(daemonset_pod_on("agent-n1", "n1"));
    f.cluster.add_pod(daemonset_pod_on("agent-n2", "n2"));

    f.start(
        vec![
            f.request("n1", RemovalKind::Drain),
            f.request("n2", RemovalKind::Empty),
        ],
        t(0),
    );
    f.advance(t(5));
    let evictions = calls(&f.log, "kube.evict");
    assert!(evictions.iter().any(|c| c.contains("kube-system/agent-n1")));
    assert!(
        !evictions.iter().any(|c| c.contains("agent-n2")),
        "empty node: DaemonSet pods stay by default: {evictions:?}"
    );
    assert_eq!(calls(&f.log, "cloud.delete_nodes").len(), 2);
}

/// docs/behaviour.md SD-87.
#[test]
fn s87_daemonset_pod_opted_out_is_never_evicted() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2"]);
    f.options.daemonset_eviction_for_empty_nodes = true;
    let mut opted_out = daemonset_pod_on("agent-n1", "n1");
    opted_out.annotations.insert(
        "cluster-autoscaler.kubernetes.io/enable-ds-eviction".into(),
        "false".into(),
    );
    f.cluster.add_pod(opted_out);
    f.cluster.add_pod(pod_on("app", "n1", 100));
    let mut opted_out_empty = daemonset_pod_on("agent-n2", "n2");
    opted_out_empty.annotations.insert(
        "cluster-autoscaler.kubernetes.io/enable-ds-eviction".into(),
        "false".into(),
    );
    f.cluster.add_pod(opted_out_empty);

    f.start(
        vec![
            f.request("n1", RemovalKind::Drain),
            f.request("n2", RemovalKind::Empty),
        ],
        t(0),
    );
    f.advance(t(5));
    let evictions = calls(&f.log, "kube.evict");
    assert_eq!(evictions, vec!["kube.evict default/app grace=30"]);
}

/// docs/behaviour.md SD-88.
#[test]
fn s88_delay_deletion_annotation_holds_deletion_up_to_two_minutes() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2"]);
    f.cluster
        .state()
        .nodes
        .get_mut("n1")
        .expect("n1")
        .annotations
        .insert(
            "delay-deletion.cluster-autoscaler.kubernetes.io/backup".into(),
            "true".into(),
        );
    f.cluster
        .state()
        .nodes
        .get_mut("n2")
        .expect("n2")
        .annotations
        .insert(
            "delay-deletion.cluster-autoscaler.kubernetes.io/backup".into(),
            "true".into(),
        );
    f.start(
        vec![
            f.request("n1", RemovalKind::Empty),
            f.request("n2", RemovalKind::Empty),
        ],
        t(0),
    );
    f.advance(t(5));
    f.advance(t(60));
    assert!(
        calls(&f.log, "cloud.delete_nodes").is_empty(),
        "held by the annotation"
    );

    // n2's annotation is removed: it goes at the next step; n1 waits for the timeout.
    f.cluster
        .state()
        .nodes
        .get_mut("n2")
        .expect("n2")
        .annotations
        .clear();
    f.advance(t(70));
    assert_eq!(
        calls(&f.log, "cloud.delete_nodes"),
        vec!["cloud.delete_nodes pool n2"]
    );
    f.advance(t(120));
    assert_eq!(calls(&f.log, "cloud.delete_nodes").len(), 1);
    f.advance(t(125));
    assert_eq!(
        calls(&f.log, "cloud.delete_nodes"),
        vec!["cloud.delete_nodes pool n2", "cloud.delete_nodes pool n1"],
        "after 2 minutes deletion proceeds anyway"
    );
}

/// docs/behaviour.md SD-89.
#[test]
fn s89_empty_node_that_got_a_pod_during_the_delay_is_kept_and_untainted() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2"]);
    f.start(vec![f.request("n1", RemovalKind::Empty)], t(0));
    f.cluster.add_pod(pod_on("late", "n1", 100));
    let progress = f.advance(t(5));
    assert!(calls(&f.log, "cloud.delete_nodes").is_empty());
    assert!(calls(&f.log, "kube.evict").is_empty());
    assert!(!f.cluster.node("n1").expect("n1").has_taint(TO_BE_DELETED));
    assert_eq!(progress.failed.len(), 1);
    assert_eq!(
        progress.failed[0].reason,
        DeletionFailure::Recheck(RecheckRefusal::NotEmpty {
            pod: "default/late".into()
        })
    );
    let event = progress
        .events
        .iter()
        .find(|e| e.reason == reasons::SCALE_DOWN_FAILED)
        .expect("a ScaleDownFailed event");
    assert_eq!(event.message, "node is not empty: pod default/late arrived");
}

/// docs/behaviour.md SD-92.
#[test]
fn s92_failed_cloud_delete_rolls_back_and_the_node_is_free_again() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2"]);
    *f.cloud.group("pool").fail_delete.lock().expect("lock") = true;
    f.start(vec![f.request("n1", RemovalKind::Empty)], t(0));
    let progress = f.advance(t(5));
    assert_eq!(calls(&f.log, "cloud.delete_nodes").len(), 1);
    assert!(
        progress
            .events
            .iter()
            .any(|e| e.reason == reasons::SCALE_DOWN_FAILED
                && e.object == EventObject::Node("n1".into()))
    );
    assert!(!f.cluster.node("n1").expect("n1").has_taint(TO_BE_DELETED));
    assert!(progress.failed[0].cloud_error);
    assert!(!f.tracker.is_deleting("n1"), "re-enters normal evaluation");

    // A later attempt works once the cloud accepts it.
    *f.cloud.group("pool").fail_delete.lock().expect("lock") = false;
    f.start(vec![f.request("n1", RemovalKind::Empty)], t(60));
    let progress = f.advance(t(65));
    assert_eq!(progress.completed.len(), 1);
}

/// docs/behaviour.md SD-93.
#[test]
fn s93_node_objects_are_never_deleted() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2"]);
    f.cluster.add_pod(pod_on("app", "n1", 100));
    f.start(
        vec![
            f.request("n1", RemovalKind::Drain),
            f.request("n2", RemovalKind::Empty),
        ],
        t(0),
    );
    let progress = f.advance(t(5));
    assert_eq!(progress.completed.len(), 2);
    // The cloud removed the instances; the Node objects are left for the cloud node controller.
    assert!(f.cluster.node("n1").is_some() && f.cluster.node("n2").is_some());
    assert!(
        block_on(f.cloud.group("pool").nodes())
            .expect("instances")
            .is_empty()
    );
}

/// Checks docs/behaviour.md SD-109.
#[test]
fn a_failed_taint_starts_nothing_and_removes_the_batch_taints() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2"]);
    let mut ghost = f.request("n2", RemovalKind::Empty);
    let mut gone = (*ghost.node).clone();
    gone.name = "gone".into();
    ghost.node = Arc::new(gone);
    let progress = f.start(vec![f.request("n1", RemovalKind::Empty), ghost], t(0));
    assert!(progress.start_error.is_some());
    assert!(f.tracker.is_idle());
    assert!(!f.cluster.node("n1").expect("n1").has_taint(TO_BE_DELETED));
    assert!(
        progress
            .events
            .iter()
            .any(|e| e.reason == reasons::SCALE_DOWN_FAILED
                && e.object == EventObject::Node("gone".into()))
    );
}

/// Checks docs/behaviour.md SD-114.
#[test]
fn zero_or_max_group_nodes_are_deleted_together_or_not_at_all() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2"]);
    f.cluster.add_pod(pod_on("late", "n2", 100));
    let mut a = f.request("n1", RemovalKind::Empty);
    let mut b = f.request("n2", RemovalKind::Empty);
    a.zero_or_max = true;
    b.zero_or_max = true;
    f.start(vec![a, b], t(0));
    let progress = f.advance(t(5));
    assert!(calls(&f.log, "cloud.delete_nodes").is_empty());
    assert_eq!(
        progress.failed.len(),
        2,
        "n2 is not empty, so n1 is kept too"
    );
    assert!(!f.cluster.node("n1").expect("n1").has_taint(TO_BE_DELETED));

    f.cluster.state().pods.clear();
    let mut a = f.request("n1", RemovalKind::Empty);
    let mut b = f.request("n2", RemovalKind::Empty);
    a.zero_or_max = true;
    b.zero_or_max = true;
    f.start(vec![a, b], t(100));
    f.advance(t(105));
    assert_eq!(
        calls(&f.log, "cloud.delete_nodes"),
        vec!["cloud.delete_nodes pool n1,n2"]
    );
}

/// Checks docs/behaviour.md SD-113.
#[test]
fn drain_waits_for_evicted_pods_to_go_and_gives_up_after_grace_plus_thirty_seconds() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2"]);
    f.options.max_graceful_termination_sec = 60;
    f.cluster.state().evictions_remove_pods = false;
    f.cluster.add_pod(pod_on("slow", "n1", 100));
    f.start(vec![f.request("n1", RemovalKind::Drain)], t(0));
    f.advance(t(5));
    f.advance(t(60));
    assert!(
        calls(&f.log, "cloud.delete_nodes").is_empty(),
        "pod still there"
    );
    let progress = f.advance(t(5 + 90));
    assert_eq!(
        progress.failed[0].reason,
        DeletionFailure::PodsRemaining {
            pods: vec!["default/slow".into()]
        }
    );
    assert_eq!(
        progress.failed[0].reason.to_string(),
        "pods remaining after timeout: default/slow"
    );
    assert!(!f.cluster.node("n1").expect("n1").has_taint(TO_BE_DELETED));
}

/// docs/behaviour.md SD-120: a deletion rolled back while the API server refuses node updates
/// leaves the taint owed; it is retried until it comes off, without a process restart, and a
/// node deleted meanwhile settles the debt.
#[test]
fn a_rollback_the_api_server_refused_is_retried_until_the_taint_comes_off() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2", "n3"]);
    *f.cloud.group("pool").fail_delete.lock().expect("lock") = true;
    f.cluster.state().fail_untaints = true;
    f.start(
        vec![
            f.request("n1", RemovalKind::Empty),
            f.request("n2", RemovalKind::Empty),
        ],
        t(0),
    );
    let progress = f.advance(t(5));
    assert_eq!(progress.failed.len(), 2, "the cloud refused the deletion");
    assert!(f.cluster.node("n1").expect("n1").has_taint(TO_BE_DELETED));
    assert_eq!(f.tracker.owed_untaints().nodes(), vec!["n1", "n2"]);

    let settled = block_on(f.tracker.settle_owed_untaints(&f.cluster));
    assert_eq!(settled.still_owed, vec!["n1", "n2"]);

    // n2 is gone (deleted by someone else); the API server answers again.
    f.cluster.state().nodes.remove("n2");
    f.cluster.state().fail_untaints = false;
    let settled = block_on(f.tracker.settle_owed_untaints(&f.cluster));
    assert!(settled.still_owed.is_empty());
    assert!(f.tracker.owed_untaints().is_empty());
    let n1 = f.cluster.node("n1").expect("n1");
    assert!(!n1.has_taint(TO_BE_DELETED) && !n1.unschedulable);
    assert_eq!(
        settled
            .events
            .iter()
            .map(|e| (e.reason, e.object.clone()))
            .collect::<Vec<_>>(),
        vec![(
            reasons::CLUSTER_AUTOSCALER_CLEANUP,
            EventObject::Node("n1".into())
        )]
    );
}
