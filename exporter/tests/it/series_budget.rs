//! The series cost of a node, against README.md's "Series budget". The typical node
//! (tests/fixtures/typical_node.sh: two HCAs, one GPU ready for passthrough, 13 loaded modules,
//! three expected, the eBPF probes on, every default collector) and the large node
//! (tests/fixtures/large_node.sh: the same with 150 loaded modules and 8 single-port HCAs with
//! every hw_counter) each export about the number of series their budget line gives. More than
//! 10 % above it fails until the budget is raised on purpose (every node of a fleet pays for
//! each new series); more than 10 % below it fails too, so the budget stays a number to plan
//! with. What one more loaded module and one more HCA cost is measured on the large node and
//! must be what the README says, exactly.

use crate::util;

use std::fs;
use std::process::Command;

use util::golden::{sample_lines, scrape};
use util::{tests_dir, Exporter};

const TOLERANCE: f64 = 0.10;

/// The number in bold after `prefix` on a line of README.md, e.g. `Series budget of a
/// typical node: **345** series`.
fn readme_number(prefix: &str) -> usize {
    let readme = fs::read_to_string(tests_dir().join("../README.md")).expect("read README.md");
    let rest = readme
        .lines()
        .find_map(|l| l.split_once(prefix).map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("README.md has no line with {prefix:?}"));
    rest.strip_prefix("**")
        .and_then(|rest| rest.split("**").next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("README.md: no **number** after {prefix:?}"))
}

/// Builds a node root with `script` (and its `args`), scrapes the exporter on it, checks the
/// scrape holds `expected` lines, and returns how many series it exported.
fn node_series(script: &str, args: &[&str], expected: &[&str]) -> usize {
    let root = tempfile::tempdir().unwrap();
    let status = Command::new(tests_dir().join("fixtures").join(script))
        .arg(root.path())
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(status.success(), "{script} failed");
    let dir = root.path().display();
    let exporter = Exporter::start(&[
        &format!("--path.rootfs={dir}"),
        &format!("--path.procfs={dir}/proc"),
        &format!("--path.sysfs={dir}/sys"),
        "--collector.modules.expected=mlx5_core,ib_uverbs,ib_ipoib",
    ]);
    let text = scrape(&exporter);
    for line in expected {
        assert!(
            text.contains(line),
            "{script} {args:?}: no {line} in the scrape"
        );
    }
    // The kernel_log probe reads this machine's own kernel log, where the test suites' refused
    // loads of made-up modules (`hpcnode_<test><pid>`, one series each) pile up run after run:
    // they are the test machine's, not the node's.
    let own_lines = text
        .lines()
        .filter(|l| l.starts_with("hpcnode_kernel_log_events") && l.contains("module=\"hpcnode_"))
        .count();
    sample_lines(&text) - own_lines
}

/// Fails when `series` is more than 10 % away from the budget on README.md's `budget_line`.
fn assert_within_budget(node: &str, series: usize, budget_line: &str) {
    println!("{node}: {series} series");
    let budget = readme_number(budget_line);
    let (low, high) = (
        budget as f64 * (1.0 - TOLERANCE),
        budget as f64 * (1.0 + TOLERANCE),
    );
    println!("{node}: budget {budget} (allowed {low:.0} to {high:.0})");
    assert!(
        series as f64 <= high,
        "a {node} exports {series} series, more than 10 % above the budget of {budget} in \
         README.md: every node of a fleet pays for them. If the new series are worth it, raise the \
         budget there (and say why in the commit)"
    );
    assert!(
        series as f64 >= low,
        "a {node} exports {series} series, more than 10 % below the budget of {budget} in \
         README.md: lower the budget there"
    );
}

/// What the large node's scrape must show: its last HCA, and the modules beyond the typical
/// node's.
const LARGE_NODE_LINES: [&str; 3] = [
    "hpcnode_rdma_device_info{device=\"mlx5_7\"",
    "hpcnode_module_info{module=\"node_module_137\"",
    "hpcnode_pci_passthrough_ready{device=\"0000:01:00.0\"} 1",
];

#[test]
fn typical_node_stays_within_its_series_budget() {
    let series = node_series(
        "typical_node.sh",
        &[],
        &[
            "hpcnode_rdma_device_info{device=\"mlx4_0\"",
            "hpcnode_rdma_device_info{device=\"mlx5_0\"",
            "hpcnode_pci_passthrough_ready{device=\"0000:01:00.0\"} 1",
            "hpcnode_module_expected_loaded{module=\"ib_ipoib\"} 1",
        ],
    );
    assert_within_budget("typical node", series, "Series budget of a typical node: ");
}

/// One node built three times (each start of the exporter loads the eBPF probes): the budget,
/// then one more module, then one more HCA.
#[test]
fn large_node_stays_within_its_series_budget_at_the_readme_costs() {
    let base = node_series("large_node.sh", &["150", "8"], &LARGE_NODE_LINES);
    assert_within_budget("large node", base, "Series budget of a large node: ");
    let module = node_series("large_node.sh", &["151", "8"], &LARGE_NODE_LINES) - base;
    let hca = node_series("large_node.sh", &["150", "9"], &LARGE_NODE_LINES) - base;
    println!("one more loaded module: {module} series, one more single-port HCA: {hca}");
    assert_eq!(
        module,
        readme_number("One more loaded module: "),
        "README.md's cost of one more loaded module"
    );
    assert_eq!(
        hca,
        readme_number("One more single-port HCA: "),
        "README.md's cost of one more single-port HCA"
    );
}
