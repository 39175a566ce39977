//! The set-up every fault test shares: the live harness's control plane with Ferroscale's
//! manifests, the kwok provider served over externalgrpc from this test process through a
//! [`FaultyProvider`] (so the cloud outlives any replica, as a real cloud does, and its faults
//! are switched from the test), and `ferroscale run` replicas, each with its own client
//! certificate (`CN=replica-N`, which the provider's call log records) and its own fault proxy
//! in front of the API server (so one replica can lose the API server while another keeps it).
//! [`Invariants`] watches the whole time.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_core::cloud::CloudProvider;
use ferroscale_externalgrpc_sdk::MutualTls;
use ferroscale_provider_kwok::{ConfigSource, DEFAULT_CONFIGMAP, KwokProvider};
use ferroscale_testing_faults::api_proxy::{ApiProxy, ProxyConfig};
use ferroscale_testing_faults::provider::{
    CallResult, ClientTls, Fault, FaultyProvider, Injection, Method, ServedProvider,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use crate::harness::{App, Autoscaler, Cluster, NAMESPACE, wait_until};
use crate::invariants::Invariants;

/// The deadline of every externalgrpc call (the SDK gives the provider 90 % of it).
pub const GRPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Leader election fast enough for a test: a standby takes over 6 s after the leader's last
/// renewal at the latest; a leader that cannot renew stops after 4 s.
pub const ELECTION: &[&str] = &[
    "--leader-elect=true",
    "--leader-elect-lease-duration=6s",
    "--leader-elect-renew-deadline=4s",
    "--leader-elect-retry-period=1s",
];

/// Short timings so that a scale-down happens within seconds; everything else keeps upstream
/// defaults.
pub const QUICK_SCALE_DOWN: &[&str] = &[
    "--scale-down-unneeded-time=5s",
    "--scale-down-delay-after-add=0s",
    "--scale-down-delay-after-delete=0s",
    "--scale-down-delay-after-failure=5s",
    "--node-delete-delay-after-taint=2s",
];

/// What a rig is started with.
pub struct RigOptions<'a> {
    /// How many `ferroscale run` replicas (leader election is on for any number).
    pub replicas: usize,
    /// Flags after the rig's own (a later flag wins).
    pub flags: &'a [&'a str],
    /// Flags for `replica-0` only, after `flags`. `replica-0` starts first and the others once it
    /// leads, so it is the first leader.
    pub first_leader_flags: &'a [&'a str],
    /// Bounds of the kwok group `general` (4 CPU nodes).
    pub pool_min: usize,
    pub pool_max: usize,
}

impl Default for RigOptions<'_> {
    fn default() -> Self {
        RigOptions {
            replicas: 1,
            flags: &[],
            first_leader_flags: &[],
            pool_min: 0,
            pool_max: 20,
        }
    }
}

/// One `ferroscale run` replica and what it connects through.
pub struct Replica {
    /// `replica-N`: the common name of its client certificate and the host name its Lease
    /// identity starts with.
    pub name: String,
    /// Between this replica and the API server.
    pub proxy: ApiProxy,
    /// The running process; `None` once killed.
    pub process: Option<Autoscaler>,
    /// Processes started for this replica so far (restarts get a log of their own).
    pub starts: usize,
    kubeconfig: PathBuf,
    cloud_config: PathBuf,
}

/// The control plane, the served provider, the replicas and the invariants' watch. (Fields drop
/// in order: the processes go first, while the directory with their logs still exists.)
pub struct Rig {
    pub replicas: Vec<Replica>,
    /// Killed processes, kept so that a failing test prints their logs too.
    retired: Vec<Autoscaler>,
    pub invariants: Invariants,
    pub served: ServedProvider,
    pub provider: Arc<FaultyProvider>,
    pub cluster: Cluster,
    flags: Vec<String>,
    /// Extra flags per replica index.
    replica_flags: Vec<Vec<String>>,
}

impl Rig {
    pub async fn start(options: RigOptions<'_>) -> Rig {
        let cluster = Cluster::start().await;
        cluster
            .set_pool_bounds(options.pool_min, options.pool_max)
            .await;
        let kwok = KwokProvider::build(
            cluster.client.clone(),
            &ConfigSource::ConfigMap {
                namespace: NAMESPACE.to_string(),
                name: DEFAULT_CONFIGMAP.to_string(),
            },
            Some(NAMESPACE),
        )
        .await
        .expect("the kwok provider from deploy/manifests/kwok-provider-config.yaml");
        let kwok = Arc::new(kwok);
        let provider = Arc::new(FaultyProvider::new(kwok.clone() as Arc<dyn CloudProvider>));
        let pki = cluster.control_plane.pki_files().clone();
        let served = ServedProvider::start(
            provider.clone(),
            MutualTls {
                cert: pki.serving_certificate.clone(),
                key: pki.serving_key.clone(),
                client_ca: pki.ca_certificate.clone(),
            },
        )
        .await
        .expect("serve the faulty provider");

        // Leader election as in production, even for one replica: the Lease says who may act.
        let mut flags: Vec<String> = vec!["--cloud-provider=externalgrpc".into()];
        flags.extend(ELECTION.iter().map(|f| f.to_string()));
        flags.extend(options.flags.iter().map(|f| f.to_string()));

        let mut replicas = Vec::new();
        for index in 0..options.replicas {
            let name = format!("replica-{index}");
            let proxy = ApiProxy::start(ProxyConfig {
                upstream_url: cluster.control_plane.server_url(),
                upstream_ca_pem_path: pki.ca_certificate.clone(),
                serving_cert_path: pki.serving_certificate.clone(),
                serving_key_path: pki.serving_key.clone(),
            })
            .await
            .expect("start the replica's API proxy");
            let kubeconfig = cluster.service_account_kubeconfig_via(&name, &proxy.url());
            let certificate = cluster
                .control_plane
                .issue_client_certificate(&name)
                .expect("a client certificate for the replica");
            let cloud_config = cluster
                .scratch_dir()
                .join(format!("{name}-cloud-config.yaml"));
            served
                .write_cloud_config(
                    &cloud_config,
                    &ClientTls {
                        certificate: certificate.certificate,
                        key: certificate.key,
                        server_ca: pki.ca_certificate.clone(),
                    },
                    GRPC_TIMEOUT,
                )
                .expect("write the replica's cloud config");
            replicas.push(Replica {
                name,
                proxy,
                process: None,
                starts: 0,
                kubeconfig,
                cloud_config,
            });
        }
        let invariants =
            Invariants::start(&cluster, kwok.clone(), options.pool_min, options.pool_max);
        let mut rig = Rig {
            cluster,
            provider,
            served,
            replicas,
            invariants,
            flags,
            replica_flags: vec![
                options
                    .first_leader_flags
                    .iter()
                    .map(|f| f.to_string())
                    .collect(),
            ],
            retired: Vec::new(),
        };
        rig.start_replica(0);
        if options.replicas > 1 {
            rig.wait_for_first_iteration().await;
            assert_eq!(rig.wait_for_leader().await, 0, "replica-0 leads first");
        }
        for index in 1..options.replicas {
            rig.start_replica(index);
        }
        rig
    }

    /// Starts (or restarts) replica `index` as a new process.
    pub fn start_replica(&mut self, index: usize) {
        let replica = &mut self.replicas[index];
        replica.starts += 1;
        let mut flags = self.flags.clone();
        flags.extend(self.replica_flags.get(index).cloned().unwrap_or_default());
        flags.push(format!("--kubeconfig={}", replica.kubeconfig.display()));
        flags.push(format!("--cloud-config={}", replica.cloud_config.display()));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let log_name = if replica.starts == 1 {
            replica.name.clone()
        } else {
            format!("{}-start{}", replica.name, replica.starts)
        };
        let process = self.cluster.start_autoscaler_with_env(
            &log_name,
            &flags,
            "info,ferroscale=debug,ferroscale_core=debug",
            &[("HOSTNAME", replica.name.as_str())],
        );
        replica.process = Some(process);
    }

    /// SIGKILL: the replica stops where it is, nothing cleaned up.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut process) = self.replicas[index].process.take() {
            process.crash();
            self.retired.push(process);
        }
    }

    /// The replica whose identity holds the Lease now, if any.
    pub async fn leader(&self) -> Option<usize> {
        let lease = Api::<Lease>::namespaced(self.cluster.client.clone(), NAMESPACE)
            .get_opt("cluster-autoscaler")
            .await
            .ok()??;
        let holder = lease.spec?.holder_identity?;
        replica_of(&holder)
    }

    /// Waits until some replica holds the Lease, and returns it.
    pub async fn wait_for_leader(&self) -> usize {
        let mut leader = None;
        wait_until("a replica to hold the Lease", async || {
            leader = self.leader().await;
            leader.is_some()
        })
        .await;
        leader.expect("a leader")
    }

    /// Waits until a replica other than `old` holds the Lease, and returns it.
    pub async fn wait_for_new_leader(&self, old: usize) -> usize {
        let mut leader = None;
        wait_until("another replica to take the Lease over", async || {
            leader = self.leader().await.filter(|l| *l != old);
            leader.is_some()
        })
        .await;
        leader.expect("a new leader")
    }

    /// The process of replica `index`, which must be running.
    pub fn process(&self, index: usize) -> &Autoscaler {
        self.replicas[index]
            .process
            .as_ref()
            .expect("the replica is running")
    }

    /// `count` busy nodes: a scale-up of Deployment `web`, one 3-CPU pod per 4-CPU node. Waits
    /// for the leader's first iteration first; returns the nodes' names.
    pub async fn busy_nodes(&self, count: i32) -> Vec<String> {
        self.wait_for_first_iteration().await;
        self.cluster.create_app(App::new("web", count, "3")).await;
        self.cluster
            .wait_running("web", usize::try_from(count).unwrap_or(0))
            .await;
        self.cluster
            .wait_pool_ready(usize::try_from(count).unwrap_or(0))
            .await
    }

    /// Injects `fault` for the next call of `method`.
    pub fn inject_once(&self, method: Method, fault: Fault) {
        self.provider
            .inject(Injection::new(method, fault).times(1))
            .expect("a valid injection");
    }

    /// The nodes the cloud was asked for and made: the deltas of the IncreaseSize calls it carried
    /// out, whatever their callers heard.
    pub fn nodes_the_cloud_made(&self) -> i64 {
        self.provider
            .call_log()
            .records()
            .iter()
            .filter(|c| c.method == Method::IncreaseSize)
            .filter(|c| matches!(c.carried_out.as_ref().unwrap_or(&c.result), CallResult::Ok))
            .filter_map(|c| c.details.delta)
            .sum()
    }

    /// Waits until replica `index`'s `/health-check` passes (`healthy`) or fails.
    pub async fn wait_for_health(&self, index: usize, healthy: bool) {
        let what = if healthy { "pass" } else { "fail" };
        wait_until(
            &format!("/health-check of replica-{index} to {what}"),
            async || self.process(index).http_get("/health-check").is_some() == healthy,
        )
        .await;
    }

    /// Every invariant broken so far: the watched ones, the cloud calls of the provider's log,
    /// and each replica's writes in its proxy's log.
    pub fn violations(&self) -> Vec<String> {
        let mut violations = self
            .invariants
            .violations(&self.provider.call_log().records());
        for (index, replica) in self.replicas.iter().enumerate() {
            violations.extend(
                self.invariants
                    .writes_from_non_leaders(index, &replica.proxy.faults().log()),
            );
        }
        violations
    }

    /// Waits for the cluster to settle once the faults are gone (see
    /// [`Invariants::wait_settled`]), then asserts that no invariant broke.
    pub async fn assert_settled(&self) {
        if let Err(why) = self
            .invariants
            .wait_settled(&self.cluster, crate::harness::WAIT_LIMIT)
            .await
        {
            panic!("{why}");
        }
        let violations = self.violations();
        assert!(
            violations.is_empty(),
            "invariants broken:\n  {}",
            violations.join("\n  ")
        );
    }

    /// Waits for the first status ConfigMap (the leader's first iteration).
    pub async fn wait_for_first_iteration(&self) {
        wait_until("the status ConfigMap of the first iteration", async || {
            self.cluster.status().await.is_some()
        })
        .await;
    }
}

/// `replica-N` from a Lease holder identity `replica-N_<suffix>` (the host name comes from the
/// `HOSTNAME` the rig gives each replica).
pub fn replica_of(identity: &str) -> Option<usize> {
    identity
        .split_once('_')
        .map_or(identity, |(host, _)| host)
        .strip_prefix("replica-")?
        .parse()
        .ok()
}
