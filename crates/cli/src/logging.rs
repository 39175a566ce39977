//! klog-compatible logging for `ferroscale run` and `ferroscale serve-provider`: upstream's
//! logging flags (`--v`, `--vmodule`, `--logtostderr`, `--stderrthreshold`, `--log-file`, ...,
//! `--logging-format`), klog's text lines and the JSON lines of Kubernetes components.
//!
//! Built from tracing-subscriber's pieces: a verbosity filter (`--v`, `--vmodule`), a
//! `FormatEvent` that writes one klog or JSON line per event, and a `MakeWriter` that routes each
//! line by its severity to stderr and to the log files as klog does. docs/operations.md ("Log
//! format") describes the result, the level mapping and where Ferroscale differs.
//!
//! Levels: tracing has five levels and no V levels, klog has four severities and V levels for
//! information. ERROR is klog's error, WARN its warning, and INFO, DEBUG and TRACE are information
//! at V levels 1, 5 and 9, so `--v` keeps its meaning: 0 warnings and errors, 1-4 decisions,
//! 5-8 every provider call, 9 and more everything.

use std::backtrace::Backtrace;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::flags::{duration, parse_bool};

/// klog's severities, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Info,
    Warning,
    Error,
    Fatal,
}

impl Severity {
    const ALL: [Severity; 4] = [
        Severity::Info,
        Severity::Warning,
        Severity::Error,
        Severity::Fatal,
    ];

    /// klog's syntax: a name in any case, or its number 0-3.
    pub fn parse(value: &str) -> Option<Severity> {
        match value.trim().to_ascii_uppercase().as_str() {
            "INFO" | "0" => Some(Severity::Info),
            "WARNING" | "1" => Some(Severity::Warning),
            "ERROR" | "2" => Some(Severity::Error),
            "FATAL" | "3" => Some(Severity::Fatal),
            _ => None,
        }
    }

    fn of(level: &Level) -> Severity {
        match *level {
            Level::ERROR => Severity::Error,
            Level::WARN => Severity::Warning,
            _ => Severity::Info,
        }
    }

    fn letter(self) -> char {
        match self {
            Severity::Info => 'I',
            Severity::Warning => 'W',
            Severity::Error => 'E',
            Severity::Fatal => 'F',
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Severity::Info => "INFO",
            Severity::Warning => "WARNING",
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The V level of a tracing level: information needs `--v` at least this high; warnings and
/// errors are never hidden by `--v`, as in klog.
pub fn v_level(level: &Level) -> u32 {
    match *level {
        Level::ERROR | Level::WARN => 0,
        Level::INFO => 1,
        Level::DEBUG => 5,
        Level::TRACE => 9,
    }
}

/// The most verbose tracing level `--v=verbosity` shows.
fn level_filter(verbosity: u32) -> LevelFilter {
    match verbosity {
        0 => LevelFilter::WARN,
        1..=4 => LevelFilter::INFO,
        5..=8 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// `--logging-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// One `pattern=N` of `--vmodule`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VModule {
    pub pattern: String,
    pub level: u32,
}

impl VModule {
    /// A pattern with `::` is matched against the event's target (its module path, e.g.
    /// `ferroscale_kube::*`); one with `/` against the source path without `.rs`; any other
    /// against the source file's name without `.rs` (klog's rule for Go files). `*` matches any
    /// run of characters, `?` one character.
    fn matches(&self, file: Option<&str>, target: &str) -> bool {
        if self.pattern.contains("::") {
            return glob(&self.pattern, target);
        }
        let Some(file) = file else {
            return false;
        };
        let file = file.strip_suffix(".rs").unwrap_or(file);
        if self.pattern.contains('/') {
            glob(&self.pattern, file)
        } else {
            glob(&self.pattern, base_name(file))
        }
    }
}

fn base_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// Shell-style matching with `*` and `?` only.
fn glob(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// `--log-backtrace-at=file:line`: the event logged at that line carries a backtrace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BacktraceAt {
    pub file: String,
    pub line: u32,
}

/// Everything the logging flags say, with upstream Cluster Autoscaler 1.36's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggingFlags {
    /// `--v`.
    pub verbosity: u32,
    /// `--vmodule`.
    pub vmodule: Vec<VModule>,
    /// `--logtostderr` (true): stderr only, no files.
    pub log_to_stderr: bool,
    /// `--alsologtostderr`: with files, stderr too (from `--alsologtostderrthreshold` up).
    pub also_log_to_stderr: bool,
    /// `--alsologtostderrthreshold` (INFO).
    pub also_log_to_stderr_threshold: Severity,
    /// `--stderrthreshold`: INFO, as upstream's main sets it before parsing the flags.
    pub stderr_threshold: Severity,
    /// `--legacy-stderr-threshold-behavior`: false, as upstream's main sets it, so
    /// `--stderrthreshold` applies with `--logtostderr=true` too.
    pub legacy_stderr_threshold_behavior: bool,
    /// `--log-dir`.
    pub log_dir: Option<PathBuf>,
    /// `--log-file`.
    pub log_file: Option<PathBuf>,
    /// `--log-file-max-size` in MB (1800); 0 means no limit.
    pub log_file_max_size_mb: u64,
    /// `--skip-headers`.
    pub skip_headers: bool,
    /// `--skip-log-headers`.
    pub skip_log_headers: bool,
    /// `--add-dir-header`.
    pub add_dir_header: bool,
    /// `--one-output`.
    pub one_output: bool,
    /// `--log-flush-frequency` (5s).
    pub flush_frequency: Duration,
    /// `--log-backtrace-at`.
    pub backtrace_at: Option<BacktraceAt>,
    /// `--logging-format`.
    pub format: LogFormat,
    /// `--log-text-split-stream` / `--log-json-split-stream` (component-base's alpha options):
    /// with that format, lines below ERROR that go to the stream go to standard output instead
    /// of standard error.
    pub text_split_stream: bool,
    pub json_split_stream: bool,
}

impl Default for LoggingFlags {
    fn default() -> Self {
        LoggingFlags {
            verbosity: 0,
            vmodule: Vec::new(),
            log_to_stderr: true,
            also_log_to_stderr: false,
            also_log_to_stderr_threshold: Severity::Info,
            stderr_threshold: Severity::Info,
            legacy_stderr_threshold_behavior: false,
            log_dir: None,
            log_file: None,
            log_file_max_size_mb: 1800,
            skip_headers: false,
            skip_log_headers: false,
            add_dir_header: false,
            one_output: false,
            flush_frequency: Duration::from_secs(5),
            backtrace_at: None,
            format: LogFormat::Text,
            text_split_stream: false,
            json_split_stream: false,
        }
    }
}

/// The dashed name of a logging flag given in either spelling (`--log_dir` is `--log-dir`, as
/// upstream's flag set normalises it), or None for other flags. The names are the flag
/// catalogue's process flags of the logging group, so the list exists once.
pub fn canonical_flag(flag: &str) -> Option<&'static str> {
    logging_spec(flag).map(|spec| spec.name)
}

fn logging_spec(flag: &str) -> Option<&'static ferroscale_flags::Flag> {
    ferroscale_flags::lookup(flag).filter(|spec| {
        spec.group == ferroscale_flags::Group::Logging
            && spec.scope == ferroscale_flags::Scope::Process
    })
}

/// Whether `flag` is a logging flag.
pub fn is_flag(flag: &str) -> bool {
    canonical_flag(flag).is_some()
}

/// Whether `flag` is a boolean logging flag (a bare `--flag` means true).
pub fn is_boolean(flag: &str) -> bool {
    logging_spec(flag).is_some_and(|spec| spec.value == ferroscale_flags::ValueType::Bool)
}

impl LoggingFlags {
    /// Applies one logging flag; the error names the flag and the value.
    pub fn set(&mut self, flag: &str, value: &str) -> Result<(), String> {
        let Some(name) = canonical_flag(flag) else {
            return Err(format!("--{flag} is not a logging flag"));
        };
        let invalid =
            |expected: &str| format!("invalid value {value:?} for flag --{flag}: {expected}");
        let boolean = || parse_bool(value).ok_or_else(|| invalid("expected true or false"));
        let severity = || {
            Severity::parse(value)
                .ok_or_else(|| invalid("expected INFO, WARNING, ERROR, FATAL or 0-3"))
        };
        let path = || Some(PathBuf::from(value)).filter(|p| !p.as_os_str().is_empty());
        match name {
            "v" => {
                self.verbosity = value
                    .trim()
                    .parse()
                    .map_err(|_| invalid("expected a non-negative integer"))?
            }
            "vmodule" => self.vmodule = parse_vmodule(value).map_err(|e| invalid(&e))?,
            "logtostderr" => self.log_to_stderr = boolean()?,
            "alsologtostderr" => self.also_log_to_stderr = boolean()?,
            "alsologtostderrthreshold" => self.also_log_to_stderr_threshold = severity()?,
            "stderrthreshold" => self.stderr_threshold = severity()?,
            "legacy-stderr-threshold-behavior" => {
                self.legacy_stderr_threshold_behavior = boolean()?
            }
            "log-dir" => self.log_dir = path(),
            "log-file" => self.log_file = path(),
            "log-file-max-size" => {
                self.log_file_max_size_mb = value
                    .trim()
                    .parse()
                    .map_err(|_| invalid("expected a size in megabytes (0: no limit)"))?
            }
            "skip-headers" => self.skip_headers = boolean()?,
            "skip-log-headers" => self.skip_log_headers = boolean()?,
            "add-dir-header" => self.add_dir_header = boolean()?,
            "one-output" => self.one_output = boolean()?,
            "log-flush-frequency" => self.flush_frequency = duration(flag, value)?,
            "log-backtrace-at" => {
                self.backtrace_at = parse_backtrace_at(value).map_err(|e| invalid(&e))?
            }
            "log-text-split-stream" => self.text_split_stream = boolean()?,
            "log-json-split-stream" => self.json_split_stream = boolean()?,
            // How much of the info stream may be buffered for speed: lines are written unbuffered,
            // which any size allows; the value is still checked.
            "log-text-info-buffer-size" | "log-json-info-buffer-size" => {
                value
                    .parse::<ferroscale_model::Quantity>()
                    .map_err(|_| invalid("expected a size such as 0, 64Ki or 1Mi"))?;
            }
            "logging-format" => {
                self.format = match value {
                    "text" => LogFormat::Text,
                    "json" => LogFormat::Json,
                    _ => return Err(invalid("expected text or json")),
                }
            }
            _ => return Err(format!("--{flag} is not a logging flag")),
        }
        Ok(())
    }

    /// Rules between flags: upstream refuses `--vmodule` with a format other than text.
    pub fn validate(&self) -> Result<(), String> {
        if !self.vmodule.is_empty() && self.format != LogFormat::Text {
            return Err(
                "--vmodule is only supported with --logging-format=text (as upstream)".to_string(),
            );
        }
        Ok(())
    }

    /// Whether a line of this severity goes to stderr: klog 2.140's rule with upstream's
    /// settings. With `--logtostderr` the threshold applies unless the legacy behaviour is asked
    /// for; with files, `--stderrthreshold` and `--alsologtostderr` (from its own threshold)
    /// each send lines to stderr too.
    pub fn to_stderr(&self, severity: Severity) -> bool {
        if self.log_to_stderr {
            self.legacy_stderr_threshold_behavior || severity >= self.stderr_threshold
        } else {
            (self.also_log_to_stderr && severity >= self.also_log_to_stderr_threshold)
                || severity >= self.stderr_threshold
        }
    }

    /// Whether the stream's lines below ERROR go to standard output (split streams).
    fn info_to_stdout(&self) -> bool {
        match self.format {
            LogFormat::Text => self.text_split_stream,
            LogFormat::Json => self.json_split_stream,
        }
    }

    /// Whether lines go to files at all.
    fn to_files(&self) -> bool {
        !self.log_to_stderr
    }

    fn max_file_bytes(&self) -> u64 {
        match self.log_file_max_size_mb {
            0 => u64::MAX,
            mb => mb.saturating_mul(1024 * 1024),
        }
    }
}

fn parse_vmodule(value: &str) -> Result<Vec<VModule>, String> {
    let mut patterns = Vec::new();
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((pattern, level)) = item.split_once('=') else {
            return Err(format!("{item:?} is not pattern=N"));
        };
        if pattern.trim().is_empty() {
            return Err(format!("{item:?} has an empty pattern"));
        }
        let level = level
            .trim()
            .parse()
            .map_err(|_| format!("{item:?}: the level is not a non-negative integer"))?;
        patterns.push(VModule {
            pattern: pattern.trim().to_string(),
            level,
        });
    }
    Ok(patterns)
}

/// klog's syntax: empty for none, else `file:line` with a dot in the file name and a positive
/// line.
fn parse_backtrace_at(value: &str) -> Result<Option<BacktraceAt>, String> {
    if value.is_empty() || value == ":0" {
        return Ok(None);
    }
    let Some((file, line)) = value.split_once(':') else {
        return Err("expected file:line, e.g. run.rs:120".to_string());
    };
    if !file.contains('.') {
        return Err("the file name needs its extension, e.g. run.rs:120".to_string());
    }
    match line.parse::<u32>() {
        Ok(line) if line > 0 => Ok(Some(BacktraceAt {
            file: file.to_string(),
            line,
        })),
        _ => Err("the line is not a positive integer".to_string()),
    }
}

// ---------------------------------------------------------------------------------------------
// The filter: --v and --vmodule.

/// Noisy targets hidden unless `RUST_LOG` asks for them: kube's client logs every failed request
/// at error level, and kube-runtime's watcher every failed list or watch at warn level, while the
/// caller reports the same failure with its context, once, and sums up repeats (against an API
/// server that does not answer, or a kind the identity may not read, that was one more line per
/// retry of each watch).
const QUIET_TARGETS: &[&str] = &["kube_client::client::builder", "kube_runtime::watcher"];

/// `--v` and `--vmodule` as a tracing filter: an event shows when its V level is at most the
/// larger of `--v` and the level of the first `--vmodule` pattern matching its source (as in
/// klog, `--vmodule` only raises verbosity).
#[derive(Debug, Clone)]
struct VerbosityFilter {
    verbosity: u32,
    vmodule: Vec<VModule>,
}

impl VerbosityFilter {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        let target = metadata.target();
        if QUIET_TARGETS
            .iter()
            .any(|quiet| target == *quiet || target.starts_with(&format!("{quiet}::")))
        {
            return false;
        }
        let wanted = v_level(metadata.level());
        if wanted <= self.verbosity {
            return true;
        }
        self.vmodule
            .iter()
            .find(|module| module.matches(metadata.file(), target))
            .is_some_and(|module| wanted <= module.level)
    }

    fn max_verbosity(&self) -> u32 {
        self.vmodule
            .iter()
            .map(|m| m.level)
            .fold(self.verbosity, u32::max)
    }
}

impl<S: Subscriber> Layer<S> for VerbosityFilter {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if !self.vmodule.is_empty() {
            // Events bridged from the `log` crate share one callsite per level whose metadata
            // has no file: decide per event.
            return Interest::sometimes();
        }
        if VerbosityFilter::enabled(self, metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        VerbosityFilter::enabled(self, metadata)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(level_filter(self.max_verbosity()))
    }
}

// ---------------------------------------------------------------------------------------------
// One event as a klog record, and its two renderings.

/// A field's value, typed as far as tracing tells.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
}

/// The message and fields of an event. A field named `error` or `err` is the error (`err`, as
/// Kubernetes components name it).
#[derive(Debug, Default)]
struct Fields {
    message: String,
    error: Option<String>,
    values: Vec<(String, Value)>,
}

impl Fields {
    fn push(&mut self, field: &Field, value: Value) {
        let name = field.name();
        // The bridge from the `log` crate carries the source as fields: it is in the header.
        if name.starts_with("log.") {
            return;
        }
        match (name, value) {
            ("message", Value::Str(text)) => self.message = text,
            ("error" | "err", Value::Str(text)) => self.error = Some(text),
            (name, value) => self.values.push((name.to_string(), value)),
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, Value::Str(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, Value::I64(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, Value::U64(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, Value::F64(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, Value::Bool(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field, Value::Str(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.push(field, Value::Str(format!("{value:?}")));
    }
}

/// What one line says.
#[derive(Debug)]
struct Record<'a> {
    severity: Severity,
    v: u32,
    time: SystemTime,
    file: Option<&'a str>,
    line: Option<u32>,
    fields: Fields,
    backtrace: Option<String>,
}

/// Options of the text rendering.
#[derive(Debug, Clone, Copy)]
struct TextOptions {
    skip_headers: bool,
    add_dir_header: bool,
    colour: bool,
    pid: u32,
}

/// klog's header file name: the base name, with `--add-dir-header` the directory above it too.
fn header_file(file: Option<&str>, with_dir: bool) -> String {
    let Some(file) = file else {
        return "???".to_string();
    };
    let parts: Vec<&str> = file.split(['/', '\\']).filter(|p| !p.is_empty()).collect();
    let keep = if with_dir { 2 } else { 1 };
    parts[parts.len().saturating_sub(keep)..].join("/")
}

/// A string quoted as Go's `strconv.Quote` does, which klog uses for messages and values.
fn go_quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(quoted, "\\x{:02x}", c as u32);
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

fn text_value(value: &Value) -> String {
    match value {
        Value::Str(text) => go_quote(text),
        Value::I64(n) => n.to_string(),
        Value::U64(n) => n.to_string(),
        Value::F64(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
    }
}

/// UTC calendar date and time of a moment: (year, month, day, hour, minute, second, micros).
fn civil(time: SystemTime) -> (i64, u32, u32, u32, u32, u32, u32) {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        (rest / 3600) as u32,
        (rest % 3600 / 60) as u32,
        (rest % 60) as u32,
        since.subsec_micros(),
    )
}

/// `Lmmdd hh:mm:ss.uuuuuu threadid file:line] "msg" err="..." key="value"...`, as klog writes a
/// structured line (the message quoted). The thread id is the process id, as klog writes it.
fn text_line(record: &Record<'_>, options: TextOptions) -> String {
    let mut line = String::with_capacity(128);
    if !options.skip_headers {
        let (_, month, day, hour, minute, second, micros) = civil(record.time);
        let letter = record.severity.letter();
        let colour = match record.severity {
            _ if !options.colour => None,
            Severity::Info => None,
            Severity::Warning => Some("33"),
            Severity::Error | Severity::Fatal => Some("31"),
        };
        match colour {
            Some(code) => {
                let _ = write!(line, "\x1b[{code}m{letter}\x1b[0m");
            }
            None => line.push(letter),
        }
        let _ = write!(
            line,
            "{month:02}{day:02} {hour:02}:{minute:02}:{second:02}.{micros:06} {:>7} {}:{}] ",
            options.pid,
            header_file(record.file, options.add_dir_header),
            record.line.unwrap_or(1),
        );
    }
    line.push_str(&go_quote(&record.fields.message));
    if let Some(error) = &record.fields.error {
        let _ = write!(line, " err={}", go_quote(error));
    }
    for (key, value) in &record.fields.values {
        let _ = write!(line, " {key}={}", text_value(value));
    }
    line.push('\n');
    if let Some(backtrace) = &record.backtrace {
        line.push_str(backtrace);
        if !backtrace.ends_with('\n') {
            line.push('\n');
        }
    }
    line
}

fn json_value(value: &Value) -> serde_json::Value {
    match value {
        Value::Str(text) => serde_json::Value::from(text.as_str()),
        Value::I64(n) => serde_json::Value::from(*n),
        Value::U64(n) => serde_json::Value::from(*n),
        Value::F64(n) => serde_json::Value::from(*n),
        Value::Bool(b) => serde_json::Value::from(*b),
    }
}

/// One JSON object as component-base's JSON logger writes it: `ts` (milliseconds since the
/// epoch, a float), `caller` (directory/file:line), `msg`, `v` (not on errors), the key/values,
/// and `err` last on errors.
fn json_line(record: &Record<'_>) -> String {
    let millis = record
        .time
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as f64
        / 1_000_000.0;
    let caller = match record.file {
        Some(_) => format!(
            "{}:{}",
            header_file(record.file, true),
            record.line.unwrap_or(0)
        ),
        None => "undefined".to_string(),
    };
    let string = |text: &str| serde_json::Value::from(text).to_string();
    let mut line = String::with_capacity(160);
    let _ = write!(
        line,
        "{{\"ts\":{},\"caller\":{},\"msg\":{}",
        serde_json::Value::from(millis),
        string(&caller),
        string(&record.fields.message)
    );
    let is_error = record.severity >= Severity::Error;
    if !is_error {
        let _ = write!(line, ",\"v\":{}", record.v);
    }
    for (key, value) in &record.fields.values {
        let _ = write!(line, ",{}:{}", string(key), json_value(value));
    }
    if let Some(error) = &record.fields.error {
        let _ = write!(line, ",\"err\":{}", string(error));
    }
    if let Some(backtrace) = &record.backtrace {
        let _ = write!(line, ",\"stacktrace\":{}", string(backtrace));
    }
    line.push_str("}\n");
    line
}

/// The `FormatEvent`: one klog text line or one JSON line per event.
#[derive(Debug, Clone)]
struct KlogFormat {
    format: LogFormat,
    skip_headers: bool,
    add_dir_header: bool,
    backtrace_at: Option<BacktraceAt>,
    pid: u32,
}

impl<S, N> FormatEvent<S, N> for KlogFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let normalized = event.normalized_metadata();
        let metadata = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let mut fields = Fields::default();
        event.record(&mut fields);
        let backtrace = self
            .backtrace_at
            .as_ref()
            .filter(|at| {
                metadata.line() == Some(at.line)
                    && metadata.file().map(base_name) == Some(at.file.as_str())
            })
            .map(|_| Backtrace::force_capture().to_string());
        let record = Record {
            severity: Severity::of(metadata.level()),
            v: v_level(metadata.level()),
            time: SystemTime::now(),
            file: metadata.file(),
            line: metadata.line(),
            fields,
            backtrace,
        };
        let line = match self.format {
            LogFormat::Text => text_line(
                &record,
                TextOptions {
                    skip_headers: self.skip_headers,
                    add_dir_header: self.add_dir_header,
                    colour: writer.has_ansi_escapes(),
                    pid: self.pid,
                },
            ),
            LogFormat::Json => json_line(&record),
        };
        writer.write_str(&line)
    }
}

// ---------------------------------------------------------------------------------------------
// Where lines go: stderr and the log files.

/// Where stderr lines are written: the process's stderr, or a buffer in tests.
#[derive(Clone)]
pub enum StderrSink {
    Process,
    /// Standard output: the info stream of `--log-*-split-stream`.
    ProcessStdout,
    #[cfg(test)]
    Buffer(Arc<Mutex<Vec<u8>>>),
}

impl StderrSink {
    fn write(&self, bytes: &[u8]) {
        match self {
            // Nothing sensible is left to do when stderr itself fails.
            StderrSink::Process => {
                let _ = io::stderr().lock().write_all(bytes);
            }
            StderrSink::ProcessStdout => {
                let _ = io::stdout().lock().write_all(bytes);
            }
            #[cfg(test)]
            StderrSink::Buffer(buffer) => lock(buffer).extend_from_slice(bytes),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while writing a line leaves nothing half-updated that matters: keep logging.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a new log file starts with (klog's header), or nothing with `--skip-log-headers` and
/// for JSON lines, which a header would break.
#[derive(Debug, Clone)]
struct FileHeader {
    host: String,
}

impl FileHeader {
    fn render(&self, now: SystemTime) -> String {
        let (year, month, day, hour, minute, second, _) = civil(now);
        format!(
            "Log file created at: {year:04}/{month:02}/{day:02} {hour:02}:{minute:02}:{second:02}\n\
             Running on machine: {}\n\
             Binary: ferroscale {} for {}/{}\n\
             Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg\n",
            self.host,
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH,
        )
    }
}

/// One open log file and how much has been written to it since it was opened or truncated.
struct LogFile {
    file: File,
    path: PathBuf,
    written: u64,
}

/// Names of files in `--log-dir`, as klog names them.
#[derive(Debug, Clone)]
struct FileNames {
    program: String,
    host: String,
    user: String,
    pid: u32,
}

impl FileNames {
    /// `program.host.user.log.SEVERITY.yyyymmdd-hhmmss.pid` and the link `program.SEVERITY`.
    fn for_severity(&self, severity: Severity, now: SystemTime) -> (String, String) {
        let (year, month, day, hour, minute, second, _) = civil(now);
        (
            format!(
                "{}.{}.{}.log.{}.{year:04}{month:02}{day:02}-{hour:02}{minute:02}{second:02}.{}",
                self.program,
                self.host,
                self.user,
                severity.tag(),
                self.pid
            ),
            format!("{}.{}", self.program, severity.tag()),
        )
    }
}

/// The log files: none, `--log-file` (every line), or one file per severity in `--log-dir`
/// (each line in its severity's file and, without `--one-output`, every lower one's).
enum Files {
    Off,
    Single(Mutex<LogFile>),
    Dir {
        dirs: Vec<PathBuf>,
        names: FileNames,
        open: Box<Mutex<[Option<LogFile>; 4]>>,
        one_output: bool,
    },
}

/// Routes each formatted line by severity: stderr per [`LoggingFlags::to_stderr`], files per
/// [`Files`]. A file reaching `--log-file-max-size` starts over as klog's does: `--log-file` is
/// truncated, a `--log-dir` file is followed by a new one named with the current time (the
/// `program.SEVERITY` link moves to it).
struct Router {
    to_stderr: [bool; 4],
    stderr: StderrSink,
    /// Where the stream's lines below ERROR go: `stderr`, or standard output with split streams.
    info_stream: StderrSink,
    files: Files,
    max_bytes: u64,
    header: Option<FileHeader>,
    /// A failing file is reported once on stderr, not once per line.
    file_error_reported: AtomicBool,
    /// The wall clock, for file names and headers (a fixed one in tests).
    clock: fn() -> SystemTime,
}

impl Router {
    fn new(flags: &LoggingFlags, stderr: StderrSink) -> io::Result<Router> {
        let host = host_name();
        let header = (!flags.skip_log_headers && flags.format == LogFormat::Text)
            .then(|| FileHeader { host: host.clone() });
        let mut to_stderr = [false; 4];
        for severity in Severity::ALL {
            to_stderr[severity.index()] = flags.to_stderr(severity);
        }
        let files = match (&flags.log_file, &flags.log_dir) {
            _ if !flags.to_files() => Files::Off,
            (Some(path), _) => {
                // Opened now (appending, as klog at start-up) so that a path that cannot be
                // written fails `run` at once, naming it.
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!(
                                "creating the directory of --log-file {}: {e}",
                                path.display()
                            ),
                        )
                    })?;
                }
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!("opening --log-file {}: {e}", path.display()),
                        )
                    })?;
                let written = file.metadata().map(|m| m.len()).unwrap_or(0);
                let mut log_file = LogFile {
                    file,
                    path: path.clone(),
                    written,
                };
                if let Some(header) = &header {
                    write_header(&mut log_file, header)?;
                }
                Files::Single(Mutex::new(log_file))
            }
            (None, dir) => {
                // klog tries --log-dir, then the temporary directory.
                let mut dirs: Vec<PathBuf> = dir.iter().cloned().collect();
                dirs.push(std::env::temp_dir());
                Files::Dir {
                    dirs,
                    names: FileNames {
                        program: program_name(),
                        host,
                        user: user_name(),
                        pid: std::process::id(),
                    },
                    open: Box::new(Mutex::new([None, None, None, None])),
                    one_output: flags.one_output,
                }
            }
        };
        let info_stream = match &stderr {
            StderrSink::Process if flags.info_to_stdout() => StderrSink::ProcessStdout,
            other => other.clone(),
        };
        Ok(Router {
            to_stderr,
            info_stream,
            stderr,
            files,
            max_bytes: flags.max_file_bytes(),
            header,
            file_error_reported: AtomicBool::new(false),
            clock: SystemTime::now,
        })
    }

    fn write(&self, severity: Severity, line: &[u8]) {
        if self.to_stderr[severity.index()] {
            if severity < Severity::Error {
                self.info_stream.write(line);
            } else {
                self.stderr.write(line);
            }
        }
        if let Err(error) = self.write_files(severity, line)
            && !self.file_error_reported.swap(true, Ordering::Relaxed)
        {
            self.stderr
                .write(format!("ferroscale: writing the log file: {error}\n").as_bytes());
        }
    }

    fn write_files(&self, severity: Severity, line: &[u8]) -> io::Result<()> {
        match &self.files {
            Files::Off => Ok(()),
            Files::Single(file) => {
                let mut file = lock(file);
                if file.written.saturating_add(line.len() as u64) >= self.max_bytes {
                    // klog truncates --log-file and starts it over.
                    let path = file.path.clone();
                    *file = LogFile {
                        file: File::create(&path)?,
                        path,
                        written: 0,
                    };
                    if let Some(header) = &self.header {
                        write_header(&mut file, header)?;
                    }
                }
                append(&mut file, line)
            }
            Files::Dir {
                dirs,
                names,
                open,
                one_output,
            } => {
                let mut open = lock(open);
                let targets: Vec<Severity> = if *one_output {
                    vec![severity]
                } else {
                    Severity::ALL
                        .into_iter()
                        .filter(|s| *s <= severity)
                        .collect()
                };
                for target in targets {
                    let slot = &mut open[target.index()];
                    let full = slot.as_ref().is_some_and(|f| {
                        f.written.saturating_add(line.len() as u64) >= self.max_bytes
                    });
                    if slot.is_none() || full {
                        *slot = Some(self.create_in_dir(dirs, names, target)?);
                    }
                    if let Some(file) = slot.as_mut() {
                        append(file, line)?;
                    }
                }
                Ok(())
            }
        }
    }

    fn create_in_dir(
        &self,
        dirs: &[PathBuf],
        names: &FileNames,
        severity: Severity,
    ) -> io::Result<LogFile> {
        let now = (self.clock)();
        let (name, link) = names.for_severity(severity, now);
        let mut last_error = io::Error::other("no log directory");
        for dir in dirs {
            let path = dir.join(&name);
            match OpenOptions::new().create(true).append(true).open(&path) {
                Ok(file) => {
                    let link = dir.join(&link);
                    // The link is a convenience, as in klog: failing to move it is not an error.
                    let _ = std::fs::remove_file(&link);
                    #[cfg(unix)]
                    let _ = std::os::unix::fs::symlink(&name, &link);
                    let written = file.metadata().map(|m| m.len()).unwrap_or(0);
                    let mut log_file = LogFile {
                        file,
                        path,
                        written,
                    };
                    if let Some(header) = &self.header {
                        append(&mut log_file, header.render(now).as_bytes())?;
                    }
                    return Ok(log_file);
                }
                Err(e) => {
                    last_error =
                        io::Error::new(e.kind(), format!("creating {}: {e}", path.display()))
                }
            }
        }
        Err(last_error)
    }
}

fn append(file: &mut LogFile, bytes: &[u8]) -> io::Result<()> {
    file.file
        .write_all(bytes)
        .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", file.path.display())))?;
    file.written = file.written.saturating_add(bytes.len() as u64);
    Ok(())
}

fn write_header(file: &mut LogFile, header: &FileHeader) -> io::Result<()> {
    append(file, header.render(SystemTime::now()).as_bytes())
}

/// The host name up to its first dot, as klog names files.
fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "unknownhost".to_string());
    name.split('.').next().unwrap_or(&name).to_string()
}

fn user_name() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "unknownuser".to_string())
}

fn program_name() -> String {
    std::env::args()
        .next()
        .map(|arg0| base_name(&arg0).to_string())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "ferroscale".to_string())
}

/// The `MakeWriter`: a writer per line that knows the line's severity.
#[derive(Clone)]
struct RouterWriterMaker(Arc<Router>);

struct RouterWriter {
    router: Arc<Router>,
    severity: Severity,
}

impl Write for RouterWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.router.write(self.severity, bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for RouterWriterMaker {
    type Writer = RouterWriter;

    fn make_writer(&'a self) -> RouterWriter {
        RouterWriter {
            router: self.0.clone(),
            severity: Severity::Info,
        }
    }

    fn make_writer_for(&'a self, metadata: &Metadata<'_>) -> RouterWriter {
        RouterWriter {
            router: self.0.clone(),
            severity: Severity::of(metadata.level()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Putting it together.

/// The subscriber for these flags. `rust_log`, when it parses, replaces `--v` and `--vmodule`
/// (a developer's override, as before).
fn build(
    flags: &LoggingFlags,
    stderr: StderrSink,
    stderr_is_terminal: bool,
    rust_log: Option<&str>,
) -> io::Result<impl Subscriber + Send + Sync + 'static> {
    let router = Router::new(flags, stderr)?;
    let env_filter = rust_log.and_then(|directives| {
        tracing_subscriber::EnvFilter::builder()
            .parse(directives)
            .ok()
    });
    let verbosity = env_filter.is_none().then(|| VerbosityFilter {
        verbosity: flags.verbosity,
        vmodule: flags.vmodule.clone(),
    });
    // Colour only for a person at a terminal, and only when no file receives the same bytes: a
    // container's stderr is a pipe or a file, and escape codes there end up as noise in every
    // log collector.
    let colour = stderr_is_terminal && !flags.to_files() && flags.format == LogFormat::Text;
    let format = tracing_subscriber::fmt::layer()
        .event_format(KlogFormat {
            format: flags.format,
            skip_headers: flags.skip_headers,
            add_dir_header: flags.add_dir_header,
            backtrace_at: flags.backtrace_at.clone(),
            pid: std::process::id(),
        })
        .with_ansi(colour)
        .with_writer(RouterWriterMaker(Arc::new(router)));
    Ok(tracing_subscriber::registry()
        .with(env_filter)
        .with(verbosity)
        .with(format))
}

/// Installs the process's logging. A second call (tests) keeps the first subscriber.
pub fn init(flags: &LoggingFlags) -> anyhow::Result<()> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let subscriber = build(
        flags,
        StderrSink::Process,
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        rust_log.as_deref(),
    )?;
    let _ = subscriber.try_init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(pairs: &[(&str, &str)]) -> Result<LoggingFlags, String> {
        let mut flags = LoggingFlags::default();
        for (flag, value) in pairs {
            flags.set(flag, value)?;
        }
        flags.validate()?;
        Ok(flags)
    }

    /// Runs `body` under a subscriber for `pairs` and returns what reached stderr.
    fn capture(pairs: &[(&str, &str)], body: impl FnOnce()) -> String {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let subscriber = build(
            &flags(pairs).unwrap(),
            StderrSink::Buffer(buffer.clone()),
            false,
            None,
        )
        .unwrap();
        tracing::subscriber::with_default(subscriber, body);
        String::from_utf8(lock(&buffer).clone()).unwrap()
    }

    #[test]
    fn defaults_are_upstream_cluster_autoscaler_1_36s() {
        let flags = LoggingFlags::default();
        assert_eq!(flags.verbosity, 0);
        assert!(flags.log_to_stderr);
        assert!(!flags.also_log_to_stderr);
        // Upstream's main sets both before parsing the flags.
        assert_eq!(flags.stderr_threshold, Severity::Info);
        assert!(!flags.legacy_stderr_threshold_behavior);
        assert_eq!(flags.log_file_max_size_mb, 1800);
        assert_eq!(flags.flush_frequency, Duration::from_secs(5));
        assert_eq!(flags.format, LogFormat::Text);
    }

    #[test]
    fn every_flag_parses_in_both_spellings() {
        let flags = flags(&[
            ("v", "4"),
            ("vmodule", "watch=5,ferroscale_kube::*=7"),
            ("logtostderr", "false"),
            ("alsologtostderr", "true"),
            ("alsologtostderrthreshold", "warning"),
            ("stderrthreshold", "2"),
            ("legacy_stderr_threshold_behavior", "true"),
            ("log_dir", "/var/log/ca"),
            ("log-file", "/var/log/ca.log"),
            ("log_file_max_size", "10"),
            ("skip_headers", "true"),
            ("skip-log-headers", "1"),
            ("add_dir_header", "t"),
            ("one_output", "true"),
            ("log-flush-frequency", "10s"),
            ("log_backtrace_at", "run.rs:120"),
        ])
        .unwrap();
        assert_eq!(flags.verbosity, 4);
        assert_eq!(
            flags.vmodule,
            vec![
                VModule {
                    pattern: "watch".into(),
                    level: 5
                },
                VModule {
                    pattern: "ferroscale_kube::*".into(),
                    level: 7
                }
            ]
        );
        assert!(!flags.log_to_stderr && flags.also_log_to_stderr);
        assert_eq!(flags.also_log_to_stderr_threshold, Severity::Warning);
        assert_eq!(flags.stderr_threshold, Severity::Error);
        assert!(flags.legacy_stderr_threshold_behavior);
        assert_eq!(flags.log_dir, Some(PathBuf::from("/var/log/ca")));
        assert_eq!(flags.log_file, Some(PathBuf::from("/var/log/ca.log")));
        assert_eq!(flags.max_file_bytes(), 10 * 1024 * 1024);
        assert!(flags.skip_headers && flags.skip_log_headers && flags.add_dir_header);
        assert!(flags.one_output);
        assert_eq!(flags.flush_frequency, Duration::from_secs(10));
        assert_eq!(
            flags.backtrace_at,
            Some(BacktraceAt {
                file: "run.rs".into(),
                line: 120
            })
        );
        assert!(is_boolean("skip_headers") && is_boolean("logtostderr"));
        assert!(!is_boolean("log_dir") && !is_flag("scan-interval"));
    }

    #[test]
    fn bad_values_name_the_flag_and_the_value() {
        for (flag, value, expected) in [
            ("v", "loud", "--v"),
            ("vmodule", "watch", "\"watch\""),
            ("vmodule", "=3", "empty pattern"),
            ("vmodule", "watch=x", "\"watch=x\""),
            ("stderrthreshold", "debug", "\"debug\""),
            ("logtostderr", "maybe", "\"maybe\""),
            ("log-file-max-size", "-1", "megabytes"),
            ("log-flush-frequency", "5", "\"5\""),
            ("log-backtrace-at", "run:12", "extension"),
            ("log-backtrace-at", "run.rs:x", "positive"),
            ("logging-format", "yaml", "\"yaml\""),
        ] {
            let err = flags(&[(flag, value)]).unwrap_err();
            assert!(
                err.contains(expected) && err.contains(flag),
                "{flag}={value}: {err}"
            );
        }
        let err = flags(&[("logging-format", "json"), ("vmodule", "run=5")]).unwrap_err();
        assert!(err.contains("--vmodule"), "{err}");
        assert_eq!(
            flags(&[("log-backtrace-at", "")]).unwrap().backtrace_at,
            None
        );
    }

    #[test]
    fn stderr_threshold_is_honoured_with_logtostderr_as_upstream_opts_in() {
        use Severity::*;
        let on_stderr = |pairs: &[(&str, &str)]| -> Vec<Severity> {
            let flags = flags(pairs).unwrap();
            Severity::ALL
                .into_iter()
                .filter(|s| flags.to_stderr(*s))
                .collect()
        };
        // The chart's flags: everything on stderr.
        assert_eq!(
            on_stderr(&[("logtostderr", "true"), ("stderrthreshold", "info")]),
            vec![Info, Warning, Error, Fatal]
        );
        assert_eq!(
            on_stderr(&[("stderrthreshold", "ERROR")]),
            vec![Error, Fatal]
        );
        // klog's legacy rule ignores the threshold when logging to stderr only.
        assert_eq!(
            on_stderr(&[
                ("stderrthreshold", "ERROR"),
                ("legacy-stderr-threshold-behavior", "true")
            ]),
            vec![Info, Warning, Error, Fatal]
        );
        // With files: the threshold, and --alsologtostderr from its own threshold.
        assert_eq!(
            on_stderr(&[("logtostderr", "false"), ("stderrthreshold", "FATAL")]),
            vec![Fatal]
        );
        assert_eq!(
            on_stderr(&[
                ("logtostderr", "false"),
                ("stderrthreshold", "FATAL"),
                ("alsologtostderr", "true"),
                ("alsologtostderrthreshold", "WARNING"),
            ]),
            vec![Warning, Error, Fatal]
        );
    }

    #[test]
    fn v_levels_keep_the_meaning_of_v() {
        let visible = |v: &str| -> String {
            capture(&[("v", v)], || {
                tracing::error!("e");
                tracing::warn!("w");
                tracing::info!("i");
                tracing::debug!("d");
                tracing::trace!("t");
            })
            .lines()
            .map(|line| {
                line.rsplit(' ')
                    .next()
                    .unwrap()
                    .trim_matches('"')
                    .to_string()
            })
            .collect()
        };
        assert_eq!(visible("0"), "ew");
        assert_eq!(visible("1"), "ewi");
        assert_eq!(visible("4"), "ewi");
        assert_eq!(visible("5"), "ewid");
        assert_eq!(visible("9"), "ewidt");
    }

    #[test]
    fn vmodule_raises_verbosity_for_matching_sources_only() {
        let this_file = base_name(file!()).trim_end_matches(".rs").to_string();
        let matching = format!("{this_file}=5");
        let out = capture(&[("v", "1"), ("vmodule", &matching)], || {
            tracing::debug!("from this file")
        });
        assert!(out.contains("from this file"), "{out}");
        let out = capture(&[("v", "1"), ("vmodule", "some_other_file=5")], || {
            tracing::debug!("from this file")
        });
        assert!(out.is_empty(), "{out}");
        let out = capture(
            &[("v", "1"), ("vmodule", "ferroscale::logging::*=9")],
            || tracing::trace!("by module path"),
        );
        assert!(out.contains("by module path"), "{out}");
        // vmodule never lowers --v.
        let out = capture(
            &[("v", "5"), ("vmodule", &format!("{this_file}=0"))],
            || tracing::debug!("still shown"),
        );
        assert!(out.contains("still shown"), "{out}");
        assert!(glob("watch*", "watcher") && glob("w?tch", "watch") && !glob("watch", "watcher"));
    }

    #[test]
    fn text_lines_have_klogs_header_and_quoted_key_values() {
        let out = capture(&[("v", "1")], || {
            tracing::info!(node = "n-1", count = 3u64, ready = true, "node \"removed\"");
            tracing::error!(error = "connection refused", group = "g", "scale-up failed");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        let info = lines[0];
        // Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg
        let bytes = info.as_bytes();
        assert_eq!(bytes[0], b'I', "{info}");
        assert!(bytes[1..5].iter().all(u8::is_ascii_digit), "{info}");
        assert_eq!(&info[5..6], " ");
        assert_eq!(&info[8..9], ":");
        assert_eq!(&info[11..12], ":");
        assert_eq!(&info[14..15], ".");
        assert!(info[15..21].bytes().all(|b| b.is_ascii_digit()), "{info}");
        assert_eq!(
            info[22..29].trim(),
            std::process::id().to_string(),
            "the pid, space-padded to 7: {info}"
        );
        let rest = &info[30..];
        assert!(rest.starts_with("logging.rs:"), "{info}");
        assert!(
            rest.ends_with(r#"] "node \"removed\"" node="n-1" count=3 ready=true"#),
            "{info}"
        );
        let error = lines[1];
        assert!(error.starts_with('E'), "{error}");
        assert!(
            error.ends_with(r#"] "scale-up failed" err="connection refused" group="g""#),
            "{error}"
        );
        assert!(!out.contains('\u{1b}'), "no colour on a pipe: {out}");
    }

    #[test]
    fn skip_headers_and_add_dir_header_change_the_prefix() {
        let out = capture(&[("v", "1"), ("skip-headers", "true")], || {
            tracing::info!(k = "v", "plain")
        });
        assert_eq!(out, "\"plain\" k=\"v\"\n");
        let out = capture(&[("v", "1"), ("add-dir-header", "true")], || {
            tracing::info!("with dir")
        });
        assert!(out.contains(" src/logging.rs:"), "{out}");
    }

    #[test]
    fn json_lines_have_the_kubernetes_field_names() {
        let out = capture(&[("v", "5"), ("logging-format", "json")], || {
            tracing::info!(node = "n-1", count = 3u64, "node removed");
            tracing::debug!("a provider call");
            tracing::warn!(error = "timeout", "releasing the lease");
            tracing::error!(error = "connection refused", group = "g", "scale-up failed");
        });
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect();
        assert_eq!(lines.len(), 4, "{out}");
        let now_millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as f64;
        for line in &lines {
            let ts = line["ts"].as_f64().expect("ts is a number");
            assert!(
                (now_millis - ts).abs() < 60_000.0,
                "ts is milliseconds since the epoch: {line}"
            );
            let caller = line["caller"].as_str().unwrap();
            assert!(caller.starts_with("src/logging.rs:"), "{line}");
        }
        assert_eq!(lines[0]["msg"], "node removed");
        assert_eq!(lines[0]["v"], 1);
        assert_eq!(lines[0]["node"], "n-1");
        assert_eq!(lines[0]["count"], 3);
        assert_eq!(lines[1]["v"], 5);
        assert_eq!(lines[2]["v"], 0);
        assert_eq!(lines[2]["err"], "timeout");
        assert_eq!(lines[3]["err"], "connection refused");
        assert_eq!(lines[3]["group"], "g");
        assert!(
            lines[3].get("v").is_none(),
            "errors carry no v: {}",
            lines[3]
        );
        // The order Kubernetes components write: ts, caller, msg, v, then the key/values.
        let first = out.lines().next().unwrap();
        let positions: Vec<usize> = ["\"ts\"", "\"caller\"", "\"msg\"", "\"v\"", "\"node\""]
            .iter()
            .map(|key| first.find(key).unwrap())
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{first}");
        let last = out.lines().last().unwrap();
        assert!(
            last.ends_with(r#""group":"g","err":"connection refused"}"#),
            "{last}"
        );
    }

    #[test]
    fn a_backtrace_is_attached_at_the_named_line_only() {
        // The line of the first event below.
        let line = line!() + 3;
        let at = format!("logging.rs:{line}");
        let out = capture(&[("v", "1"), ("log-backtrace-at", &at)], || {
            tracing::info!("here");
            tracing::info!("not here");
        });
        let (first, second) = out.split_once("\"not here\"").unwrap();
        assert!(
            first.contains("\"here\"\n") && first.lines().count() > 2,
            "{out}"
        );
        assert_eq!(second, "\n");
    }

    #[test]
    fn log_file_receives_the_lines_and_starts_over_at_its_maximum_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("ca.log");
        let mut flags = flags(&[
            ("v", "1"),
            ("logtostderr", "false"),
            ("stderrthreshold", "ERROR"),
            ("log-file", path.to_str().unwrap()),
        ])
        .unwrap();
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let router = Router::new(&flags, StderrSink::Buffer(buffer.clone())).unwrap();
        router.write(Severity::Info, b"I first\n");
        router.write(Severity::Error, b"E second\n");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("Log file created at: "), "{text}");
        assert!(text.contains("Log line format: [IWEF]mmdd"), "{text}");
        assert!(text.ends_with("I first\nE second\n"), "{text}");
        assert_eq!(
            lock(&buffer).as_slice(),
            b"E second\n",
            "only errors on stderr"
        );

        // A tiny maximum: the file is truncated and starts over, as klog's --log-file does.
        flags.skip_log_headers = true;
        let mut router = Router::new(&flags, StderrSink::Buffer(buffer.clone())).unwrap();
        router.max_bytes = 20;
        router.write(Severity::Info, b"0123456789\n");
        router.write(Severity::Info, b"abcdefghij\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "abcdefghij\n");
    }

    #[test]
    fn log_dir_has_a_file_per_severity_and_one_output_keeps_lines_in_their_own() {
        for one_output in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let flags = flags(&[
                ("logtostderr", "false"),
                ("stderrthreshold", "FATAL"),
                ("skip-log-headers", "true"),
                ("one-output", &one_output.to_string()),
                ("log-dir", dir.path().to_str().unwrap()),
            ])
            .unwrap();
            let router = Router::new(&flags, StderrSink::Buffer(Default::default())).unwrap();
            router.write(Severity::Info, b"info\n");
            router.write(Severity::Error, b"error\n");
            let program = program_name();
            let read = |tag: &str| {
                std::fs::read_to_string(dir.path().join(format!("{program}.{tag}")))
                    .unwrap_or_default()
            };
            if one_output {
                assert_eq!(read("INFO"), "info\n");
                assert_eq!(read("WARNING"), "");
            } else {
                assert_eq!(read("INFO"), "info\nerror\n");
                assert_eq!(read("WARNING"), "error\n");
            }
            assert_eq!(read("ERROR"), "error\n");
            let names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert!(
                names.iter().any(|n| n.starts_with(&format!("{program}."))
                    && n.contains(".log.ERROR.")
                    && n.ends_with(&format!(".{}", std::process::id()))),
                "{names:?}"
            );
        }
    }

    #[test]
    fn a_full_log_dir_file_is_followed_by_a_new_one_and_the_link_moves() {
        static NOW: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1_000);
        fn clock() -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(NOW.load(Ordering::Relaxed))
        }
        let dir = tempfile::tempdir().unwrap();
        let flags = flags(&[
            ("logtostderr", "false"),
            ("stderrthreshold", "FATAL"),
            ("skip-log-headers", "true"),
            ("one-output", "true"),
            ("log-dir", dir.path().to_str().unwrap()),
        ])
        .unwrap();
        let mut router = Router::new(&flags, StderrSink::Buffer(Default::default())).unwrap();
        router.max_bytes = 20;
        router.clock = clock;
        router.write(Severity::Info, b"0123456789\n");
        NOW.store(2_000, Ordering::Relaxed);
        router.write(Severity::Info, b"abcdefghij\n");
        let Files::Dir { names, .. } = &router.files else {
            panic!("log-dir files")
        };
        let name_at = |secs: u64| {
            names
                .for_severity(Severity::Info, UNIX_EPOCH + Duration::from_secs(secs))
                .0
        };
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        assert_eq!(read(&name_at(1_000)), "0123456789\n");
        assert_eq!(read(&name_at(2_000)), "abcdefghij\n");
        assert_eq!(read(&format!("{}.INFO", names.program)), "abcdefghij\n");
        assert!(
            name_at(2_000).contains(".log.INFO.19700101-003320."),
            "{}",
            name_at(2_000)
        );
    }

    #[test]
    fn civil_dates_are_right() {
        let at = |secs: u64| civil(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0), (1970, 1, 1, 0, 0, 0, 0));
        // 2024-02-29T12:34:56Z
        assert_eq!(at(1_709_210_096), (2024, 2, 29, 12, 34, 56, 0));
        assert_eq!(go_quote("a\"b\\\n\u{1b}é"), "\"a\\\"b\\\\\\n\\x1bé\"");
    }
}
