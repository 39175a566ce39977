//! CapacityBuffers (docs/capacity-buffers.md): headroom kept warm by virtual pods.
//!
//! Two pure halves, each driven by an async step of the loop (`ferroscale_core::autoscaler`):
//! - the controller ([`resolve_status`]): a buffer's pod shape (its PodTemplate, or the managed
//!   template made from its scalable object) and replica count (replicas, percentage of the
//!   scalable's replicas, limits) become its status and its `ReadyForProvisioning` condition;
//! - injection ([`inject`]): every ready buffer of the active-capacity strategy contributes
//!   `status.replicas` virtual pods, which join scale-up's pending pods and set the
//!   `Provisioning` condition; afterwards [`ready_replicas`] counts the ones that fit existing
//!   nodes for `status.readyReplicas`.
//!
//! The virtual pods are marked safe to evict: scale-down may move them like any replicated pod,
//! so a node holding buffer capacity goes only when that capacity fits elsewhere.

use std::collections::HashMap;
use std::sync::Arc;

use ferroscale_model::capacity::{
    ACTIVE_CAPACITY_STRATEGY, ApiCondition, CapacityBuffer, CapacityBufferSpec,
    CapacityBufferStatus, CapacityObjects, PodTemplate, ScalableObject, find_condition,
};
use ferroscale_model::pod::SAFE_TO_EVICT;
use ferroscale_model::{
    ConditionStatus, OwnerRef, Pod, PodCondition, PodPhase, Timestamp, format_compact,
};
use ferroscale_scheduling::Snapshot;

use ferroscale_model::node::is_upcoming_node;

/// Condition set by the controller: the buffer's status says what to provision.
pub const READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
/// Condition set by injection: the buffer's virtual pods were (or could not be) injected.
pub const PROVISIONING: &str = "Provisioning";

/// Reasons of the two conditions (upstream's values).
pub mod reasons {
    pub const ATTRIBUTES_SET_SUCCESSFULLY: &str = "AttributesSetSuccessfully";
    pub const ERROR: &str = "error";
    pub const NOT_READY_FOR_PROVISIONING: &str = "NotReadyForProvisioning";
    pub const BUFFER_IS_EMPTY: &str = "BufferIsEmpty";
    pub const FAILED_TO_GET_POD_TEMPLATE: &str = "FailedToGetPodTemplate";
    pub const FAKE_PODS_INJECTED: &str = "FakePodsInjected";
    /// Warning event on a buffer whose status or managed template could not be written.
    pub const UPDATE_FAILED: &str = "CapacityBufferUpdateFailed";
}

/// Annotation marking a buffer's virtual pod (upstream's key and value).
pub const BUFFER_POD_ANNOTATION: &str = "podType";
pub const BUFFER_POD_ANNOTATION_VALUE: &str = "capacityBufferFakePod";
/// The owner reference a virtual pod carries.
pub const BUFFER_API_VERSION: &str = "autoscaling.x-k8s.io/v1beta1";
pub const BUFFER_KIND: &str = "CapacityBuffer";

/// Longest object name Kubernetes accepts.
const MAX_NAME: usize = 253;
const MANAGED_PREFIX: &str = "capacitybuffer-";
const MANAGED_SUFFIX: &str = "-pod-template";

/// Whether the engine handles buffers of this `provisioningStrategy` (unset or empty means the
/// active-capacity default).
pub fn handles_strategy(strategy: Option<&str>) -> bool {
    matches!(strategy, None | Some("") | Some(ACTIVE_CAPACITY_STRATEGY))
}

/// Whether `pod` is a buffer's virtual pod.
pub fn is_buffer_pod(pod: &Pod) -> bool {
    pod.annotations
        .get(BUFFER_POD_ANNOTATION)
        .is_some_and(|v| v == BUFFER_POD_ANNOTATION_VALUE)
}

/// The name of the PodTemplate the controller manages for a `scalableRef` buffer (upstream's
/// rule: the buffer's name, cut so the whole stays a valid object name). Implementations of
/// `ClusterApi::ensure_buffer_pod_template` use it.
pub fn managed_pod_template_name(buffer: &str) -> String {
    let room = MAX_NAME - MANAGED_PREFIX.len() - MANAGED_SUFFIX.len();
    let cut = buffer
        .char_indices()
        .map(|(i, c)| i + c.len_utf8())
        .take_while(|end| *end <= room)
        .last()
        .unwrap_or(0);
    format!("{MANAGED_PREFIX}{}{MANAGED_SUFFIX}", &buffer[..cut])
}

/// How many chunks a buffer asks for (docs/capacity-buffers.md CB-103): `replicas` and the
/// percentage of the scalable's replicas (rounded up) — the larger of the two when both are set —
/// capped by how many pods of this shape fit in `limits`; with neither set, as many as fit in
/// `limits`. `scalable_replicas` is `None` for `podTemplateRef` buffers, whose percentage has
/// nothing to apply to.
pub fn buffer_replicas(
    spec: &CapacityBufferSpec,
    pod: &Pod,
    scalable_replicas: Option<i32>,
) -> Result<i32, String> {
    let mut replicas: Option<i32> = spec.replicas.map(|r| r.max(0));
    if let (Some(percentage), Some(of)) = (spec.percentage, scalable_replicas) {
        let from_percentage = replicas_from_percentage(percentage, of);
        replicas = Some(replicas.map_or(from_percentage, |r| r.max(from_percentage)));
    }
    if let Some(limits) = &spec.limits {
        let within = replicas_within_limits(pod, limits)?;
        return Ok(replicas.map_or(within, |r| r.min(within)));
    }
    replicas.ok_or_else(|| "replicas, percentage and limits are not defined".to_string())
}

/// `percentage` % of `of`, rounded up, never negative.
fn replicas_from_percentage(percentage: i32, of: i32) -> i32 {
    let product = i64::from(percentage.max(0)) * i64::from(of.max(0));
    let rounded_up = (product + 99) / 100;
    i32::try_from(rounded_up).unwrap_or(i32::MAX)
}

/// How many pods of this shape fit in `limits`: for every resource the pod requests that the
/// limits name, the limit divided by the request, rounded down; the smallest of those.
fn replicas_within_limits(
    pod: &Pod,
    limits: &std::collections::BTreeMap<String, ferroscale_model::Quantity>,
) -> Result<i32, String> {
    let mut fit: Option<i128> = None;
    for (name, request) in pod.requests.iter() {
        if request <= 0 || name == ferroscale_model::resources::PODS {
            continue;
        }
        let Some(limit) = limits.get(name) else {
            continue;
        };
        // Compare in nano-units: CPU requests are kept in millicores, the rest in units.
        let per_unit: i128 = if name == ferroscale_model::resources::CPU {
            1_000_000
        } else {
            1_000_000_000
        };
        let pods = limit.nanos() / (i128::from(request) * per_unit);
        if pods < 0 {
            continue;
        }
        fit = Some(fit.map_or(pods, |f| f.min(pods)));
    }
    match fit {
        Some(pods) => Ok(i32::try_from(pods).unwrap_or(i32::MAX)),
        None => Err("resources in configured limits not found in the pod template".to_string()),
    }
}

/// Sets `condition` in `conditions` as Kubernetes' `SetStatusCondition` does: a condition of
/// the same type keeps its transition time unless its status changes; reason, message and
/// observed generation are replaced. Returns whether anything changed.
pub fn set_condition(conditions: &mut Vec<ApiCondition>, condition: ApiCondition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        None => {
            conditions.push(condition);
            true
        }
        Some(existing) => {
            let mut updated = condition;
            if existing.status == updated.status {
                updated.last_transition = existing.last_transition;
            }
            let changed = *existing != updated;
            *existing = updated;
            changed
        }
    }
}

fn condition(
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> ApiCondition {
    ApiCondition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition: now,
        observed_generation: 0,
    }
}

/// Where a buffer's pods take their shape from, as Gather found it.
#[derive(Debug, Clone)]
pub enum BufferSource<'a> {
    /// `podTemplateRef`: the referenced PodTemplate.
    PodTemplate(&'a Arc<PodTemplate>),
    /// `scalableRef`: the resolved object, whose pod shape becomes the managed template.
    Scalable(&'a Arc<ScalableObject>),
    /// The reference could not be resolved: why.
    Unresolved(String),
}

/// The source of a buffer's pods; `None` for a buffer with neither reference (which the CRD's
/// validation refuses; such a buffer is left as it is, as upstream).
pub fn buffer_source<'a>(
    buffer: &CapacityBuffer,
    capacity: &'a CapacityObjects,
) -> Option<BufferSource<'a>> {
    if let Some(name) = &buffer.spec.pod_template_ref {
        return Some(match capacity.pod_template(&buffer.namespace, name) {
            Some(template) => BufferSource::PodTemplate(template),
            None => BufferSource::Unresolved(format!("podtemplate \"{name}\" not found")),
        });
    }
    let reference = buffer.spec.scalable_ref.as_ref()?;
    let described = || {
        let group = if reference.api_group.is_empty() {
            String::new()
        } else {
            format!("{}/", reference.api_group)
        };
        format!("{group}{} {}", reference.kind, reference.name)
    };
    Some(match capacity.scalable(&buffer.namespace, reference) {
        Some(scalable) if scalable.pod.is_some() => BufferSource::Scalable(scalable),
        Some(scalable) => BufferSource::Unresolved(format!(
            "failed to resolve scalable object {}: {}",
            described(),
            scalable.error.as_deref().unwrap_or("no pod shape")
        )),
        None => BufferSource::Unresolved(format!(
            "failed to resolve scalable object {}: not found",
            described()
        )),
    })
}

/// What the controller knows about a buffer's pod template this loop.
#[derive(Debug, Clone)]
pub enum Resolved<'a> {
    /// The template the buffer's pods are made from (the referenced one, or the managed one)
    /// and, for a `scalableRef` buffer, the scalable's replicas.
    Template {
        name: &'a str,
        generation: i64,
        pod: &'a Pod,
        scalable_replicas: Option<i32>,
    },
    /// Resolution failed (the message goes into the condition).
    Failed(String),
}

/// The status the controller writes for `buffer` (docs/capacity-buffers.md CB-102–CB-105):
/// pod template, generation, replicas, strategy and the `ReadyForProvisioning` condition. Other
/// conditions and `readyReplicas` are kept.
pub fn resolve_status(
    buffer: &CapacityBuffer,
    resolved: Resolved<'_>,
    now: Timestamp,
) -> CapacityBufferStatus {
    let mut status = buffer.status.clone();
    // The CRD defaults the strategy; an object that skipped defaulting reads as the default.
    status.provisioning_strategy = match buffer.spec.provisioning_strategy.as_deref() {
        None | Some("") => Some(ACTIVE_CAPACITY_STRATEGY.to_string()),
        Some(other) => Some(other.to_string()),
    };
    let (ready, message) = match resolved {
        Resolved::Failed(message) => {
            status.pod_template_ref = None;
            status.pod_template_generation = None;
            status.replicas = None;
            (false, message)
        }
        Resolved::Template {
            name,
            generation,
            pod,
            scalable_replicas,
        } => {
            status.pod_template_ref = Some(name.to_string());
            status.pod_template_generation = Some(generation);
            match buffer_replicas(&buffer.spec, pod, scalable_replicas) {
                Ok(replicas) => {
                    status.replicas = Some(replicas);
                    (true, "ready".to_string())
                }
                Err(error) => {
                    status.replicas = None;
                    (
                        false,
                        format!("couldn't get number of replicas for buffer: {error}"),
                    )
                }
            }
        }
    };
    let (state, reason) = if ready {
        (ConditionStatus::True, reasons::ATTRIBUTES_SET_SUCCESSFULLY)
    } else {
        (ConditionStatus::False, reasons::ERROR)
    };
    set_condition(
        &mut status.conditions,
        condition(READY_FOR_PROVISIONING, state, reason, &message, now),
    );
    status
}

/// What injection decided this loop.
#[derive(Debug, Clone, Default)]
pub struct Injection {
    /// The virtual pods, buffer after buffer.
    pub pods: Vec<Arc<Pod>>,
    /// Buffers whose `Provisioning` condition changed, with their new status.
    pub status_updates: Vec<(Arc<CapacityBuffer>, CapacityBufferStatus)>,
    /// Every buffer of the handled strategy, with its status after this loop's updates (the
    /// ones whose `readyReplicas` the loop reports, injected or not).
    pub processed: Vec<Arc<CapacityBuffer>>,
}

/// The virtual pods of the buffers (docs/capacity-buffers.md CB-108, CB-109), following their
/// status: buffers whose status names the active-capacity strategy and that are (or were)
/// ready, whose status matches their template's generation, give `status.replicas` copies of
/// the template's pod; the others get a `Provisioning=False` condition saying why.
pub fn inject(capacity: &CapacityObjects, now: Timestamp) -> Injection {
    let mut injection = Injection::default();
    for buffer in &capacity.buffers {
        let strategy = buffer.status.provisioning_strategy.as_deref();
        if strategy != Some(ACTIVE_CAPACITY_STRATEGY) {
            continue;
        }
        let status = &buffer.status;
        let ready = find_condition(&status.conditions, READY_FOR_PROVISIONING);
        let provisioning = find_condition(&status.conditions, PROVISIONING);
        if !ready.is_some_and(ApiCondition::is_true)
            && !provisioning.is_some_and(ApiCondition::is_true)
        {
            injection.processed.push(buffer.clone());
            continue;
        }
        let template = status
            .pod_template_ref
            .as_deref()
            .and_then(|name| capacity.pod_template(&buffer.namespace, name));
        // A status older than its template waits for the controller to catch up.
        if let (Some(template), Some(generation)) = (template, status.pod_template_generation)
            && template.generation != generation
        {
            injection.processed.push(buffer.clone());
            continue;
        }
        let not_ready = || {
            (
                reasons::NOT_READY_FOR_PROVISIONING,
                "CapacityBuffer is not ready for provisioning".to_string(),
            )
        };
        let outcome = match (status.pod_template_ref.as_deref(), status.replicas) {
            _ if ready.is_some_and(|c| c.status == ConditionStatus::False) => Err(not_ready()),
            (None, _) | (_, None) => Err(not_ready()),
            (Some(_), Some(0)) => Err((
                reasons::BUFFER_IS_EMPTY,
                "CapacityBuffer has zero replicas".to_string(),
            )),
            (Some(name), Some(replicas)) => match template {
                None => Err((
                    reasons::FAILED_TO_GET_POD_TEMPLATE,
                    format!(
                        "failed to get pod template with error: podtemplate \"{name}\" not found"
                    ),
                )),
                Some(template) => Ok(virtual_pods(buffer, &template.pod, replicas)),
            },
        };
        let new_condition = match &outcome {
            Ok(_) => condition(
                PROVISIONING,
                ConditionStatus::True,
                reasons::FAKE_PODS_INJECTED,
                "",
                now,
            ),
            Err((reason, message)) => {
                condition(PROVISIONING, ConditionStatus::False, reason, message, now)
            }
        };
        let mut new_status = status.clone();
        let buffer = if set_condition(&mut new_status.conditions, new_condition) {
            let mut updated = (**buffer).clone();
            updated.status = new_status.clone();
            injection.status_updates.push((buffer.clone(), new_status));
            Arc::new(updated)
        } else {
            buffer.clone()
        };
        if let Ok(pods) = outcome {
            injection.pods.extend(pods);
        }
        injection.processed.push(buffer);
    }
    injection
}

/// `replicas` copies of `sample`, named after the buffer, owned by it, pending and marked
/// unschedulable, safe to evict, and annotated as virtual.
fn virtual_pods(buffer: &CapacityBuffer, sample: &Pod, replicas: i32) -> Vec<Arc<Pod>> {
    let mut pod = sample.clone();
    pod.namespace = buffer.namespace.as_str().into();
    pod.owner_references.retain(|o| !o.controller);
    pod.owner_references.push(OwnerRef {
        api_version: BUFFER_API_VERSION.to_string(),
        kind: BUFFER_KIND.to_string(),
        name: buffer.name.clone(),
        uid: buffer.uid.clone(),
        controller: true,
    });
    pod.node_name = None;
    pod.nominated_node_name = None;
    pod.deletion_time = None;
    pod.phase = PodPhase::Pending;
    // As the scheduler would mark a pod with no room; a template has no creation time, so the
    // pod is never too young to scale up for.
    pod.creation_time = Timestamp::default();
    pod.scheduled_condition = Some(Box::new(PodCondition {
        status: ConditionStatus::False,
        reason: "Unschedulable".to_string(),
        last_transition: None,
    }));
    pod.annotations.insert(
        BUFFER_POD_ANNOTATION.to_string(),
        BUFFER_POD_ANNOTATION_VALUE.to_string(),
    );
    pod.annotations
        .insert(SAFE_TO_EVICT.to_string(), "true".to_string());
    (1..=replicas.max(0))
        .map(|i| {
            let mut copy = pod.clone();
            copy.name = format_compact!("capacity-buffer-{}-{i}", buffer.name);
            copy.uid = format_compact!("{}-{i}", buffer.uid);
            Arc::new(copy)
        })
        .collect()
}

/// `status.readyReplicas` for every processed buffer (docs/capacity-buffers.md CB-112): its
/// virtual pods the loop placed on existing nodes (upcoming ones do not count). Returns the
/// buffers whose value changes, with their new status.
pub fn ready_replicas(
    snapshot: &Snapshot,
    processed: &[Arc<CapacityBuffer>],
) -> Vec<(Arc<CapacityBuffer>, CapacityBufferStatus)> {
    // Without buffers there is nothing to count: no walk over every placed pod.
    if processed.is_empty() {
        return Vec::new();
    }
    let mut placed: HashMap<&str, i32> = HashMap::new();
    for (_, info) in snapshot.nodes() {
        if is_upcoming_node(&info.node) {
            continue;
        }
        for pod in &info.pods {
            if is_buffer_pod(pod)
                && let Some(owner) = pod.controller()
            {
                *placed.entry(owner.uid.as_str()).or_default() += 1;
            }
        }
    }
    processed
        .iter()
        .filter_map(|buffer| {
            let ready = placed.get(buffer.uid.as_str()).copied().unwrap_or(0);
            (buffer.status.ready_replicas != Some(ready)).then(|| {
                let mut status = buffer.status.clone();
                status.ready_replicas = Some(ready);
                (buffer.clone(), status)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
