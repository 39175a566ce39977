//! A whole scale-up then scale-down cycle through `Autoscaler::run_once` over many iterations
//! with advancing `now`, against recording fakes of the cloud and the Kubernetes API.

mod loop_fakes;

use std::time::Duration;

use ferroscale_core::autoscaler::{Autoscaler, LoopOutcome, NoStopwatch};
use ferroscale_core::events::reasons;
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::{ConditionStatus, Pod, PodCondition, Resources, Timestamp};
use futures::executor::block_on;
use loop_fakes::*;

fn run(
    autoscaler: &mut Autoscaler,
    cloud: &FakeCloud,
    cluster: &FakeCluster,
    now: Timestamp,
) -> LoopOutcome {
    block_on(autoscaler.run_once(cloud, cluster, now, &NoStopwatch))
}

fn pending_pod(name: &str, cpu_milli: i64, created: Timestamp) -> Pod {
    let mut pod = pod_on(name, "x", cpu_milli);
    pod.node_name = None;
    pod.phase = ferroscale_model::PodPhase::Pending;
    pod.creation_time = created;
    pod.requests = Resources::new(cpu_milli, 1 << 30);
    pod.scheduled_condition = Some(PodCondition {
        status: ConditionStatus::False,
        reason: "Unschedulable".into(),
        last_transition: Some(created),
    });
    pod
}

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
    run(&mut autoscaler, &cloud, &cluster, now);
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
    run(&mut autoscaler, &cloud, &cluster, now);

    // The burst ends; the new node is empty and, after the cooldowns, removed.
    cluster.state().pods.remove("default/burst");
    let mut deleted_at = None;
    for _ in 0..200 {
        now = now + Duration::from_secs(10);
        let outcome = run(&mut autoscaler, &cloud, &cluster, now);
        if !outcome.deleted_nodes.is_empty() {
            deleted_at = Some(now);
            break;
        }
    }
    let deleted_at = deleted_at.expect("the empty node is eventually deleted");
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
