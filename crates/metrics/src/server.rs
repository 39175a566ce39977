//! The HTTP endpoint of a live autoscaler (docs/behaviour.md LOOP-101): `/metrics` in the
//! Prometheus text format and `/health-check` (200 `OK`, or 500 with the reason). Plain HTTP/1 on
//! hyper, one task per connection; nothing else is served.

use std::convert::Infallible;
use std::net::SocketAddr;
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

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
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
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET\n".into(),
        );
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
                HealthStatus::Healthy => respond(StatusCode::OK, "text/plain", "OK".into()),
                HealthStatus::Unhealthy(reason) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    format!("Error: {reason}"),
                ),
            }
        }
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Serves until the task is dropped or aborted.
pub async fn serve(
    listener: TcpListener,
    metrics: AutoscalerMetrics,
    health: Arc<Mutex<HealthCheck>>,
    clock: Clock,
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
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let response = route(&request, &metrics, &health, &clock);
                async move { Ok::<_, Infallible>(response) }
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
}
