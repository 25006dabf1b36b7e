//! The only place that touches the OS. Each piece sits behind a small trait or plain
//! function so the logic above it is tested with fakes.

pub mod clock;
pub mod disk;
pub mod proc;

pub use clock::{Clock, FakeClock, SystemClock};
