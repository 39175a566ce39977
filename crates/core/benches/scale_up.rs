//! Scale-up planning speed on synthetic clusters (see `ferroscale_engine_fixtures`):
//! (a) 1,000 busy nodes and 30,000 pending pods of three shapes; (b) 5,000 nodes, 150,000 running
//! pods, 5,000 pending pods with hostname anti-affinity and zone spread; (c) Karpenter's mix of
//! 20,000 constrained pods onto an empty cluster; (d) how (a)-like plans scale with cluster size;
//! (e) upstream's RunOnce scale-up workload (50,000 pods without a controller, 1/50 of a node
//! each) at 1× and 5×, plan only: linear planning takes about five times as long at 5×.
//!
//! Each iteration plans on a branch of the snapshot that is reverted afterwards, so every plan sees
//! the same cluster.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ferroscale_engine_fixtures::{
    ScaleUpFixture, busy_cluster, constrained_cluster, karpenter_mix, upstream_scale_up,
};

fn plan_once(fixture: &mut ScaleUpFixture) -> usize {
    let plan = fixture.plan_on_branch();
    plan.increases.iter().map(|i| i.delta()).sum()
}

fn scenarios(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan_scale_up");
    group.sample_size(10);

    let mut a = busy_cluster(1000, 30, 30_000, 3, 5);
    group.bench_function("a_1k_nodes_30k_pending_3_shapes", |b| {
        b.iter(|| black_box(plan_once(&mut a)))
    });
    drop(a);

    let mut b_fixture = constrained_cluster(5000, 5000);
    group.bench_function("b_5k_nodes_150k_running_5k_constrained_pending", |b| {
        b.iter(|| black_box(plan_once(&mut b_fixture)))
    });
    drop(b_fixture);

    let mut c_fixture = karpenter_mix(20_000, 5);
    group.bench_function("c_karpenter_mix_20k_pending_empty_cluster", |b| {
        b.iter(|| black_box(plan_once(&mut c_fixture)))
    });
    drop(c_fixture);
    group.finish();

    let mut scaling = c.benchmark_group("plan_scale_up_scaling");
    scaling.sample_size(10);
    for nodes in [100usize, 1000, 5000, 10_000] {
        let mut fixture = busy_cluster(nodes, 30, nodes * 3, 3, 5);
        scaling.bench_with_input(BenchmarkId::from_parameter(nodes), &nodes, |b, _| {
            b.iter(|| black_box(plan_once(&mut fixture)))
        });
    }
    scaling.finish();

    let mut upstream = c.benchmark_group("plan_scale_up_upstream_runonce");
    upstream.sample_size(10);
    for (label, nodes) in [("1x_50k_pods", 1000usize), ("5x_250k_pods", 5000)] {
        let mut fixture = upstream_scale_up(nodes);
        assert_eq!(plan_once(&mut fixture), nodes, "upstream's answer");
        upstream.bench_function(label, |b| b.iter(|| black_box(plan_once(&mut fixture))));
    }
    upstream.finish();
}

criterion_group!(benches, scenarios);
criterion_main!(benches);
