//! Node-group backoff (docs/behaviour.md SU-40–SU-42): after a failed scale-up a group is left
//! alone for a while, longer after each repeated failure, so the engine tries other groups instead
//! of hammering a cloud that is out of capacity.
//!
//! Keyed by group id. The first failure backs off for the initial duration; a failure after the
//! previous backoff expired doubles it (capped); a failure while still backed off keeps the current
//! duration, so several failures of one scale-up do not compound. After the reset timeout without
//! any failure the group's history is forgotten.

use std::collections::BTreeMap;
use std::time::Duration;

use ferroscale_model::Timestamp;

use crate::cloud::ErrorClass;
use crate::options::AutoscalingOptions;

/// Status messages longer than this are cut and end in `<truncated>`, as upstream does.
const MAX_STATUS_MESSAGE_CHARS: usize = 500;
const TRUNCATED_SUFFIX: &str = "<truncated>";

/// Why the group was backed off, as the status ConfigMap shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackoffReason {
    pub class: ErrorClass,
    /// Upstream codes: `cloudProviderError`, `timeout`, or the provider's instance error code.
    pub code: String,
    /// At most 500 characters (longer messages are truncated with `<truncated>`).
    pub message: String,
}

impl BackoffReason {
    pub fn new(class: ErrorClass, code: impl Into<String>, message: impl Into<String>) -> Self {
        BackoffReason {
            class,
            code: code.into(),
            message: truncate_message(message.into()),
        }
    }
}

fn truncate_message(message: String) -> String {
    if message.chars().count() <= MAX_STATUS_MESSAGE_CHARS {
        return message;
    }
    let keep = MAX_STATUS_MESSAGE_CHARS - TRUNCATED_SUFFIX.len();
    let mut cut: String = message.chars().take(keep).collect();
    cut.push_str(TRUNCATED_SUFFIX);
    cut
}

/// One group's backoff history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackoffEntry {
    /// Length of the current (or last) backoff.
    pub duration: Duration,
    pub backoff_until: Timestamp,
    pub last_failure: Timestamp,
    pub reason: BackoffReason,
}

/// Backoff state of every node group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGroupBackoff {
    initial: Duration,
    max: Duration,
    reset_timeout: Duration,
    entries: BTreeMap<String, BackoffEntry>,
}

impl Default for NodeGroupBackoff {
    fn default() -> Self {
        NodeGroupBackoff::from_options(&AutoscalingOptions::default())
    }
}

impl NodeGroupBackoff {
    pub fn new(initial: Duration, max: Duration, reset_timeout: Duration) -> NodeGroupBackoff {
        NodeGroupBackoff {
            initial,
            max,
            reset_timeout,
            entries: BTreeMap::new(),
        }
    }

    /// Uses `initial-node-group-backoff-duration`, `max-node-group-backoff-duration` and
    /// `node-group-backoff-reset-timeout`.
    pub fn from_options(options: &AutoscalingOptions) -> NodeGroupBackoff {
        NodeGroupBackoff::new(
            options.initial_node_group_backoff_duration,
            options.max_node_group_backoff_duration,
            options.node_group_backoff_reset_timeout,
        )
    }

    /// Records a failure of `group_id` at `now`; returns the time the backoff ends.
    pub fn backoff(&mut self, group_id: &str, now: Timestamp, reason: BackoffReason) -> Timestamp {
        let duration = match self.entries.get(group_id) {
            Some(e) if now.since(e.last_failure) > self.reset_timeout => self.initial,
            Some(e) if now < e.backoff_until => e.duration,
            Some(e) => e.duration.saturating_mul(2).min(self.max),
            None => self.initial,
        };
        let duration = duration.min(self.max);
        let backoff_until = now + duration;
        self.entries.insert(
            group_id.to_string(),
            BackoffEntry {
                duration,
                backoff_until,
                last_failure: now,
                reason,
            },
        );
        backoff_until
    }

    pub fn is_backed_off(&self, group_id: &str, now: Timestamp) -> bool {
        self.active(group_id, now).is_some()
    }

    /// The group's backoff if it is in force at `now` (for the status ConfigMap).
    pub fn active(&self, group_id: &str, now: Timestamp) -> Option<&BackoffEntry> {
        self.entries.get(group_id).filter(|e| now < e.backoff_until)
    }

    /// Forgets a group's history (after a successful scale-up upstream keeps it; this is for groups
    /// that disappeared).
    pub fn forget(&mut self, group_id: &str) {
        self.entries.remove(group_id);
    }

    /// Drops the history of groups that have not failed for the reset timeout.
    pub fn remove_stale(&mut self, now: Timestamp) {
        let reset = self.reset_timeout;
        self.entries
            .retain(|_, e| now.since(e.last_failure) <= reset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60;

    fn reason() -> BackoffReason {
        BackoffReason::new(ErrorClass::Other, "cloudProviderError", "quota exceeded")
    }

    fn at(minutes: i64) -> Timestamp {
        Timestamp::from_secs(minutes * MIN)
    }

    /// docs/behaviour.md SU-40.
    #[test]
    fn s40_first_failure_backs_off_for_five_minutes() {
        let mut b = NodeGroupBackoff::default();
        assert_eq!(b.backoff("g", at(0), reason()), at(5));
        assert!(b.is_backed_off("g", at(4)));
        assert!(!b.is_backed_off("g", at(5)));
        assert!(!b.is_backed_off("other", at(1)));
        assert_eq!(
            b.active("g", at(1)).unwrap().reason.code,
            "cloudProviderError"
        );
    }

    /// docs/behaviour.md SU-41.
    #[test]
    fn s41_failures_after_expiry_double_up_to_thirty_minutes() {
        let mut b = NodeGroupBackoff::default();
        assert_eq!(b.backoff("g", at(0), reason()), at(5));
        assert_eq!(
            b.backoff("g", at(6), reason()),
            at(16),
            "second failure: 10m"
        );
        assert_eq!(
            b.backoff("g", at(17), reason()),
            at(37),
            "third failure: 20m"
        );
        assert_eq!(
            b.backoff("g", at(38), reason()),
            at(68),
            "fourth failure capped at 30m"
        );
        assert_eq!(b.backoff("g", at(69), reason()), at(99), "stays at the cap");
    }

    #[test]
    fn failure_while_backed_off_keeps_the_duration() {
        let mut b = NodeGroupBackoff::default();
        b.backoff("g", at(0), reason());
        assert_eq!(
            b.backoff("g", at(2), reason()),
            at(7),
            "no compounding: still 5m"
        );
    }

    /// docs/behaviour.md SU-42.
    #[test]
    fn s42_no_failure_for_three_hours_resets_to_five_minutes() {
        let mut b = NodeGroupBackoff::default();
        b.backoff("g", at(0), reason());
        b.backoff("g", at(6), reason());
        b.backoff("g", at(17), reason());
        let later = at(17 + 181);
        assert_eq!(
            b.backoff("g", later, reason()),
            later + Duration::from_secs(300)
        );
        // remove_stale forgets too.
        let mut b = NodeGroupBackoff::default();
        b.backoff("g", at(0), reason());
        b.remove_stale(at(181));
        assert_eq!(b.backoff("g", at(182), reason()), at(187));
    }

    #[test]
    fn long_messages_are_truncated_for_status() {
        let r = BackoffReason::new(ErrorClass::OutOfResources, "QUOTA", "x".repeat(900));
        assert_eq!(r.message.chars().count(), 500);
        assert!(r.message.ends_with("<truncated>"));
        assert_eq!(
            BackoffReason::new(ErrorClass::Other, "c", "short").message,
            "short"
        );
    }
}
