//! roger.toml: the serde shape, loading with `file:line:col` errors, validation, and the
//! phase lookup every check uses. Unknown keys are errors: a typo must not disable a check.

pub mod critic;
pub mod gpu;
pub mod hygiene;
pub mod units;
pub mod watch;

pub use critic::{
    CriticConfig, DecayShape, MetricsConfig, PhaseConfig, QuietConfig, ScheduleConfig,
    ScheduleKind, TextPattern, VramUnit,
};
pub use gpu::{BenchConfig, GpuConfig};
pub use hygiene::{DiskConfig, HygieneConfig, PublishConfig, QuarantineConfig};
pub use units::{Band, Bytes, Dur};
pub use watch::{ForeignVram, WatchConfig};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The file name roger looks for in the current directory when `--config` is not given.
pub const DEFAULT_FILE: &str = "roger.toml";

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// One JSON object per line.
    Jsonl,
    /// CSV with a header row (Lightning's metrics.csv).
    Csv,
    /// Plain text matched with `[metrics] patterns`.
    Text,
    /// Hugging Face Trainer's trainer_state.json (read as a snapshot).
    HfTrainerState,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub name: String,
    /// The training's metrics log.
    pub log: Option<PathBuf>,
    #[serde(default = "default_format")]
    pub format: LogFormat,
    /// Where published checkpoints live (`latest.json` is here).
    pub checkpoint_dir: Option<PathBuf>,
    /// Default: `roger-ledger.jsonl` beside this config file.
    pub ledger: Option<PathBuf>,
}

fn default_format() -> LogFormat {
    LogFormat::Jsonl
}

/// The file as written (paths still relative). Private: callers get [`Config`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    run: RunConfig,
    #[serde(default)]
    metrics: MetricsConfig,
    schedule: Option<ScheduleConfig>,
    #[serde(default)]
    phase: Vec<toml::Spanned<PhaseConfig>>,
    #[serde(default)]
    quiet: Vec<QuietConfig>,
    #[serde(default)]
    critic: CriticConfig,
    #[serde(default)]
    watch: WatchConfig,
    #[serde(default)]
    publish: PublishConfig,
    #[serde(default)]
    disk: DiskConfig,
    #[serde(default)]
    hygiene: HygieneConfig,
    #[serde(default)]
    quarantine: QuarantineConfig,
    #[serde(default)]
    gpu: GpuConfig,
    #[serde(default)]
    bench: BenchConfig,
}

/// A loaded, validated roger.toml with paths resolved against its directory.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// sha256 of the file's bytes: recorded in verdicts so a replay knows what judged it.
    pub hash: String,
    pub run: RunConfig,
    pub metrics: MetricsConfig,
    pub schedule: Option<ScheduleConfig>,
    pub phases: Vec<PhaseConfig>,
    pub quiet: Vec<QuietConfig>,
    pub critic: CriticConfig,
    pub watch: WatchConfig,
    pub publish: PublishConfig,
    pub disk: DiskConfig,
    pub hygiene: HygieneConfig,
    pub quarantine: QuarantineConfig,
    pub gpu: GpuConfig,
    pub bench: BenchConfig,
}

impl Config {
    /// Read and validate a config file.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config {}", path.display()))?;
        Config::parse(&text, path)
    }

    /// Parse config text; `path` names the file in errors and anchors relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<Config> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let msg = e.message().trim_end().to_string();
            match e.span() {
                Some(span) => {
                    let (line, col) = line_col(text, span.start);
                    anyhow::anyhow!("{}:{line}:{col}: {msg}", path.display())
                }
                None => anyhow::anyhow!("{}: {msg}", path.display()),
            }
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let base = if base.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            base
        };
        let at = |span: std::ops::Range<usize>| {
            let (line, col) = line_col(text, span.start);
            format!("{}:{line}:{col}", path.display())
        };
        validate_phases(&raw.phase, &at)?;
        validate_rest(&raw, path).map_err(|e| at_key(e, text, path))?;

        let resolve = |p: &Option<PathBuf>| p.as_ref().map(|p| base.join(p));
        let mut run = raw.run.clone();
        run.log = resolve(&run.log);
        run.checkpoint_dir = resolve(&run.checkpoint_dir);
        run.ledger =
            Some(resolve(&run.ledger).unwrap_or_else(|| base.join(crate::ledger::DEFAULT_FILE)));
        let mut quarantine = raw.quarantine.clone();
        quarantine.dir = resolve(&quarantine.dir);
        quarantine.outputs = quarantine.outputs.iter().map(|p| base.join(p)).collect();
        let mut gpu = raw.gpu.clone();
        gpu.replay = resolve(&gpu.replay);

        Ok(Config {
            path: path.to_path_buf(),
            hash: hex(&Sha256::digest(text.as_bytes())),
            run,
            metrics: raw.metrics,
            schedule: raw.schedule,
            phases: raw.phase.into_iter().map(|p| p.into_inner()).collect(),
            quiet: raw.quiet,
            critic: raw.critic,
            watch: raw.watch,
            publish: raw.publish,
            disk: raw.disk,
            hygiene: raw.hygiene,
            quarantine,
            gpu,
            bench: raw.bench,
        })
    }

    /// The phase the step is in. Phases are contiguous, so a step before the first phase or
    /// past a closed last phase has none (and its checks are `unknown`).
    pub fn phase_for(&self, step: u64) -> Option<&PhaseConfig> {
        self.phases
            .iter()
            .find(|p| step >= p.from && p.to.is_none_or(|to| step < to))
    }

    pub fn ledger_path(&self) -> PathBuf {
        self.run
            .ledger
            .clone()
            .expect("ledger path is always resolved at load")
    }

    /// The config's directory: the run dir.
    pub fn base_dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    pub fn checkpoint_dir(&self) -> Result<PathBuf> {
        match &self.run.checkpoint_dir {
            Some(d) => Ok(d.clone()),
            None => bail!(
                "{}: [run] checkpoint_dir is not set (needed here; or pass --to DIR)",
                self.path.display()
            ),
        }
    }

    pub fn quarantine_dir(&self) -> PathBuf {
        self.quarantine
            .dir
            .clone()
            .unwrap_or_else(|| self.base_dir().join(".roger").join("quarantine"))
    }
}

/// Find the config: an explicit path must exist; otherwise `roger.toml` in the current
/// directory if there is one.
pub fn discover(explicit: Option<&Path>) -> Result<Option<Config>> {
    match explicit {
        Some(p) => Config::load(p).map(Some),
        None => {
            let p = Path::new(DEFAULT_FILE);
            if p.exists() {
                Config::load(p).map(Some)
            } else {
                Ok(None)
            }
        }
    }
}

/// Like [`discover`] but a config is required.
pub fn require(explicit: Option<&Path>) -> Result<Config> {
    discover(explicit)?.ok_or_else(|| {
        anyhow::anyhow!(
            "no config: pass --config FILE or create ./{DEFAULT_FILE} (see roger.example.toml)"
        )
    })
}

fn validate_phases(
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

fn validate_rest(raw: &RawConfig, path: &Path) -> Result<()> {
    let file = path.display();
    if raw.run.name.trim().is_empty() {
        bail!("{file}: [run] name must not be empty");
    }
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
        let needs_total = matches!(
            s.kind,
            ScheduleKind::Cosine | ScheduleKind::Linear | ScheduleKind::Wsd
        );
        match s.total_steps {
            None if needs_total => bail!(
                "{file}: [schedule] kind = \"{}\" needs total_steps",
                kind_name(s.kind)
            ),
            Some(t) if t <= s.warmup_steps => bail!(
                "{file}: [schedule] expected total_steps > warmup_steps, got {t} <= {}",
                s.warmup_steps
            ),
            _ => {}
        }
        if s.kind == ScheduleKind::Wsd {
            let total = s.total_steps.unwrap_or(0);
            match s.decay_steps {
                None => bail!("{file}: [schedule] kind = \"wsd\" needs decay_steps"),
                Some(d) if d == 0 || s.warmup_steps + d > total => bail!(
                    "{file}: [schedule] wsd: expected 0 < decay_steps <= total_steps - warmup_steps, got {d}"
                ),
                _ => {}
            }
        }
    }
    for q in &raw.quiet {
        if q.every == 0 {
            bail!("{file}: [[quiet]] '{}': expected every > 0 steps", q.name);
        }
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
    if c.band_samples < 1 {
        bail!("{file}: [critic] expected band_samples >= 1");
    }
    if c.min_samples < 3 {
        bail!(
            "{file}: [critic] expected min_samples >= 3, got {}",
            c.min_samples
        );
    }
    if c.grad_nonfinite_consecutive < 1 {
        bail!("{file}: [critic] expected grad_nonfinite_consecutive >= 1");
    }
    if c.interval.0.is_zero() {
        bail!("{file}: [critic] expected interval above 0");
    }
    let w = &raw.watch;
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
    if raw.publish.keep_last == 0 {
        bail!("{file}: [publish] expected keep_last >= 1 (the latest is always kept)");
    }
    Ok(())
}

/// Give a section-level validation error ("FILE: [disk] expected fail_free <= warn_free") the
/// line and column of the key it is about: the first key of that section, as written in the
/// file, that the message names — else the section's header.
fn at_key(err: anyhow::Error, text: &str, path: &Path) -> anyhow::Error {
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

pub fn kind_name(k: ScheduleKind) -> &'static str {
    match k {
        ScheduleKind::Constant => "constant",
        ScheduleKind::Cosine => "cosine",
        ScheduleKind::Linear => "linear",
        ScheduleKind::Wsd => "wsd",
        ScheduleKind::InverseSqrt => "inverse-sqrt",
    }
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, col)
}

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, Path::new("/runs/x/roger.toml"))
    }

    const MIN: &str = "[run]\nname = \"t\"\n";

    #[test]
    fn minimal_config_gets_defaults() {
        let c = parse(MIN).unwrap();
        assert_eq!(c.ledger_path(), Path::new("/runs/x/roger-ledger.jsonl"));
        assert_eq!(c.watch.hysteresis, 3);
        assert!(c.phase_for(0).is_none());
    }

    #[test]
    fn unknown_key_names_line_and_column() {
        let err = parse("[run]\nname = \"t\"\nlgo = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("/runs/x/roger.toml:3:1:"), "{err}");
        assert!(err.contains("unknown field `lgo`"), "{err}");
    }

    #[test]
    fn broken_toml_names_line() {
        let err = parse("[run]\nname = \n").unwrap_err().to_string();
        assert!(err.starts_with("/runs/x/roger.toml:2:"), "{err}");
    }

    #[test]
    fn phases_must_be_contiguous() {
        let text = format!(
            "{MIN}[[phase]]\nname = \"a\"\nfrom = 0\nto = 100\n[[phase]]\nname = \"b\"\nfrom = 90\n"
        );
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains(":7:1:") && err.contains("overlaps"), "{err}");
        let text = format!(
            "{MIN}[[phase]]\nname = \"a\"\nfrom = 0\nto = 100\n[[phase]]\nname = \"b\"\nfrom = 120\n"
        );
        assert!(parse(&text).unwrap_err().to_string().contains("gap"));
        let text = format!(
            "{MIN}[[phase]]\nname = \"a\"\nfrom = 0\n[[phase]]\nname = \"b\"\nfrom = 120\n"
        );
        assert!(parse(&text)
            .unwrap_err()
            .to_string()
            .contains("only the last phase"));
    }

    #[test]
    fn band_needs_lo_below_hi() {
        let text = format!("{MIN}[[phase]]\nname = \"a\"\nfrom = 0\nloss = [3.0, 2.0]\n");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains(":6:8:") && err.contains("lo < hi"), "{err}");
    }

    #[test]
    fn bad_duration_is_explained() {
        let text = format!("{MIN}[watch]\ngrace = \"ten minutes\"\n");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains(":4:9:") && err.contains("duration"), "{err}");
    }

    #[test]
    fn critic_limits_are_checked_at_load() {
        let err = parse(&format!("{MIN}[critic]\nmin_samples = 1\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("[critic] expected min_samples >= 3"), "{err}");
    }

    #[test]
    fn text_patterns_are_compiled_at_load() {
        let head = "[run]\nname = \"t\"\nformat = \"text\"\n[metrics]\n";
        let err = parse(&format!(
            "{head}patterns = [{{ regex = 'step (\\d+)', fields = [\"step\", \"loss\"] }}]\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(
                "/runs/x/roger.toml:5:1: [metrics] patterns #1: `fields` lists 2 names"
            ),
            "{err}"
        );
        let err = parse(&format!(
            "{head}patterns = [{{ regex = 'step (?P<step>\\d+' }}]\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(":5:1: [metrics] patterns #1: bad regex"),
            "{err}"
        );
        parse(&format!(
            "{head}patterns = [{{ regex = 'step (\\d+) loss ([.0-9]+)', fields = [\"step\", \"loss\"] }}]\n"
        ))
        .unwrap();
    }

    #[test]
    fn section_errors_name_the_line_of_the_key() {
        let text = format!("{MIN}[disk]\n# levels\nwarn_free = \"1GiB\"\n  fail_free = \"2GiB\"\n");
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.starts_with("/runs/x/roger.toml:6:3: [disk] expected fail_free <= warn_free"),
            "{err}"
        );
        let text = format!("{MIN}[schedule]\nkind = \"cosine\"\npeak_lr = 1e-3\n");
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "/runs/x/roger.toml:4:1: [schedule] kind = \"cosine\" needs total_steps"
            ),
            "{err}"
        );
        let err = parse(&format!("{MIN}[publish]\nkeep_last = 0\n"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("/runs/x/roger.toml:4:1:"), "{err}");
    }

    #[test]
    fn phase_lookup() {
        let text = format!(
            "{MIN}[[phase]]\nname = \"warmup\"\nfrom = 0\nto = 100\n[[phase]]\nname = \"main\"\nfrom = 100\n"
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.phase_for(99).unwrap().name, "warmup");
        assert_eq!(c.phase_for(100).unwrap().name, "main");
        assert_eq!(c.phase_for(1_000_000).unwrap().name, "main");
    }

    #[test]
    fn example_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("roger.example.toml");
        let c = Config::load(&path).unwrap();
        assert!(!c.phases.is_empty());
        assert!(c.schedule.is_some());
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }
}
