//! Typed reads of Cluster API objects held as `DynamicObject`: metadata accessors and lookups in
//! the untyped `spec`/`status` JSON that never panic on unexpected shapes.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde_json::Value;

/// The object's annotation `key`, if set.
pub fn annotation<'a>(obj: &'a DynamicObject, key: &str) -> Option<&'a str> {
    obj.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The object's label `key`, if set.
pub fn label<'a>(obj: &'a DynamicObject, key: &str) -> Option<&'a str> {
    obj.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// Every annotation (empty when the object has none).
pub fn annotations(obj: &DynamicObject) -> impl Iterator<Item = (&str, &str)> {
    obj.metadata
        .annotations
        .iter()
        .flat_map(BTreeMap::iter)
        .map(|(k, v)| (k.as_str(), v.as_str()))
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// The object's labels, or an empty map.
pub fn labels(obj: &DynamicObject) -> &BTreeMap<String, String> {
    obj.metadata.labels.as_ref().unwrap_or(&NO_LABELS)
}

pub fn namespace(obj: &DynamicObject) -> &str {
    obj.metadata.namespace.as_deref().unwrap_or("")
}

pub fn name(obj: &DynamicObject) -> &str {
    obj.metadata.name.as_deref().unwrap_or("")
}

/// `Kind namespace/name`, the way messages about an object name it.
pub fn describe(obj: &DynamicObject) -> String {
    let kind = obj
        .types
        .as_ref()
        .map(|t| t.kind.as_str())
        .filter(|k| !k.is_empty())
        .unwrap_or("object");
    format!("{kind} {}/{}", namespace(obj), name(obj))
}

/// The JSON value at `path` under the object's data (`["spec", "replicas"]`), if every step exists.
pub fn at<'a>(obj: &'a DynamicObject, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(&obj.data, |value, step| value.get(step))
}

/// The string at `path`, if it exists and is a string.
pub fn str_at<'a>(obj: &'a DynamicObject, path: &[&str]) -> Option<&'a str> {
    at(obj, path).and_then(Value::as_str)
}

/// Whether the object is being deleted.
pub fn is_deleting(obj: &DynamicObject) -> bool {
    obj.metadata.deletion_timestamp.is_some()
}
