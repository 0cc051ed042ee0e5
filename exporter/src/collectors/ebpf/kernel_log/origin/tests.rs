use std::collections::VecDeque;
use std::io::{Error, ErrorKind, Read};

use super::*;
use crate::collectors::ebpf::kernel_log::KernelLogCounts;

/// `/dev/kmsg` as a non-blocking reader sees it: one record per read, EPIPE where records were
/// overwritten, EAGAIN once none is left.
struct Kmsg(VecDeque<Result<&'static [u8], i32>>);

impl Kmsg {
    fn new(records: &[Result<&'static [u8], i32>]) -> Kmsg {
        Kmsg(records.iter().copied().collect())
    }
}

impl Read for Kmsg {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.pop_front() {
            Some(Ok(record)) => {
                buf[..record.len()].copy_from_slice(record);
                Ok(record.len())
            }
            Some(Err(errno)) => Err(Error::from_raw_os_error(errno)),
            None => Err(Error::from(ErrorKind::WouldBlock)),
        }
    }
}

impl KmsgReader for Kmsg {
    /// A record comes only if one is queued: an `EAGAIN` before it stands for a record the
    /// writer has reserved but not yet committed.
    fn wait_for_record(&mut self, _: std::time::Duration) -> bool {
        !self.0.is_empty()
    }
}

const REFUSED: &str = "Loading of unsigned module is rejected";
/// As the kernel logs the refusal (module_sig_check: pr_notice, LOG_KERN) and as devkmsg_write
/// logs `echo '<3>Loading of unsigned module is rejected' > /dev/kmsg` (facility LOG_USER,
/// level 3: priority 11).
const KERNEL_REFUSAL: &[u8] = b"5,1402,123456789,-;Loading of unsigned module is rejected\n";
const WRITTEN_REFUSAL: &[u8] = b"11,1403,123456790,-;Loading of unsigned module is rejected\n";
const OTHER: &[u8] = b"6,1401,123456788,-;e1000e: eth0 NIC Link is Up\n SUBSYSTEM=net\n";

#[test]
fn a_record_s_priority_says_whose_it_is() {
    assert_eq!(kmsg_record_origin(KERNEL_REFUSAL), Some(Origin::Kernel));
    assert_eq!(kmsg_record_origin(WRITTEN_REFUSAL), Some(Origin::Process));
    // LOG_DAEMON (3), as systemd writes its own lines to /dev/kmsg at boot.
    assert_eq!(
        kmsg_record_origin(b"30,7,1,-;systemd[1]: x\n"),
        Some(Origin::Process)
    );
    for malformed in [&b"x,1,2,-;text"[..], b"", b";text", b"-8,1,2,-;text"] {
        assert_eq!(kmsg_record_origin(malformed), None);
    }
}

#[test]
fn a_forwarded_line_is_found_past_the_records_before_it() {
    let mut origins = Origins::new(Kmsg::new(&[
        Ok(OTHER),
        Ok(WRITTEN_REFUSAL),
        Ok(OTHER),
        Ok(KERNEL_REFUSAL),
    ]));
    assert_eq!(origins.of(REFUSED), Origin::Process);
    // The same text again: the next record that holds it, the kernel's.
    assert_eq!(origins.of(REFUSED), Origin::Kernel);
    // None left: unknown, and the reader is kept for the next line.
    assert_eq!(origins.of(REFUSED), Origin::Unknown);
    assert!(origins.kmsg.is_some());
}

#[test]
fn a_line_seen_before_its_record_is_committed_waits_for_it() {
    let mut origins = Origins::new(Kmsg::new(&[
        Err(libc::EAGAIN),
        Ok(OTHER),
        Err(libc::EAGAIN),
        Ok(WRITTEN_REFUSAL),
    ]));
    assert_eq!(origins.of(REFUSED), Origin::Process);
}

#[test]
fn a_truncated_line_or_fragment_is_found_in_its_record() {
    // The program forwards at most 255 bytes; a pr_cont fragment is forwarded alone.
    let mut origins = Origins::new(Kmsg::new(&[Ok(KERNEL_REFUSAL)]));
    assert_eq!(origins.of("unsigned module"), Origin::Kernel);
}

#[test]
fn overwritten_records_are_passed_and_a_failed_read_leaves_the_rest_unknown() {
    let mut origins = Origins::new(Kmsg::new(&[
        Err(libc::EPIPE),
        Ok(KERNEL_REFUSAL),
        Err(libc::EIO),
        Ok(WRITTEN_REFUSAL),
    ]));
    assert_eq!(origins.of(REFUSED), Origin::Kernel);
    assert_eq!(origins.of(REFUSED), Origin::Unknown);
    assert!(origins.kmsg.is_none());
    assert_eq!(origins.of(REFUSED), Origin::Unknown);
    assert_eq!(Origins::unreadable().of(REFUSED), Origin::Unknown);
}

#[test]
fn a_line_a_process_wrote_is_counted_apart_and_never_as_an_event() {
    let counts = KernelLogCounts::new();
    let mut origins = Origins::new(Kmsg::new(&[
        Ok(WRITTEN_REFUSAL),
        Ok(KERNEL_REFUSAL),
        Ok(b"12,1404,1,-;DMAR: [DMA Read NO_PASID] Request device [3b:00.0] fault addr 0x1ff000 [fault reason 0x06] PTE Read access is not set\n"),
    ]));
    counts.count_forwarded(REFUSED, &mut origins);
    counts.count_forwarded(REFUSED, &mut origins);
    // A line that matches nothing is not looked up: the DMAR record stays for its own line.
    counts.count_forwarded("e1000e: eth0 NIC Link is Up", &mut origins);
    counts.count_forwarded(
        "DMAR: [DMA Read NO_PASID] Request device [3b:00.0] fault addr 0x1ff000 [fault reason 0x06] PTE Read access is not set",
        &mut origins,
    );
    let events = counts.snapshot();
    assert_eq!(events, vec![(("unsigned_module_rejected", vec![]), 1)]);
    assert_eq!(
        counts.process_lines(),
        vec![
            (("iommu_fault", vec![]), 1),
            (("unsigned_module_rejected", vec![]), 1)
        ]
    );
    assert!(counts.iommu_faults().is_empty());
}

#[test]
fn a_line_of_unknown_origin_counts_as_the_kernel_s() {
    let counts = KernelLogCounts::new();
    counts.count_forwarded(REFUSED, &mut Origins::unreadable());
    assert_eq!(
        counts.snapshot(),
        vec![(("unsigned_module_rejected", vec![]), 1)]
    );
    assert!(counts.process_lines().is_empty());
}
