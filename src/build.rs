//! Build script (Cargo.toml `build = "src/build.rs"`): link the `roger` binary as a
//! position-dependent executable.
//!
//! Why: a PIE roger carried 23,000 relative relocations (clap's, serde's and our own static
//! tables) that the dynamic loader applied on every start — 0.5 M instructions and ~120
//! copy-on-write page faults, a fifth of a repeated `critic --once`, which monitors call
//! every few minutes. Linked at a fixed address, those pointers are final in the file.
//! The cost is ASLR for roger's own code (libraries and the stack are still randomised);
//! roger runs with the user's rights on the user's files and parses no network input
//! beyond notify/IMDS replies. The library, tests and examples are unaffected.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bin=roger=-no-pie");
    }
    println!("cargo:rerun-if-changed=src/build.rs");
}
