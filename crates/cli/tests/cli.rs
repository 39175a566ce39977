//! The `ferroscale` binary as a user runs it: exit statuses, JSON output, error messages.

use std::path::PathBuf;
use std::process::{Command, Output};

fn ferroscale(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferroscale"))
        .args(args)
        .output()
        .expect("the ferroscale binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Writes a scenario file unique to this test.
fn scenario_file(test: &str, text: &str) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("ferroscale-cli-{}-{test}.yaml", std::process::id()));
    std::fs::write(&path, text).expect("temp dir is writable");
    path
}

const SMALL: &str = r#"apiVersion: ferroscale/v1alpha1
kind: Scenario
name: small
duration: 10m
nodeGroups:
  - id: general
    minSize: 0
    maxSize: 10
    initialSize: 1
    provisioningDelay: 60s
    template:
      status:
        allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
events:
  - at: 0s
    create:
      count: 10
      pod:
        apiVersion: v1
        kind: Pod
        metadata: {name: web, namespace: default, labels: {app: web}}
        spec:
          containers:
            - name: web
              image: nginx
              resources: {requests: {cpu: "1", memory: 1Gi}}
expect:
  - at: end
    pendingPods: 0
"#;

#[test]
fn default_scenario_exits_zero() {
    let output = ferroscale(&["simulate"]);
    assert!(
        output.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        stdout(&output),
        stderr(&output)
    );
    let text = stdout(&output);
    assert!(text.contains("Timeline"), "{text}");
    assert!(text.contains("Expectations"), "{text}");
}

#[test]
fn default_scenario_runs_without_arguments() {
    let output = ferroscale(&["simulate"]);
    // Whatever its expectations say, the bundled scenario is valid and runs to the end.
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{}",
        stderr(&output)
    );
    let text = stdout(&output);
    assert!(
        text.contains("Scenario \"default-mixed-workload\""),
        "{text}"
    );
    assert!(text.contains("scale-up"), "{text}");
}

/// Checks docs/behaviour.md SIM-102.
#[test]
fn json_output_has_the_documented_summary_fields() {
    let path = scenario_file("json", SMALL);
    let output = ferroscale(&[
        "simulate",
        path.to_str().unwrap_or_default(),
        "--output",
        "json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("stdout is JSON");
    for field in [
        "scenario",
        "simulatedSeconds",
        "groups",
        "pods",
        "nodeHours",
        "cost",
        "loops",
        "decideMillis",
        "expectations",
    ] {
        assert!(json.get(field).is_some(), "{field} missing: {json}");
    }
    assert_eq!(json["scenario"], "small");
    assert_eq!(json["simulatedSeconds"], 600);
    assert_eq!(json["loops"], 60);
    let group = &json["groups"]["general"];
    for field in [
        "finalSize",
        "maxSize",
        "scaleUps",
        "nodesAdded",
        "nodesRemoved",
    ] {
        assert!(
            group.get(field).is_some(),
            "groups.general.{field} missing: {json}"
        );
    }
    // 10 pods of 1 cpu on 4-cpu nodes: 3 nodes, one of them there from the start.
    assert_eq!(group["finalSize"], 3);
    assert_eq!(group["nodesAdded"], 2);
    let pods = &json["pods"];
    assert_eq!(pods["created"], 10);
    assert_eq!(pods["running"], 10);
    assert_eq!(pods["pending"], 0);
    assert_eq!(pods["neverSchedulable"], 0);
    for p in ["p50", "p99", "max"] {
        assert!(pods["waitSeconds"][p].is_number(), "{json}");
        assert!(json["decideMillis"][p].is_number(), "{json}");
    }
    assert_eq!(json["expectations"][0]["ok"], true);
    assert!(json["expectations"][0]["description"].is_string());
}

#[test]
fn broken_scenario_exits_two_naming_line_and_field() {
    let broken = SMALL.replace("maxSize: 10", "maxSize: lots");
    let path = scenario_file("broken", &broken);
    let output = ferroscale(&["simulate", path.to_str().unwrap_or_default()]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    let line = SMALL
        .lines()
        .position(|l| l.contains("maxSize"))
        .map(|i| i + 1)
        .unwrap_or(0);
    assert!(
        message.contains(&format!(":{line}")),
        "line {line} not named: {message}"
    );
    assert!(message.contains("maxSize"), "field not named: {message}");
    assert!(
        message.contains(path.to_str().unwrap_or_default()),
        "file not named: {message}"
    );
}

#[test]
fn invalid_option_in_the_scenario_exits_two_naming_the_option() {
    let text = SMALL.replace(
        "duration: 10m\n",
        "duration: 10m\noptions:\n  expander: cheapest\n",
    );
    let path = scenario_file("bad-option", &text);
    let output = ferroscale(&["simulate", path.to_str().unwrap_or_default()]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(message.contains("options.expander"), "{message}");
    assert!(
        message.contains(".yaml:6:"),
        "line of the option: {message}"
    );
    assert!(message.contains("cheapest"), "{message}");
}

/// A scenario takes `run`'s flag names: the process's own flags and other providers' change
/// nothing in a simulation and are accepted, and so are the capacity APIs' flags.
#[test]
fn set_takes_the_names_of_run() {
    let output = ferroscale(&[
        "simulate",
        "--output",
        "json",
        "--set",
        "v=4",
        "--set",
        "leader_elect_retry_period=1s",
        "--set",
        "regional=true",
        "--set",
        "scan_interval=20s",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // The capacity APIs' flags are engine flags now: a scenario may turn them on.
    let output = ferroscale(&[
        "simulate",
        "--output",
        "json",
        "--set",
        "enable-provisioning-requests=true",
        "--set",
        "capacity-quotas-enabled=true",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn bad_set_override_exits_two() {
    let output = ferroscale(&["simulate", "--set", "no-such-flag=1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no-such-flag"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn failing_expectation_exits_one_and_says_which() {
    let text = SMALL.replace("pendingPods: 0", "pendingPods: 7");
    let path = scenario_file("failing", &text);
    let output = ferroscale(&["simulate", path.to_str().unwrap_or_default()]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("expectation failed: pending pods = 7 at end (observed 0)"),
        "{message}"
    );
}

#[test]
fn report_flag_writes_a_self_contained_html_file() {
    let path = scenario_file("report", SMALL);
    let report = path.with_extension("html");
    let output = ferroscale(&[
        "simulate",
        path.to_str().unwrap_or_default(),
        "--report",
        report.to_str().unwrap_or_default(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let html = std::fs::read_to_string(&report).expect("report written");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<svg"));
    assert!(!html.contains("<script"));
}

#[test]
fn explain_says_why_pods_triggered_a_scale_up() {
    let path = scenario_file("explain", SMALL);
    let output = ferroscale(&["explain", path.to_str().unwrap_or_default()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("triggered a scale-up of general"), "{text}");
}

/// Three nodes: `g-0` runs a replicated pod using most of it, `g-1` a bare pod (no controller),
/// `g-2` nothing.
const SCALE_DOWN: &str = r#"apiVersion: ferroscale/v1alpha1
kind: Scenario
name: scale-down
duration: 20m
options:
  scale-down-unneeded-time: 10m
nodeGroups:
  - id: g
    minSize: 0
    maxSize: 5
    initialSize: 3
    template:
      status:
        allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
events:
  - at: 0s
    create:
      bind: {nodePrefix: g-, firstIndex: 0}
      pod:
        apiVersion: v1
        kind: Pod
        metadata:
          name: busy
          namespace: default
          ownerReferences:
            - {apiVersion: apps/v1, kind: ReplicaSet, name: busy-1, uid: rs-busy, controller: true}
        spec:
          containers: [{name: c, resources: {requests: {cpu: "3", memory: 1Gi}}}]
  - at: 0s
    create:
      bind: {nodePrefix: g-, firstIndex: 1}
      pod:
        apiVersion: v1
        kind: Pod
        metadata: {name: bare, namespace: default}
        spec:
          containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"#;

#[test]
fn explain_says_why_each_node_is_or_is_not_removed() {
    let path = scenario_file("explain-scale-down", SCALE_DOWN);
    let output = ferroscale(&["explain", path.to_str().unwrap_or_default(), "--at", "5m"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("Scale-down: "), "{text}");
    // The busy node: above the threshold, with its utilization.
    assert!(text.contains("not removable: NotUnderutilized"), "{text}");
    assert!(text.contains("  g-0: g, cpu 75%"), "{text}");
    // The node with a bare pod: the pod and the rule that keep it.
    assert!(
        text.contains("  g-1: g, cpu 25%, memory 6%, pod default/bare breaks rule NotReplicated"),
        "{text}"
    );
    // The empty node: unneeded, how long, and how long it must be.
    assert!(
        text.contains("  g-2: g, cpu 0%, memory 0%, empty, unneeded for 5m; removable once unneeded for more than 10m"),
        "{text}"
    );

    // Later, the empty node is being removed or gone, and the others stay for the same reasons.
    let output = ferroscale(&["explain", path.to_str().unwrap_or_default(), "--at", "15m"]);
    let text = stdout(&output);
    assert!(!text.contains("  g-2:"), "{text}");
    assert!(text.contains("pod default/bare"), "{text}");
}

#[test]
fn help_lists_the_subcommands() {
    let output = ferroscale(&["--help"]);
    assert!(output.status.success());
    let text = stdout(&output);
    assert!(
        text.contains("simulate") && text.contains("explain"),
        "{text}"
    );
}

/// Upstream's binary takes its flags without a subcommand; so does Ferroscale's, as `run`.
#[test]
fn flags_without_a_subcommand_mean_run() {
    let output = ferroscale(&["--scan-interval=10s", "--no-such-flag"]);
    assert_eq!(output.status.code(), Some(2));
    let errors = stderr(&output);
    assert!(errors.contains("unknown flags: --no-such-flag"), "{errors}");
    assert!(errors.contains("--cloud-provider is required"), "{errors}");
}

/// The provider server does not serve plaintext by accident.
#[test]
fn serve_provider_refuses_plaintext_unless_asked() {
    let output = ferroscale(&["serve-provider", "--provider=sim", "--scenario=default"]);
    assert_eq!(output.status.code(), Some(2));
    let errors = stderr(&output);
    assert!(
        errors.contains("--key-cert, --cert, --ca-cert") && errors.contains("--insecure"),
        "{errors}"
    );
}

/// Runs `simulate` (or `explain`) on `text` as a scenario file and expects exit status 2 with an
/// error that names the file, the line of `line_needle` and every one of `parts`.
#[track_caller]
fn assert_refused(subcommand: &str, test: &str, text: &str, line_needle: &str, parts: &[&str]) {
    let path = scenario_file(test, text);
    let output = ferroscale(&[subcommand, path.to_str().unwrap_or_default()]);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    let line = text
        .lines()
        .position(|l| l.contains(line_needle))
        .map(|i| i + 1)
        .unwrap_or(0);
    assert!(
        message.contains(&format!("{}:{line}: ", path.display())),
        "file and line {line} not named: {message}"
    );
    for part in parts {
        assert!(message.contains(part), "{part:?} not in: {message}");
    }
}

#[test]
fn a_scan_interval_below_one_second_exits_two_from_the_file_and_from_set() {
    let text = SMALL.replace(
        "duration: 10m\n",
        "duration: 10m\noptions:\n  scan-interval: 0s\n",
    );
    assert_refused(
        "simulate",
        "scan-interval",
        &text,
        "scan-interval",
        &["options.scan-interval", "\"0s\"", "at most once per 1s"],
    );
    let output = ferroscale(&["simulate", "--set", "scan-interval=0s"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--set scan-interval=0s"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_utilization_threshold_of_five_exits_two() {
    let output = ferroscale(&["explain", "--set", "scale-down-utilization-threshold=5"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("between 0 and 1"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_huge_pod_count_exits_two_before_allocating() {
    let text = SMALL.replace("count: 10", "count: 100000000000");
    assert_refused(
        "simulate",
        "huge-count",
        &text,
        "count:",
        &["events[0].create.count", "100000000000", "1,000,000"],
    );
}

#[test]
fn a_huge_initial_size_exits_two() {
    let text = SMALL
        .replace("maxSize: 10", "maxSize: 100000000")
        .replace("initialSize: 1", "initialSize: 100000000");
    assert_refused(
        "simulate",
        "huge-initial-size",
        &text,
        "initialSize",
        &["nodeGroups[0].initialSize", "100,000 nodes"],
    );
}

#[test]
fn special_files_are_refused_as_scenarios_and_as_objects_files() {
    let output = ferroscale(&["simulate", "/dev/zero"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("/dev/zero: cannot read the scenario: not a regular file"),
        "{}",
        stderr(&output)
    );
    let text = SMALL.replace("events:\n", "objects:\n  - file: /dev/zero\nevents:\n");
    assert_refused(
        "simulate",
        "dev-zero",
        &text,
        "file: /dev/zero",
        &["objects[0].file", "a character device"],
    );
}

#[test]
fn yaml_nested_a_hundred_thousand_levels_exits_two() {
    let text = SMALL.replace(
        "duration: 10m\n",
        &format!(
            "duration: 10m\noptions: {{a: {}}}\n",
            "[".repeat(100_000) + &"]".repeat(100_000)
        ),
    );
    assert_refused(
        "simulate",
        "deep",
        &text,
        "options:",
        &["nested more than 64 levels"],
    );
}

#[test]
fn negative_cpu_and_unknown_pod_fields_exit_two_naming_the_field() {
    assert_refused(
        "simulate",
        "negative-cpu",
        &SMALL.replace("cpu: \"1\"", "cpu: \"-1\""),
        "cpu: \"-1\"",
        &[
            "events[0].create.pod.spec.containers[0].resources.requests.cpu",
            "must not be negative",
        ],
    );
    assert_refused(
        "explain",
        "node-selektor",
        &SMALL.replace(
            "        spec:\n",
            "        spec:\n          nodeSelektor: {disk: ssd}\n",
        ),
        "nodeSelektor",
        &[
            "events[0].create.pod.spec.nodeSelektor",
            "unknown field `nodeSelektor`",
        ],
    );
}

#[test]
fn events_and_expectations_after_the_end_exit_two() {
    assert_refused(
        "simulate",
        "event-after-end",
        &SMALL.replace("  - at: 0s", "  - at: 11m"),
        "at: 11m",
        &["events[0].at", "after the end of the scenario"],
    );
    assert_refused(
        "simulate",
        "expectation-after-end",
        &SMALL.replace("  - at: end", "  - at: 99h"),
        "at: 99h",
        &["expect[0].at", "after the end of the scenario"],
    );
}

#[test]
fn an_unknown_scenario_name_lists_the_bundled_ones() {
    let output = ferroscale(&["simulate", "upstream-9"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    for name in ["default", "upstream-1", "upstream-6", "full-day"] {
        assert!(message.contains(name), "{name} not listed: {message}");
    }
}

#[test]
fn the_json_summary_names_peak_and_configured_sizes_and_pods_never_started() {
    // Twelve 1-CPU pods, but the group stops at 2 nodes of 4 CPUs: 4 pods never start.
    let text = SMALL
        .replace("count: 10", "count: 12")
        .replace("maxSize: 10", "maxSize: 2");
    let path = scenario_file("peak-and-max", &text);
    let output = ferroscale(&[
        "simulate",
        path.to_str().unwrap_or_default(),
        "--output",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("stdout is JSON");
    let group = &json["groups"]["general"];
    assert_eq!(group["peakSize"], 2, "{json}");
    assert_eq!(group["maxSize"], 2, "{json}");
    assert_eq!(json["pods"]["neverStarted"], 4, "{json}");
    assert_eq!(json["pods"]["waitSeconds"]["max"], 600.0, "{json}");
}
