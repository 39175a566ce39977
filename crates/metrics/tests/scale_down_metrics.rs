//! The metrics behind `--max-node-skip-eval-time-tracker-enabled` (docs/behaviour.md OBS-120),
//! `--node-removal-latency-tracking-enabled` (OBS-121) and `--emit-per-nodegroup-metrics`
//! (OBS-122): upstream's names, types and labels, filled from a loop outcome.

use std::time::Duration;

use ferroscale_core::AutoscalingOptions;
use ferroscale_core::autoscaler::LoopOutcome;
use ferroscale_core::cluster_state::{GroupState, ReadinessCounts};
use ferroscale_core::scale_down::{RemovalLatency, ScaleDownPlan, ScaleDownState, ScaleDownStatus};
use ferroscale_core::scale_up::NodeGroupView;
use ferroscale_metrics::AutoscalerMetrics;
use ferroscale_model::Timestamp;

fn line_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn outcome_with_plan(plan: ScaleDownPlan) -> LoopOutcome {
    let mut outcome = LoopOutcome {
        now: Timestamp::from_secs(1_700_000_000),
        ..LoopOutcome::default()
    };
    outcome.scale_down = Some(plan);
    outcome
}

/// Checks docs/behaviour.md OBS-120: `max_node_skip_eval_duration_seconds` is a gauge set from the
/// plan's measurement.
#[test]
fn max_node_skip_eval_duration_is_a_gauge_in_seconds() {
    let metrics = AutoscalerMetrics::new().unwrap();
    let text = metrics.render();
    assert!(
        text.contains("# TYPE cluster_autoscaler_max_node_skip_eval_duration_seconds gauge"),
        "{text}"
    );
    let mut plan = ScaleDownPlan::empty(ScaleDownStatus::NoCandidates, ScaleDownState::new());
    plan.max_node_skip_eval = Some(Duration::from_secs(90));
    metrics.record_loop(
        &outcome_with_plan(plan),
        &AutoscalingOptions::default(),
        Duration::ZERO,
    );
    assert_eq!(
        line_value(
            &metrics.render(),
            "cluster_autoscaler_max_node_skip_eval_duration_seconds"
        ),
        Some(90.0)
    );
}

/// Checks docs/behaviour.md OBS-121: `node_removal_latency_seconds` is a histogram labelled
/// `deleted` and `delay_reason`.
#[test]
fn node_removal_latency_is_a_histogram_by_deleted_and_delay_reason() {
    let metrics = AutoscalerMetrics::new().unwrap();
    let mut plan = ScaleDownPlan::empty(ScaleDownStatus::NoCandidates, ScaleDownState::new());
    plan.removal_latencies = vec![
        RemovalLatency {
            node: "n1".into(),
            deleted: true,
            delay_reason: "none".into(),
            latency: Duration::from_secs(120),
        },
        RemovalLatency {
            node: "n2".into(),
            deleted: false,
            delay_reason: "NodeGroupMinSizeReached".into(),
            latency: Duration::from_secs(30),
        },
    ];
    metrics.record_loop(
        &outcome_with_plan(plan),
        &AutoscalingOptions::default(),
        Duration::ZERO,
    );
    let text = metrics.render();
    assert!(
        text.contains("# TYPE cluster_autoscaler_node_removal_latency_seconds histogram"),
        "{text}"
    );
    assert_eq!(
        line_value(
            &text,
            "cluster_autoscaler_node_removal_latency_seconds_sum{delay_reason=\"none\",deleted=\"true\"}"
        ),
        Some(120.0),
        "{text}"
    );
    assert_eq!(
        line_value(
            &text,
            "cluster_autoscaler_node_removal_latency_seconds_count{delay_reason=\"NodeGroupMinSizeReached\",deleted=\"false\"}"
        ),
        Some(1.0),
        "{text}"
    );
    // 19 buckets from 1 s growing by 1.5, plus +Inf.
    assert_eq!(
        text.matches(
            "cluster_autoscaler_node_removal_latency_seconds_bucket{delay_reason=\"none\",deleted=\"true\""
        )
        .count(),
        20
    );
}

fn group_state(id: &str, healthy: bool, ready: usize) -> GroupState {
    GroupState {
        group_id: id.into(),
        min_size: 1,
        max_size: 5,
        target_size: 3,
        counts: ReadinessCounts {
            registered: ready,
            ready,
            ..ReadinessCounts::default()
        },
        acceptable_min: 0,
        acceptable_max: 5,
        upcoming: 0,
        registered_upcoming: Vec::new(),
        scaling_up: false,
        healthy,
    }
}

/// Checks docs/behaviour.md OBS-122: the per-node-group gauges exist only with
/// `--emit-per-nodegroup-metrics` and carry each group's bounds, target, health, backoff and node
/// counts under upstream's names and labels.
#[test]
fn per_node_group_gauges_only_with_the_flag() {
    let mut outcome = LoopOutcome {
        now: Timestamp::from_secs(1_700_000_000),
        ..LoopOutcome::default()
    };
    outcome.node_groups = vec![
        NodeGroupView::new("g1", 1, 5, 3, None),
        NodeGroupView::new("g2", 0, 10, 2, None),
    ];
    outcome.cluster_state.groups = vec![group_state("g1", true, 3), group_state("g2", false, 2)];
    // g2 is unhealthy and backed off: the backoff shows whatever the health.
    outcome
        .node_group_backoffs
        .insert("g2".into(), "QUOTA_EXCEEDED".into());

    let metrics = AutoscalerMetrics::new().unwrap();
    metrics.record_loop(&outcome, &AutoscalingOptions::default(), Duration::ZERO);
    let text = metrics.render();
    assert!(
        !text.contains("cluster_autoscaler_node_group_min_count"),
        "not without the flag"
    );

    let mut options = AutoscalingOptions::default();
    options.set("emit-per-nodegroup-metrics", "true").unwrap();
    metrics.record_loop(&outcome, &options, Duration::ZERO);
    let text = metrics.render();
    for (series, value) in [
        (
            "cluster_autoscaler_node_group_min_count{node_group=\"g1\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_node_group_max_count{node_group=\"g2\"}",
            10.0,
        ),
        (
            "cluster_autoscaler_node_group_target_count{node_group=\"g2\"}",
            2.0,
        ),
        (
            "cluster_autoscaler_node_group_healthiness{node_group=\"g1\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_node_group_healthiness{node_group=\"g2\"}",
            0.0,
        ),
        (
            "cluster_autoscaler_node_group_backoff_status{node_group=\"g2\",reason=\"QUOTA_EXCEEDED\"}",
            1.0,
        ),
        (
            "cluster_autoscaler_node_group_backoff_status{node_group=\"g1\",reason=\"\"}",
            0.0,
        ),
        (
            "cluster_autoscaler_nodes_count_per_node_group{node_group=\"g1\",state=\"ready\"}",
            3.0,
        ),
    ] {
        assert_eq!(line_value(&text, series), Some(value), "{series}\n{text}");
    }
    assert!(text.contains("# TYPE cluster_autoscaler_node_group_target_count gauge"));
}
