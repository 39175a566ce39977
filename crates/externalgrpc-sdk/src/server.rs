//! The listening side: one port carrying the externalgrpc service and the standard gRPC health
//! service, secured as [`Tls`] says, until the shutdown future completes — then no new connection
//! is accepted and the calls in flight finish before `serve` returns. With mutual TLS the
//! handshakes are made by [`crate::handshake`], which logs the clients it refuses.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use ferroscale_core::cloud::CloudProvider;
use ferroscale_externalgrpc_proto::v1::cloud_provider_server::{CloudProviderServer, SERVICE_NAME};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::task::AbortHandle;
use tokio_rustls::TlsAcceptor;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

use crate::handshake;
use crate::service::ProviderService;
use crate::tls::{Tls, TlsError};
use crate::unreadable::UnreadableRequestsRefused;

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
    /// health service). Requests are logged; a request message that does not decode is
    /// INVALID_ARGUMENT; answers are limited to what upstream clients accept.
    pub fn service(&self) -> UnreadableRequestsRefused<CloudProviderServer<ProviderService>> {
        UnreadableRequestsRefused::new(CloudProviderServer::new(ProviderService::new(
            self.provider.clone(),
        )))
    }

    /// Listens on `address` and serves until `shutdown` completes; the calls in flight then
    /// finish before this returns. The TLS files are checked before the port is taken.
    pub async fn serve(
        self,
        address: SocketAddr,
        tls: Tls,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let security = Security::of(&tls)?;
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| ServeError::Bind { address, source })?;
        self.serve_configured(security, &tls, listener, shutdown)
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
        let security = Security::of(&tls)?;
        self.serve_configured(security, &tls, listener, shutdown)
            .await
    }

    async fn serve_configured(
        self,
        security: Security,
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

        let router = Server::builder()
            .add_service(health_service)
            .add_service(self.service());
        let served = match security {
            Security::Plaintext => {
                let shutdown = announce_shutdown(address, shutdown);
                router
                    .serve_with_incoming_shutdown(
                        TcpIncoming::from(listener).with_nodelay(Some(true)),
                        shutdown,
                    )
                    .await
            }
            Security::MutualTls(acceptor) => {
                let (incoming, port) = handshake::accept_tls(listener, acceptor);
                // Closing the port when the shutdown begins, not when the last call ends.
                let _close_on_return = AbortOnDrop(port.clone());
                let shutdown = async {
                    announce_shutdown(address, shutdown).await;
                    port.abort();
                };
                router
                    .serve_with_incoming_shutdown(incoming, shutdown)
                    .await
            }
        };
        served.map_err(ServeError::Transport)?;
        tracing::info!(%address, "the externalgrpc service has stopped");
        Ok(())
    }
}

/// `shutdown`, logged when it comes.
async fn announce_shutdown(address: SocketAddr, shutdown: impl Future<Output = ()>) {
    shutdown.await;
    tracing::info!(
        %address,
        "shutting down the externalgrpc service: no new connections; calls in flight \
         finish first"
    );
}

/// Aborts a task when dropped.
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How connections are secured, from checked files.
enum Security {
    Plaintext,
    MutualTls(TlsAcceptor),
}

impl Security {
    fn of(tls: &Tls) -> Result<Security, ServeError> {
        match tls {
            Tls::Insecure => Ok(Security::Plaintext),
            Tls::Mutual(files) => Ok(Security::MutualTls(TlsAcceptor::from(
                files.server_config()?,
            ))),
        }
    }
}
