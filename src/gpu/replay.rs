//! Replay source: plays back snapshots recorded by `roger probe --record` (or written by
//! hand for tests). File shape: `{"snapshots": [GpuSnapshot, ...]}`; each read returns the
//! next one and the last one repeats, so a recording of a few ticks can drive a long test.

use super::{GpuError, GpuReader, GpuSnapshot};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recording {
    pub snapshots: Vec<GpuSnapshot>,
}

pub struct ReplayGpu {
    path: PathBuf,
    recording: Recording,
    next: usize,
}

impl ReplayGpu {
    pub fn open(path: &Path) -> Result<ReplayGpu, GpuError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            GpuError::Failed(format!("reading GPU recording {}: {e}", path.display()))
        })?;
        let recording: Recording = serde_json::from_str(&text).map_err(|e| {
            GpuError::Failed(format!(
                "{}:{}:{}: expected a GPU recording {{\"snapshots\": [...]}}: {e}",
                path.display(),
                e.line(),
                e.column()
            ))
        })?;
        Ok(ReplayGpu {
            path: path.to_path_buf(),
            recording,
            next: 0,
        })
    }
}

impl GpuReader for ReplayGpu {
    fn read(&mut self) -> Result<GpuSnapshot, GpuError> {
        let n = self.recording.snapshots.len();
        if n == 0 {
            return Err(GpuError::NoGpu(format!(
                "recording {} holds no snapshots",
                self.path.display()
            )));
        }
        let mut snap = self.recording.snapshots[self.next.min(n - 1)].clone();
        self.next += 1;
        snap.source = "replay".into();
        Ok(snap)
    }

    fn describe(&self) -> String {
        format!("replay ({})", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plays_in_order_then_repeats_last() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        std::fs::write(
            &p,
            r#"{"snapshots":[
                {"gpus":[{"index":0,"name":"NVIDIA H100","uuid":"GPU-1","util":10}],"processes":[],"source":"nvml"},
                {"gpus":[{"index":0,"name":"NVIDIA H100","uuid":"GPU-1","util":99}],"processes":[{"pid":7,"gpu":0,"used_memory":1024}],"source":"nvml"}
            ]}"#,
        )
        .unwrap();
        let mut r = ReplayGpu::open(&p).unwrap();
        assert_eq!(r.read().unwrap().gpus[0].util, Some(10));
        let s = r.read().unwrap();
        assert_eq!(s.gpus[0].util, Some(99));
        assert_eq!(s.memory_of(&[7]), Some(1024));
        assert_eq!(r.read().unwrap().gpus[0].util, Some(99));
    }

    #[test]
    fn bad_recording_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        std::fs::write(&p, "{\"snapshots\": [\n  {\"gpus\": 3}\n]}").unwrap();
        let err = ReplayGpu::open(&p).err().unwrap().to_string();
        assert!(err.contains("r.json:2:"), "{err}");
    }
}
