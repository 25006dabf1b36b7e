//! The bucket's records, read back: `crate::checkpoints::bucket` (kept beside the last-good
//! rule so publish's retention needs nothing of the remote), re-exported here.

pub use crate::checkpoints::bucket::*;
