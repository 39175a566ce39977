//! The externalgrpc service over a core [`CloudProvider`]: each of the 15 RPCs mapped onto the
//! provider and node-group traits as docs/externalgrpc.md GRPC-17–GRPC-28 and GRPC-31 describe,
//! without the example server's quirks GRPC-Q1–GRPC-Q3.
//!
//! Requests are checked before anything reaches the provider: an unknown group id is NOT_FOUND,
//! a missing or malformed field is INVALID_ARGUMENT naming the field, and the bounds the core
//! contract states (grow only up to the max size, delete only members of the group and not below
//! the min size) are enforced here too, so a provider that forgets one does not create or delete
//! machines it should not.

use std::collections::HashSet;
use std::sync::Arc;

use ferroscale_core::cloud::{CloudProvider, NodeGroup};
use ferroscale_externalgrpc_proto::v1::cloud_provider_server::CloudProvider as CloudProviderRpc;
use ferroscale_externalgrpc_proto::v1::{self, *};
use ferroscale_externalgrpc_proto::{decode_pod, encode_node, encode_resource_slice};
use ferroscale_model::{Pod, Timestamp};
use prost::Message;
use tonic::{Request, Response, Status};

use crate::call::{Call, MAX_RESPONSE_BYTES};
use crate::conversion::{
    FieldError, describe_node, instance_key, instance_to_wire, node_from_wire, options_to_wire,
    size_to_wire, timestamp_from_wire,
};
use crate::unreadable::Reached;

/// The externalgrpc service for one provider. [`crate::ProviderServer`] serves it; a vendor with
/// its own tonic server adds [`crate::ProviderServer::service`] (which also answers requests that
/// do not decode INVALID_ARGUMENT).
#[derive(Clone)]
pub struct ProviderService {
    provider: Arc<dyn CloudProvider>,
}

impl ProviderService {
    pub fn new(provider: Arc<dyn CloudProvider>) -> ProviderService {
        ProviderService { provider }
    }

    /// The group with this id in the provider's current list.
    async fn group(&self, call: &Call, id: &str) -> Result<Arc<dyn NodeGroup>, Status> {
        if id.is_empty() {
            return Err(call.invalid_field(FieldError {
                field: "id",
                reason: "is empty: the request must name a node group".to_string(),
            }));
        }
        let groups = self
            .provider
            .node_groups()
            .await
            .map_err(|error| call.cloud_error(error))?;
        let known = groups.len();
        groups
            .into_iter()
            .find(|group| group.id() == id)
            .ok_or_else(|| call.unknown_group(known))
    }
}

fn group_to_wire(group: &dyn NodeGroup) -> v1::NodeGroup {
    v1::NodeGroup {
        id: group.id().to_string(),
        min_size: size_to_wire(group.min_size()),
        max_size: size_to_wire(group.max_size()),
        debug: group.debug(),
    }
}

#[tonic::async_trait]
impl CloudProviderRpc for ProviderService {
    async fn node_groups(
        &self,
        request: Request<NodeGroupsRequest>,
    ) -> Result<Response<NodeGroupsResponse>, Status> {
        Reached::mark(request.extensions());
        let call = Call::new("NodeGroups")
            .within_deadline_of(request.metadata())
            .by_client_of(request.extensions());
        call.clone()
            .run(async {
                let groups = self
                    .provider
                    .node_groups()
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                let mut seen = HashSet::new();
                for group in &groups {
                    // An empty id reads as "no group" on the wire, and a repeated one makes two
                    // client objects for one group: both are provider bugs worth refusing loudly.
                    if group.id().is_empty() {
                        return Err(call.provider_bug(
                            "the provider lists a node group with an empty id, which the wire \
                             reads as \"no group\"",
                        ));
                    }
                    if !seen.insert(group.id()) {
                        return Err(call.provider_bug(format_args!(
                            "the provider lists node group {:?} twice",
                            group.id()
                        )));
                    }
                }
                Ok(NodeGroupsResponse {
                    node_groups: groups.iter().map(|group| group_to_wire(&**group)).collect(),
                })
            })
            .await
    }

    async fn node_group_for_node(
        &self,
        request: Request<NodeGroupForNodeRequest>,
    ) -> Result<Response<NodeGroupForNodeResponse>, Status> {
        Reached::mark(request.extensions());
        let (metadata, extensions, request) = request.into_parts();
        let call = match &request.node {
            Some(node) => Call::for_node("NodeGroupForNode", describe_node(node)),
            None => Call::new("NodeGroupForNode"),
        };
        let call = call.within_deadline_of(&metadata).by_client_of(&extensions);
        call.clone()
            .run(async {
                let node = request
                    .node
                    .as_ref()
                    .ok_or_else(|| call.invalid_field(FieldError::missing("node")))?;
                let group = self
                    .provider
                    .node_group_for_node(&node_from_wire(node))
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                match group {
                    // A node outside every group is an answer, not an error (docs/externalgrpc.md
                    // GRPC-19).
                    None => Ok(NodeGroupForNodeResponse::not_autoscaled()),
                    Some(group) if group.id().is_empty() => Err(call.provider_bug(
                        "the provider answered a node group with an empty id, which the wire \
                         reads as \"not autoscaled\"; answer no group instead",
                    )),
                    Some(group) => Ok(NodeGroupForNodeResponse {
                        node_group: Some(group_to_wire(&*group)),
                    }),
                }
            })
            .await
    }

    async fn pricing_node_price(
        &self,
        request: Request<PricingNodePriceRequest>,
    ) -> Result<Response<PricingNodePriceResponse>, Status> {
        Reached::mark(request.extensions());
        let (metadata, extensions, request) = request.into_parts();
        let call = match &request.node {
            Some(node) => Call::for_node("PricingNodePrice", describe_node(node)),
            None => Call::new("PricingNodePrice"),
        };
        let call = call.within_deadline_of(&metadata).by_client_of(&extensions);
        call.clone()
            .run(async {
                // A provider without pricing answers 12 whatever the request holds.
                let pricing = self
                    .provider
                    .pricing()
                    .map_err(|error| call.cloud_error(error))?;
                let node = request
                    .node
                    .as_ref()
                    .ok_or_else(|| call.invalid_field(FieldError::missing("node")))?;
                let (start, end) =
                    pricing_period(&call, request.start_or_legacy(), request.end_or_legacy())?;
                let price = pricing
                    .node_price(&node_from_wire(node), start, end)
                    .map_err(|error| call.cloud_error(error))?;
                Ok(PricingNodePriceResponse { price })
            })
            .await
    }

    async fn pricing_pod_price(
        &self,
        request: Request<PricingPodPriceRequest>,
    ) -> Result<Response<PricingPodPriceResponse>, Status> {
        Reached::mark(request.extensions());
        let (metadata, extensions, request) = request.into_parts();
        // The pod is read first so that the call, its errors and its log line can name it.
        let pod = read_pod(&request);
        let call = match &pod {
            Ok(pod) => Call::for_pod("PricingPodPrice", pod),
            Err(_) => Call::new("PricingPodPrice"),
        };
        let call = call.within_deadline_of(&metadata).by_client_of(&extensions);
        call.clone()
            .run(async {
                let pricing = self
                    .provider
                    .pricing()
                    .map_err(|error| call.cloud_error(error))?;
                let pod = pod.map_err(|error| call.invalid_field(error))?;
                let (start, end) =
                    pricing_period(&call, request.start_or_legacy(), request.end_or_legacy())?;
                let price = pricing
                    .pod_price(&pod, start, end)
                    .map_err(|error| call.cloud_error(error))?;
                Ok(PricingPodPriceResponse { price })
            })
            .await
    }

    async fn gpu_label(
        &self,
        request: Request<GpuLabelRequest>,
    ) -> Result<Response<GpuLabelResponse>, Status> {
        Reached::mark(request.extensions());
        Call::new("GPULabel")
            .within_deadline_of(request.metadata())
            .by_client_of(request.extensions())
            .run(async {
                Ok(GpuLabelResponse {
                    label: self.provider.gpu_label().to_string(),
                })
            })
            .await
    }

    async fn get_available_gpu_types(
        &self,
        request: Request<GetAvailableGpuTypesRequest>,
    ) -> Result<Response<GetAvailableGpuTypesResponse>, Status> {
        Reached::mark(request.extensions());
        Call::new("GetAvailableGPUTypes")
            .within_deadline_of(request.metadata())
            .by_client_of(request.extensions())
            .run(async {
                Ok(GetAvailableGpuTypesResponse::from_type_names(
                    self.provider.available_gpu_types(),
                ))
            })
            .await
    }

    async fn cleanup(
        &self,
        request: Request<CleanupRequest>,
    ) -> Result<Response<CleanupResponse>, Status> {
        Reached::mark(request.extensions());
        let call = Call::new("Cleanup")
            .within_deadline_of(request.metadata())
            .by_client_of(request.extensions());
        call.clone()
            .run(async {
                self.provider
                    .cleanup()
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                Ok(CleanupResponse {})
            })
            .await
    }

    async fn refresh(
        &self,
        request: Request<RefreshRequest>,
    ) -> Result<Response<RefreshResponse>, Status> {
        Reached::mark(request.extensions());
        let call = Call::new("Refresh")
            .within_deadline_of(request.metadata())
            .by_client_of(request.extensions());
        call.clone()
            .run(async {
                self.provider
                    .refresh()
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                Ok(RefreshResponse {})
            })
            .await
    }

    async fn node_group_target_size(
        &self,
        request: Request<NodeGroupTargetSizeRequest>,
    ) -> Result<Response<NodeGroupTargetSizeResponse>, Status> {
        Reached::mark(request.extensions());
        let (metadata, extensions, request) = request.into_parts();
        let call = Call::for_group("NodeGroupTargetSize", &request.id);
        let call = call.within_deadline_of(&metadata).by_client_of(&extensions);
        call.clone()
            .run(async {
                let group = self.group(&call, &request.id).await?;
                let size = group
                    .target_size()
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                Ok(NodeGroupTargetSizeResponse {
                    target_size: size_to_wire(size),
                })
            })
            .await
    }

    async fn node_group_increase_size(
        &self,
        request: Request<NodeGroupIncreaseSizeRequest>,
    ) -> Result<Response<NodeGroupIncreaseSizeResponse>, Status> {
        Reached::mark(request.extensions());
        let (metadata, extensions, request) = request.into_parts();
        let call = Call::for_group("NodeGroupIncreaseSize", &request.id);
        let call = call.within_deadline_of(&metadata).by_client_of(&extensions);
        call.clone()
            .run(async {
                let delta = usize::try_from(request.delta)
                    .ok()
                    .filter(|delta| *delta > 0)
                    .ok_or_else(|| {
                        call.invalid_field(FieldError {
                            field: "delta",
                            reason: format!("is {}; it must be positive", request.delta),
                        })
                    })?;
                let group = self.group(&call, &request.id).await?;
                let target = group
                    .target_size()
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                let wanted = target.saturating_add(delta);
                if wanted > group.max_size() {
                    return Err(call.invalid(format_args!(
                        "growing the target size {target} by {delta} would exceed the max size {}",
                        group.max_size()
                    )));
                }
                group
                    .increase_size(delta)
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                Ok(NodeGroupIncreaseSizeResponse {})
            })
            .await
    }

    async fn node_group_delete_nodes(
        &self,
        request: Request<NodeGroupDeleteNodesRequest>,
    ) -> Result<Response<NodeGroupDeleteNodesResponse>, Status> {
        Reached::mark(request.extensions());
        let (metadata, extensions, request) = request.into_parts();
        let call = Call::for_group("NodeGroupDeleteNodes", &request.id);
        let call = call.within_deadline_of(&metadata).by_client_of(&extensions);
        call.clone()
            .run(async {
                let group = self.group(&call, &request.id).await?;
                if request.nodes.is_empty() {
                    // The upstream client sends the call even for no nodes: nothing to delete.
                    return Ok(NodeGroupDeleteNodesResponse {});
                }
                // Refuse the whole request before deleting anything if one node is foreign, so
                // a bad request never deletes part of its nodes.
                let instances = group
                    .nodes()
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                let members: HashSet<&str> = instances
                    .iter()
                    .map(|instance| instance.id.as_str())
                    .collect();
                let mut requested = HashSet::new();
                for node in &request.nodes {
                    let key = instance_key(node);
                    if key.is_empty() || !members.contains(key) {
                        return Err(call.invalid(format_args!(
                            "node {} is not an instance of this node group",
                            describe_node(node)
                        )));
                    }
                    if !requested.insert(key) {
                        return Err(call.invalid(format_args!(
                            "node {} is listed twice",
                            describe_node(node)
                        )));
                    }
                }
                let target = group
                    .target_size()
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                let count = request.nodes.len();
                if target < group.min_size().saturating_add(count) {
                    return Err(call.invalid(format_args!(
                        "deleting {count} node(s) from target size {target} would go below the \
                         min size {}",
                        group.min_size()
                    )));
                }
                let nodes: Vec<_> = request.nodes.iter().map(node_from_wire).collect();
                group
                    .delete_nodes(&nodes)
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                Ok(NodeGroupDeleteNodesResponse {})
            })
            .await
    }

    async fn node_group_decrease_target_size(
        &self,
        request: Request<NodeGroupDecreaseTargetSizeRequest>,
    ) -> Result<Response<NodeGroupDecreaseTargetSizeResponse>, Status> {
        Reached::mark(request.extensions());
        let (metadata, extensions, request) = request.into_parts();
        let call = Call::for_group("NodeGroupDecreaseTargetSize", &request.id);
        let call = call.within_deadline_of(&metadata).by_client_of(&extensions);
        call.clone()
            .run(async {
                // The client forwards the core's negative value unchanged (docs/externalgrpc.md
                // GRPC-14, GRPC-24).
                if request.delta >= 0 {
                    return Err(call.invalid_field(FieldError {
                        field: "delta",
                        reason: format!("is {}; it must be negative", request.delta),
                    }));
                }
                let group = self.group(&call, &request.id).await?;
                group
                    .decrease_target_size(i64::from(request.delta))
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                Ok(NodeGroupDecreaseTargetSizeResponse {})
            })
            .await
    }

    async fn node_group_nodes(
        &self,
        request: Request<NodeGroupNodesRequest>,
    ) -> Result<Response<NodeGroupNodesResponse>, Status> {
        Reached::mark(request.extensions());
        let (metadata, extensions, request) = request.into_parts();
        let call = Call::for_group("NodeGroupNodes", &request.id);
        let call = call.within_deadline_of(&metadata).by_client_of(&extensions);
        call.clone()
            .run(async {
                let group = self.group(&call, &request.id).await?;
                let instances = group
                    .nodes()
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                Ok(NodeGroupNodesResponse {
                    instances: instances.iter().map(instance_to_wire).collect(),
                })
            })
            .await
    }

    async fn node_group_template_node_info(
        &self,
        request: Request<NodeGroupTemplateNodeInfoRequest>,
    ) -> Result<Response<NodeGroupTemplateNodeInfoResponse>, Status> {
        Reached::mark(request.extensions());
        let (metadata, extensions, request) = request.into_parts();
        let call = Call::for_group("NodeGroupTemplateNodeInfo", &request.id);
        let call = call.within_deadline_of(&metadata).by_client_of(&extensions);
        call.clone()
            .run(async {
                let group = self.group(&call, &request.id).await?;
                // "No template" is NotImplemented → 12, never an empty nodeBytes, which the
                // upstream core cannot handle (docs/externalgrpc.md GRPC-20).
                let template = group
                    .template_node_info()
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                // The node and its devices travel: the client adds DaemonSet pods itself.
                let answer = NodeGroupTemplateNodeInfoResponse {
                    node_bytes: encode_node(&template.node),
                    resource_slice_bytes: template
                        .resource_slices
                        .iter()
                        .map(encode_resource_slice)
                        .collect(),
                    ..NodeGroupTemplateNodeInfoResponse::default()
                };
                // The copy for old clients doubles the answer; it is left out rather than push
                // the answer past what any client accepts.
                let with_legacy = answer.clone().with_legacy_fields();
                Ok(if with_legacy.encoded_len() <= MAX_RESPONSE_BYTES {
                    with_legacy
                } else {
                    answer
                })
            })
            .await
    }

    async fn node_group_get_options(
        &self,
        request: Request<NodeGroupAutoscalingOptionsRequest>,
    ) -> Result<Response<NodeGroupAutoscalingOptionsResponse>, Status> {
        Reached::mark(request.extensions());
        let (metadata, extensions, request) = request.into_parts();
        let call = Call::for_group("NodeGroupGetOptions", &request.id);
        let call = call.within_deadline_of(&metadata).by_client_of(&extensions);
        call.clone()
            .run(async {
                let group = self.group(&call, &request.id).await?;
                let defaults = request
                    .defaults
                    .as_ref()
                    .ok_or_else(|| call.invalid_field(FieldError::missing("defaults")))?;
                let overrides = group
                    .get_options()
                    .await
                    .map_err(|error| call.cloud_error(error))?;
                Ok(NodeGroupAutoscalingOptionsResponse {
                    // No override is an absent message, which the client reads as "use the
                    // defaults" (docs/externalgrpc.md GRPC-25), not an error.
                    node_group_autoscaling_options: overrides
                        .map(|overrides| options_to_wire(&overrides, defaults))
                        .transpose()
                        .map_err(|error| call.invalid_field(error))?,
                })
            })
            .await
    }
}

/// The pricing period, start before end.
fn pricing_period(
    call: &Call,
    start: Option<prost_types::Timestamp>,
    end: Option<prost_types::Timestamp>,
) -> Result<(Timestamp, Timestamp), Status> {
    let start = timestamp_from_wire("startTimestamp", start).map_err(|e| call.invalid_field(e))?;
    let end = timestamp_from_wire("endTimestamp", end).map_err(|e| call.invalid_field(e))?;
    if end < start {
        return Err(call.invalid(format_args!(
            "endTimestamp ({} ms since the epoch) is before startTimestamp ({} ms)",
            end.millis(),
            start.millis()
        )));
    }
    Ok((start, end))
}

/// The pod of a pricing request, from `pod_bytes` or the field old clients use.
fn read_pod(request: &PricingPodPriceRequest) -> Result<Pod, FieldError> {
    let bytes = request.pod_bytes_or_legacy();
    if bytes.is_empty() {
        return Err(FieldError {
            field: "pod_bytes",
            reason: "is empty: the request must carry the Pod to price".to_string(),
        });
    }
    decode_pod(bytes).map_err(|error| FieldError {
        field: "pod_bytes",
        reason: format!("cannot be read: {error}"),
    })
}
