//! The certificates and keys one control plane needs, made fresh for each instance: a CA, a serving
//! certificate for the loopback components, a client certificate for an admin in `system:masters`, and
//! the service-account token signing key pair; and further client certificates from the same CA on
//! request, for tests that need several clients told apart by name (each autoscaler replica with
//! its own identity towards a provider served with mutual TLS).
//!
//! Each instance has its own CA so parallel tests can never authenticate against each other's API
//! server by accident.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::Error;

/// User name of the admin client certificate.
pub const ADMIN_USER: &str = "ferroscale-test-admin";

/// Names the serving certificate is valid for: loopback, where the tests reach the components, and
/// the in-cluster names of the `kubernetes` Service (10.96.0.1 is the first address of the service
/// range the API server is given).
const SERVING_NAMES: &[&str] = &[
    "127.0.0.1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "10.96.0.1",
];

/// Files written by [`Pki::write`], in PEM.
#[derive(Debug, Clone)]
pub struct PkiFiles {
    pub ca_certificate: PathBuf,
    pub ca_key: PathBuf,
    pub serving_certificate: PathBuf,
    pub serving_key: PathBuf,
    pub admin_certificate: PathBuf,
    pub admin_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_public_key: PathBuf,
}

/// A client certificate signed by an instance's CA, and its private key, as PEM files
/// ([`crate::ControlPlane::issue_client_certificate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    pub certificate: PathBuf,
    pub key: PathBuf,
}

/// Issues a client certificate whose subject is the common name `common_name` alone, signed by
/// the CA of `files` (read back from its PEM files), and writes it and its key next to the CA as
/// `<file_stem>.crt` and `<file_stem>.key`. As a Kubernetes client it is the user `common_name`,
/// in no group.
pub(crate) fn issue_client_certificate(
    files: &PkiFiles,
    common_name: &str,
    file_stem: &str,
) -> Result<ClientCertificate, Error> {
    let ca_certificate_pem = read(&files.ca_certificate)?;
    let ca_key = KeyPair::from_pem(&read(&files.ca_key)?)?;
    let ca = Issuer::from_ca_cert_pem(&ca_certificate_pem, ca_key)?;

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let certificate = params.signed_by(&key, &ca)?;

    let issued = ClientCertificate {
        certificate: files
            .ca_certificate
            .with_file_name(format!("{file_stem}.crt")),
        key: files
            .ca_certificate
            .with_file_name(format!("{file_stem}.key")),
    };
    write(&issued.certificate, &certificate.pem())?;
    write(&issued.key, &key.serialize_pem())?;
    Ok(issued)
}

fn read(path: &Path) -> Result<String, Error> {
    fs::read_to_string(path).map_err(|source| Error::Io {
        action: format!("read {}", path.display()),
        source,
    })
}

fn write(path: &Path, pem: &str) -> Result<(), Error> {
    fs::write(path, pem).map_err(|source| Error::Io {
        action: format!("write {}", path.display()),
        source,
    })
}

pub(crate) struct Pki {
    ca_certificate_pem: String,
    ca_certificate_der: CertificateDer<'static>,
    ca_key_pem: String,
    serving_certificate_pem: String,
    serving_key_pem: String,
    admin_certificate_pem: String,
    admin_certificate_der: CertificateDer<'static>,
    admin_key_pem: String,
    admin_key_der: Vec<u8>,
    service_account_key_pem: String,
    service_account_public_key_pem: String,
}

impl Pki {
    pub(crate) fn generate() -> Result<Self, Error> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "ferroscale test control plane CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

        let serving_key = KeyPair::generate()?;
        let mut serving_params = CertificateParams::new(
            SERVING_NAMES
                .iter()
                .map(|name| (*name).to_owned())
                .collect::<Vec<_>>(),
        )?;
        serving_params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        serving_params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        serving_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving = serving_params.signed_by(&serving_key, &ca)?;

        // Kubernetes takes the user from the common name and the groups from the organisations.
        let admin_key = KeyPair::generate()?;
        let mut admin_params = CertificateParams::new(Vec::<String>::new())?;
        admin_params
            .distinguished_name
            .push(DnType::CommonName, ADMIN_USER);
        admin_params
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        admin_params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        admin_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin = admin_params.signed_by(&admin_key, &ca)?;

        let service_account_key = KeyPair::generate()?;

        Ok(Pki {
            ca_certificate_pem: ca.pem(),
            ca_certificate_der: ca.der().clone(),
            ca_key_pem: ca.key().serialize_pem(),
            serving_certificate_pem: serving.pem(),
            serving_key_pem: serving_key.serialize_pem(),
            admin_certificate_pem: admin.pem(),
            admin_certificate_der: admin.der().clone(),
            admin_key_pem: admin_key.serialize_pem(),
            admin_key_der: admin_key.serialize_der(),
            service_account_key_pem: service_account_key.serialize_pem(),
            service_account_public_key_pem: service_account_key.public_key_pem(),
        })
    }

    /// Writes every certificate and key as PEM into `dir`.
    pub(crate) fn write(&self, dir: &Path) -> Result<PkiFiles, Error> {
        let files = PkiFiles {
            ca_certificate: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            serving_certificate: dir.join("serving.crt"),
            serving_key: dir.join("serving.key"),
            admin_certificate: dir.join("admin.crt"),
            admin_key: dir.join("admin.key"),
            service_account_key: dir.join("service-account.key"),
            service_account_public_key: dir.join("service-account.pub"),
        };
        for (path, pem) in [
            (&files.ca_certificate, &self.ca_certificate_pem),
            (&files.ca_key, &self.ca_key_pem),
            (&files.serving_certificate, &self.serving_certificate_pem),
            (&files.serving_key, &self.serving_key_pem),
            (&files.admin_certificate, &self.admin_certificate_pem),
            (&files.admin_key, &self.admin_key_pem),
            (&files.service_account_key, &self.service_account_key_pem),
            (
                &files.service_account_public_key,
                &self.service_account_public_key_pem,
            ),
        ] {
            write(path, pem)?;
        }
        Ok(files)
    }

    pub(crate) fn ca_certificate_pem(&self) -> &str {
        &self.ca_certificate_pem
    }

    /// A TLS client configuration that trusts only this CA and presents the admin certificate, for
    /// the health probes.
    pub(crate) fn admin_tls_config(&self) -> Result<rustls::ClientConfig, Error> {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_certificate_der.clone())?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.admin_key_der.clone()));
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(vec![self.admin_certificate_der.clone()], key)?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
    use rustls::server::WebPkiClientVerifier;
    use x509_parser::prelude::{FromDer, X509Certificate};

    use super::*;

    fn written_pki() -> (tempfile::TempDir, PkiFiles) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let files = Pki::generate()
            .and_then(|pki| pki.write(dir.path()))
            .expect("the PKI is generated and written");
        (dir, files)
    }

    fn certificate(path: &Path) -> CertificateDer<'static> {
        CertificateDer::from_pem_file(path).expect("a PEM certificate")
    }

    /// Whether a server requiring client certificates of `files`' CA accepts `client`.
    fn accepted_by_ca_of(files: &PkiFiles, client: &CertificateDer<'_>) -> bool {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(certificate(&files.ca_certificate))
            .expect("the CA is a usable root");
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
            .build()
            .expect("a client verifier");
        verifier
            .verify_client_cert(client, &[], UnixTime::now())
            .is_ok()
    }

    #[test]
    fn an_issued_client_certificate_is_accepted_by_the_instances_ca_and_carries_its_name() {
        let (_dir, files) = written_pki();
        let issued = issue_client_certificate(&files, "replica-0", "client-0-replica-0")
            .expect("the certificate is issued");
        assert_eq!(
            issued.certificate,
            files
                .ca_certificate
                .with_file_name("client-0-replica-0.crt")
        );

        let der = certificate(&issued.certificate);
        assert!(accepted_by_ca_of(&files, &der));
        let (_, parsed) = X509Certificate::from_der(der.as_ref()).expect("a DER certificate");
        let common_names: Vec<&str> = parsed
            .subject()
            .iter_common_name()
            .filter_map(|name| name.as_str().ok())
            .collect();
        assert_eq!(common_names, ["replica-0"]);

        // The key is the certificate's: a TLS client can present the pair.
        let key = PrivateKeyDer::from_pem_file(&issued.key).expect("a PEM private key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_client_auth_cert(vec![der], key)
            .expect("the key matches the certificate");
    }

    #[test]
    fn another_instances_ca_does_not_accept_the_certificate() {
        let (_dir, files) = written_pki();
        let (_other_dir, other_files) = written_pki();
        let issued = issue_client_certificate(&files, "replica-1", "client-0-replica-1")
            .expect("the certificate is issued");
        assert!(!accepted_by_ca_of(
            &other_files,
            &certificate(&issued.certificate)
        ));
    }
}
