//! A Prometheus summary over a sliding time window, for upstream's
//! `function_duration_quantile_seconds` (docs/behaviour.md OBS-128): per label value, the count
//! and sum of every observation ever made, and the 0.5, 0.9 and 0.99 quantiles of those made in
//! the last hour. The `prometheus` crate has no summary type; this is a [`Collector`] of its own.
//!
//! Time is the loop's: each observation carries the time it was made at, and observations older
//! than the window at the latest time seen are forgotten, so nothing here reads the clock. The
//! quantiles are exact (nearest rank over the window's observations), where upstream's client
//! estimates them within an error of 5, 1 and 0.1 %.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary};

/// The quantiles every series reports, as upstream's.
pub const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];
/// How long an observation counts towards the quantiles, as upstream's (`MaxAge`).
pub const WINDOW: Duration = Duration::from_secs(3600);
/// Observations kept per series at most: a loop that runs every second for the whole window
/// stays well below it, and a series can never grow without bound.
const MAX_WINDOW_OBSERVATIONS: usize = 20_000;

/// A summary with one label.
#[derive(Clone)]
pub struct SlidingSummaryVec {
    desc: Desc,
    label: String,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// The latest time seen, in Unix seconds.
    now: i64,
    series: BTreeMap<String, Series>,
}

#[derive(Default)]
struct Series {
    count: u64,
    sum: f64,
    /// (Unix seconds, value) of the observations in the window, oldest first.
    recent: VecDeque<(i64, f64)>,
}

impl Series {
    fn forget_before(&mut self, cutoff: i64) {
        while self.recent.front().is_some_and(|(at, _)| *at < cutoff) {
            self.recent.pop_front();
        }
    }

    fn quantiles(&self) -> Vec<Quantile> {
        let mut values: Vec<f64> = self.recent.iter().map(|(_, value)| *value).collect();
        values.sort_by(f64::total_cmp);
        QUANTILES
            .iter()
            .map(|&q| {
                let mut quantile = Quantile::default();
                quantile.set_quantile(q);
                quantile.set_value(nearest_rank(&values, q));
                quantile
            })
            .collect()
    }
}

/// The value at rank ⌈q·n⌉ of sorted `values`; NaN without any, as upstream's client reports.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl SlidingSummaryVec {
    pub fn new(
        name: &str,
        help: &str,
        label: &str,
    ) -> Result<SlidingSummaryVec, prometheus::Error> {
        Ok(SlidingSummaryVec {
            desc: Desc::new(
                name.to_string(),
                help.to_string(),
                vec![label.to_string()],
                Default::default(),
            )?,
            label: label.to_string(),
            state: Arc::new(Mutex::new(State::default())),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every update is one push).
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records `value` for `label_value`, observed at `at` (Unix seconds).
    pub fn observe(&self, label_value: &str, at: i64, value: f64) {
        let mut state = self.lock();
        state.now = state.now.max(at);
        let series = state.series.entry(label_value.to_string()).or_default();
        series.count += 1;
        series.sum += value;
        series.recent.push_back((at, value));
        if series.recent.len() > MAX_WINDOW_OBSERVATIONS {
            series.recent.pop_front();
        }
    }

    /// Records `value` at the latest time seen so far (for observations the caller has no loop
    /// time of its own for, such as the wait between loops).
    pub fn observe_now(&self, label_value: &str, value: f64) {
        let now = self.lock().now;
        self.observe(label_value, now, value);
    }

    /// Moves the window's end to `at` (Unix seconds) without observing anything.
    pub fn advance_to(&self, at: i64) {
        let mut state = self.lock();
        state.now = state.now.max(at);
    }
}

impl Collector for SlidingSummaryVec {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut state = self.lock();
        let cutoff = state
            .now
            .saturating_sub(i64::try_from(WINDOW.as_secs()).unwrap_or(i64::MAX));
        let mut metrics = Vec::with_capacity(state.series.len());
        for (value, series) in &mut state.series {
            series.forget_before(cutoff);
            let mut label = LabelPair::default();
            label.set_name(self.label.clone());
            label.set_value(value.clone());
            let mut summary = Summary::default();
            summary.set_sample_count(series.count);
            summary.set_sample_sum(series.sum);
            summary.set_quantile(series.quantiles());
            let mut metric = Metric::from_label(vec![label]);
            metric.set_summary(summary);
            metrics.push(metric);
        }
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::SUMMARY);
        family.set_metric(metrics);
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_picks_the_observation_at_the_quantile() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&values, 0.5), 50.0);
        assert_eq!(nearest_rank(&values, 0.9), 90.0);
        assert_eq!(nearest_rank(&values, 0.99), 99.0);
        assert_eq!(nearest_rank(&[7.0], 0.99), 7.0);
        assert!(nearest_rank(&[], 0.5).is_nan());
    }

    #[test]
    fn quantiles_cover_the_last_hour_while_count_and_sum_cover_everything() {
        let summary = SlidingSummaryVec::new("s", "help", "function").unwrap();
        summary.observe("main", 0, 100.0);
        for at in 1..=10 {
            summary.observe("main", 3000 + at, at as f64);
        }
        let read = |summary: &SlidingSummaryVec| {
            let family = summary.collect().remove(0);
            assert_eq!(family.get_field_type(), MetricType::SUMMARY);
            family.get_metric()[0].get_summary().clone()
        };
        let before = read(&summary);
        assert_eq!(before.sample_count(), 11);
        assert_eq!(before.sample_sum(), 155.0);
        assert_eq!(
            before.get_quantile()[2].value(),
            100.0,
            "still in the window"
        );
        summary.advance_to(3700);
        let after = read(&summary);
        assert_eq!(after.sample_count(), 11, "count and sum are cumulative");
        assert_eq!(after.get_quantile()[0].value(), 5.0);
        assert_eq!(after.get_quantile()[2].value(), 10.0, "100 left the window");
    }
}
