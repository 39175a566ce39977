//! Pods arriving over time, as a controller creates them: a `create` with a `rate`
//! (docs/scenario.md, "Pods arriving over time").
//!
//! A ReplicaSet controller does not create 300 pods at once: its client is rate-limited (20
//! requests per second by default), so the pods of a new Deployment trickle in over seconds, and
//! every loop of the autoscaler in between sees only part of them. A `rate` reproduces that. The
//! pods due within each second are created together at the start of that second, since no engine
//! loop runs more often than once a second (`scan-interval` ≥ 1s).

use std::time::Duration;

use serde_yaml_ng::Value;

/// The fastest rate accepted, in pods per second: far above any controller's client limit.
pub const MAX_PER_SECOND: f64 = 100_000.0;

/// The slowest rate accepted, in pods per second: one pod an hour.
pub const MIN_PER_SECOND: f64 = 1.0 / 3600.0;

/// A rate in pods per second, from `20/s`, `300/m`, `3600/h` or a plain number of pods per
/// second. The message says what is wrong with the value.
pub fn parse_rate(value: &Value) -> Result<f64, String> {
    let expected =
        "expected pods per second as a number or as <count>/s, <count>/m or <count>/h, e.g. 20/s";
    let per_second = match value {
        Value::Number(number) => number
            .as_f64()
            .ok_or_else(|| format!("{number} is not a rate: {expected}"))?,
        Value::String(text) => {
            let (count, unit) = text
                .trim()
                .split_once('/')
                .ok_or_else(|| format!("{text:?} is not a rate: {expected}"))?;
            let count: f64 = count
                .trim()
                .parse()
                .map_err(|_| format!("{text:?} is not a rate: {expected}"))?;
            let seconds = match unit.trim() {
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                _ => return Err(format!("{text:?} is not a rate: {expected}")),
            };
            count / seconds
        }
        other => {
            return Err(format!(
                "{} is not a rate: {expected}",
                serde_yaml_ng::to_string(other)
                    .unwrap_or_default()
                    .trim_end()
            ));
        }
    };
    if !(MIN_PER_SECOND..=MAX_PER_SECOND).contains(&per_second) {
        return Err(format!(
            "{} is outside the accepted rates, from 1/h to {}/s",
            describe(per_second),
            MAX_PER_SECOND
        ));
    }
    Ok(per_second)
}

/// A rate for messages: `20/s`, `0.5/s`.
pub fn describe(per_second: f64) -> String {
    format!("{per_second}/s")
}

/// One step of a spread `create`: `count` copies from copy `first_copy`, `after` the event's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub after: Duration,
    pub first_copy: usize,
    pub count: usize,
}

/// The steps in which `count` pods arrive at `per_second` (copy `i` is due `i / per_second`
/// seconds after the event and created at the start of its second); `None` when there would be
/// more than `budget` steps.
pub fn steps(count: usize, per_second: f64, budget: usize) -> Option<Vec<Step>> {
    let mut steps: Vec<Step> = Vec::new();
    for i in 0..count {
        // Below 10^6 pods a second and 1/h a pod, so the seconds fit easily in a u64.
        let after = Duration::from_secs((i as f64 / per_second).floor() as u64);
        match steps.last_mut() {
            Some(step) if step.after == after => step.count += 1,
            _ => {
                if steps.len() == budget {
                    return None;
                }
                steps.push(Step {
                    after,
                    first_copy: i,
                    count: 1,
                });
            }
        }
    }
    Some(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(yaml: &str) -> Result<f64, String> {
        parse_rate(&serde_yaml_ng::from_str(yaml).unwrap())
    }

    #[test]
    fn rates_in_every_unit() {
        assert_eq!(rate("20/s"), Ok(20.0));
        assert_eq!(rate("300/m"), Ok(5.0));
        assert_eq!(rate("3600/h"), Ok(1.0));
        assert_eq!(rate("0.5/s"), Ok(0.5));
        assert_eq!(rate("12"), Ok(12.0));
        assert_eq!(rate("2.5"), Ok(2.5));
    }

    #[test]
    fn bad_rates_say_what_is_wrong() {
        for (yaml, expected) in [
            ("fast", "\"fast\" is not a rate: expected pods per second"),
            ("20/d", "\"20/d\" is not a rate"),
            ("x/s", "\"x/s\" is not a rate"),
            ("[1]", "- 1 is not a rate"),
            (
                "0",
                "0/s is outside the accepted rates, from 1/h to 100000/s",
            ),
            ("-3/s", "-3/s is outside the accepted rates"),
            ("1/d", "\"1/d\" is not a rate"),
            ("200000/s", "200000/s is outside the accepted rates"),
            ("1/2h", "\"1/2h\" is not a rate"),
        ] {
            let error = rate(yaml).unwrap_err();
            assert!(error.starts_with(expected), "{yaml}: {error}");
        }
        assert!(rate("NaN/s").is_err());
        assert!(rate(".inf").is_err());
    }

    /// 20 pods per second: 20 each second; the last step holds the rest.
    #[test]
    fn pods_arrive_second_by_second() {
        let steps = steps(50, 20.0, 100).unwrap();
        assert_eq!(
            steps,
            vec![
                Step {
                    after: Duration::ZERO,
                    first_copy: 0,
                    count: 20
                },
                Step {
                    after: Duration::from_secs(1),
                    first_copy: 20,
                    count: 20
                },
                Step {
                    after: Duration::from_secs(2),
                    first_copy: 40,
                    count: 10
                },
            ]
        );
    }

    /// Slower than one a second: one pod per step, at its own second.
    #[test]
    fn slow_rates_give_one_pod_per_step() {
        let steps = steps(3, 0.25, 100).unwrap();
        let at: Vec<(u64, usize)> = steps.iter().map(|s| (s.after.as_secs(), s.count)).collect();
        assert_eq!(at, vec![(0, 1), (4, 1), (8, 1)]);
    }

    #[test]
    fn too_many_steps_are_refused() {
        assert!(steps(10, 1.0, 9).is_none());
        assert_eq!(steps(10, 1.0, 10).map(|s| s.len()), Some(10));
    }
}
