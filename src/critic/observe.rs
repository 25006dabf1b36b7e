//! Building an [`Observation`]: [`History`] keeps the run's current timeline (a resume that
//! rewinds the step drops the abandoned future), the evals with the train loss before each,
//! when the step last advanced, and which steps are new since the last verdict; [`observe`]
//! cuts the phase's window out of it with the thresholds that apply. [`read_vram`] asks the
//! GPU when the log carries no VRAM.

use super::between::Recorder;
use super::onset::{PhaseRule, Rules, Tracker};
use super::{EvalPoint, GpuVram, Num, ObsSample, Observation, Quiet, Settings, Thresholds};
use crate::config::Config;
use crate::gpu::GpuReader;
use crate::metrics::{
    Record, EVAL_LOSS, EVAL_SCORE, GRAD_NORM, LOSS, LR, LR_GROUPS, METRICS, SLOTS,
};
use std::collections::VecDeque;

pub(crate) const EVALS_KEPT: usize = 64;
/// The whole run's lr is kept thinned to at most this many samples (halved, stride doubled,
/// when full): what a finished run's lr check judges beyond the window.
const LR_KEPT: usize = 512;
/// At most this many of them go into a finished run's observation (and so the ledger).
pub const RUN_LR_JUDGED: usize = 64;
const TRAIN_PER_EVAL: usize = 64;

/// Serialisable so the summary cache (`summary.rs`) can carry it from one `--once` to the next.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct History {
    #[serde(with = "crate::metrics::packed")]
    samples: VecDeque<Record>,
    cap: usize,
    evals: Vec<EvalPoint>,
    /// Train losses since the last eval (newest last).
    #[serde(with = "crate::metrics::packed::floats")]
    pending_train: VecDeque<f64>,
    last_step: Option<u64>,
    advanced_at: Option<f64>,
    last_sample_at: Option<f64>,
    /// The run's planned last step, as the log last said it.
    total_steps: Option<u64>,
    /// Where the loss's current bad runs began, over every sample (not only those kept).
    onsets: Tracker,
    /// Loss and grad-norm events per sample, for those between two verdicts.
    between: Recorder,
    /// The first step not yet judged by a verdict (`None`: no verdict yet).
    new_from: Option<u64>,
    /// (step, lr) over the whole timeline, every `lr_stride`-th sample (absent in caches
    /// from before it: the window alone is judged).
    #[serde(default)]
    lr_run: Vec<(u64, f64)>,
    #[serde(default)]
    lr_stride: u64,
    #[serde(default)]
    lr_seen: u64,
    pub samples_total: u64,
    pub garbage_total: u64,
}

impl History {
    /// Keeps enough samples for the largest phase window.
    pub fn new(cfg: &Config) -> History {
        let widest = cfg.phases.iter().map(|p| p.window).max().unwrap_or(50);
        let rules = Rules {
            phases: cfg
                .phases
                .iter()
                .map(|p| PhaseRule {
                    from: p.from,
                    to: p.to,
                    band: p.loss.map(|b| [b.lo, b.hi]),
                    spike: p.loss_spike,
                    grad_spike: p.grad_norm_spike,
                    window: p.window,
                })
                .collect(),
            min_samples: cfg.critic.min_samples,
            band_samples: cfg.critic.band_samples,
            grad_nonfinite_consecutive: cfg.critic.grad_nonfinite_consecutive,
        };
        History {
            cap: widest.max(64) + 8,
            onsets: Tracker::new(rules.clone()),
            between: Recorder::new(rules),
            ..Default::default()
        }
    }

    /// A verdict judged everything up to the newest step: what comes next is new.
    pub fn judged(&mut self) {
        if let Some(s) = self.last_step {
            self.new_from = Some(s + 1);
        }
    }

    /// The state without the counts of what was read, as bytes: two reads that end the same
    /// and build the same bytes built the same history.
    pub fn state_bytes(&self) -> Vec<u8> {
        let mut h = self.clone();
        h.samples_total = 0;
        h.garbage_total = 0;
        let mut out = Vec::new();
        ciborium::into_writer(&h, &mut out).expect("a history serialises");
        out
    }

    /// Whether the samples kept fill their capacity (then older samples cannot be in them).
    pub fn window_full(&self) -> bool {
        self.samples.len() >= self.cap
    }

    pub fn evals_len(&self) -> usize {
        self.evals.len()
    }

    pub fn has_total_steps(&self) -> bool {
        self.total_steps.is_some()
    }

    /// As before any verdict (a history carried over by the summary cache).
    pub fn forget_judged(&mut self) {
        self.new_from = None;
    }

    /// The last verdict (read from the ledger) judged up to `step`. Ignored when the
    /// timeline is now behind it (a resume since then): the window is judged.
    pub fn judged_through(&mut self, step: u64) {
        if self.last_step.is_some_and(|l| l >= step) {
            self.new_from = Some(step + 1);
        }
    }

    pub fn last_step(&self) -> Option<u64> {
        self.last_step
    }

    pub fn push(&mut self, s: impl Into<Record>) {
        let s: Record = s.into();
        self.samples_total += 1;
        match self.last_step {
            Some(last) if s.step < last => {
                // A resume from an earlier checkpoint: the steps after it never happened.
                let mut dropped = Vec::new();
                while self.samples.back().is_some_and(|b| b.step >= s.step) {
                    let b = self.samples.pop_back().expect("checked");
                    dropped.extend(b.get(LOSS));
                }
                let kept: Vec<(u64, f64)> = self
                    .samples
                    .iter()
                    .filter_map(|r| r.get(LOSS).map(|l| (r.step, l)))
                    .collect();
                self.onsets.rewind(s.step, &dropped, &kept);
                self.between.rewind(s.step);
                self.new_from = self.new_from.map(|f| f.min(s.step));
                self.evals.retain(|e| e.step <= s.step);
                self.lr_run.retain(|p| p.0 < s.step);
                self.last_step = Some(s.step);
                self.advanced_at = s.time;
            }
            Some(last) if s.step == last => {}
            _ => {
                self.last_step = Some(s.step);
                self.advanced_at = s.time;
            }
        }
        match s.total_steps() {
            Some(t) => self.total_steps = Some(t),
            // Past the total it had, with none of its own: a launch after the log said the
            // run ended (a W&B run resumed after a clean exit) — the run is live again.
            None if self.total_steps.is_some_and(|t| s.step > t) => self.total_steps = None,
            None => {}
        }
        if let Some(t) = s.time {
            self.last_sample_at = Some(self.last_sample_at.map_or(t, |l| l.max(t)));
        }
        if let Some(g) = s.get(GRAD_NORM) {
            self.between.grad(s.step, g);
        }
        if let Some(lr) = s.get(LR) {
            self.keep_lr(s.step, lr);
        }
        if let Some(l) = s.get(LOSS) {
            self.onsets.push(s.step, l);
            self.between.loss(s.step, l, &self.onsets.now);
            self.pending_train.push_back(l);
            if self.pending_train.len() > TRAIN_PER_EVAL {
                self.pending_train.pop_front();
            }
        }
        if let Some(e) = s.get(EVAL_LOSS) {
            let train = super::stats::median(self.pending_train.iter().copied()).map(Num);
            self.evals.push(EvalPoint {
                step: s.step,
                eval_loss: Num(e),
                train_loss: train,
                score: s.get(EVAL_SCORE).map(Num),
            });
            self.pending_train.clear();
            if self.evals.len() > EVALS_KEPT {
                // The oldest goes, unless it is the best: the eval check measures from it.
                let best = super::overfit::best_index(&self.evals);
                self.evals.remove(usize::from(best == Some(0)));
            }
        }
        let train_metrics = SLOTS
            .iter()
            .zip(s.values)
            .any(|(m, v)| v.is_some() && is_judged(m));
        if train_metrics {
            self.samples.push_back(s);
            if self.samples.len() > self.cap {
                self.samples.pop_front();
            }
        }
    }

    /// One lr sample into the thinned whole-run series.
    fn keep_lr(&mut self, step: u64, lr: f64) {
        let stride = self.lr_stride.max(1);
        if self.lr_seen.is_multiple_of(stride) && self.lr_run.last().is_none_or(|p| p.0 < step) {
            self.lr_run.push((step, lr));
        }
        self.lr_seen += 1;
        if self.lr_run.len() > LR_KEPT {
            let kept: Vec<(u64, f64)> = self.lr_run.iter().copied().step_by(2).collect();
            self.lr_run = kept;
            self.lr_stride = stride * 2;
        }
    }

    /// On a finished run (the step reached the total): up to [`RUN_LR_JUDGED`] earlier lr
    /// samples, before `before`, where the schedule is distinguishable, i.e. where it
    /// prescribes more than twice its tolerance (a doubled or halved lr there is off by more
    /// than the tolerance; late in a decay the lr is ~0 and 2 x ~0 is within it).
    fn run_lr(&self, s: &crate::config::ScheduleConfig, before: u64) -> Vec<(u64, Num)> {
        if s.kind == crate::config::ScheduleKind::Plateau {
            return Vec::new();
        }
        let floor = 2.0 * s.tolerance * s.peak_lr;
        let seen: Vec<(u64, f64)> = self
            .lr_run
            .iter()
            .copied()
            .filter(|p| p.0 < before && crate::schedule::expected(s, p.0) > floor)
            .collect();
        let n = seen.len();
        if n <= RUN_LR_JUDGED {
            return seen.into_iter().map(|(st, v)| (st, Num(v))).collect();
        }
        (0..RUN_LR_JUDGED)
            .map(|i| seen[i * (n - 1) / (RUN_LR_JUDGED - 1)])
            .map(|(st, v)| (st, Num(v)))
            .collect()
    }

    /// A snapshot log (trainer_state.json) was re-read: start over from it.
    pub fn replace(&mut self, samples: Vec<Record>) {
        let garbage = self.garbage_total;
        let rules = std::mem::take(&mut self.onsets).into_rules();
        *self = History {
            cap: self.cap,
            onsets: Tracker::new(rules.clone()),
            between: Recorder::new(rules),
            new_from: self.new_from,
            garbage_total: garbage,
            ..Default::default()
        };
        for s in samples {
            self.push(s);
        }
    }
}

pub fn settings(cfg: &Config) -> Settings {
    Settings {
        grad_nonfinite_consecutive: cfg.critic.grad_nonfinite_consecutive,
        eval_window: cfg.critic.eval_window,
        band_samples: cfg.critic.band_samples,
        min_samples: cfg.critic.min_samples,
        loss_slope_confidence: Some(cfg.critic.loss_slope_confidence),
        eval_margin: Some(cfg.critic.eval_margin),
        eval_noise: Some(cfg.critic.eval_noise),
    }
}

/// The observation at `now` (unix seconds). `gpu_vram` is read by the caller only when
/// needed (see [`needs_gpu`]).
pub fn observe(h: &History, cfg: &Config, now: f64, gpu_vram: Option<GpuVram>) -> Observation {
    let phase = h.last_step.and_then(|s| cfg.phase_for(s));
    let window: Vec<ObsSample> = match phase {
        Some(p) => {
            let in_phase: Vec<&Record> = h
                .samples
                .iter()
                .filter(|s| s.step >= p.from && p.to.is_none_or(|to| s.step < to))
                .collect();
            in_phase[in_phase.len().saturating_sub(p.window)..]
                .iter()
                .map(|s| obs_sample(s))
                .collect()
        }
        // Outside every phase: the newest few, so NaN and lr are still judged.
        None => {
            let n = h.samples.len();
            h.samples
                .range(n.saturating_sub(cfg.critic.band_samples.max(1))..)
                .map(obs_sample)
                .collect()
        }
    };
    // New since the last verdict; before any, the window's samples.
    let between = h
        .new_from
        .or(window.first().map(|s| s.step))
        .map(|from| h.between.since(from));
    let schedule = cfg.schedule.as_ref().map(|s| s.resolved(h.total_steps));
    let total_steps = cfg.planned_last().or(h.total_steps);
    let lr_resolution = super::stale::printed_resolution(
        h.lr_run
            .iter()
            .map(|p| p.1)
            .chain(window.iter().filter_map(|x| x.get("lr"))),
    );
    let newest_lr = window
        .iter()
        .rev()
        .find_map(|x| Some((x.step, x.get("lr")?)));
    let finished = h.last_step.zip(total_steps).is_some_and(|(step, total)| {
        step >= total
            || matches!((&schedule, newest_lr, lr_resolution), (Some(s), Some((at, lr)), Some(r))
                if super::stale::ended_on_floor(s, total, at, lr, r))
    });
    let run_lr = match (&schedule, window.first()) {
        (Some(s), Some(first)) if finished => h.run_lr(s, first.step),
        _ => Vec::new(),
    };
    Observation {
        now,
        config_hash: cfg.hash.clone(),
        step: h.last_step,
        phase: phase.map(Thresholds::from),
        schedule,
        total_steps,
        run_lr,
        lr_resolution: lr_resolution.map(Num),
        quiet: cfg.quiet.iter().map(Quiet::from).collect(),
        settings: settings(cfg),
        window,
        evals: h.evals.clone(),
        near_best: None,
        last_sample_at: h.last_sample_at,
        advanced_at: h.advanced_at,
        between,
        gpu_vram,
        onsets: h.onsets.now,
        samples_total: h.samples_total,
        garbage_total: h.garbage_total,
        rules: super::RULES,
        ranks: Vec::new(),
    }
}

fn obs_sample(s: &Record) -> ObsSample {
    ObsSample {
        step: s.step,
        values: SLOTS
            .iter()
            .zip(s.values)
            .filter(|(m, _)| is_judged(m))
            .filter_map(|(m, v)| v.map(|v| ((*m).into(), Num(v))))
            .collect(),
    }
}

/// A train metric the window's checks judge (not the eval loss, nor what only feeds others).
fn is_judged(metric: &str) -> bool {
    metric != EVAL_LOSS && (METRICS.contains(&metric) || LR_GROUPS.contains(&metric))
}

/// Whether the VRAM check will want a GPU reading: a ceiling is declared and the window
/// has no logged VRAM.
pub fn needs_gpu(obs: &Observation) -> bool {
    obs.phase.as_ref().is_some_and(|p| p.vram_max_gib.is_some())
        && obs.series(crate::metrics::VRAM_GIB).is_empty()
}

/// VRAM from the GPU: the fullest GPU's memory used by `pids` when given, else its total
/// memory used (anything else on that GPU counts too, and the reason says so).
pub fn read_vram(reader: &mut dyn GpuReader, pids: &[u32]) -> GpuVram {
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    let snap = match reader.read() {
        Ok(s) => s,
        Err(e) => {
            return GpuVram {
                used_gib: None,
                scope: String::new(),
                error: Some(e.to_string()),
            }
        }
    };
    let fail = |scope: String, why: String| GpuVram {
        used_gib: None,
        scope,
        error: Some(why),
    };
    if pids.is_empty() {
        let scope = format!(
            "total memory used on the fullest of {} GPU(s) ({}; no run PID given: other processes count too)",
            snap.gpus.len(),
            snap.source
        );
        return match snap.gpus.iter().filter_map(|g| g.memory_used).max() {
            Some(b) => GpuVram {
                used_gib: Some(Num(b as f64 / GIB)),
                scope,
                error: None,
            },
            None => fail(scope, "the GPU reports no memory use".into()),
        };
    }
    let pid_list = pids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let scope = format!(
        "memory of PID(s) {pid_list} on their fullest GPU ({})",
        snap.source
    );
    if snap.foreign_pids {
        return fail(scope, "the driver reports host PIDs (roger runs in a container's PID namespace): the run's own VRAM cannot be told apart".into());
    }
    let mine: Vec<_> = snap
        .processes
        .iter()
        .filter(|p| pids.contains(&p.pid))
        .collect();
    if mine.is_empty() {
        return fail(scope, format!("PID(s) {pid_list} hold no GPU memory"));
    }
    if mine.iter().any(|p| p.used_memory.is_none()) {
        return fail(
            scope,
            "the driver cannot say per-process memory (WDDM?)".into(),
        );
    }
    let mut per_gpu = std::collections::BTreeMap::<u32, u64>::new();
    for p in mine {
        let sum = per_gpu.entry(p.gpu).or_default();
        *sum = sum.saturating_add(p.used_memory.unwrap_or(0));
    }
    let max = per_gpu.values().copied().max().unwrap_or(0);
    GpuVram {
        used_gib: Some(Num(max as f64 / GIB)),
        scope,
        error: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::gpu::{FakeGpu, GpuError, GpuInfo, GpuProcess, GpuSnapshot};
    use crate::metrics::Sample;
    use std::collections::BTreeMap;

    /// A sample with only a loss, at `step` and time `t`.
    pub(crate) fn s(step: u64, loss: f64, t: f64) -> Sample {
        Sample {
            step,
            time: Some(t),
            values: BTreeMap::from([("loss".into(), loss)]),
        }
    }

    fn cfg() -> Config {
        Config::parse(
            "[run]\nname = \"t\"\n[[phase]]\nname = \"a\"\nfrom = 0\nto = 100\nwindow = 3\n[[phase]]\nname = \"b\"\nfrom = 100\n",
            std::path::Path::new("/x/roger.toml"),
        )
        .unwrap()
    }

    #[test]
    fn window_is_the_phase_tail_and_a_resume_drops_the_future() {
        let c = cfg();
        let mut h = History::new(&c);
        for i in 0..10 {
            h.push(s(i * 10, 3.0, i as f64));
        }
        let o = observe(&h, &c, 100.0, None);
        assert_eq!(
            o.window.iter().map(|w| w.step).collect::<Vec<_>>(),
            vec![70, 80, 90]
        );
        assert_eq!(o.advanced_at, Some(9.0));
        h.push(s(110, 3.0, 10.0));
        let o = observe(&h, &c, 100.0, None);
        assert_eq!(
            (o.phase.unwrap().name.as_str(), o.window.len()),
            ("b", 1),
            "phase boundary"
        );
        // Resumed from step 50: 60..110 are gone.
        h.push(s(50, 3.5, 20.0));
        h.push(s(60, 3.4, 21.0));
        let o = observe(&h, &c, 100.0, None);
        assert_eq!(o.step, Some(60));
        assert_eq!(
            o.window.iter().map(|w| w.step).collect::<Vec<_>>(),
            vec![40, 50, 60]
        );
        assert_eq!(o.advanced_at, Some(21.0));
    }

    /// Issue 10 item 7: one read covering more new steps than the window.
    #[test]
    fn the_onset_of_a_nan_is_found_beyond_the_window() {
        let c = Config::parse(
            "[run]\nname = \"t\"\n[[phase]]\nname = \"a\"\nfrom = 0\nwindow = 10\nloss = [1.0, 5.0]\n",
            std::path::Path::new("/x/roger.toml"),
        )
        .unwrap();
        let mut h = History::new(&c);
        for i in 0..200 {
            h.push(s(i, if i < 80 { 3.0 } else { f64::NAN }, i as f64));
        }
        let o = observe(&h, &c, 300.0, None);
        assert_eq!(o.window.len(), 10);
        let v = crate::critic::judge(&o);
        assert_eq!(v.diverged_at(), Some(80), "{v:#?}");
        // Archived and read back, the same answer.
        let back: Observation = serde_json::from_value(serde_json::to_value(&o).unwrap()).unwrap();
        assert_eq!(crate::critic::judge(&back), v);
        // Resumed from step 60 (before the onset): the NaN never happened.
        h.push(s(60, 3.0, 301.0));
        assert_eq!(observe(&h, &c, 302.0, None).onsets, Default::default());
        // Resumed inside it (from 150): it still began at 80.
        for i in 61..200 {
            h.push(s(i, if i < 80 { 3.0 } else { f64::NAN }, 400.0));
        }
        h.push(s(150, f64::NAN, 500.0));
        let o = observe(&h, &c, 501.0, None);
        assert_eq!(o.onsets.nonfinite.map(|r| r.since), Some(80));
        assert_eq!(crate::critic::judge(&o).diverged_at(), Some(80));
    }

    /// A loss spike longer than the window still fails, from where it began.
    #[test]
    fn a_spike_longer_than_the_window_is_not_read_as_the_new_normal() {
        let c = Config::parse(
            "[run]\nname = \"t\"\n[[phase]]\nname = \"a\"\nfrom = 0\nwindow = 10\nloss_spike = 1.5\n",
            std::path::Path::new("/x/roger.toml"),
        )
        .unwrap();
        let mut h = History::new(&c);
        for i in 0..100 {
            h.push(s(i, if i < 50 { 3.0 } else { 6.0 }, i as f64));
        }
        let o = observe(&h, &c, 200.0, None);
        let v = crate::critic::judge(&o);
        let spike = v.checks.iter().find(|c| c.check == "loss_spike").unwrap();
        assert_eq!(
            spike.status,
            crate::critic::Status::Fail,
            "{}",
            spike.reason
        );
        assert_eq!(spike.diverged_at, Some(50));
        let back: Observation = serde_json::from_value(serde_json::to_value(&o).unwrap()).unwrap();
        assert_eq!(crate::critic::judge(&back), v);
    }

    /// Issue 29 point 5: the whole run's lr is kept (thinned), forgotten past a resume, and
    /// offered to the lr check only once the run is finished, where the schedule is
    /// An end the log declared (a sample whose total is its own step) and then steps past it
    /// without a total: a resumed launch, not a finished run.
    #[test]
    fn steps_past_a_declared_end_without_a_total_are_a_live_run_again() {
        let c = Config::parse(
            "[run]\nname = \"t\"\n[[phase]]\nname = \"a\"\nfrom = 0\n",
            std::path::Path::new("/x/roger.toml"),
        )
        .unwrap();
        let mut h = History::new(&c);
        for i in 0..50u64 {
            h.push(s(i, 3.0, i as f64));
        }
        let mut end = s(49, 3.0, 49.0);
        end.values.insert("total_steps".into(), 49.0);
        h.push(end);
        assert!(h.has_total_steps(), "the end line declares the total");
        h.push(s(50, 3.0, 50.0));
        assert!(!h.has_total_steps(), "a later launch: live again");
        // A sample with its own total past it keeps it (a run past its plan says so).
        let mut past = s(60, 3.0, 60.0);
        past.values.insert("total_steps".into(), 55.0);
        h.push(past);
        assert!(h.has_total_steps());
    }

    /// distinguishable.
    #[test]
    fn a_finished_run_offers_its_earlier_lr_where_the_schedule_shows() {
        let c = Config::parse(
            "[run]\nname = \"t\"\n[schedule]\nkind = \"linear\"\npeak_lr = 1e-3\ntotal_steps = 3000\ntolerance = 0.02\n[[phase]]\nname = \"a\"\nfrom = 0\nwindow = 10\n",
            std::path::Path::new("/x/roger.toml"),
        )
        .unwrap();
        let lr = |step: u64| 1e-3 * (3000 - step.min(3000)) as f64 / 3000.0;
        let mut h = History::new(&c);
        for i in 0..2000u64 {
            let mut x = s(i, 3.0, i as f64);
            x.values.insert("lr".into(), lr(i));
            h.push(x);
        }
        assert!(h.lr_run.len() <= LR_KEPT, "{}", h.lr_run.len());
        assert!(h.lr_stride > 1);
        assert!(observe(&h, &c, 1e4, None).run_lr.is_empty(), "not finished");
        // A resume from step 1500 forgets the abandoned lr.
        let mut x = s(1500, 3.0, 3000.0);
        x.values.insert("lr".into(), lr(1500));
        h.push(x);
        assert!(
            h.lr_run.iter().all(|p| p.0 <= 1500),
            "{:?}",
            h.lr_run.last()
        );
        for i in 1501..=3000u64 {
            let mut x = s(i, 3.0, 3000.0 + i as f64);
            x.values.insert("lr".into(), lr(i));
            h.push(x);
        }
        let o = observe(&h, &c, 1e4, None);
        assert!(!o.run_lr.is_empty() && o.run_lr.len() <= RUN_LR_JUDGED);
        let first = o.window[0].step;
        for (step, v) in &o.run_lr {
            assert!(*step < first, "{step}");
            // Only where the schedule prescribes more than 2 x tolerance x peak.
            assert!(lr(*step) > 2.0 * 0.02 * 1e-3, "{step}: {}", v.0);
        }
        let back: Observation = serde_json::from_value(serde_json::to_value(&o).unwrap()).unwrap();
        assert_eq!(back.run_lr, o.run_lr);
    }

    #[test]
    fn evals_carry_the_train_loss_before_them() {
        let c = cfg();
        let mut h = History::new(&c);
        h.push(s(10, 3.0, 1.0));
        h.push(s(20, 2.0, 2.0));
        let mut e = s(20, 0.0, 3.0);
        e.values = BTreeMap::from([("eval_loss".to_string(), 2.5)]);
        h.push(e);
        let o = observe(&h, &c, 10.0, None);
        assert_eq!(o.evals[0].train_loss, Some(Num(2.5)));
        assert_eq!(
            o.window.len(),
            2,
            "eval-only samples stay out of the window"
        );
    }

    #[test]
    fn vram_from_fake_gpu_by_pid_or_total() {
        let gib = 1u64 << 30;
        let snap = GpuSnapshot {
            gpus: vec![
                GpuInfo {
                    index: 0,
                    memory_used: Some(30 * gib),
                    ..Default::default()
                },
                GpuInfo {
                    index: 1,
                    memory_used: Some(50 * gib),
                    ..Default::default()
                },
            ],
            processes: vec![
                GpuProcess {
                    pid: 7,
                    gpu: 0,
                    used_memory: Some(20 * gib),
                },
                GpuProcess {
                    pid: 9,
                    gpu: 1,
                    used_memory: Some(45 * gib),
                },
            ],
            source: "fake".into(),
            ..Default::default()
        };
        let mut fake = FakeGpu::new(vec![Ok(snap.clone())]);
        let total = read_vram(&mut fake, &[]);
        assert_eq!(total.used_gib, Some(Num(50.0)));
        assert!(total.scope.contains("no run PID"));
        assert_eq!(read_vram(&mut fake, &[7]).used_gib, Some(Num(20.0)));
        assert!(read_vram(&mut fake, &[8])
            .error
            .unwrap()
            .contains("hold no GPU memory"));
        let mut host = FakeGpu::new(vec![Ok(GpuSnapshot {
            foreign_pids: true,
            ..snap.clone()
        })]);
        assert!(read_vram(&mut host, &[7])
            .error
            .unwrap()
            .contains("host PIDs"));
        let mut none = FakeGpu::new(vec![Err(GpuError::NoGpu("no driver".into()))]);
        assert!(read_vram(&mut none, &[])
            .error
            .unwrap()
            .contains("no driver"));
    }

    /// Found by the fuzz harness's long nvidia-smi run (d440671): one PID's VRAM on one GPU
    /// summed past u64 by the critic's VRAM read.
    #[test]
    fn regress_critic_vram_per_gpu_sum_past_u64() {
        let processes = crate::gpu::smi::parse_apps("2,,4\n2,,79703710938795", &[]).unwrap();
        let snap = GpuSnapshot {
            gpus: Vec::new(),
            processes,
            source: "smi".into(),
            ..Default::default()
        };
        let mut reader = FakeGpu::new(vec![Ok(snap)]);
        let v = read_vram(&mut reader, &[2]);
        assert_eq!(
            v.used_gib.map(|n| n.0),
            Some(u64::MAX as f64 / f64::from(1u32 << 30))
        );
    }
}
