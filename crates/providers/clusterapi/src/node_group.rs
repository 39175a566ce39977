//! One node group: a MachineDeployment, MachineSet or MachinePool (docs/clusterapi.md
//! CAPI-20, CAPI-26–CAPI-55).
//!
//! A group is rebuilt from the watch cache at every `NodeGroups()` / `NodeGroupForNode()` call;
//! sizes are read and written through the resource's scale subresource, and deletions follow the
//! delete-machine protocol of docs/clusterapi.md CAPI-37–CAPI-43 under the provider-wide lock.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use ferroscale_core::cloud::resize_merge::MergedResize;
use ferroscale_core::cloud::{CloudError, GroupOptions, Instance, NodeGroup, NodeTemplate};
use ferroscale_model::{Node, Timestamp};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use tokio::sync::OnceCell;

use crate::capacity;
use crate::ids::{SyntheticId, normalize_provider_id};
use crate::instances;
use crate::options;
use crate::provider::{Shared, provider_id_list};
use crate::scalable::{self, ScalableKind};
use crate::template::{self, ScaleFromZeroTemplate, TemplateInput};

/// Event reasons for objects the provider skips.
const REASON_BAD_ANNOTATION: &str = "InvalidAutoscalingAnnotation";
const REASON_NO_TEMPLATE: &str = "ScaleFromZeroTemplateUnavailable";
const REASON_NO_PROVIDER_ID: &str = "MachineWithoutProviderID";
const REASON_BAD_TEMPLATE_FIELD: &str = "InvalidTemplateCapacity";

pub struct ClusterApiNodeGroup {
    shared: Arc<Shared>,
    kind: ScalableKind,
    object: Arc<DynamicObject>,
    id: String,
    min: usize,
    max: usize,
    /// `spec.replicas` of the cached copy, updated after a successful `SetSize` (docs/clusterapi.md
    /// CAPI-34).
    replicas: Mutex<Option<i64>>,
    /// The infrastructure template, looked up once per group object (docs/clusterapi.md CAPI-47).
    infrastructure: OnceCell<Option<Arc<DynamicObject>>>,
}

impl std::fmt::Debug for ClusterApiNodeGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.debug())
    }
}

impl ClusterApiNodeGroup {
    /// docs/clusterapi.md CAPI-13–CAPI-17, in order. `Ok(None)`: the resource does not participate.
    /// `Err`: a bad annotation, already reported on the object as a warning Event.
    pub(crate) async fn build(
        shared: Arc<Shared>,
        kind: ScalableKind,
        object: Arc<DynamicObject>,
    ) -> Result<Option<ClusterApiNodeGroup>, CloudError> {
        let mut group = ClusterApiNodeGroup {
            id: scalable::group_id(kind, &object),
            replicas: Mutex::new(scalable::replicas(&object)),
            shared,
            kind,
            object,
            min: 0,
            max: 0,
            infrastructure: OnceCell::new(),
        };
        let can_scale_from_zero = if scalable::replicas(&group.object) == Some(0) {
            group.scale_from_zero_capacity().await.is_some()
        } else {
            false
        };
        match scalable::eligibility(
            &group.object,
            kind,
            &group.shared.config.keys,
            can_scale_from_zero,
        ) {
            Ok(Some((min, max))) => {
                group.min = min;
                group.max = max;
                Ok(Some(group))
            }
            Ok(None) => {
                // A min annotation without a max one is a half-configured group, worth saying;
                // a resource with neither is simply not autoscaled.
                let keys = &group.shared.config.keys;
                let annotations = group.object.annotations();
                if annotations.contains_key(&keys.min_size())
                    && !annotations.contains_key(&keys.max_size())
                {
                    let message = format!(
                        "{}: annotation {} is set but {} is missing, so it is not autoscaled",
                        group.id,
                        keys.min_size(),
                        keys.max_size()
                    );
                    group
                        .shared
                        .events
                        .warn(&group.object, REASON_BAD_ANNOTATION, &message)
                        .await;
                }
                Ok(None)
            }
            Err(bad) => {
                let message = bad.to_string();
                group
                    .shared
                    .events
                    .warn(&group.object, REASON_BAD_ANNOTATION, &message)
                    .await;
                Err(CloudError::InvalidRequest(message))
            }
        }
    }

    fn namespace(&self) -> String {
        self.object.namespace().unwrap_or_default()
    }

    fn api(&self) -> Result<Api<DynamicObject>, CloudError> {
        let resource = self
            .shared
            .api_resource(self.kind)
            .ok_or_else(|| CloudError::Provider(format!("{} is not served", self.kind.plural())))?;
        Ok(Api::namespaced_with(
            self.shared.management.clone(),
            &self.namespace(),
            resource,
        ))
    }

    fn machines_api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.shared.management.clone(),
            &self.namespace(),
            &self.shared.resources.machines,
        )
    }

    /// The deletion of `nodes` (docs/clusterapi.md CAPI-37–CAPI-43), under the provider-wide lock
    /// and in the group's turn.
    async fn delete_machines(&self, nodes: &[Node]) -> Result<(), CloudError> {
        let mut replicas = self.current_replicas().await?;
        if replicas <= self.min as i64 {
            return Err(CloudError::InvalidRequest(
                "min size reached, nodes will not be deleted".to_string(),
            ));
        }
        let mut to_delete = Vec::with_capacity(nodes.len());
        for node in nodes {
            // Upstream skips a node whose lookup answers "not found"; lookups here read the
            // watch caches, where an absent object is `Ok(None)`, never an error.
            let group = self
                .shared
                .active_resource(&node.provider_id)?
                .map(|(kind, resource)| scalable::group_id(kind, &resource));
            match group {
                None => {
                    return Err(CloudError::InvalidRequest(format!(
                        "no node group found for node {}",
                        node.provider_id
                    )));
                }
                Some(id) if id != self.id => {
                    return Err(CloudError::InvalidRequest(format!(
                        "node {} doesn't belong to node group {}",
                        node.provider_id, self.id
                    )));
                }
                Some(_) => to_delete.push(node),
            }
        }
        if replicas - (to_delete.len() as i64) < self.min as i64 {
            return Err(CloudError::InvalidRequest(format!(
                "unable to delete {} machines in {}, machine replicas are {replicas}, minSize is {}",
                to_delete.len(),
                self.id,
                self.min
            )));
        }
        for node in to_delete {
            let id = normalize_provider_id(&node.provider_id);
            let Some(machine) = self.shared.find_machine(id)? else {
                if self.kind == ScalableKind::MachinePool {
                    let listed = provider_id_list(&self.object)
                        .iter()
                        .any(|p| normalize_provider_id(p) == id);
                    if listed {
                        tracing::warn!(node = %node.name, group = %self.id, "MachinePool member without a Machine: lowering replicas only");
                        self.set_size(replicas - 1, SizeChange::Decrease).await?;
                        replicas -= 1;
                        continue;
                    }
                    return Err(CloudError::InvalidRequest(format!(
                        "node {} is not present in MachinePool providerIDList for nodegroup {}",
                        node.provider_id, self.id
                    )));
                }
                return Err(CloudError::InvalidRequest(format!(
                    "unknown machine for node {}",
                    node.provider_id
                )));
            };
            if machine.metadata.deletion_timestamp.is_some() {
                continue;
            }
            self.mark_for_deletion(&machine).await?;
            if let Err(error) = self.set_size(replicas - 1, SizeChange::Decrease).await {
                self.unmark(&machine).await;
                return Err(error);
            }
            tracing::info!(machine = %machine.name_any(), node = %node.name, group = %self.id, "Machine marked for deletion and replicas lowered");
            replicas -= 1;
        }
        Ok(())
    }

    /// docs/clusterapi.md CAPI-36: only Machines that have not become nodes may be cancelled.
    async fn lower_target(&self, delta: i64) -> Result<(), CloudError> {
        if delta >= 0 {
            return Err(CloudError::InvalidRequest(
                "size decrease must be negative".to_string(),
            ));
        }
        let replicas = self.current_replicas().await?;
        let existing = instances::count_existing(&self.instances()?);
        if replicas + delta < existing as i64 {
            return Err(CloudError::InvalidRequest(format!(
                "attempt to delete existing nodes currentReplicas:{replicas} delta:{delta} existingNodes: {existing}"
            )));
        }
        self.set_size(replicas + delta, SizeChange::Decrease).await
    }

    /// One PATCH carrying `resize.delta` on top of the replicas read now (docs/clusterapi.md
    /// CAPI-34, CAPI-62): in the group's turn, so every earlier change of the group is in them.
    /// Answers the replicas set.
    async fn scale_up(&self, resize: MergedResize) -> Result<i64, CloudError> {
        let current = self.current_replicas().await?;
        let target = current.saturating_add(i64::try_from(resize.delta).unwrap_or(i64::MAX));
        if resize.is_merged() {
            tracing::info!(
                group = %self.id,
                increases = resize.callers,
                delta = resize.delta,
                replicas = target,
                "merged size increases that arrived during a size change into one scale PATCH"
            );
        }
        self.set_size(target, SizeChange::Increase).await?;
        Ok(target)
    }

    /// docs/clusterapi.md CAPI-33, read: `spec.replicas` of the scale subresource.
    async fn current_replicas(&self) -> Result<i64, CloudError> {
        let scale = self
            .api()?
            .get_scale(&self.object.name_any())
            .await
            .map_err(|e| api_error(&format!("reading the scale of {}", self.id), e))?;
        Ok(scale
            .spec
            .and_then(|s| s.replicas)
            .map(i64::from)
            .unwrap_or(0))
    }

    /// docs/clusterapi.md CAPI-34, CAPI-35, write: the bound in the direction of the change first,
    /// then a merge patch of the scale subresource that always carries the value (zero included).
    ///
    /// Deliberate difference: upstream checks both bounds on every write, so a group whose max
    /// was lowered below its replicas can never lose a node (the write refuses even the
    /// decrease). Here a decrease is checked against min only and an increase against max only:
    /// a group outside its bounds is not scaled further in the violating direction
    /// (docs/clusterapi.md CAPI-60), but can move back inside them.
    async fn set_size(&self, replicas: i64, change: SizeChange) -> Result<(), CloudError> {
        if change == SizeChange::Increase && replicas > self.max as i64 {
            return Err(CloudError::InvalidRequest(format!(
                "size increase too large - desired:{replicas} max:{}",
                self.max
            )));
        }
        if change == SizeChange::Decrease && replicas < self.min as i64 {
            return Err(CloudError::InvalidRequest(format!(
                "size decrease too large - desired:{replicas} min:{}",
                self.min
            )));
        }
        let patch = serde_json::json!({ "spec": { "replicas": replicas } });
        self.api()?
            .patch_scale(
                &self.object.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| api_error(&format!("scaling {} to {replicas}", self.id), e))?;
        *self.replicas.lock().unwrap_or_else(PoisonError::into_inner) = Some(replicas);
        tracing::info!(group = %self.id, replicas, "set replicas through the scale subresource");
        Ok(())
    }

    /// The infrastructure template of the resource (docs/clusterapi.md CAPI-47), looked up once. A
    /// reference that cannot be resolved is reported on the resource and counts as "no template".
    async fn infrastructure(&self) -> Option<Arc<DynamicObject>> {
        self.infrastructure
            .get_or_init(|| async {
                match self.lookup_infrastructure().await {
                    Ok(found) => found,
                    Err(problem) => {
                        self.shared
                            .events
                            .warn(&self.object, REASON_NO_TEMPLATE, &problem)
                            .await;
                        None
                    }
                }
            })
            .await
            .clone()
    }

    async fn lookup_infrastructure(&self) -> Result<Option<Arc<DynamicObject>>, String> {
        let Some(reference) =
            capacity::infrastructure_ref(&self.object).map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        let (group, version) = match (&reference.api_group, &reference.api_version) {
            (Some(group), _) => {
                let version = self
                    .shared
                    .infrastructure
                    .version_for_kind(group, &reference.kind)
                    .await
                    .map_err(|e| format!("{}: {e}", self.id))?;
                (group.clone(), version)
            }
            (None, Some(api_version)) => match api_version.split_once('/') {
                Some((group, version)) => (group.to_string(), version.to_string()),
                None => (String::new(), api_version.clone()),
            },
            (None, None) => {
                return Err(format!(
                    "{}: spec.template.spec.infrastructureRef has neither apiGroup nor apiVersion",
                    self.id
                ));
            }
        };
        let api_version = if group.is_empty() {
            version.clone()
        } else {
            format!("{group}/{version}")
        };
        let resource = ApiResource {
            group,
            version,
            api_version,
            kind: reference.kind.clone(),
            plural: reference.resource_plural(),
        };
        let found = self
            .shared
            .infrastructure
            .get(&resource, &self.namespace(), &reference.name)
            .await
            .map_err(|e| format!("{}: {e}", self.id))?;
        if found.is_none() {
            return Err(format!(
                "{}: infrastructure template {} {}/{} does not exist",
                self.id,
                reference.kind,
                self.namespace(),
                reference.name
            ));
        }
        Ok(found)
    }

    /// docs/clusterapi.md CAPI-47: the combined capacity when it allows scaling from zero.
    /// A malformed capacity annotation disables scaling from zero and is reported on the object.
    async fn scale_from_zero_capacity(&self) -> Option<()> {
        let infrastructure = self.infrastructure().await;
        match capacity::combined_capacity(&self.object, infrastructure.as_deref()) {
            Ok(combined) => capacity::can_scale_from_zero(&combined).then_some(()),
            Err(bad) => {
                self.shared
                    .events
                    .warn(&self.object, REASON_BAD_ANNOTATION, &bad.to_string())
                    .await;
                None
            }
        }
    }

    /// docs/clusterapi.md CAPI-26–CAPI-32: every instance of the group.
    fn instances(&self) -> Result<Vec<Instance>, CloudError> {
        Ok(self.instances_and_skipped()?.0)
    }

    /// The instances, and the Machines that give none (a node but no provider id to name it by).
    fn instances_and_skipped(&self) -> Result<(Vec<Instance>, Vec<DynamicObject>), CloudError> {
        if self.kind == ScalableKind::MachinePool {
            if instances::machine_pool_provider_ids(&self.object).is_none() {
                tracing::warn!(group = %self.id, "MachinePool has no spec.providerIDList yet");
            }
            return Ok((instances::machine_pool_instances(&self.object), Vec::new()));
        }
        let machines = self.shared.machines.store.state();
        let owned = instances::machines_of(
            &self.object,
            machines.iter().map(Arc::as_ref),
            &self.shared.config.keys,
        )
        .map_err(|e| CloudError::Provider(e.to_string()))?;
        let mut found = Vec::with_capacity(owned.len());
        let mut skipped = Vec::new();
        for machine in owned {
            match instances::machine_instance(machine, |name| self.shared.node_provider_id(name)) {
                Some(instance) => found.push(instance),
                None => skipped.push(machine.clone()),
            }
        }
        Ok((found, skipped))
    }

    /// docs/clusterapi.md CAPI-37, CAPI-38: marks the Machine with the delete annotation (GET then
    /// UPDATE).
    async fn mark_for_deletion(&self, machine: &DynamicObject) -> Result<(), CloudError> {
        let api = self.machines_api();
        let name = machine.name_any();
        let mut fresh = api
            .get(&name)
            .await
            .map_err(|e| api_error(&format!("reading Machine {name}"), e))?;
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        fresh
            .annotations_mut()
            .insert(self.shared.config.keys.delete_machine(), now);
        api.replace(&name, &PostParams::default(), &fresh)
            .await
            .map_err(|e| api_error(&format!("marking Machine {name} for deletion"), e))?;
        Ok(())
    }

    /// docs/clusterapi.md CAPI-38 rollback: best effort, errors ignored.
    async fn unmark(&self, machine: &DynamicObject) {
        let api = self.machines_api();
        let name = machine.name_any();
        let Ok(mut fresh) = api.get(&name).await else {
            return;
        };
        fresh
            .annotations_mut()
            .remove(&self.shared.config.keys.delete_machine());
        if let Err(error) = api.replace(&name, &PostParams::default(), &fresh).await {
            tracing::warn!(machine = %name, %error, "removing the delete-machine annotation again");
        }
    }
}

/// Which bound a replica write is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SizeChange {
    Increase,
    Decrease,
}

/// A Kubernetes API error as a provider error, saying what was being done.
fn api_error(doing: &str, error: kube::Error) -> CloudError {
    CloudError::Provider(format!("{doing}: {error}"))
}

#[async_trait]
impl NodeGroup for ClusterApiNodeGroup {
    fn id(&self) -> &str {
        &self.id
    }

    fn min_size(&self) -> usize {
        self.min
    }

    fn max_size(&self) -> usize {
        self.max
    }

    /// docs/clusterapi.md CAPI-20, with the cached replicas (the trait's `debug` is not async).
    fn debug(&self) -> String {
        let replicas = *self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
        scalable::debug_text(&self.id, self.min, self.max, replicas)
    }

    /// docs/clusterapi.md CAPI-33: `spec.replicas` of the copy the group was built from.
    async fn target_size(&self) -> Result<usize, CloudError> {
        let replicas = *self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
        let replicas = replicas.ok_or_else(|| {
            CloudError::Provider(format!("{}: spec.replicas is not set", self.id))
        })?;
        Ok(usize::try_from(replicas).unwrap_or(0))
    }

    /// docs/clusterapi.md CAPI-34, CAPI-62: increases arriving while a size change of the group
    /// is in flight go as one PATCH for their sum.
    async fn increase_size(&self, delta: usize) -> Result<(), CloudError> {
        if delta == 0 {
            return Err(CloudError::InvalidRequest(
                "size increase must be positive".to_string(),
            ));
        }
        let replicas = self
            .shared
            .resizes
            .increase(&self.id, delta, |resize| self.scale_up(resize))
            .await?;
        // The call may have been made through another object of the group.
        *self.replicas.lock().unwrap_or_else(PoisonError::into_inner) = Some(replicas);
        Ok(())
    }

    /// docs/clusterapi.md CAPI-37–CAPI-43: mark each Machine, then lower replicas by one, under the
    /// provider-wide lock, in the group's turn among its size changes (CAPI-62).
    async fn delete_nodes(&self, nodes: &[Node]) -> Result<(), CloudError> {
        let _serialised = self.shared.delete_lock.lock().await;
        self.shared
            .resizes
            .exclusive(&self.id, self.delete_machines(nodes))
            .await
    }

    /// docs/clusterapi.md CAPI-36, in the group's turn among its size changes (CAPI-62): never
    /// merged with increases, since its check against existing nodes holds only for itself.
    async fn decrease_target_size(&self, delta: i64) -> Result<(), CloudError> {
        self.shared
            .resizes
            .exclusive(&self.id, self.lower_target(delta))
            .await
    }
    /// docs/clusterapi.md CAPI-26–CAPI-32; a Machine that has a node but no provider id to name it
    /// by is skipped with a warning Event on it (it becomes an instance once its Node has a
    /// provider id).
    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        let (found, skipped) = self.instances_and_skipped()?;
        for machine in skipped {
            self.shared
                .events
                .warn(
                    &machine,
                    REASON_NO_PROVIDER_ID,
                    &format!(
                        "Machine {}/{} has a node but neither it nor its Node has a provider id: not counted as an instance of {}",
                        machine.namespace().unwrap_or_default(),
                        machine.name_any(),
                        self.id
                    ),
                )
                .await;
        }
        Ok(found)
    }

    /// docs/clusterapi.md CAPI-44–CAPI-53: a template node when the group can scale from zero.
    async fn template_node_info(&self) -> Result<NodeTemplate, CloudError> {
        self.scale_from_zero_template()
            .await?
            .map(|t| t.template)
            .ok_or(CloudError::NotImplemented)
    }

    /// docs/clusterapi.md CAPI-55: never an error; unparseable values were reported and keep their
    /// defaults.
    async fn get_options(&self) -> Result<Option<GroupOptions>, CloudError> {
        let (group_options, problems) =
            options::group_options(&self.object, &self.shared.config.keys);
        for problem in problems {
            self.shared
                .events
                .warn(&self.object, REASON_BAD_ANNOTATION, &problem.to_string())
                .await;
        }
        Ok(Some(group_options))
    }
}

impl ClusterApiNodeGroup {
    /// The whole scale-from-zero template (docs/clusterapi.md CAPI-44–CAPI-53), with the DRA
    /// part the engine's model does not use yet (the CSINode is in the simulated template too).
    pub async fn scale_from_zero_template(
        &self,
    ) -> Result<Option<ScaleFromZeroTemplate>, CloudError> {
        let infrastructure = self.infrastructure().await;
        let existing_node = self
            .instances()
            .ok()
            .and_then(|instances| instances.into_iter().next())
            .filter(|first| SyntheticId::parse(&first.id).is_none())
            .and_then(|first| {
                self.shared
                    .node_by_normalized_id(normalize_provider_id(&first.id))
            })
            .and_then(|node| ferroscale_objects::convert::node_from_k8s(&node).ok());
        let built = template::build_template(TemplateInput {
            resource: &self.object,
            keys: &self.shared.config.keys,
            default_arch: &self.shared.config.default_architecture,
            infrastructure: infrastructure.as_deref(),
            existing_node: existing_node.as_ref(),
            random_suffix: rand::random::<u64>() >> 1,
            now: Timestamp::from_system_time(std::time::SystemTime::now()),
        });
        match built {
            Ok(template) => {
                // Skipped label, taint and CSI items and template capacity entries: the template
                // is built without them, and the object says why.
                if let Some(built) = &template {
                    for problem in &built.skipped_items {
                        self.shared
                            .events
                            .warn(&self.object, REASON_BAD_ANNOTATION, &problem.to_string())
                            .await;
                    }
                    if let Some(infrastructure) = &infrastructure {
                        for problem in &built.skipped_capacity {
                            self.shared
                                .events
                                .warn(
                                    infrastructure,
                                    REASON_BAD_TEMPLATE_FIELD,
                                    &problem.to_string(),
                                )
                                .await;
                        }
                    }
                }
                Ok(template)
            }
            Err(bad) => {
                let message = bad.to_string();
                self.shared
                    .events
                    .warn(&self.object, REASON_BAD_ANNOTATION, &message)
                    .await;
                Ok(None)
            }
        }
    }
}
