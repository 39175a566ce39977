//! `ferroscale run` against an API server that does not answer: it names the server, keeps its
//! log short while it retries (the first failure, then a summary and the caches' progress now and
//! then, not one warning per retry of each watch), and gives up after `--cache-sync-timeout` with
//! a non-zero exit status and an error that says what it waited for.
//!
//! No control plane is needed: the "API server" is a loopback port.

use std::net::TcpListener;
use std::process::{Command, Output, Stdio};

use crate::support::{free_port, write_kubeconfig};

/// Long enough for kube-runtime's backoff to retry each watch several times (800 ms doubling).
const SYNC_TIMEOUT: &str = "--cache-sync-timeout=40s";

/// More than this many lines in 40 s is noise: the start-up lines, one warning for the failure,
/// a summary of its repeats and a progress report per 15 s, and the final error fit well within it.
/// (Before, each of the eleven watches logged each retry: 60 and more lines in the same time.)
const MAX_LOG_LINES: usize = 25;

/// Runs `ferroscale run --cloud-provider=externalgrpc` (which needs nothing from the API server
/// to start) against `server` at `--v=4` until it exits.
fn run_against(server: &str) -> Output {
    let dir = tempfile::tempdir().expect("temporary directory");
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, server);
    let cloud_config = dir.path().join("cloud-config.yaml");
    // The provider's server is never called: the caches come first.
    std::fs::write(
        &cloud_config,
        format!("address: \"127.0.0.1:{}\"\n", free_port()),
    )
    .expect("write the cloud config");
    Command::new(env!("CARGO_BIN_EXE_ferroscale"))
        .args([
            "run".to_string(),
            "--cloud-provider=externalgrpc".to_string(),
            format!("--cloud-config={}", cloud_config.display()),
            format!("--kubeconfig={}", kubeconfig.display()),
            "--namespace=kube-system".to_string(),
            format!("--address=127.0.0.1:{}", free_port()),
            "--v=4".to_string(),
            SYNC_TIMEOUT.to_string(),
        ])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run the ferroscale binary")
}

fn check_short_named_failure(output: &Output, server: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "gives up with a non-zero status: {:?}\n{stderr}",
        output.status
    );
    let lines = stderr.lines().count();
    assert!(
        lines <= MAX_LOG_LINES,
        "{lines} log lines in 40 s of retries:\n{stderr}"
    );
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error:")
            && last.contains(server)
            && last.contains("did not sync")
            && last.contains("Node"),
        "the final error names the server and the caches it waited for: {last}"
    );
    assert!(
        stderr
            .lines()
            .rev()
            .skip(1)
            .any(|line| line.contains(server)),
        "the log names the server while it waits:\n{stderr}"
    );
    assert!(
        stderr.contains("still waiting for the watch caches"),
        "the caches' progress is reported while waiting:\n{stderr}"
    );
    // stderr is a pipe here, as in every container: the log must carry no terminal colour codes.
    assert!(
        !stderr.contains('\u{1b}'),
        "a log written to a pipe carries no ANSI escape codes:\n{stderr}"
    );
}

/// Nothing listens on the port: every connection is refused at once.
#[test]
fn a_refusing_api_server_is_named_and_the_retries_stay_quiet() {
    let server = format!("https://127.0.0.1:{}", free_port());
    let output = run_against(&server);
    check_short_named_failure(&output, &server);
}

/// A listener that accepts connections and never says a word (a hung server or a black-holing
/// proxy): the same short, named account.
#[test]
fn a_silent_api_server_is_named_and_the_retries_stay_quiet() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen on loopback");
    let server = format!(
        "https://{}",
        listener.local_addr().expect("the listener's address")
    );
    // Accepted connections are kept open, unanswered, until the test ends.
    let accepted = std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming().flatten() {
            open.push(stream);
            if open.len() > 1_000 {
                break;
            }
        }
    });
    let output = run_against(&server);
    check_short_named_failure(&output, &server);
    drop(accepted);
}
