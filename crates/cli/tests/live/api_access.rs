//! The API-access flags as the API server sees them: the kube-apiserver's audit log records every
//! request with its user, its User-Agent and when it arrived, so the test reads back what
//! `--user-agent` sent and checks that `--kube-client-qps` / `--kube-client-burst` held the
//! whole start-up (lists, watches, the provider's ConfigMaps, the status writes) to the rate.

use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

use crate::harness::{Cluster, NAMESPACE};
use crate::wait_for_first_status;

/// The identity `ferroscale run` authenticates as in these tests.
fn service_account() -> String {
    format!("system:serviceaccount:{NAMESPACE}:ferroscale")
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditEvent {
    #[serde(rename = "auditID")]
    audit_id: String,
    #[serde(rename = "requestURI")]
    request_uri: String,
    verb: String,
    user: AuditUser,
    user_agent: Option<String>,
    request_received_timestamp: String,
}

#[derive(Debug, Deserialize)]
struct AuditUser {
    username: String,
}

/// One request of `user`: (seconds since the first, verb, URI, User-Agent), in arrival order.
fn requests_of(audit_log: &str, user: &str) -> Vec<(f64, String, String, String)> {
    let mut seen = std::collections::BTreeSet::new();
    let mut requests: Vec<(i128, String, String, String)> = audit_log
        .lines()
        // The last line may be half written.
        .filter_map(|line| serde_json::from_str::<AuditEvent>(line).ok())
        .filter(|event| event.user.username == user)
        // A watch has two events (started, completed): one request.
        .filter(|event| seen.insert(event.audit_id.clone()))
        .map(|event| {
            let at: Timestamp = event
                .request_received_timestamp
                .parse()
                .expect("audit timestamp");
            (
                at.as_microsecond() as i128,
                event.verb,
                event.request_uri,
                event.user_agent.unwrap_or_default(),
            )
        })
        .collect();
    requests.sort_by_key(|request| request.0);
    let first = requests.first().map_or(0, |request| request.0);
    requests
        .into_iter()
        .map(|(at, verb, uri, agent)| ((at - first) as f64 / 1e6, verb, uri, agent))
        .collect()
}

/// With 2 requests per second and bursts of 1, no stretch of the start-up has more requests than
/// the token bucket allows; unlimited, the start-up sends its dozen lists and watches within a
/// fraction of a second. Every request carries the `--user-agent` token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_sees_the_rate_limit_and_the_user_agent() {
    const QPS: f64 = 2.0;
    const BURST: f64 = 1.0;
    let cluster = Cluster::start().await;
    let autoscaler = cluster.start_autoscaler(
        "api-access",
        &[
            "--kube-client-qps=2",
            "--kube-client-burst=1",
            "--user-agent=ferroscale-api-test",
        ],
    );
    wait_for_first_status(&cluster).await;

    let audit_log = std::fs::read_to_string(cluster.control_plane.audit_log_path())
        .expect("read the API server's audit log");
    let requests = requests_of(&audit_log, &service_account());
    let listing = || {
        requests
            .iter()
            .map(|(at, verb, uri, agent)| format!("{at:>8.3}s {verb} {uri} ({agent})"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        requests.len() >= 12,
        "the start-up makes at least a dozen requests:\n{}\n{}",
        listing(),
        autoscaler.log()
    );
    for (_, verb, uri, agent) in &requests {
        assert!(
            agent.starts_with("ferroscale-api-test/"),
            "{verb} {uri} carried User-Agent {agent:?}"
        );
    }
    // Requests i..=j arrived within (t_j - t_i): the bucket allows BURST plus QPS per second.
    // Half a second and one request of slack for a request whose connection took longer to
    // open than the next one's.
    for i in 0..requests.len() {
        for j in i + 1..requests.len() {
            let span = requests[j].0 - requests[i].0;
            let count = (j - i + 1) as f64;
            let allowed = BURST + QPS * (span + 0.5) + 1.0;
            assert!(
                count <= allowed,
                "{count} requests within {span:.3}s (allowed {allowed:.1}):\n{}",
                listing()
            );
        }
    }
}

/// `--kubernetes` names the API server when no `--kubeconfig` is given, over the server of the
/// kubeconfig its `auth` key names for the credentials: here that kubeconfig points at a port
/// nobody listens on, so the first iteration happens only if the URL's server is the one used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_flag_names_the_api_server() {
    let cluster = Cluster::start().await;
    let text = std::fs::read_to_string(cluster.service_account_kubeconfig())
        .expect("read the ServiceAccount kubeconfig");
    let server = cluster.control_plane.server_url();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let dead_server = format!(
        "https://127.0.0.1:{}",
        closed.local_addr().expect("port").port()
    );
    drop(closed);
    assert!(text.contains(&server), "{text}");
    let elsewhere = cluster.scratch_dir().join("elsewhere.kubeconfig");
    std::fs::write(&elsewhere, text.replace(&server, &dead_server))
        .expect("write the kubeconfig with the wrong server");
    let kubernetes = format!(
        "--kubernetes={server}?inClusterConfig=false&auth={}",
        elsewhere.display()
    );
    let autoscaler = cluster.start_autoscaler("kubernetes-flag", &["--kubeconfig=", &kubernetes]);
    wait_for_first_status(&cluster).await;
    let log = autoscaler.log();
    assert!(
        log.contains(&format!("api_server=\"{server}")),
        "the log names the URL's server:\n{log}"
    );
}
