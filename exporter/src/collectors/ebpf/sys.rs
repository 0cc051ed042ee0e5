//! The one place that talks to the kernel's BPF and perf interfaces (through aya and
//! perf-event2): loading the embedded objects, attaching, and reading maps and run-time
//! statistics. Everything above it works on plain values.

use std::collections::BTreeMap;
use std::error::Error;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aya::maps::{HashMap as BpfHashMap, MapData, MapError, PerCpuArray, RingBuf};
use aya::programs::{
    BtfTracePoint, FEntry, FExit, KProbe, Program, ProgramError, RawTracePoint, TracePoint,
};
use aya::util::KernelVersion;
use aya::{Btf, Ebpf, EbpfLoader};
use perf_event::events::Tracepoint as PerfTracepoint;
use perf_event::Counter;
use rustix::event::{PollFd, PollFlags};

use super::kernel_log::{self, KernelLogCounts};
use super::probes::{attempts, Attempt, Hook, Kernel, Probe};
use crate::sync::lock;
use crate::sysfs::{AttributeReader, SysDir};

/// The compiled probes (ebpf/*.bpf.o, rebuilt by ebpf/build.sh), aligned for the ELF parser.
fn object(probe: Probe) -> &'static [u8] {
    match probe {
        Probe::ModuleLoad => aya::include_bytes_aligned!("../../../../ebpf/module_load.bpf.o"),
        Probe::ModuleSigCheck => {
            aya::include_bytes_aligned!("../../../../ebpf/module_sig_check.bpf.o")
        }
        Probe::ModuleLoadSyscall => {
            aya::include_bytes_aligned!("../../../../ebpf/module_load_syscall.bpf.o")
        }
        Probe::KernelLog => aya::include_bytes_aligned!("../../../../ebpf/kernel_log.bpf.o"),
        Probe::IommuFault => aya::include_bytes_aligned!("../../../../ebpf/iommu_fault.bpf.o"),
        Probe::DmarFault => aya::include_bytes_aligned!("../../../../ebpf/dmar_fault.bpf.o"),
        Probe::VfioEnable | Probe::VfioAer | Probe::VfioPin => {
            aya::include_bytes_aligned!("../../../../ebpf/vfio.bpf.o")
        }
    }
}

/// How long the kernel log drain waits before it looks again when poll(2) itself fails (it
/// cannot, short of memory): the ring buffer holds about a thousand lines.
const RING_POLL_RETRY: Duration = Duration::from_millis(500);

/// An attached probe's kernel side, kept alive for the life of the exporter.
pub enum Attachment {
    /// A loaded object with one attached program (its links live in `ebpf`), and its
    /// attempt's namer where that attached too.
    Bpf {
        ebpf: Mutex<Ebpf>,
        program: &'static str,
        /// Why the attempt's namer is not attached (its events count as `module="unknown"`).
        unnamed: Option<String>,
    },
    /// One counting perf event per online CPU on a tracepoint.
    Perf(Mutex<Vec<Counter>>),
    /// A thread reading /dev/kmsg into the kernel log counts.
    Kmsg,
}

/// The running kernel, reached through aya and perf-event2, for the probes' start.
pub struct AyaKernel<'a> {
    btf: Option<&'a Btf>,
    /// One loader for every object: each `EbpfLoader::new` parses the kernel's BTF again.
    loader: Mutex<EbpfLoader<'a>>,
    kernel_log: Arc<KernelLogCounts>,
}

/// A loader with no BTF of its own, made before the caller parses the BTF it will use: making
/// a loader parses the kernel's BTF (several MiB of heap), and two copies at once were the
/// process's peak RSS.
pub fn bare_loader<'a>() -> EbpfLoader<'a> {
    let mut loader = EbpfLoader::new();
    loader.btf(None);
    loader
}

impl<'a> AyaKernel<'a> {
    pub fn new(
        mut loader: EbpfLoader<'a>,
        btf: Option<&'a Btf>,
        kernel_log: Arc<KernelLogCounts>,
    ) -> AyaKernel<'a> {
        loader.btf(btf);
        AyaKernel {
            btf,
            loader: Mutex::new(loader),
            kernel_log,
        }
    }

    /// Loads the attempt's object and program without attaching it ([`attach_loaded`] does):
    /// a probe into a module that is not loaded yet stays loaded, to be attached by [`reattach`]
    /// when the module loads, without parsing the kernel's BTF again (the object's CO-RE
    /// relocations are done here).
    pub fn load_unattached(&self, probe: Probe, attempt: &Attempt) -> Result<Attachment, String> {
        Ok(Attachment::Bpf {
            ebpf: Mutex::new(self.load_object_and_program(probe, attempt)?),
            program: attempt.program,
            unnamed: None,
        })
    }

    fn load_object_and_program(&self, probe: Probe, attempt: &Attempt) -> Result<Ebpf, String> {
        let loaded = lock(&self.loader).load(object(probe));
        let mut ebpf =
            loaded.map_err(|err| format!("loading the object: {}", creation_failure(&err)))?;
        let program = program_of(&mut ebpf, attempt.program)?;
        load_program(program, attempt, self.btf).map_err(|err| creation_failure(&*err))?;
        Ok(ebpf)
    }

    /// Loads and attaches the namer of an attached attempt, in the same object (its maps are
    /// the ones the attempt's program reads).
    fn attach_namer(&self, ebpf: &mut Ebpf, namer: &Attempt) -> Result<(), String> {
        if self.btf.is_none() {
            return Err("module names need kernel BTF".into());
        }
        let program = program_of(ebpf, namer.program)?;
        load_program(program, namer, self.btf)
            .and_then(|()| attach_program(program, namer))
            .map_err(|err| format!("{}: {}", namer.program, creation_failure(&*err)))
    }

    fn attach_bpf(&self, probe: Probe, attempt: &Attempt) -> Result<Attachment, String> {
        let mut ebpf = self.load_object_and_program(probe, attempt)?;
        attach_program(program_of(&mut ebpf, attempt.program)?, attempt)
            .map_err(|err| one_line(&*err))?;
        let unnamed = attempt
            .namer
            .and_then(|namer| self.attach_namer(&mut ebpf, namer).err());
        if probe == Probe::KernelLog {
            let ring = ebpf
                .take_map("kernel_log_lines")
                .ok_or("kernel_log_lines missing from the object")?;
            let ring = RingBuf::try_from(ring).map_err(|err| one_line(&err))?;
            spawn("hpcnode-kernel-log", {
                let counts = self.kernel_log.clone();
                move || drain_ring(ring, &counts)
            })?;
        }
        Ok(Attachment::Bpf {
            ebpf: Mutex::new(ebpf),
            program: attempt.program,
            unnamed,
        })
    }
}

impl Kernel for AyaKernel<'_> {
    type Attachment = Attachment;

    fn attach(&mut self, probe: Probe, attempt: &Attempt) -> Result<Attachment, String> {
        let attachment = match attempt.hook {
            Hook::Perf => count_with_perf(attempt.targets),
            Hook::Kmsg => {
                let kmsg =
                    kernel_log::open_kmsg().map_err(|err| format!("opening /dev/kmsg: {err}"))?;
                let counts = self.kernel_log.clone();
                spawn("hpcnode-kmsg", move || {
                    kernel_log::follow_kmsg(kmsg, counts)
                })?;
                Ok(Attachment::Kmsg)
            }
            _ => self.attach_bpf(probe, attempt),
        }?;
        if probe == Probe::KernelLog {
            // New records are counted from here on; the ones the log held before are read apart.
            kernel_log::read_before_start(self.kernel_log.clone());
        }
        Ok(attachment)
    }
}

fn program_of<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Program, String> {
    ebpf.program_mut(name)
        .ok_or_else(|| format!("program {name} missing from the object"))
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .map(drop)
        .map_err(|err| format!("starting a thread: {err}"))
}

/// Loads (verifies) the attempt's program for its hook.
fn load_program(
    program: &mut Program,
    attempt: &Attempt,
    btf: Option<&Btf>,
) -> Result<(), Box<dyn Error>> {
    let target = attempt.targets.first().copied().unwrap_or_default();
    let btf = || btf.ok_or("no kernel BTF");
    match attempt.hook {
        Hook::TpBtf => <&mut BtfTracePoint>::try_from(program)?.load(target, btf()?)?,
        Hook::Fentry => <&mut FEntry>::try_from(program)?.load(target, btf()?)?,
        Hook::Fexit => <&mut FExit>::try_from(program)?.load(target, btf()?)?,
        Hook::RawTp => <&mut RawTracePoint>::try_from(program)?.load()?,
        Hook::Tracepoint => <&mut TracePoint>::try_from(program)?.load()?,
        Hook::Kprobe | Hook::Kretprobe => <&mut KProbe>::try_from(program)?.load()?,
        Hook::Perf | Hook::Kmsg => return Err("not a BPF hook".into()),
    }
    Ok(())
}

/// Attaches a loaded program to the attempt's targets; the links live as long as the program.
fn attach_program(program: &mut Program, attempt: &Attempt) -> Result<(), Box<dyn Error>> {
    let target = attempt.targets.first().copied().unwrap_or_default();
    match attempt.hook {
        Hook::TpBtf => {
            <&mut BtfTracePoint>::try_from(program)?.attach()?;
        }
        Hook::Fentry => {
            <&mut FEntry>::try_from(program)?.attach()?;
        }
        Hook::Fexit => {
            <&mut FExit>::try_from(program)?.attach()?;
        }
        Hook::RawTp => {
            <&mut RawTracePoint>::try_from(program)?.attach(target)?;
        }
        Hook::Kprobe | Hook::Kretprobe => {
            <&mut KProbe>::try_from(program)?.attach(target, 0)?;
        }
        Hook::Tracepoint => {
            let program = <&mut TracePoint>::try_from(program)?;
            for target in attempt.targets {
                let (category, name) = target.split_once('/').ok_or("bad tracepoint name")?;
                program.attach(category, name)?;
            }
        }
        Hook::Perf | Hook::Kmsg => return Err("not a BPF hook".into()),
    }
    Ok(())
}

/// Attaches the program of an attachment from [`AyaKernel::load_unattached`] to the attempt's
/// targets.
pub fn attach_loaded(attachment: &Attachment, attempt: &Attempt) -> Result<(), String> {
    let Attachment::Bpf { ebpf, program, .. } = attachment else {
        return Err("not a BPF program".into());
    };
    let mut ebpf = lock(ebpf);
    attach_program(program_of(&mut ebpf, program)?, attempt).map_err(|err| one_line(&*err))
}

/// Detaches a probe into a module that unloaded: its kprobe links go with its program, its maps
/// (the counts so far) stay for [`reattach`].
pub fn detach(attachment: &Attachment) -> Result<(), String> {
    let Attachment::Bpf { ebpf, program, .. } = attachment else {
        return Err("not a BPF program".into());
    };
    let mut ebpf = lock(ebpf);
    unload_kprobe(program_of(&mut ebpf, program)?)
}

/// Attaches a probe into a module again after the module (re)loaded, with the same maps so its
/// counts go on: the program is loaded anew (the old one's kprobe died with the old module
/// text) and attached to the first of the probe's targets for `hook` that exists.
pub fn reattach(probe: Probe, hook: Hook, attachment: &Attachment) -> Result<(), String> {
    let Attachment::Bpf { ebpf, program, .. } = attachment else {
        return Err("not a BPF program".into());
    };
    let mut ebpf = lock(ebpf);
    let program = program_of(&mut ebpf, program)?;
    let mut failures = Vec::new();
    for attempt in attempts(probe).iter().filter(|a| a.hook == hook) {
        unload_kprobe(program)?;
        // The object's CO-RE relocations were done at its first load: no BTF needed here.
        match load_program(program, attempt, None).and_then(|()| attach_program(program, attempt)) {
            Ok(()) => return Ok(()),
            Err(err) => failures.push(format!(
                "{}({}): {}",
                hook.name(),
                attempt.targets.first().copied().unwrap_or_default(),
                creation_failure(&*err)
            )),
        }
    }
    Err(failures.join("; "))
}

fn unload_kprobe(program: &mut Program) -> Result<(), String> {
    let kprobe = <&mut KProbe>::try_from(program).map_err(|err| one_line(&err))?;
    match kprobe.unload() {
        Ok(()) | Err(ProgramError::NotLoaded) => Ok(()),
        Err(err) => Err(one_line(&err)),
    }
}

/// An error and its causes on one line, whitespace (the verifier log's newlines) collapsed,
/// cut to its last 300 bytes, where the verifier says why it refused.
fn one_line(err: &dyn Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        // Some errors already print their cause; say it once.
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut line = words.join(" ");
    const MAX: usize = 300;
    if line.len() > MAX {
        let cut = line.len() - MAX;
        let cut = (cut..line.len())
            .find(|&i| line.is_char_boundary(i))
            .unwrap_or(0);
        line = format!("...{}", &line[cut..]);
    }
    line
}

/// An error from loading an object or a program on one line, and where the kernel refused to
/// create a map or program for the memlock limit, that limit named.
fn creation_failure(err: &(dyn Error + 'static)) -> String {
    BpfMemoryCharge::now().explain(err)
}

/// Where the running kernel charges the memory of BPF maps and programs. Before 5.11 it is the
/// user's RLIMIT_MEMLOCK (memcg accounting replaced it), and a creation past it fails with
/// EPERM. aya then raises the limit to infinity once, as libbpf (`bump_rlimit_memlock`) and
/// cilium/ebpf (`rlimit.RemoveMemlock`) do; a limit still finite means that raise failed (no
/// CAP_SYS_RESOURCE, a finite hard limit), and the operator has to raise it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BpfMemoryCharge {
    /// BPF memory is charged to RLIMIT_MEMLOCK (before 5.11).
    to_memlock: bool,
    /// The soft RLIMIT_MEMLOCK in bytes; `None`: unlimited.
    memlock_limit: Option<u64>,
}

/// The release whose BPF memory goes to the memory cgroup instead of RLIMIT_MEMLOCK.
const MEMCG_ACCOUNTING_SINCE: KernelVersion = KernelVersion::new(5, 11, 0);

impl BpfMemoryCharge {
    fn now() -> BpfMemoryCharge {
        BpfMemoryCharge {
            // As aya decides whether to raise the limit: an unknown release counts as older.
            to_memlock: KernelVersion::current().map_or(true, |v| v < MEMCG_ACCOUNTING_SINCE),
            memlock_limit: rustix::process::getrlimit(rustix::process::Resource::Memlock).current,
        }
    }

    /// `err` on one line, with the memlock limit named where it is the likely cause: the
    /// kernel refused a map or program with EPERM while it charges them to a finite limit.
    fn explain(self, err: &(dyn Error + 'static)) -> String {
        let line = one_line(err);
        match self.memlock_limit.filter(|_| self.to_memlock) {
            // Before the error, which for a program ends with the verifier's output.
            Some(limit) if refused_creation(err) => format!(
                "EPERM: BPF memory is charged to RLIMIT_MEMLOCK ({}) on kernels before 5.11 and raising it failed; raise it (the unit sets LimitMEMLOCK=infinity): {line}",
                Bytes(limit)
            ),
            _ => line,
        }
    }
}

/// Whether `err`, or one of its causes, is the kernel refusing to create a map or load a
/// program with EPERM (not an attach, nor the verifier's EACCES).
fn refused_creation(err: &(dyn Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(err) = next {
        let io_error = match (err.downcast_ref(), err.downcast_ref()) {
            (Some(MapError::CreateError { io_error, .. }), _) => Some(io_error),
            (_, Some(ProgramError::LoadError { io_error, .. })) => Some(io_error),
            _ => None,
        };
        if io_error.is_some_and(|io_error| io_error.raw_os_error() == Some(libc::EPERM)) {
            return true;
        }
        next = err.source();
    }
    false
}

/// A size in bytes, KiB or MiB, rounded down (`ulimit -l` counts KiB).
struct Bytes(u64);

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            bytes if bytes < 1 << 10 => write!(f, "{bytes} bytes"),
            bytes if bytes < 1 << 20 => write!(f, "{} KiB", bytes >> 10),
            bytes => write!(f, "{} MiB", bytes >> 20),
        }
    }
}

/// Drains the kernel log ring buffer each time the kernel reports records in it: between
/// lines the thread sleeps in poll(2), so a quiet node never wakes it.
fn drain_ring(mut ring: RingBuf<MapData>, counts: &KernelLogCounts) {
    loop {
        while let Some(record) = ring.next() {
            if let Some(text) = kernel_log::ring_record_text(&record) {
                counts.count_line(&text);
            }
        }
        let mut ready = [PollFd::new(&ring, PollFlags::IN)];
        match rustix::event::poll(&mut ready, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => std::thread::sleep(RING_POLL_RETRY),
        }
    }
}

fn count_with_perf(targets: &[&str]) -> Result<Attachment, String> {
    let target = targets.first().copied().unwrap_or_default();
    let id = tracepoint_id(target)?;
    let cpus = aya::util::online_cpus().map_err(|(path, err)| format!("reading {path}: {err}"))?;
    let counters = cpus
        .into_iter()
        .map(|cpu| {
            let mut counter = perf_event::Builder::new(PerfTracepoint::with_id(id))
                .one_cpu(cpu as usize)
                .any_pid()
                .include_kernel()
                .build()?;
            counter.enable()?;
            Ok(counter)
        })
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|err| format!("perf_event_open: {err}"))?;
    Ok(Attachment::Perf(Mutex::new(counters)))
}

/// A tracepoint's id from tracefs (`events/<category>/<name>/id`).
fn tracepoint_id(target: &str) -> Result<u64, String> {
    let tracefs = tracefs_dir().ok_or("tracefs not mounted")?;
    let events = SysDir::open(Path::new(tracefs), "events").map_err(|e| e.to_string())?;
    events
        .read_u64(&format!("{target}/id"), &mut AttributeReader::default())
        .map_err(|e| e.to_string())
}

const TRACEFS_DIRS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

fn tracefs_dir() -> Option<&'static str> {
    TRACEFS_DIRS
        .into_iter()
        .find(|dir| Path::new(dir).join("events").is_dir())
}

/// Makes tracefs available (the classic tracepoint hooks need it) unless it is mounted
/// already: tracefs at /sys/kernel/tracing, else debugfs at /sys/kernel/debug, whose
/// `tracing` directory is where kernels before 4.1 keep it. Returns what this call mounted.
pub fn ensure_tracefs() -> Result<Option<&'static str>, String> {
    if tracefs_dir().is_some() {
        return Ok(None);
    }
    let mounts = [
        (
            c"tracefs",
            c"/sys/kernel/tracing",
            "tracefs at /sys/kernel/tracing",
        ),
        (
            c"debugfs",
            c"/sys/kernel/debug",
            "debugfs at /sys/kernel/debug",
        ),
    ];
    let mut failures = Vec::new();
    for (fstype, target, what) in mounts {
        // SAFETY: constant NUL-terminated strings and no mount data.
        let rc = unsafe {
            libc::mount(
                fstype.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            failures.push(format!(
                "mounting {what}: {}",
                std::io::Error::last_os_error()
            ));
        } else if tracefs_dir().is_some() {
            return Ok(Some(what));
        }
    }
    failures.push("no tracing directory".into());
    Err(failures.join("; "))
}

/// The kernel's BTF, or why it is not available.
pub fn kernel_btf() -> Result<Btf, String> {
    Btf::from_sys_fs().map_err(|err| one_line(&err))
}

/// BTF from a file (`--collector.ebpf.btf-path`), or why it cannot be used.
pub fn btf_file(path: &Path) -> Result<Btf, String> {
    Btf::parse_file(path, aya::Endianness::default()).map_err(|err| {
        format!(
            "--collector.ebpf.btf-path {}: {}",
            path.display(),
            one_line(&err)
        )
    })
}

/// Gives back to the system the heap that parsing the kernel's BTF (several MiB) used at
/// startup; without it the freed pages stay in the process's RSS for good.
pub fn release_startup_memory() {
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe { libc::malloc_trim(0) };
}

/// Turns on the kernel's BPF run-time statistics for as long as the returned fd is held
/// (BPF_ENABLE_STATS, 5.8+).
pub fn enable_run_time_stats() -> Result<OwnedFd, String> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|err| one_line(&err))
}

/// A BPF program's run count and total run time (zero while statistics are off).
pub fn run_stats(attachment: &Attachment) -> Option<Result<(u64, Duration), String>> {
    let Attachment::Bpf { ebpf, program, .. } = attachment else {
        return None;
    };
    let ebpf = lock(ebpf);
    let info = ebpf
        .program(program)
        .ok_or_else(|| format!("program {program} gone"))
        .and_then(|p| p.info().map_err(|err| one_line(&err)));
    Some(info.map(|info| (info.run_count(), info.run_time())))
}

/// `(name, taint mask, count)` per module load key, and the loads dropped on a full map.
#[repr(C)]
#[derive(Clone, Copy)]
struct ModuleLoadKey {
    name: [u8; 56],
    taints: u32,
}
// SAFETY: plain integers and bytes, no padding (56 + 4 bytes, 4-byte aligned).
unsafe impl aya::Pod for ModuleLoadKey {}

/// `struct load_failure_key` of module_load_syscall.bpf.c.
#[repr(C)]
#[derive(Clone, Copy)]
struct LoadFailureKey {
    syscall_nr: u32,
    errno: i32,
    module: [u8; 56],
}
// SAFETY: two 32-bit integers and bytes, no padding (4 + 4 + 56 bytes, 4-byte aligned).
unsafe impl aya::Pod for LoadFailureKey {}

/// `struct signature_key` of module_sig_check.bpf.c.
#[repr(C)]
#[derive(Clone, Copy)]
struct SignatureKey {
    ret: i32,
    module: [u8; 56],
}
// SAFETY: a 32-bit integer and bytes, no padding (4 + 56 bytes, 4-byte aligned).
unsafe impl aya::Pod for SignatureKey {}

/// `struct device_event_key` of ebpf/include/device_name.h.
#[repr(C)]
#[derive(Clone, Copy)]
struct DeviceEventKey {
    device: [u8; 48],
    detail: u32,
}
// SAFETY: bytes and a 32-bit integer, no padding (48 + 4 bytes, 4-byte aligned).
unsafe impl aya::Pod for DeviceEventKey {}

/// The text before the first NUL of a fixed-size name the kernel side filled.
fn c_name(bytes: &[u8]) -> String {
    let len = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..len]).into_owned()
}

/// What one probe's maps hold, as plain values.
#[derive(Debug, Default, PartialEq)]
pub struct ProbeCounts {
    /// module_load: (module name, taint mask) -> loads.
    pub module_loads: Vec<(String, u32, u64)>,
    /// module_sig_check: (return value, module name in the image) -> count; the name is empty
    /// where none was found.
    pub signature_returns: BTreeMap<(i32, String), u64>,
    /// module_load_syscall: (syscall number, errno, module: the file name for finit_module, the
    /// name in the image for init_module, empty where none was found) -> failures.
    pub load_failures: BTreeMap<(u32, i32, String), u64>,
    /// iommu_fault: (device name, write flag) and vfio_aer: (device name, channel state)
    /// -> events; the name is empty where the kernel passed no device.
    pub device_events: Vec<(String, u32, u64)>,
    /// dmar_fault: IOMMU sequence number (`dmar<N>`) -> fault interrupts.
    pub fault_interrupts: BTreeMap<i32, u64>,
    /// vfio_enable, vfio_pin: errno -> failed calls.
    pub failure_errnos: BTreeMap<i32, u64>,
    /// module_load counted by perf, which sees that a module loaded but not which one.
    pub unnamed_module_loads: u64,
    /// Events the kernel side could not record (a full map or ring buffer).
    pub dropped: u64,
}

/// Every (key, count) of a count hash of the kernel side.
fn read_keyed_counts<K: aya::Pod>(map: &aya::maps::Map) -> Result<Vec<(K, u64)>, String> {
    let err = |e: aya::maps::MapError| one_line(&e);
    let counts: BpfHashMap<_, K, u64> = BpfHashMap::try_from(map).map_err(err)?;
    counts.iter().map(|entry| entry.map_err(err)).collect()
}

/// An `i32 -> u64` count hash of the kernel side (return values, errnos, unit numbers).
fn read_i32_counts(map: &aya::maps::Map) -> Result<BTreeMap<i32, u64>, String> {
    Ok(read_keyed_counts(map)?.into_iter().collect())
}

/// Reads a probe's counters from its maps, or its perf counters.
pub fn read_counts(probe: Probe, attachment: &Attachment) -> Result<ProbeCounts, String> {
    let mut counts = ProbeCounts::default();
    match attachment {
        Attachment::Kmsg => {}
        Attachment::Perf(counters) => {
            let mut counters = lock(counters);
            let mut total = 0;
            for counter in counters.iter_mut() {
                total += counter
                    .read()
                    .map_err(|err| format!("reading perf counter: {err}"))?;
            }
            counts.unnamed_module_loads = total;
        }
        Attachment::Bpf { ebpf, .. } => {
            let ebpf = lock(ebpf);
            let map = |name: &str| ebpf.map(name).ok_or(format!("map {name} missing"));
            let err = |e: aya::maps::MapError| one_line(&e);
            let dropped_map = match probe {
                Probe::ModuleLoad => {
                    counts.module_loads = read_keyed_counts::<ModuleLoadKey>(map("module_loads")?)?
                        .into_iter()
                        .map(|(key, count)| (c_name(&key.name), key.taints, count))
                        .collect();
                    "module_loads_dropped"
                }
                Probe::ModuleSigCheck => {
                    counts.signature_returns =
                        read_keyed_counts::<SignatureKey>(map("signature_checks")?)?
                            .into_iter()
                            .map(|(key, count)| ((key.ret, c_name(&key.module)), count))
                            .collect();
                    "signature_checks_dropped"
                }
                Probe::ModuleLoadSyscall => {
                    counts.load_failures =
                        read_keyed_counts::<LoadFailureKey>(map("load_failures")?)?
                            .into_iter()
                            .map(|(key, count)| {
                                ((key.syscall_nr, key.errno, c_name(&key.module)), count)
                            })
                            .collect();
                    "load_failures_dropped"
                }
                Probe::KernelLog => "kernel_log_lost",
                Probe::IommuFault | Probe::VfioAer => {
                    let (events, dropped) = if probe == Probe::IommuFault {
                        ("iommu_faults", "iommu_faults_dropped")
                    } else {
                        ("vfio_aer_errors", "vfio_aer_errors_dropped")
                    };
                    counts.device_events = read_keyed_counts::<DeviceEventKey>(map(events)?)?
                        .into_iter()
                        .map(|(key, count)| (c_name(&key.device), key.detail, count))
                        .collect();
                    dropped
                }
                Probe::DmarFault => {
                    counts.fault_interrupts = read_i32_counts(map("fault_interrupts")?)?;
                    "fault_interrupts_dropped"
                }
                Probe::VfioEnable | Probe::VfioPin => {
                    counts.failure_errnos = read_i32_counts(map("vfio_failures")?)?;
                    "vfio_failures_dropped"
                }
            };
            let dropped: PerCpuArray<_, u64> =
                PerCpuArray::try_from(map(dropped_map)?).map_err(err)?;
            counts.dropped = dropped.get(&0, 0).map_err(err)?.iter().sum();
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, AsRawFd};

    /// Every BPF program the probes can use passes this kernel's verifier, including those
    /// whose hooks this kernel lacks (loading a raw_tp, tracepoint or kprobe program does not
    /// need its target; tp_btf and fexit programs do, and are loaded where it exists).
    #[test]
    fn every_program_passes_the_verifier_here() {
        if !crate::collectors::ebpf::tests::running_as_root(
            "every_program_passes_the_verifier_here",
        ) {
            return;
        }
        let btf = kernel_btf().ok();
        let mut loaded = 0;
        for probe in Probe::ALL {
            for attempt in attempts(probe)
                .iter()
                .flat_map(|a| [Some(a), a.namer])
                .flatten()
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
                result.unwrap_or_else(|err| panic!("{}/{}: {err}", probe.name(), attempt.program));
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
        let (mut ebpf, program, exit_fd) = load_raw_tp(Probe::ModuleLoadSyscall, Some(&btf));
        let enter_fd = load_namer(&mut ebpf, Probe::ModuleLoadSyscall, &btf);
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/modules_signed_files/lib/modules/6.12.117+deb12-amd64/extra/lab_unsigned.ko"
        );
        let image = std::fs::read(path).unwrap();
        let file = std::fs::File::open(path).unwrap();
        let not_elf =
            written(b"not an ELF image, but long enough to hold an ELF header of 64 bytes");
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
        let counts = read_counts(Probe::ModuleLoadSyscall, &attachment).unwrap();
        let expected = BTreeMap::from([
            ((init as u32, 8, String::new()), 1),
            ((init as u32, 22, String::new()), 1),
            ((init as u32, 129, "pcspkr".to_string()), 1),
            ((finit as u32, 1, String::new()), 1),
            ((finit as u32, 129, "lab_unsigned.ko".to_string()), 1),
        ]);
        assert_eq!(counts.load_failures, expected);
        assert_eq!(counts.dropped, 0);
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
        let (mut ebpf, _, fd) = load_raw_tp(Probe::KernelLog, None);
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
        let (ebpf, program, fd) = load_raw_tp(Probe::IommuFault, Some(&btf));
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
        let mut counts = read_counts(Probe::IommuFault, &attachment).unwrap();
        counts.device_events.sort();
        assert_eq!(
            counts.device_events,
            [
                (String::new(), 0, 1),
                ("0000:3b:00.0".to_string(), 0, 1),
                ("0000:3b:00.0".to_string(), 1, 2),
            ]
        );
        assert_eq!(counts.dropped, 0);
    }

    /// The perf fallback (module loads where BPF is refused) counts a tracepoint on every CPU;
    /// here on printk:console, which this kernel has, with lines written to /dev/kmsg.
    #[test]
    fn perf_counts_a_tracepoint_on_every_cpu() {
        if !crate::collectors::ebpf::tests::running_as_root("perf_counts_a_tracepoint_on_every_cpu")
        {
            return;
        }
        ensure_tracefs().unwrap();
        let attachment = count_with_perf(&["printk/console"]).unwrap();
        let read = || {
            read_counts(Probe::ModuleLoad, &attachment)
                .unwrap()
                .unnamed_module_loads
        };
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
        let program_line = "the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1). Verifier output:";
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
    fn load_raw_tp(probe: Probe, btf: Option<&Btf>) -> (Ebpf, &'static str, i32) {
        let attempt = attempts(probe)
            .iter()
            .find(|a| a.hook == Hook::RawTp)
            .unwrap();
        let mut ebpf = EbpfLoader::new().btf(btf).load(object(probe)).unwrap();
        let program = ebpf.program_mut(attempt.program).unwrap();
        load_program(program, attempt, btf).unwrap();
        let fd = program.fd().unwrap().as_fd().as_raw_fd();
        (ebpf, attempt.program, fd)
    }

    /// Loads the namer of the probe's raw_tp attempt into its object: its fd, as above.
    fn load_namer(ebpf: &mut Ebpf, probe: Probe, btf: &Btf) -> i32 {
        let namer = attempts(probe)
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

    fn load_only(probe: Probe, attempt: &Attempt, btf: Option<&Btf>) -> Result<(), String> {
        let mut ebpf = EbpfLoader::new()
            .btf(btf)
            .load(object(probe))
            .map_err(|err| one_line(&err))?;
        let program = ebpf.program_mut(attempt.program).ok_or("missing")?;
        load_program(program, attempt, btf).map_err(|err| one_line(&*err))
    }
}
