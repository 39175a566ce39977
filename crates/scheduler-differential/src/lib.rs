//! Test only: a differential test of Ferroscale's Filter verdicts against the real kube-scheduler.
//!
//! * [`generate`] — seeded random small cases: nodes, running pods, and pending pods using every
//!   Filter-relevant field of a pod spec.
//! * [`runner`] — applies a case to the test control plane (crates/testing-control-plane), lets
//!   kube-scheduler decide on the pending pods one at a time, and records each decision with the
//!   cluster as it was ([`verdict::Observation`]).
//! * [`verdict`] — Ferroscale's verdict for an observation (through the same object conversion
//!   and filters as the live binary) and the comparison with the scheduler's.
//!
//! `tests/differential.rs` runs seeded cases per scheduler configuration family;
//! `tests/regressions.rs` replays every disagreement ever found, from `regressions/*.yaml`,
//! without a control plane.

pub mod generate;
pub mod runner;
pub mod verdict;

pub use generate::{Case, GeneratorSettings, generate_case};
pub use runner::{
    CONFIGURED_PROFILE, DEFAULT_PROFILE, DRA, Family, RunError, Runner, Tally, VOLUMES,
};
pub use verdict::{
    Disagreement, NodeVerdicts, Observation, Outcome, compare, ferroscale_verdicts,
    observation_yaml, parse_scheduler_message,
};
