#!/usr/bin/env bash
# apt: prometheus victoria-metrics python3 python3-yaml
# The fleet end to end on a distributed path: 20 exporters on fault variants of the typical
# node, Prometheus in agent mode remote-writing into VictoriaMetrics, vmalert evaluating the
# rules of alerts/ against it; see fleet_e2e.py for what it checks.
#   tests/fleet/run.sh target/debug/hpcnode_exporter
# Everything listens on free loopback ports with temporary storage and stops on exit; every
# wait is bounded (at most 160 s in all).
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 <path of the hpcnode_exporter binary>" >&2
  exit 2
fi
exec timeout -k 10 200 /usr/bin/python3 "$(dirname "$0")/fleet_e2e.py" "$1"
