//! Leader election against a real API server: of two candidates one leads; the other takes over
//! once the leader stops renewing; a leader whose lease is taken notices and gives up.

use std::sync::Arc;
use std::time::Duration;

use ferroscale_kube::{LeaderElectionConfig, LeaderElectionError, LeaderElector};
use ferroscale_testing_control_plane::{ControlPlane, Options};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Generous for a loaded 2-core machine; the steps normally take a few seconds.
const WAIT_LIMIT: Duration = Duration::from_secs(60);

async fn client_for(control_plane: &ControlPlane) -> Client {
    let kubeconfig = Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client configuration");
    Client::try_from(config).expect("client")
}

/// Short durations so that a takeover happens within seconds.
fn candidate(client: &Client, identity: &str) -> Arc<LeaderElector> {
    let config = LeaderElectionConfig {
        identity: identity.to_string(),
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(300),
        ..LeaderElectionConfig::new("default")
    };
    Arc::new(LeaderElector::new(client.clone(), config))
}

async fn wait_for_leadership(elector: &LeaderElector) {
    tokio::time::timeout(WAIT_LIMIT, elector.acquire())
        .await
        .expect("the candidate never became leader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_candidate_leads_and_the_other_takes_over_when_it_stops() {
    let options = Options {
        scheduler: false,
        controller_manager: false,
        kwok: false,
        ..Options::default()
    };
    let control_plane = tokio::task::spawn_blocking(move || ControlPlane::start_with(options))
        .await
        .expect("start-up task")
        .expect("control plane");
    let client = client_for(&control_plane).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");

    // First: A takes the lease and holds it by renewing.
    let first = candidate(&client, "replica-a");
    let second = candidate(&client, "replica-b");
    let leading_first = {
        let first = Arc::clone(&first);
        tokio::spawn(async move { first.run_while_leader(std::future::pending::<()>()).await })
    };
    tokio::time::timeout(WAIT_LIMIT, async {
        while !first.is_leader() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the first candidate never became leader");
    let lease = leases.get("cluster-autoscaler").await.expect("lease");
    let spec = lease.spec.expect("lease spec");
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-a"));
    assert_eq!(spec.lease_duration_seconds, Some(3));

    // While A renews, B is refused, even well past one lease duration.
    for _ in 0..15 {
        assert!(
            !second.try_acquire_or_renew().await.expect("lease API"),
            "B took a lease that A keeps renewing"
        );
        assert!(first.is_leader());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // A stops (as a crashed process would: no release); B takes over once the lease expires.
    leading_first.abort();
    wait_for_leadership(&second).await;
    let spec = leases
        .get("cluster-autoscaler")
        .await
        .expect("lease")
        .spec
        .expect("lease spec");
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-b"));
    assert_eq!(spec.lease_transitions, Some(1));

    // B leads in run_while_leader; someone overwrites the lease (as a rival that won it would).
    // B must notice and report lost leadership rather than keep working.
    // The guarded work signals when it starts, i.e. once B has (re)acquired the lease and is
    // renewing it: only then is the lease taken away, otherwise B would merely wait to acquire.
    let (working_tx, working_rx) = tokio::sync::oneshot::channel::<()>();
    let leading_second = {
        let second = Arc::clone(&second);
        tokio::spawn(async move {
            second
                .run_while_leader(async move {
                    let _ = working_tx.send(());
                    std::future::pending::<()>().await
                })
                .await
        })
    };
    tokio::time::timeout(WAIT_LIMIT, working_rx)
        .await
        .expect("B started working as leader")
        .expect("B's work signalled");
    let mut lease = leases.get("cluster-autoscaler").await.expect("lease");
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = Some("usurper".to_string());
        spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        spec.lease_duration_seconds = Some(60);
    }
    // Retried: B's renewals race with this write.
    tokio::time::timeout(WAIT_LIMIT, async {
        loop {
            match leases
                .replace("cluster-autoscaler", &PostParams::default(), &lease)
                .await
            {
                Ok(_) => break,
                Err(_) => {
                    lease = leases.get("cluster-autoscaler").await.expect("lease");
                    if let Some(spec) = lease.spec.as_mut() {
                        spec.holder_identity = Some("usurper".to_string());
                        spec.lease_duration_seconds = Some(60);
                    }
                }
            }
        }
    })
    .await
    .expect("could not overwrite the lease");
    let outcome = tokio::time::timeout(WAIT_LIMIT, leading_second)
        .await
        .expect("B never noticed it lost the lease")
        .expect("B's task");
    assert!(
        matches!(outcome, Err(LeaderElectionError::Lost { .. })),
        "expected lost leadership, got {outcome:?}"
    );
    assert!(!second.is_leader());
    // And the usurper's fresh lease keeps B out.
    assert!(!second.try_acquire_or_renew().await.expect("lease API"));
}
