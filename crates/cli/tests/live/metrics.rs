//! `/metrics` of a live `ferroscale run` against upstream Cluster Autoscaler's metrics
//! definitions (docs/operations.md, "Metrics"; docs/behaviour.md OBS-101): after a scale-up,
//! every upstream metric that applies is served with upstream's type and label names, and
//! nothing else is served under the `cluster_autoscaler_` prefix.

use std::collections::{BTreeMap, BTreeSet};

use crate::harness::{App, Cluster, wait_until};

/// When a metric has series in a scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Present {
    /// From the first iteration on (the per-node-group ones with `--emit-per-nodegroup-metrics`,
    /// which this test passes).
    Always,
    /// Once a scale-up has been estimated.
    AfterScaleUp,
    /// Only after an event this test does not cause (GPU nodes, DRA devices, a removal latency):
    /// checked when present.
    OnEvent,
}

use Present::{AfterScaleUp, Always, OnEvent};

/// Upstream's metrics, written down from its definitions (cluster-autoscaler's
/// `metrics/metrics.go`, 1.36 line): name without the `cluster_autoscaler_` prefix, type, label
/// names.
const UPSTREAM: &[(&str, &str, &[&str], Present)] = &[
    ("cluster_safe_to_autoscale", "gauge", &[], Always),
    ("nodes_count", "gauge", &["state"], Always),
    ("node_groups_count", "gauge", &["node_group_type"], Always),
    ("unschedulable_pods_count", "gauge", &["type"], Always),
    ("skipped_pods_count", "gauge", &["requestor"], Always),
    ("max_nodes_count", "gauge", &[], Always),
    ("cluster_cpu_current_cores", "gauge", &[], Always),
    ("cpu_limits_cores", "gauge", &["direction"], Always),
    ("cluster_memory_current_bytes", "gauge", &[], Always),
    ("memory_limits_bytes", "gauge", &["direction"], Always),
    ("node_group_min_count", "gauge", &["node_group"], Always),
    ("node_group_max_count", "gauge", &["node_group"], Always),
    ("node_group_target_count", "gauge", &["node_group"], Always),
    ("node_group_healthiness", "gauge", &["node_group"], Always),
    (
        "node_group_backoff_status",
        "gauge",
        &["node_group", "reason"],
        Always,
    ),
    (
        "nodes_count_per_node_group",
        "gauge",
        &["state", "node_group"],
        Always,
    ),
    ("last_activity", "gauge", &["activity"], Always),
    (
        "function_duration_seconds",
        "histogram",
        &["function"],
        Always,
    ),
    (
        "function_duration_quantile_seconds",
        "summary",
        &["function"],
        Always,
    ),
    ("pending_node_deletions", "gauge", &[], Always),
    ("errors_total", "counter", &["type"], Always),
    (
        "scaled_up_nodes_total",
        "counter",
        &["gpu_resource_name", "gpu_name", "dra_drivers"],
        Always,
    ),
    (
        "scaled_up_gpu_nodes_total",
        "counter",
        &["gpu_resource_name", "gpu_name"],
        OnEvent,
    ),
    (
        "failed_scale_ups_total",
        "counter",
        &["reason", "gpu_resource_name", "gpu_name", "dra_drivers"],
        Always,
    ),
    (
        "failed_node_creations_total",
        "counter",
        &["reason"],
        Always,
    ),
    (
        "failed_gpu_scale_ups_total",
        "counter",
        &["reason", "gpu_resource_name", "gpu_name"],
        OnEvent,
    ),
    (
        "scaled_down_nodes_total",
        "counter",
        &["reason", "gpu_resource_name", "gpu_name", "dra_drivers"],
        Always,
    ),
    (
        "scaled_down_gpu_nodes_total",
        "counter",
        &["reason", "gpu_resource_name", "gpu_name"],
        OnEvent,
    ),
    (
        "evicted_pods_total",
        "counter",
        &["eviction_result"],
        Always,
    ),
    ("unneeded_nodes_count", "gauge", &[], Always),
    ("unremovable_nodes_count", "gauge", &["reason"], Always),
    ("scale_down_in_cooldown", "gauge", &[], Always),
    (
        "old_unregistered_nodes_removed_count",
        "counter",
        &[],
        Always,
    ),
    ("overflowing_controllers_count", "gauge", &[], Always),
    (
        "skipped_scale_events_count",
        "counter",
        &["direction", "reason"],
        Always,
    ),
    (
        "created_node_groups_total",
        "counter",
        &["group_type"],
        Always,
    ),
    (
        "deleted_node_groups_total",
        "counter",
        &["group_type"],
        Always,
    ),
    ("node_taints_count", "gauge", &["type"], Always),
    ("inconsistent_instances_migs_count", "gauge", &[], Always),
    (
        "binpacking_heterogeneity",
        "histogram",
        &["instance_type", "cpu_count", "namespace_count"],
        AfterScaleUp,
    ),
    ("max_node_skip_eval_duration_seconds", "gauge", &[], Always),
    (
        "node_removal_latency_seconds",
        "histogram",
        &["deleted", "delay_reason"],
        OnEvent,
    ),
    (
        "dra_node_template_resources_mismatch",
        "gauge",
        &["driver", "mismatch_type"],
        OnEvent,
    ),
];

const PREFIX: &str = "cluster_autoscaler_";

/// A scrape's `cluster_autoscaler_` families: name → (type, label names of its samples).
fn families(scrape: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut families: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, kind)) = rest.split_once(' ')
                && name.starts_with(PREFIX)
            {
                families.entry(name.to_string()).or_default().0 = kind.to_string();
            }
            continue;
        }
        if line.starts_with('#') || !line.starts_with(PREFIX) {
            continue;
        }
        let (series, labels) = match line.split_once('{') {
            Some((series, rest)) => (series, rest.rsplit_once('}').map_or("", |(l, _)| l)),
            None => (line.split(' ').next().unwrap_or(line), ""),
        };
        // A histogram's or summary's samples belong to the family without the suffix.
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                series
                    .strip_suffix(suffix)
                    .filter(|base| families.contains_key(*base))
            })
            .unwrap_or(series);
        let entry = families.entry(family.to_string()).or_default();
        for pair in labels.split("\",").filter(|p| !p.is_empty()) {
            if let Some((label, _)) = pair.split_once('=')
                && label != "le"
                && label != "quantile"
            {
                entry.1.insert(label.to_string());
            }
        }
    }
    families
}

/// Every difference between a scrape and upstream's definitions, one line each.
fn differences(scrape: &str) -> Vec<String> {
    let served = families(scrape);
    let mut problems = Vec::new();
    for (short, kind, labels, present) in UPSTREAM {
        let name = format!("{PREFIX}{short}");
        let Some((served_kind, served_labels)) = served.get(&name) else {
            if *present != OnEvent {
                problems.push(format!("missing: {name} ({kind}, labels {labels:?})"));
            }
            continue;
        };
        if served_kind != kind {
            problems.push(format!("{name}: type {served_kind}, upstream's is {kind}"));
        }
        let expected: BTreeSet<String> = labels.iter().map(|l| l.to_string()).collect();
        if *served_labels != expected {
            problems.push(format!(
                "{name}: labels {served_labels:?}, upstream's are {expected:?}"
            ));
        }
    }
    for name in served.keys() {
        let short = &name[PREFIX.len()..];
        if !UPSTREAM.iter().any(|(upstream, ..)| *upstream == short) {
            problems.push(format!("not upstream's: {name}"));
        }
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_run_serves_upstreams_metrics() {
    let cluster = Cluster::start().await;
    let autoscaler = cluster.start_autoscaler("main", &["--emit-per-nodegroup-metrics=true"]);
    cluster.create_app(App::new("measured", 2, "3")).await;
    cluster.wait_running("measured", 2).await;
    cluster.wait_pool_ready(2).await;
    wait_until("the scale-up in the metrics", async || {
        autoscaler.metric_sum("cluster_autoscaler_scaled_up_nodes_total") == 2.0
    })
    .await;
    let scrape = autoscaler.metrics().expect("/metrics answers");
    let problems = differences(&scrape);
    assert!(
        problems.is_empty(),
        "/metrics differs from upstream's definitions:\n{}\n\nscrape:\n{scrape}",
        problems.join("\n")
    );
    assert!(
        autoscaler.metric_sum("cluster_autoscaler_binpacking_heterogeneity_count") >= 1.0,
        "the scale-up's estimate was observed"
    );
}

/// The comparison itself: a scrape with a wrong type, a missing label and a stray family is
/// reported line by line.
#[test]
fn differences_name_every_missing_or_mismatched_family() {
    let scrape = "\
# TYPE cluster_autoscaler_nodes_count counter
cluster_autoscaler_nodes_count{state=\"ready\"} 1
# TYPE cluster_autoscaler_errors_total counter
cluster_autoscaler_errors_total 1
# TYPE cluster_autoscaler_made_up gauge
cluster_autoscaler_made_up 1
# TYPE cluster_autoscaler_function_duration_seconds histogram
cluster_autoscaler_function_duration_seconds_bucket{function=\"main\",le=\"+Inf\"} 1
cluster_autoscaler_function_duration_seconds_sum{function=\"main\"} 1
cluster_autoscaler_function_duration_seconds_count{function=\"main\"} 1
";
    let problems = differences(scrape);
    assert!(
        problems.contains(
            &"cluster_autoscaler_nodes_count: type counter, upstream's is gauge".to_string()
        ),
        "{problems:#?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("cluster_autoscaler_errors_total: labels")),
        "{problems:#?}"
    );
    assert!(problems.contains(&"not upstream's: cluster_autoscaler_made_up".to_string()));
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("missing: cluster_autoscaler_pending_node_deletions"))
    );
    assert!(
        !problems
            .iter()
            .any(|p| p.contains("function_duration_seconds")),
        "a histogram's samples are its family's: {problems:#?}"
    );
    assert!(
        !problems
            .iter()
            .any(|p| p.contains("scaled_up_gpu_nodes_total")),
        "metrics of events that did not happen may be absent"
    );
}
