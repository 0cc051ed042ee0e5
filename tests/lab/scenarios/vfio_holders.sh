# Who holds a device bound to vfio-pci: edu on vfio-pci behind the emulated Intel IOMMU, its
# group held open by a process that calls itself QEMU (a script named qemu-system-x86_64 with
# libvirt's -name and -uuid options: the kernel names a script's process after the script),
# then released; then held by a process after its device left vfio-pci (a stale holder).
# lab: machine=q35-iommu
# lab: modules=vfio-pci vfio_iommu_type1
# lab: collectors=pci
# lab: timeout=90

holders=hpcnode_pci_vfio_device_holders
# The vfio module's references beyond those of the modules that use it (each module linked
# against vfio holds one, listed in holders/): one per open vfio file.
vfio_file_refs() { echo $(($(cat /sys/module/vfio/refcnt) - $(ls /sys/module/vfio/holders | wc -l))); }
. /lab/guest/edu.sh
lab_scenario setup
edu_bind_vfio || exit 1

# The holder: holds the group on fd 9 while it waits; its sleep does not inherit it.
mkdir -p /tmp/vm
cat > /tmp/vm/qemu-system-x86_64 <<EOF
#!/bin/sh
exec 9< /dev/vfio/$group
touch /tmp/vm/holding
sleep 300 9<&- &
wait
EOF
chmod +x /tmp/vm/qemu-system-x86_64

lab_exporter_start --collector.disable-defaults --collector.pci || exit 1

lab_scenario idle
lab_scrape idle
lab_expect "bound, held by nobody" "$(lab_value idle "$holders{device=\"$address\"}")" == 0
lab_expect "no holder series" "$(lab_series idle hpcnode_pci_vfio_holder_info)" == 0
lab_expect "root reads every process" "$(lab_value idle hpcnode_pci_vfio_holder_unreadable_processes)" == 0
# What lets a scrape skip the scan of every process's descriptors: no vfio file is open, and
# the vfio module's reference count says so (each open group, container or device file holds one).
lab_info "vfio's refcnt $(cat /sys/module/vfio/refcnt), holders: $(ls /sys/module/vfio/holders | tr '\n' ' ')"
# 0 on 5.10 and 6.1; 6.12 keeps one more reference with no file open (seen in the lab), so the
# scan runs there: the skip is taken only where the count proves no file can be open.
lab_info "references to vfio beyond its holder modules' with no vfio file open: $(vfio_file_refs)"
lab_expect "the scan is complete (skipped)" "$(lab_value idle hpcnode_pci_vfio_holder_scan_complete)" == 1

lab_scenario held_by_a_vm
/tmp/vm/qemu-system-x86_64 -name guest=instance-0000002a,debug-threads=on \
  -uuid 8f0c6a3e-5b0e-4f6b-9d2a-1c3e5f7a9b0d &
vm=$!
lab_check "the VM holds /dev/vfio/$group" lab_wait_until 10 test -e /tmp/vm/holding
lab_scrape held
lab_expect "held by one process" "$(lab_value held "$holders{device=\"$address\"}")" == 1
lab_expect "the open group holds the vfio module" "$(vfio_file_refs)" ">=" 1
lab_expect "the scan is complete" "$(lab_value held hpcnode_pci_vfio_holder_scan_complete)" == 1
lab_expect "the holder: pid, comm, guest and uuid" "$(lab_series held \
  "hpcnode_pci_vfio_holder_info{device=\"$address\",pid=\"$vm\",comm=\"qemu-system-x86\",guest=\"instance-0000002a\",uuid=\"8f0c6a3e-5b0e-4f6b-9d2a-1c3e5f7a9b0d\"}")" == 1
lab_expect "nothing stale" "$(lab_series held hpcnode_pci_vfio_stale_holder_info)" == 0

lab_scenario device_left_vfio
echo "$address" > /sys/bus/pci/drivers/vfio-pci/unbind
lab_check "edu unbound" lab_wait_until 10 sh -c "! test -e $edu/driver"
lab_scrape left
lab_expect "the group, its device gone, still holds the vfio module" "$(vfio_file_refs)" ">=" 1
# The group left with its only device: devtmpfs removed its node, which the held file now
# names as "/dev/vfio/<group> (deleted)".
lab_expect "the VM is a stale holder of /dev/vfio/$group" "$(lab_series left \
  "hpcnode_pci_vfio_stale_holder_info{node=~\"/dev/vfio/$group.*\",pid=\"$vm\",guest=\"instance-0000002a\"}")" == 1
lab_expect "no device holder series" "$(lab_series left hpcnode_pci_vfio_device_holders)" == 0

lab_scenario released
kill "$vm"
lab_check "the VM exited" lab_wait_until 10 sh -c "! kill -0 $vm 2>/dev/null"
pkill -f "sleep 300" 2>/dev/null
echo "$address" > /sys/bus/pci/drivers_probe
lab_check "edu bound again" lab_wait_until 10 test -e "/sys/bus/pci/drivers/vfio-pci/$address"
lab_scrape released
lab_expect "released: held by nobody" "$(lab_value released "$holders{device=\"$address\"}")" == 0
lab_info "released: references to vfio beyond its holder modules': $(vfio_file_refs)"
lab_expect "no stale holder" "$(lab_series released hpcnode_pci_vfio_stale_holder_info)" == 0
lab_exporter_stop
edu_unbind_vfio
