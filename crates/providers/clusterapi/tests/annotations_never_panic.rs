//! Whatever users write in annotations, the pure Cluster API logic never panics, and every error
//! it returns names the annotation it comes from.

use ferroscale_model::Timestamp;
use ferroscale_provider_clusterapi::keys::{
    self, CAPACITY_CPU, CAPACITY_CSI_DRIVER, CAPACITY_DRA_DRIVER, CAPACITY_EPHEMERAL_DISK,
    CAPACITY_GPU_COUNT, CAPACITY_GPU_TYPE, CAPACITY_LABELS, CAPACITY_MAX_PODS, CAPACITY_MEMORY,
    CAPACITY_TAINTS, Keys,
};
use ferroscale_provider_clusterapi::scalable::{self, ScalableKind};
use ferroscale_provider_clusterapi::template::{TemplateInput, build_template};
use ferroscale_provider_clusterapi::{capacity, discovery, options};
use kube::api::DynamicObject;
use proptest::prelude::*;
use serde_json::json;

const MIN: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
const MAX: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";

fn machine_deployment(annotations: &[(&str, &str)], replicas: i64) -> DynamicObject {
    let annotations: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {"namespace": "default", "name": "md-0", "annotations": annotations},
        "spec": {
            "clusterName": "c",
            "replicas": replicas,
            "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": "md-0"}},
            "template": {"metadata": {}, "spec": {"clusterName": "c"}}
        }
    }))
    .expect("valid object")
}

/// Text close to what the annotations expect (digits, units, separators) mixed with anything.
fn annotation_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[-+0-9a-zA-Z=:,./ _]{0,40}",
        "[0-9]{0,25}(m|Mi|Gi|k|e3|E|)",
        any::<String>(),
    ]
}

proptest! {
    #[test]
    fn size_bounds_never_panic_and_errors_name_the_annotation(min in annotation_text(), max in annotation_text()) {
        let md = machine_deployment(&[(MIN, &min), (MAX, &max)], 1);
        match scalable::eligibility(&md, ScalableKind::MachineDeployment, &Keys::default(), true) {
            Ok(Some((lo, hi))) => prop_assert!(lo <= hi && hi > 0),
            Ok(None) => {}
            Err(bad) => {
                prop_assert!(bad.annotation == MIN || bad.annotation == MAX);
                prop_assert!(bad.value == min || bad.value == max);
                prop_assert_eq!(bad.object, "MachineDeployment default/md-0");
            }
        }
    }

    #[test]
    fn capacity_never_panics_and_errors_name_the_annotation(
        key in prop::sample::select(vec![CAPACITY_CPU, CAPACITY_MEMORY, CAPACITY_EPHEMERAL_DISK, CAPACITY_GPU_COUNT, CAPACITY_MAX_PODS, CAPACITY_GPU_TYPE]),
        value in annotation_text(),
    ) {
        let md = machine_deployment(&[(key, &value)], 0);
        match capacity::annotation_capacity(&md) {
            Ok(found) => prop_assert!(found.contains_key("pods")),
            Err(bad) => {
                prop_assert!(bad.annotation.starts_with("capacity.cluster-autoscaler.kubernetes.io/"));
                prop_assert!(bad.to_string().contains(&bad.annotation));
            }
        }
    }

    #[test]
    fn template_never_panics_on_label_taint_csi_dra_text(
        labels in annotation_text(),
        taints in annotation_text(),
        csi in annotation_text(),
        dra in annotation_text(),
        gpus in annotation_text(),
        suffix in any::<u64>(),
    ) {
        let md = machine_deployment(&[
            (CAPACITY_CPU, "2"), (CAPACITY_MEMORY, "4Gi"),
            (CAPACITY_LABELS, &labels), (CAPACITY_TAINTS, &taints),
            (CAPACITY_CSI_DRIVER, &csi), (CAPACITY_DRA_DRIVER, &dra), (CAPACITY_GPU_COUNT, &gpus),
        ], 0);
        let keys = Keys::default();
        let built = build_template(TemplateInput {
            resource: &md,
            keys: &keys,
            default_arch: "amd64",
            infrastructure: None,
            existing_node: None,
            random_suffix: suffix,
            now: Timestamp(0),
        });
        match built {
            Ok(Some(template)) => {
                prop_assert!(template.template.node.name.starts_with("md-0-asg-"));
                for skipped in &template.skipped_items {
                    prop_assert!(skipped.annotation == CAPACITY_TAINTS || skipped.annotation == CAPACITY_CSI_DRIVER);
                }
            }
            Ok(None) => prop_assert!(false, "cpu and memory are set"),
            Err(bad) => prop_assert_eq!(bad.annotation, CAPACITY_GPU_COUNT),
        }
    }

    #[test]
    fn options_and_discovery_never_panic(value in annotation_text(), spec in annotation_text()) {
        let key = format!("{}scaledownunneededtime", Keys::default().options_prefix());
        let md = machine_deployment(&[(&key, &value)], 1);
        let (_, problems) = options::group_options(&md, &Keys::default());
        for problem in problems {
            prop_assert_eq!(&problem.annotation, &key);
        }
        if let Err(error) = discovery::DiscoverySpec::parse(&spec) {
            let quoted = format!("{:?}", spec);
            let names_spec = error.to_string().contains(&quoted);
            prop_assert!(names_spec);
        }
        let _ = keys::default_architecture(Some(&value));
    }
}
