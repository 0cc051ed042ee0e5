#!/usr/bin/env bash
# apt: prometheus python3 python3-yaml
#
# Static checks of the Prometheus rules (alerts/) and Grafana dashboards (dashboards/):
#   promtool check rules          every rule file loads and passes promtool's lint
#   promtool test rules           the unit tests in alerts/tests/ (every alert fires and stays
#                                 silent where it must; the recording rules' arithmetic)
#   lint.py rules|coverage|dashboards|promql|metric-names   see tests/rules/lint.py
#   lint_selftest.py              each lint rejects a tree broken on purpose
# Runs from anywhere; exits non-zero when any check fails. Last line: "rules: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."

PY=/usr/bin/python3  # Debian's python3, which has python3-yaml
passed=0
failed=0
failures=()

run() {
  local name=$1
  shift
  local out
  if out=$(timeout 120 "$@" 2>&1); then
    passed=$((passed + 1))
    printf 'ok    %s\n' "$name"
  else
    failed=$((failed + 1))
    failures+=("$name")
    printf 'FAIL  %s\n%s\n' "$name" "$out"
  fi
}

for tool in promtool "$PY"; do
  command -v "$tool" >/dev/null || { echo "rules: $tool not found (apt-get install prometheus python3 python3-yaml)"; exit 1; }
done
"$PY" -c 'import yaml' 2>/dev/null || { echo "rules: python3-yaml missing (apt-get install python3-yaml)"; exit 1; }

for file in alerts/*.yml; do
  run "promtool check rules $file" promtool check rules "$file"
done
for file in alerts/tests/*_test.yml; do
  run "promtool test rules $file" promtool test rules "$file"
done
for check in rules coverage dashboards promql metric-names; do
  run "lint $check" "$PY" tests/rules/lint.py "$check"
done
run "lint self-test" "$PY" tests/rules/lint_selftest.py

if ((failed)); then
  printf 'failed: %s\n' "${failures[@]}"
fi
echo "rules: $passed passed, $failed failed"
((failed == 0))
