# Every hook of every module and kernel-log probe, forced one at a time with --collector.ebpf.hooks, on
# the same module loads (signed, corrupted, unsigned pcspkr) and kernel log lines: each counts
# exactly those events (guest/hooks.sh); the first round has each probe's preferred hook.
# It loads an unsigned module, so it boots apart from the groups that need an untainted kernel
# (module_signatures), with probe_no_btf: an exporter start per hook, 28 to 49 s of guest time
# per kernel with the release binary.
# lab: boot=hooks
# lab: collectors=ebpf
# lab: variants=pcspkr
# lab: timeout=600

. /lab/guest/hooks.sh
lab_module_events_setup
unavailable=
lab_console_every_record || unavailable="kernel_log:tp_btf kernel_log:raw_tp kernel_log:tracepoint"
lab_hook_matrix hooks lab_module_events "$LAB_MODULE_EVENTS" "$unavailable" \
  "--collector.disable-defaults --collector.ebpf" \
  "module_load:tp_btf,module_sig_check:fexit,module_load_syscall:tracepoint,kernel_log:tp_btf,$LAB_NOT_MODULE_PROBES" \
  "module_load:raw_tp,module_sig_check:kretprobe,module_load_syscall:tp_btf,kernel_log:raw_tp,$LAB_NOT_MODULE_PROBES" \
  "module_load:tracepoint,module_sig_check:none,module_load_syscall:raw_tp,kernel_log:tracepoint,$LAB_NOT_MODULE_PROBES" \
  "module_load:perf,module_sig_check:none,module_load_syscall:none,kernel_log:kmsg,$LAB_NOT_MODULE_PROBES"
