//! The one gRPC channel the provider and all its node groups share (docs/externalgrpc.md GRPC-03):
//! plaintext HTTP/2 with prior knowledge, or mutual TLS that trusts only the configured CA bundle,
//! verifies the server against the host part of the address and insists on ALPN `h2`.
//!
//! The channel is lazy: building it checks every file but dials nothing, so an unreachable
//! service is not a start-up error; each call then fails with UNAVAILABLE and the next call dials
//! again. The host is resolved by the OS at every dial (no DNS load balancing), and a zone in the
//! address (`[fe80::1%eth0]:8086`) selects the interface of a link-local IPv6 address.
//!
//! The mTLS files are read and checked here (PEM blocks present, key matching the certificate,
//! at least one usable CA) so that a start-up error names the file at fault; tonic's own errors
//! would not. Key material is never logged or put into an error.

use std::ffi::CString;
use std::future::Future;
use std::io;
use std::net::{SocketAddr, SocketAddrV6};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use thiserror::Error;
use tokio::net::TcpStream;
use tonic::codegen::Service;
use tonic::codegen::http::Uri;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::config::{ExternalGrpcConfig, ServerAddress, TlsFiles};

/// Why the channel could not be set up. Every variant names the file or value at fault.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConnectionError {
    #[error("externalgrpc mTLS: reading {key} file {path}: {reason}")]
    ReadFile {
        key: &'static str,
        path: String,
        reason: String,
    },
    #[error("externalgrpc mTLS: {key} file {path} holds no usable PEM certificate: {reason}")]
    NoCertificate {
        key: &'static str,
        path: String,
        reason: String,
    },
    #[error(
        "externalgrpc mTLS: key file {path} holds no usable PEM private key (PKCS#1, PKCS#8 or \
         SEC1): {reason}"
    )]
    NoPrivateKey { path: String, reason: String },
    #[error(
        "externalgrpc mTLS: the private key in {key_path} cannot be used with the certificate in \
         {cert_path}: {reason}"
    )]
    KeyDoesNotMatch {
        cert_path: String,
        key_path: String,
        reason: String,
    },
    #[error(
        "externalgrpc mTLS: the host {host:?} of address {address:?} cannot be checked against a \
         server certificate: {reason}"
    )]
    ServerName {
        address: String,
        host: String,
        reason: String,
    },
    #[error("externalgrpc mTLS: the TLS library refused the configuration: {reason}")]
    TlsSetup { reason: String },
    #[error("externalgrpc: setting up the channel to {address}: {reason}")]
    Channel { address: String, reason: String },
}

/// The PEM contents of the three mTLS files, checked. Deliberately not `Debug`: it holds a
/// private key.
pub(crate) struct TlsMaterial {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    ca_pem: Vec<u8>,
}

impl TlsMaterial {
    /// Reads the three files and checks that they make a working client configuration.
    pub(crate) fn load(files: &TlsFiles) -> Result<TlsMaterial, ConnectionError> {
        let cert_pem = read("cert", &files.cert)?;
        let key_pem = read("key", &files.key)?;
        let ca_pem = read("cacert", &files.ca_cert)?;

        let chain = certificates("cert", &files.cert, &cert_pem)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|error| {
            ConnectionError::NoPrivateKey {
                path: files.key.display().to_string(),
                reason: error.to_string(),
            }
        })?;
        let authorities = certificates("cacert", &files.ca_cert, &ca_pem)?;
        let mut roots = rustls::RootCertStore::empty();
        let (usable, _) = roots.add_parsable_certificates(authorities);
        if usable == 0 {
            return Err(ConnectionError::NoCertificate {
                key: "cacert",
                path: files.ca_cert.display().to_string(),
                reason: "none of its certificates can be used as a trust anchor".to_string(),
            });
        }
        // Building the rustls configuration is what checks that the key belongs to the
        // certificate; tonic builds its own from the same PEM afterwards.
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|error| ConnectionError::TlsSetup {
            reason: error.to_string(),
        })?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|error| ConnectionError::KeyDoesNotMatch {
            cert_path: files.cert.display().to_string(),
            key_path: files.key.display().to_string(),
            reason: error.to_string(),
        })?;
        Ok(TlsMaterial {
            cert_pem,
            key_pem,
            ca_pem,
        })
    }
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, ConnectionError> {
    std::fs::read(path).map_err(|error| ConnectionError::ReadFile {
        key,
        path: path.display().to_string(),
        reason: error.to_string(),
    })
}

fn certificates(
    key: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, ConnectionError> {
    let no_certificate = |reason: String| ConnectionError::NoCertificate {
        key,
        path: path.display().to_string(),
        reason,
    };
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| no_certificate(error.to_string()))?;
    if certificates.is_empty() {
        return Err(no_certificate(
            "no \"BEGIN CERTIFICATE\" block found".to_string(),
        ));
    }
    Ok(certificates)
}

/// Builds the lazy channel for `config`: checks the mTLS files first when `cert` is set, warns
/// loudly when it is not. Must run inside a Tokio runtime (the channel's worker is spawned).
pub(crate) fn connect(config: &ExternalGrpcConfig) -> Result<Channel, ConnectionError> {
    let address = &config.address;
    let channel_error = |reason: String| ConnectionError::Channel {
        address: address.written.clone(),
        reason,
    };
    let endpoint = match &config.tls {
        Some(files) => {
            let material = TlsMaterial::load(files)?;
            let server_name = address.tls_server_name();
            ServerName::try_from(server_name).map_err(|error| ConnectionError::ServerName {
                address: address.written.clone(),
                host: server_name.to_string(),
                reason: error.to_string(),
            })?;
            let tls = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&material.ca_pem))
                .identity(Identity::from_pem(&material.cert_pem, &material.key_pem))
                .domain_name(server_name);
            tracing::info!(
                address = %address,
                cert = %files.cert.display(),
                cacert = %files.ca_cert.display(),
                "externalgrpc: mutual TLS to the cloud-provider service"
            );
            Endpoint::from_shared(format!("https://{}", address.authority()))
                .map_err(|error| channel_error(error.to_string()))?
                .tls_config(tls)
                .map_err(|error| channel_error(error.to_string()))?
        }
        None => {
            tracing::warn!(
                address = %address,
                "externalgrpc: no client certificate configured (cert is empty): talking to the \
                 cloud-provider service in PLAINTEXT, without authentication. Anyone who can \
                 reach it can create and delete machines; configure cert, key and cacert for \
                 mutual TLS"
            );
            for key in &config.ignored_tls_keys {
                tracing::debug!(key, "externalgrpc: ignored because cert is empty");
            }
            Endpoint::from_shared(format!("http://{}", address.authority()))
                .map_err(|error| channel_error(error.to_string()))?
        }
    };
    Ok(endpoint.connect_with_connector_lazy(Dialer {
        address: Arc::new(address.clone()),
    }))
}

/// Dials the service's TCP port for the channel, resolving the host anew at each dial.
#[derive(Clone)]
struct Dialer {
    address: Arc<ServerAddress>,
}

impl Service<Uri> for Dialer {
    type Response = TokioIo<TcpStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<TcpStream>>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let address = self.address.clone();
        Box::pin(async move { dial(&address).await.map(TokioIo::new) })
    }
}

/// Tries every address the host resolves to, in the resolver's order, as Go's dialer does.
async fn dial(address: &ServerAddress) -> io::Result<TcpStream> {
    let mut last_error = None;
    for candidate in resolve(address).await? {
        match TcpStream::connect(candidate).await {
            Ok(stream) => {
                // gRPC messages are small and latency-bound.
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} resolves to no address", address.host),
        )
    }))
}

async fn resolve(address: &ServerAddress) -> io::Result<Vec<SocketAddr>> {
    let scope = match &address.zone {
        Some(zone) => Some(scope_id(zone)?),
        None => None,
    };
    let with_scope = |candidate: SocketAddr| match (candidate, scope) {
        (SocketAddr::V6(v6), Some(scope)) => {
            SocketAddr::V6(SocketAddrV6::new(*v6.ip(), v6.port(), v6.flowinfo(), scope))
        }
        (other, _) => other,
    };
    if let Some(ip) = address.ip() {
        return Ok(vec![with_scope(SocketAddr::new(ip, address.port))]);
    }
    let resolved = tokio::net::lookup_host((address.host.as_str(), address.port)).await?;
    Ok(resolved.map(with_scope).collect())
}

/// The interface index a zone names: a number as is, else an interface name.
fn scope_id(zone: &str) -> io::Result<u32> {
    if let Ok(index) = zone.parse() {
        return Ok(index);
    }
    let unknown = || {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("the zone {zone:?} of the address is not a network interface of this machine"),
        )
    };
    let name = CString::new(zone).map_err(|_| unknown())?;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call, and
    // `if_nametoindex` only reads it.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        Err(unknown())
    } else {
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_numeric_zone_is_the_interface_index_and_the_loopback_name_resolves() {
        assert_eq!(scope_id("3").ok(), Some(3));
        assert!(scope_id("lo").is_ok_and(|index| index > 0));
        assert!(scope_id("no-such-interface-0").is_err());
        assert!(scope_id("bad\0name").is_err());
    }

    #[tokio::test]
    async fn a_zone_is_applied_to_an_ipv6_literal() {
        let address = ServerAddress::parse("[fe80::1%7]:8086").ok();
        let resolved = match address {
            Some(address) => resolve(&address).await.ok(),
            None => None,
        };
        let scope = resolved
            .as_deref()
            .and_then(|all| all.first().copied())
            .and_then(|first| match first {
                SocketAddr::V6(v6) => Some(v6.scope_id()),
                SocketAddr::V4(_) => None,
            });
        assert_eq!(scope, Some(7));
    }
}
