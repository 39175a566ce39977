//! The actuation flags of docs/behaviour.md SD-117 (`--node-deletion-batcher-interval`), SD-118
//! (`--drain-priority-config`) and SD-119 (`--dynamic-node-delete-delay-after-taint-enabled`),
//! driven through the `DeletionTracker` with the recording fakes of the loop tests.

mod loop_fakes;

use std::cell::Cell;
use std::time::Duration;

use ferroscale_core::act::deletions::{DeletionFailure, RemovalKind};
use ferroscale_core::autoscaler::Stopwatch;
use ferroscale_core::options::{AutoscalingOptions, OptionError};
use ferroscale_model::Timestamp;
use futures::executor::block_on;
use loop_fakes::*;

fn after(start: Timestamp, millis: i64) -> Timestamp {
    Timestamp(start.0 + millis)
}

/// Checks docs/behaviour.md SD-117: with a batcher interval, the deletions of one group that
/// become ready within the interval go out in one `DeleteNodes` call when it ends.
#[test]
fn batcher_interval_deletes_a_groups_nodes_in_one_call() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2", "n3"]);
    f.options
        .set("node-deletion-batcher-interval", "10s")
        .expect("valid");
    let start = t(1_000);
    f.start_one("n1", RemovalKind::Empty, start);
    f.start_one("n2", RemovalKind::Empty, start + Duration::from_secs(3));
    f.advance(start + Duration::from_secs(5)); // n1 ready
    f.advance(start + Duration::from_secs(8)); // n2 ready
    f.advance(start + Duration::from_secs(14));
    assert!(
        calls(&f.log, "cloud.delete_nodes").is_empty(),
        "the batch waits for the interval after its first node"
    );
    let progress = f.advance(start + Duration::from_secs(15));
    assert_eq!(
        calls(&f.log, "cloud.delete_nodes"),
        vec!["cloud.delete_nodes pool n1,n2"]
    );
    assert_eq!(progress.completed.len(), 2);
    assert!(f.tracker.is_idle());
}

/// Checks docs/behaviour.md SD-117: without an interval (the default) every node goes on its own
/// as soon as it is ready.
#[test]
fn without_batcher_interval_each_node_is_deleted_when_ready() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2", "n3"]);
    let start = t(1_000);
    f.start_one("n1", RemovalKind::Empty, start);
    f.start_one("n2", RemovalKind::Empty, start + Duration::from_secs(3));
    f.advance(start + Duration::from_secs(5));
    f.advance(start + Duration::from_secs(8));
    assert_eq!(
        calls(&f.log, "cloud.delete_nodes"),
        vec!["cloud.delete_nodes pool n1", "cloud.delete_nodes pool n2"]
    );
}

/// Checks docs/behaviour.md SD-118: pods are evicted band by band, lowest priority first, each
/// with its band's grace, and the next band starts only once the previous band's pods are gone.
#[test]
fn drain_priority_bands_evict_lowest_band_first_with_its_own_grace() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2", "n3"]);
    f.options
        .set("drain-priority-config", "1000:100,0:20")
        .expect("valid");
    f.options
        .validate()
        .expect("no conflict at the default grace");
    f.cluster.state().evictions_remove_pods = false;
    let low = pod_on("low", "n1", 100); // priority unset: 0, grace 30 capped to 20
    let mut high = pod_on("high", "n1", 100);
    high.priority = Some(2000);
    high.termination_grace_seconds = Some(300);
    f.cluster.add_pod(low);
    f.cluster.add_pod(high);

    f.start_one("n1", RemovalKind::Drain, t(0));
    f.advance(t(5));
    assert_eq!(
        calls(&f.log, "kube.evict"),
        vec!["kube.evict default/low grace=20"]
    );
    f.advance(t(20));
    assert_eq!(
        calls(&f.log, "kube.evict").len(),
        1,
        "the high band waits while a low pod is still there"
    );
    f.cluster.state().pods.remove("default/low");
    f.advance(t(25));
    assert_eq!(
        calls(&f.log, "kube.evict"),
        vec![
            "kube.evict default/low grace=20",
            "kube.evict default/high grace=100"
        ]
    );
    assert!(calls(&f.log, "cloud.delete_nodes").is_empty());
    f.cluster.state().pods.remove("default/high");
    f.advance(t(30));
    assert_eq!(
        calls(&f.log, "cloud.delete_nodes"),
        vec!["cloud.delete_nodes pool n1"]
    );
}

/// Checks docs/behaviour.md SD-118: a band's pods are waited for its grace plus 30 s, not for
/// `--max-graceful-termination-sec`.
#[test]
fn a_band_gives_up_after_its_own_grace_plus_thirty_seconds() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2", "n3"]);
    f.options
        .set("drain-priority-config", "0:20")
        .expect("valid");
    f.cluster.state().evictions_remove_pods = false;
    f.cluster.add_pod(pod_on("slow", "n1", 100));
    f.start_one("n1", RemovalKind::Drain, t(0));
    f.advance(t(5));
    assert!(f.advance(t(5 + 49)).failed.is_empty());
    let progress = f.advance(t(5 + 50));
    assert_eq!(
        progress.failed[0].reason,
        DeletionFailure::PodsRemaining {
            pods: vec!["default/slow".into()]
        }
    );
}

/// Checks docs/behaviour.md SD-118: in a banded drain, DaemonSet pods the flags select are evicted
/// in their band and waited for, not best effort.
#[test]
fn banded_drain_waits_for_selected_daemonset_pods() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2", "n3"]);
    f.options
        .set("drain-priority-config", "0:20")
        .expect("valid");
    f.cluster.state().evictions_remove_pods = false;
    f.cluster.add_pod(daemonset_pod_on("agent", "n1"));
    f.start_one("n1", RemovalKind::Drain, t(0));
    f.advance(t(5));
    assert_eq!(calls(&f.log, "kube.evict").len(), 1);
    f.advance(t(10));
    assert!(
        calls(&f.log, "cloud.delete_nodes").is_empty(),
        "the DaemonSet pod is waited for"
    );
}

/// Checks docs/behaviour.md SD-118: `--drain-priority-config` with a non-default
/// `--max-graceful-termination-sec` is refused naming both flags, and a malformed value names the
/// flag and the bad pair.
#[test]
fn drain_priority_config_conflicts_with_max_graceful_termination_sec() {
    let mut options = AutoscalingOptions::default();
    options.set("drain-priority-config", "0:20").expect("valid");
    options
        .set("max-graceful-termination-sec", "600")
        .expect("valid");
    options
        .validate()
        .expect("the default value does not conflict");
    options
        .set("max-graceful-termination-sec", "300")
        .expect("valid");
    let error = options.validate().expect_err("both flags").to_string();
    assert!(error.contains("--drain-priority-config"), "{error}");
    assert!(error.contains("--max-graceful-termination-sec"), "{error}");

    let mut options = AutoscalingOptions::default();
    let error = options
        .set("drain-priority-config", "10000:20,1000")
        .expect_err("malformed");
    assert!(matches!(
        &error,
        OptionError::InvalidValue { flag, value, .. }
            if flag == "drain-priority-config" && value == "10000:20,1000"
    ));
    assert!(error.to_string().contains("\"1000\""), "{error}");
    assert!(options.set("drain-priority-config", "high:20").is_err());
}

/// A clock that moves `step` milliseconds every time it is read.
struct TickingClock {
    now: Cell<f64>,
    step: f64,
}

impl Stopwatch for TickingClock {
    fn elapsed_millis(&self) -> f64 {
        let now = self.now.get();
        self.now.set(now + self.step);
        now
    }
}

/// Checks docs/behaviour.md SD-119: with the dynamic delay, the post-taint wait is twice the worst
/// taint latency measured in the last hour instead of `--node-delete-delay-after-taint`.
#[test]
fn dynamic_delay_is_twice_the_worst_taint_latency_of_the_last_hour() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2", "n3"]);
    f.options
        .set("dynamic-node-delete-delay-after-taint-enabled", "true")
        .expect("valid");
    // Each read of the clock moves it 40 ms: the taint of n1 is seen 40 ms after its call began.
    let clock = TickingClock {
        now: Cell::new(0.0),
        step: 40.0,
    };
    let start = t(10_000);
    let request = f.request("n1", RemovalKind::Empty);
    block_on(
        f.tracker
            .start_measured(vec![request], &f.cluster, start, &f.options, &clock),
    );
    assert_eq!(
        f.tracker.delay_after_taint(&f.options),
        Duration::from_millis(80)
    );
    f.advance(after(start, 79));
    assert!(calls(&f.log, "cloud.delete_nodes").is_empty());
    f.advance(after(start, 80));
    assert_eq!(
        calls(&f.log, "cloud.delete_nodes"),
        vec!["cloud.delete_nodes pool n1"]
    );

    // A slower measurement half an hour later raises the delay; two hours later only the new,
    // faster one counts.
    let slow = TickingClock {
        now: Cell::new(0.0),
        step: 500.0,
    };
    let request = f.request("n2", RemovalKind::Empty);
    let half_hour = start + Duration::from_secs(1800);
    block_on(
        f.tracker
            .start_measured(vec![request], &f.cluster, half_hour, &f.options, &slow),
    );
    assert_eq!(
        f.tracker.delay_after_taint(&f.options),
        Duration::from_secs(1)
    );
    let request = f.request("n3", RemovalKind::Empty);
    block_on(f.tracker.start_measured(
        vec![request],
        &f.cluster,
        half_hour + Duration::from_secs(7200),
        &f.options,
        &clock,
    ));
    assert_eq!(
        f.tracker.delay_after_taint(&f.options),
        Duration::from_millis(80)
    );
}

/// Checks docs/behaviour.md SD-119: without the flag the configured delay holds whatever the
/// latency.
#[test]
fn without_the_flag_the_configured_delay_holds() {
    let mut f = ActuationFixture::with_nodes(&["n1", "n2", "n3"]);
    let clock = TickingClock {
        now: Cell::new(0.0),
        step: 40.0,
    };
    let start = t(10_000);
    let request = f.request("n1", RemovalKind::Empty);
    block_on(
        f.tracker
            .start_measured(vec![request], &f.cluster, start, &f.options, &clock),
    );
    assert_eq!(
        f.tracker.delay_after_taint(&f.options),
        Duration::from_secs(5)
    );
    f.advance(after(start, 80));
    assert!(calls(&f.log, "cloud.delete_nodes").is_empty());
}
