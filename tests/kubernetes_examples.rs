//! examples/kubernetes/ checked against the real roger: every Job pod template (the Job's and
//! the JobSet's) maps exactly the exit codes `roger --help` gives for "do not restart" and
//! "requeue me" (and the requeue code its roger.toml resolves to), runs with restartPolicy
//! Never, gives a grace period at least the `sigterm_window` roger resolves from the
//! ConfigMap it mounts, runs `roger watch` with that config, and writes its checkpoints and
//! ledger to a mounted volume. And the kubelet's sequence (SIGTERM, SIGKILL after the grace)
//! against a real `roger watch` under the example's `[preempt]` section ends in a code the
//! example Job ignores, with the hand-off's checkpoint saved. No cluster is involved.

use crate::util::{kubelet, repo_root, roger_bin, Env};
use crate::watch::{alive, event, fake_train, pids, poll_until, records, roger};
use roger::config::preempt::PreemptConfig;
use serde::Deserialize;
use serde_norway::Value;
use std::collections::BTreeSet;

/// Every document of every examples/kubernetes/*.yaml, with its file name.
fn docs() -> Vec<(String, Value)> {
    let dir = repo_root().join("examples/kubernetes");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "examples/kubernetes has {files:?}");
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        for d in serde_norway::Deserializer::from_str(&text) {
            let v = Value::deserialize(d).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(v.get("kind").is_some(), "{name}: a document without kind");
            out.push((name.clone(), v));
        }
    }
    out
}

/// The `watch` exit codes `roger --help` lists: (do not restart, requeue me).
fn help_codes() -> (BTreeSet<i64>, BTreeSet<i64>) {
    let out = std::process::Command::new(roger_bin())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let (mut stop, mut requeue) = (BTreeSet::new(), BTreeSet::new());
    let watch = help
        .split("\n  watch:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no watch exit codes in --help:\n{help}"));
    for line in watch.lines().take_while(|l| !l.trim().is_empty()) {
        let (code, text) = line.trim().split_once("  ").unwrap_or(("", ""));
        let Ok(code) = code.parse::<i64>() else {
            continue;
        };
        if text.contains("do not restart") {
            stop.insert(code);
        }
        if text.contains("requeue me") {
            requeue.insert(code);
        }
    }
    assert!(!stop.is_empty() && !requeue.is_empty(), "{watch}");
    (stop, requeue)
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter()
        .fold(v, |v, k| v.get(*k).unwrap_or(&Value::Null))
}

fn seq(v: &Value) -> Vec<Value> {
    v.as_sequence().cloned().unwrap_or_default()
}

/// Each Job spec in the documents, named: a Job's own, and every JobSet replicated Job's.
fn job_specs(docs: &[(String, Value)]) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (file, d) in docs {
        match d["kind"].as_str() {
            Some("Job") => out.push((file.clone(), d["spec"].clone())),
            Some("JobSet") => {
                for rj in seq(s(d, &["spec", "replicatedJobs"])) {
                    out.push((
                        format!("{file} replicatedJob {:?}", rj["name"]),
                        s(&rj, &["template", "spec"]).clone(),
                    ));
                }
            }
            _ => {}
        }
    }
    out
}

/// What roger resolves from a ConfigMap's roger.toml (`roger --config F check --json`).
fn resolve(env: &Env, name: &str, toml: &str) -> crate::util::Run {
    let text: String = toml.lines().map(|l| format!("{l}\n")).collect();
    let path = env.write(&format!("{name}.toml"), text);
    env.run(&["--config", path.to_str().unwrap(), "check", "--json"])
}

/// The roger.toml of the ConfigMap `name`.
fn configmap_toml(docs: &[(String, Value)], name: &str) -> String {
    docs.iter()
        .find(|(_, d)| {
            d["kind"].as_str() == Some("ConfigMap")
                && s(d, &["metadata", "name"]).as_str() == Some(name)
        })
        .and_then(|(_, d)| s(d, &["data", "roger.toml"]).as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no ConfigMap {name} with a roger.toml in examples/kubernetes"))
}

#[test]
fn every_job_maps_rogers_exit_codes_and_outlasts_its_sigterm_window() {
    let docs = docs();
    let (stop, requeue) = help_codes();
    let jobs = job_specs(&docs);
    assert!(jobs.len() >= 2, "a Job and a JobSet expected: {jobs:?}");
    let env = Env::new();
    for (name, job) in &jobs {
        assert!(
            job["backoffLimit"].as_i64().is_some(),
            "{name}: no backoffLimit"
        );
        let pod = s(job, &["template", "spec"]);
        assert_eq!(
            pod["restartPolicy"].as_str(),
            Some("Never"),
            "{name}: podFailurePolicy needs restartPolicy Never"
        );
        let containers = seq(&pod["containers"]);
        let roger_c = containers
            .iter()
            .find(|c| s(c, &["command"])[0].as_str() == Some("roger"))
            .unwrap_or_else(|| panic!("{name}: no container whose command is roger"));
        let cname = roger_c["name"].as_str().unwrap();
        let cmd: Vec<String> = seq(&roger_c["command"])
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_string())
            .collect();
        let watch_at = cmd
            .iter()
            .position(|a| a == "watch")
            .unwrap_or_else(|| panic!("{name}: not `roger watch`: {cmd:?}"));
        let dashdash = cmd
            .iter()
            .position(|a| a == "--")
            .unwrap_or_else(|| panic!("{name}: no `--` before the training: {cmd:?}"));
        assert!(
            watch_at < dashdash && cmd.iter().any(|a| a == "{ckpt}"),
            "{name}: {cmd:?}"
        );

        // The exit-code rules name roger's container and roger's own codes.
        let rules = seq(s(job, &["podFailurePolicy", "rules"]));
        let codes = |action: &str| -> BTreeSet<i64> {
            rules
                .iter()
                .filter(|r| r["action"].as_str() == Some(action) && !r["onExitCodes"].is_null())
                .flat_map(|r| {
                    let e = &r["onExitCodes"];
                    assert_eq!(e["containerName"].as_str(), Some(cname), "{name}: {r:?}");
                    assert_eq!(e["operator"].as_str(), Some("In"), "{name}: {r:?}");
                    seq(&e["values"]).into_iter().map(|v| v.as_i64().unwrap())
                })
                .collect()
        };
        assert_eq!(
            codes("FailJob"),
            stop,
            "{name}: FailJob must be roger's do-not-restart codes"
        );
        assert_eq!(
            codes("Ignore"),
            requeue,
            "{name}: Ignore must be roger's requeue code"
        );
        let disruption = rules.iter().any(|r| {
            r["action"].as_str() == Some("Ignore")
                && seq(&r["onPodConditions"])
                    .iter()
                    .any(|c| c["type"].as_str() == Some("DisruptionTarget"))
        });
        assert!(
            disruption,
            "{name}: the DisruptionTarget condition must be Ignore"
        );

        // The config roger is given is the ConfigMap mounted at its directory.
        let cfg_path = &cmd[cmd
            .iter()
            .position(|a| a == "--config")
            .unwrap_or_else(|| panic!("{name}: no --config"))
            + 1];
        let (cfg_dir, cfg_file) = cfg_path.rsplit_once('/').unwrap();
        let mounts = seq(&roger_c["volumeMounts"]);
        let volumes = seq(&pod["volumes"]);
        let volume_at = |dir: &str| -> Option<Value> {
            let m = mounts
                .iter()
                .find(|m| m["mountPath"].as_str() == Some(dir))?;
            volumes.iter().find(|v| v["name"] == m["name"]).cloned()
        };
        let cm =
            volume_at(cfg_dir).unwrap_or_else(|| panic!("{name}: nothing mounted at {cfg_dir}"));
        let cm_name = s(&cm, &["configMap", "name"])
            .as_str()
            .unwrap_or_else(|| panic!("{name}: {cfg_dir} is not a ConfigMap"));
        assert_eq!(cfg_file, "roger.toml");
        let toml_text = configmap_toml(&docs, cm_name);

        let run = resolve(&env, cm_name, &toml_text).expect(0);
        let resolved: serde_json::Value = serde_json::from_str(&run.stdout()).unwrap();
        let preempt: PreemptConfig = serde_json::from_value(resolved["preempt"].clone()).unwrap();
        assert_eq!(
            preempt.sigterm,
            Some(true),
            "{name}: SIGTERM must be a notice"
        );
        assert!(
            requeue.contains(&(preempt.requeue_exit_code as i64)),
            "{name}: requeue_exit_code {} is not what the Job ignores",
            preempt.requeue_exit_code
        );
        let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
        assert!(
            grace as f64 >= preempt.sigterm_window.0.as_secs_f64(),
            "{name}: terminationGracePeriodSeconds {grace} is shorter than [preempt] sigterm_window {:?}",
            preempt.sigterm_window.0
        );

        // Checkpoints and the ledger go to a writable mounted volume, not the image's layer.
        for key in ["checkpoint_dir", "ledger"] {
            let p = resolved["run"][key]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no [run] {key}: {}", resolved["run"]));
            let mount = mounts
                .iter()
                .filter(|m| m["readOnly"].as_bool() != Some(true))
                .find(|m| {
                    let dir = m["mountPath"].as_str().unwrap_or("\0");
                    p == dir || p.starts_with(&format!("{}/", dir.trim_end_matches('/')))
                });
            assert!(
                mount.is_some(),
                "{name}: [run] {key} = {p} is on no writable volume"
            );
        }

        // The bucket is named, and credentials come from the service account, not the file.
        let t: toml::Value = toml::from_str(&toml_text).unwrap();
        let remote = t["publish"]
            .get("remote")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        assert!(
            remote.starts_with("s3://"),
            "{name}: [publish] remote = {remote:?}"
        );
        for word in ["secret", "access_key", "AWS_SECRET"] {
            assert!(
                !toml_text
                    .to_ascii_lowercase()
                    .contains(&word.to_ascii_lowercase()),
                "{name}: {word} in roger.toml"
            );
        }
        let sa = pod["serviceAccountName"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no serviceAccountName"));
        let has_irsa = docs.iter().any(|(_, d)| {
            d["kind"].as_str() == Some("ServiceAccount")
                && s(d, &["metadata", "name"]).as_str() == Some(sa)
                && s(
                    d,
                    &["metadata", "annotations", "eks.amazonaws.com/role-arn"],
                )
                .as_str()
                .is_some_and(|a| a.starts_with("arn:aws:iam::"))
        });
        assert!(
            has_irsa,
            "{name}: service account {sa} has no IRSA role annotation"
        );
    }
}

/// The example configs, `[publish] remote` and all, are configs roger accepts.
#[test]
fn the_example_configs_pass_roger_check_with_their_remote() {
    let docs = docs();
    let env = Env::new();
    let maps: Vec<String> = docs
        .iter()
        .filter(|(_, d)| d["kind"].as_str() == Some("ConfigMap"))
        .map(|(_, d)| s(d, &["metadata", "name"]).as_str().unwrap().to_string())
        .collect();
    assert!(maps.len() >= 2, "{maps:?}");
    for name in maps {
        let toml_text = configmap_toml(&docs, &name);
        assert!(toml_text.contains("remote = \"s3://"), "{name}");
        let run = resolve(&env, &name, &toml_text).expect(0);
        let resolved: serde_json::Value = serde_json::from_str(&run.stdout()).unwrap();
        assert!(
            resolved
                .to_string()
                .contains("s3://my-training-checkpoints/"),
            "{name}: the resolved config lost the remote: {resolved}"
        );
    }
}

/// The Job in job.yaml, the roger.toml of the ConfigMap it mounts (roger-config): the
/// kubelet's SIGTERM, then SIGKILL after the Job's grace, against `roger watch` over
/// fake_train with that config (its paths moved into a temp dir, the `remote` line left out
/// until roger knows it, test timings added to [watch]; [preempt] as written). roger must hand
/// off inside the grace and exit with a code the Job's podFailurePolicy ignores.
#[test]
fn the_kubelets_sigterm_under_the_example_config_ends_in_a_code_the_job_ignores() {
    let docs = docs();
    let (_, job) = job_specs(&docs)
        .into_iter()
        .find(|(name, _)| name == "job.yaml")
        .expect("job.yaml's Job");
    let pod = s(&job, &["template", "spec"]);
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let ignored: BTreeSet<i64> = seq(s(&job, &["podFailurePolicy", "rules"]))
        .iter()
        .filter(|r| r["action"].as_str() == Some("Ignore"))
        .flat_map(|r| seq(s(r, &["onExitCodes", "values"])))
        .filter_map(|v| v.as_i64())
        .collect();
    let env = Env::new();
    let dir = env.path("");
    let dir = dir.to_str().unwrap().trim_end_matches('/');
    let example = configmap_toml(&docs, "roger-config");
    assert!(example.contains("/ckpt/") && example.contains("[watch]\n"));
    let text: String = example
        .replace("/ckpt/", &format!("{dir}/"))
        .replace(
            "[watch]\n",
            "[watch]\ninterval = \"100ms\"\nhysteresis = 2\nstale = \"60s\"\n",
        )
        .lines()
        .filter(|l| !l.trim_start().starts_with("remote ="))
        .map(|l| format!("{l}\n"))
        .chain(std::iter::once("[gpu]\nsource = \"none\"\n".to_string()))
        .collect();
    env.write("roger.toml", &text);
    std::fs::create_dir_all(env.path("logs")).unwrap();
    let args: Vec<String> = [
        "--config",
        env.path("roger.toml").to_str().unwrap(),
        "watch",
        "--",
        fake_train().to_str().unwrap(),
        "--log",
        env.path("logs/train_log.jsonl").to_str().unwrap(),
        "--ckpt-dir",
        env.path("checkpoints").to_str().unwrap(),
        "--config",
        env.path("roger.toml").to_str().unwrap(),
        "--pid-file",
        env.path("pids.txt").to_str().unwrap(),
        "--steps",
        "100000",
        "--step-ms",
        "30",
        "--save-every",
        "10",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut c = roger(&env, &args);
    c.env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_NODEID")
        .stdout(std::fs::File::create(env.path("watch.out")).unwrap())
        .stderr(std::fs::File::create(env.path("watch.err")).unwrap());
    let mut child = c.spawn().unwrap();
    let latest = || -> Option<u64> {
        let v: serde_json::Value =
            serde_json::from_str(&env.read("checkpoints/latest.json")).ok()?;
        v["step"].as_u64()
    };
    poll_until(
        "a first publish",
        std::time::Duration::from_secs(60),
        || latest().is_some(),
    );
    let before = latest().unwrap();

    let stopped = kubelet::terminate(&mut child, std::time::Duration::from_secs(grace));
    let err = env.read("watch.err");
    assert!(
        !stopped.killed,
        "the kubelet had to SIGKILL roger after {grace} s\n{err}"
    );
    let code = stopped.status.code().unwrap_or(-1) as i64;
    assert!(
        ignored.contains(&code),
        "roger exited {code} after the SIGTERM; job.yaml ignores {ignored:?}\n{err}"
    );
    let recs = records(&env);
    let events: Vec<&str> = recs.iter().filter_map(|r| r.str_field("event")).collect();
    let notice = event(&recs, "preempt_notice");
    assert_eq!(notice.len(), 1, "{events:?}");
    assert_eq!(notice[0].str_field("notice_source"), Some("sigterm"));
    assert_eq!(
        event(&recs, "preempt_saved").len(),
        1,
        "the hand-off did not save: {events:?}\n{:?}\n{err}",
        event(&recs, "preempt_save_missed")
    );
    assert!(
        latest().unwrap() > before,
        "the hand-off's save is the latest"
    );
    env.run(&["--config", "roger.toml", "ledger", "verify"])
        .expect(0);
    let p = pids(&env);
    assert!(!p.is_empty());
    for pid in p {
        assert!(!alive(pid), "pid {pid} of the run outlived the pod's roger");
    }
    eprintln!(
        "kubelet sequence: SIGTERM -> exit {code} in {:.1} s (grace {grace} s)",
        stopped.took.as_secs_f64()
    );
}
