//! Build script (Cargo.toml `build = "src/build.rs"`): link the `roger` binary for a cheap
//! start. Monitors call `roger critic --once` every few minutes; on a repeated call the start
//! of the process is most of its cost. The library, tests and examples are unaffected.
//!
//! 1. Position-dependent. A PIE roger carried 23,000 relative relocations (clap's, serde's
//!    and our own static tables) that the dynamic loader applied on every start — 0.5 M
//!    instructions and ~120 copy-on-write page faults. Linked at a fixed address, those
//!    pointers are final in the file. The cost is ASLR for roger's own code (libraries and
//!    the stack are still randomised); roger runs with the user's rights on the user's files
//!    and parses no network input beyond notify/IMDS replies.
//! 2. The unwinder from `libgcc_eh.a` instead of `libgcc_s.so.1` (what `gcc -static-libgcc`
//!    does; rustc names `-lgcc_s` itself, so a linker script of that name, found first,
//!    stands in for it). Loading libgcc_s runs its constructor `__cpu_indicator_init`,
//!    which executes CPUID about twenty times; in a VM every CPUID traps to the hypervisor
//!    (6.7 µs each on the CI VM), and that constructor was 0.18 ms of a 1.4 ms check. Panics
//!    still unwind (`roger bench` catches cudarc's panics when CUDA is missing or old; its
//!    test runs the real binary). When the toolchain has no `libgcc_eh.a` the binary links
//!    libgcc_s as before.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    println!("cargo:rustc-link-arg-bin=roger=-no-pie");
    if std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu") {
        if let Some(dir) = static_unwinder_dir() {
            // GNU ld and lld apply every -L to every -l, wherever either stands.
            println!("cargo:rustc-link-arg-bin=roger=-L{}", dir.display());
        }
    }
}

/// A directory holding `libgcc_s.so`, a linker script naming the toolchain's `libgcc_eh.a`.
fn static_unwinder_dir() -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()?;
    let eh = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    // A compiler that does not know the file prints the bare name back.
    if !out.status.success() || !eh.is_absolute() || !eh.is_file() {
        println!("cargo:warning=no libgcc_eh.a found; roger links libgcc_s.so.1 (slower start)");
        return None;
    }
    let dir = PathBuf::from(std::env::var_os("OUT_DIR")?).join("static-unwinder");
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::write(
        dir.join("libgcc_s.so"),
        format!(
            "/* roger: unwinder linked statically */\nINPUT({})\n",
            eh.display()
        ),
    )
    .ok()?;
    Some(dir)
}
