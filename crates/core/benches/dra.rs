//! Decide speed on upstream's two Dynamic Resource Allocation workloads (see
//! `ferroscale_engine_fixtures::{dra_scale_up, dra_scale_down}`, every parameter from
//! upstream's `pkg/core/bench/benchmark_runonce_test.go`): (a) scale-up of 500 nodes for 4,000
//! pending pods that each claim one of the template's 8 devices; (b) scale-down of 800 nodes with
//! 10 devices each at 40 % device utilization, of which 480 can go.
//!
//! Each scale-up iteration plans on a branch of the snapshot that is reverted afterwards; every
//! scale-down plan reverts its own snapshot changes. So every iteration sees the same cluster.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ferroscale_engine_fixtures::{dra_scale_down, dra_scale_up};

fn scenarios(c: &mut Criterion) {
    let mut group = c.benchmark_group("dra");
    group.sample_size(10);

    let mut up = dra_scale_up(500);
    group.bench_function("a_scale_up_500_nodes_4k_claim_pods", |b| {
        b.iter(|| {
            let plan = up.plan_on_branch();
            black_box(plan.increases.iter().map(|i| i.delta()).sum::<usize>())
        })
    });
    drop(up);

    let mut down = dra_scale_down(800);
    group.bench_function("b_scale_down_800_nodes_10_devices_40pct", |b| {
        b.iter(|| {
            let plan = down.plan();
            black_box(plan.empty_to_delete.len() + plan.drain_to_delete.len())
        })
    });
    group.finish();
}

criterion_group!(benches, scenarios);
criterion_main!(benches);
