//! The log's curves, streamed once and kept at display resolution: per timeline segment and
//! metric, [`COLUMNS`] step buckets holding first/last/min/max (M4 aggregation: the polyline
//! through those four points per pixel column is what the full curve would draw) and every
//! non-finite value's count and first step, so a NaN or a spike survives any log size. The
//! step range doubles (buckets merge in pairs) when a step outgrows it, so memory is fixed.
//! Also the time probes goodput needs: the last sample before and the first after each
//! instant the ledger names.

use crate::metrics::Record as Sample;
use serde::Serialize;
use std::collections::VecDeque;

/// Buckets per plot: about one per pixel column of the page's plots.
pub const COLUMNS: usize = 640;
/// The metrics plotted, by their slot in `metrics::SLOTS`.
pub const PLOTTED: [&str; 6] = [
    "loss",
    "eval_loss",
    "lr",
    "grad_norm",
    "tokens_per_s",
    "vram_gib",
];
/// Samples kept at the end of the newest segment for the robust step time.
const RECENT: usize = 257;

/// One display column of one metric.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Bucket {
    pub first: (u64, f64),
    pub last: (u64, f64),
    pub min: (u64, f64),
    pub max: (u64, f64),
    /// Finite values seen.
    pub n: u64,
    /// NaN/Inf values seen, and the first step one was seen at.
    pub nonfinite: u64,
    pub nonfinite_step: u64,
}

impl Bucket {
    fn new() -> Bucket {
        let nan = (0, f64::NAN);
        Bucket {
            first: nan,
            last: nan,
            min: nan,
            max: nan,
            n: 0,
            nonfinite: 0,
            nonfinite_step: 0,
        }
    }

    fn push(&mut self, step: u64, v: f64) {
        if !v.is_finite() {
            if self.nonfinite == 0 {
                self.nonfinite_step = step;
            }
            self.nonfinite += 1;
            return;
        }
        if self.n == 0 {
            self.first = (step, v);
            self.min = (step, v);
            self.max = (step, v);
        }
        if v < self.min.1 {
            self.min = (step, v);
        }
        if v > self.max.1 {
            self.max = (step, v);
        }
        self.last = (step, v);
        self.n += 1;
    }

    fn merge(a: Bucket, b: Bucket) -> Bucket {
        let mut m = a;
        if b.n > 0 {
            if a.n == 0 {
                m.first = b.first;
                m.min = b.min;
                m.max = b.max;
            } else {
                if b.min.1 < m.min.1 {
                    m.min = b.min;
                }
                if b.max.1 > m.max.1 {
                    m.max = b.max;
                }
            }
            m.last = b.last;
            m.n += b.n;
        }
        if b.nonfinite > 0 {
            if a.nonfinite == 0 {
                m.nonfinite_step = b.nonfinite_step;
            }
            m.nonfinite += b.nonfinite;
        }
        m
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0 && self.nonfinite == 0
    }

    /// The points to draw, in step order (first, min/max in the order they came, last),
    /// without repeats.
    pub fn points(&self) -> Vec<(u64, f64)> {
        if self.n == 0 {
            return Vec::new();
        }
        let (a, b) = if self.min.0 <= self.max.0 {
            (self.min, self.max)
        } else {
            (self.max, self.min)
        };
        let mut out: Vec<(u64, f64)> = Vec::with_capacity(4);
        for p in [self.first, a, b, self.last] {
            if out.last() != Some(&p) {
                out.push(p);
            }
        }
        out
    }
}

/// A stretch of the log between two launches (or two rewinds of the step).
#[derive(Debug, Clone, Serialize)]
pub struct Segment {
    /// 0-based, in log order.
    pub index: usize,
    pub first_step: u64,
    pub last_step: u64,
    /// Unix seconds of the first and last sample with a time.
    pub first_time: Option<f64>,
    pub last_time: Option<f64>,
    pub samples: u64,
    /// `[metric][column]`, metrics as in [`PLOTTED`].
    #[serde(skip)]
    pub columns: Vec<Vec<Bucket>>,
}

/// An instant the ledger names (a kill, a launch, a publish), with the log around it.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Probe {
    pub at: f64,
    /// The newest sample at or before `at`: (step, unix seconds).
    pub before: Option<(u64, f64)>,
    /// The first sample after `at`.
    pub after: Option<(u64, f64)>,
}

/// The streaming accumulator.
#[derive(Debug, Clone)]
pub struct Series {
    /// Steps covered: `[0, span)`, `span / COLUMNS` steps per bucket.
    pub span: u64,
    pub segments: Vec<Segment>,
    /// Launch instants (unix seconds, sorted): crossing one starts a segment.
    launches: Vec<f64>,
    launch_idx: usize,
    pub probes: Vec<Probe>,
    /// (step, time) of the newest segment's last samples.
    pub recent: VecDeque<(u64, f64)>,
    pub samples: u64,
    pub newest: Option<(u64, Option<f64>)>,
    /// The planned last step, as the log says it.
    pub log_total_steps: Option<u64>,
    /// Silences inside a segment: (last sample's time, next sample's time), at most
    /// [`GAPS_KEPT`], longer than [`GAP_FACTOR`] typical steps and a second.
    pub gaps: Vec<(f64, f64)>,
    /// Running mean of seconds per sample in the current segment.
    typical: Option<f64>,
    slots: [usize; 6],
    /// The column of the last sample and the steps it covers, `[from, to)`: consecutive
    /// steps mostly share a column, which spares two divisions per sample.
    col: (usize, u64, u64),
    /// Where the last sample's time fell among the probes (the partition point), checked
    /// before it is reused: times mostly grow, so the binary search is rarely needed.
    probe_k: usize,
    /// No probe instant is NaN, so the probes are partitioned by any time and a checked
    /// cached partition point is the binary search's answer.
    probes_ordered: bool,
}

const GAPS_KEPT: usize = 10_000;
const GAP_FACTOR: f64 = 10.0;

impl Series {
    /// `span_hint`: the planned steps when known (fewer merges); `launches` and `probes`:
    /// unix seconds.
    pub fn new(span_hint: Option<u64>, mut launches: Vec<f64>, probe_at: &[f64]) -> Series {
        launches.sort_by(f64::total_cmp);
        let mut probes: Vec<Probe> = probe_at
            .iter()
            .map(|&at| Probe {
                at,
                ..Probe::default()
            })
            .collect();
        probes.sort_by(|a, b| a.at.total_cmp(&b.at));
        let span = span_hint
            .unwrap_or(COLUMNS as u64)
            .max(COLUMNS as u64)
            .next_multiple_of(COLUMNS as u64);
        let slots = PLOTTED.map(|m| crate::metrics::slot(m).expect("plotted metric has a slot"));
        let probes_ordered = probes.iter().all(|p| !p.at.is_nan());
        Series {
            span,
            segments: Vec::new(),
            launches,
            launch_idx: 0,
            probes,
            recent: VecDeque::with_capacity(RECENT),
            samples: 0,
            newest: None,
            log_total_steps: None,
            gaps: Vec::new(),
            typical: None,
            slots,
            col: (0, 0, 0),
            probe_k: 0,
            probes_ordered,
        }
    }

    pub fn push_all(&mut self, samples: &[Sample]) {
        for s in samples {
            self.push(s);
        }
    }

    pub fn push(&mut self, s: &Sample) {
        self.samples += 1;
        if let Some(t) = s.total_steps() {
            self.log_total_steps = Some(t);
        }
        while s.step >= self.span {
            self.double();
        }
        let time = s.time.filter(|t| t.is_finite());
        let crossed = match time {
            Some(t) => {
                let before = self.launch_idx;
                while self.launch_idx < self.launches.len() && self.launches[self.launch_idx] <= t {
                    self.launch_idx += 1;
                }
                self.launch_idx != before
            }
            None => false,
        };
        let rewound = self.segments.last().is_none_or(|g| s.step <= g.last_step);
        if rewound || crossed {
            self.segments.push(Segment {
                index: self.segments.len(),
                first_step: s.step,
                last_step: s.step,
                first_time: time,
                last_time: time,
                samples: 0,
                columns: vec![vec![Bucket::new(); COLUMNS]; PLOTTED.len()],
            });
            self.recent.clear();
            self.typical = None;
        }
        let col = self.column(s.step);
        let seg = self
            .segments
            .last_mut()
            .expect("a segment was just ensured");
        seg.last_step = s.step;
        seg.samples += 1;
        if let Some(t) = time {
            seg.first_time.get_or_insert(t);
            seg.last_time = Some(t);
        }
        for (m, &slot) in self.slots.iter().enumerate() {
            if let Some(v) = s.values[slot] {
                seg.columns[m][col].push(s.step, v);
            }
        }
        if let (Some(t), Some(&(_, prev))) = (time, self.recent.back()) {
            let dt = t - prev;
            match self.typical {
                Some(typ) if dt > GAP_FACTOR * typ && dt > 1.0 => {
                    if self.gaps.len() < GAPS_KEPT {
                        self.gaps.push((prev, t));
                    }
                }
                Some(typ) => self.typical = Some(typ * 0.9 + dt.max(0.0) * 0.1),
                None => self.typical = Some(dt.max(0.0)),
            }
        }
        self.newest = Some((s.step, time));
        if let Some(t) = time {
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent.push_back((s.step, t));
            self.probe(s.step, t);
        }
    }

    /// The bucket index of `step` at the current span.
    #[inline]
    fn column(&mut self, step: u64) -> usize {
        let (col, from, to) = self.col;
        if from <= step && step < to {
            return col;
        }
        let per = self.span / COLUMNS as u64;
        let col = ((step / per) as usize).min(COLUMNS - 1);
        let from = col as u64 * per;
        let to = if col == COLUMNS - 1 {
            u64::MAX
        } else {
            from + per
        };
        self.col = (col, from, to);
        col
    }

    /// `probes.partition_point(|p| p.at < t)`, from the last answer when it still holds.
    #[inline]
    fn probe_index(&mut self, t: f64) -> usize {
        let k = self.probe_k;
        let fits = self.probes_ordered
            && k <= self.probes.len()
            && (k == 0 || self.probes[k - 1].at < t)
            && (k == self.probes.len() || self.probes[k].at >= t);
        if fits {
            return k;
        }
        let k = self.probes.partition_point(|p| p.at < t);
        self.probe_k = k;
        k
    }

    /// Probes are settled in [`Series::finish`]: here only the one bracketing `t` moves.
    fn probe(&mut self, step: u64, t: f64) {
        let k = self.probe_index(t);
        if let Some(p) = self.probes.get_mut(k) {
            if p.before.is_none_or(|(_, bt)| t >= bt) {
                p.before = Some((step, t));
            }
        }
        if k > 0 {
            let p = &mut self.probes[k - 1];
            if p.after.is_none_or(|(_, at)| t < at) {
                p.after = Some((step, t));
            }
        }
    }

    fn double(&mut self) {
        self.span *= 2;
        self.col = (0, 0, 0);
        for seg in &mut self.segments {
            for col in &mut seg.columns {
                let merged: Vec<Bucket> = (0..COLUMNS)
                    .map(|i| {
                        if 2 * i + 1 < COLUMNS {
                            Bucket::merge(col[2 * i], col[2 * i + 1])
                        } else if 2 * i < COLUMNS {
                            col[2 * i]
                        } else {
                            Bucket::new()
                        }
                    })
                    .collect();
                *col = merged;
            }
        }
    }

    /// Carry each probe's `before` forward and `after` backward (a sample that bracketed an
    /// earlier probe also bounds the later ones).
    pub fn finish(&mut self) {
        for i in 1..self.probes.len() {
            let prev = self.probes[i - 1].before;
            let p = &mut self.probes[i];
            if let Some((s, t)) = prev {
                if p.before.is_none_or(|(_, bt)| t > bt) {
                    p.before = Some((s, t));
                }
            }
        }
        for i in (0..self.probes.len().saturating_sub(1)).rev() {
            let next = self.probes[i + 1].after;
            let p = &mut self.probes[i];
            if let Some((s, t)) = next {
                if p.after.is_none_or(|(_, at)| t < at) {
                    p.after = Some((s, t));
                }
            }
        }
    }

    pub fn probe_at(&self, at: f64) -> Option<&Probe> {
        let k = self.probes.partition_point(|p| p.at < at);
        self.probes.get(k).filter(|p| p.at == at)
    }

    /// Median seconds per step over the newest segment's last samples: robust to a slow
    /// save or eval between two of them.
    pub fn step_seconds(&self) -> Option<f64> {
        let mut per: Vec<f64> = self
            .recent
            .iter()
            .zip(self.recent.iter().skip(1))
            .filter_map(|(a, b)| {
                let (ds, dt) = (b.0.checked_sub(a.0)?, b.1 - a.1);
                (ds > 0 && dt > 0.0).then(|| dt / ds as f64)
            })
            .collect();
        if per.is_empty() {
            return None;
        }
        per.sort_by(f64::total_cmp);
        Some(per[per.len() / 2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(step: u64, time: f64, loss: f64) -> Sample {
        let mut values = [None; crate::metrics::N_SLOTS];
        values[0] = Some(loss);
        Sample {
            step,
            time: Some(time),
            values,
        }
    }

    #[test]
    fn a_nan_and_a_spike_survive_a_million_steps() {
        let mut s = Series::new(None, vec![], &[]);
        for i in 0..1_000_000u64 {
            let loss = match i {
                123_457 => f64::NAN,
                777_777 => 50.0,
                _ => 2.0,
            };
            s.push(&sample(i, i as f64, loss));
        }
        assert!(s.span >= 1_000_000 && s.span / COLUMNS as u64 <= 4096);
        let cols = &s.segments[0].columns[0];
        let nan: Vec<&Bucket> = cols.iter().filter(|b| b.nonfinite > 0).collect();
        assert_eq!(nan.len(), 1);
        assert_eq!(nan[0].nonfinite_step, 123_457);
        let top = cols
            .iter()
            .filter(|b| b.n > 0)
            .map(|b| b.max.1)
            .fold(0.0, f64::max);
        assert_eq!(top, 50.0);
        assert_eq!(cols.iter().map(|b| b.n).sum::<u64>(), 999_999);
    }

    #[test]
    fn a_rewind_or_a_launch_starts_a_segment() {
        let mut s = Series::new(Some(1000), vec![100.0], &[]);
        for i in 0..50 {
            s.push(&sample(i, i as f64, 1.0));
        }
        // Relaunched from step 30 at t=100.
        for i in 30..60 {
            s.push(&sample(i, 100.0 + i as f64, 1.0));
        }
        assert_eq!(s.segments.len(), 2);
        assert_eq!(
            (s.segments[1].first_step, s.segments[1].last_step),
            (30, 59)
        );
    }

    #[test]
    fn probes_bracket_their_instant() {
        let mut s = Series::new(None, vec![], &[10.5, 20.5, 100.0]);
        for i in 0..30u64 {
            s.push(&sample(i, i as f64, 1.0));
        }
        s.finish();
        let p = s.probe_at(10.5).unwrap();
        assert_eq!(p.before, Some((10, 10.0)));
        assert_eq!(p.after, Some((11, 11.0)));
        let p = s.probe_at(100.0).unwrap();
        assert_eq!((p.before, p.after), (Some((29, 29.0)), None));
    }

    /// The cached column and probe position are the plain formulas' answers, over steps
    /// that mostly count up but also jump, rewind and outgrow the span, and times that
    /// mostly grow but also jump back.
    #[test]
    fn cached_column_and_probe_match_the_plain_formulas() {
        let probes: Vec<f64> = (0..50).map(|i| f64::from(i) * 7.5).collect();
        let mut s = Series::new(Some(1000), vec![], &probes);
        let mut rng = fastrand::Rng::with_seed(5);
        let (mut step, mut t) = (0u64, 0.0);
        for _ in 0..200_000 {
            match rng.u8(..20) {
                0 => step = rng.u64(..step + 2),
                1 => step += rng.u64(..20_000),
                _ => step += 1,
            }
            match rng.u8(..20) {
                0 => t = rng.f64() * 400.0,
                _ => t += rng.f64(),
            }
            while step >= s.span {
                s.double();
            }
            let per = s.span / COLUMNS as u64;
            assert_eq!(s.column(step), ((step / per) as usize).min(COLUMNS - 1));
            assert_eq!(s.probe_index(t), s.probes.partition_point(|p| p.at < t));
        }
        assert!(s.span > 1000, "the span doubled along the way");
    }

    #[test]
    fn step_time_is_the_median() {
        let mut s = Series::new(None, vec![], &[]);
        let mut t = 0.0;
        for i in 0..100u64 {
            t += if i % 10 == 0 { 30.0 } else { 2.0 };
            s.push(&sample(i, t, 1.0));
        }
        assert_eq!(s.step_seconds(), Some(2.0));
    }
}
