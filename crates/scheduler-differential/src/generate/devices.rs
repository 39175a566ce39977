//! The Dynamic Resource Allocation part of a case (the `dra` family): DeviceClasses with CEL
//! selectors, the ResourceSlices a DRA driver would publish (node-local GPUs with attributes and
//! capacity, and sometimes network-attached FPGAs reachable from one zone or from every node), and
//! ResourceClaims that pending pods use by name — their own, or one shared by several pods.
//!
//! Claims are always used by name: the control plane of the differential test runs no controller
//! manager, so nothing would make a claim from a template.

use k8s_openapi::api::core::v1::{Node, Pod, PodResourceClaim};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use serde_json::{Value, json};

use super::{Generator, ZONE, ZONES, container};

/// The driver of the node-local GPUs.
pub const GPU_DRIVER: &str = "gpu.example.com";
/// The driver of the network-attached FPGAs.
pub const FPGA_DRIVER: &str = "fpga.example.com";

/// A case's DRA objects, created before its pods.
#[derive(Debug, Clone, Default)]
pub struct Devices {
    pub classes: Vec<DeviceClass>,
    pub slices: Vec<ResourceSlice>,
    pub claims: Vec<ResourceClaim>,
}

/// The classes every case has, by suffix: what their selectors ask for.
const CLASSES: [(&str, &str); 4] = [
    ("gpu", "device.driver == 'gpu.example.com'"),
    (
        "h100",
        "device.driver == 'gpu.example.com' && device.attributes['gpu.example.com'].model == 'h100'",
    ),
    (
        "big",
        "device.driver == 'gpu.example.com' && device.capacity['gpu.example.com'].memory.compareTo(quantity('40Gi')) >= 0",
    ),
    ("fpga", "device.driver == 'fpga.example.com'"),
];

/// Selectors a request of a GPU class may add to its class's.
const GPU_REQUEST_SELECTORS: [&str; 4] = [
    "device.attributes['gpu.example.com'].model == 'a100'",
    "device.capacity['gpu.example.com'].memory.compareTo(quantity('80Gi')) == 0",
    "device.attributes['gpu.example.com'].index >= 1",
    "device.capacity['gpu.example.com'].memory.isGreaterThan(quantity('20Gi'))",
];

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("the generator writes valid objects")
}

impl Generator<'_> {
    fn class_name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.prefix)
    }

    /// Classes and slices: most nodes get one to four GPUs; sometimes FPGAs in a pool reachable
    /// from one zone's nodes, or from every node.
    pub(super) fn devices(&mut self, nodes: &[Node]) -> Devices {
        let mut devices = Devices::default();
        for (suffix, expression) in CLASSES {
            devices.classes.push(from_json(json!({
                "metadata": {"name": self.class_name(suffix)},
                "spec": {"selectors": [{"cel": {"expression": expression}}]},
            })));
        }
        for node in nodes {
            let Some(name) = node.metadata.name.clone() else {
                continue;
            };
            if !self.chance(0.75) {
                continue;
            }
            let count = self.between(1, 4);
            let gpus: Vec<Value> = (0..count)
                .map(|k| {
                    let model = self.pick(&["a100", "h100"]);
                    let memory = self.pick(&["20Gi", "40Gi", "80Gi"]);
                    json!({
                        "name": format!("gpu-{k}"),
                        "attributes": {"model": {"string": model}, "index": {"int": k}},
                        "capacity": {"memory": {"value": memory}},
                    })
                })
                .collect();
            devices.slices.push(from_json(json!({
                "metadata": {"name": format!("{name}-gpus")},
                "spec": {
                    "driver": GPU_DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": gpus,
                },
            })));
        }
        if self.chance(0.4) {
            let count = self.between(1, 2);
            let fpgas: Vec<Value> = (0..count)
                .map(|k| json!({"name": format!("fpga-{k}")}))
                .collect();
            let mut spec = json!({
                "driver": FPGA_DRIVER,
                "pool": {"name": format!("{}-fpgas", self.prefix), "generation": 1, "resourceSliceCount": 1},
                "devices": fpgas,
            });
            if self.chance(0.6) {
                let zone = self.pick(&ZONES);
                spec["nodeSelector"] = json!({"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": ZONE, "operator": "In", "values": [zone]}
                ]}]});
            } else {
                spec["allNodes"] = json!(true);
            }
            devices.slices.push(from_json(json!({
                "metadata": {"name": format!("{}-fpgas", self.prefix)},
                "spec": spec,
            })));
        }
        devices
    }

    /// One request of a claim: a count of one class's devices (sometimes with a selector of its
    /// own and a constraint that they share a model), all of them, or the first of two
    /// alternatives that can be satisfied.
    fn claim_spec(&mut self) -> Value {
        let roll = self.between(0, 99);
        if roll < 12 {
            let suffix = self.pick(&["gpu", "fpga"]);
            let class = self.class_name(suffix);
            return json!({"requests": [{"name": "dev", "exactly": {
                "deviceClassName": class, "allocationMode": "All",
            }}]});
        }
        if roll < 27 {
            let first = self.between(1, 2);
            let (h100, gpu) = (self.class_name("h100"), self.class_name("gpu"));
            return json!({"requests": [{"name": "dev", "firstAvailable": [
                {"name": "fast", "deviceClassName": h100,
                 "allocationMode": "ExactCount", "count": first},
                {"name": "any", "deviceClassName": gpu,
                 "allocationMode": "ExactCount", "count": 1},
            ]}]});
        }
        let suffix = self.pick(&["gpu", "gpu", "h100", "big", "fpga"]);
        let count = self.pick(&[1, 1, 1, 2, 3]);
        let mut exactly = json!({
            "deviceClassName": self.class_name(suffix),
            "allocationMode": "ExactCount",
            "count": count,
        });
        if suffix != "fpga" && self.chance(0.3) {
            let expression = self.pick(&GPU_REQUEST_SELECTORS);
            exactly["selectors"] = json!([{"cel": {"expression": expression}}]);
        }
        let mut spec = json!({"requests": [{"name": "dev", "exactly": exactly}]});
        if suffix != "fpga" && count > 1 && self.chance(0.5) {
            spec["constraints"] = json!([{"matchAttribute": "gpu.example.com/model"}]);
        }
        spec
    }

    /// Gives the pod one or two claims: its own (made now) or, sometimes, its namespace's shared
    /// claim, which every pod using it must reach from the node where it was allocated.
    pub(super) fn use_devices(&mut self, pod: &mut Pod, devices: &mut Devices) {
        // Most device pods ask for little else, so that their devices decide where they fit.
        if self.chance(0.6)
            && let Some(spec) = pod.spec.as_mut()
        {
            spec.affinity = None;
            spec.node_selector = None;
            spec.topology_spread_constraints = None;
            spec.init_containers = None;
            spec.runtime_class_name = None;
            spec.containers = vec![container(
                "main",
                Some("100m"),
                Some("64Mi"),
                None,
                None,
                None,
                None,
            )];
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let count = if self.chance(0.8) { 1 } else { 2 };
        let mut uses = Vec::new();
        for c in 0..count {
            let claim_name = if c == 0 && self.chance(0.25) {
                let shared = format!("{namespace}-shared");
                let exists = devices
                    .claims
                    .iter()
                    .any(|claim| claim.metadata.name.as_deref() == Some(shared.as_str()));
                if !exists {
                    let spec = self.claim_spec();
                    devices.claims.push(claim(&namespace, &shared, spec));
                }
                shared
            } else {
                let own = format!("{pod_name}-claim{c}");
                let spec = self.claim_spec();
                devices.claims.push(claim(&namespace, &own, spec));
                own
            };
            uses.push(PodResourceClaim {
                name: format!("c{c}"),
                resource_claim_name: Some(claim_name),
                resource_claim_template_name: None,
            });
        }
        if let Some(spec) = pod.spec.as_mut() {
            spec.resource_claims = Some(uses);
        }
    }
}

fn claim(namespace: &str, name: &str, devices: Value) -> ResourceClaim {
    from_json(json!({
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"devices": devices},
    }))
}
