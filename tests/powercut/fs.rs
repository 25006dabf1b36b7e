//! An in-memory FUSE filesystem that forgets what a power cut forgets (`state`): file
//! contents not fsynced since they were written, and directory entries (creates, renames,
//! links, unlinks) not made durable by an fsync of their directory. When the armed cut point
//! is reached the operation is not performed, it and everything after it fail with EIO (the
//! machine is off), and `State::reboot` yields the durable state alone. `State::drvfs()`
//! makes it answer like WSL2's drvfs/9p instead: EINVAL to a directory fsync, EPERM to a link.

use super::state::State;
use fuser::{
    Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

const TTL: Duration = Duration::ZERO;

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
            if s.drvfs {
                return Err(Errno::EPERM);
            }
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
        if self.st().drvfs {
            return reply.error(Errno::EINVAL);
        }
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
