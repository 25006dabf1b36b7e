//! Every reader of input roger did not write, one entry point each: the bytes go through the
//! parser, then through what roger does next with what it read (the critic's judgement, the
//! report, retention, the VRAM gate, ...). An error is an answer; a panic anywhere is a bug.
//! It stays in the library, hidden from the docs and named by no module, for the reasons
//! ARCHITECTURE.md gives ("Why `src/untrusted.rs` is in the library").
//!
//! Only the fuzz targets (`fuzz/`) and the bounded property tests (`tests/props`) call these:
//! one narrow public door, so the parsers behind it stay crate-private. Scratch-file entry
//! points take a directory the caller owns and reuses. Each returns how much it read (records,
//! entries; whether a whole document parsed), so a caller can check that its valid seeds get
//! past the parser.

use crate::checkpoints::{self, Checkpoint};
use crate::config::{Config, LogFormat, MetricsConfig, PublishConfig, TextPattern};
use crate::critic::observe::{observe, History};
use crate::gpu::{smi, xid, GpuSnapshot};
use crate::ledger::{scan_bytes, Entry, Kind, Ledger, Record as LedgerRecord};
use crate::metrics::lines::{feed, one_line};
use crate::metrics::tail::Tail;
use crate::metrics::{csv::CsvParser, jsonl::JsonlParser, text::TextParser};
use crate::metrics::{hf_state, num, tb_event, tfrecord, Batch, LineParser, Record};
use crate::sys::{cgroup, fskind, host, pidinfo, proc, wsl};
use chrono::{DateTime, TimeZone, Utc};
use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;

/// The shipped example config: every check on, so parsed samples reach every critic check.
fn example_config() -> &'static Config {
    static CFG: OnceLock<Config> = OnceLock::new();
    CFG.get_or_init(|| {
        Config::parse(
            include_str!("../roger.example.toml"),
            Path::new("/untrusted/roger.toml"),
        )
        .expect("the example config parses")
    })
}

/// What the watch and the critic do with parsed samples: keep a history and judge it.
fn judge_all(records: &[Record]) -> usize {
    let cfg = example_config();
    let mut h = History::new(cfg);
    for r in records {
        h.push(*r);
    }
    let now = records.iter().filter_map(|r| r.time).fold(0.0, f64::max);
    let obs = observe(&h, cfg, now + 1.0, None);
    let v = crate::critic::judge(&obs);
    let _ = serde_json::to_string(&v);
    records.len()
}

/// A whole buffer through a line parser as the readers do: complete lines, then the
/// unterminated rest as a final line.
fn lines(parser: &mut dyn LineParser, data: &[u8]) -> Batch {
    let path = Path::new("/untrusted/train.log");
    let mut out = Batch::default();
    let mut line_no = 0;
    let used = feed(parser, data, &mut line_no, path, &mut out);
    if used < data.len() {
        one_line(parser, &data[used..], line_no + 1, path, &mut out);
    }
    out
}

/// `roger.toml`: TOML, validation, then what the commands do first with a loaded config.
pub fn config(b: &[u8]) -> bool {
    let text = String::from_utf8_lossy(b);
    let Ok(cfg) = Config::parse(&text, Path::new("/untrusted/roger.toml")) else {
        return false;
    };
    cfg.ledger_path();
    let _ = cfg.checkpoint_dir();
    cfg.quarantine_dir();
    for s in [0, 99, 100, u64::MAX] {
        cfg.phase_for(s);
    }
    let _ = crate::metrics::line_parser(cfg.run.format, &cfg.metrics);
    true
}

/// A JSON-lines log, with flat and with nested (`train/loss`, `train.lr`) key mappings.
pub fn jsonl(b: &[u8]) -> usize {
    let out = lines(&mut JsonlParser::new(&MetricsConfig::default()), b);
    let n = judge_all(&out.records);
    let nested = MetricsConfig {
        loss: "train/loss".into(),
        lr: "train.lr".into(),
        ..MetricsConfig::default()
    };
    lines(&mut JsonlParser::new(&nested), b);
    n
}

/// A CSV log (PyTorch Lightning's CSVLogger mapping, and the default one).
pub fn csv(b: &[u8]) -> usize {
    let lightning = MetricsConfig {
        loss: "train_loss".into(),
        lr: "lr-AdamW".into(),
        eval_loss: "val_loss".into(),
        ..MetricsConfig::default()
    };
    let out = lines(&mut CsvParser::new(&lightning), b);
    let n = judge_all(&out.records);
    lines(&mut CsvParser::new(&MetricsConfig::default()), b);
    n
}

/// A plain-text log read by `[metrics] patterns`: positional, named and optional captures.
pub fn text(b: &[u8]) -> usize {
    static PARSER: OnceLock<TextParser> = OnceLock::new();
    let parser = PARSER.get_or_init(|| {
        let nanogpt = MetricsConfig {
            patterns: vec![
                TextPattern {
                    regex: r"iter (\d+): loss ([^,]+),".into(),
                    fields: vec!["step".into(), "loss".into()],
                },
                TextPattern {
                    regex: r"step (?P<step>\S+) .*?lr (?P<lr>\S+)(?: time (?P<time>\S+))?".into(),
                    fields: vec![],
                },
                TextPattern {
                    regex: r"\{'loss': (?P<loss>[^,]+), .*'epoch': (?P<step>[^}]+)\}".into(),
                    fields: vec![],
                },
            ],
            ..MetricsConfig::default()
        };
        TextParser::new(&nanogpt).expect("patterns compile")
    });
    let out = lines(&mut parser.clone(), b);
    judge_all(&out.records)
}

/// A Hugging Face `trainer_state.json`.
pub fn hf_trainer_state(b: &[u8]) -> usize {
    let p = Path::new("/untrusted/trainer_state.json");
    let out = hf_state::parse(b, p, &MetricsConfig::default());
    let n = judge_all(&out.records);
    let mapped = MetricsConfig {
        lr: "learning_rate".into(),
        ..MetricsConfig::default()
    };
    hf_state::parse(b, p, &mapped);
    n
}

/// The number and time readers under every log format.
pub fn numbers_and_times(b: &[u8]) {
    num::parse_num(b);
    num::decimal_prefix(b);
    num::parse_time(b);
    num::clean_line(b);
}

/// Byte 1 separates the steps of a [`log_tail`] script.
pub const TAIL_STEP: u8 = 1;

/// The incremental reader over a JSON-lines file that grows, is truncated, replaced and
/// rotated between polls. `script`: steps separated by [`TAIL_STEP`]; a step's first byte
/// picks append / truncate-and-write / rotate / half a write, the rest is what is written.
pub fn log_tail(scratch: &Path, script: &[u8]) -> usize {
    let path = scratch.join("train.jsonl");
    let _ = std::fs::remove_file(&path);
    let mut tail =
        Tail::new(&path, LogFormat::Jsonl, &MetricsConfig::default()).expect("tail of a new file");
    let append = |data: &[u8]| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(data))
            .expect("append to the scratch log");
    };
    let mut n = 0;
    for step in script.split(|&b| b == TAIL_STEP).filter(|s| !s.is_empty()) {
        let (op, data) = (step[0], &step[1..]);
        match op % 4 {
            0 => append(data),
            1 => std::fs::write(&path, data).expect("write the scratch log"),
            2 => {
                let _ = std::fs::rename(&path, path.with_extension("1"));
                std::fs::write(&path, data).expect("write the scratch log");
            }
            _ => append(&data[..data.len() / 2]),
        }
        // An error (a vanished file) is an answer; only a panic is a bug.
        if let Ok(poll) = tail.poll() {
            n += judge_all(&poll.batch.records);
        }
    }
    n
}

fn event_metrics() -> MetricsConfig {
    MetricsConfig {
        loss: "train/loss".into(),
        lr: "lr-AdamW".into(),
        grad_norm: "train/grad_norm".into(),
        ..Default::default()
    }
}

/// A TensorBoard event file: the framing and protobuf layers on the bytes as they are, then the
/// real tail over a file (whole, grown by its own bytes as a torn record completed by the next
/// write, then truncated) and the critic on what it read.
pub fn tensorboard(scratch: &Path, b: &[u8]) -> usize {
    let (items, used) = tfrecord::scan(b);
    assert!(
        used <= b.len(),
        "tfrecord::scan used {used} of {} bytes",
        b.len()
    );
    for item in items {
        if let tfrecord::Item::Record(_, payload) = item {
            if let Ok(ev) = tb_event::decode(payload) {
                tb_event::scalars(&ev).for_each(drop);
            }
        }
    }
    let file = scratch.join("events.out.tfevents.1.untrusted");
    std::fs::write(&file, b).expect("write the scratch event file");
    let mut tail = Tail::new(&file, LogFormat::Tensorboard, &event_metrics()).expect("tail");
    let mut records = Vec::new();
    if let Ok(p) = tail.poll() {
        records.extend(p.batch.records);
    }
    std::fs::write(&file, [b, b].concat()).expect("write the scratch event file");
    if let Ok(p) = tail.poll() {
        records.extend(p.batch.records);
    }
    std::fs::write(&file, &b[..b.len() / 2]).expect("write the scratch event file");
    let _ = tail.poll();
    judge_all(&records)
}

/// MLflow metric files (`timestamp value step` lines) in a run directory, read by the real
/// tail: half a line, the rest of it, then a file rewritten shorter.
pub fn mlflow(scratch: &Path, b: &[u8]) -> usize {
    let metrics = scratch.join("metrics");
    std::fs::create_dir_all(metrics.join("train")).expect("mkdir the scratch run");
    let (loss, lr) = (metrics.join("train/loss"), metrics.join("lr-AdamW"));
    let half = b.len() / 2;
    std::fs::write(&loss, &b[..half]).expect("write");
    std::fs::write(&lr, b).expect("write");
    let mut tail = Tail::new(scratch, LogFormat::Mlflow, &event_metrics()).expect("tail");
    let mut records = Vec::new();
    if let Ok(p) = tail.poll() {
        records.extend(p.batch.records);
    }
    std::fs::write(&loss, b).expect("write");
    if let Ok(p) = tail.poll() {
        records.extend(p.batch.records);
    }
    std::fs::write(&lr, &b[..half]).expect("write");
    let _ = tail.poll();
    judge_all(&records)
}

/// Everything that decides from ledger records, fed whatever the scan let through.
fn read_records(records: &[LedgerRecord]) {
    for run in ["r", "llama-7b"] {
        let cfg = Config::parse(
            &format!("[run]\nname = \"{run}\"\n[schedule]\nkind = \"cosine\"\npeak_lr = 0.001\ntotal_steps = 1000\n"),
            Path::new("/untrusted/roger.toml"),
        )
        .expect("a valid config");
        // The report's model and its printers.
        let inputs = crate::report::Inputs {
            config: &cfg,
            records,
            ledger_problem: None,
            disk: None,
            verify: None,
            since: None,
            now: DateTime::from_timestamp(1_700_000_500, 0).unwrap_or_default(),
        };
        let night = crate::report::Night::gather(&inputs, &[]);
        crate::report::html::page(&night, Some(Path::new("/untrusted")));
        crate::report::text::digest(&night, false);
        checkpoints::published(records, run);
        checkpoints::quarantined(records);
        let mut ok = |_: &Checkpoint| Ok(());
        checkpoints::last_good(records, run, None, &mut ok);
        checkpoints::last_good(records, run, Some(150), &mut ok);
        let policy = PublishConfig {
            keep_last: 1,
            keep_every: 100,
            ..Default::default()
        };
        let guard = crate::publish::retention::Guard {
            latest: None,
            rollback_margin: 10,
            bucket: None,
            complete: None,
        };
        crate::publish::retention::plan(records, run, Path::new("/ck"), &policy, &guard, &mut ok);
        crate::sentinel::calibrate::prior_gap(records, run);
        for r in records {
            crate::watch::resume::rollback_trigger(r, run, &["fail".to_string()]);
        }
    }
    let verdicts: Vec<&LedgerRecord> = records.iter().filter(|r| r.kind == Kind::Verdict).collect();
    crate::hygiene::flap::flap_states(&verdicts, &Default::default());
    crate::critic::replay::replay(records);
    for r in records {
        crate::report::sentence::line(r);
        serde_json::to_string(r).expect("a record serialises");
    }
}

/// A ledger file's bytes: the chain scan, then every reader of its records.
pub fn ledger(b: &[u8]) -> usize {
    let scan = scan_bytes(b);
    scan.first_break();
    serde_json::to_string(&scan.problems).expect("problems serialise");
    read_records(&scan.records);
    scan.records.len()
}

/// An append onto whatever the ledger file holds (the foreign-file refusal, the tail read that
/// finds the record to chain to), then every reader of the result.
pub fn ledger_append(scratch: &Path, b: &[u8]) -> bool {
    let path = scratch.join("roger-ledger.jsonl");
    std::fs::write(&path, b).expect("write the scratch ledger");
    let l = Ledger::new(&path);
    let now = Utc.timestamp_opt(1_800_000_000, 0).unwrap();
    // Refusing (a foreign file, seq exhausted) is an answer; only a panic is a bug.
    if l.append(Entry::new(Kind::Note, "untrusted", "r"), now)
        .is_err()
    {
        return false;
    }
    read_records(&l.records().expect("read back what was just appended"));
    true
}

/// A publish destination's `latest.json`, through the manifest reader, then what publish and
/// retention do with it.
pub fn latest_json(scratch: &Path, b: &[u8]) -> bool {
    use crate::publish::manifest;
    std::fs::write(scratch.join(crate::publish::names::MANIFEST_FILE), b)
        .expect("write the scratch manifest");
    let Ok(Some(l)) = manifest::read(scratch) else {
        return false;
    };
    l.target(Path::new("/ck"));
    serde_json::to_string(&l).expect("a manifest serialises");
    let guard = crate::publish::retention::Guard {
        latest: Some(l.target(scratch)),
        rollback_margin: 10,
        bucket: Some("s3://ckpts/r/".into()),
        complete: None,
    };
    let mut ok = |_: &Checkpoint| Ok(());
    crate::publish::retention::plan(&[], "r", scratch, &Default::default(), &guard, &mut ok);
    true
}

/// A publish queue entry (`DEST/.roger-queue/<id>.json`) read by the queue scan (the same bytes
/// as two entries, so sums over the queue see more than one), then what `publish --detach`,
/// the publisher, `status` and the report do with the queue.
pub fn queue_entry(scratch: &Path, b: &[u8]) -> usize {
    use crate::publish::queue;
    let dir = queue::dir(scratch);
    std::fs::create_dir_all(&dir).expect("mkdir the scratch queue");
    for id in ["00000000000000000001", "00000000000000000002"] {
        std::fs::write(dir.join(format!("{id}.json")), b).expect("write a scratch entry");
    }
    let Ok((entries, _unreadable)) = queue::scan(scratch) else {
        return 0;
    };
    queue::queued_bytes(&entries);
    queue::next_id(&entries, 1_700_000_000_000_000_000);
    let now = DateTime::from_timestamp(1_700_000_500, 0).unwrap_or_default();
    if let Some(q) = crate::report::QueuedPublishes::of(&entries, scratch, now) {
        q.words();
    }
    // Its `publish_queued` record, appended and read back as the ledger's readers see it.
    let ledger = Ledger::new(scratch.join("roger-ledger.jsonl"));
    let _ = std::fs::remove_file(ledger.path());
    for q in &entries {
        let at = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let _ = ledger.append(queue::queued_entry(q), at);
        if let Some(t) = &q.request.queue {
            t.expected(&q.source);
        }
    }
    for r in ledger.records().unwrap_or_default() {
        crate::report::sentence::line(&r);
    }
    entries.len()
}

/// `/proc/self/mountinfo`: the mount table, the filesystem kind of a path, WSL's host drive.
pub fn mountinfo(b: &[u8]) {
    let mounts = fskind::parse_mountinfo(&String::from_utf8_lossy(b));
    for m in &mounts {
        fskind::classify(m).caution();
    }
    for p in ["/", "/mnt/c/ck", "/home/u/run", "relative", ""] {
        fskind::kind_in(&mounts, Path::new(p));
    }
    wsl::host_drive(None, &mounts);
    wsl::host_drive(Some(Path::new("/mnt/c")), &mounts);
}

/// `/proc/PID/stat` through both readers (the watch's tree sampler and `pidinfo`).
pub fn proc_stat(b: &[u8]) {
    let text = String::from_utf8_lossy(b);
    for ticks in [100.0, 0.0, 1e-300] {
        proc::parse_stat(&text, ticks);
    }
    pidinfo::parse_stat(&text);
}

/// `/proc/PID/io`, `/proc/meminfo`, `/proc/PID/cmdline` and `/proc/version`.
pub fn proc_io_meminfo_cmdline_version(b: &[u8]) {
    let text = String::from_utf8_lossy(b);
    proc::parse_io(&text);
    if let Ok(m) = host::parse_meminfo(&text) {
        m.available_share();
        m.swap_used();
        host::pressure(&m);
    }
    pidinfo::parse_cmdline(b);
    wsl::detect_from(&text, None, false);
    wsl::detect_from(&text, Some(&text), true);
}

/// The run's cgroup files: `/proc/PID/cgroup`, `cpu.stat`, `io.stat` (one input to all three).
pub fn cgroup_files(b: &[u8]) {
    let text = String::from_utf8_lossy(b);
    cgroup::parse_proc_cgroup(&text);
    cgroup::parse_cpu_stat(&text);
    cgroup::parse_io_stat(&text);
}

/// What the watch and the critic do with a GPU snapshot, whatever its numbers.
fn use_snapshot(snap: &GpuSnapshot) {
    for g in &snap.gpus {
        crate::gpu::checks::judge_gpu(g);
    }
    let pids: Vec<u32> = snap.processes.iter().map(|p| p.pid).collect();
    let gpus: Vec<u32> = snap.gpus.iter().map(|g| g.index).collect();
    snap.memory_of(&pids);
    crate::watch::policy::vram_gate(snap, &pids[..pids.len() / 2], &gpus);
    for p in [&pids[..], &[]] {
        let mut reader = crate::gpu::FakeGpu::new(vec![Ok(snap.clone())]);
        crate::critic::observe::read_vram(&mut reader, p);
    }
}

/// `nvidia-smi --query-gpu` and `--query-compute-apps` CSV: one input holds both, split at the
/// first blank line.
pub fn nvidia_smi(b: &[u8]) {
    let text = String::from_utf8_lossy(b);
    let (gpus_text, apps_text) = text.split_once("\n\n").unwrap_or((&text, ""));
    let gpus = smi::parse_gpus(gpus_text).unwrap_or_default();
    let processes = smi::parse_apps(apps_text, &gpus).unwrap_or_default();
    use_snapshot(&GpuSnapshot {
        gpus,
        processes,
        source: "smi".into(),
        ..Default::default()
    });
}

/// The kernel log's NVIDIA Xid lines.
pub fn kernel_log_xids(b: &[u8]) {
    let xids = xid::parse_kernel_log(&String::from_utf8_lossy(b));
    xid::findings(&xids);
}

/// A `--gpu-replay` recording (written by `probe --record`, or by hand).
pub fn gpu_replay(b: &[u8]) -> usize {
    let text = String::from_utf8_lossy(b);
    let Ok(r) = serde_json::from_str::<crate::gpu::replay::Recording>(&text) else {
        return 0;
    };
    for s in &r.snapshots {
        use_snapshot(s);
    }
    r.snapshots.len()
}
