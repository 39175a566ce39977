//! The faulty provider served as a provider process serves it: the SDK's externalgrpc service
//! with mutual TLS on a loopback port, and a way to take the whole provider down and bring it
//! back on the same port.
//!
//! Clients dial a port of this module's own, which relays each connection, bytes unchanged, to
//! the SDK server on a second, private port: the TLS session (and so the client's identity) is
//! still the SDK's. Stopping closes the public port and drops every connection at once, as when
//! a provider process dies: clients see connection errors (gRPC UNAVAILABLE) and the SDK drops
//! the calls in flight. The SDK's own shutdown would not do: it lets calls in flight finish and
//! keeps established connections until they do.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferroscale_externalgrpc_sdk::{MutualTls, ProviderServer, ServeError, Tls};
use thiserror::Error;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

use super::{FaultyProvider, lock};

/// Why the provider could not be served.
#[derive(Debug, Error)]
pub enum ServedError {
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("cannot read the address of a listening socket: {0}")]
    LocalAddress(#[source] io::Error),
    /// The SDK refused to serve (a TLS file that cannot be used, say).
    #[error("the externalgrpc server could not start: {0}")]
    Serve(#[from] ServeError),
}

/// The files a client (an autoscaler replica) connects with: its certificate and key, and the CA
/// that signed the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    pub certificate: PathBuf,
    pub key: PathBuf,
    pub server_ca: PathBuf,
}

/// A [`FaultyProvider`] served with mutual TLS on `127.0.0.1:<free port>` in the current Tokio
/// runtime, until dropped.
pub struct ServedProvider {
    provider: Arc<FaultyProvider>,
    /// The port clients dial.
    address: SocketAddr,
    /// The SDK server's private port.
    server_address: SocketAddr,
    server: JoinHandle<Result<(), ServeError>>,
    /// Stops the SDK server gracefully when dropped (the server task is aborted too).
    _server_shutdown: oneshot::Sender<()>,
    /// The relay of the public port; `None` while stopped.
    relay: Mutex<Option<JoinHandle<()>>>,
}

impl ServedProvider {
    /// Serves `provider` with the server certificate, key and client CA of `tls`: clients must
    /// present a certificate signed by that CA. The files are checked before this returns.
    pub async fn start(
        provider: Arc<FaultyProvider>,
        tls: MutualTls,
    ) -> Result<ServedProvider, ServedError> {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let server_listener = bind(loopback).await?;
        let server_address = server_listener
            .local_addr()
            .map_err(ServedError::LocalAddress)?;
        let (server_shutdown, shutdown) = oneshot::channel::<()>();
        let mut serving = Box::pin(ProviderServer::from_arc(provider.clone()).serve_on(
            server_listener,
            Tls::Mutual(tls),
            async {
                let _ = shutdown.await;
            },
        ));
        // The SDK checks the TLS files when first polled: a bad file is an error here rather
        // than a server task that ended unseen.
        if let std::task::Poll::Ready(result) = futures::poll!(serving.as_mut()) {
            result?;
        }
        let server = tokio::spawn(serving);

        let listener = bind(loopback).await?;
        let address = listener.local_addr().map_err(ServedError::LocalAddress)?;
        let relay = tokio::spawn(relay(listener, server_address));
        Ok(ServedProvider {
            provider,
            address,
            server_address,
            server,
            _server_shutdown: server_shutdown,
            relay: Mutex::new(Some(relay)),
        })
    }

    /// Where clients connect: `127.0.0.1:<port>`, the same port after [`Self::start_again`].
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn provider(&self) -> &Arc<FaultyProvider> {
        &self.provider
    }

    /// Whether clients can reach the provider (started, and not stopped since).
    pub fn is_up(&self) -> bool {
        lock(&self.relay).is_some()
    }

    /// Takes the provider down abruptly: once this returns the port is closed, every client's
    /// connection is dropped and the calls in flight are abandoned, as when the provider process
    /// dies. Calls then fail with connection errors (gRPC UNAVAILABLE). The provider's state
    /// (injections, the call log, instances that never registered) is kept.
    pub async fn stop(&self) {
        let relay = lock(&self.relay).take();
        if let Some(relay) = relay {
            relay.abort();
            // Once the task is gone, its listener and its connections are closed.
            let _ = relay.await;
            tracing::info!(
                address = %self.address,
                "faulty provider: stopped (port closed, connections dropped)"
            );
        }
    }

    /// Serves again on the same port after [`Self::stop`]; does nothing if serving already.
    /// Fails if something else took the port meanwhile.
    pub async fn start_again(&self) -> Result<(), ServedError> {
        if self.is_up() {
            return Ok(());
        }
        let listener = bind(self.address).await?;
        let relay = tokio::spawn(relay(listener, self.server_address));
        let replaced = lock(&self.relay).replace(relay);
        if let Some(other) = replaced {
            // A concurrent start_again won the race for the port first; cannot happen with one
            // port, but never leave a relay running unowned.
            other.abort();
        }
        tracing::info!(address = %self.address, "faulty provider: started again");
        Ok(())
    }

    /// Writes the externalgrpc cloud-config file `ferroscale run --cloud-provider=externalgrpc
    /// --cloud-config=<path>` reads: this provider's address, the client's certificate and key,
    /// the CA of the server's certificate, and the deadline of every call.
    pub fn write_cloud_config(
        &self,
        path: &Path,
        client: &ClientTls,
        grpc_timeout: Duration,
    ) -> io::Result<()> {
        let quoted = |path: &Path| -> io::Result<String> {
            let text = path.to_str().ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is not UTF-8", path.display()),
                )
            })?;
            // A JSON string is a YAML scalar that any path survives.
            serde_json::to_string(text).map_err(io::Error::other)
        };
        let config = format!(
            "address: \"{}\"\ncert: {}\nkey: {}\ncacert: {}\ngrpc_timeout: {}ms\n",
            self.address,
            quoted(&client.certificate)?,
            quoted(&client.key)?,
            quoted(&client.server_ca)?,
            grpc_timeout.as_millis(),
        );
        std::fs::write(path, config)
    }
}

impl Drop for ServedProvider {
    fn drop(&mut self) {
        if let Some(relay) = lock(&self.relay).take() {
            relay.abort();
        }
        self.server.abort();
    }
}

async fn bind(address: SocketAddr) -> Result<TcpListener, ServedError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| ServedError::Bind { address, source })
}

/// Relays every connection to `listener` to the SDK server at `server`, until aborted; aborting
/// drops the listener and every connection with it.
async fn relay(listener: TcpListener, server: SocketAddr) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    connections.spawn(relay_connection(client, server));
                }
                Err(error) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(%error, "faulty provider: accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn relay_connection(mut client: TcpStream, server: SocketAddr) {
    let _ = client.set_nodelay(true);
    let mut upstream = match TcpStream::connect(server).await {
        Ok(upstream) => upstream,
        Err(error) => {
            tracing::warn!(%error, "faulty provider: cannot reach its own SDK server");
            return;
        }
    };
    let _ = upstream.set_nodelay(true);
    // Ends when either side closes; errors are the client's or the server's to report.
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}
