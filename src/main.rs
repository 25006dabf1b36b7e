//! The `roger` binary: the command line in, an exit code out (see `roger::exit`).

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(roger::run(std::env::args_os()))
}
