//! The JSON shapes of the Exoscale API v2 that the provider reads and sends (docs/exoscale.md
//! EXO-05, IAM operations).
//!
//! Every field the API sends is optional here (docs/exoscale.md EXO-Q7): a missing or `null` field
//! reads as absent, never as a crash, and unknown fields are ignored. Field names are kebab-case.

use serde::{Deserialize, Serialize};

/// `manager.type` of an instance that belongs to an Instance Pool.
pub const MANAGER_INSTANCE_POOL: &str = "instance-pool";
/// `manager.type` of an Instance Pool that belongs to an SKS Nodepool.
pub const MANAGER_SKS_NODEPOOL: &str = "sks-nodepool";

/// What manages an instance or a pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct Manager {
    pub id: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

/// A reference to another object by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct IdRef {
    pub id: Option<String>,
}

/// `GET /v2/instance/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct Instance {
    pub id: Option<String>,
    pub name: Option<String>,
    pub state: Option<String>,
    pub manager: Option<Manager>,
}

/// `GET /v2/instance-pool/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct InstancePool {
    pub id: Option<String>,
    pub name: Option<String>,
    pub size: Option<i64>,
    pub state: Option<String>,
    pub instances: Option<Vec<IdRef>>,
    pub manager: Option<Manager>,
}

impl InstancePool {
    /// Member ids; a pool without `instances` has none.
    pub fn member_ids(&self) -> Vec<String> {
        self.instances
            .iter()
            .flatten()
            .filter_map(|member| member.id.clone())
            .collect()
    }
}

/// `GET /v2/quota/{entity}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct Quota {
    pub resource: Option<String>,
    pub usage: Option<i64>,
    pub limit: Option<i64>,
}

/// `GET /v2/sks-cluster`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct SksClusterList {
    pub sks_clusters: Option<Vec<SksCluster>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct SksCluster {
    pub id: Option<String>,
    pub name: Option<String>,
    pub nodepools: Option<Vec<SksNodepool>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct SksNodepool {
    pub id: Option<String>,
    pub name: Option<String>,
    pub size: Option<i64>,
    pub instance_pool: Option<IdRef>,
}

/// The answer of every scale/evict PUT and of `GET /v2/operation/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct Operation {
    pub id: Option<String>,
    pub state: Option<String>,
    pub reason: Option<String>,
}

/// Body of the scale PUTs: exactly `{"size":N}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScaleRequest {
    pub size: i64,
}

/// Body of the evict PUTs: exactly `{"instances":[...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvictRequest {
    pub instances: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/exoscale.md EXO-05 (body shape): compact JSON, nothing else.
    #[test]
    fn c05_request_bodies_are_exact() {
        assert_eq!(
            serde_json::to_string(&ScaleRequest { size: 3 }).unwrap(),
            r#"{"size":3}"#
        );
        assert_eq!(
            serde_json::to_string(&EvictRequest {
                instances: vec!["A".into(), "B".into()]
            })
            .unwrap(),
            r#"{"instances":["A","B"]}"#
        );
    }

    /// docs/exoscale.md EXO-Q7: missing and null fields read as absent; unknown fields are ignored.
    #[test]
    fn missing_fields_are_absent() {
        let pool: InstancePool =
            serde_json::from_str(r#"{"id":"p","instances":null,"extra":{"x":1}}"#).unwrap();
        assert!(pool.member_ids().is_empty());
        assert_eq!(pool.size, None);
        let instance: Instance = serde_json::from_str("{}").unwrap();
        assert_eq!(instance.state, None);
        let list: SksClusterList =
            serde_json::from_str(r#"{"sks-clusters":[{"nodepools":[{"instance-pool":{}}]}]}"#)
                .unwrap();
        assert_eq!(
            list.sks_clusters.unwrap()[0]
                .nodepools
                .as_ref()
                .unwrap()
                .len(),
            1
        );
    }
}
