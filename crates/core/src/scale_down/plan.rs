//! The scale-down decision, stage by stage (see the module documentation of `scale_down`).

use super::{ScaleDownInput, ScaleDownPlan, ScaleDownStatus};

/// Decides this loop's scale-down. Pure: reads the input, leaves the snapshot unchanged, returns
/// the plan and the next state.
pub fn plan_scale_down(input: ScaleDownInput<'_>) -> ScaleDownPlan {
    let mut next_state = input.state.clone();
    next_state.note_loop(input.now);
    ScaleDownPlan::empty(ScaleDownStatus::NoCandidates, next_state)
}
