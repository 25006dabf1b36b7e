//! A torch Distributed Checkpoint directory through the real `roger publish`: published whole
//! when every shard its `.metadata` names is there and long enough; refused, naming the shard,
//! when one is missing (a node's part never landed); and `publish --verify` of the published
//! copy finds a shard cut short afterwards. The directories are written by
//! tests/fixtures/dcp/make_dcp.py (torch 2.x's layout; see its README for why not torch).

use crate::util::Env;

/// A DCP directory of two ranks at `rel` in `env`.
fn make(env: &Env, rel: &str) {
    let script = crate::util::repo_root().join("tests/fixtures/dcp/make_dcp.py");
    let st = std::process::Command::new("python3")
        .arg(script)
        .arg(env.path(rel))
        .status()
        .expect("python3");
    assert!(st.success(), "make_dcp.py failed");
}

#[test]
fn a_dcp_directory_is_published_only_whole_and_verified_against_its_metadata() {
    let env = Env::new();
    make(&env, "ckpt/step-10");
    let out = env
        .run(&["publish", "ckpt/step-10", "--to", "published"])
        .expect(0);
    assert!(out.stdout().contains("step 10"), "{}", out.stdout());
    let ok = env
        .run(&[
            "publish",
            "--verify",
            "published/step-10",
            "--to",
            "published",
        ])
        .expect(0);
    assert!(
        ok.stdout().contains(
            "ok: torch DCP: the 2 files its .metadata names hold all 6 items (16422 bytes)"
        ),
        "{}",
        ok.stdout()
    );
    // Node 1's shard of step 20 never landed: refused before a byte is copied, naming it.
    make(&env, "ckpt/step-20");
    std::fs::remove_file(env.path("ckpt/step-20/__1_0.distcp")).unwrap();
    let bad = env.run(&["publish", "ckpt/step-20", "--to", "published"]);
    assert_ne!(bad.code(), 0, "{}", bad.stderr());
    let err = bad.stderr();
    assert!(
        err.contains("nothing was published")
            && err.contains("the torch DCP checkpoint is incomplete: __1_0.distcp, named by .metadata, is missing"),
        "{err}"
    );
    assert!(!env.path("published/step-20").exists());
    // A published shard cut short later: --verify names it.
    let shard = env.path("published/step-10/__1_0.distcp");
    let len = std::fs::metadata(&shard).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let cut = env.run(&[
        "publish",
        "--verify",
        "published/step-10",
        "--to",
        "published",
    ]);
    assert_ne!(cut.code(), 0);
    assert!(
        cut.stderr().contains(&format!(
            "__1_0.distcp is {} bytes, but .metadata has items up to byte {len} (cut short)",
            len - 100
        )),
        "{}",
        cut.stderr()
    );
}
