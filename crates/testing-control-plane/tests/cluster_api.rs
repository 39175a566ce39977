//! The Cluster API test support against a real control plane: the real CRDs installed (also under
//! another group, as the autoscaler's `CAPI_GROUP` needs), and the test controller scaling Machines
//! and kwok Nodes. Each test starts its own control plane; run with `--test-threads=1` on 2 cores.

use ferroscale_testing_control_plane::cluster_api::{
    CLUSTER_API_GROUP, create_object, create_test_machine_template,
};
use ferroscale_testing_control_plane::{
    ClusterApiKind, ControlPlane, Options, ScalableResource, install_cluster_api_crds,
};
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

async fn start(options: Options) -> (ControlPlane, Client) {
    let control_plane = tokio::task::spawn_blocking(move || ControlPlane::start_with(options))
        .await
        .expect("control-plane start task")
        .expect("start the test control plane");
    let client = client_of(&control_plane).await;
    (control_plane, client)
}

async fn client_of(control_plane: &ControlPlane) -> Client {
    let kubeconfig = Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client config");
    Client::try_from(config).expect("client")
}

/// An API server and etcd only: enough for CRDs and a management cluster.
fn api_server_only() -> Options {
    Options {
        scheduler: false,
        controller_manager: false,
        kwok: false,
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_crds_are_served_under_their_own_group_and_a_renamed_one() {
    let (_control_plane, client) = start(api_server_only()).await;
    for group in [CLUSTER_API_GROUP, "test.k8s.io"] {
        let installed = install_cluster_api_crds(&client, group)
            .await
            .expect("install the Cluster API CRDs");
        assert_eq!(installed.group, group);
        // Without CAPI_VERSION the autoscaler takes the preferred version.
        assert_eq!(installed.preferred_version, "v1beta2", "{installed:?}");
        assert_eq!(
            installed.served_versions,
            ["v1beta2", "v1beta1"],
            "{installed:?}"
        );

        // The builders' objects pass the real schemas, and the scale subresource the autoscaler
        // reads and patches works under the group.
        let api = installed.preferred();
        let resource = ScalableResource::new(&api, "default", "md-0")
            .replicas(2)
            .size_limits(1, 5);
        create_object(
            &client,
            &api,
            ClusterApiKind::MachineDeployment,
            &resource.machine_deployment(),
        )
        .await
        .expect("create a MachineDeployment");
        let deployments = api.namespaced(&client, ClusterApiKind::MachineDeployment, "default");
        let scale = deployments.get_scale("md-0").await.expect("read the scale");
        assert_eq!(scale.spec.and_then(|spec| spec.replicas), Some(2));
        deployments
            .patch_scale(
                "md-0",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "replicas": 0 } })),
            )
            .await
            .expect("scale to zero");
        let stored = deployments
            .get("md-0")
            .await
            .expect("read the MachineDeployment");
        assert_eq!(stored.data["spec"]["replicas"], 0);
        assert_eq!(
            stored.metadata.annotations.unwrap_or_default()
                [&format!("{group}/cluster-api-autoscaler-node-group-max-size")],
            "5"
        );
    }

    // The infrastructure template keeps the status the scale-from-zero path reads.
    let capacity = [("cpu", "8"), ("memory", "32Gi"), ("nvidia.com/gpu", "1")]
        .into_iter()
        .map(|(name, quantity)| (name.to_owned(), quantity.to_owned()))
        .collect();
    let template = create_test_machine_template(
        &client,
        "default",
        "tpl",
        &capacity,
        Some(("arm64", "linux")),
    )
    .await
    .expect("create a TestMachineTemplate");
    assert_eq!(template.data["status"]["capacity"]["memory"], "32Gi");
    assert_eq!(template.data["status"]["capacity"]["nvidia.com/gpu"], "1");
    assert_eq!(template.data["status"]["nodeInfo"]["architecture"], "arm64");
    assert_eq!(
        template.data["status"]["nodeInfo"]["operatingSystem"],
        "linux"
    );
}
