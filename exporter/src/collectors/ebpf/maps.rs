//! The read side the probes' specs use: a probe's maps and lost-event count ([`Maps`]), what it
//! attached ([`Attached`]), and the threads that drain its ring buffers. Below the specs, so
//! it never names one.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aya::maps::{HashMap as BpfHashMap, Map, MapData, MapError, PerCpuArray, RingBuf};
use aya::Ebpf;
use rustix::event::{PollFd, PollFlags};

use super::error::{one_line, refused, SyscallError};
use crate::sync::lock;
use crate::vfio_holder_events::CandidateSet;

/// How long a ring buffer's drain waits before it looks again when poll(2) itself fails (it
/// cannot, short of memory): the kernel log's holds about a thousand lines.
const RING_POLL_RETRY: Duration = Duration::from_millis(500);

/// What a probe's `ProbeSpec::started` gets once it attached: its object, to take maps from.
pub enum Attached<'a> {
    Bpf(&'a mut Ebpf),
    Perf,
    Kmsg,
}

/// Starts a named thread for a probe's user-space side.
pub fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> Result<(), SyscallError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .map(drop)
        .map_err(SyscallError::Thread)
}

/// Takes a ring buffer map from the object and calls `on_record` with each record from a thread
/// of its own, which sleeps in poll(2) between records, so a quiet node never wakes it.
pub fn follow_ring(
    ebpf: &mut Ebpf,
    map: &'static str,
    thread: &str,
    mut on_record: impl FnMut(&[u8]) + Send + 'static,
) -> Result<(), SyscallError> {
    let ring = ebpf
        .take_map(map)
        .ok_or(SyscallError::MissingFromObject(map))?;
    let mut ring = RingBuf::try_from(ring).map_err(|err| refused(&err))?;
    spawn(thread, move || loop {
        while let Some(record) = ring.next() {
            on_record(&record);
        }
        let mut ready = [PollFd::new(&ring, PollFlags::IN)];
        match rustix::event::poll(&mut ready, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => std::thread::sleep(RING_POLL_RETRY),
        }
    })
}

/// A probe's maps (none for a probe counted by perf or read from /dev/kmsg), its lost events
/// and its perf count, for its spec to decode (`ProbeSpec::samples`).
pub struct Maps<'a> {
    ebpf: Option<&'a Ebpf>,
    /// Events the kernel side could not record (a full map or ring buffer).
    pub dropped: u64,
    /// Events counted by perf, which sees that one happened but nothing about it.
    pub perf_count: u64,
}

impl<'a> Maps<'a> {
    /// The maps of a loaded object, nothing lost or counted by perf.
    pub fn of(ebpf: &'a Ebpf) -> Maps<'a> {
        Maps {
            ebpf: Some(ebpf),
            dropped: 0,
            perf_count: 0,
        }
    }

    /// No maps: a probe counted by perf (its count) or read from /dev/kmsg (0).
    pub fn counted(perf_count: u64) -> Maps<'a> {
        Maps {
            ebpf: None,
            dropped: 0,
            perf_count,
        }
    }

    fn map(&self, name: &str) -> Result<Option<&'a aya::maps::Map>, SyscallError> {
        self.ebpf
            .map(|ebpf| ebpf.map(name).ok_or(SyscallError::MissingMap(name.into())))
            .transpose()
    }

    /// Every (key, count) of a count hash of the kernel side; none without maps.
    pub fn keyed_counts<K: aya::Pod>(&self, name: &str) -> Result<Vec<(K, u64)>, SyscallError> {
        let Some(map) = self.map(name)? else {
            return Ok(Vec::new());
        };
        let counts: BpfHashMap<_, K, u64> = BpfHashMap::try_from(map).map_err(|e| refused(&e))?;
        counts
            .iter()
            .map(|entry| entry.map_err(|e| refused(&e)))
            .collect()
    }

    /// An `i32 -> u64` count hash of the kernel side (return values, errnos, unit numbers).
    pub fn i32_counts(&self, name: &str) -> Result<BTreeMap<i32, u64>, SyscallError> {
        Ok(self.keyed_counts(name)?.into_iter().collect())
    }
}

/// The errno of a map operation's failed system call.
fn errno(err: &MapError) -> Option<i32> {
    match err {
        MapError::SyscallError(err) => err.io_error.raw_os_error(),
        _ => None,
    }
}

/// `bpf_map_update_elem`'s flag: only where the key is absent.
const BPF_NOEXIST: u64 = 1;

/// The vfio holder probe's set as the `pci` collector reads it: handles of their own on the
/// object's hash of processes and its drop counter (their fds duplicated), so they outlive the
/// borrow of the object and stay valid across the probe's detach and reattach.
struct BpfCandidates {
    set: Mutex<BpfHashMap<MapData, u32, u64>>,
    dropped: PerCpuArray<MapData, u64>,
}

impl CandidateSet for BpfCandidates {
    fn entries(&self) -> Result<Vec<(u32, u64)>, String> {
        let set = lock(&self.set);
        let entries = set.iter().collect::<Result<_, _>>();
        entries.map_err(|err| one_line(&err))
    }

    fn seed(&self, pid: u32) -> Result<(), String> {
        match lock(&self.set).insert(pid, 0, BPF_NOEXIST) {
            Err(err) if errno(&err) == Some(libc::EEXIST) => Ok(()),
            inserted => inserted.map_err(|err| one_line(&err)),
        }
    }

    fn remove(&self, pid: u32) -> Result<(), String> {
        match lock(&self.set).remove(&pid) {
            // Removed since it was listed, by another scrape.
            Err(err) if errno(&err) == Some(libc::ENOENT) => Ok(()),
            removed => removed.map_err(|err| one_line(&err)),
        }
    }

    fn dropped(&self) -> Result<u64, String> {
        let counts = self.dropped.get(&0, 0).map_err(|err| one_line(&err))?;
        Ok(counts.iter().sum())
    }
}

impl Maps<'_> {
    /// The set of processes in hash `set` (tgid keys) with its drop counter `dropped`.
    pub fn candidate_set(
        &self,
        set: &str,
        dropped: &str,
    ) -> Result<Arc<dyn CandidateSet>, SyscallError> {
        let set = BpfHashMap::try_from(self.owned(set)?).map_err(|e| refused(&e))?;
        let dropped = PerCpuArray::try_from(self.owned(dropped)?).map_err(|e| refused(&e))?;
        Ok(Arc::new(BpfCandidates {
            set: Mutex::new(set),
            dropped,
        }))
    }

    /// A map of the object through a duplicate of its fd.
    fn owned(&self, name: &str) -> Result<Map, SyscallError> {
        let map = self.map(name)?.ok_or(SyscallError::NotBpf)?;
        let data = match map {
            Map::HashMap(data) | Map::PerCpuArray(data) => data,
            _ => return Err(SyscallError::MissingMap(name.into())),
        };
        let fd = data.fd().as_fd().try_clone_to_owned();
        let fd = fd.map_err(|err| SyscallError::Refused(one_line(&err)))?;
        let data = MapData::from_fd(fd).map_err(|e| refused(&e))?;
        Map::from_map_data(data).map_err(|e| refused(&e))
    }
}
