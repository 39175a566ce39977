//! The kube-scheduler Filter plugins, as the autoscaler simulates them: whether a pod fits a node
//! in a snapshot, and if not, which filter rejected it.
//!
//! Filters run in the order of the scheduler's default profile, and the verdict is the one of the
//! first filter that rejects:
//!
//! 1. **NodeUnschedulable** — a cordoned node is rejected outright. The scheduler would let a pod
//!    that tolerates `node.kubernetes.io/unschedulable` through, but the autoscaler's simulation
//!    never considers cordoned nodes, so neither do we.
//! 2. **NodeName** — a pod whose `node_name` is set may only go to that node. The model has no
//!    separate "requested node" for unbound pods, so for pending pods this filter never rejects;
//!    callers that re-place pods of a node (drain simulation) clear `node_name` first, as
//!    upstream does, or search with [`find_node_for_unbound`], which reads it as cleared.
//! 3. **TaintToleration** — every `NoSchedule`/`NoExecute` taint must be tolerated.
//! 4. **NodeAffinity** — the node selector and required node affinity must match.
//! 5. **NodePorts** — no requested host port may conflict with one in use.
//! 6. **NodeResourcesFit** — pod count first, then cpu, memory, ephemeral storage and extended
//!    resources (only those the pod requests).
//! 7. **VolumeRestrictions**, **NodeVolumeLimits**, **VolumeBinding**, **VolumeZone** — see
//!    [`crate::volumes`]. Their per-pod part runs before everything else, as PreFilter does in the
//!    scheduler: a missing claim or an unbound `Immediate` claim rejects the pod on every node.
//!    As in kube-scheduler v1.36 that part never narrows the nodes: a bound volume's node
//!    affinity is checked per node, in this order. Pods without claims skip all of it.
//! 8. **PodTopologySpread** — hard (`DoNotSchedule`) constraints only.
//! 9. **InterPodAffinity** — required affinity, then required anti-affinity, then the placed
//!    pods' anti-affinity against the incoming pod.
//! 10. **DynamicResources** — see [`crate::dra`]: devices for the pod's ResourceClaims. Its
//!     per-pod part (the claims resolved) runs with the volume filters' before everything else,
//!     its per-node part (the allocator) last, after InterPodAffinity, as in the scheduler's
//!     default profile. Pods without claims skip it.
//!
//! The scheduler splits each plugin into PreFilter (work per pod) and Filter (work per node). Here
//! PreFilter becomes an inter-pod plan: the ids of the snapshot indexes (see `crate::topology`)
//! the pod's constraints read, registered on first use. The per-node part is then a handful of
//! array lookups. Plans hold only ids, so the snapshot keeps the recent ones by pod shape and a
//! repeated `check` of the same kind of pod skips PreFilter; pods without inter-pod constraints
//! never need one unless a placed pod has required anti-affinity.
//!
//! [`find_node`] only needs a yes/no per node, so it first consults the snapshot's dense per-node
//! capacity summary and reads the node itself only when that cannot decide. Runs of nodes whose
//! summary rules the pod out are jumped over with the snapshot's capacity index, so a pod that
//! fits few nodes (or none) does not visit every full node on the way.
//!
//! The snapshot carries the scheduler profile (`--scheduler-config-file`, see
//! [`crate::scheduler_config`]) resolved once into `FilterSwitches`: a disabled filter is
//! skipped, `NodeResourcesFit` skips ignored extended resources, and `PodTopologySpread` applies
//! the profile's default constraints to pods without their own.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use ferroscale_model::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
use ferroscale_model::taints::first_untolerated;
use ferroscale_model::{
    CompactString, Labels, NodeInclusionPolicy, NodeSelector, OwnerRef, Pod, PodAffinityTerm,
    Taint, ThinVec, Toleration, TopologySpreadConstraint, UnsatisfiableAction,
};

use crate::dra::{DraUnfit, NodeAllocation, PodPlan};
use crate::scheduler_config::{
    FilterPlugin, SchedulerProfile, SpreadDefaulting, default_spread_owner,
};
use crate::snapshot::{FitSummary, NodeId, NodeInfo, Snapshot};
use crate::topology::{
    DomainCountsId, ExistingTermId, KeyId, NamespaceLabels, NodeEligibility, PodClause, PodMatcher,
    SpreadViewId, TopologyIndex, TopologyView,
};
use crate::volumes::{VolumePlan, VolumePlugin, VolumeSwitches, VolumeUnfit};

/// Which filter rejected a pod; stable, for aggregation and counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnfitKind {
    NodeUnschedulable,
    NodeName,
    NodeAffinity,
    TaintToleration,
    NodePorts,
    InsufficientResource,
    PodAffinity,
    PodAntiAffinity,
    ExistingPodAntiAffinity,
    TopologySpread,
    VolumeRestrictions,
    NodeVolumeLimits,
    VolumeBinding,
    VolumeZone,
    DynamicResources,
    NodeMissing,
}

/// Why a pod does not fit a node. `Display` gives the scheduler's wording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    NodeUnschedulable,
    NodeName,
    NodeAffinity,
    UntoleratedTaint {
        key: String,
        value: String,
        effect: &'static str,
    },
    NodePorts,
    InsufficientResource(String),
    PodAffinity,
    PodAntiAffinity,
    ExistingPodAntiAffinity,
    TopologySpread {
        topology_key: String,
    },
    /// The spread constraint's topology key is missing from the node's labels.
    TopologySpreadMissingLabel {
        topology_key: String,
    },
    /// One of the volume filters rejected the pod (see [`crate::volumes`]).
    Volume {
        reason: VolumeUnfit,
        plugin: VolumePlugin,
    },
    /// The DynamicResources filter rejected the pod (see [`crate::dra`]).
    Dra(DraUnfit),
    NodeMissing,
}

impl Unfit {
    pub fn kind(&self) -> UnfitKind {
        match self {
            Unfit::NodeUnschedulable => UnfitKind::NodeUnschedulable,
            Unfit::NodeName => UnfitKind::NodeName,
            Unfit::NodeAffinity => UnfitKind::NodeAffinity,
            Unfit::UntoleratedTaint { .. } => UnfitKind::TaintToleration,
            Unfit::NodePorts => UnfitKind::NodePorts,
            Unfit::InsufficientResource(_) => UnfitKind::InsufficientResource,
            Unfit::PodAffinity => UnfitKind::PodAffinity,
            Unfit::PodAntiAffinity => UnfitKind::PodAntiAffinity,
            Unfit::ExistingPodAntiAffinity => UnfitKind::ExistingPodAntiAffinity,
            Unfit::TopologySpread { .. } | Unfit::TopologySpreadMissingLabel { .. } => {
                UnfitKind::TopologySpread
            }
            Unfit::Volume { plugin, .. } => match plugin {
                VolumePlugin::VolumeRestrictions => UnfitKind::VolumeRestrictions,
                VolumePlugin::NodeVolumeLimits => UnfitKind::NodeVolumeLimits,
                VolumePlugin::VolumeBinding => UnfitKind::VolumeBinding,
                VolumePlugin::VolumeZone => UnfitKind::VolumeZone,
            },
            Unfit::Dra(_) => UnfitKind::DynamicResources,
            Unfit::NodeMissing => UnfitKind::NodeMissing,
        }
    }

    fn volume((reason, plugin): (VolumeUnfit, VolumePlugin)) -> Unfit {
        Unfit::Volume { reason, plugin }
    }

    /// Filters whose verdict cannot change by placing more pods on other nodes: resources, ports,
    /// volume limits and every node-only check. Affinity and spread verdicts depend on the rest
    /// of the cluster, and so does a `ReadWriteOncePod` claim already used by a pod elsewhere, and
    /// a device claim (devices reachable from several nodes, shared claims allocated by pods
    /// placed elsewhere).
    pub fn is_local_to_node(&self) -> bool {
        !matches!(
            self.kind(),
            UnfitKind::PodAffinity
                | UnfitKind::PodAntiAffinity
                | UnfitKind::ExistingPodAntiAffinity
                | UnfitKind::TopologySpread
                | UnfitKind::VolumeRestrictions
                | UnfitKind::DynamicResources
        )
    }
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfit::NodeUnschedulable => f.write_str("node(s) were unschedulable"),
            Unfit::NodeName => f.write_str("node(s) didn't match the requested node name"),
            Unfit::NodeAffinity => f.write_str("node(s) didn't match Pod's node affinity/selector"),
            // kube-scheduler v1.36 no longer names the taint; the variant keeps it for logs.
            Unfit::UntoleratedTaint { .. } => f.write_str("node(s) had untolerated taint(s)"),
            Unfit::NodePorts => {
                f.write_str("node(s) didn't have free ports for the requested pod ports")
            }
            Unfit::InsufficientResource(name) if name == "pods" => f.write_str("Too many pods"),
            Unfit::InsufficientResource(name) => write!(f, "Insufficient {name}"),
            Unfit::PodAffinity => f.write_str("node(s) didn't match pod affinity rules"),
            Unfit::PodAntiAffinity => f.write_str("node(s) didn't match pod anti-affinity rules"),
            Unfit::ExistingPodAntiAffinity => {
                f.write_str("node(s) didn't satisfy existing pods anti-affinity rules")
            }
            Unfit::TopologySpread { .. } => {
                f.write_str("node(s) didn't match pod topology spread constraints")
            }
            Unfit::TopologySpreadMissingLabel { .. } => f.write_str(
                "node(s) didn't match pod topology spread constraints (missing required label)",
            ),
            Unfit::Volume { reason, .. } => reason.fmt(f),
            Unfit::Dra(reason) => reason.fmt(f),
            Unfit::NodeMissing => f.write_str("node not found in the snapshot"),
        }
    }
}

/// The scheduler profile as the filters read it on every check: which filters run, resolved once
/// when the profile is set on the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FilterSwitches {
    unschedulable: bool,
    node_name: bool,
    taints: bool,
    node_affinity: bool,
    ports: bool,
    resources: bool,
    spread: bool,
    inter_pod_affinity: bool,
    /// `NodeResourcesFit` has ignored resources or resource groups.
    ignores_resources: bool,
    /// `PodTopologySpread` has `DoNotSchedule` default constraints (`defaultingType: List`).
    default_spread: bool,
    pub(crate) volumes: VolumeSwitches,
}

impl FilterSwitches {
    /// Whether a node whose capacity summary does not `may_fit` a pod is certainly rejected: the
    /// summary stands for NodeUnschedulable and NodeResourcesFit, and with either disabled the
    /// node itself decides.
    pub(crate) fn capacity_rules_out(self) -> bool {
        self.unschedulable && self.resources
    }

    pub(crate) fn of(profile: &SchedulerProfile) -> FilterSwitches {
        let on = |p| profile.is_enabled(p);
        FilterSwitches {
            unschedulable: on(FilterPlugin::NodeUnschedulable),
            node_name: on(FilterPlugin::NodeName),
            taints: on(FilterPlugin::TaintToleration),
            node_affinity: on(FilterPlugin::NodeAffinity),
            ports: on(FilterPlugin::NodePorts),
            resources: on(FilterPlugin::NodeResourcesFit),
            spread: on(FilterPlugin::PodTopologySpread),
            inter_pod_affinity: on(FilterPlugin::InterPodAffinity),
            ignores_resources: !profile.ignored_resources.is_empty()
                || !profile.ignored_resource_groups.is_empty(),
            default_spread: profile.spread_defaulting == SpreadDefaulting::List
                && profile.hard_default_constraints().next().is_some(),
            volumes: VolumeSwitches {
                restrictions: on(FilterPlugin::VolumeRestrictions),
                limits: on(FilterPlugin::NodeVolumeLimits),
                binding: on(FilterPlugin::VolumeBinding),
                zone: on(FilterPlugin::VolumeZone),
            },
        }
    }

    /// The controller whose pods the profile's default spread constraints count for `pod`, when
    /// they apply to it.
    fn default_spread_owner(self, pod: &Pod) -> Option<&OwnerRef> {
        if self.spread && self.default_spread {
            default_spread_owner(pod)
        } else {
            None
        }
    }
}

impl Default for FilterSwitches {
    fn default() -> Self {
        FilterSwitches::of(&SchedulerProfile::default())
    }
}

/// Runs the filters, in the scheduler's order, for `pod` on `node`. The pod must not already be
/// placed in the snapshot.
///
/// The snapshot is borrowed mutably only to register the indexes a pod's inter-pod constraints
/// read the first time such a pod is checked; what it holds does not change.
pub fn check(snapshot: &mut Snapshot, pod: &Pod, node: NodeId) -> Result<(), Unfit> {
    let switches = snapshot.filter_switches();
    // Pods with volume or device claims take a separate path, so every other pod pays one
    // test of its volume list and one of its claim list.
    if uses_volume_filters(switches, pod) || pod.has_resource_claims() {
        return check_with_volumes(snapshot, pod, node, switches);
    }
    node_local_fit(snapshot, pod, node, switches)?;
    check_inter_pod(snapshot, pod, node)
}

/// Looks `node` up and runs the node-local filters on it, the first step of [`check`] and of
/// [`check_planned`]; returns the node for the filters that follow.
fn node_local_fit<'s>(
    snapshot: &'s Snapshot,
    pod: &Pod,
    node: NodeId,
    switches: FilterSwitches,
) -> Result<&'s NodeInfo, Unfit> {
    let info = snapshot.node(node).ok_or(Unfit::NodeMissing)?;
    check_node_local(
        pod,
        pod.node_name.as_deref(),
        info,
        switches,
        snapshot.scheduler_profile(),
    )
    .map_err(Rejected::into_unfit)?;
    Ok(info)
}

/// [`check`] for a pod the volume filters or the DynamicResources filter look at. Their
/// per-pod parts come first (they can reject the pod everywhere, like the scheduler's PreFilter;
/// as in kube-scheduler v1.36 they never narrow the nodes); the volumes' per-node part runs after
/// NodeResourcesFit, the devices' after InterPodAffinity, as in the scheduler's order.
#[inline(never)]
fn check_with_volumes(
    snapshot: &mut Snapshot,
    pod: &Pod,
    node: NodeId,
    switches: FilterSwitches,
) -> Result<(), Unfit> {
    let volumes = if uses_volume_filters(switches, pod) {
        Some(VolumePlan::for_pod(snapshot, switches.volumes, pod).map_err(Unfit::volume)?)
    } else {
        None
    };
    let devices = if pod.has_resource_claims() {
        Some(snapshot.dra_plan(pod).map_err(Unfit::Dra)?)
    } else {
        None
    };
    let verdict = check_planned(
        snapshot,
        pod,
        node,
        switches,
        volumes.as_ref(),
        devices.as_ref(),
    );
    let Some(plan) = devices else {
        return verdict.map(|_| ());
    };
    // The plan goes back to the snapshot on every path, for the pod's next check.
    match verdict {
        Ok(Some((node_name, allocation))) => {
            snapshot.dra_learn(plan, Some((pod, &node_name, allocation)));
            Ok(())
        }
        Ok(None) => {
            snapshot.dra_learn(plan, None);
            Ok(())
        }
        Err(unfit) => {
            snapshot.dra_learn(plan, None);
            Err(unfit)
        }
    }
}

/// The filters of [`check_with_volumes`] once the per-pod parts are resolved; on success, the
/// node's name and the devices found there when the pod's claims need an allocation.
fn check_planned(
    snapshot: &mut Snapshot,
    pod: &Pod,
    node: NodeId,
    switches: FilterSwitches,
    volumes: Option<&VolumePlan>,
    devices: Option<&PodPlan>,
) -> Result<Option<(String, NodeAllocation)>, Unfit> {
    let info = node_local_fit(snapshot, pod, node, switches)?;
    if let Some(volumes) = volumes {
        volumes.check_node(snapshot, info).map_err(Unfit::volume)?;
    }
    // DynamicResources comes last in the scheduler's default order, after InterPodAffinity: a
    // node both reject is reported with the inter-pod reason.
    check_inter_pod(snapshot, pod, node)?;
    let Some(plan) = devices else {
        return Ok(None);
    };
    let info = snapshot.node(node).ok_or(Unfit::NodeMissing)?;
    let allocation = plan
        .check_node(snapshot.dra(), &info.node.name, &info.node.labels, true)
        .map_err(Unfit::Dra)?;
    Ok(allocation.map(|a| (info.node.name.clone(), a)))
}

/// Filters 8 and 9 (PodTopologySpread, InterPodAffinity) for one node.
fn check_inter_pod(snapshot: &mut Snapshot, pod: &Pod, node: NodeId) -> Result<(), Unfit> {
    if !needs_inter_pod_filters(snapshot, pod) {
        return Ok(());
    }
    let plan = snapshot.inter_pod_plan(pod);
    plan.check(snapshot.topology(), node)
        .map_err(Rejected::into_unfit)
}

/// Whether the volume filters have anything to check for this pod.
#[inline]
fn uses_volume_filters(switches: FilterSwitches, pod: &Pod) -> bool {
    !pod.volumes.is_empty() && switches.volumes.any() && pod.has_checked_volumes()
}

/// The first node, in handle order starting at `start` and wrapping around, on which `pod` fits.
/// Starting one past the previous match spreads consecutive pods the way upstream's round-robin
/// placement does. Cordoned nodes are skipped, as in the autoscaler.
///
/// Only the yes/no answer matters here, so the cheapest test runs first: the snapshot's compact
/// per-node capacity summary rejects most full nodes without touching the node itself, and the
/// capacity index ([`Snapshot::next_slot_with_room`]) skips whole runs of them. The snapshot is
/// borrowed mutably for the same reason as in [`check`].
pub fn find_node(snapshot: &mut Snapshot, pod: &Pod, start: usize) -> Option<NodeId> {
    find_node_as(snapshot, pod, pod.node_name.as_deref(), start)
}

/// [`find_node`] for `pod` as if its `node_name` were cleared: the node a pod that is placed in
/// the snapshot (or bound elsewhere) would be moved to, as the drain simulation asks. Nothing is
/// copied: the NodeName filter reads the cleared name instead of the pod's.
pub fn find_node_for_unbound(snapshot: &mut Snapshot, pod: &Pod, start: usize) -> Option<NodeId> {
    find_node_as(snapshot, pod, None, start)
}

/// [`find_node`] with `node_name` standing for the pod's own.
#[inline(always)]
fn find_node_as(
    snapshot: &mut Snapshot,
    pod: &Pod,
    node_name: Option<&str>,
    start: usize,
) -> Option<NodeId> {
    if uses_volume_filters(snapshot.filter_switches(), pod) || pod.has_resource_claims() {
        return find_node_with_volumes(snapshot, pod, node_name, start);
    }
    find_node_where(snapshot, pod, node_name, start, |_, _| true)
}

/// [`find_node`] for a pod the volume filters or the DynamicResources filter look at.
#[inline(never)]
fn find_node_with_volumes(
    snapshot: &mut Snapshot,
    pod: &Pod,
    node_name: Option<&str>,
    start: usize,
) -> Option<NodeId> {
    let switches = snapshot.filter_switches();
    // A pod a per-pod part rejects fits nowhere.
    let volumes = if uses_volume_filters(switches, pod) {
        Some(VolumePlan::for_pod(snapshot, switches.volumes, pod).ok()?)
    } else {
        None
    };
    let devices = if pod.has_resource_claims() {
        Some(snapshot.dra_plan(pod).ok()?)
    } else {
        None
    };
    // The allocation found on the last node the DynamicResources filter accepted.
    let last_fit = RefCell::new(None);
    let found = find_node_where(snapshot, pod, node_name, start, |snapshot, i| {
        let Some(info) = snapshot.node(NodeId(i as u32)) else {
            return false;
        };
        if let Some(volumes) = &volumes
            && volumes.check_node(snapshot, info).is_err()
        {
            return false;
        }
        if let Some(plan) = &devices {
            match plan.check_node(snapshot.dra(), &info.node.name, &info.node.labels, false) {
                Ok(allocation) => *last_fit.borrow_mut() = Some((i, allocation)),
                Err(_) => return false,
            }
        }
        true
    });
    if let Some(plan) = devices {
        let fit = match (found, last_fit.into_inner()) {
            (Some(node), Some((i, Some(allocation)))) if node.index() == i => snapshot
                .node(node)
                .map(|info| (info.node.name.clone(), allocation)),
            _ => None,
        };
        match fit {
            Some((node_name, allocation)) => {
                snapshot.dra_learn(plan, Some((pod, &node_name, allocation)));
            }
            None => snapshot.dra_learn(plan, None),
        }
    }
    found
}

/// The scan of [`find_node`], with `volumes_ok` as the per-node part of the volume filters and
/// `node_name` as the pod's for the NodeName filter.
#[inline(always)]
fn find_node_where(
    snapshot: &mut Snapshot,
    pod: &Pod,
    node_name: Option<&str>,
    start: usize,
    volumes_ok: impl Fn(&Snapshot, usize) -> bool,
) -> Option<NodeId> {
    let slots = snapshot.slot_count();
    if slots == 0 {
        return None;
    }
    let plan = needs_inter_pod_filters(snapshot, pod).then(|| snapshot.inter_pod_plan(pod));
    let snapshot = &*snapshot;
    let switches = snapshot.filter_switches();
    let profile = snapshot.scheduler_profile();
    let start = start % slots;
    let wants = FitSummary::wanted_by(pod);
    let summaries = snapshot.fit_summaries();
    // The summary's "certainly not" stands for NodeUnschedulable and NodeResourcesFit: with either
    // disabled, it cannot reject, and the node itself decides.
    let summary_rejects = snapshot.capacity_rules_out();
    // A pod without node-level constraints passes the node-local filters wherever the summary
    // says so, and the node itself need not be read at all.
    let unconstrained = node_name.is_none()
        && pod.node_selector.is_empty()
        && pod.required_node_affinity.is_none()
        && pod.requests.extended().next().is_none();
    let local_ok = |i: usize| {
        let Some(summary) = summaries.get(i) else {
            return false;
        };
        if summary_rejects && !summary.may_fit(&wants) {
            return false;
        }
        // A "certainly yes" holds with any filter disabled: disabling only lets more nodes pass.
        ((unconstrained && summary.admits_unconstrained(&wants))
            || snapshot.node(NodeId(i as u32)).is_some_and(|info| {
                check_node_local(pod, node_name, info, switches, profile).is_ok()
            }))
            && volumes_ok(snapshot, i)
    };
    let Some(plan) = plan else {
        return scan_from(snapshot, &wants, summary_rejects, start, local_ok);
    };
    let topology = snapshot.topology();
    scan_from(snapshot, &wants, summary_rejects, start, |i| {
        local_ok(i) && plan.check(topology, NodeId(i as u32)).is_ok()
    })
}

/// The first slot from `start` to the end, then from the beginning to `start`, that `accepts`.
/// When the summary's "certainly not" holds, the snapshot's capacity index jumps over the slots
/// whose summary rules the pod out, which `accepts` would reject anyway: the slot found is the
/// one a plain scan finds, and impossible nodes are never visited.
#[inline(always)]
fn scan_from(
    snapshot: &Snapshot,
    wants: &FitSummary,
    summary_rejects: bool,
    start: usize,
    accepts: impl Fn(usize) -> bool,
) -> Option<NodeId> {
    let slots = snapshot.slot_count();
    if !summary_rejects {
        return (start..slots)
            .chain(0..start)
            .find(|i| accepts(*i))
            .map(|i| NodeId(i as u32));
    }
    [(start, slots), (0, start)]
        .into_iter()
        .find_map(|(from, to)| snapshot.first_slot_that_may_fit_where(wants, from, to, &accepts))
        .map(|i| NodeId(i as u32))
}

/// A rejection as the filters produce it: borrowed, so that scanning thousands of nodes allocates
/// nothing. Turned into an [`Unfit`] only when a caller asks why.
#[derive(Debug)]
enum Rejected<'a> {
    NodeUnschedulable,
    NodeName,
    Taint(&'a Taint),
    NodeAffinity,
    NodePorts,
    Resource(&'a str),
    Spread(&'a TopologySpreadConstraint),
    SpreadMissingLabel(&'a TopologySpreadConstraint),
    PodAffinity,
    PodAntiAffinity,
    ExistingPodAntiAffinity,
}

impl Rejected<'_> {
    fn into_unfit(self) -> Unfit {
        match self {
            Rejected::NodeUnschedulable => Unfit::NodeUnschedulable,
            Rejected::NodeName => Unfit::NodeName,
            Rejected::Taint(t) => Unfit::UntoleratedTaint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.as_str(),
            },
            Rejected::NodeAffinity => Unfit::NodeAffinity,
            Rejected::NodePorts => Unfit::NodePorts,
            Rejected::Resource(name) => Unfit::InsufficientResource(name.to_string()),
            Rejected::Spread(c) => Unfit::TopologySpread {
                topology_key: c.topology_key.clone(),
            },
            Rejected::SpreadMissingLabel(c) => Unfit::TopologySpreadMissingLabel {
                topology_key: c.topology_key.clone(),
            },
            Rejected::PodAffinity => Unfit::PodAffinity,
            Rejected::PodAntiAffinity => Unfit::PodAntiAffinity,
            Rejected::ExistingPodAntiAffinity => Unfit::ExistingPodAntiAffinity,
        }
    }
}

/// Whether the nodes `pod` fits on are decided by each node and what is placed on it alone, never
/// by pods elsewhere: in this snapshot no inter-pod filter (the pod's affinity or anti-affinity,
/// a placed pod's anti-affinity, topology spread), volume filter or device claim applies to it.
/// Then taking pods off one node changes for no other node whether the pod fits there.
pub fn fits_by_node_alone(snapshot: &Snapshot, pod: &Pod) -> bool {
    !needs_inter_pod_filters(snapshot, pod)
        && !uses_volume_filters(snapshot.filter_switches(), pod)
        && !pod.has_resource_claims()
}

fn needs_inter_pod_filters(snapshot: &Snapshot, pod: &Pod) -> bool {
    let switches = snapshot.filter_switches();
    (switches.inter_pod_affinity
        && (!pod.pod_affinity.is_empty()
            || !pod.pod_anti_affinity.is_empty()
            || snapshot.has_pods_with_anti_affinity()))
        || (switches.spread && pod.topology_spread.iter().any(is_hard))
        || switches.default_spread_owner(pod).is_some()
}

fn is_hard(constraint: &TopologySpreadConstraint) -> bool {
    constraint.when_unsatisfiable == UnsatisfiableAction::DoNotSchedule
}

/// Filters 1 to 6: everything that only looks at the node and what is on it, minus the filters
/// the scheduler profile disables.
fn check_node_local<'a>(
    pod: &'a Pod,
    node_name: Option<&str>,
    info: &'a NodeInfo,
    switches: FilterSwitches,
    profile: &SchedulerProfile,
) -> Result<(), Rejected<'a>> {
    let node = &info.node;
    if switches.unschedulable && node.unschedulable {
        return Err(Rejected::NodeUnschedulable);
    }
    if switches.node_name && node_name.is_some_and(|name| name != node.name) {
        return Err(Rejected::NodeName);
    }
    if switches.taints
        && let Some(t) = first_untolerated(&node.taints, &pod.tolerations)
    {
        return Err(Rejected::Taint(t));
    }
    if switches.node_affinity
        && (!pod
            .node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
            || pod
                .required_node_affinity
                .as_ref()
                .is_some_and(|a| !a.matches(&node.name, &node.labels)))
    {
        return Err(Rejected::NodeAffinity);
    }
    // Port 0 means "no host port" and never conflicts.
    if switches.ports
        && pod
            .host_ports
            .iter()
            .any(|hp| hp.port != 0 && info.host_ports.iter().any(|used| used.conflicts_with(hp)))
    {
        return Err(Rejected::NodePorts);
    }
    if !switches.resources {
        return Ok(());
    }
    check_resources(pod, info, switches.ignores_resources.then_some(profile))
}

/// NodeResourcesFit, without building the node's free-resource vector. `ignoring` is the profile
/// when it ignores some extended resources.
fn check_resources<'a>(
    pod: &'a Pod,
    info: &'a NodeInfo,
    ignoring: Option<&SchedulerProfile>,
) -> Result<(), Rejected<'a>> {
    let allocatable = &info.node.allocatable;
    let used = &info.requested;
    if used.pods.saturating_add(1) > allocatable.pods {
        return Err(Rejected::Resource(PODS));
    }
    let wants = &pod.requests;
    let short =
        |asked: i64, total: i64, taken: i64| asked > 0 && asked > total.saturating_sub(taken);
    if short(wants.cpu_milli, allocatable.cpu_milli, used.cpu_milli) {
        return Err(Rejected::Resource(CPU));
    }
    if short(wants.memory, allocatable.memory, used.memory) {
        return Err(Rejected::Resource(MEMORY));
    }
    if short(
        wants.ephemeral_storage,
        allocatable.ephemeral_storage,
        used.ephemeral_storage,
    ) {
        return Err(Rejected::Resource(EPHEMERAL_STORAGE));
    }
    for (name, asked) in wants.extended() {
        if ignoring.is_some_and(|p| p.ignores_resource(name)) {
            continue;
        }
        if short(asked, allocatable.get(name), used.get(name)) {
            return Err(Rejected::Resource(name));
        }
    }
    Ok(())
}

/// One hard spread constraint (the pod's own or a profile default), resolved against the snapshot
/// indexes.
#[derive(Debug, Clone)]
struct SpreadCheck {
    constraint: TopologySpreadConstraint,
    key: KeyId,
    view: SpreadViewId,
    /// The incoming pod matches the constraint's selector (it would count itself).
    self_match: bool,
}

/// The PreFilter state of the inter-pod filters for one pod shape: which indexes to read per node.
///
/// It holds only index ids, so it stays valid while pods and nodes come and go; the snapshot keeps
/// recent plans (see [`PlanCache`]) so that repeated checks of the same kind of pod skip
/// PreFilter. Only two things can make a plan stale: namespace labels changing (all plans are
/// dropped) and a placed pod bringing a new anti-affinity term (the plan picks it up on reuse).
#[derive(Debug, Clone)]
pub(crate) struct InterPodPlan {
    spread: Vec<SpreadCheck>,
    /// Per required affinity term: its key and the counts of pods matching *all* terms.
    affinity: Vec<(KeyId, DomainCountsId)>,
    /// The pod matches all its own affinity terms (it may be the first of its group).
    affinity_self_match: bool,
    /// Per required anti-affinity term: its key and the counts of pods matching it.
    anti_affinity: Vec<(KeyId, DomainCountsId)>,
    /// Placed pods' anti-affinity terms that match the incoming pod.
    existing_anti_affinity: Vec<(KeyId, ExistingTermId)>,
    /// How many existing anti-affinity terms the snapshot knew when this plan looked at them.
    existing_terms_seen: usize,
}

/// What a plan depends on: the fields of a pod that the inter-pod filters read.
#[derive(Debug, Clone)]
struct PodShape {
    namespace: CompactString,
    labels: Labels,
    pod_affinity: ThinVec<PodAffinityTerm>,
    pod_anti_affinity: ThinVec<PodAffinityTerm>,
    topology_spread: ThinVec<TopologySpreadConstraint>,
    node_selector: Labels,
    required_node_affinity: Option<Box<NodeSelector>>,
    tolerations: ThinVec<Toleration>,
    /// The controller whose pods the profile's default spread constraints count, when they apply.
    default_spread_owner: Option<OwnerRef>,
}

impl PodShape {
    fn of(pod: &Pod, default_spread_owner: Option<&OwnerRef>) -> PodShape {
        PodShape {
            default_spread_owner: default_spread_owner.cloned(),
            namespace: pod.namespace.clone(),
            labels: pod.labels.clone(),
            pod_affinity: pod.pod_affinity.clone(),
            pod_anti_affinity: pod.pod_anti_affinity.clone(),
            topology_spread: pod.topology_spread.clone(),
            node_selector: pod.node_selector.clone(),
            required_node_affinity: pod.required_node_affinity.clone(),
            tolerations: pod.tolerations.clone(),
        }
    }

    fn describes(&self, pod: &Pod, default_spread_owner: Option<&OwnerRef>) -> bool {
        self.default_spread_owner.as_ref() == default_spread_owner
            && self.namespace == pod.namespace
            && self.labels == pod.labels
            && self.topology_spread == pod.topology_spread
            && self.pod_anti_affinity == pod.pod_anti_affinity
            && self.pod_affinity == pod.pod_affinity
            && self.node_selector == pod.node_selector
            && self.required_node_affinity == pod.required_node_affinity
            && self.tolerations == pod.tolerations
    }
}

/// The most recently used plans, by pod shape. Small: the autoscaler simulates a handful of pod
/// shapes at a time (one per equivalence group).
#[derive(Debug, Default, Clone)]
pub(crate) struct PlanCache {
    entries: Vec<(PodShape, Arc<InterPodPlan>)>,
    next_victim: usize,
}

const PLAN_CACHE_SIZE: usize = 16;

impl PlanCache {
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}

impl InterPodPlan {
    /// The plan for `pod`, from the cache when a pod of the same shape was planned before.
    pub(crate) fn for_pod(
        topology: &mut TopologyIndex,
        slots: &[Option<NodeInfo>],
        namespaces: &NamespaceLabels,
        filters: (FilterSwitches, &SchedulerProfile),
        pod: &Pod,
    ) -> Arc<InterPodPlan> {
        let (switches, profile) = filters;
        let owner = switches.default_spread_owner(pod);
        let terms_known = topology.existing_term_count_total();
        let cached = topology
            .plans()
            .entries
            .iter()
            .position(|(shape, _)| shape.describes(pod, owner));
        if let Some(i) = cached {
            let plan = topology.plans().entries[i].1.clone();
            if plan.existing_terms_seen == terms_known {
                return plan;
            }
            // Placed pods brought new anti-affinity terms: look at those only.
            let mut refreshed = InterPodPlan::clone(&plan);
            refreshed.existing_terms_seen = terms_known;
            if switches.inter_pod_affinity {
                refreshed
                    .existing_anti_affinity
                    .extend(topology.existing_terms_matching(
                        pod,
                        namespaces,
                        plan.existing_terms_seen,
                    ));
            }
            let refreshed = Arc::new(refreshed);
            topology.plans().entries[i].1 = refreshed.clone();
            return refreshed;
        }
        let plan = Arc::new(InterPodPlan::prepare(
            topology,
            slots,
            namespaces,
            (switches, profile),
            pod,
        ));
        let cache = topology.plans();
        if cache.entries.len() < PLAN_CACHE_SIZE {
            cache.entries.push((PodShape::of(pod, owner), plan.clone()));
        } else {
            let victim = cache.next_victim % PLAN_CACHE_SIZE;
            cache.entries[victim] = (PodShape::of(pod, owner), plan.clone());
            cache.next_victim = victim + 1;
        }
        plan
    }

    fn prepare(
        topology: &mut TopologyIndex,
        slots: &[Option<NodeInfo>],
        namespaces: &NamespaceLabels,
        filters: (FilterSwitches, &SchedulerProfile),
        pod: &Pod,
    ) -> InterPodPlan {
        let (switches, profile) = filters;
        let mut spread = Vec::new();
        // The pod's own hard constraints; for a pod without any constraint of its own, the
        // profile's hard default constraints, counting the pods of its controller.
        let mut hard: Vec<&TopologySpreadConstraint> = Vec::new();
        let mut default_owner = None;
        if switches.spread {
            hard = pod.topology_spread.iter().filter(|c| is_hard(c)).collect();
            if let Some(owner) = switches.default_spread_owner(pod) {
                hard = profile.hard_default_constraints().collect();
                default_owner = Some(owner);
            }
        }
        if !hard.is_empty() {
            let mut required_keys: Vec<String> =
                hard.iter().map(|c| c.topology_key.clone()).collect();
            required_keys.sort();
            required_keys.dedup();
            let has_node_affinity =
                !pod.node_selector.is_empty() || pod.required_node_affinity.is_some();
            for constraint in hard {
                let key = topology.key_id(&constraint.topology_key, slots);
                let clause = match default_owner {
                    Some(owner) => PodClause::same_controller(owner, &pod.namespace),
                    // The scheduler counts nothing for an empty selector (and an absent one
                    // matches nothing); both become the never-matching clause.
                    None => PodClause::for_spread(
                        constraint.label_selector.clone().filter(|s| !s.is_empty()),
                        &pod.namespace,
                    ),
                };
                let matcher = PodMatcher {
                    clauses: vec![clause],
                    skip_terminating: true,
                };
                let eligibility = NodeEligibility {
                    required_keys: required_keys.clone(),
                    node_affinity: (constraint.node_affinity_policy == NodeInclusionPolicy::Honor
                        && has_node_affinity)
                        .then(|| {
                            (
                                pod.node_selector.clone(),
                                pod.required_node_affinity.clone(),
                            )
                        }),
                    tolerations: (constraint.node_taints_policy == NodeInclusionPolicy::Honor)
                        .then(|| pod.tolerations.clone()),
                };
                let view = topology.spread_view(matcher, key, eligibility, slots, namespaces);
                // A pod is always one of its controller's pods.
                let self_match = default_owner.is_some()
                    || constraint
                        .label_selector
                        .as_ref()
                        .is_some_and(|s| s.matches(&pod.labels));
                spread.push(SpreadCheck {
                    constraint: constraint.clone(),
                    key,
                    view,
                    self_match,
                });
            }
        }

        let mut affinity = Vec::new();
        let mut affinity_self_match = false;
        if switches.inter_pod_affinity && !pod.pod_affinity.is_empty() {
            let clauses: Vec<PodClause> = pod
                .pod_affinity
                .iter()
                .map(|t| PodClause::from_term(t, &pod.namespace))
                .collect();
            affinity_self_match = clauses.iter().all(|c| c.matches(pod, namespaces));
            let matcher = PodMatcher {
                clauses,
                skip_terminating: false,
            };
            for term in &pod.pod_affinity {
                let key = topology.key_id(&term.topology_key, slots);
                let counts = topology.domain_counts(matcher.clone(), key, slots, namespaces);
                affinity.push((key, counts));
            }
        }

        let anti_affinity_terms: &[PodAffinityTerm] = if switches.inter_pod_affinity {
            &pod.pod_anti_affinity
        } else {
            &[]
        };
        let anti_affinity = anti_affinity_terms
            .iter()
            .map(|term| {
                let key = topology.key_id(&term.topology_key, slots);
                let matcher = PodMatcher {
                    clauses: vec![PodClause::from_term(term, &pod.namespace)],
                    skip_terminating: false,
                };
                let counts = topology.anti_affinity_counts(matcher, key, slots, namespaces);
                (key, counts)
            })
            .collect();

        InterPodPlan {
            spread,
            affinity,
            affinity_self_match,
            anti_affinity,
            existing_anti_affinity: if switches.inter_pod_affinity {
                topology.existing_terms_matching(pod, namespaces, 0)
            } else {
                Vec::new()
            },
            existing_terms_seen: topology.existing_term_count_total(),
        }
    }

    /// Filters 8 and 9 for one node.
    fn check(&self, topology: TopologyView<'_>, node: NodeId) -> Result<(), Rejected<'_>> {
        let id = node.index();
        for s in &self.spread {
            let constraint = &s.constraint;
            let Some(value) = topology.node_value(s.key, id) else {
                return Err(Rejected::SpreadMissingLabel(constraint));
            };
            let numbers = topology.spread_numbers(s.view, value);
            // Fewer eligible domains than minDomains (default 1) make the global minimum 0.
            let min_domains = constraint.min_domains.unwrap_or(1).max(1) as u32;
            let global_min = if numbers.domains < min_domains {
                0
            } else {
                i64::from(numbers.global_min)
            };
            let skew = i64::from(numbers.matching) + i64::from(s.self_match) - global_min;
            if skew > i64::from(constraint.max_skew) {
                return Err(Rejected::Spread(constraint));
            }
        }

        if !self.affinity.is_empty() {
            let mut matching_pods_everywhere = true;
            for (key, counts) in &self.affinity {
                // Every term's topology key must exist on the node, even for the first pod.
                let value = topology.node_value(*key, id).ok_or(Rejected::PodAffinity)?;
                if topology.domain_count(*counts, id, value) == 0 {
                    matching_pods_everywhere = false;
                }
            }
            // The first pod of a group with affinity to itself: no placed pod matches all the
            // terms (on a node that has the keys), and the pod matches them itself.
            let first_of_group = self.affinity_self_match
                && self
                    .affinity
                    .iter()
                    .all(|(_, c)| topology.domain_total(*c) == 0);
            if !matching_pods_everywhere && !first_of_group {
                return Err(Rejected::PodAffinity);
            }
        }

        for (key, counts) in &self.anti_affinity {
            if let Some(value) = topology.node_value(*key, id)
                && topology.domain_count(*counts, id, value) > 0
            {
                return Err(Rejected::PodAntiAffinity);
            }
        }

        for (key, term) in &self.existing_anti_affinity {
            if let Some(value) = topology.node_value(*key, id)
                && topology.existing_term_count(*term, value) > 0
            {
                return Err(Rejected::ExistingPodAntiAffinity);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
