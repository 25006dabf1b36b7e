//! Benchmark of `roger report` at scale: writes a metrics log of N steps (default 10 million,
//! one line each, with NaNs, a spike and a relaunch that rewinds the step) and a ledger of a
//! night's records, then times the whole report (ledger scan, log stream, model, page) against
//! a baseline measured in the same run: the same log streamed through roger's metrics reader
//! with nothing done with the samples. Prints the log size, both times, their ratio, the
//! reader's MB/s and the page size, and `wc -l` over the same log as a floor for the reader.
//!
//! ```text
//! cargo run --release --example report_bench -- [--steps N] [--every K] [--format jsonl|csv] [--dir DIR] [--page FILE]
//! ```
//!
//! `--page FILE` keeps the page, to compare two builds' pages byte for byte.

use roger::config::Config;
use roger::ledger::{Entry, Kind, Ledger};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

struct Opts {
    steps: u64,
    every: u64,
    format: String,
    dir: Option<PathBuf>,
    page: Option<PathBuf>,
}

fn parse() -> Opts {
    let mut o = Opts {
        steps: 10_000_000,
        every: 1,
        format: "jsonl".into(),
        dir: None,
        page: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--steps" => o.steps = val().parse().expect("--steps N"),
            "--every" => o.every = val().parse().expect("--every K"),
            "--format" => o.format = val(),
            "--dir" => o.dir = Some(val().into()),
            "--page" => o.page = Some(val().into()),
            other => panic!("unknown flag {other}"),
        }
    }
    o
}

const T0: f64 = 1_800_000_000.0;

/// CPU seconds this process has used on all its threads (user + system): beside the wall
/// times, a measure that does not depend on how busy the machine's other tenants are.
fn cpu_secs() -> f64 {
    // SAFETY: rusage is plain integers: all zeroes is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// The log: a steady loss with a spike, a NaN stretch, and a relaunch from 90% of the first
/// stretch back to 85%. Returns (bytes, lines).
fn write_log(path: &Path, o: &Opts) -> (u64, u64) {
    let f = std::fs::File::create(path).expect("log file");
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    let mut lines = 0u64;
    let csv = o.format == "csv";
    if csv {
        writeln!(w, "step,loss,lr,grad_norm,tokens_per_s,time").unwrap();
    }
    let rewind_at = o.steps / 10 * 9;
    let resume = o.steps / 100 * 85;
    let mut t = T0;
    let line = |w: &mut std::io::BufWriter<std::fs::File>, step: u64, t: f64| {
        let loss = if step == o.steps / 3 {
            "40.0".to_string()
        } else if (o.steps / 2..o.steps / 2 + 5).contains(&step) {
            "NaN".to_string()
        } else {
            format!("{:.4}", 2.5 + 6.0 / (1.0 + step as f64 / 50_000.0))
        };
        if csv {
            writeln!(w, "{step},{loss},0.0003,0.9,51000,{t:.3}").unwrap();
        } else {
            writeln!(
                w,
                "{{\"step\": {step}, \"loss\": {loss}, \"lr\": 0.0003, \"grad_norm\": 0.9, \"tokens_per_s\": 51000, \"time\": {t:.3}}}"
            )
            .unwrap();
        }
    };
    let mut step = 0;
    while step < rewind_at {
        step += o.every;
        t += 0.25 * o.every as f64;
        line(&mut w, step, t);
        lines += 1;
    }
    t += 120.0;
    step = resume;
    while step < o.steps {
        step += o.every;
        t += 0.25 * o.every as f64;
        line(&mut w, step, t);
        lines += 1;
    }
    w.flush().unwrap();
    (std::fs::metadata(path).unwrap().len(), lines)
}

/// A night's ledger: a publish every 1% of the run, a critic verdict every 0.5%, and a
/// wedge kill + relaunch at the rewind.
fn write_ledger(path: &Path, o: &Opts) -> u64 {
    // A fresh ledger each run: a second run in the same --dir must not read two nights.
    let _ = std::fs::remove_file(path);
    let l = Ledger::new(path);
    let at = |step: u64| {
        chrono::DateTime::from_timestamp_millis(((T0 + step as f64 * 0.25) * 1000.0) as i64)
            .unwrap()
    };
    let mut n = 0;
    let mut append = |e: Entry, step: u64| {
        l.append(e, at(step)).unwrap();
        n += 1;
    };
    append(
        Entry::new(Kind::Watch, "watch", "bench").field("event", "start"),
        0,
    );
    let pct = (o.steps / 200).max(1);
    let mut step = 0;
    while step < o.steps / 10 * 9 {
        step += pct;
        append(
            Entry::new(Kind::Verdict, "critic", "bench")
                .step(Some(step))
                .field("status", "pass")
                .field(
                    "checks",
                    serde_json::json!([{"check": "loss", "status": "pass", "reason": "inside the band"}]),
                ),
            step,
        );
        if step.is_multiple_of(2 * pct) {
            append(
                Entry::new(Kind::Publish, "publish", "bench")
                    .step(Some(step))
                    .field("path", format!("/ck/ckpt-{step}.pt"))
                    .field("sha256", "ab".repeat(32))
                    .field("size", 1u64 << 30),
                step,
            );
        }
    }
    let kill_at = o.steps / 10 * 9;
    append(
        Entry::new(Kind::Kill, "watch", "bench")
            .step(Some(kill_at))
            .field("reason", "wedge")
            .field("reasons", vec!["no new step for 120s"]),
        kill_at + 400,
    );
    append(
        Entry::new(Kind::Relaunch, "watch", "bench")
            .step(Some(o.steps / 100 * 85))
            .field("attempt", 1)
            .field("ckpt_step", o.steps / 100 * 85),
        kill_at + 420,
    );
    append(
        Entry::new(Kind::Watch, "watch", "bench").field("event", "launched"),
        kill_at + 430,
    );
    n
}

fn main() {
    let o = parse();
    let tmp;
    let dir = match &o.dir {
        Some(d) => {
            std::fs::create_dir_all(d).expect("--dir");
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir().expect("temp dir");
            tmp.path().to_path_buf()
        }
    };
    let log = dir.join(format!("train.{}", o.format));
    let t = Instant::now();
    let (bytes, lines) = write_log(&log, &o);
    let records = write_ledger(&dir.join("roger-ledger.jsonl"), &o);
    eprintln!("wrote the inputs in {:.1}s", t.elapsed().as_secs_f64());
    let toml = format!(
        "[run]\nname = \"bench\"\nlog = \"{}\"\nformat = \"{}\"\n\n[schedule]\nkind = \"constant\"\npeak_lr = 0.0003\ntotal_steps = {}\n\n[[phase]]\nname = \"all\"\nfrom = 0\nloss = [2.0, 10.0]\n",
        log.display(),
        o.format,
        o.steps
    );
    let cfg_path = dir.join("roger.toml");
    std::fs::write(&cfg_path, &toml).unwrap();
    let cfg = Config::load(&cfg_path).expect("config");

    // Warm the page cache so both measurements read from memory.
    let _ = std::fs::read(&log).map(|b| b.len());

    // Floor: `wc -l` over the same log (one core, counting newlines), when it is installed.
    let t = Instant::now();
    let wc = std::process::Command::new("wc")
        .arg("-l")
        .arg(&log)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| t.elapsed().as_secs_f64());

    // Baseline: roger's own reader over the same log, the samples dropped.
    let (t, cpu) = (Instant::now(), cpu_secs());
    let mut tail =
        roger::metrics::tail::Tail::new(&log, cfg.run.format, &cfg.metrics).expect("reader");
    let mut n = 0usize;
    tail.poll_into(&mut |recs| {
        n += recs.len();
        recs.clear();
    })
    .expect("read");
    let baseline = t.elapsed().as_secs_f64();
    let baseline_cpu = cpu_secs() - cpu;

    let now = chrono::DateTime::from_timestamp(T0 as i64 + (o.steps as i64) / 3, 0).unwrap();
    let (t, cpu) = (Instant::now(), cpu_secs());
    let loaded = roger::report::load(
        &cfg,
        &roger::report::Options {
            ledger: Some(dir.join("roger-ledger.jsonl")),
            ..Default::default()
        },
        now,
    )
    .expect("report");
    let page = roger::report::html::page(&loaded.night, Some(&dir));
    let report = t.elapsed().as_secs_f64();
    let report_cpu = cpu_secs() - cpu;
    let again = roger::report::html::page(&loaded.night, Some(&dir));
    assert_eq!(page, again, "the page is not deterministic");
    if let Some(p) = &o.page {
        std::fs::write(p, &page).expect("--page");
    }
    assert_eq!(
        n as u64, loaded.night.samples,
        "the report saw every sample"
    );
    println!(
        "log: {} steps, {lines} lines ({} format), {:.0} MiB; ledger: {records} records",
        o.steps,
        o.format,
        bytes as f64 / (1 << 20) as f64
    );
    if let Some(wc) = wc {
        println!(
            "wc -l over the log: {wc:.2}s; roger's reader = {:.2}x wc -l",
            baseline / wc
        );
    }
    println!(
        "baseline (roger's log reader alone): {baseline:.2}s ({baseline_cpu:.2}s CPU), {:.0} MB/s ({:.0} MB per CPU-second)",
        bytes as f64 / 1e6 / baseline,
        bytes as f64 / 1e6 / baseline_cpu
    );
    println!(
        "roger report (ledger + log + model + page): {report:.2}s ({report_cpu:.2}s CPU) = {:.2}x the baseline",
        report / baseline
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average (1, 5, 15 min): {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "page: {:.0} KiB ({} bytes), {} segments, {} incidents",
        page.len() as f64 / 1024.0,
        page.len(),
        loaded.night.segments.len(),
        loaded.night.incidents.len()
    );
}
