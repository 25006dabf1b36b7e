//! Files roger creates in someone else's directory (`sudo roger publish` into a user's run
//! dir) are handed to that directory's owner, so the next run as that user can still lock and
//! append to them.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// When running as root in a directory owned by another user, make `file` (just created in
/// `dir`) that user's. Best effort: a failure leaves the file as it was and says nothing,
/// because the file itself is fine for root.
pub fn give_to_dir_owner(file: &File, dir: &Path) {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let Ok(meta) = std::fs::metadata(dir) else {
        return;
    };
    if meta.uid() == 0 {
        return;
    }
    let _ = nix::unistd::fchown(
        std::os::fd::AsRawFd::as_raw_fd(file),
        Some(nix::unistd::Uid::from_raw(meta.uid())),
        Some(nix::unistd::Gid::from_raw(meta.gid())),
    );
}

/// Whether this process may create or write files in `dir` (`access(2)`, W_OK|X_OK).
pub fn dir_writable(dir: &Path) -> bool {
    nix::unistd::access(
        dir,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .is_ok()
}
