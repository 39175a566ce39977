use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::{
    BEST_EFFORT_ATOMIC_CLASS, CHECK_CAPACITY_CLASS, CONSUME_PROVISIONING_REQUEST_ANNOTATION,
    CapacityObjects, ConditionStatus, Pod, PodSet, PodTemplate, ProvisioningRequest,
    ProvisioningRequestStatus, Timestamp,
};

use super::*;

fn request(class: &str, parameters: &[(&str, &str)]) -> ProvisioningRequest {
    ProvisioningRequest {
        namespace: "batch".into(),
        name: "job".into(),
        uid: "uid-job".into(),
        generation: 3,
        creation_time: Timestamp::from_secs(1_000),
        deleting: false,
        class: class.into(),
        pod_sets: vec![PodSet {
            pod_template: "worker".into(),
            count: 2,
        }],
        parameters: parameters
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        status: ProvisioningRequestStatus::default(),
    }
}

fn templates() -> CapacityObjects {
    CapacityObjects {
        pod_templates: vec![Arc::new(PodTemplate {
            namespace: "batch".into(),
            name: "worker".into(),
            uid: "uid-t".into(),
            generation: 1,
            pod: Arc::new(Pod::new("batch", "worker")),
        })],
        ..CapacityObjects::default()
    }
}

/// docs/provisioning-requests.md PR-102.
#[test]
fn classes_handled_follow_the_processor_instance_rule() {
    let check = request(CHECK_CAPACITY_CLASS, &[]);
    let atomic = request(BEST_EFFORT_ATOMIC_CLASS, &[]);
    let for_a = request(CHECK_CAPACITY_CLASS, &[(PROCESSOR_INSTANCE_PARAMETER, "a")]);
    let prefixed = request(&format!("a{CHECK_CAPACITY_CLASS}"), &[]);
    let other = request("queued-provisioning.gke.io", &[]);
    // No instance: plain requests of both classes, never one meant for an instance.
    assert_eq!(handled_class(&check, ""), Some(RequestClass::CheckCapacity));
    assert_eq!(
        handled_class(&atomic, ""),
        Some(RequestClass::BestEffortAtomic)
    );
    assert_eq!(handled_class(&for_a, ""), None);
    assert_eq!(handled_class(&other, ""), None);
    // Instance "a": its own check-capacity requests (by parameter or by class prefix) only.
    assert_eq!(
        handled_class(&for_a, "a"),
        Some(RequestClass::CheckCapacity)
    );
    assert_eq!(
        handled_class(&prefixed, "a"),
        Some(RequestClass::CheckCapacity)
    );
    assert_eq!(handled_class(&for_a, "b"), None);
    assert_eq!(handled_class(&check, "a"), None);
    assert_eq!(handled_class(&atomic, "a"), None);
}

/// docs/provisioning-requests.md PR-103.
#[test]
fn a_request_stands_for_count_pods_of_its_template_that_consume_it() {
    let pods = pods_for_request(&request(CHECK_CAPACITY_CLASS, &[]), &templates()).unwrap();
    let names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["job-0-0", "job-0-1"]);
    for pod in &pods {
        assert_eq!(pod.namespace, "batch");
        assert_eq!(consumed_request(pod), Some("job"));
        assert_eq!(
            pod.annotations
                .get(CONSUME_PROVISIONING_REQUEST_ANNOTATION)
                .map(String::as_str),
            Some("job")
        );
        assert!(pod.is_marked_unschedulable());
        assert_eq!(
            pod.controller().map(|o| o.kind.as_str()),
            Some("ProvisioningRequest")
        );
    }
}

/// docs/provisioning-requests.md PR-103.
#[test]
fn a_missing_template_or_too_many_pods_is_an_error_naming_the_field() {
    let missing = pods_for_request(
        &request(CHECK_CAPACITY_CLASS, &[]),
        &CapacityObjects::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(missing.contains("batch/job") && missing.contains("podSets[0].podTemplateRef.name"));
    assert!(missing.contains("\"worker\""));
    let mut huge = request(CHECK_CAPACITY_CLASS, &[]);
    huge.pod_sets[0].count = u32::MAX;
    let error = pods_for_request(&huge, &templates()).unwrap_err();
    assert!(matches!(error, RequestPodsError::TooManyPods { .. }));
}

/// docs/provisioning-requests.md PR-112.
#[test]
fn the_deprecated_consume_annotation_is_honoured() {
    let mut pod = Pod::new("batch", "p");
    pod.annotations
        .insert(DEPRECATED_CONSUME_ANNOTATION.into(), "old".into());
    assert_eq!(consumed_request(&pod), Some("old"));
}

/// docs/provisioning-requests.md PR-109, PR-110.
#[test]
fn booking_expires_ten_minutes_after_provisioned_and_waiting_fails_after_seven_days() {
    let pr = request(CHECK_CAPACITY_CLASS, &[]);
    let provisioned_at = Timestamp::from_secs(2_000);
    let mut status = ProvisioningRequestStatus::default();
    set_condition(
        &mut status,
        RequestCondition::CAPACITY_FOUND,
        3,
        provisioned_at,
    );
    assert!(is_booked(&status));
    assert_eq!(expiry(&pr, &status, provisioned_at + BOOKING_TIME), None);
    assert_eq!(
        expiry(
            &pr,
            &status,
            provisioned_at + BOOKING_TIME + Duration::from_secs(1)
        ),
        Some(RequestCondition::BOOKING_TIME_EXPIRED)
    );
    let waiting = ProvisioningRequestStatus::default();
    assert_eq!(expiry(&pr, &waiting, pr.creation_time + EXPIRY_TIME), None);
    assert_eq!(
        expiry(
            &pr,
            &waiting,
            pr.creation_time + EXPIRY_TIME + Duration::from_secs(1)
        ),
        Some(RequestCondition::EXPIRED)
    );
    // An ended booking is not expired again.
    set_condition(
        &mut status,
        RequestCondition::BOOKING_TIME_EXPIRED,
        3,
        provisioned_at,
    );
    assert!(!is_booked(&status));
    assert_eq!(expiry(&pr, &status, provisioned_at + EXPIRY_TIME * 2), None);
}

/// docs/provisioning-requests.md PR-114.
#[test]
fn set_condition_replaces_the_condition_of_the_same_type() {
    let mut status = ProvisioningRequestStatus::default();
    let t = Timestamp::from_secs(10);
    set_condition(&mut status, RequestCondition::ACCEPTED, 3, t);
    set_condition(&mut status, RequestCondition::CAPACITY_NOT_FOUND, 3, t);
    set_condition(
        &mut status,
        RequestCondition::CAPACITY_FOUND,
        4,
        t + Duration::from_secs(5),
    );
    assert_eq!(status.conditions.len(), 2);
    let provisioned = &status.conditions[1];
    assert_eq!(provisioned.status, ConditionStatus::True);
    assert_eq!(provisioned.reason, reasons::CAPACITY_IS_FOUND);
    assert_eq!(provisioned.observed_generation, 4);
}

/// docs/provisioning-requests.md PR-105.
#[test]
fn no_retry_fails_a_check_capacity_request_at_once() {
    let retried = not_found_condition(&request(CHECK_CAPACITY_CLASS, &[]));
    assert_eq!(
        (retried.type_, retried.status),
        ("Provisioned", ConditionStatus::False)
    );
    let failed = not_found_condition(&request(
        CHECK_CAPACITY_CLASS,
        &[(NO_RETRY_PARAMETER, "true")],
    ));
    assert_eq!(
        (failed.type_, failed.status),
        ("Failed", ConditionStatus::True)
    );
}

/// docs/provisioning-requests.md PR-106.
#[test]
fn backoff_doubles_up_to_the_maximum_and_forgets_the_least_recently_used() {
    let mut backoff = RequestBackoff::new(Duration::from_secs(60), Duration::from_secs(150), 1);
    let pr = request(CHECK_CAPACITY_CLASS, &[]);
    let not_found_at = Timestamp::from_secs(5_000);
    let mut status = ProvisioningRequestStatus::default();
    assert!(backoff.available(&pr, &status, not_found_at), "never tried");
    set_condition(
        &mut status,
        RequestCondition::CAPACITY_NOT_FOUND,
        3,
        not_found_at,
    );
    let at = |secs| not_found_at + Duration::from_secs(secs);
    assert!(!backoff.due(&pr, &status, at(60)));
    assert!(!backoff.available(&pr, &status, at(60)));
    assert!(backoff.available(&pr, &status, at(61)));
    assert_eq!(backoff.wait_of("uid-job"), Some(Duration::from_secs(120)));
    assert!(!backoff.available(&pr, &status, at(120)));
    assert!(backoff.available(&pr, &status, at(121)));
    assert_eq!(
        backoff.wait_of("uid-job"),
        Some(Duration::from_secs(150)),
        "capped"
    );
    // A second request pushes the first out of a cache of one: it starts over.
    let mut other = request(CHECK_CAPACITY_CLASS, &[]);
    other.uid = "uid-other".into();
    assert!(backoff.available(&other, &status, at(61)));
    assert_eq!(backoff.wait_of("uid-job"), None);
    // A provisioned request is not tried again.
    set_condition(&mut status, RequestCondition::CAPACITY_FOUND, 3, at(200));
    assert!(!backoff.available(&pr, &status, at(10_000)));
}
