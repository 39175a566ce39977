//! The binpacking estimator (docs/behaviour.md SU-16, SU-18, SU-23): how many new nodes of one
//! group the pending pods need, found by packing the pods first-fit-decreasing onto template copies
//! on a branch of the snapshot.
//!
//! Upstream bounds the estimation with wall-clock budgets (`--max-nodegroup-binpacking-duration`,
//! `--max-binpacking-time`). The decision step never reads the clock, so the only bound here is the
//! node limit of [`NodeLimiter`] (`--max-nodes-per-scaleup`, similar-group capacity and cluster
//! capacity). A pod is checked against the last new node, or (to fill nodes added for earlier
//! groups) against the new nodes the snapshot's capacity index does not rule out, found in
//! O(log n) each: once the new nodes are full, a group costs no check per new node, and the work
//! grows linearly with pods and groups.

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

/// Whether `--fastpath-binpacking-enabled` may estimate this pod's group arithmetically: its
/// verdict on a node must not depend on pods placed elsewhere, so no topology spread constraint
/// and no required anti-affinity over a topology wider than one node. A pod with ResourceClaims
/// never takes it: a shared claim, once allocated, pins every later pod to the first node's
/// devices, so each pod runs the full filter (docs/dra.md DRA-126).
fn fastpath_allowed(pod: &Pod) -> bool {
    !pod.has_resource_claims()
        && pod.topology_spread.is_empty()
        && pod
            .pod_anti_affinity
            .iter()
            .all(|term| term.topology_key == HOSTNAME)
}

/// The group the fast path saves the most checks on (docs/behaviour.md SU-111), as upstream
/// rates it: with n the nodes the group needs by CPU, memory or hostname anti-affinity against
/// itself, the checks saved are pods − pods / n; ties go to the later group. `None` when no
/// group may take the fast path.
fn fastpath_group(
    groups: &[&[usize]],
    pods: &[Arc<Pod>],
    template: &NodeTemplate,
) -> Option<usize> {
    let capacity = &template.node.capacity;
    let mut best = None;
    let mut most_saved = 0usize;
    for (index, group) in groups.iter().enumerate() {
        let Some(&first) = group.first() else {
            continue;
        };
        let pod = &pods[first];
        let count = group.len();
        let by_anti_affinity = if pod.pod_anti_affinity.iter().any(|term| {
            term.topology_key == HOSTNAME
                && term
                    .label_selector
                    .as_ref()
                    .is_some_and(|selector| selector.matches(&pod.labels))
        }) {
            count
        } else {
            0
        };
        let share = |request: i64, capacity: i64| -> usize {
            if request <= 0 || capacity <= 0 {
                return 0;
            }
            (count as f64 * request as f64 / capacity as f64).ceil() as usize
        };
        let nodes = by_anti_affinity
            .max(share(pod.requests.cpu_milli, capacity.cpu_milli))
            .max(share(pod.requests.memory, capacity.memory));
        let saved = count
            .checked_div(nodes)
            .map_or(0, |per_node| count - per_node);
        if saved >= most_saved && fastpath_allowed(pod) {
            best = Some(index);
            most_saved = saved;
        }
    }
    best
}

/// Whether the pod has a hard topology spread constraint over hostnames (the case 3c retry).
fn spreads_over_hostnames(pod: &Pod) -> bool {
    pod.topology_spread.iter().any(|c| {
        c.topology_key == HOSTNAME && c.when_unsatisfiable == UnsatisfiableAction::DoNotSchedule
    })
}

/// The template copies added on the estimate's branch, in the order they were added.
#[derive(Debug, Default)]
struct NewNodes {
    ids: Vec<NodeId>,
    used: Vec<bool>,
    /// Where the last successful "any node" search ended; the next one starts there, which fills
    /// nodes one after another and keeps the search amortised linear.
    cursor: usize,
    /// Whether the copies occupy consecutive snapshot slots (`ids[k]` is slot `ids[0] + k`), so
    /// that the snapshot's capacity index can search them as one slot range. Copies are added at
    /// the end of the snapshot one after another, so this only fails if a copy's name was taken.
    consecutive: bool,
}

impl NewNodes {
    fn push(&mut self, id: NodeId, used: bool) {
        self.consecutive = match self.ids.first() {
            None => true,
            Some(first) => self.consecutive && id.index() == first.index() + self.ids.len(),
        };
        self.ids.push(id);
        self.used.push(used);
    }

    /// Places the pod on the first new node (from the cursor, wrapping, never the one at `skip`)
    /// where it fits.
    fn place_on_any(
        &mut self,
        snapshot: &mut Snapshot,
        pod: &Arc<Pod>,
        skip: Option<usize>,
    ) -> bool {
        let found = if self.consecutive {
            self.first_fit_indexed(snapshot, pod, skip)
        } else {
            self.first_fit_scanning(snapshot, pod, skip)
        };
        let Some(k) = found else {
            return false;
        };
        snapshot.add_pod(self.ids[k], pod.clone());
        self.used[k] = true;
        self.cursor = k;
        true
    }

    /// Every new node from the cursor, wrapping, checked in turn.
    fn first_fit_scanning(
        &self,
        snapshot: &mut Snapshot,
        pod: &Pod,
        skip: Option<usize>,
    ) -> Option<usize> {
        let n = self.ids.len();
        (0..n)
            .map(|step| (self.cursor + step) % n)
            .find(|&k| Some(k) != skip && check(snapshot, pod, self.ids[k]).is_ok())
    }

    /// The same search in the same order, but only over the new nodes the snapshot's capacity
    /// index does not rule out: once the new nodes are full, a pod costs O(log n) instead of a
    /// check per new node, and the node found is the one the full scan finds.
    fn first_fit_indexed(
        &self,
        snapshot: &mut Snapshot,
        pod: &Pod,
        skip: Option<usize>,
    ) -> Option<usize> {
        let base = self.ids.first()?.index();
        let n = self.ids.len();
        for (from, to) in [(self.cursor, n), (0, self.cursor)] {
            let mut at = from;
            while let Some(slot) = snapshot.next_slot_with_room(pod, base + at..base + to) {
                let k = slot - base;
                if Some(k) != skip && check(snapshot, pod, self.ids[k]).is_ok() {
                    return Some(k);
                }
                at = k + 1;
            }
        }
        None
    }
}

/// Estimates the new nodes of `template` needed by `groups` (each a list of indices into `pods`,
/// every group known to fit an empty template). The snapshot is left as it was. With `fastpath`
/// (`--fastpath-binpacking-enabled`, docs/behaviour.md SU-111) one group, moved to the end, is
/// estimated arithmetically: one new node is filled, and the rest of the group needs as many
/// more nodes as that one took pods, rounded up.
pub(super) fn estimate(
    snapshot: &mut Snapshot,
    template: &NodeTemplate,
    pods: &[Arc<Pod>],
    groups: &[&[usize]],
    limiter: NodeLimiter,
    fastpath: bool,
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
    // Only the last group may take the fast path: its nodes beyond the first are never added to
    // the snapshot, so no later group could be packed onto them.
    let fast_group = if fastpath {
        fastpath_group(&ordered, pods, template).map(|index| {
            let group = ordered.remove(index);
            ordered.push(group);
            ordered.len() - 1
        })
    } else {
        None
    };

    // The estimate is a what-if: everything placed below is reverted when `branch` drops.
    let mut branch = snapshot.branch();
    let snapshot: &mut Snapshot = &mut branch;
    let mut new_nodes = NewNodes::default();
    let mut may_add_nodes = true;
    let mut placed = Vec::new();
    // Nodes the fast path counted without adding them to the snapshot.
    let mut counted_nodes = 0usize;
    for (position, group) in ordered.into_iter().enumerate() {
        let mut next = 0;
        // a. Fill nodes added for earlier groups.
        while let Some(&i) = group.get(next) {
            if !new_nodes.place_on_any(snapshot, &pods[i], None) {
                break;
            }
            placed.push(i);
            next += 1;
        }
        if may_add_nodes && fast_group == Some(position) {
            let rest = &group[next..];
            if rest.is_empty() {
                continue;
            }
            if !limiter.permits(new_nodes.ids.len()) {
                may_add_nodes = false;
                continue;
            }
            let name = format!("{}-e-{}", template.node.name, new_nodes.ids.len());
            let id = add_template_copy(snapshot, template, &name, false);
            let mut per_node = 0;
            for &i in rest {
                if check(snapshot, &pods[i], id).is_err() {
                    break;
                }
                snapshot.add_pod(id, pods[i].clone());
                placed.push(i);
                per_node += 1;
            }
            new_nodes.push(id, per_node > 0);
            if per_node == 0 {
                continue;
            }
            let mut done = per_node;
            for _ in 1..rest.len().div_ceil(per_node) {
                if !limiter.permits(new_nodes.ids.len() + counted_nodes) {
                    may_add_nodes = false;
                    break;
                }
                counted_nodes += 1;
                let take = per_node.min(rest.len() - done);
                placed.extend_from_slice(&rest[done..done + take]);
                done += take;
            }
            continue;
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
            new_nodes.push(id, false);
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
        node_count: new_nodes.used.iter().filter(|u| **u).count() + counted_nodes,
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
            csi_node: None,
            resource_slices: Vec::new(),
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
            false,
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
            false,
        );
        assert_eq!(e.node_count, 2);
        assert_eq!(e.placed.len(), 4);
    }

    fn run_fast(pods: &[Arc<Pod>], groups: &[&[usize]], limits: &[i64]) -> (Estimate, Estimate) {
        let mut snapshot = Snapshot::new();
        let t = template(4000);
        let slow = estimate(
            &mut snapshot,
            &t,
            pods,
            groups,
            NodeLimiter::new(limits),
            false,
        );
        let fast = estimate(
            &mut snapshot,
            &t,
            pods,
            groups,
            NodeLimiter::new(limits),
            true,
        );
        assert_eq!(snapshot.node_count(), 0, "estimation is reverted");
        (slow, fast)
    }

    /// docs/behaviour.md SU-111: the fast path fills one node and counts the rest; for identical
    /// pods it agrees with full binpacking, node limit included.
    #[test]
    fn fastpath_counts_nodes_arithmetically_for_identical_pods() {
        let ps = pods(10, 1000);
        let all: Vec<usize> = (0..10).collect();
        let (slow, fast) = run_fast(&ps, &[&all], &[1000]);
        assert_eq!((slow.node_count, fast.node_count), (3, 3));
        assert_eq!(fast.placed.len(), 10);
        let (slow, fast) = run_fast(&ps, &[&all], &[2]);
        assert_eq!((slow.node_count, fast.node_count), (2, 2));
        assert_eq!((slow.placed.len(), fast.placed.len()), (8, 8));
    }

    /// docs/behaviour.md SU-111: the group the fast path saves most on is estimated last, which
    /// changes the first-fit-decreasing order as upstream does: six 2.5-CPU pods (saving 5
    /// checks) go after three 1.5-CPU pods (saving 2), and the small pods no longer fill the
    /// gaps the big ones leave: 7 nodes instead of 6.
    #[test]
    fn fastpath_moves_its_group_last() {
        let mut ps = pods(6, 2500);
        ps.extend(pods(3, 1500));
        let big: Vec<usize> = (0..6).collect();
        let small: Vec<usize> = (6..9).collect();
        let (slow, fast) = run_fast(&ps, &[&big, &small], &[1000]);
        assert_eq!(slow.node_count, 6, "each small pod fills a big pod's gap");
        assert_eq!(fast.node_count, 7);
        assert_eq!((slow.placed.len(), fast.placed.len()), (9, 9));
    }

    /// The capacity index only skips new nodes the full check rejects: for every cursor and
    /// skipped node, the indexed search picks the node the plain scan picks.
    #[test]
    fn indexed_search_of_new_nodes_matches_the_plain_scan() {
        let mut snapshot = Snapshot::new();
        let t = template(4000);
        let mut branch = snapshot.branch();
        let mut new_nodes = NewNodes::default();
        // Free cpu per copy after filling: 0, 3000, 0, 500, 4000, 0, 1000, 0.
        for (k, used) in [4000, 1000, 4000, 3500, 0, 4000, 3000, 4000]
            .into_iter()
            .enumerate()
        {
            let id = add_template_copy(&mut branch, &t, &format!("copy-{k}"), false);
            if used > 0 {
                let mut p = Pod::new("default", format!("filler-{k}"));
                p.requests = Resources::new(used, 0);
                branch.add_pod(id, Arc::new(p));
            }
            new_nodes.push(id, used > 0);
        }
        assert!(new_nodes.consecutive, "copies take consecutive slots");
        for cpu in [0, 100, 600, 1500, 3500, 4500] {
            let pod = pods(1, cpu).pop().unwrap();
            for cursor in 0..8 {
                new_nodes.cursor = cursor;
                for skip in [None, Some(1), Some(4), Some(cursor)] {
                    assert_eq!(
                        new_nodes.first_fit_indexed(&mut branch, &pod, skip),
                        new_nodes.first_fit_scanning(&mut branch, &pod, skip),
                        "cpu {cpu}, cursor {cursor}, skip {skip:?}"
                    );
                }
            }
        }
        let full = pods(1, 4500).pop().unwrap();
        assert_eq!(new_nodes.first_fit_indexed(&mut branch, &full, None), None);
    }

    /// docs/behaviour.md SU-111: pods with a topology spread constraint are never fast-pathed.
    #[test]
    fn fastpath_skips_pods_with_topology_spread() {
        let ps: Vec<Arc<Pod>> = pods(3, 100)
            .into_iter()
            .map(|p| {
                let mut p = (*p).clone();
                p.topology_spread
                    .push(ferroscale_model::TopologySpreadConstraint {
                        max_skew: 1,
                        topology_key: "topology.kubernetes.io/zone".into(),
                        when_unsatisfiable: UnsatisfiableAction::DoNotSchedule,
                        label_selector: None,
                        min_domains: None,
                        node_affinity_policy: ferroscale_model::NodeInclusionPolicy::Honor,
                        node_taints_policy: ferroscale_model::NodeInclusionPolicy::Ignore,
                    });
                Arc::new(p)
            })
            .collect();
        let all: Vec<usize> = (0..3).collect();
        assert_eq!(fastpath_group(&[&all], &ps, &template(4000)), None);
        let plain = pods(3, 100);
        assert_eq!(fastpath_group(&[&all], &plain, &template(4000)), Some(0));
    }
}
