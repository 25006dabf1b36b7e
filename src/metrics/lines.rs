//! Splitting a log's bytes into lines and parsing them: in order, with 1-based line
//! numbers, on all cores when the stretch is large (a first read of a big log). Used by
//! [`super::tail::Tail`] and [`super::read_all`] (through [`LineReader`]).

use super::{Batch, Garbage, LineParser, Parsed};
use anyhow::{Context, Result};
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Read size for large stretches.
pub const CHUNK: usize = 2 << 20;
/// Below this, one thread parses; above it the lines are split across the cores.
const PARALLEL_MIN: usize = 1 << 20;

/// Split complete lines out of `data` and parse them; returns the bytes consumed (through
/// the last newline). Large stretches are parsed on all cores, in order.
pub fn feed(
    parser: &mut dyn LineParser,
    data: &[u8],
    line_no: &mut u64,
    path: &Path,
    out: &mut Batch,
) -> usize {
    feed_with(parser, data, line_no, path, out, &mut || {})
}

/// [`feed`], running `meanwhile` (once, on this thread) while other threads parse: a reader
/// hands the previous chunk's records on there, so their consumer overlaps the parsing.
pub fn feed_with(
    parser: &mut dyn LineParser,
    data: &[u8],
    line_no: &mut u64,
    path: &Path,
    out: &mut Batch,
    meanwhile: &mut dyn FnMut(),
) -> usize {
    let Some(last_nl) = memchr::memrchr(b'\n', data) else {
        meanwhile();
        return 0;
    };
    let data = &data[..=last_nl];
    // available_parallelism reads cgroup files: not for every small daemon tick.
    let threads = if data.len() >= PARALLEL_MIN {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        1
    };
    if threads > 1 {
        // One part per core besides this thread's own (smaller, as it runs `meanwhile`
        // first): the scheduler spreads the parts and the consumer over the cores.
        if let Some(forks) = (0..threads)
            .map(|_| parser.fork())
            .collect::<Option<Vec<_>>>()
        {
            feed_parallel(parser, forks, data, line_no, path, out, meanwhile);
            return data.len();
        }
    }
    meanwhile();
    feed_seq(parser, data, line_no, path, out);
    data.len()
}

fn feed_seq(
    parser: &mut dyn LineParser,
    data: &[u8],
    line_no: &mut u64,
    path: &Path,
    out: &mut Batch,
) {
    let mut start = 0;
    for nl in memchr::memchr_iter(b'\n', data) {
        *line_no += 1;
        one_line(parser, &data[start..nl], *line_no, path, out);
        start = nl + 1;
    }
}

/// `data` ends with a newline. Each thread takes a run of whole lines and numbers them from
/// 0; the results are stitched back in order with the line numbers shifted.
fn feed_parallel(
    parser: &mut dyn LineParser,
    forks: Vec<Box<dyn LineParser>>,
    data: &[u8],
    line_no: &mut u64,
    path: &Path,
    out: &mut Batch,
    meanwhile: &mut dyn FnMut(),
) {
    let parts = forks.len() + 1;
    let mut bounds = vec![0];
    for k in 1..parts {
        let guess = (data.len() * k / parts).max(*bounds.last().expect("non-empty"));
        let cut = memchr::memchr(b'\n', &data[guess..]).map_or(data.len(), |i| guess + i + 1);
        bounds.push(cut);
    }
    bounds.push(data.len());
    let results: Vec<(Batch, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = forks
            .into_iter()
            .enumerate()
            .map(|(k, mut p)| {
                let part = &data[bounds[k + 1]..bounds[k + 2]];
                scope.spawn(move || {
                    let (mut b, mut n) = (Batch::default(), 0);
                    // Room for lines of ~100 bytes up front: fewer regrowth copies.
                    b.records.reserve(part.len() / 100);
                    feed_seq(&mut *p, part, &mut n, path, &mut b);
                    (b, n)
                })
            })
            .collect();
        meanwhile();
        // The first part goes straight into `out`: its line numbers already continue.
        feed_seq(parser, &data[..bounds[1]], line_no, path, out);
        handles
            .into_iter()
            .map(|h| h.join().expect("parser thread"))
            .collect()
    });
    for (mut b, n) in results {
        for g in &mut b.garbage {
            g.line += *line_no;
        }
        out.records.append(&mut b.records);
        out.garbage_total += b.garbage_total;
        for g in b.garbage {
            if out.garbage.len() < super::GARBAGE_KEPT {
                out.garbage.push(g);
            }
        }
        *line_no += n;
    }
}

pub fn one_line(
    parser: &mut dyn LineParser,
    line: &[u8],
    line_no: u64,
    path: &Path,
    out: &mut Batch,
) {
    match parser.parse(line) {
        Parsed::Sample(s) => out.records.push(s),
        Parsed::Partial(s, why) => {
            out.records.push(s);
            out.push_garbage(Garbage {
                file: path.to_path_buf(),
                line: line_no,
                why,
            })
        }
        Parsed::Skip => {}
        Parsed::Garbage(why) => out.push_garbage(Garbage {
            file: path.to_path_buf(),
            line: line_no,
            why,
        }),
    }
}

/// Reads a whole file in large chunks, line by line.
pub struct LineReader<'a> {
    file: File,
    path: &'a Path,
}

impl<'a> LineReader<'a> {
    pub fn new(file: File, path: &'a Path) -> LineReader<'a> {
        LineReader { file, path }
    }

    /// Every line, the last one even without its newline (the file is taken as finished).
    pub fn read_to_end(&mut self, parser: &mut dyn LineParser, out: &mut Batch) -> Result<()> {
        let mut buf = vec![0u8; CHUNK];
        let mut have = 0;
        let mut line_no = 0;
        loop {
            if have == buf.len() {
                buf.resize(buf.len() * 2, 0); // a line longer than the buffer
            }
            let n = self
                .file
                .read(&mut buf[have..])
                .with_context(|| format!("reading log {}", self.path.display()))?;
            out.bytes += n as u64;
            crate::progress::advance(n as u64);
            if n == 0 {
                if have > 0 {
                    one_line(parser, &buf[..have], line_no + 1, self.path, out);
                }
                return Ok(());
            }
            have += n;
            let used = feed(parser, &buf[..have], &mut line_no, self.path, out);
            buf.copy_within(used..have, 0);
            have -= used;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::mapping::MetricsConfig;

    #[test]
    fn parallel_parse_keeps_order_and_line_numbers() {
        let mut data = String::new();
        for i in 0..200_000u64 {
            if i % 50_000 == 7 {
                data.push_str("garbage\n");
            } else {
                data.push_str(&format!("{{\"step\": {i}, \"loss\": 2.5}}\n"));
            }
        }
        assert!(data.len() > PARALLEL_MIN);
        let mut p = crate::metrics::jsonl::JsonlParser::new(&MetricsConfig::default());
        let (mut out, mut line_no) = (Batch::default(), 0);
        let used = feed(
            &mut p,
            data.as_bytes(),
            &mut line_no,
            Path::new("l"),
            &mut out,
        );
        assert_eq!((used, line_no), (data.len(), 200_000));
        assert!(out.records.windows(2).all(|w| w[1].step > w[0].step));
        assert_eq!(out.records.len(), 200_000 - 4);
        let lines: Vec<u64> = out.garbage.iter().map(|g| g.line).collect();
        assert_eq!(lines, vec![8, 50_008, 100_008, 150_008]);
    }
}
