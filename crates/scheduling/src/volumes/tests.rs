//! Each volume filter and its rejection message, through the public `check` / `find_node`.

use std::sync::Arc;

use ferroscale_model::labels::{HOSTNAME, ZONE, ZONE_BETA};
use ferroscale_model::{
    AccessMode, ClaimPhase, ClaimRef, CsiNode, CsiNodeDriver, Labels, Node, NodeOperator,
    NodeRequirement, NodeSelector, NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim, Pod,
    Resources, StorageClass, TopologyRequirement, TopologySelectorTerm, Volume, VolumeBindingMode,
    VolumeObjects, VolumePhase, VolumeSource,
};

use crate::scheduler_config::{FilterPlugin, SchedulerProfile};
use crate::{NodeId, Snapshot, Unfit, UnfitKind, VolumeCatalogue, check, find_node};

fn node(name: &str, zone: Option<&str>) -> Node {
    let mut allocatable = Resources::new(4000, 8 << 30);
    allocatable.pods = 110;
    let mut n = Node::new(name, allocatable);
    n.labels.insert(HOSTNAME.into(), name.into());
    if let Some(z) = zone {
        n.labels.insert(ZONE.into(), z.into());
    }
    n
}

fn add(s: &mut Snapshot, name: &str, zone: Option<&str>) -> NodeId {
    s.add_node(Arc::new(node(name, zone)))
}

fn pod_with_claim(name: &str, claim: &str) -> Pod {
    let mut p = Pod::new("default", name);
    p.requests = Resources::new(100, 1 << 20);
    p.volumes.push(Volume {
        name: "data".into(),
        source: VolumeSource::PersistentVolumeClaim {
            claim_name: claim.into(),
        },
    });
    p
}

fn claim(name: &str, class: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        storage_class_name: Some(class.into()),
        access_modes: vec![AccessMode::ReadWriteOnce],
        requested_storage: 10 << 30,
        ..PersistentVolumeClaim::default()
    }
}

fn bound_claim(name: &str, volume: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        volume_name: Some(volume.into()),
        phase: ClaimPhase::Bound,
        ..claim(name, "zonal")
    }
}

fn requirement(key: &str, values: &[&str]) -> NodeRequirement {
    NodeRequirement {
        key: key.into(),
        operator: NodeOperator::In,
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

fn volume(name: &str, affinity: Option<NodeRequirement>) -> PersistentVolume {
    PersistentVolume {
        name: name.into(),
        storage_class_name: Some("zonal".into()),
        access_modes: vec![AccessMode::ReadWriteOnce],
        capacity_storage: 10 << 30,
        node_affinity: affinity.map(|r| NodeSelector {
            terms: vec![NodeSelectorTerm {
                match_expressions: vec![r],
                match_fields: Vec::new(),
            }],
        }),
        csi_driver: Some("csi.example.com".into()),
        phase: VolumePhase::Bound,
        ..PersistentVolume::default()
    }
}

fn class(name: &str, mode: VolumeBindingMode, zones: &[&str]) -> StorageClass {
    StorageClass {
        name: name.into(),
        provisioner: "csi.example.com".into(),
        binding_mode: mode,
        allowed_topologies: if zones.is_empty() {
            Vec::new()
        } else {
            vec![TopologySelectorTerm {
                requirements: vec![TopologyRequirement {
                    key: ZONE.into(),
                    values: zones.iter().map(|z| z.to_string()).collect(),
                }],
            }]
        },
    }
}

fn catalogue(
    claims: Vec<PersistentVolumeClaim>,
    volumes: Vec<PersistentVolume>,
    classes: Vec<StorageClass>,
    csi_nodes: Vec<CsiNode>,
) -> Arc<VolumeCatalogue> {
    Arc::new(VolumeCatalogue::new(&VolumeObjects {
        claims: claims.into_iter().map(Arc::new).collect(),
        volumes: volumes.into_iter().map(Arc::new).collect(),
        storage_classes: classes.into_iter().map(Arc::new).collect(),
        csi_nodes: csi_nodes.into_iter().map(Arc::new).collect(),
    }))
}

fn message(s: &mut Snapshot, p: &Pod, id: NodeId) -> Option<String> {
    check(s, p, id).err().map(|u| u.to_string())
}

/// docs/behaviour.md VOL-102.
#[test]
fn a_bound_claim_follows_its_volume_node_affinity() {
    let mut s = Snapshot::new();
    let a = add(&mut s, "a", Some("zone-a"));
    let b = add(&mut s, "b", Some("zone-b"));
    s.set_volume_catalogue(catalogue(
        vec![bound_claim("data", "pv-1")],
        vec![volume("pv-1", Some(requirement(ZONE, &["zone-b"])))],
        vec![class("zonal", VolumeBindingMode::WaitForFirstConsumer, &[])],
        Vec::new(),
    ));
    let p = pod_with_claim("web-0", "data");
    assert_eq!(
        message(&mut s, &p, a).as_deref(),
        Some("node(s) didn't match PersistentVolume's node affinity")
    );
    assert_eq!(
        check(&mut s, &p, a).unwrap_err().kind(),
        UnfitKind::VolumeBinding
    );
    assert_eq!(check(&mut s, &p, b), Ok(()));
    assert_eq!(find_node(&mut s, &p, 0), Some(b));
}

/// docs/behaviour.md VOL-102.
#[test]
fn a_volume_pinned_to_a_host_rejects_other_nodes_in_filter_order() {
    let mut s = Snapshot::new();
    let mut cordoned = node("cordoned", None);
    cordoned.unschedulable = true;
    let cordoned = s.add_node(Arc::new(cordoned));
    let other = add(&mut s, "other", None);
    let local = add(&mut s, "local", None);
    s.set_volume_catalogue(catalogue(
        vec![bound_claim("data", "pv-local")],
        vec![volume("pv-local", Some(requirement(HOSTNAME, &["local"])))],
        Vec::new(),
        Vec::new(),
    ));
    let p = pod_with_claim("db-0", "data");
    // kube-scheduler v1.36's VolumeBinding PreFilter narrows no nodes: an earlier filter's
    // reason comes first, and VolumeBinding's Filter names the volume's node affinity.
    assert_eq!(
        message(&mut s, &p, cordoned).as_deref(),
        Some("node(s) were unschedulable")
    );
    assert_eq!(
        message(&mut s, &p, other).as_deref(),
        Some("node(s) didn't match PersistentVolume's node affinity")
    );
    assert_eq!(find_node(&mut s, &p, 0), Some(local));
}

/// docs/behaviour.md VOL-104, SCHED-102.
#[test]
fn unbound_immediate_claims_and_missing_classes_make_the_pod_unschedulable_everywhere() {
    let mut s = Snapshot::new();
    let a = add(&mut s, "a", Some("zone-a"));
    let immediate = || {
        catalogue(
            vec![claim("data", "fast")],
            Vec::new(),
            vec![class("fast", VolumeBindingMode::Immediate, &[])],
            Vec::new(),
        )
    };
    s.set_volume_catalogue(immediate());
    let p = pod_with_claim("web-0", "data");
    assert_eq!(
        message(&mut s, &p, a).as_deref(),
        Some("pod has unbound immediate PersistentVolumeClaims")
    );
    assert_eq!(find_node(&mut s, &p, 0), None);
    // A class that does not exist binds immediately as far as the scheduler is concerned.
    s.set_volume_catalogue(catalogue(
        vec![claim("data", "gone")],
        Vec::new(),
        Vec::new(),
        Vec::new(),
    ));
    assert_eq!(
        message(&mut s, &p, a).as_deref(),
        Some("pod has unbound immediate PersistentVolumeClaims")
    );
    // With VolumeBinding disabled, VolumeZone's PreFilter reports the missing class.
    let mut profile = SchedulerProfile::default();
    profile.set_enabled(FilterPlugin::VolumeBinding, false);
    s.set_scheduler_profile(Arc::new(profile));
    assert_eq!(
        message(&mut s, &p, a).as_deref(),
        Some("storageclass.storage.k8s.io \"gone\" not found")
    );
    // With every volume filter disabled the pod fits.
    let mut profile = SchedulerProfile::default();
    for plugin in [
        FilterPlugin::VolumeRestrictions,
        FilterPlugin::NodeVolumeLimits,
        FilterPlugin::VolumeBinding,
        FilterPlugin::VolumeZone,
    ] {
        profile.set_enabled(plugin, false);
    }
    s.set_scheduler_profile(Arc::new(profile));
    s.set_volume_catalogue(immediate());
    assert_eq!(check(&mut s, &p, a), Ok(()));
    assert_eq!(find_node(&mut s, &p, 0), Some(a));
}

/// docs/behaviour.md VOL-101, VOL-104.
#[test]
fn missing_lost_deleting_and_foreign_claims_have_the_scheduler_messages() {
    let mut s = Snapshot::new();
    let a = add(&mut s, "a", None);
    let p = pod_with_claim("web-0", "data");
    assert_eq!(
        message(&mut s, &p, a).as_deref(),
        Some("persistentvolumeclaim \"data\" not found")
    );
    let mut lost = bound_claim("data", "pv-gone");
    lost.phase = ClaimPhase::Lost;
    s.set_volume_catalogue(catalogue(vec![lost], Vec::new(), Vec::new(), Vec::new()));
    assert_eq!(
        message(&mut s, &p, a).as_deref(),
        Some("persistentvolumeclaim \"data\" bound to non-existent persistentvolume \"pv-gone\"")
    );
    let mut deleting = bound_claim("data", "pv-1");
    deleting.deleting = true;
    s.set_volume_catalogue(catalogue(
        vec![deleting],
        vec![volume("pv-1", None)],
        Vec::new(),
        Vec::new(),
    ));
    assert_eq!(
        message(&mut s, &p, a).as_deref(),
        Some("persistentvolumeclaim \"data\" is being deleted")
    );

    // Generic ephemeral volumes: the claim is `<pod>-<volume>` and must be owned by the pod.
    let mut e = Pod::new("default", "job-1");
    e.volumes.push(Volume {
        name: "scratch".into(),
        source: VolumeSource::Ephemeral,
    });
    s.set_volume_catalogue(catalogue(Vec::new(), Vec::new(), Vec::new(), Vec::new()));
    assert_eq!(
        message(&mut s, &e, a).as_deref(),
        Some(
            "waiting for ephemeral volume controller to create the persistentvolumeclaim \"job-1-scratch\""
        )
    );
    let mut foreign = claim("job-1-scratch", "zonal");
    foreign.owner_uids = vec!["someone-else".into()];
    let classes = vec![class("zonal", VolumeBindingMode::WaitForFirstConsumer, &[])];
    s.set_volume_catalogue(catalogue(
        vec![foreign.clone()],
        Vec::new(),
        classes.clone(),
        Vec::new(),
    ));
    assert_eq!(
        message(&mut s, &e, a).as_deref(),
        Some("PVC default/job-1-scratch was not created for pod default/job-1 (pod is not owner)")
    );
    foreign.owner_uids = vec![e.uid.to_string()];
    s.set_volume_catalogue(catalogue(vec![foreign], Vec::new(), classes, Vec::new()));
    assert_eq!(check(&mut s, &e, a), Ok(()));
}

/// docs/behaviour.md VOL-104, SCHED-102.
#[test]
fn bound_claims_to_missing_volumes_are_reported_by_volume_zone_first() {
    let mut s = Snapshot::new();
    let a = add(&mut s, "a", None);
    s.set_volume_catalogue(catalogue(
        vec![bound_claim("data", "pv-gone")],
        Vec::new(),
        Vec::new(),
        Vec::new(),
    ));
    let p = pod_with_claim("web-0", "data");
    assert_eq!(
        message(&mut s, &p, a).as_deref(),
        Some("persistentvolume \"pv-gone\" not found")
    );
    let mut profile = SchedulerProfile::default();
    profile.set_enabled(FilterPlugin::VolumeZone, false);
    s.set_scheduler_profile(Arc::new(profile));
    assert_eq!(
        message(&mut s, &p, a).as_deref(),
        Some("node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)")
    );
}

/// docs/behaviour.md VOL-103.
#[test]
fn wait_for_first_consumer_claims_are_provisioned_only_where_the_class_allows() {
    let mut s = Snapshot::new();
    let a = add(&mut s, "a", Some("zone-a"));
    let b = add(&mut s, "b", Some("zone-b"));
    s.set_volume_catalogue(catalogue(
        vec![claim("data", "zonal")],
        Vec::new(),
        vec![class(
            "zonal",
            VolumeBindingMode::WaitForFirstConsumer,
            &["zone-a"],
        )],
        Vec::new(),
    ));
    let p = pod_with_claim("web-0", "data");
    assert_eq!(check(&mut s, &p, a), Ok(()));
    assert_eq!(
        message(&mut s, &p, b).as_deref(),
        Some("node(s) didn't find available persistent volumes to bind")
    );
    assert_eq!(find_node(&mut s, &p, 1), Some(a));

    // A claim the scheduler already picked a node for can only go there.
    let mut selected = claim("data", "zonal");
    selected.selected_node = Some("b".into());
    s.set_volume_catalogue(catalogue(
        vec![selected],
        Vec::new(),
        vec![class("zonal", VolumeBindingMode::WaitForFirstConsumer, &[])],
        Vec::new(),
    ));
    assert!(check(&mut s, &p, a).is_err());
    assert_eq!(check(&mut s, &p, b), Ok(()));
}

/// docs/behaviour.md VOL-103.
#[test]
fn a_class_without_provisioner_binds_only_to_an_available_static_volume() {
    let mut s = Snapshot::new();
    let a = add(&mut s, "a", Some("zone-a"));
    let b = add(&mut s, "b", Some("zone-b"));
    let mut local = class("zonal", VolumeBindingMode::WaitForFirstConsumer, &[]);
    local.provisioner = StorageClass::NO_PROVISIONER.into();
    let mut available = volume("pv-b", Some(requirement(ZONE, &["zone-b"])));
    available.phase = VolumePhase::Available;
    let mut too_small = volume("pv-a", Some(requirement(ZONE, &["zone-a"])));
    too_small.phase = VolumePhase::Available;
    too_small.capacity_storage = 1 << 30;
    s.set_volume_catalogue(catalogue(
        vec![claim("data", "zonal")],
        vec![available.clone(), too_small],
        vec![local.clone()],
        Vec::new(),
    ));
    let p = pod_with_claim("web-0", "data");
    assert_eq!(
        message(&mut s, &p, a).as_deref(),
        Some("node(s) didn't find available persistent volumes to bind")
    );
    assert_eq!(check(&mut s, &p, b), Ok(()));

    // A volume pre-bound to another claim is not available.
    available.claim_ref = Some(ClaimRef {
        namespace: "default".into(),
        name: "other".into(),
        uid: String::new(),
    });
    s.set_volume_catalogue(catalogue(
        vec![claim("data", "zonal")],
        vec![available],
        vec![local],
        Vec::new(),
    ));
    assert!(check(&mut s, &p, b).is_err());
}

/// docs/behaviour.md VOL-105.
#[test]
fn volume_zone_labels_restrict_nodes_with_zone_labels_only() {
    let mut s = Snapshot::new();
    let a = add(&mut s, "a", Some("zone-a"));
    let c = add(&mut s, "c", Some("zone-c"));
    let unlabelled = add(&mut s, "plain", None);
    let mut beta_node = node("beta", None);
    beta_node.labels.insert(ZONE_BETA.into(), "zone-b".into());
    let beta = s.add_node(Arc::new(beta_node));
    let mut pv = volume("pv-1", None);
    // The legacy key on the volume is compared with the GA key on nodes that lack the legacy one.
    pv.labels = Labels::from([(ZONE_BETA.to_string(), "zone-a__zone-b".to_string())]);
    s.set_volume_catalogue(catalogue(
        vec![bound_claim("data", "pv-1")],
        vec![pv],
        Vec::new(),
        Vec::new(),
    ));
    let p = pod_with_claim("web-0", "data");
    assert_eq!(check(&mut s, &p, a), Ok(()));
    assert_eq!(check(&mut s, &p, beta), Ok(()));
    assert_eq!(check(&mut s, &p, unlabelled), Ok(()));
    let unfit = check(&mut s, &p, c).unwrap_err();
    assert_eq!(unfit.to_string(), "node(s) had no available volume zone");
    assert_eq!(unfit.kind(), UnfitKind::VolumeZone);
}

/// docs/behaviour.md VOL-106.
#[test]
fn a_read_write_once_pod_claim_in_use_rejects_every_node() {
    let mut s = Snapshot::new();
    let a = add(&mut s, "a", None);
    let b = add(&mut s, "b", None);
    let mut exclusive = bound_claim("data", "pv-1");
    exclusive.access_modes = vec![AccessMode::ReadWriteOncePod];
    s.set_volume_catalogue(catalogue(
        vec![exclusive],
        vec![volume("pv-1", None)],
        Vec::new(),
        Vec::new(),
    ));
    let p = pod_with_claim("web-1", "data");
    assert_eq!(check(&mut s, &p, b), Ok(()));
    let mut holder = pod_with_claim("web-0", "data");
    holder.node_name = Some("a".into());
    s.add_pod(a, Arc::new(holder));
    let unfit = check(&mut s, &p, b).unwrap_err();
    assert_eq!(
        unfit.to_string(),
        "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
    );
    // Moving the holder elsewhere would not help: the verdict depends on the rest of the cluster.
    assert!(!unfit.is_local_to_node());
    assert_eq!(find_node(&mut s, &p, 0), None);
    // Once the holder is gone (a drain simulation removes it first), the claim is free again.
    s.remove_pod(a, "uid-default-web-0");
    assert_eq!(find_node(&mut s, &p, 0), Some(a));
}

/// docs/behaviour.md VOL-107.
#[test]
fn csi_node_limits_count_unique_volumes_per_driver() {
    let mut s = Snapshot::new();
    let a = add(&mut s, "a", None);
    let unlimited = add(&mut s, "b", None);
    let limit = |node: &str, count| CsiNode {
        node_name: node.into(),
        drivers: vec![CsiNodeDriver {
            name: "csi.example.com".into(),
            allocatable_count: Some(count),
            topology_keys: Vec::new(),
        }],
    };
    let claims = (0..4)
        .map(|i| bound_claim(&format!("data-{i}"), &format!("pv-{i}")))
        .collect();
    let volumes = (0..4).map(|i| volume(&format!("pv-{i}"), None)).collect();
    s.set_volume_catalogue(catalogue(claims, volumes, Vec::new(), vec![limit("a", 2)]));
    for i in 0..2 {
        let mut placed = pod_with_claim(&format!("web-{i}"), &format!("data-{i}"));
        placed.node_name = Some("a".into());
        s.add_pod(a, Arc::new(placed));
    }
    let third = pod_with_claim("web-2", "data-2");
    let unfit = check(&mut s, &third, a).unwrap_err();
    assert_eq!(unfit.to_string(), "node(s) exceed max volume count");
    assert_eq!(unfit.kind(), UnfitKind::NodeVolumeLimits);
    assert!(unfit.is_local_to_node());
    // A volume already attached to the node does not count twice.
    let sharing = pod_with_claim("reader", "data-1");
    assert_eq!(check(&mut s, &sharing, a), Ok(()));
    // A node without a CSINode has no limit.
    assert_eq!(check(&mut s, &third, unlimited), Ok(()));
    // A simulated node's CSINode limits it too.
    s.set_simulated_csi_node(limit("b", 0));
    assert_eq!(
        check(&mut s, &third, unlimited).unwrap_err().to_string(),
        "node(s) exceed max volume count"
    );
}

/// docs/behaviour.md VOL-101.
#[test]
fn pods_without_claims_never_consult_the_volume_catalogue() {
    let mut s = Snapshot::new();
    let a = add(&mut s, "a", None);
    let mut p = Pod::new("default", "plain");
    p.volumes.push(Volume {
        name: "config".into(),
        source: VolumeSource::Other,
    });
    p.volumes.push(Volume {
        name: "inline".into(),
        source: VolumeSource::Csi {
            driver: "csi.example.com".into(),
        },
    });
    assert!(!p.has_checked_volumes());
    assert_eq!(check(&mut s, &p, a), Ok(()));
    // The same pod with a claim the (empty) catalogue does not know is rejected.
    let with_claim = pod_with_claim("claims", "data");
    assert!(matches!(
        check(&mut s, &with_claim, a),
        Err(Unfit::Volume { .. })
    ));
}
