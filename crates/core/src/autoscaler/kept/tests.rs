//! The kept snapshot equals one built from scratch: random sequences of cluster changes (nodes
//! and pods that come, go and change, in any position of the gathered lists), each followed by
//! a loop that opens the view, compares it with [`build_snapshot`] of the same objects, works on
//! it and drops it.

use std::collections::HashSet;
use std::sync::Arc;

use ferroscale_model::labels::{HOSTNAME, ZONE};
use ferroscale_model::{
    CompactString, LabelSelector, Labels, Namespace, Node, NodeInclusionPolicy, OwnerRef, Pod,
    PodAffinityTerm, PodPhase, Resources, Taint, TaintEffect, Timestamp, TopologySpreadConstraint,
    UnsatisfiableAction,
};
use ferroscale_scheduling::{NodeId, Snapshot, check, find_node};
use proptest::prelude::*;

use super::*;
use crate::autoscaler::snapshot::{SnapshotInput, build_snapshot};
use crate::cloud::NodeTemplate;
use crate::cluster_state::{GroupState, ReadinessCounts};

#[derive(Debug, Clone)]
struct NodeShape {
    zone: u8,
    tainted: bool,
    cordoned: bool,
    large: bool,
}

#[derive(Debug, Clone)]
enum Bound {
    /// Bound to the n-th node of the list (when there is one).
    Node(u8),
    /// Bound to a node name the cluster does not have (yet).
    Missing(u8),
    Pending,
}

#[derive(Debug, Clone)]
struct PodShape {
    app: u8,
    bound: Bound,
    priority: Option<i8>,
    anti_affinity: bool,
    daemonset: bool,
    other_scheduler: bool,
    cpu: u16,
}

#[derive(Debug, Clone)]
enum PodChange {
    Bind(u8),
    Unbind,
    Terminal,
    Deleting,
    Priority(Option<i8>),
    Requests(u16),
    /// A new object equal to the old one (a status change the model does not keep).
    Touch,
}

#[derive(Debug, Clone)]
enum Op {
    /// A node at the end of the list (`None`) or at a position.
    AddNode(NodeShape, Option<u8>),
    RemoveNode(u8),
    ReplaceNode(u8, NodeShape),
    TouchNode(u8),
    /// A pod at a position of the list.
    AddPod(PodShape, u8),
    RemovePod(u8),
    ChangePod(u8, PodChange),
    Namespace(u8),
    /// A node re-registers under the name of one that went.
    RecreateNode(u8, NodeShape),
}

/// Per loop: which nodes are still-starting upcoming ones, which drain, how many placeholders,
/// and what the loop does to its view before dropping it.
#[derive(Debug, Clone)]
struct LoopShape {
    registered_upcoming: Vec<u8>,
    draining: Vec<u8>,
    upcoming: u8,
    work: Vec<(u8, u8)>,
}

fn node_shape() -> impl Strategy<Value = NodeShape> {
    (
        0u8..3,
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.1),
        any::<bool>(),
    )
        .prop_map(|(zone, tainted, cordoned, large)| NodeShape {
            zone,
            tainted,
            cordoned,
            large,
        })
}

fn bound() -> impl Strategy<Value = Bound> {
    prop_oneof![
        6 => any::<u8>().prop_map(Bound::Node),
        1 => (0u8..4).prop_map(Bound::Missing),
        3 => Just(Bound::Pending),
    ]
}

fn pod_shape() -> impl Strategy<Value = PodShape> {
    (
        0u8..3,
        bound(),
        prop::option::of(-20i8..20),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        100u16..3000,
    )
        .prop_map(
            |(app, bound, priority, anti_affinity, daemonset, other_scheduler, cpu)| PodShape {
                app,
                bound,
                priority,
                anti_affinity,
                daemonset,
                other_scheduler,
                cpu,
            },
        )
}

fn pod_change() -> impl Strategy<Value = PodChange> {
    prop_oneof![
        3 => any::<u8>().prop_map(PodChange::Bind),
        1 => Just(PodChange::Unbind),
        1 => Just(PodChange::Terminal),
        1 => Just(PodChange::Deleting),
        1 => prop::option::of(-20i8..20).prop_map(PodChange::Priority),
        1 => (100u16..3000).prop_map(PodChange::Requests),
        2 => Just(PodChange::Touch),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (node_shape(), prop::option::weighted(0.2, any::<u8>()))
            .prop_map(|(s, at)| Op::AddNode(s, at)),
        1 => any::<u8>().prop_map(Op::RemoveNode),
        1 => (any::<u8>(), node_shape()).prop_map(|(i, s)| Op::ReplaceNode(i, s)),
        1 => any::<u8>().prop_map(Op::TouchNode),
        10 => (pod_shape(), any::<u8>()).prop_map(|(s, at)| Op::AddPod(s, at)),
        3 => any::<u8>().prop_map(Op::RemovePod),
        5 => (any::<u8>(), pod_change()).prop_map(|(i, c)| Op::ChangePod(i, c)),
        1 => (0u8..3).prop_map(Op::Namespace),
        1 => (0u8..4, node_shape()).prop_map(|(i, s)| Op::RecreateNode(i, s)),
    ]
}

fn loop_shape() -> impl Strategy<Value = LoopShape> {
    (
        prop::collection::vec(any::<u8>(), 0..2),
        prop::collection::vec(any::<u8>(), 0..2),
        0u8..3,
        prop::collection::vec((any::<u8>(), any::<u8>()), 0..4),
    )
        .prop_map(
            |(registered_upcoming, draining, upcoming, work)| LoopShape {
                registered_upcoming,
                draining,
                upcoming,
                work,
            },
        )
}

/// The cluster the changes apply to, with gathered lists in the order a source keeps them.
struct Cluster {
    objects: ClusterObjects,
    serial: usize,
}

fn make_node(name: String, shape: &NodeShape) -> Arc<Node> {
    let cpu = if shape.large { 16_000 } else { 4_000 };
    let mut allocatable = Resources::new(cpu, 32 << 30);
    allocatable.pods = 110;
    let mut node = Node::new(name, allocatable);
    node.labels.insert(ZONE.into(), format!("z{}", shape.zone));
    if shape.tainted {
        node.taints
            .push(Taint::new("dedicated", "x", TaintEffect::NoSchedule));
    }
    node.unschedulable = shape.cordoned;
    Arc::new(node)
}

fn app_term(app: u8, key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(LabelSelector::from_labels([(
            "app".to_string(),
            format!("a{app}"),
        )])),
        topology_key: key.to_string(),
        ..PodAffinityTerm::default()
    }
}

impl Cluster {
    fn pick_node(&self, i: u8) -> Option<CompactString> {
        let nodes = &self.objects.nodes;
        (!nodes.is_empty()).then(|| nodes[i as usize % nodes.len()].name.as_str().into())
    }

    fn make_pod(&mut self, shape: &PodShape) -> Arc<Pod> {
        self.serial += 1;
        let namespace = format!("ns{}", shape.app % 2);
        let mut pod = Pod::new(namespace, format!("p{}", self.serial));
        pod.labels
            .insert("app".to_string(), format!("a{}", shape.app));
        pod.priority = shape.priority.map(i32::from);
        pod.requests = Resources::new(i64::from(shape.cpu), 1 << 30);
        pod.phase = PodPhase::Running;
        if shape.anti_affinity {
            pod.pod_anti_affinity.push(app_term(shape.app, HOSTNAME));
        }
        if shape.daemonset {
            pod.owner_references.push(OwnerRef {
                kind: "DaemonSet".into(),
                name: "ds".into(),
                uid: "ds".into(),
                controller: true,
                api_version: "apps/v1".into(),
            });
        } else {
            pod.owner_references.push(OwnerRef {
                kind: "ReplicaSet".into(),
                name: format!("rs-{}", shape.app),
                uid: format!("rs-{}", shape.app),
                controller: true,
                api_version: "apps/v1".into(),
            });
        }
        if shape.other_scheduler {
            pod.scheduler_name = "other".into();
        }
        pod.node_name = match shape.bound {
            Bound::Node(i) => self.pick_node(i),
            Bound::Missing(i) => Some(ferroscale_model::format_compact!("late-{i}")),
            Bound::Pending => None,
        };
        if pod.node_name.is_none() {
            pod.phase = PodPhase::Pending;
        }
        Arc::new(pod)
    }

    fn apply(&mut self, op: &Op) {
        let nodes = &mut self.objects.nodes;
        let pods_len = self.objects.pods.len();
        match op {
            Op::AddNode(shape, at) => {
                self.serial += 1;
                let node = make_node(format!("n{}", self.serial), shape);
                let at = at.map_or(nodes.len(), |at| at as usize % (nodes.len() + 1));
                nodes.insert(at, node);
            }
            Op::RecreateNode(i, shape) => {
                let name = format!("late-{i}");
                if nodes.iter().all(|n| n.name != name) {
                    nodes.push(make_node(name, shape));
                }
            }
            Op::RemoveNode(i) if !nodes.is_empty() => {
                let at = *i as usize % nodes.len();
                nodes.remove(at);
            }
            Op::ReplaceNode(i, shape) if !nodes.is_empty() => {
                let at = *i as usize % nodes.len();
                let name = nodes[at].name.clone();
                nodes[at] = make_node(name, shape);
            }
            Op::TouchNode(i) if !nodes.is_empty() => {
                let at = *i as usize % nodes.len();
                nodes[at] = Arc::new((*nodes[at]).clone());
            }
            Op::AddPod(shape, at) => {
                let pod = self.make_pod(shape);
                let at = *at as usize % (pods_len + 1);
                Arc::make_mut(&mut self.objects.pods).insert(at, pod);
            }
            Op::RemovePod(i) if pods_len > 0 => {
                Arc::make_mut(&mut self.objects.pods).remove(*i as usize % pods_len);
            }
            Op::ChangePod(i, change) if pods_len > 0 => {
                let at = *i as usize % pods_len;
                let mut pod = (*self.objects.pods[at]).clone();
                match change {
                    PodChange::Bind(n) => {
                        pod.node_name = self.pick_node(*n);
                        pod.phase = PodPhase::Running;
                    }
                    PodChange::Unbind => pod.node_name = None,
                    PodChange::Terminal => pod.phase = PodPhase::Succeeded,
                    PodChange::Deleting => pod.deletion_time = Some(Timestamp::from_secs(5)),
                    PodChange::Priority(p) => pod.priority = p.map(i32::from),
                    PodChange::Requests(cpu) => {
                        pod.requests = Resources::new(i64::from(*cpu), 1 << 30)
                    }
                    PodChange::Touch => {}
                }
                Arc::make_mut(&mut self.objects.pods)[at] = Arc::new(pod);
            }
            Op::Namespace(k) => {
                let mut labels = Labels::new();
                labels.insert("team".to_string(), format!("t{k}"));
                self.objects.namespaces = vec![Namespace {
                    name: "ns0".into(),
                    labels,
                }];
            }
            Op::RemoveNode(_)
            | Op::ReplaceNode(..)
            | Op::TouchNode(_)
            | Op::RemovePod(_)
            | Op::ChangePod(..) => {}
        }
    }
}

fn options() -> AutoscalingOptions {
    AutoscalingOptions {
        allowed_scheduler_names: vec!["default-scheduler".to_string()],
        ..AutoscalingOptions::default()
    }
}

/// A group whose template stands in for its upcoming nodes.
fn group() -> NodeGroupView {
    let template = NodeTemplate {
        node: (*make_node(
            "template".into(),
            &NodeShape {
                zone: 1,
                tainted: false,
                cordoned: false,
                large: true,
            },
        ))
        .clone(),
        pods: Vec::new(),
        csi_node: None,
        resource_slices: Vec::new(),
    };
    NodeGroupView::new("g", 0, 100, 0, Some(template))
}

fn report(cluster: &Cluster, shape: &LoopShape) -> ClusterStateReport {
    let registered_upcoming: Vec<String> = shape
        .registered_upcoming
        .iter()
        .filter_map(|i| cluster.pick_node(*i).map(String::from))
        .collect();
    ClusterStateReport {
        groups: vec![GroupState {
            group_id: "g".into(),
            min_size: 0,
            max_size: 100,
            target_size: 0,
            counts: ReadinessCounts::default(),
            acceptable_min: 0,
            acceptable_max: 0,
            upcoming: usize::from(shape.upcoming) + registered_upcoming.len(),
            registered_upcoming,
            scaling_up: true,
            healthy: true,
        }],
        ..ClusterStateReport::default()
    }
}

/// Probe pods whose verdicts read the capacity, taint, topology and spread indexes.
fn probes() -> Vec<Pod> {
    let mut plain = Pod::new("ns0", "probe-plain");
    plain.requests = Resources::new(2_000, 1 << 30);
    let mut anti = Pod::new("ns0", "probe-anti");
    anti.labels.insert("app".into(), "a1".into());
    anti.pod_anti_affinity.push(app_term(1, HOSTNAME));
    let mut affinity = Pod::new("ns1", "probe-affinity");
    affinity.pod_affinity.push(PodAffinityTerm {
        namespace_selector: Some(LabelSelector::from_labels([(
            "team".to_string(),
            "t1".to_string(),
        )])),
        ..app_term(0, ZONE)
    });
    let mut spread = Pod::new("ns0", "probe-spread");
    spread.labels.insert("app".into(), "a2".into());
    spread.topology_spread.push(TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.into(),
        when_unsatisfiable: UnsatisfiableAction::DoNotSchedule,
        label_selector: Some(LabelSelector::from_labels([(
            "app".to_string(),
            "a2".to_string(),
        )])),
        min_domains: None,
        node_affinity_policy: NodeInclusionPolicy::Honor,
        node_taints_policy: NodeInclusionPolicy::Ignore,
    });
    vec![plain, anti, affinity, spread]
}

/// What the decide steps can observe of a loop's view.
#[derive(Debug, PartialEq)]
struct Observed {
    node_count: usize,
    pod_count: usize,
    /// Per live node in order: name, the node object, its pods (uids) in order, requests.
    nodes: Vec<(String, Node, Vec<String>, Resources)>,
    pending: Vec<String>,
    draining: Vec<(String, Option<String>)>,
    verdicts: Vec<Vec<bool>>,
    first_fit: Vec<Option<String>>,
}

fn observe(snapshot: &mut Snapshot, pending: &[Arc<Pod>], draining: &[Arc<Pod>]) -> Observed {
    let ids: Vec<NodeId> = snapshot.nodes().map(|(id, _)| id).collect();
    let nodes = snapshot
        .nodes()
        .map(|(_, info)| {
            (
                info.node.name.clone(),
                (*info.node).clone(),
                info.pods.iter().map(|p| p.uid.to_string()).collect(),
                info.requested.clone(),
            )
        })
        .collect();
    let mut verdicts = Vec::new();
    let mut first_fit = Vec::new();
    for probe in probes() {
        verdicts.push(
            ids.iter()
                .map(|id| check(snapshot, &probe, *id).is_ok())
                .collect(),
        );
        let found = find_node(snapshot, &probe, 0);
        first_fit.push(found.and_then(|id| snapshot.node(id).map(|i| i.node.name.clone())));
    }
    Observed {
        node_count: snapshot.node_count(),
        pod_count: snapshot.pod_count(),
        nodes,
        pending: pending.iter().map(|p| p.uid.to_string()).collect(),
        draining: draining
            .iter()
            .map(|p| {
                (
                    p.uid.to_string(),
                    p.node_name.as_deref().map(str::to_string),
                )
            })
            .collect(),
        verdicts,
        first_fit,
    }
}

/// One loop: the kept view and a fresh build of the same objects must look the same; then the
/// loop places pods and removes nodes on its branch, which dropping the view undoes.
fn run_loop(kept: &mut KeptSnapshot, cluster: &Cluster, shape: &LoopShape) -> SnapshotRefresh {
    let options = options();
    let report = report(cluster, shape);
    let views = vec![group()];
    let draining: HashSet<String> = shape
        .draining
        .iter()
        .filter_map(|i| cluster.pick_node(*i).map(String::from))
        .collect();
    let mut fresh = build_snapshot(SnapshotInput {
        objects: &cluster.objects,
        report: &report,
        views: &views,
        draining: &draining,
        options: &options,
    });
    let expected = observe(&mut fresh.snapshot, &fresh.pending, &fresh.draining_pods);
    let input = ViewInput {
        report: &report,
        views: &views,
        draining: &draining,
    };
    let (refresh, mut view) = kept.open(&cluster.objects, &options, input);
    let observed = observe(&mut view.snapshot, &view.pending, &view.draining_pods);
    assert_eq!(observed, expected, "after {refresh:?}");
    // Proactive scale-up's count of each controller's bound pods, followed with the snapshot.
    assert_eq!(
        view.bound_of_controllers,
        &BoundPodsOfControllers::count(&cluster.objects.pods),
        "after {refresh:?}"
    );
    // The loop's own work on its branch: pending pods placed, nodes removed, nested branches.
    for (what, at) in &shape.work {
        let ids: Vec<NodeId> = view.snapshot.nodes().map(|(id, _)| id).collect();
        if ids.is_empty() {
            break;
        }
        let id = ids[*at as usize % ids.len()];
        match what % 3 {
            0 => {
                if let Some(pod) = view.pending.first() {
                    view.snapshot.add_pod(id, pod.clone());
                }
            }
            1 => {
                view.snapshot.remove_node(id);
            }
            _ => {
                let mut nested = view.snapshot.branch();
                nested.remove_node(id);
                nested.commit();
            }
        }
    }
    drop(view);
    kept.close(cluster.objects.pods.clone());
    refresh
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn the_kept_snapshot_equals_one_built_from_scratch_after_every_change(
        steps in prop::collection::vec(
            (prop::collection::vec(op(), 1..6), loop_shape()),
            1..25,
        ),
    ) {
        let mut cluster = Cluster {
            objects: ClusterObjects::default(),
            serial: 0,
        };
        let mut kept = KeptSnapshot::default();
        for (ops, shape) in &steps {
            for op in ops {
                cluster.apply(op);
            }
            run_loop(&mut kept, &cluster, shape);
        }
    }
}

/// A loop in which nothing changed leaves the base as it was, and one pod that changed is one
/// change: the base is kept, not built again.
#[test]
fn a_loop_costs_what_changed() {
    let mut cluster = Cluster {
        objects: ClusterObjects::default(),
        serial: 0,
    };
    let shape = NodeShape {
        zone: 0,
        tainted: false,
        cordoned: false,
        large: true,
    };
    for _ in 0..10 {
        cluster.apply(&Op::AddNode(shape.clone(), None));
    }
    for i in 0..50u8 {
        let pod = PodShape {
            app: i % 3,
            bound: Bound::Node(i),
            priority: None,
            anti_affinity: false,
            daemonset: false,
            other_scheduler: false,
            cpu: 100,
        };
        cluster.apply(&Op::AddPod(pod, 255));
    }
    let quiet = LoopShape {
        registered_upcoming: Vec::new(),
        draining: Vec::new(),
        upcoming: 1,
        work: vec![(0, 1), (1, 2)],
    };
    let mut kept = KeptSnapshot::default();
    let first = run_loop(&mut kept, &cluster, &quiet);
    assert_eq!(first.rebuilt, Some(Rebuild::First));
    assert_eq!(first.pod_changes, 50);
    let unchanged = run_loop(&mut kept, &cluster, &quiet);
    assert_eq!(unchanged, SnapshotRefresh::default());
    cluster.apply(&Op::ChangePod(7, PodChange::Requests(900)));
    let one = run_loop(&mut kept, &cluster, &quiet);
    assert_eq!(
        one,
        SnapshotRefresh {
            rebuilt: None,
            node_changes: 0,
            pod_changes: 1,
        }
    );
    cluster.apply(&Op::AddNode(shape.clone(), Some(0)));
    let reordered = run_loop(&mut kept, &cluster, &quiet);
    assert_eq!(reordered.rebuilt, Some(Rebuild::NodeOrder));
}
