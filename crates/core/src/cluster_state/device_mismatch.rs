//! How the DRA devices of ready nodes differ from what their group's template promised
//! (`dra_node_template_resources_mismatch`, docs/behaviour.md OBS-129): complete device pools per
//! driver, compared node by node. Upstream also compares the devices inside matching pools; here
//! only the pools are counted, so a pool whose devices differ is not reported.

use std::collections::BTreeMap;

use super::GroupObservation;

/// Complete device pools of one DRA driver that ready nodes publish fewer (`missing`) or more
/// (`extra`) of than their group's template, summed over the nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceMismatch {
    pub missing: usize,
    pub extra: usize,
}

impl GroupObservation {
    /// Adds the group's ready nodes' differences from its template to `mismatches`; every
    /// driver of the template gets an entry, at zero when all agree.
    pub(super) fn count_device_mismatches(
        &self,
        mismatches: &mut BTreeMap<String, DeviceMismatch>,
    ) {
        if self.template_device_pools.is_empty() {
            return;
        }
        for driver in self.template_device_pools.keys() {
            mismatches.entry(driver.clone()).or_default();
        }
        let empty = BTreeMap::new();
        for node in self.nodes.iter().filter(|n| n.is_ready()) {
            let published = self.node_device_pools.get(&node.name).unwrap_or(&empty);
            for (driver, expected) in &self.template_device_pools {
                let have = published.get(driver).copied().unwrap_or(0);
                mismatches.entry(driver.clone()).or_default().missing +=
                    expected.saturating_sub(have);
            }
            for (driver, have) in published {
                let expected = self.template_device_pools.get(driver).copied().unwrap_or(0);
                mismatches.entry(driver.clone()).or_default().extra +=
                    have.saturating_sub(expected);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale_up::NodeGroupView;
    use ferroscale_model::{ConditionStatus, Node, Resources};
    use std::sync::Arc;

    fn node(name: &str, ready: bool) -> Arc<Node> {
        let mut node = Node::new(name, Resources::new(4000, 1 << 30));
        node.conditions.ready = Some(if ready {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        });
        Arc::new(node)
    }

    #[test]
    fn ready_nodes_with_fewer_or_more_pools_than_the_template_are_counted_per_driver() {
        let mut group = GroupObservation::new(
            NodeGroupView::new("gpus", 0, 5, 3, None),
            Vec::new(),
            vec![
                node("a", true),
                node("b", true),
                node("c", false),
                node("d", true),
            ],
        );
        group.template_device_pools = BTreeMap::from([("gpu.example.com".to_string(), 2)]);
        group.node_device_pools.insert(
            "a".into(),
            BTreeMap::from([("gpu.example.com".to_string(), 2)]),
        );
        group.node_device_pools.insert(
            "b".into(),
            BTreeMap::from([
                ("gpu.example.com".to_string(), 1),
                ("nic.example.com".to_string(), 1),
            ]),
        );
        // c is not ready (not compared); d publishes nothing yet.
        let mut mismatches = BTreeMap::new();
        group.count_device_mismatches(&mut mismatches);
        assert_eq!(
            mismatches["gpu.example.com"],
            DeviceMismatch {
                missing: 1 + 2,
                extra: 0
            }
        );
        assert_eq!(
            mismatches["nic.example.com"],
            DeviceMismatch {
                missing: 0,
                extra: 1
            }
        );
    }

    #[test]
    fn a_group_without_devices_reports_nothing() {
        let group = GroupObservation::new(
            NodeGroupView::new("plain", 0, 5, 1, None),
            Vec::new(),
            vec![node("a", true)],
        );
        let mut mismatches = BTreeMap::new();
        group.count_device_mismatches(&mut mismatches);
        assert!(mismatches.is_empty());
    }
}
