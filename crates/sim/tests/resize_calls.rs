//! Pods arriving at a controller's pace and the resize calls they cost: the bundled
//! `controller-rate` scenario played through the real engine, with the calls per group and per
//! burst in the summary, the JSON and the HTML report (docs/scenario.md, "Pods arriving over
//! time" and "Resize calls and bursts").

use std::path::Path;

use ferroscale_sim::record::{EntryKind, SimulationResult};
use ferroscale_sim::report::{render_html, render_json, render_text};
use ferroscale_sim::runner::{options_for, simulate};
use ferroscale_sim::scenario::{Scenario, bundled, parse_scenario};

fn scenario() -> Scenario {
    let text = bundled("controller-rate").expect("the bundled controller-rate scenario");
    parse_scenario(text, "controller-rate", Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

/// The scenario with its loops every `scan_interval`, proactive scale-up at its default (on).
fn run(scan_interval: &str) -> SimulationResult {
    run_with(scan_interval, &[])
}

/// The scenario with upstream's default of no proactive scale-up: every loop sees only the pods
/// created so far.
fn run_without_proactive(scan_interval: &str) -> SimulationResult {
    run_with(scan_interval, &[("enable-proactive-scaleup", "false")])
}

fn run_with(scan_interval: &str, more: &[(&str, &str)]) -> SimulationResult {
    let scenario = scenario();
    let mut overrides = vec![("scan-interval".to_string(), scan_interval.to_string())];
    overrides.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let options = options_for(&scenario, &overrides).unwrap_or_else(|e| panic!("{e}"));
    simulate(&scenario, options)
}

/// The scenario keeps its promise: two waves of 300 pods, 20 nodes each time, every pod running;
/// the group's calls fall into exactly two bursts, each asking for the 20 nodes in total.
#[test]
fn two_waves_make_two_bursts_of_calls() {
    let result = run("1s");
    assert!(
        result.summary.all_expectations_hold(),
        "{}",
        render_text(&result)
    );
    let web = &result.summary.groups["web"];
    let bursts: Vec<(f64, usize)> = web
        .resize
        .bursts
        .iter()
        .map(|b| (b.first_call_seconds, b.nodes))
        .collect();
    assert_eq!(bursts.len(), 2, "{bursts:?}");
    assert_eq!(bursts[0].1, 20);
    assert_eq!(bursts[1].1, 20);
    assert!(
        bursts[1].0 >= 1500.0,
        "the second wave starts at 25m: {bursts:?}"
    );
    assert_eq!(
        web.resize.resize_calls,
        web.resize.bursts.iter().map(|b| b.calls).sum::<usize>()
    );
    // Every call the engine made succeeded here, so the cloud saw as many as the engine's
    // scale-ups.
    assert_eq!(web.resize.resize_calls, web.scale_ups);
}

/// Pods arrive at 20 a second: the first wave is created in 15 steps of 20 pods, one a second,
/// numbered across the steps.
#[test]
fn pods_arrive_at_the_controllers_rate() {
    let result = run("10s");
    let created: Vec<(i64, &str)> = result
        .timeline
        .iter()
        .filter(|e| e.kind == EntryKind::Scenario && e.what.starts_with("created"))
        .filter(|e| e.at.secs() < 60)
        .map(|e| (e.at.secs(), e.what.as_str()))
        .collect();
    assert_eq!(created.len(), 15, "{created:?}");
    assert_eq!(
        created[0],
        (0, "created 20 pod(s) web-0 … web-19 in namespace shop")
    );
    assert_eq!(
        created[14],
        (14, "created 20 pod(s) web-280 … web-299 in namespace shop")
    );
}

/// Without proactive scale-up, the trade-off between reaction and calls: loops every second
/// react sooner but resize the group many times per wave; loops every 10 s make at most 3 calls
/// per burst and the pods wait longer. Both end with the same 20 nodes.
#[test]
fn without_proactive_scale_up_faster_loops_react_sooner_and_call_more() {
    let fast = run_without_proactive("1s");
    let slow = run_without_proactive("10s");
    let (fast_web, slow_web) = (&fast.summary.groups["web"], &slow.summary.groups["web"]);
    assert!(
        slow_web.resize.max_calls_per_burst <= 3,
        "{}",
        render_text(&slow)
    );
    assert!(
        fast_web.resize.max_calls_per_burst > slow_web.resize.max_calls_per_burst + 3,
        "1s: {:?}, 10s: {:?}",
        fast_web.resize,
        slow_web.resize
    );
    assert!(
        fast.summary.pods.wait_seconds.p50 < slow.summary.pods.wait_seconds.p50,
        "1s: {:?}, 10s: {:?}",
        fast.summary.pods.wait_seconds,
        slow.summary.pods.wait_seconds
    );
    assert_eq!(fast_web.final_size, slow_web.final_size);
}

/// With proactive scale-up (the default) the replicas the ReplicaSet has not created yet are
/// asked for with the ones it has. In the simulator the first loop that acts (at 2 s) plans for
/// all but the 20 pods created at that very second: they count among the ReplicaSet's pods, but
/// a pod is planned for only once it is older than `--new-pod-scale-up-delay` (0 s, strictly, as
/// upstream), so the next loop asks for their node. Two calls per wave instead of eight, and the
/// pods wait no longer than with loops that see only the pods created so far.
#[test]
fn proactive_scale_up_asks_for_a_wave_in_two_calls_not_eight() {
    let proactive = run("1s");
    let reactive = run_without_proactive("1s");
    let (web, reactive_web) = (
        &proactive.summary.groups["web"],
        &reactive.summary.groups["web"],
    );
    assert!(
        proactive.summary.all_expectations_hold(),
        "{}",
        render_text(&proactive)
    );
    let calls: Vec<(f64, usize, usize)> = web
        .resize
        .bursts
        .iter()
        .map(|b| (b.first_call_seconds, b.calls, b.nodes))
        .collect();
    assert_eq!(
        calls,
        [(2.0, 2, 20), (1502.0, 2, 20)],
        "{}",
        render_text(&proactive)
    );
    assert_eq!(reactive_web.resize.max_calls_per_burst, 8);
    assert!(
        proactive.summary.pods.wait_seconds.p50 <= reactive.summary.pods.wait_seconds.p50,
        "proactive: {:?}, reactive: {:?}",
        proactive.summary.pods.wait_seconds,
        reactive.summary.pods.wait_seconds
    );
    assert_eq!(web.final_size, reactive_web.final_size);
}

/// The counts reach every output: the text summary's table and burst lines, the JSON summary and
/// the HTML report's tables.
#[test]
fn every_report_counts_the_calls() {
    let result = run("1s");
    let web = &result.summary.groups["web"];
    let text = render_text(&result);
    assert!(
        text.contains("resize calls  bursts  calls/burst max"),
        "{text}"
    );
    assert!(text.contains("web resize bursts: "), "{text}");
    let json: serde_json::Value = serde_json::from_str(&render_json(&result)).unwrap();
    assert_eq!(
        json["groups"]["web"]["resizeCalls"],
        web.resize.resize_calls
    );
    assert_eq!(
        json["groups"]["web"]["maxCallsPerBurst"],
        web.resize.max_calls_per_burst
    );
    assert_eq!(json["groups"]["web"]["bursts"][1]["nodes"], 20);
    let html = render_html(&result);
    assert!(html.contains("<h2>Resize calls per burst</h2>"));
    assert_eq!(
        html.matches("<tr><td>web</td><td class=\"num\">").count(),
        1 + web.resize.bursts.len(),
        "one row in the groups table, one per burst"
    );
}
