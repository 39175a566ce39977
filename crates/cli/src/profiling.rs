//! `--profiling` (upstream, default false): CPU profiles over HTTP at upstream's path,
//! `/debug/pprof/profile?seconds=N`, in the pprof format Go's tools read (a gzip-compressed
//! `perftools.profiles.Profile` protobuf), sampled by the `pprof` crate at 100 Hz for N seconds
//! (default 30, as Go's handler).
//!
//! Heap profiles (`/debug/pprof/heap`) need an allocator that records allocation sites
//! (jemalloc's profiling); Ferroscale keeps the system allocator, so that path answers 501 and
//! says so. Disabled, every `/debug/pprof/` path answers 404 naming the flag.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferroscale_metrics::{ExtraRoutes, RouteAnswer, RouteHandler};

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

/// The profiling endpoints.
pub struct Profiling {
    enabled: bool,
    /// One CPU profile at a time: the sampler is process-wide.
    running: AtomicBool,
}

impl Profiling {
    pub fn new(enabled: bool) -> Arc<Profiling> {
        Arc::new(Profiling {
            enabled,
            running: AtomicBool::new(false),
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
        let handler: RouteHandler = Arc::new(move |_| {
            let heap = Arc::clone(&heap);
            Box::pin(async move { heap.heap_profile() })
        });
        routes.add(HEAP_PROFILE_PATH, handler);
    }

    fn disabled() -> RouteAnswer {
        RouteAnswer::text(
            404,
            "profiling is disabled: start Ferroscale with --profiling=true\n",
        )
    }

    fn heap_profile(&self) -> RouteAnswer {
        if !self.enabled {
            return Profiling::disabled();
        }
        RouteAnswer::text(
            501,
            "heap profiles are not available: Ferroscale runs on the system allocator, which \
             does not record allocation sites; CPU profiles are on /debug/pprof/profile\n",
        )
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
        let profile = tokio::task::spawn_blocking(move || take_profile(seconds)).await;
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

/// Samples every thread for `seconds` and returns the gzip-compressed pprof protobuf.
fn take_profile(seconds: u64) -> Result<Vec<u8>, String> {
    use pprof::protos::Message;
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
        assert_eq!(profiling.heap_profile().status, 404);
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
        assert_eq!(profiling.heap_profile().status, 501);
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
