//! Dropping the start-only capabilities on every thread of a real process (this test binary,
//! a process of its own): threads blocked in a read or a sleep give them up too and carry on.
//! Needs root (the capabilities to drop); CI runs it as root.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use hpcnode_exporter::privileges::{
    drop_after_start, CapSet, StillNeeded, CAP_BPF, CAP_SYSLOG, START_ONLY,
};

/// The permitted set of every thread of this process, from /proc/self/task/*/status.
fn permitted_per_thread() -> Vec<CapSet> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|task| {
            let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
            let line = status
                .lines()
                .find(|line| line.starts_with("CapPrm:"))
                .unwrap();
            CapSet::parse_hex(&line["CapPrm:".len()..]).unwrap()
        })
        .collect()
}

#[test]
fn every_thread_gives_up_the_start_only_capabilities_and_keeps_working() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        assert!(std::env::var_os("CI").is_none(), "must run as root in CI");
        eprintln!("SKIPPED: needs root");
        return;
    }
    let (mut writer, mut reader) = UnixStream::pair().unwrap();
    let blocked_in_read = std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        reader.read_exact(&mut byte).map(|()| byte[0])
    });
    let sleeping = std::thread::spawn(|| std::thread::sleep(Duration::from_secs(1)));
    assert!(permitted_per_thread()
        .iter()
        .all(|permitted| permitted.contains(CAP_BPF) && permitted.contains(CAP_SYSLOG)));

    let still_needed = StillNeeded::for_kernel(true, Some((6, 12)), Some("2"), false);
    let dropped = drop_after_start(still_needed).unwrap();

    let cap_sys_admin = 21;
    for permitted in permitted_per_thread() {
        assert!(permitted.intersection(START_ONLY).is_empty(), "{permitted}");
        assert!(permitted.contains(cap_sys_admin), "{permitted}");
    }
    assert_eq!(dropped.dropped, START_ONLY);
    assert!(dropped.threads >= 3, "{dropped:?}");
    assert!(dropped.kept.contains(cap_sys_admin), "{dropped:?}");
    // The signal interrupted neither the read nor the sleep for good.
    writer.write_all(&[7]).unwrap();
    assert_eq!(blocked_in_read.join().unwrap().unwrap(), 7);
    sleeping.join().unwrap();
    // Nothing left to drop: a second call changes nothing.
    let again = drop_after_start(still_needed).unwrap();
    assert_eq!(again.dropped, CapSet::EMPTY);
}
