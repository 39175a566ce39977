//! Readiness probes: one HTTP GET over plain TCP (etcd, kwok) or over TLS with the admin client
//! certificate (the Kubernetes components), answering the status code.
//!
//! They are blocking and minimal on purpose: start-up runs outside any async runtime, and the only
//! question is "does this endpoint answer 200 yet".

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{IpAddr, ServerName};

/// Per-request limit; a component that takes longer to answer is not ready.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET path` over plain HTTP; `Ok` when the answer is 200.
pub(crate) fn http_ok(port: u16, path: &str) -> Result<(), String> {
    let mut stream = connect(port)?;
    exchange(&mut stream, port, path)
}

/// `GET path` over HTTPS to 127.0.0.1 with the given client configuration; `Ok` when the answer is
/// 200.
pub(crate) fn https_ok(
    port: u16,
    path: &str,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<(), String> {
    let tcp = connect(port)?;
    let server_name =
        ServerName::IpAddress(IpAddr::from(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let connection = rustls::ClientConnection::new(Arc::clone(tls), server_name)
        .map_err(|error| format!("TLS set-up: {error}"))?;
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    exchange(&mut stream, port, path)
}

fn connect(port: u16) -> Result<TcpStream, String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&address, REQUEST_TIMEOUT)
        .map_err(|error| format!("connect to {address}: {error}"))?;
    stream
        .set_read_timeout(Some(REQUEST_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(REQUEST_TIMEOUT)))
        .map_err(|error| format!("socket timeouts: {error}"))?;
    Ok(stream)
}

fn exchange(stream: &mut impl ReadWrite, port: u16, path: &str) -> Result<(), String> {
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .and_then(|()| stream.flush())
        .map_err(|error| format!("send GET {path}: {error}"))?;
    let mut response = Vec::new();
    // Connection: close ends the body; a TLS peer that closes without close_notify is fine here.
    if let Err(error) = stream.read_to_end(&mut response)
        && response.is_empty()
    {
        return Err(format!("read the answer to GET {path}: {error}"));
    }
    let response = String::from_utf8_lossy(&response);
    let status_line = response.lines().next().unwrap_or_default();
    let status = status_line.split_whitespace().nth(1).unwrap_or_default();
    if status == "200" {
        Ok(())
    } else {
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.trim())
            .unwrap_or_default();
        Err(format!(
            "GET {path} answered {status_line:?}: {}",
            body.chars().take(500).collect::<String>()
        ))
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}
