#!/usr/bin/env bash
# apt: slurmctld slurmd slurm-client munge python3
# Real Slurm on this machine (README.md): a one-node cluster of Debian 12's slurmctld, slurmd
# and munged, every kind of job step, each job's processes attributed by the exporter's own
# code (the slurm_job example) as root and as an unprivileged user under hidepid; then the
# scheduler glue of contrib/slurm against the real exporter and the real slurmd.
#   tests/slurm/run.sh [--capture DIR] [--attribution-only] [--rdma DEVICE]
# (HPCNODE_SLURM_LOGS=DIR: the daemons' and jobs' logs are copied there at the end.
# HPCNODE_SLURM_TIME_SCALE=N: every wait and HealthCheckInterval N times as long, for a slow
# machine such as the kernel lab's emulated one.)
# As root, after `cargo build --locked --bins --example slurm_job`. One PASS or FAIL line a
# check; exits 1 on any FAIL. --capture DIR writes the real cgroup paths of the run to
# DIR/cgroup_v1/ or DIR/cgroup_v2/ (tests/fixtures/slurm/ holds both). Everything it starts is stopped,
# and its cgroups removed, on every exit path.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
capture=
glue=1
rdma_device=
while (($#)); do
  case $1 in
    --capture)
      capture=$(realpath -m "${2:?--capture needs a directory}")
      shift 2
      ;;
    # The glue does not depend on the cgroup plugin: a second run of it proves nothing new.
    --attribution-only)
      glue=0
      shift
      ;;
    # ib_write_bw in a job on DEVICE, attributed by the exporter (rdma_job.sh).
    --rdma)
      rdma_device=${2:?--rdma needs an RDMA device}
      shift 2
      ;;
    *)
      echo "usage: $0 [--capture DIR] [--attribution-only] [--rdma DEVICE]" >&2
      exit 2
      ;;
  esac
done
if [ "$(id -u)" != 0 ]; then
  echo "tests/slurm/run.sh: needs root (slurmd, job cgroups, procfs mounts; tests/setup.sh installs Slurm)" >&2
  exit 2
fi
for tool in slurmctld slurmd munged munge sinfo squeue scontrol srun sbatch salloc scancel setpriv unshare python3; do
  command -v "$tool" >/dev/null || {
    echo "tests/slurm/run.sh: no $tool (tests/setup.sh installs it)" >&2
    exit 2
  }
done
slurm_job=$repo/target/debug/examples/slurm_job
exporter=$repo/target/debug/hpcnode_exporter
for binary in "$slurm_job" "$exporter"; do
  [ -x "$binary" ] || {
    echo "tests/slurm/run.sh: no $binary: cargo build --locked --bins --example slurm_job" >&2
    exit 2
  }
done
node=$(hostname -s)
if pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null; then
  echo "tests/slurm/run.sh: a slurmd or slurmctld already runs here; this test makes its own cluster" >&2
  exit 2
fi

started=$SECONDS
passes=0
fails=0
pass() {
  echo "PASS: $*"
  passes=$((passes + 1))
}
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

tmp=$(mktemp -d /tmp/hpcnode-slurm.XXXXXX)
# The job user reads slurm.conf and reaches munged's socket through it.
chmod 755 "$tmp"
mkdir "$tmp/log"
job_user=hpcnode-slurm-test
# The exporter's service user as the unit runs it: no capability, no group of the job users.
reader=65534:65534
background=()
daemons=()
export SLURM_CONF=$tmp/slurm.conf
time_scale=${HPCNODE_SLURM_TIME_SCALE:-1}
[[ $time_scale =~ ^[1-9][0-9]*$ ]] || {
  echo "tests/slurm/run.sh: HPCNODE_SLURM_TIME_SCALE takes a positive integer" >&2
  exit 2
}
HEALTH_INTERVAL=$((5 * time_scale))

# wait_for SECONDS COMMAND...: COMMAND every 0.2 s until it succeeds; 1 when time runs out
# (SECONDS times the time scale).
wait_for() {
  local deadline=$((SECONDS + $1 * time_scale))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# The cgroup directories slurmd makes: v1 `slurm_<node>` (Debian builds Slurm with
# --enable-multiple-slurmd, so CgroupPrepend is /slurm_%n) or `slurm` in each hierarchy.
slurm_cgroups() {
  local dir
  for dir in /sys/fs/cgroup/*/slurm_"$node" /sys/fs/cgroup/*/slurm /sys/fs/cgroup/system.slice/*slurmstepd.scope \
    /sys/fs/cgroup/unified/system.slice/*slurmstepd.scope; do
    [ -d "$dir" ] && echo "$dir"
  done
  return 0
}

stop_cluster() {
  local pid dir
  if ((${#daemons[@]})); then
    squeue -h -o %A 2>/dev/null | xargs -r scancel --quiet 2>/dev/null || true
    wait_for 15 queue_empty || true
  fi
  for pid in "${background[@]}" "${daemons[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${background[@]}" "${daemons[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  background=()
  daemons=()
  # What the jobs left behind (slurmstepd outlives a killed slurmd), then their cgroups.
  for dir in $(slurm_cgroups); do
    find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r pid; do
      kill -9 "$pid" 2>/dev/null || true
    done
  done
  for dir in $(slurm_cgroups); do
    find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

teardown() {
  local rc=$?
  stop_cluster
  if ((rc != 0)) || ((fails)); then
    echo "tests/slurm/run.sh: logs of the failed run:" >&2
    tail -n 20 "$tmp"/log/* >&2 2>/dev/null || true
  fi
  # The whole logs, for a run whose output is all one sees (the kernel lab's).
  if [ -n "${HPCNODE_SLURM_LOGS:-}" ]; then cp -r "$tmp/log/." "$HPCNODE_SLURM_LOGS/" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap teardown EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_munge() {
  mkdir -m 700 "$tmp/munge"
  mkdir -m 755 "$tmp/run"
  head -c 1024 /dev/urandom >"$tmp/munge/munge.key"
  chmod 600 "$tmp/munge/munge.key"
  munged --foreground --force --key-file="$tmp/munge/munge.key" --socket="$tmp/run/munge.socket" \
    --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/log/munged.log" \
    --seed-file="$tmp/munge/munged.seed" 2>"$tmp/log/munged.err" &
  daemons+=($!)
  wait_for 10 munge -n -S "$tmp/run/munge.socket" || {
    fail "munged did not start"
    exit 1
  }
}

# write_config PLUGIN: slurm.conf and cgroup.conf for this node, its CPUs and memory as
# `slurmd -C` finds them.
write_config() {
  local plugin=$1 hardware
  hardware=$(slurmd -C | head -n 1 | tr ' ' '\n' |
    grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore|RealMemory)=' | tr '\n' ' ')
  mkdir -p "$tmp/ctld" "$tmp/spool"
  cat >"$tmp/slurm.conf" <<EOF
ClusterName=hpcnode-test
SlurmctldHost=$node
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/run/munge.socket
CredType=cred/munge
StateSaveLocation=$tmp/ctld
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
MpiDefault=none
ProctrackType=proctrack/cgroup
TaskPlugin=task/affinity,task/cgroup
PrologFlags=contain
LaunchParameters=use_interactive_step
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=30
SlurmctldTimeout=30
MessageTimeout=5
KillWait=2
MinJobAge=2
Prolog=$tmp/prolog
HealthCheckProgram=$tmp/healthcheck
HealthCheckInterval=$HEALTH_INTERVAL
HealthCheckNodeState=ANY
NodeName=$node $hardware State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
  cat >"$tmp/cgroup.conf" <<EOF
CgroupPlugin=cgroup/$plugin
CgroupAutomount=no
ConstrainCores=yes
ConstrainRAMSpace=yes
EOF
  if [ "$plugin" = v2 ]; then echo "IgnoreSystemd=yes" >>"$tmp/cgroup.conf"; fi
  # slurmd runs HealthCheckProgram with no arguments and SLURMD_NODENAME as its only
  # environment: this wrapper records the runs and names the test's settings.
  cat >"$tmp/healthcheck" <<EOF
#!/bin/sh
echo "start \$(/bin/date +%s)" >>$tmp/healthcheck.runs
$repo/contrib/slurm/hpcnode-healthcheck --defaults $tmp/healthcheck.defaults
rc=\$?
echo "end \$(/bin/date +%s) \$rc" >>$tmp/healthcheck.runs
exit \$rc
EOF
  chmod 755 "$tmp/healthcheck"
  # The same for the Prolog: it records each job's run and whether slurmd gave it a PATH.
  cat >"$tmp/prolog" <<EOF
#!/bin/sh
echo "\${SLURM_JOB_ID:-none} \$(/usr/bin/tr '\0' '\n' </proc/\$\$/environ | /usr/bin/grep -c '^PATH=')" >>$tmp/prolog.runs
HPCNODE_PROLOG_DEFAULTS=$tmp/prolog.defaults exec $repo/contrib/slurm/prolog-verbs-probe
EOF
  chmod 755 "$tmp/prolog"
  echo "HPCNODE_SYSFS=$tmp/prolog-test/none" >"$tmp/prolog.defaults"
  cat >"$tmp/healthcheck.defaults" <<EOF
HPCNODE_EXPORTER=$exporter
HPCNODE_URL=http://127.0.0.1:1/metrics
SLURM_CONF=$tmp/slurm.conf
EOF
}

queue_empty() { [ -z "$(squeue -h -o %A)" ]; }
node_state() { sinfo -h -N -n "$node" -o '%t|%E' | head -n 1; }
# node_is PATTERN: the `STATE|REASON` of node_state matches the glob PATTERN.
# shellcheck disable=SC2053 # a pattern
node_is() { [[ "$(node_state)" == $1 ]]; }

start_slurm() {
  slurmctld -D -i -f "$tmp/slurm.conf" >"$tmp/log/slurmctld.out" 2>&1 &
  daemons+=($!)
  slurmd -D -f "$tmp/slurm.conf" >"$tmp/log/slurmd.out" 2>&1 &
  daemons+=($!)
  if wait_for 60 node_is 'idle|none'; then
    pass "slurmctld and slurmd (Slurm $(slurmd -V | cut -d' ' -f2), $1) up: $node idle in $((SECONDS - started)) s"
  else
    fail "$node not idle within $((60 * time_scale)) s ($1): $(node_state 2>&1)"
    exit 1
  fi
}

# The jobs: every kind of step a node runs. Each sleeps until cancelled.
submit_jobs() {
  printf '#!/bin/sh\nexec sleep 300\n' >"$tmp/interactive-shell"
  chmod 755 "$tmp/interactive-shell"
  id "$job_user" >/dev/null 2>&1 ||
    useradd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$job_user"
  srun -J srun sleep 300 >"$tmp/log/srun.out" 2>&1 &
  background+=($!)
  sbatch -Q -o /dev/null --chdir=/ -J batch --wrap 'srun sleep 300'
  sbatch -Q -o /dev/null --chdir=/ -J array --array=1-2 --wrap 'sleep 300'
  # use_interactive_step: salloc with no command runs `srun --interactive --pty $SHELL` (the
  # pty is disregarded without a terminal).
  SHELL=$tmp/interactive-shell salloc -J interactive </dev/null >"$tmp/log/salloc.out" 2>&1 &
  background+=($!)
  setpriv --reuid="$job_user" --regid="$job_user" --init-groups env SLURM_CONF="$SLURM_CONF" \
    sbatch -Q -o /dev/null --chdir=/ -J user --wrap 'srun sleep 300'
}

# The steps each job is to have (scontrol listpids' STEPID column), by job name.
declare -A steps=([srun]="0 extern" [batch]="0 batch extern" [array]="batch extern"
  [interactive]="extern interactive" [user]="0 batch extern")

# The jobs as `JOBID NAME ARRAY_ID` lines; JOBID is %A, the id the cgroups are named by.
jobs_now() { squeue -h -o '%A %j %i'; }
# The pids of job $1 with their step, `PID STEP` a line.
job_pids() { scontrol listpids "$1" 2>/dev/null | awk 'NR > 1 && $1 > 0 { print $1, $3 }'; }
job_steps() { job_pids "$1" | awk '{ print $2 }' | sort -u | tr '\n' ' ' | sed 's/ $//'; }

# Whether every job has all its steps; what was missing last is in $tmp/steps.why.
all_steps_up() {
  local id name _ count=0 have
  while read -r id name _; do
    have=$(job_steps "$id")
    if [ "$have" != "${steps[$name]}" ]; then
      echo "job $id ($name) has steps '$have', not '${steps[$name]}'" >"$tmp/steps.why"
      return 1
    fi
    count=$((count + 1))
  done < <(jobs_now)
  echo "$count jobs, not 6" >"$tmp/steps.why"
  ((count == 6))
}

# attribution PLUGIN: every process of every job, each slurmstepd, slurmd and slurmctld,
# through the slurm_job example: as root from /proc/PID/cgroup, then as $reader under
# hidepid=invisible from the job cgroups' cgroup.procs.
attribution() {
  local plugin=$1 id name array pid step line n bad
  submit_jobs
  if ! wait_for 60 all_steps_up; then
    fail "$plugin: the jobs' steps did not all start within $((60 * time_scale)) s: $(jobs_now | tr '\n' ';') (last: $(cat "$tmp/steps.why"))"
    for id in $(squeue -h -o %A); do echo "  job $id: $(job_steps "$id")"; done
    cancel_all "$plugin"
    return
  fi
  pass "$plugin: 6 jobs running ($(jobs_now | awk '{ printf "%s %s=%s; ", $2, $3, $1 }'))"

  # Expected: pid -> job; what each is (for the reports and the capture) and its group, one
  # PASS line a group: a job (an array's tasks apart), the slurmstepds, the daemons.
  declare -A want=() what=() group=()
  while read -r id name array; do
    while read -r pid step; do
      want[$pid]=$id
      what[$pid]="$name job $array step $step"
      group[$pid]="$name $array"
    done < <(job_pids "$id")
  done < <(jobs_now)
  # slurmstepd is in its job's cgroups (v1: the job's freezer, the step's other
  # controllers; v2: the step's `slurm` leaf), so its job is the job: `slurmstepd: [ID.STEP]`.
  for pid in $(pgrep -x slurmstepd); do
    line=$(tr '\0' ' ' <"/proc/$pid/cmdline" | sed 's/ *$//')
    id=${line#*[}
    id=${id%%.*}
    want[$pid]=$id
    what[$pid]="slurmstepd ${line#*: }"
    group[$pid]=slurmstepd
  done
  for pid in "${daemons[@]:1}"; do
    want[$pid]=-
    what[$pid]=$(cat "/proc/$pid/comm")
    group[$pid]=daemons
  done

  # compare LABEL FROM OUTPUT: each `PID JOB FROM` line of the slurm_job example against want.
  compare() {
    local label=$1 source=$2 output=$3 g kinds jobs kind_list job_list
    declare -A seen=()
    while read -r pid got from; do seen[$pid]="$got $from"; done <<<"$output"
    while read -r g; do
      n=0 bad=() kind_list=() job_list=()
      for pid in "${!group[@]}"; do
        [ "${group[$pid]}" = "$g" ] || continue
        n=$((n + 1))
        kind_list+=("$(awk '{ print ($2 == "job") ? "step_" $5 : ($1 == "slurmstepd") ? $2 : $1 }' <<<"${what[$pid]}")")
        job_list+=("${want[$pid]}")
        if [ "${seen[$pid]:-nothing}" != "${want[$pid]} $source" ]; then
          bad+=("$pid (${what[$pid]}): ${seen[$pid]:-nothing}, not ${want[$pid]} $source")
        fi
      done
      kinds=$(printf '%s\n' "${kind_list[@]}" | sort -u | tr '\n' ' ' | sed 's/ $//')
      jobs=$(printf '%s\n' "${job_list[@]}" | sort -u | tr '\n' ',' | sed 's/,$//')
      if ((${#bad[@]})); then
        fail "$plugin, $label: $g: ${bad[*]}"
      elif [ "$g" = daemons ]; then
        pass "$plugin, $label: $kinds ($n processes): in no job"
      elif [ "$g" = slurmstepd ]; then
        pass "$plugin, $label: the $n slurmstepd processes ($kinds): each its own job's"
      else
        pass "$plugin, $label: job ${g#* } ($kinds, ${g%% *}): its $n processes are job $jobs (squeue %A) from $source"
      fi
    done < <(printf '%s\n' "${group[@]}" | sort -u)
  }

  # Run from the temporary directory: the checkout may be where $reader cannot reach.
  install -m 755 "$slurm_job" "$tmp/slurm_job"
  local pids
  pids=$(printf '%s\n' "${!want[@]}" | sort -n | tr '\n' ' ')
  # shellcheck disable=SC2086 # a list of pids
  compare "as root" proc "$("$slurm_job" $pids)"
  # A private /proc with hidepid=invisible: other users' processes are not even listed, so
  # /proc/PID/cgroup cannot be read and the job comes from the cgroup tree.
  # shellcheck disable=SC2086 # a list of pids
  # shellcheck disable=SC2016 # the inner shell's arguments
  compare "as uid ${reader%:*} under hidepid=invisible" tree "$(unshare -m sh -c '
    mount -t proc -o hidepid=invisible proc /proc &&
    exec setpriv --reuid="$1" --regid="$2" --clear-groups "$3" $4
  ' _ "${reader%:*}" "${reader#*:}" "$tmp/slurm_job" "$pids")"

  if [ -n "$capture" ]; then
    capture_layout "$capture/cgroup_${plugin#cgroup/}" "$plugin"
  fi
  cancel_all "$plugin"
}

# cancel_all LABEL: every job cancelled and gone (state CG lasts until every step has ended).
cancel_all() {
  local since=$SECONDS
  squeue -h -o %A | xargs -r scancel --quiet
  wait_for 30 queue_empty ||
    fail "$1: jobs left $((30 * time_scale)) s after scancel: $(squeue -h -o '%A %T %R' | tr '\n' ';')"
  echo "tests/slurm/run.sh: $1: jobs cancelled in $((SECONDS - since)) s"
}

# capture_layout DIR PLUGIN: attribution's want and what as the fixture the unit tests read
# (tests/fixtures/README.md, `slurm/`).
capture_layout() {
  local dir=$1 plugin=$2 pid taken=() key
  mkdir -p "$dir"
  {
    echo "# /proc/PID/cgroup of the processes of a real one-node Slurm cluster, written by"
    echo "# tests/slurm/run.sh --capture: Slurm $(slurmd -V | cut -d' ' -f2) (Debian 12), CgroupPlugin=$plugin,"
    echo "# ProctrackType=proctrack/cgroup, TaskPlugin=task/affinity,task/cgroup, PrologFlags=contain,"
    echo "# LaunchParameters=use_interactive_step, on Linux $(uname -r). One block a process:"
    echo "# '== PID JOB WHAT', JOB the id squeue -o %A gave (- for none), then the file."
    for pid in $(printf '%s\n' "${!want[@]}" | sort -n); do
      # A process of each step of each job; a slurmstepd of each kind of step.
      key=$(awk '{ if ($2 == "job") print $3, $5; else print $1, $2 }' <<<"${what[$pid]}" | sed 's/\[[0-9]*\./[/')
      [[ " ${taken[*]} " == *" ${key// /_} "* ]] && continue
      taken+=("${key// /_}")
      echo "== $pid ${want[$pid]} ${what[$pid]}"
      cat "/proc/$pid/cgroup"
    done
  } >"$dir/proc_cgroup.txt"
  {
    echo "# Every directory slurmd made below /sys/fs/cgroup at the same moment, with the pids of its"
    echo "# cgroup.procs: 'DIRECTORY PID...', relative to /sys/fs/cgroup."
    slurm_cgroups | xargs -r -I{} find {} -type d | sort | while read -r key; do
      echo "${key#/sys/fs/cgroup/} $(tr '\n' ' ' <"$key/cgroup.procs")" | sed 's/ *$//'
    done
  } >"$dir/tree.txt"
  echo "tests/slurm/run.sh: captured $dir"
}

# Why slurmd's cgroup/v2 plugin cannot run here: it reads /proc/self/cgroup and stops unless
# that is unified (one `0::` line). A private mount namespace cannot change that file: a v1
# hierarchy lists a line for every process as long as it is mounted anywhere.
try_v2() {
  local line
  write_config v2
  # shellcheck disable=SC2016 # the inner shell's argument
  timeout 20 unshare -m sh -c 'mount -t cgroup2 none /sys/fs/cgroup && exec slurmd -D -f "$1"' _ \
    "$tmp/slurm.conf" >"$tmp/log/slurmd-v2.out" 2>&1 || true
  line=$(grep -m 1 -E 'fatal|error' "$tmp/log/slurmd-v2.out" | tr -s ' ' | cut -c1-160)
  echo "SKIP: cgroup/v2: this machine mounts cgroup v1 hierarchies (/proc/self/cgroup: $(wc -l </proc/self/cgroup) lines), and slurmd with CgroupPlugin=cgroup/v2, IgnoreSystemd=yes, cgroup2 mounted on /sys/fs/cgroup in a private mount namespace says: ${line:-nothing (see $tmp/log/slurmd-v2.out)}; the kernel lab group slurm_cgroup_v2 runs cgroup/v2"
  rm -f "$tmp/slurm.conf" "$tmp/cgroup.conf"
}

v1_mounted() { grep -qE '^cgroup /sys/fs/cgroup/freezer cgroup ' /proc/self/mounts; }
unified_only() { [ "$(cat /proc/self/cgroup)" = "$(grep '^0::' /proc/self/cgroup)" ]; }

start_munge
if unified_only; then
  plugin=v2
  # IgnoreSystemd=yes: slurmd makes system.slice/<node>_slurmstepd.scope itself, but not its
  # parent, nor enables the controllers there: systemd would have done both.
  mkdir -p /sys/fs/cgroup/system.slice
  # Only those the kernel offers: a write naming a missing one fails whole.
  for dir in /sys/fs/cgroup /sys/fs/cgroup/system.slice; do
    for controller in cpuset cpu memory pids; do
      grep -qw "$controller" "$dir/cgroup.controllers" &&
        echo "+$controller" >"$dir/cgroup.subtree_control" || true
    done
  done
else
  v1_mounted || {
    fail "no cgroup v1 freezer hierarchy and no pure cgroup v2: neither Slurm plugin can run"
    exit 1
  }
  try_v2
  plugin=v1
fi
write_config "$plugin"
start_slurm "CgroupPlugin=cgroup/$plugin"
attribution "cgroup/$plugin"
if [ -n "$rdma_device" ]; then
  . "$repo/tests/slurm/rdma_job.sh"
  rdma_job_tests "$rdma_device"
fi
if ((glue)); then
  . "$repo/tests/slurm/glue.sh"
  glue_tests
fi

echo "tests/slurm/run.sh: $passes passed, $fails failed, in $((SECONDS - started)) s (cgroup/$plugin)"
((fails == 0))
