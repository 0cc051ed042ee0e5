# Real AER errors on a device assigned through vfio-pci: the e1000e (PCIe, with AER; edu is
# conventional PCI and has none) bound to vfio-pci behind an Intel IOMMU (Debian's kernels have
# no vfio no-IOMMU mode),
# after the exporter started, so the vfio_aer probe attaches late, on vfio_pci_core's uevent
# (vfio_pci's before 5.15, whose handler is vfio_pci_aer_err_detected).
# aer_inject then raises one correctable and two non-fatal errors: the pci collector counts all
# three by name and severity; vfio_pci_core_aer_err_detected, the driver's error handler, runs
# for the non-fatal ones only (the kernel hands no correctable error to a driver), with the
# channel state normal.
# lab: machine=q35-pcie-iommu
# lab: modules=vfio-pci aer_inject
# lab: collectors=ebpf pci
# lab: helpers=aer_inject
# lab: timeout=300

errors=hpcnode_pci_aer_errors_total
vfio_aer=hpcnode_vfio_aer_errors_total
nic=
for dir in /sys/bus/pci/devices/*; do
  [ "$(cat "$dir/vendor"):$(cat "$dir/device")" = 0x8086:0x10d3 ] && nic=$(basename "$dir")
done
# TOTAL_ERR_* of one of the e1000e's aer_dev_* files.
aer_total() { awk '/^TOTAL_/ { print $2 }' "/sys/bus/pci/devices/$nic/aer_dev_$1"; }
counted_above() { [ "$(aer_total "$1")" -gt "$2" ]; } # FILE TOTAL
# One error at a time, each handled by the kernel before the next (aer_inject.sh says why).
inject() { # CHECK FILE SEVERITY STATUS
  local total
  total=$(aer_total "$2")
  lab_check "$1" /lab/bin/aer_inject "$nic" "$3" "$4" &&
    lab_check "$1 counted by the kernel" lab_wait_until 10 counted_above "$2" "$total"
}
vfio_aer_attached_on_uevent() {
  grep 'msg="eBPF probe attached"' "$LAB_EXPORTER_LOG" | grep 'probe=vfio_aer ' | grep -q 'on="module uevent"'
}

lab_scenario setup
lab_check "e1000e present" test -n "$nic" || exit 1
lab_check "modprobe aer_inject" modprobe aer_inject
lab_check "vfio_pci_core and vfio_pci not loaded yet" test ! -e /sys/module/vfio_pci_core -a ! -e /sys/module/vfio_pci
lab_exporter_start --collector.disable-defaults --collector.ebpf --collector.pci \
  --collector.pci.device=8086:10d3 || exit 1

lab_scenario vfio_bound
lab_check "modprobe vfio-pci" modprobe vfio-pci
echo 8086 10d3 > /sys/bus/pci/drivers/vfio-pci/new_id
lab_check "e1000e bound to vfio-pci" lab_wait_until 10 test -e "/sys/bus/pci/drivers/vfio-pci/$nic"
lab_check "vfio_aer attached on its module's uevent" lab_wait_until 10 vfio_aer_attached_on_uevent
lab_scrape before
lab_expect "vfio_aer on kprobe" \
  "$(lab_value before 'hpcnode_ebpf_probe_attached{probe="vfio_aer",hook="kprobe"}')" == 1
lab_expect "e1000e's driver is vfio-pci" \
  "$(lab_series before "hpcnode_pci_device_info{device=\"$nic\",driver=\"vfio-pci\"}")" == 1

lab_scenario correctable
inject "inject RxErr" correctable correctable 0x1
lab_scrape after_correctable
lab_expect_delta "RxErr counted by the pci collector" before after_correctable \
  "$errors{device=\"$nic\",severity=\"correctable\",error=\"RxErr\"}" == 1
lab_expect "no vfio AER event for a correctable error" \
  "$(lab_delta before after_correctable "$vfio_aer")" == 0

lab_scenario nonfatal
for n in 1 2; do inject "inject CmpltTO ($n)" nonfatal uncorrectable 0x4000; done
lab_scrape after_nonfatal
lab_expect_delta "CmpltTO counted by the pci collector" after_correctable after_nonfatal \
  "$errors{device=\"$nic\",severity=\"nonfatal\",error=\"CmpltTO\"}" == 2
lab_expect_delta "vfio AER events on the e1000e, channel state normal" after_correctable after_nonfatal \
  "$vfio_aer{device=\"$nic\",state=\"normal\"}" == 2
lab_expect "no other vfio AER event" "$(lab_value after_nonfatal "$vfio_aer")" == 2
lab_expect "no ebpf collector error" "$(lab_value after_nonfatal 'hpcnode_collector_errors_total{collector="ebpf"}')" == 0
dmesg | grep -e 'vfio' -e 'AER' | tail -n 8 | while read -r line; do lab_info "dmesg: $line"; done
echo "$nic" > /sys/bus/pci/drivers/vfio-pci/unbind
lab_exporter_stop
