//! Resident memory of upstream's two DRA workloads (`ferroscale_engine_fixtures`): the
//! 500-node scale-up (4,000 claim pods, one template with 8 devices) and the 800-node scale-down
//! (3,200 pods holding one of 10 devices per node), each built and planned once. Prints the
//! process's resident set, read from /proc/self/status, after each step.
//!
//! Run with `cargo bench -p ferroscale-core --bench dra_memory`.

use ferroscale_core::scale_up::plan_scale_up;
use ferroscale_engine_fixtures::{dra_scale_down, dra_scale_up};

#[path = "support/rss.rs"]
mod rss;

use rss::resident_kib;

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    // `cargo bench` passes `--bench`; a plain run with a filter argument that does not match skips.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && a != "dra_memory")
    {
        return;
    }
    let Some((before, _)) = resident_kib() else {
        eprintln!("dra_memory: /proc/self/status is not readable on this system");
        return;
    };
    println!(
        "dra_memory: resident before building            {:>8.1} MiB",
        mib(before)
    );

    let mut up = dra_scale_up(500);
    let (built, _) = resident_kib().unwrap_or((0, 0));
    let plan = plan_scale_up(up.input());
    let (planned, peak) = resident_kib().unwrap_or((0, 0));
    let new_nodes: usize = plan.increases.iter().map(|i| i.delta()).sum();
    println!(
        "dra_memory: scale-up: {} pending claim pods; plan adds {new_nodes} nodes",
        up.pending.len()
    );
    println!(
        "dra_memory: scale-up: resident with the fixture  {:>8.1} MiB",
        mib(built)
    );
    println!(
        "dra_memory: scale-up: resident after one plan    {:>8.1} MiB",
        mib(planned)
    );
    println!(
        "dra_memory: scale-up: peak resident              {:>8.1} MiB",
        mib(peak)
    );
    drop((plan, up));

    let (start, _) = resident_kib().unwrap_or((0, 0));
    let mut down = dra_scale_down(800);
    let (built, _) = resident_kib().unwrap_or((0, 0));
    let plan = down.plan();
    let (planned, peak) = resident_kib().unwrap_or((0, 0));
    println!(
        "dra_memory: scale-down: {} nodes, {} pods; plan deletes {} nodes",
        down.snapshot.node_count(),
        down.snapshot.pod_count(),
        plan.empty_to_delete.len() + plan.drain_to_delete.len()
    );
    println!(
        "dra_memory: scale-down: resident at start        {:>8.1} MiB",
        mib(start)
    );
    println!(
        "dra_memory: scale-down: resident with the fixture {:>7.1} MiB",
        mib(built)
    );
    println!(
        "dra_memory: scale-down: resident after one plan  {:>8.1} MiB",
        mib(planned)
    );
    println!(
        "dra_memory: scale-down: peak resident (process)  {:>8.1} MiB",
        mib(peak)
    );
}
