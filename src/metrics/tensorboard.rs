//! `format = "tensorboard"`: [`EventLog`] reads TensorBoard event files incrementally. `[run]
//! log` names one `events.out.tfevents.*` file or the directory a writer logs to; in a
//! directory every event file is read in the order it was started (the time in its name), so
//! a run restarted into a new file is followed, and the newest file is then tailed. Scalars
//! of one step (one event per tag) become one [`Record`]: its step is the event's `step`, its
//! time the newest `wall_time`, its values the tags `[metrics]` maps (`train/loss`, ...).

use super::fields::{Fields, Keys, Target};
use super::framed::{self, Cursor, HEAD};
use super::tail::Poll;
use super::tb_event;
use super::tfrecord::{self, Item};
use super::{Batch, Garbage, Parsed, Record};
use crate::metrics::mapping::MetricsConfig;
use anyhow::{Context, Result};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Event files start with this; the writers add the start time, host, pid and a suffix.
pub const PREFIX: &str = "events.out.tfevents.";
/// Read size for a large file.
const CHUNK: usize = 8 << 20;

/// The event files of a directory, oldest first (start time in the name, then the name).
pub fn event_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(u64, String, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(PREFIX)?;
            let started = rest
                .split('.')
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            Some((started, name, e.path()))
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, _, p)| p).collect()
}

/// What a Hugging Face Trainer's event files say of the run's plan: its TrainingArguments
/// (the `args/text_summary` JSON its TensorBoardCallback writes first) and the newest
/// `train/epoch` point (step, epoch), which gives the optimizer steps per epoch.
#[derive(Debug, Default)]
pub struct HfPlan {
    pub args: Option<serde_json::Value>,
    pub epoch_at: Option<(u64, f64)>,
    /// The file the args came from.
    pub file: Option<PathBuf>,
}

/// [`HfPlan`] of a log directory's (or one file's) event files, each read whole; unreadable
/// records are passed over (the reader proper counts and says them).
pub fn hf_plan(log: &Path) -> HfPlan {
    let files = if log.is_dir() {
        event_files(log)
    } else {
        vec![log.to_path_buf()]
    };
    let mut plan = HfPlan::default();
    for f in files {
        let Ok(bytes) = std::fs::read(&f) else {
            continue;
        };
        for item in tfrecord::scan(&bytes).0 {
            let Item::Record(_, payload) = item else {
                continue;
            };
            let Ok(event) = tb_event::decode(payload) else {
                continue;
            };
            if plan.args.is_none() {
                if let Some((_, text)) =
                    tb_event::texts(&event).find(|(t, _)| *t == "args/text_summary")
                {
                    if let Ok(v) = serde_json::from_str(&text) {
                        plan.args = Some(v);
                        plan.file = Some(f.clone());
                    }
                }
            }
            for (tag, v) in tb_event::scalars(&event) {
                let step = u64::try_from(event.step).unwrap_or(0);
                if tag == "train/epoch"
                    && v.is_finite()
                    && v > 0.0
                    && plan.epoch_at.is_none_or(|(s, _)| step >= s)
                {
                    plan.epoch_at = Some((step, v));
                }
            }
        }
    }
    plan
}

/// The planned last step an [`HfPlan`] gives: `max_steps` when set (> 0), else
/// `num_train_epochs` × the optimizer steps per epoch its `train/epoch` points show (HF's own
/// total: `num_update_steps_per_epoch × num_train_epochs`), with where it came from.
pub fn hf_total(plan: &HfPlan) -> Option<(u64, String)> {
    let args = plan.args.as_ref()?;
    let file = plan
        .file
        .as_ref()
        .map_or(String::new(), |f| format!(" in {}", f.display()));
    if let Some(m) = args
        .get("max_steps")
        .and_then(|v| v.as_i64())
        .filter(|m| *m > 0)
    {
        return Some((
            m as u64,
            format!("max_steps: {m} (the Trainer's args/text_summary{file})"),
        ));
    }
    let epochs = args
        .get("num_train_epochs")
        .and_then(|v| v.as_f64())
        .filter(|e| *e > 0.0)?;
    let (step, epoch) = plan.epoch_at?;
    // HF counts `len(dataloader) // gradient_accumulation_steps` updates per epoch, while
    // train/epoch advances by batches: step / epoch is that before the floor.
    let per_epoch = (step as f64 / epoch + 1e-6).floor();
    if per_epoch < 1.0 {
        return None;
    }
    let total = (epochs * per_epoch).ceil() as u64;
    Some((
        total,
        format!("num_train_epochs: {epochs} (the Trainer's args/text_summary{file}) x {per_epoch} optimizer steps per epoch (train/epoch {epoch} at step {step})"),
    ))
}

/// Where an [`EventLog`] stands between reads, for a later process (the critic's summary
/// cache) to go on from: the file it was in, how far, and bytes to notice it rewritten.
pub type EventsPlace = framed::Place;

/// One step's scalars, collected until an event of another step arrives.
#[derive(Default)]
struct Group {
    step: Option<u64>,
    time: Option<f64>,
    fields: Fields,
}

pub struct EventLog {
    root: PathBuf,
    keys: Keys,
    step_key: String,
    open: Option<Cursor>,
    group: Group,
}

impl EventLog {
    pub fn new(root: &Path, metrics: &MetricsConfig) -> EventLog {
        EventLog {
            root: root.to_path_buf(),
            keys: Keys::new(metrics),
            step_key: "step".into(),
            open: None,
            group: Group::default(),
        }
    }

    fn files(&self) -> Vec<PathBuf> {
        if self.root.is_dir() {
            event_files(&self.root)
        } else if self.root.exists() {
            vec![self.root.clone()]
        } else {
            Vec::new()
        }
    }

    /// Read what is new into `poll`. The newest step's scalars are handed on at the end of
    /// each read (a scalar of that step written later comes as another sample of it).
    pub fn poll(&mut self, poll: &mut Poll) -> Result<()> {
        let files = self.files();
        if let Some(open) = &self.open {
            let meta = std::fs::metadata(&open.path).ok();
            let id = meta.as_ref().map(|m| (m.dev(), m.ino()));
            if id != Some(open.id) {
                // Replaced (or removed): finish what the old handle holds, then start over.
                self.drain(poll)?;
                let path = open_path(&self.open);
                self.open = None;
                if id.is_some() {
                    poll.restarted = Some(format!("replaced ({})", path.display()));
                    self.start(&path)?;
                }
            } else if let Some(meta) = meta {
                let open = self.open.as_mut().expect("checked");
                let changed = !open.head_holds();
                if meta.len() < open.offset || changed {
                    poll.restarted = Some(if meta.len() < open.offset {
                        format!("truncated ({})", open.path.display())
                    } else {
                        format!("replaced ({})", open.path.display())
                    });
                    let path = open.path.clone();
                    self.flush(&mut poll.batch);
                    self.open = None;
                    self.start(&path)?;
                }
            }
            if self.open.is_some() {
                self.drain(poll)?;
            }
        }
        // Files started after the current one (all of them on the first read), in order.
        let current = self.open.as_ref().map(|o| o.path.clone());
        let newer: Vec<PathBuf> = match &current {
            Some(cur) => match files.iter().position(|f| f == cur) {
                Some(i) => files[i + 1..].to_vec(),
                None => Vec::new(),
            },
            None => files,
        };
        for path in newer {
            if current.is_some() {
                poll.restarted = Some(format!("followed by a newer event file {}", path.display()));
            }
            self.flush(&mut poll.batch);
            self.start(&path)?;
            self.drain(poll)?;
        }
        poll.missing = self.open.is_none();
        self.flush(&mut poll.batch);
        Ok(())
    }

    /// Where this log's read stands (after a [`EventLog::poll`], which hands on every step it
    /// read); `None` before a file was opened.
    pub fn place(&self) -> Option<EventsPlace> {
        self.open.as_ref()?.place()
    }

    /// Go on where `p` stood, or say why not (another file, shorter, rewritten).
    pub fn resume(&mut self, p: &EventsPlace) -> Result<(), String> {
        self.open = Some(Cursor::resume(p)?);
        self.group = Group::default();
        Ok(())
    }

    fn start(&mut self, path: &Path) -> Result<()> {
        self.open = Some(Cursor::open(path, "event file")?);
        self.group = Group::default();
        Ok(())
    }

    /// Read the open file from its offset to its end; a torn last record stays for later.
    fn drain(&mut self, poll: &mut Poll) -> Result<()> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        let pending = open.pending() as usize;
        let mut buf = vec![0u8; pending.clamp(64 << 10, CHUNK)];
        loop {
            let n = open
                .read_full(&mut buf, open.offset)
                .with_context(|| format!("reading event file {}", open.path.display()))?;
            if n == 0 {
                break;
            }
            poll.bytes_read += n as u64;
            poll.batch.bytes += n as u64;
            if open.head.len() < HEAD && open.offset == 0 {
                open.head.extend_from_slice(&buf[..n.min(HEAD)]);
            }
            let (items, used) = tfrecord::scan(&buf[..n]);
            for item in items {
                open.records += 1;
                let (at, why) = match item {
                    Item::Record(at, payload) => match tb_event::decode(payload) {
                        Ok(event) => {
                            add_event(
                                &mut self.group,
                                &self.keys,
                                &self.step_key,
                                &event,
                                &open.path,
                                &mut poll.batch,
                            );
                            continue;
                        }
                        Err(e) => (at, format!("not an Event protobuf ({e}); skipped")),
                    },
                    Item::Damaged {
                        offset,
                        skipped,
                        why,
                    } => (offset, format!("{why}; {skipped} bytes skipped")),
                };
                poll.batch.push_garbage(Garbage {
                    file: open.path.clone(),
                    line: open.records,
                    why: format!(
                        "record {} at byte offset {}: {why}, the rest is read",
                        open.records,
                        open.offset + at
                    ),
                });
            }
            open.offset += used as u64;
            if n < buf.len() {
                break; // the end: what is left is a torn record, retried on the next read
            }
            if used == 0 {
                let grown = buf.len() * 2; // a record larger than the buffer
                buf.resize(grown, 0);
            }
        }
        Ok(())
    }

    fn flush(&mut self, batch: &mut Batch) {
        flush_group(&mut self.group, &self.keys, &self.step_key, batch);
    }
}

fn open_path(open: &Option<Cursor>) -> PathBuf {
    open.as_ref().map(|o| o.path.clone()).unwrap_or_default()
}

fn add_event(
    group: &mut Group,
    keys: &Keys,
    step_key: &str,
    event: &tb_event::Event,
    path: &Path,
    out: &mut Batch,
) {
    let mut mapped = tb_event::scalars(event).filter_map(|(tag, v)| {
        keys.lookup(tag.as_bytes())
            .find(|t| matches!(t, Target::Metric(_) | Target::StepTime))
            .map(|t| (t, v))
    });
    let Some(first) = mapped.next() else {
        return; // no scalar roger reads: does not end the step
    };
    let Ok(step) = u64::try_from(event.step) else {
        out.push_garbage(Garbage {
            file: path.to_path_buf(),
            line: 0,
            why: format!("an event with a negative step {}: skipped", event.step),
        });
        return;
    };
    if group.step != Some(step) {
        flush_group(group, keys, step_key, out);
        group.step = Some(step);
    }
    if event.wall_time > 0.0 && event.wall_time.is_finite() {
        group.time = Some(
            group
                .time
                .map_or(event.wall_time, |t| t.max(event.wall_time)),
        );
    }
    for (target, v) in std::iter::once(first).chain(mapped) {
        group.fields.set(target, v);
    }
}

fn flush_group(group: &mut Group, keys: &Keys, step_key: &str, out: &mut Batch) {
    let Some(step) = group.step else {
        return;
    };
    let mut fields = std::mem::take(&mut group.fields);
    fields.step = Some(step as f64);
    fields.time = group.time;
    if let Parsed::Sample(r) | Parsed::Partial(r, _) = fields.finish(keys, step_key) {
        out.records.push(Record {
            time: group.time,
            ..r
        });
    }
    *group = Group::default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hf_trainers_total_from_its_args() {
        let plan = |args: &str, epoch_at| HfPlan {
            args: Some(serde_json::from_str(args).unwrap()),
            epoch_at,
            file: None,
        };
        // max_steps wins when set.
        let p = plan(
            r#"{"max_steps": 1200, "num_train_epochs": 1}"#,
            Some((1200, 0.4)),
        );
        assert_eq!(hf_total(&p).map(|t| t.0), Some(1200));
        // Else epochs x floor(batches / accumulation): 1709 batches of 4 accumulated = 427
        // updates per epoch; the last step's epoch (2.99649) reads 427.5.
        let p = plan(
            r#"{"max_steps": -1, "num_train_epochs": 3}"#,
            Some((1281, 2.9964911937713623)),
        );
        assert_eq!(hf_total(&p).map(|t| t.0), Some(1281));
        let p = plan(
            r#"{"max_steps": -1, "num_train_epochs": 3.0}"#,
            Some((5274, 3.0)),
        );
        assert_eq!(hf_total(&p).map(|t| t.0), Some(5274));
        // No epoch point, no args: nothing said.
        assert_eq!(hf_total(&plan(r#"{"num_train_epochs": 3}"#, None)), None);
        assert_eq!(hf_total(&HfPlan::default()), None);
    }
    use crate::metrics::mapping::LogFormat;
    use crate::metrics::tail::Tail;

    /// Event files written by tensorboardX and tensorboard (tests/fixtures/tensorboard/
    /// write_events.py): steps 0..40, wall time 1.7e9 + step.
    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tensorboard")
            .join(name)
    }

    pub(crate) fn metrics() -> MetricsConfig {
        MetricsConfig {
            loss: "train/loss".into(),
            lr: "lr-AdamW".into(),
            grad_norm: "train/grad_norm".into(),
            ..Default::default()
        }
    }

    fn loss_at(step: u64) -> f64 {
        4.0 / (1.0 + 0.01 * step as f64) + 0.5
    }

    fn read(path: &Path) -> Poll {
        Tail::new(path, LogFormat::Tensorboard, &metrics())
            .unwrap()
            .poll()
            .unwrap()
    }

    #[test]
    fn simple_values_and_tensor_scalars_of_every_dtype() {
        for (name, tolerance) in [
            ("simple", 1e-7),
            ("tensor_float", 1e-7),
            ("tensor_content", 1e-7),
            ("tensor_double", 0.0),
            ("tensor_half", 1e-3),
        ] {
            let poll = read(&fixture(name));
            let recs = &poll.batch.records;
            assert_eq!(
                poll.batch.garbage_total, 0,
                "{name}: {:?}",
                poll.batch.garbage
            );
            assert_eq!(
                recs.iter().map(|r| r.step).collect::<Vec<_>>(),
                (0..40).collect::<Vec<_>>(),
                "{name}"
            );
            for r in recs {
                let want = loss_at(r.step);
                let got = r.get("loss").unwrap();
                assert!(
                    (got - want).abs() <= tolerance * want,
                    "{name} step {}: {got} vs {want}",
                    r.step
                );
                assert!((r.get("lr").unwrap() - 3e-4).abs() < 1e-6, "{name}");
                assert_eq!(r.time, Some(1_700_000_000.0 + r.step as f64), "{name}");
            }
        }
    }

    #[test]
    fn a_restarted_run_is_read_file_after_file() {
        let poll = read(&fixture("restart"));
        let steps: Vec<u64> = poll.batch.records.iter().map(|r| r.step).collect();
        let want: Vec<u64> = (0..30).chain(20..40).collect();
        assert_eq!(steps, want);
        // One file named: only that one.
        let first = event_files(&fixture("restart")).remove(0);
        assert_eq!(read(&first).batch.records.len(), 30);
    }

    fn copy_simple(dir: &Path) -> PathBuf {
        let src = event_files(&fixture("simple")).remove(0);
        let dst = dir.join(src.file_name().unwrap());
        std::fs::copy(&src, &dst).unwrap();
        dst
    }

    #[test]
    fn a_torn_last_record_is_retried_not_reported() {
        let d = tempfile::tempdir().unwrap();
        let file = copy_simple(d.path());
        let whole = std::fs::read(&file).unwrap();
        // Cut inside the record of step 39's grad norm (the last scalar written).
        let (items, _) = tfrecord::scan(&whole);
        let last_grad = items
            .iter()
            .rev()
            .find_map(|i| match i {
                Item::Record(at, p) => {
                    let e = tb_event::decode(p).unwrap();
                    let grad = tb_event::scalars(&e).any(|(t, _)| t == "train/grad_norm");
                    grad.then_some(*at as usize)
                }
                Item::Damaged { .. } => None,
            })
            .unwrap();
        let cut = last_grad + tfrecord::HEADER + 5;
        std::fs::write(&file, &whole[..cut]).unwrap();
        let mut tail = Tail::new(d.path(), LogFormat::Tensorboard, &metrics()).unwrap();
        let first = tail.poll().unwrap();
        assert_eq!(first.batch.garbage_total, 0, "{:?}", first.batch.garbage);
        let last = first.batch.records.last().unwrap();
        assert_eq!(last.step, 39, "step 39's first scalars were whole");
        assert_eq!(last.get("grad_norm"), None);
        let again = tail.poll().unwrap();
        assert_eq!(
            (again.batch.records.len(), again.batch.garbage_total),
            (0, 0)
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        std::io::Write::write_all(&mut f, &whole[cut..]).unwrap();
        let second = tail.poll().unwrap();
        assert_eq!(second.batch.garbage_total, 0);
        let r = second.batch.records;
        assert_eq!((r.len(), r[0].step), (1, 39));
        assert_eq!(r[0].get("grad_norm"), Some(0.800000011920929));
    }

    #[test]
    fn a_bad_crc_in_the_middle_is_reported_with_file_and_offset_and_the_rest_read() {
        let d = tempfile::tempdir().unwrap();
        let file = copy_simple(d.path());
        let mut bytes = std::fs::read(&file).unwrap();
        // The record that starts nearest the middle.
        let (items, _) = tfrecord::scan(&bytes);
        let at = items
            .iter()
            .filter_map(|i| match i {
                Item::Record(at, _) => Some(*at as usize),
                Item::Damaged { .. } => None,
            })
            .find(|&at| at >= bytes.len() / 2)
            .unwrap();
        bytes[at + tfrecord::HEADER + 2] ^= 0x55;
        std::fs::write(&file, &bytes).unwrap();
        let poll = read(d.path());
        assert_eq!(poll.batch.garbage_total, 1);
        let g = poll.batch.garbage[0].to_string();
        assert!(g.starts_with(&file.display().to_string()), "{g}");
        assert!(g.contains(&format!("at byte offset {at}:")), "{g}");
        assert!(g.contains("CRC-32C"), "{g}");
        let steps = poll
            .batch
            .records
            .iter()
            .map(|r| r.step)
            .collect::<Vec<_>>();
        assert_eq!(*steps.last().unwrap(), 39, "read on after it");
        assert!(steps.len() >= 39, "{steps:?}");
    }
}
