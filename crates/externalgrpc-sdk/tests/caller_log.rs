//! The log line of each call names the client that made it, by its certificate's identity, so an
//! operator can tell which autoscaler replica resized or deleted what.
//!
//! A binary of its own: a test that captures log lines through a thread's own subscriber can
//! miss lines while other tests of the same binary hit the same log statements concurrently
//! without one (tracing caches per statement whether anyone listens).

mod support;

use std::sync::Arc;

use ferroscale_externalgrpc_proto::v1::{NodeGroupTargetSizeRequest, RefreshRequest};
use ferroscale_externalgrpc_sdk::Tls;
use support::{FakeCloud, Pki, Pricing, capture_log, plain_client, start};

// A current-thread runtime (the default of `tokio::test`), so the server's tasks log through the
// subscriber set for this thread.
#[tokio::test]
async fn the_log_line_of_a_call_names_its_client() {
    let (log, _guard) = capture_log();

    let pki = Pki::generate();
    let server = start(Arc::new(FakeCloud::new(Pricing::Offered)), pki.server_tls()).await;
    let mut client = pki
        .client(server.address, Some(&pki.client_named("replica-7")))
        .await
        .expect("dial with a client certificate");
    client
        .node_group_target_size(NodeGroupTargetSizeRequest {
            id: "ng-1".to_string(),
        })
        .await
        .expect("TargetSize is served");
    // A failed call names its client too: that is the line an operator looks for.
    client
        .node_group_target_size(NodeGroupTargetSizeRequest {
            id: "nowhere".to_string(),
        })
        .await
        .expect_err("an unknown group is NOT_FOUND");

    let plain_server = start(Arc::new(FakeCloud::new(Pricing::Offered)), Tls::Insecure).await;
    plain_client(plain_server.address)
        .await
        .expect("dial plaintext")
        .refresh(RefreshRequest {})
        .await
        .expect("Refresh is served");

    let text = log.text();
    let line = |needle: &str| {
        text.lines()
            .find(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?}:\n{text}"))
    };
    let served = line("group=\"ng-1\"");
    assert!(served.contains("client=\"replica-7\""), "{served}");
    let failed = line("group=\"nowhere\"");
    assert!(failed.contains("WARN"), "{failed}");
    assert!(failed.contains("client=\"replica-7\""), "{failed}");
    let plaintext = line("method=\"Refresh\"");
    assert!(
        !plaintext.contains("client="),
        "no identity over plaintext: {plaintext}"
    );
}
