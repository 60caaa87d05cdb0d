//! Plain SVG line charts (no plotting crate), for the benchmarks' plots and
//! `doic-agent audit plot`: a few polylines on linear axes with a legend,
//! optionally a second series group on a right-hand axis of its own scale,
//! and shaded bands over x intervals ([`Chart::render_with_bands`]).

use std::fmt::Write as _;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend's text.
    pub name: String,
    /// Points (x, y).
    pub points: Vec<(f64, f64)>,
}

/// A shaded x interval with its label (e.g. an OCS version in force).
#[derive(Debug, Clone)]
pub struct Band {
    /// The label, written at its top.
    pub label: String,
    /// From x.
    pub from: f64,
    /// To x.
    pub to: f64,
}

/// What a chart shows.
#[derive(Debug, Clone, Default)]
pub struct Chart {
    /// Title line.
    pub title: String,
    /// The x axis' label.
    pub x_label: String,
    /// The left y axis' label.
    pub y_label: String,
    /// Lines on the left axis.
    pub left: Vec<Series>,
    /// The right y axis' label and its lines (dashed).
    pub right: Option<(String, Vec<Series>)>,
    /// A note under the chart.
    pub note: String,
}

const W: f64 = 760.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 70.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 70.0;
const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// A round upper bound for an axis whose data reach `max`.
fn nice(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&v| v >= max)
        .unwrap_or(10.0 * p)
}

fn extent<'a>(series: impl Iterator<Item = &'a Series>, pick: fn(&(f64, f64)) -> f64) -> f64 {
    series
        .flat_map(|s| s.points.iter().map(pick))
        .fold(0.0, f64::max)
}

impl Chart {
    /// The chart as an SVG document.
    #[must_use]
    pub fn render(&self) -> String {
        self.render_with_bands(&[])
    }

    /// The chart as an SVG document, `bands` shaded behind the lines.
    #[must_use]
    pub fn render_with_bands(&self, bands: &[Band]) -> String {
        let all = || {
            self.left
                .iter()
                .chain(self.right.iter().flat_map(|(_, s)| s.iter()))
        };
        let x_max =
            nice(extent(all(), |p| p.0).max(bands.iter().map(|b| b.to).fold(0.0, f64::max)));
        let y_max = nice(extent(self.left.iter(), |p| p.1));
        let y2_max = self
            .right
            .as_ref()
            .map(|(_, s)| nice(extent(s.iter(), |p| p.1)));
        let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
        let x = |v: f64| LEFT + v / x_max * pw;
        let y = |v: f64, max: f64| TOP + ph - v / max * ph;
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
            W / 2.0,
            esc(&self.title)
        );
        for (i, b) in bands.iter().enumerate() {
            let (bx, bw) = (x(b.from), (x(b.to) - x(b.from)).max(1.0));
            let _ = write!(
                s,
                "<rect class=\"band\" x=\"{bx:.1}\" y=\"{TOP}\" width=\"{bw:.1}\" height=\"{ph}\" fill=\"{}\" fill-opacity=\"0.12\"><title>{}</title></rect>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"#555\">{}</text>\n",
                COLOURS[(i + 3) % COLOURS.len()],
                esc(&b.label),
                bx + 2.0,
                TOP + 12.0 + (i % 3) as f64 * 11.0,
                esc(&b.label)
            );
        }
        // Axes, ticks and grid.
        for i in 0..=5 {
            let f = f64::from(i) / 5.0;
            let (gx, gy) = (x(f * x_max), y(f * y_max, y_max));
            let _ = write!(
                s,
                "<line x1=\"{LEFT}\" y1=\"{gy:.1}\" x2=\"{:.1}\" y2=\"{gy:.1}\" stroke=\"#ddd\"/>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n\
                 <text x=\"{gx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
                LEFT + pw,
                LEFT - 6.0,
                gy + 4.0,
                tick(f * y_max),
                TOP + ph + 16.0,
                tick(f * x_max)
            );
            if let Some(m) = y2_max {
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                    LEFT + pw + 6.0,
                    gy + 4.0,
                    tick(f * m)
                );
            }
        }
        let _ = write!(
            s,
            "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#333\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n\
             <text transform=\"translate(16,{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
            LEFT + pw / 2.0,
            TOP + ph + 34.0,
            esc(&self.x_label),
            TOP + ph / 2.0,
            esc(&self.y_label)
        );
        if let Some((label, _)) = &self.right {
            let _ = writeln!(
                s,
                "<text transform=\"translate({:.1},{:.1}) rotate(90)\" text-anchor=\"middle\">{}</text>",
                W - 14.0,
                TOP + ph / 2.0,
                esc(label)
            );
        }
        // Lines and the legend.
        let mut legend = 0usize;
        let mut line = |s: &mut String, series: &Series, max: f64, dashed: bool| {
            let colour = COLOURS[legend % COLOURS.len()];
            let pts: Vec<String> = series
                .points
                .iter()
                .map(|&(px, py)| format!("{:.1},{:.1}", x(px), y(py.min(max), max)))
                .collect();
            let dash = if dashed {
                " stroke-dasharray=\"6 4\""
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
                pts.join(" ")
            );
            let lx = LEFT + 10.0 + (legend % 3) as f64 * 200.0;
            let ly = H - 22.0 + (legend / 3) as f64 * 14.0;
            let _ = write!(
                s,
                "<line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" stroke-width=\"2\"{dash}/>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
                lx + 20.0,
                lx + 24.0,
                ly + 4.0,
                esc(&series.name)
            );
            legend += 1;
        };
        for series in &self.left {
            line(&mut s, series, y_max, false);
        }
        if let (Some((_, right)), Some(m)) = (&self.right, y2_max) {
            for series in right {
                line(&mut s, series, m, true);
            }
        }
        if !self.note.is_empty() {
            let _ = writeln!(
                s,
                "<text x=\"{LEFT}\" y=\"{:.1}\" font-size=\"11\" fill=\"#555\">{}</text>",
                TOP - 6.0,
                esc(&self.note)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

fn tick(v: f64) -> String {
    if v >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_one_svg_document_with_a_line_per_series() {
        let c = Chart {
            title: "goodput <x>".into(),
            x_label: "offered".into(),
            y_label: "goodput/C".into(),
            left: vec![
                Series {
                    name: "direct".into(),
                    points: vec![(1.0, 1.0), (5.0, 0.1)],
                },
                Series {
                    name: "agent".into(),
                    points: vec![(1.0, 1.0), (5.0, 0.97)],
                },
            ],
            right: Some((
                "ms".into(),
                vec![Series {
                    name: "wait".into(),
                    points: vec![(0.0, 3.0)],
                }],
            )),
            note: String::new(),
        };
        let s = c.render();
        assert!(s.starts_with("<svg ") && s.ends_with("</svg>\n"));
        assert_eq!(s.matches("<polyline").count(), 3);
        assert!(s.contains("goodput &lt;x&gt;"));
        assert_eq!(nice(0.97), 1.0);
        assert_eq!(nice(10.0), 10.0);
        assert_eq!(nice(2300.0), 2500.0);
        let b = c.render_with_bands(&[Band {
            label: "host s1 #1".into(),
            from: 1.0,
            to: 3.0,
        }]);
        assert_eq!(b.matches("<rect class=\"band\"").count(), 1);
        assert!(b.contains("<title>host s1 #1</title>"));
    }
}
