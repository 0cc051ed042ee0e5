# PCIe AER counters from real AER errors: aer_inject fakes an e1000e's AER status registers
# behind a q35 PCIe root port and runs the root port's AER interrupt, so the kernel's own AER
# driver counts them in aer_dev_* and aer_rootport_total_err_*. The pci collector exports the
# injected correctable and non-fatal errors exactly, per error name and severity, and the root
# port's totals, which alone count a fatal error of an endpoint; edu, a conventional PCI device
# with no AER capability, has no AER series and no error.
# lab: machine=q35-pcie
# lab: modules=aer_inject
# lab: collectors=pci
# lab: helpers=aer_inject
# lab: timeout=480

errors=hpcnode_pci_aer_errors_total
messages=hpcnode_pci_aer_messages_total
rootport=hpcnode_pci_aer_root_port_messages_total
find_device() { # VENDOR:DEVICE as sysfs prints them
  for dir in /sys/bus/pci/devices/*; do
    [ "$(cat "$dir/vendor"):$(cat "$dir/device")" = "$1" ] && basename "$dir"
  done
}
# The PCI device directly above ADDRESS in /sys/devices: its root port here.
parent_of() { basename "$(dirname "$(readlink -f "/sys/bus/pci/devices/$1")")"; }
# TOTAL_ERR_* of one of a device's aer_dev_* files.
aer_total() { awk '/^TOTAL_/ { print $2 }' "/sys/bus/pci/devices/$1/aer_dev_$2"; }

lab_scenario setup
nic=$(find_device 0x8086:0x10d3)
edu=$(find_device 0x1234:0x11e8)
lab_check "e1000e present" test -n "$nic" || exit 1
lab_check "edu present" test -n "$edu" || exit 1
nic_port=$(parent_of "$nic")
edu_port=$(parent_of "$edu")
lab_info "e1000e $nic below root port $nic_port, edu $edu below root port $edu_port"
lab_check "e1000e has aer_dev_correctable" test -e "/sys/bus/pci/devices/$nic/aer_dev_correctable"
lab_check "edu has no AER files" test ! -e "/sys/bus/pci/devices/$edu/aer_dev_correctable"
lab_check "root port has aer_rootport_total_err_cor" \
  test -e "/sys/bus/pci/devices/$nic_port/aer_rootport_total_err_cor"
lab_check "AER service enabled on the root port" sh -c "dmesg | grep -q 'pcieport $nic_port: AER: enabled'"
for file in aer_dev_correctable aer_dev_nonfatal aer_dev_fatal; do
  lab_info "$file as the kernel prints it: $(tr '\n' ';' < "/sys/bus/pci/devices/$nic/$file")"
done
dmesg | grep -i -e aer -e pcieport | while read -r line; do lab_info "dmesg: $line"; done
lab_check "modprobe aer_inject" modprobe aer_inject
lab_check "/dev/aer_inject exists" lab_wait_until 5 test -c /dev/aer_inject

lab_exporter_start --collector.disable-defaults --collector.pci \
  --collector.pci.device=8086:10d3 --collector.pci.device=1234:11e8 || exit 1
lab_scrape before
lab_expect "e1000e: correctable RxErr exported" \
  "$(lab_series before "$errors{device=\"$nic\",severity=\"correctable\",error=\"RxErr\"}")" == 1
lab_expect "e1000e: a message total per severity" "$(lab_series before "$messages{device=\"$nic\"}")" == 3
lab_expect "e1000e's root port: a total per severity" \
  "$(lab_series before "$rootport{device=\"$nic_port\"}")" == 3
lab_expect "edu's root port: a total per severity" \
  "$(lab_series before "$rootport{device=\"$edu_port\"}")" == 3
lab_expect "edu: no AER series" "$(lab_series before "$errors{device=\"$edu\"}")" == 0
lab_expect "edu: no AER message series" "$(lab_series before "$messages{device=\"$edu\"}")" == 0

# One error at a time, each handled before the next: the kernel clears the faked status only
# when it has handled it, so two errors in flight would be one.
counted_above() { [ "$(aer_total "$nic" "$1")" -gt "$2" ]; } # FILE TOTAL
inject() { # CHECK FILE SEVERITY STATUS
  local total
  total=$(aer_total "$nic" "$2")
  lab_check "$1" /lab/bin/aer_inject "$nic" "$3" "$4" &&
    lab_check "$1 counted by the kernel" lab_wait_until 10 counted_above "$2" "$total"
}

lab_scenario correctable
for n in 1 2 3; do inject "inject RxErr ($n)" correctable correctable 0x1; done
inject "inject BadTLP" correctable correctable 0x40
lab_scrape after_correctable
lab_expect_delta "RxErr" before after_correctable \
  "$errors{device=\"$nic\",severity=\"correctable\",error=\"RxErr\"}" == 3
lab_expect_delta "BadTLP" before after_correctable \
  "$errors{device=\"$nic\",severity=\"correctable\",error=\"BadTLP\"}" == 1
lab_expect_delta "ERR_COR messages" before after_correctable \
  "$messages{device=\"$nic\",severity=\"correctable\"}" == 4
lab_expect_delta "root port ERR_COR received" before after_correctable \
  "$rootport{device=\"$nic_port\",severity=\"correctable\"}" == 4

lab_scenario nonfatal
# Completion Timeout: non-fatal in the default severity register.
for n in 1 2; do inject "inject CmpltTO ($n)" nonfatal uncorrectable 0x4000; done
lab_scrape after_nonfatal
lab_expect_delta "CmpltTO" after_correctable after_nonfatal \
  "$errors{device=\"$nic\",severity=\"nonfatal\",error=\"CmpltTO\"}" == 2
lab_expect_delta "ERR_NONFATAL messages" after_correctable after_nonfatal \
  "$messages{device=\"$nic\",severity=\"nonfatal\"}" == 2
lab_expect_delta "root port ERR_NONFATAL received" after_correctable after_nonfatal \
  "$rootport{device=\"$nic_port\",severity=\"nonfatal\"}" == 2

lab_scenario fatal
# Malformed TLP: fatal in the default severity register. The kernel does not read an
# endpoint's status registers after a fatal error (its link may be down): it logs the error as
# "Inaccessible" and counts it at the root port only, so only the root port's total moves.
fatal_total=$(cat "/sys/bus/pci/devices/$nic_port/aer_rootport_total_err_fatal")
root_port_fatal_above() { [ "$(cat "/sys/bus/pci/devices/$nic_port/aer_rootport_total_err_fatal")" -gt "$1" ]; }
lab_check "inject MalfTLP" /lab/bin/aer_inject "$nic" uncorrectable 0x40000 &&
  lab_check "inject MalfTLP counted by the root port" lab_wait_until 10 root_port_fatal_above "$fatal_total"
lab_scrape after_fatal
lab_expect_delta "root port ERR_FATAL received" after_nonfatal after_fatal \
  "$rootport{device=\"$nic_port\",severity=\"fatal\"}" == 1
lab_expect "e1000e ERR_FATAL not counted at the device, as in its aer_dev_fatal" \
  "$(lab_value after_fatal "$messages{device=\"$nic\",severity=\"fatal\"}")" == "$(aer_total "$nic" fatal)"

lab_scenario agreement
names=$(cat "/sys/bus/pci/devices/$nic"/aer_dev_* | grep -vc '^TOTAL_')
lab_expect "one series per error line of the kernel's files" "$(lab_series after_fatal "$errors{device=\"$nic\"}")" == "$names"
for severity in cor:correctable nonfatal:nonfatal fatal:fatal; do
  lab_expect "root port aer_rootport_total_err_${severity%%:*}" \
    "$(lab_value after_fatal "$rootport{device=\"$nic_port\",severity=\"${severity#*:}\"}")" == \
    "$(cat "/sys/bus/pci/devices/$nic_port/aer_rootport_total_err_${severity%%:*}")"
done
lab_expect "no collector error" "$(lab_value after_fatal 'hpcnode_collector_errors_total{collector="pci"}')" == 0
dmesg | grep -e 'AER' -e aer_inject | tail -n 12 | while read -r line; do lab_info "dmesg: $line"; done
lab_exporter_stop
