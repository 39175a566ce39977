//! The per-pod plan (the scheduler's PreFilter) and the per-node allocator of the
//! DynamicResources filter.
//!
//! The plan resolves the pod's claims once. The allocator then tries, on one node, to pick
//! devices for every claim that is not allocated yet, as the scheduler's structured allocator
//! does: claims and requests in order, `firstAvailable` alternatives in order, devices in the
//! order of the slices, combinations rather than permutations within a request, and
//! backtracking when a later request or a constraint cannot be satisfied. The first solution
//! wins (the scheduler does not score allocations either).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use ferroscale_model::dra::MAX_CLAIM_CONSUMERS;
use ferroscale_model::{
    AllocatedDevice, AllocationMode, ClaimAllocation, CompactString, DeviceAttribute,
    DeviceRequestKind, DeviceScope, ExactDeviceRequest, Labels, NodeOperator, NodeRequirement,
    NodeSelector, NodeSelectorTerm, Pod, PodClaimSource, PodResourceClaim, PodResourceClaimStatus,
    ThinVec,
};

use super::cel::DeviceView;
use super::{AllocationNote, ClaimIdx, DeviceIdx, DraReason, DraState, DraUnfit, Verdict};

/// How many device placements one allocation may try before giving up on the node: a bound on
/// the work of pathological claims (many devices, constraints no combination satisfies).
const SEARCH_BUDGET: u32 = 100_000;

/// One selector of a request: the class's or the request's own.
#[derive(Debug)]
struct SelectorRef {
    id: u32,
    /// The class, for the class's selectors.
    class: Option<String>,
    index: usize,
    source: Arc<str>,
}

/// A request (or one `firstAvailable` alternative) to allocate.
#[derive(Debug)]
struct ExactPlan {
    /// The request's name.
    request: String,
    /// The alternative's name, for a `firstAvailable` alternative.
    sub: Option<String>,
    /// `request` or `request/alternative`, as allocation results and verdicts name it.
    full_name: Arc<str>,
    class: Arc<str>,
    selectors: Vec<SelectorRef>,
    mode: AllocationMode,
    admin: bool,
    /// Per device shape: 0 unknown, 1 selected, 2 not selected.
    verdicts: Vec<Cell<u8>>,
}

impl ExactPlan {
    /// `request` or `request/alternative`, as allocation results name it.
    fn full_name(&self) -> String {
        self.full_name.to_string()
    }
}

#[derive(Debug)]
enum RequestPlan {
    Exact(ExactPlan),
    FirstAvailable(Vec<ExactPlan>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConstraintKind {
    Match,
    Distinct,
}

#[derive(Debug)]
struct ConstraintPlan {
    requests: Vec<String>,
    attribute: String,
    kind: ConstraintKind,
}

impl ConstraintPlan {
    fn applies_to(&self, p: &ExactPlan) -> bool {
        self.requests.is_empty()
            || self.requests.iter().any(|r| {
                *r == p.request
                    || p.sub
                        .as_ref()
                        .is_some_and(|sub| r.split_once('/') == Some((&p.request, sub)))
            })
    }
}

/// What a plan depends on besides the state: the pod's identity and its claim entries.
#[derive(Debug)]
struct PlanKey {
    uid: CompactString,
    namespace: CompactString,
    name: CompactString,
    claims: ThinVec<PodResourceClaim>,
    statuses: ThinVec<PodResourceClaimStatus>,
    epoch: u64,
}

/// A claim of the pod that needs an allocation.
#[derive(Debug)]
struct ClaimPlan {
    claim: ClaimIdx,
    key: Arc<str>,
    requests: Vec<RequestPlan>,
    constraints: Vec<ConstraintPlan>,
}

/// The devices picked on a node for the pod's claims that were not allocated.
#[derive(Debug, Clone)]
pub(crate) struct NodeAllocation {
    /// Per claim: its allocation and the devices it takes (admin access excluded).
    pub(crate) claims: Vec<(ClaimIdx, ClaimAllocation, Vec<DeviceIdx>)>,
}

/// The pod's claims, resolved (the scheduler's PreFilter) once per pod and state of the claims
/// (see `DraState::plan`).
#[derive(Debug)]
pub(crate) struct PodPlan {
    /// What the plan was made from: the pod's identity and claim entries, and the state's epoch.
    made_for: PlanKey,
    /// Allocated claims: their key and the nodes the allocation is usable from.
    allocated: Vec<(String, Option<NodeSelector>)>,
    to_allocate: Vec<ClaimPlan>,
    /// Selector verdicts computed by this plan, for the state's cache.
    computed: RefCell<HashMap<(u32, u32), Verdict>>,
    /// Some claim to allocate needs at least one device that no other claim uses, and no
    /// request asks for `All` devices or admin access (see [`PodPlan::allocate`]).
    needs_free_device: bool,
    /// The devices of the node being checked (a buffer reused from check to check).
    candidates: RefCell<Vec<DeviceIdx>>,
}

impl PodPlan {
    /// Resolves the pod's claims; rejects the pod (on every node) when a claim is missing, not
    /// made yet, being deleted, not the pod's, reserved for too many pods, or asks for a class
    /// that does not exist or a selector that does not compile.
    pub(crate) fn prepare(state: &mut DraState, pod: &Pod) -> Result<PodPlan, DraUnfit> {
        let pod_key = || format!("{}/{}", pod.namespace, pod.name);
        // First every claim must exist and be usable by the pod, as the scheduler checks
        // before anything else.
        let mut claims = Vec::with_capacity(pod.resource_claims.len());
        for entry in &pod.resource_claims {
            let name = match pod.resource_claim_name(entry) {
                Some(name) => name,
                None => {
                    // A status entry without a name: the control plane decided no claim is
                    // needed. No entry at all: the claim is not made yet.
                    let recorded = pod
                        .resource_claim_statuses
                        .iter()
                        .any(|s| s.name == entry.name);
                    if recorded {
                        continue;
                    }
                    return Err(DraUnfit::new(
                        format!("{}/{}", pod.namespace, entry.name),
                        DraReason::ClaimNotCreated { pod: pod_key() },
                    ));
                }
            };
            let key = format!("{}/{name}", pod.namespace);
            let id = state
                .claim_id(&pod.namespace, name)
                .ok_or_else(|| DraUnfit::new(key.clone(), DraReason::ClaimNotFound))?;
            let claim = &state.claims[id as usize].claim;
            if claim.deleting {
                return Err(DraUnfit::new(key, DraReason::ClaimDeleting));
            }
            if matches!(entry.source, PodClaimSource::Template(_))
                && claim.owner_pod_uid.as_deref() != Some(pod.uid.as_str())
            {
                return Err(DraUnfit::new(
                    key,
                    DraReason::ClaimNotOwned { pod: pod_key() },
                ));
            }
            claims.push((id, key));
        }

        let mut plan = PodPlan {
            made_for: PlanKey {
                uid: pod.uid.clone(),
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                claims: pod.resource_claims.clone(),
                statuses: pod.resource_claim_statuses.clone(),
                epoch: state.epoch,
            },
            allocated: Vec::new(),
            to_allocate: Vec::new(),
            computed: RefCell::new(HashMap::new()),
            needs_free_device: false,
            candidates: RefCell::new(Vec::new()),
        };
        let shapes = state.catalogue.shape_count();
        for (id, key) in claims {
            let entry = &state.claims[id as usize];
            if let Some(allocation) = &entry.allocation {
                let reserved_here = entry.reserved_for.iter().any(|c| c.uid == pod.uid);
                if entry.reserved_for.len() >= MAX_CLAIM_CONSUMERS && !reserved_here {
                    return Err(DraUnfit::new(key, DraReason::ClaimInUse));
                }
                plan.allocated.push((key, allocation.node_selector.clone()));
                continue;
            }
            // Two pod entries may name the same claim: it is allocated once.
            if plan.to_allocate.iter().any(|c| c.claim == id) {
                continue;
            }
            let claim = entry.claim.clone();
            let mut requests = Vec::with_capacity(claim.spec.requests.len());
            for request in &claim.spec.requests {
                requests.push(match &request.kind {
                    DeviceRequestKind::Exactly(exact) => RequestPlan::Exact(exact_plan(
                        state,
                        &key,
                        &request.name,
                        None,
                        exact,
                        shapes,
                    )?),
                    DeviceRequestKind::FirstAvailable(alternatives) => {
                        let mut plans = Vec::with_capacity(alternatives.len());
                        for alternative in alternatives {
                            plans.push(exact_plan(
                                state,
                                &key,
                                &request.name,
                                Some(&alternative.name),
                                &alternative.request,
                                shapes,
                            )?);
                        }
                        RequestPlan::FirstAvailable(plans)
                    }
                });
            }
            let constraints = claim
                .spec
                .constraints
                .iter()
                .flat_map(|c| {
                    let matching = c.match_attribute.iter().map(|a| (a, ConstraintKind::Match));
                    let distinct = c
                        .distinct_attribute
                        .iter()
                        .map(|a| (a, ConstraintKind::Distinct));
                    matching
                        .chain(distinct)
                        .map(|(attribute, kind)| ConstraintPlan {
                            requests: c.requests.clone(),
                            attribute: attribute.clone(),
                            kind,
                        })
                })
                .collect();
            plan.to_allocate.push(ClaimPlan {
                claim: id,
                key: Arc::from(key),
                requests,
                constraints,
            });
        }
        plan.needs_free_device = plan.devices_needed() > 0 && plan.only_exact_plain_requests();
        Ok(plan)
    }

    /// The fewest devices any allocation of the plan takes: per request its count, the fewest
    /// of a `firstAvailable` request's alternatives (an `All` request counts none).
    fn devices_needed(&self) -> usize {
        let count = |p: &ExactPlan| match p.mode {
            AllocationMode::ExactCount(n) => n as usize,
            AllocationMode::All => 0,
        };
        self.to_allocate
            .iter()
            .flat_map(|c| &c.requests)
            .map(|r| match r {
                RequestPlan::Exact(p) => count(p),
                RequestPlan::FirstAvailable(alternatives) => {
                    alternatives.iter().map(count).min().unwrap_or(0)
                }
            })
            .sum()
    }

    /// No request (or alternative) of the claims to allocate asks for `All` devices or for
    /// admin access: every device picked must be free.
    fn only_exact_plain_requests(&self) -> bool {
        self.to_allocate
            .iter()
            .flat_map(|c| &c.requests)
            .flat_map(|r| match r {
                RequestPlan::Exact(p) => std::slice::from_ref(p),
                RequestPlan::FirstAvailable(alternatives) => alternatives.as_slice(),
            })
            .all(|p| !p.admin && matches!(p.mode, AllocationMode::ExactCount(_)))
    }

    /// Whether the plan was made for this pod (same identity and claim entries) on the state of
    /// `epoch`: then it is what `prepare` would make now.
    pub(crate) fn is_current(&self, pod: &Pod, epoch: u64) -> bool {
        let key = &self.made_for;
        key.epoch == epoch
            && key.uid == pod.uid
            && key.namespace == pod.namespace
            && key.name == pod.name
            && key.claims == pod.resource_claims
            && key.statuses == pod.resource_claim_statuses
    }

    /// The epoch of the state the plan was made on.
    pub(crate) fn epoch(&self) -> u64 {
        self.made_for.epoch
    }

    /// Whether every claim of the pod is allocated already (nothing to search for).
    pub(crate) fn needs_allocation(&self) -> bool {
        !self.to_allocate.is_empty()
    }

    /// The Filter for one node: devices for the claims to allocate first (the scheduler asks
    /// its allocator before anything else), then the allocated claims' node selectors.
    ///
    /// With `explain` false (a scan that only needs yes or no), a failed allocation is not
    /// diagnosed and its verdict names no request.
    pub(crate) fn check_node(
        &self,
        state: &DraState,
        node_name: &str,
        labels: &Labels,
        explain: bool,
    ) -> Result<Option<NodeAllocation>, DraUnfit> {
        let allocation = if self.needs_allocation() {
            Some(self.allocate(state, node_name, labels, explain)?)
        } else {
            None
        };
        for (key, selector) in &self.allocated {
            if selector
                .as_ref()
                .is_some_and(|s| !s.matches(node_name, labels))
            {
                return Err(DraUnfit::new(key.clone(), DraReason::NotAvailableOnNode));
            }
        }
        Ok(allocation)
    }

    /// Picks devices on the node for every claim to allocate.
    pub(crate) fn allocate(
        &self,
        state: &DraState,
        node_name: &str,
        labels: &Labels,
        explain: bool,
    ) -> Result<NodeAllocation, DraUnfit> {
        // The candidates' buffer is the plan's, reused from node to node.
        let mut candidates = self.candidates.take();
        candidates.clear();
        let incomplete = state
            .catalogue
            .reachable(node_name, labels, &mut candidates);
        let outcome = self.allocate_from(state, node_name, &candidates, incomplete, explain);
        self.candidates.replace(candidates);
        outcome
    }

    /// [`PodPlan::allocate`] among the devices the node reaches.
    fn allocate_from(
        &self,
        state: &DraState,
        node_name: &str,
        candidates: &[DeviceIdx],
        incomplete: Option<(String, &'static str)>,
        explain: bool,
    ) -> Result<NodeAllocation, DraUnfit> {
        // A node none of whose devices is free cannot satisfy a plan that needs a device and
        // has neither `All` nor admin-access requests: the search would try every candidate
        // and stop at each before evaluating any selector (the common case of a full node).
        let hopeless =
            self.needs_free_device && candidates.iter().all(|d| state.in_use[*d as usize] > 0);
        if hopeless {
            return Err(self.failure(state, candidates, explain));
        }
        let mut search = Search {
            plan: self,
            state,
            candidates,
            incomplete,
            taken: Vec::new(),
            picks: vec![Vec::new(); self.to_allocate.len()],
            constraints: self
                .to_allocate
                .iter()
                .map(|c| vec![ConstraintState::default(); c.constraints.len()])
                .collect(),
            budget: SEARCH_BUDGET,
            error: None,
        };
        if search.claim(0) {
            let picks = std::mem::take(&mut search.picks);
            return Ok(NodeAllocation {
                claims: self
                    .to_allocate
                    .iter()
                    .zip(picks)
                    .map(|(claim, picks)| {
                        let taken = picks
                            .iter()
                            .filter(|p| !p.request.admin)
                            .map(|p| p.device)
                            .collect();
                        (claim.claim, allocation_of(state, node_name, &picks), taken)
                    })
                    .collect(),
            });
        }
        if let Some(error) = search.error {
            return Err(error);
        }
        Err(self.failure(state, candidates, explain))
    }

    /// The verdict when no allocation was found: diagnosed when `explain`, a verdict naming
    /// nothing otherwise.
    fn failure(&self, state: &DraState, candidates: &[DeviceIdx], explain: bool) -> DraUnfit {
        if !explain {
            return DraUnfit::new(
                "",
                DraReason::CannotAllocate {
                    request: None,
                    selector: None,
                    note: AllocationNote::NotDiagnosed,
                },
            );
        }
        self.diagnose(state, candidates)
    }

    /// Why no allocation was found: the first request with too few matching devices (and the
    /// selector that rejected the most of them), or with too few free ones.
    fn diagnose(&self, state: &DraState, candidates: &[DeviceIdx]) -> DraUnfit {
        for claim in &self.to_allocate {
            for request in &claim.requests {
                let p = match request {
                    RequestPlan::Exact(p) => p,
                    // The alternatives failed one after the other; the first is the one the
                    // user prefers, so it is the one explained.
                    RequestPlan::FirstAvailable(alternatives) => match alternatives.first() {
                        Some(p) => p,
                        None => continue,
                    },
                };
                let needed = match p.mode {
                    AllocationMode::ExactCount(n) => n as usize,
                    AllocationMode::All => 1,
                };
                // Matching devices, and how many of them the request may take now.
                let (mut matching, mut free) = (0, 0);
                for d in candidates {
                    if self.selectable(state, claim, p, *d).unwrap_or(false) {
                        matching += 1;
                        if p.admin || state.in_use[*d as usize] == 0 {
                            free += 1;
                        }
                    }
                }
                if matching < needed {
                    let selector = self.most_rejecting_selector(state, p, candidates);
                    let note = if candidates.is_empty() {
                        AllocationNote::NoDevices
                    } else {
                        AllocationNote::TooFewMatching {
                            matching,
                            devices: candidates.len(),
                            class: p.class.clone(),
                            needed,
                        }
                    };
                    return DraUnfit::new(
                        claim.key.clone(),
                        DraReason::CannotAllocate {
                            request: Some(p.full_name.clone()),
                            selector: selector
                                .or_else(|| (!candidates.is_empty()).then(|| p.class.clone())),
                            note,
                        },
                    );
                }
                if free < needed {
                    return DraUnfit::new(
                        claim.key.clone(),
                        DraReason::CannotAllocate {
                            request: Some(p.full_name.clone()),
                            selector: None,
                            note: AllocationNote::TooFewFree {
                                free,
                                matching,
                                needed,
                            },
                        },
                    );
                }
            }
        }
        let key = self
            .to_allocate
            .first()
            .map_or_else(|| Arc::from(""), |c| c.key.clone());
        DraUnfit::new(
            key,
            DraReason::CannotAllocate {
                request: None,
                selector: None,
                note: AllocationNote::NoCombination,
            },
        )
    }

    /// The selector of `p` that, alone, rejects the most of the candidates.
    fn most_rejecting_selector(
        &self,
        state: &DraState,
        p: &ExactPlan,
        candidates: &[DeviceIdx],
    ) -> Option<Arc<str>> {
        p.selectors
            .iter()
            .map(|s| {
                let rejected = candidates
                    .iter()
                    .filter(|d| !matches!(self.selector_verdict(state, s.id, **d), Ok(true)))
                    .count();
                (rejected, s)
            })
            .filter(|(rejected, _)| *rejected > 0)
            .max_by_key(|(rejected, s)| (*rejected, std::cmp::Reverse(s.index)))
            .map(|(_, s)| s.source.clone())
    }

    /// Whether the device passes every selector of the request (class first).
    fn selectable(
        &self,
        state: &DraState,
        claim: &ClaimPlan,
        p: &ExactPlan,
        device: DeviceIdx,
    ) -> Result<bool, DraUnfit> {
        let shape = state.catalogue.device(device).shape as usize;
        match p.verdicts.get(shape).map(Cell::get) {
            Some(1) => return Ok(true),
            Some(2) => return Ok(false),
            _ => {}
        }
        for selector in &p.selectors {
            match self.selector_verdict(state, selector.id, device) {
                Ok(true) => {}
                Ok(false) => {
                    if let Some(v) = p.verdicts.get(shape) {
                        v.set(2);
                    }
                    return Ok(false);
                }
                Err(message) => {
                    return Err(DraUnfit::new(
                        claim.key.clone(),
                        DraReason::SelectorError {
                            request: p.full_name(),
                            class: selector.class.clone(),
                            index: selector.index,
                            expression: selector.source.to_string(),
                            message: message.to_string(),
                            compile: false,
                        },
                    ));
                }
            }
        }
        if let Some(v) = p.verdicts.get(shape) {
            v.set(1);
        }
        Ok(true)
    }

    /// One selector's verdict on a device: from the state's cache, this plan's, or evaluated.
    fn selector_verdict(&self, state: &DraState, selector: u32, device: DeviceIdx) -> Verdict {
        let entry = state.catalogue.device(device);
        let key = (selector, entry.shape);
        if let Some(verdict) = state.selectors.verdict(selector, entry.shape) {
            return verdict.clone();
        }
        if let Some(verdict) = self.computed.borrow().get(&key) {
            return verdict.clone();
        }
        let verdict = match state.selectors.get(selector) {
            Ok(compiled) => {
                let d = entry.device();
                compiled
                    .matches(&DeviceView {
                        driver: entry.driver(),
                        attributes: &d.attributes,
                        capacity: &d.capacity,
                    })
                    .map_err(Arc::from)
            }
            Err(e) => Err(Arc::from(e.to_string())),
        };
        self.computed.borrow_mut().insert(key, verdict.clone());
        verdict
    }

    /// The verdicts this plan evaluated, for the state's cache.
    pub(crate) fn new_verdicts(&self) -> Vec<((u32, u32), Verdict)> {
        self.computed.borrow_mut().drain().collect()
    }
}

/// Resolves one request: its class must exist and its selectors compile.
fn exact_plan(
    state: &mut DraState,
    claim_key: &str,
    request: &str,
    sub: Option<&str>,
    exact: &ExactDeviceRequest,
    shapes: usize,
) -> Result<ExactPlan, DraUnfit> {
    let full_name = match sub {
        Some(sub) => format!("{request}/{sub}"),
        None => request.to_string(),
    };
    let Some(class) = state.class(&exact.device_class_name).cloned() else {
        return Err(DraUnfit::new(
            claim_key,
            DraReason::ClassNotFound {
                request: full_name,
                class: exact.device_class_name.clone(),
            },
        ));
    };
    let mut selectors = Vec::new();
    let owned = class
        .selectors
        .iter()
        .enumerate()
        .map(|(i, s)| (Some(class.name.clone()), i, s))
        .chain(
            exact
                .selectors
                .iter()
                .enumerate()
                .map(|(i, s)| (None, i, s)),
        );
    for (owner, index, source) in owned {
        let id = state.selectors.id(source);
        if let Err(e) = state.selectors.get(id) {
            return Err(DraUnfit::new(
                claim_key,
                DraReason::SelectorError {
                    request: full_name,
                    class: owner,
                    index,
                    expression: source.clone(),
                    message: e.to_string(),
                    compile: true,
                },
            ));
        }
        selectors.push(SelectorRef {
            id,
            class: owner,
            index,
            source: Arc::from(source.as_str()),
        });
    }
    Ok(ExactPlan {
        request: request.to_string(),
        sub: sub.map(str::to_string),
        full_name: Arc::from(full_name),
        class: Arc::from(class.name.as_str()),
        selectors,
        mode: exact.allocation_mode,
        admin: exact.admin_access,
        verdicts: (0..shapes).map(|_| Cell::new(0)).collect(),
    })
}

/// A device picked during the search, and the request it is for.
#[derive(Debug, Clone, Copy)]
struct Pick<'a> {
    device: DeviceIdx,
    request: &'a ExactPlan,
}

/// The state of one constraint during the search.
#[derive(Debug, Clone, Default)]
struct ConstraintState {
    /// `matchAttribute`: the value every device must have, and how many devices have it.
    value: Option<DeviceAttribute>,
    count: usize,
    /// `distinctAttribute`: the values taken so far.
    taken: Vec<DeviceAttribute>,
}

/// One allocation attempt on one node.
struct Search<'a> {
    plan: &'a PodPlan,
    state: &'a DraState,
    candidates: &'a [DeviceIdx],
    /// The first pool the node reaches that is incomplete or invalid, and which (`All`
    /// requests cannot be satisfied then).
    incomplete: Option<(String, &'static str)>,
    /// Devices picked so far, with the claim (position in `plan.to_allocate`) they are for.
    taken: Vec<(DeviceIdx, usize)>,
    picks: Vec<Vec<Pick<'a>>>,
    constraints: Vec<Vec<ConstraintState>>,
    budget: u32,
    /// Set when the allocation must stop with this verdict (a selector that fails to
    /// evaluate, an `All` request on a pool being updated).
    error: Option<DraUnfit>,
}

impl<'a> Search<'a> {
    fn claim(&mut self, ci: usize) -> bool {
        if ci == self.plan.to_allocate.len() {
            return true;
        }
        self.request(ci, 0)
    }

    fn request(&mut self, ci: usize, ri: usize) -> bool {
        let plan: &'a PodPlan = self.plan;
        let claim = &plan.to_allocate[ci];
        let Some(request) = claim.requests.get(ri) else {
            return self.claim(ci + 1);
        };
        match request {
            RequestPlan::Exact(p) => self.exact(ci, ri, p),
            RequestPlan::FirstAvailable(alternatives) => {
                for p in alternatives {
                    if self.exact(ci, ri, p) {
                        return true;
                    }
                    if self.error.is_some() {
                        return false;
                    }
                }
                false
            }
        }
    }

    fn exact(&mut self, ci: usize, ri: usize, p: &'a ExactPlan) -> bool {
        match p.mode {
            AllocationMode::ExactCount(n) => self.pick(ci, ri, p, n as usize, 0),
            AllocationMode::All => self.all(ci, ri, p),
        }
    }

    /// Picks `needed` devices for `p`, from `start` on in the candidates, then goes on with
    /// the next request.
    fn pick(
        &mut self,
        ci: usize,
        ri: usize,
        p: &'a ExactPlan,
        needed: usize,
        start: usize,
    ) -> bool {
        if needed == 0 {
            return self.request(ci, ri + 1);
        }
        let claim = &self.plan.to_allocate[ci];
        for pos in start..self.candidates.len() {
            if self.candidates.len() - pos < needed || self.budget == 0 {
                return false;
            }
            self.budget -= 1;
            let d = self.candidates[pos];
            if !self.free_for(ci, p, d) {
                continue;
            }
            match self.plan.selectable(self.state, claim, p, d) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    self.error = Some(e);
                    return false;
                }
            }
            if !self.add_constraints(ci, p, d) {
                continue;
            }
            self.push(ci, p, d);
            if self.pick(ci, ri, p, needed - 1, pos + 1) {
                return true;
            }
            self.pop(ci, p, d);
            if self.error.is_some() {
                return false;
            }
        }
        false
    }

    /// `All`: every matching device the node reaches, at least one, all of them free.
    fn all(&mut self, ci: usize, ri: usize, p: &'a ExactPlan) -> bool {
        let claim = &self.plan.to_allocate[ci];
        if let Some((pool, why)) = &self.incomplete {
            self.error = Some(DraUnfit::new(
                claim.key.clone(),
                DraReason::AllocationError {
                    request: p.full_name(),
                    message: format!(
                        "asks for all devices, but resource pool {pool} is currently {why}"
                    ),
                },
            ));
            return false;
        }
        let mut all = Vec::new();
        for d in self.candidates {
            match self.plan.selectable(self.state, claim, p, *d) {
                Ok(true) => all.push(*d),
                Ok(false) => {}
                Err(e) => {
                    self.error = Some(e);
                    return false;
                }
            }
        }
        if all.is_empty() {
            return false;
        }
        let mut added = 0;
        let mut ok = true;
        for d in &all {
            if !self.free_for(ci, p, *d) {
                ok = false;
                break;
            }
            if !self.add_constraints(ci, p, *d) {
                // A claim whose constraint excludes some of "all" devices cannot be satisfied.
                self.error = Some(DraUnfit::new(
                    claim.key.clone(),
                    DraReason::AllocationError {
                        request: p.full_name(),
                        message: format!(
                            "cannot add device {} because a claim constraint would not be satisfied",
                            self.device_id(*d)
                        ),
                    },
                ));
                ok = false;
                break;
            }
            self.push(ci, p, *d);
            added += 1;
        }
        if ok && self.request(ci, ri + 1) {
            return true;
        }
        for d in all[..added].iter().rev() {
            self.pop(ci, p, *d);
        }
        false
    }

    fn device_id(&self, d: DeviceIdx) -> String {
        let entry = self.state.catalogue.device(d);
        format!(
            "{}/{}/{}",
            entry.driver(),
            entry.pool_name(),
            entry.device().name
        )
    }

    /// Whether `p` may take the device: not in use by any claim and not picked in this search,
    /// or, with admin access, not picked for the same claim.
    fn free_for(&self, ci: usize, p: &ExactPlan, d: DeviceIdx) -> bool {
        if p.admin {
            !self.taken.iter().any(|(t, c)| *t == d && *c == ci)
        } else {
            self.state.in_use[d as usize] == 0 && !self.taken.iter().any(|(t, _)| *t == d)
        }
    }

    fn push(&mut self, ci: usize, p: &'a ExactPlan, d: DeviceIdx) {
        self.taken.push((d, ci));
        self.picks[ci].push(Pick {
            device: d,
            request: p,
        });
    }

    fn pop(&mut self, ci: usize, p: &ExactPlan, d: DeviceIdx) {
        self.taken.pop();
        self.picks[ci].pop();
        self.remove_constraints(ci, p, d);
    }

    /// Checks the claim's constraints with the device added; on success they count it.
    fn add_constraints(&mut self, ci: usize, p: &ExactPlan, d: DeviceIdx) -> bool {
        let claim = &self.plan.to_allocate[ci];
        let attributes = &self.state.catalogue.device(d).device().attributes;
        for (i, constraint) in claim.constraints.iter().enumerate() {
            if !constraint.applies_to(p) {
                continue;
            }
            let state = &mut self.constraints[ci][i];
            let fits = match attributes.get(&constraint.attribute) {
                None => false,
                Some(value) => match constraint.kind {
                    ConstraintKind::Match => {
                        if state.count == 0 {
                            state.value = Some(value.clone());
                        }
                        state.value.as_ref() == Some(value)
                    }
                    ConstraintKind::Distinct => !state.taken.contains(value),
                },
            };
            if !fits {
                for (j, earlier) in claim.constraints[..i].iter().enumerate() {
                    if earlier.applies_to(p) {
                        Self::forget(&mut self.constraints[ci][j], earlier.kind);
                    }
                }
                return false;
            }
            let state = &mut self.constraints[ci][i];
            match constraint.kind {
                ConstraintKind::Match => state.count += 1,
                ConstraintKind::Distinct => {
                    if let Some(value) = attributes.get(&constraint.attribute) {
                        state.taken.push(value.clone());
                    }
                }
            }
        }
        true
    }

    fn remove_constraints(&mut self, ci: usize, p: &ExactPlan, _d: DeviceIdx) {
        let claim = &self.plan.to_allocate[ci];
        for (i, constraint) in claim.constraints.iter().enumerate() {
            if constraint.applies_to(p) {
                Self::forget(&mut self.constraints[ci][i], constraint.kind);
            }
        }
    }

    /// Undoes the last device counted by a constraint (devices leave in reverse order).
    fn forget(state: &mut ConstraintState, kind: ConstraintKind) {
        match kind {
            ConstraintKind::Match => {
                state.count = state.count.saturating_sub(1);
                if state.count == 0 {
                    state.value = None;
                }
            }
            ConstraintKind::Distinct => {
                state.taken.pop();
            }
        }
    }
}

/// The allocation result for one claim: its devices, and the nodes it is usable from (the node
/// itself for node-local devices, the slice's selector for devices reached by one, every node
/// otherwise).
fn allocation_of(state: &DraState, node_name: &str, picks: &[Pick<'_>]) -> ClaimAllocation {
    let mut node_selector = None;
    let mut local = false;
    for pick in picks {
        match state.catalogue.device(pick.device).scope() {
            DeviceScope::Node(_) => local = true,
            DeviceScope::Selector(selector) if node_selector.is_none() => {
                node_selector = Some(selector.clone());
            }
            _ => {}
        }
    }
    if local {
        node_selector = Some(NodeSelector {
            terms: vec![NodeSelectorTerm {
                match_expressions: Vec::new(),
                match_fields: vec![NodeRequirement {
                    key: "metadata.name".to_string(),
                    operator: NodeOperator::In,
                    values: vec![node_name.to_string()],
                }],
            }],
        });
    }
    ClaimAllocation {
        devices: picks
            .iter()
            .map(|pick| {
                let entry = state.catalogue.device(pick.device);
                AllocatedDevice {
                    request: pick.request.full_name(),
                    driver: entry.driver().to_string(),
                    pool: entry.pool_name().to_string(),
                    device: entry.device().name.clone(),
                    admin_access: pick.request.admin,
                }
            })
            .collect(),
        node_selector,
    }
}
