//! Labels and the two selector languages of the Kubernetes API: label selectors (pods, PDBs,
//! affinity terms, spread constraints) and node selectors (required node affinity).

mod map;

pub use map::{Labels, LabelsIter};

/// Well-known label keys.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
pub const REGION_BETA: &str = "failure-domain.beta.kubernetes.io/region";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabelOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelRequirement {
    pub key: String,
    pub operator: LabelOperator,
    pub values: Vec<String>,
}

impl LabelRequirement {
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            LabelOperator::In => value.is_some_and(|v| self.values.contains(v)),
            LabelOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            LabelOperator::Exists => value.is_some(),
            LabelOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// A `metav1.LabelSelector`. The empty selector matches every object; an absent selector (where the
/// API allows one) is modelled as `Option::None` by the owner and matches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    pub match_labels: Labels,
    pub match_expressions: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// A selector that requires each of these labels.
    pub fn from_labels<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> LabelSelector {
        LabelSelector {
            match_labels: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            match_expressions: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeRequirement {
    pub key: String,
    pub operator: NodeOperator,
    pub values: Vec<String>,
}

impl NodeRequirement {
    /// Matches one value looked up by `key` (a label value, or the node name for field selectors).
    pub fn matches_value(&self, value: Option<&str>) -> bool {
        match self.operator {
            NodeOperator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            NodeOperator::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            NodeOperator::Exists => value.is_some(),
            NodeOperator::DoesNotExist => value.is_none(),
            NodeOperator::Gt | NodeOperator::Lt => {
                // Both sides must be integers; anything else does not match (as in the scheduler).
                let (Some(v), Some(bound)) = (value, self.values.first()) else {
                    return false;
                };
                match (v.parse::<i64>(), bound.parse::<i64>()) {
                    (Ok(v), Ok(bound)) if self.operator == NodeOperator::Gt => v > bound,
                    (Ok(v), Ok(bound)) => v < bound,
                    _ => false,
                }
            }
        }
    }
}

/// One `nodeSelectorTerm`: every expression and every field requirement must match. A term with no
/// requirement at all matches nothing, as in the scheduler.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeSelectorTerm {
    pub match_expressions: Vec<NodeRequirement>,
    /// Field requirements; the only supported field is `metadata.name`.
    pub match_fields: Vec<NodeRequirement>,
}

impl NodeSelectorTerm {
    pub fn matches(&self, node_name: &str, node_labels: &Labels) -> bool {
        if self.match_expressions.is_empty() && self.match_fields.is_empty() {
            return false;
        }
        self.match_expressions
            .iter()
            .all(|r| r.matches_value(node_labels.get(&r.key).map(String::as_str)))
            && self.match_fields.iter().all(|r| {
                let value = (r.key == "metadata.name").then_some(node_name);
                r.matches_value(value)
            })
    }
}

/// Required node affinity: the terms are ORed. No terms matches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeSelector {
    pub terms: Vec<NodeSelectorTerm>,
}

impl NodeSelector {
    pub fn matches(&self, node_name: &str, node_labels: &Labels) -> bool {
        self.terms.iter().any(|t| t.matches(node_name, node_labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, operator: LabelOperator, values: &[&str]) -> LabelRequirement {
        LabelRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn node_req(key: &str, operator: NodeOperator, values: &[&str]) -> NodeRequirement {
        NodeRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn label_selector_operators() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        assert!(LabelSelector::default().matches(&l));
        assert!(LabelSelector::from_labels([("app", "web")]).matches(&l));
        assert!(!LabelSelector::from_labels([("app", "db")]).matches(&l));
        let with = |r| LabelSelector {
            match_labels: Labels::new(),
            match_expressions: vec![r],
        };
        assert!(with(req("app", LabelOperator::In, &["web", "api"])).matches(&l));
        assert!(!with(req("app", LabelOperator::NotIn, &["web"])).matches(&l));
        assert!(with(req("missing", LabelOperator::NotIn, &["x"])).matches(&l));
        assert!(with(req("tier", LabelOperator::Exists, &[])).matches(&l));
        assert!(!with(req("tier", LabelOperator::DoesNotExist, &[])).matches(&l));
        assert!(with(req("missing", LabelOperator::DoesNotExist, &[])).matches(&l));
    }

    #[test]
    fn node_selector_operators() {
        let l = labels(&[("zone", "a"), ("cores", "8")]);
        let term = |r| NodeSelectorTerm {
            match_expressions: vec![r],
            match_fields: vec![],
        };
        assert!(term(node_req("zone", NodeOperator::In, &["a", "b"])).matches("n", &l));
        assert!(!term(node_req("zone", NodeOperator::NotIn, &["a"])).matches("n", &l));
        assert!(term(node_req("cores", NodeOperator::Gt, &["4"])).matches("n", &l));
        assert!(!term(node_req("cores", NodeOperator::Gt, &["8"])).matches("n", &l));
        assert!(term(node_req("cores", NodeOperator::Lt, &["9"])).matches("n", &l));
        assert!(!term(node_req("zone", NodeOperator::Lt, &["9"])).matches("n", &l));
        assert!(!term(node_req("missing", NodeOperator::Gt, &["1"])).matches("n", &l));
        assert!(term(node_req("missing", NodeOperator::DoesNotExist, &[])).matches("n", &l));
        assert!(!NodeSelectorTerm::default().matches("n", &l));
        let by_name = NodeSelectorTerm {
            match_expressions: vec![],
            match_fields: vec![node_req("metadata.name", NodeOperator::In, &["n"])],
        };
        assert!(by_name.matches("n", &l));
        assert!(!by_name.matches("m", &l));
        let any = NodeSelector {
            terms: vec![term(node_req("zone", NodeOperator::In, &["z"])), by_name],
        };
        assert!(any.matches("n", &l));
        assert!(!NodeSelector::default().matches("n", &l));
    }
}
