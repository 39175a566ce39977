//! Start-up configuration of the Exoscale provider (docs/exoscale.md EXO-01, EXO-02): credentials
//! and zone from the environment, the API base URL, and the `--nodes=<min>:<max>:<name>` bounds
//! (EXO-13, EXO-14).
//!
//! The environment is read through an injected lookup so that tests never touch the process
//! environment, and secrets live in [`Secret`], which never prints its value.

use std::fmt;

use thiserror::Error;

/// Zone of the cluster; every API call targets it.
pub const ENV_ZONE: &str = "EXOSCALE_ZONE";
/// The IAM API key.
pub const ENV_API_KEY: &str = "EXOSCALE_API_KEY";
/// The IAM API secret.
pub const ENV_API_SECRET: &str = "EXOSCALE_API_SECRET";
/// First label of the API host name (`api` unless set), e.g. `ppapi`.
pub const ENV_API_ENVIRONMENT: &str = "EXOSCALE_API_ENVIRONMENT";
/// Ferroscale only, not upstream: the whole base URL of the API, e.g. `http://127.0.0.1:1234/v2/`,
/// for a local fake of the API or a proxy. Overrides zone and environment in the host name.
pub const ENV_API_ENDPOINT: &str = "EXOSCALE_API_ENDPOINT";

const DEFAULT_ENVIRONMENT: &str = "api";

/// A credential whose value must never reach a log or an error message: `Debug` and `Display`
/// print `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, for signing and the `Authorization` header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Why the provider cannot start. Each names the variable so that the operator knows what to set.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("{ENV_ZONE} is not set: no Exoscale zone specified")]
    MissingZone,
    #[error("{ENV_API_KEY} is not set: no Exoscale API key specified")]
    MissingApiKey,
    #[error("{ENV_API_SECRET} is not set: no Exoscale API secret specified")]
    MissingApiSecret,
    #[error("{variable} is {value:?}: {reason}")]
    InvalidValue {
        variable: &'static str,
        value: String,
        reason: String,
    },
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
}

/// What the provider needs to reach the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExoscaleConfig {
    pub zone: String,
    pub api_key: Secret,
    pub api_secret: Secret,
    /// First label of the host name: `api` by default.
    pub environment: String,
    /// Ferroscale-only override of the whole base URL (see [`ENV_API_ENDPOINT`]).
    pub endpoint: Option<String>,
}

impl ExoscaleConfig {
    /// Reads the variables in upstream's order (zone, key, secret); the first one missing or
    /// empty is the error. `lookup` is `|name| std::env::var(name).ok()` in the binary.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let read = |name: &str| lookup(name).filter(|value| !value.is_empty());
        let zone = read(ENV_ZONE).ok_or(ConfigError::MissingZone)?;
        let api_key = read(ENV_API_KEY).ok_or(ConfigError::MissingApiKey)?;
        let api_secret = read(ENV_API_SECRET).ok_or(ConfigError::MissingApiSecret)?;
        let environment =
            read(ENV_API_ENVIRONMENT).unwrap_or_else(|| DEFAULT_ENVIRONMENT.to_string());
        let endpoint = read(ENV_API_ENDPOINT);
        let config = ExoscaleConfig {
            zone,
            api_key: Secret::new(api_key),
            api_secret: Secret::new(api_secret),
            environment,
            endpoint,
        };
        config.base_url()?;
        Ok(config)
    }

    /// The URL every API path is appended to, ending in `/`: `https://<environment>-<zone>.exoscale.com/v2/`,
    /// or the endpoint override.
    pub fn base_url(&self) -> Result<String, ConfigError> {
        match &self.endpoint {
            None => {
                for (variable, value) in [
                    (ENV_ZONE, &self.zone),
                    (ENV_API_ENVIRONMENT, &self.environment),
                ] {
                    if !is_host_label(value) {
                        return Err(ConfigError::InvalidValue {
                            variable,
                            value: value.clone(),
                            reason: "only letters, digits and '-' can form the API host name"
                                .to_string(),
                        });
                    }
                }
                Ok(format!(
                    "https://{}-{}.exoscale.com/v2/",
                    self.environment, self.zone
                ))
            }
            Some(endpoint) => {
                let invalid = |reason: &str| ConfigError::InvalidValue {
                    variable: ENV_API_ENDPOINT,
                    value: endpoint.clone(),
                    reason: reason.to_string(),
                };
                let url = reqwest::Url::parse(endpoint).map_err(|e| invalid(&e.to_string()))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(invalid("the scheme must be http or https"));
                }
                if url.query().is_some() || url.fragment().is_some() {
                    return Err(invalid("a base URL takes no query or fragment"));
                }
                let mut base = url.to_string();
                if !base.ends_with('/') {
                    base.push('/');
                }
                Ok(base)
            }
        }
    }
}

fn is_host_label(value: &str) -> bool {
    !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// One `--nodes=<min>:<max>:<name>` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGroupSpec {
    pub min: i64,
    pub max: i64,
    pub name: String,
}

/// A `--nodes` value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("failed to parse node group spec: {spec:?}: {reason}")]
pub struct NodeGroupSpecError {
    pub spec: String,
    pub reason: String,
}

impl NodeGroupSpec {
    /// Splits into at most three fields on `:` (the name may contain `:`); min ≥ 1 because scale
    /// from zero is not supported, max ≥ min, name non-empty.
    pub fn parse(spec: &str) -> Result<NodeGroupSpec, NodeGroupSpecError> {
        let error = |reason: String| NodeGroupSpecError {
            spec: spec.to_string(),
            reason,
        };
        let mut fields = spec.splitn(3, ':');
        let (Some(min), Some(max), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(error(
                "expected <min>:<max>:<name>, with fewer than three fields".to_string(),
            ));
        };
        let min: i64 = min
            .parse()
            .map_err(|_| error(format!("min size {min:?} is not an integer")))?;
        let max: i64 = max
            .parse()
            .map_err(|_| error(format!("max size {max:?} is not an integer")))?;
        if min < 1 {
            return Err(error(format!(
                "min size {min} must be at least 1 (scale from zero is not supported)"
            )));
        }
        if max < min {
            return Err(error(format!(
                "max size {max} must be at least the min size {min}"
            )));
        }
        if name.is_empty() {
            return Err(error("the name is empty".to_string()));
        }
        Ok(NodeGroupSpec {
            min,
            max,
            name: name.to_string(),
        })
    }

    /// The first spec named `name`, examining `specs` in flag order and stopping at the first
    /// match: an invalid spec before the match (or anywhere, without a match) is the error.
    pub fn find(specs: &[String], name: &str) -> Result<Option<NodeGroupSpec>, NodeGroupSpecError> {
        for spec in specs {
            let parsed = NodeGroupSpec::parse(spec)?;
            if parsed.name == name {
                return Ok(Some(parsed));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    const ALL: [(&str, &str); 3] = [
        (ENV_ZONE, "ch-gva-2"),
        (ENV_API_KEY, "EXOabc"),
        (ENV_API_SECRET, "s3cr3t"),
    ];

    /// docs/exoscale.md EXO-01: the first missing variable, in upstream's order, is named.
    #[test]
    fn c01_missing_variables_are_named_in_order() {
        assert_eq!(
            ExoscaleConfig::from_lookup(env(&[])),
            Err(ConfigError::MissingZone)
        );
        assert_eq!(
            ExoscaleConfig::from_lookup(env(&[(ENV_ZONE, "ch-gva-2")])),
            Err(ConfigError::MissingApiKey)
        );
        assert_eq!(
            ExoscaleConfig::from_lookup(env(&[(ENV_ZONE, "ch-gva-2"), (ENV_API_KEY, "EXOabc")])),
            Err(ConfigError::MissingApiSecret)
        );
        // Empty counts as missing.
        assert_eq!(
            ExoscaleConfig::from_lookup(env(&[
                (ENV_ZONE, "ch-gva-2"),
                (ENV_API_KEY, ""),
                (ENV_API_SECRET, "x")
            ])),
            Err(ConfigError::MissingApiKey)
        );
        assert_eq!(
            ConfigError::MissingZone.to_string(),
            "EXOSCALE_ZONE is not set: no Exoscale zone specified"
        );
        assert_eq!(
            ConfigError::MissingApiSecret.to_string(),
            "EXOSCALE_API_SECRET is not set: no Exoscale API secret specified"
        );
    }

    /// docs/exoscale.md EXO-02: the host is `<environment>-<zone>.exoscale.com`, environment `api`
    /// by default.
    #[test]
    fn c02_base_url_from_zone_and_environment() {
        let config = ExoscaleConfig::from_lookup(env(&ALL)).unwrap();
        assert_eq!(
            config.base_url().unwrap(),
            "https://api-ch-gva-2.exoscale.com/v2/"
        );
        let mut pre = ALL.to_vec();
        pre.push((ENV_API_ENVIRONMENT, "ppapi"));
        let config = ExoscaleConfig::from_lookup(env(&pre)).unwrap();
        assert_eq!(
            config.base_url().unwrap(),
            "https://ppapi-ch-gva-2.exoscale.com/v2/"
        );
    }

    #[test]
    fn endpoint_override_gets_a_trailing_slash_and_bad_values_are_named() {
        let mut vars = ALL.to_vec();
        vars.push((ENV_API_ENDPOINT, "http://127.0.0.1:1234/v2"));
        let config = ExoscaleConfig::from_lookup(env(&vars)).unwrap();
        assert_eq!(config.base_url().unwrap(), "http://127.0.0.1:1234/v2/");

        let mut vars = ALL.to_vec();
        vars.push((ENV_API_ENDPOINT, "ftp://x/v2/"));
        let error = ExoscaleConfig::from_lookup(env(&vars)).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("EXOSCALE_API_ENDPOINT is \"ftp://x/v2/\""),
            "{error}"
        );

        let mut vars = ALL.to_vec();
        vars[0] = (ENV_ZONE, "ch gva/2");
        let error = ExoscaleConfig::from_lookup(env(&vars)).unwrap_err();
        assert!(error.to_string().contains("EXOSCALE_ZONE"), "{error}");
    }

    #[test]
    fn secrets_never_print() {
        let config = ExoscaleConfig::from_lookup(env(&ALL)).unwrap();
        let printed = format!("{config:?} {}", config.api_secret);
        assert!(!printed.contains("s3cr3t"), "{printed}");
        assert!(!printed.contains("EXOabc"), "{printed}");
        assert_eq!(config.api_secret.expose(), "s3cr3t");
    }

    /// docs/exoscale.md EXO-14 (parsing part): min 0, max < min and non-integers are refused.
    #[test]
    fn c14_node_group_spec_validation() {
        assert_eq!(
            NodeGroupSpec::parse("2:10:workers"),
            Ok(NodeGroupSpec {
                min: 2,
                max: 10,
                name: "workers".to_string()
            })
        );
        assert_eq!(NodeGroupSpec::parse("1:3:a:b").unwrap().name, "a:b");
        for bad in ["0:5:x", "5:2:x", "a:b:x", "1:2", "1:2:", "-1:2:x"] {
            let error = NodeGroupSpec::parse(bad).unwrap_err();
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("failed to parse node group spec: {bad:?}")),
                "{error}"
            );
        }
    }

    /// Specs are examined in order and the search stops at the first match.
    ///
    /// Checks docs/exoscale.md EXO-14.
    #[test]
    fn c14_find_stops_at_the_first_match() {
        let specs = vec![
            "2:5:workers".to_string(),
            "bad".to_string(),
            "3:4:workers".to_string(),
        ];
        assert_eq!(
            NodeGroupSpec::find(&specs, "workers")
                .unwrap()
                .map(|s| s.min),
            Some(2)
        );
        assert!(NodeGroupSpec::find(&specs, "other").is_err());
        assert_eq!(NodeGroupSpec::find(&[], "other"), Ok(None));
    }
}
