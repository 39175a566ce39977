//! Every annotation and label key the provider reads or writes (docs/clusterapi.md CAPI-01,
//! CAPI-02), the environment variables that configure them (CAPI-02–CAPI-04, CAPI-06), and the
//! default architecture of template nodes.
//!
//! Keys under the Cluster API group follow `CAPI_GROUP`; the others are fixed strings, so they are
//! plain constants and cannot be built with the wrong group by mistake.

/// Environment variable overriding the Cluster API group.
pub const CAPI_GROUP_ENV: &str = "CAPI_GROUP";
/// Environment variable fixing the Cluster API version instead of discovering the preferred one.
pub const CAPI_VERSION_ENV: &str = "CAPI_VERSION";
/// Environment variable with the default `kubernetes.io/arch` of scale-from-zero template nodes.
pub const DEFAULT_ARCH_ENV: &str = "CAPI_SCALE_ZERO_DEFAULT_ARCH";

/// The Cluster API group when `CAPI_GROUP` is unset or empty.
pub const DEFAULT_GROUP: &str = "cluster.x-k8s.io";

/// Presence (any value) on a scalable resource excludes it from autoscaling. Not group-dependent.
pub const PAUSED: &str = "cluster.x-k8s.io/paused";
/// Label on a MachineSet naming its MachineDeployment. Not group-dependent.
pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// Annotation on a MachineSet with its MachineDeployment revision.
pub const REVISION_ANNOTATION: &str = "machinedeployment.clusters.x-k8s.io/revision";

/// Scale-from-zero capacity annotations on a scalable resource (docs/clusterapi.md
/// CAPI-45–CAPI-54).
pub const CAPACITY_CPU: &str = "capacity.cluster-autoscaler.kubernetes.io/cpu";
pub const CAPACITY_MEMORY: &str = "capacity.cluster-autoscaler.kubernetes.io/memory";
pub const CAPACITY_EPHEMERAL_DISK: &str =
    "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk";
pub const CAPACITY_GPU_TYPE: &str = "capacity.cluster-autoscaler.kubernetes.io/gpu-type";
pub const CAPACITY_GPU_COUNT: &str = "capacity.cluster-autoscaler.kubernetes.io/gpu-count";
/// Camel case, as upstream spells it.
pub const CAPACITY_MAX_PODS: &str = "capacity.cluster-autoscaler.kubernetes.io/maxPods";
pub const CAPACITY_LABELS: &str = "capacity.cluster-autoscaler.kubernetes.io/labels";
pub const CAPACITY_TAINTS: &str = "capacity.cluster-autoscaler.kubernetes.io/taints";
pub const CAPACITY_DRA_DRIVER: &str = "capacity.cluster-autoscaler.kubernetes.io/dra-driver";
pub const CAPACITY_CSI_DRIVER: &str = "capacity.cluster-autoscaler.kubernetes.io/csi-driver";

/// The node label users set on GPU nodes (`cluster-api/accelerator=<type>`).
pub const GPU_LABEL: &str = "cluster-api/accelerator";

/// Architectures accepted in `CAPI_SCALE_ZERO_DEFAULT_ARCH`.
pub const ARCHITECTURES: [&str; 4] = ["amd64", "arm64", "ppc64le", "s390x"];
/// The architecture used when `CAPI_SCALE_ZERO_DEFAULT_ARCH` is unset or not accepted.
pub const FALLBACK_ARCHITECTURE: &str = "amd64";

/// The keys that depend on the Cluster API group, computed once from `CAPI_GROUP`. Accessors
/// return owned strings because callers mostly insert them into annotation maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    group: String,
    min_size: String,
    max_size: String,
    options_prefix: String,
    delete_machine: String,
    node_machine: String,
    node_cluster_namespace: String,
    cluster_name_label: String,
}

impl Keys {
    /// From the value of `CAPI_GROUP`; unset and empty both mean [`DEFAULT_GROUP`].
    pub fn new(capi_group: Option<&str>) -> Keys {
        let group = capi_group
            .filter(|g| !g.is_empty())
            .unwrap_or(DEFAULT_GROUP)
            .to_string();
        Keys {
            min_size: format!("{group}/cluster-api-autoscaler-node-group-min-size"),
            max_size: format!("{group}/cluster-api-autoscaler-node-group-max-size"),
            options_prefix: format!("{group}/autoscaling-options-"),
            delete_machine: format!("{group}/delete-machine"),
            node_machine: format!("{group}/machine"),
            node_cluster_namespace: format!("{group}/cluster-namespace"),
            cluster_name_label: format!("{group}/cluster-name"),
            group,
        }
    }

    /// The API group of MachineDeployment, MachineSet, MachinePool and Machine.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Annotation on a scalable resource: the node group's minimum size.
    pub fn min_size(&self) -> String {
        self.min_size.clone()
    }

    /// Annotation on a scalable resource: the node group's maximum size.
    pub fn max_size(&self) -> String {
        self.max_size.clone()
    }

    /// Prefix of the per-group option annotations (docs/clusterapi.md CAPI-55).
    pub fn options_prefix(&self) -> String {
        self.options_prefix.clone()
    }

    /// Annotation written on a Machine so its controller removes it first when replicas drop.
    pub fn delete_machine(&self) -> String {
        self.delete_machine.clone()
    }

    /// Node annotation naming the Machine behind the Node.
    pub fn node_machine(&self) -> String {
        self.node_machine.clone()
    }

    /// Node annotation with the namespace of that Machine.
    pub fn node_cluster_namespace(&self) -> String {
        self.node_cluster_namespace.clone()
    }

    /// Label with the cluster name, read when `spec.clusterName` is absent (docs/clusterapi.md
    /// CAPI-12).
    pub fn cluster_name_label(&self) -> String {
        self.cluster_name_label.clone()
    }
}

impl Default for Keys {
    fn default() -> Keys {
        Keys::new(None)
    }
}

/// The default `kubernetes.io/arch` of template nodes from the value of
/// `CAPI_SCALE_ZERO_DEFAULT_ARCH`, with a warning to log when a value was given but is not one of
/// [`ARCHITECTURES`] (exact, case-sensitive).
///
/// Ferroscale difference: upstream also logs an error when the variable is unset; unset is the
/// normal case, so no warning is returned for it.
pub fn default_architecture(value: Option<&str>) -> (String, Option<String>) {
    match value {
        None | Some("") => (FALLBACK_ARCHITECTURE.to_string(), None),
        Some(arch) if ARCHITECTURES.contains(&arch) => (arch.to_string(), None),
        Some(other) => (
            FALLBACK_ARCHITECTURE.to_string(),
            Some(format!(
                "{DEFAULT_ARCH_ENV}={other:?} is not one of {}; using {FALLBACK_ARCHITECTURE}",
                ARCHITECTURES.join(", ")
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/clusterapi.md CAPI-01.
    #[test]
    fn c01_default_group_gives_cluster_x_k8s_io_size_keys() {
        let keys = Keys::new(None);
        assert_eq!(
            keys.min_size(),
            "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
        );
        assert_eq!(
            keys.max_size(),
            "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
        );
        assert_eq!(keys.group(), "cluster.x-k8s.io");
    }

    /// docs/clusterapi.md CAPI-02.
    #[test]
    fn c02_capi_group_moves_group_keys_but_not_fixed_ones() {
        let keys = Keys::new(Some("test.k8s.io"));
        assert_eq!(keys.group(), "test.k8s.io");
        assert_eq!(
            keys.min_size(),
            "test.k8s.io/cluster-api-autoscaler-node-group-min-size"
        );
        assert_eq!(
            keys.max_size(),
            "test.k8s.io/cluster-api-autoscaler-node-group-max-size"
        );
        assert_eq!(keys.options_prefix(), "test.k8s.io/autoscaling-options-");
        assert_eq!(keys.delete_machine(), "test.k8s.io/delete-machine");
        assert_eq!(keys.node_machine(), "test.k8s.io/machine");
        assert_eq!(
            keys.node_cluster_namespace(),
            "test.k8s.io/cluster-namespace"
        );
        assert_eq!(keys.cluster_name_label(), "test.k8s.io/cluster-name");
        // The fixed keys are constants and stay in their own groups.
        assert_eq!(PAUSED, "cluster.x-k8s.io/paused");
        assert_eq!(DEPLOYMENT_NAME_LABEL, "cluster.x-k8s.io/deployment-name");
        assert_eq!(
            REVISION_ANNOTATION,
            "machinedeployment.clusters.x-k8s.io/revision"
        );
        assert!(CAPACITY_MAX_PODS.starts_with("capacity.cluster-autoscaler.kubernetes.io/"));
    }

    /// docs/clusterapi.md CAPI-03.
    #[test]
    fn c03_empty_capi_group_behaves_as_unset() {
        assert_eq!(Keys::new(Some("")), Keys::new(None));
        assert_eq!(Keys::new(Some("")).group(), DEFAULT_GROUP);
    }

    /// docs/clusterapi.md CAPI-06.
    #[test]
    fn c06_default_architecture_accepts_known_values_only() {
        assert_eq!(
            default_architecture(Some("arm64")),
            ("arm64".to_string(), None)
        );
        assert_eq!(default_architecture(Some("s390x")).0, "s390x");
        assert_eq!(default_architecture(None), ("amd64".to_string(), None));
        let (arch, warning) = default_architecture(Some("wrong"));
        assert_eq!(arch, "amd64");
        assert!(warning.is_some_and(|w| w.contains("wrong") && w.contains(DEFAULT_ARCH_ENV)));
        // Case-sensitive.
        assert!(default_architecture(Some("ARM64")).1.is_some());
    }
}
