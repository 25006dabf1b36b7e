//! An in-memory FUSE filesystem that forgets what a power cut forgets: file contents not
//! fsynced since they were written, and directory entries (creates, renames, links, unlinks)
//! not made durable by an fsync of their directory. Every mutating operation is counted; when
//! the count reaches the armed cut point the operation is not performed, it and everything
//! after it fail with EIO (the machine is off), and `reboot` yields the durable state alone.

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

const TTL: Duration = Duration::ZERO;

#[derive(Clone, Debug)]
struct Node {
    dir: bool,
    perm: u16,
    data: Vec<u8>,
    entries: BTreeMap<OsString, u64>,
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
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Mutating operations performed (or refused at the cut) since the last reboot.
    pub ops: u64,
    /// Cut power when this operation (1-based) arrives.
    pub cut_at: Option<u64>,
    /// Power is off: everything fails with EIO.
    pub dead: bool,
    /// What each counted operation was, for failure messages.
    pub log: Vec<String>,
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
        }
    }

    /// Count a mutating operation; `Err(EIO)` when power is (or goes) off here.
    fn op(&mut self, what: impl FnOnce() -> String) -> Result<(), Errno> {
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

    fn alive(&self) -> Result<(), Errno> {
        if self.dead {
            Err(Errno::EIO)
        } else {
            Ok(())
        }
    }

    fn name_of(&self, parent: u64, name: &OsStr) -> String {
        format!("{}/{}", self.path_of(parent), name.to_string_lossy())
    }

    fn path_of(&self, ino: u64) -> String {
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

    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
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

    fn child(&self, parent: u64, name: &OsStr) -> Result<u64, Errno> {
        let p = self.nodes.get(&parent).ok_or(Errno::ENOENT)?;
        if !p.dir {
            return Err(Errno::ENOTDIR);
        }
        p.entries.get(name).copied().ok_or(Errno::ENOENT)
    }

    fn make(&mut self, parent: u64, name: &OsStr, dir: bool, mode: u32) -> Result<u64, Errno> {
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

    fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
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

    fn rename(
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

    fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<u32, Errno> {
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

    fn fsync(&mut self, ino: u64) -> Result<(), Errno> {
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

/// The FUSE face of a shared `State`.
pub struct PowerCutFs(pub Arc<Mutex<State>>);

impl PowerCutFs {
    fn st(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Filesystem for PowerCutFs {
    fn lookup(&self, _: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let s = self.st();
        match s
            .alive()
            .and_then(|_| s.child(parent.0, name))
            .and_then(|i| s.attr(i))
        {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _: &Request, ino: INodeNo, _: Option<FileHandle>, reply: ReplyAttr) {
        let s = self.st();
        match s.alive().and_then(|_| s.attr(ino.0)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut s = self.st();
        let r = (|| {
            s.alive()?;
            if size.is_some() || mode.is_some() {
                let what = format!("setattr {} size {size:?}", s.path_of(ino.0));
                s.op(|| what)?;
            }
            let n = s.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
            if let Some(len) = size {
                n.data.resize(len as usize, 0);
            }
            if let Some(m) = mode {
                n.perm = (m & 0o7777) as u16;
            }
            s.attr(ino.0)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        _: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let mut s = self.st();
        match s.make(parent.0, name, false, mode).and_then(|i| s.attr(i)) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut s = self.st();
        match s.make(parent.0, name, true, mode).and_then(|i| s.attr(i)) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.st().remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.st().remove(parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self
            .st()
            .rename(parent.0, name, newparent.0, newname, flags)
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut s = self.st();
        let r = (|| {
            if s.child(newparent.0, newname).is_ok() {
                return Err(Errno::EEXIST);
            }
            let what = format!(
                "link {} -> {}",
                s.path_of(ino.0),
                s.name_of(newparent.0, newname)
            );
            s.op(|| what)?;
            let p = s.nodes.get_mut(&newparent.0).ok_or(Errno::ENOENT)?;
            p.entries.insert(newname.to_owned(), ino.0);
            s.attr(ino.0)
        })();
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.st().alive() {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let s = self.st();
        let r = s
            .alive()
            .and_then(|_| s.nodes.get(&ino.0).ok_or(Errno::ENOENT));
        match r {
            Ok(n) => {
                let start = (offset as usize).min(n.data.len());
                let end = (start + size as usize).min(n.data.len());
                reply.data(&n.data[start..end]);
            }
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _wf: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.st().write(ino.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _: &Request, _: INodeNo, _: FileHandle, _: LockOwner, reply: ReplyEmpty) {
        match self.st().alive() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(&self, _: &Request, ino: INodeNo, _: FileHandle, _: bool, reply: ReplyEmpty) {
        match self.st().fsync(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.st().alive() {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let s = self.st();
        let n = match s
            .alive()
            .and_then(|_| s.nodes.get(&ino.0).ok_or(Errno::ENOENT))
        {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let mut all: Vec<(u64, FileType, OsString)> = vec![
            (ino.0, FileType::Directory, ".".into()),
            (1, FileType::Directory, "..".into()),
        ];
        for (name, &i) in &n.entries {
            let kind = if s.nodes.get(&i).is_some_and(|c| c.dir) {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            all.push((i, kind, name.clone()));
        }
        for (k, (i, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(i), (k + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(&self, _: &Request, ino: INodeNo, _: FileHandle, _: bool, reply: ReplyEmpty) {
        match self.st().fsync(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.st().alive() {
            Ok(()) => reply.statfs(1 << 24, 1 << 23, 1 << 23, 1 << 20, 1 << 19, 4096, 255, 4096),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        match self.st().alive() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut s = self.st();
        match s.make(parent.0, name, false, mode).and_then(|i| s.attr(i)) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }
}

/// A mounted `PowerCutFs`, unmounted on drop.
pub struct Mounted {
    session: Option<fuser::BackgroundSession>,
    pub state: Arc<Mutex<State>>,
}

impl Mounted {
    pub fn mount(state: State, at: &Path) -> std::io::Result<Mounted> {
        let state = Arc::new(Mutex::new(state));
        let mut cfg = fuser::Config::default();
        cfg.mount_options = vec![
            fuser::MountOption::FSName("roger-powercut".into()),
            fuser::MountOption::DefaultPermissions,
        ];
        let session = fuser::spawn_mount(PowerCutFs(state.clone()), at, &cfg)?;
        Ok(Mounted {
            session: Some(session),
            state,
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Unmount and hand back the state as it was at the end.
    pub fn unmount(mut self) -> State {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
        self.lock().clone()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}
