//! Tests of the DynamicResources filter and of the DRA state of the snapshot. Each names the
//! statement of docs/dra.md it checks.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferroscale_model::dra::MAX_CLAIM_CONSUMERS;
use ferroscale_model::{
    AllocatedDevice, AllocationMode, ClaimAllocation, ClaimConsumer, ClaimSpec, Device,
    DeviceAttribute, DeviceClass, DeviceConstraint, DeviceRequest, DeviceRequestKind, DeviceScope,
    DeviceSubRequest, DraObjects, ExactDeviceRequest, Node, NodeOperator, NodeRequirement,
    NodeSelector, NodeSelectorTerm, Pod, PodClaimSource, PodResourceClaim, PodResourceClaimStatus,
    Quantity, ResourceClaim, ResourceSlice, Resources,
};

use crate::{DraReason, NodeId, PoolUtilization, Snapshot, Unfit, UnfitKind, check, find_node};

const DRIVER: &str = "gpu.example.com";
const NS: &str = "default";

fn gpu(name: &str, model: &str, numa: i64) -> Device {
    Device {
        name: name.into(),
        attributes: BTreeMap::from([
            (
                format!("{DRIVER}/model"),
                DeviceAttribute::String(model.into()),
            ),
            (format!("{DRIVER}/numa"), DeviceAttribute::Int(numa)),
            (
                format!("{DRIVER}/driverVersion"),
                DeviceAttribute::Version("550.54.15".into()),
            ),
        ]),
        capacity: BTreeMap::from([(format!("{DRIVER}/memory"), Quantity::parse("40Gi").unwrap())]),
        scope: None,
    }
}

/// A node-local slice of `count` A100s on `node`, numa nodes 0 and 1 alternating.
fn local_slice(node: &str, count: usize) -> ResourceSlice {
    ResourceSlice {
        name: format!("{node}-gpus"),
        driver: DRIVER.into(),
        pool: node.into(),
        pool_generation: 1,
        pool_slice_count: 1,
        scope: DeviceScope::Node(node.into()),
        per_device_node_selection: false,
        devices: (0..count)
            .map(|i| gpu(&format!("gpu-{i}"), "a100", (i % 2) as i64))
            .collect(),
    }
}

fn class(name: &str, selectors: &[&str]) -> Arc<DeviceClass> {
    Arc::new(DeviceClass {
        name: name.into(),
        selectors: selectors.iter().map(|s| s.to_string()).collect(),
        extended_resource_name: None,
    })
}

fn gpu_class() -> Arc<DeviceClass> {
    class("gpu", &[&format!("device.driver == '{DRIVER}'")])
}

fn exact(class: &str, mode: AllocationMode) -> ExactDeviceRequest {
    ExactDeviceRequest {
        device_class_name: class.into(),
        selectors: Vec::new(),
        allocation_mode: mode,
        admin_access: false,
    }
}

fn request(name: &str, exact: ExactDeviceRequest) -> DeviceRequest {
    DeviceRequest {
        name: name.into(),
        kind: DeviceRequestKind::Exactly(exact),
    }
}

fn claim_with(name: &str, requests: Vec<DeviceRequest>) -> ResourceClaim {
    ResourceClaim {
        namespace: NS.into(),
        name: name.into(),
        uid: format!("uid-claim-{name}"),
        spec: ClaimSpec {
            requests,
            constraints: Vec::new(),
        },
        ..ResourceClaim::default()
    }
}

/// A claim for `count` devices of class `gpu`.
fn claim(name: &str, count: u32) -> ResourceClaim {
    claim_with(
        name,
        vec![request(
            "gpu",
            exact("gpu", AllocationMode::ExactCount(count)),
        )],
    )
}

fn pod_with(name: &str, claims: &[&str]) -> Pod {
    let mut pod = Pod::new(NS, name);
    pod.requests = Resources::new(100, 1 << 20);
    pod.resource_claims = claims
        .iter()
        .map(|c| PodResourceClaim {
            name: format!("entry-{c}"),
            source: PodClaimSource::Claim(c.to_string()),
        })
        .collect();
    pod
}

fn node(name: &str) -> Arc<Node> {
    let mut allocatable = Resources::new(16000, 64 << 30);
    allocatable.pods = 110;
    let mut node = Node::new(name, allocatable);
    node.labels.insert("pool".into(), "gpu".into());
    Arc::new(node)
}

struct Cluster {
    snapshot: Snapshot,
    nodes: Vec<NodeId>,
}

/// Nodes `n0`.. with `gpus[i]` local GPUs each, and the given objects besides the slices.
fn cluster(gpus: &[usize], claims: Vec<ResourceClaim>, extra: DraObjects) -> Cluster {
    let mut snapshot = Snapshot::new();
    let mut objects = extra;
    if objects.classes.is_empty() {
        objects.classes.push(gpu_class());
    }
    let mut nodes = Vec::new();
    for (i, count) in gpus.iter().enumerate() {
        let name = format!("n{i}");
        nodes.push(snapshot.add_node(node(&name)));
        if *count > 0 {
            objects.slices.push(Arc::new(local_slice(&name, *count)));
        }
    }
    objects.claims.extend(claims.into_iter().map(Arc::new));
    snapshot.set_dra_objects(&objects);
    Cluster { snapshot, nodes }
}

fn dra_unfit(result: Result<(), Unfit>) -> crate::DraUnfit {
    match result {
        Err(Unfit::Dra(unfit)) => unfit,
        other => panic!("expected a DynamicResources verdict, got {other:?}"),
    }
}

fn allocated_devices(s: &Snapshot, claim: &str) -> Vec<String> {
    s.claim_allocation(NS, claim)
        .map(|a| {
            a.devices
                .iter()
                .map(|d| format!("{}/{}", d.pool, d.device))
                .collect()
        })
        .unwrap_or_default()
}

/// DRA-101: a pod with a claim fits only a node with a free matching device; elsewhere the
/// reason is the scheduler's "cannot allocate all claims".
#[test]
fn a_claim_fits_only_where_a_matching_device_is_free() {
    let mut c = cluster(
        &[0, 1],
        vec![claim("c1", 1), claim("c2", 1)],
        DraObjects::default(),
    );
    let p1 = pod_with("p1", &["c1"]);
    let unfit = dra_unfit(check(&mut c.snapshot, &p1, c.nodes[0]));
    assert_eq!(unfit.to_string(), "cannot allocate all claims");
    assert_eq!(&*unfit.claim, "default/c1");
    assert!(
        unfit.detail().contains("the node has no devices"),
        "{}",
        unfit.detail()
    );
    assert_eq!(check(&mut c.snapshot, &p1, c.nodes[1]), Ok(()));
    assert_eq!(find_node(&mut c.snapshot, &p1, 0), Some(c.nodes[1]));
    c.snapshot.add_pod(c.nodes[1], Arc::new(p1));
    assert_eq!(allocated_devices(&c.snapshot, "c1"), vec!["n1/gpu-0"]);
    // The only GPU is in use now.
    let p2 = pod_with("p2", &["c2"]);
    let unfit = dra_unfit(check(&mut c.snapshot, &p2, c.nodes[1]));
    assert_eq!(unfit.to_string(), "cannot allocate all claims");
    assert!(
        unfit
            .detail()
            .contains("0 of the 1 matching devices are free"),
        "{}",
        unfit.detail()
    );
    assert_eq!(find_node(&mut c.snapshot, &p2, 0), None);
    let unfit = Unfit::Dra(unfit);
    assert_eq!(unfit.kind(), UnfitKind::DynamicResources);
    assert!(!unfit.is_local_to_node());
}

/// DRA-102: the selector that no device passed is named in the detail of the verdict.
#[test]
fn the_detail_names_the_request_and_the_selector_no_device_passed() {
    let mut extra = DraObjects::default();
    extra.classes.push(gpu_class());
    let mut wants_h100 = exact("gpu", AllocationMode::ExactCount(1));
    wants_h100
        .selectors
        .push(format!("device.attributes['{DRIVER}'].model == 'h100'"));
    let mut c = cluster(
        &[2],
        vec![claim_with("c1", vec![request("big", wants_h100)])],
        extra,
    );
    let unfit = dra_unfit(check(&mut c.snapshot, &pod_with("p", &["c1"]), c.nodes[0]));
    match &*unfit.reason {
        DraReason::CannotAllocate {
            request, selector, ..
        } => {
            assert_eq!(request.as_deref(), Some("big"));
            assert_eq!(
                selector.as_deref(),
                Some("device.attributes['gpu.example.com'].model == 'h100'")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(unfit.detail().contains("request big"), "{}", unfit.detail());
    assert!(unfit.detail().contains("h100"), "{}", unfit.detail());
}

/// DRA-103: a claim that does not exist, a template claim not made yet, one not owned by the
/// pod, and one being deleted reject the pod on every node with the scheduler's words.
#[test]
fn claim_problems_reject_the_pod_everywhere() {
    let mut deleting = claim("going", 1);
    deleting.deleting = true;
    let mut foreign = claim("p-gpu-abc", 1);
    foreign.owner_pod_uid = Some("someone-else".into());
    let mut c = cluster(&[2, 2], vec![deleting, foreign], DraObjects::default());

    let missing = pod_with("p", &["nope"]);
    for n in c.nodes.clone() {
        let unfit = dra_unfit(check(&mut c.snapshot, &missing, n));
        assert_eq!(
            unfit.to_string(),
            "resourceclaim.resource.k8s.io \"nope\" not found"
        );
        assert!(unfit.is_per_pod());
    }

    let mut templated = Pod::new(NS, "p");
    templated.resource_claims.push(PodResourceClaim {
        name: "gpu".into(),
        source: PodClaimSource::Template("gpu-template".into()),
    });
    let unfit = dra_unfit(check(&mut c.snapshot, &templated, c.nodes[0]));
    assert_eq!(
        unfit.to_string(),
        "pod \"default/p\": ResourceClaim not created yet"
    );

    templated
        .resource_claim_statuses
        .push(PodResourceClaimStatus {
            name: "gpu".into(),
            claim_name: Some("p-gpu-abc".into()),
        });
    let unfit = dra_unfit(check(&mut c.snapshot, &templated, c.nodes[0]));
    assert_eq!(
        unfit.to_string(),
        "ResourceClaim default/p-gpu-abc was not created for pod default/p (pod is not owner)"
    );

    // A status entry without a claim name: no claim is needed for that entry.
    templated.resource_claim_statuses[0].claim_name = None;
    assert_eq!(check(&mut c.snapshot, &templated, c.nodes[0]), Ok(()));

    let unfit = dra_unfit(check(
        &mut c.snapshot,
        &pod_with("p", &["going"]),
        c.nodes[1],
    ));
    assert_eq!(
        unfit.to_string(),
        "resourceclaim \"going\" is being deleted"
    );
    assert_eq!(
        find_node(&mut c.snapshot, &pod_with("p", &["going"]), 0),
        None
    );
}

/// DRA-104: a template claim made for the pod (owned by it) is allocated like any other.
#[test]
fn a_template_claim_owned_by_the_pod_is_allocated() {
    let mut owned = claim("p-gpu-abc", 1);
    owned.owner_pod_uid = Some("uid-default-p".into());
    let mut c = cluster(&[1], vec![owned], DraObjects::default());
    let mut pod = Pod::new(NS, "p");
    pod.resource_claims.push(PodResourceClaim {
        name: "gpu".into(),
        source: PodClaimSource::Template("gpu-template".into()),
    });
    pod.resource_claim_statuses.push(PodResourceClaimStatus {
        name: "gpu".into(),
        claim_name: Some("p-gpu-abc".into()),
    });
    assert_eq!(check(&mut c.snapshot, &pod, c.nodes[0]), Ok(()));
    c.snapshot.add_pod(c.nodes[0], Arc::new(pod));
    assert_eq!(
        allocated_devices(&c.snapshot, "p-gpu-abc"),
        vec!["n0/gpu-0"]
    );
    assert_eq!(
        c.snapshot.claim_reserved_for(NS, "p-gpu-abc"),
        &[ClaimConsumer {
            resource: "pods".into(),
            name: "p".into(),
            uid: "uid-default-p".into(),
        }]
    );
}

fn allocated_on(node: &str, devices: &[&str]) -> ClaimAllocation {
    ClaimAllocation {
        devices: devices
            .iter()
            .map(|d| AllocatedDevice {
                request: "gpu".into(),
                driver: DRIVER.into(),
                pool: node.into(),
                device: d.to_string(),
                admin_access: false,
            })
            .collect(),
        node_selector: Some(NodeSelector {
            terms: vec![NodeSelectorTerm {
                match_expressions: Vec::new(),
                match_fields: vec![NodeRequirement {
                    key: "metadata.name".into(),
                    operator: NodeOperator::In,
                    values: vec![node.into()],
                }],
            }],
        }),
    }
}

fn consumer(i: usize) -> ClaimConsumer {
    ClaimConsumer {
        resource: "pods".into(),
        name: format!("user-{i}"),
        uid: format!("uid-user-{i}"),
    }
}

/// DRA-105: a shared claim that is allocated takes its pods to the nodes its allocation
/// reaches ("resourceclaim not available on the node" elsewhere); a claim already reserved
/// for 256 pods takes no more ("resourceclaim in use").
#[test]
fn an_allocated_shared_claim_pins_its_pods_and_has_room_for_256() {
    let mut shared = claim("shared", 1);
    shared.allocation = Some(allocated_on("n1", &["gpu-0"]));
    shared.reserved_for = vec![consumer(0)];
    let mut full = claim("full", 1);
    full.allocation = Some(allocated_on("n1", &["gpu-1"]));
    full.reserved_for = (0..MAX_CLAIM_CONSUMERS).map(consumer).collect();
    let mut c = cluster(&[2, 2], vec![shared, full], DraObjects::default());

    let p = pod_with("p", &["shared"]);
    let unfit = dra_unfit(check(&mut c.snapshot, &p, c.nodes[0]));
    assert_eq!(unfit.to_string(), "resourceclaim not available on the node");
    assert_eq!(check(&mut c.snapshot, &p, c.nodes[1]), Ok(()));
    c.snapshot.add_pod(c.nodes[1], Arc::new(p));
    assert_eq!(c.snapshot.claim_reserved_for(NS, "shared").len(), 2);
    // Its device stays the claim's: nothing else was allocated.
    assert_eq!(allocated_devices(&c.snapshot, "shared"), vec!["n1/gpu-0"]);

    let q = pod_with("q", &["full"]);
    let unfit = dra_unfit(check(&mut c.snapshot, &q, c.nodes[1]));
    assert_eq!(unfit.to_string(), "resourceclaim in use");
    // One of its 256 pods is checked again (as in a drain simulation): it still fits.
    let mut user = pod_with("user-3", &["full"]);
    user.uid = "uid-user-3".into();
    assert_eq!(check(&mut c.snapshot, &user, c.nodes[1]), Ok(()));
}

/// DRA-106: two pending pods sharing one claim: the first allocates it on its node, the second
/// then goes to that node only.
#[test]
fn a_pending_shared_claim_is_allocated_once_and_followed() {
    let mut c = cluster(&[1, 1], vec![claim("shared", 1)], DraObjects::default());
    let a = pod_with("a", &["shared"]);
    let b = pod_with("b", &["shared"]);
    let first = find_node(&mut c.snapshot, &a, 1).unwrap();
    assert_eq!(first, c.nodes[1]);
    c.snapshot.add_pod(first, Arc::new(a));
    assert_eq!(find_node(&mut c.snapshot, &b, 0), Some(c.nodes[1]));
    let unfit = dra_unfit(check(&mut c.snapshot, &b, c.nodes[0]));
    assert_eq!(unfit.to_string(), "resourceclaim not available on the node");
}

/// DRA-107: a request naming a class that does not exist rejects the pod everywhere.
#[test]
fn a_missing_class_rejects_the_pod() {
    let mut c = cluster(
        &[1],
        vec![claim_with(
            "c1",
            vec![request("gpu", exact("tpu", AllocationMode::ExactCount(1)))],
        )],
        DraObjects::default(),
    );
    let unfit = dra_unfit(check(&mut c.snapshot, &pod_with("p", &["c1"]), c.nodes[0]));
    assert_eq!(
        unfit.to_string(),
        "request gpu: device class tpu does not exist"
    );
    assert!(unfit.is_per_pod());
}

/// DRA-108: an exact count needs that many free devices on one node.
#[test]
fn an_exact_count_needs_that_many_free_devices() {
    let mut c = cluster(
        &[2, 4],
        vec![claim("four", 4), claim("two", 2), claim("one", 1)],
        DraObjects::default(),
    );
    let four = pod_with("four", &["four"]);
    assert!(check(&mut c.snapshot, &four, c.nodes[0]).is_err());
    assert_eq!(find_node(&mut c.snapshot, &four, 0), Some(c.nodes[1]));
    let two = pod_with("two", &["two"]);
    assert_eq!(check(&mut c.snapshot, &two, c.nodes[0]), Ok(()));
    c.snapshot.add_pod(c.nodes[0], Arc::new(two));
    assert_eq!(
        allocated_devices(&c.snapshot, "two"),
        vec!["n0/gpu-0", "n0/gpu-1"]
    );
    assert!(check(&mut c.snapshot, &pod_with("one", &["one"]), c.nodes[0]).is_err());
}

/// DRA-109: `All` takes every matching device the node reaches, and needs at least one.
#[test]
fn all_takes_every_matching_device_and_needs_one() {
    let claims = vec![
        claim_with(
            "all",
            vec![request("gpus", exact("gpu", AllocationMode::All))],
        ),
        claim("one", 1),
    ];
    let mut c = cluster(&[0, 3], claims, DraObjects::default());
    let all = pod_with("all", &["all"]);
    assert!(check(&mut c.snapshot, &all, c.nodes[0]).is_err());
    assert_eq!(check(&mut c.snapshot, &all, c.nodes[1]), Ok(()));
    c.snapshot.add_pod(c.nodes[1], Arc::new(all));
    assert_eq!(allocated_devices(&c.snapshot, "all").len(), 3);
    assert!(check(&mut c.snapshot, &pod_with("one", &["one"]), c.nodes[1]).is_err());
}

/// DRA-109, DRA-110: `All` on a node whose pool is being updated (not all of its slices published) is
/// refused with the allocator's message; an exact count only skips the incomplete pool.
#[test]
fn all_is_refused_while_a_pool_is_incomplete() {
    let mut extra = DraObjects::default();
    let mut incomplete = local_slice("n0", 2);
    incomplete.pool_slice_count = 2;
    extra.slices.push(Arc::new(incomplete));
    let claims = vec![
        claim_with(
            "all",
            vec![request("gpus", exact("gpu", AllocationMode::All))],
        ),
        claim("one", 1),
    ];
    let mut c = cluster(&[0], claims, extra);
    let unfit = dra_unfit(check(&mut c.snapshot, &pod_with("a", &["all"]), c.nodes[0]));
    assert_eq!(
        unfit.to_string(),
        "claim default/all, request gpus: asks for all devices, but resource pool \
         gpu.example.com/n0 is currently being updated"
    );
    let unfit = dra_unfit(check(&mut c.snapshot, &pod_with("b", &["one"]), c.nodes[0]));
    assert_eq!(unfit.to_string(), "cannot allocate all claims");
}

/// DRA-110: only the highest generation of a pool counts.
#[test]
fn only_the_newest_generation_of_a_pool_counts() {
    let mut extra = DraObjects::default();
    let mut old = local_slice("n0", 4);
    old.name = "old".into();
    let mut new = local_slice("n0", 1);
    new.pool_generation = 2;
    extra.slices.push(Arc::new(old));
    extra.slices.push(Arc::new(new));
    let mut c = cluster(&[0], vec![claim("two", 2), claim("one", 1)], extra);
    assert!(check(&mut c.snapshot, &pod_with("a", &["two"]), c.nodes[0]).is_err());
    assert_eq!(
        check(&mut c.snapshot, &pod_with("b", &["one"]), c.nodes[0]),
        Ok(())
    );
    assert_eq!(
        c.snapshot.device_pools(c.nodes[0]),
        vec![PoolUtilization {
            driver: DRIVER.into(),
            pool: "n0".into(),
            total: 1,
            allocated: 0,
        }]
    );
}

/// DRA-111: `firstAvailable` alternatives are tried in order; the result names the one taken.
#[test]
fn first_available_takes_the_first_alternative_that_fits() {
    let mut extra = DraObjects::default();
    extra.classes.push(gpu_class());
    extra.classes.push(class(
        "h100",
        &[&format!("device.attributes['{DRIVER}'].model == 'h100'")],
    ));
    let alternatives = DeviceRequest {
        name: "accel".into(),
        kind: DeviceRequestKind::FirstAvailable(vec![
            DeviceSubRequest {
                name: "fast".into(),
                request: exact("h100", AllocationMode::ExactCount(1)),
            },
            DeviceSubRequest {
                name: "pair".into(),
                request: exact("gpu", AllocationMode::ExactCount(2)),
            },
            DeviceSubRequest {
                name: "single".into(),
                request: exact("gpu", AllocationMode::ExactCount(1)),
            },
        ]),
    };
    let mut c = cluster(&[1, 3], vec![claim_with("c", vec![alternatives])], extra);
    let p = pod_with("p", &["c"]);
    assert_eq!(check(&mut c.snapshot, &p, c.nodes[0]), Ok(()));
    c.snapshot.add_pod(c.nodes[1], Arc::new(p));
    let allocation = c.snapshot.claim_allocation(NS, "c").unwrap();
    let requests: Vec<&str> = allocation
        .devices
        .iter()
        .map(|d| d.request.as_str())
        .collect();
    assert_eq!(requests, vec!["accel/pair", "accel/pair"]);
}

/// DRA-112: admin access may use devices in use by other claims, and does not take them.
#[test]
fn admin_access_uses_devices_in_use_without_taking_them() {
    let mut taken = claim("taken", 1);
    taken.allocation = Some(allocated_on("n0", &["gpu-0"]));
    taken.reserved_for = vec![consumer(0)];
    let mut admin = exact("gpu", AllocationMode::ExactCount(1));
    admin.admin_access = true;
    let claims = vec![
        taken,
        claim_with("monitor", vec![request("gpu", admin)]),
        claim("other", 1),
    ];
    let mut c = cluster(&[1], claims, DraObjects::default());
    assert!(check(&mut c.snapshot, &pod_with("o", &["other"]), c.nodes[0]).is_err());
    let monitor = pod_with("m", &["monitor"]);
    assert_eq!(check(&mut c.snapshot, &monitor, c.nodes[0]), Ok(()));
    c.snapshot.add_pod(c.nodes[0], Arc::new(monitor));
    let allocation = c.snapshot.claim_allocation(NS, "monitor").unwrap();
    assert!(allocation.devices[0].admin_access);
    assert_eq!(
        c.snapshot.device_pools(c.nodes[0])[0].allocated,
        1,
        "the admin allocation does not count as a use"
    );
}

/// DRA-113: `matchAttribute` and `distinctAttribute` constraints hold across the requests
/// they name, backtracking over earlier picks when needed.
#[test]
fn constraints_choose_devices_that_agree() {
    // Four GPUs on numa 0, 1, 0, 1; gpu-2 is in use. The first pick for `a` (gpu-0, numa 0)
    // leaves `b` no device on numa 0, so the allocator goes back and takes gpu-1 and gpu-3.
    let mut taken = claim("taken", 1);
    taken.allocation = Some(allocated_on("n0", &["gpu-2"]));
    taken.reserved_for = vec![consumer(0)];
    let mut same_numa = claim_with(
        "same",
        vec![
            request("a", exact("gpu", AllocationMode::ExactCount(1))),
            request("b", exact("gpu", AllocationMode::ExactCount(1))),
        ],
    );
    same_numa.spec.constraints.push(DeviceConstraint {
        requests: vec!["a".into(), "b".into()],
        match_attribute: Some(format!("{DRIVER}/numa")),
        distinct_attribute: None,
    });
    let mut spread = claim("spread", 2);
    spread.spec.constraints.push(DeviceConstraint {
        requests: Vec::new(),
        match_attribute: None,
        distinct_attribute: Some(format!("{DRIVER}/numa")),
    });
    let mut three_distinct = claim("three", 3);
    three_distinct.spec.constraints = spread.spec.constraints.clone();
    let claims = vec![taken, same_numa, spread, three_distinct];
    let mut c = cluster(&[4], claims, DraObjects::default());

    let p = pod_with("p", &["same"]);
    assert_eq!(check(&mut c.snapshot, &p, c.nodes[0]), Ok(()));
    {
        let mut branch = c.snapshot.branch();
        branch.add_pod(c.nodes[0], Arc::new(p));
        assert_eq!(
            allocated_devices(&branch, "same"),
            vec!["n0/gpu-1", "n0/gpu-3"]
        );
    }
    let q = pod_with("q", &["spread"]);
    assert_eq!(check(&mut c.snapshot, &q, c.nodes[0]), Ok(()));
    c.snapshot.add_pod(c.nodes[0], Arc::new(q));
    assert_eq!(
        allocated_devices(&c.snapshot, "spread"),
        vec!["n0/gpu-0", "n0/gpu-1"]
    );
    // Only two numa nodes: three distinct values cannot exist.
    let r = pod_with("r", &["three"]);
    let unfit = dra_unfit(check(&mut c.snapshot, &r, c.nodes[0]));
    assert_eq!(unfit.to_string(), "cannot allocate all claims");
}

/// DRA-114: devices of pool-wide slices (all nodes, node selector, per-device selection) reach
/// the nodes their scope selects, and a device used from one node is used for all.
#[test]
fn pool_wide_devices_reach_the_nodes_their_scope_selects() {
    let mut extra = DraObjects::default();
    let mut everywhere = local_slice("fabric", 1);
    everywhere.scope = DeviceScope::AllNodes;
    let mut rack = local_slice("rack", 1);
    rack.scope = DeviceScope::Selector(NodeSelector {
        terms: vec![NodeSelectorTerm {
            match_expressions: vec![NodeRequirement {
                key: "kubernetes.io/hostname".into(),
                operator: NodeOperator::In,
                values: vec!["n1".into()],
            }],
            match_fields: Vec::new(),
        }],
    });
    let mut per_device = local_slice("mixed", 1);
    per_device.scope = DeviceScope::AllNodes;
    per_device.per_device_node_selection = true;
    per_device.devices[0].scope = Some(DeviceScope::Node("n2".into()));
    extra.slices = vec![Arc::new(everywhere), Arc::new(rack), Arc::new(per_device)];
    let claims = vec![claim("a", 1), claim("b", 1), claim("c", 1), claim("d", 1)];
    let mut c = cluster(&[0, 0, 0], claims, extra);
    // Every node reaches the fabric device; it is used once for all of them.
    let a = pod_with("a", &["a"]);
    c.snapshot.add_pod(c.nodes[0], Arc::new(a));
    assert_eq!(allocated_devices(&c.snapshot, "a"), vec!["fabric/gpu-0"]);
    assert_eq!(
        c.snapshot.claim_allocation(NS, "a").unwrap().node_selector,
        None
    );
    assert!(check(&mut c.snapshot, &pod_with("b", &["b"]), c.nodes[0]).is_err());
    // n1 reaches the rack's device, n2 its own per-device one.
    assert_eq!(
        check(&mut c.snapshot, &pod_with("b", &["b"]), c.nodes[1]),
        Ok(())
    );
    c.snapshot
        .add_pod(c.nodes[1], Arc::new(pod_with("b", &["b"])));
    assert_eq!(allocated_devices(&c.snapshot, "b"), vec!["rack/gpu-0"]);
    assert_eq!(
        check(&mut c.snapshot, &pod_with("c", &["c"]), c.nodes[2]),
        Ok(())
    );
    c.snapshot
        .add_pod(c.nodes[2], Arc::new(pod_with("c", &["c"])));
    assert_eq!(allocated_devices(&c.snapshot, "c"), vec!["mixed/gpu-0"]);
    assert_eq!(find_node(&mut c.snapshot, &pod_with("d", &["d"]), 0), None);
    // Pool-wide devices belong to no node's pools.
    assert!(c.snapshot.device_pools(c.nodes[0]).is_empty());
}

/// DRA-115: selectors on attributes, capacity and versions, and their errors: a selector that
/// fails to evaluate rejects the pod naming claim, request and expression; one that does not
/// compile is refused before any node is looked at.
#[test]
fn cel_selectors_on_attributes_capacity_and_versions() {
    let mut extra = DraObjects::default();
    extra.classes.push(class(
        "big-gpu",
        &[
            &format!("device.driver == '{DRIVER}'"),
            &format!("device.capacity['{DRIVER}'].memory.compareTo(quantity('32Gi')) >= 0"),
        ],
    ));
    let mut recent = exact("big-gpu", AllocationMode::ExactCount(1));
    recent.selectors.push(format!(
        "device.attributes['{DRIVER}'].driverVersion.isGreaterThan(semver('550.0.0'))"
    ));
    let mut huge = exact("big-gpu", AllocationMode::ExactCount(1));
    huge.selectors.push(format!(
        "device.capacity['{DRIVER}'].memory.isGreaterThan(quantity('80Gi'))"
    ));
    let mut broken = exact("big-gpu", AllocationMode::ExactCount(1));
    broken
        .selectors
        .push(format!("device.attributes['{DRIVER}'].serial == 'x'"));
    let mut unknown = exact("big-gpu", AllocationMode::ExactCount(1));
    unknown.selectors.push("device.driver.frobnicate()".into());
    let claims = vec![
        claim_with("recent", vec![request("gpu", recent)]),
        claim_with("huge", vec![request("gpu", huge)]),
        claim_with("broken", vec![request("gpu", broken)]),
        claim_with("unknown", vec![request("gpu", unknown)]),
    ];
    let mut c = cluster(&[1], claims, extra);
    assert_eq!(
        check(&mut c.snapshot, &pod_with("a", &["recent"]), c.nodes[0]),
        Ok(())
    );
    let unfit = dra_unfit(check(
        &mut c.snapshot,
        &pod_with("b", &["huge"]),
        c.nodes[0],
    ));
    assert_eq!(unfit.to_string(), "cannot allocate all claims");

    let unfit = dra_unfit(check(
        &mut c.snapshot,
        &pod_with("c", &["broken"]),
        c.nodes[0],
    ));
    assert!(
        unfit
            .to_string()
            .starts_with("claim default/broken: selector #0: CEL runtime error:"),
        "{unfit}"
    );
    let detail = unfit.detail();
    assert!(detail.contains("request gpu"), "{detail}");
    assert!(detail.contains("serial == 'x'"), "{detail}");
    assert!(!unfit.is_per_pod());

    let unfit = dra_unfit(check(
        &mut c.snapshot,
        &pod_with("d", &["unknown"]),
        c.nodes[0],
    ));
    assert!(unfit.to_string().contains("CEL compile error"), "{unfit}");
    assert!(unfit.detail().contains("frobnicate"), "{}", unfit.detail());
    assert!(unfit.is_per_pod());
}

/// DRA-116: `add_pod` allocates and reserves, `remove_pod` releases, and a dropped branch
/// leaves the claims exactly as they were.
#[test]
fn branches_revert_allocations_and_reservations() {
    let mut c = cluster(
        &[2],
        vec![claim("c1", 1), claim("c2", 1)],
        DraObjects::default(),
    );
    let before = c.snapshot.dra_summary();
    {
        let mut branch = c.snapshot.branch();
        branch.add_pod(c.nodes[0], Arc::new(pod_with("p1", &["c1"])));
        branch.add_pod(c.nodes[0], Arc::new(pod_with("p2", &["c2"])));
        assert_eq!(branch.device_pools(c.nodes[0])[0].allocated, 2);
        branch.remove_pod(c.nodes[0], "uid-default-p1");
        assert_eq!(branch.claim_allocation(NS, "c1"), None);
        assert!(branch.claim_reserved_for(NS, "c1").is_empty());
        assert_eq!(branch.device_pools(c.nodes[0])[0].allocated, 1);
        branch.assert_indexes_consistent();
    }
    assert_eq!(c.snapshot.dra_summary(), before);
    assert_eq!(c.snapshot.device_pools(c.nodes[0])[0].allocated, 0);
    c.snapshot.assert_indexes_consistent();
}

/// DRA-116: a pod added where its claim cannot be allocated keeps the claim unallocated (but
/// reserved), and `add_pod` never fails.
#[test]
fn a_pod_added_without_room_keeps_its_claim_unallocated() {
    let mut c = cluster(&[0], vec![claim("c1", 1)], DraObjects::default());
    c.snapshot
        .add_pod(c.nodes[0], Arc::new(pod_with("p1", &["c1"])));
    assert_eq!(c.snapshot.claim_allocation(NS, "c1"), None);
    assert_eq!(c.snapshot.claim_reserved_for(NS, "c1").len(), 1);
    assert_eq!(c.snapshot.pod_count(), 1);
}

/// DRA-117: drain simulation: a pod removed from its node gives its claim back, and added on
/// another node gets it allocated there; removing a node releases its pods' claims too.
#[test]
fn a_drained_pods_claim_is_allocated_again_at_its_destination() {
    let mut allocated = claim("c1", 1);
    allocated.allocation = Some(allocated_on("n0", &["gpu-0"]));
    let mut c = cluster(&[1, 1], vec![allocated], DraObjects::default());
    let mut running = pod_with("p1", &["c1"]);
    running.node_name = Some("n0".into());
    c.snapshot.add_pod(c.nodes[0], Arc::new(running));
    assert_eq!(c.snapshot.claim_reserved_for(NS, "c1").len(), 1);
    {
        let mut drain = c.snapshot.branch();
        let pod = drain.remove_pod(c.nodes[0], "uid-default-p1").unwrap();
        assert_eq!(drain.claim_allocation(NS, "c1"), None);
        let mut moved = (*pod).clone();
        moved.node_name = None;
        assert_eq!(check(&mut drain, &moved, c.nodes[1]), Ok(()));
        drain.add_pod(c.nodes[1], Arc::new(moved));
        assert_eq!(allocated_devices(&drain, "c1"), vec!["n1/gpu-0"]);
        assert_eq!(drain.device_pools(c.nodes[0])[0].allocated, 0);
        assert_eq!(drain.device_pools(c.nodes[1])[0].allocated, 1);
    }
    assert_eq!(allocated_devices(&c.snapshot, "c1"), vec!["n0/gpu-0"]);
    {
        let mut branch = c.snapshot.branch();
        branch.remove_node(c.nodes[0]);
        assert_eq!(branch.claim_allocation(NS, "c1"), None);
    }
    assert_eq!(allocated_devices(&c.snapshot, "c1"), vec!["n0/gpu-0"]);
    c.snapshot.assert_indexes_consistent();
}

/// DRA-118: nodes that exist only in the simulation get their devices from the slices set for
/// them, and a later call for the same node replaces them.
#[test]
fn simulated_nodes_publish_the_slices_set_for_them() {
    let mut c = cluster(&[], vec![claim("c1", 2)], DraObjects::default());
    let copy = c.snapshot.add_node(node("template-1"));
    let template = local_slice("template", 1);
    c.snapshot.set_simulated_resource_slices(
        "template-1",
        vec![template.for_node_copy("template-1", "1")],
    );
    let p = pod_with("p", &["c1"]);
    assert!(check(&mut c.snapshot, &p, copy).is_err());
    let bigger = local_slice("template", 2);
    c.snapshot
        .set_simulated_resource_slices("template-1", vec![bigger.for_node_copy("template-1", "1")]);
    assert_eq!(check(&mut c.snapshot, &p, copy), Ok(()));
    // Setting the same slices again changes nothing, allocations included.
    c.snapshot.add_pod(copy, Arc::new(p.clone()));
    c.snapshot
        .set_simulated_resource_slices("template-1", vec![bigger.for_node_copy("template-1", "1")]);
    assert_eq!(c.snapshot.device_pools(copy)[0].allocated, 2);
    c.snapshot.remove_pod(copy, &p.uid);
    assert_eq!(
        c.snapshot.device_pools(copy),
        vec![PoolUtilization {
            driver: DRIVER.into(),
            pool: "template-1".into(),
            total: 2,
            allocated: 0,
        }]
    );
}

/// DRA-119: `device_pools` counts the devices of each pool of a node and those in use.
#[test]
fn device_pools_count_devices_in_total_and_in_use() {
    let mut extra = DraObjects::default();
    let mut nic = local_slice("n0", 2);
    nic.name = "n0-nics".into();
    nic.driver = "nic.example.com".into();
    nic.pool = "n0-nics".into();
    extra.slices.push(Arc::new(nic));
    let mut c = cluster(&[8], vec![claim("c1", 3)], extra);
    c.snapshot
        .add_pod(c.nodes[0], Arc::new(pod_with("p", &["c1"])));
    assert_eq!(
        c.snapshot.device_pools(c.nodes[0]),
        vec![
            PoolUtilization {
                driver: DRIVER.into(),
                pool: "n0".into(),
                total: 8,
                allocated: 3,
            },
            PoolUtilization {
                driver: "nic.example.com".into(),
                pool: "n0-nics".into(),
                total: 2,
                allocated: 0,
            },
        ]
    );
}

/// DRA-101, DRA-116: the allocation a check found is the one `add_pod` records, and pods
/// without claims never reach the DynamicResources filter (a node without devices suits them).
#[test]
fn add_pod_records_what_the_check_found_and_plain_pods_ignore_devices() {
    let mut c = cluster(&[2, 0], vec![claim("c1", 1)], DraObjects::default());
    let p = pod_with("p", &["c1"]);
    assert_eq!(check(&mut c.snapshot, &p, c.nodes[0]), Ok(()));
    c.snapshot.add_pod(c.nodes[0], Arc::new(p));
    assert_eq!(allocated_devices(&c.snapshot, "c1"), vec!["n0/gpu-0"]);
    let plain = pod_with("plain", &[]);
    assert_eq!(check(&mut c.snapshot, &plain, c.nodes[1]), Ok(()));
    assert_eq!(find_node(&mut c.snapshot, &plain, 1), Some(c.nodes[1]));
}

/// DRA-114: a slice's node selector matches the node's labels, and the allocation keeps it.
#[test]
fn selector_scoped_slices_follow_node_labels() {
    let mut extra = DraObjects::default();
    let mut pooled = local_slice("shared", 1);
    pooled.scope = DeviceScope::Selector(NodeSelector {
        terms: vec![NodeSelectorTerm {
            match_expressions: vec![NodeRequirement {
                key: "pool".into(),
                operator: NodeOperator::In,
                values: vec!["gpu".into()],
            }],
            match_fields: Vec::new(),
        }],
    });
    extra.slices.push(Arc::new(pooled));
    let mut c = cluster(&[0], vec![claim("c1", 1)], extra);
    assert_eq!(
        check(&mut c.snapshot, &pod_with("p", &["c1"]), c.nodes[0]),
        Ok(())
    );
    c.snapshot
        .add_pod(c.nodes[0], Arc::new(pod_with("p", &["c1"])));
    let selector = c
        .snapshot
        .claim_allocation(NS, "c1")
        .and_then(|a| a.node_selector.clone())
        .unwrap();
    assert_eq!(selector.terms[0].match_expressions[0].key, "pool");
}

/// DRA-111, DRA-113: a constraint may name one alternative of a `firstAvailable` request
/// (`<request>/<alternative>`); when that alternative cannot satisfy it, the next one is taken.
#[test]
fn a_constraint_on_an_alternative_moves_to_the_next_one() {
    let mut pair_then_single = claim_with(
        "c",
        vec![DeviceRequest {
            name: "accel".into(),
            kind: DeviceRequestKind::FirstAvailable(vec![
                DeviceSubRequest {
                    name: "pair".into(),
                    request: exact("gpu", AllocationMode::ExactCount(2)),
                },
                DeviceSubRequest {
                    name: "single".into(),
                    request: exact("gpu", AllocationMode::ExactCount(1)),
                },
            ]),
        }],
    );
    pair_then_single.spec.constraints.push(DeviceConstraint {
        requests: vec!["accel/pair".into()],
        match_attribute: Some(format!("{DRIVER}/numa")),
        distinct_attribute: None,
    });
    let mut other = pair_then_single.clone();
    other.name = "d".into();
    // n0's two GPUs are on different numa nodes; n1 has gpu-0 and gpu-2 on numa 0.
    let mut c = cluster(
        &[2, 3],
        vec![pair_then_single, other],
        DraObjects::default(),
    );
    c.snapshot
        .add_pod(c.nodes[0], Arc::new(pod_with("p", &["c"])));
    let requests: Vec<String> = c
        .snapshot
        .claim_allocation(NS, "c")
        .unwrap()
        .devices
        .iter()
        .map(|d| d.request.clone())
        .collect();
    assert_eq!(requests, vec!["accel/single"]);
    c.snapshot
        .add_pod(c.nodes[1], Arc::new(pod_with("q", &["d"])));
    assert_eq!(
        allocated_devices(&c.snapshot, "d"),
        vec!["n1/gpu-0", "n1/gpu-2"]
    );
}

/// DRA-110: a pool that names a device twice is invalid: nothing is allocated from it, and a
/// request for all devices says so.
#[test]
fn a_pool_with_a_duplicate_device_name_is_not_used() {
    let mut extra = DraObjects::default();
    let mut first = local_slice("n0", 1);
    first.pool_slice_count = 2;
    let mut second = first.clone();
    second.name = "n0-more".into();
    extra.slices = vec![Arc::new(first), Arc::new(second)];
    let claims = vec![
        claim("one", 1),
        claim_with(
            "all",
            vec![request("gpus", exact("gpu", AllocationMode::All))],
        ),
    ];
    let mut c = cluster(&[0], claims, extra);
    let unfit = dra_unfit(check(&mut c.snapshot, &pod_with("a", &["one"]), c.nodes[0]));
    assert_eq!(unfit.to_string(), "cannot allocate all claims");
    let unfit = dra_unfit(check(&mut c.snapshot, &pod_with("b", &["all"]), c.nodes[0]));
    assert!(
        unfit
            .to_string()
            .ends_with("resource pool gpu.example.com/n0 is currently invalid"),
        "{unfit}"
    );
}

/// DRA-116: a pod checked again after the claim state changed is checked on the state of now,
/// never on what its earlier check resolved: a shared claim another pod allocated elsewhere
/// meanwhile pins it there, a reservation that fills the claim turns it away, and a reverted
/// branch brings the earlier verdicts back.
#[test]
fn a_pod_checked_again_sees_the_claim_state_of_now() {
    // One unallocated claim shared by two pods, one GPU on each node.
    let mut c = cluster(&[1, 1], vec![claim("shared", 1)], DraObjects::default());
    let first = pod_with("first", &["shared"]);
    let second = pod_with("second", &["shared"]);
    assert_eq!(check(&mut c.snapshot, &second, c.nodes[1]), Ok(()));
    {
        let mut branch = c.snapshot.branch();
        branch.add_pod(c.nodes[0], Arc::new(first));
        let unfit = dra_unfit(check(&mut branch, &second, c.nodes[1]));
        assert_eq!(unfit.to_string(), "resourceclaim not available on the node");
        assert_eq!(check(&mut branch, &second, c.nodes[0]), Ok(()));
    }
    assert_eq!(check(&mut c.snapshot, &second, c.nodes[1]), Ok(()));

    // An allocated claim with room for one more pod.
    let mut almost_full = claim("almost-full", 1);
    almost_full.allocation = Some(allocated_on("n0", &["gpu-0"]));
    almost_full.reserved_for = (0..MAX_CLAIM_CONSUMERS - 1).map(consumer).collect();
    let mut c = cluster(&[1], vec![almost_full], DraObjects::default());
    let last = pod_with("last", &["almost-full"]);
    let late = pod_with("late", &["almost-full"]);
    assert_eq!(check(&mut c.snapshot, &late, c.nodes[0]), Ok(()));
    {
        let mut branch = c.snapshot.branch();
        branch.add_pod(c.nodes[0], Arc::new(last));
        let unfit = dra_unfit(check(&mut branch, &late, c.nodes[0]));
        assert_eq!(unfit.to_string(), "resourceclaim in use");
    }
    assert_eq!(check(&mut c.snapshot, &late, c.nodes[0]), Ok(()));
}

/// DRA-103: a pod checked again with other claim entries (same name and uid) is checked for
/// those entries.
#[test]
fn a_pod_with_other_claim_entries_is_checked_for_them() {
    let mut c = cluster(&[1], vec![claim("c1", 1)], DraObjects::default());
    assert_eq!(
        check(&mut c.snapshot, &pod_with("p", &["c1"]), c.nodes[0]),
        Ok(())
    );
    let unfit = dra_unfit(check(
        &mut c.snapshot,
        &pod_with("p", &["gone"]),
        c.nodes[0],
    ));
    assert_eq!(
        unfit.to_string(),
        "resourceclaim.resource.k8s.io \"gone\" not found"
    );
}

/// DRA-134: claims added to the snapshot after the cluster's (a fake pod's own copy of its
/// sample's template claim) are resolved like the cluster's: the owning pod fits and gets its
/// copy allocated, an allocated addition takes its devices, a name the snapshot knows already is
/// not added again, and a reverted branch drops what it added.
#[test]
fn claims_added_for_simulated_pods_are_resolved_and_reverted_with_their_branch() {
    let mut c = cluster(&[2], vec![claim("taken", 1)], DraObjects::default());
    let mut fake = Pod::new(NS, "p-copy-1");
    fake.resource_claims.push(PodResourceClaim {
        name: "gpu".into(),
        source: PodClaimSource::Template("gpu-template".into()),
    });
    fake.resource_claim_statuses.push(PodResourceClaimStatus {
        name: "gpu".into(),
        claim_name: Some("p-gpu-abc-copy-1".into()),
    });
    let mut copy = claim("p-gpu-abc-copy-1", 1);
    copy.owner_pod_uid = Some(fake.uid.to_string());
    let before = c.snapshot.dra_summary();
    {
        let mut branch = c.snapshot.branch();
        // Unknown before it is added.
        let unfit = dra_unfit(check(&mut branch, &fake, c.nodes[0]));
        assert_eq!(*unfit.reason, DraReason::ClaimNotFound);
        let mut held = claim("held", 1);
        held.allocation = Some(allocated_on("n0", &["gpu-1"]));
        let added = branch.add_resource_claims([
            Arc::new(copy.clone()),
            Arc::new(held),
            Arc::new(claim("taken", 2)),
        ]);
        assert_eq!(added, 2, "the known name is skipped");
        assert_eq!(branch.device_pools(c.nodes[0])[0].allocated, 1);
        assert_eq!(check(&mut branch, &fake, c.nodes[0]), Ok(()));
        branch.add_pod(c.nodes[0], Arc::new(fake.clone()));
        assert_eq!(
            allocated_devices(&branch, "p-gpu-abc-copy-1"),
            vec!["n0/gpu-0"]
        );
        assert_eq!(branch.device_pools(c.nodes[0])[0].allocated, 2);
        branch.assert_indexes_consistent();
    }
    assert_eq!(c.snapshot.dra_summary(), before);
    assert_eq!(c.snapshot.device_pools(c.nodes[0])[0].allocated, 0);
    let unfit = dra_unfit(check(&mut c.snapshot, &fake, c.nodes[0]));
    assert_eq!(*unfit.reason, DraReason::ClaimNotFound);
    c.snapshot.assert_indexes_consistent();

    // Outside a branch they stay: the loop's snapshot keeps them.
    assert_eq!(c.snapshot.add_resource_claims([Arc::new(copy)]), 1);
    assert_eq!(check(&mut c.snapshot, &fake, c.nodes[0]), Ok(()));
}
