//! One place every call to the service goes through (docs/externalgrpc.md GRPC-04,
//! GRPC-10, GRPC-30): it sets the deadline
//! (sent as `grpc-timeout` and enforced locally), never retries, times the call, logs it, and
//! turns a failure into an [`RpcError`] naming the method, what the call was about, the status
//! code and the server's message.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use ferroscale_core::cloud::CloudError;
use ferroscale_externalgrpc_proto::v1::cloud_provider_client::CloudProviderClient;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status, TimeoutExpired};

/// The client of the generated service over the shared channel.
pub(crate) type Client = CloudProviderClient<Channel>;

/// The RPCs, named as on the wire (docs/externalgrpc.md GRPC-01).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    NodeGroups,
    NodeGroupForNode,
    PricingNodePrice,
    PricingPodPrice,
    GpuLabel,
    GetAvailableGpuTypes,
    Cleanup,
    Refresh,
    NodeGroupTargetSize,
    NodeGroupIncreaseSize,
    NodeGroupDeleteNodes,
    NodeGroupDecreaseTargetSize,
    NodeGroupNodes,
    NodeGroupTemplateNodeInfo,
    NodeGroupGetOptions,
}

impl Method {
    pub(crate) fn wire_name(self) -> &'static str {
        match self {
            Method::NodeGroups => "NodeGroups",
            Method::NodeGroupForNode => "NodeGroupForNode",
            Method::PricingNodePrice => "PricingNodePrice",
            Method::PricingPodPrice => "PricingPodPrice",
            Method::GpuLabel => "GPULabel",
            Method::GetAvailableGpuTypes => "GetAvailableGPUTypes",
            Method::Cleanup => "Cleanup",
            Method::Refresh => "Refresh",
            Method::NodeGroupTargetSize => "NodeGroupTargetSize",
            Method::NodeGroupIncreaseSize => "NodeGroupIncreaseSize",
            Method::NodeGroupDeleteNodes => "NodeGroupDeleteNodes",
            Method::NodeGroupDecreaseTargetSize => "NodeGroupDecreaseTargetSize",
            Method::NodeGroupNodes => "NodeGroupNodes",
            Method::NodeGroupTemplateNodeInfo => "NodeGroupTemplateNodeInfo",
            Method::NodeGroupGetOptions => "NodeGroupGetOptions",
        }
    }

    /// The four RPCs a server may decline with status 12 (pricing, templates, options): for them
    /// 12 means NotImplemented, for every other RPC it is an ordinary failure.
    pub(crate) fn is_optional(self) -> bool {
        matches!(
            self,
            Method::PricingNodePrice
                | Method::PricingPodPrice
                | Method::NodeGroupTemplateNodeInfo
                | Method::NodeGroupGetOptions
        )
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

/// What a call is about, for logs and errors: nothing, a group, a node or a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subject {
    Provider,
    Group(String),
    Node { name: String, provider_id: String },
    Pod { namespace: String, name: String },
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Provider => Ok(()),
            Subject::Group(id) => write!(f, " for node group {id:?}"),
            Subject::Node { name, provider_id } => {
                write!(f, " for node {name:?} (providerID {provider_id:?})")
            }
            Subject::Pod { namespace, name } => write!(f, " for pod {namespace}/{name}"),
        }
    }
}

/// A failed call, or an answer that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RpcError {
    pub(crate) method: Method,
    pub(crate) subject: Subject,
    pub(crate) failure: Failure,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// A non-OK status from the server or the transport.
    Status { code: Code, message: String },
    /// No answer within `grpc_timeout` (status 4 DEADLINE_EXCEEDED).
    DeadlineExceeded { timeout: Duration },
    /// An OK answer the provider refuses (min > max, bad node bytes, ...); nothing of it is kept.
    InvalidAnswer(String),
}

impl RpcError {
    pub(crate) fn invalid_answer(
        method: Method,
        subject: Subject,
        reason: impl Into<String>,
    ) -> RpcError {
        RpcError {
            method,
            subject,
            failure: Failure::InvalidAnswer(reason.into()),
        }
    }

    /// An answer the provider refuses, logged at error level (the call itself succeeded, so the
    /// caller logged nothing yet) and turned into the core's error.
    pub(crate) fn refused_answer(
        method: Method,
        subject: Subject,
        reason: impl Into<String>,
    ) -> CloudError {
        let error = RpcError::invalid_answer(method, subject, reason);
        tracing::error!(method = method.wire_name(), "{error}");
        error.into()
    }

    /// Status 12 on one of the four optional RPCs: the server does not offer it.
    pub(crate) fn is_not_implemented(&self) -> bool {
        self.method.is_optional()
            && matches!(
                self.failure,
                Failure::Status {
                    code: Code::Unimplemented,
                    ..
                }
            )
    }

    /// Status 14: the service is down, unreachable or shedding load, or the connection broke.
    /// Status 1 too: the client never cancels a call but at its deadline (reported as the
    /// deadline, see `Caller::send`), so a CANCELLED is the connection torn down under the call,
    /// as when the server stops.
    fn is_unavailable(&self) -> bool {
        matches!(
            self.failure,
            Failure::Status {
                code: Code::Unavailable | Code::Cancelled,
                ..
            }
        )
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "externalgrpc {}{}: ", self.method, self.subject)?;
        match &self.failure {
            Failure::Status { code, message } => {
                write!(f, "status {} {code:?}: {message}", *code as i32)
            }
            Failure::DeadlineExceeded { timeout } => write!(
                f,
                "status {} DeadlineExceeded: no answer within the grpc_timeout of {timeout:?}",
                Code::DeadlineExceeded as i32
            ),
            Failure::InvalidAnswer(reason) => write!(f, "invalid answer: {reason}"),
        }
    }
}

impl From<RpcError> for CloudError {
    /// Status 12 of an optional RPC becomes NotImplemented; status 14 (UNAVAILABLE: the server
    /// said so, or the transport could not reach it) becomes Unavailable; everything else a
    /// provider error. Both carry the method, the subject, the code and the message.
    fn from(error: RpcError) -> CloudError {
        if error.is_not_implemented() {
            CloudError::NotImplemented
        } else if error.is_unavailable() {
            CloudError::Unavailable(error.to_string())
        } else {
            CloudError::Provider(error.to_string())
        }
    }
}

/// The generated client and the deadline every call gets.
#[derive(Clone)]
pub(crate) struct Caller {
    client: Client,
    timeout: Duration,
}

impl Caller {
    pub(crate) fn new(channel: Channel, timeout: Duration) -> Caller {
        Caller {
            client: CloudProviderClient::new(channel),
            timeout,
        }
    }

    /// Sends one request with the deadline, logs the outcome with the duration, and returns the
    /// answer. Failures are logged at error level, except status 12 of an optional RPC, which
    /// is an answer ("not offered") rather than a failure.
    pub(crate) async fn call<Req, Resp, F, Fut>(
        &self,
        method: Method,
        subject: &Subject,
        message: Req,
        send: F,
    ) -> Result<Resp, RpcError>
    where
        F: FnOnce(Client, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let started = Instant::now();
        let outcome = self.send(message, send).await;
        let elapsed = started.elapsed();
        match outcome {
            Ok(answer) => {
                tracing::debug!(
                    method = method.wire_name(),
                    subject = %subject,
                    elapsed_ms = elapsed.as_secs_f64() * 1000.0,
                    "externalgrpc call"
                );
                Ok(answer)
            }
            Err(failure) => {
                let error = RpcError {
                    method,
                    subject: subject.clone(),
                    failure,
                };
                if error.is_not_implemented() {
                    tracing::debug!(
                        method = method.wire_name(),
                        subject = %subject,
                        elapsed_ms = elapsed.as_secs_f64() * 1000.0,
                        "externalgrpc call: not implemented by the server"
                    );
                } else {
                    tracing::error!(
                        method = method.wire_name(),
                        subject = %subject,
                        elapsed_ms = elapsed.as_secs_f64() * 1000.0,
                        "{error}"
                    );
                }
                Err(error)
            }
        }
    }

    async fn send<Req, Resp, F, Fut>(&self, message: Req, send: F) -> Result<Resp, Failure>
    where
        F: FnOnce(Client, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let deadline_exceeded = Failure::DeadlineExceeded {
            timeout: self.timeout,
        };
        // A zero deadline has passed before the call starts: fail without sending, as Go does.
        if self.timeout.is_zero() {
            return Err(deadline_exceeded);
        }
        let mut request = Request::new(message);
        request.set_timeout(self.timeout);
        match tokio::time::timeout(self.timeout, send(self.client.clone(), request)).await {
            Err(_elapsed) => Err(deadline_exceeded),
            Ok(Ok(response)) => Ok(response.into_inner()),
            // tonic's own enforcement of the grpc-timeout header reports CANCELLED; it is the
            // same deadline.
            Ok(Err(status))
                if status.code() == Code::Cancelled
                    && status.message() == TimeoutExpired(()).to_string() =>
            {
                Err(deadline_exceeded)
            }
            Ok(Err(status)) => Err(Failure::Status {
                code: status.code(),
                message: status.message().to_string(),
            }),
        }
    }
}

/// Logs an answer served from a cache, as upstream does at `--v=5`.
pub(crate) fn log_cached(method: Method, subject: &Subject) {
    tracing::debug!(
        method = method.wire_name(),
        subject = %subject,
        "externalgrpc: answered from cache"
    );
}
