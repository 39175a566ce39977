//! The template answer's `resourceSliceBytes` (docs/externalgrpc.md GRPC-36): the SDK server sends
//! a template's ResourceSlices and the client reads them back into the template, local to the
//! template node; bytes that do not decode, or a slice that is not node-local, are an error naming
//! the group and the field, the template is not kept, and nothing panics.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use ferroscale_core::cloud::{CloudError, CloudProvider, Instance, NodeGroup, NodeTemplate};
use ferroscale_externalgrpc_proto::{encode_node, encode_resource_slice};
use ferroscale_externalgrpc_sdk::{ProviderServer, Tls};
use ferroscale_model::{
    Device, DeviceAttribute, DeviceScope, Node, Quantity, ResourceSlice, Resources,
};
use support::*;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

fn gpu_slice(node: &str) -> ResourceSlice {
    let attributes = BTreeMap::from([
        (
            "gpu.example.com/model".to_string(),
            DeviceAttribute::String("A100".to_string()),
        ),
        ("gpu.example.com/index".to_string(), DeviceAttribute::Int(0)),
        (
            "gpu.example.com/mig".to_string(),
            DeviceAttribute::Bool(false),
        ),
        (
            "gpu.example.com/driverVersion".to_string(),
            DeviceAttribute::Version("1.2.3".to_string()),
        ),
        ("numa.example.com/node".to_string(), DeviceAttribute::Int(1)),
    ]);
    let capacity = BTreeMap::from([(
        "gpu.example.com/memory".to_string(),
        Quantity::parse("80Gi").unwrap_or_else(|e| panic!("{e}")),
    )]);
    ResourceSlice {
        name: format!("{node}-gpu"),
        driver: "gpu.example.com".to_string(),
        pool: node.to_string(),
        pool_generation: 1,
        pool_slice_count: 1,
        scope: DeviceScope::Node(node.to_string()),
        per_device_node_selection: false,
        devices: (0..2)
            .map(|i| Device {
                name: format!("gpu-{i}"),
                attributes: attributes.clone(),
                capacity: capacity.clone(),
                scope: None,
            })
            .collect(),
    }
}

/// One group whose template node has two GPUs.
#[derive(Debug)]
struct GpuGroup;

#[async_trait]
impl NodeGroup for GpuGroup {
    fn id(&self) -> &str {
        "gpu"
    }
    fn min_size(&self) -> usize {
        0
    }
    fn max_size(&self) -> usize {
        3
    }
    fn debug(&self) -> String {
        "gpu (0..3)".to_string()
    }
    async fn target_size(&self) -> Result<usize, CloudError> {
        Ok(0)
    }
    async fn increase_size(&self, _delta: usize) -> Result<(), CloudError> {
        Err(CloudError::NotImplemented)
    }
    async fn delete_nodes(&self, _nodes: &[Node]) -> Result<(), CloudError> {
        Err(CloudError::NotImplemented)
    }
    async fn decrease_target_size(&self, _delta: i64) -> Result<(), CloudError> {
        Err(CloudError::NotImplemented)
    }
    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        Ok(Vec::new())
    }
    async fn template_node_info(&self) -> Result<NodeTemplate, CloudError> {
        Ok(NodeTemplate {
            node: Node::new("gpu-template", Resources::new(8000, 32 << 30)),
            pods: Vec::new(),
            csi_node: None,
            resource_slices: vec![gpu_slice("gpu-template")],
        })
    }
}

#[derive(Debug)]
struct GpuCloud;

#[async_trait]
impl CloudProvider for GpuCloud {
    fn name(&self) -> &str {
        "gpu"
    }
    fn gpu_label(&self) -> &str {
        "example.com/gpu"
    }
    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        Ok(vec![Arc::new(GpuGroup)])
    }
    async fn node_group_for_node(
        &self,
        _node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        Ok(None)
    }
    async fn refresh(&self) -> Result<(), CloudError> {
        Ok(())
    }
}

async fn group(
    provider: &ferroscale_provider_externalgrpc::ExternalGrpcProvider,
    id: &str,
) -> Arc<dyn NodeGroup> {
    ok(provider.refresh().await, "refresh");
    let groups = ok(provider.node_groups().await, "node groups");
    match groups.into_iter().find(|g| g.id() == id) {
        Some(group) => group,
        None => panic!("{id} is listed"),
    }
}

/// docs/externalgrpc.md GRPC-36: what the SDK serves is what the client reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_serves_template_slices_and_the_client_reads_them_back() {
    let listener = ok(TcpListener::bind("127.0.0.1:0").await, "bind");
    let address = ok(listener.local_addr(), "address");
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = ProviderServer::new(GpuCloud)
            .serve_on(listener, Tls::Insecure, async {
                let _ = stopped.await;
            })
            .await;
    });
    let provider = plain_provider(address, "5s");
    let gpu = group(&provider, "gpu").await;
    let template = ok(gpu.template_node_info().await, "template");
    assert_eq!(template.node.name, "gpu-template");
    assert_eq!(template.resource_slices, vec![gpu_slice("gpu-template")]);
    drop(stop);
}

fn fake_cloud(slices: Vec<Vec<u8>>) -> Arc<FakeCloud> {
    let mut script = Script {
        groups: vec![support::group("ng-1", 0, 5)],
        ..Script::default()
    };
    script.templates.insert(
        "ng-1".to_string(),
        TemplateAnswer::WithSlices(
            encode_node(&Node::new("t-1", Resources::new(2000, 8 << 30))),
            slices,
        ),
    );
    FakeCloud::new(script)
}

/// docs/externalgrpc.md GRPC-36: a server may write any node name into a template slice; the
/// slice is the template node's.
#[tokio::test]
async fn a_template_slice_is_pointed_at_the_template_node() {
    let cloud = fake_cloud(vec![encode_resource_slice(&gpu_slice("whatever"))]);
    let server = serve_plain(cloud.clone()).await;
    let provider = plain_provider(server.address, "5s");
    let template = ok(
        group(&provider, "ng-1").await.template_node_info().await,
        "template",
    );
    assert_eq!(template.resource_slices.len(), 1);
    assert_eq!(template.resource_slices[0].node_name(), Some("t-1"));
}

/// docs/externalgrpc.md GRPC-36: bad slice bytes fail the template call, naming the group and
/// the entry; the template is not kept, so a corrected answer is read at the next call.
#[tokio::test]
async fn bad_slice_bytes_are_an_error_naming_group_and_field_and_are_asked_again() {
    let mut pool_wide = gpu_slice("t-1");
    pool_wide.scope = DeviceScope::AllNodes;
    let mut negative = gpu_slice("t-1");
    negative.devices[0]
        .capacity
        .insert("gpu.example.com/memory".into(), Quantity::from_units(-1));
    let good = encode_resource_slice(&gpu_slice("t-1"));
    for (bad, expected) in [
        (
            vec![0xff, 0xff, 0xff],
            "not a valid protobuf k8s.io.api.resource.v1.ResourceSlice",
        ),
        (b"k8s\0\x0a\x00".to_vec(), "envelope format"),
        (encode_resource_slice(&pool_wide), "not node-local"),
        (encode_resource_slice(&negative), "must not be negative"),
    ] {
        let cloud = fake_cloud(vec![good.clone(), bad]);
        let server = serve_plain(cloud.clone()).await;
        let provider = plain_provider(server.address, "5s");
        let ng1 = group(&provider, "ng-1").await;
        let error = match ng1.template_node_info().await {
            Ok(template) => panic!("{expected}: accepted {template:?}"),
            Err(error) => error.to_string(),
        };
        assert!(
            error.contains("ng-1")
                && error.contains("resourceSliceBytes[1]")
                && error.contains(expected),
            "{expected}: {error}"
        );
        cloud.script().templates.insert(
            "ng-1".to_string(),
            TemplateAnswer::WithSlices(
                encode_node(&Node::new("t-1", Resources::new(2000, 8 << 30))),
                vec![good.clone()],
            ),
        );
        let template = ok(ng1.template_node_info().await, "the corrected template");
        assert_eq!(template.resource_slices.len(), 1);
        assert_eq!(cloud.calls("NodeGroupTemplateNodeInfo"), 2, "{expected}");
    }
}

/// More entries than any node publishes are refused before decoding.
#[tokio::test]
async fn too_many_template_slices_are_refused() {
    let good = encode_resource_slice(&gpu_slice("t-1"));
    let cloud = fake_cloud(vec![good; 129]);
    let server = serve_plain(cloud.clone()).await;
    let provider = plain_provider(server.address, "5s");
    let error = match group(&provider, "ng-1").await.template_node_info().await {
        Ok(template) => panic!("accepted {} slices", template.resource_slices.len()),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("at most 128"), "{error}");
}
