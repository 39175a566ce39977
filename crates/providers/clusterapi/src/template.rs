//! The scale-from-zero template node of a node group (docs/clusterapi.md CAPI-44–CAPI-53): a Node
//! shaped like the machines the group would create, built from the combined capacity, layered
//! labels, taints, a kube-proxy mirror pod, and the DRA resource slices and CSINode the engine
//! simulates a new node with.

use std::collections::BTreeMap;
use std::time::Duration;

use ferroscale_core::cloud::NodeTemplate;
use ferroscale_model::labels::{ARCH, HOSTNAME, INSTANCE_TYPE, OS, REGION, REGION_BETA, ZONE_BETA};
use ferroscale_model::pod::MIRROR_POD;
use ferroscale_model::{
    ConditionStatus, CsiNode, CsiNodeDriver, Device, DeviceAttribute, DeviceScope, Labels, Node,
    PodPhase, ResourceSlice, Resources, Taint, TaintEffect, Timestamp,
};
use ferroscale_model::{Pod, node::NodeConditions};
use kube::api::DynamicObject;
use serde_json::Value;

use crate::bad_input::{BadAnnotation, BadField};
use crate::capacity::{
    NodeInfo, can_scale_from_zero, combined_capacity, gpu_count, infrastructure_capacity,
};
use crate::fields;
use crate::keys::{
    CAPACITY_CSI_DRIVER, CAPACITY_DRA_DRIVER, CAPACITY_LABELS, CAPACITY_TAINTS, Keys,
};
use crate::syntax::{is_label_value, is_qualified_name};

/// Operating system label of template nodes unless the template or a real node says otherwise.
pub const DEFAULT_OS: &str = "linux";
/// Priority of the `system-node-critical` class the kube-proxy mirror pod runs with.
pub const SYSTEM_NODE_CRITICAL_PRIORITY: i32 = 2_000_001_000;
/// CPU the kube-proxy mirror pod requests, in millicores.
pub const KUBE_PROXY_CPU_MILLI: i64 = 100;
/// A bound on `gpu-count` so a typo cannot make the template allocate millions of DRA devices.
pub const MAX_GPUS_PER_NODE: i64 = 4096;
/// How long before `now` the template's conditions last changed.
const CONDITION_AGE: Duration = Duration::from_secs(60);

/// Labels copied from a real node of the group, when it has them (docs/clusterapi.md CAPI-49).
/// `topology.kubernetes.io/zone` is deliberately not among them, as upstream.
pub const COPIED_NODE_LABELS: [&str; 7] = [
    ARCH,
    OS,
    "beta.kubernetes.io/instance-type",
    INSTANCE_TYPE,
    REGION_BETA,
    REGION,
    ZONE_BETA,
];

/// Everything the template is built from; the caller gathers it (no I/O here).
#[derive(Debug, Clone, Copy)]
pub struct TemplateInput<'a> {
    /// The MachineDeployment, MachineSet or MachinePool.
    pub resource: &'a DynamicObject,
    pub keys: &'a Keys,
    /// From [`crate::keys::default_architecture`].
    pub default_arch: &'a str,
    /// The infrastructure template, when it could be fetched.
    pub infrastructure: Option<&'a DynamicObject>,
    /// The workload Node of the group's first instance, when there is one.
    pub existing_node: Option<&'a Node>,
    /// Makes the node name unique; only the low 63 bits are used.
    pub random_suffix: u64,
    pub now: Timestamp,
}

/// A DRA device of a template resource slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceTemplate {
    pub name: String,
    /// String attributes (`type` = `gpu`).
    pub attributes: BTreeMap<String, String>,
}

/// A `resource.k8s.io` ResourceSlice the template node would publish (docs/clusterapi.md CAPI-52).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSliceTemplate {
    pub name: String,
    pub driver: String,
    pub node_name: String,
    pub pool: String,
    pub devices: Vec<DeviceTemplate>,
}

impl ResourceSliceTemplate {
    /// The slice as the DynamicResources filter reads it: local to the template node, the only
    /// slice of its pool, attribute names qualified with the driver (`type` is
    /// `<driver>/type`, as a CEL selector names it).
    pub fn to_model(&self) -> ResourceSlice {
        ResourceSlice {
            name: self.name.clone(),
            driver: self.driver.clone(),
            pool: self.pool.clone(),
            pool_generation: 0,
            pool_slice_count: 1,
            scope: DeviceScope::Node(self.node_name.clone()),
            per_device_node_selection: false,
            devices: self
                .devices
                .iter()
                .map(|device| Device {
                    name: device.name.clone(),
                    attributes: device
                        .attributes
                        .iter()
                        .map(|(name, value)| {
                            (
                                format!("{}/{name}", self.driver),
                                DeviceAttribute::String(value.clone()),
                            )
                        })
                        .collect(),
                    ..Device::default()
                })
                .collect(),
        }
    }
}

/// One CSI driver of the template's CSINode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiDriverTemplate {
    pub name: String,
    /// Volume attach limit; `None` when the annotation gave 0.
    pub allocatable_count: Option<i32>,
}

/// The CSINode the template node would have (docs/clusterapi.md CAPI-53).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiNodeTemplate {
    pub node_name: String,
    pub drivers: Vec<CsiDriverTemplate>,
}

impl CsiNodeTemplate {
    /// The CSINode as the engine's volume limits read it.
    pub fn to_model(&self) -> CsiNode {
        CsiNode {
            node_name: self.node_name.clone(),
            drivers: self
                .drivers
                .iter()
                .map(|d| CsiNodeDriver {
                    name: d.name.clone(),
                    allocatable_count: d.allocatable_count,
                    topology_keys: Vec::new(),
                })
                .collect(),
        }
    }
}

/// The full scale-from-zero template.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleFromZeroTemplate {
    /// The node and its kube-proxy mirror pod, as the engine simulates them.
    pub template: NodeTemplate,
    /// `status.nodeInfo` from the infrastructure template, when it has one.
    pub node_info: Option<NodeInfo>,
    pub resource_slices: Vec<ResourceSliceTemplate>,
    pub csi_node: Option<CsiNodeTemplate>,
    /// Taint and CSI annotation items that were skipped (worth a warning).
    pub skipped_items: Vec<BadAnnotation>,
    /// Infrastructure `status.capacity` entries that were skipped.
    pub skipped_capacity: Vec<BadField>,
}

/// A label key managed by Cluster API on Nodes (docs/clusterapi.md CAPI-50): the prefix is
/// `node-role.kubernetes.io`, or `node-restriction.kubernetes.io` / `node.cluster.x-k8s.io` or a
/// subdomain of those two.
pub fn is_managed_label(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    prefix == "node-role.kubernetes.io"
        || prefix == "node-restriction.kubernetes.io"
        || prefix.ends_with(".node-restriction.kubernetes.io")
        || prefix == "node.cluster.x-k8s.io"
        || prefix.ends_with(".node.cluster.x-k8s.io")
}

/// Managed labels of the Machine template.
///
/// docs/clusterapi.md CAPI-Q5: upstream reads `spec.template.spec.metadata.labels`, a path Cluster
/// API does not have; real objects keep Machine labels in `spec.template.metadata.labels`. Both are
/// read here, the real path winning on conflicts, so real objects get their managed labels and
/// objects written for upstream's path still work.
fn managed_labels(resource: &DynamicObject) -> Labels {
    let mut labels = Labels::new();
    for path in [
        ["spec", "template", "spec", "metadata", "labels"].as_slice(),
        ["spec", "template", "metadata", "labels"].as_slice(),
    ] {
        if let Some(map) = fields::at(resource, path).and_then(Value::as_object) {
            for (key, value) in map {
                if let Some(value) = value.as_str()
                    && is_managed_label(key)
                {
                    labels.insert(key.clone(), value.to_string());
                }
            }
        }
    }
    labels
}

/// The `…/labels` annotation: `k=v` items separated by `,`, split on the first `=`; items without
/// `=` are ignored; nothing is trimmed.
pub fn annotation_labels(resource: &DynamicObject) -> Labels {
    fields::annotation(resource, CAPACITY_LABELS)
        .into_iter()
        .flat_map(|text| text.split(','))
        .filter_map(|item| item.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn skipped(resource: &DynamicObject, annotation: &str, item: &str, problem: &str) -> BadAnnotation {
    BadAnnotation {
        object: fields::describe(resource),
        annotation: annotation.to_string(),
        value: item.to_string(),
        problem: format!("{problem}; item skipped"),
    }
}

/// Taints from `spec.template.spec.taints` then the `…/taints` annotation (docs/clusterapi.md
/// CAPI-51), with the items that had to be skipped.
///
/// Ferroscale difference: an effect other than `NoSchedule`, `PreferNoSchedule` or `NoExecute`
/// (including none, `key` alone) cannot be represented by the model, so that item is skipped and
/// reported; upstream keeps it with the unvalidated effect.
pub fn template_taints(resource: &DynamicObject) -> (Vec<Taint>, Vec<BadAnnotation>) {
    let mut taints: Vec<Taint> = Vec::new();
    let mut problems = Vec::new();
    let spec_taints = fields::at(resource, &["spec", "template", "spec", "taints"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|item| item.is_object());
    for item in spec_taints {
        let text = |key| item.get(key).and_then(Value::as_str).unwrap_or("");
        match TaintEffect::parse(text("effect")) {
            Some(effect) => taints.push(Taint::new(text("key"), text("value"), effect)),
            None => problems.push(BadAnnotation {
                object: fields::describe(resource),
                annotation: "spec.template.spec.taints".to_string(),
                value: item.to_string(),
                problem: "unknown taint effect; taint skipped".to_string(),
            }),
        }
    }
    let annotation = fields::annotation(resource, CAPACITY_TAINTS).unwrap_or("");
    for item in annotation.split(',').filter(|item| !item.is_empty()) {
        let (key_value, effect) = item.rsplit_once(':').unwrap_or((item, ""));
        let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
        if !is_qualified_name(key) {
            problems.push(skipped(
                resource,
                CAPACITY_TAINTS,
                item,
                "invalid taint key",
            ));
            continue;
        }
        if !is_label_value(value) {
            problems.push(skipped(
                resource,
                CAPACITY_TAINTS,
                item,
                "invalid taint value",
            ));
            continue;
        }
        let Some(effect) = TaintEffect::parse(effect) else {
            problems.push(skipped(
                resource,
                CAPACITY_TAINTS,
                item,
                "effect must be NoSchedule, PreferNoSchedule or NoExecute",
            ));
            continue;
        };
        let taint = Taint::new(key, value, effect);
        match taints
            .iter_mut()
            .find(|t| t.key == taint.key && t.effect == taint.effect)
        {
            Some(existing) => *existing = taint,
            None => taints.push(taint),
        }
    }
    (taints, problems)
}

/// The `…/csi-driver` annotation (docs/clusterapi.md CAPI-53): `name=limit` items; bad items are
/// skipped and reported.
pub fn csi_drivers(resource: &DynamicObject) -> (Vec<CsiDriverTemplate>, Vec<BadAnnotation>) {
    let mut drivers = Vec::new();
    let mut problems = Vec::new();
    let annotation = fields::annotation(resource, CAPACITY_CSI_DRIVER).unwrap_or("");
    for item in annotation
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
    {
        let bad = |problem| skipped(resource, CAPACITY_CSI_DRIVER, item, problem);
        let Some((name, limit)) = item.split_once('=') else {
            problems.push(bad("expected name=limit"));
            continue;
        };
        let (name, limit) = (name.trim(), limit.trim());
        if name.is_empty() {
            problems.push(bad("empty driver name"));
            continue;
        }
        let Ok(limit) = limit.parse::<i32>() else {
            problems.push(bad("limit is not a 32-bit integer"));
            continue;
        };
        if limit < 0 {
            problems.push(bad("limit must not be negative"));
            continue;
        }
        drivers.push(CsiDriverTemplate {
            name: name.to_string(),
            allocatable_count: (limit > 0).then_some(limit),
        });
    }
    (drivers, problems)
}

/// The kube-proxy mirror pod every template node runs.
fn kube_proxy(node_name: &str, now: Timestamp) -> Pod {
    let mut pod = Pod::new("kube-system", format!("kube-proxy-{node_name}"));
    pod.annotations
        .insert(MIRROR_POD.to_string(), "kube-proxy".to_string());
    pod.node_name = Some(node_name.into());
    pod.phase = PodPhase::Running;
    pod.requests = Resources::new(KUBE_PROXY_CPU_MILLI, 0);
    pod.priority = Some(SYSTEM_NODE_CRITICAL_PRIORITY);
    pod.creation_time = now;
    pod
}

/// Builds the template (docs/clusterapi.md CAPI-44–CAPI-53). `Ok(None)` when the group cannot scale
/// from zero (no cpu and memory known); an error when a capacity annotation cannot be parsed.
///
/// docs/clusterapi.md CAPI-Q6, not copied: when the infrastructure template has no (or an empty)
/// architecture or operating system, the default labels are kept instead of being overwritten with
/// empty strings.
pub fn build_template(
    input: TemplateInput<'_>,
) -> Result<Option<ScaleFromZeroTemplate>, BadAnnotation> {
    let resource = input.resource;
    let capacity = combined_capacity(resource, input.infrastructure)?;
    if !can_scale_from_zero(&capacity) {
        return Ok(None);
    }
    let gpus = gpu_count(resource)?;
    if gpus > MAX_GPUS_PER_NODE {
        return Err(BadAnnotation {
            object: fields::describe(resource),
            annotation: crate::keys::CAPACITY_GPU_COUNT.to_string(),
            value: gpus.to_string(),
            problem: format!("more than {MAX_GPUS_PER_NODE} GPUs on one node"),
        });
    }
    let infrastructure = input.infrastructure.map(infrastructure_capacity);

    let name = format!(
        "{}-asg-{}",
        fields::name(resource),
        input.random_suffix & (i64::MAX as u64)
    );
    let mut resources = Resources::default();
    for (resource_name, amount) in &capacity {
        resources.set_quantity(resource_name, *amount);
    }

    let mut labels = Labels::from([
        (ARCH.to_string(), input.default_arch.to_string()),
        (OS.to_string(), DEFAULT_OS.to_string()),
        (HOSTNAME.to_string(), name.clone()),
    ]);
    let node_info = infrastructure.as_ref().and_then(|i| i.node_info.clone());
    if let Some(info) = &node_info {
        for (key, value) in [(ARCH, &info.architecture), (OS, &info.operating_system)] {
            if !value.is_empty() {
                labels.insert(key.to_string(), value.clone());
            }
        }
    }
    labels.extend(managed_labels(resource));
    labels.extend(annotation_labels(resource));
    if let Some(node) = input.existing_node {
        for key in COPIED_NODE_LABELS {
            if let Some(value) = node.labels.get(key).filter(|v| !v.is_empty()) {
                labels.insert(key.to_string(), value.clone());
            }
        }
    }

    let (taints, mut skipped_items) = template_taints(resource);
    let (drivers, csi_problems) = csi_drivers(resource);
    skipped_items.extend(csi_problems);

    let mut node = Node::new(name.clone(), resources);
    node.labels = labels;
    node.taints = taints;
    node.creation_time = input.now;
    node.conditions = NodeConditions {
        ready: Some(ConditionStatus::True),
        disk_pressure: false,
        network_unavailable: false,
        suspended: false,
        last_transition: Some(input.now - CONDITION_AGE),
    };

    let driver = fields::annotation(resource, CAPACITY_DRA_DRIVER).unwrap_or("");
    let resource_slices = if !driver.is_empty() && gpus > 0 {
        vec![ResourceSliceTemplate {
            name: format!("{name}-{driver}"),
            driver: driver.to_string(),
            node_name: name.clone(),
            pool: name.clone(),
            devices: (0..gpus)
                .map(|i| DeviceTemplate {
                    name: format!("gpu-{i}"),
                    attributes: BTreeMap::from([("type".to_string(), "gpu".to_string())]),
                })
                .collect(),
        }]
    } else {
        Vec::new()
    };
    let csi_node = (!drivers.is_empty()).then(|| CsiNodeTemplate {
        node_name: name.clone(),
        drivers,
    });

    Ok(Some(ScaleFromZeroTemplate {
        template: NodeTemplate {
            pods: vec![kube_proxy(&name, input.now)],
            node,
            // The engine simulates the per-driver volume limits of the same CSINode, and the
            // DRA devices of the same slices.
            csi_node: csi_node.as_ref().map(CsiNodeTemplate::to_model),
            resource_slices: resource_slices
                .iter()
                .map(ResourceSliceTemplate::to_model)
                .collect(),
        },
        node_info,
        resource_slices,
        csi_node,
        skipped_items,
        skipped_capacity: infrastructure.map(|i| i.skipped).unwrap_or_default(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{CAPACITY_CPU, CAPACITY_GPU_COUNT, CAPACITY_GPU_TYPE, CAPACITY_MEMORY};
    use crate::test_objects::{machine_deployment, object};
    use serde_json::json;

    const NOW: Timestamp = Timestamp(1_700_000_000_000);

    fn input<'a>(resource: &'a DynamicObject, keys: &'a Keys) -> TemplateInput<'a> {
        TemplateInput {
            resource,
            keys,
            default_arch: "amd64",
            infrastructure: None,
            existing_node: None,
            random_suffix: 42,
            now: NOW,
        }
    }

    fn md(annotations: Value) -> DynamicObject {
        machine_deployment("default", "md-0", annotations, Some(0))
    }

    fn sized(mut extra: Value) -> DynamicObject {
        if let Some(map) = extra.as_object_mut() {
            map.insert(CAPACITY_CPU.to_string(), json!("2"));
            map.insert(CAPACITY_MEMORY.to_string(), json!("2048Mi"));
        }
        md(extra)
    }

    fn build(resource: &DynamicObject) -> ScaleFromZeroTemplate {
        let keys = Keys::default();
        build_template(input(resource, &keys))
            .expect("valid annotations")
            .expect("can scale from zero")
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn infra(status: Value) -> DynamicObject {
        object(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachineTemplate",
            "metadata": {"namespace": "default", "name": "worker"},
            "spec": {"template": {"spec": {}}},
            "status": status,
        }))
    }

    /// docs/clusterapi.md CAPI-44.
    #[test]
    fn c44_without_cpu_and_memory_there_is_no_template() {
        let keys = Keys::default();
        let resource = md(json!({CAPACITY_CPU: "2"}));
        assert_eq!(build_template(input(&resource, &keys)), Ok(None));
        let nothing = md(json!({}));
        assert_eq!(build_template(input(&nothing, &keys)), Ok(None));
    }

    /// docs/clusterapi.md CAPI-45.
    #[test]
    fn c45_annotation_capacity_becomes_capacity_and_allocatable_with_generic_labels() {
        let resource = md(json!({
            CAPACITY_CPU: "2", CAPACITY_MEMORY: "2048Mi",
            CAPACITY_GPU_TYPE: "nvidia.com/gpu", CAPACITY_GPU_COUNT: "1",
        }));
        let built = build(&resource);
        let node = &built.template.node;
        assert_eq!(node.name, "md-0-asg-42");
        let mut expected = Resources::new(2000, 2 << 30);
        expected.pods = 110;
        expected.set("nvidia.com/gpu", 1);
        assert_eq!(node.capacity, expected);
        assert_eq!(node.allocatable, expected);
        assert_eq!(
            node.labels,
            labels(&[
                ("kubernetes.io/arch", "amd64"),
                ("kubernetes.io/os", "linux"),
                ("kubernetes.io/hostname", "md-0-asg-42"),
            ])
        );
        assert!(node.taints.is_empty());
        assert!(node.is_ready());
        assert_eq!(
            node.conditions.last_transition,
            Some(Timestamp(NOW.0 - 60_000))
        );
        assert_eq!(built.node_info, None);
        assert!(built.resource_slices.is_empty());
        assert_eq!(built.csi_node, None);
    }

    /// docs/clusterapi.md CAPI-45.
    #[test]
    fn c45_template_runs_a_kube_proxy_mirror_pod() {
        let built = build(&sized(json!({})));
        let [pod] = built.template.pods.as_slice() else {
            panic!("one pod expected, got {:?}", built.template.pods);
        };
        assert_eq!(pod.namespace, "kube-system");
        assert!(pod.is_mirror_pod());
        assert_eq!(pod.requests, Resources::new(100, 0));
        assert_eq!(pod.priority, Some(SYSTEM_NODE_CRITICAL_PRIORITY));
        assert_eq!(pod.node_name.as_deref(), Some("md-0-asg-42"));
    }

    /// docs/clusterapi.md CAPI-45.
    #[test]
    fn c45_node_name_uses_63_bits_of_the_random_suffix() {
        let keys = Keys::default();
        let resource = sized(json!({}));
        let mut i = input(&resource, &keys);
        i.random_suffix = u64::MAX;
        let built = build_template(i).ok().flatten().expect("a template");
        assert_eq!(built.template.node.name, format!("md-0-asg-{}", i64::MAX));
    }

    /// docs/clusterapi.md CAPI-06.
    #[test]
    fn c06_default_architecture_is_used_for_the_arch_label() {
        let keys = Keys::default();
        let resource = sized(json!({}));
        let mut i = input(&resource, &keys);
        i.default_arch = "arm64";
        let built = build_template(i).ok().flatten().expect("a template");
        assert_eq!(
            built.template.node.label("kubernetes.io/arch"),
            Some("arm64")
        );
    }

    /// docs/clusterapi.md CAPI-46.
    #[test]
    fn c46_labels_annotation_overrides_arch_and_adds_labels() {
        let built = build(&sized(json!({
            CAPACITY_LABELS: "kubernetes.io/arch=arm64,my-custom-label=custom-value,novalue,a=b=c"
        })));
        let node = &built.template.node;
        assert_eq!(node.label("kubernetes.io/arch"), Some("arm64"));
        assert_eq!(node.label("my-custom-label"), Some("custom-value"));
        // Split on the first `=`; items without `=` are ignored.
        assert_eq!(node.label("a"), Some("b=c"));
        assert_eq!(node.label("novalue"), None);
    }

    /// docs/clusterapi.md CAPI-47.
    #[test]
    fn c47_template_capacity_enables_scale_from_zero_and_annotations_win() {
        let keys = Keys::default();
        let template = infra(json!({"capacity": {"cpu": "1", "memory": "4G"}}));
        let resource = md(json!({CAPACITY_CPU: "3"}));
        let mut i = input(&resource, &keys);
        i.infrastructure = Some(&template);
        let built = build_template(i).ok().flatten().expect("a template");
        assert_eq!(built.template.node.allocatable.cpu_milli, 3000);
        assert_eq!(built.template.node.allocatable.memory, 4_000_000_000);
        assert_eq!(built.template.node.allocatable.pods, 110);
    }

    /// docs/clusterapi.md CAPI-48.
    #[test]
    fn c48_infrastructure_node_info_sets_node_info_and_labels() {
        let keys = Keys::default();
        let template = infra(json!({
            "capacity": {"cpu": "1", "memory": "4G"},
            "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux"}
        }));
        let resource = md(json!({}));
        let mut i = input(&resource, &keys);
        i.infrastructure = Some(&template);
        let built = build_template(i).ok().flatten().expect("a template");
        assert_eq!(
            built.node_info,
            Some(NodeInfo {
                architecture: "arm64".to_string(),
                operating_system: "linux".to_string()
            })
        );
        assert_eq!(
            built.template.node.label("kubernetes.io/arch"),
            Some("arm64")
        );
        assert_eq!(built.template.node.label("kubernetes.io/os"), Some("linux"));
    }

    #[test]
    fn q6_missing_node_info_keeps_default_arch_and_os() {
        let keys = Keys::default();
        let template = infra(json!({
            "capacity": {"cpu": "1", "memory": "4G", "bad": "x"},
            "nodeInfo": {"architecture": ""}
        }));
        let resource = md(json!({}));
        let mut i = input(&resource, &keys);
        i.infrastructure = Some(&template);
        i.default_arch = "s390x";
        let built = build_template(i).ok().flatten().expect("a template");
        assert_eq!(
            built.template.node.label("kubernetes.io/arch"),
            Some("s390x")
        );
        assert_eq!(built.template.node.label("kubernetes.io/os"), Some("linux"));
        assert_eq!(built.skipped_capacity.len(), 1);
    }

    /// docs/clusterapi.md CAPI-49.
    #[test]
    fn c49_existing_node_labels_are_copied_except_zone() {
        let keys = Keys::default();
        let resource =
            sized(json!({CAPACITY_LABELS: "node.kubernetes.io/instance-type=from-annotation"}));
        let mut existing = Node::new("real", Resources::new(1000, 1 << 30));
        existing.labels.extend(labels(&[
            ("kubernetes.io/os", "windows"),
            ("kubernetes.io/arch", "arm64"),
            ("node.kubernetes.io/instance-type", "instance1"),
            ("topology.kubernetes.io/region", "eu-1"),
            ("topology.kubernetes.io/zone", "eu-1a"),
            ("failure-domain.beta.kubernetes.io/zone", "eu-1b"),
            ("beta.kubernetes.io/instance-type", ""),
            ("unrelated", "x"),
        ]));
        let mut i = input(&resource, &keys);
        i.existing_node = Some(&existing);
        let node = build_template(i)
            .ok()
            .flatten()
            .expect("a template")
            .template
            .node;
        assert_eq!(node.label("kubernetes.io/os"), Some("windows"));
        assert_eq!(node.label("kubernetes.io/arch"), Some("arm64"));
        assert_eq!(
            node.label("node.kubernetes.io/instance-type"),
            Some("instance1")
        );
        assert_eq!(node.label("topology.kubernetes.io/region"), Some("eu-1"));
        assert_eq!(
            node.label("failure-domain.beta.kubernetes.io/zone"),
            Some("eu-1b")
        );
        assert_eq!(node.label("topology.kubernetes.io/zone"), None);
        assert_eq!(node.label("beta.kubernetes.io/instance-type"), None);
        assert_eq!(node.label("unrelated"), None);
        // The hostname stays the template's own.
        assert_eq!(
            node.label("kubernetes.io/hostname"),
            Some(node.name.as_str())
        );
    }

    /// docs/clusterapi.md CAPI-50.
    #[test]
    fn c50_only_managed_template_labels_are_propagated() {
        for key in [
            "node-role.kubernetes.io/test",
            "node-restriction.kubernetes.io/x",
            "team.node-restriction.kubernetes.io/x",
            "node.cluster.x-k8s.io/x",
            "pool.node.cluster.x-k8s.io/x",
        ] {
            assert!(is_managed_label(key), "{key}");
        }
        for key in [
            "prefixed.node-role.kubernetes.io/x",
            "my.special.label/x",
            "node-role.kubernetes.io",
            "xnode.cluster.x-k8s.io/x",
            "plain",
        ] {
            assert!(!is_managed_label(key), "{key}");
        }
        let mut resource = sized(json!({}));
        resource.data["spec"]["template"]["metadata"]["labels"] = json!({
            "node-role.kubernetes.io/test": "test",
            "my.special.label/x": "dropped",
        });
        let node = build(&resource).template.node;
        assert_eq!(node.label("node-role.kubernetes.io/test"), Some("test"));
        assert_eq!(node.label("my.special.label/x"), None);
    }

    #[test]
    fn q5_upstream_label_path_is_read_too_and_real_path_wins() {
        let mut resource = sized(json!({CAPACITY_LABELS: "node.cluster.x-k8s.io/a=annotation"}));
        resource.data["spec"]["template"]["spec"]["metadata"] = json!({"labels": {
            "node.cluster.x-k8s.io/a": "upstream-path",
            "node.cluster.x-k8s.io/b": "upstream-path",
            "node.cluster.x-k8s.io/c": "upstream-path",
        }});
        resource.data["spec"]["template"]["metadata"]["labels"] = json!({
            "node.cluster.x-k8s.io/b": "real-path",
        });
        let node = build(&resource).template.node;
        // The annotation wins over both template paths.
        assert_eq!(node.label("node.cluster.x-k8s.io/a"), Some("annotation"));
        assert_eq!(node.label("node.cluster.x-k8s.io/b"), Some("real-path"));
        assert_eq!(node.label("node.cluster.x-k8s.io/c"), Some("upstream-path"));
    }

    /// docs/clusterapi.md CAPI-51.
    #[test]
    fn c51_taint_annotation_yields_exactly_those_taints() {
        let built = build(&sized(json!({
            CAPACITY_TAINTS: "key1=value1:NoSchedule,key2=value2:NoExecute"
        })));
        assert_eq!(
            built.template.node.taints,
            vec![
                Taint::new("key1", "value1", TaintEffect::NoSchedule),
                Taint::new("key2", "value2", TaintEffect::NoExecute),
            ]
        );
        assert!(built.skipped_items.is_empty());
    }

    /// docs/clusterapi.md CAPI-51.
    #[test]
    fn c51_spec_and_annotation_taints_merge_with_annotation_precedence() {
        let mut resource = sized(json!({
            CAPACITY_TAINTS: "dedicated=override:NoSchedule,dedicated=other:NoExecute,bare:PreferNoSchedule"
        }));
        resource.data["spec"]["template"]["spec"]["taints"] = json!([
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule", "propagation": "Always"},
            "not-an-object",
            {"key": "spec-only", "effect": "NoExecute"},
        ]);
        let taints = build(&resource).template.node.taints;
        assert_eq!(
            taints,
            vec![
                Taint::new("dedicated", "override", TaintEffect::NoSchedule),
                Taint::new("spec-only", "", TaintEffect::NoExecute),
                Taint::new("dedicated", "other", TaintEffect::NoExecute),
                Taint::new("bare", "", TaintEffect::PreferNoSchedule),
            ]
        );
    }

    /// docs/clusterapi.md CAPI-51.
    #[test]
    fn c51_invalid_taint_items_are_skipped_and_reported() {
        let built = build(&sized(json!({
            CAPACITY_TAINTS: "-bad=x:NoSchedule,good=in/valid:NoSchedule,noeffect,odd=x:Sometimes,ok=1:NoSchedule"
        })));
        assert_eq!(
            built.template.node.taints,
            vec![Taint::new("ok", "1", TaintEffect::NoSchedule)]
        );
        let values: Vec<&str> = built
            .skipped_items
            .iter()
            .map(|b| b.value.as_str())
            .collect();
        assert_eq!(
            values,
            vec![
                "-bad=x:NoSchedule",
                "good=in/valid:NoSchedule",
                "noeffect",
                "odd=x:Sometimes"
            ]
        );
        assert!(
            built
                .skipped_items
                .iter()
                .all(|b| b.annotation == CAPACITY_TAINTS)
        );
    }

    /// docs/clusterapi.md CAPI-52.
    #[test]
    fn c52_dra_driver_with_gpu_count_yields_one_resource_slice() {
        let built = build(&sized(json!({
            CAPACITY_DRA_DRIVER: "gpu.nvidia.com", CAPACITY_GPU_COUNT: "2"
        })));
        let gpu = BTreeMap::from([("type".to_string(), "gpu".to_string())]);
        assert_eq!(
            built.resource_slices,
            vec![ResourceSliceTemplate {
                name: "md-0-asg-42-gpu.nvidia.com".to_string(),
                driver: "gpu.nvidia.com".to_string(),
                node_name: "md-0-asg-42".to_string(),
                pool: "md-0-asg-42".to_string(),
                devices: vec![
                    DeviceTemplate {
                        name: "gpu-0".to_string(),
                        attributes: gpu.clone()
                    },
                    DeviceTemplate {
                        name: "gpu-1".to_string(),
                        attributes: gpu
                    },
                ],
            }]
        );
        // The engine's template carries the same slice, local to the template node, with the
        // attribute named as a CEL selector of the driver reads it.
        let slices = &built.template.resource_slices;
        assert_eq!(slices.len(), 1);
        assert_eq!(slices[0].driver, "gpu.nvidia.com");
        assert_eq!(
            slices[0].node_name(),
            Some(built.template.node.name.as_str())
        );
        assert_eq!(
            (slices[0].pool_generation, slices[0].pool_slice_count),
            (0, 1)
        );
        assert_eq!(slices[0].devices.len(), 2);
        assert_eq!(
            slices[0].devices[1].attributes.get("gpu.nvidia.com/type"),
            Some(&DeviceAttribute::String("gpu".to_string()))
        );
        // Without gpu-type no extended resource is added.
        assert_eq!(built.template.node.allocatable.extended().count(), 0);
        assert!(
            build(&sized(json!({CAPACITY_DRA_DRIVER: "gpu.nvidia.com"})))
                .resource_slices
                .is_empty()
        );
    }

    /// docs/clusterapi.md CAPI-53.
    #[test]
    fn c53_csi_driver_annotation_yields_a_csinode() {
        let built = build(&sized(json!({
            CAPACITY_CSI_DRIVER: " ebs.csi.aws.com = 25 ,efs.csi.aws.com=16,,zero.csi=0"
        })));
        assert_eq!(
            built.csi_node,
            Some(CsiNodeTemplate {
                node_name: "md-0-asg-42".to_string(),
                drivers: vec![
                    CsiDriverTemplate {
                        name: "ebs.csi.aws.com".to_string(),
                        allocatable_count: Some(25)
                    },
                    CsiDriverTemplate {
                        name: "efs.csi.aws.com".to_string(),
                        allocatable_count: Some(16)
                    },
                    CsiDriverTemplate {
                        name: "zero.csi".to_string(),
                        allocatable_count: None
                    },
                ],
            })
        );
        // The template the engine simulates carries the same limits.
        let simulated = built.template.csi_node.expect("the template's CSINode");
        assert_eq!(simulated.node_name, "md-0-asg-42");
        assert_eq!(
            simulated
                .drivers
                .iter()
                .map(|d| (d.name.as_str(), d.allocatable_count))
                .collect::<Vec<_>>(),
            vec![
                ("ebs.csi.aws.com", Some(25)),
                ("efs.csi.aws.com", Some(16)),
                ("zero.csi", None)
            ]
        );
    }

    /// docs/clusterapi.md CAPI-53.
    #[test]
    fn c53_invalid_csi_items_are_skipped_and_none_valid_means_no_csinode() {
        let built = build(&sized(json!({
            CAPACITY_CSI_DRIVER: "noequals,=5,a=x,b=-1,c=99999999999"
        })));
        assert_eq!(built.csi_node, None);
        assert_eq!(built.template.csi_node, None);
        assert_eq!(built.skipped_items.len(), 5);
        assert!(
            built
                .skipped_items
                .iter()
                .all(|b| b.annotation == CAPACITY_CSI_DRIVER)
        );
    }

    /// docs/clusterapi.md CAPI-54.
    #[test]
    fn c54_bad_capacity_annotation_is_an_error_not_a_template() {
        let keys = Keys::default();
        let resource = sized(json!({"capacity.cluster-autoscaler.kubernetes.io/maxPods": "13Mi"}));
        let err = build_template(input(&resource, &keys)).expect_err("bad maxPods");
        assert_eq!(err.value, "13Mi");
        let too_many = sized(json!({CAPACITY_GPU_COUNT: "100000000", CAPACITY_DRA_DRIVER: "d"}));
        assert!(build_template(input(&too_many, &keys)).is_err());
    }
}
