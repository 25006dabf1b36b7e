//! A simulated training run for `roger watch` (and its tests): writes a JSONL metrics log the
//! critic reads, saves a checkpoint every K steps and publishes it with the real
//! `roger publish` ($ROGER_BIN, else `roger` on PATH), resumes from ROGER_RESUME_CKPT (the step
//! is read from the checkpoint's content), and misbehaves on cue.
//!
//! ```text
//! fake_train --log FILE --ckpt-dir DIR [--staging DIR] [--steps N] [--step-ms MS]
//!            [--save-every K] [--config FILE] [--start-ms MS]
//!   cues (first launch only, i.e. without ROGER_RESUME_CKPT):
//!            --wedge-at S [--wedge-ms MS]   sleep silently (0 = forever)
//!            --grind-at S  --grind-ms MS    busy loop, nothing logged
//!            --pulse-at S  --pulse-ms MS [--pulse-for MS]
//!                                           nothing logged for pulse-for ms (default 8000):
//!                                           busy MS, asleep MS, busy MS, ...
//!            --crash-at S                   exit 3 at step S
//!            --nan-at S                     log a bare NaN loss from step S on
//!            --leave-child FILE             start a child that outlives us; its pid in FILE
//!            --eval-every N                 also log eval_loss every N steps
//!            --vram-gib X                   also log vram_gib, X plus a slow sawtooth
//!            --cues-on-resume               the cues above apply to resumed launches too
//!                                           (a script picks each launch's cue: a scripted night)
//!   always:  --crash-on-resume              exit 4 right away when resuming (a crash loop)
//!            --ignore-term                  ignore SIGTERM
//!            --pid-file FILE                append our pid
//!            --start-ms MS                  sleep before the first step (loading a model)
//!            --term-file FILE               on SIGTERM write the time (unix ms) here, exit 143
//!            --save-ms MS                   each save takes MS (told to publish as ROGER_SAVE_S)
//!            --save-on-usr1                 SIGUSR1 asks for a save now (as does the file
//!                                           named in ROGER_SAVE_NOW appearing, always)
//!            --hang-on-save-now             asked to save now: hang instead (a stuck save)
//!            --no-publish                   never publish (a rank other than 0)
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

static TERM: AtomicBool = AtomicBool::new(false);
static SAVE_NOW: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::Relaxed);
}

/// Only a flag: the save itself happens in the loop, never in the handler.
extern "C" fn on_usr1(_: libc::c_int) {
    SAVE_NOW.store(true, Ordering::Relaxed);
}

#[derive(Default)]
struct Opts {
    log: PathBuf,
    ckpt_dir: PathBuf,
    staging: Option<PathBuf>,
    config: Option<String>,
    steps: u64,
    step_ms: u64,
    start_ms: u64,
    save_every: u64,
    wedge_at: Option<u64>,
    wedge_ms: u64,
    grind_at: Option<u64>,
    grind_ms: u64,
    pulse_at: Option<u64>,
    pulse_ms: u64,
    pulse_for: u64,
    crash_at: Option<u64>,
    nan_at: Option<u64>,
    leave_child: Option<PathBuf>,
    crash_on_resume: bool,
    cues_on_resume: bool,
    eval_every: u64,
    vram_gib: Option<f64>,
    ignore_term: bool,
    pid_file: Option<PathBuf>,
    term_file: Option<PathBuf>,
    save_ms: u64,
    save_on_usr1: bool,
    hang_on_save_now: bool,
    no_publish: bool,
}

fn parse() -> Opts {
    let mut o = Opts {
        steps: 60,
        step_ms: 30,
        save_every: 10,
        pulse_ms: 300,
        pulse_for: 8000,
        ..Opts::default()
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || {
            args.next()
                .unwrap_or_else(|| die(&format!("{a} needs a value")))
        };
        let num = |v: String| {
            v.parse::<u64>()
                .unwrap_or_else(|_| die(&format!("expected a number, got {v}")))
        };
        match a.as_str() {
            "--linger" => linger(),
            "--log" => o.log = val().into(),
            "--ckpt-dir" => o.ckpt_dir = val().into(),
            "--staging" => o.staging = Some(val().into()),
            "--config" => o.config = Some(val()),
            "--steps" => o.steps = num(val()),
            "--step-ms" => o.step_ms = num(val()),
            "--start-ms" => o.start_ms = num(val()),
            "--save-every" => o.save_every = num(val()),
            "--wedge-at" => o.wedge_at = Some(num(val())),
            "--wedge-ms" => o.wedge_ms = num(val()),
            "--grind-at" => o.grind_at = Some(num(val())),
            "--grind-ms" => o.grind_ms = num(val()),
            "--pulse-at" => o.pulse_at = Some(num(val())),
            "--pulse-ms" => o.pulse_ms = num(val()),
            "--pulse-for" => o.pulse_for = num(val()),
            "--crash-at" => o.crash_at = Some(num(val())),
            "--nan-at" => o.nan_at = Some(num(val())),
            "--leave-child" => o.leave_child = Some(val().into()),
            "--crash-on-resume" => o.crash_on_resume = true,
            "--cues-on-resume" => o.cues_on_resume = true,
            "--eval-every" => o.eval_every = num(val()),
            "--vram-gib" => {
                o.vram_gib = Some(
                    val()
                        .parse()
                        .unwrap_or_else(|_| die("--vram-gib needs a number")),
                )
            }
            "--ignore-term" => o.ignore_term = true,
            "--pid-file" => o.pid_file = Some(val().into()),
            "--term-file" => o.term_file = Some(val().into()),
            "--save-ms" => o.save_ms = num(val()),
            "--save-on-usr1" => o.save_on_usr1 = true,
            "--hang-on-save-now" => o.hang_on_save_now = true,
            "--no-publish" => o.no_publish = true,
            other => die(&format!("unknown flag {other}")),
        }
    }
    if o.log.as_os_str().is_empty() || o.ckpt_dir.as_os_str().is_empty() {
        die("--log and --ckpt-dir are required");
    }
    o
}

fn die(msg: &str) -> ! {
    eprintln!("fake_train: {msg}");
    std::process::exit(2)
}

/// The left-behind child: sleeps until killed.
fn linger() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

fn check_term(o: &Opts) {
    if TERM.load(Ordering::Relaxed) {
        if let Some(f) = &o.term_file {
            let _ = std::fs::write(f, now_ms().to_string());
        }
        std::process::exit(143);
    }
}

/// Spin for `ms` (nothing logged), honouring SIGTERM.
fn spin(o: &Opts, ms: u64) {
    let t0 = Instant::now();
    let mut x = 0u64;
    while t0.elapsed() < Duration::from_millis(ms) {
        for i in 0..10_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        check_term(o);
    }
}

/// Sleep in small slices so a SIGTERM is honoured promptly (and still nothing is logged).
fn quiet_sleep(o: &Opts, ms: u64) {
    let t0 = Instant::now();
    while ms == 0 || t0.elapsed() < Duration::from_millis(ms) {
        check_term(o);
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn publish(o: &Opts, step: u64) {
    if o.no_publish {
        return;
    }
    let staging = o
        .staging
        .clone()
        .unwrap_or_else(|| o.ckpt_dir.with_file_name("staging"));
    std::fs::create_dir_all(&staging).unwrap_or_else(|e| die(&format!("staging: {e}")));
    let src = staging.join(format!("ckpt-{step}.json"));
    std::fs::write(
        &src,
        format!("{{\"step\": {step}, \"weights\": [0.1, 0.2]}}\n"),
    )
    .unwrap_or_else(|e| die(&format!("writing {}: {e}", src.display())));
    if o.save_ms > 0 {
        quiet_sleep(o, o.save_ms);
    }
    let bin = std::env::var("ROGER_BIN").unwrap_or_else(|_| "roger".into());
    let mut cmd = Command::new(&bin);
    if o.save_ms > 0 {
        cmd.env("ROGER_SAVE_S", format!("{:.3}", o.save_ms as f64 / 1000.0));
    }
    if let Some(c) = &o.config {
        cmd.args(["--config", c]);
    }
    cmd.arg("publish")
        .arg(&src)
        .arg("--to")
        .arg(&o.ckpt_dir)
        .args(["--step", &step.to_string()])
        .stdout(std::process::Stdio::null());
    match cmd.status() {
        Ok(s) if s.success() => {
            let _ = std::fs::remove_file(&src);
        }
        Ok(s) => die(&format!("{bin} publish failed: {s}")),
        Err(e) => die(&format!("running {bin} publish: {e}")),
    }
}

fn main() {
    let o = parse();
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        if o.ignore_term {
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
        } else {
            libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        }
        if o.save_on_usr1 {
            libc::signal(libc::SIGUSR1, on_usr1 as *const () as libc::sighandler_t);
        }
    }
    let save_now_file = std::env::var_os("ROGER_SAVE_NOW").map(PathBuf::from);
    if let Some(f) = &o.pid_file {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(f)
            .unwrap_or_else(|e| die(&format!("pid file: {e}")));
        // One write per line: `writeln!` on a File makes two (the number, then the newline),
        // and two trainers appending at once then wrote "2968929690\n\n".
        let _ = f.write_all(format!("{}\n", std::process::id()).as_bytes());
    }
    let resume = std::env::var("ROGER_RESUME_CKPT")
        .ok()
        .filter(|s| !s.is_empty());
    let mut step = 0u64;
    if let Some(ckpt) = &resume {
        if o.crash_on_resume {
            eprintln!("fake_train: crashing on resume from {ckpt}");
            std::process::exit(4);
        }
        let text = std::fs::read_to_string(ckpt)
            .unwrap_or_else(|e| die(&format!("reading checkpoint {ckpt}: {e}")));
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| die(&format!("{ckpt}: {e}")));
        step = v["step"]
            .as_u64()
            .unwrap_or_else(|| die("checkpoint has no step"));
        eprintln!("fake_train: resumed from {ckpt} at step {step}");
    }
    let first = resume.is_none() || o.cues_on_resume;
    if let (true, Some(f)) = (resume.is_none(), &o.leave_child) {
        let me = std::env::current_exe().unwrap_or_else(|e| die(&format!("{e}")));
        let child = Command::new(me)
            .arg("--linger")
            .spawn()
            .unwrap_or_else(|e| die(&format!("spawning child: {e}")));
        let _ = std::fs::write(f, child.id().to_string());
        std::mem::forget(child);
    }
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&o.log)
        .unwrap_or_else(|e| die(&format!("log {}: {e}", o.log.display())));
    if o.start_ms > 0 {
        quiet_sleep(&o, o.start_ms);
    }
    while step < o.steps {
        check_term(&o);
        step += 1;
        if first && o.crash_at == Some(step) {
            eprintln!("fake_train: crashing at step {step}");
            std::process::exit(3);
        }
        if first && o.wedge_at == Some(step) {
            quiet_sleep(&o, o.wedge_ms);
        }
        if first && o.grind_at == Some(step) {
            spin(&o, o.grind_ms);
        }
        if first && o.pulse_at == Some(step) {
            // Half busy on average, but idle for whole stretches of pulse_ms.
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(o.pulse_for) {
                spin(&o, o.pulse_ms);
                quiet_sleep(&o, o.pulse_ms);
            }
        }
        let loss = if first && o.nan_at.is_some_and(|n| step >= n) {
            "NaN".to_string()
        } else {
            format!("{:.5}", 2.8 + 8.0 * (-(step as f64) / 400.0).exp())
        };
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let extra = if o.eval_every > 0 && step.is_multiple_of(o.eval_every) {
            let eval = 2.95 + 8.0 * (-(step as f64) / 400.0).exp();
            format!(", \"eval_loss\": {eval:.5}")
        } else {
            String::new()
        };
        let extra = match o.vram_gib {
            Some(v) => format!(
                "{extra}, \"vram_gib\": {:.2}",
                v + (step % 50) as f64 * 0.04
            ),
            None => extra,
        };
        let line = format!(
            "{{\"step\": {step}, \"loss\": {loss}, \"lr\": 0.0006, \"grad_norm\": 0.8, \"tokens_per_s\": 52000.0{extra}, \"time\": {t:.3}}}\n"
        );
        log.write_all(line.as_bytes())
            .and_then(|_| log.flush())
            .unwrap_or_else(|e| die(&format!("writing log: {e}")));
        // Asked to save now (roger's preemption hand-off): by signal flag or by file.
        let asked = SAVE_NOW.swap(false, Ordering::Relaxed)
            || save_now_file.as_ref().is_some_and(|f| f.exists());
        if asked {
            eprintln!("fake_train: asked to save now at step {step}");
            if o.hang_on_save_now {
                quiet_sleep(&o, 0);
            }
            publish(&o, step);
            if let Some(f) = &save_now_file {
                let _ = std::fs::remove_file(f);
            }
        } else if o.save_every > 0 && step.is_multiple_of(o.save_every) {
            publish(&o, step);
        }
        quiet_sleep(&o, o.step_ms.max(1));
    }
    eprintln!("fake_train: finished at step {step}");
}
