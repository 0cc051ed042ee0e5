#!/usr/bin/env bash
# The whole test suite: Rust unit and integration tests (golden end-to-end on fixture trees,
# HTTP, command line, METRICS.md catalog, series budget), then the rule and dashboard checks,
# the end-to-end test against a real Prometheus, the fleet test (Prometheus agent,
# VictoriaMetrics, vmalert) and the dashboards' type check against @grafana/schema; as root,
# the packages (tests/packaging: built, linted, installed into a Debian root and with
# rpm --root, run as the service user) and the kernel lab (tests/lab: Debian kernels in qemu,
# the exporter checked inside).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then tests/setup.sh; fi
cargo build --locked --bins
cargo test --locked --workspace
tests/rules/check.sh
tests/e2e/run.sh target/debug/hpcnode_exporter
tests/fleet/run.sh target/debug/hpcnode_exporter
tests/grafana_schema/check.sh
tests/packaging/run.sh
if [ "$(id -u)" = 0 ]; then
  # The lab runs the binary the packages ship (tests/packaging built it above): the exporter as
  # deployed, and under TCG its scrapes cost about a third of the debug build's CPU.
  tests/lab/run.sh --binary target/x86_64-unknown-linux-gnu/release/hpcnode_exporter
else
  echo "tests/run.sh: kernel lab not run: it needs root for tests/setup.sh's packages (CI runs as root)"
fi
