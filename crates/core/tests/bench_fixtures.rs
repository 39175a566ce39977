//! The benchmark fixtures must describe real work: small versions of each scenario produce a
//! scale-up, and repeating a plan on a reverted branch gives the same answer.

use ferroscale_core::scale_up::{ScaleUpStatus, plan_scale_up};
use ferroscale_engine_fixtures::{
    busy_cluster, constrained_cluster, dra_scale_down, dra_scale_up, karpenter_mix,
    upstream_scale_down, upstream_scale_up,
};

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

/// Upstream's DRA scale-up workload checks the group's target size: one new node per 8 claim pods
/// (devices decide, the pods' CPU would fit twice as many). Here at a tenth of the size.
#[test]
fn dra_scale_up_needs_a_node_per_eight_claim_pods() {
    let mut f = dra_scale_up(50);
    let plan = f.plan_on_branch();
    assert_eq!(plan.status, ScaleUpStatus::Successful);
    assert_eq!(plan.increases.iter().map(|i| i.delta()).sum::<usize>(), 50);
    let again = f.plan_on_branch();
    assert_eq!(again.increases, plan.increases);
}

/// Upstream's DRA scale-down workload checks that 60 % of the nodes are marked for deletion: at
/// 40 % device utilization everywhere, the claims of 60 % of the nodes fit the free devices of
/// the rest. At full size: the candidate limits must not hide the answer.
#[test]
fn dra_scale_down_removes_sixty_percent_of_the_nodes() {
    let mut f = dra_scale_down(800);
    let plan = f.plan();
    assert_eq!(plan.unneeded.len(), 480, "{:?}", plan.unremovable);
    assert_eq!(
        plan.empty_to_delete.len() + plan.drain_to_delete.len(),
        480,
        "{:?} {:?}",
        plan.status,
        plan.held_back.first()
    );
    let again = f.plan();
    assert_eq!(again.unneeded.len(), 480, "the plan reverted its changes");
}

/// Upstream's plain scale-up workload checks the group's target size: one new node per 50 pods
/// without a controller. Here at a fiftieth of the size.
#[test]
fn upstream_scale_up_needs_a_node_per_fifty_pods() {
    let mut f = upstream_scale_up(20);
    let plan = f.plan_on_branch();
    assert_eq!(plan.status, ScaleUpStatus::Successful);
    assert_eq!(plan.increases.iter().map(|i| i.delta()).sum::<usize>(), 20);
    let again = f.plan_on_branch();
    assert_eq!(again.increases, plan.increases);
}

/// Upstream's plain scale-down workload checks that 60 % of the nodes are marked for deletion:
/// at 40 % utilization everywhere, the pods of 60 % of the nodes fit the room of the rest.
#[test]
fn upstream_scale_down_removes_sixty_percent_of_the_nodes() {
    let mut f = upstream_scale_down(200);
    let plan = f.plan();
    assert_eq!(
        plan.empty_to_delete.len() + plan.drain_to_delete.len(),
        120,
        "{:?} {:?}",
        plan.status,
        plan.unremovable.first()
    );
    let again = f.plan();
    assert_eq!(
        again.empty_to_delete.len() + again.drain_to_delete.len(),
        120,
        "the plan reverted its changes"
    );
}
