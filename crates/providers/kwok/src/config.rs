//! The kwok provider's configuration document (docs/behaviour.md KWOK-101, KWOK-103), parsed once
//! into [`KwokConfig`].
//!
//! The document comes from the `config` key of a ConfigMap or from a file; its origin is carried
//! into every error so that a user knows which object to fix.

use std::collections::BTreeMap;

use serde::Deserialize;
use thiserror::Error;

/// The `apiVersion` the document must carry when it carries one.
pub const API_VERSION: &str = "v1alpha1";
/// Where templates are read from when `configmap.name` is not set.
pub const DEFAULT_TEMPLATES_CONFIGMAP: &str = "kwok-provider-templates";

/// A configuration document that cannot be used. Every variant names where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// The YAML does not have the expected shape (the message carries the field path).
    #[error("{origin}: field {field}: {reason}")]
    Shape {
        origin: String,
        field: String,
        reason: String,
    },
    #[error("{origin}: field {field}: invalid value {value:?}: {reason}")]
    Invalid {
        origin: String,
        field: String,
        value: String,
        reason: String,
    },
}

/// Where the group templates come from (`readNodesFrom`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadNodesFrom {
    /// The templates ConfigMap (`configmap.name`, key `templates`).
    ConfigMap,
    /// The Nodes already in the cluster.
    Cluster,
}

/// The key whose value on a template node names its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupingKey {
    Label(String),
    Annotation(String),
}

impl GroupingKey {
    /// The value of this key on an object's labels and annotations.
    pub fn value_in<'a>(
        &self,
        labels: Option<&'a BTreeMap<String, String>>,
        annotations: Option<&'a BTreeMap<String, String>>,
    ) -> Option<&'a str> {
        let (map, key) = match self {
            GroupingKey::Label(key) => (labels, key),
            GroupingKey::Annotation(key) => (annotations, key),
        };
        map?.get(key).map(String::as_str)
    }

    /// For messages: `label "x"` or `annotation "y"`.
    pub fn describe(&self) -> String {
        match self {
            GroupingKey::Label(key) => format!("label {key:?}"),
            GroupingKey::Annotation(key) => format!("annotation {key:?}"),
        }
    }
}

/// GPU settings (`nodes.gpuConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuSettings {
    pub label_key: String,
    pub available_types: Vec<String>,
}

/// The typed configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KwokConfig {
    pub read_nodes_from: ReadNodesFrom,
    pub grouping: GroupingKey,
    /// Do not add the `kwok-provider=true:NoSchedule` taint to new nodes.
    pub skip_taint: bool,
    pub gpu: GpuSettings,
    /// Name of the templates ConfigMap (same namespace as the configuration).
    pub templates_configmap: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    api_version: Option<String>,
    read_nodes_from: Option<String>,
    nodegroups: Option<RawNodeGroups>,
    nodes: Option<RawNodes>,
    configmap: Option<RawConfigMap>,
    /// Upstream's settings for installing kwok itself; Ferroscale expects kwok to be installed
    /// already, so the block is accepted and ignored.
    #[allow(dead_code)]
    kwok: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawNodeGroups {
    from_node_label_key: Option<String>,
    from_node_annotation_key: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawNodes {
    #[serde(default)]
    skip_taint: bool,
    gpu_config: Option<RawGpuConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawGpuConfig {
    gpu_label_key: Option<String>,
    #[serde(rename = "availableGPUTypes")]
    available_gpu_types: Option<RawGpuTypes>,
}

/// Upstream writes the GPU types as a map with empty values; a list is accepted too.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawGpuTypes {
    List(Vec<String>),
    Map(BTreeMap<String, serde_yaml_ng::Value>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfigMap {
    name: Option<String>,
}

impl KwokConfig {
    /// Parses the configuration document; `origin` names it in errors (a file path, or
    /// `ConfigMap <namespace>/<name> key config`).
    pub fn parse(text: &str, origin: &str) -> Result<KwokConfig, ConfigError> {
        let deserializer = serde_yaml_ng::Deserializer::from_str(text);
        let raw: RawConfig =
            serde_path_to_error::deserialize(deserializer).map_err(|e| ConfigError::Shape {
                origin: origin.to_string(),
                field: e.path().to_string(),
                reason: e.inner().to_string(),
            })?;
        let invalid = |field: &str, value: &str, reason: &str| ConfigError::Invalid {
            origin: origin.to_string(),
            field: field.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        };
        if let Some(version) = &raw.api_version
            && version != API_VERSION
        {
            return Err(invalid("apiVersion", version, "expected v1alpha1"));
        }
        let read_nodes_from = match raw.read_nodes_from.as_deref() {
            None | Some("configmap") => ReadNodesFrom::ConfigMap,
            Some("cluster") => ReadNodesFrom::Cluster,
            Some(other) => {
                return Err(invalid(
                    "readNodesFrom",
                    other,
                    "expected configmap or cluster",
                ));
            }
        };
        let groups = raw.nodegroups.unwrap_or(RawNodeGroups {
            from_node_label_key: None,
            from_node_annotation_key: None,
        });
        let non_empty = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        let grouping = match (
            non_empty(groups.from_node_label_key),
            non_empty(groups.from_node_annotation_key),
        ) {
            (Some(label), None) => GroupingKey::Label(label),
            (None, Some(annotation)) => GroupingKey::Annotation(annotation),
            (Some(label), Some(annotation)) => {
                return Err(invalid(
                    "nodegroups",
                    &format!("fromNodeLabelKey={label}, fromNodeAnnotationKey={annotation}"),
                    "set exactly one of fromNodeLabelKey and fromNodeAnnotationKey",
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "nodegroups",
                    "",
                    "set exactly one of fromNodeLabelKey and fromNodeAnnotationKey",
                ));
            }
        };
        let (skip_taint, gpu) = match raw.nodes {
            None => (false, GpuSettings::default()),
            Some(nodes) => {
                let gpu = match nodes.gpu_config {
                    None => GpuSettings::default(),
                    Some(gpu) => GpuSettings {
                        label_key: gpu.gpu_label_key.unwrap_or_default(),
                        available_types: match gpu.available_gpu_types {
                            None => Vec::new(),
                            Some(RawGpuTypes::List(types)) => types,
                            Some(RawGpuTypes::Map(types)) => types.into_keys().collect(),
                        },
                    },
                };
                (nodes.skip_taint, gpu)
            }
        };
        let templates_configmap = match raw.configmap.and_then(|c| c.name) {
            None => DEFAULT_TEMPLATES_CONFIGMAP.to_string(),
            Some(name) if name.trim().is_empty() => {
                return Err(invalid("configmap.name", &name, "must not be empty"));
            }
            Some(name) => name,
        };
        Ok(KwokConfig {
            read_nodes_from,
            grouping,
            skip_taint,
            gpu,
            templates_configmap,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_document_is_read() {
        let text = r#"
apiVersion: v1alpha1
readNodesFrom: cluster
nodegroups:
  fromNodeLabelKey: "node.kubernetes.io/instance-type"
nodes:
  skipTaint: true
  gpuConfig:
    gpuLabelKey: "k8s.amazonaws.com/accelerator"
    availableGPUTypes:
      "nvidia-tesla-k80": {}
      "nvidia-tesla-p100": {}
configmap:
  name: my-templates
kwok:
  install: false
"#;
        let config = KwokConfig::parse(text, "test").unwrap();
        assert_eq!(config.read_nodes_from, ReadNodesFrom::Cluster);
        assert_eq!(
            config.grouping,
            GroupingKey::Label("node.kubernetes.io/instance-type".into())
        );
        assert!(config.skip_taint);
        assert_eq!(config.gpu.label_key, "k8s.amazonaws.com/accelerator");
        assert_eq!(
            config.gpu.available_types,
            vec!["nvidia-tesla-k80", "nvidia-tesla-p100"]
        );
        assert_eq!(config.templates_configmap, "my-templates");
    }

    #[test]
    fn defaults_read_templates_from_the_default_configmap() {
        let config =
            KwokConfig::parse("nodegroups:\n  fromNodeAnnotationKey: group\n", "test").unwrap();
        assert_eq!(config.read_nodes_from, ReadNodesFrom::ConfigMap);
        assert_eq!(config.grouping, GroupingKey::Annotation("group".into()));
        assert!(!config.skip_taint);
        assert_eq!(config.templates_configmap, DEFAULT_TEMPLATES_CONFIGMAP);
        let gpus = KwokConfig::parse(
            "nodegroups: {fromNodeLabelKey: g}\nnodes: {gpuConfig: {availableGPUTypes: [a, b]}}\n",
            "test",
        )
        .unwrap();
        assert_eq!(gpus.gpu.available_types, vec!["a", "b"]);
    }

    #[test]
    fn grouping_key_must_be_exactly_one() {
        let both = KwokConfig::parse(
            "nodegroups:\n  fromNodeLabelKey: a\n  fromNodeAnnotationKey: b\n",
            "ConfigMap kube-system/kwok-provider-config key config",
        )
        .unwrap_err();
        let text = both.to_string();
        assert!(
            text.starts_with("ConfigMap kube-system/kwok-provider-config key config")
                && text.contains("nodegroups")
                && text.contains("fromNodeLabelKey=a"),
            "{text}"
        );
        let none = KwokConfig::parse("readNodesFrom: configmap\n", "f.yaml").unwrap_err();
        assert!(none.to_string().contains("exactly one"), "{none}");
    }

    #[test]
    fn bad_values_name_field_and_value() {
        for (text, field, value) in [
            (
                "readNodesFrom: etcd\nnodegroups: {fromNodeLabelKey: a}\n",
                "readNodesFrom",
                "etcd",
            ),
            (
                "apiVersion: v2\nnodegroups: {fromNodeLabelKey: a}\n",
                "apiVersion",
                "v2",
            ),
            (
                "nodegroups: {fromNodeLabelKey: a}\nconfigmap: {name: ''}\n",
                "configmap.name",
                "\"\"",
            ),
        ] {
            let err = KwokConfig::parse(text, "cfg.yaml").unwrap_err().to_string();
            assert!(
                err.contains("cfg.yaml") && err.contains(field) && err.contains(value),
                "{err}"
            );
        }
    }

    #[test]
    fn shape_errors_carry_the_field_path() {
        let typo = KwokConfig::parse(
            "nodegroups: {fromNodeLabelKey: a}\nnodes: {skipTaints: true}\n",
            "c",
        )
        .unwrap_err()
        .to_string();
        assert!(
            typo.contains("nodes") && typo.contains("skipTaints"),
            "{typo}"
        );
        let wrong_type = KwokConfig::parse(
            "nodegroups: {fromNodeLabelKey: a}\nnodes: {skipTaint: maybe}\n",
            "c",
        )
        .unwrap_err()
        .to_string();
        assert!(wrong_type.contains("nodes.skipTaint"), "{wrong_type}");
        assert!(KwokConfig::parse("- not\n- a map\n", "c").is_err());
        assert!(KwokConfig::parse("", "c").is_err());
    }
}
