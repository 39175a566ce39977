//! The client statements of docs/externalgrpc.md (GRPC-01–GRPC-16), one test per statement,
//! named by its number (`c12_` checks GRPC-12), against a test double over a loopback socket. Where
//! this provider deliberately differs from upstream (crate docs, "Where this provider differs"),
//! the test says so and checks the ferroscale behaviour.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_core::cloud::{
    CloudError, CloudProvider, ErrorClass, InstanceErrorInfo, InstanceState, InstanceStatus,
    NodeGroup,
};
use ferroscale_externalgrpc_proto::v1::{
    Instance as WireInstance, InstanceErrorInfo as WireErrorInfo,
    InstanceStatus as WireInstanceStatus, LegacyKubernetesDuration, NodeGroupAutoscalingOptions,
};
use ferroscale_externalgrpc_proto::{decode_pod, encode_node};
use ferroscale_model::{Node, Pod, Resources, Timestamp};
use ferroscale_provider_externalgrpc::{
    ConfigError, ExternalGrpcError, ExternalGrpcProvider, NodeGroupDefaults,
};
use prost::Message;
use support::*;
use tonic::Status;

fn node(name: &str, provider_id: &str) -> Node {
    let mut node = Node::new(name, Resources::new(4000, 16 << 30));
    node.provider_id = provider_id.to_string();
    node
}

fn cloud() -> Arc<FakeCloud> {
    let mut script = Script {
        groups: vec![group("ng-1", 1, 10)],
        gpu_label: "cloud.example/gpu".to_string(),
        gpu_types: vec!["nvidia-tesla-t4".to_string()],
        node_price: Some(0.25),
        pod_price: Some(0.01),
        ..Script::default()
    };
    script
        .owner_by_provider_id
        .insert("test:///ng-1/a".to_string(), group("ng-1", 1, 10));
    script.target_sizes.insert("ng-1".to_string(), 3);
    script.templates.insert(
        "ng-1".to_string(),
        TemplateAnswer::Bytes(encode_node(&Node::new(
            "template",
            Resources::new(2000, 8 << 30),
        ))),
    );
    script.options.insert("ng-1".to_string(), None);
    FakeCloud::new(script)
}

async fn setup(grpc_timeout: &str) -> (Arc<FakeCloud>, RunningServer, ExternalGrpcProvider) {
    let cloud = cloud();
    let server = serve_plain(cloud.clone()).await;
    let provider = plain_provider(server.address, grpc_timeout);
    (cloud, server, provider)
}

async fn ng1(provider: &ExternalGrpcProvider) -> Arc<dyn NodeGroup> {
    let groups = ok(provider.node_groups().await, "node groups");
    match groups.into_iter().find(|g| g.id() == "ng-1") {
        Some(group) => group,
        None => panic!("ng-1 is listed"),
    }
}

/// Calls every method that reaches the service once.
async fn call_every_rpc(provider: &ExternalGrpcProvider) {
    let a = node("node-a", "test:///ng-1/a");
    let pod = Pod::new("default", "web-0");
    let (start, end) = (Timestamp::from_secs(100), Timestamp::from_secs(200));
    ok(provider.refresh().await, "refresh");
    let group = ng1(provider).await;
    ok(
        provider.node_group_for_node(&a).await,
        "node group for node",
    );
    ok(provider.node_price(&a, start, end).await, "node price");
    ok(provider.pod_price(&pod, start, end).await, "pod price");
    ok(group.target_size().await, "target size");
    ok(group.increase_size(2).await, "increase");
    ok(group.delete_nodes(std::slice::from_ref(&a)).await, "delete");
    ok(group.decrease_target_size(-1).await, "decrease");
    ok(group.nodes().await, "nodes");
    ok(group.template_node_info().await, "template");
    ok(group.get_options().await, "options");
    ok(provider.cleanup().await, "cleanup");
}

/// A `grpc-timeout` header value (spec of gRPC over HTTP/2: digits and a unit letter).
fn grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// docs/externalgrpc.md GRPC-01.
#[tokio::test]
async fn c01_every_call_reaches_the_method_of_its_exact_path_with_the_fields_of_section_3() {
    let (cloud, _server, provider) = setup("5s").await;
    call_every_rpc(&provider).await;
    // The generated server dispatches on the exact HTTP/2 path only; each handler counts itself.
    let mut reached = cloud.received().methods;
    reached.sort_unstable();
    reached.dedup();
    let mut expected = vec![
        "NodeGroups",
        "NodeGroupForNode",
        "PricingNodePrice",
        "PricingPodPrice",
        "GPULabel",
        "GetAvailableGPUTypes",
        "Cleanup",
        "Refresh",
        "NodeGroupTargetSize",
        "NodeGroupIncreaseSize",
        "NodeGroupDeleteNodes",
        "NodeGroupDecreaseTargetSize",
        "NodeGroupNodes",
        "NodeGroupTemplateNodeInfo",
        "NodeGroupGetOptions",
    ];
    expected.sort_unstable();
    assert_eq!(reached, expected);

    // Field numbers: what the service decoded re-encodes to the test vectors of
    // docs/externalgrpc.md (GRPC-33).
    let received = cloud.received();
    let increase = received.increase.first().map(Message::encode_to_vec);
    assert_eq!(
        increase,
        Some(vec![0x08, 0x02, 0x12, 0x04, b'n', b'g', b'-', b'1'])
    );
}

/// docs/externalgrpc.md GRPC-02.
#[tokio::test]
async fn c02_the_config_takes_the_five_keys_with_a_5s_default_and_refuses_bad_addresses() {
    let file = config_file(
        "address: localhost:8086\ncert: \"\"\nkey: \"\"\ncacert: \"\"\ngrpc_timeout: 1m30s\n",
    );
    let config = ok(
        ferroscale_provider_externalgrpc::ExternalGrpcConfig::from_file(&file.path),
        "config",
    );
    assert_eq!(config.grpc_timeout, Duration::from_secs(90));
    let file = config_file("address: localhost:8086\n");
    let config = ok(
        ferroscale_provider_externalgrpc::ExternalGrpcConfig::from_file(&file.path),
        "config",
    );
    assert_eq!(config.grpc_timeout, Duration::from_secs(5));

    for address in ["localhost", "::1:8086", "dns:///localhost:8086"] {
        let file = config_file(&format!("address: \"{address}\"\n"));
        let refused =
            ExternalGrpcProvider::from_config_file(&file.path, NodeGroupDefaults::default());
        assert!(
            matches!(
                refused,
                Err(ExternalGrpcError::Config(ConfigError::Address { .. }))
            ),
            "{address} was not refused at start-up"
        );
    }
}

/// docs/externalgrpc.md GRPC-03.
#[tokio::test]
async fn c03_plaintext_without_cert_and_mutual_tls_trusting_only_cacert_with_cert() {
    // Plaintext HTTP/2 with prior knowledge.
    let (cloud, _server, provider) = setup("5s").await;
    ok(provider.refresh().await, "refresh over h2c");
    assert_eq!(cloud.calls("Refresh"), 1);

    // mTLS: works with the CA that signed the server (the tonic client also refuses any server
    // that does not negotiate ALPN h2, so this call proves h2 was offered and agreed).
    let pki = Pki::generate();
    let tls_cloud = cloud_with_one_group();
    let server = serve_mtls(tls_cloud.clone(), &pki, &pki.ca).await;
    let address = format!("localhost:{}", server.address.port());
    ok(
        mtls_provider(&address, &pki, &pki.ca).refresh().await,
        "refresh over mTLS",
    );
    // Only cacert is trusted, and the server name is checked against the address's host.
    assert!(
        mtls_provider(&address, &pki, &pki.other_ca)
            .refresh()
            .await
            .is_err()
    );
    let tls = server_tls(
        &pki.wrong_name_server_cert,
        &pki.wrong_name_server_key,
        &pki.ca,
    );
    let wrong_name = ok(
        try_serve(tls_cloud.clone(), tls, loopback()).await,
        "serving",
    );
    let address = format!("localhost:{}", wrong_name.address.port());
    assert!(
        mtls_provider(&address, &pki, &pki.ca)
            .refresh()
            .await
            .is_err()
    );
    assert_eq!(tls_cloud.calls("Refresh"), 1);
}

fn cloud_with_one_group() -> Arc<FakeCloud> {
    FakeCloud::new(Script {
        groups: vec![group("ng-1", 1, 10)],
        ..Script::default()
    })
}

/// docs/externalgrpc.md GRPC-04.
#[tokio::test]
async fn c04_every_rpc_carries_a_deadline_of_grpc_timeout_and_none_is_retried() {
    let (cloud, _server, provider) = setup("3s").await;
    call_every_rpc(&provider).await;
    let received = cloud.received();
    assert_eq!(received.grpc_timeouts.len(), received.methods.len());
    for (method, header) in received.methods.iter().zip(&received.grpc_timeouts) {
        let deadline = header.as_deref().and_then(grpc_timeout);
        assert_eq!(
            deadline,
            Some(Duration::from_secs(3)),
            "{method}: {header:?}"
        );
    }

    cloud.forget_calls();
    cloud
        .script()
        .failures
        .insert("NodeGroupTargetSize", Status::unavailable("try again"));
    let group = ng1(&provider).await;
    assert!(group.target_size().await.is_err());
    assert_eq!(cloud.calls("NodeGroupTargetSize"), 1);
}

/// docs/externalgrpc.md GRPC-05.
#[tokio::test]
async fn c05_node_groups_is_asked_at_most_once_between_refreshes_and_a_failure_is_retried() {
    let (cloud, _server, provider) = setup("5s").await;
    ok(provider.refresh().await, "refresh");
    for _ in 0..4 {
        ok(provider.node_groups().await, "node groups");
    }
    assert_eq!(cloud.calls("NodeGroups"), 1);

    ok(provider.refresh().await, "refresh");
    cloud
        .script()
        .failures
        .insert("NodeGroups", Status::unavailable("down"));
    // Ferroscale: a failure is an error (the core skips the loop) rather than an empty list.
    assert!(provider.node_groups().await.is_err());
    cloud.script().failures.clear();
    assert_eq!(ok(provider.node_groups().await, "node groups").len(), 1);
    assert_eq!(cloud.calls("NodeGroups"), 3);
}

/// docs/externalgrpc.md GRPC-06.
#[tokio::test]
async fn c06_node_group_for_node_is_cached_per_node_until_refresh_except_none_and_errors() {
    let (cloud, _server, provider) = setup("5s").await;
    let a = node("node-a", "test:///ng-1/a");
    let outsider = node("master", "test:///none/m");
    for _ in 0..3 {
        let owner = ok(provider.node_group_for_node(&a).await, "owner");
        assert_eq!(owner.map(|g| g.id().to_string()).as_deref(), Some("ng-1"));
    }
    assert_eq!(cloud.calls("NodeGroupForNode"), 1);

    for form in [NotAutoscaledAnswer::EmptyGroup, NotAutoscaledAnswer::Absent] {
        cloud.script().not_autoscaled = Some(form);
        for _ in 0..2 {
            let owner = ok(provider.node_group_for_node(&outsider).await, "no owner");
            assert!(owner.is_none(), "{form:?}");
        }
    }
    assert_eq!(cloud.calls("NodeGroupForNode"), 5);

    ok(provider.refresh().await, "refresh");
    cloud
        .script()
        .failures
        .insert("NodeGroupForNode", Status::internal("boom"));
    assert!(provider.node_group_for_node(&a).await.is_err());
    cloud.script().failures.clear();
    ok(provider.node_group_for_node(&a).await, "owner");
    assert_eq!(cloud.calls("NodeGroupForNode"), 7);
}

/// docs/externalgrpc.md GRPC-07.
#[tokio::test]
async fn c07_refresh_empties_both_per_loop_caches_before_its_rpc_whatever_the_outcome() {
    let (cloud, _server, provider) = setup("5s").await;
    let a = node("node-a", "test:///ng-1/a");
    for refresh_fails in [false, true] {
        ok(provider.node_groups().await, "node groups");
        ok(provider.node_group_for_node(&a).await, "owner");
        if refresh_fails {
            cloud
                .script()
                .failures
                .insert("Refresh", Status::unavailable("down"));
            assert!(provider.refresh().await.is_err());
            cloud.script().failures.clear();
        } else {
            ok(provider.refresh().await, "refresh");
        }
    }
    ok(provider.node_groups().await, "node groups");
    ok(provider.node_group_for_node(&a).await, "owner");
    assert_eq!(cloud.calls("NodeGroups"), 3);
    assert_eq!(cloud.calls("NodeGroupForNode"), 3);
}

/// docs/externalgrpc.md GRPC-08.
#[tokio::test]
async fn c08_gpu_label_and_types_are_asked_until_the_first_success_and_only_keys_are_used() {
    let (cloud, _server, provider) = setup("5s").await;
    cloud
        .script()
        .failures
        .insert("GPULabel", Status::unavailable("down"));
    ok(provider.refresh().await, "refresh");
    assert_eq!(provider.gpu_label(), "");
    cloud.script().failures.clear();
    for _ in 0..3 {
        ok(provider.refresh().await, "refresh");
    }
    assert_eq!(provider.gpu_label(), "cloud.example/gpu");
    assert_eq!(provider.available_gpu_types(), ["nvidia-tesla-t4"]);
    assert_eq!(cloud.calls("GPULabel"), 2);
    assert_eq!(cloud.calls("GetAvailableGPUTypes"), 1);
}

/// docs/externalgrpc.md GRPC-09.
#[tokio::test]
async fn c09_a_group_reports_its_message_and_stops_asking_for_its_template_after_success() {
    let (cloud, _server, provider) = setup("5s").await;
    cloud.script().groups = vec![described_group("ng-1", 2, 7, "pool ng-1 in zone a")];
    let group = ng1(&provider).await;
    assert_eq!(
        (group.min_size(), group.max_size(), group.debug()),
        (2, 7, "pool ng-1 in zone a".to_string())
    );

    // Code 12 and failures are asked again; the first success is kept.
    let kept = cloud.script().templates.remove("ng-1");
    assert!(matches!(
        group.template_node_info().await,
        Err(CloudError::NotImplemented)
    ));
    cloud
        .script()
        .failures
        .insert("NodeGroupTemplateNodeInfo", Status::internal("boom"));
    assert!(group.template_node_info().await.is_err());
    cloud.script().failures.clear();
    if let Some(kept) = kept {
        cloud.script().templates.insert("ng-1".to_string(), kept);
    }
    for _ in 0..3 {
        ok(group.template_node_info().await, "template");
    }
    assert_eq!(cloud.calls("NodeGroupTemplateNodeInfo"), 3);

    // Ferroscale: an empty nodeBytes is an error, not a kept "no template" (upstream's core
    // crashes on that answer), and is asked again.
    ok(provider.refresh().await, "refresh");
    let renewed = ng1(&provider).await;
    cloud
        .script()
        .templates
        .insert("ng-1".to_string(), TemplateAnswer::Bytes(Vec::new()));
    for _ in 0..2 {
        let text = match renewed.template_node_info().await {
            Ok(template) => panic!("an empty template was accepted: {template:?}"),
            Err(error) => error.to_string(),
        };
        assert!(text.contains("NodeGroupTemplateNodeInfo"), "{text}");
        assert!(text.contains("\"ng-1\""), "{text}");
        assert!(text.contains("empty"), "{text}");
    }
    assert_eq!(cloud.calls("NodeGroupTemplateNodeInfo"), 5);
}

/// A group message with its own debug text.
fn described_group(
    id: &str,
    min_size: i32,
    max_size: i32,
    debug: &str,
) -> ferroscale_externalgrpc_proto::v1::NodeGroup {
    ferroscale_externalgrpc_proto::v1::NodeGroup {
        id: id.to_string(),
        min_size,
        max_size,
        debug: debug.to_string(),
    }
}

/// docs/externalgrpc.md GRPC-10.
#[tokio::test]
async fn c10_status_12_of_the_optional_rpcs_is_not_implemented_and_other_statuses_are_errors() {
    let (cloud, _server, provider) = setup("5s").await;
    let group = ng1(&provider).await;
    let a = node("node-a", "test:///ng-1/a");
    let pod = Pod::new("default", "web-0");
    let (start, end) = (Timestamp::from_secs(1), Timestamp::from_secs(2));
    {
        let mut script = cloud.script();
        script.node_price = None;
        script.pod_price = None;
        script.templates.clear();
        script.options.clear();
    }
    assert_eq!(
        provider.node_price(&a, start, end).await,
        Err(CloudError::NotImplemented)
    );
    assert_eq!(
        provider.pod_price(&pod, start, end).await,
        Err(CloudError::NotImplemented)
    );
    assert!(matches!(
        group.template_node_info().await,
        Err(CloudError::NotImplemented)
    ));
    assert_eq!(group.get_options().await, Err(CloudError::NotImplemented));

    // Any other status, and 12 on a required RPC, is an error with the code and the message.
    cloud.script().failures.insert(
        "PricingNodePrice",
        Status::permission_denied("no pricing for you"),
    );
    let text = match provider.node_price(&a, start, end).await {
        Err(CloudError::Provider(text)) => text,
        other => panic!("expected a provider error, got {other:?}"),
    };
    assert!(
        text.contains("status 7") && text.contains("no pricing for you"),
        "{text}"
    );
    cloud
        .script()
        .failures
        .insert("NodeGroupTargetSize", Status::unimplemented("old server"));
    let text = match group.target_size().await {
        Err(CloudError::Provider(text)) => text,
        other => panic!("expected a provider error, got {other:?}"),
    };
    assert!(
        text.contains("status 12") && text.contains("old server"),
        "{text}"
    );
}

/// docs/externalgrpc.md GRPC-11.
#[tokio::test]
async fn c11_kubernetes_objects_travel_as_their_plain_protobuf_encoding() {
    let (cloud, _server, provider) = setup("5s").await;
    let mut pod = Pod::new("default", "web-0");
    pod.labels.insert("app".to_string(), "web".to_string());
    ok(
        provider
            .pod_price(&pod, Timestamp::from_secs(1), Timestamp::from_secs(2))
            .await,
        "pod price",
    );
    let sent = cloud.received().pod_price;
    let pod_bytes = sent
        .first()
        .map(|r| r.pod_bytes.clone())
        .unwrap_or_default();
    assert_eq!(
        pod_bytes.first(),
        Some(&0x0a),
        "no k8s\\0 prefix, no envelope"
    );
    assert_eq!(ok(decode_pod(&pod_bytes), "decoding the pod"), pod);

    // A minimal node, and the same node the way Go writes it (empty strings and empty spec and
    // status present), decode to the same template.
    let minimal = vec![0x0a, 0x05, 0x0a, 0x03, b't', b'-', b'1'];
    let go_shaped = vec![
        0x0a, 0x09, 0x0a, 0x03, b't', b'-', b'1', 0x12, 0x00, 0x1a, 0x00, 0x12, 0x00, 0x1a, 0x00,
    ];
    let mut templates = Vec::new();
    for bytes in [minimal, go_shaped] {
        ok(provider.refresh().await, "refresh");
        cloud
            .script()
            .templates
            .insert("ng-1".to_string(), TemplateAnswer::Bytes(bytes));
        let group = ng1(&provider).await;
        templates.push(ok(group.template_node_info().await, "template").node);
    }
    assert_eq!(templates.first().map(|n| n.name.as_str()), Some("t-1"));
    assert_eq!(templates.first(), templates.get(1));

    // The runtime serializer's envelope is refused.
    ok(provider.refresh().await, "refresh");
    cloud.script().templates.insert(
        "ng-1".to_string(),
        TemplateAnswer::Bytes(b"k8s\0\x0a\x00".to_vec()),
    );
    let group = ng1(&provider).await;
    let text = match group.template_node_info().await {
        Ok(template) => panic!("accepted {template:?}"),
        Err(error) => error.to_string(),
    };
    assert!(text.contains("6b 38 73 00"), "{text}");
}

/// docs/externalgrpc.md GRPC-12.
#[tokio::test]
async fn c12_instances_map_state_and_error_info_as_upstream() {
    let (cloud, _server, provider) = setup("5s").await;
    let status = |state: i32, code: &str, class: i32| {
        Some(WireInstanceStatus {
            instance_state: state,
            error_info: Some(WireErrorInfo {
                error_code: code.to_string(),
                error_message: format!("{code} happened"),
                instance_error_class: class,
            }),
        })
    };
    let instance = |id: &str, status| WireInstance {
        id: id.to_string(),
        status,
    };
    cloud.script().instances.insert(
        "ng-1".to_string(),
        vec![
            instance("no-status", None),
            instance("state-0-with-error", status(0, "QUOTA", 1)),
            instance("running", status(1, "", 0)),
            instance("creating-out-of-resources", status(2, "QUOTA", 1)),
            instance("deleting-other", status(3, "GONE", 99)),
        ],
    );
    let group = ng1(&provider).await;
    let instances = ok(group.nodes().await, "nodes");
    let by_id: BTreeMap<_, _> = instances
        .iter()
        .map(|i| (i.id.as_str(), i.status.clone()))
        .collect();
    assert_eq!(by_id.len(), 5);
    assert_eq!(by_id.get("no-status"), Some(&None));
    assert_eq!(by_id.get("state-0-with-error"), Some(&None));
    assert_eq!(
        by_id.get("running"),
        Some(&Some(InstanceStatus {
            state: InstanceState::Running,
            error: None
        }))
    );
    assert_eq!(
        by_id.get("creating-out-of-resources"),
        Some(&Some(InstanceStatus {
            state: InstanceState::Creating,
            error: Some(InstanceErrorInfo {
                class: ErrorClass::OutOfResources,
                code: "QUOTA".to_string(),
                message: "QUOTA happened".to_string(),
            }),
        }))
    );
    assert_eq!(
        by_id.get("deleting-other"),
        Some(&Some(InstanceStatus {
            state: InstanceState::Deleting,
            error: Some(InstanceErrorInfo {
                class: ErrorClass::Other,
                code: "GONE".to_string(),
                message: "GONE happened".to_string(),
            }),
        }))
    );
}

/// docs/externalgrpc.md GRPC-13.
#[tokio::test]
async fn c13_get_options_sends_the_id_and_all_seven_defaults_and_absent_means_defaults() {
    let cloud = cloud();
    let server = serve_plain(cloud.clone()).await;
    let file = config_file(&format!("address: \"{}\"\n", server.address));
    let defaults = NodeGroupDefaults {
        scale_down_utilization_threshold: 0.4,
        scale_down_gpu_utilization_threshold: 0.3,
        scale_down_unneeded_time: Duration::from_secs(300),
        scale_down_unready_time: Duration::from_secs(1500),
        max_node_provision_time: Duration::from_millis(900_500),
        zero_or_max_node_scaling: true,
        ignore_daemonsets_utilization: true,
    };
    let provider = ok(
        ExternalGrpcProvider::from_config_file(&file.path, defaults),
        "provider",
    );
    let group = ng1(&provider).await;
    assert_eq!(ok(group.get_options().await, "options"), None);
    let sent = cloud.received().options;
    let request = sent.first().cloned().unwrap_or_default();
    assert_eq!(request.id, "ng-1");
    let sent_defaults = request.defaults.unwrap_or_default();
    assert_eq!(sent_defaults.scale_down_utilization_threshold, 0.4);
    assert_eq!(sent_defaults.scale_down_gpu_utilization_threshold, 0.3);
    assert!(sent_defaults.zero_or_max_node_scaling);
    assert!(sent_defaults.ignore_daemon_sets_utilization);
    let seconds = |d: Option<prost_types::Duration>| d.map(|d| (d.seconds, d.nanos));
    assert_eq!(
        seconds(sent_defaults.scale_down_unneeded_duration),
        Some((300, 0))
    );
    assert_eq!(
        seconds(sent_defaults.scale_down_unready_duration),
        Some((1500, 0))
    );
    assert_eq!(
        seconds(sent_defaults.max_node_provision_duration),
        Some((900, 500_000_000))
    );

    // An override: durations present are taken, a missing one is "use the default" (None), not
    // zero as upstream reads it; an old server's duration field is read too.
    cloud.script().options.insert(
        "ng-1".to_string(),
        Some(NodeGroupAutoscalingOptions {
            scale_down_utilization_threshold: 0.7,
            scale_down_gpu_utilization_threshold: 0.6,
            zero_or_max_node_scaling: false,
            ignore_daemon_sets_utilization: true,
            scale_down_unneeded_duration: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
            legacy_max_node_provision_time: Some(LegacyKubernetesDuration {
                duration: 120_000_000_000,
            }),
            ..Default::default()
        }),
    );
    let options = ok(group.get_options().await, "options").unwrap_or_default();
    assert_eq!(options.scale_down_utilization_threshold, Some(0.7));
    assert_eq!(options.scale_down_gpu_utilization_threshold, Some(0.6));
    assert_eq!(options.zero_or_max_node_scaling, Some(false));
    assert_eq!(options.ignore_daemonsets_utilization, Some(true));
    assert_eq!(
        options.scale_down_unneeded_time,
        Some(Duration::from_secs(60))
    );
    assert_eq!(options.scale_down_unready_time, None);
    assert_eq!(
        options.max_node_provision_time,
        Some(Duration::from_secs(120))
    );
    assert_eq!(options.max_node_startup_time, None);
    assert_eq!(options.allow_non_atomic_scale_up_to_max, None);
}

/// docs/externalgrpc.md GRPC-14.
#[tokio::test]
async fn c14_decrease_sends_the_negative_delta_and_delete_sends_each_nodes_identity() {
    let (cloud, _server, provider) = setup("5s").await;
    let group = ng1(&provider).await;
    ok(group.decrease_target_size(-2).await, "decrease");
    let decrease = cloud.received().decrease;
    assert_eq!(decrease.first().map(|r| r.delta), Some(-2));
    // The test vector of docs/externalgrpc.md: a 10-byte varint for -2.
    assert_eq!(
        decrease.first().map(Message::encode_to_vec),
        Some(vec![
            0x08, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x12, 0x04, b'n',
            b'g', b'-', b'1'
        ])
    );

    let mut first = node("node-a", "test:///ng-1/a");
    first.annotations.insert(
        "k8s.io/cluster-autoscaler/fake-node-reason".to_string(),
        "unregistered".to_string(),
    );
    let second = node("node-b", "test:///ng-1/b");
    ok(
        group.delete_nodes(&[first.clone(), second.clone()]).await,
        "delete",
    );
    ok(group.delete_nodes(&[]).await, "delete nothing");
    let deletes = cloud.received().delete;
    assert_eq!(deletes.len(), 2, "an empty list is still sent");
    let sent = deletes.first().map(|r| r.nodes.clone()).unwrap_or_default();
    assert_eq!(sent.len(), 2);
    for (wire, model) in sent.iter().zip([&first, &second]) {
        assert_eq!(wire.name, model.name);
        assert_eq!(wire.provider_id, model.provider_id);
        assert_eq!(wire.labels, model.labels);
        assert_eq!(wire.annotations, model.annotations);
    }
    assert_eq!(deletes.first().map(|r| r.id.as_str()), Some("ng-1"));
}

/// docs/externalgrpc.md GRPC-15.
#[tokio::test]
async fn c15_calls_without_an_rpc_answer_fixed_results() {
    let (cloud, _server, provider) = setup("5s").await;
    let group = ng1(&provider).await;
    cloud.forget_calls();
    let a = node("node-a", "test:///ng-1/a");
    assert_eq!(
        group.atomic_increase_size(1).await,
        Err(CloudError::NotImplemented)
    );
    assert_eq!(
        group.force_delete_nodes(std::slice::from_ref(&a)).await,
        Err(CloudError::NotImplemented)
    );
    assert!(group.exist());
    assert!(!group.autoprovisioned());
    // Ferroscale: NotImplemented alone (a Result cannot also carry upstream's `true`).
    assert_eq!(
        provider.has_instance(&a).await,
        Err(CloudError::NotImplemented)
    );
    // Ferroscale: the core's pricing model is synchronous and cannot make RPCs; pricing goes
    // through the provider's async node_price/pod_price instead.
    assert!(matches!(
        provider.pricing(),
        Err(CloudError::NotImplemented)
    ));
    assert_eq!(provider.name(), "externalgrpc");
    // Create, Delete, NewNodeGroup and GetAvailableMachineTypes are not in the core's traits.
    assert_eq!(cloud.total_calls(), 0);
}

/// docs/externalgrpc.md GRPC-16.
#[tokio::test]
async fn c16_pricing_requests_always_carry_both_timestamps_to_the_nanosecond() {
    let (cloud, _server, provider) = setup("5s").await;
    let a = node("node-a", "test:///ng-1/a");
    let pod = Pod::new("default", "web-0");
    let (start, end) = (Timestamp(0), Timestamp(1_700_000_000_123));
    assert_eq!(
        ok(provider.node_price(&a, start, end).await, "node price"),
        0.25
    );
    assert_eq!(
        ok(provider.pod_price(&pod, start, end).await, "pod price"),
        0.01
    );
    let received = cloud.received();
    let expected = (
        Some(prost_types::Timestamp {
            seconds: 0,
            nanos: 0,
        }),
        Some(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 123_000_000,
        }),
    );
    let node_request = received.node_price.first().cloned().unwrap_or_default();
    assert_eq!(
        (node_request.start_timestamp, node_request.end_timestamp),
        expected
    );
    assert_eq!(
        node_request.node.map(|n| (n.name, n.provider_id)),
        Some(("node-a".to_string(), "test:///ng-1/a".to_string()))
    );
    let pod_request = received.pod_price.first().cloned().unwrap_or_default();
    assert_eq!(
        (pod_request.start_timestamp, pod_request.end_timestamp),
        expected
    );
    // Servers of upstream 1.34 and older read the old fields, which are filled as well.
    assert!(node_request.legacy_start_time.is_some() && node_request.legacy_end_time.is_some());
    assert_eq!(pod_request.legacy_pod, pod_request.pod_bytes);
}

/// Checks docs/externalgrpc.md GRPC-29.
#[tokio::test]
async fn grpc29_a_nodes_gpu_is_computed_locally_from_the_label_or_a_known_gpu_resource() {
    let (cloud, _server, provider) = setup("5s").await;
    ok(provider.refresh().await, "refresh");
    cloud.forget_calls();

    let plain = node("cpu-only", "test:///ng-1/c");
    assert_eq!(provider.node_gpu_config(&plain), None);

    let mut labelled = node("labelled", "test:///ng-1/l");
    labelled.labels.insert(
        "cloud.example/gpu".to_string(),
        "nvidia-tesla-t4".to_string(),
    );
    let config = provider.node_gpu_config(&labelled);
    assert_eq!(
        config.map(|c| (c.label, c.gpu_type, c.resource_name)),
        Some((
            "cloud.example/gpu".to_string(),
            "nvidia-tesla-t4".to_string(),
            "nvidia.com/gpu".to_string()
        ))
    );

    // No label, but AMD GPUs in allocatable: a GPU node of unknown type with that resource.
    let mut amd = node("amd", "test:///ng-1/amd");
    amd.allocatable.set("amd.com/gpu", 2);
    let config = provider.node_gpu_config(&amd);
    assert_eq!(
        config.map(|c| (c.gpu_type, c.resource_name)),
        Some((String::new(), "amd.com/gpu".to_string()))
    );
    assert_eq!(cloud.total_calls(), 0);
}
