//! Serve any Ferroscale [`CloudProvider`] as the externalgrpc cloud-provider service, the gRPC API
//! through which an upstream Cluster Autoscaler (`--cloud-provider=externalgrpc`) or Ferroscale's
//! own externalgrpc provider manages node groups in a cloud it has no built-in support for.
//!
//! A cloud vendor implements the core [`CloudProvider`] and [`NodeGroup`] traits — the same ones
//! Ferroscale's built-in providers implement, so those can be served as they are — and hands the
//! provider to [`ProviderServer`]. The server:
//!
//! - maps each of the 15 RPCs onto the traits (docs/externalgrpc.md GRPC-31):
//!   optional features a provider lacks (pricing, templates, per-group options) answer status 12
//!   UNIMPLEMENTED, which clients read as "not offered"; a node outside every group is an OK
//!   answer with an empty group; unknown group ids are NOT_FOUND; missing or malformed request
//!   fields (including undecodable `pod_bytes`) are INVALID_ARGUMENT naming the field, and so is a
//!   request whose message does not decode at all (naming the method);
//! - checks the bounds of the core contract before calling the provider: growing past the max
//!   size, deleting a node that is not an instance of the group, or deleting below the min size
//!   is INVALID_ARGUMENT and reaches no provider method that changes anything;
//! - maps provider errors to codes ([`CloudError::NotImplemented`] → UNIMPLEMENTED,
//!   [`CloudError::InvalidRequest`] → INVALID_ARGUMENT, [`CloudError::NodeGroupDoesNotExist`] →
//!   NOT_FOUND, [`CloudError::Unavailable`] → UNAVAILABLE, [`CloudError::Provider`] → UNKNOWN,
//!   ...) with messages naming the call and the group;
//! - speaks to clients older than upstream 1.35 too: it fills their response fields (template,
//!   option durations) and reads their request fields (pricing pod and times);
//! - refuses to send an answer larger than the 4 MiB an upstream client accepts
//!   ([`MAX_RESPONSE_BYTES`]), with a message naming the call, instead of letting the client fail
//!   without saying why;
//! - requires mutual TLS unless [`Tls::Insecure`] is chosen (and then warns at start), and logs
//!   every client it refuses (no certificate, another CA, expired, not TLS) at warn with the
//!   peer's address and the reason, at most 10 lines a minute;
//! - tells the provider who is calling: during each call [`caller`] answers the identity of the
//!   client's certificate (its common name, e.g. `replica-0`), so a provider can audit which
//!   client resized or deleted what;
//! - serves the standard health service `grpc.health.v1.Health`, reporting SERVING for the
//!   externalgrpc service (`clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider`) and
//!   for the server as a whole (`""`);
//! - logs each call at debug level (`method`, `group`, `object`, `client`, `elapsed_ms`, `code`),
//!   failures at warn, and calls a client abandoned (deadline, disconnect) at warn;
//! - on the shutdown future, stops accepting connections and lets calls in flight finish.
//!
//! # Things a provider should know
//!
//! - Nodes in requests are minimal: name, provider id, labels and annotations (that is all the
//!   wire carries). Identify them by provider id, which equals the instance id.
//! - A node group's [`NodeGroup::nodes`] must list instances by the Kubernetes node's
//!   `spec.providerID`, including instances not registered yet; deletions are checked against it.
//! - Clients give every call a deadline (5 s by default). The provider gets 90% of it; then the
//!   server answers DEADLINE_EXCEEDED naming the call (so the answer reaches the client in time)
//!   and drops the provider's future where it stands. `increase_size` and `delete_nodes` should
//!   therefore return once the change is requested, not once it is done.
//! - [`caller`] names the client of the call being served: the common name of its client
//!   certificate, else the certificate's whole subject, else `sha256:` and 16 hex digits of its
//!   fingerprint; `None` over plaintext. Give each client (each autoscaler replica) a certificate
//!   of its own to tell them apart. It is set for the task running the provider's method: read
//!   it before spawning work elsewhere.
//! - Return [`CloudError::Unavailable`] when the cloud is down, overloaded or rate-limiting and
//!   the call is worth retrying later; the client sees UNAVAILABLE (a Ferroscale client reads it
//!   back as `Unavailable`), not the UNKNOWN of [`CloudError::Provider`].
//! - Per-group options have two core fields with no place on the wire (max node startup time,
//!   non-atomic scale-up to max); their overrides are not sent.
//!
//! # Example
//!
//! A cloud with one fixed group that grows on request:
//!
//! ```no_run
//! use std::sync::{Arc, Mutex};
//!
//! use async_trait::async_trait;
//! use ferroscale_core::cloud::{CloudError, CloudProvider, Instance, NodeGroup};
//! use ferroscale_externalgrpc_sdk::{ProviderServer, Tls};
//! use ferroscale_model::Node;
//!
//! #[derive(Debug, Default)]
//! struct Workers {
//!     instances: Mutex<Vec<String>>,
//! }
//!
//! impl Workers {
//!     fn instances(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
//!         self.instances.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
//!     }
//! }
//!
//! #[async_trait]
//! impl NodeGroup for Workers {
//!     fn id(&self) -> &str {
//!         "workers"
//!     }
//!     fn min_size(&self) -> usize {
//!         0
//!     }
//!     fn max_size(&self) -> usize {
//!         10
//!     }
//!     async fn target_size(&self) -> Result<usize, CloudError> {
//!         Ok(self.instances().len())
//!     }
//!     async fn increase_size(&self, delta: usize) -> Result<(), CloudError> {
//!         let mut instances = self.instances();
//!         for _ in 0..delta {
//!             let id = format!("example://workers-{}", instances.len());
//!             instances.push(id);
//!         }
//!         Ok(())
//!     }
//!     async fn delete_nodes(&self, nodes: &[Node]) -> Result<(), CloudError> {
//!         self.instances().retain(|id| nodes.iter().all(|node| &node.provider_id != id));
//!         Ok(())
//!     }
//!     async fn decrease_target_size(&self, _delta: i64) -> Result<(), CloudError> {
//!         // Instances start at once here: there is never a pending request to cancel.
//!         Err(CloudError::InvalidRequest("no pending instances to cancel".to_string()))
//!     }
//!     async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
//!         Ok(self.instances().iter().map(Instance::running).collect())
//!     }
//!     // Templates and per-group options are optional: the defaults answer UNIMPLEMENTED.
//! }
//!
//! struct ExampleCloud {
//!     workers: Arc<Workers>,
//! }
//!
//! #[async_trait]
//! impl CloudProvider for ExampleCloud {
//!     fn name(&self) -> &str {
//!         "example"
//!     }
//!     fn gpu_label(&self) -> &str {
//!         "example.com/gpu"
//!     }
//!     async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
//!         Ok(vec![self.workers.clone()])
//!     }
//!     async fn node_group_for_node(
//!         &self,
//!         node: &Node,
//!     ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
//!         let owned = self.workers.instances().contains(&node.provider_id);
//!         Ok(owned.then(|| self.workers.clone() as Arc<dyn NodeGroup>))
//!     }
//!     async fn refresh(&self) -> Result<(), CloudError> {
//!         Ok(())
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let cloud = ExampleCloud { workers: Arc::new(Workers::default()) };
//!     // The cert-manager secret layout: the server's certificate and key, and the CA that
//!     // signs the autoscaler's client certificate.
//!     let tls = Tls::mutual(
//!         "/etc/ssl/server-cert/tls.crt",
//!         "/etc/ssl/server-cert/tls.key",
//!         "/etc/ssl/server-cert/ca.crt",
//!     );
//!     // Stop on the first line read from stdin; a real service would wait for SIGTERM.
//!     let shutdown = async {
//!         let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new())).await;
//!     };
//!     ProviderServer::new(cloud)
//!         .serve("0.0.0.0:8086".parse()?, tls, shutdown)
//!         .await?;
//!     Ok(())
//! }
//! ```
//!
//! [`CloudProvider`]: ferroscale_core::cloud::CloudProvider
//! [`NodeGroup`]: ferroscale_core::cloud::NodeGroup
//! [`NodeGroup::nodes`]: ferroscale_core::cloud::NodeGroup::nodes
//! [`CloudError::NotImplemented`]: ferroscale_core::cloud::CloudError::NotImplemented
//! [`CloudError::InvalidRequest`]: ferroscale_core::cloud::CloudError::InvalidRequest
//! [`CloudError::NodeGroupDoesNotExist`]: ferroscale_core::cloud::CloudError::NodeGroupDoesNotExist
//! [`CloudError::Provider`]: ferroscale_core::cloud::CloudError::Provider
//! [`CloudError::Unavailable`]: ferroscale_core::cloud::CloudError::Unavailable

mod call;
mod caller;
mod conversion;
mod handshake;
mod server;
mod service;
mod tls;
mod unreadable;

pub use call::MAX_RESPONSE_BYTES;
pub use caller::caller;
pub use server::{ProviderServer, ServeError};
pub use service::ProviderService;
pub use tls::{MutualTls, Tls, TlsError, TlsFile};
pub use unreadable::UnreadableRequestsRefused;
