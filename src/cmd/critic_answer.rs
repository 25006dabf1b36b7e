//! The answer cache of the monitors' `roger critic --once`: a check that finds nothing new
//! to file (no new samples, every check as filed) leaves its exact stdout and exit code in
//! `${XDG_CACHE_HOME:-~/.cache}/roger/critic-answers/`, with what it depended on: the working
//! directory, the command line (less the `--now` value), the environment, the roger binary,
//! the config, log and ledger (device, inode, size, mtime, ctime: a file is opened before it
//! is looked at, so NFS revalidates), and the span of clock times over which the same
//! verdict renders to the same bytes (found by judging the same observation at other times).
//! The next identical call answers from it before reading the config — the whole cost is
//! the process start, which is what `tail` pays too.
//!
//! Kept only when the answer cannot depend on anything else: stdout and stderr are not
//! terminals, nothing was said on stderr, the GPU was not asked, no rank logs, a plain log
//! file (not a pattern, not a TensorBoard or MLflow directory), and no file changed during
//! the check or within the last 2 s (a change in the same timestamp tick could keep size and
//! mtime). `ROGER_ANSWER_CACHE=off` turns it off both ways; `=say` notes each answer given
//! from it on stderr.

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use std::ffi::OsString;
use std::hash::{Hash, Hasher};
use std::io::{IsTerminal, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 16] = b"roger-answer-v1\n";
/// A file touched this recently may change again within its timestamp's granularity
/// (2 s on FAT/exFAT/drvfs) without a visible mtime or size change.
const SETTLE_S: i64 = 2;
/// How far from the judged moment the verdict is re-judged to find how long it holds.
const HORIZON_MS: i64 = 400 * 86_400_000;

/// The command line of a monitors' form `critic --once` (`--now`'s value left out: the
/// time is checked against the answer's span instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    argv: Vec<OsString>,
}

impl Request {
    pub fn new(args: &[OsString]) -> Request {
        let mut argv = Vec::with_capacity(args.len());
        let mut skip = false;
        for a in args {
            if std::mem::take(&mut skip) {
                continue;
            }
            skip = a == "--now";
            argv.push(a.clone());
        }
        Request { argv }
    }
}

fn setting() -> Option<OsString> {
    std::env::var_os("ROGER_ANSWER_CACHE")
}

fn disabled() -> bool {
    setting().is_some_and(|v| v == "off")
}

/// Output a stored answer could be replayed onto: no terminal on either side (a terminal
/// may get colours or a progress bar).
fn plain_outputs() -> bool {
    !std::io::stdout().is_terminal() && !std::io::stderr().is_terminal()
}

/// What identifies a file's contents without reading them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileId {
    /// Opened first: on NFS an open revalidates the attributes a bare stat may serve from
    /// cache. Only regular files.
    pub fn of(path: &Path) -> Option<FileId> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::File::open(path).ok()?.metadata().ok()?;
        m.is_file().then(|| FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    fn of_exe() -> Option<FileId> {
        FileId::of(Path::new("/proc/self/exe"))
    }

    /// Changed within [`SETTLE_S`] of `now_s` (or in the future).
    fn unsettled(&self, now_s: i64) -> bool {
        self.mtime.0.max(self.ctime.0) > now_s - SETTLE_S
    }

    fn put(&self, w: &mut Vec<u8>) {
        for v in [self.dev, self.ino, self.size] {
            w.extend_from_slice(&v.to_le_bytes());
        }
        for v in [self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1] {
            w.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn get(r: &mut Reader<'_>) -> Option<FileId> {
        Some(FileId {
            dev: r.u64()?,
            ino: r.u64()?,
            size: r.u64()?,
            mtime: (r.i64()?, r.i64()?),
            ctime: (r.i64()?, r.i64()?),
        })
    }
}

/// The environment as two 64-bit digests (stored instead of the values: they may hold
/// secrets). Any difference, even a variable roger never reads, is a miss: never wrong,
/// only slower.
fn env_digest() -> [u64; 2] {
    let mut out = [0u64; 2];
    for (i, slot) in out.iter_mut().enumerate() {
        let mut h = std::hash::DefaultHasher::new();
        i.hash(&mut h);
        for (k, v) in std::env::vars_os() {
            k.as_bytes().hash(&mut h);
            v.as_bytes().hash(&mut h);
        }
        *slot = h.finish();
    }
    out
}

/// Everything an answer is replayed against.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    cwd: Vec<u8>,
    argv: Vec<Vec<u8>>,
    env: [u64; 2],
    exe: FileId,
    files: Vec<(Vec<u8>, FileId)>,
    /// Clock times (unix ms, inclusive) at which the verdict renders to `stdout`.
    valid_ms: (i64, i64),
    code: u8,
    stdout: Vec<u8>,
}

impl Answer {
    fn encode(&self) -> Vec<u8> {
        let mut w = Vec::with_capacity(512 + self.stdout.len());
        w.extend_from_slice(MAGIC);
        bytes(&mut w, &self.cwd);
        w.extend_from_slice(&(self.argv.len() as u64).to_le_bytes());
        for a in &self.argv {
            bytes(&mut w, a);
        }
        for v in self.env {
            w.extend_from_slice(&v.to_le_bytes());
        }
        self.exe.put(&mut w);
        w.extend_from_slice(&(self.files.len() as u64).to_le_bytes());
        for (p, id) in &self.files {
            bytes(&mut w, p);
            id.put(&mut w);
        }
        w.extend_from_slice(&self.valid_ms.0.to_le_bytes());
        w.extend_from_slice(&self.valid_ms.1.to_le_bytes());
        w.push(self.code);
        bytes(&mut w, &self.stdout);
        w
    }

    /// `None` for anything but a whole answer of this version: a miss, never an error.
    fn decode(data: &[u8]) -> Option<Answer> {
        let mut r = Reader(data.strip_prefix(MAGIC)?);
        let cwd = r.bytes()?.to_vec();
        let n = r.u64()?;
        let mut argv = Vec::new();
        for _ in 0..n {
            argv.push(r.bytes()?.to_vec());
        }
        let env = [r.u64()?, r.u64()?];
        let exe = FileId::get(&mut r)?;
        let n = r.u64()?;
        let mut files = Vec::new();
        for _ in 0..n {
            files.push((r.bytes()?.to_vec(), FileId::get(&mut r)?));
        }
        let valid_ms = (r.i64()?, r.i64()?);
        let code = r.take(1)?[0];
        let stdout = r.bytes()?.to_vec();
        r.0.is_empty().then_some(Answer {
            cwd,
            argv,
            env,
            exe,
            files,
            valid_ms,
            code,
            stdout,
        })
    }
}

fn bytes(w: &mut Vec<u8>, b: &[u8]) {
    w.extend_from_slice(&(b.len() as u64).to_le_bytes());
    w.extend_from_slice(b);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(self.u64()? as i64)
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.take(n)
    }
}

fn argv_bytes(argv: &[OsString]) -> Vec<Vec<u8>> {
    argv.iter().map(|a| a.as_bytes().to_vec()).collect()
}

/// `<cache>/roger/critic-answers/<digest of cwd and command line>`.
fn answer_path(cwd: &[u8], argv: &[OsString]) -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from) {
        Some(x) if x.is_absolute() => x,
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    let mut h = std::hash::DefaultHasher::new();
    cwd.hash(&mut h);
    for a in argv {
        a.as_bytes().hash(&mut h);
    }
    Some(
        base.join("roger/critic-answers")
            .join(format!("{:016x}", h.finish())),
    )
}

fn cwd_bytes() -> Option<Vec<u8>> {
    Some(
        std::env::current_dir()
            .ok()?
            .into_os_string()
            .as_bytes()
            .to_vec(),
    )
}

/// Clock time as the critic judges it: whole milliseconds.
pub fn clock_ms(now: DateTime<Utc>) -> i64 {
    now.timestamp_millis()
}

/// Answer from a stored answer when everything it depended on is as it was: writes its
/// stdout and returns its exit code. `None`: run the check.
pub fn replay(req: &Request, now: Option<DateTime<Utc>>) -> Option<u8> {
    if disabled() || !plain_outputs() {
        return None;
    }
    let cwd = cwd_bytes()?;
    let path = answer_path(&cwd, &req.argv)?;
    let a = Answer::decode(&read_own(&path)?)?;
    let now_ms = clock_ms(now.unwrap_or_else(Utc::now));
    let fits = a.cwd == cwd
        && a.argv
            .iter()
            .map(Vec::as_slice)
            .eq(req.argv.iter().map(|a| a.as_bytes()))
        && (a.valid_ms.0..=a.valid_ms.1).contains(&now_ms)
        && a.env == env_digest()
        && FileId::of_exe() == Some(a.exe)
        && a.files
            .iter()
            .all(|(p, id)| FileId::of(Path::new(std::ffi::OsStr::from_bytes(p))) == Some(*id));
    if !fits {
        return None;
    }
    // A closed pipe drops the output, as `outln!` does.
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&a.stdout).and_then(|_| out.flush());
    if setting().is_some_and(|v| v == "say") {
        eprintln!(
            "roger: note: answered from the answer kept in {} (nothing it read has changed)",
            path.display()
        );
    }
    Some(a.code)
}

/// The file's bytes, if it is ours and only we can write it: an answer someone else could
/// have written is not taken (a shared `XDG_CACHE_HOME`, a directory others may write).
fn read_own(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let mut f = std::fs::File::open(path).ok()?;
    let m = f.metadata().ok()?;
    if m.uid() != nix::unistd::geteuid().as_raw() || m.mode() & 0o022 != 0 {
        return None;
    }
    let mut data = Vec::with_capacity(m.len() as usize);
    f.read_to_end(&mut data).ok()?;
    Some(data)
}

/// A check that may leave its answer: the files it reads, each identified before it is read.
pub struct Pending {
    argv: Vec<OsString>,
    files: Vec<(PathBuf, Option<FileId>)>,
}

impl Pending {
    /// `None` when no answer could be kept or replayed for this call.
    pub fn start(req: Option<&Request>) -> Option<Pending> {
        let req = req?;
        if disabled() || !plain_outputs() {
            return None;
        }
        Some(Pending {
            argv: req.argv.clone(),
            files: Vec::new(),
        })
    }

    /// Call before `path` is read.
    pub fn reads(&mut self, path: &Path) {
        self.files.push((path.to_path_buf(), FileId::of(path)));
    }

    /// An answer may be kept: nothing was said on stderr, and every file read is as it was
    /// before it was read, and settled. `None` needs no saying (something changed).
    pub fn settled(self) -> Option<Settled> {
        if crate::out::spoke_on_stderr() {
            return None;
        }
        let now_s = Utc::now().timestamp();
        let mut files = Vec::with_capacity(self.files.len());
        for (p, before) in &self.files {
            match (before, FileId::of(p)) {
                (Some(b), Some(a)) if *b == a && !a.unsettled(now_s) => {
                    files.push((p.as_os_str().as_bytes().to_vec(), a))
                }
                _ => return None,
            }
        }
        Some(Settled {
            argv: self.argv,
            files,
        })
    }
}

/// A check whose answer rests on these files, as they are.
pub struct Settled {
    argv: Vec<OsString>,
    files: Vec<(Vec<u8>, FileId)>,
}

impl Settled {
    /// Keep the answer. `Ok(false)`: no place for it (no cache directory, no cwd).
    pub fn keep(self, valid_ms: (i64, i64), code: u8, stdout: &[u8]) -> Result<bool> {
        let (Some(cwd), Some(exe)) = (cwd_bytes(), FileId::of_exe()) else {
            return Ok(false);
        };
        let Some(path) = answer_path(&cwd, &self.argv) else {
            return Ok(false);
        };
        let files = self.files;
        let answer = Answer {
            cwd,
            argv: argv_bytes(&self.argv),
            env: env_digest(),
            exe,
            files,
            valid_ms,
            code,
            stdout: stdout.to_vec(),
        };
        write_private(&path, &answer.encode())?;
        if let Some(dir) = path.parent() {
            prune(dir, std::time::SystemTime::now());
        }
        Ok(true)
    }
}

/// An answer not written again in this long is dropped when another is kept (a directory
/// checked once, a command line changed): the cache stays as small as the checks that use it.
/// One still in use is only rebuilt by its next check.
const UNUSED_FOR: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

/// Drop answers last written before `now - UNUSED_FOR` and temporary files left by a check
/// that died while writing one (older than an hour). Only names this module writes.
fn prune(dir: &Path, now: std::time::SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let answer = name.len() == 16 && name.bytes().all(|b| b.is_ascii_hexdigit());
        let temporary = name.starts_with('.') && name.ends_with(".tmp");
        let limit = match (answer, temporary) {
            (true, _) => UNUSED_FOR,
            (_, true) => std::time::Duration::from_secs(3600),
            _ => continue,
        };
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > limit));
        if old {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Written whole or not at all (a temporary file renamed over), readable by the user only.
fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = path.parent().expect("answer path has a directory");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(data)?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("writing {}: {e}", path.display())
    })
}

/// The clock times (unix ms, inclusive, within [`HORIZON_MS`]) around `t0` at which
/// `render` gives `at_t0`; `None` when it does not give it at `t0` itself (what was printed
/// is not what judging the observation again gives). A verdict changes with the clock only through
/// ages that grow with it (staleness), so each rendering holds over one interval: found on
/// each side by steps growing eightfold, then halving to within 1/256 of the distance (an
/// edge found short only costs a check later), then confirmed at 16 points inside (any
/// difference: only `t0` itself). Each rendering is a whole judgement (~80 µs): about 40 to
/// 60 of them.
pub fn valid_span<T: PartialEq>(
    t0: i64,
    at_t0: &T,
    render: &mut dyn FnMut(i64) -> T,
) -> Option<(i64, i64)> {
    if render(t0) != *at_t0 {
        return None;
    }
    let mut edge = |dir: i64| -> i64 {
        // `same` renders as t0 does; `differs` does not.
        let (mut same, mut step) = (0i64, 1i64);
        let mut differs = loop {
            if step > HORIZON_MS {
                // Doubled past the horizon unchanged (a finished run, no age shown).
                if render(t0 + dir * HORIZON_MS) == *at_t0 {
                    return t0 + dir * HORIZON_MS;
                }
                break HORIZON_MS;
            }
            if render(t0 + dir * step) != *at_t0 {
                break step;
            }
            same = step;
            step *= 8;
        };
        while differs - same > (same / 256).max(1) {
            let mid = same + (differs - same) / 2;
            if render(t0 + dir * mid) == *at_t0 {
                same = mid;
            } else {
                differs = mid;
            }
        }
        t0 + dir * same
    };
    let (from, until) = (edge(-1), edge(1));
    let inside = (1..=16).all(|i| render(from + (until - from) / 17 * i) == *at_t0);
    Some(if inside { (from, until) } else { (t0, t0) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Answer {
        let id = FileId {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: (4, 5),
            ctime: (6, -7),
        };
        Answer {
            cwd: b"/tmp/run".to_vec(),
            argv: vec![b"roger".to_vec(), b"critic".to_vec(), b"--once".to_vec()],
            env: [8, 9],
            exe: id,
            files: vec![(b"roger.toml".to_vec(), id), (b"train.jsonl".to_vec(), id)],
            valid_ms: (-10, 20),
            code: 2,
            stdout: b"run: FAIL\n".to_vec(),
        }
    }

    #[test]
    fn an_answer_reads_back_and_anything_else_is_a_miss() {
        let a = sample();
        let data = a.encode();
        assert_eq!(Answer::decode(&data), Some(a));
        // Every truncation, a byte more, another version, garbage: misses, never a panic.
        for n in 0..data.len() {
            assert_eq!(Answer::decode(&data[..n]), None, "cut at {n}");
        }
        let mut longer = data.clone();
        longer.push(0);
        assert_eq!(Answer::decode(&longer), None);
        let mut other = data.clone();
        other[14] = b'2';
        assert_eq!(Answer::decode(&other), None);
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(Answer::decode(&huge), None);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut d = data.clone();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let i = (seed % d.len() as u64) as usize;
            d[i] ^= (seed >> 32) as u8 | 1;
            // A flipped byte decodes to a different answer or to none, never to the same.
            assert_ne!(Answer::decode(&d), Some(sample()));
        }
    }

    /// Whatever a check said on stderr is not in its answer: such a check keeps none.
    #[test]
    fn a_check_that_spoke_on_stderr_keeps_no_answer() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("log");
        std::fs::write(&file, "x").unwrap();
        let mut pending = Pending {
            argv: vec!["roger".into(), "critic".into()],
            files: Vec::new(),
        };
        pending.reads(&file);
        crate::warnln!("(a test's warning: the check said something on stderr)");
        assert!(pending.settled().is_none());
    }

    #[test]
    fn answers_unused_for_30_days_and_dead_temporaries_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let now = std::time::SystemTime::now();
        let day = std::time::Duration::from_secs(86_400);
        let file = |name: &str, age: std::time::Duration| {
            let p = dir.path().join(name);
            std::fs::write(&p, "x").unwrap();
            std::fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(now - age)
                .unwrap();
        };
        file("00112233445566aa", 31 * day);
        file("00112233445566bb", 29 * day);
        file(".00112233445566cc.42.tmp", day);
        file(
            ".00112233445566dd.42.tmp",
            std::time::Duration::from_secs(60),
        );
        file("notes.txt", 400 * day);
        prune(dir.path(), now);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [".00112233445566dd.42.tmp", "00112233445566bb", "notes.txt"]
        );
    }

    #[test]
    fn the_now_value_is_not_part_of_the_request() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let a = Request::new(&args(&["roger", "critic", "--now", "2024-01-01T00:00:00Z"]));
        let b = Request::new(&args(&["roger", "critic", "--now", "2025-01-01T00:00:00Z"]));
        assert_eq!(a, b);
        assert_eq!(a.argv, args(&["roger", "critic", "--now"]));
        assert_ne!(a, Request::new(&args(&["roger", "critic", "--json"])));
    }

    #[test]
    fn the_span_is_where_the_rendering_stays_the_same() {
        // An age printed to the second, as staleness is: the same text for one second.
        let mut calls = 0;
        let mut seconds = |t: i64| {
            calls += 1;
            (t - 1_000_000).div_euclid(1000)
        };
        let (from, until) = valid_span(1_234_567, &234, &mut seconds).unwrap();
        // Found to within 1/256 of the distance, never past the edge.
        assert!((1_234_000..=1_234_002).contains(&from), "{from}");
        assert!((1_234_998..=1_234_999).contains(&until), "{until}");
        assert!(calls < 60, "{calls} renderings");
        // Status flips at a limit, then never changes again: valid to the horizon.
        let mut flip = |t: i64| t > 5_000;
        let (from, until) = valid_span(7_000, &true, &mut flip).unwrap();
        assert!((5_001..=5_008).contains(&from) && until == 7_000 + HORIZON_MS);
        let (from, until) = valid_span(10, &false, &mut flip).unwrap();
        assert!(
            from == 10 - HORIZON_MS && (4_970..=5_000).contains(&until),
            "{until}"
        );
        // Nothing depends on the clock.
        let mut calls = 0;
        let mut constant = |_| {
            calls += 1;
            "same"
        };
        assert_eq!(
            valid_span(0, &"same", &mut constant),
            Some((-HORIZON_MS, HORIZON_MS))
        );
        assert!(calls <= 2 * 13 + 17, "{calls} renderings");
        // Every millisecond different (a JSON age with decimals).
        assert_eq!(valid_span(42, &42, &mut |t| t), Some((42, 42)));
        // Judged again at t0, the rendering is not what was printed: no span at all.
        assert_eq!(valid_span(42, &41, &mut |t| t), None);
        // The same text again after a different one that a step lands in: the span ends
        // before the difference. (One shorter than a step can be stepped over; a verdict's
        // text never comes back, its ages only grow.)
        let mut comes_back = |t: i64| !(300..600).contains(&t);
        let (from, until) = valid_span(0, &true, &mut comes_back).unwrap();
        assert!(
            from == -HORIZON_MS && (298..=299).contains(&until),
            "{until}"
        );
        // A difference the steps go over (between 8^11 ms and the horizon) is caught by the
        // points inside: only t0 itself is trusted.
        let gap = HORIZON_MS / 2 + 1000..=HORIZON_MS / 2 + 1000 + HORIZON_MS / 8;
        assert!(*gap.start() > 1 << 33 && *gap.end() < HORIZON_MS);
        let mut hidden = |t: i64| !gap.contains(&t);
        assert_eq!(valid_span(0, &true, &mut hidden), Some((0, 0)));
    }
}
