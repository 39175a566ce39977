//! The cloud-agnostic autoscaling engine.
//!
//! `cloud` is the contract every provider implements (async: it does I/O). Everything else here is
//! the pure Decide layer: functions of a gathered snapshot, remembered state and options, returning a
//! plan. No I/O, no clock reads, no unseeded randomness. The one exception is
//! [`scale_up::execute_scale_up`], the Act step of a scale-up, which talks to the provider.

pub mod actuation;
pub mod autoscaler;
pub mod backoff;
#[cfg(feature = "bench-fixtures")]
pub mod bench_fixtures;
pub mod cloud;
pub mod cluster_state;
pub mod events;
pub mod kubernetes;
pub mod options;
pub mod scale_down;
pub mod scale_up;

pub use backoff::NodeGroupBackoff;
pub use options::{AutoscalingOptions, OptionError};
