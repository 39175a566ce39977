//! The externalgrpc cloud provider (`--cloud-provider=externalgrpc`,
//! docs/externalgrpc.md GRPC-01–GRPC-16): node groups served by any external service that speaks
//! upstream's externalgrpc API, such as upstream's example server or a service built on
//! ferroscale's SDK.
//!
//! - [`config`]: the cloud config file (`address`, `cert`, `key`, `cacert`, `grpc_timeout`).
//! - [`ExternalGrpcProvider`]: the `CloudProvider`, built with [`ExternalGrpcProvider::from_config_file`].
//! - [`ExternalGrpcNodeGroup`]: its node groups.
//! - [`NodeGroupDefaults`]: the per-group option defaults sent with every `NodeGroupGetOptions`.
//!
//! # Wiring
//!
//! Inside the Tokio runtime (the channel's worker is spawned there); nothing is dialled yet, so
//! an unreachable service is not a start-up error, while a bad config or mTLS file is:
//!
//! ```no_run
//! # use ferroscale_core::options::AutoscalingOptions;
//! # use ferroscale_provider_externalgrpc::{ExternalGrpcError, ExternalGrpcProvider, NodeGroupDefaults};
//! # fn wire(options: &AutoscalingOptions) -> Result<ExternalGrpcProvider, ExternalGrpcError> {
//! let provider = ExternalGrpcProvider::from_config_file(
//!     std::path::Path::new("/etc/ferroscale/cloud-config.yaml"),
//!     NodeGroupDefaults::from_options(options),
//! )?;
//! # Ok(provider) }
//! ```
//!
//! # Caching (docs/externalgrpc.md GRPC-05–GRPC-09)
//!
//! | what | kept | until |
//! | --- | --- | --- |
//! | the node-group list | after the first successful `NodeGroups` | the next [`refresh`](CloudProvider::refresh) |
//! | node → group | per node name and providerID, only answers naming a group | the next `refresh` |
//! | GPU label, GPU types | after the first successful answer | never |
//! | id, min, max, debug | when a group object is built | the object's lifetime |
//! | template | after the first usable answer, per group object | the object's lifetime |
//!
//! `refresh` empties the two per-loop caches before its RPC, whatever the RPC's outcome; objects
//! the caller still holds keep their values. Failures are never kept. Everything else
//! (target size, instances, options, pricing, the mutating calls, `Refresh`, `Cleanup`) reaches the
//! service at every call.
//!
//! The core asks for the GPU label and types synchronously, so they cannot be fetched on
//! demand: [`refresh`](CloudProvider::refresh) fetches each one after a successful `Refresh` RPC
//! until it has been answered once, and they are kept forever. Until then `gpu_label()` is `""`
//! and `available_gpu_types()` is empty, which is also what upstream answers while the service
//! cannot be reached.
//!
//! # Where this provider differs from upstream, and why
//!
//! - A failed `NodeGroups` is an error rather than an empty list (not kept, asked again at the
//!   next call): the core then skips the loop instead of believing that every group is gone.
//! - An answer the core cannot use is refused whole, with the group and the call named, and
//!   nothing of it is kept: a group with a negative bound or min > max (from `NodeGroups` or
//!   `NodeGroupForNode`), template bytes that are not a valid Node, and an **empty template**.
//!   Upstream keeps an empty `nodeBytes` as "no template" for the object's lifetime and its core
//!   then dereferences the missing node; here it is an error the core treats like any template
//!   failure (it falls back to real nodes) and the next call asks again.
//! - A duration left out of a `NodeGroupGetOptions` override means "use the default", not zero
//!   (zero would make nodes removable at once). Scalars are taken as sent: proto3 cannot tell a
//!   missing scalar from zero.
//! - Pricing needs RPCs, but the core's `PricingModel` is synchronous: [`pricing`](CloudProvider::pricing)
//!   answers NotImplemented, and the async [`ExternalGrpcProvider::node_price`] and
//!   [`ExternalGrpcProvider::pod_price`] make the RPCs for whoever gathers prices.
//! - `has_instance` answers NotImplemented without an RPC (upstream answers `true` together with
//!   NotImplemented, which a `Result` cannot carry; the core reads both the same way).
//! - Node → group answers are kept per (name, providerID) pair rather than per the two strings
//!   concatenated, so two different nodes can never share an entry.
//! - `NodeGroupForNode` calls run concurrently (upstream serialises them behind one lock); an
//!   answer that arrives after a `refresh` has emptied the cache is not kept.
//! - The core's model knows instance states 1/2/3 and error classes 1/99 only: an unknown state
//!   is read as "no status" and an unknown class as `Other`, with a warning (upstream passes the
//!   numbers through).
//! - Peers older than upstream 1.35 are read through their old fields (template in field 1,
//!   option durations in fields 3-5), and pricing requests also carry the old fields.
//!
//! # Logging
//!
//! Every call is logged at debug level (the binary's `--v=5`) with the method, what it concerns
//! and how long it took, as is every answer served from a cache; every failure at error level,
//! except status 12 of an optional RPC. Plaintext mode is a warning at start-up. Key material is
//! never logged.

pub mod config;
mod connection;
mod conversions;
mod node_group;
mod rpc;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use ferroscale_core::cloud::{CloudError, CloudProvider, GpuConfig, NodeGroup};
use ferroscale_externalgrpc_proto::{encode_pod, v1};
use ferroscale_model::{Node, Pod, Timestamp};
use thiserror::Error;

pub use config::{ConfigError, DEFAULT_GRPC_TIMEOUT, ExternalGrpcConfig, ServerAddress, TlsFiles};
pub use connection::ConnectionError;
pub use conversions::NodeGroupDefaults;
pub use node_group::ExternalGrpcNodeGroup;

use conversions::wire_timestamp;
use rpc::{Caller, Method, Subject, log_cached};

/// The provider's name, as `--cloud-provider` spells it.
pub const PROVIDER_NAME: &str = "externalgrpc";

/// The GPU resources a node may carry, in the order upstream checks them (docs/externalgrpc.md
/// GRPC-29).
const GPU_RESOURCES: [&str; 5] = [
    "nvidia.com/gpu",
    "habana.ai/gaudi",
    "gpu.intel.com/xe",
    "amd.com/gpu",
    "microsoft.com/directx",
];

/// Why the provider could not be built. Fatal at start-up, as upstream.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExternalGrpcError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Connection(#[from] ConnectionError),
}

/// A cloud whose node groups live behind an externalgrpc service. Cheap to share: every clone of
/// the `Arc`s inside talks over one channel.
pub struct ExternalGrpcProvider {
    caller: Caller,
    defaults: Arc<NodeGroupDefaults>,
    /// The list from the first successful `NodeGroups` since the last refresh. The async lock is
    /// held across the RPC so that concurrent callers ask once.
    node_groups: tokio::sync::Mutex<Option<Vec<Arc<ExternalGrpcNodeGroup>>>>,
    node_group_for_node: Mutex<NodeGroupForNodeCache>,
    gpu_label: OnceLock<String>,
    gpu_types: OnceLock<Vec<String>>,
}

/// Node → group answers of this loop. `generation` counts refreshes, so that an answer which
/// arrives after a refresh emptied the cache is not kept.
#[derive(Default)]
struct NodeGroupForNodeCache {
    generation: u64,
    by_node: HashMap<(String, String), Arc<ExternalGrpcNodeGroup>>,
}

impl ExternalGrpcProvider {
    /// Reads the cloud config at `path` and sets up the channel (`--cloud-config`). Checks the
    /// mTLS files but dials nothing: an unreachable service shows up at the first call. Must be
    /// called inside a Tokio runtime.
    pub fn from_config_file(
        path: &Path,
        defaults: NodeGroupDefaults,
    ) -> Result<ExternalGrpcProvider, ExternalGrpcError> {
        let config = ExternalGrpcConfig::from_file(path)?;
        ExternalGrpcProvider::new(&config, defaults)
    }

    /// Sets up the channel for a checked configuration; see [`Self::from_config_file`].
    pub fn new(
        config: &ExternalGrpcConfig,
        defaults: NodeGroupDefaults,
    ) -> Result<ExternalGrpcProvider, ExternalGrpcError> {
        let channel = connection::connect(config)?;
        if config.grpc_timeout.is_zero() {
            tracing::warn!(
                config = %config.source,
                "externalgrpc: grpc_timeout is zero or negative: every call will fail with \
                 DEADLINE_EXCEEDED"
            );
        }
        Ok(ExternalGrpcProvider {
            caller: Caller::new(channel, config.grpc_timeout),
            defaults: Arc::new(defaults),
            node_groups: tokio::sync::Mutex::new(None),
            node_group_for_node: Mutex::new(NodeGroupForNodeCache::default()),
            gpu_label: OnceLock::new(),
            gpu_types: OnceLock::new(),
        })
    }

    /// The price of running `node` from `start` to `end` (`PricingNodePrice`), in the service's
    /// currency. NotImplemented when the service does not price.
    pub async fn node_price(
        &self,
        node: &Node,
        start: Timestamp,
        end: Timestamp,
    ) -> Result<f64, CloudError> {
        let request = v1::PricingNodePriceRequest {
            node: Some(v1::ExternalGrpcNode::from_node(node)),
            start_timestamp: Some(wire_timestamp(start)),
            end_timestamp: Some(wire_timestamp(end)),
            ..Default::default()
        }
        .with_legacy_fields();
        let answer = self
            .caller
            .call(
                Method::PricingNodePrice,
                &node_subject(node),
                request,
                |mut client, request| async move { client.pricing_node_price(request).await },
            )
            .await?;
        Ok(answer.price)
    }

    /// The price of running `pod` from `start` to `end` (`PricingPodPrice`, the pod sent as its
    /// Kubernetes protobuf bytes). NotImplemented when the service does not price.
    pub async fn pod_price(
        &self,
        pod: &Pod,
        start: Timestamp,
        end: Timestamp,
    ) -> Result<f64, CloudError> {
        let request = v1::PricingPodPriceRequest {
            pod_bytes: encode_pod(pod),
            start_timestamp: Some(wire_timestamp(start)),
            end_timestamp: Some(wire_timestamp(end)),
            ..Default::default()
        }
        .with_legacy_fields();
        let subject = Subject::Pod {
            namespace: pod.namespace.to_string(),
            name: pod.name.to_string(),
        };
        let answer = self
            .caller
            .call(
                Method::PricingPodPrice,
                &subject,
                request,
                |mut client, request| async move { client.pricing_pod_price(request).await },
            )
            .await?;
        Ok(answer.price)
    }

    /// The node groups, from the cache or one `NodeGroups` RPC, as concrete objects.
    pub async fn external_node_groups(
        &self,
    ) -> Result<Vec<Arc<ExternalGrpcNodeGroup>>, CloudError> {
        let method = Method::NodeGroups;
        let mut cached = self.node_groups.lock().await;
        if let Some(groups) = cached.as_ref() {
            log_cached(method, &Subject::Provider);
            return Ok(groups.clone());
        }
        let answer = self
            .caller
            .call(
                method,
                &Subject::Provider,
                v1::NodeGroupsRequest {},
                |mut client, request| async move { client.node_groups(request).await },
            )
            .await?;
        let groups = answer
            .node_groups
            .iter()
            .map(|message| {
                ExternalGrpcNodeGroup::from_message(
                    message,
                    method,
                    self.caller.clone(),
                    self.defaults.clone(),
                )
                .map(Arc::new)
            })
            .collect::<Result<Vec<_>, CloudError>>()?;
        *cached = Some(groups.clone());
        Ok(groups)
    }

    /// The group of `node` as a concrete object; see [`CloudProvider::node_group_for_node`].
    pub async fn external_node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<ExternalGrpcNodeGroup>>, CloudError> {
        let method = Method::NodeGroupForNode;
        let subject = node_subject(node);
        let key = (node.name.clone(), node.provider_id.clone());
        let generation = {
            let cache = self.lock_node_group_for_node();
            if let Some(group) = cache.by_node.get(&key) {
                log_cached(method, &subject);
                return Ok(Some(group.clone()));
            }
            cache.generation
        };
        let request = v1::NodeGroupForNodeRequest {
            node: Some(v1::ExternalGrpcNode::from_node(node)),
        };
        let answer = self
            .caller
            .call(
                method,
                &subject,
                request,
                |mut client, request| async move { client.node_group_for_node(request).await },
            )
            .await?;
        // No group, or a group with id "": not autoscaled, and not kept (asked again next time).
        let Some(message) = answer.owning_group() else {
            return Ok(None);
        };
        let group = Arc::new(ExternalGrpcNodeGroup::from_message(
            message,
            method,
            self.caller.clone(),
            self.defaults.clone(),
        )?);
        let mut cache = self.lock_node_group_for_node();
        if cache.generation == generation {
            cache.by_node.insert(key, group.clone());
        }
        Ok(Some(group))
    }

    fn lock_node_group_for_node(&self) -> std::sync::MutexGuard<'_, NodeGroupForNodeCache> {
        // The cache holds no invariant a panicking holder could break: keep using it.
        self.node_group_for_node
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks for the GPU label and types until each has been answered once.
    async fn fetch_gpu_information(&self) {
        if self.gpu_label.get().is_none() {
            let answer = self
                .caller
                .call(
                    Method::GpuLabel,
                    &Subject::Provider,
                    v1::GpuLabelRequest {},
                    |mut client, request| async move { client.gpu_label(request).await },
                )
                .await;
            if let Ok(answer) = answer {
                // A concurrent refresh may have set it first; both answers are the service's.
                let _ = self.gpu_label.set(answer.label);
            }
        }
        if self.gpu_types.get().is_none() {
            let answer =
                self.caller
                    .call(
                        Method::GetAvailableGpuTypes,
                        &Subject::Provider,
                        v1::GetAvailableGpuTypesRequest {},
                        |mut client, request| async move {
                            client.get_available_gpu_types(request).await
                        },
                    )
                    .await;
            if let Ok(answer) = answer {
                let names = answer.type_names().map(str::to_string).collect();
                let _ = self.gpu_types.set(names);
            }
        }
    }
}

fn node_subject(node: &Node) -> Subject {
    Subject::Node {
        name: node.name.clone(),
        provider_id: node.provider_id.clone(),
    }
}

#[async_trait]
impl CloudProvider for ExternalGrpcProvider {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    /// The service's GPU label, once a refresh has fetched it; `""` before.
    fn gpu_label(&self) -> &str {
        self.gpu_label.get().map(String::as_str).unwrap_or("")
    }

    /// The service's GPU types, once a refresh has fetched them; empty before.
    fn available_gpu_types(&self) -> Vec<String> {
        self.gpu_types.get().cloned().unwrap_or_default()
    }

    /// Computed locally (docs/externalgrpc.md GRPC-29): a node has a GPU when it carries the GPU
    /// label or a non-zero allocatable amount of a known GPU resource. The type is the label's
    /// value; the resource is the first known GPU resource the node has, else `nvidia.com/gpu`.
    fn node_gpu_config(&self, node: &Node) -> Option<GpuConfig> {
        let label = self.gpu_label();
        let gpu_type = node.labels.get(label);
        let resource = GPU_RESOURCES
            .iter()
            .find(|name| node.allocatable.get(name) > 0);
        if gpu_type.is_none() && resource.is_none() {
            return None;
        }
        Some(GpuConfig {
            label: label.to_string(),
            gpu_type: gpu_type.cloned().unwrap_or_default(),
            resource_name: resource.unwrap_or(&GPU_RESOURCES[0]).to_string(),
        })
    }

    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        Ok(self
            .external_node_groups()
            .await?
            .into_iter()
            .map(|group| group as Arc<dyn NodeGroup>)
            .collect())
    }

    /// The group the service says owns `node`, or `None` when it must not be autoscaled. The
    /// object is built from the answer alone: it is not the one in the `node_groups` list.
    async fn node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        Ok(self
            .external_node_group_for_node(node)
            .await?
            .map(|group| group as Arc<dyn NodeGroup>))
    }

    /// `PricingNodePrice` for the hour from `start` (the price expander's template price). A
    /// server without pricing answers UNIMPLEMENTED, which is `NotImplemented` here.
    async fn node_price_per_hour(&self, node: &Node, start: Timestamp) -> Result<f64, CloudError> {
        self.node_price(node, start, start + std::time::Duration::from_secs(3600))
            .await
    }

    /// Empties the per-loop caches, sends `Refresh`, then fetches the GPU label and types if they
    /// are not known yet (their failures do not fail the refresh).
    async fn refresh(&self) -> Result<(), CloudError> {
        *self.node_groups.lock().await = None;
        {
            let mut cache = self.lock_node_group_for_node();
            cache.generation += 1;
            cache.by_node.clear();
        }
        self.caller
            .call(
                Method::Refresh,
                &Subject::Provider,
                v1::RefreshRequest {},
                |mut client, request| async move { client.refresh(request).await },
            )
            .await?;
        self.fetch_gpu_information().await;
        Ok(())
    }

    async fn cleanup(&self) -> Result<(), CloudError> {
        self.caller
            .call(
                Method::Cleanup,
                &Subject::Provider,
                v1::CleanupRequest {},
                |mut client, request| async move { client.cleanup(request).await },
            )
            .await?;
        Ok(())
    }
}
