//! Validation of a parsed roger.toml beyond its types: contiguous phases, sane thresholds and
//! settings, with each error pointed at the file, line and column it is about.

use super::{LogFormat, PhaseConfig, RawConfig};
use anyhow::{bail, Result};
use std::path::Path;

pub(super) fn validate_phases(
    phases: &[toml::Spanned<PhaseConfig>],
    at: &dyn Fn(std::ops::Range<usize>) -> String,
) -> Result<()> {
    for (i, sp) in phases.iter().enumerate() {
        let p = sp.get_ref();
        let here = at(sp.span());
        if p.name.trim().is_empty() {
            bail!("{here}: [[phase]] #{} needs a non-empty name", i + 1);
        }
        if let Some(to) = p.to {
            if to <= p.from {
                bail!(
                    "{here}: phase '{}': expected to > from, got from = {} and to = {to}",
                    p.name,
                    p.from
                );
            }
        } else if i + 1 != phases.len() {
            bail!(
                "{here}: phase '{}': only the last phase may leave `to` open; expected `to = <step>`",
                p.name
            );
        }
        if p.window < 2 {
            bail!(
                "{here}: phase '{}': expected window >= 2 samples, got {}",
                p.name,
                p.window
            );
        }
        for (key, v) in [
            ("loss_spike", p.loss_spike),
            ("grad_norm_spike", p.grad_norm_spike),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v > 1.0) {
                    bail!(
                        "{here}: phase '{}': expected {key} > 1 (a factor over the median), got {v}",
                        p.name
                    );
                }
            }
        }
        for (key, v) in [
            ("grad_norm_max", p.grad_norm_max),
            ("tokens_per_s_min", p.tokens_per_s_min),
            ("vram_max_gib", p.vram_max_gib),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v > 0.0) {
                    bail!(
                        "{here}: phase '{}': expected {key} to be a positive number, got {v}",
                        p.name
                    );
                }
            }
        }
        if let Some(prev) = i.checked_sub(1).map(|j| phases[j].get_ref()) {
            let prev_to = prev.to.expect("checked above: only the last is open");
            if p.from != prev_to {
                let what = if p.from < prev_to {
                    "overlaps"
                } else {
                    "leaves a gap after"
                };
                bail!(
                    "{here}: phase '{}' (from = {}) {what} phase '{}' (to = {prev_to}): phases must be contiguous, expected from = {prev_to}",
                    p.name,
                    p.from,
                    prev.name
                );
            }
        }
        if phases[..i].iter().any(|q| q.get_ref().name == p.name) {
            bail!("{here}: phase name '{}' is used twice", p.name);
        }
    }
    Ok(())
}

pub(super) fn validate_rest(raw: &RawConfig, path: &Path) -> Result<()> {
    let file = path.display();
    if raw.run.name.trim().is_empty() {
        bail!("{file}: [run] name must not be empty");
    }
    if let Some(t) = &raw.export.textfile {
        if t.extension().is_none_or(|e| e != "prom") {
            bail!(
                "{file}: [export] textfile must end in .prom (node_exporter's textfile collector reads only those), got {}",
                t.display()
            );
        }
    }
    raw.notify
        .check()
        .map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    if let Some(p) = &raw.preempt {
        p.check().map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    }
    raw.remote
        .check()
        .map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    if let Some(s) = &raw.schedule {
        if !(s.peak_lr.is_finite() && s.peak_lr > 0.0) {
            bail!("{file}: [schedule] expected peak_lr > 0, got {}", s.peak_lr);
        }
        if !(s.min_lr.is_finite() && s.min_lr >= 0.0 && s.min_lr <= s.peak_lr) {
            bail!(
                "{file}: [schedule] expected 0 <= min_lr <= peak_lr, got min_lr = {}",
                s.min_lr
            );
        }
        if !(s.tolerance.is_finite() && s.tolerance > 0.0) {
            bail!(
                "{file}: [schedule] expected tolerance > 0 (a fraction of peak_lr), got {}",
                s.tolerance
            );
        }
        super::schedule_rules::validate_schedule(raw, s, &file)?;
    }
    for q in &raw.quiet {
        if q.every == 0 {
            bail!("{file}: [[quiet]] '{}': expected every > 0 steps", q.name);
        }
    }
    if let Some(log) = &raw.run.log {
        let text = log.to_string_lossy();
        let name = log.file_name().map(|n| n.to_string_lossy().into_owned());
        if text.contains("{rank}")
            && (text.matches("{rank}").count() > 1 || !name.is_some_and(|n| n.contains("{rank}")))
        {
            bail!("{file}: [run] log {text:?}: expected `{{rank}}` once, in the file name (logs/rank{{rank}}.jsonl)");
        }
        let log = &std::path::PathBuf::from(text.replace("{rank}", "0"));
        if let Err(e) = crate::metrics::locate::check_pattern(log) {
            bail!("{file}: [run] {e}");
        }
    }
    let keys = raw.metrics.lr.0.len();
    if keys > crate::metrics::LR_GROUPS.len() {
        bail!(
            "{file}: [metrics] lr lists {keys} keys: expected at most {} parameter groups",
            crate::metrics::LR_GROUPS.len()
        );
    }
    if raw.metrics.lr.0.iter().any(|k| k.is_empty()) {
        bail!("{file}: [metrics] lr: expected non-empty keys");
    }
    if let Some(t) = raw
        .metrics
        .tokens_per_step
        .filter(|t| !(t.is_finite() && *t > 0.0))
    {
        bail!("{file}: [metrics] expected tokens_per_step > 0, got {t}");
    }
    if raw.metrics.tokens_per_step.is_none() && !raw.metrics.step_time.is_empty() {
        bail!("{file}: [metrics] step_time needs tokens_per_step: tokens/s = tokens_per_step / step_time");
    }
    if raw.run.format == LogFormat::Text {
        // Compile the patterns now, so `roger check` finds a bad one, not the first tick.
        if let Err(e) = crate::metrics::text::TextParser::new(&raw.metrics) {
            bail!("{file}: {e:#}");
        }
    }
    let c = &raw.critic;
    if c.eval_window < 2 {
        bail!(
            "{file}: [critic] expected eval_window >= 2 evals, got {}",
            c.eval_window
        );
    }
    if !(c.eval_margin.is_finite() && c.eval_margin >= 0.0) {
        bail!(
            "{file}: [critic] expected eval_margin >= 0 (a fraction of the best eval loss, e.g. 0.02), got {}",
            c.eval_margin
        );
    }
    if !(c.eval_noise.is_finite() && c.eval_noise >= 0.0) {
        bail!(
            "{file}: [critic] expected eval_noise >= 0 (times the run's own eval noise, e.g. 1), got {}",
            c.eval_noise
        );
    }
    if c.band_samples < 1 {
        bail!("{file}: [critic] expected band_samples >= 1");
    }
    if c.min_samples < 3 {
        bail!(
            "{file}: [critic] expected min_samples >= 3, got {}",
            c.min_samples
        );
    }
    if !(c.loss_slope_confidence > 0.5 && c.loss_slope_confidence < 1.0) {
        bail!(
            "{file}: [critic] expected loss_slope_confidence between 0.5 and 1 (e.g. 0.95), got {}",
            c.loss_slope_confidence
        );
    }
    if c.grad_nonfinite_consecutive < 1 {
        bail!("{file}: [critic] expected grad_nonfinite_consecutive >= 1");
    }
    if c.interval.0.is_zero() {
        bail!("{file}: [critic] expected interval above 0");
    }
    let w = &raw.watch;
    if w.backoff_initial.0 > w.backoff_max.0 {
        bail!(
            "{file}: [watch] expected backoff_initial <= backoff_max (the delay before a relaunch starts at backoff_initial and doubles up to backoff_max), got backoff_initial = {} and backoff_max = {}",
            super::units::format_duration(w.backoff_initial.0),
            super::units::format_duration(w.backoff_max.0)
        );
    }
    if w.hysteresis == 0 {
        bail!("{file}: [watch] expected hysteresis >= 1 sample");
    }
    if !(w.calibrate_factor.is_finite() && w.calibrate_factor >= 1.0) {
        bail!(
            "{file}: [watch] expected calibrate_factor >= 1, got {}",
            w.calibrate_factor
        );
    }
    if !(w.busy_cpu.is_finite() && w.busy_cpu > 0.0) {
        bail!(
            "{file}: [watch] expected busy_cpu > 0 (a fraction of one core), got {}",
            w.busy_cpu
        );
    }
    if !(w.gpu_pinned_util > 0.0 && w.gpu_pinned_util <= 100.0) {
        bail!(
            "{file}: [watch] expected 0 < gpu_pinned_util <= 100 (percent), got {}",
            w.gpu_pinned_util
        );
    }
    if !(w.gpu_low_power >= 0.0 && w.gpu_low_power <= 1.0) {
        bail!(
            "{file}: [watch] expected 0 <= gpu_low_power <= 1 (a fraction of the power limit), got {}",
            w.gpu_low_power
        );
    }
    if w.interval.0.is_zero() {
        bail!("{file}: [watch] expected interval > 0");
    }
    let d = &raw.disk;
    if d.fail_free > d.warn_free {
        bail!("{file}: [disk] expected fail_free <= warn_free");
    }
    if d.fail_hours > d.warn_hours {
        bail!("{file}: [disk] expected fail_hours <= warn_hours");
    }
    if !(d.fail_hours.is_finite() && d.warn_hours.is_finite() && d.fail_hours >= 0.0) {
        bail!(
            "{file}: [disk] expected finite hours with 0 <= fail_hours, got fail_hours = {}, warn_hours = {}",
            d.fail_hours,
            d.warn_hours
        );
    }
    let h = &raw.hygiene;
    if !(h.flap_low < h.flap_high && h.flap_low >= 0.0 && h.flap_high <= 1.0) {
        bail!("{file}: [hygiene] expected 0 <= flap_low < flap_high <= 1");
    }
    if h.flap_window < 1 {
        bail!("{file}: [hygiene] expected flap_window >= 1 verdicts");
    }
    for (key, v) in [
        ("regress_loss", h.regress_loss),
        ("regress_tokens_per_s", h.regress_tokens_per_s),
        ("regress_grad_norm", h.regress_grad_norm),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            bail!("{file}: [hygiene] expected {key} >= 0 (a relative margin), got {v}");
        }
    }
    let b = &raw.bench;
    if !(b.fail_ratio < b.warn_ratio && b.fail_ratio > 0.0 && b.warn_ratio <= 1.0) {
        bail!("{file}: [bench] expected 0 < fail_ratio < warn_ratio <= 1");
    }
    if !(b.slow_code_share > 0.0 && b.slow_code_share <= 1.0) {
        bail!(
            "{file}: [bench] expected 0 < slow_code_share <= 1, got {}",
            b.slow_code_share
        );
    }
    if let Some(p) = b.params.filter(|p| !(p.is_finite() && *p > 0.0)) {
        bail!("{file}: [bench] expected params > 0 (the model's parameter count), got {p}");
    }
    if b.sizes.is_empty() || b.sizes.contains(&0) {
        bail!(
            "{file}: [bench] expected sizes to list GEMM sizes >= 1, got {:?}",
            b.sizes
        );
    }
    if b.iters < 1 || b.gpus < 1 {
        bail!(
            "{file}: [bench] expected iters >= 1 and gpus >= 1, got iters = {}, gpus = {}",
            b.iters,
            b.gpus
        );
    }
    if crate::gpu::spec::Dtype::parse(&b.dtype).is_none() {
        bail!(
            "{file}: [bench] unknown dtype {:?}: expected fp32, tf32, fp16 or bf16",
            b.dtype
        );
    }
    if !["auto", "nvml", "smi", "none", "replay"].contains(&raw.gpu.source.as_str()) {
        bail!(
            "{file}: [gpu] unknown source {:?}: expected auto, nvml, smi, none or replay",
            raw.gpu.source
        );
    }
    if raw.publish.as_ref().is_some_and(|p| p.keep_last == 0) {
        bail!("{file}: [publish] expected keep_last >= 1 (the latest is always kept)");
    }
    Ok(())
}

/// Give a section-level validation error ("FILE: [disk] expected fail_free <= warn_free") the
/// line and column of the key it is about: the first key of that section, as written in the
/// file, that the message names — else the section's header.
pub(super) fn at_key(err: anyhow::Error, text: &str, path: &Path) -> anyhow::Error {
    let msg = err.to_string();
    let prefix = format!("{}: ", path.display());
    let Some(rest) = msg.strip_prefix(&prefix) else {
        return err;
    };
    let Some(section) = rest
        .strip_prefix("[[")
        .and_then(|r| r.split_once("]]"))
        .or_else(|| rest.strip_prefix('[').and_then(|r| r.split_once(']')))
        .map(|(s, _)| s.trim())
    else {
        return err;
    };
    match locate(text, section, rest) {
        Some((line, col)) => anyhow::anyhow!("{}:{line}:{col}: {rest}", path.display()),
        None => err,
    }
}

/// Where in `text` the section's key named earliest in `msg` is written (1-based), or the
/// section header when the message names no key written there.
fn locate(text: &str, section: &str, msg: &str) -> Option<(usize, usize)> {
    let mut current = "";
    let mut header = None;
    let mut best: Option<(usize, (usize, usize))> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with('[') {
            current = t.trim_matches(|c| c == '[' || c == ']' || c == ' ');
            if current == section && header.is_none() {
                header = Some((i + 1, line.len() - t.len() + 1));
            }
            continue;
        }
        if current != section {
            continue;
        }
        let Some((key, _)) = t.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let named_at = msg.match_indices(key).map(|(at, _)| at).find(|&at| {
            let before = msg[..at].chars().next_back();
            let after = msg[at + key.len()..].chars().next();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        });
        if let Some(at) = named_at {
            if best.is_none_or(|(b, _)| at < b) {
                best = Some((at, (i + 1, line.len() - t.len() + 1)));
            }
        }
    }
    best.map(|(_, pos)| pos).or(header)
}
