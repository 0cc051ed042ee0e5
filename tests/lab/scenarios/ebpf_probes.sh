# The eBPF probes on a Debian kernel with BTF, kprobes and fexit: every probe attaches under
# --collector.ebpf.strict, and each reports the hook it got (the cheapest that the kernel offers).
# lab: collectors=ebpf
# lab: timeout=120

attached=hpcnode_ebpf_probe_attached

lab_scenario strict_attach
lab_exporter_start --collector.disable-defaults --collector.ebpf --collector.ebpf.strict || exit 1
lab_scrape probes
lab_record_series probes "$attached"
lab_expect "the four probes report a hook" "$(lab_series probes "$attached")" ">=" 4
# The IOMMU and vfio probes are not required here (no vfio modules loaded): iommu_edu checks them.
required="$attached{probe=~\"module_load|module_sig_check|module_load_syscall|kernel_log\"}"
lab_expect "no required probe reports value 0" "$(lab_series probes "$required")" == \
  "$(lab_value probes "$required")"
lab_expect "signature check on fexit or kretprobe" \
  "$(lab_value probes "$attached{probe=\"module_sig_check\",hook=~\"fexit|kretprobe\"}")" == 1
lab_expect "module_load on a tracepoint (tp_btf, raw_tp or classic)" \
  "$(lab_value probes "$attached{probe=\"module_load\",hook=~\"tp_btf|raw_tp|tracepoint\"}")" == 1
lab_expect "load syscalls attached" "$(lab_value probes "$attached{probe=\"module_load_syscall\",hook!=\"none\"}")" == 1
lab_expect "kernel log attached" "$(lab_value probes "$attached{probe=\"kernel_log\",hook!=\"none\"}")" == 1
lab_exporter_stop

lab_scenario disabled
lab_exporter_start --no-collector.ebpf || exit 1
lab_scrape off
lab_expect "--no-collector.ebpf: no probe series" "$(lab_series off "$attached")" == 0
lab_exporter_stop
