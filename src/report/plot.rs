//! The page's SVG plots, written through maud (every label escaped) with classes instead of
//! colours, so one SVG follows the page's light or dark theme. X is the step on one shared
//! range for every plot; each timeline segment is its own line (a resume that rewinds the
//! step shows as a second line over the same steps, not a zig-zag); NaN/Inf are marked at
//! their steps; ledger markers are vertical lines on every plot. Coordinates are printed with
//! fixed decimals: the same night gives the same bytes.

use super::series::{Bucket, PLOTTED};
use super::tables::Declared;
use super::{Marker, Night};
use maud::{html, Markup};

pub const WIDTH: f64 = 960.0;
pub const HEIGHT: f64 = 190.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 14.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 24.0;
/// Rows of marker labels above the plot; a label that fits in none is left to the tooltip.
const LABEL_ROWS: usize = 3;
/// About the width of one label character at the label font size (px).
const LABEL_CHAR: f64 = 6.0;

/// What one plot shows.
pub struct PlotSpec {
    pub title: &'static str,
    /// Index in [`PLOTTED`].
    pub metric: usize,
    /// A second metric drawn dashed (eval loss over loss).
    pub overlay: Option<usize>,
    pub unit: &'static str,
}

pub const PLOTS: [PlotSpec; 5] = [
    PlotSpec {
        title: "loss",
        metric: 0,
        overlay: Some(1),
        unit: "",
    },
    PlotSpec {
        title: "learning rate",
        metric: 2,
        overlay: None,
        unit: "",
    },
    PlotSpec {
        title: "grad norm",
        metric: 3,
        overlay: None,
        unit: "",
    },
    PlotSpec {
        title: "tokens/s",
        metric: 4,
        overlay: None,
        unit: "",
    },
    PlotSpec {
        title: "VRAM",
        metric: 5,
        overlay: None,
        unit: " GiB",
    },
];

/// Maps steps and values to pixels.
struct Frame {
    x_max: f64,
    /// The y range; in decades (log10 of the value) when `log`.
    y_lo: f64,
    y_hi: f64,
    log: bool,
}

impl Frame {
    fn x(&self, step: f64) -> f64 {
        LEFT + (WIDTH - LEFT - RIGHT) * (step / self.x_max).clamp(0.0, 1.0)
    }
    /// The fraction of the height a value sits at; a value <= 0 on a log axis is below it.
    fn frac(&self, v: f64) -> f64 {
        let v = match self.log {
            true if v > 0.0 => v.log10(),
            true => f64::NEG_INFINITY,
            false => v,
        };
        if self.y_hi > self.y_lo {
            (v - self.y_lo) / (self.y_hi - self.y_lo)
        } else {
            0.5
        }
    }
    fn y(&self, v: f64) -> f64 {
        TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - self.frac(v).clamp(-0.02, 1.02))
    }
    /// A band edge: held inside the frame (a band from 0 on a log axis starts at its floor).
    fn y_edge(&self, v: f64) -> f64 {
        TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - self.frac(v).clamp(0.0, 1.0))
    }
}

/// Spread of positive values beyond which a plot may switch to a log axis.
const LOG_SPREAD: f64 = 1e3;

/// A log y axis when the positive values span more than [`LOG_SPREAD`] and most samples sit
/// under 1% of the largest, where a linear axis would draw them (and the band) flat at the
/// floor: a loss that explodes to 4e9 over a healthy 1-10. A spread alone is not enough: an lr
/// warmup from 1e-7 spreads evenly over a linear axis and stays linear.
fn log_scale(n: &Night, metrics: &[usize]) -> Option<(f64, f64)> {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    let all: Vec<&Bucket> = metrics
        .iter()
        .flat_map(|m| buckets(n, *m).map(|(_, b)| b))
        .filter(|b| b.n > 0)
        .collect();
    for b in &all {
        for v in [b.first.1, b.min.1, b.max.1, b.last.1] {
            if v > 0.0 && v.is_finite() {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
    }
    if !(lo > 0.0 && hi / lo > LOG_SPREAD) {
        return None;
    }
    let total: u64 = all.iter().map(|b| b.n).sum();
    let squashed: u64 = all
        .iter()
        .filter(|b| b.max.1 < hi * 0.01)
        .map(|b| b.n)
        .sum();
    (2 * squashed > total).then_some((lo, hi))
}

/// Whether the log has this plot's series (or its overlay): a plot is drawn only then.
pub fn present(n: &Night, spec: &PlotSpec) -> bool {
    std::iter::once(spec.metric)
        .chain(spec.overlay)
        .any(|m| buckets(n, m).any(|(_, b)| b.n > 0 || b.nonfinite > 0))
}

/// The step range every plot shares.
pub fn x_max(n: &Night) -> u64 {
    let logged = n.segments.iter().map(|s| s.last_step).max().unwrap_or(0);
    let marked = n.markers.iter().map(|m| m.step).max().unwrap_or(0);
    n.headline
        .total_steps
        .unwrap_or(0)
        .max(logged)
        .max(marked)
        .max(1)
}

fn buckets(n: &Night, metric: usize) -> impl Iterator<Item = (usize, &Bucket)> {
    n.segments
        .iter()
        .flat_map(move |s| s.columns[metric].iter().map(move |b| (s.index, b)))
}

fn finite_range(n: &Night, metric: usize) -> Option<(f64, f64)> {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for (_, b) in buckets(n, metric).filter(|(_, b)| b.n > 0) {
        lo = lo.min(b.min.1);
        hi = hi.max(b.max.1);
    }
    (lo <= hi).then_some((lo, hi))
}

type Band = (u64, u64, f64, f64, String);

/// The declared bands (lo < hi) and limits (lo == hi) of a metric, per phase.
fn declared(d: &Declared, metric: usize, x_max: u64) -> Vec<Band> {
    let mut bands = Vec::new();
    for p in &d.phases {
        let to = p.to.unwrap_or(x_max).min(x_max);
        match metric {
            0 => {
                if let Some((lo, hi)) = p.loss {
                    bands.push((
                        p.from,
                        to,
                        lo,
                        hi,
                        format!("{}: loss in [{}, {}]", p.name, num(lo), num(hi)),
                    ));
                }
            }
            3 => {
                if let Some(v) = p.grad_norm_max {
                    bands.push((
                        p.from,
                        to,
                        v,
                        v,
                        format!("{}: grad norm ceiling {}", p.name, num(v)),
                    ));
                }
            }
            4 => {
                if let Some(v) = p.tokens_per_s_min {
                    bands.push((
                        p.from,
                        to,
                        v,
                        v,
                        format!("{}: tokens/s floor {}", p.name, num(v)),
                    ));
                }
            }
            5 => {
                if let Some(v) = p.vram_max_gib {
                    bands.push((
                        p.from,
                        to,
                        v,
                        v,
                        format!("{}: VRAM limit {} GiB", p.name, num(v)),
                    ));
                }
            }
            _ => {}
        }
    }
    bands
}

/// The expected lr curve and its tolerance, sampled at `n` points.
fn schedule(d: &Declared, x_max: u64, n: usize) -> Vec<(f64, f64, f64)> {
    let tol = d.lr_tolerance.unwrap_or(0.0);
    (0..=n)
        .filter_map(|i| {
            let step = (x_max as f64 * i as f64 / n as f64).round() as u64;
            d.lr_at(step).map(|v| (step as f64, v - tol, v + tol))
        })
        .collect()
}

/// A number for an axis or a label: short, and the same text for the same value.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        let t = format!("{v:.1e}");
        t.replace(".0e", "e")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trim(format!("{v:.2}"))
    } else {
        trim(format!("{v:.4}"))
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Powers of ten over [lo, hi] (in decades), at most about six of them.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.ceil() as i32, hi.floor() as i32);
    if a > b {
        return vec![10f64.powf((lo + hi) / 2.0)];
    }
    let stride = ((b - a) / 6 + 1) as usize;
    (a..=b).step_by(stride).map(|e| 10f64.powi(e)).collect()
}

/// About five round ticks over [lo, hi].
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return vec![lo];
    }
    let raw = (hi - lo) / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() * step;
    (0..12)
        .map(|i| first + i as f64 * step)
        .take_while(|v| *v <= hi + step * 1e-9)
        .collect()
}

fn f1(v: f64) -> String {
    format!("{v:.1}")
}

fn polyline(n: &Night, metric: usize, fr: &Frame) -> Vec<(usize, String)> {
    n.segments
        .iter()
        .map(|s| {
            let pts: Vec<String> = s.columns[metric]
                .iter()
                .flat_map(|b| b.points())
                .map(|(step, v)| format!("{},{}", f1(fr.x(step as f64)), f1(fr.y(v))))
                .collect();
            (s.index, pts.join(" "))
        })
        .filter(|(_, p)| !p.is_empty())
        .collect()
}

/// One plot as a `<figure>` with its `<svg>` (draw only what [`present`] says the log has).
pub fn plot(n: &Night, spec: &PlotSpec) -> Markup {
    let xm = x_max(n);
    let bands = declared(&n.declared, spec.metric, xm);
    let sched = if spec.metric == 2 {
        schedule(&n.declared, xm, 240)
    } else {
        Vec::new()
    };
    let mut range = finite_range(n, spec.metric);
    if let Some(o) = spec.overlay {
        if let Some((lo, hi)) = finite_range(n, o) {
            range = Some(range.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
        }
    }
    for (_, _, lo, hi, _) in &bands {
        range = Some(range.map_or((*lo, *hi), |(a, b)| (a.min(*lo), b.max(*hi))));
    }
    for (_, lo, hi) in &sched {
        range = Some(range.map_or((*lo, *hi), |(a, b)| (a.min(*lo), b.max(*hi))));
    }
    let nonfinite: Vec<(u64, u64)> = buckets(n, spec.metric)
        .filter(|(_, b)| b.nonfinite > 0)
        .map(|(_, b)| (b.nonfinite_step, b.nonfinite))
        .collect();
    let metrics: Vec<usize> = std::iter::once(spec.metric).chain(spec.overlay).collect();
    let log = log_scale(n, &metrics);
    let (lo, hi) = match log {
        // In decades: the data's positive values and the bands' positive edges.
        Some((plo, phi)) => {
            let edges = bands.iter().flat_map(|b| [b.2, b.3]);
            let edges = edges.chain(sched.iter().flat_map(|s| [s.1, s.2]));
            edges
                .filter(|v| *v > 0.0)
                .fold((plo.log10(), phi.log10()), |(a, b), v| {
                    (a.min(v.log10()), b.max(v.log10()))
                })
        }
        None => range.unwrap_or((0.0, 1.0)),
    };
    let pad = if hi > lo {
        (hi - lo) * 0.06
    } else {
        lo.abs().max(1.0) * 0.1
    };
    let fr = Frame {
        x_max: xm as f64,
        y_lo: lo - pad,
        y_hi: hi + pad,
        log: log.is_some(),
    };
    let below_zero = log.is_some()
        && metrics
            .iter()
            .any(|m| buckets(n, *m).any(|(_, b)| b.n > 0 && b.min.1 <= 0.0));
    let lines = polyline(n, spec.metric, &fr);
    let overlay = spec
        .overlay
        .map(|o| polyline(n, o, &fr))
        .unwrap_or_default();
    let y_ticks = if fr.log {
        log_ticks(fr.y_lo, fr.y_hi)
    } else {
        ticks(fr.y_lo, fr.y_hi)
    };
    let x_ticks = ticks(0.0, xm as f64);
    let bottom = HEIGHT - BOTTOM;
    let metric_name = PLOTTED[spec.metric];
    html! {
        figure.plot data-metric=(metric_name) data-scale=(if fr.log { "log" } else { "linear" }) {
            figcaption {
                (spec.title)
                @if let Some(k) = n.declared.keys.get(spec.metric).filter(|k| !k.is_empty() && k.as_str() != metric_name) {
                    span.key { " · log key " code { (k) } }
                }
                @if spec.overlay.is_some_and(|o| finite_range(n, o).is_some()) { span.legend { " · eval loss dashed" } }
                @if n.segments.len() > 1 { span.legend { " · one colour per launch" } }
                @if fr.log {
                    span.scale { " · log scale" }
                    @if below_zero { span.legend { " (values ≤ 0 drawn at the bottom edge)" } }
                }
            }
            svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img" aria-label=(format!("{} by step", spec.title)) {
                rect.frame x=(f1(LEFT)) y=(f1(TOP)) width=(f1(WIDTH - LEFT - RIGHT)) height=(f1(HEIGHT - TOP - BOTTOM)) {}
                @for t in &y_ticks {
                    line.grid x1=(f1(LEFT)) x2=(f1(WIDTH - RIGHT)) y1=(f1(fr.y(*t))) y2=(f1(fr.y(*t))) {}
                    text.tick x=(f1(LEFT - 6.0)) y=(f1(fr.y(*t) + 4.0)) text-anchor="end" { (num(*t)) (spec.unit) }
                }
                @if fr.log {
                    text.tick.scale x=(f1(LEFT - 6.0)) y=(f1(TOP - 28.0)) text-anchor="end" { "log" }
                }
                @for t in &x_ticks {
                    text.tick x=(f1(fr.x(*t))) y=(f1(HEIGHT - 6.0)) text-anchor="middle" { (num(*t)) }
                }
                @for (from, to, blo, bhi, label) in &bands {
                    @if bhi > blo {
                        rect.band x=(f1(fr.x(*from as f64))) y=(f1(fr.y_edge(*bhi))) width=(f1(fr.x(*to as f64) - fr.x(*from as f64))) height=(f1(fr.y_edge(*blo) - fr.y_edge(*bhi))) { title { (label) } }
                    } @else {
                        line.limit x1=(f1(fr.x(*from as f64))) x2=(f1(fr.x(*to as f64))) y1=(f1(fr.y(*blo))) y2=(f1(fr.y(*blo))) { title { (label) } }
                    }
                }
                @if !sched.is_empty() {
                    polygon.band points=(sched.iter().map(|(s, _, h)| format!("{},{}", f1(fr.x(*s)), f1(fr.y(*h)))).chain(sched.iter().rev().map(|(s, l, _)| format!("{},{}", f1(fr.x(*s)), f1(fr.y(*l))))).collect::<Vec<_>>().join(" ")) { title { "declared schedule ± tolerance" } }
                    polyline.expected points=(sched.iter().map(|(s, l, h)| format!("{},{}", f1(fr.x(*s)), f1(fr.y((l + h) / 2.0)))).collect::<Vec<_>>().join(" ")) {}
                }
                @for (i, pts) in &lines {
                    polyline class=(format!("line s{}", i % 4)) points=(pts) {}
                }
                @for (_, pts) in &overlay {
                    polyline.line.eval points=(pts) {}
                }
                @for (step, count) in &nonfinite {
                    path.nan d=(format!("M{},{}l-4,-7h8z", f1(fr.x(*step as f64)), f1(bottom))) { title { (count) " NaN/Inf from step " (step) } }
                }
                (markers(&n.markers, &fr))
            }
        }
    }
}

fn markers(ms: &[Marker], fr: &Frame) -> Markup {
    // Each label takes the first row where it does not run into the previous one.
    let mut row_end = [f64::NEG_INFINITY; LABEL_ROWS];
    let placed: Vec<(f64, Option<usize>, &Marker)> = ms
        .iter()
        .map(|m| {
            let x = fr.x(m.step as f64);
            let row = (0..LABEL_ROWS).find(|r| x >= row_end[*r] + 4.0);
            if let Some(r) = row {
                row_end[r] = x + 3.0 + LABEL_CHAR * m.label.chars().count() as f64;
            }
            (x, row, m)
        })
        .collect();
    html! {
        @for (x, row, m) in placed {
            line class=(format!("mark {}", m.kind)) x1=(f1(x)) x2=(f1(x)) y1=(f1(TOP - 2.0 - 11.0 * row.map_or(0.0, |r| r as f64))) y2=(f1(HEIGHT - BOTTOM)) { title { (m.label) " at step " (m.step) } }
            @if let Some(r) = row {
                text class=(format!("mlabel {}", m.kind)) x=(f1(x + 3.0)) y=(f1(TOP - 5.0 - 11.0 * r as f64)) { (m.label) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short_and_stable() {
        assert_eq!(num(0.0006), "6e-4");
        assert_eq!(num(2.8), "2.8");
        assert_eq!(num(52000.0), "52000");
        assert_eq!(num(0.25), "0.25");
        assert_eq!(num(f64::NAN), "NaN");
        assert_eq!(ticks(0.0, 1000.0), vec![0.0, 250.0, 500.0, 750.0, 1000.0]);
    }
}
