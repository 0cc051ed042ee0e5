#!/usr/bin/env bash
# The test suite, stage by stage (each suite's README says what it proves and needs):
#   tests/run.sh                  every stage, in order (what CI runs)
#   tests/run.sh rules e2e        the named stages only, in the order given
#   tests/run.sh --list           the stages, one a line
# rust: Rust unit and integration tests (golden end-to-end on fixture trees, HTTP, command
# line, METRICS.md catalog, series budget); rules: the rule and dashboard checks; e2e: against a
# real Prometheus; fleet: Prometheus agent, VictoriaMetrics, vmalert; grafana_schema: the
# dashboards' type check against @grafana/schema; as root, packaging: the packages built, linted,
# installed into a Debian root and with rpm --root, run as the service user; slurm: a real
# one-node Slurm cluster, each job's processes attributed, the contrib/slurm glue draining and
# resuming; lab: Debian kernels in qemu, the exporter checked inside.
set -euo pipefail
cd "$(dirname "$0")/.."
stages=(rust rules e2e fleet grafana_schema packaging slurm lab)

binary=target/debug/hpcnode_exporter
build() { cargo build --locked --bins; }

stage_rust() {
  build
  cargo test --locked --workspace
}
stage_rules() { tests/rules/check.sh; }
stage_e2e() { build && tests/e2e/run.sh "$binary"; }
stage_fleet() { build && tests/fleet/run.sh "$binary"; }
stage_grafana_schema() { tests/grafana_schema/check.sh; }
stage_packaging() { tests/packaging/run.sh; }
stage_slurm() {
  if [ "$(id -u)" != 0 ]; then
    echo "tests/run.sh: slurm not run: it needs root for slurmd, its cgroups and tests/setup.sh's packages (CI runs as root)"
    return
  fi
  cargo build --locked --bins --example slurm_job
  tests/slurm/run.sh
}
stage_lab() {
  if [ "$(id -u)" != 0 ]; then
    echo "tests/run.sh: kernel lab not run: it needs root for tests/setup.sh's packages (CI runs as root)"
    return
  fi
  # The lab runs the binary the packages ship (the packaging stage builds it): the exporter as
  # deployed, and under TCG its scrapes cost about a third of the debug build's CPU.
  local packaged=target/x86_64-unknown-linux-gnu/release/hpcnode_exporter
  if [ ! -x "$packaged" ]; then
    echo "tests/run.sh: lab: no $packaged: run the packaging stage first (tests/run.sh packaging lab)" >&2
    return 1
  fi
  tests/lab/run.sh --binary "$packaged"
}

if [ "${1:-}" = --list ]; then
  printf '%s\n' "${stages[@]}"
  exit 0
fi
chosen=("$@")
if ((${#chosen[@]} == 0)); then chosen=("${stages[@]}"); fi
for stage in "${chosen[@]}"; do
  if ! printf '%s\n' "${stages[@]}" | grep -qxF -- "$stage"; then
    echo "tests/run.sh: unknown stage '$stage' (stages: ${stages[*]})" >&2
    exit 2
  fi
done

if [ "$(id -u)" = 0 ]; then tests/setup.sh; fi
for stage in "${chosen[@]}"; do
  echo "tests/run.sh: $stage"
  started=$SECONDS
  "stage_$stage"
  # Where CI's time goes, stage by stage.
  echo "tests/run.sh: $stage took $((SECONDS - started)) s"
done
