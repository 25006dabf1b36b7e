//! `roger fetch`: the last good checkpoint from the bucket onto this machine, for scripts and
//! init containers. Rebuilds the ledger from the bucket when there is none here, downloads
//! through staging, verifies the SHA-256 against the record; exit 0 only with a verified file.
//! `--best`: the checkpoint a standing overfitting verdict marks (at or nearest before the
//! best eval): the local copy when its bytes verify, else the bucket's.

use crate::cmd::Global;
use crate::ledger::Ledger;
use crate::remote::{fetch, Remote, Target};
use crate::{exit, outln};
use anyhow::{anyhow, bail, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct FetchArgs {
    /// Exactly this step's checkpoint (default: the last good one).
    #[arg(long, conflicts_with = "best")]
    pub step: Option<u64>,
    /// The checkpoint at (or nearest before) the best eval, as a standing overfitting verdict
    /// of the critic marks it: this machine's copy when it verifies, else the bucket's.
    #[arg(long)]
    pub best: bool,
    /// Where to put it (default: the config's [run] checkpoint_dir).
    #[arg(long, value_name = "DIR")]
    pub to: Option<PathBuf>,
    /// The bucket (default: [publish] remote).
    #[arg(long, value_name = "URL", value_parser = Target::parse_arg)]
    pub remote: Option<Target>,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(global: &Global, args: FetchArgs) -> Result<u8> {
    let cfg = crate::config::discover(global.config.as_deref())?.ok_or_else(|| {
        anyhow!("roger fetch needs the run's config (--config FILE or ./roger.toml): it names the run, its ledger and [remote]")
    })?;
    let mut want = fetch::Want {
        exactly: args.step,
        before_step: None,
    };
    let mut best_words = String::new();
    let remote = Remote::chosen(
        args.remote.as_ref(),
        cfg.publish.remote.as_ref(),
        &cfg.remote,
    );
    let store = remote
        .as_ref()
        .map(crate::remote::store::open)
        .transpose()?;
    let ledger = Ledger::new(cfg.ledger_path());
    if let (Some(store), Some(remote)) = (&store, &remote) {
        if let Some(n) =
            fetch::rebuild_ledger(store.as_ref(), remote, &ledger, &cfg.run.name, "fetch")?
        {
            eprintln!(
                "roger: no ledger here: rebuilt {} from {} ({n} records)",
                ledger.path().display(),
                remote.target.object_url(&remote.target.ledger_key())
            );
        }
    }
    if args.best {
        let recs = ledger.records()?;
        let Some(s) = crate::critic::overfit::standing(&recs, &cfg.run.name) else {
            bail!(
                "no standing overfitting verdict of run {:?} in {}: no best checkpoint is marked (the critic marks one when its eval check warns or fails on overfitting)",
                cfg.run.name,
                ledger.path().display()
            );
        };
        let Some(c) = s.mark.checkpoint.clone() else {
            bail!(
                "overfitting verdict #{} marks no checkpoint: none was published at or before the best eval's step {}",
                s.seq,
                s.mark.step
            );
        };
        best_words = format!(
            "the checkpoint {} the best eval (step {}, loss {}) of overfitting verdict #{}",
            if c.relation == "at" {
                "at"
            } else {
                "nearest before"
            },
            s.mark.step,
            crate::critic::fmt(s.mark.eval_loss),
            s.seq
        );
        let published = crate::checkpoints::published(&recs, &cfg.run.name);
        let here = published
            .iter()
            .find(|p| p.path == std::path::Path::new(&c.path));
        let local = match here {
            Some(p) => crate::checkpoints::verify_on_disk(p).map(|()| p.clone()),
            None => Err("pruned since".into()),
        };
        match local {
            Ok(p) => {
                if args.to.is_some() {
                    eprintln!("roger: the best checkpoint is on this machine: --to is not used");
                }
                if args.json {
                    outln!(
                        "{}",
                        serde_json::json!({"path": p.path, "step": p.step, "sha256": p.sha256,
                            "size": p.size, "best": s, "local": true})
                    );
                } else {
                    outln!("best {}", p.path.display());
                    outln!(
                        "  {best_words}; step {}, {} bytes, sha256 {} (verified on disk against the ledger record)",
                        c.step,
                        p.size,
                        p.sha256
                    );
                }
                return Ok(exit::DONE);
            }
            Err(why) => {
                eprintln!(
                    "roger: the best checkpoint {} is not usable here ({why}): fetching it from the bucket",
                    c.path
                );
                want.exactly = Some(c.step);
            }
        }
    }
    let (Some(remote), Some(store)) = (remote, store) else {
        bail!(
            "{}: no bucket: set [publish] remote = \"s3://bucket/prefix/\" or pass --remote",
            cfg.path.display()
        );
    };
    let dest = match &args.to {
        Some(d) => d.clone(),
        None => cfg.checkpoint_dir()?,
    };
    let dest = std::path::absolute(&dest)?;
    // [cluster] parts = "every-node": only a step every node's part of is verified.
    let mut gate = crate::cluster::parts::gate(crate::cluster::parts::others_of(&cfg));
    match fetch::restore(
        store.as_ref(),
        &remote,
        &ledger,
        &cfg.run.name,
        &dest,
        want,
        "fetch",
        &mut gate,
    )? {
        Ok(f) => {
            for s in &f.skipped {
                eprintln!("roger: passed over {}: {}", s.path.display(), s.why);
            }
            if args.json {
                outln!("{}", serde_json::to_string(&f)?);
            } else {
                outln!("fetched {}", f.path.display());
                if !best_words.is_empty() {
                    outln!("  {best_words}");
                }
                outln!(
                    "  step {}, {} bytes, sha256 {} (verified against the ledger record), from {}",
                    f.step.map_or("unknown".into(), |s| s.to_string()),
                    f.size,
                    f.sha256,
                    f.url
                );
            }
            Ok(exit::DONE)
        }
        Err(skipped) => {
            for s in &skipped {
                eprintln!("roger: passed over {}: {}", s.path.display(), s.why);
            }
            bail!(
                "no good checkpoint{} with a verified copy in {} ({} passed over; the ledger is {})",
                want.exactly.map_or(String::new(), |s| format!(" at step {s}")),
                remote.target.url(),
                skipped.len(),
                ledger.path().display()
            )
        }
    }
}
