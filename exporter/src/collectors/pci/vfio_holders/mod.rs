//! Who holds the devices bound to vfio-pci: the processes with the device's vfio group
//! (`/dev/vfio/<group>`, `/dev/vfio/noiommu-<group>`) or its vfio cdev
//! (`/dev/vfio/devices/vfio<N>`, 6.2+, used with iommufd) open; for QEMU, the guest's name and
//! UUID from its command line (what libvirt and Nova pass). The container (`/dev/vfio/vfio`)
//! and `/dev/iommu` name no device and are not counted.
//!
//! A hold is a kernel fact, not a name. The text of a `/proc/<pid>/fd` link is only the cheap
//! filter (a process's sockets and files are passed over with no more system calls than
//! before): any process can have a file open that reads `/dev/vfio/13` there, a regular file
//! or a node it made in a mount namespace of its own. A descriptor so named is a hold when
//! `stat` through the link finds the open file to be a character device with the numbers
//! sysfs gives the group's or the cdev's node (`class/vfio/<group>/dev`,
//! `<device>/vfio-dev/vfio<N>/dev`), opened for access: not `O_PATH` (its `fdinfo` flags),
//! which opens the real node with no permission on it. A vfio character device (its major
//! `vfio` or `vfio-dev` in `/proc/devices`) that is no bound device's node is a stale hold.
//! Whatever else is named like a node is counted as unproven, by reason, and logged once per
//! reason with its pid, never with what its link reads.
//!
//! The holder's mount namespace is not what decides: `stat` through the kernel's link reaches
//! the open file itself, so its numbers are the same from any namespace, and no unprivileged
//! process has a vfio device open without permission on the real node (it can make no device
//! node: mknod needs CAP_MKNOD in the initial user namespace, and what it mounts in a user
//! namespace is nodev). A VM in a container (KubeVirt, a device given to a pod) holds the real
//! device and is reported; one in a namespace of its own holding a look-alike is not.
//!
//! Reading another user's `/proc/<pid>/fd` links takes ptrace read access (CAP_SYS_PTRACE, or
//! root): without it, those processes are counted as unreadable, not guessed at.
//!
//! The scan reads every process's descriptors, so it is skipped where no vfio file can be open:
//! every open group, container, device and cdev file holds a reference to the `vfio` module
//! (their `file_operations` name it as `.owner`; `chrdev_open` and `anon_inode_getfile` take
//! it), as does each module linked against it (`ref_module`, listed in `holders/`). A count no
//! larger than its holder modules' proves no file open (5.10 and 6.1 idle; 6.12 keeps one more
//! reference, so it is scanned). Otherwise a full scan is kept while the count stays as it was
//! ([`kept`]), and stops after [`MAX_DESCRIPTORS`] descriptors and says so.

mod events;
mod kept;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use rustix::fs::OFlags;

use crate::collector::Output;
use crate::logging::OncePerCause;
use crate::metrics::Value;
use crate::sync::lock;
use crate::sysfs::{Entry, OpenFile, SysDir, SysfsError, UnitRead};

pub(super) use events::EventsState;
pub(super) use kept::KeptScan;
use kept::Outcome;

use super::{
    Read, VFIO_DEVICE_HOLDERS, VFIO_HOLDERS_FROM_EVENTS, VFIO_HOLDER_INFO,
    VFIO_HOLDER_SCAN_COMPLETE, VFIO_STALE_HOLDER_INFO, VFIO_UNPROVEN_HOLDS,
    VFIO_UNREADABLE_PROCESSES,
};

/// `/proc/<pid>/cmdline` is read up to this size: libvirt's QEMU command lines run to tens of
/// KiB; anything longer is refused, not cut.
const MAX_CMDLINE_BYTES: usize = 1 << 20;
/// `/proc/devices` is read up to this size: a few hundred bytes on a typical host.
const MAX_DEVICES_BYTES: usize = 64 << 10;
/// Where sysfs has the vfio groups' nodes (`<group>/dev`, `noiommu-<group>/dev`).
const VFIO_CLASS_DIR: &str = "class/vfio";
/// Descriptors a holder scan reads at most: at about 3 µs each (readlink of a `/proc` fd link),
/// half a million is a second and a half of CPU a scrape.
pub(super) const MAX_DESCRIPTORS: usize = 500_000;
/// What the link of a descriptor reads after its node was removed.
const DELETED: &str = " (deleted)";

/// A character device's major and minor numbers.
type DeviceNumber = (u32, u32);

/// A process holding a vfio device node open.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Holder {
    pid: u32,
    comm: String,
    /// QEMU's `-name guest=` (empty for other programs, or a QEMU without a name).
    guest: String,
    /// QEMU's `-uuid`.
    uuid: String,
}

/// Why a descriptor named like a vfio device node is not a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Unproven {
    /// Its open file is not a vfio character device: a regular file, or a node of another
    /// device, made where the name says.
    NotTheDevice,
    /// Opened with `O_PATH`: it names the node without access to the device.
    PathOnly,
    /// `--path.procfs` is not procfs: its descriptors are plain links, names only.
    NotProcfs,
}

impl Unproven {
    /// What logs each reason once: room for the three in one generation.
    pub(super) fn log_filter() -> OncePerCause<Unproven> {
        OncePerCause::new(2 * 3)
    }

    fn label(self) -> &'static str {
        match self {
            Unproven::NotTheDevice => "not_the_device",
            Unproven::PathOnly => "path_only",
            Unproven::NotProcfs => "not_procfs",
        }
    }

    pub(super) fn reason(self) -> &'static str {
        match self {
            Unproven::NotTheDevice => {
                "its open file is not a vfio group's or device's character device"
            }
            Unproven::PathOnly => "opened with O_PATH, without access to the device",
            Unproven::NotProcfs => "--path.procfs is not procfs: its descriptors are names only",
        }
    }
}

/// What a descriptor named like a vfio device node holds.
#[derive(Debug, PartialEq, Eq)]
enum Hold<'a> {
    /// The node of this device bound to vfio-pci.
    Device(&'a str),
    /// A vfio group or cdev of no device bound to vfio-pci now.
    Stale,
    Unproven(Unproven),
}

/// The devices bound to vfio-pci, and what tells their nodes and vfio's, read when a descriptor
/// named like a vfio node first needs it: a host where nothing is so named reads none of it.
struct VfioNodes<'a> {
    bound: Vec<BoundDevice<'a>>,
    /// The numbers of their nodes, and vfio's majors.
    known: Option<KnownNodes<'a>>,
}

/// A device bound to vfio-pci, with its directory and IOMMU group as the listing opened and
/// read them, if it did.
struct BoundDevice<'a> {
    address: &'a str,
    dir: Option<Arc<SysDir>>,
    group: Option<String>,
}

struct KnownNodes<'a> {
    devices: HashMap<DeviceNumber, &'a str>,
    majors: Vec<u32>,
}

impl Read<'_> {
    /// For every device bound to vfio-pci: the processes holding it, and the processes holding
    /// a vfio node that is no such device's any more (its device removed or rebound).
    pub(super) fn vfio_holders(&mut self, devices: &[String]) {
        let collector = self.collector;
        let bound = devices
            .iter()
            .map(|address| {
                let (dir, group) = lock(&collector.scrape).vfio_bound.remove(address).unzip();
                BoundDevice {
                    address,
                    dir,
                    group: group.flatten(),
                }
            })
            .collect();
        let mut nodes = VfioNodes { bound, known: None };
        let refs = self.vfio_module_refs();
        let none_open = refs.is_some_and(|(refcnt, holders)| refcnt <= holders);
        if let Some(tracking) = collector.vfio_holder_events.tracking() {
            if self.holders_from_events(devices, &mut nodes, &tracking, none_open) {
                return;
            }
        }
        self.push(&VFIO_HOLDERS_FROM_EVENTS, Vec::new(), Value::Int(0));
        if none_open {
            // No vfio file open anywhere: nobody to find.
            *lock(&collector.kept_scan) = None;
            self.push_outcome(None, devices, &Outcome::default());
            return;
        }

        let Some(proc) = self.unit.reported(SysDir::open(&collector.procfs, "")) else {
            return;
        };
        let refcnt = refs.map(|(refcnt, _)| refcnt);
        let kept = lock(&collector.kept_scan).take();
        let kept = match (kept, refcnt) {
            (Some(kept), Some(refcnt)) if kept.holds(refcnt, devices, &proc) => kept,
            _ => {
                let scan = self.scan_processes(&proc, &mut nodes);
                if scan.stopped {
                    collector.log_scan_stopped(scan.descriptors);
                }
                KeptScan::new(refcnt.unwrap_or_default(), devices, scan)
            }
        };
        self.push_outcome(Some(&proc), devices, &kept.outcome);
        // A scan cut short, or one with no count to tell a change by, is not kept.
        if refcnt.is_some() && !kept.outcome.stopped {
            *lock(&collector.kept_scan) = Some(kept);
        }
    }

    /// The series of a scan's outcome; `proc` names the holders (none without it).
    fn push_outcome(&mut self, proc: Option<&SysDir>, devices: &[String], outcome: &Outcome) {
        let collector = self.collector;
        let complete = Value::Int(u64::from(!outcome.stopped));
        self.push(&VFIO_HOLDER_SCAN_COMPLETE, Vec::new(), complete);
        self.push(
            &VFIO_UNREADABLE_PROCESSES,
            Vec::new(),
            Value::Int(outcome.unreadable),
        );
        if outcome.unreadable > 0 {
            collector.log_unreadable_processes(outcome.unreadable);
        }
        for (reason, count) in &outcome.unproven {
            let labels = vec![("reason", reason.label().into())];
            self.push(&VFIO_UNPROVEN_HOLDS, labels, Value::Int(*count));
        }

        let mut holders: BTreeMap<&str, BTreeSet<Holder>> = BTreeMap::new();
        let mut stale: BTreeSet<(String, Holder)> = BTreeSet::new();
        for (pid, held, stale_nodes) in &outcome.holding {
            let Some(proc) = proc else { break };
            let holder = self.holder(proc, *pid);
            for address in held {
                holders.entry(address).or_default().insert(holder.clone());
            }
            for node in stale_nodes {
                stale.insert((node.clone(), holder.clone()));
            }
        }
        for address in devices {
            let held = holders.remove(address.as_str()).unwrap_or_default();
            let labels = vec![("device", address.clone().into())];
            self.push(
                &VFIO_DEVICE_HOLDERS,
                labels.clone(),
                Value::Int(held.len() as u64),
            );
            for holder in held {
                let mut labels = labels.clone();
                labels.extend(holder_labels(holder));
                self.push(&VFIO_HOLDER_INFO, labels, Value::Int(1));
            }
        }
        for (node, holder) in stale {
            let mut labels = vec![("node", node.into())];
            labels.extend(holder_labels(holder));
            self.push(&VFIO_STALE_HOLDER_INFO, labels, Value::Int(1));
        }
    }

    /// The `vfio` module's reference count and how many modules linked against it hold one
    /// (a count no larger proves no vfio file open); `None` where it cannot tell (vfio built
    /// in, or not loaded while devices are bound: a fixture tree).
    fn vfio_module_refs(&mut self) -> Option<(u64, u64)> {
        let module = self.collector.sysfs_dir("module/vfio").ok()?;
        let refcnt = self.unit.unheld(&module, "refcnt").ok()?.parse().ok()?;
        match module
            .subdir("holders")
            .and_then(|holders| holders.entries())
        {
            Ok(holders) => Some((refcnt, holders.len() as u64)),
            Err(err) if err.is_absent() => Some((refcnt, 0)),
            Err(_) => None,
        }
    }

    /// The numbers of the nodes of the devices bound to vfio-pci, and the majors
    /// `/proc/devices` gives vfio.
    fn known_nodes<'a>(&mut self, proc: &SysDir, bound: &[BoundDevice<'a>]) -> KnownNodes<'a> {
        let collector = self.collector;
        let class = self.unit.optional(collector.sysfs_dir(VFIO_CLASS_DIR));
        let mut devices = HashMap::new();
        for device in bound {
            let dir = collector.device_dir(device.address, device.dir.clone());
            let Some(dir) = self.unit.optional(dir) else {
                continue;
            };
            for number in self.device_numbers(&dir, class.as_ref(), device.group.clone()) {
                devices.insert(number, device.address);
            }
        }
        let majors = proc.read_text_file("devices", MAX_DEVICES_BYTES);
        let majors = self.unit.reported(majors.map(|text| vfio_majors(&text)));
        KnownNodes {
            devices,
            majors: majors.unwrap_or_default(),
        }
    }

    /// The numbers of the device nodes through which a process reaches this device, as sysfs
    /// gives them: its group's (`noiommu-<group>` in no-IOMMU mode) and its cdev's, when it
    /// has one. `group`: its IOMMU group as the listing read it, if it did; `class`:
    /// `class/vfio`, where vfio has any group.
    fn device_numbers(
        &mut self,
        dir: &SysDir,
        class: Option<&SysDir>,
        group: Option<String>,
    ) -> Vec<DeviceNumber> {
        let mut numbers = Vec::new();
        let group = group.map_or_else(|| dir.link_target_name("iommu_group"), Ok);
        if let (Some(class), Some(group)) = (class, self.unit.optional(group)) {
            let number = match device_number(&mut self.unit, class, &format!("{group}/dev")) {
                Err(err) if err.is_absent() => {
                    device_number(&mut self.unit, class, &format!("noiommu-{group}/dev"))
                }
                number => number,
            };
            numbers.extend(self.unit.optional(number));
        }
        let Some(cdevs) = self.unit.optional(dir.subdir("vfio-dev")) else {
            return numbers;
        };
        for cdev in self.unit.reported(cdevs.entries()).unwrap_or_default() {
            if let Some(name) = self.unit.reported(cdev.into_name()) {
                let number = device_number(&mut self.unit, &cdevs, &format!("{name}/dev"));
                numbers.extend(self.unit.reported(number));
            }
        }
        numbers
    }

    /// Every process's vfio holds, how many processes' open files could not be read, and the
    /// descriptors named like vfio nodes that hold none. A process that exits during the scan
    /// is simply gone.
    fn scan_processes<'a>(&mut self, proc: &SysDir, nodes: &mut VfioNodes<'a>) -> ProcessScan<'a> {
        self.scan_processes_from(proc, nodes, 0, |_| false).0
    }

    /// The scan of the processes from pid `from` on, `skip` left out, in pid order; with the
    /// first pid left unread where it stopped at its budget.
    fn scan_processes_from<'a>(
        &mut self,
        proc: &SysDir,
        nodes: &mut VfioNodes<'a>,
        from: u32,
        skip: impl Fn(u32) -> bool,
    ) -> (ProcessScan<'a>, Option<u32>) {
        let mut scan = ProcessScan::default();
        let entries = self.unit.reported(proc.entries()).unwrap_or_default();
        let mut pids: Vec<u32> = entries.iter().filter_map(process_id).collect();
        pids.sort_unstable();
        for pid in pids.into_iter().filter(|&pid| pid >= from && !skip(pid)) {
            if scan.descriptors >= self.collector.max_descriptors {
                scan.stopped = true;
                return (scan, Some(pid));
            }
            self.scan_process(proc, pid, nodes, &mut scan);
        }
        (scan, None)
    }

    /// Adds process `pid`'s holds to `scan`; `false` when it is gone (no `/proc/<pid>/fd`).
    fn scan_process<'a>(
        &mut self,
        proc: &SysDir,
        pid: u32,
        nodes: &mut VfioNodes<'a>,
        scan: &mut ProcessScan<'a>,
    ) -> bool {
        let fds = proc
            .subdir(&format!("{pid}/fd"))
            .and_then(|fds| fds.entries().map(|entries| (fds, entries)));
        let (fds, entries) = match fds {
            Ok(listing) => listing,
            Err(err) if err.is_absent() => return false,
            Err(err) if err.is_permission_denied() => {
                scan.unreadable += 1;
                return true;
            }
            Err(err) => {
                self.error(err);
                return true;
            }
        };
        let mut holds = ProcessHolds::default();
        let mut vfio_files = Vec::new();
        let mut denied = false;
        scan.descriptors += entries.len();
        for fd in &entries {
            let Ok(fd) = fd.name() else {
                continue;
            };
            let node = match fds.link_target(fd) {
                Ok(target) if kept::is_vfio_file(&target) => {
                    let node = vfio_device_node(&target);
                    vfio_files.push((fd.to_string(), target));
                    node
                }
                Ok(_) => None,
                Err(err) if err.is_permission_denied() => {
                    denied = true;
                    break;
                }
                // Closed since the listing, or the process exited.
                Err(_) => None,
            };
            let Some(node) = node else {
                continue;
            };
            match self.hold(proc, &fds, pid, fd, &node, nodes) {
                Ok(Hold::Device(address)) => {
                    holds.devices.insert(address);
                }
                Ok(Hold::Stale) => {
                    holds.stale.insert(node);
                }
                Ok(Hold::Unproven(reason)) => {
                    *scan.unproven.entry(reason).or_default() += 1;
                    self.collector.log_unproven_hold(reason, pid);
                }
                Err(err) if err.is_permission_denied() => {
                    denied = true;
                    break;
                }
                // Closed since its link was read, or the process exited.
                Err(err) if err.is_absent() => {}
                Err(err) => self.error(err),
            }
        }
        scan.unreadable += u64::from(denied);
        if !holds.devices.is_empty() || !holds.stale.is_empty() {
            scan.holding.push((pid, holds));
        }
        if !vfio_files.is_empty() {
            scan.watched.push((pid, vfio_files));
        }
        true
    }

    /// What descriptor `fd` of process `pid`, whose link reads `node`, holds: told by the file
    /// open behind it, not by the name.
    fn hold<'a>(
        &mut self,
        proc: &SysDir,
        fds: &SysDir,
        pid: u32,
        fd: &str,
        node: &str,
        nodes: &mut VfioNodes<'a>,
    ) -> Result<Hold<'a>, SysfsError> {
        let device = match fds.open_file(fd)? {
            OpenFile::CharDevice(major, minor) => (major, minor),
            OpenFile::Other => return Ok(Hold::Unproven(Unproven::NotTheDevice)),
            OpenFile::NotOnProcfs => return Ok(Hold::Unproven(Unproven::NotProcfs)),
        };
        let known = match nodes.known.take() {
            Some(known) => known,
            None => self.known_nodes(proc, &nodes.bound),
        };
        let hold = classify(node, device, &known.devices, &known.majors);
        nodes.known = Some(known);
        if matches!(hold, Hold::Unproven(_)) {
            return Ok(hold);
        }
        let fdinfo = format!("{pid}/fdinfo/{fd}");
        match opened_path_only(self.unit.unheld(proc, &fdinfo)?) {
            Some(false) => Ok(hold),
            Some(true) => Ok(Hold::Unproven(Unproven::PathOnly)),
            None => Err(SysfsError::parse(&proc.path(&fdinfo), "no flags line", "")),
        }
    }

    /// Who process `pid` is: its command name and, for QEMU, the guest it runs.
    fn holder(&mut self, proc: &SysDir, pid: u32) -> Holder {
        let comm = self
            .unit
            .unheld(proc, &format!("{pid}/comm"))
            .map(str::to_string)
            .unwrap_or_default();
        let cmdline = proc.read_file(&format!("{pid}/cmdline"), MAX_CMDLINE_BYTES);
        let (guest, uuid) = match cmdline {
            Ok(cmdline) if is_qemu(&comm, &cmdline) => qemu_identity(&cmdline),
            // An exited process, or not QEMU: no guest.
            _ => (String::new(), String::new()),
        };
        Holder {
            pid,
            comm,
            guest,
            uuid,
        }
    }
}

#[derive(Default)]
struct ProcessScan<'a> {
    /// Processes holding vfio device nodes, and what.
    holding: Vec<(u32, ProcessHolds<'a>)>,
    /// Processes whose open files could not be read (another user's, without ptrace access).
    unreadable: u64,
    /// Descriptors named like vfio device nodes that hold none, by reason.
    unproven: BTreeMap<Unproven, u64>,
    /// Descriptors listed, against the collector's budget ([`MAX_DESCRIPTORS`]).
    descriptors: usize,
    /// Whether the budget ran out with processes left unread.
    stopped: bool,
    /// The descriptors that are vfio files, by process, and what their links read.
    watched: Vec<(u32, Vec<(String, std::path::PathBuf)>)>,
}

/// What one process holds.
#[derive(Default)]
struct ProcessHolds<'a> {
    /// The devices bound to vfio-pci whose nodes it holds.
    devices: BTreeSet<&'a str>,
    /// The vfio nodes it holds that are no bound device's, as its links name them.
    stale: BTreeSet<String>,
}

fn process_id(entry: &Entry) -> Option<u32> {
    let name = entry.name().ok()?;
    name.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| name.parse().ok())?
}

fn holder_labels(holder: Holder) -> Vec<(&'static str, crate::metrics::LabelValue)> {
    vec![
        ("pid", holder.pid.to_string().into()),
        ("comm", holder.comm.into()),
        ("guest", holder.guest.into()),
        ("uuid", holder.uuid.into()),
    ]
}

/// The vfio node an open file is named as, when the name is a device's: a group or a device
/// cdev. A node removed while held (its group gone with its last device) reads
/// `/dev/vfio/12 (deleted)`: kept whole, so that it shows as stale. Only the filter before
/// the proof ([`classify`]).
fn vfio_device_node(target: &Path) -> Option<String> {
    let target = target.to_str()?;
    let name = target.strip_prefix("/dev/vfio/")?;
    let name = name.strip_suffix(DELETED).unwrap_or(name);
    let group = name.strip_prefix("noiommu-").unwrap_or(name);
    let is_group = !group.is_empty() && group.bytes().all(|b| b.is_ascii_digit());
    let is_cdev = name
        .strip_prefix("devices/vfio")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    (is_group || is_cdev).then(|| target.to_string())
}

/// What a descriptor whose link reads `node` holds, from the character device open behind it:
/// the node of a device bound to vfio-pci (`devices`, by number), a vfio node of no such device
/// (its major one of vfio's, `majors`), or nothing that is a vfio device. How it was opened is
/// checked apart.
fn classify<'a>(
    node: &str,
    number: DeviceNumber,
    devices: &HashMap<DeviceNumber, &'a str>,
    majors: &[u32],
) -> Hold<'a> {
    match devices.get(&number) {
        // A removed node is no device's now, whatever its numbers.
        Some(address) if !node.ends_with(DELETED) => Hold::Device(address),
        _ if majors.contains(&number.0) => Hold::Stale,
        _ => Hold::Unproven(Unproven::NotTheDevice),
    }
}

/// A `dev` attribute: a node's `MAJOR:MINOR`.
fn device_number(
    unit: &mut UnitRead<'_, Output>,
    dir: &SysDir,
    name: &str,
) -> Result<DeviceNumber, SysfsError> {
    let text = unit.unheld(dir, name)?;
    let number = text
        .split_once(':')
        .and_then(|(major, minor)| Some((major.parse().ok()?, minor.parse().ok()?)));
    number.ok_or_else(|| SysfsError::parse(&dir.path(name), "not MAJOR:MINOR", text))
}

/// The majors `/proc/devices` gives vfio's group nodes (`vfio`) and device cdevs
/// (`vfio-dev`), among its character devices (`%3d %s` lines, before the block devices).
fn vfio_majors(devices: &str) -> Vec<u32> {
    devices
        .lines()
        .skip_while(|line| !line.starts_with("Character devices:"))
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| {
            let (major, name) = line.trim().split_once(' ')?;
            matches!(name, "vfio" | "vfio-dev").then(|| major.parse().ok())?
        })
        .collect()
}

/// Whether a descriptor was opened with `O_PATH`, from its `fdinfo` (`flags:` in octal);
/// `None` without a flags line.
fn opened_path_only(fdinfo: &str) -> Option<bool> {
    let flags = fdinfo
        .lines()
        .find_map(|line| line.strip_prefix("flags:"))?;
    let flags = u32::from_str_radix(flags.trim(), 8).ok()?;
    Some(flags & OFlags::PATH.bits() != 0)
}

/// A QEMU process: its command name (`qemu-system-x86` as the kernel cuts it, `qemu-kvm` on
/// RHEL) or its program's file name says so.
fn is_qemu(comm: &str, cmdline: &[u8]) -> bool {
    let program = cmdline.split(|&b| b == 0).next().unwrap_or_default();
    let program = program.rsplit(|&b| b == b'/').next().unwrap_or_default();
    comm.starts_with("qemu") || program.starts_with(b"qemu")
}

/// The guest name (`-name guest=NAME,...` as libvirt writes it, or `-name NAME,...`) and the
/// `-uuid` from a QEMU command line; empty when absent. Options are parsed as QEMU parses
/// them: `,` separates, `,,` is a literal comma, the first option without a key is the name.
fn qemu_identity(cmdline: &[u8]) -> (String, String) {
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    let value_of = |option: &str| {
        let at = args.iter().position(|arg| {
            arg.strip_prefix('-')
                .map(|a| a.strip_prefix('-').unwrap_or(a))
                == Some(option)
        })?;
        args.get(at + 1).cloned()
    };
    let guest = value_of("name")
        .and_then(|value| qemu_option(&value, "guest"))
        .unwrap_or_default();
    let uuid = value_of("uuid").unwrap_or_default();
    (guest, uuid)
}

/// The value of `key` in a QEMU option string (`guest=a,,b,debug-threads=on` -> `a,b`); the
/// first element without `=` is `key`'s value (QEMU's implied first key).
fn qemu_option(value: &str, key: &str) -> Option<String> {
    let mut elements = Vec::new();
    let mut current = String::new();
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ',' if chars.peek() == Some(&',') => {
                chars.next();
                current.push(',');
            }
            ',' => elements.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    elements.push(current);
    elements
        .into_iter()
        .enumerate()
        .find_map(|(i, element)| match element.split_once('=') {
            Some((k, v)) if k == key => Some(v.to_string()),
            None if i == 0 => Some(element),
            _ => None,
        })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_command_line_gives_bounded_text(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let (guest, uuid) = qemu_identity(&bytes);
            prop_assert!(guest.len() <= bytes.len() * 3 && uuid.len() <= bytes.len() * 3);
        }

        #[test]
        fn a_written_guest_name_reads_back(name in "[a-zA-Z0-9_.,=-]{1,40}") {
            let escaped = name.replace(',', ",,");
            let line = [b"qemu-system-x86_64\0-name\0guest=".as_slice(), escaped.as_bytes(), b",debug-threads=on\0"].concat();
            prop_assert_eq!(qemu_identity(&line).0, name);
        }
    }
}
