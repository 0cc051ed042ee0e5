# Booted with module.sig_enforce=1: the stripped (unsigned) module is refused with EKEYREJECTED
# and counted, nothing loads or taints; so is the module signed by a key the kernel lacks
# (finit_module alone), each verdict and failure naming pcspkr; the module as Debian signed it
# still loads.
# lab: collectors=ebpf modules
# lab: variants=pcspkr
# lab: helpers=modload
# lab: cmdline=module.sig_enforce=1
# lab: timeout=200

. /lab/guest/modules.sh
module=pcspkr

lab_scenario boot
lab_check "sig_enforce is Y" grep -qx Y /sys/module/module/parameters/sig_enforce
lab_exporter_start --collector.disable-defaults --collector.ebpf --collector.modules --collector.ebpf.strict || exit 1
lab_scrape boot
lab_expect "exported sig_enforce" "$(lab_value boot hpcnode_module_sig_enforce)" == 1

lab_scenario unsigned_refused
lab_expect_refused_load boot refused /lab/modules/$module.unsigned.ko $((2 * lab_unsigned_verdicts))
# "Loading of unsigned module is rejected" is printed at every attempt: once per syscall.
lab_expect_delta "kernel log: unsigned module rejected" boot refused \
  'hpcnode_kernel_log_events_total{event="unsigned_module_rejected",source="kernel_log"}' == 2
lab_record_changes boot refused hpcnode_kernel_log_events_total
lab_expect_kernel_taint refused 0
lab_check_fails "$module not loaded" lab_module_loaded $module

lab_scenario foreign_key_refused
lab_check_fails "finit_module of $module signed by a key the kernel lacks is refused" \
  /lab/bin/modload finit /lab/modules/$module.foreign_keyid.ko
lab_scrape foreign
lab_expect_delta "finit_module refused with EKEYREJECTED, naming $module" refused foreign \
  "hpcnode_module_load_failures_total{syscall=\"finit_module\",errno=\"EKEYREJECTED\",module=\"$module\"}" == 1
lab_expect_delta "no other failure" refused foreign hpcnode_module_load_failures_total == 1
# key_rejected from module_sig_check; unknown_key where the probe hooks mod_verify_sig (5.10).
lab_expect_delta "a refusing verdict, naming $module" refused foreign \
  "hpcnode_module_signature_checks_total{result=~\"key_rejected|unknown_key\",module=\"$module\"}" == 1
lab_record_changes refused foreign hpcnode_module_signature_checks_total
lab_expect_delta "no load counted" refused foreign hpcnode_module_loads_total == 0

lab_scenario signed_still_loads
lab_check "insmod $module as Debian signed it" insmod /lab/modules/$module.signed.ko
lab_scrape signed
lab_expect_delta "counted" foreign signed "hpcnode_module_loads_total{module=\"$module\"}" == 1
lab_expect_delta "verdict ok, naming $module" foreign signed "hpcnode_module_signature_checks_total{result=\"ok\",module=\"$module\"}" == 1
lab_expect_delta "no failed load" foreign signed hpcnode_module_load_failures_total == 0
lab_expect_collectors_clean signed
lab_exporter_stop
