//! The capacity APIs against a real API server: resolving CapacityBuffers' `scalableRef`s into
//! [`ScalableObject`]s during Gather, and the three writes the engine makes (the status
//! subresources of ProvisioningRequests and CapacityBuffers, and the PodTemplate kept for a buffer
//! of a scalable workload).
//!
//! A scalable object is read with a GET each loop (Deployment, ReplicaSet, StatefulSet,
//! ReplicationController, Job); its pod shape is a live pod of it when one exists (from the pod
//! cache, matched by the object's selector), else its pod template — sent through the API server
//! as a dry-run pod creation when `dry_run` is on, so admission (LimitRanges, defaults, mutating
//! webhooks) shapes it as it would shape a real pod. The template's pod is kept per object
//! generation, so an unchanged workload costs one GET per loop.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ferroscale_core::kubernetes::ClusterError;
use ferroscale_model::capacity::{
    CapacityBuffer, CapacityBufferStatus, ProvisioningRequestStatus, ScalableObject, ScalableRef,
};
use ferroscale_model::{LabelSelector, Labels, Pod, PodPhase};
use ferroscale_objects::ferroscale_capacity_apis::{capacity_buffer, provisioning_request};
use ferroscale_objects::{
    PriorityClasses, capacity_buffer_status_to_k8s, pod_from_k8s, pod_template_from_k8s,
    provisioning_request_status_to_k8s, workload_selector_from_k8s,
};
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

use crate::cluster::COMPONENT;

/// What one GET of a scalable object gives.
struct Workload {
    generation: i64,
    replicas: i32,
    ready_replicas: Option<i32>,
    selector: Option<LabelSelector>,
    template: core::PodTemplateSpec,
}

/// A resolved template pod, kept while the object's generation is unchanged.
#[derive(Clone)]
struct TemplateShape {
    generation: i64,
    template: core::PodTemplateSpec,
    pod: Result<Arc<Pod>, String>,
}

/// Resolves scalable objects and remembers their templates (for the buffers' PodTemplates).
pub(crate) struct ScalableResolver {
    client: Client,
    dry_run: bool,
    templates: Mutex<BTreeMap<(String, ScalableRef), TemplateShape>>,
}

impl ScalableResolver {
    pub(crate) fn new(client: Client, dry_run: bool) -> ScalableResolver {
        ScalableResolver {
            client,
            dry_run,
            templates: Mutex::new(BTreeMap::new()),
        }
    }

    /// One [`ScalableObject`] per distinct `(namespace, scalableRef)` of `buffers`. A failure is
    /// the object's `error`, never the loop's.
    pub(crate) async fn resolve(
        &self,
        buffers: &[Arc<CapacityBuffer>],
        pods: &[Arc<Pod>],
        priorities: &PriorityClasses,
    ) -> Vec<Arc<ScalableObject>> {
        let mut wanted: Vec<(String, ScalableRef)> = buffers
            .iter()
            .filter_map(|b| Some((b.namespace.clone(), b.spec.scalable_ref.clone()?)))
            .collect();
        wanted.sort();
        wanted.dedup();
        let mut resolved = Vec::with_capacity(wanted.len());
        for (namespace, reference) in wanted {
            resolved.push(Arc::new(
                self.resolve_one(&namespace, &reference, pods, priorities)
                    .await,
            ));
        }
        resolved
    }

    async fn resolve_one(
        &self,
        namespace: &str,
        reference: &ScalableRef,
        pods: &[Arc<Pod>],
        priorities: &PriorityClasses,
    ) -> ScalableObject {
        let mut object = ScalableObject {
            namespace: namespace.to_string(),
            reference: reference.clone(),
            replicas: 0,
            ready_replicas: None,
            pod: None,
            error: None,
        };
        let workload = match self.get_workload(namespace, reference).await {
            Ok(workload) => workload,
            Err(error) => {
                object.error = Some(error);
                return object;
            }
        };
        object.replicas = workload.replicas;
        object.ready_replicas = workload.ready_replicas;
        let key = (namespace.to_string(), reference.clone());
        let cached = self
            .templates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .filter(|shape| shape.generation == workload.generation)
            .cloned();
        let shape = match cached {
            Some(shape) => shape,
            None => {
                let pod = self
                    .template_pod(namespace, reference, &workload.template, priorities)
                    .await;
                let shape = TemplateShape {
                    generation: workload.generation,
                    template: workload.template.clone(),
                    pod,
                };
                self.templates
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, shape.clone());
                shape
            }
        };
        // A live pod is the truest shape (admission and the scheduler's view included).
        let live = workload.selector.as_ref().and_then(|selector| {
            pods.iter()
                .filter(|p| {
                    p.namespace == namespace
                        && p.deletion_time.is_none()
                        && !matches!(p.phase, PodPhase::Succeeded | PodPhase::Failed)
                        && selector.matches(&p.labels)
                })
                .min_by(|a, b| a.name.cmp(&b.name))
                .cloned()
        });
        match (live, shape.pod) {
            (Some(pod), _) => object.pod = Some(pod),
            (None, Ok(pod)) => object.pod = Some(pod),
            (None, Err(error)) => object.error = Some(error),
        }
        object
    }

    async fn get_workload(
        &self,
        namespace: &str,
        reference: &ScalableRef,
    ) -> Result<Workload, String> {
        let name = reference.name.as_str();
        let described = format!("{} {namespace}/{name}", reference.kind);
        let failed = |e: kube::Error| format!("reading {described}: {e}");
        let selector = |s: Option<&meta::LabelSelector>| {
            s.map(|s| workload_selector_from_k8s(&described, s))
                .transpose()
                .map_err(|e| e.to_string())
        };
        let client = self.client.clone();
        match (reference.api_group.as_str(), reference.kind.as_str()) {
            ("apps", "Deployment") => {
                let d = Api::<apps::Deployment>::namespaced(client, namespace)
                    .get(name)
                    .await
                    .map_err(failed)?;
                let spec = d.spec.unwrap_or_default();
                Ok(Workload {
                    generation: d.metadata.generation.unwrap_or_default(),
                    replicas: spec.replicas.unwrap_or(1),
                    ready_replicas: d.status.and_then(|s| s.ready_replicas).or(Some(0)),
                    selector: selector(Some(&spec.selector))?,
                    template: spec.template,
                })
            }
            ("apps", "ReplicaSet") => {
                let r = Api::<apps::ReplicaSet>::namespaced(client, namespace)
                    .get(name)
                    .await
                    .map_err(failed)?;
                let spec = r.spec.unwrap_or_default();
                Ok(Workload {
                    generation: r.metadata.generation.unwrap_or_default(),
                    replicas: spec.replicas.unwrap_or(1),
                    ready_replicas: r.status.and_then(|s| s.ready_replicas).or(Some(0)),
                    selector: selector(Some(&spec.selector))?,
                    template: spec.template.unwrap_or_default(),
                })
            }
            ("apps", "StatefulSet") => {
                let s = Api::<apps::StatefulSet>::namespaced(client, namespace)
                    .get(name)
                    .await
                    .map_err(failed)?;
                let spec = s.spec.unwrap_or_default();
                Ok(Workload {
                    generation: s.metadata.generation.unwrap_or_default(),
                    replicas: spec.replicas.unwrap_or(1),
                    ready_replicas: s.status.and_then(|s| s.ready_replicas).or(Some(0)),
                    selector: selector(Some(&spec.selector))?,
                    template: spec.template,
                })
            }
            ("", "ReplicationController") => {
                let r = Api::<core::ReplicationController>::namespaced(client, namespace)
                    .get(name)
                    .await
                    .map_err(failed)?;
                let spec = r.spec.unwrap_or_default();
                let labels = spec.selector.map(Labels::from).unwrap_or_default();
                Ok(Workload {
                    generation: r.metadata.generation.unwrap_or_default(),
                    replicas: spec.replicas.unwrap_or(1),
                    ready_replicas: r.status.and_then(|s| s.ready_replicas).or(Some(0)),
                    selector: Some(LabelSelector {
                        match_labels: labels,
                        match_expressions: Vec::new(),
                    }),
                    template: spec.template.unwrap_or_default(),
                })
            }
            ("batch", "Job") => {
                let j = Api::<batch::Job>::namespaced(client, namespace)
                    .get(name)
                    .await
                    .map_err(failed)?;
                let spec = j.spec.unwrap_or_default();
                Ok(Workload {
                    generation: j.metadata.generation.unwrap_or_default(),
                    replicas: spec.parallelism.unwrap_or(1),
                    ready_replicas: j.status.and_then(|s| s.ready).or(Some(0)),
                    selector: selector(spec.selector.as_ref())?,
                    template: spec.template,
                })
            }
            (group, kind) => Err(format!(
                "{described}: scalableRef of kind {kind:?} in group {group:?} is not supported \
                 (Deployment, ReplicaSet, StatefulSet, ReplicationController and Job are)"
            )),
        }
    }

    /// The pod a template makes: through the API server's admission with a dry-run creation when
    /// asked, else converted as written.
    async fn template_pod(
        &self,
        namespace: &str,
        reference: &ScalableRef,
        template: &core::PodTemplateSpec,
        priorities: &PriorityClasses,
    ) -> Result<Arc<Pod>, String> {
        let described = format!("{} {namespace}/{}", reference.kind, reference.name);
        if self.dry_run {
            let mut metadata = template.metadata.clone().unwrap_or_default();
            metadata.name = None;
            metadata.generate_name = Some(format!("{}-", reference.name));
            metadata.namespace = Some(namespace.to_string());
            let pod = core::Pod {
                metadata,
                spec: template.spec.clone(),
                status: None,
            };
            let params = PostParams {
                dry_run: true,
                field_manager: Some(COMPONENT.to_string()),
            };
            let created = Api::<core::Pod>::namespaced(self.client.clone(), namespace)
                .create(&params, &pod)
                .await
                .map_err(|e| format!("dry-run pod of {described}: {e}"))?;
            return pod_from_k8s(&created, priorities)
                .map(Arc::new)
                .map_err(|e| e.to_string());
        }
        let as_template = core::PodTemplate {
            metadata: meta::ObjectMeta {
                name: Some(reference.name.clone()),
                namespace: Some(namespace.to_string()),
                ..meta::ObjectMeta::default()
            },
            template: Some(template.clone()),
        };
        pod_template_from_k8s(&as_template, priorities)
            .map(|t| t.pod)
            .map_err(|e| format!("the pod template of {described}: {e}"))
    }

    /// The raw template last resolved for `(namespace, reference)`.
    fn template(&self, namespace: &str, reference: &ScalableRef) -> Option<core::PodTemplateSpec> {
        self.templates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(namespace.to_string(), reference.clone()))
            .map(|shape| shape.template.clone())
    }
}

fn write_error(kind: &'static str, name: &str, error: kube::Error) -> ClusterError {
    match &error {
        kube::Error::Api(status) if status.is_not_found() => ClusterError::NotFound {
            kind,
            name: name.to_string(),
        },
        kube::Error::Api(status) if status.is_conflict() => ClusterError::Conflict {
            kind,
            name: name.to_string(),
            message: status.message.clone(),
        },
        _ => ClusterError::Api(format!("{kind} {name}: {error}")),
    }
}

/// Replaces a ProvisioningRequest's status (a merge patch of the status subresource: the
/// condition list is replaced whole, as the engine computes all of it).
pub(crate) async fn update_provisioning_request_status(
    client: &Client,
    namespace: &str,
    name: &str,
    status: &ProvisioningRequestStatus,
) -> Result<(), ClusterError> {
    let api: Api<provisioning_request::v1::ProvisioningRequest> =
        Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({ "status": provisioning_request_status_to_k8s(status) });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| write_error("ProvisioningRequest", &format!("{namespace}/{name}"), e))?;
    Ok(())
}

/// Replaces a CapacityBuffer's status through its status subresource.
pub(crate) async fn update_capacity_buffer_status(
    client: &Client,
    namespace: &str,
    name: &str,
    status: &CapacityBufferStatus,
) -> Result<(), ClusterError> {
    let api: Api<capacity_buffer::v1beta1::CapacityBuffer> =
        Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({ "status": capacity_buffer_status_to_k8s(status) });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| write_error("CapacityBuffer", &format!("{namespace}/{name}"), e))?;
    Ok(())
}

/// Creates or updates (server-side apply) the PodTemplate of a buffer whose pods come from a
/// scalable workload: the workload's template, owned by the buffer so that it goes with it.
pub(crate) async fn ensure_buffer_pod_template(
    client: &Client,
    resolver: &ScalableResolver,
    buffer: &CapacityBuffer,
    scalable: &ScalableObject,
) -> Result<(String, i64), ClusterError> {
    let Some(template) = resolver.template(&scalable.namespace, &scalable.reference) else {
        return Err(ClusterError::Api(format!(
            "CapacityBuffer {}: {} {}/{} has not been resolved by Gather",
            buffer.key(),
            scalable.reference.kind,
            scalable.namespace,
            scalable.reference.name
        )));
    };
    let name = ferroscale_capacity::buffers::managed_pod_template_name(&buffer.name);
    let object = core::PodTemplate {
        metadata: meta::ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(buffer.namespace.clone()),
            owner_references: Some(vec![meta::OwnerReference {
                api_version: "autoscaling.x-k8s.io/v1beta1".to_string(),
                kind: "CapacityBuffer".to_string(),
                name: buffer.name.clone(),
                uid: buffer.uid.clone(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..meta::ObjectMeta::default()
        },
        template: Some(template),
    };
    let mut value = serde_json::to_value(&object)
        .map_err(|e| ClusterError::Api(format!("PodTemplate {name}: {e}")))?;
    value["apiVersion"] = "v1".into();
    value["kind"] = "PodTemplate".into();
    let api: Api<core::PodTemplate> = Api::namespaced(client.clone(), &buffer.namespace);
    let written = api
        .patch(
            &name,
            &PatchParams::apply(COMPONENT).force(),
            &Patch::Apply(&value),
        )
        .await
        .map_err(|e| write_error("PodTemplate", &format!("{}/{name}", buffer.namespace), e))?;
    Ok((name, written.metadata.generation.unwrap_or_default()))
}
