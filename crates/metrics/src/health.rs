//! The liveness rule of `/health-check` (docs/behaviour.md LOOP-98), as a pure state machine: the
//! caller reports activity and successful iterations with their time, and asks for the status at a
//! given time.
//!
//! Before monitoring starts the check always passes. Once it has started, it fails when the last
//! activity is older than `--max-inactivity` or the last success older than `--max-failing-time`;
//! until the first successful iteration both limits are `--max-startup-time`.

use std::time::Duration;

use ferroscale_model::Timestamp;

/// The three limits, with the upstream defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthLimits {
    /// `--max-inactivity` (10m).
    pub max_inactivity: Duration,
    /// `--max-failing-time` (15m).
    pub max_failing_time: Duration,
    /// `--max-startup-time` (20m).
    pub max_startup_time: Duration,
}

impl Default for HealthLimits {
    fn default() -> Self {
        HealthLimits {
            max_inactivity: Duration::from_secs(10 * 60),
            max_failing_time: Duration::from_secs(15 * 60),
            max_startup_time: Duration::from_secs(20 * 60),
        }
    }
}

impl HealthLimits {
    /// Upstream silently raises the start-up limit to at least the other two.
    pub fn normalized(self) -> HealthLimits {
        HealthLimits {
            max_startup_time: self
                .max_startup_time
                .max(self.max_inactivity)
                .max(self.max_failing_time),
            ..self
        }
    }
}

/// The answer of `/health-check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthStatus {
    Healthy,
    /// Why the check fails, for the response body and the logs.
    Unhealthy(String),
}

/// Liveness state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    limits: HealthLimits,
    monitoring: bool,
    last_activity: Timestamp,
    last_success: Timestamp,
    succeeded_once: bool,
}

impl HealthCheck {
    pub fn new(limits: HealthLimits) -> HealthCheck {
        HealthCheck {
            limits: limits.normalized(),
            monitoring: false,
            last_activity: Timestamp::default(),
            last_success: Timestamp::default(),
            succeeded_once: false,
        }
    }

    pub fn limits(&self) -> HealthLimits {
        self.limits
    }

    /// Starts enforcing the limits, counting from `now` (the loop is about to run).
    pub fn start_monitoring(&mut self, now: Timestamp) {
        if !self.monitoring {
            self.monitoring = true;
            self.last_activity = now;
            self.last_success = now;
        }
    }

    /// The loop did something (an iteration started).
    pub fn record_activity(&mut self, now: Timestamp) {
        self.last_activity = self.last_activity.max(now);
    }

    /// An iteration finished without error: it is also activity.
    pub fn record_success(&mut self, now: Timestamp) {
        self.record_activity(now);
        self.last_success = self.last_success.max(now);
        self.succeeded_once = true;
    }

    pub fn status(&self, now: Timestamp) -> HealthStatus {
        if !self.monitoring {
            return HealthStatus::Healthy;
        }
        let (inactivity_limit, failing_limit) = if self.succeeded_once {
            (self.limits.max_inactivity, self.limits.max_failing_time)
        } else {
            (self.limits.max_startup_time, self.limits.max_startup_time)
        };
        let inactive = now.since(self.last_activity);
        if inactive > inactivity_limit {
            return HealthStatus::Unhealthy(format!(
                "last activity {}s ago, more than {}s",
                inactive.as_secs(),
                inactivity_limit.as_secs()
            ));
        }
        let failing = now.since(self.last_success);
        if failing > failing_limit {
            return HealthStatus::Unhealthy(format!(
                "last successful iteration {}s ago, more than {}s",
                failing.as_secs(),
                failing_limit.as_secs()
            ));
        }
        HealthStatus::Healthy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    const MIN: i64 = 60;

    #[test]
    fn healthy_until_monitoring_starts() {
        let check = HealthCheck::new(HealthLimits::default());
        assert_eq!(check.status(at(100 * MIN)), HealthStatus::Healthy);
    }

    #[test]
    fn startup_limit_applies_until_the_first_success() {
        let mut check = HealthCheck::new(HealthLimits::default());
        check.start_monitoring(at(0));
        // Failing iterations keep the process active, but 20 minutes without success is fatal.
        for minute in 1..=20 {
            check.record_activity(at(minute * MIN));
            assert_eq!(
                check.status(at(minute * MIN)),
                HealthStatus::Healthy,
                "{minute}m"
            );
        }
        assert!(matches!(
            check.status(at(20 * MIN + 1)),
            HealthStatus::Unhealthy(reason) if reason.contains("successful")
        ));
    }

    #[test]
    fn after_a_success_inactivity_and_failing_limits_apply() {
        let mut check = HealthCheck::new(HealthLimits::default());
        check.start_monitoring(at(0));
        check.record_success(at(MIN));
        // No activity at all for more than 10 minutes.
        assert_eq!(check.status(at(11 * MIN)), HealthStatus::Healthy);
        assert!(matches!(
            check.status(at(11 * MIN + 1)),
            HealthStatus::Unhealthy(reason) if reason.contains("activity")
        ));
        // Active but failing for more than 15 minutes.
        for minute in 2..=16 {
            check.record_activity(at(minute * MIN));
        }
        assert_eq!(check.status(at(16 * MIN)), HealthStatus::Healthy);
        assert!(matches!(
            check.status(at(16 * MIN + 1)),
            HealthStatus::Unhealthy(reason) if reason.contains("successful")
        ));
        // A success heals it.
        check.record_success(at(17 * MIN));
        assert_eq!(check.status(at(17 * MIN)), HealthStatus::Healthy);
    }

    #[test]
    fn startup_limit_is_raised_to_the_other_limits() {
        let limits = HealthLimits {
            max_inactivity: Duration::from_secs(30 * 60),
            max_failing_time: Duration::from_secs(40 * 60),
            max_startup_time: Duration::from_secs(60),
        };
        let mut check = HealthCheck::new(limits);
        assert_eq!(
            check.limits().max_startup_time,
            Duration::from_secs(40 * 60)
        );
        check.start_monitoring(at(0));
        check.record_activity(at(30 * MIN));
        assert_eq!(check.status(at(39 * MIN)), HealthStatus::Healthy);
    }
}
