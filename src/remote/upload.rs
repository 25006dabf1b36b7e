//! The byte path to and from the bucket. Upload: the local file is read part by part (hashed
//! in order, so a local copy that rotted since its publish is caught) and the parts go up
//! `concurrency` at a time, each with its SHA-256 checksum header; memory held is at most
//! `part_size × concurrency`. Verify: the object is re-read with ranged GETs, `concurrency`
//! at a time, hashed in order, and must equal the recorded SHA-256 — only then does the copy
//! count. Download: the same ranged GETs into a staging file, fsynced, hashed, renamed.

use super::store::{Cond, Store};
use super::{RemoteConfig, VerifyMode};
use crate::digest::{self, FileDigest};
use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::Path;
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
}

/// Upload a file: one PUT below a part, else a multipart upload whose id is handed to
/// `started` before any part is sent (so a killed uploader's upload can be aborted later).
pub fn put_file(
    store: &dyn Store,
    part: &Part,
    cfg: &RemoteConfig,
    started: &mut dyn FnMut(&str, &str) -> Result<()>,
) -> Result<(FileDigest, String, usize)> {
    let mut f = std::fs::File::open(&part.path)
        .with_context(|| format!("opening {}", part.path.display()))?;
    let size = f.metadata()?.len();
    let psize = cfg.part_size.0 as usize;
    let mut h = Sha256::new();
    if size < psize as u64 {
        let mut buf = Vec::with_capacity(size as usize);
        f.read_to_end(&mut buf)
            .with_context(|| format!("reading {}", part.path.display()))?;
        h.update(&buf);
        let n = buf.len() as u64;
        let m = store.put(&part.key, buf, Cond::Overwrite)?;
        let d = FileDigest {
            rel: part.rel.clone(),
            size: n,
            sha256: digest::hex(&h.finalize()),
        };
        return Ok((d, m.etag.unwrap_or_default(), 1));
    }
    let upload = store.create_multipart(&part.key)?;
    started(&part.key, &upload)?;
    let mut ids: Vec<String> = Vec::new();
    let mut total = 0u64;
    let result = (|| -> Result<()> {
        loop {
            // A window of parts read in order (hashed), then sent side by side.
            let mut window: Vec<Vec<u8>> = Vec::new();
            for _ in 0..cfg.concurrency {
                let mut buf = vec![0u8; psize];
                let n = read_full(&mut f, &mut buf)
                    .with_context(|| format!("reading {}", part.path.display()))?;
                buf.truncate(n);
                if n == 0 {
                    break;
                }
                h.update(&buf);
                total += n as u64;
                window.push(buf);
            }
            if window.is_empty() {
                break;
            }
            let base = ids.len();
            let got: Vec<Result<String>> = std::thread::scope(|s| {
                let handles: Vec<_> = window
                    .into_iter()
                    .enumerate()
                    .map(|(i, body)| {
                        let (key, upload) = (&part.key, &upload);
                        s.spawn(move || {
                            store
                                .put_part(key, upload, base + i, body)
                                .map_err(anyhow::Error::from)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| bail!("a part upload panicked")))
                    .collect()
            });
            for g in got {
                ids.push(g?);
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        // Leave no orphaned parts behind (they are billed): abort, then report the cause.
        let _ = store.abort_multipart(&part.key, &upload);
        return Err(e);
    }
    let parts = ids.len();
    let m = match store.complete_multipart(&part.key, &upload, ids) {
        Ok(m) => m,
        Err(e) => {
            let _ = store.abort_multipart(&part.key, &upload);
            return Err(e.into());
        }
    };
    Ok((
        FileDigest {
            rel: part.rel.clone(),
            size: total,
            sha256: digest::hex(&h.finalize()),
        },
        m.etag.unwrap_or_default(),
        parts,
    ))
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

/// Read an object back with ranged GETs (`concurrency` at a time, hashed in order), handing
/// each range to `sink` in order. Returns the digest of what the bucket holds.
pub fn read_object(
    store: &dyn Store,
    key: &str,
    rel: &str,
    cfg: &RemoteConfig,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<FileDigest> {
    let meta = store
        .head(key)?
        .with_context(|| format!("{}: the object is missing", key))?;
    let psize = cfg.part_size.0;
    let mut h = Sha256::new();
    let mut at = 0u64;
    while at < meta.size {
        let ranges: Vec<(u64, u64)> = (0..cfg.concurrency as u64)
            .map(|i| at + i * psize)
            .take_while(|s| *s < meta.size)
            .map(|s| (s, (s + psize).min(meta.size)))
            .collect();
        let got: Vec<Result<Vec<u8>>> = std::thread::scope(|s| {
            let hs: Vec<_> = ranges
                .iter()
                .map(|&(a, b)| {
                    s.spawn(move || store.get_range(key, a, b).map_err(anyhow::Error::from))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| bail!("a ranged GET panicked")))
                .collect()
        });
        for (g, (a, b)) in got.into_iter().zip(&ranges) {
            let bytes = g?;
            if bytes.len() as u64 != b - a {
                bail!(
                    "{key}: a ranged GET of bytes {a}..{b} returned {} bytes (the object is {} bytes)",
                    bytes.len(),
                    meta.size
                );
            }
            h.update(&bytes);
            sink(&bytes)?;
        }
        at = ranges.last().map_or(meta.size, |r| r.1);
    }
    Ok(FileDigest {
        rel: rel.to_string(),
        size: meta.size,
        sha256: digest::hex(&h.finalize()),
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
    let mut local_digests = Vec::new();
    for p in &files {
        let (d, etag, parts) = put_file(store, p, cfg, started)?;
        sent.bytes += d.size;
        sent.parts += parts;
        sent.etags.push(etag);
        local_digests.push(d);
    }
    let local_sha = combined(dir, &local_digests);
    if local_sha != expected {
        bail!(
            "{}: the local bytes hash to {local_sha}, not to {expected} as published: the local copy changed since its publish; not claiming a remote copy",
            local.display()
        );
    }
    sent.upload_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut remote_digests = Vec::new();
    for p in &files {
        let d = match cfg.verify {
            VerifyMode::Read => {
                let d = read_object(store, &p.key, &p.rel, cfg, &mut |_| Ok(()))?;
                sent.verify_bytes += d.size;
                d
            }
            // The server checked each part's SHA-256 on arrival (AWS does); roger checks that
            // the object is there with the size sent. It does not prove the stored bytes.
            VerifyMode::Checksum => {
                let m = store
                    .head(&p.key)?
                    .with_context(|| format!("{}: the object is missing", p.key))?;
                let local = local_digests.iter().find(|d| d.rel == p.rel).cloned();
                let mut d = local.unwrap_or(FileDigest {
                    rel: p.rel.clone(),
                    size: 0,
                    sha256: String::new(),
                });
                if m.size != d.size {
                    d.sha256 = format!("size {} (sent {})", m.size, d.size);
                }
                d.size = m.size;
                d
            }
        };
        remote_digests.push(d);
    }
    sent.verify_s = t1.elapsed().as_secs_f64();
    let remote_sha = combined(dir, &remote_digests);
    if remote_sha != expected {
        let bad: Vec<String> = remote_digests
            .iter()
            .zip(&local_digests)
            .filter(|(r, l)| r.sha256 != l.sha256 || r.size != l.size)
            .map(|(r, l)| {
                format!(
                    "{}: {} bytes hashing to {} in the bucket, {} bytes hashing to {} sent",
                    files
                        .iter()
                        .find(|p| p.rel == r.rel)
                        .map_or(r.rel.as_str(), |p| p.key.as_str()),
                    r.size,
                    r.sha256,
                    l.size,
                    l.sha256
                )
            })
            .collect();
        return Ok(Err(Mismatch {
            got: remote_sha,
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

/// Download a checkpoint (its objects under `key`, as `files` lists them: rel and key) to
/// `dest` through a staging name beside it, fsynced; returns its SHA-256 as publish records
/// it. The caller compares it to the record before using the file.
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
        let mut digests = Vec::new();
        for (rel, k) in &objects {
            if rel.split('/').any(|s| s == ".." || s.is_empty()) && dir {
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
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            let d = read_object(store, k, rel, cfg, &mut |b| {
                out.write_all(b)
                    .with_context(|| format!("writing {}", path.display()))
            })?;
            out.sync_all()
                .with_context(|| format!("fsyncing {}", path.display()))?;
            digests.push(d);
        }
        let sha = combined(dir, &digests);
        let size = digests.iter().map(|d| d.size).sum();
        Ok((sha, size))
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
