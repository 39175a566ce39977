//! `ProvisioningRequest`: capacity asked for up front, for a set of pods described by PodTemplates.
//! `v1` is the storage version; `v1beta1` has the same fields and converts into it.

use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::common::{Condition, DNS_SUBDOMAIN_PATTERN, conditions_schema};

/// Pod sets a request may list.
pub const MAX_POD_SETS: usize = 32;
/// Entries of `spec.parameters`.
pub const MAX_PARAMETERS: usize = 100;
/// Characters of one parameter value.
pub const MAX_PARAMETER_LENGTH: usize = 255;
/// Entries of `status.provisioningClassDetails`.
pub const MAX_DETAILS: usize = 64;
/// Characters of one detail value.
pub const MAX_DETAIL_LENGTH: usize = 32768;

/// One group of identical pods the request asks room for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    /// The PodTemplate (same namespace) describing the pods that will use the capacity.
    pub pod_template_ref: Reference,
    /// How many pods of this template.
    #[schemars(range(min = 1))]
    pub count: i32,
}

/// The name of an object in the request's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct Reference {
    /// Name of the referenced object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
}

/// What the autoscaler reports about a request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestStatus {
    /// Observations of the request's state (Accepted, Provisioned, Failed, BookingExpired,
    /// CapacityRevoked, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Free-form values a provisioning class passes back to the user.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "details_schema")]
    pub provisioning_class_details: BTreeMap<String, String>,
}

fn parameters_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "maxProperties": MAX_PARAMETERS,
        "additionalProperties": {"type": "string", "maxLength": MAX_PARAMETER_LENGTH},
        "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "Value is immutable"}],
    })
}

fn details_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "maxProperties": MAX_DETAILS,
        "additionalProperties": {"type": "string", "maxLength": MAX_DETAIL_LENGTH},
    })
}

/// One served version: the spec (the derive makes the object type around it) and, for the older
/// versions, the conversion into the storage version.
macro_rules! provisioning_request_version {
    ($version:tt) => {
        use schemars::JsonSchema;
        use serde::{Deserialize, Serialize};
        use std::collections::BTreeMap;

        pub use super::{PodSet, ProvisioningRequestStatus, Reference};

        /// Pods to find or make room for, and how (the provisioning class). The whole spec is
        /// immutable: a changed request is a new object.
        #[derive(
            kube_derive::CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema,
        )]
        #[kube(
            group = "autoscaling.x-k8s.io",
            version = $version,
            kind = "ProvisioningRequest",
            plural = "provisioningrequests",
            namespaced,
            status = "ProvisioningRequestStatus",
            shortname = "provreq",
            shortname = "provreqs",
            derive = "PartialEq",
            doc = "A request for capacity for a set of pods, found in the cluster or added by the autoscaler.",
            printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
            crates(
                kube_core = "::kube_core",
                k8s_openapi = "::k8s_openapi",
                schemars = "::schemars",
                serde = "::serde",
                serde_json = "::serde_json"
            )
        )]
        #[serde(rename_all = "camelCase")]
        pub struct ProvisioningRequestSpec {
            /// The groups of pods to provision capacity for.
            #[schemars(
                length(min = 1, max = 32),
                extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}])
            )]
            pub pod_sets: Vec<PodSet>,
            /// How the capacity is provisioned, e.g. `check-capacity.autoscaling.x-k8s.io` or
            /// `best-effort-atomic-scale-up.autoscaling.x-k8s.io`.
            #[schemars(
                length(max = 253),
                regex(pattern = crate::common::DNS_SUBDOMAIN_PATTERN),
                extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}])
            )]
            pub provisioning_class_name: String,
            /// Further settings of the provisioning class (each value at most 255 characters).
            #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
            #[schemars(schema_with = "super::parameters_schema")]
            pub parameters: BTreeMap<String, String>,
        }
    };
}

/// The storage version.
pub mod v1 {
    provisioning_request_version!("v1");
}

/// The older served version, with the same fields.
pub mod v1beta1 {
    provisioning_request_version!("v1beta1");

    impl From<ProvisioningRequest> for super::v1::ProvisioningRequest {
        fn from(old: ProvisioningRequest) -> super::v1::ProvisioningRequest {
            super::v1::ProvisioningRequest {
                metadata: old.metadata,
                spec: super::v1::ProvisioningRequestSpec {
                    pod_sets: old.spec.pod_sets,
                    provisioning_class_name: old.spec.provisioning_class_name,
                    parameters: old.spec.parameters,
                },
                status: old.status,
            }
        }
    }
}
