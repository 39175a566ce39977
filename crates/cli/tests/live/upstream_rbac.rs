//! Ferroscale under the identity upstream's Helm chart gives upstream's image: an operator who
//! swaps the image keeps the chart's ServiceAccount, ClusterRole and Role. The rules below are
//! those the `cluster-autoscaler` chart (9.x) renders for the kwok provider with its default
//! values (cluster-scoped RBAC, no priority expander, leader election on a Lease), written here
//! as facts. They grant less than Ferroscale's own manifests: no PriorityClasses, no Dynamic
//! Resource Allocation objects, no `patch` of nodes, and only the `cluster-autoscaler-status`
//! ConfigMap and the `cluster-autoscaler` Lease by name. Started with the chart's argument line,
//! Ferroscale must still scale up and down, say once what it cannot read, and report it.

use std::collections::BTreeSet;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

use crate::harness::{
    Autoscaler, Cluster, NAMESPACE, TO_BE_DELETED, apply_manifest_text, wait_until,
};

/// The chart's ServiceAccount (its full name for a release called `upstream`).
const ACCOUNT: &str = "upstream-cluster-autoscaler";

/// The ClusterRole, Role and bindings upstream's chart renders for `cloudProvider: kwok`.
fn upstream_chart_rbac() -> String {
    format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: {ACCOUNT}, namespace: {NAMESPACE}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {ACCOUNT}}}
rules:
- {{apiGroups: [""], resources: [events, endpoints], verbs: [create, patch]}}
- {{apiGroups: [""], resources: [pods/eviction], verbs: [create]}}
- {{apiGroups: [""], resources: [pods/status], verbs: [update]}}
- {{apiGroups: [""], resources: [endpoints], resourceNames: [cluster-autoscaler], verbs: [get, update]}}
- {{apiGroups: [""], resources: [nodes], verbs: [watch, list, create, delete, get, update]}}
- apiGroups: [""]
  resources: [namespaces, pods, services, replicationcontrollers, persistentvolumeclaims, persistentvolumes]
  verbs: [watch, list, get]
- {{apiGroups: [batch], resources: [jobs, cronjobs], verbs: [watch, list, get]}}
- {{apiGroups: [batch, extensions], resources: [jobs], verbs: [get, list, patch, watch]}}
- {{apiGroups: [extensions], resources: [replicasets, daemonsets], verbs: [watch, list, get]}}
- {{apiGroups: [policy], resources: [poddisruptionbudgets], verbs: [watch, list]}}
- {{apiGroups: [apps], resources: [daemonsets, replicasets, statefulsets], verbs: [watch, list, get]}}
- apiGroups: [storage.k8s.io]
  resources: [storageclasses, csinodes, csidrivers, csistoragecapacities, volumeattachments]
  verbs: [watch, list, get]
- {{apiGroups: [""], resources: [configmaps], verbs: [list, watch, get]}}
- {{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [create]}}
- {{apiGroups: [coordination.k8s.io], resources: [leases], resourceNames: [cluster-autoscaler], verbs: [get, update]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {ACCOUNT}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {ACCOUNT}}}
subjects: [{{kind: ServiceAccount, name: {ACCOUNT}, namespace: {NAMESPACE}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {ACCOUNT}, namespace: {NAMESPACE}}}
rules:
- {{apiGroups: [""], resources: [configmaps], verbs: [create]}}
- {{apiGroups: [""], resources: [configmaps], resourceNames: [cluster-autoscaler-status], verbs: [delete, get, update]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {ACCOUNT}, namespace: {NAMESPACE}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {ACCOUNT}}}
subjects: [{{kind: ServiceAccount, name: {ACCOUNT}, namespace: {NAMESPACE}}}]
"#
    )
}

/// The status ConfigMap as YAML, once a loop has written it.
async fn status(cluster: &Cluster) -> serde_yaml_ng::Value {
    let text = cluster.status().await.unwrap_or_default();
    serde_yaml_ng::from_str(&text).unwrap_or_default()
}

fn start_with_chart_arguments(cluster: &Cluster, kubeconfig: &std::path::Path) -> Autoscaler {
    // The chart's container arguments for cloudProvider kwok: the provider and the release
    // namespace, then `extraArgs` in key order (its defaults logtostderr, stderrthreshold and v,
    // plus an operator's quicker scale-down and loop).
    cluster.start_as_upstream_image_as(
        "upstream-rbac",
        &[
            "--cloud-provider=kwok",
            &format!("--namespace={NAMESPACE}"),
            "--logtostderr=true",
            "--node-delete-delay-after-taint=2s",
            "--scale-down-delay-after-add=0s",
            "--scale-down-unneeded-time=5s",
            "--scan-interval=2s",
            "--stderrthreshold=info",
            "--v=4",
        ],
        &[("KWOK_PROVIDER_CONFIGMAP", "kwok-provider-config")],
        kubeconfig,
    )
}

/// The whole cycle under upstream's chart identity: the start does not wait for what it may not
/// read, pending pods get nodes, idle nodes go, the Lease and the status ConfigMap are the
/// chart's, and what is missing is said once in the log, in the status and in a metric.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_upstream_charts_rbac_pods_get_nodes_and_idle_nodes_go() {
    let cluster = Cluster::start().await;
    apply_manifest_text(
        &cluster.client,
        &upstream_chart_rbac(),
        "upstream chart RBAC",
    )
    .await;
    let kubeconfig = cluster.service_account_kubeconfig_of(ACCOUNT).await;
    let autoscaler = start_with_chart_arguments(&cluster, &kubeconfig);

    wait_until("the status ConfigMap of the first loop", async || {
        cluster.status().await.is_some()
    })
    .await;

    // Scale-up: three 3-CPU pods on 4-CPU nodes.
    crate::harness::apply_manifest(
        &cluster.client,
        &crate::harness::deploy_dir().join("examples/kwok-demo.yaml"),
    )
    .await;
    let running = cluster.wait_running("demo", 3).await;
    let nodes = cluster.wait_pool_ready(3).await;
    assert_eq!(
        running.values().collect::<BTreeSet<_>>().len(),
        3,
        "one pod per new node: {running:?}\n{}",
        autoscaler.log()
    );

    // Scale-down: the pods go, the nodes are tainted, then deleted.
    cluster.scale_app("demo", 0).await;
    let tainted = cluster.wait_pool_removed().await;
    assert!(
        !tainted.is_empty(),
        "nodes carry {TO_BE_DELETED} before they go ({nodes:?})\n{}",
        autoscaler.log()
    );

    // The chart's Lease, held.
    let lease = Api::<Lease>::namespaced(cluster.client.clone(), NAMESPACE)
        .get("cluster-autoscaler")
        .await
        .unwrap_or_else(|e| panic!("the Lease: {e}\n{}", autoscaler.log()));
    assert!(lease.spec.and_then(|s| s.holder_identity).is_some());

    // What the identity may not read: said once each, in the status and as a metric.
    let log = autoscaler.log();
    for permission in [
        "list/watch priorityclasses.scheduling.k8s.io",
        "list/watch resourceslices.resource.k8s.io",
        "list/watch resourceclaimtemplates.resource.k8s.io",
    ] {
        let lines = log.lines().filter(|l| l.contains(permission)).count();
        assert_eq!(lines, 1, "{permission} is named once: {log}");
    }
    let status = status(&cluster).await;
    let missing = status["clusterWide"]["missingPermissions"]
        .as_sequence()
        .cloned()
        .unwrap_or_default();
    let missing: Vec<&str> = missing.iter().filter_map(|m| m.as_str()).collect();
    assert!(
        missing
            .iter()
            .any(|m| m.contains("priorityclasses.scheduling.k8s.io")),
        "{status:?}"
    );
    assert_eq!(
        autoscaler.metric_sum("ferroscale_missing_permissions"),
        missing.len() as f64,
        "{status:?}"
    );
    assert!(
        autoscaler
            .metric(
                "ferroscale_missing_permissions{resource=\"priorityclasses.scheduling.k8s.io\"}"
            )
            .is_some(),
        "{:?}",
        autoscaler.metrics()
    );
    // The kinds it may not read are empty by design, not a view that is behind: scale-down
    // went ahead above, and no line says otherwise.
    assert!(!log.contains("may be behind"), "{log}");
    assert!(!log.contains("error: "), "{log}");
}
