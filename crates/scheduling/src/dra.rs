//! The scheduler's DynamicResources filter: whether the ResourceClaims of a pod can be allocated
//! devices reachable from a node, and the allocation state (which devices are in use, which
//! claims are allocated and reserved for which pods) that the snapshot keeps through what-if
//! branches.

use std::fmt;

use ferroscale_model::{ClaimAllocation, ClaimConsumer, DraObjects, ResourceSlice};

/// Why the DynamicResources filter rejected a pod on a node.
///
/// `Display` is kube-scheduler's wording (what events and `explain` show as the reason);
/// [`DraUnfit::detail`] is the longer explanation naming the claim, the request and the selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraUnfit {
    /// The claim, as `namespace/name` (for a template claim not made yet: `namespace/` followed
    /// by the pod's claim entry name).
    pub claim: String,
    pub reason: DraReason,
}

/// What went wrong with [`DraUnfit::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DraReason {
    /// The pod names a claim that does not exist.
    ClaimNotFound,
    /// The claim of a template entry has not been made by the control plane yet.
    ClaimNotCreated { pod: String },
    /// The claim named in the pod's status is not owned by the pod.
    ClaimNotOwned { pod: String },
    /// The claim is being deleted.
    ClaimDeleting,
    /// The claim is reserved for as many pods as a claim can be.
    ClaimInUse,
    /// The claim is allocated with devices that this node cannot reach.
    NotAvailableOnNode,
    /// A request names a device class that does not exist.
    ClassNotFound { request: String, class: String },
    /// No set of devices reachable from the node satisfies the claim. `request` and `selector`
    /// name the first request that found too few devices and the selector (class name or CEL
    /// expression) that rejected the most candidates, when one did.
    CannotAllocate {
        request: Option<String>,
        selector: Option<String>,
    },
    /// A CEL selector failed to compile or to evaluate.
    SelectorError {
        request: String,
        expression: String,
        message: String,
    },
}

impl DraUnfit {
    /// The longer explanation naming claim, request and selector, for `explain`.
    pub fn detail(&self) -> String {
        format!("claim {}: {self}", self.claim)
    }

    /// Whether the verdict holds for every node (a claim problem found before looking at any
    /// node, like the scheduler's PreFilter).
    pub fn is_per_pod(&self) -> bool {
        !matches!(
            self.reason,
            DraReason::NotAvailableOnNode | DraReason::CannotAllocate { .. }
        )
    }
}

impl fmt::Display for DraUnfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            DraReason::ClaimNotFound => write!(f, "resourceclaim {:?} not found", self.claim),
            DraReason::ClaimNotCreated { .. } => f.write_str("ResourceClaim not created yet"),
            DraReason::ClaimNotOwned { pod } => write!(
                f,
                "ResourceClaim {} was not created for pod {pod} (pod is not owner)",
                self.claim
            ),
            DraReason::ClaimDeleting => {
                write!(f, "resourceclaim {:?} is being deleted", self.claim)
            }
            DraReason::ClaimInUse => f.write_str("resourceclaim in use"),
            DraReason::NotAvailableOnNode => f.write_str("resourceclaim not available on the node"),
            DraReason::ClassNotFound { request, class } => {
                write!(f, "request {request}: device class {class} does not exist")
            }
            DraReason::CannotAllocate { .. } => f.write_str("cannot allocate all claims"),
            DraReason::SelectorError {
                request,
                expression,
                message,
            } => write!(
                f,
                "claim {}, request {request}: selector {expression:?}: {message}",
                self.claim
            ),
        }
    }
}

/// Devices of one pool local to a node: how many there are and how many are allocated now.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolUtilization {
    pub driver: String,
    pub pool: String,
    pub total: usize,
    pub allocated: usize,
}

/// The DRA objects of the cluster and the allocation state, as the snapshot holds them.
#[derive(Debug, Default)]
pub(crate) struct DraState {}

impl DraState {
    pub(crate) fn set_objects(&mut self, _objects: &DraObjects) {}

    pub(crate) fn set_simulated_slices(&mut self, _node_name: &str, _slices: Vec<ResourceSlice>) {}

    pub(crate) fn claim_allocation(
        &self,
        _namespace: &str,
        _name: &str,
    ) -> Option<&ClaimAllocation> {
        None
    }

    pub(crate) fn claim_reserved_for(&self, _namespace: &str, _name: &str) -> &[ClaimConsumer] {
        &[]
    }
}
