//! Dynamic Resource Allocation in the simulator: scenarios with DeviceClasses, ResourceSlices,
//! ResourceClaims and templates, groups whose nodes publish devices, the control plane's claim
//! controllers, and the reports naming a DRA verdict (docs/dra.md, "The simulator").

use std::path::Path;
use std::time::Duration;

use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::{
    ClaimAllocation, ClaimConsumer, DeviceScope, Node, Pod, PodClaimSource, PodResourceClaim,
    ResourceClaim, Resources, Timestamp,
};
use ferroscale_objects::K8sObject;
use ferroscale_sim::cluster::Cluster;
use ferroscale_sim::dra::GroupDevices;
use ferroscale_sim::explain::{ExplainAt, PodOutcome, explain, render_explanation};
use ferroscale_sim::report::render_html;
use ferroscale_sim::runner::{SIMULATION_START, Simulation, options_for};
use ferroscale_sim::scenario::{Scenario, bundled, parse_scenario};

/// The selector of the bundled scenario's H100 claim, which no device passes.
const H100_SELECTOR: &str = r#"device.attributes["gpu.example.com"].model == "h100""#;

/// The selector as reasons quote it.
fn quoted_selector() -> String {
    format!("{H100_SELECTOR:?}")
}

fn gpu_dra(text_change: impl Fn(String) -> String) -> Scenario {
    let text = bundled("gpu-dra").expect("the bundled gpu-dra scenario");
    parse_scenario(&text_change(text.to_string()), "gpu-dra", Path::new("."))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn options(scenario: &Scenario) -> AutoscalingOptions {
    options_for(scenario, &[]).unwrap_or_else(|e| panic!("{e}"))
}

fn group_size(simulation: &Simulation, group: &str) -> usize {
    simulation
        .cluster()
        .nodes()
        .filter(|n| n.group.as_deref() == Some(group))
        .count()
}

fn play_until(simulation: &mut Simulation, minutes: u64) {
    let until = SIMULATION_START + Duration::from_secs(minutes * 60);
    while let Some(report) = simulation.next_loop() {
        if report.at >= until {
            break;
        }
    }
}

/// The claim object behind the pod's first claim.
fn claim_of<'a>(cluster: &'a Cluster, pod: &Pod) -> &'a ResourceClaim {
    let name = pod
        .resource_claim_name(&pod.resource_claims[0])
        .unwrap_or_else(|| panic!("{} has its claim", pod.key()));
    cluster
        .dra()
        .claim(&pod.namespace, name)
        .unwrap_or_else(|| panic!("claim {name} exists"))
}

/// The bundled scenario's promise, checked step by step: the GPU group grows by exactly the nodes
/// the GPUs need (two nodes of four GPUs for six one-GPU pods, although CPU and memory would fit
/// one), the CPU group does not grow, every training pod runs with a GPU of its own node
/// allocated and reserved for it, the H100 pod stays pending, and after the work is done the
/// claims are gone and the GPU nodes removed with their slices.
#[test]
fn the_gpu_dra_scenario_scales_the_gpu_group_to_the_devices_needed_and_back() {
    let scenario = gpu_dra(|t| t);
    let mut simulation = Simulation::new(&scenario, options(&scenario));
    play_until(&mut simulation, 15);
    assert_eq!(group_size(&simulation, "gpu"), 2);
    assert_eq!(group_size(&simulation, "cpu"), 1);
    let cluster = simulation.cluster();
    let train: Vec<_> = cluster
        .live_pods()
        .filter(|r| r.pod.labels.get("app").map(String::as_str) == Some("train"))
        .collect();
    assert_eq!(train.len(), 6);
    let mut devices = std::collections::HashSet::new();
    for record in &train {
        let node = record.pod.node_name.as_deref().expect("training pod runs");
        assert_eq!(
            cluster.node(node).and_then(|n| n.group.as_deref()),
            Some("gpu")
        );
        let claim = claim_of(cluster, &record.pod);
        assert_eq!(
            claim.owner_pod_uid.as_deref(),
            Some(record.pod.uid.as_str())
        );
        let allocation = claim.allocation.as_ref().expect("the claim is allocated");
        assert_eq!(allocation.devices.len(), 1);
        let device = &allocation.devices[0];
        assert_eq!(device.driver, "gpu.example.com");
        assert_eq!(device.pool, node, "a GPU of the pod's own node");
        assert!(devices.insert((device.pool.clone(), device.device.clone())));
        assert_eq!(
            claim.reserved_for,
            vec![ClaimConsumer {
                resource: "pods".into(),
                name: record.pod.name.to_string(),
                uid: record.pod.uid.to_string(),
            }]
        );
    }
    let h100 = cluster.live_pod("ml", "wants-h100").expect("the H100 pod");
    assert!(h100.is_pending());
    assert!(
        cluster
            .dra()
            .claim("ml", "h100")
            .is_some_and(|c| c.allocation.is_none())
    );
    let gpu_slices = cluster
        .dra()
        .objects()
        .slices
        .iter()
        .filter(|s| matches!(&s.scope, DeviceScope::Node(n) if n.starts_with("gpu-")))
        .count();
    assert_eq!(gpu_slices, 2, "each GPU node publishes its devices");

    simulation.play_to_end();
    assert_eq!(group_size(&simulation, "gpu"), 0);
    assert_eq!(group_size(&simulation, "cpu"), 1);
    let dra = simulation.cluster().dra().objects();
    assert_eq!(dra.claims.len(), 1, "only the shared H100 claim is left");
    assert!(dra.slices.is_empty(), "the slices went with their nodes");
    assert!(
        simulation
            .cluster()
            .live_pod("ml", "wants-h100")
            .is_some_and(|r| r.is_pending())
    );
    let result = simulation.finish();
    assert!(
        result.summary.all_expectations_hold(),
        "{:?}",
        result.summary.expectations
    );
}

/// `explain`, the timeline and the HTML report say why nothing grows for the H100 pod: its claim
/// and the selector no device of the GPU group passes.
#[test]
fn explain_the_timeline_and_the_report_name_the_claim_and_selector_a_pod_waits_for() {
    let scenario = gpu_dra(|t| t);
    let explanation = explain(
        &scenario,
        options(&scenario),
        ExplainAt::Time(Duration::from_secs(90)),
    );
    let verdict = explanation
        .groups
        .iter()
        .find(|g| g.pods.iter().any(|p| p == "ml/wants-h100"))
        .expect("the H100 pod is explained");
    let PodOutcome::NotHelped { per_group } = &verdict.outcome else {
        panic!("nothing can help the H100 pod: {:?}", verdict.outcome)
    };
    let gpu = per_group
        .iter()
        .find(|(g, _)| g == "gpu")
        .map(|(_, r)| r.clone())
        .expect("a verdict for the GPU group");
    assert!(gpu.contains("ml/h100"), "{gpu}");
    assert!(gpu.contains(&quoted_selector()), "{gpu}");
    let text = render_explanation(&explanation);
    assert!(text.contains(&gpu), "{text}");

    let result = Simulation::new(&scenario, options(&scenario)).finish();
    let line = result
        .timeline
        .iter()
        .find(|e| e.why.contains("ml/h100"))
        .unwrap_or_else(|| panic!("the timeline names the claim: {:#?}", result.timeline));
    assert!(line.why.contains(&quoted_selector()), "{}", line.why);
    // The report escapes the reason like any text (quotes and apostrophes included).
    let escaped = gpu
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;");
    assert!(render_html(&result).contains(&escaped));
}

fn gpu_node(name: &str) -> Node {
    let mut node = Node::new(name, Resources::new(8000, 64 << 30));
    node.allocatable.pods = 110;
    node.capacity.pods = 110;
    node
}

fn two_gpus() -> Vec<GroupDevices> {
    vec![GroupDevices {
        driver: "gpu.example.com".into(),
        name_prefix: "gpu".into(),
        count: 2,
        attributes: Default::default(),
        capacity: Default::default(),
    }]
}

fn gpu_objects() -> Vec<K8sObject> {
    let text = r#"
apiVersion: ferroscale/v1alpha1
kind: Scenario
duration: 1m
objects:
  - inline: {apiVersion: resource.k8s.io/v1, kind: DeviceClass, metadata: {name: gpu}, spec: {selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]}}
  - inline: {apiVersion: resource.k8s.io/v1, kind: ResourceClaimTemplate, metadata: {name: one-gpu, namespace: ml}, spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu}}]}}}}
  - inline: {apiVersion: resource.k8s.io/v1, kind: ResourceClaim, metadata: {name: shared, namespace: ml}, spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu}}]}}}
"#;
    parse_scenario(text, "objects", Path::new("."))
        .unwrap_or_else(|e| panic!("{e}"))
        .objects
}

fn claiming_pod(name: &str, source: PodClaimSource) -> Pod {
    let mut pod = Pod::new("ml", name);
    pod.requests = Resources::new(100, 0);
    pod.resource_claims.push(PodResourceClaim {
        name: "gpu".into(),
        source,
    });
    pod
}

/// The control plane's part, step by step on the in-memory cluster: the resourceclaim controller
/// makes each pod its claim from the template (owned by the pod, named in its status); binding
/// allocates a device of the node and reserves the claim for the pod; a shared claim serves two
/// pods on one device; a deleted pod's own claim is deleted, a shared claim is released and
/// deallocated once its last pod is gone; and the devices come back for the next pod.
#[test]
fn claims_are_made_allocated_on_binding_and_released_when_pods_end() {
    let mut cluster = Cluster::new(Vec::new());
    cluster.set_group_devices("gpu", two_gpus());
    for object in gpu_objects() {
        assert!(cluster.add_dra_object(&object), "{object:?}");
    }
    cluster.add_node(gpu_node("gpu-0"), Some("gpu".into()));
    assert_eq!(cluster.dra().objects().slices.len(), 1);
    let t0 = Timestamp::from_secs(0);
    for name in ["a", "b", "c"] {
        cluster.add_pod(
            claiming_pod(name, PodClaimSource::Template("one-gpu".into())),
            t0,
            None,
        );
    }
    for name in ["s1", "s2"] {
        cluster.add_pod(
            claiming_pod(name, PodClaimSource::Claim("shared".into())),
            t0,
            None,
        );
    }
    cluster.schedule(t0);
    // Two GPUs: two template pods and... the shared claim needs one too, so one of the three
    // one-GPU claims waits (the highest priority, oldest first: a and b win).
    let running: Vec<String> = cluster
        .live_pods()
        .filter(|r| r.is_running())
        .map(|r| r.pod.name.to_string())
        .collect();
    assert_eq!(running, ["a", "b"], "two GPUs, two one-GPU pods");
    let a = cluster.live_pod("ml", "a").unwrap().pod.clone();
    let claim = claim_of(&cluster, &a);
    assert!(claim.name.starts_with("a-gpu-"), "{}", claim.name);
    assert_eq!(claim.owner_pod_uid.as_deref(), Some(a.uid.as_str()));
    assert_eq!(claim.reserved_for[0].uid, a.uid);
    let a_device = allocated(claim);
    // Pod c's claim exists but is not allocated.
    let c = cluster.live_pod("ml", "c").unwrap().pod.clone();
    assert!(claim_of(&cluster, &c).allocation.is_none());

    // a goes: its claim with it, and its GPU serves the next pod.
    let deleted = cluster.delete_pods(
        &ferroscale_model::LabelSelector::default(),
        Some("ml"),
        None,
        Timestamp::from_secs(1),
    );
    assert_eq!(deleted, 5);
    assert!(
        cluster
            .dra()
            .objects()
            .claims
            .iter()
            .all(|c| c.name == "shared")
    );
    let shared = cluster.dra().claim("ml", "shared").unwrap();
    assert!(shared.allocation.is_none() && shared.reserved_for.is_empty());

    cluster.add_pod(
        claiming_pod("s3", PodClaimSource::Claim("shared".into())),
        Timestamp::from_secs(2),
        None,
    );
    cluster.add_pod(
        claiming_pod("s4", PodClaimSource::Claim("shared".into())),
        Timestamp::from_secs(2),
        None,
    );
    cluster.schedule(Timestamp::from_secs(2));
    let shared = cluster.dra().claim("ml", "shared").unwrap();
    assert_eq!(shared.reserved_for.len(), 2, "one claim, two pods");
    assert_eq!(allocated(shared).0, a_device.0, "on the node's pool");
    assert_eq!(cluster.pending_count(), 0);
    cluster.delete_pods(
        &ferroscale_model::LabelSelector::default(),
        Some("ml"),
        Some(1),
        Timestamp::from_secs(3),
    );
    let shared = cluster.dra().claim("ml", "shared").unwrap();
    assert_eq!(shared.reserved_for.len(), 1);
    assert!(shared.allocation.is_some(), "still in use by one pod");
}

/// `(pool, device)` of a claim's single allocated device.
fn allocated(claim: &ResourceClaim) -> (String, String) {
    let allocation: &ClaimAllocation = claim.allocation.as_ref().expect("allocated");
    let device = &allocation.devices[0];
    (device.pool.clone(), device.device.clone())
}

/// A node that goes away takes its slices with it, and the pods it ran wait with their claims
/// released (the devices they had are gone).
#[test]
fn a_removed_node_takes_its_devices_and_releases_its_pods_claims() {
    let mut cluster = Cluster::new(Vec::new());
    cluster.set_group_devices("gpu", two_gpus());
    for object in gpu_objects() {
        cluster.add_dra_object(&object);
    }
    cluster.add_node(gpu_node("gpu-0"), Some("gpu".into()));
    let t0 = Timestamp::from_secs(0);
    cluster.add_pod(
        claiming_pod("a", PodClaimSource::Template("one-gpu".into())),
        t0,
        None,
    );
    cluster.schedule(t0);
    let a = cluster.live_pod("ml", "a").unwrap().pod.clone();
    assert!(claim_of(&cluster, &a).allocation.is_some());
    assert_eq!(cluster.remove_node("gpu-0", Timestamp::from_secs(1)), 1);
    assert!(cluster.dra().objects().slices.is_empty());
    let a = cluster.live_pod("ml", "a").unwrap().pod.clone();
    let claim = claim_of(&cluster, &a);
    assert!(claim.allocation.is_none() && claim.reserved_for.is_empty());
    // A new node with devices: the waiting pod gets one of them.
    cluster.add_node(gpu_node("gpu-1"), Some("gpu".into()));
    cluster.schedule(Timestamp::from_secs(2));
    let a = cluster.live_pod("ml", "a").unwrap().pod.clone();
    assert_eq!(a.node_name.as_deref(), Some("gpu-1"));
    assert_eq!(allocated(claim_of(&cluster, &a)).0, "gpu-1");
}

/// The four kinds are read from `objects:` (strictly, with the objects crate's converters), a
/// pod's `spec.resourceClaims` with them, and a group's `devices` become its template's slices.
#[test]
fn scenarios_read_the_dra_kinds_and_group_devices() {
    let scenario = gpu_dra(|t| t);
    let kinds: Vec<&str> = scenario
        .objects
        .iter()
        .map(|o| match o {
            K8sObject::DeviceClass(_) => "DeviceClass",
            K8sObject::ResourceClaimTemplate(_) => "ResourceClaimTemplate",
            K8sObject::ResourceClaim(_) => "ResourceClaim",
            K8sObject::ResourceSlice(_) => "ResourceSlice",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["DeviceClass", "ResourceClaimTemplate", "ResourceClaim"]
    );
    let devices = &scenario.node_groups[1].devices;
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0].count, 4);
    assert!(devices[0].attributes.contains_key("gpu.example.com/model"));
    assert!(devices[0].capacity.contains_key("gpu.example.com/memory"));
    let simulation = Simulation::new(&scenario, options(&scenario));
    let gpu = simulation.cloud().group("gpu").expect("the gpu group");
    let template = futures::executor::block_on(
        ferroscale_core::cloud::NodeGroup::template_node_info(gpu.as_ref()),
    )
    .expect("a template");
    assert_eq!(template.resource_slices.len(), 1);
    let slice = &template.resource_slices[0];
    assert_eq!(slice.node_name(), Some(template.node.name.as_str()));
    assert_eq!(slice.devices.len(), 4);
}

/// A malformed DRA object is refused before the run, naming the object, the field and the value.
#[test]
fn a_malformed_dra_object_is_refused_naming_object_field_and_value() {
    let scenario = bundled("gpu-dra").expect("bundled");
    // An allocation mode the API does not have.
    let bad = scenario.replace(
        "                  deviceClassName: gpu.example.com\n                  selectors:\n                    - cel: {expression: 'device.capacity",
        "                  deviceClassName: gpu.example.com\n                  allocationMode: Most\n                  selectors:\n                    - cel: {expression: 'device.capacity",
    );
    assert_ne!(bad, scenario);
    let e = parse_scenario(&bad, "bad.yaml", Path::new(".")).unwrap_err();
    let message = e.to_string();
    assert!(message.contains("one-gpu"), "{message}");
    assert!(message.contains("allocationMode"), "{message}");
    assert!(message.contains("Most"), "{message}");
}

/// `devices` entries of a group are checked like every other field: the error names the field
/// and the value.
#[test]
fn bad_group_devices_are_refused_naming_the_field() {
    let scenario = bundled("gpu-dra").expect("bundled");
    for (from, to, field, message) in [
        (
            "count: 4",
            "count: 129",
            "nodeGroups[1].devices[0].count",
            "129",
        ),
        (
            "count: 4",
            "count: -1",
            "nodeGroups[1].devices[0].count",
            "-1",
        ),
        (
            "driver: gpu.example.com\n        name: gpu",
            "driver: \"\"\n        name: gpu",
            "nodeGroups[1].devices[0].driver",
            "driver name",
        ),
        (
            "model: {string: a100}",
            "model: {string: a100, int: 3}",
            "nodeGroups[1].devices[0].attributes.model",
            "exactly one",
        ),
        (
            "driverVersion: {version: 1.2.0}",
            "driverVersion: {version: one}",
            "nodeGroups[1].devices[0].attributes.driverVersion",
            "\"one\"",
        ),
        (
            "memory: 80Gi",
            "memory: lots",
            "nodeGroups[1].devices[0].capacity.memory",
            "lots",
        ),
        (
            "memory: 80Gi",
            "memory: -80Gi",
            "nodeGroups[1].devices[0].capacity.memory",
            "-80Gi",
        ),
        (
            "name: gpu\n        count: 4",
            "name: gpu\n        count: 4\n        colour: green",
            "nodeGroups[1].devices[0]",
            "colour",
        ),
    ] {
        let text = scenario.replacen(from, to, 1);
        assert_ne!(text, scenario, "{from}");
        let e = parse_scenario(&text, "bad.yaml", Path::new(".")).unwrap_err();
        assert!(e.field.starts_with(field), "{to}: {e}");
        assert!(e.to_string().contains(message), "{to}: {e}");
        assert!(e.line.is_some(), "{e}");
    }
}

/// An evicted pod's own claim goes with it, and the pod its controller re-creates gets a new claim
/// from the template, allocated again wherever the replacement lands.
#[test]
fn a_re_created_pod_gets_a_claim_of_its_own() {
    let mut cluster = Cluster::new(Vec::new());
    cluster.set_group_devices("gpu", two_gpus());
    for object in gpu_objects() {
        cluster.add_dra_object(&object);
    }
    cluster.add_node(gpu_node("gpu-0"), Some("gpu".into()));
    let mut pod = claiming_pod("web-0", PodClaimSource::Template("one-gpu".into()));
    pod.owner_references.push(ferroscale_model::OwnerRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "web".into(),
        uid: "uid-rs-web".into(),
        controller: true,
    });
    let t0 = Timestamp::from_secs(0);
    cluster.add_pod(pod, t0, None);
    cluster.schedule(t0);
    let old = cluster.live_pod("ml", "web-0").unwrap().pod.clone();
    let old_claim = claim_of(&cluster, &old).name.clone();
    let eviction = cluster
        .evict("ml", "web-0", Timestamp::from_secs(1))
        .expect("no budget stops it");
    let replacement = eviction.replacement.expect("the ReplicaSet re-creates it");
    assert!(
        cluster.dra().claim("ml", &old_claim).is_none(),
        "deleted with its pod"
    );
    let name = replacement.trim_start_matches("ml/");
    let new = cluster.live_pod("ml", name).unwrap().pod.clone();
    let new_claim = claim_of(&cluster, &new);
    assert_ne!(new_claim.name, old_claim);
    assert_eq!(new_claim.owner_pod_uid.as_deref(), Some(new.uid.as_str()));
    assert!(new_claim.allocation.is_none());
    cluster.schedule(Timestamp::from_secs(2));
    let new = cluster.live_pod("ml", name).unwrap().pod.clone();
    assert!(new.node_name.is_some());
    assert!(claim_of(&cluster, &new).allocation.is_some());
}

const DRAIN: &str = r#"apiVersion: ferroscale/v1alpha1
kind: Scenario
name: gpu-drain
duration: 30m
options:
  scan-interval: 10s
  scale-down-unneeded-time: 2m
  scale-down-delay-after-add: 2m
  scale-down-utilization-threshold: 0.6
nodeGroups:
  - id: gpu
    minSize: 0
    maxSize: 5
    devices:
      - {driver: gpu.example.com, name: gpu, count: 2}
    template: {status: {allocatable: {cpu: "8", memory: 64Gi, pods: "110"}}}
objects:
  - inline: {apiVersion: resource.k8s.io/v1, kind: DeviceClass, metadata: {name: gpu}, spec: {selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]}}
  - inline: {apiVersion: resource.k8s.io/v1, kind: ResourceClaimTemplate, metadata: {name: one-gpu, namespace: ml}, spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu}}]}}}}
events:
  - at: 1m
    create:
      count: 4
      pod:
        apiVersion: v1
        kind: Pod
        metadata:
          name: infer
          namespace: ml
          labels: {app: infer}
          ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: infer, uid: rs-infer, controller: true}]
        spec:
          containers: [{name: c, resources: {requests: {cpu: "1"}, claims: [{name: gpu}]}}]
          resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
  - at: 8m
    delete: {selector: app=infer, count: 2}
expect:
  - at: 7m
    group: gpu
    nodes: {min: 2, max: 2}
  - at: end
    group: gpu
    nodes: {min: 1, max: 1}
  - at: end
    runningPods: 2
"#;

/// Scale-down drains a GPU node whose devices are half used (under the threshold) onto the other
/// one: the evicted pod's claim is deleted with it, its replacement gets a new claim, and that
/// claim is allocated the free GPU of the node that stays.
#[test]
fn a_drained_pod_gets_a_new_claim_allocated_on_the_node_that_stays() {
    let scenario =
        parse_scenario(DRAIN, "gpu-drain", Path::new(".")).unwrap_or_else(|e| panic!("{e}"));
    let mut simulation = Simulation::new(&scenario, options(&scenario));
    simulation.play_to_end();
    let cluster = simulation.cluster();
    let running: Vec<_> = cluster.live_pods().filter(|r| r.is_running()).collect();
    assert_eq!(running.len(), 2);
    assert!(
        running.iter().any(|r| r.replaces.is_some()),
        "one pod was evicted and re-created"
    );
    let mut devices = std::collections::HashSet::new();
    for record in &running {
        let claim = claim_of(cluster, &record.pod);
        assert_eq!(
            claim.owner_pod_uid.as_deref(),
            Some(record.pod.uid.as_str())
        );
        let (pool, device) = allocated(claim);
        assert_eq!(Some(pool.as_str()), record.pod.node_name.as_deref());
        assert!(devices.insert(device), "two GPUs of one node");
    }
    assert_eq!(
        cluster.dra().objects().claims.len(),
        2,
        "the claims of deleted and evicted pods are gone"
    );
    let result = simulation.finish();
    assert!(
        result.summary.all_expectations_hold(),
        "{:?}",
        result.summary.expectations
    );
}
