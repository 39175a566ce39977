//! Warnings that repeat, said once and then summed up.
//!
//! An API server that does not answer makes every watcher and the lease renewal fail again and
//! again with the same error, a few times a second across all of them. Logging each failure buries
//! everything else (thousands of identical lines in a few minutes) without telling the reader
//! more than the first line did. [`RepeatedWarnings`] lets the first occurrence of a message
//! through, counts the identical ones that follow, and lets one through again once per window
//! with the count of those it held back ("N more in the last 30 s").

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long identical warnings are held back after one was logged.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(30);

/// Distinct messages remembered at most; the oldest are forgotten first, so messages that differ
/// every time (a resourceVersion in the text) cannot grow the table without bound.
const MAX_MESSAGES: usize = 64;

/// What to do with one occurrence of a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Log it: the first of its kind, or the first after a quiet window.
    Log,
    /// Log it, followed by how many identical ones were held back since the last one logged
    /// and from where.
    LogWithSummary(Suppressed),
    /// Held back: an identical warning was logged less than a window ago.
    Suppress,
}

/// The identical warnings held back during one window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppressed {
    pub count: u64,
    /// The sources (watch kinds, the lease) they came from.
    pub sources: BTreeSet<String>,
    /// How long ago the previous one was logged.
    pub over: Duration,
}

impl std::fmt::Display for Suppressed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sources: Vec<&str> = self.sources.iter().map(String::as_str).collect();
        write!(
            f,
            "{} more like it in the last {} s (from {})",
            self.count,
            self.over.as_secs(),
            sources.join(", ")
        )
    }
}

#[derive(Debug)]
struct Entry {
    logged_at: Instant,
    held_back: u64,
    sources: BTreeSet<String>,
}

/// Remembers recent warnings by their text. Shared between tasks.
#[derive(Debug)]
pub struct RepeatedWarnings {
    window: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Default for RepeatedWarnings {
    fn default() -> Self {
        RepeatedWarnings::new(REPEAT_WINDOW)
    }
}

impl RepeatedWarnings {
    pub fn new(window: Duration) -> RepeatedWarnings {
        RepeatedWarnings {
            window,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Notes one occurrence of `message` from `source` at `now` and says whether to log it.
    pub fn note(&self, message: &str, source: &str, now: Instant) -> Verdict {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = entries.get_mut(message) {
            let since = now.saturating_duration_since(entry.logged_at);
            if since < self.window {
                entry.held_back += 1;
                entry.sources.insert(source.to_string());
                return Verdict::Suppress;
            }
            let held_back = std::mem::take(&mut entry.held_back);
            let sources = std::mem::take(&mut entry.sources);
            entry.logged_at = now;
            return if held_back == 0 {
                Verdict::Log
            } else {
                Verdict::LogWithSummary(Suppressed {
                    count: held_back,
                    sources,
                    over: since,
                })
            };
        }
        if entries.len() >= MAX_MESSAGES
            && let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, entry)| entry.logged_at)
                .map(|(message, _)| message.clone())
        {
            entries.remove(&oldest);
        }
        entries.insert(
            message.to_string(),
            Entry {
                logged_at: now,
                held_back: 0,
                sources: BTreeSet::new(),
            },
        );
        Verdict::Log
    }
}

/// An error with its causes, `outer: inner: innermost`: kube's errors say "client error
/// (Connect)" at the top and only the causes say what failed to connect and why.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // Some errors repeat their cause in their own message.
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, seconds: u64) -> Instant {
        start + Duration::from_secs(seconds)
    }

    #[test]
    fn the_first_warning_is_logged_and_identical_ones_are_summed_up_once_per_window() {
        let warnings = RepeatedWarnings::new(Duration::from_secs(30));
        let start = Instant::now();
        assert_eq!(warnings.note("refused", "Node", start), Verdict::Log);
        for second in 1..30 {
            assert_eq!(
                warnings.note("refused", "Pod", at(start, second)),
                Verdict::Suppress
            );
        }
        let Verdict::LogWithSummary(summary) = warnings.note("refused", "Node", at(start, 31))
        else {
            panic!("the first warning after the window carries the count");
        };
        assert_eq!(summary.count, 29);
        assert_eq!(summary.sources, BTreeSet::from(["Pod".to_string()]));
        assert_eq!(
            summary.to_string(),
            "29 more like it in the last 31 s (from Pod)"
        );
        // Another message is news at once.
        assert_eq!(
            warnings.note("forbidden", "Pod", at(start, 32)),
            Verdict::Log
        );
        // A window without repeats logs plainly.
        assert_eq!(
            warnings.note("forbidden", "Pod", at(start, 70)),
            Verdict::Log
        );
    }

    #[test]
    fn messages_that_never_repeat_do_not_grow_the_table_without_bound() {
        let warnings = RepeatedWarnings::new(Duration::from_secs(30));
        let start = Instant::now();
        for n in 0..1_000 {
            assert_eq!(
                warnings.note(&format!("resourceVersion {n} too old"), "Pod", start),
                Verdict::Log
            );
        }
        let entries = warnings.entries.lock().map(|e| e.len()).unwrap_or(0);
        assert!(entries <= MAX_MESSAGES, "{entries}");
    }

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error (Connect)")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn the_chain_names_the_cause() {
        let error = Outer(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused",
        ));
        assert_eq!(
            error_chain(&error),
            "client error (Connect): Connection refused"
        );
    }
}
