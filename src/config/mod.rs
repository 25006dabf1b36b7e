//! roger.toml: the serde shape, loading with `file:line:col` errors, validation, and the
//! phase lookup every check uses. Unknown keys are errors: a typo must not disable a check.

pub mod cluster;
pub mod critic;
pub mod export;
pub mod gpu;
pub mod hygiene;
pub mod notify;
pub mod preempt;
pub mod ranks;
pub mod remote;
mod schedule_rules;
pub mod units;
mod validate;
pub use schedule_rules::needs_total;
pub mod watch;

pub use crate::gpu::source::GpuConfig;
pub use crate::metrics::mapping::{
    Clock, KeyList, LogFormat, MetricsConfig, StepUnit, TextPattern, TimeUnit, VramUnit,
};
pub use critic::{
    Anneal, CriticConfig, DecayShape, PhaseConfig, QuietConfig, ScheduleConfig, ScheduleKind,
};
pub use gpu::BenchConfig;
pub use hygiene::{DiskConfig, HygieneConfig, PublishConfig, QuarantineConfig};
pub use units::{Band, Bytes, Dur};
pub use watch::{ForeignVram, WatchConfig};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The file name roger looks for in the current directory when `--config` is not given.
pub const DEFAULT_FILE: &str = "roger.toml";

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
    /// `log` as written when it holds `{rank}` (then `log` is the judged rank's file).
    #[serde(skip)]
    pub rank_log: Option<PathBuf>,
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
    publish: Option<PublishConfig>,
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
    #[serde(default)]
    export: export::ExportConfig,
    #[serde(default)]
    notify: notify::NotifyConfig,
    #[serde(default)]
    ranks: ranks::RanksConfig,
    preempt: Option<preempt::PreemptConfig>,
    #[serde(default)]
    cluster: cluster::ClusterConfig,
    #[serde(default)]
    remote: remote::RemoteConfig,
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
    /// A `[publish]` section was written: retention is opt-in, so without one `roger publish`
    /// prunes nothing (unless --keep-last / --keep-every ask).
    pub publish_declared: bool,
    pub disk: DiskConfig,
    pub hygiene: HygieneConfig,
    pub quarantine: QuarantineConfig,
    pub gpu: GpuConfig,
    pub bench: BenchConfig,
    pub export: export::ExportConfig,
    pub notify: notify::NotifyConfig,
    pub ranks: ranks::RanksConfig,
    /// `[preempt]`: the notice hand-off; None when the section is not written.
    pub preempt: Option<preempt::PreemptConfig>,
    /// `[remote]`: how to reach the bucket `[publish] remote` names.
    pub remote: remote::RemoteConfig,
    /// `[cluster]`: the job's other nodes, through a shared store.
    pub cluster: cluster::ClusterConfig,
}

impl Config {
    /// The run's planned last step as its log counts them: `[metrics] planned_total` (the
    /// run's own arguments, on the log's axis), else `[schedule] total_steps`. They differ
    /// where the schedule's total is a curve parameter off the axis: YOLO's `epochs` for a
    /// log counting epochs from 0 ends one short of it.
    pub fn planned_last(&self) -> Option<u64> {
        self.metrics
            .planned_total
            .or_else(|| self.schedule.as_ref().and_then(|s| s.total_steps))
    }

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
                    // Name the key the error is about (`duration "30" has no unit ... (key `stale`)`).
                    let key = text
                        .lines()
                        .nth(line - 1)
                        .and_then(|l| l.split_once('='))
                        .map(|(k, _)| k.trim())
                        .filter(|k| !k.is_empty() && !k.starts_with('#') && !msg.contains(k))
                        .map_or(String::new(), |k| format!(" (key `{k}`)"));
                    anyhow::anyhow!("{}:{line}:{col}: {msg}{key}", path.display())
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
        validate::validate_phases(&raw.phase, &at)?;
        validate::validate_rest(&raw, path).map_err(|e| validate::at_key(e, text, path))?;

        let resolve = |p: &Option<PathBuf>| p.as_ref().map(|p| base.join(p));
        let mut run = raw.run.clone();
        run.log = resolve(&run.log);
        // `{rank}`: every rank's log is read; the critic's curves (and every reader of one
        // log) use the judged rank's file.
        if let Some(l) = run
            .log
            .clone()
            .filter(|l| l.to_string_lossy().contains("{rank}"))
        {
            run.log = Some(crate::ranks::fill(&l, raw.ranks.judge));
            run.rank_log = Some(l);
        }
        run.checkpoint_dir = resolve(&run.checkpoint_dir);
        // Absent: the ledger's own default beside this file (`Config::ledger_path`).
        run.ledger = resolve(&run.ledger);
        let mut quarantine = raw.quarantine.clone();
        quarantine.dir = resolve(&quarantine.dir);
        quarantine.outputs = quarantine.outputs.iter().map(|p| base.join(p)).collect();
        let mut gpu = raw.gpu.clone();
        gpu.replay = resolve(&gpu.replay);

        Ok(Config {
            path: path.to_path_buf(),
            hash: crate::digest::hex(&Sha256::digest(text.as_bytes())),
            run,
            metrics: raw.metrics,
            schedule: raw.schedule,
            phases: raw.phase.into_iter().map(|p| p.into_inner()).collect(),
            quiet: raw.quiet,
            critic: raw.critic,
            watch: raw.watch,
            publish_declared: raw.publish.is_some(),
            publish: raw.publish.unwrap_or_default(),
            disk: raw.disk,
            hygiene: raw.hygiene,
            quarantine,
            gpu,
            bench: raw.bench,
            export: raw.export.resolve(&base),
            notify: raw.notify,
            ranks: raw.ranks,
            preempt: raw.preempt,
            remote: raw.remote,
            cluster: {
                let mut c = raw.cluster;
                // A bucket URL is not a path.
                if !c.store.as_ref().is_some_and(|s| s.starts_with("s3:")) {
                    c.store = resolve(&c.store);
                }
                c
            },
        })
    }

    /// The phase the step is in. Phases are contiguous, so a step before the first phase or
    /// past a closed last phase has none (and its checks are `unknown`).
    pub fn phase_for(&self, step: u64) -> Option<&PhaseConfig> {
        self.phases
            .iter()
            .find(|p| step >= p.from && p.to.is_none_or(|to| step < to))
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

pub fn kind_name(k: ScheduleKind) -> &'static str {
    match k {
        ScheduleKind::Constant => "constant",
        ScheduleKind::Cosine => "cosine",
        ScheduleKind::Linear => "linear",
        ScheduleKind::Wsd => "wsd",
        ScheduleKind::InverseSqrt => "inverse-sqrt",
        ScheduleKind::Polynomial => "polynomial",
        ScheduleKind::Step => "step",
        ScheduleKind::MultiStep => "multistep",
        ScheduleKind::OneCycle => "one-cycle",
        ScheduleKind::CosineRestarts => "cosine-restarts",
        ScheduleKind::Sgdr => "sgdr",
        ScheduleKind::Plateau => "plateau",
        ScheduleKind::YoloLinear => "yolo-linear",
        ScheduleKind::YoloCos => "yolo-cos",
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

    /// Issue 18 item 7: every new key is documented (commented) in the example.
    #[test]
    fn example_documents_every_new_key() {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("roger.example.toml"),
        )
        .unwrap();
        for key in [
            "warmup_ratio",
            "steps_per_epoch",
            "power",
            "step_size",
            "milestones",
            "gamma",
            "pct_start",
            "div_factor",
            "final_div_factor",
            "anneal",
            "num_cycles",
            "t_0",
            "t_mult",
            "factor",
            "group_scale",
            "clock",
            "total_steps",
            "step_time",
            "step_time_unit",
            "tokens_per_step",
            "tokens",
        ] {
            assert!(
                text.lines().any(|l| l
                    .trim_start_matches(['#', ' '])
                    .starts_with(&format!("{key} = "))),
                "roger.example.toml does not document {key}"
            );
        }
        for kind in [
            "polynomial",
            "multistep",
            "one-cycle",
            "cosine-restarts",
            "sgdr",
            "plateau",
            "constant-with-warmup",
        ] {
            assert!(text.contains(kind), "kind {kind} undocumented");
        }
        assert!(text.contains("version_{version}"));
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }
}
