//! The process-wide budget of descriptors kept open between scrapes (held attributes and
//! subdirectories, kept device directories), so that holding never takes the descriptors
//! connections and other reads need.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The bound on descriptors held by [`super::HeldAttributes`] and [`super::LinkedDirs`]
/// across the process.
pub struct HeldBudget {
    limit: usize,
    held: AtomicUsize,
}

/// Most descriptors ever held, whatever the open-file limit: a 64-HCA node holds about 7000.
const MAX_HELD: usize = 1 << 16;

static PROCESS_BUDGET: OnceLock<HeldBudget> = OnceLock::new();

impl HeldBudget {
    pub const fn new(limit: usize) -> Self {
        HeldBudget {
            limit,
            held: AtomicUsize::new(0),
        }
    }

    /// Sets the process's budget to `spare`, the descriptors the open-file limit leaves beside
    /// connections and the exporter's own (`None`: no limit), at most [`MAX_HELD`]. main calls
    /// it before the collectors start; a later call changes nothing.
    pub fn set_process(spare: Option<u64>) {
        let spare = spare.map_or(MAX_HELD, |n| usize::try_from(n).unwrap_or(MAX_HELD));
        PROCESS_BUDGET.get_or_init(|| HeldBudget::new(spare.min(MAX_HELD)));
    }

    /// The process's budget: as [`HeldBudget::set_process`] set it, else half the soft
    /// open-file limit in force at the first read, at most [`MAX_HELD`].
    pub fn process() -> &'static HeldBudget {
        PROCESS_BUDGET.get_or_init(|| {
            let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
            let half = soft.map_or(MAX_HELD, |soft| {
                usize::try_from(soft / 2).unwrap_or(MAX_HELD)
            });
            HeldBudget::new(half.min(MAX_HELD))
        })
    }

    pub(super) fn reserve(&'static self) -> Option<HeldSlot> {
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held < self.limit).then_some(held + 1)
            })
            .ok()
            .map(|_| HeldSlot { budget: self })
    }

    /// Descriptors held now, process-wide.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// One descriptor's share of a [`HeldBudget`], given back when it is dropped.
pub(super) struct HeldSlot {
    budget: &'static HeldBudget,
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(1, Ordering::Relaxed);
    }
}
