//! The real binary on hostile trees: links that lead out of a `--path.*` root, label text with
//! control characters, and entries whose names are not UTF-8. Each is reported or neutralised,
//! nothing outside a root is ever read, and the rest of the tree is exported.

use crate::util;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use util::golden::{assert_lines, errors_total, scrape};
use util::{start_on_root, Exporter, TreeCopy};

/// A name that is not UTF-8.
fn bad_name() -> &'static OsStr {
    OsStr::from_bytes(b"bad\xff")
}

fn rdma_on(tree: &TreeCopy) -> Exporter {
    Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.rdma",
        &tree.sys_arg(),
    ])
}

/// Replaces `path` by a symlink to `target`.
fn link(target: &Path, path: &Path) {
    fs::remove_file(path).unwrap();
    symlink(target, path).unwrap();
}

/// `path` written as a link relative to `from`'s directory that climbs far above any root and
/// comes down to it: what a relative link out of the tree looks like.
fn climbing_to(path: &Path) -> PathBuf {
    Path::new(&"../".repeat(32)).join(path.strip_prefix("/").unwrap())
}

/// `board_id` linked to a secret file (the issue's `/etc/shadow`), `hca_type` linked to it by
/// a relative path out of the tree, a counter linked to a file that does not parse: none of the
/// host's files is read, so nothing of them reaches a label or the log. Each such link is a
/// file that does not exist inside the root, as a dangling link would be.
#[test]
fn links_out_of_the_root_never_reach_a_label_or_the_log() {
    let tree = TreeCopy::of("rdma_edge");
    let host = tempfile::tempdir().unwrap();
    let shadow = host.path().join("shadow");
    fs::write(&shadow, "root:$6$SECRET-HASH:19000:0:99999:7:::\n").unwrap();
    let counter = host.path().join("counter");
    fs::write(&counter, "SECRET-COUNTER is no number\n").unwrap();
    let device = tree.sys().join("class/infiniband/mlx5_0");
    link(&shadow, &device.join("board_id"));
    link(&climbing_to(&shadow), &device.join("hca_type"));
    link(&counter, &device.join("ports/1/counters/port_rcv_errors"));

    let exporter = rdma_on(&tree);
    for _ in 0..2 {
        let text = scrape(&exporter);
        assert!(!text.contains("SECRET"), "{text}");
        let info = text
            .lines()
            .find(|l| l.starts_with("hpcnode_rdma_device_info{device=\"mlx5_0\""))
            .unwrap();
        assert!(info.contains("board_id=\"\""), "{info}");
        assert!(info.contains("hca_type=\"\""), "{info}");
        assert!(info.contains("firmware_version=\"20."), "{info}");
        assert!(text.contains(
            "hpcnode_rdma_port_data_transmitted_bytes_total{device=\"mlx5_0\",port=\"1\"}"
        ));
        assert!(!text.contains(
            "hpcnode_rdma_port_errors_total{device=\"mlx5_0\",port=\"1\",counter=\"port_rcv_errors\"}"
        ));
        assert_lines(
            &text,
            &["hpcnode_scrape_collector_success{collector=\"rdma\"} 1"],
        );
        assert_eq!(errors_total(&text, "rdma"), 0, "{text}");
    }
    assert!(!exporter.log().contains("SECRET"), "{}", exporter.log());
}

/// Label text read from files loses its control characters (a terminal escape, a bell, a tab)
/// and stops at 160 characters; the series is still exported.
#[test]
fn label_text_is_bounded_and_has_no_control_characters() {
    let tree = TreeCopy::of("rdma_edge");
    let device = tree.sys().join("class/infiniband/mlx5_0");
    let long = "x".repeat(300);
    fs::write(
        device.join("board_id"),
        format!("MT_\x1b[31m0000000223\x07\t{long}\n"),
    )
    .unwrap();
    let exporter = rdma_on(&tree);
    let text = scrape(&exporter);
    let expected = format!("MT_[31m0000000223{}", "x".repeat(160 - 17));
    assert_eq!(expected.chars().count(), 160);
    let info = text
        .lines()
        .find(|l| l.starts_with("hpcnode_rdma_device_info{device=\"mlx5_0\""))
        .unwrap();
    assert!(info.contains(&format!("board_id=\"{expected}\"")), "{info}");
    assert_lines(
        &text,
        &["hpcnode_scrape_collector_success{collector=\"rdma\"} 1"],
    );
}

/// The files of a directory in the fixture tree, by name.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// A device, a `hw_counters` file and a port each named `bad\xff`: each is one parse error
/// naming its directory, and every other device, counter and port is exported.
#[test]
fn a_name_that_is_not_utf8_hides_only_itself_in_rdma() {
    let tree = TreeCopy::of("rdma_edge");
    let class = tree.sys().join("class/infiniband");
    let hw_counters = class.join("mlx5_0/ports/1/hw_counters");
    let (devices, counters) = (files_in(&class), files_in(&hw_counters));
    fs::create_dir(class.join(bad_name())).unwrap();
    fs::write(hw_counters.join(bad_name()), "7\n").unwrap();
    fs::create_dir(class.join("mlx5_1/ports").join(bad_name())).unwrap();

    let exporter = rdma_on(&tree);
    let text = scrape(&exporter);
    assert_lines(
        &text,
        &[
            "hpcnode_scrape_collector_success{collector=\"rdma\"} 1",
            "hpcnode_collector_errors_total{collector=\"rdma\",kind=\"parse\"} 3",
            "hpcnode_rdma_port_state_id{device=\"mlx5_1\",port=\"1\"} 4",
        ],
    );
    assert_eq!(errors_total(&text, "rdma"), 3, "{text}");
    for device in devices {
        let info = format!("hpcnode_rdma_device_info{{device=\"{device}\"");
        assert!(text.contains(&info), "{device} missing:\n{text}");
    }
    for counter in counters.iter().filter(|c| *c != "lifespan") {
        let series = format!(
            "hpcnode_rdma_port_hw_stat_total{{device=\"mlx5_0\",port=\"1\",counter=\"{counter}\"}}"
        );
        assert!(text.contains(&series), "{series} missing:\n{text}");
    }
    let log = exporter.log_with("mlx5_1/ports: entry name is not UTF-8");
    for dir in [
        "class/infiniband",
        "mlx5_0/ports/1/hw_counters",
        "mlx5_1/ports",
    ] {
        let cause = format!("{dir}: entry name is not UTF-8: bad\\\\xff");
        assert_eq!(log.matches(&cause).count(), 1, "{cause} in:\n{log}");
    }
}

/// A PCI device and an IOMMU group named `bad\xff`: the collector still lists every device.
#[test]
fn a_name_that_is_not_utf8_hides_only_itself_in_pci() {
    let tree = TreeCopy::with_rootfs("pci_host");
    fs::create_dir(tree.sys().join("bus/pci/devices").join(bad_name())).unwrap();
    fs::create_dir(tree.sys().join("kernel/iommu_groups").join(bad_name())).unwrap();
    let exporter = start_on_root("pci", tree.root(), &[]);
    let text = scrape(&exporter);
    assert_lines(
        &text,
        &[
            "hpcnode_scrape_collector_success{collector=\"pci\"} 1",
            "hpcnode_collector_errors_total{collector=\"pci\",kind=\"parse\"} 2",
            "hpcnode_iommu_group_devices{group=\"40\",type=\"DMA-FQ\"} 3",
        ],
    );
    assert!(text.contains("hpcnode_pci_device_info{device=\"0000:3b:00.0\""));
    let log = exporter.log_with("iommu_groups: entry name is not UTF-8");
    assert!(
        log.contains("bus/pci/devices: entry name is not UTF-8: bad"),
        "{log}"
    );
}

/// A card directory named `mic\xff` beside the cards: both cards are still read.
#[test]
fn a_name_that_is_not_utf8_hides_only_itself_in_mic() {
    let tree = TreeCopy::with_rootfs("mic_mpss4");
    fs::create_dir(
        tree.sys()
            .join("class/mic")
            .join(OsStr::from_bytes(b"mic\xff")),
    )
    .unwrap();
    let exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--collector.mic",
        "--no-collector.mic.libmicmgmt",
        &tree.sys_arg(),
        &format!("--path.rootfs={}", tree.root().display()),
    ]);
    let text = scrape(&exporter);
    assert_lines(
        &text,
        &[
            "hpcnode_scrape_collector_success{collector=\"mic\"} 1",
            "hpcnode_collector_errors_total{collector=\"mic\",kind=\"parse\"} 1",
        ],
    );
    for card in ["mic0", "mic1"] {
        let state = format!("hpcnode_mic_card_state{{device=\"{card}\"");
        assert!(text.contains(&state), "{card} missing:\n{text}");
    }
}

/// A modprobe.d file named `bad\xff.conf` beside the others: their rules are still read.
#[test]
fn a_name_that_is_not_utf8_hides_only_itself_in_modprobe_d() {
    let tree = TreeCopy::with_rootfs("modules_secureboot");
    let name = OsStr::from_bytes(b"bad\xff.conf");
    fs::write(
        tree.root().join("etc/modprobe.d").join(name),
        "blacklist x\n",
    )
    .unwrap();
    let expected = "--collector.modules.expected=mlx5_ib,rdma_ucm";
    let exporter = start_on_root("modules", tree.root(), &[expected]);
    let text = scrape(&exporter);
    assert_lines(
        &text,
        &[
            "hpcnode_module_modprobe_rule{module=\"mlx5_ib\",rule=\"install_disabled\",file=\"/etc/modprobe.d/disable-mlx5-ib.conf\"} 1",
            "hpcnode_module_modprobe_rule{module=\"rdma_ucm\",rule=\"blacklist\",file=\"/etc/modprobe.d/blacklist-rdma.conf\"} 1",
            "hpcnode_scrape_collector_success{collector=\"modules\"} 1",
            "hpcnode_collector_errors_total{collector=\"modules\",kind=\"parse\"} 1",
        ],
    );
}
