//! One RPC as the server handles it: what it concerns (a group, a node) and who made it (the
//! client certificate's identity), how its failures become gRPC statuses whose messages name the
//! call and the group, the answer-size limit of upstream clients, and the log line every call
//! leaves.
//!
//! This lives with the calls rather than in a tower layer because the group or node a call
//! concerns is inside the request message, which a layer sees only as bytes.

use std::future::Future;
use std::time::{Duration, Instant};

use ferroscale_core::cloud::CloudError;
use ferroscale_model::Pod;
use tonic::metadata::MetadataMap;
use tonic::{Code, Extensions, Response, Status};

use crate::caller;
use crate::conversion::FieldError;

/// The largest message an upstream (Go) client accepts: gRPC's default receive limit, 4 MiB. A
/// larger answer fails there with a RESOURCE_EXHAUSTED that does not say which call or group was
/// too big, so the server refuses it itself, with a message that does.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// The four RPCs a provider may leave out (docs/externalgrpc.md GRPC-10, GRPC-18): UNIMPLEMENTED
/// from them is an answer, not a failure, and is logged as such.
const OPTIONAL_METHODS: [&str; 4] = [
    "PricingNodePrice",
    "PricingPodPrice",
    "NodeGroupTemplateNodeInfo",
    "NodeGroupGetOptions",
];

/// The share of the client's deadline the provider gets: the rest is left for the answer to
/// travel back, so the client reads the server's explanation instead of timing out on its own.
const DEADLINE_SHARE_PERCENT: u32 = 90;

/// The header a gRPC client sends its deadline in.
const GRPC_TIMEOUT_HEADER: &str = "grpc-timeout";

/// What a call is about, for its status messages and its log line.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    method: &'static str,
    /// How long the provider may take before the call is answered DEADLINE_EXCEEDED.
    time_limit: Option<Duration>,
    group: Option<String>,
    /// The node or pod the call concerns, described for humans.
    object: Option<String>,
    /// The client's identity ([`crate::caller`]); `None` over plaintext.
    client: Option<String>,
}

impl Call {
    pub(crate) fn new(method: &'static str) -> Call {
        Call {
            method,
            time_limit: None,
            group: None,
            object: None,
            client: None,
        }
    }

    /// Gives the provider a share of the deadline the client sent with the request (upstream
    /// clients always send one, 5 s by default).
    pub(crate) fn within_deadline_of(self, metadata: &MetadataMap) -> Call {
        let deadline = metadata
            .get(GRPC_TIMEOUT_HEADER)
            .and_then(|value| value.to_str().ok())
            .and_then(parse_grpc_timeout);
        Call {
            time_limit: deadline.map(|deadline| deadline * DEADLINE_SHARE_PERCENT / 100),
            ..self
        }
    }

    /// Names the client that sent the request, from the certificate of its connection.
    pub(crate) fn by_client_of(self, extensions: &Extensions) -> Call {
        Call {
            client: caller::of_connection(extensions),
            ..self
        }
    }

    pub(crate) fn for_group(method: &'static str, group: &str) -> Call {
        Call {
            group: Some(group.to_string()),
            ..Call::new(method)
        }
    }

    /// `node` as [`crate::conversion::describe_node`] writes it.
    pub(crate) fn for_node(method: &'static str, node: String) -> Call {
        Call {
            object: Some(format!("node {node}")),
            ..Call::new(method)
        }
    }

    pub(crate) fn for_pod(method: &'static str, pod: &Pod) -> Call {
        Call {
            object: Some(format!("pod {}/{}", pod.namespace, pod.name)),
            ..Call::new(method)
        }
    }

    /// How messages start: the call, and the group or node it concerns.
    fn context(&self) -> String {
        match (&self.group, &self.object) {
            (Some(group), _) => format!("{} for node group {group:?}", self.method),
            (None, Some(object)) => format!("{} for {object}", self.method),
            (None, None) => self.method.to_string(),
        }
    }

    /// A provider error as a status: NotImplemented → UNIMPLEMENTED, an invalid request →
    /// INVALID_ARGUMENT, a missing group → NOT_FOUND, a cloud that is temporarily unavailable →
    /// UNAVAILABLE (the code gRPC clients read as "worth retrying later"), and an error the cloud
    /// reported without saying more → UNKNOWN (the code gRPC reserves for errors of unknown
    /// kind).
    pub(crate) fn cloud_error(&self, error: CloudError) -> Status {
        let message = format!("{}: {error}", self.context());
        let code = match error {
            CloudError::NotImplemented => Code::Unimplemented,
            CloudError::AlreadyExists => Code::AlreadyExists,
            CloudError::IllegalConfiguration(_) => Code::FailedPrecondition,
            CloudError::NodeGroupDoesNotExist(_) => Code::NotFound,
            CloudError::InvalidRequest(_) => Code::InvalidArgument,
            CloudError::Unavailable(_) => Code::Unavailable,
            CloudError::Provider(_) => Code::Unknown,
        };
        Status::new(code, message)
    }

    /// A request that cannot be served as sent: INVALID_ARGUMENT naming the call and the reason.
    pub(crate) fn invalid(&self, reason: impl std::fmt::Display) -> Status {
        Status::invalid_argument(format!("{}: {reason}", self.context()))
    }

    /// A request field that cannot be read: INVALID_ARGUMENT naming the call and the field.
    pub(crate) fn invalid_field(&self, error: FieldError) -> Status {
        self.invalid(format_args!("field {} {}", error.field, error.reason))
    }

    /// A node group id the provider does not know: NOT_FOUND.
    pub(crate) fn unknown_group(&self, known_groups: usize) -> Status {
        Status::not_found(format!(
            "{}: no such node group; the provider manages {known_groups} group(s)",
            self.context()
        ))
    }

    /// The provider broke its own contract (an answer the wire cannot carry): INTERNAL.
    pub(crate) fn provider_bug(&self, reason: impl std::fmt::Display) -> Status {
        Status::internal(format!("{}: {reason}", self.context()))
    }

    /// Runs the call with the client's identity available to the provider ([`crate::caller`]):
    /// answers DEADLINE_EXCEEDED when the provider uses up its share of the client's deadline,
    /// refuses an answer too large for upstream clients, and logs the method, the group or node,
    /// the client, the duration and the result code (debug; failures at warn). A call the client
    /// abandons (disconnect, cancellation) is dropped by the transport and logged as such.
    pub(crate) async fn run<T: prost::Message>(
        self,
        work: impl Future<Output = Result<T, Status>>,
    ) -> Result<Response<T>, Status> {
        let mut record = CallRecord {
            call: self,
            started: Instant::now(),
            finished: false,
        };
        let work = caller::serving(record.call.client.clone(), work);
        let answer = match record.call.time_limit {
            None => work.await,
            Some(limit) => match tokio::time::timeout(limit, work).await {
                Ok(answer) => answer,
                Err(_) => Err(Status::deadline_exceeded(format!(
                    "{}: the provider did not answer within {} ms, the client's deadline less \
                     the time the answer needs to travel back",
                    record.call.context(),
                    limit.as_millis()
                ))),
            },
        };
        let result = answer.and_then(|answer| {
            let size = answer.encoded_len();
            if size > MAX_RESPONSE_BYTES {
                Err(Status::resource_exhausted(format!(
                    "{}: the answer is {size} bytes, more than the {MAX_RESPONSE_BYTES} bytes \
                     (4 MiB) an upstream client accepts",
                    record.call.context()
                )))
            } else {
                Ok(answer)
            }
        });
        record.finish(result.as_ref().err());
        result.map(Response::new)
    }
}

/// A `grpc-timeout` value: at most eight digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`). A value
/// that does not parse is ignored, as the transport ignores it.
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let unit = value.chars().last()?;
    let digits = value.get(..value.len() - unit.len_utf8())?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(amount * 3600),
        'M' => Duration::from_secs(amount * 60),
        'S' => Duration::from_secs(amount),
        'm' => Duration::from_millis(amount),
        'u' => Duration::from_micros(amount),
        'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Times a call and writes its log line when it ends, or when it is dropped unfinished.
struct CallRecord {
    call: Call,
    started: Instant,
    finished: bool,
}

impl CallRecord {
    fn finish(&mut self, error: Option<&Status>) {
        self.finished = true;
        let call = &self.call;
        let method = call.method;
        // Absent fields are left out of the line rather than shown empty.
        let group = call.group.as_deref();
        let object = call.object.as_deref();
        let client = call.client.as_deref();
        let elapsed_ms = self.started.elapsed().as_millis();
        match error {
            None => {
                tracing::debug!(method, group, object, client, elapsed_ms, code = ?Code::Ok, "externalgrpc call")
            }
            Some(status)
                if status.code() == Code::Unimplemented && OPTIONAL_METHODS.contains(&method) =>
            {
                tracing::debug!(method, group, object, client, elapsed_ms, code = ?status.code(), "externalgrpc call: not offered by the provider");
            }
            Some(status) => tracing::warn!(
                method,
                group,
                object,
                client,
                elapsed_ms,
                code = ?status.code(),
                error = status.message(),
                "externalgrpc call failed"
            ),
        }
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        if !self.finished {
            let call = &self.call;
            tracing::warn!(
                method = call.method,
                group = call.group.as_deref(),
                object = call.object.as_deref(),
                client = call.client.as_deref(),
                elapsed_ms = self.started.elapsed().as_millis(),
                "externalgrpc call abandoned by the client before the provider answered \
                 (disconnected or cancelled); the provider's work was cancelled where it stood"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_in_every_unit_and_malformed_ones_ignored() {
        assert_eq!(
            parse_grpc_timeout("4999958u"),
            Some(Duration::from_micros(4_999_958))
        );
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("200m"), Some(Duration::from_millis(200)));
        assert_eq!(parse_grpc_timeout("7n"), Some(Duration::from_nanos(7)));
        for bad in ["", "S", "123456789S", "5s", "-5S", "5", "5 S", "5é"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn provider_errors_map_to_codes_and_name_call_and_group() {
        let call = Call::for_group("NodeGroupIncreaseSize", "ng-1");
        let cases = [
            (CloudError::NotImplemented, Code::Unimplemented),
            (
                CloudError::InvalidRequest("over max".into()),
                Code::InvalidArgument,
            ),
            (
                CloudError::NodeGroupDoesNotExist("ng-1".into()),
                Code::NotFound,
            ),
            (CloudError::Provider("quota".into()), Code::Unknown),
            (
                CloudError::Unavailable("API rate limit".into()),
                Code::Unavailable,
            ),
            (CloudError::AlreadyExists, Code::AlreadyExists),
            (
                CloudError::IllegalConfiguration("bad".into()),
                Code::FailedPrecondition,
            ),
        ];
        for (error, code) in cases {
            let status = call.cloud_error(error.clone());
            assert_eq!(status.code(), code, "{error:?}");
            assert!(
                status
                    .message()
                    .starts_with("NodeGroupIncreaseSize for node group \"ng-1\": "),
                "{}",
                status.message()
            );
            assert!(status.message().ends_with(&error.to_string()));
        }
    }
}
