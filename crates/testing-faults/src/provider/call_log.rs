//! The faulty provider's record of every call it received: when it arrived and ended
//! (wall-clock, to line up with the autoscaler's logs and the API server's audit log), which
//! client made it, what it asked, which fault it met and how it ended; and the questions the
//! live tests' invariants ask of it (who changed the cloud, how often each node was deleted).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use ferroscale_core::cloud::CloudError;
use ferroscale_model::Node;
use thiserror::Error;
use tokio::sync::watch;

use super::faults::{Fault, Method};

/// A node as a call named it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeRef {
    pub name: String,
    /// Empty when the caller sent none.
    pub provider_id: String,
}

impl NodeRef {
    pub(crate) fn of(node: &Node) -> NodeRef {
        NodeRef {
            name: node.name.clone(),
            provider_id: node.provider_id.clone(),
        }
    }
}

/// What a call asked, beyond its method and group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallDetails {
    /// The size change of `IncreaseSize` (positive) and `DecreaseTargetSize` (negative).
    pub delta: Option<i64>,
    /// The nodes of `DeleteNodes`, in order, or the node of `NodeGroupForNode`.
    pub nodes: Vec<NodeRef>,
}

/// How a call ended, as far as its caller is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallResult {
    /// Not answered yet.
    InFlight,
    Ok,
    /// The error's text.
    Error(String),
    /// Dropped before it answered: the SDK answered DEADLINE_EXCEEDED in its place, or the
    /// client went away, or the server stopped.
    Abandoned,
}

impl CallResult {
    pub(crate) fn of<T>(result: &Result<T, CloudError>) -> CallResult {
        match result {
            Ok(_) => CallResult::Ok,
            Err(error) => CallResult::Error(error.to_string()),
        }
    }
}

/// One call the faulty provider received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    /// Position in the log, from 0.
    pub sequence: usize,
    pub arrived: SystemTime,
    /// When the call answered or was abandoned; `None` while in flight.
    pub completed: Option<SystemTime>,
    /// The client's identity (`ferroscale_externalgrpc_sdk::caller`): its certificate's common
    /// name; `None` over plaintext or when called directly rather than through the SDK.
    pub caller: Option<String>,
    pub method: Method,
    /// The group of a node-group method.
    pub group: Option<String>,
    pub details: CallDetails,
    /// The fault the call met, if any.
    pub fault: Option<Fault>,
    /// What the caller got.
    pub result: CallResult,
    /// With [`Fault::AnswerLost`], how the call the cloud carried out ended (in flight until it
    /// has); `None` otherwise, when what the caller got is what the cloud did.
    pub carried_out: Option<CallResult>,
}

impl CallRecord {
    pub fn is_mutating(&self) -> bool {
        self.method.is_mutating()
    }
}

impl fmt::Display for CallRecord {
    /// `#12 replica-0 increase_size workers delta=2 [AnswerLost { .. }] -> Error("...")`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {} {}",
            self.sequence,
            self.caller.as_deref().unwrap_or("<no identity>"),
            self.method
        )?;
        if let Some(group) = &self.group {
            write!(f, " {group}")?;
        }
        if let Some(delta) = self.details.delta {
            write!(f, " delta={delta}")?;
        }
        if !self.details.nodes.is_empty() {
            let names: Vec<&str> = self.details.nodes.iter().map(|n| n.name.as_str()).collect();
            write!(f, " nodes={}", names.join(","))?;
        }
        if let Some(fault) = &self.fault {
            write!(f, " [{fault:?}]")?;
        }
        write!(f, " -> {:?}", self.result)?;
        if let Some(carried_out) = &self.carried_out {
            write!(f, " (carried out: {carried_out:?})")?;
        }
        Ok(())
    }
}

/// No call matched in time.
#[derive(Debug, Error)]
#[error(
    "no provider call matched within {timeout:?}; the last {} of {logged} calls:\n{last}",
    LAST_CALLS_SHOWN.min(*logged)
)]
pub struct WaitError {
    pub timeout: Duration,
    pub logged: usize,
    /// The last calls, one per line, to see what happened instead.
    pub last: String,
}

/// How many calls a [`WaitError`] shows.
const LAST_CALLS_SHOWN: usize = 20;

/// The log. Cheap to clone: clones share it.
#[derive(Debug, Clone)]
pub struct CallLog {
    records: Arc<Mutex<Vec<CallRecord>>>,
    /// Bumped at every change, so that waiters look again.
    changed: Arc<watch::Sender<u64>>,
}

impl Default for CallLog {
    fn default() -> CallLog {
        CallLog {
            records: Arc::default(),
            changed: Arc::new(watch::Sender::new(0)),
        }
    }
}

impl CallLog {
    fn lock(&self) -> MutexGuard<'_, Vec<CallRecord>> {
        // A panic elsewhere leaves whole records; keep logging.
        self.records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn update(&self, sequence: usize, change: impl FnOnce(&mut CallRecord)) {
        if let Some(record) = self.lock().get_mut(sequence) {
            change(record);
        }
        self.changed.send_modify(|version| *version += 1);
    }

    /// Every call so far, in order of arrival.
    pub fn records(&self) -> Vec<CallRecord> {
        self.lock().clone()
    }

    /// The first call (in order of arrival) for which `matches` holds, as soon as there is one:
    /// calls that arrive later, and calls whose result comes later, are checked as they change.
    pub async fn wait_for_call(
        &self,
        matches: impl Fn(&CallRecord) -> bool,
        timeout: Duration,
    ) -> Result<CallRecord, WaitError> {
        let mut changes = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            changes.borrow_and_update();
            if let Some(found) = self.lock().iter().find(|record| matches(record)) {
                return Ok(found.clone());
            }
            // The sender lives as long as the log, which `self` holds.
            let changed = tokio::time::timeout_at(deadline, changes.changed()).await;
            if changed.is_err() {
                let records = self.lock();
                let last = records[records.len().saturating_sub(LAST_CALLS_SHOWN)..]
                    .iter()
                    .map(|record| record.to_string())
                    .collect::<Vec<_>>()
                    .join("\n");
                return Err(WaitError {
                    timeout,
                    logged: records.len(),
                    last,
                });
            }
        }
    }

    /// How many calls each caller made (`None`: no identity).
    pub fn calls_by_caller(&self) -> BTreeMap<Option<String>, usize> {
        self.count_by_caller(|_| true)
    }

    /// How many calls that change the cloud ([`Method::is_mutating`]) each caller made, failed
    /// ones included: a replica that is not the leader must have none.
    pub fn mutating_calls_by_caller(&self) -> BTreeMap<Option<String>, usize> {
        self.count_by_caller(CallRecord::is_mutating)
    }

    fn count_by_caller(
        &self,
        counted: impl Fn(&CallRecord) -> bool,
    ) -> BTreeMap<Option<String>, usize> {
        let mut counts = BTreeMap::new();
        for record in self.lock().iter().filter(|record| counted(record)) {
            *counts.entry(record.caller.clone()).or_default() += 1;
        }
        counts
    }

    /// How many times each node was passed to `DeleteNodes`, by node name, whatever the
    /// outcome: a node the autoscaler deleted twice shows 2. Only calls that reached the
    /// provider count (the SDK refuses a malformed request before).
    pub fn deletions_by_node(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for record in self
            .lock()
            .iter()
            .filter(|record| record.method == Method::DeleteNodes)
        {
            for node in &record.details.nodes {
                *counts.entry(node.name.clone()).or_default() += 1;
            }
        }
        counts
    }

    /// Logs a call as it arrives; the returned guard records its end.
    pub(crate) fn arrive(
        &self,
        caller: Option<String>,
        method: Method,
        group: Option<&str>,
        details: CallDetails,
        fault: Option<Fault>,
    ) -> InFlight {
        let sequence = {
            let mut records = self.lock();
            let sequence = records.len();
            let carried_out =
                matches!(fault, Some(Fault::AnswerLost { .. })).then_some(CallResult::InFlight);
            records.push(CallRecord {
                sequence,
                arrived: SystemTime::now(),
                completed: None,
                caller,
                method,
                group: group.map(str::to_string),
                details,
                fault,
                result: CallResult::InFlight,
                carried_out,
            });
            sequence
        };
        self.changed.send_modify(|version| *version += 1);
        InFlight {
            log: self.clone(),
            sequence,
            answered: false,
        }
    }

    /// Records how the cloud's side of a call with a lost answer ended.
    pub(crate) fn carried_out(&self, sequence: usize, result: CallResult) {
        self.update(sequence, |record| record.carried_out = Some(result));
    }
}

/// A call being served. Dropping it unanswered records the call as abandoned.
#[derive(Debug)]
pub(crate) struct InFlight {
    log: CallLog,
    sequence: usize,
    answered: bool,
}

impl InFlight {
    pub(crate) fn sequence(&self) -> usize {
        self.sequence
    }

    pub(crate) fn answer<T>(mut self, result: &Result<T, CloudError>) {
        self.answered = true;
        self.end(CallResult::of(result));
    }

    fn end(&self, result: CallResult) {
        self.log.update(self.sequence, |record| {
            record.completed = Some(SystemTime::now());
            record.result = result;
        });
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.answered {
            self.end(CallResult::Abandoned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delete(log: &CallLog, caller: &str, names: &[&str]) {
        let details = CallDetails {
            delta: None,
            nodes: names
                .iter()
                .map(|name| NodeRef {
                    name: name.to_string(),
                    provider_id: format!("kwok:{name}"),
                })
                .collect(),
        };
        log.arrive(
            Some(caller.to_string()),
            Method::DeleteNodes,
            Some("workers"),
            details,
            None,
        )
        .answer(&Ok::<(), CloudError>(()));
    }

    #[test]
    fn the_invariants_helpers_count_mutations_by_caller_and_deletions_by_node() {
        let log = CallLog::default();
        delete(&log, "replica-0", &["a", "b"]);
        delete(&log, "replica-0", &["b"]);
        log.arrive(None, Method::Refresh, None, CallDetails::default(), None)
            .answer(&Ok::<(), CloudError>(()));
        log.arrive(
            Some("replica-1".to_string()),
            Method::Nodes,
            Some("workers"),
            CallDetails::default(),
            None,
        )
        .answer(&Ok::<(), CloudError>(()));

        assert_eq!(
            log.mutating_calls_by_caller(),
            BTreeMap::from([(Some("replica-0".to_string()), 2)])
        );
        assert_eq!(
            log.calls_by_caller(),
            BTreeMap::from([
                (None, 1),
                (Some("replica-0".to_string()), 2),
                (Some("replica-1".to_string()), 1),
            ])
        );
        assert_eq!(
            log.deletions_by_node(),
            BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 2)])
        );
    }

    #[test]
    fn a_call_dropped_before_answering_is_abandoned_with_its_end_time() {
        let log = CallLog::default();
        let call = log.arrive(
            None,
            Method::IncreaseSize,
            Some("w"),
            CallDetails::default(),
            None,
        );
        assert_eq!(log.records()[0].result, CallResult::InFlight);
        assert_eq!(log.records()[0].completed, None);
        drop(call);
        let record = &log.records()[0];
        assert_eq!(record.result, CallResult::Abandoned);
        assert!(record.completed.is_some_and(|end| end >= record.arrived));
    }

    #[tokio::test]
    async fn waiting_sees_a_result_that_comes_later_and_times_out_naming_the_calls() {
        let log = CallLog::default();
        let call = log.arrive(None, Method::Refresh, None, CallDetails::default(), None);
        let waiter = {
            let log = log.clone();
            tokio::spawn(async move {
                log.wait_for_call(
                    |record| record.method == Method::Refresh && record.result == CallResult::Ok,
                    Duration::from_secs(10),
                )
                .await
            })
        };
        tokio::task::yield_now().await;
        call.answer(&Ok::<(), CloudError>(()));
        let found = waiter
            .await
            .expect("the waiter runs")
            .expect("the call is seen");
        assert_eq!(found.sequence, 0);

        let error = log
            .wait_for_call(
                |record| record.method == Method::DeleteNodes,
                Duration::from_millis(50),
            )
            .await
            .expect_err("no DeleteNodes call");
        assert_eq!(error.logged, 1);
        assert!(
            error.to_string().contains("#0 <no identity> refresh"),
            "{error}"
        );
    }
}
