//! The kube-scheduler configuration the simulation follows: `--scheduler-config-file`, a
//! `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`) read into a
//! [`SchedulerProfile`] once, so the filters never look anything up per check.
//!
//! Upstream builds its scheduler framework from the file's single profile (it refuses a file with
//! more than one, and uses the default profile when there is none), and runs only that profile's
//! PreFilter and Filter plugins. Of what a profile can say, three things change which nodes a pod
//! fits, and those are what Ferroscale reads (docs/behaviour.md SCHED-101–SCHED-104):
//!
//! * the Filter plugins it turns off (`plugins.filter.disabled`, `plugins.multiPoint.disabled`,
//!   `*` included, with `enabled` entries turning default plugins back on);
//! * `PodTopologySpread`'s `defaultConstraints` / `defaultingType`;
//! * `NodeResourcesFit`'s `ignoredResources` / `ignoredResourceGroups`.
//!
//! Everything else (other plugins' arguments, scoring, `percentageOfNodesToScore`, extenders,
//! plugins that are not in-tree, more than one profile, ...) is refused with its field path and
//! value rather than silently ignored: a setting the simulation cannot honour would make it
//! disagree with the cluster's scheduler without a word.

use serde_yaml_ng::{Mapping, Value};
use thiserror::Error;

use ferroscale_model::{
    NodeInclusionPolicy, OwnerRef, Pod, TopologySpreadConstraint, UnsatisfiableAction,
};

/// The largest scheduler configuration file read, in bytes (1 MiB; real ones are a few KiB).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";
const KIND: &str = "KubeSchedulerConfiguration";

/// The kube-scheduler Filter plugins Ferroscale simulates, by their upstream names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FilterPlugin {
    NodeUnschedulable,
    NodeName,
    TaintToleration,
    NodeAffinity,
    NodePorts,
    NodeResourcesFit,
    VolumeRestrictions,
    NodeVolumeLimits,
    VolumeBinding,
    VolumeZone,
    PodTopologySpread,
    InterPodAffinity,
}

impl FilterPlugin {
    pub const ALL: [FilterPlugin; 12] = [
        FilterPlugin::NodeUnschedulable,
        FilterPlugin::NodeName,
        FilterPlugin::TaintToleration,
        FilterPlugin::NodeAffinity,
        FilterPlugin::NodePorts,
        FilterPlugin::NodeResourcesFit,
        FilterPlugin::VolumeRestrictions,
        FilterPlugin::NodeVolumeLimits,
        FilterPlugin::VolumeBinding,
        FilterPlugin::VolumeZone,
        FilterPlugin::PodTopologySpread,
        FilterPlugin::InterPodAffinity,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FilterPlugin::NodeUnschedulable => "NodeUnschedulable",
            FilterPlugin::NodeName => "NodeName",
            FilterPlugin::TaintToleration => "TaintToleration",
            FilterPlugin::NodeAffinity => "NodeAffinity",
            FilterPlugin::NodePorts => "NodePorts",
            FilterPlugin::NodeResourcesFit => "NodeResourcesFit",
            FilterPlugin::VolumeRestrictions => "VolumeRestrictions",
            FilterPlugin::NodeVolumeLimits => "NodeVolumeLimits",
            FilterPlugin::VolumeBinding => "VolumeBinding",
            FilterPlugin::VolumeZone => "VolumeZone",
            FilterPlugin::PodTopologySpread => "PodTopologySpread",
            FilterPlugin::InterPodAffinity => "InterPodAffinity",
        }
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }

    /// The plugin's Filter reads what its PreFilter computed and fails every node without it.
    /// (NodeAffinity and VolumeZone recompute it; the others have no PreFilter.)
    fn filter_needs_pre_filter(self) -> bool {
        matches!(
            self,
            FilterPlugin::NodePorts
                | FilterPlugin::NodeResourcesFit
                | FilterPlugin::VolumeRestrictions
                | FilterPlugin::VolumeBinding
                | FilterPlugin::PodTopologySpread
                | FilterPlugin::InterPodAffinity
        )
    }
}

/// The plugins of upstream's default profile (v1, Kubernetes 1.36 with default feature gates),
/// the only ones a profile may name in `enabled`. Those without a Filter that Ferroscale
/// simulates (DRA, scoring, binding, ...) can be disabled without effect.
const IN_TREE_PLUGINS: [&str; 19] = [
    "SchedulingGates",
    "PrioritySort",
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
    "DynamicResources",
    "DefaultPreemption",
    "NodeResourcesBalancedAllocation",
    "ImageLocality",
    "DefaultBinder",
];

/// How `PodTopologySpread` finds constraints for a pod that has none of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SpreadDefaulting {
    /// The built-in defaults: zone (maxSkew 5) and hostname (maxSkew 3), both `ScheduleAnyway`.
    /// They only score, so they never reject a node in the simulation.
    #[default]
    System,
    /// The profile's `defaultConstraints`.
    List,
}

/// What the simulation takes from the scheduler configuration: which filters run and how.
/// `Default` is upstream's default profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerProfile {
    /// The profile's `schedulerName` (informational: upstream simulates the one profile whatever
    /// its name).
    pub scheduler_name: String,
    /// Bit per [`FilterPlugin`] whose Filter is disabled.
    disabled: u16,
    pub spread_defaulting: SpreadDefaulting,
    /// `defaultConstraints` (with `defaultingType: List`); their selectors are absent here and
    /// built per pod.
    pub default_constraints: Vec<TopologySpreadConstraint>,
    /// `NodeResourcesFit` `ignoredResources`: extended resources whose requests are not checked.
    pub ignored_resources: Vec<String>,
    /// `NodeResourcesFit` `ignoredResourceGroups`: prefixes (before `/`) of extended resources
    /// whose requests are not checked.
    pub ignored_resource_groups: Vec<String>,
}

impl Default for SchedulerProfile {
    fn default() -> Self {
        SchedulerProfile {
            scheduler_name: "default-scheduler".to_string(),
            disabled: 0,
            spread_defaulting: SpreadDefaulting::System,
            default_constraints: Vec::new(),
            ignored_resources: Vec::new(),
            ignored_resource_groups: Vec::new(),
        }
    }
}

impl SchedulerProfile {
    /// Whether the plugin's Filter runs.
    pub fn is_enabled(&self, plugin: FilterPlugin) -> bool {
        self.disabled & plugin.bit() == 0
    }

    /// The Filter plugins that do not run, in filter order.
    pub fn disabled_filters(&self) -> Vec<FilterPlugin> {
        FilterPlugin::ALL
            .into_iter()
            .filter(|p| !self.is_enabled(*p))
            .collect()
    }

    /// Turns a plugin's Filter on or off (profiles built in code, e.g. tests).
    pub fn set_enabled(&mut self, plugin: FilterPlugin, enabled: bool) {
        if enabled {
            self.disabled &= !plugin.bit();
        } else {
            self.disabled |= plugin.bit();
        }
    }

    /// Whether `NodeResourcesFit` skips requests of this resource: only extended resources
    /// (a name with a `/` outside `kubernetes.io/`) can be ignored, as upstream.
    pub fn ignores_resource(&self, name: &str) -> bool {
        let Some((prefix, _)) = name.split_once('/') else {
            return false;
        };
        if name.contains("kubernetes.io/") || name.starts_with("requests.") {
            return false;
        }
        self.ignored_resources.iter().any(|r| r == name)
            || self.ignored_resource_groups.iter().any(|g| g == prefix)
    }

    /// The default constraints that can reject a node (`DoNotSchedule`).
    pub fn hard_default_constraints(&self) -> impl Iterator<Item = &TopologySpreadConstraint> {
        self.default_constraints
            .iter()
            .filter(|c| c.when_unsatisfiable == UnsatisfiableAction::DoNotSchedule)
    }
}

/// The controller whose pods a default spread constraint counts for `pod`, if the defaults apply
/// to it: a pod without constraints of its own, controlled by a ReplicaSet, StatefulSet or
/// ReplicationController. Upstream builds the selector from those controllers' selectors and the
/// selectors of the Services that select the pod; Ferroscale counts the pods of the same
/// controller (what those selectors select in practice) and knows no Services (docs/behaviour.md
/// SCHED-103).
pub fn default_spread_owner(pod: &Pod) -> Option<&OwnerRef> {
    if !pod.topology_spread.is_empty() {
        return None;
    }
    pod.controller().filter(|o| {
        matches!(
            (o.api_version.as_str(), o.kind.as_str()),
            ("apps/v1", "ReplicaSet")
                | ("apps/v1", "StatefulSet")
                | ("v1", "ReplicationController")
        )
    })
}

/// Why a scheduler configuration was not accepted. Every variant names the field path and, where
/// there is one, the value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SchedulerConfigError {
    #[error("not valid YAML: {0}")]
    Yaml(String),
    /// The field is valid for kube-scheduler but Ferroscale does not simulate it.
    #[error("{field}: {value}: not supported by ferroscale ({reason})")]
    Unsupported {
        field: String,
        value: String,
        reason: String,
    },
    /// The field's value is invalid (kube-scheduler refuses it too).
    #[error("{field}: {value}: {reason}")]
    Invalid {
        field: String,
        value: String,
        reason: String,
    },
}

fn unsupported(field: &str, value: &Value, reason: &str) -> SchedulerConfigError {
    SchedulerConfigError::Unsupported {
        field: field.to_string(),
        value: show(value),
        reason: reason.to_string(),
    }
}

fn invalid(field: &str, value: &Value, reason: impl Into<String>) -> SchedulerConfigError {
    SchedulerConfigError::Invalid {
        field: field.to_string(),
        value: show(value),
        reason: reason.into(),
    }
}

/// A value as it appears in messages: scalars as written, collections as one line of YAML, at
/// most 120 characters.
fn show(value: &Value) -> String {
    let text = match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        other => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim()
            .replace('\n', " "),
    };
    if text.chars().count() > 120 {
        let cut: String = text.chars().take(117).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// Parses a scheduler configuration file's text into the profile the simulation uses.
pub fn parse(text: &str) -> Result<SchedulerProfile, SchedulerConfigError> {
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(SchedulerConfigError::Invalid {
            field: "(file)".to_string(),
            value: format!("{} bytes", text.len()),
            reason: format!(
                "larger than the {MAX_FILE_BYTES} bytes a scheduler configuration may have"
            ),
        });
    }
    let root: Value =
        serde_yaml_ng::from_str(text).map_err(|e| SchedulerConfigError::Yaml(e.to_string()))?;
    let root = mapping("(document)", &root)?;
    let mut api_version = None;
    let mut kind = None;
    let mut profiles = None;
    for (key, value) in root {
        match key_str("", key)? {
            "apiVersion" => api_version = Some(value),
            "kind" => kind = Some(value),
            "profiles" => profiles = Some(value),
            other => {
                return Err(unsupported(
                    other,
                    value,
                    "the simulation reads only the profile's plugins and pluginConfig",
                ));
            }
        }
    }
    match api_version {
        Some(Value::String(v)) if v == API_VERSION => {}
        Some(other) => {
            return Err(invalid(
                "apiVersion",
                other,
                format!("must be {API_VERSION}"),
            ));
        }
        None => {
            return Err(invalid(
                "apiVersion",
                &Value::Null,
                format!("required: {API_VERSION}"),
            ));
        }
    }
    match kind {
        Some(Value::String(v)) if v == KIND => {}
        Some(other) => return Err(invalid("kind", other, format!("must be {KIND}"))),
        None => return Err(invalid("kind", &Value::Null, format!("required: {KIND}"))),
    }
    let profiles = match profiles {
        None | Some(Value::Null) => &[][..],
        Some(Value::Sequence(s)) => s.as_slice(),
        Some(other) => return Err(invalid("profiles", other, "must be a list")),
    };
    match profiles {
        [] => Ok(SchedulerProfile::default()),
        [profile] => parse_profile("profiles[0]", profile),
        more => Err(SchedulerConfigError::Unsupported {
            field: "profiles".to_string(),
            value: format!("{} profiles", more.len()),
            reason: "the autoscaler simulates exactly one scheduler profile, as upstream does"
                .to_string(),
        }),
    }
}

fn mapping<'a>(field: &str, value: &'a Value) -> Result<&'a Mapping, SchedulerConfigError> {
    match value {
        Value::Mapping(m) => Ok(m),
        other => Err(invalid(field, other, "must be a mapping")),
    }
}

/// A list, with `null` read as empty.
fn sequence<'a>(field: &str, value: &'a Value) -> Result<&'a [Value], SchedulerConfigError> {
    match value {
        Value::Null => Ok(&[]),
        Value::Sequence(s) => Ok(s),
        other => Err(invalid(field, other, "must be a list")),
    }
}

fn string<'a>(field: &str, value: &'a Value) -> Result<&'a str, SchedulerConfigError> {
    match value {
        Value::String(s) => Ok(s),
        other => Err(invalid(field, other, "must be a string")),
    }
}

fn key_str<'a>(parent: &str, key: &'a Value) -> Result<&'a str, SchedulerConfigError> {
    key.as_str()
        .ok_or_else(|| invalid(parent, key, "field names must be strings"))
}

fn child(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}

fn parse_profile(at: &str, value: &Value) -> Result<SchedulerProfile, SchedulerConfigError> {
    let mut profile = SchedulerProfile::default();
    for (key, value) in mapping(at, value)? {
        let name = key_str(at, key)?;
        let field = child(at, name);
        match name {
            "schedulerName" => {
                let name = string(&field, value)?;
                if name.is_empty() {
                    return Err(invalid(&field, value, "must not be empty"));
                }
                profile.scheduler_name = name.to_string();
            }
            "plugins" => profile.disabled = parse_plugins(&field, value)?,
            "pluginConfig" => parse_plugin_config(&field, value, &mut profile)?,
            _ => {
                return Err(unsupported(
                    &field,
                    value,
                    "the simulation reads only a profile's schedulerName, plugins and pluginConfig",
                ));
            }
        }
    }
    Ok(profile)
}

/// The extension points of a profile's `plugins`. Only the first three can change a Filter.
const FILTER_POINTS: [&str; 3] = ["multiPoint", "preFilter", "filter"];
const OTHER_POINTS: [&str; 10] = [
    "preEnqueue",
    "queueSort",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
];

/// One extension point's `enabled` and `disabled` names, with the field path of each entry.
#[derive(Default)]
struct PluginSet {
    enabled: Vec<(String, String)>,
    disabled: Vec<(String, String)>,
}

impl PluginSet {
    fn enables(&self, name: &str) -> bool {
        self.enabled.iter().any(|(n, _)| n == name)
    }

    /// The path of the entry that disables `name` (by name or with `*`).
    fn disables(&self, name: &str) -> Option<&str> {
        self.disabled
            .iter()
            .find(|(n, _)| n == name || n == "*")
            .map(|(_, at)| at.as_str())
    }
}

/// Reads `plugins` and resolves, for every simulated filter, whether its Filter (and the PreFilter
/// it depends on) still runs after upstream's merge with the default profile: a default plugin
/// runs at a point unless `multiPoint` or that point disables it (by name or `*`), and an
/// `enabled` entry at `multiPoint` or at the point turns it back on. Returns the disabled bits.
fn parse_plugins(at: &str, value: &Value) -> Result<u16, SchedulerConfigError> {
    let mut sets: [PluginSet; 3] = Default::default();
    for (key, value) in mapping(at, value)? {
        let point = key_str(at, key)?;
        let field = child(at, point);
        if let Some(i) = FILTER_POINTS.iter().position(|p| *p == point) {
            sets[i] = parse_plugin_set(&field, value)?;
        } else if OTHER_POINTS.contains(&point) {
            let empty = match value {
                Value::Null => true,
                Value::Mapping(m) => m.values().all(|v| match v {
                    Value::Null => true,
                    Value::Sequence(s) => s.is_empty(),
                    _ => false,
                }),
                _ => false,
            };
            if !empty {
                return Err(unsupported(
                    &field,
                    value,
                    "the autoscaler's simulation runs only PreFilter and Filter plugins",
                ));
            }
        } else {
            return Err(invalid(&field, value, "not a scheduler extension point"));
        }
    }
    let [multi_point, pre_filter, filter] = &sets;
    let mut disabled = 0u16;
    for plugin in FilterPlugin::ALL {
        let name = plugin.name();
        let in_multi_point = multi_point.enables(name) || multi_point.disables(name).is_none();
        let runs_at =
            |set: &PluginSet| set.enables(name) || (in_multi_point && set.disables(name).is_none());
        let filter_runs = runs_at(filter);
        if !filter_runs {
            disabled |= plugin.bit();
            continue;
        }
        if plugin.filter_needs_pre_filter() && !runs_at(pre_filter) {
            let entry = pre_filter
                .disables(name)
                .or_else(|| multi_point.disables(name))
                .unwrap_or(at);
            return Err(SchedulerConfigError::Invalid {
                field: entry.to_string(),
                value: format!("{name:?}"),
                reason: format!(
                    "{name}'s Filter runs but its PreFilter does not: kube-scheduler then fails \
                     every pod in that Filter; disable the plugin at filter (or multiPoint) too"
                ),
            });
        }
    }
    Ok(disabled)
}

fn parse_plugin_set(at: &str, value: &Value) -> Result<PluginSet, SchedulerConfigError> {
    let mut set = PluginSet::default();
    for (key, value) in mapping(at, value)? {
        let list = key_str(at, key)?;
        let field = child(at, list);
        let enabling = match list {
            "enabled" => true,
            "disabled" => false,
            _ => {
                return Err(invalid(
                    &field,
                    value,
                    "a plugin set has only enabled and disabled",
                ));
            }
        };
        for (i, entry) in sequence(&field, value)?.iter().enumerate() {
            let entry_at = format!("{field}[{i}]");
            let mut name = None;
            for (key, value) in mapping(&entry_at, entry)? {
                let k = key_str(&entry_at, key)?;
                let f = child(&entry_at, k);
                match k {
                    "name" => name = Some(string(&f, value)?),
                    "weight" => {
                        return Err(unsupported(
                            &f,
                            value,
                            "weights only score nodes, and the autoscaler does not score",
                        ));
                    }
                    _ => {
                        return Err(invalid(
                            &f,
                            value,
                            "a plugin entry has only name and weight",
                        ));
                    }
                }
            }
            let name_at = child(&entry_at, "name");
            let name = match name {
                Some(n) if !n.is_empty() => n,
                _ => return Err(invalid(&name_at, &Value::Null, "a plugin needs a name")),
            };
            if enabling {
                if !IN_TREE_PLUGINS.contains(&name) {
                    return Err(unsupported(
                        &name_at,
                        &Value::String(name.to_string()),
                        "only kube-scheduler's default in-tree plugins can be simulated",
                    ));
                }
                set.enabled.push((name.to_string(), name_at));
            } else {
                set.disabled.push((name.to_string(), name_at));
            }
        }
    }
    Ok(set)
}

fn parse_plugin_config(
    at: &str,
    value: &Value,
    profile: &mut SchedulerProfile,
) -> Result<(), SchedulerConfigError> {
    let mut seen: Vec<&str> = Vec::new();
    for (i, entry) in sequence(at, value)?.iter().enumerate() {
        let entry_at = format!("{at}[{i}]");
        let mut name = None;
        let mut args = None;
        for (key, value) in mapping(&entry_at, entry)? {
            let k = key_str(&entry_at, key)?;
            match k {
                "name" => name = Some(string(&child(&entry_at, k), value)?),
                "args" => args = Some(value),
                _ => {
                    return Err(invalid(
                        &child(&entry_at, k),
                        value,
                        "a plugin configuration has only name and args",
                    ));
                }
            }
        }
        let name_at = child(&entry_at, "name");
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Err(invalid(
                &name_at,
                &Value::Null,
                "a plugin configuration needs a name",
            ));
        };
        if seen.contains(&name) {
            return Err(invalid(
                &name_at,
                &Value::String(name.to_string()),
                "configured twice",
            ));
        }
        seen.push(name);
        let args_at = child(&entry_at, "args");
        let args = args.unwrap_or(&Value::Null);
        match name {
            "PodTopologySpread" => parse_spread_args(&args_at, args, profile)?,
            "NodeResourcesFit" => parse_fit_args(&args_at, args, profile)?,
            other => {
                return Err(unsupported(
                    &name_at,
                    &Value::String(other.to_string()),
                    "only PodTopologySpread and NodeResourcesFit arguments are simulated",
                ));
            }
        }
    }
    Ok(())
}

/// The args' own `apiVersion` and `kind`, which may be given and must then match.
fn check_args_type(
    at: &str,
    key: &str,
    value: &Value,
    kind: &str,
) -> Result<bool, SchedulerConfigError> {
    let field = child(at, key);
    let expected = match key {
        "apiVersion" => API_VERSION,
        "kind" => kind,
        _ => return Ok(false),
    };
    if string(&field, value)? != expected {
        return Err(invalid(&field, value, format!("must be {expected}")));
    }
    Ok(true)
}

fn parse_spread_args(
    at: &str,
    value: &Value,
    profile: &mut SchedulerProfile,
) -> Result<(), SchedulerConfigError> {
    let mut defaulting = None;
    let mut constraints = Vec::new();
    let mut constraints_at = child(at, "defaultConstraints");
    if let Value::Null = value {
        return Ok(());
    }
    for (key, value) in mapping(at, value)? {
        let k = key_str(at, key)?;
        if check_args_type(at, k, value, "PodTopologySpreadArgs")? {
            continue;
        }
        let field = child(at, k);
        match k {
            "defaultingType" => {
                defaulting = Some(match string(&field, value)? {
                    "System" => SpreadDefaulting::System,
                    "List" => SpreadDefaulting::List,
                    _ => return Err(invalid(&field, value, "must be System or List")),
                });
            }
            "defaultConstraints" => {
                constraints_at = field.clone();
                for (i, c) in sequence(&field, value)?.iter().enumerate() {
                    constraints.push(parse_default_constraint(&format!("{field}[{i}]"), c)?);
                }
            }
            _ => {
                return Err(unsupported(
                    &field,
                    value,
                    "PodTopologySpreadArgs has only defaultConstraints and defaultingType",
                ));
            }
        }
    }
    // Upstream's default is System, which refuses a list of constraints.
    let defaulting = defaulting.unwrap_or_default();
    if defaulting == SpreadDefaulting::System && !constraints.is_empty() {
        return Err(SchedulerConfigError::Invalid {
            field: child(at, "defaultingType"),
            value: "\"System\"".to_string(),
            reason: format!("must be List when {constraints_at} is not empty"),
        });
    }
    for (i, c) in constraints.iter().enumerate() {
        if constraints[..i].iter().any(|o| {
            o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
        }) {
            return Err(SchedulerConfigError::Invalid {
                field: format!("{constraints_at}[{i}]"),
                value: format!("{{{}, {:?}}}", c.topology_key, c.when_unsatisfiable),
                reason: "a constraint with this topologyKey and whenUnsatisfiable comes earlier"
                    .to_string(),
            });
        }
    }
    profile.spread_defaulting = defaulting;
    profile.default_constraints = constraints;
    Ok(())
}

fn parse_default_constraint(
    at: &str,
    value: &Value,
) -> Result<TopologySpreadConstraint, SchedulerConfigError> {
    let mut max_skew = None;
    let mut topology_key = None;
    let mut action = None;
    let mut min_domains = None;
    let mut node_affinity_policy = NodeInclusionPolicy::Honor;
    let mut node_taints_policy = NodeInclusionPolicy::Ignore;
    for (key, value) in mapping(at, value)? {
        let k = key_str(at, key)?;
        let field = child(at, k);
        let positive = |v: &Value| -> Result<i32, SchedulerConfigError> {
            v.as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| invalid(&field, v, "must be a positive integer"))
        };
        let policy = |v: &Value| -> Result<NodeInclusionPolicy, SchedulerConfigError> {
            match string(&field, v)? {
                "Honor" => Ok(NodeInclusionPolicy::Honor),
                "Ignore" => Ok(NodeInclusionPolicy::Ignore),
                _ => Err(invalid(&field, v, "must be Honor or Ignore")),
            }
        };
        match k {
            "maxSkew" => max_skew = Some(positive(value)?),
            "topologyKey" => {
                let key = string(&field, value)?;
                if let Err(reason) = check_qualified_name(key) {
                    return Err(invalid(&field, value, reason));
                }
                topology_key = Some(key.to_string());
            }
            "whenUnsatisfiable" => {
                action = Some(match string(&field, value)? {
                    "DoNotSchedule" => UnsatisfiableAction::DoNotSchedule,
                    "ScheduleAnyway" => UnsatisfiableAction::ScheduleAnyway,
                    _ => {
                        return Err(invalid(
                            &field,
                            value,
                            "must be DoNotSchedule or ScheduleAnyway",
                        ));
                    }
                });
            }
            "minDomains" => min_domains = Some(positive(value)?),
            "nodeAffinityPolicy" => node_affinity_policy = policy(value)?,
            "nodeTaintsPolicy" => node_taints_policy = policy(value)?,
            "labelSelector" => {
                return Err(invalid(
                    &field,
                    value,
                    "default constraints must not have a selector: it is built for each pod",
                ));
            }
            _ => {
                return Err(unsupported(
                    &field,
                    value,
                    "a default constraint has maxSkew, topologyKey, whenUnsatisfiable, minDomains, \
                     nodeAffinityPolicy and nodeTaintsPolicy",
                ));
            }
        }
    }
    let required = |name: &str| invalid(&child(at, name), &Value::Null, "required");
    Ok(TopologySpreadConstraint {
        max_skew: max_skew.ok_or_else(|| required("maxSkew"))?,
        topology_key: topology_key.ok_or_else(|| required("topologyKey"))?,
        when_unsatisfiable: action.ok_or_else(|| required("whenUnsatisfiable"))?,
        label_selector: None,
        min_domains,
        node_affinity_policy,
        node_taints_policy,
    })
}

fn parse_fit_args(
    at: &str,
    value: &Value,
    profile: &mut SchedulerProfile,
) -> Result<(), SchedulerConfigError> {
    if let Value::Null = value {
        return Ok(());
    }
    for (key, value) in mapping(at, value)? {
        let k = key_str(at, key)?;
        if check_args_type(at, k, value, "NodeResourcesFitArgs")? {
            continue;
        }
        let field = child(at, k);
        match k {
            "ignoredResources" | "ignoredResourceGroups" => {
                let groups = k == "ignoredResourceGroups";
                let mut names = Vec::new();
                for (i, v) in sequence(&field, value)?.iter().enumerate() {
                    let item = format!("{field}[{i}]");
                    let name = string(&item, v)?;
                    if groups && name.contains('/') {
                        return Err(invalid(&item, v, "a resource group name has no '/'"));
                    }
                    if let Err(reason) = check_qualified_name(name) {
                        return Err(invalid(&item, v, reason));
                    }
                    names.push(name.to_string());
                }
                if groups {
                    profile.ignored_resource_groups = names;
                } else {
                    profile.ignored_resources = names;
                }
            }
            _ => {
                return Err(unsupported(
                    &field,
                    value,
                    "of NodeResourcesFitArgs only ignoredResources and ignoredResourceGroups \
                     change a Filter (scoringStrategy only scores)",
                ));
            }
        }
    }
    Ok(())
}

/// A Kubernetes qualified name (label key syntax): an optional DNS-subdomain prefix and `/`, then
/// 1-63 alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn check_qualified_name(text: &str) -> Result<(), String> {
    let (prefix, name) = match text.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, text),
    };
    if let Some(prefix) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            return Err(
                "the prefix must be a DNS subdomain (lower case, at most 253 characters)".into(),
            );
        }
    }
    let alnum = |b: u8| b.is_ascii_alphanumeric();
    let bytes = name.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().copied().is_some_and(alnum)
        && bytes.last().copied().is_some_and(alnum)
        && bytes
            .iter()
            .all(|b| alnum(*b) || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err("must be a qualified name: 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, with an optional DNS-subdomain prefix and '/'".into())
    }
}

#[cfg(test)]
mod tests;
