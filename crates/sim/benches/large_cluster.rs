//! The bundled large clusters (`large-15k`: 15,000 nodes / 450,000 pods, `large-65k`: 65,000
//! nodes / 1,000,000 pods): the simulator's setup by phase (parsing, the cloud and its nodes, the
//! pods created and bound at time 0), the first two whole engine loops (gather, snapshot,
//! decide, act through the simulator's in-memory contracts: the first evaluates scale-down, the
//! second scales up once the pending pods are old enough), with the decide time per function,
//! the resident memory, and with `full` the wall time of the whole 30-minute simulation.
//!
//! With `steady` it measures, after the first loop, the engine running again on the same
//! cluster: once to take in what the first loop wrote, once with nothing changed, and once after
//! 1 % of the pods were updated (a new object each, as a status update makes).
//!
//! Each scenario runs in its own process so that the peak resident memory (`VmHWM`) is its own:
//!
//! ```text
//! cargo bench -p ferroscale-sim --bench large_cluster -- large-15k
//! cargo bench -p ferroscale-sim --bench large_cluster -- large-65k full
//! ```
//!
//! Without a scenario name it measures `large-15k` only (`cargo bench` runs every bench target;
//! the 65,000-node one takes minutes). Times are single runs: a setup at this size takes seconds,
//! so criterion's repetitions would take longer than the machine is free.

use std::path::Path;
use std::time::Instant;

use ferroscale_core::autoscaler::LoopOutcome;
use ferroscale_sim::runner::{Simulation, options_for, simulate};
use ferroscale_sim::scenario::{bundled, parse_scenario};

// The allocator of the `ferroscale` binary, so that the times are those of `ferroscale simulate`.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[path = "../../core/benches/support/rss.rs"]
mod rss;

/// `VmRSS` (current) and `VmHWM` (peak) in MiB.
fn resident_mib() -> Option<(f64, f64)> {
    let (rss, hwm) = rss::resident_kib()?;
    Some((rss as f64 / 1024.0, hwm as f64 / 1024.0))
}

/// CPU time of this (single) thread in seconds, from /proc/thread-self/schedstat (Linux): the
/// machine may be shared, and wall times then include the time other processes ran.
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map(|ns| ns as f64 / 1e9)
        .unwrap_or(f64::NAN)
}

fn memory() -> String {
    match resident_mib() {
        Some((rss, hwm)) => format!("resident {rss:.0} MiB, peak {hwm:.0} MiB"),
        None => "resident memory unknown".to_string(),
    }
}

fn fail(message: String) -> ! {
    eprintln!("large_cluster: {message}");
    std::process::exit(1);
}

fn describe_loop(outcome: &LoopOutcome) -> String {
    let functions: Vec<String> = outcome
        .function_millis
        .iter()
        .map(|(name, ms)| format!("{name} {ms:.0}"))
        .collect();
    let added: usize = outcome
        .scale_up
        .as_ref()
        .map(|p| p.increases.iter().map(|i| i.delta()).sum())
        .unwrap_or(0);
    let unneeded = outcome
        .scale_down
        .as_ref()
        .map(|p| p.unneeded.len())
        .unwrap_or(0);
    let status = match (&outcome.error, &outcome.scale_up) {
        (Some(error), _) => format!("loop error: {error:?}"),
        (None, Some(plan)) if added == 0 => format!(
            "scale-up status {:?}, {} pods not helped",
            plan.status,
            plan.pods_not_helped.len()
        ),
        _ => String::new(),
    };
    let snapshot = match &outcome.snapshot_refresh {
        Some(refresh) => match refresh.rebuilt {
            Some(reason) => format!("snapshot rebuilt ({reason})"),
            None => format!(
                "snapshot kept ({} node and {} pod changes)",
                refresh.node_changes, refresh.pod_changes
            ),
        },
        None => "no snapshot".to_string(),
    };
    format!(
        "decide {:.0} ms ({}); {snapshot}; {} pending pods, scale-up adds {added} nodes, {unneeded} nodes unneeded {status}",
        outcome.decide_millis,
        functions.join(", "),
        outcome.pending_pods.len(),
    )
}

/// Runs the engine again without the scenario moving; `label` says what changed before.
fn repeat(simulation: &mut Simulation<'_>, name: &str, label: &str) {
    let cpu = cpu_seconds();
    let started = Instant::now();
    let report = simulation.repeat_loop();
    println!(
        "large_cluster: {name}: loop again, {label}: whole loop {:.3} s (CPU {:.3} s); {}; {}",
        started.elapsed().as_secs_f64(),
        cpu_seconds() - cpu,
        describe_loop(&report.outcome),
        memory()
    );
}

fn measure(name: &str, full: bool, setup_only: bool, steady: bool) {
    let Some(text) = bundled(name) else {
        fail(format!("bundled scenario {name} is missing"));
    };
    println!("large_cluster: {name}: before setup: {}", memory());
    let setup_cpu = cpu_seconds();
    let started = Instant::now();
    let scenario =
        parse_scenario(text, name, Path::new(".")).unwrap_or_else(|e| fail(format!("{name}: {e}")));
    let parsed = started.elapsed().as_secs_f64();
    let options = options_for(&scenario, &[]).unwrap_or_else(|e| fail(format!("{name}: {e}")));
    let started = Instant::now();
    let mut simulation = Simulation::new(&scenario, options.clone());
    let cloud = started.elapsed().as_secs_f64();
    let started = Instant::now();
    simulation.play_to_next_loop();
    let pods = started.elapsed().as_secs_f64();
    println!(
        "large_cluster: {name}: setup {:.2} s (CPU {:.2} s): parse {:.3} s, cloud and {} nodes {:.2} s, {} pods created, bound and scheduled {:.2} s; {}",
        parsed + cloud + pods,
        cpu_seconds() - setup_cpu,
        parsed,
        simulation.cluster().node_count(),
        cloud,
        simulation.cluster().pods().len(),
        pods,
        memory()
    );
    if setup_only {
        return;
    }
    let loops = if steady { 1 } else { 2 };
    for n in 1..=loops {
        let cpu = cpu_seconds();
        let started = Instant::now();
        let Some(report) = simulation.next_loop() else {
            fail(format!("{name}: no loop {n}"));
        };
        println!(
            "large_cluster: {name}: loop {n} at {:.0} s: whole loop {:.2} s (CPU {:.2} s); {}; {}",
            ferroscale_sim::runner::simulated_seconds(report.at),
            started.elapsed().as_secs_f64(),
            cpu_seconds() - cpu,
            describe_loop(&report.outcome),
            memory()
        );
        // The next loop's scheduling pass is part of the simulation, not of the engine loop.
        let started = Instant::now();
        simulation.play_to_next_loop();
        println!(
            "large_cluster: {name}: simulated cluster up to the next loop {:.2} s",
            started.elapsed().as_secs_f64()
        );
    }
    if steady {
        repeat(&mut simulation, name, "after the first loop's writes");
        for _ in 0..3 {
            repeat(&mut simulation, name, "nothing changed");
        }
        for _ in 0..3 {
            let every = 100;
            let touched = simulation.touch_pods(every);
            repeat(
                &mut simulation,
                name,
                &format!("{touched} pods (1 %) updated"),
            );
        }
    }
    drop(simulation);
    if !full {
        return;
    }
    let cpu = cpu_seconds();
    let started = Instant::now();
    let result = simulate(&scenario, options);
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    let summary = &result.summary;
    let failed: Vec<String> = summary
        .expectations
        .iter()
        .filter(|e| !e.ok)
        .map(|e| e.description.clone())
        .collect();
    println!(
        "large_cluster: {name}: simulate {} simulated s, {} loops: wall {wall:.1} s (CPU {cpu:.1} s); decide ms p50 {} p99 {} max {}; expectations hold: {}{}; {}",
        summary.simulated_seconds,
        summary.loops,
        summary.decide_millis.p50,
        summary.decide_millis.p99,
        summary.decide_millis.max,
        summary.all_expectations_hold(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(" (failed: {})", failed.join("; "))
        },
        memory()
    );
    let groups: Vec<String> = summary
        .groups
        .iter()
        .map(|(id, g)| {
            format!(
                "{id} {} (+{} -{})",
                g.final_size, g.nodes_added, g.nodes_removed
            )
        })
        .collect();
    println!(
        "large_cluster: {name}: at the end: pods running {}, pending {}, evicted {}, lost {}; groups: {}",
        summary.pods.running,
        summary.pods.pending,
        summary.pods.evicted,
        summary.pods.lost,
        groups.join(", ")
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let full = args.iter().any(|a| a == "full");
    let setup_only = args.iter().any(|a| a == "setup");
    let steady = args.iter().any(|a| a == "steady");
    let names: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| a.starts_with("large-"))
        .collect();
    // A filter meant for another bench target (not a scenario, not `full`) skips this one.
    if args.iter().any(|a| {
        !["full", "setup", "steady", "large_cluster"].contains(&a.as_str())
            && !a.starts_with("large-")
    }) {
        return;
    }
    match names.as_slice() {
        [] => measure("large-15k", full, setup_only, steady),
        [name] => measure(name, full, setup_only, steady),
        _ => fail("name one scenario per run: the peak memory is the process's".to_string()),
    }
}
