# The vfio_holders eBPF probe: the processes to read for vfio holds, recorded as they open,
# receive (SCM_RIGHTS) or inherit (fork) a vfio file, so that a scrape reads their descriptors
# and no other process's. Each handoff here keeps the first holder's own copy, which is what
# the scan kept between scrapes without the probe cannot see (no open or close changes vfio's
# count). Then the CPU of a scrape with a million descriptors open on the node.
# lab: machine=q35-iommu
# lab: modules=vfio-pci vfio_iommu_type1
# lab: collectors=pci ebpf
# lab: helpers=fd_pass fd_hoard
# lab: timeout=300

. /lab/guest/edu.sh
holders=hpcnode_pci_vfio_device_holders
from_events=hpcnode_pci_vfio_holders_from_events
lab_scenario setup
edu_bind_vfio || exit 1

# The VM holds the group on fd 9 and, when told (a line in the fifo), forks a child that keeps
# it; it forks nothing before (a forked child holds the group too, however briefly).
dir=/tmp/holder_events
rm -rf "$dir"
mkdir -p "$dir"
mkfifo "$dir/fork"
cat > "$dir/qemu-system-x86_64" <<EOF
#!/bin/sh
exec 9< /dev/vfio/$group
: > $dir/holding
read -r go < $dir/fork
sleep 300 &
echo \$! > $dir/child
wait
EOF
chmod +x "$dir/qemu-system-x86_64"
all_gone() { # PID...
  for pid in "$@"; do
    ! kill -0 "$pid" 2>/dev/null || return 1
  done
}
holder_info() { # SCRAPE PID
  lab_series "$1" "hpcnode_pci_vfio_holder_info{device=\"$address\",pid=\"$2\"}"
}
# The exporter's CPU time in ns, all its threads (schedstat's first field: ns, where stat's
# utime and stime count ticks of 10 ms).
exporter_cpu_ns() { cat /proc/"$(cat /tmp/lab-exporter.pid)"/task/*/schedstat | awk '{ ns += $1 } END { printf "%.0f\n", ns }'; }
# cpu_per_scrape N: the exporter's CPU time per scrape over N scrapes, in µs.
cpu_per_scrape() {
  local before i=0
  before=$(exporter_cpu_ns)
  while [ $i -lt "$1" ]; do
    lab_exporter_answers || return 1
    i=$((i + 1))
  done
  echo $((($(exporter_cpu_ns) - before) / 1000 / $1))
}

# Leaves the other probes out: their starts are minutes under TCG and nothing here needs them.
lab_exporter_start --collector.disable-defaults --collector.pci --collector.ebpf \
  --collector.ebpf.hooks=module_load:none,module_sig_check:none,module_load_syscall:none,kernel_log:none,iommu_fault:none,dmar_fault:none,vfio_enable:none,vfio_aer:none,vfio_pin:none,rdma_port_events:none || exit 1

lab_scenario attached
# The start's readiness scrape seeded the set (a scan, where vfio's count does not prove that
# no vfio file is open).
lab_scrape idle
lab_expect "the vfio_holders probe is attached on kprobe" \
  "$(lab_value idle 'hpcnode_ebpf_probe_attached{probe="vfio_holders",hook="kprobe"}')" == 1
lab_expect "only the recorded processes are read" "$(lab_value idle $from_events)" == 1
lab_expect "bound, held by nobody" "$(lab_value idle "$holders{device=\"$address\"}")" == 0

lab_scenario opened
"$dir/qemu-system-x86_64" -name guest=instance-0000002b &
vm=$!
lab_check "the VM holds /dev/vfio/$group" lab_wait_until 10 test -e $dir/holding
lab_scrape opened
lab_expect "read from events" "$(lab_value opened $from_events)" == 1
lab_expect "held by the VM" "$(lab_value opened "$holders{device=\"$address\"}")" == 1
lab_expect "the holder is the VM" "$(holder_info opened "$vm")" == 1

lab_scenario forked
echo go > "$dir/fork"
lab_check "the VM forked a child that keeps the group" lab_wait_until 10 test -s $dir/child
child=$(cat $dir/child)
lab_scrape forked
lab_expect "held by the VM and its child" "$(lab_value forked "$holders{device=\"$address\"}")" == 2
lab_expect "the child is a holder" "$(holder_info forked "$child")" == 1

lab_scenario received
kill "$vm" "$child"
lab_check "the VM and its child exited" lab_wait_until 10 sh -c "! kill -0 $vm 2>/dev/null && ! kill -0 $child 2>/dev/null"
/lab/bin/fd_pass send $dir/sock "/dev/vfio/$group" &
sender=$!
lab_check "a process holds the group" lab_wait_until 10 test -e $dir/sock.opened
lab_scrape sender
lab_expect "held by the sender" "$(holder_info sender "$sender")" == 1
/lab/bin/fd_pass receive $dir/sock &
receiver=$!
lab_check "it handed the group to another process over a unix socket" \
  lab_wait_until 10 test -e $dir/sock.received
lab_scrape received
lab_expect "held by the sender and the receiver" "$(lab_value received "$holders{device=\"$address\"}")" == 2
lab_expect "the receiver is a holder" "$(holder_info received "$receiver")" == 1

lab_scenario million_descriptors
# Ten processes with 100 000 descriptors each, the receiver still holding the group.
without=$(cpu_per_scrape 50)
i=0
hoards=
while [ $i -lt 10 ]; do
  /lab/bin/fd_hoard 100000 "$dir/hoard.$i" &
  hoards="$hoards $!"
  i=$((i + 1))
done
lab_check "a million descriptors open" lab_wait_until 120 sh -c "test \$(ls $dir/hoard.* | wc -l) = 10"
with=$(cpu_per_scrape 50)
lab_scrape hoard
lab_expect "still read from events" "$(lab_value hoard $from_events)" == 1
lab_expect "still held by the sender and the receiver" "$(lab_value hoard "$holders{device=\"$address\"}")" == 2
# shellcheck disable=SC2086 # one pid a word
kill $hoards
# shellcheck disable=SC2086
lab_check "the million descriptors closed" lab_wait_until 30 all_gone $hoards
# An observation, not a check: under TCG a whole scrape's CPU varies by more than 1 ms.
lab_info "exporter CPU a scrape (pci and ebpf collectors, TCG): ${with} µs with a million descriptors open, ${without} µs without"

lab_scenario released
kill "$sender" "$receiver"
lab_check "the holders exited" lab_wait_until 10 sh -c "! kill -0 $sender 2>/dev/null && ! kill -0 $receiver 2>/dev/null"
lab_scrape released
lab_expect "released: held by nobody" "$(lab_value released "$holders{device=\"$address\"}")" == 0
lab_expect "still read from events" "$(lab_value released $from_events)" == 1
lab_exporter_stop
edu_unbind_vfio
