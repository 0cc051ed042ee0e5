# Booted with module.sig_enforce=1: a module refused before the exporter starts (as openibd
# loading OFED at boot) is read from what the kernel log still holds, into the before-start
# gauge and not the counter; an exporter restart does not count it again; a refusal after
# start is counted by the counter only. The refusals are counted against the kernel's own log
# (`dmesg -r`, whose `<priority>` below 8 is a LOG_KERN record), since other groups of the same
# boot may refuse modules too. A process writing the same line to /dev/kmsg before start is
# not counted: the kernel logs it with facility LOG_USER; one written after start is counted as a
# process's line, apart from the events.
# lab: collectors=ebpf
# lab: variants=pcspkr
# lab: cmdline=module.sig_enforce=1
# lab: timeout=600

module=pcspkr
rejected='event="unsigned_module_rejected",source="kernel_log"'
before_start="hpcnode_kernel_log_events_before_start{$rejected}"
since_start="hpcnode_kernel_log_events_total{$rejected}"
complete=hpcnode_kernel_log_before_start_complete

# The kernel's own count of the line, from dmesg: records the kernel logged (LOG_KERN).
refusals_logged() { dmesg -r | grep -cE '^<[0-7]>.*Loading of unsigned module is rejected' || true; }

# start_and_scrape NAME: starts the exporter and scrapes NAME once the records from before
# start have been read (read on a thread of its own: the gauges appear when it is done).
start_and_scrape() {
  lab_exporter_start --collector.disable-defaults --collector.ebpf || exit 1
  lab_check "the records from before start are read" \
    lab_wait_until 30 sh -c "wget -q -O - http://$LAB_ADDRESS/metrics | grep -q '^$complete '"
  lab_scrape "$1"
}

lab_scenario refused_before_start
lab_check "sig_enforce is Y" grep -qx Y /sys/module/module/parameters/sig_enforce
logged=$(refusals_logged)
lab_check_fails "insmod $module unsigned is refused" insmod /lab/modules/$module.unsigned.ko
lab_expect "the kernel logged the refusal once per syscall" "$(refusals_logged)" == $((logged + 2))
logged=$(refusals_logged)
# A real capture of /dev/kmsg as the exporter reads it (the unit tests' fixture comes from it).
# dd reads one record per read; it blocks after the last, so timeout ends it. Written to the
# guest's memory first: a write per record to the shared folder is slower than the timeout.
timeout 5 dd if=/dev/kmsg of="$LAB_TMP/kmsg.txt" bs=8192 2> /dev/null
cp "$LAB_TMP/kmsg.txt" "/lab/results/$LAB_GROUP.kmsg.txt"
lab_info "captured $(grep -c '^[0-9]' "$LAB_TMP/kmsg.txt") records, the oldest: $(head -n 1 "$LAB_TMP/kmsg.txt")"
echo 'Loading of unsigned module is rejected' > /dev/kmsg
lab_expect "the written line is in the log, not as the kernel's" \
  "$(dmesg | grep -c 'Loading of unsigned module is rejected')" == $((logged + 1))
start_and_scrape first
lab_expect "before start: every refusal the kernel logged" "$(lab_value first "$before_start")" == "$logged"
lab_expect "since start: none" "$(lab_value first "$since_start")" == 0
lab_expect "the log reached back to boot and was read whole" "$(lab_value first "$complete")" == 1
lab_check "one log line says what was read" grep -q 'msg="read the kernel log from before start".*complete=true' "$LAB_EXPORTER_LOG"

lab_scenario restart
lab_exporter_stop
start_and_scrape restarted
lab_expect "before start: the same refusals" "$(lab_value restarted "$before_start")" == "$logged"
lab_expect "since start: still none" "$(lab_value restarted "$since_start")" == 0

lab_scenario refused_after_start
lab_check_fails "insmod $module unsigned is refused again" insmod /lab/modules/$module.unsigned.ko
lab_expect "the kernel logged it once per syscall" "$(refusals_logged)" == $((logged + 2))
lab_expect_delta "since start: exactly those two lines" restarted after "$since_start" == 2
lab_expect_delta "before start: unchanged" restarted after "$before_start" == 0
lab_expect "no collector errors" "$(lab_value after hpcnode_collector_errors_total)" == 0

# The same line written by a process after start: the printk:console program forwards it as
# it does the kernel's (6.1, 6.12), /dev/kmsg gives it with facility LOG_USER (5.10's reader,
# and the lookup of a forwarded line): a process's line, never an event.
lab_scenario written_after_start
process_lines='hpcnode_kernel_log_process_lines_total{event="unsigned_module_rejected"}'
lab_info "kernel_log hook: $(lab_matching after 'hpcnode_ebpf_probe_attached{probe="kernel_log"}' | sed -n 's/.*hook="\([^"]*\)".*/\1/p')"
echo 'Loading of unsigned module is rejected' > /dev/kmsg
lab_expect_delta "a line a process wrote after start" after written "$process_lines" == 1
lab_expect_delta "is not an event" after written "$since_start" == 0
lab_exporter_stop
