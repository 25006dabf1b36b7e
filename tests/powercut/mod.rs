//! Power-cut tests: the real binary runs against a FUSE filesystem (`fs`) that forgets
//! everything not fsynced at a simulated power cut. Each scenario counts the mutating
//! operations (writes, fsyncs, renames, creates, links, unlinks) of one command, then cuts
//! power before each of them in turn — and once more after the command returned — reboots
//! with only the durable state, and checks what the disk holds and what the next commands
//! make of it. Skips (with a message; fails under CI) where FUSE cannot be mounted.

mod detach;
mod drvfs;
mod fetch;
mod fs;
mod publish;
mod quarantine;
mod state;

use crate::util::{roger_bin, Run};
use fs::Mounted;
use state::State;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A temp dir with a FUSE mount point `disk/` and room for sources outside it.
pub struct Rig {
    pub dir: tempfile::TempDir,
    /// Cut points tried so far (reported at the end of each test).
    pub cuts: std::cell::Cell<u64>,
}

impl Rig {
    /// `None` when FUSE cannot be mounted here (through `util::missing`: a SKIPPED line naming
    /// `test`, a failure under CI).
    pub fn new(test: &str) -> Option<Rig> {
        let rig = Rig {
            dir: tempfile::tempdir().expect("temp dir"),
            cuts: std::cell::Cell::new(0),
        };
        std::fs::create_dir_all(rig.disk()).unwrap();
        match Mounted::mount(State::new(), &rig.disk()) {
            Ok(m) => {
                // A mount that answers is a mount that works.
                let probe = std::fs::write(rig.disk().join("probe"), b"x");
                drop(m);
                if let Err(e) = probe {
                    crate::util::missing(
                        test,
                        "a FUSE mount that answers",
                        &format!("writing through it said: {e}"),
                    );
                    return None;
                }
                Some(rig)
            }
            Err(e) => {
                crate::util::missing(
                    test,
                    "permission to mount a FUSE filesystem",
                    &format!("needs /dev/fuse and root; mounting said: {e}"),
                );
                None
            }
        }
    }

    pub fn disk(&self) -> PathBuf {
        self.dir.path().join("disk")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    pub fn mount(&self, state: State) -> Mounted {
        Mounted::mount(state, &self.disk()).expect("mount worked before")
    }

    /// `roger ARGS` with the temp dir as working directory.
    pub fn roger(&self, args: &[&str]) -> Run {
        self.roger_with(args, &[])
    }

    /// `roger ARGS` with extra environment variables.
    pub fn roger_with(&self, args: &[&str], envs: &[(&str, &str)]) -> Run {
        let mut c = Command::new(roger_bin());
        c.args(args)
            .envs(envs.iter().copied())
            .current_dir(self.dir.path())
            .env_remove("ROGER_CONFIG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        let out = c.output().expect("spawn roger");
        Run {
            argv: std::iter::once("roger".to_string())
                .chain(args.iter().map(|s| s.to_string()))
                .collect(),
            out,
            listing: crate::util::listing(self.dir.path()),
        }
    }

    /// Run `command` on `base` with power cut before its `n`th mutating operation (after
    /// it returned, when it has fewer): where the cut fell, and the state after the reboot.
    pub fn cut_at(&self, base: &State, n: u64, command: &dyn Fn(&Rig) -> Run) -> (Cut, State) {
        let mut state = base.clone();
        state.cut_at = Some(n);
        let m = self.mount(state);
        let run = command(self);
        let after = m.unmount();
        let finished = !after.dead;
        if finished && std::env::var_os("ROGER_POWERCUT_LOG").is_some() {
            eprintln!("operations:\n{}", after.log.join("\n"));
        }
        self.cuts.set(self.cuts.get() + 1);
        let cut = Cut {
            n,
            finished,
            op: if finished {
                format!("after the command returned ({} operations)", after.ops)
            } else {
                after.log.last().cloned().unwrap_or_default()
            },
            ops_before: after.log[..after.log.len() - usize::from(!finished)].to_vec(),
            run,
        };
        (cut, after.reboot())
    }

    /// Run `command` on `base` with power cut before its 1st, 2nd, ... mutating operation,
    /// and finally after it returned. After each cut `check` gets the rebooted, mounted disk
    /// and where the cut fell.
    pub fn cut_everywhere(
        &self,
        base: &State,
        command: &dyn Fn(&Rig) -> Run,
        check: &mut dyn FnMut(&Rig, &Cut),
    ) {
        for n in 1.. {
            let (cut, rebooted) = self.cut_at(base, n, command);
            let m = self.mount(rebooted);
            check(self, &cut);
            drop(m);
            if cut.finished {
                break;
            }
        }
    }
}

/// Where power was cut, for the checks and their messages.
pub struct Cut {
    pub n: u64,
    /// The command had returned: everything it did must have survived.
    pub finished: bool,
    pub op: String,
    pub ops_before: Vec<String>,
    pub run: Run,
}

impl Cut {
    pub fn ctx(&self) -> String {
        format!(
            "power cut #{} before: {}\n--- earlier operations\n{}\n--- the cut command\n{}",
            self.n,
            self.op,
            self.ops_before.join("\n"),
            self.run.report()
        )
    }
}

/// The state after `setup` ran on a fresh disk and everything was synced.
pub fn prepared(rig: &Rig, setup: &dyn Fn(&Rig)) -> State {
    let m = rig.mount(State::new());
    setup(rig);
    let mut s = m.unmount();
    s.sync_all();
    s.reboot()
}

#[test]
fn a_ledger_append_survives_a_power_cut_once_it_returned() {
    let Some(rig) = Rig::new("a_ledger_append_survives_a_power_cut_once_it_returned") else {
        return;
    };
    // A first record in a new ledger in a new directory, then one appended to it.
    for existing in [false, true] {
        let base = prepared(&rig, &|r: &Rig| {
            if existing {
                r.roger(&["ledger", "--ledger", "disk/runs/l.jsonl", "note", "first"])
                    .expect(0);
            }
        });
        let before = usize::from(existing);
        rig.cut_everywhere(
            &base,
            &|r: &Rig| r.roger(&["ledger", "--ledger", "disk/runs/l.jsonl", "note", "second"]),
            &mut |r: &Rig, cut: &Cut| {
                let ledger = r.disk().join("runs/l.jsonl");
                let scan = roger::ledger::Ledger::new(&ledger).scan().unwrap();
                assert!(
                    scan.first_break().is_none(),
                    "{:?}\n{}",
                    scan.problems,
                    cut.ctx()
                );
                let n = scan.records.len();
                if cut.finished {
                    assert!(cut.run.out.status.success(), "{}", cut.ctx());
                    assert_eq!(n, before + 1, "a returned append was lost\n{}", cut.ctx());
                } else {
                    assert!(n == before || n == before + 1, "{}", cut.ctx());
                }
                // The next append chains cleanly after whatever survived.
                r.roger(&["ledger", "--ledger", "disk/runs/l.jsonl", "note", "next"])
                    .expect(0);
                r.roger(&["ledger", "--ledger", "disk/runs/l.jsonl", "verify"])
                    .expect(0);
            },
        );
    }
    eprintln!("ledger append: {} power cuts tried", rig.cuts.get());
}

/// Hash of a file on the mounted disk, if it is there.
pub fn sha(p: &Path) -> Option<String> {
    roger::digest::hash_path(p).ok().map(|d| d.sha256)
}
