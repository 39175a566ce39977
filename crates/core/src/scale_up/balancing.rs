//! Balancing similar node groups (spec 2.9).

use crate::cloud::NodeTemplate;
use crate::options::AutoscalingOptions;

/// Whether two templates are similar enough to balance a scale-up between their groups.
pub fn templates_similar(a: &NodeTemplate, b: &NodeTemplate, options: &AutoscalingOptions) -> bool {
    let _ = options;
    a.node.capacity == b.node.capacity
}
