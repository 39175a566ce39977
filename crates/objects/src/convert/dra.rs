//! Dynamic Resource Allocation objects (`resource.k8s.io/v1` ResourceSlices, DeviceClasses,
//! ResourceClaims and ResourceClaimTemplates) converted for the DynamicResources filter.
//!
//! Everything the filter relies on is checked here once: each slice names exactly one node
//! selection, attribute values have exactly one type, capacities are non-negative quantities,
//! allocation modes and counts are valid. Bare attribute and capacity names are qualified with the
//! slice's driver name, so the model only ever holds `<domain>/<id>` names.
//!
//! Sizes are bounded by the API server's own validation limits (devices per slice, requests per
//! claim, selectors, CEL expression length, ...): an object over a limit is refused with an error
//! instead of being taken in, so a hand-written scenario or a misbehaving provider cannot make the
//! filter evaluate unbounded input.
//!
//! Not modelled, and ignored when present: list-valued attributes (`bools`, `ints`, `strings`,
//! `versions`), device taints and tolerations, shared counters and counter consumption, consumable
//! capacity policies, binding conditions, and request/class `config`.

use std::collections::{BTreeMap, BTreeSet};

use ferroscale_model::dra::MAX_CLAIM_CONSUMERS;
use ferroscale_model::{
    AllocatedDevice, AllocationMode, ClaimAllocation, ClaimConsumer, ClaimSpec, Device,
    DeviceAttribute, DeviceClass, DeviceConstraint, DeviceRequest, DeviceRequestKind, DeviceScope,
    DeviceSubRequest, ExactDeviceRequest, NodeSelector, Quantity, ResourceClaim,
    ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1 as resource;

use super::{ConvertError, ObjectContext, namespace_or_default, node_selector};

/// Devices one ResourceSlice may list.
pub const MAX_DEVICES_PER_SLICE: usize = 128;
/// Attributes and capacities together, per device.
pub const MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE: usize = 32;
/// Requests in one claim (`spec.devices.requests`).
pub const MAX_REQUESTS_PER_CLAIM: usize = 32;
/// Alternatives in one `firstAvailable` request.
pub const MAX_SUBREQUESTS: usize = 8;
/// Constraints in one claim.
pub const MAX_CONSTRAINTS_PER_CLAIM: usize = 32;
/// Selectors of one request or one class.
pub const MAX_SELECTORS: usize = 32;
/// Characters of one CEL selector expression.
pub const MAX_EXPRESSION_LENGTH: usize = 10 * 1024;
/// Devices one claim can be allocated (`status.allocation.devices.results`); also the largest
/// `count` an ExactCount request can ever be satisfied with.
pub const MAX_ALLOCATED_DEVICES: usize = 32;
/// Characters of a string or version attribute value.
pub const MAX_ATTRIBUTE_VALUE_LENGTH: usize = 64;
/// Characters of the identifier part of an attribute or capacity name.
const MAX_IDENTIFIER_LENGTH: usize = 32;
/// Characters of the domain part of an attribute or capacity name.
const MAX_DOMAIN_LENGTH: usize = 63;

/// Refuses a list longer than `max`.
fn bounded(ctx: &ObjectContext, field: &str, len: usize, max: usize) -> Result<(), ConvertError> {
    if len > max {
        return Err(ctx.error(
            field,
            format!("{len} entries"),
            format!("at most {max} are allowed"),
        ));
    }
    Ok(())
}

/// `<domain>/<id>` for an attribute or capacity name; a bare `<id>` belongs to `driver`.
fn qualified_name(
    ctx: &ObjectContext,
    field: &str,
    name: &str,
    driver: &str,
) -> Result<String, ConvertError> {
    let (domain, id) = match name.split_once('/') {
        Some((domain, id)) => (domain, id),
        None => (driver, name),
    };
    let id_ok = !id.is_empty()
        && id.len() <= MAX_IDENTIFIER_LENGTH
        && id.starts_with(|c: char| c.is_ascii_alphabetic())
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !id_ok {
        return Err(ctx.error(
            field,
            name,
            format!(
                "the name must be a C identifier of at most {MAX_IDENTIFIER_LENGTH} characters, optionally prefixed with a domain and `/`"
            ),
        ));
    }
    if domain.is_empty() || domain.len() > MAX_DOMAIN_LENGTH || domain.contains('/') {
        return Err(ctx.error(
            field,
            name,
            format!("the domain must be a DNS subdomain of at most {MAX_DOMAIN_LENGTH} characters"),
        ));
    }
    Ok(format!("{domain}/{id}"))
}

/// A constraint's attribute name: the API requires it fully qualified.
fn constraint_attribute(
    ctx: &ObjectContext,
    field: &str,
    name: &str,
) -> Result<String, ConvertError> {
    if !name.contains('/') {
        return Err(ctx.error(
            field,
            name,
            "a constraint's attribute must be fully qualified (`<domain>/<id>`)",
        ));
    }
    qualified_name(ctx, field, name, "")
}

/// A semantic version as the API accepts it: `MAJOR.MINOR.PATCH`, optional `-pre` and `+build`.
fn is_semver(version: &str) -> bool {
    let (rest, build) = match version.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (version, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let numbers: Vec<&str> = core.split('.').collect();
    let numeric = |n: &&str| {
        !n.is_empty()
            && n.chars().all(|c| c.is_ascii_digit())
            && (n.len() == 1 || !n.starts_with('0'))
    };
    let identifiers = |s: &str| {
        s.split('.').all(|part| {
            !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
    };
    numbers.len() == 3
        && numbers.iter().all(numeric)
        && pre.is_none_or(identifiers)
        && build.is_none_or(identifiers)
}

fn attribute(
    ctx: &ObjectContext,
    field: &str,
    value: &resource::DeviceAttribute,
) -> Result<Option<DeviceAttribute>, ConvertError> {
    let lists = value.bools.is_some()
        || value.ints.is_some()
        || value.strings.is_some()
        || value.versions.is_some();
    let mut scalars = Vec::new();
    if let Some(b) = value.bool {
        scalars.push(DeviceAttribute::Bool(b));
    }
    if let Some(i) = value.int {
        scalars.push(DeviceAttribute::Int(i));
    }
    if let Some(s) = &value.string {
        if s.chars().count() > MAX_ATTRIBUTE_VALUE_LENGTH {
            return Err(ctx.error(
                format!("{field}.string"),
                s.as_str(),
                format!("a string attribute has at most {MAX_ATTRIBUTE_VALUE_LENGTH} characters"),
            ));
        }
        scalars.push(DeviceAttribute::String(s.clone()));
    }
    if let Some(v) = &value.version {
        if v.len() > MAX_ATTRIBUTE_VALUE_LENGTH || !is_semver(v) {
            return Err(ctx.error(
                format!("{field}.version"),
                v.as_str(),
                "a version attribute must be a semantic version (MAJOR.MINOR.PATCH) of at most 64 characters",
            ));
        }
        scalars.push(DeviceAttribute::Version(v.clone()));
    }
    match (scalars.len(), lists) {
        (1, false) => Ok(scalars.pop()),
        // A list-valued attribute is not modelled: the device is kept without it.
        (0, true) => Ok(None),
        _ => Err(ctx.error(
            field,
            format!("{} values", scalars.len() + usize::from(lists)),
            "an attribute must have exactly one of bool, int, string and version",
        )),
    }
}

/// The node selection of a slice or of one device: exactly one of `nodeName`, `nodeSelector` and
/// `allNodes: true`. `None` when none is set (the caller decides whether that is allowed).
fn scope(
    ctx: &ObjectContext,
    field: &str,
    node_name: Option<&str>,
    selector: Option<&core::NodeSelector>,
    all_nodes: Option<bool>,
    extra_choices: usize,
) -> Result<Option<DeviceScope>, ConvertError> {
    let node_name = node_name.filter(|n| !n.is_empty());
    let all_nodes = all_nodes == Some(true);
    let set = usize::from(node_name.is_some())
        + usize::from(selector.is_some())
        + usize::from(all_nodes)
        + extra_choices;
    if set > 1 {
        return Err(ctx.error(
            field,
            format!("{set} set"),
            "exactly one of nodeName, nodeSelector, allNodes and perDeviceNodeSelection may be set",
        ));
    }
    if let Some(name) = node_name {
        return Ok(Some(DeviceScope::Node(name.to_string())));
    }
    if let Some(selector) = selector {
        let selector = node_selector(ctx, &format!("{field}.nodeSelector"), selector)?;
        return Ok(Some(DeviceScope::Selector(selector)));
    }
    Ok(all_nodes.then_some(DeviceScope::AllNodes))
}

fn device(
    ctx: &ObjectContext,
    field: &str,
    driver: &str,
    per_device_node_selection: bool,
    device: &resource::Device,
) -> Result<Device, ConvertError> {
    if device.name.is_empty() {
        return Err(ctx.error(format!("{field}.name"), "", "a device needs a name"));
    }
    let attributes_in = device.attributes.as_ref();
    let capacity_in = device.capacity.as_ref();
    let count = attributes_in.map_or(0, BTreeMap::len) + capacity_in.map_or(0, BTreeMap::len);
    if count > MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE {
        return Err(ctx.error(
            field,
            format!("{count} attributes and capacities"),
            format!(
                "a device has at most {MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE} attributes and capacities together"
            ),
        ));
    }
    let mut attributes = BTreeMap::new();
    for (name, value) in attributes_in.into_iter().flatten() {
        let entry = format!("{field}.attributes.{name}");
        let qualified = qualified_name(ctx, &entry, name, driver)?;
        if let Some(value) = attribute(ctx, &entry, value)? {
            attributes.insert(qualified, value);
        }
    }
    let mut capacity = BTreeMap::new();
    for (name, value) in capacity_in.into_iter().flatten() {
        let entry = format!("{field}.capacity.{name}");
        let qualified = qualified_name(ctx, &entry, name, driver)?;
        let value_field = format!("{entry}.value");
        let parsed = Quantity::parse(&value.value.0)
            .map_err(|e| ctx.error(&value_field, value.value.0.clone(), e.reason))?;
        if parsed.nanos() < 0 {
            return Err(ctx.error(&value_field, value.value.0.clone(), "must not be negative"));
        }
        capacity.insert(qualified, parsed);
    }
    let own_scope = scope(
        ctx,
        field,
        device.node_name.as_deref(),
        device.node_selector.as_ref(),
        device.all_nodes,
        0,
    )?;
    let scope = match (per_device_node_selection, own_scope) {
        (true, Some(scope)) => Some(scope),
        (true, None) => {
            return Err(ctx.error(
                field,
                device.name.as_str(),
                "with perDeviceNodeSelection each device must set one of nodeName, nodeSelector and allNodes",
            ));
        }
        (false, Some(_)) => {
            return Err(ctx.error(
                field,
                device.name.as_str(),
                "a device may only set its own node selection when the slice has perDeviceNodeSelection: true",
            ));
        }
        (false, None) => None,
    };
    Ok(Device {
        name: device.name.clone(),
        attributes,
        capacity,
        scope,
    })
}

/// Converts a ResourceSlice. Its node selection (`nodeName`, `nodeSelector`, `allNodes` or
/// `perDeviceNodeSelection`) must name exactly one choice.
pub fn resource_slice_from_k8s(
    slice: &resource::ResourceSlice,
) -> Result<ResourceSlice, ConvertError> {
    let ctx = ObjectContext::new("ResourceSlice", &slice.metadata);
    let spec = &slice.spec;
    if spec.driver.is_empty() {
        return Err(ctx.error("spec.driver", "", "a slice needs a driver name"));
    }
    if spec.pool.name.is_empty() {
        return Err(ctx.error("spec.pool.name", "", "a slice needs a pool name"));
    }
    if spec.pool.generation < 0 {
        return Err(ctx.error(
            "spec.pool.generation",
            spec.pool.generation.to_string(),
            "must not be negative",
        ));
    }
    if spec.pool.resource_slice_count <= 0 {
        return Err(ctx.error(
            "spec.pool.resourceSliceCount",
            spec.pool.resource_slice_count.to_string(),
            "must be greater than zero",
        ));
    }
    let per_device_node_selection = spec.per_device_node_selection == Some(true);
    let slice_scope = scope(
        &ctx,
        "spec",
        spec.node_name.as_deref(),
        spec.node_selector.as_ref(),
        spec.all_nodes,
        usize::from(per_device_node_selection),
    )?;
    let scope = match (slice_scope, per_device_node_selection) {
        (Some(scope), false) => scope,
        // Each device carries its own; the slice as a whole reaches no particular node.
        (None, true) => DeviceScope::AllNodes,
        (_, _) => {
            return Err(ctx.error(
                "spec",
                "none set",
                "exactly one of nodeName, nodeSelector, allNodes and perDeviceNodeSelection must be set",
            ));
        }
    };
    let devices_in = spec.devices.as_deref().unwrap_or_default();
    bounded(
        &ctx,
        "spec.devices",
        devices_in.len(),
        MAX_DEVICES_PER_SLICE,
    )?;
    let mut names = BTreeSet::new();
    let mut devices = Vec::with_capacity(devices_in.len());
    for (i, d) in devices_in.iter().enumerate() {
        let field = format!("spec.devices[{i}]");
        if !names.insert(d.name.as_str()) {
            return Err(ctx.error(
                format!("{field}.name"),
                d.name.as_str(),
                "device names must be unique within a slice",
            ));
        }
        devices.push(device(
            &ctx,
            &field,
            &spec.driver,
            per_device_node_selection,
            d,
        )?);
    }
    Ok(ResourceSlice {
        name: slice.metadata.name.clone().unwrap_or_default(),
        driver: spec.driver.clone(),
        pool: spec.pool.name.clone(),
        pool_generation: spec.pool.generation,
        pool_slice_count: spec.pool.resource_slice_count,
        scope,
        per_device_node_selection,
        devices,
    })
}

/// CEL expressions of `selectors` (each must be a `cel` selector).
fn selectors(
    ctx: &ObjectContext,
    field: &str,
    selectors: Option<&Vec<resource::DeviceSelector>>,
) -> Result<Vec<String>, ConvertError> {
    let selectors = selectors.map(Vec::as_slice).unwrap_or_default();
    bounded(ctx, field, selectors.len(), MAX_SELECTORS)?;
    let mut out = Vec::with_capacity(selectors.len());
    for (i, selector) in selectors.iter().enumerate() {
        let field = format!("{field}[{i}].cel.expression");
        let Some(cel) = &selector.cel else {
            return Err(ctx.error(field, "", "a selector needs a cel expression"));
        };
        let expression = cel.expression.trim();
        if expression.is_empty() {
            return Err(ctx.error(field, "", "a selector needs a cel expression"));
        }
        if cel.expression.len() > MAX_EXPRESSION_LENGTH {
            return Err(ctx.error(
                field,
                format!("{} characters", cel.expression.len()),
                format!("a CEL expression has at most {MAX_EXPRESSION_LENGTH} characters"),
            ));
        }
        out.push(cel.expression.clone());
    }
    Ok(out)
}

/// Converts a DeviceClass.
pub fn device_class_from_k8s(class: &resource::DeviceClass) -> Result<DeviceClass, ConvertError> {
    let ctx = ObjectContext::new("DeviceClass", &class.metadata);
    Ok(DeviceClass {
        name: class.metadata.name.clone().unwrap_or_default(),
        selectors: selectors(&ctx, "spec.selectors", class.spec.selectors.as_ref())?,
        extended_resource_name: class
            .spec
            .extended_resource_name
            .clone()
            .filter(|n| !n.is_empty()),
    })
}

/// The parts an `exactly` request and a `firstAvailable` alternative share.
struct RequestFields<'a> {
    device_class_name: &'a str,
    selectors: Option<&'a Vec<resource::DeviceSelector>>,
    allocation_mode: Option<&'a str>,
    count: Option<i64>,
    admin_access: Option<bool>,
}

fn exact_request(
    ctx: &ObjectContext,
    field: &str,
    request: RequestFields<'_>,
) -> Result<ExactDeviceRequest, ConvertError> {
    if request.device_class_name.is_empty() {
        return Err(ctx.error(
            format!("{field}.deviceClassName"),
            "",
            "a request needs a device class",
        ));
    }
    let allocation_mode = match (request.allocation_mode, request.count) {
        (None | Some("ExactCount"), None) => AllocationMode::ExactCount(1),
        (None | Some("ExactCount"), Some(count)) => {
            if count <= 0 || count > MAX_ALLOCATED_DEVICES as i64 {
                return Err(ctx.error(
                    format!("{field}.count"),
                    count.to_string(),
                    format!(
                        "count must be between 1 and {MAX_ALLOCATED_DEVICES} (the most devices one claim can be allocated)"
                    ),
                ));
            }
            // In range 1..=32 by the check above.
            AllocationMode::ExactCount(count as u32)
        }
        (Some("All"), None) => AllocationMode::All,
        (Some("All"), Some(count)) => {
            return Err(ctx.error(
                format!("{field}.count"),
                count.to_string(),
                "count must not be set with allocationMode All",
            ));
        }
        (Some(other), _) => {
            return Err(ctx.error(
                format!("{field}.allocationMode"),
                other,
                "allocation mode must be ExactCount or All",
            ));
        }
    };
    Ok(ExactDeviceRequest {
        device_class_name: request.device_class_name.to_string(),
        selectors: selectors(ctx, &format!("{field}.selectors"), request.selectors)?,
        allocation_mode,
        admin_access: request.admin_access == Some(true),
    })
}

fn device_request(
    ctx: &ObjectContext,
    field: &str,
    request: &resource::DeviceRequest,
) -> Result<DeviceRequest, ConvertError> {
    if request.name.is_empty() {
        return Err(ctx.error(format!("{field}.name"), "", "a request needs a name"));
    }
    let kind = match (&request.exactly, &request.first_available) {
        (Some(exactly), None) => DeviceRequestKind::Exactly(exact_request(
            ctx,
            &format!("{field}.exactly"),
            RequestFields {
                device_class_name: &exactly.device_class_name,
                selectors: exactly.selectors.as_ref(),
                allocation_mode: exactly.allocation_mode.as_deref(),
                count: exactly.count,
                admin_access: exactly.admin_access,
            },
        )?),
        (None, Some(alternatives)) => {
            let list_field = format!("{field}.firstAvailable");
            if alternatives.is_empty() {
                return Err(ctx.error(list_field, "[]", "firstAvailable needs an alternative"));
            }
            bounded(ctx, &list_field, alternatives.len(), MAX_SUBREQUESTS)?;
            let mut names = BTreeSet::new();
            let mut out = Vec::with_capacity(alternatives.len());
            for (i, sub) in alternatives.iter().enumerate() {
                let sub_field = format!("{list_field}[{i}]");
                if sub.name.is_empty() || !names.insert(sub.name.as_str()) {
                    return Err(ctx.error(
                        format!("{sub_field}.name"),
                        sub.name.as_str(),
                        "an alternative needs a name unique within its request",
                    ));
                }
                out.push(DeviceSubRequest {
                    name: sub.name.clone(),
                    request: exact_request(
                        ctx,
                        &sub_field,
                        RequestFields {
                            device_class_name: &sub.device_class_name,
                            selectors: sub.selectors.as_ref(),
                            allocation_mode: sub.allocation_mode.as_deref(),
                            count: sub.count,
                            admin_access: None,
                        },
                    )?,
                });
            }
            DeviceRequestKind::FirstAvailable(out)
        }
        _ => {
            return Err(ctx.error(
                field,
                request.name.as_str(),
                "a request must set exactly one of exactly and firstAvailable",
            ));
        }
    };
    Ok(DeviceRequest {
        name: request.name.clone(),
        kind,
    })
}

/// `spec` of a claim or (under `spec.spec`) of a claim template; `field` is its path.
fn claim_spec(
    ctx: &ObjectContext,
    field: &str,
    spec: &resource::ResourceClaimSpec,
) -> Result<ClaimSpec, ConvertError> {
    let Some(devices) = &spec.devices else {
        return Ok(ClaimSpec::default());
    };
    let requests_in = devices.requests.as_deref().unwrap_or_default();
    let requests_field = format!("{field}.devices.requests");
    bounded(
        ctx,
        &requests_field,
        requests_in.len(),
        MAX_REQUESTS_PER_CLAIM,
    )?;
    let mut names = BTreeSet::new();
    let mut requests = Vec::with_capacity(requests_in.len());
    for (i, request) in requests_in.iter().enumerate() {
        let request_field = format!("{requests_field}[{i}]");
        if !names.insert(request.name.as_str()) {
            return Err(ctx.error(
                format!("{request_field}.name"),
                request.name.as_str(),
                "request names must be unique within a claim",
            ));
        }
        requests.push(device_request(ctx, &request_field, request)?);
    }
    let constraints_in = devices.constraints.as_deref().unwrap_or_default();
    let constraints_field = format!("{field}.devices.constraints");
    bounded(
        ctx,
        &constraints_field,
        constraints_in.len(),
        MAX_CONSTRAINTS_PER_CLAIM,
    )?;
    let mut constraints = Vec::with_capacity(constraints_in.len());
    for (i, constraint) in constraints_in.iter().enumerate() {
        let constraint_field = format!("{constraints_field}[{i}]");
        let match_attribute = constraint
            .match_attribute
            .as_deref()
            .map(|a| constraint_attribute(ctx, &format!("{constraint_field}.matchAttribute"), a))
            .transpose()?;
        let distinct_attribute = constraint
            .distinct_attribute
            .as_deref()
            .map(|a| constraint_attribute(ctx, &format!("{constraint_field}.distinctAttribute"), a))
            .transpose()?;
        if match_attribute.is_some() == distinct_attribute.is_some() {
            return Err(ctx.error(
                constraint_field,
                "",
                "a constraint must set exactly one of matchAttribute and distinctAttribute",
            ));
        }
        let named = constraint.requests.as_deref().unwrap_or_default();
        bounded(
            ctx,
            &format!("{constraint_field}.requests"),
            named.len(),
            MAX_REQUESTS_PER_CLAIM,
        )?;
        for (j, name) in named.iter().enumerate() {
            let parent = name.split_once('/').map_or(name.as_str(), |(p, _)| p);
            if !names.contains(parent) {
                return Err(ctx.error(
                    format!("{constraint_field}.requests[{j}]"),
                    name.as_str(),
                    "a constraint must name requests of the claim",
                ));
            }
        }
        constraints.push(DeviceConstraint {
            requests: named.to_vec(),
            match_attribute,
            distinct_attribute,
        });
    }
    Ok(ClaimSpec {
        requests,
        constraints,
    })
}

fn allocation(
    ctx: &ObjectContext,
    allocation: &resource::AllocationResult,
) -> Result<ClaimAllocation, ConvertError> {
    let results = allocation
        .devices
        .as_ref()
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default();
    let field = "status.allocation.devices.results";
    bounded(ctx, field, results.len(), MAX_ALLOCATED_DEVICES)?;
    let mut devices = Vec::with_capacity(results.len());
    for (i, result) in results.iter().enumerate() {
        for (name, value) in [
            ("request", &result.request),
            ("driver", &result.driver),
            ("pool", &result.pool),
            ("device", &result.device),
        ] {
            if value.is_empty() {
                return Err(ctx.error(
                    format!("{field}[{i}].{name}"),
                    "",
                    format!("an allocated device needs a {name}"),
                ));
            }
        }
        devices.push(AllocatedDevice {
            request: result.request.clone(),
            driver: result.driver.clone(),
            pool: result.pool.clone(),
            device: result.device.clone(),
            admin_access: result.admin_access == Some(true),
        });
    }
    let node_selector: Option<NodeSelector> = allocation
        .node_selector
        .as_ref()
        .map(|s| node_selector(ctx, "status.allocation.nodeSelector", s))
        .transpose()?;
    Ok(ClaimAllocation {
        devices,
        node_selector,
    })
}

/// Converts a ResourceClaim. A claim without a namespace lives in `default`; the pod that owns
/// it as its controller (a claim made from a template) is kept as `owner_pod_uid`.
pub fn resource_claim_from_k8s(
    claim: &resource::ResourceClaim,
) -> Result<ResourceClaim, ConvertError> {
    let ctx = ObjectContext::namespaced("ResourceClaim", &claim.metadata);
    let metadata = &claim.metadata;
    let status = claim.status.as_ref();
    let reserved_in = status
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default();
    bounded(
        &ctx,
        "status.reservedFor",
        reserved_in.len(),
        MAX_CLAIM_CONSUMERS,
    )?;
    let reserved_for = reserved_in
        .iter()
        .map(|consumer| ClaimConsumer {
            resource: consumer.resource.clone(),
            name: consumer.name.clone(),
            uid: consumer.uid.clone(),
        })
        .collect();
    let owner_pod_uid = metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "Pod" && o.api_version == "v1")
        .map(|o| o.uid.clone());
    Ok(ResourceClaim {
        namespace: namespace_or_default(metadata),
        name: metadata.name.clone().unwrap_or_default(),
        uid: metadata.uid.clone().unwrap_or_default(),
        spec: claim_spec(&ctx, "spec", &claim.spec)?,
        allocation: status
            .and_then(|s| s.allocation.as_ref())
            .map(|a| allocation(&ctx, a))
            .transpose()?,
        reserved_for,
        deleting: metadata.deletion_timestamp.is_some(),
        owner_pod_uid,
    })
}

/// Converts a ResourceClaimTemplate (its claim spec is `spec.spec`). A template without a
/// namespace lives in `default`.
pub fn resource_claim_template_from_k8s(
    template: &resource::ResourceClaimTemplate,
) -> Result<ResourceClaimTemplate, ConvertError> {
    let ctx = ObjectContext::namespaced("ResourceClaimTemplate", &template.metadata);
    Ok(ResourceClaimTemplate {
        namespace: namespace_or_default(&template.metadata),
        name: template.metadata.name.clone().unwrap_or_default(),
        spec: claim_spec(&ctx, "spec.spec", &template.spec.spec)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_must_be_semantic_versions() {
        for good in [
            "1.2.3",
            "0.0.0",
            "10.20.30-rc.1",
            "1.0.0+build.5",
            "1.0.0-alpha-1+b",
        ] {
            assert!(is_semver(good), "{good}");
        }
        for bad in [
            "1.2",
            "v1.2.3",
            "01.2.3",
            "1.2.3-",
            "1.2.3+",
            "1..3",
            "1.2.3-a..b",
            "",
        ] {
            assert!(!is_semver(bad), "{bad}");
        }
    }

    #[test]
    fn bare_names_are_qualified_with_the_driver_and_qualified_ones_kept() {
        let ctx = ObjectContext {
            object: "ResourceSlice s".to_string(),
        };
        let name = |n: &str| qualified_name(&ctx, "f", n, "gpu.example.com");
        assert_eq!(name("model").as_deref(), Ok("gpu.example.com/model"));
        assert_eq!(
            name("numa.example.com/node").as_deref(),
            Ok("numa.example.com/node")
        );
        for bad in ["", "9lives", "a-b", "/model", "a/b/c", &"x".repeat(33)] {
            let e = name(bad).expect_err(bad);
            assert_eq!((e.field.as_str(), e.value.as_str()), ("f", bad));
        }
    }
}
