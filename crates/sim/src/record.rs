//! What a simulation run leaves behind: one sample per engine loop, the timeline of decisions and
//! happenings, and the summary whose JSON shape is fixed by docs/scenario.md (`--output json`).
//!
//! The renderers in [`crate::report`] read only these types, so a run can be reported any number
//! of ways without re-running it.

use std::collections::BTreeMap;

use ferroscale_model::Timestamp;
use serde::Serialize;

/// The state of the cluster right after one engine loop.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopSample {
    pub at: Timestamp,
    /// Registered nodes per group, in the order of [`SimulationResult::group_ids`].
    pub nodes: Vec<usize>,
    /// Target sizes per group after the loop acted.
    pub targets: Vec<usize>,
    /// Workload pods waiting for a node.
    pub pending_pods: usize,
    /// Wall-clock time of the pure decision step, in milliseconds.
    pub decide_millis: f64,
    /// Nodes scale-down found unneeded in this loop.
    pub unneeded_nodes: usize,
    /// Node removals in progress (tainted, draining or being deleted) after the loop.
    pub nodes_being_deleted: usize,
    /// Nodes that left the cluster since the previous loop.
    pub nodes_removed: usize,
    /// Pods evicted by drains during the loop.
    pub pods_evicted: usize,
}

/// What kind of line a timeline entry is, for styling and filtering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// A scenario event fired (pods created or deleted, a node cordoned).
    Scenario,
    /// A group was scaled up.
    ScaleUp,
    /// Pending pods the engine could not help, with the reason per group.
    NotHelped,
    /// Nodes finished provisioning and registered.
    NodesReady,
    /// A cloud call failed or instances failed to be created.
    Failure,
    /// A group entered backoff.
    Backoff,
    /// Nodes started or stopped being unneeded (their scale-down timer started or was reset).
    Unneeded,
    /// Scale-down could not remove nodes that are unneeded or underutilized: the blocking pod and
    /// rule, min size, or a refused eviction.
    ScaleDownBlocked,
    /// Scale-down is in cooldown (after a scale-up, a deletion or a failure).
    Cooldown,
    /// A drain step: the deletion taint, evictions.
    Drain,
    /// Nodes removed by the autoscaler, or their removal started.
    ScaleDown,
    /// A scale-down step failed, and what was rolled back.
    ScaleDownFailure,
    /// An expectation was checked.
    Expectation,
    /// A ProvisioningRequest's condition changed (its life: accepted, provisioned, booking
    /// expired, failed), or an event about it.
    Request,
    /// A CapacityBuffer's headroom or conditions changed, or an event about it.
    Buffer,
    /// A CapacityQuota stopped or capped a scale-up.
    Quota,
    /// The cloud node controller initialized or deleted Nodes, or a Node outlived its machine
    /// in a group without a cloud-controller-manager.
    CloudNode,
}

impl EntryKind {
    pub fn label(&self) -> &'static str {
        match self {
            EntryKind::Scenario => "event",
            EntryKind::ScaleUp => "scale-up",
            EntryKind::NotHelped => "no scale-up",
            EntryKind::NodesReady => "ready",
            EntryKind::Failure => "failure",
            EntryKind::Backoff => "backoff",
            EntryKind::Unneeded => "unneeded",
            EntryKind::ScaleDownBlocked => "blocked",
            EntryKind::Cooldown => "cooldown",
            EntryKind::Drain => "drain",
            EntryKind::ScaleDown => "scale-down",
            EntryKind::ScaleDownFailure => "sd-failure",
            EntryKind::Expectation => "expect",
            EntryKind::Request => "provreq",
            EntryKind::Buffer => "buffer",
            EntryKind::Quota => "quota",
            EntryKind::CloudNode => "cloud-node",
        }
    }
}

/// One line of the timeline: what happened at `at` and why.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineEntry {
    pub at: Timestamp,
    pub kind: EntryKind,
    pub what: String,
    /// The reason, empty when the line explains itself.
    pub why: String,
}

/// Percentiles of a distribution (nearest rank); all zero for an empty one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(values: &mut [f64]) -> Percentiles {
        if values.is_empty() {
            return Percentiles::default();
        }
        values.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            let index = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1;
            values[index]
        };
        Percentiles {
            p50: rank(0.50),
            p99: rank(0.99),
            max: values[values.len() - 1],
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupSummary {
    /// The group's configured bounds (`minSize`, `maxSize` of the scenario).
    pub min_size: usize,
    pub max_size: usize,
    /// Registered nodes at the end.
    pub final_size: usize,
    /// Most registered nodes at any time.
    pub peak_size: usize,
    /// Successful size increases.
    pub scale_ups: usize,
    /// Nodes that registered during the run (initial nodes not counted).
    pub nodes_added: usize,
    pub nodes_removed: usize,
    /// The `IncreaseSize` calls the group received and their bursts (docs/scenario.md, "Resize
    /// calls and bursts").
    #[serde(flatten)]
    pub resize: crate::resize_calls::ResizeSummary,
    /// What became of the group's Node objects without a cloud-controller-manager (left out for
    /// a group with one that the cloud node controller never touched).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud_nodes: Option<CloudNodeSummary>,
}

/// A group's Nodes and the cloud node controller (docs/scenario.md, "Clouds without a
/// cloud-controller-manager").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudNodeSummary {
    /// Whether a cloud-controller-manager initializes the group's nodes and deletes their Node
    /// objects (`cloudControllerManager` of the scenario).
    pub cloud_controller_manager: bool,
    /// Nodes the cloud node controller initialized.
    pub initialized: usize,
    /// Node objects the cloud node controller deleted after their machine was gone.
    pub node_objects_deleted: usize,
    /// Node objects still there at the end whose machine is gone.
    pub left_behind: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSummary {
    /// Workload pods (DaemonSet pods excluded) that existed during the run: initial and created.
    pub created: usize,
    /// Bound at the end.
    pub running: usize,
    /// Waiting for a node at the end.
    pub pending: usize,
    /// Pending at the end and fitting neither any node nor any group's template: no scale-up can
    /// ever help them.
    pub never_schedulable: usize,
    /// From starting to wait for a node to being bound, over every pod that waited for the
    /// scheduler; a pod that never got a node counts as waiting until it was deleted or the run
    /// ended.
    pub wait_seconds: Percentiles,
    /// Pods that waited for a node and never got one (pending at the end, or deleted while
    /// pending): their waits are in `wait_seconds` up to the end.
    pub never_started: usize,
    /// Pods evicted by scale-down drains (each re-created pod counts as the same workload pod in
    /// `created`, `running` and `pending`).
    pub evicted: usize,
    /// Evicted pods that no controller re-created: workload lost. Should be 0.
    pub lost: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExpectationOutcome {
    pub description: String,
    pub ok: bool,
    /// What was observed, for failure messages.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub observed: String,
}

/// The `--output json` summary (docs/scenario.md). Fields may be added; a field whose name
/// misled (`maxSize` once held the peak, now `peakSize`) is changed only with a note in the docs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub scenario: String,
    pub simulated_seconds: u64,
    pub groups: BTreeMap<String, GroupSummary>,
    pub pods: PodSummary,
    /// Instance lifetime from the size increase that requested it, as clouds bill it.
    pub node_hours: f64,
    pub cost: f64,
    pub loops: usize,
    pub decide_millis: Percentiles,
    pub expectations: Vec<ExpectationOutcome>,
    /// ProvisioningRequests, CapacityBuffers and CapacityQuotas at the end (left out when the
    /// scenario has none).
    #[serde(skip_serializing_if = "CapacitySummary::is_empty")]
    pub capacity: CapacitySummary,
}

/// The capacity-API objects at the end of the run, with the life of each request.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacitySummary {
    pub provisioning_requests: Vec<RequestSummary>,
    pub buffers: Vec<BufferSummary>,
    pub quotas: Vec<QuotaSummary>,
}

impl CapacitySummary {
    pub fn is_empty(&self) -> bool {
        self.provisioning_requests.is_empty() && self.buffers.is_empty() && self.quotas.is_empty()
    }
}

/// A condition as it was set at a simulated time.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionRecord {
    pub at_seconds: f64,
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// One ProvisioningRequest: what it asked for and its life.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestSummary {
    /// `namespace/name`.
    pub name: String,
    pub class: String,
    /// Pods asked for, over all pod sets.
    pub pods: u64,
    pub created_seconds: f64,
    /// Where it ended: the last condition that holds (`Provisioned`, `Failed`,
    /// `BookingExpired`, `CapacityRevoked`, `Accepted`), or `Pending` when none does.
    pub state: String,
    /// Every condition change the engine wrote, in order.
    pub life: Vec<ConditionRecord>,
}

/// One CapacityBuffer: the headroom it stands for at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BufferSummary {
    /// `namespace/name`.
    pub name: String,
    /// `status.replicas`, once the controller resolved it.
    pub replicas: Option<i32>,
    /// `status.podTemplateRef`.
    pub pod_template: Option<String>,
    /// What one of its pods requests (from the pod template), when resolved.
    pub pod_cpu_milli: Option<i64>,
    pub pod_memory_bytes: Option<i64>,
    /// Its `ReadyForProvisioning` condition holds.
    pub ready: bool,
    pub conditions: Vec<ConditionRecord>,
}

/// One CapacityQuota: its limits, what the nodes it selects use at the end, and the scale-ups it
/// stopped or capped.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaSummary {
    pub name: String,
    pub selector: String,
    pub limits: BTreeMap<String, String>,
    pub usage: BTreeMap<String, String>,
    /// Events the engine raised about the quota (each a scale-up it stopped or capped).
    pub stopped_scale_ups: usize,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub last_reason: String,
}

impl Summary {
    pub fn all_expectations_hold(&self) -> bool {
        self.expectations.iter().all(|e| e.ok)
    }
}

/// Everything a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulationResult {
    pub summary: Summary,
    pub group_ids: Vec<String>,
    /// Registered nodes per group at time 0, in `group_ids` order.
    pub initial_nodes: Vec<usize>,
    pub scan_interval_secs: f64,
    pub samples: Vec<LoopSample>,
    pub timeline: Vec<TimelineEntry>,
    /// Remarks on what this run does not model, and scenario warnings.
    pub notes: Vec<String>,
    /// `data.status` of the status ConfigMap the engine last wrote (docs/behaviour.md ST-101), if
    /// any.
    pub final_status: Option<String>,
    /// Why the run stopped early: a scale-up would have made more nodes exist at once than a run
    /// may have (docs/scenario.md, "Limits"). The figures then cover the run up to that loop.
    pub node_limit_exceeded: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut values: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Percentiles::of(&mut values);
        assert_eq!((p.p50, p.p99, p.max), (50.0, 99.0, 100.0));
        let mut one = vec![7.0];
        assert_eq!(Percentiles::of(&mut one).p50, 7.0);
        assert_eq!(Percentiles::of(&mut []), Percentiles::default());
    }

    /// Checks docs/behaviour.md SIM-102.
    #[test]
    fn summary_serialises_with_the_documented_field_names() {
        let summary = Summary {
            scenario: "s".into(),
            simulated_seconds: 60,
            groups: BTreeMap::from([("g".to_string(), GroupSummary::default())]),
            pods: PodSummary::default(),
            node_hours: 1.5,
            cost: 0.0,
            loops: 6,
            decide_millis: Percentiles::default(),
            expectations: vec![ExpectationOutcome {
                description: "d".into(),
                ok: true,
                observed: String::new(),
            }],
            capacity: CapacitySummary::default(),
        };
        let json = serde_json::to_value(&summary).unwrap();
        for field in [
            "simulatedSeconds",
            "nodeHours",
            "decideMillis",
            "loops",
            "expectations",
        ] {
            assert!(json.get(field).is_some(), "{field} missing in {json}");
        }
        assert!(json["groups"]["g"].get("finalSize").is_some());
        for field in ["resizeCalls", "maxCallsPerBurst", "bursts"] {
            assert!(json["groups"]["g"].get(field).is_some(), "{field} missing");
        }
        assert!(json["pods"].get("neverSchedulable").is_some());
        assert!(json["pods"]["waitSeconds"].get("p99").is_some());
        assert!(json["expectations"][0].get("observed").is_none());
        assert!(
            json.get("capacity").is_none(),
            "no capacity objects, no section"
        );
    }
}
