//! Hygiene: the disk before the emergency (measure, forecast, prune), clean logs, flapping
//! checks and regressions against a baseline run. Decisions are pure functions here; the
//! measuring and file edges are small and named.

pub mod baseline;
pub mod clean;
pub mod clean_file;
pub mod disk;
pub mod disk_tick;
pub mod flap;
pub mod prune;
pub mod regress;

pub use crate::status::Status;
