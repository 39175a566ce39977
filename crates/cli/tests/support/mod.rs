//! Helpers shared by the binary's test targets (each target includes this module): a free
//! loopback port, a kubeconfig for an API server that is not there, and the `main` of the live
//! benchmarks.
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

/// The `main` of a live benchmark (`crates/cli/benches`): runs `bench` on a two-thread runtime
/// under `cargo bench`, which passes `--bench`; under `cargo test --benches`, which passes nothing
/// a benchmark acts on, only says how to run it.
pub fn run_live_bench(name: &str, bench: impl std::future::Future<Output = ()>) {
    if !std::env::args().any(|a| a == "--bench") {
        println!("{name}: run with `cargo bench -p ferroscale --bench {name}`");
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(bench);
}
