//! Errors about Cluster API objects that users wrote wrongly: each names the object, the annotation
//! or field, the bad value and what is wrong, so it can be shown as a warning Event on the object.

use thiserror::Error;

/// An annotation of a Cluster API object that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{object}: annotation {annotation}={value:?}: {problem}")]
pub struct BadAnnotation {
    /// `Kind namespace/name`, e.g. `MachineDeployment default/md-0`.
    pub object: String,
    pub annotation: String,
    pub value: String,
    pub problem: String,
}

/// A field (or label) of a Cluster API object that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{object}: field {field}={value:?}: {problem}")]
pub struct BadField {
    /// `Kind namespace/name`.
    pub object: String,
    /// Dotted path, e.g. `spec.template.spec.infrastructureRef.kind`.
    pub field: String,
    pub value: String,
    pub problem: String,
}
