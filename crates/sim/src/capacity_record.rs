//! What the reports show of the capacity APIs: timeline lines when a request's or a buffer's
//! condition changes, when a buffer's headroom changes and when the engine says something about a
//! request, buffer or quota; and the end-of-run summary (each request's life, each buffer's
//! headroom, each quota's limits, usage and the scale-ups it stopped).

use std::collections::BTreeMap;

use ferroscale_core::events::{Event, EventObject};
use ferroscale_model::{CapacityBuffer, ConditionStatus, Timestamp, provisioning_conditions};

use crate::capacity::{CapacityObjectRef, ConditionChange, quota_usage};
use crate::cluster::Cluster;
use crate::record::{
    BufferSummary, CapacitySummary, ConditionRecord, EntryKind, QuotaSummary, RequestSummary,
    TimelineEntry,
};

/// The buffer condition that says its pods are resolved and may be provisioned.
const BUFFER_READY_CONDITION: &str = "ReadyForProvisioning";

/// Where a request ended, latest first: the first of these that holds names its state.
const REQUEST_STATES: &[&str] = &[
    provisioning_conditions::CAPACITY_REVOKED,
    provisioning_conditions::BOOKING_EXPIRED,
    provisioning_conditions::FAILED,
    provisioning_conditions::PROVISIONED,
    provisioning_conditions::ACCEPTED,
];

/// What a buffer's status says about its headroom: replicas, template and its generation.
type Headroom = (Option<i32>, Option<String>, Option<i64>);

/// Remembers, between loops, what the timeline already said about the capacity objects.
#[derive(Debug, Default)]
pub struct CapacityRecorder {
    headroom: BTreeMap<String, Headroom>,
    /// Per quota: events about it so far and the last one's message.
    quota_stops: BTreeMap<String, (usize, String)>,
}

pub(crate) fn status_word(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

fn seconds(at: Timestamp) -> f64 {
    at.millis() as f64 / 1000.0
}

/// `2 × (500 mCPU, 1Gi)` for a buffer whose template is known.
fn headroom_words(cluster: &Cluster, buffer: &CapacityBuffer) -> String {
    let replicas = buffer.status.replicas.unwrap_or(0);
    let shape = buffer
        .status
        .pod_template_ref
        .as_deref()
        .and_then(|t| {
            cluster
                .capacity()
                .objects()
                .pod_template(&buffer.namespace, t)
        })
        .map(|t| {
            format!(
                "{} mCPU, {}",
                t.pod.requests.cpu_milli,
                ferroscale_model::resources::format_bytes(t.pod.requests.memory)
            )
        })
        .unwrap_or_else(|| "shape not resolved".to_string());
    format!("{replicas} × ({shape})")
}

impl CapacityRecorder {
    /// Timeline lines for one loop: condition changes the engine's writes made, headroom changes,
    /// and the engine's events about requests, buffers and quotas.
    pub fn after_loop(
        &mut self,
        now: Timestamp,
        cluster: &Cluster,
        conditions: &[ConditionChange],
        events: &[Event],
    ) -> Vec<TimelineEntry> {
        let mut entries = Vec::new();
        for change in conditions {
            let (kind, object) = match &change.object {
                CapacityObjectRef::ProvisioningRequest(key) => {
                    (EntryKind::Request, format!("provisioningrequest/{key}"))
                }
                CapacityObjectRef::CapacityBuffer(key) => {
                    (EntryKind::Buffer, format!("capacitybuffer/{key}"))
                }
            };
            entries.push(TimelineEntry {
                at: now,
                kind,
                what: format!(
                    "{object}: {}={} ({})",
                    change.type_,
                    status_word(change.status),
                    change.reason
                ),
                why: change.message.clone(),
            });
        }
        for buffer in &cluster.capacity().objects().buffers {
            let now_headroom = (
                buffer.status.replicas,
                buffer.status.pod_template_ref.clone(),
                buffer.status.pod_template_generation,
            );
            if now_headroom.0.is_none() && now_headroom.1.is_none() {
                continue;
            }
            if self.headroom.get(&buffer.key()) == Some(&now_headroom) {
                continue;
            }
            self.headroom.insert(buffer.key(), now_headroom);
            entries.push(TimelineEntry {
                at: now,
                kind: EntryKind::Buffer,
                what: format!(
                    "capacitybuffer/{} keeps headroom for {}",
                    buffer.key(),
                    headroom_words(cluster, buffer)
                ),
                why: format!(
                    "pod template {}",
                    buffer.status.pod_template_ref.as_deref().unwrap_or("-")
                ),
            });
        }
        for event in events {
            let kind = match &event.object {
                EventObject::ProvisioningRequest(_) => EntryKind::Request,
                EventObject::CapacityBuffer(_) => EntryKind::Buffer,
                EventObject::CapacityQuota(name) => {
                    let stops = self.quota_stops.entry(name.clone()).or_default();
                    stops.0 += 1;
                    stops.1 = event.message.clone();
                    EntryKind::Quota
                }
                _ => continue,
            };
            entries.push(TimelineEntry {
                at: now,
                kind,
                what: format!("{} on {}", event.reason, event.object),
                why: event.message.clone(),
            });
        }
        entries
    }

    /// The capacity objects at the end of the run.
    pub fn summary(&self, cluster: &Cluster) -> CapacitySummary {
        let capacity = cluster.capacity();
        let objects = capacity.objects();
        let record = |c: &ConditionChange| ConditionRecord {
            at_seconds: seconds(c.at),
            type_: c.type_.clone(),
            status: status_word(c.status).to_string(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        };
        let provisioning_requests = objects
            .provisioning_requests
            .iter()
            .map(|r| {
                let key = CapacityObjectRef::ProvisioningRequest(r.key());
                let state = REQUEST_STATES
                    .iter()
                    .find(|t| r.condition(t).is_some_and(|c| c.is_true()))
                    .map_or("Pending", |t| *t);
                RequestSummary {
                    name: r.key(),
                    class: r.class.clone(),
                    pods: r.pod_sets.iter().map(|s| u64::from(s.count)).sum(),
                    created_seconds: seconds(r.creation_time),
                    state: state.to_string(),
                    life: capacity
                        .history()
                        .iter()
                        .filter(|c| c.object == key)
                        .map(record)
                        .collect(),
                }
            })
            .collect();
        let buffers = objects
            .buffers
            .iter()
            .map(|b| {
                let key = CapacityObjectRef::CapacityBuffer(b.key());
                let template = b
                    .status
                    .pod_template_ref
                    .as_deref()
                    .and_then(|t| objects.pod_template(&b.namespace, t));
                BufferSummary {
                    name: b.key(),
                    replicas: b.status.replicas,
                    pod_template: b.status.pod_template_ref.clone(),
                    pod_cpu_milli: template.map(|t| t.pod.requests.cpu_milli),
                    pod_memory_bytes: template.map(|t| t.pod.requests.memory),
                    ready: b
                        .status
                        .conditions
                        .iter()
                        .any(|c| c.type_ == BUFFER_READY_CONDITION && c.is_true()),
                    conditions: capacity
                        .history()
                        .iter()
                        .filter(|c| c.object == key)
                        .map(record)
                        .collect(),
                }
            })
            .collect();
        let quotas = objects
            .quotas
            .iter()
            .map(|q| {
                let (stopped, last) = self.quota_stops.get(&q.name).cloned().unwrap_or_default();
                let usage = quota_usage(q, cluster.nodes().map(|n| n.node.as_ref()));
                QuotaSummary {
                    name: q.name.clone(),
                    selector: match &q.selector {
                        Some(s)
                            if !s.match_labels.is_empty() || !s.match_expressions.is_empty() =>
                        {
                            crate::runner::describe_selector(s)
                        }
                        _ => "every node".to_string(),
                    },
                    limits: q
                        .limits
                        .iter()
                        .map(|(k, v)| (k.clone(), v.to_string()))
                        .collect(),
                    usage: usage.into_iter().map(|(k, v)| (k, v.to_string())).collect(),
                    stopped_scale_ups: stopped,
                    last_reason: last,
                }
            })
            .collect();
        CapacitySummary {
            provisioning_requests,
            buffers,
            quotas,
        }
    }
}
