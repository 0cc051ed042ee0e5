//! Whose a kernel log line is: the kernel's (facility `LOG_KERN`) or a process's, written to
//! `/dev/kmsg` (devkmsg_write in kernel/printk/printk.c logs it with facility `LOG_USER` unless
//! the writer asks for another non-zero one, 3.5 to 6.12). Only the kernel's lines count as
//! events; a process's are counted apart, so a test or an imitation never raises an alert.
//!
//! `/dev/kmsg` records carry the facility. The printk:console tracepoint carries the text
//! only: from 5.19 it fires in printk_sprint() for every record, the kernel's and
//! devkmsg_write()'s alike, after the record is reserved in the log but before vprintk_store()
//! commits it, and `/dev/kmsg` shows only committed records. The drain thread, awake on
//! another CPU, can see the line before its record: [`Origins`] then waits for the record, at
//! most [`COMMIT_WAIT`]. It looks up only a line that matches a known event: the log is read as
//! often as events happen, not once per line.

use std::fs::File;
use std::io::{Read, SeekFrom};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

use super::KMSG_RECORD_MAX;
use super::{kmsg_record_text, open_kmsg_nonblocking, read_kmsg_record, KmsgRead};

/// Who wrote a line to the kernel log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Kernel,
    Process,
    /// Not found in `/dev/kmsg` (unreadable, or the record was gone or not yet complete: a
    /// `pr_cont` fragment's record is readable once the line is finished).
    Unknown,
}

/// The origin of one `/dev/kmsg` record, from its priority (the first field,
/// `facility << 3 | level`); `None` for a malformed record.
pub fn kmsg_record_origin(record: &[u8]) -> Option<Origin> {
    let priority = record.split(|&b| b == b',').next()?;
    let priority: u32 = std::str::from_utf8(priority).ok()?.parse().ok()?;
    Some(if priority >> 3 == 0 {
        Origin::Kernel
    } else {
        Origin::Process
    })
}

/// How long a forwarded line waits for its record to be committed. The writer commits within
/// microseconds of the tracepoint, with interrupts off; this covers a preempted virtual CPU. A
/// `pr_cont` fragment's record is committed only when its line ends: it waits this long, then
/// counts as of unknown origin.
const COMMIT_WAIT: Duration = Duration::from_millis(100);

/// `/dev/kmsg` opened non-blocking, as [`Origins`] reads it.
pub trait KmsgReader: Read {
    /// Waits at most `timeout` for a record to read; false when none came.
    fn wait_for_record(&mut self, timeout: Duration) -> bool;
}

impl KmsgReader for File {
    fn wait_for_record(&mut self, timeout: Duration) -> bool {
        let mut ready = [PollFd::new(self, PollFlags::IN)];
        let timeout = Timespec::try_from(timeout).unwrap_or(Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        });
        // Interrupted: the caller reads again and comes back while time is left.
        matches!(
            rustix::event::poll(&mut ready, Some(&timeout)),
            Ok(1..) | Err(rustix::io::Errno::INTR)
        )
    }
}

/// Finds the records of forwarded lines in `/dev/kmsg`, read forward from where the exporter
/// started following the ring buffer.
pub struct Origins<R> {
    kmsg: Option<R>,
    record: Vec<u8>,
}

impl Origins<File> {
    /// `/dev/kmsg` from its end, non-blocking: the lines forwarded from now on are after it.
    pub fn open() -> std::io::Result<Origins<File>> {
        Ok(Origins::new(open_kmsg_nonblocking(SeekFrom::End(0))?))
    }

    /// Without `/dev/kmsg` (refused: no CAP_SYSLOG under kernel.dmesg_restrict): every line is
    /// of unknown origin.
    pub fn unreadable() -> Origins<File> {
        Origins {
            kmsg: None,
            record: Vec::new(),
        }
    }
}

impl<R: KmsgReader> Origins<R> {
    pub fn new(kmsg: R) -> Origins<R> {
        Origins {
            kmsg: Some(kmsg),
            record: vec![0; KMSG_RECORD_MAX],
        }
    }

    /// The origin of the first record from here on whose text holds `line` (the tracepoint
    /// gives at most 255 bytes, and a `pr_cont` fragment alone). The records before it are
    /// passed: their lines were forwarded before this one and matched nothing. A record not
    /// committed within [`COMMIT_WAIT`] leaves the line unknown; a read that fails for another
    /// reason than an empty log leaves the rest unknown.
    pub fn of(&mut self, line: &str) -> Origin {
        let Some(kmsg) = self.kmsg.as_mut() else {
            return Origin::Unknown;
        };
        let mut deadline = None;
        loop {
            match read_kmsg_record(kmsg, &mut self.record) {
                KmsgRead::Record(len) => {
                    let record = &self.record[..len];
                    if kmsg_record_text(record).is_some_and(|text| text.contains(line)) {
                        return kmsg_record_origin(record).unwrap_or(Origin::Unknown);
                    }
                }
                KmsgRead::Overwritten => {}
                KmsgRead::Empty => {
                    let deadline = *deadline.get_or_insert_with(|| Instant::now() + COMMIT_WAIT);
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || !kmsg.wait_for_record(left) {
                        return Origin::Unknown;
                    }
                }
                KmsgRead::Failed(_) => {
                    self.kmsg = None;
                    return Origin::Unknown;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
