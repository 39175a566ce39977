//! Node templates (docs/behaviour.md SU-103): cleaning an example node into the shape of a
//! brand-new node of its group, and stamping out copies of it into a snapshot, either as upcoming
//! placeholders for nodes already requested or as what-if nodes of the estimator.

use std::sync::Arc;

use ferroscale_model::dra::{DeviceScope, ResourceSlice};
use ferroscale_model::labels::HOSTNAME;
use ferroscale_model::taints::{
    CONDITION_TAINTS, DELETION_CANDIDATE, IGNORE_TAINT_PREFIX, STARTUP_TAINT_PREFIX,
    STATUS_TAINT_PREFIX, TO_BE_DELETED,
};
use ferroscale_model::{Node, Pod, Taint};
use ferroscale_scheduling::{NodeId, Snapshot};

use crate::cloud::NodeTemplate;
use crate::options::AutoscalingOptions;

use super::NodeGroupView;

pub use ferroscale_model::node::{UPCOMING_NODE_ANNOTATION, is_upcoming_node};
/// Label on every template-derived node.
pub const TEMPLATE_NODE_LABEL: &str = "cluster-autoscaler.kubernetes.io/template-node";

/// Whether a taint must not appear on a new node: deletion markers, node-condition taints, and
/// startup and status taints (built-in prefixes plus the `--startup-taint*`/`--status-taint` flags).
fn is_transient_taint(taint: &Taint, options: Option<&AutoscalingOptions>) -> bool {
    let key = taint.key.as_str();
    if key == TO_BE_DELETED
        || key == DELETION_CANDIDATE
        || CONDITION_TAINTS.contains(&key)
        || key.starts_with(STARTUP_TAINT_PREFIX)
        || key.starts_with(IGNORE_TAINT_PREFIX)
        || key.starts_with(STATUS_TAINT_PREFIX)
    {
        return true;
    }
    options.is_some_and(|o| {
        o.startup_taints.iter().any(|t| t == key)
            || o.status_taints.iter().any(|t| t == key)
            || o.startup_taint_prefixes
                .iter()
                .any(|p| !p.is_empty() && key.starts_with(p.as_str()))
    })
}

/// Turns an example node of `group_id` into a template (docs/behaviour.md SU-103): name
/// `template-node-for-<group>-<suffix>` (hostname label and UID follow), the template-node label,
/// no transient taints, `unschedulable` cleared with `--scale-from-unschedulable`, and only the
/// pods every new node starts with (mirror and DaemonSet pods not being deleted).
///
/// DaemonSet pods that should run on the node but are missing from the example are added by the
/// caller, which has the DaemonSets (`--force-ds`, always for `TemplateNodeInfo()` templates).
pub fn sanitize_template(
    example: &NodeTemplate,
    group_id: &str,
    suffix: &str,
    options: &AutoscalingOptions,
) -> NodeTemplate {
    sanitize(example, group_id, suffix, Some(options))
}

fn sanitize(
    example: &NodeTemplate,
    group_id: &str,
    suffix: &str,
    options: Option<&AutoscalingOptions>,
) -> NodeTemplate {
    let name = format!("template-node-for-{group_id}-{suffix}");
    let mut node = example.node.clone();
    node.taints.retain(|t| !is_transient_taint(t, options));
    node.labels
        .insert(TEMPLATE_NODE_LABEL.to_string(), "true".to_string());
    if options.is_some_and(|o| o.scale_from_unschedulable) {
        node.unschedulable = false;
    }
    node.annotations.remove(UPCOMING_NODE_ANNOTATION);
    let pods = example
        .pods
        .iter()
        .filter(|p| p.deletion_time.is_none() && (p.is_mirror_pod() || p.is_daemonset_pod()))
        .cloned()
        .collect();
    rename_node(&mut node, &name);
    let csi_node = example.csi_node.as_ref().map(|c| c.renamed(&name));
    let resource_slices = template_slices(&example.resource_slices, &name);
    NodeTemplate {
        node,
        pods,
        csi_node,
        resource_slices,
    }
}

/// The node-local ResourceSlices a template node publishes (docs/dra.md DRA-123): each slice is
/// pointed at the template node; its pool keeps its name here, and every copy of the template
/// gets a pool of its own when it is added to a snapshot ([`add_template_copy`]). Slices that are
/// not node-local describe devices the group's nodes share with others, not devices a new node
/// brings, so a template drops them (upstream refuses such a template outright).
fn template_slices(slices: &[ResourceSlice], node_name: &str) -> Vec<ResourceSlice> {
    slices
        .iter()
        .filter(|s| s.node_name().is_some())
        .map(|s| ResourceSlice {
            scope: DeviceScope::Node(node_name.to_string()),
            ..s.clone()
        })
        .collect()
}

fn rename_node(node: &mut Node, name: &str) {
    node.name = name.to_string();
    node.uid = format!("uid-{name}");
    node.provider_id = String::new();
    node.labels.insert(HOSTNAME.to_string(), name.to_string());
}

/// A copy of a (sanitised) template named `name`, with its pods renamed and bound to it: what a
/// new node looks like in the snapshot.
pub(crate) fn instantiate(template: &NodeTemplate, name: &str) -> (Node, Vec<Arc<Pod>>) {
    let mut node = template.node.clone();
    rename_node(&mut node, name);
    let pods = template
        .pods
        .iter()
        .map(|p| {
            let mut pod = p.clone();
            pod.name = ferroscale_model::format_compact!("{}-{name}", p.name);
            pod.uid = ferroscale_model::format_compact!("{}-{name}", p.uid);
            pod.node_name = Some(name.into());
            // A template pod's claims are the example node's claims, allocated there; a copy
            // must not reserve them (docs/dra.md, Differences / Loop).
            pod.resource_claims.clear();
            pod.resource_claim_statuses.clear();
            Arc::new(pod)
        })
        .collect();
    (node, pods)
}

/// Adds a template copy and its pods to the snapshot; returns the new node's handle.
pub(crate) fn add_template_copy(
    snapshot: &mut Snapshot,
    template: &NodeTemplate,
    name: &str,
    annotate_upcoming: bool,
) -> NodeId {
    let (mut node, pods) = instantiate(template, name);
    if annotate_upcoming {
        node.annotations
            .insert(UPCOMING_NODE_ANNOTATION.to_string(), "true".to_string());
    }
    let id = snapshot.add_node(Arc::new(node));
    // The copy's volume limits are its template's (NodeVolumeLimits).
    if let Some(csi_node) = &template.csi_node {
        snapshot.set_simulated_csi_node(csi_node.renamed(name));
    }
    // Its devices are its template's, in pools of its own, so two copies never share a device
    // (docs/dra.md DRA-124).
    if !template.resource_slices.is_empty() {
        let slices = template
            .resource_slices
            .iter()
            .map(|s| s.for_node_copy(name, name))
            .collect();
        snapshot.set_simulated_resource_slices(name, slices);
    }
    for pod in pods {
        snapshot.add_pod(id, pod);
    }
    id
}

/// Adds `count` placeholders for nodes of `group` that were requested but are not ready yet:
/// sanitised template copies (built-in taint rules) with fresh names and UIDs, annotated
/// `cluster-autoscaler.k8s.io/upcoming-node: "true"`, carrying renamed template pods. Names never
/// collide with nodes already in the snapshot. A group without a template gets none.
pub fn inject_upcoming_nodes(snapshot: &mut Snapshot, group: &NodeGroupView, count: usize) {
    let Some(example) = &group.template else {
        return;
    };
    let template = sanitize(example, &group.id, "upcoming", None);
    let mut added = 0;
    let mut index = 0usize;
    while added < count {
        let name = format!("{}-upcoming-{index}", group.id);
        index += 1;
        if snapshot.node_id(&name).is_some() {
            continue;
        }
        add_template_copy(snapshot, &template, &name, true);
        added += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::taints::TaintEffect;
    use ferroscale_model::{OwnerRef, Resources};

    fn example() -> NodeTemplate {
        let mut node = Node::new("real-node-1", Resources::new(4000, 8 << 30));
        node.provider_id = "cloud://i-1".into();
        for key in [
            TO_BE_DELETED,
            "node.kubernetes.io/not-ready",
            "startup-taint.cluster-autoscaler.kubernetes.io/cni",
            "status-taint.cluster-autoscaler.kubernetes.io/gpu-check",
            "example.com/custom-startup",
            "dedicated",
        ] {
            node.taints
                .push(Taint::new(key, "x", TaintEffect::NoSchedule));
        }
        let mut ds = Pod::new("kube-system", "ds-pod");
        ds.owner_references.push(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "DaemonSet".into(),
            name: "ds".into(),
            uid: "ds-uid".into(),
            controller: true,
        });
        ds.requests = Resources::new(100, 0);
        let app = Pod::new("default", "app-pod");
        NodeTemplate {
            node,
            pods: vec![ds, app],
            csi_node: None,
            resource_slices: Vec::new(),
        }
    }

    #[test]
    fn sanitising_strips_transient_taints_and_renames() {
        let mut options = AutoscalingOptions::default();
        options
            .startup_taints
            .push("example.com/custom-startup".into());
        let t = sanitize_template(&example(), "pool-a", "1234", &options);
        assert_eq!(t.node.name, "template-node-for-pool-a-1234");
        assert_eq!(
            t.node.label(HOSTNAME),
            Some("template-node-for-pool-a-1234")
        );
        assert_eq!(t.node.label(TEMPLATE_NODE_LABEL), Some("true"));
        assert_ne!(t.node.uid, example().node.uid);
        let keys: Vec<_> = t.node.taints.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(
            keys,
            vec!["dedicated"],
            "only the real dedication taint survives"
        );
        assert_eq!(t.pods.len(), 1, "only the DaemonSet pod is kept");
        assert_eq!(t.pods[0].name, "ds-pod");
    }

    fn gpu_slice(node: &str, scope: DeviceScope) -> ResourceSlice {
        ResourceSlice {
            name: format!("{node}-gpu"),
            driver: "gpu.example.com".into(),
            pool: node.into(),
            pool_generation: 1,
            pool_slice_count: 1,
            scope,
            devices: vec![ferroscale_model::dra::Device {
                name: "gpu-0".into(),
                ..Default::default()
            }],
            ..ResourceSlice::default()
        }
    }

    /// docs/dra.md DRA-123.
    #[test]
    fn sanitising_points_node_local_slices_at_the_template_node() {
        let mut example = example();
        example.resource_slices = vec![
            gpu_slice("real-node-1", DeviceScope::Node("real-node-1".into())),
            gpu_slice("shared", DeviceScope::AllNodes),
        ];
        let t = sanitize_template(&example, "pool-a", "1234", &AutoscalingOptions::default());
        assert_eq!(
            t.resource_slices.len(),
            1,
            "only node-local slices are kept"
        );
        assert_eq!(
            t.resource_slices[0].node_name(),
            Some("template-node-for-pool-a-1234")
        );
        assert_eq!(t.resource_slices[0].pool, "real-node-1");
    }

    /// docs/dra.md DRA-124: every placeholder publishes the template's devices in a pool of its
    /// own, and a template pod's claims stay with the example node.
    #[test]
    fn upcoming_placeholders_publish_their_own_devices() {
        let mut example = example();
        example.resource_slices = vec![gpu_slice(
            "real-node-1",
            DeviceScope::Node("real-node-1".into()),
        )];
        example.pods[0]
            .resource_claims
            .push(ferroscale_model::dra::PodResourceClaim {
                name: "gpu".into(),
                source: ferroscale_model::dra::PodClaimSource::Claim("ds-claim".into()),
            });
        let mut snapshot = Snapshot::new();
        let group = NodeGroupView::new("pool-a", 0, 10, 2, Some(example));
        inject_upcoming_nodes(&mut snapshot, &group, 2);
        let mut pools = Vec::new();
        for (id, info) in snapshot.nodes() {
            assert!(info.pods.iter().all(|p| !p.has_resource_claims()));
            let node_pools = snapshot.device_pools(id);
            assert_eq!(node_pools.len(), 1, "{}", info.node.name);
            assert_eq!(node_pools[0].total, 1);
            pools.push(node_pools[0].pool.clone());
        }
        pools.dedup();
        assert_eq!(pools.len(), 2, "each placeholder has a pool of its own");
    }

    #[test]
    fn upcoming_placeholders_get_unique_names_and_the_annotation() {
        let mut snapshot = Snapshot::new();
        let group = NodeGroupView::new("pool-a", 0, 10, 2, Some(example()));
        inject_upcoming_nodes(&mut snapshot, &group, 2);
        inject_upcoming_nodes(&mut snapshot, &group, 1);
        assert_eq!(snapshot.node_count(), 3);
        assert_eq!(snapshot.pod_count(), 3, "one DaemonSet pod per placeholder");
        let mut names = Vec::new();
        for (_, info) in snapshot.nodes() {
            assert!(is_upcoming_node(&info.node));
            assert_eq!(info.node.label(HOSTNAME), Some(info.node.name.as_str()));
            assert_eq!(info.requested.cpu_milli, 100);
            assert_eq!(
                info.pods[0].node_name.as_deref(),
                Some(info.node.name.as_str())
            );
            names.push(info.node.name.clone());
        }
        names.dedup();
        assert_eq!(names.len(), 3);
        let none = NodeGroupView::new("pool-b", 0, 10, 2, None);
        inject_upcoming_nodes(&mut snapshot, &none, 2);
        assert_eq!(snapshot.node_count(), 3);
    }
}
