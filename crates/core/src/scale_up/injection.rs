//! Proactive scale-up (`--enable-proactive-scaleup`, docs/behaviour.md SU-110): for every
//! ReplicaSet, Job and StatefulSet that wants more replicas than it has pods, fake pending pods
//! stand in for the replicas its controller has not created yet, so that the nodes they need are
//! requested in the same iteration as the ones for its pods that already wait.
//!
//! As upstream: a controller is only topped up when at least one of its pods is unschedulable
//! (the first one is the sample the fakes copy); its pods are those bound to a node and not
//! finished plus those marked unschedulable; and while the unschedulable pods, fake ones
//! included, outnumber `--pod-injection-limit`, fake pods are dropped (all of them when the real
//! ones alone reach the limit).
//!
//! A fake pod cannot use its sample's own ResourceClaims (those made from a
//! ResourceClaimTemplate, owned by the sample): the DynamicResources filter rejects a claim a
//! pod does not own. As upstream, each fake gets its own copy of every claim the sample owns
//! (docs/dra.md DRA-134), which the loop adds to its snapshot; claims the sample shares by name
//! stay shared.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::{Pod, PodClaimSource, ResourceClaim};

use crate::FastMap;
use crate::kubernetes::WorkloadController;

/// How long a controller whose fake pods could not be helped gets no fake pods (upstream's
/// 5 minutes: its exponential growth only applies while a controller is backed off already, and
/// a backed-off controller gets no fake pods that could fail again).
pub const INJECTION_BACKOFF: Duration = Duration::from_secs(5 * 60);

/// Annotation marking a pod as injected (upstream's key and value).
pub const FAKE_POD_ANNOTATION: &str = "podtype";
pub const FAKE_POD_ANNOTATION_VALUE: &str = "fakepod";

/// The controller kinds upstream tops up (a Deployment through its ReplicaSet).
const TOPPED_UP_KINDS: [&str; 3] = ["ReplicaSet", "Job", "StatefulSet"];

/// Whether `pod` was injected by [`proactive_fake_pods`].
pub fn is_fake_pod(pod: &Pod) -> bool {
    pod.annotations
        .get(FAKE_POD_ANNOTATION)
        .is_some_and(|v| v == FAKE_POD_ANNOTATION_VALUE)
}

/// Each controller's pods that are bound to a node and not finished, by the controller's uid:
/// the running replicas proactive scale-up counts. The loop's kept snapshot follows them pod by
/// pod as it follows the cluster (`autoscaler::kept`), so no loop reads a million pods to count
/// them; [`BoundPodsOfControllers::count`] counts a pod list from scratch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BoundPodsOfControllers {
    by_uid: FastMap<String, u32>,
}

impl BoundPodsOfControllers {
    pub fn count(pods: &[Arc<Pod>]) -> BoundPodsOfControllers {
        let mut counts = BoundPodsOfControllers::default();
        for pod in pods {
            counts.add(pod);
        }
        counts
    }

    /// The uid of the controller `pod` counts for, if it counts.
    fn counted(pod: &Pod) -> Option<&str> {
        if !pod.is_bound() || pod.is_terminal() {
            return None;
        }
        pod.controller().map(|owner| owner.uid.as_str())
    }

    /// A pod came into the list (or a changed pod's new object).
    pub fn add(&mut self, pod: &Pod) {
        if let Some(uid) = Self::counted(pod) {
            match self.by_uid.get_mut(uid) {
                Some(n) => *n += 1,
                None => {
                    self.by_uid.insert(uid.to_string(), 1);
                }
            }
        }
    }

    /// A pod left the list (or a changed pod's old object).
    pub fn remove(&mut self, pod: &Pod) {
        if let Some(uid) = Self::counted(pod)
            && let Some(n) = self.by_uid.get_mut(uid)
        {
            *n -= 1;
            if *n == 0 {
                self.by_uid.remove(uid);
            }
        }
    }

    /// Bound, unfinished pods of the controller of this uid.
    pub fn of(&self, controller_uid: &str) -> i64 {
        self.by_uid.get(controller_uid).map_or(0, |n| i64::from(*n))
    }
}

/// One controller's count so far.
struct Tally<'a> {
    desired: i64,
    /// Its unschedulable pods.
    pods: i64,
    sample: Option<&'a Arc<Pod>>,
}

/// What proactive scale-up adds to one iteration's plan.
#[derive(Debug, Default)]
pub struct FakePods {
    /// The fake pods to add to the pending pods, in controller order.
    pub pods: Vec<Arc<Pod>>,
    /// The fakes' own copies of their samples' claims, to add to the snapshot before the plan
    /// (`Snapshot::add_resource_claims`): without them the fakes cannot be scheduled.
    pub claims: Vec<Arc<ResourceClaim>>,
}

/// The fake pods to add to `pending` this iteration, and their claims. `bound` counts the
/// controllers' pods bound to nodes among every pod the iteration gathered; `pending` are the
/// unbound pods; `claims` the cluster's ResourceClaims.
pub fn proactive_fake_pods(
    controllers: &[WorkloadController],
    bound: &BoundPodsOfControllers,
    pending: &[Arc<Pod>],
    claims: &[Arc<ResourceClaim>],
    limit: i64,
) -> FakePods {
    let mut order: Vec<&str> = Vec::new();
    // Looked up once per unschedulable pod (hundreds of thousands in a large cluster).
    let mut tallies: FastMap<&str, Tally<'_>> = FastMap::default();
    for controller in controllers {
        let Some(desired) = controller.replicas else {
            continue;
        };
        if !TOPPED_UP_KINDS.contains(&controller.kind.as_str()) || controller.uid.is_empty() {
            continue;
        }
        if tallies
            .insert(
                controller.uid.as_str(),
                Tally {
                    desired: i64::from(desired),
                    pods: 0,
                    sample: None,
                },
            )
            .is_none()
        {
            order.push(controller.uid.as_str());
        }
    }
    // No controller to top up (pods without controllers, or only other kinds): nothing to count,
    // and a loop with hundreds of thousands of pending pods does not scan them for nothing.
    if tallies.is_empty() {
        return FakePods::default();
    }
    let unschedulable: Vec<&Arc<Pod>> = pending
        .iter()
        .filter(|p| !p.is_bound() && !p.is_terminal() && p.is_marked_unschedulable())
        .collect();
    // A controller's sample is its first unschedulable pod: without one it gets no fakes.
    for pod in unschedulable.iter().copied() {
        if let Some(tally) = pod
            .controller()
            .and_then(|owner| tallies.get_mut(owner.uid.as_str()))
        {
            tally.pods += 1;
            tally.sample.get_or_insert(pod);
        }
    }
    // The claims only samples with claims look up, indexed once.
    let mut claim_index: Option<HashMap<(&str, &str), &ResourceClaim>> = None;
    let mut fakes: Vec<(Arc<Pod>, Vec<ResourceClaim>)> = Vec::new();
    for uid in order {
        let Some(tally) = tallies.get(uid) else {
            continue;
        };
        let Some(sample) = tally.sample else {
            continue;
        };
        // Its pods: the unschedulable ones and those bound to a node and not finished.
        let pods = tally.pods + bound.of(uid);
        for i in 1..=(tally.desired - pods).max(0) {
            let mut fake = (**sample).clone();
            fake.name = ferroscale_model::format_compact!("{}-copy-{i}", sample.name);
            fake.uid = ferroscale_model::format_compact!("{uid}-{i}");
            fake.annotations.insert(
                FAKE_POD_ANNOTATION.to_string(),
                FAKE_POD_ANNOTATION_VALUE.to_string(),
            );
            let copies = if sample.has_resource_claims() {
                let index = claim_index.get_or_insert_with(|| {
                    claims
                        .iter()
                        .map(|c| ((c.namespace.as_str(), c.name.as_str()), &**c))
                        .collect()
                });
                copy_owned_claims(sample, &mut fake, &format!("copy-{i}"), index)
            } else {
                Vec::new()
            };
            fakes.push((Arc::new(fake), copies));
        }
    }
    // --pod-injection-limit caps the unschedulable pods, fake ones included, by dropping fakes
    // (and their claims) from the front.
    let total = i64::try_from(unschedulable.len() + fakes.len()).unwrap_or(i64::MAX);
    let excess = usize::try_from(total.saturating_sub(limit)).unwrap_or(0);
    fakes.drain(..excess.min(fakes.len()));
    let mut out = FakePods::default();
    for (pod, copies) in fakes {
        out.pods.push(pod);
        out.claims.extend(copies.into_iter().map(Arc::new));
    }
    out
}

/// Gives `fake` its own copy of every claim of `sample` that the sample owns (made from a
/// template for it), as upstream duplicates a pod's claims with the pod: the copy is named
/// `<claim>-<suffix>`, is owned by the fake, has no allocation and no consumers, and the fake's
/// reference (its status entry for a template) names it. Claims the sample does not own are
/// shared with other pods and stay shared; a claim that is not made yet or not found is left
/// as it is, so the fake fails where its sample fails.
fn copy_owned_claims(
    sample: &Pod,
    fake: &mut Pod,
    suffix: &str,
    claims: &HashMap<(&str, &str), &ResourceClaim>,
) -> Vec<ResourceClaim> {
    let mut copies: Vec<ResourceClaim> = Vec::new();
    for entry in &sample.resource_claims {
        let Some(name) = sample.resource_claim_name(entry) else {
            continue;
        };
        let Some(claim) = claims.get(&(sample.namespace.as_str(), name)) else {
            continue;
        };
        if claim.owner_pod_uid.as_deref() != Some(sample.uid.as_str()) {
            continue;
        }
        let copy_name = format!("{}-{suffix}", claim.name);
        // Two entries may name the same claim: one copy.
        if !copies.iter().any(|c| c.name == copy_name) {
            copies.push(ResourceClaim {
                name: copy_name.clone(),
                uid: format!("{}-{suffix}", claim.uid),
                allocation: None,
                reserved_for: Vec::new(),
                owner_pod_uid: Some(fake.uid.to_string()),
                ..(*claim).clone()
            });
        }
        match &entry.source {
            PodClaimSource::Template(_) => {
                for status in &mut fake.resource_claim_statuses {
                    if status.name == entry.name {
                        status.claim_name = Some(copy_name.clone());
                    }
                }
            }
            PodClaimSource::Claim(_) => {
                for own in &mut fake.resource_claims {
                    if own.name == entry.name {
                        own.source = PodClaimSource::Claim(copy_name.clone());
                    }
                }
            }
        }
    }
    copies
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::{
        ClaimAllocation, ClaimConsumer, ConditionStatus, OwnerRef, PodCondition, PodPhase,
        PodResourceClaim, PodResourceClaimStatus, thin_vec,
    };

    fn controller(kind: &str, uid: &str, replicas: i32) -> WorkloadController {
        WorkloadController {
            kind: kind.to_string(),
            namespace: "default".to_string(),
            name: uid.to_string(),
            uid: uid.to_string(),
            replicas: Some(replicas),
        }
    }

    fn pod(name: &str, owner: &str, node: Option<&str>) -> Arc<Pod> {
        let mut pod = Pod::new("default", name);
        pod.owner_references.push(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: owner.into(),
            uid: owner.into(),
            controller: true,
        });
        pod.node_name = node.map(Into::into);
        pod.phase = if node.is_some() {
            PodPhase::Running
        } else {
            PodPhase::Pending
        };
        if node.is_none() {
            pod.scheduled_condition = Some(Box::new(PodCondition {
                status: ConditionStatus::False,
                reason: "Unschedulable".into(),
                last_transition: None,
            }));
        }
        Arc::new(pod)
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        pods.iter().map(|p| p.name.to_string()).collect()
    }

    /// docs/behaviour.md SU-110: replicas minus bound and unschedulable pods, copied from the
    /// first unschedulable pod and marked as fake.
    #[test]
    fn fakes_fill_the_missing_replicas_from_the_first_unschedulable_pod() {
        let pods = vec![
            pod("a-0", "rs-a", Some("n0")),
            pod("a-1", "rs-a", None),
            pod("a-2", "rs-a", None),
        ];
        let pending: Vec<_> = pods[1..].to_vec();
        let fakes = proactive_fake_pods(
            &[controller("ReplicaSet", "rs-a", 5)],
            &BoundPodsOfControllers::count(&pods),
            &pending,
            &[],
            5000,
        )
        .pods;
        assert_eq!(names(&fakes), vec!["a-1-copy-1", "a-1-copy-2"]);
        assert!(fakes.iter().all(|p| is_fake_pod(p)));
        assert_eq!(fakes[1].uid, "rs-a-2");
        assert!(!is_fake_pod(&pods[1]));
    }

    /// docs/behaviour.md SU-110: no unschedulable pod, no fakes; finished pods and other kinds do
    /// not count.
    #[test]
    fn controllers_without_unschedulable_pods_or_of_other_kinds_get_none() {
        let mut done = (*pod("b-1", "rs-b", Some("n0"))).clone();
        done.phase = PodPhase::Succeeded;
        let pods = vec![pod("b-0", "rs-b", Some("n0")), Arc::new(done)];
        let none = proactive_fake_pods(
            &[controller("ReplicaSet", "rs-b", 4)],
            &BoundPodsOfControllers::count(&pods),
            &[],
            &[],
            5000,
        )
        .pods;
        assert!(none.is_empty());
        let pending = vec![pod("c-0", "rc-c", None)];
        let rc = proactive_fake_pods(
            &[controller("ReplicationController", "rc-c", 4)],
            &BoundPodsOfControllers::count(&pending),
            &pending,
            &[],
            5000,
        )
        .pods;
        assert!(rc.is_empty());
        // The finished pod is not counted: two fakes for a StatefulSet of four with one running and
        // one pending pod.
        let mut pods = pods;
        let pending = vec![pod("b-2", "rs-b", None)];
        pods.extend(pending.iter().cloned());
        let fakes = proactive_fake_pods(
            &[controller("StatefulSet", "rs-b", 4)],
            &BoundPodsOfControllers::count(&pods),
            &pending,
            &[],
            5000,
        )
        .pods;
        assert_eq!(fakes.len(), 2);
    }

    /// docs/behaviour.md SU-110: `--pod-injection-limit` counts real unschedulable pods too and
    /// drops fakes from the front.
    #[test]
    fn injection_limit_counts_real_pods_and_drops_fakes() {
        let pending = vec![pod("a-0", "rs-a", None), pod("b-0", "rs-b", None)];
        let controllers = [
            controller("ReplicaSet", "rs-a", 4),
            controller("Job", "rs-b", 3),
        ];
        let bound = BoundPodsOfControllers::count(&pending);
        let fakes = |limit| proactive_fake_pods(&controllers, &bound, &pending, &[], limit).pods;
        assert_eq!(fakes(5000).len(), 5);
        assert_eq!(names(&fakes(4)), vec!["b-0-copy-1", "b-0-copy-2"]);
        assert!(fakes(2).is_empty());
        assert!(fakes(-1).is_empty());
    }

    /// `pod` with a template claim entry `gpu` whose claim `claim` is recorded in its status,
    /// and an entry `shared` naming the shared claim `shared`.
    fn with_claims(pod: &Arc<Pod>, claim: &str) -> Arc<Pod> {
        let mut pod = (**pod).clone();
        pod.resource_claims = thin_vec![
            PodResourceClaim {
                name: "gpu".into(),
                source: PodClaimSource::Template("gpu-template".into()),
            },
            PodResourceClaim {
                name: "shared".into(),
                source: PodClaimSource::Claim("shared".into()),
            },
        ];
        pod.resource_claim_statuses = thin_vec![PodResourceClaimStatus {
            name: "gpu".into(),
            claim_name: Some(claim.into()),
        }];
        Arc::new(pod)
    }

    fn resource_claim(name: &str, owner: Option<&str>) -> Arc<ResourceClaim> {
        Arc::new(ResourceClaim {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            owner_pod_uid: owner.map(str::to_string),
            ..ResourceClaim::default()
        })
    }

    /// docs/dra.md DRA-134: each fake gets its own copy of the claim its sample owns (named
    /// `<claim>-copy-<i>`, owned by the fake, without allocation or consumers, named in the fake's
    /// status) while the claim the sample shares by name stays shared and is not copied.
    #[test]
    fn fakes_get_their_own_copies_of_the_claims_their_sample_owns() {
        let sample = with_claims(&pod("a-0", "rs-a", None), "a-0-gpu-x1");
        let mut owned = (*resource_claim("a-0-gpu-x1", Some(&sample.uid))).clone();
        owned.reserved_for = vec![ClaimConsumer {
            resource: "pods".into(),
            name: sample.name.to_string(),
            uid: sample.uid.to_string(),
        }];
        owned.allocation = Some(ClaimAllocation {
            devices: Vec::new(),
            node_selector: None,
        });
        let claims = vec![
            resource_claim("shared", Some("someone")),
            Arc::new(owned.clone()),
            resource_claim("other", None),
        ];
        let pending = vec![sample.clone()];
        let fakes = proactive_fake_pods(
            &[controller("ReplicaSet", "rs-a", 3)],
            &BoundPodsOfControllers::count(&pending),
            &pending,
            &claims,
            5000,
        );
        assert_eq!(names(&fakes.pods), vec!["a-0-copy-1", "a-0-copy-2"]);
        let claim_names: Vec<&str> = fakes.claims.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(claim_names, vec!["a-0-gpu-x1-copy-1", "a-0-gpu-x1-copy-2"]);
        for (fake, copy) in fakes.pods.iter().zip(&fakes.claims) {
            assert_eq!(copy.owner_pod_uid.as_deref(), Some(fake.uid.as_str()));
            assert_eq!(copy.allocation, None);
            assert!(copy.reserved_for.is_empty());
            assert_eq!(copy.spec, owned.spec);
            assert_ne!(copy.uid, owned.uid);
            let gpu = &fake.resource_claims[0];
            assert_eq!(fake.resource_claim_name(gpu), Some(copy.name.as_str()));
            let shared = &fake.resource_claims[1];
            assert_eq!(fake.resource_claim_name(shared), Some("shared"));
        }
        // The sample is left as it was.
        assert_eq!(
            sample.resource_claim_name(&sample.resource_claims[0]),
            Some("a-0-gpu-x1")
        );
    }

    /// docs/dra.md DRA-134: a sample whose template claim is not made yet, or names a claim it
    /// does not own, gives its fakes no copies (they fail where the sample fails), and the
    /// claims of fakes `--pod-injection-limit` drops are dropped with them.
    #[test]
    fn only_owned_claims_are_copied_and_dropped_fakes_take_theirs_along() {
        let sample = with_claims(&pod("a-0", "rs-a", None), "a-0-gpu-x1");
        let controllers = [controller("ReplicaSet", "rs-a", 4)];
        let pending = vec![sample.clone()];
        let foreign = vec![resource_claim("a-0-gpu-x1", Some("someone-else"))];
        let fakes = proactive_fake_pods(
            &controllers,
            &BoundPodsOfControllers::count(&pending),
            &pending,
            &foreign,
            5000,
        );
        assert_eq!(fakes.pods.len(), 3);
        assert!(fakes.claims.is_empty());
        assert_eq!(
            fakes.pods[0].resource_claim_name(&fakes.pods[0].resource_claims[0]),
            Some("a-0-gpu-x1")
        );

        let owned = vec![resource_claim("a-0-gpu-x1", Some(&sample.uid))];
        let capped = proactive_fake_pods(
            &controllers,
            &BoundPodsOfControllers::count(&pending),
            &pending,
            &owned,
            3,
        );
        assert_eq!(names(&capped.pods), vec!["a-0-copy-2", "a-0-copy-3"]);
        let claim_names: Vec<&str> = capped.claims.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(claim_names, vec!["a-0-gpu-x1-copy-2", "a-0-gpu-x1-copy-3"]);
    }
}
