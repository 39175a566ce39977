//! Balancing similar node groups (docs/behaviour.md SU-35–SU-39): which groups are interchangeable
//! (same shape of node, same labels once zone-like labels are ignored), and how a scale-up is
//! spread over them so that their sizes even out.

use ferroscale_model::Resources;
use ferroscale_model::labels::{HOSTNAME, REGION, REGION_BETA, ZONE, ZONE_BETA};

use crate::cloud::NodeTemplate;
use crate::options::AutoscalingOptions;

use super::template::TEMPLATE_NODE_LABEL;

/// Labels that never make two groups different: per-node, per-zone or per-group identity.
const ALWAYS_IGNORED_LABELS: &[&str] = &[
    HOSTNAME,
    ZONE_BETA,
    REGION_BETA,
    ZONE,
    REGION,
    "beta.kubernetes.io/fluentd-ds-ready",
    "kops.k8s.io/instancegroup",
    // Added to every template by sanitising; identical anyway, ignored for clarity.
    TEMPLATE_NODE_LABEL,
];

/// `(larger − smaller) ≤ larger × ratio`.
fn within(a: i64, b: i64, ratio: f64) -> bool {
    let (small, large) = if a <= b { (a, b) } else { (b, a) };
    (large - small) as f64 <= large as f64 * ratio
}

fn names(r: &Resources) -> Vec<&str> {
    r.iter().map(|(name, _)| name).collect()
}

fn all_within(a: &Resources, b: &Resources, ratio: f64) -> bool {
    names(a) == names(b)
        && a.iter()
            .all(|(name, value)| within(value, b.get(name), ratio))
}

/// Allocatable minus what the template's own pods (DaemonSet, static) request.
fn free(template: &NodeTemplate) -> Resources {
    let mut requested = Resources::default();
    for pod in &template.pods {
        requested.add(&pod.requests);
    }
    let mut free = template.node.allocatable.minus(&requested);
    // Pod count is not part of the comparison of free resources.
    free.pods = 0;
    free
}

/// Whether two templates are similar enough to balance a scale-up between their groups.
///
/// With `--balancing-label` only those labels are compared (each present on both, equal values).
/// Otherwise: the same capacity resources, memory capacity within `--memory-difference-ratio` and
/// every other capacity resource equal; allocatable within `--max-allocatable-difference-ratio`;
/// free resources within `--max-free-difference-ratio`; equal labels apart from the ignored ones
/// (built-in list plus `--balancing-ignore-label`).
pub fn templates_similar(a: &NodeTemplate, b: &NodeTemplate, options: &AutoscalingOptions) -> bool {
    if !options.balancing_labels.is_empty() {
        return options.balancing_labels.iter().all(|key| {
            matches!((a.node.labels.get(key), b.node.labels.get(key)), (Some(x), Some(y)) if x == y)
        });
    }
    let (ca, cb) = (&a.node.capacity, &b.node.capacity);
    if names(ca) != names(cb) {
        return false;
    }
    let capacity_ok = ca.iter().all(|(name, value)| {
        if name == ferroscale_model::resources::MEMORY {
            within(value, cb.get(name), options.memory_difference_ratio)
        } else {
            value == cb.get(name)
        }
    });
    if !capacity_ok
        || !all_within(
            &a.node.allocatable,
            &b.node.allocatable,
            options.max_allocatable_difference_ratio,
        )
        || !all_within(&free(a), &free(b), options.max_free_difference_ratio)
    {
        return false;
    }
    let ignored = |key: &str| {
        ALWAYS_IGNORED_LABELS.contains(&key)
            || options.balancing_ignore_labels.iter().any(|l| l == key)
    };
    fn relevant<'t>(
        t: &'t NodeTemplate,
        ignored: &dyn Fn(&str) -> bool,
    ) -> Vec<(&'t String, &'t String)> {
        t.node.labels.iter().filter(|(k, _)| !ignored(k)).collect()
    }
    relevant(a, &ignored) == relevant(b, &ignored)
}

/// One group taking part in a balanced scale-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BalanceTarget {
    pub index: usize,
    pub current: usize,
    pub max: usize,
}

/// Spreads `new_nodes` over `groups`: each node goes to the group with the smallest current +
/// assigned size that is below its max (ties in input order, round-robin as sizes grow). Returns
/// `(index, added)` for groups that receive nodes, in input order.
pub(super) fn split(new_nodes: usize, groups: &[BalanceTarget]) -> Vec<(usize, usize)> {
    let mut open: Vec<&BalanceTarget> = groups.iter().filter(|g| g.current < g.max).collect();
    open.sort_by_key(|g| g.current);
    let capacity: usize = open.iter().map(|g| g.max - g.current).sum();
    let mut remaining = new_nodes.min(capacity);
    let mut added = vec![0usize; open.len()];
    while remaining > 0 {
        let smallest = open
            .iter()
            .enumerate()
            .filter(|(k, g)| g.current + added[*k] < g.max)
            .min_by_key(|(k, g)| (g.current + added[*k], *k))
            .map(|(k, _)| k);
        let Some(k) = smallest else { break };
        added[k] += 1;
        remaining -= 1;
    }
    let mut result: Vec<(usize, usize)> = open
        .iter()
        .zip(added)
        .filter(|(_, a)| *a > 0)
        .map(|(g, a)| (g.index, a))
        .collect();
    result.sort_by_key(|(index, _)| *index);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::Node;

    fn template(zone: &str, memory: i64) -> NodeTemplate {
        let mut node = Node::new(format!("t-{zone}"), Resources::new(4000, memory));
        node.labels.insert(ZONE.into(), zone.into());
        node.labels.insert(
            "node.kubernetes.io/instance-type".into(),
            "m5.xlarge".into(),
        );
        NodeTemplate {
            node,
            pods: Vec::new(),
            csi_node: None,
            resource_slices: Vec::new(),
        }
    }

    fn target(index: usize, current: usize, max: usize) -> BalanceTarget {
        BalanceTarget {
            index,
            current,
            max,
        }
    }

    /// docs/behaviour.md SU-35.
    #[test]
    fn s35_split_evens_out_sizes() {
        // A=1, B=3, C=6, four new nodes: A gets 3, B gets 1, C nothing.
        let got = split(
            4,
            &[target(0, 1, 100), target(1, 3, 100), target(2, 6, 100)],
        );
        assert_eq!(got, vec![(0, 3), (1, 1)]);
    }

    #[test]
    fn split_respects_max_sizes_and_capacity() {
        let got = split(10, &[target(0, 0, 2), target(1, 5, 5), target(2, 0, 3)]);
        assert_eq!(
            got,
            vec![(0, 2), (2, 3)],
            "capped to remaining capacity; full group dropped"
        );
        let got = split(3, &[target(0, 0, 10), target(1, 0, 10)]);
        assert_eq!(got, vec![(0, 2), (1, 1)]);
    }

    /// docs/behaviour.md SU-36.
    #[test]
    fn s36_memory_within_one_and_a_half_percent_is_similar() {
        let options = AutoscalingOptions::default();
        let base = 16_000_000_000;
        let a = template("zone-a", base);
        assert!(
            templates_similar(&a, &template("zone-b", base + base / 100), &options),
            "1% apart"
        );
        assert!(
            !templates_similar(&a, &template("zone-b", base + base / 50), &options),
            "2% apart"
        );
    }

    /// docs/behaviour.md SU-37.
    #[test]
    fn s37_custom_labels_differ_unless_ignored() {
        let mut options = AutoscalingOptions::default();
        let a = template("zone-a", 16 << 30);
        let mut b = template("zone-b", 16 << 30);
        b.node.labels.insert("team".into(), "payments".into());
        assert!(!templates_similar(&a, &b, &options));
        options.balancing_ignore_labels.push("team".into());
        assert!(templates_similar(&a, &b, &options));
    }

    /// docs/behaviour.md SU-38.
    #[test]
    fn s38_balancing_label_compares_only_that_label() {
        let mut options = AutoscalingOptions::default();
        options.balancing_labels.push("pool".into());
        let mut a = template("zone-a", 16 << 30);
        let mut b = template("zone-b", 64 << 30);
        b.node.labels.insert(
            "node.kubernetes.io/instance-type".into(),
            "m5.4xlarge".into(),
        );
        a.node.labels.insert("pool".into(), "general".into());
        assert!(
            !templates_similar(&a, &b, &options),
            "label missing on one side"
        );
        b.node.labels.insert("pool".into(), "general".into());
        assert!(templates_similar(&a, &b, &options));
    }

    #[test]
    fn different_capacity_resources_are_not_similar() {
        let options = AutoscalingOptions::default();
        let a = template("zone-a", 16 << 30);
        let mut b = template("zone-b", 16 << 30);
        b.node.capacity.set("nvidia.com/gpu", 1);
        b.node.allocatable.set("nvidia.com/gpu", 1);
        assert!(!templates_similar(&a, &b, &options));
        let mut c = template("zone-c", 16 << 30);
        c.node.capacity.cpu_milli = 4100;
        assert!(
            !templates_similar(&a, &c, &options),
            "cpu capacity must be equal"
        );
    }
}
