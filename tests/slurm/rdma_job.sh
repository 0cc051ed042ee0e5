# shellcheck shell=bash disable=SC2154,SC2015
# (SC2154: run.sh's variables; SC2015: `A && pass || fail`, where pass cannot fail.)
# RDMA traffic in a real Slurm job, attributed by the real exporter (sourced by run.sh for
# --rdma DEVICE, which defines pass, fail, wait_for, free_port, $tmp, $exporter, $job_user and
# $background): the prolog's probe of DEVICE passes and the job starts; an `srun` of
# ib_write_bw's server as $job_user, its client as root outside Slurm, both on DEVICE port 1;
# the exporter's rdma_netlink collector, as root, names the
# server's job exactly as `squeue -o %A` does and the client's none, and the job's pinned bytes
# are the server's. Needs ib_write_bw (perftest) and an ACTIVE port, as the kernel lab's
# Soft-RoCE gives (tests/lab/scenarios/slurm_cgroup_v2.sh).

# The lowest GID index of DEVICE port 1 that is RoCE v2 (ib_write_bw's -x), none on InfiniBand.
roce_v2_gid() {
  local types=/sys/class/infiniband/$1/ports/1/gid_attrs/types index
  [ -d "$types" ] || return 0
  for index in $(ls "$types" | sort -n); do
    [ "$(cat "$types/$index" 2>/dev/null)" = "RoCE v2" ] && echo "-x $index" && return
  done
  return 0
}

server_listening() { grep -qi ':4853 00000000:0000 0A' /proc/net/tcp; } # TCP 18515, its handshake
connected() { rdma resource show qp | grep -q 'RC.*RTS.*ib_write_bw'; }

# holder URL PID: the hpcnode_rdma_holder_pinned_bytes line of PID in URL's answer.
holder() { curl -sf "$1" | grep '^hpcnode_rdma_holder_pinned_bytes{' | grep "pid=\"$2\""; }
# holder_has URL PID LABEL...: PID's line has each label (`name="value"`).
holder_has() {
  local line label
  line=$(holder "$1" "$2") || return 1
  shift 2
  for label in "$@"; do [[ $line == *"$label"* ]] || return 1; done
}

rdma_job_tests() {
  local device=$1 gid job server client port url exporter_pid
  if ! grep -q ACTIVE "/sys/class/infiniband/$device/ports/1/state" 2>/dev/null; then
    fail "rdma: $device port 1 is not ACTIVE"
    return
  fi
  gid=$(roce_v2_gid "$device")
  # The prolog's success path: the real probe on the real port before the job starts, through
  # a wrapper that records each call and its exit status. Under TCG a port carries a small
  # share of its rate: the threshold is low, what is proven is that a passing probe lets the
  # job start.
  printf '%s\n' '#!/bin/sh' "echo \"call \$*\" >>$tmp/probe.calls" "$exporter \"\$@\"" 'rc=$?' \
    "echo \"exit \$rc\" >>$tmp/probe.calls" 'exit $rc' >"$tmp/probe-recorder"
  chmod 755 "$tmp/probe-recorder"
  printf '%s\n' "HPCNODE_EXPORTER=$tmp/probe-recorder" "HPCNODE_SYSFS=/sys" "HPCNODE_MIN_RATIO=0.001" \
    >"$tmp/prolog.defaults"
  # ib_write_bw registers its buffers: the job inherits srun's memlock limit.
  ulimit -l unlimited
  # shellcheck disable=SC2086 # $gid is an option and its value
  setpriv --reuid="$job_user" --regid="$job_user" --init-groups env SLURM_CONF="$SLURM_CONF" \
    srun -J rdma ib_write_bw -d "$device" $gid -D 600 -s 65536 >"$tmp/log/rdma-server.out" 2>&1 &
  background+=($!)
  if ! wait_for 60 server_listening; then
    fail "rdma: ib_write_bw's server in a job did not listen within $((60 * time_scale)) s"
    return
  fi
  job=$(squeue -h -n rdma -o %A)
  grep -q "^call probe verbs --path.sysfs /sys --device $device --port 1 --min-ratio 0.001" "$tmp/probe.calls" &&
    grep -qx "exit 0" "$tmp/probe.calls" && grep -q "^$job " "$tmp/prolog.runs" &&
    pass "rdma: the prolog probed $device port 1 for job $job, passed, and the job started" ||
    fail "rdma: the prolog's probe for job $job: $(tr '\n' ';' <"$tmp/probe.calls" 2>/dev/null)"
  printf '%s\n' "HPCNODE_SYSFS=$tmp/prolog-test/none" >"$tmp/prolog.defaults"
  server=$(scontrol listpids "$job" | awk '$3 == "0" { print $1 }' |
    while read -r pid; do [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != ib_write_bw ] || echo "$pid"; done)
  # shellcheck disable=SC2086
  ib_write_bw -d "$device" $gid -D 600 -s 65536 127.0.0.1 >"$tmp/log/rdma-client.out" 2>&1 &
  client=$!
  background+=("$client")
  if [ -z "$server" ] || ! wait_for 60 connected; then
    fail "rdma: job $job's ib_write_bw (pid '${server}') and its client did not connect: $(rdma resource show qp | tr '\n' ';')"
    return
  fi
  port=$(free_port)
  url=http://127.0.0.1:$port/metrics
  "$exporter" --web.listen-address="127.0.0.1:$port" --collector.disable-defaults \
    --collector.rdma_netlink >"$tmp/log/rdma-exporter.log" 2>&1 &
  exporter_pid=$!
  background+=("$exporter_pid")
  if wait_for 60 holder_has "$url" "$server" "device=\"$device\"" 'comm="ib_write_bw"' "slurm_job=\"$job\""; then
    pass "rdma: ib_write_bw in job $job (squeue %A; pid $server, user $job_user, $(cut -d: -f3- "/proc/$server/cgroup")) holds $device, slurm_job=\"$job\""
  else
    fail "rdma: job $job's ib_write_bw (pid $server) not attributed: '$(holder "$url" "$server")'"
  fi
  holder_has "$url" "$client" 'comm="ib_write_bw"' 'slurm_job=""' &&
    pass "rdma: its client outside Slurm (pid $client) in no job" ||
    fail "rdma: the client (pid $client): '$(holder "$url" "$client")'"
  local job_bytes server_bytes
  job_bytes=$(curl -sf "$url" | sed -n "s/^hpcnode_rdma_slurm_job_pinned_bytes{device=\"$device\",slurm_job=\"$job\"} //p")
  server_bytes=$(holder "$url" "$server" | awk '{ print $2 }')
  [ -n "$job_bytes" ] && [ "$job_bytes" = "$server_bytes" ] && ((${job_bytes%.*} >= 65536)) &&
    pass "rdma: job $job's pinned bytes are its ib_write_bw's ($job_bytes)" ||
    fail "rdma: job $job's pinned bytes '$job_bytes', its ib_write_bw's '$server_bytes'"
  kill "$client" "$exporter_pid" 2>/dev/null || true
  cancel_all "rdma"
}
