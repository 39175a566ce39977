//! The data plane: accepting TLS connections from clients, deciding each request's fate from the
//! partition and the rules, and forwarding to the API server over pooled TLS connections.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;

use super::classify::classify;
use super::log::Outcome;
use super::rules::{Action, BODY_MATCH_LIMIT, RequestInfo, RuleId};
use super::status::status_response;
use super::streams::{self, BodyError};
use super::{PartitionMode, Shared, lock};

pub(super) type ProxyBody = BoxBody<Bytes, BodyError>;
pub(super) type UpstreamClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Headers that describe one connection rather than the request (RFC 9110 section 7.6.1), plus
/// `Host`, which names the proxy: the upstream client sets its own.
const CONNECTION_HEADERS: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

pub(super) async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, acceptor: TlsAcceptor) {
    loop {
        match listener.accept().await {
            Ok((socket, _)) => {
                // Watch events are small writes that must not wait for Nagle.
                let _ = socket.set_nodelay(true);
                let connection_shared = Arc::clone(&shared);
                let acceptor = acceptor.clone();
                shared.spawn(serve_connection(connection_shared, acceptor, socket));
            }
            Err(error) => {
                // Out of file descriptors, most likely: wait instead of spinning.
                tracing::warn!(%error, "API proxy: accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What a request handler can ask of the connection that carries it.
#[derive(Debug, Default)]
struct ConnectionSignals {
    reset: Notify,
}

async fn serve_connection(shared: Arc<Shared>, acceptor: TlsAcceptor, socket: TcpStream) {
    let tls = match acceptor.accept(socket).await {
        Ok(tls) => tls,
        Err(error) => {
            tracing::debug!(%error, "API proxy: TLS handshake with a client failed");
            return;
        }
    };
    let signals = Arc::new(ConnectionSignals::default());
    let service_signals = Arc::clone(&signals);
    let service = service_fn(move |request| {
        handle(Arc::clone(&shared), Arc::clone(&service_signals), request)
    });
    let mut connection = http1::Builder::new().serve_connection(TokioIo::new(tls), service);
    tokio::select! {
        result = &mut connection => {
            if let Err(error) = result {
                tracing::debug!(%error, "API proxy: client connection ended");
            }
        }
        () = signals.reset.notified() => {
            let parts = connection.into_parts();
            let (socket, _) = parts.io.inner().get_ref();
            // With a zero linger, closing sends RST instead of FIN: the client reads
            // "connection reset", not a clean end of stream.
            if let Err(error) = socket.set_zero_linger() {
                tracing::warn!(%error, "API proxy: could not set SO_LINGER 0 for a reset");
            }
        }
    }
}

/// The answer to one request, `Err` to close the connection without one.
async fn handle(
    shared: Arc<Shared>,
    signals: Arc<ConnectionSignals>,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, BodyError> {
    let (parts, body) = request.into_parts();
    let info = request_info(&parts);
    let entry = LogHandle::record(&shared, info.clone());
    tracing::debug!(method = %info.method, uri = %info.uri, class = ?info.class, "API proxy: request");

    let body = match Limited::new(body, BODY_MATCH_LIMIT).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            entry.set_outcome(Outcome::Responded { status: 413 });
            return Ok(status_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                "the API proxy refuses request bodies over 4 MiB (the API server's limit is 3 MiB)",
            ));
        }
        // The client broke off its request: nobody is left to answer.
        Err(error) => return Err(error),
    };
    let exchange = Exchange {
        shared,
        signals,
        entry,
        info,
        parts,
        body,
    };

    // A partition comes before any rule: the request never gets to the other side.
    if !exchange.shared.wait_out_partition().await {
        return exchange.reset().await;
    }
    let applied = lock(&exchange.shared.rules).take_match(&exchange.info, Some(&exchange.body));
    match applied {
        None => exchange.forward(None).await,
        Some((rule, action)) => exchange.apply(rule, action).await,
    }
}

fn request_info(parts: &http::request::Parts) -> RequestInfo {
    let classification = classify(&parts.method, parts.uri.path(), parts.uri.query());
    RequestInfo {
        method: parts.method.clone(),
        uri: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned()),
        class: classification.class,
        target: classification.target,
        user_agent: parts
            .headers
            .get(header::USER_AGENT)
            .and_then(|agent| agent.to_str().ok())
            .map(str::to_owned),
    }
}

/// One request on its way through the proxy, its body read.
struct Exchange {
    shared: Arc<Shared>,
    signals: Arc<ConnectionSignals>,
    entry: LogHandle,
    info: RequestInfo,
    parts: http::request::Parts,
    body: Bytes,
}

impl Exchange {
    async fn apply(self, rule: RuleId, action: Action) -> Result<Response<ProxyBody>, BodyError> {
        self.entry.update(|logged| logged.rule = Some(rule));
        tracing::debug!(uri = %self.info.uri, ?action, "API proxy: fault");
        match action {
            Action::Respond {
                status,
                retry_after,
            } => {
                let code =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                self.entry.set_outcome(Outcome::Responded {
                    status: code.as_u16(),
                });
                Ok(status_response(
                    code,
                    retry_after,
                    &format!("injected by the API proxy's rule {}", rule.0),
                ))
            }
            Action::Delay(delay) => {
                tokio::time::sleep(delay).await;
                self.forward(None).await
            }
            Action::Reset => self.reset().await,
            Action::Blackhole => {
                self.entry.set_outcome(Outcome::Blackholed);
                std::future::pending().await
            }
            Action::Hold => {
                self.hold(rule).await;
                self.forward(None).await
            }
            Action::CutWatchAfter(after) => self.forward(Some(after)).await,
        }
    }

    /// Parks the request until the test releases it. Dropped (the client went away) before
    /// that, it leaves the held list.
    async fn hold(&self, rule: RuleId) {
        let (id, released) = lock(&self.shared.held).park(
            rule,
            self.info.clone(),
            self.body.clone(),
            self.entry.seq,
        );
        self.entry.update(|logged| {
            logged.held = true;
            logged.outcome = Outcome::Held;
        });
        self.shared.note_activity();
        let _parked = ParkedGuard {
            shared: &self.shared,
            id,
        };
        // The sender goes only with a release (which also unparks it), or with the whole proxy.
        let _ = released.await;
        self.entry.set_outcome(Outcome::InProgress);
    }

    /// Resets the client's connection, never answering.
    async fn reset(&self) -> Result<Response<ProxyBody>, BodyError> {
        self.entry.set_outcome(Outcome::Reset);
        // The connection task drops this handler along with the connection.
        self.signals.reset.notify_one();
        std::future::pending().await
    }

    /// Sends the request to the API server and relays its answer; `cut_after`: cut the answer's
    /// body after so long.
    async fn forward(self, cut_after: Option<Duration>) -> Result<Response<ProxyBody>, BodyError> {
        // A request delayed or held into a partition waits it out like a new one.
        if !self.shared.wait_out_partition().await {
            return self.reset().await;
        }
        let mut upstream_request = Request::new(Full::new(self.body.clone()));
        *upstream_request.method_mut() = self.parts.method.clone();
        *upstream_request.uri_mut() = upstream_uri(&self.shared.upstream_base, &self.parts.uri)?;
        *upstream_request.headers_mut() = end_to_end_headers(self.parts.headers.clone());
        upstream_request.headers_mut().remove(header::HOST);

        self.entry
            .update(|logged| logged.forwarded_at = Some(SystemTime::now()));
        let response = match self.shared.upstream.request(upstream_request).await {
            Ok(response) => response,
            Err(error) => {
                let error = error_chain(&error);
                tracing::debug!(uri = %self.info.uri, %error, "API proxy: the API server did not answer");
                self.entry.set_outcome(Outcome::UpstreamFailed { error });
                self.signals.reset.notify_one();
                return std::future::pending().await;
            }
        };
        // An answer that arrives during a partition is lost in it until it heals.
        if !self.shared.wait_out_partition().await {
            return self.reset().await;
        }
        let status = response.status().as_u16();
        self.entry.set_outcome(Outcome::Forwarded { status });
        let (mut response_parts, upstream_body) = response.into_parts();
        response_parts.headers = end_to_end_headers(response_parts.headers);
        let body = streams::relay(
            &self.shared,
            self.info.clone(),
            self.entry.seq,
            status,
            upstream_body,
            cut_after,
        );
        Ok(Response::from_parts(response_parts, body.boxed()))
    }
}

struct ParkedGuard<'a> {
    shared: &'a Arc<Shared>,
    id: super::held::HeldId,
}

impl Drop for ParkedGuard<'_> {
    fn drop(&mut self) {
        lock(&self.shared.held).forget(self.id);
    }
}

fn upstream_uri(base: &Uri, downstream: &Uri) -> Result<Uri, BodyError> {
    let mut parts = base.clone().into_parts();
    parts.path_and_query = downstream.path_and_query().cloned();
    Ok(Uri::from_parts(parts)?)
}

fn end_to_end_headers(mut headers: HeaderMap) -> HeaderMap {
    // `Connection` may name further per-connection headers.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in CONNECTION_HEADERS {
        headers.remove(name);
    }
    headers
}

/// An error with its causes, which is where hyper keeps the interesting part.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A request's entry in the log. Dropped while the request is still undecided, held or in
/// progress (its client went away), it marks the entry abandoned.
struct LogHandle {
    shared: Arc<Shared>,
    seq: u64,
}

impl LogHandle {
    fn record(shared: &Arc<Shared>, info: RequestInfo) -> LogHandle {
        let seq = lock(&shared.log).record(info, SystemTime::now());
        LogHandle {
            shared: Arc::clone(shared),
            seq,
        }
    }

    fn update(&self, change: impl FnOnce(&mut super::log::LogEntry)) {
        lock(&self.shared.log).update(self.seq, change);
    }

    fn set_outcome(&self, outcome: Outcome) {
        self.update(|logged| logged.outcome = outcome);
    }
}

impl Drop for LogHandle {
    fn drop(&mut self) {
        self.update(|logged| {
            if matches!(logged.outcome, Outcome::InProgress | Outcome::Held) {
                logged.outcome = Outcome::Abandoned;
            }
        });
    }
}

impl Shared {
    /// Waits while a silent partition lasts; `false` if the partition refuses requests.
    async fn wait_out_partition(&self) -> bool {
        let mut partition = self.partition.subscribe();
        loop {
            match *partition.borrow_and_update() {
                None => return true,
                Some(PartitionMode::Refuse) => return false,
                Some(PartitionMode::Silent) => {}
            }
            if partition.changed().await.is_err() {
                // The proxy is going away; nothing will answer.
                return std::future::pending().await;
            }
        }
    }
}
