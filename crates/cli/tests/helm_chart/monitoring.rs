//! The monitoring the chart ships besides upstream's ServiceMonitor: Ferroscale's Grafana
//! dashboard as a ConfigMap for Grafana's sidecar, and its alert rules in the PrometheusRule.
//!
//! Both read files of the chart (`files/grafana-dashboard.json`, `files/prometheus-rules.yaml`)
//! that are written elsewhere; these tests render a copy of the chart with files of their own in
//! those places, so what they check is how the templates ship whatever the files say.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::ConfigMap;
use serde_yaml_ng::Value;

use super::{NAMESPACE, RELEASE, Rendered, chart_dir, helm_template_in};

/// A dashboard with what real ones hold: Grafana's own `${...}` variables and `{{...}}` legend
/// templates, which must reach Grafana untouched.
const DASHBOARD: &str = r#"{
  "title": "Ferroscale",
  "uid": "ferroscale",
  "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
  "panels": [
    {
      "title": "Unschedulable pods",
      "datasource": {"uid": "${datasource}"},
      "targets": [{"expr": "sum(cluster_autoscaler_unschedulable_pods_count)", "legendFormat": "{{type}}"}]
    }
  ]
}
"#;

/// Alert groups as Prometheus reads them (the content of `spec.groups`), one with an interval of
/// its own, annotations using Prometheus's `{{ $labels }}` templating.
const RULES: &str = r#"- name: ferroscale.health
  rules:
    - alert: FerroscaleClusterUnsafeToAutoscale
      expr: cluster_autoscaler_cluster_safe_to_autoscale == 0
      for: 15m
      labels: {severity: critical}
      annotations:
        summary: "The cluster is unsafe to autoscale"
- name: ferroscale.node-groups
  interval: 30s
  rules:
    - alert: FerroscaleNodeGroupBackoff
      expr: cluster_autoscaler_node_group_backoff_status == 1
      for: 10m
      labels: {severity: warning}
      annotations:
        description: "Node group {{ $labels.node_group }} is backing off."
"#;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target)
                .unwrap_or_else(|e| panic!("{}: {e}", entry.path().display()));
        }
    }
}

/// A copy of the chart whose `files/` directory holds exactly `files` (name, content).
struct ChartCopy {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl ChartCopy {
    fn with_files(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("ferroscale");
        copy_dir(&chart_dir(), &path);
        let files_dir = path.join("files");
        if files_dir.exists() {
            std::fs::remove_dir_all(&files_dir).expect("remove the chart's files");
        }
        std::fs::create_dir_all(&files_dir).expect("create files/");
        for (name, content) in files {
            std::fs::write(files_dir.join(name), content).expect("write a chart file");
        }
        ChartCopy { _dir: dir, path }
    }

    fn render(&self, values: &str) -> Rendered {
        Rendered::of_chart(&self.path, &[values])
    }

    fn refuse(&self, values: &str) -> String {
        helm_template_in(&self.path, &[values])
            .map(|text| panic!("rendered {values:?}:\n{text}"))
            .unwrap_err()
    }
}

fn shipped() -> ChartCopy {
    ChartCopy::with_files(&[
        ("grafana-dashboard.json", DASHBOARD),
        ("prometheus-rules.yaml", RULES),
    ])
}

fn dashboard_config_maps(rendered: &Rendered) -> Vec<ConfigMap> {
    rendered
        .all("ConfigMap")
        .into_iter()
        .map(|object| serde_yaml_ng::from_value::<ConfigMap>(object.clone()).expect("ConfigMap"))
        .filter(|config_map| {
            config_map
                .data
                .as_ref()
                .is_some_and(|data| data.contains_key("ferroscale.json"))
        })
        .collect()
}

#[test]
fn the_dashboard_configmap_ships_the_dashboard_file_for_grafanas_sidecar() {
    let chart = shipped();
    assert!(dashboard_config_maps(&chart.render("{}\n")).is_empty());

    let rendered = chart.render("grafanaDashboard: {enabled: true}\n");
    let config_maps = dashboard_config_maps(&rendered);
    assert_eq!(config_maps.len(), 1);
    let config_map = &config_maps[0];
    assert_eq!(config_map.metadata.namespace.as_deref(), Some(NAMESPACE));
    assert_eq!(
        config_map.metadata.name.as_deref(),
        Some(format!("{RELEASE}-dashboard").as_str())
    );
    let labels = config_map.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("grafana_dashboard").map(String::as_str),
        Some("1")
    );
    // The file as written, Grafana's own templates included.
    let data = config_map.data.clone().unwrap_or_default();
    assert_eq!(data["ferroscale.json"], DASHBOARD);

    // Where the sidecar looks, with the labels it looks for.
    let rendered = chart.render(
        "grafanaDashboard:\n  enabled: true\n  namespace: grafana\n  \
         labels: {grafana_dashboard: null, dashboards: autoscaling}\n  \
         annotations: {grafana_folder: Autoscaling}\n",
    );
    let config_map = &dashboard_config_maps(&rendered)[0];
    assert_eq!(config_map.metadata.namespace.as_deref(), Some("grafana"));
    let labels = config_map.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("dashboards").map(String::as_str),
        Some("autoscaling")
    );
    assert!(!labels.contains_key("grafana_dashboard"), "{labels:?}");
    assert_eq!(
        config_map.metadata.annotations,
        Some([("grafana_folder".to_owned(), "Autoscaling".to_owned())].into())
    );
}

#[test]
fn a_dashboard_file_that_is_missing_or_not_json_fails_the_install_naming_it() {
    let missing = ChartCopy::with_files(&[("prometheus-rules.yaml", RULES)]);
    let error = missing.refuse("grafanaDashboard: {enabled: true}\n");
    assert!(error.contains("files/grafana-dashboard.json"), "{error}");
    // Not asked for, not needed.
    assert!(dashboard_config_maps(&missing.render("{}\n")).is_empty());

    let broken = ChartCopy::with_files(&[("grafana-dashboard.json", "{\"title\": ")]);
    let error = broken.refuse("grafanaDashboard: {enabled: true}\n");
    assert!(error.contains("files/grafana-dashboard.json"), "{error}");
}

fn rule_groups(rendered: &Rendered) -> Vec<Value> {
    let rules = rendered.all("PrometheusRule");
    assert_eq!(rules.len(), 1, "{rules:?}");
    rules[0]["spec"]["groups"]
        .as_sequence()
        .expect("spec.groups")
        .clone()
}

#[test]
fn the_prometheus_rule_ships_ferroscales_alert_groups_after_upstreams_group() {
    let chart = shipped();
    let file_groups: Vec<Value> = serde_yaml_ng::from_str(RULES).expect("the rules are YAML");

    let rendered = chart.render(
        "prometheusRule:\n  enabled: true\n  rules:\n    \
         - {alert: Mine, expr: vector(1)}\n",
    );
    let groups = rule_groups(&rendered);
    assert_eq!(groups.len(), 1 + file_groups.len(), "{groups:?}");
    // Upstream's group first, named after the release, with the values' rules.
    assert_eq!(groups[0]["name"].as_str(), Some(RELEASE));
    assert_eq!(groups[0]["rules"][0]["alert"].as_str(), Some("Mine"));
    assert!(groups[0].get("interval").is_none());
    // Then the file's groups, as written (Prometheus's templates are not Helm's).
    assert_eq!(&groups[1..], file_groups.as_slice());
    assert_eq!(
        groups[2]["rules"][0]["annotations"]["description"].as_str(),
        Some("Node group {{ $labels.node_group }} is backing off.")
    );

    // prometheusRule.interval applies to every group that does not set its own.
    let rendered = chart.render("prometheusRule: {enabled: true, interval: 1m}\n");
    let groups = rule_groups(&rendered);
    let intervals: Vec<Option<&str>> = groups
        .iter()
        .map(|group| group.get("interval").and_then(Value::as_str))
        .collect();
    assert_eq!(intervals, [Some("1m"), Some("1m"), Some("30s")]);

    // Without the defaults: upstream's group alone.
    let rendered = chart.render("prometheusRule: {enabled: true, defaultRules: false}\n");
    let groups = rule_groups(&rendered);
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0]["name"].as_str(), Some(RELEASE));
}

#[test]
fn a_rules_file_that_is_missing_or_not_a_list_of_groups_fails_the_install_naming_it() {
    let missing = ChartCopy::with_files(&[("grafana-dashboard.json", DASHBOARD)]);
    let error = missing.refuse("prometheusRule: {enabled: true}\n");
    assert!(
        error.contains("files/prometheus-rules.yaml") && error.contains("defaultRules"),
        "{error}"
    );
    // Upstream's rules alone need no file.
    let rendered = missing.render("prometheusRule: {enabled: true, defaultRules: false}\n");
    assert_eq!(rule_groups(&rendered).len(), 1);

    let not_groups = ChartCopy::with_files(&[(
        "prometheus-rules.yaml",
        "- alert: NotAGroup\n  expr: vector(1)\n",
    )]);
    let error = not_groups.refuse("prometheusRule: {enabled: true}\n");
    assert!(error.contains("files/prometheus-rules.yaml"), "{error}");
}
