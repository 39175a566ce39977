//! The scale-down statements of docs/behaviour.md about the decision, one test per statement,
//! named after its number (`s74_` checks SD-74): eligibility SD-50–SD-63 and SD-66, drainability
//! SD-67–SD-80, and the decide-level parts of actuation SD-81–SD-92 (which nodes are chosen, how
//! many per loop, which pods are listed for eviction, soft-taint caps, re-evaluation after a
//! failure). Cluster health (CS-64, CS-65) belongs to the cluster-state registry; the Act-level
//! parts of SD-81–SD-93 (tainting, eviction calls, waits, `DeleteNodes`) to the actuation layer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_core::cloud::ResourceLimits;
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_core::scale_down::{
    ControllerIndex, ControllerReplicas, DeletionsInProgress, DrainBlock,
    ENABLE_DS_EVICTION_ANNOTATION, SCALE_DOWN_DISABLED_ANNOTATION, ScaleDownInput, ScaleDownPlan,
    ScaleDownState, ScaleDownStatus, UnremovableReason,
};
use ferroscale_core::scale_up::{NodeGroupView, ProviderFacts};
use ferroscale_model::node::ConditionStatus;
use ferroscale_model::pod::{DAEMONSET_POD, SAFE_TO_EVICT, SAFE_TO_EVICT_LOCAL_VOLUMES};
use ferroscale_model::resources::NVIDIA_GPU;
use ferroscale_model::taints::DELETION_CANDIDATE;
use ferroscale_model::{
    HostPort, IntOrPercent, LabelSelector, Node, OwnerRef, Pod, PodDisruptionBudget, PodPhase,
    Protocol, Resources, RestartPolicy, Taint, TaintEffect, Timestamp, Volume, VolumeSource,
};
use ferroscale_scheduling::Snapshot;

const GIB: i64 = 1 << 30;
const MINUTE: Duration = Duration::from_secs(60);

fn t0() -> Timestamp {
    Timestamp::from_secs(1_000_000)
}

/// A cluster for scale-down tests: nodes, their pods, groups, PDBs and options.
struct Cluster {
    nodes: Vec<(Node, Option<String>)>,
    pods: Vec<Pod>,
    groups: Vec<NodeGroupView>,
    pdbs: Vec<PodDisruptionBudget>,
    options: AutoscalingOptions,
    controllers: Option<ControllerIndex>,
    deletions: DeletionsInProgress,
    gpu_label: &'static str,
    limits: Option<ResourceLimits>,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster {
            nodes: Vec::new(),
            pods: Vec::new(),
            groups: Vec::new(),
            pdbs: Vec::new(),
            options: AutoscalingOptions::default(),
            controllers: None,
            deletions: DeletionsInProgress::default(),
            gpu_label: "",
            limits: None,
        }
    }

    /// A group `id` with min/target; nodes are added separately.
    fn group(&mut self, id: &str, min: usize, target: usize) -> &mut Self {
        self.groups
            .push(NodeGroupView::new(id, min, 100, target, None));
        self
    }

    /// A 4-CPU, 16 GiB node in `group`.
    fn node(&mut self, name: &str, group: Option<&str>) -> &mut Node {
        let mut n = Node::new(name, Resources::new(4000, 16 * GIB));
        n.allocatable.pods = 110;
        n.capacity.pods = 110;
        self.nodes.push((n, group.map(str::to_string)));
        &mut self.nodes.last_mut().unwrap().0
    }

    fn add(&mut self, pod: Pod) -> &mut Self {
        self.pods.push(pod);
        self
    }

    fn plan_at(&self, now: Timestamp, state: &ScaleDownState) -> ScaleDownPlan {
        self.plan_with(now, state, false)
    }

    fn plan_with(&self, now: Timestamp, state: &ScaleDownState, disabled: bool) -> ScaleDownPlan {
        let mut snapshot = Snapshot::new();
        for (n, _) in &self.nodes {
            snapshot.add_node(Arc::new(n.clone()));
        }
        for p in &self.pods {
            let node = p.node_name.as_deref().unwrap();
            let id = snapshot.node_id(node).unwrap();
            snapshot.add_pod(id, Arc::new(p.clone()));
        }
        let group_index: HashMap<String, usize> = self
            .nodes
            .iter()
            .filter_map(|(n, g)| {
                let g = g.as_ref()?;
                Some((n.name.clone(), self.groups.iter().position(|x| &x.id == g)?))
            })
            .collect();
        let group_of = |node: &Node| group_index.get(node.name.as_str()).copied();
        let controllers = self.controllers.clone().unwrap_or_else(|| {
            let mut c = ControllerIndex::new();
            c.assume_owners_of(&self.pods);
            c
        });
        let provider = ProviderFacts {
            gpu_label: self.gpu_label,
            resource_limits: self.limits.as_ref(),
            ..ProviderFacts::default()
        };
        let before = snapshot.pod_count();
        let plan = ferroscale_core::scale_down::plan_scale_down(ScaleDownInput {
            now,
            snapshot: &mut snapshot,
            node_groups: &self.groups,
            node_group_of: &group_of,
            pdbs: &self.pdbs,
            controllers: &controllers,
            deletions_in_progress: &self.deletions,
            state,
            options: &self.options,
            provider: &provider,
            scale_down_disabled_this_loop: disabled,
            workers: &ferroscale_core::parallel::Workers::sequential(),
            measure_memo: None,
        });
        assert_eq!(snapshot.pod_count(), before, "the snapshot is restored");
        assert_eq!(snapshot.fork_depth(), 0);
        plan
    }

    /// Plans at t0 and again `later` afterwards with the carried state; returns the second plan.
    fn plan_twice(&self, later: Duration) -> ScaleDownPlan {
        let first = self.plan_at(t0(), &ScaleDownState::new());
        self.plan_at(t0() + later, &first.next_state)
    }
}

fn owned(name: &str, node: &str, kind: &str, owner: &str, cpu: i64, memory: i64) -> Pod {
    let mut p = Pod::new("default", name);
    p.owner_references.push(OwnerRef {
        api_version: if kind == "ReplicationController" {
            "v1".into()
        } else {
            "apps/v1".into()
        },
        kind: kind.into(),
        name: owner.into(),
        uid: format!("uid-{owner}"),
        controller: true,
    });
    p.labels.insert("app".into(), owner.into());
    p.requests = Resources::new(cpu, memory);
    p.node_name = Some(node.into());
    p.phase = PodPhase::Running;
    p
}

/// A ReplicaSet pod of `web`.
fn web(name: &str, node: &str, cpu: i64, memory: i64) -> Pod {
    owned(name, node, "ReplicaSet", "web", cpu, memory)
}

fn daemonset_pod(name: &str, node: &str, cpu: i64) -> Pod {
    let mut p = owned(name, node, "DaemonSet", "agent", cpu, 0);
    p.namespace = "monitoring".into();
    p
}

fn unneeded(plan: &ScaleDownPlan) -> Vec<&str> {
    plan.unneeded.iter().map(|u| u.node.as_str()).collect()
}

fn deleted(plan: &ScaleDownPlan) -> Vec<&str> {
    plan.nodes_to_delete().map(|r| r.node.as_str()).collect()
}

fn reason_of(plan: &ScaleDownPlan, node: &str) -> Option<UnremovableReason> {
    plan.unremovable
        .iter()
        .chain(&plan.held_back)
        .find(|u| u.node == node)
        .map(|u| u.reason)
}

fn block_of(plan: &ScaleDownPlan, node: &str) -> Option<DrainBlock> {
    plan.unremovable
        .iter()
        .find(|u| u.node == node)
        .and_then(|u| u.blocking_pod.as_ref())
        .map(|b| b.rule)
}

/// Group `g` (min 0, target = node count) with a candidate `a` carrying `pods` and a big empty-ish
/// node `big` (kept busy above the threshold) to move them to.
fn candidate_with(pods: Vec<Pod>) -> Cluster {
    let mut c = Cluster::new();
    c.group("g", 0, 2);
    c.node("a", Some("g"));
    c.node("big", Some("g"));
    // 60 % busy: never a candidate itself, room for 1.6 CPUs.
    c.add(web("busy", "big", 2400, GIB));
    for p in pods {
        c.add(p);
    }
    c
}

// --- Scale-down eligibility -------------------------------------------------------------

/// docs/behaviour.md SD-50.
#[test]
fn s50_underutilized_node_is_unneeded_and_deleted_after_more_than_ten_minutes() {
    let c = candidate_with(vec![web("p1", "a", 1000, 4 * GIB)]);
    let first = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(unneeded(&first), vec!["a"]);
    assert!(deleted(&first).is_empty());
    assert_eq!(
        reason_of(&first, "a"),
        Some(UnremovableReason::NotUnneededLongEnough)
    );
    let at_ten = c.plan_at(t0() + 10 * MINUTE, &first.next_state);
    assert!(
        deleted(&at_ten).is_empty(),
        "exactly 10 minutes is not enough"
    );
    let after = c.plan_at(
        t0() + 10 * MINUTE + Duration::from_secs(1),
        &at_ten.next_state,
    );
    assert_eq!(deleted(&after), vec!["a"]);
    assert_eq!(after.status, ScaleDownStatus::NodeDeleteStarted);
    let removal = &after.drain_to_delete[0];
    assert_eq!(removal.moves.len(), 1);
    assert_eq!(removal.moves[0].destination, "big");
    assert_eq!(removal.pods_to_evict.len(), 1);
}

/// docs/behaviour.md SD-108: with `--scale-down-unneeded-time=0` the node goes in the loop that
/// finds it unneeded, as upstream's (which checks the time only when it is positive).
#[test]
fn s108_zero_unneeded_time_removes_in_the_loop_that_finds_the_node() {
    let mut c = candidate_with(vec![web("p1", "a", 1000, 4 * GIB)]);
    c.options.scale_down_unneeded_time = Duration::ZERO;
    let first = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(unneeded(&first), vec!["a"]);
    assert_eq!(deleted(&first), vec!["a"]);
    // A positive time still waits, however short.
    c.options.scale_down_unneeded_time = Duration::from_secs(1);
    let first = c.plan_at(t0(), &ScaleDownState::new());
    assert!(deleted(&first).is_empty());
    assert_eq!(
        reason_of(&first, "a"),
        Some(UnremovableReason::NotUnneededLongEnough)
    );
}

/// docs/behaviour.md SD-51.
#[test]
fn s51_exactly_half_utilization_is_underutilized() {
    // Memory exactly half, cpu 40 %.
    let c = candidate_with(vec![web("p1", "a", 1600, 8 * GIB)]);
    let c2 = candidate_with(vec![web("p1", "a", 1600, 8 * GIB + 1)]);
    assert_eq!(
        unneeded(&c.plan_at(t0(), &ScaleDownState::new())),
        vec!["a"]
    );
    let over = c2.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(
        reason_of(&over, "a"),
        Some(UnremovableReason::NotUnderutilized)
    );
}

/// docs/behaviour.md SD-52.
#[test]
fn s52_max_of_cpu_and_memory_decides() {
    // 10 % cpu, 60 % memory.
    let c = candidate_with(vec![web("p1", "a", 400, 16 * GIB * 6 / 10)]);
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(
        reason_of(&plan, "a"),
        Some(UnremovableReason::NotUnderutilized)
    );
    let u = plan.unremovable.iter().find(|u| u.node == "a").unwrap();
    assert!((u.utilization.unwrap().value - 0.6).abs() < 1e-6);
}

/// docs/behaviour.md SD-53.
#[test]
fn s53_ignore_daemonsets_utilization_removes_them_from_both_sides() {
    // DaemonSet 1 CPU + web 1.5 CPU on 4 CPUs.
    let mut c = candidate_with(vec![
        daemonset_pod("ds-a", "a", 1000),
        web("p1", "a", 1500, GIB),
    ]);
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(
        reason_of(&plan, "a"),
        Some(UnremovableReason::NotUnderutilized),
        "2.5 of 4 CPUs"
    );
    c.options.ignore_daemonsets_utilization = true;
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(unneeded(&plan), vec!["a"], "1.5 of 3 CPUs is exactly 50 %");
}

/// docs/behaviour.md SD-54.
#[test]
fn s54_gpu_node_uses_the_gpu_threshold_only() {
    let mut c = Cluster::new();
    c.gpu_label = "accelerator";
    c.group("gpu", 0, 2);
    for name in ["a", "b"] {
        let n = c.node(name, Some("gpu"));
        n.labels.insert("accelerator".into(), "t4".into());
        n.allocatable.set(NVIDIA_GPU, 10);
    }
    let mut p = web("g1", "a", 3600, GIB);
    p.requests.set(NVIDIA_GPU, 3);
    c.add(p);
    // b: 70 % of its GPUs busy, room for a's 3 GPUs and 3.6 CPUs.
    let mut q = web("g2", "b", 100, GIB);
    q.requests.set(NVIDIA_GPU, 7);
    c.add(q);
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(unneeded(&plan), vec!["a"], "GPU 0.3 although cpu 0.9");
    let u = &plan.unneeded[0].utilization;
    assert!((u.value - 0.3).abs() < 1e-9 && u.cpu > 0.89);
}

/// docs/behaviour.md SD-55.
#[test]
fn s55_scale_down_disabled_annotation_keeps_the_node() {
    let mut c = candidate_with(Vec::new());
    c.nodes[0]
        .0
        .annotations
        .insert(SCALE_DOWN_DISABLED_ANNOTATION.into(), "true".into());
    let plan = c.plan_twice(60 * MINUTE);
    assert!(deleted(&plan).is_empty());
    assert!(unneeded(&plan).is_empty());
    assert_eq!(
        reason_of(&plan, "a"),
        Some(UnremovableReason::ScaleDownDisabledAnnotation)
    );
}

/// docs/behaviour.md SD-56.
#[test]
fn s56_group_at_min_size_has_no_candidates() {
    let mut c = candidate_with(Vec::new());
    c.groups[0].min_size = 2;
    let plan = c.plan_twice(60 * MINUTE);
    assert!(unneeded(&plan).is_empty());
    assert!(deleted(&plan).is_empty());
    assert_eq!(
        reason_of(&plan, "a"),
        Some(UnremovableReason::NodeGroupMinSizeReached)
    );
    assert_eq!(plan.status, ScaleDownStatus::NoCandidates);
}

/// docs/behaviour.md SD-57.
#[test]
fn s57_min_size_limits_removals_within_one_batch() {
    let mut c = Cluster::new();
    c.group("g", 2, 3);
    c.node("a", Some("g"));
    c.node("b", Some("g"));
    c.node("c", Some("g"));
    c.add(web("busy", "c", 3000, GIB));
    let plan = c.plan_twice(11 * MINUTE);
    assert_eq!(unneeded(&plan), vec!["a", "b"]);
    assert_eq!(deleted(&plan), vec!["a"]);
    assert_eq!(
        reason_of(&plan, "b"),
        Some(UnremovableReason::NodeGroupMinSizeReached)
    );
}

/// docs/behaviour.md SD-58.
#[test]
fn s58_recent_scale_up_suspends_deletion_but_not_tracking() {
    let c = candidate_with(Vec::new());
    let mut state = c.plan_at(t0(), &ScaleDownState::new()).next_state;
    let now = t0() + 15 * MINUTE;
    state.record_scale_up("g", now - 5 * MINUTE);
    let plan = c.plan_at(now, &state);
    assert_eq!(unneeded(&plan), vec!["a"]);
    assert_eq!(plan.unneeded[0].since, t0(), "the timer keeps running");
    assert!(deleted(&plan).is_empty());
    assert!(plan.in_cooldown);
    assert_eq!(plan.status, ScaleDownStatus::InCooldown);
}

/// docs/behaviour.md SD-59.
#[test]
fn s59_zero_delay_after_add_allows_deletion_in_the_scale_up_loop() {
    let mut c = candidate_with(Vec::new());
    c.options.scale_down_delay_after_add = Duration::ZERO;
    let mut state = c.plan_at(t0(), &ScaleDownState::new()).next_state;
    let now = t0() + 11 * MINUTE;
    state.record_scale_up("g", now);
    assert_eq!(deleted(&c.plan_at(now, &state)), vec!["a"]);
}

/// docs/behaviour.md SD-60.
#[test]
fn s60_re_entering_the_unneeded_set_restarts_the_timer() {
    let mut c = candidate_with(Vec::new());
    let first = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(first.next_state.unneeded_since.get("a"), Some(&t0()));
    // Needed for a while: a pod fills it.
    c.add(web("filler", "a", 3000, GIB));
    let needed = c.plan_at(t0() + 5 * MINUTE, &first.next_state);
    assert!(!needed.next_state.is_unneeded("a"));
    c.pods.pop();
    let again = c.plan_at(t0() + 8 * MINUTE, &needed.next_state);
    assert_eq!(again.unneeded[0].since, t0() + 8 * MINUTE);
    let later = c.plan_at(t0() + 12 * MINUTE, &again.next_state);
    assert!(deleted(&later).is_empty(), "only 4 minutes since re-entry");
}

/// docs/behaviour.md SD-61.
#[test]
fn s61_unready_node_uses_the_unready_time() {
    let mut c = candidate_with(Vec::new());
    c.nodes[0].0.conditions.ready = Some(ConditionStatus::False);
    let first = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(unneeded(&first), vec!["a"]);
    let at_15 = c.plan_at(t0() + 15 * MINUTE, &first.next_state);
    assert!(deleted(&at_15).is_empty());
    assert_eq!(
        reason_of(&at_15, "a"),
        Some(UnremovableReason::NotUnreadyLongEnough)
    );
    let at_21 = c.plan_at(t0() + 21 * MINUTE, &at_15.next_state);
    assert_eq!(deleted(&at_21), vec!["a"]);
    assert!(!at_21.empty_to_delete[0].ready);
}

/// docs/behaviour.md SD-62.
#[test]
fn s62_unready_scale_down_can_be_disabled() {
    let mut c = candidate_with(Vec::new());
    c.nodes[0].0.conditions.ready = Some(ConditionStatus::False);
    c.options.scale_down_unready_enabled = false;
    let plan = c.plan_twice(60 * MINUTE);
    assert!(deleted(&plan).is_empty());
    assert_eq!(
        reason_of(&plan, "a"),
        Some(UnremovableReason::ScaleDownUnreadyDisabled)
    );
}

/// docs/behaviour.md SD-63.
#[test]
fn s63_failed_simulation_is_not_retried_for_five_minutes() {
    // The pod fits nowhere else (1.7 CPUs > 1.6 free on big).
    let mut c = candidate_with(vec![web("p1", "a", 1700, GIB)]);
    let first = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(
        reason_of(&first, "a"),
        Some(UnremovableReason::NoPlaceToMovePods)
    );
    // Room appears, but the node is not simulated again until the recheck timeout passes.
    c.pods
        .iter_mut()
        .find(|p| p.name == "busy")
        .unwrap()
        .requests
        .cpu_milli = 2200;
    let soon = c.plan_at(t0() + 4 * MINUTE, &first.next_state);
    assert_eq!(
        reason_of(&soon, "a"),
        Some(UnremovableReason::RecentlyUnremovable)
    );
    let later = c.plan_at(t0() + 5 * MINUTE, &soon.next_state);
    assert!(unneeded(&later).contains(&"a"));
}

/// docs/behaviour.md SD-66.
#[test]
fn s66_cores_minimum_keeps_the_node() {
    // Two nodes of 4 and one of 2 cores: 10 cores; removing a 4-core node leaves 6 < 8.
    let mut c = candidate_with(Vec::new());
    c.node("small", None).capacity.cpu_milli = 2000;
    c.options.cores_total = ferroscale_core::options::MinMax { min: 8, max: 100 };
    let plan = c.plan_twice(11 * MINUTE);
    assert_eq!(unneeded(&plan), vec!["a"]);
    assert!(deleted(&plan).is_empty());
    assert_eq!(
        reason_of(&plan, "a"),
        Some(UnremovableReason::MinimalResourceLimitExceeded)
    );
    // The provider's limits replace the flags.
    c.limits = Some(ResourceLimits {
        min: vec![("cpu".into(), 6)],
        max: Vec::new(),
    });
    assert_eq!(deleted(&c.plan_twice(11 * MINUTE)), vec!["a"]);
}

// --- Drainability --------------------------------------------------------------------

fn bare(name: &str, node: &str) -> Pod {
    let mut p = Pod::new("default", name);
    p.node_name = Some(node.into());
    p.requests = Resources::new(500, GIB);
    p.phase = PodPhase::Running;
    p
}

/// docs/behaviour.md SD-67.
#[test]
fn s67_pod_without_owner_blocks_unless_safe_to_evict() {
    let c = candidate_with(vec![bare("lonely", "a")]);
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(reason_of(&plan, "a"), Some(UnremovableReason::BlockedByPod));
    assert_eq!(block_of(&plan, "a"), Some(DrainBlock::NotReplicated));
    let blocked = plan.unremovable.iter().find(|u| u.node == "a").unwrap();
    assert_eq!(blocked.blocking_pod.as_ref().unwrap().pod, "default/lonely");
    let mut p = bare("lonely", "a");
    p.annotations.insert(SAFE_TO_EVICT.into(), "true".into());
    let c = candidate_with(vec![p]);
    assert_eq!(
        unneeded(&c.plan_at(t0(), &ScaleDownState::new())),
        vec!["a"]
    );
}

/// docs/behaviour.md SD-68.
#[test]
fn s68_safe_to_evict_false_blocks() {
    let mut p = web("p", "a", 500, GIB);
    p.annotations.insert(SAFE_TO_EVICT.into(), "false".into());
    let plan = candidate_with(vec![p]).plan_at(t0(), &ScaleDownState::new());
    assert_eq!(
        block_of(&plan, "a"),
        Some(DrainBlock::NotSafeToEvictAnnotation)
    );
}

fn kube_system_pod(created: Timestamp) -> Pod {
    let mut p = owned("dns", "a", "ReplicaSet", "coredns", 500, GIB);
    p.namespace = "kube-system".into();
    p.creation_time = created;
    p
}

fn pdb(namespace: &str, app: &str, allowed: i32) -> PodDisruptionBudget {
    PodDisruptionBudget {
        namespace: namespace.into(),
        name: format!("{app}-pdb"),
        uid: format!("uid-{app}-pdb"),
        selector: Some(LabelSelector::from_labels([("app", app)])),
        min_available: Some(IntOrPercent::Int(1)),
        max_unavailable: None,
        disruptions_allowed: Some(allowed),
    }
}

/// docs/behaviour.md SD-69.
#[test]
fn s69_young_kube_system_pod_without_pdb_blocks() {
    let young = kube_system_pod(t0() - 30 * MINUTE);
    let mut c = candidate_with(vec![young.clone()]);
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(
        block_of(&plan, "a"),
        Some(DrainBlock::UnmovableKubeSystemPod)
    );
    c.pdbs.push(pdb("kube-system", "coredns", 1));
    assert_eq!(
        unneeded(&c.plan_at(t0(), &ScaleDownState::new())),
        vec!["a"]
    );
    // Older than the one-hour timeout: no PDB needed.
    let old = candidate_with(vec![kube_system_pod(t0() - 61 * MINUTE)]);
    assert_eq!(
        unneeded(&old.plan_at(t0(), &ScaleDownState::new())),
        vec!["a"]
    );
}

/// docs/behaviour.md SD-70.
#[test]
fn s70_system_pods_do_not_block_when_the_check_is_off() {
    let mut c = candidate_with(vec![kube_system_pod(t0())]);
    c.options.skip_nodes_with_system_pods = false;
    assert_eq!(
        unneeded(&c.plan_at(t0(), &ScaleDownState::new())),
        vec!["a"]
    );
}

fn with_volume(memory_medium: bool) -> Pod {
    let mut p = web("cache", "a", 500, GIB);
    p.volumes.push(Volume {
        name: "scratch".into(),
        source: VolumeSource::EmptyDir { memory_medium },
    });
    p
}

/// docs/behaviour.md SD-71.
#[test]
fn s71_disk_empty_dir_blocks_unless_listed_safe() {
    let plan = candidate_with(vec![with_volume(false)]).plan_at(t0(), &ScaleDownState::new());
    assert_eq!(
        block_of(&plan, "a"),
        Some(DrainBlock::LocalStorageRequested)
    );
    let mut p = with_volume(false);
    p.annotations
        .insert(SAFE_TO_EVICT_LOCAL_VOLUMES.into(), "other,scratch".into());
    let plan = candidate_with(vec![p]).plan_at(t0(), &ScaleDownState::new());
    assert_eq!(unneeded(&plan), vec!["a"]);
}

/// docs/behaviour.md SD-72.
#[test]
fn s72_memory_empty_dir_does_not_block() {
    let plan = candidate_with(vec![with_volume(true)]).plan_at(t0(), &ScaleDownState::new());
    assert_eq!(unneeded(&plan), vec!["a"]);
}

/// docs/behaviour.md SD-73.
#[test]
fn s73_pdb_without_disruptions_blocks() {
    let mut c = candidate_with(vec![web("p", "a", 500, GIB)]);
    c.pdbs.push(pdb("default", "web", 0));
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(block_of(&plan, "a"), Some(DrainBlock::NotEnoughPdb));
}

/// docs/behaviour.md SD-74.
#[test]
fn s74_pdb_budget_is_consumed_across_nodes_in_one_loop() {
    let mut c = Cluster::new();
    c.group("g", 0, 3);
    c.node("a", Some("g"));
    c.node("b", Some("g"));
    c.node("big", Some("g"));
    c.add(web("busy", "big", 2100, GIB));
    c.add(web("pa", "a", 500, GIB));
    c.add(web("pb", "b", 500, GIB));
    c.pdbs.push(pdb("default", "web", 1));
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(unneeded(&plan), vec!["a"]);
    assert_eq!(block_of(&plan, "b"), Some(DrainBlock::NotEnoughPdb));
}

/// docs/behaviour.md SD-75.
#[test]
fn s75_custom_controller_pods_block_unless_allowed() {
    let mut c = candidate_with(vec![owned("x", "a", "CloneSet", "x", 500, GIB)]);
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(block_of(&plan, "a"), Some(DrainBlock::NotReplicated));
    c.options.skip_nodes_with_custom_controller_pods = false;
    assert_eq!(
        unneeded(&c.plan_at(t0(), &ScaleDownState::new())),
        vec!["a"]
    );
}

/// docs/behaviour.md SD-76.
#[test]
fn s76_pod_of_a_missing_replicaset_blocks() {
    let mut c = candidate_with(vec![web("p", "a", 500, GIB)]);
    // Only an unrelated ReplicaSet exists.
    let mut others = ControllerIndex::new();
    others.insert(
        "ReplicaSet",
        "default",
        "other",
        ControllerReplicas::default(),
    );
    c.controllers = Some(others);
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(block_of(&plan, "a"), Some(DrainBlock::ControllerNotFound));
    let mut web_exists = ControllerIndex::new();
    web_exists.insert(
        "ReplicaSet",
        "default",
        "web",
        ControllerReplicas {
            desired: 2,
            current: 2,
        },
    );
    c.controllers = Some(web_exists.clone());
    assert_eq!(
        unneeded(&c.plan_at(t0(), &ScaleDownState::new())),
        vec!["a"]
    );
    // Fewer replicas than --min-replica-count: MinReplicasReached.
    c.options.min_replica_count = 3;
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(block_of(&plan, "a"), Some(DrainBlock::MinReplicasReached));
}

/// docs/behaviour.md SD-77.
#[test]
fn s77_succeeded_ownerless_pod_does_not_block() {
    let mut p = bare("done", "a");
    p.phase = PodPhase::Succeeded;
    p.restart_policy = RestartPolicy::Never;
    let plan = candidate_with(vec![p]).plan_at(t0(), &ScaleDownState::new());
    assert_eq!(unneeded(&plan), vec!["a"]);
}

/// docs/behaviour.md SD-78.
#[test]
fn s78_on_completion_pod_keeps_the_node_until_it_finishes() {
    let mut p = web("job", "a", 500, GIB);
    p.annotations
        .insert(SAFE_TO_EVICT.into(), "on-completion".into());
    let mut c = candidate_with(vec![p]);
    let plan = c.plan_twice(11 * MINUTE);
    assert!(deleted(&plan).is_empty());
    assert_eq!(
        reason_of(&plan, "a"),
        Some(UnremovableReason::BlockedByOnCompletionPod)
    );
    // Finished: a terminal pod no longer keeps it.
    c.pods[1].phase = PodPhase::Failed;
    assert_eq!(deleted(&c.plan_twice(11 * MINUTE)), vec!["a"]);
}

/// docs/behaviour.md SD-79.
#[test]
fn s79_pod_with_no_other_place_keeps_the_node() {
    let plan =
        candidate_with(vec![web("huge", "a", 2000, GIB)]).plan_at(t0(), &ScaleDownState::new());
    assert_eq!(
        reason_of(&plan, "a"),
        Some(UnremovableReason::NoPlaceToMovePods)
    );
    let u = plan.unremovable.iter().find(|u| u.node == "a").unwrap();
    assert_eq!(u.pod.as_deref(), Some("default/huge"));
}

/// docs/behaviour.md SD-80.
#[test]
fn s80_shared_destination_is_used_by_one_removal_only() {
    let mut c = Cluster::new();
    c.group("g", 0, 3);
    c.node("a", Some("g"));
    c.node("b", Some("g"));
    c.node("x", Some("g"));
    // x has room for 1.6 CPUs: one of the 1-CPU pods.
    c.add(web("busy", "x", 2400, GIB));
    c.add(web("pa", "a", 1000, GIB));
    c.add(web("pb", "b", 1000, GIB));
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(unneeded(&plan).len(), 1);
    let other = if unneeded(&plan) == vec!["a"] {
        "b"
    } else {
        "a"
    };
    assert_eq!(
        reason_of(&plan, other),
        Some(UnremovableReason::NoPlaceToMovePods)
    );
}

// --- Actuation (decide-level parts) ------------------------------------------------------

/// `n` empty nodes in group `g` (min 0) plus one busy node.
fn empty_nodes(n: usize) -> Cluster {
    let mut c = Cluster::new();
    c.group("g", 0, n + 1);
    for i in 0..n {
        c.node(&format!("e{i:02}"), Some("g"));
    }
    c.node("busy", Some("g"));
    c.add(web("busy", "busy", 3000, GIB));
    c
}

/// docs/behaviour.md SD-81.
#[test]
fn s81_empty_node_unneeded_long_enough_is_deleted_without_evictions() {
    let mut c = empty_nodes(1);
    c.add(daemonset_pod("ds-e00", "e00", 100));
    let plan = c.plan_twice(11 * MINUTE);
    assert_eq!(deleted(&plan), vec!["e00"]);
    let removal = &plan.empty_to_delete[0];
    assert!(removal.pods_to_evict.is_empty() && removal.moves.is_empty());
    assert_eq!(removal.group_id, "g");
}

/// docs/behaviour.md SD-82.
#[test]
fn s82_at_most_ten_empty_nodes_per_loop() {
    let c = empty_nodes(15);
    let plan = c.plan_twice(11 * MINUTE);
    assert_eq!(unneeded(&plan).len(), 15);
    assert_eq!(plan.empty_to_delete.len(), 10);
    assert!(plan.drain_to_delete.is_empty());
}

/// docs/behaviour.md SD-83.
#[test]
fn s83_one_drain_at_a_time() {
    let mut c = Cluster::new();
    c.group("g", 0, 4);
    for name in ["a", "b", "c"] {
        c.node(name, Some("g"));
        c.add(web(&format!("p-{name}"), name, 500, GIB));
    }
    c.node("big", Some("g"));
    c.add(web("busy", "big", 2100, GIB));
    let plan = c.plan_twice(11 * MINUTE);
    assert_eq!(unneeded(&plan).len(), 3);
    assert_eq!(plan.drain_to_delete.len(), 1);
    // With a drain already running, none starts.
    c.deletions
        .nodes
        .push(ferroscale_core::scale_down::DeletionInProgress {
            node: "elsewhere".into(),
            group_id: "g".into(),
            drain: true,
        });
    let plan = c.plan_twice(11 * MINUTE);
    assert!(plan.drain_to_delete.is_empty());
    assert_eq!(plan.status, ScaleDownStatus::InProgress);
}

/// docs/behaviour.md SD-86.
#[test]
fn s86_daemonset_pods_are_evicted_from_drained_nodes_only() {
    let mut c = candidate_with(vec![
        daemonset_pod("ds-a", "a", 100),
        web("p", "a", 500, GIB),
    ]);
    c.node("e", Some("g"));
    c.groups[0].target_size = 3;
    c.add(daemonset_pod("ds-e", "e", 100));
    let plan = c.plan_twice(11 * MINUTE);
    let drained = &plan.drain_to_delete[0];
    assert_eq!(drained.node, "a");
    assert_eq!(drained.daemonset_pods_to_evict.len(), 1);
    assert_eq!(
        drained.pods_to_evict.len(),
        1,
        "the DaemonSet pod is listed apart"
    );
    let empty = &plan.empty_to_delete[0];
    assert_eq!(empty.node, "e");
    assert!(empty.daemonset_pods_to_evict.is_empty());
    c.options.daemonset_eviction_for_empty_nodes = true;
    let plan = c.plan_twice(11 * MINUTE);
    assert_eq!(plan.empty_to_delete[0].daemonset_pods_to_evict.len(), 1);
}

/// docs/behaviour.md SD-87.
#[test]
fn s87_daemonset_pod_can_opt_out_of_eviction() {
    let mut ds = daemonset_pod("ds-a", "a", 100);
    ds.annotations
        .insert(ENABLE_DS_EVICTION_ANNOTATION.into(), "false".into());
    let mut annotated = daemonset_pod("ds-b", "a", 100);
    annotated
        .annotations
        .insert(DAEMONSET_POD.into(), "true".into());
    let c = candidate_with(vec![ds, annotated, web("p", "a", 500, GIB)]);
    let plan = c.plan_twice(11 * MINUTE);
    let names: Vec<&str> = plan.drain_to_delete[0]
        .daemonset_pods_to_evict
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, vec!["ds-b"]);
}

/// docs/behaviour.md SD-90.
#[test]
fn s90_soft_taints_are_capped_and_removed_from_needed_nodes() {
    let mut c = empty_nodes(15);
    // `busy` carries a stale soft taint: it is not unneeded.
    c.nodes[15].0.taints.push(Taint::new(
        DELETION_CANDIDATE,
        "1",
        TaintEffect::PreferNoSchedule,
    ));
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(plan.soft_taints_to_remove, vec!["busy"]);
    assert_eq!(plan.soft_taints_to_add.len(), 9, "10 updates in total");
    c.options.max_bulk_soft_taint_count = 0;
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert!(plan.soft_taints_to_add.is_empty() && plan.soft_taints_to_remove.is_empty());
}

/// docs/behaviour.md SD-92.
#[test]
fn s92_failed_deletion_delays_then_node_is_evaluated_again() {
    let c = empty_nodes(1);
    let first = c.plan_at(t0(), &ScaleDownState::new());
    let mut state = first.next_state;
    let now = t0() + 11 * MINUTE;
    state.record_failure("g", now);
    let plan = c.plan_at(now + MINUTE, &state);
    assert_eq!(plan.status, ScaleDownStatus::InCooldown);
    let plan = c.plan_at(now + 3 * MINUTE, &plan.next_state);
    assert_eq!(deleted(&plan), vec!["e00"]);
}

#[test]
fn host_port_conflict_keeps_the_node() {
    // Upstream scenario 5 in miniature: pods that cannot move because of host ports.
    let mut c = candidate_with(Vec::new());
    let port = HostPort {
        port: 8080,
        protocol: Protocol::Tcp,
        host_ip: String::new(),
    };
    let mut pa = web("pa", "a", 100, GIB);
    pa.host_ports.push(port.clone());
    let mut pb = web("pb", "big", 100, GIB);
    pb.host_ports.push(port);
    c.add(pa).add(pb);
    let plan = c.plan_at(t0(), &ScaleDownState::new());
    assert_eq!(
        reason_of(&plan, "a"),
        Some(UnremovableReason::NoPlaceToMovePods)
    );
}

/// Checks docs/behaviour.md LOOP-113.
#[test]
fn disabled_loop_and_disabled_scale_down() {
    let mut c = empty_nodes(1);
    let first = c.plan_at(t0(), &ScaleDownState::new());
    let plan = c.plan_with(t0() + 11 * MINUTE, &first.next_state, true);
    assert_eq!(plan.status, ScaleDownStatus::InCooldown);
    assert_eq!(unneeded(&plan), vec!["e00"]);
    c.options.scale_down_enabled = false;
    let plan = c.plan_at(t0() + 11 * MINUTE, &first.next_state);
    assert_eq!(plan.status, ScaleDownStatus::NotTried);
    assert!(deleted(&plan).is_empty());
}
