//! The externalgrpc wire contract (docs/externalgrpc.md): the protobuf messages, the gRPC
//! client and server stubs, and the Kubernetes Node and Pod bytes those messages carry. Both the
//! externalgrpc provider (ferroscale as client) and the provider SDK (ferroscale as server) build
//! on this crate; it performs no I/O itself.
//!
//! - [`v1`]: the generated messages, [`v1::cloud_provider_client::CloudProviderClient`] and
//!   [`v1::cloud_provider_server::CloudProviderServer`] with its
//!   [`v1::cloud_provider_server::CloudProvider`] trait. Every trait method has a default body that
//!   answers status 12 UNIMPLEMENTED, the answer that tells an upstream client an optional method
//!   (pricing, templates, per-group options) is not offered. The stubs are generated at build time
//!   from `proto/externalgrpc.proto` by the pure-Rust `protox` compiler, so building needs no
//!   `protoc`. The client and server are tower services over any transport: the crates that dial
//!   or listen enable tonic's transport features.
//! - [`decode_node`], [`encode_node`], [`decode_pod`], [`encode_pod`]: `nodeBytes` and `pod_bytes`,
//!   the plain protobuf encodings of `k8s.io.api.core.v1.Node` and `Pod` (docs/externalgrpc.md
//!   GRPC-11).
//! - [`decode_resource_slice`], [`encode_resource_slice`]: the entries of `resourceSliceBytes`, the
//!   plain protobuf encodings of `k8s.io.api.resource.v1.ResourceSlice` (docs/externalgrpc.md
//!   GRPC-36).
//! - Conveniences on generated messages: "not autoscaled" answers and the GPU type set
//!   ([`v1::NodeGroupForNodeResponse::not_autoscaled`],
//!   [`v1::GetAvailableGpuTypesResponse::type_names`], ...), and the fallbacks to the fields of
//!   peers older than upstream 1.35 (`*_or_legacy`, `with_legacy_fields`, docs/externalgrpc.md
//!   GRPC-34).
//!
//! # How the Kubernetes bytes are read
//!
//! The Kubernetes protobuf types come from `k8s-pb` (generated from the upstream `.proto` files by
//! the kube-rs project) rather than from a hand-written subset: it decodes every field a Go peer may
//! write, so nothing is skipped by accident. Decoded messages are copied into k8s-openapi objects
//! and converted by `ferroscale-objects`, the same conversion the API watch caches and YAML
//! scenarios use, so a node or pod means the same thing whichever way it arrived and errors name
//! the object, the field and the bad value the same way. Copying only the fields that conversion
//! reads is cheaper and simpler than converting k8s-pb messages to the model a second time.
//!
//! # Wire notes
//!
//! - A map with an empty message value (an empty `Any` in `gpuTypes`) is written by prost without
//!   the value (`0a 11 0a 0f <name>`), by Go with it (`… 12 00`); both decode to the same map.
//! - Negative `int32` values (`delta` of `NodeGroupDecreaseTargetSize`) are 10-byte varints.

mod kubernetes_bytes;
mod messages;
mod wire_history;

pub use kubernetes_bytes::{
    CodecError, decode_node, decode_pod, decode_resource_slice, encode_node, encode_pod,
    encode_resource_slice,
};

/// Generated messages, client and server of `clusterautoscaler.cloudprovider.v1.externalgrpc`.
pub mod v1 {
    tonic::include_proto!("clusterautoscaler.cloudprovider.v1.externalgrpc");
}

/// The encoded `FileDescriptorSet` of the schema (with its imports), for a gRPC reflection service.
/// The schema file is named `cloudprovider/externalgrpc/protos/externalgrpc.proto`, as upstream
/// registers it.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/externalgrpc_descriptor.bin"));
