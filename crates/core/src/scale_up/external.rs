//! The external (gRPC) expander's place in the expander chain (docs/grpc-expander.md).
//!
//! The plan stays pure: it cannot await a remote service. When `grpc` is in `--expander`, the loop
//! plans once on a throw-away branch with [`ExternalExpanderStep::Ask`]; if the chain reaches
//! `grpc` with more than one option left, that plan stops there and hands the options back in
//! [`super::ScaleUpPlan::external_query`]. The loop awaits the [`ExternalExpander`] with them and
//! plans again for real with [`ExternalExpanderStep::Answer`]: the seeded expanders before `grpc`
//! choose the same options both times, and the ones after it see what the service kept.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use ferroscale_model::{Node, Pod};
use thiserror::Error;

/// What the plan does when the chain reaches `grpc`.
#[derive(Debug, Clone, Copy, Default)]
pub enum ExternalExpanderStep<'a> {
    /// No external expander is wired (the simulator, salvo rounds): `grpc` keeps every option, as
    /// upstream does when the call fails.
    #[default]
    Skip,
    /// Stop at `grpc` and return the options it would be asked about.
    Ask,
    /// The service's answer to the options of this plan.
    Answer(&'a ExternalAnswer),
}

/// What the external expander answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExternalAnswer {
    /// The node group ids it kept, best first. An empty list keeps nothing (no scale-up).
    Options(Vec<String>),
    /// The call failed (error status, deadline, TLS, unreachable): every option is kept and the
    /// chain goes on.
    Failed(String),
}

/// One option as the external expander sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpanderQueryOption {
    pub group_id: String,
    pub node_count: usize,
    /// The pods the option places.
    pub pods: Vec<Arc<Pod>>,
    /// Free-form text for the service's logs.
    pub debug: String,
}

/// Everything the external expander is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpanderQuery {
    pub options: Vec<ExpanderQueryOption>,
    /// The template node of each option's group, by group id.
    pub templates: BTreeMap<String, Node>,
}

/// Why the external expander could not answer; the message names the service and the cause.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct ExternalExpanderError(pub String);

/// An expander the loop calls out to (the gRPC expander of `crates/expander-grpc`).
#[async_trait]
pub trait ExternalExpander: Send + Sync {
    /// The ids of the node groups the service prefers among `query.options`.
    async fn best_options(
        &self,
        query: &ExpanderQuery,
    ) -> Result<Vec<String>, ExternalExpanderError>;
}
