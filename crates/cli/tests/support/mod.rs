//! Helpers shared by the binary's test targets (each target includes this module): a free
//! loopback port, and a kubeconfig for an API server that is not there.
#![allow(dead_code)] // each test target uses part of it

use std::net::TcpListener;
use std::path::Path;

/// A loopback port nothing listens on (the OS picks it; it is free when this returns).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A kubeconfig for `server` with a token (no client certificate to make up).
pub fn write_kubeconfig(path: &Path, server: &str) {
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "away", "cluster": {
            "server": server,
            "insecure-skip-tls-verify": true,
        }}],
        "users": [{"name": "ferroscale", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "away", "context": {"cluster": "away", "user": "ferroscale"}}],
        "current-context": "away",
    });
    std::fs::write(
        path,
        serde_yaml_ng::to_string(&kubeconfig).expect("kubeconfig YAML"),
    )
    .expect("write the kubeconfig");
}
