//! The cloud-agnostic autoscaling engine.
//!
//! `cloud` is the contract every provider implements (async: it does I/O). Everything else here is
//! the pure Decide layer: functions of a gathered snapshot, remembered state and options, returning a
//! plan. No I/O, no clock reads, no unseeded randomness.

pub mod cloud;
