//! The whole loop on upstream's `RunOnce` benchmark workloads (`pkg/core/bench/
//! benchmark_runonce_test.go`, see `ferroscale_sim::upstream_runonce`): one
//! `Autoscaler::run_once` — gather through the simulator's in-memory cloud and cluster, snapshot,
//! decide, act (resizes, taints) — at upstream's size and at five times it.
//!
//! Like upstream's benchmark, every iteration gets fresh fakes and a fresh autoscaler and only
//! `run_once` is timed; after every iteration the fakes must hold upstream's verified outcome
//! (target size, or nodes tainted `ToBeDeletedByClusterAutoscaler`), or the benchmark stops. The
//! first iteration of each workload prints where the loop's time went: decide (the outcome's
//! `function_millis`), the calls into the fakes, and the engine's own gather, snapshot and act.
//!
//! Run with `cargo bench -p ferroscale-sim --bench runonce_upstream -- --warm-up-time 1
//! --measurement-time 3`; a filter (`-- scale_down`) picks workloads.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use ferroscale_sim::upstream_runonce::{RunOnceWorkload, Workload};

#[path = "support/timed.rs"]
mod timed;

// The allocator of the `ferroscale` binary, so that the times are those of `ferroscale run`.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Builds, times one loop, and checks upstream's outcome; returns the loop's wall time.
fn timed_loop(run: RunOnceWorkload, report: &mut bool) -> Duration {
    let mut prepared = match run.prepare() {
        Ok(prepared) => prepared,
        Err(e) => panic!("{}: {e}", run.label()),
    };
    // The first iteration of a workload also says where the time went (the wrappers that time
    // the calls into the fakes cost a few hundred nanoseconds a call).
    let (outcome, took) = if *report {
        *report = false;
        let (outcome, phases) = timed::run_once_with_phases(&mut prepared);
        eprintln!("runonce_upstream: {}: {phases}", run.label());
        (outcome, phases.wall)
    } else {
        let started = Instant::now();
        let outcome = black_box(prepared.run_once());
        (outcome, started.elapsed())
    };
    if let Err(mismatch) = prepared.check() {
        panic!("{mismatch}");
    }
    if outcome.error.is_some() || outcome.ended_early.is_some() {
        panic!(
            "{}: the loop stopped: {:?} {:?}",
            run.label(),
            outcome.error,
            outcome.ended_early
        );
    }
    // The fakes are dropped outside the timing.
    drop((outcome, prepared));
    took
}

fn id(run: &RunOnceWorkload) -> String {
    let what = match run.workload {
        Workload::ScaleUp => format!("{}k_pods", run.pods() / 1000),
        Workload::ScaleDown => format!("{}_nodes", run.nodes()),
        Workload::ScaleUpDra => format!("{}_claim_pods", run.pods()),
        Workload::ScaleDownDra => format!("{}_nodes_with_devices", run.nodes()),
    };
    format!(
        "{}_{}x_{what}",
        run.workload.name().replace('-', "_"),
        run.scale
    )
}

fn workloads(c: &mut Criterion) {
    let mut group = c.benchmark_group("runonce_upstream");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    for scale in [1, 5] {
        for workload in Workload::ALL {
            let run = RunOnceWorkload::new(workload, scale);
            let mut report = true;
            group.bench_function(id(&run), |b| {
                b.iter_custom(|iterations| {
                    (0..iterations).map(|_| timed_loop(run, &mut report)).sum()
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, workloads);
criterion_main!(benches);
