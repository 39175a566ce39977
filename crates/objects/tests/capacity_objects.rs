//! PodTemplates, ProvisioningRequests, CapacityBuffers and CapacityQuotas, as `kubectl get -o yaml`
//! prints them, in every served version, convert into the model the engine reads; malformed
//! values and over-limit sizes are refused with an error naming the object, field and value.

use ferroscale_model::capacity::{
    ACTIVE_CAPACITY_STRATEGY, BEST_EFFORT_ATOMIC_CLASS, CHECK_CAPACITY_CLASS,
};
use ferroscale_model::{ConditionStatus, LabelOperator, Quantity, ScalableRef};
use ferroscale_objects::{K8sObject, ObjectsError, parse_objects_yaml};

const OBJECTS: &str = r#"apiVersion: v1
kind: PodTemplate
metadata: {name: worker, namespace: batch, uid: t-1, generation: 4}
template:
  metadata: {labels: {app: worker}, annotations: {note: x}}
  spec:
    nodeSelector: {pool: big}
    containers:
    - name: main
      image: busybox
      resources: {requests: {cpu: "2", memory: 1Gi}}
---
apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata: {name: job-a, namespace: batch, uid: pr-1, generation: 1, creationTimestamp: "2026-01-02T03:04:05Z"}
spec:
  provisioningClassName: check-capacity.autoscaling.x-k8s.io
  podSets:
  - podTemplateRef: {name: worker}
    count: 3
  parameters: {BookingExpiration: 10m}
status:
  conditions:
  - type: Accepted
    status: "True"
    reason: Accepted
    message: ""
    lastTransitionTime: "2026-01-02T03:04:06Z"
    observedGeneration: 1
  provisioningClassDetails: {zone: a}
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: ProvisioningRequest
metadata: {name: job-b, namespace: batch}
spec:
  provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io
  podSets: [{podTemplateRef: {name: worker}, count: 1}]
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {name: warm, namespace: web}
spec:
  scalableRef: {apiGroup: apps, kind: Deployment, name: frontend}
  percentage: 20
  replicas: 1
  limits: {cpu: "8"}
status:
  podTemplateRef: {name: warm-template}
  replicas: 2
  podTemplateGeneration: 7
  provisioningStrategy: buffer.x-k8s.io/active-capacity
---
apiVersion: autoscaling.x-k8s.io/v1alpha1
kind: CapacityBuffer
metadata: {name: spare}
spec:
  podTemplateRef: {name: worker}
  replicas: 2
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityQuota
metadata: {name: team-a}
spec:
  selector:
    matchLabels: {team: a}
    matchExpressions: [{key: tier, operator: NotIn, values: [spot]}]
  limits:
    resources: {cpu: "64", memory: 256Gi, nodes: 10, example.com/gpu: 4}
---
apiVersion: autoscaling.x-k8s.io/v1alpha1
kind: CapacityQuota
metadata: {name: everything}
spec:
  limits: {resources: {nodes: "100"}}
"#;

#[test]
fn every_kind_and_served_version_converts() {
    let parsed = parse_objects_yaml(OBJECTS, "objects.yaml").unwrap();
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let [
        K8sObject::PodTemplate(template),
        K8sObject::ProvisioningRequest(check),
        K8sObject::ProvisioningRequest(atomic),
        K8sObject::CapacityBuffer(warm),
        K8sObject::CapacityBuffer(spare),
        K8sObject::CapacityQuota(team),
        K8sObject::CapacityQuota(everything),
    ] = parsed.objects.as_slice()
    else {
        panic!("unexpected objects {:?}", parsed.objects);
    };

    assert_eq!(
        (
            template.namespace.as_str(),
            template.name.as_str(),
            template.generation
        ),
        ("batch", "worker", 4)
    );
    assert_eq!(template.pod.name, "worker");
    assert_eq!(template.pod.namespace, "batch");
    assert_eq!(
        template.pod.labels.get("app").map(String::as_str),
        Some("worker")
    );
    assert_eq!(
        template.pod.node_selector.get("pool").map(String::as_str),
        Some("big")
    );
    assert_eq!(template.pod.requests.get("cpu"), 2000);

    assert_eq!(check.key(), "batch/job-a");
    assert_eq!(check.class, CHECK_CAPACITY_CLASS);
    assert_eq!(check.pod_sets.len(), 1);
    assert_eq!(
        (
            check.pod_sets[0].pod_template.as_str(),
            check.pod_sets[0].count
        ),
        ("worker", 3)
    );
    assert_eq!(
        check
            .parameters
            .get("BookingExpiration")
            .map(String::as_str),
        Some("10m")
    );
    let accepted = check.condition("Accepted").unwrap();
    assert_eq!(accepted.status, ConditionStatus::True);
    assert_eq!(accepted.observed_generation, 1);
    assert_eq!(
        accepted.last_transition.secs() - check.creation_time.secs(),
        1
    );
    assert_eq!(
        check.status.details.get("zone").map(String::as_str),
        Some("a")
    );
    // v1beta1 reads into the same model.
    assert_eq!(atomic.class, BEST_EFFORT_ATOMIC_CLASS);
    assert_eq!(atomic.pod_sets[0].count, 1);
    assert!(atomic.status.conditions.is_empty());

    assert_eq!(
        warm.spec.scalable_ref,
        Some(ScalableRef {
            api_group: "apps".into(),
            kind: "Deployment".into(),
            name: "frontend".into()
        })
    );
    assert_eq!(
        (warm.spec.percentage, warm.spec.replicas),
        (Some(20), Some(1))
    );
    assert_eq!(
        warm.spec
            .limits
            .as_ref()
            .and_then(|l| l.get("cpu"))
            .copied(),
        Some(Quantity::parse("8").unwrap())
    );
    assert_eq!(
        warm.status.pod_template_ref.as_deref(),
        Some("warm-template")
    );
    assert_eq!(
        (warm.status.replicas, warm.status.pod_template_generation),
        (Some(2), Some(7))
    );
    assert_eq!(
        warm.status.provisioning_strategy.as_deref(),
        Some(ACTIVE_CAPACITY_STRATEGY)
    );
    // v1alpha1, without a namespace: `default`.
    assert_eq!(spare.key(), "default/spare");
    assert_eq!(spare.spec.pod_template_ref.as_deref(), Some("worker"));

    let selector = team.selector.as_ref().unwrap();
    assert_eq!(
        selector.match_labels.get("team").map(String::as_str),
        Some("a")
    );
    assert_eq!(selector.match_expressions[0].operator, LabelOperator::NotIn);
    assert_eq!(team.limits.len(), 4);
    assert_eq!(team.limits["memory"], Quantity::parse("256Gi").unwrap());
    assert_eq!(team.limits["nodes"], Quantity::from_units(10));
    assert!(everything.selector.is_none());
    assert_eq!(everything.limits["nodes"], Quantity::from_units(100));
}

fn error_of(yaml: &str) -> ObjectsError {
    parse_objects_yaml(yaml, "bad.yaml").expect_err("the object must be refused")
}

/// The object's error message contains its identity, the field and the value.
fn assert_names(e: &ObjectsError, object: &str, field: &str, value: &str) {
    let text = e.to_string();
    for needle in [object, field, value] {
        assert!(text.contains(needle), "{text:?} does not name {needle:?}");
    }
}

fn request(spec: &str) -> String {
    format!(
        "apiVersion: autoscaling.x-k8s.io/v1\nkind: ProvisioningRequest\nmetadata: {{name: r, namespace: ns}}\nspec:\n{spec}"
    )
}

#[test]
fn malformed_provisioning_requests_are_refused_naming_object_field_and_value() {
    let e = error_of(&request(
        "  provisioningClassName: c\n  podSets: [{podTemplateRef: {name: t}, count: 0}]\n",
    ));
    assert_names(&e, "ProvisioningRequest ns/r", "spec.podSets[0].count", "0");

    let e = error_of(&request("  provisioningClassName: c\n  podSets: []\n"));
    assert_names(&e, "ProvisioningRequest ns/r", "spec.podSets", "[]");

    let sets: String = (0..33)
        .map(|_| "  - {podTemplateRef: {name: t}, count: 1}\n")
        .collect();
    let e = error_of(&request(&format!(
        "  provisioningClassName: c\n  podSets:\n{sets}"
    )));
    assert_names(&e, "ProvisioningRequest ns/r", "spec.podSets", "33");

    let long = "x".repeat(256);
    let e = error_of(&request(&format!(
        "  provisioningClassName: c\n  podSets: [{{podTemplateRef: {{name: t}}, count: 1}}]\n  parameters: {{p: {long}}}\n"
    )));
    assert_names(&e, "ProvisioningRequest ns/r", "spec.parameters.p", &long);

    let e = error_of(&request(
        "  provisioningClassName: c\n  podSets: [{podTemplateRef: {name: t}, count: 1}]\nstatus:\n  conditions: [{type: Accepted, status: Maybe, reason: R, message: m, lastTransitionTime: \"2026-01-01T00:00:00Z\"}]\n",
    ));
    assert_names(
        &e,
        "ProvisioningRequest ns/r",
        "status.conditions[0].status",
        "Maybe",
    );

    // A field the kind does not have is refused, as kubectl --validate=strict does.
    let e = error_of(&request(
        "  provisioningClassName: c\n  podSetz: []\n  podSets: [{podTemplateRef: {name: t}, count: 1}]\n",
    ));
    assert!(e.to_string().contains("podSetz"), "{e}");

    let e = error_of(
        "apiVersion: autoscaling.x-k8s.io/v2\nkind: ProvisioningRequest\nmetadata: {name: r}\nspec: {provisioningClassName: c, podSets: []}\n",
    );
    assert_names(&e, "", "apiVersion", "autoscaling.x-k8s.io/v2");
}

fn buffer(spec: &str) -> String {
    format!(
        "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {{name: b, namespace: ns}}\nspec:\n{spec}"
    )
}

#[test]
fn malformed_capacity_buffers_are_refused_naming_object_field_and_value() {
    let e = error_of(&buffer(
        "  podTemplateRef: {name: t}\n  scalableRef: {kind: Deployment, name: d}\n  replicas: 1\n",
    ));
    assert_names(
        &e,
        "CapacityBuffer ns/b",
        "spec.scalableRef",
        "Deployment/d",
    );

    let e = error_of(&buffer("  podTemplateRef: {name: t}\n  replicas: -1\n"));
    assert_names(&e, "CapacityBuffer ns/b", "spec.replicas", "-1");

    let e = error_of(&buffer(
        "  scalableRef: {kind: Deployment, name: d}\n  percentage: -5\n",
    ));
    assert_names(&e, "CapacityBuffer ns/b", "spec.percentage", "-5");

    let e = error_of(&buffer(
        "  podTemplateRef: {name: t}\n  limits: {cpu: -2}\n",
    ));
    assert_names(&e, "CapacityBuffer ns/b", "spec.limits.cpu", "-2");

    let e = error_of(&buffer(
        "  podTemplateRef: {name: t}\n  limits: {memory: lots}\n",
    ));
    assert_names(&e, "CapacityBuffer ns/b", "spec.limits.memory", "lots");

    let e = error_of(&buffer("  scalableRef: {kind: \"\", name: d}\n"));
    assert_names(&e, "CapacityBuffer ns/b", "spec.scalableRef.kind", "");
}

fn quota(limits: &str) -> String {
    format!(
        "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityQuota\nmetadata: {{name: q}}\nspec:\n  limits:\n    resources: {limits}\n"
    )
}

#[test]
fn malformed_capacity_quotas_are_refused_naming_object_field_and_value() {
    for (limits, field, value) in [
        ("{cpu: 500m}", "spec.limits.resources.cpu", "500m"),
        ("{cpu: 1000m}", "spec.limits.resources.cpu", "1000m"),
        ("{memory: 3.67Gi}", "spec.limits.resources.memory", "3.67Gi"),
        ("{nodes: -1}", "spec.limits.resources.nodes", "-1"),
        ("{nodes: many}", "spec.limits.resources.nodes", "many"),
    ] {
        let e = error_of(&quota(limits));
        assert_names(&e, "CapacityQuota q", field, value);
    }
    let long = "r".repeat(64);
    let e = error_of(&quota(&format!("{{{long}: 1}}")));
    assert_names(&e, "CapacityQuota q", "spec.limits.resources", &long);

    let many: Vec<String> = (0..21).map(|i| format!("r{i}: 1")).collect();
    let e = error_of(&quota(&format!("{{{}}}", many.join(", "))));
    assert_names(&e, "CapacityQuota q", "spec.limits.resources", "21");

    let e = error_of(
        "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityQuota\nmetadata: {name: q}\nspec:\n  selector: {matchExpressions: [{key: a, operator: Near}]}\n  limits: {resources: {nodes: 1}}\n",
    );
    assert_names(
        &e,
        "CapacityQuota q",
        "spec.selector.matchExpressions[0].operator",
        "Near",
    );
}

#[test]
fn a_pod_template_with_a_bad_request_names_the_field_under_template() {
    let e = error_of(
        "apiVersion: v1\nkind: PodTemplate\nmetadata: {name: t, namespace: ns}\ntemplate:\n  spec:\n    containers: [{name: c, resources: {requests: {cpu: -1}}}]\n",
    );
    assert_names(&e, "PodTemplate ns/t", "template.spec.containers[0]", "-1");
}

#[test]
fn statuses_written_back_read_the_same() {
    use ferroscale_objects::{
        capacity_buffer_status_to_k8s, provisioning_request_from_k8s,
        provisioning_request_status_to_k8s,
    };
    let parsed = parse_objects_yaml(OBJECTS, "objects.yaml").unwrap();
    let K8sObject::ProvisioningRequest(check) = &parsed.objects[1] else {
        panic!()
    };
    // Round trip: the model status as the API status, read back.
    let raw: ferroscale_objects::ferroscale_capacity_apis::provisioning_request::v1::ProvisioningRequest =
        serde_yaml_ng::from_str(OBJECTS.split("---\n").nth(1).unwrap()).unwrap();
    let mut written = raw.clone();
    written.status = Some(provisioning_request_status_to_k8s(&check.status));
    assert_eq!(
        provisioning_request_from_k8s(&written).unwrap().status,
        check.status
    );

    let K8sObject::CapacityBuffer(warm) = &parsed.objects[3] else {
        panic!()
    };
    let api = capacity_buffer_status_to_k8s(&warm.status);
    assert_eq!(
        api.pod_template_ref.map(|r| r.name).as_deref(),
        Some("warm-template")
    );
    assert_eq!(
        (api.replicas, api.pod_template_generation),
        (Some(2), Some(7))
    );
}
