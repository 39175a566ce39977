//! The log of the `ferroscale` binary as an operator's tooling reads it: klog text lines by
//! default, JSON lines with the field names of Kubernetes components under
//! `--logging-format=json`, `--log-file` with `--logtostderr=false`, and the logging flags of
//! upstream's Helm chart accepted as they are.
//!
//! No control plane is needed: `run` is pointed at a loopback port where nothing listens, logs
//! while it waits for its caches, and gives up after a short `--cache-sync-timeout`.

use std::path::Path;
use std::process::{Command, Output, Stdio};

mod support;
use support::{free_port, write_kubeconfig};

/// Runs `ferroscale run --cloud-provider=externalgrpc` (which needs nothing from the API server
/// to start) against a refusing API server with `extra` flags, until it gives up. Returns the
/// output and the server's URL.
fn run_unreachable(dir: &Path, extra: &[String]) -> (Output, String) {
    let server = format!("https://127.0.0.1:{}", free_port());
    let kubeconfig = dir.join("kubeconfig");
    write_kubeconfig(&kubeconfig, &server);
    let cloud_config = dir.join("cloud-config.yaml");
    std::fs::write(
        &cloud_config,
        format!("address: \"127.0.0.1:{}\"\n", free_port()),
    )
    .expect("write the cloud config");
    let mut args = vec![
        "run".to_string(),
        "--cloud-provider=externalgrpc".to_string(),
        format!("--cloud-config={}", cloud_config.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--address=127.0.0.1:{}", free_port()),
        "--cache-sync-timeout=4s".to_string(),
    ];
    args.extend_from_slice(extra);
    let output = Command::new(env!("CARGO_BIN_EXE_ferroscale"))
        .args(&args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run the ferroscale binary");
    (output, server)
}

/// The log lines of stderr: everything before the final `error:` line that `run` prints when it
/// gives up.
fn log_lines(output: &Output) -> Vec<String> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "gives up on the unreachable server: {:?}\n{stderr}",
        output.status
    );
    let lines: Vec<String> = stderr.lines().map(str::to_string).collect();
    let last = lines.last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("error:") && last.contains("did not sync"),
        "ends with the cache-sync error: {stderr}"
    );
    lines[..lines.len() - 1].to_vec()
}

/// Whether a line starts with klog's header `Lmmdd hh:mm:ss.uuuuuu`.
fn is_klog_line(line: &str) -> bool {
    let bytes = line.as_bytes();
    bytes.len() > 22
        && matches!(bytes[0], b'I' | b'W' | b'E' | b'F')
        && bytes[1..5].iter().all(u8::is_ascii_digit)
        && bytes[5] == b' '
        && bytes[8] == b':'
        && bytes[14] == b'.'
        && line.contains("] ")
}

#[test]
fn json_logs_are_one_object_per_line_with_the_kubernetes_field_names() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (output, server) = run_unreachable(
        dir.path(),
        &["--logging-format=json".to_string(), "--v=4".to_string()],
    );
    let lines = log_lines(&output);
    assert!(lines.len() >= 2, "a few lines while waiting: {lines:?}");
    let mut names_the_server = false;
    for line in &lines {
        let object: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(object["ts"].is_f64(), "ts is a number: {line}");
        let caller = object["caller"].as_str().expect("caller");
        assert!(caller.contains(".rs:"), "caller is file:line: {line}");
        assert!(object["msg"].is_string(), "msg: {line}");
        match object.get("v") {
            Some(v) => assert!(v.is_u64(), "v is a level: {line}"),
            None => assert!(
                object.get("err").is_some(),
                "only errors lack v, and they carry err: {line}"
            ),
        }
        if let Some(err) = object.get("err") {
            assert!(err.is_string(), "{line}");
        }
        names_the_server |= line.contains(&server);
    }
    assert!(names_the_server, "the log names the API server: {lines:?}");
}

#[test]
fn log_file_takes_the_log_and_stderr_keeps_what_the_threshold_lets_through() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let log_file = dir.path().join("logs").join("cluster-autoscaler.log");
    let (output, server) = run_unreachable(
        dir.path(),
        &[
            "--logtostderr=false".to_string(),
            format!("--log-file={}", log_file.display()),
            "--stderrthreshold=FATAL".to_string(),
            "--v=4".to_string(),
        ],
    );
    let stderr_lines = log_lines(&output);
    assert!(
        stderr_lines.is_empty(),
        "nothing below FATAL on stderr: {stderr_lines:?}"
    );
    let text = std::fs::read_to_string(&log_file).expect("the log file was written");
    assert!(text.starts_with("Log file created at: "), "{text}");
    let lines: Vec<&str> = text.lines().filter(|line| is_klog_line(line)).collect();
    assert!(lines.len() >= 2, "klog lines in the file:\n{text}");
    assert!(
        text.contains(&server),
        "the file names the API server:\n{text}"
    );
}

#[test]
fn the_upstream_charts_logging_flags_are_accepted() {
    let dir = tempfile::tempdir().expect("temporary directory");
    // As upstream's chart renders them by default.
    let (output, _) = run_unreachable(
        dir.path(),
        &[
            "--logtostderr=true".to_string(),
            "--stderrthreshold=info".to_string(),
            "--v=4".to_string(),
        ],
    );
    let lines = log_lines(&output);
    assert!(!lines.is_empty(), "it logs while it waits");
    for line in &lines {
        assert!(is_klog_line(line), "a klog text line: {line}");
    }
    assert!(
        lines.iter().any(|line| line.starts_with('I')),
        "information is shown at --v=4: {lines:?}"
    );
}
