//! One pod's two verdicts and whether they agree: what kube-scheduler did with it (bound to a
//! node, or left unschedulable with its message), and what Ferroscale's filters say for every
//! node of the same cluster state, converted by the same `ferroscale-objects` functions the live
//! binary uses.
//!
//! The rules: a pod the scheduler bound must fit that node for Ferroscale; a pod it left
//! unschedulable must fit no node for Ferroscale, and the reasons must add up the same way as the
//! scheduler's message ("0/3 nodes are available: 1 Insufficient cpu, 2 node(s) ...").

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use ferroscale_model::{DraObjects, VolumeObjects};
use ferroscale_objects::{
    PriorityClasses, csi_node_from_k8s, device_class_from_k8s, namespace_from_k8s, node_from_k8s,
    pod_from_k8s, pv_from_k8s, pvc_from_k8s, resource_claim_from_k8s, resource_slice_from_k8s,
    storage_class_from_k8s,
};
use ferroscale_scheduling::scheduler_config;
use ferroscale_scheduling::{SchedulerProfile, Snapshot, Unfit, VolumeCatalogue, check};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use serde::{Deserialize, Serialize};

/// What kube-scheduler did with a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Bound to this node.
    Bound(String),
    /// `PodScheduled=False`, reason `Unschedulable`, with this message.
    Unschedulable(String),
}

/// The cluster as the scheduler saw it when it decided on one pod, and what it decided: all a
/// replay needs, without a control plane.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observation {
    pub seed: u64,
    pub case: u32,
    pub family: String,
    /// The KubeSchedulerConfiguration both sides were given; `None` for the default profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_config: Option<String>,
    pub namespaces: Vec<Namespace>,
    pub nodes: Vec<Node>,
    /// Pods bound to nodes before this one was created.
    pub bound_pods: Vec<Pod>,
    /// The pod as the API server stored it (admission filled in overhead and defaults).
    pub pod: Pod,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storage_classes: Vec<StorageClass>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<PersistentVolume>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<PersistentVolumeClaim>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub csi_nodes: Vec<CSINode>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_classes: Vec<DeviceClass>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_slices: Vec<ResourceSlice>,
    /// The claims of the case's namespaces, with the allocations the scheduler made for the pods
    /// bound before this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_claims: Vec<ResourceClaim>,
    pub outcome: Outcome,
}

/// Ferroscale's verdict per node of the observation, in the observation's node order.
pub type NodeVerdicts = Vec<(String, Result<(), Unfit>)>;

/// Why Ferroscale could not judge an observation at all.
#[derive(Debug, thiserror::Error)]
pub enum VerdictError {
    #[error("converting {0}")]
    Convert(#[from] ferroscale_objects::ConvertError),
    #[error("the scheduler configuration: {0}")]
    SchedulerConfig(#[from] ferroscale_scheduling::SchedulerConfigError),
}

/// Runs Ferroscale's filters for the observation's pod on each of its nodes.
pub fn ferroscale_verdicts(observation: &Observation) -> Result<NodeVerdicts, VerdictError> {
    let profile = match &observation.scheduler_config {
        Some(text) => scheduler_config::parse(text)?,
        None => SchedulerProfile::default(),
    };
    let mut snapshot = Snapshot::with_scheduler_profile(Arc::new(profile));
    let mut storage = VolumeObjects::default();
    for claim in &observation.claims {
        storage.claims.push(Arc::new(pvc_from_k8s(claim)?));
    }
    for volume in &observation.volumes {
        storage.volumes.push(Arc::new(pv_from_k8s(volume)?));
    }
    for class in &observation.storage_classes {
        storage
            .storage_classes
            .push(Arc::new(storage_class_from_k8s(class)?));
    }
    for csi_node in &observation.csi_nodes {
        storage
            .csi_nodes
            .push(Arc::new(csi_node_from_k8s(csi_node)?));
    }
    snapshot.set_volume_catalogue(Arc::new(VolumeCatalogue::new(&storage)));
    let mut devices = DraObjects::default();
    for class in &observation.device_classes {
        devices
            .classes
            .push(Arc::new(device_class_from_k8s(class)?));
    }
    for slice in &observation.resource_slices {
        devices
            .slices
            .push(Arc::new(resource_slice_from_k8s(slice)?));
    }
    for claim in &observation.resource_claims {
        devices
            .claims
            .push(Arc::new(resource_claim_from_k8s(claim)?));
    }
    snapshot.set_dra_objects(&devices);
    // kube-scheduler always reads CSINodes; upstream's autoscaler does with
    // --enable-csi-node-aware-scheduling.
    snapshot.set_csi_node_limits(true);
    for namespace in &observation.namespaces {
        let namespace = namespace_from_k8s(namespace);
        snapshot.set_namespace_labels(namespace.name, namespace.labels);
    }
    let mut ids = Vec::new();
    for node in &observation.nodes {
        let node = node_from_k8s(node)?;
        let name = node.name.clone();
        ids.push((name, snapshot.add_node(Arc::new(node))));
    }
    let priorities = PriorityClasses::default();
    for pod in &observation.bound_pods {
        let pod = pod_from_k8s(pod, &priorities)?;
        if pod.deletion_time.is_some() || pod.is_terminal() {
            continue;
        }
        if let Some(id) = pod.node_name.as_deref().and_then(|n| snapshot.node_id(n)) {
            snapshot.add_pod(id, Arc::new(pod));
        }
    }
    let mut pod = pod_from_k8s(&observation.pod, &priorities)?;
    // The pod is judged as it was before the scheduler bound it.
    pod.node_name = None;
    Ok(ids
        .into_iter()
        .map(|(name, id)| {
            let verdict = check(&mut snapshot, &pod, id);
            (name, verdict)
        })
        .collect())
}

/// The scheduler's message read back into counts: how many nodes it considered and how many
/// times each reason was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReasonCounts {
    pub nodes: usize,
    pub reasons: BTreeMap<String, usize>,
    /// A PreFilter rejected the pod for every node (its message has no counts).
    pub pre_filter: bool,
}

/// Reads "0/N nodes are available: 2 reason, 1 other reason. preemption: ..." (or, when a
/// PreFilter rejected the pod for every node, "0/N nodes are available: reason.").
pub fn parse_scheduler_message(message: &str) -> Option<ReasonCounts> {
    let rest = message.strip_prefix("0/")?;
    let (nodes, rest) = rest.split_once(" nodes are available: ")?;
    let nodes: usize = nodes.parse().ok()?;
    // The Filter part ends at the first ". "; what follows is PostFilter (preemption) text.
    let filters = rest.split(". ").next()?.trim_end_matches('.');
    let mut reasons = BTreeMap::new();
    let counted = filters.split(", ").all(|item| {
        item.split_once(' ')
            .is_some_and(|(count, _)| count.parse::<usize>().is_ok())
    });
    if counted {
        for item in filters.split(", ") {
            let (count, reason) = item.split_once(' ')?;
            *reasons.entry(reason.to_string()).or_default() += count.parse::<usize>().ok()?;
        }
    } else {
        // A PreFilter's message stands for every node.
        reasons.insert(filters.to_string(), nodes);
    }
    Some(ReasonCounts {
        nodes,
        reasons,
        pre_filter: !counted,
    })
}

/// The scheduler's reason for nodes its NodeAffinity PreFilter left out (the pod's required node
/// affinity names nodes by `metadata.name` in every term): those nodes never reach a Filter.
const NODE_AFFINITY_PRE_FILTER: &str = "node(s) didn't satisfy plugin(s) [NodeAffinity]";

/// The node names the scheduler's NodeAffinity PreFilter narrows the pod to, if it does: when
/// every required term has `metadata.name In` field requirements (intersected within a term,
/// united across terms).
fn pre_filter_node_names(pod: &Pod) -> Option<Vec<String>> {
    let terms = &pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    if terms.is_empty() {
        return None;
    }
    let mut names: Vec<String> = Vec::new();
    for term in terms {
        let mut term_names: Option<Vec<String>> = None;
        for requirement in term.match_fields.iter().flatten() {
            if requirement.key == "metadata.name" && requirement.operator == "In" {
                let values = requirement.values.clone().unwrap_or_default();
                term_names = Some(match term_names {
                    None => values,
                    Some(before) => before.into_iter().filter(|n| values.contains(n)).collect(),
                });
            }
        }
        names.extend(term_names?);
    }
    Some(names)
}

/// The two verdicts on one pod did not agree.
#[derive(Debug, Clone)]
pub struct Disagreement {
    pub observation: Observation,
    pub ferroscale: NodeVerdicts,
    /// What differs, in one sentence.
    pub problem: String,
}

impl Disagreement {
    /// Everything a reader needs to reproduce and judge it: seed, case, both verdicts, and the
    /// objects as YAML (the format of a regression case file).
    pub fn report(&self) -> String {
        let o = &self.observation;
        let mut text = format!(
            "DISAGREEMENT seed={} case={} family={} pod={}/{}: {}\n  kube-scheduler: {:?}\n  ferroscale:\n",
            o.seed,
            o.case,
            o.family,
            o.pod.metadata.namespace.as_deref().unwrap_or_default(),
            o.pod.metadata.name.as_deref().unwrap_or_default(),
            self.problem,
            o.outcome,
        );
        for (node, verdict) in &self.ferroscale {
            let verdict = match verdict {
                Ok(()) => "fits".to_string(),
                Err(unfit) => unfit.to_string(),
            };
            let _ = writeln!(text, "    {node}: {verdict}");
        }
        text.push_str("  objects (a regression case file):\n");
        text.push_str(&observation_yaml(o));
        text
    }
}

/// The observation as a regression case file, without the server-side bookkeeping fields.
pub fn observation_yaml(observation: &Observation) -> String {
    let mut clean = observation.clone();
    let strip = |meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        meta.managed_fields = None;
        meta.resource_version = None;
        meta.creation_timestamp = None;
    };
    clean
        .namespaces
        .iter_mut()
        .for_each(|n| strip(&mut n.metadata));
    for node in &mut clean.nodes {
        strip(&mut node.metadata);
        if let Some(status) = node.status.as_mut() {
            status.node_info = None;
            status.daemon_endpoints = None;
        }
    }
    clean
        .bound_pods
        .iter_mut()
        .for_each(|p| strip(&mut p.metadata));
    strip(&mut clean.pod.metadata);
    clean.claims.iter_mut().for_each(|c| strip(&mut c.metadata));
    clean
        .volumes
        .iter_mut()
        .for_each(|v| strip(&mut v.metadata));
    clean
        .storage_classes
        .iter_mut()
        .for_each(|c| strip(&mut c.metadata));
    clean
        .csi_nodes
        .iter_mut()
        .for_each(|c| strip(&mut c.metadata));
    serde_yaml_ng::to_string(&clean)
        .unwrap_or_else(|error| format!("(the observation could not be written: {error})\n"))
}

/// Whether the scheduler decided on the observed nodes: its message counts them all, or it bound
/// the pod to one of them. If not, its informers had not yet delivered the case's nodes (or still
/// held the previous case's) when it decided: a harness race, not a verdict.
pub fn message_counts_all_nodes(observation: &Observation) -> bool {
    match &observation.outcome {
        Outcome::Bound(node) => observation
            .nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(node.as_str())),
        Outcome::Unschedulable(message) => parse_scheduler_message(message)
            .is_some_and(|counts| counts.nodes == observation.nodes.len()),
    }
}

/// Compares the scheduler's outcome with Ferroscale's verdicts.
pub fn compare(observation: &Observation, ferroscale: &NodeVerdicts) -> Result<(), String> {
    match &observation.outcome {
        Outcome::Bound(node) => match ferroscale.iter().find(|(name, _)| name == node) {
            Some((_, Ok(()))) => Ok(()),
            Some((_, Err(unfit))) => Err(format!(
                "kube-scheduler bound the pod to {node}, Ferroscale rejects that node: {unfit}"
            )),
            None => Err(format!(
                "kube-scheduler bound the pod to {node}, which is not among the observed nodes"
            )),
        },
        Outcome::Unschedulable(message) => {
            let fitting: Vec<&str> = ferroscale
                .iter()
                .filter(|(_, v)| v.is_ok())
                .map(|(n, _)| n.as_str())
                .collect();
            if !fitting.is_empty() {
                return Err(format!(
                    "kube-scheduler found no node, Ferroscale fits the pod on {}",
                    fitting.join(", ")
                ));
            }
            let scheduler = parse_scheduler_message(message)
                .ok_or_else(|| format!("the scheduler's message is not understood: {message}"))?;
            let ours = ferroscale_reasons(observation, ferroscale, scheduler.pre_filter);
            compare_reasons(&scheduler.reasons, &ours)
        }
    }
}

/// Ferroscale's reasons counted like the scheduler's message, with nodes outside the
/// NodeAffinity PreFilter's name set reported as the scheduler reports them.
fn ferroscale_reasons(
    observation: &Observation,
    ferroscale: &NodeVerdicts,
    rejected_in_pre_filter: bool,
) -> BTreeMap<String, usize> {
    // A PreFilter that rejects the pod outright stops the cycle before any node is left out.
    let pre_filtered = if rejected_in_pre_filter {
        None
    } else {
        pre_filter_node_names(&observation.pod)
    };
    let mut reasons = BTreeMap::new();
    for (node, verdict) in ferroscale {
        let Err(unfit) = verdict else { continue };
        let reason = match &pre_filtered {
            Some(names) if !names.contains(node) => NODE_AFFINITY_PRE_FILTER.to_string(),
            _ => unfit.to_string(),
        };
        *reasons.entry(reason).or_default() += 1;
    }
    reasons
}

/// Reasons of the two plugins that give every reason a node fails, where Ferroscale gives the
/// first: NodeResourcesFit (each insufficient resource) and VolumeBinding (each unsatisfied claim).
const VOLUME_BINDING_REASONS: [&str; 3] = [
    "node(s) didn't match PersistentVolume's node affinity",
    "node(s) didn't find available persistent volumes to bind",
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)",
];

/// Reasons of plugins that report several per node ([`VOLUME_BINDING_REASONS`], "Insufficient
/// ...") may count higher on the scheduler's side; every other reason (one per node on both
/// sides) must count the same.
fn compare_reasons(
    scheduler: &BTreeMap<String, usize>,
    ferroscale: &BTreeMap<String, usize>,
) -> Result<(), String> {
    let insufficient =
        |r: &str| r.starts_with("Insufficient ") || VOLUME_BINDING_REASONS.contains(&r);
    let mut differences = Vec::new();
    let all: std::collections::BTreeSet<&String> =
        scheduler.keys().chain(ferroscale.keys()).collect();
    for reason in all {
        let theirs = scheduler.get(reason).copied().unwrap_or(0);
        let ours = ferroscale.get(reason).copied().unwrap_or(0);
        let agrees = if insufficient(reason) {
            ours <= theirs
        } else {
            ours == theirs
        };
        if !agrees {
            differences.push(format!(
                "{reason:?}: kube-scheduler {theirs}, Ferroscale {ours}"
            ));
        }
    }
    if differences.is_empty() {
        Ok(())
    } else {
        Err(format!("the reasons differ: {}", differences.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_with_counts_and_a_preemption_tail_is_read_into_counts() {
        let counts = parse_scheduler_message(
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint \
             {example.com/maintenance: true}. preemption: 0/3 nodes are available: 3 Preemption \
             is not helpful for scheduling.",
        )
        .expect("understood");
        assert_eq!(counts.nodes, 3);
        assert_eq!(
            counts.reasons,
            BTreeMap::from([
                ("Insufficient cpu".to_string(), 1),
                (
                    "node(s) had untolerated taint {example.com/maintenance: true}".to_string(),
                    2
                ),
            ])
        );
    }

    #[test]
    fn a_pre_filter_message_stands_for_every_node() {
        let counts =
            parse_scheduler_message("0/4 nodes are available: pod affinity terms conflict.")
                .expect("understood");
        assert_eq!(
            counts.reasons,
            BTreeMap::from([("pod affinity terms conflict".to_string(), 4)])
        );
    }

    #[test]
    fn only_insufficient_reasons_may_count_higher_on_the_schedulers_side() {
        let scheduler = BTreeMap::from([
            ("Insufficient cpu".to_string(), 2),
            ("Insufficient memory".to_string(), 1),
            ("node(s) were unschedulable".to_string(), 1),
        ]);
        let ferroscale = BTreeMap::from([
            ("Insufficient cpu".to_string(), 2),
            ("node(s) were unschedulable".to_string(), 1),
        ]);
        assert_eq!(compare_reasons(&scheduler, &ferroscale), Ok(()));
        let wrong = BTreeMap::from([
            ("Insufficient memory".to_string(), 2),
            ("node(s) were unschedulable".to_string(), 1),
        ]);
        assert!(compare_reasons(&scheduler, &wrong).is_err());
    }
}
