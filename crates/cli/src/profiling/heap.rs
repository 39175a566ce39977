//! jemalloc's heap profile as a pprof `Profile`: jemalloc writes its sampled allocation stacks as
//! text (its `heap_v2` dump), which is read here, scaled to estimates of the bytes in use, named
//! with the process's own symbols, and encoded with the `pprof` crate's protobuf types.
//!
//! The conversion is written here rather than taken from the jemalloc_pprof project's converter
//! (`pprof_util`): that crate turns on prost's `no-recursion-limit` feature, which would apply to
//! every protobuf the binary decodes, including the externalgrpc messages from another process.

use std::collections::HashMap;
use std::ffi::c_void;
use std::io::BufRead;

use pprof::protos::{Function, Line, Location, Profile, Sample, ValueType};

/// The allocator's own frames at the leaf of every stack (Rust's allocation functions, jemalloc's
/// entry points and its sampler): pprof tools drop a frame matching this and everything it called,
/// so a sample's leaf is the code that asked for the memory, as in Go's heap profiles.
const ALLOCATOR_FRAMES: &str =
    "alloc::alloc::.*|<alloc::alloc::Global.*|__rust_.*|__rdl_.*|<tikv_jemallocator::.*|_rjem_.*";

/// Dumps jemalloc's heap profile and returns it as a pprof protobuf (not yet compressed).
#[cfg(target_os = "linux")]
pub fn dump() -> Result<Profile, String> {
    use std::ffi::CString;
    use std::fs::File;
    use std::io::{BufReader, Seek, SeekFrom};
    use std::os::fd::{AsRawFd, FromRawFd};

    // jemalloc writes its dump to a path; an anonymous in-memory file reached through /proc is
    // one that needs no writable directory (the image's root filesystem is read-only).
    // SAFETY: a valid C string and flags; the returned descriptor is checked before use.
    let fd = unsafe { libc::memfd_create(c"ferroscale-heap-profile".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!(
            "creating the in-memory dump file: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    let mut file = unsafe { File::from_raw_fd(fd) };
    let path = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|e| format!("the dump file's path: {e}"))?;
    // SAFETY: `prof.dump` takes a NUL-terminated path (`const char *`); `path` outlives the call.
    unsafe { tikv_jemalloc_ctl::raw::write(b"prof.dump\0", path.as_ptr()) }
        .map_err(|e| format!("jemalloc's prof.dump to {}: {e}", path.to_string_lossy()))?;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| format!("reading the dump back: {e}"))?;
    let stacks = parse_dump(BufReader::new(file))?;
    Ok(to_profile(&stacks))
}

/// The in-memory dump file is Linux's (`memfd_create`); Ferroscale ships for Linux.
#[cfg(not(target_os = "linux"))]
pub fn dump() -> Result<Profile, String> {
    Err("heap profiles are served on Linux only".into())
}

/// One allocation stack of the dump: return addresses, leaf first, and the estimated bytes in use.
#[derive(Debug, PartialEq)]
struct Stack {
    addresses: Vec<u64>,
    bytes: f64,
}

/// Reads jemalloc's `heap_v2` dump: a `heap_v2/<sampling interval>` header, then for each stack an
/// `@ <addresses>` line followed by its `t*: <objects>: <bytes> [...]` total over threads (then
/// per-thread lines and, at the end, the process's mappings, which are not needed here).
fn parse_dump(dump: impl BufRead) -> Result<Vec<Stack>, String> {
    let mut lines = dump.lines();
    let header = lines
        .next()
        .ok_or("the heap dump is empty")?
        .map_err(|e| format!("reading the heap dump: {e}"))?;
    let interval: f64 = header
        .strip_prefix("heap_v2/")
        .and_then(|n| n.trim().parse().ok())
        .filter(|n: &f64| *n > 0.0)
        .ok_or_else(|| format!("the heap dump starts with {header:?}, not heap_v2/<interval>"))?;
    let mut stacks = Vec::new();
    let mut addresses: Option<Vec<u64>> = None;
    for line in lines {
        let line = line.map_err(|e| format!("reading the heap dump: {e}"))?;
        let mut words = line.split_ascii_whitespace();
        match words.next() {
            Some("@") => {
                let parsed = words
                    .map(|word| u64::from_str_radix(word.trim_start_matches("0x"), 16))
                    .collect::<Result<Vec<u64>, _>>()
                    .map_err(|e| format!("a stack of the heap dump ({e}): {line:?}"))?;
                addresses = Some(parsed);
            }
            Some("t*:") => {
                // The first `t*:` line (the whole heap) has no stack before it.
                let Some(addresses) = addresses.take() else {
                    continue;
                };
                let objects: f64 = parse_count(words.next(), &line)?;
                let sampled_bytes: f64 = parse_count(words.next(), &line)?;
                if objects <= 0.0 || sampled_bytes <= 0.0 {
                    continue;
                }
                // An allocation of s bytes is sampled with probability 1 - e^(-s/interval): each
                // sampled byte stands for 1 / that many (jeprof's estimate, from the stack's
                // average allocation size).
                let average = sampled_bytes / objects;
                let bytes = sampled_bytes / (1.0 - (-average / interval).exp());
                stacks.push(Stack { addresses, bytes });
            }
            Some("MAPPED_LIBRARIES:") => break,
            _ => {}
        }
    }
    Ok(stacks)
}

fn parse_count(word: Option<&str>, line: &str) -> Result<f64, String> {
    word.map(|w| w.trim_end_matches(':'))
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("a count of the heap dump: {line:?}"))
}

/// The stacks as a pprof profile: sample type `inuse_space` in bytes, each address a location
/// named with the functions (inlined ones included) the process's symbols give it.
fn to_profile(stacks: &[Stack]) -> Profile {
    let mut strings = Strings::default();
    let mut profile = Profile {
        sample_type: vec![ValueType {
            ty: strings.index("inuse_space"),
            unit: strings.index("bytes"),
        }],
        period_type: Some(ValueType {
            ty: strings.index("space"),
            unit: strings.index("bytes"),
        }),
        drop_frames: strings.index(ALLOCATOR_FRAMES),
        time_nanos: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
        ..Profile::default()
    };
    let mut locations: HashMap<u64, u64> = HashMap::new();
    let mut functions: HashMap<String, u64> = HashMap::new();
    for stack in stacks {
        let mut location_ids = Vec::with_capacity(stack.addresses.len());
        for &address in &stack.addresses {
            let next_id = profile.location.len() as u64 + 1;
            let id = *locations.entry(address).or_insert_with(|| {
                let line = resolve(address, &mut strings, &mut functions, &mut profile.function);
                profile.location.push(Location {
                    id: next_id,
                    address,
                    line,
                    ..Location::default()
                });
                next_id
            });
            location_ids.push(id);
        }
        profile.sample.push(Sample {
            location_id: location_ids,
            // Whole bytes; the estimate is far below i64::MAX.
            value: vec![stack.bytes.round() as i64],
            ..Sample::default()
        });
    }
    profile.string_table = strings.table;
    profile
}

/// The functions at a return address, innermost (inlined) first, as pprof's lines.
fn resolve(
    address: u64,
    strings: &mut Strings,
    functions: &mut HashMap<String, u64>,
    function_table: &mut Vec<Function>,
) -> Vec<Line> {
    let mut lines = Vec::new();
    // A return address is just past its call instruction: the call is one byte earlier.
    let call = std::ptr::without_provenance_mut::<c_void>(address.saturating_sub(1) as usize);
    backtrace::resolve(call, |symbol| {
        let Some(name) = symbol.name() else {
            return;
        };
        let demangled = format!("{name:#}");
        let next_id = function_table.len() as u64 + 1;
        let function_id = *functions.entry(demangled.clone()).or_insert_with(|| {
            let filename = symbol
                .filename()
                .map(|path| path.to_string_lossy().into_owned())
                .unwrap_or_default();
            function_table.push(Function {
                id: next_id,
                name: strings.index(&demangled),
                system_name: strings.index(&String::from_utf8_lossy(name.as_bytes())),
                filename: strings.index(&filename),
                ..Function::default()
            });
            next_id
        });
        lines.push(Line {
            function_id,
            line: i64::from(symbol.lineno().unwrap_or(0)),
        });
    });
    lines
}

/// pprof's string table: index 0 is the empty string.
struct Strings {
    table: Vec<String>,
    indices: HashMap<String, i64>,
}

impl Default for Strings {
    fn default() -> Strings {
        Strings {
            table: vec![String::new()],
            indices: HashMap::from([(String::new(), 0)]),
        }
    }
}

impl Strings {
    fn index(&mut self, text: &str) -> i64 {
        if let Some(&index) = self.indices.get(text) {
            return index;
        }
        let index = self.table.len() as i64;
        self.table.push(text.to_string());
        self.indices.insert(text.to_string(), index);
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dump_becomes_stacks_with_estimated_bytes_in_use() {
        let dump = "heap_v2/524288\n  t*: 3: 1572864 [0: 0]\n  t0: 3: 1572864 [0: 0]\n\
            @ 0x10 0x20 0x30\n  t*: 2: 1048576 [0: 0]\n  t0: 2: 1048576 [0: 0]\n\
            @ 0x40\n  t*: 0: 0 [0: 0]\n\
            \nMAPPED_LIBRARIES:\n@ 0x50\n  t*: 1: 1 [0: 0]\n";
        let stacks = parse_dump(dump.as_bytes()).expect("a valid dump");
        // Two sampled 512 KiB allocations: each is sampled with probability 1 - 1/e.
        let expected = 1_048_576.0 / (1.0 - (-1.0f64).exp());
        assert_eq!(stacks.len(), 1, "{stacks:?}");
        assert_eq!(stacks[0].addresses, [0x10, 0x20, 0x30]);
        assert!((stacks[0].bytes - expected).abs() < 1.0, "{stacks:?}");
    }

    #[test]
    fn a_malformed_dump_is_an_error_naming_the_line() {
        assert!(parse_dump("".as_bytes()).unwrap_err().contains("empty"));
        assert!(
            parse_dump("heap_v1/1\n".as_bytes())
                .unwrap_err()
                .contains("heap_v1/1")
        );
        let error = parse_dump("heap_v2/524288\n@ 0x10 zz\n".as_bytes()).unwrap_err();
        assert!(error.contains("0x10 zz"), "{error}");
        let error = parse_dump("heap_v2/524288\n@ 0x10\n t*: x: 1\n".as_bytes()).unwrap_err();
        assert!(error.contains("t*: x: 1"), "{error}");
    }

    #[test]
    fn the_profile_names_its_functions_and_the_allocator_frames_to_drop() {
        // Return addresses of this test's own stack, as jemalloc records them.
        let mut addresses = Vec::new();
        backtrace::trace(|frame| {
            addresses.push(frame.ip().addr() as u64);
            true
        });
        let profile = to_profile(&[Stack {
            addresses: [addresses.clone(), addresses.clone()].concat(),
            bytes: 1000.4,
        }]);
        let string = |i: i64| profile.string_table[i as usize].as_str();
        assert_eq!(string(profile.sample_type[0].ty), "inuse_space");
        assert_eq!(string(profile.drop_frames), ALLOCATOR_FRAMES);
        assert_eq!(profile.sample[0].value, [1000]);
        assert_eq!(
            profile.location.len(),
            addresses.len(),
            "one location per address"
        );
        assert_eq!(profile.sample[0].location_id.len(), 2 * addresses.len());
        let names: Vec<&str> = profile.function.iter().map(|f| string(f.name)).collect();
        assert!(
            names
                .iter()
                .any(|n| n.contains("heap::tests::the_profile_names_its_functions")),
            "{names:?}"
        );
    }
}
