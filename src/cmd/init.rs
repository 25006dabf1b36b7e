//! `roger init`: write a commented roger.toml for a run that already has a log. Finds and
//! reads the log here; what the file says is decided in `init/`.

use crate::cmd::Global;
use crate::config::{Config, LogFormat};
use crate::init::{self, detect, discover};
use crate::ledger::{Kind, Ledger};
use crate::metrics;
use crate::outln;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Bytes of a log looked at to detect its format and keys.
const HEAD_BYTES: usize = 256 * 1024;

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  roger init --log train_log.jsonl             # writes ./roger.toml
  roger init --log output/                     # finds trainer_state.json, metrics.csv, *.jsonl, *.log
  roger init --log runs/                       # a TensorBoard SummaryWriter log directory
  roger init --log mlruns/0/<run-id>/          # an MLflow run (file store)
  roger init --log wandb/                      # the newest Weights & Biases run (latest-run)
  roger init --from-run ../last-run/roger-ledger.jsonl --out next/roger.toml
  roger init --log train.log --out -           # print instead of writing
  roger init --log train.log --pattern 'it (?P<step>\\d+) loss (?P<loss>[\\d.]+) lr (?P<lr>[\\d.e-]+)'
  roger init --log train.log --config ../old-run/roger.toml   # the key mapping of another config

Then: roger check (validate), roger critic --once (judge the run now), roger status.")]
pub struct InitArgs {
    /// The run's metrics log, or a directory holding one (trainer_state.json, metrics.csv,
    /// *.jsonl, *.log, a TensorBoard log directory or event file, an MLflow run directory,
    /// a W&B `wandb/` directory, run directory or `.wandb` file).
    #[arg(long, value_name = "FILE|DIR")]
    pub log: Option<PathBuf>,

    /// A finished good run to take as the next run's baseline: its ledger (its roger.toml
    /// beside it names the log and the key mapping; refused if its last verdict failed) or
    /// its log.
    #[arg(long, value_name = "LEDGER|LOG", conflicts_with = "log")]
    pub from_run: Option<PathBuf>,

    /// Where to write the config (`-`: stdout).
    #[arg(long, value_name = "FILE", default_value = "roger.toml")]
    pub out: PathBuf,

    /// Overwrite an existing --out file.
    #[arg(long)]
    pub force: bool,

    /// The run's name in the config and the ledger (default: from the log's directory).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// The log's format, instead of detecting it: jsonl, csv, text, key-value, hf-trainer-state,
    /// tensorboard, mlflow or wandb.
    #[arg(long, value_name = "FORMAT", value_parser = super::hygiene::parse_format)]
    pub format: Option<LogFormat>,

    /// A line pattern for a text log of a shape roger does not know (repeatable): a regex
    /// with named groups for the metrics, `(?P<step>\d+)` required, and any of loss, lr,
    /// grad_norm, tokens_per_s, vram, eval_loss, total_steps, time. Implies --format text.
    /// (With roger's `--config FILE`: init takes the log's format and key mapping, [run]
    /// format and [metrics], from that config, e.g. the last run's; its [run] log is the
    /// log unless --log names one.)
    #[arg(long, value_name = "REGEX", conflicts_with = "from_run")]
    pub pattern: Vec<String>,
}

pub fn run(global: &Global, a: InitArgs) -> Result<u8> {
    let to_stdout = a.out.as_os_str() == "-";
    if !to_stdout && a.out.exists() && !a.force {
        bail!(
            "{} exists; not overwriting it (pass --force to replace it, or --out FILE)",
            a.out.display()
        );
    }
    let mut passed_over = Vec::new();
    if global.config.is_some() && a.from_run.is_some() {
        bail!("--config and --from-run both name the mapping to take: pass one");
    }
    if global.config.is_some() && !a.pattern.is_empty() {
        bail!("--config and --pattern both give the key mapping: pass one");
    }
    let (log, previous, baseline) = match (&a.log, &a.from_run, &global.config) {
        (_, None, Some(c)) => {
            let cfg = Config::load(c).with_context(|| {
                format!("--config {}: the config whose mapping init takes", c.display())
            })?;
            let log = match (&a.log, &cfg.run.log) {
                (Some(l), _) => find_log(l, &mut passed_over)?,
                (None, Some(l)) => l.clone(),
                (None, None) => bail!(
                    "--config {}: [run] names no log; pass --log FILE",
                    c.display()
                ),
            };
            (log, Some(cfg), None)
        }
        (Some(l), _, _) => (find_log(l, &mut passed_over)?, None, None),
        (None, Some(r), _) => from_run(r, &mut passed_over)?,
        (None, None, None) => bail!(
            "pass --log FILE|DIR, --from-run LEDGER|LOG, or --config FILE (a config whose [run] log and [metrics] to take)"
        ),
    };
    let patterns = user_patterns(&a.pattern)?;
    if !patterns.is_empty() && a.format.is_some_and(|f| f != LogFormat::Text) {
        bail!(
            "--pattern reads a text log; it cannot go with --format {}",
            init::format_name(a.format.expect("checked"))
        );
    }
    let mut detected = match (a.format, &previous) {
        (_, Some(cfg)) => detect::Detected {
            format: cfg.run.format,
            why: format!("from {}", cfg.path.display()),
            keys: Vec::new(),
            patterns: cfg.metrics.patterns.clone(),
        },
        _ if !patterns.is_empty() => detect::Detected {
            format: LogFormat::Text,
            why: format!("--pattern ({} given)", patterns.len()),
            keys: Vec::new(),
            patterns: patterns.clone(),
        },
        (Some(f), None) => detect_log(&log)?
            .filter(|d| d.format == f)
            .unwrap_or(detect::Detected {
                format: f,
                why: "--format".into(),
                keys: Vec::new(),
                patterns: Vec::new(),
            }),
        (None, None) => detect_log(&log)?.with_context(|| {
            format!(
                "{}: cannot tell the log's format: not JSON lines, not CSV with a header, not trainer_state.json, not TensorBoard events, no known text line shape (llm.c, nanoGPT, modded-nanogpt, AlgoPerf, Megatron-LM / Megatron-DeepSpeed / NeMo, torchtitan), and not `key: value` lines beside a step counter (two or more); pass --pattern REGEX (named groups: step, loss, lr, ...) or --config FILE with [metrics] patterns",
                log.display()
            )
        })?,
    };
    if let Some(f) = a.format {
        if previous.is_none() {
            detected.format = f;
        }
    }
    if detected.format == LogFormat::Text && detected.patterns.is_empty() {
        bail!(
            "{}: --format text, but its lines match no shape roger knows: pass --pattern REGEX (repeatable; named groups (?P<step>\\d+) and any of loss, lr, grad_norm, ...) or --config FILE whose [metrics] patterns read it",
            log.display()
        );
    }
    let mut mapping = match &previous {
        Some(cfg) => previous_mapping(cfg),
        None if !patterns.is_empty() => pattern_mapping(&patterns),
        None => detect::map_keys(&detected),
    };
    // A trainer roger knows by its files (YOLO, detectron2, MMEngine, Keras, timm): its own
    // meaning of each key, the axis unit, and the planned total from the run's arguments.
    let run_args = metrics::trainers::run_args(&log);
    let trainer = (previous.is_none() && patterns.is_empty())
        .then(|| {
            let first = first_csv_step(&log, detected.format, &detected.keys);
            metrics::trainers::recognise(detected.format, &detected.keys, first, &run_args)
        })
        .flatten();
    if let Some(t) = &trainer {
        t.apply(
            &mut mapping.metrics,
            &mut mapping.chosen,
            &mut mapping.notes,
        );
    }
    let bar = crate::progress::reading(&log, "reading");
    let read = metrics::read_all(&log, detected.format, &mapping.metrics)
        .with_context(|| format!("reading {}", log.display()))?;
    drop(bar);
    if read.samples.is_empty() {
        bail!(
            "{}: no samples read as {} ({} unreadable lines{}); pass --format, or check the key mapping",
            log.display(),
            init::format_name(detected.format),
            read.garbage_total,
            read.garbage
                .first()
                .map_or(String::new(), |g| format!(", first: {g}"))
        );
    }
    // Lightning and MMEngine count steps but may plan epochs: the total is the epochs times
    // the steps per epoch the log's own rows show.
    let counting = trainer.as_ref().and_then(|t| match t.name {
        metrics::trainers::LIGHTNING => Some(metrics::trainers::Counting::FromZero),
        metrics::trainers::MMENGINE => Some(metrics::trainers::Counting::FromOne),
        _ => None,
    });
    if let Some(counting) = counting.filter(|_| mapping.metrics.planned_total.is_none()) {
        let rows = std::fs::read_to_string(&log)
            .map(|t| match counting {
                metrics::trainers::Counting::FromZero => metrics::trainers::epoch_rows(&t),
                metrics::trainers::Counting::FromOne => metrics::trainers::jsonl_epoch_rows(&t),
            })
            .unwrap_or_default();
        if let Some((total, from)) =
            metrics::trainers::planned_from_epochs(&rows, &run_args, counting)
        {
            plan_total(&mut mapping, total, &from);
        }
    }
    // A Hugging Face Trainer's event files carry its arguments: max_steps, or its epochs.
    if detected.format == LogFormat::Tensorboard && mapping.metrics.planned_total.is_none() {
        if let Some((total, from)) =
            metrics::tensorboard::hf_total(&metrics::tensorboard::hf_plan(&log))
        {
            plan_total(&mut mapping, total, &from);
        }
    }
    if trainer.is_none() && detected.format == LogFormat::Mlflow {
        let first = read.samples.first().map_or(0, |s| s.step);
        let last = read.samples.last().map_or(0, |s| s.step);
        if let Some((total, from)) = metrics::trainers::epoch_axis(&run_args, first, last) {
            mapping.metrics.unit = crate::config::StepUnit::Epoch;
            mapping.metrics.planned_total = Some(total);
            mapping.chosen.push(("unit", "\"epoch\"".into()));
            mapping
                .chosen
                .push(("planned_total", format!("{total}  # {from}")));
            mapping.notes.push(format!(
                "the steps count epochs: {total} planned ({from}), the log's last step {last}"
            ));
        }
    }
    let out_dir = if to_stdout {
        std::env::current_dir()?
    } else {
        match a.out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    };
    let name = a
        .name
        .clone()
        .or_else(|| previous.as_ref().map(|c| format!("{}-next", c.run.name)))
        .unwrap_or_else(|| run_name(&log));
    let input = init::Input {
        name,
        log: relative_to(&log, &out_dir),
        detected: &detected,
        mapping: &mapping,
        samples: &read.samples,
        garbage_total: read.garbage_total,
        // trainer_state's max_steps and a text line's `N/ M` ride on the samples; a total a
        // log states elsewhere (a header line) comes with its detected shape; a trainer's
        // arguments (YOLO `epochs`) with the trainer, an MLflow run's `epochs` param here.
        declared_total: mapping.metrics.planned_total,
        passed_over,
        baseline,
        written_at: chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        hints: init::fit::Hints {
            yolo: trainer
                .as_ref()
                .is_some_and(|t| t.name.starts_with("Ultralytics")),
            zero_based: read.samples.first().is_some_and(|s| s.step == 0),
        },
    };
    let proposal = init::infer(&input);
    // What init writes must load: a file roger cannot read would be init's own bug.
    let check_path = out_dir.join("roger.toml");
    Config::parse(&proposal.text, &check_path)
        .context("the proposed config does not validate (a roger bug; please report it)")?;
    for l in &proposal.summary {
        crate::noteln!("roger: init: {l}");
    }
    // What was not read, line by line (file, line, key and value): never dropped in silence.
    for g in read.garbage.iter().take(GARBAGE_SHOWN) {
        crate::warnln!("init: not read: {g}");
    }
    let more = read
        .garbage_total
        .saturating_sub(read.garbage.len().min(GARBAGE_SHOWN) as u64);
    if more > 0 {
        crate::warnln!("init: ... and {more} more line(s) not read");
    }
    if to_stdout {
        outln!("{}", proposal.text.trim_end());
    } else {
        write_new(&a.out, &proposal.text, a.force)?;
        crate::noteln!(
            "roger: init: wrote {}; next: roger --config {} check",
            a.out.display(),
            a.out.display()
        );
    }
    Ok(crate::exit::DONE)
}

/// The step of a CSV log's first row (YOLO and Keras count epochs from 0 or 1 by version),
/// read from its head; None for other formats or an unreadable head.
fn first_csv_step(log: &Path, format: LogFormat, keys: &[String]) -> Option<u64> {
    if format != LogFormat::Csv {
        return None;
    }
    let col = keys.iter().position(|k| k == "epoch")?;
    let head = read_head(log).ok()?;
    let text = String::from_utf8_lossy(&head);
    let row = text.lines().skip(1).find(|l| !l.trim().is_empty())?;
    row.split(',')
        .nth(col)?
        .trim()
        .parse::<f64>()
        .ok()
        .map(|v| v as u64)
}

/// A planned total init found outside the log's samples, with where it came from: into the
/// mapping, the config (`[metrics] planned_total`, commented) and the summary.
fn plan_total(mapping: &mut detect::Mapping, total: u64, from: &str) {
    mapping.metrics.planned_total = Some(total);
    mapping
        .chosen
        .push(("planned_total", format!("{total}  # {from}")));
    mapping
        .notes
        .push(format!("planned total: step {total} ({from})"));
}

/// Whether `dir` is an MLflow run directory of the file store (`mlruns/<exp>/<run>/`):
/// `metrics/` beside the run's `meta.yaml` or `tags/` (a bare `metrics/` folder is too common).
fn is_mlflow_run(dir: &Path) -> bool {
    dir.join("metrics").is_dir() && (dir.join("meta.yaml").is_file() || dir.join("tags").is_dir())
}

/// A directory that is itself a log (a SummaryWriter log dir, an MLflow run), with the time
/// it was last written (its newest file's mtime).
fn directory_log(dir: &Path) -> Option<std::time::SystemTime> {
    let wandb = metrics::wandb::run_files(dir).files;
    let files: Vec<PathBuf> = if !wandb.is_empty() {
        wandb
    } else if is_mlflow_run(dir) {
        metrics::mlflow::metric_files(dir)
            .into_iter()
            .map(|(_, p)| p)
            .collect()
    } else {
        metrics::tensorboard::event_files(dir)
    };
    let newest = files
        .iter()
        .filter_map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .max();
    newest.or_else(|| (!files.is_empty() || is_mlflow_run(dir)).then(std::time::SystemTime::now))
}

/// Detect a log's format: an MLflow run by its metric files, a TensorBoard log directory by
/// its newest event file, a file by its head.
fn detect_log(log: &Path) -> Result<Option<detect::Detected>> {
    if log.is_dir() {
        if is_mlflow_run(log) {
            let keys = metrics::mlflow::metric_files(log);
            return Ok(Some(detect::mlflow_run(
                keys.into_iter().map(|(k, _)| k).collect(),
            )));
        }
        // A W&B directory: the newest launch of its newest run.
        let run = metrics::wandb::run_files(log);
        if let Some(newest) = run.files.last() {
            crate::noteln!(
                "roger: init: W&B run {} ({} launch(es)); keys from {}",
                run.id.as_deref().unwrap_or("?"),
                run.files.len(),
                newest.display()
            );
            return detect_log(newest);
        }
        // Every event file of the directory: a writer opened again (HF's Trainer writes the
        // final evaluation into a second file) holds only some of the run's tags.
        let files = metrics::tensorboard::event_files(log);
        let Some(newest) = files.last() else {
            return Ok(None);
        };
        let mut detected = detect_log(newest)?;
        if let Some(d) = detected.as_mut() {
            for older in &files[..files.len() - 1] {
                for k in detect_log(older)?.map(|o| o.keys).unwrap_or_default() {
                    if !d.keys.contains(&k) {
                        d.keys.push(k);
                    }
                }
            }
            if files.len() > 1 {
                d.why = format!("{}; tags of all {} event files", d.why, files.len());
            }
        }
        return Ok(detected);
    }
    let head = read_head(log)?;
    let name = log.file_name().map(|n| n.to_string_lossy().into_owned());
    let mut detected = detect::detect(name.as_deref().unwrap_or(""), &head);
    if let Some(d) = detected.as_mut().filter(|_| head.len() == HEAD_BYTES) {
        // Only the head was looked at: count the shapes' lines over the whole file.
        let f =
            std::fs::File::open(log).with_context(|| format!("opening log {}", log.display()))?;
        detect::count_whole_text(d, std::io::BufReader::new(f))
            .with_context(|| format!("reading {}", log.display()))?;
    }
    Ok(detected)
}

/// `--log DIR`: the directory itself when it is a log (TensorBoard event files, an MLflow
/// run), else the best log found under it at any depth ([`metrics::locate::search`]), ranked
/// by [`init::discover`]: what was found, the one chosen and why, the runners-up, and what
/// was passed over are said.
fn find_log(path: &Path, passed: &mut Vec<String>) -> Result<PathBuf> {
    if !path.is_dir() {
        if !path.exists() {
            bail!("{}: no such file", path.display());
        }
        return Ok(path.to_path_buf());
    }
    if directory_log(path).is_some() {
        return Ok(path.to_path_buf());
    }
    let found = metrics::locate::search(path, &|d| directory_log(d).is_some(), &rogers_own)
        .with_context(|| format!("listing {}", path.display()))?;
    for (p, why) in &found.passed_over {
        crate::noteln!("roger: init: passed over {} ({why})", p.display());
        passed.push(format!("{} ({why})", p.display()));
    }
    if found.truncated {
        crate::noteln!(
            "roger: init: stopped searching {} after {} entries; pass --log with the run's own folder",
            path.display(),
            metrics::locate::SEARCH_ENTRIES
        );
    }
    let cands: Vec<discover::Candidate> = found.logs.iter().map(|p| candidate(path, p)).collect();
    let order = discover::rank(&cands);
    let lines = discover::describe(&cands, &order);
    if let Some(&best) = order.first() {
        crate::noteln!(
            "roger: init: {} log(s) found under {} ({} readable), best first:",
            cands.len(),
            path.display(),
            order.len()
        );
        for l in &lines {
            crate::noteln!("roger: init:   {l}");
        }
        let chosen = found.logs[best].clone();
        crate::noteln!(
            "roger: init: using {} ({})",
            chosen.display(),
            discover::chosen_because(&cands, &order)
        );
        return Ok(chosen);
    }
    for l in &lines {
        crate::noteln!("roger: init:   {l}");
    }
    bail!(
        "{}: no log found (searched {} levels down for trainer_state.json, metrics.json, *.jsonl, *.csv, *.log, *.txt, *.out, stdout, TensorBoard event folders, MLflow runs and W&B folders{}); pass --log FILE",
        path.display(),
        metrics::locate::SEARCH_DEPTH,
        match cands.len() {
            0 => String::new(),
            n => format!("; {n} named like a log but not readable as one, listed above"),
        }
    )
}

/// What init learns about one found log to rank it: its format, whether its mapping found
/// loss and lr, when it was last written and how long it is.
fn candidate(root: &Path, p: &Path) -> discover::Candidate {
    let shown = p.strip_prefix(root).unwrap_or(p).display().to_string();
    let (modified, bytes) = if p.is_dir() {
        (directory_log(p), dir_bytes(p, 3))
    } else {
        let m = std::fs::metadata(p).ok();
        (
            m.as_ref().and_then(|m| m.modified().ok()),
            m.map_or(0, |m| m.len()),
        )
    };
    let mut c = discover::Candidate {
        shown,
        format: None,
        unreadable: None,
        has_loss: false,
        has_lr: false,
        modified,
        bytes,
    };
    match detect_log(p) {
        Ok(Some(d)) => {
            let m = detect::map_keys(&d);
            let has = |k: &str| {
                m.chosen.iter().any(|c| c.0 == k)
                    || d.patterns
                        .iter()
                        .any(|pat| pat.regex.contains(&format!("?P<{k}>")))
            };
            c.has_loss = has("loss");
            c.has_lr = has("lr");
            c.format = Some(d.format);
        }
        Ok(None) => c.unreadable = Some("no format roger knows".into()),
        Err(e) => c.unreadable = Some(format!("{e:#}")),
    }
    c
}

/// Bytes of the files in `dir`, `depth` levels down (a log directory's size).
fn dir_bytes(dir: &Path, depth: usize) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() && depth > 0 => dir_bytes(&e.path(), depth - 1),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// Why `p` is roger's own file or folder (never a training log), or None. By name, and a
/// `.jsonl` by content too: a ledger copied or renamed still starts with a ledger record.
fn rogers_own(p: &Path) -> Option<&'static str> {
    let name = p.file_name()?.to_string_lossy().to_lowercase();
    if p.is_dir() {
        return match name.as_str() {
            ".roger" => Some("roger's evidence and quarantine folder"),
            ".roger-upload" => Some("roger's upload queue"),
            ".roger-queue" => Some("roger's publish queue"),
            // Staging, previous and rejected checkpoints of `roger publish`.
            n if n.starts_with(".roger") => Some("roger's publish folder"),
            _ => None,
        };
    }
    if name.starts_with(".roger") {
        return Some("roger's own file");
    }
    if name == crate::notify::outbox::FILE {
        return Some("roger's notification outbox");
    }
    if name == crate::ledger::DEFAULT_FILE || name.ends_with(".ledger.jsonl") {
        return Some("a roger ledger");
    }
    if name.ends_with(".critic-cache") {
        return Some("roger's summary cache");
    }
    if name == "roger.prom" {
        return Some("roger's metrics export");
    }
    if name == "roger-report.html" {
        return Some("roger's report");
    }
    if name.ends_with(".jsonl") {
        match first_record(p) {
            Some(Written::Ledger) => {
                return Some("a roger ledger: its first line is a ledger record")
            }
            Some(Written::Outbox) => {
                return Some("roger's notification outbox: its first line is an outbox entry")
            }
            None => {}
        }
    }
    None
}

/// What roger wrote a `.jsonl` as, known by its first line.
enum Written {
    Ledger,
    Outbox,
}

/// A ledger record (`seq`, `kind`, `prev`, `hash`) or an outbox entry (`op`, `key`, `at`)
/// on the file's first line.
fn first_record(p: &Path) -> Option<Written> {
    use std::io::BufRead;
    let f = std::fs::File::open(p).ok()?;
    let mut first = Vec::new();
    // A ledger record is small; a longer first line is no ledger's.
    std::io::BufReader::new(f)
        .take(64 * 1024)
        .read_until(b'\n', &mut first)
        .ok()?;
    let serde_json::Value::Object(m) = serde_json::from_slice::<serde_json::Value>(&first).ok()?
    else {
        return None;
    };
    let has = |keys: &[&str]| keys.iter().all(|k| m.contains_key(*k));
    if has(&["seq", "kind", "prev", "hash"]) {
        Some(Written::Ledger)
    } else if has(&["op", "key", "at"]) {
        Some(Written::Outbox)
    } else {
        None
    }
}

/// `--from-run`: a ledger (its verdicts record the config that judged them, by path and
/// hash) or a log.
fn from_run(
    path: &Path,
    passed: &mut Vec<String>,
) -> Result<(PathBuf, Option<Config>, Option<String>)> {
    let ledger = Ledger::new(path);
    let records = ledger.records().unwrap_or_default();
    if records.is_empty() {
        let log = find_log(path, passed)?;
        let words = format!(
            "the run logged in {} (taken as a finished good run: a log alone cannot say)",
            log.display()
        );
        return Ok((log, None, Some(words)));
    }
    let verdict = records.iter().rev().find(|r| r.kind == Kind::Verdict);
    let cfg = ledger_config(path, verdict)?;
    let Some(log) = cfg.run.log.clone() else {
        bail!("{}: [run] names no log", cfg.path.display());
    };
    let verdict = records
        .iter()
        .rev()
        .find(|r| r.kind == Kind::Verdict && r.run == cfg.run.name);
    let words = match verdict {
        Some(v) => {
            let status = v.str_field("status").unwrap_or("unknown");
            if status == "fail" {
                bail!(
                    "{}: run {:?} is not a good baseline: its last verdict (#{}, step {}) is fail",
                    path.display(),
                    cfg.run.name,
                    v.seq,
                    v.step.map_or("-".into(), |s| s.to_string())
                );
            }
            format!(
                "run {:?} ({}): last verdict #{} {status} at step {}",
                cfg.run.name,
                cfg.path.display(),
                v.seq,
                v.step.map_or("-".into(), |s| s.to_string())
            )
        }
        None => format!(
            "run {:?} ({}): no verdict in its ledger",
            cfg.run.name,
            cfg.path.display()
        ),
    };
    Ok((log, Some(cfg), Some(words)))
}

/// The config a ledger's newest verdict was judged by: the path it recorded, checked
/// against the hash it recorded. A ledger from before verdicts recorded the path: the
/// roger.toml beside it (checked against the hash too, when one was recorded).
fn ledger_config(path: &Path, verdict: Option<&crate::ledger::Record>) -> Result<Config> {
    let recorded = verdict.and_then(|v| v.str_field(crate::critic::verdict::CONFIG_PATH));
    let hash = verdict.and_then(|v| v.str_field("config_hash"));
    let (cfg_path, how) = match recorded {
        Some(p) => (PathBuf::from(p), "recorded in its newest verdict"),
        None => {
            let dir = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            (
                dir.join(crate::config::DEFAULT_FILE),
                "beside it (the ledger records no config path)",
            )
        }
    };
    if !cfg_path.is_file() {
        bail!(
            "{}: the run's config {} ({how}) is not there: moved or deleted? pass --log with --config FILE instead",
            path.display(),
            cfg_path.display()
        );
    }
    let cfg = Config::load(&cfg_path).with_context(|| {
        format!(
            "{}: loading the run's config {} ({how})",
            path.display(),
            cfg_path.display()
        )
    })?;
    if let Some(h) = hash.filter(|h| !h.is_empty() && *h != cfg.hash) {
        bail!(
            "{}: the run's config {} ({how}) has changed since the run was judged (hash {} now, {} recorded): not the config of that run; pass --log with --config FILE to take it anyway",
            path.display(),
            cfg_path.display(),
            short(&cfg.hash),
            short(h)
        );
    }
    Ok(cfg)
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

/// `--pattern` values as `[metrics] patterns`, each checked here so the error names the
/// flag: a valid regex with a `step` group.
/// Unreadable lines `init` lists one by one; beyond this it counts them.
const GARBAGE_SHOWN: usize = 5;

fn user_patterns(raw: &[String]) -> Result<Vec<crate::config::TextPattern>> {
    raw.iter()
        .enumerate()
        .map(|(i, r)| {
            let re = regex::Regex::new(r)
                .with_context(|| format!("--pattern #{} {r:?}: not a valid regex", i + 1))?;
            if !re.capture_names().flatten().any(|n| n == "step") {
                bail!(
                    "--pattern #{} {r:?}: needs a named group (?P<step>\\d+) for the step, and one per metric (loss, lr, grad_norm, ...)",
                    i + 1
                );
            }
            Ok(crate::config::TextPattern {
                regex: r.clone(),
                fields: Vec::new(),
            })
        })
        .collect()
}

/// The mapping `--pattern` gives: the patterns themselves, their groups said.
fn pattern_mapping(patterns: &[crate::config::TextPattern]) -> detect::Mapping {
    let notes = patterns
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let groups: Vec<String> = regex::Regex::new(&p.regex)
                .map(|re| re.capture_names().flatten().map(String::from).collect())
                .unwrap_or_default();
            format!("--pattern #{}: metrics {}", i + 1, groups.join(", "))
        })
        .collect();
    detect::Mapping {
        metrics: crate::config::MetricsConfig {
            patterns: patterns.to_vec(),
            ..Default::default()
        },
        chosen: Vec::new(),
        notes,
    }
}

/// The previous run's own mapping: it was right for that trainer.
fn previous_mapping(cfg: &Config) -> detect::Mapping {
    let m = cfg.metrics.clone();
    let mut chosen: Vec<(&'static str, String)> = Vec::new();
    let defaults = crate::config::MetricsConfig::default();
    for (k, v, d) in [
        ("step", &m.step, &defaults.step),
        ("loss", &m.loss, &defaults.loss),
        ("grad_norm", &m.grad_norm, &defaults.grad_norm),
        ("tokens_per_s", &m.tokens_per_s, &defaults.tokens_per_s),
        ("vram", &m.vram, &defaults.vram),
        ("eval_loss", &m.eval_loss, &defaults.eval_loss),
        ("time", &m.time, &defaults.time),
        ("total_steps", &m.total_steps, &defaults.total_steps),
        ("tokens", &m.tokens, &defaults.tokens),
    ] {
        if v != d {
            chosen.push((k, format!("{v:?}")));
        }
    }
    if m.lr.0 != defaults.lr.0 {
        chosen.push(("lr", format!("{:?}", m.lr.0)));
    }
    detect::Mapping {
        notes: vec![format!("key mapping from {}", cfg.path.display())],
        metrics: m,
        chosen,
    }
}

fn read_head(path: &Path) -> Result<Vec<u8>> {
    let mut f =
        std::fs::File::open(path).with_context(|| format!("opening log {}", path.display()))?;
    let mut buf = Vec::with_capacity(HEAD_BYTES);
    f.by_ref()
        .take(HEAD_BYTES as u64)
        .read_to_end(&mut buf)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(buf)
}

/// A name for the run: an MLflow run's own name, the log's directory, else the file's stem.
fn run_name(log: &Path) -> String {
    let abs = std::fs::canonicalize(log).unwrap_or_else(|_| log.to_path_buf());
    if let Ok(named) = std::fs::read_to_string(abs.join("tags/mlflow.runName")) {
        return clean_name(&named);
    }
    if abs.is_dir() || abs.extension().is_some_and(|x| x == "wandb") {
        if let Some(named) = metrics::wandb::run_name(&abs) {
            return clean_name(&named);
        }
    }
    let stem = abs
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let generic = [
        "trainer_state",
        "metrics",
        "train",
        "log",
        "train_log",
        "trainer_log",
    ];
    let event_file = abs.file_name().is_some_and(|n| {
        n.to_string_lossy()
            .starts_with(metrics::tensorboard::PREFIX)
    });
    let name = if generic.contains(&stem.as_str()) || event_file {
        abs.parent()
            .and_then(|p| p.file_name())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or(stem)
    } else {
        stem
    };
    clean_name(&name)
}

fn clean_name(name: &str) -> String {
    let clean: String = name
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect();
    if clean.is_empty() {
        "run".into()
    } else {
        clean
    }
}

/// `log` as the config in `dir` should name it: relative when it lies under `dir`.
fn relative_to(log: &Path, dir: &Path) -> String {
    let abs_log = std::fs::canonicalize(log).unwrap_or_else(|_| log.to_path_buf());
    let abs_dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    match abs_log.strip_prefix(&abs_dir) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => abs_log.display().to_string(),
    }
}

/// Write the file; without --force an existing one is never replaced (create_new, so a file
/// that appeared since the first check is not replaced either). With --force the new file is
/// written beside the old one and renamed over it (`fsx::write_atomic`, durable, the old
/// file's mode kept): a crash mid-write leaves the user's config whole, never truncated.
fn write_new(path: &Path, text: &str, force: bool) -> Result<()> {
    use std::io::Write;
    if force {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).map_or(0o666, |m| m.permissions().mode() & 0o7777);
        let how = crate::sys::fsx::Replace::new(crate::sys::fsx::Durability::Durable, mode);
        // A directory that cannot be fsynced is warned about by fsx itself.
        crate::sys::fsx::write_atomic(path, text.as_bytes(), how)
            .with_context(|| format!("writing {}", path.display()))?;
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| {
            if path.exists() {
                format!(
                    "{} exists; not overwriting it (pass --force)",
                    path.display()
                )
            } else {
                format!("writing {}", path.display())
            }
        })?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}
