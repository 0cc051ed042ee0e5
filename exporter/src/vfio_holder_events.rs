//! The processes that may hold a vfio file, as the `vfio_holders` eBPF probe records them: the
//! `ebpf` collector attaches the probe and hands its set over here; the `pci` collector proves
//! holds on those processes only, instead of reading every process's descriptors. The one
//! channel between two collectors, made in `main` and given to both through `Host`.
//!
//! Invariant: a set is used only from the attach that published it on. A process holding a vfio
//! file from before that attach is in it only once a full scan after the attach has put it
//! there ([`Tracking::attach`] tells the scan which attach it seeded).
//!
//! Known limit: a process that shares its descriptor table with another (`clone(CLONE_FILES)`
//! without `CLONE_THREAD`, which neither fork nor posix_spawn does) holds what the other opens,
//! and only the opener is recorded.

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::sync::lock;

/// The kernel side's set of processes (a BPF hash keyed by tgid), as the probe's loader reaches
/// it. Errors are one line each.
pub trait CandidateSet: Send + Sync {
    /// Every process recorded, with the time of its last event (`CLOCK_MONOTONIC` ns; 0 for
    /// one a scan added).
    fn entries(&self) -> Result<Vec<(u32, u64)>, String>;
    /// Adds a process a scan found holding a vfio file, unless the kernel side recorded it
    /// already (whose time stays).
    fn seed(&self, pid: u32) -> Result<(), String>;
    /// Forgets a process that exited.
    fn remove(&self, pid: u32) -> Result<(), String>;
    /// Processes the kernel side had no room for: the set is incomplete for good.
    fn dropped(&self) -> Result<u64, String>;
}

/// What the `pci` collector reads: the live set, if the probe is attached now.
#[derive(Default)]
pub struct HolderEvents {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The set, while the probe's programs are attached.
    live: Option<Arc<dyn CandidateSet>>,
    /// Attaches so far: a new one needs a new seeding scan.
    attaches: u64,
}

/// A live set and the attach it belongs to.
pub struct Tracking {
    pub attach: u64,
    pub set: Arc<dyn CandidateSet>,
}

impl HolderEvents {
    /// The probe attached (at start, or when the vfio module loaded again).
    pub fn attached(&self, set: Arc<dyn CandidateSet>) {
        let mut state = lock(&self.state);
        state.attaches += 1;
        state.live = Some(set);
    }

    /// The probe detached (the vfio module unloaded): opens are no longer recorded.
    pub fn detached(&self) {
        lock(&self.state).live = None;
    }

    /// The set, while the probe is attached.
    pub fn tracking(&self) -> Option<Tracking> {
        let state = lock(&self.state);
        let set = state.live.clone()?;
        Some(Tracking {
            attach: state.attaches,
            set,
        })
    }
}

impl fmt::Debug for HolderEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("HolderEvents")
            .field("live", &state.live.is_some())
            .field("attaches", &state.attaches)
            .finish()
    }
}
