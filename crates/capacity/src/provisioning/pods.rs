//! The virtual pods a ProvisioningRequest stands for, and the real pods that consume one.

use std::sync::Arc;

use ferroscale_model::{
    CONSUME_PROVISIONING_REQUEST_ANNOTATION, CapacityObjects, ConditionStatus, OwnerRef,
    PROVISIONING_CLASS_ANNOTATION, Pod, PodCondition, PodPhase, ProvisioningRequest,
    format_compact,
};

/// The older spelling of the consume annotation, still honoured upstream.
pub const DEPRECATED_CONSUME_ANNOTATION: &str =
    "cluster-autoscaler.kubernetes.io/consume-provisioning-request";

/// The most pods one request may stand for: a request is external input, and its counts must
/// not make the loop build millions of pods.
pub const MAX_REQUEST_PODS: u64 = 10_000;

/// Why a request's pods could not be built (the request is then marked failed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestPodsError {
    #[error(
        "ProvisioningRequest {request}: podSets[{index}].podTemplateRef.name: PodTemplate \"{template}\" not found in namespace {namespace}"
    )]
    MissingTemplate {
        request: String,
        index: usize,
        template: String,
        namespace: String,
    },
    #[error(
        "ProvisioningRequest {request}: podSets: {count} pods in all, more than the {max} one request may ask for"
    )]
    TooManyPods {
        request: String,
        count: u64,
        max: u64,
    },
}

/// The name of the request a pod consumes, from the consume annotation (either spelling).
pub fn consumed_request(pod: &Pod) -> Option<&str> {
    pod.annotations
        .get(CONSUME_PROVISIONING_REQUEST_ANNOTATION)
        .or_else(|| pod.annotations.get(DEPRECATED_CONSUME_ANNOTATION))
        .map(String::as_str)
}

/// One pod per count of each pod set, from the referenced PodTemplates: named
/// `<request>-<set>-<index>`, in the request's namespace, owned by the request, carrying the
/// consume and class annotations, created when the request was, and marked unschedulable so the
/// scale-up intake takes them.
pub fn pods_for_request(
    request: &ProvisioningRequest,
    templates: &CapacityObjects,
) -> Result<Vec<Arc<Pod>>, RequestPodsError> {
    let count: u64 = request.pod_sets.iter().map(|s| u64::from(s.count)).sum();
    if count > MAX_REQUEST_PODS {
        return Err(RequestPodsError::TooManyPods {
            request: request.key(),
            count,
            max: MAX_REQUEST_PODS,
        });
    }
    let mut pods = Vec::with_capacity(count as usize);
    for (index, set) in request.pod_sets.iter().enumerate() {
        let template = templates
            .pod_template(&request.namespace, &set.pod_template)
            .ok_or_else(|| RequestPodsError::MissingTemplate {
                request: request.key(),
                index,
                template: set.pod_template.clone(),
                namespace: request.namespace.clone(),
            })?;
        for j in 0..set.count {
            let mut pod = (*template.pod).clone();
            pod.namespace = request.namespace.as_str().into();
            pod.name = format_compact!("{}-{index}-{j}", request.name);
            pod.uid = format_compact!("{}/{}", pod.namespace, pod.name);
            pod.node_name = None;
            pod.nominated_node_name = None;
            pod.phase = PodPhase::Pending;
            pod.deletion_time = None;
            pod.creation_time = request.creation_time;
            pod.annotations.insert(
                CONSUME_PROVISIONING_REQUEST_ANNOTATION.to_string(),
                request.name.clone(),
            );
            pod.annotations.insert(
                PROVISIONING_CLASS_ANNOTATION.to_string(),
                request.class.clone(),
            );
            pod.owner_references = ferroscale_model::thin_vec![OwnerRef {
                api_version: "autoscaling.x-k8s.io/v1".into(),
                kind: "ProvisioningRequest".into(),
                name: request.name.clone(),
                uid: request.uid.clone(),
                controller: true,
            }];
            pod.scheduled_condition = Some(Box::new(PodCondition {
                status: ConditionStatus::False,
                reason: "Unschedulable".into(),
                last_transition: Some(request.creation_time),
            }));
            pods.push(Arc::new(pod));
        }
    }
    Ok(pods)
}
