//! The Ferroscale simulator: runs the real decision engine against a scenario (node groups, a timed
//! workload, expectations) in simulated time.

pub mod api;
pub mod capacity;
pub mod capacity_record;
pub mod clock;
pub mod cloud;
mod cloud_nodes;
pub mod cluster;
pub mod dra;
pub mod explain;
pub mod record;
pub mod replay;
pub mod report;
pub mod resize_calls;
pub mod runner;
pub mod scenario;
pub mod served;
pub mod storage;
pub mod upstream_runonce;
