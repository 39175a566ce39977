//! A node group of the external service (docs/externalgrpc.md GRPC-09). Its id, bounds and debug
//! text are those of the `NodeGroup` message it was built from and never change; its template is
//! asked for once and kept for the object's lifetime. Everything else is asked of the service at
//! every call.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use ferroscale_core::cloud::{CloudError, GroupOptions, Instance, NodeGroup, NodeTemplate};
use ferroscale_externalgrpc_proto::{decode_node, decode_resource_slice, v1};
use ferroscale_model::Node;
use ferroscale_model::{DeviceScope, ResourceSlice};
use tokio::sync::Mutex;

use crate::conversions::{self, NodeGroupDefaults};
use crate::rpc::{Caller, Method, RpcError, Subject, log_cached};

/// One group, as the service described it when this object was built.
pub struct ExternalGrpcNodeGroup {
    id: String,
    min_size: usize,
    max_size: usize,
    debug: String,
    caller: Caller,
    defaults: Arc<NodeGroupDefaults>,
    /// The first template the service sent. The lock is held across the RPC so that concurrent
    /// first uses ask once.
    template: Mutex<Option<NodeTemplate>>,
}

impl ExternalGrpcNodeGroup {
    /// Builds the object from a group message, refusing negative bounds and min > max. `method`
    /// names the call the message came from, for the error.
    pub(crate) fn from_message(
        message: &v1::NodeGroup,
        method: Method,
        caller: Caller,
        defaults: Arc<NodeGroupDefaults>,
    ) -> Result<ExternalGrpcNodeGroup, CloudError> {
        let (min_size, max_size) = conversions::group_bounds(message).map_err(|reason| {
            RpcError::refused_answer(method, Subject::Group(message.id.clone()), reason)
        })?;
        Ok(ExternalGrpcNodeGroup {
            id: message.id.clone(),
            min_size,
            max_size,
            debug: message.debug.clone(),
            caller,
            defaults,
            template: Mutex::new(None),
        })
    }

    fn subject(&self) -> Subject {
        Subject::Group(self.id.clone())
    }

    /// `delta` as the wire's int32, or an error naming the call and the value.
    fn wire_delta<D>(&self, method: Method, delta: D) -> Result<i32, CloudError>
    where
        D: TryInto<i32> + fmt::Display + Copy,
    {
        delta.try_into().map_err(|_| {
            CloudError::InvalidRequest(format!(
                "externalgrpc {method} for node group {:?}: delta {delta} does not fit the \
                 protocol's int32",
                self.id
            ))
        })
    }
}

impl fmt::Debug for ExternalGrpcNodeGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExternalGrpcNodeGroup")
            .field("id", &self.id)
            .field("min_size", &self.min_size)
            .field("max_size", &self.max_size)
            .field("debug", &self.debug)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl NodeGroup for ExternalGrpcNodeGroup {
    fn id(&self) -> &str {
        &self.id
    }

    fn min_size(&self) -> usize {
        self.min_size
    }

    fn max_size(&self) -> usize {
        self.max_size
    }

    /// The service's own description of the group.
    fn debug(&self) -> String {
        self.debug.clone()
    }

    async fn target_size(&self) -> Result<usize, CloudError> {
        let method = Method::NodeGroupTargetSize;
        let request = v1::NodeGroupTargetSizeRequest {
            id: self.id.clone(),
        };
        let answer = self
            .caller
            .call(
                method,
                &self.subject(),
                request,
                |mut client, request| async move { client.node_group_target_size(request).await },
            )
            .await?;
        usize::try_from(answer.target_size).map_err(|_| {
            RpcError::refused_answer(
                method,
                self.subject(),
                format!("targetSize {} is negative", answer.target_size),
            )
        })
    }

    async fn increase_size(&self, delta: usize) -> Result<(), CloudError> {
        let method = Method::NodeGroupIncreaseSize;
        let delta = self.wire_delta(method, delta)?;
        let request = v1::NodeGroupIncreaseSizeRequest {
            delta,
            id: self.id.clone(),
        };
        self.caller
            .call(
                method,
                &self.subject(),
                request,
                |mut client, request| async move { client.node_group_increase_size(request).await },
            )
            .await?;
        Ok(())
    }

    /// Sends one `ExternalGrpcNode` per node, in order, even for an empty list.
    async fn delete_nodes(&self, nodes: &[Node]) -> Result<(), CloudError> {
        let request = v1::NodeGroupDeleteNodesRequest {
            nodes: nodes.iter().map(v1::ExternalGrpcNode::from_node).collect(),
            id: self.id.clone(),
        };
        self.caller
            .call(
                Method::NodeGroupDeleteNodes,
                &self.subject(),
                request,
                |mut client, request| async move { client.node_group_delete_nodes(request).await },
            )
            .await?;
        Ok(())
    }

    /// Forwards the core's negative `delta` unchanged.
    async fn decrease_target_size(&self, delta: i64) -> Result<(), CloudError> {
        let method = Method::NodeGroupDecreaseTargetSize;
        let request = v1::NodeGroupDecreaseTargetSizeRequest {
            delta: self.wire_delta(method, delta)?,
            id: self.id.clone(),
        };
        self.caller
            .call(
                method,
                &self.subject(),
                request,
                |mut client, request| async move {
                    client.node_group_decrease_target_size(request).await
                },
            )
            .await?;
        Ok(())
    }

    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        let request = v1::NodeGroupNodesRequest {
            id: self.id.clone(),
        };
        let answer = self
            .caller
            .call(
                Method::NodeGroupNodes,
                &self.subject(),
                request,
                |mut client, request| async move { client.node_group_nodes(request).await },
            )
            .await?;
        Ok(answer
            .instances
            .into_iter()
            .map(conversions::instance)
            .collect())
    }

    /// The first template the service sends, kept for this object's lifetime. Status 12 is
    /// NotImplemented; it and every failure are asked again at the next call. Unlike upstream,
    /// an empty `nodeBytes` is an error too, and is not kept: upstream keeps it as "no
    /// template" for good, and its core then crashes on the missing node.
    async fn template_node_info(&self) -> Result<NodeTemplate, CloudError> {
        let method = Method::NodeGroupTemplateNodeInfo;
        let mut cached = self.template.lock().await;
        if let Some(template) = cached.as_ref() {
            log_cached(method, &self.subject());
            return Ok(template.clone());
        }
        let request = v1::NodeGroupTemplateNodeInfoRequest {
            id: self.id.clone(),
        };
        let answer =
            self.caller
                .call(
                    method,
                    &self.subject(),
                    request,
                    |mut client, request| async move {
                        client.node_group_template_node_info(request).await
                    },
                )
                .await?;
        let bytes = answer.template_node_bytes();
        let invalid = |reason: String| RpcError::refused_answer(method, self.subject(), reason);
        if bytes.is_empty() {
            return Err(invalid(
                "nodeBytes is empty, so there is no template node; a server without templates \
                 should answer status 12 UNIMPLEMENTED instead"
                    .to_string(),
            ));
        }
        let node = decode_node(bytes).map_err(|error| invalid(error.to_string()))?;
        let resource_slices =
            template_slices(&node, &answer.resource_slice_bytes).map_err(invalid)?;
        let template = NodeTemplate {
            node,
            pods: Vec::new(),
            csi_node: None,
            resource_slices,
        };
        *cached = Some(template.clone());
        Ok(template)
    }

    /// Asks at every call, sending the engine's defaults. An absent answer means "no override"
    /// (`Ok(None)`); status 12 is NotImplemented.
    async fn get_options(&self) -> Result<Option<GroupOptions>, CloudError> {
        let method = Method::NodeGroupGetOptions;
        let request = v1::NodeGroupAutoscalingOptionsRequest {
            id: self.id.clone(),
            defaults: Some(self.defaults.to_wire()),
        };
        let answer = self
            .caller
            .call(
                method,
                &self.subject(),
                request,
                |mut client, request| async move { client.node_group_get_options(request).await },
            )
            .await?;
        let Some(options) = answer.node_group_autoscaling_options else {
            return Ok(None);
        };
        conversions::group_options(&options)
            .map(Some)
            .map_err(|reason| RpcError::refused_answer(method, self.subject(), reason))
    }
}

/// The most ResourceSlices one template answer may carry; a node publishes a handful (one or a few
/// per driver), so more is a server bug, refused before anything is decoded.
pub(crate) const MAX_TEMPLATE_SLICES: usize = 128;

/// `resourceSliceBytes` of a template answer as the template node's slices. Each must decode and
/// be node-local (a template's slices are copied for every new node, which only makes sense for
/// devices of the node itself, as upstream requires); it is pointed at the template node
/// whatever node name the server wrote. The error names the field and the entry.
fn template_slices(node: &Node, entries: &[Vec<u8>]) -> Result<Vec<ResourceSlice>, String> {
    if entries.len() > MAX_TEMPLATE_SLICES {
        return Err(format!(
            "resourceSliceBytes has {} entries; at most {MAX_TEMPLATE_SLICES} are accepted",
            entries.len()
        ));
    }
    let mut slices = Vec::with_capacity(entries.len());
    for (i, bytes) in entries.iter().enumerate() {
        let mut slice = decode_resource_slice(bytes)
            .map_err(|error| format!("resourceSliceBytes[{i}]: {error}"))?;
        if slice.node_name().is_none() {
            return Err(format!(
                "resourceSliceBytes[{i}]: ResourceSlice {} is not node-local (no spec.nodeName); \
                 a template carries only the devices of the template node itself",
                slice.name
            ));
        }
        slice.scope = DeviceScope::Node(node.name.clone());
        slices.push(slice);
    }
    Ok(slices)
}
