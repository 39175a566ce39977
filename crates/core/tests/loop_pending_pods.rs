//! Pending pods the scheduler has not bound yet (it is stopped, slow or behind a burst) count where
//! the scale-up simulation placed them: the nodes they will land on are used, not unneeded, so a
//! node created for them is neither soft-tainted nor removed while they wait.

mod loop_fakes;

use std::time::Duration;

use ferroscale_core::autoscaler::Autoscaler;
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::taints::DELETION_CANDIDATE;
use loop_fakes::*;

/// A full node `n0` in group `pool` (0..10, 4-core nodes) and four pending pods of 3 CPU that
/// need a node each.
fn burst_on_a_full_cluster() -> (CallLog, FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("pool", 0, 10);
    let cluster = FakeCluster::new(log.clone());
    let n0 = node("n0", 4000, 16 << 30);
    cloud.add_instance("pool", &n0);
    cluster.add_node(n0);
    cluster.add_pod(pod_on("base", "n0", 3500));
    for i in 0..4 {
        cluster.add_pod(pending_pod(&format!("burst-{i}"), 3000, t(0)));
    }
    (log, cloud, cluster)
}

/// With the scheduler stopped, the four nodes created for the burst stay: the pods that fit on
/// them keep them in use every loop, far past the scale-up cooldown and the unneeded time, so no
/// node is soft-tainted, deleted or created again.
#[test]
fn nodes_that_pending_pods_fit_on_are_not_unneeded_while_the_scheduler_is_stopped() {
    let (log, cloud, cluster) = burst_on_a_full_cluster();
    let options = AutoscalingOptions::default();
    let quiet_for = options.scale_down_delay_after_add + options.scale_down_unneeded_time * 2;
    let mut autoscaler = Autoscaler::new(options, 3);

    let mut now = t(100);
    run(&mut autoscaler, &cloud, &cluster, now);
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 4"]
    );

    // The cloud brings the four nodes up a minute later; nothing binds the pods.
    now = now + Duration::from_secs(60);
    for i in 0..4 {
        let mut fresh = node(&format!("new-{i}"), 4000, 16 << 30);
        fresh.creation_time = now;
        cloud.add_instance("pool", &fresh);
        cluster.add_node(fresh);
    }

    let until = now + quiet_for;
    while now < until {
        now = now + Duration::from_secs(10);
        let outcome = run(&mut autoscaler, &cloud, &cluster, now);
        let plan = outcome.scale_down.as_ref().expect("scale-down ran");
        assert!(
            plan.unneeded.is_empty(),
            "no node is unneeded at {now:?}: {:?}",
            plan.unneeded
        );
        let scale_up = outcome.scale_up.as_ref().expect("scale-up ran");
        assert_eq!(
            scale_up.pods_schedulable_on_existing.len(),
            4,
            "the burst fits the new nodes"
        );
    }
    for i in 0..4 {
        let name = format!("new-{i}");
        let new = cluster.node(&name).expect("new node");
        assert!(
            !new.has_taint(DELETION_CANDIDATE),
            "{name} is not a deletion candidate"
        );
    }
    assert!(
        calls(&log, "kube.taint").is_empty(),
        "{:?}",
        calls(&log, "")
    );
    assert!(calls(&log, "cloud.delete_nodes").is_empty());
    assert_eq!(
        calls(&log, "cloud.increase_size").len(),
        1,
        "one scale-up only"
    );
}

/// The pods count only where they fit: a node they do not need is still found unneeded and
/// removed, scheduler or not.
#[test]
fn a_node_the_pending_pods_do_not_need_is_still_removed() {
    let (log, cloud, cluster) = burst_on_a_full_cluster();
    let options = AutoscalingOptions::default();
    let quiet_for = options.scale_down_delay_after_add + options.scale_down_unneeded_time * 2;
    let mut autoscaler = Autoscaler::new(options, 3);
    let mut now = t(100);
    run(&mut autoscaler, &cloud, &cluster, now);

    // The cloud brings up one node more than the burst needs (another client raised the
    // target, say).
    now = now + Duration::from_secs(60);
    for i in 0..5 {
        let mut fresh = node(&format!("new-{i}"), 4000, 16 << 30);
        fresh.creation_time = now;
        cloud.add_instance("pool", &fresh);
        cluster.add_node(fresh);
    }
    let until = now + quiet_for;
    while now < until && calls(&log, "cloud.delete_nodes").is_empty() {
        now = now + Duration::from_secs(10);
        run(&mut autoscaler, &cloud, &cluster, now);
    }
    let deleted = calls(&log, "cloud.delete_nodes");
    assert_eq!(deleted.len(), 1, "{:?}", calls(&log, ""));
    assert!(
        deleted[0].starts_with("cloud.delete_nodes pool new-"),
        "{deleted:?}"
    );
}
