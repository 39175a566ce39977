//! `--node-group-auto-discovery` specs of the form `clusterapi:key=value,...` (docs/clusterapi.md
//! CAPI-08–CAPI-12): parsing, matching Cluster API objects, and the namespace the watches are
//! limited to.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use thiserror::Error;

use crate::fields;
use crate::keys::Keys;
use crate::syntax::{is_label_value, is_qualified_name};

/// The discoverer name every spec must start with.
pub const DISCOVERER: &str = "clusterapi";

/// One parsed discovery spec. Empty fields do not filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoverySpec {
    pub namespace: String,
    pub cluster_name: String,
    /// `key == value` requirements on the object's labels, all required.
    pub labels: BTreeMap<String, String>,
}

/// Why a discovery spec was refused; every variant names the whole spec as given.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DiscoveryError {
    #[error("node group auto-discovery spec {spec:?}: expected the form clusterapi:key=value,...")]
    Malformed { spec: String },
    #[error(
        "node group auto-discovery spec {spec:?}: unsupported discoverer {discoverer:?}, expected {DISCOVERER:?}"
    )]
    UnsupportedDiscoverer { spec: String, discoverer: String },
    #[error("node group auto-discovery spec {spec:?}: item {item:?} is not of the form key=value")]
    BadItem { spec: String, item: String },
    #[error("node group auto-discovery spec {spec:?}: {problem} in {item:?}")]
    BadLabel {
        spec: String,
        item: String,
        problem: &'static str,
    },
}

impl DiscoverySpec {
    /// Parses one `clusterapi:k=v,...` spec (docs/clusterapi.md CAPI-08–CAPI-10).
    pub fn parse(spec: &str) -> Result<DiscoverySpec, DiscoveryError> {
        let parts: Vec<&str> = spec.split(':').collect();
        let [discoverer, items] = parts.as_slice() else {
            return Err(DiscoveryError::Malformed {
                spec: spec.to_string(),
            });
        };
        if *discoverer != DISCOVERER {
            return Err(DiscoveryError::UnsupportedDiscoverer {
                spec: spec.to_string(),
                discoverer: discoverer.to_string(),
            });
        }
        let mut parsed = DiscoverySpec::default();
        for item in items.split(',').filter(|i| !i.is_empty()) {
            let pair: Vec<&str> = item.split('=').collect();
            let [key, value] = pair.as_slice() else {
                return Err(DiscoveryError::BadItem {
                    spec: spec.to_string(),
                    item: item.to_string(),
                });
            };
            match *key {
                "clusterName" => parsed.cluster_name = value.to_string(),
                "namespace" => parsed.namespace = value.to_string(),
                _ => {
                    let bad = |problem| DiscoveryError::BadLabel {
                        spec: spec.to_string(),
                        item: item.to_string(),
                        problem,
                    };
                    if !is_qualified_name(key) {
                        return Err(bad("invalid label key"));
                    }
                    if !is_label_value(value) {
                        return Err(bad("invalid label value"));
                    }
                    parsed.labels.insert(key.to_string(), value.to_string());
                }
            }
        }
        Ok(parsed)
    }

    /// Whether `obj` passes this spec's namespace, cluster-name and label filters
    /// (docs/clusterapi.md CAPI-11).
    pub fn matches(&self, obj: &DynamicObject, keys: &Keys) -> bool {
        (self.namespace.is_empty() || self.namespace == fields::namespace(obj))
            && (self.cluster_name.is_empty() || self.cluster_name == cluster_name(obj, keys))
            && self
                .labels
                .iter()
                .all(|(k, v)| fields::label(obj, k) == Some(v.as_str()))
    }
}

/// Parses every occurrence of the flag; the first invalid one is the error.
pub fn parse_specs(specs: &[String]) -> Result<Vec<DiscoverySpec>, DiscoveryError> {
    specs.iter().map(|s| DiscoverySpec::parse(s)).collect()
}

/// An object is allowed when it matches any spec; with no specs every object is allowed.
pub fn is_allowed(specs: &[DiscoverySpec], obj: &DynamicObject, keys: &Keys) -> bool {
    specs.is_empty() || specs.iter().any(|s| s.matches(obj, keys))
}

/// The cluster an object belongs to (docs/clusterapi.md CAPI-12): `spec.clusterName` when the field
/// exists (even empty), else the `<G>/cluster-name` label, else empty.
pub fn cluster_name<'a>(obj: &'a DynamicObject, keys: &Keys) -> &'a str {
    match fields::at(obj, &["spec", "clusterName"]) {
        Some(serde_json::Value::String(name)) => name,
        // A non-string value is not a name; `null` reads as an absent field.
        Some(serde_json::Value::Null) | None => {
            fields::label(obj, &keys.cluster_name_label()).unwrap_or("")
        }
        Some(_) => "",
    }
}

/// The single namespace the management watches are limited to: that of the first spec naming one
/// (docs/clusterapi.md CAPI-Q2, kept from upstream: other specs' namespaces are then never
/// watched); `None` means all.
pub fn watch_namespace(specs: &[DiscoverySpec]) -> Option<String> {
    specs
        .iter()
        .map(|s| s.namespace.as_str())
        .find(|ns| !ns.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_objects::object;
    use serde_json::json;

    fn spec(s: &str) -> DiscoverySpec {
        DiscoverySpec::parse(s).expect("valid spec")
    }

    fn md(ns: &str, labels: serde_json::Value, cluster_name: Option<&str>) -> DynamicObject {
        let mut spec = json!({"replicas": 1});
        if let Some(c) = cluster_name {
            spec["clusterName"] = json!(c);
        }
        object(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"namespace": ns, "name": "md", "labels": labels},
            "spec": spec,
        }))
    }

    /// docs/clusterapi.md CAPI-08.
    #[test]
    fn c08_malformed_specs_are_rejected_naming_the_spec() {
        for bad in [
            "foo",
            "asg:tag=x",
            "clusterapi:invalid",
            "clusterapi:a=b=c",
            "clusterapi:a:b",
        ] {
            let err = DiscoverySpec::parse(bad).expect_err(bad);
            assert!(err.to_string().contains(bad), "{err}");
        }
        assert!(matches!(
            DiscoverySpec::parse("asg:tag=x"),
            Err(DiscoveryError::UnsupportedDiscoverer { .. })
        ));
        let everything = spec("clusterapi:");
        assert_eq!(everything, DiscoverySpec::default());
        let keys = Keys::default();
        assert!(everything.matches(&md("any", json!({}), None), &keys));
        assert!(parse_specs(&["clusterapi:".into(), "foo".into()]).is_err());
    }

    /// docs/clusterapi.md CAPI-08.
    #[test]
    fn c08_invalid_label_keys_and_values_are_rejected() {
        assert!(matches!(
            DiscoverySpec::parse("clusterapi:-bad=x"),
            Err(DiscoveryError::BadLabel { .. })
        ));
        assert!(DiscoverySpec::parse("clusterapi:good=bad/value").is_err());
    }

    /// docs/clusterapi.md CAPI-09.
    #[test]
    fn c09_full_spec_parses_namespace_cluster_and_labels() {
        let s = spec("clusterapi:namespace=test,color=blue,shape=square,clusterName=foo");
        assert_eq!(s.namespace, "test");
        assert_eq!(s.cluster_name, "foo");
        assert_eq!(
            s.labels,
            BTreeMap::from([
                ("color".to_string(), "blue".to_string()),
                ("shape".to_string(), "square".to_string())
            ])
        );
        // A repeated key keeps the last value; empty items are ignored.
        assert_eq!(spec("clusterapi:namespace=a,,namespace=b").namespace, "b");
    }

    /// docs/clusterapi.md CAPI-10.
    #[test]
    fn c10_empty_label_value_requires_the_label_present_and_empty() {
        let s = spec("clusterapi:mylabel=");
        let keys = Keys::default();
        assert!(s.matches(&md("ns", json!({"mylabel": ""}), None), &keys));
        assert!(!s.matches(&md("ns", json!({"mylabel": "x"}), None), &keys));
        assert!(!s.matches(&md("ns", json!({}), None), &keys));
    }

    /// docs/clusterapi.md CAPI-11.
    #[test]
    fn c11_an_object_matching_any_spec_is_allowed() {
        let keys = Keys::default();
        let specs = parse_specs(&[
            "clusterapi:namespace=blue".to_string(),
            "clusterapi:color=green,shape=square".to_string(),
        ])
        .expect("valid");
        assert!(is_allowed(&specs, &md("blue", json!({}), None), &keys));
        assert!(is_allowed(
            &specs,
            &md("red", json!({"color": "green", "shape": "square"}), None),
            &keys
        ));
        // Label requirements are ANDed.
        assert!(!is_allowed(
            &specs,
            &md("red", json!({"color": "green"}), None),
            &keys
        ));
        let nothing = parse_specs(&["clusterapi:namespace=nowhere".to_string()]).expect("valid");
        assert!(!is_allowed(&nothing, &md("blue", json!({}), None), &keys));
        assert!(is_allowed(&[], &md("blue", json!({}), None), &keys));
    }

    /// docs/clusterapi.md CAPI-11.
    #[test]
    fn c11_cluster_name_filter_uses_the_objects_cluster_name() {
        let keys = Keys::default();
        let s = spec("clusterapi:clusterName=test1");
        assert!(s.matches(&md("ns", json!({}), Some("test1")), &keys));
        assert!(!s.matches(&md("ns", json!({}), Some("test2")), &keys));
        assert!(s.matches(
            &md(
                "ns",
                json!({"cluster.x-k8s.io/cluster-name": "test1"}),
                None
            ),
            &keys
        ));
    }

    /// docs/clusterapi.md CAPI-12.
    #[test]
    fn c12_cluster_name_from_spec_else_group_label() {
        let keys = Keys::default();
        let label = json!({"cluster.x-k8s.io/cluster-name": "from-label"});
        assert_eq!(
            cluster_name(&md("ns", label.clone(), Some("from-spec")), &keys),
            "from-spec"
        );
        // An existing but empty field wins over the label.
        assert_eq!(cluster_name(&md("ns", label.clone(), Some("")), &keys), "");
        assert_eq!(cluster_name(&md("ns", label, None), &keys), "from-label");
        assert_eq!(cluster_name(&md("ns", json!({}), None), &keys), "");
        let custom = Keys::new(Some("test.k8s.io"));
        let custom_label = json!({"test.k8s.io/cluster-name": "custom"});
        assert_eq!(
            cluster_name(&md("ns", custom_label, None), &custom),
            "custom"
        );
    }

    #[test]
    fn watch_namespace_is_the_first_non_empty_one() {
        let specs = parse_specs(&[
            "clusterapi:color=x".to_string(),
            "clusterapi:namespace=first".to_string(),
            "clusterapi:namespace=second".to_string(),
        ])
        .expect("valid");
        assert_eq!(watch_namespace(&specs).as_deref(), Some("first"));
        assert_eq!(watch_namespace(&specs[..1]), None);
    }
}
