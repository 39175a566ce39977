//! The listening side: one port carrying the externalgrpc service and the standard gRPC health
//! service, secured as [`Tls`] says, until the shutdown future completes — then no new connection
//! is accepted and the calls in flight finish before `serve` returns.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use ferroscale_core::cloud::CloudProvider;
use ferroscale_externalgrpc_proto::v1::cloud_provider_server::{CloudProviderServer, SERVICE_NAME};
use thiserror::Error;
use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

use crate::service::ProviderService;
use crate::tls::{Tls, TlsError};

/// Why the server could not start or stopped with an error.
#[derive(Debug, Error)]
pub enum ServeError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the address of the listening socket: {0}")]
    LocalAddress(#[source] std::io::Error),
    #[error("the gRPC server failed: {0}")]
    Transport(#[source] tonic::transport::Error),
}

/// Serves a [`CloudProvider`] as the externalgrpc cloud-provider service (see the crate
/// documentation for a complete example).
#[derive(Clone)]
pub struct ProviderServer {
    provider: Arc<dyn CloudProvider>,
}

impl ProviderServer {
    pub fn new(provider: impl CloudProvider + 'static) -> ProviderServer {
        ProviderServer::from_arc(Arc::new(provider))
    }

    /// For a provider the caller keeps using (or holds as a trait object already).
    pub fn from_arc(provider: Arc<dyn CloudProvider>) -> ProviderServer {
        ProviderServer { provider }
    }

    /// The externalgrpc service alone, for a vendor that runs its own tonic server (and its own
    /// health service). Requests are logged; answers are limited to what upstream clients accept.
    pub fn service(&self) -> CloudProviderServer<ProviderService> {
        CloudProviderServer::new(ProviderService::new(self.provider.clone()))
    }

    /// Listens on `address` and serves until `shutdown` completes; the calls in flight then
    /// finish before this returns. The TLS files are checked before the port is taken.
    pub async fn serve(
        self,
        address: SocketAddr,
        tls: Tls,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let server = transport(&tls)?;
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| ServeError::Bind { address, source })?;
        self.serve_configured(server, &tls, listener, shutdown)
            .await
    }

    /// Like [`ProviderServer::serve`] on a socket the caller bound (for example to port 0, to
    /// learn the port from the listener).
    pub async fn serve_on(
        self,
        listener: TcpListener,
        tls: Tls,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let server = transport(&tls)?;
        self.serve_configured(server, &tls, listener, shutdown)
            .await
    }

    async fn serve_configured(
        self,
        mut server: Server,
        tls: &Tls,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let address = listener.local_addr().map_err(ServeError::LocalAddress)?;
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_service_status(SERVICE_NAME, ServingStatus::Serving)
            .await;

        match tls {
            Tls::Mutual(files) => tracing::info!(
                %address,
                client_ca = %files.client_ca.display(),
                "serving the externalgrpc cloud-provider service with mutual TLS: clients must \
                 present a certificate signed by the client CA bundle"
            ),
            Tls::Insecure => tracing::warn!(
                %address,
                "serving the externalgrpc cloud-provider service WITHOUT TLS (plaintext HTTP/2, \
                 no client authentication): anyone who can reach this address can create and \
                 delete machines"
            ),
        }

        let shutdown = async {
            shutdown.await;
            tracing::info!(
                %address,
                "shutting down the externalgrpc service: no new connections; calls in flight \
                 finish first"
            );
        };
        server
            .add_service(health_service)
            .add_service(self.service())
            .serve_with_incoming_shutdown(
                TcpIncoming::from(listener).with_nodelay(Some(true)),
                shutdown,
            )
            .await
            .map_err(ServeError::Transport)?;
        tracing::info!(%address, "the externalgrpc service has stopped");
        Ok(())
    }
}

/// The transport, with TLS configured from checked files.
fn transport(tls: &Tls) -> Result<Server, ServeError> {
    let server = Server::builder();
    match tls {
        Tls::Insecure => Ok(server),
        Tls::Mutual(files) => {
            let config = files.server_config()?;
            // The transport builds its rustls configuration with the process-wide crypto
            // provider. Choosing ring (the one the files were checked with) unless the process
            // chose already keeps a binary whose dependencies enable a second provider from
            // panicking on the first connection.
            let _ = rustls::crypto::ring::default_provider().install_default();
            Ok(server
                .tls_config(config)
                .map_err(|error| TlsError::Refused {
                    reason: error.to_string(),
                })?)
        }
    }
}
