//! Pending pods that the scheduler has not bound yet keep the nodes created for them: with
//! kube-scheduler stopped after it marked a burst unschedulable, `ferroscale run` creates the
//! nodes the burst needs and then leaves them alone, however short the unneeded time.

use std::time::Duration;

use ferroscale_model::taints::DELETION_CANDIDATE;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;

use crate::harness::{App, Cluster, TO_BE_DELETED, has_taint, is_marked_unschedulable, wait_until};
use crate::{QUICK_SCALE_DOWN, wait_for_first_status};

/// How long the new nodes are watched: several scan intervals (2 s) and unneeded times (5 s),
/// enough for a node wrongly found empty to be soft-tainted, tainted and deleted.
const WATCH_FOR: Duration = Duration::from_secs(25);

/// Whether every pod of `app` is pending with the scheduler's `Unschedulable` verdict.
fn all_unschedulable(pods: &[Pod], replicas: usize) -> bool {
    pods.len() == replicas
        && pods.iter().all(|pod| {
            pod.spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_none()
                && is_marked_unschedulable(pod)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_for_pods_the_stopped_scheduler_never_binds_are_kept() {
    let cluster = Cluster::start().await;
    // Four pods of 3 CPU: one per 4-CPU node of the kwok group, which starts empty.
    cluster.create_app(App::new("burst", 4, "3")).await;
    let selector = ListParams::default().labels("app=burst");
    wait_until(
        "the scheduler to mark the burst unschedulable",
        async || {
            let pods = cluster.pods().list(&selector).await.expect("list pods");
            all_unschedulable(&pods.items, 4)
        },
    )
    .await;
    let control_plane = &cluster.control_plane;
    tokio::task::block_in_place(|| control_plane.stop_scheduler()).expect("stop kube-scheduler");

    let autoscaler = cluster.start_autoscaler("main", QUICK_SCALE_DOWN);
    wait_for_first_status(&cluster).await;
    let nodes = cluster.wait_pool_ready(4).await;

    let watch_until = tokio::time::Instant::now() + WATCH_FOR;
    while tokio::time::Instant::now() < watch_until {
        let pool = cluster.pool_nodes().await;
        let names: Vec<String> = pool
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        assert_eq!(names, nodes, "the four nodes stay, and no other is made");
        for node in &pool {
            for taint in [DELETION_CANDIDATE, TO_BE_DELETED] {
                assert!(
                    !has_taint(node, taint),
                    "{:?} carries {taint} while pods that fit it wait for the scheduler",
                    node.metadata.name
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let pods = cluster.pods().list(&selector).await.expect("list pods");
    assert!(
        all_unschedulable(&pods.items, 4),
        "the scheduler stayed stopped: no pod was bound"
    );
    assert_eq!(
        autoscaler.metric_sum("cluster_autoscaler_scaled_up_nodes_total"),
        4.0,
        "exactly the nodes the burst needs"
    );
    assert_eq!(
        autoscaler.metric_sum("cluster_autoscaler_scaled_down_nodes_total"),
        0.0
    );
    assert!(cluster.nodes_scaled_down().await.is_empty());
}
