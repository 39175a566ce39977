use std::collections::BTreeMap;

use ferroscale_model::capacity::ScalableRef;
use ferroscale_model::{Node, Quantity, Resources};

use super::*;

fn pod(cpu_milli: i64, memory: i64) -> Pod {
    let mut pod = Pod::new("team", "shape");
    pod.requests = Resources::new(cpu_milli, memory);
    pod
}

fn spec(
    replicas: Option<i32>,
    percentage: Option<i32>,
    limits: &[(&str, &str)],
) -> CapacityBufferSpec {
    CapacityBufferSpec {
        replicas,
        percentage,
        limits: (!limits.is_empty()).then(|| {
            limits
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
                .collect::<BTreeMap<_, _>>()
        }),
        ..CapacityBufferSpec::default()
    }
}

fn buffer(name: &str, spec: CapacityBufferSpec) -> CapacityBuffer {
    CapacityBuffer {
        namespace: "team".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        generation: 1,
        creation_time: Timestamp::from_secs(10),
        spec,
        status: CapacityBufferStatus::default(),
    }
}

fn template(name: &str, generation: i64, shape: Pod) -> Arc<PodTemplate> {
    Arc::new(PodTemplate {
        namespace: "team".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        generation,
        pod: Arc::new(shape),
    })
}

fn ready_buffer(
    name: &str,
    template_name: &str,
    generation: i64,
    replicas: i32,
) -> Arc<CapacityBuffer> {
    let mut b = buffer(name, spec(Some(replicas), None, &[]));
    b.spec.pod_template_ref = Some(template_name.into());
    let shape = pod(500, 0);
    b.status = resolve_status(
        &b,
        Resolved::Template {
            name: template_name,
            generation,
            pod: &shape,
            scalable_replicas: None,
        },
        Timestamp::from_secs(20),
    );
    Arc::new(b)
}

/// docs/capacity-buffers.md CB-103: replicas and percentage (rounded up), the larger of both,
/// capped by limits; limits alone size the buffer; nothing set, or a percentage with nothing to
/// apply it to, is an error.
#[test]
fn replicas_percentage_and_limits_combine_as_upstream() {
    let shape = pod(1000, 0);
    let n = |s: CapacityBufferSpec, of: Option<i32>| buffer_replicas(&s, &shape, of);
    assert_eq!(n(spec(Some(5), None, &[]), None), Ok(5));
    assert_eq!(n(spec(None, Some(200), &[]), Some(10)), Ok(20));
    assert_eq!(n(spec(None, Some(33), &[]), Some(10)), Ok(4));
    assert_eq!(n(spec(None, Some(1), &[]), Some(3)), Ok(1));
    assert_eq!(n(spec(None, Some(50), &[]), Some(0)), Ok(0));
    assert_eq!(n(spec(Some(25), Some(200), &[]), Some(10)), Ok(25));
    assert_eq!(n(spec(Some(15), Some(200), &[]), Some(10)), Ok(20));
    assert_eq!(n(spec(Some(25), None, &[("cpu", "20")]), None), Ok(20));
    assert_eq!(n(spec(Some(15), None, &[("cpu", "20")]), None), Ok(15));
    assert_eq!(n(spec(None, Some(250), &[("cpu", "20")]), Some(10)), Ok(20));
    assert_eq!(n(spec(None, None, &[("cpu", "20")]), None), Ok(20));
    assert_eq!(n(spec(Some(-3), None, &[]), None), Ok(0));
    assert!(n(spec(None, None, &[]), None).is_err());
    assert!(n(spec(None, Some(200), &[]), None).is_err());
    // Limits naming nothing the pod requests cannot size it.
    assert!(n(spec(None, None, &[("nvidia.com/gpu", "4")]), None).is_err());
}

/// docs/capacity-buffers.md CB-103: the smallest fit over the limited resources wins.
#[test]
fn limits_take_the_tightest_resource() {
    let shape = pod(100, 200 << 20);
    let s = spec(None, None, &[("cpu", "2"), ("memory", "2000Mi")]);
    assert_eq!(buffer_replicas(&s, &shape, None), Ok(10));
}

#[test]
fn managed_template_names_stay_valid_object_names() {
    assert_eq!(
        managed_pod_template_name("web"),
        "capacitybuffer-web-pod-template"
    );
    let long = "b".repeat(300);
    let name = managed_pod_template_name(&long);
    assert_eq!(name.len(), 253);
    assert!(name.starts_with("capacitybuffer-bbb") && name.ends_with("b-pod-template"));
}

#[test]
fn set_condition_keeps_the_transition_time_while_the_status_holds() {
    let t = Timestamp::from_secs;
    let mut conditions = Vec::new();
    assert!(set_condition(
        &mut conditions,
        condition("A", ConditionStatus::True, "r", "m", t(1))
    ));
    assert!(!set_condition(
        &mut conditions,
        condition("A", ConditionStatus::True, "r", "m", t(2))
    ));
    assert_eq!(conditions[0].last_transition, t(1));
    assert!(set_condition(
        &mut conditions,
        condition("A", ConditionStatus::True, "r2", "m", t(3))
    ));
    assert_eq!(conditions[0].last_transition, t(1));
    assert!(set_condition(
        &mut conditions,
        condition("A", ConditionStatus::False, "r2", "m", t(4))
    ));
    assert_eq!(conditions[0].last_transition, t(4));
    assert_eq!(conditions.len(), 1);
}

/// docs/capacity-buffers.md CB-102, CB-104: a resolved buffer is ready with its template,
/// generation, replicas and the default strategy; a missing template is an error with nothing
/// else set; a buffer that cannot be sized keeps its template but no replicas.
#[test]
fn statuses_say_what_to_provision_or_why_not() {
    let now = Timestamp::from_secs(30);
    let shape = pod(500, 0);
    let ready = ready_buffer("ok", "tpl", 3, 2);
    assert_eq!(ready.status.pod_template_ref.as_deref(), Some("tpl"));
    assert_eq!(ready.status.pod_template_generation, Some(3));
    assert_eq!(ready.status.replicas, Some(2));
    assert_eq!(
        ready.status.provisioning_strategy.as_deref(),
        Some(ACTIVE_CAPACITY_STRATEGY)
    );
    let c = find_condition(&ready.status.conditions, READY_FOR_PROVISIONING).unwrap();
    assert!(c.is_true());
    assert_eq!(
        (c.reason.as_str(), c.message.as_str()),
        ("AttributesSetSuccessfully", "ready")
    );

    let failed = resolve_status(
        &ready,
        Resolved::Failed("podtemplate \"x\" not found".into()),
        now,
    );
    assert_eq!(
        (failed.pod_template_ref.clone(), failed.replicas),
        (None, None)
    );
    let c = find_condition(&failed.conditions, READY_FOR_PROVISIONING).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str()),
        (ConditionStatus::False, "error")
    );
    assert_eq!(c.message, "podtemplate \"x\" not found");
    assert_eq!(c.last_transition, now);

    let no_size = buffer("none", spec(None, None, &[]));
    let status = resolve_status(
        &no_size,
        Resolved::Template {
            name: "tpl",
            generation: 1,
            pod: &shape,
            scalable_replicas: None,
        },
        now,
    );
    assert_eq!(status.pod_template_ref.as_deref(), Some("tpl"));
    assert_eq!(status.replicas, None);
    let c = find_condition(&status.conditions, READY_FOR_PROVISIONING).unwrap();
    assert_eq!(
        c.message,
        "couldn't get number of replicas for buffer: replicas, percentage and limits are not defined"
    );
}

#[test]
fn sources_resolve_templates_and_scalables_or_say_why_not() {
    let mut capacity = CapacityObjects::default();
    capacity.pod_templates.push(template("tpl", 1, pod(100, 0)));
    let reference = ScalableRef {
        api_group: "apps".into(),
        kind: "Deployment".into(),
        name: "web".into(),
    };
    capacity.scalables.push(Arc::new(ScalableObject {
        namespace: "team".into(),
        reference: reference.clone(),
        replicas: 4,
        ready_replicas: None,
        pod: None,
        error: Some("deployments.apps \"web\" not found".into()),
    }));
    let mut by_template = buffer("a", spec(Some(1), None, &[]));
    by_template.spec.pod_template_ref = Some("tpl".into());
    assert!(matches!(
        buffer_source(&by_template, &capacity),
        Some(BufferSource::PodTemplate(_))
    ));
    by_template.spec.pod_template_ref = Some("gone".into());
    assert!(
        matches!(buffer_source(&by_template, &capacity), Some(BufferSource::Unresolved(m)) if m == "podtemplate \"gone\" not found")
    );
    let mut by_scalable = buffer("b", spec(Some(1), None, &[]));
    by_scalable.spec.scalable_ref = Some(reference);
    assert!(
        matches!(buffer_source(&by_scalable, &capacity), Some(BufferSource::Unresolved(m)) if m.contains("apps/Deployment web") && m.contains("not found"))
    );
    assert!(buffer_source(&buffer("c", spec(Some(1), None, &[])), &capacity).is_none());
}

/// docs/capacity-buffers.md CB-108, CB-109: a ready buffer gives `replicas` virtual pods copied
/// from its template, named after it, owned by it, pending, unschedulable, safe to evict and
/// marked; its Provisioning condition becomes True once.
#[test]
fn ready_buffers_give_their_virtual_pods() {
    let now = Timestamp::from_secs(40);
    let mut capacity = CapacityObjects::default();
    capacity
        .pod_templates
        .push(template("tpl", 3, pod(500, 1 << 30)));
    capacity.buffers.push(ready_buffer("spare", "tpl", 3, 2));
    let injection = inject(&capacity, now);
    let names: Vec<&str> = injection.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["capacity-buffer-spare-1", "capacity-buffer-spare-2"]
    );
    let first = &injection.pods[0];
    assert!(is_buffer_pod(first) && first.is_marked_unschedulable() && !first.is_bound());
    assert_eq!(first.uid, "uid-spare-1");
    assert_eq!(first.requests.cpu_milli, 500);
    assert_eq!(
        first.annotations.get(SAFE_TO_EVICT).map(String::as_str),
        Some("true")
    );
    let owner = first.controller().unwrap();
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("CapacityBuffer", "uid-spare")
    );
    assert_eq!(injection.status_updates.len(), 1);
    let c = find_condition(&injection.status_updates[0].1.conditions, PROVISIONING).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str()),
        (ConditionStatus::True, "FakePodsInjected")
    );
    assert_eq!(injection.processed.len(), 1);

    // Read back: the same pods, no further write.
    capacity.buffers[0] = injection.processed[0].clone();
    let again = inject(&capacity, now);
    assert_eq!(again.pods.len(), 2);
    assert!(again.status_updates.is_empty());
}

/// docs/capacity-buffers.md CB-110: no pods for an empty buffer, a status older than its
/// template, a buffer that is not ready, or another strategy; the first two say why.
#[test]
fn buffers_that_cannot_be_provisioned_give_no_pods() {
    let now = Timestamp::from_secs(40);
    let mut capacity = CapacityObjects::default();
    capacity.pod_templates.push(template("tpl", 3, pod(500, 0)));
    capacity.buffers.push(ready_buffer("empty", "tpl", 3, 0));
    capacity.buffers.push(ready_buffer("stale", "tpl", 2, 4));
    let mut missing = (*ready_buffer("missing", "gone", 1, 1)).clone();
    missing.status.pod_template_generation = None;
    capacity.buffers.push(Arc::new(missing));
    let mut other = (*ready_buffer("other", "tpl", 3, 1)).clone();
    other.status.provisioning_strategy = Some("example.com/other".into());
    capacity.buffers.push(Arc::new(other));
    let mut broken = (*ready_buffer("broken", "tpl", 3, 1)).clone();
    broken.status = resolve_status(&broken, Resolved::Failed("bad".into()), now);
    capacity.buffers.push(Arc::new(broken));

    let injection = inject(&capacity, now);
    assert!(injection.pods.is_empty());
    let reason = |name: &str| {
        injection
            .status_updates
            .iter()
            .find(|(b, _)| b.name == name)
            .and_then(|(_, s)| find_condition(&s.conditions, PROVISIONING))
            .map(|c| c.reason.clone())
    };
    assert_eq!(reason("empty").as_deref(), Some("BufferIsEmpty"));
    assert_eq!(reason("missing").as_deref(), Some("FailedToGetPodTemplate"));
    assert_eq!(reason("stale"), None);
    assert_eq!(reason("broken"), None);
    let processed: Vec<&str> = injection
        .processed
        .iter()
        .map(|b| b.name.as_str())
        .collect();
    assert_eq!(processed, ["empty", "stale", "missing", "broken"]);
}

/// docs/capacity-buffers.md CB-112: only virtual pods on existing nodes are ready; a buffer
/// with none reports zero, and an unchanged count is not written again.
#[test]
fn ready_replicas_count_virtual_pods_on_existing_nodes() {
    let mut capacity = CapacityObjects::default();
    capacity.pod_templates.push(template("tpl", 1, pod(500, 0)));
    capacity.buffers.push(ready_buffer("a", "tpl", 1, 3));
    capacity.buffers.push(ready_buffer("b", "tpl", 1, 1));
    let injection = inject(&capacity, Timestamp::from_secs(1));
    let mut snapshot = Snapshot::new();
    let real = snapshot.add_node(Arc::new(Node::new("real", Resources::new(4000, 1 << 34))));
    let mut upcoming = Node::new("g-upcoming-0", Resources::new(4000, 1 << 34));
    upcoming.annotations.insert(
        ferroscale_model::node::UPCOMING_NODE_ANNOTATION.to_string(),
        "true".to_string(),
    );
    let upcoming = snapshot.add_node(Arc::new(upcoming));
    snapshot.add_pod(real, injection.pods[0].clone());
    snapshot.add_pod(real, injection.pods[1].clone());
    snapshot.add_pod(upcoming, injection.pods[2].clone());
    snapshot.add_pod(upcoming, injection.pods[3].clone());
    let updates = ready_replicas(&snapshot, &injection.processed);
    let by_name: BTreeMap<&str, Option<i32>> = updates
        .iter()
        .map(|(b, s)| (b.name.as_str(), s.ready_replicas))
        .collect();
    assert_eq!(by_name, BTreeMap::from([("a", Some(2)), ("b", Some(0))]));
    let mut settled = (*injection.processed[1]).clone();
    settled.status.ready_replicas = Some(0);
    assert!(ready_replicas(&snapshot, &[Arc::new(settled)]).is_empty());
}
