//! Which libibverbs provider each RDMA device needs, and whether the libibverbs applications
//! resolve can load it: `hpcnode_rdma_device_provider{device,provider,status}`.
//!
//! How libibverbs loads providers (rdma-core `libibverbs/dynamic_driver.c`, `load_drivers`):
//! it reads every regular file of `IBV_CONFIG_DIR` (`/etc/libibverbs.d`, fixed at build time by
//! `buildlib/config.h.in`), each `driver <name>` line naming a provider; for each it dlopens
//! `VERBS_PROVIDER_DIR "/lib<name>" VERBS_PROVIDER_SUFFIX`, the provider directory also fixed
//! at build time (`/usr/lib/x86_64-linux-gnu/libibverbs` on Debian), and where that fails
//! `lib<name>` `VERBS_PROVIDER_SUFFIX` through the dynamic linker's search path; a name that
//! is an absolute path is opened as that path plus the suffix. The suffix is
//! `-rdmav<IBVERBS_PABI_VERSION>.so` (rdma-core 44: 34, 33.2: 33). The provider path and the
//! config directory are strings in the library: `"/usr/lib/x86_64-linux-gnu/libibverbs/lib%s-rdmav34.so"`
//! and `"/etc/libibverbs.d"` in Debian's libibverbs 44, which is where they are read from here.
//! A provider built for another private ABI needs `IBVERBS_PRIVATE_<NN>` of `libibverbs.so.1`
//! (its `.gnu.version_r`), which that libibverbs does not define: dlopen fails. An application's
//! `RDMAV_DRIVERS` and `IBV_DRIVERS` are not seen here.
//!
//! Statuses, in the order they are decided:
//! - `unknown_driver`: the device's driver is not one a provider serves (the table below);
//! - `missing`: no libibverbs resolved, no `driver` line names the provider, or no provider file
//!   where libibverbs looks (its provider directory, else the library directories);
//! - `abi_mismatch`: the provider file exists only for another private ABI
//!   (`lib<name>-rdmav<other>.so`), or it needs a version of `libibverbs.so.1` that the resolved
//!   libibverbs does not define;
//! - `no_uverbs`: no `class/infiniband_verbs/uverbs*` whose `ibdev` names the device (ib_uverbs
//!   not loaded): verbs cannot open it whatever the libraries;
//! - `ok`.

use std::path::{Path, PathBuf};

use crate::elf_versions::{self, SharedObject};
use crate::metrics::{Desc, Samples, Value};
use crate::sysfs::SysDir;

#[cfg(test)]
mod tests;

pub const DEVICE_PROVIDER: Desc = Desc::gauge(
    "hpcnode_rdma_device_provider",
    "1 for each RDMA device, with the libibverbs provider its driver needs and whether the resolved libibverbs can load it (ok, missing, abi_mismatch, no_uverbs, unknown_driver).",
    None,
);

/// The largest library read (MLNX_OFED's libmlx5 is under 2 MiB).
const MAX_LIBRARY_BYTES: usize = 32 << 20;
/// The largest `.driver` file read (Debian's are one line).
const MAX_CONFIG_BYTES: usize = 64 << 10;
/// `.driver` files read at most.
const MAX_CONFIG_FILES: usize = 256;

/// Where libibverbs looks for the providers when its own strings do not say (rdma-core's
/// defaults: `CMAKE_INSTALL_SYSCONFDIR`), and the library directories its fallback dlopen
/// searches besides the directory of the resolved libibverbs (glibc's trusted directories and
/// the `/usr/local` ones a source install uses).
const DEFAULT_CONFIG_DIR: &str = "/etc/libibverbs.d";
const LIBRARY_DIRS: [&str; 6] = [
    "/usr/local/lib64",
    "/usr/local/lib",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// The kernel driver bound to an RDMA device's parent (`device/driver`) and the provider
/// rdma-core matches its devices with. rdma-core matches by PCI id or by the kernel's
/// `RDMA_DRIVER_*` id (each provider's `VERBS_PCI_MATCH`/`VERBS_DRIVER_ID` table in
/// `providers/<name>/<name>.c`); the parent is the PCI function for the drivers below, so its
/// driver stands for the id: `ibdev.dev.parent = &pdev->dev` in irdma (`irdma/verbs.c`,
/// parent bound to ice, or i40e for X722), cxgb4 (`iw_cxgb4/provider.c`), qedr
/// (`qedr/main.c`, parent bound to qede); mlx5_ib's `mdev->device` (`mlx5/main.c`), bnxt_re's
/// `en_dev->pdev`, ocrdma's `nic_info.pdev` (be2net), hns's `hr_dev->dev` (hns3), mana_ib's
/// `gc->dev` (mana). ib_qib's devices use the ipathverbs provider (`providers/ipathverbs`).
const PROVIDERS: [(&str, &str); 19] = [
    ("mlx5_core", "mlx5"),
    ("mlx4_core", "mlx4"),
    ("ib_mthca", "mthca"),
    ("efa", "efa"),
    ("ice", "irdma"),
    ("i40e", "irdma"),
    ("irdma", "irdma"),
    ("bnxt_en", "bnxt_re"),
    ("qede", "qedr"),
    ("hfi1", "hfi1verbs"),
    ("ib_qib", "ipathverbs"),
    ("vmw_pvrdma", "vmw_pvrdma"),
    ("hns3", "hns"),
    ("hns_roce_hw_v2", "hns"),
    ("cxgb4", "cxgb4"),
    ("be2net", "ocrdma"),
    ("mana", "mana"),
    ("erdma", "erdma"),
    ("rdma_rxe", "rxe"),
];

/// Virtual devices have no parent device and so no driver link: rdma-core matches them by
/// name (`VERBS_NAME_MATCH("rxe", NULL)` in `providers/rxe/rxe.c`, `("siw", NULL)` in
/// `providers/siw/siw.c`), and so does this, by the name's prefix.
const BY_NAME: [(&str, &str); 2] = [("rxe", "rxe"), ("siw", "siw")];

/// One RDMA device: what drives it and whether verbs can use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProvider {
    pub device: String,
    /// The driver bound to its parent device, none for a virtual device.
    pub driver: Option<String>,
    /// The provider libibverbs loads for it, none for an unknown driver.
    pub provider: Option<&'static str>,
    pub status: ProviderStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderStatus {
    Ok,
    Missing,
    /// No `libibverbs.so.1` on the library path: the node has no verbs userspace (kernel
    /// consumers such as NFS over RDMA or Lustre's o2ib need none), not a fault.
    NoLibibverbs,
    AbiMismatch,
    NoUverbs,
    UnknownDriver,
}

impl ProviderStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderStatus::Ok => "ok",
            ProviderStatus::Missing => "missing",
            ProviderStatus::NoLibibverbs => "no_libibverbs",
            ProviderStatus::AbiMismatch => "abi_mismatch",
            ProviderStatus::NoUverbs => "no_uverbs",
            ProviderStatus::UnknownDriver => "unknown_driver",
        }
    }
}

/// The provider of each device of `<sysfs>/class/infiniband`, checked against `libibverbs`, the
/// copy the dynamic linker resolves (a path inside `rootfs`; `None`: none resolves). A sysfs
/// without the class gives no device.
pub fn device_providers(
    rootfs: &Path,
    sysfs: &Path,
    libibverbs: Option<&Path>,
) -> Vec<DeviceProvider> {
    let Ok(class) = SysDir::open(sysfs, "class/infiniband") else {
        return Vec::new();
    };
    let devices = class.entries().unwrap_or_default();
    let uverbs = uverbs_devices(sysfs);
    let root = SysDir::open(rootfs, "").ok();
    let loader = root
        .as_ref()
        .zip(libibverbs)
        .and_then(|(root, path)| Loader::read(root, path));
    devices
        .iter()
        .filter_map(|entry| entry.name().ok())
        .map(|device| {
            let driver = class
                .link_target_name(&format!("{device}/device/driver"))
                .ok();
            let provider = provider_of(device, driver.as_deref());
            let status = match (provider, root.as_ref().zip(loader.as_ref())) {
                (None, _) => ProviderStatus::UnknownDriver,
                // The linker's entry names a file that cannot be read: applications fail too.
                (Some(_), None) if libibverbs.is_some() => ProviderStatus::Missing,
                (Some(_), None) => ProviderStatus::NoLibibverbs,
                (Some(provider), Some((root, loader))) => match loader.check(root, provider) {
                    ProviderStatus::Ok if !uverbs.iter().any(|name| name == device) => {
                        ProviderStatus::NoUverbs
                    }
                    status => status,
                },
            };
            DeviceProvider {
                device: device.to_string(),
                driver,
                provider,
                status,
            }
        })
        .collect()
}

/// The names of the RDMA devices and of the verbs devices (`uverbs*`) of `sysfs`: what a
/// providers' check depends on in sysfs.
pub fn device_names(sysfs: &Path) -> Vec<String> {
    ["class/infiniband", "class/infiniband_verbs"]
        .iter()
        .flat_map(|class| {
            let names = SysDir::open(sysfs, class)
                .and_then(|dir| dir.entries())
                .unwrap_or_default();
            let mut names: Vec<String> = names
                .iter()
                .filter_map(|entry| entry.name().ok().map(str::to_string))
                .collect();
            names.sort();
            names
        })
        .collect()
}

/// `hpcnode_rdma_device_provider` for each device.
pub fn push_samples(providers: &[DeviceProvider], samples: &mut Samples) {
    for provider in providers {
        let labels = vec![
            ("device", provider.device.clone().into()),
            ("provider", provider.provider.unwrap_or_default().into()),
            ("status", provider.status.as_str().into()),
        ];
        samples.push(&DEVICE_PROVIDER, labels, Value::Int(1));
    }
}

/// The provider rdma-core loads for a device with this driver (or, without one, this name).
fn provider_of(device: &str, driver: Option<&str>) -> Option<&'static str> {
    match driver {
        Some(driver) => PROVIDERS.iter().find(|(name, _)| *name == driver),
        None => BY_NAME
            .iter()
            .find(|(prefix, _)| device.starts_with(prefix)),
    }
    .map(|(_, provider)| *provider)
}

/// The devices ib_uverbs made a character device for: `class/infiniband_verbs/uverbs<N>/ibdev`.
fn uverbs_devices(sysfs: &Path) -> Vec<String> {
    let Ok(class) = SysDir::open(sysfs, "class/infiniband_verbs") else {
        return Vec::new();
    };
    let entries = class.entries().unwrap_or_default();
    let names = entries.iter().filter_map(|entry| entry.name().ok());
    names
        .filter(|name| name.starts_with("uverbs"))
        .filter_map(|name| class.read_text_file(&format!("{name}/ibdev"), 4096).ok())
        .map(|ibdev| ibdev.trim().to_string())
        .collect()
}

/// What the resolved libibverbs says about how it loads providers.
struct Loader {
    library: SharedObject,
    /// The directory it was resolved in, inside the root.
    library_dir: PathBuf,
    /// `VERBS_PROVIDER_DIR`, if it was built with one.
    provider_dir: Option<String>,
    /// `IBVERBS_PABI_VERSION`, as the suffix `-rdmav<NN>.so` has it.
    abi: String,
    config_dir: String,
}

impl Loader {
    fn read(root: &SysDir, path: &Path) -> Option<Loader> {
        let bytes = root.read_file(&inside(path), MAX_LIBRARY_BYTES).ok()?;
        let keep = |text: &str| text.contains("lib%s-rdmav") || text.ends_with("/libibverbs.d");
        let library = elf_versions::read_shared_object(&bytes, keep).ok()?;
        let template = library.strings.iter().find_map(|text| {
            let (prefix, suffix) = text.rsplit_once("lib%s-rdmav")?;
            let abi = suffix.strip_suffix(".so")?;
            let dir = prefix.strip_suffix('/').filter(|dir| dir.starts_with('/'));
            Some((dir.map(str::to_string), abi.to_string()))
        });
        // Without the template, the ABI the private versions it defines name.
        let (provider_dir, abi) = match template {
            Some(template) => template,
            None => (None, newest_private_abi(&library)?),
        };
        let config_dir = library
            .strings
            .iter()
            .find(|text| text.starts_with('/') && text.ends_with("/libibverbs.d"))
            .map_or(DEFAULT_CONFIG_DIR.to_string(), String::clone);
        Some(Loader {
            library_dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            library,
            provider_dir,
            abi,
            config_dir,
        })
    }

    fn check(&self, root: &SysDir, provider: &str) -> ProviderStatus {
        let Some(name) = self.configured(root, provider) else {
            return ProviderStatus::Missing;
        };
        let suffix = format!("-rdmav{}.so", self.abi);
        let candidates: Vec<PathBuf> = if name.starts_with('/') {
            vec![PathBuf::from(format!("{name}{suffix}"))]
        } else {
            let file = format!("lib{name}{suffix}");
            let dirs = self.provider_dir.iter().map(PathBuf::from);
            let dirs = dirs.chain([self.library_dir.clone()]);
            dirs.chain(LIBRARY_DIRS.iter().map(PathBuf::from))
                .map(|dir| dir.join(&file))
                .collect()
        };
        let found = candidates.iter().find_map(|path| {
            let bytes = root.read_file(&inside(path), MAX_LIBRARY_BYTES).ok()?;
            Some(elf_versions::read_shared_object(&bytes, |_| false))
        });
        match found {
            Some(Ok(object)) => {
                let defined = |version: &str| self.library.defines(version);
                match object.needs_of("libibverbs.so.1").all(defined) {
                    true => ProviderStatus::Ok,
                    false => ProviderStatus::AbiMismatch,
                }
            }
            // A file of that name that is no shared object does not load either.
            Some(Err(_)) => ProviderStatus::AbiMismatch,
            None if self.other_abi_present(root, &name) => ProviderStatus::AbiMismatch,
            None => ProviderStatus::Missing,
        }
    }

    /// The name a `driver` line of the config directory gives the provider: the provider's
    /// own, or an absolute path ending in `lib<provider>` (`read_config_file`'s syntax).
    fn configured(&self, root: &SysDir, provider: &str) -> Option<String> {
        let dir = root.subdir(&inside(Path::new(&self.config_dir))).ok()?;
        let entries = dir.entries().ok()?;
        let names = entries.iter().filter_map(|entry| entry.name().ok());
        names
            .take(MAX_CONFIG_FILES)
            .filter_map(|file| dir.read_text_file(file, MAX_CONFIG_BYTES).ok())
            .flat_map(|text| driver_lines(&text))
            .find(|name| {
                name == provider
                    || name.starts_with('/') && name.ends_with(&format!("/lib{provider}"))
            })
    }

    /// Whether the provider directory has this provider for another private ABI.
    fn other_abi_present(&self, root: &SysDir, name: &str) -> bool {
        let Some(dir) = &self.provider_dir else {
            return false;
        };
        let Ok(dir) = root.subdir(&inside(Path::new(dir))) else {
            return false;
        };
        let prefix = format!("lib{name}-rdmav");
        let entries = dir.entries().unwrap_or_default();
        entries
            .iter()
            .filter_map(|entry| entry.name().ok())
            .any(|file| {
                file.strip_prefix(&prefix)
                    .and_then(|rest| rest.strip_suffix(".so"))
                    .is_some_and(|abi| !abi.is_empty() && abi.bytes().all(|b| b.is_ascii_digit()))
            })
    }
}

/// The names of a `.driver` file's `driver <name>` lines: leading blanks skipped, `#` lines
/// and blank lines ignored, fields split at blanks (`read_config_file`).
fn driver_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split([' ', '\t']).filter(|field| !field.is_empty());
            match (fields.next(), fields.next()) {
                (Some("driver"), Some(name)) => Some(name.to_string()),
                _ => None,
            }
        })
        .collect()
}

/// The largest `NN` of the `IBVERBS_PRIVATE_<NN>` versions a libibverbs defines.
fn newest_private_abi(library: &SharedObject) -> Option<String> {
    let abis = library.definitions.iter();
    let abis = abis.filter_map(|version| version.strip_prefix("IBVERBS_PRIVATE_")?.parse().ok());
    abis.max().map(|abi: u32| abi.to_string())
}

/// A path inside the root as [`SysDir`] takes it: relative to the root.
fn inside(path: &Path) -> String {
    path.to_string_lossy().trim_start_matches('/').to_string()
}
