//! The Exoscale cloud provider (`--cloud-provider=exoscale`, docs/exoscale.md): scales SKS
//! Nodepools and plain Instance Pools through the signed Exoscale API v2, as upstream does.
//!
//! - [`config`]: credentials and zone from the environment, the API base URL, `--nodes` bounds.
//! - [`signer`]: the `EXO2-HMAC-SHA256` request signature.
//! - [`client`]: the HTTP client (timeouts, GET retries, rate limiting, error kinds).
//! - [`redact`]: what of an API error body may reach an error or a log line.
//! - [`operations`]: polling of asynchronous operations and of pool states.
//! - [`ExoscaleProvider`] and [`ExoscaleNodeGroup`]: the `CloudProvider` and its groups.
//!
//! # Wiring
//!
//! Nothing is called at construction; a missing variable is a start-up error naming it. The
//! binary calls `ExoscaleProvider::from_process_env(&options.nodes)`; with an injected lookup and
//! options:
//!
//! ```no_run
//! # use ferroscale_provider_exoscale::{ConfigError, ExoscaleProvider, ProviderOptions};
//! # fn wire(nodes: Vec<String>) -> Result<ExoscaleProvider, ConfigError> {
//! let provider = ExoscaleProvider::from_env(
//!     |name| std::env::var(name).ok(),
//!     nodes, // the `--nodes` values, as given
//!     ProviderOptions::default(),
//! )?;
//! # Ok(provider) }
//! ```
//!
//! # Decisions where upstream is silent or accidental
//!
//! - Quota limit −1 (unlimited, docs/exoscale.md EXO-Q2): groups without `--nodes` bounds get max
//!   [`UNLIMITED_QUOTA_MAX`] (5,000, the Kubernetes cluster-size limit) instead of −1, which would
//!   make every scale-up fail.
//! - Every request has a timeout (30 s by default); upstream has none and relies on the polling
//!   bounds only.
//! - GETs are retried up to 3 times with exponential backoff after a 5xx, a transport error or a
//!   timeout; scale and evict PUTs are never retried, because a repeated PUT after an unknown
//!   outcome could scale or evict twice.
//! - Requests are rate limited on the client (50/s, bursts of 100 by default), and `nodes()` reads
//!   up to 8 members at once instead of one after the other.
//! - Every node lookup repeats the whole resolution and a refresh, as upstream (EXO-Q6): the
//!   core's gather only looks up nodes that no group's `nodes()` lists, so this is rare after the
//!   first loop.
//! - `delete_nodes` with no node succeeds without calling the API.
//! - `EXOSCALE_API_ENDPOINT` overrides the whole base URL (not upstream, which only has
//!   `EXOSCALE_API_ENVIRONMENT`).
//! - `MaxSize` cannot call the API (the trait's method is synchronous): a plain group with no
//!   positive stored max re-reads the quota in `increase_size` instead.
//! - An instance in a state the core has no name for is reported as Running with error info
//!   (`Other`, `no-code-exoscale`) where upstream reports no state with that error info; the
//!   core reads both the same (only Creating and Deleting are told apart).
//! - `delete_nodes` also drops the evicted members from a plain group's cached member list, so
//!   `nodes()` does not read destroyed instances before the group is rebuilt.
//! - Missing JSON fields read as absent (EXO-Q7), never a crash.
//! - Scale from zero is not supported, as upstream: `template_node_info` is NotImplemented and
//!   `--nodes` refuses min 0.

pub mod api;
pub mod client;
pub mod config;
pub mod operations;
pub mod provider;
pub mod rate_limit;
pub mod redact;
pub mod signer;

pub use client::{ApiClient, ApiError, CallError, ClientOptions};
pub use config::{ConfigError, ExoscaleConfig, NodeGroupSpec, Secret};
pub use operations::{Timing, WaitError};
pub use provider::{
    ExoscaleNodeGroup, ExoscaleProvider, GroupKind, PROVIDER_NAME, ProviderOptions,
    UNLIMITED_QUOTA_MAX,
};
pub use rate_limit::RateLimit;
