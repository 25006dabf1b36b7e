//! XIDs while watching: NVML's critical-XID events, followed on a thread and filed as
//! `watch` records (`event = "xid"`) with their triage, so "the GPU fell off the bus at
//! 03:12" is in the ledger next to the kill it explains. Unavailable events (no driver, WSL)
//! are said once, never an error.

use crate::gpu::xid::{Xid, XidClass};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;

pub(crate) struct XidFeed {
    rx: Option<Receiver<Xid>>,
    stop: Arc<AtomicBool>,
}

impl XidFeed {
    /// Listen when the configured source may be NVML (`auto` / `nvml`).
    pub fn start(source: &str) -> XidFeed {
        let stop = Arc::new(AtomicBool::new(false));
        if !matches!(source, "auto" | "nvml") {
            return XidFeed { rx: None, stop };
        }
        let (tx, rx) = channel();
        match crate::gpu::nvml::spawn_xid_listener(tx, stop.clone()) {
            Ok(_) => XidFeed { rx: Some(rx), stop },
            Err(e) => {
                tracing::debug!("XID events unavailable while watching: {e}");
                XidFeed { rx: None, stop }
            }
        }
    }

    /// XIDs that arrived since the last call.
    pub fn drain(&self) -> Vec<Xid> {
        self.rx
            .as_ref()
            .map(|rx| rx.try_iter().collect())
            .unwrap_or_default()
    }
}

impl Drop for XidFeed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The `watch` record fields for one XID.
pub(crate) fn record_fields(x: &Xid) -> Vec<(&'static str, serde_json::Value)> {
    vec![
        ("event", "xid".into()),
        ("device", x.device.clone().into()),
        ("xid", x.code.into()),
        (
            "class",
            match x.class {
                XidClass::Critical => "critical",
                XidClass::Application => "application",
                XidClass::Other => "other",
            }
            .into(),
        ),
        ("meaning", x.meaning.clone().into()),
        ("detail", x.detail.clone().into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_listener_for_other_sources() {
        let f = XidFeed::start("replay");
        assert!(f.rx.is_none());
        assert!(f.drain().is_empty());
    }

    #[test]
    fn fields_carry_the_triage() {
        let f = record_fields(&Xid::new("0", 79, "GPU has fallen off the bus"));
        let get = |k: &str| f.iter().find(|(n, _)| *n == k).unwrap().1.clone();
        assert_eq!(get("xid"), 79);
        assert_eq!(get("class"), "critical");
    }
}
