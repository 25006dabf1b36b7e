//! An exit without a status — an attached run reaped by its own parent (bash, nohup, init)
//! leaves roger no exit code: did the run finish? Decided from what is known, the newest step
//! this launch logged, checkpointed, or was judged at, against `[schedule] total_steps`. A run
//! that may have finished (no total_steps, or a last log line within one logging interval of
//! it) is never relaunched. Pure.

/// What is known about the launch that ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Known {
    /// `[schedule] total_steps`.
    pub total_steps: Option<u64>,
    /// The newest step the launch logged.
    pub log_step: Option<u64>,
    /// How many steps apart its last two log lines were.
    pub log_every: Option<u64>,
    /// The newest checkpoint step published during the launch.
    pub ckpt_step: Option<u64>,
    /// The newest step a critic verdict filed during the launch was about.
    pub verdict_step: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// It reached total_steps: it finished (the words say how it is known).
    Finished(String),
    /// It stopped short of total_steps: a crash, relaunched like one.
    Short(String),
    /// Nothing tells: not relaunched (running a finished run twice is the worse mistake).
    Unknown(String),
}

pub fn judge(k: &Known) -> Ended {
    let seen: Vec<(&str, u64)> = [
        ("the log reached step", k.log_step),
        ("a checkpoint was published at step", k.ckpt_step),
        ("a critic verdict was about step", k.verdict_step),
    ]
    .into_iter()
    .filter_map(|(what, s)| s.map(|s| (what, s)))
    .collect();
    let said = |v: &[(&str, u64)]| {
        if v.is_empty() {
            "no step was logged, published or judged".to_string()
        } else {
            v.iter()
                .map(|(w, s)| format!("{w} {s}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let Some(total) = k.total_steps else {
        return Ended::Unknown(format!(
            "nothing shows whether it finished ([schedule] total_steps is not declared; {})",
            said(&seen)
        ));
    };
    let done: Vec<(&str, u64)> = seen.iter().copied().filter(|(_, s)| *s >= total).collect();
    // A run that logs every N steps may have finished after its last line: not a crash.
    let near = match (k.log_step, k.log_every) {
        (Some(s), Some(n)) if done.is_empty() && s.saturating_add(n) > total => Some((s, n)),
        _ => None,
    };
    if let Some((s, n)) = near {
        return Ended::Unknown(format!(
            "nothing shows whether it finished: it logs every {n} steps and its last line, step {s}, is within that of total_steps = {total}"
        ));
    }
    if done.is_empty() {
        Ended::Short(format!(
            "it ended short of total_steps = {total}: {}",
            said(&seen)
        ))
    } else {
        Ended::Finished(format!("{}, total_steps = {total}", said(&done)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_short_or_unknown() {
        let k = Known {
            total_steps: Some(40),
            log_step: Some(40),
            log_every: Some(1),
            ckpt_step: Some(40),
            verdict_step: Some(38),
        };
        assert_eq!(
            judge(&k),
            Ended::Finished(
                "the log reached step 40, a checkpoint was published at step 40, total_steps = 40"
                    .into()
            )
        );
        // The log was rotated away, but the final checkpoint says it.
        let k = Known {
            log_step: Some(3),
            ..k
        };
        assert!(matches!(judge(&k), Ended::Finished(w) if w.starts_with("a checkpoint")));
        let k = Known {
            total_steps: Some(40),
            log_step: Some(15),
            log_every: Some(1),
            ckpt_step: Some(10),
            verdict_step: None,
        };
        assert_eq!(
            judge(&k),
            Ended::Short(
                "it ended short of total_steps = 40: the log reached step 15, a checkpoint was published at step 10"
                    .into()
            )
        );
        let k = Known {
            total_steps: None,
            ..k
        };
        assert!(
            matches!(judge(&k), Ended::Unknown(w) if w.contains("total_steps is not declared"))
        );
        // Logging every 50 steps, last line at 1200 of 1234: it may have finished unlogged.
        let k = Known {
            total_steps: Some(1234),
            log_step: Some(1200),
            log_every: Some(50),
            ..Known::default()
        };
        assert!(matches!(judge(&k), Ended::Unknown(w) if w.contains("logs every 50 steps")));
        assert!(matches!(
            judge(&Known { total_steps: Some(5), ..Known::default() }),
            Ended::Short(w) if w.contains("no step was logged")
        ));
    }
}
