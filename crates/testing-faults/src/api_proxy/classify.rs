//! What a request to kube-apiserver is, from its method, path and query alone: the verb-like
//! [`RequestClass`] and the object it addresses. Mirrors the API server's own `RequestInfo`
//! parsing (k8s.io/apiserver `request.RequestInfoFactory`) so that a rule written as "a PATCH of
//! node n1" means what the API server would take it to mean.

use http::Method;

/// What a request does, as the API server's authorizer would name its verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestClass {
    /// A GET with `watch=true` (or `1`), or under the legacy `/watch/` prefix: a long-lived stream.
    Watch,
    /// A GET of a collection.
    List,
    /// A GET of one named object or of one of its subresources.
    Get,
    /// A POST that is not an eviction.
    Create,
    /// A POST of `pods/{name}/eviction`.
    Eviction,
    /// A PUT.
    Update,
    /// A PATCH.
    Patch,
    /// A DELETE of one named object.
    Delete,
    /// A DELETE of a collection.
    DeleteCollection,
    /// Anything that is not a resource request: `/version`, `/healthz`, `/openapi/...`, discovery
    /// (`/api`, `/apis`, `/apis/{group}/{version}`), and methods the API has no verb for.
    Other,
}

impl RequestClass {
    /// Whether the request changes something in the API server.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            RequestClass::Create
                | RequestClass::Eviction
                | RequestClass::Update
                | RequestClass::Patch
                | RequestClass::Delete
                | RequestClass::DeleteCollection
        )
    }
}

/// The object (or collection) a resource request addresses. Absent for [`RequestClass::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestTarget {
    /// API group, empty for the core group (`/api/v1`).
    pub group: String,
    pub version: String,
    /// Plural resource name: `pods`, `nodes`, `leases`, `configmaps`.
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// `status`, `eviction`, `binding`, `scale`, `token`...
    pub subresource: Option<String>,
}

/// [`classify`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    pub class: RequestClass,
    pub target: Option<RequestTarget>,
}

impl Classification {
    fn other() -> Classification {
        Classification {
            class: RequestClass::Other,
            target: None,
        }
    }
}

/// Classifies a request. `path` is the URI path without the query; `query` the raw query string.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> Classification {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // `/api/v1/...` is the core group; `/apis/{group}/{version}/...` every other one. Anything
    // shorter is discovery.
    let (group, version, mut rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Classification::other(),
    };
    let mut legacy_watch = false;
    if let ["watch", after @ ..] = rest {
        legacy_watch = true;
        rest = after;
    }
    if rest.is_empty() {
        return Classification::other();
    }

    let mut namespace = None;
    if let ["namespaces", ns, after @ ..] = rest {
        namespace = Some((*ns).to_owned());
        // `namespaces/{ns}/status` and `namespaces/{ns}/finalize` are subresources of the
        // Namespace itself; anything else after the name is a resource inside it.
        if !after.is_empty() && !matches!(after[0], "status" | "finalize") {
            rest = after;
        }
    }
    let target = RequestTarget {
        group: group.to_owned(),
        version: version.to_owned(),
        resource: rest[0].to_owned(),
        namespace,
        name: rest.get(1).map(|name| (*name).to_owned()),
        subresource: rest.get(2).map(|sub| (*sub).to_owned()),
    };

    let named = target.name.is_some();
    let class = match *method {
        Method::GET if legacy_watch || watch_requested(query) => RequestClass::Watch,
        Method::GET if named => RequestClass::Get,
        Method::GET => RequestClass::List,
        Method::POST
            if target.resource == "pods" && target.subresource.as_deref() == Some("eviction") =>
        {
            RequestClass::Eviction
        }
        Method::POST => RequestClass::Create,
        Method::PUT => RequestClass::Update,
        Method::PATCH => RequestClass::Patch,
        Method::DELETE if named => RequestClass::Delete,
        Method::DELETE => RequestClass::DeleteCollection,
        _ => return Classification::other(),
    };
    Classification {
        class,
        target: Some(target),
    }
}

/// The `watch` query parameter, read as the API server reads it: the first value, as Go's
/// `strconv.ParseBool` accepts it.
fn watch_requested(query: Option<&str>) -> bool {
    let Some(query) = query else { return false };
    query
        .split('&')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (key == "watch").then_some(value)
        })
        .next()
        .is_some_and(|value| matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class_of(method: Method, uri: &str) -> RequestClass {
        classify_uri(method, uri).class
    }

    fn classify_uri(method: Method, uri: &str) -> Classification {
        let (path, query) = match uri.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (uri, None),
        };
        classify(&method, path, query)
    }

    fn target(uri: &str) -> RequestTarget {
        classify_uri(Method::GET, uri)
            .target
            .unwrap_or_else(|| panic!("{uri} is a resource request"))
    }

    #[test]
    fn gets_of_collections_are_lists_and_of_named_objects_gets() {
        assert_eq!(class_of(Method::GET, "/api/v1/nodes"), RequestClass::List);
        assert_eq!(
            class_of(Method::GET, "/api/v1/pods?limit=500"),
            RequestClass::List
        );
        assert_eq!(
            class_of(Method::GET, "/api/v1/namespaces/kube-system/configmaps"),
            RequestClass::List
        );
        assert_eq!(class_of(Method::GET, "/api/v1/nodes/n1"), RequestClass::Get);
        assert_eq!(
            class_of(
                Method::GET,
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cluster-autoscaler"
            ),
            RequestClass::Get
        );
        assert_eq!(
            class_of(Method::GET, "/api/v1/namespaces/default/pods/p/status"),
            RequestClass::Get
        );
    }

    #[test]
    fn watches_are_recognised_by_query_or_legacy_prefix() {
        assert_eq!(
            class_of(
                Method::GET,
                "/api/v1/pods?allowWatchBookmarks=true&resourceVersion=12&timeoutSeconds=290&watch=true"
            ),
            RequestClass::Watch
        );
        assert_eq!(
            class_of(Method::GET, "/api/v1/nodes?watch=1"),
            RequestClass::Watch
        );
        assert_eq!(
            class_of(
                Method::GET,
                "/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Dx&watch=true"
            ),
            RequestClass::Watch
        );
        assert_eq!(
            class_of(Method::GET, "/api/v1/watch/namespaces/default/pods"),
            RequestClass::Watch
        );
        assert_eq!(
            class_of(Method::GET, "/api/v1/watch/nodes/n1"),
            RequestClass::Watch
        );
        // Only the first value counts, and only what ParseBool calls true.
        assert_eq!(
            class_of(Method::GET, "/api/v1/nodes?watch=false"),
            RequestClass::List
        );
        assert_eq!(
            class_of(Method::GET, "/api/v1/nodes?watch=0&watch=true"),
            RequestClass::List
        );
        assert_eq!(
            class_of(Method::GET, "/api/v1/nodes?watcher=true"),
            RequestClass::List
        );
        assert_eq!(
            class_of(Method::GET, "/api/v1/nodes?watch"),
            RequestClass::List
        );
    }

    #[test]
    fn a_legacy_watch_path_addresses_the_same_target_as_without_the_prefix() {
        assert_eq!(
            target("/api/v1/watch/namespaces/default/pods"),
            target("/api/v1/namespaces/default/pods")
        );
    }

    #[test]
    fn writes_are_classified_by_method() {
        assert_eq!(
            class_of(Method::POST, "/api/v1/namespaces/default/pods"),
            RequestClass::Create
        );
        assert_eq!(
            class_of(Method::PUT, "/api/v1/nodes/n1"),
            RequestClass::Update
        );
        assert_eq!(
            class_of(Method::PUT, "/api/v1/nodes/n1/status"),
            RequestClass::Update
        );
        assert_eq!(
            class_of(Method::PATCH, "/api/v1/nodes/n1"),
            RequestClass::Patch
        );
        assert_eq!(
            class_of(Method::DELETE, "/api/v1/nodes/n1"),
            RequestClass::Delete
        );
        assert_eq!(
            class_of(Method::DELETE, "/api/v1/namespaces/default/pods"),
            RequestClass::DeleteCollection
        );
        assert_eq!(
            class_of(
                Method::POST,
                "/api/v1/namespaces/kube-system/serviceaccounts/ferroscale/token"
            ),
            RequestClass::Create
        );
    }

    #[test]
    fn only_a_post_of_a_pods_eviction_is_an_eviction() {
        assert_eq!(
            class_of(
                Method::POST,
                "/api/v1/namespaces/default/pods/web-1/eviction"
            ),
            RequestClass::Eviction
        );
        assert_eq!(
            class_of(
                Method::GET,
                "/api/v1/namespaces/default/pods/web-1/eviction"
            ),
            RequestClass::Get
        );
        assert_eq!(
            class_of(
                Method::POST,
                "/api/v1/namespaces/default/pods/web-1/binding"
            ),
            RequestClass::Create
        );
    }

    #[test]
    fn non_resource_paths_and_discovery_are_other() {
        for uri in [
            "/",
            "/version",
            "/healthz",
            "/readyz?verbose",
            "/openapi/v3",
            "/openapi/v3/api/v1",
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/api/v1/watch",
        ] {
            let classification = classify_uri(Method::GET, uri);
            assert_eq!(classification.class, RequestClass::Other, "{uri}");
            assert_eq!(classification.target, None, "{uri}");
        }
        assert_eq!(
            class_of(Method::OPTIONS, "/api/v1/nodes"),
            RequestClass::Other
        );
        assert_eq!(class_of(Method::HEAD, "/api/v1/nodes"), RequestClass::Other);
    }

    #[test]
    fn core_targets_are_parsed_with_namespace_name_and_subresource() {
        assert_eq!(
            target("/api/v1/namespaces/default/pods/web-1/status"),
            RequestTarget {
                group: String::new(),
                version: "v1".into(),
                resource: "pods".into(),
                namespace: Some("default".into()),
                name: Some("web-1".into()),
                subresource: Some("status".into()),
            }
        );
        assert_eq!(
            target("/api/v1/nodes"),
            RequestTarget {
                group: String::new(),
                version: "v1".into(),
                resource: "nodes".into(),
                namespace: None,
                name: None,
                subresource: None,
            }
        );
    }

    #[test]
    fn group_targets_are_parsed_namespaced_and_cluster_scoped() {
        assert_eq!(
            target("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/autoscaler"),
            RequestTarget {
                group: "coordination.k8s.io".into(),
                version: "v1".into(),
                resource: "leases".into(),
                namespace: Some("kube-system".into()),
                name: Some("autoscaler".into()),
                subresource: None,
            }
        );
        assert_eq!(
            target("/apis/apps/v1/namespaces/default/deployments/web/scale"),
            RequestTarget {
                group: "apps".into(),
                version: "v1".into(),
                resource: "deployments".into(),
                namespace: Some("default".into()),
                name: Some("web".into()),
                subresource: Some("scale".into()),
            }
        );
        assert_eq!(
            target("/apis/storage.k8s.io/v1/storageclasses/standard"),
            RequestTarget {
                group: "storage.k8s.io".into(),
                version: "v1".into(),
                resource: "storageclasses".into(),
                namespace: None,
                name: Some("standard".into()),
                subresource: None,
            }
        );
        assert_eq!(target("/apis/apps/v1/deployments").resource, "deployments");
    }

    #[test]
    fn namespaces_themselves_are_a_resource_with_their_own_subresources() {
        assert_eq!(
            class_of(Method::GET, "/api/v1/namespaces"),
            RequestClass::List
        );
        let namespace = target("/api/v1/namespaces/team-a");
        assert_eq!(namespace.resource, "namespaces");
        assert_eq!(namespace.name.as_deref(), Some("team-a"));
        // As the API server does: the namespace of a Namespace is itself.
        assert_eq!(namespace.namespace.as_deref(), Some("team-a"));

        let finalize = target("/api/v1/namespaces/team-a/finalize");
        assert_eq!(finalize.resource, "namespaces");
        assert_eq!(finalize.subresource.as_deref(), Some("finalize"));
        let status = target("/api/v1/namespaces/team-a/status");
        assert_eq!(status.resource, "namespaces");
        assert_eq!(status.subresource.as_deref(), Some("status"));

        let inside = target("/api/v1/namespaces/team-a/configmaps");
        assert_eq!(inside.resource, "configmaps");
        assert_eq!(inside.namespace.as_deref(), Some("team-a"));
        assert_eq!(inside.name, None);
    }

    #[test]
    fn only_writes_are_writes() {
        let writes = [
            RequestClass::Create,
            RequestClass::Eviction,
            RequestClass::Update,
            RequestClass::Patch,
            RequestClass::Delete,
            RequestClass::DeleteCollection,
        ];
        for class in writes {
            assert!(class.is_write(), "{class:?}");
        }
        for class in [
            RequestClass::Watch,
            RequestClass::List,
            RequestClass::Get,
            RequestClass::Other,
        ] {
            assert!(!class.is_write(), "{class:?}");
        }
    }
}
