//! The human report: the timeline, one line per decision or happening, then the summary.

use std::fmt::Write;

use super::{short_duration, table_rows};
use crate::record::SimulationResult;

/// Rows of the nodes-per-group table; enough to see the shape of a run at a glance.
const TABLE_ROWS: usize = 12;

pub fn render_text(result: &SimulationResult) -> String {
    let summary = &result.summary;
    let mut out = String::new();
    // Writing to a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(
        out,
        "Scenario {:?}: {} simulated, {} engine loops every {}",
        summary.scenario,
        short_duration(summary.simulated_seconds as f64),
        summary.loops,
        short_duration(result.scan_interval_secs)
    );
    for note in &result.notes {
        let _ = writeln!(out, "Note: {note}");
    }

    let _ = writeln!(out, "\nTimeline");
    if result.timeline.is_empty() {
        let _ = writeln!(out, "  (nothing happened)");
    }
    for entry in &result.timeline {
        let at = short_duration(entry.at.millis() as f64 / 1000.0);
        let _ = write!(out, "  {at:>9}  {:<11}  {}", entry.kind.label(), entry.what);
        if !entry.why.is_empty() {
            let _ = write!(out, " — {}", entry.why);
        }
        out.push('\n');
    }

    let _ = writeln!(out, "\nNodes per group over time");
    let width = result
        .group_ids
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max(5);
    let _ = write!(out, "  {:>9}", "time");
    for id in &result.group_ids {
        let _ = write!(out, "  {id:>width$}");
    }
    let _ = writeln!(out, "  {:>8}", "pending");
    for row in table_rows(result, TABLE_ROWS) {
        let Some(sample) = result.samples.get(row) else {
            continue;
        };
        let _ = write!(
            out,
            "  {:>9}",
            short_duration(sample.at.millis() as f64 / 1000.0)
        );
        for count in &sample.nodes {
            let _ = write!(out, "  {count:>width$}");
        }
        let _ = writeln!(out, "  {:>8}", sample.pending_pods);
    }

    let _ = writeln!(out, "\nSummary");
    let _ = writeln!(
        out,
        "  {:<width$}  {:>7}  {:>7}  {:>7}  {:>9}  {:>6}  {:>8}  {:>12}  {:>6}  {:>15}",
        "group",
        "final",
        "peak",
        "max",
        "scale-ups",
        "added",
        "removed",
        "resize calls",
        "bursts",
        "calls/burst max"
    );
    for (id, g) in &summary.groups {
        let _ = writeln!(
            out,
            "  {id:<width$}  {:>7}  {:>7}  {:>7}  {:>9}  {:>6}  {:>8}  {:>12}  {:>6}  {:>15}",
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
    resize_lines(&mut out, summary);
    for (id, g) in &summary.groups {
        if let Some(c) = &g.cloud_nodes {
            let _ = writeln!(
                out,
                "  {id} nodes: {}; {} initialized, {} Node object(s) deleted, {} left behind",
                if c.cloud_controller_manager {
                    "cloud-controller-manager"
                } else {
                    "no cloud-controller-manager"
                },
                c.initialized,
                c.node_objects_deleted,
                c.left_behind
            );
        }
    }
    let pods = &summary.pods;
    let _ = writeln!(
        out,
        "  pods: {} created, {} running, {} pending ({} never schedulable)",
        pods.created, pods.running, pods.pending, pods.never_schedulable
    );
    let _ = writeln!(
        out,
        "  pod wait: p50 {:.1}s, p99 {:.1}s, max {:.1}s ({} never started, counted as waiting \
         until deleted or the end)",
        pods.wait_seconds.p50, pods.wait_seconds.p99, pods.wait_seconds.max, pods.never_started
    );
    let _ = writeln!(
        out,
        "  node-hours: {:.2}, cost: {:.2}",
        summary.node_hours, summary.cost
    );
    let _ = writeln!(
        out,
        "  decide time per loop: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        summary.decide_millis.p50, summary.decide_millis.p99, summary.decide_millis.max
    );

    capacity_lines(&mut out, &summary.capacity);

    if !summary.expectations.is_empty() {
        let _ = writeln!(out, "\nExpectations");
        for e in &summary.expectations {
            let mark = if e.ok { "ok  " } else { "FAIL" };
            let _ = write!(out, "  {mark}  {}", e.description);
            if !e.ok && !e.observed.is_empty() {
                let _ = write!(out, " (observed {})", e.observed);
            }
            out.push('\n');
        }
    }
    out
}

/// At most this many bursts are listed per group; the table above counts them all.
const LISTED_BURSTS: usize = 10;

/// Each group's bursts of `IncreaseSize` calls: when, how many calls, how many nodes.
fn resize_lines(out: &mut String, summary: &crate::record::Summary) {
    for (id, g) in &summary.groups {
        if g.resize.bursts.is_empty() {
            continue;
        }
        let _ = write!(out, "  {id} resize bursts:");
        for burst in g.resize.bursts.iter().take(LISTED_BURSTS) {
            let span = if burst.last_call_seconds > burst.first_call_seconds {
                format!(
                    "{}–{}",
                    short_duration(burst.first_call_seconds),
                    short_duration(burst.last_call_seconds)
                )
            } else {
                short_duration(burst.first_call_seconds)
            };
            let _ = write!(
                out,
                " {span} {} call(s) for {} node(s);",
                burst.calls, burst.nodes
            );
        }
        if g.resize.bursts.len() > LISTED_BURSTS {
            let _ = write!(out, " … {} more", g.resize.bursts.len() - LISTED_BURSTS);
        }
        out.push('\n');
    }
}

/// Requests with their life, buffers with their headroom, quotas with limits and usage.
fn capacity_lines(out: &mut String, capacity: &crate::record::CapacitySummary) {
    if capacity.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nCapacity");
    for r in &capacity.provisioning_requests {
        let _ = writeln!(
            out,
            "  provisioningrequest {} ({}, {} pods, created at {}): {}",
            r.name,
            r.class,
            r.pods,
            short_duration(r.created_seconds),
            r.state
        );
        for c in &r.life {
            let _ = writeln!(
                out,
                "    {:>8}  {}={} ({}) {}",
                short_duration(c.at_seconds),
                c.type_,
                c.status,
                c.reason,
                c.message
            );
        }
    }
    for b in &capacity.buffers {
        let shape = match (b.pod_cpu_milli, b.pod_memory_bytes) {
            (Some(cpu), Some(memory)) => format!(
                "{cpu} mCPU, {}",
                ferroscale_model::resources::format_bytes(memory)
            ),
            _ => "shape not resolved".to_string(),
        };
        let _ = writeln!(
            out,
            "  capacitybuffer {}: {} × ({shape}), {}",
            b.name,
            b.replicas.map_or("-".to_string(), |n| n.to_string()),
            if b.ready { "ready" } else { "not ready" }
        );
    }
    for q in &capacity.quotas {
        let pairs = |map: &std::collections::BTreeMap<String, String>| {
            map.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "  capacityquota {} ({}): limits {}; used {}; {} scale-up(s) stopped",
            q.name,
            q.selector,
            pairs(&q.limits),
            pairs(&q.usage),
            q.stopped_scale_ups
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_result;

    #[test]
    fn text_report_has_timeline_table_summary_and_failures() {
        let text = render_text(&sample_result());
        assert!(
            text.contains("scale-up     a 1 → 3 (+2) for 20 pods — least-waste"),
            "{text}"
        );
        assert!(text.contains("Nodes per group over time"));
        assert!(text.contains("p50 90.0s"));
        assert!(
            text.contains("FAIL  pending pods = 5 at end (observed 0)"),
            "{text}"
        );
        assert!(text.contains("Note: scale-down is not simulated"));
    }

    /// docs/scenario.md "Resize calls and bursts": the summary counts each group's calls and
    /// bursts and lists the bursts.
    #[test]
    fn text_report_counts_resize_calls_per_group_and_burst() {
        let text = render_text(&sample_result());
        assert!(
            text.contains("resize calls  bursts  calls/burst max"),
            "{text}"
        );
        let row = text
            .lines()
            .find(|line| line.trim_start().starts_with("a "))
            .unwrap();
        assert!(
            row.trim_end().ends_with("3       2                2"),
            "{row}"
        );
        assert!(
            text.contains(
                "a resize bursts: 0s–10s 2 call(s) for 2 node(s); 3m20s 1 call(s) for 1 node(s);"
            ),
            "{text}"
        );
        assert!(!text.contains("b resize bursts"), "{text}");
    }

    #[test]
    fn text_report_lists_requests_buffers_and_quotas() {
        let text = render_text(&sample_result());
        assert!(
            text.contains("provisioningrequest batch/train (check-capacity.autoscaling.x-k8s.io, 4 pods, created at 1m): Provisioned"),
            "{text}"
        );
        assert!(
            text.contains("1m10s  Provisioned=True (CapacityIsFound)"),
            "{text}"
        );
        assert!(text.contains("capacitybuffer default/spare: 2 × (500 mCPU, 1Gi), ready"));
        assert!(text.contains("capacityquota team's-quota (team=a): limits nodes 3; used nodes 3; 2 scale-up(s) stopped"));
    }
}
