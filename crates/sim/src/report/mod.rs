//! Reports of a simulation run: the human timeline with its summary (text), the JSON summary, and a
//! self-contained HTML page with inline SVG charts.

mod chart;
mod html;
mod text;

use std::time::Duration;

use ferroscale_model::time::format_duration;

pub use html::render_html;
pub use text::render_text;

use crate::record::SimulationResult;

/// The `--output json` document: the summary, pretty-printed.
pub fn render_json(result: &SimulationResult) -> String {
    // Serialising plain structs of numbers, strings and maps cannot fail.
    serde_json::to_string_pretty(&result.summary)
        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// `1h30m0s` → `1h30m`: timeline times read better without trailing zero units.
pub(crate) fn short_duration(secs: f64) -> String {
    let full = format_duration(Duration::from_millis(
        (secs.max(0.0) * 1000.0).round() as u64
    ));
    let trimmed = full
        .strip_suffix("m0s")
        .map(|s| format!("{s}m"))
        .unwrap_or(full);
    trimmed
        .strip_suffix("h0m")
        .map(|s| format!("{s}h"))
        .unwrap_or(trimmed)
}

/// Up to `limit` sample indices that show how node counts evolved: every change when there are few,
/// evenly spaced samples (always including the first and last) otherwise.
pub(crate) fn table_rows(result: &SimulationResult, limit: usize) -> Vec<usize> {
    let samples = &result.samples;
    if samples.is_empty() {
        return Vec::new();
    }
    let mut changes = vec![0];
    for i in 1..samples.len() {
        if samples[i].nodes != samples[i - 1].nodes {
            changes.push(i);
        }
    }
    let last = samples.len() - 1;
    if changes.last() != Some(&last) {
        changes.push(last);
    }
    if changes.len() <= limit {
        return changes;
    }
    let steps = limit.max(2) - 1;
    let mut rows: Vec<usize> = (0..=steps).map(|k| k * last / steps).collect();
    rows.dedup();
    rows
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use ferroscale_model::Timestamp;

    use super::*;
    use crate::record::{
        BufferSummary, CapacitySummary, ConditionRecord, EntryKind, ExpectationOutcome,
        GroupSummary, LoopSample, Percentiles, PodSummary, QuotaSummary, RequestSummary, Summary,
        TimelineEntry,
    };
    use crate::resize_calls::{BurstSummary, ResizeSummary};

    /// One request provisioned, one buffer, one quota that stopped a scale-up.
    pub(crate) fn sample_capacity() -> CapacitySummary {
        let condition = |at: f64, type_: &str, reason: &str, message: &str| ConditionRecord {
            at_seconds: at,
            type_: type_.into(),
            status: "True".into(),
            reason: reason.into(),
            message: message.into(),
        };
        CapacitySummary {
            provisioning_requests: vec![RequestSummary {
                name: "batch/train".into(),
                class: "check-capacity.autoscaling.x-k8s.io".into(),
                pods: 4,
                created_seconds: 60.0,
                state: "Provisioned".into(),
                life: vec![
                    condition(70.0, "Accepted", "Accepted", ""),
                    condition(
                        70.0,
                        "Provisioned",
                        "CapacityIsFound",
                        "the pods' <capacity> is booked",
                    ),
                ],
            }],
            buffers: vec![BufferSummary {
                name: "default/spare".into(),
                replicas: Some(2),
                pod_template: Some("capacitybuffer-spare-pod-template".into()),
                pod_cpu_milli: Some(500),
                pod_memory_bytes: Some(1 << 30),
                ready: true,
                conditions: vec![condition(10.0, "ReadyForProvisioning", "ready", "")],
            }],
            quotas: vec![QuotaSummary {
                name: "team's-quota".into(),
                selector: "team=a".into(),
                limits: BTreeMap::from([("nodes".to_string(), "3".to_string())]),
                usage: BTreeMap::from([("nodes".to_string(), "3".to_string())]),
                stopped_scale_ups: 2,
                last_reason: "quota team's-quota: nodes 3 of 3 used".into(),
            }],
        }
    }

    /// A small run: group `a` grows from 1 to 3 nodes, one expectation fails.
    pub(crate) fn sample_result() -> SimulationResult {
        let samples = (0..30)
            .map(|i| LoopSample {
                at: Timestamp::from_secs(i * 10),
                nodes: vec![if i < 10 { 1 } else { 3 }, 0],
                targets: vec![3, 0],
                pending_pods: if i < 10 { 20 } else { 0 },
                decide_millis: 0.5 + (i % 3) as f64,
                unneeded_nodes: if i > 20 { 1 } else { 0 },
                nodes_being_deleted: 0,
                nodes_removed: 0,
                pods_evicted: 0,
            })
            .collect();
        SimulationResult {
            summary: Summary {
                scenario: "web <burst>".into(),
                simulated_seconds: 300,
                groups: BTreeMap::from([
                    (
                        "a".to_string(),
                        GroupSummary {
                            min_size: 0,
                            max_size: 10,
                            final_size: 3,
                            peak_size: 3,
                            scale_ups: 1,
                            nodes_added: 2,
                            nodes_removed: 0,
                            resize: ResizeSummary {
                                resize_calls: 3,
                                max_calls_per_burst: 2,
                                bursts: vec![
                                    BurstSummary {
                                        first_call_seconds: 0.0,
                                        last_call_seconds: 10.0,
                                        calls: 2,
                                        nodes: 2,
                                    },
                                    BurstSummary {
                                        first_call_seconds: 200.0,
                                        last_call_seconds: 200.0,
                                        calls: 1,
                                        nodes: 1,
                                    },
                                ],
                            },
                            cloud_nodes: None,
                        },
                    ),
                    ("b".to_string(), GroupSummary::default()),
                ]),
                pods: PodSummary {
                    created: 20,
                    running: 20,
                    pending: 0,
                    never_schedulable: 0,
                    wait_seconds: Percentiles {
                        p50: 90.0,
                        p99: 100.0,
                        max: 100.0,
                    },
                    never_started: 0,
                    evicted: 0,
                    lost: 0,
                },
                node_hours: 0.25,
                cost: 0.05,
                loops: 30,
                decide_millis: Percentiles {
                    p50: 1.5,
                    p99: 2.5,
                    max: 2.5,
                },
                expectations: vec![
                    ExpectationOutcome {
                        description: "group a nodes in [3,3] at end".into(),
                        ok: true,
                        observed: "3".into(),
                    },
                    ExpectationOutcome {
                        description: "pending pods = 5 at end".into(),
                        ok: false,
                        observed: "0".into(),
                    },
                ],
                capacity: sample_capacity(),
            },
            group_ids: vec!["a".into(), "b".into()],
            initial_nodes: vec![1, 0],
            scan_interval_secs: 10.0,
            samples,
            timeline: vec![
                TimelineEntry {
                    at: Timestamp::from_secs(0),
                    kind: EntryKind::Scenario,
                    what: "created 20 pods web-0…web-19".into(),
                    why: String::new(),
                },
                TimelineEntry {
                    at: Timestamp::from_secs(10),
                    kind: EntryKind::ScaleUp,
                    what: "a 1 → 3 (+2) for 20 pods".into(),
                    why: "least-waste".into(),
                },
                TimelineEntry {
                    at: Timestamp::from_secs(10),
                    kind: EntryKind::NotHelped,
                    what: "0 pods".into(),
                    why: "b: Insufficient <cpu>".into(),
                },
            ],
            notes: vec!["scale-down is not simulated".into()],
            final_status: Some("clusterWide:\n  health: {status: Healthy}\n".into()),
            node_limit_exceeded: None,
        }
    }

    #[test]
    fn short_durations_drop_zero_units() {
        assert_eq!(short_duration(0.0), "0s");
        assert_eq!(short_duration(90.0), "1m30s");
        assert_eq!(short_duration(600.0), "10m");
        assert_eq!(short_duration(7200.0), "2h");
        assert_eq!(short_duration(5400.0), "1h30m");
    }

    #[test]
    fn table_rows_show_changes_or_evenly_spaced_samples() {
        let result = sample_result();
        assert_eq!(table_rows(&result, 10), vec![0, 10, 29]);
        let rows = table_rows(&result, 2);
        assert_eq!(rows, vec![0, 29]);
    }

    #[test]
    fn json_is_the_summary() {
        let value: serde_json::Value =
            serde_json::from_str(&render_json(&sample_result())).unwrap();
        assert_eq!(value["scenario"], "web <burst>");
        assert_eq!(value["groups"]["a"]["nodesAdded"], 2);
        assert_eq!(value["groups"]["a"]["resizeCalls"], 3);
        assert_eq!(value["groups"]["a"]["maxCallsPerBurst"], 2);
        assert_eq!(value["groups"]["a"]["bursts"][0]["calls"], 2);
        assert_eq!(value["groups"]["a"]["bursts"][1]["firstCallSeconds"], 200.0);
        assert_eq!(value["groups"]["b"]["resizeCalls"], 0);
        let request = &value["capacity"]["provisioningRequests"][0];
        assert_eq!(request["state"], "Provisioned");
        assert_eq!(request["life"][1]["type"], "Provisioned");
        assert_eq!(request["life"][1]["atSeconds"], 70.0);
        assert_eq!(value["capacity"]["buffers"][0]["replicas"], 2);
        assert_eq!(value["capacity"]["quotas"][0]["stoppedScaleUps"], 2);
    }
}
