//! Scale-from-zero capacity (docs/clusterapi.md CAPI-44–CAPI-47, CAPI-54): what a new node of an
//! empty group would offer, from the capacity annotations of the scalable resource and from the
//! `status` of its infrastructure template, and whether that is enough (cpu and memory) to scale
//! from zero.

use std::collections::BTreeMap;

use ferroscale_model::Quantity;
use ferroscale_model::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
use kube::api::DynamicObject;
use serde_json::Value;

use crate::bad_input::{BadAnnotation, BadField};
use crate::fields;
use crate::keys::{
    CAPACITY_CPU, CAPACITY_EPHEMERAL_DISK, CAPACITY_GPU_COUNT, CAPACITY_GPU_TYPE,
    CAPACITY_MAX_PODS, CAPACITY_MEMORY,
};

/// Pods per node when `maxPods` is absent, empty or 0 (the kubelet default).
pub const DEFAULT_MAX_PODS: i64 = 110;

/// Resource name → amount.
pub type Capacity = BTreeMap<String, Quantity>;

fn bad(resource: &DynamicObject, annotation: &str, value: &str, problem: &str) -> BadAnnotation {
    BadAnnotation {
        object: fields::describe(resource),
        annotation: annotation.to_string(),
        value: value.to_string(),
        problem: problem.to_string(),
    }
}

/// A quantity annotation; absent or empty is zero. Negative amounts are refused (a Ferroscale
/// check: upstream would build a node with negative capacity).
fn quantity_annotation(resource: &DynamicObject, key: &str) -> Result<Quantity, BadAnnotation> {
    let Some(value) = fields::annotation(resource, key).filter(|v| !v.is_empty()) else {
        return Ok(Quantity::ZERO);
    };
    let quantity = Quantity::parse(value).map_err(|e| bad(resource, key, value, e.reason))?;
    if quantity < Quantity::ZERO {
        return Err(bad(resource, key, value, "must not be negative"));
    }
    Ok(quantity)
}

/// An integer annotation (base 10 only: `13Mi` is an error); absent or empty is zero.
fn integer_annotation(resource: &DynamicObject, key: &str) -> Result<i64, BadAnnotation> {
    let Some(value) = fields::annotation(resource, key).filter(|v| !v.is_empty()) else {
        return Ok(0);
    };
    let number: i64 = value
        .parse()
        .map_err(|_| bad(resource, key, value, "not a base-10 integer"))?;
    if number < 0 {
        return Err(bad(resource, key, value, "must not be negative"));
    }
    Ok(number)
}

/// The `gpu-count` annotation (0 when absent).
pub fn gpu_count(resource: &DynamicObject) -> Result<i64, BadAnnotation> {
    integer_annotation(resource, CAPACITY_GPU_COUNT)
}

/// Capacity from the annotations (docs/clusterapi.md CAPI-45). Always holds `pods`; zero amounts
/// are omitted.
pub fn annotation_capacity(resource: &DynamicObject) -> Result<Capacity, BadAnnotation> {
    let mut capacity = Capacity::new();
    for (key, name) in [
        (CAPACITY_CPU, CPU),
        (CAPACITY_MEMORY, MEMORY),
        (CAPACITY_EPHEMERAL_DISK, EPHEMERAL_STORAGE),
    ] {
        let amount = quantity_annotation(resource, key)?;
        if amount != Quantity::ZERO {
            capacity.insert(name.to_string(), amount);
        }
    }
    let count = gpu_count(resource)?;
    let gpu_type = fields::annotation(resource, CAPACITY_GPU_TYPE).unwrap_or("");
    if count > 0 && !gpu_type.is_empty() {
        capacity.insert(gpu_type.to_string(), Quantity::from_units(count));
    }
    let max_pods = match integer_annotation(resource, CAPACITY_MAX_PODS)? {
        0 => DEFAULT_MAX_PODS,
        n => n,
    };
    capacity.insert(PODS.to_string(), Quantity::from_units(max_pods));
    Ok(capacity)
}

/// `status.nodeInfo` of an infrastructure template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub architecture: String,
    pub operating_system: String,
}

/// What an infrastructure template's status says about its machines (docs/clusterapi.md CAPI-47,
/// CAPI-48).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InfrastructureCapacity {
    pub capacity: Capacity,
    /// `None` when the template has no `status.nodeInfo` map.
    pub node_info: Option<NodeInfo>,
    /// `status.capacity` entries that were skipped because they are not quantities.
    pub skipped: Vec<BadField>,
}

/// Reads `status.capacity` and `status.nodeInfo` of an infrastructure template.
pub fn infrastructure_capacity(infrastructure: &DynamicObject) -> InfrastructureCapacity {
    let mut result = InfrastructureCapacity::default();
    if let Some(map) =
        fields::at(infrastructure, &["status", "capacity"]).and_then(Value::as_object)
    {
        for (name, value) in map {
            let parsed = value
                .as_str()
                .ok_or("not a string")
                .and_then(|text| Quantity::parse(text).map_err(|e| e.reason));
            match parsed {
                Ok(quantity) => {
                    result.capacity.insert(name.clone(), quantity);
                }
                Err(problem) => result.skipped.push(BadField {
                    object: fields::describe(infrastructure),
                    field: format!("status.capacity.{name}"),
                    value: value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_string),
                    problem: format!("not a quantity ({problem}); entry ignored"),
                }),
            }
        }
    }
    if let Some(info) =
        fields::at(infrastructure, &["status", "nodeInfo"]).filter(|v| v.is_object())
    {
        let text = |key| {
            info.get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        result.node_info = Some(NodeInfo {
            architecture: text("architecture"),
            operating_system: text("operatingSystem"),
        });
    }
    result
}

/// The capacity of a new node (docs/clusterapi.md CAPI-47): annotations over the infrastructure
/// template's capacity. Without a template, annotations count only when they give more than `pods`;
/// an empty map means no capacity is known. An error means a capacity annotation cannot be parsed,
/// which disables scaling from zero.
pub fn combined_capacity(
    resource: &DynamicObject,
    infrastructure: Option<&DynamicObject>,
) -> Result<Capacity, BadAnnotation> {
    let annotations = annotation_capacity(resource)?;
    match infrastructure {
        Some(infrastructure) => {
            let mut combined = infrastructure_capacity(infrastructure).capacity;
            combined.extend(annotations);
            Ok(combined)
        }
        None if annotations.keys().any(|name| name != PODS) => Ok(annotations),
        None => Ok(Capacity::new()),
    }
}

/// A group can scale from zero when its combined capacity names both cpu and memory.
pub fn can_scale_from_zero(capacity: &Capacity) -> bool {
    capacity.contains_key(CPU) && capacity.contains_key(MEMORY)
}

/// `spec.template.spec.infrastructureRef` of a scalable resource (docs/clusterapi.md CAPI-47).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfrastructureRef {
    /// Cluster API v1beta2 style: the version is resolved through discovery.
    pub api_group: Option<String>,
    /// v1beta1 style `group/version`, used when `api_group` is absent.
    pub api_version: Option<String>,
    pub kind: String,
    pub name: String,
}

impl InfrastructureRef {
    /// The resource name: lower-case kind + `s` (`DockerMachineTemplate` → `dockermachinetemplates`).
    pub fn resource_plural(&self) -> String {
        format!("{}s", self.kind.to_lowercase())
    }
}

const INFRASTRUCTURE_REF: &str = "spec.template.spec.infrastructureRef";

/// The infrastructure template reference; `Ok(None)` when there is none. The object lives in the
/// scalable resource's namespace whatever the reference says.
pub fn infrastructure_ref(resource: &DynamicObject) -> Result<Option<InfrastructureRef>, BadField> {
    let Some(reference) = fields::at(resource, &["spec", "template", "spec", "infrastructureRef"])
        .and_then(Value::as_object)
    else {
        return Ok(None);
    };
    let text = |key: &str| {
        reference
            .get(key)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let missing = |key: &str| BadField {
        object: fields::describe(resource),
        field: format!("{INFRASTRUCTURE_REF}.{key}"),
        value: String::new(),
        problem: "required to find the infrastructure template".to_string(),
    };
    let kind = text("kind").ok_or_else(|| missing("kind"))?;
    let api_group = text("apiGroup");
    let api_version = text("apiVersion");
    if api_group.is_none() && api_version.is_none() {
        return Err(missing("apiVersion"));
    }
    let name = text("name").ok_or_else(|| missing("name"))?;
    Ok(Some(InfrastructureRef {
        api_group,
        api_version,
        kind,
        name,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_objects::{machine_deployment, object};
    use serde_json::json;

    fn md(annotations: Value) -> DynamicObject {
        machine_deployment("default", "md-0", annotations, Some(0))
    }

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).expect("valid quantity")
    }

    fn template(status: Value) -> DynamicObject {
        object(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachineTemplate",
            "metadata": {"namespace": "default", "name": "worker"},
            "spec": {"template": {"spec": {}}},
            "status": status,
        }))
    }

    /// docs/clusterapi.md CAPI-45.
    #[test]
    fn c45_capacity_annotations_give_cpu_memory_gpu_and_default_pods() {
        let capacity = annotation_capacity(&md(json!({
            CAPACITY_CPU: "2", CAPACITY_MEMORY: "2048Mi",
            CAPACITY_GPU_TYPE: "nvidia.com/gpu", CAPACITY_GPU_COUNT: "1",
        })))
        .expect("valid");
        assert_eq!(
            capacity,
            Capacity::from([
                ("cpu".to_string(), q("2")),
                ("memory".to_string(), q("2Gi")),
                ("pods".to_string(), q("110")),
                ("nvidia.com/gpu".to_string(), q("1")),
            ])
        );
        assert!(can_scale_from_zero(
            &combined_capacity(
                &md(json!({
                    CAPACITY_CPU: "2", CAPACITY_MEMORY: "2048Mi"
                })),
                None
            )
            .expect("valid")
        ));
    }

    /// docs/clusterapi.md CAPI-45.
    #[test]
    fn c45_gpu_needs_type_and_positive_count_and_max_pods_overrides_default() {
        let capacity = annotation_capacity(&md(json!({
            CAPACITY_CPU: "16000m", CAPACITY_GPU_COUNT: "2",
            CAPACITY_MAX_PODS: "30", CAPACITY_EPHEMERAL_DISK: "100Gi", CAPACITY_MEMORY: "",
        })))
        .expect("valid");
        assert_eq!(capacity.get("cpu"), Some(&q("16")));
        assert_eq!(capacity.get("pods"), Some(&q("30")));
        assert_eq!(capacity.get("ephemeral-storage"), Some(&q("100Gi")));
        assert_eq!(capacity.get("memory"), None);
        assert_eq!(capacity.len(), 3);
        let zero_pods = annotation_capacity(&md(json!({CAPACITY_MAX_PODS: "0"}))).expect("valid");
        assert_eq!(zero_pods, Capacity::from([("pods".to_string(), q("110"))]));
    }

    /// docs/clusterapi.md CAPI-44.
    #[test]
    fn c44_only_pods_without_template_is_no_capacity() {
        let combined =
            combined_capacity(&md(json!({CAPACITY_MAX_PODS: "20"})), None).expect("valid");
        assert!(combined.is_empty());
        assert!(!can_scale_from_zero(&combined));
        let cpu_only = combined_capacity(&md(json!({CAPACITY_CPU: "2"})), None).expect("valid");
        assert!(!can_scale_from_zero(&cpu_only));
    }

    /// docs/clusterapi.md CAPI-47.
    #[test]
    fn c47_template_capacity_alone_enables_scale_from_zero() {
        let infra = template(json!({"capacity": {"cpu": "1", "memory": "4G"}}));
        let combined = combined_capacity(&md(json!({})), Some(&infra)).expect("valid");
        assert!(can_scale_from_zero(&combined));
        assert_eq!(combined.get("cpu"), Some(&q("1")));
        assert_eq!(combined.get("memory"), Some(&q("4G")));
        assert_eq!(combined.get("pods"), Some(&q("110")));
    }

    /// docs/clusterapi.md CAPI-47.
    #[test]
    fn c47_annotations_override_template_per_resource() {
        let infra = template(
            json!({"capacity": {"cpu": "1", "memory": "4G", "pods": "500", "nvidia.com/gpu": "1"}}),
        );
        let combined =
            combined_capacity(&md(json!({CAPACITY_CPU: "8"})), Some(&infra)).expect("valid");
        assert_eq!(combined.get("cpu"), Some(&q("8")));
        assert_eq!(combined.get("memory"), Some(&q("4G")));
        // The template's pods never survive: the annotation map always holds pods.
        assert_eq!(combined.get("pods"), Some(&q("110")));
        assert_eq!(combined.get("nvidia.com/gpu"), Some(&q("1")));
        let memory_only = template(json!({"capacity": {"memory": "4G"}}));
        let mixed =
            combined_capacity(&md(json!({CAPACITY_CPU: "2"})), Some(&memory_only)).expect("valid");
        assert!(can_scale_from_zero(&mixed));
    }

    /// docs/clusterapi.md CAPI-48.
    #[test]
    fn c48_template_node_info_and_skipped_entries_are_reported() {
        let infra = template(json!({
            "capacity": {"cpu": "1", "memory": "lots", "weird": 3},
            "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux", "kernel": "x"}
        }));
        let read = infrastructure_capacity(&infra);
        assert_eq!(read.capacity, Capacity::from([("cpu".to_string(), q("1"))]));
        assert_eq!(
            read.node_info,
            Some(NodeInfo {
                architecture: "arm64".to_string(),
                operating_system: "linux".to_string()
            })
        );
        let skipped: Vec<&str> = read.skipped.iter().map(|b| b.field.as_str()).collect();
        assert_eq!(
            skipped,
            vec!["status.capacity.memory", "status.capacity.weird"]
        );
        assert!(read.skipped[0].to_string().contains("lots"));
        assert_eq!(
            infrastructure_capacity(&template(json!({}))).node_info,
            None
        );
    }

    /// docs/clusterapi.md CAPI-54.
    #[test]
    fn c54_unparseable_counts_are_errors_naming_the_annotation() {
        for (key, value) in [
            (CAPACITY_MAX_PODS, "13Mi"),
            (CAPACITY_GPU_COUNT, "not-a-quantity"),
            (CAPACITY_CPU, "two"),
            (CAPACITY_MEMORY, "-1Gi"),
        ] {
            let resource = md(json!({key: value}));
            let err = annotation_capacity(&resource).expect_err(value);
            assert_eq!(err.annotation, key);
            assert_eq!(err.value, value);
            assert_eq!(err.object, "MachineDeployment default/md-0");
            assert!(combined_capacity(&resource, None).is_err());
        }
    }

    #[test]
    fn infrastructure_ref_v1beta2_and_v1beta1_styles() {
        let v1beta2 = md(json!({}));
        assert_eq!(
            infrastructure_ref(&v1beta2),
            Ok(Some(InfrastructureRef {
                api_group: Some("infrastructure.cluster.x-k8s.io".to_string()),
                api_version: None,
                kind: "DockerMachineTemplate".to_string(),
                name: "worker".to_string(),
            }))
        );
        let reference = infrastructure_ref(&v1beta2)
            .ok()
            .flatten()
            .expect("a reference");
        assert_eq!(reference.resource_plural(), "dockermachinetemplates");

        let with_ref = |reference: Value| {
            object(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineSet",
                "metadata": {"namespace": "default", "name": "ms"},
                "spec": {"template": {"spec": {"infrastructureRef": reference}}}
            }))
        };
        let v1beta1 = with_ref(
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "AWSMachineTemplate", "name": "t"}),
        );
        assert_eq!(
            infrastructure_ref(&v1beta1)
                .ok()
                .flatten()
                .and_then(|r| r.api_version),
            Some("infrastructure.cluster.x-k8s.io/v1beta1".to_string())
        );
        for (reference, field) in [
            (json!({"apiVersion": "a/v1", "name": "t"}), "kind"),
            (json!({"kind": "K", "name": "t"}), "apiVersion"),
            (json!({"apiGroup": "a", "kind": "K"}), "name"),
        ] {
            let err = infrastructure_ref(&with_ref(reference)).expect_err(field);
            assert_eq!(err.field, format!("{INFRASTRUCTURE_REF}.{field}"));
            assert!(err.object.contains("MachineSet default/ms"));
        }
        let none = object(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
            "metadata": {"namespace": "default", "name": "mp"}, "spec": {}}),
        );
        assert_eq!(infrastructure_ref(&none), Ok(None));
    }
}
