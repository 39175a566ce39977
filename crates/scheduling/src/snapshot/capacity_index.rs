//! The capacity index: which slots can still take a pod of a given size, without visiting the
//! slots that certainly cannot.
//!
//! A segment tree over the slots' [`FitSummary`]: each leaf holds a slot's free cpu, memory,
//! ephemeral storage and pod slots (every amount `i64::MIN` for a closed or dead slot), each inner
//! node the component-wise maximum of its children. A subtree whose maxima cannot satisfy a pod's
//! request holds no slot that can, so a search skips it whole. The maxima are a necessary
//! condition only (one slot may have the cpu and another the memory), so the search may still
//! visit a slot whose summary rejects the pod; it then goes on. At a leaf the test is exactly
//! [`FitSummary::may_fit`].
//!
//! The snapshot updates a leaf wherever it updates the slot's summary (the four internal
//! functions that mutations and the undo log share), so the index follows branches and reverts at
//! O(log n) per change; the walk up stops at the first ancestor whose maximum does not change.

use super::FitSummary;

/// Free amounts of one slot, or the component-wise maxima over a range of slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Room {
    cpu_milli: i64,
    memory: i64,
    ephemeral_storage: i64,
    pods: i64,
}

impl Room {
    /// A slot no pod can go to (and the neutral element of `max`).
    const NONE: Room = Room {
        cpu_milli: i64::MIN,
        memory: i64::MIN,
        ephemeral_storage: i64::MIN,
        pods: i64::MIN,
    };

    fn of(summary: &FitSummary) -> Room {
        if !summary.open {
            return Room::NONE;
        }
        Room {
            cpu_milli: summary.cpu_milli,
            memory: summary.memory,
            ephemeral_storage: summary.ephemeral_storage,
            pods: summary.pods,
        }
    }

    fn max(self, other: Room) -> Room {
        Room {
            cpu_milli: self.cpu_milli.max(other.cpu_milli),
            memory: self.memory.max(other.memory),
            ephemeral_storage: self.ephemeral_storage.max(other.ephemeral_storage),
            pods: self.pods.max(other.pods),
        }
    }

    /// `FitSummary::may_fit` on these amounts: exact for a slot, necessary for a range.
    fn may_take(&self, wants: &FitSummary) -> bool {
        wants.pods <= self.pods
            && (wants.cpu_milli <= 0 || wants.cpu_milli <= self.cpu_milli)
            && (wants.memory <= 0 || wants.memory <= self.memory)
            && (wants.ephemeral_storage <= 0 || wants.ephemeral_storage <= self.ephemeral_storage)
    }
}

/// The segment tree; see the module documentation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CapacityIndex {
    /// Leaves covered, a power of two (or zero before the first slot).
    capacity: usize,
    /// Heap layout: the root at 1, the children of `i` at `2i` and `2i + 1`, slot `s` at
    /// `capacity + s`. Index 0 is unused.
    tree: Vec<Room>,
}

impl CapacityIndex {
    /// An index over `summaries`, with room for at least `min_capacity` slots.
    pub(crate) fn build(summaries: &[FitSummary], min_capacity: usize) -> CapacityIndex {
        let capacity = summaries.len().max(min_capacity).max(1).next_power_of_two();
        let mut tree = vec![Room::NONE; 2 * capacity];
        for (slot, summary) in summaries.iter().enumerate() {
            tree[capacity + slot] = Room::of(summary);
        }
        for i in (1..capacity).rev() {
            tree[i] = tree[2 * i].max(tree[2 * i + 1]);
        }
        CapacityIndex { capacity, tree }
    }

    /// Records that `slot`'s summary is now `summary`. `summaries` is the snapshot's list after
    /// the change, read only when the index has to grow (amortised O(1) per slot).
    pub(crate) fn update(&mut self, slot: usize, summary: &FitSummary, summaries: &[FitSummary]) {
        if slot >= self.capacity {
            *self = CapacityIndex::build(summaries, slot + 1);
            return;
        }
        let room = Room::of(summary);
        let mut i = self.capacity + slot;
        if self.tree[i] == room {
            return;
        }
        self.tree[i] = room;
        while i > 1 {
            i /= 2;
            let max = self.tree[2 * i].max(self.tree[2 * i + 1]);
            if self.tree[i] == max {
                // Every ancestor above is unchanged too.
                break;
            }
            self.tree[i] = max;
        }
    }

    /// The first slot in `from..to` whose summary may fit `wants` (`FitSummary::may_fit`),
    /// skipping every subtree whose maxima rule it out.
    pub(crate) fn first_may_fit(
        &self,
        wants: &FitSummary,
        from: usize,
        to: usize,
    ) -> Option<usize> {
        let to = to.min(self.capacity);
        if from >= to {
            return None;
        }
        self.descend(1, 0, self.capacity, from, to, wants)
    }

    fn descend(
        &self,
        node: usize,
        node_from: usize,
        node_to: usize,
        from: usize,
        to: usize,
        wants: &FitSummary,
    ) -> Option<usize> {
        if node_to <= from || to <= node_from || !self.tree[node].may_take(wants) {
            return None;
        }
        if node_to - node_from == 1 {
            return Some(node_from);
        }
        let mid = node_from + (node_to - node_from) / 2;
        self.descend(2 * node, node_from, mid, from, to, wants)
            .or_else(|| self.descend(2 * node + 1, mid, node_to, from, to, wants))
    }

    /// Panics unless the index is what [`CapacityIndex::build`] makes of `summaries` at the same
    /// capacity. For tests.
    #[cfg(test)]
    pub(crate) fn assert_matches(&self, summaries: &[FitSummary]) {
        assert!(
            self.capacity >= summaries.len(),
            "capacity {} below {} slots",
            self.capacity,
            summaries.len()
        );
        if self.capacity == 0 {
            return;
        }
        let rebuilt = CapacityIndex::build(summaries, self.capacity);
        assert_eq!(rebuilt.capacity, self.capacity);
        for (i, (kept, fresh)) in self.tree.iter().zip(&rebuilt.tree).enumerate().skip(1) {
            assert_eq!(kept, fresh, "capacity index entry {i}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(cpu_milli: i64, memory: i64, pods: i64) -> FitSummary {
        FitSummary {
            cpu_milli,
            memory,
            ephemeral_storage: 0,
            pods,
            open: true,
            tainted: false,
            ports_in_use: false,
        }
    }

    fn wants(cpu_milli: i64, memory: i64) -> FitSummary {
        FitSummary {
            cpu_milli,
            memory,
            ephemeral_storage: 0,
            pods: 1,
            open: true,
            tainted: false,
            ports_in_use: false,
        }
    }

    #[test]
    fn finds_the_first_slot_whose_summary_may_fit_in_the_range() {
        let mut summaries = vec![
            open(100, 100, 10),
            open(1000, 10, 10),
            open(10, 1000, 10),
            open(1000, 1000, 0),
            open(1000, 1000, 10),
            FitSummary::default(),
            open(1000, 1000, 10),
        ];
        let index = CapacityIndex::build(&summaries, 0);
        let w = wants(500, 500);
        assert_eq!(
            index.first_may_fit(&w, 0, 7),
            Some(4),
            "cpu, memory and pods each rule out one"
        );
        assert_eq!(
            index.first_may_fit(&w, 5, 7),
            Some(6),
            "a closed slot never fits"
        );
        assert_eq!(index.first_may_fit(&w, 0, 4), None);
        assert_eq!(index.first_may_fit(&w, 3, 3), None);
        assert_eq!(index.first_may_fit(&wants(0, 0), 0, 7), Some(0));
        // A pod asking for nothing of a resource is not stopped by it.
        assert_eq!(index.first_may_fit(&wants(0, 500), 0, 7), Some(2));

        // Updates keep the maxima; growing past the capacity rebuilds.
        let mut index = index;
        summaries[4] = open(0, 0, 10);
        index.update(4, &summaries[4], &summaries);
        index.assert_matches(&summaries);
        assert_eq!(index.first_may_fit(&w, 0, 7), Some(6));
        summaries.extend((0..10).map(|_| open(2000, 2000, 5)));
        index.update(16, &summaries[16], &summaries);
        index.assert_matches(&summaries);
        assert_eq!(index.first_may_fit(&wants(1500, 0), 0, 17), Some(7));
    }
}
