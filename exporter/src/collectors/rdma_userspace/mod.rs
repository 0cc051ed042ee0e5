//! `rdma_userspace`: the RDMA userspace libraries as applications load them. For each library
//! watched, every copy on the node's library path and the one the dynamic linker takes
//! (`ld_cache`): the incident where `ldconfig -p` showed a stale `/usr/local/lib64` copy of
//! `libibverbs.so.1` winning over the one OFED had just installed.
//!
//! And for each RDMA device of `--path.sysfs`, the libibverbs provider it needs and whether the
//! resolved libibverbs can load it ([`providers`]).
//!
//! What it read of the library path is kept until the stat of the cache, a config file or a
//! library directory changes (`ld_cache::library_path::Watch`); the providers' check (the
//! libraries' ELF read whole) is kept until the library path or the devices change, or for
//! [`PROVIDERS_MAX_AGE`], since a provider file can go without any of them changing.

mod providers;

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::collector::{
    CollectError, Collector, Host, Output, Registration, Root, Settings, StartError, Started,
};
use crate::ld_cache::library_path::{Libraries, Watch};
use crate::metrics::{Desc, LabelValue, Value};
use crate::sync::lock;
use providers::DeviceProvider;

pub const REGISTRATION: Registration = Registration {
    name: "rdma_userspace",
    enabled_by_default: true,
    help: "The RDMA userspace libraries on the library path under --path.rootfs, the copy the dynamic linker takes (ld.so.cache), and whether each RDMA device's libibverbs provider loads",
    metrics: &METRICS,
    roots: &[Root::Rootfs, Root::Sysfs],
    flags: Vec::new,
    configure: |_| Ok(Box::new(RdmaUserspaceSettings)),
    probe: None,
};

/// The sonames watched: rdma-core's libraries and providers applications link or load, and
/// the libraries the `verbs` and `mic` collectors load.
pub const LIBRARIES: &[&str] = &[
    "libibverbs.so.1",
    "librdmacm.so.1",
    "libibumad.so.3",
    "libmlx5.so.1",
    "libmlx4.so.1",
    "libefa.so.1",
    "libmicmgmt.so.0",
];

const LIBRARY_INFO: Desc = Desc::gauge(
    "hpcnode_rdma_userspace_library_info",
    "A copy of an RDMA userspace library on the library path (ld.so.conf, the default directories, /usr/local/lib64, /usr/local/lib): its path, the version its real file name says, and resolved=\"1\" for the copy the dynamic linker takes (the ld.so.cache entry, or the default directories' first without a cache).",
    None,
);
const LIBRARY_COPIES: Desc = Desc::gauge(
    "hpcnode_rdma_userspace_library_copies",
    "Copies of an RDMA userspace library on the library path (distinct files; a resolved cache entry whose file is gone counts).",
    None,
);

pub const METRICS: [Desc; 3] = [LIBRARY_INFO, LIBRARY_COPIES, providers::DEVICE_PROVIDER];

/// How long a providers' check is kept when neither the library path nor the devices changed:
/// a provider file removed or installed shows within this.
const PROVIDERS_MAX_AGE: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct RdmaUserspaceSettings;

impl Settings for RdmaUserspaceSettings {
    fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError> {
        Ok(Started::new(RdmaUserspaceCollector {
            watch: Watch::new(&host.rootfs, LIBRARIES),
            rootfs: host.rootfs.clone(),
            sysfs: host.sysfs.clone(),
            providers: Mutex::new(None),
        }))
    }
}

struct RdmaUserspaceCollector {
    watch: Watch,
    rootfs: PathBuf,
    sysfs: PathBuf,
    providers: Mutex<Option<KeptProviders>>,
}

/// A providers' check and what it was made from.
struct KeptProviders {
    libraries: Arc<Libraries>,
    devices: Vec<String>,
    made: Instant,
    providers: Vec<DeviceProvider>,
}

impl RdmaUserspaceCollector {
    /// The providers' check for these libraries, made again where it is not fresh.
    fn providers(&self, libraries: &Arc<Libraries>) -> Vec<DeviceProvider> {
        let devices = providers::device_names(&self.sysfs);
        let mut kept = lock(&self.providers);
        let fresh = kept.as_ref().is_some_and(|kept| {
            Arc::ptr_eq(&kept.libraries, libraries)
                && kept.devices == devices
                && kept.made.elapsed() < PROVIDERS_MAX_AGE
        });
        if !fresh {
            let libibverbs = libraries.resolved("libibverbs.so.1");
            *kept = Some(KeptProviders {
                libraries: libraries.clone(),
                providers: providers::device_providers(
                    &self.rootfs,
                    &self.sysfs,
                    libibverbs.as_deref(),
                ),
                devices,
                made: Instant::now(),
            });
        }
        kept.as_ref()
            .map(|kept| kept.providers.clone())
            .unwrap_or_default()
    }
}

/// The one unit: the library path, read once for every library.
struct LibraryPath;

impl fmt::Display for LibraryPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("library_path")
    }
}

impl Collector for RdmaUserspaceCollector {
    type Unit = LibraryPath;

    fn units(&self) -> Result<Vec<LibraryPath>, CollectError> {
        Ok(vec![LibraryPath])
    }

    fn collect_unit(&self, _: &LibraryPath, out: &mut Output) {
        let (libraries, errors) = self.watch.libraries();
        out.errors
            .extend(errors.into_iter().map(CollectError::from));
        for &library in LIBRARIES {
            let copies = libraries.copies(library);
            for copy in copies {
                let labels = [
                    ("library", LabelValue::from(library)),
                    ("path", LabelValue::from(copy.path.clone())),
                    ("version", LabelValue::from(copy.version.clone())),
                    (
                        "resolved",
                        LabelValue::from(if copy.resolved { "1" } else { "0" }),
                    ),
                ];
                out.samples.push(&LIBRARY_INFO, labels, Value::Int(1));
            }
            let labels = [("library", LabelValue::from(library))];
            out.samples
                .push(&LIBRARY_COPIES, labels, Value::Int(copies.len() as u64));
        }
        providers::push_samples(&self.providers(&libraries), &mut out.samples);
    }
}
