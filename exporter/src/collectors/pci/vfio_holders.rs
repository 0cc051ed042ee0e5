//! Who holds the devices bound to vfio-pci: the processes with the device's vfio group
//! (`/dev/vfio/<group>`, `/dev/vfio/noiommu-<group>`) or its vfio cdev
//! (`/dev/vfio/devices/vfio<N>`, 6.2+, used with iommufd) open, found by reading the links in
//! `/proc/<pid>/fd`; for QEMU, the guest's name and UUID from its command line (what libvirt
//! and Nova pass). The container (`/dev/vfio/vfio`) and `/dev/iommu` name no device and are
//! not counted.
//!
//! Reading another user's `/proc/<pid>/fd` links takes ptrace read access (CAP_SYS_PTRACE, or
//! root): without it, those processes are counted as unreadable, not guessed at.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::metrics::Value;
use crate::sysfs::{Entry, SysDir};

use super::{
    Read, VFIO_DEVICE_HOLDERS, VFIO_HOLDER_INFO, VFIO_STALE_HOLDER_INFO, VFIO_UNREADABLE_PROCESSES,
};

/// `/proc/<pid>/cmdline` is read up to this size: libvirt's QEMU command lines run to tens of
/// KiB; anything longer is refused, not cut.
const MAX_CMDLINE_BYTES: usize = 1 << 20;

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

impl Read<'_> {
    /// For every device bound to vfio-pci: the processes holding it, and the processes holding
    /// a vfio node that names no such device any more (its device removed or rebound).
    pub(super) fn vfio_holders(&mut self, devices: &[String]) {
        let collector = self.collector;
        let mut device_of_node: BTreeMap<String, &str> = BTreeMap::new();
        for address in devices {
            let (listed, group) = collector.scrape().vfio_bound.remove(address).unzip();
            let Some(dir) = self.out.optional(collector.device_dir(address, listed)) else {
                continue;
            };
            for node in self.device_nodes(&dir, group.flatten()) {
                device_of_node.insert(node, address);
            }
        }

        let Some(proc) = self.out.reported(SysDir::open(&collector.procfs, "")) else {
            return;
        };
        let scan = self.scan_processes(&proc);
        self.push(
            &VFIO_UNREADABLE_PROCESSES,
            Vec::new(),
            Value::Int(scan.unreadable),
        );
        if scan.unreadable > 0 {
            collector.log_unreadable_processes(scan.unreadable);
        }

        let mut holders: BTreeMap<&str, BTreeSet<Holder>> = BTreeMap::new();
        let mut stale: BTreeSet<(String, Holder)> = BTreeSet::new();
        for (pid, nodes) in scan.holding {
            let holder = self.holder(&proc, pid);
            for node in nodes {
                match device_of_node.get(&node) {
                    Some(address) => {
                        holders.entry(address).or_default().insert(holder.clone());
                    }
                    None => {
                        stale.insert((node, holder.clone()));
                    }
                }
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

    /// The device nodes through which a process reaches this device: its group's node (both
    /// spellings: which one exists depends on no-IOMMU mode) and its cdev, when it has one.
    /// `group`: its IOMMU group as the listing read it, if it did.
    fn device_nodes(&mut self, dir: &SysDir, group: Option<String>) -> Vec<String> {
        let mut nodes = Vec::new();
        let group = group.map_or_else(|| dir.link_target_name("iommu_group"), Ok);
        if let Some(group) = self.out.optional(group) {
            nodes.push(format!("/dev/vfio/{group}"));
            nodes.push(format!("/dev/vfio/noiommu-{group}"));
        }
        let cdevs = dir.subdir("vfio-dev").and_then(SysDir::into_entries);
        for cdev in self.out.optional(cdevs).unwrap_or_default() {
            if let Some(name) = self.out.reported(cdev.into_name()) {
                nodes.push(format!("/dev/vfio/devices/{name}"));
            }
        }
        nodes
    }

    /// Every process's open vfio device nodes, and how many processes' open files could not
    /// be read. A process that exits during the scan is simply gone.
    fn scan_processes(&mut self, proc: &SysDir) -> ProcessScan {
        let mut scan = ProcessScan::default();
        let entries = self.out.reported(proc.entries()).unwrap_or_default();
        for pid in entries.iter().filter_map(process_id) {
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
            let mut nodes = BTreeSet::new();
            let mut denied = false;
            for fd in &entries {
                let Ok(fd) = fd.name() else {
                    continue;
                };
                match fds.link_target(fd) {
                    Ok(target) => nodes.extend(vfio_device_node(&target)),
                    Err(err) if err.is_permission_denied() => denied = true,
                    // Closed since the listing, or the process exited.
                    Err(_) => {}
                }
                if denied {
                    break;
                }
            }
            scan.unreadable += u64::from(denied);
            if !nodes.is_empty() {
                scan.holding.push((pid, nodes));
            }
        }
        scan
    }

    /// Who process `pid` is: its command name and, for QEMU, the guest it runs.
    fn holder(&mut self, proc: &SysDir, pid: u32) -> Holder {
        let comm = proc
            .read(&format!("{pid}/comm"), &mut self.reader)
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
struct ProcessScan {
    /// Processes holding vfio device nodes, and which.
    holding: Vec<(u32, BTreeSet<String>)>,
    /// Processes whose open files could not be read (another user's, without ptrace access).
    unreadable: u64,
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

/// The vfio node an open file is, when it names a device: a group or a device cdev. A node
/// removed while held (its group gone with its last device) reads `/dev/vfio/12 (deleted)`:
/// kept whole, so it never matches a device's node and shows as stale.
fn vfio_device_node(target: &Path) -> Option<String> {
    let target = target.to_str()?;
    let name = target.strip_prefix("/dev/vfio/")?;
    let name = name.strip_suffix(" (deleted)").unwrap_or(name);
    let group = name.strip_prefix("noiommu-").unwrap_or(name);
    let is_group = !group.is_empty() && group.bytes().all(|b| b.is_ascii_digit());
    let is_cdev = name
        .strip_prefix("devices/vfio")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    (is_group || is_cdev).then(|| target.to_string())
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
