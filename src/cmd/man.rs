//! `roger man`: manual pages in roff, generated from the same clap definition as `--help` and
//! the completions (clap_mangen), so a page cannot miss an option the binary has.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write roger.1 and one page per subcommand (roger-critic.1, roger-hygiene-disk.1, ...)
    /// into DIR instead of printing roger(1), e.g. `roger man --dir ~/.local/share/man/man1`.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `cmd` is the whole command tree (`cli::full_command`), handed down by the dispatch.
pub fn run(args: ManArgs, cmd: clap::Command) -> anyhow::Result<u8> {
    // NAME reads "roger - a guard ...", not the help's "roger: a guard ...".
    let cmd = cmd.about("a guard for long GPU training runs");
    match args.dir {
        None => {
            crate::out::text(&roff(&clap_mangen::Man::new(cmd))?);
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("creating the man page directory {}", dir.display()))?;
            for page in pages(cmd) {
                let path = dir.join(page.get_filename());
                // Replaced by rename: a crash never leaves an installed page torn.
                let how = crate::sys::fsx::Replace::new(crate::sys::fsx::Durability::Atomic, 0o644);
                crate::sys::fsx::write_atomic(&path, roff(&page)?.as_bytes(), how)
                    .with_context(|| format!("writing the man page {}", path.display()))?;
                crate::outln!("{}", path.display());
            }
        }
    }
    Ok(crate::exit::DONE)
}

/// The page as roff in plain ASCII: any other character (the help's em dashes) as groff's
/// `\[uXXXX]` escape, which groff and mandoc read without a preprocessor; troff itself takes
/// raw UTF-8 as invalid input where `man` does not run preconv first.
fn roff(page: &clap_mangen::Man) -> anyhow::Result<String> {
    let mut buf = Vec::new();
    page.render(&mut buf)?;
    let text = String::from_utf8(buf)?;
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\[u{:04X}]", u32::from(c)));
        }
    }
    Ok(out)
}

/// One page for the command and one for each subcommand at any depth, top first; clap's
/// `help` subcommand (a copy of the tree) gets none.
fn pages(cmd: clap::Command) -> Vec<clap_mangen::Man> {
    fn walk(cmd: &clap::Command, out: &mut Vec<clap_mangen::Man>) {
        out.push(clap_mangen::Man::new(cmd.clone()));
        for sub in cmd
            .get_subcommands()
            .filter(|s| s.get_name() != "help" && !s.is_hide_set())
        {
            walk(sub, out);
        }
    }
    let mut out = Vec::new();
    walk(&cmd, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand at every depth has its page, named as `man roger-hygiene-disk` finds it.
    #[test]
    fn one_page_per_subcommand_at_every_depth() {
        let names: Vec<String> = pages(crate::cli::full_command())
            .iter()
            .map(|p| p.get_filename())
            .collect();
        assert_eq!(names[0], "roger.1");
        for want in [
            "roger-critic.1",
            "roger-hygiene-disk.1",
            "roger-quarantine-add.1",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("help")), "{names:?}");
        // critic, watch, ... and the nested ones, each once.
        let roles = crate::exit::ROLES.len();
        assert_eq!(names.len(), roles + 1, "{names:?}");
    }

    /// The em dash of roger's own help text reaches troff as an escape it reads.
    #[test]
    fn pages_are_ascii_with_escapes() {
        let page = roff(&clap_mangen::Man::new(crate::cli::full_command())).unwrap();
        assert!(page.is_ascii());
        assert!(page.contains("\\[u2014]"), "{page}");
    }
}
