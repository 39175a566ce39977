//! Sub-objects shared by every version of the three kinds, and the hand-written schemas of the
//! fields whose Rust type is a k8s-openapi type (quantities, times, label selectors): k8s-openapi is
//! built without schemars, so these schemas say exactly what the API server is to validate.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// A resource name → quantity map (`ResourceList`).
pub type ResourceList = BTreeMap<String, Quantity>;

/// A `metav1.Condition` of a status, validated as the API server validates the standard type.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition, in CamelCase or `domain/CamelCase`.
    #[serde(rename = "type")]
    #[schemars(length(max = 316), regex(pattern = CONDITION_TYPE_PATTERN))]
    pub type_: String,
    /// Status of the condition: True, False or Unknown.
    #[schemars(schema_with = "condition_status_schema")]
    pub status: String,
    /// The `.metadata.generation` the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When the condition last changed from one status to another.
    #[schemars(schema_with = "date_time_schema")]
    pub last_transition_time: meta::Time,
    /// A CamelCase identifier of the reason for the last transition.
    #[schemars(length(min = 1, max = 1024), regex(pattern = CONDITION_REASON_PATTERN))]
    pub reason: String,
    /// A human-readable message about the transition; may be empty.
    #[schemars(length(max = 32768))]
    pub message: String,
}

/// `(dns1123 subdomain/)?qualified name`.
pub const CONDITION_TYPE_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";
/// A CamelCase-ish programmatic identifier.
pub const CONDITION_REASON_PATTERN: &str = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";
/// A DNS-1123 subdomain (object names).
pub const DNS_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// The Kubernetes quantity syntax.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// The name of an object in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct LocalObjectRef {
    /// Name of the object.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// A condition list: a map keyed by `type`, so that writers merge conditions by type.
pub fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let item = generator.subschema_for::<Condition>();
    json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

fn condition_status_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": ["True", "False", "Unknown"]})
}

fn date_time_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "format": "date-time"})
}

/// The schema of one quantity: an integer or a quantity string.
pub fn quantity_schema() -> serde_json::Value {
    serde_json::json!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": true,
    })
}

/// An optional resource list.
pub fn resource_list_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": quantity_schema(),
    })
}

/// A `metav1.LabelSelector`, replaced as a whole (`atomic`) as the standard type is.
pub fn label_selector_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "Selects nodes by label; an empty or absent selector selects every node.",
        "properties": {
            "matchLabels": {
                "type": "object",
                "additionalProperties": {"type": "string"},
            },
            "matchExpressions": {
                "type": "array",
                "x-kubernetes-list-type": "atomic",
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"type": "string"},
                        "operator": {"type": "string"},
                        "values": {
                            "type": "array",
                            "x-kubernetes-list-type": "atomic",
                            "items": {"type": "string"},
                        },
                    },
                },
            },
        },
        "x-kubernetes-map-type": "atomic",
    })
}
