//! `ferroscale run --cloud-provider=exoscale` end to end: the binary signs its calls to a local
//! fake of the Exoscale API (which checks every signature), and a mirror task plays the part of
//! Exoscale's instances joining the cluster: every running member of the fake's Instance Pool is
//! a kwok Node with provider id `exoscale://<instance id>`, and a member that goes loses its Node.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ferroscale_testing_exoscale::{Credentials, Endpoint, FakeExoscale};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;

use crate::harness::{App, Cluster, TO_BE_DELETED, has_taint, wait_until};
use crate::{QUICK_SCALE_DOWN, wait_for_first_status};

const MIRROR_LABEL: &str = "exoscale-pool";

/// Keeps one kwok Node per running member of `pool`, and none for members that are gone.
pub(crate) fn mirror_pool_members(
    fake: &Arc<FakeExoscale>,
    pool: &str,
    client: Client,
) -> JoinHandle<()> {
    let fake = Arc::clone(fake);
    let pool = pool.to_string();
    tokio::spawn(async move {
        let nodes: Api<Node> = Api::all(client);
        loop {
            let members: BTreeSet<String> = fake
                .members(&pool)
                .into_iter()
                .filter(|(_, state)| state == "running")
                .map(|(id, _)| id)
                .collect();
            let listed = nodes
                .list(&ListParams::default().labels(&format!("{MIRROR_LABEL}={pool}")))
                .await
                .map(|list| list.items)
                .unwrap_or_default();
            let existing: BTreeSet<String> = listed.iter().map(|n| n.name_any()).collect();
            for id in members.difference(&existing) {
                let _ = nodes
                    .create(&PostParams::default(), &member_node(&pool, id))
                    .await;
            }
            for name in existing.difference(&members) {
                let _ = nodes.delete(name, &DeleteParams::default()).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// A 4-CPU kwok Node for instance `id`, named after it.
fn member_node(pool: &str, id: &str) -> Node {
    let resources = BTreeMap::from([
        ("cpu".to_string(), Quantity("4".to_string())),
        ("memory".to_string(), Quantity("16Gi".to_string())),
        ("pods".to_string(), Quantity("110".to_string())),
    ]);
    Node {
        metadata: ObjectMeta {
            name: Some(id.to_string()),
            labels: Some(BTreeMap::from([
                ("pool".to_string(), "general".to_string()),
                (MIRROR_LABEL.to_string(), pool.to_string()),
            ])),
            annotations: Some(BTreeMap::from([(
                "kwok.x-k8s.io/node".to_string(),
                "fake".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("exoscale://{id}")),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            ..NodeStatus::default()
        }),
    }
}

/// Pending pods grow the Instance Pool through the signed scale call (the fake refuses any
/// badly signed request), the new members join as Nodes and the pods run; once the pods go,
/// Ferroscale evicts exactly the members behind the nodes it chose, down to the `--nodes`
/// minimum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exoscale_grows_an_instance_pool_and_evicts_exactly_the_chosen_members() {
    let cluster = Cluster::start().await;
    let fake = Arc::new(FakeExoscale::start(Credentials::new("EXOtestkey", "test-secret")).await);
    let pool = fake.add_instance_pool("workers", 1);
    let _mirror = AbortOnDrop(mirror_pool_members(&fake, &pool, cluster.client.clone()));
    cluster.wait_pool_ready(1).await;

    let endpoint = fake.base_url();
    let mut flags = QUICK_SCALE_DOWN.to_vec();
    flags.extend(["--cloud-provider=exoscale", "--nodes=1:3:workers"]);
    let autoscaler = cluster.start_autoscaler_with_env(
        "exoscale",
        &flags,
        "info,ferroscale=debug,ferroscale_provider_exoscale=debug",
        &[
            ("EXOSCALE_API_KEY", "EXOtestkey"),
            ("EXOSCALE_API_SECRET", "test-secret"),
            ("EXOSCALE_ZONE", "ch-gva-2"),
            ("EXOSCALE_API_ENDPOINT", &endpoint),
        ],
    );
    wait_for_first_status(&cluster).await;

    cluster.create_app(App::new("web", 3, "3")).await;
    cluster.wait_running("web", 3).await;
    assert_eq!(
        fake.pool_size_and_state(&pool).map(|(size, _)| size),
        Some(3),
        "{}",
        autoscaler.log()
    );
    let scale_bodies: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with(":scale"))
        .map(|r| r.body)
        .collect();
    assert!(
        scale_bodies.iter().any(|b| b == r#"{"size":3}"#) || scale_bodies.len() > 1,
        "scale requests: {scale_bodies:?}"
    );
    let grown: BTreeSet<String> = fake.members(&pool).into_iter().map(|(id, _)| id).collect();

    cluster.delete_app("web").await;
    let mut chosen = BTreeSet::new();
    wait_until("the pool back at its --nodes minimum of 1", async || {
        for node in cluster.pool_nodes().await {
            if has_taint(&node, TO_BE_DELETED) {
                chosen.insert(node.name_any());
            }
        }
        fake.pool_size_and_state(&pool).map(|(size, _)| size) == Some(1)
            && cluster.pool_nodes().await.len() == 1
    })
    .await;
    // A taint can come and go between two looks; the Events stay.
    chosen.extend(cluster.nodes_scaled_down().await);
    let survivors: BTreeSet<String> = fake.members(&pool).into_iter().map(|(id, _)| id).collect();
    let evicted: BTreeSet<String> = grown.difference(&survivors).cloned().collect();
    assert_eq!(evicted.len(), 2, "{}", autoscaler.log());
    assert!(
        evicted.is_subset(&chosen) && survivors.is_disjoint(&chosen),
        "evicted {evicted:?}, chosen {chosen:?}\n{}",
        autoscaler.log()
    );
    assert!(fake.count(Endpoint::EvictInstancePoolMembers) >= 1);
    assert!(
        !autoscaler.log().contains("test-secret"),
        "the API secret must never be logged"
    );
}

pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
