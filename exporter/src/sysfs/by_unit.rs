//! `HeldByUnit`: a collector's held descriptors and its own state, one set per unit, each behind
//! a lock of its own, so a read hung in one unit's driver blocks no other unit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::HeldAttributes;
use crate::sync::{lock, try_lock};

/// One [`HeldAttributes`] per unit of a collector (an RDMA device, a PCI device), with the
/// collector's own state for the unit (`T`: the RDMA device's room, label values and label
/// sets, a PCI unit's room, label values and root port), each with a lock of its own: the
/// scrape claims a unit before reading it,
/// so only one read locks it, a read hung in a driver blocks no other unit, and units read at
/// once share none of the collector's state.
pub struct HeldByUnit<T = ()> {
    units: Mutex<HashMap<String, Arc<Mutex<UnitHeld<T>>>>>,
}

/// What one unit holds: its descriptors and the collector's state for it.
#[derive(Default)]
struct UnitHeld<T> {
    held: HeldAttributes,
    state: T,
    /// Whether its round was left open by [`HeldByUnit::read_opening`].
    round_open: bool,
}

impl<T> Default for HeldByUnit<T> {
    fn default() -> Self {
        HeldByUnit {
            units: Mutex::default(),
        }
    }
}

impl<T: Default> HeldByUnit<T> {
    /// Runs `read` with what `unit` holds, then ends its round. Were the unit's set still
    /// locked (a read of it still running), `read` gets a set (and state) of its own for its
    /// length rather than wait.
    pub fn read<R>(&self, unit: &str, read: impl FnOnce(&mut HeldAttributes, &mut T) -> R) -> R {
        self.read_in_round(unit, false, |held, state| (read(held, state), false))
    }

    /// As [`HeldByUnit::read`], in a new round that stays open when `read` says so: the
    /// unit's next [`HeldByUnit::read`] (a collector's read of a unit its listing read from)
    /// goes on in it, looking at no directory again. A round left open and never gone on
    /// with (the unit was not read after all) is ended first.
    pub fn read_opening<R>(
        &self,
        unit: &str,
        read: impl FnOnce(&mut HeldAttributes, &mut T) -> (R, bool),
    ) -> R {
        self.read_in_round(unit, true, read)
    }

    fn read_in_round<R>(
        &self,
        unit: &str,
        new_round: bool,
        read: impl FnOnce(&mut HeldAttributes, &mut T) -> (R, bool),
    ) -> R {
        let held = {
            let mut units = lock(&self.units);
            // Looked up before it is made: a scrape reads hundreds of units, all known.
            match units.get(unit) {
                Some(held) => held.clone(),
                None => units.entry(unit.to_string()).or_default().clone(),
            }
        };
        let Some(mut guard) = try_lock(&held) else {
            return read(&mut HeldAttributes::default(), &mut T::default()).0;
        };
        let unit = &mut *guard;
        if new_round && unit.round_open {
            unit.held.end_round();
        }
        // Open while it reads: one that panics leaves its round for the next opening to end.
        unit.round_open = true;
        let (result, stays_open) = read(&mut unit.held, &mut unit.state);
        unit.round_open = stays_open;
        if !stays_open {
            unit.held.end_round();
        }
        result
    }

    /// Closes what the units `keep` refuses held (units gone since the last listing).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut units = lock(&self.units);
        units.retain(|unit, _| keep(unit));
    }

    /// Units with a held set.
    pub fn len(&self) -> usize {
        lock(&self.units).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
