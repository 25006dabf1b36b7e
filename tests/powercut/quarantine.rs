//! `quarantine add` at every power cut: the item is always somewhere (at its old path or in
//! the store), and once the command returned, in the store.

use super::{prepared, Cut, Rig};
use std::path::Path;

const BYTES: &[u8] = b"suspect checkpoint bytes";

/// Where the item's bytes are after the reboot: (at the old path, in the store).
fn whereabouts(disk: &Path) -> (bool, bool) {
    let at_old = std::fs::read(disk.join("ck.pt")).is_ok_and(|b| b == BYTES);
    let in_store = std::fs::read_dir(disk.join("q")).is_ok_and(|rd| {
        rd.filter_map(Result::ok)
            .any(|e| std::fs::read(e.path().join("ck.pt")).is_ok_and(|b| b == BYTES))
    });
    (at_old, in_store)
}

#[test]
fn a_quarantined_item_is_never_lost_at_a_power_cut() {
    let Some(rig) = Rig::new("a_quarantined_item_is_never_lost_at_a_power_cut") else {
        return;
    };
    // The store missing, then already there.
    for store_exists in [false, true] {
        let base = prepared(&rig, &|r: &Rig| {
            std::fs::write(r.disk().join("ck.pt"), BYTES).unwrap();
            if store_exists {
                std::fs::create_dir(r.disk().join("q")).unwrap();
            }
        });
        rig.cut_everywhere(
            &base,
            &|r: &Rig| {
                r.roger(&[
                    "quarantine",
                    "add",
                    "disk/ck.pt",
                    "--reason",
                    "nan",
                    "--dir",
                    "disk/q",
                    "--ledger",
                    "disk/l.jsonl",
                ])
            },
            &mut |r: &Rig, cut: &Cut| {
                let (at_old, in_store) = whereabouts(&r.disk());
                assert!(at_old || in_store, "the item is gone\n{}", cut.ctx());
                if cut.finished {
                    assert!(cut.run.out.status.success(), "{}", cut.ctx());
                    assert!(in_store && !at_old, "{}", cut.ctx());
                }
            },
        );
    }
    eprintln!("quarantine add: {} power cuts tried", rig.cuts.get());
}
