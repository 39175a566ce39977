//! The binpacking estimator (docs/behaviour.md SU-16, SU-18, SU-23): how many new nodes of one
//! group the pending pods need, found by packing the pods first-fit-decreasing onto template copies
//! on a branch of the snapshot.
//!
//! Upstream bounds the estimation with wall-clock budgets (`--max-nodegroup-binpacking-duration`,
//! `--max-binpacking-time`). The decision step never reads the clock, so the only bound here is the
//! node limit of [`NodeLimiter`] (`--max-nodes-per-scaleup`, similar-group capacity and cluster
//! capacity); each pod is checked against at most one full pass over the new nodes per equivalence
//! group, so the work is bounded by pods + groups × new nodes.

use std::sync::Arc;

use ferroscale_model::labels::HOSTNAME;
use ferroscale_model::{Pod, UnsatisfiableAction};
use ferroscale_scheduling::{NodeId, Snapshot, UnfitKind, check};

use crate::cloud::NodeTemplate;

use super::template::add_template_copy;

/// Permission to add nodes: the smallest positive limit wins, a negative limit forbids new nodes,
/// zero means "no limit".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NodeLimiter {
    max_nodes: Option<usize>,
}

impl NodeLimiter {
    pub(super) fn new(limits: &[i64]) -> NodeLimiter {
        if limits.iter().any(|l| *l < 0) {
            return NodeLimiter { max_nodes: Some(0) };
        }
        let max_nodes = limits
            .iter()
            .filter(|l| **l > 0)
            .min()
            .map(|l| usize::try_from(*l).unwrap_or(usize::MAX));
        NodeLimiter { max_nodes }
    }

    fn permits(&self, nodes_so_far: usize) -> bool {
        self.max_nodes.is_none_or(|max| nodes_so_far < max)
    }
}

/// The estimate for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Estimate {
    /// New nodes that received at least one pod.
    pub node_count: usize,
    /// Indices (into the pod slice) of the pods placed.
    pub placed: Vec<usize>,
}

/// Whether the pod has a hard topology spread constraint over hostnames (the case 3c retry).
fn spreads_over_hostnames(pod: &Pod) -> bool {
    pod.topology_spread.iter().any(|c| {
        c.topology_key == HOSTNAME && c.when_unsatisfiable == UnsatisfiableAction::DoNotSchedule
    })
}

struct NewNodes {
    ids: Vec<NodeId>,
    used: Vec<bool>,
    /// Where the last successful "any node" search ended; the next one starts there, which fills
    /// nodes one after another and keeps the search amortised linear.
    cursor: usize,
}

impl NewNodes {
    /// Places the pod on the first new node (from the cursor, wrapping) where it fits.
    fn place_on_any(
        &mut self,
        snapshot: &mut Snapshot,
        pod: &Arc<Pod>,
        skip: Option<usize>,
    ) -> bool {
        let n = self.ids.len();
        for step in 0..n {
            let k = (self.cursor + step) % n;
            if Some(k) == skip {
                continue;
            }
            if check(snapshot, pod, self.ids[k]).is_ok() {
                snapshot.add_pod(self.ids[k], pod.clone());
                self.used[k] = true;
                self.cursor = k;
                return true;
            }
        }
        false
    }
}

/// Estimates the new nodes of `template` needed by `groups` (each a list of indices into `pods`,
/// every group known to fit an empty template). The snapshot is left as it was.
pub(super) fn estimate(
    snapshot: &mut Snapshot,
    template: &NodeTemplate,
    pods: &[Arc<Pod>],
    groups: &[&[usize]],
    limiter: NodeLimiter,
) -> Estimate {
    let alloc_cpu = template.node.allocatable.cpu_milli.max(1) as f64;
    let alloc_mem = template.node.allocatable.memory.max(1) as f64;
    let score = |g: &&[usize]| {
        g.first().map_or(0.0, |&i| {
            let r = &pods[i].requests;
            r.cpu_milli as f64 / alloc_cpu + r.memory as f64 / alloc_mem
        })
    };
    let mut ordered: Vec<&[usize]> = groups.to_vec();
    // Biggest first; the stable sort keeps the input order among equal scores.
    ordered.sort_by(|a, b| score(b).total_cmp(&score(a)));

    // The estimate is a what-if: everything placed below is reverted when `branch` drops.
    let mut branch = snapshot.branch();
    let snapshot: &mut Snapshot = &mut branch;
    let mut new_nodes = NewNodes {
        ids: Vec::new(),
        used: Vec::new(),
        cursor: 0,
    };
    let mut may_add_nodes = true;
    let mut placed = Vec::new();
    for group in ordered {
        let mut next = 0;
        // a. Fill nodes added for earlier groups.
        while let Some(&i) = group.get(next) {
            if !new_nodes.place_on_any(snapshot, &pods[i], None) {
                break;
            }
            placed.push(i);
            next += 1;
        }
        // b. Add nodes for the rest.
        while may_add_nodes && let Some(&i) = group.get(next) {
            let pod = &pods[i];
            if let Some(&last) = new_nodes.ids.last() {
                let last_index = new_nodes.ids.len() - 1;
                match check(snapshot, pod, last) {
                    Ok(()) => {
                        snapshot.add_pod(last, pod.clone());
                        new_nodes.used[last_index] = true;
                        placed.push(i);
                        next += 1;
                        continue;
                    }
                    Err(_) if !new_nodes.used[last_index] => break,
                    Err(unfit) => {
                        // c. A hostname spread may be satisfied on another new node.
                        if unfit.kind() == UnfitKind::TopologySpread
                            && spreads_over_hostnames(pod)
                            && new_nodes.place_on_any(snapshot, pod, Some(last_index))
                        {
                            placed.push(i);
                            next += 1;
                            continue;
                        }
                    }
                }
            }
            if !limiter.permits(new_nodes.ids.len()) {
                may_add_nodes = false;
                break;
            }
            let name = format!("{}-e-{}", template.node.name, new_nodes.ids.len());
            let id = add_template_copy(snapshot, template, &name, false);
            new_nodes.ids.push(id);
            new_nodes.used.push(false);
            if check(snapshot, pod, id).is_err() {
                break;
            }
            snapshot.add_pod(id, pod.clone());
            if let Some(u) = new_nodes.used.last_mut() {
                *u = true;
            }
            placed.push(i);
            next += 1;
        }
    }
    Estimate {
        node_count: new_nodes.used.iter().filter(|u| **u).count(),
        placed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::{LabelSelector, Node, PodAffinityTerm, Resources};

    fn template(cpu: i64) -> NodeTemplate {
        let mut node = Node::new("template-node-for-g-x", Resources::new(cpu, 64 << 30));
        node.allocatable.pods = 110;
        NodeTemplate {
            node,
            pods: Vec::new(),
        }
    }

    fn pods(n: usize, cpu: i64) -> Vec<Arc<Pod>> {
        (0..n)
            .map(|i| {
                let mut p = Pod::new("default", format!("p-{i}"));
                p.requests = Resources::new(cpu, 1 << 20);
                Arc::new(p)
            })
            .collect()
    }

    fn run(pods: &[Arc<Pod>], template: &NodeTemplate, limits: &[i64]) -> Estimate {
        let mut snapshot = Snapshot::new();
        let all: Vec<usize> = (0..pods.len()).collect();
        let e = estimate(
            &mut snapshot,
            template,
            pods,
            &[&all],
            NodeLimiter::new(limits),
        );
        assert_eq!(snapshot.node_count(), 0, "estimation is reverted");
        e
    }

    /// docs/behaviour.md SU-16.
    #[test]
    fn s16_binpacking_estimate_is_ceil_of_pods_per_node() {
        // 4 CPUs minus a 500m DaemonSet pod: three 1-CPU pods per node.
        let mut t = template(4000);
        let mut ds = Pod::new("kube-system", "ds");
        ds.requests = Resources::new(500, 0);
        t.pods.push(ds);
        let e = run(&pods(10, 1000), &t, &[1000]);
        assert_eq!(e.node_count, 4, "ceil(10 / 3)");
        assert_eq!(e.placed.len(), 10);
        let e = run(&pods(10, 1000), &template(4000), &[1000]);
        assert_eq!(e.node_count, 3, "ceil(10 / 4)");
    }

    /// docs/behaviour.md SU-18.
    #[test]
    fn s18_hostname_anti_affinity_needs_one_node_per_pod() {
        let ps: Vec<Arc<Pod>> = pods(5, 100)
            .into_iter()
            .map(|p| {
                let mut p = (*p).clone();
                p.labels.insert("app".into(), "db".into());
                p.pod_anti_affinity.push(PodAffinityTerm {
                    label_selector: Some(LabelSelector::from_labels([("app", "db")])),
                    topology_key: HOSTNAME.into(),
                    ..PodAffinityTerm::default()
                });
                Arc::new(p)
            })
            .collect();
        let e = run(&ps, &template(4000), &[1000]);
        assert_eq!(e.node_count, 5);
    }

    /// docs/behaviour.md SU-23.
    #[test]
    fn s23_node_limit_caps_the_estimate() {
        let e = run(&pods(2000, 4000), &template(4000), &[1000]);
        assert_eq!(e.node_count, 1000);
        assert_eq!(e.placed.len(), 1000);
        // A negative limit forbids nodes; the smallest positive one wins.
        assert_eq!(
            run(&pods(10, 4000), &template(4000), &[1000, -1]).node_count,
            0
        );
        assert_eq!(
            run(&pods(10, 4000), &template(4000), &[0, 7, 3]).node_count,
            3
        );
    }

    #[test]
    fn biggest_pods_are_packed_first() {
        // 3-CPU and 1-CPU pods on 4-CPU nodes: FFD pairs them, two nodes, not three.
        let mut all = pods(2, 1000);
        all.extend(pods(2, 3000));
        let mut snapshot = Snapshot::new();
        let small = [0usize, 1];
        let big = [2usize, 3];
        let e = estimate(
            &mut snapshot,
            &template(4000),
            &all,
            &[&small, &big],
            NodeLimiter::new(&[]),
        );
        assert_eq!(e.node_count, 2);
        assert_eq!(e.placed.len(), 4);
    }
}
