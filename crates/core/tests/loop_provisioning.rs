//! ProvisioningRequests through the whole loop (docs/provisioning-requests.md): the conditions
//! written back to the cluster, the capacity booked in the snapshot, booking expiry and
//! consumption, retries with backoff, best-effort-atomic scale-ups, consumer pods, the
//! alternation with ordinary pods, batching, the processor instance and dry-run.

mod loop_fakes;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_core::autoscaler::{Autoscaler, LoopOutcome};
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::{
    BEST_EFFORT_ATOMIC_CLASS, CHECK_CAPACITY_CLASS, CONSUME_PROVISIONING_REQUEST_ANNOTATION,
    ConditionStatus, Pod, PodSet, PodTemplate, ProvisioningRequest, ProvisioningRequestStatus,
    Resources, Timestamp,
};
use loop_fakes::*;

/// A cluster with one empty 4-core node `n0` of group `pool` (0..10, 4-core nodes), and the
/// PodTemplate `batch/worker` of pods asking `cpu_milli` each.
fn cluster_with_one_empty_node(cpu_milli: i64) -> (CallLog, FakeCloud, FakeCluster) {
    cluster_with_group_max(cpu_milli, 10)
}

fn cluster_with_group_max(cpu_milli: i64, max: usize) -> (CallLog, FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("pool", 0, max);
    let cluster = FakeCluster::new(log.clone());
    let n0 = node("n0", 4000, 16 << 30);
    cloud.add_instance("pool", &n0);
    cluster.add_node(n0);
    let mut pod = Pod::new("batch", "worker");
    pod.requests = Resources::new(cpu_milli, 1 << 30);
    cluster
        .state()
        .capacity
        .pod_templates
        .push(Arc::new(PodTemplate {
            namespace: "batch".into(),
            name: "worker".into(),
            uid: "uid-template-worker".into(),
            generation: 1,
            pod: Arc::new(pod),
        }));
    (log, cloud, cluster)
}

fn add_request(
    cluster: &FakeCluster,
    name: &str,
    class: &str,
    count: u32,
    params: &[(&str, &str)],
) {
    cluster
        .state()
        .capacity
        .provisioning_requests
        .push(Arc::new(ProvisioningRequest {
            namespace: "batch".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            generation: 1,
            creation_time: t(0),
            deleting: false,
            class: class.into(),
            pod_sets: vec![PodSet {
                pod_template: "worker".into(),
                count,
            }],
            parameters: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            status: ProvisioningRequestStatus::default(),
        }));
}

fn status_of(cluster: &FakeCluster, name: &str) -> ProvisioningRequestStatus {
    cluster
        .state()
        .capacity
        .provisioning_requests
        .iter()
        .find(|r| r.name == name)
        .map(|r| r.status.clone())
        .expect("request exists")
}

/// `(status, reason)` of the condition `type_` of request `name`, as the cluster has it.
fn condition(cluster: &FakeCluster, name: &str, type_: &str) -> Option<(ConditionStatus, String)> {
    status_of(cluster, name)
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason.clone()))
}

fn is(status: ConditionStatus, reason: &str) -> Option<(ConditionStatus, String)> {
    Some((status, reason.to_string()))
}

fn enabled() -> AutoscalingOptions {
    AutoscalingOptions {
        enable_provisioning_requests: true,
        ..AutoscalingOptions::default()
    }
}

fn writes(log: &CallLog) -> usize {
    calls(log, "kube.update_provisioning_request_status").len()
}

fn after(secs: u64) -> Timestamp {
    t(100) + Duration::from_secs(secs)
}

/// A pod of the request `name` that the scheduler bound to `node`.
fn consumer_on(name: &str, index: usize, node: &str) -> Pod {
    let mut pod = pod_on(&format!("{name}-consumer-{index}"), node, 1500);
    pod.namespace = "batch".into();
    pod.annotations
        .insert(CONSUME_PROVISIONING_REQUEST_ANNOTATION.into(), name.into());
    pod
}

/// docs/provisioning-requests.md PR-104, PR-108, PR-114.
#[test]
fn a_check_capacity_request_that_fits_is_accepted_provisioned_and_its_capacity_booked() {
    let (log, cloud, cluster) = cluster_with_one_empty_node(1500);
    add_request(&cluster, "fits", CHECK_CAPACITY_CLASS, 2, &[]);
    let mut autoscaler = Autoscaler::new(enabled(), 1);

    let outcome = run(&mut autoscaler, &cloud, &cluster, after(0));
    assert_eq!(
        condition(&cluster, "fits", "Accepted"),
        is(ConditionStatus::True, "Accepted")
    );
    assert_eq!(
        condition(&cluster, "fits", "Provisioned"),
        is(ConditionStatus::True, "CapacityIsFound")
    );
    assert!(
        calls(&log, "cloud.increase_size").is_empty(),
        "no node is added for check-capacity"
    );
    assert!(outcome.events.iter().any(|e| e.reason == "CapacityIsFound"
        && e.object.to_string() == "provisioningrequest/batch/fits"));

    // 3 of n0's 4 cores are booked: a pod of 2 cores does not fit there any more.
    cluster.add_pod(pending_pod("web-1", 2000, after(0)));
    run(&mut autoscaler, &cloud, &cluster, after(10));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 1"]
    );
}

/// docs/provisioning-requests.md PR-108.
#[test]
fn without_the_booking_the_same_pod_fits_the_node() {
    // The control of the test above: the pod fits n0 when nothing is booked.
    let (log, cloud, cluster) = cluster_with_one_empty_node(1500);
    let mut autoscaler = Autoscaler::new(enabled(), 1);
    cluster.add_pod(pending_pod("web-1", 2000, after(0)));
    run(&mut autoscaler, &cloud, &cluster, after(10));
    assert!(calls(&log, "cloud.increase_size").is_empty());
}

/// docs/provisioning-requests.md PR-105, PR-106.
#[test]
fn a_check_capacity_request_that_does_not_fit_is_retried_after_its_backoff() {
    let (log, cloud, cluster) = cluster_with_one_empty_node(3000);
    add_request(&cluster, "big", CHECK_CAPACITY_CLASS, 2, &[]);
    let mut autoscaler = Autoscaler::new(enabled(), 1);

    run(&mut autoscaler, &cloud, &cluster, after(0));
    assert_eq!(
        condition(&cluster, "big", "Provisioned"),
        is(ConditionStatus::False, "CapacityIsNotFound")
    );
    assert!(calls(&log, "cloud.increase_size").is_empty());
    let tried = writes(&log);

    // Within the initial backoff (1 minute) nothing is tried.
    run(&mut autoscaler, &cloud, &cluster, after(30));
    run(&mut autoscaler, &cloud, &cluster, after(60));
    assert_eq!(writes(&log), tried);
    // After it, the request is checked again: room was made meanwhile.
    cluster.add_node(node("n1", 4000, 16 << 30));
    run(&mut autoscaler, &cloud, &cluster, after(70));
    assert_eq!(
        condition(&cluster, "big", "Provisioned"),
        is(ConditionStatus::True, "CapacityIsFound")
    );
}

/// docs/provisioning-requests.md PR-106.
#[test]
fn the_backoff_flags_set_the_retry_wait() {
    let (log, cloud, cluster) = cluster_with_one_empty_node(3000);
    add_request(&cluster, "big", CHECK_CAPACITY_CLASS, 2, &[]);
    let mut options = enabled();
    options
        .set("provisioning-request-initial-backoff-time", "5m")
        .unwrap();
    let mut autoscaler = Autoscaler::new(options, 1);
    run(&mut autoscaler, &cloud, &cluster, after(0));
    let tried = writes(&log);
    run(&mut autoscaler, &cloud, &cluster, after(120));
    assert_eq!(
        writes(&log),
        tried,
        "a 5 minute wait is not over after 2 minutes"
    );
    run(&mut autoscaler, &cloud, &cluster, after(301));
    assert!(writes(&log) > tried);
}

/// docs/provisioning-requests.md PR-105.
#[test]
fn no_retry_fails_a_check_capacity_request_that_does_not_fit() {
    let (_log, cloud, cluster) = cluster_with_one_empty_node(3000);
    add_request(
        &cluster,
        "once",
        CHECK_CAPACITY_CLASS,
        2,
        &[("noRetry", "true")],
    );
    let mut autoscaler = Autoscaler::new(enabled(), 1);
    run(&mut autoscaler, &cloud, &cluster, after(0));
    assert_eq!(
        condition(&cluster, "once", "Failed"),
        is(ConditionStatus::True, "CapacityIsNotFound")
    );
}

/// docs/provisioning-requests.md PR-109.
#[test]
fn a_booking_expires_after_ten_minutes_and_frees_the_capacity() {
    let (log, cloud, cluster) = cluster_with_one_empty_node(1500);
    add_request(&cluster, "fits", CHECK_CAPACITY_CLASS, 2, &[]);
    let mut autoscaler = Autoscaler::new(enabled(), 1);
    run(&mut autoscaler, &cloud, &cluster, after(0));

    run(&mut autoscaler, &cloud, &cluster, after(600));
    assert_eq!(
        condition(&cluster, "fits", "BookingExpired"),
        None,
        "not before ten minutes"
    );
    run(&mut autoscaler, &cloud, &cluster, after(601));
    assert_eq!(
        condition(&cluster, "fits", "BookingExpired"),
        is(ConditionStatus::True, "CapacityReservationTimeExpired")
    );
    // The capacity is free again: a 2-core pod fits n0.
    cluster.add_pod(pending_pod("web-1", 2000, after(601)));
    run(&mut autoscaler, &cloud, &cluster, after(620));
    assert!(calls(&log, "cloud.increase_size").is_empty());
}

/// docs/provisioning-requests.md PR-109.
#[test]
fn a_booking_ends_once_every_pod_of_the_request_is_scheduled() {
    let (_log, cloud, cluster) = cluster_with_one_empty_node(1500);
    add_request(&cluster, "fits", CHECK_CAPACITY_CLASS, 2, &[]);
    let mut autoscaler = Autoscaler::new(enabled(), 1);
    run(&mut autoscaler, &cloud, &cluster, after(0));

    cluster.add_pod(consumer_on("fits", 0, "n0"));
    run(&mut autoscaler, &cloud, &cluster, after(10));
    assert_eq!(
        condition(&cluster, "fits", "BookingExpired"),
        None,
        "one pod still to come"
    );
    cluster.add_pod(consumer_on("fits", 1, "n0"));
    run(&mut autoscaler, &cloud, &cluster, after(20));
    assert_eq!(
        condition(&cluster, "fits", "BookingExpired"),
        is(ConditionStatus::True, "CapacityBookingConsumed")
    );
}

/// Scale-down with a one-minute unneeded time, on an empty node `n0`.
fn scale_down_after_a_minute() -> AutoscalingOptions {
    let mut options = enabled();
    options.scale_down_unneeded_time = Duration::from_secs(60);
    options.scale_down_delay_after_add = Duration::ZERO;
    options
}

fn unneeded(outcome: &LoopOutcome) -> Vec<String> {
    outcome
        .scale_down
        .as_ref()
        .map(|p| p.unneeded.iter().map(|u| u.node.clone()).collect())
        .unwrap_or_default()
}

/// docs/provisioning-requests.md PR-108.
#[test]
fn booked_capacity_is_not_removed_by_scale_down() {
    let (log, cloud, cluster) = cluster_with_one_empty_node(1500);
    add_request(&cluster, "fits", CHECK_CAPACITY_CLASS, 2, &[]);
    let mut autoscaler = Autoscaler::new(scale_down_after_a_minute(), 1);
    for secs in (0..=300).step_by(10) {
        let outcome = run(&mut autoscaler, &cloud, &cluster, after(secs));
        assert!(
            unneeded(&outcome).is_empty(),
            "n0 holds a booking at {secs}s"
        );
    }
    assert!(calls(&log, "kube.taint").is_empty());
}

/// docs/provisioning-requests.md PR-108.
#[test]
fn an_empty_node_without_booking_is_unneeded() {
    // The control of the test above.
    let (_log, cloud, cluster) = cluster_with_one_empty_node(1500);
    let mut autoscaler = Autoscaler::new(scale_down_after_a_minute(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, after(0));
    assert_eq!(unneeded(&outcome), vec!["n0".to_string()]);
}

/// docs/provisioning-requests.md PR-111.
#[test]
fn a_best_effort_atomic_request_scales_up_all_its_nodes_at_once_then_is_provisioned() {
    let (log, cloud, cluster) = cluster_with_one_empty_node(3000);
    add_request(&cluster, "gang", BEST_EFFORT_ATOMIC_CLASS, 4, &[]);
    let mut autoscaler = Autoscaler::new(enabled(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, after(0));
    // One pod fits n0; the other three need a node each, asked for in one resize.
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 3"]
    );
    assert_eq!(
        condition(&cluster, "gang", "Accepted"),
        is(ConditionStatus::True, "Accepted")
    );
    assert_eq!(
        condition(&cluster, "gang", "Provisioned"),
        is(ConditionStatus::True, "CapacityIsProvisioned")
    );
    // The request's virtual pods are never named in events.
    assert!(
        !outcome
            .events
            .iter()
            .any(|e| e.object.to_string().contains("gang-0-"))
    );

    // The booking holds the new nodes for the pods: the next loops do not scale up again.
    run(&mut autoscaler, &cloud, &cluster, after(10));
    run(&mut autoscaler, &cloud, &cluster, after(20));
    assert_eq!(calls(&log, "cloud.increase_size").len(), 1);
}

/// docs/provisioning-requests.md PR-111: a request read in the very instant it was made has
/// pods too young for the plan, which then places none of them. That is not "everything fits":
/// the request stays unanswered until a later turn scales up for it.
#[test]
fn an_atomic_request_read_the_instant_it_is_made_waits_rather_than_being_provisioned() {
    let (log, cloud, cluster) = cluster_with_one_empty_node(3000);
    add_request(&cluster, "gang", BEST_EFFORT_ATOMIC_CLASS, 4, &[]);
    let mut autoscaler = Autoscaler::new(enabled(), 1);
    run(&mut autoscaler, &cloud, &cluster, t(0));
    assert!(calls(&log, "cloud.increase_size").is_empty());
    assert_eq!(condition(&cluster, "gang", "Provisioned"), None);

    // The next loop serves ordinary pods (none); the one after serves the request again.
    run(&mut autoscaler, &cloud, &cluster, after(10));
    run(&mut autoscaler, &cloud, &cluster, after(20));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 3"]
    );
    assert_eq!(
        condition(&cluster, "gang", "Provisioned"),
        is(ConditionStatus::True, "CapacityIsProvisioned")
    );
}

/// docs/provisioning-requests.md PR-111.
#[test]
fn a_best_effort_atomic_request_that_cannot_get_all_its_nodes_gets_none() {
    let (log, cloud, cluster) = cluster_with_group_max(3000, 2);
    add_request(&cluster, "gang", BEST_EFFORT_ATOMIC_CLASS, 4, &[]);
    let mut autoscaler = Autoscaler::new(enabled(), 1);
    run(&mut autoscaler, &cloud, &cluster, after(0));
    // Three more nodes are needed and the group has room for one: nothing is asked for.
    assert!(calls(&log, "cloud.increase_size").is_empty());
    assert_eq!(
        condition(&cluster, "gang", "Provisioned"),
        is(ConditionStatus::False, "CapacityIsNotFound")
    );
}

/// docs/provisioning-requests.md PR-112.
#[test]
fn pods_consuming_a_request_do_not_trigger_a_scale_up_of_their_own() {
    let (log, cloud, cluster) = cluster_with_one_empty_node(1500);
    let mut pod = pending_pod("consumer", 8000, t(0));
    pod.annotations.insert(
        CONSUME_PROVISIONING_REQUEST_ANNOTATION.into(),
        "gang".into(),
    );
    cluster.add_pod(pod);
    let mut autoscaler = Autoscaler::new(enabled(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, after(0));
    assert!(calls(&log, "cloud.increase_size").is_empty());
    assert!(
        outcome
            .events
            .iter()
            .any(|e| e.reason == "NotTriggerScaleUp"
                && e.object.to_string() == "pod/default/consumer"
                && e.message.contains("ProvisioningRequest default/gang"))
    );
}

/// docs/provisioning-requests.md PR-101.
#[test]
fn consumer_pods_are_ordinary_pods_when_the_feature_is_off() {
    let (log, cloud, cluster) = cluster_with_one_empty_node(1500);
    let mut pod = pending_pod("consumer", 3000, t(0));
    pod.annotations.insert(
        CONSUME_PROVISIONING_REQUEST_ANNOTATION.into(),
        "gang".into(),
    );
    cluster.add_pod(pod);
    cluster.add_pod(pending_pod("other", 3000, t(0)));
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    run(&mut autoscaler, &cloud, &cluster, after(0));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 1"]
    );
}

/// docs/provisioning-requests.md PR-113.
#[test]
fn loops_alternate_between_ordinary_pods_and_requests() {
    let (log, cloud, cluster) = cluster_with_one_empty_node(3000);
    // n0 is full: the ordinary pod needs a node of its own.
    cluster.add_pod(pod_on("base", "n0", 3500));
    cluster.add_pod(pending_pod("web-1", 3000, t(0)));
    add_request(&cluster, "gang", BEST_EFFORT_ATOMIC_CLASS, 2, &[]);
    let mut autoscaler = Autoscaler::new(enabled(), 1);

    let first = run(&mut autoscaler, &cloud, &cluster, after(0));
    assert_eq!(
        first.scale_up.as_ref().map(|p| p.triggering_pods.clone()),
        Some(vec!["default/web-1".to_string()])
    );
    assert_eq!(
        condition(&cluster, "gang", "Accepted"),
        None,
        "the ordinary pods' turn"
    );
    run(&mut autoscaler, &cloud, &cluster, after(10));
    assert_eq!(
        condition(&cluster, "gang", "Provisioned"),
        is(ConditionStatus::True, "CapacityIsProvisioned")
    );
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 1", "cloud.increase_size pool 2"]
    );
}

/// docs/provisioning-requests.md PR-107.
#[test]
fn batch_processing_checks_up_to_the_batch_size_per_loop() {
    let (_log, cloud, cluster) = cluster_with_one_empty_node(100);
    for name in ["a", "b", "c"] {
        add_request(&cluster, name, CHECK_CAPACITY_CLASS, 1, &[]);
    }
    let mut options = enabled();
    options
        .set("check-capacity-batch-processing", "true")
        .unwrap();
    options
        .set("check-capacity-provisioning-request-max-batch-size", "2")
        .unwrap();
    let mut autoscaler = Autoscaler::new(options, 1);
    run(&mut autoscaler, &cloud, &cluster, after(0));
    let provisioned = |cluster: &FakeCluster| {
        ["a", "b", "c"]
            .into_iter()
            .filter(|n| condition(cluster, n, "Provisioned").is_some())
            .count()
    };
    assert_eq!(provisioned(&cluster), 2);
    run(&mut autoscaler, &cloud, &cluster, after(10));
    assert_eq!(provisioned(&cluster), 3);
}

/// docs/provisioning-requests.md PR-107.
#[test]
fn without_batch_processing_one_request_is_checked_per_loop() {
    let (_log, cloud, cluster) = cluster_with_one_empty_node(100);
    for name in ["a", "b"] {
        add_request(&cluster, name, CHECK_CAPACITY_CLASS, 1, &[]);
    }
    let mut autoscaler = Autoscaler::new(enabled(), 1);
    run(&mut autoscaler, &cloud, &cluster, after(0));
    assert!(condition(&cluster, "a", "Provisioned").is_some());
    assert_eq!(condition(&cluster, "b", "Provisioned"), None);
}

/// docs/provisioning-requests.md PR-102.
#[test]
fn a_processor_instance_handles_only_the_check_capacity_requests_meant_for_it() {
    let (_log, cloud, cluster) = cluster_with_one_empty_node(100);
    add_request(
        &cluster,
        "mine",
        CHECK_CAPACITY_CLASS,
        1,
        &[("processorInstance", "east")],
    );
    add_request(&cluster, "plain", CHECK_CAPACITY_CLASS, 1, &[]);
    add_request(&cluster, "atomic", BEST_EFFORT_ATOMIC_CLASS, 1, &[]);
    let mut options = enabled();
    options
        .set("check-capacity-processor-instance", "east")
        .unwrap();
    let mut autoscaler = Autoscaler::new(options, 1);
    for secs in [0, 10, 20] {
        run(&mut autoscaler, &cloud, &cluster, after(secs));
    }
    assert!(condition(&cluster, "mine", "Provisioned").is_some());
    assert!(status_of(&cluster, "plain").conditions.is_empty());
    assert!(status_of(&cluster, "atomic").conditions.is_empty());
}

/// docs/provisioning-requests.md PR-103.
#[test]
fn a_request_whose_template_is_missing_fails() {
    let (_log, cloud, cluster) = cluster_with_one_empty_node(100);
    cluster.state().capacity.pod_templates.clear();
    add_request(&cluster, "orphan", CHECK_CAPACITY_CLASS, 1, &[]);
    let mut autoscaler = Autoscaler::new(enabled(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, after(0));
    assert_eq!(
        condition(&cluster, "orphan", "Failed"),
        is(ConditionStatus::True, "FailedToCreatePods")
    );
    let update = &outcome.provisioning_requests[0];
    assert!(update.condition.message.contains("podTemplateRef.name"));
}

/// docs/provisioning-requests.md PR-110.
#[test]
fn a_request_never_provisioned_fails_as_expired_after_seven_days() {
    let (_log, cloud, cluster) = cluster_with_one_empty_node(3000);
    add_request(&cluster, "big", CHECK_CAPACITY_CLASS, 2, &[]);
    let mut autoscaler = Autoscaler::new(enabled(), 1);
    run(&mut autoscaler, &cloud, &cluster, after(0));
    run(&mut autoscaler, &cloud, &cluster, t(7 * 24 * 3600 + 1));
    assert_eq!(
        condition(&cluster, "big", "Failed"),
        is(ConditionStatus::True, "Expired")
    );
}

/// docs/provisioning-requests.md PR-114.
#[test]
fn dry_run_writes_no_status_but_reports_the_conditions() {
    let (log, cloud, cluster) = cluster_with_one_empty_node(1500);
    add_request(&cluster, "fits", CHECK_CAPACITY_CLASS, 2, &[]);
    let mut options = enabled();
    options.dry_run = true;
    let mut autoscaler = Autoscaler::new(options, 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, after(0));
    assert_eq!(writes(&log), 0);
    assert!(status_of(&cluster, "fits").conditions.is_empty());
    let reasons: Vec<&str> = outcome
        .provisioning_requests
        .iter()
        .map(|u| u.condition.reason.as_str())
        .collect();
    assert_eq!(reasons, ["Accepted", "CapacityIsFound"]);
}

/// docs/provisioning-requests.md PR-101.
#[test]
fn requests_are_ignored_when_the_feature_is_off() {
    let (log, cloud, cluster) = cluster_with_one_empty_node(1500);
    add_request(&cluster, "fits", CHECK_CAPACITY_CLASS, 2, &[]);
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    run(&mut autoscaler, &cloud, &cluster, after(0));
    assert_eq!(writes(&log), 0);
}
