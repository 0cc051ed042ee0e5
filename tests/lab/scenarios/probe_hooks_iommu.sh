# The IOMMU probes on each of their hooks, forced with --collector.ebpf.hooks (guest/hooks.sh): real DMAR
# faults from edu's DMA to unmapped IOVAs, one fault interrupt each on fentry and on kprobe;
# iommu:io_page_fault attached on tp_btf and raw_tp, where Intel VT-d reports nothing.
# In the default lab since its rounds finish in 68 to 90 s of guest time (all three kernels,
# loaded host): iommu_edu's boot, after it.
# lab: machine=q35-iommu
# lab: collectors=ebpf
# lab: timeout=300

. /lab/guest/hooks.sh
. /lab/guest/edu.sh
lab_scenario setup
lab_check "edu device present" test -n "$edu" || exit 1
command=$(edu_enable_dma)
lab_expect "memory decode and bus mastering on" $((command & 6)) == 6

# Two faults: a DMA read from, and a DMA write to, IOVAs nothing maps.
dmar_faults() {
  edu_dma 0x300000 0x40000 1 && lab_wait_until 10 dma_done &&
    edu_dma 0x40000 0x400000 3 && lab_wait_until 10 dma_done
}
others=module_load:none,module_sig_check:none,module_load_syscall:none,kernel_log:none,vfio_enable:none,vfio_aer:none,vfio_pin:none,vfio_holders:none
lab_hook_matrix hooks dmar_faults "dmar_fault=2 iommu_fault=0" "" \
  "--collector.disable-defaults --collector.ebpf" \
  "dmar_fault:fentry,iommu_fault:tp_btf,$others" "dmar_fault:kprobe,iommu_fault:raw_tp,$others"
