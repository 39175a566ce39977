//! What scale-down remembers between loops (docs/behaviour.md SD-58, SD-63, SD-101, SD-107):
//! unneeded-since timers, the nodes whose removal simulation failed recently, the times of the last
//! scale-up, deletion start and failure (globally and per node group, for
//! `--scale-down-delay-type-local`), and the loop interval the search-stop rule needs.
//!
//! The state is a plain value: [`plan_scale_down`](super::plan_scale_down) takes it by reference
//! and returns the next one in the plan; the loop records the events of its Act steps on it.

use std::collections::BTreeMap;
use std::time::Duration;

use ferroscale_model::Timestamp;

use super::trackers::{RemovalLatencyTracker, SkipEvalTracker};

/// Scale-down memory carried from one loop to the next. `Default` is the state at process start:
/// nothing unneeded, and no scale-up, deletion or failure ever (so no cooldown is active, as
/// upstream's "one hour ago" start values give).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScaleDownState {
    /// Node name → when it became unneeded.
    pub unneeded_since: BTreeMap<String, Timestamp>,
    /// Node name → until when it is not simulated again (its removal simulation failed, 3.2).
    pub unremovable_until: BTreeMap<String, Timestamp>,
    pub last_scale_up: Option<Timestamp>,
    pub last_deletion_start: Option<Timestamp>,
    pub last_failure: Option<Timestamp>,
    /// Per node group id, for `--scale-down-delay-type-local`.
    pub group_last_scale_up: BTreeMap<String, Timestamp>,
    pub group_last_deletion_start: BTreeMap<String, Timestamp>,
    pub group_last_failure: BTreeMap<String, Timestamp>,
    /// The time of the previous plan, to measure loop intervals.
    pub last_loop: Option<Timestamp>,
    /// The shortest interval observed between two plans (the search-stop rule's `I`).
    pub shortest_loop_interval: Option<Duration>,
    /// `--max-node-skip-eval-time-tracker-enabled` (docs/behaviour.md OBS-120).
    pub skip_eval: SkipEvalTracker,
    /// `--node-removal-latency-tracking-enabled` (docs/behaviour.md OBS-121).
    pub removal_latency: RemovalLatencyTracker,
}

impl ScaleDownState {
    pub fn new() -> ScaleDownState {
        ScaleDownState::default()
    }

    /// A successful scale-up of `group` at `now` (starts `--scale-down-delay-after-add`).
    pub fn record_scale_up(&mut self, group: &str, now: Timestamp) {
        self.last_scale_up = Some(now);
        self.group_last_scale_up.insert(group.to_string(), now);
    }

    /// A node deletion of `group` started at `now` (starts `--scale-down-delay-after-delete`).
    pub fn record_deletion_start(&mut self, group: &str, now: Timestamp) {
        self.last_deletion_start = Some(now);
        self.group_last_deletion_start
            .insert(group.to_string(), now);
    }

    /// Starting a deletion failed, or (for the local delay mode) the cloud refused a deletion of
    /// `group` at `now` (starts `--scale-down-delay-after-failure`).
    pub fn record_failure(&mut self, group: &str, now: Timestamp) {
        self.last_failure = Some(now);
        self.group_last_failure.insert(group.to_string(), now);
    }

    /// Forgets every unneeded timer: the cluster is unhealthy or its state could not be updated
    /// (docs/behaviour.md SD-107).
    pub fn clear_unneeded(&mut self) {
        self.unneeded_since.clear();
    }

    pub fn unneeded_count(&self) -> usize {
        self.unneeded_since.len()
    }

    pub fn is_unneeded(&self, node: &str) -> bool {
        self.unneeded_since.contains_key(node)
    }

    /// The loop interval to use for the search-stop rule: the shortest one seen, including the one
    /// that ends at `now`; `fallback` (the scan interval) before two loops have run.
    pub(super) fn loop_interval(&self, now: Timestamp, fallback: Duration) -> Duration {
        let current = self
            .last_loop
            .filter(|last| now > *last)
            .map(|last| now.since(last));
        match (self.shortest_loop_interval, current) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => fallback,
        }
    }

    /// Records that a plan ran at `now`.
    pub(super) fn note_loop(&mut self, now: Timestamp) {
        if let Some(last) = self.last_loop
            && now > last
        {
            let interval = now.since(last);
            self.shortest_loop_interval = Some(
                self.shortest_loop_interval
                    .map_or(interval, |shortest| shortest.min(interval)),
            );
        }
        self.last_loop = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_interval_is_the_shortest_seen() {
        let mut state = ScaleDownState::new();
        let t = Timestamp::from_secs(1000);
        let fallback = Duration::from_secs(10);
        assert_eq!(state.loop_interval(t, fallback), fallback);
        state.note_loop(t);
        assert_eq!(
            state.loop_interval(t + Duration::from_secs(30), fallback),
            Duration::from_secs(30)
        );
        state.note_loop(t + Duration::from_secs(30));
        state.note_loop(t + Duration::from_secs(35));
        assert_eq!(state.shortest_loop_interval, Some(Duration::from_secs(5)));
        assert_eq!(
            state.loop_interval(t + Duration::from_secs(100), fallback),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn recording_sets_global_and_group_times() {
        let mut state = ScaleDownState::new();
        let t = Timestamp::from_secs(50);
        state.record_scale_up("g1", t);
        state.record_failure("g2", t);
        assert_eq!(state.last_scale_up, Some(t));
        assert_eq!(state.group_last_scale_up.get("g1"), Some(&t));
        assert_eq!(state.group_last_failure.get("g2"), Some(&t));
        assert!(state.last_deletion_start.is_none());
    }
}
