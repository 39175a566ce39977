//! Each RPC, sent by the generated client over a real loopback socket, reaches the right method of
//! an in-test cloud with the right arguments and comes back as the client expects; requests the
//! cloud must not act on are refused with the right code before they reach it.

mod support;

use std::sync::Arc;

use ferroscale_core::cloud::CloudError;
use ferroscale_externalgrpc_proto::v1::*;
use ferroscale_externalgrpc_proto::{decode_node, encode_pod};
use ferroscale_model::{Pod, Resources};
use prost_types::Timestamp;
use support::*;
use tonic::Code;

const START: i64 = 1_700_000_000;
const HOUR: i64 = 3600;

fn time(seconds: i64) -> Option<Timestamp> {
    Some(Timestamp { seconds, nanos: 0 })
}

fn wire_node(name: &str, provider_id: &str) -> ExternalGrpcNode {
    ExternalGrpcNode {
        name: name.to_string(),
        provider_id: provider_id.to_string(),
        labels: [("kubernetes.io/hostname".to_string(), name.to_string())].into(),
        annotations: Default::default(),
    }
}

fn defaults() -> NodeGroupAutoscalingOptions {
    NodeGroupAutoscalingOptions {
        scale_down_utilization_threshold: 0.5,
        scale_down_gpu_utilization_threshold: 0.6,
        zero_or_max_node_scaling: false,
        ignore_daemon_sets_utilization: true,
        scale_down_unneeded_duration: Some(prost_types::Duration {
            seconds: 600,
            nanos: 0,
        }),
        scale_down_unready_duration: Some(prost_types::Duration {
            seconds: 1200,
            nanos: 0,
        }),
        max_node_provision_duration: Some(prost_types::Duration {
            seconds: 900,
            nanos: 0,
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn node_groups_lists_every_group_with_its_bounds() {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let groups = client
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner()
        .node_groups;
    assert_eq!(
        groups,
        vec![
            NodeGroup {
                id: "ng-1".into(),
                min_size: 1,
                max_size: 5,
                debug: "fake group ng-1 (1..5)".into()
            },
            NodeGroup {
                id: "ng-2".into(),
                min_size: 0,
                max_size: 3,
                debug: "fake group ng-2 (0..3)".into()
            },
        ]
    );
}

#[tokio::test]
async fn node_group_for_node_finds_the_owner_and_answers_foreign_nodes_with_an_empty_group() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;

    let owned = client
        .node_group_for_node(NodeGroupForNodeRequest {
            node: Some(wire_node("c", "fake://ng-2/c")),
        })
        .await
        .unwrap()
        .into_inner();
    let group = owned.owning_group().expect("node c belongs to ng-2");
    assert_eq!(
        (group.id.as_str(), group.min_size, group.max_size),
        ("ng-2", 0, 3)
    );
    assert!(
        cloud
            .log
            .all()
            .contains(&"node_group_for_node fake://ng-2/c".to_string())
    );

    let foreign = client
        .node_group_for_node(NodeGroupForNodeRequest {
            node: Some(wire_node("control-plane", "")),
        })
        .await
        .expect("a foreign node is an answer, not an error")
        .into_inner();
    assert_eq!(
        foreign.node_group.map(|group| group.id),
        Some(String::new())
    );

    let missing = client
        .node_group_for_node(NodeGroupForNodeRequest { node: None })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument);
    assert!(
        missing.message().contains("field node"),
        "{}",
        missing.message()
    );
}

#[tokio::test]
async fn node_price_is_the_providers_price_for_the_period() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    let price = client
        .pricing_node_price(PricingNodePriceRequest {
            node: Some(wire_node("a", "fake://ng-1/a")),
            start_timestamp: time(START),
            end_timestamp: time(START + 2 * HOUR),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .price;
    assert_eq!(price, 2.0 * NODE_HOURLY);
    assert_eq!(cloud.log.count("node_price a"), 1);
}

#[tokio::test]
async fn node_price_without_a_period_bound_names_the_missing_field() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    let error = client
        .pricing_node_price(PricingNodePriceRequest {
            node: Some(wire_node("a", "fake://ng-1/a")),
            start_timestamp: time(START),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert!(
        error.message().contains("endTimestamp"),
        "{}",
        error.message()
    );
    assert_eq!(cloud.log.count("node_price"), 0);
}

#[tokio::test]
async fn pricing_reads_the_fields_of_clients_older_than_1_35() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    let legacy_time = |seconds| Some(LegacyKubernetesTime { seconds, nanos: 0 });

    let node_price = client
        .pricing_node_price(PricingNodePriceRequest {
            node: Some(wire_node("a", "fake://ng-1/a")),
            legacy_start_time: legacy_time(START),
            legacy_end_time: legacy_time(START + HOUR),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .price;
    assert_eq!(node_price, NODE_HOURLY);

    let mut pod = Pod::new("default", "web-1");
    pod.requests = Resources::new(1000, 1 << 30);
    let pod_price = client
        .pricing_pod_price(PricingPodPriceRequest {
            legacy_pod: encode_pod(&pod),
            legacy_start_time: legacy_time(START),
            legacy_end_time: legacy_time(START + 2 * HOUR),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .price;
    assert_eq!(pod_price, 2.0 * CORE_HOURLY);
}

#[tokio::test]
async fn pod_price_decodes_the_pod_and_prices_its_requests() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    let mut pod = Pod::new("default", "web-1");
    pod.requests = Resources::new(2000, 4 << 30);
    let price = client
        .pricing_pod_price(PricingPodPriceRequest {
            pod_bytes: encode_pod(&pod),
            start_timestamp: time(START),
            end_timestamp: time(START + 3 * HOUR),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .price;
    assert_eq!(price, 2.0 * CORE_HOURLY * 3.0);
    assert_eq!(cloud.log.count("pod_price default/web-1"), 1);
}

#[tokio::test]
async fn malformed_pod_bytes_are_an_invalid_argument_naming_the_field() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    // The API server's envelope format, then bytes that are not protobuf at all.
    for bad in [b"k8s\0\x0a\x02v1".to_vec(), vec![0x0a, 0xff, 0xff, 0xff]] {
        let error = client
            .pricing_pod_price(PricingPodPriceRequest {
                pod_bytes: bad,
                start_timestamp: time(START),
                end_timestamp: time(START + HOUR),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(error.code(), Code::InvalidArgument);
        assert!(error.message().contains("pod_bytes"), "{}", error.message());
        assert!(
            error.message().starts_with("PricingPodPrice"),
            "{}",
            error.message()
        );
    }
    let empty = client
        .pricing_pod_price(PricingPodPriceRequest {
            start_timestamp: time(START),
            end_timestamp: time(START + HOUR),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument);
    assert!(empty.message().contains("pod_bytes"), "{}", empty.message());
    assert_eq!(cloud.log.count("pod_price"), 0);
}

#[tokio::test]
async fn gpu_label_and_types_come_from_the_provider() {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let label = client
        .gpu_label(GpuLabelRequest {})
        .await
        .unwrap()
        .into_inner()
        .label;
    assert_eq!(label, GPU_LABEL);
    let types = client
        .get_available_gpu_types(GetAvailableGpuTypesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(types.type_names().collect::<Vec<_>>(), GPU_TYPES);
}

#[tokio::test]
async fn cleanup_and_refresh_reach_the_provider_and_report_its_failure() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    client.cleanup(CleanupRequest {}).await.unwrap();
    client.refresh(RefreshRequest {}).await.unwrap();
    assert_eq!(cloud.log.count("cleanup"), 1);
    assert_eq!(cloud.log.count("refresh"), 1);

    cloud.fail_next_refresh(CloudError::Provider("instance list timed out".to_string()));
    let error = client.refresh(RefreshRequest {}).await.unwrap_err();
    assert_eq!(error.code(), Code::Unknown);
    assert_eq!(
        error.message(),
        "Refresh: cloud provider error: instance list timed out"
    );
}

#[tokio::test]
async fn target_size_of_a_group_and_unknown_or_empty_ids() {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let size = client
        .node_group_target_size(NodeGroupTargetSizeRequest { id: "ng-1".into() })
        .await
        .unwrap()
        .into_inner()
        .target_size;
    assert_eq!(size, 2);

    let unknown = client
        .node_group_target_size(NodeGroupTargetSizeRequest { id: "ng-9".into() })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    assert!(
        unknown.message().contains("\"ng-9\""),
        "{}",
        unknown.message()
    );

    let empty = client
        .node_group_target_size(NodeGroupTargetSizeRequest { id: String::new() })
        .await
        .unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument);
    assert!(empty.message().contains("field id"), "{}", empty.message());
}

#[tokio::test]
async fn increase_size_grows_the_group() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    client
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 3,
            id: "ng-1".into(),
        })
        .await
        .unwrap();
    assert_eq!(cloud.group("ng-1").target(), 5);
    assert_eq!(cloud.log.mutations(), vec!["ng-1 increase_size 3"]);
}

#[tokio::test]
async fn increase_size_beyond_max_is_refused_before_the_provider_grows_anything() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    let error = client
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 4,
            id: "ng-1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert!(
        error
            .message()
            .starts_with("NodeGroupIncreaseSize for node group \"ng-1\""),
        "{}",
        error.message()
    );
    assert!(
        error.message().contains("max size 5"),
        "{}",
        error.message()
    );
    assert_eq!(cloud.group("ng-1").target(), 2);
    assert!(cloud.log.mutations().is_empty());

    for delta in [0, -1] {
        let error = client
            .node_group_increase_size(NodeGroupIncreaseSizeRequest {
                delta,
                id: "ng-1".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(error.code(), Code::InvalidArgument);
        assert!(
            error.message().contains("field delta"),
            "{}",
            error.message()
        );
    }
    let unknown = client
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 1,
            id: "ng-9".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    assert!(cloud.log.mutations().is_empty());
}

#[tokio::test]
async fn delete_nodes_deletes_members_of_the_group() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    client
        .node_group_delete_nodes(NodeGroupDeleteNodesRequest {
            nodes: vec![wire_node("a", "fake://ng-1/a")],
            id: "ng-1".into(),
        })
        .await
        .unwrap();
    assert_eq!(cloud.group("ng-1").instance_ids(), vec!["fake://ng-1/b"]);
    assert_eq!(cloud.group("ng-1").target(), 1);
}

#[tokio::test]
async fn delete_nodes_of_another_group_is_refused_and_deletes_nothing() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    let error = client
        .node_group_delete_nodes(NodeGroupDeleteNodesRequest {
            // The first node is a member; the request is refused as a whole for the second.
            nodes: vec![
                wire_node("b", "fake://ng-1/b"),
                wire_node("c", "fake://ng-2/c"),
            ],
            id: "ng-1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert!(
        error
            .message()
            .contains("node c (providerID fake://ng-2/c)"),
        "{}",
        error.message()
    );
    assert!(error.message().contains("\"ng-1\""), "{}", error.message());
    assert!(cloud.log.mutations().is_empty());
    assert_eq!(cloud.group("ng-2").instance_ids(), vec!["fake://ng-2/c"]);
}

#[tokio::test]
async fn delete_nodes_below_the_min_size_is_refused() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    let error = client
        .node_group_delete_nodes(NodeGroupDeleteNodesRequest {
            nodes: vec![
                wire_node("a", "fake://ng-1/a"),
                wire_node("fake://ng-1/b", "fake://ng-1/b"),
            ],
            id: "ng-1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert!(
        error.message().contains("min size 1"),
        "{}",
        error.message()
    );
    assert!(cloud.log.mutations().is_empty());
}

#[tokio::test]
async fn decrease_target_size_passes_the_negative_delta() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    client
        .node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
            delta: -1,
            id: "ng-1".into(),
        })
        .await
        .unwrap();
    assert_eq!(cloud.log.mutations(), vec!["ng-1 decrease_target_size -1"]);

    let positive = client
        .node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
            delta: 1,
            id: "ng-1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(positive.code(), Code::InvalidArgument);
    assert!(
        positive.message().contains("must be negative"),
        "{}",
        positive.message()
    );
    assert_eq!(cloud.log.mutations().len(), 1);
}

#[tokio::test]
async fn nodes_lists_instances_with_state_and_error_info() {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let instances = client
        .node_group_nodes(NodeGroupNodesRequest { id: "ng-1".into() })
        .await
        .unwrap()
        .into_inner()
        .instances;
    assert_eq!(
        instances,
        vec![
            Instance {
                id: "fake://ng-1/a".into(),
                status: Some(InstanceStatus {
                    instance_state: instance_status::InstanceState::InstanceRunning as i32,
                    error_info: None,
                }),
            },
            Instance {
                id: "fake://ng-1/b".into(),
                status: Some(InstanceStatus {
                    instance_state: instance_status::InstanceState::InstanceCreating as i32,
                    error_info: Some(InstanceErrorInfo {
                        error_code: "QUOTA_EXCEEDED".into(),
                        error_message: "instance quota reached".into(),
                        instance_error_class: 1,
                    }),
                }),
            },
        ]
    );
}

#[tokio::test]
async fn template_is_the_groups_node_in_both_the_current_and_the_legacy_field() {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let answer = client
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest { id: "ng-1".into() })
        .await
        .unwrap()
        .into_inner();
    let node = decode_node(&answer.node_bytes).expect("nodeBytes decodes as a Node");
    let expected = template_node();
    assert_eq!(node.labels, expected.labels);
    assert_eq!(node.taints, expected.taints);
    assert_eq!(node.allocatable, expected.allocatable);
    assert_eq!(node.capacity, expected.capacity);
    assert_eq!(answer.legacy_node_info, answer.node_bytes);

    let without = client
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest { id: "ng-2".into() })
        .await
        .unwrap_err();
    assert_eq!(without.code(), Code::Unimplemented);
}

#[tokio::test]
async fn options_combine_the_groups_overrides_with_the_clients_defaults() {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let options = client
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest {
            id: "ng-1".into(),
            defaults: Some(defaults()),
        })
        .await
        .unwrap()
        .into_inner()
        .node_group_autoscaling_options
        .expect("ng-1 overrides options");
    let seconds = |duration: Option<prost_types::Duration>| duration.map(|d| d.seconds);
    assert_eq!(
        options.scale_down_utilization_threshold,
        NG1_OVERRIDDEN_THRESHOLD
    );
    assert_eq!(options.scale_down_gpu_utilization_threshold, 0.6);
    assert!(options.ignore_daemon_sets_utilization);
    assert!(!options.zero_or_max_node_scaling);
    assert_eq!(
        seconds(options.scale_down_unneeded_duration),
        Some(NG1_OVERRIDDEN_UNNEEDED.as_secs() as i64)
    );
    assert_eq!(seconds(options.scale_down_unready_duration), Some(1200));
    assert_eq!(seconds(options.max_node_provision_duration), Some(900));
    // Clients older than 1.35 read the durations from the legacy fields, in nanoseconds.
    assert_eq!(
        options.legacy_scale_down_unneeded_time.map(|d| d.duration),
        Some(300_000_000_000)
    );
    assert_eq!(
        options.legacy_max_node_provision_time.map(|d| d.duration),
        Some(900_000_000_000)
    );

    let without = client
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest {
            id: "ng-2".into(),
            defaults: Some(defaults()),
        })
        .await
        .unwrap_err();
    assert_eq!(without.code(), Code::Unimplemented);

    let no_defaults = client
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest {
            id: "ng-1".into(),
            defaults: None,
        })
        .await
        .unwrap_err();
    assert_eq!(no_defaults.code(), Code::InvalidArgument);
    assert!(
        no_defaults.message().contains("field defaults"),
        "{}",
        no_defaults.message()
    );
}

#[tokio::test]
async fn options_read_the_default_durations_of_clients_older_than_1_35() {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let legacy = |seconds: i64| {
        Some(LegacyKubernetesDuration {
            duration: seconds * 1_000_000_000,
        })
    };
    let old_defaults = NodeGroupAutoscalingOptions {
        scale_down_utilization_threshold: 0.5,
        legacy_scale_down_unneeded_time: legacy(600),
        legacy_scale_down_unready_time: legacy(1200),
        legacy_max_node_provision_time: legacy(900),
        ..Default::default()
    };
    let options = client
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest {
            id: "ng-1".into(),
            defaults: Some(old_defaults),
        })
        .await
        .unwrap()
        .into_inner()
        .node_group_autoscaling_options
        .expect("ng-1 overrides options");
    assert_eq!(
        options.scale_down_unready_duration.map(|d| d.seconds),
        Some(1200)
    );
    assert_eq!(
        options.legacy_scale_down_unready_time.map(|d| d.duration),
        Some(1_200_000_000_000)
    );
}

#[tokio::test]
async fn optional_calls_of_a_provider_without_them_are_unimplemented() {
    let cloud = Arc::new(FakeCloud::new(Pricing::NotOffered));
    let (_server, mut client) = plain(cloud.clone()).await;
    let node_price = client
        .pricing_node_price(PricingNodePriceRequest {
            node: Some(wire_node("a", "fake://ng-1/a")),
            start_timestamp: time(START),
            end_timestamp: time(START + HOUR),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(node_price.code(), Code::Unimplemented);
    let pod_price = client
        .pricing_pod_price(PricingPodPriceRequest {
            pod_bytes: encode_pod(&Pod::new("default", "web-1")),
            start_timestamp: time(START),
            end_timestamp: time(START + HOUR),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(pod_price.code(), Code::Unimplemented);
}
