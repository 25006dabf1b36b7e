//! Hostile and broken input: a run name, log keys and ledger fields carrying HTML and script,
//! a log of NaN only, an empty ledger, a ledger whose chain is broken. The page always
//! renders, escapes what it was given, and says in the headline what is wrong.

use super::{browser, chromium, model, report};
use crate::util::Env;
use roger::ledger::{Entry, Kind, Ledger};

const EVIL: &str = "<script>alert(1)</script>";
const EVIL_KEY: &str = "<img src=x onerror=alert(2)>";

fn config(env: &Env, name: &str, loss_key: &str) {
    let name = name.replace('\\', "\\\\").replace('"', "\\\"");
    let key = loss_key.replace('"', "\\\"");
    env.write(
        "roger.toml",
        format!(
            "[run]\nname = \"{name}\"\nlog = \"train.jsonl\"\n\n[metrics]\nloss = \"{key}\"\n\n[[phase]]\nname = \"</style><b>x\"\nfrom = 0\nloss = [1.0, 5.0]\n"
        ),
    );
}

#[test]
fn script_in_the_name_keys_and_records_renders_as_text() {
    let env = Env::new();
    config(&env, EVIL, EVIL_KEY);
    let key_json = serde_json::to_string(EVIL_KEY).unwrap();
    let log: String = (1..=30)
        .map(|s| {
            format!(
                "{{\"step\": {s}, {key_json}: {}, \"time\": {}}}\n",
                3.0 - s as f64 * 0.01,
                1_800_000_000 + s
            )
        })
        .collect();
    env.write("train.jsonl", log);
    let l = Ledger::new(env.path("roger-ledger.jsonl"));
    let at = chrono::DateTime::from_timestamp(1_800_000_010, 0).unwrap();
    l.append(
        Entry::new(Kind::Note, "publish", EVIL)
            .step(Some(10))
            .field("event", "publish-rejected")
            .field("path", "/ck/</td><script>alert(3)</script>")
            .field("evidence", "javascript:alert(4)")
            .field("reason", EVIL),
        at,
    )
    .unwrap();
    l.append(
        Entry::new(Kind::Kill, "watch", EVIL)
            .step(Some(20))
            .field("reason", "wedge\"><script>alert(5)</script>")
            .field("reasons", vec![EVIL]),
        at + chrono::Duration::seconds(5),
    )
    .unwrap();
    let r = report(&env, Some("2027-01-15T08:00:40Z"), &["--out", "p.html"]);
    assert!((0..=3).contains(&r.code()), "{}", r.report());
    let page = env.read("p.html");
    assert!(!page.contains("<script"), "a raw <script> in the page");
    assert!(!page.contains("<img"), "a raw <img> in the page");
    assert!(
        !page.contains("</style><b>"),
        "the phase name broke out of its text"
    );
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the run name is shown as text"
    );
    assert!(
        page.contains("&lt;img src=x onerror=alert(2)&gt;"),
        "the log key is shown as text"
    );
    // The evidence link is relative or nothing: never a javascript: URL that runs.
    assert!(!page.contains("href=\"javascript:"), "a javascript: link");
    let text = report(&env, Some("2027-01-15T08:00:40Z"), &["--text"]).stdout();
    assert!(
        text.contains(EVIL),
        "the digest shows the name as it is: {text}"
    );
    if let Some(bin) = browser() {
        let o = chromium(&env, &bin, &["--dump-dom"], &env.path("p.html"));
        let dom = String::from_utf8_lossy(&o.stdout);
        assert!(
            dom.contains("</html>"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            !dom.contains("<script"),
            "the browser built a <script> element"
        );
        assert!(!dom.contains("<img"), "the browser built an <img> element");
    } else {
        crate::util::missing(
            "script_in_the_name_keys_and_records_renders_as_text (its browser half)",
            "chromium-headless-shell (or chromium) on PATH",
            "apt-get install chromium-headless-shell; .ci/run does",
        );
    }
}

#[test]
fn a_log_of_nan_only_renders_with_its_nans_marked() {
    let env = Env::new();
    config(&env, "nan-run", "loss");
    let log: String = (1..=50)
        .map(|s| {
            format!(
                "{{\"step\": {s}, \"loss\": NaN, \"time\": {}}}\n",
                1_800_000_000 + s
            )
        })
        .collect();
    env.write("train.jsonl", log);
    let r = report(&env, Some("2027-01-15T08:01:00Z"), &["--out", "p.html"]);
    assert!((0..=1).contains(&r.code()), "{}", r.report());
    let page = env.read("p.html");
    // One marker per pixel column holding a NaN: here each of the 50 steps has its own.
    assert_eq!(page.matches("class=\"nan\"").count(), 50, "NaN markers");
    assert!(
        page.contains("1 NaN/Inf from step 1<"),
        "the NaNs are marked at their step"
    );
    // A log of loss only: one panel, and the rest named once as absent (issue 30).
    assert_eq!(page.matches("<svg viewBox=\"0 0 960").count(), 1);
    assert!(
        page.contains("Not in the log, so not drawn: learning rate, grad norm, tokens/s, VRAM.")
    );
}

#[test]
fn an_empty_ledger_and_no_log_cannot_be_judged_but_still_render() {
    let env = Env::new();
    config(&env, "empty", "loss");
    env.write("roger-ledger.jsonl", "");
    let r = report(&env, None, &[]);
    assert_eq!(r.code(), 3, "{}", r.report());
    assert!(r.stderr().contains("CANNOT JUDGE"), "{}", r.report());
    let page = env.read("roger-report.html");
    assert!(page.contains("CANNOT JUDGE"));
    assert!(page.contains("does not exist"), "the missing log is named");
    let t = report(&env, None, &["--text"]);
    assert_eq!(t.code(), 3);
    assert!(t.stdout().contains("nothing to judge"), "{}", t.report());
}

#[test]
fn a_broken_chain_is_in_the_headline_and_the_page_still_renders() {
    let env = Env::new();
    config(&env, "r", "loss");
    env.write(
        "train.jsonl",
        (1..=20)
            .map(|s| {
                format!(
                    "{{\"step\": {s}, \"loss\": 3.0, \"time\": {}}}\n",
                    1_800_000_000 + s
                )
            })
            .collect::<String>(),
    );
    let l = Ledger::new(env.path("roger-ledger.jsonl"));
    for i in 0..3 {
        l.append(
            Entry::new(Kind::Note, "ledger", "r").field("message", format!("note {i}")),
            chrono::DateTime::from_timestamp(1_800_000_005 + i, 0).unwrap(),
        )
        .unwrap();
    }
    // Remove the middle record: the third no longer chains.
    let text = env.read("roger-ledger.jsonl");
    let lines: Vec<&str> = text.lines().collect();
    env.write(
        "roger-ledger.jsonl",
        format!("{}\n{}\n", lines[0], lines[2]),
    );
    let r = report(&env, Some("2027-01-15T08:00:30Z"), &["--out", "p.html"]);
    assert_eq!(r.code(), 1, "{}", r.report());
    let m = model(&env, Some("2027-01-15T08:00:30Z"));
    let why = m["headline"]["why"].as_str().unwrap();
    assert!(
        why.starts_with("the ledger's hash chain is broken (line 2, seq 3: chain broken"),
        "{why}"
    );
    assert!(env.read("p.html").contains("hash chain is broken"));
}
