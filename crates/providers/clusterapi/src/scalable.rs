//! Scalable resources — MachineDeployments, MachineSets and MachinePools — as node groups: their
//! identity, size bounds, pause state, ownership and the pure part of eligibility
//! (docs/clusterapi.md CAPI-13–CAPI-20).

use std::fmt;

use kube::api::DynamicObject;

use crate::bad_input::BadAnnotation;
use crate::fields;
use crate::keys::{Keys, PAUSED};

/// The three kinds of Cluster API object that can be a node group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScalableKind {
    MachineDeployment,
    MachineSet,
    MachinePool,
}

impl ScalableKind {
    pub const ALL: [ScalableKind; 3] = [
        ScalableKind::MachineDeployment,
        ScalableKind::MachineSet,
        ScalableKind::MachinePool,
    ];

    /// The `kind` string.
    pub fn kind(self) -> &'static str {
        match self {
            ScalableKind::MachineDeployment => "MachineDeployment",
            ScalableKind::MachineSet => "MachineSet",
            ScalableKind::MachinePool => "MachinePool",
        }
    }

    /// The plural resource name in API paths.
    pub fn plural(self) -> &'static str {
        match self {
            ScalableKind::MachineDeployment => "machinedeployments",
            ScalableKind::MachineSet => "machinesets",
            ScalableKind::MachinePool => "machinepools",
        }
    }

    pub fn from_kind(kind: &str) -> Option<ScalableKind> {
        ScalableKind::ALL.into_iter().find(|k| k.kind() == kind)
    }
}

impl fmt::Display for ScalableKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

/// The node group id of a scalable resource: `<Kind>/<namespace>/<name>`.
pub fn group_id(kind: ScalableKind, obj: &DynamicObject) -> String {
    group_id_of(kind, fields::namespace(obj), fields::name(obj))
}

/// The node group id from its parts.
pub fn group_id_of(kind: ScalableKind, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

/// The node group's `Debug()` text: `<id> (min: <min>, max: <max>, replicas: <replicas>)`;
/// replicas that are not known read `unknown`.
pub fn debug_text(id: &str, min: usize, max: usize, replicas: Option<i64>) -> String {
    match replicas {
        Some(replicas) => format!("{id} (min: {min}, max: {max}, replicas: {replicas})"),
        None => format!("{id} (min: {min}, max: {max}, replicas: unknown)"),
    }
}

/// `Kind namespace/name` for messages, with the kind known even when the object lacks type meta.
pub fn describe(obj: &DynamicObject, kind: ScalableKind) -> String {
    format!("{kind} {}/{}", fields::namespace(obj), fields::name(obj))
}

/// One size annotation: absent means 0; otherwise a non-negative base-10 integer.
fn size_annotation(
    obj: &DynamicObject,
    kind: ScalableKind,
    key: &str,
) -> Result<usize, BadAnnotation> {
    let Some(value) = fields::annotation(obj, key) else {
        return Ok(0);
    };
    let bad = |problem: &str| BadAnnotation {
        object: describe(obj, kind),
        annotation: key.to_string(),
        value: value.to_string(),
        problem: problem.to_string(),
    };
    let number: i64 = value.parse().map_err(|_| bad("not a base-10 integer"))?;
    if number < 0 {
        return Err(bad("must not be negative"));
    }
    usize::try_from(number).map_err(|_| bad("too large"))
}

/// The min and max size annotations (docs/clusterapi.md CAPI-14–CAPI-16). Missing values are 0; an
/// explicit max below the min is an error, a missing max is not (the resource is then just not a
/// node group).
pub fn size_bounds(
    obj: &DynamicObject,
    kind: ScalableKind,
    keys: &Keys,
) -> Result<(usize, usize), BadAnnotation> {
    let min = size_annotation(obj, kind, &keys.min_size())?;
    let max = size_annotation(obj, kind, &keys.max_size())?;
    // Without a max annotation the resource simply is not a node group (docs/clusterapi.md
    // CAPI-14), even with a min annotation; only an explicit max below the min is a mistake.
    let max_given = fields::annotation(obj, &keys.max_size()).is_some();
    if max_given && max < min {
        return Err(BadAnnotation {
            object: describe(obj, kind),
            annotation: keys.max_size(),
            value: max.to_string(),
            problem: format!("max size is smaller than min size {min}"),
        });
    }
    Ok((min, max))
}

/// Carries the `cluster.x-k8s.io/paused` annotation (any value).
pub fn is_paused(obj: &DynamicObject) -> bool {
    fields::annotation(obj, PAUSED).is_some()
}

/// The name of the object's first owner of `kind` that has a non-empty name.
pub fn owner_name<'a>(obj: &'a DynamicObject, kind: &str) -> Option<&'a str> {
    obj.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == kind && !o.name.is_empty())
        .map(|o| o.name.as_str())
}

/// A MachineSet managed by a MachineDeployment is never a node group of its own (docs/clusterapi.md
/// CAPI-18).
pub fn owned_by_machine_deployment(machineset: &DynamicObject) -> bool {
    owner_name(machineset, ScalableKind::MachineDeployment.kind()).is_some()
}

/// `spec.replicas` as stored on the object.
pub fn replicas(obj: &DynamicObject) -> Option<i64> {
    fields::at(obj, &["spec", "replicas"]).and_then(serde_json::Value::as_i64)
}

/// Eligibility of an object already allowed by discovery (docs/clusterapi.md CAPI-13–CAPI-17):
/// `Ok(Some((min, max)))` when it is a node group, `Ok(None)` when it is not, an error for bad size
/// annotations.
///
/// `can_scale_from_zero` is only consulted when `spec.replicas` is 0, so a caller may pass `false`
/// without computing it whenever [`replicas`] is not `Some(0)`.
pub fn eligibility(
    obj: &DynamicObject,
    kind: ScalableKind,
    keys: &Keys,
    can_scale_from_zero: bool,
) -> Result<Option<(usize, usize)>, BadAnnotation> {
    let (min, max) = size_bounds(obj, kind, keys)?;
    if replicas(obj) == Some(0) && !can_scale_from_zero {
        return Ok(None);
    }
    if max == 0 {
        return Ok(None);
    }
    Ok(Some((min, max)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_objects::{machine_deployment, object};
    use serde_json::json;

    const MIN: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
    const MAX: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";

    fn md(annotations: serde_json::Value, replicas: Option<i64>) -> DynamicObject {
        machine_deployment("default", "md-0", annotations, replicas)
    }

    fn eligible(obj: &DynamicObject, from_zero: bool) -> Option<(usize, usize)> {
        eligibility(
            obj,
            ScalableKind::MachineDeployment,
            &Keys::default(),
            from_zero,
        )
        .expect("valid annotations")
    }

    /// docs/clusterapi.md CAPI-13.
    #[test]
    fn c13_min_1_max_10_is_a_group_with_kind_namespace_name_id() {
        let obj = md(json!({MIN: "1", MAX: "10"}), Some(3));
        assert_eq!(eligible(&obj, false), Some((1, 10)));
        assert_eq!(
            group_id(ScalableKind::MachineDeployment, &obj),
            "MachineDeployment/default/md-0"
        );
        assert_eq!(
            group_id_of(ScalableKind::MachineSet, "ns1", "ms-a"),
            "MachineSet/ns1/ms-a"
        );
        assert_eq!(
            group_id_of(ScalableKind::MachinePool, "ns1", "mp-0"),
            "MachinePool/ns1/mp-0"
        );
    }

    /// docs/clusterapi.md CAPI-14.
    #[test]
    fn c14_no_annotations_or_only_min_is_not_a_group() {
        assert_eq!(eligible(&md(json!({}), Some(1)), true), None);
        assert_eq!(eligible(&md(json!({MIN: "1"}), Some(1)), true), None);
        // Only a positive max is required (docs/clusterapi.md CAPI-Q14).
        assert_eq!(
            eligible(&md(json!({MAX: "3"}), Some(1)), false),
            Some((0, 3))
        );
    }

    /// docs/clusterapi.md CAPI-15.
    #[test]
    fn c15_min_equal_max_is_a_group() {
        assert_eq!(
            eligible(&md(json!({MIN: "2", MAX: "2"}), Some(2)), false),
            Some((2, 2))
        );
    }

    /// docs/clusterapi.md CAPI-16.
    #[test]
    fn c16_negative_non_integer_or_inverted_bounds_are_errors_naming_the_annotation() {
        let keys = Keys::default();
        for (annotations, annotation, value) in [
            (json!({MIN: "-1", MAX: "5"}), MIN, "-1"),
            (json!({MIN: "1", MAX: "-1"}), MAX, "-1"),
            (json!({MIN: "one", MAX: "5"}), MIN, "one"),
            (json!({MIN: "1", MAX: "5.5"}), MAX, "5.5"),
            (json!({MIN: "1", MAX: ""}), MAX, ""),
            (json!({MIN: "5", MAX: "2"}), MAX, "2"),
        ] {
            let obj = md(annotations, Some(1));
            let err = eligibility(&obj, ScalableKind::MachineDeployment, &keys, true)
                .expect_err("bad annotation");
            assert_eq!(err.object, "MachineDeployment default/md-0");
            assert_eq!(err.annotation, annotation);
            assert_eq!(err.value, value);
            let text = err.to_string();
            assert!(text.contains(annotation) && text.contains("md-0"), "{text}");
        }
    }

    /// docs/clusterapi.md CAPI-16.
    #[test]
    fn c16_bounds_follow_capi_group() {
        let keys = Keys::new(Some("test.k8s.io"));
        let obj = md(
            json!({"test.k8s.io/cluster-api-autoscaler-node-group-max-size": "4", MAX: "9"}),
            Some(1),
        );
        assert_eq!(
            size_bounds(&obj, ScalableKind::MachineDeployment, &keys),
            Ok((0, 4))
        );
    }

    /// docs/clusterapi.md CAPI-17.
    #[test]
    fn c17_zero_replicas_needs_scale_from_zero() {
        let obj = md(json!({MIN: "0", MAX: "5"}), Some(0));
        assert_eq!(eligible(&obj, false), None);
        assert_eq!(eligible(&obj, true), Some((0, 5)));
        // Without spec.replicas the check is skipped.
        assert_eq!(eligible(&md(json!({MAX: "5"}), None), false), Some((0, 5)));
        // Bad annotations are still errors at zero replicas.
        let bad = md(json!({MAX: "x"}), Some(0));
        assert!(
            eligibility(
                &bad,
                ScalableKind::MachineDeployment,
                &Keys::default(),
                false
            )
            .is_err()
        );
    }

    /// docs/clusterapi.md CAPI-18.
    #[test]
    fn c18_machineset_owned_by_a_deployment_is_recognised() {
        let owned = object(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"namespace": "default", "name": "md-0-abc", "ownerReferences": [
                {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment", "name": "md-0", "uid": "u"}
            ]},
            "spec": {"replicas": 1}
        }));
        assert!(owned_by_machine_deployment(&owned));
        assert_eq!(owner_name(&owned, "MachineDeployment"), Some("md-0"));
        let unnamed_owner = object(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"namespace": "default", "name": "ms", "ownerReferences": [
                {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment", "name": "", "uid": "u"},
                {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c", "uid": "v"}
            ]}
        }));
        assert!(!owned_by_machine_deployment(&unnamed_owner));
    }

    /// docs/clusterapi.md CAPI-19.
    #[test]
    fn c19_paused_annotation_with_any_value_is_detected() {
        assert!(is_paused(&md(json!({PAUSED: ""}), Some(1))));
        assert!(is_paused(&md(json!({PAUSED: "false"}), Some(1))));
        assert!(!is_paused(&md(
            json!({"test.k8s.io/paused": "true"}),
            Some(1)
        )));
    }

    /// docs/clusterapi.md CAPI-20.
    #[test]
    fn c20_debug_text_names_id_bounds_and_replicas() {
        assert_eq!(
            debug_text("MachineSet/ns1/ms-a", 1, 10, Some(3)),
            "MachineSet/ns1/ms-a (min: 1, max: 10, replicas: 3)"
        );
        assert_eq!(
            debug_text("MachineSet/ns1/ms-a", 1, 10, None),
            "MachineSet/ns1/ms-a (min: 1, max: 10, replicas: unknown)"
        );
    }

    /// docs/clusterapi.md CAPI-33.
    #[test]
    fn c33_replicas_read_from_spec() {
        assert_eq!(replicas(&md(json!({}), Some(4))), Some(4));
        assert_eq!(replicas(&md(json!({}), None)), None);
    }

    #[test]
    fn kinds_know_their_names() {
        for kind in ScalableKind::ALL {
            assert_eq!(ScalableKind::from_kind(kind.kind()), Some(kind));
            assert_eq!(kind.plural(), format!("{}s", kind.kind().to_lowercase()));
        }
        assert_eq!(ScalableKind::from_kind("Machine"), None);
    }
}
