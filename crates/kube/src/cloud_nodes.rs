//! The cloud node controller's writes over the API server (`NodeObjectApi` for
//! [`KubeCluster`], docs/cloud-node-controller.md): a Node read by GET (never from the watch
//! cache), its initialization as one replace guarded by the `resourceVersion` that was read, and
//! its deletion with the uid and `resourceVersion` as preconditions, so the API server refuses
//! to delete a Node that changed or was registered again since the controller looked at it.
//! What to write and whether to write at all is decided in `ferroscale-core`.

use async_trait::async_trait;
use ferroscale_core::cloud_node_controller::{LiveNode, NodeInitializationWrite, NodeObjectApi};
use ferroscale_core::kubernetes::ClusterError;
use ferroscale_objects::node_from_k8s;
use kube::api::{DeleteParams, PostParams, Preconditions};

use crate::cluster::{KubeCluster, cluster_error};

#[async_trait]
impl NodeObjectApi for KubeCluster {
    async fn read_node(&self, name: &str) -> Result<Option<LiveNode>, ClusterError> {
        let Some(object) = self
            .nodes()
            .get_opt(name)
            .await
            .map_err(|e| cluster_error("Node", name, e))?
        else {
            return Ok(None);
        };
        let resource_version = object.metadata.resource_version.clone().ok_or_else(|| {
            ClusterError::Api(format!(
                "Node {name}: metadata.resourceVersion: missing in the API server's answer"
            ))
        })?;
        let node = node_from_k8s(&object).map_err(|e| ClusterError::Api(e.to_string()))?;
        Ok(Some(LiveNode {
            node,
            resource_version,
        }))
    }

    /// One GET and one replace: the object is changed only if it is still the version the
    /// controller checked (the replace carries that `resourceVersion`), and a label the object
    /// has is never overwritten.
    async fn initialize_node(&self, write: &NodeInitializationWrite) -> Result<(), ClusterError> {
        let name = write.node.as_str();
        let nodes = self.nodes();
        let mut object = nodes
            .get(name)
            .await
            .map_err(|e| cluster_error("Node", name, e))?;
        let meta = &mut object.metadata;
        if meta.uid.as_deref() != Some(write.uid.as_str())
            || meta.resource_version.as_deref() != Some(write.resource_version.as_str())
        {
            return Err(ClusterError::Conflict {
                kind: "Node",
                name: name.to_string(),
                message: format!(
                    "changed since it was checked (uid {:?}, resourceVersion {:?}; checked {}, {})",
                    meta.uid, meta.resource_version, write.uid, write.resource_version
                ),
            });
        }
        let labels = meta.labels.get_or_insert_with(Default::default);
        for (key, value) in &write.add_labels {
            labels.entry(key.clone()).or_insert_with(|| value.clone());
        }
        if let Some(taints) = object.spec.as_mut().and_then(|spec| spec.taints.as_mut()) {
            taints.retain(|taint| taint.key != write.remove_taint);
        }
        nodes
            .replace(name, &PostParams::default(), &object)
            .await
            .map_err(|e| cluster_error("Node", name, e))?;
        tracing::info!(
            node = name,
            labels = ?write.add_labels,
            taint = %write.remove_taint,
            "cloud node controller: initialized node"
        );
        Ok(())
    }

    async fn delete_node(
        &self,
        name: &str,
        uid: &str,
        resource_version: &str,
    ) -> Result<(), ClusterError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: Some(resource_version.to_string()),
            }),
            ..DeleteParams::default()
        };
        self.nodes()
            .delete(name, &params)
            .await
            .map_err(|e| cluster_error("Node", name, e))?;
        tracing::info!(
            node = name,
            uid,
            resource_version,
            "cloud node controller: deleted node"
        );
        Ok(())
    }
}
