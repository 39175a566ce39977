//! Scenario files for `ferroscale simulate` (format: docs/scenario.md): node groups with templates,
//! initial cluster objects, a timed workload and expectations, parsed once into typed values.

use std::path::Path;
use std::time::Duration;

use ferroscale_core::cloud::ErrorClass;
use ferroscale_model::time::format_duration;
use ferroscale_model::{
    ConditionStatus, CsiNodeDriver, DeviceAttribute, LabelSelector, Node, Pod, Quantity,
};
use ferroscale_objects::{
    ConvertError, K8sObject, ObjectsError, PriorityClasses, RawObject, locate_field_line,
    node_from_k8s, pod_from_k8s, read_documents, unknown_field,
};
use serde_yaml_ng::{Mapping, Value};
use thiserror::Error;

use crate::dra::GroupDevices;

mod arrival;
mod bundled;
mod limits;
mod raw;
mod selector;
#[cfg(test)]
mod tests;

pub use bundled::{BUNDLED, DEFAULT_SCENARIO, bundled, bundled_names, default_scenario};
pub use limits::{
    Limits, MIN_SCAN_INTERVAL, ReadError, TooDeep, check_nesting, group_digits, read_bounded,
};
pub use selector::parse_label_selector;

/// A parsed, validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    /// Simulated time to run.
    pub duration: Duration,
    /// Every random choice of the run derives from this seed.
    pub seed: u64,
    /// Autoscaler flags by upstream name (no leading dashes) with their values as strings, in file
    /// order. Not validated here: the CLI applies them to its options.
    pub options: Vec<(String, String)>,
    pub node_groups: Vec<ScenarioNodeGroup>,
    /// Initial cluster objects (bound pods, pending pods, PDBs, DaemonSets, PriorityClasses, ...).
    pub objects: Vec<K8sObject>,
    /// Sorted by `at` (stable: events at the same time keep file order).
    pub events: Vec<ScenarioEvent>,
    pub expect: Vec<Expectation>,
    /// Non-fatal findings, e.g. objects of kinds the simulator ignores (Services, Deployments).
    pub warnings: Vec<String>,
    /// The most nodes that may exist at once while the run plays ([`Limits::nodes`]): a scale-up
    /// that would go past it stops the run with an error instead of allocating them.
    pub node_limit: usize,
}

pub const DEFAULT_SEED: u64 = 1;

/// The most devices of one driver a group's node publishes (one ResourceSlice holds 128).
pub const MAX_DEVICES_PER_DRIVER: usize = 128;
/// The most attributes and capacities of one device together, as the API allows.
pub const MAX_DEVICE_PROPERTIES: usize = 32;
/// The most `devices` entries of one group.
pub const MAX_DEVICE_ENTRIES: usize = 16;
/// The longest driver name (a DNS subdomain).
const MAX_DRIVER_NAME: usize = 253;

/// `MAJOR.MINOR.PATCH` with optional pre-release and build parts, as CEL's semver reads it.
fn is_semver(text: &str) -> bool {
    let core = text.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}
pub const DEFAULT_PROVISIONING_DELAY: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct ScenarioNodeGroup {
    pub id: String,
    pub min_size: usize,
    pub max_size: usize,
    /// Ready, empty nodes at time 0, named `<id>-<n>` from 0.
    pub initial_size: usize,
    /// Time from IncreaseSize to the node being Ready.
    pub provisioning_delay: Duration,
    pub failures: Vec<FailureWindow>,
    pub price_per_hour: Option<f64>,
    /// The node every new instance of the group is made from. Name defaults to `<id>-template`;
    /// capacity and allocatable default to each other; it is Ready unless the template says
    /// otherwise. The hostname label is left to whoever instantiates nodes.
    pub template: Node,
    /// Node objects of `objects:`, by name, that are instances of this group at time 0 (besides
    /// the `initial_size` empty ones): a live cluster's nodes keep their names, pods and state.
    pub nodes: Vec<String>,
    /// `csiDrivers`: the CSI drivers the group's nodes report in their CSINode (and its
    /// template with them), with their volume limits.
    pub csi_drivers: Vec<CsiNodeDriver>,
    /// `devices`: the DRA devices the group's nodes publish as node-local ResourceSlices (and
    /// its template with them).
    pub devices: Vec<GroupDevices>,
    /// `cloudControllerManager` (default true): `false` makes the group a cloud without a
    /// cloud-controller-manager — the nodes it adds register with the
    /// `node.cloudprovider.kubernetes.io/uninitialized` taint and without the template's zone,
    /// region and instance-type labels, and a Node whose machine is gone stays, not Ready, until
    /// something deletes it (`cloud-node-controller` in `options:`).
    pub cloud_controller_manager: bool,
}

/// Cloud provider calls a failure window can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloudOperation {
    IncreaseSize,
    DeleteNodes,
    DecreaseTargetSize,
    /// Not a call: `IncreaseSize` succeeds, but the instances requested inside the window are never
    /// created; they stay `Creating` with an error, as after a stockout or a quota error.
    InstanceCreation,
}

/// Calls of `operation` made at simulated times in `[from, to)` fail with `error_class`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureWindow {
    pub operation: CloudOperation,
    pub from: Duration,
    pub to: Duration,
    pub error_class: ErrorClass,
}

impl FailureWindow {
    pub fn covers(&self, at: Duration) -> bool {
        self.from <= at && at < self.to
    }
}

#[derive(Debug, Clone)]
pub struct ScenarioEvent {
    pub at: Duration,
    pub action: ScenarioAction,
}

// Scenarios hold a handful of events; boxing the pod would only add indirection for readers.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum ScenarioAction {
    /// A PodTemplate, ProvisioningRequest, CapacityBuffer or CapacityQuota appears in the
    /// cluster.
    CreateObject(K8sObject),
    /// `count` copies of `pod`; with `count > 1` the copies are named `<name>-<i>` (i from 0).
    Create {
        count: usize,
        pod: Pod,
        /// Where the copies are bound; `None`: they wait for the scheduler stand-in.
        bind: Option<PodPlacement>,
        /// `Some(k)`: one step of a `create` spread over time by its `rate`, whose copies are
        /// named `<name>-<k + i>` whatever `count` (see [`copy_name`]).
        first_copy: Option<usize>,
        /// Pods the same `create` makes in its later steps (0 without a `rate`): its controller
        /// already wants them, as a ReplicaSet's `spec.replicas` counts the pods it has not
        /// created yet, so proactive scale-up can ask for their nodes.
        still_to_create: usize,
    },
    /// Deletes pods whose labels match; `count: None` deletes all of them.
    Delete {
        selector: LabelSelector,
        count: Option<usize>,
    },
    Cordon {
        node: String,
    },
    Uncordon {
        node: String,
    },
    /// The cloud loses the node's machine (it dies or is deleted behind the autoscaler's back).
    RemoveNode {
        node: String,
    },
    /// A workload controller is deleted with `--cascade=orphan`: its pods keep running, but
    /// nothing re-creates them and the controller no longer exists for scale-down.
    DeleteController {
        kind: String,
        namespace: String,
        name: String,
    },
}

/// The name of copy `i` of a `create` of `count` copies of a pod named `base`; `None` keeps the
/// pod's own name (a single copy of an ordinary `create`).
pub fn copy_name(base: &str, count: usize, first_copy: Option<usize>, i: usize) -> Option<String> {
    match first_copy {
        Some(first) => Some(format!("{base}-{}", first.saturating_add(i))),
        None if count > 1 => Some(format!("{base}-{i}")),
        None => None,
    }
}

/// Binds created copies to existing nodes `<node_prefix><index>`: copy `i` goes to index
/// `first_index + i / pods_per_node`. A copy whose node does not exist waits for the scheduler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPlacement {
    pub node_prefix: String,
    pub first_index: usize,
    pub pods_per_node: usize,
}

impl PodPlacement {
    /// The node copy `copy` is bound to.
    pub fn node_for(&self, copy: usize) -> String {
        let index = self
            .first_index
            .saturating_add(copy / self.pods_per_node.max(1));
        format!("{}{index}", self.node_prefix)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckTime {
    End,
    At(Duration),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Node count of a group (all nodes the group has, Ready or not) within `[min, max]`.
    GroupNodes {
        group: String,
        min: usize,
        max: usize,
    },
    PendingPods(usize),
    RunningPods(usize),
    /// Total node count of the cluster within `[min, max]`.
    TotalNodes {
        min: usize,
        max: usize,
    },
    /// Nodes removed so far (by the autoscaler or the cloud), of one group or of all, within
    /// `[min, max]`.
    NodesRemoved {
        group: Option<String>,
        min: usize,
        max: usize,
    },
    /// Workload pods gone without being deleted by the scenario and without a replacement (an
    /// evicted pod no controller re-created): should always be 0.
    LostPods(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    pub at: CheckTime,
    pub check: Check,
}

/// An invalid scenario: names the file, the line (when known) and the field path.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{origin}{}: {}{message}", line.map(|l| format!(":{l}")).unwrap_or_default(), if field.is_empty() { String::new() } else { format!("{field}: ") })]
pub struct ScenarioError {
    pub origin: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// Field path such as `nodeGroups[1].maxSize`; empty for the whole file.
    pub field: String,
    pub message: String,
}

/// Reads and parses a scenario file; `file:` references resolve relative to its directory.
pub fn load_scenario(path: &Path) -> Result<Scenario, ScenarioError> {
    load_scenario_with(path, &Limits::DEFAULT)
}

/// [`load_scenario`] within the given limits.
pub fn load_scenario_with(path: &Path, limits: &Limits) -> Result<Scenario, ScenarioError> {
    let text = read_scenario_text(path, limits)?;
    let base_dir = path.parent().unwrap_or_else(|| Path::new("."));
    parse_scenario_with(&text, &path.display().to_string(), base_dir, limits)
}

/// The text of a scenario file: a regular file of at most `limits.file_bytes`.
pub fn read_scenario_text(path: &Path, limits: &Limits) -> Result<String, ScenarioError> {
    read_bounded(path, limits.file_bytes.min(limits.total_bytes)).map_err(|e| ScenarioError {
        origin: path.display().to_string(),
        line: None,
        field: String::new(),
        message: format!("cannot read the scenario: {e}"),
    })
}

pub const API_VERSION: &str = "ferroscale/v1alpha1";
pub const KIND: &str = "Scenario";

/// Parses scenario text. `origin` names it in messages; `base_dir` resolves `file:` references.
pub fn parse_scenario(
    text: &str,
    origin: &str,
    base_dir: &Path,
) -> Result<Scenario, ScenarioError> {
    parse_scenario_with(text, origin, base_dir, &Limits::DEFAULT)
}

/// [`parse_scenario`] within the given limits.
pub fn parse_scenario_with(
    text: &str,
    origin: &str,
    base_dir: &Path,
    limits: &Limits,
) -> Result<Scenario, ScenarioError> {
    let whole_file = |line: Option<usize>, message: String| ScenarioError {
        origin: origin.to_string(),
        line,
        field: String::new(),
        message,
    };
    let size = text.len() as u64;
    if size > limits.file_bytes.min(limits.total_bytes) {
        return Err(whole_file(
            None,
            ReadError::TooLarge {
                size,
                limit: limits.file_bytes.min(limits.total_bytes),
            }
            .to_string(),
        ));
    }
    check_nesting(text, limits.depth).map_err(|e| whole_file(Some(e.line), too_deep(e)))?;
    let raw = read_raw(text, origin)?;
    Validator {
        text,
        origin,
        base_dir,
        limits,
    }
    .scenario(raw)
}

fn too_deep(e: TooDeep) -> String {
    format!(
        "YAML nested more than {} levels deep; a scenario may nest at most {} levels",
        e.limit, e.limit
    )
}

/// Strips what serde_yaml_ng appends and prepends (position and path) from its messages: the error
/// carries both separately.
fn bare_message(message: &str, path: &str) -> String {
    let message = match message.rfind(" at line ") {
        Some(i) if message[i + 9..].contains(" column ") => &message[..i],
        _ => message,
    };
    let message = message
        .strip_prefix(&format!("{path}: "))
        .unwrap_or(message);
    message.to_string()
}

fn read_raw(text: &str, origin: &str) -> Result<raw::RawScenario, ScenarioError> {
    let deserializer = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { String::new() } else { path };
        let inner = e.into_inner();
        ScenarioError {
            origin: origin.to_string(),
            line: inner.location().map(|l| l.line()),
            message: bare_message(&inner.to_string(), &field),
            field,
        }
    })
}

/// Checks the raw scenario and converts it; knows the text so errors found after parsing can be
/// given a line.
struct Validator<'a> {
    text: &'a str,
    origin: &'a str,
    base_dir: &'a Path,
    limits: &'a Limits,
}

impl Validator<'_> {
    fn error(&self, field: impl Into<String>, message: impl Into<String>) -> ScenarioError {
        let field = field.into();
        ScenarioError {
            origin: self.origin.to_string(),
            line: locate_field_line(self.text, &field),
            field,
            message: message.into(),
        }
    }

    fn convert_error(&self, prefix: &str, e: ConvertError) -> ScenarioError {
        self.error(
            format!("{prefix}.{}", e.field),
            format!("{}: {} (value {:?})", e.object, e.message, e.value),
        )
    }

    fn scenario(&self, raw: raw::RawScenario) -> Result<Scenario, ScenarioError> {
        if raw.api_version != API_VERSION {
            return Err(self.error(
                "apiVersion",
                format!("expected {API_VERSION}, found {:?}", raw.api_version),
            ));
        }
        if raw.kind != KIND {
            return Err(self.error("kind", format!("expected {KIND}, found {:?}", raw.kind)));
        }
        self.check_sizes(&raw)?;
        self.check_times(&raw)?;
        let created_pods = self.check_created_pods(&raw.events)?;
        self.check_known_fields(&raw)?;
        let options = self.options(&raw.options)?;

        let mut node_groups: Vec<ScenarioNodeGroup> = Vec::new();
        let mut group_nodes = 0usize;
        for (i, group) in raw.node_groups.into_iter().enumerate() {
            let group = self.node_group(i, group)?;
            if node_groups.iter().any(|g| g.id == group.id) {
                return Err(self.error(
                    format!("nodeGroups[{i}].id"),
                    format!("duplicate node group id {:?}", group.id),
                ));
            }
            // Only the nodes that exist at time 0 count here: a group's maxSize is what the cloud
            // would allow, not what the run creates (a replayed cluster's groups often say 1000
            // each), so nodes created later are bounded while the run plays (`node_limit`).
            group_nodes = group_nodes.saturating_add(group.initial_size);
            if group_nodes > self.limits.nodes {
                return Err(self.error(
                    format!("nodeGroups[{i}].initialSize"),
                    format!(
                        "the node groups' initial sizes add up to {} here, more than the {} nodes \
                         a scenario may have",
                        group_digits(group_nodes as u64),
                        group_digits(self.limits.nodes as u64)
                    ),
                ));
            }
            node_groups.push(group);
        }

        let mut warnings = Vec::new();
        let objects = self.objects(&raw.objects, &raw.events, &mut warnings)?;
        self.check_object_totals(&objects.objects, group_nodes, created_pods)?;
        self.check_group_members(&node_groups, &objects.objects)?;

        let mut expect = Vec::new();
        for (i, expectation) in raw.expect.into_iter().enumerate() {
            expect.push(self.expectation(i, expectation, &node_groups)?);
        }

        Ok(Scenario {
            name: raw.name,
            duration: raw.duration.0,
            seed: raw.seed.unwrap_or(DEFAULT_SEED),
            options,
            node_groups,
            objects: objects.objects,
            events: objects.events,
            expect,
            warnings,
            node_limit: self.limits.nodes,
        })
    }

    /// Counts and the simulated duration, before anything is read or converted.
    fn check_sizes(&self, raw: &raw::RawScenario) -> Result<(), ScenarioError> {
        let files = raw.objects.iter().filter(|o| o.file.is_some()).count();
        for (field, count, limit, what) in [
            (
                "nodeGroups",
                raw.node_groups.len(),
                self.limits.node_groups,
                "node groups",
            ),
            ("events", raw.events.len(), self.limits.events, "events"),
            (
                "expect",
                raw.expect.len(),
                self.limits.expectations,
                "expectations",
            ),
            ("objects", files, self.limits.object_files, "objects files"),
        ] {
            if count > limit {
                return Err(self.error(
                    field,
                    format!(
                        "{} {what}; a scenario may have at most {}",
                        group_digits(count as u64),
                        group_digits(limit as u64)
                    ),
                ));
            }
        }
        if raw.duration.0 > self.limits.duration {
            return Err(self.error(
                "duration",
                format!(
                    "{} is longer than the {} a scenario may last",
                    format_duration(raw.duration.0),
                    format_duration(self.limits.duration)
                ),
            ));
        }
        Ok(())
    }

    /// Events and expectations inside the simulated time: one after the end would never happen
    /// (or, for an expectation, be checked at another time than it says).
    fn check_times(&self, raw: &raw::RawScenario) -> Result<(), ScenarioError> {
        let end = raw.duration.0;
        let after_end = |what: &str, at: Duration| {
            format!(
                "{what} at {} is after the end of the scenario (duration {})",
                format_duration(at),
                format_duration(end)
            )
        };
        for (i, event) in raw.events.iter().enumerate() {
            if event.at.0 > end {
                return Err(self.error(
                    format!("events[{i}].at"),
                    after_end("the event", event.at.0),
                ));
            }
        }
        for (i, expectation) in raw.expect.iter().enumerate() {
            if let raw::RawCheckTime::At(at) = expectation.at
                && at > end
            {
                return Err(self.error(format!("expect[{i}].at"), after_end("the expectation", at)));
            }
        }
        Ok(())
    }

    /// Pods the events create over the run, refused before any of them exists.
    fn check_created_pods(&self, events: &[raw::RawEvent]) -> Result<usize, ScenarioError> {
        let limit = self.limits.pods as u64;
        let mut total = 0u64;
        for (i, event) in events.iter().enumerate() {
            let Some(count) = event
                .create
                .as_ref()
                .filter(|c| c.pod.is_some())
                .map(|c| c.count.unwrap_or(1))
            else {
                continue;
            };
            total = total.saturating_add(count);
            if total > limit {
                let message = if count > limit {
                    format!(
                        "count {count} is more than the {} pods a scenario may create",
                        group_digits(limit)
                    )
                } else {
                    format!(
                        "the events create {} pods up to here, more than the {} a scenario may \
                         create",
                        group_digits(total),
                        group_digits(limit)
                    )
                };
                return Err(self.error(format!("events[{i}].create.count"), message));
            }
        }
        Ok(usize::try_from(total).unwrap_or(usize::MAX))
    }

    /// Nodes and pods of `objects:` on top of the groups' nodes and the events' pods.
    fn check_object_totals(
        &self,
        objects: &[K8sObject],
        group_nodes: usize,
        created_pods: usize,
    ) -> Result<(), ScenarioError> {
        let nodes = objects
            .iter()
            .filter(|o| matches!(o, K8sObject::Node(_)))
            .count();
        let pods = objects
            .iter()
            .filter(|o| matches!(o, K8sObject::Pod(_)))
            .count();
        if group_nodes.saturating_add(nodes) > self.limits.nodes {
            return Err(self.error(
                "objects",
                format!(
                    "{} Node objects and the node groups' initial sizes ({}) add up to more \
                     than the {} nodes a scenario may have",
                    group_digits(nodes as u64),
                    group_digits(group_nodes as u64),
                    group_digits(self.limits.nodes as u64)
                ),
            ));
        }
        if created_pods.saturating_add(pods) > self.limits.pods {
            return Err(self.error(
                "objects",
                format!(
                    "{} Pod objects and the {} pods the events create add up to more than the {} \
                     pods a scenario may have",
                    group_digits(pods as u64),
                    group_digits(created_pods as u64),
                    group_digits(self.limits.pods as u64)
                ),
            ));
        }
        Ok(())
    }

    /// Every node a group names under `nodes:` is a Node object of `objects:`, in one group only.
    fn check_group_members(
        &self,
        groups: &[ScenarioNodeGroup],
        objects: &[K8sObject],
    ) -> Result<(), ScenarioError> {
        let nodes: std::collections::HashSet<&str> = objects
            .iter()
            .filter_map(|o| match o {
                K8sObject::Node(n) => Some(n.name.as_str()),
                _ => None,
            })
            .collect();
        let mut owner: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
        for (i, group) in groups.iter().enumerate() {
            for (j, name) in group.nodes.iter().enumerate() {
                let field = format!("nodeGroups[{i}].nodes[{j}]");
                if !nodes.contains(name.as_str()) {
                    return Err(self.error(
                        field,
                        format!("no Node object named {name:?} in `objects:`"),
                    ));
                }
                if let Some(other) = owner.insert(name, &group.id) {
                    return Err(self.error(
                        field,
                        format!("node {name:?} is already an instance of group {other:?}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Node templates and event pods are read strictly, like the objects files: a field the
    /// Kubernetes type does not have is refused instead of silently dropped.
    fn check_known_fields(&self, raw: &raw::RawScenario) -> Result<(), ScenarioError> {
        // The text already parsed once into the typed scenario, so it parses as a tree too.
        let Ok(tree) = serde_yaml_ng::from_str::<Value>(self.text) else {
            return Ok(());
        };
        let unknown = |prefix: String, field: String| {
            let name = field.rsplit('.').next().unwrap_or(&field).to_string();
            self.error(
                format!("{prefix}.{field}"),
                format!("unknown field `{name}`"),
            )
        };
        let groups = tree.get("nodeGroups");
        for (i, group) in raw.node_groups.iter().enumerate() {
            let written = groups
                .and_then(|g| g.get(i))
                .and_then(|g| g.get("template"));
            if let Some(field) = written.and_then(|w| unknown_field(w, &group.template)) {
                return Err(unknown(format!("nodeGroups[{i}].template"), field));
            }
        }
        let events = tree.get("events");
        for (i, event) in raw.events.iter().enumerate() {
            let Some(pod) = event.create.as_ref().and_then(|c| c.pod.as_ref()) else {
                continue;
            };
            let written = events
                .and_then(|e| e.get(i))
                .and_then(|e| e.get("create"))
                .and_then(|c| c.get("pod"));
            if let Some(field) = written.and_then(|w| unknown_field(w, pod)) {
                return Err(unknown(format!("events[{i}].create.pod"), field));
            }
        }
        Ok(())
    }

    fn options(&self, options: &Mapping) -> Result<Vec<(String, String)>, ScenarioError> {
        let mut out = Vec::new();
        for (key, value) in options {
            let Some(name) = key.as_str() else {
                return Err(self.error(
                    "options",
                    format!("option names must be strings, found {key:?}"),
                ));
            };
            let value = match value {
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                other => {
                    return Err(self.error(
                        format!("options.{name}"),
                        format!("expected a string, number or boolean, found {other:?}"),
                    ));
                }
            };
            let name = name.trim_start_matches('-');
            // A file an option names is relative to the scenario file, as `objects:` files are.
            let value = if name == "scheduler-config-file" && !value.is_empty() {
                self.base_dir.join(&value).display().to_string()
            } else {
                value
            };
            out.push((name.to_string(), value));
        }
        Ok(out)
    }

    fn node_group(
        &self,
        i: usize,
        raw: raw::RawNodeGroup,
    ) -> Result<ScenarioNodeGroup, ScenarioError> {
        let at = |field: &str| format!("nodeGroups[{i}].{field}");
        if raw.id.trim().is_empty() {
            return Err(self.error(at("id"), "node group id must not be empty"));
        }
        let size = |field: &str, value: i64| {
            usize::try_from(value)
                .map_err(|_| self.error(at(field), format!("must not be negative (found {value})")))
        };
        let min_size = size("minSize", raw.min_size)?;
        let max_size = size("maxSize", raw.max_size)?;
        if min_size > max_size {
            return Err(self.error(
                at("maxSize"),
                format!("maxSize {max_size} is smaller than minSize {min_size}"),
            ));
        }
        // Existing nodes (`nodes:`) count towards the minimum; a replayed live group may be
        // below it (or above its maximum) as it was, so only empty nodes are checked.
        let existing = raw.nodes.len();
        let initial_size = match raw.initial_size {
            None => min_size.saturating_sub(existing),
            Some(n) => size("initialSize", n)?,
        };
        let lowest = if existing > 0 { 0 } else { min_size };
        if !(lowest..=max_size).contains(&initial_size) {
            return Err(self.error(
                at("initialSize"),
                format!(
                    "initialSize {initial_size} is outside [minSize {min_size}, maxSize {max_size}]"
                ),
            ));
        }
        if let Some(price) = raw.price_per_hour
            && !(price.is_finite() && price >= 0.0)
        {
            return Err(self.error(
                at("pricePerHour"),
                format!("must be a non-negative number (found {price})"),
            ));
        }
        let mut failures = Vec::new();
        for (name, operation, windows) in [
            (
                "increaseSize",
                CloudOperation::IncreaseSize,
                &raw.failures.increase_size.0,
            ),
            (
                "deleteNodes",
                CloudOperation::DeleteNodes,
                &raw.failures.delete_nodes.0,
            ),
            (
                "decreaseTargetSize",
                CloudOperation::DecreaseTargetSize,
                &raw.failures.decrease_target_size.0,
            ),
            (
                "instanceCreation",
                CloudOperation::InstanceCreation,
                &raw.failures.instance_creation.0,
            ),
        ] {
            for window in windows {
                if window.to.0 <= window.from.0 {
                    return Err(self.error(
                        at(&format!("failures.{name}.to")),
                        "the failure window must end after it starts",
                    ));
                }
                failures.push(FailureWindow {
                    operation,
                    from: window.from.0,
                    to: window.to.0,
                    error_class: match window.error_class {
                        raw::RawErrorClass::OutOfResources => ErrorClass::OutOfResources,
                        raw::RawErrorClass::Other => ErrorClass::Other,
                    },
                });
            }
        }
        let mut csi_drivers: Vec<CsiNodeDriver> = Vec::new();
        for (j, driver) in raw.csi_drivers.iter().enumerate() {
            if driver.name.trim().is_empty() {
                return Err(self.error(
                    at(&format!("csiDrivers[{j}].name")),
                    "a CSI driver needs a name",
                ));
            }
            if csi_drivers.iter().any(|d| d.name == driver.name) {
                return Err(self.error(
                    at(&format!("csiDrivers[{j}].name")),
                    format!("CSI driver {:?} is listed twice", driver.name),
                ));
            }
            let allocatable_count = match driver.count {
                None => None,
                Some(count) => Some(i32::try_from(count).ok().filter(|c| *c >= 0).ok_or_else(
                    || {
                        self.error(
                            at(&format!("csiDrivers[{j}].count")),
                            format!("must be from 0 to 2147483647 (found {count})"),
                        )
                    },
                )?),
            };
            csi_drivers.push(CsiNodeDriver {
                name: driver.name.clone(),
                allocatable_count,
                topology_keys: Vec::new(),
            });
        }
        let devices = self.group_devices(i, &raw.devices)?;
        let mut template =
            node_from_k8s(&raw.template).map_err(|e| self.convert_error(&at("template"), e))?;
        if template.name.is_empty() {
            template.name = format!("{}-template", raw.id);
        }
        // A template describes a healthy new node unless it says otherwise.
        if template.conditions.ready.is_none() {
            template.conditions.ready = Some(ConditionStatus::True);
        }
        Ok(ScenarioNodeGroup {
            id: raw.id,
            min_size,
            max_size,
            initial_size,
            provisioning_delay: raw
                .provisioning_delay
                .map_or(DEFAULT_PROVISIONING_DELAY, |d| d.0),
            failures,
            price_per_hour: raw.price_per_hour,
            template,
            nodes: raw.nodes,
            csi_drivers,
            devices,
            cloud_controller_manager: raw.cloud_controller_manager.unwrap_or(true),
        })
    }

    /// `nodeGroups[i].devices`, checked: a driver name, 0 to 128 devices (a slice's most), at
    /// most 32 attributes and capacities per device (the API's limit), each attribute with
    /// exactly one value and each capacity a non-negative quantity. Bare names are qualified
    /// with the driver name, as the API does.
    fn group_devices(
        &self,
        i: usize,
        raw: &[raw::RawDevices],
    ) -> Result<Vec<GroupDevices>, ScenarioError> {
        let at = |j: usize, field: &str| format!("nodeGroups[{i}].devices[{j}].{field}");
        let qualified = |driver: &str, name: &str| {
            if name.contains('/') {
                name.to_string()
            } else {
                format!("{driver}/{name}")
            }
        };
        if raw.len() > MAX_DEVICE_ENTRIES {
            return Err(self.error(
                format!("nodeGroups[{i}].devices"),
                format!(
                    "a group lists at most {MAX_DEVICE_ENTRIES} kinds of devices (found {})",
                    raw.len()
                ),
            ));
        }
        let mut out: Vec<GroupDevices> = Vec::new();
        for (j, entry) in raw.iter().enumerate() {
            let driver = entry.driver.trim();
            if driver.is_empty()
                || driver.len() > MAX_DRIVER_NAME
                || driver.contains(char::is_whitespace)
            {
                return Err(self.error(
                    at(j, "driver"),
                    format!(
                        "a driver name of 1 to {MAX_DRIVER_NAME} characters without spaces is \
                         needed (found {:?})",
                        entry.driver
                    ),
                ));
            }
            let name_prefix = entry.name.clone().unwrap_or_else(|| "device".to_string());
            if name_prefix.is_empty()
                || !name_prefix
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                return Err(self.error(
                    at(j, "name"),
                    format!(
                        "device names are lowercase letters, digits and `-` (found {name_prefix:?})"
                    ),
                ));
            }
            if out
                .iter()
                .any(|d| d.driver == driver && d.name_prefix == name_prefix)
            {
                return Err(self.error(
                    at(j, "name"),
                    format!("devices {name_prefix:?} of driver {driver:?} are listed twice"),
                ));
            }
            let same_driver: usize = out
                .iter()
                .filter(|d| d.driver == driver)
                .map(|d| d.count)
                .sum();
            let count = usize::try_from(entry.count)
                .ok()
                .filter(|c| same_driver + c <= MAX_DEVICES_PER_DRIVER)
                .ok_or_else(|| {
                    self.error(
                        at(j, "count"),
                        format!(
                            "a node publishes 0 to {MAX_DEVICES_PER_DRIVER} devices of one \
                             driver (found {}{})",
                            entry.count,
                            if same_driver > 0 {
                                format!(" after {same_driver} listed before")
                            } else {
                                String::new()
                            }
                        ),
                    )
                })?;
            if entry.attributes.len() + entry.capacity.len() > MAX_DEVICE_PROPERTIES {
                return Err(self.error(
                    at(j, "attributes"),
                    format!(
                        "a device has at most {MAX_DEVICE_PROPERTIES} attributes and capacities \
                         together (found {})",
                        entry.attributes.len() + entry.capacity.len()
                    ),
                ));
            }
            let mut attributes = std::collections::BTreeMap::new();
            for (name, value) in &entry.attributes {
                let field = at(j, &format!("attributes.{name}"));
                let values = [
                    value.int.map(DeviceAttribute::Int),
                    value.bool.map(DeviceAttribute::Bool),
                    value.string.clone().map(DeviceAttribute::String),
                    value.version.clone().map(DeviceAttribute::Version),
                ];
                let mut set = values.into_iter().flatten();
                let (Some(attribute), None) = (set.next(), set.next()) else {
                    return Err(self.error(
                        field,
                        "an attribute needs exactly one of `int`, `bool`, `string` or `version`",
                    ));
                };
                if let DeviceAttribute::Version(v) = &attribute
                    && !is_semver(v)
                {
                    return Err(self.error(
                        field,
                        format!("{v:?} is not a semantic version such as 1.2.3"),
                    ));
                }
                attributes.insert(qualified(driver, name), attribute);
            }
            let mut capacity = std::collections::BTreeMap::new();
            for (name, value) in &entry.capacity {
                let field = at(j, &format!("capacity.{name}"));
                let quantity =
                    Quantity::parse(value).map_err(|e| self.error(field.clone(), e.to_string()))?;
                if quantity < Quantity::ZERO {
                    return Err(
                        self.error(field, format!("must not be negative (found {value:?})"))
                    );
                }
                capacity.insert(qualified(driver, name), quantity);
            }
            out.push(GroupDevices {
                driver: driver.to_string(),
                name_prefix,
                count,
                attributes,
                capacity,
            });
        }
        Ok(out)
    }

    /// Reads every initial object, then converts them and the event pods once every PriorityClass
    /// is known.
    fn objects(
        &self,
        sources: &[raw::RawObjectSource],
        raw_events: &[raw::RawEvent],
        warnings: &mut Vec<String>,
    ) -> Result<ObjectsAndEvents, ScenarioError> {
        struct FileObjects {
            origin: String,
            text: String,
        }
        enum Source {
            File(usize),
            Inline(usize, RawObject),
        }
        let mut files = Vec::new();
        let mut sources_in_order = Vec::new();
        // What the objects files may still add to the scenario's own bytes.
        let mut budget = self
            .limits
            .total_bytes
            .saturating_sub(self.text.len() as u64);
        for (i, source) in sources.iter().enumerate() {
            match (&source.file, &source.inline) {
                (Some(file), None) => {
                    let path = self.base_dir.join(file);
                    let limit = self.limits.file_bytes.min(budget);
                    let text = read_bounded(&path, limit).map_err(|e| {
                        let why = match e {
                            ReadError::TooLarge { .. } if limit < self.limits.file_bytes => {
                                format!(
                                    "the scenario and its objects files would have more than \
                                     {} bytes together, the most a scenario may read",
                                    group_digits(self.limits.total_bytes)
                                )
                            }
                            other => other.to_string(),
                        };
                        self.error(
                            format!("objects[{i}].file"),
                            format!("cannot read {}: {why}", path.display()),
                        )
                    })?;
                    budget = budget.saturating_sub(text.len() as u64);
                    check_nesting(&text, self.limits.depth).map_err(|e| ScenarioError {
                        origin: path.display().to_string(),
                        line: Some(e.line),
                        field: String::new(),
                        message: too_deep(e),
                    })?;
                    files.push(FileObjects {
                        origin: path.display().to_string(),
                        text,
                    });
                    sources_in_order.push(Source::File(files.len() - 1));
                }
                (None, Some(value)) => {
                    let object = RawObject::from_value(value.clone()).map_err(|e| {
                        let field = if e.field.is_empty() {
                            format!("objects[{i}].inline")
                        } else {
                            format!("objects[{i}].inline.{}", e.field)
                        };
                        self.error(field, e.message)
                    })?;
                    sources_in_order.push(Source::Inline(i, object));
                }
                _ => {
                    return Err(self.error(
                        format!("objects[{i}]"),
                        "each entry needs exactly one of `file:` or `inline:`",
                    ));
                }
            }
        }
        let mut documents = Vec::new();
        for file in &files {
            let read = read_documents(&file.text, &file.origin).map_err(objects_error)?;
            documents.push(read);
        }

        let mut priorities = PriorityClasses::default();
        for source in &sources_in_order {
            match source {
                Source::File(f) => {
                    for item in &documents[*f] {
                        item.object
                            .collect_priority_classes(&mut priorities)
                            .map_err(|e| objects_error(item.error(&files[*f].origin, e)))?;
                    }
                }
                Source::Inline(i, object) => object
                    .collect_priority_classes(&mut priorities)
                    .map_err(|e| self.convert_error(&format!("objects[{i}].inline"), e))?,
            }
        }
        let mut objects = Vec::new();
        for source in &sources_in_order {
            match source {
                Source::File(f) => {
                    for item in &documents[*f] {
                        item.object
                            .convert(&priorities, &mut objects, warnings)
                            .map_err(|e| objects_error(item.error(&files[*f].origin, e)))?;
                    }
                }
                Source::Inline(i, object) => object
                    .convert(&priorities, &mut objects, warnings)
                    .map_err(|e| self.convert_error(&format!("objects[{i}].inline"), e))?,
            }
        }

        let mut events = Vec::new();
        for (i, event) in raw_events.iter().enumerate() {
            // Every later raw event needs at least one event of the budget.
            let budget = self
                .limits
                .events
                .saturating_sub(events.len())
                .saturating_sub(raw_events.len() - i - 1);
            events.extend(self.event(i, event, &priorities, budget)?);
        }
        events.sort_by_key(|e: &ScenarioEvent| e.at);
        Ok(ObjectsAndEvents { objects, events })
    }

    /// The events of `raw`: one, or the steps of a `create` with a `rate`, at most `budget`.
    fn event(
        &self,
        i: usize,
        raw: &raw::RawEvent,
        priorities: &PriorityClasses,
        budget: usize,
    ) -> Result<Vec<ScenarioEvent>, ScenarioError> {
        let at = |field: &str| format!("events[{i}].{field}");
        let parse_count = |field: &str, value: Option<u64>| {
            value
                .map(|n| {
                    usize::try_from(n)
                        .map_err(|_| self.error(at(field), format!("count {n} is too large")))
                })
                .transpose()
        };
        let mut actions = Vec::new();
        if let Some(create) = &raw.create
            && let Some(object) = &create.object
        {
            if create.pod.is_some()
                || create.count.is_some()
                || create.bind.is_some()
                || create.rate.is_some()
            {
                return Err(self.error(
                    at("create.object"),
                    "an object is created alone: no pod, count, bind or rate with it",
                ));
            }
            actions.push(ScenarioAction::CreateObject(
                self.created_object(i, object, priorities)?,
            ));
        } else if let Some(create) = &raw.create {
            let Some(raw_pod) = &create.pod else {
                return Err(self.error(at("create"), "create needs a pod or an object"));
            };
            let count = parse_count("create.count", create.count)?.unwrap_or(1);
            if count == 0 {
                return Err(self.error(at("create.count"), "count must be at least 1"));
            }
            let mut pod = pod_from_k8s(raw_pod, priorities)
                .map_err(|e| self.convert_error(&at("create.pod"), e))?;
            if pod.name.is_empty() {
                let generated = raw_pod.metadata.generate_name.as_deref().unwrap_or("");
                pod.name = match generated.trim_end_matches('-') {
                    "" => ferroscale_model::format_compact!("event-{i}"),
                    prefix => prefix.into(),
                };
            }
            let bind = match &create.bind {
                None => None,
                Some(bind) => {
                    if bind.node_prefix.is_empty() {
                        return Err(self
                            .error(at("create.bind.nodePrefix"), "nodePrefix must not be empty"));
                    }
                    let pods_per_node =
                        parse_count("create.bind.podsPerNode", bind.pods_per_node)?.unwrap_or(1);
                    if pods_per_node == 0 {
                        return Err(self.error(
                            at("create.bind.podsPerNode"),
                            "podsPerNode must be at least 1",
                        ));
                    }
                    Some(PodPlacement {
                        node_prefix: bind.node_prefix.clone(),
                        first_index: parse_count("create.bind.firstIndex", Some(bind.first_index))?
                            .unwrap_or(0),
                        pods_per_node,
                    })
                }
            };
            if let Some(rate) = &create.rate {
                let rate = arrival::parse_rate(rate)
                    .map_err(|message| self.error(at("create.rate"), message))?;
                if bind.is_some() {
                    return Err(self.error(
                        at("create.rate"),
                        "rate and bind do not go together: pods bound by name do not wait for \
                         the scheduler, so their arrival pace changes nothing",
                    ));
                }
                let steps = arrival::steps(count, rate, budget).ok_or_else(|| {
                    self.error(
                        at("create.rate"),
                        format!(
                            "{} pods at {} arrive in more steps than the {} events a scenario \
                             may have",
                            group_digits(count as u64),
                            arrival::describe(rate),
                            group_digits(self.limits.events as u64)
                        ),
                    )
                })?;
                return Ok(steps
                    .into_iter()
                    .map(|step| ScenarioEvent {
                        at: raw.at.0.saturating_add(step.after),
                        action: ScenarioAction::Create {
                            count: step.count,
                            pod: pod.clone(),
                            bind: None,
                            first_copy: Some(step.first_copy),
                            still_to_create: count - (step.first_copy + step.count),
                        },
                    })
                    .collect());
            }
            actions.push(ScenarioAction::Create {
                count,
                pod,
                bind,
                first_copy: None,
                still_to_create: 0,
            });
        }
        if let Some(delete) = &raw.delete {
            actions.push(ScenarioAction::Delete {
                selector: delete.selector.0.clone(),
                count: parse_count("delete.count", delete.count)?,
            });
        }
        if let Some(cordon) = &raw.cordon {
            actions.push(ScenarioAction::Cordon {
                node: cordon.node.clone(),
            });
        }
        if let Some(uncordon) = &raw.uncordon {
            actions.push(ScenarioAction::Uncordon {
                node: uncordon.node.clone(),
            });
        }
        if let Some(remove) = &raw.remove_node {
            actions.push(ScenarioAction::RemoveNode {
                node: remove.node.clone(),
            });
        }
        if let Some(controller) = &raw.delete_controller {
            actions.push(ScenarioAction::DeleteController {
                kind: controller.kind.clone(),
                namespace: controller.namespace.clone(),
                name: controller.name.clone(),
            });
        }
        let mut actions = actions.into_iter();
        match (actions.next(), actions.next()) {
            (Some(action), None) => Ok(vec![ScenarioEvent {
                at: raw.at.0,
                action,
            }]),
            _ => Err(self.error(
                format!("events[{i}]"),
                "each event needs exactly one of create, delete, cordon, uncordon, removeNode or deleteController",
            )),
        }
    }

    /// The object of a `create.object` event: one PodTemplate, ProvisioningRequest, CapacityBuffer
    /// or CapacityQuota, read like the objects files.
    fn created_object(
        &self,
        i: usize,
        value: &Value,
        priorities: &PriorityClasses,
    ) -> Result<K8sObject, ScenarioError> {
        let field = format!("events[{i}].create.object");
        let object = RawObject::from_value(value.clone()).map_err(|e| {
            let field = if e.field.is_empty() {
                field.clone()
            } else {
                format!("{field}.{}", e.field)
            };
            self.error(field, e.message)
        })?;
        let mut converted = Vec::new();
        let mut ignored = Vec::new();
        object
            .convert(priorities, &mut converted, &mut ignored)
            .map_err(|e| self.convert_error(&field, e))?;
        match (converted.pop(), converted.is_empty()) {
            (
                Some(
                    object @ (K8sObject::PodTemplate(_)
                    | K8sObject::ProvisioningRequest(_)
                    | K8sObject::CapacityBuffer(_)
                    | K8sObject::CapacityQuota(_)),
                ),
                true,
            ) => Ok(object),
            (Some(other), true) => Err(self.error(
                field,
                format!(
                    "{} cannot be created by an event: only PodTemplate, ProvisioningRequest, \
                     CapacityBuffer and CapacityQuota objects can (pods use `create.pod`)",
                    other.describe()
                ),
            )),
            _ => Err(self.error(field, "exactly one object is created per event")),
        }
    }

    fn expectation(
        &self,
        i: usize,
        raw: raw::RawExpectation,
        groups: &[ScenarioNodeGroup],
    ) -> Result<Expectation, ScenarioError> {
        let at_field = |field: &str| format!("expect[{i}].{field}");
        let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        let range = |field: &str, r: &raw::RawRange| {
            let min = r.min.map_or(0, to_usize);
            let max = r.max.map_or(usize::MAX, to_usize);
            if r.min.is_none() && r.max.is_none() {
                return Err(self.error(at_field(field), "give min, max or both"));
            }
            if min > max {
                return Err(self.error(
                    at_field(field),
                    format!("min {min} is larger than max {max}"),
                ));
            }
            Ok((min, max))
        };
        let mut checks = Vec::new();
        if let Some(group) = &raw.group
            && !groups.iter().any(|g| &g.id == group)
        {
            return Err(self.error(at_field("group"), format!("no node group has id {group:?}")));
        }
        if let Some(removed) = &raw.nodes_removed {
            let (min, max) = range("nodesRemoved", removed)?;
            checks.push(Check::NodesRemoved {
                group: raw.group.clone(),
                min,
                max,
            });
        }
        match (&raw.group, &raw.nodes) {
            (Some(group), Some(nodes)) => {
                let (min, max) = range("nodes", nodes)?;
                checks.push(Check::GroupNodes {
                    group: group.clone(),
                    min,
                    max,
                });
            }
            (None, None) => {}
            (Some(_), None) if raw.nodes_removed.is_some() => {}
            (Some(_), None) => {
                return Err(self.error(
                    at_field("group"),
                    "`group` needs `nodes: {min, max}` or `nodesRemoved: {min, max}`",
                ));
            }
            (None, Some(_)) => {
                return Err(self.error(
                    at_field("nodes"),
                    "`nodes` needs `group` (or use totalNodes)",
                ));
            }
        }
        if let Some(total) = &raw.total_nodes {
            let (min, max) = range("totalNodes", total)?;
            checks.push(Check::TotalNodes { min, max });
        }
        if let Some(n) = raw.pending_pods {
            checks.push(Check::PendingPods(to_usize(n)));
        }
        if let Some(n) = raw.running_pods {
            checks.push(Check::RunningPods(to_usize(n)));
        }
        if let Some(n) = raw.lost_pods {
            checks.push(Check::LostPods(to_usize(n)));
        }
        let at = match raw.at {
            raw::RawCheckTime::End => CheckTime::End,
            raw::RawCheckTime::At(d) => CheckTime::At(d),
        };
        let mut checks = checks.into_iter();
        match (checks.next(), checks.next()) {
            (Some(check), None) => Ok(Expectation { at, check }),
            _ => Err(self.error(
                format!("expect[{i}]"),
                "each expectation needs exactly one of group+nodes, totalNodes, nodesRemoved, pendingPods, runningPods or lostPods",
            )),
        }
    }
}

struct ObjectsAndEvents {
    objects: Vec<K8sObject>,
    events: Vec<ScenarioEvent>,
}

/// An error in an objects file keeps that file as its origin.
fn objects_error(e: ObjectsError) -> ScenarioError {
    ScenarioError {
        origin: e.origin,
        line: e.line,
        field: e.field,
        message: e.message,
    }
}
