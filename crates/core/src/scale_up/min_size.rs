//! Enforcing node-group minimum sizes (docs/behaviour.md SU-48, `--enforce-node-group-min-size`):
//! without pending pods, raise groups whose target fell below their minimum.

use ferroscale_model::Timestamp;
use ferroscale_scheduling::Snapshot;

use crate::backoff::NodeGroupBackoff;
use crate::options::AutoscalingOptions;

use super::limits::Headroom;
use super::template::sanitize_template;
use super::{GroupIncrease, NodeGroupView, ProviderFacts, ScaleUpPlan, ScaleUpStatus};

/// Plans raising every existing, healthy, not backed-off group with a template and a target below
/// its minimum up to that minimum, capped by resource limits and `--max-nodes-total` (counted
/// against the snapshot's nodes, upcoming placeholders included). Returns a plan for
/// [`super::execute_scale_up`]; `NotNeeded` when the flag is off or no group needs raising.
pub fn plan_min_size_enforcement(
    snapshot: &Snapshot,
    node_groups: &[NodeGroupView],
    backoff: &NodeGroupBackoff,
    now: Timestamp,
    options: &AutoscalingOptions,
    provider: ProviderFacts<'_>,
) -> ScaleUpPlan {
    let mut plan = ScaleUpPlan::empty(ScaleUpStatus::NotNeeded);
    if !options.enforce_node_group_min_size {
        return plan;
    }
    let mut headroom = Headroom::from_snapshot(snapshot, options, provider);
    let mut cluster_room = if options.max_nodes_total > 0 {
        options
            .max_nodes_total
            .saturating_sub(snapshot.node_count())
    } else {
        usize::MAX
    };
    for group in node_groups {
        if !group.exists || !group.healthy || group.target_size >= group.min_size {
            continue;
        }
        if backoff.is_backed_off(&group.id, now) {
            continue;
        }
        let Some(template) = &group.template else {
            continue;
        };
        let template = sanitize_template(template, &group.id, "template", options);
        let usage = headroom.template_usage(&template.node, provider.gpu_label);
        let wanted = group
            .min_size
            .min(group.max_size)
            .saturating_sub(group.target_size);
        let added = wanted
            .min(headroom.nodes_that_fit(&usage))
            .min(cluster_room);
        if added == 0 {
            continue;
        }
        headroom.consume(&usage, added);
        cluster_room = cluster_room.saturating_sub(added);
        plan.increases.push(GroupIncrease {
            group_id: group.id.clone(),
            current_target: group.target_size,
            new_target: group.target_size + added,
            max_size: group.max_size,
            atomic: false,
        });
    }
    if !plan.increases.is_empty() {
        plan.status = ScaleUpStatus::Successful;
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::NodeTemplate;
    use ferroscale_model::{Node, Resources};

    fn group(id: &str, min: usize, target: usize) -> NodeGroupView {
        let template = NodeTemplate {
            node: Node::new("t", Resources::new(4000, 16 << 30)),
            pods: vec![],
            csi_node: None,
            resource_slices: Vec::new(),
        };
        NodeGroupView::new(id, min, 10, target, Some(template))
    }

    /// docs/behaviour.md SU-48.
    #[test]
    fn s48_enforce_min_size_raises_target_to_min_without_pending_pods() {
        let options = AutoscalingOptions {
            enforce_node_group_min_size: true,
            ..Default::default()
        };
        let plan = plan_min_size_enforcement(
            &Snapshot::new(),
            &[group("below", 3, 1), group("at-min", 2, 2)],
            &NodeGroupBackoff::default(),
            Timestamp(0),
            &options,
            ProviderFacts::default(),
        );
        assert_eq!(plan.status, ScaleUpStatus::Successful);
        assert_eq!(plan.increases.len(), 1);
        assert_eq!(plan.increases[0].group_id, "below");
        assert_eq!(
            (
                plan.increases[0].current_target,
                plan.increases[0].new_target
            ),
            (1, 3)
        );
    }

    #[test]
    fn without_the_flag_or_with_limits_groups_are_not_raised() {
        let off = plan_min_size_enforcement(
            &Snapshot::new(),
            &[group("below", 3, 1)],
            &NodeGroupBackoff::default(),
            Timestamp(0),
            &AutoscalingOptions::default(),
            ProviderFacts::default(),
        );
        assert_eq!(off.status, ScaleUpStatus::NotNeeded);
        let mut options = AutoscalingOptions {
            enforce_node_group_min_size: true,
            ..Default::default()
        };
        options.cores_total.max = 4;
        let capped = plan_min_size_enforcement(
            &Snapshot::new(),
            &[group("below", 3, 1)],
            &NodeGroupBackoff::default(),
            Timestamp(0),
            &options,
            ProviderFacts::default(),
        );
        assert_eq!(
            capped.increases[0].new_target, 2,
            "only one 4-core node fits under 4 cores"
        );
    }
}
