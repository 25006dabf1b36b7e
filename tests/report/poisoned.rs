//! Issue 30 §4: the morning page of a run that exploded on poisoned data at step 150, was
//! failed by the critic at step 210 and rolled back to its checkpoint of step 140, then healed.
//! The verdict is the real critic's (`roger critic --once` over the log as it stood at 210); the
//! kill, relaunch and launch records carry the fields the watch writes (src/watch/actions.rs,
//! relaunch.rs); a second `critic --once` over the healed log passes it. The page is read by
//! the real headless Chromium: the loss axis goes log so the declared band [0, 50] keeps its
//! height, the incident says when the divergence began, was detected and where it was rolled
//! back to, and only the series the log has get a panel.

use super::{browser, chromium, model, report};
use crate::util::Env;
use roger::ledger::{Entry, Kind, Ledger, Record};

const RUN: &str = "poisoned";

/// Healthy loss: decaying from ~9.5 to ~1.6.
fn healthy(step: u64) -> f64 {
    8.0 * (-(step as f64) / 60.0).exp() + 1.5
}

fn line(step: u64, loss: f64, t: f64) -> String {
    // No tokens_per_s and no vram: a plain PyTorch loop that logs loss, lr and grad norm.
    format!("{{\"step\": {step}, \"loss\": {loss}, \"lr\": 0.0006, \"grad_norm\": 0.8, \"time\": {t:.3}}}\n")
}

/// What the night's ledger says: the verdict's onset, its step, the relaunch's checkpoint step.
struct Night {
    env: Env,
    began: u64,
    detected: u64,
    rolled_back_to: u64,
    now: String,
}

fn night() -> Night {
    let env = Env::new();
    env.write(
        "roger.toml",
        format!(
            "[run]\nname = \"{RUN}\"\nlog = \"train.jsonl\"\ncheckpoint_dir = \"ck\"\n\n\
             [gpu]\nsource = \"none\"\n\n\
             [schedule]\nkind = \"constant\"\npeak_lr = 0.0006\ntotal_steps = 300\n\n\
             [watch]\nrollback_on = [\"loss\"]\n\n\
             [[phase]]\nname = \"main\"\nfrom = 0\nloss = [0.0, 50.0]\nwindow = 10\n"
        ),
    );
    // The log as the critic saw it: healthy to 149, then poisoned data from 150 on, the loss
    // leaving the band at once and growing to ~4e9 by step 210. One step a second, ending
    // 100 s before now so the verdict (stamped now) comes after it.
    let now = chrono::Utc::now();
    let base = now.timestamp() as f64 - 310.0;
    let first: String = (1..=210)
        .map(|s| {
            let loss = if s < 150 {
                healthy(s)
            } else {
                60.0 * (0.3 * (s - 150) as f64).exp()
            };
            line(s, loss, base + s as f64)
        })
        .collect();
    env.write("train.jsonl", &first);
    let c = env.run(&["critic", "--once"]);
    assert_eq!(c.code(), 2, "the critic fails the loss\n{}", c.report());
    let ledger = Ledger::new(env.path("roger-ledger.jsonl"));
    let recs = ledger.records().unwrap();
    let verdict: &Record = recs
        .iter()
        .find(|r| r.kind == Kind::Verdict && r.str_field("status") == Some("fail"))
        .expect("a fail verdict");
    let loss = verdict.get("checks").unwrap().as_array().unwrap();
    let loss = loss
        .iter()
        .find(|c| c["check"] == "loss" && c["status"] == "fail")
        .expect("the loss check failed");
    let began = loss["diverged_at"]
        .as_u64()
        .expect("the verdict's diverged_at");
    let detected = verdict.step.expect("the verdict's step");
    // The scenario is what it says: onset at the first poisoned step, seen at the last.
    assert_eq!((began, detected), (150, 210), "{verdict:?}");
    // The watch's side, as it writes it: the kill names the verdict, the relaunch resumes from
    // the checkpoint before the onset (rollback_margin_steps = 10), then the new launch.
    let kill = Entry::new(Kind::Kill, "watch", RUN)
        .step(Some(detected))
        .field("reason", "divergence")
        .field("pid", 4242)
        .field("targets", serde_json::json!([{"pid": 4242}]))
        .field("dry_run", false)
        .field("check", "loss")
        .field("verdict_seq", verdict.seq)
        .field("verdict_step", detected)
        .field("diverged_at", began)
        .field(
            "reasons",
            vec![format!(
                "critic fail: loss (verdict #{} at step {detected})",
                verdict.seq
            )],
        );
    ledger.append(kill, chrono::Utc::now()).unwrap();
    let rolled_back_to = 140;
    let relaunch = Entry::new(Kind::Relaunch, "watch", RUN)
        .step(Some(rolled_back_to))
        .field("attempt", 1)
        .field("ckpt", env.path("ck/step-140").display().to_string())
        .field("ckpt_step", rolled_back_to)
        .field("diverged_at", began)
        .field("backoff_s", 1.0);
    ledger.append(relaunch, chrono::Utc::now()).unwrap();
    let launched = Entry::new(Kind::Watch, "watch", RUN).field("event", "launched");
    let launched = ledger.append(launched, chrono::Utc::now()).unwrap();
    // The healed run: from 141 to the end, healthy again (the ledger's stamps are the clock's,
    // in order with the critic's; the new launch's steps follow its launch record).
    let t0 = launched.ts.timestamp_millis() as f64 / 1000.0 + 1.0;
    let rest: String = (141..=300)
        .map(|s| line(s, healthy(s), t0 + (s - 141) as f64))
        .collect();
    std::fs::OpenOptions::new()
        .append(true)
        .open(env.path("train.jsonl"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, rest.as_bytes()))
        .unwrap();
    // The critic again, over the healed run: the fail is cleared.
    let c = env.run(&["critic", "--once"]);
    assert_eq!(c.code(), 0, "the healed run passes\n{}", c.report());
    let now = (now + chrono::Duration::seconds(200)).to_rfc3339();
    let r = report(&env, Some(&now), &["--out", "page.html"]);
    assert!((0..=3).contains(&r.code()), "{}", r.report());
    Night {
        env,
        began,
        detected,
        rolled_back_to,
        now,
    }
}

/// The page as the browser built it, with `script` run in it first (a copy of the page with
/// the script appended: the page itself has none). `None` without a browser (skipped).
fn dom(n: &Night, script: &str) -> Option<String> {
    let Some(bin) = browser() else {
        crate::util::missing(
            &crate::util::this_test(),
            "chromium-headless-shell (or chromium) on PATH",
            "apt-get install chromium-headless-shell; .ci/run does",
        );
        return None;
    };
    let page = n.env.read("page.html");
    let copy = page.replace("</body>", &format!("<script>{script}</script></body>"));
    assert_ne!(copy, page, "no </body> in the page");
    let path = n.env.write("probe.html", copy);
    let o = chromium(&n.env, &bin, &["--dump-dom"], &path);
    let dom = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success() && dom.contains("</html>"),
        "chromium --dump-dom failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(dom)
}

/// The value of `data-NAME="..."` on the body, set by the probe script.
fn probed(dom: &str, name: &str) -> String {
    let key = format!("data-{name}=\"");
    let at = dom
        .find(&key)
        .unwrap_or_else(|| panic!("the probe did not set data-{name}"));
    dom[at + key.len()..].split('"').next().unwrap().to_string()
}

#[test]
fn a_loss_that_explodes_gets_a_log_axis_and_the_band_keeps_its_height() {
    let n = night();
    // Rendered geometry, measured by the browser: the band's height against the frame's.
    let script = r#"
const f = document.querySelector('figure[data-metric="loss"]');
const h = (sel) => f.querySelector(sel).getBBox().height;
document.body.setAttribute('data-band', (h('rect.band') / h('rect.frame')).toFixed(3));
document.body.setAttribute('data-scale', f.getAttribute('data-scale'));
document.body.setAttribute('data-caption', f.querySelector('figcaption').textContent);
"#;
    let Some(dom) = dom(&n, script) else { return };
    // Linear to 4e9, the band [0, 50] is 0.000 of the frame; on the log axis it is about a
    // sixth (1 to 50 of ~10 decades).
    let band: f64 = probed(&dom, "band").parse().unwrap();
    eprintln!("the band is {band} of the loss plot's height");
    assert!(
        band > 0.1,
        "the declared band is {band} of the plot's height"
    );
    assert_eq!(probed(&dom, "scale"), "log", "the loss plot's axis");
    assert!(
        probed(&dom, "caption").contains("log scale"),
        "the axis is labelled as log: {}",
        probed(&dom, "caption")
    );
}

#[test]
fn a_divergence_incident_says_when_it_began_was_detected_and_where_it_rolled_back_to() {
    let n = night();
    let expected = format!(
        "began at step {}, detected at step {}, rolled back to step {}",
        n.began, n.detected, n.rolled_back_to
    );
    let script = r#"
const row = document.querySelector('tr.incident.k-divergence');
document.body.setAttribute('data-row', row ? row.textContent : 'none');
const onset = document.querySelector('figure[data-metric="loss"] line.mark.onset title');
document.body.setAttribute('data-onset', onset ? onset.textContent : 'none');
"#;
    if let Some(dom) = dom(&n, script) {
        let row = probed(&dom, "row");
        assert!(row.contains(&expected), "the incident row: {row}");
        // And on the plots, a line where it began, beside the rollback line where it was caught.
        let onset = probed(&dom, "onset");
        assert!(onset.ends_with(&format!(" at step {}", n.began)), "{onset}");
    }
    // The model and the digest carry the same numbers as the page.
    let m = model(&n.env, Some(&n.now));
    let inc = m["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "divergence")
        .unwrap_or_else(|| panic!("no divergence incident: {m}"));
    assert_eq!(
        (&inc["began_at"], &inc["step"], &inc["rolled_back_to"]),
        (
            &serde_json::json!(n.began),
            &serde_json::json!(n.detected),
            &serde_json::json!(n.rolled_back_to)
        )
    );
    let text = report(&n.env, Some(&n.now), &["--text"]).stdout();
    assert!(text.contains(&expected), "the digest: {text}");
}

#[test]
fn only_the_series_the_log_has_get_a_panel() {
    let n = night();
    let script = r#"
const ms = [...document.querySelectorAll('figure.plot')].map(f => f.getAttribute('data-metric'));
const svgs = [...document.querySelectorAll('figure.plot')].filter(f => f.querySelector('svg polyline.line')).length;
document.body.setAttribute('data-metrics', ms.join(','));
document.body.setAttribute('data-drawn', String(svgs));
document.body.setAttribute('data-empty', String([...document.querySelectorAll('figure.plot figcaption')].some(c => c.textContent.toLowerCase().includes('not in the log'))));
const absent = document.querySelector('p.absent');
document.body.setAttribute('data-absent', absent ? absent.textContent : 'none');
"#;
    let Some(dom) = dom(&n, script) else { return };
    // The log has loss, lr and grad norm; no eval loss, tokens/s or VRAM.
    assert_eq!(probed(&dom, "metrics"), "loss,lr,grad_norm");
    assert_eq!(probed(&dom, "drawn"), "3", "each panel has its curve");
    assert_eq!(probed(&dom, "empty"), "false", "an empty panel's words");
    // What was left out is said once, in a line under the plots.
    let absent = probed(&dom, "absent");
    assert!(
        absent.contains("tokens/s") && absent.contains("VRAM") && !absent.contains("grad norm"),
        "{absent}"
    );
}
