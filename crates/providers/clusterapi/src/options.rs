//! Per-node-group autoscaling options from `<G>/autoscaling-options-<key>` annotations
//! (docs/clusterapi.md CAPI-55).

use ferroscale_core::cloud::GroupOptions;
use ferroscale_model::parse_go_duration;
use kube::api::DynamicObject;

use crate::bad_input::BadAnnotation;
use crate::fields;
use crate::keys::Keys;

/// The overrides a scalable resource asks for, and the annotations that could not be used (they
/// keep the default and deserve a warning). Unknown option keys are ignored silently, as upstream.
pub fn group_options(resource: &DynamicObject, keys: &Keys) -> (GroupOptions, Vec<BadAnnotation>) {
    let prefix = keys.options_prefix();
    let mut options = GroupOptions::default();
    let mut problems = Vec::new();
    for (annotation, raw_value) in fields::annotations(resource) {
        let Some(option) = annotation.strip_prefix(prefix.as_str()) else {
            continue;
        };
        let value = raw_value.to_lowercase();
        if option.is_empty() || value.is_empty() {
            continue;
        }
        let bad = |problem: String| BadAnnotation {
            object: fields::describe(resource),
            annotation: annotation.to_string(),
            value: raw_value.to_string(),
            problem,
        };
        let threshold = |value: &str| {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| bad("not a number; the default is kept".to_string()))
        };
        let duration = |value: &str| {
            parse_go_duration(value).map_err(|e| bad(format!("{e}; the default is kept")))
        };
        let result: Result<(), BadAnnotation> = match option {
            "scaledownutilizationthreshold" => {
                threshold(&value).map(|v| options.scale_down_utilization_threshold = Some(v))
            }
            "scaledowngpuutilizationthreshold" => {
                threshold(&value).map(|v| options.scale_down_gpu_utilization_threshold = Some(v))
            }
            "scaledownunneededtime" => {
                duration(&value).map(|d| options.scale_down_unneeded_time = Some(d))
            }
            "scaledownunreadytime" => {
                duration(&value).map(|d| options.scale_down_unready_time = Some(d))
            }
            "maxnodeprovisiontime" => {
                duration(&value).map(|d| options.max_node_provision_time = Some(d))
            }
            "maxnodestartuptime" => {
                duration(&value).map(|d| options.max_node_startup_time = Some(d))
            }
            _ => Ok(()),
        };
        if let Err(problem) = result {
            problems.push(problem);
        }
    }
    (options, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn minutes(m: u64) -> Duration {
        Duration::from_secs(m * 60)
    }
    use crate::test_objects::machine_deployment;
    use serde_json::json;

    /// docs/clusterapi.md CAPI-55.
    #[test]
    fn c55_option_annotations_override_defaults() {
        let md = machine_deployment(
            "default",
            "md-0",
            json!({
                "cluster.x-k8s.io/autoscaling-options-scaledownutilizationthreshold": "0.7",
                "cluster.x-k8s.io/autoscaling-options-scaledowngpuutilizationthreshold": "0.3",
                "cluster.x-k8s.io/autoscaling-options-scaledownunneededtime": "1h",
                "cluster.x-k8s.io/autoscaling-options-scaledownunreadytime": "10M0S",
                "cluster.x-k8s.io/autoscaling-options-maxnodeprovisiontime": "20m",
                "cluster.x-k8s.io/autoscaling-options-maxnodestartuptime": "90s",
                "cluster.x-k8s.io/autoscaling-options-unknownoption": "whatever",
            }),
            Some(1),
        );
        let (options, problems) = group_options(&md, &Keys::default());
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            options,
            GroupOptions {
                scale_down_utilization_threshold: Some(0.7),
                scale_down_gpu_utilization_threshold: Some(0.3),
                scale_down_unneeded_time: Some(minutes(60)),
                // Values are lower-cased before parsing.
                scale_down_unready_time: Some(minutes(10)),
                max_node_provision_time: Some(minutes(20)),
                max_node_startup_time: Some(Duration::from_secs(90)),
                ..GroupOptions::default()
            }
        );
    }

    /// docs/clusterapi.md CAPI-55.
    #[test]
    fn c55_unparseable_values_keep_defaults_and_are_reported() {
        let md = machine_deployment(
            "default",
            "md-0",
            json!({
                "cluster.x-k8s.io/autoscaling-options-scaledownutilizationthreshold": "foo",
                "cluster.x-k8s.io/autoscaling-options-scaledownunneededtime": "bar",
                "cluster.x-k8s.io/autoscaling-options-maxnodestartuptime": "",
            }),
            Some(1),
        );
        let (options, problems) = group_options(&md, &Keys::default());
        assert_eq!(options, GroupOptions::default());
        let named: Vec<(&str, &str)> = problems
            .iter()
            .map(|p| (p.annotation.as_str(), p.value.as_str()))
            .collect();
        assert_eq!(
            named,
            vec![
                (
                    "cluster.x-k8s.io/autoscaling-options-scaledownunneededtime",
                    "bar"
                ),
                (
                    "cluster.x-k8s.io/autoscaling-options-scaledownutilizationthreshold",
                    "foo"
                ),
            ]
        );
    }

    /// docs/clusterapi.md CAPI-55.
    #[test]
    fn c55_no_annotations_and_other_groups_give_defaults() {
        let md = machine_deployment(
            "default",
            "md-0",
            json!({"test.k8s.io/autoscaling-options-scaledownunneededtime": "1h"}),
            Some(1),
        );
        assert_eq!(
            group_options(&md, &Keys::default()),
            (GroupOptions::default(), vec![])
        );
        let (custom, _) = group_options(&md, &Keys::new(Some("test.k8s.io")));
        assert_eq!(custom.scale_down_unneeded_time, Some(minutes(60)));
    }
}
