//! Cluster-wide resource limits (docs/behaviour.md SU-24–SU-26): `--cores-total`, `--memory-total`,
//! `--gpu-total` (or the provider's limits), and how many template nodes still fit under them.
//!
//! Usage is the sum of node capacity over every node in the snapshot, upcoming placeholders
//! included and virtual-kubelet nodes excluded: cores rounded up per node, memory in bytes, GPUs
//! per type from the provider's GPU label and the node's allocatable GPUs. With
//! `--capacity-quotas-enabled` the headroom also holds the room under each CapacityQuota
//! ([`super::quota`]).

use ferroscale_model::Node;
use ferroscale_model::resources::NVIDIA_GPU;
use ferroscale_scheduling::Snapshot;

use crate::options::AutoscalingOptions;

use super::ProviderFacts;
use super::quota::{ExceededQuota, QuotaDelta, QuotaRooms, quota_delta};

/// Upstream's ID of the cluster-wide limits in skip reasons.
const CLUSTER_WIDE: &str = "cluster-wide";

/// What one node adds to the cluster's usage.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct NodeUsage {
    pub cores: i64,
    pub memory: i64,
    /// `(gpu type, count)`.
    pub gpu: Option<(String, i64)>,
    /// The CapacityQuotas (indices into the headroom's) a template node counts against, and what
    /// it adds to them; empty for existing nodes and without quotas.
    pub quota_matching: Vec<usize>,
    pub quota_delta: QuotaDelta,
}

pub(super) fn node_usage(node: &Node, gpu_label: &str) -> NodeUsage {
    let cores = (node.capacity.cpu_milli.max(0) + 999) / 1000;
    let gpu = (!gpu_label.is_empty())
        .then(|| node.labels.get(gpu_label))
        .flatten()
        .map(|gpu_type| (gpu_type.clone(), node.allocatable.get(NVIDIA_GPU)))
        .filter(|(_, count)| *count > 0);
    NodeUsage {
        cores,
        memory: node.capacity.memory,
        gpu,
        quota_matching: Vec::new(),
        quota_delta: QuotaDelta::new(),
    }
}

fn is_virtual_kubelet(node: &Node) -> bool {
    node.label("type") == Some("virtual-kubelet")
}

/// Remaining room under each maximum (`i64::MAX` where unlimited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Headroom {
    cores: i64,
    memory: i64,
    /// `(gpu type, remaining)`; types without a limit are absent.
    gpus: Vec<(String, i64)>,
    /// Room under each enforced CapacityQuota (empty unless `--capacity-quotas-enabled`).
    quotas: QuotaRooms,
}

impl Headroom {
    pub(super) fn from_snapshot(
        snapshot: &Snapshot,
        options: &AutoscalingOptions,
        provider: ProviderFacts<'_>,
    ) -> Headroom {
        let (max_cores, max_memory, mut gpus) = match provider.resource_limits {
            Some(limits) => (
                limits.max("cpu"),
                limits.max("memory"),
                limits
                    .max
                    .iter()
                    .filter(|(name, _)| name != "cpu" && name != "memory")
                    .cloned()
                    .collect::<Vec<_>>(),
            ),
            None => (
                options.cores_total.max,
                options.memory_total_bytes().max,
                options
                    .gpu_total
                    .iter()
                    .map(|g| (g.gpu_type.clone(), g.max))
                    .collect(),
            ),
        };
        let (mut cores, mut memory) = (max_cores, max_memory);
        let quotas = if options.capacity_quotas_enabled {
            QuotaRooms::new(
                provider.capacity_quotas,
                snapshot
                    .nodes()
                    .map(|(_, info)| info.node.as_ref())
                    .filter(|n| !is_virtual_kubelet(n)),
                provider.gpu_label,
            )
        } else {
            QuotaRooms::default()
        };
        for (_, info) in snapshot.nodes() {
            if is_virtual_kubelet(&info.node) {
                continue;
            }
            let usage = node_usage(&info.node, provider.gpu_label);
            cores = cores.saturating_sub(usage.cores);
            memory = memory.saturating_sub(usage.memory);
            if let Some((gpu_type, count)) = usage.gpu
                && let Some(entry) = gpus.iter_mut().find(|(t, _)| *t == gpu_type)
            {
                entry.1 = entry.1.saturating_sub(count);
            }
        }
        Headroom {
            cores,
            memory,
            gpus,
            quotas,
        }
    }

    /// What a template node of a group adds: [`node_usage`] plus the quotas its labels match.
    pub(super) fn template_usage(&self, node: &Node, gpu_label: &str) -> NodeUsage {
        let mut usage = node_usage(node, gpu_label);
        if !self.quotas.is_empty() {
            usage.quota_matching = self.quotas.matching(&node.labels);
            if !usage.quota_matching.is_empty() {
                usage.quota_delta = quota_delta(node, gpu_label);
            }
        }
        usage
    }

    /// How many nodes of this usage fit in every headroom.
    pub(super) fn nodes_that_fit(&self, usage: &NodeUsage) -> usize {
        let fit = |room: i64, per_node: i64| -> usize {
            if per_node <= 0 {
                usize::MAX
            } else {
                usize::try_from((room / per_node).max(0)).unwrap_or(usize::MAX)
            }
        };
        let mut n = fit(self.cores, usage.cores).min(fit(self.memory, usage.memory));
        if let Some((gpu_type, count)) = &usage.gpu
            && let Some((_, room)) = self.gpus.iter().find(|(t, _)| t == gpu_type)
        {
            n = n.min(fit(*room, *count));
        }
        if !usage.quota_matching.is_empty() {
            n = n.min(
                self.quotas
                    .nodes_that_fit(&usage.quota_matching, &usage.quota_delta),
            );
        }
        n
    }

    /// The quotas `count` nodes of this usage would exceed: the cluster-wide limits first (resources
    /// by upstream names: `cpu`, `memory`, GPU type), then each CapacityQuota.
    pub(super) fn exceeded_by(&self, usage: &NodeUsage, count: usize) -> Vec<ExceededQuota> {
        let mut quotas = Vec::new();
        let cluster_wide = self.cluster_wide_exceeded_by(usage, count);
        if !cluster_wide.is_empty() {
            quotas.push(ExceededQuota {
                id: CLUSTER_WIDE.to_string(),
                quota_name: None,
                resources: cluster_wide,
            });
        }
        if !usage.quota_matching.is_empty() {
            quotas.extend(self.quotas.exceeded_by(
                &usage.quota_matching,
                &usage.quota_delta,
                count,
            ));
        }
        quotas
    }

    fn cluster_wide_exceeded_by(&self, usage: &NodeUsage, count: usize) -> Vec<String> {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        let mut exceeded = Vec::new();
        if usage.cores.saturating_mul(count) > self.cores {
            exceeded.push("cpu".to_string());
        }
        if usage.memory.saturating_mul(count) > self.memory {
            exceeded.push("memory".to_string());
        }
        if let Some((gpu_type, per_node)) = &usage.gpu
            && let Some((_, room)) = self.gpus.iter().find(|(t, _)| t == gpu_type)
            && per_node.saturating_mul(count) > *room
        {
            exceeded.push(gpu_type.clone());
        }
        exceeded
    }

    /// Takes `count` nodes of this usage out of the headroom.
    pub(super) fn consume(&mut self, usage: &NodeUsage, nodes: usize) {
        let count = i64::try_from(nodes).unwrap_or(i64::MAX);
        self.cores = self.cores.saturating_sub(usage.cores.saturating_mul(count));
        self.memory = self
            .memory
            .saturating_sub(usage.memory.saturating_mul(count));
        if let Some((gpu_type, per_node)) = &usage.gpu
            && let Some(entry) = self.gpus.iter_mut().find(|(t, _)| t == gpu_type)
        {
            entry.1 = entry.1.saturating_sub(per_node.saturating_mul(count));
        }
        if !usage.quota_matching.is_empty() {
            self.quotas
                .consume(&usage.quota_matching, &usage.quota_delta, nodes);
        }
    }
}

/// `skipped_scale_events_count` reasons for the exceeded quotas: per resource of the cluster-wide
/// limits (`CpuResourceLimit`, `MemoryResourceLimit`, `GpuResourceLimit`), and for CapacityQuotas
/// only their cpu and memory (the metric has no reason for other resources).
pub(super) fn skipped_event_reasons(exceeded: &[ExceededQuota]) -> Vec<String> {
    let mut reasons = Vec::new();
    for quota in exceeded {
        for resource in &quota.resources {
            let reason = match resource.as_str() {
                "cpu" => "CpuResourceLimit",
                "memory" => "MemoryResourceLimit",
                _ if quota.quota_name.is_none() => "GpuResourceLimit",
                _ => continue,
            };
            reasons.push(reason.to_string());
        }
    }
    reasons
}

/// Upstream's skip reason for a group the quotas cannot take: one `exceeded quota: ...` per quota.
pub(super) fn quota_skip_reason(exceeded: &[ExceededQuota]) -> String {
    exceeded
        .iter()
        .map(ExceededQuota::message)
        .collect::<Vec<_>>()
        .join("; ")
}
