//! The generated client and server talk to each other in process, with no transport in between:
//! every method travels on the exact HTTP/2 path of docs/externalgrpc.md GRPC-01, methods a server
//! does not write answer status 12, and request and answer fields arrive as sent.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use ferroscale_externalgrpc_proto::v1::cloud_provider_client::CloudProviderClient;
use ferroscale_externalgrpc_proto::v1::cloud_provider_server::{
    CloudProvider, CloudProviderServer, SERVICE_NAME,
};
use ferroscale_externalgrpc_proto::v1::*;
use ferroscale_externalgrpc_proto::{decode_node, encode_node};
use ferroscale_model::{Node, Resources};
use tonic::codegen::{Service, http};
use tonic::{Code, Request, Response, Status};

/// A cloud with one group, no pricing, no per-group options, and a template for its group.
#[derive(Default)]
struct OneGroupCloud {
    decrease_deltas: Mutex<Vec<i32>>,
}

fn group() -> NodeGroup {
    NodeGroup {
        id: "ng-1".to_string(),
        min_size: 1,
        max_size: 10,
        debug: "ng-1 (1..10)".to_string(),
    }
}

fn template() -> Node {
    Node::new("template-ng-1", Resources::new(2000, 8 << 30))
}

#[tonic::async_trait]
impl CloudProvider for OneGroupCloud {
    async fn node_groups(
        &self,
        _request: Request<NodeGroupsRequest>,
    ) -> Result<Response<NodeGroupsResponse>, Status> {
        Ok(Response::new(NodeGroupsResponse {
            node_groups: vec![group()],
        }))
    }

    async fn node_group_for_node(
        &self,
        request: Request<NodeGroupForNodeRequest>,
    ) -> Result<Response<NodeGroupForNodeResponse>, Status> {
        let node = request.into_inner().node.unwrap_or_default();
        if node.provider_id.starts_with("aws:///") {
            Ok(Response::new(NodeGroupForNodeResponse {
                node_group: Some(group()),
            }))
        } else {
            Ok(Response::new(NodeGroupForNodeResponse::not_autoscaled()))
        }
    }

    async fn node_group_decrease_target_size(
        &self,
        request: Request<NodeGroupDecreaseTargetSizeRequest>,
    ) -> Result<Response<NodeGroupDecreaseTargetSizeResponse>, Status> {
        let delta = request.into_inner().delta;
        if let Ok(mut deltas) = self.decrease_deltas.lock() {
            deltas.push(delta);
        }
        Ok(Response::new(NodeGroupDecreaseTargetSizeResponse {}))
    }

    async fn node_group_template_node_info(
        &self,
        request: Request<NodeGroupTemplateNodeInfoRequest>,
    ) -> Result<Response<NodeGroupTemplateNodeInfoResponse>, Status> {
        if request.into_inner().id != "ng-1" {
            return Err(Status::unknown("node group not found"));
        }
        Ok(Response::new(NodeGroupTemplateNodeInfoResponse {
            node_bytes: encode_node(&template()),
            ..Default::default()
        }))
    }
}

/// Passes requests to the server and writes down the path of each.
#[derive(Clone)]
struct PathRecorder<S> {
    server: S,
    paths: Arc<Mutex<Vec<String>>>,
}

impl<S, B> Service<http::Request<B>> for PathRecorder<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.server.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if let Ok(mut paths) = self.paths.lock() {
            paths.push(request.uri().path().to_string());
        }
        self.server.call(request)
    }
}

type Client = CloudProviderClient<PathRecorder<CloudProviderServer<OneGroupCloud>>>;

fn connect(cloud: Arc<OneGroupCloud>) -> (Client, Arc<Mutex<Vec<String>>>) {
    let paths = Arc::new(Mutex::new(Vec::new()));
    let recorder = PathRecorder {
        server: CloudProviderServer::from_arc(cloud),
        paths: paths.clone(),
    };
    (CloudProviderClient::new(recorder), paths)
}

#[tokio::test]
async fn every_method_uses_the_upstream_path() {
    let (mut client, paths) = connect(Arc::default());
    // Answers do not matter here, only where the requests went.
    let _ = client.node_groups(NodeGroupsRequest {}).await;
    let _ = client
        .node_group_for_node(NodeGroupForNodeRequest::default())
        .await;
    let _ = client
        .pricing_node_price(PricingNodePriceRequest::default())
        .await;
    let _ = client
        .pricing_pod_price(PricingPodPriceRequest::default())
        .await;
    let _ = client.gpu_label(GpuLabelRequest {}).await;
    let _ = client
        .get_available_gpu_types(GetAvailableGpuTypesRequest {})
        .await;
    let _ = client.cleanup(CleanupRequest {}).await;
    let _ = client.refresh(RefreshRequest {}).await;
    let _ = client
        .node_group_target_size(NodeGroupTargetSizeRequest::default())
        .await;
    let _ = client
        .node_group_increase_size(NodeGroupIncreaseSizeRequest::default())
        .await;
    let _ = client
        .node_group_delete_nodes(NodeGroupDeleteNodesRequest::default())
        .await;
    let _ = client
        .node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest::default())
        .await;
    let _ = client
        .node_group_nodes(NodeGroupNodesRequest::default())
        .await;
    let _ = client
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest::default())
        .await;
    let _ = client
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest::default())
        .await;

    let methods = [
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
    let expected: Vec<String> = methods
        .iter()
        .map(|method| {
            format!("/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/{method}")
        })
        .collect();
    assert_eq!(*paths.lock().unwrap(), expected);
    assert_eq!(
        SERVICE_NAME,
        "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider"
    );
}

#[tokio::test]
async fn methods_a_server_does_not_write_answer_unimplemented() {
    let (mut client, _) = connect(Arc::default());
    let pricing = client
        .pricing_node_price(PricingNodePriceRequest::default())
        .await
        .unwrap_err();
    assert_eq!(pricing.code(), Code::Unimplemented);
    let options = client
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(options.code(), Code::Unimplemented);
}

#[tokio::test]
async fn answers_and_errors_arrive_as_the_server_sent_them() {
    let cloud = Arc::new(OneGroupCloud::default());
    let (mut client, _) = connect(cloud.clone());

    let groups = client
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(groups.node_groups, vec![group()]);

    let unmanaged = ExternalGrpcNode::from_node(&Node::new("laptop", Resources::default()));
    let answer = client
        .node_group_for_node(NodeGroupForNodeRequest {
            node: Some(unmanaged),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(answer.node_group.is_some());
    assert!(answer.owning_group().is_none());

    let mut managed = Node::new("ip-10-0-1-12", Resources::default());
    managed.provider_id = "aws:///eu-west-1a/i-1".to_string();
    let answer = client
        .node_group_for_node(NodeGroupForNodeRequest {
            node: Some(ExternalGrpcNode::from_node(&managed)),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.owning_group(), Some(&group()));

    client
        .node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
            delta: -2,
            id: "ng-1".to_string(),
        })
        .await
        .unwrap();
    assert_eq!(*cloud.decrease_deltas.lock().unwrap(), vec![-2]);

    let answer = client
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest {
            id: "ng-1".to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        decode_node(answer.template_node_bytes()).unwrap(),
        template()
    );

    let missing = client
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest {
            id: "ng-9".to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::Unknown);
    assert_eq!(missing.message(), "node group not found");
}

#[test]
fn descriptor_set_describes_the_service_under_the_upstream_file_name() {
    use prost::Message;
    let set =
        prost_types::FileDescriptorSet::decode(ferroscale_externalgrpc_proto::FILE_DESCRIPTOR_SET)
            .unwrap();
    let schema = set
        .file
        .iter()
        .find(|file| file.name() == "cloudprovider/externalgrpc/protos/externalgrpc.proto")
        .expect("the schema file is in the set");
    assert_eq!(
        schema.package(),
        "clusterautoscaler.cloudprovider.v1.externalgrpc"
    );
    let service = &schema.service[0];
    assert_eq!(service.name(), "CloudProvider");
    assert_eq!(service.method.len(), 15);
    // The imports travel along, so a reflection client can resolve every type.
    for import in &schema.dependency {
        assert!(
            set.file.iter().any(|file| file.name() == import),
            "{import}"
        );
    }
}
