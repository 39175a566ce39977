//! The simulated cluster's storage: its claims, volumes, storage classes and CSINodes, and the
//! parts of the control plane that change them while a scenario runs.
//!
//! - The volume binder: when the scheduler stand-in binds a pod, its unbound claims are bound to
//!   a matching static volume that can be used on the chosen node (the smallest that fits, one
//!   pre-bound to the claim first), or, when the claim's class has a provisioner, to a new volume
//!   provisioned for it in the node's zone. So a pod that moves later (a drain) must follow its
//!   volumes, as in a real cluster.
//! - The kubelet's CSINode: a node of a group with CSI drivers (`nodeGroups[].csiDrivers`) reports
//!   them, with their volume limits, from the moment it registers.
//! - The ephemeral volume controller: a claim `<pod>-<volume>` given among the objects without an
//!   owner is taken as created for the pod that has that generic ephemeral volume.
//!
//! Every change rebuilds the scheduler's [`VolumeCatalogue`]; pods without volumes never get here.

use std::collections::HashMap;
use std::sync::Arc;

use ferroscale_model::labels::ZONE;
use ferroscale_model::{
    ClaimPhase, ClaimRef, CsiNode, CsiNodeDriver, Node, NodeOperator, NodeRequirement,
    NodeSelector, NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass,
    VolumeObjects, VolumePhase, VolumeSource,
};
use ferroscale_objects::K8sObject;
use ferroscale_scheduling::VolumeCatalogue;

/// The storage objects of the simulated cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterStorage {
    objects: VolumeObjects,
    /// CSI drivers the nodes of each group report, by group id.
    group_drivers: HashMap<String, Vec<CsiNodeDriver>>,
}

/// A claim's volume is settled: it names its volume and is `Bound`.
fn is_bound(claim: &PersistentVolumeClaim) -> bool {
    claim.volume_name.is_some() && claim.phase == ClaimPhase::Bound
}

/// The claims a pod's volumes name (generic ephemeral volumes included), in volume order.
fn claim_names(pod: &Pod) -> impl Iterator<Item = (String, bool)> + '_ {
    pod.volumes
        .iter()
        .filter_map(|volume| match &volume.source {
            VolumeSource::PersistentVolumeClaim { claim_name } => Some((claim_name.clone(), false)),
            VolumeSource::Ephemeral => Some((pod.ephemeral_claim_name(&volume.name), true)),
            _ => None,
        })
}

impl ClusterStorage {
    /// Every storage object as Gather would read it now.
    pub fn objects(&self) -> &VolumeObjects {
        &self.objects
    }

    /// The scheduler's index of the current objects.
    pub fn catalogue(&self) -> Arc<VolumeCatalogue> {
        Arc::new(VolumeCatalogue::new(&self.objects))
    }

    /// Keeps `object` when it is a storage object; returns whether it was one.
    pub fn add(&mut self, object: &K8sObject) -> bool {
        match object {
            K8sObject::PersistentVolumeClaim(claim) => {
                self.objects.claims.push(Arc::new(claim.clone()))
            }
            K8sObject::PersistentVolume(volume) => {
                self.objects.volumes.push(Arc::new(volume.clone()))
            }
            K8sObject::StorageClass(class) => {
                self.objects.storage_classes.push(Arc::new(class.clone()))
            }
            K8sObject::CsiNode(csi_node) => self.objects.csi_nodes.push(Arc::new(csi_node.clone())),
            _ => return false,
        }
        true
    }

    /// The CSI drivers every node of `group` reports.
    pub fn set_group_drivers(&mut self, group: &str, drivers: Vec<CsiNodeDriver>) {
        if drivers.is_empty() {
            self.group_drivers.remove(group);
        } else {
            self.group_drivers.insert(group.to_string(), drivers);
        }
    }

    /// A node registered: it reports its group's CSI drivers, unless a CSINode of that name was
    /// given. Returns whether anything changed.
    pub fn node_registered(&mut self, node: &str, group: Option<&str>) -> bool {
        let Some(drivers) = group.and_then(|g| self.group_drivers.get(g)) else {
            return false;
        };
        if self.objects.csi_nodes.iter().any(|c| c.node_name == node) {
            return false;
        }
        self.objects.csi_nodes.push(Arc::new(CsiNode {
            node_name: node.to_string(),
            drivers: drivers.clone(),
        }));
        true
    }

    /// A node went away, and its CSINode with it. Returns whether anything changed.
    pub fn node_removed(&mut self, node: &str) -> bool {
        let before = self.objects.csi_nodes.len();
        self.objects.csi_nodes.retain(|c| c.node_name != node);
        self.objects.csi_nodes.len() != before
    }

    fn claim_index(&self, namespace: &str, name: &str) -> Option<usize> {
        self.objects
            .claims
            .iter()
            .position(|c| c.namespace == namespace && c.name == name)
    }

    /// Plays the ephemeral volume controller for a new pod: its ephemeral volumes' claims that
    /// have no owner become the pod's. Returns whether anything changed.
    pub fn adopt_ephemeral_claims(&mut self, pod: &Pod) -> bool {
        let mut changed = false;
        for (name, ephemeral) in claim_names(pod).collect::<Vec<_>>() {
            if !ephemeral {
                continue;
            }
            let Some(index) = self.claim_index(&pod.namespace, &name) else {
                continue;
            };
            let claim = &mut self.objects.claims[index];
            if claim.owner_uids.is_empty() {
                Arc::make_mut(claim).owner_uids.push(pod.uid.to_string());
                changed = true;
            }
        }
        changed
    }

    /// Plays the volume binder for a pod just bound to `node`. Returns whether anything changed.
    pub fn bind_claims(&mut self, pod: &Pod, node: &Node) -> bool {
        let mut changed = false;
        for (name, _) in claim_names(pod).collect::<Vec<_>>() {
            let Some(index) = self.claim_index(&pod.namespace, &name) else {
                continue;
            };
            let claim = self.objects.claims[index].clone();
            if is_bound(&claim) {
                continue;
            }
            let volume = match self.matching_volume(&claim, node) {
                Some(volume) => Some(volume),
                None => self.provision(&claim, node),
            };
            if let Some(volume) = volume {
                self.bind(index, volume);
                changed = true;
            }
        }
        changed
    }

    /// The static volume the claim binds to on `node`: the one named by the claim, else one
    /// pre-bound to it, else the smallest available volume of its class that is large enough,
    /// offers its access modes and can be used on the node.
    fn matching_volume(&self, claim: &PersistentVolumeClaim, node: &Node) -> Option<usize> {
        let volumes = &self.objects.volumes;
        if let Some(name) = &claim.volume_name {
            return volumes.iter().position(|v| &v.name == name);
        }
        let names_claim = |v: &PersistentVolume| {
            v.claim_ref
                .as_ref()
                .is_some_and(|r| r.namespace == claim.namespace && r.name == claim.name)
        };
        let usable = |v: &PersistentVolume| {
            v.class() == claim.class()
                && !v.deleting
                && matches!(v.phase, VolumePhase::Available | VolumePhase::Pending)
                && (v.claim_ref.is_none() || names_claim(v))
                && v.capacity_storage >= claim.requested_storage
                && claim
                    .access_modes
                    .iter()
                    .all(|m| v.access_modes.contains(m))
                && v.node_affinity
                    .as_ref()
                    .is_none_or(|a| a.matches(&node.name, &node.labels))
        };
        volumes
            .iter()
            .enumerate()
            .filter(|(_, v)| usable(v))
            .min_by_key(|(i, v)| (!names_claim(v), v.capacity_storage, *i))
            .map(|(i, _)| i)
    }

    /// A new volume for the claim from its class's provisioner, usable in the node's zone (or
    /// anywhere when the node has no zone). `None` when the class does not provision.
    fn provision(&mut self, claim: &PersistentVolumeClaim, node: &Node) -> Option<usize> {
        let class: &StorageClass = self
            .objects
            .storage_classes
            .iter()
            .find(|c| c.name == claim.class())?;
        if class.provisioner.is_empty() || class.provisioner == StorageClass::NO_PROVISIONER {
            return None;
        }
        let zone = node.label(ZONE).map(str::to_string);
        let mut volume = PersistentVolume {
            name: format!("pvc-{}-{}", claim.namespace, claim.name),
            storage_class_name: claim.storage_class_name.clone(),
            access_modes: claim.access_modes.clone(),
            capacity_storage: claim.requested_storage,
            csi_driver: Some(class.provisioner.clone()),
            phase: VolumePhase::Pending,
            ..PersistentVolume::default()
        };
        if let Some(zone) = zone {
            volume.labels.insert(ZONE.to_string(), zone.clone());
            volume.node_affinity = Some(NodeSelector {
                terms: vec![NodeSelectorTerm {
                    match_expressions: vec![NodeRequirement {
                        key: ZONE.to_string(),
                        operator: NodeOperator::In,
                        values: vec![zone],
                    }],
                    match_fields: Vec::new(),
                }],
            });
        }
        self.objects.volumes.push(Arc::new(volume));
        Some(self.objects.volumes.len() - 1)
    }

    fn bind(&mut self, claim_index: usize, volume_index: usize) {
        let claim = Arc::make_mut(&mut self.objects.claims[claim_index]);
        let volume = Arc::make_mut(&mut self.objects.volumes[volume_index]);
        claim.volume_name = Some(volume.name.clone());
        claim.phase = ClaimPhase::Bound;
        volume.claim_ref = Some(ClaimRef {
            namespace: claim.namespace.clone(),
            name: claim.name.clone(),
            uid: claim.uid.clone(),
        });
        volume.phase = VolumePhase::Bound;
    }
}

#[cfg(test)]
mod tests {
    use ferroscale_model::{AccessMode, Resources, Volume, VolumeBindingMode};

    use super::*;

    fn claim(name: &str, class: &str) -> K8sObject {
        K8sObject::PersistentVolumeClaim(PersistentVolumeClaim {
            namespace: "db".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            storage_class_name: Some(class.into()),
            access_modes: vec![AccessMode::ReadWriteOnce],
            requested_storage: 10 << 30,
            ..PersistentVolumeClaim::default()
        })
    }

    fn class(name: &str, provisioner: &str) -> K8sObject {
        K8sObject::StorageClass(StorageClass {
            name: name.into(),
            provisioner: provisioner.into(),
            binding_mode: VolumeBindingMode::WaitForFirstConsumer,
            allowed_topologies: Vec::new(),
        })
    }

    fn zonal_volume(name: &str, zone: &str, size_gi: i64) -> K8sObject {
        K8sObject::PersistentVolume(PersistentVolume {
            name: name.into(),
            storage_class_name: Some("local".into()),
            access_modes: vec![AccessMode::ReadWriteOnce],
            capacity_storage: size_gi << 30,
            node_affinity: Some(NodeSelector {
                terms: vec![NodeSelectorTerm {
                    match_expressions: vec![NodeRequirement {
                        key: ZONE.into(),
                        operator: NodeOperator::In,
                        values: vec![zone.into()],
                    }],
                    match_fields: Vec::new(),
                }],
            }),
            phase: VolumePhase::Available,
            ..PersistentVolume::default()
        })
    }

    fn node_in(name: &str, zone: &str) -> Node {
        let mut node = Node::new(name, Resources::new(4000, 16 << 30));
        node.labels.insert(ZONE.into(), zone.into());
        node
    }

    fn pod_with_claim(claim: &str) -> Pod {
        let mut pod = Pod::new("db", "db-0");
        pod.volumes.push(Volume {
            name: "data".into(),
            source: VolumeSource::PersistentVolumeClaim {
                claim_name: claim.into(),
            },
        });
        pod
    }

    fn claim_of<'a>(storage: &'a ClusterStorage, name: &str) -> &'a PersistentVolumeClaim {
        storage
            .objects()
            .claims
            .iter()
            .find(|c| c.name == name)
            .expect("the claim")
    }

    #[test]
    fn a_claim_binds_the_smallest_static_volume_usable_on_the_node() {
        let mut storage = ClusterStorage::default();
        for object in [
            claim("data-db-0", "local"),
            class("local", StorageClass::NO_PROVISIONER),
            zonal_volume("a-20", "zone-a", 20),
            zonal_volume("b-50", "zone-b", 50),
            zonal_volume("b-20", "zone-b", 20),
            zonal_volume("b-5", "zone-b", 5),
        ] {
            assert!(storage.add(&object));
        }
        assert!(storage.bind_claims(&pod_with_claim("data-db-0"), &node_in("n1", "zone-b")));
        let claim = claim_of(&storage, "data-db-0");
        assert_eq!(claim.volume_name.as_deref(), Some("b-20"));
        assert_eq!(claim.phase, ClaimPhase::Bound);
        let volume = &storage.objects().volumes[2];
        assert_eq!(volume.phase, VolumePhase::Bound);
        assert_eq!(
            volume.claim_ref.as_ref().map(|r| r.name.as_str()),
            Some("data-db-0")
        );
        // Bound claims stay where they are.
        assert!(!storage.bind_claims(&pod_with_claim("data-db-0"), &node_in("n2", "zone-a")));
    }

    #[test]
    fn without_a_static_volume_a_provisioner_creates_one_in_the_nodes_zone() {
        let mut storage = ClusterStorage::default();
        storage.add(&claim("data-db-0", "ssd"));
        storage.add(&class("ssd", "ebs.csi.aws.com"));
        assert!(storage.bind_claims(&pod_with_claim("data-db-0"), &node_in("n1", "zone-c")));
        let volume = &storage.objects().volumes[0];
        assert_eq!(volume.csi_driver.as_deref(), Some("ebs.csi.aws.com"));
        assert_eq!(volume.capacity_storage, 10 << 30);
        assert!(
            volume
                .node_affinity
                .as_ref()
                .is_some_and(|a| a.matches("", &node_in("x", "zone-c").labels))
        );
        assert!(
            !volume
                .node_affinity
                .as_ref()
                .is_some_and(|a| a.matches("", &node_in("x", "zone-a").labels))
        );
        assert_eq!(
            claim_of(&storage, "data-db-0").volume_name.as_deref(),
            Some(volume.name.as_str())
        );
        // No provisioner and no volume: the claim stays unbound.
        let mut storage = ClusterStorage::default();
        storage.add(&claim("data-db-0", "local"));
        storage.add(&class("local", StorageClass::NO_PROVISIONER));
        assert!(!storage.bind_claims(&pod_with_claim("data-db-0"), &node_in("n1", "zone-a")));
        assert_eq!(claim_of(&storage, "data-db-0").phase, ClaimPhase::Pending);
    }

    #[test]
    fn group_nodes_report_their_csi_drivers_until_they_go() {
        let mut storage = ClusterStorage::default();
        storage.set_group_drivers(
            "pool",
            vec![CsiNodeDriver {
                name: "ebs.csi.aws.com".into(),
                allocatable_count: Some(2),
                topology_keys: Vec::new(),
            }],
        );
        assert!(storage.node_registered("pool-0", Some("pool")));
        assert!(!storage.node_registered("other-0", Some("other")));
        assert!(!storage.node_registered("loose", None));
        assert_eq!(storage.objects().csi_nodes.len(), 1);
        assert_eq!(storage.objects().csi_nodes[0].node_name, "pool-0");
        assert!(storage.node_removed("pool-0"));
        assert!(storage.objects().csi_nodes.is_empty());
    }

    #[test]
    fn an_ownerless_ephemeral_claim_becomes_the_pods() {
        let mut storage = ClusterStorage::default();
        storage.add(&claim("db-0-cache", "ssd"));
        let mut pod = Pod::new("db", "db-0");
        pod.volumes.push(Volume {
            name: "cache".into(),
            source: VolumeSource::Ephemeral,
        });
        assert!(storage.adopt_ephemeral_claims(&pod));
        assert_eq!(
            claim_of(&storage, "db-0-cache").owner_uids,
            vec![pod.uid.clone()]
        );
        assert!(!storage.adopt_ephemeral_claims(&pod));
    }
}
