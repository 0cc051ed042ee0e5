# Soft-RoCE (rdma_rxe) on a dummy netdev: the rdma collector reads a real kernel's
# /sys/class/infiniband, and the verbs userspace sees the device (later issues' probes need it).
# lab: modules=rdma_rxe ib_uverbs rdma_ucm crc32_generic crc32_pclmul dummy veth
# lab: tools=verbs
# lab: collectors=ebpf rdma
# lab: timeout=180

port=/sys/class/infiniband/rxe0/ports/1
. /lab/guest/hooks.sh # lab_run_stats

lab_scenario softroce_up
lab_check "modprobe rdma_rxe ib_uverbs rdma_ucm crc32_generic dummy" \
  modprobe -a rdma_rxe ib_uverbs rdma_ucm crc32_generic dummy
# crc32_pclmul needs PCLMULQDQ, which -cpu max has; rxe works with crc32_generic alone.
modprobe crc32_pclmul 2> /dev/null
ip link show dummy0 > /dev/null 2>&1 || ip link add dummy0 type dummy
ip addr add 10.0.0.1/24 dev dummy0
ip link set dummy0 up
lab_check "rdma link add rxe0 type rxe netdev dummy0" rdma link add rxe0 type rxe netdev dummy0
lab_check "rxe0 port 1 becomes ACTIVE" lab_wait_until 20 grep -q ACTIVE "$port/state"
lab_check "ibv_devinfo lists rxe0 with its port active" \
  sh -c 'ibv_devinfo -d rxe0 | grep -q "state:.*PORT_ACTIVE"'

lab_scenario rdma_collector
lab_exporter_start --collector.disable-defaults --collector.rdma || exit 1
lab_scrape rxe
lab_expect "hpcnode_build_info" "$(lab_value rxe hpcnode_build_info)" == 1
lab_expect "rdma collector succeeded" "$(lab_value rxe 'hpcnode_scrape_collector_success{collector="rdma"}')" == 1
lab_expect "no collector errors" "$(lab_value rxe hpcnode_collector_errors_total)" == 0
# The module read asks dummy0, which has no module-EEPROM operation: EOPNOTSUPP, no error.
lab_expect "dummy0 has no module, and no error says so" "$(lab_series rxe hpcnode_rdma_port_module_info)" == 0
lab_expect "port state id as in $port/state ($(cat $port/state))" \
  "$(lab_value rxe 'hpcnode_rdma_port_state_id{device="rxe0",port="1"}')" == "$(cut -d: -f1 $port/state)"
lab_expect "physical state id as in $port/phys_state ($(cat $port/phys_state))" \
  "$(lab_value rxe 'hpcnode_rdma_port_physical_state_id{device="rxe0",port="1"}')" == "$(cut -d: -f1 $port/phys_state)"
lab_expect "rate as in $port/rate ($(cat $port/rate)), in bytes/s" \
  "$(lab_value rxe 'hpcnode_rdma_port_rate_bytes_per_second{device="rxe0",port="1"}')" == \
  "$(awk '{ printf "%.15g", $1 * 1e9 / 8 }' $port/rate)"
lab_expect "port info: Ethernet link layer on dummy0" \
  "$(lab_series rxe 'hpcnode_rdma_port_info{device="rxe0",port="1",link_layer="Ethernet",netdev="dummy0"}')" == 1
lab_expect "device info names the rdma_rxe driver's node GUID" \
  "$(lab_series rxe "hpcnode_rdma_device_info{device=\"rxe0\",node_guid=\"$(cat /sys/class/infiniband/rxe0/node_guid)\"}")" == 1
counters=$(find $port/hw_counters/ -type f ! -name lifespan | wc -l)
lab_expect "one hw_stat series per hw_counters file ($counters)" \
  "$(lab_series rxe 'hpcnode_rdma_port_hw_stat_total{device="rxe0",port="1"}')" == "$counters"
lab_expect "hw counters over netlink, the default on /sys" \
  "$(lab_series rxe 'hpcnode_rdma_port_hw_counters_source{device="rxe0",port="1",source="netlink"}')" == 1
lab_expect "hw_counters/rdma_sends as in sysfs" \
  "$(lab_value rxe 'hpcnode_rdma_port_hw_stat_total{device="rxe0",port="1",counter="rdma_sends"}')" == "$(cat $port/hw_counters/rdma_sends)"

lab_scenario rdma_port_downs
# Five down/up cycles of the netdev between two scrapes, the last left down: the downs counted
# from what scrapes see (link_downed, where rxe counts it, or the state left ACTIVE) are at
# least one, a lower bound; the eBPF port-event probe (issue 39) is to count all five.
downs='hpcnode_rdma_port_downs_total{device="rxe0",port="1"}'
for cycle in 1 2 3 4 5; do
  ip link set dummy0 down
  [ "$cycle" = 5 ] || ip link set dummy0 up
done
lab_check "rxe0 port 1 leaves ACTIVE with dummy0 down" lab_wait_until 20 sh -c "! grep -q ACTIVE $port/state"
lab_scrape downs_after
lab_expect_delta "the port's downs, at least one" rxe downs_after "$downs" ">=" 1
lab_info "downs counted: $(lab_delta rxe downs_after "$downs") (link_downed: $(cat $port/hw_counters/link_downed 2> /dev/null || echo none))"
ip link set dummy0 up
lab_check "rxe0 port 1 ACTIVE again" lab_wait_until 20 grep -q ACTIVE "$port/state"
lab_exporter_stop

lab_scenario rdma_carrier_changes
# A RoCE port's netdev's carrier changes as the kernel counts them. dummy has no carrier to
# lose; a veth loses it when its peer goes down (veth_close: netif_carrier_off of the peer) and
# regains it when the peer comes up (veth_open): two down/up cycles of the peer are four.
veth_port=/sys/class/infiniband/rxe1/ports/1
carrier='hpcnode_rdma_port_netdev_carrier_changes_total{device="rxe1",port="1"}'
lab_check "modprobe veth" modprobe veth
# iproute2's ip (tools=verbs): busybox's, the shell's builtin, cannot make a veth pair.
iproute2=/usr/bin/ip
lab_check "ip link add veth0 type veth peer name veth1" $iproute2 link add veth0 type veth peer name veth1
lab_check "veth0 and veth1 up" sh -c "$iproute2 link set veth0 up && $iproute2 link set veth1 up"
lab_check "rdma link add rxe1 type rxe netdev veth0" rdma link add rxe1 type rxe netdev veth0
lab_check "rxe1 port 1 becomes ACTIVE" lab_wait_until 20 grep -q ACTIVE "$veth_port/state"
lab_exporter_start --collector.disable-defaults --collector.rdma || exit 1
lab_scrape carrier_before
for cycle in 1 2; do
  $iproute2 link set veth1 down
  $iproute2 link set veth1 up
done
lab_check "rxe1 port 1 ACTIVE after the cycles" lab_wait_until 20 grep -q ACTIVE "$veth_port/state"
lab_scrape carrier_after
lab_expect_delta "veth0's carrier changes: four" carrier_before carrier_after "$carrier" == 4
lab_expect "carrier changes as veth0's sysfs says" \
  "$(lab_value carrier_after "$carrier")" == "$(cat /sys/class/net/veth0/carrier_changes)"
lab_exporter_stop
lab_check "rdma link delete rxe1" rdma link delete rxe1
lab_check "ip link delete veth0" $iproute2 link delete veth0

lab_scenario rdma_port_events
# Every event ib_core delivers, counted in the kernel (the rdma_port_events probe, attached at
# start: rdma_rxe loaded ib_core). rxe dispatches PORT_ERR when its netdev goes down and
# PORT_ACTIVE when it comes up (rxe_port_down/rxe_port_up): five whole cycles between two
# scrapes are exactly five of each, delivered later by ib_wq (lab_expect_delta scrapes again).
events='hpcnode_rdma_port_events_total{device="rxe0",port="1"'
cycle_dummy0() { # CYCLES
  local cycle
  for cycle in $(seq "$1"); do
    ip link set dummy0 down
    ip link set dummy0 up
  done
}
lab_exporter_start --collector.disable-defaults --collector.ebpf || exit 1
lab_scrape events_before
lab_expect "rdma_port_events on its kprobe" \
  "$(lab_value events_before 'hpcnode_ebpf_probe_attached{probe="rdma_port_events",hook="kprobe"}')" == 1
cycle_dummy0 5
lab_check "rxe0 port 1 ACTIVE after five cycles" lab_wait_until 20 grep -q ACTIVE "$port/state"
lab_scrape events_after
lab_expect_delta "port_err of rxe0 port 1: five" events_before events_after "$events,event=\"port_err\"}" == 5
lab_expect_delta "port_active of rxe0 port 1: five" events_before events_after "$events,event=\"port_active\"}" == 5
lab_info "events of the five cycles: $(lab_matching events_after 'hpcnode_rdma_port_events_total' | cut -f1 | tr '\n' ' ')"
lab_info "rdma_port_events cost: $(lab_run_stats events_before events_after rdma_port_events)"
# Deleted and added again: the events of the new rxe0 continue the same series.
lab_check "rdma link delete rxe0" rdma link delete rxe0
lab_check "rdma link add rxe0 again" rdma link add rxe0 type rxe netdev dummy0
lab_check "the new rxe0 ACTIVE" lab_wait_until 20 grep -q ACTIVE "$port/state"
lab_scrape events_readded
cycle_dummy0 1
lab_check "the new rxe0 ACTIVE after one cycle" lab_wait_until 20 grep -q ACTIVE "$port/state"
lab_scrape events_cycled
lab_expect_delta "port_err of the new rxe0 port 1: one more" events_readded events_cycled "$events,event=\"port_err\"}" == 1
lab_expect_delta "port_active of the new rxe0 port 1: one more" events_readded events_cycled "$events,event=\"port_active\"}" == 1
lab_expect "no events lost" "$(lab_value events_cycled 'hpcnode_ebpf_events_lost_total{probe="rdma_port_events"}')" == 0
lab_expect "no ebpf collector error" "$(lab_value events_cycled 'hpcnode_collector_errors_total{collector="ebpf"}')" == 0
lab_exporter_stop

lab_scenario rdma_held_counters
# The collector keeps counter files open between scrapes and reads them again with pread: they
# must move under traffic, and a device deleted and added again is read afresh, not through
# descriptors of the device before. The hw counters from their files: netlink, the default on
# /sys, opens none.
sent='hpcnode_rdma_port_hw_stat_total{device="rxe0",port="1",counter="sent_pkts"}'
lab_exporter_start --collector.disable-defaults --collector.rdma --collector.rdma.hw-counters=sysfs || exit 1
lab_scrape held_before
lab_expect "hw_counters files held open after a scrape" \
  "$(ls -l "/proc/$(cat /tmp/lab-exporter.pid)/fd" | grep -c /hw_counters/)" ">" 0
gid=$(lab_roce_v2_gid)
# One ib_write_bw run on rxe0, server and client. Under TCG beside two other guests rxe now
# and then loses the run after its data went (the client exits 1 within seconds, sent_pkts
# moved): then one more, with what the failed client said recorded.
held_traffic() {
  local try server
  for try in 1 2; do
    timeout 60 ib_write_bw -d rxe0 -x "$gid" -n 100 -s 65536 > "$LAB_TMP/held-server.txt" 2>&1 &
    server=$!
    sleep 2
    if timeout 60 ib_write_bw -d rxe0 -x "$gid" -n 100 -s 65536 127.0.0.1 \
      > "$LAB_TMP/held-client.txt" 2>&1; then
      # The server only: a bare wait would also wait for the exporter, in the background too.
      wait "$server"
      return 0
    fi
    lab_info "ib_write_bw run $try failed: $(tail -n 3 "$LAB_TMP/held-client.txt" | tr '\n' ' ')"
    kill "$server" 2> /dev/null
    wait "$server"
  done
  return 1
}
lab_check "ib_write_bw on rxe0 (GID index $gid)" held_traffic
lab_scrape held_after
lab_expect_delta "sent_pkts moved under ib_write_bw" held_before held_after "$sent" ">=" 100
lab_expect "sent_pkts as in sysfs" "$(lab_value held_after "$sent")" == "$(cat $port/hw_counters/sent_pkts)"
lab_check "rdma link delete rxe0" rdma link delete rxe0
lab_scrape held_gone
lab_expect "rxe0 deleted: no series of it" "$(lab_series held_gone "$sent")" == 0
# Deleted and added again between two scrapes: another directory, counters from 0 again.
rdma link add rxe0 type rxe netdev dummy0
lab_scrape held_back
rdma link delete rxe0
rdma link add rxe0 type rxe netdev dummy0
lab_check "rxe0 added again becomes ACTIVE" lab_wait_until 20 grep -q ACTIVE "$port/state"
lab_scrape held_again
lab_expect "sent_pkts of the new rxe0 as in sysfs" \
  "$(lab_value held_again "$sent")" == "$(cat $port/hw_counters/sent_pkts)"
lab_expect "sent_pkts of the new rxe0 below the old one's" \
  "$(lab_value held_again "$sent")" "<" "$(lab_value held_after "$sent")"
lab_expect "no collector errors" "$(lab_value held_again hpcnode_collector_errors_total)" == 0
lab_exporter_stop
