//! The instances of a node group (docs/clusterapi.md CAPI-26–CAPI-32): which Machines belong to a
//! MachineDeployment or MachineSet, the instance id and status each Machine reports, and
//! MachinePool members.

use ferroscale_core::cloud::{
    ErrorClass, Instance, InstanceErrorInfo, InstanceState, InstanceStatus,
};
use ferroscale_model::{LabelOperator, LabelRequirement, LabelSelector, Labels};
use kube::api::DynamicObject;
use serde_json::Value;

use crate::bad_input::BadField;
use crate::discovery::cluster_name;
use crate::fields;
use crate::ids::{SyntheticId, SyntheticKind, is_synthetic};
use crate::keys::Keys;

/// Error code of a failed Machine that is being deleted.
pub const DELETING_FAILED: &str = "DeletingFailed";
/// Error code of a failed Machine that never got a node.
pub const PROVISIONING_FAILED: &str = "ProvisioningFailed";

/// `spec.selector` of a MachineDeployment or MachineSet as a label selector.
pub fn selector(resource: &DynamicObject) -> Result<LabelSelector, BadField> {
    let bad = |field: &str, value: &Value, problem: &str| BadField {
        object: fields::describe(resource),
        field: field.to_string(),
        value: value.to_string(),
        problem: problem.to_string(),
    };
    let Some(raw) = fields::at(resource, &["spec", "selector"]).filter(|v| !v.is_null()) else {
        return Err(bad(
            "spec.selector",
            &Value::Null,
            "a label selector is required",
        ));
    };
    let mut parsed = LabelSelector::default();
    if let Some(labels) = raw.get("matchLabels").filter(|v| !v.is_null()) {
        let map = labels
            .as_object()
            .ok_or_else(|| bad("spec.selector.matchLabels", labels, "not a map"))?;
        for (key, value) in map {
            let value = value
                .as_str()
                .ok_or_else(|| bad("spec.selector.matchLabels", value, "not a string"))?;
            parsed.match_labels.insert(key.clone(), value.to_string());
        }
    }
    if let Some(expressions) = raw.get("matchExpressions").filter(|v| !v.is_null()) {
        let field = "spec.selector.matchExpressions";
        let list = expressions
            .as_array()
            .ok_or_else(|| bad(field, expressions, "not a list"))?;
        for expression in list {
            let key = expression
                .get("key")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(field, expression, "key is missing"))?;
            let operator = match expression.get("operator").and_then(Value::as_str) {
                Some("In") => LabelOperator::In,
                Some("NotIn") => LabelOperator::NotIn,
                Some("Exists") => LabelOperator::Exists,
                Some("DoesNotExist") => LabelOperator::DoesNotExist,
                _ => return Err(bad(field, expression, "unknown operator")),
            };
            let values = match expression.get("values") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(values)) => values
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| bad(field, expression, "values must be strings"))?,
                Some(_) => return Err(bad(field, expression, "values must be a list")),
            };
            parsed.match_expressions.push(LabelRequirement {
                key: key.to_string(),
                operator,
                values,
            });
        }
    }
    Ok(parsed)
}

/// The Machines of a MachineDeployment or MachineSet (docs/clusterapi.md CAPI-26, CAPI-27): same
/// namespace, matching `spec.selector`, and — when the resource names a cluster — the same cluster.
pub fn machines_of<'a>(
    resource: &DynamicObject,
    machines: impl Iterator<Item = &'a DynamicObject>,
    keys: &Keys,
) -> Result<Vec<&'a DynamicObject>, BadField> {
    let selector = selector(resource)?;
    let namespace = fields::namespace(resource);
    let cluster = cluster_name(resource, keys);
    Ok(machines
        .filter(|m| fields::namespace(m) == namespace)
        .filter(|m| selector.matches(&Labels::from(fields::labels(m))))
        .filter(|m| cluster.is_empty() || cluster_name(m, keys) == cluster)
        .collect())
}

/// Failure as Cluster API reports it: a failure message and phase `Failed`. v1beta1 Machines carry
/// the message at `status.failureMessage`; v1beta2 Machines keep the same deprecated field at
/// `status.deprecated.v1beta1.failureMessage` (a v1beta2 API server drops the top-level one).
///
/// docs/clusterapi.md CAPI-Q7, not copied: upstream reads only the top-level field and so never
/// sees a failed v1beta2 Machine. Reading the same signal where v1beta2 stores it is not a guess;
/// conditions are not consulted, since a slow Machine must never look failed.
fn has_failed(machine: &DynamicObject) -> bool {
    let message = fields::str_at(machine, &["status", "failureMessage"]).or_else(|| {
        fields::str_at(
            machine,
            &["status", "deprecated", "v1beta1", "failureMessage"],
        )
    });
    message.is_some() && fields::str_at(machine, &["status", "phase"]) == Some("Failed")
}

fn has_node_ref(machine: &DynamicObject) -> bool {
    fields::at(machine, &["status", "nodeRef"]).is_some_and(|v| !v.is_null())
}

/// The instance a Machine contributes (docs/clusterapi.md CAPI-26–CAPI-30), with its status; `None`
/// when the Machine has a node that cannot be identified yet. `node_provider_id_by_name` looks a
/// Node of the workload cluster up by name and returns its `spec.providerID`.
pub fn machine_instance(
    machine: &DynamicObject,
    node_provider_id_by_name: impl Fn(&str) -> Option<String>,
) -> Option<Instance> {
    let (namespace, name) = (fields::namespace(machine), fields::name(machine));
    let synthetic = if has_failed(machine) {
        Some(SyntheticKind::Failed)
    } else if fields::is_deleting(machine) {
        Some(SyntheticKind::Deleting)
    } else if !has_node_ref(machine) {
        Some(SyntheticKind::Pending)
    } else {
        None
    };
    if let Some(kind) = synthetic {
        let id = SyntheticId::new(kind, namespace, name);
        return Some(Instance {
            status: synthetic_instance_status(&id, Some(machine)),
            id: id.encode(),
        });
    }
    if let Some(provider_id) =
        fields::str_at(machine, &["spec", "providerID"]).filter(|id| !id.is_empty())
    {
        return Some(Instance::running(provider_id));
    }
    if let Some(kind) = fields::str_at(machine, &["status", "nodeRef", "kind"])
        && kind != "Node"
    {
        tracing::error!(
            machine = %fields::describe(machine),
            node_ref_kind = kind,
            "Machine's status.nodeRef does not point to a Node; skipping it"
        );
        return None;
    }
    let node_name = fields::str_at(machine, &["status", "nodeRef", "name"])?;
    node_provider_id_by_name(node_name)
        .filter(|id| !id.is_empty())
        .map(Instance::running)
}

fn status(state: InstanceState, error: Option<(&str, &str)>) -> InstanceStatus {
    InstanceStatus {
        state,
        error: error.map(|(code, message)| InstanceErrorInfo {
            class: ErrorClass::Other,
            code: code.to_string(),
            message: message.to_string(),
        }),
    }
}

/// The status of a synthetic instance (docs/clusterapi.md CAPI-28–CAPI-30), given its Machine if it
/// can still be found.
pub fn synthetic_instance_status(
    id: &SyntheticId,
    machine: Option<&DynamicObject>,
) -> Option<InstanceStatus> {
    match id.kind {
        SyntheticKind::Pending => Some(status(InstanceState::Creating, None)),
        SyntheticKind::Deleting => Some(status(InstanceState::Deleting, None)),
        SyntheticKind::Failed => {
            let machine = machine?;
            if fields::is_deleting(machine) {
                Some(status(
                    InstanceState::Deleting,
                    Some((DELETING_FAILED, "Machine deletion failed")),
                ))
            } else if !has_node_ref(machine) {
                Some(status(
                    InstanceState::Creating,
                    Some((PROVISIONING_FAILED, "Machine provisioning failed")),
                ))
            } else {
                None
            }
        }
    }
}

/// The status of any instance id: synthetic ids per docs/clusterapi.md CAPI-28–CAPI-30, every other
/// id Running.
pub fn instance_status(id: &str, machine: Option<&DynamicObject>) -> Option<InstanceStatus> {
    match SyntheticId::parse(id) {
        Some(synthetic) => synthetic_instance_status(&synthetic, machine),
        None => Some(status(InstanceState::Running, None)),
    }
}

/// The entries of a MachinePool's `spec.providerIDList`, verbatim; `None` when the list is
/// missing (which deserves a warning), non-string entries skipped.
pub fn machine_pool_provider_ids(pool: &DynamicObject) -> Option<Vec<&str>> {
    let list = fields::at(pool, &["spec", "providerIDList"])?.as_array()?;
    Some(list.iter().filter_map(Value::as_str).collect())
}

/// A MachinePool's instances (docs/clusterapi.md CAPI-32): every listed provider id, Running
/// (CAPI-Q12: pools report no pending or failed members).
pub fn machine_pool_instances(pool: &DynamicObject) -> Vec<Instance> {
    machine_pool_provider_ids(pool)
        .unwrap_or_default()
        .into_iter()
        .map(Instance::running)
        .collect()
}

/// Instances that are real nodes (docs/clusterapi.md CAPI-36): pending, deleting and failed
/// Machines do not count.
pub fn count_existing(instances: &[Instance]) -> usize {
    instances.iter().filter(|i| !is_synthetic(&i.id)).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_objects::{machine, machine_deployment, object};
    use serde_json::json;

    fn no_nodes(_: &str) -> Option<String> {
        None
    }

    fn running_machine(name: &str, provider_id: &str) -> DynamicObject {
        machine(
            "default",
            name,
            "md-0",
            json!({"providerID": provider_id}),
            json!({"nodeRef": {"name": format!("node-{name}")}, "phase": "Running"}),
        )
    }

    /// docs/clusterapi.md CAPI-26.
    #[test]
    fn c26_running_machine_reports_provider_id_verbatim() {
        let m = running_machine("m1", "aws:///us-east-1a/i-0abc");
        let instance = machine_instance(&m, no_nodes).expect("an instance");
        assert_eq!(instance, Instance::running("aws:///us-east-1a/i-0abc"));
    }

    /// docs/clusterapi.md CAPI-27.
    #[test]
    fn c27_machine_without_provider_id_takes_its_nodes_id() {
        let m = machine(
            "default",
            "m1",
            "md-0",
            json!({}),
            json!({"nodeRef": {"name": "node-a"}}),
        );
        let lookup = |name: &str| (name == "node-a").then(|| "kind://docker/node-a".to_string());
        assert_eq!(
            machine_instance(&m, lookup),
            Some(Instance::running("kind://docker/node-a"))
        );
        // The node is not known (yet): no instance.
        assert_eq!(machine_instance(&m, no_nodes), None);
        // A v1beta1 nodeRef to something else than a Node is skipped.
        let odd = machine(
            "default",
            "m2",
            "md-0",
            json!({}),
            json!({"nodeRef": {"kind": "Pod", "name": "node-a"}}),
        );
        assert_eq!(machine_instance(&odd, lookup), None);
    }

    /// docs/clusterapi.md CAPI-28.
    #[test]
    fn c28_machine_without_node_ref_is_pending_creating() {
        let m = machine(
            "ns1",
            "m1",
            "md-0",
            json!({"providerID": "aws:///i-1"}),
            json!({}),
        );
        let instance = machine_instance(&m, no_nodes).expect("an instance");
        assert_eq!(instance.id, "pending-machine-ns1_m1");
        assert_eq!(
            instance.status,
            Some(InstanceStatus {
                state: InstanceState::Creating,
                error: None
            })
        );
    }

    /// docs/clusterapi.md CAPI-29.
    #[test]
    fn c29_machine_being_deleted_is_deleting() {
        let mut m = running_machine("m1", "aws:///i-1");
        m.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let instance = machine_instance(&m, no_nodes).expect("an instance");
        assert_eq!(instance.id, "deleting-machine-default_m1");
        assert_eq!(
            instance.status.map(|s| s.state),
            Some(InstanceState::Deleting)
        );
    }

    /// docs/clusterapi.md CAPI-30.
    #[test]
    fn c30_failed_machine_is_creating_with_provisioning_failed() {
        let m = machine(
            "default",
            "m1",
            "md-0",
            json!({}),
            json!({"failureMessage": "no capacity", "phase": "Failed"}),
        );
        let instance = machine_instance(&m, no_nodes).expect("an instance");
        assert_eq!(instance.id, "failed-machine-default_m1");
        let status = instance.status.expect("a status");
        assert_eq!(status.state, InstanceState::Creating);
        let error = status.error.expect("error info");
        assert_eq!(error.class, ErrorClass::Other);
        assert_eq!(error.code, PROVISIONING_FAILED);
    }

    /// A v1beta2 API server keeps the failure message only under `status.deprecated.v1beta1`.
    ///
    /// Checks docs/clusterapi.md CAPI-30.
    #[test]
    fn c30_failed_v1beta2_machine_is_reported_from_its_deprecated_failure_message() {
        let m = machine(
            "default",
            "m1",
            "md-0",
            json!({}),
            json!({"deprecated": {"v1beta1": {"failureMessage": "no capacity"}}, "phase": "Failed"}),
        );
        let instance = machine_instance(&m, no_nodes).expect("an instance");
        assert_eq!(instance.id, "failed-machine-default_m1");
        let status = instance.status.expect("a status");
        assert_eq!(status.error.expect("error info").code, PROVISIONING_FAILED);
        let slow = machine(
            "default",
            "m2",
            "md-0",
            json!({}),
            json!({"deprecated": {"v1beta1": {"failureMessage": "no capacity"}}, "phase": "Provisioning"}),
        );
        let instance = machine_instance(&slow, no_nodes).expect("an instance");
        assert_eq!(
            instance.id, "pending-machine-default_m2",
            "a message alone is not a failure"
        );
    }

    /// docs/clusterapi.md CAPI-30.
    #[test]
    fn c30_failed_machine_being_deleted_is_deleting_with_deleting_failed() {
        let mut m = machine(
            "default",
            "m1",
            "md-0",
            json!({}),
            json!({"failureMessage": "boom", "phase": "Failed"}),
        );
        m.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let instance = machine_instance(&m, no_nodes).expect("an instance");
        // The failed row wins over the deleting row.
        assert_eq!(instance.id, "failed-machine-default_m1");
        let status = instance.status.expect("a status");
        assert_eq!(status.state, InstanceState::Deleting);
        assert_eq!(
            status.error.map(|e| e.code),
            Some(DELETING_FAILED.to_string())
        );
    }

    /// docs/clusterapi.md CAPI-30.
    #[test]
    fn c30_failed_ids_without_machine_or_with_node_have_no_status() {
        let id = SyntheticId::new(SyntheticKind::Failed, "default", "m1");
        assert_eq!(synthetic_instance_status(&id, None), None);
        let with_node = machine(
            "default",
            "m1",
            "md-0",
            json!({}),
            json!({"failureMessage": "x", "phase": "Failed", "nodeRef": {"name": "n"}}),
        );
        assert_eq!(synthetic_instance_status(&id, Some(&with_node)), None);
        // Failure needs both the message and the phase (v1beta2 Machines: docs/clusterapi.md
        // CAPI-Q7).
        let only_phase = machine(
            "default",
            "m2",
            "md-0",
            json!({}),
            json!({"phase": "Failed"}),
        );
        assert_eq!(
            machine_instance(&only_phase, no_nodes).map(|i| i.id),
            Some("pending-machine-default_m2".to_string())
        );
        assert_eq!(
            instance_status("aws:///i-1", None).map(|s| s.state),
            Some(InstanceState::Running)
        );
    }

    /// docs/clusterapi.md CAPI-32.
    #[test]
    fn c32_machine_pool_instances_are_its_provider_ids_running() {
        let pool = object(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
            "metadata": {"namespace": "ns1", "name": "mp-0"},
            "spec": {"replicas": 3, "providerIDList": ["aws:///a/i-1", "aws:///a/i-2"]}
        }));
        assert_eq!(
            machine_pool_instances(&pool),
            vec![
                Instance::running("aws:///a/i-1"),
                Instance::running("aws:///a/i-2")
            ]
        );
        let no_list = object(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
            "metadata": {"namespace": "ns1", "name": "mp-1"}, "spec": {"replicas": 1}
        }));
        assert_eq!(machine_pool_provider_ids(&no_list), None);
        assert!(machine_pool_instances(&no_list).is_empty());
    }

    /// docs/clusterapi.md CAPI-36.
    #[test]
    fn c36_synthetic_instances_do_not_count_as_existing() {
        let instances = vec![
            Instance::running("aws:///i-1"),
            Instance::running("aws:///i-2"),
            Instance::running("pending-machine-ns_a"),
            Instance::running("failed-machine-ns_b"),
            Instance::running("deleting-machine-ns_c"),
        ];
        assert_eq!(count_existing(&instances), 2);
    }

    #[test]
    fn machines_of_uses_namespace_selector_and_cluster_name() {
        let keys = Keys::default();
        let md = machine_deployment("default", "md-0", json!({}), Some(2));
        let mine = running_machine("m1", "aws:///i-1");
        let other_deployment = machine("default", "m2", "md-1", json!({}), json!({}));
        let other_namespace = machine("elsewhere", "m3", "md-0", json!({}), json!({}));
        let other_cluster = machine(
            "default",
            "m4",
            "md-0",
            json!({"clusterName": "other"}),
            json!({}),
        );
        let all = [&mine, &other_deployment, &other_namespace, &other_cluster];
        let found = machines_of(&md, all.into_iter(), &keys).expect("has a selector");
        let names: Vec<&str> = found.iter().map(|m| fields::name(m)).collect();
        assert_eq!(names, vec!["m1"]);
    }

    #[test]
    fn selector_supports_match_expressions_and_requires_a_selector() {
        let set = object(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"namespace": "default", "name": "ms"},
            "spec": {"selector": {"matchExpressions": [
                {"key": "pool", "operator": "In", "values": ["a", "b"]},
                {"key": "gone", "operator": "DoesNotExist"}
            ]}}
        }));
        let m_in = object(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"namespace": "default", "name": "x", "labels": {"pool": "b"}}, "spec": {}}),
        );
        let m_out = object(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"namespace": "default", "name": "y", "labels": {"pool": "b", "gone": ""}}, "spec": {}}),
        );
        let found = machines_of(&set, [&m_in, &m_out].into_iter(), &Keys::default())
            .expect("valid selector");
        assert_eq!(found.len(), 1);
        assert_eq!(fields::name(found[0]), "x");

        let no_selector = object(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"namespace": "default", "name": "ms"}, "spec": {}}),
        );
        let err = machines_of(&no_selector, [&m_in].into_iter(), &Keys::default())
            .expect_err("missing selector");
        assert_eq!(err.field, "spec.selector");
        assert!(err.object.contains("MachineSet default/ms"));
        let bad_operator = object(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"namespace": "default", "name": "ms"},
            "spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}}),
        );
        assert!(selector(&bad_operator).is_err_and(|e| e.value.contains("Near")));
    }
}
