# Checks shared by the module scenario groups (source after lib.sh).

lab_module_loaded() { grep -q "^$1 " /proc/modules; }

# Signature verdicts per load of an image without a signature: module_sig_check gives one; where
# it is inlined (Debian's 5.10: not in kallsyms) the probe hooks mod_verify_sig, which only
# signed images reach: none.
lab_unsigned_verdicts=1
grep -q ' module_sig_check$' /proc/kallsyms || lab_unsigned_verdicts=0

# lab_expect_kernel_taint SCRAPE E: the kernel's own unsigned-module taint bit (E, 8192 in
# /proc/sys/kernel/tainted) is E (0 or 1), and scrape SCRAPE exports the same mask and flag.
lab_expect_kernel_taint() {
  local tainted kernel_e
  tainted=$(cat /proc/sys/kernel/tainted)
  kernel_e=$(awk -v mask="$tainted" 'BEGIN { print int(mask / 8192) % 2 }')
  lab_expect "kernel's own taint bit E (/proc/sys/kernel/tainted $tainted)" "$kernel_e" == "$2"
  lab_expect "taint mask as in /proc/sys/kernel/tainted" "$(lab_value "$1" hpcnode_kernel_taint_mask)" == "$tainted"
  lab_expect "exported taint flag E" "$(lab_value "$1" 'hpcnode_kernel_tainted{flag="unsigned_module",letter="E"}')" == "$2"
}

# lab_expect_refused_load BEFORE AFTER FILE [VERDICTS]: insmod FILE is refused with EKEYREJECTED,
# and the exporter saw exactly that. busybox insmod tries finit_module, then init_module with the
# image: two refused syscalls, one key_rejected verdict each (VERDICTS, default 2, in all), all
# naming the module (the file's name up to its first dot), and no load. Leaves scrape AFTER.
lab_expect_refused_load() {
  local before="$1" after="$2" file="$3" verdict_count="${4:-2}" module
  local failures=hpcnode_module_load_failures_total verdicts=hpcnode_module_signature_checks_total
  module=$(basename "$file")
  module=${module%%.*}
  lab_check_fails "insmod $(basename "$file") is refused" sh -c "insmod $file 2> $LAB_TMP/insmod.err"
  lab_info "insmod said: $(cat "$LAB_TMP/insmod.err")"
  lab_check "refused with EKEYREJECTED (Key was rejected by service)" grep -q "Key was rejected" "$LAB_TMP/insmod.err"
  lab_scrape "$after"
  lab_expect_delta "finit_module refused" "$before" "$after" "$failures{syscall=\"finit_module\",errno=\"EKEYREJECTED\"}" == 1
  lab_expect_delta "init_module refused" "$before" "$after" "$failures{syscall=\"init_module\",errno=\"EKEYREJECTED\"}" == 1
  lab_expect_delta "verdict key_rejected, once per syscall" "$before" "$after" "$verdicts{result=\"key_rejected\"}" == "$verdict_count"
  lab_record_changes "$before" "$after" "$verdicts"
  lab_expect_delta "no other verdict" "$before" "$after" "$verdicts{result!=\"key_rejected\"}" == 0
  lab_expect_delta "no other failure" "$before" "$after" "$failures{errno!=\"EKEYREJECTED\"}" == 0
  lab_expect_delta "both failures name $module" "$before" "$after" "$failures{module=\"$module\"}" == 2
  lab_expect_delta "the verdicts name $module" "$before" "$after" "$verdicts{module=\"$module\"}" == "$verdict_count"
  lab_expect_delta "no load counted" "$before" "$after" hpcnode_module_loads_total == 0
  lab_expect_delta "no tainted load counted" "$before" "$after" hpcnode_module_tainted_loads_total == 0
}

# lab_expect_collectors_clean SCRAPE: the ebpf and modules collectors both succeeded and counted
# no error, whatever the scenario did to the kernel.
lab_expect_collectors_clean() {
  lab_expect "ebpf and modules collectors succeeded" \
    "$(lab_value "$1" 'hpcnode_scrape_collector_success{collector=~"ebpf|modules"}')" == 2
  lab_expect "no collector errors" "$(lab_value "$1" hpcnode_collector_errors_total)" == 0
}

# lab_expect_file_verdicts SCRAPE MODULE VARIANT=STATE/REFUSED...: the exporter's static verdict
# on each variant of MODULE under /lab/modules/root (scrape SCRAPE) against the kernel's own,
# insmod of the same image (/lab/modules/MODULE.VARIANT.ko). STATE is `unsigned` for
# hpcnode_module_file_signed 0, else the signer's trust state; REFUSED (1 or 0) the kernel's
# expected verdict. Where the exporter predicts a refusal (the alert's expression: signatures
# enforced, and the file unsigned or its signer untrusted) the kernel must refuse.
lab_expect_file_verdicts() {
  local scrape="$1" module="$2" pair variant state want signed untrusted enforcing predicted refused
  enforcing=$(awk -v e="$(lab_value "$scrape" hpcnode_module_sig_enforce)" \
    -v l="$(lab_value "$scrape" 'hpcnode_kernel_lockdown_mode{mode!="none"}')" 'BEGIN { print (e == 1 || l == 1) ? 1 : 0 }')
  lab_info "signatures enforced (sig_enforce or lockdown): $enforcing"
  shift 2
  for pair in "$@"; do
    variant=${pair%%=*}
    state=${pair#*=}
    want=${state#*/}
    state=${state%/*}
    signed=$(lab_value "$scrape" "hpcnode_module_file_signed{module=\"${module}_$variant\"}")
    lab_expect "${module}_$variant: one file series" \
      "$(lab_series "$scrape" "hpcnode_module_file_signed{module=\"${module}_$variant\"}")" == 1
    if [ "$state" = unsigned ]; then
      lab_expect "${module}_$variant: file not signed" "$signed" == 0
    else
      lab_expect "${module}_$variant: file signed" "$signed" == 1
      lab_expect "${module}_$variant: signer $state" \
        "$(lab_series "$scrape" "hpcnode_module_file_signer_trust{module=\"${module}_$variant\",state=\"$state\"}")" == 1
    fi
    untrusted=$(lab_series "$scrape" "hpcnode_module_file_signer_trust{module=\"${module}_$variant\",state=\"untrusted\"}")
    predicted=$(awk -v e="$enforcing" -v s="$signed" -v u="$untrusted" 'BEGIN { print (e == 1 && (s == 0 || u == 1)) ? 1 : 0 }')
    if insmod "/lab/modules/$module.$variant.ko" 2> "$LAB_TMP/insmod.err"; then
      refused=0
      rmmod "$module"
    else
      refused=1
    fi
    lab_info "${module}_$variant: exporter predicts a refusal: $predicted (state $state); kernel refused: $refused $(cat "$LAB_TMP/insmod.err")"
    lab_expect "${module}_$variant: the kernel's verdict (1 refused)" "$refused" == "$want"
    if [ "$predicted" = 1 ]; then
      lab_expect "${module}_$variant: refused, as the exporter predicted" "$refused" == 1
    fi
  done
}
