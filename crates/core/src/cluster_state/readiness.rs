//! Readiness of one node as the autoscaler judges it (docs/behaviour.md CS-101, CS-102): the
//! Kubernetes conditions and condition taints, plus the autoscaler's own rules — startup taints
//! make a Ready node count as still starting, and a GPU-labelled node without GPUs in its
//! allocatable is not ready yet because its device plugin has not reported them, and neither is a
//! node that has published fewer complete device pools of a DRA driver than its group's template
//! (its DRA driver has not published its ResourceSlices yet). Status taints never affect readiness.

use std::collections::BTreeMap;

use ferroscale_model::Node;
use ferroscale_model::resources::NVIDIA_GPU;
use ferroscale_model::taints::{
    CONDITION_TAINTS, DELETION_CANDIDATE, IGNORE_TAINT_PREFIX, STARTUP_TAINT_PREFIX,
    STATUS_TAINT_PREFIX, TO_BE_DELETED,
};

use crate::options::AutoscalingOptions;

/// How a node stands, before its age and group decide whether "not ready" means NotStarted or
/// Unready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeReadiness {
    Ready,
    /// Conditions or condition taints say not ready (or there is no `Ready` condition at all).
    NotReady,
    /// Ready by its conditions, but it still carries a startup taint.
    StartupTainted,
    /// Ready by its conditions, but a resource it should offer is missing: the GPU from
    /// allocatable, or DRA devices from its ResourceSlices; reported as `resourceUnready`.
    ResourceUnready,
}

impl NodeReadiness {
    pub fn is_ready(self) -> bool {
        self == NodeReadiness::Ready
    }
}

/// The rules that decide readiness: the taint flags and the provider's GPU label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadinessRules {
    /// `--startup-taint` and `--ignore-taint`: exact keys.
    pub startup_taints: Vec<String>,
    /// `--startup-taint-prefix`: key prefixes.
    pub startup_taint_prefixes: Vec<String>,
    /// `--status-taint`: exact keys.
    pub status_taints: Vec<String>,
    /// The provider's GPU label key; empty when the provider has none.
    pub gpu_label: String,
}

impl ReadinessRules {
    pub fn from_options(options: &AutoscalingOptions, gpu_label: &str) -> ReadinessRules {
        let mut startup_taints = options.startup_taints.clone();
        // docs/cloud-node-controller.md CNC-111: while the cloud node controller is to
        // initialize it, a registered node is still starting.
        if options.cloud_node_controller {
            startup_taints.push(crate::cloud_node_controller::rules::UNINITIALIZED_TAINT.into());
        }
        ReadinessRules {
            startup_taints,
            startup_taint_prefixes: options.startup_taint_prefixes.clone(),
            status_taints: options.status_taints.clone(),
            gpu_label: gpu_label.to_string(),
        }
    }

    /// Whether a taint key marks a node that is still starting: the built-in prefixes (the
    /// `ignore-taint` one is deprecated but still honoured) and the flags.
    pub fn is_startup_taint(&self, key: &str) -> bool {
        key.starts_with(STARTUP_TAINT_PREFIX)
            || key.starts_with(IGNORE_TAINT_PREFIX)
            || self.startup_taints.iter().any(|t| t == key)
            || self
                .startup_taint_prefixes
                .iter()
                .any(|p| !p.is_empty() && key.starts_with(p.as_str()))
    }

    /// Whether a taint key is a status taint (informational: the node stays Ready).
    pub fn is_status_taint(&self, key: &str) -> bool {
        key.starts_with(STATUS_TAINT_PREFIX) || self.status_taints.iter().any(|t| t == key)
    }

    /// The node's readiness under these rules, for a node without DRA expectations. Conditions
    /// come first: a node that Kubernetes calls not ready is `NotReady` whatever its taints.
    pub fn readiness(&self, node: &Node) -> NodeReadiness {
        self.readiness_with_devices(node, &DevicePools::default())
    }

    /// The node's readiness under these rules, with the complete device pools it publishes and
    /// those its group's template says it will (docs/dra.md DRA-129).
    pub fn readiness_with_devices(&self, node: &Node, devices: &DevicePools<'_>) -> NodeReadiness {
        if !node.is_ready() {
            return NodeReadiness::NotReady;
        }
        if node.taints.iter().any(|t| self.is_startup_taint(&t.key)) {
            return NodeReadiness::StartupTainted;
        }
        if self.gpu_missing(node) || devices.missing() {
            return NodeReadiness::ResourceUnready;
        }
        NodeReadiness::Ready
    }

    /// A node labelled as a GPU node whose allocatable shows no GPU: the device plugin has not
    /// registered the GPUs yet.
    fn gpu_missing(&self, node: &Node) -> bool {
        !self.gpu_label.is_empty()
            && node.labels.contains_key(&self.gpu_label)
            && node.allocatable.get(NVIDIA_GPU) <= 0
    }
}

/// `node_taints_count{type}` for a startup taint (other than the deprecated `ignore-taint` ones).
pub const STARTUP_TAINT_TYPE: &str = "startup-taint";
/// `node_taints_count{type}` for a status taint.
pub const STATUS_TAINT_TYPE: &str = "status-taint";
/// `node_taints_count{type}` for every taint reported under no name of its own.
pub const OTHER_TAINT_TYPE: &str = "other";

impl ReadinessRules {
    /// The `type` a taint is counted under in `node_taints_count` (docs/behaviour.md OBS-124):
    /// the prefix of the deprecated `ignore-taint` taints, the key itself for the autoscaler's
    /// own taints and the condition taints, then `startup-taint`, `status-taint` or `other`.
    pub fn taint_type(&self, key: &str) -> &'static str {
        if key.starts_with(IGNORE_TAINT_PREFIX) {
            return IGNORE_TAINT_PREFIX;
        }
        if let Some(own) = [TO_BE_DELETED, DELETION_CANDIDATE]
            .into_iter()
            .chain(CONDITION_TAINTS.iter().copied())
            .find(|reported| *reported == key)
        {
            return own;
        }
        if self.is_startup_taint(key) {
            STARTUP_TAINT_TYPE
        } else if self.is_status_taint(key) {
            STATUS_TAINT_TYPE
        } else {
            OTHER_TAINT_TYPE
        }
    }

    /// Every taint of `nodes` counted by [`ReadinessRules::taint_type`]; each type appears,
    /// at zero when no node has such a taint, so a count that drops to zero is seen to.
    pub fn count_taints<'n>(
        &self,
        nodes: impl IntoIterator<Item = &'n Node>,
    ) -> BTreeMap<&'static str, usize> {
        let mut counts: BTreeMap<&'static str, usize> = [
            IGNORE_TAINT_PREFIX,
            TO_BE_DELETED,
            DELETION_CANDIDATE,
            STARTUP_TAINT_TYPE,
            STATUS_TAINT_TYPE,
            OTHER_TAINT_TYPE,
        ]
        .into_iter()
        .chain(CONDITION_TAINTS.iter().copied())
        .map(|kind| (kind, 0))
        .collect();
        for node in nodes {
            for taint in &node.taints {
                *counts.entry(self.taint_type(&taint.key)).or_default() += 1;
            }
        }
        counts
    }
}

/// Complete DRA device pools per driver (`ferroscale_model::dra::complete_pools_by_driver`): what a
/// node publishes, and what a new node of its group publishes according to the group's template.
#[derive(Debug, Clone, Copy, Default)]
pub struct DevicePools<'a> {
    pub node: Option<&'a BTreeMap<String, usize>>,
    pub template: Option<&'a BTreeMap<String, usize>>,
}

impl DevicePools<'_> {
    /// Some driver of the template has fewer complete pools on the node: the node's devices are
    /// not all published yet. Without a template there is nothing to expect.
    fn missing(&self) -> bool {
        let Some(template) = self.template else {
            return false;
        };
        template.iter().any(|(driver, expected)| {
            self.node
                .and_then(|pools| pools.get(driver))
                .copied()
                .unwrap_or(0)
                < *expected
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::{ConditionStatus, Resources, Taint, TaintEffect};

    fn node() -> Node {
        Node::new("n", Resources::new(4000, 16 << 30))
    }

    fn tainted(key: &str) -> Node {
        let mut n = node();
        n.taints
            .push(Taint::new(key, "true", TaintEffect::NoSchedule));
        n
    }

    #[test]
    fn each_condition_makes_a_node_not_ready() {
        let rules = ReadinessRules::default();
        assert_eq!(rules.readiness(&node()), NodeReadiness::Ready);
        let mut n = node();
        n.conditions.ready = Some(ConditionStatus::False);
        assert_eq!(rules.readiness(&n), NodeReadiness::NotReady);
        n.conditions.ready = Some(ConditionStatus::Unknown);
        assert_eq!(rules.readiness(&n), NodeReadiness::NotReady);
        n.conditions.ready = None;
        assert_eq!(
            rules.readiness(&n),
            NodeReadiness::NotReady,
            "no Ready condition"
        );
        let mut n = node();
        n.conditions.disk_pressure = true;
        assert_eq!(rules.readiness(&n), NodeReadiness::NotReady);
        let mut n = node();
        n.conditions.network_unavailable = true;
        assert_eq!(rules.readiness(&n), NodeReadiness::NotReady);
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/disk-pressure",
            "node.kubernetes.io/network-unavailable",
        ] {
            assert_eq!(
                rules.readiness(&tainted(key)),
                NodeReadiness::NotReady,
                "{key}"
            );
        }
    }

    #[test]
    fn startup_taints_from_prefixes_and_flags() {
        let mut options = AutoscalingOptions::default();
        options.set("startup-taint", "example.com/warming").unwrap();
        options.set("ignore-taint", "example.com/legacy").unwrap();
        options
            .set("startup-taint-prefix", "boot.example.com/")
            .unwrap();
        let rules = ReadinessRules::from_options(&options, "");
        for key in [
            "startup-taint.cluster-autoscaler.kubernetes.io/cni",
            "ignore-taint.cluster-autoscaler.kubernetes.io/agent",
            "example.com/warming",
            "example.com/legacy",
            "boot.example.com/disk",
        ] {
            assert_eq!(
                rules.readiness(&tainted(key)),
                NodeReadiness::StartupTainted,
                "{key}"
            );
        }
        assert_eq!(
            rules.readiness(&tainted("example.com/other")),
            NodeReadiness::Ready,
            "an unrelated taint does not affect readiness"
        );
        assert_eq!(
            ReadinessRules::default().readiness(&tainted("example.com/warming")),
            NodeReadiness::Ready,
            "exact keys only count when passed as flags"
        );
    }

    #[test]
    fn status_taints_leave_the_node() {
        let mut options = AutoscalingOptions::default();
        options
            .set("status-taint", "example.com/maintenance")
            .unwrap();
        let rules = ReadinessRules::from_options(&options, "");
        for key in [
            "status-taint.cluster-autoscaler.kubernetes.io/degraded",
            "example.com/maintenance",
        ] {
            assert!(rules.is_status_taint(key));
            assert!(!rules.is_startup_taint(key));
            assert_eq!(
                rules.readiness(&tainted(key)),
                NodeReadiness::Ready,
                "{key}"
            );
        }
    }

    #[test]
    fn gpu_node_without_gpus_in_allocatable_is_resource_unready() {
        let rules = ReadinessRules {
            gpu_label: "accelerator".into(),
            ..Default::default()
        };
        let mut n = node();
        n.labels.insert("accelerator".into(), "nvidia-t4".into());
        assert_eq!(rules.readiness(&n), NodeReadiness::ResourceUnready);
        n.allocatable.set(NVIDIA_GPU, 1);
        assert_eq!(rules.readiness(&n), NodeReadiness::Ready);
        assert_eq!(
            rules.readiness(&node()),
            NodeReadiness::Ready,
            "a node without the GPU label needs no GPU"
        );
    }

    #[test]
    fn a_node_short_of_its_templates_complete_pools_is_resource_unready() {
        let rules = ReadinessRules::default();
        let pools = |entries: &[(&str, usize)]| -> BTreeMap<String, usize> {
            entries.iter().map(|(d, n)| (d.to_string(), *n)).collect()
        };
        let template = pools(&[("gpu.example.com", 1), ("nic.example.com", 2)]);
        let check = |published: Option<&BTreeMap<String, usize>>| {
            rules.readiness_with_devices(
                &node(),
                &DevicePools {
                    node: published,
                    template: Some(&template),
                },
            )
        };
        assert_eq!(
            check(None),
            NodeReadiness::ResourceUnready,
            "nothing published"
        );
        let partial = pools(&[("gpu.example.com", 1), ("nic.example.com", 1)]);
        assert_eq!(check(Some(&partial)), NodeReadiness::ResourceUnready);
        let all = pools(&[("gpu.example.com", 1), ("nic.example.com", 2)]);
        assert_eq!(check(Some(&all)), NodeReadiness::Ready);
        let more = pools(&[("gpu.example.com", 3), ("nic.example.com", 2), ("x", 1)]);
        assert_eq!(
            check(Some(&more)),
            NodeReadiness::Ready,
            "more than the template"
        );
        // Without a template nothing is expected; conditions still come first.
        assert_eq!(
            rules.readiness_with_devices(&node(), &DevicePools::default()),
            NodeReadiness::Ready
        );
        let mut not_ready = node();
        not_ready.conditions.ready = Some(ConditionStatus::False);
        assert_eq!(
            rules.readiness_with_devices(
                &not_ready,
                &DevicePools {
                    node: None,
                    template: Some(&template)
                }
            ),
            NodeReadiness::NotReady
        );
    }

    /// docs/behaviour.md OBS-124.
    #[test]
    fn taints_are_counted_by_the_type_upstream_reports() {
        let rules = ReadinessRules {
            startup_taints: vec!["example.com/booting".into()],
            status_taints: vec!["example.com/degraded".into()],
            ..ReadinessRules::default()
        };
        let nodes = [
            tainted(TO_BE_DELETED),
            tainted("node.kubernetes.io/not-ready"),
            tainted("ignore-taint.cluster-autoscaler.kubernetes.io/old"),
            tainted("startup-taint.cluster-autoscaler.kubernetes.io/cni"),
            tainted("example.com/booting"),
            tainted("example.com/degraded"),
            tainted("dedicated"),
            tainted("dedicated"),
        ];
        let counts = rules.count_taints(&nodes);
        assert_eq!(counts[TO_BE_DELETED], 1);
        assert_eq!(counts["node.kubernetes.io/not-ready"], 1);
        assert_eq!(counts[IGNORE_TAINT_PREFIX], 1);
        assert_eq!(counts[STARTUP_TAINT_TYPE], 2);
        assert_eq!(counts[STATUS_TAINT_TYPE], 1);
        assert_eq!(counts[OTHER_TAINT_TYPE], 2);
        assert_eq!(
            counts[DELETION_CANDIDATE], 0,
            "every type is there, at zero too"
        );
        assert_eq!(counts.len(), 6 + CONDITION_TAINTS.len());
    }
}
