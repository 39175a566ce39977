//! Resident memory of one whole loop on each of upstream's `RunOnce` benchmark workloads (see
//! `ferroscale_sim::upstream_runonce`), at upstream's size and five times it, each in a process
//! of its own so one workload's peak is not another's.
//!
//! Without arguments the binary runs itself once per workload; `<workload> [<scale>]` runs one
//! (`scale-up`, `scale-down`, `scale-up-dra`, `scale-down-dra`; scale 1 or 5). Each run prints
//! the resident set (`VmRSS`) and its high-water mark (`VmHWM`) from /proc/self/status: at start,
//! with the fakes built, and after `run_once`. Before the loop the high-water mark is reset
//! (`/proc/self/clear_refs`), so "loop peak" is the largest resident set while the loop ran and
//! "process peak" the larger of that and the set-up's.
//!
//! Run with `cargo bench -p ferroscale-sim --bench runonce_memory [-- <workload> [<scale>]]`.

use std::process::{Command, ExitCode};

use ferroscale_sim::upstream_runonce::{RunOnceWorkload, Workload};

// The allocator of the `ferroscale` binary, with the options it starts jemalloc with (freed
// memory goes back to the system from jemalloc's own thread about a second later;
// crates/cli/src/profiling.rs): the resident set is the one `ferroscale` would have.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(c"background_thread:true,dirty_decay_ms:1000".as_ptr());

/// A C string pointer as jemalloc declares `malloc_conf` (`const char *`): one machine word.
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a string literal, immutable and alive for the whole process.
unsafe impl Sync for MallocConf {}

#[path = "../../core/benches/support/rss.rs"]
mod rss;

use rss::resident_kib;

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Resets `VmHWM` to the current resident set; false where the kernel does not allow it.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn run_one(run: RunOnceWorkload) -> ExitCode {
    let Some((start, _)) = resident_kib() else {
        eprintln!("runonce_memory: /proc/self/status is not readable on this system");
        return ExitCode::SUCCESS;
    };
    let mut prepared = match run.prepare() {
        Ok(prepared) => prepared,
        Err(e) => {
            eprintln!("runonce_memory: {}: {e}", run.label());
            return ExitCode::FAILURE;
        }
    };
    let (built, setup_peak) = resident_kib().unwrap_or((0, 0));
    let reset = reset_peak();
    let outcome = prepared.run_once();
    let (after, loop_peak) = resident_kib().unwrap_or((0, 0));
    let verdict = match prepared.check() {
        Ok(observed) => format!(
            "outcome as upstream's (target size {}, tainted {})",
            observed.target_size, observed.tainted
        ),
        Err(mismatch) => {
            eprintln!("runonce_memory: {mismatch}");
            return ExitCode::FAILURE;
        }
    };
    drop(outcome);
    let peak_note = if reset {
        format!(
            "loop peak {:.1} MiB, process peak {:.1} MiB",
            mib(loop_peak),
            mib(loop_peak.max(setup_peak))
        )
    } else {
        format!(
            "process peak {:.1} MiB (the peak could not be reset before the loop)",
            mib(loop_peak)
        )
    };
    println!(
        "runonce_memory: {:<16} {} nodes, {} pods: resident at start {:.1} MiB, with the fakes {:.1} MiB (set-up peak {:.1} MiB), after run_once {:.1} MiB; {peak_note}; {verdict}",
        run.label(),
        run.nodes(),
        run.pods(),
        mib(start),
        mib(built),
        mib(setup_peak),
        mib(after),
    );
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; other benches' filters are not workload names and skip.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let scales: Vec<usize> = match args.get(1).map(|s| s.parse::<usize>()) {
        Some(Ok(scale)) if scale > 0 => vec![scale],
        Some(_) => {
            eprintln!("runonce_memory: the scale must be a positive integer");
            return ExitCode::FAILURE;
        }
        None => vec![1, 5],
    };
    let workloads: Vec<Workload> = match args.first() {
        None => Workload::ALL.to_vec(),
        Some(name) => match Workload::from_name(name) {
            Some(workload) => vec![workload],
            None if name == "runonce_memory" => Workload::ALL.to_vec(),
            None => return ExitCode::SUCCESS,
        },
    };
    if let ([workload], [scale]) = (workloads.as_slice(), scales.as_slice())
        && args.len() == 2
    {
        return run_one(RunOnceWorkload::new(*workload, *scale));
    }
    let Ok(me) = std::env::current_exe() else {
        eprintln!(
            "runonce_memory: cannot find this binary to run each workload in its own process"
        );
        return ExitCode::FAILURE;
    };
    let mut code = ExitCode::SUCCESS;
    for scale in scales {
        for workload in &workloads {
            let status = Command::new(&me)
                .arg(workload.name())
                .arg(scale.to_string())
                .status();
            if !status.as_ref().is_ok_and(|s| s.success()) {
                eprintln!(
                    "runonce_memory: {} x{scale} failed: {status:?}",
                    workload.name()
                );
                code = ExitCode::FAILURE;
            }
        }
    }
    code
}
