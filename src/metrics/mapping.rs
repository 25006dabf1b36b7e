//! How a training's log maps onto roger's metrics: its format, which key holds which metric,
//! units and clock. `[run] format` and `[metrics]` of roger.toml deserialize into these (the
//! config embeds them); the readers in this module take them and never read the config.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// One JSON object per line.
    Jsonl,
    /// CSV with a header row (Lightning's metrics.csv).
    Csv,
    /// Plain text matched with `[metrics] patterns`.
    Text,
    /// Plain text of `key: value`, `key=value` or `key value` pairs beside a step counter,
    /// read without patterns: `[metrics]` names the keys as the log spells them (any case).
    KeyValue,
    /// Hugging Face Trainer's trainer_state.json (read as a snapshot).
    HfTrainerState,
    /// TensorBoard event files (`events.out.tfevents.*`): one file or a writer's directory.
    Tensorboard,
    /// A run directory of MLflow's file store (`mlruns/<experiment>/<run>/`).
    Mlflow,
    /// A Weights & Biases run's datastore (`wandb/`, a run directory or its `.wandb` file).
    Wandb,
}

/// Which key in the training's log holds which metric.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    pub step: String,
    pub loss: String,
    /// One key, or a list: one per parameter group, each judged (see `[schedule] group_scale`).
    pub lr: KeyList,
    pub grad_norm: String,
    pub tokens_per_s: String,
    /// VRAM as logged by the training (unit in `vram_unit`).
    pub vram: String,
    pub vram_unit: VramUnit,
    pub eval_loss: String,
    /// An eval metric where higher is better (accuracy, top-1, mAP), logged with the eval
    /// loss: while it still improves, a rising eval loss is not called overfitting. Empty:
    /// none.
    pub eval_score: String,
    /// Wall-clock time of the sample (see `clock`); absent → time it was read.
    pub time: String,
    /// How `time` counts: unix (seconds or RFC 3339), elapsed (seconds or H:MM:SS since the
    /// start), elapsed-ms (milliseconds since the start).
    pub clock: Clock,
    /// The run's planned last step, when the trainer logs it (`max_steps` is also read from
    /// trainer_state.json): stands in for `[schedule] total_steps`.
    pub total_steps: String,
    /// Seconds (or `step_time_unit`) one step took: with `tokens_per_step` gives tokens/s.
    pub step_time: String,
    pub step_time_unit: TimeUnit,
    /// Tokens in one optimizer step (batch × sequence length × accumulation): tokens/s is
    /// it over `step_time`, or, without one, steps advanced per second of the log's clock.
    pub tokens_per_step: Option<f64>,
    /// A cumulative token counter (HF `num_input_tokens_seen`): its rate over the sample
    /// times gives tokens/s.
    pub tokens: String,
    /// For `format = "text"`: regexes with named groups (`(?P<step>\d+)`), or unnamed groups
    /// mapped in order by `fields`.
    pub patterns: Vec<TextPattern>,
    /// What the log's step counts: optimizer steps (the default) or epochs (YOLO's
    /// results.csv, Keras's CSVLogger, timm's summary.csv, an MLflow run logging per epoch).
    /// `[schedule]` steps and `total_steps` then count epochs too.
    pub unit: StepUnit,
    /// The run's planned last step (or epoch) from its own arguments (YOLO `epochs`, an MLflow
    /// run's `epochs` param), for a log that does not carry it: a total the log states wins.
    pub planned_total: Option<u64>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            step: "step".into(),
            loss: "loss".into(),
            lr: "lr".into(),
            grad_norm: "grad_norm".into(),
            tokens_per_s: "tokens_per_s".into(),
            vram: "vram_gib".into(),
            vram_unit: VramUnit::GiB,
            eval_loss: "eval_loss".into(),
            eval_score: String::new(),
            time: "time".into(),
            clock: Clock::Unix,
            total_steps: String::new(),
            step_time: String::new(),
            step_time_unit: TimeUnit::S,
            tokens_per_step: None,
            tokens: String::new(),
            patterns: Vec::new(),
            unit: StepUnit::Step,
            planned_total: None,
        }
    }
}

/// What a log's step counts: `[metrics] unit`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum StepUnit {
    /// Optimizer steps (iterations).
    #[default]
    Step,
    /// Passes over the training set.
    Epoch,
}

impl StepUnit {
    /// For `skip_serializing_if`: the default unit is left out of JSON.
    pub fn is_step(&self) -> bool {
        *self == StepUnit::Step
    }

    /// The unit's word: `step` or `epoch`.
    pub fn word(self) -> &'static str {
        match self {
            StepUnit::Step => "step",
            StepUnit::Epoch => "epoch",
        }
    }

    /// Where a run stands on its axis: `step 420`, or `epoch 37/100` (an epoch count says
    /// its planned total, when known, after a slash).
    pub fn at(self, step: u64, total: Option<u64>) -> String {
        match (self, total.filter(|t| *t > 0)) {
            (StepUnit::Epoch, Some(t)) => format!("epoch {step}/{t}"),
            _ => format!("{} {step}", self.word()),
        }
    }
}

/// Unit of a logged duration.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    S,
    Ms,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
pub enum VramUnit {
    #[serde(rename = "bytes")]
    Bytes,
    MiB,
    GiB,
    MB,
    GB,
}

impl VramUnit {
    pub fn to_gib(self, v: f64) -> f64 {
        const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
        match self {
            VramUnit::Bytes => v / GIB,
            VramUnit::MiB => v / 1024.0,
            VramUnit::GiB => v,
            VramUnit::MB => v * 1e6 / GIB,
            VramUnit::GB => v * 1e9 / GIB,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TextPattern {
    pub regex: String,
    /// Names for unnamed capture groups, in order (e.g. `["step", "loss"]`).
    #[serde(default)]
    pub fields: Vec<String>,
}

/// `[metrics] lr`: one key, or one per parameter group (`["lr-AdamW", "lr-Muon"]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct KeyList(pub Vec<String>);

impl KeyList {
    /// The first (or only) key.
    pub fn first(&self) -> &str {
        self.0.first().map_or("", String::as_str)
    }
}

impl From<&str> for KeyList {
    fn from(s: &str) -> KeyList {
        KeyList(vec![s.to_string()])
    }
}

impl<'de> Deserialize<'de> for KeyList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            One(String),
            Many(Vec<String>),
        }
        match Raw::deserialize(d) {
            Ok(Raw::One(s)) => Ok(KeyList(vec![s])),
            Ok(Raw::Many(v)) if !v.is_empty() => Ok(KeyList(v)),
            Ok(Raw::Many(_)) => Err(serde::de::Error::custom(
                "expected at least one key in the list",
            )),
            Err(_) => Err(serde::de::Error::custom(
                "expected a key (\"lr\") or a list of keys, one per parameter group ([\"lr-AdamW\", \"lr-Muon\"])",
            )),
        }
    }
}

/// How `[metrics] time` counts.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Clock {
    /// Unix seconds or RFC 3339.
    #[default]
    Unix,
    /// Seconds since the run started, or `H:MM:SS` (`"0:29:27"`).
    Elapsed,
    /// Milliseconds since the run started (`train_time:123456ms`).
    ElapsedMs,
}
