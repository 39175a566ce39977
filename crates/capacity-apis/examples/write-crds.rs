//! Regenerates the shipped CRD manifests (`deploy/crds/*.yaml` and the chart's
//! `templates/capacity-crds.yaml`) from the Rust types, after a change to them:
//! `cargo run --release -p ferroscale-capacity-apis --example write-crds`.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The repository root, two levels above this crate.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    match ferroscale_capacity_apis::write_crds(&root) {
        Ok(written) => {
            for path in written {
                println!("wrote {path}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("write-crds: {e}");
            ExitCode::FAILURE
        }
    }
}
