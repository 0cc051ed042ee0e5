//! Kernel log lines -> counts, fed by the `printk:console` probe's ring buffer or, where that
//! cannot be used, by reading `/dev/kmsg`. Every line pattern is in [`patterns`]: module
//! events and IOMMU faults alike; [`iommu_faults`] reads the fault lines; [`before_start`]
//! reads the records the log already held when the exporter started.
//!
//! Any root process can write the kernel log: the lines a process writes are told from the
//! kernel's by [`origin`] and counted apart, never as events.

mod before_start;
mod iommu_faults;
mod origin;
mod patterns;
mod rdma_device;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::logging::{self, Level};
use crate::sync::lock;
pub use before_start::read_before_start;
use iommu_faults::{Fault, FaultCounts};
pub use origin::kmsg_record_origin;
pub use origin::{KmsgReader, Origin, Origins};
pub use patterns::EventKey;
use patterns::{LineMatch, Matcher, PATTERNS};

/// Distinct captured label sets per event beyond this are counted with every capture `other`.
const MAX_LABEL_SETS_PER_EVENT: usize = 64;

/// Counts per event and captured labels, with at most [`MAX_LABEL_SETS_PER_EVENT`] label sets
/// per event.
#[derive(Default)]
struct EventCounts(BTreeMap<EventKey, u64>);

impl EventCounts {
    fn count(&mut self, (event, labels): EventKey) {
        let known = self.0.contains_key(&(event, labels.clone()));
        let sets = self.0.keys().filter(|(e, _)| *e == event).count();
        let key = if known || sets < MAX_LABEL_SETS_PER_EVENT || labels.is_empty() {
            (event, labels)
        } else {
            let other = labels
                .into_iter()
                .map(|(name, _)| (name, "other".to_string()))
                .collect();
            (event, other)
        };
        *self.0.entry(key).or_default() += 1;
    }

    fn snapshot(&self) -> Vec<(EventKey, u64)> {
        self.0.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

/// The events of the records the kernel log held when the exporter started, read once.
pub struct BeforeStart {
    pub events: Vec<(EventKey, u64)>,
    /// Whether those records reach back to the kernel's first one and were all read.
    pub complete: bool,
}

/// Event and IOMMU fault counts since start, shared by the line source and the scrape, and
/// the events logged before start once they have been read.
pub struct KernelLogCounts {
    matcher: Matcher,
    /// Where the RDMA device a driver health line names is looked up ([`rdma_device`]).
    sysfs: PathBuf,
    counts: Mutex<EventCounts>,
    iommu_faults: Mutex<FaultCounts>,
    /// Lines processes wrote to `/dev/kmsg` that read as a known event, by event and captured
    /// labels (IOMMU fault lines as `iommu_fault`, without them).
    process_lines: Mutex<EventCounts>,
    before_start: OnceLock<BeforeStart>,
}

impl KernelLogCounts {
    pub fn new() -> Arc<KernelLogCounts> {
        KernelLogCounts::on(Path::new("/sys"))
    }

    /// Counts whose driver health events name their RDMA device from `sysfs`.
    pub fn on(sysfs: &Path) -> Arc<KernelLogCounts> {
        Arc::new(KernelLogCounts {
            matcher: Matcher::new(PATTERNS).expect("the built-in kernel log patterns compile"),
            sysfs: sysfs.to_path_buf(),
            counts: Mutex::default(),
            iommu_faults: Mutex::default(),
            process_lines: Mutex::default(),
            before_start: OnceLock::new(),
        })
    }

    /// Counts one record the printk:console program forwarded, once [`Origins`] has said
    /// whose it is; a record that matches nothing is not looked up.
    pub fn count_forwarded<R: KmsgReader>(&self, record: &str, origins: &mut Origins<R>) {
        if lines(record).any(|line| self.matcher.find(line).is_some()) {
            self.count_record(record, origins.of(record));
        }
    }

    /// Counts one record: a process's apart, the kernel's as events. One of unknown origin is
    /// counted as the kernel's, as it was before lines could be told apart: an event missed
    /// costs more than a written line counted.
    pub fn count_record(&self, record: &str, origin: Origin) {
        match origin {
            Origin::Kernel | Origin::Unknown => self.count_line(record),
            Origin::Process => self.count_process_line(record),
        }
    }

    /// Counts one record the kernel logged (its text, without priority or timestamp). A record
    /// may hold several lines: one printk with embedded newlines, like the two-line DMAR fault
    /// report of kernels before 4.7, is one record; each of its lines is matched on its own.
    pub fn count_line(&self, record: &str) {
        for line in lines(record) {
            match self.matcher.find(line) {
                Some(LineMatch::Event(key)) => {
                    let key = self.with_rdma_device(key);
                    let mut counts = lock(&self.counts);
                    counts.count(key);
                }
                Some(LineMatch::IommuFault(form, captures)) => {
                    let mut faults = lock(&self.iommu_faults);
                    faults.count_line(form, &captures);
                }
                None => {}
            }
        }
    }

    fn with_rdma_device(&self, (event, mut labels): EventKey) -> EventKey {
        rdma_device::add_label(&self.sysfs, event, &mut labels);
        (event, labels)
    }

    /// Counts the lines of a record a process wrote that read as a known event.
    fn count_process_line(&self, record: &str) {
        for line in lines(record) {
            let key = match self.matcher.find(line) {
                Some(LineMatch::Event(key)) => key,
                Some(LineMatch::IommuFault(..)) => ("iommu_fault", Vec::new()),
                None => continue,
            };
            lock(&self.process_lines).count(key);
        }
    }

    /// Lines processes wrote that read as a known event.
    pub fn process_lines(&self) -> Vec<(EventKey, u64)> {
        let lines = lock(&self.process_lines);
        lines.snapshot()
    }

    /// Counts the events of one record logged before start into `events` (IOMMU faults from
    /// before start are not kept: boot-time faults of firmware-owned devices are common).
    fn count_before_start(&self, events: &mut EventCounts, record: &str) {
        for line in lines(record) {
            if let Some(LineMatch::Event(key)) = self.matcher.find(line) {
                events.count(self.with_rdma_device(key));
            }
        }
    }

    /// IOMMU fault counts (see [`iommu_faults`]).
    pub fn iommu_faults(&self) -> Vec<(Fault, u64)> {
        let faults = lock(&self.iommu_faults);
        faults.snapshot()
    }

    pub fn snapshot(&self) -> Vec<(EventKey, u64)> {
        let counts = lock(&self.counts);
        counts.snapshot()
    }

    /// The events logged before start; `None` until they have been read.
    pub fn before_start(&self) -> Option<&BeforeStart> {
        self.before_start.get()
    }
}

/// The non-empty lines of a record, without trailing white space.
fn lines(record: &str) -> impl Iterator<Item = &str> {
    record
        .split('\n')
        .filter(|line| !line.trim().is_empty())
        .map(str::trim_end)
}

/// The text of one `/dev/kmsg` record: `<prio>,<seq>,<usec>,<flags>[,...];<text>\n` followed
/// by optional ` KEY=value` continuation lines. The kernel writes every byte of the text below
/// a space, above `~`, and `\` itself as `\xNN`: they are decoded, so a record's embedded
/// newlines (one printk of several lines) are newlines again, as on the ring buffer path.
pub fn kmsg_record_text(record: &[u8]) -> Option<String> {
    let start = record.iter().position(|&b| b == b';')? + 1;
    let text = &record[start..];
    let end = text.iter().position(|&b| b == b'\n').unwrap_or(text.len());
    let mut text = &text[..end];
    let mut decoded = Vec::with_capacity(text.len());
    while let Some((&byte, rest)) = text.split_first() {
        let hex = |digit: u8| char::from(digit).to_digit(16);
        let escaped = match rest {
            [b'x', high, low, ..] if byte == b'\\' => hex(*high)
                .zip(hex(*low))
                .map(|(high, low)| (high * 16 + low) as u8),
            _ => None,
        };
        match escaped {
            Some(value) => {
                decoded.push(value);
                text = &rest[3..];
            }
            None => {
                decoded.push(byte);
                text = rest;
            }
        }
    }
    Some(String::from_utf8_lossy(&decoded).into_owned())
}

/// The text of one ring buffer record from the kernel_log probe: a native-endian u32 length,
/// then the line's bytes.
pub fn ring_record_text(record: &[u8]) -> Option<String> {
    let len = u32::from_ne_bytes(record.get(..4)?.try_into().ok()?) as usize;
    let text = record.get(4..4 + len)?;
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    Some(String::from_utf8_lossy(&text[..end]).into_owned())
}

/// The text of one `/dev/kmsg` record if the kernel logged it ([`origin`]).
pub fn kmsg_kernel_record_text(record: &[u8]) -> Option<String> {
    match kmsg_record_origin(record)? {
        Origin::Kernel => kmsg_record_text(record),
        Origin::Process | Origin::Unknown => None,
    }
}

/// The sequence number of one `/dev/kmsg` record (the second field of its prefix).
pub fn kmsg_record_seq(record: &[u8]) -> Option<u64> {
    let prefix = &record[..record.iter().position(|&b| b == b';')?];
    let seq = prefix.split(|&b| b == b',').nth(1)?;
    std::str::from_utf8(seq).ok()?.parse().ok()
}

/// The longest `/dev/kmsg` record (the kernel's `CONSOLE_EXT_LOG_MAX`): a read with a smaller
/// buffer fails with EINVAL.
const KMSG_RECORD_MAX: usize = 8192;

/// What one read of `/dev/kmsg` gave.
enum KmsgRead {
    /// A record of this many bytes.
    Record(usize),
    /// Nothing to read yet (EAGAIN, on a non-blocking descriptor).
    Empty,
    /// The records at the reader's position were overwritten before it read them (EPIPE); the
    /// next read gives the oldest record left.
    Overwritten,
    Failed(String),
}

fn read_kmsg_record(kmsg: &mut impl Read, record: &mut [u8]) -> KmsgRead {
    loop {
        return match kmsg.read(record) {
            Ok(0) => KmsgRead::Failed("end of file".to_string()),
            Ok(len) => KmsgRead::Record(len),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => KmsgRead::Empty,
            Err(err) if err.raw_os_error() == Some(libc::EPIPE) => KmsgRead::Overwritten,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => KmsgRead::Failed(err.to_string()),
        };
    }
}

/// Opens `/dev/kmsg` non-blocking at `position`: `Start` is the oldest record left, `End`
/// after the last one.
fn open_kmsg_nonblocking(position: SeekFrom) -> std::io::Result<File> {
    let mut kmsg = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")?;
    kmsg.seek(position)?;
    Ok(kmsg)
}

/// Opens `/dev/kmsg` positioned after the last record, so only new lines are counted.
pub fn open_kmsg() -> std::io::Result<File> {
    let mut kmsg = File::open("/dev/kmsg")?;
    kmsg.seek(SeekFrom::End(0))?;
    Ok(kmsg)
}

/// Reads `/dev/kmsg` records for ever (one record per read), counting each line. Records
/// overwritten before they were read (EPIPE) are skipped: the count is then a lower bound.
pub fn follow_kmsg(mut kmsg: File, counts: Arc<KernelLogCounts>) {
    let mut record = vec![0u8; KMSG_RECORD_MAX];
    let stopped = loop {
        match read_kmsg_record(&mut kmsg, &mut record) {
            KmsgRead::Record(len) => {
                let record = &record[..len];
                if let Some((text, origin)) =
                    kmsg_record_text(record).zip(kmsg_record_origin(record))
                {
                    counts.count_record(&text, origin);
                }
            }
            KmsgRead::Empty | KmsgRead::Overwritten => {}
            KmsgRead::Failed(err) => break err,
        }
    };
    logging::log(
        Level::Warn,
        "stopped reading /dev/kmsg; kernel log events are no longer counted",
        &[("err", &stopped)],
    );
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies::{bytes, text};
    use proptest::prelude::*;

    const RECORD_TOKENS: &[&str] = &[
        "6,1402,123456789,-;",
        ";",
        ",",
        "\\x",
        "\\x0a",
        "\\x5c",
        "0",
        "a",
        "F",
        "\n",
        " SUBSYSTEM=pci\n",
        "DMAR: ",
        "AMD-Vi: ",
        "\0",
    ];
    const LINE_TOKENS: &[&str] = &[
        "DMAR: ",
        "DMAR:",
        "dmar: ",
        "[DMA Read] ",
        "[DMA Write NO_PASID] ",
        "[INTR-REMAP] ",
        "Request device [3b:00.0] ",
        "fault addr 0x1000 ",
        "fault index 0x23 ",
        "[fault reason 0x06] ",
        "PTE Read access is not set",
        "AMD-Vi: Event logged ",
        "[IO_PAGE_FAULT ",
        "device=3b:00.0 ",
        "domain=0x000b ",
        "address=0x1000 ",
        "flags=0x",
        "0020",
        "ffffffffffffffffff",
        "]",
        "pcspkr",
        ": module verification failed: ",
        "signature and/or required key missing - tainting kernel",
        "Loading of ",
        "unsigned module is rejected",
        "Lockdown: ",
        "modprobe: ",
        "\n",
        " ",
    ];

    /// The kernel's escaping of a /dev/kmsg record's text (`msg_add_ext_text`).
    fn kmsg_escaped(text: &[u8]) -> String {
        text.iter()
            .map(|&byte| match byte {
                b' '..=b'~' if byte != b'\\' => char::from(byte).to_string(),
                _ => format!("\\x{byte:02x}"),
            })
            .collect()
    }

    proptest! {
        #[test]
        fn any_record_is_text_or_none(record in bytes(RECORD_TOKENS)) {
            if kmsg_record_text(&record).is_some() {
                prop_assert!(record.contains(&b';'));
            }
            if let Some(text) = ring_record_text(&record) {
                prop_assert!(text.len() <= 3 * (record.len() - 4));
            }
        }

        #[test]
        fn a_kmsg_record_gives_back_the_printed_bytes(
            // A printk's text is at most a kilobyte.
            text in bytes(&["\n", "\\", "\\x4a", "é"]).prop_map(|mut text| { text.truncate(1024); text }),
            prefix in "[0-7],[0-9]{1,8},[0-9]{1,12},[-c]",
            dictionary in "( [A-Z]{1,8}=[ -~]{0,16}\n){0,2}",
        ) {
            let record = format!("{prefix};{}\n{dictionary}", kmsg_escaped(&text));
            prop_assert_eq!(
                kmsg_record_text(record.as_bytes()),
                Some(String::from_utf8_lossy(&text).into_owned())
            );
        }

        #[test]
        fn a_ring_record_gives_back_its_line(line in "[^\0]{0,300}", padding in 0usize..8) {
            let mut record = (line.len() as u32).to_ne_bytes().to_vec();
            record.extend_from_slice(line.as_bytes());
            record.resize(record.len() + padding, 0);
            prop_assert_eq!(ring_record_text(&record), Some(line));
        }

    }

    fn counted(counts: &KernelLogCounts) -> u64 {
        let events: u64 = counts.snapshot().iter().map(|(_, n)| n).sum();
        let faults: u64 = counts.iommu_faults().iter().map(|(_, n)| n).sum();
        events + faults
    }

    /// One counter for all cases, as the exporter has: compiling the patterns per case would
    /// take most of the test's time.
    #[test]
    fn any_kernel_log_text_is_counted_without_panic() {
        let counts = KernelLogCounts::new();
        proptest!(|(lines in text(LINE_TOKENS))| {
            let before = counted(&counts);
            counts.count_line(&lines);
            // One count per line at most, and one for a fault line left waiting before.
            let lines = lines.split('\n').count() as u64;
            prop_assert!(counted(&counts) - before <= lines + 1);
        });
    }
}
