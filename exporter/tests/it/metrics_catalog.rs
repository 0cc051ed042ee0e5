//! METRICS.md is the catalog: every emitted metric is listed there, and every listed metric is
//! produced by some fixture tree.

use crate::util;

use std::collections::BTreeSet;

use util::Exporter;

/// Backticked `hpcnode_*` and `process_*` names in the first column of METRICS.md's tables.
fn catalog() -> BTreeSet<String> {
    let text = std::fs::read_to_string(util::tests_dir().join("../METRICS.md")).unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .filter(|name| name.starts_with("hpcnode_") || name.starts_with("process_"))
        .map(str::to_string)
        .collect()
}

/// Metrics that need a kernel with module support, kprobes or an Intel IOMMU, which the CI
/// machine's kernel lacks: the kernel lab (Debian kernels in qemu) checks them. One is not
/// produced there either: no lab scenario makes `vfio_pci_core_enable` fail; the lab checks
/// that its probe attaches, and that it runs on a device open.
const KERNEL_LAB_ONLY: &[&str] = &[
    "hpcnode_module_load_failures_total",
    "hpcnode_module_loads_total",
    "hpcnode_module_signature_checks_total",
    "hpcnode_module_tainted_loads_total",
    "hpcnode_iommu_fault_interrupts_total",
    "hpcnode_vfio_enable_failures_total",
    "hpcnode_vfio_aer_errors_total",
    "hpcnode_vfio_pin_failures_total",
    "hpcnode_rdma_port_events_total",
    // Kernel-facility records only: a line a test writes to /dev/kmsg is LOG_USER and counted
    // as a process's line; the lab refuses modules (module_sig_enforce, before and after start)
    // and makes an emulated IOMMU fault (iommu_edu).
    "hpcnode_kernel_log_events_before_start",
    "hpcnode_kernel_log_events_total",
    "hpcnode_iommu_faults_total",
];

/// Read from the running kernel only (rtnetlink) and for a PCI function with VFs, which no
/// fixture and no lab kernel has: `collectors/rdma/vf_stats/tests.rs` reads replies built as
/// the drivers fill them (`docs/rdma-attribution.md` says why the lab cannot).
const NEEDS_SRIOV_PF: &[&str] = &["hpcnode_rdma_vf_stat_total"];

/// Read from the running kernel only (ethtool netlink) and from a RoCE port's pluggable
/// module, which no fixture and no lab kernel has (their netdevsim is not built, and its
/// source there has no module-EEPROM operation): `collectors/rdma/module_eeprom/tests.rs`
/// reads module images built byte by byte from the specifications (docs/rdma.md says why).
const NEEDS_PLUGGABLE_MODULE: &[&str] = &[
    "hpcnode_rdma_port_module_info",
    "hpcnode_rdma_port_module_temperature_celsius",
    "hpcnode_rdma_port_module_supply_voltage_volts",
    "hpcnode_rdma_port_module_tx_bias_amperes",
    "hpcnode_rdma_port_module_tx_power_watts",
    "hpcnode_rdma_port_module_rx_power_watts",
    "hpcnode_rdma_port_module_temperature_threshold_celsius",
    "hpcnode_rdma_port_module_supply_voltage_threshold_volts",
    "hpcnode_rdma_port_module_tx_bias_threshold_amperes",
    "hpcnode_rdma_port_module_tx_power_threshold_watts",
    "hpcnode_rdma_port_module_rx_power_threshold_watts",
    "hpcnode_rdma_port_module_alarm",
];

/// Read from the running kernel only (the ethtool ioctl) and from a RoCE port whose netdev is
/// mlx5e's, which no fixture and no lab kernel has (veth, dummy and rxe's netdevs count no
/// module events): `collectors/rdma/module_events/tests.rs` reads string tables and values
/// built as the kernel fills the ioctl's buffers, and `ethtool_ioctl/tests.rs` a real veth's.
const NEEDS_MLX5E_NETDEV: &[&str] = &["hpcnode_rdma_port_module_events_total"];
/// Read from the running kernel only, for a RoCE port whose driver counts FEC (ethtool
/// netlink) or a devlink instance that is an RDMA device's PCI function, which no fixture and
/// no lab kernel has (no netdevsim; rxe has neither): `collectors/rdma/fec/tests.rs` and
/// `devlink_health/tests.rs` read replies built byte by byte from the uapi headers and the
/// drivers (docs/rdma.md says why).
const NEEDS_FEC_OR_DEVLINK_DEVICE: &[&str] = &[
    "hpcnode_rdma_port_fec_corrected_blocks_total",
    "hpcnode_rdma_port_fec_uncorrectable_blocks_total",
    "hpcnode_rdma_port_fec_corrected_bits_total",
    "hpcnode_rdma_device_health_reporter_errors_total",
    "hpcnode_rdma_device_health_reporter_recoveries_total",
    "hpcnode_rdma_device_health_reporter_healthy",
];

/// A fixture's `/proc` is links, names that prove no hold, so no fixture holds a vfio device:
/// `pci.rs` (`vfio_holders_are_proven_by_the_open_file_not_its_name`) holds one with a
/// real process, and the kernel lab's `vfio_holders` scenario also leaves a stale holder.
const NEEDS_HELD_VFIO_DEVICE: &[&str] = &[
    "hpcnode_pci_vfio_holder_info",
    "hpcnode_pci_vfio_stale_holder_info",
];

/// The eBPF metrics the real exporter produces on this machine's kernel, after a kernel log
/// line of each kind it counts; `None` (after saying why) where BPF is unavailable.
fn emitted_by_probes() -> Option<BTreeSet<String>> {
    if !util::kernel::require_bpf("metrics_md_matches_what_fixtures_produce (ebpf part)") {
        return None;
    }
    let exporter = Exporter::start(&["--collector.disable-defaults", "--collector.ebpf"]);
    util::kernel::write_kmsg(util::kernel::LOCKDOWN_LINE);
    util::kernel::write_kmsg(util::kernel::DMAR_FAULT_LINE);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let text = exporter.get("/metrics").text();
        let process_lines = |event: &str| {
            text.contains(&format!(
                "hpcnode_kernel_log_process_lines_total{{event=\"{event}\"}}"
            ))
        };
        if process_lines("lockdown_refused_module")
            && process_lines("iommu_fault")
            && text.contains("hpcnode_kernel_log_before_start_complete ")
        {
            return Some(names(&text));
        }
        assert!(
            std::time::Instant::now() < deadline,
            "kernel log line not counted:\n{text}\n{}",
            exporter.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

/// Exporter runs whose outputs together must produce every metric in METRICS.md: one line
/// per collector, its flags and the fixture trees (under tests/fixtures) it reads.
const RUNS: &[(&[&str], &[&str])] = &[
    (&["--collector.rdma"], &["procfs", "rdma_edge", "rdma_bad"]),
    (&["--collector.rdma_netlink"], &["procfs"]),
    (
        &[
            "--collector.mic",
            "--no-collector.mic.libmicmgmt",
            "--collector.mic.micras-path=mic0=/var/lib/micras/mic0",
        ],
        &["mic_mpss3", "mic_mpss4", "mic_card"],
    ),
    (
        &[
            "--collector.modules",
            "--collector.modules.expected=mlx5_core,mlx5_ib,rdma_ucm,vfio_pci,nvidia,8250",
        ],
        &["modules_rhel7", "modules_secureboot", "modules_none"],
    ),
    (
        &[
            "--collector.modules",
            "--collector.modules.expected=geniv,lab_unsigned,lab_foreign_keyid",
        ],
        &["modules_signed_files"],
    ),
    (
        &[
            "--collector.pci",
            "--collector.pci.nova-config=../tests/fixtures/pci_host/etc/kolla/config/nova.conf",
            "--collector.pci.nova-config=../tests/fixtures/pci_host/etc/kolla/config/nova/nova-compute.conf",
            "--collector.pci.nova-config=../tests/fixtures/pci_host/etc/kolla/config/nova/nova-api.conf",
            "--collector.pci.nova-config=../tests/fixtures/pci_host/etc/nova/nova.conf",
            "--collector.pci.nova-scheduler-config=../tests/fixtures/pci_host/etc/kolla/config/nova/nova-scheduler.conf",
        ],
        &["pci_host"],
    ),
    (
        &["--collector.pci", "--collector.pci.passthrough-device=10de:1eb8"],
        &["pci_failing_host"],
    ),
];

/// The server's own metrics, emitted under `--web.config.file` (here one that only sets a
/// header, so the test can scrape over plain HTTP).
fn web_emitted() -> BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("web.yml");
    std::fs::write(
        &config,
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n",
    )
    .unwrap();
    let flag = format!("--web.config.file={}", config.display());
    names(
        &Exporter::start(&["--collector.disable-defaults", &flag])
            .get("/metrics")
            .text(),
    )
}

/// The ebpf collector as a user without its capabilities: `hpcnode_collector_privilege_missing`.
fn unprivileged_emitted() -> BTreeSet<String> {
    let uid = util::is_root().then_some(65534);
    let args = ["--collector.disable-defaults", "--collector.ebpf"];
    names(&Exporter::start_as(&args, uid).get("/metrics").text())
}

fn emitted(flags: &[&str], fixture_name: &str) -> BTreeSet<String> {
    let root = util::tests_dir().join("fixtures").join(fixture_name);
    let paths = [
        format!("--path.sysfs={}", root.join("sys").display()),
        format!("--path.procfs={}", root.join("proc").display()),
        format!("--path.rootfs={}", root.display()),
    ];
    let mut args = vec!["--collector.disable-defaults"];
    args.extend(paths.iter().map(String::as_str));
    args.extend_from_slice(flags);
    names(&Exporter::start(&args).get("/metrics").text())
}

/// The verbs collector's metrics that need an RDMA device in this machine's kernel, which it
/// lacks: a successful probe's, and what `ibv_get_device_list` lists of `/sys` (asked of the
/// running kernel only). The kernel lab's verbs and `rdma_userspace` scenarios produce them on
/// Soft-RoCE, and `verbs::results::tests::results_are_exported_per_target_and_failures_keep_the_last_success`
/// and `verbs::visibility::tests` check their export; every other verbs metric comes from
/// [`verbs_emitted`] here.
const NEEDS_RDMA_DEVICE: &[&str] = &[
    "hpcnode_verbs_probe_bandwidth_bytes_per_second",
    "hpcnode_verbs_probe_latency_seconds",
    "hpcnode_verbs_probe_efficiency_ratio",
    "hpcnode_verbs_probe_last_success_timestamp_seconds",
    "hpcnode_rdma_device_visible_to_verbs",
];

/// The `rdma_netlink` metrics of a device, which need RDMA netlink and a device in this
/// machine's kernel (only `hpcnode_rdma_netlink_available` does not). The kernel lab's
/// `rdma_netlink` group produces them on Soft-RoCE, and `rdma_resources::tests` checks their
/// export from decoded dumps; a machine with a device produces them here too.
const NEEDS_RDMA_NETLINK_DEVICE: &[&str] = &[
    "hpcnode_rdma_resources",
    "hpcnode_rdma_queue_pairs",
    "hpcnode_rdma_pinned_bytes",
    "hpcnode_rdma_holder_resources",
    "hpcnode_rdma_holder_pinned_bytes",
    "hpcnode_rdma_slurm_job_resources",
    "hpcnode_rdma_slurm_job_pinned_bytes",
    // With --collector.rdma_netlink.qp-counters: the lab produces the binding and the count
    // on Soft-RoCE; the per-holder sums (no QP counters on rxe) only from the decoded dumps of
    // rdma_resources::tests.
    "hpcnode_rdma_qp_counter_port_binding",
    "hpcnode_rdma_qp_counters",
    "hpcnode_rdma_holder_qp_counter_total",
    "hpcnode_rdma_slurm_job_qp_counter_total",
];

/// The verbs probe with the real libibverbs (unpacked by tests/setup.sh) on the `rdma_edge`
/// tree: its runs happen on a background thread, so this scrapes until both targets have run.
fn verbs_emitted() -> BTreeSet<String> {
    verbs_emitted_with(
        &[
            "--collector.verbs.interval=1h",
            "--collector.verbs.device=rxe0,mlx4_1",
        ],
        |text| {
            text.matches("hpcnode_verbs_probe_duration_seconds{")
                .count()
                == 2
        },
    )
}

/// The verbs probe mesh on the same tree: this node and one other, probed once a 2 s round.
fn verbs_mesh_emitted() -> BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    let peers = dir.path().join("peers");
    std::fs::write(&peers, "self 127.0.0.1:1\nother 127.0.0.1:2\n").unwrap();
    let peers = format!("--collector.verbs.peers={}", peers.display());
    verbs_emitted_with(
        &[
            "--collector.verbs.interval=2s",
            "--collector.verbs.duration=100ms",
            "--collector.verbs.mesh-fanout=1",
            "--collector.verbs.node-name=self",
            "--collector.verbs.device=rxe0",
            &peers,
        ],
        |text| text.contains("hpcnode_verbs_probe_mesh_peer_success{"),
    )
}

/// The names an exporter with the verbs probe (`flags` added) emits once `done` says its
/// runs are in.
fn verbs_emitted_with(flags: &[&str], done: impl Fn(&str) -> bool) -> BTreeSet<String> {
    let sysfs = format!("--path.sysfs={}", util::fixture("rdma_edge").display());
    let library = format!("--collector.verbs.library={}", util::libibverbs());
    let mut args = vec![
        "--collector.disable-defaults",
        "--collector.verbs",
        "--collector.verbs.listen=127.0.0.1:0",
        "--collector.verbs.allow=127.0.0.1",
        &library,
        &sysfs,
    ];
    args.extend(flags);
    let exporter = Exporter::start(&args);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let text = exporter.get("/metrics").text();
        if done(&text) {
            return names(&text);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no verbs probe results:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The `rdma_userspace` collector on a root of Debian's real rdma-core libraries.
fn userspace_emitted() -> BTreeSet<String> {
    let root = crate::rdma_userspace::bookworm_root();
    let exporter = util::start_on_root("rdma_userspace", root.path(), &[]);
    names(&exporter.get("/metrics").text())
}

#[test]
fn metrics_md_matches_what_fixtures_produce() {
    let listed = catalog();
    assert!(listed.len() >= 20, "catalog parse found only {listed:?}");
    let mut produced: BTreeSet<String> = RUNS
        .iter()
        .flat_map(|(flags, fixtures)| fixtures.iter().map(|f| emitted(flags, f)))
        .flatten()
        .chain(verbs_emitted())
        .chain(verbs_mesh_emitted())
        .chain(web_emitted())
        .chain(userspace_emitted())
        .chain(unprivileged_emitted())
        .collect();
    let verbs_metrics: BTreeSet<String> = hpcnode_exporter::collectors::verbs::METRICS
        .iter()
        .map(|desc| desc.sample_name())
        .collect();
    for name in NEEDS_RDMA_DEVICE {
        assert!(
            verbs_metrics.contains(*name),
            "{name} is not a verbs metric"
        );
        assert!(
            produced.insert(name.to_string()),
            "{name} is produced here: remove it from NEEDS_RDMA_DEVICE"
        );
    }
    let netlink_metrics: BTreeSet<String> = hpcnode_exporter::collectors::rdma_resources::METRICS
        .iter()
        .map(|desc| desc.sample_name())
        .collect();
    for name in NEEDS_RDMA_NETLINK_DEVICE {
        assert!(
            netlink_metrics.contains(*name),
            "{name} is not an rdma_netlink metric"
        );
        produced.insert(name.to_string());
    }
    let ebpf_metrics: BTreeSet<String> = hpcnode_exporter::collectors::ebpf::METRICS
        .iter()
        .map(|desc| desc.sample_name())
        .collect();
    match emitted_by_probes() {
        Some(names) => produced.extend(names),
        // Not checkable without BPF: only the lab-only list is still asserted below.
        None => produced.extend(
            ebpf_metrics
                .iter()
                .filter(|name| !KERNEL_LAB_ONLY.contains(&name.as_str()))
                .cloned(),
        ),
    }
    for name in KERNEL_LAB_ONLY {
        assert!(ebpf_metrics.contains(*name), "{name} is not an ebpf metric");
        assert!(
            produced.insert(name.to_string()),
            "{name} is produced here: remove it from KERNEL_LAB_ONLY"
        );
    }
    let exempt = (NEEDS_HELD_VFIO_DEVICE.iter())
        .chain(NEEDS_SRIOV_PF)
        .chain(NEEDS_PLUGGABLE_MODULE)
        .chain(NEEDS_MLX5E_NETDEV)
        .chain(NEEDS_FEC_OR_DEVLINK_DEVICE);
    for name in exempt {
        assert!(
            produced.insert(name.to_string()),
            "{name} is produced here: remove it from NEEDS_HELD_VFIO_DEVICE, NEEDS_SRIOV_PF, NEEDS_PLUGGABLE_MODULE, NEEDS_MLX5E_NETDEV or NEEDS_FEC_OR_DEVLINK_DEVICE"
        );
    }
    let unlisted: Vec<_> = produced.difference(&listed).collect();
    let unproduced: Vec<_> = listed.difference(&produced).collect();
    assert!(
        unlisted.is_empty(),
        "emitted but not in METRICS.md: {unlisted:?}"
    );
    assert!(
        unproduced.is_empty(),
        "in METRICS.md but no fixture produces: {unproduced:?}"
    );
}

#[test]
fn code_descriptors_match_catalog() {
    let listed = catalog();
    let described: BTreeSet<String> = hpcnode_exporter::scrape::FRAMEWORK_METRICS
        .iter()
        .chain(&hpcnode_exporter::http::WEB_METRICS)
        .chain(
            hpcnode_exporter::collectors::ALL
                .iter()
                .flat_map(|registration| registration.metrics),
        )
        .map(|desc| desc.sample_name())
        .collect();
    assert_eq!(described, listed);
}
