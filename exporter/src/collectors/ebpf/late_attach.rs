//! Probes into functions of loadable modules (the vfio probes): attached when their module
//! loads after the exporter started, detached when it unloads, attached again when it reloads
//! (a kprobe into an unloaded module's text is dead for good, even once the module is back).
//!
//! The kernel says when: it sends a uevent on the kobject netlink socket once a module's init
//! has run and when it goes. A thread blocks on that socket and wakes for uevents only (module
//! and device hot-plug, rare on a node). Each scrape checks again, a stat per module, which
//! covers uevents lost to a full socket buffer and a kernel where the socket cannot be opened;
//! there the probe attaches at the first scrape after the load, and what the module did before
//! that scrape is not counted.
//!
//! One load of a module is told from the next by the inode number of `/sys/module/<name>`:
//! kernfs numbers its nodes cyclically, so a reloaded module's directory never gets the number
//! of the one before, and a reload between two checks is seen as one. It is read through the
//! rooted reader ([`SysDir`]) under `--path.sysfs`, as every other sysfs read.
//!
//! Netlink: this file opens a NETLINK_KOBJECT_UEVENT socket (receive only, kernel group), the
//! one netlink socket outside `socket.rs`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::sysfs::SysDir;

/// Which load of a probe's target module is in the kernel: the inode number of the
/// `/sys/module` directory of the first of its modules that is loaded (they are listed in the
/// order their functions are tried: loading vfio_pci after vfio_pci_core changes nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Loads(Option<u64>);

impl Loads {
    pub fn read(sysfs: &Path, modules: &[&str]) -> Loads {
        let Ok(dir) = SysDir::open(sysfs, "module") else {
            return Loads(None);
        };
        // One listing gives every module directory's inode number.
        let Ok(listed) = dir.entries_with_inodes() else {
            return Loads(None);
        };
        Loads(modules.iter().find_map(|module| {
            let (_, inode) = listed
                .iter()
                .find(|(entry, _)| entry.name().is_ok_and(|name| name == *module))?;
            loadable(&dir, module).then_some(*inode)
        }))
    }

    pub fn any(&self) -> bool {
        self.0.is_some()
    }
}

/// A loadable module's directory has `initstate`; a built-in module's (there for its
/// parameters) has not, and its functions are in vmlinux for good.
fn loadable(modules: &SysDir, module: &str) -> bool {
    modules
        .subdir(module)
        .is_ok_and(|dir| dir.stamp("initstate").is_ok())
}

/// What a probe into modules needs done, given the loads it last acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing changed since the last step: whatever it did stands.
    Stay,
    /// Every target module is gone: detach (the counts stay).
    Detach,
    /// A target module loaded or reloaded: attach, again if it was attached before.
    Attach,
}

pub fn step(last: &Loads, now: &Loads, attached: bool) -> Step {
    if last == now {
        Step::Stay
    } else if now.any() {
        Step::Attach
    } else if attached {
        Step::Detach
    } else {
        Step::Stay
    }
}

/// The module a kernel uevent is about, when it is a module's load (`add`) or unload
/// (`remove`): `ACTION@DEVPATH` then `KEY=value` fields, NUL-separated.
pub fn module_uevent(message: &[u8]) -> Option<&str> {
    let mut fields = message.split(|&byte| byte == 0);
    let header = std::str::from_utf8(fields.next()?).ok()?;
    let (action, devpath) = header.split_once('@')?;
    if !matches!(action, "add" | "remove") {
        return None;
    }
    let module = devpath.strip_prefix("/module/")?;
    let subsystem_is_module = fields.any(|field| field == b"SUBSYSTEM=module");
    (subsystem_is_module && !module.is_empty() && !module.contains('/')).then_some(module)
}

/// The kernel's uevents (netlink multicast group 1; udev's own messages go to group 2).
const KERNEL_UEVENTS: u32 = 1;
/// Larger than any uevent (the kernel caps one at 2 KiB of environment).
const UEVENT_BUFFER: usize = 8192;

/// Opens the kernel's uevent socket and calls `on_module` from a thread of its own for every
/// module load and unload, with the module's name, or with `None` where uevents were lost
/// (the socket's buffer overflowed) and every module must be checked.
pub fn watch_module_uevents(
    on_module: impl Fn(Option<&str>) + Send + 'static,
) -> Result<(), std::io::Error> {
    let socket = uevent_socket()?;
    std::thread::Builder::new()
        .name("hpcnode-module-uevents".into())
        .spawn(move || {
            let mut buffer = vec![0u8; UEVENT_BUFFER];
            loop {
                match receive_from_kernel(&socket, &mut buffer) {
                    Ok(Some(len)) => {
                        if let Some(module) = module_uevent(&buffer[..len]) {
                            on_module(Some(module));
                        }
                    }
                    Ok(None) => {}
                    Err(err) if err.raw_os_error() == Some(libc::ENOBUFS) => on_module(None),
                    Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(err) => {
                        crate::logging::log(
                            crate::logging::Level::Warn,
                            "module uevents no longer read; probes into modules attach at scrapes",
                            &[("err", &err.to_string())],
                        );
                        return;
                    }
                }
            }
        })?;
    Ok(())
}

fn uevent_socket() -> Result<OwnedFd, std::io::Error> {
    // SAFETY: plain socket(2) call; the fd is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_KOBJECT_UEVENT,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a socket just opened and owned by nothing else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl is plain integers, valid all zero.
    let mut address: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    address.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    address.nl_groups = KERNEL_UEVENTS;
    // SAFETY: address is a sockaddr_nl of the size given, alive for the call.
    let rc = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            std::ptr::from_ref(&address).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(socket)
}

/// One datagram's length, or `None` for one not sent by the kernel (a process may send to
/// the group too, and must not make the exporter re-attach).
fn receive_from_kernel(
    socket: &OwnedFd,
    buffer: &mut [u8],
) -> Result<Option<usize>, std::io::Error> {
    // SAFETY: sockaddr_nl is plain integers, valid all zero.
    let mut sender: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    let mut sender_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
    // SAFETY: buffer and sender are writable for the lengths given, alive for the call.
    let len = unsafe {
        libc::recvfrom(
            socket.as_raw_fd(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            0,
            std::ptr::from_mut(&mut sender).cast(),
            &mut sender_len,
        )
    };
    if len < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((sender.nl_pid == 0).then_some(len as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn steps_follow_module_loads() {
        let absent = Loads(None);
        let first = Loads(Some(4211));
        let reloaded = Loads(Some(4388));
        // Waiting, and still nothing loaded.
        assert_eq!(step(&absent, &absent, false), Step::Stay);
        // The module loads after start.
        assert_eq!(step(&absent, &first, false), Step::Attach);
        assert_eq!(step(&first, &first, true), Step::Stay);
        // Unload and reload between two checks: a new directory, attach again.
        assert_eq!(step(&first, &reloaded, true), Step::Attach);
        // Unloaded: detach; an attach that failed is not retried for the same load.
        assert_eq!(step(&reloaded, &absent, true), Step::Detach);
        assert_eq!(step(&first, &first, false), Step::Stay);
        assert_eq!(step(&first, &absent, false), Step::Stay);
    }

    #[test]
    fn loads_come_from_sys_module_and_ignore_built_in_modules() {
        let sysfs = tempfile::tempdir().unwrap();
        let module = |name: &str, loadable: bool| {
            let dir = sysfs.path().join("module").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            if loadable {
                std::fs::write(dir.join("initstate"), "live\n").unwrap();
            }
            std::fs::metadata(&dir).unwrap().ino()
        };
        let vfio_pci_core = module("vfio_pci_core", true);
        module("vfio_pci", false); // built in, parameters only
        let now = Loads::read(sysfs.path(), &["absent", "vfio_pci", "vfio_pci_core"]);
        assert_eq!(now, Loads(Some(vfio_pci_core)));
        assert!(now.any());
        assert!(!Loads::read(sysfs.path(), &["vfio_pci"]).any());
        // The first loaded module of the list decides: another one loading changes nothing.
        let vfio_pci = module("vfio_pci", true);
        let both = Loads::read(sysfs.path(), &["vfio_pci_core", "vfio_pci"]);
        assert_eq!(both, Loads(Some(vfio_pci_core)));
        let reversed = Loads::read(sysfs.path(), &["vfio_pci", "vfio_pci_core"]);
        assert_eq!(reversed, Loads(Some(vfio_pci)));
        // Reloaded: a new directory (a new inode, as kernfs gives it).
        let dir = sysfs.path().join("module/vfio_pci_core");
        std::fs::rename(&dir, sysfs.path().join("module/old")).unwrap();
        let reloaded = module("vfio_pci_core", true);
        assert_ne!(reloaded, vfio_pci_core);
        let now = Loads::read(sysfs.path(), &["vfio_pci_core"]);
        assert_eq!(now, Loads(Some(reloaded)));
    }

    #[test]
    fn module_uevents_name_the_module() {
        // As the kernel sends them (lib/kobject_uevent.c), with the fields of a module load.
        let add = b"add@/module/vfio_pci_core\0ACTION=add\0DEVPATH=/module/vfio_pci_core\0SUBSYSTEM=module\0SEQNUM=1843\0";
        assert_eq!(module_uevent(add), Some("vfio_pci_core"));
        let remove = b"remove@/module/vfio_iommu_type1\0ACTION=remove\0DEVPATH=/module/vfio_iommu_type1\0SUBSYSTEM=module\0SEQNUM=1850\0";
        assert_eq!(module_uevent(remove), Some("vfio_iommu_type1"));
        // Device events, other actions and malformed messages are not module loads.
        let device = b"add@/devices/pci0000:00/0000:00:04.0/0000:01:00.0/vfio-dev/vfio0\0ACTION=add\0SUBSYSTEM=vfio-dev\0";
        assert_eq!(module_uevent(device), None);
        let change = b"change@/module/vfio\0ACTION=change\0SUBSYSTEM=module\0";
        assert_eq!(module_uevent(change), None);
        let spoofed = b"add@/module/vfio\0ACTION=add\0SUBSYSTEM=block\0";
        assert_eq!(module_uevent(spoofed), None);
        assert_eq!(module_uevent(b"libudev\0\xfe\xed"), None);
        assert_eq!(module_uevent(b""), None);
    }
}
