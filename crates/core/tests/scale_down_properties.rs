//! Safety properties of the scale-down plan over random small clusters:
//!
//! * every pod that a planned removal must move has a final destination that is not removed, and
//!   no destination ends up over its allocatable (the plan is re-applied to the original cluster);
//! * no group goes below its min size;
//! * a node carrying a pod that blocks by the drainability rules is never planned;
//! * PodDisruptionBudgets: pods of one PDB evicted across the batch stay within its allowed
//!   disruptions unless the batch contains a node the plan itself flags as risky (its own pods
//!   exceed the budget together; upstream still deletes it, last, relying on eviction retries);
//! * expendable pods never block: adding expendable pods with every blocking trait changes nothing.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ferroscale_core::options::AutoscalingOptions;
use ferroscale_core::parallel::Workers;
use ferroscale_core::scale_down::{
    ControllerIndex, DeletionsInProgress, ScaleDownInput, ScaleDownPlan, ScaleDownState,
    plan_scale_down,
};
use ferroscale_core::scale_up::{NodeGroupView, ProviderFacts};
use ferroscale_model::pod::SAFE_TO_EVICT;
use ferroscale_model::{
    IntOrPercent, LabelSelector, Node, OwnerRef, Pod, PodDisruptionBudget, PodPhase, Resources,
    Timestamp, Volume, VolumeSource,
};
use ferroscale_scheduling::Snapshot;
use proptest::prelude::*;

const GIB: i64 = 1 << 30;
const CUTOFF: i32 = -10;

fn now() -> Timestamp {
    Timestamp::from_secs(1_000_000)
}

#[derive(Debug, Clone)]
struct PodSpec {
    cpu: i64,
    /// 0–2 ReplicaSet, 3 no owner, 4 custom controller, 5 DaemonSet.
    kind: u8,
    /// 0 none, 1 "true", 2 "false".
    safe: u8,
    priority: i32,
    kube_system: bool,
    empty_dir: bool,
    app: u8,
}

#[derive(Debug, Clone)]
struct NodeSpec {
    group: usize,
    cpu: i64,
    pods: Vec<PodSpec>,
}

#[derive(Debug, Clone)]
struct ClusterSpec {
    nodes: Vec<NodeSpec>,
    group_mins: [usize; 2],
    pdb_allowed: Vec<(u8, i32)>,
    max_drain: usize,
    max_parallel: usize,
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        100i64..1500,
        prop_oneof![6 => 0u8..3, 1 => 3u8..6],
        prop_oneof![6 => Just(0u8), 1 => 1u8..3],
        prop_oneof![3 => Just(0i32), 1 => -20i32..5],
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        0u8..3,
    )
        .prop_map(
            |(cpu, kind, safe, priority, kube_system, empty_dir, app)| PodSpec {
                cpu,
                kind,
                safe,
                priority,
                kube_system,
                empty_dir,
                app,
            },
        )
}

fn cluster_spec() -> impl Strategy<Value = ClusterSpec> {
    (
        prop::collection::vec(
            (
                0usize..2,
                2000i64..6000,
                prop::collection::vec(pod_spec(), 0..5),
            )
                .prop_map(|(group, cpu, pods)| NodeSpec { group, cpu, pods }),
            2..7,
        ),
        (0usize..3, 0usize..3),
        prop::collection::vec((0u8..3, 0i32..3), 0..3),
        1usize..3,
        1usize..6,
    )
        .prop_map(
            |(nodes, (m0, m1), pdb_allowed, max_drain, max_parallel)| ClusterSpec {
                nodes,
                group_mins: [m0, m1],
                pdb_allowed,
                max_drain,
                max_parallel,
            },
        )
}

fn build_pod(spec: &PodSpec, name: String, node: &str) -> Pod {
    let mut p = Pod::new(
        if spec.kube_system {
            "kube-system"
        } else {
            "default"
        },
        name,
    );
    let app = format!("app{}", spec.app);
    p.labels.insert("app".into(), app.clone());
    let owner = |kind: &str, api: &str| OwnerRef {
        api_version: api.into(),
        kind: kind.into(),
        name: app.clone(),
        uid: format!("uid-{app}-{kind}"),
        controller: true,
    };
    match spec.kind {
        0..=2 => p.owner_references.push(owner("ReplicaSet", "apps/v1")),
        4 => p
            .owner_references
            .push(owner("CloneSet", "apps.kruise.io/v1")),
        5 => p.owner_references.push(owner("DaemonSet", "apps/v1")),
        _ => {}
    }
    match spec.safe {
        1 => {
            p.annotations.insert(SAFE_TO_EVICT.into(), "true".into());
        }
        2 => {
            p.annotations.insert(SAFE_TO_EVICT.into(), "false".into());
        }
        _ => {}
    }
    if spec.priority != 0 {
        p.priority = Some(spec.priority);
    }
    if spec.empty_dir {
        p.volumes.push(Volume {
            name: "scratch".into(),
            source: VolumeSource::EmptyDir {
                memory_medium: false,
            },
        });
    }
    p.requests = Resources::new(spec.cpu, GIB / 4);
    p.node_name = Some(node.into());
    p.phase = PodPhase::Running;
    p.creation_time = now() - Duration::from_secs(60);
    p
}

/// The cluster as built: nodes with their pods (pods that do not fit their node are dropped).
struct Built {
    nodes: Vec<(Node, usize, Vec<Pod>)>,
    groups: Vec<NodeGroupView>,
    pdbs: Vec<PodDisruptionBudget>,
    options: AutoscalingOptions,
}

fn build(spec: &ClusterSpec) -> Built {
    let mut nodes = Vec::new();
    let mut per_group = [0usize; 2];
    for (i, n) in spec.nodes.iter().enumerate() {
        let name = format!("n{i}");
        let mut node = Node::new(name.clone(), Resources::new(n.cpu, 16 * GIB));
        node.allocatable.pods = 110;
        let mut used = 0;
        let mut pods = Vec::new();
        for (j, p) in n.pods.iter().enumerate() {
            if used + p.cpu <= n.cpu {
                used += p.cpu;
                pods.push(build_pod(p, format!("p{i}-{j}"), &name));
            }
        }
        node.capacity = node.allocatable.clone();
        per_group[n.group] += 1;
        nodes.push((node, n.group, pods));
    }
    let groups = (0..2)
        .map(|g| NodeGroupView::new(format!("g{g}"), spec.group_mins[g], 100, per_group[g], None))
        .collect();
    let pdbs = spec
        .pdb_allowed
        .iter()
        .map(|(app, allowed)| PodDisruptionBudget {
            namespace: "default".into(),
            name: format!("pdb-app{app}"),
            uid: format!("uid-pdb-app{app}"),
            selector: Some(LabelSelector::from_labels([("app", format!("app{app}"))])),
            min_available: Some(IntOrPercent::Int(1)),
            max_unavailable: None,
            disruptions_allowed: Some(*allowed),
        })
        .collect();
    let options = AutoscalingOptions {
        max_drain_parallelism: spec.max_drain,
        max_scale_down_parallelism: spec.max_parallel,
        ..AutoscalingOptions::default()
    };
    Built {
        nodes,
        groups,
        pdbs,
        options,
    }
}

fn snapshot_of(built: &Built, extra: &[Pod]) -> Snapshot {
    let mut snapshot = Snapshot::new();
    for (node, _, pods) in &built.nodes {
        let id = snapshot.add_node(Arc::new(node.clone()));
        for p in pods {
            snapshot.add_pod(id, Arc::new(p.clone()));
        }
    }
    for p in extra {
        if let Some(id) = p.node_name.as_deref().and_then(|n| snapshot.node_id(n)) {
            snapshot.add_pod(id, Arc::new(p.clone()));
        }
    }
    snapshot
}

/// Plans with every node unneeded for an hour already, so deletions are possible.
fn plan(built: &Built, extra: &[Pod]) -> ScaleDownPlan {
    plan_on(built, extra, &Workers::sequential())
}

/// [`plan`] on `workers`' threads.
fn plan_on(built: &Built, extra: &[Pod], workers: &Workers) -> ScaleDownPlan {
    let mut snapshot = snapshot_of(built, extra);
    let group_index: HashMap<String, usize> = built
        .nodes
        .iter()
        .map(|(n, g, _)| (n.name.clone(), *g))
        .collect();
    let group_of = |node: &Node| group_index.get(node.name.as_str()).copied();
    let mut controllers = ControllerIndex::new();
    controllers.assume_owners_of(built.nodes.iter().flat_map(|(_, _, pods)| pods));
    let mut state = ScaleDownState::new();
    for (n, _, _) in &built.nodes {
        state
            .unneeded_since
            .insert(n.name.clone(), now() - Duration::from_secs(3600));
    }
    plan_scale_down(ScaleDownInput {
        now: now(),
        snapshot: &mut snapshot,
        node_groups: &built.groups,
        node_group_of: &group_of,
        pdbs: &built.pdbs,
        controllers: &controllers,
        deletions_in_progress: &DeletionsInProgress::default(),
        state: &state,
        options: &built.options,
        provider: &ProviderFacts::default(),
        scale_down_disabled_this_loop: false,
        workers,
        measure_memo: None,
    })
}

/// Pods that must find a new home when their node goes: all but DaemonSet, mirror and expendable
/// pods (the generator makes no mirror or terminating pods).
fn needs_move(p: &Pod) -> bool {
    !p.is_daemonset_pod() && !p.is_expendable(CUTOFF)
}

/// An independent reading of the drainability table for the traits the generator produces,
/// with PDBs at their initial budgets (consumption across the loop only adds blocks).
fn blocks(p: &Pod, pdbs: &[PodDisruptionBudget]) -> bool {
    if p.is_expendable(CUTOFF) || p.is_daemonset_pod() {
        return false;
    }
    let safe = p.annotations.get(SAFE_TO_EVICT).map(String::as_str);
    if safe == Some("true") {
        return false;
    }
    let covering: Vec<&PodDisruptionBudget> = pdbs.iter().filter(|b| b.covers(p)).collect();
    let custom = p.controller().is_none_or(|o| o.kind != "ReplicaSet");
    custom
        || (p.namespace == "kube-system" && covering.is_empty())
        || safe == Some("false")
        || !p.volumes.is_empty()
        || covering
            .iter()
            .any(|b| b.disruptions_allowed.unwrap_or(0) < 1)
}

fn check_plan(built: &Built, plan: &ScaleDownPlan) -> Result<(), TestCaseError> {
    let removed: HashSet<&str> = plan.nodes_to_delete().map(|r| r.node.as_str()).collect();
    let pods_of: HashMap<&str, &Vec<Pod>> = built
        .nodes
        .iter()
        .map(|(n, _, pods)| (n.name.as_str(), pods))
        .collect();

    // Blocking pods never go with a planned node.
    for name in &removed {
        for p in pods_of[name].iter() {
            prop_assert!(
                !blocks(p, &built.pdbs),
                "{name} planned although {} blocks",
                p.key()
            );
        }
    }

    // Min sizes hold.
    for (g, group) in built.groups.iter().enumerate() {
        let gone = removed
            .iter()
            .filter(|n| {
                built
                    .nodes
                    .iter()
                    .any(|(x, xg, _)| x.name == **n && *xg == g)
            })
            .count();
        prop_assert!(
            group.target_size - gone >= group.min_size || gone == 0,
            "group {} below min",
            group.id
        );
    }

    // Every pod that must move has a final destination that stays, and no destination
    // overflows. The final destination of a pod is the one of the latest removal, in simulation
    // order, that moved it (a pod may be moved onto a node that is itself removed later).
    let rank: HashMap<&str, usize> = plan
        .unneeded
        .iter()
        .enumerate()
        .map(|(i, u)| (u.node.as_str(), i))
        .collect();
    let mut removals: Vec<_> = plan.nodes_to_delete().collect();
    removals.sort_by_key(|r| rank.get(r.node.as_str()).copied().unwrap_or(usize::MAX));
    let mut final_destination: HashMap<&str, &str> = HashMap::new();
    for r in &removals {
        for m in &r.moves {
            final_destination.insert(m.pod.uid.as_str(), m.destination.as_str());
        }
    }
    let mut load: HashMap<&str, i64> = HashMap::new();
    let mut count: HashMap<&str, i64> = HashMap::new();
    for (n, _, pods) in &built.nodes {
        if !removed.contains(n.name.as_str()) {
            load.insert(&n.name, pods.iter().map(|p| p.requests.cpu_milli).sum());
            count.insert(&n.name, pods.len() as i64);
        }
    }
    for name in &removed {
        for p in pods_of[name].iter().filter(|p| needs_move(p)) {
            let destination = final_destination.get(p.uid.as_str()).copied();
            prop_assert!(destination.is_some(), "{} has no destination", p.key());
            let destination = destination.unwrap_or_default();
            prop_assert!(
                !removed.contains(destination),
                "{} moved to removed node {destination}",
                p.key()
            );
            *load.entry(destination).or_default() += p.requests.cpu_milli;
            *count.entry(destination).or_default() += 1;
        }
    }
    for (n, _, _) in &built.nodes {
        if let Some(l) = load.get(n.name.as_str()) {
            prop_assert!(*l <= n.allocatable.cpu_milli, "{} overflows", n.name);
        }
    }

    // PDBs: within budget unless a risky node is planned.
    let risky_planned = plan
        .unneeded
        .iter()
        .any(|u| u.risky && removed.contains(u.node.as_str()));
    for pdb in &built.pdbs {
        let evicted = removed
            .iter()
            .flat_map(|n| pods_of[n].iter())
            .filter(|p| needs_move(p) && pdb.covers(p))
            .count() as i32;
        prop_assert!(
            evicted <= pdb.disruptions_allowed.unwrap_or(0).max(0) || risky_planned,
            "{} exceeded: {evicted} evictions",
            pdb.name
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Checks docs/behaviour.md SD-104.
    #[test]
    fn planned_removals_are_safe(spec in cluster_spec()) {
        let built = build(&spec);
        let plan = plan(&built, &[]);
        check_plan(&built, &plan)?;
    }

    /// Checks docs/behaviour.md SU-112: the plan is the same on one thread and on four, with
    /// PDBs, blocking pods, priorities and min sizes in the mix.
    #[test]
    fn plans_are_the_same_on_every_thread_count(spec in cluster_spec()) {
        let built = build(&spec);
        let sequential = plan(&built, &[]);
        let four = Workers::new(4).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(plan_on(&built, &[], &four), sequential);
    }

    #[test]
    fn expendable_pods_never_block(spec in cluster_spec()) {
        let built = build(&spec);
        let before = plan(&built, &[]);
        // On every node, an expendable pod with every blocking trait and no requests.
        let extra: Vec<Pod> = built
            .nodes
            .iter()
            .map(|(n, _, _)| {
                let mut p = build_pod(
                    &PodSpec {
                        cpu: 0,
                        kind: 3,
                        safe: 2,
                        priority: CUTOFF - 1,
                        kube_system: true,
                        empty_dir: true,
                        app: 0,
                    },
                    format!("expendable-{}", n.name),
                    &n.name,
                );
                p.requests = Resources::default();
                p
            })
            .collect();
        let after = plan(&built, &extra);
        let names = |p: &ScaleDownPlan| {
            p.unneeded.iter().map(|u| u.node.clone()).collect::<Vec<_>>()
        };
        prop_assert_eq!(names(&before), names(&after));
        let deleted = |p: &ScaleDownPlan| {
            p.nodes_to_delete().map(|r| r.node.clone()).collect::<Vec<_>>()
        };
        prop_assert_eq!(deleted(&before), deleted(&after));
    }
}
