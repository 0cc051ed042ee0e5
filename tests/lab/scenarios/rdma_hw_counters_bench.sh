# The CPU per scrape of the rdma collector's two paths for hw counters on Soft-RoCE's rxe0: one
# RDMA_NLDEV_CMD_STAT_GET request per port against one read per hw_counters file, each in an
# exporter of its own, and an exporter with no collector for what every scrape costs besides.
# Under TCG with the debug build a scrape takes a fifth to a third of a CPU second: a measurement,
# too long for every run.
# lab: modules=rdma_rxe ib_uverbs rdma_ucm crc32_generic crc32_pclmul dummy
# lab: tools=verbs
# lab: collectors=rdma
# lab: timeout=600
# lab: when=named

port=/sys/class/infiniband/rxe0/ports/1

lab_scenario rxe0
lab_softroce_up
counters=$(find "$port/hw_counters/" -type f ! -name lifespan | wc -l)

lab_scenario cpu_per_scrape
# bench MODE FLAGS...: utime + stime from /proc/PID/stat over 200 scrapes, after 5 that open
# what is held, of an exporter started with FLAGS.
bench() {
  local mode=$1 pid start end i
  shift
  lab_exporter_start --collector.disable-defaults "$@" || return 1
  pid=$(cat /tmp/lab-exporter.pid)
  for i in 1 2 3 4 5; do wget -q -O /dev/null "http://$LAB_ADDRESS/metrics"; done
  start=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
  i=0
  while [ "$i" -lt 200 ]; do
    wget -q -O /dev/null "http://$LAB_ADDRESS/metrics"
    i=$((i + 1))
  done
  end=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
  lab_scrape "bench_$mode"
  lab_expect "$mode: no collector errors" "$(lab_value "bench_$mode" hpcnode_collector_errors_total)" == 0
  echo $((end - start)) > "$LAB_TMP/bench_$mode.ticks"
  lab_info "$mode: $((end - start)) ticks of CPU (USER_HZ, 100/s) over 200 scrapes"
}
bench none
for mode in sysfs netlink; do
  bench "$mode" --collector.rdma --collector.rdma.hw-counters="$mode"
  lab_expect "$mode: hw counters from $mode" \
    "$(lab_value "bench_$mode" "hpcnode_rdma_port_hw_counters_source{device=\"rxe0\",port=\"1\",source=\"$mode\"}")" == 1
done
lab_exporter_stop
none=$(cat "$LAB_TMP/bench_none.ticks")
sysfs=$(cat "$LAB_TMP/bench_sysfs.ticks")
netlink=$(cat "$LAB_TMP/bench_netlink.ticks")
lab_info "CPU per scrape, netlink / sysfs, whole exporter: $(awk -v n="$netlink" -v s="$sysfs" 'BEGIN { printf "%.2f", n / s }') ($netlink / $sysfs ticks)"
lab_info "CPU per scrape, netlink / sysfs, less the exporter without collectors ($none ticks): $(awk -v n="$netlink" -v s="$sysfs" -v z="$none" 'BEGIN { printf "%.2f", (n - z) / (s - z) }') ($counters hw counters on rxe0 port 1)"
lab_expect "the bench measured the rdma collector on the sysfs path" "$sysfs" ">" "$none"
rdma link delete rxe0
