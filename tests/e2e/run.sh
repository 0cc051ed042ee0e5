#!/usr/bin/env bash
# apt: prometheus python3 python3-yaml
# End-to-end test of alerts/ and dashboards/ against a real Prometheus scraping the exporter
# on the fixture trees; see prometheus_e2e.py for what it checks.
#   tests/e2e/run.sh target/debug/hpcnode_exporter
# Starts its own exporters and Prometheus on free loopback ports with a temporary storage
# directory and stops them on exit; every wait is bounded (at most 240 s in all).
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 <path of the hpcnode_exporter binary>" >&2
  exit 2
fi
exec timeout -k 10 300 /usr/bin/python3 "$(dirname "$0")/prometheus_e2e.py" "$1"
