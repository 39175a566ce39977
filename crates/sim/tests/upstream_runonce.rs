//! Upstream's four `RunOnce` benchmark workloads (`pkg/core/bench/benchmark_runonce_test.go`)
//! at upstream's size, each run for one loop through the simulator's in-memory cloud and cluster:
//! the loop reaches the outcome upstream's benchmark verifies, so the whole-loop benchmarks
//! (`crates/sim/benches/runonce_upstream.rs`) measure the right decisions.

use ferroscale_sim::upstream_runonce::{Expected, Observed, RunOnceWorkload, Workload};

/// Builds the workload, runs one loop and returns what the fakes hold afterwards.
fn one_loop(workload: Workload) -> (RunOnceWorkload, Observed) {
    let run = RunOnceWorkload::new(workload, 1);
    let mut prepared = run
        .prepare()
        .unwrap_or_else(|e| panic!("{}: {e}", run.label()));
    let before = prepared.observed();
    assert_eq!(
        before,
        Observed {
            target_size: if matches!(run.expected(), Expected::Tainted(_)) {
                run.nodes()
            } else {
                0
            },
            tainted: 0
        },
        "{}: the fakes before the loop",
        run.label()
    );
    let outcome = prepared.run_once();
    assert_eq!(outcome.error, None, "{}: the loop failed", run.label());
    assert_eq!(
        outcome.ended_early,
        None,
        "{}: the loop ended early",
        run.label()
    );
    let observed = prepared
        .check()
        .unwrap_or_else(|mismatch| panic!("{mismatch}"));
    (run, observed)
}

#[test]
fn scale_up_of_50000_controllerless_pods_sets_the_target_to_1000_nodes() {
    let (run, observed) = one_loop(Workload::ScaleUp);
    assert_eq!(run.pods(), 50_000);
    assert_eq!(observed.target_size, 1000);
    assert_eq!(observed.tainted, 0);
}

#[test]
fn scale_down_of_2000_nodes_at_40_percent_taints_1200_in_one_loop() {
    let (run, observed) = one_loop(Workload::ScaleDown);
    assert_eq!((run.nodes(), run.pods()), (2000, 80_000));
    assert_eq!(observed.tainted, 1200);
    // Tainting is all the loop does to the cloud: no node is deleted yet.
    assert_eq!(observed.target_size, 2000);
}

#[test]
fn scale_up_of_4000_claim_pods_sets_the_target_to_500_nodes() {
    let (run, observed) = one_loop(Workload::ScaleUpDra);
    assert_eq!(run.pods(), 4000);
    assert_eq!(observed.target_size, 500);
}

#[test]
fn scale_down_of_800_nodes_at_40_percent_of_their_devices_taints_480_in_one_loop() {
    let (run, observed) = one_loop(Workload::ScaleDownDra);
    assert_eq!((run.nodes(), run.pods()), (800, 3200));
    assert_eq!(observed.tainted, 480);
    assert_eq!(observed.target_size, 800);
}
