//! Every caching rule of docs/externalgrpc.md (GRPC-05–GRPC-09), checked by counting the calls that
//! reach a test double over a loopback socket across refresh cycles.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ferroscale_core::cloud::{CloudProvider, NodeGroup};
use ferroscale_externalgrpc_proto::encode_node;
use ferroscale_model::{Node, Resources, Timestamp};
use ferroscale_provider_externalgrpc::ExternalGrpcProvider;
use support::*;
use tonic::Status;

fn node(name: &str, provider_id: &str) -> Node {
    let mut node = Node::new(name, Resources::new(4000, 16 << 30));
    node.provider_id = provider_id.to_string();
    node
}

fn template_bytes(name: &str) -> Vec<u8> {
    encode_node(&Node::new(name, Resources::new(2000, 8 << 30)))
}

/// Two groups; nodes with providerID `test:///ng-1/...` belong to ng-1.
fn cloud() -> Arc<FakeCloud> {
    let mut script = Script {
        groups: vec![group("ng-1", 1, 10), group("ng-2", 0, 5)],
        gpu_label: "cloud.example/gpu".to_string(),
        gpu_types: vec!["t4".to_string(), "a100".to_string()],
        ..Script::default()
    };
    script
        .owner_by_provider_id
        .insert("test:///ng-1/a".to_string(), group("ng-1", 1, 10));
    script
        .owner_by_provider_id
        .insert("test:///ng-1/b".to_string(), group("ng-1", 1, 10));
    script.templates.insert(
        "ng-1".to_string(),
        TemplateAnswer::Bytes(template_bytes("t-1")),
    );
    script.target_sizes.insert("ng-1".to_string(), 2);
    script.options.insert("ng-1".to_string(), None);
    script.node_price = Some(1.5);
    script.pod_price = Some(0.5);
    FakeCloud::new(script)
}

async fn setup() -> (Arc<FakeCloud>, RunningServer, ExternalGrpcProvider) {
    let cloud = cloud();
    let server = serve_plain(cloud.clone()).await;
    let provider = plain_provider(server.address, "5s");
    (cloud, server, provider)
}

async fn groups(provider: &ExternalGrpcProvider) -> Vec<Arc<dyn NodeGroup>> {
    ok(provider.node_groups().await, "node groups")
}

async fn refresh(provider: &ExternalGrpcProvider) {
    ok(provider.refresh().await, "refresh");
}

async fn owner(provider: &ExternalGrpcProvider, node: &Node) -> Option<Arc<dyn NodeGroup>> {
    ok(
        provider.node_group_for_node(node).await,
        "node group for node",
    )
}

fn first(groups: &[Arc<dyn NodeGroup>]) -> Arc<dyn NodeGroup> {
    match groups.first() {
        Some(group) => group.clone(),
        None => panic!("no group"),
    }
}

#[tokio::test]
async fn the_node_group_list_is_asked_once_per_refresh_cycle() {
    let (cloud, _server, provider) = setup().await;
    for cycle in 1..=3 {
        refresh(&provider).await;
        let a = groups(&provider).await;
        let b = groups(&provider).await;
        let c = groups(&provider).await;
        assert_eq!(cloud.calls("NodeGroups"), cycle);
        assert_eq!(a.len(), 2);
        // The same objects within a cycle, so their template caches are shared.
        assert!(Arc::ptr_eq(&first(&a), &first(&b)) && Arc::ptr_eq(&first(&b), &first(&c)));
    }
}

#[tokio::test]
async fn new_node_group_objects_are_built_after_each_refresh_and_old_ones_keep_their_values() {
    let (cloud, _server, provider) = setup().await;
    let before = first(&groups(&provider).await);
    cloud.script().groups = vec![group("ng-1", 2, 20)];
    refresh(&provider).await;
    let after = first(&groups(&provider).await);
    assert!(!Arc::ptr_eq(&before, &after));
    assert_eq!((before.min_size(), before.max_size()), (1, 10));
    assert_eq!((after.min_size(), after.max_size()), (2, 20));
    assert_eq!(after.debug(), "ng-1 (2..20)");
}

#[tokio::test]
async fn concurrent_callers_share_one_node_groups_call() {
    let (cloud, _server, provider) = setup().await;
    cloud
        .script()
        .delays
        .insert("NodeGroups", Duration::from_millis(200));
    let provider = Arc::new(provider);
    let callers: Vec<_> = (0..5)
        .map(|_| {
            let provider = provider.clone();
            tokio::spawn(async move { provider.node_groups().await.map(|g| g.len()) })
        })
        .collect();
    for caller in callers {
        assert_eq!(ok(ok(caller.await, "joining"), "node groups"), 2);
    }
    assert_eq!(cloud.calls("NodeGroups"), 1);
}

#[tokio::test]
async fn a_failed_node_groups_call_is_not_kept_and_the_next_call_asks_again() {
    let (cloud, _server, provider) = setup().await;
    cloud
        .script()
        .failures
        .insert("NodeGroups", Status::unavailable("reloading"));
    assert!(provider.node_groups().await.is_err());
    assert!(provider.node_groups().await.is_err());
    assert_eq!(cloud.calls("NodeGroups"), 2);
    cloud.script().failures.clear();
    assert_eq!(groups(&provider).await.len(), 2);
    assert_eq!(groups(&provider).await.len(), 2);
    assert_eq!(cloud.calls("NodeGroups"), 3);
}

#[tokio::test]
async fn an_empty_node_group_list_is_kept_like_any_other() {
    let (cloud, _server, provider) = setup().await;
    cloud.script().groups.clear();
    assert!(groups(&provider).await.is_empty());
    assert!(groups(&provider).await.is_empty());
    assert_eq!(cloud.calls("NodeGroups"), 1);
}

#[tokio::test]
async fn node_to_group_answers_are_kept_per_name_and_provider_id_until_refresh() {
    let (cloud, _server, provider) = setup().await;
    let a = node("node-a", "test:///ng-1/a");
    let first_answer = owner(&provider, &a).await;
    let second_answer = owner(&provider, &a).await;
    assert_eq!(cloud.calls("NodeGroupForNode"), 1);
    match (first_answer, second_answer) {
        (Some(x), Some(y)) => assert!(Arc::ptr_eq(&x, &y)),
        other => panic!("expected ng-1 twice, got {other:?}"),
    }
    // Another node, and the same name with another providerID, are other entries.
    owner(&provider, &node("node-b", "test:///ng-1/b")).await;
    owner(&provider, &node("node-a", "test:///ng-1/b")).await;
    assert_eq!(cloud.calls("NodeGroupForNode"), 3);

    refresh(&provider).await;
    owner(&provider, &a).await;
    owner(&provider, &a).await;
    assert_eq!(cloud.calls("NodeGroupForNode"), 4);
}

#[tokio::test]
async fn not_autoscaled_answers_are_asked_again_every_time_in_both_forms() {
    let (cloud, _server, provider) = setup().await;
    let outsider = node("control-plane", "test:///elsewhere/cp");
    for form in [NotAutoscaledAnswer::EmptyGroup, NotAutoscaledAnswer::Absent] {
        cloud.forget_calls();
        cloud.script().not_autoscaled = Some(form);
        assert!(owner(&provider, &outsider).await.is_none());
        assert!(owner(&provider, &outsider).await.is_none());
        assert_eq!(cloud.calls("NodeGroupForNode"), 2, "{form:?}");
    }
}

#[tokio::test]
async fn node_to_group_errors_are_not_kept() {
    let (cloud, _server, provider) = setup().await;
    let a = node("node-a", "test:///ng-1/a");
    cloud
        .script()
        .failures
        .insert("NodeGroupForNode", Status::internal("lookup failed"));
    assert!(provider.node_group_for_node(&a).await.is_err());
    cloud.script().failures.clear();
    assert!(owner(&provider, &a).await.is_some());
    assert!(owner(&provider, &a).await.is_some());
    assert_eq!(cloud.calls("NodeGroupForNode"), 2);
}

#[tokio::test]
async fn the_group_of_a_node_is_its_own_object_with_its_own_template_cache() {
    let (cloud, _server, provider) = setup().await;
    let listed = first(&groups(&provider).await);
    let owning = owner(&provider, &node("node-a", "test:///ng-1/a"))
        .await
        .unwrap_or_else(|| panic!("node-a is in ng-1"));
    assert_eq!(owning.id(), listed.id());
    assert!(!Arc::ptr_eq(&owning, &listed));
    ok(
        listed.template_node_info().await,
        "template of the listed group",
    );
    ok(
        owning.template_node_info().await,
        "template of the node's group",
    );
    ok(
        owning.template_node_info().await,
        "template of the node's group",
    );
    assert_eq!(cloud.calls("NodeGroupTemplateNodeInfo"), 2);
}

#[tokio::test]
async fn refresh_empties_both_per_loop_caches_before_its_call_even_when_it_fails() {
    let (cloud, _server, provider) = setup().await;
    let a = node("node-a", "test:///ng-1/a");
    groups(&provider).await;
    owner(&provider, &a).await;
    cloud
        .script()
        .failures
        .insert("Refresh", Status::unavailable("down"));
    assert!(provider.refresh().await.is_err());
    cloud.script().failures.clear();
    groups(&provider).await;
    owner(&provider, &a).await;
    assert_eq!(cloud.calls("NodeGroups"), 2);
    assert_eq!(cloud.calls("NodeGroupForNode"), 2);
}

#[tokio::test]
async fn an_answer_that_arrives_after_a_refresh_is_not_kept() {
    let (cloud, _server, provider) = setup().await;
    let provider = Arc::new(provider);
    let a = node("node-a", "test:///ng-1/a");
    cloud
        .script()
        .delays
        .insert("NodeGroupForNode", Duration::from_millis(300));
    let lookup = {
        let provider = provider.clone();
        let a = a.clone();
        tokio::spawn(async move { provider.node_group_for_node(&a).await.map(|g| g.is_some()) })
    };
    // Let the lookup reach the server, then start a new loop while it waits.
    while cloud.calls("NodeGroupForNode") == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    refresh(&provider).await;
    assert!(ok(ok(lookup.await, "joining"), "lookup"));
    cloud.script().delays.clear();
    owner(&provider, &a).await;
    assert_eq!(cloud.calls("NodeGroupForNode"), 2);
}

#[tokio::test]
async fn gpu_label_and_types_are_asked_until_the_first_success_and_never_again() {
    let (cloud, _server, provider) = setup().await;
    assert_eq!(provider.gpu_label(), "");
    assert!(provider.available_gpu_types().is_empty());

    cloud
        .script()
        .failures
        .insert("GPULabel", Status::unavailable("starting"));
    cloud
        .script()
        .failures
        .insert("GetAvailableGPUTypes", Status::unavailable("starting"));
    refresh(&provider).await;
    assert_eq!(provider.gpu_label(), "");
    assert!(provider.available_gpu_types().is_empty());

    cloud.script().failures.clear();
    for _ in 0..3 {
        refresh(&provider).await;
        assert_eq!(provider.gpu_label(), "cloud.example/gpu");
        // Keys only, whatever the values hold.
        assert_eq!(provider.available_gpu_types(), ["a100", "t4"]);
    }
    assert_eq!(cloud.calls("Refresh"), 4);
    assert_eq!(cloud.calls("GPULabel"), 2);
    assert_eq!(cloud.calls("GetAvailableGPUTypes"), 2);

    // The service changing its answer later is never seen.
    cloud.script().gpu_label = "other".to_string();
    refresh(&provider).await;
    assert_eq!(provider.gpu_label(), "cloud.example/gpu");
}

#[tokio::test]
async fn an_empty_gpu_label_and_an_empty_type_set_are_kept_too() {
    let (cloud, _server, provider) = setup().await;
    cloud.script().gpu_label.clear();
    cloud.script().gpu_types.clear();
    refresh(&provider).await;
    refresh(&provider).await;
    assert_eq!(provider.gpu_label(), "");
    assert!(provider.available_gpu_types().is_empty());
    assert_eq!(cloud.calls("GPULabel"), 1);
    assert_eq!(cloud.calls("GetAvailableGPUTypes"), 1);
}

#[tokio::test]
async fn bounds_and_debug_are_those_of_the_message_the_object_was_built_from() {
    let (cloud, _server, provider) = setup().await;
    let listed = first(&groups(&provider).await);
    let owning = owner(&provider, &node("node-a", "test:///ng-1/a"))
        .await
        .unwrap_or_else(|| panic!("node-a is in ng-1"));
    {
        let mut script = cloud.script();
        script.groups = vec![group("ng-1", 3, 4)];
        script
            .owner_by_provider_id
            .insert("test:///ng-1/a".to_string(), group("ng-1", 3, 4));
    }
    for _ in 0..3 {
        for object in [&listed, &owning] {
            assert_eq!(object.min_size(), 1);
            assert_eq!(object.max_size(), 10);
            assert_eq!(object.debug(), "ng-1 (1..10)");
        }
    }
}

#[tokio::test]
async fn a_template_is_asked_once_per_object_and_failures_are_asked_again() {
    let (cloud, _server, provider) = setup().await;
    let ng1 = first(&groups(&provider).await);

    cloud
        .script()
        .failures
        .insert("NodeGroupTemplateNodeInfo", Status::unavailable("busy"));
    assert!(ng1.template_node_info().await.is_err());
    cloud.script().failures.clear();
    let template = ok(ng1.template_node_info().await, "template");
    assert_eq!(template.node.name, "t-1");
    assert!(template.pods.is_empty());
    // The service changes its template: this object keeps the first one.
    cloud.script().templates.insert(
        "ng-1".to_string(),
        TemplateAnswer::Bytes(template_bytes("t-2")),
    );
    for _ in 0..3 {
        assert_eq!(
            ok(ng1.template_node_info().await, "template").node.name,
            "t-1"
        );
    }
    assert_eq!(cloud.calls("NodeGroupTemplateNodeInfo"), 2);

    // A new object after refresh asks again.
    refresh(&provider).await;
    let renewed = first(&groups(&provider).await);
    assert_eq!(
        ok(renewed.template_node_info().await, "template").node.name,
        "t-2"
    );
    assert_eq!(cloud.calls("NodeGroupTemplateNodeInfo"), 3);
}

#[tokio::test]
async fn a_template_not_implemented_is_asked_again() {
    let (cloud, _server, provider) = setup().await;
    let listed = groups(&provider).await;
    let ng2 = listed
        .iter()
        .find(|g| g.id() == "ng-2")
        .cloned()
        .unwrap_or_else(|| panic!("ng-2 listed"));
    for _ in 0..3 {
        assert!(matches!(
            ng2.template_node_info().await,
            Err(e) if e.is_not_implemented()
        ));
    }
    assert_eq!(cloud.calls("NodeGroupTemplateNodeInfo"), 3);
}

#[tokio::test]
async fn nothing_else_is_cached() {
    let (cloud, _server, provider) = setup().await;
    let ng1 = first(&groups(&provider).await);
    let a = node("node-a", "test:///ng-1/a");
    let pod = ferroscale_model::Pod::new("default", "web-0");
    let (start, end) = (Timestamp::from_secs(1000), Timestamp::from_secs(4600));
    for _ in 0..2 {
        ok(ng1.target_size().await, "target size");
        ok(ng1.nodes().await, "nodes");
        ok(ng1.get_options().await, "options");
        ok(ng1.increase_size(1).await, "increase");
        ok(ng1.decrease_target_size(-1).await, "decrease");
        ok(ng1.delete_nodes(std::slice::from_ref(&a)).await, "delete");
        ok(provider.node_price(&a, start, end).await, "node price");
        ok(provider.pod_price(&pod, start, end).await, "pod price");
        ok(provider.cleanup().await, "cleanup");
    }
    for method in [
        "NodeGroupTargetSize",
        "NodeGroupNodes",
        "NodeGroupGetOptions",
        "NodeGroupIncreaseSize",
        "NodeGroupDecreaseTargetSize",
        "NodeGroupDeleteNodes",
        "PricingNodePrice",
        "PricingPodPrice",
        "Cleanup",
    ] {
        assert_eq!(cloud.calls(method), 2, "{method}");
    }
}
