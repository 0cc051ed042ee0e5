//! The Nova unit: each Nova config's `[pci]` device_spec and alias options (parsed by
//! `nova.rs`) checked against the PCI devices present, as Nova would match them.

use std::collections::BTreeMap;
use std::path::Path;

use crate::collector::{CollectError, ErrorKind};
use crate::metrics::{LabelValue, Value};
use crate::sysfs::{read_named_file, AttributeReader, SysDir, SysfsError};

use super::identity::{read_identity, Identity};
use super::nova::{self, DeviceType, NovaConfig, PciIdentity};
use super::{
    Read, DEVICES_DIR, NOVA_ALIAS_DEVICES, NOVA_ALIAS_MISMATCH, NOVA_CONFIG_VALID,
    NOVA_SPEC_DEVICES,
};

/// nova.conf with its comments is about 200 KiB.
const CONFIG_FILE_LIMIT: usize = 4 << 20;

/// A config file named by a flag, read whole (it is not under a root: the flag names it).
pub(super) fn read_nova_config(path: &Path) -> Result<NovaConfig, SysfsError> {
    let bytes = read_named_file(path, CONFIG_FILE_LIMIT)?;
    Ok(nova::parse_config(&String::from_utf8_lossy(&bytes)))
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
        true => dir.subdir("net").and_then(|net| net.entries()),
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
fn nova_device_type(dir: &SysDir, reader: &mut AttributeReader) -> DeviceType {
    DeviceType::of(
        dir.link_target_name("physfn").is_ok(),
        dir.read("sriov_totalvfs", reader).is_ok(),
    )
}

impl Read<'_> {
    /// Nova's `[pci]` options against the devices present.
    pub(super) fn nova(&mut self) {
        let collector = self.collector;
        let mut configs = Vec::new();
        for path in &collector.nova_configs {
            let label: LabelValue = path.display().to_string().into();
            match read_nova_config(path) {
                Ok(config) => {
                    for reason in &config.errors {
                        self.out.errors.push(CollectError::new(
                            ErrorKind::Parse,
                            format!("nova config {}: {reason}", path.display()),
                        ));
                    }
                    self.flag(
                        &NOVA_CONFIG_VALID,
                        vec![("path", label.clone())],
                        config.errors.is_empty(),
                    );
                    configs.push((label, config));
                }
                Err(err) => {
                    self.error(err);
                    self.flag(&NOVA_CONFIG_VALID, vec![("path", label)], false);
                }
            }
        }
        // Every present device with its Nova identity and type.
        let Some(devices) = self
            .out
            .reported(SysDir::open(&collector.sysfs, DEVICES_DIR))
        else {
            return;
        };
        let Some(entries) = self.out.reported(devices.entries()) else {
            return;
        };
        let mut present = Vec::new();
        let mut unnamed = Vec::new();
        for entry in entries {
            // An unusable name here is a unit of its own, which reports it.
            let Ok(address) = entry.into_name() else {
                continue;
            };
            let Ok(dir) = devices.subdir(&address) else {
                continue;
            };
            if let Some(identity) = read_identity(&dir, &address, &mut self.reader) {
                let nova = nova_identity(&dir, &identity, true, &mut unnamed);
                present.push((nova, nova_device_type(&dir, &mut self.reader)));
            }
        }
        for err in unnamed {
            self.error(err);
        }
        let specs: Vec<&nova::DeviceSpec> = configs.iter().flat_map(|(_, c)| &c.specs).collect();
        for (path, config) in &configs {
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
        // Only devices a device_spec allows are in Nova's pool.
        let pool: Vec<&(PciIdentity, DeviceType)> = present
            .iter()
            .filter(|(d, _)| specs.iter().any(|s| s.matches(d)))
            .collect();
        for (path, config) in &configs {
            for alias in &config.aliases {
                let named: Vec<DeviceType> = pool
                    .iter()
                    .filter(|(d, _)| alias.names(d))
                    .map(|(_, t)| *t)
                    .collect();
                let labels = vec![
                    ("path", path.clone()),
                    ("alias", alias.name.clone().into()),
                    ("alias_device_type", alias.device_type.as_str().into()),
                ];
                let matching = named.iter().filter(|t| **t == alias.device_type).count();
                self.push(
                    &NOVA_ALIAS_DEVICES,
                    labels.clone(),
                    Value::Int(matching as u64),
                );
                let mut by_type: BTreeMap<&'static str, u64> = BTreeMap::new();
                for device_type in named.iter().filter(|t| **t != alias.device_type) {
                    *by_type.entry(device_type.as_str()).or_default() += 1;
                }
                for (device_type, count) in by_type {
                    let mut labels = labels.clone();
                    labels.push(("device_type", device_type.into()));
                    self.push(&NOVA_ALIAS_MISMATCH, labels, Value::Int(count));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_file_named_without_a_directory_is_in_the_working_directory() {
        // Unit tests run in the crate directory.
        let bytes = read_named_file(Path::new("Cargo.toml"), CONFIG_FILE_LIMIT).unwrap();
        assert!(String::from_utf8_lossy(&bytes).contains("[package]"));
    }
}
