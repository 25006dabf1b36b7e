//! The only place that touches the OS. Each piece sits behind a small trait or plain
//! function so the logic above it is tested with fakes.

pub mod bounded;
pub mod cgroup;
pub mod clock;
pub mod detach;
pub mod disk;
pub mod environ;
pub mod fskind;
pub mod fsx;
pub mod host;
pub mod owner;
pub mod pidinfo;
pub mod proc;
pub mod wsl;

pub use clock::{Clock, FakeClock, SystemClock};
