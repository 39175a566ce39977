//! Gather, the cloud's half: every node group's instances, target size,
//! options, template and price, which group each node belongs to, the provider's resource limits
//! and scale-down vetoes.
//!
//! A call that fails does not stop the loop: its answer is replaced by a safe default (a group
//! whose target cannot be read is not ready for scale-up, a group without instances is observed
//! from its nodes, a missing price falls back to the expander's estimate) and the failure is kept,
//! typed, as a [`GatherFailure`] in the loop's outcome, where the binary logs and counts it.

use std::cell::{Cell, OnceCell};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use ferroscale_model::dra::{ResourceSlice, complete_pools_by_driver};
use ferroscale_model::{Node, Pod, Timestamp};
use futures::StreamExt;

use crate::cloud::{CloudError, CloudProvider, Instance, NodeGroup, ResourceLimits};
use crate::cluster_state::GroupObservation;
use crate::kubernetes::ClusterObjects;
use crate::options::{AutoscalingOptions, ExpanderName};
use crate::scale_up::NodeGroupView;
use crate::{FastMap, FastSet};

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
    /// Per node of `objects.nodes`, at the same position: its group (index into `groups`).
    pub(super) group_at: Vec<Option<usize>>,
    /// Per group (index into `groups`): its registered nodes, in the order of `objects.nodes`
    /// (the nodes `group_at` gives it). Moved out by [`Gathered::take_observations`].
    pub(super) nodes_of_group: Vec<Vec<Arc<Node>>>,
    /// Per group, per node of `nodes_of_group`: the index of its instance in `instances`, as
    /// matched by providerID. Moved out by [`Gathered::take_observations`].
    pub(super) node_instances_of_group: Vec<Vec<Option<usize>>>,
    /// Per group: `Nodes()` (`None` when the call failed). Moved out by
    /// [`Gathered::take_observations`].
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
                .objects
                .nodes
                .iter()
                .zip(&self.group_at)
                .filter_map(|(node, group)| {
                    let id = self.groups.get((*group)?)?.id();
                    Some((node.name.clone(), id.to_string()))
                })
                .collect(),
            options: options.clone(),
        }
    }

    /// Finds the group of a gathered node, see [`GroupFinder`].
    pub(super) fn group_finder(&self) -> GroupFinder<'_> {
        GroupFinder {
            gathered: self,
            cursor: Cell::new(0),
            by_identity: OnceCell::new(),
            by_name: OnceCell::new(),
        }
    }

    /// What cluster-state needs of each group: its view, its instances (when `Nodes()`
    /// answered) and its registered nodes. Those two move into the observations (nothing else
    /// reads them): at 65,000 nodes a copy is 65,000 instance ids and node handles per loop.
    pub(super) fn take_observations(&mut self) -> Vec<GroupObservation> {
        let slices_by_node = node_local_slices(&self.objects.dra.slices);
        let mut nodes_of_group = std::mem::take(&mut self.nodes_of_group).into_iter();
        let mut instances_of_group = std::mem::take(&mut self.instances).into_iter();
        let mut node_instances = std::mem::take(&mut self.node_instances_of_group).into_iter();
        self.views
            .iter()
            .map(|view| {
                let nodes = nodes_of_group.next().unwrap_or_default();
                let instances = instances_of_group.next().flatten();
                let known = instances.is_some();
                let mut observation =
                    GroupObservation::new(view.clone(), instances.unwrap_or_default(), nodes);
                observation.instances_known = known;
                observation.node_instances = node_instances.next();
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

/// How far past the last node found [`GroupFinder::group_of`] looks before it falls back to a
/// map: the snapshot leaves out a few gathered nodes (still starting, for instance).
const FINDER_LOOKAHEAD: usize = 8;

/// The group (index into [`Gathered::groups`]) of a node, asked once per node of the snapshot by
/// scale-down. A node that is one of the gathered objects — every node the snapshot keeps from
/// the cluster — is found by its address, without reading its name (a cache miss per node at
/// 65,000 nodes). The snapshot lists them in the gathered order, so each is looked for first just
/// past the previous one; then in a map of addresses; any other node (a copy, a placeholder) by
/// its name. Both maps are built the first time they are needed. The gathered list outlives the
/// finder, so an address cannot be reused while it is in use.
pub(super) struct GroupFinder<'a> {
    gathered: &'a Gathered,
    /// Where the next node is looked for first.
    cursor: Cell<usize>,
    /// Every gathered node's address, with its position.
    by_identity: OnceCell<FastMap<usize, usize>>,
    by_name: OnceCell<FastMap<&'a str, usize>>,
}

impl GroupFinder<'_> {
    pub(super) fn group_of(&self, node: &Node) -> Option<usize> {
        let gathered = self.gathered;
        let nodes = &gathered.objects.nodes;
        let address = std::ptr::from_ref(node) as usize;
        let start = self.cursor.get().min(nodes.len());
        let end = (start + FINDER_LOOKAHEAD).min(nodes.len());
        let near = (start..end).find(|&at| Arc::as_ptr(&nodes[at]) as usize == address);
        let at = near.or_else(|| {
            self.by_identity
                .get_or_init(|| {
                    nodes
                        .iter()
                        .enumerate()
                        .map(|(at, node)| (Arc::as_ptr(node) as usize, at))
                        .collect()
                })
                .get(&address)
                .copied()
        });
        if let Some(at) = at {
            self.cursor.set(at + 1);
            return gathered.group_at.get(at).copied().flatten();
        }
        let by_name = self.by_name.get_or_init(|| {
            nodes
                .iter()
                .zip(&gathered.group_at)
                .filter_map(|(node, group)| Some((node.name.as_str(), (*group)?)))
                .collect()
        });
        by_name.get(node.name.as_str()).copied()
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
    example_pods: &mut ExamplePods,
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
    // Instance id → (group, index among the group's instances).
    let instance_count = per_group
        .iter()
        .map(|(instances, _, _)| instances.as_ref().map_or(0, Vec::len))
        .sum();
    let mut group_of_instance: FastMap<&str, (usize, usize)> =
        FastMap::with_capacity_and_hasher(instance_count, Default::default());
    for (i, (instances, _, _)) in per_group.iter().enumerate() {
        for (k, instance) in instances.iter().flatten().enumerate() {
            group_of_instance
                .entry(instance.id.as_str())
                .or_insert((i, k));
        }
    }
    let mut group_at: Vec<Option<usize>> = vec![None; objects.nodes.len()];
    // Per node, its instance in its group when its group was found by its providerID; a node
    // the provider placed by NodeGroupForNode is an instance of no group.
    let mut instance_at: Vec<Option<usize>> = vec![None; objects.nodes.len()];
    let mut unresolved = Vec::new();
    for (at, node) in objects.nodes.iter().enumerate() {
        match group_of_instance.get(node.provider_id.as_str()) {
            Some(&(group, instance)) if !node.provider_id.is_empty() => {
                group_at[at] = Some(group);
                instance_at[at] = Some(instance);
            }
            _ => unresolved.push((at, node)),
        }
    }
    let answers: Vec<_> = futures::stream::iter(unresolved)
        .map(|(at, node)| async move { (at, node, cloud.node_group_for_node(node).await) })
        .buffer_unordered(NODE_GROUP_LOOKUP_CONCURRENCY)
        .collect()
        .await;
    let mut lookup_failures = Vec::new();
    for (at, node, answer) in answers {
        match answer {
            Ok(Some(group)) => {
                if let Some(i) = groups.iter().position(|g| g.id() == group.id()) {
                    group_at[at] = Some(i);
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
    let mut node_instances_of_group: Vec<Vec<Option<usize>>> = vec![Vec::new(); groups.len()];
    for ((node, group), instance) in objects.nodes.iter().zip(&group_at).zip(&instance_at) {
        if let Some(i) = group.filter(|i| *i < groups.len()) {
            nodes_of_group[i].push(node.clone());
            node_instances_of_group[i].push(*instance);
        }
    }
    // Only the nodes templates may be built from need their pods: one per group, not every node.
    let examples = nodes_of_group
        .iter()
        .flat_map(|nodes| templates::example_nodes(nodes, now))
        .map(|node| node.name.as_str());
    example_pods.refresh(&objects.pods, examples);
    let example_pods = &*example_pods;
    let pods_on = |node: &str| example_pods.pods_on(node);
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
            .zip(&group_at)
            .filter(|(_, group)| group.is_some())
            .map(|(node, _)| node.clone())
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
        group_at,
        nodes_of_group,
        node_instances_of_group,
        instances,
        scale_down_vetoed,
        resource_limits,
        failures,
    }
}

/// The pods bound to the nodes templates are built from, kept across loops while the gathered
/// pod list is the same list: a loop over a cluster whose pods did not change reads none of them.
/// Indexing only the example nodes costs one look-up of a small table per bound pod when the
/// list changed; a node outside the index is answered by a scan, so the answer never depends on
/// which nodes were indexed.
#[derive(Default)]
pub(super) struct ExamplePods {
    /// The list `by_node` was built from; holding it keeps `Arc::ptr_eq` meaningful.
    pods: Arc<Vec<Arc<Pod>>>,
    by_node: FastMap<String, Vec<Arc<Pod>>>,
}

impl ExamplePods {
    /// Makes `nodes`' pods in `pods` available to [`ExamplePods::pods_on`]; reads the pods only
    /// when the list is not the one of the last call or a node was not indexed then.
    fn refresh<'a>(&mut self, pods: &Arc<Vec<Arc<Pod>>>, nodes: impl IntoIterator<Item = &'a str>) {
        let nodes: FastSet<&str> = nodes.into_iter().collect();
        let same_list = Arc::ptr_eq(&self.pods, pods);
        if same_list && nodes.iter().all(|node| self.by_node.contains_key(*node)) {
            return;
        }
        self.pods = pods.clone();
        self.by_node.clear();
        if nodes.is_empty() {
            return;
        }
        let mut indexed: FastMap<&str, Vec<Arc<Pod>>> =
            nodes.iter().map(|node| (*node, Vec::new())).collect();
        for pod in pods.iter() {
            if let Some(on) = pod.node_name.as_deref().and_then(|n| indexed.get_mut(n)) {
                on.push(pod.clone());
            }
        }
        self.by_node = indexed
            .into_iter()
            .map(|(node, pods)| (node.to_string(), pods))
            .collect();
    }

    /// The pods bound to `node`, in the gathered order.
    fn pods_on(&self, node: &str) -> Vec<Arc<Pod>> {
        match self.by_node.get(node) {
            Some(pods) => pods.clone(),
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

    fn gathered_with(nodes: &[Arc<Node>], group_at: Vec<Option<usize>>) -> Gathered {
        Gathered {
            objects: ClusterObjects {
                nodes: nodes.to_vec(),
                ..ClusterObjects::default()
            },
            groups: Vec::new(),
            views: Vec::new(),
            group_at,
            nodes_of_group: Vec::new(),
            node_instances_of_group: Vec::new(),
            instances: Vec::new(),
            scale_down_vetoed: HashSet::new(),
            resource_limits: None,
            failures: Vec::new(),
        }
    }

    /// Asked in the gathered order, out of it, about a copy of a gathered node or about a node
    /// never gathered, the finder gives each node's own group.
    #[test]
    fn the_group_finder_answers_by_identity_then_by_name() {
        let nodes: Vec<Arc<Node>> = (0..30)
            .map(|i| Arc::new(Node::new(format!("n{i}"), Default::default())))
            .collect();
        let group_at: Vec<Option<usize>> = (0..30).map(|i| (i % 3 != 0).then_some(i % 2)).collect();
        let gathered = gathered_with(&nodes, group_at.clone());
        let finder = gathered.group_finder();
        // In order, every other node left out (as the snapshot leaves out some).
        for (node, group) in nodes.iter().zip(&group_at).step_by(2) {
            assert_eq!(finder.group_of(node), *group, "{}", node.name);
        }
        // Backwards: found by address, not by the cursor.
        for (node, group) in nodes.iter().zip(&group_at).rev() {
            assert_eq!(finder.group_of(node), *group, "{}", node.name);
        }
        // A copy (another object, the same name) is found by its name.
        let copy = Node::clone(&nodes[4]);
        assert_eq!(finder.group_of(&copy), group_at[4]);
        assert_eq!(
            finder.group_of(&Node::new("elsewhere", Default::default())),
            None
        );
    }

    /// Indexed or not, a node's pods are the ones bound to it, in the gathered order, and a new
    /// list is read again.
    #[test]
    fn example_pods_answer_every_node_as_a_scan_does() {
        let list = |bound: &dyn Fn(usize) -> Option<String>| -> Arc<Vec<Arc<Pod>>> {
            Arc::new(
                (0..40)
                    .map(|i| {
                        let mut pod = Pod::new("ns", format!("p{i}"));
                        pod.node_name = bound(i).map(Into::into);
                        Arc::new(pod)
                    })
                    .collect(),
            )
        };
        let first = list(&|i| (i % 5 != 0).then(|| format!("n{}", i % 3)));
        let mut index = ExamplePods::default();
        index.refresh(&first, ["n1", "n1", "absent"]);
        assert_eq!(index.by_node.len(), 2);
        for node in ["n0", "n1", "n2", "absent", "other"] {
            let got: Vec<String> = index.pods_on(node).iter().map(|p| p.key()).collect();
            assert_eq!(got, scan(&first, node), "{node}");
        }
        assert!(!index.pods_on("n1").is_empty());
        // The same list with a node not indexed before: that node is indexed too.
        index.refresh(&first, ["n1", "n2"]);
        assert_eq!(index.by_node.len(), 2);
        assert_eq!(
            index
                .pods_on("n2")
                .iter()
                .map(|p| p.key())
                .collect::<Vec<_>>(),
            scan(&first, "n2")
        );
        // A new list (every pod moved to n0) is read again, even for the same nodes.
        let second = list(&|_| Some("n0".to_string()));
        index.refresh(&second, ["n1", "n2"]);
        assert!(index.pods_on("n1").is_empty());
        assert_eq!(index.pods_on("n0").len(), 40);
    }
}
