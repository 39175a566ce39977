//! Scale-down decision speed on synthetic clusters (see `ferroscale_engine_fixtures::scale_down`):
//! (a) upstream scenario 4 — 1,000 nodes, ~52,000 pods, 700 nodes ~70 % and 300 ~30 % full,
//! group min 970; (b) 5,000 nodes, 150,000 pods, 20 % underutilized; (c) how (a)-like decisions
//! scale with cluster size; (d) upstream's RunOnce scale-down workload (2,000 nodes × 40 pods of
//! 1 %, pods without a controller, 60 % removable) at 1× and 5×, first loop, plan only: linear
//! planning takes about five times as long at 5×.
//!
//! The "steady" variants start from a state that already tracks every underutilized node as
//! unneeded, so the search-stop rule lets the whole candidate set be simulated (the worst case of a
//! long-running loop); "first loop" starts fresh (the rule stops after 2P unneeded nodes). Every
//! plan reverts its snapshot changes, so each iteration sees the same cluster.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ferroscale_engine_fixtures::scale_down::{ClusterShape, underutilized_cluster};
use ferroscale_engine_fixtures::upstream_scale_down;

fn scenarios(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan_scale_down");
    group.sample_size(10);

    let mut a = underutilized_cluster(ClusterShape::upstream_scenario_4(), true);
    group.bench_function("a_scenario_4_1k_nodes_52k_pods_steady", |b| {
        b.iter(|| black_box(a.plan().unneeded.len()))
    });
    let mut a_first = underutilized_cluster(ClusterShape::upstream_scenario_4(), false);
    group.bench_function("a_scenario_4_1k_nodes_52k_pods_first_loop", |b| {
        b.iter(|| black_box(a_first.plan().unneeded.len()))
    });
    drop((a, a_first));

    let mut b_fixture = underutilized_cluster(ClusterShape::large_20_percent_underutilized(), true);
    group.bench_function("b_5k_nodes_150k_pods_20pct_underutilized_steady", |b| {
        b.iter(|| black_box(b_fixture.plan().unneeded.len()))
    });
    drop(b_fixture);
    group.finish();

    let mut scaling = c.benchmark_group("plan_scale_down_scaling");
    scaling.sample_size(10);
    for nodes in [100usize, 1000, 5000, 10_000] {
        let mut fixture = underutilized_cluster(ClusterShape::scenario_4_scaled(nodes), true);
        scaling.bench_with_input(BenchmarkId::from_parameter(nodes), &nodes, |b, _| {
            b.iter(|| black_box(fixture.plan().unneeded.len()))
        });
    }
    scaling.finish();

    let mut upstream = c.benchmark_group("plan_scale_down_upstream_runonce");
    upstream.sample_size(10);
    for (label, nodes) in [("1x_2k_nodes", 2000usize), ("5x_10k_nodes", 10_000)] {
        let mut fixture = upstream_scale_down(nodes);
        upstream.bench_function(label, |b| {
            b.iter(|| black_box(fixture.plan().unneeded.len()))
        });
    }
    upstream.finish();
}

criterion_group!(benches, scenarios);
criterion_main!(benches);
