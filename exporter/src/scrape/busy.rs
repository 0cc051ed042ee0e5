//! The busy set: which of a collector's units (and its listing) are being read, and since
//! when, across scrapes; a unit whose read hangs stays in it, so it is not read again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::sync::lock;

/// Units (and [`LISTING`]) whose read is in progress, with when it started; including reads
/// abandoned at a deadline.
pub(super) type Busy = Arc<Mutex<HashMap<String, Instant>>>;

/// The busy-set key of a collector's unit listing (no unit name is empty).
pub(super) const LISTING: &str = "";

/// How often a read waiting for a concurrent scrape's read of the same unit looks again.
const BUSY_POLL: Duration = Duration::from_millis(2);

/// Marks a unit busy for as long as it lives; released however the read ends (a panic included).
pub(super) struct BusyGuard {
    busy: Busy,
    unit: String,
}

impl BusyGuard {
    /// Claims `unit` for a read. A read of it that started less than `hung_after` ago belongs
    /// to a concurrent scrape (two Prometheus servers): wait for it, until `deadline` at most.
    /// `None` when the unit stays busy: its read has outlived a scrape's deadline (hung), or
    /// this scrape's deadline came first.
    pub(super) fn claim(
        busy: &Busy,
        unit: &str,
        hung_after: Duration,
        deadline: Instant,
    ) -> Option<BusyGuard> {
        loop {
            {
                let mut reading = lock(busy);
                match reading.get(unit) {
                    None => {
                        reading.insert(unit.to_string(), Instant::now());
                        return Some(BusyGuard {
                            busy: busy.clone(),
                            unit: unit.to_string(),
                        });
                    }
                    Some(started) if started.elapsed() >= hung_after => return None,
                    Some(_) => {}
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(BUSY_POLL);
        }
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        lock(&self.busy).remove(&self.unit);
    }
}
