use std::path::Path;

use regex::Regex;

use super::*;
use crate::exposition::parse;

fn repository() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// A golden page (the exporter's output on a fixture tree), its masked durations given a
/// value.
fn golden(case: &str) -> String {
    let path = repository().join(format!("exporter/tests/golden/{case}.prom"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.replace(" <duration>", " 0.001")
}

/// `text` with its line `from` (whole) replaced by `to`.
fn edit(text: &str, from: &str, to: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.iter().filter(|l| **l == from).count(),
        1,
        "no single {from:?}"
    );
    lines
        .iter()
        .map(|line| if *line == from { to } else { line })
        .map(|line| format!("{line}\n"))
        .collect()
}

/// What `check` finds on `text`, with its built-in threshold or `threshold`.
fn findings_at(check: &Check, text: &str, threshold: Option<f64>) -> Vec<(String, String)> {
    let samples = parse(text).unwrap();
    let threshold = threshold.unwrap_or(check.threshold.as_ref().map_or(f64::NAN, |t| t.default));
    (check.judge)(&Page::new(&samples), threshold)
        .into_iter()
        .map(|f| (f.device, f.reason))
        .collect()
}

fn findings(check: &Check, text: &str) -> Vec<(String, String)> {
    findings_at(check, text, None)
}

fn devices(check: &Check, text: &str) -> Vec<String> {
    findings(check, text)
        .into_iter()
        .map(|(device, _)| device)
        .collect()
}

fn devices_at(check: &Check, text: &str, threshold: f64) -> Vec<String> {
    let findings = findings_at(check, text, Some(threshold));
    findings.into_iter().map(|(device, _)| device).collect()
}

// The checks against their alerts.

/// An alert's expression, its white space made single spaces.
fn alert_expr(file: &str, alert: &str) -> String {
    let path = repository().join("alerts").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let yaml: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let rules = yaml["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_sequence().unwrap());
    let expr = rules
        .into_iter()
        .find(|rule| rule["alert"].as_str() == Some(alert))
        .unwrap_or_else(|| panic!("no alert {alert} in alerts/{file}"))["expr"]
        .as_str()
        .unwrap()
        .to_string();
    expr.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A selector as PromQL writes it.
fn selector_text(selector: &Selector) -> String {
    match selector.label {
        None => selector.metric.to_string(),
        Some((name, how, value)) => {
            let how = match how {
                Match::Equal => "=",
                Match::NotEqual => "!=",
                Match::Regex => "=~",
                Match::NotRegex => "!~",
            };
            format!("{}{{{name}{how}\"{value}\"}}", selector.metric)
        }
    }
}

/// What `term` must be in its alert's expression: the selector, then (an aggregation's `)`
/// between) the operator and the value, or `on () group_left () hpcnode:threshold{...}`.
fn term_pattern(term: &Term, threshold: Option<&Threshold>) -> String {
    let selector =
        |s: &Selector| format!(r"(^|[^a-zA-Z0-9_:]){}", regex::escape(&selector_text(s)));
    let bound = |op: Op, bound: Bound| match bound {
        Bound::Value(value) => format!(r" ?\)? ?{} ?{}(\)| |$)", regex::escape(op.as_str()), value),
        Bound::Threshold => format!(
            r#" ?\)? ?{} ?on ?\( ?\) ?group_left ?\( ?\) ?hpcnode:threshold\{{threshold="{}"\}}"#,
            regex::escape(op.as_str()),
            threshold
                .expect("a check comparing with its threshold has one")
                .name
        ),
    };
    match term {
        Term::Compare(compare) => selector(&compare.selector) + &bound(compare.op, compare.bound),
        Term::Ratio(ratio) => format!(
            r"{} ?/ ?ignoring ?\( ?{} ?\) ?{}{}",
            selector(&ratio.numerator),
            ratio.ignoring,
            regex::escape(&selector_text(&ratio.denominator)),
            bound(ratio.op, Bound::Threshold)
        ),
        Term::Series(series) => selector(series),
    }
}

/// A check judges by its alert's metrics and comparisons: a metric renamed, a matcher, an
/// operator or a value changed on either side fails here.
#[test]
fn every_check_compares_as_its_alert_does() {
    for check in &ALL {
        let expr = alert_expr(check.rules, check.alert);
        assert!(!check.terms.is_empty(), "{}", check.name);
        for term in check.terms {
            let pattern = term_pattern(term, check.threshold.as_ref());
            assert!(
                Regex::new(&pattern).unwrap().is_match(&expr),
                "{} ({}): {pattern:?} is not in its alert's expression {expr:?}",
                check.name,
                check.alert
            );
        }
    }
}

/// What the test above would miss is what it is for: a check's comparison not its alert's.
#[test]
fn a_comparison_other_than_the_alerts_is_seen() {
    let expr = alert_expr("modules.rules.yml", "HpcnodeModuleExpectedMissing");
    static OTHER_VALUE: Compare = compare(metric("hpcnode_module_expected_loaded"), Op::Eq, 1.0);
    static OTHER_OP: Compare = compare(metric("hpcnode_module_expected_loaded"), Op::Ne, 0.0);
    static OTHER_METRIC: Compare = compare(metric("hpcnode_module_expected"), Op::Eq, 0.0);
    for term in [&OTHER_VALUE, &OTHER_OP, &OTHER_METRIC] {
        let pattern = term_pattern(&Term::Compare(term), None);
        assert!(!Regex::new(&pattern).unwrap().is_match(&expr), "{pattern}");
    }
    let ours = term_pattern(&Term::Compare(&EXPECTED_NOT_LOADED), None);
    assert!(Regex::new(&ours).unwrap().is_match(&expr));
}

/// A check's built-in threshold is the one `alerts/config.rules.yml` gives its alert.
#[test]
fn thresholds_are_the_alerts() {
    let text = std::fs::read_to_string(repository().join("alerts/config.rules.yml")).unwrap();
    let file: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let rules: Vec<&serde_norway::Value> = file["groups"][0]["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .collect();
    let mut with_threshold = 0;
    for check in &ALL {
        let Some(threshold) = &check.threshold else {
            continue;
        };
        with_threshold += 1;
        let rule = rules
            .iter()
            .find(|rule| rule["labels"]["threshold"].as_str() == Some(threshold.name))
            .unwrap_or_else(|| panic!("no threshold {} in config.rules.yml", threshold.name));
        let expr = rule["expr"].as_str().unwrap();
        assert_eq!(
            expr,
            format!("vector({})", threshold.default),
            "{}",
            check.name
        );
    }
    assert!(with_threshold >= 2);
}

#[test]
fn names_are_unique_and_collectors_exist() {
    let snake_case = Regex::new("^[a-z][a-z_]*$").unwrap();
    for (index, check) in ALL.iter().enumerate() {
        assert!(snake_case.is_match(check.name));
        assert!(
            ALL[..index].iter().all(|other| other.name != check.name),
            "{}",
            check.name
        );
        assert!(
            crate::collectors::ALL
                .iter()
                .any(|c| c.name == check.collector),
            "{}: no collector {}",
            check.name,
            check.collector
        );
    }
}

// Each check on real pages (exporter/tests/golden/), one value edited to break or mend them.

#[test]
fn module_expected() {
    let rhel7 = golden("modules_rhel7");
    assert_eq!(devices(&MODULE_EXPECTED, &rhel7), ["vfio_pci"]);
    let mended = edit(
        &rhel7,
        "hpcnode_module_expected_loaded{module=\"vfio_pci\"} 0",
        "hpcnode_module_expected_loaded{module=\"vfio_pci\"} 1",
    );
    assert_eq!(devices(&MODULE_EXPECTED, &mended), Vec::<String>::new());
}

#[test]
fn module_file_refused() {
    let signed = golden("modules_signed_files");
    assert_eq!(
        findings(&MODULE_FILE_REFUSED, &signed),
        [
            ("lab_unsigned".to_string(), "extra/lab_unsigned.ko is not signed, and the kernel enforces module signatures: its next load fails".to_string()),
            ("lab_foreign_keyid".to_string(), "updates/dkms/lab_foreign_keyid.ko.zst is signed by keyid:d1e7c1326572d660b7d3e4e9cfe004533667504c, a key the kernel does not hold, and the kernel enforces module signatures: its next load fails".to_string()),
        ]
    );
    // Not enforced: the kernel loads them (tainted); nothing to refuse.
    let lax = edit(
        &signed,
        "hpcnode_module_sig_enforce 1",
        "hpcnode_module_sig_enforce 0",
    );
    assert_eq!(devices(&MODULE_FILE_REFUSED, &lax), Vec::<String>::new());
    // Enforced by lockdown alone.
    let locked = format!("{lax}hpcnode_kernel_lockdown_mode{{mode=\"none\"}} 0\nhpcnode_kernel_lockdown_mode{{mode=\"integrity\"}} 1\n");
    assert_eq!(
        devices(&MODULE_FILE_REFUSED, &locked),
        ["lab_unsigned", "lab_foreign_keyid"]
    );
    let unlocked = format!("{lax}hpcnode_kernel_lockdown_mode{{mode=\"none\"}} 1\nhpcnode_kernel_lockdown_mode{{mode=\"integrity\"}} 0\n");
    assert_eq!(
        devices(&MODULE_FILE_REFUSED, &unlocked),
        Vec::<String>::new()
    );
}

/// The `ebpf` collector's series as collectors/ebpf/probes/kernel_log.rs `samples` writes them
/// (labels `event`, `source`; no golden page has them: the probe needs a kernel).
const KERNEL_LOG: &str = "hpcnode_ebpf_probe_attached{probe=\"kernel_log\",hook=\"kmsg\"} 1\n\
    hpcnode_kernel_log_before_start_complete 1\n\
    hpcnode_kernel_log_events_before_start{event=\"module_verification_failed\",source=\"kernel_log\",module=\"lab\"} 1\n\
    hpcnode_kernel_log_events_before_start{event=\"unsigned_module_rejected\",source=\"kernel_log\"} 2\n\
    hpcnode_kernel_log_events_before_start{event=\"lockdown_refused_module\",source=\"kernel_log\"} 0\n";

#[test]
fn module_refused_before_start() {
    assert_eq!(
        findings(&MODULE_REFUSED_BEFORE_START, KERNEL_LOG),
        [("unsigned_module_rejected".to_string(), "the kernel log held 2 such refusals of a module from before the exporter started (they stay until a reboot)".to_string())]
    );
    let none = KERNEL_LOG.replace("source=\"kernel_log\"} 2", "source=\"kernel_log\"} 0");
    assert_eq!(
        devices(&MODULE_REFUSED_BEFORE_START, &none),
        Vec::<String>::new()
    );
    let samples = parse(KERNEL_LOG).unwrap();
    assert_eq!(
        (MODULE_REFUSED_BEFORE_START.pending)(&Page::new(&samples)),
        None
    );
    // Attached, the records from before start not counted yet.
    let reading = KERNEL_LOG.replace("hpcnode_kernel_log_before_start_complete 1\n", "");
    let samples = parse(&reading).unwrap();
    assert!((MODULE_REFUSED_BEFORE_START.pending)(&Page::new(&samples)).is_some());
    // Not attached (no CAP_BPF or no hook): nothing will come, nothing to wait for.
    let detached = reading.replace("hook=\"kmsg\"} 1", "hook=\"none\"} 0");
    let samples = parse(&detached).unwrap();
    assert_eq!(
        (MODULE_REFUSED_BEFORE_START.pending)(&Page::new(&samples)),
        None
    );
}

#[test]
fn rdma_port_state() {
    let healthy = golden("procfs");
    assert_eq!(devices(&RDMA_PORT_STATE, &healthy), Vec::<String>::new());
    let edge = golden("rdma_edge");
    assert_eq!(
        findings(&RDMA_PORT_STATE, &edge),
        [(
            "mlx4_1/1".to_string(),
            "port state 1 (DOWN), not ACTIVE".to_string()
        )]
    );
    for (state, fails) in [(2, true), (3, true), (5, false)] {
        let text = edit(
            &healthy,
            "hpcnode_rdma_port_state_id{device=\"mlx4_0\",port=\"2\"} 4",
            &format!("hpcnode_rdma_port_state_id{{device=\"mlx4_0\",port=\"2\"}} {state}"),
        );
        let expected: &[&str] = if fails { &["mlx4_0/2"] } else { &[] };
        assert_eq!(devices(&RDMA_PORT_STATE, &text), expected, "state {state}");
    }
}

#[test]
fn rdma_port_physical_state() {
    let healthy = golden("procfs");
    // mlx5_0/1 shows physical state 4 with state ACTIVE (the firmware quirk): not a failure.
    assert!(
        healthy.contains("hpcnode_rdma_port_physical_state_id{device=\"mlx5_0\",port=\"1\"} 4\n")
    );
    assert_eq!(
        devices(&RDMA_PORT_PHYSICAL_STATE, &healthy),
        Vec::<String>::new()
    );
    let training = edit(
        &healthy,
        "hpcnode_rdma_port_state_id{device=\"mlx5_0\",port=\"1\"} 4",
        "hpcnode_rdma_port_state_id{device=\"mlx5_0\",port=\"1\"} 2",
    );
    assert_eq!(
        findings(&RDMA_PORT_PHYSICAL_STATE, &training),
        [(
            "mlx5_0/1".to_string(),
            "physical state 4 (PortConfigurationTraining), not LinkUp".to_string()
        )]
    );
    assert_eq!(
        devices(&RDMA_PORT_PHYSICAL_STATE, &golden("rdma_edge")),
        ["mlx4_1/1"]
    );
}

/// The rdma collector's reporter series as collectors/rdma/devlink_health.rs writes them
/// (`device`, `reporter`, `devlink_port`): mlx5's four, `fw_fatal` in error (a real device
/// over devlink netlink; no golden page has them).
const REPORTERS: &str = "hpcnode_rdma_device_health_reporter_healthy{device=\"mlx5_0\",reporter=\"fw\",devlink_port=\"\"} 1\n\
    hpcnode_rdma_device_health_reporter_healthy{device=\"mlx5_0\",reporter=\"fw_fatal\",devlink_port=\"\"} 0\n\
    hpcnode_rdma_device_health_reporter_healthy{device=\"mlx5_0\",reporter=\"tx\",devlink_port=\"65535\"} 1\n\
    hpcnode_rdma_device_health_reporter_healthy{device=\"mlx5_0\",reporter=\"rx\",devlink_port=\"65535\"} 0\n";

#[test]
fn rdma_health_reporter() {
    assert_eq!(
        findings(&RDMA_HEALTH_REPORTER, REPORTERS),
        [
            (
                "mlx5_0".to_string(),
                "devlink health reporter fw_fatal in error".to_string()
            ),
            (
                "mlx5_0".to_string(),
                "devlink health reporter rx of devlink port 65535 in error".to_string()
            ),
        ]
    );
    let healthy = REPORTERS.replace("} 0\n", "} 1\n");
    assert_eq!(
        devices(&RDMA_HEALTH_REPORTER, &healthy),
        Vec::<String>::new()
    );
}

/// The rdma_userspace collector's provider series (collectors/rdma_userspace/providers.rs):
/// one per device, the status that holds.
const PROVIDERS: &str =
    "hpcnode_rdma_device_provider{device=\"mlx5_0\",provider=\"mlx5\",status=\"ok\"} 1\n\
    hpcnode_rdma_device_provider{device=\"rxe0\",provider=\"rxe\",status=\"abi_mismatch\"} 1\n\
    hpcnode_rdma_device_provider{device=\"bnxt_re0\",provider=\"\",status=\"missing\"} 1\n\
    hpcnode_rdma_device_provider{device=\"efa_0\",provider=\"efa\",status=\"no_libibverbs\"} 1\n";

#[test]
fn rdma_provider() {
    assert_eq!(
        findings(&RDMA_PROVIDER, PROVIDERS),
        [
            ("rxe0".to_string(), "libibverbs provider rxe abi_mismatch: verbs applications do not see the device".to_string()),
            ("bnxt_re0".to_string(), "libibverbs provider of an unknown driver missing: verbs applications do not see the device".to_string()),
        ]
    );
    let fixed = PROVIDERS.replace("status=\"abi_mismatch\"", "status=\"ok\"");
    assert_eq!(devices(&RDMA_PROVIDER, &fixed), ["bnxt_re0"]);
}

#[test]
fn rdma_verbs_visible() {
    let text = "hpcnode_rdma_device_visible_to_verbs{device=\"mlx5_0\"} 1\n\
        hpcnode_rdma_device_visible_to_verbs{device=\"mlx5_1\"} 0\n";
    assert_eq!(devices(&RDMA_VERBS_VISIBLE, text), ["mlx5_1"]);
    assert_eq!(
        devices(&RDMA_VERBS_VISIBLE, &text.replace("} 0", "} 1")),
        Vec::<String>::new()
    );
}

#[test]
fn pci_driver() {
    let failing = golden("pci_failing_host");
    assert_eq!(
        findings(&PCI_DRIVER, &failing),
        [
            ("0000:3b:00.0".to_string(), "no driver bound (0x10de:0x1eb8, class 0x030200); modules whose aliases claim it: nouveau (blacklisted), nvidia".to_string()),
            // An HCA (ConnectX, mlx5_core's alias replaced by an install rule) without a driver.
            ("0000:5e:00.0".to_string(), "no driver bound (0x15b3:0x1013, class 0x020700); modules whose aliases claim it: mlx5_compat, mlx5_core (a modprobe.d install rule replaces it)".to_string()),
        ]
    );
    let bound = edit(
        &failing,
        "hpcnode_pci_driver_bound{device=\"0000:5e:00.0\"} 0",
        "hpcnode_pci_driver_bound{device=\"0000:5e:00.0\"} 1",
    );
    assert_eq!(devices(&PCI_DRIVER, &bound), ["0000:3b:00.0"]);
    assert_eq!(
        devices(&PCI_DRIVER, &golden("pci_host_kolla")),
        Vec::<String>::new()
    );
}

#[test]
fn pci_passthrough() {
    let failing = golden("pci_failing_host");
    assert_eq!(
        findings(&PCI_PASSTHROUGH, &failing),
        [
            ("0000:3b:00.0".to_string(), "meant for passthrough but not ready; failing: iommu_enabled, vfio_bound, group_isolated, bars_assigned".to_string()),
            ("0000:86:00.0".to_string(), "meant for passthrough but not ready; failing: present".to_string()),
        ]
    );
    let ready = edit(
        &failing,
        "hpcnode_pci_passthrough_ready{device=\"0000:86:00.0\"} 0",
        "hpcnode_pci_passthrough_ready{device=\"0000:86:00.0\"} 1",
    );
    assert_eq!(devices(&PCI_PASSTHROUGH, &ready), ["0000:3b:00.0"]);
}

#[test]
fn pci_link_width_with_its_threshold() {
    let host = golden("pci_host_kolla");
    // Two GPUs at x4 and a NIC at x8 of x16; the others at x16.
    assert_eq!(
        findings(&PCI_LINK_WIDTH, &host),
        [
            (
                "0000:06:00.0".to_string(),
                "PCIe link x4 of x16, a share of 0.25 below 1".to_string()
            ),
            (
                "0000:07:00.0".to_string(),
                "PCIe link x4 of x16, a share of 0.25 below 1".to_string()
            ),
            (
                "0000:d8:00.0".to_string(),
                "PCIe link x8 of x16, a share of 0.5 below 1".to_string()
            ),
        ]
    );
    // A site's threshold: half the lanes tolerated, a quarter not.
    assert_eq!(
        devices_at(&PCI_LINK_WIDTH, &host, 0.5),
        ["0000:06:00.0", "0000:07:00.0"]
    );
    let retrained = edit(
        &host,
        "hpcnode_pci_link_width{device=\"0000:06:00.0\",link=\"current\"} 4",
        "hpcnode_pci_link_width{device=\"0000:06:00.0\",link=\"current\"} 16",
    );
    assert_eq!(
        devices_at(&PCI_LINK_WIDTH, &retrained, 0.5),
        ["0000:07:00.0"]
    );
}

#[test]
fn mic_card_state() {
    assert_eq!(
        devices(&MIC_CARD_STATE, &golden("mic_mpss3")),
        Vec::<String>::new(),
        "booting is its own alert"
    );
    assert_eq!(
        findings(&MIC_CARD_STATE, &golden("mic_mpss4")),
        [(
            "mic1".to_string(),
            "card state error, not online".to_string()
        )]
    );
}

#[test]
fn mic_die_temperature_with_its_threshold() {
    let cards = golden("mic_mpss3");
    assert_eq!(devices(&MIC_DIE_TEMPERATURE, &cards), Vec::<String>::new());
    let hot = edit(
        &cards,
        "hpcnode_mic_temperature_celsius{device=\"mic0\",sensor=\"die\",source=\"micras\"} 50.0",
        "hpcnode_mic_temperature_celsius{device=\"mic0\",sensor=\"die\",source=\"micras\"} 93.0",
    );
    assert_eq!(
        findings(&MIC_DIE_TEMPERATURE, &hot),
        [(
            "mic0".to_string(),
            "die temperature 93 degrees C, above 90".to_string()
        )]
    );
    assert_eq!(
        devices_at(&MIC_DIE_TEMPERATURE, &hot, 95.0),
        Vec::<String>::new()
    );
}
