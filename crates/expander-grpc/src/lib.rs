//! The gRPC expander (docs/grpc-expander.md): `grpc` in `--expander` asks an external service
//! which scale-up options it prefers, over upstream's `grpcplugin.Expander/BestOptions` API.
//!
//! - [`proto`]: the generated messages, [`proto::expander_client::ExpanderClient`] and
//!   [`proto::expander_server::ExpanderServer`] (for tests and services written in Rust), from
//!   `proto/expander.proto` (upstream's names and field numbers).
//! - [`GrpcExpander`]: the engine's [`ExternalExpander`] over one lazily dialled TLS channel. It
//!   sends every option with its pods (`podBytes`) and the template node of each option's group
//!   (`nodeBytesMap`), as protobuf-encoded Kubernetes objects, and gives each call a deadline
//!   ([`DEADLINE`], upstream's). Any failure is returned as an error; the engine then keeps every
//!   option, as upstream does.
//!
//! TLS only: upstream refuses to run the gRPC expander without a certificate, and so does
//! `AutoscalingOptions::validate`. The certificate file is the trust root the server's
//! certificate must chain to (the server's own certificate, or its CA); the server name checked is
//! the host of `--grpc-expander-url`.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use ferroscale_core::scale_up::{ExpanderQuery, ExternalExpander, ExternalExpanderError};
use ferroscale_externalgrpc_proto::{encode_node, encode_pod};
use thiserror::Error;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// Generated messages, client and server of `grpcplugin`.
pub mod proto {
    tonic::include_proto!("grpcplugin");
}

use proto::expander_client::ExpanderClient;

/// How long one `BestOptions` call may take, as upstream.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// The largest answer accepted, as upstream.
pub const MAX_RECEIVE_BYTES: usize = 128 << 20;

/// Why the expander's channel could not be set up; each names the flag and value at fault.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GrpcExpanderError {
    #[error("--grpc-expander-cert {path}: cannot read the file: {reason}")]
    ReadCertificate { path: String, reason: String },
    #[error("--grpc-expander-cert {path}: the file holds no PEM certificate")]
    NoCertificate { path: String },
    #[error("--grpc-expander-url {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("--grpc-expander-url {url:?}: setting up TLS: {reason}")]
    Tls { url: String, reason: String },
}

/// The gRPC expander client. Cloning the channel is cheap; calls may run at once.
#[derive(Debug, Clone)]
pub struct GrpcExpander {
    client: ExpanderClient<Channel>,
    url: String,
    deadline: Duration,
}

impl GrpcExpander {
    /// A client of the service at `url` (`host:port`, `dns:///host:port` or
    /// `https://host:port`) that trusts the PEM certificate(s) in `cert_path`. Nothing is dialled
    /// yet: an unreachable service fails the calls, not the start.
    pub fn new(url: &str, cert_path: &Path) -> Result<GrpcExpander, GrpcExpanderError> {
        GrpcExpander::with_deadline(url, cert_path, DEADLINE)
    }

    /// As [`GrpcExpander::new`], with another deadline per call.
    pub fn with_deadline(
        url: &str,
        cert_path: &Path,
        deadline: Duration,
    ) -> Result<GrpcExpander, GrpcExpanderError> {
        let path = cert_path.display().to_string();
        let pem = std::fs::read(cert_path).map_err(|e| GrpcExpanderError::ReadCertificate {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
            return Err(GrpcExpanderError::NoCertificate { path });
        }
        let target = Target::parse(url)?;
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(pem))
            .domain_name(target.host.clone());
        let endpoint = Endpoint::from_shared(format!("https://{}", target.authority))
            .map_err(|e| GrpcExpanderError::Url {
                url: url.to_string(),
                reason: e.to_string(),
            })?
            .tls_config(tls)
            .map_err(|e| GrpcExpanderError::Tls {
                url: url.to_string(),
                reason: e.to_string(),
            })?
            .connect_timeout(deadline)
            .timeout(deadline);
        let client = ExpanderClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(MAX_RECEIVE_BYTES);
        Ok(GrpcExpander {
            client,
            url: url.to_string(),
            deadline,
        })
    }
}

/// The parts of `--grpc-expander-url` the channel needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    /// `host:port`.
    authority: String,
    /// The name the server certificate must carry (brackets of an IPv6 address removed).
    host: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, GrpcExpanderError> {
        let invalid = |reason: &str| GrpcExpanderError::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        if url.starts_with("http://") || url.starts_with("unix:") {
            return Err(invalid(
                "only TLS connections are allowed: give host:port or https://host:port",
            ));
        }
        let rest = ["dns:///", "passthrough:///", "https://"]
            .iter()
            .find_map(|prefix| url.strip_prefix(prefix))
            .unwrap_or(url)
            .trim_end_matches('/');
        if rest.is_empty() || rest.contains('/') || rest.contains("://") {
            return Err(invalid("expected host:port"));
        }
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| invalid("an IPv6 address needs its closing bracket"))?;
            (host.to_string(), after.strip_prefix(':'))
        } else if rest.matches(':').count() > 1 {
            return Err(invalid("write an IPv6 address in brackets: [addr]:port"));
        } else {
            match rest.split_once(':') {
                Some((host, port)) => (host.to_string(), Some(port)),
                None => (rest.to_string(), None),
            }
        };
        if host.is_empty() {
            return Err(invalid("the host is empty"));
        }
        // Without a port, gRPC's default resolver dials 443.
        let port = port.unwrap_or("443");
        port.parse::<u16>()
            .map_err(|_| invalid(&format!("port {port:?} is not a number from 0 to 65535")))?;
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(Target { authority, host })
    }
}

/// The request upstream sends for these options.
pub fn request_for(query: &ExpanderQuery) -> proto::BestOptionsRequest {
    proto::BestOptionsRequest {
        options: query
            .options
            .iter()
            .map(|o| proto::Option {
                node_group_id: o.group_id.clone(),
                node_count: i32::try_from(o.node_count).unwrap_or(i32::MAX),
                debug: o.debug.clone(),
                pod_bytes: o.pods.iter().map(|p| encode_pod(p)).collect(),
            })
            .collect(),
        node_bytes_map: query
            .templates
            .iter()
            .map(|(id, node)| (id.clone(), encode_node(node)))
            .collect(),
    }
}

#[async_trait]
impl ExternalExpander for GrpcExpander {
    async fn best_options(
        &self,
        query: &ExpanderQuery,
    ) -> Result<Vec<String>, ExternalExpanderError> {
        let mut request = tonic::Request::new(request_for(query));
        request.set_timeout(self.deadline);
        let mut client = self.client.clone();
        let answer = tokio::time::timeout(self.deadline, client.best_options(request))
            .await
            .map_err(|_| {
                ExternalExpanderError(format!(
                    "grpc expander {}: no answer within {:?}",
                    self.url, self.deadline
                ))
            })?
            .map_err(|status| {
                ExternalExpanderError(format!(
                    "grpc expander {}: {:?}: {}",
                    self.url,
                    status.code(),
                    status.message()
                ))
            })?;
        Ok(answer
            .into_inner()
            .options
            .into_iter()
            .map(|o| o.node_group_id)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Result<(String, String), GrpcExpanderError> {
        Target::parse(url).map(|t| (t.authority, t.host))
    }

    /// docs/grpc-expander.md GX-105: the address forms upstream's dialer takes, TLS only.
    #[test]
    fn gx105_addresses() {
        let ok = |a: &str, h: &str| Ok((a.to_string(), h.to_string()));
        assert_eq!(target("expander:8443"), ok("expander:8443", "expander"));
        assert_eq!(
            target("dns:///expander:443"),
            ok("expander:443", "expander")
        );
        assert_eq!(target("https://expander"), ok("expander:443", "expander"));
        assert_eq!(target("[::1]:9000"), ok("[::1]:9000", "::1"));
        for bad in ["http://expander:80", "", "expander:http", "a:b:c", "x/y:1"] {
            let err = target(bad).expect_err(bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }
}
