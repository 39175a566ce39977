//! The simulated cluster's lookups of pods by uid and of live pods by namespace and name.
//!
//! A table holds only each pod's index; the key is read from the pod record when the table hashes
//! or compares. Maps keyed by copies of the strings held a second and third copy of every pod's
//! uid and `namespace/name`, with a 24-byte key per entry: over a million pods, more memory than
//! the pods' own strings.

use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;

use ferroscale_model::Pod;
use hashbrown::HashTable;

use super::{PodIndex, PodRecord};

/// How a table finds a pod: the part of the pod it is keyed by.
pub(crate) trait PodKey {
    type Key<'a>: Hash + Eq + Copy;
    fn of(pod: &Pod) -> Self::Key<'_>;
}

/// Keyed by `metadata.uid`.
#[derive(Debug, Default)]
pub(crate) struct ByUid;

impl PodKey for ByUid {
    type Key<'a> = &'a str;
    fn of(pod: &Pod) -> &str {
        &pod.uid
    }
}

/// Keyed by `(namespace, name)`.
#[derive(Debug, Default)]
pub(crate) struct ByName;

impl PodKey for ByName {
    type Key<'a> = (&'a str, &'a str);
    fn of(pod: &Pod) -> (&str, &str) {
        (&pod.namespace, &pod.name)
    }
}

/// Indexes into the cluster's pod records, found by `K`. Every method takes the records, which
/// must hold every index in the table.
#[derive(Debug, Default)]
pub(crate) struct PodTable<K> {
    table: HashTable<PodIndex>,
    state: foldhash::fast::RandomState,
    key: PhantomData<K>,
}

impl<K: PodKey> PodTable<K> {
    fn hash(&self, key: K::Key<'_>) -> u64 {
        self.state.hash_one(key)
    }

    fn hasher<'r>(&self, pods: &'r [PodRecord]) -> impl Fn(&PodIndex) -> u64 + 'r {
        let state = self.state.clone();
        move |&i| state.hash_one(K::of(&pods[i].pod))
    }

    pub(crate) fn get<'a>(&self, key: K::Key<'a>, pods: &'a [PodRecord]) -> Option<PodIndex> {
        self.table
            .find(self.hash(key), |&i| K::of(&pods[i].pod) == key)
            .copied()
    }

    pub(crate) fn contains<'a>(&self, key: K::Key<'a>, pods: &'a [PodRecord]) -> bool {
        self.get(key, pods).is_some()
    }

    /// Files `pods[index]` under its key, in place of any pod filed under the same key.
    pub(crate) fn insert(&mut self, index: PodIndex, pods: &[PodRecord]) {
        let key = K::of(&pods[index].pod);
        let hash = self.hash(key);
        let hasher = self.hasher(pods);
        match self
            .table
            .entry(hash, |&i| K::of(&pods[i].pod) == key, hasher)
        {
            hashbrown::hash_table::Entry::Occupied(mut filed) => *filed.get_mut() = index,
            hashbrown::hash_table::Entry::Vacant(free) => {
                free.insert(index);
            }
        }
    }

    /// Takes `pods[index]` out, if it is the pod filed under its key.
    pub(crate) fn remove_if_filed(&mut self, index: PodIndex, pods: &[PodRecord]) {
        let key = K::of(&pods[index].pod);
        if let Ok(filed) = self.table.find_entry(self.hash(key), |&i| i == index) {
            filed.remove();
        }
    }

    pub(crate) fn reserve(&mut self, additional: usize, pods: &[PodRecord]) {
        let hasher = self.hasher(pods);
        self.table.reserve(additional, hasher);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferroscale_model::Timestamp;

    use super::*;

    fn record(namespace: &str, name: &str, uid: &str) -> PodRecord {
        let mut pod = Pod::new(namespace, name);
        pod.uid = uid.into();
        PodRecord {
            pod: Arc::new(pod),
            pending_since: Timestamp(0),
            bound_at: None,
            deleted_at: None,
            was_scheduled: false,
            shape: None,
            end: None,
            replaces: None,
            owner: None,
        }
    }

    #[test]
    fn finds_pods_by_the_strings_of_their_records_across_growth() {
        let pods: Vec<PodRecord> = (0..1000)
            .map(|i| record("ns", &format!("p-{i}"), &format!("u-{i}")))
            .collect();
        let mut by_uid = PodTable::<ByUid>::default();
        let mut by_name = PodTable::<ByName>::default();
        // No reservation: the tables grow, rehashing from the records.
        for i in 0..pods.len() {
            by_uid.insert(i, &pods);
            by_name.insert(i, &pods);
        }
        for i in [0, 1, 511, 999] {
            assert_eq!(by_uid.get(&format!("u-{i}"), &pods), Some(i));
            assert_eq!(by_name.get(("ns", &format!("p-{i}")), &pods), Some(i));
        }
        assert!(!by_uid.contains("u-1000", &pods));
        assert!(!by_name.contains(("other", "p-1"), &pods));
    }

    #[test]
    fn a_later_pod_of_the_same_name_takes_the_name_and_only_it_gives_it_up() {
        let pods = vec![record("ns", "web", "u-old"), record("ns", "web", "u-new")];
        let mut by_name = PodTable::<ByName>::default();
        by_name.insert(0, &pods);
        by_name.insert(1, &pods);
        assert_eq!(by_name.get(("ns", "web"), &pods), Some(1));
        // The older pod going away leaves the name with the newer one.
        by_name.remove_if_filed(0, &pods);
        assert_eq!(by_name.get(("ns", "web"), &pods), Some(1));
        by_name.remove_if_filed(1, &pods);
        assert_eq!(by_name.get(("ns", "web"), &pods), None);
    }
}
