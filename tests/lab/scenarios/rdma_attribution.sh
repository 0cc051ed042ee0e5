# Per-job RDMA attribution as the packaged unit runs the exporter (issue 41): the service user
# with exactly the unit's capabilities and /proc as the unit leaves it, while ib_write_bw runs
# as two other users, the server in a Slurm job's cgroup (cgroup v2, the layout slurmd 22.05's
# cgroup/v2 plugin makes: .../slurmstepd.scope/job_<N>/step_<S>/user/task_<T>). Its pid gets
# comm and slurm_job, the job its pinned bytes. Then under a site's hidepid=invisible /proc: comm
# is lost, the job still comes from the job cgroup's cgroup.procs, and the log says so once.
# lab: modules=rdma_rxe ib_uverbs rdma_ucm crc32_generic crc32_pclmul dummy
# lab: tools=verbs setpriv
# lab: collectors=rdma_netlink
# lab: timeout=240

. /lab/guest/service_user.sh
COLLECTOR="--collector.disable-defaults --collector.rdma_netlink --scrape.timeout=60s"
JOB=4243
SERVER_UID=1000
CLIENT_UID=1001

lab_scenario softroce
lab_softroce_up
gid=$(lab_roce_v2_gid)
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
task=/sys/fs/cgroup/system.slice/slurmstepd.scope/job_$JOB/step_0/user/task_0
lab_check "job cgroup $task" mkdir -p "$task"

lab_scenario traffic_of_other_users
# Both run (-D) far past the group's end, and are stopped at its cleanup.
# as_user UID CMD...: CMD as UID (no capability), with the memlock room ib_write_bw registers.
as_user() {
  local uid=$1
  shift
  ulimit -l unlimited
  exec /usr/local/bin/setpriv --reuid="$uid" --regid="$uid" --clear-groups --inh-caps=-all "$@"
}
# The server joins the job (as slurmstepd moves a task: root writes the pid, "0" being the
# writer itself) and then becomes its user; the client runs as a third user in no job.
( echo 0 > "$task/cgroup.procs" && as_user $SERVER_UID ib_write_bw -d rxe0 -x "$gid" -D 600 -s 65536 ) \
  > "$LAB_TMP/server.txt" 2>&1 &
server=$!
# The server listens on TCP 18515 (0x4853) for the client's connection details.
lab_check "ib_write_bw server listening" lab_wait_until 30 grep -qi ':4853 00000000:0000 0A' /proc/net/tcp
( as_user $CLIENT_UID ib_write_bw -d rxe0 -x "$gid" -D 600 -s 65536 127.0.0.1 ) > "$LAB_TMP/client.txt" 2>&1 &
client=$!
lab_check "ib_write_bw connected (the client's RC QP in RTS)" \
  lab_wait_until 40 sh -c "rdma resource show qp | grep -q 'RC.*RTS.*ib_write_bw'"
lab_check "the server runs as uid $SERVER_UID" grep -q "^Uid:[[:space:]]*$SERVER_UID[[:space:]]" /proc/$server/status
lab_check "the client runs as uid $CLIENT_UID" grep -q "^Uid:[[:space:]]*$CLIENT_UID[[:space:]]" /proc/$client/status
lab_check "the server is in job_$JOB ($(cat /proc/$server/cgroup))" grep -q "/job_$JOB/" /proc/$server/cgroup

# attributed NAME COMM: the server and client series of scrape NAME with COMM as their comm.
attributed() {
  lab_check "$1: both ib_write_bw still run" kill -0 "$server" "$client"
  lab_expect "$1: the server's pid, comm '$2', Slurm job $JOB" \
    "$(lab_series "$1" "hpcnode_rdma_holder_pinned_bytes{device=\"rxe0\",pid=\"$server\",comm=\"$2\",slurm_job=\"$JOB\"}")" == 1
  lab_expect "$1: the client's pid, comm '$2', no job" \
    "$(lab_series "$1" "hpcnode_rdma_holder_pinned_bytes{device=\"rxe0\",pid=\"$client\",comm=\"$2\",slurm_job=\"\"}")" == 1
  lab_expect "$1: job $JOB's pinned bytes are the server's" \
    "$(lab_value "$1" "hpcnode_rdma_slurm_job_pinned_bytes{device=\"rxe0\",slurm_job=\"$JOB\"}")" == \
    "$(lab_value "$1" "hpcnode_rdma_holder_pinned_bytes{device=\"rxe0\",pid=\"$server\"}")"
  lab_expect "$1: the server pins at least its 64 KiB buffer" \
    "$(lab_value "$1" "hpcnode_rdma_holder_pinned_bytes{device=\"rxe0\",pid=\"$server\"}")" ">=" 65536
}

lab_scenario as_the_unit
# shellcheck disable=SC2086 # capability lists split into words on purpose
as_service_user "$(unit_proc_options)" $UNIT_CAPS
lab_info "the unit's ProtectProc: '$(unit_setting ProtectProc)', so /proc mounted with: '$(unit_proc_options)'"
# shellcheck disable=SC2086 # a list of flags
lab_exporter_start $COLLECTOR || exit 1
lab_check "the exporter runs as the service user (uid $SERVICE_UID)" \
  grep -q "^Uid:[[:space:]]*$SERVICE_UID[[:space:]]" "/proc/$(cat /tmp/lab-exporter.pid)/status"
lab_scrape unit
attributed unit ib_write_bw
lab_record_series unit hpcnode_rdma_holder_pinned_bytes

lab_scenario under_hidepid
# A site that mounts /proc with hidepid= (systemd's ProtectProc=invisible is the same mount).
# shellcheck disable=SC2086
as_service_user hidepid=invisible $UNIT_CAPS
# shellcheck disable=SC2086
lab_exporter_start $COLLECTOR || exit 1
lab_check "the exporter cannot see the server's /proc entry" \
  nsenter -t "$(cat /tmp/lab-exporter.pid)" -m /usr/local/bin/setpriv --reuid=$SERVICE_UID --regid=$SERVICE_UID --clear-groups \
  sh -c "! test -e /proc/$server"
lab_scrape hidden_1
lab_scrape hidden_2
attributed hidden_2 ""
lab_expect "one log line says comm is lost and where the job came from" \
  "$(grep -c 'hidden from the exporter' "$LAB_EXPORTER_LOG")" == 1
lab_record_series hidden_2 hpcnode_rdma_holder_pinned_bytes
lab_exporter_stop

lab_scenario cleanup
kill "$client" "$server" 2> /dev/null
wait "$client"
wait "$server"
cp "$LAB_TMP/server.txt" /lab/results/rdma_attribution.ib_write_bw_server.txt
cp "$LAB_TMP/client.txt" /lab/results/rdma_attribution.ib_write_bw_client.txt
lab_check "job cgroup removed" rmdir "$task" "${task%/*}" "${task%/*/*}" "${task%/*/*/*}"
