//! Which of the logs found under `init --log DIR` is the run's, as a person would choose: one
//! roger can read first, then one that has both loss and lr (what the critic judges), then
//! the newest, then the longest. Pure: fed what was found about each candidate (any format
//! plugs in through [`Candidate::format`] and the metrics its mapping found); says why.

use crate::config::LogFormat;
use std::time::SystemTime;

/// One file or directory found, with what was learned about it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// As it will be printed (relative to the folder searched).
    pub shown: String,
    /// The format it was read as; `None`: not a log roger can read (with `unreadable`).
    pub format: Option<LogFormat>,
    pub unreadable: Option<String>,
    pub has_loss: bool,
    pub has_lr: bool,
    pub modified: Option<SystemTime>,
    pub bytes: u64,
}

impl Candidate {
    /// 2: loss and lr, 1: one of them, 0: neither.
    fn metrics(&self) -> u8 {
        u8::from(self.has_loss) + u8::from(self.has_lr)
    }
}

/// The readable candidates, best first (indices into `c`).
pub fn rank(c: &[Candidate]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..c.len()).filter(|i| c[*i].format.is_some()).collect();
    order.sort_by(|a, b| {
        let (x, y) = (&c[*a], &c[*b]);
        y.metrics()
            .cmp(&x.metrics())
            .then_with(|| y.modified.cmp(&x.modified))
            .then_with(|| y.bytes.cmp(&x.bytes))
            .then_with(|| x.shown.cmp(&y.shown))
    });
    order
}

fn has_words(c: &Candidate) -> &'static str {
    match (c.has_loss, c.has_lr) {
        (true, true) => "loss and lr",
        (true, false) => "loss, no lr",
        (false, true) => "lr, no loss",
        (false, false) => "neither loss nor lr",
    }
}

fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn age(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 86_400 => format!("{:.1} days", s as f64 / 86_400.0),
        s if s >= 3600 => format!("{:.1} h", s as f64 / 3600.0),
        s if s >= 60 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// One line per candidate: the chosen one first (marked), then the runners-up with what
/// they lack against it, then the unreadable ones with why.
pub fn describe(c: &[Candidate], order: &[usize]) -> Vec<String> {
    let Some(&best) = order.first() else {
        return c
            .iter()
            .map(|x| {
                format!(
                    "  {} (not read: {})",
                    x.shown,
                    x.unreadable.as_deref().unwrap_or("unknown format")
                )
            })
            .collect();
    };
    let b = &c[best];
    let mut out = Vec::new();
    for (rank, &i) in order.iter().enumerate() {
        let x = &c[i];
        let format = crate::init::format_name(x.format.expect("ranked ones are readable"));
        let mut why = vec![format.to_string(), has_words(x).to_string(), size(x.bytes)];
        if rank == 0 {
            if order.len() > 1 {
                why.push("chosen".into());
            }
        } else {
            let behind = if x.metrics() < b.metrics() {
                format!("has {} where the chosen has {}", has_words(x), has_words(b))
            } else {
                match (x.modified, b.modified) {
                    (Some(xm), Some(bm)) if xm < bm => {
                        format!(
                            "written {} before the chosen",
                            age(bm.duration_since(xm).unwrap_or_default())
                        )
                    }
                    _ if x.bytes < b.bytes => "shorter than the chosen".to_string(),
                    _ => "an equal candidate, listed after it".to_string(),
                }
            };
            why.push(behind);
        }
        let mark = if rank == 0 { "*" } else { " " };
        out.push(format!("{mark} {} ({})", x.shown, why.join("; ")));
    }
    for x in c.iter().filter(|x| x.format.is_none()) {
        out.push(format!(
            "  {} (not read: {})",
            x.shown,
            x.unreadable.as_deref().unwrap_or("unknown format")
        ));
    }
    out
}

/// Why the first of `order` was chosen, in a few words.
pub fn chosen_because(c: &[Candidate], order: &[usize]) -> String {
    let b = &c[order[0]];
    let others = &order[1..];
    if others.is_empty() {
        return "the only log found".into();
    }
    let mut why = Vec::new();
    if others.iter().any(|i| c[*i].metrics() < b.metrics()) {
        why.push(format!("it has {}", has_words(b)));
    }
    let same: Vec<&usize> = others
        .iter()
        .filter(|i| c[**i].metrics() == b.metrics())
        .collect();
    if !same.is_empty() && same.iter().all(|i| c[**i].modified < b.modified) {
        why.push("it is the newest of those".into());
    } else if !same.is_empty() {
        why.push("it is the longest of those written as recently".into());
    }
    why.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cand(
        shown: &str,
        f: Option<LogFormat>,
        loss: bool,
        lr: bool,
        age_s: u64,
        bytes: u64,
    ) -> Candidate {
        Candidate {
            shown: shown.into(),
            format: f,
            unreadable: f.is_none().then(|| "no known format".into()),
            has_loss: loss,
            has_lr: lr,
            modified: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 - age_s)),
            bytes,
        }
    }

    #[test]
    fn loss_and_lr_first_then_newest_then_longest() {
        let c = vec![
            cand("eval.log", Some(LogFormat::Text), true, false, 0, 10),
            cand(
                "old/train.log",
                Some(LogFormat::KeyValue),
                true,
                true,
                7200,
                500,
            ),
            cand(
                "new/train.log",
                Some(LogFormat::KeyValue),
                true,
                true,
                60,
                100,
            ),
            cand(
                "same/long.log",
                Some(LogFormat::KeyValue),
                true,
                true,
                60,
                900,
            ),
            cand("README.txt", None, false, false, 0, 10),
        ];
        let order = rank(&c);
        assert_eq!(order, vec![3, 2, 1, 0]);
        let lines = describe(&c, &order);
        assert!(
            lines[0].starts_with("* same/long.log (key-value; loss and lr"),
            "{lines:?}"
        );
        assert!(lines[1].contains("shorter than the chosen"), "{lines:?}");
        assert!(
            lines[2].contains("written 2.0 h before the chosen"),
            "{lines:?}"
        );
        assert!(
            lines[3].contains("has loss, no lr where the chosen has loss and lr"),
            "{lines:?}"
        );
        assert_eq!(lines[4], "  README.txt (not read: no known format)");
        let why = chosen_because(&c, &order);
        assert!(why.contains("it has loss and lr"), "{why}");
        assert!(why.contains("longest"), "{why}");
        assert_eq!(rank(&c[4..]), Vec::<usize>::new());
    }
}
