//! How the process reaches Kubernetes API servers: the one place where `kube::Client`s are built,
//! so that every request the process makes — the workload cluster's lists, watches and their
//! relists, writes, events and Lease renewals, and the providers' management-cluster clients —
//! carries the `--user-agent` and waits for the client-side rate limit of `--kube-client-qps` /
//! `--kube-client-burst`, as client-go's token bucket makes upstream's requests wait.
//!
//! - [`ApiAccess`]: the settings (upstream defaults: 5 requests per second, bursts of 10,
//!   User-Agent `cluster-autoscaler`), and `--kubernetes`, the API server URL that replaces the
//!   in-cluster configuration's.
//! - [`ApiServer`]: one API server's configuration with its request budget; every client built
//!   from it shares that budget, as the typed clients of one client-go clientset share theirs.
//! - The budget is a token bucket applied as a tower layer in front of kube's own service stack:
//!   a request waits for its token before anything below (authentication, TLS, the connection
//!   pool) sees it. A watch is one request, counted when it is opened.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderValue;
use http::header::USER_AGENT;
use kube::Client;
use kube::client::ClientBuilder;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// client-go's default QPS (`rest.DefaultQPS`), upstream's `--kube-client-qps` default.
pub const DEFAULT_QPS: f64 = 5.0;
/// client-go's default burst (`rest.DefaultBurst`), upstream's `--kube-client-burst` default.
pub const DEFAULT_BURST: i64 = 10;
/// Upstream's `--user-agent` default.
pub const DEFAULT_USER_AGENT: &str = "cluster-autoscaler";
/// Upstream's `--kube-api-content-type` default.
pub const PROTOBUF_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// Why a client could not be configured; each names the flag or file and the value.
#[derive(Debug, thiserror::Error)]
pub enum ApiAccessError {
    #[error("invalid value {value:?} for flag --{flag}: {reason}")]
    InvalidFlag {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("--kubernetes={url}: {reason}")]
    Master { url: String, reason: String },
    #[error("building the Kubernetes client for {server}: {reason}")]
    Client { server: String, reason: String },
}

/// The body encoding asked of the API server (`--kube-api-content-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentType {
    /// Upstream's default. kube-rs speaks JSON only, so Ferroscale answers this with JSON: the
    /// API server serves both for every built-in kind, and the objects read are the same.
    Protobuf,
    Json,
}

impl ContentType {
    pub fn parse(value: &str) -> Result<ContentType, ApiAccessError> {
        match value.trim() {
            PROTOBUF_CONTENT_TYPE => Ok(ContentType::Protobuf),
            JSON_CONTENT_TYPE => Ok(ContentType::Json),
            other => Err(ApiAccessError::InvalidFlag {
                flag: "kube-api-content-type",
                value: other.to_string(),
                reason: format!("expected {PROTOBUF_CONTENT_TYPE} or {JSON_CONTENT_TYPE}"),
            }),
        }
    }
}

/// The API-access flags of `ferroscale run`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiAccess {
    /// `--kube-client-qps`: requests per second each API server's budget refills. Negative
    /// disables the limit; 0 means client-go's default, 5 (both as client-go).
    pub qps: f64,
    /// `--kube-client-burst`: how many requests may go at once before the rate applies.
    pub burst: i64,
    /// `--user-agent`: the product token of every request's User-Agent.
    pub user_agent: String,
    /// `--kube-api-content-type`.
    pub content_type: ContentType,
    /// `--kubernetes`: the API server to use when no `--kubeconfig` is given.
    pub master: Option<MasterUrl>,
}

impl Default for ApiAccess {
    fn default() -> Self {
        ApiAccess {
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
            user_agent: DEFAULT_USER_AGENT.to_string(),
            content_type: ContentType::Protobuf,
            master: None,
        }
    }
}

/// The rate limit in force: `None` when requests are not limited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    pub qps: f64,
    pub burst: u32,
}

impl ApiAccess {
    /// The limit client-go would apply: QPS 0 is its default 5, a negative QPS (or an infinite
    /// one) is no limit, and a positive QPS needs a positive burst (client-go refuses the
    /// clientset otherwise).
    pub fn rate_limit(&self) -> Result<Option<RateLimit>, ApiAccessError> {
        if self.qps.is_nan() {
            return Err(ApiAccessError::InvalidFlag {
                flag: "kube-client-qps",
                value: self.qps.to_string(),
                reason: "not a number".to_string(),
            });
        }
        let qps = if self.qps == 0.0 {
            DEFAULT_QPS
        } else {
            self.qps
        };
        if qps < 0.0 || qps.is_infinite() {
            return Ok(None);
        }
        if self.burst <= 0 {
            return Err(ApiAccessError::InvalidFlag {
                flag: "kube-client-burst",
                value: self.burst.to_string(),
                reason: "must be positive when --kube-client-qps is positive".to_string(),
            });
        }
        let burst = u32::try_from(self.burst).map_err(|_| ApiAccessError::InvalidFlag {
            flag: "kube-client-burst",
            value: self.burst.to_string(),
            reason: format!("at most {}", u32::MAX),
        })?;
        Ok(Some(RateLimit { qps, burst }))
    }

    /// The User-Agent of every request: the `--user-agent` token followed, as client-go's
    /// default user agent is, by the version and the platform.
    pub fn user_agent_header(&self) -> Result<HeaderValue, ApiAccessError> {
        let text = format!(
            "{}/{} ({}/{}) ferroscale",
            self.user_agent.trim(),
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            go_arch(),
        );
        if self.user_agent.trim().is_empty() {
            return Err(ApiAccessError::InvalidFlag {
                flag: "user-agent",
                value: self.user_agent.clone(),
                reason: "must not be empty".to_string(),
            });
        }
        HeaderValue::from_str(&text).map_err(|_| ApiAccessError::InvalidFlag {
            flag: "user-agent",
            value: self.user_agent.clone(),
            reason: "not a valid HTTP header value".to_string(),
        })
    }

    /// The clients of the API server `config` reaches, sharing one request budget.
    pub fn server(&self, config: kube::Config) -> Result<ApiServer, ApiAccessError> {
        let limit = self.rate_limit()?;
        Ok(ApiServer {
            config,
            user_agent: self.user_agent_header()?,
            limit,
            bucket: limit.map(|limit| Arc::new(TokenBucket::new(limit))),
        })
    }
}

/// The platform's architecture as Go names it (`GOARCH`), which client-go's user agent carries.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// `--kubernetes`, upstream's "Kubernetes master location": a URL whose scheme and host name the
/// API server, with the query keys upstream reads: `inClusterConfig` (default true: the
/// in-cluster credentials, sent to this server), `insecure` (skip verifying the server's
/// certificate), `auth` (with `inClusterConfig=false`, a kubeconfig file for the credentials).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterUrl {
    pub text: String,
    pub server: http::Uri,
    pub in_cluster: bool,
    pub insecure: bool,
    pub auth: Option<PathBuf>,
}

impl MasterUrl {
    pub fn parse(text: &str) -> Result<MasterUrl, ApiAccessError> {
        let invalid = |reason: String| ApiAccessError::Master {
            url: text.to_string(),
            reason,
        };
        let uri: http::Uri = text
            .trim()
            .parse()
            .map_err(|e| invalid(format!("not a URL: {e}")))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(invalid(
                "expected scheme and host, e.g. https://10.0.0.1:6443".to_string(),
            ));
        };
        if scheme != "http" && scheme != "https" {
            return Err(invalid(format!(
                "scheme {scheme:?}: expected http or https"
            )));
        }
        let server: http::Uri = format!("{scheme}://{authority}")
            .parse()
            .map_err(|e| invalid(format!("not a URL: {e}")))?;
        let mut master = MasterUrl {
            text: text.to_string(),
            server,
            in_cluster: true,
            insecure: false,
            auth: None,
        };
        for pair in uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let boolean = |value: &str| {
                parse_go_bool(value)
                    .ok_or_else(|| invalid(format!("{key}={value:?}: expected true or false")))
            };
            match key {
                "inClusterConfig" => master.in_cluster = boolean(value)?,
                "insecure" => master.insecure = boolean(value)?,
                "auth" => {
                    master.auth = Some(PathBuf::from(value)).filter(|p| !p.as_os_str().is_empty())
                }
                // Upstream reads it into a field that the client does not use for core kinds.
                "apiVersion" => {}
                other => {
                    return Err(invalid(format!(
                        "unknown query key {other:?} (known: inClusterConfig, insecure, auth, apiVersion)"
                    )));
                }
            }
        }
        Ok(master)
    }

    /// The client configuration this URL stands for. The server is always the URL's.
    pub async fn client_config(&self) -> Result<kube::Config, ApiAccessError> {
        let failed = |reason: String| ApiAccessError::Master {
            url: self.text.clone(),
            reason,
        };
        let mut config = if self.in_cluster {
            kube::Config::incluster()
                .map_err(|e| failed(format!("reading the in-cluster configuration: {e}")))?
        } else if let Some(path) = &self.auth {
            kubeconfig_file(path).await.map_err(failed)?
        } else {
            kube::Config::new(self.server.clone())
        };
        config.cluster_url = self.server.clone();
        if self.insecure {
            config.accept_invalid_certs = true;
            config.root_cert = None;
        }
        Ok(config)
    }
}

async fn kubeconfig_file(path: &Path) -> Result<kube::Config, String> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let file = Kubeconfig::read_from(path).map_err(|e| format!("{}: {e}", path.display()))?;
    kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// One API server: its configuration and the request budget its clients share.
#[derive(Clone)]
pub struct ApiServer {
    config: kube::Config,
    user_agent: HeaderValue,
    limit: Option<RateLimit>,
    bucket: Option<Arc<TokenBucket>>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("url", &self.url())
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl ApiServer {
    /// The server's URL, for messages.
    pub fn url(&self) -> String {
        self.config.cluster_url.to_string()
    }

    pub fn config(&self) -> &kube::Config {
        &self.config
    }

    /// A client with kube's default retries, within the shared budget.
    pub fn client(&self) -> Result<Client, ApiAccessError> {
        self.build(true, self.bucket.clone(), self.user_agent.clone())
    }

    /// A client that does not retry on its own (see `KubeCluster::new`), within the shared
    /// budget.
    pub fn client_without_retry(&self) -> Result<Client, ApiAccessError> {
        self.build(false, self.bucket.clone(), self.user_agent.clone())
    }

    /// A client with a budget of its own and `/<purpose>` appended to the User-Agent, as
    /// upstream's leader election has its own client (`rest.AddUserAgent(config,
    /// "leader-election")`): renewing the Lease must not queue behind the autoscaler's lists.
    pub fn separate_client(&self, purpose: &str) -> Result<Client, ApiAccessError> {
        let user_agent = HeaderValue::from_str(&format!(
            "{}/{purpose}",
            self.user_agent.to_str().unwrap_or_default()
        ))
        .map_err(|_| ApiAccessError::Client {
            server: self.url(),
            reason: format!("user agent suffix {purpose:?} is not a valid header value"),
        })?;
        let bucket = self.limit.map(|limit| Arc::new(TokenBucket::new(limit)));
        self.build(true, bucket, user_agent)
    }

    fn build(
        &self,
        retry: bool,
        bucket: Option<Arc<TokenBucket>>,
        user_agent: HeaderValue,
    ) -> Result<Client, ApiAccessError> {
        let mut config = self.config.clone();
        config.default_retry = retry;
        config.headers.retain(|(name, _)| name != USER_AGENT);
        config.headers.push((USER_AGENT, user_agent));
        let builder = ClientBuilder::try_from(config).map_err(|e| ApiAccessError::Client {
            server: self.url(),
            reason: e.to_string(),
        })?;
        Ok(builder
            .with_layer(&RequestTimeoutLayer {
                limit: REQUEST_TIMEOUT,
            })
            .with_layer(&RateLimitLayer { bucket })
            .build())
    }
}

/// How long a request other than a watch may wait for its answer. kube-apiserver itself gives
/// up on such a request after a minute (its `--request-timeout`), so a client still waiting
/// later is waiting on a connection that went silent (a network partition, a half-open
/// connection after an API server restart); without a limit the loop would hang on its next
/// write for as long as TCP keeps the dead connection. Watches run for minutes by design and
/// kube-runtime bounds their silence itself.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(70);

/// A request got no answer within [`REQUEST_TIMEOUT`].
#[derive(Debug, thiserror::Error)]
#[error("no answer from the API server within {0:?}")]
pub struct RequestTimedOut(Duration);

/// Applies [`REQUEST_TIMEOUT`] to every request but watches. Below the rate limit, so the wait
/// for a token does not count.
#[derive(Debug, Clone, Copy)]
pub struct RequestTimeoutLayer {
    limit: Duration,
}

impl<S> Layer<S> for RequestTimeoutLayer {
    type Service = RequestTimeout<S>;

    fn layer(&self, inner: S) -> RequestTimeout<S> {
        RequestTimeout {
            inner,
            limit: self.limit,
        }
    }
}

pub struct RequestTimeout<S> {
    inner: S,
    limit: Duration,
}

/// A watch: `watch=true` (or `1`) in the query.
fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1" | "watch=True"))
    })
}

impl<S, B> Service<http::Request<B>> for RequestTimeout<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
    S::Error: From<RequestTimedOut>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let watch = is_watch(request.uri());
        let limit = self.limit;
        let answer = self.inner.call(request);
        Box::pin(async move {
            if watch {
                return answer.await;
            }
            match tokio::time::timeout(limit, answer).await {
                Ok(answer) => answer,
                Err(_) => Err(RequestTimedOut(limit).into()),
            }
        })
    }
}

/// client-go's token bucket (golang.org/x/time/rate): `burst` tokens to start with, refilled at
/// `qps` per second up to `burst`; each request takes one, and when none is left it reserves the
/// next one and waits for it, so waiting requests go in the order they asked.
#[derive(Debug)]
pub struct TokenBucket {
    limit: RateLimit,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    /// Negative when requests have reserved tokens not yet refilled.
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    pub fn new(limit: RateLimit) -> TokenBucket {
        TokenBucket {
            limit,
            state: Mutex::new(BucketState {
                tokens: f64::from(limit.burst),
                updated: Instant::now(),
            }),
        }
    }

    /// Takes a token: how long the caller must wait before its request may go.
    pub fn reserve(&self) -> Duration {
        let now = Instant::now();
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let refilled = now.saturating_duration_since(state.updated).as_secs_f64() * self.limit.qps;
        state.tokens = (state.tokens + refilled).min(f64::from(self.limit.burst));
        state.updated = now;
        state.tokens -= 1.0;
        if state.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-state.tokens / self.limit.qps)
        }
    }
}

/// Puts [`RateLimited`] in front of a service.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Option<Arc<TokenBucket>>,
}

impl RateLimitLayer {
    pub fn new(bucket: Option<Arc<TokenBucket>>) -> RateLimitLayer {
        RateLimitLayer { bucket }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: self.bucket.clone(),
            waiting: None,
            permitted: false,
        }
    }
}

/// A service that is not ready until the bucket grants a token. kube's `Client` drives its
/// service from one buffer worker that asks for readiness only when a request is queued, so each
/// request takes exactly one token, in arrival order, and nothing below this layer sees a
/// request before its token.
pub struct RateLimited<S> {
    inner: S,
    bucket: Option<Arc<TokenBucket>>,
    waiting: Option<Pin<Box<Sleep>>>,
    /// A token was taken for the next `call`.
    permitted: bool,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if let Some(bucket) = &self.bucket
            && !self.permitted
        {
            if self.waiting.is_none() {
                let wait = bucket.reserve();
                if wait.is_zero() {
                    self.permitted = true;
                } else {
                    self.waiting = Some(Box::pin(tokio::time::sleep(wait)));
                }
            }
            if let Some(waiting) = self.waiting.as_mut() {
                if waiting.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.waiting = None;
                self.permitted = true;
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.permitted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    fn access(qps: f64, burst: i64) -> ApiAccess {
        ApiAccess {
            qps,
            burst,
            ..ApiAccess::default()
        }
    }

    #[test]
    fn only_watches_escape_the_request_timeout() {
        let uri = |text: &str| text.parse::<http::Uri>().unwrap();
        assert!(is_watch(&uri(
            "https://h/api/v1/pods?allowWatchBookmarks=true&watch=true&resourceVersion=5"
        )));
        assert!(is_watch(&uri("https://h/api/v1/nodes?watch=1")));
        assert!(!is_watch(&uri("https://h/api/v1/pods?limit=500")));
        assert!(!is_watch(&uri("https://h/api/v1/namespaces/a/pods/watch")));
        assert!(!is_watch(&uri(
            "https://h/api/v1/pods?fieldSelector=watch%3Dtrue"
        )));
    }

    /// A request whose answer never comes fails after the limit instead of hanging the loop.
    #[tokio::test(start_paused = true)]
    async fn a_silent_request_times_out_and_a_watch_does_not() {
        let silent = tower::service_fn(|_: http::Request<()>| async {
            std::future::pending::<Result<(), tower::BoxError>>().await
        });
        let mut service = RequestTimeoutLayer {
            limit: Duration::from_secs(70),
        }
        .layer(silent);
        let get = http::Request::get("https://h/api/v1/nodes/a")
            .body(())
            .unwrap();
        let error = service.call(get).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "no answer from the API server within 70s"
        );
        let watch = http::Request::get("https://h/api/v1/nodes?watch=true")
            .body(())
            .unwrap();
        let waited = tokio::time::timeout(Duration::from_secs(3600), service.call(watch)).await;
        assert!(
            waited.is_err(),
            "a watch is never cut by the request timeout"
        );
    }

    #[test]
    fn limits_follow_client_go() {
        assert_eq!(
            ApiAccess::default().rate_limit().unwrap(),
            Some(RateLimit {
                qps: 5.0,
                burst: 10
            })
        );
        // 0 is client-go's default, a negative QPS turns the limit off.
        assert_eq!(
            access(0.0, 3).rate_limit().unwrap(),
            Some(RateLimit { qps: 5.0, burst: 3 })
        );
        assert_eq!(access(-1.0, 0).rate_limit().unwrap(), None);
        assert_eq!(access(f64::INFINITY, 0).rate_limit().unwrap(), None);
        let error = access(2.0, 0).rate_limit().unwrap_err().to_string();
        assert!(
            error.contains("--kube-client-burst") && error.contains("\"0\""),
            "{error}"
        );
        assert!(access(f64::NAN, 1).rate_limit().is_err());
    }

    #[test]
    fn content_types_are_checked_by_name() {
        assert_eq!(
            ContentType::parse("application/vnd.kubernetes.protobuf").unwrap(),
            ContentType::Protobuf
        );
        assert_eq!(
            ContentType::parse("application/json").unwrap(),
            ContentType::Json
        );
        let error = ContentType::parse("application/yaml")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--kube-api-content-type") && error.contains("application/yaml"),
            "{error}"
        );
    }

    #[test]
    fn the_user_agent_starts_with_the_flag() {
        let header = ApiAccess::default().user_agent_header().unwrap();
        assert!(
            header.to_str().unwrap().starts_with("cluster-autoscaler/"),
            "{header:?}"
        );
        let custom = ApiAccess {
            user_agent: "my-autoscaler".into(),
            ..ApiAccess::default()
        };
        assert!(
            custom
                .user_agent_header()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("my-autoscaler/")
        );
        for bad in ["", "line\nbreak"] {
            let error = ApiAccess {
                user_agent: bad.into(),
                ..ApiAccess::default()
            }
            .user_agent_header()
            .unwrap_err()
            .to_string();
            assert!(error.contains("--user-agent"), "{error}");
        }
    }

    #[test]
    fn master_urls_parse_as_upstream_reads_them() {
        let master = MasterUrl::parse("https://10.0.0.1:6443").unwrap();
        assert_eq!(master.server, "https://10.0.0.1:6443/");
        assert!(master.in_cluster && !master.insecure && master.auth.is_none());
        let master = MasterUrl::parse(
            "http://127.0.0.1:8080/some/path?inClusterConfig=f&insecure=true&auth=/etc/kc",
        )
        .unwrap();
        assert_eq!(master.server, "http://127.0.0.1:8080/");
        assert!(!master.in_cluster && master.insecure);
        assert_eq!(master.auth, Some(PathBuf::from("/etc/kc")));
        for (bad, named) in [
            ("10.0.0.1:6443", "scheme and host"),
            ("ftp://host", "\"ftp\""),
            ("https://host?inClusterConfig=maybe", "\"maybe\""),
            (
                "https://host?useServiceAccount=true",
                "\"useServiceAccount\"",
            ),
        ] {
            let error = MasterUrl::parse(bad).unwrap_err().to_string();
            assert!(
                error.contains("--kubernetes") && error.contains(named),
                "{bad}: {error}"
            );
        }
    }

    #[tokio::test]
    async fn a_master_url_without_in_cluster_credentials_names_its_server() {
        let master =
            MasterUrl::parse("https://api.example:6443?inClusterConfig=false&insecure=1").unwrap();
        let config = master.client_config().await.unwrap();
        assert_eq!(config.cluster_url, "https://api.example:6443/");
        assert!(config.accept_invalid_certs);
    }

    /// Requests through a kube `Client` whose service records the (virtual) time each request
    /// reached it.
    struct Recorder {
        seen: Arc<StdMutex<Vec<Duration>>>,
        client: Client,
    }

    fn namespace_response() -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}
        }))
        .unwrap()
    }

    fn recorder(limit: Option<RateLimit>) -> Recorder {
        let seen = Arc::new(StdMutex::new(Vec::new()));
        let start = Instant::now();
        let record = Arc::clone(&seen);
        let service = tower::service_fn(move |_request: http::Request<kube::client::Body>| {
            record.lock().unwrap().push(start.elapsed());
            async move {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(200)
                        .body(kube::client::Body::from(namespace_response()))
                        .unwrap(),
                )
            }
        });
        let bucket = limit.map(|limit| Arc::new(TokenBucket::new(limit)));
        let client = Client::new(RateLimitLayer::new(bucket).layer(service), "default");
        Recorder { seen, client }
    }

    fn millis(recorder: &Recorder) -> Vec<u128> {
        recorder
            .seen
            .lock()
            .unwrap()
            .iter()
            .map(Duration::as_millis)
            .collect()
    }

    async fn get_namespaces(client: &Client, count: usize) {
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
        let requests = (0..count).map(|_| {
            let api = api.clone();
            async move { api.get("x").await.unwrap() }
        });
        futures::future::join_all(requests).await;
    }

    #[tokio::test(start_paused = true)]
    async fn requests_beyond_the_burst_wait_for_the_rate() {
        let recorder = recorder(Some(RateLimit { qps: 5.0, burst: 3 }));
        get_namespaces(&recorder.client, 7).await;
        // Three at once, then one every 200 ms.
        assert_eq!(millis(&recorder), vec![0, 0, 0, 200, 400, 600, 800]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_refills_while_idle_up_to_the_burst() {
        let recorder = recorder(Some(RateLimit { qps: 2.0, burst: 2 }));
        get_namespaces(&recorder.client, 2).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        get_namespaces(&recorder.client, 3).await;
        assert_eq!(millis(&recorder), vec![0, 0, 60_000, 60_000, 60_500]);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_limit_nothing_waits() {
        let recorder = recorder(None);
        get_namespaces(&recorder.client, 50).await;
        assert_eq!(millis(&recorder), vec![0; 50]);
    }

    /// A one-connection-per-request HTTP server that answers every GET with a Namespace and
    /// hands over each request's User-Agent.
    async fn user_agent_server() -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let sender = sender.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buffer = [0u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request).to_string();
                    let agent = text
                        .lines()
                        .find_map(|line| {
                            let (name, value) = line.split_once(':')?;
                            name.eq_ignore_ascii_case("user-agent")
                                .then(|| value.trim().to_string())
                        })
                        .unwrap_or_default();
                    let _ = sender.send(agent);
                    let body = namespace_response();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(&body).await;
                });
            }
        });
        (url, receiver)
    }

    #[tokio::test]
    async fn every_client_sends_the_user_agent_and_leader_election_marks_its_own() {
        let (url, mut agents) = user_agent_server().await;
        let access = ApiAccess {
            user_agent: "agent-test".into(),
            ..ApiAccess::default()
        };
        let server = access
            .server(kube::Config::new(url.parse().unwrap()))
            .unwrap();
        let expected = access
            .user_agent_header()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        assert!(expected.starts_with("agent-test/"), "{expected}");
        for client in [
            server.client().unwrap(),
            server.client_without_retry().unwrap(),
        ] {
            get_namespaces(&client, 1).await;
            assert_eq!(agents.recv().await.unwrap(), expected);
        }
        get_namespaces(&server.separate_client("leader-election").unwrap(), 1).await;
        assert_eq!(
            agents.recv().await.unwrap(),
            format!("{expected}/leader-election")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn copies_of_a_server_share_its_budget() {
        let access = ApiAccess {
            qps: 1.0,
            burst: 2,
            ..ApiAccess::default()
        };
        let server = access
            .server(kube::Config::new("http://127.0.0.1:1".parse().unwrap()))
            .unwrap();
        let shared = server.bucket.clone().unwrap();
        let copy = server.clone();
        assert_eq!(shared.reserve(), Duration::ZERO);
        assert_eq!(copy.bucket.as_ref().unwrap().reserve(), Duration::ZERO);
        assert_eq!(shared.reserve(), Duration::from_secs(1));
    }
}
