//! The file under a tailing reader of framed record files (TensorBoard's TFRecord event files,
//! W&B's `.wandb` datastores): the open file and how far it was read, its [`Place`] for a later
//! process (the file's identity, the offset, and the bytes that notice it rewritten), going on
//! from a place, and whole reads at an offset. The framing, the records and what they mean
//! stay with their format; this owns only the file.

use anyhow::{Context, Result};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Bytes of a file's start (and before a place's offset) kept to notice a rewrite.
pub const HEAD: usize = 64;

/// An open record file and how far it was read.
#[derive(Debug)]
pub struct Cursor {
    pub path: PathBuf,
    pub file: File,
    /// Device and inode: another file at the same path is a restart.
    pub id: (u64, u64),
    /// Where the next read starts (after the last whole record).
    pub offset: u64,
    /// Records passed so far (good or damaged), for numbering what is reported.
    pub records: u64,
    /// The file's first bytes, up to [`HEAD`].
    pub head: Vec<u8>,
}

/// Where a [`Cursor`] stood, for a later process to go on from (the critic's summary cache).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Place {
    path: PathBuf,
    dev: u64,
    ino: u64,
    offset: u64,
    records: u64,
    #[serde(with = "serde_bytes")]
    head: Vec<u8>,
    /// The bytes just before `offset` (a record's checksum among them).
    #[serde(with = "serde_bytes")]
    before: Vec<u8>,
}

impl Cursor {
    /// `path` from its start; `what` names the kind of file in an error.
    pub fn open(path: &Path, what: &str) -> Result<Cursor> {
        let file =
            File::open(path).with_context(|| format!("opening {what} {}", path.display()))?;
        let meta = file
            .metadata()
            .with_context(|| format!("stat {what} {}", path.display()))?;
        Ok(Cursor {
            path: path.to_path_buf(),
            file,
            id: (meta.dev(), meta.ino()),
            offset: 0,
            records: 0,
            head: Vec::new(),
        })
    }

    /// Where the read stands; `None` when the bytes before the offset cannot be read.
    pub fn place(&self) -> Option<Place> {
        let before = crate::metrics::bytes_before(&self.file, self.offset, HEAD)?;
        Some(Place {
            path: self.path.clone(),
            dev: self.id.0,
            ino: self.id.1,
            offset: self.offset,
            records: self.records,
            head: self.head.clone(),
            before,
        })
    }

    /// Go on where `p` stood, or say why not (another file, shorter, rewritten).
    pub fn resume(p: &Place) -> Result<Cursor, String> {
        let file =
            crate::metrics::reopen_at(&p.path, (p.dev, p.ino), p.offset, &p.head, &p.before)?;
        Ok(Cursor {
            path: p.path.clone(),
            file,
            id: (p.dev, p.ino),
            offset: p.offset,
            records: p.records,
            head: p.head.clone(),
        })
    }

    /// Bytes left after the offset (0 when the file cannot be stat'ed).
    pub fn pending(&self) -> u64 {
        self.file
            .metadata()
            .map_or(0, |m| m.len().saturating_sub(self.offset))
    }

    /// Whether the file still starts with the head read from it (else it was rewritten).
    pub fn head_holds(&self) -> bool {
        let mut got = vec![0u8; self.head.len()];
        self.file.read_exact_at(&mut got, 0).is_ok() && got == self.head
    }

    /// `read_at` until `buf` is full or the file ends.
    pub fn read_full(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match self.file.read_at(&mut buf[got..], offset + got as u64)? {
                0 => break,
                n => got += n,
            }
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A place carries the read to another cursor; a file rewritten before the offset, or
    /// replaced, is refused with the reason.
    #[test]
    fn a_place_resumes_and_a_rewrite_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 200]).unwrap();
        let mut c = Cursor::open(&path, "test file").unwrap();
        let mut buf = [0u8; 150];
        assert_eq!(c.read_full(&mut buf, 0).unwrap(), 150);
        c.head = buf[..HEAD].to_vec();
        (c.offset, c.records) = (150, 3);
        assert_eq!(c.pending(), 50);
        let p = c.place().unwrap();
        let r = Cursor::resume(&p).unwrap();
        assert_eq!((r.offset, r.records, r.id), (150, 3, c.id));
        assert!(r.head_holds());
        let mut bytes = vec![7u8; 200];
        bytes[120] = 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(Cursor::resume(&p).unwrap_err().contains("rewritten"));
        std::fs::write(&path, vec![7u8; 100]).unwrap();
        assert!(Cursor::resume(&p).unwrap_err().contains("truncated"));
    }
}
