//! The simulated cloud of a scenario, served live rather than replayed: the scenario's node groups
//! and templates, with sizes that move as a client asks and instances that become Running after
//! their group's provisioning delay in wall-clock time. `ferroscale serve-provider --provider=sim`
//! puts it behind the externalgrpc service, so an externalgrpc client (Ferroscale's or upstream's)
//! has a cloud to drive without a cluster or an account.
//!
//! There is no cluster behind it: no Node objects are registered, only instances. Time comes from
//! the caller (`now`), read at every `refresh`.

use std::sync::Arc;

use async_trait::async_trait;
use ferroscale_core::cloud::{
    CloudError, CloudProvider, GpuConfig, NodeGroup, PricingModel, ResourceLimits,
};
use ferroscale_model::{Node, Timestamp};
use ferroscale_objects::K8sObject;

use crate::clock::SimClock;
use crate::cloud::{SimulatedCloud, SimulatedProvider};
use crate::runner::group_specs;
use crate::scenario::Scenario;

/// A [`SimulatedProvider`] whose clock follows `now` at every `refresh`.
pub struct ServedSimulation {
    provider: SimulatedProvider,
    now: Arc<dyn Fn() -> Timestamp + Send + Sync>,
}

impl ServedSimulation {
    /// The scenario's groups at their initial sizes, Running from `now()` on.
    pub fn new(
        scenario: &Scenario,
        now: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    ) -> ServedSimulation {
        let clock = SimClock::new(now());
        let daemonsets = scenario
            .objects
            .iter()
            .filter_map(|object| match object {
                K8sObject::DaemonSet(daemonset) => Some(daemonset.clone()),
                _ => None,
            })
            .collect();
        let cloud = Arc::new(SimulatedCloud::new(
            clock.clone(),
            group_specs(scenario),
            daemonsets,
        ));
        cloud.provision(clock.now());
        ServedSimulation {
            provider: SimulatedProvider::new(cloud),
            now,
        }
    }

    pub fn cloud(&self) -> &Arc<SimulatedCloud> {
        self.provider.cloud()
    }
}

#[async_trait]
impl CloudProvider for ServedSimulation {
    fn name(&self) -> &str {
        self.provider.name()
    }

    fn gpu_label(&self) -> &str {
        self.provider.gpu_label()
    }

    fn available_gpu_types(&self) -> Vec<String> {
        self.provider.available_gpu_types()
    }

    fn node_gpu_config(&self, node: &Node) -> Option<GpuConfig> {
        self.provider.node_gpu_config(node)
    }

    fn resource_limits(&self) -> Result<Option<ResourceLimits>, CloudError> {
        self.provider.resource_limits()
    }

    fn pricing(&self) -> Result<Arc<dyn PricingModel>, CloudError> {
        self.provider.pricing()
    }

    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        self.provider.node_groups().await
    }

    async fn node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        self.provider.node_group_for_node(node).await
    }

    async fn has_instance(&self, node: &Node) -> Result<bool, CloudError> {
        self.provider.has_instance(node).await
    }

    /// Moves the clock to now; instances whose provisioning delay has passed become Running.
    async fn refresh(&self) -> Result<(), CloudError> {
        let now = (self.now)();
        let cloud = self.provider.cloud();
        if now > cloud.clock().now() {
            cloud.clock().advance_to(now);
        }
        cloud.provision(cloud.clock().now());
        self.provider.refresh().await
    }

    async fn cleanup(&self) -> Result<(), CloudError> {
        self.provider.cleanup().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_core::cloud::InstanceState;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::time::Duration;

    const SCENARIO: &str = r#"
apiVersion: ferroscale/v1alpha1
kind: Scenario
name: served
duration: 1h
nodeGroups:
  - id: pool
    minSize: 0
    maxSize: 5
    initialSize: 1
    provisioningDelay: 60s
    template:
      status:
        capacity: {cpu: "4", memory: 16Gi, pods: "110"}
        allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
"#;

    #[test]
    fn sizes_move_as_asked_and_instances_run_after_the_delay_in_caller_time() {
        let scenario =
            crate::scenario::parse_scenario(SCENARIO, "served.yaml", std::path::Path::new("."))
                .expect("scenario parses");
        let clock = Arc::new(AtomicI64::new(1_000_000));
        let now = {
            let clock = clock.clone();
            Arc::new(move || Timestamp(clock.load(Ordering::SeqCst)))
        };
        let served = ServedSimulation::new(&scenario, now);
        futures::executor::block_on(async {
            let groups = served.node_groups().await.expect("groups");
            let pool = groups.first().expect("one group");
            assert_eq!(pool.id(), "pool");
            assert_eq!(pool.target_size().await.expect("size"), 1);
            pool.increase_size(2).await.expect("increase");
            assert_eq!(pool.target_size().await.expect("size"), 3);

            let running = |instances: Vec<ferroscale_core::cloud::Instance>| {
                instances
                    .iter()
                    .filter(|i| {
                        i.status
                            .as_ref()
                            .is_some_and(|s| s.state == InstanceState::Running)
                    })
                    .count()
            };
            served.refresh().await.expect("refresh");
            assert_eq!(running(pool.nodes().await.expect("nodes")), 1);
            clock.fetch_add(
                i64::try_from(Duration::from_secs(61).as_millis()).expect("millis"),
                Ordering::SeqCst,
            );
            served.refresh().await.expect("refresh");
            assert_eq!(running(pool.nodes().await.expect("nodes")), 3);
        });
    }
}
