//! `Labels`: the map of labels, annotations and node selectors, kept as one vector of entries sorted
//! by key.
//!
//! Every pod and node carries two of these, almost always with a handful of entries (one
//! annotation is typical), and large clusters hold hundreds of thousands of them. A `BTreeMap`
//! allocates a leaf of several hundred bytes for even one entry; a sorted vector holds exactly its
//! entries. Lookups are a binary search, which on so few keys is as fast as a tree. The map offers
//! the part of `BTreeMap`'s interface the project uses, with the same behaviour: iteration in key
//! order, and when one key is given twice, the last value wins.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::iter::FusedIterator;
use std::ops::Index;

use thin_vec::ThinVec;

/// Label or annotation map. Ordered by key, so equal maps compare and hash equally.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels {
    /// Sorted by key, keys unique. Built maps are shrunk to their length, and `insert` grows by one
    /// entry at a time, because most maps are written once and never grow. One pointer wide, and
    /// no allocation when empty, as most node selectors and many label maps are.
    entries: ThinVec<(String, String)>,
}

impl Labels {
    /// The empty map; allocates nothing.
    pub fn new() -> Labels {
        Labels {
            entries: ThinVec::new(),
        }
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

    pub fn get<Q>(&self, key: &Q) -> Option<&String>
    where
        String: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.position(key).ok().map(|i| &self.entries[i].1)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut String>
    where
        String: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.position(key).ok().map(|i| &mut self.entries[i].1)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        String: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.position(key).is_ok()
    }

    /// Sets `key` to `value`, returning the value it replaces.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self.position(key.as_str()) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
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
        Q: Ord + ?Sized,
    {
        let i = self.position(key).ok()?;
        Some(self.entries.remove(i).1)
    }

    /// Keeps only the entries for which `keep` returns true.
    pub fn retain(&mut self, mut keep: impl FnMut(&String, &mut String) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
    }

    pub fn clear(&mut self) {
        self.entries = ThinVec::new();
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
    Q: Ord + ?Sized,
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
        Labels { entries }
    }
}

impl From<&BTreeMap<String, String>> for Labels {
    fn from(map: &BTreeMap<String, String>) -> Labels {
        let entries = map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        Labels { entries }
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
            prop_assert_eq!(format!("{labels:?}"), format!("{model:?}"));
        }
    }
}
