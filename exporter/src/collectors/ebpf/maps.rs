//! The read side the probes' specs use: a probe's maps and lost-event count ([`Maps`]), what it
//! attached ([`Attached`]), and the threads that drain its ring buffers. Below the specs, so
//! it never names one.

use std::collections::BTreeMap;
use std::time::Duration;

use aya::maps::{HashMap as BpfHashMap, RingBuf};
use aya::Ebpf;
use rustix::event::{PollFd, PollFlags};

use super::error::{refused, SyscallError};

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
