//! The series cost of a node: the exporter on a typical node (tests/fixtures/typical_node.sh:
//! two HCAs, one GPU ready for passthrough, the modules collector with expected modules, the
//! eBPF probes on, every default collector) exports about the number of series README.md's
//! "Series budget" gives. More than 10 % above it fails until the budget is raised on purpose
//! (every node of a fleet pays for each new series); more than 10 % below it fails too, so the
//! budget stays a number to plan with.

use crate::util;

use std::fs;
use std::process::Command;

use util::golden::{sample_lines, scrape};
use util::{tests_dir, Exporter};

const TOLERANCE: f64 = 0.10;
const BUDGET_LINE: &str = "Series budget of a typical node: **";

/// The budget from README.md's line `Series budget of a typical node: **N** series`.
fn readme_budget() -> usize {
    let readme = fs::read_to_string(tests_dir().join("../README.md")).expect("read README.md");
    let line = readme
        .lines()
        .find_map(|l| l.split_once(BUDGET_LINE).map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("README.md has no line with {BUDGET_LINE:?}"));
    line.split("**")
        .next()
        .unwrap()
        .parse()
        .expect("the budget is a number")
}

#[test]
fn typical_node_stays_within_its_series_budget() {
    let root = tempfile::tempdir().unwrap();
    let status = Command::new(tests_dir().join("fixtures/typical_node.sh"))
        .arg(root.path())
        .status()
        .expect("run typical_node.sh");
    assert!(status.success(), "typical_node.sh failed");
    let dir = root.path().display();
    let exporter = Exporter::start(&[
        &format!("--path.rootfs={dir}"),
        &format!("--path.procfs={dir}/proc"),
        &format!("--path.sysfs={dir}/sys"),
        "--collector.modules.expected=mlx5_core,ib_uverbs,ib_ipoib",
    ]);
    let text = scrape(&exporter);
    // The typical node is what the budget says: both HCAs, the GPU, the expected modules.
    for line in [
        "hpcnode_rdma_device_info{device=\"mlx4_0\"",
        "hpcnode_rdma_device_info{device=\"mlx5_0\"",
        "hpcnode_pci_passthrough_ready{device=\"0000:01:00.0\"} 1",
        "hpcnode_module_expected_loaded{module=\"ib_ipoib\"} 1",
    ] {
        assert!(text.contains(line), "typical node lacks {line}");
    }
    // The kernel_log probe reads this machine's own kernel log, where the test suites' refused
    // loads of made-up modules (`hpcnode_<test><pid>`, one series each) pile up run after run:
    // they are the test machine's, not the typical node's.
    let own_lines = text
        .lines()
        .filter(|l| l.starts_with("hpcnode_kernel_log_events") && l.contains("module=\"hpcnode_"))
        .count();
    let series = sample_lines(&text) - own_lines;
    let budget = readme_budget();
    let (low, high) = (
        budget as f64 * (1.0 - TOLERANCE),
        budget as f64 * (1.0 + TOLERANCE),
    );
    println!("typical node: {series} series, budget {budget} (allowed {low:.0} to {high:.0})");
    assert!(
        series as f64 <= high,
        "a typical node exports {series} series, more than 10 % above the budget of {budget} in \
         README.md: every node of a fleet pays for them. If the new series are worth it, raise the \
         budget there (and say why in the commit)"
    );
    assert!(
        series as f64 >= low,
        "a typical node exports {series} series, more than 10 % below the budget of {budget} in \
         README.md: lower the budget there"
    );
}
