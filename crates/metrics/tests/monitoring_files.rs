//! The Grafana dashboard and the Prometheus alert rules Ferroscale ships (docs/operations.md,
//! "Dashboard and alerts"): Prometheus' own `promtool check rules` accepts the rules; every query
//! is valid PromQL (parsed by `promql-parser`, which also names what the query reads), every
//! series it reads is one `/metrics` serves, with labels that series has and label values
//! Ferroscale sets; the rules' alerts carry what the docs promise; and the Helm chart's copies are
//! the plain files' content.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferroscale_core::AutoscalingOptions;
use ferroscale_core::autoscaler::LoopOutcome;
use ferroscale_metrics::{AutoscalerMetrics, Family, Kind};
use ferroscale_model::Timestamp;
use promql_parser::label::MatchOp;
use promql_parser::parser::{Expr, LabelModifier, VectorSelector};
use serde::Deserialize;

/// Labels Prometheus adds to every series of a target (`job`, `instance`) and those the
/// Prometheus Operator's ServiceMonitor adds (`namespace`, `pod`, `service`, `container`,
/// `endpoint`).
const TARGET_LABELS: [&str; 7] = [
    "job",
    "instance",
    "namespace",
    "pod",
    "service",
    "container",
    "endpoint",
];

/// The alerts docs/operations.md describes.
const ALERTS: [&str; 8] = [
    "FerroscaleClusterUnsafeToAutoscale",
    "FerroscaleNodeGroupUnhealthy",
    "FerroscaleNodeGroupBackedOff",
    "FerroscaleScaleUpsFailing",
    "FerroscaleLoopNotRunning",
    "FerroscaleIterationsFailing",
    "FerroscaleNodeDeletionsPendingTooLong",
    "FerroscaleErrorsRising",
];

/// The families the dashboard must show (its panels: health, nodes, pods, scaling and
/// failures, node groups, the loop, errors, evictions, deletions).
const DASHBOARD_FAMILIES: [&str; 13] = [
    "cluster_autoscaler_cluster_safe_to_autoscale",
    "cluster_autoscaler_nodes_count",
    "cluster_autoscaler_unschedulable_pods_count",
    "cluster_autoscaler_scaled_up_nodes_total",
    "cluster_autoscaler_scaled_down_nodes_total",
    "cluster_autoscaler_failed_scale_ups_total",
    "cluster_autoscaler_node_group_healthiness",
    "cluster_autoscaler_node_group_backoff_status",
    "cluster_autoscaler_function_duration_quantile_seconds",
    "cluster_autoscaler_last_activity",
    "cluster_autoscaler_errors_total",
    "cluster_autoscaler_evicted_pods_total",
    "cluster_autoscaler_pending_node_deletions",
];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// What `/metrics` serves: every family, and the label values Ferroscale sets for labels whose
/// values are fixed (those a loop sets, read from a render after one).
struct Served {
    /// Series name (with `_bucket`, `_sum`, `_count`) → its family.
    series: BTreeMap<String, Family>,
    /// (family, label) → values seen in a render.
    values: BTreeMap<(String, String), BTreeSet<String>>,
}

/// Labels whose values come from the cluster (group names, backoff codes, GPU names, drivers),
/// not from a fixed set.
const OPEN_LABELS: [&str; 9] = [
    "node_group",
    "gpu_resource_name",
    "gpu_name",
    "dra_drivers",
    "driver",
    "instance_type",
    "cpu_count",
    "namespace_count",
    "group_type",
];

impl Served {
    fn new() -> Served {
        let metrics = AutoscalerMetrics::new().expect("registry");
        let mut series = BTreeMap::new();
        for family in metrics.families() {
            for name in family.series_names() {
                series.insert(name, family.clone());
            }
        }
        // One loop of every kind of activity, so the fixed label values are in the render.
        let mut options = AutoscalingOptions::default();
        options
            .set("emit-per-nodegroup-metrics", "true")
            .expect("flag");
        let mut outcome = LoopOutcome {
            now: Timestamp::from_secs(1_700_000_000),
            ..LoopOutcome::default()
        };
        outcome.scale_up = Some(ferroscale_core::scale_up::ScaleUpPlan::empty(
            ferroscale_core::scale_up::ScaleUpStatus::NotNeeded,
        ));
        outcome.scale_down = Some(ferroscale_core::scale_down::ScaleDownPlan::empty(
            ferroscale_core::scale_down::ScaleDownStatus::NoCandidates,
            ferroscale_core::scale_down::ScaleDownState::new(),
        ));
        outcome.function_millis = vec![
            ("updateClusterState", 1.0),
            ("scaleUp", 1.0),
            ("findUnneeded", 1.0),
            ("writeStatus", 1.0),
        ];
        outcome.node_taints = ferroscale_core::cluster_state::ReadinessRules::default()
            .count_taints(std::iter::empty());
        metrics.record_loop(&outcome, &options, Duration::ZERO);
        metrics.observe_function("loopWait", Duration::ZERO);
        let mut values: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for line in metrics.render().lines().filter(|l| !l.starts_with('#')) {
            let Some((name, rest)) = line.split_once('{') else {
                continue;
            };
            let Some((labels, _)) = rest.rsplit_once('}') else {
                continue;
            };
            for pair in labels.split("\",") {
                if let Some((label, value)) = pair.split_once("=\"") {
                    values
                        .entry((name.to_string(), label.to_string()))
                        .or_default()
                        .insert(value.trim_end_matches('"').to_string());
                }
            }
        }
        Served { series, values }
    }

    /// Problems with one selector, each a sentence naming the selector.
    fn check_selector(&self, selector: &VectorSelector, problems: &mut Vec<String>) {
        let name = selector.name.clone().or_else(|| {
            selector
                .matchers
                .matchers
                .iter()
                .find(|m| m.name == "__name__" && m.op == MatchOp::Equal)
                .map(|m| m.value.clone())
        });
        let Some(name) = name else {
            problems.push(format!("{selector}: no metric name"));
            return;
        };
        let Some(family) = self.series.get(&name) else {
            problems.push(format!("{selector}: `{name}` is not served by Ferroscale"));
            return;
        };
        let mut allowed: BTreeSet<&str> = family.labels.iter().map(String::as_str).collect();
        allowed.extend(TARGET_LABELS);
        allowed.insert("__name__");
        if name.ends_with("_bucket") {
            allowed.insert("le");
        }
        if family.kind == Kind::Summary && name == family.name {
            allowed.insert("quantile");
        }
        for matcher in &selector.matchers.matchers {
            if !allowed.contains(matcher.name.as_str()) {
                problems.push(format!(
                    "{selector}: `{name}` has no label `{}`",
                    matcher.name
                ));
                continue;
            }
            let fixed = family.labels.contains(&matcher.name)
                && !OPEN_LABELS.contains(&matcher.name.as_str());
            if matcher.op == MatchOp::Equal && fixed {
                let key = (family.name.clone(), matcher.name.clone());
                let known = self.values.get(&key).cloned().unwrap_or_default();
                let key_with_suffix = (name.clone(), matcher.name.clone());
                let known_suffixed = self
                    .values
                    .get(&key_with_suffix)
                    .cloned()
                    .unwrap_or_default();
                if !known.contains(&matcher.value) && !known_suffixed.contains(&matcher.value) {
                    problems.push(format!(
                        "{selector}: Ferroscale never sets {}=\"{}\" on `{name}` (it sets {:?})",
                        matcher.name,
                        matcher.value,
                        known.union(&known_suffixed).collect::<Vec<_>>()
                    ));
                }
            }
        }
    }

    /// Parses `query` and checks everything it reads; returns the families read.
    fn check_query(&self, what: &str, query: &str, problems: &mut Vec<String>) -> Vec<Family> {
        let expr = match promql_parser::parser::parse(query) {
            Ok(expr) => expr,
            Err(error) => {
                problems.push(format!("{what}: not valid PromQL ({error}): {query}"));
                return Vec::new();
            }
        };
        let mut selectors = Vec::new();
        let mut grouping_labels = Vec::new();
        collect(&expr, &mut selectors, &mut grouping_labels);
        let mut read = Vec::new();
        let mut problems_here = Vec::new();
        for selector in &selectors {
            self.check_selector(selector, &mut problems_here);
            if let Some(family) = selector.name.as_ref().and_then(|n| self.series.get(n)) {
                read.push(family.clone());
            }
        }
        let mut known: BTreeSet<&str> = read
            .iter()
            .flat_map(|f| f.labels.iter().map(String::as_str))
            .collect();
        known.extend(TARGET_LABELS);
        known.extend(["le", "quantile"]);
        for label in &grouping_labels {
            if !known.contains(label.as_str()) {
                problems_here.push(format!(
                    "groups or matches on `{label}`, which none of its series has"
                ));
            }
        }
        problems.extend(problems_here.into_iter().map(|p| format!("{what}: {p}")));
        read
    }
}

/// Every vector selector of `expr` (matrix selectors' included) and every label named in `by`,
/// `without`, `on`, `ignoring` and `group_left`/`group_right`.
fn collect(expr: &Expr, selectors: &mut Vec<VectorSelector>, labels: &mut Vec<String>) {
    let modifier_labels = |modifier: &LabelModifier, labels: &mut Vec<String>| {
        labels.extend(modifier.labels().labels.iter().cloned());
    };
    match expr {
        Expr::VectorSelector(selector) => selectors.push(selector.clone()),
        Expr::MatrixSelector(matrix) => selectors.push(matrix.vs.clone()),
        Expr::Aggregate(aggregate) => {
            if let Some(modifier) = &aggregate.modifier {
                modifier_labels(modifier, labels);
            }
            collect(&aggregate.expr, selectors, labels);
            if let Some(param) = &aggregate.param {
                collect(param, selectors, labels);
            }
        }
        Expr::Binary(binary) => {
            if let Some(modifier) = &binary.modifier {
                if let Some(matching) = &modifier.matching {
                    modifier_labels(matching, labels);
                }
                if let Some(extra) = modifier.card.labels() {
                    labels.extend(extra.labels.iter().cloned());
                }
            }
            collect(&binary.lhs, selectors, labels);
            collect(&binary.rhs, selectors, labels);
        }
        Expr::Unary(unary) => collect(&unary.expr, selectors, labels),
        Expr::Paren(paren) => collect(&paren.expr, selectors, labels),
        Expr::Subquery(subquery) => collect(&subquery.expr, selectors, labels),
        Expr::Call(call) => {
            for arg in &call.args.args {
                collect(arg, selectors, labels);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// A Prometheus rules file's group, every field Prometheus accepts and no other.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    name: String,
    interval: Option<String>,
    limit: Option<u64>,
    query_offset: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Rule {
    alert: Option<String>,
    record: Option<String>,
    expr: String,
    #[serde(rename = "for")]
    for_: Option<String>,
    keep_firing_for: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    groups: Vec<RuleGroup>,
}

fn helm_rules() -> Vec<RuleGroup> {
    let path = deploy_dir().join("helm/ferroscale/files/prometheus-rules.yaml");
    serde_yaml_ng::from_str(&read(&path))
        .unwrap_or_else(|e| panic!("{} is not a list of rule groups: {e}", path.display()))
}

fn plain_rules() -> RulesFile {
    let path = deploy_dir().join("monitoring/prometheus-rules.yaml");
    serde_yaml_ng::from_str(&read(&path))
        .unwrap_or_else(|e| panic!("{} is not a Prometheus rules file: {e}", path.display()))
}

/// The `$labels.<name>` an annotation's template reads, and whether its `{{ }}` are balanced.
fn template_labels(text: &str) -> Result<Vec<String>, String> {
    let mut labels = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let Some(end) = rest[start..].find("}}") else {
            return Err(format!("unclosed {{{{ in {text:?}"));
        };
        let action = &rest[start + 2..start + end];
        let mut words = action.split("$labels.").skip(1);
        for word in words.by_ref() {
            let name: String = word
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            labels.push(name);
        }
        rest = &rest[start + end + 2..];
    }
    if rest.contains("}}") {
        return Err(format!("unopened }}}} in {text:?}"));
    }
    Ok(labels)
}

#[test]
fn the_alert_rules_are_valid_and_read_only_series_ferroscale_serves() {
    let served = Served::new();
    let groups = helm_rules();
    let mut problems = Vec::new();
    let mut group_names = BTreeSet::new();
    let mut alerts = Vec::new();
    for group in &groups {
        if !group_names.insert(group.name.clone()) {
            problems.push(format!("group {} is defined twice", group.name));
        }
        for rule in &group.rules {
            let name = match (&rule.alert, &rule.record) {
                (Some(alert), None) => alert.clone(),
                (None, Some(record)) => record.clone(),
                _ => {
                    problems.push(format!(
                        "a rule of {} is neither alert nor record",
                        group.name
                    ));
                    continue;
                }
            };
            let read = served.check_query(&name, &rule.expr, &mut problems);
            for duration in [&rule.for_, &rule.keep_firing_for].into_iter().flatten() {
                if let Err(error) = promql_parser::util::parse_duration(duration) {
                    problems.push(format!("{name}: bad duration {duration:?}: {error}"));
                }
            }
            if rule.alert.is_none() {
                continue;
            }
            alerts.push(name.clone());
            if rule.for_.is_none() {
                problems.push(format!("{name}: no `for`"));
            }
            match rule.labels.get("severity").map(String::as_str) {
                Some("warning" | "critical" | "info") => {}
                other => problems.push(format!("{name}: severity {other:?}")),
            }
            for annotation in ["summary", "description"] {
                if rule
                    .annotations
                    .get(annotation)
                    .is_none_or(|a| a.trim().is_empty())
                {
                    problems.push(format!("{name}: no {annotation} annotation"));
                }
            }
            let mut known: BTreeSet<&str> = read
                .iter()
                .flat_map(|f| f.labels.iter().map(String::as_str))
                .collect();
            known.extend(TARGET_LABELS);
            for (key, text) in &rule.annotations {
                match template_labels(text) {
                    Err(error) => problems.push(format!("{name}: {key}: {error}")),
                    Ok(labels) => {
                        for label in labels {
                            if !known.contains(label.as_str()) {
                                problems.push(format!(
                                    "{name}: {key} reads $labels.{label}, which its series lack"
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    let missing: Vec<&str> = ALERTS
        .iter()
        .copied()
        .filter(|a| !alerts.iter().any(|x| x == a))
        .collect();
    if !missing.is_empty() {
        problems.push(format!("alerts documented but missing: {missing:?}"));
    }
    let unique: BTreeSet<&String> = alerts.iter().collect();
    if unique.len() != alerts.len() {
        problems.push(format!("an alert name is used twice: {alerts:?}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `promtool check rules` (built by `scripts/control-plane/build.sh promtool`; without it this
/// test fails and says how to build it): the file loads as Prometheus loads a rules file, every
/// expression parses, every annotation template compiles, and no rule is defined twice.
#[test]
fn promtool_accepts_the_rules() {
    let promtool = ferroscale_testing_control_plane::locate_promtool()
        .unwrap_or_else(|error| panic!("{error}"));
    let rules = deploy_dir().join("monitoring/prometheus-rules.yaml");
    let output = std::process::Command::new(&promtool)
        .args(["check", "rules", "--lint=all", "--lint-fatal"])
        .arg(&rules)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", promtool.display()));
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool check rules failed:\n{report}"
    );
    assert!(
        report.contains(&format!("SUCCESS: {} rules found", ALERTS.len())),
        "{report}"
    );
}

/// `promtool test rules tests/alert_rules/alerts_test.yaml`: on synthetic series, the alerts
/// fire when docs/operations.md says and not before, a standby replica's initial gauges fire
/// nothing, and the annotations read as written.
#[test]
fn promtool_runs_the_alerts_unit_tests() {
    let promtool = ferroscale_testing_control_plane::locate_promtool()
        .unwrap_or_else(|error| panic!("{error}"));
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/alert_rules/alerts_test.yaml");
    let output = std::process::Command::new(&promtool)
        .args(["test", "rules"])
        .arg(&tests)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", promtool.display()));
    assert!(
        output.status.success(),
        "promtool test rules failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_plain_rules_file_holds_the_charts_groups() {
    assert_eq!(plain_rules().groups, helm_rules());
}

#[test]
fn the_plain_dashboard_is_the_charts() {
    let chart = read(&deploy_dir().join("helm/ferroscale/files/grafana-dashboard.json"));
    let plain = read(&deploy_dir().join("monitoring/grafana-dashboard.json"));
    assert!(
        chart == plain,
        "deploy/monitoring/grafana-dashboard.json differs from the chart's copy; copy one over the other"
    );
}

/// Grafana's variables replaced by values of their kind, so the queries parse as PromQL.
fn substitute_grafana_variables(query: &str) -> String {
    query
        .replace("${__rate_interval}", "5m")
        .replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h")
        .replace("$job", ".*")
}

#[test]
fn the_dashboard_queries_read_only_series_ferroscale_serves() {
    let served = Served::new();
    let path = deploy_dir().join("helm/ferroscale/files/grafana-dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&read(&path))
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let mut problems = Vec::new();
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating variables");
    assert!(
        variables.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a `datasource` variable of Prometheus data sources"
    );
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let query = variable["definition"].as_str().unwrap_or_default();
        let Some(inner) = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
        else {
            problems.push(format!(
                "variable {}: unexpected query {query}",
                variable["name"]
            ));
            continue;
        };
        let (selector, label) = inner.rsplit_once(',').expect("label_values(metric, label)");
        let read = served.check_query(
            &format!("variable {}", variable["name"]),
            selector.trim(),
            &mut problems,
        );
        let label = label.trim();
        if !TARGET_LABELS.contains(&label)
            && !read.iter().any(|f| f.labels.iter().any(|l| l == label))
        {
            problems.push(format!("variable {}: no label {label}", variable["name"]));
        }
    }
    let mut read_families = BTreeSet::new();
    let mut panels = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] == "row" {
            continue;
        }
        panels += 1;
        let title = panel["title"].as_str().unwrap_or("untitled");
        if panel["datasource"]["uid"] != "${datasource}" {
            problems.push(format!("panel {title}: not on the datasource variable"));
        }
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("panel {title}: no query"));
        }
        for target in targets {
            if target["datasource"]["uid"] != "${datasource}" {
                problems.push(format!(
                    "panel {title}: a query not on the datasource variable"
                ));
            }
            let expr = target["expr"].as_str().unwrap_or_default();
            let query = substitute_grafana_variables(expr);
            for family in served.check_query(&format!("panel {title}"), &query, &mut problems) {
                read_families.insert(family.name);
            }
        }
    }
    for family in DASHBOARD_FAMILIES {
        if !read_families.contains(family) {
            problems.push(format!("no panel shows {family}"));
        }
    }
    assert!(panels >= 10, "{panels} panels");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checks above would pass vacuously if they never failed: a wrong name, label or value is
/// caught.
#[test]
fn a_query_on_a_series_ferroscale_does_not_serve_is_caught() {
    let served = Served::new();
    let mut problems = Vec::new();
    served.check_query(
        "typo",
        "cluster_autoscaler_cluster_safe_to_autoscale_typo",
        &mut problems,
    );
    served.check_query(
        "label",
        "cluster_autoscaler_errors_total{reason=\"x\"}",
        &mut problems,
    );
    served.check_query(
        "value",
        "cluster_autoscaler_last_activity{activity=\"mian\"}",
        &mut problems,
    );
    served.check_query(
        "grouping",
        "sum by (node) (cluster_autoscaler_nodes_count)",
        &mut problems,
    );
    served.check_query(
        "syntax",
        "sum(cluster_autoscaler_nodes_count",
        &mut problems,
    );
    assert_eq!(problems.len(), 5, "{problems:#?}");
    let mut fine = Vec::new();
    served.check_query(
        "fine",
        "histogram_quantile(0.9, sum by (le) (rate(cluster_autoscaler_function_duration_seconds_bucket{function=\"main\"}[5m])))",
        &mut fine,
    );
    served.check_query(
        "fine",
        "cluster_autoscaler_function_duration_quantile_seconds{quantile=\"0.99\",function=\"scaleUp\"}",
        &mut fine,
    );
    assert!(fine.is_empty(), "{fine:#?}");
}
