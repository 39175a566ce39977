//! A Kubernetes Pod as the autoscaler needs it: identity, owner, priority, the effective resource
//! requests the scheduler computes, and every scheduling constraint the filters evaluate.

use compact_str::{CompactString, format_compact};
use thin_vec::ThinVec;

use crate::dra::{PodClaimSource, PodResourceClaim, PodResourceClaimStatus};
use crate::labels::{LabelSelector, Labels, NodeSelector};
use crate::node::ConditionStatus;
use crate::resources::Resources;
use crate::taints::Toleration;
use crate::time::Timestamp;

pub const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";
pub const SAFE_TO_EVICT_LOCAL_VOLUMES: &str =
    "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes";
pub const POD_SCALE_UP_DELAY: &str = "cluster-autoscaler.kubernetes.io/pod-scale-up-delay";
pub const DAEMONSET_POD: &str = "cluster-autoscaler.kubernetes.io/daemonset-pod";
pub const MIRROR_POD: &str = "kubernetes.io/config.mirror";
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub controller: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PodPhase {
    #[default]
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RestartPolicy {
    #[default]
    Always,
    OnFailure,
    Never,
}

/// The `PodScheduled` condition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodCondition {
    pub status: ConditionStatus,
    pub reason: String,
    pub last_transition: Option<Timestamp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
    Sctp,
}

/// A container port with a `hostPort`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub port: u16,
    pub protocol: Protocol,
    /// Empty means every address (`0.0.0.0`).
    pub host_ip: String,
}

impl HostPort {
    /// Two host ports conflict when protocol and port are equal and either binds every address or
    /// both bind the same one.
    pub fn conflicts_with(&self, other: &HostPort) -> bool {
        let wildcard = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
        self.port == other.port
            && self.protocol == other.protocol
            && (wildcard(&self.host_ip)
                || wildcard(&other.host_ip)
                || self.host_ip == other.host_ip)
    }
}

/// A required pod affinity or anti-affinity term. `matchLabelKeys` / `mismatchLabelKeys` are merged
/// into `label_selector` at the boundary, as the API server does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodAffinityTerm {
    /// `None` matches no pod.
    pub label_selector: Option<LabelSelector>,
    /// With `namespace_selector` empty-or-absent and no names: the pod's own namespace.
    pub namespaces: Vec<String>,
    /// `Some(empty)` selects every namespace.
    pub namespace_selector: Option<LabelSelector>,
    pub topology_key: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UnsatisfiableAction {
    #[default]
    DoNotSchedule,
    ScheduleAnyway,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeInclusionPolicy {
    Honor,
    Ignore,
}

/// A topology spread constraint. `matchLabelKeys` are merged into `label_selector` at the boundary.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopologySpreadConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    pub when_unsatisfiable: UnsatisfiableAction,
    /// `None` matches no pod (so every domain counts zero).
    pub label_selector: Option<LabelSelector>,
    pub min_domains: Option<i32>,
    /// Default `Honor`: only nodes matching the pod's node selector/affinity form domains.
    pub node_affinity_policy: NodeInclusionPolicy,
    /// Default `Ignore`: tainted nodes still form domains.
    pub node_taints_policy: NodeInclusionPolicy,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum VolumeSource {
    HostPath,
    EmptyDir {
        memory_medium: bool,
    },
    PersistentVolumeClaim {
        claim_name: String,
    },
    /// A generic ephemeral volume: the control plane creates its claim, named
    /// `<pod name>-<volume name>` and owned by the pod (see [`Pod::ephemeral_claim_name`]).
    Ephemeral,
    /// An inline CSI volume (`spec.volumes[].csi`). Kept for what the cluster shows; the
    /// scheduler's NodeVolumeLimits does not count it (it is never attached to the node).
    Csi {
        driver: String,
    },
    /// ConfigMap, Secret, projected, downward API and every other kind that is not local storage.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Volume {
    pub name: String,
    pub source: VolumeSource,
}

/// A pod as the engine reads it. A cluster holds a million of these, and most of their lists are
/// empty (a pod of a Deployment has no host ports, volumes of its own kind, claims, spread
/// constraints or affinity terms): they are [`ThinVec`]s, one pointer each and no allocation
/// while empty, where a `Vec` is three words. Its names are [`CompactString`]s, kept inside the
/// pod up to 24 bytes (a name, namespace, uid or node name usually fits), and the fields few pods
/// set are boxed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pod {
    pub namespace: CompactString,
    pub name: CompactString,
    pub uid: CompactString,
    pub labels: Labels,
    pub annotations: Labels,
    pub owner_references: ThinVec<OwnerRef>,
    pub priority: Option<i32>,
    pub scheduler_name: CompactString,
    pub node_name: Option<CompactString>,
    /// Rare (set while a preemption is in progress): boxed, a word less in every pod.
    pub nominated_node_name: Option<Box<str>>,
    pub phase: PodPhase,
    pub restart_policy: RestartPolicy,
    /// Only unschedulable pods carry it: boxed, five words less in every other pod.
    pub scheduled_condition: Option<Box<PodCondition>>,
    pub creation_time: Timestamp,
    pub deletion_time: Option<Timestamp>,
    pub termination_grace_seconds: Option<i64>,
    /// Effective requests as the scheduler computes them (see [`effective_requests`]), `pods: 1`
    /// not included.
    pub requests: Resources,
    pub node_selector: Labels,
    /// Boxed: most pods have none, and the box is two words less than the selector.
    pub required_node_affinity: Option<Box<NodeSelector>>,
    pub pod_affinity: ThinVec<PodAffinityTerm>,
    pub pod_anti_affinity: ThinVec<PodAffinityTerm>,
    pub tolerations: ThinVec<Toleration>,
    pub host_ports: ThinVec<HostPort>,
    pub topology_spread: ThinVec<TopologySpreadConstraint>,
    pub volumes: ThinVec<Volume>,
    /// `spec.resourceClaims`: the DRA claims the pod uses.
    pub resource_claims: ThinVec<PodResourceClaim>,
    /// `status.resourceClaimStatuses`: the names of the claims made from templates.
    pub resource_claim_statuses: ThinVec<PodResourceClaimStatus>,
}

impl Pod {
    /// A pending pod of the default scheduler with no requests and no constraints.
    pub fn new(namespace: impl Into<CompactString>, name: impl Into<CompactString>) -> Pod {
        let namespace = namespace.into();
        let name = name.into();
        Pod {
            uid: format_compact!("uid-{namespace}-{name}"),
            namespace,
            name,
            scheduler_name: CompactString::const_new(DEFAULT_SCHEDULER),
            ..Pod::default()
        }
    }

    /// The owner reference marked `controller: true`, if any.
    pub fn controller(&self) -> Option<&OwnerRef> {
        self.owner_references.iter().find(|o| o.controller)
    }

    /// Owned by a DaemonSet, or annotated as a DaemonSet pod.
    pub fn is_daemonset_pod(&self) -> bool {
        self.controller().is_some_and(|o| o.kind == "DaemonSet")
            || self
                .annotations
                .get(DAEMONSET_POD)
                .is_some_and(|v| v == "true")
    }

    /// A static pod's mirror in the API.
    pub fn is_mirror_pod(&self) -> bool {
        self.annotations.contains_key(MIRROR_POD)
    }

    /// Expendable pods (priority strictly below the cutoff) never trigger scale-up and never block
    /// scale-down. Pods without a priority are never expendable.
    pub fn is_expendable(&self, priority_cutoff: i32) -> bool {
        self.priority.is_some_and(|p| p < priority_cutoff)
    }

    /// `PodScheduled=False` with reason `Unschedulable`: the scheduler tried and found no node.
    pub fn is_marked_unschedulable(&self) -> bool {
        self.scheduled_condition
            .as_ref()
            .is_some_and(|c| c.status == ConditionStatus::False && c.reason == "Unschedulable")
    }

    pub fn is_bound(&self) -> bool {
        self.node_name.is_some()
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self.phase, PodPhase::Succeeded | PodPhase::Failed)
    }

    /// `namespace/name`, for messages.
    pub fn key(&self) -> String {
        // Built by hand: a loop asks for one key per pending pod, and `format!` costs several
        // times the copy.
        let mut key = String::with_capacity(self.namespace.len() + 1 + self.name.len());
        key.push_str(&self.namespace);
        key.push('/');
        key.push_str(&self.name);
        key
    }

    /// The claim a generic ephemeral volume of this pod uses.
    pub fn ephemeral_claim_name(&self, volume_name: &str) -> String {
        format!("{}-{volume_name}", self.name)
    }

    /// Whether any volume refers to a claim (directly or as a generic ephemeral volume), the only
    /// volumes the scheduler's volume filters look at: pods without one skip them entirely.
    /// Inline CSI volumes are not attached through the attach/detach controller, so the scheduler
    /// does not count them against a node's volume limits either.
    pub fn has_checked_volumes(&self) -> bool {
        self.volumes.iter().any(|v| {
            matches!(
                v.source,
                VolumeSource::PersistentVolumeClaim { .. } | VolumeSource::Ephemeral
            )
        })
    }

    /// Whether the pod uses DRA claims: only such pods go through the DynamicResources filter.
    pub fn has_resource_claims(&self) -> bool {
        !self.resource_claims.is_empty()
    }

    /// The name of the ResourceClaim object behind one of the pod's claims: the shared claim's
    /// name, or for a template the generated name recorded in the pod's status (`None` while the
    /// control plane has not made it yet).
    pub fn resource_claim_name<'a>(&'a self, claim: &'a PodResourceClaim) -> Option<&'a str> {
        match &claim.source {
            PodClaimSource::Claim(name) => Some(name),
            PodClaimSource::Template(_) => self
                .resource_claim_statuses
                .iter()
                .find(|s| s.name == claim.name)
                .and_then(|s| s.claim_name.as_deref()),
        }
    }

    pub fn requests_gpu(&self) -> bool {
        self.requests
            .extended()
            .any(|(name, v)| v > 0 && name.ends_with("/gpu"))
    }
}

/// One container's requests and whether it is a sidecar (an init container with
/// `restartPolicy: Always`).
#[derive(Debug, Clone, Default)]
pub struct ContainerRequests {
    pub requests: Resources,
    pub restartable_init: bool,
}

/// The pod's effective requests as the scheduler computes them: the larger of (sum of regular
/// containers + sum of sidecars) and the peak during initialisation (each regular init container
/// plus the sidecars started before it), plus the pod overhead.
pub fn effective_requests(
    containers: &[Resources],
    init_containers: &[ContainerRequests],
    overhead: Option<&Resources>,
) -> Resources {
    let mut running = Resources::default();
    for c in containers {
        running.add(c);
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for init in init_containers {
        if init.restartable_init {
            sidecars.add(&init.requests);
            init_peak.max_with(&sidecars);
        } else {
            init_peak.max_with(&init.requests.plus(&sidecars));
        }
    }
    running.add(&sidecars);
    running.max_with(&init_peak);
    if let Some(o) = overhead {
        running.add(o);
    }
    running
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(m: i64) -> Resources {
        Resources::new(m, 0)
    }

    #[test]
    fn effective_requests_take_init_peak_or_running_sum() {
        // Two containers of 100m + 200m, one init container of 500m: the init peak wins.
        let r = effective_requests(
            &[cpu(100), cpu(200)],
            &[ContainerRequests {
                requests: cpu(500),
                restartable_init: false,
            }],
            None,
        );
        assert_eq!(r.cpu_milli, 500);
        // A smaller init container does not matter.
        let r = effective_requests(
            &[cpu(100), cpu(200)],
            &[ContainerRequests {
                requests: cpu(250),
                restartable_init: false,
            }],
            None,
        );
        assert_eq!(r.cpu_milli, 300);
    }

    #[test]
    fn sidecars_add_to_running_and_to_later_init_containers() {
        let r = effective_requests(
            &[cpu(100)],
            &[
                ContainerRequests {
                    requests: cpu(50),
                    restartable_init: true,
                },
                ContainerRequests {
                    requests: cpu(300),
                    restartable_init: false,
                },
            ],
            Some(&cpu(10)),
        );
        // Init peak: 300 + 50 sidecar = 350; running: 100 + 50 = 150; plus overhead 10.
        assert_eq!(r.cpu_milli, 360);
        // A sidecar after the regular init container does not raise its peak.
        let r = effective_requests(
            &[cpu(100)],
            &[
                ContainerRequests {
                    requests: cpu(300),
                    restartable_init: false,
                },
                ContainerRequests {
                    requests: cpu(50),
                    restartable_init: true,
                },
            ],
            None,
        );
        assert_eq!(r.cpu_milli, 300);
    }

    #[test]
    fn expendable_and_kind_checks() {
        let mut p = Pod::new("default", "p");
        assert!(!p.is_expendable(-10));
        p.priority = Some(-10);
        assert!(!p.is_expendable(-10));
        p.priority = Some(-11);
        assert!(p.is_expendable(-10));
        p.annotations.insert(DAEMONSET_POD.into(), "true".into());
        assert!(p.is_daemonset_pod());
    }

    #[test]
    fn host_port_conflicts() {
        let hp = |port, ip: &str| HostPort {
            port,
            protocol: Protocol::Tcp,
            host_ip: ip.into(),
        };
        assert!(hp(80, "").conflicts_with(&hp(80, "10.0.0.1")));
        assert!(!hp(80, "10.0.0.2").conflicts_with(&hp(80, "10.0.0.1")));
        assert!(!hp(80, "").conflicts_with(&hp(81, "")));
        let udp = HostPort {
            port: 80,
            protocol: Protocol::Udp,
            host_ip: String::new(),
        };
        assert!(!hp(80, "").conflicts_with(&udp));
    }
}
