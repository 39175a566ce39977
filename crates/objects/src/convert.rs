//! Conversion of single k8s-openapi objects into model objects. Every value that could be malformed
//! (quantities, operators, effects, ports, policies) is checked here; the error names the object, the
//! field path inside it and the bad value.

use std::collections::BTreeMap;

use ferroscale_model::pod::DEFAULT_SCHEDULER;
use ferroscale_model::{
    CompactString, ConditionStatus, ContainerRequests, DaemonSet, HostPort, IntOrPercent,
    LabelOperator, LabelRequirement, LabelSelector, Labels, Namespace, Node, NodeConditions,
    NodeInclusionPolicy, NodeOperator, NodeRequirement, NodeSelector, NodeSelectorTerm, OwnerRef,
    Pod, PodAffinityTerm, PodClaimSource, PodCondition, PodDisruptionBudget, PodPhase,
    PodResourceClaim, PodResourceClaimStatus, PreemptionPolicy, PriorityClass, Protocol, Quantity,
    Resources, RestartPolicy, Taint, TaintEffect, ThinVec, Timestamp, Toleration,
    TolerationOperator, TopologySpreadConstraint, UnsatisfiableAction, effective_requests,
    thin_vec,
};
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::scheduling::v1 as scheduling;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use thiserror::Error;

mod capacity;
mod dra;
mod volumes;

pub use capacity::{
    MAX_CONDITION_MESSAGE_LENGTH, MAX_CONDITIONS, capacity_buffer_from_k8s,
    capacity_buffer_status_to_k8s, capacity_quota_from_k8s, pod_template_from_k8s,
    provisioning_request_from_k8s, provisioning_request_status_to_k8s, workload_selector_from_k8s,
};
pub use dra::{
    MAX_ALLOCATED_DEVICES, MAX_ATTRIBUTE_VALUE_LENGTH, MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
    MAX_CONSTRAINTS_PER_CLAIM, MAX_DEVICES_PER_SLICE, MAX_EXPRESSION_LENGTH,
    MAX_REQUESTS_PER_CLAIM, MAX_SELECTORS, MAX_SUBREQUESTS, device_class_from_k8s,
    resource_claim_from_k8s, resource_claim_template_from_k8s, resource_slice_from_k8s,
};
use volumes::pod_volume;
pub use volumes::{csi_node_from_k8s, pv_from_k8s, pvc_from_k8s, storage_class_from_k8s};

/// A value inside an otherwise well-formed object that the model cannot accept.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{object}: field {field}: {message} (value {value:?})")]
pub struct ConvertError {
    /// Kind and name, e.g. `Pod default/web-0` or `Node n1`.
    pub object: String,
    /// Path inside the object, e.g. `spec.containers[1].resources.requests.memory`.
    pub field: String,
    /// The offending value as written.
    pub value: String,
    pub message: String,
}

/// Builds errors for one object; keeps the object's identity so each check only names its field.
struct ObjectContext {
    object: String,
}

impl ObjectContext {
    fn new(kind: &str, metadata: &meta::ObjectMeta) -> ObjectContext {
        let name = metadata.name.as_deref().unwrap_or("<unnamed>");
        let object = match metadata.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
            _ => format!("{kind} {name}"),
        };
        ObjectContext { object }
    }

    /// For namespaced kinds: an object without a namespace lives in `default`.
    fn namespaced(kind: &str, metadata: &meta::ObjectMeta) -> ObjectContext {
        let name = metadata.name.as_deref().unwrap_or("<unnamed>");
        let namespace = metadata
            .namespace
            .as_deref()
            .filter(|ns| !ns.is_empty())
            .unwrap_or("default");
        ObjectContext {
            object: format!("{kind} {namespace}/{name}"),
        }
    }

    fn error(
        &self,
        field: impl Into<String>,
        value: impl Into<String>,
        message: impl Into<String>,
    ) -> ConvertError {
        ConvertError {
            object: self.object.clone(),
            field: field.into(),
            value: value.into(),
            message: message.into(),
        }
    }
}

/// Priority classes known when converting pods: pods name a class, the model carries the number.
#[derive(Debug, Clone)]
pub struct PriorityClasses {
    by_name: BTreeMap<String, i32>,
    global_default: Option<(String, i32)>,
    /// The classes could not be read (the identity may not list them): a name not known is not
    /// an error, it takes the global default or none.
    incomplete: bool,
}

/// The two classes every cluster has without anyone creating them.
const BUILT_IN_CLASSES: [(&str, i32); 2] = [
    ("system-cluster-critical", 2_000_000_000),
    ("system-node-critical", 2_000_001_000),
];

impl Default for PriorityClasses {
    fn default() -> PriorityClasses {
        PriorityClasses {
            by_name: BUILT_IN_CLASSES
                .iter()
                .map(|(n, v)| (n.to_string(), *v))
                .collect(),
            global_default: None,
            incomplete: false,
        }
    }
}

impl PriorityClasses {
    /// The built-in system classes plus `classes`.
    pub fn new<'a>(classes: impl IntoIterator<Item = &'a PriorityClass>) -> PriorityClasses {
        let mut known = PriorityClasses::default();
        for class in classes {
            known.insert(class);
        }
        known
    }

    pub fn insert(&mut self, class: &PriorityClass) {
        self.by_name.insert(class.name.clone(), class.value);
        if class.global_default {
            // Several global defaults are refused by the API server; if a dump has them anyway,
            // the lowest value wins, as the admission plugin picks it.
            let replace = self
                .global_default
                .as_ref()
                .is_none_or(|(_, v)| class.value < *v);
            if replace {
                self.global_default = Some((class.name.clone(), class.value));
            }
        }
    }

    /// The same classes, marked as not all the cluster has (see [`PriorityClasses::is_incomplete`]).
    pub fn incomplete(mut self) -> PriorityClasses {
        self.incomplete = true;
        self
    }

    /// Whether these are not all the classes the cluster has, so a name not found is no error.
    pub fn is_incomplete(&self) -> bool {
        self.incomplete
    }

    pub fn get(&self, name: &str) -> Option<i32> {
        self.by_name.get(name).copied()
    }

    pub fn global_default(&self) -> Option<i32> {
        self.global_default.as_ref().map(|(_, v)| *v)
    }
}

fn timestamp(time: &meta::Time) -> Timestamp {
    Timestamp(time.0.as_millisecond())
}

fn condition_status(status: &str) -> ConditionStatus {
    match status {
        "True" => ConditionStatus::True,
        "False" => ConditionStatus::False,
        _ => ConditionStatus::Unknown,
    }
}

fn resource_list(
    ctx: &ObjectContext,
    field: &str,
    list: Option<&BTreeMap<String, K8sQuantity>>,
) -> Result<Resources, ConvertError> {
    let mut resources = Resources::default();
    for (name, quantity) in list.into_iter().flatten() {
        let parsed = Quantity::parse(&quantity.0)
            .map_err(|e| ctx.error(format!("{field}.{name}"), quantity.0.clone(), e.reason))?;
        // The API server refuses negative requests, limits, capacity and allocatable; taking one
        // as written would make a pod that frees room or a node that holds less than nothing.
        if parsed.nanos() < 0 {
            return Err(ctx.error(
                format!("{field}.{name}"),
                quantity.0.clone(),
                "must not be negative",
            ));
        }
        resources.set_quantity(name, parsed);
    }
    Ok(resources)
}

fn labels(map: Option<&BTreeMap<String, String>>) -> Labels {
    map.map(Labels::from).unwrap_or_default()
}

/// Converts a Node. Allocatable defaults to capacity when the status has none (and vice versa), so
/// hand-written templates may give either.
pub fn node_from_k8s(node: &core::Node) -> Result<Node, ConvertError> {
    let ctx = ObjectContext::new("Node", &node.metadata);
    let metadata = &node.metadata;
    let spec = node.spec.as_ref();
    let status = node.status.as_ref();

    let mut taints = Vec::new();
    for (i, taint) in spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let effect = TaintEffect::parse(&taint.effect).ok_or_else(|| {
            ctx.error(
                format!("spec.taints[{i}].effect"),
                taint.effect.clone(),
                "taint effect must be NoSchedule, PreferNoSchedule or NoExecute",
            )
        })?;
        taints.push(Taint {
            key: taint.key.clone(),
            value: taint.value.clone().unwrap_or_default(),
            effect,
            time_added: taint.time_added.as_ref().map(timestamp),
        });
    }

    let capacity = status.and_then(|s| s.capacity.as_ref());
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let capacity_resources = resource_list(&ctx, "status.capacity", capacity)?;
    let allocatable_resources = resource_list(&ctx, "status.allocatable", allocatable)?;
    let (capacity_resources, allocatable_resources) = match (capacity, allocatable) {
        (Some(_), None) => (capacity_resources.clone(), capacity_resources),
        (None, Some(_)) => (allocatable_resources.clone(), allocatable_resources),
        _ => (capacity_resources, allocatable_resources),
    };

    let mut conditions = NodeConditions::default();
    for condition in status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        let relevant = match condition.type_.as_str() {
            "Ready" => {
                conditions.ready = Some(condition_status(&condition.status));
                true
            }
            "DiskPressure" => {
                conditions.disk_pressure = condition.status == "True";
                true
            }
            "NetworkUnavailable" => {
                conditions.network_unavailable = condition.status == "True";
                true
            }
            "Suspended" => {
                conditions.suspended = condition.status == "True";
                false
            }
            _ => false,
        };
        if relevant {
            let transition = condition.last_transition_time.as_ref().map(timestamp);
            conditions.last_transition = conditions.last_transition.max(transition);
        }
    }

    Ok(Node {
        name: metadata.name.clone().unwrap_or_default(),
        uid: metadata.uid.clone().unwrap_or_default(),
        labels: labels(metadata.labels.as_ref()),
        annotations: labels(metadata.annotations.as_ref()),
        taints,
        capacity: capacity_resources,
        allocatable: allocatable_resources,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        provider_id: spec.and_then(|s| s.provider_id.clone()).unwrap_or_default(),
        creation_time: metadata
            .creation_timestamp
            .as_ref()
            .map(timestamp)
            .unwrap_or_default(),
        conditions,
    })
}

fn label_operator(
    ctx: &ObjectContext,
    field: &str,
    operator: &str,
) -> Result<LabelOperator, ConvertError> {
    match operator {
        "In" => Ok(LabelOperator::In),
        "NotIn" => Ok(LabelOperator::NotIn),
        "Exists" => Ok(LabelOperator::Exists),
        "DoesNotExist" => Ok(LabelOperator::DoesNotExist),
        _ => Err(ctx.error(
            field,
            operator,
            "operator must be In, NotIn, Exists or DoesNotExist",
        )),
    }
}

fn label_selector(
    ctx: &ObjectContext,
    field: &str,
    selector: &meta::LabelSelector,
) -> Result<LabelSelector, ConvertError> {
    let mut match_expressions = Vec::new();
    for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
        let operator = label_operator(
            ctx,
            &format!("{field}.matchExpressions[{i}].operator"),
            &expr.operator,
        )?;
        match_expressions.push(LabelRequirement {
            key: expr.key.clone(),
            operator,
            values: expr.values.clone().unwrap_or_default(),
        });
    }
    Ok(LabelSelector {
        match_labels: labels(selector.match_labels.as_ref()),
        match_expressions,
    })
}

/// Adds `matchLabelKeys` (In the pod's value) and `mismatchLabelKeys` (NotIn the pod's value) to a
/// selector, as the API server does at admission. Keys the pod has no label for are skipped.
fn merge_label_keys(
    selector: Option<LabelSelector>,
    pod_labels: &Labels,
    match_keys: Option<&Vec<String>>,
    mismatch_keys: Option<&Vec<String>>,
) -> Option<LabelSelector> {
    let mut selector = selector?;
    let keyed = |keys: Option<&Vec<String>>, operator| {
        keys.into_iter()
            .flatten()
            .filter_map(|key| {
                pod_labels.get(key).map(|value| LabelRequirement {
                    key: key.clone(),
                    operator,
                    values: vec![value.clone()],
                })
            })
            .collect::<Vec<_>>()
    };
    selector
        .match_expressions
        .extend(keyed(match_keys, LabelOperator::In));
    selector
        .match_expressions
        .extend(keyed(mismatch_keys, LabelOperator::NotIn));
    Some(selector)
}

fn node_requirements(
    ctx: &ObjectContext,
    field: &str,
    requirements: Option<&Vec<core::NodeSelectorRequirement>>,
) -> Result<Vec<NodeRequirement>, ConvertError> {
    let mut out = Vec::new();
    for (i, req) in requirements.into_iter().flatten().enumerate() {
        let operator = match req.operator.as_str() {
            "In" => NodeOperator::In,
            "NotIn" => NodeOperator::NotIn,
            "Exists" => NodeOperator::Exists,
            "DoesNotExist" => NodeOperator::DoesNotExist,
            "Gt" => NodeOperator::Gt,
            "Lt" => NodeOperator::Lt,
            other => {
                return Err(ctx.error(
                    format!("{field}[{i}].operator"),
                    other,
                    "operator must be In, NotIn, Exists, DoesNotExist, Gt or Lt",
                ));
            }
        };
        out.push(NodeRequirement {
            key: req.key.clone(),
            operator,
            values: req.values.clone().unwrap_or_default(),
        });
    }
    Ok(out)
}

/// A required node selector (a pod's node affinity, a volume's node affinity): its terms are
/// ORed, each term's requirements ANDed. `field` is the path of the selector itself.
fn node_selector(
    ctx: &ObjectContext,
    field: &str,
    selector: &core::NodeSelector,
) -> Result<NodeSelector, ConvertError> {
    let mut terms = Vec::new();
    for (i, term) in selector.node_selector_terms.iter().enumerate() {
        let field = format!("{field}.nodeSelectorTerms[{i}]");
        terms.push(NodeSelectorTerm {
            match_expressions: node_requirements(
                ctx,
                &format!("{field}.matchExpressions"),
                term.match_expressions.as_ref(),
            )?,
            match_fields: node_requirements(
                ctx,
                &format!("{field}.matchFields"),
                term.match_fields.as_ref(),
            )?,
        });
    }
    Ok(NodeSelector { terms })
}

fn affinity_terms(
    ctx: &ObjectContext,
    field: &str,
    terms: Option<&Vec<core::PodAffinityTerm>>,
    pod_labels: &Labels,
) -> Result<ThinVec<PodAffinityTerm>, ConvertError> {
    let mut out = ThinVec::new();
    for (i, term) in terms.into_iter().flatten().enumerate() {
        let term_field = format!("{field}[{i}]");
        let selector = term
            .label_selector
            .as_ref()
            .map(|s| label_selector(ctx, &format!("{term_field}.labelSelector"), s))
            .transpose()?;
        let namespace_selector = term
            .namespace_selector
            .as_ref()
            .map(|s| label_selector(ctx, &format!("{term_field}.namespaceSelector"), s))
            .transpose()?;
        out.push(PodAffinityTerm {
            label_selector: merge_label_keys(
                selector,
                pod_labels,
                term.match_label_keys.as_ref(),
                term.mismatch_label_keys.as_ref(),
            ),
            namespaces: term.namespaces.clone().unwrap_or_default(),
            namespace_selector,
            topology_key: term.topology_key.clone(),
        });
    }
    Ok(out)
}

fn inclusion_policy(
    ctx: &ObjectContext,
    field: &str,
    value: Option<&String>,
    default: NodeInclusionPolicy,
) -> Result<NodeInclusionPolicy, ConvertError> {
    match value.map(String::as_str) {
        None => Ok(default),
        Some("Honor") => Ok(NodeInclusionPolicy::Honor),
        Some("Ignore") => Ok(NodeInclusionPolicy::Ignore),
        Some(other) => Err(ctx.error(field, other, "policy must be Honor or Ignore")),
    }
}

fn protocol(
    ctx: &ObjectContext,
    field: &str,
    value: Option<&String>,
) -> Result<Protocol, ConvertError> {
    match value.map(String::as_str) {
        None | Some("TCP") => Ok(Protocol::Tcp),
        Some("UDP") => Ok(Protocol::Udp),
        Some("SCTP") => Ok(Protocol::Sctp),
        Some(other) => Err(ctx.error(field, other, "protocol must be TCP, UDP or SCTP")),
    }
}

/// A container's requests after API defaulting: a resource with a limit and no request requests
/// its limit.
fn container_requests(
    ctx: &ObjectContext,
    field: &str,
    container: &core::Container,
) -> Result<Resources, ConvertError> {
    let resources = container.resources.as_ref();
    let mut requests = resource_list(
        ctx,
        &format!("{field}.resources.requests"),
        resources.and_then(|r| r.requests.as_ref()),
    )?;
    let limits = resource_list(
        ctx,
        &format!("{field}.resources.limits"),
        resources.and_then(|r| r.limits.as_ref()),
    )?;
    let explicit = resources.and_then(|r| r.requests.as_ref());
    for (name, value) in limits.iter() {
        if !explicit.is_some_and(|r| r.contains_key(name)) {
            requests.set(name, value);
        }
    }
    Ok(requests)
}

fn host_ports(
    ctx: &ObjectContext,
    field: &str,
    container: &core::Container,
    out: &mut ThinVec<HostPort>,
) -> Result<(), ConvertError> {
    for (i, port) in container.ports.iter().flatten().enumerate() {
        let port_field = format!("{field}.ports[{i}]");
        if !(1..=65535).contains(&port.container_port) {
            return Err(ctx.error(
                format!("{port_field}.containerPort"),
                port.container_port.to_string(),
                "port must be between 1 and 65535",
            ));
        }
        let Some(host_port) = port.host_port.filter(|p| *p != 0) else {
            continue;
        };
        let number = u16::try_from(host_port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                ctx.error(
                    format!("{port_field}.hostPort"),
                    host_port.to_string(),
                    "port must be between 1 and 65535",
                )
            })?;
        out.push(HostPort {
            port: number,
            protocol: protocol(
                ctx,
                &format!("{port_field}.protocol"),
                port.protocol.as_ref(),
            )?,
            host_ip: port.host_ip.clone().unwrap_or_default(),
        });
    }
    Ok(())
}

fn priority(
    ctx: &ObjectContext,
    spec: &core::PodSpec,
    priorities: &PriorityClasses,
) -> Result<Option<i32>, ConvertError> {
    if let Some(value) = spec.priority {
        return Ok(Some(value));
    }
    match spec.priority_class_name.as_deref() {
        Some(name) if !name.is_empty() && priorities.is_incomplete() => {
            Ok(priorities.get(name).or_else(|| priorities.global_default()))
        }
        Some(name) if !name.is_empty() => priorities.get(name).map(Some).ok_or_else(|| {
            ctx.error(
                "spec.priorityClassName",
                name,
                "no PriorityClass with this name is known",
            )
        }),
        _ => Ok(priorities.global_default()),
    }
}

/// Converts everything the scheduler looks at in a pod spec. `pod_labels` feed the
/// `matchLabelKeys` merge.
fn pod_from_parts(
    ctx: &ObjectContext,
    metadata: &meta::ObjectMeta,
    spec: Option<&core::PodSpec>,
    status: Option<&core::PodStatus>,
    priorities: &PriorityClasses,
) -> Result<Pod, ConvertError> {
    let default_spec = core::PodSpec::default();
    let spec = spec.unwrap_or(&default_spec);
    let pod_labels = labels(metadata.labels.as_ref());

    let mut containers = Vec::new();
    let mut ports = ThinVec::new();
    for (i, container) in spec.containers.iter().enumerate() {
        let field = format!("spec.containers[{i}]");
        containers.push(container_requests(ctx, &field, container)?);
        host_ports(ctx, &field, container, &mut ports)?;
    }
    let mut init_containers = Vec::new();
    for (i, container) in spec.init_containers.iter().flatten().enumerate() {
        let field = format!("spec.initContainers[{i}]");
        init_containers.push(ContainerRequests {
            requests: container_requests(ctx, &field, container)?,
            restartable_init: container.restart_policy.as_deref() == Some("Always"),
        });
        host_ports(ctx, &field, container, &mut ports)?;
    }
    let overhead = spec
        .overhead
        .as_ref()
        .map(|o| resource_list(ctx, "spec.overhead", Some(o)))
        .transpose()?;
    let requests = effective_requests(&containers, &init_containers, overhead.as_ref());

    let affinity = spec.affinity.as_ref();
    let required_node_affinity = affinity
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|selector| {
            node_selector(
                ctx,
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
                selector,
            )
            .map(Box::new)
        })
        .transpose()?;
    let pod_affinity = affinity_terms(
        ctx,
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|p| {
                p.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
        &pod_labels,
    )?;
    let pod_anti_affinity = affinity_terms(
        ctx,
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|p| {
                p.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
        &pod_labels,
    )?;

    let mut tolerations = ThinVec::new();
    for (i, tol) in spec.tolerations.iter().flatten().enumerate() {
        let operator = match tol.operator.as_deref() {
            None | Some("Equal") => TolerationOperator::Equal,
            Some("Exists") => TolerationOperator::Exists,
            Some(other) => {
                return Err(ctx.error(
                    format!("spec.tolerations[{i}].operator"),
                    other,
                    "toleration operator must be Equal or Exists",
                ));
            }
        };
        let effect = match tol.effect.as_deref() {
            None | Some("") => None,
            Some(e) => Some(TaintEffect::parse(e).ok_or_else(|| {
                ctx.error(
                    format!("spec.tolerations[{i}].effect"),
                    e,
                    "taint effect must be NoSchedule, PreferNoSchedule or NoExecute",
                )
            })?),
        };
        tolerations.push(Toleration {
            key: tol.key.clone().unwrap_or_default(),
            operator,
            value: tol.value.clone().unwrap_or_default(),
            effect,
        });
    }

    let mut topology_spread = ThinVec::new();
    for (i, constraint) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let field = format!("spec.topologySpreadConstraints[{i}]");
        let when_unsatisfiable = match constraint.when_unsatisfiable.as_str() {
            "DoNotSchedule" => UnsatisfiableAction::DoNotSchedule,
            "ScheduleAnyway" => UnsatisfiableAction::ScheduleAnyway,
            other => {
                return Err(ctx.error(
                    format!("{field}.whenUnsatisfiable"),
                    other,
                    "must be DoNotSchedule or ScheduleAnyway",
                ));
            }
        };
        if constraint.max_skew < 1 {
            return Err(ctx.error(
                format!("{field}.maxSkew"),
                constraint.max_skew.to_string(),
                "maxSkew must be at least 1",
            ));
        }
        let selector = constraint
            .label_selector
            .as_ref()
            .map(|s| label_selector(ctx, &format!("{field}.labelSelector"), s))
            .transpose()?;
        topology_spread.push(TopologySpreadConstraint {
            max_skew: constraint.max_skew,
            topology_key: constraint.topology_key.clone(),
            when_unsatisfiable,
            label_selector: merge_label_keys(
                selector,
                &pod_labels,
                constraint.match_label_keys.as_ref(),
                None,
            ),
            min_domains: constraint.min_domains,
            node_affinity_policy: inclusion_policy(
                ctx,
                &format!("{field}.nodeAffinityPolicy"),
                constraint.node_affinity_policy.as_ref(),
                NodeInclusionPolicy::Honor,
            )?,
            node_taints_policy: inclusion_policy(
                ctx,
                &format!("{field}.nodeTaintsPolicy"),
                constraint.node_taints_policy.as_ref(),
                NodeInclusionPolicy::Ignore,
            )?,
        });
    }

    let pod_name = metadata.name.clone().unwrap_or_default();
    let volumes = spec
        .volumes
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, v)| pod_volume(ctx, &format!("spec.volumes[{i}]"), v))
        .collect::<Result<ThinVec<_>, _>>()?;

    let restart_policy = match spec.restart_policy.as_deref() {
        None | Some("Always") => RestartPolicy::Always,
        Some("OnFailure") => RestartPolicy::OnFailure,
        Some("Never") => RestartPolicy::Never,
        Some(other) => {
            return Err(ctx.error(
                "spec.restartPolicy",
                other,
                "restart policy must be Always, OnFailure or Never",
            ));
        }
    };
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        None | Some("Pending") => PodPhase::Pending,
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some(_) => PodPhase::Unknown,
    };
    let scheduled_condition = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .map(|c| PodCondition {
            status: condition_status(&c.status),
            reason: c.reason.clone().unwrap_or_default(),
            last_transition: c.last_transition_time.as_ref().map(timestamp),
        })
        .map(Box::new);

    Ok(Pod {
        namespace: metadata
            .namespace
            .as_deref()
            .map_or(CompactString::const_new("default"), CompactString::from),
        name: pod_name.into(),
        uid: metadata.uid.as_deref().unwrap_or_default().into(),
        labels: pod_labels.clone(),
        annotations: labels(metadata.annotations.as_ref()),
        owner_references: metadata
            .owner_references
            .iter()
            .flatten()
            .map(|o| OwnerRef {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                controller: o.controller.unwrap_or(false),
            })
            .collect(),
        priority: priority(ctx, spec, priorities)?,
        scheduler_name: spec
            .scheduler_name
            .as_deref()
            .filter(|s| !s.is_empty())
            .map_or(
                CompactString::const_new(DEFAULT_SCHEDULER),
                CompactString::from,
            ),
        node_name: spec
            .node_name
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(CompactString::from),
        nominated_node_name: status
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty())
            .map(Box::from),
        phase,
        restart_policy,
        scheduled_condition,
        creation_time: metadata
            .creation_timestamp
            .as_ref()
            .map(timestamp)
            .unwrap_or_default(),
        deletion_time: metadata.deletion_timestamp.as_ref().map(timestamp),
        termination_grace_seconds: spec.termination_grace_period_seconds,
        requests,
        node_selector: labels(spec.node_selector.as_ref()),
        required_node_affinity,
        pod_affinity,
        pod_anti_affinity,
        tolerations,
        host_ports: ports,
        topology_spread,
        volumes,
        resource_claims: pod_resource_claims(ctx, spec)?,
        resource_claim_statuses: status
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .into_iter()
            .flatten()
            .map(|s| PodResourceClaimStatus {
                name: s.name.clone(),
                claim_name: s.resource_claim_name.clone().filter(|n| !n.is_empty()),
            })
            .collect(),
    })
}

/// `spec.resourceClaims`: each entry names exactly one of a claim and a claim template, as the
/// API server's validation requires.
fn pod_resource_claims(
    ctx: &ObjectContext,
    spec: &core::PodSpec,
) -> Result<ThinVec<PodResourceClaim>, ConvertError> {
    spec.resource_claims
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, claim)| {
            let field = format!("spec.resourceClaims[{i}]");
            let by_name = claim.resource_claim_name.as_deref().filter(|n| !n.is_empty());
            let by_template = claim
                .resource_claim_template_name
                .as_deref()
                .filter(|n| !n.is_empty());
            let source = match (by_name, by_template) {
                (Some(name), None) => PodClaimSource::Claim(name.to_string()),
                (None, Some(template)) => PodClaimSource::Template(template.to_string()),
                _ => {
                    return Err(ctx.error(
                        field,
                        claim.name.as_str(),
                        "exactly one of resourceClaimName and resourceClaimTemplateName must be set",
                    ));
                }
            };
            Ok(PodResourceClaim {
                name: claim.name.clone(),
                source,
            })
        })
        .collect()
}

/// The object's namespace, `default` when it has none (or an empty one), as `kubectl apply` would
/// put it.
pub(crate) fn namespace_or_default(metadata: &meta::ObjectMeta) -> String {
    metadata
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// Converts a Pod. A pod without a namespace is put in `default`, as `kubectl apply` would.
pub fn pod_from_k8s(pod: &core::Pod, priorities: &PriorityClasses) -> Result<Pod, ConvertError> {
    let ctx = ObjectContext::namespaced("Pod", &pod.metadata);
    pod_from_parts(
        &ctx,
        &pod.metadata,
        pod.spec.as_ref(),
        pod.status.as_ref(),
        priorities,
    )
}

/// Converts a DaemonSet; its pod template becomes a model pod named after the DaemonSet and owned
/// by it. Errors in the template name fields under `spec.template.`.
pub fn daemonset_from_k8s(
    daemonset: &apps::DaemonSet,
    priorities: &PriorityClasses,
) -> Result<DaemonSet, ConvertError> {
    let ctx = ObjectContext::namespaced("DaemonSet", &daemonset.metadata);
    let namespace = daemonset
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let name = daemonset.metadata.name.clone().unwrap_or_default();
    let uid = daemonset.metadata.uid.clone().unwrap_or_default();
    let template = daemonset.spec.as_ref().map(|s| &s.template);
    let mut template_metadata = template
        .and_then(|t| t.metadata.clone())
        .unwrap_or_default();
    template_metadata.namespace = Some(namespace.clone());
    template_metadata.name = Some(name.clone());
    let mut pod = pod_from_parts(
        &ctx,
        &template_metadata,
        template.and_then(|t| t.spec.as_ref()),
        None,
        priorities,
    )
    .map_err(|e| ConvertError {
        field: format!("spec.template.{}", e.field),
        ..e
    })?;
    pod.owner_references = thin_vec![OwnerRef {
        api_version: "apps/v1".to_string(),
        kind: "DaemonSet".to_string(),
        name: name.clone(),
        uid: uid.clone(),
        controller: true,
    }];
    Ok(DaemonSet {
        namespace,
        name,
        uid,
        labels: labels(daemonset.metadata.labels.as_ref()),
        pod_template: pod,
        creation_time: daemonset
            .metadata
            .creation_timestamp
            .as_ref()
            .map(timestamp)
            .unwrap_or_default(),
    })
}

fn int_or_percent(
    ctx: &ObjectContext,
    field: &str,
    value: Option<&IntOrString>,
) -> Result<Option<IntOrPercent>, ConvertError> {
    match value {
        None => Ok(None),
        Some(IntOrString::Int(n)) if *n >= 0 => Ok(Some(IntOrPercent::Int(*n))),
        Some(IntOrString::Int(n)) => Err(ctx.error(field, n.to_string(), "must not be negative")),
        Some(IntOrString::String(s)) => {
            let percent = s.strip_suffix('%').and_then(|p| p.parse::<i32>().ok());
            match (percent, s.parse::<i32>()) {
                (Some(p), _) if p >= 0 => Ok(Some(IntOrPercent::Percent(p))),
                // The API accepts a number written as a string too.
                (_, Ok(n)) if n >= 0 => Ok(Some(IntOrPercent::Int(n))),
                _ => Err(ctx.error(
                    field,
                    s.clone(),
                    "expected a non-negative integer or a percentage such as 50%",
                )),
            }
        }
    }
}

pub fn pdb_from_k8s(
    pdb: &policy::PodDisruptionBudget,
) -> Result<PodDisruptionBudget, ConvertError> {
    let ctx = ObjectContext::namespaced("PodDisruptionBudget", &pdb.metadata);
    let spec = pdb.spec.as_ref();
    Ok(PodDisruptionBudget {
        namespace: pdb
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string()),
        name: pdb.metadata.name.clone().unwrap_or_default(),
        uid: pdb.metadata.uid.clone().unwrap_or_default(),
        selector: spec
            .and_then(|s| s.selector.as_ref())
            .map(|s| label_selector(&ctx, "spec.selector", s))
            .transpose()?,
        min_available: int_or_percent(
            &ctx,
            "spec.minAvailable",
            spec.and_then(|s| s.min_available.as_ref()),
        )?,
        max_unavailable: int_or_percent(
            &ctx,
            "spec.maxUnavailable",
            spec.and_then(|s| s.max_unavailable.as_ref()),
        )?,
        disruptions_allowed: pdb.status.as_ref().and_then(|s| s.disruptions_allowed),
    })
}

pub fn priority_class_from_k8s(
    class: &scheduling::PriorityClass,
) -> Result<PriorityClass, ConvertError> {
    let ctx = ObjectContext::new("PriorityClass", &class.metadata);
    let preemption_policy = match class.preemption_policy.as_deref() {
        None | Some("PreemptLowerPriority") => PreemptionPolicy::PreemptLowerPriority,
        Some("Never") => PreemptionPolicy::Never,
        Some(other) => {
            return Err(ctx.error(
                "preemptionPolicy",
                other,
                "must be PreemptLowerPriority or Never",
            ));
        }
    };
    let value = class
        .value
        .ok_or_else(|| ctx.error("value", "", "a PriorityClass needs a value"))?;
    Ok(PriorityClass {
        name: class.metadata.name.clone().unwrap_or_default(),
        value,
        global_default: class.global_default.unwrap_or(false),
        preemption_policy,
    })
}

pub fn namespace_from_k8s(namespace: &core::Namespace) -> Namespace {
    Namespace {
        name: namespace.metadata.name.clone().unwrap_or_default(),
        labels: labels(namespace.metadata.labels.as_ref()),
    }
}
