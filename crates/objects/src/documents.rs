//! Multi-document YAML as `kubectl get -o yaml` and cluster dumps produce it: documents separated by
//! `---`, each a single object or a `List` of objects, dispatched on `kind`. Kinds the engine does not
//! use (Services, Deployments, ConfigMaps, ...) are skipped with a warning rather than refused, so a
//! dump of a real cluster can be used as it is.
//!
//! Parsing happens in two stages: [`RawObject`] holds the typed k8s-openapi object (type errors are
//! found here), then [`RawObject::convert`] turns it into the model once every PriorityClass is known
//! (value errors such as bad quantities are found here).

use std::fmt;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::resource::v1 as resource;
use k8s_openapi::api::scheduling::v1 as scheduling;
use k8s_openapi::api::storage::v1 as storage;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;
use thiserror::Error;

use ferroscale_capacity_apis::{capacity_buffer, capacity_quota, provisioning_request};

use crate::K8sObject;
use crate::convert::{
    ConvertError, PriorityClasses, capacity_buffer_from_k8s, capacity_quota_from_k8s,
    csi_node_from_k8s, daemonset_from_k8s, device_class_from_k8s, namespace_from_k8s,
    node_from_k8s, pdb_from_k8s, pod_from_k8s, pod_template_from_k8s, priority_class_from_k8s,
    provisioning_request_from_k8s, pv_from_k8s, pvc_from_k8s, resource_claim_from_k8s,
    resource_claim_template_from_k8s, resource_slice_from_k8s, storage_class_from_k8s,
};
use crate::locate::locate_field_line;
use crate::strict::unknown_field;

/// Invalid object YAML: names the origin (file), the line when known, the field path and the problem.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{origin}{}: {}{message}", line.map(|l| format!(":{l}")).unwrap_or_default(), if field.is_empty() { String::new() } else { format!("{field}: ") })]
pub struct ObjectsError {
    pub origin: String,
    /// 1-based line in the origin, when known.
    pub line: Option<usize>,
    /// Path of the bad field from the top of its document, e.g. `items[2].spec.taints[0].effect`.
    pub field: String,
    pub message: String,
}

/// A typed but not yet converted object.
#[derive(Debug, Clone)]
pub enum RawObject {
    Node(Box<core::Node>),
    Pod(Box<core::Pod>),
    DaemonSet(Box<apps::DaemonSet>),
    PodDisruptionBudget(Box<policy::PodDisruptionBudget>),
    PriorityClass(Box<scheduling::PriorityClass>),
    Namespace(Box<core::Namespace>),
    PersistentVolumeClaim(Box<core::PersistentVolumeClaim>),
    PersistentVolume(Box<core::PersistentVolume>),
    StorageClass(Box<storage::StorageClass>),
    CsiNode(Box<storage::CSINode>),
    ResourceSlice(Box<resource::ResourceSlice>),
    DeviceClass(Box<resource::DeviceClass>),
    ResourceClaim(Box<resource::ResourceClaim>),
    ResourceClaimTemplate(Box<resource::ResourceClaimTemplate>),
    PodTemplate(Box<core::PodTemplate>),
    /// Any served version, held as the storage version `v1`.
    ProvisioningRequest(Box<provisioning_request::v1::ProvisioningRequest>),
    /// Any served version, held as the storage version `v1beta1`.
    CapacityBuffer(Box<capacity_buffer::v1beta1::CapacityBuffer>),
    /// Any served version, held as the storage version `v1beta1`.
    CapacityQuota(Box<capacity_quota::v1beta1::CapacityQuota>),
    List(Vec<RawObject>),
    /// A kind the engine does not use; kept only to be reported.
    Skipped {
        kind: String,
        name: String,
    },
}

/// Why a YAML value is not a usable object: the field path inside the value and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawObjectError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for RawObjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// Deserializes a typed object strictly: a field the type does not have is an error naming it.
fn typed<T: DeserializeOwned + Serialize>(value: Value, prefix: &str) -> Result<T, RawObjectError> {
    let field_at = |inner: &str| match (prefix.is_empty(), inner == ".") {
        (_, true) => prefix.trim_end_matches('.').to_string(),
        (true, false) => inner.to_string(),
        (false, false) => format!("{prefix}{inner}"),
    };
    let object: T = serde_path_to_error::deserialize(&value).map_err(|e| RawObjectError {
        field: field_at(&e.path().to_string()),
        message: e.into_inner().to_string(),
    })?;
    match unknown_field(&value, &object) {
        None => Ok(object),
        Some(unknown) => Err(RawObjectError {
            message: format!(
                "unknown field `{}`",
                unknown.rsplit('.').next().unwrap_or(&unknown)
            ),
            field: field_at(&unknown),
        }),
    }
}

/// `resource.k8s.io/v1beta2` has the same shape as `v1` and is read with the `v1` types (strict
/// reading still refuses any field `v1` lacks). `v1beta1` nests devices differently and is refused.
const DRA_V1: &str = "resource.k8s.io/v1";
const DRA_V1BETA2: &str = "resource.k8s.io/v1beta2";

/// Takes a DRA object written for `v1beta2` as `v1`, and refuses one of a version whose shape the
/// `v1` types do not read. An item of a list without its own `apiVersion` is taken as `v1`.
fn dra_api_version(value: &mut Value, prefix: &str, kind: &str) -> Result<(), RawObjectError> {
    match string_field(value, "apiVersion") {
        None | Some(DRA_V1) => Ok(()),
        Some(DRA_V1BETA2) => {
            if let Some(version) = value.get_mut("apiVersion") {
                *version = Value::from(DRA_V1);
            }
            Ok(())
        }
        Some(version) => Err(RawObjectError {
            field: format!("{prefix}apiVersion"),
            message: format!(
                "{kind} of {version} is not read: write it as {DRA_V1} (as `kubectl get` prints it from a v1.34 or newer cluster)"
            ),
        }),
    }
}

const CAPACITY_GROUP: &str = "autoscaling.x-k8s.io";

/// Which served version of a capacity kind an object is written in: `storage` or `older` (read
/// with the older type and converted), the storage version for a list item without its own
/// `apiVersion`; any other version is refused naming the ones read.
fn capacity_version(
    value: &Value,
    prefix: &str,
    kind: &str,
    storage: &str,
    older: &str,
) -> Result<bool, RawObjectError> {
    match string_field(value, "apiVersion") {
        None => Ok(true),
        Some(version) if version == format!("{CAPACITY_GROUP}/{storage}") => Ok(true),
        Some(version) if version == format!("{CAPACITY_GROUP}/{older}") => Ok(false),
        Some(version) => Err(RawObjectError {
            field: format!("{prefix}apiVersion"),
            message: format!(
                "{kind} of {version} is not read: write it as {CAPACITY_GROUP}/{storage} or {CAPACITY_GROUP}/{older}"
            ),
        }),
    }
}

fn string_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

impl RawObject {
    /// Reads one object (or a `List`) from a YAML value, dispatching on `kind`. Items of a typed list
    /// (`PodList`) without their own `kind` take it from the list.
    pub fn from_value(value: Value) -> Result<RawObject, RawObjectError> {
        RawObject::from_value_at(value, "", None)
    }

    fn from_value_at(
        mut value: Value,
        prefix: &str,
        inherited_kind: Option<&str>,
    ) -> Result<RawObject, RawObjectError> {
        let at = |field: &str| format!("{prefix}{field}");
        if !value.is_mapping() {
            return Err(RawObjectError {
                field: prefix.trim_end_matches('.').to_string(),
                message: "expected a Kubernetes object (a mapping with apiVersion and kind)"
                    .to_string(),
            });
        }
        let kind = match (string_field(&value, "kind"), inherited_kind) {
            (Some(kind), _) => kind.to_string(),
            (None, Some(kind)) => kind.to_string(),
            (None, None) => {
                return Err(RawObjectError {
                    field: at("kind"),
                    message: "missing field `kind`".to_string(),
                });
            }
        };
        if let Some(items) = value.get_mut("items").filter(|_| kind.ends_with("List")) {
            let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
            let Value::Sequence(items) = std::mem::take(items) else {
                return Err(RawObjectError {
                    field: at("items"),
                    message: "expected a sequence of objects".to_string(),
                });
            };
            let mut objects = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                objects.push(RawObject::from_value_at(
                    item,
                    &at(&format!("items[{i}].")),
                    item_kind,
                )?);
            }
            return Ok(RawObject::List(objects));
        }
        Ok(match kind.as_str() {
            "Node" => RawObject::Node(typed(value, prefix)?),
            "Pod" => RawObject::Pod(typed(value, prefix)?),
            "DaemonSet" => RawObject::DaemonSet(typed(value, prefix)?),
            "PodDisruptionBudget" => RawObject::PodDisruptionBudget(typed(value, prefix)?),
            "PriorityClass" => RawObject::PriorityClass(typed(value, prefix)?),
            "Namespace" => RawObject::Namespace(typed(value, prefix)?),
            "PersistentVolumeClaim" => RawObject::PersistentVolumeClaim(typed(value, prefix)?),
            "PersistentVolume" => RawObject::PersistentVolume(typed(value, prefix)?),
            "StorageClass" => RawObject::StorageClass(typed(value, prefix)?),
            "CSINode" => RawObject::CsiNode(typed(value, prefix)?),
            "ResourceSlice" => {
                dra_api_version(&mut value, prefix, &kind)?;
                RawObject::ResourceSlice(typed(value, prefix)?)
            }
            "DeviceClass" => {
                dra_api_version(&mut value, prefix, &kind)?;
                RawObject::DeviceClass(typed(value, prefix)?)
            }
            "ResourceClaim" => {
                dra_api_version(&mut value, prefix, &kind)?;
                RawObject::ResourceClaim(typed(value, prefix)?)
            }
            "ResourceClaimTemplate" => {
                dra_api_version(&mut value, prefix, &kind)?;
                RawObject::ResourceClaimTemplate(typed(value, prefix)?)
            }
            "PodTemplate" => RawObject::PodTemplate(typed(value, prefix)?),
            "ProvisioningRequest" => {
                if capacity_version(&value, prefix, &kind, "v1", "v1beta1")? {
                    RawObject::ProvisioningRequest(typed(value, prefix)?)
                } else {
                    let old: provisioning_request::v1beta1::ProvisioningRequest =
                        typed(value, prefix)?;
                    RawObject::ProvisioningRequest(Box::new(old.into()))
                }
            }
            "CapacityBuffer" => {
                if capacity_version(&value, prefix, &kind, "v1beta1", "v1alpha1")? {
                    RawObject::CapacityBuffer(typed(value, prefix)?)
                } else {
                    let old: capacity_buffer::v1alpha1::CapacityBuffer = typed(value, prefix)?;
                    RawObject::CapacityBuffer(Box::new(old.into()))
                }
            }
            "CapacityQuota" => {
                if capacity_version(&value, prefix, &kind, "v1beta1", "v1alpha1")? {
                    RawObject::CapacityQuota(typed(value, prefix)?)
                } else {
                    let old: capacity_quota::v1alpha1::CapacityQuota = typed(value, prefix)?;
                    RawObject::CapacityQuota(Box::new(old.into()))
                }
            }
            _ => {
                let metadata = value.get("metadata");
                let name = metadata
                    .and_then(|m| string_field(m, "name"))
                    .unwrap_or("<unnamed>");
                let name = match metadata.and_then(|m| string_field(m, "namespace")) {
                    Some(ns) => format!("{ns}/{name}"),
                    None => name.to_string(),
                };
                RawObject::Skipped { kind, name }
            }
        })
    }

    /// Adds every PriorityClass in this object (or list) to `known`, so pods anywhere in the same
    /// input can name them.
    pub fn collect_priority_classes(
        &self,
        known: &mut PriorityClasses,
    ) -> Result<(), ConvertError> {
        match self {
            RawObject::PriorityClass(class) => known.insert(&priority_class_from_k8s(class)?),
            RawObject::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    item.collect_priority_classes(known)
                        .map_err(|e| in_item(i, e))?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Converts into model objects, appending to `out`; a skipped kind appends a warning instead.
    pub fn convert(
        &self,
        priorities: &PriorityClasses,
        out: &mut Vec<K8sObject>,
        warnings: &mut Vec<String>,
    ) -> Result<(), ConvertError> {
        match self {
            RawObject::Node(node) => out.push(K8sObject::Node(node_from_k8s(node)?)),
            RawObject::Pod(pod) => out.push(K8sObject::Pod(pod_from_k8s(pod, priorities)?)),
            RawObject::DaemonSet(ds) => {
                out.push(K8sObject::DaemonSet(daemonset_from_k8s(ds, priorities)?))
            }
            RawObject::PodDisruptionBudget(pdb) => {
                out.push(K8sObject::PodDisruptionBudget(pdb_from_k8s(pdb)?))
            }
            RawObject::PriorityClass(class) => {
                out.push(K8sObject::PriorityClass(priority_class_from_k8s(class)?))
            }
            RawObject::Namespace(ns) => out.push(K8sObject::Namespace(namespace_from_k8s(ns))),
            RawObject::PersistentVolumeClaim(claim) => {
                out.push(K8sObject::PersistentVolumeClaim(pvc_from_k8s(claim)?))
            }
            RawObject::PersistentVolume(volume) => {
                out.push(K8sObject::PersistentVolume(pv_from_k8s(volume)?))
            }
            RawObject::StorageClass(class) => {
                out.push(K8sObject::StorageClass(storage_class_from_k8s(class)?))
            }
            RawObject::CsiNode(csi_node) => {
                out.push(K8sObject::CsiNode(csi_node_from_k8s(csi_node)?))
            }
            RawObject::ResourceSlice(slice) => {
                out.push(K8sObject::ResourceSlice(resource_slice_from_k8s(slice)?))
            }
            RawObject::DeviceClass(class) => {
                out.push(K8sObject::DeviceClass(device_class_from_k8s(class)?))
            }
            RawObject::ResourceClaim(claim) => {
                out.push(K8sObject::ResourceClaim(resource_claim_from_k8s(claim)?))
            }
            RawObject::ResourceClaimTemplate(template) => out.push(
                K8sObject::ResourceClaimTemplate(resource_claim_template_from_k8s(template)?),
            ),
            RawObject::PodTemplate(template) => out.push(K8sObject::PodTemplate(
                pod_template_from_k8s(template, priorities)?,
            )),
            RawObject::ProvisioningRequest(request) => out.push(K8sObject::ProvisioningRequest(
                provisioning_request_from_k8s(request)?,
            )),
            RawObject::CapacityBuffer(buffer) => {
                out.push(K8sObject::CapacityBuffer(capacity_buffer_from_k8s(buffer)?))
            }
            RawObject::CapacityQuota(quota) => {
                out.push(K8sObject::CapacityQuota(capacity_quota_from_k8s(quota)?))
            }
            RawObject::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    item.convert(priorities, out, warnings)
                        .map_err(|e| in_item(i, e))?;
                }
            }
            RawObject::Skipped { kind, name } => warnings.push(format!(
                "skipped {kind} {name}: the simulator does not use this kind"
            )),
        }
        Ok(())
    }
}

fn in_item(index: usize, e: ConvertError) -> ConvertError {
    ConvertError {
        field: format!("items[{index}].{}", e.field),
        ..e
    }
}

/// Objects read from YAML, plus warnings about what was skipped.
#[derive(Debug, Clone, Default)]
pub struct ParsedObjects {
    pub objects: Vec<K8sObject>,
    pub warnings: Vec<String>,
}

/// One YAML document of a multi-document text, with the line it starts on (0-based).
#[derive(Debug, Clone, Copy)]
pub struct Document<'a> {
    pub text: &'a str,
    pub first_line: usize,
}

/// Splits a stream at `---` lines. The marker line itself belongs to the document it opens (it may
/// carry content, as in `--- {kind: Pod}`).
pub fn split_documents(text: &str) -> Vec<Document<'_>> {
    let mut documents = Vec::new();
    let mut start_byte = 0;
    let mut start_line = 0;
    let mut offset = 0;
    for (line_number, line) in text.split_inclusive('\n').enumerate() {
        let content = line.trim_end_matches(['\n', '\r']);
        let is_marker =
            content == "---" || content.starts_with("--- ") || content.starts_with("---\t");
        if is_marker && offset > start_byte {
            documents.push(Document {
                text: &text[start_byte..offset],
                first_line: start_line,
            });
            start_byte = offset;
            start_line = line_number;
        }
        offset += line.len();
    }
    documents.push(Document {
        text: &text[start_byte..],
        first_line: start_line,
    });
    documents
}

/// A YAML document's value; `None` when the document is empty (only comments or markers).
fn document_value(document: &Document<'_>, origin: &str) -> Result<Option<Value>, ObjectsError> {
    let body = document.text.trim_start();
    let body = body.strip_prefix("---").unwrap_or(body);
    if body.lines().all(|l| {
        let l = l.trim();
        l.is_empty() || l.starts_with('#') || l == "..."
    }) {
        return Ok(None);
    }
    let value: Value = serde_yaml_ng::from_str(document.text).map_err(|e| ObjectsError {
        origin: origin.to_string(),
        line: e.location().map(|l| l.line() + document.first_line),
        field: String::new(),
        message: e.to_string(),
    })?;
    Ok(if value.is_null() { None } else { Some(value) })
}

/// An object read from one document of a multi-document text, not yet converted.
#[derive(Debug, Clone)]
pub struct DocumentObject<'a> {
    pub document: Document<'a>,
    pub object: RawObject,
}

impl DocumentObject<'_> {
    /// Turns a conversion error of this object into an error pointing at its line in `origin`.
    pub fn error(&self, origin: &str, e: ConvertError) -> ObjectsError {
        ObjectsError {
            origin: origin.to_string(),
            line: locate_field_line(self.document.text, &e.field)
                .map(|l| l + self.document.first_line),
            field: e.field.clone(),
            message: format!("{}: {} (value {:?})", e.object, e.message, e.value),
        }
    }
}

/// Reads every document of `text` into typed objects (first stage; see the module doc).
pub fn read_documents<'a>(
    text: &'a str,
    origin: &str,
) -> Result<Vec<DocumentObject<'a>>, ObjectsError> {
    let mut raw = Vec::new();
    for document in split_documents(text) {
        let Some(value) = document_value(&document, origin)? else {
            continue;
        };
        let object = RawObject::from_value(value).map_err(|e| ObjectsError {
            origin: origin.to_string(),
            line: locate_field_line(document.text, &e.field).map(|l| l + document.first_line),
            field: e.field.clone(),
            message: e.message,
        })?;
        raw.push(DocumentObject { document, object });
    }
    Ok(raw)
}

/// Parses one or more YAML documents of Kubernetes objects (as `kubectl get -o yaml` prints them)
/// into the model. PriorityClasses anywhere in the text are known to every pod; `known` adds more
/// (from other files). Kinds the engine does not use are skipped with a warning.
pub fn parse_objects_yaml_with(
    text: &str,
    origin: &str,
    known: &PriorityClasses,
) -> Result<ParsedObjects, ObjectsError> {
    let raw = read_documents(text, origin)?;
    let mut priorities = known.clone();
    for item in &raw {
        item.object
            .collect_priority_classes(&mut priorities)
            .map_err(|e| item.error(origin, e))?;
    }
    let mut parsed = ParsedObjects::default();
    for item in &raw {
        item.object
            .convert(&priorities, &mut parsed.objects, &mut parsed.warnings)
            .map_err(|e| item.error(origin, e))?;
    }
    Ok(parsed)
}

/// [`parse_objects_yaml_with`] knowing only the built-in priority classes.
pub fn parse_objects_yaml(text: &str, origin: &str) -> Result<ParsedObjects, ObjectsError> {
    parse_objects_yaml_with(text, origin, &PriorityClasses::default())
}
