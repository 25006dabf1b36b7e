//! `roger fetch`: the last good checkpoint from the bucket onto this machine, for scripts and
//! init containers. Rebuilds the ledger from the bucket when there is none here, downloads
//! through staging, verifies the SHA-256 against the record; exit 0 only with a verified file.

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
    #[arg(long)]
    pub step: Option<u64>,
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
    let remote = Remote::chosen(
        args.remote.as_ref(),
        cfg.publish.remote.as_ref(),
        &cfg.remote,
    )
    .ok_or_else(|| {
        anyhow!(
            "{}: no bucket: set [publish] remote = \"s3://bucket/prefix/\" or pass --remote",
            cfg.path.display()
        )
    })?;
    let dest = match &args.to {
        Some(d) => d.clone(),
        None => cfg.checkpoint_dir()?,
    };
    let dest = std::path::absolute(&dest)?;
    let store = crate::remote::store::open(&remote)?;
    let ledger = Ledger::new(cfg.ledger_path());
    if let Some(n) =
        fetch::rebuild_ledger(store.as_ref(), &remote, &ledger, &cfg.run.name, "fetch")?
    {
        eprintln!(
            "roger: no ledger here: rebuilt {} from {} ({n} records)",
            ledger.path().display(),
            remote.target.object_url(&remote.target.ledger_key())
        );
    }
    let want = fetch::Want {
        exactly: args.step,
        before_step: None,
    };
    match fetch::restore(
        store.as_ref(),
        &remote,
        &ledger,
        &cfg.run.name,
        &dest,
        want,
        "fetch",
    )? {
        Ok(f) => {
            for s in &f.skipped {
                eprintln!("roger: passed over {}: {}", s.path.display(), s.why);
            }
            if args.json {
                outln!("{}", serde_json::to_string(&f)?);
            } else {
                outln!("fetched {}", f.path.display());
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
                args.step.map_or(String::new(), |s| format!(" at step {s}")),
                remote.target.url(),
                skipped.len(),
                ledger.path().display()
            )
        }
    }
}
