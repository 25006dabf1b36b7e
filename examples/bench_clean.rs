//! Throughput of the `hygiene clean` filter on a generated tqdm-heavy training log, against
//! `cat` (the I/O ceiling) and a `sed` that only strips CSI colour codes (the usual one-liner,
//! which does not collapse `\r` redraws) on the same file in the same run.
//!
//! Run: `cargo run --release --example bench_clean [MiB]` (default 128 MiB, best of 3).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

/// A log shaped like a real one: coloured logging lines, and tqdm bars redrawn with `\r` and
/// ANSI cursor codes many times per line.
fn generate(path: &std::path::Path, bytes: u64) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut written = 0u64;
    let mut step = 0u64;
    while written < bytes {
        let mut chunk = String::new();
        chunk.push_str(&format!(
            "\x1b[32m2026-01-02 03:04:05\x1b[0m \x1b[1mINFO\x1b[0m step {step} loss {:.4} lr 3.0e-4\n",
            4.0 - step as f64 * 1e-5
        ));
        for i in 0..=50 {
            let bar = "#".repeat(i / 5) + &" ".repeat(10 - i / 5);
            chunk.push_str(&format!(
                "\r\x1b[2K{:>3}%|{bar}| {i}/50 [00:{i:02}<00:{:02}, 12.34it/s, loss={:.3}]",
                i * 2,
                50 - i,
                3.9
            ));
        }
        chunk.push('\n');
        w.write_all(chunk.as_bytes())?;
        written += chunk.len() as u64;
        step += 1;
    }
    w.flush()
}

fn best_of(n: usize, mut f: impl FnMut()) -> f64 {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn shell(cmd: &str, path: &std::path::Path) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .arg("sh")
        .arg(path)
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn main() -> std::io::Result<()> {
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(128);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("train.log");
    generate(&path, mib << 20)?;
    let size = std::fs::metadata(&path)?.len();
    let mb = size as f64 / 1e6;
    // Warm the page cache so every contender reads from memory.
    shell("cat \"$1\" > /dev/null", &path);

    let mut stats = None;
    let roger = best_of(3, || {
        let f = std::fs::File::open(&path).expect("open");
        stats = Some(roger::hygiene::clean::clean_stream(f, std::io::sink()).expect("clean"));
    });
    let cat = best_of(3, || {
        assert!(shell("cat \"$1\" > /dev/null", &path));
    });
    let sed = best_of(3, || {
        assert!(shell(
            "LC_ALL=C sed -e 's/\\x1b\\[[0-9;?]*[A-Za-z]//g' \"$1\" > /dev/null",
            &path
        ));
    });
    let s = stats.expect("ran");
    println!(
        "input: {:.1} MB generated tqdm-heavy log; cleaned to {:.1} MB ({} lines, {} escapes, {} redraws collapsed)",
        mb,
        s.bytes_out as f64 / 1e6,
        s.lines,
        s.escapes,
        s.redraws
    );
    println!(
        "{:<34} {:>8.0} MB/s",
        "roger hygiene clean (library)",
        mb / roger
    );
    println!("{:<34} {:>8.0} MB/s", "cat > /dev/null", mb / cat);
    println!(
        "{:<34} {:>8.0} MB/s",
        "sed (CSI only, no \\r collapse)",
        mb / sed
    );
    println!(
        "roger/cat = {:.2}, roger/sed = {:.2}",
        cat / roger,
        sed / roger
    );
    Ok(())
}
