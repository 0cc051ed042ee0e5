//! The `ebpf` collector on the CI machine's own kernel, with the real binary: a kernel without
//! modules or kprobes, where fexit is refused but tracepoints, raw_tp and tp_btf work.

use crate::util;

use std::path::Path;
use std::time::{Duration, Instant};

use util::kernel::{require_bpf, write_kmsg, LOCKDOWN_LINE};
use util::{Exporter, BINARY};

const EBPF_ONLY: [&str; 2] = ["--collector.disable-defaults", "--collector.ebpf"];

/// The value of the sample whose name and labels are exactly `series`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The value of `hpcnode_ebpf_probe_attached` for the probe and hook.
fn attached(text: &str, probe: &str, hook: &str) -> Option<f64> {
    value(
        text,
        &format!("hpcnode_ebpf_probe_attached{{probe=\"{probe}\",hook=\"{hook}\"}}"),
    )
}

/// The reason `hpcnode_ebpf_probe_failure_info` gives for a probe that did not attach.
fn failure_reason(text: &str, probe: &str) -> String {
    let prefix = format!("hpcnode_ebpf_probe_failure_info{{probe=\"{probe}\",reason=\"");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no failure info for {probe}:\n{text}"))
        .to_string()
}

/// Whether a test of this kernel's missing module hooks can run: BPF usable, and a kernel
/// without modules like the CI machine's (elsewhere the kernel lab tests the module probes).
fn on_module_free_kernel(test: &str) -> bool {
    if !require_bpf(test) {
        return false;
    }
    if Path::new("/proc/modules").exists() {
        eprintln!("SKIPPED {test}: this kernel has modules, so which probes attach depends on it");
        return false;
    }
    true
}

/// BPF objects (programs, maps, links) the process holds open.
fn bpf_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("anon_inode:bpf"))
        .count()
}

#[test]
fn kernel_log_lines_are_counted_exactly() {
    if !require_bpf("kernel_log_lines_are_counted_exactly") {
        return;
    }
    let exporter = Exporter::start(&EBPF_ONLY);
    let before = exporter.get("/metrics").text();
    let attached = ["tp_btf", "raw_tp"].iter().find(|hook| {
        value(
            &before,
            &format!("hpcnode_ebpf_probe_attached{{probe=\"kernel_log\",hook=\"{hook}\"}}"),
        ) == Some(1.0)
    });
    assert!(
        attached.is_some(),
        "kernel_log not attached by BPF:\n{before}"
    );
    assert!(bpf_fds(exporter.pid()) > 0);

    // A module name of our own: other processes writing the kernel log cannot disturb it.
    // The lines are this process's, so they are counted apart, never as the kernel's events.
    let module = format!("hpcnode_test{}", std::process::id());
    let series = format!(
        "hpcnode_kernel_log_process_lines_total{{event=\"module_verification_failed\",module=\"{module}\"}}"
    );
    let as_event = format!(
        "hpcnode_kernel_log_events_total{{event=\"module_verification_failed\",source=\"kernel_log\",module=\"{module}\"}}"
    );
    const LINES: usize = 200;
    for i in 0..LINES {
        write_kmsg(&format!("{module}: module verification failed: signature and/or required key missing - tainting kernel"));
        // Lines that must not count, interleaved.
        write_kmsg(&format!("{module}: loaded test line {i}"));
    }
    write_kmsg(LOCKDOWN_LINE);
    let lockdown = "hpcnode_kernel_log_process_lines_total{event=\"lockdown_refused_module\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = exporter.get("/metrics").text();
        if value(&text, &series) == Some(LINES as f64)
            && value(&text, lockdown).is_some_and(|n| n >= 1.0)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "expected {LINES} for {series} and a lockdown line:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Exactly: nothing is counted twice when the ring buffer is drained again.
    std::thread::sleep(Duration::from_secs(1));
    let again = exporter.get("/metrics").text();
    assert_eq!(value(&again, &series), Some(LINES as f64));
    assert_eq!(value(&again, &as_event), None, "{again}");

    // The program's own cost, from the kernel's BPF statistics: it ran for every line.
    let runs = value(
        &again,
        "hpcnode_ebpf_program_runs_total{probe=\"kernel_log\"}",
    )
    .unwrap();
    assert!(runs >= (2 * LINES + 1) as f64, "runs {runs}");
    let seconds = value(
        &again,
        "hpcnode_ebpf_program_run_seconds_total{probe=\"kernel_log\"}",
    )
    .unwrap();
    assert!(seconds > 0.0);
    assert_eq!(
        value(
            &again,
            "hpcnode_ebpf_events_lost_total{probe=\"kernel_log\"}"
        ),
        Some(0.0)
    );
}

/// `--collector.ebpf.hooks` forces the kernel log probe off its preferred BPF hook onto the
/// /dev/kmsg reader, which tells the same lines apart as a process's; the probes left out with
/// `none` say so.
#[test]
fn a_forced_hook_counts_the_same_kernel_log_lines() {
    if !require_bpf("a_forced_hook_counts_the_same_kernel_log_lines") {
        return;
    }
    let mut args = EBPF_ONLY.to_vec();
    args.push("--collector.ebpf.hooks=kernel_log:kmsg,module_load:none");
    let exporter = Exporter::start(&args);
    let before = exporter.get("/metrics").text();
    assert_eq!(
        attached(&before, "kernel_log", "kmsg"),
        Some(1.0),
        "{before}"
    );
    assert_eq!(
        failure_reason(&before, "module_load"),
        "left out by --collector.ebpf.hooks=module_load:none\"} 1"
    );
    let module = format!("hpcnode_forced{}", std::process::id());
    let series = format!(
        "hpcnode_kernel_log_process_lines_total{{event=\"module_verification_failed\",module=\"{module}\"}}"
    );
    let as_event = format!(
        "hpcnode_kernel_log_events_total{{event=\"module_verification_failed\",source=\"kernel_log\",module=\"{module}\"}}"
    );
    const LINES: usize = 20;
    for _ in 0..LINES {
        write_kmsg(&format!("{module}: module verification failed: signature and/or required key missing - tainting kernel"));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = exporter.get("/metrics").text();
        if value(&text, &series) == Some(LINES as f64) {
            assert_eq!(value(&text, &as_event), None, "{text}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "expected {LINES} for {series}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the exporter has read the kernel log from before its start, and returns the
/// scrape that shows it.
fn read_before_start(exporter: &Exporter) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = exporter.get("/metrics").text();
        if value(&text, "hpcnode_kernel_log_before_start_complete").is_some() {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the kernel log from before start was not read in 20 s:\n{text}\n{}",
            exporter.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A line a process wrote to /dev/kmsg before the exporter started is not in the
/// before-start gauge (the kernel logs it as LOG_USER; the gauge's own split is proven in the
/// kernel lab with refused modules), across a restart too; a line written after start is
/// counted as a process's line, not as an event.
#[test]
fn kernel_log_lines_from_before_start_are_a_gauge_apart() {
    if !require_bpf("kernel_log_lines_from_before_start_are_a_gauge_apart") {
        return;
    }
    let module = format!("hpcnode_before{}", std::process::id());
    let write = || {
        write_kmsg(&format!("{module}: module verification failed: signature and/or required key missing - tainting kernel"))
    };
    let labels = format!(
        "{{event=\"module_verification_failed\",source=\"kernel_log\",module=\"{module}\"}}"
    );
    let before_start = format!("hpcnode_kernel_log_events_before_start{labels}");
    let since_start = format!("hpcnode_kernel_log_events_total{labels}");
    write();

    let exporter = Exporter::start(&EBPF_ONLY);
    let text = read_before_start(&exporter);
    assert_eq!(value(&text, &before_start), None, "{text}");
    assert_eq!(value(&text, &since_start), None);
    drop(exporter);

    let exporter = Exporter::start(&EBPF_ONLY);
    let text = read_before_start(&exporter);
    assert_eq!(
        value(&text, &before_start),
        None,
        "after a restart:\n{text}"
    );
    assert_eq!(value(&text, &since_start), None, "after a restart");

    write();
    let process_lines = format!(
        "hpcnode_kernel_log_process_lines_total{{event=\"module_verification_failed\",module=\"{module}\"}}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = exporter.get("/metrics").text();
        if value(&text, &process_lines) == Some(1.0) {
            assert_eq!(value(&text, &before_start), None);
            assert_eq!(value(&text, &since_start), None, "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "{process_lines} not 1:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The log line that says what was read.
    assert!(
        exporter
            .log()
            .contains("msg=\"read the kernel log from before start\""),
        "{}",
        exporter.log()
    );
}

#[test]
fn module_probes_say_why_they_are_not_attached() {
    if !on_module_free_kernel("module_probes_say_why_they_are_not_attached") {
        return;
    }
    let exporter = Exporter::start(&EBPF_ONLY);
    let text = exporter.get("/metrics").text();
    for probe in ["module_load", "module_sig_check", "module_load_syscall"] {
        assert_eq!(attached(&text, probe, "none"), Some(0.0), "{text}");
    }
    let reason = |probe: &str| failure_reason(&text, probe);
    // What this kernel really says for each hook: no module tracepoint (in BTF, for raw_tp,
    // in tracefs), no module_sig_check function, no kprobes.
    let module_load = reason("module_load");
    for expected in [
        "tp_btf(module_load): unknown BTF type",
        "raw_tp(module_load):",
        "tracepoint(module/module_load):",
        "perf(module/module_load):",
    ] {
        assert!(module_load.contains(expected), "{module_load}");
    }
    let sig_check = reason("module_sig_check");
    for expected in [
        "fexit(module_sig_check):",
        "fexit(mod_verify_sig):",
        "kretprobe(module_sig_check):",
    ] {
        assert!(sig_check.contains(expected), "{sig_check}");
    }
    assert!(reason("module_load_syscall").starts_with("kernel without module support"));
    assert!(!text.contains("hpcnode_ebpf_probe_failure_info{probe=\"kernel_log\""));

    // One log line per probe that did not attach.
    let log = exporter.log();
    for probe in ["module_load", "module_sig_check", "module_load_syscall"] {
        let lines = log
            .lines()
            .filter(|l| {
                l.contains("eBPF probe not attached") && l.contains(&format!("probe={probe} "))
            })
            .count();
        assert_eq!(lines, 1, "{probe}:\n{log}");
    }
    assert!(
        log.contains("msg=\"eBPF probe attached\" probe=kernel_log"),
        "{log}"
    );
}

#[test]
fn strict_exits_1_naming_the_missing_probes() {
    if !on_module_free_kernel("strict_exits_1_naming_the_missing_probes") {
        return;
    }
    let output = std::process::Command::new(BINARY)
        .args([
            "--web.listen-address=127.0.0.1:0",
            "--collector.ebpf.strict",
        ])
        .args(EBPF_ONLY)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("msg=listening"), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.contains("level=error"))
        .unwrap_or_else(|| panic!("no error line:\n{stderr}"));
    assert!(
        error.contains("--collector.ebpf.strict: probes not attached: module_load ("),
        "{error}"
    );
    assert!(error.contains("; module_sig_check ("), "{error}");
    assert!(error.contains("; module_load_syscall ("), "{error}");
    assert!(!error.contains("kernel_log ("), "{error}");
    // The IOMMU, vfio and RDMA probes may rightly miss (no Intel IOMMU, no vfio or ib_core
    // modules, no kprobes here): strict does not require them.
    for probe in [
        "iommu_fault",
        "dmar_fault",
        "vfio_enable",
        "vfio_aer",
        "vfio_pin",
        "rdma_port_events",
    ] {
        assert!(!error.contains(&format!("{probe} (")), "{error}");
    }
}

/// On this kernel iommu:io_page_fault exists (IOMMU support built in) and its BPF hooks work;
/// dmar_fault (no Intel IOMMU), the vfio and the ib_core functions (no modules, no kprobes) do
/// not exist, and each says why.
#[test]
fn iommu_and_vfio_probes_report_their_hooks() {
    if !on_module_free_kernel("iommu_and_vfio_probes_report_their_hooks") {
        return;
    }
    let exporter = Exporter::start(&EBPF_ONLY);
    let text = exporter.get("/metrics").text();
    let attached = |probe: &str, hook: &str| attached(&text, probe, hook);
    assert!(
        attached("iommu_fault", "tp_btf") == Some(1.0)
            || attached("iommu_fault", "raw_tp") == Some(1.0),
        "{text}"
    );
    for probe in [
        "dmar_fault",
        "vfio_enable",
        "vfio_aer",
        "vfio_pin",
        "rdma_port_events",
    ] {
        assert_eq!(attached(probe, "none"), Some(0.0), "{text}");
    }
    let reason = |probe: &str| failure_reason(&text, probe);
    let dmar = reason("dmar_fault");
    assert!(
        dmar.starts_with("fentry(dmar_fault): unknown BTF type"),
        "{dmar}"
    );
    assert!(dmar.contains("; kprobe(dmar_fault):"), "{dmar}");
    assert!(reason("vfio_enable").contains("kretprobe(vfio_pci_enable):"));
    assert!(reason("vfio_aer").starts_with("kprobe(vfio_pci_core_aer_err_detected):"));
    assert!(reason("vfio_pin").starts_with("kretprobe(vfio_pin_pages_remote):"));
    let rdma = reason("rdma_port_events");
    assert!(
        rdma.starts_with("kprobe(ib_dispatch_event_clients):"),
        "{rdma}"
    );
    assert!(rdma.contains("; kprobe(ib_dispatch_event):"), "{rdma}");
    // Nothing faults here: no IOMMU fault series from either source.
    assert!(!text.contains("hpcnode_iommu_faults_total{"), "{text}");
    assert!(
        !text.contains("hpcnode_iommu_fault_interrupts_total{"),
        "{text}"
    );
}

/// Parsing the kernel's BTF holds at least the file's bytes on the heap; once the probes are
/// attached that heap is given back, so the process keeps less anonymous memory than the file.
#[test]
fn the_kernels_btf_is_not_kept_once_the_probes_are_attached() {
    if !require_bpf("the_kernels_btf_is_not_kept_once_the_probes_are_attached") {
        return;
    }
    let Ok(btf) = std::fs::metadata("/sys/kernel/btf/vmlinux") else {
        eprintln!(
            "SKIPPED the_kernels_btf_is_not_kept_once_the_probes_are_attached: no kernel BTF"
        );
        return;
    };
    let btf_bytes = btf.len();
    let exporter = Exporter::start(&EBPF_ONLY);
    let text = exporter.get("/metrics").text();
    assert!(text.contains("hpcnode_ebpf_probe_attached"), "{text}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", exporter.pid())).unwrap();
    let anon_kib: u64 = (status.lines())
        .find_map(|line| line.strip_prefix("RssAnon:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert!(
        anon_kib * 1024 < btf_bytes,
        "RssAnon {anon_kib} kB, the kernel's BTF {btf_bytes} bytes"
    );
}

#[test]
fn disabled_collector_loads_nothing() {
    let exporter = Exporter::start(&["--no-collector.ebpf", "--collector.ebpf.strict"]);
    let text = exporter.get("/metrics").text();
    assert!(!text.contains("hpcnode_ebpf_"), "{text}");
    assert!(!text.contains("collector=\"ebpf\""), "{text}");
    assert!(!exporter.log().contains("eBPF probe"));
    assert_eq!(bpf_fds(exporter.pid()), 0);
}

/// Without the capabilities BPF needs (uid 65534, or a user without them), the exporter says
/// so once, naming them with the remedy and what they cost, and exports them; each probe's
/// failure stays in its metric instead of a warning of its own.
#[test]
fn a_missing_privilege_is_said_once_with_its_remedy_and_exported() {
    let uid = util::is_root().then_some(65534);
    let exporter = Exporter::start_as(&EBPF_ONLY, uid);
    let text = exporter.get("/metrics").text();
    let sysctl = |name: &str| std::fs::read_to_string(format!("/proc/sys/kernel/{name}")).unwrap();
    let has_cap_bpf = sysctl("cap_last_cap").trim().parse::<u32>().unwrap() >= 39;
    let missing: &[&str] = if has_cap_bpf {
        &["cap_perfmon", "cap_bpf"]
    } else {
        &["cap_sys_admin"]
    };
    for capability in missing {
        let series = format!(
            "hpcnode_collector_privilege_missing{{collector=\"ebpf\",capability=\"{capability}\"}}"
        );
        assert_eq!(value(&text, &series), Some(1.0), "{series}:\n{text}");
    }
    assert!(text.contains("hpcnode_ebpf_probe_failure_info{"), "{text}");
    let log = exporter.log();
    let said: Vec<_> = log
        .lines()
        .filter(|l| l.contains("lacks a privilege"))
        .collect();
    let kmsg_refused = sysctl("dmesg_restrict").trim() == "1";
    assert_eq!(said.len(), 1 + usize::from(kmsg_refused), "{log}");
    assert!(
        said[0].contains(&format!("missing={}", missing.join(","))),
        "{log}"
    );
    assert!(
        said[0].contains("remedy=") && said[0].contains("module loads"),
        "{log}"
    );
    let not_attached = log.lines().filter(|l| l.contains("probe not attached"));
    assert!(
        not_attached.clone().all(|l| !l.contains("level=warn")),
        "{log}"
    );
}

/// The start's log lines of the ebpf collector, up to "listening", run through `wrapper`.
fn start_lines(wrapper: &[&str]) -> Vec<String> {
    let mut command = std::process::Command::new(wrapper.first().copied().unwrap_or(BINARY));
    command.args(wrapper.iter().skip(1));
    if !wrapper.is_empty() {
        command.arg(BINARY);
    }
    command.args(EBPF_ONLY);
    util::lines_until_listening(command)
}

/// Without CAP_SYSLOG under kernel.dmesg_restrict (the BPF capabilities kept), /dev/kmsg's
/// refusal is one line with its remedy, not one more warning from the read of the log's past.
#[test]
fn a_refused_kmsg_is_said_once_with_its_remedy() {
    let wrapper: &[&str] = if util::is_root() {
        &["setpriv", "--bounding-set=-syslog", "--inh-caps=-syslog"]
    } else {
        &[]
    };
    let lines = start_lines(wrapper);
    let restricted = std::fs::read_to_string("/proc/sys/kernel/dmesg_restrict").unwrap();
    let warnings: Vec<_> = lines.iter().filter(|l| l.contains("level=warn")).collect();
    let said = warnings.iter().filter(|l| l.contains("missing=cap_syslog"));
    assert_eq!(
        said.count(),
        usize::from(restricted.trim() == "1"),
        "{lines:#?}"
    );
    let again = warnings
        .iter()
        .filter(|l| l.contains("/dev/kmsg: Operation not permitted"));
    assert_eq!(again.count(), 0, "{lines:#?}");
}
