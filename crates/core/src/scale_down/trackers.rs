//! The two optional scale-down measurements upstream exposes as metrics (docs/behaviour.md
//! OBS-120, OBS-121): how long candidates have been left unsimulated by the candidate limits
//! (`--max-node-skip-eval-time-tracker-enabled`), and how much longer than their threshold
//! unneeded nodes waited before they were deleted or became needed again
//! (`--node-removal-latency-tracking-enabled`). Both are plain values kept in the
//! [`ScaleDownState`](super::ScaleDownState) and advanced by the plan's `now`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ferroscale_model::Timestamp;

use super::UnremovableReason;

/// Remembers, for every candidate the search left out, since when it has been left out without a
/// break.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkipEvalTracker {
    /// The previous plan's time: a node skipped now for the first time was last considered then.
    last_eval: Option<Timestamp>,
    /// Node name → the last time it was considered before its current run of skips.
    skipped_since: BTreeMap<String, Timestamp>,
}

impl SkipEvalTracker {
    /// Records this plan's skipped nodes and returns the longest time any of them has gone
    /// unconsidered (zero when none is skipped).
    pub fn update(&mut self, skipped: &[String], now: Timestamp) -> Duration {
        let last_eval = self.last_eval.unwrap_or(now);
        let previous = std::mem::take(&mut self.skipped_since);
        self.skipped_since = skipped
            .iter()
            .map(|name| {
                let since = previous.get(name).copied().unwrap_or(last_eval);
                (name.clone(), since)
            })
            .collect();
        self.last_eval = Some(now);
        self.skipped_since
            .values()
            .copied()
            .min()
            .map_or(Duration::ZERO, |oldest| now.since(oldest))
    }
}

/// One observation of `node_removal_latency_seconds`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovalLatency {
    pub node: String,
    /// The node's deletion started (`true`) or the node became needed again (`false`).
    pub deleted: bool,
    /// The last reason (other than "not unneeded long enough") that held the node back, or
    /// `none`.
    pub delay_reason: String,
    /// Time spent unneeded beyond the node's threshold.
    pub latency: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct TrackedNode {
    since: Timestamp,
    threshold: Duration,
    delay_reason: Option<UnremovableReason>,
}

/// Follows unneeded nodes from the first plan that finds them unneeded until their deletion
/// starts or they leave the unneeded set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemovalLatencyTracker {
    tracked: BTreeMap<String, TrackedNode>,
}

/// What one plan tells the latency tracker.
pub(super) struct LatencyUpdate<'a> {
    pub now: Timestamp,
    /// Every unneeded node with its removal threshold (unneeded or unready time of its group).
    pub unneeded: Vec<(&'a str, Duration)>,
    /// Reasons that keep nodes (held back or unremovable) this plan.
    pub reasons: Vec<(&'a str, UnremovableReason)>,
    /// Nodes whose deletion this plan starts.
    pub deleted: BTreeSet<&'a str>,
}

impl RemovalLatencyTracker {
    pub(super) fn update(&mut self, update: LatencyUpdate<'_>) -> Vec<RemovalLatency> {
        let LatencyUpdate {
            now,
            unneeded,
            reasons,
            deleted,
        } = update;
        let mut observed = Vec::new();
        let current: BTreeSet<&str> = unneeded.iter().map(|(name, _)| *name).collect();
        for (name, threshold) in &unneeded {
            self.tracked
                .entry((*name).to_string())
                .and_modify(|t| t.threshold = *threshold)
                .or_insert(TrackedNode {
                    since: now,
                    threshold: *threshold,
                    delay_reason: None,
                });
        }
        let gone: Vec<String> = self
            .tracked
            .keys()
            .filter(|name| !current.contains(name.as_str()))
            .cloned()
            .collect();
        for name in gone {
            self.finish(&name, false, now, &mut observed);
        }
        for (name, reason) in reasons {
            // Waiting out the unneeded time is the normal course, not a delay.
            if matches!(
                reason,
                UnremovableReason::NotUnneededLongEnough | UnremovableReason::NotUnreadyLongEnough
            ) {
                continue;
            }
            if let Some(tracked) = self.tracked.get_mut(name) {
                tracked.delay_reason = Some(reason);
            }
        }
        for name in deleted {
            self.finish(name, true, now, &mut observed);
        }
        observed
    }

    fn finish(
        &mut self,
        name: &str,
        deleted: bool,
        now: Timestamp,
        observed: &mut Vec<RemovalLatency>,
    ) {
        let Some(tracked) = self.tracked.remove(name) else {
            return;
        };
        let waited = now.since(tracked.since);
        // Only time beyond the threshold is latency; upstream skips the others.
        if let Some(latency) = waited.checked_sub(tracked.threshold)
            && !latency.is_zero()
        {
            observed.push(RemovalLatency {
                node: name.to_string(),
                deleted,
                delay_reason: tracked
                    .delay_reason
                    .map_or_else(|| "none".to_string(), |r| r.as_str().to_string()),
                latency,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_eval_measures_the_oldest_uninterrupted_skip() {
        let t0 = Timestamp::from_secs(1000);
        let mut tracker = SkipEvalTracker::default();
        assert_eq!(tracker.update(&[], t0), Duration::ZERO);
        let a = vec!["a".to_string()];
        // Skipped since the previous plan (t0).
        assert_eq!(
            tracker.update(&a, t0 + Duration::from_secs(10)),
            Duration::from_secs(10)
        );
        assert_eq!(
            tracker.update(&a, t0 + Duration::from_secs(20)),
            Duration::from_secs(20)
        );
        // Considered once: the run of skips starts over.
        tracker.update(&[], t0 + Duration::from_secs(30));
        assert_eq!(
            tracker.update(&a, t0 + Duration::from_secs(40)),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn latency_counts_time_beyond_the_threshold_with_the_last_blocking_reason() {
        let t0 = Timestamp::from_secs(1000);
        let ten = Duration::from_secs(600);
        let mut tracker = RemovalLatencyTracker::default();
        let plan =
            |now, unneeded: Vec<(&'static str, Duration)>, reasons, deleted: &[&'static str]| {
                LatencyUpdate {
                    now,
                    unneeded,
                    reasons,
                    deleted: deleted.iter().copied().collect(),
                }
            };
        assert!(
            tracker
                .update(plan(t0, vec![("a", ten), ("b", ten)], vec![], &[]))
                .is_empty()
        );
        let later = t0 + Duration::from_secs(700);
        let observed = tracker.update(plan(
            later,
            vec![("a", ten)],
            vec![("a", UnremovableReason::NodeGroupMinSizeReached)],
            &["a"],
        ));
        assert_eq!(
            observed,
            vec![
                RemovalLatency {
                    node: "b".into(),
                    deleted: false,
                    delay_reason: "none".into(),
                    latency: Duration::from_secs(100),
                },
                RemovalLatency {
                    node: "a".into(),
                    deleted: true,
                    delay_reason: "NodeGroupMinSizeReached".into(),
                    latency: Duration::from_secs(100),
                },
            ]
        );
    }
}
