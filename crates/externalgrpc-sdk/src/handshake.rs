//! The TLS handshakes of the mutual-TLS port, done here rather than inside the transport so that
//! a refused client is seen: the transport drops a failed handshake with a debug line that names
//! neither the peer nor, at the default verbosity, anything at all. A client refused for its
//! certificate (none, signed by another CA, expired) or for not speaking TLS is a warning naming
//! its address and the reason; at most [`REFUSALS_LOGGED_PER_WINDOW`] such lines are written per
//! [`REFUSAL_WINDOW`], and the next line written says how many were left out, so a scanner
//! cannot flood the log. A peer that closes the connection before finishing a handshake (a TCP
//! probe) is only a debug line.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

/// A client that connects and then never completes its handshake is dropped after this long.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How many refused handshakes are logged per [`REFUSAL_WINDOW`].
pub(crate) const REFUSALS_LOGGED_PER_WINDOW: u32 = 10;

/// The window of the refusal log's rate limit.
pub(crate) const REFUSAL_WINDOW: Duration = Duration::from_secs(60);

/// Connections whose handshake succeeded, waiting for the transport to take them.
const ACCEPTED_BACKLOG: usize = 64;

/// The connections of the port, as the transport takes them.
pub(crate) type Incoming = ReceiverStream<io::Result<TlsStream<TcpStream>>>;

/// Accepts connections on `listener` and completes their TLS handshakes in the background; the
/// stream yields the connections that passed. Aborting the handle closes the port and drops the
/// handshakes under way.
pub(crate) fn accept_tls(listener: TcpListener, acceptor: TlsAcceptor) -> (Incoming, AbortHandle) {
    let (accepted, incoming) = mpsc::channel(ACCEPTED_BACKLOG);
    let task = tokio::spawn(accept_loop(listener, acceptor, accepted));
    (ReceiverStream::new(incoming), task.abort_handle())
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    accepted: mpsc::Sender<io::Result<TlsStream<TcpStream>>>,
) {
    let refusals = Arc::new(RefusalLog::default());
    let mut handshakes = JoinSet::new();
    loop {
        while handshakes.try_join_next().is_some() {}
        let (stream, peer) = match listener.accept().await {
            Ok(connection) => connection,
            Err(error) => {
                // Out of file descriptors and the like: wait instead of spinning.
                tracing::warn!(%error, "externalgrpc: accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let accepted = accepted.clone();
        let refusals = Arc::clone(&refusals);
        handshakes.spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    // The transport stopped taking connections: the server is shutting down.
                    let _ = accepted.send(Ok(tls)).await;
                }
                Ok(Err(error)) if closed_by_peer(&error) => tracing::debug!(
                    %peer,
                    %error,
                    "externalgrpc: a client closed its connection during the TLS handshake"
                ),
                Ok(Err(error)) => refusals.refused(peer, &error.to_string()),
                Err(_) => refusals.refused(
                    peer,
                    &format!(
                        "no complete handshake within {} s",
                        HANDSHAKE_TIMEOUT.as_secs()
                    ),
                ),
            }
        });
    }
}

/// The peer hung up: nothing was refused.
fn closed_by_peer(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
    )
}

/// The rate-limited warning about refused handshakes.
#[derive(Debug, Default)]
struct RefusalLog {
    window: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    started: Option<Instant>,
    logged: u32,
    /// Refusals not logged since the last line.
    left_out: u64,
}

impl RefusalLog {
    fn refused(&self, peer: SocketAddr, reason: &str) {
        let left_out = {
            let mut window = self
                .window
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let now = Instant::now();
            if window
                .started
                .is_none_or(|started| now.duration_since(started) >= REFUSAL_WINDOW)
            {
                window.started = Some(now);
                window.logged = 0;
            }
            if window.logged >= REFUSALS_LOGGED_PER_WINDOW {
                window.left_out += 1;
                return;
            }
            window.logged += 1;
            std::mem::take(&mut window.left_out)
        };
        if left_out == 0 {
            tracing::warn!(
                %peer,
                reason,
                "externalgrpc: refused a client's TLS handshake; the client is not served"
            );
        } else {
            tracing::warn!(
                %peer,
                reason,
                refusals_not_logged = left_out,
                "externalgrpc: refused a client's TLS handshake; the client is not served \
                 (more refusals than the log shows: see refusals_not_logged)"
            );
        }
    }
}
