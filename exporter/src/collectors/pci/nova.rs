//! OpenStack Nova's `[pci]` options, read as Nova reads them: `nova.conf` is an oslo.config
//! ini file where an option may repeat (each line one value, continuation lines indented),
//! `device_spec` (older name `passthrough_whitelist`) values are a JSON object or a JSON list
//! of objects, and `alias` values are one JSON object each (Nova refuses a list there).
//! Matching follows `nova/pci/devspec.py`: ids as hexadecimal or `*`, an address as a glob
//! string (`[[[domain]:]bus]:][slot][.[function]]`, `*` per field) or as a dict of regular
//! expressions matched from the start of each field. Aliases follow `nova/pci/request.py`
//! (`_ALIAS_SCHEMA`, `get_alias_from_config`) and the pool filters of `nova/pci/stats.py`.

use regex::Regex;

mod ini;
mod values;

use ini::IniEntries;
use values::{parse_alias, parse_device_specs};

use super::identity::Address;
use crate::metrics::{label_text, MAX_LABEL_CHARS};

/// The section and option names that carry device specs and aliases. The `[DEFAULT]` ones
/// are the names Nova used before the `[pci]` group (still read by Newton and older).
const DEVICE_SPEC_OPTIONS: [(&str, &str); 3] = [
    ("pci", "device_spec"),
    ("pci", "passthrough_whitelist"),
    ("DEFAULT", "pci_passthrough_whitelist"),
];
const ALIAS_OPTIONS: [(&str, &str); 2] = [("pci", "alias"), ("DEFAULT", "pci_alias")];
/// The scheduler's filter list (`nova/conf/scheduler.py`), and its name before Ocata (Nova 15),
/// read as a deprecated name until Wallaby and ignored from Nova 24 (Xena) on.
const ENABLED_FILTERS: (&str, &str) = ("filter_scheduler", "enabled_filters");
const OLD_ENABLED_FILTERS: (&str, &str) = ("DEFAULT", "scheduler_default_filters");

/// Every key `_ALIAS_SCHEMA` allows (`additionalProperties: False`), each a string; older
/// releases allow fewer, so nothing Nova accepts is refused.
const ALIAS_KEYS: [&str; 9] = [
    "name",
    "capability_type",
    "product_id",
    "vendor_id",
    "device_type",
    "numa_policy",
    "resource_class",
    "traits",
    "live_migratable",
];
/// `PCINUMAAffinityPolicy.ALL`; an alias without one has `legacy`.
const NUMA_POLICIES: [&str; 4] = ["required", "legacy", "preferred", "socket"];
const MAX_ALIAS_NAME_CHARS: usize = 256;

/// Compiled size allowed for one address field regex. Real ones (`3[bc]`, `[0-9a-f]{2}`,
/// `.*`) take a few KiB; the config is parsed on every scrape, so a hostile pattern such as
/// `(\w{100}){100}` must be refused, not built (the regex crate's default allows 10 MiB).
const MAX_REGEX_BYTES: usize = 64 << 10;
/// Device specs kept per file (real hosts have a handful): each may hold four regexes, so
/// their number bounds the memory and time a file costs.
const MAX_DEVICE_SPECS: usize = 256;
/// Aliases kept per file: each is a few series, so their number bounds the output.
const MAX_ALIASES: usize = 256;
/// Bytes of one device_spec or alias value parsed. Real ones are a few hundred (a list of
/// [`MAX_DEVICE_SPECS`] such specs fits); JSON is parsed whole, into many times its size (a
/// 4 MiB list of small objects took 380 MB).
const MAX_VALUE_BYTES: usize = 64 << 10;

/// Why a config file, or a value in it, does not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Problem {
    /// The file could not be read.
    Unreadable,
    /// A device_spec value Nova rejects.
    InvalidDeviceSpec,
    /// An alias value Nova rejects.
    InvalidAlias,
    /// An alias entry Nova cannot join to an earlier one of the same name.
    ConflictingAlias,
    /// Values beyond what the exporter checks per file.
    TooManyValues,
}

impl Problem {
    pub fn as_str(self) -> &'static str {
        match self {
            Problem::Unreadable => "unreadable",
            Problem::InvalidDeviceSpec => "invalid_device_spec",
            Problem::InvalidAlias => "invalid_alias",
            Problem::ConflictingAlias => "conflicting_alias",
            Problem::TooManyValues => "too_many_values",
        }
    }
}

/// How Nova classifies a PCI device, and what an alias asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceType {
    Pci,
    PhysicalFunction,
    VirtualFunction,
}

impl DeviceType {
    /// What Nova reports for a device: type-VF for a virtual function (it has a `physfn`),
    /// type-PF for one with an SR-IOV capability, else type-PCI.
    pub fn of(is_virtual_function: bool, sriov_capable: bool) -> DeviceType {
        match (is_virtual_function, sriov_capable) {
            (true, _) => DeviceType::VirtualFunction,
            (false, true) => DeviceType::PhysicalFunction,
            (false, false) => DeviceType::Pci,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::Pci => "type-PCI",
            DeviceType::PhysicalFunction => "type-PF",
            DeviceType::VirtualFunction => "type-VF",
        }
    }

    fn parse(text: &str) -> Option<DeviceType> {
        [
            DeviceType::Pci,
            DeviceType::PhysicalFunction,
            DeviceType::VirtualFunction,
        ]
        .into_iter()
        .find(|t| t.as_str() == text)
    }
}

/// A vendor or product id in a spec: `*` or a 16-bit hexadecimal number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Id {
    Any,
    Exact(u16),
}

impl Id {
    fn matches(self, id: u16) -> bool {
        self == Id::Any || self == Id::Exact(id)
    }
}

/// One field of a glob address: `*` or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Any,
    Exact(u32),
}

#[derive(Debug, Clone)]
enum AddressSpec {
    Any,
    Glob([Field; 4]),
    /// domain, bus, slot and function regular expressions, anchored at the start.
    Regex(Box<[Regex; 4]>),
}

/// An address's fields as Nova formats them before matching: `%04x`, `%02x`, `%02x`, `%1x`.
fn address_fields(address: Address) -> [String; 4] {
    [
        format!("{:04x}", address.domain),
        format!("{:02x}", address.bus),
        format!("{:02x}", address.slot),
        format!("{:x}", address.function),
    ]
}

/// What a spec or alias is matched against.
#[derive(Debug, Clone)]
pub struct PciIdentity {
    pub address: Address,
    pub vendor: u16,
    pub device: u16,
    /// The network interface names of the device (for `devname` specs).
    pub netdevs: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct DeviceSpec {
    /// The option it came from (`device_spec`, `passthrough_whitelist`, ...).
    pub option: &'static str,
    /// The spec as compact JSON, shortened for a label.
    pub text: String,
    vendor: Id,
    product: Id,
    address: AddressSpec,
    devname: Option<String>,
}

impl DeviceSpec {
    /// Whether the spec selects by network interface name (`devname`).
    pub fn names_netdev(&self) -> bool {
        self.devname.is_some()
    }

    pub fn matches(&self, device: &PciIdentity) -> bool {
        let address = match &self.address {
            AddressSpec::Any => true,
            AddressSpec::Glob(fields) => {
                let actual = [
                    device.address.domain,
                    device.address.bus,
                    device.address.slot,
                    device.address.function,
                ];
                fields
                    .iter()
                    .zip(actual)
                    .all(|(field, value)| *field == Field::Any || *field == Field::Exact(value))
            }
            AddressSpec::Regex(regexes) => regexes
                .iter()
                .zip(address_fields(device.address))
                .all(|(regex, value)| regex.is_match(&value)),
        };
        let devname = match &self.devname {
            Some(name) => device.netdevs.iter().any(|n| n == name),
            None => true,
        };
        self.vendor.matches(device.vendor)
            && self.product.matches(device.device)
            && address
            && devname
    }
}

/// One alias name with all its entries, as `get_alias_from_config` joins them: the entries
/// are ORed, and share one `device_type` and one `numa_policy`.
#[derive(Debug, Clone)]
pub struct Alias {
    /// The name, stripped as Nova strips it and shortened for a label.
    pub name: String,
    /// Nova adds `dev_type` to the request only when the alias names a `device_type`.
    pub device_type: Option<DeviceType>,
    /// Vendor and product id of each entry.
    ids: Vec<(Id, Id)>,
    /// Everything the entries put into the request, in one canonical text: what two files
    /// must agree on.
    pub definition: String,
}

impl Alias {
    /// Whether one of the alias's entries names this device's vendor and product (whatever its
    /// type).
    pub fn names(&self, device: &PciIdentity) -> bool {
        self.ids.iter().any(|(vendor, product)| {
            vendor.matches(device.vendor) && product.matches(device.device)
        })
    }

    /// Whether Nova allocates a device of this type for the alias. With a `device_type`,
    /// `_filter_pools_for_spec` keeps only pools of that type (`nova/pci/stats.py`); without
    /// one, no pool is dropped for its type there, but `_filter_pools_for_unrequested_pfs`
    /// drops the type-PF pools: type-PCI and type-VF devices are allocated, type-PF ones not.
    pub fn allocates(&self, device_type: DeviceType) -> bool {
        match self.device_type {
            Some(wanted) => device_type == wanted,
            None => device_type != DeviceType::PhysicalFunction,
        }
    }

    /// The `device_type` as a label value: empty when the alias names none.
    pub fn device_type_label(&self) -> &'static str {
        self.device_type.map_or("", DeviceType::as_str)
    }
}

/// An alias entry as validated, before entries of the same name are joined.
struct AliasEntry {
    name: String,
    /// Where it is in the file.
    line: usize,
    device_type: Option<DeviceType>,
    numa_policy: String,
    ids: (Id, Id),
    /// The entry's request spec (every key but `name`, `device_type` and `numa_policy`),
    /// as compact JSON with sorted keys and lower-case ids.
    spec: String,
}

/// Everything read from one config file; `errors` name each value that does not count.
#[derive(Debug, Default)]
pub struct NovaConfig {
    pub specs: Vec<DeviceSpec>,
    pub aliases: Vec<Alias>,
    pub errors: Vec<(Problem, String)>,
    /// `[filter_scheduler] enabled_filters` as the file sets it (its last line), if it does.
    pub enabled_filters: Option<Vec<String>>,
    /// Whether the file sets `[DEFAULT] scheduler_default_filters`.
    pub sets_old_enabled_filters: bool,
}

/// Values of one kind (device specs, aliases) past what is checked per file: counted, never
/// parsed, and reported once with their number, so that a file's cost (parsing, regexes,
/// errors, series) is bounded whatever it holds.
#[derive(Default)]
struct Ignored {
    count: usize,
    /// Where the first one is.
    first: Option<String>,
}

impl Ignored {
    fn add(&mut self, count: usize, place: impl FnOnce() -> String) {
        self.count += count;
        self.first.get_or_insert_with(place);
    }

    fn report(self, what: &str, max: usize, errors: &mut Vec<(Problem, String)>) {
        if let Some(place) = self.first {
            let count = self.count;
            let reason = format!("{place}: {count} {what} past the first {max}, ignored");
            errors.push((Problem::TooManyValues, reason));
        }
    }
}

pub fn parse_config(text: &str) -> NovaConfig {
    let mut config = NovaConfig::default();
    // Device spec values (a list's items each) and alias values checked, valid or not.
    let (mut specs_checked, mut aliases_checked) = (0, 0);
    let (mut ignored_specs, mut ignored_aliases) = (Ignored::default(), Ignored::default());
    // Alias entries joined by name (the full name: labels are shortened).
    let mut groups: Vec<Vec<AliasEntry>> = Vec::new();
    for entry in IniEntries::new(text) {
        // Named by the option's own constants: nothing of the file's text is quoted.
        let place =
            |(section, key): (&str, &str)| format!("[{section}] {key} (line {})", entry.line);
        let is = |(section, key): (&str, &str)| section == entry.section && key == entry.key;
        if let Some(option) = DEVICE_SPEC_OPTIONS.iter().find(|option| is(**option)) {
            let room = MAX_DEVICE_SPECS - specs_checked;
            if room == 0 {
                ignored_specs.add(1, || place(*option));
                continue;
            }
            match parse_device_specs(option.1, &entry.value, room) {
                Ok((specs, left)) => {
                    // An empty list counts too, or a file of them would cost unbounded work.
                    specs_checked += specs.len().max(1);
                    config.specs.extend(specs);
                    if left > 0 {
                        ignored_specs.add(left, || place(*option));
                    }
                }
                Err(reason) => {
                    specs_checked += 1;
                    let reason = format!("{}: {reason}", place(*option));
                    config.errors.push((Problem::InvalidDeviceSpec, reason));
                }
            }
        } else if let Some(option) = ALIAS_OPTIONS.iter().find(|option| is(**option)) {
            if aliases_checked == MAX_ALIASES {
                ignored_aliases.add(1, || place(*option));
                continue;
            }
            aliases_checked += 1;
            match parse_alias(&entry.value, entry.line) {
                Ok(alias) => match groups.iter_mut().find(|g| g[0].name == alias.name) {
                    None => groups.push(vec![alias]),
                    Some(group) => match join_conflict(&group[0], &alias) {
                        None => group.push(alias),
                        Some(reason) => {
                            let reason = format!("{}: {reason}", place(*option));
                            config.errors.push((Problem::ConflictingAlias, reason));
                        }
                    },
                },
                Err(reason) => {
                    let reason = format!("{}: {reason}", place(*option));
                    config.errors.push((Problem::InvalidAlias, reason));
                }
            }
        } else if is(ENABLED_FILTERS) {
            // A ListOpt: comma-separated, each item stripped; the file's last line wins.
            config.enabled_filters = Some(
                entry
                    .value
                    .split(',')
                    .map(|name| name.trim().to_string())
                    .collect(),
            );
        } else if is(OLD_ENABLED_FILTERS) {
            config.sets_old_enabled_filters = true;
        }
    }
    ignored_specs.report("device specs", MAX_DEVICE_SPECS, &mut config.errors);
    ignored_aliases.report("aliases", MAX_ALIASES, &mut config.errors);
    config.aliases = groups.into_iter().map(joined_alias).collect();
    config
}

/// Why Nova refuses to join `entry` to the first entry of its name: `get_alias_from_config`
/// compares the NUMA policies, then reads `dev_type` from both specs, so an entry of a
/// repeated name without `device_type` fails too (a KeyError, reported as PciInvalidAlias).
fn join_conflict(first: &AliasEntry, entry: &AliasEntry) -> Option<String> {
    // The name is the file's text: the first entry's line says which alias it is.
    let line = first.line;
    if first.numa_policy != entry.numa_policy {
        return Some(format!(
            "NUMA policy mismatch with the alias of the same name on line {line}"
        ));
    }
    match (first.device_type, entry.device_type) {
        (Some(a), Some(b)) if a == b => None,
        (Some(_), Some(_)) => Some(format!(
            "device type mismatch with the alias of the same name on line {line}"
        )),
        _ => Some(format!(
            "the alias on line {line} has this name too, and Nova needs a device_type in every entry of a repeated name"
        )),
    }
}

fn joined_alias(group: Vec<AliasEntry>) -> Alias {
    let first = &group[0];
    let mut specs: Vec<&str> = group.iter().map(|e| e.spec.as_str()).collect();
    specs.sort_unstable();
    let definition = serde_json::json!({
        "device_type": first.device_type.map(DeviceType::as_str),
        "numa_policy": first.numa_policy,
        "specs": specs,
    });
    Alias {
        name: first.name.chars().take(MAX_LABEL_CHARS).collect(),
        device_type: first.device_type,
        ids: group.iter().map(|e| e.ids).collect(),
        definition: definition.to_string(),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
