//! Scenarios compiled into the binary: the default that `ferroscale simulate` runs without an
//! argument, the upstream scalability scenarios (docs/behaviour.md SIM-101), a full simulated
//! day, a StatefulSet whose volumes pin it to one zone, and GPUs claimed through Dynamic Resource
//! Allocation, the capacity APIs (a buffer, a quota, ProvisioningRequests of both classes), a
//! Deployment whose pods arrive at a controller's pace (resize calls per burst), a cloud without
//! a cloud-controller-manager and the cloud node controller, and two large clusters (15,000
//! nodes / 450,000 pods and 65,000 nodes / 1,000,000 pods).
use std::path::Path;

use super::{Scenario, ScenarioError, parse_scenario};

/// The scenario `ferroscale simulate` runs with no argument.
pub const DEFAULT_SCENARIO: &str = include_str!("../../scenarios/default.yaml");

/// Every bundled scenario by name (the file name without `.yaml`).
pub const BUNDLED: &[(&str, &str)] = &[
    ("default", DEFAULT_SCENARIO),
    (
        "upstream-1",
        include_str!("../../scenarios/upstream-1.yaml"),
    ),
    (
        "upstream-2",
        include_str!("../../scenarios/upstream-2.yaml"),
    ),
    (
        "upstream-3",
        include_str!("../../scenarios/upstream-3.yaml"),
    ),
    (
        "upstream-4",
        include_str!("../../scenarios/upstream-4.yaml"),
    ),
    (
        "upstream-5",
        include_str!("../../scenarios/upstream-5.yaml"),
    ),
    (
        "upstream-6",
        include_str!("../../scenarios/upstream-6.yaml"),
    ),
    ("full-day", include_str!("../../scenarios/full-day.yaml")),
    (
        "zonal-volumes",
        include_str!("../../scenarios/zonal-volumes.yaml"),
    ),
    ("gpu-dra", include_str!("../../scenarios/gpu-dra.yaml")),
    (
        "capacity-apis",
        include_str!("../../scenarios/capacity-apis.yaml"),
    ),
    (
        "controller-rate",
        include_str!("../../scenarios/controller-rate.yaml"),
    ),
    (
        "bare-metal",
        include_str!("../../scenarios/bare-metal.yaml"),
    ),
    ("large-15k", include_str!("../../scenarios/large-15k.yaml")),
    ("large-65k", include_str!("../../scenarios/large-65k.yaml")),
];

/// The text of a bundled scenario.
pub fn bundled(name: &str) -> Option<&'static str> {
    BUNDLED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

/// The names of the bundled scenarios, in the order they are listed.
pub fn bundled_names() -> Vec<&'static str> {
    BUNDLED.iter().map(|(name, _)| *name).collect()
}

/// Parses the default scenario. Bundled scenarios reference no files, so no directory is needed.
pub fn default_scenario() -> Result<Scenario, ScenarioError> {
    parse_scenario(DEFAULT_SCENARIO, "<bundled default>", Path::new("."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Check, CheckTime, ScenarioAction};

    #[test]
    fn every_bundled_scenario_parses() {
        for (name, text) in BUNDLED {
            let scenario = parse_scenario(text, &format!("<bundled {name}>"), Path::new("."));
            let scenario = match scenario {
                Ok(s) => s,
                Err(e) => panic!("bundled scenario {name}: {e}"),
            };
            assert!(!scenario.node_groups.is_empty(), "{name}");
            assert!(
                !scenario.expect.is_empty(),
                "{name} states its expected end state"
            );
            assert!(
                scenario.warnings.is_empty(),
                "{name}: {:?}",
                scenario.warnings
            );
            // Within every limit a run has (scan interval, loops, thresholds).
            if let Err(e) = crate::runner::options_for(&scenario, &[]) {
                panic!("bundled scenario {name}: {e}");
            }
        }
        assert!(bundled("upstream-2").is_some());
        assert!(bundled("nope").is_none());
    }

    fn created_pods(scenario: &Scenario) -> usize {
        scenario
            .events
            .iter()
            .map(|e| match &e.action {
                ScenarioAction::Create { count, .. } => *count,
                _ => 0,
            })
            .sum()
    }

    /// The upstream scenarios are only meaningful if their templates hold exactly 30 test pods and
    /// the workload needs exactly 1000 nodes.
    #[test]
    fn upstream_scenarios_need_exactly_a_thousand_nodes() {
        for name in ["upstream-1", "upstream-2", "upstream-6"] {
            let text = bundled(name).unwrap_or_default();
            let scenario = parse_scenario(text, name, Path::new(".")).unwrap();
            let group = &scenario.node_groups[0];
            let schedulable: Vec<_> = scenario
                .events
                .iter()
                .filter_map(|e| match &e.action {
                    ScenarioAction::Create { count, pod, .. }
                        if pod.requests.fits_in(&group.template.allocatable) =>
                    {
                        Some((*count, pod))
                    }
                    _ => None,
                })
                .collect();
            let per_node =
                group.template.allocatable.cpu_milli / schedulable[0].1.requests.cpu_milli;
            assert_eq!(per_node, 30, "{name}");
            let pods: usize = schedulable.iter().map(|(n, _)| n).sum();
            // The initial node is full, so every schedulable pod needs a new node.
            assert_eq!(pods, 999 * 30, "{name}");
            assert_eq!(group.max_size, 1000);
            assert!(scenario.expect.iter().any(|e| e.at == CheckTime::End
                && e.check
                    == Check::GroupNodes {
                        group: group.id.clone(),
                        min: 1000,
                        max: 1000
                    }));
        }
        let six = parse_scenario(
            bundled("upstream-6").unwrap_or_default(),
            "6",
            Path::new("."),
        )
        .unwrap();
        assert_eq!(created_pods(&six), 999 * 30 + 1000);
        assert!(
            six.expect
                .iter()
                .any(|e| e.check == Check::PendingPods(1000))
        );
    }
}
