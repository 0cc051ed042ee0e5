//! The loader, with `maps.rs` the only code that talks to the kernel's BPF and perf interfaces
//! (through aya and perf-event2): loading the objects a spec embeds, attaching, and reading
//! lost-event counts and run-time statistics. It sits above the specs (it takes a
//! [`ProbeSpec`]); each spec decodes its own map keys through [`Maps`], below them.

use std::error::Error;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use aya::maps::{MapError, PerCpuArray};
use aya::programs::{
    BtfTracePoint, FEntry, FExit, KProbe, Program, ProgramError, RawTracePoint, TracePoint,
};
use aya::util::KernelVersion;
use aya::{Btf, Ebpf, EbpfLoader};
use perf_event::Counter;

use super::error::{one_line, refused, SyscallError};
use super::hook_choice::Kernel;
use super::hooks::{Attempt, Hook};
use super::maps::{Attached, Maps};
use super::spec::{ProbeSpec, Shared};
use crate::sync::lock;
use perf::count_with_perf;
pub use perf::ensure_tracefs;

mod perf;

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
    shared: &'a Shared,
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
        shared: &'a Shared,
    ) -> AyaKernel<'a> {
        loader.btf(btf);
        AyaKernel {
            btf,
            loader: Mutex::new(loader),
            shared,
        }
    }

    /// Loads the attempt's object and program without attaching it ([`attach_loaded`] does):
    /// a probe into a module that is not loaded yet stays loaded, to be attached by [`reattach`]
    /// when the module loads, without parsing the kernel's BTF again (the object's CO-RE
    /// relocations are done here).
    pub fn load_unattached(
        &self,
        probe: &ProbeSpec,
        attempt: &Attempt,
    ) -> Result<Attachment, SyscallError> {
        Ok(Attachment::Bpf {
            ebpf: Mutex::new(self.load_object_and_program(probe, attempt)?),
            program: attempt.program,
            unnamed: None,
        })
    }

    fn load_object_and_program(
        &self,
        probe: &ProbeSpec,
        attempt: &Attempt,
    ) -> Result<Ebpf, SyscallError> {
        let loaded = lock(&self.loader).load(probe.object);
        let mut ebpf = loaded.map_err(|err| SyscallError::LoadObject(creation_failure(&err)))?;
        let program = program_of(&mut ebpf, attempt.program)?;
        load_program(program, attempt, self.btf)
            .map_err(|err| SyscallError::Refused(creation_failure(&*err)))?;
        for companion in attempt.companions {
            let program = program_of(&mut ebpf, companion.program)?;
            load_program(program, companion, self.btf)
                .and_then(|()| attach_program(program, companion))
                .map_err(|err| {
                    SyscallError::Refused(format!(
                        "{}: {}",
                        companion.program,
                        creation_failure(&*err)
                    ))
                })?;
        }
        Ok(ebpf)
    }

    /// Loads and attaches the namer of an attached attempt, in the same object (its maps are
    /// the ones the attempt's program reads).
    fn attach_namer(&self, ebpf: &mut Ebpf, namer: &Attempt) -> Result<(), SyscallError> {
        if self.btf.is_none() {
            return Err(SyscallError::NamesNeedBtf);
        }
        let program = program_of(ebpf, namer.program)?;
        load_program(program, namer, self.btf)
            .and_then(|()| attach_program(program, namer))
            .map_err(|err| SyscallError::Namer {
                program: namer.program,
                reason: creation_failure(&*err),
            })
    }

    fn attach_bpf(&self, probe: &ProbeSpec, attempt: &Attempt) -> Result<Attachment, SyscallError> {
        let mut ebpf = self.load_object_and_program(probe, attempt)?;
        attach_program(program_of(&mut ebpf, attempt.program)?, attempt)
            .map_err(|err| refused(&*err))?;
        let unnamed = attempt
            .namer
            .and_then(|namer| self.attach_namer(&mut ebpf, namer).err())
            .map(|err| err.to_string());
        if let Some(started) = probe.started {
            started(Attached::Bpf(&mut ebpf), self.shared)?;
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
    type Error = SyscallError;

    /// A BPF hook's program is loaded and attached; perf counts the tracepoint; kmsg is all
    /// the probe's own ([`ProbeSpec::started`]).
    fn attach(
        &mut self,
        probe: &'static ProbeSpec,
        attempt: &Attempt,
    ) -> Result<Attachment, SyscallError> {
        let (attachment, attached) = match attempt.hook {
            Hook::Perf => (count_with_perf(attempt.targets)?, Attached::Perf),
            Hook::Kmsg => (Attachment::Kmsg, Attached::Kmsg),
            _ => return self.attach_bpf(probe, attempt),
        };
        if let Some(started) = probe.started {
            started(attached, self.shared)?;
        }
        Ok(attachment)
    }
}

fn program_of<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Program, SyscallError> {
    ebpf.program_mut(name)
        .ok_or_else(|| SyscallError::MissingProgram(name.to_string()))
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
            let kprobe = <&mut KProbe>::try_from(program)?;
            kprobe.attach(target, 0)?;
            for later in attempt.targets.iter().skip(1) {
                // Not in this kernel (or not in this build of its module).
                let _ = kprobe.attach(*later, 0);
            }
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
pub fn attach_loaded(attachment: &Attachment, attempt: &Attempt) -> Result<(), SyscallError> {
    let Attachment::Bpf { ebpf, program, .. } = attachment else {
        return Err(SyscallError::NotBpf);
    };
    let mut ebpf = lock(ebpf);
    attach_program(program_of(&mut ebpf, program)?, attempt).map_err(|err| refused(&*err))
}

/// Detaches a probe into a module that unloaded: its kprobe links go with its program, its maps
/// (the counts so far) stay for [`reattach`].
pub fn detach(attachment: &Attachment) -> Result<(), SyscallError> {
    let Attachment::Bpf { ebpf, program, .. } = attachment else {
        return Err(SyscallError::NotBpf);
    };
    let mut ebpf = lock(ebpf);
    unload_kprobe(program_of(&mut ebpf, program)?)
}

/// Attaches a probe into a module again after the module (re)loaded, with the same maps so its
/// counts go on: the program is loaded anew (the old one's kprobe died with the old module
/// text) and attached to the first of the probe's targets for `hook` that exists.
pub fn reattach(
    probe: &ProbeSpec,
    hook: Hook,
    attachment: &Attachment,
) -> Result<(), SyscallError> {
    let Attachment::Bpf { ebpf, program, .. } = attachment else {
        return Err(SyscallError::NotBpf);
    };
    let mut ebpf = lock(ebpf);
    let program = program_of(&mut ebpf, program)?;
    let mut failures = Vec::new();
    for attempt in probe.attempts.iter().filter(|a| a.hook == hook) {
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
    Err(SyscallError::Reattach(failures.join("; ")))
}

fn unload_kprobe(program: &mut Program) -> Result<(), SyscallError> {
    let kprobe = <&mut KProbe>::try_from(program).map_err(|err| refused(&err))?;
    match kprobe.unload() {
        Ok(()) | Err(ProgramError::NotLoaded) => Ok(()),
        Err(err) => Err(refused(&err)),
    }
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

/// The kernel's BTF, or why it is not available.
pub fn kernel_btf() -> Result<Btf, SyscallError> {
    Btf::from_sys_fs().map_err(|err| refused(&err))
}

/// BTF from a file (`--collector.ebpf.btf-path`), or why it cannot be used.
pub fn btf_file(path: &Path) -> Result<Btf, SyscallError> {
    Btf::parse_file(path, aya::Endianness::default()).map_err(|err| SyscallError::BtfFile {
        path: path.to_path_buf(),
        reason: one_line(&err),
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
pub fn enable_run_time_stats() -> Result<OwnedFd, SyscallError> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|err| refused(&err))
}

/// A BPF program's run count and total run time (zero while statistics are off).
pub fn run_stats(attachment: &Attachment) -> Option<Result<(u64, Duration), SyscallError>> {
    let Attachment::Bpf { ebpf, program, .. } = attachment else {
        return None;
    };
    let ebpf = lock(ebpf);
    let info = ebpf
        .program(program)
        .ok_or(SyscallError::ProgramGone(program))
        .and_then(|p| p.info().map_err(|err| refused(&err)));
    Some(info.map(|info| (info.run_count(), info.run_time())))
}

/// Calls `read` with a probe's maps and their lost-event count (`lost_map`), or its perf count.
pub fn with_maps<T>(
    attachment: &Attachment,
    lost_map: &str,
    read: impl FnOnce(&Maps<'_>) -> Result<T, SyscallError>,
) -> Result<T, SyscallError> {
    match attachment {
        Attachment::Kmsg => read(&Maps::counted(0)),
        Attachment::Perf(counters) => {
            let mut counters = lock(counters);
            let mut total = 0;
            for counter in counters.iter_mut() {
                total += counter.read().map_err(SyscallError::PerfRead)?;
            }
            read(&Maps::counted(total))
        }
        Attachment::Bpf { ebpf, .. } => {
            let ebpf = lock(ebpf);
            let mut maps = Maps::of(&ebpf);
            let lost = ebpf
                .map(lost_map)
                .ok_or(SyscallError::MissingMap(lost_map.into()))?;
            let lost: PerCpuArray<_, u64> = PerCpuArray::try_from(lost).map_err(|e| refused(&e))?;
            maps.dropped = lost.get(&0, 0).map_err(|e| refused(&e))?.iter().sum();
            read(&maps)
        }
    }
}

#[cfg(test)]
mod tests;
