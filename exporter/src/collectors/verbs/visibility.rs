//! Which RDMA devices the loaded libibverbs returns from `ibv_get_device_list`, against
//! `<sysfs>/class/infiniband`: `hpcnode_rdma_device_visible_to_verbs{device}` 0 is a device
//! the kernel has and applications cannot open (no provider for it, a provider of another
//! ABI, no uverbs device). Asked at the first scrape and again whenever the set of devices in
//! sysfs changes, so a scrape costs one directory listing. libibverbs loads its providers once
//! per process (`load_drivers` in rdma-core's `libibverbs/init.c`, on the first device list):
//! a provider removed or installed after the exporter started changes what it sees only after
//! a restart, as for any application. libibverbs reads the running kernel's `/sys`, not
//! `--path.sysfs`.

use std::path::Path;
use std::sync::Mutex;

use crate::error::{CollectError, ErrorKind};
use crate::metrics::{Desc, Samples, Value};
use crate::sync::lock;
use crate::sysfs::SysDir;

#[cfg(test)]
mod tests;

pub(super) const VISIBLE: Desc = Desc::gauge(
    "hpcnode_rdma_device_visible_to_verbs",
    "1 when ibv_get_device_list of the libibverbs the exporter loaded (the dynamic linker's choice, as an application's) returns the RDMA device sysfs has, 0 when it does not.",
    None,
);

/// Whether to ask (and, unconfigured, to load libibverbs for it): only for the running kernel
/// (libibverbs reads `/sys`, whatever `--path.sysfs` says: against another tree the comparison
/// means nothing) and where it has an RDMA device, so that a node without RDMA never loads it.
pub(super) fn worth_asking(sysfs: &Path) -> bool {
    sysfs == Path::new("/sys")
        && SysDir::open(sysfs, "class/infiniband")
            .and_then(|class| class.entries())
            .is_ok_and(|devices| !devices.is_empty())
}

/// sysfs's devices, and each with whether verbs listed it.
type Compared = (Vec<String>, Vec<(String, bool)>);

/// The last comparison.
#[derive(Default)]
pub(super) struct Visibility {
    last: Mutex<Option<Compared>>,
}

impl Visibility {
    /// One sample per device in sysfs; `list` (`ibv_get_device_list`'s names) is called only
    /// when sysfs's devices differ from the last call's. A failed list is an error, and is
    /// asked again at the next scrape.
    pub(super) fn collect<E: std::fmt::Display>(
        &self,
        sysfs: &Path,
        list: impl FnOnce() -> Result<Vec<String>, E>,
        samples: &mut Samples,
    ) -> Result<(), CollectError> {
        let devices = sysfs_devices(sysfs);
        let mut last = lock(&self.last);
        if last.as_ref().is_none_or(|(seen, _)| *seen != devices) {
            let listed = list().map_err(|err| {
                *last = None;
                CollectError::new(ErrorKind::Io, format!("ibv_get_device_list: {err}"))
            })?;
            let visible = devices
                .iter()
                .map(|device| (device.clone(), listed.contains(device)))
                .collect();
            *last = Some((devices, visible));
        }
        for (device, visible) in last
            .as_ref()
            .map(|(_, visible)| visible)
            .into_iter()
            .flatten()
        {
            let labels = vec![("device", device.clone().into())];
            samples.push(&VISIBLE, labels, Value::Int(u64::from(*visible)));
        }
        Ok(())
    }
}

/// The names of `<sysfs>/class/infiniband`, sorted; none when the class is absent.
fn sysfs_devices(sysfs: &Path) -> Vec<String> {
    let entries = SysDir::open(sysfs, "class/infiniband").and_then(|dir| dir.entries());
    let entries = entries.unwrap_or_default();
    entries
        .into_iter()
        .filter_map(|entry| entry.into_name().ok())
        .collect()
}
