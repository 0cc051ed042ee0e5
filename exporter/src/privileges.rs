//! Capabilities given up once the collectors have started. The systemd unit grants CAP_BPF,
//! CAP_PERFMON, CAP_DAC_READ_SEARCH and CAP_SYSLOG for the start only: loading and attaching
//! the probes (tracepoint ids under the root-only tracefs) and opening `/dev/kmsg` under
//! `kernel.dmesg_restrict`. What is open stays usable without them. One exception: kernels
//! before 5.19 refuse every `bpf()` call, reading a map included, to a caller without CAP_BPF
//! while `kernel.unprivileged_bpf_disabled` is set (5.19, "bpf: refine
//! kernel.unprivileged_bpf_disabled behaviour", left the check on map and program creation
//! only), so CAP_BPF stays there while the eBPF collector runs. Any other capability (an
//! admin's CAP_SYS_ADMIN for PCI config space, CAP_NET_BIND_SERVICE for a low port) is kept.
//!
//! Capabilities belong to threads, not processes: the calling thread drops its own, then every
//! other thread of the process is signalled to drop the same (as libcap's psx does), and
//! `/proc/self/task/*/status` says whether each did.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::kernel_version::major_minor;
use crate::logging::{self, Level};
use crate::metrics::{Desc, Samples, Value};
use crate::sync::{lock, wait_while};
use crate::sysfs::{AttributeReader, SysDir};

/// A set of capabilities as the kernel's 64-bit masks number them (`linux/capability.h`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapSet(u64);

pub const CAP_DAC_READ_SEARCH: u32 = 2;
pub const CAP_NET_ADMIN: u32 = 12;
pub const CAP_IPC_LOCK: u32 = 14;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_SYSLOG: u32 = 34;
pub const CAP_PERFMON: u32 = 38;
pub const CAP_BPF: u32 = 39;

/// Names as `capabilities(7)` writes them, by number, up to CAP_CHECKPOINT_RESTORE (40).
const NAMES: [&str; 41] = [
    "cap_chown",
    "cap_dac_override",
    "cap_dac_read_search",
    "cap_fowner",
    "cap_fsetid",
    "cap_kill",
    "cap_setgid",
    "cap_setuid",
    "cap_setpcap",
    "cap_linux_immutable",
    "cap_net_bind_service",
    "cap_net_broadcast",
    "cap_net_admin",
    "cap_net_raw",
    "cap_ipc_lock",
    "cap_ipc_owner",
    "cap_sys_module",
    "cap_sys_rawio",
    "cap_sys_chroot",
    "cap_sys_ptrace",
    "cap_sys_pacct",
    "cap_sys_admin",
    "cap_sys_boot",
    "cap_sys_nice",
    "cap_sys_resource",
    "cap_sys_time",
    "cap_sys_tty_config",
    "cap_mknod",
    "cap_lease",
    "cap_audit_write",
    "cap_audit_control",
    "cap_setfcap",
    "cap_mac_override",
    "cap_mac_admin",
    "cap_syslog",
    "cap_wake_alarm",
    "cap_block_suspend",
    "cap_audit_read",
    "cap_perfmon",
    "cap_bpf",
    "cap_checkpoint_restore",
];

impl CapSet {
    pub const EMPTY: CapSet = CapSet(0);

    pub const fn of(capabilities: &[u32]) -> CapSet {
        let mut mask = 0;
        let mut i = 0;
        while i < capabilities.len() {
            mask |= 1 << capabilities[i];
            i += 1;
        }
        CapSet(mask)
    }

    pub fn contains(self, capability: u32) -> bool {
        self.0 & (1 << capability) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn intersection(self, other: CapSet) -> CapSet {
        CapSet(self.0 & other.0)
    }

    pub fn without(self, other: CapSet) -> CapSet {
        CapSet(self.0 & !other.0)
    }

    /// A mask as `/proc/PID/status` prints it (`CapPrm:\t000000c000000000`).
    pub fn parse_hex(text: &str) -> Option<CapSet> {
        u64::from_str_radix(text.trim(), 16).ok().map(CapSet)
    }
}

/// `cap_bpf,cap_perfmon`, or `none`.
impl fmt::Display for CapSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<String> = (0..64)
            .filter(|&capability| self.contains(capability))
            .map(|capability| match NAMES.get(capability as usize) {
                Some(name) => (*name).to_string(),
                None => format!("cap_{capability}"),
            })
            .collect();
        f.write_str(&names.join(","))
    }
}

/// The capabilities the unit grants for the start only.
pub const START_ONLY: CapSet = CapSet::of(&[CAP_BPF, CAP_PERFMON, CAP_DAC_READ_SEARCH, CAP_SYSLOG]);

/// What the exporter still does after start that needs one of [`START_ONLY`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StillNeeded {
    /// Probe maps and program statistics are read with `bpf()` at every scrape, and the kernel
    /// checks CAP_BPF on every `bpf()` call.
    pub bpf_calls_need_cap_bpf: bool,
    /// The ebpf collector attaches its probes into modules (vfio) when their module loads,
    /// and again when it is reloaded: loading and attaching take CAP_BPF and CAP_PERFMON.
    pub attaches_after_start: bool,
}

impl StillNeeded {
    /// From the kernel's `sys/kernel/osrelease` and `sys/kernel/unprivileged_bpf_disabled`
    /// under `procfs`.
    pub fn read(procfs: &Path, ebpf_enabled: bool) -> StillNeeded {
        let sysctl = SysDir::open(procfs, "sys/kernel").ok();
        let mut reader = AttributeReader::default();
        let mut read = |name: &str| {
            sysctl
                .as_ref()
                .and_then(|dir| dir.read(name, &mut reader).ok().map(str::to_string))
        };
        let release = read("osrelease");
        let unprivileged_bpf_disabled = read("unprivileged_bpf_disabled");
        StillNeeded::for_kernel(
            ebpf_enabled,
            release.as_deref().and_then(major_minor),
            unprivileged_bpf_disabled.as_deref(),
            procfs.join("modules").exists(),
        )
    }

    /// From the running kernel: `release` as (major, minor), `unprivileged_bpf_disabled` as
    /// the sysctl reads (`0` lets anyone call `bpf()`; 1 and 2 refuse; unknown counts as set),
    /// `loadable_modules` whether it loads modules (`/proc/modules` exists).
    pub fn for_kernel(
        ebpf_enabled: bool,
        release: Option<(u32, u32)>,
        unprivileged_bpf_disabled: Option<&str>,
        loadable_modules: bool,
    ) -> StillNeeded {
        let checked_on_every_call = unprivileged_bpf_disabled != Some("0")
            && release.is_none_or(|release| release < (5, 19));
        StillNeeded {
            bpf_calls_need_cap_bpf: ebpf_enabled && checked_on_every_call,
            attaches_after_start: ebpf_enabled && loadable_modules,
        }
    }
}

/// Of the capabilities `held`, those to give up after start.
pub fn to_drop(held: CapSet, still_needed: StillNeeded) -> CapSet {
    let mut keep = CapSet::EMPTY;
    if still_needed.bpf_calls_need_cap_bpf {
        keep = CapSet::of(&[CAP_BPF]);
    }
    if still_needed.attaches_after_start {
        keep = CapSet::of(&[CAP_BPF, CAP_PERFMON]);
    }
    held.intersection(START_ONLY).without(keep)
}

/// A privilege a collector needs and did not get, said once at start with what it costs.
pub const PRIVILEGE_MISSING: Desc = Desc::gauge(
    "hpcnode_collector_privilege_missing",
    "A capability a collector needs and was not given at start (1), by collector and capability; the one log line at start says the feature it costs and the remedy.",
    None,
);

/// The privileges found missing at start, by collector: capabilities are the process's, so
/// the scraper exports them whichever collector found them.
static MISSING: Mutex<Vec<(&'static str, CapSet)>> = Mutex::new(Vec::new());

/// Says, in one line, that `collector` lacks `missing` and what it `costs` (`remedy` says how
/// to grant it), and exports it from then on. Said once per collector and set.
pub fn report_missing(collector: &'static str, missing: CapSet, remedy: &str, costs: &str) {
    report(Level::Warn, collector, missing, remedy, costs);
}

/// As [`report_missing`], at info level, for a privilege the unit withholds on purpose: every
/// packaged node lacks it, and only a site that grants it changes anything.
pub fn report_withheld(collector: &'static str, missing: CapSet, remedy: &str, costs: &str) {
    report(Level::Info, collector, missing, remedy, costs);
}

fn report(level: Level, collector: &'static str, missing: CapSet, remedy: &str, costs: &str) {
    let mut reported = lock(&MISSING);
    if reported.contains(&(collector, missing)) {
        return;
    }
    reported.push((collector, missing));
    logging::log(
        level,
        "a collector lacks a privilege and runs without what it costs",
        &[
            ("collector", collector),
            ("missing", &missing.to_string()),
            ("remedy", remedy),
            ("costs", costs),
        ],
    );
}

/// `hpcnode_collector_privilege_missing`, one series per collector and missing capability.
pub fn export_missing(samples: &mut Samples) {
    for (collector, missing) in lock(&MISSING).iter() {
        for capability in (0..64).filter(|&c| missing.contains(c)) {
            let name = CapSet::of(&[capability]).to_string();
            let labels = vec![
                ("collector", (*collector).into()),
                ("capability", name.into()),
            ];
            samples.push(&PRIVILEGE_MISSING, labels, Value::Int(1));
        }
    }
}

/// What loading and attaching tracing BPF programs takes and the calling thread lacks, with
/// the remedy: CAP_BPF and CAP_PERFMON on kernels that have them (5.8 and backports:
/// `sys/kernel/cap_last_cap` under `procfs` is 39 or more), CAP_SYS_ADMIN before (or instead).
/// `None` when nothing is missing or the thread's capabilities cannot be read.
pub fn bpf_tracing_missing(procfs: &Path) -> Option<(CapSet, &'static str)> {
    let held = sys::get().ok()?.effective;
    let last_cap = SysDir::open(procfs, "sys/kernel").ok().and_then(|dir| {
        dir.read_u64("cap_last_cap", &mut AttributeReader::default())
            .ok()
    });
    bpf_tracing_missing_from(held, last_cap)
}

fn bpf_tracing_missing_from(held: CapSet, last_cap: Option<u64>) -> Option<(CapSet, &'static str)> {
    let split = CapSet::of(&[CAP_BPF, CAP_PERFMON]);
    if held.contains(CAP_SYS_ADMIN) || held.intersection(split) == split {
        return None;
    }
    // A procfs that does not say is taken for a kernel since 5.8.
    if last_cap.is_some_and(|last| last < u64::from(CAP_BPF)) {
        let remedy =
            "this kernel has no CAP_BPF (sys/kernel/cap_last_cap < 39): grant CAP_SYS_ADMIN";
        Some((CapSet::of(&[CAP_SYS_ADMIN]), remedy))
    } else {
        let remedy = "grant CAP_BPF and CAP_PERFMON (kernel >= 5.8), or CAP_SYS_ADMIN";
        Some((split.without(held), remedy))
    }
}

/// CAP_SYSLOG, when `kernel.dmesg_restrict` (`sys/kernel/dmesg_restrict` under `procfs`) is
/// set and the calling thread lacks it: the kernel then refuses to open `/dev/kmsg`.
pub fn kmsg_missing(procfs: &Path) -> Option<(CapSet, &'static str)> {
    let held = sys::get().ok()?.effective;
    let restricted = SysDir::open(procfs, "sys/kernel")
        .ok()?
        .read_u64("dmesg_restrict", &mut AttributeReader::default())
        .ok()?;
    (restricted == 1 && !held.contains(CAP_SYSLOG)).then_some((
        CapSet::of(&[CAP_SYSLOG]),
        "kernel.dmesg_restrict is 1: grant CAP_SYSLOG, or set kernel.dmesg_restrict=0",
    ))
}

/// CAP_IPC_LOCK, when the calling thread lacks it and the soft RLIMIT_MEMLOCK is below the
/// `pinned` bytes the verbs probe registers: the kernel (`ib_umem_get`) then refuses every
/// `ibv_reg_mr`. The default limit is 64 KiB before Linux 5.16 (RHEL 8), 8 MiB since.
pub fn memlock_missing(pinned: u64) -> Option<(CapSet, String)> {
    let held = sys::get().ok()?.effective;
    let limit = rustix::process::getrlimit(rustix::process::Resource::Memlock).current;
    memlock_missing_from(held, limit, pinned)
}

fn memlock_missing_from(held: CapSet, limit: Option<u64>, pinned: u64) -> Option<(CapSet, String)> {
    let limit = limit.filter(|&limit| limit < pinned && !held.contains(CAP_IPC_LOCK))?;
    let remedy = format!(
        "RLIMIT_MEMLOCK is {limit} bytes and the probe pins at least {pinned}: set LimitMEMLOCK=infinity (the packaged unit does), raise ulimit -l, or grant CAP_IPC_LOCK"
    );
    Some((CapSet::of(&[CAP_IPC_LOCK]), remedy))
}

/// CAP_SYS_ADMIN, when the calling thread lacks it: a `config` file opened without it reads as
/// its first 64 bytes only (`pci_read_config()` in the kernel's drivers/pci/pci-sysfs.c).
pub fn pci_config_missing() -> Option<(CapSet, &'static str)> {
    let held = sys::get().ok()?.effective;
    (!held.contains(CAP_SYS_ADMIN)).then_some((
        CapSet::of(&[CAP_SYS_ADMIN]),
        "the packaged unit withholds CAP_SYS_ADMIN on purpose (it grants far more); add it in a drop-in where these details are worth that",
    ))
}

/// CAP_NET_ADMIN, when the calling thread lacks it: the kernel answers a module-EEPROM request
/// over ethtool netlink with EPERM without it (`ETHTOOL_MSG_MODULE_EEPROM_GET` is
/// `GENL_UNS_ADMIN_PERM` in net/ethtool/netlink.c).
pub fn module_eeprom_missing() -> Option<(CapSet, &'static str)> {
    let held = sys::get().ok()?.effective;
    (!held.contains(CAP_NET_ADMIN)).then_some((
        CapSet::of(&[CAP_NET_ADMIN]),
        "the packaged unit withholds CAP_NET_ADMIN on purpose (it may reconfigure the node's network); add it to CapabilityBoundingSet= and AmbientCapabilities= in a drop-in where cable health is worth that",
    ))
}

#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("capget: {0}")]
    Get(std::io::Error),
    #[error("capset: {0}")]
    Set(std::io::Error),
    #[error("installing the signal handler: {0}")]
    Handler(std::io::Error),
    #[error("listing /proc/self/task: {0}")]
    Threads(std::io::Error),
    #[error("{0} thread(s) still hold {1} after 2 s")]
    StillHeld(usize, CapSet),
}

/// What [`drop_after_start`] did.
#[derive(Debug, PartialEq, Eq)]
pub struct Dropped {
    pub kept: CapSet,
    pub dropped: CapSet,
    pub threads: usize,
}

/// Gives up the start-only capabilities that no running feature needs, on every thread.
/// Whether the capabilities only the start needed are settled: dropped, or kept for good.
/// Dropping them gives every thread new credentials, and ib_uverbs refuses a `write(2)` on a
/// descriptor opened under other credentials (`ib_safe_file_access`: EACCES, seen in the lab
/// as a verbs probe's first `ibv_post_send` failing), so the verbs threads open devices after.
static SETTLED: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

/// Says the start-only capabilities are settled; threads in `wait_until_settled` go on.
pub fn mark_settled() {
    let (settled, changed) = &SETTLED;
    *lock(settled) = true;
    changed.notify_all();
}

/// Waits for `mark_settled`, at most `limit` (a caller of the library that drops nothing
/// never marks it).
pub fn wait_until_settled(limit: Duration) {
    let (settled, changed) = &SETTLED;
    drop(wait_while(changed, lock(settled), limit, |settled| {
        !*settled
    }));
}

pub fn drop_after_start(still_needed: StillNeeded) -> Result<Dropped, PrivilegeError> {
    let held = sys::get().map_err(PrivilegeError::Get)?;
    let drop = to_drop(held.permitted, still_needed);
    let mut threads = 1;
    if !drop.is_empty() {
        let target = held.without(drop);
        sys::set(target).map_err(PrivilegeError::Set)?;
        threads = drop_on_other_threads(target, drop)?;
    }
    Ok(Dropped {
        kept: held.permitted.without(drop),
        dropped: drop,
        threads,
    })
}

/// Signals every other thread still permitted one of `drop` to set `target`, until none is
/// (threads started meanwhile inherit the caller's sets); returns the number of threads.
fn drop_on_other_threads(target: Sets, drop: CapSet) -> Result<usize, PrivilegeError> {
    TARGET[0].store(target.effective.0, Ordering::SeqCst);
    TARGET[1].store(target.permitted.0, Ordering::SeqCst);
    TARGET[2].store(target.inheritable.0, Ordering::SeqCst);
    sys::install_handler().map_err(PrivilegeError::Handler)?;
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let threads = threads_permitted().map_err(PrivilegeError::Threads)?;
        let holding: Vec<i32> = threads
            .iter()
            .filter(|(_, permitted)| !permitted.intersection(drop).is_empty())
            .map(|&(tid, _)| tid)
            .collect();
        if holding.is_empty() {
            return Ok(threads.len());
        }
        if Instant::now() > deadline {
            return Err(PrivilegeError::StillHeld(holding.len(), drop));
        }
        for tid in holding {
            sys::signal_thread(tid);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every thread of the process with its permitted set; a thread gone meanwhile is left out.
fn threads_permitted() -> std::io::Result<Vec<(i32, CapSet)>> {
    let tasks = SysDir::open(Path::new("/proc/self/task"), "").map_err(std::io::Error::other)?;
    let mut reader = AttributeReader::default();
    let mut threads = Vec::new();
    for entry in tasks.entries().map_err(std::io::Error::other)? {
        let Some(tid) = entry.name().ok().and_then(|name| name.parse().ok()) else {
            continue;
        };
        let Ok(status) = tasks.read(&format!("{tid}/status"), &mut reader) else {
            continue;
        };
        if let Some(permitted) = permitted_in_status(status) {
            threads.push((tid, permitted));
        }
    }
    Ok(threads)
}

/// The `CapPrm:` line of a `/proc/PID/status`.
fn permitted_in_status(status: &str) -> Option<CapSet> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapPrm:"))
        .and_then(CapSet::parse_hex)
}

/// The sets every thread is to take, for the signal handler: effective, permitted, inheritable.
static TARGET: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// A thread's capability sets (the ambient set follows: the kernel clears from it what leaves
/// the permitted or inheritable set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sets {
    effective: CapSet,
    permitted: CapSet,
    inheritable: CapSet,
}

impl Sets {
    fn without(self, drop: CapSet) -> Sets {
        Sets {
            effective: self.effective.without(drop),
            permitted: self.permitted.without(drop),
            inheritable: self.inheritable.without(drop),
        }
    }
}

/// The capability and signal system calls, nothing else.
mod sys {
    use super::{CapSet, Sets, TARGET};
    use std::sync::atomic::Ordering;

    /// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
    const VERSION_3: u32 = 0x2008_0522;

    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }

    fn split(set: CapSet) -> [u32; 2] {
        [set.0 as u32, (set.0 >> 32) as u32]
    }

    fn join(low: u32, high: u32) -> CapSet {
        CapSet(u64::from(low) | u64::from(high) << 32)
    }

    /// The calling thread's sets.
    pub(super) fn get() -> std::io::Result<Sets> {
        let mut header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let mut data = [Data::default(); 2];
        // SAFETY: capget writes two `Data` (version 3) into `data`, which holds two, and reads
        // `header`; both live across the call.
        let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Sets {
            effective: join(data[0].effective, data[1].effective),
            permitted: join(data[0].permitted, data[1].permitted),
            inheritable: join(data[0].inheritable, data[1].inheritable),
        })
    }

    /// Sets the calling thread's sets. No allocation, no lock: also called in the signal
    /// handler.
    pub(super) fn set(sets: Sets) -> std::io::Result<()> {
        let mut header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let [e0, e1] = split(sets.effective);
        let [p0, p1] = split(sets.permitted);
        let [i0, i1] = split(sets.inheritable);
        let data = [
            Data {
                effective: e0,
                permitted: p0,
                inheritable: i0,
            },
            Data {
                effective: e1,
                permitted: p1,
                inheritable: i1,
            },
        ];
        // SAFETY: capset reads `header` and two `Data` (version 3) from `data`, which holds
        // two; both live across the call.
        let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The signal that asks a thread to take the sets in `TARGET`: the first real-time signal
    /// glibc leaves to programs (nothing else here uses real-time signals).
    fn signal() -> libc::c_int {
        libc::SIGRTMIN()
    }

    extern "C" fn take_target(_: libc::c_int) {
        let load = |i: usize| CapSet(TARGET[i].load(Ordering::SeqCst));
        // Failing here leaves the thread's sets as they were; the caller sees it in
        // /proc/self/task and reports it. errno is saved and restored around the call.
        // SAFETY: __errno_location returns the calling thread's errno, valid for the thread's
        // life.
        let errno = unsafe { *libc::__errno_location() };
        let _ = set(Sets {
            effective: load(0),
            permitted: load(1),
            inheritable: load(2),
        });
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }

    /// Installs the handler for every thread (SA_RESTART: interrupted reads and waits go on).
    /// It stays installed: a signal still in flight must not take the default action (exit).
    pub(super) fn install_handler() -> std::io::Result<()> {
        // SAFETY: a zeroed sigaction is a valid value (empty mask, no flags) that is then
        // filled in; sigaction reads it and writes no old action (null).
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = take_target as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal(), &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sends the signal to one thread of this process; a thread gone meanwhile is no error.
    pub(super) fn signal_thread(tid: i32) {
        // SAFETY: tgkill takes plain integers; it fails (ESRCH) for a thread that has exited.
        unsafe {
            libc::syscall(
                libc::SYS_tgkill,
                libc::getpid(),
                tid,
                signal() as libc::c_long,
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNIT: CapSet = START_ONLY;

    #[test]
    fn a_memlock_limit_below_the_verbs_buffers_needs_ipc_lock() {
        let (pinned, default_before_5_16) = (256 << 10, Some(64 << 10));
        let (missing, remedy) =
            memlock_missing_from(CapSet::EMPTY, default_before_5_16, pinned).unwrap();
        assert_eq!(missing, CapSet::of(&[CAP_IPC_LOCK]));
        assert!(remedy.contains("LimitMEMLOCK=infinity"), "{remedy}");
        let ipc_lock = CapSet::of(&[CAP_IPC_LOCK]);
        assert_eq!(
            memlock_missing_from(ipc_lock, default_before_5_16, pinned),
            None
        );
        assert_eq!(memlock_missing_from(CapSet::EMPTY, None, pinned), None);
        assert_eq!(
            memlock_missing_from(CapSet::EMPTY, Some(8 << 20), pinned),
            None
        );
    }

    #[test]
    fn bpf_names_the_capabilities_the_kernel_has() {
        let split = CapSet::of(&[CAP_BPF, CAP_PERFMON]);
        let admin = CapSet::of(&[CAP_SYS_ADMIN]);
        assert_eq!(bpf_tracing_missing_from(split, Some(40)), None);
        assert_eq!(bpf_tracing_missing_from(admin, Some(37)), None);
        let (missing, _) = bpf_tracing_missing_from(CapSet::EMPTY, Some(40)).unwrap();
        assert_eq!(missing, split);
        let bpf_only = CapSet::of(&[CAP_BPF]);
        let (missing, _) = bpf_tracing_missing_from(bpf_only, Some(39)).unwrap();
        assert_eq!(missing, CapSet::of(&[CAP_PERFMON]));
        assert_eq!(bpf_tracing_missing_from(split, None), None);
        // RHEL 8's 4.18 without the backport.
        let (missing, remedy) = bpf_tracing_missing_from(CapSet::EMPTY, Some(37)).unwrap();
        assert_eq!(missing, admin);
        assert!(remedy.contains("CAP_SYS_ADMIN"), "{remedy}");
        let (missing, _) = bpf_tracing_missing_from(CapSet::EMPTY, None).unwrap();
        assert_eq!(missing, split);
    }

    #[test]
    fn the_unit_set_is_dropped_whole_where_bpf_checks_only_creation() {
        for release in [(6, 12), (6, 1), (5, 19)] {
            let needed = StillNeeded::for_kernel(true, Some(release), Some("2"), false);
            assert_eq!(to_drop(UNIT, needed), UNIT, "{release:?}");
        }
    }

    #[test]
    fn cap_bpf_stays_where_every_bpf_call_is_checked() {
        for release in [Some((5, 18)), Some((5, 10)), Some((4, 18)), None] {
            let needed = StillNeeded::for_kernel(true, release, Some("2"), false);
            assert_eq!(
                to_drop(UNIT, needed),
                CapSet::of(&[CAP_PERFMON, CAP_DAC_READ_SEARCH, CAP_SYSLOG]),
                "{release:?}"
            );
        }
        // The sysctl unread counts as set.
        let unknown = StillNeeded::for_kernel(true, Some((5, 14)), None, false);
        assert!(!to_drop(UNIT, unknown).contains(CAP_BPF));
    }

    #[test]
    fn cap_bpf_goes_where_bpf_is_open_to_all_or_unused() {
        let open = StillNeeded::for_kernel(true, Some((5, 14)), Some("0"), false);
        assert_eq!(to_drop(UNIT, open), UNIT);
        let unused = StillNeeded::for_kernel(false, Some((5, 14)), Some("2"), false);
        assert_eq!(to_drop(UNIT, unused), UNIT);
    }

    /// vfio's probes attach when vfio loads, and again on every reload: a kernel with loadable
    /// modules keeps what attaching takes.
    #[test]
    fn probes_that_attach_later_keep_what_attaching_takes() {
        let needed = StillNeeded::for_kernel(true, Some((6, 12)), Some("2"), true);
        assert_eq!(
            to_drop(UNIT, needed),
            CapSet::of(&[CAP_DAC_READ_SEARCH, CAP_SYSLOG])
        );
        let no_ebpf = StillNeeded::for_kernel(false, Some((6, 12)), Some("2"), true);
        assert_eq!(to_drop(UNIT, no_ebpf), UNIT);
    }

    #[test]
    fn only_start_only_capabilities_are_dropped() {
        let cap_sys_admin = 21;
        let cap_net_bind_service = 10;
        let held = CapSet::of(&[CAP_BPF, CAP_SYSLOG, cap_sys_admin, cap_net_bind_service]);
        let needed = StillNeeded::for_kernel(true, Some((6, 12)), Some("2"), false);
        assert_eq!(to_drop(held, needed), CapSet::of(&[CAP_BPF, CAP_SYSLOG]));
        assert_eq!(to_drop(CapSet::EMPTY, needed), CapSet::EMPTY);
    }

    #[test]
    fn sets_print_as_capabilities_7_names_them() {
        assert_eq!(
            UNIT.to_string(),
            "cap_dac_read_search,cap_syslog,cap_perfmon,cap_bpf"
        );
        assert_eq!(CapSet::EMPTY.to_string(), "none");
        assert_eq!(CapSet::of(&[41]).to_string(), "cap_41");
    }

    /// From `/proc/PID/status` of the exporter as the service user in the lab (Debian 6.12).
    #[test]
    fn the_permitted_set_is_read_from_a_status_file() {
        let status = "Name:\thpcnode_exporte\nCapInh:\t000000c400000004\nCapPrm:\t000000c400000004\nCapEff:\t000000c400000004\n";
        assert_eq!(permitted_in_status(status), Some(UNIT));
        assert_eq!(permitted_in_status("Name:\tx\n"), None);
        assert_eq!(permitted_in_status("CapPrm:\tzz\n"), None);
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies;
    use proptest::prelude::*;

    const STATUS_TOKENS: &[&str] = &[
        "CapPrm:",
        "CapEff:",
        "\t",
        "\n",
        " ",
        "0",
        "f",
        "c4",
        "0000",
        "ffffffffffffffff",
        "+",
        "-",
    ];

    proptest! {
        #[test]
        fn any_status_text_reads_without_panic(text in test_strategies::text(STATUS_TOKENS)) {
            let _ = permitted_in_status(&text);
        }

        #[test]
        fn a_permitted_set_reads_back_as_the_kernel_prints_it(bits in any::<u64>(), other in "[a-z]{1,12}") {
            let status = format!("{other}:\tx\nCapPrm:\t{bits:016x}\nCapEff:\t0000000000000000\n");
            prop_assert_eq!(permitted_in_status(&status), Some(CapSet(bits)));
        }
    }
}
