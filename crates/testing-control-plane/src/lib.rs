//! Test support: a real Kubernetes control plane on loopback for Ferroscale's integration tests.
//!
//! [`ControlPlane::start`] runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
//! (which plays the kubelet for fake nodes) from the binaries that `scripts/control-plane/build.sh`
//! builds, each instance with its own ports, certificates and directory so tests can run in
//! parallel. Dropping the [`ControlPlane`] stops every process.
//!
//! A missing binary is an error that says how to build it, never a skipped test: a test that needs a
//! control plane cannot pass without one. [`locate_helm`] finds, the same way, the helm that the same
//! script builds for the Helm chart's tests, [`locate_promtool`] the promtool that checks the shipped
//! alert rules, and [`locate_externalgrpc_interop`] the Go peer of the externalgrpc interop tests.
//!
//! ```no_run
//! use ferroscale_testing_control_plane::ControlPlane;
//!
//! let control_plane = ControlPlane::start()?;
//! // Point any Kubernetes client at control_plane.kubeconfig_path(); create nodes annotated
//! // kwok.x-k8s.io/node=fake and kwok makes them Ready and runs the pods bound to them.
//! control_plane.restart_apiserver()?;
//! # Ok::<(), ferroscale_testing_control_plane::Error>(())
//! ```

mod binaries;
pub mod capacity_apis;
pub mod cluster_api;
mod control_plane;
mod pki;
mod probe;
mod process;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use binaries::{
    BIN_DIR_ENV, Binaries, CACHE_DIR_ENV, CLUSTER_API_CRD_FILES, EXTERNALGRPC_INTEROP,
    PinnedVersions, locate_cluster_api_crds, locate_externalgrpc_interop, locate_helm,
    locate_promtool,
};
pub use capacity_apis::{CAPACITY_CRD_FILES, install_capacity_crds};
pub use cluster_api::{
    ClusterApi, ClusterApiError, ClusterApiKind, InstalledClusterApi, MachineController,
    ScalableResource, install_cluster_api_crds, wait_for_machines,
};
pub use control_plane::{
    ControlPlane, FAKE_NODE_ANNOTATION_KEY, FAKE_NODE_ANNOTATION_VALUE, KEEP_DIR_ENV, Options,
};
pub use pki::{ADMIN_USER, ClientCertificate, PkiFiles};

/// Why a control plane could not be started or restarted.
///
/// `Debug` prints the same text as `Display`: tests end in `.expect(..)`, and the message (with the
/// build command, or the end of a component's log) is what the reader of a failed test needs.
#[derive(thiserror::Error)]
pub enum Error {
    #[error(
        "control-plane binary {path} is missing ({looked_in}): run scripts/control-plane/build.sh to \
         build the pinned {versions} into the cache (about 13 minutes cold on 2 cores), or set \
         FERROSCALE_CONTROL_PLANE_BIN to a directory holding etcd, kube-apiserver, kube-scheduler, \
         kube-controller-manager and kwok"
    )]
    MissingBinary {
        path: PathBuf,
        versions: String,
        /// Which directory was searched and why: the cache, or FERROSCALE_CONTROL_PLANE_BIN.
        looked_in: String,
    },

    #[error(
        "helm {path} is missing ({looked_in}): run scripts/control-plane/build.sh to build the \
         pinned Helm {version} into the cache (about 5 minutes cold on 2 cores), or put a helm \
         binary in FERROSCALE_CONTROL_PLANE_BIN"
    )]
    MissingHelm {
        path: PathBuf,
        version: String,
        /// Which directory was searched and why: the cache, or FERROSCALE_CONTROL_PLANE_BIN.
        looked_in: String,
    },

    #[error(
        "promtool {path} is missing ({looked_in}): run scripts/control-plane/build.sh promtool to \
         build Prometheus {version}'s promtool into the cache (about 3.5 minutes cold on 2 cores), \
         or put a promtool binary in FERROSCALE_CONTROL_PLANE_BIN"
    )]
    MissingPromtool {
        path: PathBuf,
        version: String,
        /// Which directory was searched and why: the cache, or FERROSCALE_CONTROL_PLANE_BIN.
        looked_in: String,
    },

    #[error(
        "the externalgrpc interop tool {path} is missing ({looked_in}): run \
         scripts/control-plane/build.sh to build it from test-tools/externalgrpc-interop into the \
         cache (about 70 seconds cold on 2 cores), or put an externalgrpc-interop binary in \
         FERROSCALE_CONTROL_PLANE_BIN"
    )]
    MissingExternalGrpcInterop {
        path: PathBuf,
        /// Which directory was searched and why: the cache, or FERROSCALE_CONTROL_PLANE_BIN.
        looked_in: String,
    },

    #[error(
        "the Cluster API CRD manifest {path} is missing: run scripts/control-plane/build.sh to fetch \
         the CRDs of the pinned Cluster API {version} (sigs.k8s.io/cluster-api, a few seconds) into \
         the cache"
    )]
    MissingClusterApiCrds { path: PathBuf, version: String },

    #[error("scripts/control-plane/versions.env has no value for {name}")]
    Versions { name: String },

    #[error(
        "HOME is not set, so the control-plane cache cannot be found; set HOME or FERROSCALE_CONTROL_PLANE_CACHE"
    )]
    NoHome,

    #[error("could not {action}: {source}")]
    Io {
        action: String,
        #[source]
        source: std::io::Error,
    },

    #[error("generating the control plane's certificates failed: {0}")]
    Certificates(#[from] rcgen::Error),

    #[error("setting up TLS for the health probes failed: {0}")]
    Tls(#[from] rustls::Error),

    #[error("writing the kubeconfig failed: {0}")]
    Kubeconfig(#[from] serde_yaml_ng::Error),

    #[error("{component} exited during start-up ({status}); end of its log {log}:\n{log_tail}")]
    ComponentExited {
        component: &'static str,
        status: String,
        log: PathBuf,
        log_tail: String,
    },

    #[error(
        "{component} was not ready within {timeout:?} (last probe: {last_problem}); end of its log \
         {log}:\n{log_tail}"
    )]
    NotReady {
        component: &'static str,
        timeout: Duration,
        last_problem: String,
        log: PathBuf,
        log_tail: String,
    },

    #[error("the API server is {0}")]
    ApiServerState(&'static str),

    #[error("kube-scheduler is not running (never started, or already stopped)")]
    SchedulerNotRunning,
}

impl fmt::Debug for Error {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, formatter)
    }
}

impl Error {
    /// A component lost the race for a port picked as free (another test took it in between); a
    /// fresh start with new ports fixes that.
    fn is_port_clash(&self) -> bool {
        match self {
            Error::ComponentExited { log_tail, .. } | Error::NotReady { log_tail, .. } => {
                log_tail.contains("address already in use")
            }
            _ => false,
        }
    }
}
