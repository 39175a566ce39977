//! The capacity APIs of the `autoscaling.x-k8s.io` group as the engine reads them:
//! ProvisioningRequests (capacity asked for up front), CapacityBuffers (headroom kept warm),
//! CapacityQuotas (caps on what matching nodes may add up to), and the PodTemplates the first two
//! point at.
//!
//! These are the parsed forms: the boundary (`crates/objects`) reads every served version
//! (`v1` and `v1beta1` ProvisioningRequests, `v1beta1` and `v1alpha1` buffers and quotas) into
//! them, with errors that name the object, field and value.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::labels::LabelSelector;
use crate::node::ConditionStatus;
use crate::pod::Pod;
use crate::quantity::Quantity;
use crate::time::Timestamp;

/// API group of the three kinds.
pub const CAPACITY_API_GROUP: &str = "autoscaling.x-k8s.io";

/// `provisioningClassName` of requests that ask whether the cluster already has the capacity.
pub const CHECK_CAPACITY_CLASS: &str = "check-capacity.autoscaling.x-k8s.io";
/// `provisioningClassName` of requests that scale up all their nodes or none.
pub const BEST_EFFORT_ATOMIC_CLASS: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";
/// Pod annotation naming the ProvisioningRequest (same namespace) whose capacity the pod uses.
pub const CONSUME_PROVISIONING_REQUEST_ANNOTATION: &str =
    "autoscaling.x-k8s.io/consume-provisioning-request";
/// Pod annotation naming the provisioning class of the request the pod uses.
pub const PROVISIONING_CLASS_ANNOTATION: &str = "autoscaling.x-k8s.io/provisioning-class-name";

/// Condition types of a ProvisioningRequest.
pub mod provisioning_conditions {
    pub const ACCEPTED: &str = "Accepted";
    pub const PROVISIONED: &str = "Provisioned";
    pub const FAILED: &str = "Failed";
    pub const BOOKING_EXPIRED: &str = "BookingExpired";
    pub const CAPACITY_REVOKED: &str = "CapacityRevoked";
}

/// The buffer strategy upstream defines (and the default): the buffer's pods make the
/// autoscaler add capacity for them.
pub const ACTIVE_CAPACITY_STRATEGY: &str = "buffer.x-k8s.io/active-capacity";

/// A `metav1.Condition` as stored in the status of the capacity kinds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiCondition {
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
    pub last_transition: Timestamp,
    pub observed_generation: i64,
}

impl ApiCondition {
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// The condition of this type in a list, if any.
pub fn find_condition<'a>(conditions: &'a [ApiCondition], type_: &str) -> Option<&'a ApiCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// A core `PodTemplate`: the shape of the pods a request or a buffer stands for.
#[derive(Debug, Clone, PartialEq)]
pub struct PodTemplate {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: i64,
    /// `template` as a pod named after the PodTemplate, in its namespace, not bound. Its
    /// `labels` and `annotations` are the template's metadata.
    pub pod: Arc<Pod>,
}

/// One group of identical pods a ProvisioningRequest asks room for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSet {
    /// `podTemplateRef.name`, in the request's namespace.
    pub pod_template: String,
    pub count: u32,
}

/// The status a ProvisioningRequest carries (written back by the engine).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProvisioningRequestStatus {
    pub conditions: Vec<ApiCondition>,
    /// `provisioningClassDetails`.
    pub details: BTreeMap<String, String>,
}

/// A `ProvisioningRequest` (`autoscaling.x-k8s.io/v1`, `v1beta1` read alike).
#[derive(Debug, Clone, PartialEq)]
pub struct ProvisioningRequest {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: i64,
    pub creation_time: Timestamp,
    /// Set when the object is being deleted.
    pub deleting: bool,
    /// `provisioningClassName`, as written (classes the engine does not handle are ignored).
    pub class: String,
    pub pod_sets: Vec<PodSet>,
    /// `parameters` (each value at most 255 characters).
    pub parameters: BTreeMap<String, String>,
    pub status: ProvisioningRequestStatus,
}

impl ProvisioningRequest {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn condition(&self, type_: &str) -> Option<&ApiCondition> {
        find_condition(&self.status.conditions, type_)
    }
}

/// `spec.scalableRef` of a buffer: an object with a scale subresource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScalableRef {
    /// Empty for the core group.
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

/// `spec` of a CapacityBuffer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CapacityBufferSpec {
    /// `provisioningStrategy`; `None` means [`ACTIVE_CAPACITY_STRATEGY`].
    pub provisioning_strategy: Option<String>,
    /// `podTemplateRef.name` (same namespace).
    pub pod_template_ref: Option<String>,
    pub scalable_ref: Option<ScalableRef>,
    pub replicas: Option<i32>,
    pub percentage: Option<i32>,
    /// `limits`: resource name → quantity.
    pub limits: Option<BTreeMap<String, Quantity>>,
}

/// `status` of a CapacityBuffer (written back by the buffer controller).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CapacityBufferStatus {
    pub pod_template_ref: Option<String>,
    pub replicas: Option<i32>,
    pub pod_template_generation: Option<i64>,
    pub conditions: Vec<ApiCondition>,
    pub provisioning_strategy: Option<String>,
    /// `readyReplicas`: how many of the buffer's virtual pods fit existing nodes in the last
    /// loop that injected them (written with `--capacity-buffer-ready-replicas-enabled`).
    pub ready_replicas: Option<i32>,
}

/// A `CapacityBuffer` (`autoscaling.x-k8s.io/v1beta1`, `v1alpha1` read alike).
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityBuffer {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: i64,
    pub creation_time: Timestamp,
    pub spec: CapacityBufferSpec,
    pub status: CapacityBufferStatus,
}

impl CapacityBuffer {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What Gather learned about the object a buffer's `scalableRef` names.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalableObject {
    pub namespace: String,
    pub reference: ScalableRef,
    /// The scale subresource's `spec.replicas` (desired replicas).
    pub replicas: i32,
    /// Replicas that are ready (for `--capacity-buffer-ready-replicas-enabled`), when known.
    pub ready_replicas: Option<i32>,
    /// The pod shape: a live pod of the object when one exists, otherwise the object's own pod
    /// template (dry-run through the API server when `--capacity-buffer-pod-dry-run-enabled`).
    /// `None` when neither could be resolved; `error` says why.
    pub pod: Option<Arc<Pod>>,
    pub error: Option<String>,
}

/// A `CapacityQuota` (`autoscaling.x-k8s.io/v1beta1`, `v1alpha1` read alike): cluster-scoped.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityQuota {
    pub name: String,
    pub uid: String,
    pub generation: i64,
    /// Nodes the quota covers; `None` (or an empty selector) covers every node.
    pub selector: Option<LabelSelector>,
    /// `spec.limits.resources`: `cpu`, `memory`, `nodes` or any extended resource, as
    /// non-negative integers.
    pub limits: BTreeMap<String, Quantity>,
    pub conditions: Vec<ApiCondition>,
}

/// Everything of the capacity APIs Gather read this loop. Empty when the features are off or the
/// API server does not serve the kinds.
#[derive(Debug, Clone, Default)]
pub struct CapacityObjects {
    pub pod_templates: Vec<Arc<PodTemplate>>,
    pub provisioning_requests: Vec<Arc<ProvisioningRequest>>,
    pub buffers: Vec<Arc<CapacityBuffer>>,
    /// One entry per distinct `scalableRef` of the buffers (with its namespace).
    pub scalables: Vec<Arc<ScalableObject>>,
    pub quotas: Vec<Arc<CapacityQuota>>,
}

impl CapacityObjects {
    /// The PodTemplate `namespace/name`, if it exists.
    pub fn pod_template(&self, namespace: &str, name: &str) -> Option<&Arc<PodTemplate>> {
        self.pod_templates
            .iter()
            .find(|t| t.namespace == namespace && t.name == name)
    }

    /// What Gather resolved for a buffer's `scalableRef`.
    pub fn scalable(
        &self,
        namespace: &str,
        reference: &ScalableRef,
    ) -> Option<&Arc<ScalableObject>> {
        self.scalables
            .iter()
            .find(|s| s.namespace == namespace && &s.reference == reference)
    }
}
