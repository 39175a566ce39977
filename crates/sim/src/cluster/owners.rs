//! The controllers the simulated pods name as their controller, each kept once.
//!
//! Gather implies the workload controllers from the live pods every time a pod changed, which in
//! a simulation is every tick. Reading each pod's controller reference and comparing its kind,
//! namespace and name strings took a sixth of `simulate large-65k`; each pod record now holds the
//! id its controller got here when the pod was made, and the implied controllers are counted by
//! id.

use std::hash::BuildHasher;

use hashbrown::HashTable;

/// Index of an owner in [`Owners`].
pub(crate) type OwnerId = u32;

/// A pod's controller reference, with the pod's namespace.
#[derive(Debug)]
pub(crate) struct Owner {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl Owner {
    fn key(&self) -> (&str, &str, &str, &str) {
        (&self.kind, &self.namespace, &self.name, &self.uid)
    }
}

#[derive(Debug, Default)]
pub(crate) struct Owners {
    entries: Vec<Owner>,
    /// Ids by the owner's fields, read from `entries` (no second copy of the strings).
    ids: HashTable<OwnerId>,
    state: foldhash::fast::RandomState,
    /// The id last asked for.
    last: Option<OwnerId>,
}

impl Owners {
    /// The id of this owner, made on first sight.
    pub(crate) fn id_of(&mut self, kind: &str, namespace: &str, name: &str, uid: &str) -> OwnerId {
        let key = (kind, namespace, name, uid);
        // Pods of one controller are mostly made one after another.
        if let Some(last) = self.last
            && self.entries[last as usize].key() == key
        {
            return last;
        }
        let hash = self.state.hash_one(key);
        let entries = &self.entries;
        if let Some(&id) = self.ids.find(hash, |&id| entries[id as usize].key() == key) {
            self.last = Some(id);
            return id;
        }
        let id = OwnerId::try_from(self.entries.len()).unwrap_or(OwnerId::MAX);
        self.entries.push(Owner {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
        });
        let (entries, state) = (&self.entries, &self.state);
        self.ids
            .insert_unique(hash, id, |&id| state.hash_one(entries[id as usize].key()));
        self.last = Some(id);
        id
    }

    pub(crate) fn get(&self, id: OwnerId) -> Option<&Owner> {
        self.entries.get(id as usize)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}
