//! Provider calls that fail while gathering do not stop the loop, and do not vanish either: each
//! is in the outcome, typed (which call, about what, the error), for the binary to log and count.

mod loop_fakes;

use std::collections::BTreeSet;

use ferroscale_core::autoscaler::{Autoscaler, GatherCall, GatherSubject};
use ferroscale_core::cloud::CloudError;
use ferroscale_core::options::AutoscalingOptions;
use loop_fakes::*;

/// Groups `pool` (one node, `n0`), `spare` and `other` (no nodes), and a node `outsider` that is
/// no group's instance, so it is looked up with NodeGroupForNode.
fn three_groups() -> (FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("pool", 0, 10);
    cloud.add_group("spare", 0, 10);
    cloud.add_group("other", 0, 10);
    let cluster = FakeCluster::new(log);
    let n0 = node("n0", 4000, 16 << 30);
    cloud.add_instance("pool", &n0);
    cluster.add_node(n0);
    let mut outsider = node("outsider", 4000, 16 << 30);
    outsider.provider_id = "elsewhere://outsider".into();
    cluster.add_node(outsider);
    (cloud, cluster)
}

fn price_expander() -> AutoscalingOptions {
    let mut options = AutoscalingOptions::default();
    options.set("expander", "price").expect("expander flag");
    options
}

#[test]
fn every_failed_gather_call_is_in_the_outcome_and_the_loop_goes_on() {
    let (cloud, cluster) = three_groups();
    cloud
        .group("pool")
        .failing
        .lock()
        .unwrap()
        .extend(["target_size", "get_options"]);
    cloud
        .group("spare")
        .failing
        .lock()
        .unwrap()
        .insert("template_node_info");
    cloud.group("other").failing.lock().unwrap().insert("nodes");
    cloud.failing.lock().unwrap().extend([
        "node_group_for_node",
        "resource_limits",
        "node_price_per_hour",
    ]);
    let mut autoscaler = Autoscaler::new(price_expander(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000));

    assert_eq!(outcome.error, None, "no gather failure ends the iteration");
    assert!(outcome.scale_up.is_some() && outcome.scale_down.is_some());
    let group = |id: &str| GatherSubject::Group(id.to_string());
    let failed: BTreeSet<(GatherCall, String)> = outcome
        .gather_failures
        .iter()
        .map(|f| (f.call, f.subject.to_string()))
        .collect();
    let expected: BTreeSet<(GatherCall, String)> = [
        (GatherCall::TargetSize, group("pool")),
        (GatherCall::GetOptions, group("pool")),
        (GatherCall::TemplateNodeInfo, group("spare")),
        (GatherCall::Nodes, group("other")),
        // `other` has a template (its provider's), so it is priced; `spare` has none.
        (GatherCall::NodePrice, group("pool")),
        (GatherCall::NodePrice, group("other")),
        (
            GatherCall::NodeGroupForNode,
            GatherSubject::Node("outsider".into()),
        ),
        (GatherCall::ResourceLimits, GatherSubject::Provider),
    ]
    .into_iter()
    .map(|(call, subject)| (call, subject.to_string()))
    .collect();
    assert_eq!(failed, expected);
    assert_eq!(outcome.gather_failures.len(), expected.len());
    assert!(
        outcome.gather_failures.iter().all(
            |f| matches!(&f.error, CloudError::Provider(message) if message.contains("timed out"))
        ),
        "each failure keeps the provider's error: {:?}",
        outcome.gather_failures
    );
    let target = outcome
        .gather_failures
        .iter()
        .find(|f| f.call == GatherCall::TargetSize)
        .expect("the TargetSize failure");
    assert_eq!(
        target.to_string(),
        "TargetSize for node group pool failed: cloud provider error: target_size of pool timed out"
    );
    let pool = outcome
        .node_groups
        .iter()
        .find(|g| g.id == "pool")
        .expect("pool is still gathered");
    assert!(
        !pool.healthy,
        "a group without a target is not ready for scale-up"
    );
}

/// Optional calls a provider does not offer ("not implemented") are answers, not failures.
#[test]
fn calls_a_provider_does_not_implement_are_not_failures() {
    let (cloud, cluster) = three_groups();
    let mut autoscaler = Autoscaler::new(price_expander(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000));
    assert_eq!(outcome.gather_failures, Vec::new());
}
