use super::device_read::PMA_COUNTERS;
use super::*;
use crate::sysfs::tests::settle;

fn settings(args: &[&str]) -> Result<RdmaSettings, ConfigError> {
    RdmaSettings::from_flags(&Flags::parse((REGISTRATION.flags)(), args)?)
}

#[test]
fn device_filters_are_anchored_and_exclusive() {
    let include = settings(&["--collector.rdma.device-include", "mlx5_.*"]).unwrap();
    assert!(include.devices.allows("mlx5_0"));
    assert!(!include.devices.allows("xmlx5_0"));
    let exclude = settings(&["--collector.rdma.device-exclude=rxe0"]).unwrap();
    assert!(!exclude.devices.allows("rxe0"));
    assert!(exclude.devices.allows("rxe01"));
    assert!(matches!(
        settings(&[
            "--collector.rdma.device-include=a",
            "--collector.rdma.device-exclude=b"
        ]),
        Err(ConfigError::Flags(_))
    ));
    let err = settings(&["--collector.rdma.device-include=("]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid --collector.rdma.device-include \"(\""),
        "{err}"
    );
}

/// A file where a directory belongs (`device` for `device/driver`, `hw_counters`, a
/// port's `counters`) is absent, as a missing one is: the framework's one not-found rule.
#[test]
fn a_file_where_a_directory_belongs_is_absent() {
    let tmp = tempfile::tempdir().unwrap();
    let class_dir = tmp.path().join(CLASS_DIR);
    let device = class_dir.join("mlx5_0");
    let port = device.join("ports/1");
    std::fs::create_dir_all(&port).unwrap();
    std::os::unix::fs::symlink("../0000:05:00.0", device.join("device")).unwrap();
    for (file, content) in [
        (class_dir.join("0000:05:00.0"), ""),
        (device.join("hw_counters"), ""),
        (port.join("counters"), ""),
        (port.join("state"), "4: ACTIVE"),
        (port.join("phys_state"), "5: LinkUp"),
        (port.join("rate"), "100 Gb/sec (4X EDR)"),
    ] {
        std::fs::write(file, content).unwrap();
    }
    let collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    let mut out = Output::default();
    collector.collect_unit(&Entry::Name("mlx5_0".to_string()), &mut out);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let names: Vec<_> = out.samples.families().iter().map(|f| f.desc.name).collect();
    assert!(names.contains(&PORT_STATE.name), "{names:?}");
}

/// One read of `device`: `desc`'s samples, each as its labels' text and its value.
fn read_family(collector: &RdmaCollector, device: &str, desc: &Desc) -> Vec<(String, Value)> {
    let mut out = Output::default();
    collector.collect_unit(&Entry::Name(device.to_string()), &mut out);
    let families = out.samples.families();
    let family = families.iter().find(|f| f.desc.name == desc.name);
    let samples = family.into_iter().flat_map(|family| family.samples());
    samples
        .map(|(labels, value)| (labels.to_string(), value))
        .collect()
}

/// Scrape after scrape, what a port whose `counters/` and `counters_ext/` both count
/// received packets exports, given the two files' values at each scrape.
fn exported_over_scrapes(values: &[(u64, u64)]) -> Vec<Value> {
    let tmp = tempfile::tempdir().unwrap();
    let port = tmp.path().join(CLASS_DIR).join("mlx4_0/ports/1");
    for dir in ["counters", "counters_ext"] {
        std::fs::create_dir_all(port.join(dir)).unwrap();
    }
    let collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    let mut exported = Vec::new();
    for (basic, extended) in values {
        std::fs::write(port.join("counters/port_rcv_packets"), format!("{basic}\n")).unwrap();
        let ext = port.join("counters_ext/port_rcv_packets_64");
        std::fs::write(ext, format!("{extended}\n")).unwrap();
        let received = read_family(&collector, "mlx4_0", &PORT_PACKETS_RECEIVED);
        exported.push(received[0].1);
    }
    exported
}

/// Read after read, a port's `hpcnode_rdma_port_downs_total`, given its `state` and its
/// `link_downed` counter (in `counters_dir`: `counters` for a PMA, `hw_counters` for Soft-RoCE;
/// `None`: no such file) at each read.
fn downs_over_reads(counters_dir: &str, reads: &[(&str, Option<u64>)]) -> Vec<Value> {
    let tmp = tempfile::tempdir().unwrap();
    let port = tmp.path().join(CLASS_DIR).join("dev0/ports/1");
    std::fs::create_dir_all(port.join(counters_dir)).unwrap();
    let collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    let link_downed = port.join(counters_dir).join("link_downed");
    let mut exported = Vec::new();
    for (state, counted) in reads {
        std::fs::write(port.join("state"), state).unwrap();
        match counted {
            Some(value) => std::fs::write(&link_downed, format!("{value}\n")).unwrap(),
            None => drop(std::fs::remove_file(&link_downed)),
        }
        let downs = read_family(&collector, "dev0", &PORT_DOWNS);
        exported.push(downs[0].1);
    }
    exported
}

#[test]
fn a_ports_downs_are_the_larger_of_link_downed_and_the_states_read() {
    let (active, down) = ("4: ACTIVE", "1: DOWN");
    let reads = [
        (active, Some(7)),   // the first read: nothing to compare with
        (active, Some(9)),   // down and up twice between two reads
        (down, Some(10)),    // down: counted once, by both
        (active, Some(10)),  // back up: no down
        (down, Some(255)),   // down 245 times, the counter saturated at 255 (8 bits)
        (active, Some(255)), // up; saturated, the counter no longer counts
        (down, Some(255)),   // so only the state says this down
        (active, Some(0)),   // reset by perfquery -R: no negative count
        (down, Some(1)),
    ];
    let expected = [0, 2, 3, 3, 248, 248, 249, 249, 250];
    for dir in ["counters", "hw_counters"] {
        assert_eq!(
            downs_over_reads(dir, &reads),
            expected.map(Value::Int),
            "{dir}"
        );
    }
    // No link_downed at all: the states alone, a lower bound.
    let states = [
        (active, None),
        (down, None),
        (down, None),
        (active, None),
        (down, None),
    ];
    assert_eq!(
        downs_over_reads("counters", &states),
        [0, 1, 1, 1, 2].map(Value::Int)
    );
}

#[test]
fn a_doubled_counter_shows_the_traffic_and_never_goes_backwards() {
    // counters_ext/ reads 0, then starts counting late: the basic counter is kept.
    let late = [
        (6_825_908_347, 0),
        (6_825_908_400, 10),
        (6_825_908_500, 900),
    ];
    let expected = [6_825_908_347, 6_825_908_400, 6_825_908_500];
    assert_eq!(exported_over_scrapes(&late), expected.map(Value::Int));
    // A 32-bit counters/ stops at 2^32-1 while the 64-bit copy goes on.
    let saturated = [
        (4_294_967_000, 4_294_967_000),
        (4_294_967_295, 4_294_967_400),
        (4_294_967_295, 6_000_000_000),
    ];
    let expected = [4_294_967_000, 4_294_967_400, 6_000_000_000];
    assert_eq!(exported_over_scrapes(&saturated), expected.map(Value::Int));
}

#[test]
fn a_data_counter_past_2_62_words_keeps_counting_in_bytes() {
    // port_xmit_data counts 4-byte words in 64 bits: from 2^62 words on, the bytes exceed
    // a u64, and a wrapped product would fall to a few bytes (a false counter reset).
    let tmp = tempfile::tempdir().unwrap();
    let counters = tmp.path().join(CLASS_DIR).join("mlx5_0/ports/1/counters");
    std::fs::create_dir_all(&counters).unwrap();
    let collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    let mut exported = Vec::new();
    for words in [(1u64 << 62) - 1, (1 << 62) + 1, u64::MAX] {
        std::fs::write(counters.join("port_xmit_data"), format!("{words}\n")).unwrap();
        let transmitted = read_family(&collector, "mlx5_0", &PORT_DATA_TRANSMITTED);
        exported.push(transmitted[0].1);
    }
    assert_eq!(
        exported,
        [
            Value::Int(u64::MAX - 3),
            Value::Float(((1u64 << 62) + 1) as f64 * 4.0),
            Value::Float(u64::MAX as f64 * 4.0),
        ]
    );
}

/// A device that vanishes between scrapes and comes back with other counters (the driver
/// reloaded) is read afresh, not through what was held for the one before; a device no
/// longer listed closes its descriptors.
#[test]
fn a_device_that_vanishes_and_returns_is_read_afresh() {
    let tmp = tempfile::tempdir().unwrap();
    let device = tmp.path().join(CLASS_DIR).join("rxe0");
    let make_device = |packets: u64| {
        let hw = device.join("ports/1/hw_counters");
        std::fs::create_dir_all(&hw).unwrap();
        std::fs::write(hw.join("rcvd_pkts"), format!("{packets}\n")).unwrap();
        for (file, content) in [
            ("state", "4: ACTIVE"),
            ("phys_state", "5: LinkUp"),
            ("rate", "10 Gb/sec (1X QDR)"),
        ] {
            std::fs::write(device.join("ports/1").join(file), content).unwrap();
        }
    };
    let collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    let received = || {
        assert_eq!(collector.units().unwrap().len(), 1);
        let mut out = Output::default();
        collector.collect_unit(&Entry::Name("rxe0".to_string()), &mut out);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let families = out.samples.families();
        let hw = families.iter().find(|f| f.desc.name == PORT_HW_STAT.name);
        hw.map(|family| family.samples().next().unwrap().1)
    };
    make_device(10);
    assert_eq!(received(), Some(Value::Int(10)));
    std::fs::write(device.join("ports/1/hw_counters/rcvd_pkts"), "11\n").unwrap();
    assert_eq!(received(), Some(Value::Int(11)));
    std::fs::remove_dir_all(&device).unwrap();
    assert!(collector.units().unwrap().is_empty());
    assert!(collector.held.is_empty());
    make_device(5);
    assert_eq!(received(), Some(Value::Int(5)));
    // Gone and back between two scrapes, never seen missing.
    std::fs::remove_dir_all(&device).unwrap();
    make_device(7);
    assert_eq!(received(), Some(Value::Int(7)));
}

/// A RoCE port's network device: its default GID's (index 0), read again each scrape; the
/// GID table in order only while index 0 names none, and only then is an entry of it
/// whose name is not UTF-8 reported.
#[test]
fn a_roce_ports_netdev_is_its_default_gids_else_the_first_bound() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let port = tmp.path().join(CLASS_DIR).join("mlx5_0/ports/1");
    let ndevs = port.join("gid_attrs/ndevs");
    std::fs::create_dir_all(&ndevs).unwrap();
    for (file, content) in [
        ("link_layer", "Ethernet"),
        ("state", "4: ACTIVE"),
        ("phys_state", "5: LinkUp"),
        ("rate", "100 Gb/sec (4X EDR)"),
    ] {
        std::fs::write(port.join(file), content).unwrap();
    }
    for (index, netdev) in [("0", ""), ("1", ""), ("2", "bond0\n"), ("3", "ens1f1\n")] {
        std::fs::write(ndevs.join(index), netdev).unwrap();
    }
    std::fs::write(ndevs.join(std::ffi::OsStr::from_bytes(b"bad\xff")), "").unwrap();
    for dir in [&ndevs, &port.join("gid_attrs"), &port] {
        settle(dir);
    }
    let collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    let netdev = || {
        let mut out = Output::default();
        collector.collect_unit(&Entry::Name("mlx5_0".to_string()), &mut out);
        let families = out.samples.families();
        let info = families.iter().find(|f| f.desc.name == PORT_INFO.name);
        let (labels, _) = info.unwrap().samples().next().unwrap();
        let labels = labels.to_string();
        let netdev = labels.split("netdev=\"").nth(1).unwrap().split('"').next();
        (netdev.unwrap().to_string(), out.errors.len())
    };
    assert_eq!(netdev(), ("bond0".to_string(), 1));
    std::fs::write(ndevs.join("0"), "ens1f0\n").unwrap();
    assert_eq!(netdev(), ("ens1f0".to_string(), 0));
    std::fs::write(ndevs.join("0"), "").unwrap();
    assert_eq!(netdev(), ("bond0".to_string(), 1));
}

/// A port that goes takes its label sets with it; one that comes back gets its own.
#[test]
fn a_port_gone_takes_its_label_sets() {
    let tmp = tempfile::tempdir().unwrap();
    let ports = tmp.path().join(CLASS_DIR).join("rxe0/ports");
    let add_port = |port: &str, state: &str| {
        std::fs::create_dir_all(ports.join(port)).unwrap();
        std::fs::write(ports.join(port).join("state"), state).unwrap();
    };
    add_port("1", "4: ACTIVE\n");
    add_port("2", "4: ACTIVE\n");
    let collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    let states = || read_family(&collector, "rxe0", &PORT_STATE);
    let kept = || collector.held.read("rxe0", |_, state| state.ports.len());
    let port = |port: &str, id: u64| (format!("device=\"rxe0\",port=\"{port}\""), Value::Int(id));
    assert_eq!(states(), [port("1", 4), port("2", 4)]);
    assert_eq!(kept(), 2);
    std::fs::remove_dir_all(ports.join("2")).unwrap();
    assert_eq!(states(), [port("1", 4)]);
    assert_eq!(kept(), 1);
    add_port("2", "1: DOWN\n");
    assert_eq!(states(), [port("1", 4), port("2", 1)]);
    assert_eq!(kept(), 2);
}

/// A port's counters keep their labels from one scrape to the next, and a listing that
/// changed (a counter gone, another new) labels each value with its own file's name.
#[test]
fn hw_counter_labels_follow_their_listing() {
    let tmp = tempfile::tempdir().unwrap();
    let hw = tmp.path().join(CLASS_DIR).join("rxe0/ports/1/hw_counters");
    std::fs::create_dir_all(&hw).unwrap();
    let collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    let received = || {
        let samples = read_family(&collector, "rxe0", &PORT_HW_STAT).into_iter();
        let counter = |labels: &str| {
            let (_, counter) = labels.split_once(",counter=\"").unwrap();
            counter.trim_end_matches('"').to_string()
        };
        samples
            .map(|(labels, value)| (counter(&labels), value))
            .collect::<Vec<_>>()
    };
    let counters = |pairs: &[(&str, u64)]| {
        let pairs = pairs
            .iter()
            .map(|(name, value)| (name.to_string(), Value::Int(*value)));
        pairs.collect::<Vec<_>>()
    };
    std::fs::write(hw.join("rcvd_pkts"), "1\n").unwrap();
    std::fs::write(hw.join("sent_pkts"), "2\n").unwrap();
    settle(&hw);
    assert_eq!(received(), counters(&[("rcvd_pkts", 1), ("sent_pkts", 2)]));
    std::fs::write(hw.join("sent_pkts"), "3\n").unwrap();
    assert_eq!(received(), counters(&[("rcvd_pkts", 1), ("sent_pkts", 3)]));
    std::fs::remove_file(hw.join("rcvd_pkts")).unwrap();
    std::fs::write(hw.join("duplicate_request"), "4\n").unwrap();
    settle(&hw);
    let now = counters(&[("duplicate_request", 4), ("sent_pkts", 3)]);
    assert_eq!(received(), now);
    assert_eq!(received(), now);
    // The listing from before the change is not kept.
    let kept = collector.held.read("rxe0", |_, state| state.counters.len());
    assert_eq!(kept, 1);
}

/// `--collector.rdma.hw-counter-include`: only the counters named are exported (and read),
/// the device-wide ones too; `link_downed` is still read for the port's downs.
#[test]
fn hw_counters_not_included_are_not_exported_but_link_downed_still_counts_downs() {
    let include = settings(&["--collector.rdma.hw-counter-include", "rcvd_pkts|np_.*"]).unwrap();
    assert!(matches!(
        settings(&[
            "--collector.rdma.hw-counter-include=a",
            "--collector.rdma.hw-counter-exclude=b"
        ]),
        Err(ConfigError::Flags(_))
    ));
    let tmp = tempfile::tempdir().unwrap();
    let device = tmp.path().join(CLASS_DIR).join("mlx5_0");
    let port = device.join("ports/1");
    std::fs::create_dir_all(port.join("hw_counters")).unwrap();
    std::fs::create_dir_all(device.join("hw_counters")).unwrap();
    for (file, content) in [
        (port.join("state"), "4: ACTIVE"),
        (port.join("hw_counters/rcvd_pkts"), "5\n"),
        (port.join("hw_counters/np_cnp_sent"), "6\n"),
        (port.join("hw_counters/out_of_buffer"), "7\n"),
        (port.join("hw_counters/link_downed"), "1\n"),
        (device.join("hw_counters/np_ecn_marked_roce_packets"), "8\n"),
        (device.join("hw_counters/rx_write_requests"), "9\n"),
    ] {
        std::fs::write(file, content).unwrap();
    }
    let mut collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    collector.hw_counter_names = include.hw_counter_names;
    let counters = |desc: &Desc| -> Vec<(String, Value)> {
        let samples = read_family(&collector, "mlx5_0", desc).into_iter();
        samples
            .map(|(labels, value)| (labels.rsplit_once("counter=").unwrap().1.to_string(), value))
            .collect()
    };
    let quoted = |name: &str, value: u64| (format!("\"{name}\""), Value::Int(value));
    assert_eq!(
        counters(&PORT_HW_STAT),
        [quoted("np_cnp_sent", 6), quoted("rcvd_pkts", 5)]
    );
    assert_eq!(
        counters(&DEVICE_HW_STAT),
        [quoted("np_ecn_marked_roce_packets", 8)]
    );
    std::fs::write(port.join("state"), "1: DOWN").unwrap();
    std::fs::write(port.join("hw_counters/link_downed"), "4\n").unwrap();
    let downs = read_family(&collector, "mlx5_0", &PORT_DOWNS);
    assert_eq!(
        downs[0].1,
        Value::Int(3),
        "link_downed's 3 downs, though not exported"
    );
}

/// A device `mlx5_0` below PCI device `0000:05:00.0` (bound to mlx5_core), in `sys`.
fn device_below_a_pci_device(sys: &Path) {
    for dir in [
        sys.join("devices/pci0000:00/0000:06:00.0"),
        sys.join(CLASS_DIR),
    ] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let links = [
        (
            CLASS_DIR.to_string() + "/mlx5_0",
            "../../devices/pci0000:00/0000:05:00.0/infiniband/mlx5_0",
        ),
        (
            "devices/pci0000:00/0000:05:00.0/driver".into(),
            "../../../bus/pci/drivers/mlx5_core",
        ),
    ];
    device_directory(sys);
    for (link, target) in links {
        std::os::unix::fs::symlink(target, sys.join(link)).unwrap();
    }
}

/// `mlx5_0`'s directory below `0000:05:00.0`, made (again: a device registered again).
fn device_directory(sys: &Path) {
    let device = sys.join("devices/pci0000:00/0000:05:00.0/infiniband/mlx5_0");
    std::fs::create_dir_all(&device).unwrap();
    std::os::unix::fs::symlink("../../../0000:05:00.0", device.join("device")).unwrap();
}

/// The device's parent's address and driver, as its info series' labels say.
fn parent_labels(collector: &RdmaCollector) -> (String, String) {
    assert_eq!(collector.units().unwrap().len(), 1);
    let info = read_family(collector, "mlx5_0", &DEVICE_INFO);
    let labels = &info[0].0;
    let label = |name: &str| {
        let value = labels.split(&format!("{name}=\"")).nth(1).unwrap();
        value.split('"').next().unwrap().to_string()
    };
    (label("pci_address"), label("driver"))
}

fn re_point(link: &Path, target: &str) {
    std::fs::remove_file(link).unwrap();
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// In a fixture tree the parent's address and driver are read each time: a link
/// re-pointed is seen at once, though the directories' times have settled (as they have
/// by the time a fixture is scraped).
#[test]
fn in_a_fixture_tree_a_parent_or_driver_re_pointed_is_read_again() {
    let tmp = tempfile::tempdir().unwrap();
    let sys = tmp.path();
    device_below_a_pci_device(sys);
    let pci = sys.join("devices/pci0000:00/0000:05:00.0");
    let device = pci.join("infiniband/mlx5_0");
    for dir in [&device, &pci] {
        settle(dir);
    }
    let collector = RdmaCollector::new(sys.to_path_buf(), NameFilter::All);
    let first = ("0000:05:00.0".to_string(), "mlx5_core".to_string());
    assert_eq!(parent_labels(&collector), first);
    assert_eq!(parent_labels(&collector), first);

    re_point(&pci.join("driver"), "../../../bus/pci/drivers/vfio-pci");
    settle(&pci);
    let rebound = ("0000:05:00.0".to_string(), "vfio-pci".to_string());
    assert_eq!(parent_labels(&collector), rebound);

    re_point(&device.join("device"), "../../../0000:06:00.0");
    settle(&device);
    assert_eq!(
        parent_labels(&collector),
        ("0000:06:00.0".into(), String::new())
    );
}

/// On sysfs they are read once per device directory: a link cannot move while the
/// device's directory lives, and a device registered again is another directory.
#[test]
fn on_sysfs_the_parent_is_read_once_per_device_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let sys = tmp.path();
    device_below_a_pci_device(sys);
    let pci = sys.join("devices/pci0000:00/0000:05:00.0");
    let collector = RdmaCollector::new(sys.to_path_buf(), NameFilter::All);
    let device_dir = SysDir::open(sys, format!("{CLASS_DIR}/mlx5_0")).unwrap();
    collector
        .held
        .read("mlx5_0", |held, _| held.as_on_sysfs(&device_dir));
    let first = ("0000:05:00.0".to_string(), "mlx5_core".to_string());
    assert_eq!(parent_labels(&collector), first);
    // What sysfs never does while the device is there: kept, not read again.
    re_point(&pci.join("driver"), "../../../bus/pci/drivers/vfio-pci");
    assert_eq!(parent_labels(&collector), first);

    std::fs::remove_dir_all(pci.join("infiniband/mlx5_0")).unwrap();
    device_directory(sys);
    let rebound = ("0000:05:00.0".to_string(), "vfio-pci".to_string());
    assert_eq!(parent_labels(&collector), rebound);
}

#[test]
fn a_device_gone_since_the_listing_is_no_error() {
    let tmp = tempfile::tempdir().unwrap();
    let collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    let mut out = Output::default();
    collector.collect_unit(&Entry::Name("mlx5_9".to_string()), &mut out);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
}

#[test]
fn hw_counters_come_over_netlink_only_from_the_running_kernel() {
    let flag = |value: &str| settings(&["--collector.rdma.hw-counters", value]);
    let fixture = Path::new("/work/fixture/sys");
    let sys = Path::new("/sys");
    let auto = settings(&[]).unwrap().hw_counters;
    assert_eq!(auto.settle(sys), HwCounters::Netlink { fallback: true });
    assert_eq!(auto.settle(fixture), HwCounters::Sysfs);
    let netlink = flag("netlink").unwrap().hw_counters;
    assert_eq!(
        netlink.settle(fixture),
        HwCounters::Netlink { fallback: false }
    );
    assert_eq!(
        flag("sysfs").unwrap().hw_counters.settle(sys),
        HwCounters::Sysfs
    );
    let err = flag("both").unwrap_err().to_string();
    assert!(
        err.starts_with("invalid --collector.rdma.hw-counters \"both\""),
        "{err}"
    );
}

#[test]
fn widths_give_the_saturation_value() {
    let max = |file| {
        let width = PMA_COUNTERS.iter().find(|c| c.file == file).unwrap().width;
        (1u64 << width.unwrap()) - 1
    };
    assert_eq!(max("port_xmit_wait"), 4_294_967_295);
    assert_eq!(max("symbol_error"), 65_535);
    assert_eq!(max("link_downed"), 255);
    assert_eq!(max("local_link_integrity_errors"), 15);
}

#[test]
fn a_counter_read_at_64_bits_is_never_flagged_saturated() {
    let tmp = tempfile::tempdir().unwrap();
    let port = tmp.path().join(CLASS_DIR).join("mlx4_0/ports/1");
    for dir in ["counters", "counters_ext"] {
        std::fs::create_dir_all(port.join(dir)).unwrap();
    }
    let collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    let flag = || {
        let flags = read_family(&collector, "mlx4_0", &PORT_PMA_SATURATED);
        let received = r#"device="mlx4_0",port="1",counter="port_rcv_packets""#;
        flags
            .into_iter()
            .find(|(labels, _)| labels == received)
            .unwrap()
            .1
    };
    let at_32_bit_max = "4294967295\n";
    std::fs::write(port.join("counters/port_rcv_packets"), at_32_bit_max).unwrap();
    // The 64-bit copy passes through 2^32-1 and counts on.
    let extended = port.join("counters_ext/port_rcv_packets_64");
    std::fs::write(&extended, at_32_bit_max).unwrap();
    assert_eq!(flag(), Value::Int(0));
    // The 32-bit file alone has stopped.
    std::fs::remove_file(&extended).unwrap();
    assert_eq!(flag(), Value::Int(1));
}

/// A RoCE port's netdev's carrier changes are exported, read fresh each time; none without a
/// netdev or where the netdev is gone.
#[test]
fn a_roce_ports_carrier_changes_are_its_netdevs() {
    let tmp = tempfile::tempdir().unwrap();
    let port = tmp.path().join(CLASS_DIR).join("rxe0/ports/1");
    std::fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
    std::fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
    std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
    let netdev = tmp.path().join(NET_CLASS_DIR).join("dummy0");
    std::fs::create_dir_all(&netdev).unwrap();
    std::fs::write(netdev.join("carrier_changes"), "2\n").unwrap();
    let collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    let changes = || read_family(&collector, "rxe0", &PORT_NETDEV_CARRIER_CHANGES);
    // The default GID names no netdev yet.
    std::fs::write(port.join("gid_attrs/ndevs/0"), "").unwrap();
    assert_eq!(changes(), vec![]);
    std::fs::write(port.join("gid_attrs/ndevs/0"), "dummy0\n").unwrap();
    let expected = |n| vec![(r#"device="rxe0",port="1""#.to_string(), Value::Int(n))];
    assert_eq!(changes(), expected(2));
    // Five downs and ups.
    std::fs::write(netdev.join("carrier_changes"), "12\n").unwrap();
    assert_eq!(changes(), expected(12));
    std::fs::remove_dir_all(&netdev).unwrap();
    assert_eq!(changes(), vec![]);
}

/// A RoCE port's netdev's transmit timeouts are the sum over its TX queues (RX queues have
/// none); no series without a `queues/` directory.
#[test]
fn a_roce_ports_tx_timeouts_are_summed_over_its_netdevs_tx_queues() {
    let tmp = tempfile::tempdir().unwrap();
    let port = tmp.path().join(CLASS_DIR).join("mlx5_0/ports/1");
    std::fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
    std::fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
    std::fs::write(port.join("gid_attrs/ndevs/0"), "ens1f0np0\n").unwrap();
    let netdev = tmp.path().join(NET_CLASS_DIR).join("ens1f0np0");
    std::fs::create_dir_all(&netdev).unwrap();
    let collector = RdmaCollector::new(tmp.path().to_path_buf(), NameFilter::All);
    let timeouts = || read_family(&collector, "mlx5_0", &PORT_NETDEV_TX_TIMEOUTS);
    assert_eq!(timeouts(), vec![]);
    for (queue, count) in [("tx-0", "0"), ("tx-1", "3"), ("tx-2", "1")] {
        std::fs::create_dir_all(netdev.join("queues").join(queue)).unwrap();
        std::fs::write(netdev.join("queues").join(queue).join("tx_timeout"), count).unwrap();
    }
    std::fs::create_dir_all(netdev.join("queues/rx-0")).unwrap();
    let labels = r#"device="mlx5_0",port="1""#.to_string();
    assert_eq!(timeouts(), vec![(labels.clone(), Value::Int(4))]);
    std::fs::write(netdev.join("queues/tx-2/tx_timeout"), "2\n").unwrap();
    assert_eq!(timeouts(), vec![(labels, Value::Int(5))]);
}
