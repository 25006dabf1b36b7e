//! The answer cache of a repeated `critic --once` (src/cmd/critic_answer.rs): an unchanged
//! check answers from the answer it kept, byte for byte what the check itself prints, only
//! while nothing it read has changed and the clock is inside the span the answer holds for.

use crate::util::{Env, Run};
use std::path::PathBuf;
use std::time::Duration;

/// A stale limit of 1 h; the last step at 2025-06-01T00:00:00Z.
const CFG: &str = "[run]\nname = \"t\"\nlog = \"train.jsonl\"\n[[phase]]\nname = \"all\"\n\
     from = 0\nloss = [1.0, 5.0]\nstale = \"1h\"\n";

fn log() -> String {
    let end = 1_748_736_000u64;
    (1..=40)
        .map(|s| {
            format!(
                "{{\"step\": {s}, \"time\": {}, \"loss\": {:.3}}}\n",
                end - (40 - s) * 10,
                3.0 - s as f64 * 0.01
            )
        })
        .collect()
}

/// A file changed within the last 2 s may change again without a visible sign: no answer
/// rests on it, so tests wait this long before a check that should keep one.
fn settle() {
    std::thread::sleep(Duration::from_millis(2100));
}

fn answers(env: &Env) -> Vec<PathBuf> {
    std::fs::read_dir(env.cache.path().join("roger/critic-answers"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Mark the kept answer's text (the same length, so it still reads as an answer): a check
/// that prints the mark was answered from it.
fn mark(env: &Env) {
    let found = answers(env);
    assert_eq!(found.len(), 1, "{found:?}");
    let mut data = std::fs::read(&found[0]).unwrap();
    let (from, to) = (b"not filed again", b"NOT FILED AGAIN");
    let at = data
        .windows(from.len())
        .position(|w| w == from)
        .expect("no text to mark");
    data[at..at + to.len()].copy_from_slice(to);
    std::fs::write(&found[0], data).unwrap();
}

fn once(env: &Env, now: &str, extra_env: &[(&str, &str)]) -> Run {
    let args = ["critic", "--once", "--now", now];
    let mut c = env.cmd(&args);
    for (k, v) in extra_env {
        c.env(k, v);
    }
    env.run_cmd(c, &args)
}

fn answered(run: &Run) -> bool {
    run.stdout().contains("NOT FILED AGAIN")
}

#[test]
fn a_repeated_check_answers_from_its_answer_until_anything_it_read_changes() {
    let env = Env::new();
    env.write("roger.toml", CFG);
    env.write("train.jsonl", log());
    // 2.5 h without a step: stale fails, "no new step for 2.5h" — the same text for minutes.
    let t = "2025-06-01T02:30:00Z";
    once(&env, t, &[]).expect(2).stdout_has("(ledger seq 1,");
    assert!(answers(&env).is_empty(), "a filing check keeps no answer");
    settle();
    let kept = once(&env, t, &[])
        .expect(2)
        .stdout_has("no new step for 2.5h")
        .stdout_has("unchanged since ledger seq 1");
    mark(&env);
    let hit = once(&env, t, &[]).expect(2);
    assert!(answered(&hit), "{}", hit.report());
    assert_eq!(
        hit.stdout().replace("NOT FILED AGAIN", "not filed again"),
        kept.stdout()
    );
    assert_eq!(hit.stderr(), "");
    // A minute later the answer still reads the same: answered. An hour later it does not.
    assert!(answered(&once(&env, "2025-06-01T02:31:00Z", &[])));
    let later = once(&env, "2025-06-01T03:30:00Z", &[])
        .expect(2)
        .stdout_has("no new step for 3.5h");
    assert!(!answered(&later), "{}", later.report());
    let off = once(
        &env,
        "2025-06-01T03:30:00Z",
        &[("ROGER_ANSWER_CACHE", "off")],
    );
    assert_eq!(later.stdout(), off.stdout());
    // (A check not answered keeps its own answer in place of the one it could not use.)
    assert!(!answered(&once(&env, t, &[])));
    mark(&env);
    // An answer others could have written (group- or world-writable, or not ours): not taken.
    use std::os::unix::fs::PermissionsExt;
    let file = &answers(&env)[0];
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(!answered(&once(&env, t, &[])));
    once(&env, t, &[]);
    mark(&env);
    assert!(answered(&once(&env, t, &[])));
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&answers(&env)[0], Some(65534), None).unwrap();
        assert!(!answered(&once(&env, t, &[])));
        once(&env, t, &[]);
        mark(&env);
    }
    // Another environment: not answered; turned off: not answered.
    assert!(!answered(&once(&env, t, &[("SOME_VAR", "1")])));
    once(&env, t, &[]);
    mark(&env);
    assert!(!answered(&once(&env, t, &[("ROGER_ANSWER_CACHE", "off")])));
    assert!(answered(&once(&env, t, &[])));
    // The config rewritten with the same bytes: not answered (and no answer kept on it yet).
    env.write("roger.toml", CFG);
    assert!(!answered(&once(&env, t, &[]).expect(2)));
    settle();
    once(&env, t, &[]).expect(2);
    mark(&env);
    assert!(answered(&once(&env, t, &[])));
    // Another writer's ledger record: not answered (and filed again, as without the cache).
    roger::ledger::Ledger::new(env.path("roger-ledger.jsonl"))
        .append(
            roger::ledger::Entry::new(roger::ledger::Kind::Note, "test", "t"),
            chrono::Utc::now(),
        )
        .unwrap();
    once(&env, t, &[]).expect(2).stdout_has("(ledger seq 3,");
    settle();
    once(&env, t, &[]).expect(2);
    mark(&env);
    assert!(answered(&once(&env, t, &[])));
    // A new step in the log: read, judged and filed.
    env.append(
        "train.jsonl",
        "{\"step\": 41, \"time\": 1748736000, \"loss\": 2.5}\n",
    );
    let after = once(&env, t, &[]).expect(2);
    assert!(!answered(&after));
    after.stdout_has("step 41").stdout_has("(ledger seq 4,");
    env.run(&["ledger", "verify"]).expect(0);
}

/// On every fixture, at times before, at and after the judged one (some inside an answer's
/// span, some not): the check with its answer cache prints and exits exactly as without.
#[test]
fn answers_equal_the_check_itself_on_every_fixture_at_every_time() {
    let envs: Vec<(String, Env)> = crate::read_less::fixtures()
        .into_iter()
        .map(|(log, text, cfg)| {
            let env = Env::new();
            env.write("roger.toml", &cfg);
            env.write(&log, text);
            (log, env)
        })
        .collect();
    let base = chrono::DateTime::parse_from_rfc3339(crate::read_less::NOW).unwrap();
    let at = |s: i64| (base + chrono::Duration::seconds(s)).to_rfc3339();
    let unchanged = |r: &Run| {
        let out = r.stdout();
        out.contains("unchanged since ledger seq") || out.contains("\"unchanged\":true")
    };
    // Oldest time first, one form at a time: for each, every fixture is checked without
    // answers until it has nothing new to file (the first verdict, or a new time that changes
    // a status, is filed: the ledger changes), then, once the files have settled, with
    // answers twice (the first may keep one, the second may be answered from it).
    let offsets = [-3_600, 0, 1, 30, 600, 86_400, 30 * 86_400, 400 * 86_400];
    let mut hits = std::collections::BTreeMap::<String, usize>::new();
    for s in offsets {
        for json in [false, true] {
            let now = at(s);
            let mut args = vec!["critic", "--once", "--now", &now];
            if json {
                args.push("--json");
            }
            let plain: Vec<Run> = envs
                .iter()
                .map(|(log, env)| {
                    for _ in 0..4 {
                        let mut c = env.cmd(&args);
                        c.env("ROGER_ANSWER_CACHE", "off");
                        let r = env.run_cmd(c, &args);
                        if unchanged(&r) {
                            return r;
                        }
                    }
                    panic!("{log} at +{s}s: files a verdict every time")
                })
                .collect();
            settle();
            for ((log, env), plain) in envs.iter().zip(&plain) {
                for _ in 0..2 {
                    let mut c = env.cmd(&args);
                    c.env("ROGER_ANSWER_CACHE", "say");
                    let cached = env.run_cmd(c, &args);
                    let what = format!("{log} at +{s}s (json {json})");
                    assert_eq!(cached.code(), plain.code(), "{what}\n{}", cached.report());
                    assert_eq!(cached.stdout(), plain.stdout(), "{what}");
                    let stderr = cached.stderr();
                    let said = "roger: note: answered from the answer kept in ";
                    let rest: Vec<&str> = stderr.lines().filter(|l| !l.starts_with(said)).collect();
                    if rest.len() < stderr.lines().count() {
                        *hits.entry(log.clone()).or_default() += 1;
                    }
                    assert_eq!(rest.join("\n"), plain.stderr().trim_end(), "{what}");
                }
            }
        }
    }
    // Not vacuous: answers were kept (for the human form and the JSON one) and given, on
    // every fixture at more than one time.
    for (log, env) in &envs {
        assert_eq!(answers(env).len(), 2, "{log}: {:?}", answers(env));
        assert!(hits.get(log).is_some_and(|&n| n >= 4), "{log}: {hits:?}");
    }
    eprintln!("answers given: {hits:?}");
}

/// An answer is kept only where it cannot depend on what it does not record.
#[test]
fn no_answer_is_kept_where_the_check_depends_on_more() {
    let cases: [(&str, String, &str); 5] = [
        ("a plain log (the control)", CFG.into(), ""),
        (
            "the GPU asked for VRAM",
            CFG.replace("stale = ", "vram_max_gib = 70\nstale = ") + "[gpu]\nsource = \"none\"\n",
            "",
        ),
        (
            "a log pattern",
            CFG.replace("log = \"train.jsonl\"", "log = \"train*.jsonl\""),
            "",
        ),
        (
            "a log that does not exist (yet)",
            CFG.replace("train.jsonl", "absent.jsonl"),
            "",
        ),
        ("turned off", CFG.into(), "off"),
    ];
    let envs: Vec<Env> = cases
        .iter()
        .map(|(_, cfg, _)| {
            let env = Env::new();
            env.write("roger.toml", cfg);
            env.write("train.jsonl", log());
            env
        })
        .collect();
    let run = |env: &Env, off: &str| {
        let args = ["critic", "--once", "--now", "2025-06-01T02:30:00Z"];
        let mut c = env.cmd(&args);
        if !off.is_empty() {
            c.env("ROGER_ANSWER_CACHE", off);
        }
        env.run_cmd(c, &args)
    };
    for (env, (_, _, off)) in envs.iter().zip(&cases) {
        run(env, off);
    }
    settle();
    for (env, (what, _, off)) in envs.iter().zip(&cases) {
        let second = run(env, off);
        run(env, off);
        let kept = !answers(env).is_empty();
        assert_eq!(
            kept,
            what.contains("control"),
            "{what}\n{}",
            second.report()
        );
        if what.contains("not exist") {
            second.stderr_has("does not exist (yet)");
        }
    }
}
