//! `CapacityQuota` (cluster-scoped): a cap on the resources of the nodes a label selector picks.
//! `v1beta1` is the storage version; `v1alpha1` has the same fields and converts into it.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::common::{Condition, ResourceList, conditions_schema, quantity_schema};

/// Resources one quota may limit.
pub const MAX_LIMITED_RESOURCES: usize = 20;
/// Characters of a limited resource's name.
pub const MAX_RESOURCE_NAME_LENGTH: usize = 63;

/// The limits of a quota.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct CapacityQuotaLimits {
    /// Resource name (`cpu`, `memory`, `nodes` or an extended resource) → the most the selected
    /// nodes may have in total, a non-negative integer quantity.
    #[schemars(schema_with = "limits_schema")]
    pub resources: ResourceList,
}

/// The usage a quota controller observed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct CapacityQuotaUsage {
    /// Current usage of the limited resources.
    #[schemars(schema_with = "crate::common::resource_list_schema")]
    pub resources: ResourceList,
}

/// What a quota controller reports.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityQuotaStatus {
    /// Current usage of the quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<CapacityQuotaUsage>,
    /// Observations of the quota's state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The last generation a controller observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

fn limits_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "maxProperties": MAX_LIMITED_RESOURCES,
        "additionalProperties": quantity_schema(),
        "x-kubernetes-validations": [
            {"rule": "self.all(key, size(key) <= 63)",
             "message": "Resource names must be 63 characters or less."},
            {"rule": "self.all(key, type(self[key]) == int ? self[key] >= 0 : (!self[key].startsWith('-') && quantity(self[key]).isInteger()))",
             "message": "All resource quantities must be non-negative integers."}
        ],
    })
}

macro_rules! capacity_quota_version {
    ($version:tt) => {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
        use schemars::JsonSchema;
        use serde::{Deserialize, Serialize};

        pub use super::{CapacityQuotaLimits, CapacityQuotaStatus, CapacityQuotaUsage};

        /// The nodes a quota covers and what they may add up to.
        #[derive(
            kube_derive::CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema,
        )]
        #[kube(
            group = "autoscaling.x-k8s.io",
            version = $version,
            kind = "CapacityQuota",
            plural = "capacityquotas",
            status = "CapacityQuotaStatus",
            shortname = "cq",
            derive = "PartialEq",
            doc = "A cap on the total resources of the nodes a selector picks, which the autoscaler does not plan beyond.",
            crates(
                kube_core = "::kube_core",
                k8s_openapi = "::k8s_openapi",
                schemars = "::schemars",
                serde = "::serde",
                serde_json = "::serde_json"
            )
        )]
        pub struct CapacityQuotaSpec {
            /// The nodes the quota applies to; empty or absent selects every node.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(schema_with = "crate::common::label_selector_schema")]
            pub selector: Option<meta::LabelSelector>,
            /// The quota's limits.
            pub limits: CapacityQuotaLimits,
        }
    };
}

/// The storage version.
pub mod v1beta1 {
    capacity_quota_version!("v1beta1");
}

/// The older served version, with the same fields.
pub mod v1alpha1 {
    capacity_quota_version!("v1alpha1");

    impl From<CapacityQuota> for super::v1beta1::CapacityQuota {
        fn from(old: CapacityQuota) -> super::v1beta1::CapacityQuota {
            super::v1beta1::CapacityQuota {
                metadata: old.metadata,
                spec: super::v1beta1::CapacityQuotaSpec {
                    selector: old.spec.selector,
                    limits: old.spec.limits,
                },
                status: old.status,
            }
        }
    }
}
