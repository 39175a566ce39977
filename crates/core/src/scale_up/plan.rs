//! The scale-up decision: intake, estimation per node group, expanders, capping and balancing,
//! put together into a [`ScaleUpPlan`].

use super::{ScaleUpInput, ScaleUpPlan, ScaleUpStatus};

/// Decides whether and how to scale up (spec section 2). Pure: no clock, no I/O; randomness only
/// from `input.seed`. See [`ScaleUpInput`] for what stays placed in the snapshot.
pub fn plan_scale_up(input: ScaleUpInput<'_>) -> ScaleUpPlan {
    let _ = input;
    ScaleUpPlan::empty(ScaleUpStatus::NotNeeded)
}
