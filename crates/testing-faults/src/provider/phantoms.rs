//! Instances that never become nodes ([`super::Fault::NeverRegister`]): machines the cloud
//! believes it is still creating, which never boot far enough to register. The faulty provider
//! keeps them itself, so the wrapped provider never hears of them; they count in their group's
//! target size and are listed among its instances until deleted or cancelled.

use std::collections::BTreeMap;

use ferroscale_core::cloud::{Instance, InstanceState, InstanceStatus};

/// How phantom instance ids start; no provider Ferroscale knows uses this scheme, so they cannot
/// collide with real instances.
pub const PHANTOM_ID_PREFIX: &str = "phantom://";

/// The phantom instances of every group.
#[derive(Debug, Default)]
pub(crate) struct Phantoms {
    /// Ids by group, oldest first.
    by_group: BTreeMap<String, Vec<String>>,
    /// Phantoms ever made: numbers are never reused, so a deleted phantom's id never comes back.
    made: u64,
}

impl Phantoms {
    /// Makes `count` phantoms in `group`; returns their ids (`phantom://<group>/<n>`).
    pub(crate) fn add(&mut self, group: &str, count: usize) -> Vec<String> {
        let ids: Vec<String> = (0..count)
            .map(|_| {
                self.made += 1;
                format!("{PHANTOM_ID_PREFIX}{group}/{}", self.made)
            })
            .collect();
        self.by_group
            .entry(group.to_string())
            .or_default()
            .extend(ids.iter().cloned());
        ids
    }

    pub(crate) fn ids(&self, group: &str) -> Vec<String> {
        self.by_group.get(group).cloned().unwrap_or_default()
    }

    pub(crate) fn count(&self, group: &str) -> usize {
        self.by_group.get(group).map_or(0, Vec::len)
    }

    pub(crate) fn contains(&self, group: &str, id: &str) -> bool {
        self.by_group
            .get(group)
            .is_some_and(|ids| ids.iter().any(|known| known == id))
    }

    /// The group of a phantom that exists.
    pub(crate) fn group_of(&self, id: &str) -> Option<&str> {
        self.by_group
            .iter()
            .find(|(_, ids)| ids.iter().any(|known| known == id))
            .map(|(group, _)| group.as_str())
    }

    /// Deletes the phantoms of `group` among `ids`.
    pub(crate) fn remove(&mut self, group: &str, ids: &[&str]) {
        if let Some(known) = self.by_group.get_mut(group) {
            known.retain(|id| !ids.contains(&id.as_str()));
        }
    }

    /// Cancels up to `count` phantoms of `group`, newest first, as a cloud cancels the most
    /// recent requests; returns how many it cancelled.
    pub(crate) fn cancel(&mut self, group: &str, count: usize) -> usize {
        let Some(known) = self.by_group.get_mut(group) else {
            return 0;
        };
        let cancelled = count.min(known.len());
        known.truncate(known.len() - cancelled);
        cancelled
    }
}

/// How a phantom is listed: being created, with no error, forever.
pub(crate) fn instance(id: &str) -> Instance {
    Instance {
        id: id.to_string(),
        status: Some(InstanceStatus {
            state: InstanceState::Creating,
            error: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phantoms_have_ids_of_their_own_and_are_deleted_or_cancelled_per_group() {
        let mut phantoms = Phantoms::default();
        let a = phantoms.add("a", 2);
        let b = phantoms.add("b", 1);
        assert_eq!(a, ["phantom://a/1", "phantom://a/2"]);
        assert_eq!(b, ["phantom://b/3"]);
        assert_eq!(phantoms.group_of("phantom://b/3"), Some("b"));
        assert!(!phantoms.contains("a", "phantom://b/3"));

        phantoms.remove("a", &["phantom://a/1", "phantom://b/3"]);
        assert_eq!(phantoms.ids("a"), ["phantom://a/2"]);
        assert_eq!(
            phantoms.count("b"),
            1,
            "another group's phantom is left alone"
        );

        assert_eq!(phantoms.cancel("a", 5), 1);
        assert_eq!(phantoms.count("a"), 0);
        assert_eq!(phantoms.group_of("phantom://a/2"), None);
        // A new phantom never takes an old number.
        assert_eq!(phantoms.add("a", 1), ["phantom://a/4"]);
    }
}
