//! The external (gRPC) expander in the loop (docs/grpc-expander.md): the loop asks the wired
//! service about the options the expanders before `grpc` left, scales the group it names, and
//! keeps every option for the next expander when the service fails.

mod loop_fakes;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ferroscale_core::autoscaler::{Autoscaler, EXTERNAL_EXPANDER_FAILED};
use ferroscale_core::options::{AutoscalingOptions, ExpanderName};
use ferroscale_core::scale_up::{ExpanderQuery, ExternalExpander, ExternalExpanderError};
use loop_fakes::*;

/// A service that records what it was asked and answers a fixed list, or fails.
struct FakeService {
    answer: Result<Vec<String>, String>,
    asked: Mutex<Vec<ExpanderQuery>>,
}

#[async_trait]
impl ExternalExpander for FakeService {
    async fn best_options(
        &self,
        query: &ExpanderQuery,
    ) -> Result<Vec<String>, ExternalExpanderError> {
        self.asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(query.clone());
        self.answer.clone().map_err(ExternalExpanderError)
    }
}

/// Two identical groups `a` and `b` (0..10, 4-core nodes) and two pending 3-CPU pods.
fn two_groups() -> (CallLog, FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("a", 0, 10);
    cloud.add_group("b", 0, 10);
    let cluster = FakeCluster::new(log.clone());
    for i in 0..2 {
        cluster.add_pod(pending_pod(&format!("p{i}"), 3000, t(0)));
    }
    (log, cloud, cluster)
}

fn grpc_options() -> AutoscalingOptions {
    AutoscalingOptions {
        expander: vec![ExpanderName::Grpc, ExpanderName::Random],
        grpc_expander_url: "expander:443".to_string(),
        grpc_expander_cert: "/ca.pem".to_string(),
        ..AutoscalingOptions::default()
    }
}

fn service(answer: Result<Vec<String>, String>) -> Arc<FakeService> {
    Arc::new(FakeService {
        answer,
        asked: Mutex::new(Vec::new()),
    })
}

/// docs/grpc-expander.md GX-101: the service is asked about both options, with their pods and
/// their groups' templates, and the group it names is the one scaled up, whatever the seed.
#[test]
fn the_loop_scales_the_group_the_service_names() {
    for seed in 0..4 {
        let (log, cloud, cluster) = two_groups();
        let fake = service(Ok(vec!["b".to_string()]));
        let mut autoscaler =
            Autoscaler::new(grpc_options(), seed).with_external_expander(fake.clone());
        run(&mut autoscaler, &cloud, &cluster, t(100));
        assert_eq!(
            calls(&log, "cloud.increase_size"),
            vec!["cloud.increase_size b 2"],
            "seed {seed}"
        );
        let asked = fake.asked.lock().unwrap_or_else(|e| e.into_inner());
        assert_eq!(asked.len(), 1, "one call per loop");
        let ids: Vec<&str> = asked[0]
            .options
            .iter()
            .map(|o| o.group_id.as_str())
            .collect();
        assert_eq!(ids, vec!["a", "b"]);
        assert!(
            asked[0]
                .options
                .iter()
                .all(|o| o.pods.len() == 2 && o.node_count == 2)
        );
        assert_eq!(
            asked[0].templates.keys().collect::<Vec<_>>(),
            vec!["a", "b"]
        );
    }
}

/// docs/grpc-expander.md GX-104: when the service fails, every option goes on to the next
/// expander, a scale-up still happens, and the status ConfigMap says the expander failed.
#[test]
fn a_failing_service_falls_back_to_the_next_expander() {
    let (log, cloud, cluster) = two_groups();
    let fake = service(Err("deadline exceeded after 5s".to_string()));
    let mut autoscaler = Autoscaler::new(grpc_options(), 1).with_external_expander(fake);
    run(&mut autoscaler, &cloud, &cluster, t(100));
    let increases = calls(&log, "cloud.increase_size");
    assert_eq!(increases.len(), 1, "{increases:?}");
    let failed = cluster.events_with(EXTERNAL_EXPANDER_FAILED);
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].message.contains("deadline exceeded after 5s"),
        "{}",
        failed[0].message
    );
}

/// docs/grpc-expander.md GX-104: an empty answer keeps no option: nothing is scaled up.
#[test]
fn an_empty_answer_scales_nothing() {
    let (log, cloud, cluster) = two_groups();
    let mut autoscaler =
        Autoscaler::new(grpc_options(), 1).with_external_expander(service(Ok(Vec::new())));
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
    assert!(calls(&log, "cloud.increase_size").is_empty());
    let plan = outcome.scale_up.expect("scale-up ran");
    assert_eq!(plan.pods_not_helped.len(), 2);
}

/// docs/grpc-expander.md GX-102: with a single option left before `grpc`, nothing is asked.
#[test]
fn a_single_option_is_not_sent() {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("a", 0, 10);
    let cluster = FakeCluster::new(log.clone());
    cluster.add_pod(pending_pod("p0", 3000, t(0)));
    let fake = service(Ok(Vec::new()));
    let mut autoscaler = Autoscaler::new(grpc_options(), 1).with_external_expander(fake.clone());
    run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size a 1"]
    );
    assert!(
        fake.asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    );
}
