//! ResourceSlices, DeviceClasses, ResourceClaims and ResourceClaimTemplates (`resource.k8s.io/v1`),
//! as `kubectl get -o yaml` prints them, convert into the model the DynamicResources filter reads;
//! bad values and over-limit sizes are refused with an error naming the object, field and value.

use ferroscale_model::{
    AllocationMode, DeviceAttribute, DeviceRequestKind, DeviceScope, Labels, NodeOperator, Quantity,
};
use ferroscale_objects::{K8sObject, ObjectsError, parse_objects_yaml};

const DRA: &str = r#"apiVersion: v1
kind: List
items:
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: gpu-node-1-abcde}
  spec:
    driver: gpu.example.com
    nodeName: gpu-node-1
    pool: {name: gpu-node-1, generation: 3, resourceSliceCount: 1}
    devices:
    - name: gpu-0
      attributes:
        model: {string: A100}
        index: {int: 0}
        driverVersion: {version: 1.2.3-rc.1}
        mig: {bool: false}
        numa.example.com/node: {int: 1}
        pcieRoots: {strings: [pci0, pci1]}
      capacity:
        memory: {value: 80Gi}
    - name: gpu-1
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: fabric}
  spec:
    driver: net.example.com
    nodeSelector:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: rack, operator: In, values: [r1]}
    pool: {name: rack-r1, generation: 0, resourceSliceCount: 2}
    devices: [{name: nic-0}]
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: network-attached}
  spec:
    driver: net.example.com
    allNodes: true
    pool: {name: shared, generation: 1, resourceSliceCount: 1}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: per-device}
  spec:
    driver: net.example.com
    perDeviceNodeSelection: true
    pool: {name: mixed, generation: 1, resourceSliceCount: 1}
    devices:
    - {name: local, nodeName: n1}
    - {name: everywhere, allNodes: true}
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata: {name: gpu.example.com}
  spec:
    selectors:
    - cel: {expression: device.driver == "gpu.example.com"}
    extendedResourceName: example.com/gpu
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata:
    name: train-0-gpu-x7k2p
    namespace: ml
    uid: claim-uid-1
    ownerReferences:
    - {apiVersion: v1, kind: Pod, name: train-0, uid: pod-uid-1, controller: true, blockOwnerDeletion: true}
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: gpu.example.com
          count: 2
          selectors:
          - cel: {expression: "device.capacity['gpu.example.com'].memory.compareTo(quantity('40Gi')) >= 0"}
      - name: nic
        firstAvailable:
        - {name: fast, deviceClassName: nic.example.com, allocationMode: All}
        - {name: slow, deviceClassName: nic.example.com}
      constraints:
      - {requests: [gpus], matchAttribute: numa.example.com/node}
  status:
    allocation:
      devices:
        results:
        - {request: gpus, driver: gpu.example.com, pool: gpu-node-1, device: gpu-0}
        - {request: gpus, driver: gpu.example.com, pool: gpu-node-1, device: gpu-1, adminAccess: true}
      nodeSelector:
        nodeSelectorTerms:
        - matchFields:
          - {key: metadata.name, operator: In, values: [gpu-node-1]}
    reservedFor:
    - {resource: pods, name: train-0, uid: pod-uid-1}
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {name: shared}
  spec:
    devices:
      requests:
      - name: all
        exactly: {deviceClassName: gpu.example.com, allocationMode: All, adminAccess: true}
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaimTemplate
  metadata: {name: one-gpu, namespace: ml}
  spec:
    metadata: {labels: {team: ml}}
    spec:
      devices:
        requests:
        - name: gpu
          exactly: {deviceClassName: gpu.example.com}
"#;

fn parse(text: &str) -> Vec<K8sObject> {
    match parse_objects_yaml(text, "dra.yaml") {
        Ok(parsed) => {
            assert!(
                parsed.warnings.is_empty(),
                "DRA kinds are read, not skipped: {:?}",
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

/// `DRA` with `from` replaced by `to` (which must occur).
fn edited(from: &str, to: &str) -> String {
    assert!(DRA.contains(from), "{from:?} is not in the fixture");
    DRA.replacen(from, to, 1)
}

#[test]
fn node_local_slices_keep_pool_devices_and_qualified_attributes() {
    let objects = parse(DRA);
    let K8sObject::ResourceSlice(slice) = &objects[0] else {
        panic!("expected a ResourceSlice: {:?}", objects[0])
    };
    assert_eq!(slice.name, "gpu-node-1-abcde");
    assert_eq!(slice.driver, "gpu.example.com");
    assert_eq!(slice.pool, "gpu-node-1");
    assert_eq!((slice.pool_generation, slice.pool_slice_count), (3, 1));
    assert_eq!(slice.node_name(), Some("gpu-node-1"));
    assert!(!slice.per_device_node_selection);
    assert_eq!(slice.devices.len(), 2);
    let gpu = &slice.devices[0];
    assert_eq!(gpu.name, "gpu-0");
    // Bare names belong to the driver; qualified ones keep their own domain.
    assert_eq!(
        gpu.attributes.get("gpu.example.com/model"),
        Some(&DeviceAttribute::String("A100".into()))
    );
    assert_eq!(
        gpu.attributes.get("gpu.example.com/index"),
        Some(&DeviceAttribute::Int(0))
    );
    assert_eq!(
        gpu.attributes.get("gpu.example.com/driverVersion"),
        Some(&DeviceAttribute::Version("1.2.3-rc.1".into()))
    );
    assert_eq!(
        gpu.attributes.get("gpu.example.com/mig"),
        Some(&DeviceAttribute::Bool(false))
    );
    assert_eq!(
        gpu.attributes.get("numa.example.com/node"),
        Some(&DeviceAttribute::Int(1))
    );
    // A list-valued attribute is not modelled: the device is kept without it.
    assert!(!gpu.attributes.contains_key("gpu.example.com/pcieRoots"));
    assert_eq!(
        gpu.capacity.get("gpu.example.com/memory"),
        Some(&Quantity::parse("80Gi").unwrap())
    );
    assert_eq!(gpu.scope, None);
    assert!(slice.devices[1].attributes.is_empty());
}

#[test]
fn pool_wide_slices_keep_their_node_selection() {
    let objects = parse(DRA);
    let K8sObject::ResourceSlice(fabric) = &objects[1] else {
        panic!("expected a ResourceSlice")
    };
    let DeviceScope::Selector(selector) = &fabric.scope else {
        panic!("expected a node selector: {:?}", fabric.scope)
    };
    assert_eq!(
        selector.terms[0].match_expressions[0].operator,
        NodeOperator::In
    );
    let rack_r1: Labels = [("rack".to_string(), "r1".to_string())].into();
    assert!(fabric.scope.reaches("any", &rack_r1));
    assert!(!fabric.scope.reaches("any", &Labels::new()));
    assert_eq!(fabric.node_name(), None);

    let K8sObject::ResourceSlice(everywhere) = &objects[2] else {
        panic!("expected a ResourceSlice")
    };
    assert_eq!(everywhere.scope, DeviceScope::AllNodes);
    assert!(everywhere.devices.is_empty());

    let K8sObject::ResourceSlice(per_device) = &objects[3] else {
        panic!("expected a ResourceSlice")
    };
    assert!(per_device.per_device_node_selection);
    assert_eq!(
        per_device.devices[0].scope,
        Some(DeviceScope::Node("n1".into()))
    );
    assert_eq!(per_device.devices[1].scope, Some(DeviceScope::AllNodes));
}

#[test]
fn device_classes_keep_selectors_and_extended_resource() {
    let objects = parse(DRA);
    let K8sObject::DeviceClass(class) = &objects[4] else {
        panic!("expected a DeviceClass: {:?}", objects[4])
    };
    assert_eq!(class.name, "gpu.example.com");
    assert_eq!(
        class.selectors,
        vec![r#"device.driver == "gpu.example.com""#]
    );
    assert_eq!(
        class.extended_resource_name.as_deref(),
        Some("example.com/gpu")
    );
}

#[test]
fn claims_keep_requests_constraints_allocation_reservation_and_owner() {
    let objects = parse(DRA);
    let K8sObject::ResourceClaim(claim) = &objects[5] else {
        panic!("expected a ResourceClaim: {:?}", objects[5])
    };
    assert_eq!(claim.key(), "ml/train-0-gpu-x7k2p");
    assert_eq!(claim.uid, "claim-uid-1");
    assert_eq!(claim.owner_pod_uid.as_deref(), Some("pod-uid-1"));
    assert!(!claim.deleting);
    let DeviceRequestKind::Exactly(gpus) = &claim.spec.requests[0].kind else {
        panic!("expected an exact request")
    };
    assert_eq!(claim.spec.requests[0].name, "gpus");
    assert_eq!(gpus.device_class_name, "gpu.example.com");
    assert_eq!(gpus.allocation_mode, AllocationMode::ExactCount(2));
    assert_eq!(gpus.selectors.len(), 1);
    assert!(!gpus.admin_access);
    let DeviceRequestKind::FirstAvailable(alternatives) = &claim.spec.requests[1].kind else {
        panic!("expected firstAvailable")
    };
    assert_eq!(alternatives[0].name, "fast");
    assert_eq!(alternatives[0].request.allocation_mode, AllocationMode::All);
    // No count and no mode: exactly one device.
    assert_eq!(
        alternatives[1].request.allocation_mode,
        AllocationMode::ExactCount(1)
    );
    let constraint = &claim.spec.constraints[0];
    assert_eq!(constraint.requests, vec!["gpus"]);
    assert_eq!(
        constraint.match_attribute.as_deref(),
        Some("numa.example.com/node")
    );
    let allocation = claim.allocation.as_ref().expect("allocated");
    assert_eq!(allocation.devices.len(), 2);
    assert_eq!(allocation.devices[0].device, "gpu-0");
    assert_eq!(allocation.devices[0].pool, "gpu-node-1");
    assert!(!allocation.devices[0].admin_access);
    assert!(allocation.devices[1].admin_access);
    // A node-local allocation: usable from its node only.
    let selector = allocation.node_selector.as_ref().expect("node selector");
    assert!(selector.matches("gpu-node-1", &Labels::new()));
    assert!(!selector.matches("gpu-node-2", &Labels::new()));
    assert_eq!(claim.reserved_for.len(), 1);
    assert_eq!(claim.reserved_for[0].resource, "pods");
    assert_eq!(claim.reserved_for[0].uid, "pod-uid-1");

    let K8sObject::ResourceClaim(shared) = &objects[6] else {
        panic!("expected a ResourceClaim")
    };
    // No namespace: `default`; no status: pending; no controller: no owner pod.
    assert_eq!(shared.key(), "default/shared");
    assert!(!shared.is_allocated());
    assert_eq!(shared.owner_pod_uid, None);
    let DeviceRequestKind::Exactly(all) = &shared.spec.requests[0].kind else {
        panic!("expected an exact request")
    };
    assert_eq!(all.allocation_mode, AllocationMode::All);
    assert!(all.admin_access);
}

#[test]
fn an_owner_that_is_not_the_controlling_pod_is_not_the_claims_pod() {
    let text = edited(
        "{apiVersion: v1, kind: Pod, name: train-0, uid: pod-uid-1, controller: true, blockOwnerDeletion: true}",
        "{apiVersion: v1, kind: Pod, name: train-0, uid: pod-uid-1}",
    );
    let objects = parse(&text);
    let K8sObject::ResourceClaim(claim) = &objects[5] else {
        panic!("expected a ResourceClaim")
    };
    assert_eq!(claim.owner_pod_uid, None);
}

#[test]
fn claim_templates_keep_the_claim_spec() {
    let objects = parse(DRA);
    let K8sObject::ResourceClaimTemplate(template) = &objects[7] else {
        panic!("expected a ResourceClaimTemplate: {:?}", objects[7])
    };
    assert_eq!(
        (template.namespace.as_str(), template.name.as_str()),
        ("ml", "one-gpu")
    );
    assert_eq!(template.spec.requests.len(), 1);
    assert_eq!(template.spec.requests[0].name, "gpu");
}

#[test]
fn v1beta2_objects_read_like_v1_and_v1beta1_ones_are_refused_by_name() {
    let text = DRA.replace("resource.k8s.io/v1\n", "resource.k8s.io/v1beta2\n");
    assert_eq!(parse(&text).len(), 8);
    let e = parse_err(&edited(
        "- apiVersion: resource.k8s.io/v1\n  kind: DeviceClass",
        "- apiVersion: resource.k8s.io/v1beta1\n  kind: DeviceClass",
    ));
    assert_eq!(e.field, "items[4].apiVersion");
    assert!(e.message.contains("resource.k8s.io/v1beta1"), "{e}");
}

/// Each malformed value is refused, naming the object, the field path and the value.
#[test]
fn malformed_values_are_refused_naming_object_field_and_value() {
    let cases = [
        (
            "memory: {value: 80Gi}",
            "memory: {value: -1Gi}",
            "items[0].spec.devices[0].capacity.memory.value",
            "must not be negative",
        ),
        (
            "memory: {value: 80Gi}",
            "memory: {value: 80Gigs}",
            "items[0].spec.devices[0].capacity.memory.value",
            "80Gigs",
        ),
        (
            "model: {string: A100}",
            "model: {string: A100, int: 3}",
            "items[0].spec.devices[0].attributes.model",
            "exactly one of bool, int, string and version",
        ),
        (
            "driverVersion: {version: 1.2.3-rc.1}",
            "driverVersion: {version: v1.2}",
            "items[0].spec.devices[0].attributes.driverVersion.version",
            "semantic version",
        ),
        (
            "index: {int: 0}",
            "bad-name: {int: 0}",
            "items[0].spec.devices[0].attributes.bad-name",
            "C identifier",
        ),
        (
            "    - name: gpu-1\n",
            "    - name: gpu-0\n",
            "items[0].spec.devices[1].name",
            "unique",
        ),
        (
            "nodeName: gpu-node-1\n",
            "nodeName: gpu-node-1\n    allNodes: true\n",
            "items[0].spec",
            "exactly one of nodeName",
        ),
        (
            "    allNodes: true\n    pool: {name: shared",
            "    pool: {name: shared",
            "items[2].spec",
            "must be set",
        ),
        (
            "resourceSliceCount: 2",
            "resourceSliceCount: 0",
            "items[1].spec.pool.resourceSliceCount",
            "greater than zero",
        ),
        (
            "- {name: local, nodeName: n1}",
            "- {name: local}",
            "items[3].spec.devices[0]",
            "perDeviceNodeSelection",
        ),
        (
            "devices: [{name: nic-0}]",
            "devices: [{name: nic-0, nodeName: n1}]",
            "items[1].spec.devices[0]",
            "perDeviceNodeSelection: true",
        ),
        (
            "count: 2",
            "count: 0",
            "items[5].spec.devices.requests[0].exactly.count",
            "between 1 and 32",
        ),
        (
            "count: 2",
            "count: 33",
            "items[5].spec.devices.requests[0].exactly.count",
            "between 1 and 32",
        ),
        (
            "{name: fast, deviceClassName: nic.example.com, allocationMode: All}",
            "{name: fast, deviceClassName: nic.example.com, allocationMode: Some}",
            "items[5].spec.devices.requests[1].firstAvailable[0].allocationMode",
            "ExactCount or All",
        ),
        (
            "allocationMode: All, adminAccess: true}",
            "allocationMode: All, count: 2, adminAccess: true}",
            "items[6].spec.devices.requests[0].exactly.count",
            "allocationMode All",
        ),
        (
            "{name: slow, deviceClassName: nic.example.com}",
            "{name: fast, deviceClassName: nic.example.com}",
            "items[5].spec.devices.requests[1].firstAvailable[1].name",
            "unique",
        ),
        (
            "      - name: nic\n        firstAvailable:",
            "      - name: nic\n        exactly: {deviceClassName: nic.example.com}\n        firstAvailable:",
            "items[5].spec.devices.requests[1]",
            "exactly one of exactly and firstAvailable",
        ),
        (
            "matchAttribute: numa.example.com/node",
            "matchAttribute: node",
            "items[5].spec.devices.constraints[0].matchAttribute",
            "fully qualified",
        ),
        (
            "{requests: [gpus], matchAttribute",
            "{requests: [gpu], matchAttribute",
            "items[5].spec.devices.constraints[0].requests[0]",
            "requests of the claim",
        ),
        (
            "- cel: {expression: device.driver == \"gpu.example.com\"}",
            "- cel: {expression: \"  \"}",
            "items[4].spec.selectors[0].cel.expression",
            "needs a cel expression",
        ),
        (
            "pool: gpu-node-1, device: gpu-0}",
            "pool: gpu-node-1, device: ''}",
            "items[5].status.allocation.devices.results[0].device",
            "needs a device",
        ),
        (
            "{key: metadata.name, operator: In, values: [gpu-node-1]}",
            "{key: metadata.name, operator: Is, values: [gpu-node-1]}",
            "items[5].status.allocation.nodeSelector.nodeSelectorTerms[0].matchFields[0].operator",
            "Is",
        ),
        (
            "          exactly: {deviceClassName: gpu.example.com}\n",
            "          exactly: {deviceClassName: ''}\n",
            "items[7].spec.spec.devices.requests[0].exactly.deviceClassName",
            "device class",
        ),
    ];
    for (from, to, field, needle) in cases {
        let e = parse_err(&edited(from, to));
        assert_eq!(e.field, field, "{to}: {e}");
        assert!(e.to_string().contains(needle), "{to}: {e}");
        assert!(e.line.is_some(), "{to}: the error points at a line: {e}");
    }
}

#[test]
fn errors_name_the_object() {
    let e = parse_err(&edited("count: 2", "count: -4"));
    assert!(
        e.message.contains("ResourceClaim ml/train-0-gpu-x7k2p"),
        "{e}"
    );
    assert!(e.message.contains("\"-4\""), "{e}");
    let e = parse_err(&edited("memory: {value: 80Gi}", "memory: {value: -1}"));
    assert!(e.message.contains("ResourceSlice gpu-node-1-abcde"), "{e}");
}

#[test]
fn a_misspelt_field_is_refused() {
    let e = parse_err(&edited(
        "deviceClassName: gpu.example.com\n          count",
        "deviceClass: gpu.example.com\n          count",
    ));
    assert!(e.to_string().contains("deviceClass"), "{e}");
}

fn slice_with_devices(count: usize) -> String {
    let mut text = String::from(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: big}\nspec:\n  driver: d.example.com\n  nodeName: n\n  pool: {name: p, generation: 1, resourceSliceCount: 1}\n  devices:\n",
    );
    for i in 0..count {
        text.push_str(&format!("  - name: dev-{i}\n"));
    }
    text
}

fn claim_with_requests(count: usize) -> String {
    let mut text = String::from(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: big}\nspec:\n  devices:\n    requests:\n",
    );
    for i in 0..count {
        text.push_str(&format!(
            "    - {{name: r{i}, exactly: {{deviceClassName: c}}}}\n"
        ));
    }
    text
}

fn class_with_selectors(count: usize, expression_length: usize) -> String {
    let expression = format!(
        "\"{}\" != \"\"",
        "x".repeat(expression_length.saturating_sub(8))
    );
    let mut text = String::from(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: big}\nspec:\n  selectors:\n",
    );
    for _ in 0..count {
        text.push_str(&format!("  - cel: {{expression: '{expression}'}}\n"));
    }
    text
}

#[test]
fn sizes_up_to_the_api_limits_are_read_and_larger_ones_refused() {
    assert_eq!(parse(&slice_with_devices(128)).len(), 1);
    let e = parse_err(&slice_with_devices(129));
    assert_eq!(e.field, "spec.devices");
    assert!(e.to_string().contains("at most 128"), "{e}");

    assert_eq!(parse(&claim_with_requests(32)).len(), 1);
    let e = parse_err(&claim_with_requests(33));
    assert_eq!(e.field, "spec.devices.requests");
    assert!(e.to_string().contains("at most 32"), "{e}");

    assert_eq!(parse(&class_with_selectors(32, 100)).len(), 1);
    let e = parse_err(&class_with_selectors(33, 100));
    assert_eq!(e.field, "spec.selectors");

    assert_eq!(parse(&class_with_selectors(1, 10 * 1024)).len(), 1);
    let e = parse_err(&class_with_selectors(1, 10 * 1024 + 1));
    assert_eq!(e.field, "spec.selectors[0].cel.expression");
    assert!(e.to_string().contains("at most 10240"), "{e}");
}

#[test]
fn more_than_32_attributes_and_capacities_on_a_device_are_refused() {
    let mut text =
        slice_with_devices(0).replace("  devices:\n", "  devices:\n  - name: d\n    attributes:\n");
    for i in 0..20 {
        text.push_str(&format!("      a{i}: {{int: {i}}}\n"));
    }
    text.push_str("    capacity:\n");
    for i in 0..12 {
        text.push_str(&format!("      c{i}: {{value: '1'}}\n"));
    }
    assert_eq!(parse(&text).len(), 1);
    text.push_str("      c12: {value: '1'}\n");
    let e = parse_err(&text);
    assert_eq!(e.field, "spec.devices[0]");
    assert!(e.to_string().contains("at most 32"), "{e}");
}
