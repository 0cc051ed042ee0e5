//! METRICS.md is the catalog: every emitted metric is listed there, and every listed metric is
//! produced by some fixture tree.

mod util;

use std::collections::BTreeSet;

use util::Exporter;

/// Backticked `hpcnode_*` names in the first column of METRICS.md's tables.
fn catalog() -> BTreeSet<String> {
    let text = std::fs::read_to_string(util::tests_dir().join("../METRICS.md")).unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .filter(|name| name.starts_with("hpcnode_"))
        .map(str::to_string)
        .collect()
}

/// Exporter runs whose outputs together must produce every metric in METRICS.md: one line
/// per collector, its flags and the fixture trees (under tests/fixtures) it reads.
const RUNS: &[(&[&str], &[&str])] = &[
    (&["--collector.rdma"], &["procfs", "rdma_edge", "rdma_bad"]),
    (
        &[
            "--collector.pci",
            "--collector.pci.nova-config=../tests/fixtures/pci_host/etc/kolla/config/nova.conf",
            "--collector.pci.nova-config=../tests/fixtures/pci_host/etc/kolla/config/nova/nova-compute.conf",
        ],
        &["pci_host"],
    ),
    (
        &["--collector.pci", "--collector.pci.passthrough-device=10de:1eb8"],
        &["pci_failing_host"],
    ),
];

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
    let text = Exporter::start(&args).get("/metrics").text();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

#[test]
fn metrics_md_matches_what_fixtures_produce() {
    let listed = catalog();
    assert!(listed.len() >= 20, "catalog parse found only {listed:?}");
    let produced: BTreeSet<String> = RUNS
        .iter()
        .flat_map(|(flags, fixtures)| fixtures.iter().map(|f| emitted(flags, f)))
        .flatten()
        .collect();
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
    let described: BTreeSet<String> = hpcnode_exporter::collector::FRAMEWORK_METRICS
        .iter()
        .chain(
            hpcnode_exporter::collector::COLLECTORS
                .iter()
                .flat_map(|registration| registration.metrics),
        )
        .map(|desc| desc.sample_name())
        .collect();
    assert_eq!(described, listed);
}
