//! Drainability (docs/behaviour.md SD-67–SD-80): for every pod of a candidate node, the first
//! decisive rule says whether the pod is skipped, drained as a DaemonSet pod, waited for, moved, or
//! blocks the node, and why.
//!
//! PodDisruptionBudgets are tracked here too: [`PdbTracker`] holds each budget's remaining
//! disruptions, which the removals simulated earlier in the same loop consume.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::pod::{SAFE_TO_EVICT, SAFE_TO_EVICT_LOCAL_VOLUMES};
use ferroscale_model::{
    OwnerRef, Pod, PodDisruptionBudget, PodPhase, RestartPolicy, Timestamp, VolumeSource,
};

use super::utilization::is_long_terminating;
use super::{ControllerIndex, DrainBlock};
use crate::options::AutoscalingOptions;

/// Why a node chosen for removal must be kept after all, found when re-checking its live pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecheckBlock {
    /// A pod blocks the removal under a drainability rule.
    Blocked { pod: String, rule: DrainBlock },
    /// A pod annotated `safe-to-evict: on-completion` is still running.
    WaitingForCompletion { pod: String },
}

/// docs/behaviour.md SD-110: after the post-taint delay, re-runs the drainability rules over the
/// pods that are on the node now, with fresh PodDisruptionBudgets and controllers. Returns the
/// first pod that keeps the node, if any.
pub fn first_blocking_pod(
    live_pods: &[Arc<Pod>],
    now: Timestamp,
    controllers: &ControllerIndex,
    pdbs: &[PodDisruptionBudget],
    options: &AutoscalingOptions,
) -> Option<RecheckBlock> {
    let rules = DrainRules::from_options(now, controllers, options);
    let tracker = PdbTracker::new(pdbs);
    live_pods
        .iter()
        .find_map(|pod| match rules.classify(pod, &tracker) {
            PodDrain::Block(rule) => Some(RecheckBlock::Blocked {
                pod: pod.key(),
                rule,
            }),
            PodDrain::WaitForCompletion => {
                Some(RecheckBlock::WaitingForCompletion { pod: pod.key() })
            }
            PodDrain::Skip | PodDrain::DaemonSet | PodDrain::Move => None,
        })
}

const KUBE_SYSTEM: &str = "kube-system";

/// What a node's removal does with one of its pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PodDrain {
    /// Neither moved nor blocking (mirror and long-terminating pods).
    Skip,
    /// Drained as a DaemonSet pod: evicted per the DaemonSet flags, never re-placed.
    DaemonSet,
    /// Must be evicted and needs a place on another node.
    Move,
    /// `safe-to-evict: on-completion`: the node waits until the pod finishes.
    WaitForCompletion,
    /// Keeps the node.
    Block(DrainBlock),
}

/// The flags and objects the rules read.
pub(super) struct DrainRules<'a> {
    pub now: Timestamp,
    pub controllers: &'a ControllerIndex,
    pub skip_nodes_with_custom_controller_pods: bool,
    pub skip_nodes_with_system_pods: bool,
    pub skip_nodes_with_local_storage: bool,
    pub min_replica_count: i32,
    pub blocking_system_pod_timeout: Duration,
}

impl<'a> DrainRules<'a> {
    /// The rules as the flags configure them, evaluated at `now`.
    pub fn from_options(
        now: Timestamp,
        controllers: &'a ControllerIndex,
        options: &AutoscalingOptions,
    ) -> DrainRules<'a> {
        DrainRules {
            now,
            controllers,
            skip_nodes_with_custom_controller_pods: options.skip_nodes_with_custom_controller_pods,
            skip_nodes_with_system_pods: options.skip_nodes_with_system_pods,
            skip_nodes_with_local_storage: options.skip_nodes_with_local_storage,
            min_replica_count: options.min_replica_count,
            blocking_system_pod_timeout: options.blocking_system_pod_distruption_timeout,
        }
    }

    /// Runs the table in order; the first decisive rule wins.
    pub fn classify(&self, pod: &Pod, pdbs: &PdbTracker) -> PodDrain {
        // 1, 2
        if pod.is_mirror_pod() || is_long_terminating(pod, self.now) {
            return PodDrain::Skip;
        }
        // 3
        if self.skip_nodes_with_custom_controller_pods
            && let Some(block) = self.missing_controller(pod)
        {
            return PodDrain::Block(block);
        }
        // 4
        if pod.is_daemonset_pod() {
            return PodDrain::DaemonSet;
        }
        let safe_to_evict = pod.annotations.get(SAFE_TO_EVICT).map(String::as_str);
        // 5
        if safe_to_evict == Some("true") {
            return PodDrain::Move;
        }
        // 6
        if pod.phase == PodPhase::Failed
            || (pod.phase == PodPhase::Succeeded
                && matches!(
                    pod.restart_policy,
                    RestartPolicy::Never | RestartPolicy::OnFailure
                ))
        {
            return PodDrain::Move;
        }
        // 7
        if safe_to_evict == Some("on-completion") {
            return PodDrain::WaitForCompletion;
        }
        // 8
        match pod.controller() {
            None => return PodDrain::Block(DrainBlock::NotReplicated),
            Some(owner)
                if self.skip_nodes_with_custom_controller_pods
                    && !matches!(
                        owner.kind.as_str(),
                        "ReplicationController" | "Job" | "ReplicaSet" | "StatefulSet"
                    ) =>
            {
                return PodDrain::Block(DrainBlock::NotReplicated);
            }
            Some(_) => {}
        }
        // 9
        if self.skip_nodes_with_system_pods && pod.namespace == KUBE_SYSTEM && !pdbs.any_covers(pod)
        {
            let old_enough = self.now > pod.creation_time + self.blocking_system_pod_timeout;
            return if old_enough {
                PodDrain::Move
            } else {
                PodDrain::Block(DrainBlock::UnmovableKubeSystemPod)
            };
        }
        // 10
        if safe_to_evict == Some("false") {
            return PodDrain::Block(DrainBlock::NotSafeToEvictAnnotation);
        }
        // 11
        if self.skip_nodes_with_local_storage && has_unsafe_local_storage(pod) {
            return PodDrain::Block(DrainBlock::LocalStorageRequested);
        }
        // 12
        if pdbs.blocks(pod) {
            return PodDrain::Block(DrainBlock::NotEnoughPdb);
        }
        PodDrain::Move
    }

    /// Rule 3: the pod's controller must exist (and keep enough replicas for RCs and RSs).
    fn missing_controller(&self, pod: &Pod) -> Option<DrainBlock> {
        let owner = pod.controller()?;
        let lookup = |owner: &OwnerRef| {
            self.controllers
                .get(&owner.kind, &pod.namespace, &owner.name)
        };
        match owner.kind.as_str() {
            "ReplicationController" | "ReplicaSet" => match lookup(owner) {
                None => Some(DrainBlock::ControllerNotFound),
                Some(r) if r.desired < self.min_replica_count => {
                    Some(DrainBlock::MinReplicasReached)
                }
                Some(_) => None,
            },
            "DaemonSet" | "StatefulSet" if api_group(owner) == "apps" => lookup(owner)
                .is_none()
                .then_some(DrainBlock::ControllerNotFound),
            "Job" => lookup(owner)
                .is_none()
                .then_some(DrainBlock::ControllerNotFound),
            _ => None,
        }
    }
}

/// `apps` for `apps/v1`, empty for the core group (`v1`).
fn api_group(owner: &OwnerRef) -> &str {
    owner
        .api_version
        .split_once('/')
        .map_or("", |(group, _)| group)
}

/// Rule 11: a `hostPath` volume, or an `emptyDir` not backed by memory, that the
/// `safe-to-evict-local-volumes` annotation does not list.
fn has_unsafe_local_storage(pod: &Pod) -> bool {
    let listed: Vec<&str> = pod
        .annotations
        .get(SAFE_TO_EVICT_LOCAL_VOLUMES)
        .map(|v| v.split(',').map(str::trim).collect())
        .unwrap_or_default();
    pod.volumes.iter().any(|volume| {
        let local = match &volume.source {
            VolumeSource::HostPath => true,
            VolumeSource::EmptyDir { memory_medium } => !memory_medium,
            _ => false,
        };
        local && !listed.contains(&volume.name.as_str())
    })
}

/// Remaining disruptions of every PDB, consumed by the removals simulated in this loop.
#[derive(Debug, Clone)]
pub(super) struct PdbTracker<'a> {
    pdbs: &'a [PodDisruptionBudget],
    remaining: Vec<i32>,
    by_namespace: HashMap<&'a str, Vec<usize>>,
}

impl<'a> PdbTracker<'a> {
    /// Remaining disruptions start at each budget's `status.disruptionsAllowed`; a budget the
    /// controller has not computed yet allows none.
    pub fn new(pdbs: &'a [PodDisruptionBudget]) -> PdbTracker<'a> {
        let mut by_namespace: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, pdb) in pdbs.iter().enumerate() {
            by_namespace
                .entry(pdb.namespace.as_str())
                .or_default()
                .push(i);
        }
        PdbTracker {
            pdbs,
            remaining: pdbs
                .iter()
                .map(|p| p.disruptions_allowed.unwrap_or(0))
                .collect(),
            by_namespace,
        }
    }

    fn covering<'p>(&'p self, pod: &'p Pod) -> impl Iterator<Item = usize> + 'p {
        self.by_namespace
            .get(pod.namespace.as_str())
            .into_iter()
            .flatten()
            .copied()
            .filter(|i| self.pdbs.get(*i).is_some_and(|pdb| pdb.covers(pod)))
    }

    pub fn any_covers(&self, pod: &Pod) -> bool {
        self.covering(pod).next().is_some()
    }

    /// Rule 12: some covering budget has no disruption left.
    pub fn blocks(&self, pod: &Pod) -> bool {
        self.covering(pod)
            .any(|i| self.remaining.get(i).is_none_or(|r| *r < 1))
    }

    /// Whether evicting all these pods together stays within every budget (else the node is
    /// risky).
    pub fn fits_together<'p>(&self, pods: impl IntoIterator<Item = &'p Pod>) -> bool {
        let mut needed: HashMap<usize, i32> = HashMap::new();
        for pod in pods {
            for i in self.covering(pod) {
                *needed.entry(i).or_default() += 1;
            }
        }
        needed
            .into_iter()
            .all(|(i, n)| self.remaining.get(i).is_some_and(|r| n <= *r))
    }

    /// Consumes one disruption per pod from each budget covering it.
    pub fn consume<'p>(&mut self, pods: impl IntoIterator<Item = &'p Pod>) {
        for pod in pods {
            let covering: Vec<usize> = self.covering(pod).collect();
            for i in covering {
                if let Some(r) = self.remaining.get_mut(i) {
                    *r -= 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ferroscale_model::Volume;

    use super::*;
    use crate::scale_down::ControllerReplicas;

    fn rules(controllers: &ControllerIndex) -> DrainRules<'_> {
        DrainRules {
            now: Timestamp::from_secs(100_000),
            controllers,
            skip_nodes_with_custom_controller_pods: true,
            skip_nodes_with_system_pods: true,
            skip_nodes_with_local_storage: true,
            min_replica_count: 0,
            blocking_system_pod_timeout: Duration::from_secs(3600),
        }
    }

    fn owned_by(kind: &str, api_version: &str) -> Pod {
        let mut p = Pod::new("default", "p");
        p.owner_references.push(OwnerRef {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "owner".into(),
            uid: "uid-owner".into(),
            controller: true,
        });
        p
    }

    #[test]
    fn safe_to_evict_true_wins_over_later_rules() {
        let controllers = ControllerIndex::new();
        let mut p = Pod::new("kube-system", "lonely");
        p.annotations.insert(SAFE_TO_EVICT.into(), "true".into());
        p.volumes.push(Volume {
            name: "data".into(),
            source: VolumeSource::HostPath,
        });
        assert_eq!(
            rules(&controllers).classify(&p, &PdbTracker::new(&[])),
            PodDrain::Move
        );
    }

    #[test]
    fn controller_lookups_come_before_the_daemonset_rule() {
        let mut controllers = ControllerIndex::new();
        let ds = owned_by("DaemonSet", "apps/v1");
        let pdbs = PdbTracker::new(&[]);
        assert_eq!(
            rules(&controllers).classify(&ds, &pdbs),
            PodDrain::Block(DrainBlock::ControllerNotFound)
        );
        controllers.insert(
            "DaemonSet",
            "default",
            "owner",
            ControllerReplicas::default(),
        );
        assert_eq!(
            rules(&controllers).classify(&ds, &pdbs),
            PodDrain::DaemonSet
        );
        // A DaemonSet kind of another API group is not looked up.
        let foreign = owned_by("DaemonSet", "apps.kruise.io/v1alpha1");
        assert_eq!(
            rules(&ControllerIndex::new()).classify(&foreign, &pdbs),
            PodDrain::DaemonSet
        );
        // Without the custom-controller check nothing is looked up.
        let none = ControllerIndex::new();
        let lenient = DrainRules {
            skip_nodes_with_custom_controller_pods: false,
            ..rules(&none)
        };
        assert_eq!(
            lenient.classify(&owned_by("ReplicaSet", "apps/v1"), &pdbs),
            PodDrain::Move
        );
    }

    #[test]
    fn mirror_and_terminating_pods_are_skipped_first() {
        let controllers = ControllerIndex::new();
        let r = rules(&controllers);
        let mut mirror = Pod::new("kube-system", "etcd");
        mirror
            .annotations
            .insert(ferroscale_model::pod::MIRROR_POD.into(), "x".into());
        assert_eq!(r.classify(&mirror, &PdbTracker::new(&[])), PodDrain::Skip);
        let mut gone = Pod::new("default", "gone");
        gone.deletion_time = Some(r.now - Duration::from_secs(120));
        assert_eq!(r.classify(&gone, &PdbTracker::new(&[])), PodDrain::Skip);
    }

    #[test]
    fn pdb_budget_is_consumed_and_checked_together() {
        let mut pod = owned_by("ReplicaSet", "apps/v1");
        pod.labels.insert("app".into(), "web".into());
        let pdbs = [PodDisruptionBudget {
            namespace: "default".into(),
            name: "web".into(),
            selector: Some(ferroscale_model::LabelSelector::from_labels([(
                "app", "web",
            )])),
            disruptions_allowed: Some(1),
            ..PodDisruptionBudget::default()
        }];
        let mut tracker = PdbTracker::new(&pdbs);
        assert!(!tracker.blocks(&pod));
        assert!(tracker.fits_together([&pod]));
        assert!(
            !tracker.fits_together([&pod, &pod]),
            "two pods, one disruption"
        );
        tracker.consume([&pod]);
        assert!(tracker.blocks(&pod));
    }
}
