//! Fault rules: which requests a fault applies to ([`Matcher`]), what the proxy does to them
//! ([`Action`]), and the ordered table that picks the first live rule for each request.

use std::time::Duration;

use http::Method;

use super::classify::{RequestClass, RequestTarget};

/// The proxy reads request bodies up to this size into memory, to match them against
/// [`Matcher::body_contains`], and answers a longer one 413 itself: the API server refuses
/// bodies over 3 MiB anyway, so no write a test cares about is longer.
pub const BODY_MATCH_LIMIT: usize = 4 * 1024 * 1024;

/// One request as the proxy saw it, without its headers (which hold the bearer token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    pub method: Method,
    /// Path and query, as sent.
    pub uri: String,
    pub class: RequestClass,
    /// `None` for [`RequestClass::Other`].
    pub target: Option<RequestTarget>,
    pub user_agent: Option<String>,
}

impl RequestInfo {
    pub fn resource(&self) -> Option<&str> {
        self.target.as_ref().map(|target| target.resource.as_str())
    }

    pub fn namespace(&self) -> Option<&str> {
        self.target.as_ref()?.namespace.as_deref()
    }

    pub fn name(&self) -> Option<&str> {
        self.target.as_ref()?.name.as_deref()
    }

    pub fn subresource(&self) -> Option<&str> {
        self.target.as_ref()?.subresource.as_deref()
    }
}

/// Which requests a rule (or a watch operation) applies to. Every field that is set must match;
/// [`Matcher::any`] matches every request.
///
/// ```
/// use ferroscale_testing_faults::api_proxy::{Matcher, RequestClass};
///
/// // Only the node update that adds the autoscaler's deletion taint.
/// let tainting = Matcher::any()
///     .class(RequestClass::Patch)
///     .class(RequestClass::Update)
///     .resource("nodes")
///     .body_contains("ToBeDeletedByClusterAutoscaler");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matcher {
    /// Empty: any class.
    pub classes: Vec<RequestClass>,
    pub resource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// A substring of the request body. Never matches a request without a body, or with one
    /// longer than [`BODY_MATCH_LIMIT`].
    pub body_contains: Option<String>,
    pub user_agent_contains: Option<String>,
}

impl Matcher {
    /// Matches every request.
    pub fn any() -> Matcher {
        Matcher::default()
    }

    /// Adds `class` to the classes matched (initially any).
    pub fn class(mut self, class: RequestClass) -> Matcher {
        self.classes.push(class);
        self
    }

    pub fn resource(mut self, resource: impl Into<String>) -> Matcher {
        self.resource = Some(resource.into());
        self
    }

    pub fn namespace(mut self, namespace: impl Into<String>) -> Matcher {
        self.namespace = Some(namespace.into());
        self
    }

    pub fn name(mut self, name: impl Into<String>) -> Matcher {
        self.name = Some(name.into());
        self
    }

    pub fn subresource(mut self, subresource: impl Into<String>) -> Matcher {
        self.subresource = Some(subresource.into());
        self
    }

    pub fn body_contains(mut self, needle: impl Into<String>) -> Matcher {
        self.body_contains = Some(needle.into());
        self
    }

    pub fn user_agent_contains(mut self, needle: impl Into<String>) -> Matcher {
        self.user_agent_contains = Some(needle.into());
        self
    }

    /// Whether `request`, with `body` (`None` when unknown, as for a stream), matches.
    pub fn matches(&self, request: &RequestInfo, body: Option<&[u8]>) -> bool {
        let field_matches = |wanted: &Option<String>, actual: Option<&str>| {
            wanted.as_deref().is_none_or(|w| actual == Some(w))
        };
        (self.classes.is_empty() || self.classes.contains(&request.class))
            && field_matches(&self.resource, request.resource())
            && field_matches(&self.namespace, request.namespace())
            && field_matches(&self.name, request.name())
            && field_matches(&self.subresource, request.subresource())
            && self.user_agent_contains.as_deref().is_none_or(|needle| {
                request
                    .user_agent
                    .as_deref()
                    .is_some_and(|agent| agent.contains(needle))
            })
            && self.body_contains.as_deref().is_none_or(|needle| {
                body.is_some_and(|body| {
                    body.len() <= BODY_MATCH_LIMIT && contains_bytes(body, needle.as_bytes())
                })
            })
    }
}

fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || haystack
            .windows(needle.len())
            .any(|window| window == needle)
}

/// What the proxy does to a request a rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Answer at once with a Kubernetes `Status` of this code (and a `Retry-After` header of so
    /// many seconds, when given), without contacting the API server.
    Respond {
        status: u16,
        retry_after: Option<u64>,
    },
    /// Wait, then forward.
    Delay(Duration),
    /// Close the client's connection abruptly (TCP RST), with no answer.
    Reset,
    /// Never answer and never close: only the client's own timeout ends the request.
    Blackhole,
    /// Park the request until the test releases it ([`Faults::release`](super::Faults::release)),
    /// then forward it.
    Hold,
    /// Forward, then cut the response stream after this long: a watch that keeps dropping.
    CutWatchAfter(Duration),
}

impl Action {
    /// Shorthand for `Respond` without `Retry-After`.
    pub fn respond(status: u16) -> Action {
        Action::Respond {
            status,
            retry_after: None,
        }
    }
}

/// A fault: a matcher, an action, and how many requests it may apply to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub matcher: Matcher,
    pub action: Action,
    /// Applies to at most this many requests, then expires. `None`: until removed.
    pub times: Option<u32>,
}

impl Rule {
    pub fn new(matcher: Matcher, action: Action) -> Rule {
        Rule {
            matcher,
            action,
            times: None,
        }
    }

    /// Limits the rule to `times` requests.
    pub fn times(mut self, times: u32) -> Rule {
        self.times = Some(times);
        self
    }
}

/// Names a rule, to remove it or to find what it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub(super) u64);

/// The live rules in the order they were added; the first that matches a request wins.
#[derive(Debug, Default)]
pub(super) struct RuleTable {
    next_id: u64,
    rules: Vec<LiveRule>,
}

#[derive(Debug)]
struct LiveRule {
    id: RuleId,
    rule: Rule,
    /// `None`: unlimited.
    remaining: Option<u32>,
}

impl RuleTable {
    pub(super) fn add(&mut self, rule: Rule) -> RuleId {
        self.next_id += 1;
        let id = RuleId(self.next_id);
        let remaining = rule.times;
        if remaining != Some(0) {
            self.rules.push(LiveRule {
                id,
                rule,
                remaining,
            });
        }
        id
    }

    pub(super) fn remove(&mut self, id: RuleId) -> bool {
        let before = self.rules.len();
        self.rules.retain(|live| live.id != id);
        self.rules.len() != before
    }

    pub(super) fn clear(&mut self) {
        self.rules.clear();
    }

    pub(super) fn contains(&self, id: RuleId) -> bool {
        self.rules.iter().any(|live| live.id == id)
    }

    /// The first rule matching the request, counting it against the rule's `times` (and
    /// removing the rule when that reaches zero).
    pub(super) fn take_match(
        &mut self,
        request: &RequestInfo,
        body: Option<&[u8]>,
    ) -> Option<(RuleId, Action)> {
        let index = self
            .rules
            .iter()
            .position(|live| live.rule.matcher.matches(request, body))?;
        let live = &mut self.rules[index];
        let found = (live.id, live.rule.action.clone());
        if let Some(remaining) = &mut live.remaining {
            *remaining -= 1;
            if *remaining == 0 {
                self.rules.remove(index);
            }
        }
        Some(found)
    }
}

#[cfg(test)]
mod tests {
    use super::super::classify::classify;
    use super::*;

    fn request(method: Method, uri: &str) -> RequestInfo {
        let (path, query) = match uri.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (uri, None),
        };
        let classification = classify(&method, path, query);
        RequestInfo {
            method,
            uri: uri.to_owned(),
            class: classification.class,
            target: classification.target,
            user_agent: Some("ferroscale/0.1 (leader-election)".to_owned()),
        }
    }

    #[test]
    fn an_empty_matcher_matches_everything() {
        assert!(Matcher::any().matches(&request(Method::GET, "/version"), None));
        assert!(Matcher::any().matches(&request(Method::DELETE, "/api/v1/nodes/n1"), Some(b"")));
    }

    #[test]
    fn every_set_field_must_match() {
        let patch_n1 = request(Method::PATCH, "/api/v1/nodes/n1");
        let matcher = Matcher::any()
            .class(RequestClass::Patch)
            .resource("nodes")
            .name("n1");
        assert!(matcher.matches(&patch_n1, Some(b"{}")));
        assert!(!matcher.matches(&request(Method::PATCH, "/api/v1/nodes/n2"), Some(b"{}")));
        assert!(!matcher.matches(&request(Method::PUT, "/api/v1/nodes/n1"), Some(b"{}")));
        assert!(!matcher.matches(
            &request(Method::PATCH, "/api/v1/namespaces/default/pods/n1"),
            Some(b"{}")
        ));
        // A non-resource request has no resource, so a resource matcher never matches it.
        assert!(
            !Matcher::any()
                .resource("nodes")
                .matches(&request(Method::GET, "/version"), None)
        );
    }

    #[test]
    fn classes_are_a_set() {
        let writes = Matcher::any()
            .class(RequestClass::Patch)
            .class(RequestClass::Update);
        assert!(writes.matches(&request(Method::PATCH, "/api/v1/nodes/n1"), None));
        assert!(writes.matches(&request(Method::PUT, "/api/v1/nodes/n1"), None));
        assert!(!writes.matches(&request(Method::GET, "/api/v1/nodes/n1"), None));
    }

    #[test]
    fn namespace_and_subresource_are_matched() {
        let eviction = request(
            Method::POST,
            "/api/v1/namespaces/default/pods/web-1/eviction",
        );
        assert!(Matcher::any().namespace("default").matches(&eviction, None));
        assert!(
            !Matcher::any()
                .namespace("kube-system")
                .matches(&eviction, None)
        );
        assert!(
            Matcher::any()
                .subresource("eviction")
                .matches(&eviction, None)
        );
        assert!(
            !Matcher::any()
                .subresource("status")
                .matches(&eviction, None)
        );
        assert!(
            !Matcher::any()
                .namespace("default")
                .matches(&request(Method::GET, "/api/v1/nodes"), None)
        );
    }

    #[test]
    fn body_contains_needs_a_body_within_the_limit() {
        let update = request(Method::PUT, "/api/v1/nodes/n1");
        let tainting = Matcher::any().body_contains("ToBeDeletedByClusterAutoscaler");
        assert!(tainting.matches(
            &update,
            Some(br#"{"spec":{"taints":[{"key":"ToBeDeletedByClusterAutoscaler"}]}}"#)
        ));
        assert!(!tainting.matches(&update, Some(br#"{"spec":{"taints":[]}}"#)));
        assert!(!tainting.matches(&update, None));

        let mut huge = vec![b' '; BODY_MATCH_LIMIT];
        huge.extend_from_slice(b"ToBeDeletedByClusterAutoscaler");
        assert!(!tainting.matches(&update, Some(&huge)));
    }

    #[test]
    fn user_agent_contains_needs_a_user_agent() {
        let mut lease = request(
            Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ferroscale",
        );
        assert!(
            Matcher::any()
                .user_agent_contains("leader-election")
                .matches(&lease, None)
        );
        assert!(
            !Matcher::any()
                .user_agent_contains("kubectl")
                .matches(&lease, None)
        );
        lease.user_agent = None;
        assert!(
            !Matcher::any()
                .user_agent_contains("leader-election")
                .matches(&lease, None)
        );
    }

    #[test]
    fn the_first_matching_rule_wins() {
        let mut table = RuleTable::default();
        let lists = table.add(Rule::new(
            Matcher::any().class(RequestClass::List),
            Action::respond(503),
        ));
        let everything = table.add(Rule::new(Matcher::any(), Action::Reset));
        assert_eq!(
            table.take_match(&request(Method::GET, "/api/v1/pods"), None),
            Some((lists, Action::respond(503)))
        );
        assert_eq!(
            table.take_match(&request(Method::GET, "/api/v1/pods/p"), None),
            Some((everything, Action::Reset))
        );
        assert!(table.remove(lists));
        assert!(!table.remove(lists));
        assert_eq!(
            table.take_match(&request(Method::GET, "/api/v1/pods"), None),
            Some((everything, Action::Reset))
        );
        table.clear();
        assert_eq!(
            table.take_match(&request(Method::GET, "/api/v1/pods"), None),
            None
        );
    }

    #[test]
    fn a_limited_rule_expires_after_its_requests_and_lets_the_next_rule_match() {
        let mut table = RuleTable::default();
        let twice = table.add(Rule::new(Matcher::any(), Action::respond(429)).times(2));
        let after = table.add(Rule::new(Matcher::any(), Action::Blackhole));
        let list = request(Method::GET, "/api/v1/nodes");
        assert_eq!(table.take_match(&list, None).map(|(id, _)| id), Some(twice));
        assert!(table.contains(twice));
        assert_eq!(table.take_match(&list, None).map(|(id, _)| id), Some(twice));
        assert!(!table.contains(twice));
        assert_eq!(table.take_match(&list, None).map(|(id, _)| id), Some(after));
    }

    #[test]
    fn a_rule_that_does_not_match_is_not_counted() {
        let mut table = RuleTable::default();
        let once =
            table.add(Rule::new(Matcher::any().resource("nodes"), Action::respond(500)).times(1));
        assert_eq!(
            table.take_match(&request(Method::GET, "/api/v1/pods"), None),
            None
        );
        assert!(table.contains(once));
    }

    #[test]
    fn a_rule_for_zero_requests_never_applies() {
        let mut table = RuleTable::default();
        let never = table.add(Rule::new(Matcher::any(), Action::Reset).times(0));
        assert!(!table.contains(never));
        assert_eq!(
            table.take_match(&request(Method::GET, "/api/v1/pods"), None),
            None
        );
    }
}
