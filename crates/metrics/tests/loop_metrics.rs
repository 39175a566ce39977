//! Every metric filled from a loop's outcome with real values (docs/behaviour.md OBS-101,
//! OBS-103, OBS-123–OBS-129): upstream's names, types and labels, the standard series at zero
//! before anything happens, and what one outcome adds.

use std::collections::BTreeMap;
use std::time::Duration;

use ferroscale_core::AutoscalingOptions;
use ferroscale_core::accelerators::AcceleratorLabels;
use ferroscale_core::act::deletions::{
    ActuationReport, ActuationStep, CompletedDeletion, RemovalKind,
};
use ferroscale_core::act::scale_up::ScaleUpExecution;
use ferroscale_core::autoscaler::{
    ClusterResources, GatherCall, GatherFailure, GatherSubject, LoopError, LoopOutcome,
};
use ferroscale_core::cloud::CloudError;
use ferroscale_core::cluster_state::{DeviceMismatch, TimedOutScaleUp};
use ferroscale_core::scale_down::{
    ScaleDownPlan, ScaleDownState, ScaleDownStatus, UnremovableNode, UnremovableReason,
};
use ferroscale_core::scale_up::{BinpackingEstimate, GroupIncrease, ScaleUpPlan, ScaleUpStatus};
use ferroscale_metrics::registry::ERROR_TYPES;
use ferroscale_metrics::{AutoscalerMetrics, Kind};
use ferroscale_model::Timestamp;

const NOW: i64 = 1_700_000_000;

fn line_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn outcome_at(secs: i64) -> LoopOutcome {
    LoopOutcome {
        now: Timestamp::from_secs(secs),
        ..LoopOutcome::default()
    }
}

fn record(metrics: &AutoscalerMetrics, outcome: &LoopOutcome) -> String {
    metrics.record_loop(outcome, &AutoscalingOptions::default(), Duration::ZERO);
    metrics.render()
}

fn gpu_labels(gpu_name: &str) -> AcceleratorLabels {
    AcceleratorLabels {
        gpu_resource_name: "nvidia.com/gpu".into(),
        gpu_name: gpu_name.into(),
        dra_drivers: "gpu.nvidia.com".into(),
    }
}

fn increase(group: &str, from: usize, to: usize) -> GroupIncrease {
    GroupIncrease {
        group_id: group.into(),
        current_target: from,
        new_target: to,
        max_size: 10,
        atomic: false,
    }
}

fn execution(succeeded: Vec<GroupIncrease>, failed: Vec<GroupIncrease>) -> ScaleUpExecution {
    ScaleUpExecution {
        status: ScaleUpStatus::Successful,
        scaled_up_nodes: succeeded.iter().map(GroupIncrease::delta).sum(),
        failed_scale_up_reasons: failed.iter().map(|_| "cloudProviderError").collect(),
        failed_node_creations: failed.iter().map(GroupIncrease::delta).sum(),
        failed: failed
            .into_iter()
            .map(|i| (i, CloudError::Provider("quota".into())))
            .collect(),
        succeeded,
        not_attempted: Vec::new(),
        events: Vec::new(),
    }
}

#[test]
fn standard_series_exist_at_zero_before_anything_happens() {
    let metrics = AutoscalerMetrics::new().unwrap();
    let text = metrics.render();
    for error_type in ERROR_TYPES {
        let series = format!("cluster_autoscaler_errors_total{{type=\"{error_type}\"}}");
        assert_eq!(line_value(&text, &series), Some(0.0), "{series}\n{text}");
    }
    for series in [
        "cluster_autoscaler_evicted_pods_total{eviction_result=\"failed\"}",
        "cluster_autoscaler_scaled_down_nodes_total{dra_drivers=\"\",gpu_name=\"\",gpu_resource_name=\"\",reason=\"empty\"}",
        "cluster_autoscaler_skipped_scale_events_count{direction=\"up\",reason=\"CpuResourceLimit\"}",
        "cluster_autoscaler_failed_scale_ups_total{dra_drivers=\"\",gpu_name=\"\",gpu_resource_name=\"\",reason=\"timeout\"}",
        "cluster_autoscaler_failed_node_creations_total{reason=\"timeout\"}",
        "cluster_autoscaler_old_unregistered_nodes_removed_count",
        "cluster_autoscaler_skipped_pods_count{requestor=\"filter-out-pod-list-processor\"}",
        "cluster_autoscaler_created_node_groups_total{group_type=\"\"}",
        "cluster_autoscaler_deleted_node_groups_total{group_type=\"\"}",
        "cluster_autoscaler_inconsistent_instances_migs_count",
        "cluster_autoscaler_pending_node_deletions",
        "cluster_autoscaler_overflowing_controllers_count",
    ] {
        assert_eq!(line_value(&text, series), Some(0.0), "{series}\n{text}");
    }
    assert!(text.contains("# TYPE cluster_autoscaler_errors_total counter"));
}

#[test]
fn a_loop_outcome_fills_gauges_and_counters() {
    let metrics = AutoscalerMetrics::new().unwrap();
    let mut options = AutoscalingOptions::default();
    options.set("cores-total", "2:64").unwrap();
    options.set("max-nodes-total", "7").unwrap();
    let mut outcome = outcome_at(NOW);
    outcome.cluster_state.cluster_healthy = true;
    outcome.cluster_state.total.ready = 3;
    outcome.cluster_state.total.unready = 1;
    outcome.deleted_nodes.push(CompletedDeletion {
        node: "n1".into(),
        group_id: "g".into(),
        kind: RemovalKind::Drain,
        unready: false,
    });
    outcome.actuation.push(ActuationReport {
        at: outcome.now,
        node: "n1".into(),
        group_id: "g".into(),
        kind: RemovalKind::Drain,
        step: ActuationStep::EvictionsStarted {
            pods: vec!["default/a".into(), "default/b".into()],
            daemonset_pods: vec![],
        },
    });
    let mut plan = ScaleDownPlan::empty(ScaleDownStatus::InCooldown, ScaleDownState::new());
    plan.in_cooldown = true;
    plan.unremovable.push(UnremovableNode {
        node: "n2".into(),
        group_id: Some("g".into()),
        reason: UnremovableReason::NotUnderutilized,
        blocking_pod: None,
        pod: None,
        utilization: None,
    });
    outcome.scale_down = Some(plan);
    outcome.cluster_resources = Some(ClusterResources {
        cores: 12.5,
        memory_bytes: 3.0e10,
    });
    outcome.function_millis = vec![("scaleUp", 40.0), ("findUnneeded", 10.0)];
    metrics.record_loop(&outcome, &options, Duration::from_millis(250));
    let text = metrics.render();
    for (series, value) in [
        ("cluster_autoscaler_cluster_safe_to_autoscale", 1.0),
        ("cluster_autoscaler_nodes_count{state=\"ready\"}", 3.0),
        ("cluster_autoscaler_nodes_count{state=\"unready\"}", 1.0),
        ("cluster_autoscaler_nodes_count{state=\"notStarted\"}", 0.0),
        ("cluster_autoscaler_max_nodes_count", 0.0),
        (
            "cluster_autoscaler_cpu_limits_cores{direction=\"minimum\"}",
            2.0,
        ),
        (
            "cluster_autoscaler_cpu_limits_cores{direction=\"maximum\"}",
            64.0,
        ),
        ("cluster_autoscaler_last_activity{activity=\"main\"}", 1.7e9),
        (
            "cluster_autoscaler_last_activity{activity=\"scaleDown\"}",
            1.7e9,
        ),
        (
            "cluster_autoscaler_scaled_down_nodes_total{dra_drivers=\"\",gpu_name=\"\",gpu_resource_name=\"\",reason=\"underutilized\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_evicted_pods_total{eviction_result=\"succeeded\"}",
            2.0,
        ),
        ("cluster_autoscaler_scale_down_in_cooldown", 1.0),
        ("cluster_autoscaler_unneeded_nodes_count", 0.0),
        (
            "cluster_autoscaler_unremovable_nodes_count{reason=\"NotUnderutilized\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_unremovable_nodes_count{reason=\"BlockedByPod\"}",
            0.0,
        ),
        (
            "cluster_autoscaler_function_duration_seconds_count{function=\"main\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_function_duration_seconds_sum{function=\"main\"}",
            0.25,
        ),
        (
            "cluster_autoscaler_function_duration_seconds_sum{function=\"scaleUp\"}",
            0.04,
        ),
        (
            "cluster_autoscaler_function_duration_seconds_count{function=\"findUnneeded\"}",
            1.0,
        ),
        ("cluster_autoscaler_cluster_cpu_current_cores", 12.5),
        ("cluster_autoscaler_cluster_memory_current_bytes", 3.0e10),
    ] {
        assert_eq!(line_value(&text, series), Some(value), "{series}\n{text}");
    }
    assert_eq!(
        text.matches("cluster_autoscaler_function_duration_seconds_bucket{function=\"main\"")
            .count(),
        150 + 1,
        "150 buckets and +Inf"
    );
}

/// docs/behaviour.md OBS-103: failed gather calls do not fail the iteration, but each is
/// counted as a provider error.
#[test]
fn gather_failures_count_as_cloud_provider_errors() {
    let metrics = AutoscalerMetrics::new().unwrap();
    let failure = |call, subject| GatherFailure {
        call,
        subject,
        error: CloudError::Provider("timeout".into()),
    };
    let mut outcome = outcome_at(NOW);
    outcome.gather_failures = vec![
        failure(GatherCall::TargetSize, GatherSubject::Group("pool".into())),
        failure(
            GatherCall::NodeGroupForNode,
            GatherSubject::Node("n1".into()),
        ),
        failure(GatherCall::ResourceLimits, GatherSubject::Provider),
    ];
    let text = record(&metrics, &outcome);
    assert_eq!(
        line_value(
            &text,
            "cluster_autoscaler_errors_total{type=\"cloudProviderError\"}"
        ),
        Some(3.0)
    );
    assert_eq!(
        line_value(
            &text,
            "cluster_autoscaler_last_activity{activity=\"mainSuccessful\"}"
        ),
        Some(1.7e9),
        "the iteration itself succeeded"
    );
}

#[test]
fn a_failed_loop_counts_its_error_type_and_keeps_the_cluster_gauges() {
    let metrics = AutoscalerMetrics::new().unwrap();
    let mut healthy = LoopOutcome::default();
    healthy.cluster_state.cluster_healthy = true;
    record(&metrics, &healthy);
    let failed = LoopOutcome {
        error: Some(LoopError::Refresh(CloudError::Provider("boom".into()))),
        pending_node_deletions: 2,
        ..LoopOutcome::default()
    };
    record(&metrics, &failed);
    let text = record(&metrics, &failed);
    assert_eq!(
        line_value(
            &text,
            "cluster_autoscaler_errors_total{type=\"cloudProviderError\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        line_value(
            &text,
            "cluster_autoscaler_errors_total{type=\"apiCallError\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        line_value(&text, "cluster_autoscaler_cluster_safe_to_autoscale"),
        Some(1.0)
    );
    assert_eq!(
        line_value(&text, "cluster_autoscaler_pending_node_deletions"),
        Some(2.0),
        "deletions go on whether the iteration failed or not"
    );
}

/// docs/behaviour.md OBS-128: the summary has upstream's quantiles over the last hour, beside
/// the histogram of the same observations.
#[test]
fn function_durations_are_a_summary_with_quantiles_over_the_last_hour() {
    let metrics = AutoscalerMetrics::new().unwrap();
    for (i, millis) in [100.0, 200.0, 300.0, 400.0, 5000.0].into_iter().enumerate() {
        let mut outcome = outcome_at(NOW + 10 * i as i64);
        outcome.function_millis = vec![("scaleUp", millis)];
        record(&metrics, &outcome);
    }
    let text = metrics.render();
    assert!(
        text.contains("# TYPE cluster_autoscaler_function_duration_quantile_seconds summary"),
        "{text}"
    );
    let quantile = |q: &str| {
        line_value(
            &text,
            &format!(
                "cluster_autoscaler_function_duration_quantile_seconds{{function=\"scaleUp\",quantile=\"{q}\"}}"
            ),
        )
    };
    assert_eq!(quantile("0.5"), Some(0.3));
    assert_eq!(quantile("0.9"), Some(5.0));
    assert_eq!(quantile("0.99"), Some(5.0));
    assert_eq!(
        line_value(
            &text,
            "cluster_autoscaler_function_duration_quantile_seconds_count{function=\"scaleUp\"}"
        ),
        Some(5.0)
    );
    assert_eq!(
        line_value(
            &text,
            "cluster_autoscaler_function_duration_quantile_seconds_sum{function=\"scaleUp\"}"
        ),
        Some(6.0)
    );
    // An hour later the old observations have left the window, but still count and sum.
    let mut later = outcome_at(NOW + 3700);
    later.function_millis = vec![("scaleUp", 50.0)];
    let text = record(&metrics, &later);
    assert_eq!(
        line_value(
            &text,
            "cluster_autoscaler_function_duration_quantile_seconds{function=\"scaleUp\",quantile=\"0.99\"}"
        ),
        Some(0.05)
    );
    assert_eq!(
        line_value(
            &text,
            "cluster_autoscaler_function_duration_quantile_seconds_count{function=\"scaleUp\"}"
        ),
        Some(6.0)
    );
}

/// docs/behaviour.md OBS-123: scale-ups carry the accelerator labels of the group's template,
/// and GPU groups are counted again in the GPU-only counters.
#[test]
fn scale_ups_and_their_failures_carry_the_groups_accelerator_labels() {
    let metrics = AutoscalerMetrics::new().unwrap();
    let mut outcome = outcome_at(NOW);
    outcome.group_accelerators = BTreeMap::from([
        ("gpus".to_string(), gpu_labels("nvidia-tesla-t4")),
        ("cpus".to_string(), AcceleratorLabels::default()),
    ]);
    outcome.scale_up_execution = Some(execution(
        vec![increase("gpus", 1, 4), increase("cpus", 0, 2)],
        vec![increase("gpus", 4, 6)],
    ));
    outcome.cluster_state.timed_out_scale_ups = vec![TimedOutScaleUp {
        group_id: "gpus".into(),
        missing: 2,
    }];
    let text = record(&metrics, &outcome);
    for (series, value) in [
        (
            "cluster_autoscaler_scaled_up_nodes_total{dra_drivers=\"gpu.nvidia.com\",gpu_name=\"nvidia-tesla-t4\",gpu_resource_name=\"nvidia.com/gpu\"}",
            3.0,
        ),
        (
            "cluster_autoscaler_scaled_up_nodes_total{dra_drivers=\"\",gpu_name=\"\",gpu_resource_name=\"\"}",
            2.0,
        ),
        (
            "cluster_autoscaler_scaled_up_gpu_nodes_total{gpu_name=\"nvidia-tesla-t4\",gpu_resource_name=\"nvidia.com/gpu\"}",
            3.0,
        ),
        (
            "cluster_autoscaler_failed_scale_ups_total{dra_drivers=\"gpu.nvidia.com\",gpu_name=\"nvidia-tesla-t4\",gpu_resource_name=\"nvidia.com/gpu\",reason=\"cloudProviderError\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_failed_gpu_scale_ups_total{gpu_name=\"nvidia-tesla-t4\",gpu_resource_name=\"nvidia.com/gpu\",reason=\"cloudProviderError\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_failed_scale_ups_total{dra_drivers=\"gpu.nvidia.com\",gpu_name=\"nvidia-tesla-t4\",gpu_resource_name=\"nvidia.com/gpu\",reason=\"timeout\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_failed_gpu_scale_ups_total{gpu_name=\"nvidia-tesla-t4\",gpu_resource_name=\"nvidia.com/gpu\",reason=\"timeout\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_failed_node_creations_total{reason=\"cloudProviderError\"}",
            2.0,
        ),
        (
            "cluster_autoscaler_failed_node_creations_total{reason=\"timeout\"}",
            2.0,
        ),
    ] {
        assert_eq!(line_value(&text, series), Some(value), "{series}\n{text}");
    }
    assert!(
        !text.contains("scaled_up_gpu_nodes_total{gpu_name=\"\""),
        "groups without GPU are not in the GPU-only counter"
    );
}

/// docs/behaviour.md OBS-123: removed nodes carry their own accelerator labels.
#[test]
fn scale_downs_carry_the_removed_nodes_accelerator_labels() {
    let metrics = AutoscalerMetrics::new().unwrap();
    let mut outcome = outcome_at(NOW);
    for (node, kind, unready) in [
        ("gpu-1", RemovalKind::Empty, false),
        ("gpu-2", RemovalKind::Drain, true),
        ("cpu-1", RemovalKind::Empty, false),
    ] {
        outcome.deleted_nodes.push(CompletedDeletion {
            node: node.into(),
            group_id: "g".into(),
            kind,
            unready,
        });
    }
    outcome.deleted_node_accelerators = BTreeMap::from([
        ("gpu-1".to_string(), gpu_labels("missing-gpu")),
        ("gpu-2".to_string(), gpu_labels("missing-gpu")),
    ]);
    let text = record(&metrics, &outcome);
    for (series, value) in [
        (
            "cluster_autoscaler_scaled_down_nodes_total{dra_drivers=\"gpu.nvidia.com\",gpu_name=\"missing-gpu\",gpu_resource_name=\"nvidia.com/gpu\",reason=\"empty\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_scaled_down_nodes_total{dra_drivers=\"gpu.nvidia.com\",gpu_name=\"missing-gpu\",gpu_resource_name=\"nvidia.com/gpu\",reason=\"unready\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_scaled_down_nodes_total{dra_drivers=\"\",gpu_name=\"\",gpu_resource_name=\"\",reason=\"empty\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_scaled_down_gpu_nodes_total{gpu_name=\"missing-gpu\",gpu_resource_name=\"nvidia.com/gpu\",reason=\"empty\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_scaled_down_gpu_nodes_total{gpu_name=\"missing-gpu\",gpu_resource_name=\"nvidia.com/gpu\",reason=\"unready\"}",
            1.0,
        ),
    ] {
        assert_eq!(line_value(&text, series), Some(value), "{series}\n{text}");
    }
}

/// docs/behaviour.md OBS-124, OBS-125: taints by type and pending deletions, as the outcome
/// counted them; a later loop's counts replace the earlier ones.
#[test]
fn taints_and_pending_deletions_are_gauges_of_the_last_loop() {
    let metrics = AutoscalerMetrics::new().unwrap();
    let mut outcome = outcome_at(NOW);
    outcome.node_taints = BTreeMap::from([
        ("ToBeDeletedByClusterAutoscaler", 2),
        ("startup-taint", 1),
        ("other", 0),
    ]);
    outcome.pending_node_deletions = 2;
    record(&metrics, &outcome);
    outcome
        .node_taints
        .insert("ToBeDeletedByClusterAutoscaler", 1);
    let text = record(&metrics, &outcome);
    for (series, value) in [
        (
            "cluster_autoscaler_node_taints_count{type=\"ToBeDeletedByClusterAutoscaler\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_node_taints_count{type=\"startup-taint\"}",
            1.0,
        ),
        ("cluster_autoscaler_node_taints_count{type=\"other\"}", 0.0),
        ("cluster_autoscaler_pending_node_deletions", 2.0),
    ] {
        assert_eq!(line_value(&text, series), Some(value), "{series}\n{text}");
    }
}

/// docs/behaviour.md OBS-126, OBS-127: the scale-up plan's overflowing controllers and one
/// binpacking observation per node group estimated, salvo rounds included.
#[test]
fn the_scale_up_plan_gives_overflowing_controllers_and_binpacking_heterogeneity() {
    let metrics = AutoscalerMetrics::new().unwrap();
    let estimate =
        |instance_type: &str, cpu: i64, namespaces: usize, groups: usize| BinpackingEstimate {
            group_id: "g".into(),
            instance_type: instance_type.into(),
            cpu_capacity_milli: cpu,
            namespaces,
            equivalence_groups: groups,
        };
    let mut plan = ScaleUpPlan::empty(ScaleUpStatus::Successful);
    plan.overflowing_controllers = 3;
    plan.binpacking_estimates = vec![estimate("m5.xlarge", 4000, 2, 3), estimate("", 3500, 7, 40)];
    let mut salvo = ScaleUpPlan::empty(ScaleUpStatus::Successful);
    salvo.binpacking_estimates = vec![estimate("m5.xlarge", 4000, 12, 1)];
    let mut outcome = outcome_at(NOW);
    outcome.scale_up = Some(plan);
    outcome.salvo_rounds = vec![salvo];
    let text = record(&metrics, &outcome);
    assert!(text.contains("# TYPE cluster_autoscaler_binpacking_heterogeneity histogram"));
    for (series, value) in [
        ("cluster_autoscaler_overflowing_controllers_count", 3.0),
        (
            "cluster_autoscaler_binpacking_heterogeneity_sum{cpu_count=\"4\",instance_type=\"m5.xlarge\",namespace_count=\"2\"}",
            3.0,
        ),
        (
            "cluster_autoscaler_binpacking_heterogeneity_bucket{cpu_count=\"4\",instance_type=\"m5.xlarge\",namespace_count=\"2\",le=\"4\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_binpacking_heterogeneity_bucket{cpu_count=\"4\",instance_type=\"m5.xlarge\",namespace_count=\"2\",le=\"2\"}",
            0.0,
        ),
        (
            "cluster_autoscaler_binpacking_heterogeneity_count{cpu_count=\"3500m\",instance_type=\"\",namespace_count=\"6-10\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_binpacking_heterogeneity_bucket{cpu_count=\"3500m\",instance_type=\"\",namespace_count=\"6-10\",le=\"32\"}",
            0.0,
        ),
        (
            "cluster_autoscaler_binpacking_heterogeneity_count{cpu_count=\"4\",instance_type=\"m5.xlarge\",namespace_count=\"11+\"}",
            1.0,
        ),
    ] {
        assert_eq!(line_value(&text, series), Some(value), "{series}\n{text}");
    }
}

/// docs/behaviour.md OBS-129: the DRA mismatches of this loop's templates' drivers; a driver
/// gone from every template is dropped.
#[test]
fn dra_template_mismatches_are_reported_by_driver_and_type() {
    let metrics = AutoscalerMetrics::new().unwrap();
    let mut outcome = outcome_at(NOW);
    outcome.cluster_state.device_mismatches = BTreeMap::from([
        (
            "gpu.example.com".to_string(),
            DeviceMismatch {
                missing: 2,
                extra: 0,
            },
        ),
        (
            "nic.example.com".to_string(),
            DeviceMismatch {
                missing: 0,
                extra: 1,
            },
        ),
    ]);
    let text = record(&metrics, &outcome);
    assert!(text.contains("# TYPE cluster_autoscaler_dra_node_template_resources_mismatch gauge"));
    for (series, value) in [
        (
            "cluster_autoscaler_dra_node_template_resources_mismatch{driver=\"gpu.example.com\",mismatch_type=\"missing\"}",
            2.0,
        ),
        (
            "cluster_autoscaler_dra_node_template_resources_mismatch{driver=\"gpu.example.com\",mismatch_type=\"extra\"}",
            0.0,
        ),
        (
            "cluster_autoscaler_dra_node_template_resources_mismatch{driver=\"nic.example.com\",mismatch_type=\"extra\"}",
            1.0,
        ),
    ] {
        assert_eq!(line_value(&text, series), Some(value), "{series}\n{text}");
    }
    outcome
        .cluster_state
        .device_mismatches
        .remove("nic.example.com");
    let text = record(&metrics, &outcome);
    assert!(!text.contains("nic.example.com"), "{text}");
}

/// Every family the registry describes is served with the type it is described with, and
/// everything served is described.
#[test]
fn the_families_listed_are_the_families_served() {
    let metrics = AutoscalerMetrics::new().unwrap();
    let mut options = AutoscalingOptions::default();
    options.set("emit-per-nodegroup-metrics", "true").unwrap();
    let mut outcome = outcome_at(NOW);
    outcome.node_groups = vec![ferroscale_core::scale_up::NodeGroupView::new(
        "g", 0, 3, 1, None,
    )];
    outcome.cluster_state.groups = vec![ferroscale_core::cluster_state::GroupState {
        group_id: "g".into(),
        min_size: 0,
        max_size: 3,
        target_size: 1,
        counts: Default::default(),
        acceptable_min: 1,
        acceptable_max: 1,
        upcoming: 0,
        registered_upcoming: Vec::new(),
        scaling_up: false,
        healthy: true,
    }];
    outcome.cluster_state.device_mismatches =
        BTreeMap::from([("d".to_string(), DeviceMismatch::default())]);
    outcome.node_taints = BTreeMap::from([("other", 1)]);
    let mut plan = ScaleUpPlan::empty(ScaleUpStatus::Successful);
    plan.binpacking_estimates = vec![BinpackingEstimate {
        group_id: "g".into(),
        instance_type: String::new(),
        cpu_capacity_milli: 1000,
        namespaces: 1,
        equivalence_groups: 1,
    }];
    outcome.scale_up = Some(plan);
    outcome.group_accelerators = BTreeMap::from([("g".to_string(), gpu_labels("generic"))]);
    outcome.scale_up_execution = Some(execution(
        vec![increase("g", 1, 2)],
        vec![increase("g", 2, 3)],
    ));
    outcome.deleted_nodes.push(CompletedDeletion {
        node: "n".into(),
        group_id: "g".into(),
        kind: RemovalKind::Empty,
        unready: false,
    });
    outcome.deleted_node_accelerators = BTreeMap::from([("n".to_string(), gpu_labels("generic"))]);
    let mut scale_down = ScaleDownPlan::empty(ScaleDownStatus::NoCandidates, ScaleDownState::new());
    scale_down
        .removal_latencies
        .push(ferroscale_core::scale_down::RemovalLatency {
            node: "n".into(),
            deleted: true,
            delay_reason: "none".into(),
            latency: Duration::from_secs(3),
        });
    outcome.scale_down = Some(scale_down);
    metrics.record_loop(&outcome, &options, Duration::ZERO);
    let text = metrics.render();
    let served: BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .collect();
    let families = metrics.families();
    let described: BTreeMap<&str, &str> = families
        .iter()
        .map(|f| (f.name.as_str(), f.kind.as_str()))
        .collect();
    assert_eq!(served, described);
    assert_eq!(families.len(), 43, "{described:?}");
    assert!(
        families
            .iter()
            .all(|f| f.name.starts_with("cluster_autoscaler_"))
    );
    let per_group: Vec<&str> = families
        .iter()
        .filter(|f| f.per_node_group)
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(per_group.len(), 6, "{per_group:?}");
    let summary = families
        .iter()
        .find(|f| f.kind == Kind::Summary)
        .expect("a summary");
    assert_eq!(
        summary.series_names(),
        vec![
            "cluster_autoscaler_function_duration_quantile_seconds",
            "cluster_autoscaler_function_duration_quantile_seconds_sum",
            "cluster_autoscaler_function_duration_quantile_seconds_count",
        ]
    );
}
