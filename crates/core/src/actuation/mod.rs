//! Scale-down actuation (spec 3.8): taking a node the plan chose for removal through taint, drain
//! and cloud deletion, or rolling it back.
//!
//! Each deletion is a small state machine advanced by the loop's `now`; nothing here sleeps. A
//! live binary may advance it between loops; the simulator advances it once per loop.

/// The deletions in progress, remembered across loops.
#[derive(Debug, Clone, Default)]
pub struct DeletionTracker {}

impl DeletionTracker {
    pub fn new() -> DeletionTracker {
        DeletionTracker::default()
    }

    /// Whether no deletion is in progress.
    pub fn is_idle(&self) -> bool {
        true
    }
}
