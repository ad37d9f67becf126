//! How the artifact and the records write a wall-clock instant.

use std::time::SystemTime;

/// A wall-clock instant as the artifact writes it: ISO label (seconds) and Unix nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Stamp(pub SystemTime);

impl Stamp {
    pub fn now() -> Self {
        Stamp(SystemTime::now())
    }
    pub fn from_unix_ns(ns: u64) -> Self {
        Stamp(SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(ns))
    }
    pub fn iso(self) -> String {
        humantime::format_rfc3339_seconds(self.0).to_string()
    }
    pub fn unix_ns(self) -> u64 {
        self.0.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    }
}
