# What each of the unit's capabilities buys, measured (docs/security.md's table): the exporter as the
# service user with the unit's capabilities under kernel.perf_event_paranoid=2 (Debian's 3
# refuses perf_event_open without CAP_SYS_ADMIN), then without each capability in turn, against
# root; vfio-pci is loaded, so the kprobe-only vfio probes have their functions. Eight minutes
# and more under TCG, hence only when named:
#   tests/lab/run.sh --kernel 6.12 least_privilege_each
# lab: collectors=ebpf
# lab: modules=vfio_pci
# lab: tools=setpriv
# lab: when=named
# lab: timeout=1500

. /lab/guest/service_user.sh
LAB_START_SECONDS=300

lab_check "modprobe vfio_pci" modprobe vfio_pci
paranoid=$(cat /proc/sys/kernel/perf_event_paranoid)
run_exporter root

echo 2 > /proc/sys/kernel/perf_event_paranoid
# shellcheck disable=SC2086 # capability lists split into words on purpose
run_exporter unit_paranoid_2 $UNIT_CAPS
lab_check "paranoid 2: every probe attaches with the hook it has as root" test -z "$(only_in root unit_paranoid_2 probes)"
# shellcheck disable=SC2046 # one capability per word
run_exporter without_dac_read_search $(unit_caps_without dac_read_search)
lab_check "without CAP_DAC_READ_SEARCH no classic tracepoint (tracefs is root's)" \
  test -z "$(grep '=tracepoint$' "$LAB_TMP/without_dac_read_search.probes")"
echo "$paranoid" > /proc/sys/kernel/perf_event_paranoid

# shellcheck disable=SC2046
run_exporter without_perfmon $(unit_caps_without perfmon)
lab_check "without CAP_PERFMON only the kernel log is read, from /dev/kmsg" \
  test "$(cat "$LAB_TMP/without_perfmon.probes")" = kernel_log=kmsg
# shellcheck disable=SC2046
run_exporter without_syslog $(unit_caps_without syslog)
lab_expect "without CAP_SYSLOG the records before start are not read" \
  "$(lab_value without_syslog hpcnode_kernel_log_before_start_complete)" == 0
lab_expect "as root they are" "$(lab_value root hpcnode_kernel_log_before_start_complete)" == 1
lab_exporter_stop
