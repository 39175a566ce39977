//! Stopping `ferroscale run` as Kubernetes does (SIGTERM, then SIGKILL after the grace period)
//! with leader election on, as deployed: the leader deletes its status ConfigMap and sends the
//! provider's Cleanup before it exits; a standby, or a replica that lost the Lease, exits without
//! touching either, since they belong to the leader.
//!
//! The provider is `serve-provider --cloud-provider=kwok` over externalgrpc, whose log has one
//! line per call received: that log is what the tests read to know whether Cleanup arrived.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff;
use kube::api::{Api, PostParams};

use crate::harness::{self, App, Autoscaler, Cluster, wait_until};
use crate::wait_for_first_status;

/// Short lease timings so that a lost Lease is noticed within seconds.
const ELECTION: [&str; 4] = [
    "--leader-elect=true",
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
];

/// How many Cleanup calls the externalgrpc server has received.
fn cleanup_calls(server: &Autoscaler) -> usize {
    server
        .log()
        .lines()
        .filter(|line| line.contains("externalgrpc call") && line.contains("\"Cleanup\""))
        .count()
}

/// Starts a replica of `run --cloud-provider=externalgrpc` with leader election.
fn start_replica(cluster: &Cluster, name: &str, cloud_config: &str) -> Autoscaler {
    let mut flags = ELECTION.to_vec();
    flags.extend(["--cloud-provider=externalgrpc", cloud_config]);
    cluster.start_autoscaler(name, &flags)
}

async fn lease_holder(cluster: &Cluster) -> Option<String> {
    Api::<Lease>::namespaced(cluster.client.clone(), harness::NAMESPACE)
        .get_opt("cluster-autoscaler")
        .await
        .expect("read the Lease")
        .and_then(|lease| lease.spec?.holder_identity)
        .filter(|holder| !holder.is_empty())
}

/// Makes `holder` the Lease's holder for an hour, retrying when a renewal of the current holder
/// comes in between the read and the write.
async fn take_the_lease_over(cluster: &Cluster, holder: &str) {
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), harness::NAMESPACE);
    wait_until("the Lease to be taken over", async || {
        let mut lease = leases.get("cluster-autoscaler").await.expect("the Lease");
        let spec = lease.spec.get_or_insert_default();
        spec.holder_identity = Some(holder.to_string());
        spec.lease_duration_seconds = Some(3600);
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        match leases
            .replace("cluster-autoscaler", &PostParams::default(), &lease)
            .await
        {
            Ok(_) => true,
            Err(kube::Error::Api(status)) if status.is_conflict() => false,
            Err(error) => panic!("replace the Lease: {error}"),
        }
    })
    .await;
}

/// The leader stopped by SIGTERM calls Cleanup on its externalgrpc server (exactly once) and
/// deletes its status ConfigMap, then exits successfully before the grace period is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_leader_sends_cleanup_and_deletes_its_status() {
    let cluster = Cluster::start().await;
    let (server, cloud_config) = cluster.start_provider_server("provider-server");
    let cloud_config = format!("--cloud-config={}", cloud_config.display());
    let mut leader = start_replica(&cluster, "leader", &cloud_config);
    wait_for_first_status(&cluster).await;
    assert_eq!(cleanup_calls(&server), 0, "no Cleanup while running");

    let status = tokio::task::block_in_place(|| leader.terminate());
    assert!(
        status.is_some_and(|status| status.success()),
        "the leader exits successfully within the grace period: {status:?}\n{}",
        leader.log()
    );
    assert_eq!(
        cleanup_calls(&server),
        1,
        "the server received one Cleanup; its log:\n{}\nthe autoscaler's log:\n{}",
        server.log(),
        leader.log()
    );
    assert_eq!(
        cluster.status().await,
        None,
        "the status ConfigMap is deleted"
    );
    assert_eq!(
        lease_holder(&cluster).await,
        None,
        "the Lease is released for the next leader"
    );
}

/// A signal that arrives while an iteration runs is not lost: the iteration finishes, then the
/// leader cleans up and exits within the grace period, although the next iteration is an hour
/// away. The iteration is held up by stopping the provider's server (SIGSTOP) just before a new
/// unschedulable pod, which no scale-up can help, wakes the loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_during_an_iteration_still_ends_in_cleanup() {
    let cluster = Cluster::start().await;
    let (server, cloud_config) = cluster.start_provider_server("provider-server");
    let cloud_config = format!("--cloud-config={}", cloud_config.display());
    let mut flags = ELECTION.to_vec();
    flags.extend([
        "--cloud-provider=externalgrpc",
        &cloud_config,
        "--scan-interval=1h",
    ]);
    let mut leader = cluster.start_autoscaler("leader", &flags);
    wait_for_first_status(&cluster).await;

    server.signal(libc::SIGSTOP);
    // Bigger than any node of the group: the iteration it starts cannot act (an iteration
    // that acts is followed at once by the next, which would notice the signal anyway).
    cluster.create_app(App::new("waker", 1, "100")).await;
    wait_until("the new pod to wake the loop", async || {
        leader.log().contains("a new unschedulable pod")
    })
    .await;
    // Past the batching window: the iteration waits for the stopped server.
    tokio::time::sleep(Duration::from_secs(2)).await;
    leader.signal(libc::SIGTERM);
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.signal(libc::SIGCONT);

    let status = tokio::task::block_in_place(|| leader.wait_for_exit());
    assert!(
        status.is_some_and(|status| status.success()),
        "the leader exits successfully within the grace period: {status:?}\n{}",
        leader.log()
    );
    assert_eq!(
        cleanup_calls(&server),
        1,
        "the server received one Cleanup; the autoscaler's log:\n{}",
        leader.log()
    );
}

/// Two replicas share one externalgrpc server. The standby gets SIGTERM (a rolling update): it
/// exits, the leader's status ConfigMap stays, the server receives no Cleanup and the leader
/// keeps the Lease. Then the leader loses its Lease to another holder: it exits with an error, and
/// still neither deletes the status nor calls Cleanup — both belong to the new holder now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_without_the_lease_stop_without_side_effects() {
    let cluster = Cluster::start().await;
    let (server, cloud_config) = cluster.start_provider_server("provider-server");
    let cloud_config = format!("--cloud-config={}", cloud_config.display());
    let mut replicas = [
        start_replica(&cluster, "replica-0", &cloud_config),
        start_replica(&cluster, "replica-1", &cloud_config),
    ];
    wait_for_first_status(&cluster).await;
    let holder = lease_holder(&cluster)
        .await
        .expect("a replica holds the Lease");
    // Each replica logs its identity when it starts waiting for leadership.
    let leader = replicas
        .iter()
        .position(|replica| replica.log().contains(&holder))
        .unwrap_or_else(|| panic!("no replica logged the holder's identity {holder}"));
    let [first, second] = &mut replicas;
    let (leader, standby) = if leader == 0 {
        (first, second)
    } else {
        (second, first)
    };

    let status = tokio::task::block_in_place(|| standby.terminate());
    assert!(
        status.is_some_and(|status| status.success()),
        "the standby exits successfully within the grace period: {status:?}\n{}",
        standby.log()
    );
    assert!(
        cluster.status().await.is_some(),
        "the leader's status ConfigMap is still there; the standby's log:\n{}",
        standby.log()
    );
    assert_eq!(
        cleanup_calls(&server),
        0,
        "no Cleanup from the standby; the standby's log:\n{}",
        standby.log()
    );
    assert!(leader.is_running());
    assert_eq!(
        lease_holder(&cluster).await.as_deref(),
        Some(holder.as_str())
    );

    // Another holder takes the Lease over (as a new leader would after a partition).
    take_the_lease_over(&cluster, "another-replica").await;
    wait_until("the former leader to exit", async || !leader.is_running()).await;
    assert!(
        leader.log().contains("lost leadership"),
        "the former leader says why it stopped:\n{}",
        leader.log()
    );
    assert!(
        cluster.status().await.is_some(),
        "the status ConfigMap is the new holder's; the former leader's log:\n{}",
        leader.log()
    );
    assert_eq!(
        cleanup_calls(&server),
        0,
        "no Cleanup from a replica that lost the Lease; its log:\n{}",
        leader.log()
    );
}
