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
//! reference, so it is scanned). Otherwise the scan stops after [`MAX_DESCRIPTORS`]
//! descriptors and says so.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use rustix::fs::OFlags;

use crate::collector::Output;
use crate::logging::OncePerCause;
use crate::metrics::Value;
use crate::sync::lock;
use crate::sysfs::{Entry, OpenFile, SysDir, SysfsError, UnitRead};

use super::{
    Read, VFIO_DEVICE_HOLDERS, VFIO_HOLDER_INFO, VFIO_HOLDER_SCAN_COMPLETE, VFIO_STALE_HOLDER_INFO,
    VFIO_UNPROVEN_HOLDS, VFIO_UNREADABLE_PROCESSES,
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
        if self.no_vfio_file_open() {
            self.push(&VFIO_UNREADABLE_PROCESSES, Vec::new(), Value::Int(0));
            self.push(&VFIO_HOLDER_SCAN_COMPLETE, Vec::new(), Value::Int(1));
            for address in devices {
                let labels = vec![("device", address.clone().into())];
                self.push(&VFIO_DEVICE_HOLDERS, labels, Value::Int(0));
            }
            return;
        }

        let Some(proc) = self.unit.reported(SysDir::open(&collector.procfs, "")) else {
            return;
        };
        let scan = self.scan_processes(&proc, &mut nodes);
        if scan.stopped {
            collector.log_scan_stopped(scan.descriptors);
        }
        let complete = Value::Int(u64::from(!scan.stopped));
        self.push(&VFIO_HOLDER_SCAN_COMPLETE, Vec::new(), complete);
        self.push(
            &VFIO_UNREADABLE_PROCESSES,
            Vec::new(),
            Value::Int(scan.unreadable),
        );
        if scan.unreadable > 0 {
            collector.log_unreadable_processes(scan.unreadable);
        }
        for (reason, count) in scan.unproven {
            let labels = vec![("reason", reason.label().into())];
            self.push(&VFIO_UNPROVEN_HOLDS, labels, Value::Int(count));
        }

        let mut holders: BTreeMap<&str, BTreeSet<Holder>> = BTreeMap::new();
        let mut stale: BTreeSet<(String, Holder)> = BTreeSet::new();
        for (pid, holds) in scan.holding {
            let holder = self.holder(&proc, pid);
            for address in holds.devices {
                holders.entry(address).or_default().insert(holder.clone());
            }
            for node in holds.stale {
                stale.insert((node, holder.clone()));
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

    /// Whether the `vfio` module's reference count proves no vfio file open: no more
    /// references than the modules linked against it hold. `false` where it cannot tell (vfio
    /// built in, or not loaded while devices are bound: a fixture tree).
    fn no_vfio_file_open(&mut self) -> bool {
        let Ok(module) = self.collector.sysfs_dir("module/vfio") else {
            return false;
        };
        let refcnt = self
            .unit
            .unheld(&module, "refcnt")
            .ok()
            .and_then(|n| n.parse::<usize>().ok());
        let holders = module
            .subdir("holders")
            .and_then(|holders| holders.entries());
        match (refcnt, holders) {
            (Some(refcnt), Ok(holders)) => refcnt <= holders.len(),
            (Some(refcnt), Err(err)) if err.is_absent() => refcnt == 0,
            _ => false,
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
        let mut scan = ProcessScan::default();
        let entries = self.unit.reported(proc.entries()).unwrap_or_default();
        for pid in entries.iter().filter_map(process_id) {
            if scan.descriptors >= self.collector.max_descriptors {
                scan.stopped = true;
                break;
            }
            let fds = proc
                .subdir(&format!("{pid}/fd"))
                .and_then(|fds| fds.entries().map(|entries| (fds, entries)));
            let (fds, entries) = match fds {
                Ok(listing) => listing,
                Err(err) if err.is_absent() => continue,
                Err(err) if err.is_permission_denied() => {
                    scan.unreadable += 1;
                    continue;
                }
                Err(err) => {
                    self.error(err);
                    continue;
                }
            };
            let mut holds = ProcessHolds::default();
            let mut denied = false;
            scan.descriptors += entries.len();
            for fd in &entries {
                let Ok(fd) = fd.name() else {
                    continue;
                };
                let node = match fds.link_target(fd) {
                    Ok(target) => vfio_device_node(&target),
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
        }
        scan
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
mod tests {
    use super::*;
    use crate::collectors::pci::{collector_at, LabelCache};
    use crate::metrics::{encode, Format};
    use crate::sysfs::{AttributeReader, HeldAttributes};

    /// One holder read of the fixture tree `pci_host` (copied, with `refcnt` as the `vfio`
    /// module's count) by a collector whose scan reads at most `max_descriptors`.
    fn holders_of_pci_host(refcnt: &str, max_descriptors: usize) -> String {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("pci_host");
        let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/pci_host");
        let copied = std::process::Command::new("cp")
            .args(["-a", fixture])
            .arg(&root)
            .status();
        assert!(copied.unwrap().success());
        std::fs::write(root.join("sys/module/vfio/refcnt"), refcnt).unwrap();
        let mut collector = collector_at(&root);
        collector.sysfs = root.join("sys");
        collector.max_descriptors = max_descriptors;
        let mut out = Output::default();
        let (mut held, mut reader) = (HeldAttributes::default(), AttributeReader::default());
        let mut labels = LabelCache::default();
        let mut read = Read {
            collector: &collector,
            unit: UnitRead::new(&mut held, &mut reader, &mut out),
            labels: &mut labels,
        };
        read.vfio_holders(&["0000:07:00.0".to_string()]);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        encode(out.samples, Format::PrometheusText).unwrap()
    }

    #[test]
    fn no_process_is_scanned_while_no_vfio_file_is_open() {
        let idle = holders_of_pci_host("0\n", MAX_DESCRIPTORS);
        assert!(
            idle.contains("\nhpcnode_pci_vfio_holder_scan_complete 1\n"),
            "{idle}"
        );
        assert!(
            idle.contains("\nhpcnode_pci_vfio_device_holders{device=\"0000:07:00.0\"} 0\n"),
            "{idle}"
        );
        // The fixture's QEMUs name vfio nodes: only a scan would count them (as unproven,
        // its /proc being no procfs).
        assert!(!idle.contains("hpcnode_pci_vfio_unproven_holds"), "{idle}");
        let held = holders_of_pci_host("5\n", MAX_DESCRIPTORS);
        assert!(
            held.contains("hpcnode_pci_vfio_unproven_holds{reason=\"not_procfs\"} 2"),
            "{held}"
        );
        assert!(
            held.contains("\nhpcnode_pci_vfio_holder_scan_complete 1\n"),
            "{held}"
        );
    }

    #[test]
    fn the_scan_stops_at_its_budget_and_says_so() {
        // systemd's 4 descriptors, then the budget is spent: the QEMUs are not read.
        let cut = holders_of_pci_host("5\n", 4);
        assert!(
            cut.contains("\nhpcnode_pci_vfio_holder_scan_complete 0\n"),
            "{cut}"
        );
        assert!(!cut.contains("hpcnode_pci_vfio_unproven_holds"), "{cut}");
        // Exactly enough for every process: complete.
        let whole = holders_of_pci_host("5\n", 4 + 6 + 3);
        assert!(
            whole.contains("\nhpcnode_pci_vfio_holder_scan_complete 1\n"),
            "{whole}"
        );
    }

    fn cmdline(args: &[&str]) -> Vec<u8> {
        args.iter()
            .flat_map(|a| [a.as_bytes(), b"\0"].concat())
            .collect()
    }

    /// As libvirt 9 starts a Nova instance (from `ps -o args` of a real compute node).
    #[test]
    fn libvirt_guest_name_and_uuid() {
        let line = cmdline(&[
            "/usr/bin/qemu-system-x86_64",
            "-name",
            "guest=instance-0000002a,debug-threads=on",
            "-S",
            "-uuid",
            "8f0c6a3e-5b0e-4f6b-9d2a-1c3e5f7a9b0d",
            "-device",
            "{\"driver\":\"vfio-pci\",\"host\":\"0000:3b:00.0\"}",
        ]);
        assert!(is_qemu("qemu-system-x86", &line));
        assert_eq!(
            qemu_identity(&line),
            (
                "instance-0000002a".to_string(),
                "8f0c6a3e-5b0e-4f6b-9d2a-1c3e5f7a9b0d".to_string()
            )
        );
    }

    #[test]
    fn qemu_option_strings_as_qemu_reads_them() {
        assert_eq!(qemu_option("vm1", "guest").as_deref(), Some("vm1"));
        assert_eq!(
            qemu_option("vm1,process=x", "guest").as_deref(),
            Some("vm1")
        );
        assert_eq!(
            qemu_option("a,,b,debug-threads=on", "guest").as_deref(),
            Some("a,b")
        );
        assert_eq!(
            qemu_option("debug-threads=on,guest=g", "guest").as_deref(),
            Some("g")
        );
        assert_eq!(qemu_option("debug-threads=on", "guest"), None);
        let double_dash = cmdline(&["qemu-kvm", "--name", "vm2", "--uuid", "u"]);
        assert_eq!(qemu_identity(&double_dash), ("vm2".into(), "u".into()));
        assert_eq!(
            qemu_identity(&cmdline(&["qemu-kvm", "-name"])),
            Default::default()
        );
    }

    #[test]
    fn only_device_nodes_count() {
        for (target, node) in [
            ("/dev/vfio/12", true),
            ("/dev/vfio/noiommu-0", true),
            ("/dev/vfio/devices/vfio3", true),
            ("/dev/vfio/vfio", false),
            ("/dev/iommu", false),
            ("/dev/vfio/", false),
            ("/dev/vfio/devices/vfio", false),
            ("/dev/vfio/12 (deleted)", true),
            ("/dev/vfio/vfio (deleted)", false),
            ("socket:[1234]", false),
        ] {
            assert_eq!(
                vfio_device_node(Path::new(target)).is_some(),
                node,
                "{target}"
            );
        }
    }

    /// Which descriptors named like vfio nodes hold what, by the device behind them: group
    /// 13's node is 243:2 and the device's cdev 236:0, as sysfs gives them.
    #[test]
    fn a_hold_is_the_device_behind_the_name() {
        let devices = HashMap::from([((243, 2), "0000:07:00.0"), ((236, 0), "0000:07:00.0")]);
        let hold = |node, device| classify(node, device, &devices, &[236, 243]);
        assert_eq!(hold("/dev/vfio/13", (243, 2)), Hold::Device("0000:07:00.0"));
        let cdev = hold("/dev/vfio/devices/vfio0", (236, 0));
        assert_eq!(cdev, Hold::Device("0000:07:00.0"));
        // A group whose device left vfio-pci, its node still there or removed with the group.
        assert_eq!(hold("/dev/vfio/77", (243, 5)), Hold::Stale);
        assert_eq!(hold("/dev/vfio/13 (deleted)", (243, 2)), Hold::Stale);
        // A node of another device, under a group's name or a stale one's.
        for node in ["/dev/vfio/13", "/dev/vfio/77"] {
            assert_eq!(hold(node, (1, 3)), Hold::Unproven(Unproven::NotTheDevice));
        }
        // Without vfio's majors (an unreadable /proc/devices), nothing is stale.
        let unknown = classify("/dev/vfio/77", (243, 5), &devices, &[]);
        assert_eq!(unknown, Hold::Unproven(Unproven::NotTheDevice));
    }

    /// `/proc/devices` as the kernel writes it (`%3d %s`), with vfio's group and cdev regions:
    /// those majors, not the container's misc major, nor anything among the block devices.
    #[test]
    fn vfio_majors_are_its_character_devices() {
        let devices = "Character devices:\n  1 mem\n  5 /dev/tty\n 10 misc\n236 vfio-dev\n\
                       243 vfio\n254 gpiochip\n\nBlock devices:\n  7 loop\n259 blkext\n";
        assert_eq!(vfio_majors(devices), [236, 243]);
        assert_eq!(vfio_majors("Block devices:\n243 vfio\n"), [] as [u32; 0]);
    }

    /// `fdinfo` as 6.18 writes it for `/dev/null` opened `O_PATH` and read-only.
    #[test]
    fn path_only_descriptors_from_their_flags() {
        let path = "pos:\t0\nflags:\t012000000\nmnt_id:\t24\nino:\t3\n";
        let read = "pos:\t0\nflags:\t02100000\nmnt_id:\t24\nino:\t3\n";
        assert_eq!(opened_path_only(path), Some(true));
        assert_eq!(opened_path_only(read), Some(false));
        assert_eq!(opened_path_only("pos:\t0\n"), None);
    }

    #[test]
    fn other_programs_are_not_qemu() {
        let line = cmdline(&["/usr/bin/dpdk-testpmd", "-name", "x"]);
        assert!(!is_qemu("dpdk-testpmd", &line));
        assert!(is_qemu("qemu-kvm", b""));
    }
}

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
