//! Resident memory of the 5,000-node snapshot: 5,000 nodes with 30 running pods each (150,000
//! pods) plus 5,000 constrained pending pods, as in scale-up benchmark (b), and one scale-up plan
//! over it. Prints the process's resident set before and after, read from /proc/self/status.
//!
//! Run with `cargo bench -p ferroscale-core --bench snapshot_memory`.

use ferroscale_core::scale_up::plan_scale_up;
use ferroscale_engine_fixtures::constrained_cluster;

#[path = "support/rss.rs"]
mod rss;

use rss::resident_kib;

fn main() {
    // `cargo bench` passes `--bench`; a plain run with a filter argument that does not match skips.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && a != "snapshot_memory")
    {
        return;
    }
    let Some((before, _)) = resident_kib() else {
        eprintln!("snapshot_memory: /proc/self/status is not readable on this system");
        return;
    };
    let mut fixture = constrained_cluster(5000, 5000);
    let (built, _) = resident_kib().unwrap_or((0, 0));
    let plan = plan_scale_up(fixture.input());
    let (after_plan, peak) = resident_kib().unwrap_or((0, 0));
    let new_nodes: usize = plan.increases.iter().map(|i| i.delta()).sum();
    println!(
        "snapshot_memory: {} nodes, {} pods placed, {} pending; plan adds {new_nodes} nodes",
        fixture.snapshot.node_count(),
        fixture.snapshot.pod_count(),
        fixture.pending.len()
    );
    println!(
        "snapshot_memory: resident before building      {:>8.1} MiB",
        before as f64 / 1024.0
    );
    println!(
        "snapshot_memory: resident with the snapshot    {:>8.1} MiB",
        built as f64 / 1024.0
    );
    println!(
        "snapshot_memory: resident after one plan       {:>8.1} MiB",
        after_plan as f64 / 1024.0
    );
    println!(
        "snapshot_memory: peak resident                 {:>8.1} MiB",
        peak as f64 / 1024.0
    );
}
