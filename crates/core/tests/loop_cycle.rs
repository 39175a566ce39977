//! A whole scale-up then scale-down cycle through `Autoscaler::run_once` over many iterations
//! with advancing `now`, against recording fakes of the cloud and the Kubernetes API.

mod loop_fakes;

use std::time::Duration;

use ferroscale_core::act::deletions::ActuationStep;
use ferroscale_core::autoscaler::Autoscaler;
use ferroscale_core::events::reasons;
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::pod::SAFE_TO_EVICT;
use loop_fakes::*;

fn cluster_with_one_node() -> (CallLog, FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("pool", 0, 10);
    let cluster = FakeCluster::new(log.clone());
    let n = node("n0", 4000, 16 << 30);
    cloud.add_instance("pool", &n);
    cluster.add_node(n);
    (log, cloud, cluster)
}

#[test]
fn a_scale_up_then_scale_down_cycle_over_several_iterations() {
    let (log, cloud, cluster) = cluster_with_one_node();
    cluster.add_pod(pod_on("base", "n0", 3500));
    cluster.add_pod(pending_pod("burst", 3000, t(0)));
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 7);

    // Scale-up.
    let mut now = t(100);
    let scaled = run(&mut autoscaler, &cloud, &cluster, now);
    assert!(
        scaled.acted(),
        "a scale-up makes the next loop start at once"
    );
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 1"]
    );

    // The cloud creates the node a minute later and the scheduler binds the pod.
    now = now + Duration::from_secs(60);
    let mut fresh = node("n-new", 4000, 16 << 30);
    fresh.creation_time = now;
    cloud.add_instance("pool", &fresh);
    cluster.add_node(fresh);
    {
        let mut state = cluster.state();
        let burst = state.pods.get_mut("default/burst").expect("burst");
        burst.node_name = Some("n-new".into());
        burst.phase = ferroscale_model::PodPhase::Running;
        burst.scheduled_condition = None;
    }
    let bound = run(&mut autoscaler, &cloud, &cluster, now);
    assert!(
        !bound.acted(),
        "a loop that changed nothing waits for the scan interval"
    );

    // The burst ends; the new node is empty and, after the cooldowns, removed.
    cluster.state().pods.remove("default/burst");
    let mut deleted_at = None;
    let mut deletions_started = 0;
    for _ in 0..200 {
        now = now + Duration::from_secs(10);
        let outcome = run(&mut autoscaler, &cloud, &cluster, now);
        let tainted = outcome
            .actuation
            .iter()
            .any(|report| matches!(report.step, ActuationStep::Tainted));
        assert_eq!(outcome.acted(), tainted, "only starting a deletion counts");
        deletions_started += usize::from(tainted);
        if !outcome.deleted_nodes.is_empty() {
            deleted_at = Some(now);
            break;
        }
    }
    let deleted_at = deleted_at.expect("the empty node is eventually deleted");
    assert_eq!(deletions_started, 1);
    assert_eq!(
        calls(&log, "cloud.delete_nodes"),
        vec!["cloud.delete_nodes pool n-new"]
    );
    // Not before the scale-up cooldown and the unneeded time have passed.
    assert!(deleted_at.since(t(100)) >= Duration::from_secs(10 * 60));
    assert!(
        cluster.node("n-new").is_some(),
        "the Node object is left to the cloud controller"
    );
    assert_eq!(*cloud.group("pool").target.lock().expect("lock"), 1);
    assert!(!cluster.events_with(reasons::SCALE_DOWN_EMPTY).is_empty());
    assert!(autoscaler.deletions().is_idle());
}

/// docs/behaviour.md SD-110: between tainting a node and draining it, its pods are checked again
/// against the drainability rules. A pod that became non-evictable in the meantime keeps the node.
#[test]
fn a_pod_that_became_unevictable_after_tainting_keeps_its_node() {
    let (log, cloud, cluster) = cluster_with_one_node();
    // n0 is busy (not a candidate) but has room for web-0; n1 runs only web-0.
    cluster.add_pod(pod_on("base", "n0", 3000));
    let spare = node("n1", 4000, 16 << 30);
    cloud.add_instance("pool", &spare);
    cluster.add_node(spare);
    cluster.add_pod(pod_on("web-0", "n1", 500));
    cluster
        .state()
        .controllers
        .push(ferroscale_core::kubernetes::WorkloadController {
            kind: "ReplicaSet".into(),
            namespace: "default".into(),
            name: "web".into(),
            uid: "uid-rs-web".into(),
            replicas: Some(2),
        });
    let mut options = AutoscalingOptions::default();
    options.set("scale-down-unneeded-time", "0s").expect("flag");
    let mut autoscaler = Autoscaler::new(options, 3);

    // n1 becomes unneeded, then is chosen for draining and tainted.
    let mut now = t(10_000);
    let mut tainted = false;
    for _ in 0..5 {
        run(&mut autoscaler, &cloud, &cluster, now);
        tainted = cluster
            .node("n1")
            .is_some_and(|n| n.has_taint(ferroscale_model::taints::TO_BE_DELETED));
        if tainted {
            break;
        }
        now = now + Duration::from_secs(10);
    }
    assert!(tainted, "n1 is tainted for deletion");

    // During the post-taint delay its pod is annotated safe-to-evict: "false".
    cluster
        .state()
        .pods
        .get_mut("default/web-0")
        .expect("web-0")
        .annotations
        .insert(SAFE_TO_EVICT.into(), "false".into());
    for _ in 0..3 {
        now = now + Duration::from_secs(10);
        run(&mut autoscaler, &cloud, &cluster, now);
    }
    assert!(calls(&log, "kube.evict").is_empty(), "nothing is evicted");
    assert!(
        calls(&log, "cloud.delete_nodes").is_empty(),
        "nothing is deleted"
    );
    let n1 = cluster.node("n1").expect("n1");
    assert!(
        !n1.has_taint(ferroscale_model::taints::TO_BE_DELETED),
        "the taint is rolled back"
    );
    assert!(!n1.unschedulable, "the node is uncordoned");
    assert!(!cluster.events_with(reasons::SCALE_DOWN_FAILED).is_empty());
}

/// A node whose cloud deletion failed is rolled back and then left alone for
/// --unremovable-node-recheck-timeout (5 m), instead of being tainted and drained again every loop.
///
/// Checks docs/behaviour.md SD-92.
#[test]
fn a_failed_cloud_deletion_is_not_retried_every_loop() {
    let (log, cloud, cluster) = cluster_with_one_node();
    cluster.add_pod(pod_on("base", "n0", 3000));
    let spare = node("n1", 4000, 16 << 30);
    cloud.add_instance("pool", &spare);
    cluster.add_node(spare);
    *cloud.group("pool").fail_delete.lock().expect("lock") = true;
    let mut options = AutoscalingOptions::default();
    options.set("scale-down-unneeded-time", "0s").expect("flag");
    let mut autoscaler = Autoscaler::new(options, 5);

    let start = t(20_000);
    let mut now = start;
    let mut first_failure = None;
    while now.since(start) < Duration::from_secs(4 * 60) {
        let outcome = run(&mut autoscaler, &cloud, &cluster, now);
        if first_failure.is_none() && !outcome.failed_deletions.is_empty() {
            first_failure = Some(now);
        }
        now = now + Duration::from_secs(10);
    }
    let first_failure = first_failure.expect("the empty node's deletion was attempted and failed");
    assert!(first_failure.since(start) < Duration::from_secs(60));
    // One attempt in these four minutes, not one per loop.
    assert_eq!(calls(&log, "cloud.delete_nodes").len(), 1);
    assert_eq!(
        calls(&log, "kube.taint n1 ToBeDeletedByClusterAutoscaler").len(),
        1
    );
    assert!(
        !cluster
            .node("n1")
            .expect("n1")
            .has_taint(ferroscale_model::taints::TO_BE_DELETED)
    );

    // After the recheck timeout the node is considered again.
    while now.since(first_failure) < Duration::from_secs(7 * 60) {
        run(&mut autoscaler, &cloud, &cluster, now);
        now = now + Duration::from_secs(10);
    }
    assert!(calls(&log, "cloud.delete_nodes").len() >= 2);
}

/// A refused cloud deletion starts --scale-down-delay-after-failure (3 m): the next node is not
/// drained until it has passed.
///
/// Checks docs/behaviour.md SD-101.
#[test]
fn a_failed_cloud_deletion_pauses_draining_other_nodes() {
    let (log, cloud, cluster) = cluster_with_one_node();
    cluster.add_pod(pod_on("base", "n0", 2000));
    for name in ["n1", "n2"] {
        let n = node(name, 4000, 16 << 30);
        cloud.add_instance("pool", &n);
        cluster.add_node(n);
        cluster.add_pod(pod_on(&format!("web-{name}"), name, 500));
    }
    cluster
        .state()
        .controllers
        .push(ferroscale_core::kubernetes::WorkloadController {
            kind: "ReplicaSet".into(),
            namespace: "default".into(),
            name: "web".into(),
            uid: "uid-rs-web".into(),
            replicas: Some(3),
        });
    *cloud.group("pool").fail_delete.lock().expect("lock") = true;
    let mut options = AutoscalingOptions::default();
    options.set("scale-down-unneeded-time", "0s").expect("flag");
    let mut autoscaler = Autoscaler::new(options, 9);

    let start = t(30_000);
    let mut now = start;
    let mut first_failure = None;
    while first_failure.is_none() && now.since(start) < Duration::from_secs(120) {
        let outcome = run(&mut autoscaler, &cloud, &cluster, now);
        if !outcome.failed_deletions.is_empty() {
            first_failure = Some(now);
        }
        now = now + Duration::from_secs(10);
    }
    let first_failure = first_failure.expect("a drained node's deletion failed");
    while now.since(first_failure) < Duration::from_secs(170) {
        run(&mut autoscaler, &cloud, &cluster, now);
        now = now + Duration::from_secs(10);
    }
    let deletion_taints = |log: &CallLog| {
        calls(log, "kube.taint")
            .into_iter()
            .filter(|c| c.contains("ToBeDeletedByClusterAutoscaler"))
            .count()
    };
    assert_eq!(
        deletion_taints(&log),
        1,
        "no other node is drained during the cooldown"
    );
}

/// A node the provider vetoes (Cluster API: its MachineDeployment is rolling out) is never unneeded
/// nor deleted while the veto lasts; once lifted, the empty node goes as usual.
///
/// Checks docs/behaviour.md SD-115.
#[test]
fn a_node_the_provider_vetoes_is_kept_out_of_scale_down_until_the_veto_is_lifted() {
    let (log, cloud, cluster) = cluster_with_one_node();
    cluster.add_pod(pod_on("base", "n0", 3000));
    let spare = node("n1", 4000, 16 << 30);
    cloud.add_instance("pool", &spare);
    cluster.add_node(spare);
    cloud.vetoed.lock().expect("lock").insert("n1".into());
    let mut options = AutoscalingOptions::default();
    options.set("scale-down-unneeded-time", "0s").expect("flag");
    options
        .set("scale-down-delay-after-add", "0s")
        .expect("flag");
    let mut autoscaler = Autoscaler::new(options, 5);

    let mut now = t(20_000);
    for _ in 0..6 {
        let outcome = run(&mut autoscaler, &cloud, &cluster, now);
        let unneeded = outcome
            .scale_down
            .as_ref()
            .map(|plan| plan.unneeded.iter().any(|u| u.node == "n1"))
            .unwrap_or(false);
        assert!(!unneeded, "a vetoed node is never unneeded");
        now = now + Duration::from_secs(10);
    }
    assert!(calls(&log, "cloud.delete_nodes").is_empty());
    assert!(
        !cluster
            .node("n1")
            .expect("n1")
            .has_taint(ferroscale_model::taints::TO_BE_DELETED)
    );

    cloud.vetoed.lock().expect("lock").clear();
    for _ in 0..6 {
        run(&mut autoscaler, &cloud, &cluster, now);
        now = now + Duration::from_secs(10);
    }
    assert_eq!(
        calls(&log, "cloud.delete_nodes"),
        vec!["cloud.delete_nodes pool n1"],
        "the empty node goes once the veto is lifted"
    );
}

/// docs/behaviour.md LOOP-121: while Gather reads a view that may be behind the cluster (a watch
/// of the live binary fails or re-lists), no node is tainted or removed, however long the node
/// has looked unneeded; once the view is current again, the node must look unneeded for a whole
/// `--scale-down-unneeded-time` before it goes.
#[test]
fn no_scale_down_while_the_view_may_be_behind_and_the_unneeded_time_starts_over() {
    let (log, cloud, cluster) = cluster_with_one_node();
    let spare = node("spare", 4000, 16 << 30);
    cloud.add_instance("pool", &spare);
    cluster.add_node(spare);
    cluster.add_pod(pod_on("base", "n0", 3500));
    let mut options = AutoscalingOptions::default();
    options
        .set("scale-down-unneeded-time", "60s")
        .expect("flag");
    options
        .set("scale-down-delay-after-add", "0s")
        .expect("flag");
    let mut autoscaler = Autoscaler::new(options, 7);

    // "spare" is unneeded for 50 s, then the pod watch starts failing for five minutes.
    let mut now = t(1_000);
    for _ in 0..6 {
        run(&mut autoscaler, &cloud, &cluster, now);
        now = now + Duration::from_secs(10);
    }
    cluster.state().behind = vec!["Pod: watch failing: 503".into()];
    for _ in 0..30 {
        let outcome = run(&mut autoscaler, &cloud, &cluster, now);
        assert_eq!(outcome.caches_behind, vec!["Pod: watch failing: 503"]);
        assert!(
            outcome.scale_down.is_none(),
            "no scale-down plan on a stale view"
        );
        now = now + Duration::from_secs(10);
    }
    assert!(
        calls(&log, "kube.taint spare ToBeDeleted").is_empty(),
        "{:?}",
        calls(&log, "kube.taint")
    );
    assert!(calls(&log, "cloud.delete_nodes").is_empty());

    // Current again: not removed at once, but after a full unneeded time.
    cluster.state().behind.clear();
    let back = now;
    let mut deleted_at = None;
    for _ in 0..30 {
        let outcome = run(&mut autoscaler, &cloud, &cluster, now);
        if !outcome.deleted_nodes.is_empty() {
            deleted_at = Some(now);
            break;
        }
        now = now + Duration::from_secs(10);
    }
    let deleted_at = deleted_at.expect("the spare node is removed once the view is current");
    assert!(
        deleted_at.since(back) >= Duration::from_secs(60),
        "removed {:?} after the view was current again",
        deleted_at.since(back)
    );
    assert_eq!(
        calls(&log, "cloud.delete_nodes"),
        vec!["cloud.delete_nodes pool spare"]
    );
}

/// The provider's refresh, a call out of the process, is timed under upstream's
/// `cloudProviderRefresh` label and kept out of Decide's total (docs/operations.md,
/// `function_duration_seconds`).
#[test]
fn the_refresh_is_timed_under_its_own_label_and_not_as_decide() {
    /// Advances a millisecond at each reading.
    struct Ticking(std::cell::Cell<f64>);
    impl ferroscale_core::stopwatch::Stopwatch for Ticking {
        fn elapsed_millis(&self) -> f64 {
            let now = self.0.get() + 1.0;
            self.0.set(now);
            now
        }
    }
    let (_log, cloud, cluster) = cluster_with_one_node();
    cluster.add_pod(pod_on("base", "n0", 3500));
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 7);
    let outcome = futures::executor::block_on(autoscaler.run_once(
        &cloud,
        &cluster,
        t(100),
        &Ticking(std::cell::Cell::new(0.0)),
    ));
    let millis = |label: &str| {
        outcome
            .function_millis
            .iter()
            .find(|(function, _)| *function == label)
            .map(|(_, millis)| *millis)
    };
    assert_eq!(millis("cloudProviderRefresh"), Some(1.0));
    let decide: f64 = outcome
        .function_millis
        .iter()
        .filter(|(function, _)| *function != "cloudProviderRefresh")
        .map(|(_, millis)| millis)
        .sum();
    assert_eq!(outcome.decide_millis, decide);
}
