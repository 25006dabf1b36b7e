//! Bounded property tests over every parser of input roger did not write: a fixed seed, a
//! modest count per parser, structure-aware mutation of real samples, each input through
//! `roger::untrusted` (the parser and what roger does next with its output). Zero panics is
//! the property. Hours of coverage-guided fuzzing of the same entry points: `fuzz/` (fuzz/README.md).
//!
//! A panic fails the test with the input shrunk and printed as a byte-string literal, the
//! seed and the iteration, so it can be pasted into a named regression test. (Seeds from /proc
//! differ between machines; the printed input is what reproduces.)
//!
//! A longer run, with the overflow checks that find integer overflows kept in an optimised
//! build, one target or all (`ROGER_FUZZ_ITERS` replaces every target's count;
//! `ROGER_FUZZ_SEED=N` another stream):
//! `CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
//!  ROGER_FUZZ_ITERS=1000000 cargo test --release --test integration props::logs::jsonl -- --nocapture`

mod gen;
mod ledger;
mod logs;
mod system;
mod values;

pub use gen::{Gen, MAX_LEN, NUMBERS, WEIRD};

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

/// The default stream; a failure report names the seed that produced it.
const SEED: u64 = 0x5EED_0F20_2610;

thread_local! {
    /// Set while a property runs on this thread: its panics are caught and reported by the
    /// harness, not printed by the default hook (other tests' panics still are).
    static QUIET: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let quiet = QUIET.with(|q| {
                let mut q = q.borrow_mut();
                match q.as_mut() {
                    Some(last) => {
                        *last = info.to_string();
                        true
                    }
                    None => false,
                }
            });
            if !quiet {
                prev(info);
            }
        }));
    });
}

/// How many inputs a target tries: its bounded default, or `ROGER_FUZZ_ITERS` for a long run.
pub fn iters(default: u64) -> u64 {
    std::env::var("ROGER_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn base_seed() -> u64 {
    std::env::var("ROGER_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED)
}

/// The panic message (with its location) if `check(input)` panics.
fn panics(check: &dyn Fn(&[u8]), input: &[u8]) -> Option<String> {
    QUIET.with(|q| *q.borrow_mut() = Some(String::new()));
    let r = catch_unwind(AssertUnwindSafe(|| check(input)));
    let msg = QUIET.with(|q| q.borrow_mut().take()).unwrap_or_default();
    r.err().map(|_| msg)
}

/// Shrink a panicking input by removing chunks while it still panics at the same place
/// (bounded, so a report comes back quickly).
fn minimise(check: &dyn Fn(&[u8]), input: &[u8], msg: &str) -> Vec<u8> {
    let place = |m: &str| m.lines().next().unwrap_or("").to_string();
    let want = place(msg);
    let mut cur = input.to_vec();
    let mut tries = 0;
    let mut chunk = cur.len().div_ceil(2).max(1);
    while chunk >= 1 && tries < 4000 {
        let mut i = 0;
        let mut shrank = false;
        while i < cur.len() && tries < 4000 {
            let mut cand = cur[..i].to_vec();
            cand.extend_from_slice(&cur[(i + chunk).min(cur.len())..]);
            tries += 1;
            if panics(check, &cand).is_some_and(|m| place(&m) == want) {
                cur = cand;
                shrank = true;
            } else {
                i += chunk;
            }
        }
        if !shrank {
            if chunk == 1 {
                break;
            }
            chunk /= 2;
        }
    }
    cur
}

/// Run `check` on `n` inputs made by `make`; panic with a reproducible report on the first
/// input that panics. Returns the count tried.
pub fn run<R>(
    name: &str,
    n: u64,
    make: &mut dyn FnMut(&mut Gen) -> Vec<u8>,
    check: &dyn Fn(&[u8]) -> R,
) -> u64 {
    let check = &|b: &[u8]| drop(check(b));
    install_hook();
    // Each target its own stream, fixed by its name.
    let seed = base_seed()
        ^ name.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
        });
    let mut g = Gen {
        rng: fastrand::Rng::with_seed(seed),
    };
    let started = std::time::Instant::now();
    for i in 0..n {
        let mut input = make(&mut g);
        input.truncate(MAX_LEN);
        if let Some(msg) = panics(check, &input) {
            let small = minimise(check, &input, &msg);
            let again = panics(check, &small).unwrap_or(msg);
            panic!(
                "property {name}: input {i} of {n} (seed {:#x}) panicked:\n{again}\nminimised input ({} bytes, from {}):\nb\"{}\"",
                base_seed(),
                small.len(),
                input.len(),
                small.escape_ascii()
            );
        }
    }
    println!(
        "property {name}: {n} inputs, seed {:#x}, no panic ({:.2}s)",
        base_seed(),
        started.elapsed().as_secs_f64()
    );
    n
}

/// Every valid seed gets past the parser (`read` says how much it read), so the mutations
/// start from inputs that reach what roger does next, not only the parser's error path.
#[track_caller]
pub fn seeds_read<R: PartialEq + Default + std::fmt::Debug>(
    name: &str,
    seeds: &[Vec<u8>],
    read: impl Fn(&[u8]) -> R,
) {
    for (i, s) in seeds.iter().enumerate() {
        assert_ne!(
            read(s),
            R::default(),
            "{name}: seed {i} is not read:\n{}",
            String::from_utf8_lossy(s)
        );
    }
}

/// A file from the repository as a seed.
pub fn repo_file(rel: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("seed {}: {e}", p.display()))
}

/// Seeds of `per` consecutive lines each, cut from a line-based sample.
pub fn line_seeds(text: &[u8], per: usize) -> Vec<Vec<u8>> {
    let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
    lines.chunks(per.max(1)).map(|c| c.concat()).collect()
}

/// A scratch directory for the targets that read files: tmpfs when there is one (the
/// ledger append fsyncs every record).
pub fn scratch() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("temp dir")
}

#[test]
fn the_harness_catches_and_shrinks_a_panic() {
    install_hook();
    let check = |b: &[u8]| {
        if b.windows(3).any(|w| w == b"bad") {
            panic!("found it");
        }
    };
    let input = b"lots of good bytes then bad and more".to_vec();
    let msg = panics(&check, &input).expect("panics");
    assert!(msg.contains("found it"), "{msg}");
    assert_eq!(minimise(&check, &input, &msg), b"bad");
    assert_eq!(panics(&check, b"fine"), None);
    let report = catch_unwind(|| run("shrinks", 1, &mut |_| input.clone(), &check))
        .expect_err("run fails on a panicking input");
    let report = report.downcast_ref::<String>().expect("a message");
    assert!(report.contains("b\"bad\""), "{report}");
}

#[test]
fn the_same_seed_makes_the_same_inputs() {
    let seeds = vec![b"{\"step\": 1, \"loss\": 2.5}\n".to_vec()];
    let make = |s: u64| {
        let mut g = Gen {
            rng: fastrand::Rng::with_seed(s),
        };
        (0..50)
            .map(|_| g.mutated(&seeds, &["loss"]))
            .collect::<Vec<_>>()
    };
    assert_eq!(make(7), make(7));
    assert_ne!(make(7), make(8));
}
