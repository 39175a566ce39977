//! Two control planes started side by side (as parallel tests do) do not share ports, data or
//! credentials; stopping one releases its port and deletes its directory while the other keeps
//! serving; and an API server stopped for a while comes back with its data.

use std::collections::BTreeMap;
use std::net::TcpStream;

use ferroscale_testing_control_plane::{ControlPlane, Options};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

async fn client_for(control_plane: &ControlPlane) -> Client {
    let kubeconfig = Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client configuration from the kubeconfig");
    Client::try_from(config).expect("client")
}

fn port_of(server_url: &str) -> u16 {
    server_url
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .expect("server URL ends in a port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_instances_are_isolated_and_stop_releases_everything() {
    // Only etcd and the API server: this test is about the instances, not the controllers.
    let minimal = Options {
        scheduler: false,
        controller_manager: false,
        kwok: false,
        ..Options::default()
    };
    let (first, second) = {
        let first = tokio::task::spawn_blocking({
            let options = minimal.clone();
            move || ControlPlane::start_with(options)
        });
        let second = tokio::task::spawn_blocking(move || ControlPlane::start_with(minimal));
        (
            first.await.expect("thread").expect("first control plane"),
            second.await.expect("thread").expect("second control plane"),
        )
    };
    assert_ne!(first.server_url(), second.server_url());
    assert_ne!(first.kubeconfig_path(), second.kubeconfig_path());

    let first_client = client_for(&first).await;
    let second_client = client_for(&second).await;
    let first_maps: Api<ConfigMap> = Api::namespaced(first_client, "default");
    let second_maps: Api<ConfigMap> = Api::namespaced(second_client, "default");
    let marker = ConfigMap {
        metadata: ObjectMeta {
            name: Some("only-in-the-first".to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "instance".to_owned(),
            "first".to_owned(),
        )])),
        ..ConfigMap::default()
    };
    first_maps
        .create(&PostParams::default(), &marker)
        .await
        .expect("create in the first");
    assert!(
        second_maps
            .get_opt("only-in-the-first")
            .await
            .expect("read the second")
            .is_none(),
        "the second instance sees the first one's data"
    );

    // Each instance trusts only its own CA: the first one's admin credentials are refused by the
    // second API server's TLS set-up.
    let mut crossed = Kubeconfig::read_from(first.kubeconfig_path()).expect("kubeconfig");
    for cluster in &mut crossed.clusters {
        if let Some(cluster) = cluster.cluster.as_mut() {
            cluster.server = Some(second.server_url());
        }
    }
    let crossed_client = Client::try_from(
        Config::from_custom_kubeconfig(crossed, &KubeConfigOptions::default())
            .await
            .expect("crossed configuration"),
    )
    .expect("crossed client");
    assert!(
        crossed_client.apiserver_version().await.is_err(),
        "the first instance's credentials worked against the second"
    );

    let first_port = port_of(&first.server_url());
    let first_dir = first
        .logs_dir()
        .parent()
        .expect("logs live in the instance directory")
        .to_path_buf();
    tokio::task::spawn_blocking(move || first.stop())
        .await
        .expect("stop thread");
    assert!(
        TcpStream::connect(("127.0.0.1", first_port)).is_err(),
        "the stopped API server still accepts connections"
    );
    assert!(
        !first_dir.exists(),
        "{} was left behind",
        first_dir.display()
    );

    let still_there = second_maps
        .list(&Default::default())
        .await
        .expect("the second instance keeps serving");
    assert!(
        still_there
            .items
            .iter()
            .all(|map| map.metadata.name.as_deref() != Some("only-in-the-first"))
    );

    // An API server that is away for a while comes back with its data.
    let kept = ConfigMap {
        metadata: ObjectMeta {
            name: Some("kept-across-the-outage".to_owned()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    second_maps
        .create(&PostParams::default(), &kept)
        .await
        .expect("create in the second");
    let second_port = port_of(&second.server_url());
    let second = tokio::task::spawn_blocking(move || second.stop_apiserver().map(|()| second))
        .await
        .expect("stop thread")
        .expect("the API server stops");
    assert!(
        TcpStream::connect(("127.0.0.1", second_port)).is_err(),
        "the stopped API server still accepts connections"
    );
    assert!(
        second_maps.get("kept-across-the-outage").await.is_err(),
        "a request succeeded while the API server was stopped"
    );
    assert!(
        second.stop_apiserver().is_err(),
        "stopping a stopped API server is reported"
    );
    let second = tokio::task::spawn_blocking(move || second.start_apiserver().map(|()| second))
        .await
        .expect("start thread")
        .expect("the API server starts again");
    second_maps
        .get("kept-across-the-outage")
        .await
        .expect("the object survives the outage, and the client reconnects");
    drop(second);
}
