//! The retry backoff of requests whose capacity was not found
//! (`--provisioning-request-initial-backoff-time`, `--provisioning-request-max-backoff-time`,
//! `--provisioning-request-max-backoff-cache-size`).

use std::collections::VecDeque;
use std::time::Duration;

use ferroscale_model::capacity::provisioning_conditions::PROVISIONED;
use ferroscale_model::{
    ConditionStatus, ProvisioningRequest, ProvisioningRequestStatus, Timestamp,
};

/// Per request (by uid), how long to wait after its last `Provisioned=False` before it is tried
/// again. The wait starts at the initial time and doubles at every retry up to the maximum; the
/// least recently used entries beyond the cache size are forgotten (they start over).
#[derive(Debug, Clone)]
pub struct RequestBackoff {
    initial: Duration,
    max: Duration,
    capacity: usize,
    /// Least recently used first.
    waits: VecDeque<(String, Duration)>,
}

impl RequestBackoff {
    pub fn new(initial: Duration, max: Duration, capacity: usize) -> RequestBackoff {
        RequestBackoff {
            initial,
            max,
            capacity,
            waits: VecDeque::new(),
        }
    }

    fn take(&mut self, uid: &str) -> Option<Duration> {
        let at = self.waits.iter().position(|(u, _)| u == uid)?;
        self.waits.remove(at).map(|(_, wait)| wait)
    }

    fn put(&mut self, uid: &str, wait: Duration) {
        if self.capacity == 0 {
            return;
        }
        while self.waits.len() >= self.capacity {
            self.waits.pop_front();
        }
        self.waits.push_back((uid.to_string(), wait));
    }

    /// The wait remembered for a request, if any.
    pub fn wait_of(&self, uid: &str) -> Option<Duration> {
        self.waits.iter().find(|(u, _)| u == uid).map(|(_, w)| *w)
    }

    /// Whether [`RequestBackoff::available`] would say yes, without recording a try.
    pub fn due(
        &self,
        request: &ProvisioningRequest,
        status: &ProvisioningRequestStatus,
        now: Timestamp,
    ) -> bool {
        if !super::is_waiting(status) {
            return false;
        }
        match ferroscale_model::find_condition(&status.conditions, PROVISIONED) {
            None => true,
            Some(p) if p.status != ConditionStatus::False => false,
            Some(p) => now > p.last_transition + self.wait_of(&request.uid).unwrap_or(self.initial),
        }
    }

    /// Whether the request may be tried at `now`: never tried (no `Provisioned` condition), or
    /// `Provisioned=False` for longer than its wait, which then doubles. A provisioned or failed
    /// request is not tried, and its backoff is forgotten.
    pub fn available(
        &mut self,
        request: &ProvisioningRequest,
        status: &ProvisioningRequestStatus,
        now: Timestamp,
    ) -> bool {
        if !super::is_waiting(status) {
            self.take(&request.uid);
            return false;
        }
        let Some(provisioned) = ferroscale_model::find_condition(&status.conditions, PROVISIONED)
        else {
            return true;
        };
        if provisioned.status != ConditionStatus::False {
            return false;
        }
        let wait = self.take(&request.uid).unwrap_or(self.initial);
        if now > provisioned.last_transition + wait {
            self.put(&request.uid, (wait * 2).min(self.max));
            true
        } else {
            self.put(&request.uid, wait);
            false
        }
    }
}
