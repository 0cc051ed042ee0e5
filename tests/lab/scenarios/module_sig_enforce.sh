# Booted with module.sig_enforce=1: the stripped (unsigned) module is refused with EKEYREJECTED
# and counted, nothing loads or taints; the module as Debian signed it still loads.
# lab: collectors=ebpf modules
# lab: variants=pcspkr
# lab: cmdline=module.sig_enforce=1
# lab: timeout=150

module=pcspkr
failures=hpcnode_module_load_failures_total
verdicts=hpcnode_module_signature_checks_total

lab_scenario boot
lab_check "sig_enforce is Y" grep -qx Y /sys/module/module/parameters/sig_enforce
lab_exporter_start --collector.disable-defaults --collector.ebpf --collector.modules --ebpf.strict || exit 1
lab_scrape boot
lab_expect "exported sig_enforce" "$(lab_value boot hpcnode_module_sig_enforce)" == 1

lab_scenario unsigned_refused
lab_check_fails "insmod $module with its signature stripped is refused" \
  sh -c "insmod /lab/modules/$module.unsigned.ko 2> $LAB_TMP/unsigned.err"
lab_info "insmod said: $(cat "$LAB_TMP/unsigned.err")"
lab_check "refused with EKEYREJECTED (Key was rejected by service)" grep -q "Key was rejected" "$LAB_TMP/unsigned.err"
lab_scrape refused
# busybox insmod tries finit_module, then init_module with the image: two refused syscalls.
lab_expect_delta "finit_module refused" boot refused "$failures{syscall=\"finit_module\",errno=\"EKEYREJECTED\"}" == 1
lab_expect_delta "init_module refused" boot refused "$failures{syscall=\"init_module\",errno=\"EKEYREJECTED\"}" == 1
lab_expect_delta "verdict key_rejected, once per syscall" boot refused "$verdicts{result=\"key_rejected\"}" == 2
lab_record_changes boot refused "$verdicts"
# "Loading of unsigned module is rejected" is printed at every attempt.
lab_expect_delta "kernel log: unsigned module rejected" boot refused 'hpcnode_kernel_log_events_total{source="kernel_log"}' ">=" 1
lab_record_changes boot refused hpcnode_kernel_log_events_total
lab_expect_delta "no load counted" boot refused hpcnode_module_loads_total == 0
lab_expect_delta "no tainted load counted" boot refused hpcnode_module_tainted_loads_total == 0
lab_expect "taint flag E stays 0" "$(lab_value refused 'hpcnode_kernel_tainted{flag="unsigned_module",letter="E"}')" == 0
lab_check "$module not loaded" sh -c "! grep -q '^$module ' /proc/modules"

lab_scenario signed_still_loads
lab_check "insmod $module as Debian signed it" insmod /lab/modules/$module.signed.ko
lab_scrape signed
lab_expect_delta "counted" refused signed "hpcnode_module_loads_total{module=\"$module\"}" == 1
lab_expect_delta "verdict ok" refused signed "$verdicts{result=\"ok\"}" == 1
lab_expect_delta "no failed load" refused signed "$failures" == 0
lab_exporter_stop
