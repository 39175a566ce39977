//! An HTTP proxy between one Kubernetes client (a `ferroscale run` replica) and kube-apiserver
//! that injects faults per kind of request, switched at run time, so the live tests can prove
//! that the autoscaler never loses a pod or wrongly removes a node when the API server
//! misbehaves.
//!
//! It is HTTP-aware rather than a TCP proxy (toxiproxy and the like) because the faults that
//! matter are about *which* request fails: a watch that goes silent while writes still work, the
//! one node update that adds the deletion taint held back, evictions answered 429. The traffic
//! is TLS, so only a proxy that terminates TLS can tell a watch from a PATCH of a node. The
//! client authenticates with a bearer token (a header, which the proxy passes on), not a client
//! certificate, so terminating TLS costs the client nothing.
//!
//! **Certificates.** Start the proxy with the control plane's own serving certificate and key
//! (valid for 127.0.0.1, signed by the cluster CA) and the same CA for the upstream side. A
//! kubeconfig for the proxy is then the client's kubeconfig with only `server` changed to
//! [`ApiProxy::url`]: same `certificate-authority`, same token.
//!
//! **Faults.** [`Rule`]s (a [`Matcher`] and an [`Action`]: answer a `Status`, delay, reset the
//! connection, blackhole, hold until released, cut a watch after a while) apply to new requests,
//! first match wins. Watches already streaming are cut with [`Faults::drop_watches`] or silenced
//! with [`Faults::stall_watches`]; [`Faults::partition`] makes everything go silent (or be
//! refused) until [`Faults::heal`]. Every request and what became of it is in [`Faults::log`].
//!
//! HTTP/1.1 only (kube-rs speaks nothing else), and no protocol upgrades (exec, attach,
//! port-forward).
//!
//! ```no_run
//! # async fn example(
//! #     control_plane: &ferroscale_testing_control_plane::ControlPlane,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use ferroscale_testing_faults::api_proxy::{
//!     Action, ApiProxy, Matcher, ProxyConfig, RequestClass, Rule,
//! };
//!
//! let pki = control_plane.pki_files();
//! let proxy = ApiProxy::start(ProxyConfig {
//!     upstream_url: control_plane.server_url(),
//!     upstream_ca_pem_path: pki.ca_certificate.clone(),
//!     serving_cert_path: pki.serving_certificate.clone(),
//!     serving_key_path: pki.serving_key.clone(),
//! })
//! .await?;
//! // ... point the autoscaler's kubeconfig at proxy.url() ...
//! let hold = proxy.add_rule(Rule::new(
//!     Matcher::any().class(RequestClass::Eviction),
//!     Action::Hold,
//! ));
//! if let Some(held) = proxy.wait_for_held(hold, Duration::from_secs(60)).await {
//!     // The eviction has not reached the API server; look at the cluster, then:
//!     proxy.release(held.id);
//! }
//! # Ok(())
//! # }
//! ```

mod classify;
mod held;
mod log;
mod rules;
mod server;
mod status;
mod streams;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use http::Uri;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

pub use classify::{Classification, RequestClass, RequestTarget, classify};
pub use held::{HeldId, HeldRequest};
pub use log::{LOG_CAPACITY, LogEntry, Outcome};
pub use rules::{Action, BODY_MATCH_LIMIT, Matcher, RequestInfo, Rule, RuleId};
pub use streams::{StallId, StreamCut};

use held::{HeldQuery, HeldRequests};
use log::RequestLog;
use rules::RuleTable;
use server::UpstreamClient;
use streams::Streams;

/// Where the proxy forwards to and what it serves with. All files are PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// The API server, `https://host:port`.
    pub upstream_url: String,
    /// The CA that signed the API server's certificate.
    pub upstream_ca_pem_path: PathBuf,
    /// The certificate the proxy presents to clients: the control plane's serving certificate,
    /// so clients keep trusting the CA they already trust.
    pub serving_cert_path: PathBuf,
    pub serving_key_path: PathBuf,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("reading the {what} from {path}: {source}")]
    Pem {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} holds no {what}")]
    NoCertificate { what: &'static str, path: PathBuf },
    #[error("setting up TLS with the {what} from {path}: {source}")]
    Tls {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("the upstream URL {url:?} is not https://host:port: {problem}")]
    UpstreamUrl { url: String, problem: String },
    #[error("listening on {address}: {source}")]
    Listen {
        address: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// How a partition treats requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionMode {
    /// Nothing gets through and nothing is refused: new requests and answers wait, streams go
    /// silent, as when packets are dropped. On [`Faults::heal`] whatever clients still wait for
    /// goes through, late, as TCP would deliver it.
    Silent,
    /// Every new request has its connection reset and every stream is cut, as when the API
    /// server is down.
    Refuse,
}

/// A running proxy. Dropping it stops the listener, every connection and every relayed stream.
///
/// It dereferences to [`Faults`], the handle that switches faults; [`ApiProxy::faults`] gives a
/// clone of it to move into other tasks.
#[derive(Debug)]
pub struct ApiProxy {
    faults: Faults,
    address: SocketAddr,
}

impl ApiProxy {
    /// Listens on a free port of 127.0.0.1, on the current tokio runtime.
    pub async fn start(config: ProxyConfig) -> Result<ApiProxy, ProxyError> {
        let upstream_base = upstream_base(&config.upstream_url)?;
        let acceptor = TlsAcceptor::from(Arc::new(serving_tls(
            &config.serving_cert_path,
            &config.serving_key_path,
        )?));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(upstream_tls(&config.upstream_ca_pem_path)?)
            .https_only()
            .enable_http1()
            .build();
        let upstream = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .build(connector);

        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| ProxyError::Listen { address, source })?;
        let address = listener
            .local_addr()
            .map_err(|source| ProxyError::Listen { address, source })?;

        let shared = Arc::new(Shared {
            upstream,
            upstream_base,
            rules: Mutex::default(),
            held: Mutex::default(),
            streams: Mutex::default(),
            partition: watch::Sender::new(None),
            log: Mutex::default(),
            activity: watch::Sender::new(0),
            tasks: Mutex::default(),
        });
        shared.spawn(server::accept_loop(Arc::clone(&shared), listener, acceptor));
        Ok(ApiProxy {
            faults: Faults { shared },
            address,
        })
    }

    /// `https://127.0.0.1:PORT`, for a kubeconfig's `server`.
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// A handle on the faults that can outlive borrows of the proxy (it does not keep the proxy
    /// running).
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }
}

impl Deref for ApiProxy {
    type Target = Faults;

    fn deref(&self) -> &Faults {
        &self.faults
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.faults.shared.shut_down();
    }
}

/// Switches the faults of one proxy and reads its log. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Faults {
    shared: Arc<Shared>,
}

impl Faults {
    /// Adds a rule after the existing ones; it applies to requests that arrive from now on.
    pub fn add_rule(&self, rule: Rule) -> RuleId {
        lock(&self.shared.rules).add(rule)
    }

    /// Removes a rule; `false` if it was already gone (removed, or expired after its `times`).
    pub fn remove_rule(&self, id: RuleId) -> bool {
        lock(&self.shared.rules).remove(id)
    }

    /// Whether a rule is still in force (not removed, `times` not used up).
    pub fn has_rule(&self, id: RuleId) -> bool {
        lock(&self.shared.rules).contains(id)
    }

    pub fn clear_rules(&self) {
        lock(&self.shared.rules).clear();
    }

    /// The requests parked by `Hold` rules, oldest first.
    pub fn held(&self) -> Vec<HeldRequest> {
        lock(&self.shared.held).list()
    }

    /// Forwards a parked request; `false` if it is no longer parked (released already, or its
    /// client gave up).
    pub fn release(&self, id: HeldId) -> bool {
        lock(&self.shared.held).release(id)
    }

    /// Forwards every parked request, returning how many.
    pub fn release_all(&self) -> usize {
        lock(&self.shared.held).release_all()
    }

    /// Waits until the `Hold` rule `rule` has parked a request (or one is parked already).
    pub async fn wait_for_held(&self, rule: RuleId, timeout: Duration) -> Option<HeldRequest> {
        self.wait_for(timeout, || {
            lock(&self.shared.held).find(&HeldQuery::Rule(rule))
        })
        .await
    }

    /// Waits until a parked request matches `matcher` (its body included).
    pub async fn wait_for_held_matching(
        &self,
        matcher: &Matcher,
        timeout: Duration,
    ) -> Option<HeldRequest> {
        self.wait_for(timeout, || {
            lock(&self.shared.held).find(&HeldQuery::Matching(matcher))
        })
        .await
    }

    /// The watches streaming now that match `matcher`.
    pub fn watches(&self, matcher: &Matcher) -> Vec<RequestInfo> {
        lock(&self.shared.streams).watches(matcher)
    }

    /// Waits until a watch matching `matcher` is streaming; `false` on timeout.
    pub async fn wait_for_watch(&self, matcher: &Matcher, timeout: Duration) -> bool {
        self.wait_for(timeout, || {
            lock(&self.shared.streams)
                .watches(matcher)
                .into_iter()
                .next()
        })
        .await
        .is_some()
    }

    /// Cuts the matching watches now streaming, returning how many. Their clients see the body
    /// break off, as when the connection to the API server breaks. New watches are not affected.
    pub fn drop_watches(&self, matcher: &Matcher) -> usize {
        lock(&self.shared.streams).drop_watches(matcher)
    }

    /// Stops passing on events of the matching watches, those streaming now and those started
    /// later, until [`Faults::resume`]. The connections stay open and silent: the client's view
    /// goes stale without any error. The proxy keeps reading the API server meanwhile, so
    /// nothing is lost.
    pub fn stall_watches(&self, matcher: Matcher) -> StallId {
        lock(&self.shared.streams).stall_watches(matcher)
    }

    /// Ends a stall: the held-back events are delivered. `false` if it had ended already.
    pub fn resume(&self, id: StallId) -> bool {
        lock(&self.shared.streams).resume(id)
    }

    /// Cuts the client off from the API server, for new and in-flight requests, watches included,
    /// until [`Faults::heal`]. Takes precedence over rules.
    pub fn partition(&self, mode: PartitionMode) {
        let mut streams = lock(&self.shared.streams);
        streams.set_partitioned(mode == PartitionMode::Silent);
        if mode == PartitionMode::Refuse {
            streams.cut_all();
        }
        drop(streams);
        self.shared.partition.send_replace(Some(mode));
    }

    /// Ends a partition: requests flow again, and a silent partition's held-back requests,
    /// answers and watch events are delivered.
    pub fn heal(&self) {
        self.shared.partition.send_replace(None);
        lock(&self.shared.streams).set_partitioned(false);
    }

    /// Every request received (the last [`LOG_CAPACITY`]), oldest first.
    pub fn log(&self) -> Vec<LogEntry> {
        lock(&self.shared.log).entries()
    }

    async fn wait_for<T>(
        &self,
        timeout: Duration,
        mut probe: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        // Subscribing first: whatever happens after the probe wakes the wait.
        let mut activity = self.shared.activity.subscribe();
        loop {
            if let Some(found) = probe() {
                return Some(found);
            }
            match tokio::time::timeout_at(deadline, activity.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return probe(),
            }
        }
    }
}

/// The state the data plane and the [`Faults`] handle share.
struct Shared {
    upstream: UpstreamClient,
    /// Scheme and authority of the API server.
    upstream_base: Uri,
    rules: Mutex<RuleTable>,
    held: Mutex<HeldRequests>,
    streams: Mutex<Streams>,
    partition: watch::Sender<Option<PartitionMode>>,
    log: Mutex<RequestLog>,
    /// Bumped when a request is parked or a stream starts, for the `wait_for_*` helpers.
    activity: watch::Sender<u64>,
    tasks: Mutex<Tasks>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Shared")
            .field("upstream_base", &self.upstream_base)
            .finish_non_exhaustive()
    }
}

/// Every task of the proxy (the listener, each connection, each stream pump), so that dropping
/// the proxy stops them all.
#[derive(Default)]
struct Tasks {
    running: JoinSet<()>,
    shut_down: bool,
}

impl Shared {
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = lock(&self.tasks);
        if tasks.shut_down {
            return;
        }
        // Finished tasks stay in the set until joined.
        while tasks.running.try_join_next().is_some() {}
        tasks.running.spawn(task);
    }

    fn shut_down(&self) {
        let mut tasks = lock(&self.tasks);
        tasks.shut_down = true;
        tasks.running.abort_all();
    }

    fn note_activity(&self) {
        self.activity
            .send_modify(|count| *count = count.wrapping_add(1));
    }
}

/// Locks a mutex of the proxy. A panic while one was held (a bug of the proxy's, in a test) has
/// left nothing half-changed that matters more than the test's own failure.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn upstream_base(url: &str) -> Result<Uri, ProxyError> {
    let problem = |problem: &str| ProxyError::UpstreamUrl {
        url: url.to_owned(),
        problem: problem.to_owned(),
    };
    let uri: Uri = url.parse().map_err(|_| problem("not a URL"))?;
    if uri.scheme_str() != Some("https") {
        return Err(problem("the scheme must be https"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(problem("a path prefix is not supported"));
    }
    let mut parts = uri.into_parts();
    if parts.authority.is_none() {
        return Err(problem("no host"));
    }
    parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    Uri::from_parts(parts).map_err(|_| problem("not a URL"))
}

fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, ProxyError> {
    let pem_error = |source| ProxyError::Pem {
        what,
        path: path.to_owned(),
        source,
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(pem_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem_error)?;
    if certificates.is_empty() {
        return Err(ProxyError::NoCertificate {
            what,
            path: path.to_owned(),
        });
    }
    Ok(certificates)
}

fn serving_tls(
    certificate_path: &Path,
    key_path: &Path,
) -> Result<rustls::ServerConfig, ProxyError> {
    let certificates = read_certificates("serving certificate", certificate_path)?;
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|source| ProxyError::Pem {
        what: "serving key",
        path: key_path.to_owned(),
        source,
    })?;
    let tls_error = |source| ProxyError::Tls {
        what: "serving certificate and key",
        path: certificate_path.to_owned(),
        source,
    };
    let mut config = rustls::ServerConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .with_no_client_auth()
        .with_single_cert(certificates, key)
        .map_err(tls_error)?;
    // The proxy speaks HTTP/1.1 only; a client offering h2 must not be told it may use it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn upstream_tls(ca_path: &Path) -> Result<rustls::ClientConfig, ProxyError> {
    let tls_error = |source| ProxyError::Tls {
        what: "upstream CA",
        path: ca_path.to_owned(),
        source,
    };
    let mut roots = rustls::RootCertStore::empty();
    for certificate in read_certificates("upstream CA", ca_path)? {
        roots.add(certificate).map_err(tls_error)?;
    }
    Ok(
        rustls::ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .map_err(tls_error)?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_url_must_be_https_with_a_host_and_no_path() {
        assert_eq!(
            upstream_base("https://127.0.0.1:6443").expect("valid"),
            "https://127.0.0.1:6443/".parse::<Uri>().expect("URI")
        );
        assert!(upstream_base("https://127.0.0.1:6443/").is_ok());
        for bad in [
            "http://127.0.0.1:6443",
            "127.0.0.1:6443",
            "https://127.0.0.1:6443/prefix",
            "not a url",
        ] {
            let error = upstream_base(bad).expect_err(bad);
            assert!(error.to_string().contains(bad), "{error}");
        }
    }

    #[tokio::test]
    async fn a_missing_certificate_file_is_named_in_the_error() {
        let error = ApiProxy::start(ProxyConfig {
            upstream_url: "https://127.0.0.1:6443".into(),
            upstream_ca_pem_path: "/nonexistent/ca.crt".into(),
            serving_cert_path: "/nonexistent/serving.crt".into(),
            serving_key_path: "/nonexistent/serving.key".into(),
        })
        .await
        .expect_err("no such files");
        assert!(
            error.to_string().contains("/nonexistent/serving.crt"),
            "{error}"
        );
    }
}
