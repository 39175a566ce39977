//! `resourceSliceBytes` of a template answer: the node-local devices a new node of the group would
//! publish, each as the plain protobuf `k8s.io.api.resource.v1.ResourceSlice`.
//!
//! Decoding copies the fields the DRA conversion of `ferroscale-objects` reads into a k8s-openapi
//! object and converts it there, so a slice sent by a provider is checked exactly like one read
//! from the API server (node selection, attribute values, quantities, size limits). Encoding
//! writes what the model keeps; attribute and capacity names are already fully qualified, which
//! decodes back to the same names.

use std::collections::BTreeMap;

use ferroscale_model::{Device, DeviceAttribute, DeviceScope, Labels, ResourceSlice};
use ferroscale_objects::resource_slice_from_k8s;
use k8s_openapi::api::resource::v1 as resource;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_pb::api::resource::v1 as pb;
use k8s_pb::apimachinery::pkg::api::resource::Quantity as PbQuantity;

use super::meta::{
    MetadataFields, describe, object_meta_from_pb, object_meta_to_pb, present, text,
};
use super::pod::{node_selector_to_k8s, node_selector_to_pb};
use super::{CodecError, decode_message};

/// Decodes one entry of `resourceSliceBytes` into a model slice. Fields the model has no use for
/// (taints, counters, binding conditions) are skipped; a value the model refuses is an error
/// naming the slice, the field and the value.
pub fn decode_resource_slice(bytes: &[u8]) -> Result<ResourceSlice, CodecError> {
    let slice: pb::ResourceSlice = decode_message("ResourceSlice", bytes)?;
    let slice = resource_slice_to_k8s(&slice)?;
    Ok(resource_slice_from_k8s(&slice)?)
}

/// Encodes a model slice as one entry of `resourceSliceBytes`, readable by Go's
/// `ResourceSlice.Unmarshal`.
pub fn encode_resource_slice(slice: &ResourceSlice) -> Vec<u8> {
    prost::Message::encode_to_vec(&resource_slice_to_pb(slice))
}

fn resource_slice_to_k8s(slice: &pb::ResourceSlice) -> Result<resource::ResourceSlice, CodecError> {
    let object = describe("ResourceSlice", slice.metadata.as_ref());
    let metadata = object_meta_from_pb(&object, slice.metadata.as_ref())?;
    let spec = slice.spec.clone().unwrap_or_default();
    let pool = spec.pool.unwrap_or_default();
    Ok(resource::ResourceSlice {
        metadata,
        spec: resource::ResourceSliceSpec {
            driver: text(&spec.driver),
            pool: resource::ResourcePool {
                name: text(&pool.name),
                generation: pool.generation.unwrap_or(0),
                resource_slice_count: pool.resource_slice_count.unwrap_or(0),
            },
            node_name: present(&spec.node_name),
            node_selector: spec.node_selector.as_ref().map(node_selector_to_k8s),
            all_nodes: spec.all_nodes.filter(|all| *all),
            per_device_node_selection: spec.per_device_node_selection.filter(|per| *per),
            devices: (!spec.devices.is_empty())
                .then(|| spec.devices.iter().map(device_to_k8s).collect()),
            ..resource::ResourceSliceSpec::default()
        },
    })
}

fn device_to_k8s(device: &pb::Device) -> resource::Device {
    let attributes: BTreeMap<String, resource::DeviceAttribute> = device
        .attributes
        .iter()
        .map(|(name, value)| {
            let attribute = resource::DeviceAttribute {
                bool: value.bool,
                int: value.int,
                string: value.string.clone(),
                version: value.version.clone(),
                ..resource::DeviceAttribute::default()
            };
            (name.clone(), attribute)
        })
        .collect();
    let capacity: BTreeMap<String, resource::DeviceCapacity> = device
        .capacity
        .iter()
        .map(|(name, capacity)| {
            // A quantity message without its string is zero, as Go's decoder reads it.
            let value = capacity
                .value
                .as_ref()
                .and_then(|q| q.string.clone())
                .unwrap_or_else(|| "0".to_string());
            let capacity = resource::DeviceCapacity {
                value: K8sQuantity(value),
                request_policy: None,
            };
            (name.clone(), capacity)
        })
        .collect();
    resource::Device {
        name: text(&device.name),
        attributes: (!attributes.is_empty()).then_some(attributes),
        capacity: (!capacity.is_empty()).then_some(capacity),
        node_name: present(&device.node_name),
        node_selector: device.node_selector.as_ref().map(node_selector_to_k8s),
        all_nodes: device.all_nodes.filter(|all| *all),
        ..resource::Device::default()
    }
}

fn resource_slice_to_pb(slice: &ResourceSlice) -> pb::ResourceSlice {
    let no_labels = Labels::new();
    let metadata = object_meta_to_pb(MetadataFields {
        name: &slice.name,
        namespace: None,
        uid: "",
        labels: &no_labels,
        annotations: &no_labels,
        owner_references: &[],
        creation_time: Default::default(),
        deletion_time: None,
    });
    let mut spec = pb::ResourceSliceSpec {
        driver: Some(slice.driver.clone()),
        pool: Some(pb::ResourcePool {
            name: Some(slice.pool.clone()),
            generation: Some(slice.pool_generation),
            resource_slice_count: Some(slice.pool_slice_count),
        }),
        devices: slice.devices.iter().map(device_to_pb).collect(),
        ..pb::ResourceSliceSpec::default()
    };
    if slice.per_device_node_selection {
        spec.per_device_node_selection = Some(true);
    } else {
        let (node_name, node_selector, all_nodes) = scope_to_pb(&slice.scope);
        spec.node_name = node_name;
        spec.node_selector = node_selector;
        spec.all_nodes = all_nodes;
    }
    pb::ResourceSlice {
        metadata: Some(metadata),
        spec: Some(spec),
    }
}

type ScopeFields = (
    Option<String>,
    Option<k8s_pb::api::core::v1::NodeSelector>,
    Option<bool>,
);

fn scope_to_pb(scope: &DeviceScope) -> ScopeFields {
    match scope {
        DeviceScope::Node(name) => (Some(name.clone()), None, None),
        DeviceScope::Selector(selector) => (None, Some(node_selector_to_pb(selector)), None),
        DeviceScope::AllNodes => (None, None, Some(true)),
    }
}

fn device_to_pb(device: &Device) -> pb::Device {
    let attributes = device
        .attributes
        .iter()
        .map(|(name, value)| {
            let mut attribute = pb::DeviceAttribute::default();
            match value {
                DeviceAttribute::Int(i) => attribute.int = Some(*i),
                DeviceAttribute::Bool(b) => attribute.bool = Some(*b),
                DeviceAttribute::String(s) => attribute.string = Some(s.clone()),
                DeviceAttribute::Version(v) => attribute.version = Some(v.clone()),
            }
            (name.clone(), attribute)
        })
        .collect();
    let capacity = device
        .capacity
        .iter()
        .map(|(name, quantity)| {
            let capacity = pb::DeviceCapacity {
                value: Some(PbQuantity {
                    string: Some(quantity.to_string()),
                }),
                request_policy: None,
            };
            (name.clone(), capacity)
        })
        .collect();
    let (node_name, node_selector, all_nodes) = device
        .scope
        .as_ref()
        .map(scope_to_pb)
        .unwrap_or((None, None, None));
    pb::Device {
        name: Some(device.name.clone()),
        attributes,
        capacity,
        node_name,
        node_selector,
        all_nodes,
        ..pb::Device::default()
    }
}
