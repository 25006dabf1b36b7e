//! Wall clock and monotonic time behind a trait, so time-based logic is tested without sleeping.

use chrono::{DateTime, Utc};
use std::sync::Mutex;
use std::time::Duration;

pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
    /// Wait; the fake clock advances instead.
    fn sleep(&self, d: Duration);
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }
}

/// A clock that only moves when told to (or when slept on).
pub struct FakeClock {
    now: Mutex<DateTime<Utc>>,
}

impl FakeClock {
    pub fn new(start: DateTime<Utc>) -> FakeClock {
        FakeClock {
            now: Mutex::new(start),
        }
    }
    pub fn advance(&self, d: Duration) {
        let mut now = self.now.lock().expect("clock lock");
        *now += chrono::Duration::from_std(d).expect("duration in range");
    }
}

impl Clock for FakeClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().expect("clock lock")
    }
    fn sleep(&self, d: Duration) {
        self.advance(d)
    }
}
