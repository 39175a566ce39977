//! Both cores (`--predicate-parallelism`): the same plans on one thread (no pool, the sequential
//! code) and on a pool of two, and what a worker's copy of the snapshot costs.
//!
//! Scale-up: the multi-group fixtures of `scale_up.rs` — (a) 1,000 busy nodes and 30,000 pending
//! pods, 5 groups; (b) 5,000 nodes, 150,000 running pods, 5,000 constrained pending pods, 5
//! groups; (c) Karpenter's mix of 20,000 pods onto an empty cluster, 5 groups. Scale-down: the
//! fixtures of `scale_down.rs` (only the per-node eligibility checks run in parallel there).
//! Snapshot copies: `Snapshot::clone` at 5,000 nodes × 30 pods and 65,000 nodes × 15 pods, with
//! the resident memory a copy adds printed once.

#[path = "support/rss.rs"]
mod rss;

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ferroscale_core::parallel::Workers;
use ferroscale_engine_fixtures::scale_down::{ClusterShape, underutilized_cluster};
use ferroscale_engine_fixtures::{
    ScaleUpFixture, busy_cluster, constrained_cluster, karpenter_mix,
};

const THREADS: [usize; 2] = [1, 2];

/// Builds one scale-up fixture.
type Build = fn() -> ScaleUpFixture;

fn workers(threads: usize) -> Workers {
    Workers::new(threads).unwrap_or_else(|error| panic!("{threads} threads: {error}"))
}

fn plan_once(fixture: &mut ScaleUpFixture) -> usize {
    let plan = fixture.plan_on_branch();
    plan.increases.iter().map(|i| i.delta()).sum()
}

fn scale_up(c: &mut Criterion) {
    let mut group = c.benchmark_group("parallel_scale_up");
    group.sample_size(10);
    let fixtures: [(&str, Build); 3] = [
        ("a_1k_nodes_30k_pending_5_groups", || {
            busy_cluster(1000, 30, 30_000, 3, 5)
        }),
        ("b_5k_nodes_5k_constrained_pending_5_groups", || {
            constrained_cluster(5000, 5000)
        }),
        ("c_karpenter_mix_20k_pending_5_groups", || {
            karpenter_mix(20_000, 5)
        }),
    ];
    for (name, build) in fixtures {
        let mut fixture = build();
        for threads in THREADS {
            fixture.workers = workers(threads);
            group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, _| {
                b.iter(|| black_box(plan_once(&mut fixture)))
            });
        }
    }
    group.finish();
}

fn scale_down(c: &mut Criterion) {
    let mut group = c.benchmark_group("parallel_scale_down");
    group.sample_size(10);
    let shapes = [
        (
            "scenario_4_1k_nodes_steady",
            ClusterShape::upstream_scenario_4(),
        ),
        (
            "5k_nodes_20pct_underutilized_steady",
            ClusterShape::large_20_percent_underutilized(),
        ),
    ];
    for (name, shape) in shapes {
        let mut fixture = underutilized_cluster(shape, true);
        for threads in THREADS {
            fixture.workers = workers(threads);
            group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, _| {
                b.iter(|| black_box(fixture.plan().unneeded.len()))
            });
        }
    }
    group.finish();
}

fn snapshot_copies(c: &mut Criterion) {
    let mut group = c.benchmark_group("snapshot_clone");
    group.sample_size(10);
    for (nodes, pods_per_node) in [(5000usize, 30usize), (65_000, 15)] {
        let fixture = busy_cluster(nodes, pods_per_node, 0, 1, 1);
        let before = rss::resident_kib().map_or(0, |(rss, _)| rss);
        let copy = fixture.snapshot.clone();
        let after = rss::resident_kib().map_or(0, |(rss, _)| rss);
        eprintln!(
            "snapshot_clone/{nodes}: one copy of {nodes} nodes and {} pods adds {} MiB resident",
            copy.pod_count(),
            after.saturating_sub(before) / 1024
        );
        drop(copy);
        group.bench_with_input(BenchmarkId::from_parameter(nodes), &nodes, |b, _| {
            b.iter(|| black_box(fixture.snapshot.clone().node_count()))
        });
    }
    group.finish();
}

criterion_group!(benches, scale_up, scale_down, snapshot_copies);
criterion_main!(benches);
