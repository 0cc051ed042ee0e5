use std::path::Path;

use super::*;
use crate::collectors;

/// A golden page (exporter/tests/golden/), its masked durations given a value.
fn golden(case: &str) -> Vec<Sample> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/{case}.prom"));
    let text = std::fs::read_to_string(path).unwrap();
    exposition::parse(&text.replace(" <duration>", " 0.001")).unwrap()
}

fn built_in() -> Vec<Chosen> {
    config::parse(Path::new("checks.yml"), b"").unwrap()
}

fn lines(verdict: &Verdict) -> Vec<String> {
    verdict.failures.iter().map(ToString::to_string).collect()
}

#[test]
fn a_healthy_page_is_no_line_and_nothing_it_cannot_tell() {
    let verdict = judge(&golden("procfs"), &built_in());
    assert_eq!(verdict, Verdict::default());
}

#[test]
fn failures_are_lines_in_the_checks_order() {
    let verdict = judge(&golden("pci_failing_host"), &built_in());
    let lines = lines(&verdict);
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert!(lines[0].starts_with("ERROR: hpcnode: pci_driver 0000:3b:00.0: no driver bound"));
    assert!(lines[1].starts_with("ERROR: hpcnode: pci_driver 0000:5e:00.0: no driver bound"));
    assert!(lines[2].starts_with("ERROR: hpcnode: pci_passthrough 0000:3b:00.0: "));
    assert_eq!(
        lines[3],
        "ERROR: hpcnode: pci_passthrough 0000:86:00.0: meant for passthrough but not ready; failing: present"
    );
    assert!(verdict.cannot_tell.is_empty());
}

#[test]
fn the_checks_file_turns_checks_off_and_ignores_devices() {
    let page = golden("pci_failing_host");
    let yaml = "checks:\n  pci_passthrough:\n    enabled: false\n  pci_driver:\n    ignore: ['0000:3b:00\\.0']\n";
    let chosen = config::parse(Path::new("checks.yml"), yaml.as_bytes()).unwrap();
    let lines = lines(&judge(&page, &chosen));
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].starts_with("ERROR: hpcnode: pci_driver 0000:5e:00.0: "));
}

/// A collector a check reads failed: the check cannot say the node is fine (stderr, exit 3),
/// and what the page does show still fails (exit 1 wins).
#[test]
fn a_failed_collector_is_cannot_tell_beside_the_failures_it_shows() {
    let mut page = golden("rdma_edge");
    let success = page
        .iter_mut()
        .find(|s| s.name == "hpcnode_scrape_collector_success" && s.label("collector") == "rdma")
        .unwrap();
    success.value = 0.0;
    let verdict = judge(&page, &built_in());
    assert_eq!(
        verdict.cannot_tell,
        ["the rdma collector failed on this page (hpcnode_scrape_collector_success 0), so rdma_port_state, rdma_port_physical_state, rdma_health_reporter cannot say the node is fine"]
    );
    assert_eq!(
        lines(&verdict),
        [
            "ERROR: hpcnode: rdma_port_state mlx4_1/1: port state 1 (DOWN), not ACTIVE",
            "ERROR: hpcnode: rdma_port_physical_state mlx4_1/1: physical state 2 (Polling), not LinkUp",
        ]
    );
    // Its checks turned off: nothing left it cannot tell.
    let off = "checks:\n  rdma_port_state: {enabled: false}\n  rdma_port_physical_state: {enabled: false}\n  rdma_health_reporter: {enabled: false}\n";
    let chosen = config::parse(Path::new("checks.yml"), off.as_bytes()).unwrap();
    assert_eq!(judge(&page, &chosen), Verdict::default());
}

#[test]
fn a_check_whose_page_is_still_being_read_cannot_tell() {
    let page =
        exposition::parse("hpcnode_ebpf_probe_attached{probe=\"kernel_log\",hook=\"kmsg\"} 1\n")
            .unwrap();
    let verdict = judge(&page, &built_in());
    assert!(verdict.pending);
    assert_eq!(
        verdict.cannot_tell,
        ["module_refused_before_start: the kernel log from before the exporter started is still being read"]
    );
}

/// Whatever a page's labels hold, a failure is one line.
#[test]
fn a_failure_is_one_line() {
    let text = "hpcnode_module_expected_loaded{module=\"evil\\nERROR: hpcnode: fake\"} 0\n";
    let page = exposition::parse(text).unwrap();
    assert_eq!(page[0].label("module"), "evil\nERROR: hpcnode: fake");
    assert_eq!(
        lines(&judge(&page, &built_in())),
        ["ERROR: hpcnode: module_expected evil?ERROR: hpcnode: fake: expected module not loaded (neither Live nor built in)"]
    );
}

fn parse_args(args: &[&str]) -> Result<Invocation, UsageError> {
    let args: Vec<OsString> = ["hpcnode_exporter", "check"]
        .iter()
        .chain(args)
        .map(OsString::from)
        .collect();
    parse(&args, &collectors::ALL)
}

fn usage(args: &[&str]) -> String {
    match parse_args(args) {
        Ok(_) => panic!("{args:?} accepted"),
        Err(err) => err.to_string(),
    }
}

fn run(args: &[&str]) -> CheckRun {
    match parse_args(args) {
        Ok(Invocation::Run(run)) => *run,
        other => panic!("{args:?}: {other:?}"),
    }
}

#[test]
fn the_command_line() {
    let collect = run(&["--collector.disable-defaults", "--collector.modules"]);
    assert!(matches!(&collect.page, PageSource::Collect(c) if c.collectors.len() == 1));
    assert_eq!(
        collect.checks_file,
        Path::new("/etc/hpcnode_exporter/checks.yml")
    );
    assert!(!collect.checks_file_given);
    // A health check logs warnings, not the exporter's info lines.
    assert_eq!(collect.log_level, Level::Warn);
    let remote = run(&["--from", "http://node01:10133", "--checks", "c.yml"]);
    match remote.page {
        PageSource::Remote {
            source,
            config,
            timeout,
        } => {
            assert_eq!(source, Source::parse("http://node01:10133").unwrap());
            assert_eq!(config, None);
            assert_eq!(timeout, Duration::from_secs(10));
        }
        other => panic!("{other:?}"),
    }
    assert!(remote.checks_file_given);
    assert!(
        matches!(parse_args(&["--help"]), Ok(Invocation::Print(text)) if text.contains("--from.config"))
    );
}

#[test]
fn command_lines_it_refuses() {
    for (args, message) in [
        (
            &["--from", "node01:10133"][..],
            "invalid --from \"node01:10133\": the scheme must be http or https",
        ),
        (&["--from.config", "f.yml"], "--from.config needs --from"),
        (&["--from.timeout", "5s"], "--from.timeout needs --from"),
        (
            &["--from", "http://n:1/", "--from.timeout", "1m"],
            "invalid --from.timeout \"1m\": must be at most 50s",
        ),
        (
            &["--from", "http://n:1/", "--path.sysfs", "/tmp/sys"],
            "--path.sysfs cannot be used with --from",
        ),
        (
            &["--from", "http://n:1/", "--no-collector.ebpf"],
            "--no-collector.ebpf cannot be used with --from",
        ),
        (
            &["--web.listen-address", ":1"],
            "unexpected argument '--web.listen-address'",
        ),
        (&["--scrape.workers", "0"], "invalid --scrape.workers"),
    ] {
        let err = usage(args);
        assert!(err.contains(message), "{args:?}: {err}");
    }
}
