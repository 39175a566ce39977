//! The seeded generator of small random cases: a few nodes, some running pods bound to them, and
//! pending pods that use the Filter-relevant fields of a pod spec. The same seed and case index
//! always give the same case.
//!
//! Every object is valid for the API server (a case the API server refuses is a generator bug and
//! fails the run). Two fields are deliberately never generated, because Ferroscale leaves them to
//! the autoscaler's caller by design: `spec.nodeName` on a pending pod (the scheduler never sees
//! such a pod) and a toleration of the `node.kubernetes.io/unschedulable` taint (the autoscaler
//! never simulates cordoned nodes, see crates/scheduling/src/filters.rs).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{
    Affinity, CSIPersistentVolumeSource, Container, ContainerPort, LocalVolumeSource, Namespace,
    Node, NodeAffinity, NodeCondition, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    NodeSpec, NodeStatus, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PersistentVolumeSpec, Pod,
    PodAffinity, PodAffinityTerm, PodAntiAffinity, PodSpec, PodTemplateSpec, ResourceRequirements,
    Taint, Toleration, TopologySelectorLabelRequirement, TopologySelectorTerm,
    TopologySpreadConstraint, Volume, VolumeNodeAffinity, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::{
    CSINode, CSINodeDriver, CSINodeSpec, StorageClass, VolumeNodeResources,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};
use rand::{RngExt, SeedableRng};

mod devices;

pub use devices::{Devices, FPGA_DRIVER, GPU_DRIVER};
use rand_chacha::ChaCha8Rng;

/// The extended resource every family may request (a device count).
pub const GPU: &str = "example.com/gpu";
/// The extended resource the configured family's `NodeResourcesFit` ignores.
pub const IGNORED: &str = "example.com/foo";
/// The RuntimeClass whose overhead pods with `runtimeClassName` get at admission.
pub const RUNTIME_CLASS: &str = "with-overhead";
/// Annotation naming the ReplicaSet a generated pod is controlled by; the runner fills in the
/// owner reference's uid once the ReplicaSet exists.
pub const OWNER_ANNOTATION: &str = "differential.ferroscale.io/replicaset";

const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const APPS: [&str; 3] = ["web", "db", "cache"];
const TIERS: [&str; 2] = ["front", "back"];

/// What the generator may produce, per family of cases.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GeneratorSettings {
    /// Probability that a pending pod is put in the ReplicaSets' namespace, where every pod is
    /// controlled by the ReplicaSet selecting it (which makes a profile's default spread
    /// constraints apply to it); otherwise its namespace is either of the two.
    pub owned_pod_probability: f64,
    /// Whether the case has storage: classes, bound volume/claim pairs, CSINodes, and pods using
    /// claims (bound, WaitForFirstConsumer, unbound Immediate, missing).
    pub volumes: bool,
    /// Whether the case has DRA devices: DeviceClasses, ResourceSlices, and pods using
    /// ResourceClaims (their own or shared).
    pub dra: bool,
}

impl Default for GeneratorSettings {
    fn default() -> Self {
        GeneratorSettings {
            owned_pod_probability: 0.2,
            volumes: false,
            dra: false,
        }
    }
}

/// The CSI driver of every generated volume and storage class.
pub const CSI_DRIVER: &str = "csi.example.com";

/// One generated case: the objects to create, in order (namespaces, ReplicaSets, nodes, running
/// pods), then the pending pods one at a time.
#[derive(Debug, Clone)]
pub struct Case {
    pub seed: u64,
    pub index: u32,
    pub namespaces: Vec<Namespace>,
    pub replica_sets: Vec<ReplicaSet>,
    pub nodes: Vec<Node>,
    /// Pods with `spec.nodeName` set, as a kubelet would already run them.
    pub running: Vec<Pod>,
    /// Pods for the scheduler, created one at a time.
    pub pending: Vec<Pod>,
    pub storage: Storage,
    pub devices: Devices,
}

/// A case's storage objects, created before its pods.
#[derive(Debug, Clone, Default)]
pub struct Storage {
    pub classes: Vec<StorageClass>,
    /// Volumes bound to [`Storage::claims`] (the runner marks both sides Bound, as the volume
    /// controller would).
    pub volumes: Vec<PersistentVolume>,
    /// Claims: those with `volumeName` are bound, the others wait (WaitForFirstConsumer) or stay
    /// unbound (Immediate, with no volume and no provisioner running).
    pub claims: Vec<PersistentVolumeClaim>,
    pub csi_nodes: Vec<CSINode>,
}

/// The case `index` of the run seeded with `seed`.
pub fn generate_case(seed: u64, index: u32, settings: GeneratorSettings) -> Case {
    let mut rng =
        ChaCha8Rng::seed_from_u64(seed ^ u64::from(index).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut g = Generator {
        rng: &mut rng,
        prefix: format!("c{index}"),
    };
    g.case(seed, index, settings)
}

struct Generator<'a> {
    rng: &'a mut ChaCha8Rng,
    /// Prefix of every name in the case, so that cases never see each other's objects.
    prefix: String,
}

impl Generator<'_> {
    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.rng.random_range(0..items.len())]
    }

    fn between(&mut self, low: u32, high_inclusive: u32) -> u32 {
        self.rng.random_range(low..=high_inclusive)
    }

    fn namespace_names(&self) -> [String; 2] {
        [format!("{}-a", self.prefix), format!("{}-b", self.prefix)]
    }

    fn case(&mut self, seed: u64, index: u32, settings: GeneratorSettings) -> Case {
        let [ns_a, ns_b] = self.namespace_names();
        let namespaces = vec![
            namespace(&ns_a, &[("team", "a"), ("env", "prod")]),
            namespace(&ns_b, &[("team", "b"), ("env", "dev")]),
        ];
        let node_count = self.between(2, 6);
        let nodes: Vec<Node> = (0..node_count).map(|i| self.node(i)).collect();
        let node_names: Vec<String> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let replica_sets: Vec<ReplicaSet> = APPS
            .iter()
            .map(|app| replica_set(&ns_a, &format!("rs-{app}"), app))
            .collect();
        let running_count = self.between(1, 6);
        let mut running: Vec<Pod> = (0..running_count)
            .map(|j| self.running_pod(j, &node_names))
            .collect();
        let pending_count = self.between(2, 5);
        let mut pending: Vec<Pod> = (0..pending_count)
            .map(|j| self.pending_pod(j, &node_names, settings))
            .collect();
        let mut storage = Storage::default();
        if settings.volumes {
            storage = self.storage(&nodes);
            for pod in &mut running {
                if self.chance(0.35) {
                    self.use_bound_claim(pod, &storage);
                }
            }
            for pod in &mut pending {
                if self.chance(0.6) {
                    self.use_claims(pod, &mut storage);
                }
            }
        }
        let mut devices = Devices::default();
        if settings.dra {
            devices = self.devices(&nodes);
            for pod in &mut pending {
                if self.chance(0.75) {
                    self.use_devices(pod, &mut devices);
                }
            }
        }
        Case {
            seed,
            index,
            namespaces,
            replica_sets,
            nodes,
            running,
            pending,
            storage,
            devices,
        }
    }

    fn storage(&mut self, nodes: &[Node]) -> Storage {
        let mut storage = Storage::default();
        let mut wffc = storage_class(&format!("{}-wffc", self.prefix), "WaitForFirstConsumer");
        if self.chance(0.5) {
            let mut zones = vec![self.pick(&ZONES).to_string()];
            if self.chance(0.5) {
                let other = self.pick(&ZONES).to_string();
                if !zones.contains(&other) {
                    zones.push(other);
                }
            }
            wffc.allowed_topologies = Some(vec![TopologySelectorTerm {
                match_label_expressions: Some(vec![TopologySelectorLabelRequirement {
                    key: ZONE.into(),
                    values: zones,
                }]),
            }]);
        }
        storage.classes.push(wffc);
        storage.classes.push(storage_class(
            &format!("{}-immediate", self.prefix),
            "Immediate",
        ));
        for k in 0..self.between(1, 3) {
            let namespace = self.any_namespace();
            let volume_name = format!("{}-pv{k}", self.prefix);
            let claim_name = format!("data-{k}");
            let mode = self.pick(&[
                "ReadWriteOnce",
                "ReadWriteOnce",
                "ReadWriteOncePod",
                "ReadWriteMany",
            ]);
            let mut labels = BTreeMap::new();
            if self.chance(0.4) {
                labels.insert(ZONE.to_string(), self.pick(&ZONES).to_string());
            }
            // A volume pinned to one node is a local volume, as in practice.
            let mut local = false;
            let node_affinity = if self.chance(0.7) {
                local = self.chance(0.3);
                let (key, value) = if !local {
                    (ZONE.to_string(), self.pick(&ZONES).to_string())
                } else {
                    let node = &nodes[self.rng.random_range(0..nodes.len())];
                    (
                        HOSTNAME.to_string(),
                        node.metadata.name.clone().unwrap_or_default(),
                    )
                };
                Some(VolumeNodeAffinity {
                    required: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key,
                                operator: "In".into(),
                                values: Some(vec![value]),
                            }]),
                            ..NodeSelectorTerm::default()
                        }],
                    }),
                })
            } else {
                None
            };
            storage.volumes.push(PersistentVolume {
                metadata: ObjectMeta {
                    name: Some(volume_name.clone()),
                    labels: (!labels.is_empty()).then_some(labels),
                    ..ObjectMeta::default()
                },
                spec: Some(PersistentVolumeSpec {
                    access_modes: Some(vec![mode.into()]),
                    capacity: Some(BTreeMap::from([(
                        "storage".to_string(),
                        Quantity("1Gi".into()),
                    )])),
                    csi: (!local).then(|| CSIPersistentVolumeSource {
                        driver: CSI_DRIVER.into(),
                        volume_handle: volume_name.clone(),
                        ..CSIPersistentVolumeSource::default()
                    }),
                    local: local.then(|| LocalVolumeSource {
                        path: "/mnt/disks/data".into(),
                        fs_type: None,
                    }),
                    claim_ref: Some(ObjectReference {
                        kind: Some("PersistentVolumeClaim".into()),
                        api_version: Some("v1".into()),
                        namespace: Some(namespace.clone()),
                        name: Some(claim_name.clone()),
                        ..ObjectReference::default()
                    }),
                    node_affinity,
                    storage_class_name: Some(String::new()),
                    ..PersistentVolumeSpec::default()
                }),
                status: None,
            });
            let mut claim = claim(&namespace, &claim_name, "", mode);
            claim.metadata.annotations = Some(BTreeMap::from([
                (
                    "pv.kubernetes.io/bind-completed".to_string(),
                    "yes".to_string(),
                ),
                (
                    "pv.kubernetes.io/bound-by-controller".to_string(),
                    "yes".to_string(),
                ),
            ]));
            if let Some(spec) = claim.spec.as_mut() {
                spec.volume_name = Some(volume_name);
            }
            storage.claims.push(claim);
        }
        for node in nodes {
            if self.chance(0.3) {
                continue;
            }
            let name = node.metadata.name.clone().unwrap_or_default();
            let allocatable = self.chance(0.6).then(|| VolumeNodeResources {
                count: Some(self.between(0, 2) as i32),
            });
            storage.csi_nodes.push(CSINode {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..ObjectMeta::default()
                },
                spec: CSINodeSpec {
                    drivers: vec![CSINodeDriver {
                        name: CSI_DRIVER.into(),
                        node_id: name,
                        allocatable,
                        topology_keys: Some(vec![ZONE.into()]),
                    }],
                },
            });
        }
        storage
    }

    /// Adds a volume for one of the bound claims of the pod's namespace, if there is one.
    fn use_bound_claim(&mut self, pod: &mut Pod, storage: &Storage) {
        let namespace = pod.metadata.namespace.clone();
        let bound: Vec<String> = storage
            .claims
            .iter()
            .filter(|c| c.metadata.namespace == namespace)
            .filter(|c| c.spec.as_ref().is_some_and(|s| s.volume_name.is_some()))
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        if bound.is_empty() {
            return;
        }
        let claim = bound[self.rng.random_range(0..bound.len())].clone();
        add_claim_volume(pod, &claim);
    }

    /// Gives a pending pod one or two claims: a bound one, a new WaitForFirstConsumer claim of its
    /// own, a new unbound Immediate claim, or a claim that does not exist.
    fn use_claims(&mut self, pod: &mut Pod, storage: &mut Storage) {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        for n in 0..self.between(1, 2) {
            match self.between(0, 5) {
                0..=1 => self.use_bound_claim(pod, storage),
                2..=3 => {
                    let name = format!("{pod_name}-wffc{n}");
                    let class = format!("{}-wffc", self.prefix);
                    storage
                        .claims
                        .push(claim(&namespace, &name, &class, "ReadWriteOnce"));
                    add_claim_volume(pod, &name);
                }
                4 => {
                    let name = format!("{pod_name}-immediate{n}");
                    let class = format!("{}-immediate", self.prefix);
                    storage
                        .claims
                        .push(claim(&namespace, &name, &class, "ReadWriteOnce"));
                    add_claim_volume(pod, &name);
                }
                _ => add_claim_volume(pod, "missing"),
            }
        }
    }

    fn node(&mut self, i: u32) -> Node {
        let name = format!("{}-n{i}", self.prefix);
        let mut labels = BTreeMap::from([(HOSTNAME.to_string(), name.clone())]);
        if self.chance(0.9) {
            labels.insert(ZONE.to_string(), self.pick(&ZONES).to_string());
        }
        if self.chance(0.7) {
            labels.insert("disk".into(), self.pick(&["ssd", "hdd"]).to_string());
        }
        if self.chance(0.7) {
            labels.insert("gen".into(), self.between(1, 5).to_string());
        }
        let cpu_milli = self.pick(&[1000, 1500, 2000, 4000]);
        let reserved_milli = self.pick(&[0, 100, 250]);
        let memory_mi = self.pick(&[1024, 2048, 4096]);
        let pods = self.between(2, 8);
        let storage_gi = self.pick(&[5, 10]);
        let mut capacity = BTreeMap::from([
            ("cpu".to_string(), format!("{cpu_milli}m")),
            ("memory".to_string(), format!("{memory_mi}Mi")),
            ("pods".to_string(), pods.to_string()),
            ("ephemeral-storage".to_string(), format!("{storage_gi}Gi")),
        ]);
        if self.chance(0.5) {
            capacity.insert(GPU.into(), self.between(0, 2).to_string());
        }
        if self.chance(0.5) {
            capacity.insert(IGNORED.into(), self.between(0, 1).to_string());
        }
        let mut allocatable = capacity.clone();
        allocatable.insert("cpu".into(), format!("{}m", cpu_milli - reserved_milli));
        let mut taints: Vec<Taint> = Vec::new();
        if self.chance(0.25) {
            for _ in 0..self.between(1, 2) {
                let (key, value) = self.pick(&[
                    ("dedicated", "gpu"),
                    ("dedicated", "db"),
                    ("spot", ""),
                    ("example.com/maintenance", "true"),
                ]);
                let effect = self.pick(&["NoSchedule", "PreferNoSchedule", "NoExecute"]);
                if !taints.iter().any(|t| t.key == key && t.effect == effect) {
                    taints.push(Taint {
                        key: key.into(),
                        value: (!value.is_empty()).then(|| value.to_string()),
                        effect: effect.into(),
                        time_added: None,
                    });
                }
            }
        }
        let unschedulable = self.chance(0.08);
        Node {
            metadata: ObjectMeta {
                name: Some(name),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: (!taints.is_empty()).then_some(taints),
                unschedulable: unschedulable.then_some(true),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(quantities(&capacity)),
                allocatable: Some(quantities(&allocatable)),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    reason: Some("KubeletReady".into()),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
        }
    }

    fn labels(&mut self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([("app".to_string(), self.pick(&APPS).to_string())]);
        if self.chance(0.8) {
            labels.insert("tier".into(), self.pick(&TIERS).to_string());
        }
        labels
    }

    fn any_namespace(&mut self) -> String {
        let names = self.namespace_names();
        names[self.rng.random_range(0..2)].clone()
    }

    fn running_pod(&mut self, j: u32, nodes: &[String]) -> Pod {
        let node = nodes[self.rng.random_range(0..nodes.len())].clone();
        let mut pod = self.pod_base(format!("r{j}"));
        let spec = pod.spec.get_or_insert_with(PodSpec::default);
        spec.node_name = Some(node);
        let cpu = self.pick(&[None, Some("100m"), Some("250m"), Some("500m")]);
        let memory = self.pick(&[None, Some("64Mi"), Some("256Mi"), Some("512Mi")]);
        let gpu = self.chance(0.15).then(|| self.between(1, 2));
        let port = self.chance(0.2).then(|| self.host_port());
        let spec = pod.spec.get_or_insert_with(PodSpec::default);
        spec.containers = vec![container("main", cpu, memory, None, gpu, None, port)];
        // A running pod that its namespace's ReplicaSet selects is controlled by it, as in a real
        // cluster, where such pods come from the ReplicaSet.
        if pod.metadata.namespace.as_deref() == Some(self.namespace_names()[0].as_str())
            && let Some(app) = pod.metadata.labels.as_ref().and_then(|l| l.get("app"))
        {
            pod.metadata.annotations = Some(BTreeMap::from([(
                OWNER_ANNOTATION.to_string(),
                format!("rs-{app}"),
            )]));
        }
        if self.chance(0.15) {
            let term = self.affinity_term();
            pod.spec
                .get_or_insert_with(PodSpec::default)
                .affinity
                .get_or_insert_with(Affinity::default)
                .pod_anti_affinity = Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![term]),
                ..PodAntiAffinity::default()
            });
        }
        pod
    }

    fn pod_base(&mut self, name: String) -> Pod {
        let namespace = self.any_namespace();
        Pod {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(namespace),
                labels: Some(self.labels()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                // No grace: deleting a case's pods must not wait for a kubelet.
                termination_grace_period_seconds: Some(0),
                ..PodSpec::default()
            }),
            status: None,
        }
    }

    fn host_port(&mut self) -> ContainerPort {
        ContainerPort {
            container_port: 80,
            host_port: Some(self.pick(&[8080, 8081])),
            protocol: Some(self.pick(&["TCP", "UDP"]).into()),
            host_ip: self
                .pick(&[None, Some("127.0.0.1"), Some("0.0.0.0")])
                .map(Into::into),
            ..ContainerPort::default()
        }
    }

    fn pending_pod(&mut self, j: u32, nodes: &[String], settings: GeneratorSettings) -> Pod {
        let mut pod = self.pod_base(format!("p{j}"));
        if self.chance(settings.owned_pod_probability) {
            pod.metadata.namespace = Some(self.namespace_names()[0].clone());
        }
        // Every pod of the ReplicaSets' namespace is controlled by the one that selects it, as in
        // a real cluster (running pods alike).
        if pod.metadata.namespace.as_deref() == Some(self.namespace_names()[0].as_str())
            && let Some(app) = pod.metadata.labels.as_ref().and_then(|l| l.get("app"))
        {
            pod.metadata.annotations = Some(BTreeMap::from([(
                OWNER_ANNOTATION.to_string(),
                format!("rs-{app}"),
            )]));
        }
        let main = self.main_container();
        let mut containers = vec![main];
        if self.chance(0.3) {
            let cpu = self.pick(&[None, Some("100m"), Some("400m")]);
            let memory = self.pick(&[None, Some("128Mi"), Some("1Gi")]);
            containers.push(container("second", cpu, memory, None, None, None, None));
        }
        let mut init_containers = Vec::new();
        if self.chance(0.25) {
            let cpu = self.pick(&[Some("500m"), Some("1"), Some("2500m")]);
            let memory = self.pick(&[None, Some("512Mi"), Some("3Gi")]);
            init_containers.push(container("init", cpu, memory, None, None, None, None));
        }
        if self.chance(0.2) {
            let cpu = self.pick(&[Some("100m"), Some("500m"), Some("1")]);
            let memory = self.pick(&[None, Some("256Mi")]);
            let mut sidecar = container("sidecar", cpu, memory, None, None, None, None);
            sidecar.restart_policy = Some("Always".into());
            init_containers.push(sidecar);
        }
        let spec = pod.spec.get_or_insert_with(PodSpec::default);
        spec.containers = containers;
        spec.init_containers = (!init_containers.is_empty()).then_some(init_containers);
        if self.chance(0.15) {
            pod.spec
                .get_or_insert_with(PodSpec::default)
                .runtime_class_name = Some(RUNTIME_CLASS.into());
        }
        if self.chance(0.2) {
            let selector = if self.chance(0.5) {
                ("disk".to_string(), self.pick(&["ssd", "hdd"]).to_string())
            } else {
                (ZONE.to_string(), self.pick(&ZONES).to_string())
            };
            pod.spec.get_or_insert_with(PodSpec::default).node_selector =
                Some(BTreeMap::from([selector]));
        }
        let mut affinity = Affinity::default();
        if self.chance(0.3) {
            let terms = (0..self.between(1, 2))
                .map(|_| self.node_selector_term(nodes))
                .collect();
            affinity.node_affinity = Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: terms,
                }),
                ..NodeAffinity::default()
            });
        }
        if self.chance(0.2) {
            let terms = (0..self.between(1, 2))
                .map(|_| self.affinity_term())
                .collect();
            affinity.pod_affinity = Some(PodAffinity {
                required_during_scheduling_ignored_during_execution: Some(terms),
                ..PodAffinity::default()
            });
        }
        if self.chance(0.2) {
            let terms = (0..self.between(1, 2))
                .map(|_| self.affinity_term())
                .collect();
            affinity.pod_anti_affinity = Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(terms),
                ..PodAntiAffinity::default()
            });
        }
        if affinity != Affinity::default() {
            pod.spec.get_or_insert_with(PodSpec::default).affinity = Some(affinity);
        }
        if self.chance(0.4) {
            let tolerations = (0..self.between(1, 3)).map(|_| self.toleration()).collect();
            pod.spec.get_or_insert_with(PodSpec::default).tolerations = Some(tolerations);
        }
        if self.chance(0.4) {
            let app = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app").cloned())
                .unwrap_or_default();
            let mut constraints: Vec<TopologySpreadConstraint> = Vec::new();
            for _ in 0..self.between(1, 2) {
                let constraint = self.spread_constraint(&app);
                if !constraints.iter().any(|c| {
                    c.topology_key == constraint.topology_key
                        && c.when_unsatisfiable == constraint.when_unsatisfiable
                }) {
                    constraints.push(constraint);
                }
            }
            pod.spec
                .get_or_insert_with(PodSpec::default)
                .topology_spread_constraints = Some(constraints);
        }
        pod
    }

    fn main_container(&mut self) -> Container {
        let cpu = self.pick(&[
            None,
            Some("100m"),
            Some("250m"),
            Some("500m"),
            Some("1"),
            Some("1500m"),
            Some("3"),
        ]);
        let memory = self.pick(&[None, Some("128Mi"), Some("512Mi"), Some("1Gi"), Some("3Gi")]);
        let storage = self.chance(0.15).then(|| self.pick(&["1Gi", "8Gi"]));
        let gpu = self.chance(0.12).then(|| self.between(1, 3));
        let ignored = self.chance(0.1).then(|| self.between(1, 2));
        let port = self.chance(0.2).then(|| self.host_port());
        let mut main = container("main", cpu, memory, storage, gpu, ignored, port);
        // Limits only: the API server copies them into the requests.
        if self.chance(0.1)
            && let Some(resources) = main.resources.as_mut()
        {
            let requests = resources.requests.take().unwrap_or_default();
            let limits = resources.limits.get_or_insert_with(BTreeMap::new);
            for (name, quantity) in requests {
                limits.insert(name, quantity);
            }
        } else if self.chance(0.2)
            && let Some(resources) = main.resources.as_mut()
        {
            // Limits above the requests change nothing for the scheduler.
            let limits = resources.limits.get_or_insert_with(BTreeMap::new);
            limits.entry("cpu".into()).or_insert(Quantity("4".into()));
            limits
                .entry("memory".into())
                .or_insert(Quantity("4Gi".into()));
        }
        main
    }

    fn node_selector_term(&mut self, nodes: &[String]) -> NodeSelectorTerm {
        let mut term = NodeSelectorTerm::default();
        if self.chance(0.15) {
            let name = if self.chance(0.9) {
                nodes[self.rng.random_range(0..nodes.len())].clone()
            } else {
                format!("{}-missing", self.prefix)
            };
            term.match_fields = Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: self.pick(&["In", "NotIn"]).into(),
                values: Some(vec![name]),
            }]);
            if self.chance(0.5) {
                return term;
            }
        }
        let requirements = (0..self.between(1, 2))
            .map(|_| self.node_requirement())
            .collect();
        term.match_expressions = Some(requirements);
        term
    }

    fn node_requirement(&mut self) -> NodeSelectorRequirement {
        let key = self.pick(&["disk", "gen", ZONE, "disk", "gen", ZONE, "missing"]);
        let numeric = key == "gen" && self.chance(0.5);
        let operator = if numeric {
            self.pick(&["Gt", "Lt"])
        } else {
            self.pick(&["In", "NotIn", "Exists", "DoesNotExist"])
        };
        let values = match operator {
            "Gt" | "Lt" => Some(vec![self.between(1, 5).to_string()]),
            "Exists" | "DoesNotExist" => None,
            _ => {
                let domain: &[&str] = match key {
                    "disk" => &["ssd", "hdd"],
                    "gen" => &["1", "2", "3", "4", "5"],
                    "missing" => &["x"],
                    _ => &ZONES,
                };
                let mut values = vec![self.pick(domain).to_string()];
                if self.chance(0.4) {
                    let other = self.pick(domain).to_string();
                    if !values.contains(&other) {
                        values.push(other);
                    }
                }
                Some(values)
            }
        };
        NodeSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values,
        }
    }

    fn affinity_term(&mut self) -> PodAffinityTerm {
        let keyed = self.chance(0.2);
        let selector = if self.chance(0.6) {
            LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "app".to_string(),
                    self.pick(&APPS).to_string(),
                )])),
                ..LabelSelector::default()
            }
        } else {
            let requirement = if keyed || self.chance(0.5) {
                LabelSelectorRequirement {
                    key: "app".into(),
                    operator: self.pick(&["In", "NotIn"]).into(),
                    values: Some(vec![self.pick(&APPS).into()]),
                }
            } else {
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: self.pick(&["Exists", "DoesNotExist"]).into(),
                    values: None,
                }
            };
            LabelSelector {
                match_expressions: Some(vec![requirement]),
                ..LabelSelector::default()
            }
        };
        let mut term = PodAffinityTerm {
            topology_key: self.pick(&[HOSTNAME, ZONE]).into(),
            label_selector: Some(selector),
            ..PodAffinityTerm::default()
        };
        match self.between(0, 4) {
            0 => term.namespaces = Some(self.namespace_names().to_vec()),
            1 => term.namespace_selector = Some(LabelSelector::default()),
            2 => {
                term.namespace_selector = Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([(
                        "team".to_string(),
                        self.pick(&["a", "b"]).to_string(),
                    )])),
                    ..LabelSelector::default()
                });
            }
            _ => {}
        }
        if keyed {
            if self.chance(0.7) {
                term.match_label_keys = Some(vec!["tier".into()]);
            } else {
                term.mismatch_label_keys = Some(vec!["tier".into()]);
            }
        }
        term
    }

    fn toleration(&mut self) -> Toleration {
        let key = self.pick(&["dedicated", "spot", "example.com/maintenance", ""]);
        if key.is_empty() {
            // Tolerates every taint of these effects; never NoSchedule, which would tolerate a
            // cordoned node (see the module comment).
            return Toleration {
                operator: Some("Exists".into()),
                effect: Some(self.pick(&["NoExecute", "PreferNoSchedule"]).into()),
                ..Toleration::default()
            };
        }
        let effect = self.pick(&["", "NoSchedule", "NoExecute", "PreferNoSchedule"]);
        let (operator, value) = if self.chance(0.4) {
            ("Exists", None)
        } else {
            let value = match key {
                "dedicated" => self.pick(&["gpu", "db"]),
                "spot" => self.pick(&["", "true"]),
                _ => self.pick(&["true", "false"]),
            };
            ("Equal", Some(value.to_string()))
        };
        Toleration {
            key: Some(key.into()),
            operator: Some(operator.into()),
            value,
            effect: (!effect.is_empty()).then(|| effect.to_string()),
            toleration_seconds: (effect == "NoExecute" && self.chance(0.3)).then_some(60),
        }
    }

    fn spread_constraint(&mut self, own_app: &str) -> TopologySpreadConstraint {
        let hard = self.chance(0.7);
        let app = if self.chance(0.7) {
            own_app.to_string()
        } else {
            self.pick(&APPS).to_string()
        };
        TopologySpreadConstraint {
            max_skew: self.pick(&[1, 1, 2]),
            topology_key: self.pick(&[ZONE, HOSTNAME]).into(),
            when_unsatisfiable: if hard {
                "DoNotSchedule"
            } else {
                "ScheduleAnyway"
            }
            .into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".to_string(), app)])),
                ..LabelSelector::default()
            }),
            min_domains: (hard && self.chance(0.25)).then(|| self.between(2, 4) as i32),
            node_affinity_policy: self
                .chance(0.3)
                .then(|| self.pick(&["Honor", "Ignore"]).to_string()),
            node_taints_policy: self
                .chance(0.3)
                .then(|| self.pick(&["Honor", "Ignore"]).to_string()),
            match_label_keys: self.chance(0.2).then(|| vec!["tier".to_string()]),
        }
    }
}

fn storage_class(name: &str, binding_mode: &str) -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        provisioner: CSI_DRIVER.into(),
        volume_binding_mode: Some(binding_mode.into()),
        ..StorageClass::default()
    }
}

fn claim(namespace: &str, name: &str, class: &str, mode: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec![mode.into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity("1Gi".into()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            storage_class_name: Some(class.into()),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// Mounts the claim in the pod (once: a pod naming the same claim twice is not generated).
fn add_claim_volume(pod: &mut Pod, claim: &str) {
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    if volumes.iter().any(|v| {
        v.persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name == claim)
    }) {
        return;
    }
    let name = format!("v{}", volumes.len());
    volumes.push(Volume {
        name,
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: None,
        }),
        ..Volume::default()
    });
}

fn quantities(values: &BTreeMap<String, String>) -> BTreeMap<String, Quantity> {
    values
        .iter()
        .map(|(k, v)| (k.clone(), Quantity(v.clone())))
        .collect()
}

fn namespace(name: &str, labels: &[(&str, &str)]) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// A ReplicaSet with no replicas: it exists so that the scheduler's default spread constraints
/// find the selector of the pods it controls (no controller manager runs to create pods for it).
fn replica_set(namespace: &str, name: &str, app: &str) -> ReplicaSet {
    let labels = BTreeMap::from([("app".to_string(), app.to_string())]);
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(0),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: Some(PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container("main", None, None, None, None, None, None)],
                    ..PodSpec::default()
                }),
            }),
            ..ReplicaSetSpec::default()
        }),
        status: None,
    }
}

/// The owner reference of a pod controlled by the ReplicaSet `name` with this uid.
pub fn owner_reference(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn container(
    name: &str,
    cpu: Option<&str>,
    memory: Option<&str>,
    storage: Option<&str>,
    gpu: Option<u32>,
    ignored: Option<u32>,
    port: Option<ContainerPort>,
) -> Container {
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    if let Some(cpu) = cpu {
        requests.insert("cpu".to_string(), Quantity(cpu.into()));
    }
    if let Some(memory) = memory {
        requests.insert("memory".to_string(), Quantity(memory.into()));
    }
    if let Some(storage) = storage {
        requests.insert("ephemeral-storage".to_string(), Quantity(storage.into()));
    }
    // Extended resources cannot be overcommitted: requests must equal limits.
    for (resource, count) in [(GPU, gpu), (IGNORED, ignored)] {
        if let Some(count) = count {
            requests.insert(resource.to_string(), Quantity(count.to_string()));
            limits.insert(resource.to_string(), Quantity(count.to_string()));
        }
    }
    let resources = (!requests.is_empty()).then(|| ResourceRequirements {
        requests: Some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..ResourceRequirements::default()
    });
    Container {
        name: name.into(),
        image: Some("registry.k8s.io/pause:3.10".into()),
        resources,
        ports: port.map(|p| vec![p]),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_and_index_give_the_same_case() {
        let settings = GeneratorSettings::default();
        let first = generate_case(7, 3, settings);
        let again = generate_case(7, 3, settings);
        assert_eq!(first.nodes, again.nodes);
        assert_eq!(first.running, again.running);
        assert_eq!(first.pending, again.pending);
        let other = generate_case(8, 3, settings);
        assert_ne!(
            (first.nodes, first.pending),
            (other.nodes, other.pending),
            "another seed gives another case"
        );
    }
}
