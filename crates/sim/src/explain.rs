//! `ferroscale explain`: why each pending pod did or did not trigger a scale-up at one engine loop,
//! group by group, from the plan's per-pod verdicts; and why each node is or is not being removed
//! by scale-down in that loop (utilization, the blocking pod and its rule, min size, cooldown, how
//! long it has been unneeded).
//!
//! Pods and nodes with the same outcome are reported together (a burst of 300 identical pods is
//! one entry listing a few of their names), so the answer stays readable at any scale.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use ferroscale_core::options::AutoscalingOptions;
use ferroscale_core::scale_down::{UnremovableReason, Utilization};
use ferroscale_core::scale_up::ScaleUpStatus;
use ferroscale_model::Timestamp;

use crate::report::short_duration;
use crate::runner::{LoopReport, SIMULATION_START, Simulation, natural_order, percent};
use crate::scenario::Scenario;

/// Said of a group that could host a pod when the loop scaled up a different group.
pub const FITS_BUT_NOT_CHOSEN: &str = "the pod fits this group's template, but this loop scaled up \
     another option (one scale-up decision per loop)";

/// Names listed per outcome before "and N more".
const NAMES_SHOWN: usize = 5;

/// Which loop to explain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExplainAt {
    /// The first loop in which scale-up considered pending pods (not one where it found none or
    /// waited for more to arrive).
    FirstPending,
    /// The first loop at or after this simulated time.
    Time(Duration),
}

/// What happened to one pending pod in the explained loop.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PodOutcome {
    /// The chosen scale-up places it.
    TriggeredScaleUp { groups: Vec<String> },
    /// It fits a node that exists or is already on its way: no new node is needed.
    FitsExistingOrUpcoming,
    /// No group can help; the reason per group (failed filter on the template or skip reason).
    NotHelped { per_group: Vec<(String, String)> },
    /// Scale-up did not consider it this loop: too young, expendable, a DaemonSet pod, or the loop
    /// was waiting for more pods.
    NotConsidered,
}

/// Pods sharing one outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeGroup {
    pub outcome: PodOutcome,
    /// `namespace/name`, in pending order.
    pub pods: Vec<String>,
}

/// The answer of `explain`.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// Time of the explained loop; `None` when no loop qualified before the end.
    pub at: Option<Timestamp>,
    pub status: Option<ScaleUpStatus>,
    pub groups: Vec<OutcomeGroup>,
    /// Resizes the loop performed (`group from → to`).
    pub increases: Vec<String>,
    /// What scale-down made of every node in the same loop.
    pub scale_down: Option<ScaleDownExplanation>,
}

/// Scale-down's view of every node in one loop.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleDownExplanation {
    /// The upstream result name (`NodeDeleteStarted`, `InCooldown`, ...).
    pub status: String,
    pub in_cooldown: bool,
    /// Nodes with the same verdict, in verdict order.
    pub groups: Vec<NodeVerdictGroup>,
}

/// Nodes sharing one verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeVerdictGroup {
    pub verdict: NodeVerdict,
    /// Node name and its detail (group, utilization, blocking pod, time unneeded).
    pub nodes: Vec<(String, String)>,
}

/// Why a node is or is not being removed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum NodeVerdict {
    /// Chosen in this loop: empty nodes go in bulk.
    RemovingEmpty,
    /// Chosen in this loop: drained first.
    Draining,
    /// A removal started earlier is under way.
    BeingRemoved,
    /// Unneeded, waiting out the unneeded time (or a cooldown).
    Unneeded,
    /// Unneeded, but held back from deletion for this reason.
    HeldBack(String),
    /// Not removable, for this reason (upstream names; the blocking rule for `BlockedByPod`).
    Unremovable(String),
    /// Not looked at by this loop's scale-down (not in an autoscaled group above its minimum, or
    /// past the loop's search limit).
    NotEvaluated,
}

/// Plays `scenario` up to the requested loop and explains it.
pub fn explain(scenario: &Scenario, options: AutoscalingOptions, when: ExplainAt) -> Explanation {
    let unneeded_time = options.scale_down_unneeded_time;
    let mut simulation = Simulation::new(scenario, options);
    let mut last = None;
    while let Some(report) = simulation.next_loop() {
        let qualifies = match when {
            ExplainAt::FirstPending => considered_pods(&report),
            ExplainAt::Time(t) => report.at >= SIMULATION_START + t,
        };
        if qualifies {
            let mut explanation = explain_loop(&report);
            explanation.scale_down = explain_scale_down(&report, &simulation, unneeded_time);
            return explanation;
        }
        last = Some(report);
    }
    // No loop had pending pods: the last loop still says what scale-down made of the nodes.
    match (when, last) {
        (ExplainAt::FirstPending, Some(report)) => {
            let mut explanation = explain_loop(&report);
            explanation.scale_down = explain_scale_down(&report, &simulation, unneeded_time);
            explanation
        }
        _ => Explanation {
            at: None,
            status: None,
            groups: Vec::new(),
            increases: Vec::new(),
            scale_down: None,
        },
    }
}

/// `cpu 26%, memory 13%` (or the GPU share on GPU nodes).
fn utilization_words(utilization: &Utilization) -> String {
    match utilization.gpu {
        Some(gpu) => format!("gpu {}", percent(gpu)),
        None => format!(
            "cpu {}, memory {}",
            percent(utilization.cpu),
            percent(utilization.memory)
        ),
    }
}

/// Sorts every node of the cluster by what this loop's scale-down made of it.
pub fn explain_scale_down(
    report: &LoopReport,
    simulation: &Simulation<'_>,
    unneeded_time: Duration,
) -> Option<ScaleDownExplanation> {
    let plan = report.outcome.scale_down.as_ref()?;
    let now = report.at;
    let mut verdicts: BTreeMap<String, (NodeVerdict, String)> = BTreeMap::new();
    let group_of =
        |group: Option<&str>| group.map_or_else(|| "no group".to_string(), str::to_string);
    for node in &plan.unremovable {
        let reason = match &node.blocking_pod {
            Some(b) => format!("{} ({})", node.reason, b.rule),
            None => node.reason.to_string(),
        };
        let mut detail = group_of(node.group_id.as_deref());
        if let Some(u) = &node.utilization {
            detail.push_str(&format!(", {}", utilization_words(u)));
        }
        if let Some(b) = &node.blocking_pod {
            detail.push_str(&format!(", pod {} breaks rule {}", b.pod, b.rule));
        } else if let Some(pod) = &node.pod {
            detail.push_str(&format!(", pod {pod}"));
        }
        if node.reason == UnremovableReason::NotUnderutilized {
            detail.push_str(", above the utilization threshold");
        }
        if node.reason == UnremovableReason::RecentlyUnremovable {
            match simulation.last_blocked_reason(&node.node) {
                Some(last) => detail.push_str(&format!(
                    ", not rechecked until the recheck timeout passes; last found: {last}"
                )),
                None => detail.push_str(", not rechecked until the recheck timeout passes"),
            }
        }
        verdicts.insert(
            node.node.to_string(),
            (NodeVerdict::Unremovable(reason), detail),
        );
    }
    for node in &plan.unneeded {
        let unneeded_for = now.since(node.since);
        let mut detail = format!(
            "{}, {}{}, unneeded for {}; removable once unneeded for more than {}",
            node.group_id,
            utilization_words(&node.utilization),
            if node.empty { ", empty" } else { "" },
            short_duration(unneeded_for.as_secs_f64()),
            short_duration(unneeded_time.as_secs_f64())
        );
        if plan.in_cooldown {
            detail.push_str(", scale-down in cooldown");
        }
        verdicts.insert(node.node.clone(), (NodeVerdict::Unneeded, detail));
    }
    for node in &plan.held_back {
        if let Some((verdict, _)) = verdicts.get_mut(node.node.as_str()) {
            *verdict = NodeVerdict::HeldBack(node.reason.to_string());
        }
    }
    for removal in &plan.empty_to_delete {
        if let Some((verdict, _)) = verdicts.get_mut(&removal.node) {
            *verdict = NodeVerdict::RemovingEmpty;
        }
    }
    for removal in &plan.drain_to_delete {
        let moves = removal.pods_to_evict.len();
        if let Some((verdict, detail)) = verdicts.get_mut(&removal.node) {
            *verdict = NodeVerdict::Draining;
            detail.push_str(&format!(", {moves} pod(s) to move"));
        }
    }
    for node in simulation.cluster().nodes() {
        let name = &node.node.name;
        if simulation.autoscaler().deletions().is_deleting(name)
            && !plan.empty_to_delete.iter().any(|r| r.node == *name)
            && !plan.drain_to_delete.iter().any(|r| r.node == *name)
        {
            verdicts.insert(
                name.clone(),
                (NodeVerdict::BeingRemoved, group_of(node.group.as_deref())),
            );
        }
        verdicts
            .entry(name.clone())
            .or_insert_with(|| (NodeVerdict::NotEvaluated, group_of(node.group.as_deref())));
    }
    let mut by_verdict: BTreeMap<NodeVerdict, Vec<(String, String)>> = BTreeMap::new();
    for (node, (verdict, detail)) in verdicts {
        by_verdict.entry(verdict).or_default().push((node, detail));
    }
    Some(ScaleDownExplanation {
        status: plan.status.as_str().to_string(),
        in_cooldown: plan.in_cooldown,
        groups: by_verdict
            .into_iter()
            .map(|(verdict, mut nodes)| {
                nodes.sort_by(|a, b| natural_order(&a.0, &b.0));
                NodeVerdictGroup { verdict, nodes }
            })
            .collect(),
    })
}

/// Whether scale-up looked at pending pods in this loop (rather than finding none, or waiting
/// because they were all too young).
fn considered_pods(report: &LoopReport) -> bool {
    let Some(plan) = &report.outcome.scale_up else {
        return false;
    };
    !report.outcome.pending_pods.is_empty()
        && (!plan.triggering_pods.is_empty()
            || !plan.pods_not_helped.is_empty()
            || !plan.pods_schedulable_on_existing.is_empty()
            || !matches!(
                plan.status,
                ScaleUpStatus::InCooldown | ScaleUpStatus::NotNeeded | ScaleUpStatus::NotTried
            ))
}

/// Sorts the pods of one loop by outcome.
pub fn explain_loop(report: &LoopReport) -> Explanation {
    let Some(plan) = &report.outcome.scale_up else {
        return Explanation {
            at: Some(report.at),
            status: None,
            groups: Vec::new(),
            increases: Vec::new(),
            scale_down: None,
        };
    };
    let succeeded = report
        .outcome
        .scale_up_execution
        .as_ref()
        .map(|e| e.succeeded.as_slice())
        .unwrap_or_default();
    let scaled: Vec<String> = succeeded.iter().map(|i| i.group_id.clone()).collect();
    let triggering: std::collections::HashSet<&str> =
        plan.triggering_pods.iter().map(String::as_str).collect();
    let on_existing: std::collections::HashSet<&str> = plan
        .pods_schedulable_on_existing
        .iter()
        .map(String::as_str)
        .collect();
    let verdicts: std::collections::HashMap<&str, &Vec<(String, String)>> = plan
        .pods_not_helped
        .iter()
        .map(|v| (v.pod.as_str(), &v.per_group))
        .collect();

    let mut by_outcome: BTreeMap<PodOutcome, Vec<String>> = BTreeMap::new();
    for pod in &report.outcome.pending_pods {
        let key = pod.key();
        let outcome = if triggering.contains(key.as_str()) {
            let groups = if scaled.is_empty() {
                plan.increases.iter().map(|i| i.group_id.clone()).collect()
            } else {
                scaled.clone()
            };
            PodOutcome::TriggeredScaleUp { groups }
        } else if on_existing.contains(key.as_str()) {
            PodOutcome::FitsExistingOrUpcoming
        } else if let Some(per_group) = verdicts.get(key.as_str()) {
            // Groups without a verdict could host the pod: the loop chose another option and
            // upstream makes one scale-up decision per loop.
            let mut per_group = (*per_group).clone();
            for group in report.outcome.node_groups.iter().map(|g| &g.id) {
                if !per_group.iter().any(|(g, _)| g == group) {
                    per_group.push((group.clone(), FITS_BUT_NOT_CHOSEN.to_string()));
                }
            }
            PodOutcome::NotHelped { per_group }
        } else {
            PodOutcome::NotConsidered
        };
        by_outcome.entry(outcome).or_default().push(key);
    }
    Explanation {
        at: Some(report.at),
        status: Some(plan.status.clone()),
        groups: by_outcome
            .into_iter()
            .map(|(outcome, pods)| OutcomeGroup { outcome, pods })
            .collect(),
        increases: succeeded
            .iter()
            .map(|i| format!("{} {} → {}", i.group_id, i.current_target, i.new_target))
            .collect(),
        scale_down: None,
    }
}

fn status_words(status: &ScaleUpStatus) -> String {
    match status {
        ScaleUpStatus::Successful => "scale-up planned".to_string(),
        ScaleUpStatus::Error(e) => format!("scale-up could not be planned: {e}"),
        ScaleUpStatus::NoOptionsAvailable => "no node group can help".to_string(),
        ScaleUpStatus::NotNeeded => "no scale-up needed".to_string(),
        ScaleUpStatus::NotTried => "scale-up not tried".to_string(),
        ScaleUpStatus::InCooldown => "waiting for more pods before scaling up".to_string(),
        ScaleUpStatus::LimitedByMaxNodesTotal => "max-nodes-total reached".to_string(),
    }
}

/// Nodes listed per verdict before "and N more".
const NODES_SHOWN: usize = 8;

fn verdict_words(verdict: &NodeVerdict) -> String {
    match verdict {
        NodeVerdict::RemovingEmpty => "removed now, empty (deleted in bulk)".to_string(),
        NodeVerdict::Draining => {
            "removed now, drained first (pods evicted and re-created elsewhere)".to_string()
        }
        NodeVerdict::BeingRemoved => "being removed (started in an earlier loop)".to_string(),
        NodeVerdict::Unneeded => {
            "unneeded: removed once unneeded for longer than the unneeded time".to_string()
        }
        NodeVerdict::HeldBack(reason) => format!("unneeded but kept for now: {reason}"),
        NodeVerdict::Unremovable(reason) => format!("not removable: {reason}"),
        NodeVerdict::NotEvaluated => "not evaluated by scale-down in this loop (not in an \
             autoscaled group above its minimum size, or past the loop's search limit)"
            .to_string(),
    }
}

/// The scale-down part of the human answer.
fn render_scale_down(out: &mut String, scale_down: &ScaleDownExplanation) {
    let nodes: usize = scale_down.groups.iter().map(|g| g.nodes.len()).sum();
    let _ = writeln!(
        out,
        "\nScale-down: {}{}; {nodes} node(s)",
        scale_down.status,
        if scale_down.in_cooldown {
            " (in cooldown: no node is removed while it lasts)"
        } else {
            ""
        }
    );
    for group in &scale_down.groups {
        let _ = writeln!(
            out,
            "\n{} node(s) {}:",
            group.nodes.len(),
            verdict_words(&group.verdict)
        );
        for (node, detail) in group.nodes.iter().take(NODES_SHOWN) {
            let _ = writeln!(out, "  {node}: {detail}");
        }
        let more = group.nodes.len().saturating_sub(NODES_SHOWN);
        if more > 0 {
            let _ = writeln!(out, "  and {more} more");
        }
    }
}

/// The human answer.
pub fn render_explanation(explanation: &Explanation) -> String {
    let mut out = String::new();
    let (Some(at), Some(status)) = (explanation.at, &explanation.status) else {
        out.push_str("No engine loop matched before the end of the scenario (no pending pods?).\n");
        return out;
    };
    let pod_count: usize = explanation.groups.iter().map(|g| g.pods.len()).sum();
    let _ = writeln!(
        out,
        "Engine loop at {}: {} pending pod(s); {}",
        short_duration(at.since(SIMULATION_START).as_secs_f64()),
        pod_count,
        status_words(status)
    );
    for increase in &explanation.increases {
        let _ = writeln!(out, "  resized {increase}");
    }
    for group in &explanation.groups {
        let shown: Vec<&str> = group
            .pods
            .iter()
            .take(NAMES_SHOWN)
            .map(String::as_str)
            .collect();
        let more = group.pods.len().saturating_sub(NAMES_SHOWN);
        let mut names = shown.join(", ");
        if more > 0 {
            let _ = write!(names, " and {more} more");
        }
        out.push('\n');
        match &group.outcome {
            PodOutcome::TriggeredScaleUp { groups } => {
                let _ = writeln!(
                    out,
                    "{} pod(s) triggered a scale-up of {}: {names}",
                    group.pods.len(),
                    groups.join(", ")
                );
            }
            PodOutcome::FitsExistingOrUpcoming => {
                let _ = writeln!(
                    out,
                    "{} pod(s) fit on existing nodes or nodes already being provisioned, so they \
                     need no new node: {names}",
                    group.pods.len()
                );
            }
            PodOutcome::NotHelped { per_group } => {
                let _ = writeln!(
                    out,
                    "{} pod(s) did not trigger a scale-up: {names}",
                    group.pods.len()
                );
                for (node_group, reason) in per_group {
                    let _ = writeln!(out, "  {node_group}: {reason}");
                }
            }
            PodOutcome::NotConsidered => {
                let _ = writeln!(
                    out,
                    "{} pod(s) were not considered for scale-up in this loop (too young, \
                     expendable, DaemonSet pods, or the loop waited for more pods): {names}",
                    group.pods.len()
                );
            }
        }
    }
    if let Some(scale_down) = &explanation.scale_down {
        render_scale_down(&mut out, scale_down);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_render_group_by_group_and_cut_long_name_lists() {
        let explanation = Explanation {
            at: Some(Timestamp::from_secs(20)),
            status: Some(ScaleUpStatus::Successful),
            groups: vec![
                OutcomeGroup {
                    outcome: PodOutcome::TriggeredScaleUp {
                        groups: vec!["a".into()],
                    },
                    pods: (0..8).map(|i| format!("default/web-{i}")).collect(),
                },
                OutcomeGroup {
                    outcome: PodOutcome::NotHelped {
                        per_group: vec![
                            ("a".into(), "Insufficient nvidia.com/gpu".into()),
                            ("b".into(), "max node group size reached".into()),
                        ],
                    },
                    pods: vec!["default/gpu-0".into()],
                },
            ],
            increases: vec!["a 1 → 3".into()],
            scale_down: Some(ScaleDownExplanation {
                status: "NoNodeDeleted".into(),
                in_cooldown: false,
                groups: vec![NodeVerdictGroup {
                    verdict: NodeVerdict::Unremovable("BlockedByPod (NotReplicated)".into()),
                    nodes: (0..10)
                        .map(|i| {
                            (
                                format!("n-{i}"),
                                "g, pod default/p breaks rule NotReplicated".into(),
                            )
                        })
                        .collect(),
                }],
            }),
        };
        let text = render_explanation(&explanation);
        assert!(
            text.starts_with("Engine loop at 20s: 9 pending pod(s); scale-up planned"),
            "{text}"
        );
        assert!(text.contains("8 pod(s) triggered a scale-up of a: default/web-0"));
        assert!(text.contains("and 3 more"));
        assert!(
            text.contains("  a: Insufficient nvidia.com/gpu\n  b: max node group size reached")
        );
        assert!(
            text.contains("10 node(s) not removable: BlockedByPod (NotReplicated):"),
            "{text}"
        );
        assert!(text.contains("  n-0: g, pod default/p breaks rule NotReplicated"));
        assert!(text.contains("  and 2 more"), "{text}");
    }
}
