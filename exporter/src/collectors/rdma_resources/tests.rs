use super::*;
use crate::metrics::{encode, Format};
use crate::netlink::rdma::counters::encode as counter_replies;
use crate::netlink::rdma::counters::QpCounterMode;
use crate::netlink::rdma::message::encode as replies;
use crate::netlink::rdma::reply::Holder;
use device_series::{qp_state_name, qp_type_name};

fn collector(procfs: PathBuf, max_holders: usize) -> NetlinkCollector {
    NetlinkCollector {
        sysfs: PathBuf::new(),
        procfs,
        timeout: Duration::from_secs(1),
        max_holders,
        available: Mutex::new(true),
        reported: Mutex::default(),
        bindings: None,
    }
}

/// A process as procfs shows it: `comm` and `cgroup`.
fn process(proc: &std::path::Path, pid: u32, comm: &str, cgroup: &str) {
    let dir = proc.join(pid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
    std::fs::write(dir.join("cgroup"), cgroup).unwrap();
}

fn entry(holder: Holder, port: Option<u32>, qp: Option<(u8, u8)>, mr_length: Option<u64>) -> Entry {
    Entry {
        holder,
        port,
        qp_number: None,
        qp_type: qp.map(|(qp_type, _)| qp_type),
        qp_state: qp.map(|(_, state)| state),
        mr_length,
    }
}

fn text(out: Output) -> String {
    encode(out.samples, Format::PrometheusText).unwrap()
}

/// Two ranks of Slurm job 77, one process outside any job, one that exited, and ib_core's
/// GSI QP; two holders kept, the rest summed.
#[test]
fn holders_are_named_capped_and_summed_per_job() {
    let proc = tempfile::tempdir().unwrap();
    let job = "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n";
    process(proc.path(), 100, "mpi_rank", job);
    process(proc.path(), 101, "mpi_rank", job);
    process(proc.path(), 200, "ib_write_bw", "0::/user.slice\n");
    let (rc_rts, gsi_rts) = (Some((2, 3)), Some((1, 3)));
    let entries = vec![
        (
            Resource::QueuePair,
            entry(Holder::Kernel("ib_core".into()), Some(1), gsi_rts, None),
        ),
        (
            Resource::QueuePair,
            entry(Holder::Process(100), Some(1), rc_rts, None),
        ),
        (
            Resource::QueuePair,
            entry(Holder::Process(101), None, Some((2, 0)), None),
        ),
        (
            Resource::MemoryRegion,
            entry(Holder::Process(100), None, None, Some(1 << 30)),
        ),
        (
            Resource::MemoryRegion,
            entry(Holder::Process(101), None, None, Some(1 << 20)),
        ),
        (
            Resource::MemoryRegion,
            entry(Holder::Process(200), None, None, Some(1 << 25)),
        ),
        (
            Resource::MemoryRegion,
            entry(Holder::Process(300), None, None, Some(4096)),
        ),
        (
            Resource::ProtectionDomain,
            entry(Holder::Process(300), None, None, None),
        ),
    ];
    let mut out = Output::default();
    let device = LabelValue::from("mlx5_0");
    collector(proc.path().to_path_buf(), 2).holders(&device, &entries, &BTreeMap::new(), &mut out);
    queue_pairs(&device, &entries, &mut out);
    let text = text(out);
    let has = |line: &str| assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    has(
        r#"hpcnode_rdma_holder_pinned_bytes{device="mlx5_0",holder="process",pid="100",comm="mpi_rank",slurm_job="77"} 1073741824"#,
    );
    has(
        r#"hpcnode_rdma_holder_pinned_bytes{device="mlx5_0",holder="process",pid="200",comm="ib_write_bw",slurm_job=""} 33554432"#,
    );
    // pid 101 (1 MiB), the exited pid 300 (4 KiB) and ib_core (nothing pinned) summed.
    has(
        r#"hpcnode_rdma_holder_pinned_bytes{device="mlx5_0",holder="other",pid="",comm="",slurm_job=""} 1052672"#,
    );
    has(
        r#"hpcnode_rdma_holder_resources{device="mlx5_0",holder="other",pid="",comm="",slurm_job="",resource="qp"} 2"#,
    );
    has(
        r#"hpcnode_rdma_holder_resources{device="mlx5_0",holder="other",pid="",comm="",slurm_job="",resource="pd"} 1"#,
    );
    // The job counts both ranks, whether kept one by one or not.
    has(r#"hpcnode_rdma_slurm_job_pinned_bytes{device="mlx5_0",slurm_job="77"} 1074790400"#);
    has(r#"hpcnode_rdma_slurm_job_resources{device="mlx5_0",slurm_job="77",resource="qp"} 2"#);
    has(r#"hpcnode_rdma_slurm_job_resources{device="mlx5_0",slurm_job="77",resource="mr"} 2"#);
    assert_eq!(text.matches("hpcnode_rdma_holder_pinned_bytes{").count(), 3);
    has(r#"hpcnode_rdma_queue_pairs{device="mlx5_0",port="1",type="RC",state="RTS"} 1"#);
    has(r#"hpcnode_rdma_queue_pairs{device="mlx5_0",port="1",type="GSI",state="RTS"} 1"#);
    has(r#"hpcnode_rdma_queue_pairs{device="mlx5_0",port="",type="RC",state="RESET"} 1"#);
}

/// A `/proc` mounted `hidepid=` shows no other user's pid: the job comes from slurmd's cgroup
/// tree under `--path.sysfs`, `comm` stays empty, and the log says so once.
#[test]
fn a_hidden_process_keeps_its_job_from_the_cgroup_tree() {
    let proc = tempfile::tempdir().unwrap();
    let sysfs = tempfile::tempdir().unwrap();
    let task = sysfs
        .path()
        .join("fs/cgroup/system.slice/slurmstepd.scope/job_77/step_0/user/task_0");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(task.join("cgroup.procs"), "100\n").unwrap();
    let entries = vec![
        (
            Resource::MemoryRegion,
            entry(Holder::Process(100), None, None, Some(1 << 20)),
        ),
        (
            Resource::MemoryRegion,
            entry(Holder::Process(200), None, None, Some(4096)),
        ),
    ];
    let mut collector = collector(proc.path().to_path_buf(), 20);
    collector.sysfs = sysfs.path().to_path_buf();
    let device = LabelValue::from("mlx5_0");
    for _ in 0..2 {
        let mut out = Output::default();
        collector.holders(&device, &entries, &BTreeMap::new(), &mut out);
        let text = text(out);
        for line in [
            r#"hpcnode_rdma_holder_pinned_bytes{device="mlx5_0",holder="process",pid="100",comm="",slurm_job="77"} 1048576"#,
            r#"hpcnode_rdma_holder_pinned_bytes{device="mlx5_0",holder="process",pid="200",comm="",slurm_job=""} 4096"#,
            r#"hpcnode_rdma_slurm_job_pinned_bytes{device="mlx5_0",slurm_job="77"} 1048576"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
    }
    let reported = lock(&collector.reported);
    assert_eq!(
        reported
            .iter()
            .filter(|notice| notice.contains("hidden"))
            .count(),
        1,
        "{reported:?}"
    );
}

fn json_records(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// Real kernels' replies (Debian 6.12 and 6.1 in the kernel lab, Soft-RoCE with
/// ib_write_bw running), captured at the moment iproute2's `rdma resource show qp -j` /
/// `mr -j` printed theirs: the decoder reads every entry as rdma does.
#[test]
fn captured_kernel_replies_decode_as_rdma_prints_them() {
    for release in ["6.12", "6.1"] {
        let dir = replies::fixtures(release);
        let devices = replies::replay(&dir.join("devices.bin"), Command::Devices, None);
        let rxe0 = devices
            .devices
            .iter()
            .find(|device| device.name == "rxe0")
            .expect("rxe0 listed");
        let index = Some(rxe0.index);
        let qps = replies::replay(
            &dir.join("qp.bin"),
            Command::Resources(Resource::QueuePair),
            index,
        );
        let records = json_records(&dir.join("qp.json"));
        assert_eq!(qps.entries.len(), records.len(), "{release}: QPs");
        for (entry, record) in qps.entries.iter().zip(&records) {
            let holder = match record.get("pid") {
                Some(pid) => Holder::Process(pid.as_u64().unwrap() as u32),
                None => Holder::Kernel(record["comm"].as_str().unwrap().to_string()),
            };
            assert_eq!(entry.holder, holder, "{release}: {record}");
            assert_eq!(
                entry.port.map(u64::from),
                record["port"].as_u64(),
                "{release}: {record}"
            );
            assert_eq!(
                entry.qp_type.map(qp_type_name).unwrap().as_str(),
                record["type"],
                "{release}: {record}"
            );
            assert_eq!(
                entry.qp_state.map(qp_state_name).unwrap().as_str(),
                record["state"],
                "{release}: {record}"
            );
        }
        assert!(qps
            .entries
            .iter()
            .any(|entry| matches!(entry.holder, Holder::Process(_))));
        let mrs = replies::replay(
            &dir.join("mr.bin"),
            Command::Resources(Resource::MemoryRegion),
            index,
        );
        let records = json_records(&dir.join("mr.json"));
        assert_eq!(mrs.entries.len(), records.len(), "{release}: MRs");
        for (entry, record) in mrs.entries.iter().zip(&records) {
            assert_eq!(
                entry.mr_length,
                record["mrlen"].as_u64(),
                "{release}: {record}"
            );
            assert_eq!(
                entry.holder,
                Holder::Process(record["pid"].as_u64().unwrap() as u32)
            );
        }
        for resource in [Resource::CompletionQueue, Resource::ProtectionDomain] {
            let dump = replies::replay(
                &dir.join(format!("{}.bin", resource.label())),
                Command::Resources(resource),
                index,
            );
            assert!(
                !dump.entries.is_empty(),
                "{release}: no {} entries",
                resource.label()
            );
        }
        replies::replay(
            &dir.join("cm_id.bin"),
            Command::Resources(Resource::CmId),
            index,
        );
    }
}

/// The requests a unit sends, recorded, each answered with bytes as the kernel encodes
/// them and decoded by the real decoder.
struct Replies<F: FnMut(Command) -> Vec<u8>> {
    sent: Vec<Command>,
    reply: F,
}

impl<F: FnMut(Command) -> Vec<u8>> Requests for Replies<F> {
    fn request(
        &mut self,
        command: Command,
        device: Option<u32>,
        _deadline: Instant,
    ) -> Result<Dump, DumpError> {
        self.sent.push(command);
        let mut dump = Dump::new(command, device, 1);
        dump.feed(&(self.reply)(command))?;
        Ok(dump)
    }
}

fn rxe0() -> Device {
    Device {
        index: 3,
        name: "rxe0".into(),
    }
}

/// A node with rxe0 (one port) and two ranks of Slurm job 77 holding one QP each (numbers
/// 17 and 18), each with a counter of its own; the port's mode as `mode`, and `set` the
/// kernel's answer to a mode set.
/// A node with rxe0's port 1 in `mode`, two processes of job 77 with a counted QP each, and
/// a kernel that answers them (`set`: its reply to a mode set), nothing sent yet.
fn node(
    mode: QpCounterMode,
    set: Vec<u8>,
) -> (tempfile::TempDir, Replies<impl FnMut(Command) -> Vec<u8>>) {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("sys/class/infiniband/rxe0/ports/1")).unwrap();
    let job = "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n";
    process(&root.path().join("proc"), 100, "mpi_rank", job);
    process(&root.path().join("proc"), 101, "mpi_rank", job);
    let qps = [(100, 17), (101, 18)].map(|(pid, number)| Entry {
        qp_number: Some(number),
        ..entry(Holder::Process(pid), Some(1), Some((2, 3)), None)
    });
    let counters = [(100, 17, 1 << 33), (101, 18, 5)].map(|(pid, number, value)| {
        let values = [("rx_write_requests", value)];
        counter_replies::counter(number, Some(Holder::Process(pid)), &[number], &values)
    });
    let reply = move |command| match command {
        Command::Resources(Resource::QueuePair) => [
            replies::resources(Resource::QueuePair, &rxe0(), 1, &qps),
            replies::done(1, 0),
        ]
        .concat(),
        Command::QpCounterMode { port } => counter_replies::mode(&rxe0(), port, 1, mode),
        Command::SetQpCounterAuto { .. } => set.clone(),
        Command::QpCounters => [
            counter_replies::dump(&rxe0(), 1, &counters),
            replies::done(1, 0),
        ]
        .concat(),
        _ => replies::done(1, 0),
    };
    let kernel = Replies {
        sent: Vec::new(),
        reply,
    };
    (root, kernel)
}

fn qp_counting(root: &std::path::Path) -> NetlinkCollector {
    NetlinkCollector {
        sysfs: root.join("sys"),
        bindings: Some(Mutex::default()),
        ..collector(root.join("proc"), 1)
    }
}

fn resource_dumps() -> Vec<Command> {
    Resource::ALL.map(Command::Resources).to_vec()
}

/// Off by default: the unit asks for the resources alone, and nothing of the counters.
#[test]
fn without_the_flag_no_counter_request_is_sent() {
    let (root, mut kernel) = node(QpCounterMode::None, counter_replies::set(&rxe0(), 1, 1));
    let collector = NetlinkCollector {
        sysfs: root.path().join("sys"),
        ..collector(root.path().join("proc"), 1)
    };
    let mut out = Output::default();
    collector.read_device(&rxe0(), &mut kernel, &mut out);
    assert_eq!(kernel.sent, resource_dumps());
    assert!(!text(out).contains("qp_counter"));
}

/// A port in no mode is put in auto mode once; each scrape then dumps the counters, summed
/// per holder (one kept, the other in `other`) and per job.
#[test]
fn with_the_flag_auto_mode_is_turned_on_once_and_counters_summed() {
    let (root, mut kernel) = node(QpCounterMode::None, counter_replies::set(&rxe0(), 1, 1));
    let collector = qp_counting(root.path());
    let mut out = Output::default();
    collector.read_device(&rxe0(), &mut kernel, &mut out);
    let set = Command::SetQpCounterAuto { port: 1, mask: 3 };
    let mut first = resource_dumps();
    first.extend([Command::QpCounterMode { port: 1 }, set, Command::QpCounters]);
    assert_eq!(kernel.sent, first);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let text = text(out);
    let has = |line: &str| assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    has(
        r#"hpcnode_rdma_qp_counter_port_binding{device="rxe0",port="1",binding="exporter_auto"} 1"#,
    );
    has(r#"hpcnode_rdma_qp_counters{device="rxe0"} 2"#);
    // One holder kept (max-holders 1; ties by pid), the other summed as other.
    has(
        r#"hpcnode_rdma_holder_qp_counter_total{device="rxe0",holder="process",pid="100",comm="mpi_rank",slurm_job="77",counter="rx_write_requests"} 8589934592"#,
    );
    has(
        r#"hpcnode_rdma_holder_qp_counter_total{device="rxe0",holder="other",pid="",comm="",slurm_job="",counter="rx_write_requests"} 5"#,
    );
    has(
        r#"hpcnode_rdma_slurm_job_qp_counter_total{device="rxe0",slurm_job="77",counter="rx_write_requests"} 8589934597"#,
    );
    kernel.sent.clear();
    collector.read_device(&rxe0(), &mut kernel, &mut Output::default());
    let mut second = resource_dumps();
    second.push(Command::QpCounters);
    assert_eq!(kernel.sent, second, "the port is bound once");
}

/// Soft-RoCE's answer on a kernel whose rxe lacks counter support, or a caller without
/// CAP_NET_ADMIN: refused, said once (a metric and one line), not asked again; and an
/// admin's manual binding is never changed.
#[test]
fn a_refusal_is_reported_once_and_an_admins_mode_kept() {
    let refused = replies::error(1, libc::EOPNOTSUPP);
    let (root, mut kernel) = node(QpCounterMode::None, refused);
    let collector = qp_counting(root.path());
    for _ in 0..2 {
        let mut out = Output::default();
        collector.read_device(&rxe0(), &mut kernel, &mut out);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert!(text(out).contains(
            r#"hpcnode_rdma_qp_counter_port_binding{device="rxe0",port="1",binding="refused"} 1"#
        ));
    }
    let sets = kernel
        .sent
        .iter()
        .filter(|c| matches!(c, Command::SetQpCounterAuto { .. }));
    assert_eq!(sets.count(), 1);
    let reported = lock(&collector.reported);
    let refusals = reported.iter().filter(|notice| notice.contains("refused"));
    assert_eq!(refusals.count(), 1, "{reported:?}");
    drop(reported);

    let (root, mut kernel) = node(QpCounterMode::Manual, Vec::new());
    let collector = qp_counting(root.path());
    let mut out = Output::default();
    collector.read_device(&rxe0(), &mut kernel, &mut out);
    assert!(!(kernel.sent.iter()).any(|c| matches!(c, Command::SetQpCounterAuto { .. })));
    assert!(text(out).contains(r#"binding="admin_manual"} 1"#));
}

#[test]
fn kernel_holders_are_named_by_module() {
    let proc = tempfile::tempdir().unwrap();
    let entries = vec![(
        Resource::QueuePair,
        entry(
            Holder::Kernel("ib_ipoib".into()),
            Some(1),
            Some((4, 3)),
            None,
        ),
    )];
    let mut out = Output::default();
    collector(proc.path().to_path_buf(), 20).holders(
        &"ib0".into(),
        &entries,
        &BTreeMap::new(),
        &mut out,
    );
    let text = text(out);
    assert!(
        text.contains(r#"hpcnode_rdma_holder_resources{device="ib0",holder="kernel",pid="",comm="ib_ipoib",slurm_job="",resource="qp"} 1"#),
        "{text}"
    );
    assert!(!text.contains("slurm_job_"), "{text}");
}
