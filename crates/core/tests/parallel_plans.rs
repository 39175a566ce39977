//! docs/behaviour.md SU-112: plans are identical for every thread count. The same inputs are
//! planned on one thread (no pool at all) and on pools of 2 and 4 threads, and the whole plans
//! (status, increases, verdicts, events; unneeded and unremovable nodes, moves, next state) must
//! be equal. The fixtures have several node groups (each group's template check and estimate is
//! a piece of parallel work), inter-pod constraints (anti-affinity, topology spread, affinity),
//! DRA claims, and scale-down clusters with hundreds of candidates.

use ferroscale_core::parallel::Workers;
use ferroscale_core::scale_down::ScaleDownPlan;
use ferroscale_core::scale_up::{ScaleUpPlan, ScaleUpStatus};
use ferroscale_engine_fixtures::scale_down::{
    ClusterShape, ScaleDownFixture, underutilized_cluster,
};
use ferroscale_engine_fixtures::{
    ScaleUpFixture, busy_cluster, constrained_cluster, dra_scale_down, dra_scale_up, karpenter_mix,
};
use proptest::prelude::*;

const THREAD_COUNTS: [usize; 2] = [2, 4];

fn workers(threads: usize) -> Workers {
    match Workers::new(threads) {
        Ok(workers) => workers,
        Err(error) => panic!("the test needs {threads} threads: {error}"),
    }
}

/// Plans the fixture built by `build` on one thread and on every count of [`THREAD_COUNTS`];
/// returns the one-thread plan after checking the others equal it.
fn same_scale_up_plan(build: impl Fn() -> ScaleUpFixture) -> ScaleUpPlan {
    let mut fixture = build();
    fixture.workers = Workers::sequential();
    let expected = fixture.plan_on_branch();
    for threads in THREAD_COUNTS {
        let mut fixture = build();
        fixture.workers = workers(threads);
        assert_eq!(fixture.workers.threads(), threads);
        let pods_before = fixture.snapshot.pod_count();
        let plan = fixture.plan_on_branch();
        assert_eq!(plan, expected, "scale-up plan on {threads} threads");
        assert_eq!(
            fixture.snapshot.pod_count(),
            pods_before,
            "the caller's snapshot is left as it was"
        );
    }
    expected
}

fn same_scale_down_plan(build: impl Fn() -> ScaleDownFixture) -> ScaleDownPlan {
    let mut fixture = build();
    fixture.workers = Workers::sequential();
    let expected = fixture.plan();
    for threads in THREAD_COUNTS {
        let mut fixture = build();
        fixture.workers = workers(threads);
        let plan = fixture.plan();
        assert_eq!(plan, expected, "scale-down plan on {threads} threads");
    }
    expected
}

#[test]
fn scale_up_plans_of_five_groups_are_the_same_on_every_thread_count() {
    let plan = same_scale_up_plan(|| busy_cluster(60, 30, 600, 3, 5));
    assert_eq!(plan.status, ScaleUpStatus::Successful);
    assert_eq!(
        plan.chosen.as_ref().map(|c| c.options_considered),
        Some(5),
        "every group was estimated"
    );
}

#[test]
fn scale_up_plans_with_inter_pod_constraints_are_the_same_on_every_thread_count() {
    let plan = same_scale_up_plan(|| constrained_cluster(60, 200));
    assert_eq!(plan.status, ScaleUpStatus::Successful);
    let plan = same_scale_up_plan(|| karpenter_mix(250, 5));
    assert_eq!(plan.status, ScaleUpStatus::Successful);
}

#[test]
fn scale_up_plans_with_balancing_random_expander_and_fast_path_are_the_same() {
    for (flag, value) in [
        ("balance-similar-node-groups", "true"),
        ("expander", "random"),
        ("expander", "most-pods,least-waste"),
        ("fastpath-binpacking-enabled", "true"),
        ("scaleup-simulation-for-skipped-node-groups-enabled", "true"),
        ("max-nodes-total", "70"),
    ] {
        let build = || {
            let mut fixture = busy_cluster(40, 30, 400, 3, 5);
            if let Err(error) = fixture.options.set(flag, value) {
                panic!("--{flag}={value}: {error}");
            }
            fixture
        };
        same_scale_up_plan(build);
    }
}

#[test]
fn scale_up_plans_with_dra_claims_are_the_same_on_every_thread_count() {
    same_scale_up_plan(|| {
        let mut fixture = dra_scale_up(40);
        // Two groups with the same template: two pieces of work on claims' state.
        let mut second = fixture.groups[0].clone();
        second.id = "ng2".into();
        fixture.groups.push(second);
        fixture
    });
}

#[test]
fn scale_down_plans_are_the_same_on_every_thread_count() {
    for steady in [false, true] {
        let plan = same_scale_down_plan(|| {
            underutilized_cluster(ClusterShape::scenario_4_scaled(300), steady)
        });
        assert!(!plan.unneeded.is_empty(), "the fixture has removable nodes");
    }
    let shape = ClusterShape {
        nodes: 400,
        underutilized: 120,
        ..ClusterShape::large_20_percent_underutilized()
    };
    same_scale_down_plan(|| underutilized_cluster(shape, true));
    same_scale_down_plan(|| dra_scale_down(60));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Clusters of every size and mix the fixtures can build: busy nodes, several pod shapes and
    /// up to six node groups.
    #[test]
    fn random_scale_up_inputs_plan_the_same_on_every_thread_count(
        nodes in 0usize..40,
        pods_per_node in 0usize..32,
        pending in 1usize..300,
        shapes in 1usize..5,
        groups in 1usize..7,
        constrained in any::<bool>(),
    ) {
        if constrained {
            same_scale_up_plan(|| karpenter_mix(pending, groups));
        } else {
            same_scale_up_plan(|| busy_cluster(nodes, pods_per_node, pending, shapes, groups));
        }
    }

    #[test]
    fn random_scale_down_clusters_plan_the_same_on_every_thread_count(
        nodes in 2usize..120,
        underutilized_share in 0usize..=100,
        idle_pods in 0usize..20,
        steady in any::<bool>(),
    ) {
        let shape = ClusterShape {
            nodes,
            underutilized: nodes * underutilized_share / 100,
            idle_pods,
            group_min: 0,
            ..ClusterShape::upstream_scenario_4()
        };
        same_scale_down_plan(|| underutilized_cluster(shape, steady));
    }
}
