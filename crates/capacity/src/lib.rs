//! The rules of Ferroscale's capacity APIs, beside each other and outside the engine: the
//! CapacityBuffer controller ([`buffers`], docs/capacity-buffers.md) and the ProvisioningRequest
//! rules ([`provisioning`], docs/provisioning-requests.md). Both are pure: the loop
//! (`ferroscale_core::autoscaler`) hands them the objects it gathered and the scheduling snapshot,
//! and writes what they decide. The wire types and CRD manifests are `ferroscale-capacity-apis`;
//! CapacityQuotas are enforced by scale-up itself (`ferroscale_core::scale_up`).

pub mod buffers;
pub mod provisioning;
