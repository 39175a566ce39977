//! Converts Kubernetes API objects, exactly as `kubectl get -o yaml` prints them, into the
//! Ferroscale model. This is the boundary: every quantity, operator, effect and port is parsed here
//! once, and an error names the object, the field path and the bad value.
//!
//! - [`convert`]: one k8s-openapi object to one model object (`pod_from_k8s`, `node_from_k8s`, ...).
//! - [`documents`]: multi-document YAML and `List`s, dispatched on `kind`; unused kinds are skipped
//!   with a warning ([`parse_objects_yaml`]).
//! - [`strict`]: fields the Kubernetes type does not have are errors, as with
//!   `kubectl --validate=strict`.
//! - [`locate`]: best-effort line numbers for field paths, for errors found after parsing.

pub mod convert;
pub mod documents;
pub mod locate;
pub mod strict;

use ferroscale_model::{
    CapacityBuffer, CapacityQuota, CsiNode, DaemonSet, DeviceClass, Namespace, Node,
    PersistentVolume, PersistentVolumeClaim, Pod, PodDisruptionBudget, PodTemplate, PriorityClass,
    ProvisioningRequest, ResourceClaim, ResourceClaimTemplate, ResourceSlice, StorageClass,
};

pub use convert::{
    ConvertError, PriorityClasses, capacity_buffer_from_k8s, capacity_buffer_status_to_k8s,
    capacity_quota_from_k8s, csi_node_from_k8s, daemonset_from_k8s, device_class_from_k8s,
    namespace_from_k8s, node_from_k8s, pdb_from_k8s, pod_from_k8s, pod_template_from_k8s,
    priority_class_from_k8s, provisioning_request_from_k8s, provisioning_request_status_to_k8s,
    pv_from_k8s, pvc_from_k8s, resource_claim_from_k8s, resource_claim_template_from_k8s,
    resource_slice_from_k8s, storage_class_from_k8s, workload_selector_from_k8s,
};
/// The size limits DRA objects are held to (the API server's own validation limits).
pub mod dra_limits {
    pub use crate::convert::{
        MAX_ALLOCATED_DEVICES, MAX_ATTRIBUTE_VALUE_LENGTH,
        MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE, MAX_CONSTRAINTS_PER_CLAIM, MAX_DEVICES_PER_SLICE,
        MAX_EXPRESSION_LENGTH, MAX_REQUESTS_PER_CLAIM, MAX_SELECTORS, MAX_SUBREQUESTS,
    };
}
pub use documents::{
    Document, DocumentObject, ObjectsError, ParsedObjects, RawObject, RawObjectError,
    parse_objects_yaml, parse_objects_yaml_with, read_documents, split_documents,
};
pub use locate::locate_field_line;
pub use strict::unknown_field;

/// The capacity APIs' object types this crate reads (the storage versions; older ones convert).
pub use ferroscale_capacity_apis;

/// The k8s-openapi version this crate reads, for callers that embed raw objects in their own types.
pub use k8s_openapi;

/// One cluster object converted into the model.
#[derive(Debug, Clone, PartialEq)]
pub enum K8sObject {
    Node(Node),
    Pod(Pod),
    DaemonSet(DaemonSet),
    PodDisruptionBudget(PodDisruptionBudget),
    PriorityClass(PriorityClass),
    Namespace(Namespace),
    PersistentVolumeClaim(PersistentVolumeClaim),
    PersistentVolume(PersistentVolume),
    StorageClass(StorageClass),
    CsiNode(CsiNode),
    ResourceSlice(ResourceSlice),
    DeviceClass(DeviceClass),
    ResourceClaim(ResourceClaim),
    ResourceClaimTemplate(ResourceClaimTemplate),
    PodTemplate(PodTemplate),
    ProvisioningRequest(ProvisioningRequest),
    CapacityBuffer(CapacityBuffer),
    CapacityQuota(CapacityQuota),
}

impl K8sObject {
    /// Kind and name, for messages.
    pub fn describe(&self) -> String {
        match self {
            K8sObject::Node(n) => format!("Node {}", n.name),
            K8sObject::Pod(p) => format!("Pod {}", p.key()),
            K8sObject::DaemonSet(d) => format!("DaemonSet {}/{}", d.namespace, d.name),
            K8sObject::PodDisruptionBudget(p) => {
                format!("PodDisruptionBudget {}/{}", p.namespace, p.name)
            }
            K8sObject::PriorityClass(c) => format!("PriorityClass {}", c.name),
            K8sObject::Namespace(n) => format!("Namespace {}", n.name),
            K8sObject::PersistentVolumeClaim(c) => format!("PersistentVolumeClaim {}", c.key()),
            K8sObject::PersistentVolume(v) => format!("PersistentVolume {}", v.name),
            K8sObject::StorageClass(c) => format!("StorageClass {}", c.name),
            K8sObject::CsiNode(c) => format!("CSINode {}", c.node_name),
            K8sObject::ResourceSlice(s) => format!("ResourceSlice {}", s.name),
            K8sObject::DeviceClass(c) => format!("DeviceClass {}", c.name),
            K8sObject::ResourceClaim(c) => format!("ResourceClaim {}", c.key()),
            K8sObject::ResourceClaimTemplate(t) => {
                format!("ResourceClaimTemplate {}/{}", t.namespace, t.name)
            }
            K8sObject::PodTemplate(t) => format!("PodTemplate {}/{}", t.namespace, t.name),
            K8sObject::ProvisioningRequest(r) => format!("ProvisioningRequest {}", r.key()),
            K8sObject::CapacityBuffer(b) => format!("CapacityBuffer {}", b.key()),
            K8sObject::CapacityQuota(q) => format!("CapacityQuota {}", q.name),
        }
    }
}
