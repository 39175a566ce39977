//! Pieces Nodes and Pods share — object metadata, times, quantities, label selectors — copied
//! between the k8s-pb messages and the k8s-openapi objects (decoding) or the model (encoding).

use std::collections::BTreeMap;

use ferroscale_model::resources::{CPU, EPHEMERAL_STORAGE, MEMORY};
use ferroscale_model::{
    ConditionStatus, LabelOperator, LabelRequirement, LabelSelector, Labels, OwnerRef, Quantity,
    Resources, Timestamp,
};
use ferroscale_objects::ConvertError;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::jiff;
use k8s_pb::apimachinery::pkg::api::resource::Quantity as PbQuantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;

/// `0001-01-01T00:00:00Z`, Go's zero time, in Unix seconds: a Go peer that writes a zero time as
/// a plain timestamp means "unset".
const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;

/// `Kind name` or `Kind namespace/name`, as `ferroscale-objects` names objects in errors.
pub(super) fn describe(kind: &str, metadata: Option<&pb_meta::ObjectMeta>) -> String {
    let name = metadata
        .and_then(|m| present(&m.name))
        .unwrap_or_else(|| "<unnamed>".to_string());
    match metadata.and_then(|m| present(&m.namespace)) {
        Some(namespace) => format!("{kind} {namespace}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// A string the Go encoder writes even when empty; empty means unset, as JSON's `omitempty` reads it.
pub(super) fn present(value: &Option<String>) -> Option<String> {
    value.as_ref().filter(|s| !s.is_empty()).cloned()
}

/// A string the Kubernetes object requires; absent reads as empty.
pub(super) fn text(value: &Option<String>) -> String {
    value.clone().unwrap_or_default()
}

/// A list where empty means unset.
pub(super) fn present_list(values: &[String]) -> Option<Vec<String>> {
    (!values.is_empty()).then(|| values.to_vec())
}

/// A map where empty means unset.
pub(super) fn present_map(map: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then(|| map.clone())
}

/// A time as the Go encoder writes meta/v1 `Time`: an empty message (or Go's zero time) is unset.
pub(super) fn time_from_pb(
    object: &str,
    field: &str,
    time: Option<&pb_meta::Time>,
) -> Result<Option<meta::Time>, ConvertError> {
    let Some(time) = time else {
        return Ok(None);
    };
    let seconds = time.seconds.unwrap_or(0);
    let nanos = time.nanos.unwrap_or(0);
    if nanos == 0 && (seconds == 0 || seconds == GO_ZERO_TIME_SECONDS) {
        return Ok(None);
    }
    jiff::Timestamp::new(seconds, nanos)
        .map(|t| Some(meta::Time(t)))
        .map_err(|_| ConvertError {
            object: object.to_string(),
            field: field.to_string(),
            value: format!("seconds={seconds} nanos={nanos}"),
            message: "time out of range (years 0001 to 9999, nanos 0 to 999999999)".to_string(),
        })
}

/// The model's millisecond time as meta/v1 `Time`. The zero time is the empty message, as Go
/// writes it; milliseconds travel in `nanos`, which Go peers ignore and ferroscale peers keep.
pub(super) fn time_to_pb(time: Timestamp) -> pb_meta::Time {
    if time == Timestamp::default() {
        return pb_meta::Time::default();
    }
    let millis = time.millis();
    pb_meta::Time {
        seconds: Some(millis.div_euclid(1000)),
        // Below 1e9 by construction, so the conversion cannot fail.
        nanos: Some(i32::try_from(millis.rem_euclid(1000) * 1_000_000).unwrap_or(0)),
    }
}

/// A resource list. A quantity message without its string is zero, as Go's decoder reads it; an
/// empty string stays and is refused by the model conversion like any malformed quantity.
pub(super) fn quantities_from_pb(
    list: &BTreeMap<String, PbQuantity>,
) -> Option<BTreeMap<String, K8sQuantity>> {
    (!list.is_empty()).then(|| {
        list.iter()
            .map(|(name, quantity)| {
                let text = quantity.string.clone().unwrap_or_else(|| "0".to_string());
                (name.clone(), K8sQuantity(text))
            })
            .collect()
    })
}

/// A resource vector as a resource list of canonical quantity strings (`1500m`, `16Gi`, `110`).
pub(super) fn quantities_to_pb(resources: &Resources) -> BTreeMap<String, PbQuantity> {
    resources
        .iter()
        .map(|(name, amount)| {
            let quantity = PbQuantity {
                string: Some(quantity_text(name, amount)),
            };
            (name.to_string(), quantity)
        })
        .collect()
}

/// CPU is kept in millicores, everything else in whole units; byte amounts read best with a binary
/// suffix when they are whole multiples of one.
fn quantity_text(resource: &str, amount: i64) -> String {
    if resource == CPU {
        return Quantity::from_millis(amount).to_string();
    }
    let is_bytes =
        resource == MEMORY || resource == EPHEMERAL_STORAGE || resource.starts_with("hugepages-");
    if !is_bytes || amount == 0 {
        return amount.to_string();
    }
    let mut value = amount;
    let mut unit = "";
    for suffix in ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"] {
        if value % 1024 != 0 {
            break;
        }
        value /= 1024;
        unit = suffix;
    }
    format!("{value}{unit}")
}

/// The metadata fields the model conversion reads.
pub(super) fn object_meta_from_pb(
    object: &str,
    metadata: Option<&pb_meta::ObjectMeta>,
) -> Result<meta::ObjectMeta, ConvertError> {
    let Some(metadata) = metadata else {
        return Ok(meta::ObjectMeta::default());
    };
    Ok(meta::ObjectMeta {
        name: present(&metadata.name),
        namespace: present(&metadata.namespace),
        uid: present(&metadata.uid),
        labels: present_map(&metadata.labels),
        annotations: present_map(&metadata.annotations),
        owner_references: (!metadata.owner_references.is_empty()).then(|| {
            metadata
                .owner_references
                .iter()
                .map(|owner| meta::OwnerReference {
                    api_version: text(&owner.api_version),
                    kind: text(&owner.kind),
                    name: text(&owner.name),
                    uid: text(&owner.uid),
                    controller: owner.controller,
                    block_owner_deletion: owner.block_owner_deletion,
                })
                .collect()
        }),
        creation_timestamp: time_from_pb(
            object,
            "metadata.creationTimestamp",
            metadata.creation_timestamp.as_ref(),
        )?,
        deletion_timestamp: time_from_pb(
            object,
            "metadata.deletionTimestamp",
            metadata.deletion_timestamp.as_ref(),
        )?,
        ..meta::ObjectMeta::default()
    })
}

/// What the encoders put in `metadata`.
pub(super) struct MetadataFields<'a> {
    pub name: &'a str,
    pub namespace: Option<&'a str>,
    pub uid: &'a str,
    pub labels: &'a Labels,
    pub annotations: &'a Labels,
    pub owner_references: &'a [OwnerRef],
    pub creation_time: Timestamp,
    pub deletion_time: Option<Timestamp>,
}

/// Metadata written the way Go writes it: plain strings and the creation time always present.
pub(super) fn object_meta_to_pb(fields: MetadataFields<'_>) -> pb_meta::ObjectMeta {
    pb_meta::ObjectMeta {
        name: Some(fields.name.to_string()),
        namespace: Some(fields.namespace.unwrap_or_default().to_string()),
        uid: Some(fields.uid.to_string()),
        creation_timestamp: Some(time_to_pb(fields.creation_time)),
        deletion_timestamp: fields.deletion_time.map(time_to_pb),
        labels: fields.labels.into(),
        annotations: fields.annotations.into(),
        owner_references: fields
            .owner_references
            .iter()
            .map(|owner| pb_meta::OwnerReference {
                api_version: Some(owner.api_version.clone()),
                kind: Some(owner.kind.clone()),
                name: Some(owner.name.clone()),
                uid: Some(owner.uid.clone()),
                controller: Some(owner.controller),
                block_owner_deletion: None,
            })
            .collect(),
        ..pb_meta::ObjectMeta::default()
    }
}

pub(super) fn label_selector_from_pb(selector: &pb_meta::LabelSelector) -> meta::LabelSelector {
    meta::LabelSelector {
        match_labels: present_map(&selector.match_labels),
        match_expressions: (!selector.match_expressions.is_empty()).then(|| {
            selector
                .match_expressions
                .iter()
                .map(|requirement| meta::LabelSelectorRequirement {
                    key: text(&requirement.key),
                    operator: text(&requirement.operator),
                    values: present_list(&requirement.values),
                })
                .collect()
        }),
    }
}

pub(super) fn label_selector_to_pb(selector: &LabelSelector) -> pb_meta::LabelSelector {
    pb_meta::LabelSelector {
        match_labels: (&selector.match_labels).into(),
        match_expressions: selector
            .match_expressions
            .iter()
            .map(
                |requirement: &LabelRequirement| pb_meta::LabelSelectorRequirement {
                    key: Some(requirement.key.clone()),
                    operator: Some(label_operator_text(requirement.operator).to_string()),
                    values: requirement.values.clone(),
                },
            )
            .collect(),
    }
}

pub(super) fn condition_status_text(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

fn label_operator_text(operator: LabelOperator) -> &'static str {
    match operator {
        LabelOperator::In => "In",
        LabelOperator::NotIn => "NotIn",
        LabelOperator::Exists => "Exists",
        LabelOperator::DoesNotExist => "DoesNotExist",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_written_in_canonical_form() {
        assert_eq!(quantity_text(CPU, 1500), "1500m");
        assert_eq!(quantity_text(CPU, 4000), "4");
        assert_eq!(quantity_text(MEMORY, 16 << 30), "16Gi");
        assert_eq!(quantity_text(MEMORY, 1000), "1000");
        assert_eq!(quantity_text("hugepages-2Mi", 4 << 20), "4Mi");
        assert_eq!(quantity_text("pods", 110), "110");
        assert_eq!(quantity_text("nvidia.com/gpu", 1024), "1024");
    }

    #[test]
    fn zero_times_read_as_unset_and_milliseconds_survive() {
        let empty = pb_meta::Time::default();
        assert_eq!(time_from_pb("Node n", "f", Some(&empty)), Ok(None));
        let go_zero = pb_meta::Time {
            seconds: Some(GO_ZERO_TIME_SECONDS),
            nanos: Some(0),
        };
        assert_eq!(time_from_pb("Node n", "f", Some(&go_zero)), Ok(None));
        let t = Timestamp(1_714_557_600_250);
        let back = time_from_pb("Node n", "f", Some(&time_to_pb(t)))
            .unwrap()
            .unwrap();
        assert_eq!(back.0.as_millisecond(), t.millis());
        // Before the epoch: the nanos still count forward, as protobuf times require.
        let early = time_to_pb(Timestamp(-1500));
        assert_eq!((early.seconds, early.nanos), (Some(-2), Some(500_000_000)));
    }

    #[test]
    fn a_time_out_of_range_names_field_and_value() {
        let bad = pb_meta::Time {
            seconds: Some(i64::MAX),
            nanos: Some(0),
        };
        let error = time_from_pb("Node n1", "spec.taints[0].timeAdded", Some(&bad)).unwrap_err();
        assert_eq!(error.object, "Node n1");
        assert_eq!(error.field, "spec.taints[0].timeAdded");
        assert!(error.value.contains(&i64::MAX.to_string()));
    }
}
