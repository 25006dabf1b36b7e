use super::read::could_be_torn;
use super::*;
use chrono::TimeZone;

fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

#[test]
fn appends_chain_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::new(dir.path().join("l.jsonl"));
    let a = l
        .append(Entry::new(Kind::Note, "test", "r").field("msg", "hi"), t(0))
        .unwrap();
    let b = l
        .append(Entry::new(Kind::Note, "test", "r").step(Some(7)), t(1))
        .unwrap();
    assert_eq!(a.prev, GENESIS);
    assert_eq!(b.prev, a.hash);
    assert_eq!(b.seq, 2);
    let scan = l.scan().unwrap();
    assert_eq!(scan.records.len(), 2);
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    assert_eq!(scan.records[1].step, Some(7));
}

#[test]
fn torn_tail_is_skipped_and_next_append_chains() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("l.jsonl");
    let l = Ledger::new(&p);
    let a = l.append(Entry::new(Kind::Note, "t", "r"), t(0)).unwrap();
    let mut f = OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(b"{\"seq\":2,\"ts\":\"20").unwrap();
    let scan = l.scan().unwrap();
    assert_eq!(scan.records.len(), 1);
    assert!(scan.problems[0].torn);
    let b = l.append(Entry::new(Kind::Note, "t", "r"), t(1)).unwrap();
    assert_eq!((b.seq, b.prev.as_str()), (2, a.hash.as_str()));
    let scan = l.scan().unwrap();
    assert_eq!(scan.records.len(), 2);
    assert!(scan.first_break().is_none(), "{:?}", scan.problems);
    assert_eq!(scan.problems.len(), 1);
}

#[test]
fn edited_record_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("l.jsonl");
    let l = Ledger::new(&p);
    for i in 0..3 {
        l.append(Entry::new(Kind::Note, "t", "r").field("n", i), t(i))
            .unwrap();
    }
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, text.replacen("\"n\":1", "\"n\":5", 1)).unwrap();
    let scan = l.scan().unwrap();
    let bad = scan.first_break().unwrap();
    assert_eq!(bad.seq, Some(2));
    assert!(bad.what.contains("edited"), "{}", bad.what);
}

#[test]
fn removed_record_breaks_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("l.jsonl");
    let l = Ledger::new(&p);
    for i in 0..3 {
        l.append(Entry::new(Kind::Note, "t", "r"), t(i)).unwrap();
    }
    let text = std::fs::read_to_string(&p).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&p, format!("{}\n{}\n", lines[0], lines[2])).unwrap();
    let bad = l.scan().unwrap();
    let bad = bad.first_break().unwrap();
    assert_eq!(bad.seq, Some(3));
    assert!(bad.what.contains("chain broken"));
}

#[test]
fn garbage_is_a_break_not_a_torn_line() {
    let scan = scan_bytes(b"hello world\nnot json either\n");
    assert_eq!(scan.problems.len(), 2);
    let bad = scan.first_break().unwrap();
    assert_eq!(bad.line, 1);
    assert!(
        bad.what.contains("not a roger ledger record"),
        "{}",
        bad.what
    );
    // What a crash leaves is still torn: a record prefix, or zero-filled blocks.
    assert!(could_be_torn(b"{\"se"));
    assert!(could_be_torn(b"\0\0\0{\"seq\":4,\"ts"));
    assert!(!could_be_torn(b"{\"step\":1,\"loss\":2}"));
}

#[test]
fn refuses_to_append_to_a_file_that_is_not_a_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("train.jsonl");
    std::fs::write(&p, "{\"step\":1,\"loss\":2.5}\n").unwrap();
    let err = Ledger::new(&p)
        .append(Entry::new(Kind::Note, "t", "r"), t(0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not a roger ledger"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&p).unwrap(),
        "{\"step\":1,\"loss\":2.5}\n"
    );
}

#[test]
fn the_largest_seq_is_an_error_not_an_overflow() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("l.jsonl");
    let l = Ledger::new(&p);
    let mut rec = l.append(Entry::new(Kind::Note, "t", "r"), t(0)).unwrap();
    rec.seq = u64::MAX;
    rec.hash = rec.compute_hash();
    std::fs::write(&p, rec.to_line()).unwrap();
    let scan = l.scan().unwrap();
    assert_eq!(scan.records.len(), 1);
    let err = l
        .append(Entry::new(Kind::Note, "t", "r"), t(1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("the largest there is"), "{err}");
}

#[test]
fn floats_and_nested_fields_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::new(dir.path().join("l.jsonl"));
    let obs = serde_json::json!({"loss": [2.345678901234, 1e-7, 0.1], "z": {"b": 1, "a": 2}});
    l.append(
        Entry::new(Kind::Verdict, "critic", "r").field("observation", obs),
        t(0),
    )
    .unwrap();
    let scan = l.scan().unwrap();
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
}

#[test]
fn a_complete_last_record_missing_only_its_newline_is_continued_not_duplicated() {
    // A crash after the record's bytes but before its newline reached the disk.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("l.jsonl");
    let l = Ledger::new(&p);
    l.append(Entry::new(Kind::Note, "t", "r"), t(0)).unwrap();
    let b = l.append(Entry::new(Kind::Note, "t", "r"), t(1)).unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, text.trim_end_matches('\n')).unwrap();
    let c = l.append(Entry::new(Kind::Note, "t", "r"), t(2)).unwrap();
    assert_eq!((c.seq, c.prev.as_str()), (3, b.hash.as_str()));
    let scan = l.scan().unwrap();
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    let seqs: Vec<u64> = scan.records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
    // The very first record, unterminated, links to the genesis.
    let p = dir.path().join("one.jsonl");
    let l = Ledger::new(&p);
    let a = l.append(Entry::new(Kind::Note, "t", "r"), t(0)).unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, text.trim_end_matches('\n')).unwrap();
    let b = l.append(Entry::new(Kind::Note, "t", "r"), t(1)).unwrap();
    assert_eq!((b.seq, b.prev.as_str()), (2, a.hash.as_str()));
    assert!(l.scan().unwrap().problems.is_empty());
}

#[test]
fn a_parseable_tail_that_does_not_link_is_left_on_its_own_line() {
    // Not a crash artefact (its hash is wrong): the next append starts a fresh line and
    // chains to the last good record, so `verify` still points at the bad line.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("l.jsonl");
    let l = Ledger::new(&p);
    let a = l.append(Entry::new(Kind::Note, "t", "r"), t(0)).unwrap();
    l.append(Entry::new(Kind::Note, "t", "r").field("n", 1), t(1))
        .unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(
        &p,
        text.trim_end_matches('\n').replace("\"n\":1", "\"n\":2"),
    )
    .unwrap();
    let c = l.append(Entry::new(Kind::Note, "t", "r"), t(2)).unwrap();
    assert_eq!((c.seq, c.prev.as_str()), (2, a.hash.as_str()));
    let text = std::fs::read_to_string(&p).unwrap();
    assert_eq!(text.lines().count(), 3);
    let scan = l.scan().unwrap();
    assert!(scan.first_break().is_some());
}

/// Issue 10 item 11 (the fuzz harness finds it on the old code in 778 inputs, 840986a): a
/// record's hash cut to 12 bytes for the mismatch message inside a 2-byte char panicked.
#[test]
fn regress_non_ascii_hash_in_ledger() {
    let line = r#"{"seq":1,"ts":"2026-01-01T00:00:00.000Z","kind":"note","source":"s","run":"r","prev":"0000000000000000000000000000000000000000000000000000000000000000","hash":"abcdefghijkéé"}"#;
    let scan = scan_bytes(format!("{line}\n").as_bytes());
    let p = scan.first_break().expect("a broken record");
    assert!(p.what.contains("stored abcdefghijk,"), "{}", p.what);
}
