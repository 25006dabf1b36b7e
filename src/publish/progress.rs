//! Progress of a publish on a terminal, drawn by the crate's one bar (`crate::progress`):
//! the copy with its verify from disk (or, in place, the verify alone), with its bytes, rate and time left; nothing when
//! stderr is not a terminal (logs and pipes stay clean). The byte path only bumps a counter.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Copy and, file by file as each is fsynced, verify from disk (twice the bytes).
    CopyAndVerify,
    Verify,
}

/// A phase of `total` bytes starts.
pub fn begin(phase: Phase, total: u64) {
    let what = match phase {
        Phase::CopyAndVerify => "publish: copy + verify from disk",
        Phase::Verify => "publish: verify from disk",
    };
    crate::progress::phase(what, total);
}

/// `n` more bytes of the current phase are done.
pub fn add(n: u64) {
    crate::progress::advance(n);
}

/// The bar for one publish (cleared when dropped); None off a terminal or under `-q`.
pub fn on_terminal() -> Option<crate::progress::Reading> {
    crate::progress::bytes("publish", 0)
}
