//! Node templates of the kwok provider (docs/behaviour.md KWOK-101): reading them from YAML,
//! grouping them into node groups with their bounds, preparing them as fake kwok nodes, and
//! stamping out new Node objects.

use std::collections::BTreeMap;

use ferroscale_core::cloud::NodeTemplate;
use ferroscale_core::cloud_node_controller::rules::{CLOUD_LABELS, UNINITIALIZED_TAINT};
use ferroscale_model::{CsiNode, CsiNodeDriver, Pod, PodPhase, ResourceSlice, Resources};
use ferroscale_objects::{node_from_k8s, resource_slice_from_k8s, unknown_field};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, NodeSystemInfo, Taint};
use k8s_openapi::api::resource::v1 as resource;
use thiserror::Error;

use crate::config::{GroupingKey, KwokConfig};

/// Prefix of every prepared template's name.
pub const TEMPLATE_NAME_PREFIX: &str = "kwok-fake-";
/// The annotation kwok looks for to play the kubelet of a node.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
pub const KWOK_NODE_ANNOTATION_VALUE: &str = "fake";
/// The group a node created by this provider belongs to.
pub const GROUP_NAME_ANNOTATION: &str = "cluster-autoscaler.kwok.nodegroup/name";
pub const MIN_COUNT_ANNOTATION: &str = "cluster-autoscaler.kwok.nodegroup/min-count";
pub const MAX_COUNT_ANNOTATION: &str = "cluster-autoscaler.kwok.nodegroup/max-count";
pub const DESIRED_COUNT_ANNOTATION: &str = "cluster-autoscaler.kwok.nodegroup/desired-count";
/// The CSI drivers a group's nodes would report in their CSINode, with their volume limits:
/// `<driver>=<count>` items separated by commas; a count of 0 means no limit.
pub const CSI_DRIVERS_ANNOTATION: &str = "cluster-autoscaler.kwok.nodegroup/csi-drivers";
/// The DRA devices a group's nodes would publish: a YAML (or JSON) list of ResourceSlice `spec`s
/// (docs/behaviour.md KWOK-107). Each becomes a slice local to the node; `pool` may be left out.
pub const RESOURCE_SLICES_ANNOTATION: &str = "cluster-autoscaler.kwok.nodegroup/resource-slices";
/// Whether the provider plays the cloud-controller-manager's part for the group's nodes
/// (docs/behaviour.md KWOK-108): `"true"` (the default) creates initialized Nodes and deletes a
/// Node with its machine; `"false"` makes the group a cloud without one: new Nodes register as a
/// kubelet started with `--cloud-provider=external` does, and a deleted machine leaves its Node.
pub const CLOUD_CONTROLLER_MANAGER_ANNOTATION: &str =
    "cluster-autoscaler.kwok.nodegroup/cloud-controller-manager";
/// Set on the Node a deleted machine of such a group leaves behind.
pub const MACHINE_DELETED_ANNOTATION: &str = "cluster-autoscaler.kwok.nodegroup/machine-deleted";
/// The most slices the annotation may declare: a node publishes one or a few per driver.
pub const MAX_TEMPLATE_SLICES: usize = 32;
pub const DEFAULT_MAX_COUNT: usize = 200;
/// Keeps ordinary pods off the fake nodes unless they tolerate it (unless `nodes.skipTaint`).
pub const KWOK_TAINT_KEY: &str = "kwok-provider";
/// The prefix of every providerID this provider manages.
pub const PROVIDER_ID_PREFIX: &str = "kwok:";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Node names are DNS subdomains; the group name is followed by `-` and five characters.
const MAX_GROUP_NAME_LEN: usize = 253 - 6;

/// Templates that cannot be used. Every variant names the object (document or node), the field and
/// the value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateError {
    #[error("{origin}: document {document}: {reason}")]
    Document {
        origin: String,
        document: usize,
        reason: String,
    },
    #[error("{origin}: node {node}: field {field}: invalid value {value:?}: {reason}")]
    Invalid {
        origin: String,
        node: String,
        field: String,
        value: String,
        reason: String,
    },
    #[error("{origin}: no template node carries the grouping {key}")]
    NoGroups { origin: String, key: String },
}

/// One node group as the templates describe it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    pub id: String,
    pub min_size: usize,
    pub max_size: usize,
    pub desired_size: usize,
    /// The prepared template (fake-node annotations, providerID, taint).
    pub template: Node,
    /// [`CLOUD_CONTROLLER_MANAGER_ANNOTATION`]: whether the provider initializes the group's
    /// Nodes and deletes them with their machines.
    pub cloud_controller_manager: bool,
}

/// Reads Node templates: one or more YAML documents, each a `Node` or a `List` of Nodes.
pub fn parse_template_nodes(text: &str, origin: &str) -> Result<Vec<Node>, TemplateError> {
    use serde::Deserialize;
    let mut nodes = Vec::new();
    for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let document_number = index + 1;
        let doc_error = |reason: String| TemplateError::Document {
            origin: origin.to_string(),
            document: document_number,
            reason,
        };
        let value = serde_yaml_ng::Value::deserialize(document)
            .map_err(|e| doc_error(format!("not YAML: {e}")))?;
        if value.is_null() {
            continue;
        }
        let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        match kind {
            "Node" => nodes.push(node_from_value(value, "").map_err(doc_error)?),
            "List" | "NodeList" => {
                let Some(items) = value.get("items").and_then(|i| i.as_sequence()) else {
                    return Err(doc_error(format!("a {kind} needs an items sequence")));
                };
                for (item_index, item) in items.iter().enumerate() {
                    let item_kind = item.get("kind").and_then(|k| k.as_str()).unwrap_or("Node");
                    if item_kind != "Node" {
                        return Err(doc_error(format!(
                            "items[{item_index}].kind: invalid value {item_kind:?}: only Node templates are allowed"
                        )));
                    }
                    let prefix = format!("items[{item_index}].");
                    nodes.push(node_from_value(item.clone(), &prefix).map_err(doc_error)?);
                }
            }
            other => {
                return Err(doc_error(format!(
                    "kind: invalid value {other:?}: expected Node or List"
                )));
            }
        }
    }
    Ok(nodes)
}

fn node_from_value(value: serde_yaml_ng::Value, path_prefix: &str) -> Result<Node, String> {
    let node: Node = serde_path_to_error::deserialize(value)
        .map_err(|e| format!("{path_prefix}{}: {}", e.path(), e.inner()))?;
    if node.metadata.name.as_deref().unwrap_or("").is_empty() {
        return Err(format!(
            "{path_prefix}metadata.name: a template needs a name"
        ));
    }
    Ok(node)
}

fn node_name(node: &Node) -> String {
    node.metadata.name.clone().unwrap_or_default()
}

/// Whether `name` can start a Node name (`<name>-xxxxx` must be a DNS subdomain).
fn valid_group_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_GROUP_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
}

fn count_annotation(
    origin: &str,
    node: &Node,
    key: &str,
    default: usize,
) -> Result<usize, TemplateError> {
    let Some(value) = node.metadata.annotations.as_ref().and_then(|a| a.get(key)) else {
        return Ok(default);
    };
    value.trim().parse().map_err(|_| TemplateError::Invalid {
        origin: origin.to_string(),
        node: node_name(node),
        field: format!("metadata.annotations[{key}]"),
        value: value.clone(),
        reason: "expected a non-negative integer".to_string(),
    })
}

/// The drivers of the [`CSI_DRIVERS_ANNOTATION`] of a template node (none without it). Every
/// item must be `<driver>=<count>` with a non-empty driver and a count from 0 to 2^31-1.
pub fn csi_drivers(origin: &str, node: &Node) -> Result<Vec<CsiNodeDriver>, TemplateError> {
    let Some(value) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CSI_DRIVERS_ANNOTATION))
    else {
        return Ok(Vec::new());
    };
    let mut drivers: Vec<CsiNodeDriver> = Vec::new();
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let invalid = |reason: &str| TemplateError::Invalid {
            origin: origin.to_string(),
            node: node_name(node),
            field: format!("metadata.annotations[{CSI_DRIVERS_ANNOTATION}]"),
            value: item.to_string(),
            reason: reason.to_string(),
        };
        let (name, count) = item
            .split_once('=')
            .map(|(n, c)| (n.trim(), c.trim()))
            .ok_or_else(|| invalid("expected <driver>=<count>"))?;
        if name.is_empty() {
            return Err(invalid(
                "expected <driver>=<count>: the driver name is empty",
            ));
        }
        let count: i32 = count
            .parse()
            .ok()
            .filter(|c: &i32| *c >= 0)
            .ok_or_else(|| invalid("the count must be an integer from 0 to 2147483647"))?;
        if drivers.iter().any(|d| d.name == name) {
            return Err(invalid("the driver is listed twice"));
        }
        drivers.push(CsiNodeDriver {
            name: name.to_string(),
            allocatable_count: (count > 0).then_some(count),
            topology_keys: Vec::new(),
        });
    }
    Ok(drivers)
}

/// The node-local ResourceSlices the [`RESOURCE_SLICES_ANNOTATION`] of a (prepared) template node
/// declares, none without it. Each entry is a ResourceSlice `spec` as `kubectl` prints it, with
/// `driver` and `devices`; the provider makes it local to the node (`nodeName` is the node's, and
/// `nodeName`, `nodeSelector`, `allNodes` and `perDeviceNodeSelection` may not be written) and,
/// when `pool` is left out, the only slice of a pool of its own (`<node>-<index>`, generation 0).
/// Every value is checked by the same conversion as a ResourceSlice read from the cluster; the
/// error names the node, the annotation and the entry.
pub fn resource_slices(origin: &str, node: &Node) -> Result<Vec<ResourceSlice>, TemplateError> {
    let Some(text) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RESOURCE_SLICES_ANNOTATION))
    else {
        return Ok(Vec::new());
    };
    let name = node_name(node);
    let invalid = |value: &str, reason: String| TemplateError::Invalid {
        origin: origin.to_string(),
        node: name.clone(),
        field: format!("metadata.annotations[{RESOURCE_SLICES_ANNOTATION}]"),
        value: value.to_string(),
        reason,
    };
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text)
        .map_err(|e| invalid(text, format!("not YAML or JSON: {e}")))?;
    let entries = match value {
        serde_yaml_ng::Value::Null => return Ok(Vec::new()),
        serde_yaml_ng::Value::Sequence(entries) => entries,
        _ => {
            return Err(invalid(
                text,
                "expected a list of ResourceSlice specs ([{driver: ..., devices: [...]}])"
                    .to_string(),
            ));
        }
    };
    if entries.len() > MAX_TEMPLATE_SLICES {
        return Err(invalid(
            &format!("{} entries", entries.len()),
            format!("at most {MAX_TEMPLATE_SLICES} slices are accepted"),
        ));
    }
    let mut slices = Vec::with_capacity(entries.len());
    for (i, mut entry) in entries.into_iter().enumerate() {
        let at = |reason: String| invalid(text, format!("[{i}]: {reason}"));
        let Some(fields) = entry.as_mapping_mut() else {
            return Err(at("expected a ResourceSlice spec (a mapping)".to_string()));
        };
        for key in [
            "nodeName",
            "nodeSelector",
            "allNodes",
            "perDeviceNodeSelection",
        ] {
            if fields.contains_key(key) {
                return Err(at(format!(
                    "{key} may not be set: a template's slices are local to its node"
                )));
            }
        }
        fields.insert("nodeName".into(), name.clone().into());
        if !fields.contains_key("pool") {
            let mut pool = serde_yaml_ng::Mapping::new();
            pool.insert("name".into(), format!("{name}-{i}").into());
            pool.insert("generation".into(), 0.into());
            pool.insert("resourceSliceCount".into(), 1.into());
            fields.insert("pool".into(), pool.into());
        }
        let spec: resource::ResourceSliceSpec = serde_path_to_error::deserialize(entry.clone())
            .map_err(|e| at(format!("{}: {}", e.path(), e.inner())))?;
        if let Some(unknown) = unknown_field(&entry, &spec) {
            return Err(at(format!("unknown field {unknown}")));
        }
        let slice = resource::ResourceSlice {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(format!("{name}-{i}")),
                ..Default::default()
            },
            spec,
        };
        slices.push(resource_slice_from_k8s(&slice).map_err(|e| at(e.to_string()))?);
    }
    Ok(slices)
}

/// The [`CLOUD_CONTROLLER_MANAGER_ANNOTATION`] of a template node: `true` without it.
pub fn cloud_controller_manager(origin: &str, node: &Node) -> Result<bool, TemplateError> {
    let Some(value) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CLOUD_CONTROLLER_MANAGER_ANNOTATION))
    else {
        return Ok(true);
    };
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(TemplateError::Invalid {
            origin: origin.to_string(),
            node: node_name(node),
            field: format!("metadata.annotations[{CLOUD_CONTROLLER_MANAGER_ANNOTATION}]"),
            value: value.clone(),
            reason: "expected \"true\" or \"false\"".to_string(),
        }),
    }
}

/// One group per distinct grouping value, in order of first appearance; the first node with a
/// value is the group's template. Nodes without the grouping key are not templates.
pub fn group_specs(
    nodes: &[Node],
    config: &KwokConfig,
    origin: &str,
) -> Result<Vec<GroupSpec>, TemplateError> {
    let mut groups: Vec<GroupSpec> = Vec::new();
    for node in nodes {
        let Some(group) = config.grouping.value_in(
            node.metadata.labels.as_ref(),
            node.metadata.annotations.as_ref(),
        ) else {
            tracing::debug!(
                node = %node_name(node),
                key = %config.grouping.describe(),
                "template node has no grouping key; skipped"
            );
            continue;
        };
        if groups.iter().any(|g| g.id == group) {
            continue;
        }
        let field = match &config.grouping {
            GroupingKey::Label(key) => format!("metadata.labels[{key}]"),
            GroupingKey::Annotation(key) => format!("metadata.annotations[{key}]"),
        };
        let invalid = |value: String, reason: &str| TemplateError::Invalid {
            origin: origin.to_string(),
            node: node_name(node),
            field: field.clone(),
            value,
            reason: reason.to_string(),
        };
        if !valid_group_name(group) {
            return Err(invalid(
                group.to_string(),
                "a group name must be lower-case letters, digits, '-' or '.', start with a letter or digit, and be at most 247 characters (new nodes are named <group>-<5 characters>)",
            ));
        }
        let min_size = count_annotation(origin, node, MIN_COUNT_ANNOTATION, 0)?;
        let max_size = count_annotation(origin, node, MAX_COUNT_ANNOTATION, DEFAULT_MAX_COUNT)?;
        let desired_size = count_annotation(origin, node, DESIRED_COUNT_ANNOTATION, min_size)?;
        let bounds_error = |key: &str, value: usize, reason: &str| TemplateError::Invalid {
            origin: origin.to_string(),
            node: node_name(node),
            field: format!("metadata.annotations[{key}]"),
            value: value.to_string(),
            reason: reason.to_string(),
        };
        if max_size < min_size {
            return Err(bounds_error(
                MAX_COUNT_ANNOTATION,
                max_size,
                &format!("below the min-count {min_size}"),
            ));
        }
        if desired_size < min_size || desired_size > max_size {
            return Err(bounds_error(
                DESIRED_COUNT_ANNOTATION,
                desired_size,
                &format!("outside the bounds {min_size}:{max_size}"),
            ));
        }
        csi_drivers(origin, node)?;
        let cloud_controller_manager = cloud_controller_manager(origin, node)?;
        // Declared devices that cannot be read leave the group without devices rather than
        // without a template: its pods without claims still scale it.
        if let Err(error) = resource_slices(origin, node) {
            tracing::warn!(group, "{error}; the group's template has no DRA devices");
        }
        groups.push(GroupSpec {
            id: group.to_string(),
            min_size,
            max_size,
            desired_size,
            template: prepare_template(node, group, config.skip_taint),
            cloud_controller_manager,
        });
    }
    if groups.is_empty() {
        return Err(TemplateError::NoGroups {
            origin: origin.to_string(),
            key: config.grouping.describe(),
        });
    }
    Ok(groups)
}

/// Turns a template node into a fake kwok node of `group`: renamed, annotated for kwok and for
/// this provider, given a kwok providerID and a fake kubelet version, and tainted unless
/// `skip_taint`. Server-owned metadata and status conditions are dropped.
pub fn prepare_template(node: &Node, group: &str, skip_taint: bool) -> Node {
    let name = format!("{TEMPLATE_NAME_PREFIX}{}", node_name(node));
    let mut template = node.clone();
    let meta = &mut template.metadata;
    meta.name = Some(name.clone());
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.generate_name = None;
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(
        KWOK_NODE_ANNOTATION.to_string(),
        KWOK_NODE_ANNOTATION_VALUE.to_string(),
    );
    annotations.insert(GROUP_NAME_ANNOTATION.to_string(), group.to_string());
    let spec = template.spec.get_or_insert_with(NodeSpec::default);
    spec.provider_id = Some(format!("{PROVIDER_ID_PREFIX}{name}"));
    if !skip_taint {
        let taints = spec.taints.get_or_insert_with(Vec::new);
        if !taints.iter().any(|t| t.key == KWOK_TAINT_KEY) {
            taints.push(Taint {
                key: KWOK_TAINT_KEY.to_string(),
                value: Some("true".to_string()),
                effect: "NoSchedule".to_string(),
                time_added: None,
            });
        }
    }
    let status = template.status.get_or_insert_with(NodeStatus::default);
    status.conditions = None;
    status
        .node_info
        .get_or_insert_with(NodeSystemInfo::default)
        .kubelet_version = "fake".to_string();
    template
}

/// A new Node of the group named `name`, from its prepared template.
pub fn node_from_template(template: &Node, name: &str) -> Node {
    let mut node = template.clone();
    node.metadata.name = Some(name.to_string());
    node.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(HOSTNAME_LABEL.to_string(), name.to_string());
    node.spec.get_or_insert_with(NodeSpec::default).provider_id =
        Some(format!("{PROVIDER_ID_PREFIX}{name}"));
    node
}

/// A new Node of a group without a cloud-controller-manager, as its kubelet registers it with
/// `--cloud-provider=external` (docs/behaviour.md KWOK-108): the template's node without the
/// topology and instance-type labels a cloud-controller-manager would set, and with the
/// `node.cloudprovider.kubernetes.io/uninitialized` taint.
pub fn uninitialized_node_from_template(template: &Node, name: &str) -> Node {
    let mut node = node_from_template(template, name);
    if let Some(labels) = node.metadata.labels.as_mut() {
        for key in CLOUD_LABELS {
            labels.remove(key);
        }
    }
    let taints = node
        .spec
        .get_or_insert_with(NodeSpec::default)
        .taints
        .get_or_insert_with(Vec::new);
    if !taints.iter().any(|t| t.key == UNINITIALIZED_TAINT) {
        taints.push(Taint {
            key: UNINITIALIZED_TAINT.to_string(),
            value: Some("true".to_string()),
            effect: "NoSchedule".to_string(),
            time_added: None,
        });
    }
    node
}

/// The template node info the engine simulates: the prepared node plus the kube-proxy mirror pod
/// every kwok node is assumed to run (100m CPU), the CSINode of its CSI drivers annotation, and
/// the ResourceSlices of its resource-slices annotation (none when it is malformed: that was
/// warned about when the groups were read).
pub fn template_node_info(template: &Node) -> Result<NodeTemplate, String> {
    let node = node_from_k8s(template).map_err(|e| e.to_string())?;
    let resource_slices = resource_slices("template", template).unwrap_or_else(|error| {
        tracing::debug!("{error}; the template has no DRA devices");
        Vec::new()
    });
    let drivers = csi_drivers("template", template).map_err(|e| e.to_string())?;
    let csi_node = (!drivers.is_empty()).then(|| CsiNode {
        node_name: node.name.clone(),
        drivers,
    });
    let mut kube_proxy = Pod::new("kube-system", format!("kube-proxy-{}", node.name));
    kube_proxy.annotations.insert(
        ferroscale_model::pod::MIRROR_POD.to_string(),
        "kube-proxy".to_string(),
    );
    kube_proxy.node_name = Some(node.name.as_str().into());
    kube_proxy.phase = PodPhase::Running;
    kube_proxy.requests = Resources::new(100, 0);
    kube_proxy.priority = Some(2_000_001_000);
    Ok(NodeTemplate {
        node,
        pods: vec![kube_proxy],
        csi_node,
        resource_slices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{GpuSettings, ReadNodesFrom};

    fn config(grouping: GroupingKey, skip_taint: bool) -> KwokConfig {
        KwokConfig {
            read_nodes_from: ReadNodesFrom::ConfigMap,
            grouping,
            skip_taint,
            gpu: GpuSettings::default(),
            templates_configmap: "kwok-provider-templates".into(),
        }
    }

    const LIST: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: small-1
    labels: {pool: small, kubernetes.io/hostname: small-1}
    annotations:
      cluster-autoscaler.kwok.nodegroup/min-count: "1"
      cluster-autoscaler.kwok.nodegroup/max-count: "5"
  status:
    capacity: {cpu: "2", memory: 4Gi, pods: "110"}
    allocatable: {cpu: "2", memory: 4Gi, pods: "110"}
    conditions: [{type: Ready, status: "True"}]
- apiVersion: v1
  kind: Node
  metadata:
    name: small-2
    labels: {pool: small}
- apiVersion: v1
  kind: Node
  metadata:
    name: large-1
    labels: {pool: large}
  status:
    allocatable: {cpu: "16", memory: 64Gi}
- apiVersion: v1
  kind: Node
  metadata: {name: ungrouped}
"#;

    #[test]
    fn list_templates_become_one_group_per_value_with_bounds() {
        let nodes = parse_template_nodes(LIST, "templates").unwrap();
        assert_eq!(nodes.len(), 4);
        let groups = group_specs(
            &nodes,
            &config(GroupingKey::Label("pool".into()), false),
            "t",
        )
        .unwrap();
        let summary: Vec<_> = groups
            .iter()
            .map(|g| (g.id.as_str(), g.min_size, g.max_size, g.desired_size))
            .collect();
        assert_eq!(summary, vec![("small", 1, 5, 1), ("large", 0, 200, 0)]);
        assert_eq!(
            groups[0].template.metadata.name.as_deref(),
            Some("kwok-fake-small-1")
        );
    }

    #[test]
    fn several_node_documents_are_templates_too() {
        let text = "kind: Node\nmetadata: {name: a, annotations: {g: one}}\n---\nkind: Node\nmetadata: {name: b, annotations: {g: two}}\n---\n";
        let nodes = parse_template_nodes(text, "t").unwrap();
        let groups = group_specs(
            &nodes,
            &config(GroupingKey::Annotation("g".into()), false),
            "t",
        )
        .unwrap();
        assert_eq!(
            groups.iter().map(|g| g.id.as_str()).collect::<Vec<_>>(),
            vec!["one", "two"]
        );
    }

    #[test]
    fn prepared_template_is_a_fake_kwok_node() {
        let nodes = parse_template_nodes(LIST, "t").unwrap();
        let tainted = prepare_template(&nodes[0], "small", false);
        let annotations = tainted.metadata.annotations.clone().unwrap();
        assert_eq!(annotations[KWOK_NODE_ANNOTATION], "fake");
        assert_eq!(annotations[GROUP_NAME_ANNOTATION], "small");
        let spec = tainted.spec.clone().unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some("kwok:kwok-fake-small-1"));
        let taints = spec.taints.unwrap();
        assert_eq!(taints.len(), 1);
        assert_eq!(
            (
                taints[0].key.as_str(),
                taints[0].value.as_deref(),
                taints[0].effect.as_str()
            ),
            ("kwok-provider", Some("true"), "NoSchedule")
        );
        let status = tainted.status.clone().unwrap();
        assert_eq!(status.node_info.unwrap().kubelet_version, "fake");
        assert!(status.conditions.is_none(), "kwok reports readiness itself");
        let untainted = prepare_template(&nodes[0], "small", true);
        assert!(
            untainted
                .spec
                .unwrap()
                .taints
                .unwrap_or_default()
                .is_empty()
        );
    }

    #[test]
    fn new_nodes_take_their_name_everywhere() {
        let nodes = parse_template_nodes(LIST, "t").unwrap();
        let template = prepare_template(&nodes[0], "small", false);
        let node = node_from_template(&template, "small-abcde");
        assert_eq!(node.metadata.name.as_deref(), Some("small-abcde"));
        assert_eq!(node.metadata.labels.unwrap()[HOSTNAME_LABEL], "small-abcde");
        assert_eq!(
            node.spec.unwrap().provider_id.as_deref(),
            Some("kwok:small-abcde")
        );
    }

    #[test]
    fn template_node_info_carries_kube_proxy() {
        let nodes = parse_template_nodes(LIST, "t").unwrap();
        let info = template_node_info(&prepare_template(&nodes[0], "small", false)).unwrap();
        assert_eq!(info.node.name, "kwok-fake-small-1");
        assert_eq!(info.node.allocatable.get("cpu"), 2000);
        assert_eq!(info.pods.len(), 1);
        assert!(info.pods[0].is_mirror_pod());
        assert_eq!(info.pods[0].requests.get("cpu"), 100);
        assert!(info.node.taints.iter().any(|t| t.key == KWOK_TAINT_KEY));
    }

    #[test]
    fn bad_bounds_name_node_annotation_and_value() {
        let text = "kind: Node\nmetadata:\n  name: n1\n  labels: {pool: p}\n  annotations: {cluster-autoscaler.kwok.nodegroup/max-count: lots}\n";
        let nodes = parse_template_nodes(text, "t").unwrap();
        let err = group_specs(
            &nodes,
            &config(GroupingKey::Label("pool".into()), false),
            "cm",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("cm")
                && err.contains("n1")
                && err.contains(MAX_COUNT_ANNOTATION)
                && err.contains("\"lots\""),
            "{err}"
        );
        let inverted = "kind: Node\nmetadata:\n  name: n1\n  labels: {pool: p}\n  annotations: {cluster-autoscaler.kwok.nodegroup/min-count: '3', cluster-autoscaler.kwok.nodegroup/max-count: '2'}\n";
        let nodes = parse_template_nodes(inverted, "t").unwrap();
        let err = group_specs(
            &nodes,
            &config(GroupingKey::Label("pool".into()), false),
            "cm",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("below the min-count 3"), "{err}");
    }

    #[test]
    fn group_names_must_make_valid_node_names() {
        let text = "kind: Node\nmetadata:\n  name: n1\n  labels: {pool: Big_Pool}\n";
        let nodes = parse_template_nodes(text, "t").unwrap();
        let err = group_specs(
            &nodes,
            &config(GroupingKey::Label("pool".into()), false),
            "cm",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("\"Big_Pool\"") && err.contains("metadata.labels[pool]"),
            "{err}"
        );
    }

    #[test]
    fn malformed_templates_are_errors_naming_the_document() {
        for (text, expected) in [
            ("kind: Pod\nmetadata: {name: p}\n", "\"Pod\""),
            ("kind: List\nitems: 3\n", "items"),
            (
                "kind: List\nitems: [{kind: Pod, metadata: {name: p}}]\n",
                "items[0].kind",
            ),
            (
                "kind: Node\nmetadata: {name: n}\nstatus: {capacity: {cpu: [1]}}\n",
                "status.capacity",
            ),
            ("kind: Node\nmetadata: {labels: {a: b}}\n", "metadata.name"),
            (
                "kind: Node\nmetadata: {name: a}\n---\nkind: Node\n  bad: [\n",
                "document 2",
            ),
        ] {
            let err = parse_template_nodes(text, "templates.yaml")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("templates.yaml") && err.contains(expected),
                "{text:?}: {err}"
            );
        }
        let nodes = parse_template_nodes("kind: Node\nmetadata: {name: x}\n", "t").unwrap();
        let err = group_specs(
            &nodes,
            &config(GroupingKey::Label("pool".into()), false),
            "cm",
        )
        .unwrap_err();
        assert!(matches!(err, TemplateError::NoGroups { .. }), "{err}");
    }

    const ZONAL: &str = "kind: Node\nmetadata:\n  name: zonal\n  labels: {pool: zonal, topology.kubernetes.io/zone: zone-b}\n  annotations: {cluster-autoscaler.kwok.nodegroup/csi-drivers: \"ebs.csi.aws.com=25, efs.csi.aws.com=0\"}\nstatus: {allocatable: {cpu: \"4\"}}\n";

    #[test]
    fn csi_drivers_annotation_gives_the_template_a_csinode_and_the_zone_label_stays() {
        let nodes = parse_template_nodes(ZONAL, "t").unwrap();
        let groups = group_specs(
            &nodes,
            &config(GroupingKey::Label("pool".into()), false),
            "t",
        )
        .unwrap();
        let info = template_node_info(&groups[0].template).unwrap();
        assert_eq!(
            info.node.label("topology.kubernetes.io/zone"),
            Some("zone-b")
        );
        let csi_node = info.csi_node.expect("a CSINode for the template");
        assert_eq!(csi_node.node_name, info.node.name);
        assert_eq!(
            csi_node
                .drivers
                .iter()
                .map(|d| (d.name.as_str(), d.allocatable_count))
                .collect::<Vec<_>>(),
            vec![("ebs.csi.aws.com", Some(25)), ("efs.csi.aws.com", None)]
        );
        // Without the annotation there is no CSINode, so no limit is simulated.
        let plain = parse_template_nodes(LIST, "t").unwrap();
        let info = template_node_info(&prepare_template(&plain[0], "small", false)).unwrap();
        assert_eq!(info.csi_node, None);
    }

    #[test]
    fn a_bad_csi_drivers_item_is_a_configuration_error_naming_it() {
        for (value, expected) in [
            ("ebs.csi.aws.com", "expected <driver>=<count>"),
            ("=4", "driver name is empty"),
            ("ebs.csi.aws.com=-1", "from 0 to"),
            ("ebs.csi.aws.com=lots", "from 0 to"),
            ("a=1,a=2", "listed twice"),
        ] {
            let text = ZONAL.replace("ebs.csi.aws.com=25, efs.csi.aws.com=0", value);
            let nodes = parse_template_nodes(&text, "t").unwrap();
            let err = group_specs(
                &nodes,
                &config(GroupingKey::Label("pool".into()), false),
                "kwok-provider-templates",
            )
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("kwok-provider-templates")
                    && err.contains("node zonal")
                    && err.contains(CSI_DRIVERS_ANNOTATION)
                    && err.contains(expected),
                "{value:?}: {err}"
            );
        }
    }

    const GPU: &str = r#"kind: Node
metadata:
  name: gpu
  labels: {pool: gpu}
  annotations:
    cluster-autoscaler.kwok.nodegroup/resource-slices: |
      - driver: gpu.example.com
        devices:
        - name: gpu-0
          attributes: {model: {string: A100}}
          capacity: {memory: {value: 80Gi}}
        - name: gpu-1
          attributes: {model: {string: A100}}
          capacity: {memory: {value: 80Gi}}
      - {driver: nic.example.com, pool: {name: shared-nics, generation: 2, resourceSliceCount: 1}, devices: [{name: nic-0}]}
status: {allocatable: {cpu: "4"}}
"#;

    fn gpu_groups(text: &str) -> Vec<GroupSpec> {
        let nodes = parse_template_nodes(text, "t").unwrap();
        group_specs(
            &nodes,
            &config(GroupingKey::Label("pool".into()), false),
            "t",
        )
        .unwrap()
    }

    /// docs/behaviour.md KWOK-107.
    #[test]
    fn resource_slices_annotation_gives_the_template_node_local_devices() {
        let groups = gpu_groups(GPU);
        let info = template_node_info(&groups[0].template).unwrap();
        assert_eq!(info.resource_slices.len(), 2);
        let gpus = &info.resource_slices[0];
        assert_eq!(gpus.driver, "gpu.example.com");
        assert_eq!(gpus.node_name(), Some(info.node.name.as_str()));
        // No pool written: the only slice of a pool of its own.
        assert_eq!(gpus.pool, format!("{}-0", info.node.name));
        assert_eq!((gpus.pool_generation, gpus.pool_slice_count), (0, 1));
        assert_eq!(gpus.devices.len(), 2);
        assert_eq!(
            gpus.devices[0].attributes.get("gpu.example.com/model"),
            Some(&ferroscale_model::DeviceAttribute::String("A100".into()))
        );
        assert!(
            gpus.devices[0]
                .capacity
                .contains_key("gpu.example.com/memory")
        );
        let nics = &info.resource_slices[1];
        assert_eq!(
            (nics.pool.as_str(), nics.pool_generation),
            ("shared-nics", 2)
        );
        assert_eq!(nics.node_name(), Some(info.node.name.as_str()));
        // Without the annotation there are no devices.
        let plain = parse_template_nodes(LIST, "t").unwrap();
        let info = template_node_info(&prepare_template(&plain[0], "small", false)).unwrap();
        assert!(info.resource_slices.is_empty());
    }

    /// docs/behaviour.md KWOK-107: a malformed annotation costs the devices, not the group.
    #[test]
    fn a_bad_resource_slices_annotation_leaves_the_group_without_devices() {
        for (bad, expected) in [
            (
                "- {driver: d.example.com, devices: [{name: a}",
                "not YAML or JSON",
            ),
            ("driver: d.example.com", "expected a list"),
            ("- just-a-string", "[0]: expected a ResourceSlice spec"),
            ("- {devices: [{name: a}]}", "[0]: "),
            (
                "- {driver: d.example.com, nodeName: other}",
                "nodeName may not be set",
            ),
            (
                "- {driver: d.example.com, allNodes: true}",
                "allNodes may not be set",
            ),
            (
                "- {driver: d.example.com, devices: [{name: a, capacity: {m: {value: -1}}}]}",
                "must not be negative",
            ),
            (
                "- {driver: d.example.com, devices: [{name: a, colour: red}]}",
                "unknown field",
            ),
        ] {
            let annotation =
                format!("    cluster-autoscaler.kwok.nodegroup/resource-slices: |\n      {bad}\n");
            let text = format!(
                "kind: Node\nmetadata:\n  name: gpu\n  labels: {{pool: gpu}}\n  annotations:\n{annotation}status: {{allocatable: {{cpu: \"4\"}}}}\n"
            );
            let groups = gpu_groups(&text);
            assert_eq!(groups.len(), 1, "{bad}: the group stays");
            let error = resource_slices("t", &groups[0].template)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(RESOURCE_SLICES_ANNOTATION) && error.contains(expected),
                "{bad}: {error}"
            );
            let info = template_node_info(&groups[0].template).unwrap();
            assert!(info.resource_slices.is_empty(), "{bad}");
        }
    }

    const WITHOUT_CCM: &str = r#"
kind: Node
metadata:
  name: metal
  labels:
    pool: metal
    topology.kubernetes.io/zone: zone-a
    failure-domain.beta.kubernetes.io/zone: zone-a
    node.kubernetes.io/instance-type: m.large
  annotations:
    cluster-autoscaler.kwok.nodegroup/cloud-controller-manager: "false"
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
"#;

    /// docs/behaviour.md KWOK-108: a group without a cloud-controller-manager registers its new
    /// Nodes as an external-cloud-provider kubelet does — no zone or instance-type labels, the
    /// uninitialized taint — while the engine's template keeps the labels and has no such taint.
    #[test]
    fn without_a_ccm_new_nodes_register_uninitialized_and_the_template_keeps_its_labels() {
        let nodes = parse_template_nodes(WITHOUT_CCM, "t").unwrap();
        let groups = group_specs(
            &nodes,
            &config(GroupingKey::Label("pool".into()), false),
            "t",
        )
        .unwrap();
        assert!(!groups[0].cloud_controller_manager);
        let node = uninitialized_node_from_template(&groups[0].template, "metal-x7k2p");
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.keys().map(String::as_str).collect::<Vec<_>>(),
            ["kubernetes.io/hostname", "pool"]
        );
        let taints = node.spec.clone().and_then(|s| s.taints).unwrap_or_default();
        assert!(
            taints
                .iter()
                .any(|t| t.key == UNINITIALIZED_TAINT && t.effect == "NoSchedule"),
            "{taints:?}"
        );
        assert_eq!(
            node.spec.and_then(|s| s.provider_id).as_deref(),
            Some("kwok:metal-x7k2p")
        );
        let template = template_node_info(&groups[0].template).unwrap();
        assert_eq!(
            template.node.label("topology.kubernetes.io/zone"),
            Some("zone-a")
        );
        assert!(!template.node.has_taint(UNINITIALIZED_TAINT));

        // Without the annotation the provider plays the CCM's part, as before.
        let plain = parse_template_nodes(LIST, "t").unwrap();
        let groups = group_specs(
            &plain,
            &config(GroupingKey::Label("pool".into()), false),
            "t",
        )
        .unwrap();
        assert!(groups.iter().all(|g| g.cloud_controller_manager));
    }

    /// docs/behaviour.md KWOK-108, KWOK-103: a value other than "true" or "false" is a
    /// configuration error naming the node, the annotation and the value.
    #[test]
    fn a_bad_cloud_controller_manager_annotation_is_a_configuration_error() {
        let text = WITHOUT_CCM.replace("\"false\"", "\"no\"");
        let nodes = parse_template_nodes(&text, "t").unwrap();
        let err = group_specs(
            &nodes,
            &config(GroupingKey::Label("pool".into()), false),
            "kwok-provider-templates",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("node metal")
                && err.contains(CLOUD_CONTROLLER_MANAGER_ANNOTATION)
                && err.contains("\"no\""),
            "{err}"
        );
    }
}
