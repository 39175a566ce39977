//! Choosing each node group's template (docs/behaviour.md SU-102): a good real node of the group,
//! else the one cached from an earlier loop (while younger than `--node-info-cache-expire-time`,
//! SU-108), else the provider's `TemplateNodeInfo()` (with the DaemonSet pods that would start on
//! it), else — as a last resort — any real node of the group.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::dra::{ResourceSlice, complete_pools_by_driver};
use ferroscale_model::taints::{TO_BE_DELETED, first_untolerated};
use ferroscale_model::{CsiNode, DaemonSet, Node, Pod, PodPhase, Timestamp};

use crate::cloud::{CloudError, NodeGroup, NodeTemplate};
use crate::options::AutoscalingOptions;
use crate::scale_up::sanitize_template;

/// A real node is a good example only once its readiness has been stable this long.
pub const STABLE_READINESS: Duration = Duration::from_secs(60);

/// Templates taken from real nodes, kept per group for when the group has no good node.
#[derive(Debug, Clone, Default)]
pub struct TemplateCache {
    by_group: HashMap<String, CachedTemplate>,
    /// Complete DRA device pools per driver of each group's last template, whatever its source:
    /// a real node with fewer is not a good example (docs/dra.md DRA-129).
    device_pools: HashMap<String, BTreeMap<String, usize>>,
}

/// A template and when it was last taken from a good real node.
#[derive(Debug, Clone)]
struct CachedTemplate {
    template: NodeTemplate,
    added: Timestamp,
}

impl TemplateCache {
    /// Drops the entries of groups that no longer exist.
    pub fn retain_groups(&mut self, group_ids: &[&str]) {
        self.by_group.retain(|g, _| group_ids.contains(&g.as_str()));
        self.device_pools
            .retain(|g, _| group_ids.contains(&g.as_str()));
    }

    /// Remembers the device pools of the template chosen for `group_id` this loop.
    fn chosen(&mut self, group_id: &str, template: &NodeTemplate) {
        let pools = complete_pools_by_driver(&template.resource_slices);
        if pools.is_empty() {
            self.device_pools.remove(group_id);
        } else {
            self.device_pools.insert(group_id.to_string(), pools);
        }
    }

    /// Whether `slices`, a real node's, hold at least the complete pools of every driver that the
    /// group's last template had: otherwise the node's devices are not all published yet.
    fn has_expected_devices(&self, group_id: &str, slices: &[ResourceSlice]) -> bool {
        let Some(expected) = self.device_pools.get(group_id) else {
            return true;
        };
        let published = complete_pools_by_driver(slices);
        expected
            .iter()
            .all(|(driver, count)| published.get(driver).copied().unwrap_or(0) >= *count)
    }
}

/// Whether `node` may serve as its group's template: Ready for at least a minute, not cordoned,
/// not being deleted.
fn good_example(node: &Node, now: Timestamp) -> bool {
    node.is_ready()
        && node
            .conditions
            .last_transition
            .is_none_or(|t| now.since(t) >= STABLE_READINESS)
        && !node.unschedulable
        && !node.has_taint(TO_BE_DELETED)
}

/// Whether a DaemonSet would run a pod on `node`: node selector, required node affinity and
/// NoSchedule/NoExecute taints.
pub fn daemonset_runs_on(daemonset: &DaemonSet, node: &Node) -> bool {
    let pod = &daemonset.pod_template;
    pod.node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v))
        && pod
            .required_node_affinity
            .as_ref()
            .is_none_or(|a| a.matches(&node.name, &node.labels))
        && first_untolerated(&node.taints, &pod.tolerations).is_none()
}

/// Adds, for every DaemonSet that should run on the template's node and has no pod there yet, the
/// pod it would start.
fn add_daemonset_pods(template: &mut NodeTemplate, daemonsets: &[DaemonSet]) {
    for daemonset in daemonsets {
        let present = template.pods.iter().any(|p| {
            p.controller()
                .is_some_and(|o| o.kind == "DaemonSet" && o.name == daemonset.name)
                && p.namespace == daemonset.namespace
        });
        if present || !daemonset_runs_on(daemonset, &template.node) {
            continue;
        }
        let mut pod: Pod = daemonset.pod_template.clone();
        pod.namespace = daemonset.namespace.as_str().into();
        pod.name = ferroscale_model::format_compact!("{}-{}", daemonset.name, template.node.name);
        pod.uid = ferroscale_model::format_compact!("uid-{}-{}", daemonset.uid, template.node.name);
        pod.node_name = Some(template.node.name.as_str().into());
        pod.phase = PodPhase::Running;
        if pod.controller().is_none() {
            pod.owner_references.push(ferroscale_model::OwnerRef {
                api_version: "apps/v1".to_string(),
                kind: "DaemonSet".to_string(),
                name: daemonset.name.clone(),
                uid: daemonset.uid.clone(),
                controller: true,
            });
        }
        template.pods.push(pod);
    }
}

/// Where a group's template came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateSource {
    RealNode,
    Cache,
    Provider,
    UnreadyNode,
}

/// The nodes of a group a template may be built from at `now`, the ones [`choose_template`] asks
/// `pods_on` about: the first good example, else the first node (used when the provider has no
/// template). Gather indexes the bound pods of these nodes only.
pub fn example_nodes(nodes: &[Arc<Node>], now: Timestamp) -> impl Iterator<Item = &Node> {
    let good = nodes.iter().find(|n| good_example(n, now));
    good.or(nodes.first()).into_iter().map(|n| &**n)
}

/// The template of `group` at `now`. `nodes` are the group's registered nodes, `pods_on` gives
/// the pods bound to a node, `csi_node_of` its CSINode and `slices_of` its node-local
/// ResourceSlices (a template built from a real node keeps the node's volume limits and devices,
/// docs/dra.md DRA-122). Updates the cache when a good real node is found. The error is
/// `TemplateNodeInfo()`'s when it was asked and failed (other than "not implemented").
#[allow(clippy::too_many_arguments)]
pub async fn choose_template(
    group: &dyn NodeGroup,
    nodes: &[Arc<Node>],
    pods_on: &dyn Fn(&str) -> Vec<Arc<Pod>>,
    csi_node_of: &dyn Fn(&str) -> Option<CsiNode>,
    slices_of: &dyn Fn(&str) -> Vec<ResourceSlice>,
    daemonsets: &[DaemonSet],
    cache: &mut TemplateCache,
    now: Timestamp,
    options: &AutoscalingOptions,
) -> (Option<(NodeTemplate, TemplateSource)>, Option<CloudError>) {
    let from_node = |node: &Node| NodeTemplate {
        node: node.clone(),
        pods: pods_on(&node.name).iter().map(|p| (**p).clone()).collect(),
        csi_node: csi_node_of(&node.name),
        resource_slices: slices_of(&node.name),
    };
    let usable = |node: &Node| {
        good_example(node, now) && cache.has_expected_devices(group.id(), &slices_of(&node.name))
    };
    let example = nodes.iter().find(|n| usable(n)).cloned();
    let (template, error) = pick_template(
        group,
        example.as_deref(),
        nodes,
        &from_node,
        daemonsets,
        cache,
        now,
        options,
    )
    .await;
    if let Some((template, _)) = &template {
        cache.chosen(group.id(), template);
    }
    (template, error)
}

/// The first source of [`choose_template`] that gives a template; `example` is the group's first
/// good real node, if any.
#[allow(clippy::too_many_arguments)]
async fn pick_template(
    group: &dyn NodeGroup,
    example: Option<&Node>,
    nodes: &[Arc<Node>],
    from_node: &dyn Fn(&Node) -> NodeTemplate,
    daemonsets: &[DaemonSet],
    cache: &mut TemplateCache,
    now: Timestamp,
    options: &AutoscalingOptions,
) -> (Option<(NodeTemplate, TemplateSource)>, Option<CloudError>) {
    if let Some(node) = example {
        let mut template = sanitize_template(&from_node(node), group.id(), "template", options);
        if options.force_ds {
            add_daemonset_pods(&mut template, daemonsets);
        }
        cache.by_group.insert(
            group.id().to_string(),
            CachedTemplate {
                template: template.clone(),
                added: now,
            },
        );
        return (Some((template, TemplateSource::RealNode)), None);
    }
    // An entry older than --node-info-cache-expire-time is dropped, as upstream does, and the
    // provider's template is asked for instead (docs/behaviour.md SU-108).
    if let Some(cached) = cache.by_group.get(group.id()) {
        if now.since(cached.added) > options.node_info_cache_expire_time {
            cache.by_group.remove(group.id());
        } else {
            return (Some((cached.template.clone(), TemplateSource::Cache)), None);
        }
    }
    // Errors other than "not implemented" are returned for the loop's outcome; either way the
    // next source is tried.
    let error = match group.template_node_info().await {
        Ok(provided) => {
            let mut template = sanitize_template(&provided, group.id(), "template", options);
            add_daemonset_pods(&mut template, daemonsets);
            return (Some((template, TemplateSource::Provider)), None);
        }
        Err(CloudError::NotImplemented) => None,
        Err(error) => Some(error),
    };
    let Some(node) = nodes.first() else {
        return (None, error);
    };
    let mut template = sanitize_template(&from_node(node), group.id(), "template", options);
    if options.force_ds {
        add_daemonset_pods(&mut template, daemonsets);
    }
    (Some((template, TemplateSource::UnreadyNode)), error)
}
