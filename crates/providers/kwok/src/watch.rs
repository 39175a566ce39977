//! What tells `refresh` that its last list of Nodes still holds (docs/behaviour.md KWOK-110).
//!
//! `refresh` learns what others changed (a Node of a group deleted, one added with the group's
//! annotations) by listing every Node: at 3,000 nodes that is megabytes for the API server to
//! encode and for the provider to parse, every loop, in the path between an unschedulable pod and
//! its new node. A watch of the same Nodes, parsed only as far as a [`ListedNode`], counts the
//! changes that matter to a group's membership — a managed Node added or deleted, its group or
//! provider ID changed — and ignores the rest (status heartbeats, labels, taints). While the watch
//! runs and the count has not moved since the last list started, and the provider changed nothing
//! itself since, the last list is still what the cluster holds and `refresh` need not list again.
//! Whenever the watch fails or starts over the count moves too, so the next `refresh` lists.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::task::JoinHandle;

use crate::ListedNode;

/// A managed Node's place, as far as membership goes: its group and its provider ID.
pub(crate) type Member = (String, Option<String>);

/// How long the watch may stand in for a list: past this the next `refresh` lists anyway, so a
/// watch that stopped delivering without failing cannot keep a stale view for longer.
pub(crate) const LIST_AT_LEAST_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
struct Membership {
    /// The managed Nodes by name, as the watch last saw them.
    members: HashMap<String, Member>,
    /// While the watch lists again (after it started or lost its place): what the list brought
    /// so far.
    relisting: Option<HashMap<String, Member>>,
    /// The watch has listed and is following the changes.
    synced: bool,
    /// Moves with every change of membership and every failure or restart of the watch.
    changes: u64,
}

/// The watch's task and what it found; the task ends with the provider.
#[derive(Debug)]
pub(crate) struct MembershipWatch {
    membership: Arc<Mutex<Membership>>,
    task: JoinHandle<()>,
}

impl Drop for MembershipWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MembershipWatch {
    /// Starts watching on the current tokio runtime. `member` says whether a Node is one the
    /// provider manages, and where.
    pub(crate) fn start(api: Api<ListedNode>, member: fn(&ListedNode) -> Option<Member>) -> Self {
        let membership = Arc::new(Mutex::new(Membership::default()));
        let shared = Arc::clone(&membership);
        let task = tokio::spawn(async move {
            let mut events =
                std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
            while let Some(event) = events.next().await {
                let mut membership = lock(&shared);
                match event {
                    Ok(event) => membership.apply(event, member),
                    Err(error) => {
                        tracing::debug!(%error, "kwok: the Node watch failed; refresh lists until it is back");
                        membership.synced = false;
                        membership.changes += 1;
                    }
                }
            }
        });
        MembershipWatch { membership, task }
    }

    /// The change count, while the watch follows the Nodes; `None` while it has not listed yet
    /// or is starting over, when only a list tells what the cluster holds.
    pub(crate) fn changes(&self) -> Option<u64> {
        let membership = lock(&self.membership);
        membership.synced.then_some(membership.changes)
    }
}

fn lock(membership: &Mutex<Membership>) -> MutexGuard<'_, Membership> {
    membership
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Membership {
    fn apply(&mut self, event: Event<ListedNode>, member: fn(&ListedNode) -> Option<Member>) {
        let name = |node: &ListedNode| node.metadata.name.clone().unwrap_or_default();
        match event {
            Event::Apply(node) => {
                let now = member(&node);
                let before = match &now {
                    Some(now) => self.members.insert(name(&node), now.clone()),
                    None => self.members.remove(&name(&node)),
                };
                if before != now {
                    self.changes += 1;
                }
            }
            Event::Delete(node) => {
                if self.members.remove(&name(&node)).is_some() {
                    self.changes += 1;
                }
            }
            Event::Init => {
                self.synced = false;
                self.relisting = Some(HashMap::new());
                self.changes += 1;
            }
            Event::InitApply(node) => {
                if let (Some(relisting), Some(member)) = (self.relisting.as_mut(), member(&node)) {
                    relisting.insert(name(&node), member);
                }
            }
            Event::InitDone => {
                if let Some(relisted) = self.relisting.take() {
                    self.members = relisted;
                }
                self.synced = true;
                self.changes += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str, group: Option<&str>, provider_id: &str) -> ListedNode {
        ListedNode {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                annotations: group.map(|g| [("group".to_string(), g.to_string())].into()),
                ..ObjectMeta::default()
            },
            provider_id: Some(provider_id.to_string()),
        }
    }

    fn member(node: &ListedNode) -> Option<Member> {
        let group = node.metadata.annotations.as_ref()?.get("group")?;
        Some((group.clone(), node.provider_id.clone()))
    }

    fn synced() -> Membership {
        let mut m = Membership::default();
        m.apply(Event::Init, member);
        m.apply(Event::InitApply(node("a", Some("g"), "kwok:a")), member);
        m.apply(Event::InitApply(node("x", None, "kwok:x")), member);
        m.apply(Event::InitDone, member);
        m
    }

    #[test]
    fn only_a_change_of_membership_moves_the_count() {
        let mut m = synced();
        assert!(m.synced);
        assert_eq!(m.members.len(), 1, "{:?}", m.members);
        let quiet = m.changes;
        // A heartbeat of a managed Node, any event of an unmanaged one: nothing moves.
        m.apply(Event::Apply(node("a", Some("g"), "kwok:a")), member);
        m.apply(Event::Apply(node("x", None, "kwok:x")), member);
        m.apply(Event::Delete(node("x", None, "kwok:x")), member);
        assert_eq!(m.changes, quiet);

        // Each of these changes a group's membership.
        let steps = [
            Event::Apply(node("b", Some("g"), "kwok:b")),
            Event::Apply(node("b", Some("h"), "kwok:b")),
            Event::Apply(node("b", Some("h"), "other:b")),
            Event::Apply(node("b", None, "other:b")),
            Event::Delete(node("a", Some("g"), "kwok:a")),
        ];
        for step in steps {
            let before = m.changes;
            let described = format!("{step:?}");
            m.apply(step, member);
            assert!(m.changes > before, "{described} did not move the count");
        }
        assert!(m.members.is_empty(), "{:?}", m.members);
    }

    #[test]
    fn starting_over_stands_the_watch_down_until_the_new_list_is_in() {
        let mut m = synced();
        let before = m.changes;
        m.apply(Event::Init, member);
        assert!(!m.synced);
        assert!(m.changes > before);
        m.apply(Event::InitApply(node("c", Some("g"), "kwok:c")), member);
        // The old contents serve until the new list is complete.
        assert!(m.members.contains_key("a"));
        m.apply(Event::InitDone, member);
        assert!(m.synced);
        assert_eq!(m.members.keys().collect::<Vec<_>>(), vec!["c"]);
    }
}
