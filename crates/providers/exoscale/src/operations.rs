//! Waiting for the API's asynchronous work (docs/exoscale.md EXO-19–EXO-21, EXO-31):
//! an operation until it settles, and an Instance Pool until it is `running` again.
//!
//! Intervals and bounds are upstream's constants by default and injectable through [`Timing`], so
//! tests run in milliseconds.

use std::time::Duration;

use thiserror::Error;

use crate::client::{ApiClient, CallError};

/// Polling intervals and bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Wait before each `GET /v2/operation/{id}` (upstream 3 s).
    pub operation_poll: Duration,
    /// Bound on the whole operation polling phase (upstream 60 s).
    pub operation_limit: Duration,
    /// Wait between two reads of a pool's state (upstream 10 s).
    pub pool_poll: Duration,
    /// Bound on waiting for a pool to be `running` (upstream 10 min).
    pub pool_limit: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            operation_poll: Duration::from_secs(3),
            operation_limit: Duration::from_secs(60),
            pool_poll: Duration::from_secs(10),
            pool_limit: Duration::from_secs(600),
        }
    }
}

/// Why waiting failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WaitError {
    #[error(transparent)]
    Call(#[from] CallError),
    /// The PUT's answer carried no operation id to poll.
    #[error("the API answered without an operation id")]
    MissingOperationId,
    #[error("operation {id}: job failed")]
    JobFailed { id: String },
    #[error("operation {id}: job timed out")]
    JobTimedOut { id: String },
    #[error("operation {id}: unknown job state: {state}")]
    UnknownJobState { id: String, state: String },
    #[error("operation {id}: deadline exceeded after {limit:?} of polling")]
    OperationDeadline { id: String, limit: Duration },
    #[error("instance pool {pool_id} not running: context timeout after: {limit:?}")]
    PoolDeadline { pool_id: String, limit: Duration },
}

/// Polls operation `id` every `operation_poll` (waiting first) until it leaves `pending`.
pub async fn wait_for_operation(
    client: &ApiClient,
    id: &str,
    timing: &Timing,
) -> Result<(), WaitError> {
    let polling = async {
        loop {
            tokio::time::sleep(timing.operation_poll).await;
            let operation = client.get_operation(id).await?;
            match operation.state.as_deref() {
                Some("pending") => continue,
                Some("success") => return Ok(()),
                Some("failure") => return Err(WaitError::JobFailed { id: id.to_string() }),
                Some("timeout") => return Err(WaitError::JobTimedOut { id: id.to_string() }),
                other => {
                    return Err(WaitError::UnknownJobState {
                        id: id.to_string(),
                        state: other.unwrap_or("").to_string(),
                    });
                }
            }
        }
    };
    tokio::time::timeout(timing.operation_limit, polling)
        .await
        .unwrap_or_else(|_| {
            Err(WaitError::OperationDeadline {
                id: id.to_string(),
                limit: timing.operation_limit,
            })
        })
}

/// The id of the operation a PUT started, then its polling.
pub async fn complete_operation(
    client: &ApiClient,
    started: crate::api::Operation,
    timing: &Timing,
) -> Result<(), WaitError> {
    let id = started
        .id
        .filter(|id| !id.is_empty())
        .ok_or(WaitError::MissingOperationId)?;
    wait_for_operation(client, &id, timing).await
}

/// Reads pool `pool_id` at once and then every `pool_poll` until its state is `running`.
pub async fn wait_until_running(
    client: &ApiClient,
    pool_id: &str,
    timing: &Timing,
) -> Result<(), WaitError> {
    let polling = async {
        loop {
            let pool = client.get_instance_pool(pool_id).await?;
            if pool.state.as_deref() == Some("running") {
                return Ok(());
            }
            tokio::time::sleep(timing.pool_poll).await;
        }
    };
    tokio::time::timeout(timing.pool_limit, polling)
        .await
        .unwrap_or_else(|_| {
            Err(WaitError::PoolDeadline {
                pool_id: pool_id.to_string(),
                limit: timing.pool_limit,
            })
        })
}
