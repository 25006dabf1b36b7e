//! Power cut before every write, fsync, rename, create and unlink of a `roger fetch` of a
//! directory checkpoint (and after it returned): the checkpoint's real name never holds a
//! partial directory, and once fetch said "fetched", every file of it survives (issue 36:
//! the staging tree's directories were never fsynced, so a cut after the rename could leave
//! a "verified" directory with files missing).

use super::{prepared, sha, Cut, Rig};
use crate::remote::{bytes, BUCKET, PREFIX};
use crate::util::s3;
use crate::util::{Env, Run};
use std::process::{Command, Stdio};

/// The fetching machine: its checkpoints and its ledger on the power-cut disk.
fn config(endpoint: &str) -> String {
    format!(
        "[run]\nname = \"r1\"\ncheckpoint_dir = \"disk/ck\"\nledger = \"disk/roger-ledger.jsonl\"\n\
         [publish]\nremote = \"s3://{BUCKET}/{PREFIX}/\"\n\
         [remote]\nendpoint = \"{endpoint}\"\nmax_retries = 1\ntimeout = \"20s\"\n\
         [gpu]\nsource = \"none\"\n"
    )
}

fn fetch(rig: &Rig) -> Run {
    let args = ["--config", "roger.toml", "fetch"];
    let mut c = Command::new(crate::util::roger_bin());
    c.args(args)
        .current_dir(rig.dir.path())
        .env_remove("ROGER_CONFIG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    s3::apply_env(&mut c);
    let out = c.output().expect("spawn roger");
    Run {
        argv: std::iter::once("roger".to_string())
            .chain(args.iter().map(|s| s.to_string()))
            .collect(),
        out,
        listing: crate::util::listing(rig.dir.path()),
    }
}

#[test]
fn a_fetched_directory_checkpoint_survives_a_power_cut_once_fetch_returned() {
    let test = "a_fetched_directory_checkpoint_survives_a_power_cut";
    let Some(rig) = Rig::new(test) else {
        return;
    };
    let Some(s) = crate::remote::server(test) else {
        return;
    };
    // Another machine published a directory checkpoint (files at two depths) to the bucket.
    let other = Env::new();
    crate::remote::config(&other, &s.endpoint(), "");
    other.write("staging/checkpoint-30/model.bin", bytes(5000, 1));
    other.write("staging/checkpoint-30/optimizer/state.bin", bytes(3000, 2));
    other.write(
        "staging/checkpoint-30/optimizer/deep/rng.bin",
        bytes(100, 3),
    );
    crate::remote::run(
        &other,
        &[
            "--config",
            "roger.toml",
            "publish",
            "staging/checkpoint-30",
            "--step",
            "30",
        ],
    )
    .expect(0);
    crate::remote::wait(&other).expect(0);
    let want = sha(&other.path("ck/checkpoint-30")).unwrap();
    let ledger = std::fs::read(other.path("roger-ledger.jsonl")).unwrap();

    // This machine has the run's ledger (as a fresh machine rebuilds it) and no checkpoint.
    rig.write("roger.toml", config(&s.endpoint()));
    let base = prepared(&rig, &|r: &Rig| {
        std::fs::write(r.disk().join("roger-ledger.jsonl"), &ledger).unwrap();
    });
    let real = rig.disk().join("ck/checkpoint-30");
    rig.cut_everywhere(&base, &fetch, &mut |r: &Rig, cut: &Cut| {
        let ctx = cut.ctx();
        if cut.finished {
            assert!(cut.run.out.status.success(), "{ctx}");
        }
        // The real name: absent, or the whole checkpoint; a returned fetch left it whole.
        match (real.exists(), cut.finished) {
            (true, _) => assert_eq!(
                sha(&real).as_deref(),
                Some(want.as_str()),
                "the fetched directory lost files at the power cut\n{}\n{ctx}",
                crate::util::listing(&r.disk())
            ),
            (false, true) => panic!("fetch returned but its checkpoint is gone\n{ctx}"),
            (false, false) => {}
        }
        // The next fetch on the rebooted disk gives the whole checkpoint.
        let again = fetch(r);
        assert!(
            again.out.status.success(),
            "{}\n--- after\n{ctx}",
            again.report()
        );
        assert_eq!(sha(&real).as_deref(), Some(want.as_str()), "{ctx}");
    });
    eprintln!("fetch of a directory: {} power cuts tried", rig.cuts.get());
}
