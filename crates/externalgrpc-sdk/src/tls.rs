//! How the server secures its port: mutual TLS that requires and verifies a client certificate
//! (the default, and what upstream recommends: whoever can call this service can create and
//! delete machines), or plaintext HTTP/2 only when chosen explicitly.
//!
//! The files are read and checked here, with rustls, before the server starts, so a missing file,
//! a file without certificates, a key that does not match its certificate or a CA bundle without
//! a usable certificate is reported by file, path and reason rather than as a generic TLS error on
//! the first connection.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use thiserror::Error;

/// How the server secures connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tls {
    /// Mutual TLS: the server presents its certificate and requires every client to present a
    /// certificate signed by one of the CAs in the client CA bundle. ALPN `h2`, TLS 1.2 or 1.3.
    Mutual(MutualTls),
    /// Plaintext HTTP/2 (h2c). Anyone who can reach the port can create and delete machines; the
    /// server logs a warning when it starts this way. Use it only behind another layer of
    /// protection (a loopback address, a network policy, a service mesh).
    Insecure,
}

impl Tls {
    /// Mutual TLS from PEM files: the server's certificate (chain), its private key (PKCS#1,
    /// PKCS#8 or SEC1) and the CA bundle that signs client certificates. The cert-manager secret
    /// layout is `tls.crt`, `tls.key` and `ca.crt`.
    pub fn mutual(
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
        client_ca: impl Into<PathBuf>,
    ) -> Tls {
        Tls::Mutual(MutualTls {
            cert: cert.into(),
            key: key.into(),
            client_ca: client_ca.into(),
        })
    }
}

/// The three PEM files of mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MutualTls {
    /// The server's certificate, followed by any intermediates.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
    /// The CA certificates client certificates must be signed by.
    pub client_ca: PathBuf,
}

/// Which of the three files an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    ServerCertificate,
    ServerKey,
    ClientCa,
}

impl fmt::Display for TlsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsFile::ServerCertificate => "server certificate",
            TlsFile::ServerKey => "server private key",
            TlsFile::ClientCa => "client CA bundle",
        })
    }
}

/// Why the TLS files cannot be used.
#[derive(Debug, Error)]
pub enum TlsError {
    #[error("cannot read the {file} {path}: {source}")]
    Read {
        file: TlsFile,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the {file} {path} holds no PEM certificate (no \"BEGIN CERTIFICATE\" block)")]
    NoCertificate { file: TlsFile, path: PathBuf },
    #[error("the {file} {path} is not valid PEM: {reason}")]
    InvalidPem {
        file: TlsFile,
        path: PathBuf,
        reason: String,
    },
    #[error(
        "the server private key {path} holds no PEM private key (PKCS#1, PKCS#8 or SEC1): {reason}"
    )]
    NoPrivateKey { path: PathBuf, reason: String },
    #[error(
        "the client CA bundle {path} holds no usable CA certificate ({unusable} certificate(s) \
         could not be parsed)"
    )]
    NoUsableCa { path: PathBuf, unusable: usize },
    #[error(
        "the server certificate {cert} and private key {key} cannot be used together: {reason}"
    )]
    CertificateAndKey {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
    /// The files passed these checks but rustls refused the configuration built from them.
    #[error("the TLS configuration was refused: {reason}")]
    Refused { reason: String },
}

impl MutualTls {
    /// Reads and checks the files, and builds the server's TLS configuration from them: client
    /// certificates required, ALPN `h2`.
    pub(crate) fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let cert_pem = read(TlsFile::ServerCertificate, &self.cert)?;
        let key_pem = read(TlsFile::ServerKey, &self.key)?;
        let ca_pem = read(TlsFile::ClientCa, &self.client_ca)?;

        let chain = certificates(TlsFile::ServerCertificate, &self.cert, &cert_pem)?;
        let key =
            PrivateKeyDer::from_pem_slice(&key_pem).map_err(|error| TlsError::NoPrivateKey {
                path: self.key.clone(),
                reason: error.to_string(),
            })?;
        let mut roots = RootCertStore::empty();
        let (_, unusable) = roots.add_parsable_certificates(certificates(
            TlsFile::ClientCa,
            &self.client_ca,
            &ca_pem,
        )?);
        if roots.is_empty() {
            return Err(TlsError::NoUsableCa {
                path: self.client_ca.clone(),
                unusable,
            });
        }

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone())
            .build()
            .map_err(|error| TlsError::Refused {
                reason: format!("client CA bundle {}: {error}", self.client_ca.display()),
            })?;
        // Client authentication is required: the verifier does not allow unauthenticated
        // clients.
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| TlsError::Refused {
                reason: error.to_string(),
            })?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|error| TlsError::CertificateAndKey {
                cert: self.cert.clone(),
                key: self.key.clone(),
                reason: error.to_string(),
            })?;
        // gRPC runs over HTTP/2, and upstream's client insists on negotiating it.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

fn read(file: TlsFile, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        file,
        path: path.to_path_buf(),
        source,
    })
}

fn certificates(
    file: TlsFile,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::InvalidPem {
            file,
            path: path.to_path_buf(),
            reason: error.to_string(),
        })?;
    if certificates.is_empty() {
        return Err(TlsError::NoCertificate {
            file,
            path: path.to_path_buf(),
        });
    }
    Ok(certificates)
}
