//! The trainers people use, known by the files they write: Ultralytics YOLO (`results.csv`
//! beside `args.yaml`, or YOLOv5's `opt.yaml`), detectron2 (`metrics.json`), MMEngine
//! (`vis_data/scalars.json`), Keras's `CSVLogger`, timm's `summary.csv`, Lightning's
//! `CSVLogger` (`metrics.csv` beside `hparams.yaml`) and an MLflow run's `params/`. Pure over
//! a log's name, its keys and the run's own arguments: which key is the step, the loss, the
//! lr (by a stated rule where there are parameter groups) and the eval loss, whether the axis
//! counts epochs, and the planned total — each choice in words. [`run_args`] is the one read.

use crate::metrics::mapping::{Clock, KeyList, LogFormat, MetricsConfig, StepUnit, VramUnit};
use std::collections::BTreeMap;
use std::path::Path;

/// One file of a run's arguments: its name and its top-level `key: value` scalars.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunArgs {
    pub file: String,
    pub values: BTreeMap<String, String>,
}

/// Files beside a log that hold the run's arguments, in the order they are trusted.
const ARG_FILES: &[&str] = &[
    "args.yaml",
    "opt.yaml",
    "hparams.yaml",
    "hyp.yaml",
    "config.yaml",
];

/// The run's arguments found beside `log` (or in its parent, for MMEngine's `vis_data/` and
/// Lightning's `version_N/`), and an MLflow run's `params/` (one file per parameter).
/// Unreadable files are left out: they only ever add a planned total.
pub fn run_args(log: &Path) -> Vec<RunArgs> {
    let mut out = Vec::new();
    let dir = if log.is_dir() {
        Some(log)
    } else {
        log.parent()
    };
    let Some(dir) = dir else { return out };
    for d in [Some(dir), dir.parent()].into_iter().flatten() {
        for name in ARG_FILES {
            if let Ok(text) = std::fs::read_to_string(d.join(name)) {
                out.push(RunArgs {
                    file: d.join(name).display().to_string(),
                    values: top_level_scalars(&text),
                });
            }
        }
        // MMEngine dumps the run's Python config beside its scalars.
        if let Ok(text) = std::fs::read_to_string(d.join("config.py")) {
            out.push(RunArgs {
                file: d.join("config.py").display().to_string(),
                values: mmengine_train_cfg(&text),
            });
        }
        if !out.is_empty() {
            break;
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir.join("params")) {
        let mut values = BTreeMap::new();
        for e in entries.flatten() {
            if let Ok(v) = std::fs::read_to_string(e.path()) {
                values.insert(
                    e.file_name().to_string_lossy().into_owned(),
                    v.trim().into(),
                );
            }
        }
        out.push(RunArgs {
            file: dir.join("params").display().to_string(),
            values,
        });
    }
    out
}

/// `train_cfg = dict(by_epoch=True, max_epochs=100, ...)` of an MMEngine config dump, as
/// `train_cfg.<key>` (its `max_iters` or `max_epochs`); the rest of the Python is not read.
pub fn mmengine_train_cfg(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(at) = text
        .lines()
        .position(|l| l.trim_start().starts_with("train_cfg = dict("))
    else {
        return out;
    };
    // The dict to its closing parenthesis (the dump may wrap it over a few lines).
    let body: String = text.lines().skip(at).take(12).collect::<Vec<_>>().join(" ");
    let body = body.split_once("dict(").map_or("", |b| b.1);
    let body = body.split(')').next().unwrap_or("");
    for pair in body.split(',') {
        if let Some((k, v)) = pair.split_once('=') {
            let v = v.trim().trim_matches(|c| c == '\'' || c == '"');
            if !v.is_empty() {
                out.insert(format!("train_cfg.{}", k.trim()), v.to_string());
            }
        }
    }
    out
}

/// The top-level `key: value` lines of a YAML file (nested maps, lists and anything after a
/// tag such as `!!python/object` are not scalars of the run and are left out), and those of
/// a top-level `trainer:` map as `trainer.key` (LightningCLI's `config.yaml` keeps
/// `max_epochs` there). A YAML parser would refuse a Lightning `hparams.yaml` holding Python
/// tags; these few keys are all that is read.
pub fn top_level_scalars(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut in_trainer = false;
    for line in text.lines() {
        if let Some(inner) = line.strip_prefix("  ").filter(|_| in_trainer) {
            if let Some((k, v)) = inner
                .split_once(':')
                .filter(|(k, _)| !k.starts_with([' ', '-', '#']))
            {
                let v = v.split(" #").next().unwrap_or("").trim();
                if !v.is_empty() && !v.starts_with('!') {
                    out.insert(format!("trainer.{}", k.trim()), v.to_string());
                }
            }
            continue;
        }
        in_trainer = line.trim_end() == "trainer:";
        if line.starts_with([' ', '\t', '-', '#']) {
            continue;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.split(" #").next().unwrap_or("").trim();
        let v = v.trim_matches(|c| c == '\'' || c == '"');
        if !v.is_empty() && !v.starts_with('!') {
            out.insert(k.trim().to_string(), v.to_string());
        }
    }
    out
}

/// A trainer recognised by its log, and what roger reads from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Trainer {
    pub name: &'static str,
    pub unit: StepUnit,
    pub step: String,
    pub loss: Option<String>,
    pub lr: Option<String>,
    pub eval_loss: Option<String>,
    /// Its eval score (higher is better: top-1, mAP) beside the eval loss.
    pub eval_score: Option<String>,
    /// The sample time: a key and how it counts; None: samples are timed when read.
    pub time: Option<(String, Clock)>,
    /// The log's `time` key is no clock (detectron2's and MMEngine's: the seconds one
    /// iteration took) and must be written off (`time = ""`), or roger's default would read
    /// it as unix seconds.
    pub time_is_duration: bool,
    /// The VRAM key and its unit, where the trainer logs one.
    pub vram: Option<(String, VramUnit)>,
    /// The planned last step (or epoch), and where it was read.
    pub total: Option<(u64, String)>,
    /// Why each choice, for the printed summary.
    pub notes: Vec<String>,
}

impl Trainer {
    fn new(name: &'static str, unit: StepUnit, step: &str) -> Trainer {
        Trainer {
            name,
            unit,
            step: step.into(),
            loss: None,
            lr: None,
            eval_loss: None,
            eval_score: None,
            time: None,
            time_is_duration: false,
            vram: None,
            total: None,
            notes: Vec::new(),
        }
    }

    /// Puts the trainer's choices on a mapping: the metrics config a reader uses, the
    /// `[metrics]` lines to write (replacing the general mapping's), and the notes.
    pub fn apply(
        &self,
        m: &mut MetricsConfig,
        chosen: &mut Vec<(&'static str, String)>,
        notes: &mut Vec<String>,
    ) {
        let mut set = |key: &'static str, value: Option<String>| {
            chosen.retain(|(k, _)| *k != key);
            if let Some(v) = value {
                chosen.push((key, v));
            }
        };
        m.step = self.step.clone();
        set("step", Some(format!("{:?}", self.step)));
        if let Some(l) = &self.loss {
            m.loss = l.clone();
            set("loss", Some(format!("{l:?}")));
        }
        if let Some(l) = &self.lr {
            m.lr = KeyList(vec![l.clone()]);
            set("lr", Some(format!("{l:?}")));
        }
        if let Some(e) = &self.eval_loss {
            m.eval_loss = e.clone();
            set("eval_loss", Some(format!("{e:?}")));
        }
        if let Some(e) = &self.eval_score {
            m.eval_score = e.clone();
            set("eval_score", Some(format!("{e:?}")));
        }
        // The time: only where the trainer says what its time is.
        if self.time_is_duration || self.time.is_some() {
            m.time = String::new();
            m.clock = Clock::Unix;
            set("time", None);
            set("clock", None);
        }
        if self.time_is_duration {
            set("time", Some("\"\"".into()));
        }
        if let Some((k, clock)) = &self.time {
            m.time = k.clone();
            m.clock = *clock;
            set("time", Some(format!("{k:?}")));
            if *clock == Clock::Elapsed {
                set("clock", Some("\"elapsed\"".into()));
            }
        }
        if let Some((k, unit)) = &self.vram {
            m.vram = k.clone();
            m.vram_unit = *unit;
            set("vram", Some(format!("{k:?}")));
            set("vram_unit", Some(format!("{:?}", format!("{unit:?}"))));
        }
        m.unit = self.unit;
        if self.unit == StepUnit::Epoch {
            set("unit", Some("\"epoch\"".into()));
        }
        if let Some((t, from)) = &self.total {
            m.planned_total = Some(*t);
            // Where it came from, as every inferred number in the file says.
            set("planned_total", Some(format!("{t}  # {from}")));
        }
        // The general mapping's words on what the trainer now decides are no longer true.
        let mut decided = vec!["step"];
        if self.time_is_duration || self.time.is_some() {
            decided.push("time");
        }
        for (key, set) in [
            ("loss", self.loss.is_some()),
            ("lr", self.lr.is_some()),
            ("eval_loss", self.eval_loss.is_some()),
            ("eval_score", self.eval_score.is_some()),
            ("vram", self.vram.is_some()),
            ("total_steps", self.total.is_some()),
        ] {
            if set {
                decided.push(key);
            }
        }
        notes.retain(|n| {
            !decided
                .iter()
                .any(|k| n.starts_with(&format!("{k} <-")) || n.starts_with(&format!("{k}:")))
        });
        notes.push(format!("trainer: {}", self.name));
        notes.extend(self.notes.iter().cloned());
    }
}

/// The first value of `key` in the run's arguments, as a positive whole number.
fn arg_count(args: &[RunArgs], keys: &[&str]) -> Option<(u64, String)> {
    args.iter().find_map(|a| {
        keys.iter().find_map(|k| {
            let v = a.values.get(*k)?;
            let n = v
                .parse::<f64>()
                .ok()
                .filter(|n| *n >= 1.0 && n.fract() == 0.0)?;
            Some((n as u64, format!("{k}: {v} in {}", a.file)))
        })
    })
}

/// The trainer whose files these are, if roger knows it. `keys` are the log's columns or
/// JSON keys; `first_step` is the first sample's step where the caller has read it (YOLO
/// and Keras count epochs from 0 or 1 by version); `args` from [`run_args`].
pub fn recognise(
    format: LogFormat,
    keys: &[String],
    first_step: Option<u64>,
    args: &[RunArgs],
) -> Option<Trainer> {
    let has = |k: &str| keys.iter().any(|x| x == k);
    let pick = |c: &[&str]| c.iter().find(|k| has(k)).map(|k| k.to_string());
    let (csv, jsonl) = (format == LogFormat::Csv, format == LogFormat::Jsonl);
    // A step counter of its own: then a row is no epoch (LLaMA-Factory's JSON lines carry
    // `epoch` and `loss` beside `current_steps`; Lightning's metrics.csv `epoch` beside `step`).
    let own_step = [
        "step",
        "global_step",
        "current_steps",
        "iteration",
        "iter",
        "_step",
    ]
    .iter()
    .any(|k| has(k));
    if csv
        && has("epoch")
        && (has("lr/pg0") || has("x/lr0"))
        && keys.iter().any(|k| k.starts_with("train/"))
    {
        return Some(yolo(keys, first_step, args));
    }
    if format == LogFormat::Tensorboard && has("train/box_loss") {
        return Some(yolo_events(keys, args));
    }
    if jsonl && has("iteration") && has("total_loss") {
        let mut t = Trainer::new("detectron2 metrics.json", StepUnit::Step, "iteration");
        t.loss = Some("total_loss".into());
        t.lr = has("lr").then(|| "lr".into());
        t.notes.push("step <- \"iteration\", loss <- \"total_loss\" (the sum of the loss terms), lr <- \"lr\"".into());
        t.notes.push("time = \"\": detectron2's `time` is the seconds one iteration took, no clock; samples are timed by the file's mtime".into());
        t.time_is_duration = has("time");
        t.total = arg_count(args, &["max_iter", "MAX_ITER"]);
        return Some(t);
    }
    if jsonl && has("iter") && has("step") && has("data_time") && (has("loss") || has("lr")) {
        // MMEngine's LocalVisBackend: train records carry `iter` (and `epoch` when training
        // by epoch); validation records carry only `step`, which is then the epoch number.
        let mut t = Trainer::new(MMENGINE, StepUnit::Step, "iter");
        t.loss = has("loss").then(|| "loss".into());
        t.lr = has("lr").then(|| "lr".into());
        t.notes.push("step <- \"iter\": validation records carry only `step`, the epoch number when training by epoch, which would read as the run going back".into());
        t.notes.push("time = \"\": MMEngine's `time` is the seconds one iteration took, no clock; samples are timed by the file's mtime".into());
        t.time_is_duration = has("time");
        if has("memory") {
            t.vram = Some(("memory".into(), VramUnit::MiB));
            t.notes
                .push("vram <- \"memory\" (MMEngine logs the peak allocated memory in MiB)".into());
        }
        t.total = arg_count(args, &["train_cfg.max_iters", "max_iters"]);
        if t.total.is_none() {
            if let Some((n, from)) = arg_count(args, MMENGINE_EPOCHS) {
                t.notes.push(format!("max_epochs {n} ({from}) counts epochs, not the iterations the log counts: iterations per epoch are read off the log's epoch column"));
            }
        }
        return Some(t);
    }
    if csv && has("epoch") && has("step") {
        // Lightning's CSVLogger: the general mapping reads its columns; its hparams.yaml
        // may say the planned total (max_steps; max_epochs counts epochs, not steps).
        let mut t = Trainer::new(LIGHTNING, StepUnit::Step, "step");
        // Its `step` column is the 0-based index of the optimizer step: the last is one less.
        t.total = arg_count(args, &["max_steps", "trainer.max_steps"]).map(|(n, from)| {
            (
                n - 1,
                format!(
                    "{from}; Lightning logs steps from 0, so the last is {}",
                    n - 1
                ),
            )
        });
        if t.total.is_none() {
            if let Some((n, from)) = arg_count(args, LIGHTNING_EPOCHS) {
                t.notes.push(format!("max_epochs {n} ({from}) counts epochs, not the steps the log counts: steps per epoch are read off the log's epoch column"));
            }
        }
        return (t.total.is_some() || !t.notes.is_empty()).then_some(t);
    }
    if csv && has("epoch") && has("train_loss") && has("eval_loss") && !own_step {
        let mut t = Trainer::new("timm summary.csv", StepUnit::Epoch, "epoch");
        t.loss = Some("train_loss".into());
        t.eval_loss = Some("eval_loss".into());
        t.eval_score = pick(&["eval_top1"]);
        t.lr = has("lr").then(|| "lr".into());
        t.notes
            .push("one row per epoch: the axis counts epochs".into());
        t.total = timm_total(args);
        return Some(t);
    }
    if csv && has("epoch") && !own_step && (has("loss") || has("val_loss")) {
        let mut t = Trainer::new(
            "one row per epoch (Keras CSVLogger's shape)",
            StepUnit::Epoch,
            "epoch",
        );
        t.loss = has("loss").then(|| "loss".into());
        t.eval_loss = has("val_loss").then(|| "val_loss".into());
        t.eval_score = pick(&["val_accuracy", "val_acc"]);
        t.lr = ["lr", "learning_rate"]
            .iter()
            .find(|k| has(k))
            .map(|k| k.to_string());
        t.notes
            .push("one row per epoch (Keras counts from 0): the axis counts epochs".into());
        t.total = zero_based(arg_count(args, &["epochs"]), first_step);
        return Some(t);
    }
    None
}

/// timm's train.py runs `epochs + cooldown_epochs` epochs (the cooldown at `min_lr`) and
/// counts them from 0, a resumed run too: the last is one less.
fn timm_total(args: &[RunArgs]) -> Option<(u64, String)> {
    let (n, from) = arg_count(args, &["epochs"])?;
    let cool = args
        .iter()
        .find_map(|a| a.values.get("cooldown_epochs")?.parse::<u64>().ok())
        .unwrap_or(0);
    let last = (n + cool).checked_sub(1)?;
    Some((
        last,
        if cool > 0 {
            format!("{from} + cooldown_epochs: {cool}; timm counts epochs from 0, so the last is {last}")
        } else {
            format!("{from}; timm counts epochs from 0, so the last is {last}")
        },
    ))
}

/// MMEngine's trainer name.
pub const MMENGINE: &str = "MMEngine vis_data/scalars.json";
/// Lightning CSVLogger's trainer name.
pub const LIGHTNING: &str = "Lightning CSVLogger metrics.csv";
/// Where a Lightning run says its planned epochs: the Trainer's own (LightningCLI's
/// config.yaml) first, then the hyperparameters a module saved.
const LIGHTNING_EPOCHS: &[&str] = &["trainer.max_epochs", "max_epochs", "epochs", "num_epochs"];

/// Where an MMEngine run says its planned epochs (train_cfg of its config dump).
const MMENGINE_EPOCHS: &[&str] = &["train_cfg.max_epochs", "max_epochs"];

/// How a trainer counts the rows that [`planned_from_epochs`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// Lightning: epochs and the global step both from 0.
    FromZero,
    /// MMEngine: `epoch` from 1, `iter` the iterations done (from 1).
    FromOne,
}

/// A run's planned last step from its planned epochs (Lightning's `max_epochs`, MMEngine's
/// `train_cfg.max_epochs`) and the log's `(epoch, step)` rows: every row of 0-based epoch `e`
/// at 0-based step `s` says `e·n <= s < (e+1)·n` for `n` steps per epoch (a row on an epoch's
/// last step pins `n`). The smallest `n` they allow is taken, so a finished run reaches the
/// total; refused (None) while the rows leave `n` open by more than 2% (a log of one epoch,
/// or too sparse), or contradict each other (a launch counting from 0 again). Returns the
/// last step as the log counts it and the words.
pub fn planned_from_epochs(
    rows: &[(u64, u64)],
    args: &[RunArgs],
    counting: Counting,
) -> Option<(u64, String)> {
    let keys = match counting {
        Counting::FromZero => LIGHTNING_EPOCHS,
        Counting::FromOne => MMENGINE_EPOCHS,
    };
    let (epochs, from) = arg_count(args, keys)?;
    let rows: Vec<(u64, u64)> = match counting {
        Counting::FromZero => rows.to_vec(),
        Counting::FromOne => rows
            .iter()
            .filter_map(|&(e, s)| Some((e.checked_sub(1)?, s.checked_sub(1)?)))
            .collect(),
    };
    let lo = rows.iter().map(|&(e, s)| (s + 1).div_ceil(e + 1)).max()?;
    let hi = rows
        .iter()
        .filter(|&&(e, _)| e > 0)
        .map(|&(e, s)| s / e)
        .min()?;
    if hi < lo || (hi - lo) as f64 > 0.02 * lo as f64 {
        return None;
    }
    let (last, how) = match counting {
        Counting::FromZero => (
            (epochs * lo).checked_sub(1)?,
            ", less 1: steps count from 0",
        ),
        Counting::FromOne => (epochs * lo, ""),
    };
    let open = if hi > lo {
        format!(": {lo} to {hi}, the fewest taken")
    } else {
        String::new()
    };
    Some((
        last,
        format!("{from} x {lo} steps per epoch (read off the log's epoch column{open}){how}"),
    ))
}

/// The `(epoch, iter)` of every train record of MMEngine's scalars.json (validation records
/// carry neither).
pub fn jsonl_epoch_rows(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            Some((v.get("epoch")?.as_u64()?, v.get("iter")?.as_u64()?))
        })
        .collect()
}

/// The `(epoch, step)` of every row of a CSV log that has both (Lightning's metrics.csv:
/// the lr rows leave `epoch` empty). Unreadable rows are left out: they only narrow the bracket.
pub fn epoch_rows(text: &str) -> Vec<(u64, u64)> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let (Some(e), Some(s)) = (
        cols.iter().position(|c| *c == "epoch"),
        cols.iter().position(|c| *c == "step"),
    ) else {
        return Vec::new();
    };
    let whole = |v: &str| {
        v.trim()
            .parse::<f64>()
            .ok()
            .filter(|x| *x >= 0.0 && x.fract() == 0.0)
            .map(|x| x as u64)
    };
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((whole(f.get(e)?)?, whole(f.get(s)?)?))
        })
        .collect()
}

/// A planned number of epochs as the last epoch the log will show: `epochs - 1` where the log
/// counts from 0.
fn zero_based(total: Option<(u64, String)>, first_step: Option<u64>) -> Option<(u64, String)> {
    match (total, first_step) {
        (Some((n, from)), Some(0)) if n > 1 => Some((
            n - 1,
            format!(
                "{from}; the log counts epochs from 0, so the last is {}",
                n - 1
            ),
        )),
        (t, _) => t,
    }
}

/// Ultralytics YOLO's results.csv (v5: `x/lr0..2`; v8 and later: `lr/pg0..2`).
/// YOLO's fitness is mostly mAP50-95 (v8 and later, then YOLOv5's spelling): its eval score.
const YOLO_MAP: [&str; 2] = ["metrics/mAP50-95(B)", "metrics/mAP_0.5:0.95"];

fn yolo(keys: &[String], first_step: Option<u64>, args: &[RunArgs]) -> Trainer {
    let has = |k: &str| keys.iter().any(|x| x == k);
    let v5 = has("x/lr0");
    let mut t = Trainer::new(
        if v5 {
            "Ultralytics YOLOv5 results.csv"
        } else {
            "Ultralytics YOLO (v8 and later) results.csv"
        },
        StepUnit::Epoch,
        "epoch",
    );
    let (pg0, pg1) = if v5 {
        ("x/lr0", "x/lr1")
    } else {
        ("lr/pg0", "lr/pg1")
    };
    t.lr = Some(pg1.into());
    t.notes.push(format!(
        "lr <- {pg1:?}: YOLO's parameter groups are {pg0} (biases), pg1 (weights with decay), pg2 (BatchNorm weights); {pg0} warms down from warmup_bias_lr (0.1) while the others warm up, so the schedule (lr0 × lf(epoch)) is read from pg1"
    ));
    t.loss = Some("train/box_loss".into());
    t.eval_loss = has("val/box_loss").then(|| "val/box_loss".into());
    t.eval_score = YOLO_MAP.iter().find(|k| has(k)).map(|k| k.to_string());
    t.notes.push("loss <- \"train/box_loss\": YOLO logs its loss in parts (box, cls, dfl or obj); the box loss is in every version".into());
    if has("time") {
        t.time = Some(("time".into(), Clock::Elapsed));
        t.notes
            .push("time <- \"time\": seconds since the run started".into());
    }
    t.notes
        .push("one row per epoch: the axis counts epochs".into());
    t.total = zero_based(arg_count(args, &["epochs"]), first_step);
    t
}

/// Ultralytics YOLO's TensorBoard events (`runs/detect/train/events.out.tfevents.*` beside
/// args.yaml): the same tags as its results.csv, one point per epoch at the event's step
/// (YOLOv8 and later: epoch + 1; YOLOv5: the epoch from 0, with `x/lr0..2`).
fn yolo_events(keys: &[String], args: &[RunArgs]) -> Trainer {
    let has = |k: &str| keys.iter().any(|x| x == k);
    let v5 = has("x/lr0");
    let mut t = Trainer::new(
        "Ultralytics YOLO TensorBoard events",
        StepUnit::Epoch,
        "step",
    );
    t.lr = ["lr/pg1", "x/lr1"]
        .iter()
        .find(|k| has(k))
        .map(|k| k.to_string());
    if let Some(l) = &t.lr {
        t.notes.push(format!("lr <- {l:?}: YOLO's pg0 is the bias group, which warms down; the schedule is read from pg1"));
    }
    t.loss = Some("train/box_loss".into());
    t.eval_loss = has("val/box_loss").then(|| "val/box_loss".into());
    t.eval_score = YOLO_MAP.iter().find(|k| has(k)).map(|k| k.to_string());
    t.notes.push("loss <- \"train/box_loss\": YOLO logs its loss in parts (box, cls, dfl or obj); the box loss is in every version".into());
    t.notes
        .push("one point per epoch: the axis counts epochs".into());
    t.total = zero_based(arg_count(args, &["epochs"]), Some(u64::from(!v5)));
    t
}

/// A run whose steps are epochs by its own arguments: an MLflow (or HF) run logging one
/// point per epoch, with `epochs`, `num_train_epochs` or `max_epochs` among its parameters
/// and no step beyond it. The planned total and the unit, with where they were read.
pub fn epoch_axis(args: &[RunArgs], first_step: u64, last_step: u64) -> Option<(u64, String)> {
    let (n, from) = arg_count(
        args,
        &["epochs", "num_train_epochs", "max_epochs", "num_epochs"],
    )?;
    if last_step > n {
        return None;
    }
    zero_based(Some((n, from)), Some(first_step))
}

#[cfg(test)]
#[path = "trainers_tests.rs"]
mod tests;
