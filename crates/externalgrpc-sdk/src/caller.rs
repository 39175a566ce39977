//! Who made a call: the client certificate's identity, so that a provider can audit which client
//! (which autoscaler replica, when each has a certificate of its own) resized or deleted what.
//!
//! The identity is read from the certificate the client presented in the mutual-TLS handshake,
//! which the server has already verified against the client CA: the subject's common name; the
//! whole subject when it has no common name; a short SHA-256 fingerprint of the certificate when
//! the subject is empty too (a certificate identified by its SANs alone). Plaintext connections
//! have no identity. The server makes it available to the provider while it serves the call
//! ([`caller`]) and writes it into the call's log line (`client=...`).
//!
//! A task-local rather than an argument: the provider traits are the core's contract, which knows
//! nothing of connections, and a provider that does not care never sees it.

use std::future::Future;

use tonic::Extensions;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

tokio::task_local! {
    /// The identity of the client whose call the current task serves.
    static CALLER: Option<String>;
}

/// How many bytes of the SHA-256 digest name a certificate that has no subject: 8 bytes (16 hex
/// digits) tell a handful of clients apart and stay readable in a log line.
const FINGERPRINT_BYTES: usize = 8;

/// The identity of the client whose call the provider is serving: the common name of its client
/// certificate (for example `replica-0`), else the certificate's whole subject
/// (`O=example, OU=autoscalers`), else `sha256:` and the first 16 hex digits of the certificate's
/// SHA-256 fingerprint.
///
/// `None` on a plaintext connection ([`crate::Tls::Insecure`]) and outside a call. It is set for
/// the task that runs the provider's method: a provider that spawns work of its own reads it
/// before spawning.
///
/// ```no_run
/// # use ferroscale_core::cloud::CloudError;
/// # async fn increase_size(delta: usize) -> Result<(), CloudError> {
/// let client = ferroscale_externalgrpc_sdk::caller();
/// tracing::info!(client = client.as_deref().unwrap_or("<plaintext>"), delta, "growing the group");
/// # Ok(()) }
/// ```
pub fn caller() -> Option<String> {
    CALLER.try_with(Clone::clone).ok().flatten()
}

/// Runs `call` with `identity` as what [`caller`] answers inside it.
pub(crate) async fn serving<F: Future>(identity: Option<String>, call: F) -> F::Output {
    CALLER.scope(identity, call).await
}

/// The identity of the client of the connection a request came on, from the connection
/// information the transport puts into the request's extensions; `None` for plaintext.
pub(crate) fn of_connection(extensions: &Extensions) -> Option<String> {
    let certificates = extensions
        .get::<TlsConnectInfo<TcpConnectInfo>>()?
        .peer_certs()?;
    // The client's own certificate comes first, any intermediates after it.
    let certificate = certificates.first()?;
    Some(identity_of_certificate(certificate.as_ref()))
}

/// The common name, else the whole subject, else the fingerprint of a DER certificate.
fn identity_of_certificate(der: &[u8]) -> String {
    // The handshake verified the certificate, so it parses; a fingerprint is still an identity
    // if it somehow does not.
    if let Ok((_, certificate)) = X509Certificate::from_der(der) {
        let subject = certificate.subject();
        let common_name = subject
            .iter_common_name()
            .find_map(|name| name.as_str().ok())
            .filter(|name| !name.is_empty());
        if let Some(common_name) = common_name {
            return common_name.to_string();
        }
        if subject.iter_attributes().next().is_some() {
            return subject.to_string();
        }
    }
    fingerprint(der)
}

fn fingerprint(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    let hex: String = digest.as_ref()[..FINGERPRINT_BYTES]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    use super::*;

    fn certificate(subject: &[(DnType, &str)], san: &[&str]) -> Vec<u8> {
        let mut params = CertificateParams::new(
            san.iter()
                .map(|name| (*name).to_string())
                .collect::<Vec<_>>(),
        )
        .expect("certificate parameters");
        // rcgen names a certificate "rcgen self signed cert" unless told otherwise.
        params.distinguished_name = DistinguishedName::new();
        for (kind, value) in subject {
            params.distinguished_name.push(kind.clone(), *value);
        }
        let key = KeyPair::generate().expect("key");
        params
            .self_signed(&key)
            .expect("certificate")
            .der()
            .to_vec()
    }

    #[test]
    fn the_common_name_identifies_the_client() {
        let der = certificate(
            &[
                (DnType::OrganizationName, "example"),
                (DnType::CommonName, "replica-7"),
            ],
            &[],
        );
        assert_eq!(identity_of_certificate(&der), "replica-7");
    }

    #[test]
    fn without_a_common_name_the_whole_subject_identifies_the_client() {
        let der = certificate(
            &[
                (DnType::OrganizationName, "example"),
                (DnType::OrganizationalUnitName, "autoscalers"),
            ],
            &[],
        );
        assert_eq!(identity_of_certificate(&der), "O=example, OU=autoscalers");
    }

    #[test]
    fn without_a_subject_a_fingerprint_identifies_the_client_and_tells_certificates_apart() {
        let first = certificate(&[], &["replica.example"]);
        let second = certificate(&[], &["replica.example"]);
        let identity = identity_of_certificate(&first);
        assert!(identity.starts_with("sha256:"), "{identity}");
        assert_eq!(identity.len(), "sha256:".len() + 2 * FINGERPRINT_BYTES);
        assert_eq!(identity, identity_of_certificate(&first), "stable");
        assert_ne!(identity, identity_of_certificate(&second));
    }

    #[tokio::test]
    async fn the_identity_is_there_during_the_call_only() {
        assert_eq!(caller(), None);
        let inside = serving(Some("replica-3".to_string()), async { caller() }).await;
        assert_eq!(inside.as_deref(), Some("replica-3"));
        assert_eq!(serving(None, async { caller() }).await, None);
        assert_eq!(caller(), None);
    }

    #[test]
    fn a_request_without_tls_connection_information_has_no_identity() {
        assert_eq!(of_connection(&Extensions::new()), None);
    }
}
