//! The cloud config file of the externalgrpc provider (docs/externalgrpc.md GRPC-02), read once at
//! start-up into an [`ExternalGrpcConfig`]: where the service is, whether to use mutual TLS, and
//! the per-call deadline.
//!
//! The file is read the way upstream reads it (YAML through JSON into a struct): keys match
//! without regard to ASCII case, unknown keys are ignored, `null` means "not set", and every value
//! must be a string. Every error names the file, the key and the bad value; nothing here panics on
//! any input.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferroscale_model::time::parse_go_duration;
use serde_yaml_ng::Value;
use thiserror::Error;

/// The per-call deadline when `grpc_timeout` is not set.
pub const DEFAULT_GRPC_TIMEOUT: Duration = Duration::from_secs(5);

/// The address forms a user may write, for error messages.
const ADDRESS_FORMS: &str = "host:port, host%zone:port, [host]:port or [host%zone]:port";

/// The configuration of the provider, checked: the address splits into host and port, the mTLS
/// files are named (they are read when connecting), and the timeout is a duration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalGrpcConfig {
    /// The file (or other source) the configuration was read from, for messages.
    pub source: String,
    pub address: ServerAddress,
    /// `None` (plaintext) when `cert` is empty; `key` and `cacert` are then ignored.
    pub tls: Option<TlsFiles>,
    /// Deadline of every call. Zero when the file says `0s` or a negative duration: upstream
    /// accepts those and every call then fails at once with DEADLINE_EXCEEDED, and so does this
    /// provider.
    pub grpc_timeout: Duration,
    /// `key` or `cacert` given without `cert`: they are ignored, and the connection says so.
    pub ignored_tls_keys: Vec<&'static str>,
}

/// The three files of mutual TLS. All three are required once `cert` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Client certificate (PEM, may hold a chain).
    pub cert: PathBuf,
    /// Private key of the client certificate (PEM: PKCS#1, PKCS#8 or SEC1).
    pub key: PathBuf,
    /// The CA certificates that sign the server certificate (PEM bundle). Only these are trusted.
    pub ca_cert: PathBuf,
}

/// A server address split the way Go's `net.SplitHostPort` splits it, with the zone of a
/// link-local address separated from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerAddress {
    /// As written in the configuration.
    pub written: String,
    /// Without brackets and without zone.
    pub host: String,
    /// The interface of a link-local IPv6 address (`fe80::1%eth0`): a name or a number.
    pub zone: Option<String>,
    pub port: u16,
}

impl ServerAddress {
    /// Splits `written` into host, zone and port. Accepts exactly the documented forms
    /// `host:port`, `host%zone:port`, `[host]:port` and `[host%zone]:port`; an IPv6 literal needs
    /// brackets. Unlike Go, an empty host, an empty zone and a port that is not a number from 1
    /// to 65535 are refused here rather than at the first call.
    pub fn parse(written: &str) -> Result<ServerAddress, &'static str> {
        let (host_and_zone, port) = split_host_port(written)?;
        let (host, zone) = match host_and_zone.split_once('%') {
            Some((_, "")) => return Err("the zone after '%' is empty"),
            Some((host, zone)) => (host, Some(zone.to_string())),
            None => (host_and_zone, None),
        };
        if host.is_empty() {
            return Err("the host is empty");
        }
        if port.is_empty() {
            return Err("the port is empty");
        }
        let port: u16 = port
            .parse()
            .map_err(|_| "the port is not a number from 1 to 65535")?;
        if port == 0 {
            return Err("the port is not a number from 1 to 65535");
        }
        Ok(ServerAddress {
            written: written.to_string(),
            host: host.to_string(),
            zone,
            port,
        })
    }

    /// The host as an IP address, when it is one.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// `host:port` for the `:authority` of requests, with brackets around an IPv6 address and
    /// without zone (a zone is meaningful only on this machine).
    pub fn authority(&self) -> String {
        match self.ip() {
            Some(IpAddr::V6(ip)) => format!("[{ip}]:{}", self.port),
            _ => format!("{}:{}", self.host, self.port),
        }
    }

    /// The name the server certificate must carry (as a DNS or IP SAN): the host part of the
    /// address without brackets. The zone is dropped because no certificate can name one.
    pub fn tls_server_name(&self) -> &str {
        &self.host
    }
}

impl fmt::Display for ServerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

/// Go's `net.SplitHostPort`: the host may be bracketed, the port is what follows the last colon.
fn split_host_port(address: &str) -> Result<(&str, &str), &'static str> {
    let last_colon = address.rfind(':').ok_or("missing port in address")?;
    let (host, rest_start) = if let Some(bracketed) = address.strip_prefix('[') {
        let end = bracketed.find(']').ok_or("missing ']' in address")? + 1;
        if end + 1 == address.len() {
            return Err("missing port in address");
        }
        if end + 1 != last_colon {
            return Err(if address.as_bytes().get(end + 1) == Some(&b':') {
                "too many colons in address"
            } else {
                "missing port in address"
            });
        }
        (&address[1..end], end + 1)
    } else {
        let host = &address[..last_colon];
        if host.contains(':') {
            return Err("too many colons in address (an IPv6 address needs brackets: [host]:port)");
        }
        (host, last_colon)
    };
    // Byte-wise: the first character need not be ASCII, so `address[1..]` could split it.
    let bracketed = address.starts_with('[');
    if address
        .bytes()
        .skip(usize::from(bracketed))
        .any(|b| b == b'[')
    {
        return Err("unexpected '[' in address");
    }
    let closing_allowed_before = if bracketed { rest_start } else { 0 };
    if address
        .bytes()
        .skip(closing_allowed_before)
        .any(|b| b == b']')
    {
        return Err("unexpected ']' in address");
    }
    Ok((host, &address[last_colon + 1..]))
}

/// A configuration that cannot be used. Every variant names the source, and the key and value
/// where there is one.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("reading the externalgrpc cloud config {source_name}: {reason}")]
    Read { source_name: String, reason: String },
    #[error("externalgrpc cloud config {source_name}: not valid YAML: {reason}")]
    Yaml { source_name: String, reason: String },
    #[error(
        "externalgrpc cloud config {source_name}: expected a mapping of keys (address, cert, key, \
         cacert, grpc_timeout) to values, found {found}"
    )]
    NotAMapping { source_name: String, found: String },
    #[error("externalgrpc cloud config {source_name}: key {key:?} must be a string, found {found}")]
    NotAString {
        source_name: String,
        key: String,
        found: String,
    },
    #[error(
        "externalgrpc cloud config {source_name}: key \"address\" is missing or empty: it names the \
         cloud-provider service as {ADDRESS_FORMS}"
    )]
    MissingAddress { source_name: String },
    #[error(
        "externalgrpc cloud config {source_name}: key {key:?} has invalid value {value:?}: {reason} \
         (expected {ADDRESS_FORMS})"
    )]
    Address {
        source_name: String,
        key: String,
        value: String,
        reason: &'static str,
    },
    #[error(
        "externalgrpc cloud config {source_name}: key {key:?} has invalid value {value:?}: {reason} \
         (expected a Go duration such as 500ms, 10s or 1m30s)"
    )]
    Timeout {
        source_name: String,
        key: String,
        value: String,
        reason: String,
    },
    #[error(
        "externalgrpc cloud config {source_name}: key \"cert\" is set, so mutual TLS needs key \
         {missing:?} too, but it is missing or empty"
    )]
    IncompleteTls {
        source_name: String,
        missing: &'static str,
    },
}

/// The keys of the file, as upstream spells them.
const ADDRESS: &str = "address";
const CERT: &str = "cert";
const KEY: &str = "key";
const CA_CERT: &str = "cacert";
const GRPC_TIMEOUT: &str = "grpc_timeout";

impl ExternalGrpcConfig {
    /// Reads and checks the file at `path`.
    pub fn from_file(path: &Path) -> Result<ExternalGrpcConfig, ConfigError> {
        let source_name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            source_name: source_name.clone(),
            reason: error.to_string(),
        })?;
        ExternalGrpcConfig::from_yaml(&source_name, &text)
    }

    /// Reads and checks a YAML document; `source_name` names it in errors.
    pub fn from_yaml(source_name: &str, yaml: &str) -> Result<ExternalGrpcConfig, ConfigError> {
        let document: Value = serde_yaml_ng::from_str(yaml).map_err(|error| ConfigError::Yaml {
            source_name: source_name.to_string(),
            reason: error.to_string(),
        })?;
        let keys = RawKeys::from_document(source_name, &document)?;

        let (address_key, address) = keys.address.ok_or_else(|| ConfigError::MissingAddress {
            source_name: source_name.to_string(),
        })?;
        if address.is_empty() {
            return Err(ConfigError::MissingAddress {
                source_name: source_name.to_string(),
            });
        }
        let address = ServerAddress::parse(&address).map_err(|reason| ConfigError::Address {
            source_name: source_name.to_string(),
            key: address_key,
            value: address.clone(),
            reason,
        })?;

        let non_empty = |entry: &Option<(String, String)>| {
            entry
                .as_ref()
                .map(|(_, value)| value.clone())
                .filter(|value| !value.is_empty())
        };
        let cert = non_empty(&keys.cert);
        let key = non_empty(&keys.key);
        let ca_cert = non_empty(&keys.ca_cert);
        let mut ignored_tls_keys = Vec::new();
        let tls = match cert {
            Some(cert) => {
                let require = |value: Option<String>, missing: &'static str| {
                    value.map(PathBuf::from).ok_or(ConfigError::IncompleteTls {
                        source_name: source_name.to_string(),
                        missing,
                    })
                };
                Some(TlsFiles {
                    cert: PathBuf::from(cert),
                    key: require(key, KEY)?,
                    ca_cert: require(ca_cert, CA_CERT)?,
                })
            }
            None => {
                if key.is_some() {
                    ignored_tls_keys.push(KEY);
                }
                if ca_cert.is_some() {
                    ignored_tls_keys.push(CA_CERT);
                }
                None
            }
        };

        let grpc_timeout = match keys.grpc_timeout {
            None => DEFAULT_GRPC_TIMEOUT,
            Some((key, value)) => parse_timeout(&value).map_err(|reason| ConfigError::Timeout {
                source_name: source_name.to_string(),
                key,
                value,
                reason,
            })?,
        };

        Ok(ExternalGrpcConfig {
            source: source_name.to_string(),
            address,
            tls,
            grpc_timeout,
            ignored_tls_keys,
        })
    }
}

/// A Go duration; a negative one is accepted as zero (every call then fails at once, as upstream).
fn parse_timeout(value: &str) -> Result<Duration, String> {
    let error = |e: ferroscale_model::time::DurationError| e.reason.to_string();
    match value.strip_prefix('-') {
        Some(magnitude) => parse_go_duration(magnitude)
            .map(|_| Duration::ZERO)
            .map_err(error),
        None => parse_go_duration(value).map_err(error),
    }
}

/// The five keys as found in the document: the key as written and its string value. `null`
/// values count as absent.
#[derive(Default)]
struct RawKeys {
    address: Option<(String, String)>,
    cert: Option<(String, String)>,
    key: Option<(String, String)>,
    ca_cert: Option<(String, String)>,
    grpc_timeout: Option<(String, String)>,
}

impl RawKeys {
    fn from_document(source_name: &str, document: &Value) -> Result<RawKeys, ConfigError> {
        let mut keys = RawKeys::default();
        let mapping = match document {
            Value::Mapping(mapping) => mapping,
            // An empty file: every key is absent, which the address check reports.
            Value::Null => return Ok(keys),
            other => {
                return Err(ConfigError::NotAMapping {
                    source_name: source_name.to_string(),
                    found: describe(other),
                });
            }
        };
        for (name, value) in mapping {
            let Value::String(name) = name else {
                continue;
            };
            let slot = if name.eq_ignore_ascii_case(ADDRESS) {
                &mut keys.address
            } else if name.eq_ignore_ascii_case(CERT) {
                &mut keys.cert
            } else if name.eq_ignore_ascii_case(KEY) {
                &mut keys.key
            } else if name.eq_ignore_ascii_case(CA_CERT) {
                &mut keys.ca_cert
            } else if name.eq_ignore_ascii_case(GRPC_TIMEOUT) {
                &mut keys.grpc_timeout
            } else {
                continue;
            };
            match value {
                Value::Null => *slot = None,
                Value::String(text) => *slot = Some((name.clone(), text.clone())),
                other => {
                    return Err(ConfigError::NotAString {
                        source_name: source_name.to_string(),
                        key: name.clone(),
                        found: describe(other),
                    });
                }
            }
        }
        Ok(keys)
    }
}

/// A YAML value in a few words, for messages: its kind and, for scalars, its text.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Sequence(_) => "a list".to_string(),
        Value::Mapping(_) => "a mapping".to_string(),
        Value::Tagged(tagged) => format!("a value tagged {}", tagged.tag),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(address: &str) -> (String, Option<String>, u16) {
        match ServerAddress::parse(address) {
            Ok(parsed) => (parsed.host, parsed.zone, parsed.port),
            Err(reason) => panic!("{address}: {reason}"),
        }
    }

    #[test]
    fn every_documented_address_form_splits_into_host_zone_and_port() {
        assert_eq!(
            parts("ca-external-grpc-cloud-provider-service:8086"),
            (
                "ca-external-grpc-cloud-provider-service".to_string(),
                None,
                8086
            )
        );
        assert_eq!(parts("10.0.0.7:443"), ("10.0.0.7".to_string(), None, 443));
        assert_eq!(
            parts("fe80.local%eth0:8086"),
            ("fe80.local".to_string(), Some("eth0".to_string()), 8086)
        );
        assert_eq!(parts("[::1]:8086"), ("::1".to_string(), None, 8086));
        assert_eq!(
            parts("[service.example]:8086"),
            ("service.example".to_string(), None, 8086)
        );
        assert_eq!(
            parts("[fe80::1%eth0]:8086"),
            ("fe80::1".to_string(), Some("eth0".to_string()), 8086)
        );
        assert_eq!(
            parts("[fe80::1%2]:8086"),
            ("fe80::1".to_string(), Some("2".to_string()), 8086)
        );
    }

    #[test]
    fn addresses_go_would_not_split_or_that_cannot_be_dialled_are_refused_with_the_reason() {
        for (address, reason) in [
            ("service", "missing port"),
            ("::1:8086", "too many colons"),
            ("[::1]", "missing port"),
            ("[::1]8086", "missing port"),
            ("[::1]:80:86", "too many colons"),
            ("[::1:8086", "missing ']'"),
            ("ser[vice:8086", "unexpected '['"),
            ("ser]vice:8086", "unexpected ']'"),
            ("[::1]]:8086", "missing port"),
            ("[::1]:80]86", "unexpected ']'"),
            (":8086", "host is empty"),
            ("service:", "port is empty"),
            ("service:http", "not a number"),
            ("service:0", "not a number"),
            ("service:65536", "not a number"),
            ("[fe80::1%]:8086", "zone"),
            ("dns:///service:8086", "too many colons"),
        ] {
            match ServerAddress::parse(address) {
                Ok(parsed) => panic!("{address} was accepted as {parsed:?}"),
                Err(got) => assert!(got.contains(reason), "{address}: {got}"),
            }
        }
    }

    #[test]
    fn the_authority_brackets_ipv6_and_drops_the_zone_and_the_tls_name_is_the_bare_host() {
        let address = ServerAddress::parse("[fe80::1%eth0]:8086").ok();
        assert_eq!(
            address.as_ref().map(ServerAddress::authority).as_deref(),
            Some("[fe80::1]:8086")
        );
        assert_eq!(
            address.as_ref().map(ServerAddress::tls_server_name),
            Some("fe80::1")
        );
        let named = ServerAddress::parse("[service.example]:8086").ok();
        assert_eq!(
            named.as_ref().map(ServerAddress::authority).as_deref(),
            Some("service.example:8086")
        );
    }

    #[test]
    fn timeouts_take_go_syntax_and_a_negative_one_means_every_call_fails_at_once() {
        assert_eq!(parse_timeout("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_timeout("0"), Ok(Duration::ZERO));
        assert_eq!(parse_timeout("-1s"), Ok(Duration::ZERO));
        assert!(parse_timeout("5").is_err());
        assert!(parse_timeout("5 seconds").is_err());
        assert!(parse_timeout("-x").is_err());
    }
}
