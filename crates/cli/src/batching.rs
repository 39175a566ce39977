//! When the main loop starts its next iteration with `--frequent-loops-enabled`
//! (docs/behaviour.md LOOP-104, LOOP-105, LOOP-116–LOOP-119): a pure policy over the times at
//! which pods were newly marked unschedulable and the times iterations start, so that its timing
//! is tested without a clock.
//!
//! Why batches: a Deployment's pods arrive over seconds (its ReplicaSet controller creates them
//! at its client rate), and every iteration that sees new pods resizes their group again. Real
//! clouds throttle resize calls per account, so one resize per pod wave is what a burst should
//! cost. The policy keeps the first reaction fast and batches what follows:
//!
//! - the first pod of a burst (one reported at least `idle` after the previous report) opens a
//!   batch that closes `first` after it: the first resize follows within a fraction of a second;
//! - pods reported after an iteration started form the next batch, which closes `idle` after its
//!   latest pod or `max` after its first one, whichever comes first;
//! - while a batch is open no iteration starts, neither at the scan interval nor at once after an
//!   iteration that acted; the iteration at its close plans for everything pending, and the pods
//!   earlier resizes already cover are the engine's upcoming nodes, not new demand;
//! - an iteration that scaled up while its burst goes on opens a batch at its end rather than
//!   starting the next one at once: the scheduler gives the new nodes to whichever pods it tries
//!   first, often ones created since, so some pods the resize was for are left over, and they
//!   join the next batch instead of costing a resize each.

use std::time::{Duration, Instant};

/// The three windows of the batching (`--unschedulable-pods-batching-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchingWindows {
    /// `--unschedulable-pods-batching-window`: how long the first pod of a burst waits for the
    /// rest of its wave.
    pub first: Duration,
    /// `--unschedulable-pods-batching-idle-gap`: a batch after the first closes once no pod has
    /// arrived for this long; a pod arriving after a quiet gap this long starts a new burst.
    pub idle: Duration,
    /// `--unschedulable-pods-batching-max-window`: the longest a batch after the first stays
    /// open while pods keep arriving.
    pub max: Duration,
}

impl Default for BatchingWindows {
    fn default() -> Self {
        BatchingWindows {
            first: Duration::from_millis(100),
            idle: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }
}

/// Pods reported since the last iteration started, which no iteration has planned for yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Batch {
    opened: Instant,
    latest: Instant,
    /// Opened by the first pod of a burst: closes after the short first window.
    first_of_burst: bool,
}

/// What the loop knows when an iteration has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// When the iteration finished.
    pub at: Instant,
    /// When the scan interval starts the next iteration anyway.
    pub scan_due: Instant,
    /// One of the last two iterations scaled up or started a deletion (LOOP-104).
    pub acted_recently: bool,
    /// The iteration skipped scale-up because every pending pod was younger than the first
    /// window (docs/behaviour.md SU-09).
    pub waiting_for_pods: bool,
}

/// The batching state of one loop.
#[derive(Debug, Clone)]
pub struct Batcher {
    windows: BatchingWindows,
    open: Option<Batch>,
    last_arrival: Option<Instant>,
}

impl Batcher {
    pub fn new(windows: BatchingWindows) -> Batcher {
        Batcher {
            windows,
            open: None,
            last_arrival: None,
        }
    }

    /// A pod newly marked unschedulable was reported at `at`.
    pub fn pod_arrived(&mut self, at: Instant) {
        let continues_burst = self
            .last_arrival
            .is_some_and(|last| at.saturating_duration_since(last) < self.windows.idle);
        self.last_arrival = Some(self.last_arrival.map_or(at, |last| last.max(at)));
        match &mut self.open {
            Some(batch) => batch.latest = batch.latest.max(at),
            None => {
                self.open = Some(Batch {
                    opened: at,
                    latest: at,
                    first_of_burst: !continues_burst,
                });
            }
        }
    }

    /// An iteration finished at `at`, having scaled up or not. While its burst goes on (a pod was
    /// reported less than the maximum window before), an iteration that scaled up opens a batch
    /// at its end: the pods its nodes were for but that the scheduler left over wait for the
    /// batch instead of each costing a resize at once.
    pub fn iteration_finished(&mut self, at: Instant, scaled_up: bool) {
        let in_burst = self
            .last_arrival
            .is_some_and(|last| at.saturating_duration_since(last) < self.windows.max);
        if scaled_up && in_burst && self.open.is_none() {
            self.open = Some(Batch {
                opened: at,
                latest: at,
                first_of_burst: false,
            });
        }
    }

    /// An iteration starts: it plans for every pod reported so far, so the open batch is served.
    pub fn iteration_started(&mut self) {
        self.open = None;
    }

    /// When the open batch closes, if a batch is open.
    pub fn batch_closes(&self) -> Option<Instant> {
        let windows = self.windows;
        self.open.map(|batch| {
            if batch.first_of_burst {
                batch.opened + windows.first
            } else {
                (batch.latest + windows.idle).min(batch.opened + windows.max)
            }
        })
    }

    /// When the next iteration starts, as known now: the open batch's close; else at once after
    /// an iteration that acted; else after the first window when the iteration waited for young
    /// pods; else at the scan interval. Arrivals reported later can only move it.
    pub fn next_iteration(&self, finished: Finished) -> Instant {
        if let Some(close) = self.batch_closes() {
            return close;
        }
        if finished.acted_recently {
            return finished.at;
        }
        if finished.waiting_for_pods {
            return (finished.at + self.windows.first).min(finished.scan_due);
        }
        finished.scan_due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A fixed origin: every time below is an offset from it, so no test depends on the clock.
    struct Timeline(Instant);

    impl Timeline {
        fn new() -> Timeline {
            Timeline(Instant::now())
        }
        fn at(&self, millis: u64) -> Instant {
            self.0 + ms(millis)
        }
        fn offset(&self, at: Instant) -> u64 {
            at.duration_since(self.0).as_millis() as u64
        }
        fn quiet(&self, finished: u64) -> Finished {
            Finished {
                at: self.at(finished),
                scan_due: self.at(finished + 10_000),
                acted_recently: false,
                waiting_for_pods: false,
            }
        }
    }

    /// Replays pods reported at `arrivals` (milliseconds) through a loop whose iterations take
    /// `iteration` each and scale up when pods were reported since the previous one started;
    /// returns the start of every iteration that scaled up.
    fn iterations_for(arrivals: &[u64], iteration: u64, windows: BatchingWindows) -> Vec<u64> {
        iterations_and_resizes(arrivals, iteration, windows)
            .into_iter()
            .filter_map(|(start, resized)| resized.then_some(start))
            .collect()
    }

    /// [`iterations_for`], with every iteration the pods caused and whether it scaled up.
    fn iterations_and_resizes(
        arrivals: &[u64],
        iteration: u64,
        windows: BatchingWindows,
    ) -> Vec<(u64, bool)> {
        let t = Timeline::new();
        let mut batcher = Batcher::new(windows);
        let mut starts = Vec::new();
        let mut pending = arrivals.iter().copied().peekable();
        let mut now = 0;
        let mut reported = false;
        loop {
            // Report every arrival up to the next start, which an arrival can move.
            let next = loop {
                let finished = Finished {
                    acted_recently: false,
                    ..t.quiet(now)
                };
                let next = t.offset(batcher.next_iteration(finished));
                match pending.peek() {
                    Some(&arrival) if arrival <= next || batcher.batch_closes().is_none() => {
                        reported = true;
                        batcher.pod_arrived(t.at(arrival));
                        now = now.max(arrival);
                        pending.next();
                    }
                    _ => break next,
                }
            };
            if batcher.batch_closes().is_none() {
                return starts;
            }
            batcher.iteration_started();
            starts.push((next, reported));
            now = next + iteration;
            batcher.iteration_finished(t.at(now), reported);
            reported = false;
        }
    }

    /// docs/behaviour.md LOOP-116: the first pod of a burst starts an iteration after the first
    /// window, whatever follows it.
    #[test]
    fn the_first_pod_of_a_burst_wakes_an_iteration_after_the_first_window() {
        let t = Timeline::new();
        let mut batcher = Batcher::new(BatchingWindows::default());
        batcher.pod_arrived(t.at(0));
        batcher.pod_arrived(t.at(40));
        batcher.pod_arrived(t.at(90));
        assert_eq!(batcher.batch_closes(), Some(t.at(100)));
        assert_eq!(batcher.next_iteration(t.quiet(0)), t.at(100));
    }

    /// docs/behaviour.md LOOP-117: pods that keep arriving after the first iteration are batched
    /// until an idle gap or the maximum, so a wave of pods over 15 s costs three iterations.
    #[test]
    fn a_steady_stream_is_served_by_the_first_window_then_the_max_then_the_idle_gap() {
        // 300 pods at 20 a second, as a ReplicaSet controller with client-go's default rate
        // creates them; each iteration takes 200 ms.
        let arrivals: Vec<u64> = (0..300).map(|i| i * 50).collect();
        let starts = iterations_for(&arrivals, 200, BatchingWindows::default());
        assert_eq!(starts, [100, 10_300, 15_950]);
    }

    /// docs/behaviour.md LOOP-117: a batch closes an idle gap after its latest pod, before the
    /// maximum, when the pods stop coming.
    #[test]
    fn a_batch_closes_an_idle_gap_after_its_latest_pod() {
        let t = Timeline::new();
        let mut batcher = Batcher::new(BatchingWindows::default());
        batcher.pod_arrived(t.at(0));
        batcher.iteration_started();
        batcher.pod_arrived(t.at(300));
        assert_eq!(batcher.batch_closes(), Some(t.at(1_300)));
        batcher.pod_arrived(t.at(800));
        assert_eq!(
            batcher.batch_closes(),
            Some(t.at(1_800)),
            "each pod extends it"
        );
        for at in (1_700..12_000).step_by(700) {
            batcher.pod_arrived(t.at(at));
        }
        assert_eq!(
            batcher.batch_closes(),
            Some(t.at(10_300)),
            "never longer than the maximum after its first pod"
        );
    }

    /// docs/behaviour.md LOOP-116: after a quiet gap as long as the idle gap, the next pod is the
    /// first of a new burst and gets the fast first reaction again.
    #[test]
    fn a_pod_after_a_quiet_gap_starts_a_new_burst() {
        let starts = iterations_for(&[0, 50, 5_000, 5_020], 200, BatchingWindows::default());
        assert_eq!(starts, [100, 5_100]);
        let starts = iterations_for(&[0, 500, 1_400], 200, BatchingWindows::default());
        assert_eq!(
            starts,
            [100, 2_400],
            "pods less than the idle gap apart belong to the same burst"
        );
    }

    /// docs/behaviour.md LOOP-118: an open batch holds back the iteration that would start at
    /// once after one that acted, and the one the scan interval would start.
    #[test]
    fn an_open_batch_holds_back_the_immediate_and_the_periodic_iteration() {
        let t = Timeline::new();
        let mut batcher = Batcher::new(BatchingWindows::default());
        batcher.pod_arrived(t.at(0));
        batcher.iteration_started();
        batcher.pod_arrived(t.at(150));
        let acted = Finished {
            acted_recently: true,
            scan_due: t.at(400),
            ..t.quiet(300)
        };
        assert_eq!(batcher.next_iteration(acted), t.at(1_150));
        batcher.iteration_started();
        assert_eq!(
            batcher.next_iteration(acted),
            t.at(300),
            "without new pods, an iteration that acted is followed at once (LOOP-104)"
        );
        assert_eq!(batcher.next_iteration(t.quiet(300)), t.at(10_300));
    }

    /// docs/behaviour.md LOOP-118: an iteration that scaled up while its burst goes on is
    /// followed one idle gap later, not at once, so that the pods the scheduler left over join
    /// one more iteration instead of each costing a resize; after the burst, at once again.
    #[test]
    fn an_iteration_that_scaled_up_during_a_burst_is_followed_after_the_idle_gap() {
        let t = Timeline::new();
        let mut batcher = Batcher::new(BatchingWindows::default());
        batcher.pod_arrived(t.at(0));
        batcher.iteration_started();
        batcher.iteration_finished(t.at(300), true);
        let acted = Finished {
            acted_recently: true,
            ..t.quiet(300)
        };
        assert_eq!(batcher.next_iteration(acted), t.at(1_300));
        batcher.pod_arrived(t.at(900));
        assert_eq!(batcher.next_iteration(acted), t.at(1_900), "pods extend it");
        batcher.iteration_started();
        batcher.iteration_finished(t.at(12_000), true);
        let later = Finished {
            acted_recently: true,
            ..t.quiet(12_000)
        };
        assert_eq!(
            batcher.next_iteration(later),
            t.at(12_000),
            "no pod for longer than the maximum window: the burst is over"
        );
        let all = iterations_and_resizes(&[0, 50, 3_000], 200, BatchingWindows::default());
        assert_eq!(
            all,
            [(100, true), (1_300, false), (3_100, true), (4_300, false)],
            "one more iteration after each resize, which finds nothing new"
        );
    }

    /// docs/behaviour.md SU-09, LOOP-105: an iteration that waited for young pods looks again
    /// after the first window, never after the scan interval.
    #[test]
    fn an_iteration_that_waited_for_young_pods_looks_again_after_the_first_window() {
        let t = Timeline::new();
        let batcher = Batcher::new(BatchingWindows::default());
        let waiting = Finished {
            waiting_for_pods: true,
            ..t.quiet(1_000)
        };
        assert_eq!(batcher.next_iteration(waiting), t.at(1_100));
        let soon = Finished {
            scan_due: t.at(1_050),
            ..waiting
        };
        assert_eq!(batcher.next_iteration(soon), t.at(1_050));
    }

    /// docs/behaviour.md LOOP-119: an idle gap of zero turns the batching off: every pod is the
    /// first of its burst, as before the adaptive batching.
    #[test]
    fn a_zero_idle_gap_makes_every_report_the_first_of_a_burst() {
        let windows = BatchingWindows {
            idle: Duration::ZERO,
            ..BatchingWindows::default()
        };
        let arrivals: Vec<u64> = (0..10).map(|i| i * 150).collect();
        let starts = iterations_for(&arrivals, 20, windows);
        assert_eq!(
            starts,
            [100, 250, 400, 550, 700, 850, 1_000, 1_150, 1_300, 1_450]
        );
    }
}
