# GPU passthrough on an emulated Intel IOMMU with qemu's edu device (1234:11e8): edu bound to
# vfio-pci is a ready passthrough device in its real IOMMU group; real DMAR faults (edu's DMA
# engine programmed through BAR0 with bus mastering on, to IOVAs nothing maps) are counted by
# the dmar_fault probe and by the kernel-log matcher with the device, access and reason the
# kernel prints; a VMM's view (helpers/vfio_pin.c): opening the device runs the vfio_enable
# probe, and pinning 1 MiB over a 64 KiB memlock limit is a vfio pin failure, ENOMEM; unbound,
# edu is not ready. The vfio modules load after the exporter started: the vfio probes wait for
# them, attach on their uevent (before any scrape), detach when they unload (counts kept) and
# attach again when they reload.
# lab: machine=q35-iommu
# lab: modules=vfio-pci vfio_iommu_type1
# lab: collectors=ebpf pci
# lab: helpers=vfio_pin
# lab: timeout=480

attached=hpcnode_ebpf_probe_attached
faults=hpcnode_iommu_faults_total
. /lab/guest/edu.sh
lab_scenario setup
lab_check "edu device present" test -n "$edu" || exit 1
address=$(basename "$edu")
short=${address#0000:} # DMAR lines print bus:slot.function without the segment
group=$(basename "$(readlink "$edu/iommu_group")")
lab_info "edu at $address, IOMMU group $group"
lab_check "IOMMU dmar0 present" test -e /sys/class/iommu/dmar0
lab_check "vfio_pci_core and vfio_pci not loaded yet" test ! -e /sys/module/vfio_pci_core -a ! -e /sys/module/vfio_pci
lab_exporter_start --collector.disable-defaults --collector.ebpf --collector.pci \
  --collector.pci.passthrough-device=1234:11e8 || exit 1

lab_scenario waiting_for_vfio
vfio_probes="vfio_enable vfio_pin vfio_aer"
waiting='hpcnode_ebpf_probe_failure_info{probe="vfio_pin",reason="waiting for module vfio_iommu_type1 to load"}'
lab_scrape waiting
for probe in $vfio_probes; do
  lab_expect "$probe not attached" "$(lab_series waiting "$attached{probe=\"$probe\",hook=\"none\"}")" == 1
done
lab_expect "vfio_pin waits for vfio_iommu_type1" "$(lab_series waiting "$waiting")" == 1
lab_expect "vfio_enable waits for vfio_pci_core or vfio_pci" "$(lab_series waiting \
  'hpcnode_ebpf_probe_failure_info{probe="vfio_enable",reason="waiting for module vfio_pci_core or vfio_pci to load"}')" == 1
load_vfio_and_bind() {
  modprobe vfio-pci && modprobe vfio_iommu_type1 &&
    echo 1234 11e8 > /sys/bus/pci/drivers/vfio-pci/new_id &&
    lab_wait_until 10 test -e "/sys/bus/pci/drivers/vfio-pci/$address"
}
# The exporter's log says PROBE attached on a module uevent, at least COUNT times.
attached_on_uevent() { # PROBE COUNT
  [ "$(grep 'msg="eBPF probe attached"' "$LAB_EXPORTER_LOG" | grep "probe=$1 " | grep -c 'on="module uevent"')" -ge "$2" ]
}
lab_check "modprobe vfio-pci vfio_iommu_type1, edu bound to vfio-pci" load_vfio_and_bind
lab_check "/dev/vfio/$group exists" test -e "/dev/vfio/$group"
for probe in $vfio_probes; do
  lab_check "$probe attached on its module's uevent, before any scrape" lab_wait_until 10 attached_on_uevent "$probe" 1
done

lab_scenario probes
lab_scrape probes
lab_record_series probes "$attached"
lab_expect "dmar_fault on fentry or kprobe" \
  "$(lab_value probes "$attached{probe=\"dmar_fault\",hook=~\"fentry|kprobe\"}")" == 1
lab_expect "iommu_fault on tp_btf or raw_tp" \
  "$(lab_value probes "$attached{probe=\"iommu_fault\",hook=~\"tp_btf|raw_tp\"}")" == 1
for probe in vfio_enable vfio_pin; do
  lab_expect "$probe on kretprobe" "$(lab_value probes "$attached{probe=\"$probe\",hook=\"kretprobe\"}")" == 1
done
lab_expect "vfio_aer on kprobe" "$(lab_value probes "$attached{probe=\"vfio_aer\",hook=\"kprobe\"}")" == 1
lab_expect "vfio_holders on kprobe (vfio loaded with vfio-pci)" \
  "$(lab_value probes "$attached{probe=\"vfio_holders\",hook=\"kprobe\"}")" == 1
lab_check "vfio_holders attached on vfio's uevent" attached_on_uevent vfio_holders 1
lab_expect "one attach after start each, the three above and vfio_holders" \
  "$(lab_value probes hpcnode_ebpf_probe_module_attaches_total)" == 4

lab_scenario bound_ready
lab_scrape bound
lab_expect "ready" "$(lab_value bound "hpcnode_pci_passthrough_ready{device=\"$address\"}")" == 1
for check in present iommu_enabled vfio_bound group_isolated bars_assigned; do
  lab_expect "check $check passes" \
    "$(lab_value bound "hpcnode_pci_passthrough_check{device=\"$address\",check=\"$check\"}")" == 1
done
lab_expect "identity: vfio-pci, group $group" "$(lab_series bound \
  "hpcnode_pci_device_info{device=\"$address\",vendor_id=\"0x1234\",device_id=\"0x11e8\",driver=\"vfio-pci\",iommu_group=\"$group\"}")" == 1
lab_expect "group $group has one device" \
  "$(lab_value bound "hpcnode_iommu_group_devices{group=\"$group\"}")" == 1
lab_expect "IOMMU enabled" "$(lab_value bound hpcnode_iommu_enabled)" == 1

lab_scenario dmar_faults
command=$(edu_enable_dma)
lab_expect "memory decode and bus mastering on" $((command & 6)) == 6
lab_scrape before_read
lab_check "DMA read from unmapped IOVA 0x300000" edu_dma 0x300000 0x40000 1
lab_check "read DMA finished" lab_wait_until 10 dma_done
lab_expect_delta "read fault logged" before_read after_read \
  "$faults{device=\"$short\",access=\"read\",reason=\"PTE Read access is not set\",source=\"kernel_log\"}" == 1
lab_expect_delta "one fault interrupt" before_read after_read \
  "hpcnode_iommu_fault_interrupts_total{iommu=\"dmar0\"}" == 1
lab_check "DMA write to unmapped IOVA 0x400000" edu_dma 0x40000 0x400000 3
lab_check "write DMA finished" lab_wait_until 10 dma_done
lab_expect_delta "write fault logged" after_read after_write \
  "$faults{device=\"$short\",access=\"write\",reason=\"PTE Write access is not set\",source=\"kernel_log\"}" == 1
lab_expect_delta "one more fault interrupt" after_read after_write \
  "hpcnode_iommu_fault_interrupts_total{iommu=\"dmar0\"}" == 1
lab_record_changes before_read after_write "$faults"
lab_expect "nothing else counted as an IOMMU fault" "$(lab_delta before_read after_write "$faults")" == 2
# Intel VT-d does not report through iommu:io_page_fault (kernel-facts.md): confirmed here.
lab_expect "no io_page_fault tracepoint event on Intel" \
  "$(lab_value after_write "$faults{source=\"tracepoint\"}")" == 0
lab_info "dmesg: $(dmesg | grep -c 'DMAR: \[DMA') DMAR fault lines"

lab_scenario vfio_pin_enomem
lab_scrape before_vfio
lab_check "vfio_pin: device opened, 1 MiB map refused with ENOMEM" /lab/bin/vfio_pin "$group" "$address"
lab_expect_delta "pin failure counted" before_vfio after_vfio \
  "hpcnode_vfio_pin_failures_total{errno=\"ENOMEM\"}" == 1
lab_expect "no other pin failure" "$(lab_value after_vfio hpcnode_vfio_pin_failures_total)" == 1
lab_expect_delta "vfio_enable ran once, for the device open" before_vfio after_vfio \
  "hpcnode_ebpf_program_runs_total{probe=\"vfio_enable\"}" == 1
lab_expect "the successful enable is not a failure" \
  "$(lab_series after_vfio hpcnode_vfio_enable_failures_total)" == 0
lab_info "dmesg: $(dmesg | grep 'RLIMIT_MEMLOCK' | tail -n1)"

lab_scenario vfio_reloaded
pins='hpcnode_vfio_pin_failures_total{errno="ENOMEM"}'
# vfio_pci_core exists from 5.15 on (5.10's vfio_pci holds all of it).
unload_vfio() { rmmod vfio_pci && { [ ! -e /sys/module/vfio_pci_core ] || rmmod vfio_pci_core; } && rmmod vfio_iommu_type1; }
lab_check "rmmod vfio_pci, vfio_pci_core (5.15+), vfio_iommu_type1" unload_vfio
lab_scrape vfio_unloaded
for probe in $vfio_probes; do
  lab_expect "$probe detached" "$(lab_series vfio_unloaded "$attached{probe=\"$probe\",hook=\"none\"}")" == 1
done
lab_expect "vfio_pin waits again" "$(lab_series vfio_unloaded "$waiting")" == 1
lab_expect "vfio_holders stays attached: vfio itself stays loaded" \
  "$(lab_value vfio_unloaded "$attached{probe=\"vfio_holders\",hook=\"kprobe\"}")" == 1
lab_expect "the pin failure is still counted" "$(lab_value vfio_unloaded "$pins")" == 1
lab_check "modprobe again, edu bound" load_vfio_and_bind
lab_check "vfio_pin attached again on the uevent" lab_wait_until 10 attached_on_uevent vfio_pin 2
lab_check "vfio_enable attached again on the uevent" lab_wait_until 10 attached_on_uevent vfio_enable 2
lab_check "vfio_pin: ENOMEM again" /lab/bin/vfio_pin "$group" "$address"
lab_scrape vfio_reloaded
lab_expect_delta "second pin failure counted" vfio_unloaded vfio_reloaded "$pins" == 1
lab_expect "two pin failures in all" "$(lab_value vfio_reloaded "$pins")" == 2
lab_expect "vfio_enable ran for the open (runs restart with the reattached program)" \
  "$(lab_value vfio_reloaded 'hpcnode_ebpf_program_runs_total{probe="vfio_enable"}')" == 1
for probe in vfio_enable vfio_pin; do
  lab_expect "$probe on kretprobe again" "$(lab_value vfio_reloaded "$attached{probe=\"$probe\",hook=\"kretprobe\"}")" == 1
  lab_expect "$probe attached twice after start" \
    "$(lab_value vfio_reloaded "hpcnode_ebpf_probe_module_attaches_total{probe=\"$probe\"}")" == 2
done
lab_expect "no collector error" "$(lab_value vfio_reloaded 'hpcnode_collector_errors_total')" == 0
grep 'probe=vfio_' "$LAB_EXPORTER_LOG" | while read -r line; do lab_info "log: ${line#* }"; done

lab_scenario unbound_not_ready
echo "$address" > /sys/bus/pci/drivers/vfio-pci/unbind
lab_check "edu unbound" lab_wait_until 10 sh -c "! test -e $edu/driver"
lab_scrape unbound
lab_expect "not ready" "$(lab_value unbound "hpcnode_pci_passthrough_ready{device=\"$address\"}")" == 0
lab_expect "check vfio_bound fails" \
  "$(lab_value unbound "hpcnode_pci_passthrough_check{device=\"$address\",check=\"vfio_bound\"}")" == 0
lab_expect "check iommu_enabled still passes" \
  "$(lab_value unbound "hpcnode_pci_passthrough_check{device=\"$address\",check=\"iommu_enabled\"}")" == 1
lab_expect "no driver bound" "$(lab_value unbound "hpcnode_pci_driver_bound{device=\"$address\"}")" == 0

# Removed and found again by a rescan between two scrapes: its IOMMU group goes and comes back
# as another sysfs directory, as a rule under the same number. The host unit holds a group's
# directory from one scrape to the next while the listing shows it with the same inode number,
# so it must open the new one: the old one, removed, lists no device.
lab_scenario removed_and_rescanned
group_inode() { ls -di "/sys/kernel/iommu_groups/$1" 2>/dev/null | awk '{ print $1 }'; }
inode_before=$(group_inode "$group")
echo 1 > "$edu/remove"
lab_check "edu removed" lab_wait_until 10 sh -c "! test -e /sys/bus/pci/devices/$address"
echo 1 > /sys/bus/pci/rescan
lab_check "edu found again, in an IOMMU group" \
  lab_wait_until 10 test -e "/sys/bus/pci/devices/$address/iommu_group"
new_group=$(basename "$(readlink "/sys/bus/pci/devices/$address/iommu_group")")
inode_after=$(group_inode "$new_group")
lab_info "group $group (inode $inode_before) before, group $new_group (inode $inode_after) after"
# What this scenario is for: the number taken back (the lowest free), by another node.
lab_expect "group back under the same number" "$new_group" == "$group"
lab_check "its directory another node" test "$inode_after" != "$inode_before"
lab_scrape rescanned
lab_expect "group $new_group has one device" \
  "$(lab_value rescanned "hpcnode_iommu_group_devices{group=\"$new_group\"}")" == 1
lab_expect "identity: group $new_group" "$(lab_series rescanned \
  "hpcnode_pci_device_info{device=\"$address\",iommu_group=\"$new_group\"}")" == 1
count_members() { set -- /sys/kernel/iommu_groups/*/devices/*; echo $#; }
members=$(count_members)
lab_expect "every group's devices counted, as the kernel lists them" \
  "$(lab_value rescanned hpcnode_iommu_group_devices)" == "$members"
lab_expect "no collector error" "$(lab_value rescanned 'hpcnode_collector_errors_total')" == 0
lab_exporter_stop
