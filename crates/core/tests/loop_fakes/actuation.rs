//! A `DeletionTracker` driven against the fakes: one group `pool` with the nodes a test names, and
//! the two calls the loop makes (start the deletions, advance them).

use std::sync::Arc;

use ferroscale_core::act::deletions::{
    ActuationProgress, DeletionTracker, EmptinessRecheck, NodeDeletion, RemovalKind,
};
use ferroscale_core::cloud::{CloudProvider, NodeGroup};
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::Timestamp;
use futures::executor::block_on;

use super::{CallLog, FakeCloud, FakeCluster, node};

pub struct ActuationFixture {
    pub log: CallLog,
    pub cloud: FakeCloud,
    pub cluster: FakeCluster,
    pub tracker: DeletionTracker,
    pub options: AutoscalingOptions,
}

impl ActuationFixture {
    /// One group `pool` (0–10 nodes) with the named nodes, each 4 CPUs and 16 GiB.
    pub fn with_nodes(names: &[&str]) -> ActuationFixture {
        let log = CallLog::default();
        let mut cloud = FakeCloud::new(log.clone());
        cloud.add_group("pool", 0, 10);
        let cluster = FakeCluster::new(log.clone());
        for name in names {
            let n = node(name, 4000, 16 << 30);
            cloud.add_instance("pool", &n);
            cluster.add_node(n);
        }
        ActuationFixture {
            log,
            cloud,
            cluster,
            tracker: DeletionTracker::new(),
            options: AutoscalingOptions::default(),
        }
    }

    /// A deletion of the named node of `pool`.
    pub fn request(&self, name: &str, kind: RemovalKind) -> NodeDeletion {
        NodeDeletion {
            node: Arc::new(self.cluster.node(name).expect("node exists")),
            group_id: "pool".into(),
            kind,
            zero_or_max: false,
            unready: false,
            utilization: 0.1,
            pods_to_reschedule: Vec::new(),
        }
    }

    pub fn start(&mut self, requests: Vec<NodeDeletion>, now: Timestamp) -> ActuationProgress {
        block_on(
            self.tracker
                .start(requests, &self.cluster, now, &self.options),
        )
    }

    /// Starts the deletion of one node.
    pub fn start_one(
        &mut self,
        name: &str,
        kind: RemovalKind,
        now: Timestamp,
    ) -> ActuationProgress {
        let request = self.request(name, kind);
        self.start(vec![request], now)
    }

    pub fn advance(&mut self, now: Timestamp) -> ActuationProgress {
        let groups: Vec<Arc<dyn NodeGroup>> =
            block_on(self.cloud.node_groups()).expect("fake groups");
        block_on(self.tracker.advance(
            &groups,
            &self.cluster,
            &EmptinessRecheck,
            now,
            &self.options,
        ))
    }
}
