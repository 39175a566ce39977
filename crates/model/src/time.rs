//! Time as the engine sees it: an explicit timestamp passed in by the caller (the decision step never
//! reads the clock), and Go-syntax durations as upstream flags and annotations write them.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

use thiserror::Error;

/// Milliseconds since the Unix epoch. The simulator starts its clock wherever it likes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub fn from_secs(secs: i64) -> Timestamp {
        Timestamp(secs.saturating_mul(1000))
    }

    /// A wall-clock reading the caller took (`SystemTime::now()` at the edge of the process); a
    /// time before the epoch is the epoch.
    pub fn from_system_time(time: std::time::SystemTime) -> Timestamp {
        let millis = time
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Timestamp(millis)
    }

    pub fn millis(&self) -> i64 {
        self.0
    }

    pub fn secs(&self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// Time elapsed since `earlier`; zero when `earlier` is in the future.
    pub fn since(&self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;
    fn sub(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}",
            format_duration(Duration::from_millis(self.0.max(0) as u64))
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid duration {input:?}: {reason} (expected Go syntax such as 90s, 10m or 1h30m)")]
pub struct DurationError {
    pub input: String,
    pub reason: &'static str,
}

/// Parses a Go `time.ParseDuration` string: a sequence of decimal numbers with units `ns`, `us`,
/// `µs`, `ms`, `s`, `m`, `h` (`1h30m`, `1.5s`, `300ms`), or a bare `0`. Negative durations are
/// rejected: nothing in the autoscaler's configuration means a negative time.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError {
        input: input.to_string(),
        reason,
    };
    let s = input.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.starts_with('-') {
        return Err(err("negative durations are not allowed"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(err("empty string"));
    }
    let mut total_nanos: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .bytes()
            .position(|b| !(b.is_ascii_digit() || b == b'.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(err("expected a number"));
        }
        let (number, after) = rest.split_at(num_len);
        let unit_len = after
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map(|(i, _)| i)
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(err("missing unit")),
            _ => return Err(err("unknown unit")),
        };
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
            return Err(err("malformed number"));
        }
        let int_value: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| err("number too large"))?
        };
        let mut part = int_value
            .checked_mul(unit_nanos)
            .ok_or_else(|| err("duration too large"))?;
        let mut scale = unit_nanos;
        for digit in frac_part.bytes().take(30) {
            scale /= 10;
            part += u128::from(digit - b'0') * scale;
        }
        total_nanos = total_nanos
            .checked_add(part)
            .ok_or_else(|| err("duration too large"))?;
        rest = next;
    }
    if total_nanos > u128::from(i64::MAX as u64) {
        return Err(err("duration too large"));
    }
    Ok(Duration::from_nanos(total_nanos as u64))
}

/// Formats a duration the way Go prints one (`1h30m0s`, `90s` → `1m30s`, `500ms`).
pub fn format_duration(d: Duration) -> String {
    let total_ms = d.as_millis();
    if total_ms == 0 {
        return "0s".to_string();
    }
    if total_ms < 1000 {
        return format!("{total_ms}ms");
    }
    let hours = total_ms / 3_600_000;
    let minutes = (total_ms / 60_000) % 60;
    let seconds = (total_ms % 60_000) as f64 / 1000.0;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    if seconds.fract() == 0.0 {
        out.push_str(&format!("{}s", seconds as u64));
    } else {
        out.push_str(&format!("{seconds}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_readings_become_epoch_milliseconds() {
        use std::time::{Duration, UNIX_EPOCH};
        let later = UNIX_EPOCH + Duration::from_millis(1_500);
        assert_eq!(Timestamp::from_system_time(later), Timestamp(1_500));
        let before = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(Timestamp::from_system_time(before), Timestamp(0));
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_go_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(
            parse_go_duration("1h30m").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(
            parse_go_duration("1.5s").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            parse_go_duration("300ms").unwrap(),
            Duration::from_millis(300)
        );
        assert_eq!(
            parse_go_duration("87600h").unwrap(),
            Duration::from_secs(87600 * 3600)
        );
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_go_duration("2µs").unwrap(), Duration::from_micros(2));
        assert_eq!(parse_go_duration(".5m").unwrap(), Duration::from_secs(30));
    }

    #[test]
    fn bad_durations_name_the_input() {
        for bad in [
            "",
            "10",
            "10x",
            "-5s",
            "1..5s",
            "s",
            "9999999999999999999999h",
        ] {
            let e = parse_go_duration(bad).unwrap_err();
            assert_eq!(e.input, bad);
        }
    }

    #[test]
    fn durations_print_like_go() {
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m0s");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
    }
}
