//! The scale-up statements of docs/behaviour.md about the whole decision and its execution, one
//! test per statement, named after its number (`s16_` checks SU-16). Unit tests next to the code
//! cover the same statements at their own level (estimator SU-16/SU-18/SU-23, expanders
//! SU-29–SU-33, options SU-34, similarity SU-36–SU-38) and the ones that live in a single module:
//! backoff SU-40–SU-42 (`backoff.rs`) and min-size enforcement SU-48 (`scale_up/min_size.rs`).
//! CS-43 and CS-45–CS-47 need the cluster-state registry and are checked in
//! `cluster_state_statements.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ferroscale_core::act::scale_up::execute_scale_up;
use ferroscale_core::backoff::{BackoffReason, NodeGroupBackoff};
use ferroscale_core::cloud::{CloudError, ErrorClass, Instance, NodeGroup, NodeTemplate};
use ferroscale_core::events::{EventObject, reasons};
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_core::scale_up::{
    ExternalExpanderStep, GroupIncrease, NodeGroupView, PriorityConfig, ProviderFacts,
    ScaleUpInput, ScaleUpPlan, ScaleUpStatus, inject_upcoming_nodes, plan_scale_up,
};
use ferroscale_model::labels::ZONE;
use ferroscale_model::node::ConditionStatus;
use ferroscale_model::pod::{DAEMONSET_POD, POD_SCALE_UP_DELAY};
use ferroscale_model::{Node, OwnerRef, Pod, PodCondition, Resources, Timestamp};
use ferroscale_scheduling::Snapshot;

const GIB: i64 = 1 << 30;

fn now() -> Timestamp {
    Timestamp::from_secs(10_000)
}

fn node(name: &str, cpu: i64) -> Node {
    let mut n = Node::new(name, Resources::new(cpu, 16 * GIB));
    n.allocatable.pods = 110;
    n.capacity.pods = 110;
    n
}

fn template(cpu: i64) -> NodeTemplate {
    NodeTemplate {
        node: node("example", cpu),
        pods: Vec::new(),
        csi_node: None,
        resource_slices: Vec::new(),
    }
}

fn group(id: &str, cpu: i64, target: usize) -> NodeGroupView {
    NodeGroupView::new(id, 0, 100, target, Some(template(cpu)))
}

/// An unschedulable pod of ReplicaSet `web`, `age` seconds old.
fn pending_aged(name: &str, cpu: i64, age: i64) -> Pod {
    let mut p = Pod::new("default", name);
    p.owner_references.push(OwnerRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "web".into(),
        uid: "uid-web".into(),
        controller: true,
    });
    p.labels.insert("app".into(), "web".into());
    p.requests = Resources::new(cpu, GIB);
    p.creation_time = Timestamp::from_secs(now().secs() - age);
    p.scheduled_condition = Some(Box::new(PodCondition {
        status: ConditionStatus::False,
        reason: "Unschedulable".into(),
        last_transition: None,
    }));
    p
}

fn pending(name: &str, cpu: i64) -> Pod {
    pending_aged(name, cpu, 100)
}

/// A snapshot with `count` full nodes (no room for anything).
fn full_cluster(count: usize) -> Snapshot {
    let mut s = Snapshot::new();
    for i in 0..count {
        let id = s.add_node(Arc::new(node(&format!("full-{i}"), 4000)));
        let mut filler = Pod::new("default", format!("filler-{i}"));
        filler.requests = Resources::new(4000, GIB);
        filler.node_name = Some(ferroscale_model::format_compact!("full-{i}"));
        s.add_pod(id, Arc::new(filler));
    }
    s
}

struct Case {
    snapshot: Snapshot,
    pods: Vec<Arc<Pod>>,
    draining: Vec<Arc<Pod>>,
    groups: Vec<NodeGroupView>,
    backoff: NodeGroupBackoff,
    options: AutoscalingOptions,
    priority_config: Option<PriorityConfig>,
    now: Timestamp,
}

impl Case {
    fn new(pods: Vec<Pod>, groups: Vec<NodeGroupView>) -> Case {
        Case {
            snapshot: Snapshot::new(),
            pods: pods.into_iter().map(Arc::new).collect(),
            draining: Vec::new(),
            groups,
            backoff: NodeGroupBackoff::default(),
            options: AutoscalingOptions::default(),
            priority_config: None,
            now: now(),
        }
    }

    fn plan(&mut self) -> ScaleUpPlan {
        plan_scale_up(ScaleUpInput {
            now: self.now,
            snapshot: &mut self.snapshot,
            pending_pods: &self.pods,
            draining_pods: &self.draining,
            node_groups: &self.groups,
            backoff: &self.backoff,
            options: &self.options,
            priority_config: self.priority_config.as_ref(),
            provider: ProviderFacts::default(),
            seed: 1,
            external_expander: ExternalExpanderStep::Skip,
            all_or_nothing: false,
            workers: &ferroscale_core::parallel::Workers::sequential(),
            equivalence: None,
        })
    }
}

fn increases(plan: &ScaleUpPlan) -> Vec<(String, usize, usize)> {
    plan.increases
        .iter()
        .map(|i| (i.group_id.clone(), i.current_target, i.new_target))
        .collect()
}

fn reasons_for<'a>(plan: &'a ScaleUpPlan, pod: &str) -> Vec<(&'a str, &'a str)> {
    plan.pods_not_helped
        .iter()
        .find(|v| v.pod == pod)
        .map(|v| {
            v.per_group
                .iter()
                .map(|(g, r)| (g.as_str(), r.as_str()))
                .collect()
        })
        .unwrap_or_default()
}

// ---- Scale-up intake ----

/// docs/behaviour.md SU-01.
#[test]
fn s01_unschedulable_pod_older_than_two_seconds_raises_the_fitting_group_by_one() {
    let mut case = Case::new(
        vec![pending("p", 3000)],
        vec![group("small", 2000, 0), group("g", 4000, 2)],
    );
    let plan = case.plan();
    assert_eq!(plan.status, ScaleUpStatus::Successful);
    assert_eq!(increases(&plan), vec![("g".to_string(), 2, 3)]);
    assert_eq!(plan.triggering_pods, vec!["default/p"]);
    assert_eq!(
        case.snapshot.node_count(),
        0,
        "estimation leaves no node behind"
    );
}

/// docs/behaviour.md SU-02.
#[test]
fn s02_pod_fitting_an_existing_node_does_not_scale_up_and_stays_placed() {
    let mut case = Case::new(vec![pending("p", 1000)], vec![group("g", 4000, 1)]);
    case.snapshot.add_node(Arc::new(node("existing", 4000)));
    let plan = case.plan();
    assert_eq!(plan.status, ScaleUpStatus::NotNeeded);
    assert!(plan.increases.is_empty());
    assert_eq!(plan.pods_schedulable_on_existing, vec!["default/p"]);
    assert_eq!(
        case.snapshot.pod_count(),
        1,
        "the pod stays placed for the rest of the loop"
    );
}

/// docs/behaviour.md SU-03.
#[test]
fn s03_expendable_pod_does_not_trigger_scale_up() {
    let mut p = pending("p", 1000);
    p.priority = Some(-11);
    let plan = Case::new(vec![p], vec![group("g", 4000, 0)]).plan();
    assert_eq!(plan.status, ScaleUpStatus::NotNeeded);
    assert!(plan.increases.is_empty());
}

/// docs/behaviour.md SU-04.
#[test]
fn s04_priority_equal_to_the_cutoff_is_not_expendable() {
    let mut p = pending("p", 1000);
    p.priority = Some(-10);
    let plan = Case::new(vec![p], vec![group("g", 4000, 0)]).plan();
    assert_eq!(increases(&plan), vec![("g".to_string(), 0, 1)]);
}

/// docs/behaviour.md SU-05.
#[test]
fn s05_pod_without_priority_is_not_expendable() {
    let p = pending("p", 1000);
    assert!(p.priority.is_none());
    let plan = Case::new(vec![p], vec![group("g", 4000, 0)]).plan();
    assert_eq!(plan.status, ScaleUpStatus::Successful);
}

/// docs/behaviour.md SU-06.
#[test]
fn s06_nominated_pod_does_not_scale_up_and_occupies_its_node() {
    let mut p = pending("p", 3000);
    p.nominated_node_name = Some("busy".into());
    let mut case = Case::new(vec![p, pending("q", 3000)], vec![group("g", 4000, 1)]);
    case.snapshot.add_node(Arc::new(node("busy", 4000)));
    let plan = case.plan();
    // q would have fit on "busy" if p did not occupy it.
    assert_eq!(plan.triggering_pods, vec!["default/q"]);
    assert_eq!(increases(&plan), vec![("g".to_string(), 1, 2)]);
    let busy = case
        .snapshot
        .node(case.snapshot.node_id("busy").unwrap())
        .unwrap();
    assert_eq!(busy.pods.len(), 1);
    assert_eq!(busy.pods[0].name, "p");
}

/// docs/behaviour.md SU-07.
#[test]
fn s07_new_pod_scale_up_delay_ignores_younger_pods() {
    let mut case = Case::new(vec![pending_aged("p", 1000, 10)], vec![group("g", 4000, 0)]);
    case.options.set("new-pod-scale-up-delay", "30s").unwrap();
    assert_eq!(case.plan().status, ScaleUpStatus::NotNeeded);
    case.now = case.now + Duration::from_secs(21);
    assert_eq!(case.plan().status, ScaleUpStatus::Successful, "31 s old");
}

/// docs/behaviour.md SU-08.
#[test]
fn s08_smaller_pod_scale_up_delay_annotation_is_ignored() {
    let mut p = pending_aged("p", 1000, 10);
    p.annotations.insert(POD_SCALE_UP_DELAY.into(), "5s".into());
    let mut case = Case::new(vec![p], vec![group("g", 4000, 0)]);
    case.options.set("new-pod-scale-up-delay", "30s").unwrap();
    assert_eq!(
        case.plan().status,
        ScaleUpStatus::NotNeeded,
        "global 30 s still applies"
    );
    // A larger annotation is honoured.
    let mut p = pending_aged("p", 1000, 40);
    p.annotations.insert(POD_SCALE_UP_DELAY.into(), "1m".into());
    let mut case = Case::new(vec![p], vec![group("g", 4000, 0)]);
    case.options.set("new-pod-scale-up-delay", "30s").unwrap();
    assert_eq!(case.plan().status, ScaleUpStatus::NotNeeded);
}

/// docs/behaviour.md SU-09.
#[test]
fn s09_only_new_pods_waits_and_blocks_scale_down() {
    let plan = Case::new(vec![pending_aged("p", 1000, 1)], vec![group("g", 4000, 0)]).plan();
    assert_eq!(plan.status, ScaleUpStatus::InCooldown);
    assert!(plan.skip_scale_down_this_loop);
    assert!(plan.increases.is_empty());
}

/// `ferroscale run` shortens the wait to its batching window: a one-second-old pod then counts.
///
/// Checks docs/behaviour.md SU-09.
#[test]
fn a_shorter_new_pods_window_lets_a_one_second_old_pod_scale_up() {
    let mut case = Case::new(vec![pending_aged("p", 1000, 1)], vec![group("g", 4000, 0)]);
    case.options.new_pods_window = std::time::Duration::from_millis(300);
    let plan = case.plan();
    assert_eq!(plan.status, ScaleUpStatus::Successful);
    assert_eq!(plan.increases.len(), 1);
}

/// docs/behaviour.md SU-10.
#[test]
fn s10_young_gpu_pod_makes_the_loop_wait() {
    let mut gpu = pending_aged("gpu", 1000, 20);
    gpu.requests.set("nvidia.com/gpu", 1);
    let plan = Case::new(
        vec![gpu, pending_aged("old", 1000, 300)],
        vec![group("g", 4000, 0)],
    )
    .plan();
    assert_eq!(plan.status, ScaleUpStatus::InCooldown);
    assert!(plan.skip_scale_down_this_loop);
}

/// docs/behaviour.md SU-11.
#[test]
fn s11_max_nodes_total_reached_blocks_scale_up_with_an_event() {
    let mut case = Case::new(vec![pending("p", 1000)], vec![group("g", 4000, 5)]);
    case.snapshot = full_cluster(5);
    case.options.set("max-nodes-total", "5").unwrap();
    let plan = case.plan();
    assert_eq!(plan.status, ScaleUpStatus::LimitedByMaxNodesTotal);
    assert!(plan.increases.is_empty());
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == reasons::MAX_NODES_TOTAL_REACHED
                && e.object == EventObject::StatusConfigMap)
    );
    assert_eq!(
        reasons_for(&plan, "default/p"),
        vec![("g", "max total nodes in cluster reached")]
    );
}

/// docs/behaviour.md SU-12.
#[test]
fn s12_daemonset_pod_never_triggers_scale_up() {
    let mut p = pending("ds-pod", 1000);
    p.annotations.insert(DAEMONSET_POD.into(), "true".into());
    let plan = Case::new(vec![p], vec![group("g", 4000, 0)]).plan();
    assert_eq!(plan.status, ScaleUpStatus::NotNeeded);
}

/// docs/behaviour.md SU-13.
#[test]
fn s13_pods_of_schedulers_not_allowed_are_ignored() {
    let mut p = pending("p", 1000);
    p.scheduler_name = "b".into();
    let mut case = Case::new(vec![p], vec![group("g", 4000, 0)]);
    case.options.set("allowed-scheduler-names", "a").unwrap();
    assert_eq!(case.plan().status, ScaleUpStatus::NotNeeded);
}

/// docs/behaviour.md SU-14.
#[test]
fn s14_bypassed_scheduler_pods_scale_up_without_waiting() {
    let mut p = pending_aged("p", 1000, 1);
    p.scheduler_name = "a".into();
    p.scheduled_condition = None;
    let mut case = Case::new(vec![p], vec![group("g", 4000, 0)]);
    assert_eq!(
        case.plan().status,
        ScaleUpStatus::NotNeeded,
        "not unschedulable, not bypassed"
    );
    case.options.set("bypassed-scheduler-names", "a").unwrap();
    let plan = case.plan();
    assert_eq!(
        plan.status,
        ScaleUpStatus::Successful,
        "1 s old, but no new-pod wait"
    );
    assert_eq!(increases(&plan), vec![("g".to_string(), 0, 1)]);
}

/// docs/behaviour.md SU-15.
#[test]
fn s15_pods_of_draining_nodes_get_capacity_in_the_same_iteration() {
    let mut evicted = pending("evicted", 3000);
    evicted.scheduled_condition = None;
    evicted.node_name = Some("draining-node".into());
    let mut case = Case::new(vec![], vec![group("g", 4000, 1)]);
    case.draining = vec![Arc::new(evicted)];
    let plan = case.plan();
    assert_eq!(increases(&plan), vec![("g".to_string(), 1, 2)]);
    assert_eq!(plan.triggering_pods, vec!["default/evicted"]);
}

// ---- Scale-up planning ----

/// docs/behaviour.md SU-16.
#[test]
fn s16_binpacking_estimate_is_ceil_of_pods_per_node() {
    // End to end: 10 pods of 1 CPU, template of 4 CPUs with a 1-CPU DaemonSet pod: 3 per node.
    let mut t = template(4000);
    let mut ds = Pod::new("kube-system", "ds");
    ds.annotations.insert(DAEMONSET_POD.into(), "true".into());
    ds.requests = Resources::new(1000, 0);
    t.pods.push(ds);
    let g = NodeGroupView::new("g", 0, 100, 0, Some(t));
    let pods = (0..10).map(|i| pending(&format!("p{i}"), 1000)).collect();
    let plan = Case::new(pods, vec![g]).plan();
    assert_eq!(increases(&plan), vec![("g".to_string(), 0, 4)]);
}

/// docs/behaviour.md SU-17.
#[test]
fn s17_pod_larger_than_every_template_is_reported_not_helped() {
    let plan = Case::new(
        vec![pending("huge", 64_000)],
        vec![group("a", 4000, 0), group("b", 8000, 0)],
    )
    .plan();
    assert_eq!(plan.status, ScaleUpStatus::NoOptionsAvailable);
    assert!(plan.increases.is_empty());
    assert_eq!(
        reasons_for(&plan, "default/huge"),
        vec![("a", "Insufficient cpu"), ("b", "Insufficient cpu")]
    );
    let event = plan
        .events
        .iter()
        .find(|e| e.reason == reasons::NOT_TRIGGER_SCALE_UP)
        .unwrap();
    assert_eq!(event.object, EventObject::Pod("default/huge".into()));
    assert_eq!(
        event.message,
        "pod didn't trigger scale-up: 2 Insufficient cpu"
    );
}

/// docs/behaviour.md SU-18.
#[test]
fn s18_hostname_anti_affinity_estimates_one_node_per_pod() {
    use ferroscale_model::labels::HOSTNAME;
    use ferroscale_model::{LabelSelector, PodAffinityTerm};
    let pods = (0..4)
        .map(|i| {
            let mut p = pending(&format!("db-{i}"), 100);
            p.pod_anti_affinity.push(PodAffinityTerm {
                label_selector: Some(LabelSelector::from_labels([("app", "web")])),
                topology_key: HOSTNAME.into(),
                ..PodAffinityTerm::default()
            });
            p
        })
        .collect();
    let plan = Case::new(pods, vec![group("g", 4000, 0)]).plan();
    assert_eq!(increases(&plan), vec![("g".to_string(), 0, 4)]);
}

/// docs/behaviour.md SU-19.
#[test]
fn s19_group_at_max_size_is_skipped() {
    let mut at_max = group("g", 4000, 5);
    at_max.max_size = 5;
    let plan = Case::new(vec![pending("p", 1000)], vec![at_max]).plan();
    assert_eq!(plan.status, ScaleUpStatus::NoOptionsAvailable);
    assert_eq!(
        reasons_for(&plan, "default/p"),
        vec![("g", "max node group size reached")]
    );
}

/// docs/behaviour.md SU-20.
#[test]
fn s20_backed_off_group_is_skipped_and_another_chosen() {
    let mut case = Case::new(
        vec![pending("p", 1000)],
        vec![group("g", 4000, 1), group("h", 4000, 1)],
    );
    case.backoff.backoff(
        "g",
        now(),
        BackoffReason::new(ErrorClass::Other, "cloudProviderError", "x"),
    );
    for seed_shift in 0..5 {
        case.now = now() + Duration::from_secs(seed_shift);
        let plan = case.plan();
        assert_eq!(increases(&plan), vec![("h".to_string(), 1, 2)]);
    }
    let mut only_g = Case::new(vec![pending("p", 1000)], vec![group("g", 4000, 1)]);
    only_g.backoff = case.backoff.clone();
    let plan = only_g.plan();
    assert_eq!(
        reasons_for(&plan, "default/p"),
        vec![("g", "in backoff after failed scale-up")]
    );
}

/// docs/behaviour.md SU-21.
#[test]
fn s21_group_with_no_nodes_scales_from_zero_with_a_template() {
    let plan = Case::new(vec![pending("p", 1000)], vec![group("empty", 4000, 0)]).plan();
    assert_eq!(increases(&plan), vec![("empty".to_string(), 0, 1)]);
}

/// docs/behaviour.md SU-22.
#[test]
fn s22_group_without_template_cannot_scale() {
    let g = NodeGroupView::new("g", 0, 10, 0, None);
    let plan = Case::new(vec![pending("p", 1000)], vec![g]).plan();
    assert_eq!(plan.status, ScaleUpStatus::NoOptionsAvailable);
    assert_eq!(
        reasons_for(&plan, "default/p"),
        vec![("g", "not ready for scale-up")]
    );
}

/// docs/behaviour.md SU-23.
#[test]
fn s23_at_most_max_nodes_per_scaleup_in_one_iteration() {
    let pods = (0..2000).map(|i| pending(&format!("p{i}"), 4000)).collect();
    let mut g = group("g", 4000, 0);
    g.max_size = 5000;
    let plan = Case::new(pods, vec![g]).plan();
    assert_eq!(increases(&plan), vec![("g".to_string(), 0, 1000)]);
}

/// docs/behaviour.md SU-24.
#[test]
fn s24_max_nodes_total_counts_upcoming_nodes() {
    let pods = (0..7).map(|i| pending(&format!("p{i}"), 4000)).collect();
    let mut case = Case::new(pods, vec![group("g", 4000, 8)]);
    case.snapshot = full_cluster(6);
    let g = case.groups[0].clone();
    inject_upcoming_nodes(&mut case.snapshot, &g, 2);
    case.options.set("max-nodes-total", "10").unwrap();
    let plan = case.plan();
    assert_eq!(
        plan.pods_schedulable_on_existing.len(),
        2,
        "two pods wait for the upcoming nodes"
    );
    assert_eq!(
        increases(&plan),
        vec![("g".to_string(), 8, 10)],
        "5 needed, 2 allowed"
    );
}

/// docs/behaviour.md SU-25.
#[test]
fn s25_cores_total_caps_the_scale_up() {
    let pods = (0..3).map(|i| pending(&format!("p{i}"), 4000)).collect();
    let mut case = Case::new(pods, vec![group("g", 4000, 3)]);
    case.snapshot = full_cluster(3);
    case.options.set("cores-total", "0:16").unwrap();
    assert_eq!(increases(&case.plan()), vec![("g".to_string(), 3, 4)]);
}

/// docs/behaviour.md SU-26.
#[test]
fn s26_group_exceeding_cores_total_with_one_node_is_skipped_and_counted() {
    let mut case = Case::new(vec![pending("p", 4000)], vec![group("g", 4000, 3)]);
    case.snapshot = full_cluster(3);
    case.options.set("cores-total", "0:12").unwrap();
    let plan = case.plan();
    assert_eq!(plan.status, ScaleUpStatus::NoOptionsAvailable);
    assert_eq!(plan.skipped_scale_events, vec!["CpuResourceLimit"]);
    assert_eq!(
        reasons_for(&plan, "default/p"),
        vec![("g", "exceeded quota: \"cluster-wide\", resources: cpu")]
    );
}

/// docs/behaviour.md SU-27.
#[test]
fn s27_upcoming_nodes_that_fit_prevent_another_scale_up() {
    let pods = (0..4).map(|i| pending(&format!("p{i}"), 2000)).collect();
    let mut case = Case::new(pods, vec![group("g", 4000, 2)]);
    let g = case.groups[0].clone();
    inject_upcoming_nodes(&mut case.snapshot, &g, 2);
    let plan = case.plan();
    assert_eq!(plan.status, ScaleUpStatus::NotNeeded);
    assert_eq!(plan.pods_schedulable_on_existing.len(), 4);
}

/// docs/behaviour.md SU-28.
#[test]
fn s28_timed_out_group_is_backed_off_and_another_group_chosen() {
    // The timed-out group's placeholders are no longer injected and it is backed off with
    // code "timeout"; the plan then picks the other group.
    let mut case = Case::new(
        vec![pending("p", 1000)],
        vec![group("slow", 4000, 3), group("other", 4000, 0)],
    );
    case.backoff.backoff(
        "slow",
        now(),
        BackoffReason::new(ErrorClass::Other, "timeout", "scale-up timed out"),
    );
    let plan = case.plan();
    assert_eq!(increases(&plan), vec![("other".to_string(), 0, 1)]);
}

/// docs/behaviour.md SU-29.
#[test]
fn s29_most_pods_expander_picks_the_group_fitting_more_pods() {
    // "wide" fits both pod kinds; "narrow" only the small ones.
    let pods = vec![pending("small", 1000), pending("big", 6000)];
    let mut case = Case::new(pods, vec![group("narrow", 4000, 0), group("wide", 8000, 0)]);
    case.options.set("expander", "most-pods").unwrap();
    assert_eq!(increases(&case.plan()), vec![("wide".to_string(), 0, 1)]);
}

/// docs/behaviour.md SU-30.
#[test]
fn s30_least_waste_picks_the_tighter_fit() {
    let pods = (0..4).map(|i| pending(&format!("p{i}"), 1000)).collect();
    let plan = Case::new(pods, vec![group("big", 16000, 0), group("snug", 4000, 0)]).plan();
    assert_eq!(increases(&plan), vec![("snug".to_string(), 0, 1)]);
}

/// docs/behaviour.md SU-31.
#[test]
fn s31_priority_expander_picks_the_highest_priority_group() {
    let mut case = Case::new(
        vec![pending("p", 1000)],
        vec![group("pool-small", 4000, 0), group("pool-big", 4000, 0)],
    );
    case.options.set("expander", "priority").unwrap();
    case.priority_config = Some(PriorityConfig::parse(
        "10:\n  - .*small.*\n50:\n  - .*big.*\n",
    ));
    assert_eq!(
        increases(&case.plan()),
        vec![("pool-big".to_string(), 0, 1)]
    );
}

/// docs/behaviour.md SU-32.
#[test]
fn s32_missing_priority_config_falls_back_to_any_option() {
    let mut case = Case::new(
        vec![pending("p", 1000)],
        vec![group("a", 4000, 0), group("b", 4000, 0)],
    );
    case.options.set("expander", "priority").unwrap();
    let plan = case.plan();
    assert_eq!(plan.status, ScaleUpStatus::Successful);
    assert_eq!(plan.increases.len(), 1);
}

/// docs/behaviour.md SU-33.
#[test]
fn s33_priority_ties_broken_by_least_waste() {
    let pods = (0..4).map(|i| pending(&format!("p{i}"), 1000)).collect();
    let mut case = Case::new(
        pods,
        vec![
            group("pool-big", 16000, 0),
            group("pool-snug", 4000, 0),
            group("x", 4000, 0),
        ],
    );
    case.options
        .set("expander", "priority,least-waste")
        .unwrap();
    case.priority_config = Some(PriorityConfig::parse("5:\n  - ^x$\n20:\n  - pool-\n"));
    assert_eq!(
        increases(&case.plan()),
        vec![("pool-snug".to_string(), 0, 1)]
    );
}

/// docs/behaviour.md SU-34.
#[test]
fn s34_random_then_most_pods_is_refused() {
    let mut options = AutoscalingOptions::default();
    assert!(options.set("expander", "random,most-pods").is_err());
}

fn similar_group(id: &str, zone: &str, target: usize) -> NodeGroupView {
    let mut t = template(4000);
    t.node.labels.insert(ZONE.into(), zone.into());
    NodeGroupView::new(id, 0, 100, target, Some(t))
}

/// docs/behaviour.md SU-35.
#[test]
fn s35_balancing_splits_four_nodes_over_similar_groups() {
    let pods = (0..4).map(|i| pending(&format!("p{i}"), 4000)).collect();
    let groups = vec![
        similar_group("a", "z1", 1),
        similar_group("b", "z2", 3),
        similar_group("c", "z3", 6),
    ];
    let mut case = Case::new(pods, groups);
    case.options
        .set("balance-similar-node-groups", "true")
        .unwrap();
    let plan = case.plan();
    assert_eq!(
        increases(&plan),
        vec![("a".to_string(), 1, 4), ("b".to_string(), 3, 4)]
    );
    // Without the flag one group takes all four.
    case.options
        .set("balance-similar-node-groups", "false")
        .unwrap();
    let plan = case.plan();
    assert_eq!(plan.increases.len(), 1);
    assert_eq!(plan.increases[0].delta(), 4);
}

/// docs/behaviour.md SU-36–SU-38.
#[test]
fn s36_to_s38_similarity_rules_feed_balancing() {
    // Memory 1 % apart: balanced; 2 % apart: not.
    let pods = || {
        (0..2)
            .map(|i| pending(&format!("p{i}"), 4000))
            .collect::<Vec<_>>()
    };
    for (memory_bump, balanced) in [(100, true), (50, false)] {
        let a = similar_group("a", "z1", 0);
        let mut b = similar_group("b", "z2", 0);
        let t = b.template.as_mut().unwrap();
        t.node.capacity.memory += t.node.capacity.memory / memory_bump;
        t.node.allocatable.memory = t.node.capacity.memory;
        let mut case = Case::new(pods(), vec![a, b]);
        case.options
            .set("balance-similar-node-groups", "true")
            .unwrap();
        case.options.set("expander", "most-pods").unwrap();
        assert_eq!(
            case.plan().increases.len() == 2,
            balanced,
            "memory 1/{memory_bump} apart"
        );
    }
    // A custom label separates groups unless ignored; balancing-label unites different shapes.
    let a = similar_group("a", "z1", 0);
    let mut b = similar_group("b", "z2", 0);
    b.template
        .as_mut()
        .unwrap()
        .node
        .labels
        .insert("team".into(), "x".into());
    let mut case = Case::new(pods(), vec![a.clone(), b.clone()]);
    case.options
        .set("balance-similar-node-groups", "true")
        .unwrap();
    assert_eq!(case.plan().increases.len(), 1);
    case.options.set("balancing-ignore-label", "team").unwrap();
    assert_eq!(case.plan().increases.len(), 2);
    let mut big = NodeGroupView::new("big", 0, 100, 0, Some(template(8000)));
    big.template
        .as_mut()
        .unwrap()
        .node
        .labels
        .insert("pool".into(), "general".into());
    let mut small = similar_group("small", "z1", 0);
    small
        .template
        .as_mut()
        .unwrap()
        .node
        .labels
        .insert("pool".into(), "general".into());
    let four = (0..4).map(|i| pending(&format!("p{i}"), 4000)).collect();
    let mut case = Case::new(four, vec![big, small]);
    case.options
        .set("balance-similar-node-groups", "true")
        .unwrap();
    case.options.set("balancing-label", "pool").unwrap();
    assert_eq!(case.plan().increases.len(), 2);
}

/// docs/behaviour.md SU-39.
#[test]
fn s39_zone_selector_scales_only_the_matching_group_of_a_similar_set() {
    let pods = (0..4)
        .map(|i| {
            let mut p = pending(&format!("p{i}"), 4000);
            p.node_selector.insert(ZONE.into(), "z1".into());
            p
        })
        .collect();
    let mut case = Case::new(
        pods,
        vec![similar_group("a", "z1", 3), similar_group("b", "z2", 0)],
    );
    case.options
        .set("balance-similar-node-groups", "true")
        .unwrap();
    assert_eq!(increases(&case.plan()), vec![("a".to_string(), 3, 7)]);
}

// ---- Execution ----

#[derive(Debug)]
struct FakeGroup {
    id: String,
    fail: bool,
    calls: Mutex<Vec<usize>>,
}

impl FakeGroup {
    fn new(id: &str, fail: bool) -> Arc<FakeGroup> {
        Arc::new(FakeGroup {
            id: id.into(),
            fail,
            calls: Mutex::new(Vec::new()),
        })
    }

    fn calls(&self) -> Vec<usize> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl NodeGroup for FakeGroup {
    fn id(&self) -> &str {
        &self.id
    }
    fn min_size(&self) -> usize {
        0
    }
    fn max_size(&self) -> usize {
        100
    }
    async fn target_size(&self) -> Result<usize, CloudError> {
        Ok(0)
    }
    async fn increase_size(&self, delta: usize) -> Result<(), CloudError> {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(delta);
        }
        if self.fail {
            Err(CloudError::Provider("out of capacity".into()))
        } else {
            Ok(())
        }
    }
    async fn delete_nodes(&self, _nodes: &[Node]) -> Result<(), CloudError> {
        Ok(())
    }
    async fn decrease_target_size(&self, _delta: i64) -> Result<(), CloudError> {
        Ok(())
    }
    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        Ok(Vec::new())
    }
}

fn two_group_plan() -> ScaleUpPlan {
    let mut plan = ScaleUpPlan::empty(ScaleUpStatus::Successful);
    for (id, from, to) in [("a", 1, 3), ("b", 2, 4)] {
        plan.increases.push(GroupIncrease {
            group_id: id.into(),
            current_target: from,
            new_target: to,
            max_size: 10,
            atomic: false,
        });
    }
    plan.triggering_pods = vec!["default/p1".into(), "default/p2".into()];
    plan
}

/// docs/behaviour.md SU-40.
#[test]
fn s40_failed_increase_emits_event_and_backs_off_five_minutes() {
    let a = FakeGroup::new("a", true);
    let groups: Vec<Arc<dyn NodeGroup>> = vec![a.clone()];
    let mut plan = two_group_plan();
    plan.increases.truncate(1);
    let mut backoff = NodeGroupBackoff::default();
    let options = AutoscalingOptions::default();
    let run = futures::executor::block_on(execute_scale_up(
        &plan,
        &groups,
        &mut backoff,
        now(),
        &options,
    ));
    assert!(matches!(run.status, ScaleUpStatus::Error(_)));
    assert!(
        run.events
            .iter()
            .any(|e| e.reason == reasons::FAILED_TO_SCALE_UP_GROUP && e.warning)
    );
    assert_eq!(run.failed_scale_up_reasons, vec!["cloudProviderError"]);
    assert_eq!(run.failed_node_creations, 2);
    assert!(backoff.is_backed_off("a", now() + Duration::from_secs(299)));
    assert!(!backoff.is_backed_off("a", now() + Duration::from_secs(300)));
    assert_eq!(
        backoff.active("a", now()).unwrap().reason.code,
        "cloudProviderError"
    );
    assert!(
        run.events
            .iter()
            .all(|e| e.reason != reasons::TRIGGERED_SCALE_UP)
    );
}

/// docs/behaviour.md SU-44.
#[test]
fn s44_successful_scale_up_emits_events_and_counts_nodes() {
    let (a, b) = (FakeGroup::new("a", false), FakeGroup::new("b", false));
    let groups: Vec<Arc<dyn NodeGroup>> = vec![a.clone(), b.clone()];
    let mut backoff = NodeGroupBackoff::default();
    let options = AutoscalingOptions::default();
    let run = futures::executor::block_on(execute_scale_up(
        &two_group_plan(),
        &groups,
        &mut backoff,
        now(),
        &options,
    ));
    assert_eq!(run.status, ScaleUpStatus::Successful);
    assert_eq!((a.calls(), b.calls()), (vec![2], vec![2]));
    assert_eq!(run.scaled_up_nodes, 4);
    let scaled: Vec<_> = run
        .events
        .iter()
        .filter(|e| e.reason == reasons::SCALED_UP_GROUP)
        .collect();
    assert_eq!(scaled.len(), 4, "announced and confirmed per group");
    assert!(
        scaled
            .iter()
            .all(|e| e.object == EventObject::StatusConfigMap && !e.warning)
    );
    let triggered: Vec<_> = run
        .events
        .iter()
        .filter(|e| e.reason == reasons::TRIGGERED_SCALE_UP)
        .map(|e| e.object.clone())
        .collect();
    assert_eq!(
        triggered,
        vec![
            EventObject::Pod("default/p1".into()),
            EventObject::Pod("default/p2".into())
        ]
    );
}

/// docs/behaviour.md SU-49.
#[test]
fn s49_sequential_scale_up_stops_at_the_first_failure() {
    let (a, b) = (FakeGroup::new("a", true), FakeGroup::new("b", false));
    let groups: Vec<Arc<dyn NodeGroup>> = vec![a.clone(), b.clone()];
    let mut backoff = NodeGroupBackoff::default();
    let mut options = AutoscalingOptions::default();
    let run = futures::executor::block_on(execute_scale_up(
        &two_group_plan(),
        &groups,
        &mut backoff,
        now(),
        &options,
    ));
    assert_eq!(b.calls(), Vec::<usize>::new(), "second group never resized");
    assert_eq!(run.not_attempted.len(), 1);
    // In parallel mode both are attempted.
    options.set("parallel-scale-up", "true").unwrap();
    let (a, b) = (FakeGroup::new("a", true), FakeGroup::new("b", false));
    let groups: Vec<Arc<dyn NodeGroup>> = vec![a.clone(), b.clone()];
    let run = futures::executor::block_on(execute_scale_up(
        &two_group_plan(),
        &groups,
        &mut backoff,
        now(),
        &options,
    ));
    assert_eq!((a.calls(), b.calls()), (vec![2], vec![2]));
    assert_eq!(run.succeeded.len(), 1);
    assert_eq!(run.failed.len(), 1);
}

#[test]
fn plan_is_reproducible_for_a_seed() {
    let make = || {
        let pods = (0..6).map(|i| pending(&format!("p{i}"), 1000)).collect();
        Case::new(
            pods,
            vec![
                group("a", 4000, 0),
                group("b", 4000, 0),
                group("c", 4000, 0),
            ],
        )
    };
    let first = increases(&make().plan());
    for _ in 0..5 {
        assert_eq!(increases(&make().plan()), first);
    }
}
