use super::*;

#[test]
fn counts_and_caps_label_sets() {
    let counts = KernelLogCounts::new();
    for _ in 0..3 {
        counts.count_line("Loading of unsigned module is rejected\n");
    }
    for i in 0..MAX_LABEL_SETS_PER_EVENT + 5 {
        counts.count_line(&format!(
                "m{i}: module verification failed: signature and/or required key missing - tainting kernel"
            ));
    }
    let snapshot = counts.snapshot();
    let rejected = snapshot
        .iter()
        .find(|((e, _), _)| *e == "unsigned_module_rejected");
    assert_eq!(rejected.map(|(_, n)| *n), Some(3));
    let failed: Vec<_> = snapshot
        .iter()
        .filter(|((e, _), _)| *e == "module_verification_failed")
        .collect();
    assert_eq!(failed.len(), MAX_LABEL_SETS_PER_EVENT + 1);
    let other = failed
        .iter()
        .find(|((_, labels), _)| labels[0].1 == "other")
        .unwrap();
    assert_eq!(other.1, 5);
}

#[test]
fn kmsg_records() {
    let record = b"5,1402,123456789,-;Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7\n SUBSYSTEM=x\n";
    assert_eq!(
        kmsg_record_text(record).as_deref(),
        Some(
            "Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7"
        )
    );
    assert_eq!(kmsg_record_text(b"no separator"), None);
    assert_eq!(kmsg_record_seq(record), Some(1402));
    assert_eq!(kmsg_record_seq(b"6,1,2,-;a,3"), Some(1));
    for malformed in [&b"6;1,2"[..], b"6,x,2,-;text", b"no separator", b"6,,2,-;"] {
        assert_eq!(kmsg_record_seq(malformed), None);
    }
    // Escaped bytes are decoded; a lone or malformed escape stays as written.
    assert_eq!(
        kmsg_record_text(b"6,1,2,-;a\\x5cb\\x09c \\xzz \\x4\n").as_deref(),
        Some("a\\b\tc \\xzz \\x4")
    );
}

/// Kernels before 4.7 print an Intel fault as one printk of two lines, which /dev/kmsg
/// (the only kernel log source there) gives as one record with an escaped newline.
#[test]
fn two_line_dmar_record_from_kmsg_counts() {
    let record = b"3,2210,4512345678,-;DMAR:[DMA Read] Request device [3b:00.0] fault addr 1ff000 \\x0aDMAR:[fault reason 06] PTE Read access is not set\n";
    let counts = KernelLogCounts::new();
    counts.count_line(&kmsg_record_text(record).unwrap());
    let faults = counts.iommu_faults();
    assert_eq!(faults.len(), 1, "{faults:?}");
    let (fault, count) = &faults[0];
    assert_eq!(
        (fault.device.as_str(), fault.access, fault.reason.as_str()),
        ("3b:00.0", "read", "PTE Read access is not set")
    );
    assert_eq!(*count, 1);
}

/// The /dev/kmsg fallback on the real device: only lines written after it opened count, and
/// since a process wrote them, as a process's lines, never as events.
#[test]
fn kmsg_fallback_counts_new_lines_as_a_process_s() {
    if !crate::collectors::ebpf::tests::running_as_root(
        "kmsg_fallback_counts_new_lines_as_a_process_s",
    ) {
        return;
    }
    // No other test of this binary writes a lockdown line.
    let line =
        "Lockdown: hpcnode_test: unsigned module loading is restricted; see man kernel_lockdown.7";
    let write = || crate::collectors::ebpf::tests::write_kmsg(line);
    write(); // before the reader opens: not counted
    let counts = KernelLogCounts::new();
    let kmsg = open_kmsg().unwrap();
    std::thread::spawn({
        let counts = counts.clone();
        move || follow_kmsg(kmsg, counts)
    });
    for _ in 0..5 {
        write();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let counted = counts.process_lines();
        if counted.contains(&(("lockdown_refused_module", vec![]), 5)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{counted:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let events = counts.snapshot();
    assert!(
        !events
            .iter()
            .any(|((event, _), _)| *event == "lockdown_refused_module"),
        "{events:?}"
    );
}

/// Only records of facility 0 (LOG_KERN) are the kernel's: `pri = facility << 3 | level`.
#[test]
fn kmsg_records_of_other_facilities_are_not_the_kernels() {
    let line = "Loading of unsigned module is rejected";
    for level in 0..8 {
        let record = format!("{level},7,9000,-;{line}\n");
        assert_eq!(
            kmsg_kernel_record_text(record.as_bytes()).as_deref(),
            Some(line)
        );
    }
    // LOG_USER (devkmsg_write's default), a facility a writer asked for, LOG_LOCAL7.
    for priority in [12, 14, 8 + 7, 30, 191] {
        let record = format!("{priority},7,9000,-;{line}\n");
        assert_eq!(
            kmsg_kernel_record_text(record.as_bytes()),
            None,
            "{priority}"
        );
    }
    for malformed in [&b"x,7,9000,-;text"[..], b";text", b"-1,7,9000,-;text"] {
        assert_eq!(kmsg_kernel_record_text(malformed), None);
    }
}

#[test]
fn ring_records() {
    let mut record = 11u32.to_ne_bytes().to_vec();
    record.extend_from_slice(b"hello world\0\0\0");
    assert_eq!(ring_record_text(&record).as_deref(), Some("hello world"));
    assert_eq!(ring_record_text(&[1, 0]), None);
    let mut short = 300u32.to_ne_bytes().to_vec();
    short.extend_from_slice(b"abc");
    assert_eq!(ring_record_text(&short), None);
}
