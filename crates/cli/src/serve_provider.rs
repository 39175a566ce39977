//! `ferroscale serve-provider`: one of Ferroscale's built-in providers served as the externalgrpc
//! cloud-provider service, like upstream's example server (docs/externalgrpc.md GRPC-32) and with
//! its flag names, but safe by default: without all three TLS files it refuses to start unless
//! `--insecure` says plaintext is meant.
//!
//! - `--cloud-provider=kwok` (or `--provider=kwok`): the kwok provider of the cluster
//!   `--kubeconfig` reaches, configured from its ConfigMap or `--cloud-config`. With it,
//!   `ferroscale run --cloud-provider=externalgrpc` behaves as `--cloud-provider=kwok` does.
//! - `--cloud-provider=sim --scenario=FILE`: the simulator's cloud, the scenario's node groups and
//!   templates with sizes that move as the client asks, and no cluster at all: a reference server
//!   for any externalgrpc client.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use ferroscale_core::cloud::CloudProvider;
use ferroscale_externalgrpc_sdk::{ProviderServer, Tls};
use ferroscale_kube::ApiAccess;
use ferroscale_provider_clusterapi::KubeconfigPaths;
use ferroscale_provider_exoscale::ExoscaleProvider;
use ferroscale_provider_kwok::{ConfigSource, KwokEnvironment, KwokProvider};
use ferroscale_sim::served::ServedSimulation;

use crate::flags::{parse_bool, split_upstream_flags};
use crate::logging::LoggingFlags;

pub const SERVE_PROVIDER_USAGE: &str = "\
Usage: ferroscale serve-provider --cloud-provider=kwok|sim|clusterapi|exoscale [FLAGS]

Serves a built-in cloud provider as the externalgrpc cloud-provider service, for
`ferroscale run --cloud-provider=externalgrpc` or the upstream Cluster Autoscaler.

  --address=:8086                  listen address
  --key-cert=FILE --cert=FILE --ca-cert=FILE
                                   server key, server certificate, and the CA that signs
                                   client certificates: mutual TLS, a client certificate is
                                   required
  --insecure                       serve plaintext (refused without it when a TLS file is
                                   missing): anyone who reaches the port can resize groups
  --cloud-provider=kwok            (or --provider) the kwok provider of the cluster that
  --kubeconfig=FILE                --kubeconfig reaches (default: in-cluster), configured by
  --namespace=kube-system          its ConfigMap in --namespace, or --cloud-config=FILE
  --cloud-provider=sim             the simulator's cloud: the node groups of
  --scenario=FILE                  --scenario (a file or a bundled scenario name)
  --cloud-provider=clusterapi      Cluster API: --kubeconfig is the workload cluster,
                                   --cloud-config the management cluster's kubeconfig, with
                                   --clusterapi-cloud-config-authoritative and
                                   --node-group-auto-discovery=clusterapi:... as for `run`
  --cloud-provider=exoscale        Exoscale: credentials from EXOSCALE_API_KEY,
                                   EXOSCALE_API_SECRET, EXOSCALE_ZONE; --nodes=MIN:MAX:NAME
  --v=1                            5: every call";

/// What `serve-provider` was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeFlags {
    pub address: SocketAddr,
    pub tls: Tls,
    pub provider: ServedProvider,
    /// The logging flags, as for `run` (crate::logging).
    pub logging: Box<LoggingFlags>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServedProvider {
    Kwok {
        kubeconfig: Option<PathBuf>,
        cloud_config: Option<PathBuf>,
        namespace: String,
    },
    Sim {
        scenario: PathBuf,
    },
    ClusterApi {
        kubeconfig: Option<PathBuf>,
        cloud_config: Option<PathBuf>,
        authoritative: bool,
        discovery: Vec<String>,
    },
    Exoscale {
        nodes: Vec<String>,
    },
}

#[derive(Debug)]
pub enum ServeCommand {
    Serve(ServeFlags),
    Help,
}

/// The providers `serve-provider` can serve, for its errors.
const SERVED: &str = "kwok, sim, clusterapi or exoscale";

const VALUE_FLAGS: &[&str] = &[
    "address",
    "key-cert",
    "cert",
    "ca-cert",
    "cloud-provider",
    "provider",
    "cloud-config",
    "scenario",
    "kubeconfig",
    "namespace",
    "cluster-name",
    "nodes",
    "node-group-auto-discovery",
    "clusterapi-cloud-config-authoritative",
];

/// Parses the arguments after `serve-provider`; the error lists every problem, one per line.
pub fn parse_serve_flags(args: &[String]) -> Result<ServeCommand, String> {
    let pairs = split_upstream_flags(
        args,
        |flag| {
            flag == "insecure"
                || flag == "clusterapi-cloud-config-authoritative"
                || crate::logging::is_boolean(flag)
        },
        |flag| flag == "insecure" || VALUE_FLAGS.contains(&flag) || crate::logging::is_flag(flag),
    )
    .map_err(|errors| errors.join("\n"))?;
    if pairs.iter().any(|(flag, _)| flag == "help" || flag == "h") {
        return Ok(ServeCommand::Help);
    }
    let mut errors = Vec::new();
    let mut unknown = Vec::new();
    let mut address_text = ":8086".to_string();
    let (mut key, mut cert, mut ca) = (None, None, None);
    let mut insecure = false;
    let mut provider_name = None;
    let mut cloud_config = None;
    let mut scenario = None;
    let mut kubeconfig = None;
    let mut namespace = "kube-system".to_string();
    let mut logging = LoggingFlags::default();
    let mut authoritative = false;
    let mut discovery = Vec::new();
    let mut nodes = Vec::new();
    let file = |value: &str| Some(PathBuf::from(value)).filter(|p| !p.as_os_str().is_empty());
    for (flag, value) in &pairs {
        match flag.as_str() {
            "address" => address_text = value.clone(),
            "key-cert" => key = file(value),
            "cert" => cert = file(value),
            "ca-cert" => ca = file(value),
            "insecure" => match parse_bool(value) {
                Some(v) => insecure = v,
                None => errors.push(format!(
                    "invalid value {value:?} for flag --insecure: expected true or false"
                )),
            },
            "cloud-provider" | "provider" => provider_name = Some(value.clone()),
            "cloud-config" => cloud_config = file(value),
            "scenario" => scenario = file(value),
            "kubeconfig" => kubeconfig = file(value),
            "namespace" => namespace = value.clone(),
            other if crate::logging::is_flag(other) => {
                if let Err(e) = logging.set(other, value) {
                    errors.push(e);
                }
            }
            "clusterapi-cloud-config-authoritative" => match parse_bool(value) {
                Some(v) => authoritative = v,
                None => errors.push(format!(
                    "invalid value {value:?} for flag --clusterapi-cloud-config-authoritative: expected true or false"
                )),
            },
            "node-group-auto-discovery" => discovery.push(value.clone()),
            "nodes" => nodes.push(value.clone()),
            "cluster-name" => {
                tracing::warn!("--cluster-name is ignored by the served providers")
            }
            other => unknown.push(format!("--{other}")),
        }
    }
    if !unknown.is_empty() {
        errors.push(format!("unknown flags: {}", unknown.join(", ")));
    }
    if let Err(e) = logging.validate() {
        errors.push(e);
    }
    let tls = match (key, cert, ca) {
        (Some(key), Some(cert), Some(ca)) => Some(Tls::mutual(cert, key, ca)),
        (None, None, None) if insecure => Some(Tls::Insecure),
        (key, cert, ca) if insecure => {
            let given = [("--key-cert", &key), ("--cert", &cert), ("--ca-cert", &ca)]
                .iter()
                .filter(|(_, v)| v.is_some())
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
                .join(", ");
            errors.push(format!(
                "--insecure with {given}: give all three TLS files for mutual TLS, or none for plaintext"
            ));
            None
        }
        (key, cert, ca) => {
            let missing = [("--key-cert", &key), ("--cert", &cert), ("--ca-cert", &ca)]
                .iter()
                .filter(|(_, v)| v.is_none())
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
                .join(", ");
            errors.push(format!(
                "mutual TLS needs {missing}: the service creates and deletes machines, so it does not \
                 serve plaintext unless --insecure is given"
            ));
            None
        }
    };
    let provider = match provider_name.as_deref() {
        Some("kwok") => Some(ServedProvider::Kwok {
            kubeconfig,
            cloud_config,
            namespace,
        }),
        Some("sim") => match scenario {
            Some(scenario) => Some(ServedProvider::Sim { scenario }),
            None => {
                errors.push("--cloud-provider=sim needs --scenario=FILE".to_string());
                None
            }
        },
        Some("clusterapi") => Some(ServedProvider::ClusterApi {
            kubeconfig,
            cloud_config,
            authoritative,
            discovery,
        }),
        Some("exoscale") => Some(ServedProvider::Exoscale { nodes }),
        Some(other) => {
            errors.push(format!(
                "--cloud-provider={other}: serve-provider serves {SERVED}"
            ));
            None
        }
        None => {
            errors.push(format!("--cloud-provider is required ({SERVED})"));
            None
        }
    };
    let address = ferroscale_metrics::parse_address(&address_text)
        .map_err(|e| errors.push(e.to_string()))
        .ok();
    match (errors.is_empty(), address, tls, provider) {
        (true, Some(address), Some(tls), Some(provider)) => Ok(ServeCommand::Serve(ServeFlags {
            address,
            tls,
            provider,
            logging: Box::new(logging),
        })),
        _ => Err(errors.join("\n")),
    }
}

/// Serves until SIGTERM or SIGINT; calls in flight finish first.
pub fn serve(flags: ServeFlags) -> anyhow::Result<()> {
    crate::logging::init(&flags.logging)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let provider = build(&flags.provider).await?;
        tracing::info!(
            address = %flags.address,
            provider = provider.name(),
            "serving the externalgrpc cloud-provider service"
        );
        ProviderServer::from_arc(provider)
            .serve(flags.address, flags.tls, crate::run::termination_signal())
            .await
            .context("serving the externalgrpc service")
    })
}

async fn build(provider: &ServedProvider) -> anyhow::Result<Arc<dyn CloudProvider>> {
    Ok(match provider {
        ServedProvider::Kwok {
            kubeconfig,
            cloud_config,
            namespace,
        } => {
            let environment = KwokEnvironment::from_process();
            let client_config = environment.client_config(kubeconfig.as_deref()).await?;
            // The same constructor as `run`'s, without a client-side rate limit: serve-provider
            // has no API-access flags, and one IncreaseSize of hundreds of kwok nodes must not
            // queue its Node creations at client-go's 5 per second.
            let client = unlimited_access()
                .server(client_config)?
                .client()
                .context("building the Kubernetes client")?;
            let namespace = environment.namespace.clone().unwrap_or(namespace.clone());
            let source = match cloud_config {
                Some(path) => ConfigSource::File(path.clone()),
                None => ConfigSource::ConfigMap {
                    namespace: namespace.clone(),
                    name: environment.configmap.clone(),
                },
            };
            Arc::new(
                KwokProvider::build(client, &source, Some(&namespace))
                    .await
                    .context("building the kwok cloud provider")?,
            )
        }
        ServedProvider::Sim { scenario } => {
            let loaded = crate::source::load(Some(scenario), &[])
                .map_err(|invalid| anyhow::anyhow!("{invalid}"))?;
            if loaded.scenario.node_groups.is_empty() {
                bail!(
                    "{}: the scenario has no node groups to serve",
                    scenario.display()
                );
            }
            Arc::new(ServedSimulation::new(
                &loaded.scenario,
                Arc::new(crate::run::system_now),
            ))
        }
        ServedProvider::ClusterApi {
            kubeconfig,
            cloud_config,
            authoritative,
            discovery,
        } => {
            let paths = KubeconfigPaths::select(
                cloud_config.as_deref(),
                kubeconfig.as_deref(),
                *authoritative,
            );
            let environment = KwokEnvironment::from_process();
            let access = unlimited_access();
            let workload =
                access.server(environment.client_config(paths.workload.as_deref()).await?)?;
            Arc::new(
                crate::run::start_clusterapi(&environment, &access, paths, &workload, discovery)
                    .await?,
            )
        }
        ServedProvider::Exoscale { nodes } => Arc::new(
            ExoscaleProvider::from_process_env(nodes)
                .context("building the exoscale cloud provider")?,
        ),
    })
}

/// API access for serve-provider's clients: `run`'s defaults without the rate limit (a negative
/// rate means no limit, as in client-go).
fn unlimited_access() -> ApiAccess {
    ApiAccess {
        qps: -1.0,
        ..ApiAccess::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<ServeFlags, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse_serve_flags(&args)? {
            ServeCommand::Serve(flags) => Ok(flags),
            ServeCommand::Help => Err("help".into()),
        }
    }

    /// The logging flags are `run`'s (crate::logging), a bare boolean among them included.
    #[test]
    fn logging_flags_are_runs() {
        let flags = parse(&[
            "--cloud-provider=sim",
            "--scenario=default",
            "--insecure",
            "--v=5",
            "--skip_headers",
            "--logging-format",
            "json",
        ])
        .unwrap();
        assert_eq!(flags.logging.verbosity, 5);
        assert!(flags.logging.skip_headers);
        assert_eq!(flags.logging.format, crate::logging::LogFormat::Json);
        let err = parse(&[
            "--cloud-provider=sim",
            "--scenario=default",
            "--insecure",
            "--logging-format=yaml",
        ])
        .unwrap_err();
        assert!(err.contains("--logging-format"), "{err}");
    }

    #[test]
    fn mutual_tls_from_the_three_upstream_flags() {
        let flags = parse(&[
            "--cloud-provider=sim",
            "--scenario",
            "default",
            "--key-cert=/tls/tls.key",
            "--cert=/tls/tls.crt",
            "--ca-cert=/tls/ca.crt",
        ])
        .unwrap();
        assert_eq!(flags.address, "0.0.0.0:8086".parse().unwrap());
        assert_eq!(
            flags.tls,
            Tls::mutual("/tls/tls.crt", "/tls/tls.key", "/tls/ca.crt")
        );
        assert_eq!(
            flags.provider,
            ServedProvider::Sim {
                scenario: "default".into()
            }
        );
    }

    #[test]
    fn plaintext_only_when_asked_for() {
        let err = parse(&["--provider=kwok"]).unwrap_err();
        assert!(
            err.contains("--key-cert, --cert, --ca-cert") && err.contains("--insecure"),
            "{err}"
        );
        let err = parse(&["--provider=kwok", "--cert=/c", "--ca-cert=/a"]).unwrap_err();
        assert!(err.contains("needs --key-cert"), "{err}");
        let flags = parse(&["--provider=kwok", "--insecure", "--address=127.0.0.1:9000"]).unwrap();
        assert_eq!(flags.tls, Tls::Insecure);
        let err = parse(&["--provider=kwok", "--insecure", "--cert=/c"]).unwrap_err();
        assert!(err.contains("--insecure with --cert"), "{err}");
    }

    /// The shipped externalgrpc example: the provider server's and the autoscaler's arguments are
    /// accepted, and the autoscaler's cloud config reads and points at the mounted client secret.
    #[test]
    fn the_externalgrpc_example_manifests_are_accepted() {
        let dir = std::path::Path::new("../../deploy/externalgrpc");
        let documents = |file: &str| -> Vec<serde_yaml_ng::Value> {
            let text = std::fs::read_to_string(dir.join(file)).expect("manifest");
            serde_yaml_ng::Deserializer::from_str(&text)
                .map(|d| serde::Deserialize::deserialize(d).expect("YAML document"))
                .collect()
        };
        let args_of = |docs: &[serde_yaml_ng::Value]| -> Vec<String> {
            let deployment = docs
                .iter()
                .find(|d| d["kind"] == "Deployment")
                .expect("a Deployment");
            deployment["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_sequence()
                .expect("args")
                .iter()
                .map(|a| a.as_str().expect("string arg").to_string())
                .collect()
        };
        let server = args_of(&documents("provider-server.yaml"));
        assert_eq!(server.first().map(String::as_str), Some("serve-provider"));
        let flags = match parse_serve_flags(&server[1..]).expect("server flags") {
            ServeCommand::Serve(flags) => flags,
            ServeCommand::Help => panic!("help"),
        };
        assert!(matches!(flags.tls, Tls::Mutual(_)));

        let autoscaler = documents("autoscaler.yaml");
        let run = args_of(&autoscaler);
        assert_eq!(run.first().map(String::as_str), Some("run"));
        assert!(crate::flags::parse_run_flags(&run[1..]).is_ok());
        let config = autoscaler
            .iter()
            .find(|d| d["kind"] == "ConfigMap")
            .and_then(|c| c["data"]["cloud-config.yaml"].as_str())
            .expect("the cloud config");
        let parsed = ferroscale_provider_externalgrpc::ExternalGrpcConfig::from_yaml(
            "autoscaler.yaml",
            config,
        )
        .expect("the cloud config parses");
        assert!(format!("{parsed:?}").contains("/etc/ssl/client-cert/tls.crt"));
    }

    #[test]
    fn bad_flags_are_named() {
        let err = parse(&["--insecure", "--provider=gce", "--colour=blue"]).unwrap_err();
        assert!(err.contains("--cloud-provider=gce"), "{err}");
        assert!(err.contains("unknown flags: --colour"), "{err}");
        let err = parse(&["--insecure", "--provider=sim"]).unwrap_err();
        assert!(err.contains("needs --scenario"), "{err}");
        let err = parse(&["--insecure"]).unwrap_err();
        assert!(err.contains("--cloud-provider is required"), "{err}");
    }

    #[test]
    fn clusterapi_and_exoscale_are_served_with_their_flags() {
        let flags = parse(&[
            "--provider=clusterapi",
            "--insecure",
            "--kubeconfig=/w",
            "--cloud-config=/m",
            "--clusterapi-cloud-config-authoritative",
            "--node-group-auto-discovery=clusterapi:namespace=a",
        ])
        .unwrap();
        assert_eq!(
            flags.provider,
            ServedProvider::ClusterApi {
                kubeconfig: Some(PathBuf::from("/w")),
                cloud_config: Some(PathBuf::from("/m")),
                authoritative: true,
                discovery: vec!["clusterapi:namespace=a".to_string()],
            }
        );
        let flags = parse(&[
            "--cloud-provider=exoscale",
            "--insecure",
            "--nodes=1:5:pool",
        ])
        .unwrap();
        assert_eq!(
            flags.provider,
            ServedProvider::Exoscale {
                nodes: vec!["1:5:pool".to_string()]
            }
        );
    }
}
