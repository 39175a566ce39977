//! Random mutation sequences (with branches, forks, reverts and commits) must leave the snapshot and every
//! topology index exactly as if the surviving nodes and pods had been added to a fresh snapshot.
//!
//! Some pods have device claims (DRA-116): reverting a branch must restore the claims' allocations
//! and reservations exactly, and the devices in use must always be those of the allocated claims.
//! Which devices a claim got depends on the order pods came and went, so the comparison with a
//! rebuilt snapshot leaves DRA out; the revert tests compare it too.

use std::sync::Arc;

use ferroscale_model::labels::{HOSTNAME, ZONE};
use ferroscale_model::{
    AllocationMode, ClaimSpec, Device, DeviceClass, DeviceRequest, DeviceRequestKind, DeviceScope,
    DraObjects, ExactDeviceRequest, PodClaimSource, PodResourceClaim, ResourceClaim, ResourceSlice,
};
use ferroscale_model::{
    HostPort, LabelSelector, Labels, NodeInclusionPolicy, NodeOperator, NodeRequirement,
    NodeSelector, NodeSelectorTerm, Pod, PodAffinityTerm, Protocol, Resources, Taint, TaintEffect,
    Timestamp, TopologySpreadConstraint, UnsatisfiableAction,
};
use proptest::prelude::*;

use super::*;
use crate::filters::{Unfit, check, find_node};

#[derive(Debug, Clone)]
struct NodeShape {
    zone: Option<u8>,
    hostname: bool,
    /// The hostname label is one value several nodes share, instead of the node's name: a
    /// domain of the hostname key is then more than one node.
    shared_hostname: bool,
    tainted: bool,
    cordoned: bool,
}

#[derive(Debug, Clone)]
struct PodShape {
    app: u8,
    other_namespace: bool,
    terminating: bool,
    anti_affinity: Option<(u8, bool)>,
    host_port: bool,
    /// Uses the device claim `c<k>` (several pods may share one).
    claim: Option<u8>,
    /// Requests a third of a node's cpu and memory, so that nodes fill up and the capacity
    /// index has ranges to skip.
    large: bool,
}

#[derive(Debug, Clone)]
enum Op {
    AddNode(NodeShape),
    RemoveNode(u8),
    AddPod(u8, PodShape),
    RemovePod(u8, u8),
    /// Places a pod at a position among the node's pods (`insert_pod`).
    InsertPod(u8, u8, PodShape),
    /// Removes the pod at a position (`remove_pod_at`).
    RemovePodAt(u8, u8),
    /// Replaces a node's object with one of another shape and the same name (`replace_node`);
    /// `None` replaces it with an equal copy.
    ReplaceNode(u8, Option<NodeShape>),
    Fork,
    Revert,
    Commit,
    /// Runs the probe pods against every node, registering their indexes mid-sequence.
    Probe,
}

const APPS: [&str; 2] = ["web", "db"];

fn key(zone: bool) -> &'static str {
    if zone { ZONE } else { HOSTNAME }
}

fn node_shape() -> impl Strategy<Value = NodeShape> {
    (
        proptest::option::of(0u8..3),
        proptest::bool::weighted(0.85),
        proptest::bool::weighted(0.15),
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.1),
    )
        .prop_map(
            |(zone, hostname, shared_hostname, tainted, cordoned)| NodeShape {
                zone,
                hostname,
                shared_hostname,
                tainted,
                cordoned,
            },
        )
}

fn pod_shape() -> impl Strategy<Value = PodShape> {
    (
        0u8..2,
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.1),
        proptest::option::weighted(0.3, (0u8..2, any::<bool>())),
        proptest::bool::weighted(0.1),
        proptest::option::weighted(0.3, 0u8..CLAIMS),
        proptest::bool::weighted(0.3),
    )
        .prop_map(
            |(app, other_namespace, terminating, anti_affinity, host_port, claim, large)| {
                PodShape {
                    app,
                    other_namespace,
                    terminating,
                    anti_affinity,
                    host_port,
                    claim,
                    large,
                }
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => node_shape().prop_map(Op::AddNode),
        1 => any::<u8>().prop_map(Op::RemoveNode),
        8 => (any::<u8>(), pod_shape()).prop_map(|(n, p)| Op::AddPod(n, p)),
        3 => (any::<u8>(), any::<u8>()).prop_map(|(n, p)| Op::RemovePod(n, p)),
        2 => (any::<u8>(), any::<u8>(), pod_shape()).prop_map(|(n, i, p)| Op::InsertPod(n, i, p)),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(n, i)| Op::RemovePodAt(n, i)),
        1 => (any::<u8>(), proptest::option::of(node_shape()))
            .prop_map(|(n, shape)| Op::ReplaceNode(n, shape)),
        1 => Just(Op::Fork),
        1 => Just(Op::Revert),
        1 => Just(Op::Commit),
        1 => Just(Op::Probe),
    ]
}

/// Device claims `c0`.. in namespace `default`; the last one wants two devices.
const CLAIMS: u8 = 6;
const DRIVER: &str = "gpu.example.com";

fn device_request(count: u32) -> DeviceRequest {
    DeviceRequest {
        name: "gpu".into(),
        kind: DeviceRequestKind::Exactly(ExactDeviceRequest {
            device_class_name: "gpu".into(),
            selectors: vec![format!("device.driver == '{DRIVER}'")],
            allocation_mode: AllocationMode::ExactCount(count),
            admin_access: false,
        }),
    }
}

fn devices(count: usize) -> Vec<Device> {
    (0..count)
        .map(|i| Device {
            name: format!("gpu-{i}"),
            ..Device::default()
        })
        .collect()
}

/// A class, the claims, and one device every node reaches.
fn dra_objects() -> DraObjects {
    let claims = (0..=CLAIMS)
        .map(|k| {
            Arc::new(ResourceClaim {
                namespace: "default".into(),
                name: format!("c{k}"),
                uid: format!("uid-c{k}"),
                spec: ClaimSpec {
                    requests: vec![device_request(if k + 1 == CLAIMS { 2 } else { 1 })],
                    constraints: vec![],
                },
                ..ResourceClaim::default()
            })
        })
        .collect();
    DraObjects {
        slices: vec![Arc::new(ResourceSlice {
            name: "fabric".into(),
            driver: DRIVER.into(),
            pool: "fabric".into(),
            pool_generation: 1,
            pool_slice_count: 1,
            scope: DeviceScope::AllNodes,
            per_device_node_selection: false,
            devices: devices(1),
        })],
        classes: vec![Arc::new(DeviceClass {
            name: "gpu".into(),
            selectors: vec![],
            extended_resource_name: None,
        })],
        claims,
        templates: vec![],
    }
}

/// Two local devices of a node.
fn node_slices(name: &str) -> Vec<ResourceSlice> {
    vec![ResourceSlice {
        name: format!("{name}-gpus"),
        driver: DRIVER.into(),
        pool: name.into(),
        pool_generation: 1,
        pool_slice_count: 1,
        scope: DeviceScope::Node(name.into()),
        per_device_node_selection: false,
        devices: devices(2),
    }]
}

fn make_node(shape: &NodeShape, serial: usize) -> Arc<Node> {
    let mut allocatable = Resources::new(8000, 16 << 30);
    allocatable.pods = 110;
    let mut n = Node::new(format!("n{serial}"), allocatable);
    if !shape.hostname {
        n.labels.remove(HOSTNAME);
    } else if shape.shared_hostname {
        n.labels.insert(HOSTNAME.into(), "shared".into());
    }
    if let Some(z) = shape.zone {
        n.labels.insert(ZONE.into(), format!("z{z}"));
    }
    if shape.tainted {
        n.taints
            .push(Taint::new("dedicated", "x", TaintEffect::NoSchedule));
    }
    n.unschedulable = shape.cordoned;
    Arc::new(n)
}

fn term(app: u8, zone: bool) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(LabelSelector::from_labels([("app", APPS[app as usize])])),
        namespaces: vec![],
        namespace_selector: None,
        topology_key: key(zone).into(),
    }
}

fn make_pod(shape: &PodShape, serial: usize) -> Arc<Pod> {
    let namespace = if shape.other_namespace {
        "other"
    } else {
        "default"
    };
    let mut p = Pod::new(namespace, format!("p{serial}"));
    p.requests = if shape.large {
        Resources::new(2600, 5 << 30)
    } else {
        Resources::new(10, 1 << 20)
    };
    p.labels
        .insert("app".into(), APPS[shape.app as usize].into());
    if shape.terminating {
        p.deletion_time = Some(Timestamp::from_secs(1));
    }
    if let Some((app, zone)) = shape.anti_affinity {
        p.pod_anti_affinity.push(term(app, zone));
    }
    if shape.host_port {
        p.host_ports.push(HostPort {
            port: 8080,
            protocol: Protocol::Tcp,
            host_ip: String::new(),
        });
    }
    // Claims live in `default`.
    if let Some(k) = shape.claim.filter(|_| namespace == "default") {
        p.resource_claims.push(PodResourceClaim {
            name: "gpu".into(),
            source: PodClaimSource::Claim(format!("c{k}")),
        });
    }
    Arc::new(p)
}

/// Pods with device claims, whose verdicts depend on what is allocated.
fn dra_probes() -> Vec<Pod> {
    [0, CLAIMS - 1, CLAIMS]
        .iter()
        .map(|k| {
            let mut p = Pod::new("default", format!("dra-probe-{k}"));
            p.resource_claims.push(PodResourceClaim {
                name: "gpu".into(),
                source: PodClaimSource::Claim(format!("c{k}")),
            });
            p
        })
        .collect()
}

fn spread(app: u8, zone: bool) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key(zone).into(),
        when_unsatisfiable: UnsatisfiableAction::DoNotSchedule,
        label_selector: Some(LabelSelector::from_labels([("app", APPS[app as usize])])),
        min_domains: None,
        node_affinity_policy: NodeInclusionPolicy::Honor,
        node_taints_policy: NodeInclusionPolicy::Ignore,
    }
}

/// Pods with every kind of inter-pod constraint, in both namespaces.
fn probes() -> Vec<Pod> {
    let mut probes = Vec::new();
    for namespace in ["default", "other"] {
        for app in 0..2u8 {
            for zone in [false, true] {
                let base = || {
                    let mut p = Pod::new(namespace, "probe");
                    p.labels.insert("app".into(), APPS[app as usize].into());
                    p
                };
                let mut affine = base();
                affine.pod_affinity.push(term(app, zone));
                probes.push(affine);
                let mut anti = base();
                anti.pod_anti_affinity.push(term(1 - app, zone));
                probes.push(anti);
                let mut spread_pod = base();
                spread_pod.topology_spread.push(spread(app, zone));
                probes.push(spread_pod.clone());
                let mut honoring = spread_pod;
                honoring.topology_spread[0].node_taints_policy = NodeInclusionPolicy::Honor;
                honoring.topology_spread[0].min_domains = Some(3);
                honoring.required_node_affinity = Some(Box::new(NodeSelector {
                    terms: vec![NodeSelectorTerm {
                        match_expressions: vec![NodeRequirement {
                            key: ZONE.into(),
                            operator: NodeOperator::NotIn,
                            values: vec!["z2".into()],
                        }],
                        match_fields: vec![],
                    }],
                }));
                probes.push(honoring);
                let mut everywhere = base();
                let mut all = term(app, zone);
                all.namespace_selector = Some(LabelSelector::default());
                everywhere.pod_anti_affinity.push(all);
                probes.push(everywhere);
            }
        }
    }
    // Fits only on nodes holding at most one pod: exercises the capacity summaries.
    let mut big = Pod::new("default", "big");
    big.requests = Resources::new(7990, 1 << 20);
    probes.push(big);
    // Fit only on nodes without a large pod, by cpu or by memory alone.
    let mut cpu = Pod::new("default", "cpu");
    cpu.requests = Resources::new(6000, 0);
    probes.push(cpu);
    let mut memory = Pod::new("default", "memory");
    memory.requests = Resources::new(0, 12 << 30);
    probes.push(memory);
    let mut port = Pod::new("default", "port");
    port.host_ports.push(HostPort {
        port: 8080,
        protocol: Protocol::Tcp,
        host_ip: String::new(),
    });
    probes.push(port);
    probes
}

/// Applies `ops`; forks opened before the call (`floor` of them) are left alone.
fn run(s: &mut Snapshot, ops: &[Op], serial: &mut usize, floor: usize) {
    let probes = probes();
    for op in ops {
        *serial += 1;
        let live: Vec<NodeId> = s.nodes().map(|(id, _)| id).collect();
        let pick = |i: u8| (!live.is_empty()).then(|| live[i as usize % live.len()]);
        match op {
            Op::AddNode(shape) => {
                let node = make_node(shape, *serial);
                s.set_simulated_resource_slices(&node.name, node_slices(&node.name));
                s.add_node(node);
            }
            Op::RemoveNode(i) => {
                if let Some(id) = pick(*i) {
                    s.remove_node(id);
                }
            }
            Op::AddPod(i, shape) => {
                if let Some(id) = pick(*i) {
                    s.add_pod(id, make_pod(shape, *serial));
                }
            }
            Op::RemovePod(i, j) => {
                if let Some(id) = pick(*i) {
                    let pods = &s.node(id).unwrap().pods;
                    if !pods.is_empty() {
                        let uid = pods[*j as usize % pods.len()].uid.clone();
                        s.remove_pod(id, &uid);
                    }
                }
            }
            Op::InsertPod(i, at, shape) => {
                if let Some(id) = pick(*i) {
                    s.insert_pod(id, *at as usize % 4, make_pod(shape, *serial));
                }
            }
            Op::RemovePodAt(i, at) => {
                if let Some(id) = pick(*i) {
                    let len = s.node(id).unwrap().pods.len();
                    if len > 0 {
                        s.remove_pod_at(id, *at as usize % len);
                    }
                }
            }
            Op::ReplaceNode(i, shape) => {
                if let Some(id) = pick(*i) {
                    let current = s.node(id).unwrap().node.clone();
                    let replacement = match shape {
                        Some(shape) => {
                            let mut node = (*make_node(shape, *serial)).clone();
                            node.name = current.name.clone();
                            node
                        }
                        None => (*current).clone(),
                    };
                    assert!(s.replace_node(id, Arc::new(replacement)));
                }
            }
            Op::Fork => s.fork(),
            Op::Revert if s.fork_depth() > floor => s.revert(),
            Op::Commit if s.fork_depth() > floor => s.commit(),
            Op::Revert | Op::Commit => {}
            Op::Probe => {
                for p in probes.iter().chain(&dra_probes()) {
                    for id in &live {
                        let _ = check(s, p, *id);
                    }
                }
            }
        }
    }
}

/// Everything a user of the snapshot can observe, keyed by node name.
#[derive(Debug, PartialEq)]
struct Observed {
    node_count: usize,
    pod_count: usize,
    nodes: Vec<(String, Vec<String>, Resources, Vec<HostPort>)>,
    verdicts: Vec<Vec<Result<(), Unfit>>>,
    first_fit: Vec<Option<String>>,
    dra: ObservedDra,
}

/// What depends on which devices claims got.
#[derive(Debug, PartialEq)]
struct ObservedDra {
    claims: Vec<(String, Option<ClaimAllocation>, Vec<ClaimConsumer>)>,
    pools: Vec<(String, Vec<crate::PoolUtilization>)>,
    verdicts: Vec<Vec<Result<(), Unfit>>>,
    first_fit: Vec<Option<String>>,
}

/// Takes `&mut` only because probing registers indexes; what it observes does not change.
fn observe(s: &mut Snapshot) -> Observed {
    let mut nodes: Vec<_> = s
        .nodes()
        .map(|(_, info)| {
            let mut ports = info.host_ports.clone();
            ports.sort_by_key(|p| (p.port, p.host_ip.clone()));
            let uids = info.pods.iter().map(|p| p.uid.to_string()).collect();
            (info.node.name.clone(), uids, info.requested.clone(), ports)
        })
        .collect();
    nodes.sort_by(|a, b| a.0.cmp(&b.0));
    let verdicts = probes()
        .iter()
        .map(|p| {
            nodes
                .iter()
                .map(|n| {
                    let id = s.node_id(&n.0).unwrap();
                    check(s, p, id)
                })
                .collect()
        })
        .collect();
    let first_fit = probes()
        .iter()
        .map(|p| find_node(s, p, 0).map(|id| s.node(id).unwrap().node.name.clone()))
        .collect();
    let dra = ObservedDra {
        claims: s.dra_summary(),
        pools: nodes
            .iter()
            .map(|n| (n.0.clone(), s.device_pools(s.node_id(&n.0).unwrap())))
            .collect(),
        verdicts: dra_probes()
            .iter()
            .map(|p| {
                nodes
                    .iter()
                    .map(|n| {
                        let id = s.node_id(&n.0).unwrap();
                        check(s, p, id)
                    })
                    .collect()
            })
            .collect(),
        first_fit: dra_probes()
            .iter()
            .map(|p| find_node(s, p, 0).map(|id| s.node(id).unwrap().node.name.clone()))
            .collect(),
    };
    Observed {
        node_count: s.node_count(),
        pod_count: s.pod_count(),
        nodes,
        verdicts,
        first_fit,
        dra,
    }
}

/// `observed` without what depends on the order pods came and went in (see the module doc).
fn without_dra(mut observed: Observed) -> Observed {
    observed.dra = ObservedDra {
        claims: vec![],
        pools: vec![],
        verdicts: vec![],
        first_fit: vec![],
    };
    observed
}

fn rebuilt(s: &Snapshot) -> Snapshot {
    let mut fresh = Snapshot::new();
    fresh.set_dra_objects(&dra_objects());
    for (ns, labels) in &s.namespace_labels {
        fresh.set_namespace_labels(ns.clone(), labels.clone());
    }
    for (_, info) in s.nodes() {
        fresh.set_simulated_resource_slices(&info.node.name, node_slices(&info.node.name));
        let id = fresh.add_node(info.node.clone());
        for p in &info.pods {
            fresh.add_pod(id, p.clone());
        }
    }
    fresh
}

fn with_namespaces() -> Snapshot {
    let mut s = Snapshot::new();
    s.set_namespace_labels("default", Labels::from([("team".into(), "a".into())]));
    s.set_namespace_labels("other", Labels::from([("team".into(), "b".into())]));
    s.set_dra_objects(&dra_objects());
    s
}

/// The node a plain scan finds: the first, from `start` to the end and then from the
/// beginning, on which `check` accepts the pod.
fn first_accepting(s: &mut Snapshot, pod: &Pod, start: usize) -> Option<NodeId> {
    let slots = s.slot_count();
    (start..slots)
        .chain(0..start)
        .map(|i| NodeId(i as u32))
        .find(|id| s.node(*id).is_some() && check(s, pod, *id).is_ok())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The capacity index only skips nodes the filters reject: from every start, `find_node`
    /// finds the node a plain scan with `check` finds, on the trunk and on an open branch.
    #[test]
    fn indexed_find_node_matches_a_plain_scan(
        before in proptest::collection::vec(op(), 0..80),
        on_branch in proptest::collection::vec(op(), 0..30),
    ) {
        let mut s = with_namespaces();
        let mut serial = 0;
        run(&mut s, &before, &mut serial, 0);
        let mut branch = s.branch();
        run(&mut branch, &on_branch, &mut serial, 1);
        let slots = branch.slot_count();
        for pod in probes() {
            for start in 0..slots.max(1) {
                let plain = first_accepting(&mut branch, &pod, start);
                prop_assert_eq!(find_node(&mut branch, &pod, start), plain, "{} from {}", pod.name, start);
            }
        }
        drop(branch);
        s.assert_indexes_consistent();
        for pod in probes() {
            let plain = first_accepting(&mut s, &pod, 0);
            prop_assert_eq!(find_node(&mut s, &pod, 0), plain, "{}", pod.name);
        }
    }

    #[test]
    fn random_mutations_match_a_snapshot_rebuilt_from_scratch(
        ops in proptest::collection::vec(op(), 0..80)
    ) {
        let mut s = with_namespaces();
        let mut serial = 0;
        run(&mut s, &ops, &mut serial, 0);
        s.assert_indexes_consistent();
        let mut fresh = rebuilt(&s);
        prop_assert_eq!(without_dra(observe(&mut s)), without_dra(observe(&mut fresh)));
        fresh.assert_indexes_consistent();
        // Observing registered every probe's indexes; they must still be right afterwards.
        s.assert_indexes_consistent();
    }

    #[test]
    fn revert_restores_what_was_observable_before_the_fork(
        before in proptest::collection::vec(op(), 0..40),
        branch in proptest::collection::vec(op(), 0..40),
    ) {
        let mut s = with_namespaces();
        let mut serial = 0;
        run(&mut s, &before, &mut serial, 0);
        while s.fork_depth() > 0 {
            s.commit();
        }
        let expected = observe(&mut s);
        s.fork();
        run(&mut s, &branch, &mut serial, 1);
        while s.fork_depth() > 1 {
            s.commit();
        }
        s.revert();
        prop_assert_eq!(s.fork_depth(), 0);
        s.assert_indexes_consistent();
        prop_assert_eq!(observe(&mut s), expected);
    }

    #[test]
    fn a_dropped_branch_restores_what_was_observable_before_it(
        before in proptest::collection::vec(op(), 0..40),
        on_branch in proptest::collection::vec(op(), 0..40),
        inner in proptest::collection::vec(op(), 0..20),
        keep_inner in any::<bool>(),
    ) {
        let mut s = with_namespaces();
        let mut serial = 0;
        run(&mut s, &before, &mut serial, 0);
        while s.fork_depth() > 0 {
            s.commit();
        }
        let expected = observe(&mut s);
        {
            let mut branch = s.branch();
            // Forks the ops open inside and leave open are closed with the branch.
            run(&mut branch, &on_branch, &mut serial, 1);
            let mut nested = branch.branch();
            let depth = nested.fork_depth();
            run(&mut nested, &inner, &mut serial, depth);
            if keep_inner {
                nested.commit();
            }
        }
        prop_assert_eq!(s.fork_depth(), 0);
        s.assert_indexes_consistent();
        prop_assert_eq!(observe(&mut s), expected);
    }
}
