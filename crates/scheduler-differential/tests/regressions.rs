//! Every disagreement the differential test found, replayed without a control plane: the
//! observation (cluster, pod and the real kube-scheduler's decision) is in
//! `regressions/<name>.yaml`, and Ferroscale's verdicts and reasons on it must agree. The one
//! deliberate divergence (docs/behaviour.md SCHED-103) is replayed too, asserting it is still
//! there: the day it is closed, that test says so.

use std::path::Path;

use ferroscale_scheduler_differential::{Disagreement, Observation, compare, ferroscale_verdicts};

fn regressions_dir() -> &'static Path {
    Path::new("regressions")
}

fn observation(name: &str) -> Observation {
    let path = regressions_dir().join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// Ferroscale's verdict on the regression case must agree with the recorded scheduler decision.
fn replay(name: &str) {
    let observation = observation(name);
    let ferroscale = ferroscale_verdicts(&observation).expect("Ferroscale judges the case");
    if let Err(problem) = compare(&observation, &ferroscale) {
        let disagreement = Disagreement {
            observation,
            ferroscale,
            problem,
        };
        panic!("{}", disagreement.report());
    }
}

/// Every file in regressions/ is replayed by a test below.
#[test]
fn every_regression_case_is_replayed() {
    let replayed = [
        "untolerated_taint_wording",
        "spread_missing_label_wording",
        "default_spread_counts_selected_pods",
        "volume_binding_prefilter_does_not_narrow",
        "volume_node_affinity_wording",
        "read_write_once_pod_wording",
        "pre_filter_rejection_leaves_no_node_out",
        "default_spread_counts_selected_pending_pods",
        "dynamic_resources_after_inter_pod_affinity",
    ];
    let mut files: Vec<String> = std::fs::read_dir(regressions_dir())
        .expect("regressions/")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".yaml").map(str::to_string)
        })
        .collect();
    files.sort();
    let mut expected: Vec<String> = replayed.iter().map(|n| n.to_string()).collect();
    expected.sort();
    assert_eq!(
        files, expected,
        "a regression file without its test, or the reverse"
    );
}

#[test]
fn untolerated_taint_wording() {
    replay("untolerated_taint_wording");
}

#[test]
fn spread_missing_label_wording() {
    replay("spread_missing_label_wording");
}

#[test]
fn volume_node_affinity_wording() {
    replay("volume_node_affinity_wording");
}

#[test]
fn read_write_once_pod_wording() {
    replay("read_write_once_pod_wording");
}

#[test]
fn volume_binding_prefilter_does_not_narrow() {
    replay("volume_binding_prefilter_does_not_narrow");
}

#[test]
fn pre_filter_rejection_leaves_no_node_out() {
    replay("pre_filter_rejection_leaves_no_node_out");
}

/// docs/behaviour.md SCHED-103: a profile's default spread constraints count, upstream, the pods
/// the selectors of the pod's Services, ReplicationControllers, ReplicaSets and StatefulSets
/// select; Ferroscale (which reads no Services) counts the pods of the pod's controller. An
/// uncontrolled pod whose labels match is missed, so Ferroscale fits the pod where the scheduler
/// does not. Replayed to show the divergence is still exactly this one.
fn documented_default_spread_divergence(name: &str) {
    let observation = observation(name);
    let ferroscale = ferroscale_verdicts(&observation).expect("Ferroscale judges the case");
    let problem = compare(&observation, &ferroscale)
        .expect_err("the SCHED-103 divergence is gone: turn this case into a plain replay");
    assert!(
        problem.starts_with("kube-scheduler found no node, Ferroscale fits the pod on"),
        "{problem}"
    );
}

#[test]
fn default_spread_counts_selected_pods() {
    documented_default_spread_divergence("default_spread_counts_selected_pods");
}

#[test]
fn default_spread_counts_selected_pending_pods() {
    documented_default_spread_divergence("default_spread_counts_selected_pending_pods");
}

/// The DynamicResources filter runs after InterPodAffinity, last in the scheduler's default order:
/// a node where the pod breaks an existing pod's anti-affinity and no claim can be allocated is
/// reported with the anti-affinity reason (docs/dra.md DRA-101).
#[test]
fn dynamic_resources_after_inter_pod_affinity() {
    replay("dynamic_resources_after_inter_pod_affinity");
}
