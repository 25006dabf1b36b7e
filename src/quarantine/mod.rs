//! Quarantine: items set aside (moved, never copied) until a trial proves them good.
