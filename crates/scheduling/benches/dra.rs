//! The DynamicResources filter on 500 template copies of a GPU node with 8 devices each (the
//! shape of upstream's DRA scale-up benchmark), for pods whose claim asks for one device.
//!
//! * `dra/check_one_device` — one `check` of a claim pod on a node, cycling over the nodes
//!   (PreFilter work included: the pod's claims are resolved on every call).
//! * `dra/check_unsatisfiable` — the same for a claim asking for more devices than a node has
//!   (the verdict explains which request failed).
//! * `dra/scan_unsatisfiable` — `find_node` for a claim asking for more devices than a node
//!   has, so every node's allocator runs and fails; throughput is nodes per second.
//! * `dra/binpack_4000` — in a branch, `find_node` then `add_pod` for 4,000 claim pods until
//!   every device is allocated, then the branch is dropped (reverting every allocation).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferroscale_model::{
    AllocationMode, ClaimSpec, Device, DeviceAttribute, DeviceClass, DeviceRequest,
    DeviceRequestKind, DeviceScope, DraObjects, ExactDeviceRequest, Node, Pod, PodClaimSource,
    PodResourceClaim, Quantity, ResourceClaim, ResourceSlice, Resources,
};
use ferroscale_scheduling::{NodeId, Snapshot, check, find_node};

const NODES: usize = 500;
const DEVICES: usize = 8;
const DRIVER: &str = "gpu.example.com";

fn template_slice() -> ResourceSlice {
    ResourceSlice {
        name: "template-gpus".into(),
        driver: DRIVER.into(),
        pool: "template".into(),
        pool_generation: 1,
        pool_slice_count: 1,
        scope: DeviceScope::Node("template".into()),
        per_device_node_selection: false,
        devices: (0..DEVICES)
            .map(|i| Device {
                name: format!("gpu-{i}"),
                attributes: BTreeMap::from([
                    (
                        format!("{DRIVER}/model"),
                        DeviceAttribute::String("a100".into()),
                    ),
                    (format!("{DRIVER}/index"), DeviceAttribute::Int(i as i64)),
                ]),
                capacity: BTreeMap::from([(
                    format!("{DRIVER}/memory"),
                    Quantity::parse("40Gi").unwrap(),
                )]),
                scope: None,
            })
            .collect(),
    }
}

fn claim(name: &str, count: u32) -> Arc<ResourceClaim> {
    Arc::new(ResourceClaim {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        spec: ClaimSpec {
            requests: vec![DeviceRequest {
                name: "gpu".into(),
                kind: DeviceRequestKind::Exactly(ExactDeviceRequest {
                    device_class_name: "gpu".into(),
                    selectors: vec![format!("device.attributes['{DRIVER}'].model == 'a100'")],
                    allocation_mode: AllocationMode::ExactCount(count),
                    admin_access: false,
                }),
            }],
            constraints: Vec::new(),
        },
        ..ResourceClaim::default()
    })
}

fn pod(name: &str, claim: &str) -> Pod {
    let mut p = Pod::new("default", name);
    p.requests = Resources::new(100, 256 << 20);
    p.resource_claims.push(PodResourceClaim {
        name: "gpu".into(),
        source: PodClaimSource::Claim(claim.into()),
    });
    p
}

fn cluster(pods: usize) -> (Snapshot, Vec<NodeId>) {
    let mut s = Snapshot::new();
    let mut objects = DraObjects::default();
    objects.classes.push(Arc::new(DeviceClass {
        name: "gpu".into(),
        selectors: vec![
            format!("device.driver == '{DRIVER}'"),
            format!("device.capacity['{DRIVER}'].memory.compareTo(quantity('16Gi')) >= 0"),
        ],
        extended_resource_name: None,
    }));
    objects.claims = (0..pods).map(|i| claim(&format!("claim-{i}"), 1)).collect();
    objects.claims.push(claim("too-many", DEVICES as u32 + 1));
    s.set_dra_objects(&objects);
    let template = template_slice();
    let mut ids = Vec::new();
    for i in 0..NODES {
        let name = format!("template-copy-{i}");
        let mut allocatable = Resources::new(64_000, 512 << 30);
        allocatable.pods = 110;
        ids.push(s.add_node(Arc::new(Node::new(name.clone(), allocatable))));
        s.set_simulated_resource_slices(&name, vec![template.for_node_copy(&name, &i.to_string())]);
    }
    (s, ids)
}

fn dra(c: &mut Criterion) {
    let pods: Vec<Arc<Pod>> = (0..NODES * DEVICES)
        .map(|i| Arc::new(pod(&format!("p-{i}"), &format!("claim-{i}"))))
        .collect();
    let (mut s, ids) = cluster(pods.len());
    let mut group = c.benchmark_group("dra");
    group.throughput(Throughput::Elements(1));
    let probe = pod("probe", "claim-0");
    let mut next = 0;
    group.bench_function("check_one_device", |b| {
        b.iter(|| {
            next = (next + 1) % ids.len();
            black_box(check(&mut s, &probe, ids[next]))
        })
    });
    let greedy = pod("greedy", "too-many");
    group.bench_function("check_unsatisfiable", |b| {
        b.iter(|| {
            next = (next + 1) % ids.len();
            black_box(check(&mut s, &greedy, ids[next]))
        })
    });
    assert!(find_node(&mut s, &greedy, 0).is_none());
    group.throughput(Throughput::Elements(NODES as u64));
    group.bench_function("scan_unsatisfiable", |b| {
        b.iter(|| black_box(find_node(&mut s, &greedy, 0)))
    });
    group.throughput(Throughput::Elements(pods.len() as u64));
    group.sample_size(10);
    group.bench_function("binpack_4000", |b| {
        b.iter(|| {
            let mut branch = s.branch();
            let mut start = 0;
            for p in &pods {
                let Some(node) = find_node(&mut branch, p, start) else {
                    panic!("{} found no node", p.name);
                };
                start = node.index();
                branch.add_pod(node, p.clone());
            }
            black_box(branch.pod_count())
        })
    });
    group.finish();
}

criterion_group!(benches, dra);
criterion_main!(benches);
