//! `[schedule]` validation: each kind's own keys and their ranges, keys of one kind refused
//! on another (they would be silently ignored), and the parameter groups' scales.

use super::{kind_name, LogFormat, RawConfig, ScheduleConfig, ScheduleKind};
use anyhow::{bail, Result};

/// Kinds whose curve needs the run's length.
pub fn needs_total(kind: ScheduleKind) -> bool {
    matches!(
        kind,
        ScheduleKind::Cosine
            | ScheduleKind::Linear
            | ScheduleKind::Wsd
            | ScheduleKind::Polynomial
            | ScheduleKind::OneCycle
            | ScheduleKind::CosineRestarts
            | ScheduleKind::YoloLinear
            | ScheduleKind::YoloCos
    )
}

pub(super) fn validate_schedule(
    raw: &RawConfig,
    s: &ScheduleConfig,
    file: &dyn std::fmt::Display,
) -> Result<()> {
    let kind = kind_name(s.kind);
    let log_total =
        raw.run.format == LogFormat::HfTrainerState || !raw.metrics.total_steps.is_empty();
    match s.total_steps {
        None if needs_total(s.kind) && !log_total => bail!(
            "{file}: [schedule] kind = \"{kind}\" needs total_steps (or [metrics] total_steps, the log key that holds it)"
        ),
        Some(t) if t <= s.warmup_steps => bail!(
            "{file}: [schedule] expected total_steps > warmup_steps, got {t} <= {}",
            s.warmup_steps
        ),
        _ => {}
    }
    if let Some(r) = s.warmup_ratio {
        if !(r.is_finite() && (0.0..1.0).contains(&r)) {
            bail!("{file}: [schedule] expected 0 <= warmup_ratio < 1 (a fraction of total_steps), got {r}");
        }
        if s.warmup_steps != 0 {
            bail!("{file}: [schedule] set warmup_steps or warmup_ratio, not both (got warmup_steps = {} and warmup_ratio = {r})", s.warmup_steps);
        }
        if s.total_steps.is_none() && !log_total {
            bail!("{file}: [schedule] warmup_ratio needs total_steps (or [metrics] total_steps)");
        }
    }
    if s.step_slack > 10_000 {
        bail!(
            "{file}: [schedule] expected step_slack <= 10000 steps, got {}",
            s.step_slack
        );
    }
    if s.steps_per_epoch == Some(0) {
        bail!("{file}: [schedule] expected steps_per_epoch >= 1");
    }
    // Keys of one kind set on another would be silently ignored: refuse them.
    let set: [(&str, bool, &[ScheduleKind]); 14] = [
        ("decay_steps", s.decay_steps.is_some(), &[ScheduleKind::Wsd]),
        ("power", s.power.is_some(), &[ScheduleKind::Polynomial]),
        ("step_size", s.step_size.is_some(), &[ScheduleKind::Step]),
        (
            "milestones",
            s.milestones.is_some(),
            &[ScheduleKind::MultiStep],
        ),
        (
            "gamma",
            s.gamma.is_some(),
            &[ScheduleKind::Step, ScheduleKind::MultiStep],
        ),
        (
            "pct_start",
            s.pct_start.is_some(),
            &[ScheduleKind::OneCycle],
        ),
        (
            "div_factor",
            s.div_factor.is_some(),
            &[ScheduleKind::OneCycle],
        ),
        (
            "final_div_factor",
            s.final_div_factor.is_some(),
            &[ScheduleKind::OneCycle],
        ),
        ("anneal", s.anneal.is_some(), &[ScheduleKind::OneCycle]),
        (
            "num_cycles",
            s.num_cycles.is_some(),
            &[ScheduleKind::CosineRestarts],
        ),
        ("t_0", s.t_0.is_some(), &[ScheduleKind::Sgdr]),
        ("t_mult", s.t_mult.is_some(), &[ScheduleKind::Sgdr]),
        ("factor", s.factor.is_some(), &[ScheduleKind::Plateau]),
        (
            "steps_per_epoch",
            s.steps_per_epoch.is_some()
                && matches!(s.kind, ScheduleKind::OneCycle | ScheduleKind::Plateau),
            &[],
        ),
    ];
    for (key, present, kinds) in set {
        if present && !kinds.contains(&s.kind) {
            let names: Vec<&str> = kinds.iter().map(|k| kind_name(*k)).collect();
            let applies = if names.is_empty() {
                "is not used by this kind".to_string()
            } else {
                format!("applies to kind = {} only", names.join(" or "))
            };
            bail!("{file}: [schedule] {key} {applies}, got kind = \"{kind}\"");
        }
    }
    let positive = |key: &str, v: Option<f64>| -> Result<()> {
        match v {
            Some(v) if !(v.is_finite() && v > 0.0) => {
                bail!("{file}: [schedule] expected {key} > 0, got {v}")
            }
            _ => Ok(()),
        }
    };
    positive("power", s.power)?;
    match s.kind {
        ScheduleKind::Wsd => {
            let total = s.total_steps.unwrap_or(u64::MAX);
            match s.decay_steps {
                None => bail!("{file}: [schedule] kind = \"wsd\" needs decay_steps"),
                Some(d) if d == 0 || s.warmup_steps.saturating_add(d) > total => bail!(
                    "{file}: [schedule] wsd: expected 0 < decay_steps <= total_steps - warmup_steps, got {d}"
                ),
                _ => {}
            }
        }
        ScheduleKind::Step => match s.step_size {
            None | Some(0) => bail!(
                "{file}: [schedule] expected step_size >= 1 for kind = \"step\" (StepLR's step_size)"
            ),
            _ => {}
        },
        ScheduleKind::MultiStep => match s.milestones.as_deref() {
            None | Some([]) => {
                bail!("{file}: [schedule] expected milestones for kind = \"multistep\", e.g. [30, 80]")
            }
            Some(m) if m.windows(2).any(|w| w[1] <= w[0]) => {
                bail!("{file}: [schedule] expected milestones in increasing order, got {m:?}")
            }
            _ => {}
        },
        ScheduleKind::OneCycle => {
            if s.warmup_steps != 0 || s.warmup_ratio.is_some() {
                bail!("{file}: [schedule] one-cycle rises on its own (pct_start): expected no warmup_steps or warmup_ratio");
            }
            if s.min_lr != 0.0 {
                bail!("{file}: [schedule] one-cycle ends at peak_lr / div_factor / final_div_factor: expected no min_lr, got {}", s.min_lr);
            }
            let pct = s.pct_start.unwrap_or(0.3);
            if !(pct > 0.0 && pct < 1.0) {
                bail!("{file}: [schedule] expected 0 < pct_start < 1, got {pct}");
            }
            if let Some(t) = s.total_steps {
                if pct * (t as f64) < 2.0 {
                    bail!("{file}: [schedule] one-cycle: expected pct_start × total_steps >= 2 steps of rise, got {}", pct * t as f64);
                }
            }
            for (key, v) in [
                ("div_factor", s.div_factor),
                ("final_div_factor", s.final_div_factor),
            ] {
                if let Some(v) = v.filter(|v| !(v.is_finite() && *v >= 1.0)) {
                    bail!("{file}: [schedule] expected {key} >= 1, got {v}");
                }
            }
        }
        ScheduleKind::CosineRestarts if s.num_cycles == Some(0) => {
            bail!("{file}: [schedule] expected num_cycles >= 1")
        }
        ScheduleKind::Sgdr => {
            match s.t_0 {
                None | Some(0) => bail!(
                    "{file}: [schedule] expected t_0 >= 1 for kind = \"sgdr\" (the first cycle's steps)"
                ),
                _ => {}
            }
            if s.t_mult == Some(0) {
                bail!("{file}: [schedule] expected t_mult >= 1");
            }
        }
        ScheduleKind::Plateau => {
            if let Some(f) = s
                .factor
                .filter(|f| !(f.is_finite() && *f > 0.0 && *f < 1.0))
            {
                bail!("{file}: [schedule] expected 0 < factor < 1 (ReduceLROnPlateau's factor), got {f}");
            }
        }
        _ => {}
    }
    if let Some(g) = s
        .gamma
        .filter(|g| !(g.is_finite() && *g > 0.0 && *g <= 1.0))
    {
        bail!("{file}: [schedule] expected 0 < gamma <= 1, got {g}");
    }
    let keys = raw.metrics.lr.0.len();
    if let Some(scales) = &s.group_scale {
        if scales.len() != keys {
            bail!(
                "{file}: [schedule] group_scale has {} entries but [metrics] lr names {keys} key(s): expected one scale per key",
                scales.len()
            );
        }
        if let Some(v) = scales.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
            bail!("{file}: [schedule] expected every group_scale > 0, got {v}");
        }
    }
    Ok(())
}
