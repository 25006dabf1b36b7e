//! `roger publish`: turn flags and config into a `publish::Request`, run it, print the result
//! (human or --json); `--verify` re-hashes a published checkpoint against its ledger record.

use crate::cmd::Global;
use crate::config::remote::{Remote, RemoteConfig, Target as RemoteTarget};
use crate::config::PublishConfig;
use crate::ledger::{Kind, Ledger};
use crate::publish::{self, manifest, names, Outcome, Request};
use crate::sys::disk::{DiskProbe, RealDisk, Space};
use crate::{exit, outln};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};

const AFTER_HELP: &str = "\
Order of work: source checks (size+mtime stable, .pt zip / .safetensors structure) -> free space
(size + [publish] margin) -> lock -> finish or undo what an interrupted publish left, and clean
its leftovers -> copy into a hidden staging name while hashing -> fsync -> drop the page cache
and re-read to verify -> intent file (fsynced) -> rename into place -> fsync the directory ->
ledger record -> latest.json (atomically) -> retention (prune record, then removal).
After a crash or power cut at any point, the next publish, publish --verify, hygiene disk or
watch finishes the publish (the checkpoint had its name) or undoes it (it had not), with a
ledger record saying which.
A source already inside the destination directory is published in place (no copy).
A copy that fails verification is kept as evidence in DIR/.roger-rejected/, never under the
real name; the previous checkpoint and latest.json stay as they were.

Without a config, --to is required (with --verify PATH, DIR defaults to PATH's directory),
the ledger is DIR/roger-ledger.jsonl, the run name is the directory's name. Retention is
opt-in: nothing is pruned unless the config has a [publish] section or --keep-last/--keep-every
is given; every pruned checkpoint is printed and recorded.

Test-only environment knobs (for crash-safety tests, never set in production):
  ROGER_FAILPOINT=NAME        abort at a step boundary: after_lock, after_staging_write,
                              after_fsync, after_verify, after_intent, after_prev_link,
                              after_rename, before_ledger, after_ledger, before_manifest,
                              after_manifest, after_prune_record
  ROGER_FAULT_TRUNCATE_AFTER_FSYNC=BYTES   truncate the staging copy after its fsync
  ROGER_FAULT_TRUNCATE_ONLY=NAME           ... only the staging file named NAME (one shard)
  ROGER_FAKE_FREE_BYTES=BYTES the free space the destination reports
  ROGER_DETACH_NO_PUBLISHER=1 --detach only queues (starts no publisher)
  ROGER_FAILPOINT_COUNT=FILE  --detach writes its fsyncs, dirs made/removed, children
                              started/waited to FILE";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct PublishArgs {
    /// Checkpoint file or directory (HF `checkpoint-N/`, torch DCP) to publish. With
    /// --verify: the published checkpoint to check, or a destination directory (default:
    /// what latest.json points to).
    #[arg(value_name = "PATH", required_unless_present_any = ["verify", "wait", "drain", "upload_drain"])]
    pub src: Option<PathBuf>,
    /// Destination directory (default: the config's [run] checkpoint_dir; required without a
    /// config).
    #[arg(long, value_name = "DIR")]
    pub to: Option<PathBuf>,
    /// The checkpoint's training step (default: parsed from the name: ckpt-12000.pt,
    /// checkpoint-12000/, step_12000, model_step12000.safetensors).
    #[arg(long)]
    pub step: Option<u64>,
    /// Re-hash a published checkpoint from disk against its ledger record: exit 0 matches,
    /// 1 does not (or cannot be checked).
    #[arg(long, conflicts_with_all = ["step", "keep_last", "keep_every", "no_prune"])]
    pub verify: bool,
    /// Retention: keep the newest N checkpoints (default: [publish] keep_last).
    #[arg(long, value_name = "N")]
    pub keep_last: Option<usize>,
    /// Retention: also keep every checkpoint whose step is a multiple of M (0 = off).
    #[arg(long, value_name = "M")]
    pub keep_every: Option<u64>,
    /// Prune nothing this time.
    #[arg(long, conflicts_with_all = ["keep_last", "keep_every"])]
    pub no_prune: bool,
    /// Queue the publish and return at once (a `publish_queued` record; the source must stay
    /// untouched until published, unless a reflink snapshot was taken): a background publisher
    /// copies, verifies and publishes in queue order. Default: [publish] detach.
    #[arg(long, conflicts_with_all = ["verify", "wait"])]
    pub detach: bool,
    /// Publish now, in the foreground, even with [publish] detach = true.
    #[arg(long, conflicts_with_all = ["detach", "verify", "wait"])]
    pub no_detach: bool,
    /// Wait until every publish queued in DIR has been published or rejected (for the end of
    /// a job script); exit 1 if one was rejected or --timeout passed.
    #[arg(long, conflicts_with_all = ["verify", "step", "keep_last", "keep_every", "no_prune"])]
    pub wait: bool,
    /// With --wait: give up after this long (e.g. 30m; default: no limit).
    #[arg(long, value_name = "DURATION", requires = "wait", value_parser = parse_timeout)]
    pub timeout: Option<std::time::Duration>,
    /// Internal: the background publisher of --to DIR (started by --detach).
    #[arg(long, hide = true, requires = "to", conflicts_with_all = ["verify", "wait", "detach"])]
    pub drain: bool,
    /// Also send the checkpoint to this bucket (s3://bucket/prefix/; default: [publish]
    /// remote), verified there by a background uploader; credentials from the environment
    /// or ~/.aws (never the config).
    #[arg(long, value_name = "URL", value_parser = RemoteTarget::parse_arg)]
    pub remote: Option<RemoteTarget>,
    /// Internal: the uploader of --to DIR (started after a publish with a remote).
    #[arg(long, hide = true, requires = "to", conflicts_with_all = ["verify", "wait", "detach", "drain"])]
    pub upload_drain: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    crate::config::units::parse_duration(s)
}

/// Where and under which run a publish goes, from config or flags.
struct Target {
    dest: PathBuf,
    ledger: PathBuf,
    run: String,
    retention: Option<PublishConfig>,
    margin: u64,
    quarantine_dir: PathBuf,
    rollback_margin: u64,
    config: Option<PathBuf>,
    detach: bool,
    remote: Option<Remote>,
}

fn resolve(global: &Global, args: &PublishArgs) -> Result<Target> {
    let overrides = |mut p: PublishConfig| {
        if let Some(n) = args.keep_last {
            p.keep_last = n;
        }
        if let Some(m) = args.keep_every {
            p.keep_every = m;
        }
        p
    };
    let t = match crate::config::discover(global.config.as_deref())? {
        Some(c) => Target {
            dest: match &args.to {
                Some(d) => d.clone(),
                None => c.checkpoint_dir()?,
            },
            ledger: c.ledger_path(),
            run: c.run.name.clone(),
            margin: c.publish.margin.0,
            // Retention is opt-in: a config without [publish] prunes nothing unless asked.
            retention: (c.publish_declared
                || args.keep_last.is_some()
                || args.keep_every.is_some())
            .then(|| overrides(c.publish.clone())),
            quarantine_dir: c.quarantine_dir(),
            rollback_margin: c.watch.rollback_margin_steps,
            config: Some(c.path.clone()),
            detach: c.publish.detach,
            remote: Remote::chosen(args.remote.as_ref(), c.publish.remote.as_ref(), &c.remote),
        },
        None => {
            // `--verify PATH` names the directory itself: PATH's own, whose ledger holds
            // the record (where a publish without a config put it).
            let verified_dir = match (&args.to, args.verify, &args.src) {
                (None, true, Some(p)) => std::path::absolute(p)?.parent().map(Path::to_path_buf),
                _ => None,
            };
            let dest = args.to.clone().or(verified_dir).ok_or_else(|| {
                anyhow!(
                    "--to DIR is required without a config (no --config given and no ./roger.toml)"
                )
            })?;
            let abs = std::path::absolute(&dest)?;
            let run = abs
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("checkpoints")
                .to_string();
            let flags = args.keep_last.is_some() || args.keep_every.is_some();
            Target {
                ledger: abs.join(crate::ledger::DEFAULT_FILE),
                dest,
                run,
                margin: PublishConfig::default().margin.0,
                retention: flags.then(|| overrides(PublishConfig::default())),
                quarantine_dir: abs.join(".roger").join("quarantine"),
                rollback_margin: 0,
                config: None,
                detach: false,
                remote: Remote::chosen(args.remote.as_ref(), None, &RemoteConfig::default()),
            }
        }
    };
    Ok(Target {
        retention: if args.no_prune { None } else { t.retention },
        ..t
    })
}

/// Test-only: `ROGER_FAKE_FREE_BYTES` stands in for the destination's free space.
struct FakeFree(u64);

impl DiskProbe for FakeFree {
    fn space(&self, _: &Path) -> Result<Space> {
        Ok(Space {
            total: self.0,
            avail: self.0,
        })
    }
}

pub(super) fn disk_probe() -> Result<Box<dyn DiskProbe>> {
    match std::env::var("ROGER_FAKE_FREE_BYTES") {
        Ok(v) => Ok(Box::new(FakeFree(v.trim().parse().map_err(|_| {
            anyhow!("ROGER_FAKE_FREE_BYTES={v:?}: expected a byte count")
        })?))),
        Err(_) => Ok(Box::new(RealDisk)),
    }
}

pub fn run(global: &Global, mut args: PublishArgs) -> Result<u8> {
    // `--verify DIR` where DIR is a destination (it holds latest.json) means what latest.json
    // points to, with DIR's records: the same as `--verify --to DIR`.
    if args.verify && args.to.is_none() {
        args.to = args
            .src
            .take_if(|p| p.join(crate::publish::names::MANIFEST_FILE).is_file());
    }
    if args.drain {
        let dest = args.to.clone().expect("clap requires --to with --drain");
        return super::publish_queue::drain(&dest, args.json);
    }
    if args.upload_drain {
        let dest = args
            .to
            .clone()
            .expect("clap requires --to with --upload-drain");
        let d = crate::remote::queue::drain(&dest, &|r| crate::remote::store::open(r))?;
        eprintln!(
            "roger: uploader done: {} verified, {} left queued",
            d.verified, d.left
        );
        return Ok(if d.left == 0 {
            exit::DONE
        } else {
            exit::NOT_DONE
        });
    }
    let t = resolve(global, &args)?;
    if args.verify {
        return verify(&t, args.src.as_deref(), args.json);
    }
    if args.wait {
        return super::publish_queue::wait(&t.dest, &t.ledger, &t.run, args.timeout, args.json);
    }
    let detach = args.detach || (t.detach && !args.no_detach);
    let src = args
        .src
        .clone()
        .expect("clap requires PATH without --verify/--wait");
    let req = Request {
        src,
        dest: t.dest,
        step: args.step,
        run: t.run,
        ledger: t.ledger,
        retention: t.retention,
        margin: t.margin,
        quarantine_dir: t.quarantine_dir,
        rollback_margin: t.rollback_margin,
        config: t.config,
        queue: None,
        remote: t.remote,
    };
    if detach {
        return super::publish_queue::queue_it(&req, args.json);
    }
    // Queued publishes go first: a blocking publish never overtakes them (latest.json would
    // go back to an older step when they land).
    if let Some(dest) = std::fs::canonicalize(&req.dest).ok().filter(|d| d.is_dir()) {
        let queued = publish::queue::pending(&dest)?;
        if !queued.is_empty() {
            eprintln!(
                "roger: {} queued publish(es) in {} go first; waiting for them",
                queued.len(),
                dest.display()
            );
            let ids: Vec<String> = queued.into_iter().map(|q| q.id).collect();
            let exe = publish::publisher::roger_exe();
            publish::publisher::wait_for(&dest, &ids, None, exe.as_deref())?;
        }
    }
    let _progress = publish::progress::on_terminal();
    let mut outcome = publish::publish(&req, disk_probe()?.as_ref(), &crate::sys::SystemClock)?;
    crate::remote::queue::after_publish(&req, &mut outcome)?;
    drop(_progress);
    if args.json {
        outln!("{}", serde_json::to_string(&outcome)?);
    } else {
        print_human(&outcome);
    }
    Ok(exit::DONE)
}

fn print_human(o: &Outcome) {
    use crate::config::units::format_bytes;
    outln!("published {}", o.path.display());
    outln!(
        "  step {}, {} in {} file(s), sha256 {}",
        o.step.map_or("unknown".to_string(), |s| s.to_string()),
        format_bytes(o.size),
        o.files,
        o.sha256
    );
    let how = if o.in_place { "in place, " } else { "" };
    outln!(
        "  verified from disk ({how}{} bytes re-read{}; {} of {} pages cached before the re-read)",
        o.verify_bytes_read,
        if o.verify_direct_io {
            " with O_DIRECT"
        } else {
            ""
        },
        o.pages_resident_before_verify
            .map_or("?".to_string(), |p| p.to_string()),
        o.pages_total.map_or("?".to_string(), |p| p.to_string())
    );
    outln!(
        "  latest.json updated; ledger record #{} in {}",
        o.ledger_seq,
        o.ledger.display()
    );
    if let Some(u) = &o.remote_queued {
        outln!("  queued for {u} (uploaded and verified in the background; publish --wait waits)");
    }
    if o.dir_fsync != "ok" {
        outln!("  warning: {}", o.dir_fsync);
    }
    for r in &o.repaired {
        outln!("  first {r}");
    }
    if !o.cleaned.is_empty() {
        outln!(
            "  cleaned {} leftover(s) of earlier publishes: {}",
            o.cleaned.len(),
            o.cleaned.join(", ")
        );
    }
    for p in &o.pruned {
        match &p.error {
            None => outln!("  pruned {} ({})", p.path.display(), p.reason),
            Some(e) => outln!(
                "  prune of {} recorded but removal failed: {e}",
                p.path.display()
            ),
        }
    }
    for k in &o.kept {
        outln!("  kept {}: {}", k.path.display(), k.why);
    }
}

/// `--verify`: the checkpoint's bytes against its newest publish record (after finishing
/// or undoing what an interrupted publish left).
fn verify(t: &Target, path: Option<&Path>, json: bool) -> Result<u8> {
    publish::recover::try_recover(
        &t.dest,
        &Ledger::new(&t.ledger),
        &t.run,
        "publish",
        chrono::Utc::now(),
    );
    publish::publisher::resume(&t.dest);
    let latest = if path.is_none() {
        Some(manifest::read(&t.dest)?.ok_or_else(|| {
            anyhow!(
                "no {} in {}: nothing published there yet (or pass the PATH to verify)",
                names::MANIFEST_FILE,
                t.dest.display()
            )
        })?)
    } else {
        None
    };
    let target = match (path, &latest) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(l)) => l.target(&t.dest),
        (None, None) => unreachable!("latest is read when no path is given"),
    };
    let target = std::fs::canonicalize(&target)
        .with_context(|| format!("checkpoint {}", target.display()))?;
    let records = Ledger::new(&t.ledger).records()?;
    let by_path = target.display().to_string();
    let twin = target
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(names::PREV_PREFIX));
    let rec = records
        .iter()
        .rev()
        .filter(|r| r.kind == Kind::Publish)
        .find(|r| {
            r.str_field("path") == Some(by_path.as_str())
                // A twin left by a publish killed mid-swap has the bytes of latest.json's record.
                || (twin && latest.as_ref().is_some_and(|l| r.str_field("sha256") == Some(l.sha256.as_str())))
        })
        .ok_or_else(|| {
            anyhow!(
                "no publish record for {} in {}",
                target.display(),
                t.ledger.display()
            )
        })?;
    let want_sha = rec.str_field("sha256").unwrap_or_default();
    let want_size = rec.u64_field("size").unwrap_or(u64::MAX);
    // A torch DCP directory: every shard its .metadata names, whole (said before the hash,
    // which would only say "differs").
    let dcp = if target.is_dir() {
        publish::dcp::check(&target, publish::dcp::is_part(t.config.as_deref()))?
    } else {
        None
    };
    let got = publish::rehash(&target)?;
    let ok = got.sha256 == want_sha && got.size == want_size;
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "ok": ok,
                "record_seq": rec.seq,
                "recorded_sha256": want_sha,
                "recorded_size": want_size,
                "measured": got,
                "dcp": dcp,
            })
        );
    }
    if !ok {
        bail!(
            "{} does not match its publish record #{}: on disk sha256 {} size {}, recorded sha256 {} size {}",
            target.display(),
            rec.seq,
            got.sha256,
            got.size,
            want_sha,
            want_size
        );
    }
    if !json {
        outln!(
            "ok: {} matches publish record #{} (sha256 {}, {} bytes re-read from disk)",
            target.display(),
            rec.seq,
            got.sha256,
            got.verify_bytes_read
        );
        if let Some(d) = &dcp {
            outln!(
                "ok: torch DCP: the {} files its .metadata names hold all {} items ({} bytes)",
                d.files,
                d.items,
                d.bytes
            );
        }
    }
    Ok(exit::DONE)
}

#[cfg(test)]
mod tests {
    #[test]
    fn help_lists_every_failpoint() {
        for fp in crate::publish::failpoint::ALL {
            assert!(super::AFTER_HELP.contains(fp), "{fp} missing from --help");
        }
    }
}
