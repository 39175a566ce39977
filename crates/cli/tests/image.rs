//! The image's build stage without a container runtime: the Dockerfile's step after `cargo
//! build` is run as written against the binary under test (no container runtime can run in
//! the test environment), and its result is checked as the image ships it — a binary without
//! debug sections that starts, reachable as `./cluster-autoscaler` from its directory as
//! upstream's chart runs it, and that runs as non-root.

use std::path::{Path, PathBuf};
use std::process::Command;

fn dockerfile() -> String {
    let path = Path::new("../../Dockerfile");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `RUN` instructions of the build stage, continuation lines joined.
fn build_stage_runs(text: &str) -> Vec<String> {
    let mut runs = Vec::new();
    let mut current: Option<String> = None;
    let mut stage = 0;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("FROM ") {
            stage += 1;
        }
        if stage != 1 || trimmed.starts_with('#') {
            continue;
        }
        if let Some(command) = current.as_mut() {
            command.push(' ');
            command.push_str(trimmed.trim_end_matches('\\').trim());
        } else if let Some(command) = trimmed.strip_prefix("RUN ") {
            current = Some(command.trim_end_matches('\\').trim().to_string());
        }
        if !trimmed.ends_with('\\')
            && let Some(command) = current.take()
        {
            runs.push(command);
        }
    }
    runs
}

/// The build stage's step after `cargo build`, run in `root` on the binary under test.
fn run_packaging_step(root: &Path) -> PathBuf {
    let runs = build_stage_runs(&dockerfile());
    assert!(
        runs.first()
            .is_some_and(|r| r.starts_with("cargo build --release")),
        "{runs:?}"
    );
    let step = runs.get(1).expect("a packaging step after cargo build");
    let release = PathBuf::from(env!("CARGO_BIN_EXE_ferroscale"));
    let command = step
        .replace("/out", &root.join("out").display().to_string())
        .replace("target/release/ferroscale", &release.display().to_string());
    let status = Command::new("sh")
        .args(["-ec", &command])
        .status()
        .expect("run the packaging step with sh");
    assert!(status.success(), "{command}");
    root.join("out")
}

/// Section names of an ELF file, as `readelf` lists them.
fn sections(binary: &Path) -> Vec<String> {
    let output = Command::new("readelf")
        .args(["-S", "-W"])
        .arg(binary)
        .output()
        .expect("readelf (binutils, which the build stage's strip comes with)");
    assert!(output.status.success());
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let (_, rest) = line.split_once(']')?;
            rest.split_whitespace().next().map(str::to_string)
        })
        .collect()
}

#[test]
fn the_shipped_binary_has_no_debug_info_and_answers_as_cluster_autoscaler() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let out = run_packaging_step(dir.path());
    let shipped = out.join("ferroscale");

    // Debug info is gone (the release build under test has it); `.debug_gdb_scripts` is a
    // loaded section of a few bytes, not debug info.
    let debug = |binary: &Path| -> Vec<String> {
        sections(binary)
            .into_iter()
            .filter(|s| s.starts_with(".debug_") && s != ".debug_gdb_scripts")
            .collect()
    };
    assert!(
        !debug(Path::new(env!("CARGO_BIN_EXE_ferroscale"))).is_empty(),
        "the release profile keeps debug info for benchmarks and profiles"
    );
    assert_eq!(debug(&shipped), Vec::<String>::new());
    let original = std::fs::metadata(env!("CARGO_BIN_EXE_ferroscale"))
        .unwrap()
        .len();
    let stripped = std::fs::metadata(&shipped).unwrap().len();
    assert!(stripped < original / 2, "{stripped} of {original} bytes");

    // `/cluster-autoscaler` is the same binary, as a link.
    let link = out.join("cluster-autoscaler");
    assert_eq!(
        std::fs::read_link(&link).expect("cluster-autoscaler is a link"),
        PathBuf::from("ferroscale")
    );
    // It starts, from its directory, under upstream's name.
    let help = Command::new("./cluster-autoscaler")
        .current_dir(&out)
        .arg("--help")
        .output()
        .expect("start ./cluster-autoscaler");
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("Ferroscale"));
    // Upstream's argument lines go to `run`: its help answers.
    let run_help = Command::new("./cluster-autoscaler")
        .current_dir(&out)
        .args([
            "--cloud-provider=clusterapi",
            "--namespace=default",
            "--help",
        ])
        .output()
        .expect("start ./cluster-autoscaler with flags");
    assert!(run_help.status.success());
    assert!(String::from_utf8_lossy(&run_help.stdout).contains("--cloud-provider"));
}

#[test]
fn the_image_runs_as_non_root() {
    let text = dockerfile();
    let final_stage = text.rsplit("\nFROM ").next().expect("a final stage");
    assert!(final_stage.contains(":nonroot"), "{final_stage}");
    let user = final_stage
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER instruction in the final stage");
    let uid = user.split(':').next().unwrap_or_default();
    assert!(uid.parse::<u32>().is_ok_and(|uid| uid != 0), "USER {user}");
    assert!(final_stage.contains("COPY --from=build /out/ /"));
}
