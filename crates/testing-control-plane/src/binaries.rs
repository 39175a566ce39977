//! Where the control-plane binaries are: the versioned cache that `scripts/control-plane/build.sh`
//! fills, or a directory named by `FERROSCALE_CONTROL_PLANE_BIN`. The same script builds helm for the
//! Helm chart's tests, found the same way by [`locate_helm`], promtool for the alert rules' test,
//! found by [`locate_promtool`], and the Go peer of the externalgrpc interop tests, found by
//! [`locate_externalgrpc_interop`]; a control plane needs none of them.
//!
//! The pinned versions come from the same `versions.env` file the build script sources, embedded at
//! compile time, so the tests always look where the script put the binaries.

use std::env;
use std::path::{Path, PathBuf};

use crate::Error;

/// A directory holding all five binaries (and helm, for the chart tests); overrides the cache (for
/// binaries built some other way).
pub const BIN_DIR_ENV: &str = "FERROSCALE_CONTROL_PLANE_BIN";
/// The cache root, when not `$HOME/.cache/ferroscale/control-plane`; `build.sh` honours it too.
pub const CACHE_DIR_ENV: &str = "FERROSCALE_CONTROL_PLANE_CACHE";

const VERSIONS_ENV: &str = include_str!("../../../scripts/control-plane/versions.env");

/// The versions pinned in `scripts/control-plane/versions.env`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedVersions {
    /// Kubernetes release of kube-apiserver, kube-scheduler and kube-controller-manager (`v1.36.3`).
    pub kubernetes: String,
    /// etcd release (`v3.6.8`).
    pub etcd: String,
    /// kwok release (`v0.8.0`).
    pub kwok: String,
    /// Helm release the chart tests render with (`v3.21.4`).
    pub helm: String,
    /// Cluster API release whose CRD manifests the Cluster API tests install (`v1.14.2`).
    pub cluster_api: String,
    /// Go module version of Prometheus whose promtool checks the alert rules (`v0.316.0`).
    pub prometheus: String,
}

impl PinnedVersions {
    /// The versions this crate was compiled with.
    pub fn pinned() -> Result<Self, Error> {
        parse_versions(VERSIONS_ENV)
    }
}

fn parse_versions(text: &str) -> Result<PinnedVersions, Error> {
    let value_of = |name: &str| -> Result<String, Error> {
        text.lines()
            .map(str::trim)
            .filter(|line| !line.starts_with('#'))
            .find_map(|line| {
                let (key, value) = line.split_once('=')?;
                (key.trim() == name).then(|| value.trim().to_owned())
            })
            .filter(|value| !value.is_empty())
            .ok_or_else(|| Error::Versions {
                name: name.to_owned(),
            })
    };
    Ok(PinnedVersions {
        kubernetes: value_of("KUBERNETES_VERSION")?,
        etcd: value_of("ETCD_VERSION")?,
        kwok: value_of("KWOK_VERSION")?,
        helm: value_of("HELM_VERSION")?,
        cluster_api: value_of("CLUSTER_API_VERSION")?,
        prometheus: value_of("PROMETHEUS_VERSION")?,
    })
}

/// Finds helm in `FERROSCALE_CONTROL_PLANE_BIN`, else in the versioned cache. Fails, naming the
/// missing file and the command that builds it, when it is absent: a chart test must not pass
/// without rendering the chart.
pub fn locate_helm() -> Result<PathBuf, Error> {
    let versions = PinnedVersions::pinned()?;
    let (helm, looked_in) = match env::var_os(BIN_DIR_ENV).filter(|dir| !dir.is_empty()) {
        Some(dir) => (
            Path::new(&dir).join("helm"),
            format!("{BIN_DIR_ENV} is set, so only that directory was searched"),
        ),
        None => {
            let root = cache_root()?;
            let looked_in = format!("searched the cache {}", root.display());
            (helm_in_cache(&root, &versions), looked_in)
        }
    };
    check_helm_present(helm, &versions, &looked_in)
}

fn helm_in_cache(root: &Path, versions: &PinnedVersions) -> PathBuf {
    root.join(format!("helm-{}/bin/helm", versions.helm))
}

fn check_helm_present(
    helm: PathBuf,
    versions: &PinnedVersions,
    looked_in: &str,
) -> Result<PathBuf, Error> {
    if helm.is_file() {
        Ok(helm)
    } else {
        Err(Error::MissingHelm {
            path: helm,
            version: versions.helm.clone(),
            looked_in: looked_in.to_owned(),
        })
    }
}

/// Finds promtool in `FERROSCALE_CONTROL_PLANE_BIN`, else in the versioned cache. Fails, naming the
/// missing file and the command that builds it, when it is absent: the alert rules' test must not
/// pass without Prometheus having read the rules.
pub fn locate_promtool() -> Result<PathBuf, Error> {
    let versions = PinnedVersions::pinned()?;
    let (promtool, looked_in) = match env::var_os(BIN_DIR_ENV).filter(|dir| !dir.is_empty()) {
        Some(dir) => (
            Path::new(&dir).join("promtool"),
            format!("{BIN_DIR_ENV} is set, so only that directory was searched"),
        ),
        None => {
            let root = cache_root()?;
            let looked_in = format!("searched the cache {}", root.display());
            (promtool_in_cache(&root, &versions), looked_in)
        }
    };
    check_promtool_present(promtool, &versions, &looked_in)
}

fn promtool_in_cache(root: &Path, versions: &PinnedVersions) -> PathBuf {
    root.join(format!("promtool-{}/bin/promtool", versions.prometheus))
}

fn check_promtool_present(
    promtool: PathBuf,
    versions: &PinnedVersions,
    looked_in: &str,
) -> Result<PathBuf, Error> {
    if promtool.is_file() {
        Ok(promtool)
    } else {
        Err(Error::MissingPromtool {
            path: promtool,
            version: versions.prometheus.clone(),
            looked_in: looked_in.to_owned(),
        })
    }
}

/// Name of the externalgrpc interop tool's binary (built from `test-tools/externalgrpc-interop`).
pub const EXTERNALGRPC_INTEROP: &str = "externalgrpc-interop";

/// Finds the externalgrpc interop tool in `FERROSCALE_CONTROL_PLANE_BIN`, else in the cache
/// (`<cache>/externalgrpc-interop/bin`, unversioned: build.sh rebuilds it whenever its sources
/// change). Fails, naming the missing file and the command that builds it, when it is absent: an
/// interop test must not pass without its Go peer.
pub fn locate_externalgrpc_interop() -> Result<PathBuf, Error> {
    let (tool, looked_in) = match env::var_os(BIN_DIR_ENV).filter(|dir| !dir.is_empty()) {
        Some(dir) => (
            Path::new(&dir).join(EXTERNALGRPC_INTEROP),
            format!("{BIN_DIR_ENV} is set, so only that directory was searched"),
        ),
        None => {
            let root = cache_root()?;
            let looked_in = format!("searched the cache {}", root.display());
            (externalgrpc_interop_in_cache(&root), looked_in)
        }
    };
    check_externalgrpc_interop_present(tool, &looked_in)
}

fn externalgrpc_interop_in_cache(root: &Path) -> PathBuf {
    root.join("externalgrpc-interop/bin")
        .join(EXTERNALGRPC_INTEROP)
}

fn check_externalgrpc_interop_present(tool: PathBuf, looked_in: &str) -> Result<PathBuf, Error> {
    if tool.is_file() {
        Ok(tool)
    } else {
        Err(Error::MissingExternalGrpcInterop {
            path: tool,
            looked_in: looked_in.to_owned(),
        })
    }
}

/// The CRD manifests of Cluster API's core objects that `build.sh` copies out of the published
/// `sigs.k8s.io/cluster-api` module, one file each, in the order they are installed.
pub const CLUSTER_API_CRD_FILES: [&str; 5] = [
    "cluster.x-k8s.io_clusters.yaml",
    "cluster.x-k8s.io_machinedeployments.yaml",
    "cluster.x-k8s.io_machinesets.yaml",
    "cluster.x-k8s.io_machines.yaml",
    "cluster.x-k8s.io_machinepools.yaml",
];

/// Finds the Cluster API CRD manifests (every one of [`CLUSTER_API_CRD_FILES`]) in
/// `<cache>/cluster-api-<version>/crds`. They are data, not binaries, so
/// `FERROSCALE_CONTROL_PLANE_BIN` does not apply; `FERROSCALE_CONTROL_PLANE_CACHE` does. Fails,
/// naming the missing file and the command that fetches it, when any is absent: a Cluster API test
/// must not pass without the real CRDs.
pub fn locate_cluster_api_crds() -> Result<Vec<PathBuf>, Error> {
    let versions = PinnedVersions::pinned()?;
    let root = cache_root()?;
    check_cluster_api_crds_present(&cluster_api_crds_in_cache(&root, &versions), &versions)
}

fn cluster_api_crds_in_cache(root: &Path, versions: &PinnedVersions) -> PathBuf {
    root.join(format!("cluster-api-{}/crds", versions.cluster_api))
}

fn check_cluster_api_crds_present(
    dir: &Path,
    versions: &PinnedVersions,
) -> Result<Vec<PathBuf>, Error> {
    CLUSTER_API_CRD_FILES
        .iter()
        .map(|file| {
            let path = dir.join(file);
            if path.is_file() {
                Ok(path)
            } else {
                Err(Error::MissingClusterApiCrds {
                    path,
                    version: versions.cluster_api.clone(),
                })
            }
        })
        .collect()
}

/// Paths of the binaries a control plane runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kwok: PathBuf,
}

impl Binaries {
    /// Finds the binaries from `FERROSCALE_CONTROL_PLANE_BIN`, else in the versioned cache. Fails,
    /// naming the missing file and the command that builds it, when any is absent: a test that needs
    /// a control plane must not pass without one.
    pub fn locate() -> Result<Self, Error> {
        let versions = PinnedVersions::pinned()?;
        let (binaries, looked_in) = match env::var_os(BIN_DIR_ENV).filter(|dir| !dir.is_empty()) {
            Some(dir) => (
                Self::all_in(Path::new(&dir)),
                format!("{BIN_DIR_ENV} is set, so only that directory was searched"),
            ),
            None => {
                let root = cache_root()?;
                let looked_in = format!("searched the cache {}", root.display());
                (Self::in_cache(&root, &versions), looked_in)
            }
        };
        binaries.check_present(&versions, &looked_in)?;
        Ok(binaries)
    }

    fn all_in(dir: &Path) -> Self {
        Binaries {
            etcd: dir.join("etcd"),
            kube_apiserver: dir.join("kube-apiserver"),
            kube_scheduler: dir.join("kube-scheduler"),
            kube_controller_manager: dir.join("kube-controller-manager"),
            kwok: dir.join("kwok"),
        }
    }

    fn in_cache(root: &Path, versions: &PinnedVersions) -> Self {
        let bin = |component: &str, version: &str| root.join(format!("{component}-{version}/bin"));
        let kubernetes = bin("kubernetes", &versions.kubernetes);
        Binaries {
            etcd: bin("etcd", &versions.etcd).join("etcd"),
            kube_apiserver: kubernetes.join("kube-apiserver"),
            kube_scheduler: kubernetes.join("kube-scheduler"),
            kube_controller_manager: kubernetes.join("kube-controller-manager"),
            kwok: bin("kwok", &versions.kwok).join("kwok"),
        }
    }

    fn check_present(&self, versions: &PinnedVersions, looked_in: &str) -> Result<(), Error> {
        for path in [
            &self.etcd,
            &self.kube_apiserver,
            &self.kube_scheduler,
            &self.kube_controller_manager,
            &self.kwok,
        ] {
            if !path.is_file() {
                return Err(Error::MissingBinary {
                    path: path.clone(),
                    versions: format!(
                        "Kubernetes {}, etcd {}, kwok {}",
                        versions.kubernetes, versions.etcd, versions.kwok
                    ),
                    looked_in: looked_in.to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// `$FERROSCALE_CONTROL_PLANE_CACHE`, else `$HOME/.cache/ferroscale/control-plane` (as build.sh).
fn cache_root() -> Result<PathBuf, Error> {
    if let Some(dir) = env::var_os(CACHE_DIR_ENV).filter(|dir| !dir.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .ok_or(Error::NoHome)?;
    Ok(PathBuf::from(home).join(".cache/ferroscale/control-plane"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_versions_file_names_every_component() {
        let versions = PinnedVersions::pinned().expect("versions.env parses");
        assert!(versions.kubernetes.starts_with("v1."), "{versions:?}");
        assert!(versions.etcd.starts_with("v3."), "{versions:?}");
        assert!(versions.cluster_api.starts_with("v1."), "{versions:?}");
        assert!(versions.kwok.starts_with('v'), "{versions:?}");
        assert!(versions.helm.starts_with("v3."), "{versions:?}");
        assert!(versions.prometheus.starts_with("v0.3"), "{versions:?}");
    }

    #[test]
    fn comments_are_skipped_and_a_missing_version_is_named() {
        let text = "# KUBERNETES_VERSION=v0\nKUBERNETES_VERSION=v1.2.3\nETCD_VERSION=v3.4.5\n";
        match parse_versions(text) {
            Err(Error::Versions { name }) => assert_eq!(name, "KWOK_VERSION"),
            other => panic!("expected a missing KWOK_VERSION, got {other:?}"),
        }
        let text = format!("{text}KWOK_VERSION=v0.1.0\n");
        match parse_versions(&text) {
            Err(Error::Versions { name }) => assert_eq!(name, "HELM_VERSION"),
            other => panic!("expected a missing HELM_VERSION, got {other:?}"),
        }
        let text = format!("{text}HELM_VERSION=v3.9.8\n");
        match parse_versions(&text) {
            Err(Error::Versions { name }) => assert_eq!(name, "CLUSTER_API_VERSION"),
            other => panic!("expected a missing CLUSTER_API_VERSION, got {other:?}"),
        }
        let text = format!("{text}CLUSTER_API_VERSION=v1.10.11\n");
        match parse_versions(&text) {
            Err(Error::Versions { name }) => assert_eq!(name, "PROMETHEUS_VERSION"),
            other => panic!("expected a missing PROMETHEUS_VERSION, got {other:?}"),
        }
        let versions =
            parse_versions(&format!("{text}PROMETHEUS_VERSION=v0.316.0\n")).expect("complete");
        assert_eq!(versions.kubernetes, "v1.2.3");
        assert_eq!(versions.helm, "v3.9.8");
        assert_eq!(versions.cluster_api, "v1.10.11");
        assert_eq!(versions.prometheus, "v0.316.0");
    }

    #[test]
    fn cache_layout_matches_the_build_script() {
        let versions = PinnedVersions {
            kubernetes: "v1.2.3".into(),
            etcd: "v3.4.5".into(),
            kwok: "v0.6.7".into(),
            helm: "v3.8.9".into(),
            cluster_api: "v1.10.11".into(),
            prometheus: "v0.316.0".into(),
        };
        let binaries = Binaries::in_cache(Path::new("/cache"), &versions);
        assert_eq!(
            binaries.kube_apiserver,
            Path::new("/cache/kubernetes-v1.2.3/bin/kube-apiserver")
        );
        assert_eq!(binaries.etcd, Path::new("/cache/etcd-v3.4.5/bin/etcd"));
        assert_eq!(binaries.kwok, Path::new("/cache/kwok-v0.6.7/bin/kwok"));
        assert_eq!(
            helm_in_cache(Path::new("/cache"), &versions),
            Path::new("/cache/helm-v3.8.9/bin/helm")
        );
        assert_eq!(
            cluster_api_crds_in_cache(Path::new("/cache"), &versions),
            Path::new("/cache/cluster-api-v1.10.11/crds")
        );
        assert_eq!(
            promtool_in_cache(Path::new("/cache"), &versions),
            Path::new("/cache/promtool-v0.316.0/bin/promtool")
        );
    }

    #[test]
    fn a_missing_binary_fails_with_the_build_command() {
        let empty = tempfile::tempdir().expect("temp dir");
        let versions = PinnedVersions::pinned().expect("versions.env parses");
        let error = Binaries::all_in(empty.path())
            .check_present(&versions, "test")
            .expect_err("nothing is built in an empty directory");
        let message = error.to_string();
        assert!(
            message.contains("scripts/control-plane/build.sh"),
            "{message}"
        );
        assert!(message.contains("etcd"), "{message}");
    }

    #[test]
    fn a_missing_helm_fails_with_the_build_command_and_its_version() {
        let empty = tempfile::tempdir().expect("temp dir");
        let versions = PinnedVersions::pinned().expect("versions.env parses");
        let error = check_helm_present(empty.path().join("helm"), &versions, "test")
            .expect_err("no helm in an empty directory");
        let message = error.to_string();
        assert!(
            message.contains("scripts/control-plane/build.sh"),
            "{message}"
        );
        assert!(message.contains(&versions.helm), "{message}");
        assert!(
            message.contains(&*empty.path().to_string_lossy()),
            "{message}"
        );
    }

    #[test]
    fn a_missing_promtool_fails_with_the_build_command_and_its_version() {
        let empty = tempfile::tempdir().expect("temp dir");
        let versions = PinnedVersions::pinned().expect("versions.env parses");
        let error = check_promtool_present(empty.path().join("promtool"), &versions, "test")
            .expect_err("no promtool in an empty directory");
        let message = error.to_string();
        assert!(
            message.contains("scripts/control-plane/build.sh promtool"),
            "{message}"
        );
        assert!(message.contains(&versions.prometheus), "{message}");
    }

    #[test]
    fn a_missing_interop_tool_fails_with_the_build_command() {
        let empty = tempfile::tempdir().expect("temp dir");
        let error = check_externalgrpc_interop_present(
            externalgrpc_interop_in_cache(empty.path()),
            "searched the test cache",
        )
        .expect_err("no interop tool in an empty cache");
        let message = error.to_string();
        assert!(
            message.contains("scripts/control-plane/build.sh"),
            "{message}"
        );
        assert!(
            message.contains("test-tools/externalgrpc-interop"),
            "{message}"
        );
        assert!(
            message.contains(
                &*empty
                    .path()
                    .join("externalgrpc-interop/bin/externalgrpc-interop")
                    .to_string_lossy()
            ),
            "{message}"
        );
        assert!(message.contains("searched the test cache"), "{message}");
    }

    #[test]
    fn a_built_interop_tool_is_found_where_the_build_script_puts_it() {
        let cache = tempfile::tempdir().expect("temp dir");
        let bin = cache.path().join("externalgrpc-interop/bin");
        std::fs::create_dir_all(&bin).expect("create the cache layout");
        std::fs::write(bin.join("externalgrpc-interop"), "").expect("write a stand-in tool");
        let found =
            check_externalgrpc_interop_present(externalgrpc_interop_in_cache(cache.path()), "test")
                .expect("the tool is there");
        assert_eq!(found, bin.join("externalgrpc-interop"));
    }

    #[test]
    fn missing_cluster_api_crds_fail_with_the_fetch_command() {
        let empty = tempfile::tempdir().expect("temp dir");
        let versions = PinnedVersions::pinned().expect("versions.env parses");
        let dir = cluster_api_crds_in_cache(empty.path(), &versions);
        let error =
            check_cluster_api_crds_present(&dir, &versions).expect_err("no CRDs in an empty cache");
        let message = error.to_string();
        assert!(
            message.contains("scripts/control-plane/build.sh"),
            "{message}"
        );
        assert!(message.contains(&versions.cluster_api), "{message}");
        assert!(
            message.contains(&*dir.join(CLUSTER_API_CRD_FILES[0]).to_string_lossy()),
            "{message}"
        );
    }

    #[test]
    fn fetched_cluster_api_crds_are_found_where_the_build_script_puts_them() {
        let cache = tempfile::tempdir().expect("temp dir");
        let versions = PinnedVersions::pinned().expect("versions.env parses");
        let dir = cache
            .path()
            .join(format!("cluster-api-{}/crds", versions.cluster_api));
        std::fs::create_dir_all(&dir).expect("create the cache layout");
        for file in &CLUSTER_API_CRD_FILES[..4] {
            std::fs::write(dir.join(file), "kind: CustomResourceDefinition").expect("write a CRD");
        }
        let error = check_cluster_api_crds_present(&dir, &versions)
            .expect_err("the MachinePool CRD is missing");
        assert!(
            error.to_string().contains(CLUSTER_API_CRD_FILES[4]),
            "{error}"
        );
        std::fs::write(
            dir.join(CLUSTER_API_CRD_FILES[4]),
            "kind: CustomResourceDefinition",
        )
        .expect("write a CRD");
        let found = check_cluster_api_crds_present(&dir, &versions).expect("all CRDs are there");
        let expected: Vec<PathBuf> = CLUSTER_API_CRD_FILES.iter().map(|f| dir.join(f)).collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn a_present_helm_is_found() {
        let dir = tempfile::tempdir().expect("temp dir");
        let helm = dir.path().join("helm");
        std::fs::write(&helm, "").expect("write a stand-in helm");
        let versions = PinnedVersions::pinned().expect("versions.env parses");
        let found = check_helm_present(helm.clone(), &versions, "test").expect("helm is there");
        assert_eq!(found, helm);
    }
}
