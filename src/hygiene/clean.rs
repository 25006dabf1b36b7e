//! The log cleaner: a byte-level state machine that strips ANSI/VT escape sequences and
//! collapses `\r`-rewritten progress lines (tqdm, rich) to their final state. Streaming and
//! constant memory: it holds only the current line segment, capped at [`MAX_SEGMENT`].
//!
//! Semantics (what a terminal would finally show, for whole-line redraws as tqdm does them):
//! - CSI (`ESC [ ... final`), OSC/DCS/SOS/PM/APC strings (until BEL or `ESC \`), and
//!   two-byte/intermediate escapes (`ESC ( B`, `ESC 7`) are removed.
//! - `\r` followed by more text discards the segment before it (the line was redrawn);
//!   `\r\n` is a plain line end (Windows logs keep their text); a `\r` at end of input keeps
//!   the segment. An erase-line (`ESC [ K`) right after `\r` blanks the line.
//! - Backspace removes the previous character; other C0 controls except `\t` are dropped.
//! - A segment longer than [`MAX_SEGMENT`] is flushed early; a later `\r` on that line then
//!   starts a fresh line instead of retracting bytes already written.

use std::io::{Read, Write};

/// The most bytes of one line held back while waiting to see whether it is redrawn.
pub const MAX_SEGMENT: usize = 256 * 1024;
const BUF: usize = 256 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    /// After ESC.
    Esc,
    /// ESC followed by intermediates (0x20-0x2F), waiting for the final byte.
    EscInter,
    /// Inside `ESC [`: parameters and intermediates until a final byte 0x40-0x7E.
    Csi,
    /// Inside a string (OSC, DCS, SOS, PM, APC) until BEL or ST.
    Str,
    /// ESC seen inside a string: `\` ends it.
    StrEsc,
}

/// What the cleaner did, for the report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CleanStats {
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub lines: u64,
    pub escapes: u64,
    /// Redraws collapsed: `\r` segments discarded.
    pub redraws: u64,
}

/// Byte classes for the fast path: 0 = plain text byte, 1 = needs the state machine.
static SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = i != b'\t' as usize;
        i += 1;
    }
    t[0x7f] = true;
    t
};

pub struct Cleaner {
    state: State,
    seg: Vec<u8>,
    /// Part of the current line already written (segment overflow).
    committed: bool,
    pending_cr: bool,
    stats: CleanStats,
}

impl Default for Cleaner {
    fn default() -> Self {
        Cleaner::new()
    }
}

impl Cleaner {
    pub fn new() -> Cleaner {
        Cleaner {
            state: State::Ground,
            seg: Vec::with_capacity(4096),
            committed: false,
            pending_cr: false,
            stats: CleanStats::default(),
        }
    }

    pub fn stats(&self) -> CleanStats {
        self.stats
    }

    /// Clean one chunk; output is appended to `out`. Chunk boundaries never change the result.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        self.stats.bytes_in += input.len() as u64;
        let before = out.len();
        let mut i = 0;
        while i < input.len() {
            if self.state == State::Ground {
                // Fast path: a run of plain bytes goes to the segment in one copy.
                let run = input[i..]
                    .iter()
                    .position(|&b| SPECIAL[b as usize])
                    .unwrap_or(input.len() - i);
                if run > 0 {
                    self.resolve_cr(out);
                    self.push_text(&input[i..i + run], out);
                    i += run;
                    continue;
                }
            }
            self.step(input[i], out);
            i += 1;
        }
        self.stats.bytes_out += (out.len() - before) as u64;
    }

    /// End of input: what is left of the last line is its final state.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let before = out.len();
        out.extend_from_slice(&self.seg);
        if !self.seg.is_empty() || self.committed {
            self.stats.lines += 1;
        }
        self.seg.clear();
        self.committed = false;
        self.pending_cr = false;
        self.state = State::Ground;
        self.stats.bytes_out += (out.len() - before) as u64;
    }

    fn step(&mut self, b: u8, out: &mut Vec<u8>) {
        match self.state {
            State::Ground => match b {
                0x1b => self.state = State::Esc,
                b'\n' => {
                    self.pending_cr = false;
                    out.extend_from_slice(&self.seg);
                    out.push(b'\n');
                    self.seg.clear();
                    self.committed = false;
                    self.stats.lines += 1;
                }
                b'\r' => self.pending_cr = true,
                0x08 => {
                    self.resolve_cr(out);
                    pop_char(&mut self.seg);
                }
                _ => {} // other C0 controls and DEL: dropped
            },
            State::Esc => {
                self.state = match b {
                    b'[' => State::Csi,
                    b']' | b'P' | b'X' | b'^' | b'_' => State::Str,
                    0x20..=0x2f => State::EscInter,
                    _ => {
                        self.stats.escapes += 1;
                        State::Ground
                    }
                }
            }
            State::EscInter => {
                if !(0x20..=0x2f).contains(&b) {
                    self.stats.escapes += 1;
                    self.state = State::Ground;
                }
            }
            State::Csi => {
                if (0x40..=0x7e).contains(&b) {
                    self.stats.escapes += 1;
                    self.state = State::Ground;
                    if b == b'K' && self.pending_cr {
                        // `\r ESC[K`: the line was erased before the redraw.
                        self.seg.clear();
                    }
                }
            }
            State::Str => match b {
                0x07 => {
                    self.stats.escapes += 1;
                    self.state = State::Ground;
                }
                0x1b => self.state = State::StrEsc,
                _ => {}
            },
            State::StrEsc => {
                self.state = if b == b'\\' {
                    self.stats.escapes += 1;
                    State::Ground
                } else {
                    State::Str
                }
            }
        }
    }

    /// Text after a `\r`: the earlier segment was overwritten.
    fn resolve_cr(&mut self, out: &mut Vec<u8>) {
        if !self.pending_cr {
            return;
        }
        self.pending_cr = false;
        self.stats.redraws += 1;
        self.seg.clear();
        if self.committed {
            // Bytes of this line are already out; the redraw goes on a line of its own.
            out.push(b'\n');
            self.stats.lines += 1;
            self.committed = false;
        }
    }

    fn push_text(&mut self, text: &[u8], out: &mut Vec<u8>) {
        self.seg.extend_from_slice(text);
        if self.seg.len() > MAX_SEGMENT {
            out.extend_from_slice(&self.seg);
            self.seg.clear();
            self.committed = true;
        }
    }
}

/// Remove the last UTF-8 character (backspace).
fn pop_char(seg: &mut Vec<u8>) {
    while let Some(b) = seg.pop() {
        if b & 0xc0 != 0x80 {
            break;
        }
    }
}

/// Clean a whole stream with fixed buffers; returns what was done.
pub fn clean_stream(mut r: impl Read, mut w: impl Write) -> std::io::Result<CleanStats> {
    let mut cleaner = Cleaner::new();
    let mut buf = vec![0u8; BUF];
    let mut out = Vec::with_capacity(BUF + MAX_SEGMENT);
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        cleaner.feed(&buf[..n], &mut out);
        w.write_all(&out)?;
        out.clear();
    }
    cleaner.finish(&mut out);
    w.write_all(&out)?;
    w.flush()?;
    Ok(cleaner.stats())
}

/// Convenience for small inputs and tests.
pub fn clean_bytes(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut c = Cleaner::new();
    c.feed(input, &mut out);
    c.finish(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(s: &str) -> String {
        String::from_utf8(clean_bytes(s.as_bytes())).unwrap()
    }

    #[test]
    fn strips_colours_and_cursor_moves() {
        assert_eq!(clean("\x1b[1;32mok\x1b[0m done\n"), "ok done\n");
        assert_eq!(clean("a\x1b[2Kb\x1b[?25lc\n"), "abc\n");
        assert_eq!(clean("\x1b(Bx\x1b7y\x1b8\n"), "xy\n");
    }

    #[test]
    fn strips_osc_titles_and_hyperlinks() {
        assert_eq!(clean("\x1b]0;title\x07text\n"), "text\n");
        assert_eq!(
            clean("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n"),
            "link\n"
        );
        assert_eq!(clean("\x1bPq#0;2;0;0;0\x1b\\after\n"), "after\n");
    }

    #[test]
    fn tqdm_redraws_collapse_to_the_final_state() {
        let s = "epoch 1\n  0%|          | 0/3\r 33%|###       | 1/3\r100%|##########| 3/3\nnext\n";
        assert_eq!(clean(s), "epoch 1\n100%|##########| 3/3\nnext\n");
        let mut c = Cleaner::new();
        let mut out = Vec::new();
        c.feed(s.as_bytes(), &mut out);
        c.finish(&mut out);
        assert_eq!(c.stats().redraws, 2);
        assert_eq!(c.stats().lines, 3);
    }

    #[test]
    fn crlf_keeps_its_text_and_trailing_cr_keeps_the_segment() {
        assert_eq!(clean("a\r\nb\r\n"), "a\nb\n");
        assert_eq!(clean("50%\r100%\r"), "100%");
        assert_eq!(clean("50%\r\x1b[K\n"), "\n");
    }

    #[test]
    fn backspace_and_controls() {
        assert_eq!(clean("ab\x08c\x07\n"), "ac\n");
        assert_eq!(clean("é\x08x\n"), "x\n");
        assert_eq!(clean("a\tb\n"), "a\tb\n");
    }

    #[test]
    fn chunk_boundaries_do_not_matter() {
        let s = "\x1b[31mred\x1b[0m\r\n 1%\r\x1b[2K 2%\r\x1b]0;t\x1b\\99%\nend\x1b";
        let whole = clean_bytes(s.as_bytes());
        for size in 1..8 {
            let mut c = Cleaner::new();
            let mut out = Vec::new();
            for chunk in s.as_bytes().chunks(size) {
                c.feed(chunk, &mut out);
            }
            c.finish(&mut out);
            assert_eq!(out, whole, "chunk size {size}");
        }
    }

    #[test]
    fn long_lines_are_flushed_and_memory_stays_bounded() {
        let long = "x".repeat(MAX_SEGMENT + 10);
        let s = format!("{long}\rredraw\n");
        let out = clean(&s);
        assert_eq!(out, format!("{long}\nredraw\n"));
        let mut c = Cleaner::new();
        let mut out = Vec::new();
        for _ in 0..10 {
            c.feed(long.as_bytes(), &mut out);
            out.clear();
            assert!(c.seg.len() <= MAX_SEGMENT);
        }
    }

    #[test]
    fn idempotent() {
        let s = "\x1b[1m a\r b\n\x1b[0m c\r\n";
        let once = clean_bytes(s.as_bytes());
        assert_eq!(clean_bytes(&once), once);
    }
}
