//! The API proxy against a real kube-apiserver: a kube client that authenticates with a
//! ServiceAccount token, as `ferroscale run` does in the live tests, talks through the proxy, and
//! each fault does to it what the live tests will rely on.

use std::collections::BTreeMap;
use std::time::Duration;

use ferroscale_testing_control_plane::{ControlPlane, Options};
use ferroscale_testing_faults::api_proxy::{
    Action, ApiProxy, Matcher, Outcome, PartitionMode, ProxyConfig, RequestClass, Rule,
};
use futures::{Stream, StreamExt};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config};

/// Generous for a loaded 2-core machine; the steps take milliseconds when it is idle.
const WAIT: Duration = Duration::from_secs(60);
/// How long a test watches for something that must not happen.
const QUIET: Duration = Duration::from_secs(2);

const USER_AGENT: &str = "api-proxy-test/1.0";

/// A control plane, a ServiceAccount allowed everything, and a proxy in front of the API server.
struct Fixture {
    control_plane: ControlPlane,
    admin: Client,
    namespace: String,
    token: String,
    proxy: ApiProxy,
}

/// How a test's client through the proxy behaves.
#[derive(Clone, Copy)]
struct ClientOptions {
    /// kube's default retries of 429, 503 and 504.
    retry: bool,
    read_timeout: Option<Duration>,
}

const NO_RETRY: ClientOptions = ClientOptions {
    retry: false,
    read_timeout: None,
};

impl Fixture {
    async fn start() -> Fixture {
        let control_plane = tokio::task::spawn_blocking(|| {
            ControlPlane::start_with(Options {
                scheduler: false,
                controller_manager: false,
                kwok: false,
                ..Options::default()
            })
        })
        .await
        .expect("control-plane start task")
        .expect("start the test control plane");
        let admin = client_from_kubeconfig(
            Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("admin kubeconfig"),
            NO_RETRY,
        )
        .await;
        let namespace = "proxy-test".to_owned();
        let token = service_account_token(&admin, &namespace).await;
        let pki = control_plane.pki_files();
        let proxy = ApiProxy::start(ProxyConfig {
            upstream_url: control_plane.server_url(),
            upstream_ca_pem_path: pki.ca_certificate.clone(),
            serving_cert_path: pki.serving_certificate.clone(),
            serving_key_path: pki.serving_key.clone(),
        })
        .await
        .expect("start the API proxy");
        Fixture {
            control_plane,
            admin,
            namespace,
            token,
            proxy,
        }
    }

    /// A client of the ServiceAccount through the proxy: the kubeconfig the live harness writes,
    /// with the proxy as the server.
    async fn client(&self, options: ClientOptions) -> Client {
        let kubeconfig = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {
                "server": self.proxy.url(),
                "certificate-authority": self.control_plane.pki_files().ca_certificate,
            }}],
            "users": [{"name": "proxy-client", "user": {"token": self.token}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy-client"}}],
            "current-context": "proxy",
        });
        client_from_kubeconfig(
            serde_json::from_value(kubeconfig).expect("kubeconfig"),
            options,
        )
        .await
    }

    async fn config_maps(&self, options: ClientOptions) -> Api<ConfigMap> {
        Api::namespaced(self.client(options).await, &self.namespace)
    }

    fn admin_config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.admin.clone(), &self.namespace)
    }

    /// Creates a ConfigMap directly, not through the proxy.
    async fn create_directly(&self, name: &str, value: &str) {
        self.admin_config_maps()
            .create(&PostParams::default(), &config_map(name, value))
            .await
            .unwrap_or_else(|error| panic!("create ConfigMap {name}: {error}"));
    }

    /// The `value` of a ConfigMap, read directly.
    async fn value_directly(&self, name: &str) -> Option<String> {
        self.admin_config_maps()
            .get_opt(name)
            .await
            .unwrap_or_else(|error| panic!("get ConfigMap {name}: {error}"))
            .and_then(|map| map.data)
            .and_then(|mut data| data.remove("value"))
    }
}

async fn client_from_kubeconfig(kubeconfig: Kubeconfig, options: ClientOptions) -> Client {
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client configuration");
    config.default_retry = options.retry;
    config.read_timeout = options.read_timeout;
    // The read timeout counts from the request, not from when a pooled connection went idle.
    config.reset_reader_on_write = true;
    // kube sends none of its own; the autoscaler names itself, and rules can match on it.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    Client::try_from(config).expect("client")
}

/// A namespace, a ServiceAccount in it bound to cluster-admin, and a token for it.
async fn service_account_token(admin: &Client, namespace: &str) -> String {
    let post = PostParams::default();
    Api::<Namespace>::all(admin.clone())
        .create(
            &post,
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(namespace.to_owned()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await
        .expect("create the test namespace");
    let metadata = ObjectMeta {
        name: Some("proxy-client".to_owned()),
        namespace: Some(namespace.to_owned()),
        ..ObjectMeta::default()
    };
    let accounts = Api::<ServiceAccount>::namespaced(admin.clone(), namespace);
    accounts
        .create(
            &post,
            &ServiceAccount {
                metadata: metadata.clone(),
                ..ServiceAccount::default()
            },
        )
        .await
        .expect("create the ServiceAccount");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &post,
            &ClusterRoleBinding {
                metadata: ObjectMeta {
                    name: Some("proxy-client".to_owned()),
                    ..ObjectMeta::default()
                },
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".to_owned()),
                    kind: "ClusterRole".to_owned(),
                    name: "cluster-admin".to_owned(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".to_owned(),
                    name: "proxy-client".to_owned(),
                    namespace: Some(namespace.to_owned()),
                    ..Subject::default()
                }]),
            },
        )
        .await
        .expect("bind the ServiceAccount to cluster-admin");
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    accounts
        .create_token_request("proxy-client", &post, &request)
        .await
        .expect("token for the ServiceAccount")
        .status
        .and_then(|status| status.token)
        .expect("a token in the token request's status")
}

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("value".to_owned(), value.to_owned())])),
        ..ConfigMap::default()
    }
}

fn value_patch(value: &str) -> Patch<serde_json::Value> {
    Patch::Merge(serde_json::json!({ "data": { "value": value } }))
}

fn api_error_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Waits for an event about ConfigMap `name` on `stream`; `false` if `within` passes first or the
/// stream ends or fails.
async fn sees_config_map<S>(stream: &mut S, name: &str, within: Duration) -> bool
where
    S: Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    let found = async {
        while let Some(Ok(event)) = stream.next().await {
            if let WatchEvent::Added(map) | WatchEvent::Modified(map) = event
                && map.metadata.name.as_deref() == Some(name)
            {
                return true;
            }
        }
        false
    };
    tokio::time::timeout(within, found).await.unwrap_or(false)
}

/// Drains `stream` until it ends or fails; `false` if it is still going after `within`.
async fn ends_or_fails<S, T>(stream: &mut S, within: Duration) -> bool
where
    S: Stream<Item = kube::Result<T>> + Unpin,
{
    let end = async {
        loop {
            match stream.next().await {
                None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    };
    tokio::time::timeout(within, end).await.is_ok()
}

/// The resourceVersion to watch from so that only later changes are seen.
async fn current_version(maps: &Api<ConfigMap>) -> String {
    maps.list(&ListParams::default())
        .await
        .expect("list ConfigMaps")
        .metadata
        .resource_version
        .expect("a list has a resourceVersion")
}

fn config_map_watches() -> Matcher {
    Matcher::any()
        .class(RequestClass::Watch)
        .resource("configmaps")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_rules_every_kind_of_request_passes_and_is_logged() {
    let fixture = Fixture::start().await;
    let maps = fixture.config_maps(NO_RETRY).await;

    let from = current_version(&maps).await;
    let mut watch = maps
        .watch(&WatchParams::default(), &from)
        .await
        .expect("start a watch through the proxy")
        .boxed();

    maps.create(&PostParams::default(), &config_map("first", "1"))
        .await
        .expect("create through the proxy");
    let read = maps.get("first").await.expect("get through the proxy");
    assert_eq!(
        read.data
            .and_then(|mut data| data.remove("value"))
            .as_deref(),
        Some("1")
    );
    maps.patch("first", &PatchParams::default(), &value_patch("2"))
        .await
        .expect("patch through the proxy");
    assert_eq!(fixture.value_directly("first").await.as_deref(), Some("2"));

    // A change made elsewhere after the watch started reaches it through the proxy.
    fixture.create_directly("second", "x").await;
    assert!(sees_config_map(&mut watch, "second", WAIT).await);

    maps.delete("first", &DeleteParams::default())
        .await
        .expect("delete through the proxy");
    assert_eq!(fixture.value_directly("first").await, None);

    let log = fixture.proxy.log();
    let logged = |class: RequestClass, name: Option<&str>| {
        log.iter().find(|entry| {
            entry.request.class == class
                && entry.request.resource() == Some("configmaps")
                && entry.request.namespace() == Some("proxy-test")
                && entry.request.name() == name
        })
    };
    for (class, name, status) in [
        (RequestClass::List, None, 200),
        (RequestClass::Watch, None, 200),
        (RequestClass::Create, None, 201),
        (RequestClass::Get, Some("first"), 200),
        (RequestClass::Patch, Some("first"), 200),
        (RequestClass::Delete, Some("first"), 200),
    ] {
        let entry = logged(class, name).unwrap_or_else(|| panic!("{class:?} {name:?} in {log:#?}"));
        assert_eq!(entry.outcome, Outcome::Forwarded { status }, "{entry:#?}");
        assert!(entry.reached_api_server());
        assert_eq!(entry.rule, None);
        assert_eq!(entry.request.user_agent.as_deref(), Some(USER_AGENT));
    }

    // Dropping the proxy ends its streams and stops listening.
    let mut watch = maps
        .watch(&WatchParams::default(), &current_version(&maps).await)
        .await
        .expect("start a watch")
        .boxed();
    drop(fixture.proxy);
    assert!(ends_or_fails(&mut watch, WAIT).await, "the watch went on");
    let error = maps
        .list(&ListParams::default())
        .await
        .expect_err("nothing listens any more");
    assert_eq!(api_error_code(&error), None, "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_rules_answer_a_status_in_place_of_the_api_server() {
    let fixture = Fixture::start().await;
    fixture.create_directly("present", "1").await;
    let maps = fixture.config_maps(NO_RETRY).await;

    let lists_fail = fixture.proxy.add_rule(Rule::new(
        Matcher::any()
            .class(RequestClass::List)
            .resource("configmaps"),
        Action::respond(503),
    ));
    let error = maps
        .list(&ListParams::default())
        .await
        .expect_err("lists are answered 503");
    let kube::Error::Api(status) = &error else {
        panic!("a parsed Status, not {error:?}");
    };
    assert_eq!(status.code, 503);
    assert_eq!(status.reason, "ServiceUnavailable");
    assert!(status.message.contains("API proxy"), "{status:?}");
    maps.get("present").await.expect("gets still work");
    assert!(fixture.proxy.remove_rule(lists_fail));
    maps.list(&ListParams::default())
        .await
        .expect("lists work once the rule is removed");

    // `times` limits a rule to so many requests.
    let once = fixture.proxy.add_rule(
        Rule::new(
            Matcher::any().class(RequestClass::Get).name("present"),
            Action::respond(500),
        )
        .times(1),
    );
    let error = maps.get("present").await.expect_err("the first get fails");
    assert_eq!(api_error_code(&error), Some(500), "{error:?}");
    assert!(!fixture.proxy.has_rule(once));
    maps.get("present").await.expect("the second get passes");

    // 429 with Retry-After, as API Priority and Fairness answers.
    fixture.proxy.add_rule(
        Rule::new(
            Matcher::any().class(RequestClass::Get).name("present"),
            Action::Respond {
                status: 429,
                retry_after: Some(1),
            },
        )
        .times(2),
    );
    let error = maps.get("present").await.expect_err("throttled");
    let kube::Error::Api(status) = &error else {
        panic!("a parsed Status, not {error:?}");
    };
    assert_eq!(
        (status.code, status.reason.as_str()),
        (429, "TooManyRequests")
    );
    let raw = fixture
        .client(NO_RETRY)
        .await
        .send(
            http::Request::get("/api/v1/namespaces/proxy-test/configmaps/present")
                .body(Vec::new().into())
                .expect("request"),
        )
        .await
        .expect("a raw answer");
    assert_eq!(raw.status(), 429);
    assert_eq!(raw.headers()["retry-after"], "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubes_default_retries_ride_out_throttling_and_unavailability() {
    let fixture = Fixture::start().await;
    fixture.create_directly("present", "1").await;
    let retrying = fixture
        .config_maps(ClientOptions {
            retry: true,
            read_timeout: None,
        })
        .await;

    // Retry-After is honoured: two throttled answers, then the real one.
    let throttled = fixture.proxy.add_rule(
        Rule::new(
            Matcher::any().class(RequestClass::Get).name("present"),
            Action::Respond {
                status: 429,
                retry_after: Some(1),
            },
        )
        .times(2),
    );
    retrying
        .get("present")
        .await
        .expect("retried past the 429s");
    // 503 and 504 are retried too, 500 is not.
    let unavailable = fixture.proxy.add_rule(
        Rule::new(
            Matcher::any().class(RequestClass::List),
            Action::respond(503),
        )
        .times(3),
    );
    retrying
        .list(&ListParams::default())
        .await
        .expect("retried past the 503s");
    let failing = fixture.proxy.add_rule(
        Rule::new(
            Matcher::any().class(RequestClass::Patch),
            Action::respond(500),
        )
        .times(1),
    );
    let error = retrying
        .patch("present", &PatchParams::default(), &value_patch("2"))
        .await
        .expect_err("500 is not retried");
    assert_eq!(api_error_code(&error), Some(500));

    let log = fixture.proxy.log();
    let outcomes = |rule| {
        log.iter()
            .filter(|entry| entry.rule == Some(rule))
            .map(|entry| entry.outcome.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        outcomes(throttled),
        vec![Outcome::Responded { status: 429 }; 2]
    );
    assert_eq!(
        outcomes(unavailable),
        vec![Outcome::Responded { status: 503 }; 3]
    );
    assert_eq!(outcomes(failing), vec![Outcome::Responded { status: 500 }]);
    let patches = log
        .iter()
        .filter(|entry| entry.request.class == RequestClass::Patch)
        .count();
    assert_eq!(patches, 1, "a 500 is sent once");
    assert_eq!(
        fixture.value_directly("present").await.as_deref(),
        Some("1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_patch_reaches_the_api_server_only_when_released() {
    let fixture = Fixture::start().await;
    fixture.create_directly("held", "1").await;
    fixture.create_directly("free", "1").await;
    let maps = fixture.config_maps(NO_RETRY).await;

    let hold = fixture.proxy.add_rule(Rule::new(
        Matcher::any()
            .class(RequestClass::Patch)
            .name("held")
            .body_contains("\"2\""),
        Action::Hold,
    ));
    let patch = tokio::spawn({
        let maps = maps.clone();
        async move {
            maps.patch("held", &PatchParams::default(), &value_patch("2"))
                .await
        }
    });
    let held = fixture
        .proxy
        .wait_for_held(hold, WAIT)
        .await
        .expect("the patch is parked");
    assert_eq!(held.request.class, RequestClass::Patch);
    assert_eq!(held.request.resource(), Some("configmaps"));
    assert_eq!(held.request.name(), Some("held"));
    assert_eq!(fixture.proxy.held(), vec![held.clone()]);

    // Other writes pass meanwhile, the held object stays as it was.
    maps.patch("free", &PatchParams::default(), &value_patch("2"))
        .await
        .expect("a patch the rule does not match");
    assert_eq!(fixture.value_directly("free").await.as_deref(), Some("2"));
    tokio::time::sleep(QUIET).await;
    assert_eq!(fixture.value_directly("held").await.as_deref(), Some("1"));
    assert!(!patch.is_finished());
    let entry = fixture
        .proxy
        .log()
        .into_iter()
        .find(|entry| entry.seq == held.log_seq)
        .expect("the held request is logged");
    assert_eq!(entry.outcome, Outcome::Held);
    assert!(!entry.reached_api_server());

    assert!(fixture.proxy.release(held.id));
    patch
        .await
        .expect("patch task")
        .expect("the released patch is applied");
    assert_eq!(fixture.value_directly("held").await.as_deref(), Some("2"));
    assert!(fixture.proxy.held().is_empty());
    let entry = fixture
        .proxy
        .log()
        .into_iter()
        .find(|entry| entry.seq == held.log_seq)
        .expect("the held request is logged");
    assert_eq!(entry.outcome, Outcome::Forwarded { status: 200 });
    assert!(entry.held && entry.reached_api_server());
    assert_eq!(entry.rule, Some(hold));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_watch_ends_and_a_watcher_recovers_from_it() {
    let fixture = Fixture::start().await;
    let maps = fixture.config_maps(NO_RETRY).await;

    let from = current_version(&maps).await;
    let mut watch = maps
        .watch(&WatchParams::default(), &from)
        .await
        .expect("start a watch")
        .boxed();
    assert_eq!(fixture.proxy.drop_watches(&config_map_watches()), 1);
    assert!(ends_or_fails(&mut watch, WAIT).await, "the watch went on");

    // kube-runtime's watcher, as the autoscaler's caches use it, watches again and misses
    // nothing.
    let watches_before = fixture.proxy.log().len();
    let (names, mut seen_names) = tokio::sync::mpsc::unbounded_channel();
    let watching = tokio::spawn(
        watcher(maps.clone(), watcher::Config::default())
            .default_backoff()
            // kube ends a watch whose body breaks off like one the server closed; the watcher
            // then watches again from the last resourceVersion it saw.
            .for_each(move |event| {
                if let Ok(watcher::Event::Apply(map) | watcher::Event::InitApply(map)) = event {
                    let _ = names.send(map.metadata.name);
                }
                async {}
            }),
    );
    assert!(
        fixture
            .proxy
            .wait_for_watch(&config_map_watches(), WAIT)
            .await,
        "the watcher watches"
    );
    assert_eq!(fixture.proxy.drop_watches(&config_map_watches()), 1);
    fixture.create_directly("after-drop", "1").await;
    let seen = tokio::time::timeout(WAIT, async {
        while let Some(name) = seen_names.recv().await {
            if name.as_deref() == Some("after-drop") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        seen,
        Ok(true),
        "the watcher saw the ConfigMap made after the drop"
    );
    watching.abort();
    let rewatched = fixture.proxy.log()[watches_before..]
        .iter()
        .filter(|entry| entry.request.class == RequestClass::Watch)
        .count();
    assert!(rewatched >= 2, "the watcher watched again after the drop");
    let cut = fixture
        .proxy
        .log()
        .iter()
        .filter(|entry| entry.outcome == Outcome::Cut { status: 200 })
        .count();
    assert_eq!(cut, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delays_hold_requests_back_and_cut_after_ends_watches_by_itself() {
    let fixture = Fixture::start().await;
    fixture.create_directly("present", "1").await;
    let maps = fixture.config_maps(NO_RETRY).await;

    let delay = Duration::from_secs(1);
    let delayed = fixture.proxy.add_rule(
        Rule::new(
            Matcher::any().class(RequestClass::Get).name("present"),
            Action::Delay(delay),
        )
        .times(1),
    );
    maps.get("present")
        .await
        .expect("a delayed get is answered");
    let log = fixture.proxy.log();
    let entry = log
        .iter()
        .find(|entry| entry.rule == Some(delayed))
        .expect("the delayed get is logged");
    assert_eq!(entry.outcome, Outcome::Forwarded { status: 200 });
    let waited = entry
        .forwarded_at
        .and_then(|forwarded| forwarded.duration_since(entry.received_at).ok())
        .expect("forwarded after it was received");
    assert!(waited >= delay, "forwarded after {waited:?}");

    let cut_after = fixture.proxy.add_rule(Rule::new(
        config_map_watches(),
        // Long enough for an event to pass on a loaded machine first.
        Action::CutWatchAfter(Duration::from_secs(3)),
    ));
    let from = current_version(&maps).await;
    let mut watch = maps
        .watch(&WatchParams::default(), &from)
        .await
        .expect("start a watch")
        .boxed();
    fixture.create_directly("before-the-cut", "1").await;
    assert!(sees_config_map(&mut watch, "before-the-cut", WAIT).await);
    assert!(ends_or_fails(&mut watch, WAIT).await, "the watch went on");
    // The proxy records the cut just after closing the stream, so the client can see the end
    // first: wait for the record rather than read it at once.
    let started = std::time::Instant::now();
    let outcome = loop {
        let outcome = fixture
            .proxy
            .log()
            .iter()
            .find(|entry| entry.rule == Some(cut_after))
            .map(|entry| entry.outcome.clone())
            .expect("the watch is logged");
        if outcome == (Outcome::Cut { status: 200 }) || started.elapsed() > WAIT {
            break outcome;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(outcome, Outcome::Cut { status: 200 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watch_misses_changes_until_resumed() {
    let fixture = Fixture::start().await;
    let maps = fixture.config_maps(NO_RETRY).await;

    let from = current_version(&maps).await;
    let mut before_stall = maps
        .watch(&WatchParams::default(), &from)
        .await
        .expect("start a watch")
        .boxed();
    let stall = fixture.proxy.stall_watches(config_map_watches());
    // A watch started during the stall is silent too, though it was answered.
    let mut during_stall = maps
        .watch(&WatchParams::default(), &from)
        .await
        .expect("a watch starts during the stall")
        .boxed();
    // Other requests are not stalled.
    maps.list(&ListParams::default())
        .await
        .expect("lists work during a stall");

    fixture.create_directly("during-stall", "1").await;
    assert!(!sees_config_map(&mut before_stall, "during-stall", QUIET).await);
    assert!(!sees_config_map(&mut during_stall, "during-stall", QUIET).await);

    assert!(fixture.proxy.resume(stall));
    assert!(sees_config_map(&mut before_stall, "during-stall", WAIT).await);
    assert!(sees_config_map(&mut during_stall, "during-stall", WAIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_fails_at_once_and_a_blackhole_until_the_client_gives_up() {
    let fixture = Fixture::start().await;
    fixture.create_directly("present", "1").await;
    let maps = fixture
        .config_maps(ClientOptions {
            retry: true,
            read_timeout: Some(Duration::from_secs(2)),
        })
        .await;

    let reset = fixture.proxy.add_rule(
        Rule::new(
            Matcher::any().class(RequestClass::Get).name("present"),
            Action::Reset,
        )
        .times(1),
    );
    let error = maps
        .get("present")
        .await
        .expect_err("the connection is reset");
    assert_eq!(api_error_code(&error), None, "{error:?}");
    let chain = format!("{:?}", error_chain(&error));
    assert!(chain.to_lowercase().contains("reset"), "{chain}");
    maps.get("present").await.expect("the next request passes");

    let blackhole = fixture.proxy.add_rule(Rule::new(
        Matcher::any().class(RequestClass::Get).name("present"),
        Action::Blackhole,
    ));
    let error = maps
        .get("present")
        .await
        .expect_err("the client's read timeout ends the request");
    assert_eq!(api_error_code(&error), None, "{error:?}");
    let log = fixture.proxy.log();
    let outcome_of = |rule| {
        log.iter()
            .find(|entry| entry.rule == Some(rule))
            .map(|entry| (entry.outcome.clone(), entry.reached_api_server()))
    };
    assert_eq!(outcome_of(reset), Some((Outcome::Reset, false)));
    assert_eq!(outcome_of(blackhole), Some((Outcome::Blackholed, false)));
}

/// The error and its sources, one per line.
fn error_chain(error: &dyn std::error::Error) -> Vec<String> {
    let mut chain = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        chain.push(cause.to_string());
        source = cause.source();
    }
    chain
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_silences_everything_until_healed() {
    let fixture = Fixture::start().await;
    fixture.create_directly("present", "1").await;
    let maps = fixture.config_maps(NO_RETRY).await;
    let from = current_version(&maps).await;
    let mut watch = maps
        .watch(&WatchParams::default(), &from)
        .await
        .expect("start a watch")
        .boxed();

    let partition_started = fixture.proxy.log().len();
    fixture.proxy.partition(PartitionMode::Silent);
    assert!(
        tokio::time::timeout(QUIET, maps.get("present"))
            .await
            .is_err(),
        "a get during the partition hangs"
    );
    // A client that waits it out gets its answer once the partition heals.
    let patient = tokio::spawn({
        let maps = maps.clone();
        async move { maps.get("present").await }
    });
    fixture.create_directly("during-partition", "1").await;
    assert!(!sees_config_map(&mut watch, "during-partition", QUIET).await);
    assert!(!patient.is_finished());
    let gets_during_partition: Vec<_> = fixture.proxy.log()[partition_started..]
        .iter()
        .filter(|entry| entry.request.class == RequestClass::Get)
        .map(|entry| entry.reached_api_server())
        .collect();
    assert_eq!(gets_during_partition, vec![false, false]);

    fixture.proxy.heal();
    assert!(sees_config_map(&mut watch, "during-partition", WAIT).await);
    patient
        .await
        .expect("get task")
        .expect("the waiting get is answered after the heal");
    maps.get("present").await.expect("a get after the heal");

    // A refusing partition cuts the watch and resets every request.
    fixture.proxy.partition(PartitionMode::Refuse);
    assert!(ends_or_fails(&mut watch, WAIT).await);
    let error = maps.get("present").await.expect_err("refused");
    assert_eq!(api_error_code(&error), None, "{error:?}");
    fixture.proxy.heal();
    maps.get("present").await.expect("a get after the heal");
}
