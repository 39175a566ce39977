//! `CapacityBuffer`: headroom kept warm, as a number of pods of a PodTemplate's or a workload's
//! shape. `v1beta1` is the storage version; `v1alpha1` has the same fields and converts into it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, LocalObjectRef, conditions_schema};

/// The only strategy upstream defines, and the default.
pub const ACTIVE_CAPACITY_STRATEGY: &str = "buffer.x-k8s.io/active-capacity";

/// An object with a scale subresource, in the buffer's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    /// API group of the object; empty for the core group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// Kind of the object, e.g. Deployment or StatefulSet.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// Name of the object.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// What the buffer controller resolved the buffer into.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    /// The PodTemplate the buffer's pods are made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// How many pods (chunks) the buffer holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The generation of the PodTemplate the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    /// Observations of the buffer's state (`Ready` and others).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The strategy the buffer is provisioned with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
    /// How many of the buffer's pods fit nodes that exist now (written by the autoscaler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
}

macro_rules! capacity_buffer_version {
    ($version:tt) => {
        use schemars::JsonSchema;
        use serde::{Deserialize, Serialize};

        pub use super::{CapacityBufferStatus, ScalableRef};
        pub use crate::common::{LocalObjectRef, ResourceList};

        /// The buffer's shape (a PodTemplate or a scalable workload) and its size (replicas, a
        /// percentage of the workload's replicas, resource limits).
        #[derive(
            kube_derive::CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema,
        )]
        #[kube(
            group = "autoscaling.x-k8s.io",
            version = $version,
            kind = "CapacityBuffer",
            plural = "capacitybuffers",
            namespaced,
            status = "CapacityBufferStatus",
            shortname = "cb",
            derive = "PartialEq",
            doc = "Headroom the autoscaler keeps: a number of pods of a given shape that could start at once.",
            printcolumn = r#"{"name":"Strategy","type":"string","description":"The provisioning strategy.","jsonPath":".spec.provisioningStrategy"}"#,
            printcolumn = r#"{"name":"PodTemplate","type":"string","description":"The PodTemplate the buffer's pods are made from.","jsonPath":".status.podTemplateRef.name"}"#,
            printcolumn = r#"{"name":"Replicas","type":"integer","description":"The buffer's pods (chunks).","jsonPath":".status.replicas"}"#,
            printcolumn = r#"{"name":"ConditionsType","type":"string","description":"Types of the conditions.","jsonPath":".status.conditions[*].type"}"#,
            printcolumn = r#"{"name":"ConditionsStatus","type":"string","description":"Statuses of the conditions.","jsonPath":".status.conditions[*].status"}"#,
            printcolumn = r#"{"name":"ConditionsReason","type":"string","description":"Reasons of the conditions.","jsonPath":".status.conditions[*].reason"}"#,
            printcolumn = r#"{"name":"Age","type":"date","description":"Age of the buffer.","jsonPath":".metadata.creationTimestamp"}"#,
            crates(
                kube_core = "::kube_core",
                k8s_openapi = "::k8s_openapi",
                schemars = "::schemars",
                serde = "::serde",
                serde_json = "::serde_json"
            )
        )]
        #[serde(rename_all = "camelCase")]
        #[schemars(extend("x-kubernetes-validations" = [
            {"rule": "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",
             "message": "If X is set, replicas or limits must also be set"},
            {"rule": "!(has(self.podTemplateRef) && has(self.scalableRef))",
             "message": "You must define either PodTemplateRef or ScalableRef, but not both"}
        ]))]
        pub struct CapacityBufferSpec {
            /// How the buffer is used; `buffer.x-k8s.io/active-capacity` (the default) makes the
            /// autoscaler add nodes for the buffer's pods.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(extend("default" = "buffer.x-k8s.io/active-capacity"))]
            pub provisioning_strategy: Option<String>,
            /// A PodTemplate (same namespace) giving the shape of one chunk. Exactly one of
            /// `podTemplateRef` and `scalableRef` is set.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub pod_template_ref: Option<LocalObjectRef>,
            /// A workload with a scale subresource whose pods give the shape of one chunk.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub scalable_ref: Option<ScalableRef>,
            /// Chunks wanted. With `percentage` too, the larger of the two counts.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(range(min = 0))]
            pub replicas: Option<i32>,
            /// Chunks as a percentage of the scalable workload's replicas, rounded up, at least 1.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(range(min = 0))]
            pub percentage: Option<i32>,
            /// Caps the chunks by their total requests; alone, as many chunks as fit.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(schema_with = "crate::common::resource_list_schema")]
            pub limits: Option<ResourceList>,
        }
    };
}

/// The storage version.
pub mod v1beta1 {
    capacity_buffer_version!("v1beta1");
}

/// The older served version, with the same fields.
pub mod v1alpha1 {
    capacity_buffer_version!("v1alpha1");

    impl From<CapacityBuffer> for super::v1beta1::CapacityBuffer {
        fn from(old: CapacityBuffer) -> super::v1beta1::CapacityBuffer {
            super::v1beta1::CapacityBuffer {
                metadata: old.metadata,
                spec: super::v1beta1::CapacityBufferSpec {
                    provisioning_strategy: old.spec.provisioning_strategy,
                    pod_template_ref: old.spec.pod_template_ref,
                    scalable_ref: old.spec.scalable_ref,
                    replicas: old.spec.replicas,
                    percentage: old.spec.percentage,
                    limits: old.spec.limits,
                },
                status: old.status,
            }
        }
    }
}
