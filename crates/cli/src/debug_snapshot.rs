//! The debugging snapshot (`--debugging-snapshot-enabled`, upstream's `/snapshotz`) and the
//! replay file (`--snapshot-scenario`): what one loop gathered, on request.
//!
//! The protocol is upstream's: a request waits for the next loop to start, that loop copies what
//! it gathers, and the request is answered with it when the loop ends — as JSON in upstream's
//! shape, or with `?format=scenario` as a scenario file for `ferroscale simulate` (docs/
//! operations.md, "What would Ferroscale do on my cluster?"). One request at a time, as upstream
//! (a second one is answered 429), and the wait is bounded: a process whose loop does not run (a
//! standby replica, a loop stuck on its provider) answers 504 rather than holding the connection
//! for ever. A loop nobody asked for only reads one flag.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ferroscale_core::autoscaler::{LoopCapture, LoopOutcome};
use ferroscale_metrics::{RouteAnswer, RouteHandler};
use ferroscale_model::Timestamp;
use ferroscale_model::time::format_duration;
use ferroscale_sim::replay::{
    DEFAULT_REPLAY_DURATION, debugging_snapshot, loop_decisions, scenario_yaml,
};
use tokio::sync::oneshot;

/// Upstream's path of the debugging snapshot.
pub const SNAPSHOT_PATH: &str = "/snapshotz";

/// How a snapshot is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// Upstream's JSON: `NodeList`, `UnscheduledPodsCanBeScheduled`, `TemplateNodes`, ...
    Json,
    /// A scenario file (docs/scenario.md).
    Scenario,
}

impl Format {
    fn from_query(query: Option<&str>) -> Result<Format, String> {
        let mut format = Format::Json;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("format", "json")) => format = Format::Json,
                Some(("format", "scenario")) => format = Format::Scenario,
                Some(("format", other)) => {
                    return Err(format!(
                        "unknown format {other:?}: expected format=json or format=scenario"
                    ));
                }
                _ => return Err(format!("unknown query parameter {pair:?}")),
            }
        }
        Ok(format)
    }
}

/// The request waiting for its loop.
struct Waiting {
    id: u64,
    format: Format,
    reply: oneshot::Sender<RouteAnswer>,
}

/// The snapshots asked for: by HTTP requests and by `--snapshot-scenario`.
pub struct Snapshots {
    enabled: bool,
    /// The longest a request waits for its loop.
    wait: Duration,
    /// The engine flags `run` was given, written as a scenario's `options:`.
    flags: Vec<(String, String)>,
    /// Set while a request waits for a loop to start: the only thing a loop reads when nobody
    /// asked.
    requested: AtomicBool,
    waiting: Mutex<Option<Waiting>>,
    next_id: AtomicU64,
    /// `--snapshot-scenario`, until the first loop that gathered has been written there.
    scenario_file: Mutex<Option<PathBuf>>,
}

/// Clears a request that stops waiting (answered, timed out, or its connection closed) so the
/// next one is accepted.
struct Forget<'a> {
    snapshots: &'a Snapshots,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        let mut waiting = self.snapshots.lock_waiting();
        if waiting.as_ref().is_some_and(|w| w.id == self.id) {
            *waiting = None;
            self.snapshots.requested.store(false, Ordering::SeqCst);
        }
    }
}

impl Snapshots {
    /// `enabled` is `--debugging-snapshot-enabled`; `scan_interval` bounds the wait (two loops'
    /// worth, and at least a minute); `scenario_file` is `--snapshot-scenario`.
    pub fn new(
        enabled: bool,
        scan_interval: Duration,
        flags: Vec<(String, String)>,
        scenario_file: Option<PathBuf>,
    ) -> Arc<Snapshots> {
        Arc::new(Snapshots {
            enabled,
            wait: (scan_interval * 2).max(Duration::from_secs(60)),
            flags,
            requested: AtomicBool::new(false),
            waiting: Mutex::new(None),
            next_id: AtomicU64::new(0),
            scenario_file: Mutex::new(scenario_file),
        })
    }

    fn lock_waiting(&self) -> MutexGuard<'_, Option<Waiting>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_file(&self) -> MutexGuard<'_, Option<PathBuf>> {
        self.scenario_file
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The `/snapshotz` handler for the HTTP server.
    pub fn route(self: &Arc<Self>) -> RouteHandler {
        let snapshots = Arc::clone(self);
        Arc::new(move |query| {
            let snapshots = Arc::clone(&snapshots);
            Box::pin(async move { snapshots.request(query.as_deref()).await })
        })
    }

    /// One HTTP request: waits for the next loop's snapshot.
    async fn request(&self, query: Option<&str>) -> RouteAnswer {
        if !self.enabled {
            return RouteAnswer::text(
                404,
                "the debugging snapshot is disabled: start Ferroscale with \
                 --debugging-snapshot-enabled=true\n",
            );
        }
        let format = match Format::from_query(query) {
            Ok(format) => format,
            Err(message) => return RouteAnswer::text(400, message + "\n"),
        };
        let (reply, answer) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        {
            let mut waiting = self.lock_waiting();
            if waiting.is_some() {
                return RouteAnswer::text(
                    429,
                    "another debugging snapshot request is waiting for its loop; concurrent \
                     requests are not supported\n",
                );
            }
            *waiting = Some(Waiting { id, format, reply });
            self.requested.store(true, Ordering::SeqCst);
        }
        tracing::info!("debugging snapshot requested: the next loop captures it");
        let _forget = Forget {
            snapshots: self,
            id,
        };
        match tokio::time::timeout(self.wait, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => RouteAnswer::text(503, "the loop stopped before answering\n"),
            Err(_) => RouteAnswer::text(
                504,
                format!(
                    "no loop ran within {}: only the leader runs loops (a standby replica \
                     never answers), and a loop may be waiting for its cloud provider\n",
                    format_duration(self.wait)
                ),
            ),
        }
    }

    /// Before an iteration: whether it should capture what it gathers (someone asked, or the
    /// replay file is still to be written). Costs one atomic read when nobody asked.
    pub fn wants_capture(&self) -> bool {
        // The request stays registered (and answerable) until its loop delivers.
        self.requested.swap(false, Ordering::SeqCst) || self.lock_file().is_some()
    }

    /// After an iteration that captured: answers the waiting request and writes the replay
    /// file. An iteration that stopped before gathering answers the request with its error
    /// (upstream answers such a loop with an error too); the file waits for the next loop.
    pub fn deliver(&self, outcome: &LoopOutcome, ended: Timestamp) {
        let schedulable: Vec<String> = outcome
            .scale_up
            .as_ref()
            .map(|plan| plan.pods_schedulable_on_existing.clone())
            .unwrap_or_default();
        if let Some(waiting) = self.lock_waiting().take() {
            let answer = match &outcome.capture {
                Some(capture) => self.render(capture, outcome, waiting.format, &schedulable, ended),
                None => not_gathered(outcome, waiting.format, ended),
            };
            // The requester may have gone; nothing to do then.
            let _ = waiting.reply.send(answer);
        }
        let Some(capture) = &outcome.capture else {
            return;
        };
        let mut file = self.lock_file();
        if let Some(path) = file.take() {
            match self.write_scenario(capture, outcome, &path) {
                Ok(()) => tracing::info!(
                    path = %path.display(),
                    decided = %loop_decisions(outcome),
                    "wrote this loop's snapshot as a scenario: replay it with `ferroscale simulate {}`",
                    path.display()
                ),
                Err(error) => {
                    tracing::error!(path = %path.display(), %error, "writing the snapshot scenario")
                }
            }
        }
    }

    fn render(
        &self,
        capture: &LoopCapture,
        outcome: &LoopOutcome,
        format: Format,
        schedulable: &[String],
        ended: Timestamp,
    ) -> RouteAnswer {
        let rendered = match format {
            Format::Json => serde_json::to_vec(&debugging_snapshot(capture, schedulable, ended))
                .map(|body| ("application/json", body))
                .map_err(|e| e.to_string()),
            Format::Scenario => {
                scenario_yaml(capture, &self.flags, DEFAULT_REPLAY_DURATION, Some(outcome))
                    .map(|text| ("application/yaml", text.into_bytes()))
                    .map_err(|e| e.to_string())
            }
        };
        match rendered {
            Ok((content_type, body)) => RouteAnswer {
                status: 200,
                content_type,
                body,
            },
            Err(error) => RouteAnswer::text(500, format!("writing the snapshot: {error}\n")),
        }
    }

    /// Writes the scenario next to `path` and renames it into place, so that a reader never
    /// sees half a file.
    fn write_scenario(
        &self,
        capture: &LoopCapture,
        outcome: &LoopOutcome,
        path: &std::path::Path,
    ) -> anyhow::Result<()> {
        use anyhow::Context;
        let text = scenario_yaml(capture, &self.flags, DEFAULT_REPLAY_DURATION, Some(outcome))?;
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        std::fs::write(&partial, text).with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, path)
            .with_context(|| format!("renaming {} to {}", partial.display(), path.display()))
    }
}

/// The answer for a loop that stopped before it gathered anything.
fn not_gathered(outcome: &LoopOutcome, format: Format, ended: Timestamp) -> RouteAnswer {
    let reason = outcome.error.as_ref().map_or_else(
        || "the loop ended before gathering the cluster".to_string(),
        |error| format!("the loop ended before gathering the cluster: {error}"),
    );
    match format {
        Format::Json => {
            let format_time = ferroscale_core::cluster_state::status::format_rfc3339;
            let body = serde_json::json!({
                "NodeList": null,
                "UnscheduledPodsCanBeScheduled": null,
                "Error": reason,
                "StartTimestamp": format_time(outcome.now),
                "EndTimestamp": format_time(ended),
                "TemplateNodes": null,
            });
            RouteAnswer {
                status: 500,
                content_type: "application/json",
                body: body.to_string().into_bytes(),
            }
        }
        Format::Scenario => RouteAnswer::text(500, reason + "\n"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferroscale_core::AutoscalingOptions;
    use ferroscale_core::autoscaler::{LoopCapture, LoopError};
    use ferroscale_core::cloud::CloudError;
    use ferroscale_core::kubernetes::ClusterObjects;
    use ferroscale_model::{Node, Resources};

    use super::*;

    fn outcome_with_capture() -> LoopOutcome {
        let capture = LoopCapture {
            now: Timestamp::from_secs(1_700_000_000),
            objects: ClusterObjects {
                nodes: vec![Arc::new(Node::new("n-1", Resources::new(1000, 1 << 30)))],
                ..ClusterObjects::default()
            },
            node_groups: Vec::new(),
            group_of_node: Default::default(),
            options: AutoscalingOptions::default(),
        };
        LoopOutcome {
            now: capture.now,
            capture: Some(Arc::new(capture)),
            ..LoopOutcome::default()
        }
    }

    fn text(answer: &RouteAnswer) -> String {
        String::from_utf8_lossy(&answer.body).into_owned()
    }

    #[tokio::test]
    async fn disabled_answers_404_and_never_asks_a_loop() {
        let snapshots = Snapshots::new(false, Duration::from_secs(10), Vec::new(), None);
        let answer = snapshots.request(None).await;
        assert_eq!(answer.status, 404);
        assert!(text(&answer).contains("--debugging-snapshot-enabled"));
        assert!(!snapshots.wants_capture());
    }

    #[tokio::test]
    async fn a_request_is_answered_by_the_next_loop_with_its_capture() {
        let snapshots = Snapshots::new(true, Duration::from_secs(10), Vec::new(), None);
        // Nobody asked: loops do not capture.
        assert!(!snapshots.wants_capture());
        let waiting = tokio::spawn({
            let snapshots = Arc::clone(&snapshots);
            async move { snapshots.request(None).await }
        });
        while !snapshots.requested.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        // A second request while the first waits is refused, as upstream does.
        assert_eq!(snapshots.request(None).await.status, 429);
        assert!(snapshots.wants_capture());
        // The loop after the captured one is not asked again.
        assert!(!snapshots.wants_capture());
        snapshots.deliver(&outcome_with_capture(), Timestamp::from_secs(1_700_000_001));
        let answer = waiting.await.unwrap();
        assert_eq!(
            (answer.status, answer.content_type),
            (200, "application/json")
        );
        let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        assert_eq!(body["NodeList"][0]["Node"]["metadata"]["name"], "n-1");
        assert_eq!(body["EndTimestamp"], "2023-11-14T22:13:21Z");
        // Answered: the next request is accepted again.
        let next = tokio::spawn({
            let snapshots = Arc::clone(&snapshots);
            async move { snapshots.request(Some("format=scenario")).await }
        });
        while !snapshots.requested.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        assert!(snapshots.wants_capture());
        snapshots.deliver(&outcome_with_capture(), Timestamp::from_secs(1_700_000_011));
        let answer = next.await.unwrap();
        assert_eq!(answer.status, 200);
        assert!(
            text(&answer).contains("kind: Scenario"),
            "{}",
            text(&answer)
        );
    }

    #[tokio::test]
    async fn a_loop_that_did_not_gather_answers_with_its_error() {
        let snapshots = Snapshots::new(true, Duration::from_secs(10), Vec::new(), None);
        let waiting = tokio::spawn({
            let snapshots = Arc::clone(&snapshots);
            async move { snapshots.request(None).await }
        });
        while !snapshots.requested.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        assert!(snapshots.wants_capture());
        let failed = LoopOutcome {
            error: Some(LoopError::Refresh(CloudError::Provider(
                "unreachable".into(),
            ))),
            ..LoopOutcome::default()
        };
        snapshots.deliver(&failed, Timestamp::from_secs(5));
        let answer = waiting.await.unwrap();
        assert_eq!(answer.status, 500);
        let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        assert!(
            body["Error"].as_str().unwrap().contains("unreachable"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn a_request_no_loop_answers_gives_up_and_frees_the_endpoint() {
        let mut snapshots = Snapshots::new(true, Duration::from_secs(10), Vec::new(), None);
        // At least a minute in a process; a moment here.
        assert_eq!(snapshots.wait, Duration::from_secs(60));
        Arc::get_mut(&mut snapshots).unwrap().wait = Duration::from_millis(20);
        let answer = snapshots.request(None).await;
        assert_eq!(answer.status, 504);
        assert!(
            text(&answer).contains("no loop ran within"),
            "{}",
            text(&answer)
        );
        // The abandoned request neither blocks the next one nor makes a loop capture.
        assert!(!snapshots.wants_capture());
        assert!(snapshots.lock_waiting().is_none());
    }

    #[tokio::test]
    async fn unknown_formats_are_refused_by_name() {
        let snapshots = Snapshots::new(true, Duration::from_secs(10), Vec::new(), None);
        let answer = snapshots.request(Some("format=xml")).await;
        assert_eq!(answer.status, 400);
        assert!(text(&answer).contains("\"xml\""));
    }

    #[test]
    fn the_scenario_file_is_written_by_the_first_loop_that_gathered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replay.yaml");
        let flags = vec![("expander".to_string(), "most-pods".to_string())];
        let snapshots = Snapshots::new(false, Duration::from_secs(10), flags, Some(path.clone()));
        assert!(snapshots.wants_capture());
        snapshots.deliver(&LoopOutcome::default(), Timestamp::from_secs(1));
        assert!(!path.exists());
        assert!(snapshots.wants_capture());
        snapshots.deliver(&outcome_with_capture(), Timestamp::from_secs(2));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("expander: most-pods"), "{text}");
        // Written once: later loops do not capture for it.
        assert!(!snapshots.wants_capture());
    }
}
