//! The Nova unit: each Nova config's `[pci]` device_spec and alias options (parsed by
//! `nova.rs`) checked against the PCI devices present, as Nova would match them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::collector::{CollectError, ErrorKind, Output};
use crate::metrics::{LabelValue, Value};
use crate::sync::lock;
use crate::sysfs::{FileStamp, NamedFile, SysDir, SysfsError, UnitRead};

use super::identity::{parse_id, read_identity, Identity};
use super::nova::{self, Alias, DeviceType, NovaConfig, PciIdentity, Problem};
use super::{
    Read, DEVICES_DIR, NOVA_ALIAS_DEFINITIONS, NOVA_ALIAS_DEVICES, NOVA_ALIAS_MISMATCH,
    NOVA_CONFIG_ERRORS, NOVA_CONFIG_VALID, NOVA_SCHEDULER_PCI_FILTER, NOVA_SPEC_DEVICES,
};
use crate::sysfs::Stamped;

/// The filter nova-scheduler needs to place any PCI request on a host with the devices
/// (`nova/scheduler/filters/pci_passthrough_filter.py`).
const PCI_PASSTHROUGH_FILTER: &str = "PciPassthroughFilter";
/// nova.conf with its comments is about 200 KiB.
const CONFIG_FILE_LIMIT: usize = 4 << 20;

/// The Nova config files given, each once in the order given, with what was parsed from each,
/// kept while the file's stamp stays the same: parsing compiles its address regexes, and the
/// listing and the nova unit both need it every scrape.
#[derive(Default)]
pub(super) struct NovaFiles(Vec<(PathBuf, Stamped<FileStamp, NovaConfig>)>);

impl NovaFiles {
    pub(super) fn new(paths: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut files: Vec<(PathBuf, Stamped<FileStamp, NovaConfig>)> = Vec::new();
        for path in paths {
            if !files.iter().any(|(given, _)| *given == path) {
                files.push((path, Stamped::default()));
            }
        }
        NovaFiles(files)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each file's config in the order given, parsed again only when the file changed since
    /// it last was.
    pub(super) fn read(&self) -> NovaRead {
        let configs = self
            .0
            .iter()
            .map(|(path, kept)| read_nova_config(path, kept));
        NovaRead(configs.collect())
    }
}

/// One scrape's read of the Nova config files, in the order given: the listing selects devices
/// by it and the nova unit checks and reports it, so both see the same files and the errors
/// reported are those of the read the devices were chosen by.
#[derive(Default)]
pub(super) struct NovaRead(Vec<Result<Arc<NovaConfig>, SysfsError>>);

impl NovaRead {
    /// The configs that could be read.
    pub(super) fn configs(&self) -> impl Iterator<Item = &NovaConfig> {
        self.0.iter().filter_map(|config| config.as_deref().ok())
    }
}

/// A config file named by a flag (it is not under a root: the flag names it), read whole
/// unless `kept` holds what was parsed from it as it is.
fn read_nova_config(
    path: &Path,
    kept: &Stamped<FileStamp, NovaConfig>,
) -> Result<Arc<NovaConfig>, SysfsError> {
    let file = NamedFile::open(path)?;
    if let Some(config) = kept.get(&file.stamp()) {
        return Ok(config);
    }
    let bytes = file.read(CONFIG_FILE_LIMIT)?;
    let config = nova::parse_config(&String::from_utf8_lossy(&bytes));
    Ok(kept.keep(file.stamp(), config))
}

/// What Nova matches a present device against; `with_netdevs` lists its network interfaces
/// too (only `devname` specs need them), the entries whose names are unusable going to
/// `unnamed`.
pub(super) fn nova_identity(
    dir: &SysDir,
    identity: &Identity,
    with_netdevs: bool,
    unnamed: &mut Vec<SysfsError>,
) -> PciIdentity {
    let entries = match with_netdevs {
        true => dir.subdir("net").and_then(SysDir::into_entries),
        false => Ok(Vec::new()),
    };
    let mut netdevs = Vec::new();
    for entry in entries.unwrap_or_default() {
        match entry.into_name() {
            Ok(name) => netdevs.push(name),
            Err(err) => unnamed.push(err),
        }
    }
    PciIdentity {
        address: identity.address,
        vendor: identity.vendor,
        device: identity.device,
        netdevs,
    }
}

/// The Nova device type of a present device: type-VF with a `physfn` link, type-PF with an
/// SR-IOV capability (`sriov_totalvfs`), else type-PCI.
fn nova_device_type(dir: &SysDir, unit: &mut UnitRead<'_, Output>) -> DeviceType {
    DeviceType::of(
        dir.link_target_name("physfn").is_ok(),
        unit.unheld(dir, "sriov_totalvfs").is_ok(),
    )
}

/// A config file read: its path, the path as a label, and what it holds.
type Config<'p> = (&'p Path, LabelValue, Arc<NovaConfig>);

impl Read<'_> {
    /// Nova's `[pci]` options against the devices present, aliases across the files, and the
    /// scheduler's filters.
    pub(super) fn nova(&mut self) {
        let collector = self.collector;
        // The listing's read; read here only where no listing left one.
        let read = lock(&collector.scrape).nova.take();
        let read = read.unwrap_or_else(|| collector.nova.read());
        let paths = collector.nova.0.iter().map(|(path, _)| path.as_path());
        let configs: Vec<_> = paths
            .zip(read.0)
            .filter_map(|(path, config)| self.config_validity(path, config))
            .collect();
        self.scheduler_filter(&configs);
        self.alias_definitions(&configs);
        let Some(present) = self.present_devices() else {
            return;
        };
        self.spec_devices(&configs, &present);
        self.alias_devices(&configs, &present);
    }

    /// A config file's validity and its errors by reason; the config, where it was read.
    fn config_validity<'p>(
        &mut self,
        path: &'p Path,
        config: Result<Arc<NovaConfig>, SysfsError>,
    ) -> Option<Config<'p>> {
        let label: LabelValue = path.display().to_string().into();
        let config = match config {
            Ok(config) => config,
            Err(err) => {
                self.error(err);
                self.flag(&NOVA_CONFIG_VALID, vec![("path", label.clone())], false);
                self.push(
                    &NOVA_CONFIG_ERRORS,
                    vec![
                        ("path", label),
                        ("reason", Problem::Unreadable.as_str().into()),
                    ],
                    Value::Int(1),
                );
                return None;
            }
        };
        let mut by_reason: BTreeMap<Problem, u64> = BTreeMap::new();
        for (problem, reason) in &config.errors {
            *by_reason.entry(*problem).or_default() += 1;
            self.unit.out().errors.push(CollectError::new(
                ErrorKind::Parse,
                format!("nova config {}: {reason}", path.display()),
            ));
        }
        self.flag(
            &NOVA_CONFIG_VALID,
            vec![("path", label.clone())],
            config.errors.is_empty(),
        );
        for (problem, count) in by_reason {
            self.push(
                &NOVA_CONFIG_ERRORS,
                vec![("path", label.clone()), ("reason", problem.as_str().into())],
                Value::Int(count),
            );
        }
        Some((path, label, config))
    }

    /// Every present device with its Nova identity and type; none when the devices cannot be
    /// listed (reported).
    fn present_devices(&mut self) -> Option<Vec<(PciIdentity, DeviceType)>> {
        let devices = self.unit.reported(self.collector.sysfs_dir(DEVICES_DIR))?;
        let entries = self.unit.reported(devices.entries())?;
        let mut present = Vec::new();
        let mut unnamed = Vec::new();
        for entry in entries {
            // An unusable name here is a unit of its own, which reports it.
            let Ok(address) = entry.into_name() else {
                continue;
            };
            let Ok(dir) = devices.link_dir(&address) else {
                continue;
            };
            if let Some(identity) = read_identity(&address, |name| {
                parse_id(self.unit.unheld(&dir, name).ok()?)
            }) {
                let nova = nova_identity(&dir, &identity, true, &mut unnamed);
                present.push((nova, nova_device_type(&dir, &mut self.unit)));
            }
        }
        for err in unnamed {
            self.error(err);
        }
        Some(present)
    }

    /// How many present devices each device_spec matches.
    fn spec_devices(&mut self, configs: &[Config<'_>], present: &[(PciIdentity, DeviceType)]) {
        for (_, path, config) in configs {
            for spec in &config.specs {
                let count = present.iter().filter(|(d, _)| spec.matches(d)).count();
                self.push(
                    &NOVA_SPEC_DEVICES,
                    vec![
                        ("path", path.clone()),
                        ("option", spec.option.into()),
                        ("spec", spec.text.clone().into()),
                    ],
                    Value::Int(count as u64),
                );
            }
        }
    }

    /// How many devices of Nova's pool each alias can allocate, and those of a type it refuses.
    fn alias_devices(&mut self, configs: &[Config<'_>], present: &[(PciIdentity, DeviceType)]) {
        let specs: Vec<&nova::DeviceSpec> = configs.iter().flat_map(|(_, _, c)| &c.specs).collect();
        // Only devices a device_spec allows are in Nova's pool.
        let pool: Vec<&(PciIdentity, DeviceType)> = present
            .iter()
            .filter(|(d, _)| specs.iter().any(|s| s.matches(d)))
            .collect();
        for (_, path, config) in configs {
            for alias in &config.aliases {
                let named: Vec<DeviceType> = pool
                    .iter()
                    .filter(|(d, _)| alias.names(d))
                    .map(|(_, t)| *t)
                    .collect();
                let labels = vec![
                    ("path", path.clone()),
                    ("alias", alias.name.clone().into()),
                    ("alias_device_type", alias.device_type_label().into()),
                ];
                let (allocatable, refused) = allocation(alias, &named);
                self.push(&NOVA_ALIAS_DEVICES, labels.clone(), Value::Int(allocatable));
                for (device_type, count) in refused {
                    let mut labels = labels.clone();
                    labels.push(("device_type", device_type.into()));
                    self.push(&NOVA_ALIAS_MISMATCH, labels, Value::Int(count));
                }
            }
        }
    }

    /// `hpcnode_nova_scheduler_pci_filter_enabled`, as Nova 24 (Xena) and later resolve
    /// `[filter_scheduler] enabled_filters`: the last scheduler file that sets it wins
    /// (oslo.config reads later files over earlier ones, and so does Kolla's merge), else
    /// Nova's default list, which lacks PciPassthroughFilter. `[DEFAULT]
    /// scheduler_default_filters` is named when only it is set: Nova 15 to 23 read it then,
    /// later releases ignore it. Nothing when a scheduler file could not be read: it may set
    /// the option.
    fn scheduler_filter(&mut self, configs: &[Config<'_>]) {
        let wanted = &self.collector.nova_scheduler_configs;
        let files: Vec<&Config<'_>> = wanted
            .iter()
            .filter_map(|w| configs.iter().find(|(path, _, _)| path == w))
            .collect();
        if wanted.is_empty() || files.len() != wanted.len() {
            return;
        }
        let set = files.iter().rev().find_map(|(_, path, config)| {
            let filters = config.enabled_filters.as_ref()?;
            let on = filters.iter().any(|f| f == PCI_PASSTHROUGH_FILTER);
            Some((path.clone(), "enabled_filters", on))
        });
        let old = || {
            files
                .iter()
                .rev()
                .find(|(_, _, config)| config.sets_old_enabled_filters)
                .map(|(_, path, _)| (path.clone(), "scheduler_default_filters", false))
        };
        let (path, option, on) =
            set.or_else(old)
                .unwrap_or((LabelValue::Static(""), "default", false));
        self.flag(
            &NOVA_SCHEDULER_PCI_FILTER,
            vec![("path", path), ("option", option.into())],
            on,
        );
    }

    /// `hpcnode_nova_alias_definitions`: how many distinct definitions each alias name has
    /// across the files that define it.
    fn alias_definitions(&mut self, configs: &[Config<'_>]) {
        let mut definitions: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (_, _, config) in configs {
            for alias in &config.aliases {
                definitions
                    .entry(alias.name.as_str())
                    .or_default()
                    .insert(alias.definition.as_str());
            }
        }
        for (name, distinct) in definitions {
            self.push(
                &NOVA_ALIAS_DEFINITIONS,
                vec![("alias", name.to_string().into())],
                Value::Int(distinct.len() as u64),
            );
        }
    }
}

/// Of the pool devices an alias's ids name (their types given), how many Nova allocates for
/// it, and how many of each type it does not.
fn allocation(alias: &Alias, named: &[DeviceType]) -> (u64, BTreeMap<&'static str, u64>) {
    let mut allocatable = 0;
    let mut refused: BTreeMap<&'static str, u64> = BTreeMap::new();
    for device_type in named {
        if alias.allocates(*device_type) {
            allocatable += 1;
        } else {
            *refused.entry(device_type.as_str()).or_default() += 1;
        }
    }
    (allocatable, refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::read_named_file;

    #[test]
    fn a_config_is_parsed_again_only_when_its_stamp_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("nova.conf");
        std::fs::write(
            &path,
            "[pci]\ndevice_spec = {\"address\": {\"bus\": \"3b\"}}\n",
        )
        .unwrap();
        // Given twice (as a config and a scheduler config): one file, parsed once.
        let files = NovaFiles::new([path.clone(), path.clone()]);
        let read =
            || -> Vec<Arc<NovaConfig>> { files.read().0.into_iter().map(Result::unwrap).collect() };
        let first = read();
        assert_eq!(first.len(), 1);
        assert!(Arc::ptr_eq(&first[0], &read()[0]));
        std::fs::write(&path, "[pci]\ndevice_spec = {\"vendor_id\": \"10de\"}\n").unwrap();
        let changed = read();
        assert!(!Arc::ptr_eq(&first[0], &changed[0]));
        assert!(changed[0].specs[0].text.contains("10de"));
        std::fs::remove_file(&path).unwrap();
        assert!(files.read().0.iter().all(Result::is_err));
    }

    #[test]
    fn a_config_file_named_without_a_directory_is_in_the_working_directory() {
        // Unit tests run in the crate directory.
        let bytes = read_named_file(Path::new("Cargo.toml"), CONFIG_FILE_LIMIT).unwrap();
        assert!(String::from_utf8_lossy(&bytes).contains("[package]"));
    }
}
