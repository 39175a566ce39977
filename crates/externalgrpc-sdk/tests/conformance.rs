//! The server statements of docs/externalgrpc.md (GRPC-17 to GRPC-28), one test each, named by
//! number (`statement_19_` checks GRPC-19), against the server over loopback.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferroscale_core::cloud::{
    CloudError, CloudProvider, GroupOptions, Instance, NodeGroup as CoreNodeGroup,
};
use ferroscale_externalgrpc_proto::decode_node;
use ferroscale_externalgrpc_proto::v1::*;
use ferroscale_externalgrpc_sdk::{MAX_RESPONSE_BYTES, Tls};
use ferroscale_model::Node;
use prost::Message;
use prost_types::Timestamp;
use support::*;
use tonic::Code;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

const METHODS: [&str; 15] = [
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

/// Sends an empty message (a valid encoding of every request of this API) to a literal path,
/// bypassing the generated client, and returns the answer's code.
async fn code_at_path(channel: Channel, path: &str) -> Code {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("channel ready");
    let path = PathAndQuery::try_from(path.to_string()).expect("a valid path");
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    match grpc.unary(tonic::Request::new(()), path, codec).await {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

/// Every method answers at its exact path: not UNIMPLEMENTED, which is what an unserved path gets.
async fn assert_all_methods_served(channel: Channel) {
    for method in METHODS {
        let path =
            format!("/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/{method}");
        let code = code_at_path(channel.clone(), &path).await;
        assert_ne!(code, Code::Unimplemented, "{path} is not served");
    }
    // prost's spelling of the irregular names is not a path of this API.
    let wrong = "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/GpuLabel";
    assert_eq!(code_at_path(channel, wrong).await, Code::Unimplemented);
}

/// docs/externalgrpc.md GRPC-17.
#[tokio::test]
async fn statement_17_all_15_methods_are_served_over_h2c_and_mutual_tls() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let plain = start(cloud.clone(), Tls::Insecure).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", plain.address))
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert_all_methods_served(channel).await;

    // Over TLS the generated client refuses a server that does not negotiate ALPN h2, and the
    // server requires and verifies the client's certificate (tests/transport.rs).
    let pki = Pki::generate();
    let secured = start(cloud, pki.server_tls()).await;
    let client = pki
        .client(secured.address, Some(&pki.client))
        .await
        .expect("mTLS connection");
    let mut client = client;
    client
        .node_groups(NodeGroupsRequest {})
        .await
        .expect("NodeGroups over mTLS");
    let channel = tonic::transport::Endpoint::from_shared(format!("https://{}", secured.address))
        .unwrap()
        .tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(&pki.ca))
                .identity(tonic::transport::Identity::from_pem(
                    &pki.client.cert,
                    &pki.client.key,
                ))
                .domain_name("localhost"),
        )
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert_all_methods_served(channel).await;
}

fn period() -> (Option<Timestamp>, Option<Timestamp>) {
    (
        Some(Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }),
        Some(Timestamp {
            seconds: 1_700_003_600,
            nanos: 0,
        }),
    )
}

fn node_a() -> ExternalGrpcNode {
    ExternalGrpcNode {
        name: "a".into(),
        provider_id: "fake://ng-1/a".into(),
        ..Default::default()
    }
}

fn pod_bytes() -> Vec<u8> {
    ferroscale_externalgrpc_proto::encode_pod(&ferroscale_model::Pod::new("default", "web-1"))
}

fn seven_defaults() -> NodeGroupAutoscalingOptions {
    let duration = |seconds| Some(prost_types::Duration { seconds, nanos: 0 });
    NodeGroupAutoscalingOptions {
        // Distinct thresholds, so reading one field for the other shows.
        scale_down_utilization_threshold: 0.3,
        scale_down_gpu_utilization_threshold: 0.7,
        zero_or_max_node_scaling: true,
        ignore_daemon_sets_utilization: true,
        scale_down_unneeded_duration: duration(600),
        scale_down_unready_duration: duration(1200),
        max_node_provision_duration: duration(900),
        ..Default::default()
    }
}

/// docs/externalgrpc.md GRPC-18.
#[tokio::test]
async fn statement_18_missing_optional_features_answer_12_and_real_failures_never_do() {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::NotOffered))).await;
    let (start_timestamp, end_timestamp) = period();
    let node_price = client
        .pricing_node_price(PricingNodePriceRequest {
            node: Some(node_a()),
            start_timestamp,
            end_timestamp,
            ..Default::default()
        })
        .await
        .unwrap_err();
    let pod_price = client
        .pricing_pod_price(PricingPodPriceRequest {
            pod_bytes: pod_bytes(),
            start_timestamp,
            end_timestamp,
            ..Default::default()
        })
        .await
        .unwrap_err();
    // ng-2 has neither a template nor per-group options.
    let template = client
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest { id: "ng-2".into() })
        .await
        .unwrap_err();
    let options = client
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest {
            id: "ng-2".into(),
            defaults: Some(seven_defaults()),
        })
        .await
        .unwrap_err();
    for status in [&node_price, &pod_price, &template, &options] {
        assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    }

    // A price list that fails is a failure, not "not offered".
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Failing))).await;
    let failed = client
        .pricing_node_price(PricingNodePriceRequest {
            node: Some(node_a()),
            start_timestamp,
            end_timestamp,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(failed.code(), Code::Unknown);
    assert!(
        failed.message().contains("price list unavailable"),
        "{}",
        failed.message()
    );
    // So are requests for unknown groups or without defaults.
    let unknown_group = client
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest { id: "ng-9".into() })
        .await
        .unwrap_err();
    assert_eq!(unknown_group.code(), Code::NotFound);
    let no_defaults = client
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest {
            id: "ng-2".into(),
            defaults: None,
        })
        .await
        .unwrap_err();
    assert_eq!(no_defaults.code(), Code::InvalidArgument);
}

/// docs/externalgrpc.md GRPC-19.
#[tokio::test]
async fn statement_19_node_group_for_node_answers_a_foreign_node_with_0a_00_and_a_grouped_one_in_full()
 {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let foreign = client
        .node_group_for_node(NodeGroupForNodeRequest {
            node: Some(ExternalGrpcNode {
                name: "control-plane-1".into(),
                provider_id: "other://control-plane-1".into(),
                ..Default::default()
            }),
        })
        .await
        .expect("OK, not an error")
        .into_inner();
    // Presence of the message survives decoding, so re-encoding shows what was sent.
    assert_eq!(foreign.encode_to_vec(), vec![0x0a, 0x00]);

    let grouped = client
        .node_group_for_node(NodeGroupForNodeRequest {
            node: Some(node_a()),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        grouped.node_group,
        Some(NodeGroup {
            id: "ng-1".into(),
            min_size: 1,
            max_size: 5,
            debug: "fake group ng-1 (1..5)".into(),
        })
    );
}

/// docs/externalgrpc.md GRPC-20.
#[tokio::test]
async fn statement_20_node_bytes_is_a_plain_node_with_valid_quantities_and_no_template_is_12() {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let bytes = client
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest { id: "ng-1".into() })
        .await
        .unwrap()
        .into_inner()
        .node_bytes;
    assert!(!bytes.is_empty());
    assert_eq!(
        bytes.first(),
        Some(&0x0a),
        "starts with the metadata tag, no k8s\\0 prefix"
    );

    // Decoded as Go's Node.Unmarshal would: the plain k8s.io.api.core.v1.Node message, whose
    // quantities are the canonical Kubernetes strings.
    let node = k8s_pb::api::core::v1::Node::decode(bytes.as_slice()).expect("a plain Node");
    let allocatable = node
        .status
        .as_ref()
        .map(|status| status.allocatable.clone())
        .unwrap_or_default();
    let quantity = |name: &str| allocatable.get(name).and_then(|q| q.string.clone());
    assert_eq!(quantity("cpu").as_deref(), Some("4"));
    assert_eq!(quantity("memory").as_deref(), Some("16Gi"));
    // And it reads back as the group's template, every quantity parsed by the Kubernetes grammar.
    let decoded = decode_node(&bytes).expect("valid quantities");
    assert_eq!(decoded.allocatable, template_node().allocatable);

    let none = client
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest { id: "ng-2".into() })
        .await
        .unwrap_err();
    assert_eq!(none.code(), Code::Unimplemented);
}

/// docs/externalgrpc.md GRPC-21.
#[tokio::test]
async fn statement_21_instance_ids_are_provider_ids_and_unregistered_instances_are_listed() {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let instances = client
        .node_group_nodes(NodeGroupNodesRequest { id: "ng-1".into() })
        .await
        .unwrap()
        .into_inner()
        .instances;
    let ids: Vec<&str> = instances.iter().map(|i| i.id.as_str()).collect();
    // `b` never registered as a Kubernetes node; it is listed all the same.
    assert_eq!(ids, vec!["fake://ng-1/a", "fake://ng-1/b"]);
    // The registered node whose spec.providerID is the instance id belongs to the same group.
    let owner = client
        .node_group_for_node(NodeGroupForNodeRequest {
            node: Some(node_a()),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(owner.owning_group().map(|g| g.id.as_str()), Some("ng-1"));
}

/// docs/externalgrpc.md GRPC-22.
#[tokio::test]
async fn statement_22_error_info_always_travels_with_state_1_2_or_3() {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let instances = client
        .node_group_nodes(NodeGroupNodesRequest { id: "ng-1".into() })
        .await
        .unwrap()
        .into_inner()
        .instances;
    let with_error: Vec<&InstanceStatus> = instances
        .iter()
        .filter_map(|instance| instance.status.as_ref())
        .filter(|status| status.error_info.is_some())
        .collect();
    assert_eq!(with_error.len(), 1);
    for status in with_error {
        assert!((1..=3).contains(&status.instance_state), "{status:?}");
        let error = status.error_info.as_ref().unwrap();
        assert!(
            !error.error_code.is_empty(),
            "the client drops error info without a code"
        );
    }
}

/// docs/externalgrpc.md GRPC-23.
#[tokio::test]
async fn statement_23_delete_nodes_matches_by_provider_id_then_name_and_accepts_placeholders() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    // The core's placeholder for an instance that never registered (docs/externalgrpc.md GRPC-23).
    let placeholder = ExternalGrpcNode {
        name: "fake://ng-1/b".into(),
        provider_id: "fake://ng-1/b".into(),
        labels: Default::default(),
        annotations: [(
            "k8s.io/cluster-autoscaler/fake-node-reason".to_string(),
            "create-error".to_string(),
        )]
        .into(),
    };
    client
        .node_group_delete_nodes(NodeGroupDeleteNodesRequest {
            nodes: vec![placeholder],
            id: "ng-1".into(),
        })
        .await
        .expect("a placeholder node is accepted");
    assert_eq!(cloud.group("ng-1").instance_ids(), vec!["fake://ng-1/a"]);

    // No providerID: the name is matched against the instance ids.
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    client
        .node_group_delete_nodes(NodeGroupDeleteNodesRequest {
            nodes: vec![ExternalGrpcNode {
                name: "fake://ng-1/b".into(),
                ..Default::default()
            }],
            id: "ng-1".into(),
        })
        .await
        .expect("a node without providerID is matched by name");
    assert_eq!(cloud.group("ng-1").instance_ids(), vec!["fake://ng-1/a"]);

    // A name that matches no instance when the providerID does not either is refused.
    let refused = client
        .node_group_delete_nodes(NodeGroupDeleteNodesRequest {
            nodes: vec![ExternalGrpcNode {
                name: "fake://ng-1/a".into(),
                provider_id: "fake://ng-2/c".into(),
                ..Default::default()
            }],
            id: "ng-1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
}

/// docs/externalgrpc.md GRPC-24.
#[tokio::test]
async fn statement_24_decrease_target_size_accepts_a_negative_delta() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    // -2 travels as a 10-byte varint.
    client
        .node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
            delta: -2,
            id: "ng-1".into(),
        })
        .await
        .unwrap();
    assert_eq!(cloud.log.mutations(), vec!["ng-1 decrease_target_size -2"]);
}

/// docs/externalgrpc.md GRPC-25.
#[tokio::test]
async fn statement_25_options_read_all_seven_defaults_and_no_override_is_an_absent_message() {
    // ng-1 overrides nothing: the answer is the client's own seven defaults, field for field.
    let cloud = FakeCloud::new(Pricing::Offered)
        .with_group_options("ng-1", Ok(Some(GroupOptions::default())))
        .with_group_options("ng-2", Ok(None));
    let (_server, mut client) = plain(Arc::new(cloud)).await;
    let answer = client
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest {
            id: "ng-1".into(),
            defaults: Some(seven_defaults()),
        })
        .await
        .unwrap()
        .into_inner()
        .node_group_autoscaling_options
        .expect("an override message");
    let current = NodeGroupAutoscalingOptions {
        legacy_scale_down_unneeded_time: None,
        legacy_scale_down_unready_time: None,
        legacy_max_node_provision_time: None,
        ..answer
    };
    assert_eq!(current, seven_defaults());

    // ng-2 has no override: OK with no options message, which the client reads as its defaults.
    let none = client
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest {
            id: "ng-2".into(),
            defaults: Some(seven_defaults()),
        })
        .await
        .expect("no override is not an error")
        .into_inner();
    assert_eq!(none.node_group_autoscaling_options, None);
}

/// A cloud whose Refresh never returns and whose one group's description is 5 MiB long.
struct OversizedAndStuckCloud;

#[derive(Debug)]
struct VerboseGroup;

#[async_trait]
impl CoreNodeGroup for VerboseGroup {
    fn id(&self) -> &str {
        "verbose"
    }
    fn min_size(&self) -> usize {
        0
    }
    fn max_size(&self) -> usize {
        1
    }
    fn debug(&self) -> String {
        "x".repeat(5 << 20)
    }
    async fn target_size(&self) -> Result<usize, CloudError> {
        Ok(0)
    }
    async fn increase_size(&self, _delta: usize) -> Result<(), CloudError> {
        Ok(())
    }
    async fn delete_nodes(&self, _nodes: &[Node]) -> Result<(), CloudError> {
        Ok(())
    }
    async fn decrease_target_size(&self, _delta: i64) -> Result<(), CloudError> {
        Ok(())
    }
    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        Ok(Vec::new())
    }
}

#[async_trait]
impl CloudProvider for OversizedAndStuckCloud {
    fn name(&self) -> &str {
        "oversized"
    }
    fn gpu_label(&self) -> &str {
        ""
    }
    async fn node_groups(&self) -> Result<Vec<Arc<dyn CoreNodeGroup>>, CloudError> {
        Ok(vec![Arc::new(VerboseGroup)])
    }
    async fn node_group_for_node(
        &self,
        _node: &Node,
    ) -> Result<Option<Arc<dyn CoreNodeGroup>>, CloudError> {
        Ok(None)
    }
    async fn refresh(&self) -> Result<(), CloudError> {
        std::future::pending().await
    }
}

/// docs/externalgrpc.md GRPC-26.
#[tokio::test]
async fn statement_26_answers_come_within_the_deadline_and_under_4_mib() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        ferroscale_externalgrpc_sdk::ProviderServer::new(OversizedAndStuckCloud).serve_on(
            listener,
            Tls::Insecure,
            async {
                let _ = stopped.await;
            },
        ),
    );
    let mut client = plain_client(address).await.unwrap();

    // A provider that does not answer in time: the client still gets the server's answer before
    // its deadline, DEADLINE_EXCEEDED naming the call.
    let mut refresh = tonic::Request::new(RefreshRequest {});
    refresh.set_timeout(Duration::from_secs(2));
    let late = client.refresh(refresh).await.unwrap_err();
    assert_eq!(late.code(), Code::DeadlineExceeded, "{late:?}");
    assert!(
        late.message()
            .starts_with("Refresh: the provider did not answer within"),
        "{}",
        late.message()
    );

    // An answer an upstream client could not receive is refused with a message saying why.
    let too_big = client.node_groups(NodeGroupsRequest {}).await.unwrap_err();
    assert_eq!(too_big.code(), Code::ResourceExhausted);
    assert!(
        too_big.message().starts_with("NodeGroups: "),
        "{}",
        too_big.message()
    );
    assert!(
        too_big
            .message()
            .contains(&format!("{MAX_RESPONSE_BYTES} bytes (4 MiB)")),
        "{}",
        too_big.message()
    );

    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

/// docs/externalgrpc.md GRPC-27.
#[tokio::test]
async fn statement_27_gpu_types_are_the_keys_with_empty_any_values() {
    let (_server, mut client) = plain(Arc::new(FakeCloud::new(Pricing::Offered))).await;
    let types = client
        .get_available_gpu_types(GetAvailableGpuTypesRequest {})
        .await
        .unwrap()
        .into_inner()
        .gpu_types;
    assert_eq!(
        types.keys().map(String::as_str).collect::<Vec<_>>(),
        GPU_TYPES
    );
    assert!(
        types
            .values()
            .all(|any| *any == prost_types::Any::default())
    );
}

/// docs/externalgrpc.md GRPC-28.
#[tokio::test]
async fn statement_28_refresh_only_refreshes_the_provider_and_reports_its_failure() {
    let cloud = Arc::new(FakeCloud::new(Pricing::Offered));
    let (_server, mut client) = plain(cloud.clone()).await;
    client.refresh(RefreshRequest {}).await.unwrap();
    assert_eq!(cloud.log.all(), vec!["refresh"]);

    cloud.fail_next_refresh(CloudError::Provider("API rate limited".into()));
    let failed = client.refresh(RefreshRequest {}).await.unwrap_err();
    assert_ne!(failed.code(), Code::Ok);
    assert!(
        failed.message().contains("API rate limited"),
        "{}",
        failed.message()
    );
}
