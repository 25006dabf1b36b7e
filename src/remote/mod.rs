//! The bucket: checkpoints that outlive the machine. A publish completes locally first; then an
//! uploader sends the checkpoint to an S3-compatible bucket (multipart, per-part SHA-256),
//! re-reads it to verify it, moves the bucket's `latest.json` forward with a conditional write,
//! and mirrors the ledger, so that a fresh machine can rebuild the ledger and resume from the
//! last good checkpoint that is verified in the bucket.
//!
//! Layout under `s3://bucket/prefix/`: `checkpoints/<name>` (a directory checkpoint: one
//! object per file, `checkpoints/<name>/<relpath>`), `latest.json`, `roger-ledger.jsonl`.
//! Decisions (what to upload, what counts as verified, what retention may delete) are pure
//! and fed with ledger records; the object store sits behind [`store::Store`].

pub mod creds;
pub mod endpoint;
pub mod fetch;
pub mod latest;
pub mod mirror;
pub mod queue;
pub mod records;
pub mod store;
pub mod upload;

pub use crate::config::remote::{Remote, RemoteConfig, Target, VerifyMode};
