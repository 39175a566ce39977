//! Which faults the faulty provider injects and into which calls: the provider methods a fault
//! can be switched on for, the faults themselves, and the set of injections in force, consulted
//! once per call.

use std::fmt;
use std::time::Duration;

use thiserror::Error;

/// The provider and node-group methods the faulty provider logs and can inject faults into,
/// named after the core's `CloudProvider` / `NodeGroup` traits.
///
/// The SDK calls some of them for its own checks inside another RPC: `NodeGroups` before every
/// call about a group (to find it), `TargetSize` before `IncreaseSize` and `DeleteNodes`, `Nodes`
/// before `DeleteNodes`. A fault on one of those therefore also fails the RPC that needed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    NodeGroups,
    NodeGroupForNode,
    Refresh,
    Cleanup,
    TargetSize,
    IncreaseSize,
    DeleteNodes,
    DecreaseTargetSize,
    Nodes,
    TemplateNodeInfo,
    GetOptions,
}

impl Method {
    /// The trait method's name, as logged.
    pub fn name(self) -> &'static str {
        match self {
            Method::NodeGroups => "node_groups",
            Method::NodeGroupForNode => "node_group_for_node",
            Method::Refresh => "refresh",
            Method::Cleanup => "cleanup",
            Method::TargetSize => "target_size",
            Method::IncreaseSize => "increase_size",
            Method::DeleteNodes => "delete_nodes",
            Method::DecreaseTargetSize => "decrease_target_size",
            Method::Nodes => "nodes",
            Method::TemplateNodeInfo => "template_node_info",
            Method::GetOptions => "get_options",
        }
    }

    /// Whether the call changes the cloud: resizes, deletions, and `Cleanup` (which releases
    /// what the provider holds; the kwok provider deletes its nodes).
    pub fn is_mutating(self) -> bool {
        matches!(
            self,
            Method::IncreaseSize
                | Method::DeleteNodes
                | Method::DecreaseTargetSize
                | Method::Cleanup
        )
    }

    /// Whether the method belongs to a node group, so that its calls concern one group.
    pub fn is_group_method(self) -> bool {
        !matches!(
            self,
            Method::NodeGroups | Method::NodeGroupForNode | Method::Refresh | Method::Cleanup
        )
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What goes wrong with a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The call waits this long, then is carried out and answered. The SDK gives the provider
    /// 90 % of the client's deadline and then answers DEADLINE_EXCEEDED itself, dropping the
    /// call: a delay past that is a call the client sees time out and the cloud never carries
    /// out.
    Delay(Duration),
    /// The call fails at once with `CloudError::Unavailable` (gRPC UNAVAILABLE); nothing is done.
    Unavailable,
    /// The cloud carries the call out, to the end even if the client gives up meanwhile, but the
    /// answer is lost on the way back ([`LostAnswer`]).
    AnswerLost { answer: LostAnswer },
    /// `DeleteNodes` only: the first `deleted` nodes of the batch are deleted, then the call
    /// fails (`CloudError::Provider`, gRPC UNKNOWN).
    PartialDelete { deleted: usize },
    /// `IncreaseSize` only: the target grows, but the new instances never become nodes, like
    /// machines that fail to boot without the cloud noticing. They are listed as instances
    /// being created (no error information) and counted in the target size until they are
    /// deleted or the target is decreased; the wrapped provider never hears of them.
    NeverRegister,
}

/// What the client gets from a call whose answer is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostAnswer {
    /// An error, `CloudError::Unavailable` (gRPC UNAVAILABLE), once the cloud has finished.
    Error,
    /// No answer at all: the SDK answers DEADLINE_EXCEEDED when the client's deadline is nearly
    /// up (a client that sent no deadline waits until it hangs up).
    Timeout,
}

/// A fault for calls of one method, optionally of one group only, optionally for a number of
/// calls only.
///
/// ```
/// use std::time::Duration;
/// use ferroscale_testing_faults::provider::{Fault, Injection, Method};
///
/// // The next two IncreaseSize calls of group "workers" answer 3 s late.
/// let injection = Injection::new(Method::IncreaseSize, Fault::Delay(Duration::from_secs(3)))
///     .in_group("workers")
///     .times(2);
/// # let _ = injection;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    pub method: Method,
    /// `None`: calls of every group.
    pub group: Option<String>,
    pub fault: Fault,
    /// `None`: every call until the injection is removed.
    pub calls: Option<usize>,
}

impl Injection {
    /// `fault` for every call of `method`, until removed.
    pub fn new(method: Method, fault: Fault) -> Injection {
        Injection {
            method,
            group: None,
            fault,
            calls: None,
        }
    }

    /// Only for calls about node group `group`.
    pub fn in_group(self, group: impl Into<String>) -> Injection {
        Injection {
            group: Some(group.into()),
            ..self
        }
    }

    /// Only for the next `calls` matching calls; then the injection is spent.
    pub fn times(self, calls: usize) -> Injection {
        Injection {
            calls: Some(calls),
            ..self
        }
    }

    fn check(&self) -> Result<(), InjectError> {
        let only_for = match self.fault {
            Fault::PartialDelete { .. } => Some(Method::DeleteNodes),
            Fault::NeverRegister => Some(Method::IncreaseSize),
            Fault::Delay(_) | Fault::Unavailable | Fault::AnswerLost { .. } => None,
        };
        if let Some(only_for) = only_for.filter(|method| *method != self.method) {
            return Err(InjectError::WrongMethod {
                fault: self.fault.clone(),
                method: self.method,
                only_for,
            });
        }
        if let Some(group) = &self.group
            && !self.method.is_group_method()
        {
            return Err(InjectError::NotAGroupMethod {
                method: self.method,
                group: group.clone(),
            });
        }
        if self.calls == Some(0) {
            return Err(InjectError::NoCalls);
        }
        Ok(())
    }

    fn applies_to(&self, method: Method, group: Option<&str>) -> bool {
        self.method == method
            && self
                .group
                .as_deref()
                .is_none_or(|wanted| group == Some(wanted))
    }
}

/// Names an injection in force, to remove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InjectionId(u64);

/// An injection that could never apply as asked.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InjectError {
    #[error("{fault:?} applies to {only_for} only, not to {method}")]
    WrongMethod {
        fault: Fault,
        method: Method,
        only_for: Method,
    },
    #[error("{method} concerns no node group, so a fault for group {group:?} would never apply")]
    NotAGroupMethod { method: Method, group: String },
    #[error("an injection for 0 calls would never apply")]
    NoCalls,
}

/// The injections in force, in the order they were made: the first that matches a call
/// applies.
#[derive(Debug, Default)]
pub(crate) struct Injections {
    next_id: u64,
    active: Vec<(InjectionId, Injection)>,
}

impl Injections {
    pub(crate) fn add(&mut self, injection: Injection) -> Result<InjectionId, InjectError> {
        injection.check()?;
        self.next_id += 1;
        let id = InjectionId(self.next_id);
        self.active.push((id, injection));
        Ok(id)
    }

    /// Whether `id` was still in force.
    pub(crate) fn remove(&mut self, id: InjectionId) -> bool {
        let before = self.active.len();
        self.active.retain(|(active, _)| *active != id);
        self.active.len() != before
    }

    pub(crate) fn clear(&mut self) {
        self.active.clear();
    }

    /// The fault for a call of `method` about `group`, counting the call against its
    /// injection.
    pub(crate) fn take(&mut self, method: Method, group: Option<&str>) -> Option<Fault> {
        let at = self
            .active
            .iter()
            .position(|(_, injection)| injection.applies_to(method, group))?;
        let injection = &mut self.active[at].1;
        let fault = injection.fault.clone();
        if let Some(calls) = &mut injection.calls {
            *calls -= 1;
            if *calls == 0 {
                self.active.remove(at);
            }
        }
        Some(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_injection_applies_to_its_method_and_group_for_its_number_of_calls() {
        let mut injections = Injections::default();
        injections
            .add(
                Injection::new(Method::IncreaseSize, Fault::Unavailable)
                    .in_group("a")
                    .times(2),
            )
            .expect("a valid injection");
        assert_eq!(injections.take(Method::IncreaseSize, Some("b")), None);
        assert_eq!(injections.take(Method::TargetSize, Some("a")), None);
        assert_eq!(
            injections.take(Method::IncreaseSize, Some("a")),
            Some(Fault::Unavailable)
        );
        assert_eq!(
            injections.take(Method::IncreaseSize, Some("a")),
            Some(Fault::Unavailable)
        );
        assert_eq!(injections.take(Method::IncreaseSize, Some("a")), None);
    }

    #[test]
    fn the_first_matching_injection_applies_and_a_removed_one_no_longer() {
        let mut injections = Injections::default();
        let delay = Fault::Delay(Duration::from_secs(1));
        let first = injections
            .add(Injection::new(Method::Refresh, delay.clone()))
            .expect("a valid injection");
        injections
            .add(Injection::new(Method::Refresh, Fault::Unavailable))
            .expect("a valid injection");
        assert_eq!(injections.take(Method::Refresh, None), Some(delay.clone()));
        assert_eq!(injections.take(Method::Refresh, None), Some(delay));
        assert!(injections.remove(first));
        assert!(!injections.remove(first));
        assert_eq!(
            injections.take(Method::Refresh, None),
            Some(Fault::Unavailable)
        );
        injections.clear();
        assert_eq!(injections.take(Method::Refresh, None), None);
    }

    #[test]
    fn injections_that_could_never_apply_are_refused() {
        let mut injections = Injections::default();
        let refused = [
            Injection::new(Method::IncreaseSize, Fault::PartialDelete { deleted: 1 }),
            Injection::new(Method::DeleteNodes, Fault::NeverRegister),
            Injection::new(Method::Refresh, Fault::Unavailable).in_group("a"),
            Injection::new(Method::Nodes, Fault::Unavailable).times(0),
        ];
        for injection in refused {
            assert!(injections.add(injection.clone()).is_err(), "{injection:?}");
        }
        assert_eq!(injections.take(Method::IncreaseSize, Some("a")), None);
    }
}
