//! On a filesystem with reflinks (btrfs, on a loop image the test makes as root), `--detach`
//! snapshots the source, so the caller may overwrite or delete it at once and the publish
//! still carries the bytes it queued. Skips with the reason where that is not possible (fails
//! under CI).

use super::{hold_publish_lock, kind};
use crate::publish::{latest, ledger_records, sha256_file, torch_zip};
use crate::util::Env;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A btrfs loop mount, or the component missing for one and how to get it.
fn btrfs_loop(env: &Env) -> Result<Mounted, (&'static str, String)> {
    if !nix::unistd::Uid::effective().is_root() {
        return Err(("root (for a loop mount)", "run the tests as root".into()));
    }
    let io = |e: std::io::Error| ("a writable temp dir", e.to_string());
    let img = env.path("btrfs.img");
    let f = std::fs::File::create(&img).map_err(io)?;
    // Sparse: room for publish's default free-space margin (256 MiB) plus the checkpoints.
    f.set_len(640 << 20).map_err(io)?;
    let mkfs = Command::new("mkfs.btrfs")
        .arg("-q")
        .arg(&img)
        .output()
        .map_err(|e| {
            (
                "mkfs.btrfs",
                format!("apt-get install btrfs-progs; .ci/run does ({e})"),
            )
        })?;
    if !mkfs.status.success() {
        return Err((
            "a working mkfs.btrfs",
            format!("it failed: {}", String::from_utf8_lossy(&mkfs.stderr)),
        ));
    }
    let mnt = env.path("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let m = Command::new("mount")
        .args(["-o", "loop"])
        .arg(&img)
        .arg(&mnt)
        .output()
        .map_err(|e| ("mount", e.to_string()))?;
    if !m.status.success() {
        return Err((
            "a loop mount of a btrfs image",
            format!(
                "loop devices and the btrfs module; mount said: {}",
                String::from_utf8_lossy(&m.stderr)
            ),
        ));
    }
    Ok(Mounted(mnt))
}

fn write(p: &Path, bytes: &[u8]) {
    std::fs::write(p, bytes).unwrap();
}

#[test]
fn on_btrfs_the_reflink_snapshot_is_published_after_the_source_changed() {
    let env = Env::new();
    let mnt = match btrfs_loop(&env) {
        Ok(m) => m,
        Err((component, how)) => {
            crate::util::missing(
                "on_btrfs_the_reflink_snapshot_is_published_after_the_source_changed",
                component,
                &how,
            );
            return;
        }
    };
    let root = mnt.0.clone();
    let ck = root.join("ck");
    let lock = hold_publish_lock(&ck);
    let (a, b) = (root.join("ckpt-1.pt"), root.join("ckpt-2.pt"));
    let original = torch_zip(4 << 20, 1);
    write(&a, &original);
    write(&b, &torch_zip(1 << 20, 2));
    let want = sha256_file(&a);
    env.run(&[
        "publish",
        "--detach",
        a.to_str().unwrap(),
        "--to",
        ck.to_str().unwrap(),
    ])
    .expect(0)
    .stderr_has("reflink snapshot taken");
    // Issue 39: once the destination is known to reflink, the caller's one fsync is its
    // journal line; the clone is made durable by the publisher as it takes the request in
    // (a clone's fsync waits on btrfs's commit behind every write in flight: seconds).
    let counts = env.path("b.counts.json");
    let args = [
        "publish",
        "--detach",
        b.to_str().unwrap(),
        "--to",
        ck.to_str().unwrap(),
    ];
    let mut c = env.cmd(&args);
    c.env("ROGER_FAILPOINT_COUNT", &counts);
    env.run_cmd(c, &args).expect(0);
    let n: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&counts).unwrap()).unwrap();
    assert_eq!(n["fsync"], 1, "the journal line, nothing else: {n}");
    assert_eq!(n["remove_dir"], 0, "{n}");
    assert_eq!(n["wait_child"], 0, "{n}");
    // The caller reuses one file and deletes the other at once.
    write(&a, &torch_zip(2 << 20, 7));
    let want_b = sha256_file(&b);
    std::fs::remove_file(&b).unwrap();
    drop(lock);
    env.run(&[
        "publish",
        "--wait",
        "--to",
        ck.to_str().unwrap(),
        "--timeout",
        "300s",
    ])
    .expect(0);
    assert_eq!(
        sha256_file(&ck.join("ckpt-1.pt")),
        want,
        "the bytes it queued"
    );
    assert_eq!(sha256_file(&ck.join("ckpt-2.pt")), want_b);
    assert_eq!(latest(&ck)["path"], "ckpt-2.pt");
    let recs = ledger_records(&ck.join("roger-ledger.jsonl"));
    assert!(kind(&recs, "publish_queued")
        .iter()
        .all(|r| r["snapshot"] == "reflink"));
    assert_eq!(kind(&recs, "publish").len(), 2);
    // The snapshots are gone with their entries.
    let left: Vec<_> = std::fs::read_dir(ck.join(".roger-queue"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().ends_with(".snap"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
