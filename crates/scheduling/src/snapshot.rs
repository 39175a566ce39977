//! The cluster snapshot: nodes with the pods placed on them, and what-if branches.
//!
//! Forking does not copy anything. While a fork is open every mutation records its inverse in an
//! undo log; `revert` replays the log back to the fork point and `commit` keeps the changes (and
//! folds the log into the enclosing fork, if any). Both cost time proportional to the changes made
//! on the branch, never to the size of the cluster. Forks nest.

use std::collections::HashMap;
use std::sync::Arc;

use ferroscale_model::{HostPort, Labels, Node, Pod, Resources};

/// Stable handle of a node within one snapshot. Handles of removed nodes are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A node and what is placed on it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    pub pods: Vec<Arc<Pod>>,
    /// Sum of the placed pods' requests, with `pods` counting the pods.
    pub requested: Resources,
    /// Host ports in use on the node.
    pub host_ports: Vec<HostPort>,
}

impl NodeInfo {
    fn new(node: Arc<Node>) -> NodeInfo {
        NodeInfo { node, pods: Vec::new(), requested: Resources::default(), host_ports: Vec::new() }
    }

    /// Allocatable minus requested.
    pub fn free(&self) -> Resources {
        self.node.allocatable.minus(&self.requested)
    }
}

#[derive(Debug)]
enum Undo {
    AddedNode(NodeId),
    RemovedNode(NodeId, NodeInfo),
    AddedPod(NodeId),
    RemovedPod(NodeId, usize, Arc<Pod>),
}

/// An in-memory cluster on which scheduling is simulated.
#[derive(Debug, Default)]
pub struct Snapshot {
    slots: Vec<Option<NodeInfo>>,
    by_name: HashMap<String, NodeId>,
    live_nodes: usize,
    pod_count: usize,
    undo: Vec<Undo>,
    fork_points: Vec<usize>,
    namespace_labels: HashMap<String, Labels>,
}

impl Snapshot {
    pub fn new() -> Snapshot {
        Snapshot::default()
    }

    /// Adds a node. A node with the same name replaces nothing: names must be unique, and adding a
    /// duplicate returns the existing handle unchanged.
    pub fn add_node(&mut self, node: Arc<Node>) -> NodeId {
        if let Some(id) = self.by_name.get(&node.name) {
            return *id;
        }
        let id = NodeId(self.slots.len() as u32);
        self.by_name.insert(node.name.clone(), id);
        self.slots.push(Some(NodeInfo::new(node)));
        self.live_nodes += 1;
        self.record(Undo::AddedNode(id));
        id
    }

    /// Removes a node with everything placed on it, and returns its pods.
    pub fn remove_node(&mut self, id: NodeId) -> Vec<Arc<Pod>> {
        let Some(info) = self.slots.get_mut(id.index()).and_then(Option::take) else {
            return Vec::new();
        };
        self.by_name.remove(&info.node.name);
        self.live_nodes -= 1;
        self.pod_count -= info.pods.len();
        let pods = info.pods.clone();
        self.record(Undo::RemovedNode(id, info));
        pods
    }

    /// Places a pod on a node without checking whether it fits (callers check with
    /// [`crate::check`] first when that matters).
    pub fn add_pod(&mut self, id: NodeId, pod: Arc<Pod>) {
        let Some(info) = self.slots.get_mut(id.index()).and_then(Option::as_mut) else {
            return;
        };
        Self::account_pod(info, &pod, true);
        info.pods.push(pod);
        self.pod_count += 1;
        self.record(Undo::AddedPod(id));
    }

    /// Removes the pod with this uid from a node; returns it.
    pub fn remove_pod(&mut self, id: NodeId, uid: &str) -> Option<Arc<Pod>> {
        let info = self.slots.get_mut(id.index()).and_then(Option::as_mut)?;
        let index = info.pods.iter().position(|p| p.uid == uid)?;
        let pod = info.pods.remove(index);
        Self::account_pod(info, &pod, false);
        self.pod_count -= 1;
        self.record(Undo::RemovedPod(id, index, pod.clone()));
        Some(pod)
    }

    /// Opens a what-if branch.
    pub fn fork(&mut self) {
        self.fork_points.push(self.undo.len());
    }

    /// Discards every change since the matching `fork`.
    pub fn revert(&mut self) {
        let Some(point) = self.fork_points.pop() else {
            return;
        };
        while self.undo.len() > point {
            let Some(op) = self.undo.pop() else { break };
            self.apply_undo(op);
        }
    }

    /// Keeps every change since the matching `fork`.
    pub fn commit(&mut self) {
        if self.fork_points.pop().is_some() && self.fork_points.is_empty() {
            self.undo.clear();
        }
    }

    /// Number of open forks.
    pub fn fork_depth(&self) -> usize {
        self.fork_points.len()
    }

    pub fn node(&self, id: NodeId) -> Option<&NodeInfo> {
        self.slots.get(id.index()).and_then(Option::as_ref)
    }

    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// Live nodes in insertion order.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &NodeInfo)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|info| (NodeId(i as u32), info)))
    }

    /// One past the largest node handle ever issued; handles below it may be dead.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    pub fn node_count(&self) -> usize {
        self.live_nodes
    }

    pub fn pod_count(&self) -> usize {
        self.pod_count
    }

    /// Labels of a namespace, used by affinity terms with a namespace selector.
    pub fn set_namespace_labels(&mut self, namespace: impl Into<String>, labels: Labels) {
        self.namespace_labels.insert(namespace.into(), labels);
    }

    pub fn namespace_labels(&self, namespace: &str) -> Option<&Labels> {
        self.namespace_labels.get(namespace)
    }

    fn record(&mut self, op: Undo) {
        if !self.fork_points.is_empty() {
            self.undo.push(op);
        }
    }

    fn account_pod(info: &mut NodeInfo, pod: &Pod, adding: bool) {
        if adding {
            info.requested.add(&pod.requests);
            info.requested.pods += 1;
            info.host_ports.extend(pod.host_ports.iter().cloned());
        } else {
            info.requested.sub(&pod.requests);
            info.requested.pods -= 1;
            for hp in &pod.host_ports {
                if let Some(i) = info.host_ports.iter().position(|x| x == hp) {
                    info.host_ports.swap_remove(i);
                }
            }
        }
    }

    fn apply_undo(&mut self, op: Undo) {
        match op {
            Undo::AddedNode(id) => {
                if let Some(info) = self.slots.get_mut(id.index()).and_then(Option::take) {
                    self.by_name.remove(&info.node.name);
                    self.live_nodes -= 1;
                    self.pod_count -= info.pods.len();
                }
                if id.index() + 1 == self.slots.len() {
                    self.slots.pop();
                }
            }
            Undo::RemovedNode(id, info) => {
                self.by_name.insert(info.node.name.clone(), id);
                self.live_nodes += 1;
                self.pod_count += info.pods.len();
                self.slots[id.index()] = Some(info);
            }
            Undo::AddedPod(id) => {
                if let Some(info) = self.slots[id.index()].as_mut()
                    && let Some(pod) = info.pods.pop()
                {
                    Self::account_pod(info, &pod, false);
                    self.pod_count -= 1;
                }
            }
            Undo::RemovedPod(id, index, pod) => {
                if let Some(info) = self.slots[id.index()].as_mut() {
                    Self::account_pod(info, &pod, true);
                    info.pods.insert(index, pod);
                    self.pod_count += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(Node::new(name, Resources::new(4000, 8 << 30)))
    }

    fn pod(name: &str, cpu: i64) -> Arc<Pod> {
        let mut p = Pod::new("default", name);
        p.requests = Resources::new(cpu, 0);
        Arc::new(p)
    }

    #[test]
    fn revert_restores_everything_changed_on_the_branch() {
        let mut s = Snapshot::new();
        let a = s.add_node(node("a"));
        s.add_pod(a, pod("p1", 1000));
        s.fork();
        let b = s.add_node(node("b"));
        s.add_pod(b, pod("p2", 500));
        s.add_pod(a, pod("p3", 500));
        s.remove_pod(a, "uid-default-p1");
        s.remove_node(a);
        assert_eq!(s.node_count(), 1);
        s.revert();
        assert_eq!(s.node_count(), 1);
        assert_eq!(s.pod_count(), 1);
        assert!(s.node_id("b").is_none());
        let info = s.node(a).unwrap();
        assert_eq!(info.pods.len(), 1);
        assert_eq!(info.requested.cpu_milli, 1000);
        assert_eq!(info.requested.pods, 1);
    }

    #[test]
    fn commit_keeps_changes_and_nested_forks_work() {
        let mut s = Snapshot::new();
        let a = s.add_node(node("a"));
        s.fork();
        s.add_pod(a, pod("p1", 100));
        s.fork();
        s.add_pod(a, pod("p2", 100));
        s.commit();
        assert_eq!(s.pod_count(), 2);
        s.revert();
        assert_eq!(s.pod_count(), 0);
        s.fork();
        s.add_pod(a, pod("p3", 100));
        s.commit();
        assert_eq!(s.pod_count(), 1);
        assert_eq!(s.fork_depth(), 0);
    }
}
