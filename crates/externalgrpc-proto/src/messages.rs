//! Conveniences on generated messages whose meaning the schema alone does not tell: the node view
//! a client sends (docs/externalgrpc.md GRPC-14, GRPC-31), "not autoscaled" answers (GRPC-06,
//! GRPC-19) and the GPU type set in disguise (GRPC-08, GRPC-27).

use ferroscale_model::Node;

use crate::v1::{
    ExternalGrpcNode, GetAvailableGpuTypesResponse, NodeGroup, NodeGroupForNodeResponse,
};

impl ExternalGrpcNode {
    /// What a client sends about a node: name, provider id, labels and annotations, nothing else.
    pub fn from_node(node: &Node) -> ExternalGrpcNode {
        ExternalGrpcNode {
            provider_id: node.provider_id.clone(),
            name: node.name.clone(),
            labels: (&node.labels).into(),
            annotations: (&node.annotations).into(),
        }
    }
}

impl NodeGroupForNodeResponse {
    /// The answer for a node outside every group: a present, empty group (bytes `0a 00`), as the
    /// upstream server sends it. Never an error.
    pub fn not_autoscaled() -> NodeGroupForNodeResponse {
        NodeGroupForNodeResponse {
            node_group: Some(NodeGroup::default()),
        }
    }

    /// The owning group, or `None` when the node is not autoscaled (group absent or id `""`).
    pub fn owning_group(&self) -> Option<&NodeGroup> {
        self.node_group
            .as_ref()
            .filter(|group| !group.id.is_empty())
    }
}

impl GetAvailableGpuTypesResponse {
    /// A response naming these GPU types. Values are empty `Any` messages; upstream clients never
    /// read them.
    pub fn from_type_names<S: Into<String>>(
        names: impl IntoIterator<Item = S>,
    ) -> GetAvailableGpuTypesResponse {
        GetAvailableGpuTypesResponse {
            gpu_types: names
                .into_iter()
                .map(|name| (name.into(), prost_types::Any::default()))
                .collect(),
        }
    }

    /// The GPU type names, sorted: the map keys. Values are ignored, whatever they hold.
    pub fn type_names(&self) -> impl Iterator<Item = &str> {
        self.gpu_types.keys().map(String::as_str)
    }
}
