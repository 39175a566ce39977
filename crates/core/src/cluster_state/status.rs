//! The content of the `cluster-autoscaler-status` ConfigMap (spec 4.9): a structured report built
//! from the cluster-state report, the backoff state and the scale-down candidates, rendered as the
//! YAML upstream writes into `data.status`.

/// The status report (filled in below).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StatusReport {
    pub time: String,
}

/// Renders the report as the YAML of `data.status`.
pub fn render_status_yaml(report: &StatusReport) -> String {
    format!("time: {:?}\n", report.time)
}
