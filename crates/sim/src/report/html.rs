//! The HTML report: one self-contained file (inline CSS and SVG, no script, nothing fetched) with
//! the summary, charts of nodes per group, scale-down (unneeded nodes, removals in progress, nodes
//! removed and pods evicted per loop), pending pods and decide time, the status ConfigMap as last
//! written, and the timeline.

use std::fmt::Write;

use super::chart::{PALETTE, Series, Shape, time_chart};
use super::short_duration;
use crate::record::{CapacitySummary, ConditionRecord, EntryKind, SimulationResult};

/// Timelines longer than this are cut in the page (the text output has them all).
const MAX_TIMELINE_ROWS: usize = 3000;

const STYLE: &str = r#"
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1100px; color: #111827; background: #fff; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 28px 0 8px; border-bottom: 1px solid #e5e7eb; padding-bottom: 4px; }
.sub { color: #6b7280; margin: 0 0 12px; }
.note { background: #fefce8; border: 1px solid #fde68a; padding: 6px 10px; margin: 6px 0; border-radius: 4px; font-size: 13px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0; }
.card { border: 1px solid #e5e7eb; border-radius: 6px; padding: 8px 12px; min-width: 120px; }
.card .v { font-size: 20px; font-weight: 600; }
.card .k { font-size: 12px; color: #6b7280; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #f3f4f6; vertical-align: top; }
th { background: #f9fafb; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.t { white-space: nowrap; font-variant-numeric: tabular-nums; color: #374151; }
.kind { display: inline-block; padding: 1px 6px; border-radius: 3px; font-size: 12px; white-space: nowrap; }
.k-scenario { background: #f3f4f6; } .k-scale-up { background: #dbeafe; } .k-not-helped { background: #fef3c7; }
.k-nodes-ready { background: #dcfce7; } .k-failure { background: #fee2e2; } .k-backoff { background: #fee2e2; }
.k-expectation { background: #ede9fe; } .k-unneeded { background: #e0f2fe; } .k-blocked { background: #ffedd5; }
.k-cooldown { background: #f1f5f9; } .k-drain { background: #fce7f3; } .k-scale-down { background: #ccfbf1; }
.k-request { background: #e0e7ff; } .k-buffer { background: #d1fae5; } .k-quota { background: #ffe4e6; } .k-cloud-node { background: #ecfccb; }
.ok { color: #15803d; font-weight: 600; } .fail { color: #b91c1c; font-weight: 600; }
.why { color: #4b5563; }
table.timeline td:nth-child(2) { width: 42%; }
pre.status { background: #f9fafb; border: 1px solid #e5e7eb; padding: 8px 12px; font-size: 12px; overflow-x: auto; max-height: 480px; }
"#;

/// Escapes text for HTML element content and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

fn kind_class(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::Scenario => "k-scenario",
        EntryKind::ScaleUp => "k-scale-up",
        EntryKind::NotHelped => "k-not-helped",
        EntryKind::NodesReady => "k-nodes-ready",
        EntryKind::Failure => "k-failure",
        EntryKind::Backoff => "k-backoff",
        EntryKind::Unneeded => "k-unneeded",
        EntryKind::ScaleDownBlocked => "k-blocked",
        EntryKind::Cooldown => "k-cooldown",
        EntryKind::Drain => "k-drain",
        EntryKind::ScaleDown => "k-scale-down",
        EntryKind::ScaleDownFailure => "k-failure",
        EntryKind::Expectation => "k-expectation",
        EntryKind::Request => "k-request",
        EntryKind::Buffer => "k-buffer",
        EntryKind::Quota => "k-quota",
        EntryKind::CloudNode => "k-cloud-node",
    }
}

pub fn render_html(result: &SimulationResult) -> String {
    let summary = &result.summary;
    let x_max = summary.simulated_seconds as f64;
    let mut out = String::new();
    let title = format!("Ferroscale simulation: {}", summary.scenario);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title><style>{STYLE}</style></head><body>",
        escape(&title)
    );
    let _ = write!(
        out,
        "<h1>{}</h1><p class=\"sub\">{} simulated · {} engine loops every {}</p>",
        escape(&title),
        short_duration(x_max),
        summary.loops,
        short_duration(result.scan_interval_secs)
    );
    for note in &result.notes {
        let _ = write!(out, "<div class=\"note\">{}</div>", escape(note));
    }

    let failed = summary.expectations.iter().filter(|e| !e.ok).count();
    let total_nodes: usize = summary.groups.values().map(|g| g.final_size).sum();
    let cards = [
        (
            if summary.expectations.is_empty() {
                "–".to_string()
            } else if failed == 0 {
                "all hold".to_string()
            } else {
                format!("{failed} failed")
            },
            "expectations",
        ),
        (total_nodes.to_string(), "nodes at end"),
        (
            summary
                .groups
                .values()
                .map(|g| g.nodes_removed)
                .sum::<usize>()
                .to_string(),
            "nodes removed",
        ),
        (
            format!("{} / {}", summary.pods.evicted, summary.pods.lost),
            "pods evicted / lost",
        ),
        (
            format!("{} / {}", summary.pods.running, summary.pods.created),
            "pods running / created",
        ),
        (summary.pods.pending.to_string(), "pods pending at end"),
        (summary.pods.never_started.to_string(), "pods never started"),
        (
            format!("{:.0}s", summary.pods.wait_seconds.p50),
            "pod wait p50",
        ),
        (
            format!("{:.0}s", summary.pods.wait_seconds.p99),
            "pod wait p99",
        ),
        (format!("{:.2}", summary.node_hours), "node-hours"),
        (format!("{:.2}", summary.cost), "cost"),
        (format!("{:.2} ms", summary.decide_millis.p99), "decide p99"),
    ];
    out.push_str("<div class=\"cards\">");
    for (value, key) in cards {
        let _ = write!(
            out,
            "<div class=\"card\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>",
            escape(&value),
            escape(key)
        );
    }
    out.push_str("</div>");

    if !summary.expectations.is_empty() {
        out.push_str("<h2>Expectations</h2><table><tr><th>result</th><th>expectation</th><th>observed</th></tr>");
        for e in &summary.expectations {
            let (class, word) = if e.ok {
                ("ok", "ok")
            } else {
                ("fail", "FAILED")
            };
            let _ = write!(
                out,
                "<tr><td class=\"{class}\">{word}</td><td>{}</td><td>{}</td></tr>",
                escape(&e.description),
                escape(&e.observed)
            );
        }
        out.push_str("</table>");
    }

    // Charts start with the state at time 0 so the first step is visible.
    let node_series: Vec<Series<'_>> = result
        .group_ids
        .iter()
        .enumerate()
        .map(|(g, id)| {
            let mut points = vec![(
                0.0,
                result.initial_nodes.get(g).copied().unwrap_or(0) as f64,
            )];
            points.extend(result.samples.iter().map(|s| {
                (
                    s.at.millis() as f64 / 1000.0,
                    s.nodes.get(g).copied().unwrap_or(0) as f64,
                )
            }));
            Series {
                name: id,
                color: PALETTE[g % PALETTE.len()],
                points,
            }
        })
        .collect();
    out.push_str("<h2>Nodes per group</h2>");
    out.push_str(&time_chart(&node_series, x_max, "nodes", Shape::Steps));

    let at = |s: &crate::record::LoopSample| s.at.millis() as f64 / 1000.0;
    let unneeded = Series {
        name: "unneeded nodes",
        color: "#0891b2",
        points: result
            .samples
            .iter()
            .map(|s| (at(s), s.unneeded_nodes as f64))
            .collect(),
    };
    let deleting = Series {
        name: "removals in progress",
        color: "#db2777",
        points: result
            .samples
            .iter()
            .map(|s| (at(s), s.nodes_being_deleted as f64))
            .collect(),
    };
    let removed_total: usize = result.samples.iter().map(|s| s.nodes_removed).sum();
    let _ = write!(
        out,
        "<h2>Scale-down</h2><p class=\"sub\">nodes scale-down found unneeded (removable once unneeded for longer than the unneeded time) and removals under way (tainted, draining or being deleted) · {} node(s) removed · {} pod(s) evicted</p>",
        removed_total, summary.pods.evicted
    );
    out.push_str(&time_chart(
        &[unneeded, deleting],
        x_max,
        "nodes",
        Shape::Steps,
    ));
    let removed = Series {
        name: "nodes removed",
        color: "#0d9488",
        points: result
            .samples
            .iter()
            .map(|s| (at(s), s.nodes_removed as f64))
            .collect(),
    };
    out.push_str("<h2>Nodes removed per loop</h2>");
    out.push_str(&time_chart(&[removed], x_max, "nodes", Shape::Bars));
    let evicted = Series {
        name: "pods evicted",
        color: "#be185d",
        points: result
            .samples
            .iter()
            .map(|s| (at(s), s.pods_evicted as f64))
            .collect(),
    };
    out.push_str("<h2>Pods evicted by drains per loop</h2>");
    out.push_str(&time_chart(&[evicted], x_max, "pods", Shape::Bars));

    let pending = Series {
        name: "pending pods",
        color: "#d97706",
        points: result
            .samples
            .iter()
            .map(|s| (s.at.millis() as f64 / 1000.0, s.pending_pods as f64))
            .collect(),
    };
    out.push_str("<h2>Pending pods</h2>");
    out.push_str(&time_chart(&[pending], x_max, "pods", Shape::Steps));

    let decide = Series {
        name: "decide time",
        color: "#7c3aed",
        points: result
            .samples
            .iter()
            .map(|s| (s.at.millis() as f64 / 1000.0, s.decide_millis))
            .collect(),
    };
    let _ = write!(
        out,
        "<h2>Decide time per loop</h2><p class=\"sub\">wall-clock milliseconds of the pure decision step · p50 {:.2} · p99 {:.2} · max {:.2}</p>",
        summary.decide_millis.p50, summary.decide_millis.p99, summary.decide_millis.max
    );
    out.push_str(&time_chart(&[decide], x_max, "ms", Shape::Bars));

    out.push_str("<h2>Groups</h2><table><tr><th>group</th><th class=\"num\">final</th><th class=\"num\">peak</th><th class=\"num\">max</th><th class=\"num\">scale-ups</th><th class=\"num\">added</th><th class=\"num\">removed</th><th class=\"num\">resize calls</th><th class=\"num\">bursts</th><th class=\"num\">calls/burst max</th></tr>");
    for (id, g) in &summary.groups {
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            escape(id),
            g.final_size,
            g.peak_size,
            g.max_size,
            g.scale_ups,
            g.nodes_added,
            g.nodes_removed,
            g.resize.resize_calls,
            g.resize.bursts.len(),
            g.resize.max_calls_per_burst
        );
    }
    out.push_str("</table>");
    resize_section(&mut out, summary);
    cloud_nodes_section(&mut out, summary);

    if !summary.capacity.is_empty() {
        capacity_section(&mut out, &summary.capacity);
    }

    if let Some(status) = &result.final_status {
        let _ = write!(
            out,
            "<h2>Status ConfigMap at the end</h2><p class=\"sub\">data.status of cluster-autoscaler-status as the engine last wrote it</p><pre class=\"status\">{}</pre>",
            escape(status)
        );
    }

    let _ = write!(out, "<h2>Timeline</h2>");
    if result.timeline.len() > MAX_TIMELINE_ROWS {
        let _ = write!(
            out,
            "<div class=\"note\">Showing the first {MAX_TIMELINE_ROWS} of {} entries; the text output has all of them.</div>",
            result.timeline.len()
        );
    }
    out.push_str("<table class=\"timeline\"><tr><th>time</th><th>what</th><th>details</th></tr>");
    for entry in result.timeline.iter().take(MAX_TIMELINE_ROWS) {
        let _ = write!(
            out,
            "<tr><td class=\"t\">{}</td><td><span class=\"kind {}\">{}</span> {}</td><td class=\"why\">{}</td></tr>",
            short_duration(entry.at.millis() as f64 / 1000.0),
            kind_class(entry.kind),
            escape(entry.kind.label()),
            escape(&entry.what),
            escape(&entry.why)
        );
    }
    out.push_str("</table></body></html>\n");
    out
}

/// Groups without a cloud-controller-manager, and what the cloud node controller did with their
/// Nodes (docs/scenario.md, "Clouds without a cloud-controller-manager"); nothing when no group
/// has such a line.
fn cloud_nodes_section(out: &mut String, summary: &crate::record::Summary) {
    let lines: Vec<_> = summary
        .groups
        .iter()
        .filter_map(|(id, g)| Some((id, g.cloud_nodes.as_ref()?)))
        .collect();
    if lines.is_empty() {
        return;
    }
    out.push_str("<h2>Node initialization and removal</h2><p class=\"sub\">without a cloud-controller-manager a group's new nodes register with the uninitialized taint and without the template's zone and instance-type labels, and a Node outlives its machine; the cloud node controller (cloud-node-controller) initializes the first and deletes the second</p><table><tr><th>group</th><th>cloud-controller-manager</th><th class=\"num\">initialized</th><th class=\"num\">Node objects deleted</th><th class=\"num\">left behind at the end</th></tr>");
    for (id, c) in lines {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            escape(id),
            if c.cloud_controller_manager {
                "yes"
            } else {
                "none"
            },
            c.initialized,
            c.node_objects_deleted,
            c.left_behind
        );
    }
    out.push_str("</table>");
}

/// `Accepted=True (reason) at 1m10s` lines, one per change.
/// Every burst of `IncreaseSize` calls of every group (docs/scenario.md, "Resize calls and
/// bursts"): the trade-off between reacting often and calling the cloud often.
fn resize_section(out: &mut String, summary: &crate::record::Summary) {
    if summary.groups.values().all(|g| g.resize.bursts.is_empty()) {
        return;
    }
    out.push_str("<h2>Resize calls per burst</h2><p class=\"sub\">a burst: IncreaseSize calls of a group, each made before the nodes of the previous one could be ready</p><table><tr><th>group</th><th class=\"num\">first call</th><th class=\"num\">last call</th><th class=\"num\">calls</th><th class=\"num\">nodes</th></tr>");
    for (id, g) in &summary.groups {
        for burst in &g.resize.bursts {
            let _ = write!(
                out,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                escape(id),
                short_duration(burst.first_call_seconds),
                short_duration(burst.last_call_seconds),
                burst.calls,
                burst.nodes
            );
        }
    }
    out.push_str("</table>");
}

fn conditions_cell(conditions: &[ConditionRecord]) -> String {
    let lines: Vec<String> = conditions
        .iter()
        .map(|c| {
            let message = if c.message.is_empty() {
                String::new()
            } else {
                format!(": {}", escape(&c.message))
            };
            format!(
                "{} {}={} ({}){message}",
                short_duration(c.at_seconds),
                escape(&c.type_),
                escape(&c.status),
                escape(&c.reason)
            )
        })
        .collect();
    lines.join("<br>")
}

/// ProvisioningRequests with their life, buffers with their headroom, quotas with limits, usage
/// and the scale-ups they stopped.
fn capacity_section(out: &mut String, capacity: &CapacitySummary) {
    if !capacity.provisioning_requests.is_empty() {
        out.push_str("<h2>ProvisioningRequests</h2><p class=\"sub\">each request's life: the conditions the engine wrote, with the simulated time</p><table><tr><th>request</th><th>class</th><th class=\"num\">pods</th><th>created</th><th>state</th><th>life</th></tr>");
        for r in &capacity.provisioning_requests {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"t\">{}</td><td>{}</td><td class=\"why\">{}</td></tr>",
                escape(&r.name),
                escape(&r.class),
                r.pods,
                short_duration(r.created_seconds),
                escape(&r.state),
                conditions_cell(&r.life)
            );
        }
        out.push_str("</table>");
    }
    if !capacity.buffers.is_empty() {
        out.push_str("<h2>CapacityBuffers</h2><p class=\"sub\">headroom each buffer keeps at the end: replicas × the shape of one pod</p><table><tr><th>buffer</th><th>headroom</th><th>pod template</th><th>ready</th><th>conditions</th></tr>");
        for b in &capacity.buffers {
            let headroom = match (b.replicas, b.pod_cpu_milli, b.pod_memory_bytes) {
                (Some(n), Some(cpu), Some(memory)) => format!(
                    "{n} × ({cpu} mCPU, {})",
                    ferroscale_model::resources::format_bytes(memory)
                ),
                (Some(n), _, _) => format!("{n} × (shape not resolved)"),
                _ => "not resolved".to_string(),
            };
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"why\">{}</td></tr>",
                escape(&b.name),
                escape(&headroom),
                escape(b.pod_template.as_deref().unwrap_or("-")),
                if b.ready {
                    "<span class=\"ok\">yes</span>"
                } else {
                    "<span class=\"fail\">no</span>"
                },
                conditions_cell(&b.conditions)
            );
        }
        out.push_str("</table>");
    }
    if !capacity.quotas.is_empty() {
        out.push_str("<h2>CapacityQuotas</h2><p class=\"sub\">limits, what the selected nodes use at the end, and scale-ups each quota stopped or capped</p><table><tr><th>quota</th><th>selector</th><th>limits</th><th>usage</th><th class=\"num\">scale-ups stopped</th><th>last reason</th></tr>");
        let pairs = |map: &std::collections::BTreeMap<String, String>| {
            map.iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        for q in &capacity.quotas {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"why\">{}</td></tr>",
                escape(&q.name),
                escape(&q.selector),
                escape(&pairs(&q.limits)),
                escape(&pairs(&q.usage)),
                q.stopped_scale_ups,
                escape(&q.last_reason)
            );
        }
        out.push_str("</table>");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_result;

    #[test]
    fn html_is_self_contained_and_escaped() {
        let html = render_html(&sample_result());
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("<script"));
        assert!(!html.contains("src=\"http"));
        assert!(!html.contains("href=\"http"));
        assert!(html.contains("web &lt;burst&gt;"));
        assert!(html.contains("Insufficient &lt;cpu&gt;"));
        assert_eq!(html.matches("<svg").count(), 6);
        assert!(html.contains("Scale-down"));
        assert!(html.contains("<pre class=\"status\">clusterWide:"));
        assert!(html.contains("1 failed"));
    }

    /// docs/scenario.md "Resize calls and bursts": the groups table counts resize calls, bursts
    /// and the most calls of a burst; a table lists each burst; without calls there is none.
    #[test]
    fn html_counts_resize_calls_and_lists_bursts() {
        let html = render_html(&sample_result());
        assert!(html.contains("<th class=\"num\">resize calls</th>"));
        assert!(html.contains("<td class=\"num\">0</td><td class=\"num\">3</td><td class=\"num\">2</td><td class=\"num\">2</td></tr>"), "{html}");
        assert!(html.contains("<h2>Resize calls per burst</h2>"));
        assert!(html.contains("<tr><td>a</td><td class=\"num\">0s</td><td class=\"num\">10s</td><td class=\"num\">2</td><td class=\"num\">2</td></tr>"), "{html}");
        assert!(html.contains("<tr><td>a</td><td class=\"num\">3m20s</td><td class=\"num\">3m20s</td><td class=\"num\">1</td><td class=\"num\">1</td></tr>"), "{html}");
        let mut result = sample_result();
        for group in result.summary.groups.values_mut() {
            group.resize = Default::default();
        }
        assert!(!render_html(&result).contains("Resize calls per burst"));
    }

    #[test]
    fn html_shows_requests_buffers_and_quotas_escaped() {
        let html = render_html(&sample_result());
        assert!(html.contains("<h2>ProvisioningRequests</h2>"));
        assert!(html.contains(
            "1m10s Provisioned=True (CapacityIsFound): the pods&#39; &lt;capacity&gt; is booked"
        ));
        assert!(html.contains("2 × (500 mCPU, 1Gi)"));
        assert!(html.contains("<td>team&#39;s-quota</td>"));
        assert!(html.contains("quota team&#39;s-quota: nodes 3 of 3 used"));
        assert!(!html.contains("team's"));
        let mut result = sample_result();
        result.summary.capacity = CapacitySummary::default();
        assert!(!render_html(&result).contains("CapacityBuffers"));
    }
}
