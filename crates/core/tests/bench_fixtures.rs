//! The benchmark fixtures must describe real work: small versions of each scenario produce a
//! scale-up, and repeating a plan on a reverted branch gives the same answer.

use ferroscale_core::bench_fixtures::{busy_cluster, constrained_cluster, karpenter_mix};
use ferroscale_core::scale_up::{ScaleUpStatus, plan_scale_up};

#[test]
fn busy_cluster_needs_new_nodes_for_every_pending_pod() {
    let mut f = busy_cluster(20, 30, 300, 3, 5);
    let plan = f.plan_on_branch();
    assert_eq!(plan.status, ScaleUpStatus::Successful);
    assert!(
        plan.pods_schedulable_on_existing.is_empty(),
        "existing nodes are full"
    );
    assert_eq!(
        plan.triggering_pods.len(),
        300,
        "a 16/32-CPU group takes every pod"
    );
    let again = f.plan_on_branch();
    assert_eq!(again.increases, plan.increases);
}

#[test]
fn constrained_and_karpenter_fixtures_scale_up() {
    let mut b = constrained_cluster(20, 40);
    let plan = plan_scale_up(b.input());
    assert_eq!(plan.status, ScaleUpStatus::Successful);
    let mut c = karpenter_mix(100, 5);
    let plan = plan_scale_up(c.input());
    assert_eq!(plan.status, ScaleUpStatus::Successful);
    assert!(
        plan.increases.iter().map(|i| i.delta()).sum::<usize>() >= 20,
        "hostname anti-affinity alone needs 20 nodes"
    );
}
