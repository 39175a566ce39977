//! Converts Kubernetes API objects, exactly as `kubectl get -o yaml` prints them, into the
//! Ferroscale model. This is the boundary: every quantity, operator, effect and port is parsed here
//! once, and an error names the object, the field path and the bad value.

use ferroscale_model::{DaemonSet, Namespace, Node, Pod, PodDisruptionBudget, PriorityClass};

/// One cluster object converted into the model.
#[derive(Debug, Clone, PartialEq)]
pub enum K8sObject {
    Node(Node),
    Pod(Pod),
    DaemonSet(DaemonSet),
    PodDisruptionBudget(PodDisruptionBudget),
    PriorityClass(PriorityClass),
    Namespace(Namespace),
}
