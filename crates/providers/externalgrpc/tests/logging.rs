//! What an operator sees in the logs (docs/externalgrpc.md GRPC-30): every call at debug level (the
//! binary's `--v=5`) with its method, what it concerns and its duration; answers served from a
//! cache; failures at error level, except "not implemented" answers of optional calls.

mod support;

use std::io;
use std::sync::{Arc, Mutex};

use ferroscale_core::cloud::CloudProvider;
use support::*;
use tonic::Status;
use tracing_subscriber::fmt::MakeWriter;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// The lines this crate wrote (the server and transport log too).
    fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| line.contains("ferroscale_provider_externalgrpc"))
            .map(str::to_string)
            .collect()
    }
}

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if let Ok(mut buffer) = self.0.lock() {
            buffer.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Captures DEBUG and above on this thread: the test runtime is single-threaded, so the
/// provider's calls log here.
fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    (captured, guard)
}

#[tokio::test]
async fn every_call_is_logged_at_debug_with_method_group_and_duration() {
    let mut script = Script {
        groups: vec![group("ng-1", 1, 10)],
        ..Script::default()
    };
    script.target_sizes.insert("ng-1".to_string(), 2);
    let cloud = FakeCloud::new(script);
    let server = serve_plain(cloud.clone()).await;
    let (captured, _guard) = capture();
    let provider = plain_provider(server.address, "5s");
    let groups = ok(provider.node_groups().await, "node groups");
    ok(provider.node_groups().await, "node groups again");
    for group in &groups {
        ok(group.target_size().await, "target size");
    }

    let lines = captured.lines();
    let call = lines
        .iter()
        .find(|l| l.contains("NodeGroupTargetSize"))
        .unwrap_or_else(|| panic!("no line for the call in {lines:#?}"));
    assert!(call.contains("DEBUG"), "{call}");
    assert!(call.contains("\"ng-1\""), "{call}");
    assert!(call.contains("elapsed_ms="), "{call}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("NodeGroups") && l.contains("answered from cache")),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn failures_are_errors_in_the_log_but_not_implemented_answers_are_not() {
    let script = Script {
        groups: vec![group("ng-1", 1, 10)],
        ..Script::default()
    };
    let cloud = FakeCloud::new(script);
    let server = serve_plain(cloud.clone()).await;
    let (captured, _guard) = capture();
    let provider = plain_provider(server.address, "5s");
    let groups = ok(provider.node_groups().await, "node groups");
    for group in &groups {
        // No template in the script: status 12.
        assert!(group.template_node_info().await.is_err());
    }
    cloud
        .script()
        .failures
        .insert("Refresh", Status::unavailable("reloading state"));
    assert!(provider.refresh().await.is_err());

    let lines = captured.lines();
    let errors: Vec<_> = lines.iter().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 1, "{lines:#?}");
    assert!(
        errors
            .iter()
            .all(|l| l.contains("Refresh") && l.contains("reloading state")),
        "{errors:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("NodeGroupTemplateNodeInfo") && l.contains("not implemented")),
        "{lines:#?}"
    );
}
