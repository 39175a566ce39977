//! Provider ids: normalisation for comparing Node, Machine and MachinePool ids (docs/clusterapi.md
//! CAPI-21), and the synthetic ids given to Machines that have no node yet, are failing or are
//! being deleted (CAPI-28–CAPI-31).

use std::fmt;

/// The comparable form of a provider id: the text after the last `/`, except Azure scale-set ids,
/// which are kept whole because their last segment is not unique.
pub fn normalize_provider_id(id: &str) -> &str {
    if id.starts_with("azure://") && id.contains("virtualMachineScaleSets") {
        return id;
    }
    id.rsplit_once('/').map_or(id, |(_, last)| last)
}

/// Why a Machine has a synthetic id instead of its node's provider id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyntheticKind {
    /// `status.failureMessage` set and phase `Failed`.
    Failed,
    /// The Machine has a deletion timestamp.
    Deleting,
    /// The Machine has no `status.nodeRef` yet.
    Pending,
}

impl SyntheticKind {
    pub const ALL: [SyntheticKind; 3] = [
        SyntheticKind::Failed,
        SyntheticKind::Deleting,
        SyntheticKind::Pending,
    ];

    pub fn prefix(self) -> &'static str {
        match self {
            SyntheticKind::Failed => "failed-machine-",
            SyntheticKind::Deleting => "deleting-machine-",
            SyntheticKind::Pending => "pending-machine-",
        }
    }
}

/// `<prefix><namespace>_<name>`; namespaces cannot contain `_`, so the first `_` separates them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SyntheticId {
    pub kind: SyntheticKind,
    pub namespace: String,
    pub name: String,
}

impl SyntheticId {
    pub fn new(kind: SyntheticKind, namespace: &str, name: &str) -> SyntheticId {
        SyntheticId {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn encode(&self) -> String {
        self.to_string()
    }

    /// The Machine a synthetic id stands for; `None` for any other id.
    pub fn parse(id: &str) -> Option<SyntheticId> {
        SyntheticKind::ALL.into_iter().find_map(|kind| {
            let rest = id.strip_prefix(kind.prefix())?;
            let (namespace, name) = rest.split_once('_')?;
            Some(SyntheticId::new(kind, namespace, name))
        })
    }
}

impl fmt::Display for SyntheticId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}_{}", self.kind.prefix(), self.namespace, self.name)
    }
}

/// Whether `id` is a synthetic id (any of the three prefixes).
pub fn is_synthetic(id: &str) -> bool {
    SyntheticKind::ALL
        .iter()
        .any(|kind| id.starts_with(kind.prefix()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/clusterapi.md CAPI-21.
    #[test]
    fn c21_normalisation_keeps_the_last_segment_except_azure_scale_sets() {
        assert_eq!(normalize_provider_id("aws:////i-12345678"), "i-12345678");
        assert_eq!(normalize_provider_id("aws:///us-east-1a/i-0abc"), "i-0abc");
        assert_eq!(normalize_provider_id("i-12345678"), "i-12345678");
        assert_eq!(normalize_provider_id(""), "");
        let vmss = "azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets/pool/virtualMachines/0";
        assert_eq!(normalize_provider_id(vmss), vmss);
        assert_eq!(
            normalize_provider_id("azure:///subscriptions/s/virtualMachines/vm-1"),
            "vm-1"
        );
    }

    /// docs/clusterapi.md CAPI-31.
    #[test]
    fn c31_synthetic_ids_round_trip_and_split_on_the_first_underscore() {
        for kind in SyntheticKind::ALL {
            let id = SyntheticId::new(kind, "ns1", "machine_with_underscores");
            let text = id.encode();
            assert!(is_synthetic(&text));
            assert_eq!(normalize_provider_id(&text), text);
            assert_eq!(SyntheticId::parse(&text), Some(id));
        }
        assert_eq!(
            SyntheticId::new(SyntheticKind::Pending, "default", "m-1").encode(),
            "pending-machine-default_m-1"
        );
        assert_eq!(SyntheticId::parse("aws:///i-1"), None);
        assert_eq!(SyntheticId::parse("pending-machine-no-separator"), None);
        assert!(!is_synthetic("i-0abc"));
    }
}
