//! The records the kernel log still held when the exporter started. Module refusals at boot
//! (openibd loading OFED before the exporter runs) are only there. Their events are counted
//! once, apart from the counts of events since start, and exported as a gauge that stays the
//! same for the life of the process: a restart of the exporter does not look like new events
//! to `rate()`.
//!
//! Where "before start" ends: as soon as the counting of new records runs (the printk:console
//! probe attached, or the /dev/kmsg follower positioned), a second descriptor, the mark, is put
//! after the last record (SEEK_END). The first record the mark reads is the first one after
//! start. The records before it are read from a descriptor opened at the oldest record; both
//! read in sequence order, so while the mark has nothing to read (EAGAIN) every record read so
//! far came before it. A record logged between the start of the counting and the mark (a few
//! microseconds) counts in both; none is missed.

use std::fs::File;
use std::io::{Read, SeekFrom};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    kmsg_kernel_record_text, kmsg_record_seq, open_kmsg_nonblocking, read_kmsg_record, BeforeStart,
    EventCounts, KernelLogCounts, KmsgRead, KMSG_RECORD_MAX,
};
use crate::logging::{self, Level};

/// How much of the log is read at most. The ring buffer holds a few MiB at most (about 10^4
/// records at the default size): a flood of writes while it is read must not keep the reader
/// busy for ever. It runs on its own thread, so the exporter serves meanwhile.
const LIMITS: Limits = Limits {
    records: 1 << 20,
    time: Duration::from_secs(10),
};

struct Limits {
    records: usize,
    time: Duration,
}

/// How a read of the records before start ended.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// Records before start that were read.
    records: usize,
    /// Why not every record since boot up to the start was read, if so.
    incomplete: Option<String>,
}

/// Puts the mark now and reads the records before it on a thread of its own; their events are
/// in [`KernelLogCounts::before_start`] once read. Call it once the counting of new records
/// runs. A failure is logged and leaves no events, marked incomplete. Both descriptors are
/// opened here, during the start: the capabilities that opening needs (CAP_SYSLOG under
/// `kernel.dmesg_restrict`) are given up once the start is over.
pub fn read_before_start(counts: Arc<KernelLogCounts>) {
    let opened = open_kmsg_nonblocking(SeekFrom::End(0))
        .and_then(|mark| Ok((mark, open_kmsg_nonblocking(SeekFrom::Start(0))?)));
    let (mark, log) = match opened {
        Ok(opened) => opened,
        Err(err) => {
            // EPERM is kernel.dmesg_restrict without CAP_SYSLOG: said at start with its remedy.
            let said = err.raw_os_error() == Some(libc::EPERM);
            let level = if said { Level::Debug } else { Level::Warn };
            return publish(&counts, EventCounts::default(), failed(err), level);
        }
    };
    let spawned = std::thread::Builder::new()
        .name("hpcnode-kmsg-boot".into())
        .spawn({
            let counts = counts.clone();
            move || read_and_publish(log, mark, &counts)
        });
    if let Err(err) = spawned {
        let outcome = Outcome {
            records: 0,
            incomplete: Some(format!("starting a thread: {err}")),
        };
        publish(&counts, EventCounts::default(), outcome, Level::Warn);
    }
}

fn read_and_publish(mut log: File, mut mark: File, counts: &KernelLogCounts) {
    let mut events = EventCounts::default();
    let outcome = read_records(&mut log, &mut mark, &LIMITS, |text| {
        counts.count_before_start(&mut events, text)
    });
    publish(counts, events, outcome, Level::Warn);
}

fn failed(err: std::io::Error) -> Outcome {
    Outcome {
        records: 0,
        incomplete: Some(format!("opening /dev/kmsg: {err}")),
    }
}

/// Logs the outcome, at `incomplete` when the log was not read whole.
fn publish(counts: &KernelLogCounts, events: EventCounts, outcome: Outcome, incomplete: Level) {
    let events = events.snapshot();
    let found: u64 = events.iter().map(|(_, n)| n).sum();
    let (level, complete) = match &outcome.incomplete {
        None => (Level::Info, "true"),
        Some(_) => (incomplete, "false"),
    };
    let mut fields = vec![
        ("records", outcome.records.to_string()),
        ("events", found.to_string()),
        ("complete", complete.to_string()),
    ];
    fields.extend(outcome.incomplete.clone().map(|why| ("reason", why)));
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    logging::log(level, "read the kernel log from before start", &fields);
    // Set once: this is the only caller, once per KernelLogCounts.
    let _ = counts.before_start.set(BeforeStart {
        events,
        complete: outcome.incomplete.is_none(),
    });
}

/// Reads `log` (non-blocking, from its oldest record) up to the first record `mark`
/// (non-blocking, put after the last record at start) reads, handing the text of each record
/// before it to `count`.
fn read_records(
    log: &mut impl Read,
    mark: &mut impl Read,
    limits: &Limits,
    mut count: impl FnMut(&str),
) -> Outcome {
    let mut record = vec![0u8; KMSG_RECORD_MAX];
    let mut marked = vec![0u8; KMSG_RECORD_MAX];
    let deadline = Instant::now() + limits.time;
    let mut first_after_start = None;
    let mut records = 0;
    let mut first = true;
    let mut incomplete = None;
    let stopped = loop {
        if records == limits.records {
            break Some(format!("stopped after {records} records"));
        }
        if Instant::now() >= deadline {
            break Some(format!("stopped after {:?}", limits.time));
        }
        let len = match read_kmsg_record(log, &mut record) {
            KmsgRead::Record(len) => len,
            KmsgRead::Empty => break None,
            KmsgRead::Overwritten => {
                first = false;
                incomplete
                    .get_or_insert_with(|| "records were overwritten before they were read".into());
                continue;
            }
            KmsgRead::Failed(err) => break Some(err),
        };
        let Some(seq) = kmsg_record_seq(&record[..len]) else {
            break Some("a record without a sequence number".into());
        };
        if std::mem::take(&mut first) && seq != 0 {
            incomplete = Some(format!(
                "the oldest record left is number {seq}: the ones before were overwritten before start"
            ));
        }
        if first_after_start.is_none() {
            match read_kmsg_record(mark, &mut marked) {
                KmsgRead::Record(len) => match kmsg_record_seq(&marked[..len]) {
                    Some(after) => first_after_start = Some(after),
                    None => break Some("a record without a sequence number".into()),
                },
                KmsgRead::Empty => {}
                // Every record before the mark's is gone too: nothing before start is left.
                KmsgRead::Overwritten => {
                    break Some(
                        "the records from before start were overwritten while being read".into(),
                    )
                }
                KmsgRead::Failed(err) => break Some(err),
            }
        }
        if first_after_start.is_some_and(|after| seq >= after) {
            break None;
        }
        records += 1;
        if let Some(text) = kmsg_kernel_record_text(&record[..len]) {
            count(&text);
        }
    };
    Outcome {
        records,
        incomplete: stopped.or(incomplete),
    }
}

#[cfg(test)]
mod tests;
