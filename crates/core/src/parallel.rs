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
}

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
        Workers { pool: None }
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
        })
    }

    /// `--predicate-parallelism` threads, but no more than the machine's cores (more would only
    /// take turns); sequential when the pool cannot be started, which changes no result.
    pub fn for_machine(parallelism: i64) -> Workers {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let wanted = usize::try_from(parallelism).unwrap_or(1).min(cores);
        Workers::new(wanted).unwrap_or_else(|_| Workers::sequential())
    }

    /// How many threads work on a plan.
    pub fn threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.current_num_threads())
    }

    /// Runs `work` on every item, each with a snapshot of its worker's own, and returns the
    /// results in item order. `work` must leave the snapshot as it found it (what-if branches
    /// only): then every call sees a snapshot equal to `snapshot`, whichever worker runs it.
    pub(crate) fn map_on_snapshots<T, R>(
        &self,
        snapshot: &mut Snapshot,
        items: &[T],
        work: impl Fn(&mut Snapshot, &T) -> R + Sync,
    ) -> Vec<R>
    where
        T: Sync,
        R: Send,
    {
        let pool = match &self.pool {
            Some(pool) if items.len() > 1 => pool,
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
            let got = workers.map_on_snapshots(&mut snapshot, &items, |s, &i| {
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

    #[test]
    fn one_thread_means_no_pool() {
        assert!(Workers::new(1).unwrap().pool.is_none());
        assert!(Workers::new(0).unwrap().pool.is_none());
        assert_eq!(Workers::new(3).unwrap().threads(), 3);
        assert!(Workers::for_machine(1).pool.is_none());
    }
}
