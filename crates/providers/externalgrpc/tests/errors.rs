//! Failures a user has to diagnose: server errors carry the call, the group and the server's
//! code and message; answers the core cannot use (min > max, negative sizes, node bytes that are
//! not a Node, bad durations) are refused whole, named, and never kept; an unreachable service
//! fails each call; peers older than upstream 1.35 are still read.

mod support;

use std::sync::Arc;

use ferroscale_core::cloud::{CloudError, CloudProvider, NodeGroup};
use ferroscale_externalgrpc_proto::encode_node;
use ferroscale_externalgrpc_proto::v1::NodeGroupAutoscalingOptions;
use ferroscale_model::{Node, Resources};
use ferroscale_provider_externalgrpc::ExternalGrpcProvider;
use support::*;
use tonic::Status;

fn node(name: &str, provider_id: &str) -> Node {
    let mut node = Node::new(name, Resources::new(4000, 16 << 30));
    node.provider_id = provider_id.to_string();
    node
}

async fn setup() -> (Arc<FakeCloud>, RunningServer, ExternalGrpcProvider) {
    let mut script = Script {
        groups: vec![group("ng-1", 1, 10)],
        ..Script::default()
    };
    script.target_sizes.insert("ng-1".to_string(), 3);
    let cloud = FakeCloud::new(script);
    let server = serve_plain(cloud.clone()).await;
    let provider = plain_provider(server.address, "5s");
    (cloud, server, provider)
}

async fn ng1(provider: &ExternalGrpcProvider) -> Arc<dyn NodeGroup> {
    let groups = ok(provider.node_groups().await, "node groups");
    match groups.into_iter().next() {
        Some(group) => group,
        None => panic!("one group"),
    }
}

fn error_text<T: std::fmt::Debug>(result: Result<T, CloudError>) -> String {
    match result {
        Ok(value) => panic!("succeeded with {value:?}"),
        Err(error) => error.to_string(),
    }
}

#[tokio::test]
async fn a_server_error_names_the_call_the_group_the_code_and_the_message() {
    let (cloud, _server, provider) = setup().await;
    let group = ng1(&provider).await;
    cloud.script().failures.insert(
        "NodeGroupIncreaseSize",
        Status::unknown("max size of node group ng-1 reached"),
    );
    let text = error_text(group.increase_size(20).await);
    assert!(text.contains("NodeGroupIncreaseSize"), "{text}");
    assert!(text.contains("\"ng-1\""), "{text}");
    assert!(text.contains("status 2"), "{text}");
    assert!(
        text.contains("max size of node group ng-1 reached"),
        "{text}"
    );

    cloud
        .script()
        .failures
        .insert("NodeGroupForNode", Status::internal("lookup broke"));
    let text = error_text(
        provider
            .node_group_for_node(&node("node-x", "test:///x"))
            .await,
    );
    assert!(text.contains("NodeGroupForNode"), "{text}");
    assert!(
        text.contains("\"node-x\"") && text.contains("test:///x"),
        "{text}"
    );
    assert!(
        text.contains("status 13") && text.contains("lookup broke"),
        "{text}"
    );
}

#[tokio::test]
async fn a_server_that_answers_unavailable_is_unavailable_and_other_codes_are_provider_errors() {
    let (cloud, _server, provider) = setup().await;
    let group = ng1(&provider).await;
    cloud.script().failures.insert(
        "NodeGroupIncreaseSize",
        Status::unavailable("the cloud API is rate-limiting"),
    );
    let text = match group.increase_size(1).await {
        Err(CloudError::Unavailable(text)) => text,
        other => panic!("expected Unavailable, got {other:?}"),
    };
    assert!(text.contains("NodeGroupIncreaseSize"), "{text}");
    assert!(text.contains("\"ng-1\""), "{text}");
    assert!(text.contains("status 14"), "{text}");
    assert!(text.contains("the cloud API is rate-limiting"), "{text}");

    // A call cancelled under the client (it cancels none itself but at its deadline) is the
    // connection going, as when the server stops: unavailable too.
    cloud.script().failures.insert(
        "NodeGroupIncreaseSize",
        Status::cancelled("the server is shutting down"),
    );
    assert!(
        matches!(
            group.increase_size(1).await,
            Err(CloudError::Unavailable(text)) if text.contains("status 1 ")
        ),
        "a cancelled call"
    );

    // The codes around it keep their meaning: a failure of unknown kind, or the deadline.
    for status in [
        Status::unknown("quota exceeded"),
        Status::resource_exhausted("too many requests"),
    ] {
        cloud
            .script()
            .failures
            .insert("NodeGroupIncreaseSize", status.clone());
        assert!(
            matches!(group.increase_size(1).await, Err(CloudError::Provider(_))),
            "{status:?}"
        );
    }
}

#[tokio::test]
async fn a_group_with_min_above_max_fails_node_groups_whole_and_nothing_is_kept() {
    let (cloud, _server, provider) = setup().await;
    cloud.script().groups = vec![group("ng-1", 1, 10), group("ng-broken", 5, 3)];
    let text = error_text(provider.node_groups().await.map(|g| g.len()));
    assert!(text.contains("NodeGroups"), "{text}");
    assert!(text.contains("\"ng-broken\""), "{text}");
    assert!(
        text.contains("minSize 5 is greater than maxSize 3"),
        "{text}"
    );

    cloud.script().groups = vec![group("ng-1", 1, 10), group("ng-fixed", 3, 5)];
    assert_eq!(ok(provider.node_groups().await, "node groups").len(), 2);
    assert_eq!(cloud.calls("NodeGroups"), 2);
}

#[tokio::test]
async fn negative_bounds_are_refused_by_name() {
    let (cloud, _server, provider) = setup().await;
    cloud.script().groups = vec![group("ng-negative", -1, 3)];
    let text = error_text(provider.node_groups().await.map(|g| g.len()));
    assert!(
        text.contains("\"ng-negative\"") && text.contains("minSize -1"),
        "{text}"
    );
}

#[tokio::test]
async fn a_node_group_for_node_answer_with_min_above_max_is_an_error_and_not_kept() {
    let (cloud, _server, provider) = setup().await;
    let a = node("node-a", "test:///ng-1/a");
    cloud
        .script()
        .owner_by_provider_id
        .insert(a.provider_id.clone(), group("ng-1", 9, 2));
    let text = error_text(provider.node_group_for_node(&a).await.map(|g| g.is_some()));
    assert!(text.contains("NodeGroupForNode"), "{text}");
    assert!(
        text.contains("\"ng-1\"") && text.contains("minSize 9"),
        "{text}"
    );

    cloud
        .script()
        .owner_by_provider_id
        .insert(a.provider_id.clone(), group("ng-1", 1, 10));
    let owner = ok(provider.node_group_for_node(&a).await, "owner");
    assert_eq!(owner.map(|g| g.max_size()), Some(10));
    assert_eq!(cloud.calls("NodeGroupForNode"), 2);
}

#[tokio::test]
async fn a_negative_target_size_is_refused_by_name() {
    let (cloud, _server, provider) = setup().await;
    cloud.script().target_sizes.insert("ng-1".to_string(), -4);
    let group = ng1(&provider).await;
    let text = error_text(group.target_size().await);
    assert!(text.contains("NodeGroupTargetSize"), "{text}");
    assert!(text.contains("targetSize -4"), "{text}");
}

#[tokio::test]
async fn template_bytes_that_are_not_a_node_are_an_error_naming_the_group_and_not_kept() {
    let (cloud, _server, provider) = setup().await;
    let group = ng1(&provider).await;
    cloud.script().templates.insert(
        "ng-1".to_string(),
        TemplateAnswer::Bytes(vec![0x0a, 0xff, 0xff, 0x01]),
    );
    let text = error_text(group.template_node_info().await);
    assert!(text.contains("NodeGroupTemplateNodeInfo"), "{text}");
    assert!(text.contains("\"ng-1\""), "{text}");
    assert!(text.contains("not a valid protobuf"), "{text}");

    cloud.script().templates.insert(
        "ng-1".to_string(),
        TemplateAnswer::Bytes(encode_node(&Node::new("t", Resources::new(1000, 1 << 30)))),
    );
    let template = ok(group.template_node_info().await, "template");
    assert_eq!(template.node.name, "t");
    assert_eq!(cloud.calls("NodeGroupTemplateNodeInfo"), 2);
}

#[tokio::test]
async fn an_options_override_with_a_negative_duration_is_refused_naming_the_field() {
    let (cloud, _server, provider) = setup().await;
    let group = ng1(&provider).await;
    cloud.script().options.insert(
        "ng-1".to_string(),
        Some(NodeGroupAutoscalingOptions {
            scale_down_unready_duration: Some(prost_types::Duration {
                seconds: -30,
                nanos: 0,
            }),
            ..Default::default()
        }),
    );
    let text = error_text(group.get_options().await);
    assert!(text.contains("NodeGroupGetOptions"), "{text}");
    assert!(text.contains("scaleDownUnreadyDuration"), "{text}");
    assert!(text.contains("-30"), "{text}");
}

#[tokio::test]
async fn a_delta_beyond_the_wire_int32_is_refused_without_a_call() {
    let (cloud, _server, provider) = setup().await;
    let group = ng1(&provider).await;
    cloud.forget_calls();
    assert!(matches!(
        group.increase_size(usize::MAX).await,
        Err(CloudError::InvalidRequest(text)) if text.contains("NodeGroupIncreaseSize")
    ));
    assert!(matches!(
        group.decrease_target_size(i64::MIN).await,
        Err(CloudError::InvalidRequest(text)) if text.contains("NodeGroupDecreaseTargetSize")
    ));
    assert_eq!(cloud.total_calls(), 0);
}

#[tokio::test]
async fn an_unreachable_address_fails_each_call_with_unavailable_naming_the_call() {
    let address = {
        let listener = ok(std::net::TcpListener::bind(loopback()), "binding a port");
        ok(listener.local_addr(), "reading its address")
    };
    let provider = plain_provider(address, "2s");
    let text = match provider.node_groups().await.map(|g| g.len()) {
        Err(CloudError::Unavailable(text)) => text,
        other => panic!("expected Unavailable, got {other:?}"),
    };
    assert!(text.contains("externalgrpc NodeGroups"), "{text}");
    assert!(text.contains("status 14"), "{text}");
    let text = error_text(provider.cleanup().await);
    assert!(text.contains("externalgrpc Cleanup"), "{text}");
}

#[tokio::test]
async fn a_template_from_a_server_older_than_1_35_is_read_from_its_old_field() {
    let (cloud, _server, provider) = setup().await;
    let group = ng1(&provider).await;
    cloud.script().templates.insert(
        "ng-1".to_string(),
        TemplateAnswer::LegacyBytes(encode_node(&Node::new(
            "old",
            Resources::new(1000, 1 << 30),
        ))),
    );
    let template = ok(group.template_node_info().await, "template");
    assert_eq!(template.node.name, "old");
}
