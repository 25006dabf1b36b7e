//! The polled notice sources, on one background thread: cloud metadata every `cloud_poll`,
//! the SLURM job's end time every `end_time_poll`. The first notice goes down a channel the
//! watch loop drains each wake-up; then the thread ends (one hand-off per watch). Errors
//! reaching a source are said once on stderr and never count as a notice.

use super::{cloud, slurm, unix_now, Notice, Source};
use crate::config::preempt::PreemptConfig;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The end-time notice: due once `now` is within `window_s` of `end` (pure).
pub fn end_notice(end: Option<f64>, window_s: f64, now: f64) -> Option<Notice> {
    let end = end?;
    (now >= end - window_s).then(|| Notice {
        source: Source::SlurmEndTime,
        detail: format!(
            "the job's end time {} is {:.0} s away (slurm_window {window_s:.0} s)",
            super::rfc3339(end),
            end - now
        ),
        received_at: now,
        deadline: end,
    })
}

pub struct Feed {
    rx: Receiver<Notice>,
    stop: Arc<AtomicBool>,
}

impl Feed {
    /// Start polling what `cfg` enables; None when nothing is polled. `job`: SLURM_JOB_ID.
    pub fn start(cfg: &PreemptConfig, job: Option<String>) -> Option<Feed> {
        let job = job.filter(|_| cfg.slurm_end_time);
        if cfg.cloud.is_empty() && job.is_none() {
            return None;
        }
        let (tx, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (cfg, halt) = (cfg.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut next_cloud = Instant::now();
            let mut next_end = Instant::now();
            let mut end: Option<f64> = None;
            let mut said: Vec<String> = Vec::new();
            let mut say_once = |what: String| {
                let key = what.split(':').next().unwrap_or("").to_string();
                if !said.contains(&key) {
                    eprintln!("roger: preempt: {what} (not a notice; polling goes on)");
                    said.push(key);
                }
            };
            while !halt.load(Ordering::Relaxed) {
                let now = unix_now();
                if Instant::now() >= next_cloud && !cfg.cloud.is_empty() {
                    next_cloud = Instant::now() + cfg.cloud_poll.0;
                    for c in &cfg.cloud {
                        let base = match c {
                            crate::config::preempt::Cloud::Aws => &cfg.aws_url,
                            crate::config::preempt::Cloud::Gce => &cfg.gce_url,
                            crate::config::preempt::Cloud::Azure => &cfg.azure_url,
                        };
                        match cloud::poll(*c, base, now) {
                            Ok(Some(n)) => {
                                let _ = tx.send(n);
                                return;
                            }
                            Ok(None) => {}
                            Err(e) => say_once(format!("{c:?} metadata at {base}: {e}")),
                        }
                    }
                }
                if let Some(j) = &job {
                    if Instant::now() >= next_end {
                        next_end = Instant::now() + cfg.end_time_poll.0;
                        match slurm::end_time(j) {
                            Ok(e) => end = e,
                            Err(e) => say_once(format!("end time of job {j}: {e}")),
                        }
                    }
                    if let Some(n) = end_notice(end, cfg.slurm_window.as_secs_f64(), now) {
                        let _ = tx.send(n);
                        return;
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Some(Feed { rx, stop })
    }

    /// A notice, if one came.
    pub fn try_recv(&self) -> Option<Notice> {
        self.rx.try_recv().ok()
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_time_notice_comes_one_window_before_the_end() {
        assert!(end_notice(None, 60.0, 1000.0).is_none());
        assert!(end_notice(Some(1100.0), 60.0, 1039.0).is_none());
        let n = end_notice(Some(1100.0), 60.0, 1040.0).unwrap();
        assert_eq!(
            (n.source, n.deadline, n.window_s()),
            (Source::SlurmEndTime, 1100.0, 60.0)
        );
        assert!(n.detail.contains("60 s away"), "{}", n.detail);
    }
}
