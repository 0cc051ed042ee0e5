# Without kernel BTF (/sys/kernel/btf hidden under a tmpfs): every module and kernel-log probe
# attaches through a hook that needs none and counts what the preferred hooks count; the
# others say they need BTF. Then --collector.ebpf.btf-path with a copy of the kernel's BTF brings the
# preferred hooks back, and a path that does not exist is named in the failure reasons.
# It loads an unsigned module: in probe_hooks' boot, apart from the groups that need an
# untainted kernel. An exporter start per hook, 18 to 35 s of guest time per kernel with the
# release binary.
# lab: boot=hooks
# lab: collectors=ebpf
# lab: variants=pcspkr
# lab: timeout=480

. /lab/guest/hooks.sh
lab_module_events_setup
attached=hpcnode_ebpf_probe_attached
failure_info=hpcnode_ebpf_probe_failure_info
flags="--collector.disable-defaults --collector.ebpf"

lab_scenario hide_btf
lab_check "copy of the kernel's BTF" cp /sys/kernel/btf/vmlinux "$LAB_TMP/vmlinux.btf" || exit 1
lab_check "kernel BTF hidden" mount -t tmpfs none /sys/kernel/btf || exit 1
lab_check "no /sys/kernel/btf/vmlinux" test ! -e /sys/kernel/btf/vmlinux

# The IOMMU and vfio probes stay in: they need BTF, and say so without a kernel call.
# Without BTF the namers do not attach: verdicts and failures are module="unknown".
LAB_MODULE_NAMED=unknown
lab_hook_matrix no_btf lab_module_events "$LAB_MODULE_EVENTS" "" "$flags" ""
LAB_MODULE_NAMED=pcspkr
lab_scenario no_btf_hooks
lab_expect "module_load on the classic tracepoint" "$(lab_value after_1 "$attached{probe=\"module_load\",hook=\"tracepoint\"}")" == 1
lab_expect "module_sig_check on kretprobe (fixed x86-64 registers, no CO-RE)" \
  "$(lab_value after_1 "$attached{probe=\"module_sig_check\",hook=\"kretprobe\"}")" == 1
lab_expect "module_load_syscall on the syscall tracepoints" \
  "$(lab_value after_1 "$attached{probe=\"module_load_syscall\",hook=\"tracepoint\"}")" == 1
lab_expect "every probe not attached says it needs kernel BTF" \
  "$(lab_series after_1 "$failure_info{reason=~\".*needs kernel BTF.*\"}")" == "$(lab_series after_1 "$failure_info")"
lab_record_series after_1 "$failure_info"

lab_hook_matrix btf_path lab_module_events "$LAB_MODULE_EVENTS" "" \
  "$flags --collector.ebpf.btf-path=$LAB_TMP/vmlinux.btf" "$LAB_NOT_MODULE_PROBES"
lab_scenario btf_path_hooks
lab_expect "module_load on tp_btf again" "$(lab_value after_1 "$attached{probe=\"module_load\",hook=\"tp_btf\"}")" == 1
lab_expect "module_sig_check on fexit again" "$(lab_value after_1 "$attached{probe=\"module_sig_check\",hook=\"fexit\"}")" == 1

lab_scenario btf_path_missing
# shellcheck disable=SC2086 # flags are words
lab_exporter_start $flags --collector.ebpf.btf-path=/lab/no-such.btf || exit 1
lab_scrape missing
lab_expect "the exporter serves; probes that need BTF name the file" \
  "$(lab_series missing "$failure_info{reason=~\".*--collector.ebpf.btf-path /lab/no-such.btf.*\"}")" ">=" 1
lab_expect "module_load still attached, on the classic tracepoint" \
  "$(lab_value missing "$attached{probe=\"module_load\",hook=\"tracepoint\"}")" == 1
lab_exporter_stop
umount /sys/kernel/btf
