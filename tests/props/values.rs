//! Issue 37 point 1, as a property over every reader: no value in a mapped position is dropped.
//! Each generated log puts one value per line (or entry, or event) in the loss position, drawn
//! from finite numbers in many spellings, every spelling of a non-finite value, and
//! numeric-looking junk. Read through `metrics::read_all`, each value comes out as a sample
//! whose loss is what the shared number parser (`metrics::parse_num`) makes of it, NaN and
//! ±inf included, or, when the parser refuses it, as an unreadable line counted and named.

use roger::config::{LogFormat, MetricsConfig, TextPattern};
use roger::metrics::{parse_num, read_all, tb_event, tfrecord};
use std::collections::BTreeMap;
use std::path::Path;

const NON_FINITE: &[&str] = &[
    "nan",
    "NaN",
    "NAN",
    "-nan",
    "+nan",
    "-NaN",
    "inf",
    "-inf",
    "+inf",
    "Inf",
    "-Inf",
    "INF",
    "Infinity",
    "-Infinity",
    "+Infinity",
    "infinity",
];
/// Spellings a number regex of the shapes (`[0-9.eE+-]+`) takes, that are no number.
const JUNK: &[&str] = &[
    "1.2.3", "4e", "1e+", "--1", "+-2", "1.5.", "..5", "-", ".", "e5", "E",
];
/// No number, and not number-shaped either: a pattern that captures up to a separator
/// (`[^,]+`) takes them and must report them.
const WORDS: &[&str] = &["oops", "nanx", "infinite", "n/a", "None", "1#INF"];

/// What kinds of value a reader's syntax can carry in its loss position.
#[derive(Clone, Copy)]
enum Kind {
    /// Any token that has no separator in it.
    Token,
    /// A token inside the reader's own number syntax (`[0-9.eE+-]+` or a non-finite word).
    NumberShaped,
    /// JSON: a finite number or Python's `NaN`/`Infinity`/`-Infinity` bare, anything else quoted.
    Json,
}

fn finite(rng: &mut fastrand::Rng) -> String {
    let x = (rng.f64() - 0.3) * 10f64.powi(rng.i32(-9..12));
    match rng.u8(..5) {
        0 => format!("{x}"),
        1 => format!("{x:e}"),
        2 => format!("{x:.4}"),
        3 => format!("{:E}", x as f32),
        _ => rng.u32(..100_000).to_string(),
    }
}

/// One value as the file holds it, and the text the parser is given for it.
fn value(rng: &mut fastrand::Rng, kind: Kind) -> String {
    let pick = |rng: &mut fastrand::Rng, from: &[&str]| from[rng.usize(..from.len())].to_string();
    let raw = match rng.u8(..4) {
        0 | 1 => finite(rng),
        2 => pick(rng, NON_FINITE),
        _ if matches!(kind, Kind::NumberShaped) || rng.bool() => pick(rng, JUNK),
        _ => pick(rng, WORDS),
    };
    match kind {
        Kind::Json => {
            let bare = raw.parse::<f64>().is_ok_and(f64::is_finite) && !raw.starts_with('+')
                || ["NaN", "Infinity", "-Infinity"].contains(&raw.as_str());
            if bare && (!raw.contains('.') || !raw.ends_with('.')) && !raw.starts_with('.') {
                raw
            } else {
                format!("\"{raw}\"")
            }
        }
        Kind::Token if rng.u8(..4) == 0 => format!("\"{raw}\""),
        _ => raw,
    }
}

/// `values[i]` at step i + 1, written in `format` under `dir`; the path to read.
fn write(dir: &Path, format: LogFormat, values: &[String], pattern: usize) -> std::path::PathBuf {
    let lines = |f: &dyn Fn(usize, &str) -> String| -> String {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| f(i + 1, v))
            .collect()
    };
    match format {
        LogFormat::Text => {
            let p = dir.join("train.log");
            let text = lines(&|s, v| match pattern {
                0 => format!("iter {s}: loss {v}, time 12.5ms, mfu 15.34%\n"),
                _ => format!("step {s} | loss {v}, lr 1e-4\n"),
            });
            std::fs::write(&p, text).unwrap();
            p
        }
        LogFormat::Csv => {
            let p = dir.join("metrics.csv");
            let text = lines(&|s, v| format!("{s},{v},1e-4\n"));
            std::fs::write(&p, format!("step,loss,lr\n{text}")).unwrap();
            p
        }
        LogFormat::Jsonl => {
            let p = dir.join("train.jsonl");
            let text = lines(&|s, v| format!("{{\"step\": {s}, \"loss\": {v}, \"lr\": 0.0001}}\n"));
            std::fs::write(&p, text).unwrap();
            p
        }
        LogFormat::HfTrainerState => {
            let p = dir.join("trainer_state.json");
            let entries: Vec<String> = values
                .iter()
                .enumerate()
                .map(|(i, v)| format!("    {{\"step\": {}, \"loss\": {v}, \"epoch\": 0.1}}", i + 1))
                .collect();
            let doc = format!(
                "{{\n  \"global_step\": {},\n  \"log_history\": [\n{}\n  ]\n}}\n",
                values.len(),
                entries.join(",\n")
            );
            std::fs::write(&p, doc).unwrap();
            p
        }
        LogFormat::Mlflow => {
            std::fs::create_dir_all(dir.join("metrics")).unwrap();
            let text = lines(&|s, v| format!("{} {v} {s}\n", 1_700_000_000_000u64 + s as u64));
            std::fs::write(dir.join("metrics/loss"), text).unwrap();
            dir.to_path_buf()
        }
        LogFormat::Tensorboard => {
            let mut bytes = Vec::new();
            for (i, v) in values.iter().enumerate() {
                let x: f32 = parse_num(v.as_bytes()).unwrap_or(0.5) as f32;
                let ev = tb_event::encode_scalars(1.7e9 + i as f64, i as i64 + 1, &[("loss", x)]);
                tfrecord::frame(&ev, &mut bytes);
            }
            let p = dir.join("events.out.tfevents.1700000000.host.1.0");
            std::fs::write(&p, bytes).unwrap();
            p
        }
        LogFormat::KeyValue => {
            // detectron2's `d2.utils.events` shape: pairs beside an `iter:` counter.
            let p = dir.join("log.txt");
            let text =
                lines(&|s, v| format!("eta: 0:01:02  iter: {s}  total_loss: {v}  lr: 0.0001\n"));
            std::fs::write(&p, text).unwrap();
            p
        }
        LogFormat::Wandb => unreachable!("W&B datastores are covered by metrics::wandb's tests"),
    }
}

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// One reader, `cases` generated logs of up to 40 values each.
fn every_value_is_a_sample_or_counted(
    format: LogFormat,
    kind: Kind,
    m: &MetricsConfig,
    pattern: usize,
) {
    let mut rng = fastrand::Rng::with_seed(0x37_0001 + pattern as u64);
    for case in 0..60 {
        let n = rng.usize(1..40);
        let values: Vec<String> = (0..n).map(|_| value(&mut rng, kind)).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), format, &values, pattern);
        let read = read_all(&path, format, m).unwrap_or_else(|e| panic!("{format:?}: {e:#}"));
        let got: BTreeMap<u64, f64> = read
            .samples
            .iter()
            .filter_map(|s| Some((s.step, s.get("loss")?)))
            .collect();
        let mut refused = 0;
        for (i, v) in values.iter().enumerate() {
            let step = i as u64 + 1;
            let want = match format {
                // float32 on disk: the value as the writer stored it.
                LogFormat::Tensorboard => parse_num(v.as_bytes()).map(|x| f64::from(x as f32)),
                _ => parse_num(v.as_bytes()),
            };
            let want = want.or(if matches!(format, LogFormat::Tensorboard) {
                Some(0.5)
            } else {
                None
            });
            match (want, got.get(&step)) {
                (Some(w), Some(g)) => assert!(
                    same(w, *g),
                    "{format:?} case {case}: {v:?} at step {step} read as {g}, the parser says {w}"
                ),
                (Some(w), None) => panic!(
                    "{format:?} case {case}: {v:?} at step {step} (the parser says {w}) was dropped\nvalues {values:?}"
                ),
                (None, Some(g)) => panic!(
                    "{format:?} case {case}: {v:?} at step {step} is no number to the parser, read as {g}"
                ),
                (None, None) => refused += 1,
            }
        }
        assert_eq!(
            read.garbage_total, refused,
            "{format:?} case {case}: {refused} values refused, {} lines counted: {:?}\nvalues {values:?}",
            read.garbage_total, read.garbage
        );
        for g in &read.garbage {
            // MLflow names the key by its file (`metrics/loss`), the others in the reason.
            assert!(
                g.to_string().contains("loss") && g.line > 0,
                "{format:?}: an unread value is named with its key and line: {g}"
            );
        }
    }
}

fn patterns(regex: &str) -> MetricsConfig {
    MetricsConfig {
        patterns: vec![TextPattern {
            regex: regex.into(),
            fields: vec![],
        }],
        ..MetricsConfig::default()
    }
}

#[test]
fn text_shape_with_a_number_regex() {
    // nanoGPT's built-in shape: a number class, which the reader widens for non-finite values.
    let m = patterns(r"iter (?P<step>\d+): loss (?P<loss>[0-9.eE+-]+)");
    every_value_is_a_sample_or_counted(LogFormat::Text, Kind::NumberShaped, &m, 0);
}

#[test]
fn text_pattern_up_to_a_separator() {
    let m = patterns(r"step (?P<step>\d+) \| loss (?P<loss>[^,]+),");
    every_value_is_a_sample_or_counted(LogFormat::Text, Kind::Token, &m, 1);
}

#[test]
fn csv_cells() {
    every_value_is_a_sample_or_counted(LogFormat::Csv, Kind::Token, &MetricsConfig::default(), 2);
}

#[test]
fn jsonl_values() {
    every_value_is_a_sample_or_counted(LogFormat::Jsonl, Kind::Json, &MetricsConfig::default(), 3);
}

#[test]
fn hf_trainer_state_entries() {
    let m = MetricsConfig::default();
    every_value_is_a_sample_or_counted(LogFormat::HfTrainerState, Kind::Json, &m, 4);
}

#[test]
fn mlflow_points() {
    every_value_is_a_sample_or_counted(
        LogFormat::Mlflow,
        Kind::NumberShaped,
        &MetricsConfig::default(),
        5,
    );
}

#[test]
fn tensorboard_scalars() {
    let m = MetricsConfig::default();
    every_value_is_a_sample_or_counted(LogFormat::Tensorboard, Kind::NumberShaped, &m, 6);
}

#[test]
fn key_value_pairs() {
    let m = MetricsConfig {
        step: "iter".into(),
        loss: "total_loss".into(),
        lr: "lr".into(),
        ..MetricsConfig::default()
    };
    every_value_is_a_sample_or_counted(LogFormat::KeyValue, Kind::Token, &m, 7);
}
