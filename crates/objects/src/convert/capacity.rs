//! The capacity APIs (`autoscaling.x-k8s.io`) and the core PodTemplates they point at, converted
//! for the engine. The readers hand over the storage version of each kind (older versions convert
//! into it losslessly, see `ferroscale-capacity-apis`).
//!
//! Everything the API server's CRD validation would refuse is refused here too (sizes, counts,
//! negative numbers, both references of a buffer, non-integer quota limits), so a hand-written
//! scenario cannot give the engine an object a cluster could never hold; the error names the
//! object, the field and the value.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferroscale_capacity_apis::Condition;
use ferroscale_capacity_apis::capacity_buffer::v1beta1 as buffers;
use ferroscale_capacity_apis::capacity_quota::v1beta1 as quotas;
use ferroscale_capacity_apis::capacity_quota::{MAX_LIMITED_RESOURCES, MAX_RESOURCE_NAME_LENGTH};
use ferroscale_capacity_apis::provisioning_request::v1 as requests;
use ferroscale_capacity_apis::provisioning_request::{
    MAX_DETAIL_LENGTH, MAX_DETAILS, MAX_PARAMETER_LENGTH, MAX_PARAMETERS, MAX_POD_SETS,
};
use ferroscale_model::Quantity;
use ferroscale_model::capacity::{
    ApiCondition, CapacityBuffer, CapacityBufferSpec, CapacityBufferStatus, CapacityQuota, PodSet,
    PodTemplate, ProvisioningRequest, ProvisioningRequestStatus, ScalableRef,
};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use super::{
    ConvertError, ObjectContext, PriorityClasses, condition_status, label_selector,
    namespace_or_default, pod_from_parts, timestamp,
};

/// Characters of a condition's message (the standard `metav1.Condition` limit).
pub const MAX_CONDITION_MESSAGE_LENGTH: usize = 32768;
/// Conditions one status may hold; more is a misbehaving writer, not information.
pub const MAX_CONDITIONS: usize = 64;

fn bounded(ctx: &ObjectContext, field: &str, len: usize, max: usize) -> Result<(), ConvertError> {
    if len > max {
        return Err(ctx.error(field, len.to_string(), format!("at most {max} allowed")));
    }
    Ok(())
}

fn identity(metadata: &meta::ObjectMeta) -> (String, String, i64, ferroscale_model::Timestamp) {
    (
        metadata.name.clone().unwrap_or_default(),
        metadata.uid.clone().unwrap_or_default(),
        metadata.generation.unwrap_or_default(),
        metadata
            .creation_timestamp
            .as_ref()
            .map(timestamp)
            .unwrap_or_default(),
    )
}

fn conditions(
    ctx: &ObjectContext,
    field: &str,
    conditions: &[Condition],
) -> Result<Vec<ApiCondition>, ConvertError> {
    bounded(ctx, field, conditions.len(), MAX_CONDITIONS)?;
    let mut out = Vec::with_capacity(conditions.len());
    for (i, condition) in conditions.iter().enumerate() {
        let at = format!("{field}[{i}]");
        if condition.type_.is_empty() {
            return Err(ctx.error(format!("{at}.type"), "", "must not be empty"));
        }
        if !matches!(condition.status.as_str(), "True" | "False" | "Unknown") {
            return Err(ctx.error(
                format!("{at}.status"),
                condition.status.clone(),
                "must be True, False or Unknown",
            ));
        }
        if condition.message.len() > MAX_CONDITION_MESSAGE_LENGTH {
            return Err(ctx.error(
                format!("{at}.message"),
                condition.message.len().to_string(),
                format!("at most {MAX_CONDITION_MESSAGE_LENGTH} characters allowed"),
            ));
        }
        out.push(ApiCondition {
            type_: condition.type_.clone(),
            status: condition_status(&condition.status),
            reason: condition.reason.clone(),
            message: condition.message.clone(),
            last_transition: timestamp(&condition.last_transition_time),
            observed_generation: condition.observed_generation.unwrap_or_default(),
        });
    }
    Ok(out)
}

/// A quantity that must parse and not be negative.
fn quantity(
    ctx: &ObjectContext,
    field: &str,
    value: &K8sQuantity,
) -> Result<Quantity, ConvertError> {
    let parsed =
        Quantity::parse(&value.0).map_err(|e| ctx.error(field, value.0.clone(), e.reason))?;
    if parsed.nanos() < 0 {
        return Err(ctx.error(field, value.0.clone(), "must not be negative"));
    }
    Ok(parsed)
}

/// Converts a core PodTemplate. Its pod is named after the PodTemplate, in its namespace, and
/// carries the template's labels and annotations; errors name fields under `template.`.
pub fn pod_template_from_k8s(
    template: &core::PodTemplate,
    priorities: &PriorityClasses,
) -> Result<PodTemplate, ConvertError> {
    let ctx = ObjectContext::namespaced("PodTemplate", &template.metadata);
    let namespace = namespace_or_default(&template.metadata);
    let (name, uid, generation, _) = identity(&template.metadata);
    let spec = template.template.as_ref();
    let mut pod_metadata = spec.and_then(|t| t.metadata.clone()).unwrap_or_default();
    pod_metadata.namespace = Some(namespace.clone());
    pod_metadata.name = Some(name.clone());
    let pod = pod_from_parts(
        &ctx,
        &pod_metadata,
        spec.and_then(|t| t.spec.as_ref()),
        None,
        priorities,
    )
    .map_err(|e| ConvertError {
        field: format!("template.{}", e.field),
        ..e
    })?;
    Ok(PodTemplate {
        namespace,
        name,
        uid,
        generation,
        pod: Arc::new(pod),
    })
}

/// Converts a ProvisioningRequest (storage version `v1`).
pub fn provisioning_request_from_k8s(
    request: &requests::ProvisioningRequest,
) -> Result<ProvisioningRequest, ConvertError> {
    let ctx = ObjectContext::namespaced("ProvisioningRequest", &request.metadata);
    let (name, uid, generation, creation_time) = identity(&request.metadata);
    let spec = &request.spec;
    if spec.pod_sets.is_empty() {
        return Err(ctx.error("spec.podSets", "[]", "at least one pod set is required"));
    }
    bounded(&ctx, "spec.podSets", spec.pod_sets.len(), MAX_POD_SETS)?;
    let mut pod_sets = Vec::with_capacity(spec.pod_sets.len());
    for (i, set) in spec.pod_sets.iter().enumerate() {
        if set.pod_template_ref.name.is_empty() {
            return Err(ctx.error(
                format!("spec.podSets[{i}].podTemplateRef.name"),
                "",
                "must name a PodTemplate",
            ));
        }
        let count = u32::try_from(set.count)
            .ok()
            .filter(|c| *c >= 1)
            .ok_or_else(|| {
                ctx.error(
                    format!("spec.podSets[{i}].count"),
                    set.count.to_string(),
                    "must be at least 1",
                )
            })?;
        pod_sets.push(PodSet {
            pod_template: set.pod_template_ref.name.clone(),
            count,
        });
    }
    if spec.provisioning_class_name.is_empty() {
        return Err(ctx.error("spec.provisioningClassName", "", "must not be empty"));
    }
    bounded(
        &ctx,
        "spec.parameters",
        spec.parameters.len(),
        MAX_PARAMETERS,
    )?;
    for (key, value) in &spec.parameters {
        if value.chars().count() > MAX_PARAMETER_LENGTH {
            return Err(ctx.error(
                format!("spec.parameters.{key}"),
                value.clone(),
                format!("at most {MAX_PARAMETER_LENGTH} characters allowed"),
            ));
        }
    }
    let status = request.status.clone().unwrap_or_default();
    bounded(
        &ctx,
        "status.provisioningClassDetails",
        status.provisioning_class_details.len(),
        MAX_DETAILS,
    )?;
    for (key, value) in &status.provisioning_class_details {
        if value.chars().count() > MAX_DETAIL_LENGTH {
            return Err(ctx.error(
                format!("status.provisioningClassDetails.{key}"),
                value.chars().count().to_string(),
                format!("at most {MAX_DETAIL_LENGTH} characters allowed"),
            ));
        }
    }
    Ok(ProvisioningRequest {
        namespace: namespace_or_default(&request.metadata),
        name,
        uid,
        generation,
        creation_time,
        deleting: request.metadata.deletion_timestamp.is_some(),
        class: spec.provisioning_class_name.clone(),
        pod_sets,
        parameters: spec.parameters.clone(),
        status: ProvisioningRequestStatus {
            conditions: conditions(&ctx, "status.conditions", &status.conditions)?,
            details: status.provisioning_class_details,
        },
    })
}

fn non_negative(
    ctx: &ObjectContext,
    field: &str,
    value: Option<i32>,
) -> Result<Option<i32>, ConvertError> {
    match value {
        Some(v) if v < 0 => Err(ctx.error(field, v.to_string(), "must not be negative")),
        other => Ok(other),
    }
}

/// Converts a CapacityBuffer (storage version `v1beta1`).
pub fn capacity_buffer_from_k8s(
    buffer: &buffers::CapacityBuffer,
) -> Result<CapacityBuffer, ConvertError> {
    let ctx = ObjectContext::namespaced("CapacityBuffer", &buffer.metadata);
    let (name, uid, generation, creation_time) = identity(&buffer.metadata);
    let spec = &buffer.spec;
    if spec.pod_template_ref.is_some() && spec.scalable_ref.is_some() {
        return Err(ctx.error(
            "spec.scalableRef",
            spec.scalable_ref
                .as_ref()
                .map(|r| format!("{}/{}", r.kind, r.name))
                .unwrap_or_default(),
            "podTemplateRef and scalableRef exclude each other",
        ));
    }
    if let Some(template) = &spec.pod_template_ref
        && template.name.is_empty()
    {
        return Err(ctx.error("spec.podTemplateRef.name", "", "must not be empty"));
    }
    let scalable_ref = match &spec.scalable_ref {
        None => None,
        Some(r) if r.kind.is_empty() => {
            return Err(ctx.error("spec.scalableRef.kind", "", "must not be empty"));
        }
        Some(r) if r.name.is_empty() => {
            return Err(ctx.error("spec.scalableRef.name", "", "must not be empty"));
        }
        Some(r) => Some(ScalableRef {
            api_group: r.api_group.clone(),
            kind: r.kind.clone(),
            name: r.name.clone(),
        }),
    };
    let limits = match &spec.limits {
        None => None,
        Some(list) => {
            let mut parsed = BTreeMap::new();
            for (resource, value) in list {
                parsed.insert(
                    resource.clone(),
                    quantity(&ctx, &format!("spec.limits.{resource}"), value)?,
                );
            }
            Some(parsed)
        }
    };
    let status = buffer.status.clone().unwrap_or_default();
    Ok(CapacityBuffer {
        namespace: namespace_or_default(&buffer.metadata),
        name,
        uid,
        generation,
        creation_time,
        spec: CapacityBufferSpec {
            provisioning_strategy: spec.provisioning_strategy.clone(),
            pod_template_ref: spec.pod_template_ref.as_ref().map(|r| r.name.clone()),
            scalable_ref,
            replicas: non_negative(&ctx, "spec.replicas", spec.replicas)?,
            percentage: non_negative(&ctx, "spec.percentage", spec.percentage)?,
            limits,
        },
        status: CapacityBufferStatus {
            pod_template_ref: status.pod_template_ref.map(|r| r.name),
            replicas: non_negative(&ctx, "status.replicas", status.replicas)?,
            pod_template_generation: status.pod_template_generation,
            conditions: conditions(&ctx, "status.conditions", &status.conditions)?,
            provisioning_strategy: status.provisioning_strategy,
            ready_replicas: status.ready_replicas,
        },
    })
}

/// Converts a CapacityQuota (storage version `v1beta1`). Limits are non-negative integers, as the
/// CRD's validation demands (`500m`, `3.67Gi` and even `1000m` are refused).
pub fn capacity_quota_from_k8s(
    quota: &quotas::CapacityQuota,
) -> Result<CapacityQuota, ConvertError> {
    let ctx = ObjectContext::new("CapacityQuota", &quota.metadata);
    let (name, uid, generation, _) = identity(&quota.metadata);
    let resources = &quota.spec.limits.resources;
    bounded(
        &ctx,
        "spec.limits.resources",
        resources.len(),
        MAX_LIMITED_RESOURCES,
    )?;
    let mut limits = BTreeMap::new();
    for (resource, value) in resources {
        let field = format!("spec.limits.resources.{resource}");
        if resource.is_empty() || resource.len() > MAX_RESOURCE_NAME_LENGTH {
            return Err(ctx.error(
                field,
                resource.clone(),
                format!("a resource name has 1 to {MAX_RESOURCE_NAME_LENGTH} characters"),
            ));
        }
        let parsed = quantity(&ctx, &field, value)?;
        if value.0.trim_end().ends_with('m') || parsed.nanos() % 1_000_000_000 != 0 {
            return Err(ctx.error(field, value.0.clone(), "must be a whole number"));
        }
        limits.insert(resource.clone(), parsed);
    }
    let selector = quota
        .spec
        .selector
        .as_ref()
        .map(|s| label_selector(&ctx, "spec.selector", s))
        .transpose()?;
    let status = quota.status.clone().unwrap_or_default();
    Ok(CapacityQuota {
        name,
        uid,
        generation,
        selector,
        limits,
        conditions: conditions(&ctx, "status.conditions", &status.conditions)?,
    })
}

/// A workload's `spec.selector` (`kind namespace/name` names the object in errors), for finding
/// its live pods.
pub fn workload_selector_from_k8s(
    object: &str,
    selector: &meta::LabelSelector,
) -> Result<ferroscale_model::LabelSelector, ConvertError> {
    let ctx = ObjectContext {
        object: object.to_string(),
    };
    label_selector(&ctx, "spec.selector", selector)
}

/// A model time as the API's `metav1.Time` (out-of-range times, which no clock produces, become
/// the epoch rather than failing a status write).
fn api_time(time: ferroscale_model::Timestamp) -> meta::Time {
    meta::Time(k8s_openapi::jiff::Timestamp::from_millisecond(time.millis()).unwrap_or_default())
}

fn api_conditions(conditions: &[ApiCondition]) -> Vec<Condition> {
    conditions
        .iter()
        .map(|c| Condition {
            type_: c.type_.clone(),
            status: match c.status {
                ferroscale_model::ConditionStatus::True => "True",
                ferroscale_model::ConditionStatus::False => "False",
                ferroscale_model::ConditionStatus::Unknown => "Unknown",
            }
            .to_string(),
            observed_generation: Some(c.observed_generation),
            last_transition_time: api_time(c.last_transition),
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
        .collect()
}

/// The status the engine decided for a request, as the API object's status (for status writes).
pub fn provisioning_request_status_to_k8s(
    status: &ProvisioningRequestStatus,
) -> requests::ProvisioningRequestStatus {
    requests::ProvisioningRequestStatus {
        conditions: api_conditions(&status.conditions),
        provisioning_class_details: status.details.clone(),
    }
}

/// The status the buffer controller decided, as the API object's status (for status writes).
pub fn capacity_buffer_status_to_k8s(
    status: &CapacityBufferStatus,
) -> buffers::CapacityBufferStatus {
    buffers::CapacityBufferStatus {
        pod_template_ref: status
            .pod_template_ref
            .clone()
            .map(|name| ferroscale_capacity_apis::LocalObjectRef { name }),
        replicas: status.replicas,
        pod_template_generation: status.pod_template_generation,
        conditions: api_conditions(&status.conditions),
        provisioning_strategy: status.provisioning_strategy.clone(),
        ready_replicas: status.ready_replicas,
    }
}
