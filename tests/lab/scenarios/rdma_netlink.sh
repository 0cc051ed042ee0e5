# The rdma_netlink collector on a real kernel: before ib_core loads, RDMA netlink is reported
# unavailable once (a metric, one log line, no error count); then on Soft-RoCE with ib_write_bw
# running, one side in a fake Slurm job's cgroup, the QPs, MRs and pinned bytes per pid equal
# what iproute2's `rdma resource show qp -j` / `mr -j` print at the same moment. The rdma
# collector, forced onto RDMA netlink for hw counters, beside the hw_counters files under
# traffic and after it (rdma_hw_counters_bench measures the two paths' CPU). With
# --collector.rdma_netlink.qp-counters the port that appears is put in QP counter auto mode, as
# the kernel shows it, once; the counters bound are those rdma lists (none on Soft-RoCE).
# lab: modules=rdma_rxe ib_uverbs rdma_ucm crc32_generic crc32_pclmul dummy
# lab: tools=verbs
# lab: collectors=rdma_netlink rdma
# lab: helpers=rdma_nl_capture
# lab: timeout=240

# Under TCG, with ib_write_bw polling on both guest CPUs, a scrape can take longer than 5 s.
# The rdma collector with netlink forced: a STAT_GET failure is a scrape error, not a fallback.
COLLECTOR="--collector.disable-defaults --collector.rdma_netlink --collector.rdma_netlink.qp-counters --collector.rdma --collector.rdma.hw-counters=netlink --scrape.timeout=60s"
port=/sys/class/infiniband/rxe0/ports/1

lab_scenario netlink_unavailable
# One exporter for the whole group (a start under TCG takes seconds): netlink becomes
# available to it once ib_core loads.
# shellcheck disable=SC2086 # a list of flags
lab_exporter_start $COLLECTOR || exit 1
if [ -d /sys/module/ib_core ]; then
  lab_info "ib_core already loaded by an earlier group of this boot: unavailability not checked"
else
  lab_scrape absent_1
  lab_scrape absent_2
  lab_expect "RDMA netlink unavailable" "$(lab_value absent_2 hpcnode_rdma_netlink_available)" == 0
  lab_expect "collector succeeds" "$(lab_value absent_2 'hpcnode_scrape_collector_success{collector="rdma_netlink"}')" == 1
  lab_expect "no error counted" "$(lab_value absent_2 hpcnode_collector_errors_total)" == 0
  lab_expect "one log line over two scrapes" "$(grep -c 'RDMA netlink unavailable' "$LAB_EXPORTER_LOG")" == 1
  # A NETLINK_RDMA socket alone would load ib_core (its module alias): the exporter opens none.
  lab_check_fails "ib_core still not loaded" test -d /sys/module/ib_core
fi

lab_scenario softroce
lab_softroce_up
gid=$(lab_roce_v2_gid)

lab_scenario qp_counter_auto_mode
# The first scrape that sees rxe0 binds its port, before ib_write_bw makes its QPs.
lab_scrape bound
rdma statistic qp mode link rxe0/1 > "$LAB_TMP/qp_mode.txt" 2>&1
lab_info "rdma statistic qp mode link rxe0/1: $(cat "$LAB_TMP/qp_mode.txt")"
lab_expect "rxe0 port 1: the exporter turned QP counter auto mode on" \
  "$(lab_value bound 'hpcnode_rdma_qp_counter_port_binding{device="rxe0",port="1",binding="exporter_auto"}')" == 1
lab_check "the kernel shows auto mode on rxe0/1" grep -q auto "$LAB_TMP/qp_mode.txt"
lab_expect "one binding series for the port" \
  "$(lab_series bound 'hpcnode_rdma_qp_counter_port_binding{device="rxe0",port="1"}')" == 1

lab_scenario fake_slurm_job
# slurmstepd's cgroup v2 layout: the job's processes under .../slurmstepd.scope/job_<N>/.
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
job=/sys/fs/cgroup/system.slice/slurmstepd.scope/job_4242/step_0
lab_check "fake job cgroup $job" mkdir -p "$job"
# The server joins the job before it execs, so every resource it creates is the job's.
sh -c "echo \$\$ > $job/cgroup.procs && exec ib_write_bw -d rxe0 -x $gid -D 30 -s 65536" > "$LAB_TMP/server.txt" 2>&1 &
server=$!
# The server listens on TCP 18515 (0x4853) for the client's connection details.
lab_check "ib_write_bw server listening" lab_wait_until 30 grep -qi ':4853 00000000:0000 0A' /proc/net/tcp
ib_write_bw -d rxe0 -x "$gid" -D 30 -s 65536 127.0.0.1 > "$LAB_TMP/client.txt" 2>&1 &
client=$!
lab_check "ib_write_bw server in job_4242 ($(cat /proc/$server/cgroup))" grep -q job_4242 "/proc/$server/cgroup"

lab_scenario resources_as_rdma_tool
# Both sides connected: the client's QP in RTS, so every resource of both is created.
lab_check "ib_write_bw connected (the client's RC QP in RTS)" \
  lab_wait_until 40 sh -c "rdma resource show qp | grep -q 'RC.*RTS.*ib_write_bw'"
# hw_counters NAME: every hw_counters file of rxe0 port 1 but lifespan, "name value" a line.
hw_counters() {
  for file in "$port"/hw_counters/*; do
    [ "${file##*/}" = lifespan ] || echo "${file##*/} $(cat "$file")"
  done > "$LAB_TMP/$1.hw"
}
hw_counters before_held
lab_scrape held
hw_counters after_held
rdma resource show qp -j > "$LAB_TMP/qp.json"
rdma resource show mr -j > "$LAB_TMP/mr.json"
# The kernel's replies byte for byte at the same moment, for the decoder's tests
# (tests/fixtures/rdma_netlink/ holds a run's files: rdma's JSON and the replies).
index=$(rdma dev show rxe0 -j | sed -n 's/.*"ifindex":\([0-9]*\).*/\1/p')
release=$(uname -r | cut -d. -f1,2)
lab_check "capture RDMA_NLDEV_CMD_GET" /lab/bin/rdma_nl_capture 1 "/lab/results/rdma_nl.$release.devices.bin"
for dump in qp:10 cm_id:11 cq:12 mr:13 pd:14; do
  lab_check "capture the ${dump%:*} dump of rxe0 (index $index)" \
    /lab/bin/rdma_nl_capture "${dump#*:}" "$index" "/lab/results/rdma_nl.$release.${dump%:*}.bin"
done
cp "$LAB_TMP/qp.json" "/lab/results/rdma_nl.$release.qp.json"
cp "$LAB_TMP/mr.json" "/lab/results/rdma_nl.$release.mr.json"
lab_expect "RDMA netlink available, to the exporter started before ib_core" \
  "$(lab_value held hpcnode_rdma_netlink_available)" == 1
lab_expect "no collector errors" "$(lab_value held hpcnode_collector_errors_total)" == 0

# hw_stat_within SCRAPE LOW HIGH: each counter of SCRAPE between the files read in LOW and HIGH.
hw_stat_within() {
  local name low high value
  lab_expect "rxe0 port 1: hw counters over netlink" \
    "$(lab_value "$1" 'hpcnode_rdma_port_hw_counters_source{device="rxe0",port="1",source="netlink"}')" == 1
  lab_expect "one hw_stat series per hw_counters file ($(grep -c . "$LAB_TMP/$2.hw"))" \
    "$(lab_series "$1" 'hpcnode_rdma_port_hw_stat_total{device="rxe0",port="1"}')" == "$(grep -c . "$LAB_TMP/$2.hw")"
  while read -r name low; do
    high=$(awk -v name="$name" '$1 == name { print $2 }' "$LAB_TMP/$3.hw")
    value=$(lab_value "$1" "hpcnode_rdma_port_hw_stat_total{device=\"rxe0\",port=\"1\",counter=\"$name\"}")
    lab_expect "$name over netlink ($value) not below the file before ($low)" "$value" ">=" "$low"
    lab_expect "$name over netlink ($value) not above the file after ($high)" "$value" "<=" "$high"
  done < "$LAB_TMP/$2.hw"
}
hw_stat_within held before_held after_held
# Traffic ran through the scrape's window, so the bounds were not equal.
lab_expect "rcvd_pkts moved between the files read before and after the scrape" \
  "$(awk '$1 == "rcvd_pkts" { print $2 }' "$LAB_TMP/after_held.hw")" ">" \
  "$(awk '$1 == "rcvd_pkts" { print $2 }' "$LAB_TMP/before_held.hw")"

# json_records FILE PID: the records of FILE (one JSON array) held by PID, one a line.
json_records() {
  sed 's/},{/}\n{/g' "$1" | grep -E "\"pid\":$2[,}]"
}
# json_sum FILE PID KEY: the sum of numeric KEY over those records.
json_sum() {
  json_records "$1" "$2" | sed -n "s/.*\"$3\":\([0-9]*\).*/\1/p" | awk '{ s += $1 } END { printf "%d\n", s }'
}

for side in server client; do
  eval pid=\$$side
  holder="device=\"rxe0\",holder=\"process\",pid=\"$pid\""
  qps=$(lab_value held "hpcnode_rdma_holder_resources{$holder,resource=\"qp\"}")
  pinned=$(lab_value held "hpcnode_rdma_holder_pinned_bytes{$holder}")
  lab_info "$side pid $pid: $qps QPs, $pinned bytes pinned"
  lab_expect "$side: QPs as rdma resource show qp" "$qps" == "$(json_records "$LAB_TMP/qp.json" "$pid" | grep -c .)"
  lab_expect "$side: at least one QP" "$qps" ">=" 1
  lab_expect "$side: MRs as rdma resource show mr" \
    "$(lab_value held "hpcnode_rdma_holder_resources{$holder,resource=\"mr\"}")" == \
    "$(json_records "$LAB_TMP/mr.json" "$pid" | grep -c .)"
  lab_expect "$side: pinned bytes as the sum of mrlen" "$pinned" == "$(json_sum "$LAB_TMP/mr.json" "$pid" mrlen)"
  lab_expect "$side: pinned bytes at least the 64 KiB buffer" "$pinned" ">=" 65536
  lab_expect "$side: comm ib_write_bw, as rdma prints it" \
    "$(lab_series held "hpcnode_rdma_holder_pinned_bytes{$holder,comm=\"ib_write_bw\"}")" == \
    "$(json_records "$LAB_TMP/qp.json" "$pid" | grep -c '"comm":"ib_write_bw"' | grep -q '^[1-9]' && echo 1)"
done
lab_expect "server labelled with Slurm job 4242" \
  "$(lab_series held "hpcnode_rdma_holder_pinned_bytes{pid=\"$server\",slurm_job=\"4242\"}")" == 1
lab_expect "client outside any job" \
  "$(lab_series held "hpcnode_rdma_holder_pinned_bytes{pid=\"$client\",slurm_job=\"\"}")" == 1
lab_expect "job 4242's pinned bytes are the server's" \
  "$(lab_value held 'hpcnode_rdma_slurm_job_pinned_bytes{device="rxe0",slurm_job="4242"}')" == \
  "$(lab_value held "hpcnode_rdma_holder_pinned_bytes{pid=\"$server\"}")"
# rdma names a kernel holder by comm alone, without a pid.
kernel_qps=$(sed 's/},{/}\n{/g' "$LAB_TMP/qp.json" | grep -vc '"pid":')
lab_expect "kernel-held QPs as rdma prints them ($kernel_qps)" \
  "$(lab_value held 'hpcnode_rdma_holder_resources{device="rxe0",holder="kernel",resource="qp"}')" == "$kernel_qps"
lab_expect "the GSI QP is held by ib_core" \
  "$(lab_value held 'hpcnode_rdma_holder_resources{device="rxe0",holder="kernel",comm="ib_core",resource="qp"}')" ">=" 1
lab_expect "QPs by type and state add up to the QP count" \
  "$(lab_value held 'hpcnode_rdma_queue_pairs{device="rxe0"}')" == \
  "$(lab_value held 'hpcnode_rdma_resources{device="rxe0",resource="qp"}')"
# The client's RC QP is in RTS, the server's (it only receives RDMA WRITEs) stays in RTR.
# The kernel reports no port for the GSI QP on 5.10 (rxe leaves its port_num 0 there; seen in
# the lab): rdma prints none, and the exporter's port label is empty as for an unbound QP.
gsi_port=$(sed 's/},{/}\n{/g' "$LAB_TMP/qp.json" | grep '"type":"GSI"' | sed -n 's/.*"port":\([0-9]*\).*/\1/p' | head -n1)
lab_info "the GSI QP's port as rdma prints it: '$gsi_port'"
for kind in RC:RTS:1 RC:RTR:1 GSI:RTS:$gsi_port; do
  qp_type=${kind%%:*} state=${kind#*:} qp_port=${kind##*:}
  state=${state%:*}
  lab_expect "$qp_type QPs in $state as rdma prints them, port '$qp_port'" \
    "$(lab_value held "hpcnode_rdma_queue_pairs{device=\"rxe0\",port=\"$qp_port\",type=\"$qp_type\",state=\"$state\"}")" == \
    "$(sed 's/},{/}\n{/g' "$LAB_TMP/qp.json" | grep -c "\"type\":\"$qp_type\",\"state\":\"$state\"")"
done
lab_expect "the client's QP connected (RTS)" \
  "$(lab_value held 'hpcnode_rdma_queue_pairs{device="rxe0",port="1",type="RC",state="RTS"}')" ">=" 1
lab_expect "device pinned bytes: the sum of every MR's mrlen" \
  "$(lab_value held 'hpcnode_rdma_pinned_bytes{device="rxe0"}')" == \
  "$(sed 's/},{/}\n{/g' "$LAB_TMP/mr.json" | sed -n 's/.*"mrlen":\([0-9]*\).*/\1/p' | awk '{ s += $1 } END { printf "%d\n", s }')"
# QPs made in auto mode: the counters the kernel bound, as rdma lists them (rxe cannot
# allocate a QP counter: alloc_and_bind fails without counter_alloc_stats, and the QP goes on).
bound=$(rdma statistic qp show link rxe0/1 2>&1)
lab_info "rdma statistic qp show link rxe0/1: $(echo "$bound" | head -c 300)"
lab_expect "QP counters bound on rxe0 as rdma lists them" \
  "$(lab_value held 'hpcnode_rdma_qp_counters{device="rxe0"}')" == "$(echo "$bound" | grep -c cntn)"
lab_expect "per-holder QP counter series, one per bound counter's values" \
  "$(lab_series held 'hpcnode_rdma_holder_qp_counter_total{device="rxe0"}')" == "$(echo "$bound" | grep -c cntn)"
lab_record_series held 'hpcnode_rdma_queue_pairs'
lab_record_series held 'hpcnode_rdma_holder_pinned_bytes'
# Ended now rather than at their -D bound: the group stays short.
kill "$client" "$server" 2> /dev/null
wait "$client"
wait "$server"
cp "$LAB_TMP/server.txt" /lab/results/rdma_netlink.ib_write_bw_server.txt
cp "$LAB_TMP/client.txt" /lab/results/rdma_netlink.ib_write_bw_client.txt
hw_counters before_released
lab_scrape released
hw_counters after_released
lab_expect "ib_write_bw gone: no series of its pid" \
  "$(lab_series released "hpcnode_rdma_holder_pinned_bytes{pid=\"$server\"}")" == 0
same_counters() { cmp -s "$LAB_TMP/$1.hw" "$LAB_TMP/$2.hw"; }
lab_check "traffic stopped: the files did not move across the scrape" same_counters before_released after_released
# Equal, not only between, once nothing moves.
hw_stat_within released after_released after_released
# A STAT_GET reply and the files at one moment, for the decoder's tests.
lab_check "capture RDMA_NLDEV_CMD_STAT_GET of rxe0 port 1" \
  /lab/bin/rdma_nl_capture 17 "$index" 1 "/lab/results/rdma_nl.$release.stat_port1.bin"
hw_counters captured
cp "$LAB_TMP/captured.hw" "/lab/results/rdma_nl.$release.hw_counters_port1.txt"
lab_check "no traffic: the files as at the last scrape" same_counters after_released captured
lab_expect "the port's binding logged once over three scrapes" \
  "$(grep -c 'RDMA QP counters on rxe0 port 1' "$LAB_EXPORTER_LOG")" == 1
lab_expect "still bound by the exporter" \
  "$(lab_value released 'hpcnode_rdma_qp_counter_port_binding{device="rxe0",port="1",binding="exporter_auto"}')" == 1
lab_exporter_stop

# rdma_softroce, in the same boot, adds rxe0 itself and checks that it can.
rdma link delete rxe0
