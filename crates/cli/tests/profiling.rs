//! `--profiling` heap profiles as an operator takes them: `GET /debug/pprof/heap` on the metrics
//! port answers a gzip-compressed pprof protobuf (what `go tool pprof` reads) with the bytes in use
//! by allocation site, function names resolved; without the flag the path is not served.
//!
//! No control plane is needed: `run` is pointed at a loopback port where nothing listens and
//! serves its HTTP endpoints while it waits for its caches; the test stops it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pprof::protos::{Message, Profile};

mod support;
use support::{free_port, write_kubeconfig};

/// A running `ferroscale run`, stopped when dropped.
struct Running {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `ferroscale run --cloud-provider=externalgrpc` (which needs nothing from the API server
/// to start) against a refusing API server with `extra` flags, and waits until its HTTP server
/// answers.
fn start(extra: &[&str], env: &[(&str, &str)]) -> Running {
    let dir = tempfile::tempdir().expect("temporary directory");
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, &format!("https://127.0.0.1:{}", free_port()));
    let cloud_config = dir.path().join("cloud-config.yaml");
    std::fs::write(
        &cloud_config,
        format!("address: \"127.0.0.1:{}\"\n", free_port()),
    )
    .expect("write the cloud config");
    let port = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferroscale"));
    command
        .args([
            "run".to_string(),
            "--cloud-provider=externalgrpc".to_string(),
            format!("--cloud-config={}", cloud_config.display()),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--address=127.0.0.1:{port}"),
            // Alive for the whole test; the test stops it.
            "--cache-sync-timeout=10m".to_string(),
        ])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    let child = command.spawn().expect("start the ferroscale binary");
    let mut running = Running {
        child,
        port,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(port, "/health-check").is_none() {
        if let Ok(Some(status)) = running.child.try_wait() {
            panic!("ferroscale exited before serving HTTP: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "ferroscale serves /health-check within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    running
}

/// An HTTP answer: status, Content-Type, body.
struct Answer {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

fn get(port: u16, path: &str) -> Option<Answer> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let end = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&response[..end]).into_owned();
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let content_type = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    Some(Answer {
        status,
        content_type,
        body: response[end + 4..].to_vec(),
    })
}

#[test]
fn a_heap_profile_is_a_gzipped_pprof_protobuf_naming_ferroscales_functions() {
    let running = start(
        &["--profiling=true"],
        &[
            // The default rate (one sample per 512 KiB allocated) leaves an idle process's profile
            // to chance; one per 4 KiB makes the assertions below certain. jemalloc reads this
            // after the binary's own options, which it overrides only in the rate.
            ("_RJEM_MALLOC_CONF", "lg_prof_sample:12"),
            // The dump needs no writable temporary directory (the image's root is read-only).
            ("TMPDIR", "/nonexistent-ferroscale-tmp"),
        ],
    );
    let answer = get(running.port, "/debug/pprof/heap").expect("/debug/pprof/heap answers");
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(answer.content_type, "application/octet-stream");
    let mut decoded = Vec::new();
    flate2::read::GzDecoder::new(answer.body.as_slice())
        .read_to_end(&mut decoded)
        .expect("a gzip body");
    let profile = Profile::decode(decoded.as_slice()).expect("a pprof Profile protobuf");

    let string = |index: i64| {
        usize::try_from(index)
            .ok()
            .and_then(|i| profile.string_table.get(i))
            .map(String::as_str)
            .unwrap_or("")
    };
    let types: Vec<(&str, &str)> = profile
        .sample_type
        .iter()
        .map(|t| (string(t.ty), string(t.unit)))
        .collect();
    assert_eq!(types, [("inuse_space", "bytes")]);
    assert!(
        profile.sample.iter().any(|s| s.value.first() > Some(&0)),
        "some memory is in use: {} samples",
        profile.sample.len()
    );

    // pprof tools cut each stack at its root-most frame matching `drop_frames` (dropping that
    // frame and what it called, as Go's tools do): every stack has such a frame (the allocator),
    // and what remains of some stack still names Ferroscale's code.
    let drop_frames = string(profile.drop_frames);
    assert!(!drop_frames.is_empty(), "drop_frames names the allocator");
    let dropped = regex::Regex::new(&format!("^(?:{drop_frames})$")).expect("a regexp");
    // A sample's function names, root first (pprof lists locations leaf first, and a location's
    // inlined lines innermost first).
    let stack = |sample: &pprof::protos::Sample| -> Vec<String> {
        let mut names = Vec::new();
        for id in sample.location_id.iter().rev() {
            let Some(location) = profile.location.iter().find(|l| l.id == *id) else {
                continue;
            };
            for line in location.line.iter().rev() {
                if let Some(function) = profile.function.iter().find(|f| f.id == line.function_id) {
                    names.push(string(function.name).to_string());
                }
            }
        }
        names
    };
    let mut kept_stacks = Vec::new();
    for sample in &profile.sample {
        let names = stack(sample);
        let cut = names.iter().position(|name| dropped.is_match(name));
        assert!(
            cut.is_some(),
            "an allocator frame in every stack: {names:?}"
        );
        kept_stacks.push(names[..cut.unwrap_or(names.len())].to_vec());
    }
    assert!(
        kept_stacks
            .iter()
            .any(|kept| kept.iter().any(|name| name.starts_with("ferroscale"))),
        "a stack in Ferroscale's code among {} samples; first stacks: {:?}",
        kept_stacks.len(),
        kept_stacks.iter().take(3).collect::<Vec<_>>()
    );
}

#[test]
fn without_profiling_the_heap_profile_is_not_served() {
    let running = start(&[], &[]);
    let answer = get(running.port, "/debug/pprof/heap").expect("/debug/pprof/heap answers");
    assert_eq!(answer.status, 404);
    let text = String::from_utf8_lossy(&answer.body);
    assert!(text.contains("--profiling"), "names the flag: {text}");
}
