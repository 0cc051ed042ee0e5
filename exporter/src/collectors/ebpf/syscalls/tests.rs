use std::collections::BTreeMap;

use aya::maps::{HashMap as BpfHashMap, RingBuf};

use super::*;
use crate::collectors::ebpf::kernel_log;
use crate::collectors::ebpf::probes::{self, iommu_fault, module_load_syscall, vfio_holders};
use std::os::fd::{AsFd, AsRawFd};

/// Every BPF program the probes can use passes this kernel's verifier, including those
/// whose hooks this kernel lacks (loading a raw_tp, tracepoint or kprobe program does not
/// need its target; tp_btf and fexit programs do, and are loaded where it exists).
#[test]
fn every_program_passes_the_verifier_here() {
    if !crate::collectors::ebpf::tests::running_as_root("every_program_passes_the_verifier_here") {
        return;
    }
    let btf = kernel_btf().ok();
    let mut loaded = 0;
    for probe in probes::ALL {
        for attempt in probe
            .attempts
            .iter()
            .flat_map(|a| [Some(a), a.namer].into_iter().flatten().chain(a.companions))
        {
            let result = match attempt.hook {
                Hook::Perf | Hook::Kmsg => continue,
                _ => load_only(probe, attempt, btf.as_ref()),
            };
            // tp_btf and fexit programs are verified against their target's BTF type; the
            // signature check's read `struct load_info`, which a kernel without modules
            // lacks, so aya poisons those reads (a call to 0xbad2310).
            if matches!(&result, Err(err) if err.contains("unknown BTF type")
                    || err.contains(&format!("unknown#{}", 0xbad2310)))
            {
                continue;
            }
            result.unwrap_or_else(|err| panic!("{}/{}: {err}", probe.name, attempt.program));
            loaded += 1;
        }
    }
    assert!(loaded >= 19, "only {loaded} programs loaded");
}

/// The syscall probe's kernel side, run by BPF_PROG_TEST_RUN on its raw_tp programs with
/// made-up `sys_enter(regs, id)` and `sys_exit(regs, ret)` calls from this thread: failures
/// of the two module syscalls are recorded under the key the exporter reads, with the module
/// the entry named: for finit_module the name of the file behind the descriptor (opened
/// here), for init_module the name inside the image (a real Debian module in this process's
/// memory, `lab_unsigned.ko`, which calls itself pcspkr); no name for an image that is not
/// ELF or is cut short, or an exit without an entry. Anything else is ignored.
#[test]
fn syscall_programs_record_failures_by_module() {
    if !crate::collectors::ebpf::tests::running_as_root(
        "syscall_programs_record_failures_by_module",
    ) {
        return;
    }
    let btf = kernel_btf().unwrap();
    let (mut ebpf, program, exit_fd) = load_raw_tp(&module_load_syscall::SPEC, Some(&btf));
    let enter_fd = load_namer(&mut ebpf, &module_load_syscall::SPEC, &btf);
    let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/modules_signed_files/lib/modules/6.12.117+deb12-amd64/extra/lab_unsigned.ko"
        );
    let image = std::fs::read(path).unwrap();
    let file = std::fs::File::open(path).unwrap();
    let not_elf = written(b"not an ELF image, but long enough to hold an ELF header of 64 bytes");
    let (finit, init) = (libc::SYS_finit_module, libc::SYS_init_module);
    let image_at = image.as_ptr() as u64;
    // (syscall, its first two arguments or no entry, return value)
    let calls = [
        (finit, Some((file.as_raw_fd() as u64, 0)), -129),
        (init, Some((image_at, image.len() as u64)), -129),
        (init, Some((image_at, image.len() as u64)), 0), // success: not a failure
        (
            init,
            Some((not_elf.as_ptr() as u64, not_elf.len() as u64)),
            -8,
        ),
        (init, Some((image_at, image.len() as u64 / 2)), -22), // section headers cut off
        (finit, None, -1),                                     // began before the probe
        (libc::SYS_read, Some((0, 0)), -9),                    // another syscall
    ];
    let mut regs = [0u64; 21]; // x86-64 struct pt_regs: si 13, di 14, orig_ax 15
    for (nr, entry, ret) in calls {
        regs[15] = nr as u64;
        if let Some((di, si)) = entry {
            (regs[14], regs[13]) = (di, si);
            test_run_raw_tp(enter_fd, &[regs.as_ptr() as u64, nr as u64]);
        }
        test_run_raw_tp(exit_fd, &[regs.as_ptr() as u64, ret as u64]);
    }
    let in_flight: BpfHashMap<_, u64, [u8; 56]> =
        BpfHashMap::try_from(ebpf.map("loading").unwrap()).unwrap();
    assert_eq!(in_flight.keys().count(), 0, "every exit removes its entry");
    let attachment = Attachment::Bpf {
        ebpf: Mutex::new(ebpf),
        program,
        unnamed: None,
    };
    let lost_map = module_load_syscall::SPEC.lost_map;
    let (load_failures, dropped) = with_maps(&attachment, lost_map, |maps| {
        Ok((module_load_syscall::load_failures(maps)?, maps.dropped))
    })
    .unwrap();
    let expected = BTreeMap::from([
        ((init as u32, 8, String::new()), 1),
        ((init as u32, 22, String::new()), 1),
        ((init as u32, 129, "pcspkr".to_string()), 1),
        ((finit as u32, 1, String::new()), 1),
        ((finit as u32, 129, "lab_unsigned.ko".to_string()), 1),
    ]);
    assert_eq!(load_failures, expected);
    assert_eq!(dropped, 0);
}

/// The kernel log probe's raw_tp program (the fallback when tp_btf is missing), run by
/// BPF_PROG_TEST_RUN with a made-up `console(text, len)`: the line reaches the ring buffer
/// in the record layout the exporter parses, cut at 255 bytes.
#[test]
fn console_program_forwards_lines_to_the_ring_buffer() {
    if !crate::collectors::ebpf::tests::running_as_root(
        "console_program_forwards_lines_to_the_ring_buffer",
    ) {
        return;
    }
    let (mut ebpf, _, fd) = load_raw_tp(&probes::kernel_log::SPEC, None);
    let short = written(b"Loading of unsigned module is rejected");
    let short = std::str::from_utf8(&short).unwrap();
    let long = "x".repeat(400);
    for text in [short, &long] {
        test_run_raw_tp(fd, &[text.as_ptr() as u64, text.len() as u64]);
    }
    let mut ring = RingBuf::try_from(ebpf.take_map("kernel_log_lines").unwrap()).unwrap();
    let first = ring.next().map(|r| kernel_log::ring_record_text(&r));
    assert_eq!(first, Some(Some(short.to_string())));
    let second = ring.next().map(|r| kernel_log::ring_record_text(&r));
    assert_eq!(second, Some(Some("x".repeat(255))));
    assert!(ring.next().is_none());
}

/// `bytes` in memory written just now. A program reads a test's data as the kernel reads
/// a user address without faulting (`bpf_probe_read`), which fails on a page not mapped in
/// yet: a literal's page of the test binary may not be, and was not once in a full
/// parallel test run (the device's name read as empty).
fn written(bytes: &[u8]) -> Vec<u8> {
    bytes.to_vec()
}

/// The IOMMU fault probe's raw_tp program, run by BPF_PROG_TEST_RUN with made-up
/// `io_page_fault(dev, iova, flags)` arguments: the device's name read through the kernel's
/// own `struct device` layout, the write flag, and a NULL device (recent SMMUv2) counted
/// without a name instead of crashing.
#[test]
fn io_page_fault_program_counts_by_device_and_access() {
    if !crate::collectors::ebpf::tests::running_as_root(
        "io_page_fault_program_counts_by_device_and_access",
    ) {
        return;
    }
    let btf = kernel_btf().unwrap();
    let (ebpf, program, fd) = load_raw_tp(&iommu_fault::SPEC, Some(&btf));
    // Wherever this kernel keeps init_name and kobj.name, every pointer-sized slot of this
    // stand-in `struct device` points at the name.
    let name = written(b"0000:3b:00.0\0");
    let device = [name.as_ptr() as u64; 512];
    const WRITE: u64 = 1;
    let faults = [
        (device.as_ptr() as u64, 0),
        (device.as_ptr() as u64, WRITE),
        (device.as_ptr() as u64, WRITE),
        (0, 0), // NULL device
    ];
    for (dev, flags) in faults {
        test_run_raw_tp(fd, &[dev, 0xfffd_1000, flags]);
    }
    let attachment = Attachment::Bpf {
        ebpf: Mutex::new(ebpf),
        program,
        unnamed: None,
    };
    let lost_map = iommu_fault::SPEC.lost_map;
    let (mut faults, dropped) = with_maps(&attachment, lost_map, |maps| {
        Ok((iommu_fault::faults(maps)?, maps.dropped))
    })
    .unwrap();
    faults.sort();
    assert_eq!(
        faults,
        [
            (String::new(), 0, 1),
            ("0000:3b:00.0".to_string(), 0, 1),
            ("0000:3b:00.0".to_string(), 1, 2),
        ]
    );
    assert_eq!(dropped, 0);
}

/// The perf fallback (module loads where BPF is refused) counts a tracepoint on every CPU;
/// here on printk:console, which this kernel has, with lines written to /dev/kmsg.
#[test]
fn perf_counts_a_tracepoint_on_every_cpu() {
    if !crate::collectors::ebpf::tests::running_as_root("perf_counts_a_tracepoint_on_every_cpu") {
        return;
    }
    ensure_tracefs().unwrap();
    let attachment = count_with_perf(&["printk/console"]).unwrap();
    let read = || with_maps(&attachment, "", |maps| Ok(maps.perf_count)).unwrap();
    let before = read();
    for _ in 0..3 {
        crate::collectors::ebpf::tests::write_kmsg("hpcnode perf counting test");
    }
    // Other processes may log too: at least our three lines.
    assert!(read() >= before + 3, "{before} -> {}", read());
}

/// What pre-5.11 kernels charge to RLIMIT_MEMLOCK, at the 64 KiB default.
const CHARGED_64K: BpfMemoryCharge = BpfMemoryCharge {
    to_memlock: true,
    memlock_limit: Some(64 << 10),
};

/// A map creation the kernel refused with `errno`, as aya's loader reports it.
fn map_refused(errno: i32) -> aya::EbpfError {
    aya::EbpfError::MapError(MapError::CreateError {
        name: "module_loads".into(),
        io_error: std::io::Error::from_raw_os_error(errno),
    })
}

/// A program load the kernel refused with `errno`, as `load_program` reports it.
fn program_refused(errno: i32) -> Box<dyn Error> {
    Box::new(ProgramError::LoadError {
        io_error: std::io::Error::from_raw_os_error(errno),
        verifier_log: aya_obj::VerifierLog::new(String::new()),
    })
}

/// EPERM from creating a map or loading a program names the memlock limit where the kernel
/// charges BPF memory to it and it is still finite (aya's raise to infinity failed); not
/// once that raise worked, nor on kernels with memcg accounting (EPERM is a missing
/// capability there), nor for other errors or an EPERM from attaching.
#[test]
fn eperm_names_the_memlock_limit_only_where_it_is_the_cause() {
    let map_line =
        "map error: failed to create map `module_loads`: Operation not permitted (os error 1)";
    let program_line =
        "the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1). Verifier output:";
    let note = "EPERM: BPF memory is charged to RLIMIT_MEMLOCK (64 KiB) on kernels before 5.11 and raising it failed; raise it (the unit sets LimitMEMLOCK=infinity)";
    assert_eq!(
        CHARGED_64K.explain(&map_refused(libc::EPERM)),
        format!("{note}: {map_line}")
    );
    assert_eq!(
        CHARGED_64K.explain(&*program_refused(libc::EPERM)),
        format!("{note}: {program_line}")
    );

    let raised = BpfMemoryCharge {
        memlock_limit: None,
        ..CHARGED_64K
    };
    let memcg = BpfMemoryCharge {
        to_memlock: false,
        ..CHARGED_64K
    };
    for charge in [raised, memcg] {
        assert_eq!(charge.explain(&map_refused(libc::EPERM)), map_line);
    }
    for err in [map_refused(libc::E2BIG), map_refused(libc::EINVAL)] {
        assert!(!CHARGED_64K.explain(&err).contains("RLIMIT_MEMLOCK"));
    }
    assert!(!CHARGED_64K
        .explain(&*program_refused(libc::EACCES))
        .contains("RLIMIT_MEMLOCK"));
    let attach_refused = ProgramError::SyscallError(aya::sys::SyscallError {
        call: "perf_event_open",
        io_error: std::io::Error::from_raw_os_error(libc::EPERM),
    });
    assert!(!CHARGED_64K
        .explain(&attach_refused)
        .contains("RLIMIT_MEMLOCK"));
}

#[test]
fn sizes_read_as_ulimit_users_think_of_them() {
    let shown = [1000, 64 << 10, (8 << 20) + 1].map(|bytes| Bytes(bytes).to_string());
    assert_eq!(shown, ["1000 bytes", "64 KiB", "8 MiB"]);
}

/// The limit explained is this process's soft RLIMIT_MEMLOCK, as /proc/self/limits shows it.
#[test]
fn memlock_limit_is_the_soft_limit_of_this_process() {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let soft = limits
        .lines()
        .find_map(|line| line.strip_prefix("Max locked memory"))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap();
    let expected = (soft != "unlimited").then(|| soft.parse::<u64>().unwrap());
    assert_eq!(BpfMemoryCharge::now().memlock_limit, expected);
}

/// Loads the probe's raw_tp program for BPF_PROG_TEST_RUN: its object, name and fd (valid
/// while the object lives).
fn load_raw_tp(probe: &ProbeSpec, btf: Option<&Btf>) -> (Ebpf, &'static str, i32) {
    let attempt = probe
        .attempts
        .iter()
        .find(|a| a.hook == Hook::RawTp)
        .unwrap();
    let mut ebpf = EbpfLoader::new().btf(btf).load(probe.object).unwrap();
    let program = ebpf.program_mut(attempt.program).unwrap();
    load_program(program, attempt, btf).unwrap();
    let fd = program.fd().unwrap().as_fd().as_raw_fd();
    (ebpf, attempt.program, fd)
}

/// Loads the namer of the probe's raw_tp attempt into its object: its fd, as above.
fn load_namer(ebpf: &mut Ebpf, probe: &ProbeSpec, btf: &Btf) -> i32 {
    let namer = probe
        .attempts
        .iter()
        .find(|a| a.hook == Hook::RawTp)
        .and_then(|a| a.namer)
        .unwrap();
    let program = ebpf.program_mut(namer.program).unwrap();
    load_program(program, namer, Some(btf)).unwrap();
    program.fd().unwrap().as_fd().as_raw_fd()
}

/// BPF_PROG_TEST_RUN of a raw_tp program with the given tracepoint arguments.
fn test_run_raw_tp(prog_fd: i32, args: &[u64]) {
    // union bpf_attr, the `test` member: prog_fd at 0, ctx_size_in at 40, ctx_in at 48.
    let mut attr = [0u8; 80];
    attr[0..4].copy_from_slice(&(prog_fd as u32).to_ne_bytes());
    attr[40..44].copy_from_slice(&(std::mem::size_of_val(args) as u32).to_ne_bytes());
    attr[48..56].copy_from_slice(&(args.as_ptr() as u64).to_ne_bytes());
    const BPF_PROG_TEST_RUN: libc::c_long = 10;
    // SAFETY: attr is a valid bpf_attr prefix of the given size; args and the memory it
    // points to outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            attr.as_mut_ptr(),
            attr.len(),
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

fn load_only(probe: &ProbeSpec, attempt: &Attempt, btf: Option<&Btf>) -> Result<(), String> {
    let mut ebpf = EbpfLoader::new()
        .btf(btf)
        .load(probe.object)
        .map_err(|err| one_line(&err))?;
    let program = ebpf.program_mut(attempt.program).ok_or("missing")?;
    load_program(program, attempt, btf).map_err(|err| one_line(&*err))
}

/// The vfio holder probe's fork program, run by BPF_PROG_TEST_RUN from this process with
/// made-up `sched_process_fork(parent, child)` arguments (the child a stand-in `struct
/// task_struct` whose every 4-byte slot is its tgid, wherever this kernel keeps it): a child
/// of a recorded process is recorded with the time of the fork, a child of another process
/// or a thread of the parent is not, nor a child that cannot be read. Read back through the
/// set the `pci` collector gets, whose seed keeps a time the kernel side wrote.
#[test]
fn fork_program_records_the_children_of_recorded_processes() {
    if !crate::collectors::ebpf::tests::running_as_root(
        "fork_program_records_the_children_of_recorded_processes",
    ) {
        return;
    }
    let btf = kernel_btf().unwrap();
    let fork = vfio_holders::SPEC.attempts[0]
        .companions
        .iter()
        .find(|a| a.hook == Hook::RawTp)
        .unwrap();
    let mut ebpf = EbpfLoader::new()
        .btf(Some(&btf))
        .load(vfio_holders::SPEC.object)
        .unwrap();
    let program = ebpf.program_mut(fork.program).unwrap();
    load_program(program, fork, Some(&btf)).unwrap();
    let fd = program.fd().unwrap().as_fd().as_raw_fd();
    let set = Maps::of(&ebpf)
        .candidate_set("vfio_candidates", vfio_holders::SPEC.lost_map)
        .unwrap();
    let task = |tgid: u32| vec![tgid; 4096];
    let (stranger, own) = (task(4242), task(std::process::id()));
    let run = |child: &[u32]| test_run_raw_tp(fd, &[0, child.as_ptr() as u64]);

    run(&stranger);
    assert_eq!(set.entries().unwrap(), [], "this process is not recorded");
    set.seed(std::process::id()).unwrap();
    run(&stranger);
    run(&own);
    test_run_raw_tp(fd, &[0, 0]);
    let mut entries = set.entries().unwrap();
    entries.sort();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0].0, 4242);
    assert!(entries[0].1 > 0, "the fork's time");
    assert_eq!(entries[1], (std::process::id(), 0));
    set.seed(4242).unwrap();
    assert_eq!(
        set.entries().unwrap().iter().find(|e| e.0 == 4242),
        Some(&entries[0])
    );
    set.remove(4242).unwrap();
    set.remove(4242).unwrap();
    assert_eq!(set.entries().unwrap(), [(std::process::id(), 0)]);
    assert_eq!(set.dropped().unwrap(), 0);
}
