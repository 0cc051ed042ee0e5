# The hook matrix of the eBPF probes (source after lib.sh): the exporter runs once per round,
# each round restricting probes to one hook each with --collector.ebpf.hooks (PROBE:none leaves the probes
# not under test out: each probe's load costs seconds under TCG). The same events are made in
# every round and each probe must count exactly what they are: what its preferred hook counts
# (the preferred hooks are one of the rounds), or be a hook this kernel cannot offer, with the
# exporter saying why. Each hook tried gives one line for docs/ebpf.md's table:
#   INFO NAME_N: hook PROBE HOOK attached EVENTS events RUNS runs NS ns/run
#   INFO NAME_N: hook PROBE HOOK missed: REASON

lab_release=$(uname -r)
# printk:console fires for every record from 5.19 on only (the exporter refuses it before).
lab_console_every_record() {
  awk -v r="$lab_release" 'BEGIN { split(r, v, /[.-]/); exit !(v[1] > 5 || (v[1] == 5 && v[2] >= 19)) }'
}

# The series a probe counts its events in.
lab_probe_events() {
  case $1 in
    module_load) echo hpcnode_module_loads_total ;;
    module_sig_check) echo hpcnode_module_signature_checks_total ;;
    module_load_syscall) echo hpcnode_module_load_failures_total ;;
    kernel_log) echo hpcnode_kernel_log_process_lines_total ;;
    dmar_fault) echo hpcnode_iommu_fault_interrupts_total ;;
  esac
}

# The hook PROBE got in scrape NAME ("none" when it got none).
lab_probe_hook() {
  lab_matching "$1" "hpcnode_ebpf_probe_attached{probe=\"$2\"}" |
    sed -n 's/.*hook="\([^"]*\)".*/\1/p' | head -n1
}

# lab_hook_matrix NAME DRIVE EXPECTED UNAVAILABLE FLAGS ROUND...: one scenario NAME_N per ROUND,
# a --collector.ebpf.hooks value (a probe it does not name is on its preferred hook). DRIVE is a command
# that makes the events; EXPECTED is "PROBE=COUNT ..." (what DRIVE makes each probe count; each
# is checked unless the ROUND names it with hook none); UNAVAILABLE is
# "PROBE:HOOK ..." that this kernel cannot offer; FLAGS the exporter's other flags (words).
lab_hook_matrix() {
  local name=$1 drive=$2 expected=$3 unavailable=$4 flags=$5 round=0 hooks pair probe hook want selector reason
  shift 5
  for hooks in "$@"; do
    round=$((round + 1))
    lab_scenario "${name}_$round"
    # shellcheck disable=SC2086 # FLAGS are words
    lab_exporter_start $flags "--collector.ebpf.hooks=$hooks" || continue
    lab_scrape "before_$round"
    "$drive"
    lab_scrape "after_$round"
    for pair in $expected; do
      probe=${pair%=*} want=${pair#*=}
      hook=$(echo "$hooks" | tr , '\n' | sed -n "s/^$probe://p")
      case $hook in
        none) continue ;; # not under test in this round
        "") hook=$(lab_probe_hook "after_$round" "$probe") ;;
      esac
      if [ "$(lab_value "after_$round" "hpcnode_ebpf_probe_attached{probe=\"$probe\",hook=\"$hook\"}")" != 1 ]; then
        reason=$(lab_matching "after_$round" "hpcnode_ebpf_probe_failure_info{probe=\"$probe\"}" |
          sed -n 's/.*reason="\([^"]*\)".*/\1/p')
        lab_info "hook $probe $hook missed: $reason"
        case " $unavailable " in
          *" $probe:$hook "*) lab_expect "$probe on $hook: unavailable on $lab_release, and the exporter says why" \
            "$(lab_series "after_$round" "hpcnode_ebpf_probe_failure_info{probe=\"$probe\"}")" == 1 ;;
          *) lab_fail "$probe on $hook attaches" "not attached: $reason" ;;
        esac
        continue
      fi
      selector=$(lab_probe_events "$probe")
      lab_expect_delta "$probe on $hook counts the events" "before_$round" "after_$round" "$selector" == "$want"
      case $probe in
        module_sig_check | module_load_syscall)
          lab_expect_delta "$probe on $hook: every event has module=\"$LAB_MODULE_NAMED\"" "before_$round" "after_$round" \
            "$selector{module=\"$LAB_MODULE_NAMED\"}" == "$want" ;;
      esac
      lab_info "hook $probe $hook attached $(lab_delta "before_$round" "after_$round" "$selector") events" \
        "$(lab_run_stats "before_$round" "after_$round" "$probe")"
    done
    lab_exporter_stop
  done
}

# "RUNS runs NS ns/run" of PROBE's BPF program between two scrapes, from BPF run-time statistics
# ("no BPF program" for the perf and kmsg hooks).
lab_run_stats() {
  local runs seconds
  runs=$(lab_delta "$1" "$2" "hpcnode_ebpf_program_runs_total{probe=\"$3\"}")
  seconds=$(lab_delta "$1" "$2" "hpcnode_ebpf_program_run_seconds_total{probe=\"$3\"}")
  if [ "$(lab_series "$2" "hpcnode_ebpf_program_runs_total{probe=\"$3\"}")" = 0 ]; then
    echo "no BPF program"
  else
    awk -v r="$runs" -v s="$seconds" 'BEGIN { printf "%d runs %d ns/run\n", r, r ? s * 1e9 / r : 0 }'
  fi
}

# The module label every signature verdict and failed load of a round carries: the rounds load
# pcspkr's variants; without kernel BTF the probes cannot name it (probe_no_btf sets "unknown").
LAB_MODULE_NAMED=pcspkr

# The probes the module rounds leave out.
LAB_NOT_MODULE_PROBES=iommu_fault:none,dmar_fault:none,vfio_enable:none,vfio_aer:none,vfio_pin:none

# The module events of one round, as pcspkr's variants make them (busybox insmod tries
# finit_module, then init_module): two loads (signed, unsigned), four signature verdicts
# (ok; the corrupted signature refused twice; unsigned: ok, not enforced), two failed load
# syscalls, and three kernel log lines that match a known event, written to /dev/kmsg as any
# root process can (counted as a process's lines: every hook delivers them, and none counts
# them as the kernel's). Where module_sig_check is inlined (Debian's 5.10: not in kallsyms) the
# probe hooks mod_verify_sig, which only signed modules reach: three verdicts.
# module_sig_check prints "module verification failed" once per boot, for the first unsigned
# module: lab_module_events_setup loads one before the rounds, to keep that line out of them.
lab_module_events_setup() {
  lab_scenario setup
  # module_signatures, earlier in the same boot, leaves pcspkr loaded.
  rmmod pcspkr 2> /dev/null
  lab_check "an unsigned module loaded once before the rounds" \
    sh -c 'insmod /lab/modules/pcspkr.unsigned.ko && rmmod pcspkr'
}
sig_checks=4
grep -q ' module_sig_check$' /proc/kallsyms || sig_checks=3
LAB_MODULE_EVENTS="module_load=2 module_sig_check=$sig_checks module_load_syscall=2 kernel_log=3"
lab_module_events() {
  insmod /lab/modules/pcspkr.signed.ko && rmmod pcspkr
  insmod /lab/modules/pcspkr.badsig.ko 2> /dev/null
  insmod /lab/modules/pcspkr.unsigned.ko && rmmod pcspkr
  for line in 1 2 3; do echo "<3>Loading of unsigned module is rejected" > /dev/kmsg; done
}
