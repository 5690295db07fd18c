//! SVG charts of `cargo xtask bench`'s figures, drawn with `plotters`'
//! SVG backend (pure Rust: text is written as SVG `<text>`, so no font
//! library is needed). Two shapes: lines over a power-of-two axis
//! (message sizes, object counts) and horizontal bars (instructions per
//! operation per probe, with the target marked).

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use plotters::prelude::*;

use crate::util::fmt_num;

/// Chart size in pixels.
const SIZE: (u32, u32) = (760, 440);

/// The colour of our library's series and of the reference's.
pub const OURS: RGBColor = RGBColor(0x1f, 0x5f, 0xbf);
/// rdma-core, perftest.
pub const THEIRS: RGBColor = RGBColor(0xd9, 0x5f, 0x0e);

/// How a line's points are marked.
#[derive(Clone, Copy)]
pub enum Mark {
    /// Filled circles.
    Circle,
    /// Filled triangles.
    Triangle,
}

/// One line of a line chart.
pub struct Line {
    /// The legend's text.
    pub label: String,
    /// (x, y) points; x is a power of two. Points that cannot be drawn on
    /// a logarithmic axis (zero, negative, not finite) are left out.
    pub points: Vec<(u64, f64)>,
    /// Its colour.
    pub color: RGBColor,
    /// Its marks.
    pub mark: Mark,
}

/// Axis texts of a line chart.
pub struct Axes<'a> {
    /// The title above the chart.
    pub title: &'a str,
    /// What x counts (the unit is printed by the tick labels).
    pub x: &'a str,
    /// What y measures, with its unit.
    pub y: &'a str,
    /// Whether x is a byte count (ticks as 4K, 1M) or a plain count.
    pub x_bytes: bool,
    /// Logarithmic y where the figures span more than [`LOG_SPAN`]
    /// (latency, bandwidth over message sizes), else linear from 0.
    pub y_log: bool,
}

/// The smallest max / min ratio drawn on a logarithmic y axis: a narrower
/// span reads better, and gets more tick labels, on a linear one.
pub const LOG_SPAN: f64 = 20.0;

/// A y tick label: [`fmt_num`]'s digits without trailing zeros.
fn y_tick(v: f64) -> String {
    let s = fmt_num(v);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A power of two as a tick label: 2, 512, 4K, 8M (bytes) or 1024.
fn tick(v: u64, bytes: bool) -> String {
    if bytes && v >= 1 << 20 && v % (1 << 20) == 0 {
        format!("{}M", v >> 20)
    } else if bytes && v >= 1 << 10 && v % (1 << 10) == 0 {
        format!("{}K", v >> 10)
    } else {
        v.to_string()
    }
}

fn drawable(p: &(u64, f64)) -> bool {
    p.0 > 0 && p.0.is_power_of_two() && p.1.is_finite() && p.1 > 0.0
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing the chart: {e}")
}

/// Draws `lines` over a log2 x axis into the SVG file `path`.
pub fn lines(path: &Path, axes: &Axes<'_>, lines: &[Line]) -> Result<()> {
    let pts: Vec<(u64, f64)> = lines
        .iter()
        .flat_map(|l| l.points.iter().copied().filter(drawable))
        .collect();
    if pts.is_empty() {
        bail!("no figures to draw for \"{}\"", axes.title);
    }
    // x in log2 units, so every power of two gets an evenly spaced tick.
    let lg = |x: u64| f64::from(x.trailing_zeros());
    let x_min = pts.iter().map(|p| lg(p.0)).fold(f64::MAX, f64::min);
    let x_max = pts.iter().map(|p| lg(p.0)).fold(f64::MIN, f64::max);
    let (x_lo, x_hi) = (x_min - 0.3, x_max.max(x_min + 1.0) + 0.3);
    let y_min = pts.iter().map(|p| p.1).fold(f64::MAX, f64::min);
    let y_max = pts.iter().map(|p| p.1).fold(f64::MIN, f64::max);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut b = ChartBuilder::on(&root);
    b.caption(axes.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64);
    let x_ticks = (x_hi - x_lo).floor() as usize + 1;
    let x_fmt = |v: &f64| {
        let r = v.round();
        if (v - r).abs() < 1e-6 && (0.0..64.0).contains(&r) {
            tick(1u64 << (r as u32), axes.x_bytes)
        } else {
            String::new()
        }
    };
    macro_rules! draw {
        ($chart:expr) => {{
            let mut c = $chart;
            c.configure_mesh()
                .x_desc(axes.x)
                .y_desc(axes.y)
                .light_line_style(WHITE)
                .y_labels(8)
                .y_label_formatter(&|v: &f64| y_tick(*v))
                .x_labels(x_ticks)
                .x_label_formatter(&x_fmt)
                .draw()
                .map_err(err)?;
            for l in lines {
                let p: Vec<(f64, f64)> = l
                    .points
                    .iter()
                    .filter(|p| drawable(p))
                    .map(|&(x, y)| (lg(x), y))
                    .collect();
                let color = l.color;
                let mark = l.mark;
                c.draw_series(LineSeries::new(p.clone(), color.stroke_width(2)))
                    .map_err(err)?
                    .label(l.label.as_str())
                    .legend(move |(x, y)| {
                        // One element type for both marks: the other is
                        // drawn fully transparent.
                        let (circle, triangle) = match mark {
                            Mark::Circle => (color.filled(), TRANSPARENT.filled()),
                            Mark::Triangle => (TRANSPARENT.filled(), color.filled()),
                        };
                        EmptyElement::at((x + 10, y))
                            + PathElement::new(vec![(-10, 0), (10, 0)], color.stroke_width(2))
                            + Circle::new((0, 0), 3, circle)
                            + TriangleMarker::new((0, 0), 4, triangle)
                    });
                match l.mark {
                    Mark::Circle => c
                        .draw_series(p.iter().map(|&q| Circle::new(q, 3, color.filled())))
                        .map_err(err)?,
                    Mark::Triangle => c
                        .draw_series(p.iter().map(|&q| TriangleMarker::new(q, 4, color.filled())))
                        .map_err(err)?,
                };
            }
            c.configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
        }};
    }
    if axes.y_log && y_max / y_min > LOG_SPAN {
        // Room above the data for the legend, in the upper left.
        let lo = y_min / 1.5;
        let hi = (y_max * 8.0).max(lo * 10.0);
        draw!(b
            .build_cartesian_2d(x_lo..x_hi, (lo..hi).log_scale())
            .map_err(err)?);
    } else {
        draw!(b
            .build_cartesian_2d(x_lo..x_hi, 0.0..y_max * 1.6)
            .map_err(err)?);
    }
    root.present().map_err(err)?;
    Ok(())
}

/// One row of a bar chart: both sides' values (either may be missing:
/// a failed run) and the target, if the row has one.
pub struct Bar {
    /// The row's label (short: it is printed left of the bars).
    pub label: String,
    /// Our value.
    pub ours: Option<f64>,
    /// The reference's value.
    pub theirs: Option<f64>,
    /// The target our value must meet, drawn as a black tick.
    pub target: Option<f64>,
}

/// Draws horizontal bar pairs (ours above, the reference's below) into
/// the SVG file `path`, one row per `bars` entry, top to bottom.
pub fn bars(path: &Path, title: &str, x: &str, legend: [&str; 2], bars: &[Bar]) -> Result<()> {
    let max = bars
        .iter()
        .flat_map(|b| [b.ours, b.theirs, b.target])
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    if bars.is_empty() || max <= 0.0 {
        bail!("no figures to draw for \"{title}\"");
    }
    let n = bars.len();
    // Two empty rows' height under the bars hold the legend.
    const LEGEND_ROWS: f64 = 2.0;
    let height = 90 + 36 * (n as u32 + LEGEND_ROWS as u32);
    let root = SVGBackend::new(path, (SIZE.0, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    // Row i occupies y in [n-1-i, n-i): the first row at the top.
    let row_y = |i: usize| (n - 1 - i) as f64;
    let label_at = |v: &f64| {
        let r = v - 0.5;
        let i = r.round();
        if (r - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
            bars[n - 1 - i as usize].label.clone()
        } else {
            String::new()
        }
    };
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(230)
        .build_cartesian_2d(0.0..max * 1.12, -LEGEND_ROWS..n as f64)
        .map_err(err)?;
    c.configure_mesh()
        .disable_y_mesh()
        .light_line_style(WHITE)
        .x_desc(x)
        .y_labels(2 * (n + LEGEND_ROWS as usize) + 1)
        .y_label_formatter(&label_at)
        .draw()
        .map_err(err)?;
    for (k, (color, name)) in [(OURS, legend[0]), (THEIRS, legend[1])]
        .into_iter()
        .enumerate()
    {
        let rects: Vec<Rectangle<(f64, f64)>> = bars
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                let v = if k == 0 { b.ours } else { b.theirs }?;
                let top = row_y(i) + if k == 0 { 0.9 } else { 0.5 };
                Some(Rectangle::new(
                    [(0.0, top - 0.38), (v, top)],
                    color.filled(),
                ))
            })
            .collect();
        c.draw_series(rects)
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
    }
    let ticks: Vec<PathElement<(f64, f64)>> = bars
        .iter()
        .enumerate()
        .filter_map(|(i, b)| {
            let t = b.target?;
            Some(PathElement::new(
                vec![(t, row_y(i) + 0.05), (t, row_y(i) + 0.95)],
                BLACK.stroke_width(3),
            ))
        })
        .collect();
    if !ticks.is_empty() {
        c.draw_series(ticks)
            .map_err(err)?
            .label("target")
            .legend(|(x, y)| {
                PathElement::new(vec![(x + 7, y - 7), (x + 7, y + 7)], BLACK.stroke_width(3))
            });
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("charts-{}-{name}", std::process::id()))
    }

    #[test]
    fn y_ticks_have_no_trailing_zeros() {
        assert_eq!(y_tick(0.1), "0.1");
        assert_eq!(y_tick(0.125), "0.125");
        assert_eq!(y_tick(2.5), "2.5");
        assert_eq!(y_tick(1000.0), "1000");
        assert_eq!(y_tick(12.25), "12.2");
    }

    #[test]
    fn tick_labels_name_powers_of_two() {
        assert_eq!(tick(2, true), "2");
        assert_eq!(tick(4096, true), "4K");
        assert_eq!(tick(8 << 20, true), "8M");
        assert_eq!(tick(1024, false), "1024");
    }

    #[test]
    fn a_line_chart_has_every_drawable_point_and_its_legend() {
        let p = tmp("lines.svg");
        let ours = Line {
            label: "rverbs perf".into(),
            points: vec![(2, 8.0), (4, 8.5), (8, 0.0), (16, 9.0)],
            color: OURS,
            mark: Mark::Circle,
        };
        let theirs = Line {
            label: "perftest".into(),
            points: vec![(2, 8.2), (4, 8.6), (16, 9.4)],
            color: THEIRS,
            mark: Mark::Triangle,
        };
        let axes = Axes {
            title: "send lat",
            x: "message size (bytes)",
            y: "typical latency (usec)",
            x_bytes: true,
            y_log: true,
        };
        lines(&p, &axes, &[ours, theirs]).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for text in [
            "send lat",
            "rverbs perf",
            "perftest",
            "typical latency (usec)",
            "16",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        // One polyline per series, the zero left out of ours.
        let counts: Vec<usize> = svg
            .match_indices("<polyline")
            .map(|(i, _)| {
                let rest = &svg[i..];
                let pts = rest
                    .split("points=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                pts.split_whitespace().count()
            })
            .filter(|&c| c > 2)
            .collect();
        assert_eq!(counts, [3, 3]);
    }

    #[test]
    fn nothing_to_draw_is_an_error() {
        let axes = Axes {
            title: "empty",
            x: "x",
            y: "y",
            x_bytes: false,
            y_log: true,
        };
        let p = tmp("empty.svg");
        assert!(lines(&p, &axes, &[]).is_err());
        assert!(bars(&p, "empty", "x", ["a", "b"], &[]).is_err());
    }

    #[test]
    fn a_bar_chart_labels_every_row() {
        let p = tmp("bars.svg");
        let rows = [
            Bar {
                label: "rxe SEND + poll".into(),
                ours: Some(225.0),
                theirs: Some(274.0),
                target: Some(164.4),
            },
            Bar {
                label: "mlx5 RECV + poll".into(),
                ours: None,
                theirs: Some(375.5),
                target: None,
            },
        ];
        bars(&p, "insns", "instructions", ["rverbs", "rdma-core"], &rows).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        for text in [
            "rxe SEND + poll",
            "mlx5 RECV + poll",
            "rverbs",
            "rdma-core",
            "target",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
    }
}
