//! The worker threads Decide spreads independent simulations over (`--predicate-parallelism`).
//!
//! Plans are identical for every thread count: work is handed out in pieces that each depend only
//! on their own input and on a snapshot equal to the caller's (its own copy, or the caller's
//! snapshot itself, which every piece leaves as it found it), and the results come back in input
//! order. Which thread ran a piece, and when it finished, never reaches a result. One thread means
//! no pool at all: the same code runs in a plain loop on the caller's thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ferroscale_scheduling::Snapshot;

/// A pool of worker threads, built once per [`crate::autoscaler::Autoscaler`] and lent to each
/// plan. Cloning shares the pool.
#[derive(Debug, Clone, Default)]
pub struct Workers {
    /// `None`: one thread, the caller's.
    pool: Option<Arc<rayon::ThreadPool>>,
    /// Whether a snapshot is copied for the other workers only when the work is big enough to
    /// repay the copy (the loop's pool), or always (tests and benches of the parallel paths).
    copy_when_worth_it: bool,
}

/// How many copied objects (nodes and bound pods) one pod placement tried by an estimate repays.
/// A copy costs about 0.13 µs an object (20 ms at 5,000 nodes, 140 ms at 65,000 nodes and
/// 1,000,000 pods) and a placement about 0.7 µs (scale-up of 250,000 pending pods); a second
/// worker saves at most half the placements, about 0.35 µs each, so it pays above one placement
/// per three objects. Below that the caller alone finishes first.
const OBJECTS_PER_PLACEMENT_REPAID: usize = 3;

/// The pool's threads could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start {threads} worker threads: {source}")]
pub struct WorkersError {
    threads: usize,
    #[source]
    source: rayon::ThreadPoolBuildError,
}

impl Workers {
    /// Everything on the caller's thread.
    pub fn sequential() -> Workers {
        Workers {
            pool: None,
            copy_when_worth_it: false,
        }
    }

    /// A pool of exactly `threads` threads (none for 0 or 1).
    pub fn new(threads: usize) -> Result<Workers, WorkersError> {
        if threads <= 1 {
            return Ok(Workers::sequential());
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("ferroscale-decide-{i}"))
            .build()
            .map_err(|source| WorkersError { threads, source })?;
        Ok(Workers {
            pool: Some(Arc::new(pool)),
            copy_when_worth_it: false,
        })
    }

    /// `--predicate-parallelism` threads, but no more than the machine's cores (more would only
    /// take turns); sequential when the pool cannot be started, which changes no result.
    pub fn for_machine(parallelism: i64) -> Workers {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let wanted = usize::try_from(parallelism).unwrap_or(1).min(cores);
        let mut workers = Workers::new(wanted).unwrap_or_else(|_| Workers::sequential());
        workers.copy_when_worth_it = true;
        workers
    }

    /// Whether spreading `placements` pod placements over the workers repays copying `snapshot`
    /// for each of them. Only speed depends on it: the results are the same either way.
    fn spreading_pays(&self, snapshot: &Snapshot, placements: usize) -> bool {
        let objects = snapshot.node_count() + snapshot.pod_count();
        !self.copy_when_worth_it
            || placements.saturating_mul(OBJECTS_PER_PLACEMENT_REPAID) >= objects
    }

    /// How many threads work on a plan.
    pub fn threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.current_num_threads())
    }

    /// Runs `work` on every item, each with a snapshot of its worker's own, and returns the
    /// results in item order. `work` must leave the snapshot as it found it (what-if branches
    /// only): then every call sees a snapshot equal to `snapshot`, whichever worker runs it.
    /// `placements` is how many pod placements the items try in all: with the loop's pool, the
    /// other workers get a copy of the snapshot only when that is enough work to repay the copy
    /// (a copy of 65,000 nodes takes longer than a small plan), else the caller runs every item.
    pub(crate) fn map_on_snapshots<T, R>(
        &self,
        snapshot: &mut Snapshot,
        items: &[T],
        placements: usize,
        work: impl Fn(&mut Snapshot, &T) -> R + Sync,
    ) -> Vec<R>
    where
        T: Sync,
        R: Send,
    {
        let pool = match &self.pool {
            Some(pool) if items.len() > 1 && self.spreading_pays(snapshot, placements) => pool,
            _ => return items.iter().map(|item| work(snapshot, item)).collect(),
        };
        let workers = pool.current_num_threads().min(items.len());
        // One worker uses the caller's snapshot; the others get copies, made in parallel.
        let base: &Snapshot = snapshot;
        let mut copies: Vec<Snapshot> = pool.install(|| {
            use rayon::prelude::*;
            (1..workers).into_par_iter().map(|_| base.clone()).collect()
        });
        let mut outputs: Vec<Vec<(usize, R)>> = (0..workers).map(|_| Vec::new()).collect();
        let next = AtomicUsize::new(0);
        let (work, next) = (&work, &next);
        pool.scope(|scope| {
            let snapshots = std::iter::once(snapshot).chain(copies.iter_mut());
            for (own, output) in snapshots.zip(outputs.iter_mut()) {
                // Each worker takes the next item not yet taken until none is left, so a slow
                // item never holds up the others (the items' costs differ widely).
                scope.spawn(move |_| {
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(index) else { break };
                        output.push((index, work(own, item)));
                    }
                });
            }
        });
        let mut ordered: Vec<(usize, R)> = outputs.into_iter().flatten().collect();
        ordered.sort_unstable_by_key(|(index, _)| *index);
        ordered.into_iter().map(|(_, result)| result).collect()
    }

    /// Runs `work` on every item (no snapshot needed) and returns the results in item order.
    pub(crate) fn map<T, R>(&self, items: &[T], work: impl Fn(&T) -> R + Sync + Send) -> Vec<R>
    where
        T: Sync,
        R: Send,
    {
        match &self.pool {
            Some(pool) if items.len() > 1 => pool.install(|| {
                use rayon::prelude::*;
                items.par_iter().map(work).collect()
            }),
            _ => items.iter().map(work).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroscale_model::{Node, Resources};

    fn snapshot_of(nodes: usize) -> Snapshot {
        let mut snapshot = Snapshot::new();
        for i in 0..nodes {
            let allocatable = Resources::new(1000 * (i as i64 + 1), 1 << 30);
            snapshot.add_node(Arc::new(Node::new(format!("n{i}"), allocatable)));
        }
        snapshot
    }

    #[test]
    fn results_come_back_in_item_order_whatever_the_thread_count() {
        let items: Vec<usize> = (0..57).collect();
        let mut snapshot = snapshot_of(8);
        let expected: Vec<(usize, usize)> = items
            .iter()
            .map(|&i| (i, snapshot.node_count() + i))
            .collect();
        for threads in [1, 2, 4] {
            let workers = Workers::new(threads).unwrap();
            let got = workers.map_on_snapshots(&mut snapshot, &items, 0, |s, &i| {
                // A what-if change, reverted as the branch drops.
                let mut branch = s.branch();
                branch.add_node(Arc::new(Node::new(
                    format!("extra-{i}"),
                    Resources::default(),
                )));
                (i, branch.node_count() - 1 + i)
            });
            assert_eq!(got, expected, "{threads} threads");
            assert_eq!(workers.map(&items, |&i| i * 2)[56], 112);
        }
        assert_eq!(snapshot.node_count(), 8);
    }

    /// The loop's pool copies the snapshot only for enough work; the results are the caller's
    /// either way.
    #[test]
    fn the_loops_pool_copies_the_snapshot_only_when_the_work_repays_it() {
        let mut workers = Workers::new(2).unwrap();
        let snapshot = snapshot_of(100);
        assert!(workers.spreading_pays(&snapshot, 0));
        workers.copy_when_worth_it = true;
        assert!(!workers.spreading_pays(&snapshot, 33));
        assert!(workers.spreading_pays(&snapshot, 34));
        assert!(Workers::for_machine(2).copy_when_worth_it);
        let items: Vec<usize> = (0..9).collect();
        let mut snapshot = snapshot;
        let mut threads_seen = |placements| {
            let names: Vec<Option<String>> =
                workers.map_on_snapshots(&mut snapshot, &items, placements, |_, _| {
                    std::thread::current().name().map(str::to_string)
                });
            names
        };
        // Too little work: every item runs on the caller's thread.
        let caller = std::thread::current().name().map(str::to_string);
        assert!(threads_seen(1).iter().all(|name| *name == caller));
        // Enough work: the items run in the pool.
        assert!(threads_seen(1000).iter().all(|name| *name != caller));
    }

    #[test]
    fn one_thread_means_no_pool() {
        assert!(Workers::new(1).unwrap().pool.is_none());
        assert!(Workers::new(0).unwrap().pool.is_none());
        assert_eq!(Workers::new(3).unwrap().threads(), 3);
        assert!(Workers::for_machine(1).pool.is_none());
    }
}
