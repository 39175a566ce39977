//! Strict reading, as `kubectl --validate=strict` does: a field the Kubernetes type does not have
//! (`nodeSelektor` in a pod spec) is an error, not silently dropped. The k8s-openapi types skip
//! unknown fields while deserializing, so the check compares what was written with what the typed
//! object keeps: every written key must survive a round trip through the type.

use serde::Serialize;
use serde_json::Value as Json;
use serde_yaml_ng::Value;

/// The path of the first field in `written` that `typed` (deserialized from it) does not have,
/// e.g. `spec.nodeSelektor` or `spec.containers[1].resource`; `None` when every field is known.
/// Null values are skipped: they deserialize to an absent field, whose name may well be right.
pub fn unknown_field<T: Serialize>(written: &Value, typed: &T) -> Option<String> {
    // Serializing a k8s-openapi object into a JSON value cannot fail (string keys, no custom
    // errors); if it ever did, nothing could be compared and nothing is reported.
    let kept = serde_json::to_value(typed).ok()?;
    first_unknown(written, &kept, "")
}

fn first_unknown(written: &Value, kept: &Json, path: &str) -> Option<String> {
    match (written, kept) {
        (Value::Mapping(fields), Json::Object(known)) => {
            for (key, value) in fields {
                let Some(key) = key.as_str() else { continue };
                if value.is_null() {
                    continue;
                }
                let field = if path.is_empty() {
                    key.to_string()
                } else {
                    format!("{path}.{key}")
                };
                match known.get(key) {
                    None => return Some(field),
                    Some(inner) => {
                        if let Some(unknown) = first_unknown(value, inner, &field) {
                            return Some(unknown);
                        }
                    }
                }
            }
            None
        }
        (Value::Sequence(items), Json::Array(known)) => items
            .iter()
            .zip(known)
            .enumerate()
            .find_map(|(i, (item, inner))| first_unknown(item, inner, &format!("{path}[{i}]"))),
        (Value::Tagged(tagged), _) => first_unknown(&tagged.value, kept, path),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1 as core;

    use super::*;

    fn unknown_in_pod(yaml: &str) -> Option<String> {
        let written: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let pod: core::Pod = serde_yaml_ng::from_value(written.clone()).unwrap();
        unknown_field(&written, &pod)
    }

    #[test]
    fn a_misspelt_field_is_named_with_its_path() {
        assert_eq!(
            unknown_in_pod(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  nodeSelektor: {a: b}\n  containers: [{name: c}]\n"
            )
            .as_deref(),
            Some("spec.nodeSelektor")
        );
        assert_eq!(
            unknown_in_pod(
                "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n  - name: b\n    resource: {requests: {cpu: 1}}\n"
            )
            .as_deref(),
            Some("spec.containers[1].resource")
        );
    }

    #[test]
    fn known_fields_free_form_maps_and_nulls_pass() {
        assert_eq!(
            unknown_in_pod(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  creationTimestamp: null\n  labels: {anything: goes}\n  annotations: {x/y: z}\nspec:\n  nodeSelector: {}\n  tolerations: []\n  containers:\n  - name: c\n    resources: {requests: {cpu: 500m}}\n    ports: [{containerPort: 80, hostPort: 80}]\nstatus: {phase: Running, conditions: [{type: Ready, status: \"True\", lastProbeTime: null}]}\n"
            ),
            None
        );
    }
}
