//! A local fake of the Exoscale API v2 for tests (docs/exoscale.md, Testing): an HTTP server on
//! 127.0.0.1 holding instances, Instance Pools, SKS clusters with nodepools, the instance quota and
//! asynchronous operations, answering the endpoints the `exoscale` provider uses with the API's
//! JSON shapes.
//!
//! It checks every request's `EXO2-HMAC-SHA256` signature with its own implementation (the `hmac`
//! and `sha2` crates, not the provider's signer) and answers 403 `{"message": …}` to a wrong key, a
//! wrong secret, an expired signature or a body other than the one signed. Tests inject faults per
//! endpoint (a status for the next calls, a delay), operations that end in `failure`/`timeout` or
//! never settle, pools stuck in a non-`running` state or deleted, and read the request log.
//!
//! Dev-only: never a dependency of product code.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The API key and secret the fake accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub key: String,
    pub secret: String,
}

impl Credentials {
    pub fn new(key: impl Into<String>, secret: impl Into<String>) -> Credentials {
        Credentials {
            key: key.into(),
            secret: secret.into(),
        }
    }
}

/// The endpoints the provider uses, for fault injection and counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    GetInstance,
    GetInstancePool,
    GetQuota,
    ListSksClusters,
    ScaleInstancePool,
    EvictInstancePoolMembers,
    ScaleSksNodepool,
    EvictSksNodepoolMembers,
    GetOperation,
}

/// How the next operation ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationOutcome {
    Success,
    Failure,
    Timeout,
    /// Stays `pending` forever.
    NeverSettles,
}

/// An injected failure of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fault {
    status: u16,
    /// The message echoes the request's headers and the account's secret, as a proxy or a broken
    /// endpoint that dumps what it received (and what it knows) might.
    echo_request: bool,
}

/// One request as the fake received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub body: String,
    /// Header names lower-case, values as sent (including `authorization`).
    pub headers: Vec<(String, String)>,
    /// What the fake made of the path, `None` for an unknown one.
    pub endpoint: Option<Endpoint>,
    /// The status the fake answered.
    pub status: u16,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// The ids of a nodepool and of the Instance Pool behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SksNodepoolIds {
    pub cluster_id: String,
    pub nodepool_id: String,
    pub instance_pool_id: String,
}

#[derive(Debug, Clone)]
struct FakeInstance {
    name: String,
    state: String,
    /// (id, type)
    manager: Option<(String, String)>,
}

#[derive(Debug, Clone)]
struct FakePool {
    name: String,
    size: i64,
    state: String,
    members: Vec<String>,
    /// The nodepool managing the pool.
    nodepool: Option<String>,
}

#[derive(Debug, Clone)]
struct FakeNodepool {
    id: String,
    name: String,
    pool_id: String,
}

#[derive(Debug, Clone)]
struct FakeCluster {
    id: String,
    name: String,
    nodepools: Vec<FakeNodepool>,
}

#[derive(Debug, Clone)]
struct FakeOperation {
    state: String,
    polls_left: u32,
    outcome: OperationOutcome,
    pool_id: String,
    command: String,
    new_members: Vec<String>,
}

#[derive(Debug)]
struct State {
    credentials: Credentials,
    check_signatures: bool,
    clock_skew_secs: i64,
    next_id: u64,
    instances: BTreeMap<String, FakeInstance>,
    pools: BTreeMap<String, FakePool>,
    clusters: Vec<FakeCluster>,
    quota_usage: i64,
    quota_limit: i64,
    operations: HashMap<String, FakeOperation>,
    settle_after_polls: u32,
    next_outcomes: VecDeque<OperationOutcome>,
    stuck_pools: HashSet<String>,
    faults: HashMap<Endpoint, VecDeque<Fault>>,
    delays: HashMap<Endpoint, Duration>,
    requests: Vec<RecordedRequest>,
}

impl State {
    fn new_id(&mut self, kind: u32) -> String {
        self.next_id += 1;
        format!("{kind:08x}-0000-4000-8000-{:012x}", self.next_id)
    }

    fn add_members(&mut self, pool_id: &str, count: usize, state: &str) -> Vec<String> {
        let mut added = Vec::with_capacity(count);
        for _ in 0..count {
            let id = self.new_id(0x1);
            let pool_name = self
                .pools
                .get(pool_id)
                .map(|pool| pool.name.clone())
                .unwrap_or_default();
            self.instances.insert(
                id.clone(),
                FakeInstance {
                    name: format!("pool-{pool_name}-{}", &id[id.len() - 5..]),
                    state: state.to_string(),
                    manager: Some((pool_id.to_string(), "instance-pool".to_string())),
                },
            );
            if let Some(pool) = self.pools.get_mut(pool_id) {
                pool.members.push(id.clone());
                pool.size = pool.members.len() as i64;
            }
            added.push(id);
        }
        added
    }

    fn add_pool(&mut self, name: &str, members: usize, nodepool: Option<String>) -> String {
        let id = self.new_id(0xa);
        self.pools.insert(
            id.clone(),
            FakePool {
                name: name.to_string(),
                size: 0,
                state: "running".to_string(),
                members: Vec::new(),
                nodepool,
            },
        );
        self.add_members(&id, members, "running");
        self.quota_usage += members as i64;
        id
    }
}

/// The running fake. Dropping it stops accepting connections.
#[derive(Debug)]
pub struct FakeExoscale {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    server: JoinHandle<()>,
}

impl Drop for FakeExoscale {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeExoscale {
    /// Starts the server on a free loopback port, with signature checks on, quota
    /// `{"usage": 0, "limit": 20}` and operations settling at their first poll.
    pub async fn start(credentials: Credentials) -> FakeExoscale {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("the fake Exoscale API binds a loopback port");
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let state = Arc::new(Mutex::new(State {
            credentials,
            check_signatures: true,
            clock_skew_secs: 0,
            next_id: 0,
            instances: BTreeMap::new(),
            pools: BTreeMap::new(),
            clusters: Vec::new(),
            quota_usage: 0,
            quota_limit: 20,
            operations: HashMap::new(),
            settle_after_polls: 1,
            next_outcomes: VecDeque::new(),
            stuck_pools: HashSet::new(),
            faults: HashMap::new(),
            delays: HashMap::new(),
            requests: Vec::new(),
        }));
        let served = Arc::clone(&state);
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = Arc::clone(&served);
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let state = Arc::clone(&state);
                        async move { Ok::<_, Infallible>(handle(state, request).await) }
                    });
                    // A client that hangs up mid-request is not the fake's problem.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FakeExoscale {
            addr,
            state,
            server,
        }
    }

    /// `http://127.0.0.1:<port>/v2/`, for `EXOSCALE_API_ENDPOINT`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v2/", self.addr)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A plain Instance Pool named `name` with `members` running instances; returns its id.
    pub fn add_instance_pool(&self, name: &str, members: usize) -> String {
        self.state().add_pool(name, members, None)
    }

    /// An Instance Pool that claims to be managed by nodepool `nodepool_id`, which need not
    /// exist in any cluster.
    pub fn add_instance_pool_managed_by(
        &self,
        name: &str,
        members: usize,
        nodepool_id: &str,
    ) -> String {
        self.state()
            .add_pool(name, members, Some(nodepool_id.to_string()))
    }

    /// An empty SKS cluster; returns its id.
    pub fn add_sks_cluster(&self, name: &str) -> String {
        let mut state = self.state();
        let id = state.new_id(0xc);
        state.clusters.push(FakeCluster {
            id: id.clone(),
            name: name.to_string(),
            nodepools: Vec::new(),
        });
        id
    }

    /// A nodepool named `name` in cluster `cluster_id`, backed by a new Instance Pool (named
    /// `nodepool-<name>`) with `members` running instances.
    pub fn add_sks_nodepool(&self, cluster_id: &str, name: &str, members: usize) -> SksNodepoolIds {
        let mut state = self.state();
        let nodepool_id = state.new_id(0xd);
        let pool_id = state.add_pool(
            &format!("nodepool-{name}"),
            members,
            Some(nodepool_id.clone()),
        );
        if let Some(cluster) = state.clusters.iter_mut().find(|c| c.id == cluster_id) {
            cluster.nodepools.push(FakeNodepool {
                id: nodepool_id.clone(),
                name: name.to_string(),
                pool_id: pool_id.clone(),
            });
        }
        SksNodepoolIds {
            cluster_id: cluster_id.to_string(),
            nodepool_id,
            instance_pool_id: pool_id,
        }
    }

    /// A standalone instance: `manager` is `(id, type)` or none.
    pub fn add_instance(&self, name: &str, state: &str, manager: Option<(&str, &str)>) -> String {
        let mut fake = self.state();
        let id = fake.new_id(0x1);
        fake.instances.insert(
            id.clone(),
            FakeInstance {
                name: name.to_string(),
                state: state.to_string(),
                manager: manager.map(|(id, kind)| (id.to_string(), kind.to_string())),
            },
        );
        id
    }

    /// Members of a pool in order, with their states; empty for an unknown pool.
    pub fn members(&self, pool_id: &str) -> Vec<(String, String)> {
        let state = self.state();
        state
            .pools
            .get(pool_id)
            .map(|pool| {
                pool.members
                    .iter()
                    .map(|id| {
                        let member_state = state
                            .instances
                            .get(id)
                            .map(|instance| instance.state.clone())
                            .unwrap_or_default();
                        (id.clone(), member_state)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Size and state of a pool, `None` once deleted.
    pub fn pool_size_and_state(&self, pool_id: &str) -> Option<(i64, String)> {
        self.state()
            .pools
            .get(pool_id)
            .map(|pool| (pool.size, pool.state.clone()))
    }

    /// Whether an instance still exists (evicted members are destroyed).
    pub fn instance_exists(&self, instance_id: &str) -> bool {
        self.state().instances.contains_key(instance_id)
    }

    pub fn set_instance_state(&self, instance_id: &str, new_state: &str) {
        if let Some(instance) = self.state().instances.get_mut(instance_id) {
            instance.state = new_state.to_string();
        }
    }

    /// Sets a pool's state now (e.g. `scaling-up` before a delete that must wait).
    pub fn set_pool_state(&self, pool_id: &str, new_state: &str) {
        if let Some(pool) = self.state().pools.get_mut(pool_id) {
            pool.state = new_state.to_string();
        }
    }

    /// A stuck pool keeps its scaling state when its operations settle.
    pub fn set_pool_stuck(&self, pool_id: &str, stuck: bool) {
        let mut state = self.state();
        if stuck {
            state.stuck_pools.insert(pool_id.to_string());
        } else {
            state.stuck_pools.remove(pool_id);
        }
    }

    /// Removes a pool: it answers 404 from now on.
    pub fn delete_pool(&self, pool_id: &str) {
        self.state().pools.remove(pool_id);
    }

    /// The instance quota; `limit` −1 means unlimited.
    pub fn set_quota(&self, usage: i64, limit: i64) {
        let mut state = self.state();
        state.quota_usage = usage;
        state.quota_limit = limit;
    }

    /// The `n`-th poll of an operation (n ≥ 1) sees it settle.
    pub fn set_operation_settle_polls(&self, polls: u32) {
        self.state().settle_after_polls = polls.max(1);
    }

    /// How the next operation started ends (then the following ones succeed again).
    pub fn next_operation_ends(&self, outcome: OperationOutcome) {
        self.state().next_outcomes.push_back(outcome);
    }

    /// The next `times` calls of `endpoint` answer `status` with `{"message": "injected <status>"}`
    /// without doing anything.
    pub fn fail_next(&self, endpoint: Endpoint, status: u16, times: usize) {
        let fault = Fault {
            status,
            echo_request: false,
        };
        self.state()
            .faults
            .entry(endpoint)
            .or_default()
            .extend(std::iter::repeat_n(fault, times));
    }

    /// The next `times` calls of `endpoint` answer `status` with a `message` that echoes every
    /// request header (`authorization` with the API key and the signature included) and the
    /// account's secret, without doing anything: what a proxy or a broken endpoint that dumps its
    /// request might send back.
    pub fn fail_next_echoing_request(&self, endpoint: Endpoint, status: u16, times: usize) {
        let fault = Fault {
            status,
            echo_request: true,
        };
        self.state()
            .faults
            .entry(endpoint)
            .or_default()
            .extend(std::iter::repeat_n(fault, times));
    }

    /// Every call of `endpoint` waits `delay` before answering (`None` to stop).
    pub fn set_delay(&self, endpoint: Endpoint, delay: Option<Duration>) {
        let mut state = self.state();
        match delay {
            Some(delay) => state.delays.insert(endpoint, delay),
            None => state.delays.remove(&endpoint),
        };
    }

    /// Turns signature checks on (default) or off.
    pub fn set_signature_check(&self, enabled: bool) {
        self.state().check_signatures = enabled;
    }

    /// The fake's clock runs `seconds` ahead of the machine's (to expire signatures).
    pub fn set_clock_skew(&self, seconds: i64) {
        self.state().clock_skew_secs = seconds;
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state().requests.clone()
    }

    pub fn clear_requests(&self) {
        self.state().requests.clear();
    }

    /// How many requests reached `endpoint` so far.
    pub fn count(&self, endpoint: Endpoint) -> usize {
        self.state()
            .requests
            .iter()
            .filter(|request| request.endpoint == Some(endpoint))
            .count()
    }
}

type Answer = (StatusCode, Value);

fn message(status: StatusCode, text: impl Into<String>) -> Answer {
    (status, json!({ "message": text.into() }))
}

async fn handle(state: Arc<Mutex<State>>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = request.uri().query().map(str::to_string);
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let route = route(&method, &path);
    let endpoint = route.as_ref().map(|(endpoint, _)| *endpoint);

    let delay = endpoint.and_then(|endpoint| lock(&state).delays.get(&endpoint).copied());
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }

    let (status, answer) = {
        let mut state = lock(&state);
        let answer =
            match check_signature(&state, &method, &path, query.as_deref(), &headers, &body) {
                Err(rejection) => rejection,
                Ok(()) => match (route, endpoint) {
                    (Some((endpoint, params)), _) => {
                        match state
                            .faults
                            .get_mut(&endpoint)
                            .and_then(VecDeque::pop_front)
                        {
                            Some(fault) => {
                                let status = StatusCode::from_u16(fault.status)
                                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                                if fault.echo_request {
                                    let echoed: Vec<String> = headers
                                        .iter()
                                        .map(|(name, value)| format!("{name}: {value}"))
                                        .collect();
                                    message(
                                        status,
                                        format!(
                                            "injected {}; request {method} {path}; headers: {}; \
                                             account secret {}",
                                            status.as_u16(),
                                            echoed.join("; "),
                                            state.credentials.secret
                                        ),
                                    )
                                } else {
                                    message(status, format!("injected {}", status.as_u16()))
                                }
                            }
                            None => serve(&mut state, endpoint, &params, &headers, &body),
                        }
                    }
                    (None, _) => message(
                        StatusCode::NOT_FOUND,
                        format!("no endpoint {method} {path}"),
                    ),
                },
            };
        state.requests.push(RecordedRequest {
            method: method.to_string(),
            path,
            query,
            body: String::from_utf8_lossy(&body).into_owned(),
            headers,
            endpoint,
            status: answer.0.as_u16(),
        });
        answer
    };
    let mut response = Response::new(Full::new(Bytes::from(answer.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The endpoint and its path parameters.
fn route(method: &Method, path: &str) -> Option<(Endpoint, Vec<String>)> {
    let rest = path.strip_prefix("/v2/")?;
    let segments: Vec<&str> = rest.split('/').collect();
    let own = |values: &[&str]| values.iter().map(|v| v.to_string()).collect::<Vec<_>>();
    match (method, segments.as_slice()) {
        (&Method::GET, ["instance", id]) => Some((Endpoint::GetInstance, own(&[id]))),
        (&Method::GET, ["quota", entity]) => Some((Endpoint::GetQuota, own(&[entity]))),
        (&Method::GET, ["sks-cluster"]) => Some((Endpoint::ListSksClusters, Vec::new())),
        (&Method::GET, ["operation", id]) => Some((Endpoint::GetOperation, own(&[id]))),
        (&Method::GET, ["instance-pool", id]) if !id.contains(':') => {
            Some((Endpoint::GetInstancePool, own(&[id])))
        }
        (&Method::PUT, ["instance-pool", action]) => {
            if let Some(id) = action.strip_suffix(":scale") {
                Some((Endpoint::ScaleInstancePool, own(&[id])))
            } else {
                action
                    .strip_suffix(":evict")
                    .map(|id| (Endpoint::EvictInstancePoolMembers, own(&[id])))
            }
        }
        (&Method::PUT, ["sks-cluster", cluster, "nodepool", action]) => {
            if let Some(id) = action.strip_suffix(":scale") {
                Some((Endpoint::ScaleSksNodepool, own(&[cluster, id])))
            } else {
                action
                    .strip_suffix(":evict")
                    .map(|id| (Endpoint::EvictSksNodepoolMembers, own(&[cluster, id])))
            }
        }
        _ => None,
    }
}

/// Section 3, implemented independently of the provider: 403 on any mismatch.
fn check_signature(
    state: &State,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<(), Answer> {
    if !state.check_signatures {
        return Ok(());
    }
    let forbidden = |text: &str| message(StatusCode::FORBIDDEN, text);
    let header = headers
        .iter()
        .find(|(name, _)| name == "authorization")
        .map(|(_, value)| value.as_str())
        .ok_or_else(|| forbidden("missing Authorization header"))?;
    let fields = header
        .strip_prefix("EXO2-HMAC-SHA256 ")
        .ok_or_else(|| forbidden("unsupported authorization scheme"))?;
    let mut credential = None;
    let mut signed_names = None;
    let mut expires = None;
    let mut signature = None;
    for field in fields.split(',') {
        match field.split_once('=') {
            Some(("credential", value)) => credential = Some(value),
            Some(("signed-query-args", value)) => signed_names = Some(value),
            Some(("expires", value)) => expires = Some(value),
            // The signature's base64 may end in '=': split_once keeps them in the value.
            Some(("signature", value)) => signature = Some(value),
            _ => return Err(forbidden("malformed Authorization header")),
        }
    }
    if credential != Some(state.credentials.key.as_str()) {
        return Err(forbidden("invalid API key"));
    }
    let expires_text = expires.ok_or_else(|| forbidden("missing expires"))?;
    let expires: i64 = expires_text
        .parse()
        .map_err(|_| forbidden("malformed expires"))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
        + state.clock_skew_secs;
    if expires < now {
        return Err(forbidden("request expired"));
    }
    let pairs: Vec<(&str, &str)> = query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .collect();
    let mut signed_values = String::new();
    for name in signed_names
        .unwrap_or("")
        .split(';')
        .filter(|n| !n.is_empty())
    {
        let value = pairs
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| *value)
            .ok_or_else(|| forbidden("a signed query argument is missing"))?;
        signed_values.push_str(value);
    }
    let expected = expected_signature(
        &state.credentials.secret,
        method.as_str(),
        path,
        body,
        &signed_values,
        expires_text,
    )
    .ok_or_else(|| forbidden("unusable secret"))?;
    if signature != Some(expected.as_str()) {
        return Err(forbidden("invalid request signature"));
    }
    Ok(())
}

/// Base64 of HMAC-SHA256 over `"<METHOD> <path>\n<body>\n<signed values>\n\n<expires>"`.
fn expected_signature(
    secret: &str,
    method: &str,
    path: &str,
    body: &[u8],
    signed_values: &str,
    expires: &str,
) -> Option<String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).ok()?;
    mac.update(format!("{method} {path}\n").as_bytes());
    mac.update(body);
    mac.update(format!("\n{signed_values}\n\n{expires}").as_bytes());
    Some(STANDARD.encode(mac.finalize().into_bytes()))
}

fn serve(
    state: &mut State,
    endpoint: Endpoint,
    params: &[String],
    headers: &[(String, String)],
    body: &[u8],
) -> Answer {
    let param = |index: usize| params.get(index).map(String::as_str).unwrap_or("");
    let is_put = matches!(
        endpoint,
        Endpoint::ScaleInstancePool
            | Endpoint::EvictInstancePoolMembers
            | Endpoint::ScaleSksNodepool
            | Endpoint::EvictSksNodepoolMembers
    );
    if is_put
        && !headers
            .iter()
            .any(|(name, value)| name == "content-type" && value.starts_with("application/json"))
    {
        return message(
            StatusCode::BAD_REQUEST,
            "Content-Type must be application/json",
        );
    }
    match endpoint {
        Endpoint::GetInstance => match state.instances.get(param(0)) {
            None => message(
                StatusCode::NOT_FOUND,
                format!("instance {} not found", param(0)),
            ),
            Some(instance) => {
                let mut value = json!({
                    "id": param(0),
                    "name": instance.name,
                    "state": instance.state,
                    "type": "standard.medium",
                });
                if let Some((id, kind)) = &instance.manager {
                    value["manager"] = json!({ "id": id, "type": kind });
                }
                (StatusCode::OK, value)
            }
        },
        Endpoint::GetInstancePool => match state.pools.get(param(0)) {
            None => message(
                StatusCode::NOT_FOUND,
                format!("instance pool {} not found", param(0)),
            ),
            Some(pool) => (StatusCode::OK, pool_json(param(0), pool)),
        },
        Endpoint::GetQuota => {
            if param(0) != "instance" {
                return message(
                    StatusCode::NOT_FOUND,
                    format!("quota {} not found", param(0)),
                );
            }
            (
                StatusCode::OK,
                json!({"resource": "instance", "usage": state.quota_usage, "limit": state.quota_limit}),
            )
        }
        Endpoint::ListSksClusters => {
            let clusters: Vec<Value> = state
                .clusters
                .iter()
                .map(|cluster| {
                    let nodepools: Vec<Value> = cluster
                        .nodepools
                        .iter()
                        .map(|nodepool| {
                            let size = state
                                .pools
                                .get(&nodepool.pool_id)
                                .map(|pool| pool.size)
                                .unwrap_or(0);
                            json!({
                                "id": nodepool.id,
                                "name": nodepool.name,
                                "size": size,
                                "instance-pool": {"id": nodepool.pool_id},
                            })
                        })
                        .collect();
                    json!({"id": cluster.id, "name": cluster.name, "nodepools": nodepools})
                })
                .collect();
            (StatusCode::OK, json!({ "sks-clusters": clusters }))
        }
        Endpoint::ScaleInstancePool => scale(state, param(0), body, "scale-instance-pool"),
        Endpoint::EvictInstancePoolMembers => {
            evict(state, param(0), body, "evict-instance-pool-members")
        }
        Endpoint::ScaleSksNodepool | Endpoint::EvictSksNodepoolMembers => {
            let pool_id = state
                .clusters
                .iter()
                .find(|cluster| cluster.id == param(0))
                .and_then(|cluster| cluster.nodepools.iter().find(|n| n.id == param(1)))
                .map(|nodepool| nodepool.pool_id.clone());
            let Some(pool_id) = pool_id else {
                return message(
                    StatusCode::NOT_FOUND,
                    format!(
                        "SKS nodepool {} of cluster {} not found",
                        param(1),
                        param(0)
                    ),
                );
            };
            if endpoint == Endpoint::ScaleSksNodepool {
                scale(state, &pool_id, body, "scale-sks-nodepool")
            } else {
                evict(state, &pool_id, body, "evict-sks-nodepool-members")
            }
        }
        Endpoint::GetOperation => poll_operation(state, param(0)),
    }
}

fn pool_json(id: &str, pool: &FakePool) -> Value {
    let mut value = json!({
        "id": id,
        "name": pool.name,
        "size": pool.size,
        "state": pool.state,
    });
    // An empty pool leaves `instances` out, as the API may.
    if !pool.members.is_empty() {
        let members: Vec<Value> = pool.members.iter().map(|m| json!({ "id": m })).collect();
        value["instances"] = Value::Array(members);
    }
    if let Some(nodepool) = &pool.nodepool {
        value["manager"] = json!({"id": nodepool, "type": "sks-nodepool"});
    }
    value
}

fn start_operation(
    state: &mut State,
    pool_id: &str,
    command: &str,
    new_members: Vec<String>,
) -> Answer {
    let id = state.new_id(0xe);
    let outcome = state
        .next_outcomes
        .pop_front()
        .unwrap_or(OperationOutcome::Success);
    let operation = FakeOperation {
        state: "pending".to_string(),
        polls_left: state.settle_after_polls,
        outcome,
        pool_id: pool_id.to_string(),
        command: command.to_string(),
        new_members,
    };
    let answer = operation_json(&id, &operation);
    state.operations.insert(id, operation);
    (StatusCode::OK, answer)
}

fn operation_json(id: &str, operation: &FakeOperation) -> Value {
    let mut value = json!({
        "id": id,
        "state": operation.state,
        "reference": {
            "id": operation.pool_id,
            "link": format!("/v2/instance-pool/{}", operation.pool_id),
            "command": operation.command,
        },
    });
    if operation.state == "failure" {
        value["reason"] = json!("fault");
    }
    value
}

fn scale(state: &mut State, pool_id: &str, body: &[u8], command: &str) -> Answer {
    let size = serde_json::from_slice::<Value>(body)
        .ok()
        .filter(|value| value.as_object().is_some_and(|object| object.len() == 1))
        .and_then(|value| value.get("size").and_then(Value::as_i64));
    let Some(size) = size.filter(|size| *size >= 0) else {
        return message(
            StatusCode::BAD_REQUEST,
            "body must be {\"size\": <non-negative integer>}",
        );
    };
    let Some(current) = state.pools.get(pool_id).map(|pool| pool.size) else {
        return message(
            StatusCode::NOT_FOUND,
            format!("instance pool {pool_id} not found"),
        );
    };
    let added = size - current;
    if added > 0 && state.quota_limit >= 0 && state.quota_usage + added > state.quota_limit {
        return message(
            StatusCode::FORBIDDEN,
            format!(
                "quota exceeded: instance usage {} + {added} over limit {}",
                state.quota_usage, state.quota_limit
            ),
        );
    }
    let mut new_members = Vec::new();
    if added > 0 {
        new_members = state.add_members(pool_id, added as usize, "starting");
        state.quota_usage += added;
        if let Some(pool) = state.pools.get_mut(pool_id) {
            pool.state = "scaling-up".to_string();
        }
    } else if added < 0 {
        let removed: Vec<String> = match state.pools.get_mut(pool_id) {
            Some(pool) => {
                let keep = pool
                    .members
                    .len()
                    .saturating_sub(added.unsigned_abs() as usize);
                pool.state = "scaling-down".to_string();
                pool.members.split_off(keep)
            }
            None => Vec::new(),
        };
        for id in &removed {
            state.instances.remove(id);
        }
        state.quota_usage -= removed.len() as i64;
        if let Some(pool) = state.pools.get_mut(pool_id) {
            pool.size = size;
        }
    }
    start_operation(state, pool_id, command, new_members)
}

fn evict(state: &mut State, pool_id: &str, body: &[u8], command: &str) -> Answer {
    let instances: Option<Vec<String>> = serde_json::from_slice::<Value>(body)
        .ok()
        .filter(|value| value.as_object().is_some_and(|object| object.len() == 1))
        .and_then(|value| value.get("instances").cloned())
        .and_then(|value| serde_json::from_value(value).ok());
    let Some(instances) = instances.filter(|list| !list.is_empty()) else {
        return message(
            StatusCode::BAD_REQUEST,
            "body must be {\"instances\": [<instance id>, ...]}",
        );
    };
    let Some(pool) = state.pools.get_mut(pool_id) else {
        return message(
            StatusCode::NOT_FOUND,
            format!("instance pool {pool_id} not found"),
        );
    };
    if let Some(foreign) = instances.iter().find(|id| !pool.members.contains(id)) {
        return message(
            StatusCode::BAD_REQUEST,
            format!("instance {foreign} is not a member of instance pool {pool_id}"),
        );
    }
    pool.members.retain(|member| !instances.contains(member));
    pool.size = pool.members.len() as i64;
    pool.state = "scaling-down".to_string();
    for id in &instances {
        state.instances.remove(id);
    }
    state.quota_usage -= instances.len() as i64;
    start_operation(state, pool_id, command, Vec::new())
}

fn poll_operation(state: &mut State, id: &str) -> Answer {
    let Some(mut operation) = state.operations.get(id).cloned() else {
        return message(StatusCode::NOT_FOUND, format!("operation {id} not found"));
    };
    if operation.state == "pending" && operation.outcome != OperationOutcome::NeverSettles {
        operation.polls_left = operation.polls_left.saturating_sub(1);
        if operation.polls_left == 0 {
            operation.state = match operation.outcome {
                OperationOutcome::Failure => "failure",
                OperationOutcome::Timeout => "timeout",
                _ => "success",
            }
            .to_string();
            if !state.stuck_pools.contains(&operation.pool_id)
                && let Some(pool) = state.pools.get_mut(&operation.pool_id)
            {
                pool.state = "running".to_string();
            }
            for member in &operation.new_members {
                if let Some(instance) = state.instances.get_mut(member)
                    && instance.state == "starting"
                {
                    instance.state = "running".to_string();
                }
            }
        }
    }
    let answer = operation_json(id, &operation);
    state.operations.insert(id.to_string(), operation);
    (StatusCode::OK, answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fake's own check agrees with Exoscale's published signature examples (docs/exoscale.md
    /// EXO-03), so it can judge the provider's signer.
    #[test]
    fn signature_check_matches_the_byte_vectors() {
        let sign = |method, path, body: &str, values| {
            expected_signature(
                "test-secret",
                method,
                path,
                body.as_bytes(),
                values,
                "1700000000",
            )
        };
        assert_eq!(
            sign(
                "GET",
                "/v2/instance/6f1f2a3e-0000-4000-8000-000000000001",
                "",
                ""
            )
            .as_deref(),
            Some("NaxWORiSszNV26DUquRv5epv7N6V7oew8BnzkfUFNpU=")
        );
        assert_eq!(
            sign(
                "PUT",
                "/v2/instance-pool/6f1f2a3e-0000-4000-8000-0000000000aa:scale",
                r#"{"size":3}"#,
                ""
            )
            .as_deref(),
            Some("hJlOG6qHOYfOYcPqd0VneYbi6P3mQueINi4zxJlTY38=")
        );
        assert_eq!(
            sign("GET", "/v2/example", "", "12").as_deref(),
            Some("3v8cTvVTkQ6HifN0TshJepbqqvUGYgktYsneSPvUn9M=")
        );
    }

    #[test]
    fn routes() {
        assert_eq!(
            route(&Method::PUT, "/v2/sks-cluster/c/nodepool/n:evict"),
            Some((
                Endpoint::EvictSksNodepoolMembers,
                vec!["c".into(), "n".into()]
            ))
        );
        assert_eq!(
            route(&Method::GET, "/v2/instance-pool/p"),
            Some((Endpoint::GetInstancePool, vec!["p".into()]))
        );
        assert_eq!(route(&Method::GET, "/v2/instance-pool/p:scale"), None);
        assert_eq!(route(&Method::GET, "/v1/instance/x"), None);
    }
}
