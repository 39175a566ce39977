//! Observability of a live autoscaler: the Prometheus metrics with the upstream names and labels
//! (docs/behaviour.md OBS-101), the liveness rule behind `/health-check` (LOOP-98), and the small
//! HTTP server that serves both.
//!
//! - [`AutoscalerMetrics`]: the registry; [`AutoscalerMetrics::record_loop`] fills it from one
//!   [`ferroscale_core::autoscaler::LoopOutcome`]; [`AutoscalerMetrics::families`] lists every
//!   family it serves.
//! - [`summary::SlidingSummaryVec`]: the summary type the `prometheus` crate lacks.
//! - [`HealthCheck`]: a pure state machine; time is passed in.
//! - [`serve`]: `/metrics` and `/health-check` on a TCP listener.

mod ferroscale;
pub mod health;
mod record;
pub mod registry;
pub mod server;
pub mod summary;

pub use health::{HealthCheck, HealthLimits, HealthStatus};
pub use registry::{AutoscalerMetrics, Family, Kind, MetricsError};
pub use server::{
    ExtraRoutes, RouteAnswer, RouteHandler, ServerError, bind, parse_address, serve, serve_with,
};
