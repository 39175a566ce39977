//! The CRD manifests committed under `deploy/` are exactly what the types render: a change to a
//! type without regenerating (`cargo run --release -p ferroscale-capacity-apis --example
//! write-crds`) fails here.

use std::path::Path;

#[test]
fn committed_crd_manifests_match_the_types() {
    let root = Path::new("../..");
    let mut stale = Vec::new();
    for (path, expected) in ferroscale_capacity_apis::render_crds().unwrap() {
        let committed = std::fs::read_to_string(root.join(&path)).unwrap_or_default();
        if committed != expected {
            stale.push(path);
        }
    }
    assert!(
        stale.is_empty(),
        "stale generated CRD files {stale:?}: run `cargo run --release -p ferroscale-capacity-apis --example write-crds`"
    );
}

#[test]
fn every_generated_manifest_is_a_crd_of_the_group() {
    for (path, text) in ferroscale_capacity_apis::render_crds().unwrap() {
        if !path.starts_with("deploy/crds/") {
            continue;
        }
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(
            value["kind"].as_str(),
            Some("CustomResourceDefinition"),
            "{path}"
        );
        assert_eq!(
            value["spec"]["group"].as_str(),
            Some("autoscaling.x-k8s.io"),
            "{path}"
        );
    }
}
