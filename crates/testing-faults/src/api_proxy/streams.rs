//! Response bodies in flight, above all watches: each is relayed by a pump task that the test can
//! cut (the client sees the body break off, as when the connection to the API server breaks) or
//! stall (the connection stays open and silent while the pump keeps reading the API server, so
//! nothing is lost and resuming delivers the backlog).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::classify::RequestClass;
use super::log::Outcome;
use super::rules::{Matcher, RequestInfo};
use super::{Shared, lock};

/// Names a `stall_watches` call, to resume it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StallId(pub(super) u64);

/// Frames read from the API server but not yet passed on before the pump stops reading (unless
/// stalled, when it reads on so the API server never sees a slow consumer and closes the watch).
const BACKLOG_LIMIT: usize = 64;

/// The error a client's body read reports when the proxy cut the stream.
#[derive(Debug, thiserror::Error)]
#[error("the API proxy cut this response stream")]
pub struct StreamCut;

pub(super) type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// What the pump of one stream is told to do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct StreamControl {
    stalled: bool,
    cut: bool,
}

#[derive(Debug)]
struct ActiveStream {
    request: RequestInfo,
    control: watch::Sender<StreamControl>,
}

/// Every response body being relayed, and the stalls in force.
#[derive(Debug, Default)]
pub(super) struct Streams {
    next_stream: u64,
    active: HashMap<u64, ActiveStream>,
    next_stall: u64,
    stalls: BTreeMap<StallId, Matcher>,
    /// A silent partition stalls every stream, watch or not.
    partitioned: bool,
}

impl Streams {
    fn stalled(&self, request: &RequestInfo) -> bool {
        self.partitioned
            || (request.class == RequestClass::Watch
                && self
                    .stalls
                    .values()
                    .any(|matcher| matcher.matches(request, None)))
    }

    fn register(&mut self, request: RequestInfo) -> (u64, watch::Receiver<StreamControl>) {
        self.next_stream += 1;
        let control = StreamControl {
            stalled: self.stalled(&request),
            cut: false,
        };
        let (sender, receiver) = watch::channel(control);
        self.active.insert(
            self.next_stream,
            ActiveStream {
                request,
                control: sender,
            },
        );
        (self.next_stream, receiver)
    }

    fn unregister(&mut self, id: u64) {
        self.active.remove(&id);
    }

    fn apply_stalls(&self) {
        for stream in self.active.values() {
            let stalled = self.stalled(&stream.request);
            stream.control.send_if_modified(|control| {
                let changed = control.stalled != stalled;
                control.stalled = stalled;
                changed
            });
        }
    }

    /// Cuts the active streams `selected` picks, returning how many.
    fn cut(&mut self, selected: impl Fn(&RequestInfo) -> bool) -> usize {
        let ids: Vec<u64> = self
            .active
            .iter()
            .filter(|(_, stream)| selected(&stream.request))
            .map(|(id, _)| *id)
            .collect();
        for id in &ids {
            if let Some(stream) = self.active.remove(id) {
                stream.control.send_modify(|control| control.cut = true);
            }
        }
        ids.len()
    }

    pub(super) fn drop_watches(&mut self, matcher: &Matcher) -> usize {
        self.cut(|request| request.class == RequestClass::Watch && matcher.matches(request, None))
    }

    pub(super) fn cut_all(&mut self) -> usize {
        self.cut(|_| true)
    }

    pub(super) fn stall_watches(&mut self, matcher: Matcher) -> StallId {
        self.next_stall += 1;
        let id = StallId(self.next_stall);
        self.stalls.insert(id, matcher);
        self.apply_stalls();
        id
    }

    pub(super) fn resume(&mut self, id: StallId) -> bool {
        let removed = self.stalls.remove(&id).is_some();
        self.apply_stalls();
        removed
    }

    pub(super) fn set_partitioned(&mut self, partitioned: bool) {
        self.partitioned = partitioned;
        self.apply_stalls();
    }

    pub(super) fn watches(&self, matcher: &Matcher) -> Vec<RequestInfo> {
        self.active
            .values()
            .filter(|stream| {
                stream.request.class == RequestClass::Watch
                    && matcher.matches(&stream.request, None)
            })
            .map(|stream| stream.request.clone())
            .collect()
    }
}

/// The body of a relayed response: what the pump passes on.
pub(super) struct RelayedBody {
    frames: mpsc::Receiver<Result<Frame<Bytes>, BodyError>>,
}

impl Body for RelayedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.frames.poll_recv(cx)
    }
}

/// Starts relaying `upstream` (the body of the response to the request logged as `log_seq`,
/// which had `status`), registered so the test can cut or stall it. `cut_after`: cut it then.
pub(super) fn relay(
    shared: &Arc<Shared>,
    request: RequestInfo,
    log_seq: u64,
    status: u16,
    upstream: Incoming,
    cut_after: Option<Duration>,
) -> RelayedBody {
    let (id, control) = lock(&shared.streams).register(request);
    shared.note_activity();
    let (frames, receiver) = mpsc::channel(8);
    let pump = Pump {
        upstream,
        frames,
        control,
        deadline: cut_after.map(|after| Instant::now() + after),
    };
    let pump_shared = Arc::clone(shared);
    shared.spawn(async move {
        let end = pump.run().await;
        lock(&pump_shared.streams).unregister(id);
        let outcome = match end {
            PumpEnd::Finished | PumpEnd::ClientGone => None,
            PumpEnd::Cut => Some(Outcome::Cut { status }),
            PumpEnd::UpstreamFailed(error) => Some(Outcome::UpstreamFailed { error }),
        };
        if let Some(outcome) = outcome {
            lock(&pump_shared.log).update(log_seq, |entry| entry.outcome = outcome);
        }
    });
    RelayedBody { frames: receiver }
}

enum PumpEnd {
    Finished,
    ClientGone,
    Cut,
    UpstreamFailed(String),
}

struct Pump {
    upstream: Incoming,
    frames: mpsc::Sender<Result<Frame<Bytes>, BodyError>>,
    control: watch::Receiver<StreamControl>,
    deadline: Option<Instant>,
}

impl Pump {
    async fn run(mut self) -> PumpEnd {
        let mut backlog: VecDeque<Frame<Bytes>> = VecDeque::new();
        let mut upstream_done = false;
        loop {
            let control = *self.control.borrow_and_update();
            let past_deadline = self
                .deadline
                .is_some_and(|deadline| Instant::now() >= deadline);
            if control.cut || past_deadline {
                // An error frame makes hyper abort the response: the client sees the chunked body
                // break off without its last chunk.
                let _ = self.frames.send(Err(Box::new(StreamCut))).await;
                return PumpEnd::Cut;
            }
            if upstream_done && backlog.is_empty() {
                return PumpEnd::Finished;
            }
            let may_send = !control.stalled && !backlog.is_empty();
            let may_read = !upstream_done && (control.stalled || backlog.len() < BACKLOG_LIMIT);
            let deadline = self.deadline;
            tokio::select! {
                changed = self.control.changed() => {
                    // The registry dropped the sender: the proxy is shutting down.
                    if changed.is_err() {
                        return PumpEnd::ClientGone;
                    }
                }
                frame = self.upstream.frame(), if may_read => match frame {
                    Some(Ok(frame)) => backlog.push_back(frame),
                    Some(Err(error)) => {
                        let _ = self.frames.send(Err(Box::new(StreamCut))).await;
                        return PumpEnd::UpstreamFailed(error.to_string());
                    }
                    None => upstream_done = true,
                },
                permit = self.frames.reserve(), if may_send => match permit {
                    Ok(permit) => {
                        if let Some(frame) = backlog.pop_front() {
                            permit.send(Ok(frame));
                        }
                    }
                    Err(_) => return PumpEnd::ClientGone,
                },
                () = self.frames.closed() => return PumpEnd::ClientGone,
                () = sleep_until(deadline) => {}
            }
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
