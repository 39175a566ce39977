//! Which DaemonSet pods a node deletion evicts (3.8 items 4–5): on drained nodes when
//! `--daemonset-eviction-for-occupied-nodes` (default on), on empty nodes when
//! `--daemonset-eviction-for-empty-nodes` (default off); the pod annotation
//! `cluster-autoscaler.kubernetes.io/enable-ds-eviction` overrides both ways.

use ferroscale_model::Pod;

use super::ENABLE_DS_EVICTION_ANNOTATION;

/// Whether this DaemonSet pod is evicted (best-effort) when its node is deleted. `flag` is the
/// eviction flag for the kind of deletion (empty or drained).
pub(super) fn evict_daemonset_pod(pod: &Pod, flag: bool) -> bool {
    match pod
        .annotations
        .get(ENABLE_DS_EVICTION_ANNOTATION)
        .map(String::as_str)
    {
        Some("true") => true,
        Some("false") => false,
        _ => flag,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotation_overrides_the_flag_both_ways() {
        let mut pod = Pod::new("kube-system", "ds");
        assert!(evict_daemonset_pod(&pod, true));
        assert!(!evict_daemonset_pod(&pod, false));
        pod.annotations
            .insert(ENABLE_DS_EVICTION_ANNOTATION.into(), "true".into());
        assert!(evict_daemonset_pod(&pod, false));
        pod.annotations
            .insert(ENABLE_DS_EVICTION_ANNOTATION.into(), "false".into());
        assert!(!evict_daemonset_pod(&pod, true));
    }
}
