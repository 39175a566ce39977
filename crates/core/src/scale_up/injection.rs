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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::Pod;

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

/// One controller's count so far.
struct Tally<'a> {
    desired: i64,
    pods: i64,
    sample: Option<&'a Arc<Pod>>,
}

/// The fake pods to add to `pending` this iteration, in controller order. `pods` are every pod
/// the iteration gathered, bound or not; `pending` the unbound ones.
pub fn proactive_fake_pods(
    controllers: &[WorkloadController],
    pods: &[Arc<Pod>],
    pending: &[Arc<Pod>],
    limit: i64,
) -> Vec<Arc<Pod>> {
    let mut order: Vec<&str> = Vec::new();
    let mut tallies: HashMap<&str, Tally<'_>> = HashMap::new();
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
    let unschedulable: Vec<&Arc<Pod>> = pending
        .iter()
        .filter(|p| !p.is_bound() && !p.is_terminal() && p.is_marked_unschedulable())
        .collect();
    let scheduled = pods.iter().filter(|p| p.is_bound() && !p.is_terminal());
    for pod in scheduled.chain(unschedulable.iter().copied()) {
        let Some(tally) = pod
            .controller()
            .and_then(|owner| tallies.get_mut(owner.uid.as_str()))
        else {
            continue;
        };
        tally.pods += 1;
        if tally.sample.is_none() && !pod.is_bound() {
            tally.sample = Some(pod);
        }
    }
    let mut fakes = Vec::new();
    for uid in order {
        let Some(tally) = tallies.get(uid) else {
            continue;
        };
        let Some(sample) = tally.sample else {
            continue;
        };
        for i in 1..=(tally.desired - tally.pods).max(0) {
            let mut fake = (**sample).clone();
            fake.name = format!("{}-copy-{i}", sample.name);
            fake.uid = format!("{uid}-{i}");
            fake.annotations.insert(
                FAKE_POD_ANNOTATION.to_string(),
                FAKE_POD_ANNOTATION_VALUE.to_string(),
            );
            fakes.push(Arc::new(fake));
        }
    }
    // --pod-injection-limit caps the unschedulable pods, fake ones included, by dropping fakes
    // from the front.
    let total = i64::try_from(unschedulable.len() + fakes.len()).unwrap_or(i64::MAX);
    let excess = usize::try_from(total.saturating_sub(limit)).unwrap_or(0);
    fakes.drain(..excess.min(fakes.len()));
    fakes
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::{ConditionStatus, OwnerRef, PodCondition, PodPhase};

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
        pod.node_name = node.map(str::to_string);
        pod.phase = if node.is_some() {
            PodPhase::Running
        } else {
            PodPhase::Pending
        };
        if node.is_none() {
            pod.scheduled_condition = Some(PodCondition {
                status: ConditionStatus::False,
                reason: "Unschedulable".into(),
                last_transition: None,
            });
        }
        Arc::new(pod)
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        pods.iter().map(|p| p.name.clone()).collect()
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
            &pods,
            &pending,
            5000,
        );
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
        let none = proactive_fake_pods(&[controller("ReplicaSet", "rs-b", 4)], &pods, &[], 5000);
        assert!(none.is_empty());
        let pending = vec![pod("c-0", "rc-c", None)];
        let rc = proactive_fake_pods(
            &[controller("ReplicationController", "rc-c", 4)],
            &pending,
            &pending,
            5000,
        );
        assert!(rc.is_empty());
        // The finished pod is not counted: two fakes for a StatefulSet of four with one running and
        // one pending pod.
        let mut pods = pods;
        let pending = vec![pod("b-2", "rs-b", None)];
        pods.extend(pending.iter().cloned());
        let fakes = proactive_fake_pods(
            &[controller("StatefulSet", "rs-b", 4)],
            &pods,
            &pending,
            5000,
        );
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
        let all = proactive_fake_pods(&controllers, &pending, &pending, 5000);
        assert_eq!(all.len(), 5);
        let capped = proactive_fake_pods(&controllers, &pending, &pending, 4);
        assert_eq!(names(&capped), vec!["b-0-copy-1", "b-0-copy-2"]);
        assert!(proactive_fake_pods(&controllers, &pending, &pending, 2).is_empty());
        assert!(proactive_fake_pods(&controllers, &pending, &pending, -1).is_empty());
    }
}
