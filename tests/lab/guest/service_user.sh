# Running the exporter as the systemd unit would, for the least_privilege group (busybox sh,
# sourced after lib.sh): an unprivileged user holding exactly the capabilities the unit grants
# (AmbientCapabilities= of packaging/hpcnode_exporter.service and the drop-ins systemd 252 gets,
# joined into the share when the lab is built) and its memlock limit, set by util-linux's setpriv (`# lab: tools=setpriv`) as systemd sets them:
# inheritable, ambient and bounding set.

SERVICE_UID=65534
# unit_setting NAME: the values of the unit's NAME= lines, the one place that reads the unit (the
# base unit with the drop-ins systemd 252 gets, as tests/lab/run.sh joins them: one line each).
unit_setting() { sed -n "s/^$1=//p" /lab/hpcnode_exporter.service; }
# Lower case without the prefix, as setpriv names them: "bpf perfmon dac_read_search syslog".
UNIT_CAPS=$(unit_setting AmbientCapabilities | tr 'A-Z\n' 'a-z ' | sed 's/cap_//g; s/ *$//')
# The ambient set must not be empty: an empty one would mean a broken copy of the unit.
[ -n "$UNIT_CAPS" ] || { lab_fail "the unit grants capabilities" "no AmbientCapabilities= in /lab/hpcnode_exporter.service"; exit 1; }

# The unit's LimitMEMLOCK=, as ulimit -l takes it. Kernels before 5.11 charge BPF maps and
# programs to the memlock limit of the user (uid 65534 here), so without it the first probes
# use up the default 64 KiB and the rest fail to load with EPERM (seen on 5.10).
UNIT_MEMLOCK=$(unit_setting LimitMEMLOCK)
case $UNIT_MEMLOCK in
  infinity) UNIT_MEMLOCK=unlimited ;;
  *) lab_fail "the unit's memlock limit" "LimitMEMLOCK=$UNIT_MEMLOCK: the lab knows only infinity"; exit 1 ;;
esac

# unit_caps_without CAP: the unit's capabilities but CAP.
unit_caps_without() { for cap in $UNIT_CAPS; do [ "$cap" = "$1" ] || echo "$cap"; done; }

# service_user_prefix CAP...: the setpriv command line (without the program) that runs a
# program as the service user with exactly CAPs.
service_user_prefix() {
  local caps=-all cap
  for cap in "$@"; do caps="$caps,+$cap"; done
  echo "/usr/local/bin/setpriv --reuid=$SERVICE_UID --regid=$SERVICE_UID --clear-groups" \
    "--inh-caps=$caps --ambient-caps=$caps --bounding-set=$caps"
}

# The /proc the unit's service sees: the options its ProtectProc= mounts it with (systemd mounts
# a /proc of its own, hidepid=VALUE, for any value but default), none for the host's own.
unit_proc_options() {
  case $(unit_setting ProtectProc) in
    '' | default) ;;
    *) echo "hidepid=$(unit_setting ProtectProc)" ;;
  esac
}

# as_service_user PROC_OPTIONS CAP...: points LAB_EXPORTER at a wrapper that runs the exporter as
# the service user with exactly CAPs and the unit's memlock limit, with a /proc of its own mounted
# with PROC_OPTIONS (as systemd's ProtectProc= or a site's hidepid= mounts it) unless they are
# empty. The limit is set as root, before setpriv drops to the service user, as systemd does.
as_service_user() {
  local proc_options=$1
  shift
  LAB_EXPORTER=$LAB_TMP/as-service-user
  printf '#!/bin/sh\nulimit -l %s\nexec %s /lab/bin/hpcnode_exporter "$@"\n' "$UNIT_MEMLOCK" "$(service_user_prefix "$@")" > "$LAB_EXPORTER"
  chmod +x "$LAB_EXPORTER"
  [ -n "$proc_options" ] || return 0
  # busybox's unshare execs (no fork): the pid lab_exporter_start records is the exporter's.
  printf '#!/bin/sh\nmount --make-rprivate / 2> /dev/null\nmount -t proc -o %s proc /proc || exit 1\nexec %s "$@"\n' "$proc_options" "$LAB_EXPORTER" > "$LAB_TMP/in-own-proc"
  printf '#!/bin/sh\nexec unshare -m /bin/sh %s "$@"\n' "$LAB_TMP/in-own-proc" > "$LAB_TMP/as-service-user-own-proc"
  chmod +x "$LAB_TMP/as-service-user-own-proc"
  LAB_EXPORTER=$LAB_TMP/as-service-user-own-proc
}

# run_exporter NAME [CAP...]: starts the exporter with the default collectors as root (NAME
# root) or as the service user with exactly CAPs, scrapes NAME, and records what it got: the
# probes attached (probe=hook) and the metric families in $LAB_TMP/NAME.{probes,families}, the
# capability sets of every thread, the probes' failures, the collectors' success and errors;
# and, against the run named root, what was lost or gained.
run_exporter() {
  local name=$1 started pid
  shift
  lab_scenario "$name"
  if [ "$name" = root ]; then
    LAB_EXPORTER=/lab/bin/hpcnode_exporter
  else
    as_service_user "$(unit_proc_options)" "$@"
  fi
  started=$(date +%s)
  lab_exporter_start || exit 1
  lab_info "started in $(($(date +%s) - started)) s"
  lab_scrape "$name"
  pid=$(cat /tmp/lab-exporter.pid)
  grep -h CapPrm /proc/"$pid"/task/*/status | sort -u > "$LAB_TMP/$name.permitted"
  lab_info "permitted sets of its threads after start: $(tr '\t\n' '  ' < "$LAB_TMP/$name.permitted")"
  lab_matching "$name" hpcnode_ebpf_probe_attached | awk -F '\t' '$2 == 1' |
    sed 's/.*probe="\([^"]*\)",hook="\([^"]*\)".*/\1=\2/' | sort > "$LAB_TMP/$name.probes"
  grep -v '^#' "$LAB_TMP/$name.prom" | sed 's/[{ ].*//' | sort -u > "$LAB_TMP/$name.families"
  lab_info "probes attached: $(tr '\n' ' ' < "$LAB_TMP/$name.probes")"
  lab_record_series "$name" hpcnode_ebpf_probe_failure_info
  lab_info "collectors failing: $(lab_matching "$name" hpcnode_scrape_collector_success | awk -F '\t' '$2 != 1 {print $1}' | tr '\n' ' ')"
  lab_info "collector errors: $(lab_value "$name" hpcnode_collector_errors_total)"
  if [ "$name" != root ]; then
    lab_info "probes lost against root: $(only_in root "$name" probes)"
    lab_info "probes gained against root: $(only_in "$name" root probes)"
    lab_info "families lost against root: $(only_in root "$name" families)"
    lab_info "families gained against root: $(only_in "$name" root families)"
  fi
}

# only_in A B WHAT: the lines of $LAB_TMP/A.WHAT that $LAB_TMP/B.WHAT lacks, on one line
# (busybox has no comm).
only_in() {
  grep -vxF -f "$LAB_TMP/$2.$3" "$LAB_TMP/$1.$3" | tr '\n' ' ' | sed 's/ $//'
}
