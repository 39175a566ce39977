//! Scenario files for `ferroscale simulate` (format: spec/scenario.md): node groups with templates,
//! initial cluster objects, a timed workload and expectations, parsed once into typed values.

use std::path::Path;
use std::time::Duration;

use ferroscale_core::cloud::ErrorClass;
use ferroscale_model::{LabelSelector, Node, Pod};
use ferroscale_objects::K8sObject;
use thiserror::Error;

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
}

pub const DEFAULT_SEED: u64 = 1;
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
}

/// Cloud provider calls a failure window can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloudOperation {
    IncreaseSize,
    DeleteNodes,
    DecreaseTargetSize,
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

#[derive(Debug, Clone)]
pub enum ScenarioAction {
    /// `count` copies of `pod`; with `count > 1` the copies are named `<name>-<i>` (i from 0).
    Create {
        count: usize,
        pod: Pod,
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    pub at: CheckTime,
    pub check: Check,
}

/// An invalid scenario: names the file, the line (when known) and the field path.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{origin}{}: {field}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
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
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        origin: origin.clone(),
        line: None,
        field: String::new(),
        message: format!("cannot read the file: {e}"),
    })?;
    let base_dir = path.parent().unwrap_or_else(|| Path::new("."));
    parse_scenario(&text, &origin, base_dir)
}

/// Parses scenario text. `origin` names it in messages; `base_dir` resolves `file:` references.
pub fn parse_scenario(
    text: &str,
    origin: &str,
    base_dir: &Path,
) -> Result<Scenario, ScenarioError> {
    let _ = (text, base_dir);
    Err(ScenarioError {
        origin: origin.to_string(),
        line: None,
        field: String::new(),
        message: "scenario parsing is not implemented yet".to_string(),
    })
}
