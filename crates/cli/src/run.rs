//! `ferroscale run`: the autoscaler against a live cluster. Wiring only — every decision is the
//! engine's (`Autoscaler::run_once`); this module builds the cloud provider, the watch caches and
//! `KubeCluster`, serves `/metrics` and `/health-check`, holds the leader-election Lease, runs one
//! iteration every `--scan-interval`, and shuts down cleanly on SIGTERM or SIGINT
//! (docs/behaviour.md, The main loop).
//!
//! Shutting down has side effects that belong to the leader alone: deleting the status ConfigMap
//! (which the next leader writes) and the provider's `Cleanup` (which an externalgrpc server
//! shared by every replica receives). They run as the last step of the leader's work, while the
//! Lease is still held and renewed, bounded by [`CLEANUP_TIMEOUT`]; the Lease is released after
//! them. A standby, or a replica that lost the Lease, leaves without touching anything.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, anyhow};
use ferroscale_core::autoscaler::{Autoscaler, LoopOutcome, Stopwatch};
use ferroscale_core::cloud::CloudProvider;
use ferroscale_core::kubernetes::ClusterApi;
use ferroscale_core::options::ExpanderName;
use ferroscale_core::scale_up::ScaleUpStatus;
use ferroscale_expander_grpc::GrpcExpander;
use ferroscale_kube::{
    CacheConfig, CapacityWatches, ClusterCaches, KubeCluster, KubeClusterConfig,
    LeaderElectionConfig, LeaderElector,
};
use ferroscale_metrics::{AutoscalerMetrics, HealthCheck};
use ferroscale_model::Timestamp;
use ferroscale_provider_clusterapi::{ClusterApiConfig, ClusterApiProvider, KubeconfigPaths};
use ferroscale_provider_exoscale::ExoscaleProvider;
use ferroscale_provider_externalgrpc::{ExternalGrpcProvider, NodeGroupDefaults};
use ferroscale_provider_kwok::{ConfigSource, KwokEnvironment, KwokProvider};
use tokio::sync::Notify;

use crate::batching::{Batcher, Finished};
use crate::cloud_nodes::{self, CloudNodes};
use crate::debug_snapshot::{SNAPSHOT_PATH, Snapshots};
use crate::flags::{CloudProviderKind, LoopTiming, RunFlags};
use crate::profiling::{CPU_PROFILE_PATH, Profiling};

/// The longest the leader's shutdown clean-up (status ConfigMap, provider `Cleanup`) may take:
/// well inside Kubernetes' default termination grace period of 30 s, after an iteration in
/// progress has finished, so that a server that does not answer cannot keep the process alive
/// until it is killed.
pub const CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The wall clock as the engine's timestamps (the only place the binary reads it).
pub fn system_now() -> Timestamp {
    Timestamp::from_system_time(SystemTime::now())
}

/// Wall-clock time of the engine's pure planning calls.
struct WallStopwatch(Instant);

impl Stopwatch for WallStopwatch {
    fn elapsed_millis(&self) -> f64 {
        self.0.elapsed().as_secs_f64() * 1000.0
    }
}

/// Runs until a signal or a fatal error.
pub fn run(flags: RunFlags) -> anyhow::Result<()> {
    crate::logging::init(&flags.logging)?;
    warn_about_ignored_flags(&flags);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(flags))
}

/// One warning per flag of a cloud provider Ferroscale does not build: accepted so that upstream
/// manifests start unchanged, but nobody should believe it does anything.
fn warn_about_ignored_flags(flags: &RunFlags) {
    for ignored in &flags.ignored_flags {
        tracing::warn!(
            "--{} configures only the {} cloud provider; it has no effect with --cloud-provider={}",
            ignored.flag,
            ignored.provider,
            flags.options.cloud_provider
        );
    }
}

async fn run_async(flags: RunFlags) -> anyhow::Result<()> {
    let mut options = flags.options.clone();
    if flags.loop_timing.frequent_loops {
        // The first batching window replaces upstream's fixed two-second wait for a burst of new
        // pods (ARCHITECTURE.md, deliberate differences): the wake-ups already batch the burst.
        options.new_pods_window = flags.loop_timing.windows.first;
    }
    let metrics = AutoscalerMetrics::new().context("building the metrics registry")?;
    metrics.set_limits(&options);
    let health = Arc::new(Mutex::new(HealthCheck::new(flags.health)));
    let listener = ferroscale_metrics::bind(flags.address).await?;
    tracing::info!(address = %flags.address, "serving /metrics and /health-check");
    // Debugging endpoints and the replay file.
    let snapshots = Snapshots::new(
        flags.debugging.snapshot_enabled,
        options.scan_interval,
        flags.engine_flags.clone(),
        flags.debugging.snapshot_scenario.clone(),
    );
    let mut extra_routes = ferroscale_metrics::ExtraRoutes::new();
    extra_routes.add(SNAPSHOT_PATH, snapshots.route());
    if flags.debugging.snapshot_enabled {
        tracing::info!(address = %flags.address, "serving the debugging snapshot on {SNAPSHOT_PATH}");
    }
    Profiling::new(flags.debugging.profiling).add_routes(&mut extra_routes);
    if flags.debugging.profiling {
        tracing::info!(address = %flags.address, "serving CPU profiles on {CPU_PROFILE_PATH}");
    }
    let server = tokio::spawn(ferroscale_metrics::serve_with(
        listener,
        metrics.clone(),
        Arc::clone(&health),
        Arc::new(system_now),
        extra_routes,
    ));

    let shutdown = Arc::new(Notify::new());
    let stopping = Arc::new(AtomicBool::new(false));
    tokio::spawn(wait_for_signal(
        Arc::clone(&shutdown),
        Arc::clone(&stopping),
    ));

    let environment = KwokEnvironment::from_process();
    let workload = connect_workload(&flags, &environment).await?;
    // Named in every connection error: the client's own errors do not say which server.
    let api_server = workload.url();
    tracing::info!(%api_server, "using the Kubernetes API server");
    let client = workload
        .client()
        .context("building the Kubernetes client")?;

    let provider = build_provider(&flags, &options, &environment, &workload, &client)
        .await
        .with_context(|| format!("starting against the API server at {api_server}"))?;
    tracing::info!(provider = provider.name(), "cloud provider ready");
    // With --cloud-node-controller the loop's refreshes are recorded for the controller.
    let (provider, watched_refresh) =
        cloud_nodes::watch_refreshes(provider, &options, flags.cloud_provider);

    // Watches without kube's own retries: a list or watch the API server refuses fails at
    // once, so the caches know they are behind (docs/behaviour.md LOOP-121), and their own
    // delays space the attempts.
    let caches = ClusterCaches::start(
        workload
            .client_without_retry()
            .context("building the Kubernetes client of the watch caches")?,
        &CacheConfig::new(&options.namespace)
            .with_api_server(&api_server)
            .with_capacity(capacity_watches(&flags.engine_flags)),
    );
    let wake_ups = caches.clone();
    tokio::select! {
        synced = caches.wait_until_ready(flags.cache_sync_timeout) => synced?,
        () = signalled(&shutdown, &stopping) => return Ok(()),
    }
    let mut cluster_config = KubeClusterConfig::new(&options.namespace);
    cluster_config.status_configmap = options.status_config_map_name.clone();
    cluster_config.buffer_pod_dry_run = engine_flag_bool(
        &flags.engine_flags,
        "capacity-buffer-pod-dry-run-enabled",
        true,
    );
    let cluster =
        KubeCluster::new(&workload, caches, cluster_config).context("building the cluster API")?;

    let seed = u64::try_from(system_now().0).unwrap_or_default();
    let mut autoscaler = Autoscaler::new(options.clone(), seed);
    if options.expander.contains(&ExpanderName::Grpc) {
        // Validation made sure both flags are set; the channel dials on first use.
        let expander = GrpcExpander::new(
            &options.grpc_expander_url,
            Path::new(&options.grpc_expander_cert),
        )
        .context("setting up the grpc expander")?;
        tracing::info!(url = %options.grpc_expander_url, "grpc expander ready");
        autoscaler = autoscaler.with_external_expander(Arc::new(expander));
    }
    let context = Loop {
        provider: provider.as_ref(),
        cluster: &cluster,
        wake_ups: &wake_ups,
        timing: flags.loop_timing,
        metrics: &metrics,
        health: &health,
        shutdown: &shutdown,
        stopping: &stopping,
        snapshots: &snapshots,
        cloud_nodes: watched_refresh.as_deref().map(|refresh| CloudNodes {
            refresh,
            writes: &cluster,
        }),
    };
    let result = if flags.leader_election.enabled {
        let mut election = LeaderElectionConfig::new(&options.namespace);
        election.lease_name = flags.leader_election.resource_name.clone();
        election.lease_duration = flags.leader_election.lease_duration;
        election.renew_deadline = flags.leader_election.renew_deadline;
        election.retry_period = flags.leader_election.retry_period;
        election.api_server = api_server.clone();
        // Its own client and budget, as upstream's: renewing the Lease never queues behind lists.
        let elector = LeaderElector::new(
            workload
                .separate_client("leader-election")
                .context("building the leader-election client")?,
            election,
        );
        tracing::info!(identity = elector.identity(), "waiting for leadership");
        // The clean-up is part of the leader's work: it runs while the Lease is renewed, and is
        // dropped with the work when the Lease is lost.
        let led = tokio::select! {
            led = elector.run_while_leader(lead(&mut autoscaler, context)) => led,
            () = wait_until_stopping_before_leading(&shutdown, &stopping, &elector) => {
                tracing::info!("stopping as a standby: leaving the status and the provider to the leader");
                Ok(())
            }
        };
        if let Err(error) = elector.release().await {
            tracing::warn!(%error, "releasing the lease");
        }
        // Losing the lease ends the process with an error, as upstream does, and without the
        // clean-up: the status and the provider are the new leader's now.
        led.map_err(|lost| anyhow!(lost))
    } else {
        lead(&mut autoscaler, context).await;
        Ok(())
    };
    server.abort();
    result
}

/// The workload cluster's API server, as upstream finds it: `--kubeconfig`, else `--kubernetes`,
/// else the in-cluster configuration (or kwok's local mode); with the rate limit and User-Agent
/// of the API-access flags. Says once at start what of those flags is in force.
async fn connect_workload(
    flags: &RunFlags,
    environment: &KwokEnvironment,
) -> anyhow::Result<ferroscale_kube::ApiServer> {
    let api = &flags.api_access;
    let client_config = match (&flags.kubeconfig, &api.access.master) {
        (None, Some(master)) => master.client_config().await?,
        (kubeconfig, master) => {
            if let Some(master) = master {
                tracing::warn!(
                    kubernetes = %master.text,
                    "--kubernetes is ignored: --kubeconfig names the API server (as upstream)"
                );
            }
            environment.client_config(kubeconfig.as_deref()).await?
        }
    };
    let workload = api.access.server(client_config)?;
    match api.access.rate_limit()? {
        Some(limit) => tracing::info!(
            qps = limit.qps,
            burst = limit.burst,
            "client-side rate limit of every Kubernetes API request"
        ),
        None => tracing::info!("no client-side rate limit of Kubernetes API requests"),
    }
    if api.access.content_type == ferroscale_kube::ContentType::Protobuf {
        tracing::info!(
            "--kube-api-content-type=application/vnd.kubernetes.protobuf: Ferroscale's Kubernetes \
             client speaks JSON; the API server answers it with the same objects"
        );
    }
    if !api.cluster_name.is_empty() {
        tracing::info!(
            cluster_name = %api.cluster_name,
            provider = %flags.options.cloud_provider,
            "--cluster-name has no effect with this provider (as upstream)"
        );
    }
    for gate in &api.feature_gates {
        if crate::flags::SIMULATED_FEATURE_GATES.contains(&gate.name.as_str()) {
            // Enabled: parsing refused disabling it.
            tracing::info!(gate = %gate.name, "--feature-gates: always simulated as enabled");
        } else {
            tracing::warn!(
                gate = %gate.name,
                enabled = gate.enabled,
                "--feature-gates: this gate has no effect: Ferroscale simulates the scheduler \
                 as Kubernetes 1.36 does with its default gates"
            );
        }
    }
    Ok(workload)
}

/// The leader's work: the loop until a signal, then the shutdown clean-up — only when the loop
/// ran, so that a replica that gets the Lease after the signal leaves without side effects.
async fn lead(autoscaler: &mut Autoscaler, context: Loop<'_>) {
    let (provider, cluster) = (context.provider, context.cluster);
    let iterations = autoscale(autoscaler, context).await;
    if iterations == 0 {
        tracing::info!("stopped before the first iteration: nothing to clean up");
        return;
    }
    clean_up(autoscaler, provider, cluster, CLEANUP_TIMEOUT).await;
}

/// Deletes the status ConfigMap and calls the provider's `Cleanup`, giving up after `timeout`.
async fn clean_up(
    autoscaler: &mut Autoscaler,
    provider: &dyn CloudProvider,
    cluster: &dyn ClusterApi,
    timeout: Duration,
) {
    tracing::info!(
        "shutdown clean-up: deleting the status ConfigMap and calling the provider's Cleanup"
    );
    match tokio::time::timeout(timeout, autoscaler.shutdown(provider, cluster)).await {
        Ok(Ok(())) => tracing::info!("shutdown clean-up done"),
        Ok(Err(error)) => tracing::warn!(%error, "shutdown clean-up"),
        Err(_) => tracing::warn!("shutdown clean-up did not finish within {timeout:?}; giving up"),
    }
}

/// The cloud provider `--cloud-provider` names, from `--cloud-config` (or, for kwok, its
/// ConfigMap). `--nodes` and `--node-group-auto-discovery` configure groups of clouds whose groups
/// come from elsewhere here, so they are ignored with a warning.
async fn build_provider(
    flags: &RunFlags,
    options: &ferroscale_core::AutoscalingOptions,
    environment: &KwokEnvironment,
    workload: &ferroscale_kube::ApiServer,
    client: &kube::Client,
) -> anyhow::Result<Arc<dyn CloudProvider>> {
    let provider_name = &options.cloud_provider;
    let takes_nodes = flags.cloud_provider == CloudProviderKind::Exoscale;
    if !flags.static_node_groups.is_empty() && !takes_nodes {
        tracing::warn!(
            "--nodes is ignored by the {provider_name} provider: its groups come from the provider"
        );
    }
    let takes_discovery = flags.cloud_provider == CloudProviderKind::ClusterApi;
    if !options.node_group_auto_discovery.is_empty() && !takes_discovery {
        tracing::warn!("--node-group-auto-discovery is ignored by the {provider_name} provider");
    }
    Ok(match flags.cloud_provider {
        CloudProviderKind::Kwok => {
            // The provider's ConfigMaps live in the pod's namespace; outside a pod, --namespace.
            let namespace = environment
                .namespace
                .clone()
                .unwrap_or_else(|| options.namespace.clone());
            let source = match &flags.cloud_config {
                Some(path) => ConfigSource::File(path.clone()),
                None => ConfigSource::ConfigMap {
                    namespace: namespace.clone(),
                    name: environment.configmap.clone(),
                },
            };
            let provider = KwokProvider::build(client.clone(), &source, Some(&namespace))
                .await
                .context("building the kwok cloud provider")?;
            tracing::info!(groups = provider.groups().len(), "kwok provider ready");
            Arc::new(provider)
        }
        CloudProviderKind::ExternalGrpc => {
            let path = flags
                .cloud_config
                .as_deref()
                .context("--cloud-provider=externalgrpc needs --cloud-config")?;
            let provider = ExternalGrpcProvider::from_config_file(
                path,
                NodeGroupDefaults::from_options(options),
            )
            .context("building the externalgrpc cloud provider")?;
            Arc::new(provider)
        }
        CloudProviderKind::ClusterApi => Arc::new(
            start_clusterapi(
                environment,
                &flags.api_access.access,
                KubeconfigPaths::select(
                    flags.cloud_config.as_deref(),
                    flags.kubeconfig.as_deref(),
                    flags.clusterapi_cloud_config_authoritative,
                ),
                workload,
                &options.node_group_auto_discovery,
            )
            .await?,
        ),
        CloudProviderKind::Exoscale => {
            let provider = ExoscaleProvider::from_process_env(&options.nodes)
                .context("building the exoscale cloud provider")?;
            Arc::new(provider)
        }
    })
}

/// The Cluster API provider for `run` and `serve-provider`: `workload` is the API server of
/// `paths.workload`, whose clients (and request budget) are reused for the management cluster
/// when both paths are the same (docs/clusterapi.md CAPI-07); a separate management cluster gets
/// its own budget under the same `access` settings, as upstream's second client does.
pub(crate) async fn start_clusterapi(
    environment: &KwokEnvironment,
    access: &ferroscale_kube::ApiAccess,
    paths: KubeconfigPaths,
    workload: &ferroscale_kube::ApiServer,
    discovery: &[String],
) -> anyhow::Result<ClusterApiProvider> {
    let workload_client = workload
        .client()
        .context("building the workload cluster client")?;
    let management = if paths.management == paths.workload {
        workload_client.clone()
    } else {
        let config = environment
            .client_config(paths.management.as_deref())
            .await
            .context("configuring the management cluster client")?;
        access
            .server(config)?
            .client()
            .context("building the management cluster client")?
    };
    let config = ClusterApiConfig::from_env(|name| std::env::var(name).ok(), discovery)?;
    ClusterApiProvider::start(management, workload_client, config)
        .await
        .context("starting the clusterapi cloud provider")
}

/// Before leadership is acquired a signal ends the process at once; once leading, the loop
/// itself finishes its iteration and returns.
async fn wait_until_stopping_before_leading(
    shutdown: &Notify,
    stopping: &AtomicBool,
    elector: &LeaderElector,
) {
    loop {
        let signal = shutdown.notified();
        tokio::pin!(signal);
        signal.as_mut().enable();
        if stopping.load(Ordering::SeqCst) && !elector.is_leader() {
            return;
        }
        signal.await;
    }
}

/// Completes once a signal has arrived, whether before or after the call.
async fn signalled(shutdown: &Notify, stopping: &AtomicBool) {
    let signal = shutdown.notified();
    tokio::pin!(signal);
    signal.as_mut().enable();
    if !stopping.load(Ordering::SeqCst) {
        signal.await;
    }
}

/// Completes at the first SIGTERM or SIGINT.
pub async fn termination_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = interrupt => {},
                    _ = terminate.recv() => {},
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; SIGINT only");
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
    tracing::info!("signal received: finishing the work in progress and shutting down");
}

async fn wait_for_signal(shutdown: Arc<Notify>, stopping: Arc<AtomicBool>) {
    termination_signal().await;
    stopping.store(true, Ordering::SeqCst);
    shutdown.notify_waiters();
}

/// What the main loop works with.
struct Loop<'a> {
    provider: &'a dyn CloudProvider,
    cluster: &'a dyn ClusterApi,
    wake_ups: &'a ClusterCaches,
    timing: LoopTiming,
    metrics: &'a AutoscalerMetrics,
    health: &'a Mutex<HealthCheck>,
    shutdown: &'a Notify,
    stopping: &'a AtomicBool,
    /// Debugging snapshots asked for (`/snapshotz`, `--snapshot-scenario`).
    snapshots: &'a Snapshots,
    /// With `--cloud-node-controller`: what its pass after each iteration needs.
    cloud_nodes: Option<CloudNodes<'a>>,
}

/// The main loop (docs/behaviour.md LOOP-103–LOOP-105, LOOP-116–LOOP-119): one iteration per
/// `--scan-interval`, measured from each iteration's start, until a signal arrives; an iteration
/// in progress always completes. With `--frequent-loops-enabled`, an iteration starts at once when
/// one of the last two acted, and newly unschedulable pods start one early, batched as
/// [`crate::batching`] decides. Returns how many iterations ran.
async fn autoscale(autoscaler: &mut Autoscaler, context: Loop<'_>) -> u64 {
    let scan_interval = autoscaler.options().scan_interval;
    let lock_health = || {
        context
            .health
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    lock_health().start_monitoring(system_now());
    // Whether each of the last two iterations acted.
    let mut acted = [false; 2];
    let mut batcher = Batcher::new(context.timing.windows);
    let mut cloud_node_controller = context
        .cloud_nodes
        .as_ref()
        .map(|_| ferroscale_core::cloud_node_controller::CloudNodeController::new());
    let mut iterations = 0;
    while !context.stopping.load(Ordering::SeqCst) {
        iterations += 1;
        let started = Instant::now();
        // The iteration plans for every pod reported so far; only later reports open a batch.
        let mut reported = context.wake_ups.unschedulable_arrivals();
        batcher.iteration_started();
        let now = system_now();
        lock_health().record_activity(now);
        // Only a loop somebody asked a snapshot of copies what it gathers.
        let capture = context.snapshots.wants_capture();
        if capture {
            autoscaler.capture_next_loop();
        }
        let outcome = autoscaler
            .run_once(
                context.provider,
                context.cluster,
                now,
                &WallStopwatch(Instant::now()),
            )
            .await;
        let took = started.elapsed();
        if capture {
            context.snapshots.deliver(&outcome, system_now());
        }
        context
            .metrics
            .record_loop(&outcome, autoscaler.options(), took);
        // A loop on a view that may be behind the API server acted only partly
        // (docs/behaviour.md LOOP-121): `/health-check` fails once that lasts
        // `--max-failing-time`, as for failed iterations.
        if outcome.error.is_none() && outcome.caches_behind.is_empty() {
            lock_health().record_success(system_now());
        }
        log_outcome(&outcome, took);
        // The cloud node controller, on this iteration's refresh (docs/cloud-node-controller.md).
        if let (Some(controller), Some(parts)) =
            (cloud_node_controller.as_mut(), context.cloud_nodes.as_ref())
        {
            cloud_nodes::pass(
                controller,
                parts,
                context.cluster,
                system_now(),
                autoscaler.options(),
            )
            .await;
        }
        acted = [acted[1], outcome.acted()];
        let scaled_up = outcome
            .scale_up_execution
            .as_ref()
            .is_some_and(|execution| execution.scaled_up_nodes > 0);
        batcher.iteration_finished(Instant::now(), scaled_up);

        // Listen for the signal before looking at the flag: a signal that arrived during the
        // iteration has set the flag, one that arrives from here on wakes `stop`. (Listening only
        // while sleeping missed a signal that came during the iteration, and the process slept a
        // whole scan interval before noticing it.)
        let stop = context.shutdown.notified();
        tokio::pin!(stop);
        stop.as_mut().enable();
        if context.stopping.load(Ordering::SeqCst) {
            break;
        }
        let waited = Instant::now();
        if context.timing.frequent_loops {
            // Pods too new to act on yet: look again once the first window has passed rather
            // than after a whole scan interval.
            let waiting_for_pods = outcome
                .scale_up
                .as_ref()
                .is_some_and(|plan| plan.status == ScaleUpStatus::InCooldown);
            let finished = Finished {
                at: waited,
                scan_due: started + scan_interval,
                acted_recently: acted.contains(&true),
                waiting_for_pods,
            };
            loop {
                let arrival = context.wake_ups.unschedulable_pod_seen();
                tokio::pin!(arrival);
                let arrivals = context.wake_ups.unschedulable_arrivals();
                if arrivals.count != reported.count
                    && let Some(latest) = arrivals.latest
                {
                    tracing::debug!(
                        count = arrivals.count.saturating_sub(reported.count),
                        "a new unschedulable pod: batching it for the next iteration"
                    );
                    batcher.pod_arrived(latest);
                    reported = arrivals;
                }
                let next = batcher.next_iteration(finished);
                if next <= Instant::now() {
                    break;
                }
                tokio::select! {
                    () = tokio::time::sleep_until(next.into()) => break,
                    () = &mut stop => break,
                    () = &mut arrival => {}
                }
            }
        } else {
            tokio::select! {
                () = tokio::time::sleep(scan_interval.saturating_sub(took)) => {}
                () = &mut stop => {}
            }
        }
        context
            .metrics
            .observe_function("loopWait", waited.elapsed());
    }
    iterations
}

/// `--v=1`: what was decided and what failed.
fn log_outcome(outcome: &LoopOutcome, took: Duration) {
    if let Some(error) = &outcome.error {
        tracing::error!(%error, "iteration failed");
        return;
    }
    if !outcome.caches_behind.is_empty() {
        tracing::warn!(
            behind = %outcome.caches_behind.join("; "),
            "the watch caches may be behind the API server: no scale-down this iteration"
        );
    }
    if !outcome.untaints_owed.is_empty() {
        tracing::warn!(
            nodes = %outcome.untaints_owed.join(","),
            "could not remove the deletion taint from these nodes yet; trying again next iteration"
        );
    }
    if let Some(reason) = &outcome.ended_early {
        tracing::info!(?reason, "iteration ended early");
    }
    for action in &outcome.planned_actions {
        if outcome.dry_run {
            tracing::info!(?action, "dry run: would act");
        } else {
            tracing::info!(?action, "acted");
        }
    }
    for (action, error) in &outcome.action_errors {
        tracing::error!(?action, %error, "action failed");
    }
    if let Some(execution) = &outcome.scale_up_execution {
        for (increase, error) in &execution.failed {
            tracing::error!(group = %increase.group_id, %error, "scale-up failed");
        }
    }
    for failed in &outcome.failed_deletions {
        tracing::error!(node = %failed.node, group = %failed.group_id, reason = %failed.reason, "node deletion abandoned");
    }
    for deleted in &outcome.deleted_nodes {
        tracing::info!(node = %deleted.node, group = %deleted.group_id, "node removed");
    }
    if let Some(plan) = &outcome.scale_down {
        for node in &plan.unremovable {
            tracing::debug!(
                node = %node.node,
                reason = ?node.reason,
                blocking_pod = ?node.blocking_pod,
                pod = ?node.pod,
                "node cannot be removed"
            );
        }
    }
    if let Some(error) = &outcome.status_error {
        tracing::error!(%error, "writing the status ConfigMap");
    }
    tracing::debug!(
        took_ms = took.as_millis() as u64,
        decide_ms = outcome.decide_millis,
        pending = outcome.pending_pods.len(),
        "iteration done"
    );
}

/// A boolean engine flag as given on the command line (the last occurrence wins), else `default`.
fn engine_flag_bool(engine_flags: &[(String, String)], name: &str, default: bool) -> bool {
    engine_flags
        .iter()
        .rev()
        .find(|(flag, _)| flag == name)
        .and_then(|(_, value)| crate::flags::parse_bool(value))
        .unwrap_or(default)
}

/// The capacity kinds the watch caches read: each only while a feature that uses it is on, so a
/// cluster without the CRDs or the RBAC for them costs nothing.
fn capacity_watches(engine_flags: &[(String, String)]) -> CapacityWatches {
    let on = |name: &str| engine_flag_bool(engine_flags, name, false);
    CapacityWatches {
        provisioning_requests: on("enable-provisioning-requests"),
        buffers: on("capacity-buffer-controller-enabled")
            || on("capacity-buffer-pod-injection-enabled"),
        quotas: on("capacity-quotas-enabled"),
    }
}

#[cfg(test)]
mod capacity_watch_tests {
    use super::*;

    fn flags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(f, v)| (f.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn each_capacity_kind_is_watched_only_while_a_feature_using_it_is_on() {
        assert_eq!(capacity_watches(&[]), CapacityWatches::default());
        let requests = capacity_watches(&flags(&[("enable-provisioning-requests", "true")]));
        assert!(requests.provisioning_requests && requests.pod_templates());
        assert!(!requests.buffers && !requests.quotas);
        let buffers = capacity_watches(&flags(&[
            ("capacity-buffer-pod-injection-enabled", "true"),
            ("capacity-quotas-enabled", "true"),
            ("capacity-quotas-enabled", "false"),
        ]));
        assert!(buffers.buffers && buffers.pod_templates());
        assert!(!buffers.quotas, "the last value given wins");
        assert!(engine_flag_bool(
            &[],
            "capacity-buffer-pod-dry-run-enabled",
            true
        ));
    }
}
