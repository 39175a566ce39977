//! What the controller asks the provider on one pass: the groups, each group's instances, then
//! only what the rules need of the nodes read just before — `NodeGroupForNode` for possible
//! deletion candidates and the templates of groups that list an uninitialized node. Every
//! failed call is kept, typed, in the answers: the rules hold deletions back on it.

use std::sync::Arc;

use ferroscale_model::Node;
use futures::StreamExt;

use crate::cloud::{CloudError, CloudProvider, NodeGroup};

use super::rules::{
    self, GroupAnswers, InstanceIndex, ProviderAnswers, ProviderFailure, cloud_label_map,
};

/// How many `NodeGroupForNode` calls may be in flight at once.
const LOOKUP_CONCURRENCY: usize = 16;

fn failure(call: &'static str, subject: String, error: &CloudError) -> ProviderFailure {
    ProviderFailure {
        call,
        subject,
        error: error.to_string(),
    }
}

/// Asks the provider what the rules need about `nodes`.
pub(super) async fn ask_provider(
    cloud: &dyn CloudProvider,
    nodes: &[Arc<Node>],
) -> ProviderAnswers {
    let groups = match cloud.node_groups().await {
        Ok(groups) => groups,
        Err(error) => {
            return ProviderAnswers::failed(failure(
                "NodeGroups",
                "the cloud provider".to_string(),
                &error,
            ));
        }
    };
    let mut answers = ProviderAnswers::default();
    let lists = futures::future::join_all(groups.iter().map(|group| group.nodes())).await;
    for (group, list) in groups.iter().zip(lists) {
        let instances = match list {
            Ok(instances) => Some(instances.into_iter().map(|i| i.id).collect()),
            Err(error) => {
                answers.failures.push(failure(
                    "Nodes",
                    format!("node group {}", group.id()),
                    &error,
                ));
                None
            }
        };
        answers.groups.push(GroupAnswers {
            id: group.id().to_string(),
            instances,
            template: None,
        });
    }

    let (to_place, to_read) = {
        let index = InstanceIndex::new(&answers.groups);
        let to_place: Vec<Arc<Node>> = rules::nodes_to_place(nodes, &index)
            .into_iter()
            .cloned()
            .collect();
        (to_place, rules::templates_to_read(nodes, &index))
    };
    let mut lookups: Vec<_> = futures::stream::iter(to_place)
        .map(|node| async move {
            let answer = cloud.node_group_for_node(&node).await;
            (node, answer)
        })
        .buffer_unordered(LOOKUP_CONCURRENCY)
        .collect()
        .await;
    // They finish in any order; the answers and failures are kept by node name.
    lookups.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    for (node, answer) in lookups {
        match answer {
            Ok(group) => {
                answers
                    .placements
                    .insert(node.name.clone(), group.map(|g| g.id().to_string()));
            }
            Err(error) => answers.failures.push(failure(
                "NodeGroupForNode",
                format!("node {}", node.name),
                &error,
            )),
        }
    }

    for id in to_read {
        let Some(group) = groups.iter().find(|g| g.id() == id) else {
            continue;
        };
        let template = read_template(group.as_ref(), &mut answers.failures).await;
        if let Some(answer) = answers.groups.iter_mut().find(|g| g.id == id) {
            answer.template = Some(template);
        }
    }
    answers
}

/// A group's template labels. A provider without templates ("not implemented") answered; any
/// other error is a failed call too.
async fn read_template(
    group: &dyn NodeGroup,
    failures: &mut Vec<ProviderFailure>,
) -> Result<ferroscale_model::Labels, String> {
    match group.template_node_info().await {
        Ok(template) => Ok(cloud_label_map(&template.node.labels)),
        Err(CloudError::NotImplemented) => Err(
            "the provider has no template for this group (TemplateNodeInfo is not implemented)"
                .to_string(),
        ),
        Err(error) => {
            failures.push(failure(
                "TemplateNodeInfo",
                format!("node group {}", group.id()),
                &error,
            ));
            Err(error.to_string())
        }
    }
}
