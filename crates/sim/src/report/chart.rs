//! Inline SVG charts for the HTML report: time on the x axis, one or more series, axis ticks at
//! round values. Generated as text, so the report needs no script and no external resource.

use std::fmt::Write;

use super::short_duration;

/// One line of a chart.
pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    /// `(seconds, value)` points in time order.
    pub points: Vec<(f64, f64)>,
}

/// How points are joined.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Horizontal then vertical: the value holds until the next sample (node counts).
    Steps,
    /// One vertical bar per point (per-loop measurements).
    Bars,
}

const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 240.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 14.0;
/// Extra room above the plot for the legend of multi-series charts.
const LEGEND: f64 = 20.0;
const BOTTOM: f64 = 30.0;

/// Colours for groups, distinguishable and readable on white.
pub const PALETTE: [&str; 8] = [
    "#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777",
];

/// A step/bar chart over `[0, x_max]` seconds with a legend when there is more than one series.
pub fn time_chart(series: &[Series<'_>], x_max: f64, y_unit: &str, shape: Shape) -> String {
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    let data_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max);
    let (y_max, y_step) = nice_axis(data_max);
    let legend = series.len() > 1;
    let top = if legend { TOP + LEGEND } else { TOP };
    let height = if legend { HEIGHT + LEGEND } else { HEIGHT };
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = height - top - BOTTOM;
    let x = |secs: f64| LEFT + (secs / x_max).clamp(0.0, 1.0) * plot_w;
    let y = |value: f64| top + plot_h - (value / y_max).clamp(0.0, 1.0) * plot_h;

    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg viewBox="0 0 {WIDTH} {height}" width="100%" role="img" xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif" font-size="11">"#
    );
    // Horizontal grid lines with value labels.
    let mut tick = 0.0;
    while tick <= y_max + y_step * 0.01 {
        let ty = y(tick);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#e5e7eb"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#6b7280">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            ty + 4.0,
            format_value(tick)
        );
        tick += y_step;
    }
    // Time ticks.
    let x_step = nice_time_step(x_max);
    let mut t = 0.0;
    while t <= x_max + 0.001 {
        let tx = x(t);
        let _ = write!(
            svg,
            r##"<line x1="{tx:.1}" y1="{:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#9ca3af"/><text x="{tx:.1}" y="{:.1}" text-anchor="middle" fill="#6b7280">{}</text>"##,
            top + plot_h,
            top + plot_h + 4.0,
            top + plot_h + 17.0,
            short_duration(t)
        );
        t += x_step;
    }
    let _ = write!(
        svg,
        r##"<line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#9ca3af"/><text x="12" y="{:.1}" fill="#6b7280" transform="rotate(-90 12 {:.1})" text-anchor="middle">{}</text>"##,
        top + plot_h,
        WIDTH - RIGHT,
        top + plot_h,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        super::html::escape(y_unit)
    );

    for (index, s) in series.iter().enumerate() {
        match shape {
            Shape::Steps => {
                // Series with equal values would hide each other: shift each by a pixel or two.
                let shift = (index as f64 - (series.len() as f64 - 1.0) / 2.0) * 1.5;
                let mut path = String::new();
                let mut previous: Option<f64> = None;
                for (secs, value) in &s.points {
                    let (px, py) = (x(*secs), y(*value) + shift);
                    match previous {
                        None => {
                            let _ = write!(path, "M{px:.1},{py:.1}");
                        }
                        Some(prev_y) => {
                            let _ = write!(path, "L{px:.1},{prev_y:.1}L{px:.1},{py:.1}");
                        }
                    }
                    previous = Some(py);
                }
                if let Some(prev_y) = previous {
                    let _ = write!(path, "L{:.1},{prev_y:.1}", x(x_max));
                }
                let _ = write!(
                    svg,
                    r#"<path d="{path}" fill="none" stroke="{}" stroke-width="2"><title>{}</title></path>"#,
                    s.color,
                    super::html::escape(s.name)
                );
            }
            Shape::Bars => {
                let bar_w = (plot_w / s.points.len().max(1) as f64).clamp(0.5, 6.0);
                let mut path = String::new();
                for (secs, value) in &s.points {
                    let (px, py) = (x(*secs), y(*value));
                    let _ = write!(
                        path,
                        "M{:.1},{:.1}V{py:.1}h{bar_w:.2}V{:.1}z",
                        px,
                        top + plot_h,
                        top + plot_h
                    );
                }
                let _ = write!(
                    svg,
                    r#"<path d="{path}" fill="{}" fill-opacity="0.8"/>"#,
                    s.color
                );
            }
        }
    }

    if legend {
        // Each entry names the series and its last value.
        let mut lx = LEFT;
        for s in series {
            let label = match s.points.last() {
                Some((_, last)) => format!("{} ({})", s.name, format_value(*last)),
                None => s.name.to_string(),
            };
            let _ = write!(
                svg,
                r##"<rect x="{lx:.1}" y="{:.1}" width="10" height="10" fill="{}"/><text x="{:.1}" y="{:.1}" fill="#111827">{}</text>"##,
                TOP - 8.0,
                s.color,
                lx + 14.0,
                TOP + 1.0,
                super::html::escape(&label)
            );
            lx += 30.0 + 6.5 * label.chars().count() as f64;
        }
    }
    svg.push_str("</svg>");
    svg
}

/// An axis maximum at or above `max` and a step giving about five round ticks (1, 2, 5 × 10^n).
fn nice_axis(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 1.0);
    }
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    ((max / step).ceil() * step, step)
}

/// A round time step (10 s … 12 h) giving at most about ten ticks.
fn nice_time_step(x_max: f64) -> f64 {
    const STEPS: [f64; 13] = [
        10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 10800.0, 21600.0,
        43200.0,
    ];
    STEPS
        .iter()
        .copied()
        .find(|s| x_max / s <= 10.0)
        .unwrap_or(86400.0)
}

fn format_value(v: f64) -> String {
    if v.fract().abs() < 1e-9 {
        format!("{}", v as i64)
    } else {
        format!("{v:.2}").trim_end_matches('0').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_use_round_numbers() {
        assert_eq!(nice_axis(1000.0), (1000.0, 200.0));
        assert_eq!(nice_axis(7.0), (8.0, 2.0));
        assert_eq!(nice_axis(0.0), (1.0, 1.0));
        assert_eq!(nice_time_step(7200.0), 900.0);
        assert_eq!(nice_time_step(60.0), 10.0);
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(3.0), "3");
    }

    #[test]
    fn charts_are_self_contained_svg_with_a_legend_for_several_series() {
        let series = [
            Series {
                name: "a",
                color: PALETTE[0],
                points: vec![(0.0, 1.0), (60.0, 3.0)],
            },
            Series {
                name: "b<x>",
                color: PALETTE[1],
                points: vec![(0.0, 0.0)],
            },
        ];
        let svg = time_chart(&series, 120.0, "nodes", Shape::Steps);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("b&lt;x&gt;"));
        assert!(!svg.contains("http://") || svg.contains("xmlns=\"http://www.w3.org/2000/svg\""));
        let bars = time_chart(&series[..1], 120.0, "ms", Shape::Bars);
        assert!(bars.contains("fill-opacity"));
    }
}
