use super::*;
use crate::ledger::{test_records, Entry};
use serde_json::json;

fn records() -> Vec<Record> {
    test_records(vec![
        Entry::new(Kind::Watch, "watch", "r").field("event", "start"),
        Entry::new(Kind::Relaunch, "watch", "r"),
        Entry::new(Kind::Relaunch, "watch", "other-run"),
        Entry::new(Kind::Watch, "watch", "r")
            .field("event", "xid")
            .field("xid", 79),
        Entry::new(Kind::Watch, "watch", "r")
            .field("event", "stale_limit")
            .field("limit_s", 42.5)
            .field("in_use", true),
        Entry::new(Kind::Verdict, "critic", "r")
            .step(Some(120))
            .field("status", "fail")
            .field(
                "checks",
                json!([{"check": "loss", "status": "fail"}, {"check": "lr", "status": "pass"}]),
            )
            .field(
                "observation",
                json!({"advanced_at": 1000.0, "window": [
                    {"step": 110, "values": {"tokens_per_s": 10.0}},
                    {"step": 120, "values": {"tokens_per_s": 51000.5}}]}),
            ),
        Entry::new(Kind::Hygiene, "watch", "r")
            .field("check", "disk")
            .field(
                "targets",
                json!([{"role": "checkpoint_dir", "path": "/ck", "hours_to_full": 2.5},
                       {"role": "log", "path": "/l", "hours_to_full": null}]),
            ),
        Entry::new(Kind::Breaker, "watch", "r").field("breaker", "crash_loop"),
    ])
}

#[test]
fn folds_the_runs_records_only() {
    let mut f = Facts::default();
    f.fold(&records(), "r");
    assert_eq!(
        f.relaunches, 1,
        "the other run's relaunch is not this run's"
    );
    assert_eq!(f.xids, 1);
    assert!(f.breaker_open);
    assert_eq!(f.stale_limit_s, Some(42.5));
    assert_eq!(f.verdict.as_deref(), Some("fail"));
    assert_eq!(f.checks.get("loss").map(String::as_str), Some("fail"));
    assert_eq!(f.tokens_per_s, Some(51000.5));
    assert_eq!(f.advanced_at, Some(1000.0));
    assert_eq!(f.verdict_step, Some(120));
    // A target with no forecast has no series (absent, not 0 seconds to full).
    assert_eq!(f.disk_hours.len(), 1);
    // A new watch closes the breaker.
    f.fold(
        &test_records(vec![
            Entry::new(Kind::Watch, "watch", "r").field("event", "start")
        ]),
        "r",
    );
    assert!(!f.breaker_open);
}

#[test]
fn formats_every_metric_with_run_and_source_labels() {
    let mut f = Facts::default();
    f.fold(&records(), "r");
    let live = Live {
        now: 1060.0,
        state: Some("wedge"),
        step: Some(121),
        since_progress_s: Some(30.25),
        stale_limit_s: None,
        goodput: Some(0.75),
        ticks: 7,
        nodes: Vec::new(),
    };
    let text = format("r", "watch", &f, &live);
    for line in [
        "roger_last_tick_timestamp_seconds{run=\"r\",source=\"watch\"} 1060",
        "roger_run_state{run=\"r\",source=\"watch\",state=\"wedge\"} 1",
        "roger_run_state{run=\"r\",source=\"watch\",state=\"working\"} 0",
        "roger_step{run=\"r\",source=\"watch\"} 121",
        "roger_since_progress_seconds{run=\"r\",source=\"watch\"} 30.25",
        "roger_stale_limit_seconds{run=\"r\",source=\"watch\"} 42.5",
        "roger_tokens_per_second{run=\"r\",source=\"watch\"} 51000.5",
        "roger_relaunches_total{run=\"r\",source=\"watch\"} 1",
        "roger_breaker_open{run=\"r\",source=\"watch\"} 1",
        "roger_gpu_xid_events_total{run=\"r\",source=\"watch\"} 1",
        "roger_verdict_status{run=\"r\",source=\"watch\"} 2",
        "roger_check_status{run=\"r\",source=\"watch\",check=\"loss\"} 2",
        "roger_check_status{run=\"r\",source=\"watch\",check=\"lr\"} 0",
        "roger_disk_full_in_seconds{run=\"r\",source=\"watch\",role=\"checkpoint_dir\",path=\"/ck\"} 9000",
        "roger_goodput_ratio{run=\"r\",source=\"watch\"} 0.75",
        "roger_ticks_total{run=\"r\",source=\"watch\"} 7",
        "# TYPE roger_relaunches_total counter",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    // One HELP and TYPE per family, even with several series.
    assert_eq!(text.matches("# TYPE roger_run_state gauge").count(), 1);
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("roger_run_state"))
            .count(),
        STATES.len()
    );
}

#[test]
fn critic_side_derives_silence_from_the_verdict_and_skips_what_it_cannot_know() {
    let mut f = Facts::default();
    f.fold(&records(), "r");
    let live = Live {
        now: 1090.0,
        ..Live::default()
    };
    let text = format("r", "critic", &f, &live);
    assert!(text.contains("roger_since_progress_seconds{run=\"r\",source=\"critic\"} 90\n"));
    assert!(text.contains("roger_step{run=\"r\",source=\"critic\"} 120\n"));
    assert!(!text.contains("roger_run_state"), "{text}");
    assert!(!text.contains("roger_goodput_ratio"), "{text}");
}

#[test]
fn label_values_are_escaped_and_non_finite_values_left_out() {
    let f = Facts {
        tokens_per_s: Some(f64::NAN),
        ..Facts::default()
    };
    let text = format("a\"b\\c\nd", "watch", &f, &Live::default());
    assert!(text.contains("run=\"a\\\"b\\\\c\\nd\""), "{text}");
    assert!(!text.contains("roger_tokens_per_second"), "{text}");
    assert!(!text.contains("NaN"));
}

#[test]
fn write_replaces_the_file_and_leaves_no_staging_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("roger.prom");
    write_textfile(&p, "a 1\n").unwrap();
    write_textfile(&p, "a 2\n").unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "a 2\n");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1);
    let e = write_textfile(&dir.path().join("no/such/roger.prom"), "x").unwrap_err();
    assert!(format!("{e:#}").contains("no/such/roger.prom"), "{e:#}");
}

#[test]
fn goodput_counts_time_by_the_state_in_force() {
    let cfg = crate::config::Config::parse(
        "[run]\nname = \"r\"\n[export]\ntextfile = \"x.prom\"\n",
        Path::new("/tmp/roger.toml"),
    )
    .unwrap();
    let mut e = Exporter::from_config(&cfg, "watch").unwrap();
    assert_eq!(e.path, Path::new("/tmp/x.prom"));
    assert_eq!(e.observe_state(0.0, true), 1.0);
    assert_eq!(e.observe_state(30.0, false), 1.0);
    // 30 s working, then 10 s wedged.
    assert_eq!(e.observe_state(40.0, false), 0.75);
}

#[test]
fn export_config_must_name_a_prom_file() {
    let e = crate::config::Config::parse(
        "[run]\nname = \"r\"\n[export]\ntextfile = \"x.txt\"\n",
        Path::new("roger.toml"),
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("must end in .prom"), "{e:#}");
}

#[test]
fn the_bucket_side_is_exported_when_the_run_has_one() {
    let mut f = Facts::default();
    f.fold(&records(), "r");
    let text = format("r", "watch", &f, &Live::default());
    assert!(!text.contains("roger_remote_"), "no bucket, no series");
    let up = |e: &str, id: &str, step: u64| {
        Entry::new(Kind::Remote, "remote", "r")
            .step(Some(step))
            .field("event", e)
            .field("upload_id", id)
            .field("size", 100)
    };
    f.fold(
        &test_records(vec![
            up("queued", "a", 10),
            up("verified", "a", 10),
            up("queued", "b", 20),
            up("failed", "b", 20),
            up("queued", "c", 30),
        ]),
        "r",
    );
    let text = format(
        "r",
        "watch",
        &f,
        &Live {
            now: 4_000_000_000.0,
            ..Default::default()
        },
    );
    for line in [
        "roger_remote_verified_step{run=\"r\",source=\"watch\"} 10",
        "roger_remote_queued{run=\"r\",source=\"watch\"} 2",
        "roger_remote_queued_bytes{run=\"r\",source=\"watch\"} 200",
        "roger_remote_upload_errors_total{run=\"r\",source=\"watch\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing in\n{text}");
    }
    assert!(text.contains("roger_remote_verified_age_seconds{"));
}

#[test]
fn a_cluster_watch_exports_a_series_per_node() {
    let f = Facts::default();
    let node = |node, step, unheard_s, lost| crate::export::NodeLive {
        node,
        step,
        unheard_s,
        lost,
    };
    let live = Live {
        now: 1000.0,
        nodes: vec![
            node(0, Some(120), 0.0, false),
            node(1, Some(118), 31.5, true),
            node(2, None, 0.2, false),
        ],
        ..Live::default()
    };
    let text = format("r", "watch", &f, &live);
    for line in [
        "roger_cluster_node_step{run=\"r\",source=\"watch\",node=\"0\"} 120\n",
        "roger_cluster_node_step{run=\"r\",source=\"watch\",node=\"1\"} 118\n",
        "roger_cluster_node_unheard_seconds{run=\"r\",source=\"watch\",node=\"1\"} 31.5\n",
        "roger_cluster_node_lost{run=\"r\",source=\"watch\",node=\"1\"} 1\n",
        "roger_cluster_node_lost{run=\"r\",source=\"watch\",node=\"2\"} 0\n",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    assert!(
        !text.contains("node=\"2\"} 0\nroger_cluster_node_step"),
        "no step: no sample"
    );
    assert!(!format("r", "watch", &f, &Live::default()).contains("roger_cluster"));
}
