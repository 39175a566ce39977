//! Whatever the input, parsing returns an error or objects; it never panics.

use ferroscale_objects::parse_objects_yaml;
use proptest::prelude::*;

const SEED: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {a: b}}\nspec:\n  containers:\n  - name: c\n    ports: [{containerPort: 80, hostPort: 80}]\n    resources: {requests: {cpu: 100m, memory: 1Gi}}\n  tolerations: [{key: k, operator: Exists}]\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {taints: [{key: a, effect: NoSchedule}]}\nstatus: {capacity: {cpu: '4'}}\n";

const STORAGE_SEED: &str = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: c, annotations: {volume.kubernetes.io/selected-node: n}}\nspec: {accessModes: [ReadWriteOnce], storageClassName: s, volumeName: v, resources: {requests: {storage: 1Gi}}}\nstatus: {phase: Bound}\n---\napiVersion: v1\nkind: PersistentVolume\nmetadata: {name: v}\nspec:\n  capacity: {storage: 1Gi}\n  csi: {driver: d, volumeHandle: h}\n  nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: z, operator: In, values: [a]}]}]}}\n---\napiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: s}\nprovisioner: p\nvolumeBindingMode: WaitForFirstConsumer\nallowedTopologies: [{matchLabelExpressions: [{key: z, values: [a]}]}]\n---\napiVersion: storage.k8s.io/v1\nkind: CSINode\nmetadata: {name: n}\nspec: {drivers: [{name: d, nodeID: x, allocatable: {count: 3}}]}\n";

const DRA_SEED: &str = "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\nspec:\n  driver: d.example.com\n  nodeName: n\n  pool: {name: p, generation: 1, resourceSliceCount: 1}\n  devices: [{name: g, attributes: {model: {string: a}, v: {version: 1.0.0}}, capacity: {mem: {value: 1Gi}}}]\n---\napiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: c}\nspec: {selectors: [{cel: {expression: 'device.driver == \"d\"'}}]}\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: r, ownerReferences: [{apiVersion: v1, kind: Pod, name: p, uid: u, controller: true}]}\nspec: {devices: {requests: [{name: a, exactly: {deviceClassName: c, count: 2}}, {name: b, firstAvailable: [{name: x, deviceClassName: c, allocationMode: All}]}], constraints: [{matchAttribute: d.example.com/model}]}}\nstatus: {allocation: {devices: {results: [{request: a, driver: d, pool: p, device: g}]}, nodeSelector: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n]}]}]}}, reservedFor: [{resource: pods, name: p, uid: u}]}\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\nspec: {spec: {devices: {requests: [{name: a, exactly: {deviceClassName: c}}]}}}\n";

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
        let _ = parse_objects_yaml(&text, "fuzz");
    }

    #[test]
    fn mutated_objects_never_panic(position in 0usize..SEED.len(), replacement in "[-:{}\\[\\],'\" a-z0-9\n]{0,6}", cut in 0usize..40) {
        let mut text = SEED.to_string();
        let start = (0..=position).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        let end = (start + cut).min(text.len());
        let end = (end..=text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
        text.replace_range(start..end, &replacement);
        let _ = parse_objects_yaml(&text, "fuzz");
    }

    #[test]
    fn mutated_storage_objects_never_panic(position in 0usize..STORAGE_SEED.len(), replacement in "[-:{}\\[\\],'\" a-z0-9\n]{0,6}", cut in 0usize..40) {
        let mut text = STORAGE_SEED.to_string();
        let start = (0..=position).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        let end = (start + cut).min(text.len());
        let end = (end..=text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
        text.replace_range(start..end, &replacement);
        let _ = parse_objects_yaml(&text, "fuzz");
    }

    #[test]
    fn mutated_dra_objects_never_panic(position in 0usize..DRA_SEED.len(), replacement in "[-:{}\\[\\],'\" a-z0-9\n]{0,6}", cut in 0usize..40) {
        let mut text = DRA_SEED.to_string();
        let start = (0..=position).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        let end = (start + cut).min(text.len());
        let end = (end..=text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
        text.replace_range(start..end, &replacement);
        let _ = parse_objects_yaml(&text, "fuzz");
    }
}

/// The DRA seed is valid as written, so its mutations explore the DRA conversions.
#[test]
fn the_dra_seed_converts() {
    let parsed = parse_objects_yaml(DRA_SEED, "seed").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parsed.objects.len(), 4);
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
}

/// The storage seed is valid as written, so its mutations explore the storage conversions.
#[test]
fn the_storage_seed_converts() {
    let parsed = parse_objects_yaml(STORAGE_SEED, "seed").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parsed.objects.len(), 4);
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
}
