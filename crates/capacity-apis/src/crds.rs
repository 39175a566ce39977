//! The CustomResourceDefinitions of the three kinds, rendered from the Rust types: every served
//! version in one CRD per kind, the storage version marked. The files under `deploy/crds/` and the
//! chart's optional `capacity-crds.yaml` template are this output (the `write-crds` example writes
//! them; a test fails when they drift).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_core::CustomResourceExt;
use kube_core::crd::{MergeError, merge_crds};
use thiserror::Error;

use crate::{capacity_buffer, capacity_quota, provisioning_request};

/// The first line of every generated file.
pub const GENERATED_HEADER: &str = "# Generated from crates/capacity-apis by `cargo run --release -p ferroscale-capacity-apis --example write-crds`; do not edit.\n";

/// Where the chart's copy goes (inside the chart), installed only with `crds.install=true`.
pub const CHART_TEMPLATE: &str = "deploy/helm/ferroscale/templates/capacity-crds.yaml";
/// Folder of the plain manifests, one file per kind.
pub const CRD_DIR: &str = "deploy/crds";

#[derive(Debug, Error)]
pub enum CrdError {
    #[error("merging the versions of {kind}: {source}")]
    Merge {
        kind: &'static str,
        #[source]
        source: MergeError,
    },
    #[error("rendering the {kind} CRD as YAML: {source}")]
    Yaml {
        kind: &'static str,
        #[source]
        source: serde_yaml_ng::Error,
    },
}

/// One kind's CRD and the file it is shipped in.
#[derive(Debug, Clone)]
pub struct CrdManifest {
    pub kind: &'static str,
    /// File name under [`CRD_DIR`].
    pub file_name: &'static str,
    pub crd: CustomResourceDefinition,
}

impl CrdManifest {
    /// The CRD as one YAML document (without the header).
    pub fn yaml(&self) -> Result<String, CrdError> {
        serde_yaml_ng::to_string(&self.crd).map_err(|source| CrdError::Yaml {
            kind: self.kind,
            source,
        })
    }
}

fn merged(
    kind: &'static str,
    versions: Vec<CustomResourceDefinition>,
    storage: &str,
) -> Result<CustomResourceDefinition, CrdError> {
    merge_crds(versions, storage).map_err(|source| CrdError::Merge { kind, source })
}

/// The three CRDs, storage version first in each.
pub fn crd_manifests() -> Result<Vec<CrdManifest>, CrdError> {
    Ok(vec![
        CrdManifest {
            kind: "ProvisioningRequest",
            file_name: "autoscaling.x-k8s.io_provisioningrequests.yaml",
            crd: merged(
                "ProvisioningRequest",
                vec![
                    provisioning_request::v1::ProvisioningRequest::crd(),
                    provisioning_request::v1beta1::ProvisioningRequest::crd(),
                ],
                "v1",
            )?,
        },
        CrdManifest {
            kind: "CapacityBuffer",
            file_name: "autoscaling.x-k8s.io_capacitybuffers.yaml",
            crd: merged(
                "CapacityBuffer",
                vec![
                    capacity_buffer::v1beta1::CapacityBuffer::crd(),
                    capacity_buffer::v1alpha1::CapacityBuffer::crd(),
                ],
                "v1beta1",
            )?,
        },
        CrdManifest {
            kind: "CapacityQuota",
            file_name: "autoscaling.x-k8s.io_capacityquotas.yaml",
            crd: merged(
                "CapacityQuota",
                vec![
                    capacity_quota::v1beta1::CapacityQuota::crd(),
                    capacity_quota::v1alpha1::CapacityQuota::crd(),
                ],
                "v1beta1",
            )?,
        },
    ])
}

/// Every generated file: path relative to the repository root → content.
pub fn render_crds() -> Result<Vec<(String, String)>, CrdError> {
    let manifests = crd_manifests()?;
    let mut files = Vec::new();
    let mut chart = String::from(GENERATED_HEADER);
    chart.push_str("{{- if .Values.crds.install }}\n");
    for manifest in &manifests {
        let yaml = manifest.yaml()?;
        files.push((
            format!("{CRD_DIR}/{}", manifest.file_name),
            format!("{GENERATED_HEADER}{yaml}"),
        ));
        chart.push_str("---\n");
        chart.push_str(&yaml);
    }
    chart.push_str("{{- end }}\n");
    files.push((CHART_TEMPLATE.to_string(), chart));
    Ok(files)
}

/// Writes every generated file under `root` (the repository's top folder).
pub fn write_crds(root: &std::path::Path) -> Result<Vec<String>, WriteError> {
    let mut written = Vec::new();
    for (path, content) in render_crds()? {
        let target = root.join(&path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|source| WriteError::Io {
                path: path.clone(),
                source,
            })?;
        }
        std::fs::write(&target, content).map_err(|source| WriteError::Io {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}

#[derive(Debug, Error)]
pub enum WriteError {
    #[error(transparent)]
    Render(#[from] CrdError),
    #[error("writing {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version_names(manifest: &CrdManifest) -> Vec<(String, bool, bool)> {
        manifest
            .crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.clone(), v.served, v.storage))
            .collect()
    }

    #[test]
    fn every_kind_serves_both_versions_with_the_storage_version_marked() {
        let manifests = crd_manifests().unwrap();
        let versions: Vec<_> = manifests.iter().map(version_names).collect();
        assert_eq!(
            versions,
            vec![
                vec![
                    ("v1".to_string(), true, true),
                    ("v1beta1".to_string(), true, false)
                ],
                vec![
                    ("v1beta1".to_string(), true, true),
                    ("v1alpha1".to_string(), true, false)
                ],
                vec![
                    ("v1beta1".to_string(), true, true),
                    ("v1alpha1".to_string(), true, false)
                ],
            ]
        );
        let scopes: Vec<_> = manifests.iter().map(|m| m.crd.spec.scope.clone()).collect();
        assert_eq!(scopes, ["Namespaced", "Namespaced", "Cluster"]);
    }

    #[test]
    fn upstream_validation_rules_are_in_the_schemas() {
        let files = render_crds().unwrap();
        let text = |name: &str| {
            files
                .iter()
                .find(|(path, _)| path.ends_with(name))
                .map(|(_, text)| text.clone())
                .unwrap()
        };
        let provreq = text("provisioningrequests.yaml");
        for needle in [
            "minItems: 1",
            "maxItems: 32",
            "self == oldSelf",
            "maxLength: 253",
            "maxProperties: 100",
            "maxLength: 255",
            "maxProperties: 64",
            "- provreq",
            "status: {}",
            "x-kubernetes-list-type: map",
        ] {
            assert!(
                provreq.contains(needle),
                "ProvisioningRequest CRD lacks {needle}"
            );
        }
        let buffers = text("capacitybuffers.yaml");
        for needle in [
            "!(has(self.podTemplateRef) && has(self.scalableRef))",
            "default: buffer.x-k8s.io/active-capacity",
            "x-kubernetes-int-or-string: true",
            "- cb",
            "jsonPath: .status.replicas",
        ] {
            assert!(
                buffers.contains(needle),
                "CapacityBuffer CRD lacks {needle}"
            );
        }
        let quotas = text("capacityquotas.yaml");
        for needle in [
            "maxProperties: 20",
            "quantity(self[key]).isInteger()",
            "x-kubernetes-map-type: atomic",
            "- cq",
        ] {
            assert!(quotas.contains(needle), "CapacityQuota CRD lacks {needle}");
        }
    }
}
