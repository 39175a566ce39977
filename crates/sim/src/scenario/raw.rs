//! The scenario file as written, before validation: serde structs that mirror the YAML. Values
//! that parse on their own (durations, selector strings, `at: end`) are checked during
//! deserialization, so their errors carry the parser's exact line.

use std::fmt;
use std::time::Duration;

use ferroscale_model::{LabelSelector, parse_go_duration};
use ferroscale_objects::k8s_openapi::api::core::v1 as core;
use serde::Deserialize;
use serde::de::{self, Deserializer};
use serde_yaml_ng::{Mapping, Value};

use super::selector::parse_label_selector;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawScenario {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub name: String,
    pub duration: GoDuration,
    pub seed: Option<u64>,
    #[serde(default)]
    pub options: Mapping,
    #[serde(default)]
    pub node_groups: Vec<RawNodeGroup>,
    #[serde(default)]
    pub objects: Vec<RawObjectSource>,
    #[serde(default)]
    pub events: Vec<RawEvent>,
    #[serde(default)]
    pub expect: Vec<RawExpectation>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawNodeGroup {
    pub id: String,
    pub min_size: i64,
    pub max_size: i64,
    pub initial_size: Option<i64>,
    pub provisioning_delay: Option<GoDuration>,
    #[serde(default)]
    pub failures: RawFailures,
    pub price_per_hour: Option<f64>,
    pub template: Box<core::Node>,
    /// Node objects of `objects:`, by name, that are instances of this group at time 0.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// CSI drivers the group's nodes report, with their volume limits.
    #[serde(default)]
    pub csi_drivers: Vec<RawCsiDriver>,
    /// DRA devices the group's nodes publish as ResourceSlices.
    #[serde(default)]
    pub devices: Vec<RawDevices>,
    /// `false`: the group's cloud has no cloud-controller-manager.
    pub cloud_controller_manager: Option<bool>,
}

/// `count` devices of one driver on every node of a group, named `<name>-<i>`, with the same
/// attributes and capacities.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawDevices {
    pub driver: String,
    pub name: Option<String>,
    pub count: i64,
    #[serde(default)]
    pub attributes: std::collections::BTreeMap<String, RawDeviceAttribute>,
    /// Capacity name → quantity string.
    #[serde(default)]
    pub capacity: std::collections::BTreeMap<String, String>,
}

/// A device attribute as the API writes it: exactly one of the four fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDeviceAttribute {
    pub int: Option<i64>,
    pub bool: Option<bool>,
    pub string: Option<String>,
    pub version: Option<String>,
}

/// One CSI driver of a group's nodes: `count` volumes at most (no limit without one).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawCsiDriver {
    pub name: String,
    pub count: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawFailures {
    #[serde(default)]
    pub increase_size: OneOrMany<RawFailureWindow>,
    #[serde(default)]
    pub delete_nodes: OneOrMany<RawFailureWindow>,
    #[serde(default)]
    pub decrease_target_size: OneOrMany<RawFailureWindow>,
    #[serde(default)]
    pub instance_creation: OneOrMany<RawFailureWindow>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawFailureWindow {
    pub from: GoDuration,
    pub to: GoDuration,
    #[serde(default)]
    pub error_class: RawErrorClass,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(super) enum RawErrorClass {
    OutOfResources,
    #[default]
    Other,
}

/// A single window or a list of them.
#[derive(Debug)]
pub(super) struct OneOrMany<T>(pub Vec<T>);

impl<T> Default for OneOrMany<T> {
    fn default() -> Self {
        OneOrMany(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> de::Visitor<'de> for Visitor<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping or a list of mappings")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(OneOrMany(items))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let item = T::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(OneOrMany(vec![item]))
            }
        }
        deserializer.deserialize_any(Visitor(std::marker::PhantomData))
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawObjectSource {
    pub file: Option<String>,
    pub inline: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawEvent {
    pub at: GoDuration,
    pub create: Option<RawCreate>,
    pub delete: Option<RawDelete>,
    pub cordon: Option<RawNodeRef>,
    pub uncordon: Option<RawNodeRef>,
    pub remove_node: Option<RawNodeRef>,
    pub delete_controller: Option<RawControllerRef>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawControllerRef {
    pub kind: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    pub name: String,
}

fn default_namespace() -> String {
    "default".to_string()
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawCreate {
    pub count: Option<u64>,
    pub pod: Option<Box<core::Pod>>,
    pub bind: Option<RawBind>,
    /// Pods per second the copies arrive at, as a controller creates them: `20/s`, `300/m`,
    /// `3600/h` or a plain number of pods per second. Checked in `ScenarioBuilder::event`.
    pub rate: Option<Value>,
    /// A PodTemplate, ProvisioningRequest, CapacityBuffer or CapacityQuota created at `at`
    /// (instead of `pod`).
    pub object: Option<Value>,
}

/// Binds created pods to existing nodes named `<nodePrefix><index>`: the first `podsPerNode`
/// copies to index `firstIndex`, the next ones to `firstIndex + 1`, and so on.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawBind {
    pub node_prefix: String,
    #[serde(default)]
    pub first_index: u64,
    pub pods_per_node: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawDelete {
    pub selector: SelectorString,
    pub count: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawNodeRef {
    pub node: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawExpectation {
    #[serde(default)]
    pub at: RawCheckTime,
    pub group: Option<String>,
    pub nodes: Option<RawRange>,
    pub total_nodes: Option<RawRange>,
    pub pending_pods: Option<u64>,
    pub running_pods: Option<u64>,
    pub nodes_removed: Option<RawRange>,
    pub lost_pods: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRange {
    pub min: Option<u64>,
    pub max: Option<u64>,
}

/// Parses a scalar inside the deserializer's visitor, so a parse error carries the scalar's own
/// line (errors raised after deserialization only get the enclosing mapping's line).
struct ScalarVisitor<F> {
    expecting: &'static str,
    parse: F,
}

impl<T, F: FnOnce(&str) -> Result<T, String>> de::Visitor<'_> for ScalarVisitor<F> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.parse)(v).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
}

/// A Go duration string, checked while parsing.
#[derive(Debug, Clone, Copy)]
pub(super) struct GoDuration(pub Duration);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScalarVisitor {
            expecting: "a duration such as 90s, 10m or 1h30m",
            parse: |s: &str| {
                parse_go_duration(s)
                    .map(GoDuration)
                    .map_err(|e| e.to_string())
            },
        })
    }
}

/// `end` or a Go duration.
#[derive(Debug, Clone, Copy, Default)]
pub(super) enum RawCheckTime {
    #[default]
    End,
    At(Duration),
}

impl<'de> Deserialize<'de> for RawCheckTime {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScalarVisitor {
            expecting: "`end` or a duration such as 45m",
            parse: |s: &str| {
                if s == "end" {
                    return Ok(RawCheckTime::End);
                }
                parse_go_duration(s)
                    .map(RawCheckTime::At)
                    .map_err(|e| format!("{e}, or `end`"))
            },
        })
    }
}

/// A `kubectl -l` style selector string, checked while parsing.
#[derive(Debug, Clone)]
pub(super) struct SelectorString(pub LabelSelector);

impl<'de> Deserialize<'de> for SelectorString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(ScalarVisitor {
            expecting: "a label selector such as app=web,tier!=cache",
            parse: |s: &str| {
                parse_label_selector(s)
                    .map(SelectorString)
                    .map_err(|e| format!("invalid label selector: {e}"))
            },
        })
    }
}
