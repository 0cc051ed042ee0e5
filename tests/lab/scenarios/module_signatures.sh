# One Debian-signed module (pcspkr: no dependencies, not loaded at boot here) in three forms,
# not enforcing signatures: as shipped, with a corrupted signature, and with the signature
# stripped. The corrupted one comes before the stripped one so that "the taint is unchanged"
# is checked while the kernel is still clean.
# lab: collectors=ebpf modules
# lab: variants=pcspkr
# lab: timeout=200

module=pcspkr
unsigned_bit=8192 # TAINT_UNSIGNED_MODULE, letter E
loads="hpcnode_module_loads_total{module=\"$module\"}"
tainted_loads=hpcnode_module_tainted_loads_total
verdicts=hpcnode_module_signature_checks_total
failures=hpcnode_module_load_failures_total
taint_e='hpcnode_kernel_tainted{flag="unsigned_module",letter="E"}'
log_events='hpcnode_kernel_log_events_total{source="kernel_log"}'

has_bit() { awk -v mask="$1" -v bit="$2" 'BEGIN { exit !(int(mask / bit) % 2) }'; }
not_loaded() { ! grep -q "^$module " /proc/modules; }

# The kernel's own taint, and the exporter's reading of it, in scrape $1.
check_kernel_taint() {
  local scrape=$1 want_e=$2 tainted kernel_e
  tainted=$(cat /proc/sys/kernel/tainted)
  lab_expect "taint mask as in /proc/sys/kernel/tainted" "$(lab_value "$scrape" hpcnode_kernel_taint_mask)" == "$tainted"
  if has_bit "$tainted" "$unsigned_bit"; then kernel_e=1; else kernel_e=0; fi
  lab_expect "kernel's own taint bit E (/proc/sys/kernel/tainted $tainted)" "$kernel_e" == "$want_e"
  lab_expect "exported taint flag E" "$(lab_value "$scrape" "$taint_e")" == "$want_e"
}

lab_scenario boot
lab_check "$module not loaded at boot" not_loaded
lab_exporter_start --collector.disable-defaults --collector.ebpf --collector.modules --ebpf.strict \
  --collector.modules.expected=$module || exit 1
lab_scrape boot
check_kernel_taint boot 0
lab_expect "$module expected, not loaded" "$(lab_value boot "hpcnode_module_expected_loaded{module=\"$module\"}")" == 0
lab_expect "signatures not enforced" "$(lab_value boot hpcnode_module_sig_enforce)" == 0

lab_scenario signed_load
lab_check "insmod $module as Debian signed it" insmod /lab/modules/$module.signed.ko
lab_scrape signed
lab_expect_delta "counted" boot signed "$loads" == 1
lab_expect_delta "verdict ok" boot signed "$verdicts{result=\"ok\"}" == 1
lab_record_changes boot signed "$verdicts"
lab_expect_delta "no tainted load" boot signed "$tainted_loads{module=\"$module\"}" == 0
lab_expect_delta "no failed load" boot signed "$failures" == 0
check_kernel_taint signed 0
lab_check "/sys/module/$module/taint is empty" grep -qx '' /sys/module/$module/taint
lab_expect "module info: Live, no taints" \
  "$(lab_series signed "hpcnode_module_info{module=\"$module\",state=\"Live\",taints=\"\"}")" == 1
lab_expect "$module expected and loaded" "$(lab_value signed "hpcnode_module_expected_loaded{module=\"$module\"}")" == 1
lab_check "rmmod $module" rmmod $module

lab_scenario corrupted_signature
lab_scrape removed
lab_check_fails "insmod $module with a flipped byte in its PKCS#7 signature is refused" \
  sh -c "insmod /lab/modules/$module.badsig.ko 2> $LAB_TMP/badsig.err"
lab_info "insmod said: $(cat "$LAB_TMP/badsig.err")"
lab_check "refused with EKEYREJECTED (Key was rejected by service)" grep -q "Key was rejected" "$LAB_TMP/badsig.err"
lab_scrape corrupted
# busybox insmod tries finit_module, then init_module with the image: two refused syscalls.
lab_expect_delta "finit_module refused" removed corrupted "$failures{syscall=\"finit_module\",errno=\"EKEYREJECTED\"}" == 1
lab_expect_delta "init_module refused" removed corrupted "$failures{syscall=\"init_module\",errno=\"EKEYREJECTED\"}" == 1
lab_expect_delta "verdict key_rejected, once per syscall" removed corrupted "$verdicts{result=\"key_rejected\"}" == 2
lab_record_changes removed corrupted "$verdicts"
lab_record_changes removed corrupted "$failures"
lab_expect_delta "no other verdict" removed corrupted "$verdicts{result!=\"key_rejected\"}" == 0
lab_expect_delta "no other failure" removed corrupted "$failures{errno!=\"EKEYREJECTED\"}" == 0
lab_expect_delta "no load counted" removed corrupted hpcnode_module_loads_total == 0
lab_expect_delta "no tainted load counted" removed corrupted hpcnode_module_tainted_loads_total == 0
lab_expect_delta "no kernel log line (the kernel prints none)" removed corrupted "$log_events" == 0
check_kernel_taint corrupted 0
lab_check "$module not loaded" not_loaded
lab_expect "$module absent from module info" "$(lab_series corrupted "hpcnode_module_info{module=\"$module\"}")" == 0

lab_scenario unsigned_load
lab_check "insmod $module with its signature stripped loads" insmod /lab/modules/$module.unsigned.ko
lab_scrape unsigned
lab_expect_delta "counted" corrupted unsigned "$loads" == 1
lab_expect_delta "counted as unsigned" corrupted unsigned "$tainted_loads{module=\"$module\",taint=\"unsigned\"}" == 1
lab_expect_delta "no other taint" corrupted unsigned "$tainted_loads{module=\"$module\",taint!=\"unsigned\"}" == 0
lab_expect_delta "one signature verdict" corrupted unsigned "$verdicts" == 1
lab_expect_delta "not a key rejection" corrupted unsigned "$verdicts{result=\"key_rejected\"}" == 0
lab_record_changes corrupted unsigned "$verdicts"
lab_expect_delta "no failed load" corrupted unsigned "$failures" == 0
# "module verification failed: ... tainting kernel" is printed for the boot's first unsigned module.
lab_expect_delta "kernel log: verification failed" corrupted unsigned "$log_events" ">=" 1
lab_record_changes corrupted unsigned hpcnode_kernel_log_events_total
check_kernel_taint unsigned 1
lab_check "/sys/module/$module/taint is E" grep -qx E /sys/module/$module/taint
lab_expect "module info: Live, taints E" \
  "$(lab_series unsigned "hpcnode_module_info{module=\"$module\",state=\"Live\",taints=\"E\"}")" == 1
lab_exporter_stop
