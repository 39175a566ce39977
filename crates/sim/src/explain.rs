//! `ferroscale explain`: why each pending pod did or did not trigger a scale-up at one engine loop,
//! group by group, from the plan's per-pod verdicts.
//!
//! Pods with the same outcome are reported together (a burst of 300 identical pods is one entry
//! listing a few of their names), so the answer stays readable at any scale.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use ferroscale_core::options::AutoscalingOptions;
use ferroscale_core::scale_up::ScaleUpStatus;
use ferroscale_model::Timestamp;

use crate::report::short_duration;
use crate::runner::{LoopReport, SIMULATION_START, Simulation};
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
}

/// Plays `scenario` up to the requested loop and explains it.
pub fn explain(scenario: &Scenario, options: AutoscalingOptions, when: ExplainAt) -> Explanation {
    let mut simulation = Simulation::new(scenario, options);
    while let Some(report) = simulation.next_loop() {
        let qualifies = match when {
            ExplainAt::FirstPending => considered_pods(&report),
            ExplainAt::Time(t) => report.at >= SIMULATION_START + t,
        };
        if qualifies {
            return explain_loop(&report);
        }
    }
    Explanation {
        at: None,
        status: None,
        groups: Vec::new(),
        increases: Vec::new(),
    }
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
    }
}
