//! Gather, the cloud's half: every node group's instances, target size,
//! options, template and price, which group each node belongs to, the provider's resource limits
//! and scale-down vetoes.
//!
//! A call that fails does not stop the loop: its answer is replaced by a safe default (a group
//! whose target cannot be read is not ready for scale-up, a group without instances is observed
//! from its nodes, a missing price falls back to the expander's estimate) and the failure is kept,
//! typed, as a [`GatherFailure`] in the loop's outcome, where the binary logs and counts it.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use ferroscale_model::dra::{ResourceSlice, complete_pools_by_driver};
use ferroscale_model::{Node, Pod, Timestamp};
use futures::StreamExt;

use crate::FastMap;
use crate::cloud::{CloudError, CloudProvider, Instance, NodeGroup, ResourceLimits};
use crate::cluster_state::GroupObservation;
use crate::kubernetes::ClusterObjects;
use crate::options::{AutoscalingOptions, ExpanderName};
use crate::scale_up::NodeGroupView;

use super::templates::{self, TemplateCache};

/// How many NodeGroupForNode calls may be in flight at once while gathering.
const NODE_GROUP_LOOKUP_CONCURRENCY: usize = 16;

/// A provider call made while gathering, by its upstream name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GatherCall {
    /// `CloudProvider.GetResourceLimiter()`.
    ResourceLimits,
    /// `NodeGroup.Nodes()`: the group's instances.
    Nodes,
    /// `NodeGroup.TargetSize()`.
    TargetSize,
    /// `NodeGroup.GetOptions()`.
    GetOptions,
    /// `NodeGroup.TemplateNodeInfo()`.
    TemplateNodeInfo,
    /// `CloudProvider.NodeGroupForNode()`.
    NodeGroupForNode,
    /// `PricingModel.NodePrice()`.
    NodePrice,
}

impl GatherCall {
    /// The upstream method name.
    pub fn as_str(self) -> &'static str {
        match self {
            GatherCall::ResourceLimits => "GetResourceLimiter",
            GatherCall::Nodes => "Nodes",
            GatherCall::TargetSize => "TargetSize",
            GatherCall::GetOptions => "GetOptions",
            GatherCall::TemplateNodeInfo => "TemplateNodeInfo",
            GatherCall::NodeGroupForNode => "NodeGroupForNode",
            GatherCall::NodePrice => "NodePrice",
        }
    }
}

impl fmt::Display for GatherCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a failed gather call was about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GatherSubject {
    /// The provider as a whole (resource limits).
    Provider,
    /// A node group, by id.
    Group(String),
    /// A node, by name (NodeGroupForNode).
    Node(String),
}

impl fmt::Display for GatherSubject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GatherSubject::Provider => f.write_str("the cloud provider"),
            GatherSubject::Group(id) => write!(f, "node group {id}"),
            GatherSubject::Node(name) => write!(f, "node {name}"),
        }
    }
}

/// A gather call that failed; the loop went on without its answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} for {subject} failed: {error}")]
pub struct GatherFailure {
    pub call: GatherCall,
    pub subject: GatherSubject,
    pub error: CloudError,
}

impl GatherFailure {
    fn of_group(call: GatherCall, group: &str, error: CloudError) -> GatherFailure {
        GatherFailure {
            call,
            subject: GatherSubject::Group(group.to_string()),
            error,
        }
    }
}

/// An optional method's answer: "not implemented" is an answer (use the default), anything else
/// a failure.
fn optional<T>(answer: Result<T, CloudError>) -> Result<Option<T>, CloudError> {
    match answer {
        Ok(value) => Ok(Some(value)),
        Err(CloudError::NotImplemented) => Ok(None),
        Err(error) => Err(error),
    }
}

/// What gather produced for the rest of the iteration.
pub(super) struct Gathered {
    pub(super) objects: ClusterObjects,
    pub(super) groups: Vec<Arc<dyn NodeGroup>>,
    pub(super) views: Vec<NodeGroupView>,
    /// Node name → index into `groups`.
    pub(super) group_of_node: FastMap<String, usize>,
    /// Per group (index into `groups`): its registered nodes, in the order of `objects.nodes`
    /// (the nodes `group_of_node` maps to it).
    pub(super) nodes_of_group: Vec<Vec<Arc<Node>>>,
    /// Per group: `Nodes()` (`None` when the call failed).
    pub(super) instances: Vec<Option<Vec<Instance>>>,
    /// Nodes of a group that the provider keeps out of scale-down this loop
    /// (`CloudProvider::scale_down_vetoes`).
    pub(super) scale_down_vetoed: HashSet<String>,
    /// Provider limits replacing `--cores-total`/`--memory-total`/`--gpu-total`; `None` when the
    /// provider has none or they could not be read.
    pub(super) resource_limits: Option<ResourceLimits>,
    /// Calls that failed, in the order they were made.
    pub(super) failures: Vec<GatherFailure>,
}

impl Gathered {
    /// Nodes whose `NodeGroupForNode` failed this loop.
    pub(super) fn lookup_failed_nodes(&self) -> HashSet<String> {
        self.failures
            .iter()
            .filter(|f| f.call == GatherCall::NodeGroupForNode)
            .filter_map(|f| match &f.subject {
                GatherSubject::Node(name) => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    /// A copy of what was gathered, for [`super::LoopCapture`].
    pub(super) fn capture(
        &self,
        now: Timestamp,
        options: &AutoscalingOptions,
    ) -> super::LoopCapture {
        super::LoopCapture {
            now,
            objects: self.objects.clone(),
            node_groups: self.views.clone(),
            group_of_node: self
                .group_of_node
                .iter()
                .filter_map(|(node, i)| Some((node.clone(), self.groups.get(*i)?.id().to_string())))
                .collect(),
            options: options.clone(),
        }
    }

    /// What cluster-state needs of each group: its view, its instances (when `Nodes()`
    /// answered) and its registered nodes.
    pub(super) fn observations(&self) -> Vec<GroupObservation> {
        let slices_by_node = node_local_slices(&self.objects.dra.slices);
        self.views
            .iter()
            .enumerate()
            .map(|(i, view)| {
                let nodes = self.nodes_of_group.get(i).cloned().unwrap_or_default();
                let instances = self.instances.get(i).cloned().flatten();
                let known = instances.is_some();
                let mut observation =
                    GroupObservation::new(view.clone(), instances.unwrap_or_default(), nodes);
                observation.instances_known = known;
                // docs/dra.md DRA-129: a node with fewer complete device pools than its
                // template has not published its devices yet.
                if let Some(template) = &view.template {
                    observation.template_device_pools =
                        complete_pools_by_driver(&template.resource_slices);
                }
                if !observation.template_device_pools.is_empty() {
                    observation.node_device_pools = observation
                        .nodes
                        .iter()
                        .filter_map(|node| {
                            let slices = slices_by_node.get(node.name.as_str())?;
                            let pools = complete_pools_by_driver(slices.iter().copied());
                            Some((node.name.clone(), pools))
                        })
                        .collect();
                }
                observation
            })
            .collect()
    }
}

/// The cluster's node-local ResourceSlices by node name: what a template built from a real node
/// carries (docs/dra.md DRA-122) and what its readiness is judged by (DRA-129).
fn node_local_slices(slices: &[Arc<ResourceSlice>]) -> HashMap<&str, Vec<&ResourceSlice>> {
    let mut by_node: HashMap<&str, Vec<&ResourceSlice>> = HashMap::new();
    for slice in slices {
        if let Some(node) = slice.node_name() {
            by_node.entry(node).or_default().push(slice);
        }
    }
    by_node
}

/// Reads the node groups: which node belongs to which, targets, instances, options, templates and
/// prices, and the provider's resource limits.
pub(super) async fn gather_groups(
    cloud: &dyn CloudProvider,
    groups: Vec<Arc<dyn NodeGroup>>,
    objects: ClusterObjects,
    template_cache: &mut TemplateCache,
    now: Timestamp,
    options: &AutoscalingOptions,
) -> Gathered {
    let mut failures = Vec::new();
    // Per group, concurrently: instances, target size and options. A remote provider then
    // costs a few round trips per loop, not one per group after another.
    let per_group = futures::future::join_all(groups.iter().map(|group| async move {
        futures::join!(group.nodes(), group.target_size(), group.get_options())
    }))
    .await;
    let per_group: Vec<_> = groups
        .iter()
        .zip(per_group)
        .map(|(group, (instances, target, group_options))| {
            let instances = instances
                .map_err(|e| {
                    failures.push(GatherFailure::of_group(GatherCall::Nodes, group.id(), e))
                })
                .ok();
            let target = target
                .map_err(|e| {
                    failures.push(GatherFailure::of_group(
                        GatherCall::TargetSize,
                        group.id(),
                        e,
                    ))
                })
                .ok();
            let group_options = optional(group_options)
                .map_err(|e| {
                    failures.push(GatherFailure::of_group(
                        GatherCall::GetOptions,
                        group.id(),
                        e,
                    ))
                })
                .ok()
                .flatten()
                .flatten();
            (instances, target, group_options)
        })
        .collect();
    // A node whose providerID is an instance of a group belongs to that group; only the
    // other nodes are asked about with NodeGroupForNode (concurrently), so the calls per loop
    // grow with the nodes outside any group, not with every node.
    let mut group_of_instance: FastMap<&str, usize> = FastMap::default();
    for (i, (instances, _, _)) in per_group.iter().enumerate() {
        for instance in instances.iter().flatten() {
            group_of_instance.entry(instance.id.as_str()).or_insert(i);
        }
    }
    let mut group_of_node = FastMap::default();
    let mut unresolved = Vec::new();
    for node in &objects.nodes {
        match group_of_instance.get(node.provider_id.as_str()) {
            Some(i) if !node.provider_id.is_empty() => {
                group_of_node.insert(node.name.clone(), *i);
            }
            _ => unresolved.push(node),
        }
    }
    let answers: Vec<_> = futures::stream::iter(unresolved)
        .map(|node| async move { (node, cloud.node_group_for_node(node).await) })
        .buffer_unordered(NODE_GROUP_LOOKUP_CONCURRENCY)
        .collect()
        .await;
    let mut lookup_failures = Vec::new();
    for (node, answer) in answers {
        match answer {
            Ok(Some(group)) => {
                if let Some(i) = groups.iter().position(|g| g.id() == group.id()) {
                    group_of_node.insert(node.name.clone(), i);
                }
            }
            Ok(None) => {}
            Err(error) => lookup_failures.push(GatherFailure {
                call: GatherCall::NodeGroupForNode,
                subject: GatherSubject::Node(node.name.clone()),
                error,
            }),
        }
    }
    // The lookups finish in any order; the outcome lists them by node name.
    lookup_failures.sort_by_key(|failure| failure.subject.clone());
    failures.extend(lookup_failures);
    // Each group's registered nodes, in the cluster's order, in one pass over the nodes.
    let mut nodes_of_group: Vec<Vec<Arc<Node>>> = vec![Vec::new(); groups.len()];
    for node in &objects.nodes {
        if let Some(nodes) = group_of_node
            .get(&node.name)
            .and_then(|&i| nodes_of_group.get_mut(i))
        {
            nodes.push(node.clone());
        }
    }
    // Only the nodes templates may be built from need their pods: one per group, not every node.
    let examples = nodes_of_group
        .iter()
        .flat_map(|nodes| templates::example_nodes(nodes, now))
        .map(|node| node.name.as_str());
    let pods_of_nodes = PodsOfNodes::new(&objects.pods, examples);
    let pods_on = |node: &str| pods_of_nodes.pods_on(node);
    let csi_node_of = |node: &str| {
        objects
            .volumes
            .csi_nodes
            .iter()
            .find(|c| c.node_name == node)
            .map(|c| (**c).clone())
    };
    // A template built from a real node brings the node's own devices (docs/dra.md DRA-122).
    let slices_by_node = node_local_slices(&objects.dra.slices);
    let slices_of = |node: &str| -> Vec<ResourceSlice> {
        slices_by_node
            .get(node)
            .map(|slices| slices.iter().map(|s| (*s).clone()).collect())
            .unwrap_or_default()
    };
    let ids: Vec<&str> = groups.iter().map(|g| g.id()).collect();
    template_cache.retain_groups(&ids);

    let mut views = Vec::with_capacity(groups.len());
    let mut instances = Vec::with_capacity(groups.len());
    for ((group, (group_instances, target, group_options)), nodes) in
        groups.iter().zip(per_group).zip(&nodes_of_group)
    {
        let (template, template_error) = templates::choose_template(
            group.as_ref(),
            nodes,
            &pods_on,
            &csi_node_of,
            &slices_of,
            &objects.daemonsets,
            template_cache,
            now,
            options,
        )
        .await;
        if let Some(error) = template_error {
            failures.push(GatherFailure::of_group(
                GatherCall::TemplateNodeInfo,
                group.id(),
                error,
            ));
        }
        let mut view = NodeGroupView::new(
            group.id(),
            group.min_size(),
            group.max_size(),
            target.unwrap_or(0),
            template.map(|(t, _)| t),
        );
        view.exists = group.exist();
        view.options = group_options.unwrap_or_default();
        // A group whose target cannot be read is not ready for scale-up.
        view.healthy = target.is_some();
        views.push(view);
        instances.push(group_instances);
    }
    if options.expander.contains(&ExpanderName::Price) {
        // One price per group template and loop; a group without a price falls back to the
        // expander's estimate from the template's resources.
        let prices = futures::future::join_all(views.iter().map(|view| async move {
            match &view.template {
                Some(template) => optional(cloud.node_price_per_hour(&template.node, now).await),
                None => Ok(None),
            }
        }))
        .await;
        for (view, price) in views.iter_mut().zip(prices) {
            view.price_per_hour = price
                .map_err(|e| {
                    failures.push(GatherFailure::of_group(GatherCall::NodePrice, &view.id, e))
                })
                .ok()
                .flatten();
        }
    }
    let resource_limits = optional(cloud.resource_limits())
        .map_err(|error| {
            failures.push(GatherFailure {
                call: GatherCall::ResourceLimits,
                subject: GatherSubject::Provider,
                error,
            })
        })
        .ok()
        .flatten()
        .flatten();
    let grouped: Vec<Arc<Node>> = if options.scale_down_enabled {
        objects
            .nodes
            .iter()
            .filter(|n| group_of_node.contains_key(&n.name))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let scale_down_vetoed = if grouped.is_empty() {
        HashSet::new()
    } else {
        cloud.scale_down_vetoes(&grouped).await
    };
    Gathered {
        objects,
        groups,
        views,
        group_of_node,
        nodes_of_group,
        instances,
        scale_down_vetoed,
        resource_limits,
        failures,
    }
}

/// The pods bound to the nodes templates are built from. Indexing only those nodes costs one
/// look-up of a small table per bound pod instead of a copied handle per pod in a table of every
/// node; a node outside the index is answered by a scan, so the answer never depends on which
/// nodes were indexed.
struct PodsOfNodes<'a> {
    pods: &'a [Arc<Pod>],
    indexed: HashMap<&'a str, Vec<&'a Arc<Pod>>, foldhash::fast::RandomState>,
}

impl<'a> PodsOfNodes<'a> {
    fn new(pods: &'a [Arc<Pod>], nodes: impl IntoIterator<Item = &'a str>) -> PodsOfNodes<'a> {
        let mut indexed: HashMap<&str, Vec<&Arc<Pod>>, _> = HashMap::default();
        for node in nodes {
            indexed.entry(node).or_default();
        }
        if !indexed.is_empty() {
            for pod in pods {
                if let Some(on) = pod.node_name.as_deref().and_then(|n| indexed.get_mut(n)) {
                    on.push(pod);
                }
            }
        }
        PodsOfNodes { pods, indexed }
    }

    /// The pods bound to `node`, in the gathered order.
    fn pods_on(&self, node: &str) -> Vec<Arc<Pod>> {
        match self.indexed.get(node) {
            Some(pods) => pods.iter().map(|&p| p.clone()).collect(),
            None => self
                .pods
                .iter()
                .filter(|p| p.node_name.as_deref() == Some(node))
                .cloned()
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(pods: &[Arc<Pod>], node: &str) -> Vec<String> {
        pods.iter()
            .filter(|p| p.node_name.as_deref() == Some(node))
            .map(|p| p.key())
            .collect()
    }

    /// Indexed or not, a node's pods are the ones bound to it, in the gathered order.
    #[test]
    fn pods_of_nodes_answers_every_node_as_a_scan_does() {
        let pods: Vec<Arc<Pod>> = (0..40)
            .map(|i| {
                let mut pod = Pod::new("ns", format!("p{i}"));
                pod.node_name = (i % 5 != 0).then(|| format!("n{}", i % 3));
                Arc::new(pod)
            })
            .collect();
        let index = PodsOfNodes::new(&pods, ["n1", "n1", "absent"]);
        assert_eq!(index.indexed.len(), 2);
        for node in ["n0", "n1", "n2", "absent", "other"] {
            let got: Vec<String> = index.pods_on(node).iter().map(|p| p.key()).collect();
            assert_eq!(got, scan(&pods, node), "{node}");
        }
        assert!(!index.pods_on("n1").is_empty());
    }
}
