//! Event deduplication before publishing (docs/behaviour.md OBS-100): upstream's event broadcaster
//! lets one event per (reason, involved object) through every five minutes, so a condition that
//! persists across many loops does not flood the API server. Status-ConfigMap events are keyed by
//! their message too, so distinct cluster-level messages always pass.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash, Hasher};
use std::time::Duration;

use ferroscale_model::Timestamp;
use hashbrown::HashTable;

use crate::events::{Event, EventObject};

/// How often the same (reason, object) may be recorded.
pub const EVENT_REPEAT_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// How many keys are remembered; the oldest is forgotten beyond that, as upstream's LRU does.
pub const EVENT_KEY_CACHE_SIZE: usize = 8192;

#[derive(Debug, Clone, PartialEq, Eq)]
struct EventKey {
    reason: &'static str,
    object: EventObject,
    /// Only for the status ConfigMap.
    message: Option<String>,
}

/// The parts of an event its key is made of, borrowed: looking an event up costs no copy.
#[derive(Clone, Copy)]
struct KeyOf<'a> {
    reason: &'static str,
    object: &'a EventObject,
    message: Option<&'a str>,
}

impl<'a> KeyOf<'a> {
    fn of(event: &'a Event) -> KeyOf<'a> {
        KeyOf {
            reason: event.reason,
            object: &event.object,
            message: (event.object == EventObject::StatusConfigMap)
                .then_some(event.message.as_str()),
        }
    }

    fn is(&self, key: &EventKey) -> bool {
        self.reason == key.reason
            && *self.object == key.object
            && self.message == key.message.as_deref()
    }

    fn to_owned(self) -> EventKey {
        EventKey {
            reason: self.reason,
            object: self.object.clone(),
            message: self.message.map(str::to_owned),
        }
    }
}

/// A remembered key with its hash (so that forgetting it never reads the key again) and when it
/// was last let through.
#[derive(Debug, Clone)]
struct Remembered {
    key: EventKey,
    hash: u64,
    last: Timestamp,
}

/// Remembers when each kind of event was last let through.
///
/// A loop can bring one event per pending pod (hundreds of thousands), each a new key that pushes
/// the oldest one out, so admitting an event costs one hash of borrowed parts and one lookup; the
/// key is copied only when it is new, and forgetting the oldest key compares sequence numbers,
/// not keys.
#[derive(Debug, Clone, Default)]
pub struct EventRecorder {
    record_duplicates: bool,
    /// Remembered keys in first-insertion order (the front is forgotten first); the front's
    /// sequence number is `first_seq`, and the others follow without gaps.
    remembered: VecDeque<Remembered>,
    first_seq: u64,
    /// The sequence numbers of `remembered`, by the hash of their key.
    index: HashTable<u64>,
    hasher: foldhash::fast::RandomState,
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
    pub fn filter(&mut self, mut events: Vec<Event>, now: Timestamp) -> Vec<Event> {
        if !self.record_duplicates {
            events.retain(|event| self.admit(KeyOf::of(event), now));
        }
        events
    }

    fn hash(&self, key: KeyOf<'_>) -> u64 {
        let mut state = self.hasher.build_hasher();
        key.reason.hash(&mut state);
        key.object.hash(&mut state);
        key.message.hash(&mut state);
        state.finish()
    }

    fn admit(&mut self, key: KeyOf<'_>, now: Timestamp) -> bool {
        let hash = self.hash(key);
        let (remembered, first) = (&mut self.remembered, self.first_seq);
        let position = |seq: u64| usize::try_from(seq - first).unwrap_or(usize::MAX);
        if let Some(&seq) = self
            .index
            .find(hash, |&seq| key.is(&remembered[position(seq)].key))
        {
            let entry = &mut remembered[position(seq)];
            if now.since(entry.last) < EVENT_REPEAT_INTERVAL {
                return false;
            }
            entry.last = now;
            return true;
        }
        if self.remembered.len() >= EVENT_KEY_CACHE_SIZE
            && let Some(oldest) = self.remembered.pop_front()
        {
            let seq = self.first_seq;
            self.first_seq += 1;
            if let Ok(entry) = self.index.find_entry(oldest.hash, |&s| s == seq) {
                entry.remove();
            }
        }
        let seq = self.first_seq + self.remembered.len() as u64;
        self.remembered.push_back(Remembered {
            key: key.to_owned(),
            hash,
            last: now,
        });
        let (remembered, first) = (&self.remembered, self.first_seq);
        self.index.insert_unique(hash, seq, |&s| {
            remembered[usize::try_from(s - first).unwrap_or(usize::MAX)].hash
        });
        true
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

    /// The recorder as first written: a map of owned keys and a queue of owned copies.
    #[derive(Default)]
    struct PlainRecorder {
        last_recorded: std::collections::HashMap<EventKey, Timestamp>,
        order: VecDeque<EventKey>,
    }

    impl PlainRecorder {
        fn admit(&mut self, event: &Event, now: Timestamp) -> bool {
            let key = KeyOf::of(event).to_owned();
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

    impl std::hash::Hash for EventKey {
        fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
            (self.reason, &self.object, &self.message).hash(state);
        }
    }

    /// Forgetting by sequence number lets through exactly what the plain map and queue let
    /// through, over batches far larger than the cache (keys forgotten within a batch and seen
    /// again later in it), repeats within and across batches, and status-ConfigMap messages.
    #[test]
    fn admits_exactly_what_the_plain_map_and_queue_admit() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        let mut recorder = EventRecorder::new(false);
        let mut plain = PlainRecorder::default();
        let mut now = Timestamp::from_secs(1000);
        let mut admitted = 0;
        for batch in 0..12 {
            // Some batches cycle through more keys than the cache holds, others through few.
            let keys = if batch % 3 == 0 {
                3 * EVENT_KEY_CACHE_SIZE
            } else {
                2000
            };
            let events: Vec<Event> = (0..20_000)
                .map(|_| {
                    let k = rng.random_range(0..keys);
                    match rng.random_range(0..10) {
                        0 => Event::normal(
                            EventObject::StatusConfigMap,
                            reasons::SCALE_DOWN,
                            format!("removing n{}", k % 50),
                        ),
                        1 => Event::warning(
                            EventObject::Node(format!("n{k}")),
                            reasons::SCALE_DOWN_FAILED,
                            "x",
                        ),
                        2 => pod_event(&format!("ns/p{k}"), "other"),
                        _ => Event::normal(
                            EventObject::Pod(format!("ns/p{k}")),
                            reasons::TRIGGERED_SCALE_UP,
                            "pod triggered scale-up",
                        ),
                    }
                })
                .collect();
            let expected: Vec<Event> = events
                .iter()
                .filter(|e| plain.admit(e, now))
                .cloned()
                .collect();
            let got = recorder.filter(events, now);
            assert_eq!(got, expected, "batch {batch}");
            assert_eq!(recorder.remembered.len(), plain.order.len());
            assert_eq!(recorder.index.len(), plain.order.len());
            admitted += got.len();
            now = now + Duration::from_secs(rng.random_range(10..200));
        }
        // Neither everything nor nothing passed: both the repeat interval and forgetting acted.
        assert!(admitted > 0 && admitted < 12 * 20_000, "{admitted}");
    }

    #[test]
    fn record_duplicated_events_lets_everything_through() {
        let mut recorder = EventRecorder::new(true);
        let now = Timestamp::from_secs(0);
        let passed = recorder.filter(vec![pod_event("ns/a", "x"), pod_event("ns/a", "x")], now);
        assert_eq!(passed.len(), 2);
    }
}
