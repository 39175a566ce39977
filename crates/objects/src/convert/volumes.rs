//! Storage objects (PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes) and the
//! volumes a pod names, converted for the volume filters. Every enumerated value (access modes,
//! phases, binding modes) and every quantity is checked here; the error names the object, the
//! field and the value, as everywhere in [`crate::convert`].

use ferroscale_model::volumes::SELECTED_NODE;
use ferroscale_model::{
    AccessMode, ClaimPhase, ClaimRef, CsiNode, CsiNodeDriver, PersistentVolume,
    PersistentVolumeClaim, Quantity, StorageClass, TopologyRequirement, TopologySelectorTerm,
    Volume, VolumeBindingMode, VolumePhase, VolumeSource,
};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use std::collections::BTreeMap;

use super::{ConvertError, ObjectContext, labels, namespace_or_default, node_selector};

/// The CSI driver that serves an in-tree volume type the scheduler's volume limits treat as
/// migrated (AWS EBS, GCE PD, Azure Disk, Cinder, Portworx): such volumes count against that
/// driver's node limit. `None` for every other source (NFS, iSCSI, local, host path, ...), which
/// no CSINode limits.
fn migrated_driver(
    aws_ebs: bool,
    gce_pd: bool,
    azure_disk: bool,
    cinder: bool,
    portworx: bool,
) -> Option<&'static str> {
    [
        (aws_ebs, "ebs.csi.aws.com"),
        (gce_pd, "pd.csi.storage.gke.io"),
        (azure_disk, "disk.csi.azure.com"),
        (cinder, "cinder.csi.openstack.org"),
        (portworx, "pxd.portworx.com"),
    ]
    .into_iter()
    .find_map(|(present, driver)| present.then_some(driver))
}

fn access_modes(
    ctx: &ObjectContext,
    field: &str,
    modes: Option<&Vec<String>>,
) -> Result<Vec<AccessMode>, ConvertError> {
    let mut out = Vec::new();
    for (i, mode) in modes.into_iter().flatten().enumerate() {
        out.push(match mode.as_str() {
            "ReadWriteOnce" => AccessMode::ReadWriteOnce,
            "ReadOnlyMany" => AccessMode::ReadOnlyMany,
            "ReadWriteMany" => AccessMode::ReadWriteMany,
            "ReadWriteOncePod" => AccessMode::ReadWriteOncePod,
            other => {
                return Err(ctx.error(
                    format!("{field}[{i}]"),
                    other,
                    "access mode must be ReadWriteOnce, ReadOnlyMany, ReadWriteMany or ReadWriteOncePod",
                ));
            }
        });
    }
    Ok(out)
}

/// `storage` of a resource list in bytes (rounded up, as Kubernetes' `Value()`); 0 when absent.
fn storage_bytes(
    ctx: &ObjectContext,
    field: &str,
    list: Option<&BTreeMap<String, K8sQuantity>>,
) -> Result<i64, ConvertError> {
    let Some(quantity) = list.and_then(|l| l.get("storage")) else {
        return Ok(0);
    };
    let field = format!("{field}.storage");
    let parsed = Quantity::parse(&quantity.0)
        .map_err(|e| ctx.error(&field, quantity.0.clone(), e.reason))?;
    if parsed.nanos() < 0 {
        return Err(ctx.error(&field, quantity.0.clone(), "must not be negative"));
    }
    Ok(parsed.value())
}

/// Converts a PersistentVolumeClaim. A claim without a namespace lives in `default`.
pub fn pvc_from_k8s(
    claim: &core::PersistentVolumeClaim,
) -> Result<PersistentVolumeClaim, ConvertError> {
    let ctx = ObjectContext::namespaced("PersistentVolumeClaim", &claim.metadata);
    let metadata = &claim.metadata;
    let spec = claim.spec.as_ref();
    let phase = match claim.status.as_ref().and_then(|s| s.phase.as_deref()) {
        None | Some("Pending") => ClaimPhase::Pending,
        Some("Bound") => ClaimPhase::Bound,
        Some("Lost") => ClaimPhase::Lost,
        Some(other) => {
            return Err(ctx.error(
                "status.phase",
                other,
                "claim phase must be Pending, Bound or Lost",
            ));
        }
    };
    Ok(PersistentVolumeClaim {
        namespace: namespace_or_default(metadata),
        name: metadata.name.clone().unwrap_or_default(),
        uid: metadata.uid.clone().unwrap_or_default(),
        storage_class_name: spec.and_then(|s| s.storage_class_name.clone()),
        volume_name: spec
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty()),
        access_modes: access_modes(
            &ctx,
            "spec.accessModes",
            spec.and_then(|s| s.access_modes.as_ref()),
        )?,
        phase,
        selected_node: metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SELECTED_NODE))
            .filter(|n| !n.is_empty())
            .cloned(),
        requested_storage: storage_bytes(
            &ctx,
            "spec.resources.requests",
            spec.and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref()),
        )?,
        deleting: metadata.deletion_timestamp.is_some(),
        owner_uids: metadata
            .owner_references
            .iter()
            .flatten()
            .map(|o| o.uid.clone())
            .collect(),
    })
}

/// Converts a PersistentVolume. In-tree volume types served by a CSI driver since their
/// migration count as that driver's volumes.
pub fn pv_from_k8s(volume: &core::PersistentVolume) -> Result<PersistentVolume, ConvertError> {
    let ctx = ObjectContext::new("PersistentVolume", &volume.metadata);
    let metadata = &volume.metadata;
    let spec = volume.spec.as_ref();
    let phase = match volume.status.as_ref().and_then(|s| s.phase.as_deref()) {
        None | Some("Pending") => VolumePhase::Pending,
        Some("Available") => VolumePhase::Available,
        Some("Bound") => VolumePhase::Bound,
        Some("Released") => VolumePhase::Released,
        Some("Failed") => VolumePhase::Failed,
        Some(other) => {
            return Err(ctx.error(
                "status.phase",
                other,
                "volume phase must be Pending, Available, Bound, Released or Failed",
            ));
        }
    };
    let node_affinity = spec
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|required| node_selector(&ctx, "spec.nodeAffinity.required", required))
        .transpose()?;
    let csi_driver = match spec.and_then(|s| s.csi.as_ref()) {
        Some(csi) if csi.driver.is_empty() => {
            return Err(ctx.error("spec.csi.driver", "", "a CSI volume needs a driver name"));
        }
        Some(csi) => Some(csi.driver.clone()),
        None => spec
            .and_then(|s| {
                migrated_driver(
                    s.aws_elastic_block_store.is_some(),
                    s.gce_persistent_disk.is_some(),
                    s.azure_disk.is_some(),
                    s.cinder.is_some(),
                    s.portworx_volume.is_some(),
                )
            })
            .map(str::to_string),
    };
    Ok(PersistentVolume {
        name: metadata.name.clone().unwrap_or_default(),
        labels: labels(metadata.labels.as_ref()),
        storage_class_name: spec.and_then(|s| s.storage_class_name.clone()),
        access_modes: access_modes(
            &ctx,
            "spec.accessModes",
            spec.and_then(|s| s.access_modes.as_ref()),
        )?,
        capacity_storage: storage_bytes(
            &ctx,
            "spec.capacity",
            spec.and_then(|s| s.capacity.as_ref()),
        )?,
        node_affinity,
        claim_ref: spec.and_then(|s| s.claim_ref.as_ref()).map(|r| ClaimRef {
            namespace: r.namespace.clone().unwrap_or_default(),
            name: r.name.clone().unwrap_or_default(),
            uid: r.uid.clone().unwrap_or_default(),
        }),
        csi_driver,
        phase,
        deleting: metadata.deletion_timestamp.is_some(),
    })
}

/// Converts a StorageClass. An absent `volumeBindingMode` is `Immediate`, as the API server
/// defaults it.
pub fn storage_class_from_k8s(class: &storage::StorageClass) -> Result<StorageClass, ConvertError> {
    let ctx = ObjectContext::new("StorageClass", &class.metadata);
    let binding_mode = match class.volume_binding_mode.as_deref() {
        None | Some("Immediate") => VolumeBindingMode::Immediate,
        Some("WaitForFirstConsumer") => VolumeBindingMode::WaitForFirstConsumer,
        Some(other) => {
            return Err(ctx.error(
                "volumeBindingMode",
                other,
                "binding mode must be Immediate or WaitForFirstConsumer",
            ));
        }
    };
    let mut allowed_topologies = Vec::new();
    for (i, term) in class.allowed_topologies.iter().flatten().enumerate() {
        let mut requirements = Vec::new();
        for (j, requirement) in term.match_label_expressions.iter().flatten().enumerate() {
            if requirement.values.is_empty() {
                return Err(ctx.error(
                    format!("allowedTopologies[{i}].matchLabelExpressions[{j}].values"),
                    "[]",
                    "an allowed topology needs at least one value",
                ));
            }
            requirements.push(TopologyRequirement {
                key: requirement.key.clone(),
                values: requirement.values.clone(),
            });
        }
        allowed_topologies.push(TopologySelectorTerm { requirements });
    }
    Ok(StorageClass {
        name: class.metadata.name.clone().unwrap_or_default(),
        provisioner: class.provisioner.clone(),
        binding_mode,
        allowed_topologies,
    })
}

/// Converts a CSINode (its name is its node's).
pub fn csi_node_from_k8s(csi_node: &storage::CSINode) -> Result<CsiNode, ConvertError> {
    let ctx = ObjectContext::new("CSINode", &csi_node.metadata);
    let mut drivers = Vec::new();
    for (i, driver) in csi_node.spec.drivers.iter().enumerate() {
        let count = driver.allocatable.as_ref().and_then(|a| a.count);
        if let Some(count) = count.filter(|c| *c < 0) {
            return Err(ctx.error(
                format!("spec.drivers[{i}].allocatable.count"),
                count.to_string(),
                "must not be negative",
            ));
        }
        drivers.push(CsiNodeDriver {
            name: driver.name.clone(),
            allocatable_count: count,
            topology_keys: driver.topology_keys.clone().unwrap_or_default(),
        });
    }
    Ok(CsiNode {
        node_name: csi_node.metadata.name.clone().unwrap_or_default(),
        drivers,
    })
}

/// One entry of `spec.volumes`, `field` being its path.
pub(super) fn pod_volume(
    ctx: &ObjectContext,
    field: &str,
    volume: &core::Volume,
) -> Result<Volume, ConvertError> {
    let source = if volume.host_path.is_some() {
        VolumeSource::HostPath
    } else if let Some(empty_dir) = &volume.empty_dir {
        VolumeSource::EmptyDir {
            memory_medium: empty_dir.medium.as_deref() == Some("Memory"),
        }
    } else if let Some(claim) = &volume.persistent_volume_claim {
        if claim.claim_name.is_empty() {
            return Err(ctx.error(
                format!("{field}.persistentVolumeClaim.claimName"),
                "",
                "a persistentVolumeClaim volume needs a claimName",
            ));
        }
        VolumeSource::PersistentVolumeClaim {
            claim_name: claim.claim_name.clone(),
        }
    } else if volume.ephemeral.is_some() {
        // Its claim is created by the control plane, named after the pod and the volume.
        VolumeSource::Ephemeral
    } else if let Some(csi) = &volume.csi {
        if csi.driver.is_empty() {
            return Err(ctx.error(
                format!("{field}.csi.driver"),
                "",
                "a CSI volume needs a driver name",
            ));
        }
        VolumeSource::Csi {
            driver: csi.driver.clone(),
        }
    } else if let Some(driver) = migrated_driver(
        volume.aws_elastic_block_store.is_some(),
        volume.gce_persistent_disk.is_some(),
        volume.azure_disk.is_some(),
        volume.cinder.is_some(),
        volume.portworx_volume.is_some(),
    ) {
        VolumeSource::Csi {
            driver: driver.to_string(),
        }
    } else {
        VolumeSource::Other
    };
    Ok(Volume {
        name: volume.name.clone(),
        source,
    })
}
