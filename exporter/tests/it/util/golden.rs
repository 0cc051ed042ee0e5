//! Golden-output helpers shared by the integration tests that compare a whole `/metrics` page
//! with `exporter/tests/golden/<case>.prom`.

use std::fs;

use std::path::Path;

use super::{run_with_stdin, Exporter};

/// The sample lines whose values differ run to run, with the value masked; the process's own
/// metrics left out (`process::process_metrics_are_the_client_libraries` checks them).
pub fn normalize(text: &str) -> String {
    text.lines()
        .filter(|line| !is_process_line(line))
        .map(|line| {
            if line.starts_with("hpcnode_scrape_collector_duration_seconds{") {
                let (series, _) = line.rsplit_once(' ').unwrap();
                format!("{series} <duration>")
            } else if line.starts_with("hpcnode_build_info{") {
                let start = line.find("revision=\"").unwrap() + "revision=\"".len();
                let end = start + line[start..].find('"').unwrap();
                format!("{}<revision>{}", &line[..start], &line[end..])
            } else {
                line.to_string()
            }
        })
        .map(|line| line + "\n")
        .collect()
}

/// A `process_*` sample, or its `# HELP`, `# TYPE` or `# UNIT` line.
fn is_process_line(line: &str) -> bool {
    let name = match line.strip_prefix("# ") {
        Some(comment) => comment.split(' ').nth(1).unwrap_or(""),
        None => line,
    };
    name.starts_with("process_")
}

pub fn assert_golden(case: &str, output: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{case}.prom"));
    let actual = normalize(output);
    if std::env::var_os("HPCNODE_UPDATE_GOLDEN").is_some() {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with HPCNODE_UPDATE_GOLDEN=1", path.display()));
    if actual != expected {
        let diff: Vec<String> = expected
            .lines()
            .filter(|l| !actual.lines().any(|a| a == *l))
            .map(|l| format!("- {l}"))
            .chain(
                actual
                    .lines()
                    .filter(|l| !expected.lines().any(|e| e == *l))
                    .map(|l| format!("+ {l}")),
            )
            .collect();
        panic!(
            "{case}: /metrics differs from {} (HPCNODE_UPDATE_GOLDEN=1 to accept):\n{}",
            path.display(),
            diff.join("\n")
        );
    }
}

/// `promtool check metrics` (the exposition lint Prometheus ships) must be clean.
pub fn assert_promtool_clean(text: &str) {
    let (ok, out) = run_with_stdin("promtool", &["check", "metrics"], text.as_bytes());
    assert!(
        ok && out.trim().is_empty(),
        "promtool check metrics:\n{out}"
    );
}

/// The OpenMetrics output must be accepted by the reference parser (Python prometheus_client's
/// strict OpenMetrics parser); prints the number of samples it read.
pub fn openmetrics_sample_count(text: &str) -> usize {
    let script = "import sys\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse\n\
        print(sum(len(f.samples) for f in parse(sys.stdin.read())))";
    let (ok, out) = run_with_stdin("/usr/bin/python3", &["-c", script], text.as_bytes());
    assert!(ok, "OpenMetrics parser rejected the output:\n{out}");
    out.trim().parse().unwrap()
}

pub fn scrape(exporter: &Exporter) -> String {
    let response = exporter.get("/metrics");
    assert_eq!(response.status, 200);
    response.text()
}

pub fn scrape_openmetrics(exporter: &Exporter) -> String {
    let response = exporter.get_with(
        "/metrics",
        &[("Accept", "application/openmetrics-text;version=1.0.0")],
    );
    assert_eq!(response.status, 200);
    response.text()
}

pub fn sample_lines(text: &str) -> usize {
    text.lines().filter(|l| !l.starts_with('#')).count()
}

/// Checks a fixture's output against its golden file and both format validators.
pub fn check_fixture_output(case: &str, exporter: &Exporter) -> String {
    let text = scrape(exporter);
    assert_golden(case, &text);
    assert_promtool_clean(&text);
    let openmetrics = scrape_openmetrics(exporter);
    assert_eq!(openmetrics_sample_count(&openmetrics), sample_lines(&text));
    text
}

/// Whether `line` is a whole line of the page.
pub fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

/// Fails naming every line of `lines` the page lacks.
pub fn assert_lines(text: &str, lines: &[&str]) {
    let missing: Vec<_> = lines.iter().filter(|l| !has_line(text, l)).collect();
    assert!(missing.is_empty(), "missing {missing:#?} in:\n{text}");
}

/// The errors `collector` counted, all kinds together.
pub fn errors_total(text: &str, collector: &str) -> u64 {
    let prefix = format!("hpcnode_collector_errors_total{{collector=\"{collector}\",");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}
