//! Whether a MachineDeployment is rolling out (docs/clusterapi.md CAPI-57): its nodes are then kept
//! out of scale-down, because Cluster API is already replacing them.

use kube::api::DynamicObject;

use crate::bad_input::BadAnnotation;
use crate::fields;
use crate::keys::{DEPLOYMENT_NAME_LABEL, REVISION_ANNOTATION};

fn positive(value: Option<&serde_json::Value>) -> bool {
    value
        .and_then(serde_json::Value::as_i64)
        .is_some_and(|n| n > 0)
}

/// True when a MachineSet of `deployment` other than those of the latest revision still has
/// replicas (in spec or status). `machinesets` may hold every MachineSet in the cache: those of
/// other namespaces or deployments are ignored. A non-integer revision annotation is an error.
///
/// docs/clusterapi.md CAPI-Q13, kept: when no MachineSet carries a revision, all of them are old.
pub fn is_rolling_out(
    deployment: &DynamicObject,
    machinesets: &[&DynamicObject],
) -> Result<bool, BadAnnotation> {
    let namespace = fields::namespace(deployment);
    let name = fields::name(deployment);
    let own: Vec<&DynamicObject> = machinesets
        .iter()
        .copied()
        .filter(|ms| fields::namespace(ms) == namespace)
        .filter(|ms| fields::label(ms, DEPLOYMENT_NAME_LABEL) == Some(name))
        .collect();
    let mut latest: i64 = 0;
    for ms in &own {
        if let Some(text) = fields::annotation(ms, REVISION_ANNOTATION) {
            let revision: i64 = text.parse().map_err(|_| BadAnnotation {
                object: fields::describe(ms),
                annotation: REVISION_ANNOTATION.to_string(),
                value: text.to_string(),
                problem: "not an integer revision".to_string(),
            })?;
            latest = latest.max(revision);
        }
    }
    let latest = latest.to_string();
    Ok(own
        .iter()
        .filter(|ms| fields::annotation(ms, REVISION_ANNOTATION) != Some(latest.as_str()))
        .any(|ms| {
            positive(fields::at(ms, &["spec", "replicas"]))
                || positive(fields::at(ms, &["status", "replicas"]))
        }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_objects::{machine_deployment, object};
    use serde_json::{Value, json};

    fn machineset(
        ns: &str,
        name: &str,
        deployment: &str,
        revision: Option<&str>,
        spec: i64,
        status: i64,
    ) -> DynamicObject {
        let annotations = match revision {
            Some(r) => json!({REVISION_ANNOTATION: r}),
            None => Value::Null,
        };
        object(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"namespace": ns, "name": name, "annotations": annotations,
                "labels": {DEPLOYMENT_NAME_LABEL: deployment}},
            "spec": {"replicas": spec},
            "status": {"replicas": status},
        }))
    }

    /// docs/clusterapi.md CAPI-57.
    #[test]
    fn c57_old_machineset_with_replicas_means_rolling_out() {
        let md = machine_deployment("default", "md-0", json!({}), Some(3));
        let new = machineset("default", "md-0-new", "md-0", Some("2"), 3, 2);
        let old_spec = machineset("default", "md-0-old", "md-0", Some("1"), 1, 0);
        let old_status = machineset("default", "md-0-old", "md-0", Some("1"), 0, 1);
        let old_done = machineset("default", "md-0-old", "md-0", Some("1"), 0, 0);
        assert_eq!(is_rolling_out(&md, &[&new, &old_spec]), Ok(true));
        assert_eq!(is_rolling_out(&md, &[&new, &old_status]), Ok(true));
        assert_eq!(is_rolling_out(&md, &[&new, &old_done]), Ok(false));
        assert_eq!(is_rolling_out(&md, &[&new]), Ok(false));
        assert_eq!(is_rolling_out(&md, &[]), Ok(false));
    }

    /// docs/clusterapi.md CAPI-57.
    #[test]
    fn c57_other_deployments_and_namespaces_are_ignored() {
        let md = machine_deployment("default", "md-0", json!({}), Some(3));
        let new = machineset("default", "md-0-new", "md-0", Some("2"), 3, 3);
        let other_md = machineset("default", "md-1-old", "md-1", Some("1"), 2, 2);
        let other_ns = machineset("elsewhere", "md-0-old", "md-0", Some("1"), 2, 2);
        assert_eq!(
            is_rolling_out(&md, &[&new, &other_md, &other_ns]),
            Ok(false)
        );
    }

    /// docs/clusterapi.md CAPI-57.
    #[test]
    fn c57_missing_revisions_are_old_and_bad_revisions_are_errors() {
        let md = machine_deployment("default", "md-0", json!({}), Some(3));
        let unrevised = machineset("default", "md-0-a", "md-0", None, 1, 1);
        // docs/clusterapi.md CAPI-Q13: no revision anywhere → every MachineSet with replicas is
        // old.
        assert_eq!(is_rolling_out(&md, &[&unrevised]), Ok(true));
        let bad = machineset("default", "md-0-b", "md-0", Some("two"), 1, 1);
        let err = is_rolling_out(&md, &[&unrevised, &bad]).expect_err("bad revision");
        assert_eq!(err.value, "two");
        assert_eq!(err.object, "MachineSet default/md-0-b");
        // Revisions compare as numbers, not text.
        let ten = machineset("default", "md-0-10", "md-0", Some("10"), 3, 3);
        let nine = machineset("default", "md-0-9", "md-0", Some("9"), 0, 0);
        assert_eq!(is_rolling_out(&md, &[&nine, &ten]), Ok(false));
    }
}
