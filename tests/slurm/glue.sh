# shellcheck shell=bash disable=SC2154,SC2015
# (SC2154: run.sh's variables; SC2015: `A && pass || fail`, where pass cannot fail.)
# The scheduler glue of contrib/slurm against run.sh's real slurmctld and slurmd (sourced by
# run.sh, which defines pass, fail, wait_for, node_is, $tmp, $node, $exporter and the
# HealthCheckProgram and Prolog wrappers): hpcnode-healthcheck drains, resumes and leaves
# alone; the NHC check dies or passes; the prolog probes the ports it should and a failed
# prolog drains the node for good.

glue_dir=$repo/contrib/slurm
modules_healthy='mlx5_ib 479232 0 - Live 0x0000000000000000
mlx5_core 2019328 1 mlx5_ib, Live 0x0000000000000000'
modules_faulty='mlx5_ib 479232 0 - Live 0x0000000000000000'

# The health check runs slurmd started and ended: `start EPOCH`, `end EPOCH RC` lines.
health_runs() {
  if [ -e "$tmp/healthcheck.runs" ]; then grep -c "^$1 " "$tmp/healthcheck.runs" || true; else echo 0; fi
}
runs_ended() { (($(health_runs end) >= $1)); }
# wait_run: until a whole run of the health check, started after this call, has ended.
wait_run() {
  local target=$(($(health_runs start) + 1))
  wait_for $((2 * HEALTH_INTERVAL + 15)) runs_ended "$target" ||
    fail "slurmd ran no whole health check within $(((2 * HEALTH_INTERVAL + 15) * time_scale)) s"
}

# The node's /proc/modules, written whole (a rename) as the kernel would show it at once.
set_modules() {
  printf '%s\n' "$1" >"$tmp/node/proc/modules.new"
  mv "$tmp/node/proc/modules.new" "$tmp/node/proc/modules"
}

start_exporter() {
  mkdir -p "$tmp/node/proc/sys/kernel" "$tmp/node/sys/module" "$tmp/node/root/etc"
  echo 0 >"$tmp/node/proc/sys/kernel/tainted"
  echo 6.1.0-test-amd64 >"$tmp/node/proc/sys/kernel/osrelease"
  echo "BOOT_IMAGE=/boot/vmlinuz-6.1.0-test-amd64 root=/dev/sda1 ro" >"$tmp/node/proc/cmdline"
  set_modules "$modules_healthy"
  exporter_port=$(free_port)
  exporter_url=http://127.0.0.1:$exporter_port/metrics
  "$exporter" --web.listen-address="127.0.0.1:$exporter_port" --collector.disable-defaults \
    --collector.modules --collector.modules.expected=mlx5_core,mlx5_ib \
    --path.procfs="$tmp/node/proc" --path.sysfs="$tmp/node/sys" --path.rootfs="$tmp/node/root" \
    >"$tmp/log/exporter.log" 2>&1 &
  exporter_pid=$!
  background+=("$exporter_pid")
  if ! wait_for 20 "$exporter" check --from "$exporter_url"; then
    fail "the exporter on the test tree did not answer healthy within $((20 * time_scale)) s: $("$exporter" check --from "$exporter_url" 2>&1 | head -n 3 | tr '\n' ' ')"
    return 1
  fi
  sed -i "s|^HPCNODE_URL=.*|HPCNODE_URL=$exporter_url|" "$tmp/healthcheck.defaults"
}

# check_hpcnode of contrib/slurm/hpcnode.nhc as NHC runs it, with NHC's die, log and
# nhc_cmd_with_timeout stood in for (NHC is not packaged for Debian): prints `die: MESSAGE`
# or `pass`.
nhc_verdict() {
  bash -c '
    die() { shift; echo "die: $*"; exit 1; }
    log() { echo "check_hpcnode logs: $*" >&2; }
    syslog() { :; }
    nhc_cmd_with_timeout() { local seconds=$1; shift; timeout "$seconds" "$@"; }
    TIMEOUT=30
    . "$1"
    check_hpcnode -u "$2" -e "$3" && echo pass
  ' _ "$glue_dir/hpcnode.nhc" "$exporter_url" "$exporter"
}

health_check_tests() {
  local since reason
  if ! "$exporter" check --help >/dev/null 2>&1; then
    fail "health check: $exporter has no check subcommand (hpcnode_exporter check, branch check41): the drain, resume and leave-alone stages did not run"
    return
  fi
  start_exporter || return

  wait_run
  if node_is 'idle|none'; then pass "healthy node: after a health check $node is still idle"; else fail "healthy node: $node is $(node_state)"; fi
  [ "$(nhc_verdict)" = pass ] && pass "NHC check_hpcnode passes on a healthy node" ||
    fail "NHC check_hpcnode on a healthy node: $(nhc_verdict)"

  since=$SECONDS
  set_modules "$modules_faulty"
  # Within one HealthCheckInterval (slurmd's next run), and the few seconds the run itself and
  # this poll take.
  if wait_for $((2 * HEALTH_INTERVAL + 10)) node_is 'drain|hpcnode:*mlx5_core*' &&
    [ $((SECONDS - since)) -le $((HEALTH_INTERVAL + 5)) ]; then
    pass "mlx5_core gone from the node's /proc/modules: drained in $((SECONDS - since)) s (HealthCheckInterval=$HEALTH_INTERVAL), reason '$(node_state | cut -d'|' -f2)'"
  else
    fail "mlx5_core gone: $node is $(node_state) after $((SECONDS - since)) s"
  fi
  reason=$(nhc_verdict) || true
  [[ $reason == "die: check_hpcnode:  "*mlx5_core* ]] && pass "NHC check_hpcnode dies: $reason" ||
    fail "NHC check_hpcnode with mlx5_core gone: $reason"

  since=$SECONDS
  set_modules "$modules_healthy"
  if wait_for $((2 * HEALTH_INTERVAL + 10)) node_is 'idle|none' &&
    [ $((SECONDS - since)) -le $((HEALTH_INTERVAL + 5)) ]; then
    pass "mlx5_core back: $node resumed to idle in $((SECONDS - since)) s"
  else
    fail "mlx5_core back: $node is $(node_state) after $((SECONDS - since)) s"
  fi

  scontrol update nodename="$node" state=drain reason=maintenance
  set_modules "$modules_faulty"
  wait_run
  if node_is 'drain|maintenance'; then pass "drained by an admin ('maintenance'), mlx5_core gone: still drained for 'maintenance' after a health check"; else fail "admin drain with the fault: $node is $(node_state)"; fi
  set_modules "$modules_healthy"
  wait_run
  if node_is 'drain|maintenance'; then pass "drained by an admin, healthy again: still drained for 'maintenance' after a health check (never resumed)"; else fail "admin drain, healthy: $node is $(node_state)"; fi
  scontrol update nodename="$node" state=resume
  wait_for 10 node_is 'idle|none' || fail "$node not idle after the admin's resume: $(node_state)"
}

prolog_tests() {
  local out rc
  # Standalone, as slurmd runs it (no PATH, SLURM_JOB_ID), on sysfs trees of their own.
  mkdir -p "$tmp/prolog-test/none" "$tmp/prolog-test/bin"
  for state in "4: ACTIVE" "1: DOWN"; do
    port=$([ "${state#*: }" = ACTIVE ] && echo 1 || echo 2)
    mkdir -p "$tmp/prolog-test/ports/class/infiniband/mlx5_0/ports/$port"
    echo "$state" >"$tmp/prolog-test/ports/class/infiniband/mlx5_0/ports/$port/state"
  done
  # shellcheck disable=SC2016 # the stand-in's own expansions
  printf '#!/bin/sh\necho "$*" >>%s\nexit "${PROBE_EXIT:-0}"\n' "$tmp/prolog-test/probe.args" >"$tmp/prolog-test/bin/probe"
  chmod 755 "$tmp/prolog-test/bin/probe"
  run_prolog() {
    printf '%s\n' "$@" >"$tmp/prolog-test/defaults"
    env -i SLURM_JOB_ID=999999 HPCNODE_PROLOG_DEFAULTS="$tmp/prolog-test/defaults" \
      PROBE_EXIT="${PROBE_EXIT:-0}" "$glue_dir/prolog-verbs-probe" 2>"$tmp/prolog-test/stderr"
  }
  rm -f "$tmp/prolog-test/probe.args"
  rc=0 && run_prolog "HPCNODE_SYSFS=$tmp/prolog-test/none" "HPCNODE_EXPORTER=$tmp/prolog-test/bin/probe" || rc=$?
  [ "$rc" = 0 ] && [ ! -e "$tmp/prolog-test/probe.args" ] && pass "prolog: no RDMA device: passes without probing" ||
    fail "prolog, no RDMA device: exit $rc, probe run: $(cat "$tmp/prolog-test/probe.args" 2>/dev/null)"
  rc=0 && run_prolog "HPCNODE_SYSFS=$tmp/prolog-test/ports" "HPCNODE_EXPORTER=$tmp/prolog-test/bin/probe" || rc=$?
  out=$(cat "$tmp/prolog-test/probe.args" 2>/dev/null)
  [ "$rc" = 0 ] && [ "$out" = "probe verbs --path.sysfs $tmp/prolog-test/ports --device mlx5_0 --port 1 --min-ratio 0.8 --duration 1s" ] &&
    pass "prolog: probes the ACTIVE port only (mlx5_0 port 1, not the DOWN port 2): $out" ||
    fail "prolog, one ACTIVE and one DOWN port: exit $rc, probes: $out"
  rc=0 && PROBE_EXIT=1 run_prolog "HPCNODE_SYSFS=$tmp/prolog-test/ports" "HPCNODE_EXPORTER=$tmp/prolog-test/bin/probe" || rc=$?
  [ "$rc" = 1 ] && pass "prolog: fails (exit 1) when the probe fails: $(head -c 120 "$tmp/prolog-test/stderr")" ||
    fail "prolog, probe failing: exit $rc"
  rc=0 && run_prolog "HPCNODE_SYSFS=$tmp/prolog-test/ports" "HPCNODE_EXPORTER=$tmp/prolog-test/bin/probe" "HPCNODE_PROBE_PORTS=mlx5_0:2" || rc=$?
  [ "$rc" = 1 ] && pass "prolog: fails when a port named in HPCNODE_PROBE_PORTS is not ACTIVE" ||
    fail "prolog, HPCNODE_PROBE_PORTS with a DOWN port: exit $rc"
  # The real binary takes the prolog's flags: no RDMA device here, so its probe fails (1),
  # which is not a usage error (2).
  rc=0 && run_prolog "HPCNODE_SYSFS=$tmp/prolog-test/ports" "HPCNODE_EXPORTER=$exporter" || rc=$?
  [ "$rc" = 1 ] && ! grep -q 'usage error' "$tmp/prolog-test/stderr" &&
    pass "prolog: the real probe verbs takes its flags and fails here (no RDMA device): $(head -c 160 "$tmp/prolog-test/stderr")" ||
    fail "prolog with the real binary: exit $rc: $(cat "$tmp/prolog-test/stderr")"

  # Under slurmd: the Prolog wrapper of run.sh recorded each job's run and its environment.
  if awk '$1 ~ /^[0-9]+$/' "$tmp/prolog.runs" | grep -q .; then
    if awk '$2 != 0 { exit 1 }' "$tmp/prolog.runs"; then
      pass "slurmd ran the prolog for $(wc -l <"$tmp/prolog.runs") jobs, with no PATH (the script sets its own)"
    else
      pass "slurmd ran the prolog for $(wc -l <"$tmp/prolog.runs") jobs (with a PATH)"
    fi
  else
    fail "slurmd did not run the prolog: $(cat "$tmp/prolog.runs" 2>/dev/null)"
  fi
  # A probe that fails under slurmd: the job does not start, the node is drained for the
  # prolog, and the health check, healthy, leaves that drain alone.
  printf '%s\n' "HPCNODE_SYSFS=$tmp/prolog-test/ports" "HPCNODE_EXPORTER=$tmp/prolog-test/bin/probe" "export PROBE_EXIT=1" \
    >"$tmp/prolog.defaults"
  sbatch -Q -o /dev/null --chdir=/ -J prolog --wrap 'sleep 300'
  if wait_for 30 node_is 'drain|Prolog error*'; then
    pass "a failed probe in the prolog drained $node: $(node_state)"
    wait_run
    if node_is 'drain|Prolog error*'; then pass "the health check, healthy, left the prolog's drain alone after a run"; else fail "prolog drain after a health check: $(node_state)"; fi
  else
    fail "a failed prolog: $node is $(node_state)"
  fi
  printf '%s\n' "HPCNODE_SYSFS=$tmp/prolog-test/none" >"$tmp/prolog.defaults"
  cancel_all "the prolog's job"
  scontrol update nodename="$node" state=resume
  wait_for 10 node_is 'idle|none' || fail "$node not idle after the resume: $(node_state)"
}

exporter_stopped_tests() {
  [ -n "${exporter_pid:-}" ] || return 0
  set_modules "$modules_faulty"
  wait_for $((2 * HEALTH_INTERVAL + 10)) node_is 'drain|hpcnode:*' || fail "not drained by the health check: $(node_state)"
  kill "$exporter_pid"
  wait "$exporter_pid" || true
  set_modules "$modules_healthy"
  wait_run
  if node_is 'drain|hpcnode:*'; then
    pass "exporter stopped (cannot tell): the node it drained stays drained after a health check ($(node_state))"
  else
    fail "exporter stopped: $node is $(node_state)"
  fi
  [ "$(nhc_verdict)" = pass ] && pass "NHC check_hpcnode passes when it cannot tell (exporter stopped)" ||
    fail "NHC check_hpcnode, exporter stopped: $(nhc_verdict)"
}

glue_tests() {
  local since=$SECONDS
  health_check_tests
  echo "tests/slurm/run.sh: health check stages took $((SECONDS - since)) s"
  since=$SECONDS
  prolog_tests
  echo "tests/slurm/run.sh: prolog stages took $((SECONDS - since)) s"
  since=$SECONDS
  exporter_stopped_tests
  echo "tests/slurm/run.sh: exporter stopped stage took $((SECONDS - since)) s; health check runs started at $(awk '$1 == "start" { printf "%s ", $2 }' "$tmp/healthcheck.runs" 2>/dev/null)"
}
