//! The loop's CapacityBuffer steps (docs/capacity-buffers.md): the controller, which writes the
//! buffers' statuses and the managed PodTemplates of `scalableRef` buffers; injection of the
//! virtual pods into scale-up; and, once scale-up has placed them, `readyReplicas`. The pure
//! decisions are in [`ferroscale_capacity::buffers`]; these steps only read and write through the
//! [`ClusterApi`]. Every write happens only when something changed, and never with `--dry-run`.

use std::collections::HashSet;
use std::sync::Arc;

use ferroscale_model::capacity::{
    CapacityBuffer, CapacityBufferStatus, CapacityObjects, PodTemplate,
};
use ferroscale_model::{Pod, Timestamp};
use ferroscale_scheduling::Snapshot;

use crate::events::{Event, EventObject};
use crate::kubernetes::ClusterApi;
use ferroscale_capacity::buffers::{
    BufferSource, Injection, Resolved, buffer_source, handles_strategy, inject,
    managed_pod_template_name, ready_replicas, reasons, resolve_status,
};

use super::Autoscaler;

/// A buffer whose status the controller recomputed, and the managed template it made, if any.
struct Reconciled {
    index: usize,
    status: CapacityBufferStatus,
    managed: Option<Arc<PodTemplate>>,
}

impl Autoscaler {
    /// The buffer controller (`--capacity-buffer-controller-enabled`, docs/capacity-buffers.md
    /// CB-101–CB-107): resolves every buffer of the active-capacity strategy, oldest first,
    /// writes the statuses that changed, and leaves `capacity` as the API server now holds it
    /// (new statuses, managed templates), so injection in the same loop follows them.
    pub(super) async fn reconcile_buffers(
        &self,
        cluster: &dyn ClusterApi,
        capacity: &mut CapacityObjects,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) {
        if !self.options.capacity_buffer_controller_enabled || capacity.buffers.is_empty() {
            return;
        }
        let dry_run = self.options.dry_run;
        let mut order: Vec<usize> = (0..capacity.buffers.len()).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (&capacity.buffers[a], &capacity.buffers[b]);
            (a.creation_time, &a.namespace, &a.name).cmp(&(b.creation_time, &b.namespace, &b.name))
        });
        let mut reconciled: Vec<Reconciled> = Vec::new();
        for index in order {
            let buffer = &capacity.buffers[index];
            if !handles_strategy(buffer.spec.provisioning_strategy.as_deref()) {
                continue;
            }
            let Some(source) = buffer_source(buffer, capacity) else {
                continue;
            };
            let mut managed = None;
            let status = match source {
                BufferSource::Unresolved(message) => {
                    resolve_status(buffer, Resolved::Failed(message), now)
                }
                BufferSource::PodTemplate(template) => resolve_status(
                    buffer,
                    Resolved::Template {
                        name: &template.name,
                        generation: template.generation,
                        pod: &template.pod,
                        scalable_replicas: None,
                    },
                    now,
                ),
                BufferSource::Scalable(scalable) => {
                    let ensured = if dry_run {
                        // Nothing is written: the template the controller would keep.
                        let name = managed_pod_template_name(&buffer.name);
                        let generation = capacity
                            .pod_template(&buffer.namespace, &name)
                            .map_or(1, |t| t.generation);
                        Ok((name, generation))
                    } else {
                        cluster.ensure_buffer_pod_template(buffer, scalable).await
                    };
                    match (ensured, &scalable.pod) {
                        (Ok((name, generation)), Some(pod)) => {
                            let template = Arc::new(PodTemplate {
                                namespace: buffer.namespace.clone(),
                                name,
                                uid: String::new(),
                                generation,
                                pod: pod.clone(),
                            });
                            let status = resolve_status(
                                buffer,
                                Resolved::Template {
                                    name: &template.name,
                                    generation,
                                    pod,
                                    scalable_replicas: Some(scalable.replicas),
                                },
                                now,
                            );
                            managed = Some(template);
                            status
                        }
                        (Ok(_), None) => resolve_status(
                            buffer,
                            Resolved::Failed("no pod shape resolved".to_string()),
                            now,
                        ),
                        (Err(error), _) => {
                            let message =
                                format!("failed to create or update managed pod template: {error}");
                            events.push(update_failed(buffer, &message));
                            resolve_status(buffer, Resolved::Failed(message), now)
                        }
                    }
                }
            };
            if status != buffer.status || managed.is_some() {
                reconciled.push(Reconciled {
                    index,
                    status,
                    managed,
                });
            }
        }
        for Reconciled {
            index,
            status,
            managed,
        } in reconciled
        {
            let buffer = &mut capacity.buffers[index];
            if status != buffer.status {
                if !dry_run
                    && let Err(error) = cluster
                        .update_capacity_buffer_status(&buffer.namespace, &buffer.name, &status)
                        .await
                {
                    let message = format!("writing the status failed: {error}");
                    events.push(update_failed(buffer, &message));
                }
                Arc::make_mut(buffer).status = status;
            }
            if let Some(template) = managed {
                let templates = &mut capacity.pod_templates;
                match templates
                    .iter_mut()
                    .find(|t| t.namespace == template.namespace && t.name == template.name)
                {
                    Some(existing) => *existing = template,
                    None => templates.push(template),
                }
            }
        }
    }

    /// Injection (`--capacity-buffer-pod-injection-enabled`, docs/capacity-buffers.md CB-108,
    /// CB-109): the virtual pods of the ready buffers, with the `Provisioning` conditions that
    /// changed written back.
    pub(super) async fn inject_buffer_pods(
        &self,
        cluster: &dyn ClusterApi,
        capacity: &CapacityObjects,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Injection {
        if !self.options.capacity_buffer_pod_injection_enabled || capacity.buffers.is_empty() {
            return Injection::default();
        }
        let injection = inject(capacity, now);
        if !self.options.dry_run {
            for (buffer, status) in &injection.status_updates {
                write_status(cluster, buffer, status, events).await;
            }
        }
        injection
    }

    /// After scale-up: no event names a virtual pod (they exist only in this loop's plan), and
    /// with `--capacity-buffer-ready-replicas-enabled` each processed buffer's `readyReplicas`
    /// becomes the count of its virtual pods placed on existing nodes (docs/capacity-buffers.md
    /// CB-111, CB-112).
    pub(super) async fn report_buffer_pods(
        &self,
        cluster: &dyn ClusterApi,
        injection: &Injection,
        snapshot: &Snapshot,
        events: &mut Vec<Event>,
    ) {
        if !injection.pods.is_empty() {
            forget_virtual_pods(events, &injection.pods);
        }
        if !self.options.capacity_buffer_ready_replicas_enabled || self.options.dry_run {
            return;
        }
        for (buffer, status) in ready_replicas(snapshot, &injection.processed) {
            write_status(cluster, &buffer, &status, events).await;
        }
    }
}

/// Writes a buffer's status; a failure becomes a warning event on the buffer (the next loop
/// tries again, since the status read back still differs).
async fn write_status(
    cluster: &dyn ClusterApi,
    buffer: &CapacityBuffer,
    status: &CapacityBufferStatus,
    events: &mut Vec<Event>,
) {
    if let Err(error) = cluster
        .update_capacity_buffer_status(&buffer.namespace, &buffer.name, status)
        .await
    {
        events.push(update_failed(
            buffer,
            &format!("writing the status failed: {error}"),
        ));
    }
}

fn update_failed(buffer: &CapacityBuffer, message: &str) -> Event {
    Event::warning(
        EventObject::CapacityBuffer(buffer.key()),
        reasons::UPDATE_FAILED,
        message.to_string(),
    )
}

/// Drops the events about virtual pods: nobody can look them up.
fn forget_virtual_pods(events: &mut Vec<Event>, pods: &[Arc<Pod>]) {
    let keys: HashSet<String> = pods.iter().map(|p| p.key()).collect();
    events.retain(|e| !matches!(&e.object, EventObject::Pod(key) if keys.contains(key)));
}
