//! A TensorBoard event file: TFRecord framing, protobuf, the tail over a file that grows and shrinks, the critic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A fresh directory per input: the reader sees only this input's files.
    let dir = tempfile::tempdir().expect("temp dir");
    roger::untrusted::tensorboard(dir.path(), data);
});
