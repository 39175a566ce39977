//! Storage objects as the scheduler's volume filters need them: claims, volumes, storage classes
//! and the CSI drivers each node reports.
//!
//! Only the fields the VolumeBinding, VolumeZone, VolumeRestrictions and NodeVolumeLimits filters
//! read are kept; everything else (reclaim policy, mount options, status conditions) stays at the
//! boundary.

use std::sync::Arc;

use crate::labels::{Labels, NodeSelector};

/// Annotation the scheduler writes on a claim once it picked a node for a delayed-binding claim.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// `spec.accessModes` of a claim or a volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessMode {
    ReadWriteOnce,
    ReadOnlyMany,
    ReadWriteMany,
    ReadWriteOncePod,
}

/// `status.phase` of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ClaimPhase {
    #[default]
    Pending,
    Bound,
    Lost,
}

/// A PersistentVolumeClaim.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PersistentVolumeClaim {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.storageClassName`; `None` when absent (an empty string means "no class").
    pub storage_class_name: Option<String>,
    /// `spec.volumeName`: the volume the claim is bound (or pre-bound) to.
    pub volume_name: Option<String>,
    pub access_modes: Vec<AccessMode>,
    pub phase: ClaimPhase,
    /// The `volume.kubernetes.io/selected-node` annotation.
    pub selected_node: Option<String>,
    /// `spec.resources.requests.storage` in bytes (0 when absent).
    pub requested_storage: i64,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Owner references' UIDs: a generic ephemeral volume's claim must be owned by its pod.
    pub owner_uids: Vec<String>,
}

impl PersistentVolumeClaim {
    /// `namespace/name`, for messages.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The claim's class name, with an absent name read as "no class" (the scheduler does the same
    /// once the default-class admission has run).
    pub fn class(&self) -> &str {
        self.storage_class_name.as_deref().unwrap_or("")
    }
}

/// `status.phase` of a volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum VolumePhase {
    #[default]
    Pending,
    Available,
    Bound,
    Released,
    Failed,
}

/// `spec.claimRef` of a volume.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    /// Empty when the reference is a pre-binding by name only.
    pub uid: String,
}

/// A PersistentVolume.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PersistentVolume {
    pub name: String,
    pub labels: Labels,
    pub storage_class_name: Option<String>,
    pub access_modes: Vec<AccessMode>,
    /// `spec.capacity.storage` in bytes.
    pub capacity_storage: i64,
    /// `spec.nodeAffinity.required`.
    pub node_affinity: Option<NodeSelector>,
    pub claim_ref: Option<ClaimRef>,
    /// `spec.csi.driver`, when the volume is a CSI volume.
    pub csi_driver: Option<String>,
    pub phase: VolumePhase,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

impl PersistentVolume {
    pub fn class(&self) -> &str {
        self.storage_class_name.as_deref().unwrap_or("")
    }
}

/// `volumeBindingMode` of a StorageClass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum VolumeBindingMode {
    #[default]
    Immediate,
    WaitForFirstConsumer,
}

/// One `matchLabelExpressions` entry of an allowed topology.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TopologyRequirement {
    pub key: String,
    pub values: Vec<String>,
}

/// One allowed topology: every requirement must hold (the terms themselves are ORed).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TopologySelectorTerm {
    pub requirements: Vec<TopologyRequirement>,
}

impl TopologySelectorTerm {
    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| {
            labels
                .get(&r.key)
                .is_some_and(|value| r.values.iter().any(|v| v == value))
        })
    }
}

/// A StorageClass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StorageClass {
    pub name: String,
    pub provisioner: String,
    pub binding_mode: VolumeBindingMode,
    /// Empty means every node.
    pub allowed_topologies: Vec<TopologySelectorTerm>,
}

impl StorageClass {
    /// The provisioner name Kubernetes uses for classes that never provision dynamically.
    pub const NO_PROVISIONER: &'static str = "kubernetes.io/no-provisioner";

    /// Whether the class's allowed topologies admit a node with these labels.
    pub fn allows_node(&self, labels: &Labels) -> bool {
        self.allowed_topologies.is_empty()
            || self.allowed_topologies.iter().any(|t| t.matches(labels))
    }
}

/// One driver a node's CSINode reports.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CsiNodeDriver {
    pub name: String,
    /// `allocatable.count`: how many of the driver's volumes the node can attach; `None` is no
    /// limit.
    pub allocatable_count: Option<i32>,
    pub topology_keys: Vec<String>,
}

/// A CSINode (named after its node).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CsiNode {
    pub node_name: String,
    pub drivers: Vec<CsiNodeDriver>,
}

impl CsiNode {
    pub fn driver(&self, name: &str) -> Option<&CsiNodeDriver> {
        self.drivers.iter().find(|d| d.name == name)
    }

    /// The same drivers for another node (a template node's copy gets the node's name).
    pub fn renamed(&self, node_name: &str) -> CsiNode {
        CsiNode {
            node_name: node_name.to_string(),
            drivers: self.drivers.clone(),
        }
    }
}

/// Every storage object Gather read this loop.
#[derive(Debug, Clone, Default)]
pub struct VolumeObjects {
    pub claims: Vec<Arc<PersistentVolumeClaim>>,
    pub volumes: Vec<Arc<PersistentVolume>>,
    pub storage_classes: Vec<Arc<StorageClass>>,
    pub csi_nodes: Vec<Arc<CsiNode>>,
}

impl VolumeObjects {
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
            && self.volumes.is_empty()
            && self.storage_classes.is_empty()
            && self.csi_nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_topologies_or_terms_and_requirements() {
        let class = StorageClass {
            name: "zonal".into(),
            provisioner: "csi.example.com".into(),
            binding_mode: VolumeBindingMode::WaitForFirstConsumer,
            allowed_topologies: vec![TopologySelectorTerm {
                requirements: vec![TopologyRequirement {
                    key: "zone".into(),
                    values: vec!["a".into(), "b".into()],
                }],
            }],
        };
        let labels = |zone: &str| Labels::from([("zone".to_string(), zone.to_string())]);
        assert!(class.allows_node(&labels("a")));
        assert!(!class.allows_node(&labels("c")));
        assert!(!class.allows_node(&Labels::new()));
        let open = StorageClass {
            allowed_topologies: Vec::new(),
            ..class
        };
        assert!(open.allows_node(&Labels::new()));
    }
}
