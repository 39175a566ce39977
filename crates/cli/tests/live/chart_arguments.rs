//! Ferroscale in an upstream deployment: the binary started as upstream's Helm chart starts
//! upstream's image (`./cluster-autoscaler` from `/`), with the container arguments the chart
//! renders from its default values for the clusterapi and exoscale providers, and only the paths
//! adapted to a process outside a Pod (kubeconfig, metrics port). It must start, take the Lease,
//! find the configured node groups and finish its first loop.

use std::sync::Arc;

use ferroscale_testing_control_plane::cluster_api::{
    ClusterApiKind, MachineController, ScalableResource, install_cluster_api_crds,
};
use ferroscale_testing_exoscale::{Credentials, FakeExoscale};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

use crate::exoscale::{AbortOnDrop, mirror_pool_members};
use crate::harness::{Autoscaler, Cluster, wait_until};

/// The chart's namespace in both argument lines.
const CHART_NAMESPACE: &str = "default";

/// Waits until a loop's status ConfigMap in the chart's namespace lists node groups (Exoscale
/// finds an Instance Pool through a node of it during the first loop, so its group is listed from
/// the second) and returns them.
async fn node_groups_in_status(cluster: &Cluster, autoscaler: &Autoscaler) -> serde_yaml_ng::Value {
    let read = async || -> Option<serde_yaml_ng::Value> {
        let status = cluster.status_in(CHART_NAMESPACE).await?;
        serde_yaml_ng::from_str(&status).ok()
    };
    wait_until("a status ConfigMap that lists node groups", async || {
        read()
            .await
            .and_then(|status| status["nodeGroups"].as_sequence().map(|g| !g.is_empty()))
            .unwrap_or(false)
    })
    .await;
    let status = read().await.unwrap_or_default();
    assert_eq!(
        status["autoscalerStatus"].as_str(),
        Some("Running"),
        "{status:?}\n{}",
        autoscaler.log()
    );
    status["nodeGroups"].clone()
}

/// What every chart start must show: leader election on (the chart does not turn it off), the
/// Lease in the chart's namespace, and logs without terminal colour codes.
async fn check_upstream_deployment(cluster: &Cluster, autoscaler: &Autoscaler) {
    let lease = Api::<Lease>::namespaced(cluster.client.clone(), CHART_NAMESPACE)
        .get("cluster-autoscaler")
        .await
        .unwrap_or_else(|e| panic!("the Lease in {CHART_NAMESPACE}: {e}\n{}", autoscaler.log()));
    assert!(
        lease.spec.and_then(|s| s.holder_identity).is_some(),
        "the Lease has a holder"
    );
    let log = autoscaler.log();
    assert!(
        !log.contains('\u{1b}'),
        "no ANSI escape codes in a file: {log}"
    );
    assert!(!log.contains("error: "), "{log}");
    // klog's text lines, as upstream's: severity letter, month and day, then the time.
    let klog_line = |line: &str| {
        let bytes = line.as_bytes();
        bytes.len() > 6
            && matches!(bytes[0], b'I' | b'W' | b'E' | b'F')
            && bytes[1..5].iter().all(u8::is_ascii_digit)
            && bytes[5] == b' '
    };
    assert!(
        log.lines().filter(|l| !l.is_empty()).all(klog_line),
        "every line is a klog line: {log}"
    );
    // --v=4 shows the loop's decisions (V 1), not every provider call (V 5).
    assert!(log.contains("] \"waiting for leadership\""), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_clusterapi_arguments_start_and_finish_a_loop() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let installed = install_cluster_api_crds(&client, "cluster.x-k8s.io")
        .await
        .expect("install the Cluster API CRDs");
    let api = installed.preferred();
    let _controller =
        MachineController::start(client.clone(), client.clone(), &api.group, &api.version)
            .await
            .expect("start the test Machine controller");
    let mut demo = ScalableResource::new(&api, CHART_NAMESPACE, "demo-workers")
        .replicas(1)
        .size_limits(1, 3)
        .capacity("4", "16Gi");
    demo.cluster_name = "demo".to_string();
    demo.create(&client, ClusterApiKind::MachineDeployment)
        .await
        .expect("create the MachineDeployment of cluster demo");
    let mut other = ScalableResource::new(&api, CHART_NAMESPACE, "other-workers")
        .replicas(0)
        .size_limits(0, 3)
        .capacity("4", "16Gi");
    other.cluster_name = "other".to_string();
    other
        .create(&client, ClusterApiKind::MachineDeployment)
        .await
        .expect("create a MachineDeployment of another cluster");

    let autoscaler = cluster.start_as_upstream_image(
        "chart-clusterapi",
        &[
            "--cloud-provider=clusterapi",
            "--namespace=default",
            "--node-group-auto-discovery=clusterapi:clusterName=demo",
            "--logtostderr=true",
            "--stderrthreshold=info",
            "--v=4",
        ],
        &[],
    );
    let groups = node_groups_in_status(&cluster, &autoscaler).await;
    let names: Vec<&str> = groups
        .as_sequence()
        .map(|g| g.iter().filter_map(|g| g["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names.len(), 1, "only cluster demo's group: {names:?}");
    assert!(names[0].contains("demo-workers"), "{names:?}");
    check_upstream_deployment(&cluster, &autoscaler).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_exoscale_arguments_start_and_finish_a_loop() {
    let cluster = Cluster::start().await;
    let fake = Arc::new(FakeExoscale::start(Credentials::new("EXOtestkey", "test-secret")).await);
    // The provider finds an Instance Pool through a node of it, as upstream's does: the mirror
    // plays Exoscale's instance joining the cluster.
    let pool = fake.add_instance_pool("pool1", 1);
    let _mirror = AbortOnDrop(mirror_pool_members(&fake, &pool, cluster.client.clone()));
    cluster.wait_pool_ready(1).await;
    let endpoint = fake.base_url();
    let autoscaler = cluster.start_as_upstream_image(
        "chart-exoscale",
        &[
            "--cloud-provider=exoscale",
            "--namespace=default",
            "--nodes=1:5:pool1",
            "--logtostderr=true",
            "--stderrthreshold=info",
            "--v=4",
        ],
        &[
            ("EXOSCALE_API_KEY", "EXOtestkey"),
            ("EXOSCALE_API_SECRET", "test-secret"),
            ("EXOSCALE_ZONE", "ch-gva-2"),
            ("EXOSCALE_API_ENDPOINT", &endpoint),
        ],
    );
    let groups = node_groups_in_status(&cluster, &autoscaler).await;
    let groups = groups.as_sequence().cloned().unwrap_or_default();
    assert_eq!(groups.len(), 1, "{groups:?}\n{}", autoscaler.log());
    let health = &groups[0]["health"];
    assert_eq!(health["minSize"].as_u64(), Some(1), "{groups:?}");
    assert_eq!(health["maxSize"].as_u64(), Some(5), "{groups:?}");
    check_upstream_deployment(&cluster, &autoscaler).await;
    assert!(!autoscaler.log().contains("test-secret"));
}
