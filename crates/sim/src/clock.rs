//! The simulated clock: one shared, explicitly advanced timestamp.
//!
//! The simulated cloud and the runner read the same handle, so an `IncreaseSize` issued at simulated
//! time t schedules its node for t + provisioning delay no matter how long the call took on the wall
//! clock. Only the runner moves it forward.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use ferroscale_model::Timestamp;

/// A cheaply cloneable handle on the simulated time; all clones see the same value.
#[derive(Debug, Clone, Default)]
pub struct SimClock {
    millis: Arc<AtomicI64>,
}

impl SimClock {
    pub fn new(start: Timestamp) -> SimClock {
        SimClock {
            millis: Arc::new(AtomicI64::new(start.millis())),
        }
    }

    pub fn now(&self) -> Timestamp {
        Timestamp(self.millis.load(Ordering::SeqCst))
    }

    /// Moves the clock to `at`. Time never runs backwards: an earlier `at` is ignored.
    pub fn advance_to(&self, at: Timestamp) {
        self.millis.fetch_max(at.millis(), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_time_and_time_never_goes_back() {
        let clock = SimClock::new(Timestamp::from_secs(10));
        let other = clock.clone();
        clock.advance_to(Timestamp::from_secs(40));
        assert_eq!(other.now(), Timestamp::from_secs(40));
        other.advance_to(Timestamp::from_secs(5));
        assert_eq!(clock.now(), Timestamp::from_secs(40));
    }
}
