//! `Labels`: the map of labels, annotations and node selectors, kept as one vector of entries sorted
//! by key.
//!
//! Every pod and node carries two of these, almost always with a handful of entries (one
//! annotation is typical), and large clusters hold hundreds of thousands of them. A `BTreeMap`
//! allocates a leaf of several hundred bytes for even one entry; a sorted vector holds exactly its
//! entries. Lookups are a binary search, which on so few keys is as fast as a tree. The map offers
//! the part of `BTreeMap`'s interface the project uses, with the same behaviour: iteration in key
//! order, and when one key is given twice, the last value wins.
//!
//! Most lookups in a large cluster ask for a key the map does not have (the provider's GPU
//! label, the virtual-kubelet type, the upcoming-node label on every node, every loop). A binary
//! search answers that after reading several keys, each in its own allocation: at 65,000 nodes a
//! cache miss per key read. The map therefore carries a one-word filter of its keys (two bits
//! per key, a Bloom filter): a key whose bits are not all set is absent without reading any
//! entry. The filter is a function of the key set, kept exact on every change, and takes no part
//! in comparisons.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::iter::FusedIterator;
use std::ops::Index;

use thin_vec::ThinVec;

/// Label or annotation map. Ordered by key, so equal maps compare and hash equally.
#[derive(Clone, Default)]
pub struct Labels {
    /// Sorted by key, keys unique. Built maps are shrunk to their length, and `insert` grows by one
    /// entry at a time, because most maps are written once and never grow. One pointer wide, and
    /// no allocation when empty, as most node selectors and many label maps are.
    entries: ThinVec<(String, String)>,
    /// The filter of the keys: [`key_bits`] of every key, or-ed together.
    filter: u64,
}

/// The two filter bits of `key` (they may coincide). The hash is seeded the same in every
/// process, so a map's filter depends only on its keys.
fn key_bits<Q: Hash + ?Sized>(key: &Q) -> u64 {
    let hash = foldhash::fast::FixedState::with_seed(0x6c61_6265_6c73).hash_one(key);
    (1u64 << (hash & 63)) | (1u64 << ((hash >> 6) & 63))
}

impl PartialEq for Labels {
    fn eq(&self, other: &Labels) -> bool {
        self.entries == other.entries
    }
}

impl Eq for Labels {}

impl Hash for Labels {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.entries.hash(state);
    }
}

impl PartialOrd for Labels {
    fn partial_cmp(&self, other: &Labels) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Labels {
    fn cmp(&self, other: &Labels) -> Ordering {
        self.entries.cmp(&other.entries)
    }
}

impl Labels {
    /// The empty map; allocates nothing.
    pub fn new() -> Labels {
        Labels {
            entries: ThinVec::new(),
            filter: 0,
        }
    }

    /// Sets the filter from the keys, after a change that may have taken keys out.
    fn refilter(&mut self) {
        self.filter = self
            .entries
            .iter()
            .fold(0, |bits, (k, _)| bits | key_bits(k));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Where `key` is, or where it would go.
    fn position<Q>(&self, key: &Q) -> Result<usize, usize>
    where
        String: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries
            .binary_search_by(|(k, _)| Borrow::<Q>::borrow(k).cmp(key))
    }

    /// Where `key` is; `None` when it is absent, decided by the filter alone when it can be.
    fn find<Q>(&self, key: &Q) -> Option<usize>
    where
        String: Borrow<Q>,
        Q: Ord + Hash + ?Sized,
    {
        let bits = key_bits(key);
        if self.filter & bits != bits {
            return None;
        }
        self.position(key).ok()
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&String>
    where
        String: Borrow<Q>,
        Q: Ord + Hash + ?Sized,
    {
        self.find(key).map(|i| &self.entries[i].1)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut String>
    where
        String: Borrow<Q>,
        Q: Ord + Hash + ?Sized,
    {
        self.find(key).map(|i| &mut self.entries[i].1)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        String: Borrow<Q>,
        Q: Ord + Hash + ?Sized,
    {
        self.find(key).is_some()
    }

    /// Sets `key` to `value`, returning the value it replaces.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self.position(key.as_str()) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.filter |= key_bits(key.as_str());
                // One entry more, not double: maps are small and rarely grow after they are built.
                self.entries.reserve_exact(1);
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<String>
    where
        String: Borrow<Q>,
        Q: Ord + Hash + ?Sized,
    {
        let i = self.find(key)?;
        let (_, value) = self.entries.remove(i);
        self.refilter();
        Some(value)
    }

    /// Keeps only the entries for which `keep` returns true.
    pub fn retain(&mut self, mut keep: impl FnMut(&String, &mut String) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
        self.refilter();
    }

    pub fn clear(&mut self) {
        self.entries = ThinVec::new();
        self.filter = 0;
    }

    /// The entries in key order.
    pub fn iter(&self) -> LabelsIter<'_> {
        LabelsIter {
            entries: self.entries.iter(),
        }
    }

    /// The keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator + Clone {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The values in the order of their keys.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator + Clone {
        self.entries.iter().map(|(_, v)| v)
    }

    /// Sorts `entries` by key with the last of equal keys winning, and drops spare capacity.
    fn normalise(&mut self) {
        // Stable, so equal keys stay in the order they were given and the last one can win.
        self.entries.sort_by(|(a, _), (b, _)| a.cmp(b));
        self.entries.dedup_by(|later, kept| {
            if later.0 == kept.0 {
                std::mem::swap(&mut later.1, &mut kept.1);
                true
            } else {
                false
            }
        });
        self.entries.shrink_to_fit();
        self.refilter();
    }
}

impl fmt::Debug for Labels {
    /// As a map, like `BTreeMap` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<Q> Index<&Q> for Labels
where
    String: Borrow<Q>,
    Q: Ord + Hash + ?Sized,
{
    type Output = String;

    /// Panics when the key is absent, like `BTreeMap`.
    fn index(&self, key: &Q) -> &String {
        self.get(key).expect("no entry found for key")
    }
}

impl FromIterator<(String, String)> for Labels {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Labels {
        let mut labels = Labels {
            entries: iter.into_iter().collect(),
            filter: 0,
        };
        labels.normalise();
        labels
    }
}

impl Extend<(String, String)> for Labels {
    /// Inserts every pair; a pair replaces an existing entry with its key.
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, iter: I) {
        let before = self.entries.len();
        self.entries.extend(iter);
        if self.entries.len() != before {
            // The existing entries come first, so the sort keeps them before new ones with the
            // same key and the new values win.
            self.normalise();
        }
    }
}

impl<const N: usize> From<[(String, String); N]> for Labels {
    fn from(pairs: [(String, String); N]) -> Labels {
        pairs.into_iter().collect()
    }
}

impl From<BTreeMap<String, String>> for Labels {
    /// Already sorted and unique: no sort needed.
    fn from(map: BTreeMap<String, String>) -> Labels {
        let mut entries: ThinVec<(String, String)> = map.into_iter().collect();
        entries.shrink_to_fit();
        let mut labels = Labels { entries, filter: 0 };
        labels.refilter();
        labels
    }
}

impl From<&BTreeMap<String, String>> for Labels {
    fn from(map: &BTreeMap<String, String>) -> Labels {
        let entries = map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut labels = Labels { entries, filter: 0 };
        labels.refilter();
        labels
    }
}

impl From<&Labels> for BTreeMap<String, String> {
    fn from(labels: &Labels) -> BTreeMap<String, String> {
        labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

impl From<Labels> for BTreeMap<String, String> {
    fn from(labels: Labels) -> BTreeMap<String, String> {
        labels.into_iter().collect()
    }
}

/// Same entries, so a map read from the wire can be checked against the model's.
impl PartialEq<BTreeMap<String, String>> for Labels {
    fn eq(&self, other: &BTreeMap<String, String>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl PartialEq<Labels> for BTreeMap<String, String> {
    fn eq(&self, other: &Labels) -> bool {
        other == self
    }
}

impl IntoIterator for Labels {
    type Item = (String, String);
    type IntoIter = thin_vec::IntoIter<(String, String)>;

    /// The entries in key order.
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a> IntoIterator for &'a Labels {
    type Item = (&'a String, &'a String);
    type IntoIter = LabelsIter<'a>;

    fn into_iter(self) -> LabelsIter<'a> {
        self.iter()
    }
}

/// Borrowed entries of a [`Labels`], in key order.
#[derive(Clone, Debug)]
pub struct LabelsIter<'a> {
    entries: std::slice::Iter<'a, (String, String)>,
}

impl<'a> Iterator for LabelsIter<'a> {
    type Item = (&'a String, &'a String);

    fn next(&mut self) -> Option<Self::Item> {
        self.entries.next().map(|(k, v)| (k, v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

impl DoubleEndedIterator for LabelsIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.entries.next_back().map(|(k, v)| (k, v))
    }
}

impl ExactSizeIterator for LabelsIter<'_> {}
impl FusedIterator for LabelsIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn iterates_in_key_order_whatever_the_build_order() {
        let labels: Labels = [pair("zone", "a"), pair("app", "web"), pair("tier", "db")]
            .into_iter()
            .collect();
        let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
        assert_eq!(keys, ["app", "tier", "zone"]);
        let mut inserted = Labels::new();
        for (k, v) in [pair("zone", "a"), pair("app", "web"), pair("tier", "db")] {
            inserted.insert(k, v);
        }
        assert_eq!(inserted, labels);
        assert_eq!(
            format!("{labels:?}"),
            r#"{"app": "web", "tier": "db", "zone": "a"}"#
        );
    }

    #[test]
    fn the_last_of_duplicate_keys_wins() {
        let labels = Labels::from([pair("app", "first"), pair("b", "x"), pair("app", "last")]);
        assert_eq!(labels.len(), 2);
        assert_eq!(labels.get("app").map(String::as_str), Some("last"));
        let mut extended = Labels::from([pair("app", "old"), pair("keep", "k")]);
        extended.extend([pair("app", "new"), pair("app", "newest"), pair("add", "a")]);
        assert_eq!(
            extended,
            Labels::from([pair("add", "a"), pair("app", "newest"), pair("keep", "k")])
        );
    }

    #[test]
    fn insert_replaces_and_returns_the_old_value() {
        let mut labels = Labels::from([pair("app", "web")]);
        assert_eq!(labels.insert("app".into(), "db".into()), Some("web".into()));
        assert_eq!(labels.insert("tier".into(), "x".into()), None);
        assert_eq!(labels["app"], "db");
        assert_eq!(labels.len(), 2);
    }

    #[test]
    fn remove_takes_out_only_that_key() {
        let mut labels = Labels::from([pair("a", "1"), pair("b", "2"), pair("c", "3")]);
        assert_eq!(labels.remove("b"), Some("2".into()));
        assert_eq!(labels.remove("b"), None);
        assert!(!labels.contains_key("b"));
        assert!(labels.contains_key("a") && labels.contains_key("c"));
        labels.retain(|k, _| k != "a");
        assert_eq!(labels, Labels::from([pair("c", "3")]));
    }

    /// An absent key answers `None` whether or not the filter lets it through to the search,
    /// and the filter takes no part in equality or order.
    #[test]
    fn the_key_filter_never_hides_a_key() {
        let labels: Labels = (0..40).map(|i| pair(&format!("key-{i}"), "v")).collect();
        // Forty keys set most of the 64 bits: many absent keys pass the filter.
        let passing = (0..200)
            .map(|i| format!("absent-{i}"))
            .filter(|k| labels.filter & key_bits(k.as_str()) == key_bits(k.as_str()))
            .count();
        assert!(passing > 0);
        for i in 0..200 {
            let absent = format!("absent-{i}");
            assert_eq!(labels.get(absent.as_str()), None, "{absent}");
        }
        for i in 0..40 {
            assert!(labels.contains_key(format!("key-{i}").as_str()));
        }
        let mut removed = labels.clone();
        removed.retain(|k, _| k == "key-1");
        assert_eq!(removed.filter, key_bits("key-1"));
        // Compared by entries: ("key-1", _) sorts after ("key-0", _).
        assert!(removed != labels && removed > labels);
        removed.clear();
        assert_eq!((removed.filter, removed.len()), (0, 0));
    }

    #[test]
    fn a_built_map_holds_no_spare_capacity() {
        let labels: Labels = (0..5).map(|i| pair(&format!("k{i}"), "v")).collect();
        assert_eq!(labels.entries.capacity(), 5);
        let mut grown = Labels::new();
        grown.insert("one".into(), "v".into());
        assert_eq!(grown.entries.capacity(), 1);
    }

    #[test]
    fn converts_to_and_from_btreemap_unchanged() {
        let map = BTreeMap::from([pair("b", "2"), pair("a", "1")]);
        let labels = Labels::from(map.clone());
        assert_eq!(labels, Labels::from([pair("a", "1"), pair("b", "2")]));
        assert_eq!(Labels::from(&map), labels);
        assert_eq!(labels, map);
        assert_eq!(map, labels);
        assert!(Labels::new() != map);
        assert_eq!(BTreeMap::from(&labels), map);
        assert_eq!(BTreeMap::from(labels), map);
    }

    /// One step applied to both maps.
    #[derive(Debug, Clone)]
    enum Op {
        Insert(String, String),
        Remove(String),
        Extend(Vec<(String, String)>),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few keys, so steps hit existing ones often.
        let key = "[a-d]{1,2}";
        prop_oneof![
            (key, "[xy]").prop_map(|(k, v)| Op::Insert(k, v)),
            key.prop_map(Op::Remove),
            prop::collection::vec((key, "[xyz]"), 0..4).prop_map(Op::Extend),
        ]
    }

    proptest! {
        /// Behaves as a `BTreeMap` under any mix of steps: same entries in the same order, same
        /// answers, same comparisons.
        #[test]
        fn behaves_like_btreemap(
            start in prop::collection::vec(("[a-d]{1,2}", "[xyz]"), 0..6),
            ops in prop::collection::vec(op(), 0..12),
        ) {
            let mut model: BTreeMap<String, String> = start.iter().cloned().collect();
            let mut labels: Labels = start.into_iter().collect();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        prop_assert_eq!(labels.insert(k.clone(), v.clone()), model.insert(k, v));
                    }
                    Op::Remove(k) => prop_assert_eq!(labels.remove(&k), model.remove(&k)),
                    Op::Extend(pairs) => {
                        labels.extend(pairs.clone());
                        model.extend(pairs);
                    }
                }
                let entries: Vec<_> = labels.iter().collect();
                let expected: Vec<_> = model.iter().collect();
                prop_assert_eq!(entries, expected);
                prop_assert_eq!(labels.len(), model.len());
                for k in ["a", "b", "ab", "zz"] {
                    prop_assert_eq!(labels.get(k), model.get(k));
                }
            }
            let other: Labels = model.clone().into();
            prop_assert_eq!(&labels, &other);
            // The filter is the one of the keys, however the map got them: no key is missed.
            prop_assert_eq!(labels.filter, other.filter);
            for k in model.keys() {
                prop_assert!(labels.filter & key_bits(k.as_str()) == key_bits(k.as_str()));
            }
            prop_assert_eq!(format!("{labels:?}"), format!("{model:?}"));
        }
    }
}
