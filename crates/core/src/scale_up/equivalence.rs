//! Equivalence groups (docs/behaviour.md SU-101): pending pods of one controller with equal labels
//! and an equal scheduling-relevant spec are simulated once per group instead of once per pod.
//!
//! Pods without a controller are grouped by the same shape (unlike upstream, which keeps each one
//! apart): fifty thousand identical bare pods are one group, not fifty thousand, so the estimator
//! and the similar-pod memo do their work once per shape. A DaemonSet pod, and a controller-less
//! pod already naming a node, is a group of its own. A controller may own at most
//! [`MAX_GROUPS_PER_CONTROLLER`] groups; further shapes become singletons, as upstream.

use std::hash::BuildHasher;
use std::sync::Arc;

use ferroscale_model::Pod;

use crate::{FastMap, FastSet, same_arcs};

pub(super) const MAX_GROUPS_PER_CONTROLLER: usize = 10;

/// The parts of a pod that decide where it can run. Names, UIDs, timestamps, environment and
/// projected volumes (which the model already folds into `Other`) do not matter.
#[derive(Hash, PartialEq, Eq)]
struct PodShape<'a> {
    namespace: &'a str,
    labels: &'a ferroscale_model::Labels,
    priority: Option<i32>,
    scheduler_name: &'a str,
    requests: &'a ferroscale_model::Resources,
    node_selector: &'a ferroscale_model::Labels,
    required_node_affinity: &'a Option<Box<ferroscale_model::NodeSelector>>,
    pod_affinity: &'a [ferroscale_model::PodAffinityTerm],
    pod_anti_affinity: &'a [ferroscale_model::PodAffinityTerm],
    tolerations: &'a [ferroscale_model::Toleration],
    host_ports: &'a [ferroscale_model::HostPort],
    topology_spread: &'a [ferroscale_model::TopologySpreadConstraint],
    volumes: &'a [ferroscale_model::Volume],
    /// `spec.resourceClaims`: pods naming the same template are interchangeable (each gets its
    /// own claim of one spec); pods naming different claims are not (docs/dra.md DRA-127).
    resource_claims: &'a [ferroscale_model::dra::PodResourceClaim],
}

fn shape(pod: &Pod) -> PodShape<'_> {
    PodShape {
        namespace: &pod.namespace,
        labels: &pod.labels,
        priority: pod.priority,
        scheduler_name: &pod.scheduler_name,
        requests: &pod.requests,
        node_selector: &pod.node_selector,
        required_node_affinity: &pod.required_node_affinity,
        pod_affinity: &pod.pod_affinity,
        pod_anti_affinity: &pod.pod_anti_affinity,
        tolerations: &pod.tolerations,
        host_ports: &pod.host_ports,
        topology_spread: &pod.topology_spread,
        volumes: &pod.volumes,
        resource_claims: &pod.resource_claims,
    }
}

/// Whether two pods are interchangeable for scheduling.
pub(super) fn same_shape(a: &Pod, b: &Pod) -> bool {
    shape(a) == shape(b)
}

/// Splits `pods` into equivalence groups, each a list of indices into `pods` in input order;
/// groups are ordered by their first pod.
pub(super) fn group_pods(pods: &[Arc<Pod>]) -> Vec<Vec<usize>> {
    group_pods_counting_overflow(pods).0
}

/// [`group_pods`], and how many controllers own more shapes than [`MAX_GROUPS_PER_CONTROLLER`]:
/// upstream's `overflowing_controllers_count` (docs/behaviour.md OBS-126).
pub(super) fn group_pods_counting_overflow(pods: &[Arc<Pod>]) -> (Vec<Vec<usize>>, usize) {
    let mut overflowing: FastSet<&str> = FastSet::default();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    // (controller uid, none for controller-less pods; shape hash) -> groups with that hash.
    let mut by_key: FastMap<(Option<&str>, u64), Vec<usize>> = FastMap::default();
    let mut per_controller: FastMap<&str, usize> = FastMap::default();
    // A shape hash only picks the groups to compare with; any well-mixed hash does.
    let shape_hasher = foldhash::fast::FixedState::default();
    for (i, pod) in pods.iter().enumerate() {
        if pod.is_daemonset_pod() {
            groups.push(vec![i]);
            continue;
        }
        let controller = match pod.controller() {
            Some(c) => Some(c.uid.as_str()),
            // A bare pod bound to a node by name goes nowhere else; no other pod stands for it.
            None if pod.node_name.is_some() => {
                groups.push(vec![i]);
                continue;
            }
            None => None,
        };
        let key = (controller, shape_hasher.hash_one(shape(pod)));
        let existing = by_key.get(&key).and_then(|candidates| {
            candidates
                .iter()
                .copied()
                .find(|&g| same_shape(&pods[groups[g][0]], pod))
        });
        if let Some(g) = existing {
            groups[g].push(i);
            continue;
        }
        groups.push(vec![i]);
        // The cap on shapes is per controller; controller-less pods have none.
        if let Some(controller) = controller {
            let count = per_controller.entry(controller).or_insert(0);
            if *count >= MAX_GROUPS_PER_CONTROLLER {
                overflowing.insert(controller);
                continue;
            }
            *count += 1;
        }
        by_key.entry(key).or_default().push(groups.len() - 1);
    }
    (groups, overflowing.len())
}

/// The equivalence groups of the last loop's pending pods, kept for the next loop: when its
/// pods are the same objects in the same order (compared by address, one word per pod; the memo
/// holds the pods, so no address is reused while it does), the groups are the same and the pods
/// are not read. A cluster whose pending pods did not change costs no shape hashing.
#[derive(Debug, Default)]
pub struct EquivalenceMemo {
    pods: Vec<Arc<Pod>>,
    groups: Vec<Vec<usize>>,
    overflowing: usize,
}

impl EquivalenceMemo {
    /// [`group_pods_counting_overflow`] of `pods`, from the memo when they are the pods it holds.
    pub(super) fn group(&mut self, pods: &[Arc<Pod>]) -> (&[Vec<usize>], usize) {
        if same_arcs(&self.pods, pods) {
            debug_assert!(
                group_pods_counting_overflow(pods) == (self.groups.clone(), self.overflowing),
                "the kept equivalence groups differ from fresh ones"
            );
        } else {
            (self.groups, self.overflowing) = group_pods_counting_overflow(pods);
            self.pods = pods.to_vec();
        }
        (&self.groups, self.overflowing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::{OwnerRef, Resources};

    fn owned(name: &str, owner: &str, cpu: i64) -> Arc<Pod> {
        let mut p = Pod::new("default", name);
        p.owner_references.push(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: owner.into(),
            uid: format!("uid-{owner}"),
            controller: true,
        });
        p.requests = Resources::new(cpu, 0);
        Arc::new(p)
    }

    fn bare(name: &str, cpu: i64) -> Arc<Pod> {
        let mut p = Pod::new("default", name);
        p.requests = Resources::new(cpu, 0);
        Arc::new(p)
    }

    /// The memo answers for the very pods it grouped, and groups afresh for any other list, even
    /// one of equal pods.
    #[test]
    fn the_memo_regroups_any_other_pod_list() {
        let pods = vec![owned("a", "rs", 100), owned("b", "rs", 100), bare("c", 200)];
        let mut memo = EquivalenceMemo::default();
        let (groups, overflowing) = memo.group(&pods);
        assert_eq!(
            (groups.to_vec(), overflowing),
            group_pods_counting_overflow(&pods)
        );
        assert_eq!(memo.group(&pods).0, &[vec![0, 1], vec![2]]);
        let copies: Vec<Arc<Pod>> = pods.iter().map(|p| Arc::new((**p).clone())).collect();
        let changed = vec![copies[0].clone(), owned("b", "rs", 300), copies[2].clone()];
        assert_eq!(memo.group(&changed).0, &[vec![0], vec![1], vec![2]]);
        assert_eq!(memo.group(&pods[..2]).0, &[vec![0, 1]]);
    }

    /// docs/behaviour.md SU-101.
    #[test]
    fn pods_of_one_controller_with_equal_specs_share_a_group() {
        let pods = vec![
            owned("a-1", "a", 100),
            owned("b-1", "b", 100),
            owned("a-2", "a", 100),
            owned("a-3", "a", 200),
        ];
        let groups = group_pods(&pods);
        assert_eq!(groups, vec![vec![0, 2], vec![1], vec![3]]);
    }

    /// docs/behaviour.md SU-101: controller-less pods with the same shape share a group (a
    /// deliberate difference from upstream), apart from owned pods of that shape; groups stay in
    /// the order of their first pod.
    #[test]
    fn controller_less_pods_with_equal_specs_share_a_group() {
        let mut labelled = (*bare("bare-5", 100)).clone();
        labelled.labels.insert("app".into(), "x".into());
        let pods = vec![
            bare("bare-1", 100),
            owned("a-1", "a", 100),
            bare("bare-2", 200),
            bare("bare-3", 100),
            Arc::new(labelled),
            bare("bare-4", 200),
            bare("bare-6", 100),
        ];
        let groups = group_pods(&pods);
        assert_eq!(
            groups,
            vec![vec![0, 3, 6], vec![1], vec![2, 5], vec![4]],
            "equal requests and labels group; the owned pod and the labelled one stay apart"
        );
    }

    /// docs/behaviour.md SU-101: controller-less DaemonSet pods (by annotation) and pods that
    /// already name a node stay groups of their own.
    #[test]
    fn controller_less_daemonset_pods_and_bound_pods_stay_apart() {
        let pinned = |name: &str| {
            let mut p = (*bare(name, 100)).clone();
            p.node_name = Some("n1".into());
            Arc::new(p)
        };
        let daemon = |name: &str| {
            let mut p = (*bare(name, 100)).clone();
            p.annotations.insert(
                "cluster-autoscaler.kubernetes.io/daemonset-pod".into(),
                "true".into(),
            );
            Arc::new(p)
        };
        let pods = vec![pinned("p-1"), pinned("p-2"), daemon("d-1"), daemon("d-2")];
        assert!(pods[2].is_daemonset_pod());
        let groups = group_pods(&pods);
        assert_eq!(groups, vec![vec![0], vec![1], vec![2], vec![3]]);
    }

    /// docs/dra.md DRA-127, docs/behaviour.md SU-101: controller-less pods naming different
    /// claims are not interchangeable and stay apart; those naming the same template group.
    #[test]
    fn controller_less_pods_naming_different_claims_stay_apart() {
        use ferroscale_model::dra::{PodClaimSource, PodResourceClaim};
        let with = |name: &str, source: PodClaimSource| {
            let mut p = (*bare(name, 100)).clone();
            p.resource_claims.push(PodResourceClaim {
                name: "gpu".into(),
                source,
            });
            Arc::new(p)
        };
        let template = || PodClaimSource::Template("gpu-template".into());
        let pods = vec![
            with("b-1", PodClaimSource::Claim("gpu-b-1".into())),
            with("b-2", PodClaimSource::Claim("gpu-b-2".into())),
            with("b-3", template()),
            with("b-4", template()),
            bare("b-5", 100),
        ];
        let groups = group_pods(&pods);
        assert_eq!(groups, vec![vec![0], vec![1], vec![2, 3], vec![4]]);
    }

    /// docs/dra.md DRA-127.
    #[test]
    fn pods_share_a_group_only_with_the_same_claim_sources() {
        use ferroscale_model::dra::{PodClaimSource, PodResourceClaim};
        let with = |name: &str, source: PodClaimSource| {
            let mut p = (*owned(name, "a", 100)).clone();
            p.resource_claims.push(PodResourceClaim {
                name: "gpu".into(),
                source,
            });
            Arc::new(p)
        };
        let template = || PodClaimSource::Template("gpu-template".into());
        let pods = vec![
            with("a-1", template()),
            with("a-2", template()),
            with("a-3", PodClaimSource::Claim("gpu-a-3".into())),
            with("a-4", PodClaimSource::Claim("gpu-a-4".into())),
            owned("a-5", "a", 100),
        ];
        let groups = group_pods(&pods);
        assert_eq!(groups, vec![vec![0, 1], vec![2], vec![3], vec![4]]);
    }

    #[test]
    fn a_controller_keeps_at_most_ten_shapes() {
        let pods: Vec<_> = (0..12)
            .flat_map(|i| {
                [
                    owned(&format!("p{i}-x"), "a", 100 + i),
                    owned(&format!("p{i}-y"), "a", 100 + i),
                ]
            })
            .collect();
        let (groups, overflowing) = group_pods_counting_overflow(&pods);
        // Ten shapes are remembered (pairs); the last two shapes give four singletons.
        assert_eq!(groups.len(), 10 + 4);
        assert!(groups[..10].iter().all(|g| g.len() == 2));
        assert_eq!(
            overflowing, 1,
            "one controller had more shapes than remembered"
        );
        let mut with_other = pods.clone();
        with_other.push(owned("b-1", "b", 100));
        assert_eq!(group_pods_counting_overflow(&with_other).1, 1);
        assert_eq!(group_pods_counting_overflow(&pods[..20]).1, 0);
    }
}
