//! `--profiling` (upstream, default false): CPU and heap profiles over HTTP at upstream's paths,
//! in the pprof format Go's tools read (a gzip-compressed `perftools.profiles.Profile` protobuf).
//!
//! CPU: `/debug/pprof/profile?seconds=N`, sampled by the `pprof` crate at 100 Hz for N seconds
//! (default 30, as Go's handler).
//!
//! Heap: `/debug/pprof/heap`, the memory in use right now by allocation site, from jemalloc's
//! sampling heap profiler. jemalloc is the binary's allocator (`main.rs`), built with its profiler
//! and configured here (`MALLOC_CONF`) to record nothing until `--profiling` activates it, so a
//! process without the flag pays no sampling cost. Active, it records the stack of one allocation
//! per 512 KiB allocated on average (Go samples one per 512 KiB too), and a request dumps
//! jemalloc's profile into an in-memory file (the container's root filesystem is read-only),
//! converts it to pprof with function names resolved in the process (`heap.rs`), and answers it.
//!
//! Disabled, every `/debug/pprof/` path answers 404 naming the flag.

use std::ffi::c_char;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferroscale_metrics::{ExtraRoutes, RouteAnswer, RouteHandler};

mod heap;

/// Upstream's CPU profile path.
pub const CPU_PROFILE_PATH: &str = "/debug/pprof/profile";
/// Upstream's heap profile path.
pub const HEAP_PROFILE_PATH: &str = "/debug/pprof/heap";

/// Go's default profile length.
const DEFAULT_SECONDS: u64 = 30;
/// The longest profile served: a request cannot keep the sampler running for hours.
const MAX_SECONDS: u64 = 600;
/// Samples per second, as Go's runtime profiler.
const FREQUENCY: i32 = 100;

/// jemalloc's start-up options, read by jemalloc itself (under the name its `_rjem_` symbol prefix
/// gives `malloc_conf`) before the first allocation: the heap profiler is built and ready
/// (`prof:true`) but records nothing (`prof_active:false`) until [`activate_heap_sampling`] turns
/// it on; once on, it samples one allocation per 2^19 bytes (512 KiB) on average, Go's
/// `MemProfileRate` too, which keeps the cost of `--profiling` small.
///
/// Memory the process freed goes back to the system about a second later (`dirty_decay_ms:1000`,
/// jemalloc's default is ten), returned by jemalloc's own background thread
/// (`background_thread:true`) rather than by whichever allocation happens to come next. A loop
/// builds and drops a snapshot of the whole cluster every scan interval; without these, the pages
/// of the last one stayed resident while the process slept until the next (docs/benchmarks.md,
/// "The live loop at 1,000 nodes").
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(
    c"prof:true,prof_active:false,lg_prof_sample:19,background_thread:true,dirty_decay_ms:1000"
        .as_ptr(),
);

/// A C string pointer as jemalloc declares `malloc_conf` (`const char *`): one machine word.
#[repr(transparent)]
struct MallocConf(*const c_char);

// SAFETY: the pointer is to a string literal, immutable and alive for the whole process.
unsafe impl Sync for MallocConf {}

/// The profiling endpoints.
pub struct Profiling {
    enabled: bool,
    /// One CPU profile at a time: the sampler is process-wide.
    running: AtomicBool,
    /// One heap dump at a time: resolving function names is the expensive part.
    dumping: AtomicBool,
}

impl Profiling {
    /// The endpoints; enabled, jemalloc's heap sampling starts now (a failure is logged and
    /// answered by `/debug/pprof/heap`; CPU profiles do not need it).
    pub fn new(enabled: bool) -> Arc<Profiling> {
        if enabled {
            match activate_heap_sampling() {
                Ok(()) => tracing::info!(
                    "heap profiling active: serving heap profiles on {HEAP_PROFILE_PATH}"
                ),
                Err(error) => tracing::warn!("heap profiles are not available: {error}"),
            }
        }
        Arc::new(Profiling {
            enabled,
            running: AtomicBool::new(false),
            dumping: AtomicBool::new(false),
        })
    }

    /// Adds the profile paths to the HTTP server's routes.
    pub fn add_routes(self: &Arc<Self>, routes: &mut ExtraRoutes) {
        let cpu = Arc::clone(self);
        let handler: RouteHandler = Arc::new(move |query| {
            let cpu = Arc::clone(&cpu);
            Box::pin(async move { cpu.cpu_profile(query.as_deref()).await })
        });
        routes.add(CPU_PROFILE_PATH, handler);
        let heap = Arc::clone(self);
        let handler: RouteHandler = Arc::new(move |query| {
            let heap = Arc::clone(&heap);
            Box::pin(async move { heap.heap_profile(query.as_deref()).await })
        });
        routes.add(HEAP_PROFILE_PATH, handler);
    }

    fn disabled() -> RouteAnswer {
        RouteAnswer::text(
            404,
            "profiling is disabled: start Ferroscale with --profiling=true\n",
        )
    }

    async fn heap_profile(&self, query: Option<&str>) -> RouteAnswer {
        if !self.enabled {
            return Profiling::disabled();
        }
        if let Err(message) = heap_query(query) {
            return RouteAnswer::text(400, message + "\n");
        }
        match heap_sampling_active() {
            Ok(true) => {}
            Ok(false) => {
                return RouteAnswer::text(
                    503,
                    "heap profiling is not active: jemalloc's sampling did not start (see the \
                     log at start-up); CPU profiles are on /debug/pprof/profile\n",
                );
            }
            Err(error) => {
                return RouteAnswer::text(
                    500,
                    format!("reading jemalloc's profiler state: {error}\n"),
                );
            }
        }
        if self.dumping.swap(true, Ordering::SeqCst) {
            return RouteAnswer::text(
                429,
                "a heap profile is already being taken; one at a time\n",
            );
        }
        // Writing the dump and resolving function names block: off the async workers.
        let profile = tokio::task::spawn_blocking(|| {
            let profile = heap::dump().and_then(|profile| gzip_profile(&profile));
            forget_symbols();
            profile
        })
        .await;
        self.dumping.store(false, Ordering::SeqCst);
        match profile {
            Ok(Ok(body)) => RouteAnswer {
                status: 200,
                content_type: "application/octet-stream",
                body,
            },
            Ok(Err(error)) => RouteAnswer::text(500, format!("taking the heap profile: {error}\n")),
            Err(error) => RouteAnswer::text(500, format!("taking the heap profile: {error}\n")),
        }
    }

    async fn cpu_profile(&self, query: Option<&str>) -> RouteAnswer {
        if !self.enabled {
            return Profiling::disabled();
        }
        let seconds = match seconds(query) {
            Ok(seconds) => seconds,
            Err(message) => return RouteAnswer::text(400, message + "\n"),
        };
        if self.running.swap(true, Ordering::SeqCst) {
            return RouteAnswer::text(429, "a CPU profile is already being taken; one at a time\n");
        }
        // The sampler's guard is not Send: it lives on a blocking thread for the whole profile.
        let profile = tokio::task::spawn_blocking(move || {
            let profile = take_profile(seconds);
            forget_symbols();
            profile
        })
        .await;
        self.running.store(false, Ordering::SeqCst);
        match profile {
            Ok(Ok(body)) => RouteAnswer {
                status: 200,
                content_type: "application/octet-stream",
                body,
            },
            Ok(Err(error)) => RouteAnswer::text(500, format!("taking the CPU profile: {error}\n")),
            Err(error) => RouteAnswer::text(500, format!("taking the CPU profile: {error}\n")),
        }
    }
}

/// `seconds=N` as Go's handler reads it: a positive integer, 30 by default.
fn seconds(query: Option<&str>) -> Result<u64, String> {
    let mut seconds = DEFAULT_SECONDS;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        if let Some(value) = pair.strip_prefix("seconds=") {
            seconds = value
                .parse()
                .ok()
                .filter(|s| (1..=MAX_SECONDS).contains(s))
                .ok_or_else(|| format!("invalid seconds={value:?}: expected 1 to {MAX_SECONDS}"))?;
        }
    }
    Ok(seconds)
}

/// Go's heap handler parameters: `gc` is accepted (there is no collector to run first: the profile
/// is what is live now); `debug=N` (N > 0, Go's text form) and `seconds` (a delta profile) ask for
/// answers Ferroscale does not produce, and are refused rather than answered with something else.
fn heap_query(query: Option<&str>) -> Result<(), String> {
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "debug" if value != "0" => {
                return Err(format!(
                    "invalid debug={value:?}: only the pprof protobuf form (debug=0) is served"
                ));
            }
            "seconds" => {
                return Err(format!(
                    "invalid seconds={value:?}: delta heap profiles are not served; take two \
                     profiles and compare them with go tool pprof -diff_base"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Turns jemalloc's heap sampling on (`prof.active`).
fn activate_heap_sampling() -> Result<(), String> {
    // Built without its profiler, or started without `prof:true`, jemalloc cannot sample.
    let built = tikv_jemalloc_ctl::profiling::prof::read()
        .map_err(|e| format!("jemalloc has no heap profiler (opt.prof: {e})"))?;
    if !built {
        return Err("jemalloc was started with its heap profiler off (opt.prof=false)".into());
    }
    // SAFETY: `prof.active` is a writable bool (jemalloc's mallctl documentation).
    unsafe { tikv_jemalloc_ctl::raw::write(b"prof.active\0", true) }
        .map_err(|e| format!("setting jemalloc's prof.active: {e}"))
}

/// Whether jemalloc is sampling allocations now.
fn heap_sampling_active() -> Result<bool, tikv_jemalloc_ctl::Error> {
    // SAFETY: `prof.active` is a readable bool (jemalloc's mallctl documentation).
    unsafe { tikv_jemalloc_ctl::raw::read(b"prof.active\0") }
}

/// Samples every thread for `seconds` and returns the gzip-compressed pprof protobuf.
fn take_profile(seconds: u64) -> Result<Vec<u8>, String> {
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(FREQUENCY)
        // Unwinding through these while they hold their own locks can deadlock (pprof's advice).
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_secs(seconds));
    let profile = guard
        .report()
        .build()
        .and_then(|report| report.pprof())
        .map_err(|e| e.to_string())?;
    drop(guard);
    gzip_profile(&profile)
}

/// Releases what resolving function names loaded: the binary's symbol table and, in builds
/// that keep it, its debug information, which the resolver otherwise caches for the life of the
/// process (about 50 MB for the shipped binary, 340 MB with debug information; see
/// docs/benchmarks.md). The next profile loads them again.
fn forget_symbols() {
    backtrace::clear_symbol_cache();
}

/// The profile as Go's handlers answer it: the protobuf, gzip-compressed.
fn gzip_profile(profile: &pprof::protos::Profile) -> Result<Vec<u8>, String> {
    use pprof::protos::Message;
    let mut encoded = Vec::new();
    profile.encode(&mut encoded).map_err(|e| e.to_string())?;
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(&encoded).map_err(|e| e.to_string())?;
    gzip.finish().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use pprof::protos::{Message, Profile};

    use super::*;

    fn text(answer: &RouteAnswer) -> String {
        String::from_utf8_lossy(&answer.body).into_owned()
    }

    #[tokio::test]
    async fn disabled_answers_404_naming_the_flag() {
        let profiling = Profiling::new(false);
        let answer = profiling.cpu_profile(Some("seconds=1")).await;
        assert_eq!(answer.status, 404);
        assert!(text(&answer).contains("--profiling"));
        let answer = profiling.heap_profile(None).await;
        assert_eq!(answer.status, 404);
        assert!(text(&answer).contains("--profiling"));
    }

    #[test]
    fn jemalloc_starts_with_its_profiler_ready_but_not_sampling() {
        // The start-up options (`opt.*`), which later activation does not change: they show that
        // jemalloc read MALLOC_CONF under its exported name.
        assert_eq!(tikv_jemalloc_ctl::profiling::prof::read(), Ok(true));
        // SAFETY: `opt.prof_active` is a readable bool (jemalloc's mallctl documentation).
        let active: Result<bool, _> = unsafe { tikv_jemalloc_ctl::raw::read(b"opt.prof_active\0") };
        assert_eq!(active, Ok(false));
        assert_eq!(tikv_jemalloc_ctl::profiling::lg_prof_sample::read(), Ok(19));
    }

    #[test]
    fn jemalloc_returns_freed_memory_within_a_second_from_its_own_thread() {
        assert_eq!(tikv_jemalloc_ctl::opt::background_thread::read(), Ok(true));
        // SAFETY: `opt.dirty_decay_ms` is a readable ssize_t (jemalloc's mallctl documentation).
        let decay: Result<isize, _> =
            unsafe { tikv_jemalloc_ctl::raw::read(b"opt.dirty_decay_ms\0") };
        assert_eq!(decay, Ok(1000));
    }

    #[test]
    fn heap_parameters_for_answers_not_served_are_refused() {
        assert_eq!(heap_query(None), Ok(()));
        assert_eq!(heap_query(Some("gc=1&debug=0")), Ok(()));
        for (query, named) in [
            ("debug=1", "debug=\"1\""),
            ("seconds=30", "seconds=\"30\""),
            ("gc=1&debug=2", "debug=\"2\""),
        ] {
            let error = heap_query(Some(query)).unwrap_err();
            assert!(error.contains(named), "{query}: {error}");
        }
    }

    #[tokio::test]
    async fn bad_lengths_are_refused() {
        let profiling = Profiling::new(true);
        for query in ["seconds=0", "seconds=abc", "seconds=601"] {
            assert_eq!(
                profiling.cpu_profile(Some(query)).await.status,
                400,
                "{query}"
            );
        }
        assert_eq!(seconds(None), Ok(30));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cpu_profile_is_a_gzipped_pprof_protobuf() {
        let profiling = Profiling::new(true);
        // Something to sample meanwhile.
        let busy = std::thread::spawn(|| {
            let mut x = 0u64;
            let until = std::time::Instant::now() + Duration::from_millis(1500);
            while std::time::Instant::now() < until {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            x
        });
        let answer = profiling.cpu_profile(Some("seconds=1")).await;
        let _ = busy.join();
        assert_eq!(answer.status, 200, "{}", text(&answer));
        let mut decoded = Vec::new();
        flate2::read::GzDecoder::new(answer.body.as_slice())
            .read_to_end(&mut decoded)
            .expect("gzip");
        let profile = Profile::decode(decoded.as_slice()).expect("a pprof Profile");
        let name = |i: i64| profile.string_table.get(i as usize).cloned();
        let types: Vec<Option<String>> = profile.sample_type.iter().map(|t| name(t.ty)).collect();
        assert!(types.contains(&Some("cpu".to_string())), "{types:?}");
        assert_eq!(profile.period, 1_000_000_000 / i64::from(FREQUENCY));
    }
}
