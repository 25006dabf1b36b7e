//! The power-cut model behind the FUSE filesystem: every inode's contents and every
//! directory's entries twice, as they are now and as they were at their last fsync. A power
//! cut keeps only the second; mutating operations are counted so a cut can be armed at any one.

use fuser::{Errno, FileAttr, FileType, INodeNo, RenameFlags};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::time::SystemTime;

#[derive(Clone, Debug)]
pub(super) struct Node {
    pub(super) dir: bool,
    pub(super) perm: u16,
    pub(super) data: Vec<u8>,
    pub(super) entries: BTreeMap<OsString, u64>,
    durable_data: Vec<u8>,
    durable_entries: BTreeMap<OsString, u64>,
    mtime: SystemTime,
}

impl Node {
    fn new(dir: bool, perm: u16) -> Node {
        Node {
            dir,
            perm,
            data: Vec::new(),
            entries: BTreeMap::new(),
            durable_data: Vec::new(),
            durable_entries: BTreeMap::new(),
            mtime: SystemTime::now(),
        }
    }
}

/// The whole filesystem: what is visible now and what would survive a power cut.
#[derive(Clone, Debug)]
pub struct State {
    pub(super) nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Mutating operations performed (or refused at the cut) since the last reboot.
    pub ops: u64,
    /// Cut power when this operation (1-based) arrives.
    pub cut_at: Option<u64>,
    /// Power is off: everything fails with EIO.
    pub dead: bool,
    /// What each counted operation was, for failure messages.
    pub log: Vec<String>,
    /// Behave like WSL2's drvfs/9p: directory fsync answers EINVAL, hard links EPERM.
    pub drvfs: bool,
}

impl State {
    pub fn new() -> State {
        let mut nodes = HashMap::new();
        nodes.insert(1, Node::new(true, 0o755));
        State {
            nodes,
            next_ino: 2,
            ops: 0,
            cut_at: None,
            dead: false,
            log: Vec::new(),
            drvfs: false,
        }
    }

    /// An empty filesystem that behaves like drvfs/9p (see `drvfs`).
    pub fn drvfs() -> State {
        State {
            drvfs: true,
            ..State::new()
        }
    }

    /// Make everything durable (a clean shutdown).
    pub fn sync_all(&mut self) {
        for n in self.nodes.values_mut() {
            n.durable_data = n.data.clone();
            n.durable_entries = n.entries.clone();
        }
    }

    /// The state after power comes back: only what was durable, only what is reachable.
    pub fn reboot(&self) -> State {
        let mut nodes = HashMap::new();
        let mut stack = vec![1u64];
        while let Some(ino) = stack.pop() {
            if nodes.contains_key(&ino) {
                continue;
            }
            let Some(n) = self.nodes.get(&ino) else {
                continue;
            };
            let mut n = n.clone();
            n.data = n.durable_data.clone();
            n.entries = n.durable_entries.clone();
            stack.extend(n.entries.values().copied());
            nodes.insert(ino, n);
        }
        State {
            nodes,
            next_ino: self.next_ino,
            ops: 0,
            cut_at: None,
            dead: false,
            log: Vec::new(),
            drvfs: self.drvfs,
        }
    }

    /// Count a mutating operation; `Err(EIO)` when power is (or goes) off here.
    pub(super) fn op(&mut self, what: impl FnOnce() -> String) -> Result<(), Errno> {
        if self.dead {
            return Err(Errno::EIO);
        }
        self.ops += 1;
        self.log.push(what());
        if self.cut_at == Some(self.ops) {
            self.dead = true;
            return Err(Errno::EIO);
        }
        Ok(())
    }

    pub(super) fn alive(&self) -> Result<(), Errno> {
        if self.dead {
            Err(Errno::EIO)
        } else {
            Ok(())
        }
    }

    pub(super) fn name_of(&self, parent: u64, name: &OsStr) -> String {
        format!("{}/{}", self.path_of(parent), name.to_string_lossy())
    }

    pub(super) fn path_of(&self, ino: u64) -> String {
        if ino == 1 {
            return String::new();
        }
        for (p, n) in &self.nodes {
            if let Some((name, _)) = n.entries.iter().find(|(_, &i)| i == ino) {
                return format!("{}/{}", self.path_of(*p), name.to_string_lossy());
            }
        }
        format!("<ino {ino}>")
    }

    fn nlink(&self, ino: u64) -> u32 {
        let n = self
            .nodes
            .values()
            .flat_map(|n| n.entries.values())
            .filter(|&&i| i == ino)
            .count() as u32;
        n.max(1)
    }

    pub(super) fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let n = self.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        let size = if n.dir { 4096 } else { n.data.len() as u64 };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: n.mtime,
            mtime: n.mtime,
            ctime: n.mtime,
            crtime: n.mtime,
            kind: if n.dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            },
            perm: n.perm,
            nlink: if n.dir { 2 } else { self.nlink(ino) },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    pub(super) fn child(&self, parent: u64, name: &OsStr) -> Result<u64, Errno> {
        let p = self.nodes.get(&parent).ok_or(Errno::ENOENT)?;
        if !p.dir {
            return Err(Errno::ENOTDIR);
        }
        p.entries.get(name).copied().ok_or(Errno::ENOENT)
    }

    pub(super) fn make(
        &mut self,
        parent: u64,
        name: &OsStr,
        dir: bool,
        mode: u32,
    ) -> Result<u64, Errno> {
        if self.child(parent, name).is_ok() {
            return Err(Errno::EEXIST);
        }
        let what = format!(
            "{} {}",
            if dir { "mkdir" } else { "create" },
            self.name_of(parent, name)
        );
        self.op(|| what)?;
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes
            .insert(ino, Node::new(dir, (mode & 0o7777) as u16));
        let p = self.nodes.get_mut(&parent).ok_or(Errno::ENOENT)?;
        p.entries.insert(name.to_owned(), ino);
        p.mtime = SystemTime::now();
        Ok(ino)
    }

    pub(super) fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = self.child(parent, name)?;
        let n = &self.nodes[&ino];
        if n.dir != dir {
            return Err(if dir { Errno::ENOTDIR } else { Errno::EISDIR });
        }
        if dir && !n.entries.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        let what = format!(
            "{} {}",
            if dir { "rmdir" } else { "unlink" },
            self.name_of(parent, name)
        );
        self.op(|| what)?;
        let p = self.nodes.get_mut(&parent).ok_or(Errno::ENOENT)?;
        p.entries.remove(name);
        Ok(())
    }

    pub(super) fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let src = self.child(parent, name)?;
        let dst = self.child(newparent, newname).ok();
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            let dst = dst.ok_or(Errno::ENOENT)?;
            let what = format!(
                "exchange {} <-> {}",
                self.name_of(parent, name),
                self.name_of(newparent, newname)
            );
            self.op(|| what)?;
            self.nodes
                .get_mut(&parent)
                .unwrap()
                .entries
                .insert(name.to_owned(), dst);
            self.nodes
                .get_mut(&newparent)
                .unwrap()
                .entries
                .insert(newname.to_owned(), src);
            return Ok(());
        }
        if let Some(d) = dst {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            let (sd, dd) = (self.nodes[&src].dir, &self.nodes[&d]);
            match (sd, dd.dir) {
                (false, true) => return Err(Errno::EISDIR),
                (true, false) => return Err(Errno::ENOTDIR),
                (true, true) if !dd.entries.is_empty() => return Err(Errno::ENOTEMPTY),
                _ => {}
            }
        }
        let what = format!(
            "rename {} -> {}",
            self.name_of(parent, name),
            self.name_of(newparent, newname)
        );
        self.op(|| what)?;
        self.nodes.get_mut(&parent).unwrap().entries.remove(name);
        self.nodes
            .get_mut(&newparent)
            .unwrap()
            .entries
            .insert(newname.to_owned(), src);
        Ok(())
    }

    pub(super) fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        let what = format!("write {} @{offset}+{}", self.path_of(ino), data.len());
        self.op(|| what)?;
        let n = self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        let end = offset as usize + data.len();
        if n.data.len() < end {
            n.data.resize(end, 0);
        }
        n.data[offset as usize..end].copy_from_slice(data);
        n.mtime = SystemTime::now();
        Ok(data.len() as u32)
    }

    pub(super) fn fsync(&mut self, ino: u64) -> Result<(), Errno> {
        let what = format!("fsync {}", self.path_of(ino));
        self.op(|| what)?;
        let n = self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        if n.dir {
            n.durable_entries = n.entries.clone();
        } else {
            n.durable_data = n.data.clone();
        }
        Ok(())
    }
}
