//! The Ferroscale simulator: runs the real decision engine against a scenario (node groups, a timed
//! workload, expectations) in simulated time.

pub mod scenario;
