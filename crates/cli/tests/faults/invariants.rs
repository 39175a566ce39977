//! What every fault test asserts, watched for the whole test rather than only at its end:
//!
//! - **no wrong deletion**: when a node of the group disappears, no pod that still had to move
//!   was bound to it (pods of a deleted node stay in the API for tens of seconds, until the pod
//!   garbage collector removes them, so a node deleted with a workload on it is always seen);
//! - **bounds**: the group never has more nodes than its maximum, and its target size stays
//!   within its bounds;
//! - **only the leader acts**: every call the provider received from a replica arrived while
//!   that replica held the Lease, and so did every write a replica's proxy sent on to the API
//!   server, its Lease requests aside (the Lease's `acquireTime`, written by the replica that
//!   took it, orders the holders);
//! - **no node deleted twice** by the cloud;
//! - at the end, once the faults are gone: no node keeps the deletion taint or the cordon, no
//!   node keeps a soft taint the leader does not count as a scale-down candidate, and every pod
//!   of every Deployment runs (no pod lost, every pending pod that fits the group placed).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use ferroscale_core::cloud::CloudProvider;
use ferroscale_model::taints::DELETION_CANDIDATE;
use ferroscale_provider_kwok::KwokProvider;
use ferroscale_testing_faults::api_proxy::LogEntry;
use ferroscale_testing_faults::provider::{CallRecord, CallResult, Method};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;
use tokio::task::JoinHandle;

use crate::harness::{APPS, Cluster, NAMESPACE, POOL_LABEL, TO_BE_DELETED, has_taint};
use crate::rig::replica_of;

/// A holder of the Lease, from when it acquired it.
#[derive(Debug, Clone)]
pub struct Tenure {
    pub acquired: SystemTime,
    pub identity: String,
    pub replica: Option<usize>,
}

#[derive(Debug, Default)]
struct Observed {
    /// Violations seen while the test ran.
    violations: Vec<String>,
    /// Every holder of the Lease, in order.
    tenures: Vec<Tenure>,
    /// Nodes the group lost, with when the loss was seen.
    deleted: Vec<(SystemTime, String)>,
    /// The most nodes the group had at once.
    peak_nodes: usize,
    /// Nodes deleted while pods that had to move ran on them, and how many such pods.
    wrong_deletions: usize,
    stranded_pods: usize,
}

/// The invariants' background watch; stops when dropped.
pub struct Invariants {
    observed: Arc<Mutex<Observed>>,
    tasks: Vec<JoinHandle<()>>,
    client: kube::Client,
}

impl Drop for Invariants {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn lock(observed: &Mutex<Observed>) -> MutexGuard<'_, Observed> {
    observed.lock().unwrap_or_else(|p| p.into_inner())
}

impl Invariants {
    pub fn start(cluster: &Cluster, kwok: Arc<KwokProvider>, min: usize, max: usize) -> Invariants {
        let observed = Arc::new(Mutex::new(Observed::default()));
        let client = cluster.client.clone();
        let tasks = vec![
            tokio::spawn(watch_node_deletions(client.clone(), observed.clone(), max)),
            tokio::spawn(watch_lease(client.clone(), observed.clone())),
            tokio::spawn(watch_targets(kwok, observed.clone(), min, max)),
        ];
        Invariants {
            observed,
            tasks,
            client,
        }
    }

    /// The Lease holders seen so far.
    pub fn tenures(&self) -> Vec<Tenure> {
        lock(&self.observed).tenures.clone()
    }

    /// The group's nodes that disappeared so far.
    pub fn deleted_nodes(&self) -> Vec<String> {
        lock(&self.observed)
            .deleted
            .iter()
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// The most nodes the group had at once.
    pub fn peak_nodes(&self) -> usize {
        lock(&self.observed).peak_nodes
    }

    /// Nodes deleted while pods that had to move ran on them.
    pub fn wrong_deletions(&self) -> usize {
        lock(&self.observed).wrong_deletions
    }

    /// Pods that ran on nodes when they were deleted: lost, as far as their node goes.
    pub fn stranded_pods(&self) -> usize {
        lock(&self.observed).stranded_pods
    }

    /// Every invariant broken so far, the provider's calls included; empty when all hold.
    pub fn violations(&self, calls: &[CallRecord]) -> Vec<String> {
        let observed = lock(&self.observed);
        let mut violations = observed.violations.clone();
        violations.extend(calls_from_non_leaders(calls, &observed.tenures));
        violations.extend(nodes_deleted_twice(calls));
        violations
    }

    /// Writes `replica` sent on to the API server (its proxy's log) while it did not hold the
    /// Lease — its own Lease requests aside, which are how it takes the Lease.
    pub fn writes_from_non_leaders(&self, replica: usize, log: &[LogEntry]) -> Vec<String> {
        let observed = lock(&self.observed);
        log.iter()
            .filter(|entry| entry.request.class.is_write())
            .filter(|entry| entry.request.resource() != Some("leases"))
            .filter_map(|entry| {
                let sent = entry.forwarded_at?;
                let holder = holder_at(&observed.tenures, sent);
                (holder != Some(replica)).then(|| {
                    format!(
                        "replica-{replica} wrote to the API server at {} while {} held the Lease: \
                         {:?} {} {}",
                        since_epoch(sent),
                        holder.map_or("nobody".to_string(), |h| format!("replica-{h}")),
                        entry.request.class,
                        entry.request.resource().unwrap_or_default(),
                        entry.request.name().unwrap_or_default()
                    )
                })
            })
            .collect()
    }

    /// Waits up to `limit` until the cluster has settled once the faults are gone: no node of
    /// the group tainted for deletion or cordoned, no soft taint beyond the leader's scale-down
    /// candidates, and every Deployment's pods running. The error says what had not settled.
    pub async fn wait_settled(&self, cluster: &Cluster, limit: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let why = unsettled(&self.client, cluster)
                .await
                .unwrap_or_else(|| "the cluster could not be read".to_string());
            if why.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("not settled after {limit:?}: {why}"));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Why the cluster has not settled yet, `None` when it has.
async fn unsettled(client: &kube::Client, cluster: &Cluster) -> Option<String> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(POOL_LABEL))
        .await
        .ok()?
        .items;
    let mut problems = Vec::new();
    let mut soft_tainted = 0;
    for node in &nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        if has_taint(node, TO_BE_DELETED) {
            problems.push(format!("{name} keeps {TO_BE_DELETED}"));
        }
        if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            problems.push(format!("{name} is cordoned"));
        }
        if has_taint(node, DELETION_CANDIDATE) {
            soft_tainted += 1;
        }
    }
    let candidates = status_candidates(cluster).await;
    if soft_tainted > candidates {
        problems.push(format!(
            "{soft_tainted} nodes carry {DELETION_CANDIDATE} but the status counts {candidates} \
             scale-down candidates"
        ));
    }
    let deployments = cluster
        .deployments()
        .list(&ListParams::default())
        .await
        .ok()?
        .items;
    for deployment in deployments {
        let name = deployment.metadata.name.clone().unwrap_or_default();
        let wanted = deployment
            .spec
            .and_then(|s| s.replicas)
            .and_then(|r| usize::try_from(r).ok())
            .unwrap_or(1);
        let running = cluster.running_pods(&name).await.len();
        if running != wanted {
            problems.push(format!("{name}: {running} of {wanted} pods running"));
        }
    }
    Some(problems.join("; "))
}

/// The scale-down candidates of every group in the leader's status ConfigMap.
async fn status_candidates(cluster: &Cluster) -> usize {
    let Some(status) = cluster.status().await else {
        return 0;
    };
    let Ok(status) = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&status) else {
        return 0;
    };
    status["nodeGroups"]
        .as_sequence()
        .map(|groups| {
            groups
                .iter()
                .filter_map(|g| g["scaleDown"]["candidates"].as_u64())
                .sum::<u64>()
        })
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0)
}

/// Polls the group's nodes; when one disappears, lists the pods still bound to it.
async fn watch_node_deletions(client: kube::Client, observed: Arc<Mutex<Observed>>, max: usize) {
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client);
    let mut known: BTreeSet<String> = BTreeSet::new();
    loop {
        if let Ok(list) = nodes.list(&ListParams::default().labels(POOL_LABEL)).await {
            let now: BTreeSet<String> = list
                .items
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            {
                let mut observed = lock(&observed);
                observed.peak_nodes = observed.peak_nodes.max(now.len());
                if now.len() > max {
                    observed.violations.push(format!(
                        "the group had {} nodes, above its maximum {max}",
                        now.len()
                    ));
                }
            }
            for gone in known.difference(&now) {
                let stranded = pods_needing_to_move(&pods, gone).await;
                let mut observed = lock(&observed);
                observed.deleted.push((SystemTime::now(), gone.clone()));
                if !stranded.is_empty() {
                    observed.wrong_deletions += 1;
                    observed.stranded_pods += stranded.len();
                    observed.violations.push(format!(
                        "node {gone} was deleted while these pods ran on it: {}",
                        stranded.join(", ")
                    ));
                }
            }
            known = now;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Pods bound to `node` that are neither finished nor being deleted (the tests run no
/// DaemonSets on the group's nodes).
async fn pods_needing_to_move(pods: &Api<Pod>, node: &str) -> Vec<String> {
    let Ok(list) = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
    else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            !matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .filter_map(|pod| {
            Some(format!(
                "{}/{}",
                pod.metadata.namespace.unwrap_or_else(|| APPS.to_string()),
                pod.metadata.name?
            ))
        })
        .collect()
}

/// Records every change of the Lease's holder with its `acquireTime`, from a watch of the
/// Lease (so no holder is missed, however short its tenure).
async fn watch_lease(client: kube::Client, observed: Arc<Mutex<Observed>>) {
    use futures::StreamExt;
    use kube::runtime::watcher;

    let leases: Api<Lease> = Api::namespaced(client, NAMESPACE);
    let config = watcher::Config::default().fields("metadata.name=cluster-autoscaler");
    let mut events = std::pin::pin!(watcher::watcher(leases, config));
    while let Some(event) = events.next().await {
        let lease = match event {
            Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => lease,
            Ok(_) => continue,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        record_tenure(&observed, lease);
    }
}

fn record_tenure(observed: &Mutex<Observed>, lease: Lease) {
    let Some(spec) = lease.spec else { return };
    let Some(identity) = spec.holder_identity.filter(|h| !h.is_empty()) else {
        return;
    };
    let Some(acquired) = spec.acquire_time else {
        return;
    };
    let acquired = SystemTime::UNIX_EPOCH
        + Duration::from_nanos(u64::try_from(acquired.0.as_nanosecond()).unwrap_or_default());
    let mut observed = lock(observed);
    let changed = observed
        .tenures
        .last()
        .is_none_or(|t| t.identity != identity || t.acquired != acquired);
    if changed {
        observed.tenures.push(Tenure {
            acquired,
            replica: replica_of(&identity),
            identity,
        });
    }
}

/// Samples the group's target size from the kwok provider itself (not through the faulty
/// provider, whose call log would record the reads).
async fn watch_targets(
    kwok: Arc<KwokProvider>,
    observed: Arc<Mutex<Observed>>,
    min: usize,
    max: usize,
) {
    loop {
        if let Ok(groups) = kwok.node_groups().await {
            for group in groups {
                if let Ok(target) = group.target_size().await
                    && (target < min || target > max)
                {
                    lock(&observed).violations.push(format!(
                        "group {} has target size {target}, outside {min}..={max}",
                        group.id()
                    ));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The replica that held the Lease at `time`, by the holders' `acquireTime`s.
fn holder_at(tenures: &[Tenure], time: SystemTime) -> Option<usize> {
    tenures
        .iter()
        .rev()
        .find(|t| t.acquired <= time)
        .and_then(|t| t.replica)
}

/// Calls from a replica that did not hold the Lease when the call arrived.
fn calls_from_non_leaders(calls: &[CallRecord], tenures: &[Tenure]) -> Vec<String> {
    calls
        .iter()
        .filter_map(|call| {
            let replica = replica_of(call.caller.as_deref()?)?;
            let holder = holder_at(tenures, call.arrived);
            (holder != Some(replica)).then(|| {
                let seen: Vec<String> = tenures
                    .iter()
                    .map(|t| format!("{} from {}", t.identity, since_epoch(t.acquired)))
                    .collect();
                format!(
                    "replica-{replica} called the cloud at {} while {} held the Lease \
                     (holders: {}): {call}",
                    since_epoch(call.arrived),
                    holder.map_or("nobody".to_string(), |h| format!("replica-{h}")),
                    seen.join(", ")
                )
            })
        })
        .collect()
}

/// A wall-clock time as seconds since the epoch, to compare with the replicas' logs.
fn since_epoch(time: SystemTime) -> String {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:03}", since.as_secs(), since.subsec_millis())
}

/// Nodes the cloud deleted in more than one call.
fn nodes_deleted_twice(calls: &[CallRecord]) -> Vec<String> {
    let mut deleted: BTreeMap<&str, usize> = BTreeMap::new();
    for call in calls {
        let done = matches!(
            call.carried_out.as_ref().unwrap_or(&call.result),
            CallResult::Ok
        );
        if call.method == Method::DeleteNodes && done {
            for node in &call.details.nodes {
                *deleted.entry(node.name.as_str()).or_default() += 1;
            }
        }
    }
    deleted
        .into_iter()
        .filter(|(_, times)| *times > 1)
        .map(|(node, times)| format!("node {node} was deleted by {times} DeleteNodes calls"))
        .collect()
}
