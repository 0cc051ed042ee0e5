# Least privilege: the exporter with the default collectors once as root and once as the
# service user with exactly the systemd unit's capabilities (guest/service_user.sh), then
# without CAP_BPF. The lab runs the debug build of the code that is packaged (the package's
# binary is the same source built for glibc 2.17). With the unit's capabilities every probe
# that attaches as root attaches; what differs is what docs/security.md's table says: no BPF
# run-time statistics (BPF_ENABLE_STATS needs CAP_SYS_ADMIN), and no hook through
# perf_event_open (classic tracepoints, kprobes), which Debian's kernel.perf_event_paranoid=3
# keeps for CAP_SYS_ADMIN. Once it serves, the capabilities only the start needed are gone from
# every thread (CAP_BPF and CAP_PERFMON stay: vfio's probes attach when vfio loads), and the
# probes still count. The other capabilities one by one, and paranoid 2: least_privilege_each.
# Both run when named: three starts of nine probes take minutes of TCG per kernel, beyond CI's
# budget for the lab.
# lab: when=named
# lab: collectors=ebpf modules
# lab: modules=cpuid
# lab: tools=setpriv
# lab: timeout=900

. /lab/guest/service_user.sh
LAB_START_SECONDS=300 # a start attaches nine probes: minutes under TCG on a busy host

lab_info "the unit's capabilities: $UNIT_CAPS; kernel.dmesg_restrict=$(cat /proc/sys/kernel/dmesg_restrict)," \
  "kernel.unprivileged_bpf_disabled=$(cat /proc/sys/kernel/unprivileged_bpf_disabled)," \
  "kernel.perf_event_paranoid=$(cat /proc/sys/kernel/perf_event_paranoid)"

run_exporter root
# shellcheck disable=SC2086 # capability lists split into words on purpose
run_exporter unit $UNIT_CAPS
cut -d= -f1 "$LAB_TMP/unit.probes" > "$LAB_TMP/unit.names"
cut -d= -f1 "$LAB_TMP/root.probes" > "$LAB_TMP/root.names"
lab_check "every probe attached as root is attached" test -z "$(only_in root unit names)"
lab_check "hooks differ only where root's goes through perf_event_open" \
  test -z "$(only_in root unit probes | tr ' ' '\n' | grep -v '=\(tracepoint\|kprobe\|kretprobe\|perf\)$')"
lab_check "no hook through perf_event_open under kernel.perf_event_paranoid=3" \
  test -z "$(grep '=\(tracepoint\|kprobe\|kretprobe\|perf\)$' "$LAB_TMP/unit.probes")"
lab_check "the metric families lost are the BPF run-time statistics" \
  test "$(only_in root unit families)" = "hpcnode_ebpf_program_run_seconds_total hpcnode_ebpf_program_runs_total"
lab_check "no metric family gained" test -z "$(only_in unit root families)"

lab_scenario dropped_after_start
# CAP_BPF and CAP_PERFMON stay where probes attach into modules loaded later (vfio; every lab
# kernel loads modules): CAP_DAC_READ_SEARCH and CAP_SYSLOG go.
kept=000000c000000000 # cap_perfmon, cap_bpf
lab_check "every thread keeps only what the kernel still asks for ($kept)" \
  test "$(sed 's/^CapPrm:[[:space:]]*//' "$LAB_TMP/unit.permitted")" = "$kept"
lab_check "one log line says what was dropped" \
  grep -q 'msg="dropped the capabilities only the start needed"' "$LAB_EXPORTER_LOG"
lab_check "modprobe cpuid" modprobe cpuid
lab_scrape loaded
lab_expect_delta "the probes still count" unit loaded 'hpcnode_module_loads_total{module="cpuid"}' == 1
lab_expect "no collector errors" "$(lab_value loaded hpcnode_collector_errors_total)" == 0
rmmod cpuid

# shellcheck disable=SC2046 # one capability per word
run_exporter without_bpf $(unit_caps_without bpf)
lab_expect "every BPF probe reports why it is not attached" \
  "$(lab_series without_bpf hpcnode_ebpf_probe_failure_info)" == "$(($(lab_series without_bpf hpcnode_ebpf_probe_attached) - 1))"
lab_expect "the kernel log is still read, from /dev/kmsg" \
  "$(lab_value without_bpf 'hpcnode_ebpf_probe_attached{probe="kernel_log",hook="kmsg"}')" == 1
lab_expect "the ebpf collector still succeeds" \
  "$(lab_value without_bpf 'hpcnode_scrape_collector_success{collector="ebpf"}')" == 1
lab_exporter_stop
