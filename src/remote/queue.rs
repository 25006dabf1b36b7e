//! The upload queue of one destination (`DEST/.roger-upload/`) and its uploader. A publish
//! that completed locally writes one job (durably) and a `remote` `queued` record, and starts
//! the uploader if none runs: a detached `roger publish --upload-drain --to DEST` (its own
//! session, so it outlives the training script) that holds the uploader lock and works the jobs
//! off oldest first: abort what a killed uploader left open (with a record), send, verify,
//! move the bucket's latest.json, apply retention in the bucket, mirror the ledger, and only
//! then remove the job. Training never waits for any of it (`publish --wait` may).

use super::latest::{self, Moved, RemoteLatest};
use super::records::SOURCE;
use super::store::{Store, StoreError};
use super::{mirror, records, upload, Remote, RemoteConfig, Target};

use crate::ledger::{Entry, Kind, Ledger, Record};
use crate::sys::fsx;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DIR: &str = ".roger-upload";
const LOCK: &str = "uploader.lock";
pub const LOG: &str = "uploader.log";

/// One checkpoint to send: everything the uploader needs, so it runs without the config.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    pub run: String,
    pub ledger: PathBuf,
    /// The bucket and prefix (written as its `s3://bucket/prefix/` URL).
    pub remote: Target,
    pub cfg: RemoteConfig,
    /// The local checkpoint (absolute, as its publish record names it).
    pub path: PathBuf,
    /// Relative to the destination directory: its name under `checkpoints/`.
    pub name: String,
    pub dir: bool,
    pub sha256: String,
    pub size: u64,
    pub step: Option<u64>,
    pub published_at: String,
    /// `[watch] rollback_margin_steps`, for retention in the bucket.
    #[serde(default)]
    pub rollback_margin: u64,
    /// The run's config, which retention in the bucket reads `[cluster] parts` through (the
    /// newest step complete on every node is kept there too).
    #[serde(default)]
    pub config: Option<PathBuf>,
    /// Multipart uploads started and not yet completed or aborted: (key, upload id).
    #[serde(default)]
    pub open: Vec<(String, String)>,
}

pub fn dir(dest: &Path) -> PathBuf {
    dest.join(DIR)
}

fn job_path(dest: &Path, id: &str) -> PathBuf {
    dir(dest).join(format!("{id}.json"))
}

fn save(dest: &Path, job: &Job) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(job)?;
    fsx::write_atomic(
        &job_path(dest, &job.id),
        &bytes,
        fsx::Replace::new(fsx::Durability::Durable, 0o600),
    )?;
    Ok(())
}

/// Jobs waiting, oldest first.
pub fn pending(dest: &Path) -> Result<Vec<Job>> {
    let d = dir(dest);
    let rd = match std::fs::read_dir(&d) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", d.display())),
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json") {
            let text = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
            match serde_json::from_slice::<Job>(&text) {
                Ok(j) => out.push(j),
                Err(e) => tracing::warn!("{}: not an upload job ({e}); left alone", p.display()),
            }
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// What retention in the bucket keeps besides `[remote] keep_last`, from the run's config.
#[derive(Debug, Clone, Default)]
pub struct Keep {
    /// `[watch] rollback_margin_steps`.
    pub rollback_margin: u64,
    /// The run's config (for `[cluster] parts`).
    pub config: Option<PathBuf>,
}

/// Queue a published checkpoint for the bucket; the record first says it is queued.
#[allow(clippy::too_many_arguments)]
pub fn enqueue(
    dest: &Path,
    remote: &Remote,
    ledger: &Ledger,
    run: &str,
    path: &Path,
    sha256: &str,
    size: u64,
    step: Option<u64>,
    keep: &Keep,
) -> Result<Job> {
    let name = path
        .strip_prefix(dest)
        .unwrap_or(path)
        .to_string_lossy()
        .to_string();
    let now = chrono::Utc::now();
    let job = Job {
        id: format!(
            "{:020}-{}",
            now.timestamp_nanos_opt().unwrap_or(0),
            name.replace('/', "_")
        ),
        run: run.to_string(),
        ledger: std::path::absolute(ledger.path())?,
        remote: remote.target.clone(),
        cfg: remote.cfg.clone(),
        path: path.to_path_buf(),
        dir: path.is_dir(),
        name,
        sha256: sha256.to_string(),
        size,
        step,
        published_at: now.to_rfc3339(),
        rollback_margin: keep.rollback_margin,
        // The uploader may run from another directory.
        config: keep
            .config
            .as_deref()
            .map(std::path::absolute)
            .transpose()?,
        open: Vec::new(),
    };
    fsx::create_dirs_durably(&dir(dest))?;
    save(dest, &job)?;
    ledger.append(
        Entry::new(Kind::Remote, "publish", run)
            .step(step)
            .field("event", "queued")
            .field("upload_id", &job.id)
            .field("path", path.display().to_string())
            .field(
                "url",
                remote
                    .target
                    .object_url(&remote.target.checkpoint_key(&job.name)),
            )
            .field("size", size),
        now,
    )?;
    Ok(job)
}

/// After a local publish with a bucket: queue the checkpoint (and any earlier one of this
/// destination that was published but never queued — a crash between its publish and its
/// queueing), then make sure an uploader runs. Sets `remote_queued`.
pub fn after_publish(
    req: &crate::publish::Request,
    out: &mut crate::publish::Outcome,
) -> Result<()> {
    let Some(r) = &req.remote else {
        return Ok(());
    };
    let ledger = Ledger::new(&req.ledger);
    let dest = &out.dir;
    let keep = Keep {
        rollback_margin: req.rollback_margin,
        config: req.config.clone(),
    };
    catch_up(dest, r, &ledger, &req.run, &keep)?;
    if !queued_or_sent(&ledger.records()?, &req.run, &out.path) {
        enqueue(
            dest,
            r,
            &ledger,
            &req.run,
            &out.path,
            &out.sha256,
            out.size,
            out.step,
            &keep,
        )
        .with_context(|| {
            format!(
                "{} is published and recorded, but queueing it for {} failed",
                out.path.display(),
                r.target.url()
            )
        })?;
    }
    let name = out
        .path
        .strip_prefix(dest)
        .unwrap_or(&out.path)
        .to_string_lossy()
        .to_string();
    out.remote_queued = Some(r.target.object_url(&r.target.checkpoint_key(&name)));
    resume(dest);
    Ok(())
}

/// Whether the ledger has this checkpoint queued for, or verified in, the bucket since its
/// newest publish record (a re-publish under the same name is a new checkpoint).
fn queued_or_sent(records: &[Record], run: &str, path: &Path) -> bool {
    let p = path.display().to_string();
    let is = |r: &Record| r.run == run && r.str_field("path") == Some(p.as_str());
    let last_publish = records
        .iter()
        .rposition(|r| r.kind == Kind::Publish && is(r));
    let last_remote = records.iter().rposition(|r| {
        r.kind == Kind::Remote
            && is(r)
            && matches!(r.str_field("event"), Some("queued") | Some("verified"))
    });
    last_remote.is_some() && last_remote > last_publish
}

/// Queue what this destination published for `run` with no queue or bucket record after its
/// publish (and whose file is still here).
pub fn catch_up(
    dest: &Path,
    remote: &Remote,
    ledger: &Ledger,
    run: &str,
    keep: &Keep,
) -> Result<usize> {
    let records = ledger.records()?;
    let dest_abs = std::fs::canonicalize(dest).unwrap_or_else(|_| dest.to_path_buf());
    let mut n = 0;
    for c in crate::checkpoints::published(&records, run) {
        if c.path.parent() != Some(dest_abs.as_path()) || !c.path.exists() {
            continue;
        }
        if queued_or_sent(&records, run, &c.path) {
            continue;
        }
        if pending(dest)?.iter().any(|j| j.path == c.path) {
            continue;
        }
        enqueue(
            dest, remote, ledger, run, &c.path, &c.sha256, c.size, c.step, keep,
        )?;
        n += 1;
    }
    Ok(n)
}

/// Whether an uploader holds the lock of `dest`.
pub fn running(dest: &Path) -> bool {
    dir(dest).is_dir()
        && matches!(
            crate::publish::queue::lock_file(&dir(dest).join(LOCK), true),
            Ok(None)
        )
}

/// Start `roger publish --upload-drain --to DEST` in its own session, output appended to
/// `DEST/.roger-upload/uploader.log`.
pub fn spawn(dest: &Path, exe: &Path) -> Result<u32> {
    crate::sys::detach::spawn(
        exe,
        &["publish", "--upload-drain", "--to"],
        dest,
        &dir(dest).join(LOG),
    )
    .with_context(|| format!("starting the uploader {}", exe.display()))
}

/// When jobs wait in `dest` and no uploader runs, start one. Returns how many wait.
pub fn resume(dest: &Path) -> usize {
    let Ok(jobs) = pending(dest) else { return 0 };
    if jobs.is_empty() || running(dest) {
        return jobs.len();
    }
    if let Some(exe) = crate::publish::publisher::roger_exe() {
        match spawn(dest, &exe) {
            Ok(pid) => eprintln!(
                "roger: {} checkpoint(s) in {} wait for the bucket: uploader started (pid {pid})",
                jobs.len(),
                dest.display()
            ),
            Err(e) => eprintln!(
                "roger: warning: cannot start the uploader for {}: {e:#}",
                dest.display()
            ),
        }
    }
    jobs.len()
}

#[derive(Debug, Default, Serialize)]
pub struct Drained {
    pub verified: usize,
    pub left: usize,
}

/// The uploader: hold the lock (or leave it to the holder), work the jobs off, look again
/// after releasing it so a job queued meanwhile is not stranded.
pub fn drain(dest: &Path, open: &dyn Fn(&Remote) -> Result<Box<dyn Store>>) -> Result<Drained> {
    let mut out = Drained::default();
    loop {
        fsx::create_dirs_durably(&dir(dest))?;
        let Some(lock) = crate::publish::queue::lock_file(&dir(dest).join(LOCK), true)? else {
            return Ok(out);
        };
        let mut stores: Vec<(Target, Box<dyn Store>)> = Vec::new();
        loop {
            let jobs = pending(dest)?;
            let Some(job) = jobs.into_iter().next() else {
                break;
            };
            let remote = Remote {
                target: job.remote.clone(),
                cfg: job.cfg.clone(),
            };
            if !stores.iter().any(|(t, _)| *t == job.remote) {
                match open(&remote) {
                    Ok(s) => stores.push((job.remote.clone(), s)),
                    Err(e) => {
                        // The client cannot even be set up (a bad endpoint): on record, as
                        // the job's attempt, so that --wait and status can say why.
                        let url = remote
                            .target
                            .object_url(&remote.target.checkpoint_key(&job.name));
                        let ledger = Ledger::new(&job.ledger);
                        failed_attempt(&ledger, &job, &url, &e, 1)?;
                        out.left = pending(dest)?.len();
                        return Ok(out);
                    }
                }
            }
            let store = &stores.iter().find(|(t, _)| *t == job.remote).unwrap().1;
            match work(dest, store.as_ref(), &remote, job)? {
                Step::Done => out.verified += 1,
                Step::Dropped => {}
                Step::Stop => {
                    out.left = pending(dest)?.len();
                    return Ok(out);
                }
            }
        }
        drop(lock);
        if pending(dest)?.is_empty() {
            return Ok(out);
        }
    }
}

enum Step {
    Done,
    Dropped,
    /// Leave the rest queued (bad credentials, no bucket, the network gone for minutes):
    /// the next publish, watch or `publish --wait` starts the uploader again.
    Stop,
}

fn record(
    ledger: &Ledger,
    job: &Job,
    event: &str,
    fields: Vec<(&str, serde_json::Value)>,
) -> Result<Record> {
    let mut e = Entry::new(Kind::Remote, SOURCE, &job.run)
        .step(job.step)
        .field("event", event)
        .field("upload_id", &job.id)
        .field("path", job.path.display().to_string());
    for (k, v) in fields {
        e = e.field(k, v);
    }
    let r = ledger.append(e, chrono::Utc::now())?;
    Ok(r)
}

const TRIES: u32 = 5;

/// Whether an error is one that retrying cannot mend ([`StoreError::is_permanent`]).
pub fn permanent(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<StoreError>()
            .is_some_and(StoreError::is_permanent)
    })
}

/// A `failed` record of one upload attempt (`permanent`: the uploader stops on it, no
/// retry), also said on stderr; returns whether it was permanent.
fn failed_attempt(
    ledger: &Ledger,
    job: &Job,
    url: &str,
    e: &anyhow::Error,
    attempt: u32,
) -> Result<bool> {
    use serde_json::json;
    let fatal = permanent(e);
    let msg = super::store::scrub(&format!("{e:#}"));
    record(
        ledger,
        job,
        "failed",
        vec![
            ("url", json!(url)),
            ("error", json!(msg)),
            ("attempt", json!(attempt)),
            ("permanent", json!(fatal)),
            (
                "reason",
                json!(if fatal {
                    "left queued, not retried (a retry cannot mend this): fix the cause; the next publish, roger watch or roger publish --wait tries again"
                } else {
                    "retrying with backoff"
                }),
            ),
        ],
    )?;
    eprintln!(
        "roger: upload of {} to {url} failed (attempt {attempt}{}): {msg}",
        job.path.display(),
        if fatal { ", permanent" } else { "" }
    );
    Ok(fatal)
}

fn work(dest: &Path, store: &dyn Store, remote: &Remote, mut job: Job) -> Result<Step> {
    use serde_json::json;
    let ledger = Ledger::new(&job.ledger);
    let key = remote.target.checkpoint_key(&job.name);
    let url = remote.target.object_url(&key);
    // What a killed uploader left open: abort it (parts are billed until then), on record.
    for (k, id) in std::mem::take(&mut job.open) {
        let r = store.abort_multipart(&k, &id);
        record(
            &ledger,
            &job,
            "aborted",
            vec![
                ("url", json!(remote.target.object_url(&k))),
                ("multipart_id", json!(id)),
                ("reason", json!("an earlier uploader stopped mid-upload (killed, or its machine went away); the upload restarts from the first part")),
                ("error", json!(r.err().map(|e| e.to_string()))),
            ],
        )?;
        eprintln!(
            "roger: aborted an interrupted upload of {}",
            remote.target.object_url(&k)
        );
    }
    save(dest, &job)?;
    if !job.path.exists() {
        record(
            &ledger,
            &job,
            "gave_up",
            vec![
                ("url", json!(url)),
                (
                    "error",
                    json!(format!(
                        "{} is gone from this disk; nothing to upload",
                        job.path.display()
                    )),
                ),
            ],
        )?;
        std::fs::remove_file(job_path(dest, &job.id))?;
        return Ok(Step::Dropped);
    }
    let mut mismatches = 0;
    for attempt in 1..=TRIES {
        let t0 = std::time::Instant::now();
        let (path, sha) = (job.path.clone(), job.sha256.clone());
        let mut started = |k: &str, id: &str| -> Result<()> {
            job.open.push((k.to_string(), id.to_string()));
            save(dest, &job)
        };
        let sent = upload::send(store, &path, &key, &sha, &remote.cfg, &mut started);
        job.open.clear();
        save(dest, &job)?;
        match sent {
            Ok(Ok(s)) => {
                record(
                    &ledger,
                    &job,
                    "verified",
                    vec![
                        ("url", json!(url)),
                        ("name", json!(job.name)),
                        ("dir", json!(job.dir)),
                        ("sha256", json!(job.sha256)),
                        ("size", json!(job.size)),
                        ("verify", json!(remote.cfg.verify.as_str())),
                        ("parts", json!(s.parts)),
                        ("upload_s", json!(s.upload_s)),
                        ("verify_s", json!(s.verify_s)),
                        ("verify_bytes", json!(s.verify_bytes)),
                        ("seconds", json!(t0.elapsed().as_secs_f64())),
                        ("attempt", json!(attempt)),
                    ],
                )?;
                eprintln!(
                    "roger: {} verified in the bucket as {url} ({} bytes, {} part(s), upload {:.1}s, verify {:.1}s)",
                    job.path.display(), job.size, s.parts, s.upload_s, s.verify_s
                );
                after_verified(dest, store, remote, &ledger, &job, s.etags, s.versions)?;
                std::fs::remove_file(job_path(dest, &job.id))?;
                fsx::fsync_dir(&dir(dest))?;
                return Ok(Step::Done);
            }
            Ok(Err(m)) => {
                mismatches += 1;
                record(
                    &ledger,
                    &job,
                    "mismatch",
                    vec![
                        ("url", json!(url)),
                        ("expected", json!(job.sha256)),
                        ("got", json!(m.got)),
                        (
                            "error",
                            json!(format!(
                                "the bucket holds other bytes than were sent: {}",
                                m.detail
                            )),
                        ),
                        (
                            "reason",
                            json!("the remote copy is not used; it is deleted and uploaded again"),
                        ),
                        ("attempt", json!(attempt)),
                    ],
                )?;
                eprintln!(
                    "roger: {url} failed its verification ({}); uploading it again",
                    m.detail
                );
                for k in &m.keys {
                    let _ = store.delete(k);
                }
                if mismatches >= 3 {
                    break;
                }
            }
            Err(e) => {
                let fatal = failed_attempt(&ledger, &job, &url, &e, attempt)?;
                if fatal {
                    return Ok(Step::Stop);
                }
                std::thread::sleep(backoff(attempt));
            }
        }
    }
    let last = ledger
        .records()
        .ok()
        .and_then(|rs| {
            rs.iter()
                .rev()
                .find(|r| {
                    r.kind == Kind::Remote
                        && r.str_field("upload_id") == Some(job.id.as_str())
                        && matches!(r.str_field("event"), Some("failed") | Some("mismatch"))
                })
                .and_then(|r| r.str_field("error").map(str::to_string))
        })
        .unwrap_or_default();
    record(
        &ledger,
        &job,
        "failed",
        vec![
            ("url", json!(url)),
            (
                "error",
                json!(format!(
                    "{TRIES} attempts did not give a verified copy; the last: {last}"
                )),
            ),
            (
                "reason",
                json!("left queued; the next publish, roger watch or roger publish --wait retries"),
            ),
        ],
    )?;
    Ok(Step::Stop)
}

fn backoff(attempt: u32) -> Duration {
    let base = std::env::var("ROGER_UPLOAD_BACKOFF_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000u64);
    Duration::from_millis(base << attempt.min(6))
}

/// A `failed` record for something after the upload (its error scrubbed of secrets).
fn failed(ledger: &Ledger, job: &Job, url: &str, e: &anyhow::Error, reason: &str) -> Result<()> {
    use serde_json::json;
    record(
        ledger,
        job,
        "failed",
        vec![
            ("url", json!(url)),
            ("error", json!(super::store::scrub(&format!("{e:#}")))),
            ("reason", json!(reason)),
        ],
    )
    .map(|_| ())
}

/// After a verified copy: move latest.json, retention in the bucket, mirror the ledger.
fn after_verified(
    dest: &Path,
    store: &dyn Store,
    remote: &Remote,
    ledger: &Ledger,
    job: &Job,
    etags: Vec<String>,
    versions: Vec<Option<String>>,
) -> Result<()> {
    use serde_json::json;
    let url = remote
        .target
        .object_url(&remote.target.checkpoint_key(&job.name));
    let ours = RemoteLatest {
        path: job.name.clone(),
        sha256: job.sha256.clone(),
        size: job.size,
        step: job.step,
        published_at: job.published_at.clone(),
        url: url.clone(),
        etags,
        versions,
        verified_at: chrono::Utc::now().to_rfc3339(),
    };
    match latest::advance(store, &remote.target, &ours) {
        Ok(Moved::Written { etag, races }) => {
            record(
                ledger,
                job,
                if races > 0 { "latest_race" } else { "latest" },
                vec![
                    (
                        "url",
                        json!(remote.target.object_url(&remote.target.latest_key())),
                    ),
                    ("points_to", json!(url)),
                    ("etag", json!(etag)),
                    ("races_lost", json!(races)),
                    ("resolved", json!("by step: ours is newer")),
                ],
            )?;
        }
        Ok(Moved::Kept {
            theirs,
            theirs_path,
            races,
        }) => {
            record(ledger, job, "latest_race", vec![
                ("url", json!(remote.target.object_url(&remote.target.latest_key()))),
                ("points_to", json!(theirs_path)),
                ("theirs_step", json!(theirs)),
                ("races_lost", json!(races)),
                ("resolved", json!("by step: the bucket's latest.json already names a newer (or the same) checkpoint, left as it is")),
            ])?;
        }
        Err(e) => failed(
            ledger,
            job,
            &remote.target.object_url(&remote.target.latest_key()),
            &e,
            "latest.json not moved; the checkpoint's copy is verified",
        )?,
    }
    prune_bucket(dest, store, remote, ledger, job)?;
    match mirror::push(store, &remote.target, ledger.path()) {
        Ok(mirror::Mirrored::Diverged {
            remote_bytes,
            local_bytes,
        }) => {
            record(ledger, job, "mirror_conflict", vec![
                ("url", json!(remote.target.object_url(&remote.target.ledger_key()))),
                ("error", json!(format!("the bucket's ledger ({remote_bytes} bytes) holds records this one ({local_bytes} bytes) does not: another machine wrote there; left alone"))),
            ])?;
        }
        Ok(_) => {}
        Err(e) => failed(
            ledger,
            job,
            &remote.target.object_url(&remote.target.ledger_key()),
            &e,
            "ledger mirror not updated; the next upload tries again",
        )?,
    }
    Ok(())
}

/// The bucket's checkpoints as the ledger sees them: publish records of those with a verified
/// copy, the bucket's own prunes as prunes (local prunes do not remove a bucket copy).
pub fn bucket_view(records: &[Record], run: &str) -> Vec<Record> {
    let copies = records::verified(records, run);
    records
        .iter()
        .filter_map(|r| match r.kind {
            Kind::Publish => {
                let path = r.str_field("path").map(PathBuf::from)?;
                let sha = r.str_field("sha256")?;
                copies
                    .iter()
                    .any(|c| c.path == path && c.sha256 == sha)
                    .then(|| r.clone())
            }
            Kind::Prune => None,
            _ => Some(r.clone()),
        })
        .collect()
}

/// Retention in the bucket: the same rule as the local one (`publish::retention::plan`) over
/// the bucket's checkpoints, `[remote] keep_last` of them; the bucket's latest.json target is
/// never a candidate. Record first, then delete.
fn prune_bucket(
    dest: &Path,
    store: &dyn Store,
    remote: &Remote,
    ledger: &Ledger,
    job: &Job,
) -> Result<()> {
    use serde_json::json;
    if remote.cfg.keep_last == 0 {
        return Ok(());
    }
    let recs = ledger.records()?;
    let view = bucket_view(&recs, &job.run);
    let latest_path = latest::read(store, &remote.target)
        .ok()
        .flatten()
        .map(|(l, _)| dest.join(l.path));
    let policy = crate::config::PublishConfig {
        keep_last: remote.cfg.keep_last,
        ..Default::default()
    };
    let guard = crate::publish::retention::Guard {
        latest: latest_path,
        rollback_margin: job.rollback_margin,
        // The view holds only verified copies: the rule keeps none, but it is stated.
        bucket: Some(remote.target.url()),
        // [cluster] parts: this node's copy of the newest step complete on every node stays,
        // read from the job's store through the run's config as the local retention does.
        complete: job
            .config
            .as_deref()
            .and_then(|p| crate::config::Config::load(p).ok())
            .and_then(|cfg| crate::publish::retention::parts_of(&cfg)),
    };
    let plan =
        crate::publish::retention::plan(&view, &job.run, dest, &policy, &guard, &mut |_| Ok(()));
    let copies = records::verified(&recs, &job.run);
    for c in plan.candidates {
        let Some(copy) = records::copy_of(&copies, &c.checkpoint) else {
            continue;
        };
        let key = copy
            .url
            .strip_prefix(&format!("s3://{}/", remote.target.bucket))
            .unwrap_or(&copy.url)
            .to_string();
        ledger.append(
            Entry::new(Kind::Remote, SOURCE, &job.run)
                .step(c.checkpoint.step)
                .field("event", "pruned")
                .field("url", &copy.url)
                .field("path", c.checkpoint.path.display().to_string())
                .field("size", c.checkpoint.size)
                .field(
                    "reason",
                    format!(
                        "bucket retention (keep_last = {}): {}",
                        remote.cfg.keep_last, c.reason
                    ),
                ),
            chrono::Utc::now(),
        )?;
        let keys: Vec<String> = if copy.dir {
            store
                .list(&format!("{key}/"))?
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        } else {
            vec![key]
        };
        for k in keys {
            if let Err(e) = store.delete(&k) {
                record(
                    ledger,
                    job,
                    "failed",
                    vec![
                        ("url", json!(remote.target.object_url(&k))),
                        ("error", json!(e.to_string())),
                        ("reason", json!("pruning it from the bucket")),
                    ],
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::units::Bytes;
    use crate::remote::store::Memory;
    use std::sync::Arc;

    /// A bucket, a published checkpoint of `size` bytes queued for it, and its ledger.
    fn queued(d: &Path, size: usize) -> (PathBuf, Ledger, Remote) {
        std::env::set_var("ROGER_UPLOAD_BACKOFF_MS", "1");
        let dest = d.join("ckpt");
        std::fs::create_dir_all(&dest).unwrap();
        let ledger = Ledger::new(d.join("roger-ledger.jsonl"));
        let remote = Remote {
            target: Target::parse("s3://bkt/run").unwrap(),
            cfg: RemoteConfig {
                part_size: Bytes(5 << 20),
                ..Default::default()
            },
        };
        let p = dest.join("ckpt-10.pt");
        std::fs::write(&p, vec![7u8; size]).unwrap();
        let sha = crate::digest::hash_file(&p).unwrap().0;
        enqueue(
            &dest,
            &remote,
            &ledger,
            "r",
            &p,
            &sha,
            size as u64,
            Some(10),
            &Keep::default(),
        )
        .unwrap();
        (dest, ledger, remote)
    }

    /// The `failed` records: (attempt, permanent).
    fn failures(ledger: &Ledger) -> Vec<(Option<u64>, Option<bool>)> {
        ledger
            .records()
            .unwrap()
            .iter()
            .filter(|r| r.str_field("event") == Some("failed"))
            .map(|r| {
                (
                    r.u64_field("attempt"),
                    r.get("permanent").and_then(|v| v.as_bool()),
                )
            })
            .collect()
    }

    #[test]
    fn a_permanent_error_is_recorded_once_and_not_retried() {
        let d = tempfile::tempdir().unwrap();
        let (dest, ledger, _) = queued(d.path(), 100);
        let got = drain(&dest, &|_| {
            Err(anyhow::Error::new(StoreError::Config(
                "remote s3://bkt/run/: endpoint refused: ...".into(),
            )))
        })
        .unwrap();
        assert_eq!((got.verified, got.left), (0, 1));
        assert_eq!(failures(&ledger), vec![(Some(1), Some(true))]);
        // Refused credentials and a missing bucket are permanent too; a reset is not.
        for (e, perm) in [
            (StoreError::Denied("access denied".into()), true),
            (StoreError::NotFound("no such bucket".into()), true),
            (StoreError::Other("connection reset by peer".into()), false),
            (StoreError::Conflict("raced".into()), false),
        ] {
            let e = anyhow::Error::new(e).context("uploading part 1 of s3://bkt/run/x");
            assert_eq!(permanent(&e), perm, "{e:#}");
        }
    }

    #[test]
    fn a_transient_error_is_retried_to_a_verified_copy() {
        let d = tempfile::tempdir().unwrap();
        let (dest, ledger, _) = queued(d.path(), 6 << 20);
        let mem = Arc::new(Memory::default());
        *mem.fail_parts.lock().unwrap() = 1;
        let m2 = mem.clone();
        let got = drain(&dest, &move |_| Ok(Box::new(m2.clone()) as Box<dyn Store>)).unwrap();
        assert_eq!((got.verified, got.left), (1, 0));
        assert_eq!(failures(&ledger), vec![(Some(1), Some(false))]);
    }

    /// Steps 10, 20 and 30 published in `dest` (their records) and queued for the bucket.
    fn publish_and_queue(dest: &Path, remote: &Remote, ledger: &Ledger, keep: &Keep) {
        for step in [10u64, 20, 30] {
            let p = dest.join(format!("ckpt-{step}.pt"));
            std::fs::write(&p, format!("weights at {step}")).unwrap();
            let sha = crate::digest::hash_file(&p).unwrap().0;
            ledger
                .append(
                    Entry::new(Kind::Publish, "publish", "r")
                        .step(Some(step))
                        .field("path", p.display().to_string())
                        .field("sha256", &sha)
                        .field("size", 14),
                    chrono::Utc::now(),
                )
                .unwrap();
            enqueue(dest, remote, ledger, "r", &p, &sha, 14, Some(step), keep).unwrap();
        }
    }

    #[test]
    fn jobs_upload_verify_move_latest_prune_and_mirror() {
        std::env::set_var("ROGER_UPLOAD_BACKOFF_MS", "1");
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("ckpt");
        std::fs::create_dir_all(&dest).unwrap();
        let ledger = Ledger::new(d.path().join("roger-ledger.jsonl"));
        let remote = Remote {
            target: Target::parse("s3://bkt/run").unwrap(),
            cfg: RemoteConfig {
                keep_last: 2,
                part_size: Bytes(5 << 20),
                ..Default::default()
            },
        };
        let mem = Arc::new(Memory::default());
        *mem.fail_parts.lock().unwrap() = 0;
        publish_and_queue(&dest, &remote, &ledger, &Keep::default());
        // A killed uploader's open multipart upload, recorded in the first job.
        let mut jobs = pending(&dest).unwrap();
        let id = mem.create_multipart("run/checkpoints/ckpt-10.pt").unwrap();
        jobs[0].open.push(("run/checkpoints/ckpt-10.pt".into(), id));
        save(&dest, &jobs[0]).unwrap();
        let m2 = mem.clone();
        let got = drain(&dest, &move |_| Ok(Box::new(m2.clone()) as Box<dyn Store>)).unwrap();
        assert_eq!(got.verified, 3);
        assert!(pending(&dest).unwrap().is_empty());
        assert_eq!(mem.uploads_open(), 0, "the interrupted upload was aborted");
        let recs = ledger.records().unwrap();
        let ev: Vec<&str> = recs.iter().filter_map(|r| r.str_field("event")).collect();
        assert!(ev.contains(&"aborted"), "{ev:?}");
        assert_eq!(ev.iter().filter(|e| **e == "verified").count(), 3);
        assert_eq!(ev.iter().filter(|e| **e == "pruned").count(), 1, "{ev:?}");
        let keys: Vec<String> = mem.objects.lock().unwrap().keys().cloned().collect();
        assert!(
            !keys.contains(&"run/checkpoints/ckpt-10.pt".to_string()),
            "{keys:?}"
        );
        assert!(keys.contains(&"run/checkpoints/ckpt-30.pt".to_string()));
        let l = latest::read(mem.as_ref(), &remote.target)
            .unwrap()
            .unwrap()
            .0;
        assert_eq!(l.step, Some(30));
        // The mirror holds the records up to the last mirror (taken after the prune).
        let mirrored = mem.objects.lock().unwrap()["run/roger-ledger.jsonl"]
            .0
            .clone();
        assert!(std::fs::read(ledger.path()).unwrap().starts_with(&mirrored));
        assert!(crate::ledger::scan_bytes(&mirrored).first_break().is_none());
    }

    /// `[cluster] parts = "every-node"`: the bucket keeps this node's copy of the newest step
    /// every node's part of is verified (node 1 lists 10 only), though keep_last = 1.
    #[test]
    fn the_bucket_keeps_the_newest_complete_step() {
        std::env::set_var("ROGER_UPLOAD_BACKOFF_MS", "1");
        crate::publish::retention::read_parts_with(crate::cluster::parts::others_of);
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("ckpt");
        std::fs::create_dir_all(&dest).unwrap();
        let store = d.path().join("job");
        let cfg = d.path().join("roger.toml");
        std::fs::write(
            &cfg,
            format!(
                "[run]\nname = \"r\"\n[cluster]\nstore = \"{}\"\nnode = 0\nnodes = 2\nparts = \"every-node\"\n",
                store.display()
            ),
        )
        .unwrap();
        let peer = crate::cluster::NodeRecord {
            node: 1,
            nodes: 2,
            run: "r".into(),
            seq: 1,
            at: 1.0,
            started_at: 1.0,
            state: "working".into(),
            step: Some(30),
            silent_s: 0.0,
            stacks: None,
            parts: Some(vec![10]),
            part_files: None,
            speeds: None,
        };
        crate::cluster::Store::put(
            &crate::cluster::DirStore::open(&store).unwrap(),
            &crate::cluster::node_key(1),
            &serde_json::to_vec(&peer).unwrap(),
        )
        .unwrap();
        let ledger = Ledger::new(d.path().join("roger-ledger.jsonl"));
        let remote = Remote {
            target: Target::parse("s3://bkt/run").unwrap(),
            cfg: RemoteConfig {
                keep_last: 1,
                ..Default::default()
            },
        };
        let keep = Keep {
            rollback_margin: 0,
            config: Some(cfg),
        };
        publish_and_queue(&dest, &remote, &ledger, &keep);
        let mem = Arc::new(Memory::default());
        let m2 = mem.clone();
        let got = drain(&dest, &move |_| Ok(Box::new(m2.clone()) as Box<dyn Store>)).unwrap();
        assert_eq!(got.verified, 3);
        let keys: Vec<String> = mem.objects.lock().unwrap().keys().cloned().collect();
        assert!(
            keys.contains(&"run/checkpoints/ckpt-10.pt".to_string()),
            "the job's resume point: {keys:?}"
        );
        assert!(keys.contains(&"run/checkpoints/ckpt-30.pt".to_string()));
        assert!(
            !keys.contains(&"run/checkpoints/ckpt-20.pt".to_string()),
            "{keys:?}"
        );
    }
}

#[cfg(test)]
#[path = "queue_retention_tests.rs"]
mod retention_tests;
