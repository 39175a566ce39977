//! The signed HTTP client of the Exoscale API v2 (docs/exoscale.md EXO-02, EXO-05,
//! EXO-06, EXO-32): one method per API
//! operation the provider uses, each request signed (EXO-03, EXO-04), rate limited, and bounded by
//! a timeout.
//!
//! # Retries
//!
//! GETs are retried with exponential backoff after a 5xx answer, a transport error or a timeout:
//! reading twice is harmless. PUTs (scale, evict) are **never** retried: after a 5xx, a timeout or
//! a broken connection the client cannot know whether the API acted, and repeating a scale or an
//! evict could act twice (evicting members the first call already replaced, or scaling from a size
//! that already moved). The error reaches the core, which re-plans from fresh state next loop.
//!
//! # Secrets
//!
//! The API key, the secret and the `Authorization` header never appear in errors or logs: errors
//! carry the method, the path and what the API or the transport said, and what the API said is
//! cut short and stripped of anything credential-shaped first ([`crate::redact`]), because a
//! proxy in the way may echo the request, signature included.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, USER_AGENT};
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;
use tracing::debug;

use crate::api;
use crate::config::{ConfigError, ExoscaleConfig, Secret};
use crate::rate_limit::{RateLimit, TokenBucket};
use crate::redact;
use crate::signer::{self, SIGNATURE_LIFETIME_SECS, SignedRequest};

/// How the client talks to the API. The defaults suit the real API; tests shorten them.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientOptions {
    /// Bound on one request, from sending to the last byte of the answer.
    pub request_timeout: Duration,
    /// Attempts of a GET in total (1 = no retry).
    pub get_attempts: u32,
    /// Wait before the first retry; doubled before each further one.
    pub retry_backoff: Duration,
    pub rate_limit: RateLimit,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(30),
            get_attempts: 3,
            retry_backoff: Duration::from_millis(500),
            rate_limit: RateLimit::default(),
        }
    }
}

/// What went wrong with one API call (docs/exoscale.md EXO-06). Messages never carry credentials.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ApiError {
    /// HTTP 404: the object does not exist (a distinct kind: `refresh` drops groups on it).
    #[error("not found: {0}")]
    NotFound(String),
    /// Any other 4xx, with the API's `message` (or the raw body).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A 5xx, with the API's `message` (or the raw body).
    #[error("API error: {0}")]
    Api(String),
    /// DNS, TCP, TLS or HTTP failure before an answer arrived.
    #[error("transport error: {0}")]
    Transport(String),
    /// No complete answer within the request timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// A 200 answer whose JSON does not have the expected shape.
    #[error("cannot decode the answer: {0}")]
    Decode(String),
    /// A status or content type the API does not document for success or failure (any 2xx
    /// other than 200, a 1xx/3xx, or a 200 that is not JSON).
    #[error("unexpected answer: HTTP {status}: {detail}")]
    UnexpectedStatus { status: u16, detail: String },
}

impl ApiError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::NotFound(_))
    }

    /// Whether a GET may be repeated after this error.
    fn is_retryable(&self) -> bool {
        matches!(
            self,
            ApiError::Api(_) | ApiError::Transport(_) | ApiError::Timeout(_)
        )
    }
}

/// A call that failed, with what it was (method and path), never the credentials.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{method} {path}: {error}")]
pub struct CallError {
    pub method: &'static str,
    pub path: String,
    #[source]
    pub error: ApiError,
}

/// The Exoscale API v2 of one zone.
#[derive(Debug)]
pub struct ApiClient {
    http: reqwest::Client,
    base: Url,
    api_key: Secret,
    api_secret: Secret,
    options: ClientOptions,
    limiter: TokenBucket,
}

impl ApiClient {
    pub fn new(config: &ExoscaleConfig, options: ClientOptions) -> Result<ApiClient, ConfigError> {
        let base = config.base_url()?;
        let base = Url::parse(&base).map_err(|e| ConfigError::InvalidValue {
            variable: crate::config::ENV_API_ENDPOINT,
            value: base.clone(),
            reason: e.to_string(),
        })?;
        let http = reqwest::Client::builder()
            .user_agent(concat!("ferroscale/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::HttpClient(error_chain(&e)))?;
        Ok(ApiClient {
            http,
            base,
            api_key: config.api_key.clone(),
            api_secret: config.api_secret.clone(),
            limiter: TokenBucket::new(options.rate_limit),
            options,
        })
    }

    /// The base URL requests go to (ends in `/`).
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    pub async fn get_instance(&self, id: &str) -> Result<api::Instance, CallError> {
        self.get(&format!("instance/{}", escape(id))).await
    }

    pub async fn get_instance_pool(&self, id: &str) -> Result<api::InstancePool, CallError> {
        self.get(&format!("instance-pool/{}", escape(id))).await
    }

    pub async fn get_instance_quota(&self) -> Result<api::Quota, CallError> {
        self.get("quota/instance").await
    }

    pub async fn list_sks_clusters(&self) -> Result<api::SksClusterList, CallError> {
        self.get("sks-cluster").await
    }

    pub async fn get_operation(&self, id: &str) -> Result<api::Operation, CallError> {
        self.get(&format!("operation/{}", escape(id))).await
    }

    pub async fn scale_instance_pool(
        &self,
        pool_id: &str,
        size: i64,
    ) -> Result<api::Operation, CallError> {
        self.put(
            &format!("instance-pool/{}:scale", escape(pool_id)),
            &api::ScaleRequest { size },
        )
        .await
    }

    pub async fn evict_instance_pool_members(
        &self,
        pool_id: &str,
        instances: Vec<String>,
    ) -> Result<api::Operation, CallError> {
        self.put(
            &format!("instance-pool/{}:evict", escape(pool_id)),
            &api::EvictRequest { instances },
        )
        .await
    }

    pub async fn scale_sks_nodepool(
        &self,
        cluster_id: &str,
        nodepool_id: &str,
        size: i64,
    ) -> Result<api::Operation, CallError> {
        self.put(
            &format!(
                "sks-cluster/{}/nodepool/{}:scale",
                escape(cluster_id),
                escape(nodepool_id)
            ),
            &api::ScaleRequest { size },
        )
        .await
    }

    pub async fn evict_sks_nodepool_members(
        &self,
        cluster_id: &str,
        nodepool_id: &str,
        instances: Vec<String>,
    ) -> Result<api::Operation, CallError> {
        self.put(
            &format!(
                "sks-cluster/{}/nodepool/{}:evict",
                escape(cluster_id),
                escape(nodepool_id)
            ),
            &api::EvictRequest { instances },
        )
        .await
    }

    /// A GET, retried on 5xx, transport errors and timeouts.
    async fn get<T: DeserializeOwned>(&self, relative: &str) -> Result<T, CallError> {
        let attempts = self.options.get_attempts.max(1);
        let mut backoff = self.options.retry_backoff;
        let mut attempt = 1;
        loop {
            match self.send(Method::GET, relative, None).await {
                Err(error) if error.error.is_retryable() && attempt < attempts => {
                    debug!(%error, attempt, "exoscale API GET failed, retrying after {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.saturating_mul(2);
                    attempt += 1;
                }
                result => return result.and_then(|body| decode(relative, "GET", &body)),
            }
        }
    }

    /// A PUT with a JSON body, never retried (see the module documentation).
    async fn put<T: DeserializeOwned>(
        &self,
        relative: &str,
        body: &impl Serialize,
    ) -> Result<T, CallError> {
        let bytes = serde_json::to_vec(body).map_err(|e| CallError {
            method: "PUT",
            path: relative.to_string(),
            error: ApiError::Decode(format!("cannot encode the request body: {e}")),
        })?;
        let answer = self.send(Method::PUT, relative, Some(bytes)).await?;
        decode(relative, "PUT", &answer)
    }

    /// Signs and sends one request; the body is serialised once by the caller, and exactly those
    /// bytes are signed and sent.
    async fn send(
        &self,
        method: Method,
        relative: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, CallError> {
        let method_name: &'static str = if method == Method::PUT { "PUT" } else { "GET" };
        let url = self.base.join(relative).map_err(|e| CallError {
            method: method_name,
            path: relative.to_string(),
            error: ApiError::Transport(format!("cannot build the URL: {e}")),
        })?;
        let path = url.path().to_string();
        let fail = |error: ApiError| CallError {
            method: method_name,
            path: path.clone(),
            error,
        };
        self.limiter.acquire().await;

        let query: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        let query_refs: Vec<(&str, &str)> = query
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        let body_bytes = body.unwrap_or_default();
        let signed = signer::authorization_header(
            &SignedRequest {
                method: method.as_str(),
                path: &path,
                query: &query_refs,
                body: &body_bytes,
                expires: unix_now() + SIGNATURE_LIFETIME_SECS,
            },
            self.api_key.expose(),
            &self.api_secret,
        );
        let mut authorization = HeaderValue::from_str(&signed).map_err(|_| {
            fail(ApiError::Transport(
                "the API key cannot be sent in an HTTP header".to_string(),
            ))
        })?;
        authorization.set_sensitive(true);

        let mut request = self
            .http
            .request(method.clone(), url)
            .header(AUTHORIZATION, authorization)
            .header(
                USER_AGENT,
                concat!("ferroscale/", env!("CARGO_PKG_VERSION")),
            );
        if method == Method::PUT {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body_bytes);
        }

        let started = tokio::time::Instant::now();
        let exchange = async {
            let response = request.send().await?;
            let status = response.status();
            let content_type = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .unwrap_or("")
                .to_string();
            let bytes = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, content_type, bytes.to_vec()))
        };
        let outcome = tokio::time::timeout(self.options.request_timeout, exchange).await;
        let (status, content_type, bytes) = match outcome {
            Err(_elapsed) => {
                debug!(method = method_name, %path, "exoscale API call timed out");
                return Err(fail(ApiError::Timeout(self.options.request_timeout)));
            }
            Ok(Err(error)) if error.is_timeout() => {
                return Err(fail(ApiError::Timeout(self.options.request_timeout)));
            }
            Ok(Err(error)) => return Err(fail(ApiError::Transport(error_chain(&error)))),
            Ok(Ok(answer)) => answer,
        };
        debug!(
            method = method_name,
            %path,
            status = status.as_u16(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "exoscale API call"
        );
        let signature = signed
            .rsplit_once("signature=")
            .map(|(_, signature)| signature);
        let mut known = vec![self.api_key.expose(), self.api_secret.expose()];
        known.extend(signature);
        classify(status, &content_type, bytes, &known).map_err(fail)
    }
}

/// Section 4: only a 200 with a JSON content type is a success. `known` are the secrets of the
/// request (key, secret, signature), never to be quoted from an error body.
fn classify(
    status: StatusCode,
    content_type: &str,
    body: Vec<u8>,
    known: &[&str],
) -> Result<Vec<u8>, ApiError> {
    let message = || error_message(&body, known);
    match status.as_u16() {
        200 if content_type.contains("json") => Ok(body),
        200 => Err(ApiError::UnexpectedStatus {
            status: 200,
            detail: format!(
                "content type {} is not JSON",
                redact::scrub(&format!("{content_type:?}"), known)
            ),
        }),
        404 => Err(ApiError::NotFound(message())),
        400..=499 => Err(ApiError::InvalidRequest(message())),
        500..=599 => Err(ApiError::Api(message())),
        other => Err(ApiError::UnexpectedStatus {
            status: other,
            detail: message(),
        }),
    }
}

/// The `message` of a JSON error body, else the body text; cut short and without credentials
/// either way.
fn error_message(body: &[u8], known: &[&str]) -> String {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        message: String,
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(parsed) => redact::scrub(&parsed.message, known),
        Err(_) => redact::scrub(&String::from_utf8_lossy(body), known),
    }
}

fn decode<T: DeserializeOwned>(
    relative: &str,
    method: &'static str,
    body: &[u8],
) -> Result<T, CallError> {
    serde_json::from_slice(body).map_err(|e| CallError {
        method,
        path: relative.to_string(),
        error: ApiError::Decode(e.to_string()),
    })
}

/// Path-escapes one path segment; UUIDs pass unchanged, anything that could change the path's
/// structure (`/`, `?`, `#`, `%`, spaces) is percent-encoded.
fn escape(segment: &str) -> String {
    let mut escaped = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                escaped.push(char::from(byte))
            }
            other => escaped.push_str(&format!("%{other:02X}")),
        }
    }
    escaped
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0)
}

/// An error and its sources, for transport errors whose top level says little ("error sending
/// request").
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

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/exoscale.md EXO-06: status classes and the message taken from the JSON body or the raw
    /// text.
    #[test]
    fn c06_status_classification() {
        let json = |m: &str| format!(r#"{{"message":"{m}"}}"#).into_bytes();
        assert_eq!(
            classify(StatusCode::OK, "application/json", b"{}".to_vec(), &[]),
            Ok(b"{}".to_vec())
        );
        assert_eq!(
            classify(StatusCode::NOT_FOUND, "application/json", json("gone"), &[]),
            Err(ApiError::NotFound("gone".into()))
        );
        assert_eq!(
            classify(StatusCode::FORBIDDEN, "application/json", json("no"), &[]),
            Err(ApiError::InvalidRequest("no".into()))
        );
        assert_eq!(
            classify(
                StatusCode::BAD_GATEWAY,
                "text/plain",
                b"upstream down".to_vec(),
                &[]
            ),
            Err(ApiError::Api("upstream down".into()))
        );
        assert!(matches!(
            classify(StatusCode::CREATED, "application/json", b"{}".to_vec(), &[]),
            Err(ApiError::UnexpectedStatus { status: 201, .. })
        ));
        assert!(matches!(
            classify(StatusCode::OK, "text/html", b"<html>".to_vec(), &[]),
            Err(ApiError::UnexpectedStatus { status: 200, .. })
        ));
        assert_eq!(ApiError::Api("boom".into()).to_string(), "API error: boom");
        assert_eq!(
            ApiError::InvalidRequest("bad".into()).to_string(),
            "invalid request: bad"
        );
    }

    #[test]
    fn long_raw_bodies_are_cut() {
        let message = error_message(&vec![b'x'; 10_000], &[]);
        assert!(message.chars().count() <= redact::MAX_ERROR_TEXT + 1);
    }

    #[test]
    fn uuids_are_not_changed_by_escaping() {
        assert_eq!(
            escape("6f1f2a3e-0000-4000-8000-000000000001"),
            "6f1f2a3e-0000-4000-8000-000000000001"
        );
        assert_eq!(escape("a/b?c"), "a%2Fb%3Fc");
    }
}
