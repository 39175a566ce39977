//! The request log: every request the proxy received and what became of it, so that a test can
//! ask "did any node PATCH reach the API server during the outage?" or "how many evictions were
//! sent?". An entry is written when the request arrives and updated as it goes on, so a request
//! still held or blackholed is visible too.

use std::collections::VecDeque;
use std::time::SystemTime;

use super::rules::{RequestInfo, RuleId};

/// How many entries are kept; older ones are forgotten first.
pub const LOG_CAPACITY: usize = 50_000;

/// What became of a request (so far).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Still in the proxy: being delayed, waiting out a partition, or waiting for the API
    /// server's answer.
    InProgress,
    /// Parked by a `Hold` rule until the test releases it.
    Held,
    /// Reached the API server, which answered with this status. A watch stays `Forwarded` while
    /// it streams and after it ends normally.
    Forwarded { status: u16 },
    /// Reached the API server, which answered with this status, and the proxy then cut the
    /// response stream (`drop_watches`, `CutWatchAfter`, a refusing partition).
    Cut { status: u16 },
    /// Answered by a `Respond` rule (or refused by the proxy); never reached the API server.
    Responded { status: u16 },
    /// The client's connection was reset with no answer.
    Reset,
    /// Never answered.
    Blackholed,
    /// The client went away before the proxy answered (it gave up on a held, delayed or
    /// partitioned request).
    Abandoned,
    /// The API server could not be reached or broke off its answer; the client's connection was
    /// reset, as it would have been without the proxy.
    UpstreamFailed { error: String },
}

/// One request in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Increases by one per request, across the whole run (also past forgotten entries).
    pub seq: u64,
    pub received_at: SystemTime,
    pub request: RequestInfo,
    /// The rule that applied, if any.
    pub rule: Option<RuleId>,
    /// Whether a `Hold` rule parked it (and, if it was then forwarded, released it).
    pub held: bool,
    /// When it was sent on to the API server; `None` if it never was.
    pub forwarded_at: Option<SystemTime>,
    pub outcome: Outcome,
}

impl LogEntry {
    /// Whether the request was sent on to the API server (which may or may not have applied it).
    pub fn reached_api_server(&self) -> bool {
        self.forwarded_at.is_some()
    }
}

#[derive(Debug)]
pub(super) struct RequestLog {
    entries: VecDeque<LogEntry>,
    /// `seq` of the next request.
    next_seq: u64,
    capacity: usize,
}

impl Default for RequestLog {
    fn default() -> Self {
        RequestLog::with_capacity(LOG_CAPACITY)
    }
}

impl RequestLog {
    fn with_capacity(capacity: usize) -> RequestLog {
        RequestLog {
            entries: VecDeque::new(),
            next_seq: 0,
            capacity,
        }
    }

    /// Logs a request that has just arrived, returning its `seq`.
    pub(super) fn record(&mut self, request: RequestInfo, received_at: SystemTime) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        self.entries.push_back(LogEntry {
            seq,
            received_at,
            request,
            rule: None,
            held: false,
            forwarded_at: None,
            outcome: Outcome::InProgress,
        });
        seq
    }

    /// Changes the entry `seq`, unless it has been forgotten already.
    pub(super) fn update(&mut self, seq: u64, change: impl FnOnce(&mut LogEntry)) {
        // Entries are contiguous in seq, so the position is an offset from the oldest.
        let Some(oldest) = self.entries.front().map(|entry| entry.seq) else {
            return;
        };
        let Some(offset) = seq.checked_sub(oldest) else {
            return;
        };
        let Ok(offset) = usize::try_from(offset) else {
            return;
        };
        if let Some(entry) = self.entries.get_mut(offset) {
            change(entry);
        }
    }

    pub(super) fn entries(&self) -> Vec<LogEntry> {
        self.entries.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::super::classify::RequestClass;
    use super::*;

    fn version_request() -> RequestInfo {
        RequestInfo {
            method: Method::GET,
            uri: "/version".into(),
            class: RequestClass::Other,
            target: None,
            user_agent: None,
        }
    }

    #[test]
    fn entries_are_updated_by_seq_and_the_oldest_are_forgotten_first() {
        let mut log = RequestLog::with_capacity(2);
        let first = log.record(version_request(), SystemTime::now());
        let second = log.record(version_request(), SystemTime::now());
        log.update(first, |entry| entry.outcome = Outcome::Reset);
        assert_eq!(log.entries()[0].outcome, Outcome::Reset);

        let third = log.record(version_request(), SystemTime::now());
        let seqs: Vec<u64> = log.entries().iter().map(|entry| entry.seq).collect();
        assert_eq!(seqs, vec![second, third]);

        // Updating a forgotten entry changes nothing.
        log.update(first, |entry| entry.outcome = Outcome::Blackholed);
        log.update(third, |entry| {
            entry.outcome = Outcome::Responded { status: 503 }
        });
        let outcomes: Vec<Outcome> = log
            .entries()
            .into_iter()
            .map(|entry| entry.outcome)
            .collect();
        assert_eq!(
            outcomes,
            vec![Outcome::InProgress, Outcome::Responded { status: 503 }]
        );
    }
}
