use super::super::EventKey;
use super::*;
use std::cell::RefCell;
use std::collections::VecDeque;

/// `/dev/kmsg` of a Debian 6.12 guest booted with module.sig_enforce=1 after one refused
/// `insmod` of an unsigned module (two refused syscalls), captured in the kernel lab.
const CAPTURE: &str =
    include_str!("../../../../../../tests/fixtures/kmsg/debian-6.12-sig-enforce-refused.txt");

const REFUSAL: &str = "Loading of unsigned module is rejected";

/// The kernel's side of /dev/kmsg as `devkmsg_read` serves it: records by sequence number
/// in a ring that drops its oldest when full; a reader whose next record was dropped gets
/// EPIPE and moves to the oldest left; a non-blocking reader with nothing new gets EAGAIN.
struct Log {
    records: VecDeque<Vec<u8>>,
    first_seq: u64,
    capacity: usize,
}

impl Log {
    /// The capture's records (a record line, then its ` KEY=value` lines), keeping the
    /// newest `capacity`.
    fn captured(capacity: usize) -> RefCell<Log> {
        let mut records: Vec<Vec<u8>> = Vec::new();
        for line in CAPTURE.split_inclusive('\n') {
            match records.last_mut() {
                Some(record) if line.starts_with(' ') => record.extend_from_slice(line.as_bytes()),
                _ => records.push(line.as_bytes().to_vec()),
            }
        }
        let first_seq = kmsg_record_seq(&records[0]).unwrap();
        let mut log = Log {
            records: records.into(),
            first_seq,
            capacity,
        };
        log.drop_oldest();
        RefCell::new(log)
    }

    fn next_seq(&self) -> u64 {
        self.first_seq + self.records.len() as u64
    }

    /// Logs `text` as the kernel does (facility 0, level 4).
    fn print(&mut self, text: &str) {
        self.log(4, text);
    }

    /// Logs `text` as a process's write to /dev/kmsg does (facility LOG_USER, level 4).
    fn write(&mut self, text: &str) {
        self.log(8 + 4, text);
    }

    fn log(&mut self, priority: u8, text: &str) {
        let record = format!("{priority},{},9000000,-;{text}\n", self.next_seq());
        self.records.push_back(record.into_bytes());
        self.drop_oldest();
    }

    fn drop_oldest(&mut self) {
        while self.records.len() > self.capacity {
            self.records.pop_front();
            self.first_seq += 1;
        }
    }
}

/// One open /dev/kmsg; `printed` runs after each of its reads (the kernel logging more).
struct Kmsg<'l> {
    log: &'l RefCell<Log>,
    seq: u64,
    printed: Box<dyn FnMut(&mut Log) + 'l>,
}

impl<'l> Kmsg<'l> {
    fn oldest(log: &'l RefCell<Log>) -> Kmsg<'l> {
        let seq = log.borrow().first_seq;
        Kmsg {
            log,
            seq,
            printed: Box::new(|_| {}),
        }
    }

    fn end(log: &'l RefCell<Log>) -> Kmsg<'l> {
        let seq = log.borrow().next_seq();
        Kmsg {
            log,
            seq,
            printed: Box::new(|_| {}),
        }
    }
}

impl Read for Kmsg<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let result = {
            let log = self.log.borrow();
            if self.seq < log.first_seq {
                self.seq = log.first_seq;
                Err(std::io::Error::from_raw_os_error(libc::EPIPE))
            } else if self.seq >= log.next_seq() {
                Err(std::io::Error::from_raw_os_error(libc::EAGAIN))
            } else {
                let record = &log.records[(self.seq - log.first_seq) as usize];
                buf[..record.len()].copy_from_slice(record);
                self.seq += 1;
                Ok(record.len())
            }
        };
        (self.printed)(&mut self.log.borrow_mut());
        result
    }
}

fn captured_records() -> usize {
    Log::captured(usize::MAX).borrow().records.len()
}

/// Reads `log` up to `mark` into fresh counts.
fn read(log: &mut Kmsg, mark: &mut Kmsg, limits: &Limits) -> (Outcome, Vec<(EventKey, u64)>) {
    let counts = KernelLogCounts::new();
    let mut events = EventCounts::default();
    let outcome = read_records(log, mark, limits, |text| {
        counts.count_before_start(&mut events, text)
    });
    (outcome, events.snapshot())
}

fn refusals(events: &[(EventKey, u64)]) -> u64 {
    events
        .iter()
        .filter(|((event, _), _)| *event == "unsigned_module_rejected")
        .map(|(_, n)| n)
        .sum()
}

/// Records the kernel logs while the reader is still catching up come after the mark, and
/// are left to the counters of events since start.
#[test]
fn splits_at_the_mark() {
    let log = Log::captured(usize::MAX);
    let mut mark = Kmsg::end(&log);
    let mut reads = 0;
    let mut reader = Kmsg::oldest(&log);
    reader.printed = Box::new(move |log| {
        reads += 1;
        if reads == 5 {
            log.print(REFUSAL);
            log.print(REFUSAL);
        }
    });
    let (outcome, events) = read(&mut reader, &mut mark, &LIMITS);
    assert_eq!(
        outcome,
        Outcome {
            records: captured_records(),
            incomplete: None
        }
    );
    assert_eq!(refusals(&events), 2, "{events:?}");
}

/// A line a process wrote to /dev/kmsg before start is read, and not counted.
#[test]
fn written_lines_before_start_do_not_count() {
    let log = Log::captured(usize::MAX);
    log.borrow_mut().write(REFUSAL);
    log.borrow_mut().print(REFUSAL);
    let (outcome, events) = read(&mut Kmsg::oldest(&log), &mut Kmsg::end(&log), &LIMITS);
    assert_eq!(outcome.records, captured_records() + 2);
    // The capture's two and the kernel's one.
    assert_eq!(refusals(&events), 3, "{events:?}");
}

/// A process writing the log as fast as it is read does not keep the reader going.
#[test]
fn a_flood_while_reading_ends_at_the_mark() {
    let log = Log::captured(usize::MAX);
    let mut mark = Kmsg::end(&log);
    let mut reader = Kmsg::oldest(&log);
    reader.printed = Box::new(|log| log.print(REFUSAL));
    let (outcome, events) = read(&mut reader, &mut mark, &LIMITS);
    assert_eq!(outcome.records, captured_records());
    assert_eq!(outcome.incomplete, None);
    assert_eq!(refusals(&events), 2, "{events:?}");
}

/// With nothing logged after start, the reader stops where the log ends.
#[test]
fn a_quiet_log_is_read_to_its_end() {
    let log = Log::captured(usize::MAX);
    let (outcome, events) = read(&mut Kmsg::oldest(&log), &mut Kmsg::end(&log), &LIMITS);
    assert_eq!(outcome.records, captured_records());
    assert_eq!(outcome.incomplete, None);
    assert_eq!(refusals(&events), 2);
}

#[test]
fn a_log_that_wrapped_before_start_is_incomplete() {
    let kept = captured_records() - 100;
    let log = Log::captured(kept);
    let (outcome, _) = read(&mut Kmsg::oldest(&log), &mut Kmsg::end(&log), &LIMITS);
    assert_eq!(outcome.records, kept);
    assert_eq!(
        outcome.incomplete.as_deref(),
        Some("the oldest record left is number 100: the ones before were overwritten before start")
    );
}

/// Records overwritten before the reader got to them: what is left is still read.
#[test]
fn records_overwritten_while_reading_are_skipped() {
    let total = captured_records();
    let log = Log::captured(total);
    let mut mark = Kmsg::end(&log);
    let mut reader = Kmsg::oldest(&log);
    let mut reads = 0;
    // After the first read, 100 records are printed into room for 50 more: the mark's
    // record stays, the 50 oldest go, and the reader gets EPIPE where it was (record 1).
    reader.printed = Box::new(move |log| {
        reads += 1;
        if reads == 1 {
            log.capacity += 50;
            for _ in 0..100 {
                log.print("hpcnode_test: flood");
            }
        }
    });
    let (outcome, _) = read(&mut reader, &mut mark, &LIMITS);
    // Record 0, then 50 to the last before start.
    assert_eq!(outcome.records, 1 + total - 50);
    assert_eq!(
        outcome.incomplete.as_deref(),
        Some("records were overwritten before they were read")
    );
}

/// When even the first record after start is overwritten, so is everything before it.
#[test]
fn a_log_overwritten_past_the_mark_stops_the_read() {
    let log = Log::captured(usize::MAX);
    let mut mark = Kmsg::end(&log);
    let mut reader = Kmsg::oldest(&log);
    let mut reads = 0;
    reader.printed = Box::new(move |log| {
        reads += 1;
        if reads == 3 {
            log.capacity = 10;
            for _ in 0..11 {
                log.print("hpcnode_test: flood");
            }
        }
    });
    let (outcome, _) = read(&mut reader, &mut mark, &LIMITS);
    assert_eq!(outcome.records, 2);
    assert_eq!(
        outcome.incomplete.as_deref(),
        Some("the records from before start were overwritten while being read")
    );
}

#[test]
fn the_read_is_bounded() {
    let log = Log::captured(usize::MAX);
    let limits = Limits {
        records: 10,
        ..LIMITS
    };
    let (outcome, _) = read(&mut Kmsg::oldest(&log), &mut Kmsg::end(&log), &limits);
    assert_eq!(outcome.records, 10);
    assert_eq!(
        outcome.incomplete.as_deref(),
        Some("stopped after 10 records")
    );
    let limits = Limits {
        time: Duration::ZERO,
        ..LIMITS
    };
    let (outcome, _) = read(&mut Kmsg::oldest(&log), &mut Kmsg::end(&log), &limits);
    assert_eq!(outcome.records, 0);
    assert_eq!(outcome.incomplete.as_deref(), Some("stopped after 0ns"));
}

/// On this machine's /dev/kmsg: the log is read to the mark, and the lines a process wrote
/// there, before the mark or after it, do not count. (The split at the mark itself needs
/// kernel lines, which a test cannot make: the fake log above proves it.)
#[test]
fn the_real_kmsg_is_read_without_written_lines() {
    if !crate::collectors::ebpf::tests::running_as_root(
        "the_real_kmsg_is_read_without_written_lines",
    ) {
        return;
    }
    let line = |when: &str| {
        format!(
            "hpcnode_{when}{}: module verification failed: signature and/or required key missing - tainting kernel",
            std::process::id()
        )
    };
    crate::collectors::ebpf::tests::write_kmsg(&line("before"));
    let counts = KernelLogCounts::new();
    read_before_start(counts.clone());
    crate::collectors::ebpf::tests::write_kmsg(&line("after"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let before_start = loop {
        if let Some(before_start) = counts.before_start() {
            break before_start;
        }
        assert!(Instant::now() < deadline, "the log was not read in 20 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    let ours = |(event, labels): &EventKey| {
        *event == "module_verification_failed" && labels[0].1.starts_with("hpcnode_")
    };
    assert!(
        !before_start.events.iter().any(|(key, _)| ours(key)),
        "{:?}",
        before_start.events
    );
}
