# Booted with lockdown=integrity and signatures not enforced by sig_enforce: lockdown alone
# refuses what carries no signature the kernel trusts (EPERM), as the exporter's prediction
# says. The same variants and root as module_file_signatures.
# lab: collectors=modules
# lab: variants=pcspkr
# lab: cmdline=lockdown=integrity
# lab: timeout=150

. /lab/guest/modules.sh
module=pcspkr
expected=${module}_signed,${module}_unsigned,${module}_foreign_keyid,${module}_foreign_serial,${module}_badsig

lab_scenario files
lab_check "lockdown is integrity" grep -q '\[integrity\]' /sys/kernel/security/lockdown
lab_check "sig_enforce is N" grep -qx N /sys/module/module/parameters/sig_enforce
# TCG on shared cores decodes slowly: the first scrape's deadline is not what is tested here.
lab_exporter_start --collector.disable-defaults --collector.modules --path.rootfs=/lab/modules/root \
  --scrape.timeout=60s --collector.modules.expected=$expected || exit 1
lab_scrape files
lab_expect "lockdown integrity exported" "$(lab_value files 'hpcnode_kernel_lockdown_mode{mode="integrity"}')" == 1
lab_expect "no collector error" "$(lab_value files hpcnode_collector_errors_total)" == 0

lab_scenario verdicts
# A group before this one in the same boot (module_sig_enforce) may leave it loaded.
if lab_module_loaded $module; then lab_check "rmmod $module left loaded before" rmmod $module; fi
lab_expect_file_verdicts files $module signed=issuer_name_match/0 unsigned=unsigned/1 \
  foreign_keyid=untrusted/1 foreign_serial=unknown/1 badsig=issuer_name_match/1
lab_check_fails "$module not loaded after" lab_module_loaded $module
lab_exporter_stop
