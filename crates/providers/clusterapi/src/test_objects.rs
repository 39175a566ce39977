//! Builders of Cluster API objects for unit tests, from JSON shaped like real v1beta2 objects.

use kube::api::DynamicObject;
use serde_json::{Value, json};

/// Parses a JSON literal into a `DynamicObject` the way the API client does.
pub fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("test object is a valid Kubernetes object")
}

/// A v1beta2 MachineDeployment `ns/name` with the given annotations, replicas and selector
/// `cluster.x-k8s.io/deployment-name=<name>`.
pub fn machine_deployment(
    ns: &str,
    name: &str,
    annotations: Value,
    replicas: Option<i64>,
) -> DynamicObject {
    let mut spec = json!({
        "clusterName": "test-cluster",
        "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": name}},
        "template": {
            "metadata": {"labels": {"cluster.x-k8s.io/deployment-name": name}},
            "spec": {
                "clusterName": "test-cluster",
                "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "bootstrap"}},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "worker"}
            }
        }
    });
    if let Some(r) = replicas {
        spec["replicas"] = json!(r);
    }
    object(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {"namespace": ns, "name": name, "annotations": annotations},
        "spec": spec,
    }))
}

/// A v1beta2 Machine `ns/name` of MachineSet `machineset`, labelled for MachineDeployment
/// `deployment`, with the given spec and status.
pub fn machine(
    ns: &str,
    name: &str,
    deployment: &str,
    spec: Value,
    status: Value,
) -> DynamicObject {
    let mut full_spec = json!({"clusterName": "test-cluster"});
    if let (Some(target), Some(extra)) = (full_spec.as_object_mut(), spec.as_object()) {
        target.extend(extra.clone());
    }
    object(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {
            "namespace": ns,
            "name": name,
            "labels": {"cluster.x-k8s.io/deployment-name": deployment, "cluster.x-k8s.io/cluster-name": "test-cluster"},
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet", "name": format!("{deployment}-abc"), "uid": "u1"}]
        },
        "spec": full_spec,
        "status": status,
    }))
}
