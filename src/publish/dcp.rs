//! A torch Distributed Checkpoint directory checked against its `.metadata` before it is
//! published (and by `publish --verify`): DCP's coordinator pickles a `Metadata` whose
//! `storage_data` maps every saved item to a `_StorageInfo(relative_path, offset, length)`,
//! and loads trust it: a shard that is missing or cut short (a node's write that failed
//! while the others' succeeded) is found only when the load reads past its end, or not at all
//! (torchtitan#4011). Here every file the metadata names must exist and be at least as long
//! as its items reach. The pickle is read by a small stack machine that builds nothing and
//! runs nothing: it walks the opcodes and keeps the state of each `_StorageInfo` object.

use anyhow::{bail, Context, Result};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

pub const METADATA: &str = ".metadata";

/// One stored item: bytes `offset..offset+length` of `file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub file: String,
    pub offset: u64,
    pub length: u64,
}

#[derive(Debug, Clone)]
enum V {
    None,
    Bool,
    Int(i128),
    Float,
    Str(String),
    Bytes,
    Global(String, String),
    Mark,
    /// Lists, tuples, sets: their items.
    Seq(Rc<RefCell<Vec<V>>>),
    Dict(Pairs),
    /// An object made by NEWOBJ or REDUCE from a class (a Global, when known).
    Obj(Rc<V>),
}

/// A dict's items, shared between the stack and the memo (SETITEMS fills it in place).
type Pairs = Rc<RefCell<Vec<(V, V)>>>;

fn seq(v: Vec<V>) -> V {
    V::Seq(Rc::new(RefCell::new(v)))
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.b.len())
            .with_context(|| format!("truncated at byte {} (wanted {n} more)", self.at))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn le(&mut self, n: usize) -> Result<u64> {
        let s = self.take(n)?;
        Ok(s.iter().rev().fold(0u64, |a, b| (a << 8) | u64::from(*b)))
    }
    fn line(&mut self) -> Result<String> {
        let rest = &self.b[self.at..];
        let n = rest
            .iter()
            .position(|c| *c == b'\n')
            .with_context(|| format!("no end of line after byte {}", self.at))?;
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.at += n + 1;
        Ok(s)
    }
    fn utf8(&mut self, n: usize) -> Result<V> {
        Ok(V::Str(String::from_utf8_lossy(self.take(n)?).into_owned()))
    }
}

/// Every `_StorageInfo` in a `.metadata` pickle.
pub fn storage(meta: &[u8]) -> Result<Vec<Item>> {
    let mut r = Reader { b: meta, at: 0 };
    let mut stack: Vec<V> = Vec::new();
    let mut memo: BTreeMap<u64, V> = BTreeMap::new();
    let mut out = Vec::new();
    let pop = |stack: &mut Vec<V>, at: usize| {
        stack
            .pop()
            .with_context(|| format!("stack empty at byte {at}"))
    };
    let pop_mark = |stack: &mut Vec<V>, at: usize| -> Result<Vec<V>> {
        let m = stack
            .iter()
            .rposition(|v| matches!(v, V::Mark))
            .with_context(|| format!("no MARK for the opcode at byte {at}"))?;
        let items = stack.split_off(m + 1);
        stack.pop();
        Ok(items)
    };
    loop {
        let at = r.at;
        let op = r.u8().context("no STOP")?;
        match op {
            0x80 => {
                r.u8()?;
            }
            0x95 => {
                r.le(8)?;
            }
            b'.' => break,
            b'(' => stack.push(V::Mark),
            b'N' => stack.push(V::None),
            0x88 | 0x89 => stack.push(V::Bool),
            b'K' => stack.push(V::Int(r.le(1)? as i128)),
            b'M' => stack.push(V::Int(r.le(2)? as i128)),
            b'J' => stack.push(V::Int(i128::from(r.le(4)? as u32 as i32))),
            0x8a | 0x8b => {
                let n = if op == 0x8a { r.le(1)? } else { r.le(4)? } as usize;
                let bytes = r.take(n)?;
                let v = if n == 0 || n > 16 {
                    0
                } else {
                    let mut x: i128 = bytes
                        .iter()
                        .rev()
                        .fold(0i128, |a, b| (a << 8) | i128::from(*b));
                    if bytes[n - 1] & 0x80 != 0 {
                        x -= 1i128 << (8 * n);
                    }
                    x
                };
                stack.push(V::Int(v));
            }
            b'I' | b'L' => {
                let l = r.line()?;
                let t = l.trim_end_matches('L');
                stack.push(match t {
                    "00" | "01" => V::Bool,
                    _ => V::Int(t.parse().unwrap_or(0)),
                });
            }
            b'G' => {
                r.take(8)?;
                stack.push(V::Float);
            }
            b'F' => {
                r.line()?;
                stack.push(V::Float);
            }
            b'X' => {
                let n = r.le(4)? as usize;
                stack.push(r.utf8(n)?);
            }
            0x8c => {
                let n = r.le(1)? as usize;
                stack.push(r.utf8(n)?);
            }
            0x8d => {
                let n = r.le(8)? as usize;
                stack.push(r.utf8(n)?);
            }
            b'V' => {
                let l = r.line()?;
                stack.push(V::Str(l));
            }
            b'C' | b'U' => {
                let n = r.le(1)? as usize;
                r.take(n)?;
                stack.push(V::Bytes);
            }
            b'B' | b'T' => {
                let n = r.le(4)? as usize;
                r.take(n)?;
                stack.push(V::Bytes);
            }
            0x8e | 0x96 => {
                let n = r.le(8)? as usize;
                r.take(n)?;
                stack.push(V::Bytes);
            }
            b'S' => {
                r.line()?;
                stack.push(V::Bytes);
            }
            b'c' => {
                let module = r.line()?;
                let name = r.line()?;
                stack.push(V::Global(module, name));
            }
            0x93 => {
                let name = pop(&mut stack, at)?;
                let module = pop(&mut stack, at)?;
                match (module, name) {
                    (V::Str(m), V::Str(n)) => stack.push(V::Global(m, n)),
                    _ => bail!("STACK_GLOBAL at byte {at} without two names"),
                }
            }
            0x94 => {
                let top = stack.last().cloned().context("MEMOIZE on an empty stack")?;
                memo.insert(memo.len() as u64, top);
            }
            b'q' | b'r' | b'p' => {
                let i = match op {
                    b'q' => r.le(1)?,
                    b'r' => r.le(4)?,
                    _ => r.line()?.parse().unwrap_or(0),
                };
                let top = stack.last().cloned().context("PUT on an empty stack")?;
                memo.insert(i, top);
            }
            b'h' | b'j' | b'g' => {
                let i = match op {
                    b'h' => r.le(1)?,
                    b'j' => r.le(4)?,
                    _ => r.line()?.parse().unwrap_or(0),
                };
                let v = memo
                    .get(&i)
                    .cloned()
                    .with_context(|| format!("GET of memo {i} never put (byte {at})"))?;
                stack.push(v);
            }
            b'}' => stack.push(V::Dict(Rc::default())),
            b']' | b')' | 0x8f => stack.push(seq(Vec::new())),
            b'l' | b't' | 0x91 => {
                let items = pop_mark(&mut stack, at)?;
                stack.push(seq(items));
            }
            b'd' => {
                let items = pop_mark(&mut stack, at)?;
                let pairs = items
                    .chunks(2)
                    .filter_map(|c| Some((c.first()?.clone(), c.get(1)?.clone())))
                    .collect();
                stack.push(V::Dict(Rc::new(RefCell::new(pairs))));
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                if stack.len() < n {
                    bail!("TUPLE{n} at byte {at} on a short stack");
                }
                let items = stack.split_off(stack.len() - n);
                stack.push(seq(items));
            }
            b's' => {
                let v = pop(&mut stack, at)?;
                let k = pop(&mut stack, at)?;
                if let Some(V::Dict(d)) = stack.last() {
                    d.borrow_mut().push((k, v));
                }
            }
            b'u' => {
                let items = pop_mark(&mut stack, at)?;
                if let Some(V::Dict(d)) = stack.last() {
                    let mut d = d.borrow_mut();
                    for c in items.chunks(2) {
                        if let [k, v] = c {
                            d.push((k.clone(), v.clone()));
                        }
                    }
                }
            }
            b'a' => {
                let v = pop(&mut stack, at)?;
                if let Some(V::Seq(s)) = stack.last() {
                    s.borrow_mut().push(v);
                }
            }
            b'e' | 0x90 => {
                let items = pop_mark(&mut stack, at)?;
                if let Some(V::Seq(s)) = stack.last() {
                    s.borrow_mut().extend(items);
                }
            }
            0x81 => {
                let _args = pop(&mut stack, at)?;
                let cls = pop(&mut stack, at)?;
                stack.push(V::Obj(Rc::new(cls)));
            }
            0x92 => {
                let _kwargs = pop(&mut stack, at)?;
                let _args = pop(&mut stack, at)?;
                let cls = pop(&mut stack, at)?;
                stack.push(V::Obj(Rc::new(cls)));
            }
            b'R' => {
                let _args = pop(&mut stack, at)?;
                let f = pop(&mut stack, at)?;
                stack.push(V::Obj(Rc::new(f)));
            }
            b'b' => {
                let state = pop(&mut stack, at)?;
                if let Some(V::Obj(cls)) = stack.last() {
                    if matches!(&**cls, V::Global(m, n) if n == "_StorageInfo" && m.starts_with("torch.distributed"))
                    {
                        out.push(item_of(&state).with_context(|| {
                            format!("a _StorageInfo at byte {at} without relative_path, offset and length")
                        })?);
                    }
                }
            }
            b'0' => {
                pop(&mut stack, at)?;
            }
            b'2' => {
                let top = stack.last().cloned().context("DUP on an empty stack")?;
                stack.push(top);
            }
            b'1' => {
                pop_mark(&mut stack, at)?;
            }
            other => bail!("opcode 0x{other:02x} at byte {at} is not one a .metadata pickle uses"),
        }
    }
    Ok(out)
}

/// `relative_path`, `offset`, `length` from a BUILD state: the object's `__dict__`, or a
/// `(dict, slots)` pair (a dataclass with slots).
fn item_of(state: &V) -> Option<Item> {
    let dicts: Vec<Pairs> = match state {
        V::Dict(d) => vec![d.clone()],
        V::Seq(s) => s
            .borrow()
            .iter()
            .filter_map(|v| match v {
                V::Dict(d) => Some(d.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let get = |key: &str| {
        dicts.iter().find_map(|d| {
            d.borrow().iter().find_map(|(k, v)| match k {
                V::Str(s) if s == key => Some(v.clone()),
                _ => None,
            })
        })
    };
    let int = |v: Option<V>| match v {
        Some(V::Int(i)) if i >= 0 => u64::try_from(i).ok(),
        _ => None,
    };
    let file = match get("relative_path")? {
        V::Str(s) => s,
        _ => return None,
    };
    Some(Item {
        file,
        offset: int(get("offset"))?,
        length: int(get("length"))?,
    })
}

/// Whether a publish under the config at `config` is of one node's part of a checkpoint
/// (`[cluster] parts = "every-node"`).
pub fn is_part(config: Option<&Path>) -> bool {
    config
        .and_then(|p| crate::config::Config::load(p).ok())
        .is_some_and(|c| c.cluster.parts == crate::config::cluster::Parts::EveryNode)
}

/// What the check of a DCP directory found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Checked {
    /// Files `.metadata` names, and the items stored in them.
    pub files: usize,
    pub items: usize,
    /// Bytes the items span, summed over the files.
    pub bytes: u64,
}

/// A directory with `.metadata`: every file it names is there and reaches as far as its items
/// (`None`: not a DCP directory). An error names each missing or short file. `part`: this
/// directory is one node's part (`[cluster] parts = "every-node"`): the files on the other
/// nodes are missing here by design (the job's step is complete when every node's part is
/// verified), so only the files present are checked.
pub fn check(dir: &Path, part: bool) -> Result<Option<Checked>> {
    let meta = dir.join(METADATA);
    if !meta.is_file() {
        return Ok(None);
    }
    let bytes = std::fs::read(&meta).with_context(|| format!("reading {}", meta.display()))?;
    let items = storage(&bytes).with_context(|| {
        format!(
            "{}: not a torch Distributed Checkpoint metadata pickle this roger can read",
            meta.display()
        )
    })?;
    if items.is_empty() {
        bail!(
            "{}: names no stored item (_StorageInfo): not the metadata of a finished DCP save",
            meta.display()
        );
    }
    let mut ends: BTreeMap<&str, u64> = BTreeMap::new();
    for i in &items {
        let e = ends.entry(i.file.as_str()).or_default();
        *e = (*e).max(i.offset.saturating_add(i.length));
    }
    let mut wrong = Vec::new();
    for (file, end) in &ends {
        let p = dir.join(file);
        if file.contains("..") || Path::new(file).is_absolute() {
            wrong.push(format!("{file}: not a path inside the checkpoint"));
            continue;
        }
        match std::fs::metadata(&p) {
            Ok(m) if m.len() >= *end => {}
            Ok(m) => wrong.push(format!(
                "{file} is {} bytes, but .metadata has items up to byte {end} (cut short)",
                m.len()
            )),
            Err(_) if part => {}
            Err(e) => wrong.push(format!("{file}, named by .metadata, is missing ({e})")),
        }
    }
    if !wrong.is_empty() {
        bail!(
            "{}: the torch DCP checkpoint is incomplete: {}; a load would fail or read garbage (a node's shards that never landed?)",
            dir.display(),
            wrong.join("; ")
        );
    }
    if part && !ends.keys().any(|f| dir.join(f).is_file()) {
        bail!(
            "{}: none of the files its .metadata names is here: not a part of this checkpoint",
            dir.display()
        );
    }
    Ok(Some(Checked {
        files: ends.keys().filter(|f| dir.join(f).is_file()).count(),
        items: items.len(),
        bytes: ends.values().sum(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/dcp")
                .join(name),
        )
        .unwrap()
    }

    #[test]
    fn every_storage_item_of_a_dcp_metadata_pickle_is_read() {
        for name in ["protocol4.metadata", "protocol2.metadata"] {
            let items = storage(&fixture(name)).unwrap();
            assert_eq!(items.len(), 6, "{name}: {items:?}");
            let shard = 64 * 16 * 4;
            assert_eq!(
                items[..3],
                [
                    Item {
                        file: "__0_0.distcp".into(),
                        offset: 0,
                        length: shard
                    },
                    Item {
                        file: "__0_0.distcp".into(),
                        offset: shard,
                        length: shard
                    },
                    Item {
                        file: "__0_0.distcp".into(),
                        offset: 2 * shard,
                        length: 19
                    },
                ],
                "{name}"
            );
            assert!(
                items[3..].iter().all(|i| i.file == "__1_0.distcp"),
                "{name}"
            );
        }
    }

    #[test]
    fn a_cut_or_foreign_pickle_is_an_error_not_an_empty_list() {
        let whole = fixture("protocol4.metadata");
        let e = storage(&whole[..whole.len() / 2]).unwrap_err();
        assert!(
            format!("{e:#}").contains("truncated at byte") || format!("{e:#}").contains("no STOP"),
            "{e:#}"
        );
        let e = storage(b"\x80\x04\xff.").unwrap_err();
        assert!(format!("{e:#}").contains("opcode 0xff at byte 2"), "{e:#}");
    }

    #[test]
    fn no_cut_or_flipped_byte_makes_it_panic() {
        let whole = fixture("protocol2.metadata");
        for n in 0..whole.len() {
            let _ = storage(&whole[..n]);
            for flip in [0x01u8, 0x80, 0xff] {
                let mut b = whole.clone();
                b[n] ^= flip;
                let _ = storage(&b);
            }
        }
    }

    #[test]
    fn a_missing_or_short_shard_is_named() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            check(d.path(), false).unwrap(),
            None,
            "no .metadata: not DCP"
        );
        std::fs::write(d.path().join(METADATA), fixture("protocol4.metadata")).unwrap();
        let full = 2 * 64 * 16 * 4 + 19;
        std::fs::write(d.path().join("__0_0.distcp"), vec![1u8; full]).unwrap();
        let e = format!("{:#}", check(d.path(), false).unwrap_err());
        assert!(
            e.contains("__1_0.distcp, named by .metadata, is missing"),
            "{e}"
        );
        // One node's part: the other node's shard is elsewhere by design.
        let part = check(d.path(), true).unwrap().unwrap();
        assert_eq!((part.files, part.items), (1, 6));
        std::fs::write(d.path().join("__1_0.distcp"), vec![2u8; full - 1]).unwrap();
        assert!(
            check(d.path(), true).is_err(),
            "a short shard here is wrong either way"
        );
        let e = format!("{:#}", check(d.path(), false).unwrap_err());
        assert!(
            e.contains(&format!(
                "__1_0.distcp is {} bytes, but .metadata has items up to byte {full} (cut short)",
                full - 1
            )),
            "{e}"
        );
        std::fs::write(d.path().join("__1_0.distcp"), vec![2u8; full]).unwrap();
        let ok = check(d.path(), false).unwrap().unwrap();
        assert_eq!((ok.files, ok.items, ok.bytes), (2, 6, 2 * full as u64));
    }
}
