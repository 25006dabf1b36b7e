//! `roger completions SHELL`: print a completion script generated from the CLI definition.

use clap::Args;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// Shell to generate for. Install e.g. `roger completions bash > /etc/bash_completion.d/roger`.
    pub shell: clap_complete::Shell,
}

/// `cmd` is the whole command tree (`cli::full_command`), handed down by the dispatch.
pub fn run(args: CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<u8> {
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "roger", &mut buf);
    crate::outln!("{}", String::from_utf8_lossy(&buf).trim_end());
    Ok(crate::exit::DONE)
}
