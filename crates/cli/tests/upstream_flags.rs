//! Every flag of the upstream Cluster Autoscaler 1.36 binary, by name, and what the `ferroscale`
//! binary does with it: implemented, accepted with a warning (other cloud providers' flags), or
//! refused by name (features Ferroscale does not have yet). The list is written out here, not
//! taken from Ferroscale's catalogue, so a flag cannot silently disappear or change state.

use std::collections::HashMap;
use std::process::{Command, Output};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Implemented,
    NoEffect,
    Refused,
}

use Expect::{Implemented, NoEffect, Refused};

mod support;
use support::free_port;

/// Upstream's flags: its autoscaling flags, leader election, feature gates, component-base's
/// logging flags and klog's flags (with `_` written as `-`, as upstream's command line accepts).
const UPSTREAM_FLAGS: &[(&str, Expect)] = &[
    ("add-dir-header", Implemented),
    ("address", Implemented),
    ("allowed-scheduler-names", Implemented),
    ("alsologtostderr", Implemented),
    ("alsologtostderrthreshold", Implemented),
    ("async-node-groups", Implemented),
    ("aws-use-static-instance-list", NoEffect),
    ("balance-similar-node-groups", Implemented),
    ("balancing-ignore-label", Implemented),
    ("balancing-label", Implemented),
    ("blocking-system-pod-distruption-timeout", Implemented),
    ("bulk-mig-instances-listing-enabled", NoEffect),
    ("bypassed-scheduler-names", Implemented),
    ("capacity-buffer-controller-enabled", Implemented),
    ("capacity-buffer-pod-dry-run-enabled", Implemented),
    ("capacity-buffer-pod-injection-enabled", Implemented),
    ("capacity-buffer-ready-replicas-enabled", Implemented),
    ("capacity-quotas-enabled", Implemented),
    ("check-capacity-batch-processing", Implemented),
    ("check-capacity-processor-instance", Implemented),
    (
        "check-capacity-provisioning-request-batch-timebox",
        Implemented,
    ),
    (
        "check-capacity-provisioning-request-max-batch-size",
        Implemented,
    ),
    ("cloud-config", Implemented),
    ("cloud-provider", Implemented),
    ("cloud-provider-gce-l7lb-src-cidrs", NoEffect),
    ("cloud-provider-gce-lb-src-cidrs", NoEffect),
    ("cluster-name", Implemented),
    ("cluster-snapshot-parallelism", Implemented),
    ("clusterapi-cloud-config-authoritative", Implemented),
    ("cordon-node-before-terminating", Implemented),
    ("cores-total", Implemented),
    ("daemonset-eviction-for-empty-nodes", Implemented),
    ("daemonset-eviction-for-occupied-nodes", Implemented),
    ("debugging-snapshot-enabled", Implemented),
    ("drain-priority-config", Implemented),
    ("dynamic-node-delete-delay-after-taint-enabled", Implemented),
    ("emit-per-nodegroup-metrics", Implemented),
    ("enable-csi-node-aware-scheduling", Implemented),
    ("enable-dynamic-resource-allocation", Implemented),
    ("enable-graceful-degradation", Implemented),
    ("enable-inter-pod-affinity-hostname-fast-path", Implemented),
    ("enable-proactive-scaleup", Implemented),
    ("enable-provisioning-requests", Implemented),
    ("enforce-node-group-min-size", Implemented),
    ("estimator", Implemented),
    ("expander", Implemented),
    ("expendable-pods-priority-cutoff", Implemented),
    ("fastpath-binpacking-enabled", Implemented),
    ("feature-gates", Implemented),
    ("force-delete-failed-nodes", Implemented),
    ("force-delete-unregistered-nodes", Implemented),
    ("force-ds", Implemented),
    ("frequent-loops-enabled", Implemented),
    ("gce-concurrent-refreshes", NoEffect),
    ("gce-mig-instances-min-refresh-wait-time", NoEffect),
    ("gpu-total", Implemented),
    ("grpc-expander-cert", Implemented),
    ("grpc-expander-url", Implemented),
    ("ignore-daemonsets-utilization", Implemented),
    ("ignore-mirror-pods-utilization", Implemented),
    ("ignore-taint", Implemented),
    ("initial-node-group-backoff-duration", Implemented),
    ("kube-api-content-type", Implemented),
    ("kube-client-burst", Implemented),
    ("kube-client-qps", Implemented),
    ("kubeconfig", Implemented),
    ("kubernetes", Implemented),
    ("leader-elect", Implemented),
    ("leader-elect-lease-duration", Implemented),
    ("leader-elect-renew-deadline", Implemented),
    ("leader-elect-resource-lock", Implemented),
    ("leader-elect-resource-name", Implemented),
    ("leader-elect-resource-namespace", Implemented),
    ("leader-elect-retry-period", Implemented),
    ("legacy-stderr-threshold-behavior", Implemented),
    ("log-backtrace-at", Implemented),
    ("log-dir", Implemented),
    ("log-file", Implemented),
    ("log-file-max-size", Implemented),
    ("log-flush-frequency", Implemented),
    ("log-json-info-buffer-size", Implemented),
    ("log-json-split-stream", Implemented),
    ("log-text-info-buffer-size", Implemented),
    ("log-text-split-stream", Implemented),
    ("logging-format", Implemented),
    ("logtostderr", Implemented),
    ("max-allocatable-difference-ratio", Implemented),
    ("max-binpacking-time", Implemented),
    ("max-bulk-soft-taint-count", Implemented),
    ("max-bulk-soft-taint-time", Implemented),
    ("max-drain-parallelism", Implemented),
    ("max-failing-time", Implemented),
    ("max-free-difference-ratio", Implemented),
    ("max-graceful-termination-sec", Implemented),
    ("max-inactivity", Implemented),
    ("max-node-group-backoff-duration", Implemented),
    ("max-node-provision-time", Implemented),
    ("max-node-skip-eval-time-tracker-enabled", Implemented),
    ("max-node-startup-time", Implemented),
    ("max-nodegroup-binpacking-duration", Implemented),
    ("max-nodes-per-scaleup", Implemented),
    ("max-nodes-total", Implemented),
    ("max-pod-eviction-time", Implemented),
    ("max-scale-down-parallelism", Implemented),
    ("max-startup-time", Implemented),
    ("max-total-unready-percentage", Implemented),
    ("memory-difference-ratio", Implemented),
    ("memory-total", Implemented),
    ("min-replica-count", Implemented),
    ("namespace", Implemented),
    ("new-pod-scale-up-delay", Implemented),
    ("node-delete-delay-after-taint", Implemented),
    ("node-deletion-batcher-interval", Implemented),
    ("node-deletion-candidate-ttl", Implemented),
    ("node-deletion-delay-timeout", Implemented),
    ("node-group-auto-discovery", Implemented),
    ("node-group-backoff-reset-timeout", Implemented),
    ("node-info-cache-expire-time", Implemented),
    ("node-removal-latency-tracking-enabled", Implemented),
    ("nodes", Implemented),
    ("ok-total-unready-count", Implemented),
    ("one-output", Implemented),
    ("parallel-scale-up", Implemented),
    ("pending-pods-batching-timeout", Implemented),
    ("pod-injection-limit", Implemented),
    ("predicate-parallelism", Implemented),
    ("profiling", Implemented),
    ("provisioning-request-initial-backoff-time", Implemented),
    ("provisioning-request-max-backoff-cache-size", Implemented),
    ("provisioning-request-max-backoff-time", Implemented),
    ("record-duplicated-events", Implemented),
    ("regional", NoEffect),
    ("salvo-scale-up", Implemented),
    ("salvo-scale-up-budget", Implemented),
    ("scale-down-candidates-pool-min-count", Implemented),
    ("scale-down-candidates-pool-ratio", Implemented),
    ("scale-down-delay-after-add", Implemented),
    ("scale-down-delay-after-delete", Implemented),
    ("scale-down-delay-after-failure", Implemented),
    ("scale-down-delay-type-local", Implemented),
    ("scale-down-enabled", Implemented),
    ("scale-down-gpu-utilization-threshold", Implemented),
    ("scale-down-non-empty-candidates-count", Implemented),
    ("scale-down-simulation-timeout", Implemented),
    ("scale-down-unneeded-time", Implemented),
    ("scale-down-unready-enabled", Implemented),
    ("scale-down-unready-time", Implemented),
    ("scale-down-utilization-threshold", Implemented),
    ("scale-from-unschedulable", Implemented),
    ("scale-up-from-zero", Implemented),
    (
        "scaleup-simulation-for-skipped-node-groups-enabled",
        Implemented,
    ),
    ("scan-interval", Implemented),
    ("scheduler-config-file", Implemented),
    ("scheduler-verbosity", Implemented),
    ("skip-headers", Implemented),
    ("skip-log-headers", Implemented),
    ("skip-nodes-with-custom-controller-pods", Implemented),
    ("skip-nodes-with-local-storage", Implemented),
    ("skip-nodes-with-system-pods", Implemented),
    ("startup-taint", Implemented),
    ("startup-taint-prefix", Implemented),
    ("status-config-map-name", Implemented),
    ("status-taint", Implemented),
    ("stderrthreshold", Implemented),
    ("unready-nodes-scope", Implemented),
    ("unremovable-node-recheck-timeout", Implemented),
    ("user-agent", Implemented),
    ("v", Implemented),
    ("vmodule", Implemented),
    ("write-status-configmap", Implemented),
];

const OTHER_PROVIDERS: &str = "Other cloud providers (accepted, no effect)";
const NOT_YET: &str = "Not supported yet (refused by name)";

fn ferroscale(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferroscale"))
        .args(args)
        .output()
        .expect("the ferroscale binary runs")
}

/// A flag as `ferroscale flags` lists it: the section it is in and its default.
struct Listed {
    section: String,
    default: Option<String>,
}

/// Reads `ferroscale flags` (the text of `run --help`): section titles end with `:`, a flag is
/// `  --name type` followed by an indented description ending with `(default: X)`.
fn listed_flags() -> HashMap<String, Listed> {
    let output = ferroscale(&["flags".to_string()]);
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).expect("UTF-8 help");
    let mut flags = HashMap::new();
    let mut section = String::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(title) = line.strip_suffix(':').filter(|l| !l.starts_with(' ')) {
            section = title.to_string();
        } else if let Some(rest) = line.strip_prefix("  --") {
            let name = rest.split(' ').next().unwrap_or_default().to_string();
            flags.insert(
                name.clone(),
                Listed {
                    section: section.clone(),
                    default: None,
                },
            );
            current = Some(name);
        } else if let (Some(name), Some(start)) = (&current, line.rfind("(default: ")) {
            let default = line[start + "(default: ".len()..].trim_end_matches(')');
            if let Some(listed) = flags.get_mut(name) {
                listed.default = Some(default.to_string()).filter(|d| d != "none");
            }
        }
    }
    flags
}

#[test]
fn every_upstream_flag_is_listed_by_the_binary_in_its_expected_state() {
    let listed = listed_flags();
    let mut wrong = Vec::new();
    for (name, expect) in UPSTREAM_FLAGS {
        let Some(flag) = listed.get(*name) else {
            wrong.push(format!("--{name}: not listed at all"));
            continue;
        };
        let actual = match flag.section.as_str() {
            OTHER_PROVIDERS => NoEffect,
            NOT_YET => Refused,
            _ => Implemented,
        };
        if actual != *expect {
            wrong.push(format!(
                "--{name}: expected {expect:?}, listed under {:?}",
                flag.section
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The binary takes every accepted upstream flag at its default value together, warns once for
/// each flag of another provider, and goes on until it needs the cluster.
#[test]
fn every_accepted_upstream_flag_at_its_default_gets_past_the_command_line() {
    let listed = listed_flags();
    let mut args = vec![
        "run".to_string(),
        "--cloud-provider=kwok".to_string(),
        "--kubeconfig=/nonexistent/ferroscale-upstream-flags/kubeconfig".to_string(),
    ];
    for (name, expect) in UPSTREAM_FLAGS {
        if *expect == Refused || matches!(*name, "cloud-provider" | "kubeconfig") {
            continue;
        }
        // The default `:8085` may be taken on the machine running the tests; any free port says
        // the same about the flag.
        if *name == "address" {
            args.push(format!("--address=127.0.0.1:{}", free_port()));
            continue;
        }
        if let Some(default) = listed.get(*name).and_then(|f| f.default.clone()) {
            args.push(format!("--{name}={default}"));
        }
    }
    args.push("--regional".to_string());
    args.push("--gce-concurrent-refreshes=3".to_string());
    let output = ferroscale(&args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("unknown flags") && !stderr.contains("not supported by Ferroscale"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ferroscale-upstream-flags/kubeconfig"),
        "{stderr}"
    );
    for flag in ["regional", "gce-concurrent-refreshes"] {
        assert_eq!(
            stderr
                .matches(&format!("--{flag} configures only the GCE cloud provider"))
                .count(),
            1,
            "{stderr}"
        );
    }
}

#[test]
fn refused_upstream_flags_are_named_in_one_error() {
    let mut args = vec!["run".to_string(), "--cloud-provider=kwok".to_string()];
    let refused: Vec<&str> = UPSTREAM_FLAGS
        .iter()
        .filter(|(_, expect)| *expect == Refused)
        .map(|(name, _)| *name)
        .collect();
    args.extend(refused.iter().map(|name| format!("--{name}=1")));
    let output = ferroscale(&args);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for name in refused {
        assert!(
            stderr.contains(&format!("--{name} (")),
            "--{name}: {stderr}"
        );
    }
}
