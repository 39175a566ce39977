//! Test support: the faults the live tests inject, so that what Ferroscale does when things go
//! wrong is proven against the real control plane (docs/reliability.md).
//!
//! - [`api_proxy`]: an HTTP proxy between a `ferroscale` process and kube-apiserver that answers
//!   429/5xx, adds latency, resets connections, blackholes requests, holds a request until the
//!   test releases it, and drops or stalls watch streams — per request class (list, watch, get,
//!   create, update, patch, delete, eviction, lease) and resource, switched at run time.
//! - [`provider`]: a `CloudProvider` wrapper, served over externalgrpc, whose calls can be
//!   delayed past the client's deadline, answered UNAVAILABLE, carried out with the answer lost,
//!   half-done, or whose new instances never become nodes; it logs every call with the client
//!   that made it.
//!
//! Nothing here is product code: the binary never links this crate.

pub mod api_proxy;
pub mod provider;
