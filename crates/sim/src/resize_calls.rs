//! The `IncreaseSize` calls the simulated cloud receives, per group, and their grouping into
//! bursts (docs/scenario.md, "Resize calls and bursts").
//!
//! Real clouds throttle resize calls, so how many of them an autoscaler makes for one wave of
//! pods matters as much as how fast it reacts. The cloud records every call it receives (failed
//! ones included: they cost the API as much); the summary groups them into bursts.
//!
//! A burst of a group is a run of its calls, each made before the nodes asked for by the
//! previous call of the run could be ready — less than the group's `provisioningDelay` after it.
//! A call made when every earlier request has had time to come up starts a new burst: it answers
//! a new wave of pods rather than the rest of the same one.

use std::time::Duration;

use ferroscale_model::Timestamp;
use serde::Serialize;

use crate::cloud::SimulatedCloud;

/// One `IncreaseSize` call as the cloud received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResizeCall {
    pub at: Timestamp,
    pub delta: usize,
    /// When nodes asked for by this call could be ready: the group's provisioning delay later.
    pub ready_at: Timestamp,
}

/// The calls one group received, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResizeCallLog {
    calls: Vec<ResizeCall>,
}

impl ResizeCallLog {
    /// Records a call of `delta` received at `at` by a group whose nodes take
    /// `provisioning_delay` to be ready.
    pub fn record(&mut self, at: Timestamp, delta: usize, provisioning_delay: Duration) {
        self.calls.push(ResizeCall {
            at,
            delta,
            ready_at: at + provisioning_delay,
        });
    }

    pub fn calls(&self) -> &[ResizeCall] {
        &self.calls
    }

    /// The calls grouped into bursts, in order.
    pub fn bursts(&self) -> Vec<Burst> {
        let mut bursts: Vec<Burst> = Vec::new();
        let mut open_until: Option<Timestamp> = None;
        for call in &self.calls {
            match bursts.last_mut() {
                Some(burst) if open_until.is_some_and(|until| call.at < until) => {
                    burst.calls += 1;
                    burst.nodes = burst.nodes.saturating_add(call.delta);
                    burst.last_call = call.at;
                }
                _ => bursts.push(Burst {
                    first_call: call.at,
                    last_call: call.at,
                    calls: 1,
                    nodes: call.delta,
                }),
            }
            open_until = Some(call.ready_at);
        }
        bursts
    }

    /// Calls, bursts and the most calls of one burst, for the summary.
    pub fn summary(&self, start: Timestamp) -> ResizeSummary {
        let bursts = self.bursts();
        ResizeSummary {
            resize_calls: self.calls.len(),
            max_calls_per_burst: bursts.iter().map(|b| b.calls).max().unwrap_or(0),
            bursts: bursts
                .iter()
                .map(|burst| BurstSummary {
                    first_call_seconds: seconds_since(start, burst.first_call),
                    last_call_seconds: seconds_since(start, burst.last_call),
                    calls: burst.calls,
                    nodes: burst.nodes,
                })
                .collect(),
        }
    }
}

/// The summary of group `id`'s calls in `cloud` (empty for an unknown group).
pub fn of_group(cloud: &SimulatedCloud, id: &str, start: Timestamp) -> ResizeSummary {
    cloud
        .group(id)
        .map(|group| group.resize_calls().summary(start))
        .unwrap_or_default()
}

/// A run of a group's calls answering one wave of pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Burst {
    pub first_call: Timestamp,
    pub last_call: Timestamp,
    pub calls: usize,
    /// The sum of the calls' deltas.
    pub nodes: usize,
}

/// A group's resize calls in the JSON summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResizeSummary {
    /// `IncreaseSize` calls received, failed ones included.
    pub resize_calls: usize,
    /// The most calls of one burst (0 without calls).
    pub max_calls_per_burst: usize,
    pub bursts: Vec<BurstSummary>,
}

/// One burst in the JSON summary, times in simulated seconds from the start.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BurstSummary {
    pub first_call_seconds: f64,
    pub last_call_seconds: f64,
    pub calls: usize,
    pub nodes: usize,
}

fn seconds_since(start: Timestamp, at: Timestamp) -> f64 {
    (at.since(start).as_secs_f64() * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> Timestamp {
        Timestamp::from_secs(0) + Duration::from_secs(seconds)
    }

    fn log(calls: &[(u64, usize)]) -> ResizeCallLog {
        let mut log = ResizeCallLog::default();
        for (seconds, delta) in calls {
            log.record(at(*seconds), *delta, Duration::from_secs(60));
        }
        log
    }

    /// Calls less than the provisioning delay apart form one burst; a call after every earlier
    /// request could be ready starts the next.
    #[test]
    fn calls_within_the_provisioning_delay_form_one_burst() {
        let log = log(&[(0, 3), (10, 2), (65, 1), (200, 4), (259, 1), (318, 1)]);
        let bursts: Vec<(usize, usize)> = log.bursts().iter().map(|b| (b.calls, b.nodes)).collect();
        assert_eq!(bursts, vec![(3, 6), (3, 6)]);
        let summary = log.summary(at(0));
        assert_eq!(summary.resize_calls, 6);
        assert_eq!(summary.max_calls_per_burst, 3);
        assert_eq!(summary.bursts[1].first_call_seconds, 200.0);
        assert_eq!(summary.bursts[1].last_call_seconds, 318.0);
    }

    /// A call exactly when the previous call's nodes are ready opens a new burst.
    #[test]
    fn a_call_when_the_nodes_are_ready_starts_a_new_burst() {
        let log = log(&[(0, 1), (60, 1)]);
        assert_eq!(log.bursts().len(), 2);
        assert_eq!(
            ResizeCallLog::default().summary(at(0)),
            ResizeSummary::default()
        );
    }
}
