//! `resourceSliceBytes` entries (docs/externalgrpc.md GRPC-36): the plain protobuf encoding of
//! `k8s.io.api.resource.v1.ResourceSlice` decodes through the same conversion as a slice read from
//! the API server, and what the encoder writes decodes back to the same model slice.

use std::collections::BTreeMap;

use ferroscale_externalgrpc_proto::{CodecError, decode_resource_slice, encode_resource_slice};
use ferroscale_model::{
    Device, DeviceAttribute, DeviceScope, NodeOperator, NodeRequirement, NodeSelector,
    NodeSelectorTerm, Quantity, ResourceSlice,
};
use k8s_pb::api::resource::v1 as pb;
use k8s_pb::apimachinery::pkg::api::resource::Quantity as PbQuantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use prost::Message;

fn s(text: &str) -> Option<String> {
    Some(text.to_string())
}

fn quantity(text: &str) -> Quantity {
    Quantity::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

fn rich_slice() -> ResourceSlice {
    ResourceSlice {
        name: "node-1-gpu".into(),
        driver: "gpu.example.com".into(),
        pool: "node-1".into(),
        pool_generation: 4,
        pool_slice_count: 2,
        scope: DeviceScope::Node("node-1".into()),
        per_device_node_selection: false,
        devices: vec![Device {
            name: "gpu-0".into(),
            attributes: BTreeMap::from([
                (
                    "gpu.example.com/model".into(),
                    DeviceAttribute::String("A100".into()),
                ),
                ("gpu.example.com/index".into(), DeviceAttribute::Int(-3)),
                ("gpu.example.com/mig".into(), DeviceAttribute::Bool(true)),
                (
                    "gpu.example.com/driverVersion".into(),
                    DeviceAttribute::Version("1.2.3".into()),
                ),
                ("numa.example.com/node".into(), DeviceAttribute::Int(1)),
            ]),
            capacity: BTreeMap::from([
                ("gpu.example.com/memory".into(), quantity("80Gi")),
                ("gpu.example.com/cores".into(), quantity("1500m")),
            ]),
            scope: None,
        }],
    }
}

#[test]
fn a_slice_round_trips_through_its_bytes() {
    let slice = rich_slice();
    assert_eq!(
        decode_resource_slice(&encode_resource_slice(&slice)),
        Ok(slice)
    );

    let selector = NodeSelector {
        terms: vec![NodeSelectorTerm {
            match_expressions: vec![NodeRequirement {
                key: "rack".into(),
                operator: NodeOperator::In,
                values: vec!["r1".into()],
            }],
            match_fields: Vec::new(),
        }],
    };
    let mut per_device = rich_slice();
    per_device.scope = DeviceScope::AllNodes;
    per_device.per_device_node_selection = true;
    per_device.devices[0].scope = Some(DeviceScope::Selector(selector.clone()));
    assert_eq!(
        decode_resource_slice(&encode_resource_slice(&per_device)),
        Ok(per_device)
    );
    for scope in [DeviceScope::Selector(selector), DeviceScope::AllNodes] {
        let mut pool_wide = rich_slice();
        pool_wide.scope = scope;
        assert_eq!(
            decode_resource_slice(&encode_resource_slice(&pool_wide)),
            Ok(pool_wide)
        );
    }
}

/// What Go writes: bare attribute names, every string present, an unused `bool` false.
fn go_encoded_slice() -> pb::ResourceSlice {
    let attribute = |string: Option<String>, int: Option<i64>| pb::DeviceAttribute {
        string,
        int,
        ..pb::DeviceAttribute::default()
    };
    pb::ResourceSlice {
        metadata: Some(pb_meta::ObjectMeta {
            name: s("node-1-gpu"),
            namespace: s(""),
            uid: s(""),
            ..pb_meta::ObjectMeta::default()
        }),
        spec: Some(pb::ResourceSliceSpec {
            driver: s("gpu.example.com"),
            pool: Some(pb::ResourcePool {
                name: s("node-1"),
                generation: Some(0),
                resource_slice_count: Some(1),
            }),
            node_name: s("node-1"),
            all_nodes: Some(false),
            per_device_node_selection: Some(false),
            devices: vec![pb::Device {
                name: s("gpu-0"),
                attributes: BTreeMap::from([
                    ("model".to_string(), attribute(s("A100"), None)),
                    ("index".to_string(), attribute(None, Some(0))),
                ]),
                capacity: BTreeMap::from([(
                    "memory".to_string(),
                    pb::DeviceCapacity {
                        value: Some(PbQuantity { string: s("80Gi") }),
                        request_policy: None,
                    },
                )]),
                node_name: s(""),
                ..pb::Device::default()
            }],
            ..pb::ResourceSliceSpec::default()
        }),
    }
}

#[test]
fn a_go_encoded_slice_decodes_with_names_qualified_by_the_driver() {
    let slice = decode_resource_slice(&go_encoded_slice().encode_to_vec())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(slice.node_name(), Some("node-1"));
    assert_eq!((slice.pool.as_str(), slice.pool_slice_count), ("node-1", 1));
    let device = &slice.devices[0];
    assert_eq!(
        device.attributes.get("gpu.example.com/model"),
        Some(&DeviceAttribute::String("A100".into()))
    );
    assert_eq!(
        device.attributes.get("gpu.example.com/index"),
        Some(&DeviceAttribute::Int(0))
    );
    assert_eq!(
        device.capacity.get("gpu.example.com/memory"),
        Some(&quantity("80Gi"))
    );
}

#[test]
fn malformed_slice_bytes_name_the_message_the_object_and_the_field() {
    match decode_resource_slice(&[0x0a, 0xff]) {
        Err(error @ CodecError::Malformed { .. }) => {
            let text = error.to_string();
            assert!(
                text.contains("k8s.io.api.resource.v1.ResourceSlice"),
                "{text}"
            );
        }
        other => panic!("expected Malformed: {other:?}"),
    }
    assert!(matches!(
        decode_resource_slice(&[]),
        Err(CodecError::Empty { .. })
    ));
    let mut negative = go_encoded_slice();
    if let Some(spec) = negative.spec.as_mut() {
        spec.devices[0].capacity.insert(
            "memory".to_string(),
            pb::DeviceCapacity {
                value: Some(PbQuantity { string: s("-1") }),
                request_policy: None,
            },
        );
    }
    match decode_resource_slice(&negative.encode_to_vec()) {
        Err(CodecError::Invalid(error)) => {
            assert_eq!(error.object, "ResourceSlice node-1-gpu");
            assert_eq!(error.field, "spec.devices[0].capacity.memory.value");
            assert_eq!(error.value, "-1");
        }
        other => panic!("expected Invalid: {other:?}"),
    }
    let mut two_scopes = go_encoded_slice();
    if let Some(spec) = two_scopes.spec.as_mut() {
        spec.all_nodes = Some(true);
    }
    assert!(matches!(
        decode_resource_slice(&two_scopes.encode_to_vec()),
        Err(CodecError::Invalid(_))
    ));
}
