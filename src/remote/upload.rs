//! The byte path to and from the bucket. Upload: the local file is read part by part (hashed
//! in order, so a local copy that rotted since its publish is caught) and the parts go up
//! `concurrency` at a time, each with its SHA-256 checksum header; memory held is at most
//! `part_size × concurrency`. Verify: the object is re-read with ranged GETs, `concurrency`
//! at a time, hashed in order, and must equal the recorded SHA-256 — only then does the copy
//! count. Download: the same ranged GETs into a staging file (or tree), every file and
//! directory fsynced, hashed, renamed, the parent fsynced.

use super::store::{Cond, Store};
use super::{RemoteConfig, VerifyMode};
use crate::digest::{self, FileDigest};
use crate::publish::chain::{ChainHasher, Marks};
use anyhow::{bail, Context, Result};
use sha2::Digest;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One file of a checkpoint and its object.
#[derive(Debug, Clone)]
pub struct Part {
    /// Relative to the checkpoint root ("" for a single-file checkpoint).
    pub rel: String,
    pub path: std::path::PathBuf,
    pub key: String,
}

/// The files of a local checkpoint (a file or a directory) and their keys under `key`.
pub fn files_of(local: &Path, key: &str) -> Result<Vec<Part>> {
    if std::fs::metadata(local)
        .with_context(|| format!("reading {}", local.display()))?
        .is_dir()
    {
        Ok(digest::list_files(local)?
            .into_iter()
            .map(|(rel, path)| Part {
                key: format!("{key}/{rel}"),
                rel,
                path,
            })
            .collect())
    } else {
        Ok(vec![Part {
            rel: String::new(),
            path: local.to_path_buf(),
            key: key.to_string(),
        }])
    }
}

/// The checkpoint's SHA-256 as publish records it, from its files' digests.
pub fn combined(dir: bool, files: &[FileDigest]) -> String {
    if dir {
        digest::dir_digest(files)
    } else {
        files.first().map(|d| d.sha256.clone()).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Sent {
    pub bytes: u64,
    pub parts: usize,
    pub upload_s: f64,
    pub verify_s: f64,
    /// Bytes read back from the bucket to verify (0 with verify = "checksum").
    pub verify_bytes: u64,
    pub etags: Vec<String>,
    /// The objects' version ids, where the bucket keeps versions.
    pub versions: Vec<Option<String>>,
}

/// The verify segment for a file of `size` bytes: about two per connection, 8 to 64 MiB.
pub fn segment_for(size: u64, cfg: &RemoteConfig) -> u64 {
    let per = size / (2 * cfg.concurrency.max(1) as u64);
    per.clamp(8 << 20, 64 << 20).next_multiple_of(1 << 20)
}

/// Upload a file: one PUT below a part, else a multipart upload whose id is handed to
/// `started` before any part is sent (so a killed uploader's upload can be aborted later).
/// The file is read once, in order, hashed (noting the hash state at every verify segment),
/// and its parts go to `concurrency` senders through a rendezvous channel: at most
/// `concurrency` parts in flight plus the one being read.
pub fn put_file(
    store: &dyn Store,
    part: &Part,
    cfg: &RemoteConfig,
    started: &mut dyn FnMut(&str, &str) -> Result<()>,
) -> Result<(Marks, super::store::Meta, usize)> {
    let mut f = std::fs::File::open(&part.path)
        .with_context(|| format!("opening {}", part.path.display()))?;
    let size = f.metadata()?.len();
    let psize = cfg.part_size.0 as usize;
    let mut h = ChainHasher::with_segment(segment_for(size, cfg));
    if size < psize as u64 {
        let mut buf = Vec::with_capacity(size as usize);
        f.read_to_end(&mut buf)
            .with_context(|| format!("reading {}", part.path.display()))?;
        h.update(&buf);
        let m = store.put(&part.key, buf, Cond::Overwrite)?;
        return Ok((h.finish(), m, 1));
    }
    let upload = store.create_multipart(&part.key)?;
    started(&part.key, &upload)?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Vec<u8>)>(0);
    let rx = Mutex::new(rx);
    let done: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let failed = AtomicBool::new(false);
    let read: Result<usize> = std::thread::scope(|s| {
        for _ in 0..cfg.concurrency.max(1) {
            s.spawn(|| loop {
                let next = rx.lock().expect("part queue").recv();
                let Ok((i, body)) = next else { break };
                if failed.load(Ordering::Relaxed) {
                    continue;
                }
                match store.put_part(&part.key, &upload, i, body) {
                    Ok(id) => done.lock().expect("parts").push((i, id)),
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        failure.lock().expect("failure").get_or_insert(e.into());
                    }
                }
            });
        }
        let mut idx = 0;
        let r = loop {
            if failed.load(Ordering::Relaxed) {
                break Ok(idx);
            }
            let mut buf = vec![0u8; psize];
            let n = match read_full(&mut f, &mut buf) {
                Ok(n) => n,
                Err(e) => {
                    break Err(
                        anyhow::Error::from(e).context(format!("reading {}", part.path.display()))
                    )
                }
            };
            if n == 0 {
                break Ok(idx);
            }
            buf.truncate(n);
            h.update(&buf);
            if tx.send((idx, buf)).is_err() {
                break Ok(idx);
            }
            idx += 1;
        };
        drop(tx);
        r
    });
    let error = match read {
        Err(e) => Some(e),
        Ok(_) => failure.into_inner().expect("failure"),
    };
    if let Some(e) = error {
        // Leave no orphaned parts behind (they are billed): abort, then report the cause.
        let _ = store.abort_multipart(&part.key, &upload);
        return Err(e);
    }
    let mut parts = done.into_inner().expect("parts");
    parts.sort_by_key(|p| p.0);
    let n = parts.len();
    let ids = parts.into_iter().map(|p| p.1).collect();
    let m = match store.complete_multipart(&part.key, &upload, ids) {
        Ok(m) => m,
        Err(e) => {
            let _ = store.abort_multipart(&part.key, &upload);
            return Err(e.into());
        }
    };
    Ok((h.finish(), m, n))
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Work items `0..n` on up to `threads` threads; the first error wins.
fn in_parallel(
    n: usize,
    threads: usize,
    work: &(dyn Fn(usize) -> Result<()> + Sync),
) -> Result<()> {
    let next = AtomicUsize::new(0);
    let first: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, n.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || first.lock().expect("first").is_some() {
                    break;
                }
                if let Err(e) = work(i) {
                    first.lock().expect("first").get_or_insert(e);
                }
            });
        }
    });
    match first.into_inner().expect("first") {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Re-read an object with ranged GETs, `concurrency` at a time, each segment hashed from
/// the state the upload noted at its start and checked against the digest noted at its end
/// (the chain argument of `publish::chain`: every segment right means the whole SHA-256
/// matches). Streams: nothing is buffered beyond the transport's chunks. Returns the bytes
/// read, or the first byte range whose bytes in the bucket differ (or the size, when it does).
pub fn verify_object(
    store: &dyn Store,
    key: &str,
    marks: &Marks,
    cfg: &RemoteConfig,
) -> Result<std::result::Result<u64, String>> {
    let meta = store
        .head(key)?
        .with_context(|| format!("{}: the object is missing", key))?;
    if meta.size != marks.size {
        return Ok(Err(format!(
            "{key}: {} bytes in the bucket, {} bytes sent",
            meta.size, marks.size
        )));
    }
    let bad: Mutex<Option<(u64, u64)>> = Mutex::new(None);
    let read = AtomicU64::new(0);
    in_parallel(marks.segments(), cfg.concurrency, &|i| {
        let ((a, b), mut h, end) = marks.segment_check(i);
        let n = store.read_range(key, a, b, &mut |c| {
            h.update(c);
            Ok(())
        })?;
        read.fetch_add(n, Ordering::Relaxed);
        let got: [u8; 32] = h.finalize().into();
        if n != b - a || got != end {
            let mut bad = bad.lock().expect("bad");
            if bad.is_none_or(|(x, _)| a < x) {
                *bad = Some((a, b));
            }
        }
        Ok(())
    })?;
    Ok(match bad.into_inner().expect("bad") {
        None => Ok(read.into_inner()),
        Some((a, b)) => Err(format!(
            "{key}: bytes {a}..{b} in the bucket differ from the bytes sent"
        )),
    })
}

/// Send a whole checkpoint and verify it. `expected` is the publish record's SHA-256: the local
/// bytes must still hash to it (else nothing is claimed), and so must the bucket's.
pub fn send(
    store: &dyn Store,
    local: &Path,
    key: &str,
    expected: &str,
    cfg: &RemoteConfig,
    started: &mut dyn FnMut(&str, &str) -> Result<()>,
) -> Result<std::result::Result<Sent, Mismatch>> {
    let t0 = Instant::now();
    let dir = std::fs::metadata(local)
        .with_context(|| format!("reading {}", local.display()))?
        .is_dir();
    let files = files_of(local, key)?;
    let mut sent = Sent::default();
    let mut marks = Vec::new();
    for p in &files {
        let (m, meta, parts) = put_file(store, p, cfg, started)?;
        sent.bytes += m.size;
        sent.parts += parts;
        sent.etags.push(meta.etag.unwrap_or_default());
        sent.versions.push(meta.version);
        marks.push(m);
    }
    let local_digests: Vec<FileDigest> = files
        .iter()
        .zip(&marks)
        .map(|(p, m)| FileDigest {
            rel: p.rel.clone(),
            size: m.size,
            sha256: m.sha256.clone(),
        })
        .collect();
    let local_sha = combined(dir, &local_digests);
    if local_sha != expected {
        bail!(
            "{}: the local bytes hash to {local_sha}, not to {expected} as published: the local copy changed since its publish; not claiming a remote copy",
            local.display()
        );
    }
    sent.upload_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut bad = Vec::new();
    for (p, m) in files.iter().zip(&marks) {
        let r = match cfg.verify {
            VerifyMode::Read => verify_object(store, &p.key, m, cfg)?,
            // The server checked each part's SHA-256 on arrival (AWS does); roger checks that
            // the object is there with the size sent. It does not prove the stored bytes.
            VerifyMode::Checksum => {
                let got = store
                    .head(&p.key)?
                    .with_context(|| format!("{}: the object is missing", p.key))?;
                if got.size == m.size {
                    Ok(0)
                } else {
                    Err(format!(
                        "{}: {} bytes in the bucket, {} bytes sent",
                        p.key, got.size, m.size
                    ))
                }
            }
        };
        match r {
            Ok(n) => sent.verify_bytes += n,
            Err(why) => bad.push(why),
        }
    }
    sent.verify_s = t1.elapsed().as_secs_f64();
    if !bad.is_empty() {
        return Ok(Err(Mismatch {
            got: "differs".into(),
            detail: bad.join("; "),
            keys: files.iter().map(|p| p.key.clone()).collect(),
        }));
    }
    Ok(Ok(sent))
}

/// The bucket holds other bytes than were sent.
#[derive(Debug, Clone)]
pub struct Mismatch {
    pub got: String,
    pub detail: String,
    pub keys: Vec<String>,
}

/// Download a checkpoint (its objects under `key`) to `dest` through a staging name beside
/// it: ranged GETs in parallel, each streamed to its offset in the staging file, every file
/// and directory fsynced, then hashed from the disk (what will be resumed from is what is hashed). Returns its
/// SHA-256 as publish records it and its size; the caller compares them to the record
/// before the file is used. A failure (a full disk, the network) leaves no staging file.
pub fn download(
    store: &dyn Store,
    key: &str,
    dir: bool,
    dest: &Path,
    cfg: &RemoteConfig,
) -> Result<(String, u64)> {
    let parent = dest.parent().unwrap_or(Path::new("."));
    crate::sys::fsx::create_dirs_durably(parent)?;
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let staging = parent.join(format!(".roger-fetch.{name}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let _ = std::fs::remove_file(&staging);
    let objects: Vec<(String, String)> = if dir {
        let prefix = format!("{key}/");
        let mut v: Vec<(String, String)> = store
            .list(&prefix)?
            .into_iter()
            .map(|(k, _)| (k[prefix.len()..].to_string(), k))
            .collect();
        v.sort();
        if v.is_empty() {
            bail!("{}: no objects under {prefix}", store.describe());
        }
        v
    } else {
        vec![(String::new(), key.to_string())]
    };
    let result = (|| -> Result<(String, u64)> {
        for (rel, k) in &objects {
            if dir
                && rel
                    .split('/')
                    .any(|s| s == ".." || s == "." || s.is_empty())
            {
                bail!("{k}: refusing an object name that leaves the checkpoint directory");
            }
            let path = if dir {
                staging.join(rel)
            } else {
                staging.clone()
            };
            if let Some(p) = path.parent() {
                std::fs::create_dir_all(p)?;
            }
            fetch_object(store, k, &path, cfg)?;
        }
        // Every file is fsynced; now every directory of the tree, deepest first, so that
        // the rename below publishes entries that survive a power cut (as publish does).
        if dir {
            crate::sys::fsx::fsync_tree(&staging)?;
        }
        let d = crate::digest::hash_path(&staging)?;
        Ok((d.sha256, d.size))
    })();
    match result {
        Ok(r) => {
            // Only a complete, fsynced download takes the name (a stale one goes first).
            let _ = std::fs::remove_dir_all(dest);
            let _ = std::fs::remove_file(dest);
            std::fs::rename(&staging, dest)
                .with_context(|| format!("renaming {} to {}", staging.display(), dest.display()))?;
            crate::sys::fsx::fsync_dir(parent)?;
            Ok(r)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            let _ = std::fs::remove_file(&staging);
            Err(e)
        }
    }
}

/// One object into a new file: its ranges fetched side by side, each written at its offset.
fn fetch_object(store: &dyn Store, key: &str, path: &Path, cfg: &RemoteConfig) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let meta = store
        .head(key)?
        .with_context(|| format!("{}: {key} is missing", store.describe()))?;
    let out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    let seg = segment_for(meta.size, cfg);
    let n = meta.size.div_ceil(seg) as usize;
    in_parallel(n, cfg.concurrency, &|i| {
        let a = i as u64 * seg;
        let b = (a + seg).min(meta.size);
        let mut at = a;
        let got = store.read_range(key, a, b, &mut |c| {
            out.write_all_at(c, at)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            at += c.len() as u64;
            Ok(())
        })?;
        if got != b - a {
            bail!(
                "{key}: a ranged GET of bytes {a}..{b} returned {got} bytes (the object is {} bytes)",
                meta.size
            );
        }
        Ok(())
    })?;
    out.sync_all()
        .with_context(|| format!("fsyncing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::units::Bytes;
    use crate::remote::store::Memory;

    fn cfg() -> RemoteConfig {
        RemoteConfig {
            part_size: Bytes(1000),
            concurrency: 3,
            ..Default::default()
        }
    }

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 13) as u8).collect()
    }

    #[test]
    fn a_file_goes_up_in_parts_and_verifies() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("ckpt-10.pt");
        std::fs::write(&f, data(7_500)).unwrap();
        let sha = digest::hash_file(&f).unwrap().0;
        let m = Memory::default();
        let mut ids = Vec::new();
        let sent = send(
            &m,
            &f,
            "p/checkpoints/ckpt-10.pt",
            &sha,
            &cfg(),
            &mut |k, u| {
                ids.push((k.to_string(), u.to_string()));
                Ok(())
            },
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (sent.bytes, sent.parts, sent.verify_bytes),
            (7_500, 8, 7_500)
        );
        assert_eq!(
            ids.len(),
            1,
            "the upload id is handed over before the parts"
        );
        assert_eq!(m.uploads_open(), 0);
        assert_eq!(
            m.objects.lock().unwrap()["p/checkpoints/ckpt-10.pt"].0,
            data(7_500)
        );
        let back = d.path().join("back.pt");
        let (got, size) = download(&m, "p/checkpoints/ckpt-10.pt", false, &back, &cfg()).unwrap();
        assert_eq!((got, size), (sha, 7_500));
        assert_eq!(std::fs::read(&back).unwrap(), data(7_500));
    }

    #[test]
    fn a_truncated_object_is_a_mismatch_not_a_copy() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("c.pt");
        std::fs::write(&f, data(500)).unwrap();
        let sha = digest::hash_file(&f).unwrap().0;
        let m = Memory::default();
        m.truncate.lock().unwrap().insert("k".into(), 300);
        let r = send(&m, &f, "k", &sha, &cfg(), &mut |_, _| Ok(())).unwrap();
        let mm = r.unwrap_err();
        assert!(mm.detail.contains("300 bytes"), "{}", mm.detail);
        // With verify = "checksum" the size still catches a truncation.
        m.truncate.lock().unwrap().insert("k".into(), 300);
        let c = RemoteConfig {
            verify: VerifyMode::Checksum,
            ..cfg()
        };
        assert!(send(&m, &f, "k", &sha, &c, &mut |_, _| Ok(()))
            .unwrap()
            .is_err());
    }

    #[test]
    fn a_failed_part_aborts_the_upload() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("c.pt");
        std::fs::write(&f, data(5_000)).unwrap();
        let sha = digest::hash_file(&f).unwrap().0;
        let m = Memory::default();
        *m.fail_parts.lock().unwrap() = 1;
        let e = send(&m, &f, "k", &sha, &cfg(), &mut |_, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("reset"), "{e}");
        assert_eq!(m.uploads_open(), 0, "no orphaned multipart upload");
        assert!(m.objects.lock().unwrap().get("k").is_none());
    }

    #[test]
    fn a_corrupt_segment_is_named_by_its_byte_range() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("c.pt");
        std::fs::write(&f, data(20 << 20)).unwrap();
        let m = Memory::default();
        let c = RemoteConfig {
            part_size: Bytes(5 << 20),
            ..cfg()
        };
        let (marks, _, parts) = put_file(
            &m,
            &Part {
                rel: String::new(),
                path: f.clone(),
                key: "k".into(),
            },
            &c,
            &mut |_, _| Ok(()),
        )
        .unwrap();
        assert_eq!((parts, marks.segments()), (4, 3));
        assert_eq!(verify_object(&m, "k", &marks, &c).unwrap(), Ok(20 << 20));
        m.objects.lock().unwrap().get_mut("k").unwrap().0[9 << 20] ^= 0x10;
        let bad = verify_object(&m, "k", &marks, &c).unwrap().unwrap_err();
        assert_eq!(
            bad,
            "k: bytes 8388608..16777216 in the bucket differ from the bytes sent"
        );
    }

    #[test]
    fn local_rot_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("c.pt");
        std::fs::write(&f, data(100)).unwrap();
        let e = send(
            &Memory::default(),
            &f,
            "k",
            "00",
            &cfg(),
            &mut |_, _| Ok(()),
        )
        .unwrap_err();
        assert!(e.to_string().contains("changed since its publish"), "{e}");
    }

    #[test]
    fn directories_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let c = d.path().join("step-5");
        std::fs::create_dir_all(c.join("sub")).unwrap();
        std::fs::write(c.join("a.bin"), data(2_100)).unwrap();
        std::fs::write(c.join("sub/b.bin"), data(30)).unwrap();
        let sha = digest::hash_path(&c).unwrap().sha256;
        let m = Memory::default();
        send(&m, &c, "p/checkpoints/step-5", &sha, &cfg(), &mut |_, _| {
            Ok(())
        })
        .unwrap()
        .unwrap();
        let back = d.path().join("x/step-5");
        let (got, _) = download(&m, "p/checkpoints/step-5", true, &back, &cfg()).unwrap();
        assert_eq!(got, sha);
        assert_eq!(std::fs::read(back.join("sub/b.bin")).unwrap(), data(30));
    }
}
