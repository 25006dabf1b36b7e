//! `format = "wandb"`: [`WandbRun`] reads the history of a Weights & Biases run from its
//! datastore, `wandb/run-<time>-<id>/run-<id>.wandb` (`offline-run-…` in offline mode).
//!
//! The datastore is a LevelDB log (wandb-core's `core/pkg/leveldb`, the writer `store.go`):
//! a 7-byte file header (`:W&B`, magic 0xBEE1, version 0), then 32 KiB blocks of chunks, each
//! a CRC-32 (IEEE, over the chunk type and the payload), a u16 length and a type (full, or
//! first/middle/last of a record split across blocks); a block's last < 7 bytes are zeros. A
//! record is one `wandb.internal.Record` protobuf; its `history` rows carry `_step`,
//! `_runtime`, `_timestamp` and the user's keys, a nested key (`{"train": {"loss": x}}`) as
//! its parts (read as `train/loss`), each value as JSON.
//!
//! The writer keeps its current block in memory and writes it when it fills (or at a flush):
//! a live file grows by pieces of blocks, and its last record is often cut off. A read stops
//! before the first record not whole yet and takes it up again when the file grows; a record
//! whose checksum fails with more of the file after it is reported with its byte offset and
//! the read goes on at the next block, as LevelDB's reader recovers.
//!
//! `[run] log` names a `wandb/` directory (its `latest-run`, else the newest run directory:
//! followed to a newer run when one starts), one run's directory, or one `.wandb` file. A run
//! resumed with `wandb.init(id=..., resume=...)` writes a new run directory with the same id
//! each launch: they are read in order as one run. Offline, the SDK cannot learn where the run
//! stood and starts `_step` at 0 again; with `step = "_step"` a later launch's `_step` that
//! starts at 0 is continued after the previous launch's last one, as the W&B server numbers a
//! resumed run. A step of the user's own that goes back (resumed from an earlier checkpoint)
//! is read as logged: the critic drops the steps the resume abandoned.

use super::fields::{Fields, Keys, Target};
use super::framed::{self, Cursor, HEAD};
use super::tail::Poll;
use super::{Batch, Garbage, Parsed};
use crate::metrics::mapping::MetricsConfig;
use anyhow::{bail, Context, Result};
use prost::Message;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The datastore's file header: ident `:W&B`, magic 0xBEE1 (little-endian), version 0.
pub const FILE_HEADER: [u8; 7] = [b':', b'W', b'&', b'B', 0xe1, 0xbe, 0x00];
const BLOCK: u64 = 32 * 1024;
const CHUNK_HEADER: u64 = 7;
const FULL: u8 = 1;
const FIRST: u8 = 2;
const MIDDLE: u8 = 3;
const LAST: u8 = 4;
/// Read size for a large file.
const READ: usize = 8 << 20;

/// The CRC-32 (IEEE, reflected, polynomial 0xEDB88320) byte table.
const TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// CRC-32 (IEEE 802.3, zlib's), the datastore's chunk checksum.
pub fn crc32(data: &[u8]) -> u32 {
    crc32_with(&[], data)
}

/// CRC-32 of `first` then `data`, as if they were one slice (a chunk's type and payload).
fn crc32_with(first: &[u8], data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in first.iter().chain(data) {
        c = TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// One record of a scanned stretch of a datastore.
#[derive(Debug, PartialEq)]
pub enum Item {
    /// A whole record: the byte offset of its first chunk, and its payload.
    Record(u64, Vec<u8>),
    /// Damaged bytes at `offset`: what was wrong; the read went on at `next`.
    Damaged { offset: u64, next: u64, why: String },
}

/// Split `buf`, the file's bytes from byte `base` (a chunk boundary past the file header),
/// into records. Returns them and where the next read starts: after the last whole record,
/// so a record still being written (cut off by the end of `buf`, its checksum not matching
/// yet, or the zeros a crash can leave) is read again when there is more.
pub fn scan(buf: &[u8], base: u64) -> (Vec<Item>, u64) {
    let end = base + buf.len() as u64;
    let byte = |at: u64| buf[(at - base) as usize];
    let mut items = Vec::new();
    let mut at = base;
    let mut settled = base;
    // A record split across blocks: where its first chunk starts, and its bytes so far.
    let mut pending: Option<(u64, Vec<u8>)> = None;
    // After damage: the rest of a record the damage cut is passed over, as LevelDB does.
    let mut recovering = false;
    let damaged = |items: &mut Vec<Item>, offset: u64, why: String| {
        let next = (offset / BLOCK + 1) * BLOCK;
        items.push(Item::Damaged { offset, next, why });
        next
    };
    loop {
        let left = BLOCK - at % BLOCK;
        if left < CHUNK_HEADER {
            // The block's zero trailer.
            if at + left > end {
                break;
            }
            at += left;
            if pending.is_none() {
                settled = at;
            }
            continue;
        }
        if at + CHUNK_HEADER > end {
            break;
        }
        let h = &buf[(at - base) as usize..(at - base + CHUNK_HEADER) as usize];
        let crc = u32::from_le_bytes(h[..4].try_into().expect("4 bytes"));
        let len = u64::from(u16::from_le_bytes(h[4..6].try_into().expect("2 bytes")));
        let kind = h[6];
        let rest_zero = || (at..end).all(|i| byte(i) == 0);
        let why = if crc == 0 && len == 0 && kind == 0 {
            if rest_zero() {
                break; // zeros to the end: space a crash left, or not written yet
            }
            Some("a zeroed chunk header before more data".to_string())
        } else if len > left - CHUNK_HEADER {
            Some(format!(
                "chunk length {len} runs past its 32 KiB block ({} bytes left)",
                left - CHUNK_HEADER
            ))
        } else if !(FULL..=LAST).contains(&kind) {
            Some(format!("unknown chunk type {kind}"))
        } else {
            None
        };
        if let Some(why) = why {
            pending = None;
            recovering = true;
            at = damaged(&mut items, at, why);
            settled = at;
            continue;
        }
        let data_end = at + CHUNK_HEADER + len;
        if data_end > end {
            break; // cut off: the writer has not written all of it yet
        }
        let data = &buf[(at + CHUNK_HEADER - base) as usize..(data_end - base) as usize];
        let found = crc32_with(&[kind], data);
        if found != crc {
            if data_end == end || (data_end..end).all(|i| byte(i) == 0) {
                break; // the last chunk written: maybe half of it reached the disk
            }
            pending = None;
            recovering = true;
            at = damaged(
                &mut items,
                at,
                format!(
                    "the chunk's {len}-byte payload fails its CRC-32 (stored {crc:#010x}, computed {found:#010x})"
                ),
            );
            settled = at;
            continue;
        }
        if matches!(kind, FULL | FIRST) {
            if let Some((start, _)) = pending.take() {
                items.push(Item::Damaged {
                    offset: start,
                    next: at,
                    why: "a record's first chunk has no last chunk; dropped".into(),
                });
            }
        }
        match (kind, pending.as_mut()) {
            (FULL, _) => items.push(Item::Record(at, data.to_vec())),
            (FIRST, _) => pending = Some((at, data.to_vec())),
            (MIDDLE | LAST, Some((_, bytes))) => {
                bytes.extend_from_slice(data);
                if kind == LAST {
                    let (start, bytes) = pending.take().expect("matched");
                    items.push(Item::Record(start, bytes));
                }
            }
            _ if recovering => {}
            _ => items.push(Item::Damaged {
                offset: at,
                next: data_end,
                why: "a continuation chunk with no first chunk before it; skipped".into(),
            }),
        }
        if matches!(kind, FULL | FIRST) {
            recovering = false;
        }
        at = data_end;
        if pending.is_none() {
            settled = at;
        }
    }
    (items, settled)
}

/// The parts of `wandb.internal.Record` read here (field numbers from wandb's
/// wandb_internal.proto); `prost` skips every other field.
mod proto {
    use prost::Message;

    #[derive(Clone, PartialEq, Message)]
    pub struct Record {
        #[prost(message, optional, tag = "2")]
        pub history: Option<HistoryRecord>,
        #[prost(message, optional, tag = "17")]
        pub run: Option<RunRecord>,
        #[prost(message, optional, tag = "18")]
        pub exit: Option<RunExitRecord>,
    }

    /// Written by `run.finish()` (and at a normal interpreter exit): the run's end.
    #[derive(Clone, PartialEq, Message)]
    pub struct RunExitRecord {
        #[prost(int32, tag = "1")]
        pub exit_code: i32,
        #[prost(bool, tag = "3")]
        pub not_complete: bool,
    }

    #[derive(Clone, PartialEq, Message)]
    pub struct HistoryRecord {
        #[prost(message, repeated, tag = "1")]
        pub item: Vec<HistoryItem>,
        #[prost(message, optional, tag = "2")]
        pub step: Option<HistoryStep>,
    }

    #[derive(Clone, PartialEq, Message)]
    pub struct HistoryStep {
        #[prost(int64, tag = "1")]
        pub num: i64,
    }

    /// `value_json` is what the SDK writes; the typed members of the `value` oneof are read
    /// too, for a writer that uses them.
    #[derive(Clone, PartialEq, Message)]
    pub struct HistoryItem {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(string, repeated, tag = "2")]
        pub nested_key: Vec<String>,
        #[prost(sint64, optional, tag = "5")]
        pub integer: Option<i64>,
        #[prost(double, optional, tag = "6")]
        pub number: Option<f64>,
        #[prost(string, tag = "16")]
        pub value_json: String,
    }

    #[derive(Clone, PartialEq, Message)]
    pub struct RunRecord {
        #[prost(string, tag = "1")]
        pub run_id: String,
        #[prost(string, tag = "8")]
        pub display_name: String,
    }
}

/// A history row's key: the nested key's parts joined with `/`, else the flat key.
fn item_key(item: &proto::HistoryItem) -> String {
    if item.nested_key.is_empty() {
        item.key.clone()
    } else {
        item.nested_key.join("/")
    }
}

/// A history value as a number; `Err` with the JSON when it is none (text, a histogram).
fn item_value(item: &proto::HistoryItem) -> Result<f64, &str> {
    if let Some(v) = item.number {
        return Ok(v);
    }
    if let Some(i) = item.integer {
        return Ok(i as f64);
    }
    let raw = item.value_json.trim();
    // parse_num also takes a quoted number; W&B's JSON strings are text, not numbers.
    if raw.starts_with('"') {
        return Err(raw);
    }
    super::parse_num(raw.as_bytes()).ok_or(raw)
}

/// A run directory's name: `run-<YYYYMMDD_HHMMSS>-<id>` or `offline-run-…`; its (time, id).
fn run_dir_parts(name: &str) -> Option<(&str, &str)> {
    let rest = name
        .strip_prefix("offline-run-")
        .or_else(|| name.strip_prefix("run-"))?;
    let (time, id) = (rest.get(..15)?, rest.get(16..)?);
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let ok = time.as_bytes()[8] == b'_'
        && digits(&time[..8])
        && digits(&time[9..])
        && rest.as_bytes()[15] == b'-'
        && !id.is_empty();
    ok.then_some((time, id))
}

/// The datastore in a run directory: `run-<id>.wandb`, else the only `*.wandb` there.
fn datastore_in(dir: &Path) -> Option<PathBuf> {
    if let Some((_, id)) = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(run_dir_parts)
    {
        let p = dir.join(format!("run-{id}.wandb"));
        if p.is_file() {
            return Some(p);
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wandb") && p.is_file())
        .collect();
    found.sort();
    (found.len() == 1).then(|| found.remove(0))
}

/// Run directories under a `wandb/` directory: (time, id, dir).
fn run_dirs(root: &Path) -> Vec<(String, String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<(String, String, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (time, id) = run_dir_parts(&name)?;
            Some((time.to_string(), id.to_string(), e.path()))
        })
        .collect();
    dirs.sort();
    dirs
}

/// What a `[run] log` path names now: the run's datastores in the order they were started,
/// and the run's id.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFiles {
    pub id: Option<String>,
    pub files: Vec<PathBuf>,
}

/// The run `path` names now (see the module's comment); no files when there is none yet.
pub fn run_files(path: &Path) -> RunFiles {
    if path.is_file() {
        let id = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.strip_prefix("run-"))
            .map(str::to_string);
        return RunFiles {
            id,
            files: vec![path.to_path_buf()],
        };
    }
    let none = RunFiles {
        id: None,
        files: Vec::new(),
    };
    let is_latest = path.file_name().is_some_and(|n| n == "latest-run");
    let own_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(run_dir_parts);
    let (root, id) = match own_name {
        // One run's directory: that run, its other launches beside it too.
        Some((_, id)) if !is_latest => match path.parent() {
            Some(p) => (p.to_path_buf(), id.to_string()),
            None => return none,
        },
        _ => {
            let root = if is_latest {
                path.parent()
                    .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
            } else {
                path.to_path_buf()
            };
            let latest = std::fs::read_link(root.join("latest-run")).ok();
            let from_link = latest
                .as_ref()
                .and_then(|l| l.file_name())
                .and_then(|n| n.to_str())
                .and_then(run_dir_parts)
                .map(|(_, id)| id.to_string());
            let newest = || {
                // No latest-run link: the run directory started last.
                let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
                run_dirs(&root)
                    .into_iter()
                    .filter(|(_, _, d)| datastore_in(d).is_some())
                    .max_by(|a, b| (&a.0, mtime(&a.2), &a.2).cmp(&(&b.0, mtime(&b.2), &b.2)))
                    .map(|(_, id, _)| id)
            };
            match from_link.or_else(newest) {
                Some(id) => (root, id),
                None => return none,
            }
        }
    };
    let files = run_dirs(&root)
        .into_iter()
        .filter(|(_, i, _)| *i == id)
        .filter_map(|(_, _, d)| datastore_in(&d))
        .collect();
    RunFiles {
        id: Some(id),
        files,
    }
}

/// The run's name for the config: its display name when the run record has one, else its id.
pub fn run_name(path: &Path) -> Option<String> {
    let files = run_files(path);
    let first = files.files.first()?;
    let records = read_head(first, 1 << 20).ok()?;
    records
        .iter()
        .find_map(|r| {
            let run = proto::Record::decode(r.as_slice()).ok()?.run?;
            Some(if run.display_name.is_empty() {
                run.run_id
            } else {
                run.display_name
            })
        })
        .filter(|n| !n.is_empty())
        .or(files.id)
}

/// The whole records in the first `limit` bytes of a datastore.
fn read_head(file: &Path, limit: u64) -> Result<Vec<Vec<u8>>> {
    let f = File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(&f, limit), &mut buf)
        .with_context(|| format!("reading {}", file.display()))?;
    if !buf.starts_with(&FILE_HEADER) {
        bail!("{}: {}", file.display(), not_a_datastore(&buf));
    }
    let (items, _) = scan(&buf[FILE_HEADER.len()..], FILE_HEADER.len() as u64);
    Ok(items
        .into_iter()
        .filter_map(|i| match i {
            Item::Record(_, r) => Some(r),
            Item::Damaged { .. } => None,
        })
        .collect())
}

fn not_a_datastore(head: &[u8]) -> String {
    format!(
        "not a W&B datastore: expected the header `:W&B` 0xBEE1 version 0 ({FILE_HEADER:02x?}), found {:02x?}",
        &head[..head.len().min(FILE_HEADER.len())]
    )
}

/// The keys of the history rows in a datastore's head whose values are numbers (nested keys
/// spelled `a/b`), and the number of rows looked at.
pub fn head_keys(head: &[u8]) -> Option<(Vec<String>, usize)> {
    let body = head.strip_prefix(&FILE_HEADER)?;
    let (items, _) = scan(body, FILE_HEADER.len() as u64);
    let mut keys = std::collections::BTreeSet::new();
    let mut rows = 0;
    for item in items {
        let Item::Record(_, r) = item else { continue };
        let Some(h) = proto::Record::decode(r.as_slice())
            .ok()
            .and_then(|r| r.history)
        else {
            continue;
        };
        rows += 1;
        for it in &h.item {
            if item_value(it).is_ok() {
                keys.insert(item_key(it));
            }
        }
    }
    Some((keys.into_iter().collect(), rows))
}

/// Where a [`WandbRun`] stands between reads, for a later process (the critic's summary
/// cache) to go on from: the file it was in, how far, and the step continuation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WandbPlace {
    /// The datastore, how far it was read, and the bytes that notice it rewritten.
    file: framed::Place,
    rows: u64,
    run_id: Option<String>,
    shift: u64,
    last_step: Option<u64>,
    start_shift: u64,
    start_last_step: Option<u64>,
}

struct OpenFile {
    /// The datastore; its offset is where the next read starts: after the header and the
    /// last whole record, or where the block after a damaged one will start (past the end of
    /// the file until it is written).
    cur: Cursor,
    /// How far the file was read: shorter than this, it was truncated.
    end: u64,
    /// History rows read from this file.
    rows: u64,
    /// The continuation when this file was started (to start it over).
    start_shift: u64,
    start_last_step: Option<u64>,
}

pub struct WandbRun {
    root: PathBuf,
    keys: Keys,
    step_key: String,
    /// `[metrics] step` is W&B's own `_step` (continued across offline resumes).
    own_step: bool,
    run_id: Option<String>,
    open: Option<OpenFile>,
    /// Added to `_step` of the current file: where earlier launches of the run had got to.
    shift: u64,
    /// The last step handed on (after `shift`).
    last_step: Option<u64>,
}

impl WandbRun {
    pub fn new(path: &Path, metrics: &MetricsConfig) -> WandbRun {
        WandbRun {
            root: path.to_path_buf(),
            keys: Keys::new(metrics),
            step_key: metrics.step.clone(),
            own_step: metrics.step == "_step",
            run_id: None,
            open: None,
            shift: 0,
            last_step: None,
        }
    }

    /// Read what is new into `poll`: the current file's new records, then the run's later
    /// launches; a newer run (another id) is read from its start.
    pub fn poll(&mut self, poll: &mut Poll) -> Result<()> {
        let run = run_files(&self.root);
        if run.files.is_empty() && self.open.is_none() {
            poll.missing = true;
            return Ok(());
        }
        if self.run_id.is_some() && run.id.is_some() && run.id != self.run_id {
            if let Some(id) = &run.id {
                poll.restarted = Some(format!("followed by a newer W&B run {id}"));
            }
            self.open = None;
            self.shift = 0;
            self.last_step = None;
        }
        if run.id.is_some() {
            self.run_id = run.id.clone();
        }
        if let Some(open) = &self.open {
            let meta = std::fs::metadata(&open.cur.path).ok();
            let id = meta.as_ref().map(|m| (m.dev(), m.ino()));
            let changed = || !open.cur.head_holds();
            if id.is_some() && id != Some(open.cur.id) {
                // Replaced: finish what the old handle holds, then read the new file whole.
                self.drain(poll)?;
                self.restart(poll, "replaced")?;
            } else if meta.as_ref().is_some_and(|m| m.len() < open.end) {
                self.restart(poll, "truncated")?;
            } else if meta.is_some() && changed() {
                self.restart(poll, "rewritten")?;
            }
            if self.open.is_some() {
                self.drain(poll)?;
            }
        }
        let current = self.open.as_ref().map(|o| o.cur.path.clone());
        let newer: Vec<PathBuf> = match &current {
            Some(cur) => match run.files.iter().position(|f| f == cur) {
                Some(i) => run.files[i + 1..].to_vec(),
                None => Vec::new(),
            },
            None => run.files,
        };
        for path in newer {
            if current.is_some() {
                poll.restarted = Some(format!("resumed into {}", path.display()));
            }
            self.start(&path)?;
            self.drain(poll)?;
        }
        Ok(())
    }

    fn restart(&mut self, poll: &mut Poll, why: &str) -> Result<()> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        poll.restarted = Some(format!("{why} ({})", open.cur.path.display()));
        self.shift = open.start_shift;
        self.last_step = open.start_last_step;
        self.start(&open.cur.path)
    }

    /// Where this run's read stands (after a [`WandbRun::poll`]); `None` before a file was
    /// opened.
    pub fn place(&self) -> Option<WandbPlace> {
        let open = self.open.as_ref()?;
        Some(WandbPlace {
            file: open.cur.place()?,
            rows: open.rows,
            run_id: self.run_id.clone(),
            shift: self.shift,
            last_step: self.last_step,
            start_shift: open.start_shift,
            start_last_step: open.start_last_step,
        })
    }

    /// Go on where `p` stood, or say why not (another file, shorter, rewritten).
    pub fn resume(&mut self, p: &WandbPlace) -> Result<(), String> {
        let cur = Cursor::resume(&p.file)?;
        self.open = Some(OpenFile {
            end: cur.offset,
            cur,
            rows: p.rows,
            start_shift: p.start_shift,
            start_last_step: p.start_last_step,
        });
        self.run_id = p.run_id.clone();
        self.shift = p.shift;
        self.last_step = p.last_step;
        Ok(())
    }

    fn start(&mut self, path: &Path) -> Result<()> {
        self.open = Some(OpenFile {
            cur: Cursor::open(path, "W&B datastore")?,
            end: 0,
            rows: 0,
            start_shift: self.shift,
            start_last_step: self.last_step,
        });
        Ok(())
    }

    /// Read the open file from its offset to its end; a record not whole yet stays for later.
    fn drain(&mut self, poll: &mut Poll) -> Result<()> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        if open.cur.offset == 0 {
            let mut head = [0u8; FILE_HEADER.len()];
            let n = open
                .cur
                .read_full(&mut head, 0)
                .with_context(|| format!("reading {}", open.cur.path.display()))?;
            if n < head.len() {
                if head[..n] != FILE_HEADER[..n] {
                    bail!(
                        "{}: {}",
                        open.cur.path.display(),
                        not_a_datastore(&head[..n])
                    );
                }
                return Ok(()); // just created: the header is on its way
            }
            if head != FILE_HEADER {
                bail!("{}: {}", open.cur.path.display(), not_a_datastore(&head));
            }
            open.cur.offset = FILE_HEADER.len() as u64;
            open.end = open.end.max(open.cur.offset);
            poll.bytes_read += n as u64;
            poll.batch.bytes += n as u64;
        }
        let len = open.cur.file.metadata().map_or(0, |m| m.len());
        if len <= open.end {
            return Ok(()); // not grown since the last read: the unfinished record waits
        }
        let pending = len.saturating_sub(open.cur.offset) as usize;
        let mut buf = vec![0u8; pending.clamp(64 << 10, READ)];
        loop {
            let from = open.cur.offset;
            let n = open
                .cur
                .read_full(&mut buf, from)
                .with_context(|| format!("reading W&B datastore {}", open.cur.path.display()))?;
            if n == 0 {
                break;
            }
            poll.bytes_read += n as u64;
            poll.batch.bytes += n as u64;
            open.end = open.end.max(from + n as u64);
            if open.cur.head.len() < HEAD {
                let mut head = vec![0u8; HEAD];
                let got = open.cur.read_full(&mut head, 0).unwrap_or(0);
                open.cur.head = head[..got].to_vec();
            }
            let (items, next) = scan(&buf[..n], open.cur.offset);
            for item in items {
                open.cur.records += 1;
                match item {
                    Item::Record(at, payload) => match proto::Record::decode(payload.as_slice()) {
                        Ok(rec) => {
                            if let Some(h) = rec.history {
                                let first = open.rows == 0;
                                open.rows += 1;
                                let why = row(
                                    &h,
                                    first,
                                    &self.keys,
                                    &self.step_key,
                                    self.own_step,
                                    &mut self.shift,
                                    &mut self.last_step,
                                    &mut poll.batch,
                                );
                                if let Some(why) = why {
                                    push(&mut poll.batch, open, at, &why);
                                }
                            }
                            // A clean exit ends the run at its last row: an end marker,
                            // placed by the in-order pass (`derive::MARK`), so the critic
                            // says "finished at step N", not stale. A later launch (a
                            // resume) writes rows after it, which carry no total: the run
                            // is live again. A crash (non-zero code) ends nothing.
                            if let Some(x) = rec.exit {
                                if x.exit_code == 0 && !x.not_complete && open.rows > 0 {
                                    poll.batch.records.push(super::Record {
                                        step: super::derive::MARK,
                                        time: None,
                                        values: [None; crate::metrics::N_SLOTS],
                                    });
                                }
                            }
                        }
                        Err(e) => push(
                            &mut poll.batch,
                            open,
                            at,
                            &format!("not a W&B Record protobuf ({e}); skipped"),
                        ),
                    },
                    Item::Damaged { offset, next, why } => push(
                        &mut poll.batch,
                        open,
                        offset,
                        &format!("{why}; read on at byte offset {next}"),
                    ),
                }
            }
            let used = next - open.cur.offset;
            open.cur.offset = next;
            if n < buf.len() || from + n as u64 >= len {
                break; // the end: what is left is a record still being written
            }
            if used == 0 {
                let grown = buf.len() * 2; // a record larger than the buffer
                buf.resize(grown, 0);
            }
        }
        Ok(())
    }
}

fn push(batch: &mut Batch, open: &OpenFile, at: u64, why: &str) {
    batch.push_garbage(Garbage {
        file: open.cur.path.clone(),
        line: open.cur.records,
        why: format!("record {} at byte offset {at}: {why}", open.cur.records),
    });
}

/// One history row into `batch`; what was wrong with it, if anything.
#[allow(clippy::too_many_arguments)]
fn row(
    h: &proto::HistoryRecord,
    first_of_file: bool,
    keys: &Keys,
    step_key: &str,
    own_step: bool,
    shift: &mut u64,
    last_step: &mut Option<u64>,
    batch: &mut Batch,
) -> Option<String> {
    let mut fields = Fields::default();
    let mut stamp = None;
    let mut wandb_step = None;
    for item in &h.item {
        let key = item_key(item);
        let value = item_value(item);
        match (key.as_str(), value) {
            ("_timestamp", Ok(v)) => stamp = Some(v),
            ("_step", Ok(v)) => wandb_step = Some(v),
            _ => {}
        }
        for target in keys.lookup(key.as_bytes()) {
            let v = match target {
                Target::Time if !item.value_json.is_empty() => {
                    keys.value(target, item.value_json.as_bytes())
                }
                _ => value.ok(),
            };
            match v {
                Some(v) => fields.set(target, v),
                None if fields.bad.is_none() => {
                    let raw: String = item.value_json.chars().take(40).collect();
                    fields.bad = Some(format!("`{key}`: expected a number, found {raw}"));
                }
                None => {}
            }
        }
    }
    if own_step {
        let raw = wandb_step.or_else(|| h.step.as_ref().map(|s| s.num as f64));
        if let Some(raw) = raw {
            if first_of_file {
                // A later launch of the run that counted from 0 again (offline resume).
                *shift = match *last_step {
                    Some(last) if raw == 0.0 => last + 1,
                    _ => 0,
                };
            }
            fields.step = Some(raw + *shift as f64);
        }
    }
    // Every row carries its unix time.
    if fields.time.is_none() {
        fields.time = stamp;
    }
    match fields.finish(keys, step_key) {
        Parsed::Sample(r) => {
            *last_step = Some(r.step);
            batch.records.push(r);
            None
        }
        Parsed::Partial(r, why) => {
            *last_step = Some(r.step);
            batch.records.push(r);
            Some(why)
        }
        Parsed::Skip => None,
        Parsed::Garbage(why) => Some(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::mapping::LogFormat;
    use crate::metrics::tail::Tail;

    /// Runs written by wandb 0.31.0 offline (tests/fixtures/wandb/README.md).
    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/wandb")
            .join(name)
    }

    fn normal_file() -> PathBuf {
        run_files(&fixture("normal")).files.remove(0)
    }

    fn metrics() -> MetricsConfig {
        MetricsConfig {
            step: "_step".into(),
            loss: "train/loss".into(),
            lr: "lr".into(),
            grad_norm: "train/grad_norm".into(),
            time: String::new(),
            ..Default::default()
        }
    }

    fn loss_at(step: u64) -> f64 {
        let s = step as f64;
        (4.0 / (1.0 + 0.01 * s) + 0.5) * (1.0 + 0.01 * (1.7 * s).sin())
    }

    /// A clean exit's end: its marker as the reader hands it on, or the sample at the last
    /// row's step carrying only the total that the in-order pass makes of it.
    fn is_end(r: &crate::metrics::Record) -> bool {
        r.step == crate::metrics::derive::MARK
            || (r.values.iter().flatten().count() == 1
                && r.get("total_steps") == Some(r.step as f64))
    }

    /// The rows' steps (a clean exit's end is no row).
    fn steps(poll: &Poll) -> Vec<u64> {
        poll.batch
            .records
            .iter()
            .filter(|r| !is_end(r))
            .map(|r| r.step)
            .collect()
    }

    /// A run that called `finish()` ends at its last row (the exit record, placed by the
    /// in-order pass); a resumed run's first launch's exit is followed by the second's rows,
    /// which carry no total, and the second launch's own exit ends it.
    #[test]
    fn a_clean_exit_ends_the_run_at_its_last_row() {
        let all = crate::metrics::read_all(&fixture("normal"), LogFormat::Wandb, &metrics())
            .unwrap()
            .samples;
        let last = all.last().unwrap();
        assert_eq!((last.step, last.get("total_steps")), (149, Some(149.0)));
        assert!(all[..all.len() - 1]
            .iter()
            .all(|s| s.get("total_steps").is_none()));
        let tailed = read(&fixture("normal"));
        assert!(is_end(tailed.batch.records.last().unwrap()));
        let resumed = crate::metrics::read_all(&fixture("resumed"), LogFormat::Wandb, &metrics())
            .unwrap()
            .samples;
        let ends: Vec<u64> = resumed
            .iter()
            .filter(|s| s.get("total_steps").is_some())
            .map(|s| s.step)
            .collect();
        assert_eq!(ends, [39, 79], "each launch's exit, at its last row");
        assert_eq!(resumed.last().unwrap().step, 79);
    }

    fn read(path: &Path) -> Poll {
        Tail::new(path, LogFormat::Wandb, &metrics())
            .unwrap()
            .poll()
            .unwrap()
    }

    /// Frames records as the writer does (a record split into first/middle/last chunks at
    /// block ends; a block's last < 7 bytes zeroed), for framing cases the real files in
    /// the fixtures do not have (a middle chunk).
    fn frame(records: &[Vec<u8>]) -> Vec<u8> {
        let mut out = FILE_HEADER.to_vec();
        for r in records {
            let mut rest = r.as_slice();
            let mut first = true;
            loop {
                let left = (BLOCK - out.len() as u64 % BLOCK) as usize;
                if left < 7 {
                    out.resize(out.len() + left, 0);
                    continue;
                }
                let take = rest.len().min(left - 7);
                let last = take == rest.len();
                let kind = match (first, last) {
                    (true, true) => FULL,
                    (true, false) => FIRST,
                    (false, false) => MIDDLE,
                    (false, true) => LAST,
                };
                let mut checked = vec![kind];
                checked.extend_from_slice(&rest[..take]);
                out.extend_from_slice(&crc32(&checked).to_le_bytes());
                out.extend_from_slice(&(take as u16).to_le_bytes());
                out.push(kind);
                out.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                first = false;
                if last {
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn records_across_blocks_and_torn_or_zeroed_tails() {
        let records: Vec<Vec<u8>> = [100usize, 70_000, 10, 32_000, 5]
            .iter()
            .enumerate()
            .map(|(i, &n)| vec![i as u8 + 1; n])
            .collect();
        let file = frame(&records);
        let body = &file[7..];
        let got_from = |buf: &[u8], base: u64| -> (Vec<usize>, u64) {
            let (items, next) = scan(buf, base);
            let lens = items
                .iter()
                .map(|i| match i {
                    Item::Record(_, r) => r.len(),
                    Item::Damaged { why, .. } => panic!("{why}"),
                })
                .collect();
            (lens, next)
        };
        let got = |buf: &[u8]| got_from(buf, 7);
        assert_eq!(
            got(body),
            (vec![100, 70_000, 10, 32_000, 5], file.len() as u64)
        );
        for cut in (0..body.len()).step_by(1009) {
            let (lens, next) = got(&body[..cut]);
            let want: Vec<usize> = records.iter().map(Vec::len).take(lens.len()).collect();
            assert_eq!(lens, want, "cut {cut}");
            // The next read, from where this one stopped, gets the rest.
            let (rest, end) = got_from(&file[next as usize..], next);
            assert_eq!(lens.len() + rest.len(), records.len(), "cut {cut}");
            assert_eq!(end, file.len() as u64);
        }
        // Zeros after the last record (a crash's): waited on, not reported.
        let mut zeroed = body.to_vec();
        zeroed.extend_from_slice(&[0u8; 300]);
        assert_eq!(got(&zeroed).0.len(), 5);
        // A middle chunk damaged: reported once, the rest of its record passed over.
        let mut bad = body.to_vec();
        bad[BLOCK as usize + 40] ^= 1; // inside the middle chunk of the 70000-byte record
        let (items, _) = scan(&bad, 7);
        let damaged: Vec<&Item> = items
            .iter()
            .filter(|i| matches!(i, Item::Damaged { .. }))
            .collect();
        assert_eq!(damaged.len(), 1, "{damaged:?}");
        assert!(matches!(
            damaged[0],
            Item::Damaged {
                offset: 32768,
                next: 65536,
                ..
            }
        ));
        let lens: Vec<usize> = items
            .iter()
            .filter_map(|i| match i {
                Item::Record(_, r) => Some(r.len()),
                Item::Damaged { .. } => None,
            })
            .collect();
        assert_eq!(lens, vec![100, 10, 32_000, 5]);
    }

    fn item(key: &[&str], json: &str) -> proto::HistoryItem {
        proto::HistoryItem {
            key: String::new(),
            nested_key: key.iter().map(|k| k.to_string()).collect(),
            integer: None,
            number: None,
            value_json: json.into(),
        }
    }

    /// A mapped key whose value is no number is reported and the row's other values used;
    /// the typed values of the `value` oneof are read as well as `value_json`.
    #[test]
    fn row_values_text_typed_and_flat_keys() {
        let rows = [
            vec![
                item(&["_step"], "0"),
                item(&["_timestamp"], "1700000000.5"),
                item(&["train", "loss"], "\"oops\""),
                item(&["lr"], "0.1"),
            ],
            vec![
                item(&["_step"], "1"),
                proto::HistoryItem {
                    key: "train/loss".into(),
                    nested_key: Vec::new(),
                    number: Some(2.5),
                    ..item(&[], "")
                },
                proto::HistoryItem {
                    integer: Some(-3),
                    ..item(&["train", "grad_norm"], "")
                },
                item(&["lr"], "NaN"),
            ],
        ];
        let records: Vec<Vec<u8>> = rows
            .into_iter()
            .map(|items| {
                let h = proto::HistoryRecord {
                    item: items,
                    step: None,
                };
                proto::Record {
                    history: Some(h),
                    run: None,
                    exit: None,
                }
                .encode_to_vec()
            })
            .collect();
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("run-x.wandb");
        std::fs::write(&file, frame(&records)).unwrap();
        let poll = read(&file);
        let r = &poll.batch.records;
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].step, r[0].get("loss"), r[0].get("lr")),
            (0, None, Some(0.1))
        );
        assert_eq!(r[0].time, Some(1_700_000_000.5));
        assert_eq!(
            (r[1].get("loss"), r[1].get("grad_norm")),
            (Some(2.5), Some(-3.0))
        );
        assert!(r[1].get("lr").unwrap().is_nan());
        assert_eq!(poll.batch.garbage_total, 1);
        let g = poll.batch.garbage[0].to_string();
        assert!(
            g.contains("`train/loss`: expected a number, found \"oops\""),
            "{g}"
        );
    }

    #[test]
    fn crc32_matches_the_published_check_value() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn run_directory_names() {
        assert_eq!(
            run_dir_parts("offline-run-20261206_005856-normal01"),
            Some(("20261206_005856", "normal01"))
        );
        assert_eq!(
            run_dir_parts("run-20240101_000000-a-b"),
            Some(("20240101_000000", "a-b"))
        );
        assert_eq!(run_dir_parts("run-2024_0101-x"), None);
        assert_eq!(run_dir_parts("run-20240101_000000-"), None);
        assert_eq!(run_dir_parts("latest-run"), None);
    }

    /// Every row of a real run, nested keys and all, from the `wandb/` directory, the run's
    /// directory, `latest-run` and the file alike.
    #[test]
    fn a_real_run_reads_every_row() {
        let dir = fixture("normal");
        for path in [
            dir.clone(),
            dir.join("latest-run"),
            normal_file().parent().unwrap().to_path_buf(),
            normal_file(),
        ] {
            let poll = read(&path);
            assert_eq!(poll.batch.garbage_total, 0, "{:?}", poll.batch.garbage);
            assert_eq!(steps(&poll), (0..150).collect::<Vec<_>>(), "{path:?}");
            for r in poll.batch.records.iter().filter(|r| !is_end(r)) {
                let want = loss_at(r.step);
                let loss = r.get("loss").unwrap();
                assert!(
                    (loss - want).abs() < 1e-12,
                    "step {}: {loss} vs {want}",
                    r.step
                );
                assert!(r.get("lr").unwrap() > 0.0);
                assert!((r.get("grad_norm").unwrap() - 1.0).abs() <= 0.1 + 1e-12);
                assert!(r.time.unwrap() > 1.7e9, "_timestamp is the time");
            }
            assert_eq!(poll.bytes_read, 68170);
        }
    }

    #[test]
    fn the_heads_keys_are_the_number_keys_nested_ones_as_paths() {
        let head = std::fs::read(normal_file()).unwrap();
        let (keys, rows) = head_keys(&head).unwrap();
        assert_eq!(
            keys,
            [
                "_runtime",
                "_step",
                "_timestamp",
                "lr",
                "train/grad_norm",
                "train/loss"
            ]
        );
        assert_eq!(rows, 150);
        assert!(head_keys(b"{\"step\": 1}").is_none());
        assert_eq!(run_name(&fixture("normal")).as_deref(), Some("normal01"));
    }

    /// The file cut anywhere (a process killed mid-write, a block not written yet): no
    /// garbage, the whole rows before the cut, and the rest once the file grows, each once.
    #[test]
    fn a_torn_tail_is_waited_for_and_read_on_when_the_file_grows() {
        let whole = std::fs::read(normal_file()).unwrap();
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("run-x.wandb");
        let mut cuts: Vec<usize> = (0..whole.len()).step_by(997).collect();
        // Around the record split across the first block boundary, and the boundary itself.
        cuts.extend([
            32633, 32634, 32640, 32761, 32767, 32768, 32769, 32775, 32800,
        ]);
        for cut in cuts {
            std::fs::write(&file, &whole[..cut]).unwrap();
            let mut run = WandbRun::new(&file, &metrics());
            let mut first = Poll::default();
            run.poll(&mut first).unwrap();
            assert_eq!(
                first.batch.garbage_total, 0,
                "cut {cut}: {:?}",
                first.batch.garbage
            );
            let n = first.batch.records.len() as u64;
            assert_eq!(steps(&first), (0..n).collect::<Vec<_>>(), "cut {cut}");
            let mut idle = Poll::default();
            run.poll(&mut idle).unwrap();
            assert_eq!(idle.batch.records.len(), 0, "cut {cut}");
            assert_eq!(idle.bytes_read, 0, "cut {cut}: not grown, nothing read");
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&file)
                .unwrap();
            std::io::Write::write_all(&mut f, &whole[cut..]).unwrap();
            let mut rest = Poll::default();
            run.poll(&mut rest).unwrap();
            assert_eq!(rest.batch.garbage_total, 0, "cut {cut}");
            assert_eq!(steps(&rest), (n..150).collect::<Vec<_>>(), "cut {cut}");
            // Only what was not whole before is read again: at most one record's bytes.
            assert!(
                rest.bytes_read <= (whole.len() - cut) as u64 + 200 + 7,
                "cut {cut}: read {} for {} new bytes",
                rest.bytes_read,
                whole.len() - cut
            );
        }
    }

    /// A flipped byte in the middle: reported with the file and the chunk's byte offset,
    /// and the read goes on at the next block.
    #[test]
    fn a_corrupt_chunk_in_the_middle_is_named_and_the_rest_read() {
        let mut bytes = std::fs::read(normal_file()).unwrap();
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("run-x.wandb");
        // The chunk nearest 10000: walk the chunks from the header.
        let mut at = 7usize;
        while at < 10_000 {
            let len = u16::from_le_bytes([bytes[at + 4], bytes[at + 5]]) as usize;
            at += 7 + len;
        }
        bytes[at + 9] ^= 0x55;
        std::fs::write(&file, &bytes).unwrap();
        let poll = read(&file);
        assert_eq!(poll.batch.garbage_total, 1, "{:?}", poll.batch.garbage);
        let g = poll.batch.garbage[0].to_string();
        assert!(g.starts_with(&file.display().to_string()), "{g}");
        assert!(g.contains(&format!("at byte offset {at}:")), "{g}");
        assert!(g.contains("fails its CRC-32"), "{g}");
        assert!(g.contains("read on at byte offset 32768"), "{g}");
        let got = steps(&poll);
        assert_eq!(*got.last().unwrap(), 149, "read on after it");
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        assert!(got.len() < 150 && got.len() > 60, "{}", got.len());
    }

    /// Damage in the block still being written: the read skips to where the next block will
    /// start, past the end of the file for now. That is not a truncation: later polls read
    /// nothing again, and the next block when it comes.
    #[test]
    fn damage_in_the_last_block_is_reported_once_and_the_next_block_read() {
        let mut bytes = std::fs::read(normal_file()).unwrap();
        bytes[40_040] ^= 0x55; // a payload byte in block 1
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("run-x.wandb");
        std::fs::write(&file, &bytes[..50_000]).unwrap();
        let mut run = WandbRun::new(&file, &metrics());
        let mut first = Poll::default();
        run.poll(&mut first).unwrap();
        assert_eq!(first.batch.garbage_total, 1, "{:?}", first.batch.garbage);
        let seen = steps(&first);
        for _ in 0..2 {
            let mut again = Poll::default();
            run.poll(&mut again).unwrap();
            assert_eq!(again.restarted, None);
            assert_eq!(
                (again.batch.records.len(), again.batch.garbage_total),
                (0, 0)
            );
        }
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        std::io::Write::write_all(&mut f, &bytes[50_000..]).unwrap();
        let mut rest = Poll::default();
        run.poll(&mut rest).unwrap();
        assert_eq!(rest.batch.garbage_total, 0, "{:?}", rest.batch.garbage);
        let more = steps(&rest);
        assert_eq!(*more.last().unwrap(), 149);
        assert!(more[0] > *seen.last().unwrap(), "{seen:?} then {more:?}");
    }

    /// Whatever the bytes (the real file mutated, cut, or junk after the header), reading
    /// neither panics nor goes backwards, and a second read after growth does not either.
    #[test]
    fn any_bytes_read_without_panic() {
        let whole = std::fs::read(normal_file()).unwrap();
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("run-x.wandb");
        let mut rng = fastrand::Rng::with_seed(29);
        for case in 0..300 {
            let mut b = if case % 3 == 0 {
                let mut b = FILE_HEADER.to_vec();
                b.extend((0..rng.usize(0..70_000)).map(|_| rng.u8(..)));
                b
            } else {
                whole.clone()
            };
            for _ in 0..rng.usize(0..20) {
                let i = rng.usize(7..b.len().max(8));
                if i < b.len() {
                    b[i] = rng.u8(..);
                }
            }
            let cut = rng.usize(0..=b.len());
            std::fs::write(&file, &b[..cut]).unwrap();
            let mut run = WandbRun::new(&file, &metrics());
            let mut p = Poll::default();
            let _ = run.poll(&mut p);
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&file)
                .unwrap();
            std::io::Write::write_all(&mut f, &b[cut..]).unwrap();
            let mut q = Poll::default();
            let _ = run.poll(&mut q);
            assert!(q.restarted.is_none(), "case {case}: {:?}", q.restarted);
            let (items, next) = scan(&b[7.min(b.len())..], 7);
            assert!(next >= 7, "case {case}");
            drop(items);
        }
    }

    #[test]
    fn a_file_that_is_not_a_datastore_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("run-x.wandb");
        std::fs::write(&file, b"{\"step\": 1}\n").unwrap();
        let err = format!(
            "{:#}",
            Tail::new(&file, LogFormat::Wandb, &metrics())
                .unwrap()
                .poll()
                .unwrap_err()
        );
        assert!(err.contains(&file.display().to_string()), "{err}");
        assert!(err.contains("not a W&B datastore"), "{err}");
        // Just created, the header not whole yet: nothing to read, no error.
        std::fs::write(&file, &FILE_HEADER[..3]).unwrap();
        assert_eq!(read(&file).batch.records.len(), 0);
    }

    /// Offline, each launch of a resumed run writes its own run directory and counts `_step`
    /// from 0: read as one run whose steps go on, each row once.
    #[test]
    fn an_offline_resume_continues_the_step() {
        let poll = read(&fixture("resumed"));
        assert_eq!(poll.batch.garbage_total, 0);
        assert_eq!(steps(&poll), (0..80).collect::<Vec<_>>());
        for r in poll.batch.records.iter().filter(|r| !is_end(r)) {
            assert!(
                (r.get("loss").unwrap() - loss_at(r.step)).abs() < 1e-12,
                "{}",
                r.step
            );
        }
        // One launch's file alone: its own `_step`s.
        let files = run_files(&fixture("resumed"));
        assert_eq!(files.id.as_deref(), Some("resumed1"));
        assert_eq!(files.files.len(), 2);
        let only_second = read(&files.files[1]);
        assert_eq!(steps(&only_second), (0..40).collect::<Vec<_>>());
    }

    /// A later process goes on where the read stood and reads only the new bytes.
    #[test]
    fn a_place_carries_the_read_to_another_reader() {
        let whole = std::fs::read(normal_file()).unwrap();
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("run-x.wandb");
        std::fs::write(&file, &whole[..50_000]).unwrap();
        let mut first = WandbRun::new(&file, &metrics());
        let mut p1 = Poll::default();
        first.poll(&mut p1).unwrap();
        let place = first.place().unwrap();
        let n = p1.batch.records.len() as u64;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        std::io::Write::write_all(&mut f, &whole[50_000..]).unwrap();
        let mut second = WandbRun::new(&file, &metrics());
        second.resume(&place).unwrap();
        let mut p2 = Poll::default();
        second.poll(&mut p2).unwrap();
        assert_eq!(steps(&p2), (n..150).collect::<Vec<_>>());
        assert!(
            p2.bytes_read < (whole.len() - 50_000 + 300) as u64,
            "{}",
            p2.bytes_read
        );
        // Rewritten under it: refused.
        let mut other = whole.clone();
        other[20] ^= 1;
        std::fs::write(&file, &other).unwrap();
        assert!(WandbRun::new(&file, &metrics()).resume(&place).is_err());
    }
}
