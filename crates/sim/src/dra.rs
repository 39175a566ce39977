//! The simulated cluster's Dynamic Resource Allocation objects (ResourceSlices, DeviceClasses,
//! ResourceClaims and their templates) and the parts of the control plane that change them while
//! a scenario runs.
//!
//! - The DRA drivers: a node of a group that declares devices (`nodeGroups[].devices`) publishes
//!   them from the moment it registers, as node-local ResourceSlices of a pool of its own (named
//!   after the node), and they go away with the node.
//! - The resourceclaim controller: a pod whose `spec.resourceClaims` names a template gets a claim
//!   made from it when it is created, named `<pod>-<claim>-<5 characters>` as the real controller
//!   names it, owned by the pod and recorded in the pod's `status.resourceClaimStatuses`. When the
//!   pod goes, its own claims are deleted with it, and it is taken out of the `reservedFor` of
//!   claims it shared; a claim left with no consumer is deallocated.
//! - The scheduler's binding: after the scheduler stand-in binds a pod, the allocation and
//!   reservation the snapshot made for its claims (what kube-scheduler's Reserve and PreBind write)
//!   are copied into the claim objects, so Gather reads them as a live cluster would show them.
//!
//! Pods without claims never get here.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ferroscale_model::{
    ClaimConsumer, Device, DeviceAttribute, DeviceScope, DraObjects, Pod, PodClaimSource,
    PodResourceClaimStatus, Quantity, ResourceClaim, ResourceSlice,
};
use ferroscale_objects::K8sObject;
use ferroscale_scheduling::Snapshot;

/// The longest base of a generated claim name: 63 characters leave room for `-` and the five
/// characters the API server adds to a `generateName`.
const MAX_CLAIM_NAME_BASE: usize = 57;

/// The characters the API server draws a `generateName` suffix from (no vowels, no look-alikes).
const NAME_SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Devices every node of a group publishes: `count` devices of one driver named
/// `<name_prefix>-<i>`, with the same attributes and capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDevices {
    pub driver: String,
    /// Devices are named `<name_prefix>-0`, `<name_prefix>-1`, ...
    pub name_prefix: String,
    pub count: usize,
    /// Fully qualified attribute name → value.
    pub attributes: BTreeMap<String, DeviceAttribute>,
    /// Fully qualified capacity name → amount.
    pub capacity: BTreeMap<String, Quantity>,
}

/// The node-local slices a node of a group with these devices publishes: one slice per driver, in
/// a pool named after the node (as a DRA driver's kubelet plugin publishes them).
pub fn node_slices(node_name: &str, devices: &[GroupDevices]) -> Vec<ResourceSlice> {
    let mut by_driver: BTreeMap<&str, Vec<Device>> = BTreeMap::new();
    for declared in devices {
        let list = by_driver.entry(declared.driver.as_str()).or_default();
        for i in 0..declared.count {
            list.push(Device {
                name: format!("{}-{i}", declared.name_prefix),
                attributes: declared.attributes.clone(),
                capacity: declared.capacity.clone(),
                scope: None,
            });
        }
    }
    by_driver
        .into_iter()
        .map(|(driver, devices)| ResourceSlice {
            name: format!("{node_name}-{}", driver.replace(['.', '/'], "-")),
            driver: driver.to_string(),
            pool: node_name.to_string(),
            pool_generation: 1,
            pool_slice_count: 1,
            scope: DeviceScope::Node(node_name.to_string()),
            per_device_node_selection: false,
            devices,
        })
        .collect()
}

/// The DRA objects of the simulated cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterDra {
    objects: DraObjects,
    /// Devices the nodes of each group publish, by group id.
    group_devices: HashMap<String, Vec<GroupDevices>>,
    /// Claims made from templates so far, for their name suffixes.
    generated: usize,
}

/// The claim objects one pod uses, as `(namespace, name)`, in `spec.resourceClaims` order (claims
/// from templates not made yet are left out).
fn pod_claim_names(pod: &Pod) -> Vec<(String, String)> {
    pod.resource_claims
        .iter()
        .filter_map(|c| pod.resource_claim_name(c))
        .map(|name| (pod.namespace.to_string(), name.to_string()))
        .collect()
}

/// `generateName` of a claim made for `pod_claim` of `pod`, shortened proportionally as the real
/// controller does when pod and claim names are long.
fn claim_name_base(pod: &str, pod_claim: &str) -> String {
    let base = format!("{pod}-{pod_claim}-");
    if base.len() <= MAX_CLAIM_NAME_BASE {
        return base;
    }
    let keep = |s: &str| -> String {
        let n = s.len() * MAX_CLAIM_NAME_BASE / base.len();
        s.chars().take(n).collect()
    };
    // Like the real controller, the shortened base has no trailing `-`.
    format!("{}-{}", keep(pod), keep(pod_claim))
}

/// Five characters from the API server's suffix alphabet, deterministic in `n` so runs repeat.
fn name_suffix(n: usize) -> String {
    // A multiplicative scramble keeps consecutive claims from differing in one letter only.
    let mut value = (n as u64).wrapping_mul(2_654_435_761).wrapping_add(97);
    let base = NAME_SUFFIX_ALPHABET.len() as u64;
    (0..5)
        .map(|_| {
            let c = NAME_SUFFIX_ALPHABET[(value % base) as usize] as char;
            value /= base;
            c
        })
        .collect()
}

impl ClusterDra {
    /// Every DRA object as Gather would read it now.
    pub fn objects(&self) -> &DraObjects {
        &self.objects
    }

    /// Whether the cluster has any DRA object or group device at all (so DRA-free scenarios pay
    /// nothing).
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.group_devices.is_empty()
    }

    /// The scheduler stand-in's snapshot reads the objects as they are now.
    pub fn load_into(&self, snapshot: &mut Snapshot) {
        snapshot.set_dra_objects(&self.objects);
    }

    /// Keeps `object` when it is a DRA object; returns whether it was one.
    pub fn add(&mut self, object: &K8sObject) -> bool {
        match object {
            K8sObject::ResourceSlice(slice) => self.objects.slices.push(Arc::new(slice.clone())),
            K8sObject::DeviceClass(class) => self.objects.classes.push(Arc::new(class.clone())),
            K8sObject::ResourceClaim(claim) => self.objects.claims.push(Arc::new(claim.clone())),
            K8sObject::ResourceClaimTemplate(template) => {
                self.objects.templates.push(Arc::new(template.clone()))
            }
            _ => return false,
        }
        true
    }

    /// The devices every node of `group` publishes.
    pub fn set_group_devices(&mut self, group: &str, devices: Vec<GroupDevices>) {
        if devices.is_empty() {
            self.group_devices.remove(group);
        } else {
            self.group_devices.insert(group.to_string(), devices);
        }
    }

    /// A node registered: it publishes its group's devices, unless slices for it were given.
    /// Returns whether anything changed.
    pub fn node_registered(&mut self, node: &str, group: Option<&str>) -> bool {
        let Some(devices) = group.and_then(|g| self.group_devices.get(g)) else {
            return false;
        };
        if self
            .objects
            .slices
            .iter()
            .any(|s| s.node_name() == Some(node))
        {
            return false;
        }
        let slices = node_slices(node, devices);
        self.objects.slices.extend(slices.into_iter().map(Arc::new));
        true
    }

    /// A node went away, and the slices of its devices with it. Returns whether anything changed.
    pub fn node_removed(&mut self, node: &str) -> bool {
        let before = self.objects.slices.len();
        self.objects.slices.retain(|s| s.node_name() != Some(node));
        self.objects.slices.len() != before
    }

    fn claim_index(&self, namespace: &str, name: &str) -> Option<usize> {
        self.objects
            .claims
            .iter()
            .position(|c| c.namespace == namespace && c.name == name)
    }

    /// Plays the resourceclaim controller for a new pod: each of its claims that comes from a
    /// template and has no claim yet gets one, made from the template, owned by the pod and named
    /// in its status. A template that does not exist makes no claim (the pod waits for it, as it
    /// would in a cluster). Returns whether anything changed.
    pub fn make_template_claims(&mut self, pod: &mut Pod) -> bool {
        let mut changed = false;
        for pod_claim in pod.resource_claims.clone() {
            let PodClaimSource::Template(template_name) = &pod_claim.source else {
                continue;
            };
            if pod.resource_claim_name(&pod_claim).is_some() {
                continue;
            }
            let Some(template) = self
                .objects
                .templates
                .iter()
                .find(|t| t.namespace == pod.namespace && &t.name == template_name)
                .cloned()
            else {
                continue;
            };
            let base = claim_name_base(&pod.name, &pod_claim.name);
            let name = loop {
                let candidate = format!("{base}{}", name_suffix(self.generated));
                self.generated += 1;
                if self.claim_index(&pod.namespace, &candidate).is_none() {
                    break candidate;
                }
            };
            self.objects.claims.push(Arc::new(ResourceClaim {
                namespace: pod.namespace.to_string(),
                name: name.clone(),
                uid: format!("uid-claim-{}-{name}", pod.namespace),
                spec: template.spec.clone(),
                allocation: None,
                reserved_for: Vec::new(),
                deleting: false,
                owner_pod_uid: Some(pod.uid.to_string()),
            }));
            pod.resource_claim_statuses
                .retain(|s| s.name != pod_claim.name);
            pod.resource_claim_statuses.push(PodResourceClaimStatus {
                name: pod_claim.name.clone(),
                claim_name: Some(name),
            });
            changed = true;
        }
        changed
    }

    /// Copies the allocation and reservation the snapshot holds for the pod's claims into the
    /// claim objects (after the scheduler stand-in bound the pod, or after the pod left a node).
    /// Returns whether anything changed.
    pub fn write_back(&mut self, pod: &Pod, snapshot: &Snapshot) -> bool {
        let mut changed = false;
        for (namespace, name) in pod_claim_names(pod) {
            let Some(index) = self.claim_index(&namespace, &name) else {
                continue;
            };
            let allocation = snapshot.claim_allocation(&namespace, &name).cloned();
            let reserved_for = snapshot.claim_reserved_for(&namespace, &name).to_vec();
            let claim = &self.objects.claims[index];
            if claim.allocation == allocation && claim.reserved_for == reserved_for {
                continue;
            }
            let claim = Arc::make_mut(&mut self.objects.claims[index]);
            claim.allocation = allocation;
            claim.reserved_for = reserved_for;
            changed = true;
        }
        changed
    }

    /// The pod no longer uses its claims (it was deleted, evicted, or its node went away): it
    /// leaves their `reservedFor`, a claim left with no consumer is deallocated, and when
    /// `deleted` the claims it owns are deleted with it. Returns whether anything changed.
    pub fn release(&mut self, pod: &Pod, deleted: bool) -> bool {
        let mut changed = false;
        for (namespace, name) in pod_claim_names(pod) {
            let Some(index) = self.claim_index(&namespace, &name) else {
                continue;
            };
            if deleted && self.objects.claims[index].owner_pod_uid.as_deref() == Some(&pod.uid) {
                self.objects.claims.remove(index);
                changed = true;
                continue;
            }
            let claim = &self.objects.claims[index];
            if !claim.reserved_for.iter().any(|c| c.uid == pod.uid) {
                continue;
            }
            let claim = Arc::make_mut(&mut self.objects.claims[index]);
            claim
                .reserved_for
                .retain(|c: &ClaimConsumer| c.uid != pod.uid);
            if claim.reserved_for.is_empty() {
                claim.allocation = None;
            }
            changed = true;
        }
        changed
    }

    /// The claim `namespace/name`, if it exists.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&ResourceClaim> {
        self.claim_index(namespace, name)
            .map(|i| self.objects.claims[i].as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::{PodResourceClaim, ResourceClaimTemplate};

    fn template(name: &str) -> K8sObject {
        K8sObject::ResourceClaimTemplate(ResourceClaimTemplate {
            namespace: "ml".into(),
            name: name.into(),
            spec: Default::default(),
        })
    }

    fn pod_with_template(name: &str, template: &str) -> Pod {
        let mut pod = Pod::new("ml", name);
        pod.resource_claims.push(PodResourceClaim {
            name: "gpu".into(),
            source: PodClaimSource::Template(template.into()),
        });
        pod
    }

    #[test]
    fn a_template_claim_is_made_for_each_pod_named_like_the_controller_names_it() {
        let mut dra = ClusterDra::default();
        assert!(dra.add(&template("one-gpu")));
        let mut a = pod_with_template("train-0", "one-gpu");
        let mut b = pod_with_template("train-1", "one-gpu");
        assert!(dra.make_template_claims(&mut a));
        assert!(dra.make_template_claims(&mut b));
        // Done once per pod.
        assert!(!dra.make_template_claims(&mut a));
        let name_a = a.resource_claim_name(&a.resource_claims[0]).unwrap();
        let name_b = b.resource_claim_name(&b.resource_claims[0]).unwrap();
        assert!(name_a.starts_with("train-0-gpu-"), "{name_a}");
        assert_eq!(name_a.len(), "train-0-gpu-".len() + 5);
        assert_ne!(name_a, name_b);
        let claim = dra.claim("ml", name_a).unwrap();
        assert_eq!(claim.owner_pod_uid.as_deref(), Some(a.uid.as_str()));
        assert!(claim.allocation.is_none());
        assert_eq!(dra.objects().claims.len(), 2);
        // No template, no claim: the pod waits for one.
        let mut c = pod_with_template("train-2", "missing");
        assert!(!dra.make_template_claims(&mut c));
        assert!(c.resource_claim_statuses.is_empty());
    }

    #[test]
    fn long_names_are_shortened_proportionally() {
        let pod = "p".repeat(60);
        let claim = "c".repeat(30);
        let base = claim_name_base(&pod, &claim);
        assert!(base.len() <= MAX_CLAIM_NAME_BASE, "{base}");
        // Both names keep a share in proportion to their length: 60 and 30 of 92 characters.
        assert_eq!(base, format!("{}-{}", "p".repeat(37), "c".repeat(18)));
        assert_eq!(claim_name_base("web", "gpu"), "web-gpu-");
    }

    #[test]
    fn a_deleted_pods_own_claims_go_and_shared_ones_are_released() {
        let mut dra = ClusterDra::default();
        dra.add(&template("one-gpu"));
        let mut pod = pod_with_template("train-0", "one-gpu");
        pod.resource_claims.push(PodResourceClaim {
            name: "shared".into(),
            source: PodClaimSource::Claim("team-gpu".into()),
        });
        let consumer = ClaimConsumer {
            resource: "pods".into(),
            name: pod.name.to_string(),
            uid: pod.uid.to_string(),
        };
        let other = ClaimConsumer {
            resource: "pods".into(),
            name: "other".into(),
            uid: "uid-other".into(),
        };
        dra.add(&K8sObject::ResourceClaim(ResourceClaim {
            namespace: "ml".into(),
            name: "team-gpu".into(),
            allocation: Some(Default::default()),
            reserved_for: vec![consumer.clone(), other.clone()],
            ..ResourceClaim::default()
        }));
        dra.make_template_claims(&mut pod);
        assert_eq!(dra.objects().claims.len(), 2);
        assert!(dra.release(&pod, true));
        assert_eq!(
            dra.objects().claims.len(),
            1,
            "the pod's own claim is deleted"
        );
        let shared = dra.claim("ml", "team-gpu").unwrap();
        assert_eq!(shared.reserved_for, vec![other.clone()]);
        assert!(shared.allocation.is_some(), "another pod still uses it");
        // The last consumer goes: the claim is deallocated but stays.
        let mut last = Pod::new("ml", "other");
        last.uid = "uid-other".into();
        last.resource_claims.push(PodResourceClaim {
            name: "shared".into(),
            source: PodClaimSource::Claim("team-gpu".into()),
        });
        assert!(dra.release(&last, true));
        let shared = dra.claim("ml", "team-gpu").unwrap();
        assert!(shared.reserved_for.is_empty());
        assert!(shared.allocation.is_none());
    }

    #[test]
    fn group_nodes_publish_their_devices_until_they_go() {
        let mut dra = ClusterDra::default();
        dra.set_group_devices(
            "gpu",
            vec![GroupDevices {
                driver: "gpu.example.com".into(),
                name_prefix: "gpu".into(),
                count: 4,
                attributes: BTreeMap::new(),
                capacity: BTreeMap::new(),
            }],
        );
        assert!(dra.node_registered("gpu-0", Some("gpu")));
        assert!(!dra.node_registered("gpu-0", Some("gpu")), "once");
        assert!(!dra.node_registered("cpu-0", Some("cpu")));
        assert!(!dra.node_registered("loose", None));
        let slices = &dra.objects().slices;
        assert_eq!(slices.len(), 1);
        assert_eq!(slices[0].node_name(), Some("gpu-0"));
        assert_eq!(slices[0].pool, "gpu-0");
        assert_eq!(slices[0].driver, "gpu.example.com");
        let names: Vec<_> = slices[0].devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]);
        assert!(dra.node_removed("gpu-0"));
        assert!(dra.objects().slices.is_empty());
    }
}
