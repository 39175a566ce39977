//! Event deduplication before publishing (docs/behaviour.md OBS-100): upstream's event broadcaster
//! lets one event per (reason, involved object) through every five minutes, so a condition that
//! persists across many loops does not flood the API server. Status-ConfigMap events are keyed by
//! their message too, so distinct cluster-level messages always pass.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use ferroscale_model::Timestamp;

use crate::events::{Event, EventObject};

/// How often the same (reason, object) may be recorded.
pub const EVENT_REPEAT_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// How many keys are remembered; the oldest is forgotten beyond that, as upstream's LRU does.
pub const EVENT_KEY_CACHE_SIZE: usize = 8192;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct EventKey {
    reason: &'static str,
    object: EventObject,
    /// Only for the status ConfigMap.
    message: Option<String>,
}

/// Remembers when each kind of event was last let through.
#[derive(Debug, Clone, Default)]
pub struct EventRecorder {
    record_duplicates: bool,
    last_recorded: HashMap<EventKey, Timestamp>,
    /// Keys in first-insertion order, for forgetting the oldest.
    order: VecDeque<EventKey>,
}

impl EventRecorder {
    /// With `record_duplicates` (`--record-duplicated-events`) every event passes.
    pub fn new(record_duplicates: bool) -> EventRecorder {
        EventRecorder {
            record_duplicates,
            ..EventRecorder::default()
        }
    }

    /// The events of `events` that may be published at `now`, in their order.
    pub fn filter(&mut self, events: Vec<Event>, now: Timestamp) -> Vec<Event> {
        if self.record_duplicates {
            return events;
        }
        events
            .into_iter()
            .filter(|event| self.admit(event, now))
            .collect()
    }

    fn admit(&mut self, event: &Event, now: Timestamp) -> bool {
        let key = EventKey {
            reason: event.reason,
            object: event.object.clone(),
            message: (event.object == EventObject::StatusConfigMap).then(|| event.message.clone()),
        };
        match self.last_recorded.get_mut(&key) {
            Some(last) if now.since(*last) < EVENT_REPEAT_INTERVAL => false,
            Some(last) => {
                *last = now;
                true
            }
            None => {
                if self.order.len() >= EVENT_KEY_CACHE_SIZE
                    && let Some(oldest) = self.order.pop_front()
                {
                    self.last_recorded.remove(&oldest);
                }
                self.order.push_back(key.clone());
                self.last_recorded.insert(key, now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::reasons;

    fn pod_event(pod: &str, message: &str) -> Event {
        Event::normal(
            EventObject::Pod(pod.to_string()),
            reasons::NOT_TRIGGER_SCALE_UP,
            message,
        )
    }

    /// docs/behaviour.md OBS-100.
    #[test]
    fn s100_same_reason_on_same_pod_at_most_once_per_five_minutes() {
        let mut recorder = EventRecorder::new(false);
        let t0 = Timestamp::from_secs(1000);
        assert_eq!(recorder.filter(vec![pod_event("ns/a", "x")], t0).len(), 1);
        // A different message does not make a pod event new.
        assert!(
            recorder
                .filter(vec![pod_event("ns/a", "y")], t0 + Duration::from_secs(10))
                .is_empty()
        );
        // Another pod is another key.
        assert_eq!(
            recorder
                .filter(vec![pod_event("ns/b", "x")], t0 + Duration::from_secs(10))
                .len(),
            1
        );
        assert_eq!(
            recorder
                .filter(vec![pod_event("ns/a", "x")], t0 + EVENT_REPEAT_INTERVAL)
                .len(),
            1
        );
    }

    #[test]
    fn status_configmap_events_are_keyed_by_message() {
        let mut recorder = EventRecorder::new(false);
        let now = Timestamp::from_secs(0);
        let cm = |m: &str| Event::normal(EventObject::StatusConfigMap, reasons::SCALE_DOWN, m);
        let passed = recorder.filter(
            vec![cm("removing a"), cm("removing b"), cm("removing a")],
            now,
        );
        assert_eq!(
            passed
                .iter()
                .map(|e| e.message.as_str())
                .collect::<Vec<_>>(),
            vec!["removing a", "removing b"]
        );
    }

    #[test]
    fn record_duplicated_events_lets_everything_through() {
        let mut recorder = EventRecorder::new(true);
        let now = Timestamp::from_secs(0);
        let passed = recorder.filter(vec![pod_event("ns/a", "x"), pod_event("ns/a", "x")], now);
        assert_eq!(passed.len(), 2);
    }
}
