# One Debian-signed module (pcspkr: no dependencies, not loaded at boot here) in four forms,
# not enforcing signatures: as shipped (by finit_module and by init_module), with a corrupted
# signature, with the signature stripped, and signed by a key the kernel lacks (init_module).
# The corrupted one comes before the stripped one so that "the taint is unchanged" is checked
# while the kernel is still clean. Every verdict and failure names pcspkr; a file that is no
# module is named by its file name (finit_module) or not at all (init_module: "unknown").
# lab: collectors=ebpf modules
# lab: variants=pcspkr
# lab: helpers=modload
# lab: timeout=240

. /lab/guest/modules.sh
module=pcspkr
loads="hpcnode_module_loads_total{module=\"$module\"}"
tainted_loads=hpcnode_module_tainted_loads_total
verdicts=hpcnode_module_signature_checks_total
failures=hpcnode_module_load_failures_total
log_events='hpcnode_kernel_log_events_total{source="kernel_log"}'

lab_scenario boot
lab_check_fails "$module not loaded at boot" lab_module_loaded $module
lab_exporter_start --collector.disable-defaults --collector.ebpf --collector.modules --collector.ebpf.strict \
  --collector.modules.expected=$module || exit 1
lab_scrape boot
lab_expect_kernel_taint boot 0
lab_expect "$module expected, not loaded" "$(lab_value boot "hpcnode_module_expected_loaded{module=\"$module\"}")" == 0
lab_expect "signatures not enforced" "$(lab_value boot hpcnode_module_sig_enforce)" == 0

lab_scenario signed_load
lab_check "insmod $module as Debian signed it" insmod /lab/modules/$module.signed.ko
lab_scrape signed
lab_expect_delta "counted" boot signed "$loads" == 1
lab_expect_delta "verdict ok" boot signed "$verdicts{result=\"ok\"}" == 1
lab_expect_delta "verdict ok names $module" boot signed "$verdicts{module=\"$module\",result=\"ok\"}" == 1
lab_record_changes boot signed "$verdicts"
lab_expect_delta "no tainted load" boot signed "$tainted_loads{module=\"$module\"}" == 0
lab_expect_delta "no failed load" boot signed "$failures" == 0
lab_expect_kernel_taint signed 0
lab_check "/sys/module/$module/taint is empty" grep -qx '' /sys/module/$module/taint
lab_expect "module info: Live, no taints" \
  "$(lab_series signed "hpcnode_module_info{module=\"$module\",state=\"Live\",taints=\"\"}")" == 1
lab_expect "$module expected and loaded" "$(lab_value signed "hpcnode_module_expected_loaded{module=\"$module\"}")" == 1
lab_check "rmmod $module" rmmod $module

lab_scenario signed_init_module
lab_check "init_module of $module as Debian signed it" /lab/bin/modload init /lab/modules/$module.signed.ko
lab_scrape signed_init
lab_expect_delta "counted" signed signed_init "$loads" == 1
lab_expect_delta "verdict ok names $module (from the image)" signed signed_init "$verdicts{module=\"$module\",result=\"ok\"}" == 1
lab_check "rmmod $module" rmmod $module

lab_scenario corrupted_signature
lab_scrape removed
lab_expect_refused_load removed corrupted /lab/modules/$module.badsig.ko
lab_expect_delta "no kernel log line (the kernel prints none)" removed corrupted "$log_events" == 0
lab_expect_kernel_taint corrupted 0
lab_check_fails "$module not loaded" lab_module_loaded $module
lab_expect "$module absent from module info" "$(lab_series corrupted "hpcnode_module_info{module=\"$module\"}")" == 0

lab_scenario unsigned_load
lab_check "insmod $module with its signature stripped loads" insmod /lab/modules/$module.unsigned.ko
lab_scrape unsigned
lab_expect_delta "counted" corrupted unsigned "$loads" == 1
lab_expect_delta "counted as unsigned" corrupted unsigned "$tainted_loads{module=\"$module\",taint=\"unsigned_module\"}" == 1
lab_expect_delta "no other taint" corrupted unsigned "$tainted_loads{module=\"$module\",taint!=\"unsigned_module\"}" == 0
lab_expect_delta "one signature verdict (none where module_sig_check is inlined)" corrupted unsigned "$verdicts" == "$lab_unsigned_verdicts"
lab_expect_delta "not a key rejection" corrupted unsigned "$verdicts{result=\"key_rejected\"}" == 0
lab_record_changes corrupted unsigned "$verdicts"
lab_expect_delta "no failed load" corrupted unsigned "$failures" == 0
# "module verification failed: ... tainting kernel" is printed for the boot's first unsigned module.
lab_expect_delta "kernel log: verification failed" corrupted unsigned \
  "hpcnode_kernel_log_events_total{event=\"module_verification_failed\",source=\"kernel_log\",module=\"$module\"}" == 1
lab_record_changes corrupted unsigned hpcnode_kernel_log_events_total
lab_expect_kernel_taint unsigned 1
lab_check "/sys/module/$module/taint is E" grep -qx E /sys/module/$module/taint
lab_expect "module info: Live, taints E" \
  "$(lab_series unsigned "hpcnode_module_info{module=\"$module\",state=\"Live\",taints=\"E\"}")" == 1

lab_scenario foreign_key_init_module
lab_check "rmmod $module" rmmod $module
lab_check "init_module of $module signed by a key the kernel lacks loads (not enforcing)" \
  /lab/bin/modload init /lab/modules/$module.foreign_keyid.ko
lab_scrape foreign
lab_expect_delta "counted" unsigned foreign "$loads" == 1
lab_expect_delta "one verdict, naming $module" unsigned foreign "$verdicts{module=\"$module\"}" == 1
lab_record_changes unsigned foreign "$verdicts"
lab_check "rmmod $module" rmmod $module

lab_scenario not_a_module
# Longer than an ELF header (64 bytes), so that init_module copies it and checks its signature.
printf 'not a kernel module but text, longer than the ELF header that init_module wants first\n' > "$LAB_TMP/lab-junk.ko"
lab_check_fails "finit_module of a text file is refused" /lab/bin/modload finit "$LAB_TMP/lab-junk.ko"
lab_check_fails "init_module of a text file is refused" /lab/bin/modload init "$LAB_TMP/lab-junk.ko"
lab_scrape junk
lab_expect_delta "finit_module failure named by its file (lab-junk.ko: lab_junk)" foreign junk \
  "$failures{syscall=\"finit_module\",module=\"lab_junk\"}" == 1
lab_expect_delta "init_module failure: no name in the image" foreign junk \
  "$failures{syscall=\"init_module\",module=\"unknown\"}" == 1
lab_expect_delta "the verdicts: no name in the image" foreign junk "$verdicts{module=\"unknown\"}" == $((2 * lab_unsigned_verdicts))
lab_record_changes foreign junk "$verdicts"
lab_expect_collectors_clean junk
lab_exporter_stop
