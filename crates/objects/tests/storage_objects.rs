//! PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes and the volumes pods name,
//! as `kubectl get -o yaml` prints them, convert into the model the volume filters read; every bad
//! value is refused with an error naming the object, the field and the value.

use ferroscale_model::{
    AccessMode, ClaimPhase, NodeOperator, VolumeBindingMode, VolumePhase, VolumeSource,
};
use ferroscale_objects::{K8sObject, ObjectsError, parse_objects_yaml};

const STORAGE: &str = r#"apiVersion: v1
kind: List
items:
- apiVersion: storage.k8s.io/v1
  kind: StorageClass
  metadata: {name: zonal}
  provisioner: ebs.csi.aws.com
  volumeBindingMode: WaitForFirstConsumer
  reclaimPolicy: Delete
  allowedTopologies:
  - matchLabelExpressions:
    - key: topology.kubernetes.io/zone
      values: [zone-a, zone-b]
- apiVersion: storage.k8s.io/v1
  kind: StorageClass
  metadata: {name: standard}
  provisioner: kubernetes.io/no-provisioner
- apiVersion: v1
  kind: PersistentVolumeClaim
  metadata:
    name: data-db-0
    namespace: shop
    uid: 11111111-0000-4000-8000-000000000001
    annotations:
      volume.kubernetes.io/selected-node: ip-10-0-2-7
    ownerReferences:
    - {apiVersion: v1, kind: Pod, name: db-0, uid: pod-uid-1}
  spec:
    accessModes: [ReadWriteOnce, ReadWriteOncePod]
    storageClassName: zonal
    volumeName: pv-db-0
    resources: {requests: {storage: 10Gi}}
  status:
    phase: Bound
    capacity: {storage: 10Gi}
- apiVersion: v1
  kind: PersistentVolumeClaim
  metadata: {name: scratch}
  spec:
    accessModes: [ReadWriteMany]
    resources: {requests: {storage: 500M}}
- apiVersion: v1
  kind: PersistentVolume
  metadata:
    name: pv-db-0
    labels: {topology.kubernetes.io/zone: zone-b}
  spec:
    accessModes: [ReadWriteOnce]
    capacity: {storage: 10Gi}
    storageClassName: zonal
    persistentVolumeReclaimPolicy: Delete
    claimRef: {kind: PersistentVolumeClaim, namespace: shop, name: data-db-0, uid: 11111111-0000-4000-8000-000000000001}
    csi: {driver: ebs.csi.aws.com, volumeHandle: vol-0abc}
    nodeAffinity:
      required:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: topology.kubernetes.io/zone, operator: In, values: [zone-b]}
  status: {phase: Bound}
- apiVersion: v1
  kind: PersistentVolume
  metadata: {name: legacy}
  spec:
    capacity: {storage: 1Gi}
    awsElasticBlockStore: {volumeID: vol-legacy}
- apiVersion: v1
  kind: PersistentVolume
  metadata: {name: nfs}
  spec:
    capacity: {storage: 1Ti}
    nfs: {server: nfs.example.com, path: /export}
  status: {phase: Available}
- apiVersion: storage.k8s.io/v1
  kind: CSINode
  metadata: {name: ip-10-0-2-7}
  spec:
    drivers:
    - name: ebs.csi.aws.com
      nodeID: i-0abc
      allocatable: {count: 25}
      topologyKeys: [topology.kubernetes.io/zone]
    - {name: efs.csi.aws.com, nodeID: i-0abc}
- apiVersion: v1
  kind: Pod
  metadata: {name: db-0, namespace: shop}
  spec:
    containers: [{name: db, image: postgres}]
    volumes:
    - name: data
      persistentVolumeClaim: {claimName: data-db-0}
    - name: cache
      ephemeral:
        volumeClaimTemplate:
          spec:
            accessModes: [ReadWriteOnce]
            storageClassName: zonal
            resources: {requests: {storage: 1Gi}}
    - name: secrets
      csi: {driver: secrets-store.csi.k8s.io, readOnly: true}
    - name: old
      awsElasticBlockStore: {volumeID: vol-inline}
    - name: config
      configMap: {name: db}
"#;

fn parse(text: &str) -> Vec<K8sObject> {
    match parse_objects_yaml(text, "storage.yaml") {
        Ok(parsed) => {
            assert!(
                parsed.warnings.is_empty(),
                "storage kinds are read, not skipped: {:?}",
                parsed.warnings
            );
            parsed.objects
        }
        Err(e) => panic!("{e}"),
    }
}

fn parse_err(text: &str) -> ObjectsError {
    match parse_objects_yaml(text, "bad.yaml") {
        Ok(parsed) => panic!("expected an error, got {:?}", parsed.objects),
        Err(e) => e,
    }
}

#[test]
fn storage_classes_keep_binding_mode_and_allowed_topologies() {
    let objects = parse(STORAGE);
    let K8sObject::StorageClass(zonal) = &objects[0] else {
        panic!("expected a StorageClass: {:?}", objects[0])
    };
    assert_eq!(zonal.name, "zonal");
    assert_eq!(zonal.provisioner, "ebs.csi.aws.com");
    assert_eq!(zonal.binding_mode, VolumeBindingMode::WaitForFirstConsumer);
    assert_eq!(zonal.allowed_topologies.len(), 1);
    let requirement = &zonal.allowed_topologies[0].requirements[0];
    assert_eq!(requirement.key, "topology.kubernetes.io/zone");
    assert_eq!(requirement.values, vec!["zone-a", "zone-b"]);
    let K8sObject::StorageClass(standard) = &objects[1] else {
        panic!("expected a StorageClass")
    };
    // The API server's default binding mode.
    assert_eq!(standard.binding_mode, VolumeBindingMode::Immediate);
    assert!(standard.allowed_topologies.is_empty());
}

#[test]
fn claims_keep_what_binding_needs() {
    let objects = parse(STORAGE);
    let K8sObject::PersistentVolumeClaim(bound) = &objects[2] else {
        panic!("expected a claim: {:?}", objects[2])
    };
    assert_eq!(bound.key(), "shop/data-db-0");
    assert_eq!(bound.uid, "11111111-0000-4000-8000-000000000001");
    assert_eq!(bound.storage_class_name.as_deref(), Some("zonal"));
    assert_eq!(bound.volume_name.as_deref(), Some("pv-db-0"));
    assert_eq!(
        bound.access_modes,
        vec![AccessMode::ReadWriteOnce, AccessMode::ReadWriteOncePod]
    );
    assert_eq!(bound.phase, ClaimPhase::Bound);
    assert_eq!(bound.selected_node.as_deref(), Some("ip-10-0-2-7"));
    assert_eq!(bound.requested_storage, 10 << 30);
    assert_eq!(bound.owner_uids, vec!["pod-uid-1"]);
    assert!(!bound.deleting);
    let K8sObject::PersistentVolumeClaim(pending) = &objects[3] else {
        panic!("expected a claim")
    };
    // No namespace: `default`, as kubectl apply would put it; no class and no status: pending.
    assert_eq!(pending.key(), "default/scratch");
    assert_eq!(pending.storage_class_name, None);
    assert_eq!(pending.volume_name, None);
    assert_eq!(pending.phase, ClaimPhase::Pending);
    assert_eq!(pending.requested_storage, 500_000_000);
}

#[test]
fn volumes_keep_node_affinity_claim_and_driver() {
    let objects = parse(STORAGE);
    let K8sObject::PersistentVolume(volume) = &objects[4] else {
        panic!("expected a volume: {:?}", objects[4])
    };
    assert_eq!(volume.name, "pv-db-0");
    assert_eq!(
        volume
            .labels
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("zone-b")
    );
    assert_eq!(volume.capacity_storage, 10 << 30);
    assert_eq!(volume.phase, VolumePhase::Bound);
    assert_eq!(volume.csi_driver.as_deref(), Some("ebs.csi.aws.com"));
    let claim = volume.claim_ref.as_ref().expect("claimRef");
    assert_eq!(
        (claim.namespace.as_str(), claim.name.as_str()),
        ("shop", "data-db-0")
    );
    let affinity = volume.node_affinity.as_ref().expect("node affinity");
    let requirement = &affinity.terms[0].match_expressions[0];
    assert_eq!(requirement.operator, NodeOperator::In);
    assert_eq!(requirement.values, vec!["zone-b"]);
    // An in-tree EBS volume counts as the EBS CSI driver's; NFS as no driver's.
    let K8sObject::PersistentVolume(legacy) = &objects[5] else {
        panic!("expected a volume")
    };
    assert_eq!(legacy.csi_driver.as_deref(), Some("ebs.csi.aws.com"));
    assert_eq!(legacy.phase, VolumePhase::Pending);
    assert_eq!(legacy.node_affinity, None);
    let K8sObject::PersistentVolume(nfs) = &objects[6] else {
        panic!("expected a volume")
    };
    assert_eq!(nfs.csi_driver, None);
    assert_eq!(nfs.phase, VolumePhase::Available);
    assert_eq!(nfs.capacity_storage, 1 << 40);
}

#[test]
fn csinodes_keep_per_driver_limits() {
    let objects = parse(STORAGE);
    let K8sObject::CsiNode(csi_node) = &objects[7] else {
        panic!("expected a CSINode: {:?}", objects[7])
    };
    assert_eq!(csi_node.node_name, "ip-10-0-2-7");
    let ebs = csi_node.driver("ebs.csi.aws.com").expect("EBS driver");
    assert_eq!(ebs.allocatable_count, Some(25));
    assert_eq!(ebs.topology_keys, vec!["topology.kubernetes.io/zone"]);
    // No allocatable: no limit.
    let efs = csi_node.driver("efs.csi.aws.com").expect("EFS driver");
    assert_eq!(efs.allocatable_count, None);
    assert_eq!(
        objects[7].describe(),
        "CSINode ip-10-0-2-7",
        "messages name the kind and the object"
    );
}

#[test]
fn pod_volumes_name_claims_ephemeral_claims_and_csi_drivers() {
    let objects = parse(STORAGE);
    let K8sObject::Pod(pod) = &objects[8] else {
        panic!("expected a pod: {:?}", objects[8])
    };
    let sources: Vec<&VolumeSource> = pod.volumes.iter().map(|v| &v.source).collect();
    assert_eq!(
        sources,
        vec![
            &VolumeSource::PersistentVolumeClaim {
                claim_name: "data-db-0".into()
            },
            &VolumeSource::Ephemeral,
            &VolumeSource::Csi {
                driver: "secrets-store.csi.k8s.io".into()
            },
            &VolumeSource::Csi {
                driver: "ebs.csi.aws.com".into()
            },
            &VolumeSource::Other,
        ]
    );
    assert_eq!(pod.volumes[1].name, "cache");
    assert_eq!(pod.ephemeral_claim_name("cache"), "db-0-cache");
}

#[test]
fn bad_storage_values_name_object_field_and_value() {
    let cases = [
        (
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: c, namespace: ns}\nspec:\n  accessModes: [ReadWriteSometimes]\n",
            "spec.accessModes[0]",
            "PersistentVolumeClaim ns/c",
            "ReadWriteSometimes",
        ),
        (
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: c}\nspec:\n  resources: {requests: {storage: -1Gi}}\n",
            "spec.resources.requests.storage",
            "PersistentVolumeClaim default/c",
            "-1Gi",
        ),
        (
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: c}\nspec: {}\nstatus: {phase: Waiting}\n",
            "status.phase",
            "PersistentVolumeClaim default/c",
            "Waiting",
        ),
        (
            "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: v}\nspec:\n  capacity: {storage: 10Qi}\n",
            "spec.capacity.storage",
            "PersistentVolume v",
            "10Qi",
        ),
        (
            "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: v}\nspec:\n  nodeAffinity:\n    required:\n      nodeSelectorTerms:\n      - matchExpressions: [{key: zone, operator: Near}]\n",
            "spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator",
            "PersistentVolume v",
            "Near",
        ),
        (
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: s}\nprovisioner: p\nvolumeBindingMode: Later\n",
            "volumeBindingMode",
            "StorageClass s",
            "Later",
        ),
        (
            "apiVersion: storage.k8s.io/v1\nkind: CSINode\nmetadata: {name: n}\nspec:\n  drivers:\n  - {name: d, nodeID: x, allocatable: {count: -3}}\n",
            "spec.drivers[0].allocatable.count",
            "CSINode n",
            "-3",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: []\n  volumes:\n  - name: data\n    persistentVolumeClaim: {claimName: \"\"}\n",
            "spec.volumes[0].persistentVolumeClaim.claimName",
            "Pod default/p",
            "",
        ),
    ];
    for (text, field, object, value) in cases {
        let e = parse_err(text);
        assert_eq!(e.field, field, "{e}");
        assert!(
            e.message.contains(object) && e.message.contains(&format!("{value:?}")),
            "{e}"
        );
        assert!(e.line.is_some(), "{e}");
    }
}

#[test]
fn misspelt_storage_fields_are_refused_as_kubectl_validate_strict_does() {
    let e = parse_err(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: s}\nprovisioner: p\nvolumeBindingMod: WaitForFirstConsumer\n",
    );
    assert_eq!(e.field, "volumeBindingMod");
    assert_eq!(e.line, Some(5), "{e}");
    let e = parse_err(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: v}\nspec:\n  claimRef: {namespace: a, nam: b}\n",
    );
    assert_eq!(e.field, "spec.claimRef.nam");
}
