//! The HTTP endpoint of a live autoscaler (docs/behaviour.md LOOP-101): `/metrics` in the
//! Prometheus text format and `/health-check` (200 `OK`, or 500 with the reason), plus the
//! routes the binary adds ([`ExtraRoutes`]: the debugging snapshot, profiles). Plain HTTP/1 on
//! hyper, one task per connection.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use ferroscale_model::Timestamp;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use thiserror::Error;
use tokio::net::TcpListener;

use crate::health::{HealthCheck, HealthStatus};
use crate::registry::AutoscalerMetrics;

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("invalid --address {value:?}: {reason}")]
    Address { value: String, reason: String },
    #[error("listening on {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
}

/// `--address` as upstream writes it: `:8085` (every interface), `host:port` or `[v6]:port`.
pub fn parse_address(value: &str) -> Result<SocketAddr, ServerError> {
    let error = |reason: &str| ServerError::Address {
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let text = value.trim();
    let full = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else if text.starts_with("localhost:") {
        text.replacen("localhost", "127.0.0.1", 1)
    } else {
        text.to_string()
    };
    full.parse().map_err(|_| {
        error("expected [host]:port with a numeric host, e.g. :8085 or 127.0.0.1:8085")
    })
}

pub async fn bind(address: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| ServerError::Bind { address, source })
}

/// The clock the health check is read with; the binary passes the system clock.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// What an extra route answers.
#[derive(Debug, Clone)]
pub struct RouteAnswer {
    /// The HTTP status code (an invalid one is answered as 500).
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl RouteAnswer {
    /// A plain-text answer.
    pub fn text(status: u16, body: impl Into<String>) -> RouteAnswer {
        RouteAnswer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into().into_bytes(),
        }
    }
}

/// An extra route: called with the request's query string (without `?`), answers when ready.
pub type RouteHandler =
    Arc<dyn Fn(Option<String>) -> Pin<Box<dyn Future<Output = RouteAnswer> + Send>> + Send + Sync>;

/// Routes served besides `/metrics` and `/health-check`, by exact path.
#[derive(Clone, Default)]
pub struct ExtraRoutes {
    routes: Vec<(String, RouteHandler)>,
}

impl ExtraRoutes {
    pub fn new() -> ExtraRoutes {
        ExtraRoutes::default()
    }

    /// Serves `path` with `handler` (GET and HEAD).
    pub fn add(&mut self, path: impl Into<String>, handler: RouteHandler) {
        self.routes.push((path.into(), handler));
    }

    fn find(&self, path: &str) -> Option<&RouteHandler> {
        self.routes
            .iter()
            .find(|(route, _)| route == path)
            .map(|(_, handler)| handler)
    }
}

fn respond(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

fn route(
    request: &Request<Incoming>,
    metrics: &AutoscalerMetrics,
    health: &Mutex<HealthCheck>,
    clock: &Clock,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return respond(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "only GET\n");
    }
    match request.uri().path() {
        "/metrics" => respond(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        "/health-check" => {
            let status = health
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .status(clock());
            match status {
                HealthStatus::Healthy => respond(StatusCode::OK, "text/plain", "OK"),
                HealthStatus::Unhealthy(reason) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    format!("Error: {reason}"),
                ),
            }
        }
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

/// Serves until the task is dropped or aborted.
pub async fn serve(
    listener: TcpListener,
    metrics: AutoscalerMetrics,
    health: Arc<Mutex<HealthCheck>>,
    clock: Clock,
) {
    serve_with(listener, metrics, health, clock, ExtraRoutes::new()).await
}

/// [`serve`], with the binary's extra routes. An extra route's answer may take as long as its
/// handler wants (the debugging snapshot waits for the next loop); the other routes of the
/// connection's later requests wait behind it, those of other connections do not.
pub async fn serve_with(
    listener: TcpListener,
    metrics: AutoscalerMetrics,
    health: Arc<Mutex<HealthCheck>>,
    clock: Clock,
    extra: ExtraRoutes,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accepting a metrics connection");
                continue;
            }
        };
        let metrics = metrics.clone();
        let health = Arc::clone(&health);
        let clock = Arc::clone(&clock);
        let extra = extra.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let handler = extra
                    .find(request.uri().path())
                    .filter(|_| matches!(*request.method(), Method::GET | Method::HEAD))
                    .cloned();
                let query = request.uri().query().map(str::to_string);
                let response = match handler {
                    Some(_) => None,
                    None => Some(route(&request, &metrics, &health, &clock)),
                };
                async move {
                    let response = match (response, handler) {
                        (Some(response), _) => response,
                        (None, Some(handler)) => {
                            let answer = handler(query).await;
                            let status = StatusCode::from_u16(answer.status)
                                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                            respond(status, answer.content_type, answer.body)
                        }
                        (None, None) => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
                    };
                    Ok::<_, Infallible>(response)
                }
            });
            if let Err(error) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, %peer, "metrics connection");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthLimits;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn upstream_address_forms_parse() {
        assert_eq!(
            parse_address(":8085").unwrap(),
            "0.0.0.0:8085".parse().unwrap()
        );
        assert_eq!(
            parse_address("127.0.0.1:9000").unwrap(),
            "127.0.0.1:9000".parse().unwrap()
        );
        assert_eq!(
            parse_address("[::1]:8085").unwrap(),
            "[::1]:8085".parse().unwrap()
        );
        let err = parse_address("8085").unwrap_err().to_string();
        assert!(err.contains("\"8085\""), "{err}");
    }

    async fn get(address: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn serves_metrics_and_health() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let metrics = AutoscalerMetrics::new().unwrap();
        let health = Arc::new(Mutex::new(HealthCheck::new(HealthLimits::default())));
        let now = Arc::new(Mutex::new(Timestamp::from_secs(0)));
        let clock_now = Arc::clone(&now);
        let clock: Clock = Arc::new(move || *clock_now.lock().unwrap());
        let server = tokio::spawn(serve(listener, metrics, Arc::clone(&health), clock));

        let response = get(address, "/metrics").await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains("cluster_autoscaler_errors_total{type=\"apiCallError\"} 0"));

        let response = get(address, "/health-check").await;
        assert!(
            response.starts_with("HTTP/1.1 200") && response.ends_with("OK"),
            "{response}"
        );

        health
            .lock()
            .unwrap()
            .start_monitoring(Timestamp::from_secs(0));
        *now.lock().unwrap() = Timestamp::from_secs(21 * 60);
        let response = get(address, "/health-check").await;
        assert!(response.starts_with("HTTP/1.1 500"), "{response}");

        let response = get(address, "/other").await;
        assert!(response.starts_with("HTTP/1.1 404"), "{response}");
        server.abort();
    }

    #[tokio::test]
    async fn extra_routes_answer_with_their_query_and_leave_the_others_alone() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let metrics = AutoscalerMetrics::new().unwrap();
        let health = Arc::new(Mutex::new(HealthCheck::new(HealthLimits::default())));
        let clock: Clock = Arc::new(|| Timestamp::from_secs(0));
        let mut extra = ExtraRoutes::new();
        extra.add(
            "/echo",
            Arc::new(|query: Option<String>| {
                Box::pin(async move { RouteAnswer::text(202, format!("query={query:?}")) })
                    as Pin<Box<dyn Future<Output = RouteAnswer> + Send>>
            }),
        );
        let server = tokio::spawn(serve_with(listener, metrics, health, clock, extra));

        let response = get(address, "/echo?format=scenario").await;
        assert!(response.starts_with("HTTP/1.1 202"), "{response}");
        assert!(
            response.ends_with("query=Some(\"format=scenario\")"),
            "{response}"
        );
        let response = get(address, "/metrics").await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        let response = get(address, "/echo/more").await;
        assert!(response.starts_with("HTTP/1.1 404"), "{response}");
        server.abort();
    }
}
