//! Which accelerators a node carries, in the words upstream's metrics use for them: the
//! `gpu_resource_name`, `gpu_name` and `dra_drivers` labels of `scaled_up_nodes_total`,
//! `failed_scale_ups_total`, `scaled_down_nodes_total` and their GPU-only counterparts
//! (docs/behaviour.md OBS-123). Pure: the provider's answers are passed in.
//!
//! A node without a GPU configuration has no GPU labels (both empty). Otherwise the resource is the
//! one the provider names, and the GPU name says how far the node's GPUs can be trusted:
//! `generic` when the node has GPUs in its capacity but no GPU type, the type itself when the
//! provider lists it among its available types, `not-listed` when it does not, `missing-gpu` when
//! the node has the GPU label but no GPU in its capacity while its group's template has some (the
//! device plugin has not registered them yet), and `unexpected-label` when neither has any.

use ferroscale_model::Node;
use ferroscale_model::dra::{DeviceScope, ResourceSlice};

use crate::cloud::GpuConfig;

/// `gpu_name` of a node with GPUs in its capacity but no GPU type.
pub const GENERIC_GPU: &str = "generic";
/// `gpu_name` of a node labelled as a GPU node whose GPUs have not appeared in its capacity,
/// while its group's template has some.
pub const MISSING_GPU: &str = "missing-gpu";
/// `gpu_name` of a node labelled as a GPU node with no GPU, nor in its group's template.
pub const UNEXPECTED_LABEL_GPU: &str = "unexpected-label";
/// `gpu_name` of a GPU type the provider does not list among its available types.
pub const NOT_LISTED_GPU: &str = "not-listed";
/// The `dra_drivers` name of every driver upstream does not name one by one, so that the label's
/// values stay few.
pub const CUSTOM_DRA_DRIVER: &str = "custom.driver";
/// The DRA drivers `dra_drivers` names as they are.
const REPORTED_DRA_DRIVERS: [&str; 4] = [
    "compute-domain.nvidia.com",
    "dra.net",
    "gpu.nvidia.com",
    "tpu.google.com",
];

/// The accelerator labels of one node (or of a group's template node).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AcceleratorLabels {
    /// The extended resource the GPUs are counted in (`nvidia.com/gpu`); empty without GPU.
    pub gpu_resource_name: String,
    /// See the module documentation; empty without GPU.
    pub gpu_name: String,
    /// The drivers of the node's own ResourceSlices, sorted, unique, comma-separated, each
    /// driver upstream does not name as `custom.driver`; empty without any.
    pub dra_drivers: String,
}

impl AcceleratorLabels {
    /// The node's labels: `gpu` is the provider's answer for the node
    /// (`CloudProvider::node_gpu_config`), `available_gpu_types` its list of known types,
    /// `group_template` the template node of the node's group when there is one, and `slices`
    /// the ResourceSlices to take node-local drivers from (others are ignored).
    pub fn of(
        node: &Node,
        gpu: Option<&GpuConfig>,
        available_gpu_types: &[String],
        group_template: Option<&Node>,
        slices: &[&ResourceSlice],
    ) -> AcceleratorLabels {
        let (gpu_resource_name, gpu_name) = match gpu {
            None => (String::new(), String::new()),
            Some(gpu) => (
                gpu.resource_name.clone(),
                gpu_name(node, gpu, available_gpu_types, group_template).to_string(),
            ),
        };
        AcceleratorLabels {
            gpu_resource_name,
            gpu_name,
            dra_drivers: dra_drivers(node, slices),
        }
    }

    /// Whether upstream's GPU-only counters count this node.
    pub fn has_gpu(&self) -> bool {
        !self.gpu_name.is_empty()
    }
}

fn gpu_name<'a>(
    node: &Node,
    gpu: &'a GpuConfig,
    available_gpu_types: &[String],
    group_template: Option<&Node>,
) -> &'a str {
    // The model keeps no zero amounts, so "in the capacity" means "more than none".
    let has_gpus = |node: &Node| node.capacity.get(&gpu.resource_name) > 0;
    if has_gpus(node) {
        if gpu.gpu_type.is_empty() {
            return GENERIC_GPU;
        }
        return if available_gpu_types.contains(&gpu.gpu_type) {
            &gpu.gpu_type
        } else {
            NOT_LISTED_GPU
        };
    }
    if group_template.is_some_and(has_gpus) {
        MISSING_GPU
    } else {
        UNEXPECTED_LABEL_GPU
    }
}

/// The `dra_drivers` label: the drivers of the slices local to `node`.
fn dra_drivers(node: &Node, slices: &[&ResourceSlice]) -> String {
    let mut drivers: Vec<&str> = slices
        .iter()
        .filter(|slice| matches!(&slice.scope, DeviceScope::Node(name) if *name == node.name))
        .map(|slice| {
            if REPORTED_DRA_DRIVERS.contains(&slice.driver.as_str()) {
                slice.driver.as_str()
            } else {
                CUSTOM_DRA_DRIVER
            }
        })
        .collect();
    drivers.sort_unstable();
    drivers.dedup();
    drivers.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::Resources;
    use ferroscale_model::resources::NVIDIA_GPU;

    fn gpu(gpu_type: &str) -> GpuConfig {
        GpuConfig {
            label: "accelerator".into(),
            gpu_type: gpu_type.into(),
            resource_name: NVIDIA_GPU.into(),
        }
    }

    fn node(name: &str, gpus: i64) -> Node {
        let mut node = Node::new(name, Resources::new(4000, 1 << 30));
        node.capacity.set(NVIDIA_GPU, gpus);
        node
    }

    fn slice(node: &str, driver: &str) -> ResourceSlice {
        ResourceSlice {
            name: format!("{node}-{driver}"),
            driver: driver.into(),
            scope: DeviceScope::Node(node.into()),
            ..ResourceSlice::default()
        }
    }

    #[test]
    fn a_node_without_gpu_configuration_has_no_gpu_labels() {
        let labels = AcceleratorLabels::of(&node("n", 0), None, &[], None, &[]);
        assert_eq!(labels, AcceleratorLabels::default());
        assert!(!labels.has_gpu());
    }

    #[test]
    fn the_gpu_name_says_how_far_the_node_gpus_can_be_trusted() {
        let listed = vec!["nvidia-tesla-t4".to_string()];
        let name = |n: &Node, config: &GpuConfig, template: Option<&Node>| {
            AcceleratorLabels::of(n, Some(config), &listed, template, &[]).gpu_name
        };
        let with_gpus = node("n", 2);
        let without = node("n", 0);
        let template = node("template", 1);
        assert_eq!(name(&with_gpus, &gpu(""), None), GENERIC_GPU);
        assert_eq!(
            name(&with_gpus, &gpu("nvidia-tesla-t4"), None),
            "nvidia-tesla-t4"
        );
        assert_eq!(name(&with_gpus, &gpu("nvidia-h100"), None), NOT_LISTED_GPU);
        assert_eq!(
            name(&without, &gpu("nvidia-tesla-t4"), Some(&template)),
            MISSING_GPU
        );
        assert_eq!(
            name(&without, &gpu("nvidia-tesla-t4"), Some(&without)),
            UNEXPECTED_LABEL_GPU
        );
        assert_eq!(
            name(&without, &gpu("nvidia-tesla-t4"), None),
            UNEXPECTED_LABEL_GPU
        );
        let labels = AcceleratorLabels::of(&with_gpus, Some(&gpu("")), &[], None, &[]);
        assert_eq!(labels.gpu_resource_name, NVIDIA_GPU);
        assert!(labels.has_gpu());
    }

    #[test]
    fn dra_drivers_are_the_node_local_ones_sorted_unique_and_bucketed() {
        let slices = [
            slice("n", "gpu.nvidia.com"),
            slice("n", "example.com/fpga"),
            slice("n", "dra.net"),
            slice("n", "gpu.nvidia.com"),
            slice("n", "another.example.com"),
            slice("other", "tpu.google.com"),
        ];
        let slices: Vec<&ResourceSlice> = slices.iter().collect();
        let labels = AcceleratorLabels::of(&node("n", 0), None, &[], None, &slices);
        assert_eq!(labels.dra_drivers, "custom.driver,dra.net,gpu.nvidia.com");
    }
}
