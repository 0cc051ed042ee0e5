#!/usr/bin/env bash
# The whole test suite: Rust unit and integration tests (golden end-to-end on fixture trees,
# HTTP, command line, METRICS.md catalog), then the rule and dashboard checks and the
# end-to-end test against a real Prometheus.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then tests/setup.sh; fi
cargo build --locked --bins
cargo test --locked --workspace
tests/rules/check.sh
tests/rules/prometheus_e2e.sh target/debug/hpcnode_exporter
