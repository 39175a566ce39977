//! The faulty provider against the real control plane: the kwok provider wrapped in
//! `FaultyProvider`, served by `ServedProvider` with the SDK's mutual TLS, and called through the
//! real externalgrpc client from a cloud-config file with a client certificate of CN `replica-0`,
//! exactly as `ferroscale run --cloud-provider=externalgrpc` calls a provider. Each fault does
//! what the live tests rely on it to do, seen from both sides: the error the client gets, and
//! what the cloud (the kwok provider, the Node objects) really did.
//!
//! The tests share one control plane while they run at the same time (the last to finish stops
//! it); each has a kwok group of its own (its own ConfigMaps, nodes named after it).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use ferroscale_core::cloud::{CloudError, CloudProvider, InstanceState, NodeGroup};
use ferroscale_externalgrpc_sdk::MutualTls;
use ferroscale_model::{Node, Resources};
use ferroscale_provider_externalgrpc::{ExternalGrpcProvider, NodeGroupDefaults};
use ferroscale_provider_kwok::{ConfigSource, KwokProvider};
use ferroscale_testing_control_plane::ControlPlane;
use ferroscale_testing_faults::provider::{
    CallRecord, CallResult, ClientTls, Fault, FaultyProvider, Injection, LostAnswer, Method,
    PHANTOM_ID_PREFIX, ServedProvider,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node as KubeNode};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

const NAMESPACE: &str = "kube-system";
/// How long anything the tests wait for may take on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(60);
/// The deadline of the clients that are not testing deadlines (`ferroscale run`'s live tests
/// use the same).
const GRPC_TIMEOUT: Duration = Duration::from_secs(10);

/// The control plane of the tests running now.
static SHARED_CONTROL_PLANE: Mutex<Weak<ControlPlane>> = Mutex::new(Weak::new());

async fn control_plane() -> Arc<ControlPlane> {
    tokio::task::spawn_blocking(|| {
        let mut shared = SHARED_CONTROL_PLANE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(running) = shared.upgrade() {
            return running;
        }
        let started = Arc::new(
            ControlPlane::start()
                .expect("control plane starts (run scripts/control-plane/build.sh first)"),
        );
        *shared = Arc::downgrade(&started);
        started
    })
    .await
    .expect("start-up thread")
}

async fn put_configmap(kube: &kube::Client, name: &str, key: &str, text: String) {
    let api: Api<ConfigMap> = Api::namespaced(kube.clone(), NAMESPACE);
    let configmap = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(key.to_string(), text)])),
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &configmap)
        .await
        .expect("create ConfigMap");
}

/// One test's cloud: a kwok group `group` (0..max) of 4-CPU nodes, wrapped and served.
struct Cloud {
    group: &'static str,
    kube: kube::Client,
    /// The wrapped provider: what the cloud really did, without faults or phantoms.
    kwok: Arc<KwokProvider>,
    faulty: Arc<FaultyProvider>,
    served: ServedProvider,
    dir: tempfile::TempDir,
    control_plane: Arc<ControlPlane>,
}

impl Cloud {
    async fn start(group: &'static str, max: usize) -> Cloud {
        let control_plane = control_plane().await;
        let kubeconfig =
            Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("admin kubeconfig");
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .expect("client configuration");
        let kube = kube::Client::try_from(config).expect("Kubernetes client");

        let config_name = format!("{group}-config");
        let templates_name = format!("{group}-templates");
        put_configmap(
            &kube,
            &config_name,
            "config",
            format!(
                "apiVersion: v1alpha1\nreadNodesFrom: configmap\n\
                 nodegroups:\n  fromNodeLabelKey: pool\n\
                 configmap:\n  name: {templates_name}\n"
            ),
        )
        .await;
        put_configmap(
            &kube,
            &templates_name,
            "templates",
            format!(
                r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: {group}-template
    labels: {{pool: {group}}}
    annotations:
      cluster-autoscaler.kwok.nodegroup/min-count: "0"
      cluster-autoscaler.kwok.nodegroup/max-count: "{max}"
  status:
    capacity: {{cpu: "4", memory: 16Gi, pods: "110"}}
    allocatable: {{cpu: "4", memory: 16Gi, pods: "110"}}
"#
            ),
        )
        .await;
        let source = ConfigSource::ConfigMap {
            namespace: NAMESPACE.to_string(),
            name: config_name,
        };
        let kwok = Arc::new(
            KwokProvider::build(kube.clone(), &source, Some(NAMESPACE))
                .await
                .expect("the kwok provider builds from its ConfigMaps"),
        );
        let faulty = Arc::new(FaultyProvider::new(kwok.clone()));
        let pki = control_plane.pki_files();
        let served = ServedProvider::start(
            faulty.clone(),
            MutualTls {
                cert: pki.serving_certificate.clone(),
                key: pki.serving_key.clone(),
                client_ca: pki.ca_certificate.clone(),
            },
        )
        .await
        .expect("the faulty provider is served");
        Cloud {
            group,
            kube,
            kwok,
            faulty,
            served,
            dir: tempfile::tempdir().expect("temporary directory"),
            control_plane,
        }
    }

    /// The externalgrpc provider of `ferroscale run`, from a cloud-config file naming a client
    /// certificate of CN `replica` and this `grpc_timeout`, refreshed as a loop starts.
    async fn client(&self, replica: &str, grpc_timeout: Duration) -> ExternalGrpcProvider {
        let certificate = self
            .control_plane
            .issue_client_certificate(replica)
            .expect("a client certificate");
        let path = self.dir.path().join(format!("{replica}-cloud-config.yaml"));
        let tls = ClientTls {
            certificate: certificate.certificate,
            key: certificate.key,
            server_ca: self.control_plane.pki_files().ca_certificate.clone(),
        };
        self.served
            .write_cloud_config(&path, &tls, grpc_timeout)
            .expect("write the cloud config");
        let client = ExternalGrpcProvider::from_config_file(&path, NodeGroupDefaults::default())
            .expect("the client reads the cloud config");
        client.refresh().await.expect("the first Refresh");
        client
    }

    /// The group as the client sees it.
    async fn group_of(&self, client: &ExternalGrpcProvider) -> Arc<dyn NodeGroup> {
        client
            .node_groups()
            .await
            .expect("NodeGroups")
            .into_iter()
            .find(|group| group.id() == self.group)
            .expect("the group is served")
    }

    /// The target the cloud really has: the kwok group's, asked directly.
    async fn real_target(&self) -> usize {
        let groups = self.kwok.node_groups().await.expect("kwok groups");
        let group = groups
            .iter()
            .find(|group| group.id() == self.group)
            .expect("the kwok group");
        group.target_size().await.expect("kwok target size")
    }

    /// The names of the group's Node objects, sorted.
    async fn node_objects(&self) -> Vec<String> {
        let nodes: Api<KubeNode> = Api::all(self.kube.clone());
        let mut names: Vec<String> = nodes
            .list(&ListParams::default().labels(&format!("pool={}", self.group)))
            .await
            .expect("list Nodes")
            .items
            .into_iter()
            .filter_map(|node| node.metadata.name)
            .collect();
        names.sort();
        names
    }

    /// Polls until the group has exactly `count` Node objects; returns their names.
    async fn wait_node_objects(&self, count: usize) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let names = self.node_objects().await;
            if names.len() == count {
                return names;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} Node objects of {} instead of {count} after {WAIT:?}: {names:?}",
                names.len(),
                self.group
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The first logged call of `method`.
    async fn wait_for(&self, method: Method, matches: impl Fn(&CallRecord) -> bool) -> CallRecord {
        self.faulty
            .call_log()
            .wait_for_call(|record| record.method == method && matches(record), WAIT)
            .await
            .unwrap_or_else(|error| panic!("{error}"))
    }
}

/// A node as the core describes one to `DeleteNodes`: name and provider id.
fn node(name: &str, provider_id: &str) -> Node {
    let mut node = Node::new(name, Resources::new(4000, 16 << 30));
    node.provider_id = provider_id.to_string();
    node
}

/// The placeholder the core sends for an instance that never became a node.
fn placeholder(instance_id: &str) -> Node {
    node(instance_id, instance_id)
}

fn kwok_node(name: &str) -> Node {
    node(name, &format!("kwok:{name}"))
}

fn status_text<T: std::fmt::Debug>(result: Result<T, CloudError>) -> (CloudError, String) {
    match result {
        Ok(value) => panic!("the call succeeded with {value:?}"),
        Err(error) => {
            let text = error.to_string();
            (error, text)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_logged_with_the_name_of_the_replica_that_made_it() {
    let cloud = Cloud::start("callers", 5).await;
    let replica_0 = cloud.client("replica-0", GRPC_TIMEOUT).await;
    let replica_1 = cloud.client("replica-1", GRPC_TIMEOUT).await;

    cloud
        .group_of(&replica_0)
        .await
        .increase_size(1)
        .await
        .expect("IncreaseSize");
    let instances = cloud
        .group_of(&replica_1)
        .await
        .nodes()
        .await
        .expect("Nodes");
    assert_eq!(instances.len(), 1);

    let increase = cloud.wait_for(Method::IncreaseSize, |_| true).await;
    assert_eq!(increase.caller.as_deref(), Some("replica-0"));
    assert_eq!(increase.group.as_deref(), Some("callers"));
    assert_eq!(increase.details.delta, Some(1));
    assert_eq!(increase.fault, None);
    assert_eq!(increase.result, CallResult::Ok);
    assert!(
        increase
            .completed
            .is_some_and(|completed| completed >= increase.arrived)
    );
    let listing = cloud.wait_for(Method::Nodes, |_| true).await;
    assert_eq!(listing.caller.as_deref(), Some("replica-1"));

    // Only replica-0 changed the cloud; every call came with a client identity.
    let log = cloud.faulty.call_log();
    assert_eq!(
        log.mutating_calls_by_caller(),
        BTreeMap::from([(Some("replica-0".to_string()), 1)])
    );
    let callers: Vec<Option<String>> = log.calls_by_caller().into_keys().collect();
    assert_eq!(
        callers,
        [Some("replica-0".to_string()), Some("replica-1".to_string())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_increase_answered_unavailable_after_the_cloud_carried_it_out_still_grows_the_group() {
    let cloud = Cloud::start("lost-error", 5).await;
    let client = cloud.client("replica-0", GRPC_TIMEOUT).await;
    let group = cloud.group_of(&client).await;
    cloud
        .faulty
        .inject(
            Injection::new(
                Method::IncreaseSize,
                Fault::AnswerLost {
                    answer: LostAnswer::Error,
                },
            )
            .times(1),
        )
        .expect("inject");

    let (error, text) = status_text(group.increase_size(2).await);
    assert!(matches!(error, CloudError::Unavailable(_)), "{error:?}");
    assert!(text.contains("status 14"), "{text}");

    // The cloud did it all the same: the target grew and the nodes come up.
    assert_eq!(cloud.real_target().await, 2);
    assert_eq!(group.target_size().await.expect("TargetSize"), 2);
    cloud.wait_node_objects(2).await;
    let record = cloud.wait_for(Method::IncreaseSize, |_| true).await;
    assert_eq!(record.carried_out, Some(CallResult::Ok));
    assert!(matches!(record.result, CallResult::Error(_)), "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_increase_whose_answer_never_comes_times_out_but_the_group_grows() {
    let cloud = Cloud::start("lost-timeout", 5).await;
    let client = cloud.client("replica-0", Duration::from_secs(2)).await;
    let group = cloud.group_of(&client).await;
    cloud
        .faulty
        .inject(
            Injection::new(
                Method::IncreaseSize,
                Fault::AnswerLost {
                    answer: LostAnswer::Timeout,
                },
            )
            .in_group("lost-timeout")
            .times(1),
        )
        .expect("inject");

    let (error, text) = status_text(group.increase_size(1).await);
    // The SDK answers DEADLINE_EXCEEDED in time for the client to read it: an ordinary provider
    // error, not Unavailable.
    assert!(matches!(error, CloudError::Provider(_)), "{error:?}");
    assert!(text.contains("status 4"), "{text}");

    let record = cloud
        .wait_for(Method::IncreaseSize, |record| {
            record.carried_out == Some(CallResult::Ok) && record.result != CallResult::InFlight
        })
        .await;
    assert_eq!(record.result, CallResult::Abandoned);
    assert_eq!(cloud.real_target().await, 1);
    cloud.wait_node_objects(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_past_the_clients_deadline_is_deadline_exceeded_and_nothing_is_done() {
    const DELAY: Duration = Duration::from_secs(3);
    let cloud = Cloud::start("delayed", 5).await;
    let client = cloud.client("replica-0", Duration::from_secs(1)).await;
    let group = cloud.group_of(&client).await;
    cloud
        .faulty
        .inject(Injection::new(Method::IncreaseSize, Fault::Delay(DELAY)).times(1))
        .expect("inject");

    let (error, text) = status_text(group.increase_size(1).await);
    assert!(matches!(error, CloudError::Provider(_)), "{error:?}");
    assert!(text.contains("status 4"), "{text}");

    // The SDK dropped the call at 90 % of the deadline, before the delay was over.
    let record = cloud
        .wait_for(Method::IncreaseSize, |record| {
            record.result != CallResult::InFlight
        })
        .await;
    assert_eq!(record.result, CallResult::Abandoned, "{record}");
    // Well after the delay would have ended, the cloud has still not grown.
    tokio::time::sleep(DELAY + Duration::from_secs(1)).await;
    assert_eq!(cloud.real_target().await, 0);
    assert_eq!(group.target_size().await.expect("TargetSize"), 0);
    assert!(cloud.node_objects().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_cloud_is_cloud_error_unavailable_and_nothing_is_done() {
    let cloud = Cloud::start("unavailable", 5).await;
    let client = cloud.client("replica-0", GRPC_TIMEOUT).await;
    let group = cloud.group_of(&client).await;
    cloud
        .faulty
        .inject(
            Injection::new(Method::IncreaseSize, Fault::Unavailable)
                .in_group("unavailable")
                .times(1),
        )
        .expect("inject");

    let (error, text) = status_text(group.increase_size(1).await);
    assert!(matches!(error, CloudError::Unavailable(_)), "{error:?}");
    assert!(text.contains("NodeGroupIncreaseSize"), "{text}");
    assert!(text.contains("injected fault"), "{text}");
    assert_eq!(cloud.real_target().await, 0);

    // The injection was for one call: the next one is served.
    group.increase_size(1).await.expect("IncreaseSize");
    assert_eq!(cloud.real_target().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_delete_deletes_exactly_the_first_nodes_of_the_batch_and_fails() {
    let cloud = Cloud::start("partial", 5).await;
    let client = cloud.client("replica-0", GRPC_TIMEOUT).await;
    let group = cloud.group_of(&client).await;
    group.increase_size(3).await.expect("IncreaseSize");
    let mut names = cloud.wait_node_objects(3).await;
    // The batch in an order of its own, to see that "first" is the batch's order.
    names.reverse();
    cloud
        .faulty
        .inject(Injection::new(Method::DeleteNodes, Fault::PartialDelete { deleted: 1 }).times(1))
        .expect("inject");

    let batch: Vec<Node> = names.iter().map(|name| kwok_node(name)).collect();
    let (error, text) = status_text(group.delete_nodes(&batch).await);
    assert!(matches!(error, CloudError::Provider(_)), "{error:?}");
    assert!(text.contains("1 of the 3 nodes were deleted"), "{text}");

    let mut left = cloud.wait_node_objects(2).await;
    left.sort();
    let mut expected = names[1..].to_vec();
    expected.sort();
    assert_eq!(
        left, expected,
        "exactly the first node of the batch is gone"
    );
    assert_eq!(cloud.real_target().await, 2);
    let deletions = cloud.faulty.call_log().deletions_by_node();
    assert_eq!(
        deletions,
        names.iter().map(|name| (name.clone(), 1)).collect()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_that_never_register_count_in_the_target_until_deleted_and_no_node_appears() {
    let cloud = Cloud::start("phantoms", 5).await;
    let client = cloud.client("replica-0", GRPC_TIMEOUT).await;
    let group = cloud.group_of(&client).await;
    cloud
        .faulty
        .inject(Injection::new(Method::IncreaseSize, Fault::NeverRegister).times(1))
        .expect("inject");

    group.increase_size(2).await.expect("IncreaseSize");
    assert_eq!(group.target_size().await.expect("TargetSize"), 2);
    let instances = group.nodes().await.expect("Nodes");
    assert_eq!(instances.len(), 2, "{instances:?}");
    for instance in &instances {
        assert!(instance.id.starts_with(PHANTOM_ID_PREFIX), "{instance:?}");
        let status = instance.status.as_ref().expect("a status");
        assert_eq!(status.state, InstanceState::Creating);
        assert_eq!(status.error, None, "machines that fail silently");
    }
    // The cloud behind never heard of them.
    assert_eq!(cloud.real_target().await, 0);
    let owner = client
        .node_group_for_node(&placeholder(&instances[0].id))
        .await
        .expect("NodeGroupForNode");
    assert_eq!(
        owner.map(|group| group.id().to_string()).as_deref(),
        Some("phantoms")
    );

    // A real increase after them produces its node, and still none of theirs.
    group.increase_size(1).await.expect("IncreaseSize");
    cloud.wait_node_objects(1).await;
    assert_eq!(group.target_size().await.expect("TargetSize"), 3);

    // Deleting them, as the core deletes instances that never registered, brings the target
    // back; the cloud behind is not asked.
    let placeholders: Vec<Node> = instances.iter().map(|i| placeholder(&i.id)).collect();
    group
        .delete_nodes(&placeholders)
        .await
        .expect("DeleteNodes");
    assert_eq!(group.target_size().await.expect("TargetSize"), 1);
    assert_eq!(cloud.real_target().await, 1);
    assert!(cloud.faulty.phantoms("phantoms").is_empty());
    assert_eq!(cloud.node_objects().await.len(), 1);

    // Decreasing the target cancels them too.
    cloud
        .faulty
        .inject(Injection::new(Method::IncreaseSize, Fault::NeverRegister).times(1))
        .expect("inject");
    group.increase_size(2).await.expect("IncreaseSize");
    group
        .decrease_target_size(-2)
        .await
        .expect("DecreaseTargetSize");
    assert_eq!(group.target_size().await.expect("TargetSize"), 1);
    assert!(cloud.faulty.phantoms("phantoms").is_empty());
    assert_eq!(cloud.real_target().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_provider_fails_every_call_until_it_is_started_again() {
    let cloud = Cloud::start("stopped", 5).await;
    let client = Arc::new(cloud.client("replica-0", GRPC_TIMEOUT).await);
    let group = cloud.group_of(&client).await;

    // A call in flight when the provider goes down fails, and is not carried out.
    cloud
        .faulty
        .inject(Injection::new(Method::IncreaseSize, Fault::Delay(Duration::from_secs(3))).times(1))
        .expect("inject");
    let in_flight = {
        let group = group.clone();
        tokio::spawn(async move { group.increase_size(1).await })
    };
    cloud.wait_for(Method::IncreaseSize, |_| true).await;
    cloud.served.stop().await;
    assert!(!cloud.served.is_up());
    let (error, text) = status_text(in_flight.await.expect("the call's task"));
    // It fails because the connection went, not at its deadline. (tonic reports a connection
    // lost under a call as status 2 UNKNOWN "transport error", which the client keeps as a
    // provider error; only a call that cannot connect is UNAVAILABLE.)
    assert!(
        matches!(error, CloudError::Provider(_) | CloudError::Unavailable(_)),
        "{error:?}"
    );
    assert!(!text.contains("status 4"), "{text}");
    let record = cloud
        .wait_for(Method::IncreaseSize, |record| {
            record.result != CallResult::InFlight
        })
        .await;
    assert_eq!(record.result, CallResult::Abandoned, "{record}");

    // While it is down, every call fails as unavailable, and reaches nothing.
    let calls_before = cloud.faulty.call_log().records().len();
    let (error, _) = status_text(group.target_size().await);
    assert!(matches!(error, CloudError::Unavailable(_)), "{error:?}");
    let (error, _) = status_text(client.refresh().await);
    assert!(matches!(error, CloudError::Unavailable(_)), "{error:?}");
    assert_eq!(cloud.faulty.call_log().records().len(), calls_before);

    cloud.served.start_again().await.expect("start again");
    client.refresh().await.expect("Refresh after the restart");
    assert_eq!(group.target_size().await.expect("TargetSize"), 0);
    assert_eq!(cloud.real_target().await, 0);
}
