//! Colour for statuses on a terminal only. The choice follows ripgrep's conventions through
//! `anstream`: `--color auto|always|never`, then `NO_COLOR` (off) and `CLICOLOR_FORCE` (on),
//! then whether stdout is a terminal. Styles come from `anstyle`, never hand-written codes.

use anstyle::{AnsiColor, Style};

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum When {
    /// Colour when stdout is a terminal (NO_COLOR / CLICOLOR_FORCE honoured).
    #[default]
    Auto,
    Always,
    Never,
}

/// Set once at start from the flag.
pub fn init(when: When) {
    anstream::ColorChoice::write_global(match when {
        When::Auto => anstream::ColorChoice::Auto,
        When::Always => anstream::ColorChoice::Always,
        When::Never => anstream::ColorChoice::Never,
    });
}

/// Whether stdout gets colour now.
pub fn stdout() -> bool {
    anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never
}

/// The style of a status word: pass/ok green, warn yellow, fail red, unknown magenta.
pub fn style_for(word: &str) -> Style {
    let colour = match word.to_ascii_lowercase().as_str() {
        "pass" | "ok" | "done" => AnsiColor::Green,
        "warn" | "attention" => AnsiColor::Yellow,
        "fail" | "stopped" | "critical" => AnsiColor::Red,
        _ => AnsiColor::Magenta,
    };
    Style::new().bold().fg_color(Some(colour.into()))
}

/// `word` styled for its status when `on`, else as it is.
pub fn status(word: &str, on: bool) -> String {
    paint(word, word, on)
}

/// `text` (e.g. a padded status word) styled for the status `word` when `on`.
pub fn paint(text: &str, word: &str, on: bool) -> String {
    if on {
        let s = style_for(word.trim());
        format!("{s}{text}{s:#}")
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_painted_only_when_asked() {
        assert_eq!(status("PASS", false), "PASS");
        let on = status("FAIL", true);
        assert!(
            on.starts_with('\u{1b}') && on.contains("FAIL") && on.ends_with("\u{1b}[0m"),
            "{on:?}"
        );
        assert_ne!(style_for("warn"), style_for("pass"));
    }
}
