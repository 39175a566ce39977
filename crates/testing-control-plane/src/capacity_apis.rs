//! The project's own CRDs of the capacity APIs (ProvisioningRequest, CapacityBuffer,
//! CapacityQuota), installed from the generated manifests the project ships (`deploy/crds/`), so
//! tests run against exactly what users install.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::cluster_api::{ClusterApiError, crd_documents, string_at, wait_until_served};

/// The shipped manifests, compiled in (path relative to the repository root, text).
pub const CAPACITY_CRD_FILES: [(&str, &str); 3] = [
    (
        "deploy/crds/autoscaling.x-k8s.io_provisioningrequests.yaml",
        include_str!("../../../deploy/crds/autoscaling.x-k8s.io_provisioningrequests.yaml"),
    ),
    (
        "deploy/crds/autoscaling.x-k8s.io_capacitybuffers.yaml",
        include_str!("../../../deploy/crds/autoscaling.x-k8s.io_capacitybuffers.yaml"),
    ),
    (
        "deploy/crds/autoscaling.x-k8s.io_capacityquotas.yaml",
        include_str!("../../../deploy/crds/autoscaling.x-k8s.io_capacityquotas.yaml"),
    ),
];

/// Installs (server-side apply; installing twice is fine) the three capacity CRDs from
/// `deploy/crds/` and waits until each is Established and served in every version. Returns the
/// CRDs' names.
pub async fn install_capacity_crds(client: &Client) -> Result<Vec<String>, ClusterApiError> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let apply = PatchParams::apply("ferroscale-testing").force();
    let mut names = Vec::new();
    for (path, text) in CAPACITY_CRD_FILES {
        for crd in crd_documents(text, path)? {
            let name = string_at(&crd, &["metadata", "name"])
                .unwrap_or_default()
                .to_owned();
            api.patch(&name, &apply, &Patch::Apply(&crd))
                .await
                .map_err(|source| ClusterApiError::Api {
                    action: format!("applying CRD {name} from {path}"),
                    source,
                })?;
            names.push(name);
        }
    }
    for name in &names {
        wait_until_served(client, name).await?;
    }
    Ok(names)
}
