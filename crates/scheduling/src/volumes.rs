//! The scheduler's four volume Filter plugins: VolumeRestrictions, NodeVolumeLimits,
//! VolumeBinding and VolumeZone, over a [`VolumeCatalogue`] of the cluster's claims, volumes and
//! storage classes that the snapshot holds.
//!
//! As in kube-scheduler, each plugin has a per-pod part (PreFilter) and a per-node part (Filter).
//! The per-pod part ([`VolumePlan::for_pod`]) resolves the pod's claims once and can reject the pod
//! outright (a missing claim, an unbound `Immediate` claim, ...): such a verdict holds for every
//! node. The per-node part ([`VolumePlan::check_node`]) then reads only the node's labels, its
//! CSINode and the claims of pods already on it.
//!
//! Only pods with a claim or a generic ephemeral volume get a plan; every other pod skips this
//! module entirely (see [`Pod::has_checked_volumes`]).
//!
//! Not simulated: storage capacity tracking (`CSIStorageCapacity`), the limits of volumes declared
//! inline in the pod and of unbound claims of in-tree provisioners (a PersistentVolume of an
//! in-tree plugin arrives here under its CSI driver, as with CSI migration), claim label selectors
//! on static volumes, volume modes, and inline disk conflicts (GCE PD, EBS, iSCSI, RBD volumes
//! declared in the pod).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use ferroscale_model::labels::{REGION, REGION_BETA, ZONE, ZONE_BETA};
use ferroscale_model::{
    AccessMode, ClaimPhase, CsiNode, Labels, PersistentVolume, PersistentVolumeClaim, Pod,
    StorageClass, VolumeBindingMode, VolumeObjects, VolumePhase, VolumeSource,
};

use crate::snapshot::{NodeInfo, Snapshot};

/// The cluster's storage objects, indexed for the filters. Built once per loop from what Gather
/// read ([`Snapshot::set_volume_catalogue`]).
#[derive(Debug, Default)]
pub struct VolumeCatalogue {
    /// Namespace → claim name → claim.
    claims: HashMap<String, HashMap<String, Arc<PersistentVolumeClaim>>>,
    volumes: HashMap<String, Arc<PersistentVolume>>,
    /// Volumes by storage class name (`""` for none), for delayed binding to static volumes.
    volumes_by_class: HashMap<String, Vec<Arc<PersistentVolume>>>,
    classes: HashMap<String, Arc<StorageClass>>,
    pub(crate) csi_nodes: HashMap<String, Arc<CsiNode>>,
}

impl VolumeCatalogue {
    pub fn new(objects: &VolumeObjects) -> VolumeCatalogue {
        let mut catalogue = VolumeCatalogue::default();
        for claim in &objects.claims {
            catalogue
                .claims
                .entry(claim.namespace.clone())
                .or_default()
                .insert(claim.name.clone(), claim.clone());
        }
        for volume in &objects.volumes {
            catalogue
                .volumes
                .insert(volume.name.clone(), volume.clone());
            catalogue
                .volumes_by_class
                .entry(volume.class().to_string())
                .or_default()
                .push(volume.clone());
        }
        for class in &objects.storage_classes {
            catalogue.classes.insert(class.name.clone(), class.clone());
        }
        for csi in &objects.csi_nodes {
            catalogue
                .csi_nodes
                .insert(csi.node_name.clone(), csi.clone());
        }
        catalogue
    }

    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Arc<PersistentVolumeClaim>> {
        self.claims.get(namespace)?.get(name)
    }

    pub fn volume(&self, name: &str) -> Option<&Arc<PersistentVolume>> {
        self.volumes.get(name)
    }

    pub fn class(&self, name: &str) -> Option<&Arc<StorageClass>> {
        self.classes.get(name)
    }
}

/// The claim a volume of `pod` refers to, and whether it is a generic ephemeral volume's.
fn claim_name(pod: &Pod, source: &VolumeSource, volume_name: &str) -> Option<(String, bool)> {
    match source {
        VolumeSource::PersistentVolumeClaim { claim_name } => Some((claim_name.clone(), false)),
        VolumeSource::Ephemeral => Some((pod.ephemeral_claim_name(volume_name), true)),
        _ => None,
    }
}

/// A claim is bound when it names its volume and its phase is `Bound` (the scheduler also asks for
/// the bind-completed annotation, which the control plane sets together with the phase).
fn is_bound(claim: &PersistentVolumeClaim) -> bool {
    claim.volume_name.is_some() && claim.phase == ClaimPhase::Bound
}

/// Why the volume filters reject a pod, with the scheduler's wording (see `Unfit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeUnfit {
    ClaimNotFound { claim: String },
    EphemeralClaimNotCreated { claim: String },
    EphemeralClaimNotOwned { claim: String, pod: String },
    ClaimLost { claim: String, volume: String },
    ClaimDeleting { claim: String },
    UnboundImmediateClaims,
    ClaimWithoutVolumeOrClass,
    VolumeWithoutName,
    StorageClassNotFound { class: String },
    PersistentVolumeNotFound { volume: String },
    NodeAffinityConflict,
    BindConflict,
    BoundVolumeMissing,
    ZoneConflict,
    ReadWriteOncePodConflict,
    MaxVolumeCount,
}

/// The plugin a [`VolumeUnfit`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VolumePlugin {
    VolumeRestrictions,
    NodeVolumeLimits,
    VolumeBinding,
    VolumeZone,
}

impl fmt::Display for VolumeUnfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VolumeUnfit::ClaimNotFound { claim } => {
                write!(f, "persistentvolumeclaim \"{claim}\" not found")
            }
            VolumeUnfit::EphemeralClaimNotCreated { claim } => write!(
                f,
                "waiting for ephemeral volume controller to create the persistentvolumeclaim \"{claim}\""
            ),
            VolumeUnfit::EphemeralClaimNotOwned { claim, pod } => {
                write!(f, "PVC {claim} was not created for pod {pod} (pod is not owner)")
            }
            VolumeUnfit::ClaimLost { claim, volume } => write!(
                f,
                "persistentvolumeclaim \"{claim}\" bound to non-existent persistentvolume \"{volume}\""
            ),
            VolumeUnfit::ClaimDeleting { claim } => {
                write!(f, "persistentvolumeclaim \"{claim}\" is being deleted")
            }
            VolumeUnfit::UnboundImmediateClaims => {
                f.write_str("pod has unbound immediate PersistentVolumeClaims")
            }
            VolumeUnfit::ClaimWithoutVolumeOrClass => {
                f.write_str("PersistentVolumeClaim had no pv name and storageClass name")
            }
            VolumeUnfit::VolumeWithoutName => f.write_str("PersistentVolume had no name"),
            VolumeUnfit::StorageClassNotFound { class } => {
                write!(f, "storageclass.storage.k8s.io \"{class}\" not found")
            }
            VolumeUnfit::PersistentVolumeNotFound { volume } => {
                write!(f, "persistentvolume \"{volume}\" not found")
            }
            VolumeUnfit::NodeAffinityConflict => {
                f.write_str("node(s) didn't match PersistentVolume's node affinity")
            }
            VolumeUnfit::BindConflict => {
                f.write_str("node(s) didn't find available persistent volumes to bind")
            }
            VolumeUnfit::BoundVolumeMissing => f.write_str(
                "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)",
            ),
            VolumeUnfit::ZoneConflict => f.write_str("node(s) had no available volume zone"),
            VolumeUnfit::ReadWriteOncePodConflict => f.write_str(
                "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod",
            ),
            VolumeUnfit::MaxVolumeCount => f.write_str("node(s) exceed max volume count"),
        }
    }
}

/// Which of the four volume filters run (from the scheduler profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VolumeSwitches {
    pub restrictions: bool,
    pub limits: bool,
    pub binding: bool,
    pub zone: bool,
}

impl VolumeSwitches {
    pub(crate) fn any(self) -> bool {
        self.restrictions || self.limits || self.binding || self.zone
    }
}

/// A bound claim and its volume (`None` when the volume does not exist).
#[derive(Debug)]
struct BoundClaim {
    volume: Option<Arc<PersistentVolume>>,
}

/// The per-pod (PreFilter) state of the volume filters.
#[derive(Debug)]
pub(crate) struct VolumePlan {
    switches: VolumeSwitches,
    /// A `ReadWriteOncePod` claim of the pod is already used by a placed pod.
    read_write_once_pod_conflict: bool,
    bound: Vec<BoundClaim>,
    /// Unbound claims of `WaitForFirstConsumer` classes, smallest request first.
    delayed: Vec<Arc<PersistentVolumeClaim>>,
    /// VolumeZone: per zone/region label of the pod's bound volumes, the allowed values.
    zones: Vec<(&'static str, Vec<String>)>,
    /// NodeVolumeLimits: the pod's attachable volumes as (driver, unique id).
    attachable: Vec<(String, String)>,
}

/// The zone and region keys VolumeZone reads, in its order.
const TOPOLOGY_KEYS: [&str; 4] = [ZONE_BETA, REGION_BETA, ZONE, REGION];

/// The GA key a beta zone/region key corresponds to.
fn ga_key(key: &str) -> &str {
    match key {
        ZONE_BETA => ZONE,
        REGION_BETA => REGION,
        other => other,
    }
}

/// A zone label value: one zone, or several joined by `__`. `None` when a part is empty (the
/// scheduler ignores such a label).
fn zone_set(value: &str) -> Option<Vec<String>> {
    let zones: Vec<String> = value.split("__").map(|z| z.trim().to_string()).collect();
    (!zones.iter().any(String::is_empty)).then_some(zones)
}

/// Whether a volume's required node affinity admits a node with these labels. The scheduler
/// checks labels only: `metadata.name` fields never match.
fn volume_admits(volume: &PersistentVolume, labels: &Labels) -> bool {
    volume
        .node_affinity
        .as_ref()
        .is_none_or(|affinity| affinity.matches("", labels))
}

fn claim_ref_names(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    volume.claim_ref.as_ref().is_some_and(|r| {
        r.namespace == claim.namespace
            && r.name == claim.name
            && (r.uid.is_empty() || r.uid == claim.uid)
    })
}

/// The CSI driver and a unique id of a claim's volume, for NodeVolumeLimits; `None` when it is
/// not a CSI volume the scheduler counts.
fn attachable_of(
    catalogue: &VolumeCatalogue,
    claim: &PersistentVolumeClaim,
) -> Option<(String, String)> {
    if let Some(name) = &claim.volume_name
        && let Some(volume) = catalogue.volume(name)
    {
        let driver = volume.csi_driver.as_ref()?;
        return Some((driver.clone(), format!("{driver}/{}", volume.name)));
    }
    // Not provisioned yet: the class's provisioner will create one volume for this claim.
    let class = catalogue.class(claim.class())?;
    if class.provisioner.is_empty() {
        return None;
    }
    Some((
        class.provisioner.clone(),
        format!("{}/claim:{}", class.provisioner, claim.key()),
    ))
}

/// The attachable volumes of a pod already placed on a node (claims that cannot be resolved are
/// not counted).
fn placed_attachable(catalogue: &VolumeCatalogue, pod: &Pod, out: &mut Vec<(String, String)>) {
    for volume in &pod.volumes {
        let Some((name, ephemeral)) = claim_name(pod, &volume.source, &volume.name) else {
            continue;
        };
        let Some(claim) = catalogue.claim(&pod.namespace, &name) else {
            continue;
        };
        if ephemeral && !claim.owner_uids.iter().any(|uid| *uid == pod.uid) {
            continue;
        }
        if let Some(a) = attachable_of(catalogue, claim) {
            out.push(a);
        }
    }
}

impl VolumePlan {
    /// PreFilter of the four plugins, in the scheduler's order. `Err` rejects the pod on every
    /// node.
    pub(crate) fn for_pod(
        snapshot: &Snapshot,
        switches: VolumeSwitches,
        pod: &Pod,
    ) -> Result<VolumePlan, (VolumeUnfit, VolumePlugin)> {
        let catalogue = snapshot.volume_catalogue();
        let mut plan = VolumePlan {
            switches,
            read_write_once_pod_conflict: false,
            bound: Vec::new(),
            delayed: Vec::new(),
            zones: Vec::new(),
            attachable: Vec::new(),
        };
        let not_found = |claim: &str| VolumeUnfit::ClaimNotFound {
            claim: claim.to_string(),
        };

        // VolumeRestrictions: claims (not ephemeral ones) must exist; ReadWriteOncePod claims in
        // use by a placed pod conflict everywhere.
        if switches.restrictions {
            for volume in &pod.volumes {
                let VolumeSource::PersistentVolumeClaim { claim_name } = &volume.source else {
                    continue;
                };
                let claim = catalogue
                    .claim(&pod.namespace, claim_name)
                    .ok_or_else(|| (not_found(claim_name), VolumePlugin::VolumeRestrictions))?;
                if claim.access_modes.contains(&AccessMode::ReadWriteOncePod)
                    && snapshot.claim_in_use(&pod.namespace, claim_name)
                {
                    plan.read_write_once_pod_conflict = true;
                }
            }
        }

        // NodeVolumeLimits: which of the pod's volumes count against a driver's limit.
        if switches.limits {
            placed_attachable(catalogue, pod, &mut plan.attachable);
        }

        // VolumeBinding: every claim exists, is usable and owned; unbound claims must wait for
        // a consumer, or the pod waits for the control plane to bind them.
        if switches.binding {
            let reject = |unfit| (unfit, VolumePlugin::VolumeBinding);
            let mut claims = Vec::new();
            for volume in &pod.volumes {
                let Some((name, ephemeral)) = claim_name(pod, &volume.source, &volume.name) else {
                    continue;
                };
                let Some(claim) = catalogue.claim(&pod.namespace, &name) else {
                    return Err(reject(if ephemeral {
                        VolumeUnfit::EphemeralClaimNotCreated { claim: name }
                    } else {
                        not_found(&name)
                    }));
                };
                if claim.phase == ClaimPhase::Lost {
                    return Err(reject(VolumeUnfit::ClaimLost {
                        claim: name,
                        volume: claim.volume_name.clone().unwrap_or_default(),
                    }));
                }
                if claim.deleting {
                    return Err(reject(VolumeUnfit::ClaimDeleting { claim: name }));
                }
                if ephemeral && !claim.owner_uids.iter().any(|uid| *uid == pod.uid) {
                    return Err(reject(VolumeUnfit::EphemeralClaimNotOwned {
                        claim: claim.key(),
                        pod: pod.key(),
                    }));
                }
                claims.push(claim.clone());
            }
            let mut immediate = false;
            for claim in claims {
                if is_bound(&claim) {
                    let volume = claim
                        .volume_name
                        .as_deref()
                        .and_then(|v| catalogue.volume(v))
                        .cloned();
                    plan.bound.push(BoundClaim { volume });
                    continue;
                }
                let delayed = catalogue
                    .class(claim.class())
                    .is_some_and(|c| c.binding_mode == VolumeBindingMode::WaitForFirstConsumer);
                if delayed && claim.volume_name.is_none() {
                    plan.delayed.push(claim);
                } else {
                    immediate = true;
                }
            }
            if immediate {
                return Err(reject(VolumeUnfit::UnboundImmediateClaims));
            }
            plan.delayed.sort_by_key(|c| c.requested_storage);
        }

        // VolumeZone: the zone and region labels of the bound volumes of `persistentVolumeClaim`
        // volumes.
        if switches.zone {
            let reject = |unfit| (unfit, VolumePlugin::VolumeZone);
            for volume in &pod.volumes {
                let VolumeSource::PersistentVolumeClaim { claim_name } = &volume.source else {
                    continue;
                };
                let claim = catalogue
                    .claim(&pod.namespace, claim_name)
                    .ok_or_else(|| reject(not_found(claim_name)))?;
                let Some(volume_name) = &claim.volume_name else {
                    let class_name = claim.class();
                    if class_name.is_empty() {
                        return Err(reject(VolumeUnfit::ClaimWithoutVolumeOrClass));
                    }
                    let class = catalogue.class(class_name).ok_or_else(|| {
                        reject(VolumeUnfit::StorageClassNotFound {
                            class: class_name.to_string(),
                        })
                    })?;
                    if class.binding_mode == VolumeBindingMode::WaitForFirstConsumer {
                        continue;
                    }
                    return Err(reject(VolumeUnfit::VolumeWithoutName));
                };
                let pv = catalogue.volume(volume_name).ok_or_else(|| {
                    reject(VolumeUnfit::PersistentVolumeNotFound {
                        volume: volume_name.clone(),
                    })
                })?;
                for key in TOPOLOGY_KEYS {
                    if let Some(values) = pv.labels.get(key).and_then(|v| zone_set(v)) {
                        plan.zones.push((key, values));
                    }
                }
            }
        }
        Ok(plan)
    }

    /// The Filter part of the four plugins for one node, in the scheduler's order.
    pub(crate) fn check_node(
        &self,
        snapshot: &Snapshot,
        info: &NodeInfo,
    ) -> Result<(), (VolumeUnfit, VolumePlugin)> {
        let catalogue = snapshot.volume_catalogue();
        let node = &info.node;
        if self.switches.restrictions && self.read_write_once_pod_conflict {
            return Err((
                VolumeUnfit::ReadWriteOncePodConflict,
                VolumePlugin::VolumeRestrictions,
            ));
        }
        if self.switches.limits && !self.attachable.is_empty() {
            self.check_limits(catalogue, snapshot.csi_node(&node.name), info)
                .map_err(|u| (u, VolumePlugin::NodeVolumeLimits))?;
        }
        if self.switches.binding {
            self.check_binding(catalogue, &node.name, &node.labels)
                .map_err(|u| (u, VolumePlugin::VolumeBinding))?;
        }
        if self.switches.zone && !self.zones.is_empty() {
            let constrained = TOPOLOGY_KEYS.iter().any(|k| node.labels.contains_key(*k));
            if constrained {
                for (key, values) in &self.zones {
                    let value = node
                        .labels
                        .get(*key)
                        .or_else(|| node.labels.get(ga_key(key)));
                    if !value.is_some_and(|v| values.contains(v)) {
                        return Err((VolumeUnfit::ZoneConflict, VolumePlugin::VolumeZone));
                    }
                }
            }
        }
        Ok(())
    }

    fn check_limits(
        &self,
        catalogue: &VolumeCatalogue,
        csi_node: Option<&CsiNode>,
        info: &NodeInfo,
    ) -> Result<(), VolumeUnfit> {
        // Without a CSINode the node reports no limits.
        let Some(csi_node) = csi_node else {
            return Ok(());
        };
        let mut attached = Vec::new();
        for pod in info.pods.iter().filter(|p| p.has_checked_volumes()) {
            placed_attachable(catalogue, pod, &mut attached);
        }
        attached.sort();
        attached.dedup();
        let mut new: Vec<&(String, String)> = self
            .attachable
            .iter()
            .filter(|a| !attached.contains(a))
            .collect();
        new.sort();
        new.dedup();
        for driver in &csi_node.drivers {
            let Some(limit) = driver.allocatable_count else {
                continue;
            };
            let adding = new.iter().filter(|(d, _)| *d == driver.name).count();
            if adding == 0 {
                continue;
            }
            let present = attached.iter().filter(|(d, _)| *d == driver.name).count();
            if present + adding > usize::try_from(limit).unwrap_or(0) {
                return Err(VolumeUnfit::MaxVolumeCount);
            }
        }
        Ok(())
    }

    fn check_binding(
        &self,
        catalogue: &VolumeCatalogue,
        node_name: &str,
        labels: &Labels,
    ) -> Result<(), VolumeUnfit> {
        let mut bound_missing = false;
        for bound in &self.bound {
            match &bound.volume {
                None => {
                    bound_missing = true;
                    break;
                }
                Some(volume) if !volume_admits(volume, labels) => {
                    return Err(VolumeUnfit::NodeAffinityConflict);
                }
                Some(_) => {}
            }
        }
        if !self.delayed.is_empty() && !self.delayed_claims_fit(catalogue, node_name, labels) {
            return Err(VolumeUnfit::BindConflict);
        }
        if bound_missing {
            return Err(VolumeUnfit::BoundVolumeMissing);
        }
        Ok(())
    }

    /// Whether every unbound delayed-binding claim either binds to an available static volume
    /// usable from this node or can be provisioned for it.
    fn delayed_claims_fit(
        &self,
        catalogue: &VolumeCatalogue,
        node_name: &str,
        labels: &Labels,
    ) -> bool {
        let mut chosen: Vec<&str> = Vec::new();
        let mut to_provision: Vec<&PersistentVolumeClaim> = Vec::new();
        for claim in &self.delayed {
            if let Some(selected) = &claim.selected_node {
                // The scheduler already picked a node for this claim's provisioning.
                if selected != node_name {
                    return false;
                }
                to_provision.push(claim);
                continue;
            }
            match matching_volume(catalogue, claim, labels, &chosen) {
                Some(volume) => chosen.push(&volume.name),
                None => to_provision.push(claim),
            }
        }
        to_provision.into_iter().all(|claim| {
            catalogue.class(claim.class()).is_some_and(|class| {
                !class.provisioner.is_empty()
                    && class.provisioner != StorageClass::NO_PROVISIONER
                    && class.allows_node(labels)
            })
        })
    }
}

/// The static volume a delayed-binding claim would bind to on a node with these labels: the one
/// pre-bound to it, or the smallest available one of its class that is large enough, offers its
/// access modes and admits the node.
fn matching_volume<'c>(
    catalogue: &'c VolumeCatalogue,
    claim: &PersistentVolumeClaim,
    labels: &Labels,
    chosen: &[&str],
) -> Option<&'c Arc<PersistentVolume>> {
    let candidates = catalogue.volumes_by_class.get(claim.class())?;
    let mut best: Option<&Arc<PersistentVolume>> = None;
    for volume in candidates {
        if chosen.contains(&volume.name.as_str()) || volume.deleting {
            continue;
        }
        let admits = volume_admits(volume, labels);
        if claim_ref_names(volume, claim) {
            if volume.capacity_storage < claim.requested_storage {
                continue;
            }
            return admits.then_some(volume);
        }
        if volume.phase != VolumePhase::Available
            || volume.claim_ref.is_some()
            || !admits
            || !claim
                .access_modes
                .iter()
                .all(|m| volume.access_modes.contains(m))
            || volume.capacity_storage < claim.requested_storage
        {
            continue;
        }
        if best.is_none_or(|b| b.capacity_storage > volume.capacity_storage) {
            best = Some(volume);
        }
    }
    best
}

#[cfg(test)]
mod tests;
