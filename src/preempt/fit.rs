//! "Know before it matters": does a save plus its publish fit the notice window? The p95 of
//! (the training's own save time, `save_s`, when its publish record carries one, plus the
//! publish's `duration_s`) over this run's publish records, against the window minus the
//! margin. Pure: records in, a verdict out.

use crate::ledger::{Kind, Record};
use serde::Serialize;

/// Publish records looked at (the newest): the recent cost is the one that matters.
pub const RECENT: usize = 50;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    pub fits: bool,
    /// p95 of save + publish seconds.
    pub p95_s: f64,
    /// How many publish records it was computed from (and how many carried a save time).
    pub samples: usize,
    pub with_save_time: usize,
    pub window_s: f64,
    pub margin_s: f64,
    /// Which notice the window is ("the SLURM notice (slurm_window)").
    pub window_of: String,
    /// In words, with numbers.
    pub text: String,
}

/// Seconds one checkpoint cost: the training's save (if it said) plus the publish.
fn cost(r: &Record) -> Option<(f64, bool)> {
    let publish = r.get("duration_s").and_then(|v| v.as_f64())?;
    let save = r
        .get("save_s")
        .and_then(|v| v.as_f64())
        .filter(|s| *s >= 0.0);
    Some((publish + save.unwrap_or(0.0), save.is_some()))
}

/// Nearest-rank p95 of non-empty `v`.
pub fn p95(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((0.95 * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// None when the run has no publish record with a duration yet. `remote`: the run's
/// checkpoints also go to a bucket, and the hand-off waits for the verified copy there, so
/// the p95 of recorded uploads (upload + verify) is added.
pub fn check(
    records: &[Record],
    run: &str,
    window: (f64, &str),
    margin_s: f64,
    remote: bool,
) -> Option<Fit> {
    let costs: Vec<(f64, bool)> = records
        .iter()
        .rev()
        .filter(|r| r.kind == Kind::Publish && r.run == run)
        .filter_map(cost)
        .take(RECENT)
        .collect();
    if costs.is_empty() {
        return None;
    }
    let with_save_time = costs.iter().filter(|c| c.1).count();
    let mut v: Vec<f64> = costs.iter().map(|c| c.0).collect();
    let upload = remote
        .then(|| crate::checkpoints::bucket::upload_p95(records, run))
        .flatten();
    let p = p95(&mut v) + upload.unwrap_or(0.0);
    let (window_s, of) = window;
    let budget = window_s - margin_s;
    let fits = p <= budget;
    let what = match (with_save_time > 0, upload) {
        (true, None) => "save plus publish".to_string(),
        (false, None) => "publish (the training logs no save_s)".to_string(),
        (true, Some(u)) => {
            format!("save plus publish, plus {u:.1} s p95 of the uploads to the bucket")
        }
        (false, Some(u)) => format!(
            "publish (the training logs no save_s), plus {u:.1} s p95 of the uploads to the bucket"
        ),
    };
    let text = if fits {
        format!(
            "checkpoint takes {p:.1} s (p95 of {} {what}); it fits {of}: {window_s:.0} s minus the {margin_s:.0} s margin",
            costs.len()
        )
    } else {
        format!(
            "checkpoint takes {p:.1} s (p95 of {} {what}); the notice is {window_s:.0} s ({of}) minus the {margin_s:.0} s margin = {budget:.0} s: a save started at the notice will miss the deadline",
            costs.len()
        )
    };
    Some(Fit {
        fits,
        p95_s: (p * 1000.0).round() / 1000.0,
        samples: costs.len(),
        with_save_time,
        window_s,
        margin_s,
        window_of: of.to_string(),
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{test_records, Entry};

    fn publish(run: &str, dur: f64, save: Option<f64>) -> Entry {
        let e = Entry::new(Kind::Publish, "publish", run).field("duration_s", dur);
        match save {
            Some(s) => e.field("save_s", s),
            None => e,
        }
    }

    #[test]
    fn p95_is_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(p95(&mut v), 95.0);
        assert_eq!(p95(&mut [3.0]), 3.0);
        assert_eq!(p95(&mut [1.0, 9.0]), 9.0);
    }

    #[test]
    fn a_slow_save_does_not_fit_and_says_so_in_numbers() {
        let recs = test_records(vec![
            publish("r", 5.0, Some(140.0)),
            publish("r", 6.0, Some(144.0)),
            publish("other", 500.0, None),
            Entry::new(Kind::Watch, "watch", "r"),
        ]);
        let f = check(&recs, "r", (120.0, "the SLURM notice"), 10.0, false).unwrap();
        assert!(!f.fits);
        assert_eq!((f.p95_s, f.samples, f.with_save_time), (150.0, 2, 2));
        assert!(
            f.text.starts_with("checkpoint takes 150.0 s") && f.text.contains("notice is 120 s"),
            "{}",
            f.text
        );
        let f = check(&recs, "r", (300.0, "x"), 10.0, false).unwrap();
        assert!(f.fits, "{}", f.text);
    }

    #[test]
    fn with_a_bucket_the_upload_counts_too() {
        let up = |s: f64| {
            Entry::new(Kind::Remote, "remote", "r")
                .field("event", "verified")
                .field("seconds", s)
        };
        let recs = test_records(vec![publish("r", 5.0, Some(40.0)), up(30.0), up(70.0)]);
        let f = check(&recs, "r", (120.0, "the notice"), 10.0, true).unwrap();
        assert_eq!(f.p95_s, 115.0);
        assert!(!f.fits);
        assert!(
            f.text.contains("plus 70.0 s p95 of the uploads"),
            "{}",
            f.text
        );
        // Without a bucket the same records fit.
        assert!(
            check(&recs, "r", (120.0, "the notice"), 10.0, false)
                .unwrap()
                .fits
        );
    }

    #[test]
    fn no_publish_yet_is_no_verdict() {
        let recs = test_records(vec![Entry::new(Kind::Watch, "watch", "r")]);
        assert!(check(&recs, "r", (120.0, "x"), 10.0, false).is_none());
    }
}
