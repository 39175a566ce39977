//! Each filter with its edge cases, checked through the public `check` / `find_node`.

use std::sync::Arc;

use ferroscale_model::labels::{HOSTNAME, ZONE};
use ferroscale_model::{
    HostPort, LabelOperator, LabelRequirement, LabelSelector, Labels, NodeInclusionPolicy,
    NodeOperator, NodeRequirement, NodeSelector, NodeSelectorTerm, Pod, PodAffinityTerm, Protocol,
    Resources, Taint, TaintEffect, Timestamp, Toleration, TolerationOperator,
    TopologySpreadConstraint, UnsatisfiableAction,
};

use super::*;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn node_in(name: &str, zone: Option<&str>) -> ferroscale_model::Node {
    let mut allocatable = Resources::new(4000, 8 << 30);
    allocatable.pods = 110;
    let mut n = ferroscale_model::Node::new(name, allocatable);
    if let Some(z) = zone {
        n.labels.insert(ZONE.to_string(), z.to_string());
    }
    n
}

fn add_node(s: &mut Snapshot, name: &str, zone: Option<&str>) -> NodeId {
    s.add_node(Arc::new(node_in(name, zone)))
}

fn pod(name: &str) -> Pod {
    let mut p = Pod::new("default", name);
    p.requests = Resources::new(100, 1 << 20);
    p
}

fn app(name: &str, app: &str) -> Pod {
    let mut p = pod(name);
    p.labels.insert("app".into(), app.into());
    p
}

/// Places a pod the way a bound pod is: with `node_name` set.
fn place(s: &mut Snapshot, id: NodeId, mut p: Pod) {
    p.node_name = Some(s.node(id).unwrap().node.name.as_str().into());
    s.add_pod(id, Arc::new(p));
}

fn term(app: &str, key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(LabelSelector::from_labels([("app", app)])),
        namespaces: vec![],
        namespace_selector: None,
        topology_key: key.into(),
    }
}

fn spread(app: &str, key: &str, max_skew: i32) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew,
        topology_key: key.into(),
        when_unsatisfiable: UnsatisfiableAction::DoNotSchedule,
        label_selector: Some(LabelSelector::from_labels([("app", app)])),
        min_domains: None,
        node_affinity_policy: NodeInclusionPolicy::Honor,
        node_taints_policy: NodeInclusionPolicy::Ignore,
    }
}

fn fits_on(s: &mut Snapshot, p: &Pod) -> Vec<String> {
    let ids: Vec<NodeId> = s.nodes().map(|(id, _)| id).collect();
    let mut fitting = Vec::new();
    for id in ids {
        if check(s, p, id).is_ok() {
            fitting.push(s.node(id).unwrap().node.name.clone());
        }
    }
    fitting
}

fn kind(s: &mut Snapshot, p: &Pod, id: NodeId) -> Option<UnfitKind> {
    check(s, p, id).err().map(|u| u.kind())
}

// ----- node-local filters -----

#[test]
fn cordoned_nodes_are_rejected_and_skipped_by_find_node() {
    let mut s = Snapshot::new();
    let mut cordoned = node_in("a", None);
    cordoned.unschedulable = true;
    let a = s.add_node(Arc::new(cordoned));
    let b = add_node(&mut s, "b", None);
    let mut p = pod("p");
    // Even a toleration of the cordon taint does not help in the autoscaler's simulation.
    p.tolerations.push(Toleration {
        key: "node.kubernetes.io/unschedulable".into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    });
    assert_eq!(check(&mut s, &p, a), Err(Unfit::NodeUnschedulable));
    assert_eq!(find_node(&mut s, &p, 0), Some(b));
}

#[test]
fn a_bound_pod_fits_only_its_own_node() {
    let mut s = Snapshot::new();
    let a = add_node(&mut s, "a", None);
    let b = add_node(&mut s, "b", None);
    let mut p = pod("p");
    p.node_name = Some("b".into());
    assert_eq!(check(&mut s, &p, a), Err(Unfit::NodeName));
    assert_eq!(check(&mut s, &p, b), Ok(()));
    assert_eq!(find_node(&mut s, &p, 0), Some(b));
    p.node_name = None;
    assert_eq!(find_node(&mut s, &p, 0), Some(a));
}

#[test]
fn find_node_for_unbound_reads_the_node_name_as_cleared() {
    let mut s = Snapshot::new();
    let a = add_node(&mut s, "a", None);
    let b = add_node(&mut s, "b", Some("z1"));
    let mut p = pod("p");
    p.node_name = Some("b".into());
    assert_eq!(find_node(&mut s, &p, 0), Some(b));
    // The pod leaves `b`: the first node it fits on, as for its copy without a node name.
    assert_eq!(find_node_for_unbound(&mut s, &p, 0), Some(a));
    // Every other filter still applies, e.g. a node selector.
    p.node_selector = labels(&[(ZONE, "z1")]);
    assert_eq!(find_node_for_unbound(&mut s, &p, 0), Some(b));
    p.node_selector = labels(&[(ZONE, "z2")]);
    assert_eq!(find_node_for_unbound(&mut s, &p, 0), None);
}

#[test]
fn fits_by_node_alone_only_without_inter_pod_volume_or_device_constraints() {
    let mut s = Snapshot::new();
    let a = add_node(&mut s, "a", Some("z1"));
    let mut plain = pod("plain");
    plain.node_selector = labels(&[(ZONE, "z1")]);
    plain.host_ports.push(HostPort {
        port: 80,
        protocol: Protocol::Tcp,
        host_ip: String::new(),
    });
    assert!(fits_by_node_alone(&s, &plain));
    let mut anti = pod("anti");
    anti.pod_anti_affinity.push(term("web", ZONE));
    assert!(!fits_by_node_alone(&s, &anti));
    let mut spreading = pod("spreading");
    spreading.topology_spread.push(spread("web", ZONE, 1));
    assert!(!fits_by_node_alone(&s, &spreading));
    // A placed pod's anti-affinity can reject any pod in its domain.
    place(&mut s, a, anti);
    assert!(!fits_by_node_alone(&s, &plain));
}

#[test]
fn taints_reject_unless_tolerated_and_prefer_no_schedule_never_rejects() {
    let mut s = Snapshot::new();
    let tainted = |effect| {
        let mut n = node_in(&format!("n-{effect:?}"), None);
        n.taints.push(Taint::new("gpu", "true", effect));
        n
    };
    let no_schedule = s.add_node(Arc::new(tainted(TaintEffect::NoSchedule)));
    let no_execute = s.add_node(Arc::new(tainted(TaintEffect::NoExecute)));
    let prefer = s.add_node(Arc::new(tainted(TaintEffect::PreferNoSchedule)));
    let p = pod("p");
    assert_eq!(
        check(&mut s, &p, no_schedule),
        Err(Unfit::UntoleratedTaint {
            key: "gpu".into(),
            value: "true".into(),
            effect: "NoSchedule"
        })
    );
    assert_eq!(
        kind(&mut s, &p, no_execute),
        Some(UnfitKind::TaintToleration)
    );
    assert_eq!(check(&mut s, &p, prefer), Ok(()));

    let with = |key: &str, operator, value: &str, effect| {
        let mut p = pod("p");
        p.tolerations.push(Toleration {
            key: key.into(),
            operator,
            value: value.into(),
            effect,
        });
        p
    };
    use TolerationOperator::{Equal, Exists};
    let equal = with("gpu", Equal, "true", None);
    assert_eq!(fits_on(&mut s, &equal).len(), 3);
    let wrong_value = with("gpu", Equal, "false", None);
    assert_eq!(fits_on(&mut s, &wrong_value), vec!["n-PreferNoSchedule"]);
    let exists = with("gpu", Exists, "", None);
    assert_eq!(fits_on(&mut s, &exists).len(), 3);
    let everything = with("", Exists, "", None);
    assert_eq!(fits_on(&mut s, &everything).len(), 3);
    let only_no_execute = with("gpu", Exists, "", Some(TaintEffect::NoExecute));
    assert_eq!(check(&mut s, &only_no_execute, no_execute), Ok(()));
    assert_eq!(
        kind(&mut s, &only_no_execute, no_schedule),
        Some(UnfitKind::TaintToleration)
    );
}

#[test]
fn taints_are_reported_before_node_affinity_and_resources() {
    let mut s = Snapshot::new();
    let mut n = node_in("a", None);
    n.taints
        .push(Taint::new("dedicated", "", TaintEffect::NoSchedule));
    let a = s.add_node(Arc::new(n));
    let mut p = pod("p");
    p.node_selector = labels(&[("disk", "ssd")]);
    p.requests = Resources::new(1_000_000, 0);
    assert_eq!(
        check(&mut s, &p, a).map_err(|u| u.to_string()),
        Err("node(s) had untolerated taint(s)".to_string())
    );
}

#[test]
fn node_selector_and_every_node_affinity_operator() {
    let mut s = Snapshot::new();
    let mut n = node_in("a", Some("z1"));
    n.labels.insert("cores".into(), "8".into());
    n.labels.insert("disk".into(), "ssd".into());
    let a = s.add_node(Arc::new(n));

    let mut p = pod("p");
    p.node_selector = labels(&[("disk", "ssd")]);
    assert_eq!(check(&mut s, &p, a), Ok(()));
    p.node_selector = labels(&[("disk", "hdd")]);
    assert_eq!(check(&mut s, &p, a), Err(Unfit::NodeAffinity));

    let mut verdict = |operator, key: &str, values: &[&str]| {
        let mut p = pod("p");
        p.required_node_affinity = Some(Box::new(NodeSelector {
            terms: vec![NodeSelectorTerm {
                match_expressions: vec![NodeRequirement {
                    key: key.into(),
                    operator,
                    values: values.iter().map(|v| v.to_string()).collect(),
                }],
                match_fields: vec![],
            }],
        }));
        check(&mut s, &p, a).is_ok()
    };
    assert!(verdict(NodeOperator::In, ZONE, &["z1", "z2"]));
    assert!(!verdict(NodeOperator::In, ZONE, &["z2"]));
    assert!(verdict(NodeOperator::NotIn, ZONE, &["z2"]));
    assert!(!verdict(NodeOperator::NotIn, ZONE, &["z1"]));
    assert!(verdict(NodeOperator::NotIn, "absent", &["x"]));
    assert!(verdict(NodeOperator::Exists, "disk", &[]));
    assert!(!verdict(NodeOperator::Exists, "absent", &[]));
    assert!(verdict(NodeOperator::DoesNotExist, "absent", &[]));
    assert!(!verdict(NodeOperator::DoesNotExist, "disk", &[]));
    assert!(verdict(NodeOperator::Gt, "cores", &["4"]));
    assert!(!verdict(NodeOperator::Gt, "cores", &["8"]));
    assert!(verdict(NodeOperator::Lt, "cores", &["16"]));
    assert!(!verdict(NodeOperator::Lt, "cores", &["8"]));
    // Non-integer values never match Gt/Lt.
    assert!(!verdict(NodeOperator::Gt, "disk", &["1"]));

    let mut by_field = |name: &str| {
        let mut p = pod("p");
        p.required_node_affinity = Some(Box::new(NodeSelector {
            terms: vec![
                NodeSelectorTerm::default(), // an empty term matches nothing ...
                NodeSelectorTerm {
                    match_expressions: vec![],
                    match_fields: vec![NodeRequirement {
                        key: "metadata.name".into(),
                        operator: NodeOperator::In,
                        values: vec![name.into()],
                    }],
                }, // ... but terms are ORed
            ],
        }));
        check(&mut s, &p, a).is_ok()
    };
    assert!(by_field("a"));
    assert!(!by_field("b"));
}

#[test]
fn host_ports_conflict_by_port_protocol_and_address() {
    let mut s = Snapshot::new();
    let a = add_node(&mut s, "a", None);
    let port = |port, protocol, ip: &str| HostPort {
        port,
        protocol,
        host_ip: ip.into(),
    };
    let with_ports = |name: &str, ports: Vec<HostPort>| {
        let mut p = pod(name);
        p.host_ports = ports.into();
        p
    };
    place(
        &mut s,
        a,
        with_ports("web", vec![port(80, Protocol::Tcp, "10.0.0.1")]),
    );
    let verdict_in = |s: &mut Snapshot, hp: HostPort| check(s, &with_ports("new", vec![hp]), a);
    let mut verdict = |hp: HostPort| verdict_in(&mut s, hp);
    assert_eq!(
        verdict(port(80, Protocol::Tcp, "10.0.0.1")),
        Err(Unfit::NodePorts)
    );
    assert_eq!(verdict(port(80, Protocol::Tcp, "")), Err(Unfit::NodePorts));
    assert_eq!(
        verdict(port(80, Protocol::Tcp, "0.0.0.0")),
        Err(Unfit::NodePorts)
    );
    assert_eq!(verdict(port(80, Protocol::Tcp, "10.0.0.2")), Ok(()));
    assert_eq!(verdict(port(80, Protocol::Udp, "10.0.0.1")), Ok(()));
    assert_eq!(verdict(port(80, Protocol::Sctp, "")), Ok(()));
    assert_eq!(verdict(port(81, Protocol::Tcp, "")), Ok(()));
    // Removing the pod frees the port.
    s.remove_pod(a, "uid-default-web");
    assert_eq!(verdict_in(&mut s, port(80, Protocol::Tcp, "")), Ok(()));
    // Port 0 is "no host port" and never conflicts.
    place(
        &mut s,
        a,
        with_ports("zero", vec![port(0, Protocol::Tcp, "")]),
    );
    assert_eq!(verdict_in(&mut s, port(0, Protocol::Tcp, "")), Ok(()));
}

#[test]
fn resource_fit_checks_pod_count_first_then_each_requested_resource() {
    let mut s = Snapshot::new();
    let mut allocatable = Resources::new(1000, 1 << 30);
    allocatable.pods = 2;
    allocatable.ephemeral_storage = 10 << 30;
    allocatable.set("nvidia.com/gpu", 1);
    let a = s.add_node(Arc::new(ferroscale_model::Node::new("a", allocatable)));
    let mut big = pod("big");
    big.requests = Resources::new(600, 1 << 29);
    place(&mut s, a, big);

    let mut asking = |cpu, memory, storage, gpu| {
        let mut p = pod("p");
        p.requests = Resources::new(cpu, memory);
        p.requests.ephemeral_storage = storage;
        p.requests.set("nvidia.com/gpu", gpu);
        check(&mut s, &p, a).map_err(|u| u.to_string())
    };
    assert_eq!(asking(400, 1 << 29, 10 << 30, 1), Ok(()));
    assert_eq!(asking(401, 0, 0, 0), Err("Insufficient cpu".into()));
    assert_eq!(
        asking(0, (1 << 29) + 1, 0, 0),
        Err("Insufficient memory".into())
    );
    assert_eq!(
        asking(0, 0, (10 << 30) + 1, 0),
        Err("Insufficient ephemeral-storage".into())
    );
    assert_eq!(
        asking(0, 0, 0, 2),
        Err("Insufficient nvidia.com/gpu".into())
    );
    // cpu is reported before memory.
    assert_eq!(asking(500, 1 << 30, 0, 0), Err("Insufficient cpu".into()));
    // An extended resource the node does not have at all.
    let mut fpga = pod("fpga");
    fpga.requests.set("example.com/fpga", 1);
    assert_eq!(
        check(&mut s, &fpga, a),
        Err(Unfit::InsufficientResource("example.com/fpga".into()))
    );

    // The pod count is checked first, even for a pod that requests nothing.
    place(&mut s, a, pod("second"));
    let mut nothing = pod("nothing");
    nothing.requests = Resources::default();
    assert_eq!(
        check(&mut s, &nothing, a).map_err(|u| u.to_string()),
        Err("Too many pods".to_string())
    );
    assert_eq!(find_node(&mut s, &nothing, 0), None);
}

// ----- inter-pod affinity -----

fn three_zones() -> (Snapshot, Vec<NodeId>) {
    let mut s = Snapshot::new();
    let ids = vec![
        add_node(&mut s, "a1", Some("a")),
        add_node(&mut s, "a2", Some("a")),
        add_node(&mut s, "b1", Some("b")),
        add_node(&mut s, "c1", Some("c")),
        add_node(&mut s, "nozone", None),
    ];
    (s, ids)
}

#[test]
fn pod_affinity_on_hostname_and_zone() {
    let (mut s, n) = three_zones();
    place(&mut s, n[0], app("db-0", "db"));
    let mut on_host = app("web", "web");
    on_host.pod_affinity.push(term("db", HOSTNAME));
    assert_eq!(fits_on(&mut s, &on_host), vec!["a1"]);
    assert_eq!(check(&mut s, &on_host, n[2]), Err(Unfit::PodAffinity));

    let mut in_zone = app("web", "web");
    in_zone.pod_affinity.push(term("db", ZONE));
    assert_eq!(fits_on(&mut s, &in_zone), vec!["a1", "a2"]);
    // The node without a zone label can never satisfy a zone term.
    assert_eq!(check(&mut s, &in_zone, n[4]), Err(Unfit::PodAffinity));
}

#[test]
fn pod_affinity_counts_only_pods_matching_every_term() {
    let (mut s, n) = three_zones();
    let mut db = app("db-0", "db");
    db.labels.insert("tier".into(), "cache".into());
    place(&mut s, n[0], app("db-1", "db")); // matches the first term only
    place(&mut s, n[2], db); // matches both
    let mut p = app("web", "web");
    p.pod_affinity.push(term("db", ZONE));
    let mut tier = term("db", HOSTNAME);
    tier.label_selector = Some(LabelSelector::from_labels([("tier", "cache")]));
    p.pod_affinity.push(tier);
    assert_eq!(fits_on(&mut s, &p), vec!["b1"]);
}

#[test]
fn first_pod_of_a_self_affine_group_goes_anywhere_with_the_key() {
    let (mut s, n) = three_zones();
    let mut first = app("web-0", "web");
    first.pod_affinity.push(term("web", ZONE));
    // No pod matches: the pod matches its own term, so any zoned node will do.
    assert_eq!(fits_on(&mut s, &first), vec!["a1", "a2", "b1", "c1"]);
    // A pod that does not match its own term gets no such exception.
    let mut other = app("api-0", "api");
    other.pod_affinity.push(term("web", ZONE));
    assert!(fits_on(&mut s, &other).is_empty());
    // Once one is placed, the rest follow it into its zone.
    place(&mut s, n[2], first.clone());
    let mut second = first.clone();
    second.name = "web-1".into();
    second.uid = "uid-web-1".into();
    assert_eq!(fits_on(&mut s, &second), vec!["b1"]);
    // A matching pod on a node without the key does not count: the group is still "first".
    let (mut s, n) = three_zones();
    place(&mut s, n[4], app("web-x", "web"));
    assert_eq!(fits_on(&mut s, &first).len(), 4);
}

#[test]
fn pod_anti_affinity_on_hostname_and_zone_ignores_nodes_without_the_key() {
    let (mut s, n) = three_zones();
    place(&mut s, n[0], app("web-0", "web"));
    let mut host = app("web-1", "web");
    host.pod_anti_affinity.push(term("web", HOSTNAME));
    assert_eq!(check(&mut s, &host, n[0]), Err(Unfit::PodAntiAffinity));
    assert_eq!(fits_on(&mut s, &host), vec!["a2", "b1", "c1", "nozone"]);
    let mut zone = app("web-1", "web");
    zone.pod_anti_affinity.push(term("web", ZONE));
    assert_eq!(fits_on(&mut s, &zone), vec!["b1", "c1", "nozone"]);
}

/// Hostname anti-affinity reads the pods of the nodes it is asked about, not of every node: the
/// snapshot is rebuilt every loop, and counting a matcher over a million pods per loop was a
/// tenth of a 65,000-node simulation.
#[test]
fn hostname_anti_affinity_counts_only_the_nodes_it_checks() {
    let mut s = Snapshot::new();
    let ids: Vec<NodeId> = (0..100)
        .map(|i| add_node(&mut s, &format!("n{i:03}"), Some("a")))
        .collect();
    for (i, id) in ids.iter().enumerate() {
        if i < 10 {
            place(&mut s, *id, app(&format!("web-{i}"), "web"));
        }
        place(&mut s, *id, app(&format!("db-{i}"), "db"));
    }
    let mut lonely = app("web-new", "web");
    lonely.pod_anti_affinity.push(term("web", HOSTNAME));
    assert_eq!(check(&mut s, &lonely, ids[3]), Err(Unfit::PodAntiAffinity));
    assert_eq!(s.topology().index.nodes_counted(), 1);
    assert_eq!(find_node(&mut s, &lonely, 0), Some(ids[10]));
    assert_eq!(s.topology().index.nodes_counted(), 11);
    // A zone spread needs every node's count.
    let mut spreading = app("web-new", "web");
    spreading.topology_spread.push(spread("web", ZONE, 1));
    assert_eq!(check(&mut s, &spreading, ids[50]), Ok(()));
    assert_eq!(s.topology().index.nodes_counted(), 11 + 100);
    s.assert_indexes_consistent();
}

/// A hostname value on two nodes is one domain: once a second node carries it, a pod on either
/// node counts for both, also for anti-affinity counted node by node until then.
#[test]
fn anti_affinity_sees_a_hostname_value_that_a_later_node_shares() {
    let mut s = Snapshot::new();
    let mut first = node_in("a", None);
    first.labels.insert(HOSTNAME.into(), "same-host".into());
    let a = s.add_node(Arc::new(first));
    let c = add_node(&mut s, "c", None);
    place(&mut s, a, app("web-0", "web"));
    let mut lonely = app("web-new", "web");
    lonely.pod_anti_affinity.push(term("web", HOSTNAME));
    assert_eq!(check(&mut s, &lonely, c), Ok(()));
    let mut second = node_in("b", None);
    second.labels.insert(HOSTNAME.into(), "same-host".into());
    let b = s.add_node(Arc::new(second));
    assert_eq!(check(&mut s, &lonely, b), Err(Unfit::PodAntiAffinity));
    // On a branch that removes the pod, and after the branch is dropped.
    {
        let mut branch = s.branch();
        assert!(branch.remove_pod(a, "uid-default-web-0").is_some());
        assert_eq!(check(&mut branch, &lonely, b), Ok(()));
    }
    assert_eq!(check(&mut s, &lonely, b), Err(Unfit::PodAntiAffinity));
    s.assert_indexes_consistent();
}

#[test]
fn affinity_namespace_selection() {
    let (mut s, n) = three_zones();
    s.set_namespace_labels("team-a", labels(&[("team", "a")]));
    s.set_namespace_labels("team-b", labels(&[("team", "b")]));
    let mut in_a = app("db-a", "db");
    in_a.namespace = "team-a".into();
    in_a.uid = "uid-db-a".into();
    place(&mut s, n[0], in_a);
    let mut in_b = app("db-b", "db");
    in_b.namespace = "team-b".into();
    in_b.uid = "uid-db-b".into();
    place(&mut s, n[2], in_b);

    let affine_in = |s: &mut Snapshot, namespaces: &[&str], selector: Option<LabelSelector>| {
        let mut p = app("web", "web");
        p.namespace = "team-a".into();
        let mut t = term("db", HOSTNAME);
        t.namespaces = namespaces.iter().map(|n| n.to_string()).collect();
        t.namespace_selector = selector;
        p.pod_affinity.push(t);
        fits_on(s, &p)
    };
    let mut affine = |namespaces: &[&str], selector| affine_in(&mut s, namespaces, selector);
    // No names and no selector: the pod's own namespace.
    assert_eq!(affine(&[], None), vec!["a1"]);
    assert_eq!(affine(&["team-b"], None), vec!["b1"]);
    // An empty selector selects every namespace.
    assert_eq!(
        affine(&[], Some(LabelSelector::default())),
        vec!["a1", "b1"]
    );
    // A selector is matched against namespace labels; names and selector are ORed.
    let team_b = LabelSelector::from_labels([("team", "b")]);
    assert_eq!(affine(&[], Some(team_b.clone())), vec!["b1"]);
    assert_eq!(affine(&["team-a"], Some(team_b)), vec!["a1", "b1"]);
    // Relabelling a namespace is seen by later checks.
    s.set_namespace_labels("team-a", labels(&[("team", "b")]));
    let team_b = LabelSelector::from_labels([("team", "b")]);
    assert_eq!(affine_in(&mut s, &[], Some(team_b)), vec!["a1", "b1"]);
}

#[test]
fn a_nil_label_selector_matches_no_pod() {
    let (mut s, n) = three_zones();
    place(&mut s, n[0], app("web-0", "web"));
    let mut t = term("web", HOSTNAME);
    t.label_selector = None;
    let mut anti = app("web-1", "web");
    anti.pod_anti_affinity.push(t.clone());
    assert_eq!(check(&mut s, &anti, n[0]), Ok(()));
    let mut affine = app("web-1", "web");
    affine.pod_affinity.push(t);
    assert!(fits_on(&mut s, &affine).is_empty());
}

#[test]
fn placed_pods_anti_affinity_repels_matching_pods() {
    let (mut s, n) = three_zones();
    let mut lonely = app("lonely", "db");
    lonely.pod_anti_affinity.push(term("web", ZONE));
    place(&mut s, n[0], lonely);
    let web = app("web", "web");
    assert_eq!(
        check(&mut s, &web, n[1]),
        Err(Unfit::ExistingPodAntiAffinity)
    );
    assert_eq!(fits_on(&mut s, &web), vec!["b1", "c1", "nozone"]);
    // Pods the term does not select are unaffected.
    assert_eq!(fits_on(&mut s, &app("api", "api")).len(), 5);
    // The term is scoped to the owner's namespace: the same labels elsewhere are fine.
    let mut elsewhere = app("web", "web");
    elsewhere.namespace = "other".into();
    assert_eq!(fits_on(&mut s, &elsewhere).len(), 5);
    // Removing the pod lifts the restriction.
    s.remove_pod(n[0], "uid-default-lonely");
    assert_eq!(fits_on(&mut s, &web).len(), 5);
}

#[test]
fn spread_is_checked_before_affinity() {
    let (mut s, n) = three_zones();
    place(&mut s, n[0], app("web-0", "web"));
    let mut p = app("web-1", "web");
    p.topology_spread.push(spread("web", ZONE, 1));
    p.pod_anti_affinity.push(term("web", HOSTNAME));
    assert_eq!(kind(&mut s, &p, n[0]), Some(UnfitKind::TopologySpread));
}

// ----- topology spread -----

fn zones_with(counts: [usize; 3]) -> (Snapshot, Vec<NodeId>) {
    let mut s = Snapshot::new();
    let ids: Vec<NodeId> = ["a", "b", "c"]
        .iter()
        .map(|z| add_node(&mut s, &format!("{z}1"), Some(z)))
        .collect();
    for (zone, count) in counts.iter().enumerate() {
        for i in 0..*count {
            place(&mut s, ids[zone], app(&format!("web-{zone}-{i}"), "web"));
        }
    }
    (s, ids)
}

#[test]
fn spread_max_skew_against_the_global_minimum() {
    let (mut s, _) = zones_with([2, 2, 1]);
    let mut p = app("new", "web");
    p.topology_spread.push(spread("web", ZONE, 1));
    assert_eq!(fits_on(&mut s, &p), vec!["c1"]);
    p.topology_spread[0].max_skew = 2;
    assert_eq!(fits_on(&mut s, &p).len(), 3);
    // A pod the selector does not match does not count itself: 2 + 0 - 1 is within the skew.
    let mut other = app("new", "api");
    other.topology_spread.push(spread("web", ZONE, 1));
    assert_eq!(fits_on(&mut s, &other).len(), 3);
    let (mut s, _) = zones_with([3, 2, 1]);
    assert_eq!(fits_on(&mut s, &other), vec!["b1", "c1"]);
}

#[test]
fn spread_ignores_schedule_anyway_and_counts_only_matching_live_pods_of_the_namespace() {
    let (mut s, n) = zones_with([1, 1, 0]);
    let mut p = app("new", "web");
    p.topology_spread.push(spread("web", ZONE, 1));
    assert_eq!(fits_on(&mut s, &p), vec!["c1"]);
    // Pods in another namespace, pods not matching, and terminating pods are not counted.
    let mut foreign = app("foreign", "web");
    foreign.namespace = "other".into();
    place(&mut s, n[2], foreign);
    place(&mut s, n[2], app("api", "api"));
    let mut leaving = app("leaving", "web");
    leaving.deletion_time = Some(Timestamp::from_secs(1));
    place(&mut s, n[2], leaving);
    assert_eq!(fits_on(&mut s, &p), vec!["c1"]);
    p.topology_spread[0].when_unsatisfiable = UnsatisfiableAction::ScheduleAnyway;
    assert_eq!(fits_on(&mut s, &p).len(), 3);
}

#[test]
fn spread_rejects_nodes_missing_the_key() {
    let (mut s, _) = zones_with([0, 0, 0]);
    let bare = add_node(&mut s, "bare", None);
    let mut p = app("new", "web");
    p.topology_spread.push(spread("web", ZONE, 1));
    assert_eq!(
        check(&mut s, &p, bare),
        Err(Unfit::TopologySpreadMissingLabel {
            topology_key: ZONE.into()
        })
    );
    assert!(!check(&mut s, &p, bare).unwrap_err().is_local_to_node());
}

#[test]
fn spread_min_domains_treats_the_minimum_as_zero_when_domains_are_missing() {
    let (mut s, _) = zones_with([1, 1, 1]);
    let mut p = app("new", "web");
    p.topology_spread.push(spread("web", ZONE, 1));
    assert_eq!(fits_on(&mut s, &p).len(), 3);
    p.topology_spread[0].min_domains = Some(3);
    assert_eq!(fits_on(&mut s, &p).len(), 3);
    // Four domains are wanted, three exist: the global minimum is 0, so 1 + 1 - 0 > 1.
    p.topology_spread[0].min_domains = Some(4);
    assert!(fits_on(&mut s, &p).is_empty());
    p.topology_spread[0].max_skew = 2;
    assert_eq!(fits_on(&mut s, &p).len(), 3);
}

#[test]
fn spread_node_affinity_policy_decides_which_domains_count() {
    let (mut s, _) = zones_with([1, 1, 0]);
    // Zone c is empty; the pod may only run in zones a and b.
    let d = add_node(&mut s, "d1", Some("d"));
    let mut p = app("new", "web");
    p.topology_spread.push(spread("web", ZONE, 1));
    p.required_node_affinity = Some(Box::new(NodeSelector {
        terms: vec![NodeSelectorTerm {
            match_expressions: vec![NodeRequirement {
                key: ZONE.into(),
                operator: NodeOperator::In,
                values: vec!["a".into(), "b".into(), "d".into()],
            }],
            match_fields: vec![],
        }],
    }));
    // Honor: domains a, b, d; d has no pods, so the minimum is 0 and only d is allowed.
    assert_eq!(fits_on(&mut s, &p), vec!["d1"]);
    s.remove_node(d);
    // Honor without d: domains a and b, minimum 1: both allowed.
    assert_eq!(fits_on(&mut s, &p), vec!["a1", "b1"]);
    // Ignore: the empty zone c counts, minimum 0: a and b are too full (c fails node affinity).
    p.topology_spread[0].node_affinity_policy = NodeInclusionPolicy::Ignore;
    assert!(fits_on(&mut s, &p).is_empty());
}

#[test]
fn spread_node_taints_policy_decides_which_domains_count() {
    let (mut s, _) = zones_with([1, 1, 0]);
    let mut tainted = node_in("c2", Some("c"));
    tainted
        .taints
        .push(Taint::new("dedicated", "x", TaintEffect::NoSchedule));
    // Replace zone c's only untainted node by a tainted one.
    let c1 = s.node_id("c1").unwrap();
    s.remove_node(c1);
    s.add_node(Arc::new(tainted));
    let mut p = app("new", "web");
    p.topology_spread.push(spread("web", ZONE, 1));
    // Ignore (default): zone c counts with 0 pods, so a and b are too full.
    assert!(fits_on(&mut s, &p).is_empty());
    p.topology_spread[0].node_taints_policy = NodeInclusionPolicy::Honor;
    assert_eq!(fits_on(&mut s, &p), vec!["a1", "b1"]);
}

#[test]
fn spread_counts_only_nodes_having_every_constraint_key() {
    let mut s = Snapshot::new();
    let a = add_node(&mut s, "a1", Some("a"));
    let mut rackless = node_in("b1", Some("b"));
    rackless.labels.remove(HOSTNAME);
    let b = s.add_node(Arc::new(rackless));
    place(&mut s, a, app("web-0", "web"));
    let mut p = app("new", "web");
    p.topology_spread.push(spread("web", ZONE, 1));
    // With zone only, zone b is a domain with 0 pods: a is too full.
    assert_eq!(fits_on(&mut s, &p), vec!["b1"]);
    // With a hostname constraint too, b1 (no hostname) forms no zone domain and is rejected.
    p.topology_spread.push(spread("web", HOSTNAME, 5));
    assert_eq!(fits_on(&mut s, &p), vec!["a1"]);
    assert_eq!(
        check(&mut s, &p, b),
        Err(Unfit::TopologySpreadMissingLabel {
            topology_key: HOSTNAME.into()
        })
    );
}

#[test]
fn spread_with_an_empty_selector_counts_nothing() {
    let (mut s, _) = zones_with([3, 0, 0]);
    let mut p = app("new", "web");
    let mut c = spread("web", ZONE, 1);
    c.label_selector = Some(LabelSelector::default());
    p.topology_spread.push(c);
    assert_eq!(fits_on(&mut s, &p).len(), 3);
}

#[test]
fn hostname_spread_fills_nodes_evenly() {
    let mut s = Snapshot::new();
    for i in 0..3 {
        add_node(&mut s, &format!("n{i}"), Some("a"));
    }
    let mut template = app("web", "web");
    template.topology_spread.push(spread("web", HOSTNAME, 1));
    let mut placed = Vec::new();
    for i in 0..6 {
        let mut p = template.clone();
        p.name = ferroscale_model::format_compact!("web-{i}");
        p.uid = ferroscale_model::format_compact!("uid-web-{i}");
        let id = find_node(&mut s, &p, 0).unwrap();
        placed.push(s.node(id).unwrap().node.name.clone());
        place(&mut s, id, p);
    }
    assert_eq!(placed, vec!["n0", "n1", "n2", "n0", "n1", "n2"]);
    s.assert_indexes_consistent();
}

// ----- indexes and branches -----

#[test]
fn verdicts_follow_branches_and_their_revert() {
    let (mut s, n) = three_zones();
    let mut p = app("web-1", "web");
    p.pod_anti_affinity.push(term("web", ZONE));
    p.topology_spread.push(spread("web", HOSTNAME, 1));
    assert_eq!(fits_on(&mut s, &p).len(), 5);
    {
        let mut outer = s.branch();
        place(&mut outer, n[0], app("web-0", "web"));
        assert_eq!(fits_on(&mut outer, &p), vec!["b1", "c1", "nozone"]);
        {
            let mut inner = outer.branch();
            let removed = inner.remove_node(n[2]);
            assert!(removed.is_empty());
            assert_eq!(fits_on(&mut inner, &p), vec!["c1", "nozone"]);
        }
        assert_eq!(fits_on(&mut outer, &p), vec!["b1", "c1", "nozone"]);
        outer.assert_indexes_consistent();
    }
    assert_eq!(fits_on(&mut s, &p).len(), 5);
    s.assert_indexes_consistent();
}

#[test]
fn affinity_operators_in_label_selectors() {
    let (mut s, n) = three_zones();
    place(&mut s, n[0], app("db", "db"));
    place(&mut s, n[2], app("cache", "cache"));
    let mut p = app("web", "web");
    p.pod_anti_affinity.push(PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Labels::new(),
            match_expressions: vec![LabelRequirement {
                key: "app".into(),
                operator: LabelOperator::In,
                values: vec!["db".into(), "cache".into()],
            }],
        }),
        namespaces: vec![],
        namespace_selector: None,
        topology_key: ZONE.into(),
    });
    assert_eq!(fits_on(&mut s, &p), vec!["c1", "nozone"]);
}

#[test]
fn repeated_checks_see_pods_placed_since_the_previous_check() {
    let (mut s, n) = three_zones();
    let web = app("web", "web");
    let mut spread_web = app("web", "web");
    spread_web.topology_spread.push(spread("web", ZONE, 1));
    // Plan both shapes once, with nothing placed.
    assert_eq!(fits_on(&mut s, &web).len(), 5);
    assert_eq!(fits_on(&mut s, &spread_web).len(), 4);
    // A pod arrives whose anti-affinity term the cached plans have never seen.
    let mut lonely = app("lonely", "db");
    lonely.pod_anti_affinity.push(term("web", HOSTNAME));
    place(&mut s, n[3], lonely);
    assert_eq!(
        check(&mut s, &web, n[3]),
        Err(Unfit::ExistingPodAntiAffinity)
    );
    // Spread counts follow placements too.
    place(&mut s, n[0], app("web-0", "web"));
    assert_eq!(fits_on(&mut s, &spread_web), vec!["b1"]);
    assert_eq!(find_node(&mut s, &spread_web, 0), Some(n[2]));
}

// ----- the scheduler profile (docs/behaviour.md SCHED-102–SCHED-104) -----

fn profile_without(plugins: &[FilterPlugin]) -> Arc<SchedulerProfile> {
    let mut p = SchedulerProfile::default();
    for plugin in plugins {
        p.set_enabled(*plugin, false);
    }
    Arc::new(p)
}

#[test]
fn a_disabled_filter_no_longer_rejects_in_check_or_find_node() {
    let mut s = Snapshot::new();
    let mut tainted = node_in("tainted", None);
    tainted
        .taints
        .push(Taint::new("dedicated", "db", TaintEffect::NoSchedule));
    let tainted = s.add_node(Arc::new(tainted));
    let mut p = pod("p");
    p.node_selector = labels(&[("disk", "ssd")]);
    assert_eq!(kind(&mut s, &p, tainted), Some(UnfitKind::TaintToleration));
    assert_eq!(find_node(&mut s, &p, 0), None);

    s.set_scheduler_profile(profile_without(&[FilterPlugin::TaintToleration]));
    assert_eq!(kind(&mut s, &p, tainted), Some(UnfitKind::NodeAffinity));
    s.set_scheduler_profile(profile_without(&[
        FilterPlugin::TaintToleration,
        FilterPlugin::NodeAffinity,
    ]));
    assert_eq!(check(&mut s, &p, tainted), Ok(()));
    assert_eq!(find_node(&mut s, &p, 0), Some(tainted));
    // Back to the default profile: rejected again.
    s.set_scheduler_profile(Arc::new(SchedulerProfile::default()));
    assert_eq!(find_node(&mut s, &p, 0), None);
}

#[test]
fn disabling_resource_fit_or_unschedulable_bypasses_the_capacity_summary() {
    let mut s = Snapshot::new();
    let mut cordoned = node_in("cordoned", None);
    cordoned.unschedulable = true;
    let cordoned = s.add_node(Arc::new(cordoned));
    let small = add_node(&mut s, "small", None);
    let mut big = pod("big");
    big.requests = Resources::new(64_000, 1 << 20);
    assert_eq!(find_node(&mut s, &big, 0), None);

    s.set_scheduler_profile(profile_without(&[FilterPlugin::NodeResourcesFit]));
    assert_eq!(find_node(&mut s, &big, 0), Some(small));
    assert_eq!(check(&mut s, &big, cordoned), Err(Unfit::NodeUnschedulable));

    s.set_scheduler_profile(profile_without(&[
        FilterPlugin::NodeResourcesFit,
        FilterPlugin::NodeUnschedulable,
    ]));
    assert_eq!(find_node(&mut s, &big, 0), Some(cordoned));
}

#[test]
fn disabled_inter_pod_filters_ignore_spread_and_anti_affinity() {
    let (mut s, ids) = zones_with([2, 0, 0]);
    let mut p = app("new", "web");
    p.topology_spread.push(spread("web", ZONE, 1));
    p.pod_anti_affinity.push(term("web", HOSTNAME));
    assert_eq!(kind(&mut s, &p, ids[0]), Some(UnfitKind::TopologySpread));
    s.set_scheduler_profile(profile_without(&[FilterPlugin::PodTopologySpread]));
    assert_eq!(kind(&mut s, &p, ids[0]), Some(UnfitKind::PodAntiAffinity));
    s.set_scheduler_profile(profile_without(&[
        FilterPlugin::PodTopologySpread,
        FilterPlugin::InterPodAffinity,
    ]));
    assert_eq!(check(&mut s, &p, ids[0]), Ok(()));
    assert_eq!(find_node(&mut s, &p, 0), Some(ids[0]));
}

#[test]
fn ignored_extended_resources_are_not_checked() {
    let mut s = Snapshot::new();
    let a = add_node(&mut s, "a", None);
    let mut p = pod("p");
    p.requests.set("example.com/dongle", 1);
    p.requests.set("fpga.example.org/slot", 2);
    assert_eq!(
        check(&mut s, &p, a),
        Err(Unfit::InsufficientResource("example.com/dongle".into()))
    );
    let mut profile = SchedulerProfile::default();
    profile.ignored_resources = vec!["example.com/dongle".into()];
    s.set_scheduler_profile(Arc::new(profile.clone()));
    assert_eq!(
        check(&mut s, &p, a),
        Err(Unfit::InsufficientResource("fpga.example.org/slot".into()))
    );
    profile.ignored_resource_groups = vec!["fpga.example.org".into()];
    s.set_scheduler_profile(Arc::new(profile));
    assert_eq!(check(&mut s, &p, a), Ok(()));
    assert_eq!(find_node(&mut s, &p, 0), Some(a));
    // Built-in resources are never ignored.
    p.requests.cpu_milli = 64_000;
    assert_eq!(find_node(&mut s, &p, 0), None);
}

fn replica(name: &str, set: &str) -> Pod {
    let mut p = app(name, "web");
    p.owner_references.push(ferroscale_model::OwnerRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: set.into(),
        uid: format!("uid-{set}"),
        controller: true,
    });
    p
}

fn zone_defaults(action: UnsatisfiableAction) -> Arc<SchedulerProfile> {
    let mut profile = SchedulerProfile::default();
    profile.spread_defaulting = SpreadDefaulting::List;
    profile.default_constraints = vec![TopologySpreadConstraint {
        when_unsatisfiable: action,
        label_selector: None,
        ..spread("unused", ZONE, 1)
    }];
    Arc::new(profile)
}

#[test]
fn default_spread_constraints_count_the_pods_of_the_same_controller() {
    let mut s = Snapshot::new();
    let ids: Vec<NodeId> = ["a", "b", "c"]
        .iter()
        .map(|z| add_node(&mut s, &format!("{z}1"), Some(z)))
        .collect();
    for i in 0..2 {
        place(&mut s, ids[0], replica(&format!("web-{i}"), "web-1"));
    }
    place(&mut s, ids[1], replica("web-2", "web-1"));
    // Another ReplicaSet's pods with the same labels are not counted.
    for i in 0..3 {
        place(&mut s, ids[2], replica(&format!("other-{i}"), "web-2"));
    }
    let next = replica("web-3", "web-1");
    assert_eq!(fits_on(&mut s, &next).len(), 3, "no constraints by default");

    s.set_scheduler_profile(zone_defaults(UnsatisfiableAction::DoNotSchedule));
    assert_eq!(fits_on(&mut s, &next), vec!["c1"]);
    assert_eq!(find_node(&mut s, &next, 0), Some(ids[2]));
    // The other ReplicaSet's pod sees its own counts: 3 in c, 0 elsewhere.
    assert_eq!(
        fits_on(&mut s, &replica("other-3", "web-2")),
        vec!["a1", "b1"]
    );
    // A pod with constraints of its own keeps them (here a soft one: no filtering at all).
    let mut own = replica("web-4", "web-1");
    own.topology_spread.push(TopologySpreadConstraint {
        when_unsatisfiable: UnsatisfiableAction::ScheduleAnyway,
        ..spread("web", ZONE, 1)
    });
    assert_eq!(fits_on(&mut s, &own).len(), 3);
    // A pod without a ReplicaSet, StatefulSet or ReplicationController gets no defaults.
    assert_eq!(fits_on(&mut s, &app("bare", "web")).len(), 3);
    let mut job_pod = replica("job", "web-1");
    job_pod.owner_references[0].kind = "Job".into();
    job_pod.owner_references[0].api_version = "batch/v1".into();
    assert_eq!(fits_on(&mut s, &job_pod).len(), 3);
    // ScheduleAnyway defaults (like the system defaults) never reject.
    s.set_scheduler_profile(zone_defaults(UnsatisfiableAction::ScheduleAnyway));
    assert_eq!(fits_on(&mut s, &next).len(), 3);
    // Nor do DoNotSchedule defaults once PodTopologySpread is disabled.
    let mut disabled = (*zone_defaults(UnsatisfiableAction::DoNotSchedule)).clone();
    disabled.set_enabled(FilterPlugin::PodTopologySpread, false);
    s.set_scheduler_profile(Arc::new(disabled));
    assert_eq!(fits_on(&mut s, &next).len(), 3);
    s.assert_indexes_consistent();
}
