use super::*;
use crate::collectors::pci::{collector_at, LabelCache, PciCollector};
use crate::metrics::{encode, Format};
use crate::sysfs::{AttributeReader, HeldAttributes};
use crate::vfio_holder_events::{CandidateSet, HolderEvents};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A collector of a copy of the fixture tree `pci_host`, with `refcnt` as the `vfio`
/// module's count, whose scan reads at most `max_descriptors`.
fn pci_host(refcnt: &str, max_descriptors: usize) -> (tempfile::TempDir, PciCollector) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pci_host");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/pci_host");
    let copied = std::process::Command::new("cp")
        .args(["-a", fixture])
        .arg(&root)
        .status();
    assert!(copied.unwrap().success());
    std::fs::write(root.join("sys/module/vfio/refcnt"), refcnt).unwrap();
    let mut collector = collector_at(&root);
    collector.sysfs = root.join("sys");
    collector.max_descriptors = max_descriptors;
    (tmp, collector)
}

/// One holder read by `collector`, as text.
fn holders_read(collector: &PciCollector) -> String {
    let mut out = Output::default();
    let (mut held, mut reader) = (HeldAttributes::default(), AttributeReader::default());
    let mut labels = LabelCache::default();
    let mut read = Read {
        collector,
        unit: UnitRead::new(&mut held, &mut reader, &mut out),
        labels: &mut labels,
    };
    read.vfio_holders(&["0000:07:00.0".to_string()]);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    encode(out.samples, Format::PrometheusText).unwrap()
}

fn holders_of_pci_host(refcnt: &str, max_descriptors: usize) -> String {
    holders_read(&pci_host(refcnt, max_descriptors).1)
}

/// The fixture's QEMUs name groups 13 and 77, which a scan counts as unproven (the tree
/// is no procfs): how many it counted tells whether it scanned again.
fn unproven(text: &str) -> &str {
    let line = text
        .lines()
        .find(|l| l.starts_with("hpcnode_pci_vfio_unproven_holds{"));
    line.and_then(|line| line.rsplit(' ').next())
        .unwrap_or("none")
}

#[test]
fn a_scan_is_kept_while_vfios_count_and_the_watched_descriptors_stay() {
    let (tmp, collector) = pci_host("5\n", MAX_DESCRIPTORS);
    let root = tmp.path().join("pci_host");
    assert_eq!(unproven(&holders_read(&collector)), "2");
    // A new process names group 14: no reference was taken (the count is the same), so
    // the kept scan stands and the look-alike is not even read.
    let fd = root.join("proc/6000/fd");
    std::fs::create_dir_all(&fd).unwrap();
    std::os::unix::fs::symlink("/dev/vfio/14", fd.join("3")).unwrap();
    assert_eq!(unproven(&holders_read(&collector)), "2");
    // The count moved: scanned again, the new one found.
    std::fs::write(root.join("sys/module/vfio/refcnt"), "6\n").unwrap();
    assert_eq!(unproven(&holders_read(&collector)), "3");
    // A watched descriptor closed (QEMU 4211's group 13), the count as it was: scanned again.
    std::fs::remove_file(root.join("proc/4211/fd/28")).unwrap();
    assert_eq!(unproven(&holders_read(&collector)), "2");
}

#[test]
fn no_process_is_scanned_while_no_vfio_file_is_open() {
    let idle = holders_of_pci_host("0\n", MAX_DESCRIPTORS);
    assert!(
        idle.contains("\nhpcnode_pci_vfio_holder_scan_complete 1\n"),
        "{idle}"
    );
    assert!(
        idle.contains("\nhpcnode_pci_vfio_device_holders{device=\"0000:07:00.0\"} 0\n"),
        "{idle}"
    );
    // The fixture's QEMUs name vfio nodes: only a scan would count them (as unproven,
    // its /proc being no procfs).
    assert!(!idle.contains("hpcnode_pci_vfio_unproven_holds"), "{idle}");
    let held = holders_of_pci_host("5\n", MAX_DESCRIPTORS);
    assert!(
        held.contains("hpcnode_pci_vfio_unproven_holds{reason=\"not_procfs\"} 2"),
        "{held}"
    );
    assert!(
        held.contains("\nhpcnode_pci_vfio_holder_scan_complete 1\n"),
        "{held}"
    );
}

#[test]
fn the_scan_stops_at_its_budget_and_says_so() {
    // systemd's 4 descriptors, then the budget is spent: the QEMUs are not read.
    let cut = holders_of_pci_host("5\n", 4);
    assert!(
        cut.contains("\nhpcnode_pci_vfio_holder_scan_complete 0\n"),
        "{cut}"
    );
    assert!(!cut.contains("hpcnode_pci_vfio_unproven_holds"), "{cut}");
    // Exactly enough for every process: complete.
    let whole = holders_of_pci_host("5\n", 4 + 6 + 3);
    assert!(
        whole.contains("\nhpcnode_pci_vfio_holder_scan_complete 1\n"),
        "{whole}"
    );
}

fn cmdline(args: &[&str]) -> Vec<u8> {
    args.iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect()
}

/// As libvirt 9 starts a Nova instance (from `ps -o args` of a real compute node).
#[test]
fn libvirt_guest_name_and_uuid() {
    let line = cmdline(&[
        "/usr/bin/qemu-system-x86_64",
        "-name",
        "guest=instance-0000002a,debug-threads=on",
        "-S",
        "-uuid",
        "8f0c6a3e-5b0e-4f6b-9d2a-1c3e5f7a9b0d",
        "-device",
        "{\"driver\":\"vfio-pci\",\"host\":\"0000:3b:00.0\"}",
    ]);
    assert!(is_qemu("qemu-system-x86", &line));
    assert_eq!(
        qemu_identity(&line),
        (
            "instance-0000002a".to_string(),
            "8f0c6a3e-5b0e-4f6b-9d2a-1c3e5f7a9b0d".to_string()
        )
    );
}

#[test]
fn qemu_option_strings_as_qemu_reads_them() {
    assert_eq!(qemu_option("vm1", "guest").as_deref(), Some("vm1"));
    assert_eq!(
        qemu_option("vm1,process=x", "guest").as_deref(),
        Some("vm1")
    );
    assert_eq!(
        qemu_option("a,,b,debug-threads=on", "guest").as_deref(),
        Some("a,b")
    );
    assert_eq!(
        qemu_option("debug-threads=on,guest=g", "guest").as_deref(),
        Some("g")
    );
    assert_eq!(qemu_option("debug-threads=on", "guest"), None);
    let double_dash = cmdline(&["qemu-kvm", "--name", "vm2", "--uuid", "u"]);
    assert_eq!(qemu_identity(&double_dash), ("vm2".into(), "u".into()));
    assert_eq!(
        qemu_identity(&cmdline(&["qemu-kvm", "-name"])),
        Default::default()
    );
}

#[test]
fn only_device_nodes_count() {
    for (target, node) in [
        ("/dev/vfio/12", true),
        ("/dev/vfio/noiommu-0", true),
        ("/dev/vfio/devices/vfio3", true),
        ("/dev/vfio/vfio", false),
        ("/dev/iommu", false),
        ("/dev/vfio/", false),
        ("/dev/vfio/devices/vfio", false),
        ("/dev/vfio/12 (deleted)", true),
        ("/dev/vfio/vfio (deleted)", false),
        ("socket:[1234]", false),
    ] {
        assert_eq!(
            vfio_device_node(Path::new(target)).is_some(),
            node,
            "{target}"
        );
    }
}

/// Which descriptors named like vfio nodes hold what, by the device behind them: group
/// 13's node is 243:2 and the device's cdev 236:0, as sysfs gives them.
#[test]
fn a_hold_is_the_device_behind_the_name() {
    let devices = HashMap::from([((243, 2), "0000:07:00.0"), ((236, 0), "0000:07:00.0")]);
    let hold = |node, device| classify(node, device, &devices, &[236, 243]);
    assert_eq!(hold("/dev/vfio/13", (243, 2)), Hold::Device("0000:07:00.0"));
    let cdev = hold("/dev/vfio/devices/vfio0", (236, 0));
    assert_eq!(cdev, Hold::Device("0000:07:00.0"));
    // A group whose device left vfio-pci, its node still there or removed with the group.
    assert_eq!(hold("/dev/vfio/77", (243, 5)), Hold::Stale);
    assert_eq!(hold("/dev/vfio/13 (deleted)", (243, 2)), Hold::Stale);
    // A node of another device, under a group's name or a stale one's.
    for node in ["/dev/vfio/13", "/dev/vfio/77"] {
        assert_eq!(hold(node, (1, 3)), Hold::Unproven(Unproven::NotTheDevice));
    }
    // Without vfio's majors (an unreadable /proc/devices), nothing is stale.
    let unknown = classify("/dev/vfio/77", (243, 5), &devices, &[]);
    assert_eq!(unknown, Hold::Unproven(Unproven::NotTheDevice));
}

/// `/proc/devices` as the kernel writes it (`%3d %s`), with vfio's group and cdev regions:
/// those majors, not the container's misc major, nor anything among the block devices.
#[test]
fn vfio_majors_are_its_character_devices() {
    let devices = "Character devices:\n  1 mem\n  5 /dev/tty\n 10 misc\n236 vfio-dev\n\
                   243 vfio\n254 gpiochip\n\nBlock devices:\n  7 loop\n259 blkext\n";
    assert_eq!(vfio_majors(devices), [236, 243]);
    assert_eq!(vfio_majors("Block devices:\n243 vfio\n"), [] as [u32; 0]);
}

/// `fdinfo` as 6.18 writes it for `/dev/null` opened `O_PATH` and read-only.
#[test]
fn path_only_descriptors_from_their_flags() {
    let path = "pos:\t0\nflags:\t012000000\nmnt_id:\t24\nino:\t3\n";
    let read = "pos:\t0\nflags:\t02100000\nmnt_id:\t24\nino:\t3\n";
    assert_eq!(opened_path_only(path), Some(true));
    assert_eq!(opened_path_only(read), Some(false));
    assert_eq!(opened_path_only("pos:\t0\n"), None);
}

#[test]
fn other_programs_are_not_qemu() {
    let line = cmdline(&["/usr/bin/dpdk-testpmd", "-name", "x"]);
    assert!(!is_qemu("dpdk-testpmd", &line));
    assert!(is_qemu("qemu-kvm", b""));
}

/// The probe's kernel side as the tests play it: pids with the time of their last event, and
/// its drop count.
#[derive(Default)]
struct FakeSet {
    pids: Mutex<BTreeMap<u32, u64>>,
    dropped: AtomicU64,
}

impl FakeSet {
    fn pids(&self) -> Vec<u32> {
        lock(&self.pids).keys().copied().collect()
    }

    /// An event of process `pid` at `stamp` (ns of CLOCK_MONOTONIC), as the kernel side records it.
    fn record(&self, pid: u32, stamp: u64) {
        lock(&self.pids).insert(pid, stamp);
    }
}

impl CandidateSet for FakeSet {
    fn entries(&self) -> Result<Vec<(u32, u64)>, String> {
        Ok(lock(&self.pids)
            .iter()
            .map(|(&pid, &at)| (pid, at))
            .collect())
    }
    fn seed(&self, pid: u32) -> Result<(), String> {
        lock(&self.pids).entry(pid).or_insert(0);
        Ok(())
    }
    fn remove(&self, pid: u32) -> Result<(), String> {
        lock(&self.pids).remove(&pid);
        Ok(())
    }
    fn dropped(&self) -> Result<u64, String> {
        Ok(self.dropped.load(Ordering::Relaxed))
    }
}

/// `pci_host` with the probe attached and its set empty, as at an attach.
fn pci_host_with_probe(refcnt: &str) -> (tempfile::TempDir, PciCollector, Arc<FakeSet>) {
    let (tmp, mut collector) = pci_host(refcnt, MAX_DESCRIPTORS);
    let set = Arc::new(FakeSet::default());
    let events = Arc::new(HolderEvents::default());
    events.attached(set.clone());
    collector.vfio_holder_events = events;
    (tmp, collector, set)
}

fn from_events(text: &str) -> bool {
    text.contains("\nhpcnode_pci_vfio_holders_from_events 1\n")
}

#[test]
fn with_the_probe_only_the_processes_it_recorded_are_read() {
    let (tmp, collector, set) = pci_host_with_probe("5\n");
    let root = tmp.path().join("pci_host");
    // The attach's seeding scan reads every process, and records those with a vfio file open
    // (the QEMUs 4211 and 5120), as it found them.
    let seeded = holders_read(&collector);
    assert!(!from_events(&seeded), "{seeded}");
    assert_eq!(unproven(&seeded), "2");
    assert_eq!(set.pids(), [4211, 5120]);
    // A process the probe did not record (it opened nothing since) is not read...
    let fd = root.join("proc/6000/fd");
    std::fs::create_dir_all(&fd).unwrap();
    std::os::unix::fs::symlink("/dev/vfio/14", fd.join("3")).unwrap();
    let events = holders_read(&collector);
    assert!(from_events(&events), "{events}");
    assert_eq!(unproven(&events), "2");
    // ...until it does, whatever vfio's count says.
    set.record(6000, 1);
    assert_eq!(unproven(&holders_read(&collector)), "3");
    // A recorded process that exited is forgotten.
    std::fs::remove_dir_all(root.join("proc/4211")).unwrap();
    assert_eq!(unproven(&holders_read(&collector)), "2");
    assert_eq!(set.pids(), [5120, 6000]);
}

#[test]
fn no_process_is_read_to_seed_the_set_while_no_vfio_file_is_open() {
    let (_tmp, collector, set) = pci_host_with_probe("0\n");
    let seeded = holders_read(&collector);
    assert!(
        !seeded.contains("hpcnode_pci_vfio_unproven_holds"),
        "{seeded}"
    );
    assert!(set.pids().is_empty());
    // Seeded: the QEMUs are not read, as the probe recorded none of them opening a file.
    let events = holders_read(&collector);
    assert!(from_events(&events), "{events}");
    assert!(
        !events.contains("hpcnode_pci_vfio_unproven_holds"),
        "{events}"
    );
}

#[test]
fn a_set_the_kernel_had_no_room_in_is_not_used() {
    let (_tmp, collector, set) = pci_host_with_probe("5\n");
    set.dropped.store(1, Ordering::Relaxed);
    let scanned = holders_read(&collector);
    assert!(!from_events(&scanned), "{scanned}");
    assert_eq!(unproven(&scanned), "2");
    assert!(set.pids().is_empty(), "not seeded");
    assert!(!from_events(&holders_read(&collector)));
}

#[test]
fn a_new_attach_is_seeded_again() {
    let (tmp, collector, set) = pci_host_with_probe("5\n");
    let root = tmp.path().join("pci_host");
    holders_read(&collector);
    // The vfio module reloaded while the exporter ran: files opened before the new attach
    // (the look-alike of process 6000) are found by a new seeding scan.
    let fd = root.join("proc/6000/fd");
    std::fs::create_dir_all(&fd).unwrap();
    std::os::unix::fs::symlink("/dev/vfio/14", fd.join("3")).unwrap();
    collector.vfio_holder_events.detached();
    collector.vfio_holder_events.attached(set.clone());
    let reseeded = holders_read(&collector);
    assert!(!from_events(&reseeded), "{reseeded}");
    assert_eq!(unproven(&reseeded), "3");
    assert_eq!(set.pids(), [4211, 5120, 6000]);
}

#[test]
fn a_recorded_process_is_read_again_after_its_next_event_or_a_changed_vfio_descriptor() {
    let (tmp, collector, set) = pci_host_with_probe("5\n");
    let qemu = tmp.path().join("pci_host/proc/4211/fd");
    let name_group = |fd: &str, group: &str| {
        std::os::unix::fs::symlink(format!("/dev/vfio/{group}"), qemu.join(fd)).unwrap();
    };
    holders_read(&collector); // the seeding scan
    assert_eq!(unproven(&holders_read(&collector)), "2");
    // No event of QEMU 4211 and its vfio descriptors as they were: what it held stands, and
    // a descriptor it opened without the probe seeing is not read.
    name_group("40", "14");
    assert_eq!(unproven(&holders_read(&collector)), "2");
    // Its event: read again.
    set.record(4211, 1);
    assert_eq!(unproven(&holders_read(&collector)), "3");
    name_group("41", "15");
    assert_eq!(unproven(&holders_read(&collector)), "3");
    // An event under SETTLE ago may precede its descriptor: read again at each scrape until
    // it is older.
    set.record(4211, events::monotonic_ns());
    assert_eq!(unproven(&holders_read(&collector)), "4");
    name_group("42", "16");
    assert_eq!(unproven(&holders_read(&collector)), "5");
    // A vfio descriptor of it closed: read again.
    set.record(4211, 2);
    holders_read(&collector);
    name_group("43", "17");
    name_group("44", "18");
    assert_eq!(unproven(&holders_read(&collector)), "5");
    std::fs::remove_file(qemu.join("28")).unwrap();
    assert_eq!(unproven(&holders_read(&collector)), "6");
}

#[test]
fn a_node_past_the_budget_is_seeded_over_several_scrapes() {
    // A budget of 4 descriptors: systemd's 4, then QEMU 4211's 6, then 5120's 3.
    let (_tmp, mut collector) = pci_host("5\n", 4);
    let set = Arc::new(FakeSet::default());
    let events = Arc::new(HolderEvents::default());
    events.attached(set.clone());
    collector.vfio_holder_events = events;
    let incomplete = "\nhpcnode_pci_vfio_holder_scan_complete 0\n";
    let first = holders_read(&collector);
    assert!(first.contains(incomplete), "{first}");
    assert!(set.pids().is_empty());
    let second = holders_read(&collector);
    assert!(second.contains(incomplete), "{second}");
    assert_eq!(set.pids(), [4211]);
    let third = holders_read(&collector);
    assert!(
        !third.contains(incomplete) && !from_events(&third),
        "{third}"
    );
    assert_eq!(set.pids(), [4211, 5120]);
    // Seeded: the recorded processes only, within the budget.
    let events = holders_read(&collector);
    assert!(from_events(&events), "{events}");
    assert_eq!(unproven(&events), "2");
}
