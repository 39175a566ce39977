//! Requests the server cannot read. The transport decodes each request message before any handler
//! runs, and answers INTERNAL when the bytes are not a valid message of the method's request type
//! (or no message came at all), as gRPC suggests for parse errors on the whole. For this service
//! the fault is the client's: such a call is answered INVALID_ARGUMENT naming the method, and
//! logged like any refused call.
//!
//! How a decode failure is told from an INTERNAL the service itself answers (a provider breaking
//! its contract): every call carries a [`Reached`] mark that the handlers set as they start. An
//! INTERNAL answer to a call whose mark is unset came from reading the request, since nothing
//! else runs between routing and the handler.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tonic::{Code, Status};

/// Set by a handler when its call reaches it, that is once the request message was decoded.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reached(Arc<AtomicBool>);

impl Reached {
    /// Marks the call of these request extensions as reached.
    pub(crate) fn mark(extensions: &http::Extensions) {
        if let Some(reached) = extensions.get::<Reached>() {
            reached.0.store(true, Ordering::Relaxed);
        }
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Wraps a generated gRPC server: a request whose message cannot be decoded is answered
/// INVALID_ARGUMENT instead of INTERNAL.
#[derive(Debug, Clone)]
pub struct UnreadableRequestsRefused<S> {
    inner: S,
}

impl<S> UnreadableRequestsRefused<S> {
    pub(crate) fn new(inner: S) -> Self {
        UnreadableRequestsRefused { inner }
    }
}

impl<S: NamedService> NamedService for UnreadableRequestsRefused<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for UnreadableRequestsRefused<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let reached = Reached::default();
        request.extensions_mut().insert(reached.clone());
        let method = request
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let peer = peer_address(request.extensions());
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            if reached.is_set() {
                return Ok(response);
            }
            match Status::from_header_map(response.headers()) {
                Some(status) if status.code() == Code::Internal => {
                    let refusal = Status::invalid_argument(format!(
                        "{method}: the request is not a valid {method} request message: {}",
                        status.message()
                    ));
                    tracing::warn!(
                        method,
                        peer = peer.as_deref(),
                        code = ?refusal.code(),
                        error = refusal.message(),
                        "externalgrpc call failed"
                    );
                    Ok(refusal.into_http())
                }
                _ => Ok(response),
            }
        })
    }
}

/// The client's address, over plaintext or TLS.
fn peer_address(extensions: &http::Extensions) -> Option<String> {
    extensions
        .get::<TcpConnectInfo>()
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<TcpConnectInfo>>()
                .map(TlsConnectInfo::get_ref)
        })
        .and_then(TcpConnectInfo::remote_addr)
        .map(|address| address.to_string())
}
