//! The GPU of a workload node as this provider describes it (docs/clusterapi.md CAPI-58): the
//! `cluster-api/accelerator` label gives the type, allocatable of a known GPU resource gives the
//! resource name.

use ferroscale_core::cloud::GpuConfig;
use ferroscale_model::Node;
use ferroscale_model::resources::NVIDIA_GPU;

use crate::keys::GPU_LABEL;

/// Device-plugin resources recognised as GPUs, in the order they are looked for.
pub const GPU_RESOURCES: [&str; 5] = [
    NVIDIA_GPU,
    "habana.ai/gaudi",
    "gpu.intel.com/xe",
    "amd.com/gpu",
    "microsoft.com/directx",
];

/// The node's GPU: present when it carries the GPU label or allocatable of a known GPU resource.
pub fn node_gpu_config(node: &Node) -> Option<GpuConfig> {
    let label = node.labels.get(GPU_LABEL);
    let resource = GPU_RESOURCES
        .into_iter()
        .find(|r| node.allocatable.get(r) > 0);
    if label.is_none() && resource.is_none() {
        return None;
    }
    Some(GpuConfig {
        label: GPU_LABEL.to_string(),
        gpu_type: label.cloned().unwrap_or_default(),
        resource_name: resource.unwrap_or(NVIDIA_GPU).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::Resources;

    #[test]
    fn gpu_from_label_or_known_allocatable() {
        let mut plain = Node::new("n", Resources::new(1000, 1 << 30));
        assert_eq!(node_gpu_config(&plain), None);

        plain
            .labels
            .insert(GPU_LABEL.to_string(), "a100".to_string());
        assert_eq!(
            node_gpu_config(&plain),
            Some(GpuConfig {
                label: GPU_LABEL.to_string(),
                gpu_type: "a100".to_string(),
                resource_name: NVIDIA_GPU.to_string(),
            })
        );

        let mut amd = Node::new("m", Resources::new(1000, 1 << 30));
        amd.allocatable.set("amd.com/gpu", 2);
        let config = node_gpu_config(&amd).expect("a GPU");
        assert_eq!(config.resource_name, "amd.com/gpu");
        assert_eq!(config.gpu_type, "");
    }
}
