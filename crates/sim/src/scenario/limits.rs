//! What a scenario may ask of the machine. A scenario is external input: without bounds, one line
//! (`count: 100000000000`, `file: /dev/zero`, a YAML document nested 100,000 levels deep) would
//! exhaust memory or CPU before any error could be printed. Every bound here is checked before the
//! work it bounds: file sizes before reading, nesting before parsing, counts before allocating,
//! loops before running. The values are documented in `docs/scenario.md`.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

/// The bounds a scenario is checked against. [`Limits::DEFAULT`] is what the binary uses; tests and
/// embedders may pass smaller ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one file: the scenario file or one `objects: - file:`.
    pub file_bytes: u64,
    /// Bytes of the scenario file and every objects file together.
    pub total_bytes: u64,
    /// `objects:` entries that name a file.
    pub object_files: usize,
    /// Nesting levels of YAML, counted before parsing (see [`check_nesting`]).
    pub depth: usize,
    pub node_groups: usize,
    /// Nodes that can exist at once: the Node objects and the groups' initial nodes when the
    /// scenario is read, then every node the run creates as it plays (not the groups' `maxSize`,
    /// which says what a cloud would allow, not what a run makes).
    pub nodes: usize,
    /// Pods over the whole run: the Pod objects plus every `create.count`.
    pub pods: usize,
    pub events: usize,
    pub expectations: usize,
    /// Simulated time of one run.
    pub duration: Duration,
    /// Engine loops of one run: `duration / scan-interval`.
    pub loops: u64,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        file_bytes: 32 << 20,
        total_bytes: 64 << 20,
        object_files: 64,
        depth: 64,
        node_groups: 1_000,
        nodes: 100_000,
        pods: 1_000_000,
        events: 100_000,
        expectations: 10_000,
        duration: Duration::from_secs(30 * 24 * 3600),
        loops: 100_000,
    };
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
    }
}

/// The shortest scan interval a simulation accepts: shorter intervals only multiply loops (the
/// engine reacts to nothing faster than a second) and turn minutes of simulated time into hours of
/// wall-clock time.
pub const MIN_SCAN_INTERVAL: Duration = Duration::from_secs(1);

/// Why a file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// Not a regular file: a directory, a device such as `/dev/zero`, a FIFO, a socket.
    NotARegularFile(&'static str),
    /// Larger than `limit` bytes (`size` is what was seen, at least `limit + 1`).
    TooLarge {
        size: u64,
        limit: u64,
    },
    NotUtf8,
    Io(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::NotARegularFile(what) => {
                write!(
                    f,
                    "not a regular file ({what}); only regular files are read"
                )
            }
            ReadError::TooLarge { size, limit } => write!(
                f,
                "the file has {} bytes; a file may have at most {} bytes",
                group_digits(*size),
                group_digits(*limit)
            ),
            ReadError::NotUtf8 => f.write_str("the file is not UTF-8 text"),
            ReadError::Io(e) => f.write_str(e),
        }
    }
}

fn file_kind(metadata: &std::fs::Metadata) -> &'static str {
    let kind = metadata.file_type();
    if kind.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    "not a regular file"
}

/// Reads a regular file of at most `limit` bytes as text. The type is checked before opening (a
/// FIFO would block the open) and again on the opened file; the read itself stops one byte past
/// the limit, so a file that grows meanwhile cannot make it read more.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, ReadError> {
    let io = |e: std::io::Error| ReadError::Io(e.to_string());
    let before = std::fs::metadata(path).map_err(io)?;
    if !before.is_file() {
        return Err(ReadError::NotARegularFile(file_kind(&before)));
    }
    let file = File::open(path).map_err(io)?;
    let opened = file.metadata().map_err(io)?;
    if !opened.is_file() {
        return Err(ReadError::NotARegularFile(file_kind(&opened)));
    }
    if opened.len() > limit {
        return Err(ReadError::TooLarge {
            size: opened.len(),
            limit,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(opened.len()).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let read = bytes.len() as u64;
    if read > limit {
        return Err(ReadError::TooLarge { size: read, limit });
    }
    String::from_utf8(bytes).map_err(|_| ReadError::NotUtf8)
}

/// Nesting deeper than the limit, found before parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep {
    /// 1-based line where the limit is first exceeded.
    pub line: usize,
    pub limit: usize,
}

/// Checks YAML nesting without parsing, in one pass over the text: the YAML parser's cost grows
/// faster than linearly with nesting, so 100,000 levels must be refused before it sees them.
///
/// The count is an estimate from the text's shape, not a parse: each deeper indentation column
/// of block style is a level, each `- ` sequence entry opens one more, and each open `[` or `{`
/// of flow style is one more. Literal and folded block scalars (`|`, `>`) and quoted strings are
/// skipped, and comments ignored. A key and a sequence written at the same column count once, so
/// the real depth may be up to twice the estimate; the parser refuses more than 128 levels on its
/// own, which covers that case at a cost that is still small.
pub fn check_nesting(text: &str, limit: usize) -> Result<(), TooDeep> {
    let mut scan = NestingScan::default();
    for (index, line) in text.lines().enumerate() {
        if scan.line(line) > limit {
            return Err(TooDeep {
                line: index + 1,
                limit,
            });
        }
    }
    Ok(())
}

/// The state [`check_nesting`] carries from line to line.
#[derive(Default)]
struct NestingScan {
    /// Columns of the open block-style levels, increasing.
    columns: Vec<usize>,
    /// Open flow brackets.
    flow: usize,
    /// Inside a block scalar whose parent is at this column: lines indented more are its text.
    block_scalar: Option<usize>,
    /// Inside a quoted scalar that continues on the next line.
    quote: Option<char>,
}

impl NestingScan {
    /// Takes one line and returns the deepest level it reaches.
    fn line(&mut self, line: &str) -> usize {
        let column = line.len() - line.trim_start_matches(' ').len();
        let content = &line[column..];
        if let Some(parent) = self.block_scalar {
            if content.trim().is_empty() || column > parent {
                return self.columns.len();
            }
            self.block_scalar = None;
        }
        let mut rest = content;
        let mut deepest = self.columns.len() + self.flow;
        if self.quote.is_none() && self.flow == 0 {
            if rest.is_empty() || rest.starts_with('#') {
                return deepest;
            }
            if rest.starts_with("---") || rest.starts_with("...") {
                // A document marker: the next document starts at the root, possibly on this line.
                self.columns.clear();
                return self.scan_inline(&rest[3..], column + 3);
            }
            self.open_block_level(column);
            let mut at = column;
            // `- - key: value`: each entry indicator opens a level at the column after it.
            while let Some(after) = rest
                .strip_prefix("- ")
                .or_else(|| rest.strip_prefix("? "))
                .or_else(|| (rest == "-").then_some(""))
            {
                let skipped = rest.len() - after.trim_start_matches(' ').len();
                at += skipped;
                rest = &rest[skipped..];
                self.open_block_level(at);
            }
            deepest = self.columns.len();
        }
        deepest.max(self.scan_inline(rest, column))
    }

    fn open_block_level(&mut self, column: usize) {
        while self.columns.last().is_some_and(|c| *c >= column) {
            self.columns.pop();
        }
        self.columns.push(column);
    }

    /// Follows quotes and flow brackets through the rest of a line; notes a block scalar header.
    fn scan_inline(&mut self, rest: &str, column: usize) -> usize {
        let mut deepest = self.columns.len() + self.flow;
        let mut token_start = true;
        let mut previous = ' ';
        let mut chars = rest.chars().peekable();
        while let Some(c) = chars.next() {
            if let Some(quote) = self.quote {
                match (quote, c) {
                    ('"', '\\') => {
                        chars.next();
                    }
                    ('\'', '\'') if chars.peek() == Some(&'\'') => {
                        chars.next();
                    }
                    (q, c) if q == c => self.quote = None,
                    _ => {}
                }
                previous = c;
                continue;
            }
            match c {
                '#' if previous == ' ' || previous == '\t' => break,
                '"' | '\'' if token_start => self.quote = Some(c),
                // After a tag or an anchor (`!!seq [`, `&a {`) the collection still opens: any
                // bracket after white space counts, at worst a plain scalar's `[` is one level too
                // many.
                '[' | '{'
                    if token_start || self.flow > 0 || previous == ' ' || previous == '\t' =>
                {
                    self.flow += 1;
                    deepest = deepest.max(self.columns.len() + self.flow);
                }
                ']' | '}' if self.flow > 0 => self.flow -= 1,
                '|' | '>' if token_start && self.flow == 0 => {
                    let header: String = chars.clone().take_while(|c| *c != '#').collect();
                    if header
                        .trim()
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == '-' || c == '+')
                    {
                        self.block_scalar = Some(column);
                        break;
                    }
                }
                _ => {}
            }
            token_start = match c {
                ' ' | '\t' => token_start || matches!(previous, ':' | '-' | ',' | '?'),
                '[' | '{' | ',' => self.flow > 0,
                _ => false,
            };
            previous = c;
        }
        deepest
    }
}

/// `1234567` → `1,234,567`, for limits in messages.
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_of(text: &str) -> usize {
        let mut scan = NestingScan::default();
        text.lines().map(|l| scan.line(l)).max().unwrap_or(0)
    }

    #[test]
    fn block_and_flow_levels_are_counted() {
        assert_eq!(depth_of("a: 1\nb: 2\n"), 1);
        assert_eq!(depth_of("a:\n  b:\n    c: 1\nd: 2\n"), 3);
        assert_eq!(depth_of("a: {b: {c: [1, 2]}}\n"), 4);
        // The root column and one level per entry indicator.
        assert_eq!(depth_of("- - - x\n"), 4);
        assert_eq!(depth_of("a: [1,\n  [2,\n   {b: 3}]]\nc: 1\n"), 4);
    }

    #[test]
    fn scalars_comments_and_block_text_are_not_levels() {
        assert_eq!(depth_of("a: \"[[[{{\"\nb: 'it''s [ {'\n"), 1);
        assert_eq!(depth_of("a: x[1] # [[[[\nb: c{d\n"), 1);
        assert_eq!(
            depth_of("script: |\n  a:\n      b:\n          c: [[[[\nnext: 1\n"),
            1
        );
        assert_eq!(depth_of("a: \"multi [\n  line {\"\nb: 1\n"), 1);
    }

    #[test]
    fn deep_nesting_fails_on_the_line_that_exceeds_the_limit() {
        let flow = "[".repeat(100_000) + &"]".repeat(100_000);
        assert_eq!(
            check_nesting(&flow, 64),
            Err(TooDeep { line: 1, limit: 64 })
        );
        let block: String = (0..1_000)
            .map(|i| format!("{}a:\n", " ".repeat(i)))
            .collect();
        assert_eq!(
            check_nesting(&block, 64),
            Err(TooDeep {
                line: 65,
                limit: 64
            })
        );
        assert_eq!(check_nesting("a:\n  b: [1]\n", 64), Ok(()));
        let tagged = format!("a: !!seq {}", "[".repeat(1000));
        assert!(check_nesting(&tagged, 64).is_err());
        let marker = format!("--- {}", "{a: ".repeat(1000));
        assert!(check_nesting(&marker, 64).is_err());
    }

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = std::env::temp_dir().join(format!("ferroscale-limits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ten.yaml");
        std::fs::write(&file, "0123456789").unwrap();
        assert_eq!(read_bounded(&file, 10).as_deref(), Ok("0123456789"));
        assert_eq!(
            read_bounded(&file, 9),
            Err(ReadError::TooLarge { size: 10, limit: 9 })
        );
        assert_eq!(
            read_bounded(&dir, 10),
            Err(ReadError::NotARegularFile("a directory"))
        );
        #[cfg(unix)]
        assert_eq!(
            read_bounded(Path::new("/dev/zero"), 10),
            Err(ReadError::NotARegularFile("a character device"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn digits_are_grouped() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(1_000_000), "1,000,000");
    }
}
