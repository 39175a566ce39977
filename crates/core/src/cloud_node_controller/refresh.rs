//! How the loop's last provider refresh went, for the cloud node controller: a
//! [`CloudProvider`] that forwards every call to the provider it wraps and records each
//! `refresh`. The controller runs after the loop, on the answers of the loop's refresh; it must
//! know whether that refresh happened and succeeded, without refreshing a second time.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use ferroscale_model::{Node, Timestamp};

use crate::cloud::{CloudError, CloudProvider, GpuConfig, NodeGroup, PricingModel, ResourceLimits};

/// One `refresh` call and its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshRecord {
    /// Counts the refreshes since the wrapper was made, from 1.
    pub generation: u64,
    /// The provider's error when the refresh failed.
    pub result: Result<(), CloudError>,
}

/// A provider whose refreshes are recorded. Every method of [`CloudProvider`] is forwarded, the
/// optional ones included, so the wrapped provider behaves exactly as it does alone.
pub struct WatchedRefresh<P: CloudProvider + ?Sized> {
    inner: Arc<P>,
    last: Mutex<Option<RefreshRecord>>,
}

impl<P: CloudProvider + ?Sized> WatchedRefresh<P> {
    pub fn new(inner: Arc<P>) -> WatchedRefresh<P> {
        WatchedRefresh {
            inner,
            last: Mutex::new(None),
        }
    }

    /// The provider it wraps.
    pub fn inner(&self) -> &Arc<P> {
        &self.inner
    }

    /// The latest refresh; `None` before the first.
    pub fn last_refresh(&self) -> Option<RefreshRecord> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl<P: CloudProvider + ?Sized> CloudProvider for WatchedRefresh<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn gpu_label(&self) -> &str {
        self.inner.gpu_label()
    }

    fn available_gpu_types(&self) -> Vec<String> {
        self.inner.available_gpu_types()
    }

    fn node_gpu_config(&self, node: &Node) -> Option<GpuConfig> {
        self.inner.node_gpu_config(node)
    }

    fn resource_limits(&self) -> Result<Option<ResourceLimits>, CloudError> {
        self.inner.resource_limits()
    }

    fn pricing(&self) -> Result<Arc<dyn PricingModel>, CloudError> {
        self.inner.pricing()
    }

    async fn node_price_per_hour(&self, node: &Node, start: Timestamp) -> Result<f64, CloudError> {
        self.inner.node_price_per_hour(node, start).await
    }

    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        self.inner.node_groups().await
    }

    async fn node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        self.inner.node_group_for_node(node).await
    }

    async fn has_instance(&self, node: &Node) -> Result<bool, CloudError> {
        self.inner.has_instance(node).await
    }

    async fn scale_down_vetoes(&self, nodes: &[Arc<Node>]) -> HashSet<String> {
        self.inner.scale_down_vetoes(nodes).await
    }

    async fn refresh(&self) -> Result<(), CloudError> {
        let result = self.inner.refresh().await;
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = last.as_ref().map_or(0, |r| r.generation) + 1;
        *last = Some(RefreshRecord {
            generation,
            result: result.clone(),
        });
        result
    }

    async fn cleanup(&self) -> Result<(), CloudError> {
        self.inner.cleanup().await
    }
}
