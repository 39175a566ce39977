//! The scale-down benchmark fixtures describe the work they claim: scenario 4's underutilized
//! nodes are all found unneeded and its group min size stops removals after 30 nodes.

use ferroscale_core::scale_down::UnremovableReason;
use ferroscale_engine_fixtures::scale_down::{ClusterShape, underutilized_cluster};

#[test]
fn scenario_4_finds_every_underutilized_node_and_stops_at_min_size() {
    let shape = ClusterShape::upstream_scenario_4();
    assert!((51_000..=53_000).contains(&shape.pod_count()));
    let mut fixture = underutilized_cluster(shape, true);
    let plan = fixture.plan();
    assert_eq!(plan.unneeded.len(), 300);
    assert!(plan.unneeded.iter().all(|u| u.utilization.value <= 0.5));
    // One drain per loop (`--max-drain-parallelism=1`); min size 970 leaves room for 30.
    assert_eq!(plan.drain_to_delete.len(), 1);
    let min_size_held = plan
        .held_back
        .iter()
        .filter(|h| h.reason == UnremovableReason::NodeGroupMinSizeReached)
        .count();
    assert_eq!(min_size_held, 270);
    // The first loop of a fresh process stops the search after 2P = 20 unneeded nodes.
    let mut fresh = underutilized_cluster(ClusterShape::upstream_scenario_4(), false);
    assert_eq!(fresh.plan().unneeded.len(), 20);
}
