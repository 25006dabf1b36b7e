//! roger's own log lines on stderr, through `tracing`: `roger=info,warn` by default
//! (`-v` debug, `-vv` trace, `-q` errors only), `RUST_LOG` overriding. Records of the `log`
//! crate (ureq) pass through the same filter (tracing-subscriber's `tracing-log` bridge).

use tracing_subscriber::EnvFilter;

pub fn init(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (_, 0) => "info",
        (_, 1) => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("roger={level},warn")));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // nohup.out and tmux logs must not fill with colour codes.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}
