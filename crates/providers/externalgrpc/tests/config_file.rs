//! The cloud config file (docs/externalgrpc.md GRPC-02): the documented keys and defaults, every
//! address form, and start-up errors that name the file, the key and the bad value instead of
//! panicking.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use ferroscale_provider_externalgrpc::{
    ConfigError, DEFAULT_GRPC_TIMEOUT, ExternalGrpcConfig, TlsFiles,
};
use support::{config_file, ok};

fn parse(yaml: &str) -> Result<ExternalGrpcConfig, ConfigError> {
    ExternalGrpcConfig::from_yaml("cloud-config.yaml", yaml)
}

fn parsed(yaml: &str) -> ExternalGrpcConfig {
    ok(parse(yaml), yaml)
}

fn error(yaml: &str) -> String {
    match parse(yaml) {
        Ok(config) => panic!("accepted {yaml:?} as {config:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn the_upstream_example_configures_mutual_tls_and_the_timeout() {
    let config = parsed(
        r#"
address: "ca-external-grpc-cloud-provider-service:8086"
cert: /etc/ssl/client-cert/tls.crt
key: /etc/ssl/client-cert/tls.key
cacert: /etc/ssl/client-cert/ca.crt
grpc_timeout: 10s
"#,
    );
    assert_eq!(
        config.address.host,
        "ca-external-grpc-cloud-provider-service"
    );
    assert_eq!(config.address.port, 8086);
    assert_eq!(
        config.tls,
        Some(TlsFiles {
            cert: PathBuf::from("/etc/ssl/client-cert/tls.crt"),
            key: PathBuf::from("/etc/ssl/client-cert/tls.key"),
            ca_cert: PathBuf::from("/etc/ssl/client-cert/ca.crt"),
        })
    );
    assert_eq!(config.grpc_timeout, Duration::from_secs(10));
}

#[test]
fn only_the_address_is_required_and_the_defaults_are_plaintext_and_five_seconds() {
    let config = parsed("address: localhost:8086\n");
    assert_eq!(config.tls, None);
    assert_eq!(config.grpc_timeout, DEFAULT_GRPC_TIMEOUT);
    assert_eq!(DEFAULT_GRPC_TIMEOUT, Duration::from_secs(5));
    // null means "not set", as upstream reads it.
    let config = parsed("address: localhost:8086\ngrpc_timeout: null\ncert: ~\n");
    assert_eq!(config.grpc_timeout, Duration::from_secs(5));
    assert_eq!(config.tls, None);
}

#[test]
fn every_documented_address_form_is_accepted() {
    for (address, host, zone, port) in [
        (
            "service.namespace.svc:8086",
            "service.namespace.svc",
            None,
            8086,
        ),
        ("10.1.2.3:443", "10.1.2.3", None, 443),
        ("host%eth0:8086", "host", Some("eth0"), 8086),
        ("[2001:db8::7]:8086", "2001:db8::7", None, 8086),
        ("[service]:8086", "service", None, 8086),
        ("[fe80::1%eth0]:8086", "fe80::1", Some("eth0"), 8086),
    ] {
        let config = parsed(&format!("address: \"{address}\"\n"));
        assert_eq!(config.address.written, address);
        assert_eq!(config.address.host, host, "{address}");
        assert_eq!(config.address.zone.as_deref(), zone, "{address}");
        assert_eq!(config.address.port, port, "{address}");
    }
}

#[test]
fn an_address_that_does_not_split_into_host_and_port_is_refused_naming_key_and_value() {
    for (address, reason) in [
        ("service", "missing port"),
        ("2001:db8::7:8086", "too many colons"),
        ("dns:///service:8086", "too many colons"),
        ("[2001:db8::7]", "missing port"),
        ("service:http", "not a number"),
    ] {
        let text = error(&format!("address: \"{address}\"\n"));
        assert!(text.contains("cloud-config.yaml"), "{text}");
        assert!(text.contains("\"address\""), "{text}");
        assert!(text.contains(&format!("{address:?}")), "{text}");
        assert!(text.contains(reason), "{text}");
    }
}

#[test]
fn keys_match_without_regard_to_case_and_unknown_keys_are_ignored() {
    let config = parsed(
        "Address: localhost:8086\nGRPC_Timeout: 1m30s\nnodes: [ignored]\nfavourite: colour\n",
    );
    assert_eq!(config.address.port, 8086);
    assert_eq!(config.grpc_timeout, Duration::from_secs(90));
}

#[test]
fn grpc_timeout_takes_go_durations_and_must_be_a_string() {
    assert_eq!(
        parsed("address: a:1\ngrpc_timeout: 500ms\n").grpc_timeout,
        Duration::from_millis(500)
    );
    assert_eq!(
        parsed("address: a:1\ngrpc_timeout: 1h\n").grpc_timeout,
        Duration::from_secs(3600)
    );
    // Accepted as upstream accepts them: every call then fails at once.
    assert_eq!(
        parsed("address: a:1\ngrpc_timeout: 0s\n").grpc_timeout,
        Duration::ZERO
    );
    assert_eq!(
        parsed("address: a:1\ngrpc_timeout: -2s\n").grpc_timeout,
        Duration::ZERO
    );

    let text = error("address: a:1\ngrpc_timeout: 5\n");
    assert!(text.contains("\"grpc_timeout\""), "{text}");
    assert!(text.contains("must be a string"), "{text}");
    assert!(text.contains("the number 5"), "{text}");

    let text = error("address: a:1\ngrpc_timeout: five seconds\n");
    assert!(text.contains("cloud-config.yaml"), "{text}");
    assert!(text.contains("\"grpc_timeout\""), "{text}");
    assert!(text.contains("\"five seconds\""), "{text}");
}

#[test]
fn the_address_is_required_and_must_be_a_string() {
    for yaml in [
        "",
        "grpc_timeout: 5s\n",
        "address: \"\"\n",
        "address: null\n",
    ] {
        let text = error(yaml);
        assert!(text.contains("cloud-config.yaml"), "{text}");
        assert!(text.contains("\"address\" is missing"), "{yaml:?}: {text}");
    }
    let text = error("address: 8086\n");
    assert!(text.contains("\"address\" must be a string"), "{text}");
    let text = error("address: [a, b]\n");
    assert!(text.contains("a list"), "{text}");
}

#[test]
fn a_certificate_without_its_key_or_ca_is_refused_naming_what_is_missing() {
    let text = error("address: a:1\ncert: /tls.crt\ncacert: /ca.crt\n");
    assert!(text.contains("cloud-config.yaml"), "{text}");
    assert!(text.contains("\"key\""), "{text}");
    let text = error("address: a:1\ncert: /tls.crt\nkey: /tls.key\ncacert: \"\"\n");
    assert!(text.contains("\"cacert\""), "{text}");
}

#[test]
fn key_and_ca_without_a_certificate_are_ignored_and_the_connection_is_plaintext() {
    let config = parsed("address: a:1\nkey: /tls.key\ncacert: /ca.crt\n");
    assert_eq!(config.tls, None);
    assert_eq!(config.ignored_tls_keys, ["key", "cacert"]);
}

#[test]
fn malformed_yaml_and_documents_that_are_not_mappings_are_refused_naming_the_file() {
    let text = error("address: [unclosed\n");
    assert!(text.contains("cloud-config.yaml"), "{text}");
    assert!(text.contains("not valid YAML"), "{text}");
    let text = error("- address: a:1\n");
    assert!(text.contains("expected a mapping"), "{text}");
    assert!(text.contains("a list"), "{text}");
    let text = error("just a string\n");
    assert!(text.contains("the string \"just a string\""), "{text}");
}

#[test]
fn a_file_is_read_from_disk_and_an_unreadable_one_is_named() {
    let file = config_file("address: localhost:8086\n");
    let config = ok(
        ExternalGrpcConfig::from_file(&file.path),
        "reading the file",
    );
    assert_eq!(config.source, file.path.display().to_string());
    assert_eq!(config.address.port, 8086);

    let missing = file.dir.path().join("absent.yaml");
    match ExternalGrpcConfig::from_file(&missing) {
        Ok(config) => panic!("read {config:?} from a missing file"),
        Err(error) => {
            assert!(matches!(error, ConfigError::Read { .. }), "{error}");
            assert!(error.to_string().contains("absent.yaml"), "{error}");
        }
    }

    let bad = config_file("address: localhost\n");
    match ExternalGrpcConfig::from_file(&bad.path) {
        Ok(config) => panic!("accepted {config:?}"),
        Err(error) => assert!(
            error.to_string().contains(&bad.path.display().to_string()),
            "{error}"
        ),
    }
}
