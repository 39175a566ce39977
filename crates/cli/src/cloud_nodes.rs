//! `ferroscale run --cloud-node-controller`: the wiring of the cloud node controller
//! (docs/cloud-node-controller.md). The provider is wrapped so that the loop's refresh is
//! recorded; after each iteration the leader runs one pass of
//! `ferroscale_core::cloud_node_controller::CloudNodeController` on that refresh and the pass is
//! logged here. Every rule is in the core crate.

use std::sync::Arc;

use ferroscale_core::AutoscalingOptions;
use ferroscale_core::cloud::CloudProvider;
use ferroscale_core::cloud_node_controller::{
    ActionOutcome, CloudNodeController, CloudNodeOutcome, NodeObjectApi, WatchedRefresh,
};
use ferroscale_core::kubernetes::ClusterApi;
use ferroscale_model::time::format_duration;

use crate::flags::CloudProviderKind;

/// The loop's provider with its refreshes recorded.
pub type WatchedProvider = WatchedRefresh<dyn CloudProvider>;

/// What the controller works with, besides the loop's provider and cluster.
pub struct CloudNodes<'a> {
    /// The loop's provider, whose refreshes are recorded.
    pub refresh: &'a WatchedProvider,
    pub writes: &'a dyn NodeObjectApi,
}

/// Wraps the provider when the option is on (the loop then uses the wrapper), and says at start
/// what the controller will do, warning where another component already does it.
pub fn watch_refreshes(
    provider: Arc<dyn CloudProvider>,
    options: &AutoscalingOptions,
    kind: CloudProviderKind,
) -> (Arc<dyn CloudProvider>, Option<Arc<WatchedProvider>>) {
    if !options.cloud_node_controller {
        return (provider, None);
    }
    tracing::info!(
        grace_period = %format_duration(options.cloud_node_removal_grace_period),
        "cloud node controller on: the leader initializes Nodes carrying the \
         node.cloudprovider.kubernetes.io/uninitialized taint and deletes Nodes whose instance \
         has left its node group"
    );
    match kind {
        CloudProviderKind::ClusterApi => tracing::warn!(
            "--cloud-node-controller with --cloud-provider=clusterapi: the Cluster API \
             controllers already delete the Node of a deleted Machine, and clusters built with \
             them run a cloud-controller-manager; the option should stay off \
             (docs/cloud-node-controller.md)"
        ),
        CloudProviderKind::Exoscale => tracing::warn!(
            "--cloud-node-controller with --cloud-provider=exoscale: SKS clusters run Exoscale's \
             cloud-controller-manager, which already does this; keep the option off unless \
             the Instance Pools have none (docs/cloud-node-controller.md)"
        ),
        CloudProviderKind::Kwok | CloudProviderKind::ExternalGrpc => {}
    }
    let watched = Arc::new(WatchedRefresh::new(provider));
    (watched.clone(), Some(watched))
}

/// One pass after an iteration, logged.
pub async fn pass(
    controller: &mut CloudNodeController,
    parts: &CloudNodes<'_>,
    cluster: &dyn ClusterApi,
    now: ferroscale_model::Timestamp,
    options: &AutoscalingOptions,
) {
    let outcome = controller
        .run_once(
            parts.refresh,
            parts.refresh.last_refresh(),
            cluster,
            parts.writes,
            now,
            options,
        )
        .await;
    log(&outcome);
}

/// `--v=1` the writes and what kept a planned one from happening, `--v=5` the waiting.
fn log(outcome: &CloudNodeOutcome) {
    if let Some(reason) = &outcome.skipped {
        tracing::debug!(%reason, "cloud node controller: nothing decided this pass");
        return;
    }
    if let Some(held) = &outcome.plan.deletions_held {
        tracing::info!(
            failures = %held,
            "cloud node controller: no Node is deleted while the provider's answers fail"
        );
    }
    let would = if outcome.dry_run {
        "dry run: would have "
    } else {
        ""
    };
    for action in &outcome.actions {
        match action {
            ActionOutcome::Initialized {
                node,
                group,
                labels,
                kept,
            } => tracing::info!(
                %node,
                %group,
                labels = ?labels,
                kept = ?kept,
                "cloud node controller: {would}initialized the node from its group's template"
            ),
            ActionOutcome::Deleted {
                node,
                group,
                provider_id,
            } => tracing::info!(
                %node,
                %group,
                %provider_id,
                "cloud node controller: {would}deleted the Node: its instance is gone"
            ),
            ActionOutcome::Skipped { node, reason, .. } => {
                tracing::info!(%node, %reason, "cloud node controller: node left as it is")
            }
            ActionOutcome::Failed { node, error, .. } => {
                tracing::warn!(%node, %error, "cloud node controller: write failed; tried again next pass")
            }
        }
    }
    for waiting in &outcome.plan.waiting {
        tracing::debug!(
            node = %waiting.node,
            group = %waiting.group,
            refreshes = waiting.streak.passes,
            gone_for = %format_duration(outcome.now.since(waiting.streak.since)),
            "cloud node controller: the node's instance is gone; waiting before deleting the Node"
        );
    }
}
