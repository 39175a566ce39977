//! Requests parked by a `Hold` rule until the test releases them: how a test freezes one write
//! (say, the node update that adds the deletion taint) at the moment it matters, looks at the
//! cluster, and then lets the write through late.

use std::collections::BTreeMap;
use std::time::SystemTime;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::rules::{Matcher, RequestInfo, RuleId};

/// Names a parked request, to release it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HeldId(pub(super) u64);

/// A request parked by a `Hold` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRequest {
    pub id: HeldId,
    /// The `Hold` rule that parked it.
    pub rule: RuleId,
    pub request: RequestInfo,
    pub since: SystemTime,
    /// Its seq in the request log.
    pub log_seq: u64,
}

#[derive(Debug)]
struct Parked {
    held: HeldRequest,
    body: Bytes,
    release: oneshot::Sender<()>,
}

#[derive(Debug, Default)]
pub(super) struct HeldRequests {
    next_id: u64,
    parked: BTreeMap<HeldId, Parked>,
}

impl HeldRequests {
    /// Parks a request; the receiver completes when it is released.
    pub(super) fn park(
        &mut self,
        rule: RuleId,
        request: RequestInfo,
        body: Bytes,
        log_seq: u64,
    ) -> (HeldId, oneshot::Receiver<()>) {
        self.next_id += 1;
        let id = HeldId(self.next_id);
        let (release, released) = oneshot::channel();
        let held = HeldRequest {
            id,
            rule,
            request,
            since: SystemTime::now(),
            log_seq,
        };
        self.parked.insert(
            id,
            Parked {
                held,
                body,
                release,
            },
        );
        (id, released)
    }

    /// Forgets a parked request whose client went away.
    pub(super) fn forget(&mut self, id: HeldId) {
        self.parked.remove(&id);
    }

    pub(super) fn release(&mut self, id: HeldId) -> bool {
        // A send fails only if the client went away in the meantime; it is released either way.
        self.parked
            .remove(&id)
            .is_some_and(|parked| parked.release.send(()).is_ok())
    }

    pub(super) fn release_all(&mut self) -> usize {
        std::mem::take(&mut self.parked)
            .into_values()
            .filter_map(|parked| parked.release.send(()).ok())
            .count()
    }

    pub(super) fn list(&self) -> Vec<HeldRequest> {
        self.parked
            .values()
            .map(|parked| parked.held.clone())
            .collect()
    }

    pub(super) fn find(&self, wanted: &HeldQuery<'_>) -> Option<HeldRequest> {
        self.parked
            .values()
            .find(|parked| match wanted {
                HeldQuery::Rule(rule) => parked.held.rule == *rule,
                HeldQuery::Matching(matcher) => {
                    matcher.matches(&parked.held.request, Some(&parked.body))
                }
            })
            .map(|parked| parked.held.clone())
    }
}

pub(super) enum HeldQuery<'a> {
    Rule(RuleId),
    Matching(&'a Matcher),
}
