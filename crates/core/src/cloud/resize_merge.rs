//! Merging a group's resizes while one is in flight (docs/behaviour.md CP-103).
//!
//! A provider whose resize call is slow or rate-limited (a token bucket, an operation to poll, a
//! PATCH through a throttled client) would otherwise answer a burst of increases of one group with
//! as many calls, each waiting behind the one before it. [`ResizeMerger`] lets at most one resize
//! call per group run at a time; increases that arrive meanwhile wait together and go as ONE call
//! for the sum of their deltas, and every caller of that call receives its result (an error
//! reaches each of them).
//!
//! Providers set an absolute size computed from the current target. Because the calls of one
//! group never overlap, each call reads a target its predecessor has already written, so merged
//! deltas add up: none is lost, none is applied twice. Changes that are not plain additions
//! (`DecreaseTargetSize`, `DeleteNodes`) are never merged — they name instances or carry checks of
//! their own that a sum would hide — but they take their turn through [`ResizeMerger::exclusive`],
//! so an increase never computes its target while one of them is between its read and its write.
//!
//! The engine itself has no logging: the provider's call receives a [`MergedResize`] saying how
//! many increases it carries, and the provider logs it at the verbosity of its other calls.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::channel::oneshot;

use super::CloudError;

/// What one resize call carries: the sum of the merged deltas and how many increases it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergedResize {
    /// The total increase the call must apply on top of the group's current target.
    pub delta: usize,
    /// How many `increase_size` calls this one call answers (1 when nothing was merged).
    pub callers: usize,
}

impl MergedResize {
    /// Whether the call carries more than one caller's delta (worth a log line).
    pub fn is_merged(&self) -> bool {
        self.callers > 1
    }
}

/// Increases waiting for the group's in-flight call to finish; the first of them leads.
struct Batch<T> {
    /// Identifies the batch, so a leader that gives up removes only its own.
    id: u64,
    delta: usize,
    callers: usize,
    /// Where the followers wait for the leader's result.
    followers: Vec<oneshot::Sender<Result<T, CloudError>>>,
}

/// One group's turn-taking: the gate held by the running call, and the batch waiting for it.
struct Slot<T> {
    gate: futures::lock::Mutex<()>,
    waiting: Mutex<Option<Batch<T>>>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            gate: futures::lock::Mutex::new(()),
            waiting: Mutex::new(None),
        }
    }
}

impl<T> Slot<T> {
    fn waiting(&self) -> MutexGuard<'_, Option<Batch<T>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Per-group merging of increases and turn-taking of every resize, shared by all the node group
/// objects of a provider (groups may be rebuilt every loop; their in-flight calls must still
/// meet). `T` is what a call answers besides success, e.g. the size it set, so that every merged
/// caller can update its own copy of the group.
pub struct ResizeMerger<T = ()> {
    slots: Mutex<HashMap<String, Arc<Slot<T>>>>,
    next_batch: Mutex<u64>,
}

impl<T> Default for ResizeMerger<T> {
    fn default() -> Self {
        ResizeMerger {
            slots: Mutex::new(HashMap::new()),
            next_batch: Mutex::new(0),
        }
    }
}

impl<T> std::fmt::Debug for ResizeMerger<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResizeMerger")
            .field("groups_in_use", &self.groups_in_use())
            .finish()
    }
}

/// A group's slot, held while a caller uses it; the map forgets the slot when the last holder
/// lets go, so idle groups cost nothing.
struct SlotUse<'a, T> {
    merger: &'a ResizeMerger<T>,
    group: &'a str,
    slot: Option<Arc<Slot<T>>>,
}

impl<T> SlotUse<'_, T> {
    fn slot(&self) -> &Slot<T> {
        // Only `drop` takes the slot out.
        self.slot.as_deref().unwrap_or_else(|| unreachable!())
    }
}

impl<T> Drop for SlotUse<'_, T> {
    fn drop(&mut self) {
        drop(self.slot.take());
        let mut slots = self.merger.slots();
        // Every holder took its Arc under this lock, so a count of one (the map's) means no
        // caller is using or waiting on the group.
        if slots
            .get(self.group)
            .is_some_and(|slot| Arc::strong_count(slot) == 1)
        {
            slots.remove(self.group);
        }
    }
}

/// Removes a leader's batch if the leader is dropped before its call starts: its followers then
/// learn that their increase was not made, and later increases start a batch of their own.
struct Leadership<'a, T> {
    slot: &'a Slot<T>,
    batch: u64,
    armed: bool,
}

impl<T> Drop for Leadership<'_, T> {
    fn drop(&mut self) {
        if self.armed {
            let mut waiting = self.slot.waiting();
            if waiting.as_ref().is_some_and(|batch| batch.id == self.batch) {
                // Dropping the batch drops the followers' senders.
                waiting.take();
            }
        }
    }
}

enum Role<T> {
    Lead(u64),
    Follow(oneshot::Receiver<Result<T, CloudError>>),
}

impl<T> ResizeMerger<T> {
    fn slots(&self) -> MutexGuard<'_, HashMap<String, Arc<Slot<T>>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many groups have a call running or waiting (for tests and debugging).
    pub fn groups_in_use(&self) -> usize {
        self.slots().len()
    }
}

impl<T: Clone> ResizeMerger<T> {
    pub fn new() -> ResizeMerger<T> {
        ResizeMerger::default()
    }

    fn use_slot<'a>(&'a self, group: &'a str) -> SlotUse<'a, T> {
        let slot = Arc::clone(self.slots().entry(group.to_string()).or_default());
        SlotUse {
            merger: self,
            group,
            slot: Some(slot),
        }
    }

    fn next_batch_id(&self) -> u64 {
        let mut next = self
            .next_batch
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *next = next.wrapping_add(1);
        *next
    }

    /// Increases `group` by `delta` through `call`, merged with the other increases of the group
    /// that arrive while a resize of it is in flight. `call` receives the merged delta; it runs
    /// only for the first caller of a batch, and its result is every merged caller's result.
    ///
    /// If the caller whose `call` carries the batch is dropped (cancelled) before that call
    /// finishes, the other callers of the batch get an error: whether the cloud applied the
    /// increase is then unknown, and retrying it blindly could apply it twice.
    pub async fn increase<F, Fut>(
        &self,
        group: &str,
        delta: usize,
        call: F,
    ) -> Result<T, CloudError>
    where
        F: FnOnce(MergedResize) -> Fut,
        Fut: Future<Output = Result<T, CloudError>>,
    {
        let slot_use = self.use_slot(group);
        let slot = slot_use.slot();
        let role = {
            let mut waiting = slot.waiting();
            match waiting.as_mut() {
                Some(batch) => {
                    batch.delta = batch.delta.saturating_add(delta);
                    batch.callers += 1;
                    let (sender, receiver) = oneshot::channel();
                    batch.followers.push(sender);
                    Role::Follow(receiver)
                }
                None => {
                    let id = self.next_batch_id();
                    *waiting = Some(Batch {
                        id,
                        delta,
                        callers: 1,
                        followers: Vec::new(),
                    });
                    Role::Lead(id)
                }
            }
        };
        match role {
            Role::Follow(receiver) => receiver.await.unwrap_or_else(|_| {
                Err(CloudError::Provider(format!(
                    "node group {group}: the merged size increase was abandoned before it finished; whether it was applied is unknown"
                )))
            }),
            Role::Lead(id) => {
                let mut leadership = Leadership {
                    slot,
                    batch: id,
                    armed: true,
                };
                let _turn = slot.gate.lock().await;
                // From here on, later increases start the next batch.
                let batch = slot.waiting().take();
                leadership.armed = false;
                let Some(batch) = batch.filter(|batch| batch.id == id) else {
                    // Only this leader takes its batch, so it is still there; answer plainly
                    // rather than trust that.
                    return Err(CloudError::Provider(format!(
                        "node group {group}: the size increase lost its place in line"
                    )));
                };
                let result = call(MergedResize {
                    delta: batch.delta,
                    callers: batch.callers,
                })
                .await;
                for follower in batch.followers {
                    // A follower that was dropped does not need the answer.
                    let _ = follower.send(result.clone());
                }
                result
            }
        }
    }

    /// Runs `call` — a resize that must not be merged (a decrease, a deletion) — when no other
    /// resize of `group` is in flight, and keeps later ones waiting until it finishes.
    pub async fn exclusive<Fut, R>(&self, group: &str, call: Fut) -> R
    where
        Fut: Future<Output = R>,
    {
        let slot_use = self.use_slot(group);
        let _turn = slot_use.slot().gate.lock().await;
        call.await
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use futures::executor::LocalPool;
    use futures::task::LocalSpawnExt;

    use super::*;

    /// A fake group whose resize calls finish only when the test says so, recording each call
    /// and applying it like a provider does: read the target, wait, write target + delta.
    #[derive(Default)]
    struct Cloud {
        target: RefCell<usize>,
        calls: RefCell<Vec<MergedResize>>,
        finish: RefCell<Vec<oneshot::Sender<Result<(), CloudError>>>>,
    }

    impl Cloud {
        async fn resize(&self, resize: MergedResize) -> Result<(), CloudError> {
            let read = *self.target.borrow();
            self.calls.borrow_mut().push(resize);
            let (sender, receiver) = oneshot::channel();
            self.finish.borrow_mut().push(sender);
            let result = receiver
                .await
                .unwrap_or_else(|_| Err(CloudError::Provider("test dropped".into())));
            if result.is_ok() {
                *self.target.borrow_mut() = read + resize.delta;
            }
            result
        }

        /// Lets the oldest unfinished call end with `result`.
        fn complete(&self, result: Result<(), CloudError>) {
            let sender = self.finish.borrow_mut().remove(0);
            sender.send(result).unwrap();
        }

        fn deltas(&self) -> Vec<(usize, usize)> {
            self.calls
                .borrow()
                .iter()
                .map(|call| (call.delta, call.callers))
                .collect()
        }
    }

    type Results = Rc<RefCell<Vec<(usize, Result<(), CloudError>)>>>;

    fn spawn_increase(
        pool: &LocalPool,
        merger: &Rc<ResizeMerger>,
        cloud: &Rc<Cloud>,
        results: &Results,
        group: &'static str,
        delta: usize,
    ) {
        let (merger, cloud, results) = (Rc::clone(merger), Rc::clone(cloud), Rc::clone(results));
        pool.spawner()
            .spawn_local(async move {
                let result = merger
                    .increase(group, delta, |resize| cloud.resize(resize))
                    .await;
                results.borrow_mut().push((delta, result));
            })
            .unwrap();
    }

    fn setup() -> (LocalPool, Rc<ResizeMerger>, Rc<Cloud>, Results) {
        (
            LocalPool::new(),
            Rc::new(ResizeMerger::new()),
            Rc::new(Cloud::default()),
            Rc::default(),
        )
    }

    /// docs/behaviour.md CP-103: while +3 is in flight, +2 and +4 wait and go as one call of +6;
    /// the final target is the sum of all deltas.
    #[test]
    fn increases_arriving_during_a_call_go_as_one_call_for_their_sum() {
        let (mut pool, merger, cloud, results) = setup();
        spawn_increase(&pool, &merger, &cloud, &results, "g", 3);
        pool.run_until_stalled();
        assert_eq!(cloud.deltas(), vec![(3, 1)]);
        spawn_increase(&pool, &merger, &cloud, &results, "g", 2);
        spawn_increase(&pool, &merger, &cloud, &results, "g", 4);
        pool.run_until_stalled();
        // Nothing is queued as a call of its own while +3 runs.
        assert_eq!(cloud.deltas(), vec![(3, 1)]);
        cloud.complete(Ok(()));
        pool.run_until_stalled();
        assert_eq!(cloud.deltas(), vec![(3, 1), (6, 2)]);
        assert_eq!(results.borrow().len(), 1, "the merged callers still wait");
        cloud.complete(Ok(()));
        pool.run_until_stalled();
        assert_eq!(*cloud.target.borrow(), 9);
        let mut answered: Vec<_> = results
            .borrow()
            .iter()
            .map(|(d, r)| (*d, r.clone()))
            .collect();
        answered.sort_by_key(|(delta, _)| *delta);
        assert_eq!(answered, vec![(2, Ok(())), (3, Ok(())), (4, Ok(()))]);
        assert_eq!(merger.groups_in_use(), 0, "an idle group is forgotten");
    }

    /// docs/behaviour.md CP-103: an error of the merged call reaches every caller it carried, and
    /// only those.
    #[test]
    fn an_error_reaches_every_merged_caller() {
        let (mut pool, merger, cloud, results) = setup();
        spawn_increase(&pool, &merger, &cloud, &results, "g", 1);
        pool.run_until_stalled();
        spawn_increase(&pool, &merger, &cloud, &results, "g", 2);
        spawn_increase(&pool, &merger, &cloud, &results, "g", 5);
        pool.run_until_stalled();
        cloud.complete(Ok(()));
        pool.run_until_stalled();
        let refused = CloudError::InvalidRequest("over max".into());
        cloud.complete(Err(refused.clone()));
        pool.run_until_stalled();
        let results = results.borrow();
        assert_eq!(results.len(), 3);
        for (delta, result) in results.iter() {
            let expected = if *delta == 1 {
                Ok(())
            } else {
                Err(refused.clone())
            };
            assert_eq!(result, &expected, "caller of +{delta}");
        }
        assert_eq!(*cloud.target.borrow(), 1);
    }

    /// Many increases in several waves: the target always ends at the sum, with one call per wave
    /// after the first.
    #[test]
    fn deltas_are_never_lost_or_applied_twice() {
        let (mut pool, merger, cloud, results) = setup();
        let mut expected = 0;
        let mut waves = 0;
        for wave in 0..5usize {
            for delta in 1..=(wave + 1) {
                spawn_increase(&pool, &merger, &cloud, &results, "g", delta);
                expected += delta;
            }
            pool.run_until_stalled();
            waves += 1;
            if wave > 0 {
                cloud.complete(Ok(()));
                pool.run_until_stalled();
            }
        }
        while !cloud.finish.borrow().is_empty() {
            cloud.complete(Ok(()));
            pool.run_until_stalled();
        }
        assert_eq!(*cloud.target.borrow(), expected);
        assert_eq!(results.borrow().len(), 15);
        assert!(results.borrow().iter().all(|(_, r)| r.is_ok()));
        let calls = cloud.deltas();
        assert_eq!(calls.iter().map(|(d, _)| d).sum::<usize>(), expected);
        assert_eq!(calls.iter().map(|(_, c)| c).sum::<usize>(), 15);
        assert!(calls.len() <= waves + 1, "calls: {calls:?}");
    }

    /// Different groups never wait for each other nor merge.
    #[test]
    fn groups_are_independent() {
        let (mut pool, merger, cloud, results) = setup();
        spawn_increase(&pool, &merger, &cloud, &results, "a", 1);
        spawn_increase(&pool, &merger, &cloud, &results, "b", 2);
        pool.run_until_stalled();
        assert_eq!(cloud.deltas(), vec![(1, 1), (2, 1)]);
        assert_eq!(merger.groups_in_use(), 2);
    }

    /// A decrease is never merged: it waits for the in-flight increase and sees its result, and
    /// increases arriving while it runs wait for it and then go together.
    #[test]
    fn exclusive_calls_take_turns_without_merging() {
        let (mut pool, merger, cloud, results) = setup();
        *cloud.target.borrow_mut() = 10;
        spawn_increase(&pool, &merger, &cloud, &results, "g", 3);
        pool.run_until_stalled();
        let decreased = Rc::new(RefCell::new(None));
        let (go, gone) = oneshot::channel::<()>();
        {
            let (merger, cloud, decreased) =
                (Rc::clone(&merger), Rc::clone(&cloud), Rc::clone(&decreased));
            pool.spawner()
                .spawn_local(async move {
                    let seen = merger
                        .exclusive("g", async {
                            let read = *cloud.target.borrow();
                            let _ = gone.await;
                            *cloud.target.borrow_mut() = read - 1;
                            read - 1
                        })
                        .await;
                    *decreased.borrow_mut() = Some(seen);
                })
                .unwrap();
        }
        pool.run_until_stalled();
        cloud.complete(Ok(()));
        pool.run_until_stalled();
        spawn_increase(&pool, &merger, &cloud, &results, "g", 1);
        spawn_increase(&pool, &merger, &cloud, &results, "g", 1);
        pool.run_until_stalled();
        assert_eq!(
            cloud.deltas(),
            vec![(3, 1)],
            "the increases wait for the decrease"
        );
        go.send(()).unwrap();
        pool.run_until_stalled();
        assert_eq!(
            *decreased.borrow(),
            Some(12),
            "the decrease read 13, after the +3"
        );
        assert_eq!(cloud.deltas(), vec![(3, 1), (2, 2)]);
        cloud.complete(Ok(()));
        pool.run_until_stalled();
        assert_eq!(*cloud.target.borrow(), 14);
        assert_eq!(results.borrow().len(), 3);
    }

    /// A caller dropped while its batch waits takes the batch with it: its followers get an error
    /// rather than waiting for ever, and the next increase starts afresh.
    #[test]
    fn a_cancelled_leader_fails_its_followers_and_frees_the_group() {
        let (mut pool, merger, cloud, results) = setup();
        spawn_increase(&pool, &merger, &cloud, &results, "g", 3);
        pool.run_until_stalled();
        let (cancel, cancelled) = oneshot::channel::<()>();
        {
            let (merger, cloud) = (Rc::clone(&merger), Rc::clone(&cloud));
            pool.spawner()
                .spawn_local(async move {
                    let increase = merger.increase("g", 5, |resize| cloud.resize(resize));
                    futures::pin_mut!(increase);
                    let _ = futures::future::select(increase, cancelled).await;
                })
                .unwrap();
        }
        pool.run_until_stalled();
        spawn_increase(&pool, &merger, &cloud, &results, "g", 7);
        pool.run_until_stalled();
        cancel.send(()).unwrap();
        pool.run_until_stalled();
        let failed: Vec<_> = results
            .borrow()
            .iter()
            .map(|(d, r)| (*d, r.is_err()))
            .collect();
        assert_eq!(failed, vec![(7, true)]);
        cloud.complete(Ok(()));
        pool.run_until_stalled();
        spawn_increase(&pool, &merger, &cloud, &results, "g", 2);
        pool.run_until_stalled();
        cloud.complete(Ok(()));
        pool.run_until_stalled();
        assert_eq!(cloud.deltas(), vec![(3, 1), (2, 1)]);
        assert_eq!(*cloud.target.borrow(), 5);
        assert_eq!(merger.groups_in_use(), 0);
    }
}
