//! Reading the ledger back: the scan that checks every hash and the chain (torn lines skipped
//! and reported), the tail read that finds the record an append chains to, and the refusal to
//! append to a file that is not a ledger.

use super::*;
use crate::digest::short;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// Walk the lines, check each hash and the chain; torn lines are skipped.
pub fn scan_bytes(bytes: &[u8]) -> Scan {
    let mut scan = Scan::default();
    let mut offset = 0usize;
    let mut line_no = 0u64;
    let mut expect_prev = GENESIS.to_string();
    let mut expect_seq = 1u64;
    while offset < bytes.len() {
        line_no += 1;
        let end = bytes[offset..].iter().position(|&b| b == b'\n');
        let (line, terminated, next) = match end {
            Some(i) => (&bytes[offset..offset + i], true, offset + i + 1),
            None => (&bytes[offset..], false, bytes.len()),
        };
        let at = offset as u64;
        offset = next;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let is_last = offset >= bytes.len();
        let parsed = std::str::from_utf8(line)
            .map_err(|e| format!("not UTF-8: {e}"))
            .and_then(|s| parse_record(s).map_err(|e| e.to_string()));
        let rec = match parsed {
            Ok(mut r) => {
                r.offset = at;
                r
            }
            Err(why) => {
                // Unterminated last line: a crash mid-append. A bad line that was later
                // followed by a good one is the same torn write with the next append after it;
                // the chain check on the next record still catches a removed/garbled record.
                let torn = could_be_torn(line) && (!terminated || !is_last);
                scan.problems.push(Problem {
                    line: line_no,
                    offset: at,
                    seq: None,
                    what: if torn {
                        format!("torn line skipped ({why})")
                    } else if !could_be_torn(line) {
                        format!(
                            "not a roger ledger record ({why}): expected a line starting {RECORD_START}, found {}",
                            preview(line)
                        )
                    } else {
                        format!("unparseable final line ({why})")
                    },
                    torn,
                });
                continue;
            }
        };
        if !terminated {
            scan.problems.push(Problem {
                line: line_no,
                offset: at,
                seq: Some(rec.seq),
                what: "last line has no newline (torn write); skipped".into(),
                torn: true,
            });
            continue;
        }
        let actual = rec.compute_hash();
        if actual != rec.hash {
            scan.problems.push(Problem {
                line: line_no,
                offset: at,
                seq: Some(rec.seq),
                what: format!(
                    "hash mismatch: the record was edited (stored {}, content hashes to {})",
                    short(&rec.hash),
                    short(&actual)
                ),
                torn: false,
            });
        } else if rec.prev != expect_prev {
            scan.problems.push(Problem {
                line: line_no,
                offset: at,
                seq: Some(rec.seq),
                what: format!(
                    "chain broken: prev {} does not match the previous record's hash {} (a record before it was removed or altered)",
                    short(&rec.prev),
                    short(&expect_prev)
                ),
                torn: false,
            });
        } else if rec.seq != expect_seq {
            scan.problems.push(Problem {
                line: line_no,
                offset: at,
                seq: Some(rec.seq),
                what: format!("sequence gap: expected seq {expect_seq}, found {}", rec.seq),
                torn: false,
            });
        }
        expect_prev = rec.hash.clone();
        expect_seq = rec.seq.saturating_add(1);
        scan.records.push(rec);
    }
    scan
}

/// Every line roger writes starts with this.
const RECORD_START: &str = "{\"seq\":";

/// What a crash mid-append can leave: a prefix of a record line, possibly after blocks the
/// filesystem zero-filled. Any other bad line was never written by roger.
pub(super) fn could_be_torn(line: &[u8]) -> bool {
    let start = line.iter().position(|&b| b != 0).unwrap_or(line.len());
    let rest = &line[start..];
    let n = rest.len().min(RECORD_START.len());
    rest[..n] == RECORD_START.as_bytes()[..n]
}

fn preview(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(40)]);
    format!("{text:?}")
}

/// Appending to a file that is not a ledger (a training log, a checkpoint: `--ledger` pointed
/// at the wrong file) would corrupt it. Its first line tells: roger's start `{"seq":`.
pub(super) fn refuse_foreign_file(file: &mut File, path: &Path) -> Result<()> {
    let mut head = Vec::with_capacity(4096);
    file.seek(SeekFrom::Start(0))?;
    Read::by_ref(file).take(4096).read_to_end(&mut head)?;
    let Some(start) = head.iter().position(|b| !b.is_ascii_whitespace()) else {
        return Ok(());
    };
    let first = &head[start..];
    let first = &first[..first
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(first.len())];
    if could_be_torn(first) {
        return Ok(());
    }
    bail!(
        "{} is not a roger ledger: its first line starts {}, expected a record starting {RECORD_START}; refusing to append to it (does --ledger or [run] ledger name the wrong file?)",
        path.display(),
        preview(first)
    )
}

pub(super) fn parse_record(line: &str) -> Result<Record> {
    let v: Value = serde_json::from_str(line).context("bad JSON")?;
    let Value::Object(mut m) = v else {
        bail!("not a JSON object");
    };
    let mut take = |k: &str| m.remove(k).ok_or_else(|| anyhow!("missing `{k}`"));
    let seq = take("seq")?
        .as_u64()
        .ok_or_else(|| anyhow!("`seq` not a number"))?;
    let ts_text = take("ts")?;
    let ts = ts_text
        .as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .ok_or_else(|| anyhow!("`ts` not RFC 3339"))?
        .with_timezone(&Utc);
    let kind_text = take("kind")?;
    let kind = kind_text
        .as_str()
        .and_then(Kind::parse)
        .ok_or_else(|| anyhow!("unknown `kind` {kind_text}"))?;
    let source = take("source")?.as_str().unwrap_or_default().to_string();
    let run = take("run")?.as_str().unwrap_or_default().to_string();
    let prev = take("prev")?.as_str().unwrap_or_default().to_string();
    let hash = take("hash")?.as_str().unwrap_or_default().to_string();
    let step = m.remove("step").and_then(|s| s.as_u64());
    // The hash covers the exact timestamp text; a non-canonical one would not round-trip.
    if ts_text.as_str() != Some(ts_string(ts).as_str()) {
        bail!("`ts` is not in roger's canonical form");
    }
    Ok(Record {
        seq,
        ts,
        kind,
        source,
        run,
        step,
        fields: m,
        prev,
        hash,
        offset: 0,
    })
}

/// The record an append chains to, as (seq, hash), and whether the file ends with a newline.
/// An unterminated last line that parses, hashes right and links to the record before it is
/// a complete record whose newline never reached the disk: it is the one to chain to (the
/// append's leading newline completes it). Any other unterminated tail is torn: skipped.
pub(super) fn last_good_record(file: &mut File) -> Result<(Option<(u64, String)>, bool)> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok((None, true));
    }
    let mut window: u64 = 256 * 1024;
    loop {
        let start = len.saturating_sub(window);
        file.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::with_capacity((len - start) as usize);
        Read::by_ref(file).take(len - start).read_to_end(&mut buf)?;
        let ends_clean = buf.last() == Some(&b'\n');
        // Complete lines only; from a mid-file start, the first fragment is not a line.
        let (body, tail) = if ends_clean {
            (&buf[..], &buf[..0])
        } else {
            match buf.iter().rposition(|&b| b == b'\n') {
                Some(i) => (&buf[..=i], &buf[i + 1..]),
                None if start == 0 => (&buf[..0], &buf[..]),
                None => (&buf[..0], &buf[..0]),
            }
        };
        let mut lines: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
        if start > 0 && !lines.is_empty() {
            lines.remove(0);
        }
        let complete = lines.iter().rev().find_map(|line| {
            std::str::from_utf8(line)
                .map_err(anyhow::Error::from)
                .and_then(parse_record)
                .ok()
        });
        if complete.is_none() && start > 0 {
            window *= 4;
            continue;
        }
        let last = complete.map(|r| (r.seq, r.hash));
        let linked_tail = std::str::from_utf8(tail)
            .map_err(anyhow::Error::from)
            .and_then(parse_record)
            .ok()
            .filter(|t| {
                let (seq, prev) = last.clone().unwrap_or((0, GENESIS.to_string()));
                t.compute_hash() == t.hash && t.prev == prev && Some(t.seq) == seq.checked_add(1)
            });
        return Ok((linked_tail.map(|t| (t.seq, t.hash)).or(last), ends_clean));
    }
}
