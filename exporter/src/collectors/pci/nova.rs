//! OpenStack Nova's `[pci]` options, read as Nova reads them: `nova.conf` is an oslo.config
//! ini file where an option may repeat (each line one value, continuation lines indented),
//! `device_spec` (older name `passthrough_whitelist`) values are a JSON object or a JSON list
//! of objects, and `alias` values are one JSON object each (Nova refuses a list there).
//! Matching follows `nova/pci/devspec.py`: ids as hexadecimal or `*`, an address as a glob
//! string (`[[[domain]:]bus]:][slot][.[function]]`, `*` per field) or as a dict of regular
//! expressions matched from the start of each field. Aliases follow `nova/pci/request.py`
//! (`_ALIAS_SCHEMA`, `get_alias_from_config`) and the pool filters of `nova/pci/stats.py`.

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};

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

pub fn parse_config(text: &str) -> NovaConfig {
    let mut config = NovaConfig::default();
    let mut too_many_specs = false;
    let mut too_many_aliases = false;
    // Alias entries joined by name (the full name: labels are shortened).
    let mut groups: Vec<Vec<AliasEntry>> = Vec::new();
    let mut alias_values = 0;
    for entry in parse_ini(text) {
        let place = || format!("[{}] {} (line {})", entry.section, entry.key, entry.line);
        let is = |(section, key): (&str, &str)| section == entry.section && key == entry.key;
        if let Some((_, option)) = DEVICE_SPEC_OPTIONS.iter().find(|option| is(**option)) {
            let room = MAX_DEVICE_SPECS - config.specs.len();
            match parse_device_specs(option, &entry.value, room) {
                Ok((specs, complete)) => {
                    config.specs.extend(specs);
                    if !complete && !too_many_specs {
                        too_many_specs = true;
                        config.errors.push((
                            Problem::TooManyValues,
                            format!(
                                "{}: more than {MAX_DEVICE_SPECS} device specs, the rest ignored",
                                place()
                            ),
                        ));
                    }
                }
                Err(reason) => config
                    .errors
                    .push((Problem::InvalidDeviceSpec, format!("{}: {reason}", place()))),
            }
        } else if ALIAS_OPTIONS.iter().any(|option| is(*option)) {
            if alias_values >= MAX_ALIASES {
                if !too_many_aliases {
                    too_many_aliases = true;
                    config.errors.push((
                        Problem::TooManyValues,
                        format!(
                            "{}: more than {MAX_ALIASES} aliases, the rest ignored",
                            place()
                        ),
                    ));
                }
                continue;
            }
            alias_values += 1;
            match parse_alias(&entry.value) {
                Ok(alias) => match groups.iter_mut().find(|g| g[0].name == alias.name) {
                    None => groups.push(vec![alias]),
                    Some(group) => match join_conflict(&group[0], &alias) {
                        None => group.push(alias),
                        Some(reason) => config
                            .errors
                            .push((Problem::ConflictingAlias, format!("{}: {reason}", place()))),
                    },
                },
                Err(reason) => config
                    .errors
                    .push((Problem::InvalidAlias, format!("{}: {reason}", place()))),
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
    config.aliases = groups.into_iter().map(joined_alias).collect();
    config
}

/// Why Nova refuses to join `entry` to the first entry of its name: `get_alias_from_config`
/// compares the NUMA policies, then reads `dev_type` from both specs, so an entry of a
/// repeated name without `device_type` fails too (a KeyError, reported as PciInvalidAlias).
fn join_conflict(first: &AliasEntry, entry: &AliasEntry) -> Option<String> {
    let name = &entry.name;
    if first.numa_policy != entry.numa_policy {
        return Some(format!("NUMA policy mismatch for alias {name:?}"));
    }
    match (first.device_type, entry.device_type) {
        (Some(a), Some(b)) if a == b => None,
        (Some(_), Some(_)) => Some(format!("device type mismatch for alias {name:?}")),
        _ => Some(format!(
            "alias {name:?} is defined more than once, and Nova needs a device_type in every entry of a repeated name"
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

struct IniEntry {
    section: String,
    key: String,
    value: String,
    line: usize,
}

/// oslo.config's ini dialect: `#`/`;` comments, `key = value` or `key: value`, indented lines
/// continue the previous value, surrounding quotes are removed, `-` in keys reads as `_`,
/// section names other than `DEFAULT` are read in lower case.
fn parse_ini(text: &str) -> Vec<IniEntry> {
    let mut entries: Vec<IniEntry> = Vec::new();
    let mut section = String::new();
    let mut continuing = false;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continuing = false;
            continue;
        }
        if line.starts_with([' ', '\t']) && continuing {
            if let Some(last) = entries.last_mut() {
                last.value.push('\n');
                last.value.push_str(trimmed);
            }
            continue;
        }
        continuing = false;
        if let Some(name) = trimmed.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let name = name.trim();
            section = match name {
                "DEFAULT" => name.to_string(),
                _ => name.to_lowercase(),
            };
            continue;
        }
        let Some(split) = trimmed.find(['=', ':']) else {
            continue;
        };
        let (key, value) = (&trimmed[..split], trimmed[split + 1..].trim());
        entries.push(IniEntry {
            section: section.clone(),
            key: key.trim().replace('-', "_"),
            value: value.to_string(),
            line: index + 1,
        });
        continuing = true;
    }
    for entry in &mut entries {
        let value = entry.value.trim();
        let unquoted = ['"', '\'']
            .into_iter()
            .find_map(|q| value.strip_prefix(q).and_then(|v| v.strip_suffix(q)));
        entry.value = unquoted.unwrap_or(value).to_string();
    }
    entries
}

/// At most `room` specs are built (each may compile regexes); `false` when some were left.
fn parse_device_specs(
    option: &'static str,
    value: &str,
    room: usize,
) -> Result<(Vec<DeviceSpec>, bool), String> {
    let json: Value = serde_json::from_str(value).map_err(|e| format!("invalid JSON: {e}"))?;
    let objects: Vec<Map<String, Value>> = match json {
        Value::Object(object) => vec![object],
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::Object(object) => Ok(object),
                other => Err(format!(
                    "a list of device specs holds {other}, not an object"
                )),
            })
            .collect::<Result<_, _>>()?,
        other => return Err(format!("expected a JSON object or list, got {other}")),
    };
    let complete = objects.len() <= room;
    let specs = objects
        .into_iter()
        .take(room)
        .map(|object| parse_device_spec(option, object))
        .collect::<Result<_, _>>()?;
    Ok((specs, complete))
}

fn parse_device_spec(
    option: &'static str,
    object: Map<String, Value>,
) -> Result<DeviceSpec, String> {
    let address = match object.get("address") {
        None => AddressSpec::Any,
        Some(Value::String(glob)) => AddressSpec::Glob(parse_address_glob(glob)?),
        Some(Value::Object(fields)) => AddressSpec::Regex(Box::new(parse_address_regexes(fields)?)),
        Some(other) => {
            return Err(format!(
                "address must be a string or an object, got {other}"
            ))
        }
    };
    let devname = match object.get("devname") {
        None => None,
        Some(Value::String(name)) => Some(name.clone()),
        Some(other) => return Err(format!("devname must be a string, got {other}")),
    };
    if devname.is_some() && !matches!(address, AddressSpec::Any) {
        return Err("address and devname cannot both be given".to_string());
    }
    let text = Value::Object(object.clone()).to_string();
    Ok(DeviceSpec {
        option,
        text: label_text(text),
        vendor: parse_id(&object, "vendor_id")?,
        product: parse_id(&object, "product_id")?,
        address,
        devname,
    })
}

/// One alias value, checked as `_ALIAS_SCHEMA` checks it: an object of known keys with string
/// values, a name of 1 to 256 characters, ids of exactly four hexadecimal digits, a
/// `device_type` and a `numa_policy` from their lists.
fn parse_alias(value: &str) -> Result<AliasEntry, String> {
    let json: Value = serde_json::from_str(value).map_err(|e| format!("invalid JSON: {e}"))?;
    let Value::Object(mut object) = json else {
        return Err(format!(
            "an alias is one JSON object (repeat the option for more), got {json}"
        ));
    };
    for (key, value) in &object {
        if !ALIAS_KEYS.contains(&key.as_str()) {
            return Err(format!("unknown key {key:?} in an alias"));
        }
        if !value.is_string() {
            return Err(format!("{key} must be a string, got {value}"));
        }
    }
    let text = |key: &str| object.get(key).and_then(Value::as_str);
    let name = match text("name") {
        Some(name) if (1..=MAX_ALIAS_NAME_CHARS).contains(&name.chars().count()) => {
            label_text(name.trim().to_string())
        }
        Some(_) => {
            return Err(format!(
                "an alias name has 1 to {MAX_ALIAS_NAME_CHARS} characters"
            ))
        }
        None => return Err("an alias needs a \"name\"".to_string()),
    };
    let device_type = text("device_type")
        .map(|t| {
            DeviceType::parse(t)
                .ok_or_else(|| format!("device_type {t:?} is not type-PCI, type-PF or type-VF"))
        })
        .transpose()?;
    let numa_policy = match text("numa_policy") {
        None => "legacy".to_string(),
        Some(policy) if NUMA_POLICIES.contains(&policy) => policy.to_string(),
        Some(other) => {
            return Err(format!(
                "numa_policy {other:?} is not one of {}",
                NUMA_POLICIES.join(", ")
            ))
        }
    };
    if let Some(other) = text("capability_type").filter(|t| *t != "pci") {
        return Err(format!("capability_type {other:?} is not \"pci\""));
    }
    let ids = (
        alias_id(text("vendor_id"), "vendor_id")?,
        alias_id(text("product_id"), "product_id")?,
    );
    for key in ["name", "device_type", "numa_policy"] {
        object.remove(key);
    }
    // Nova compares ids without case (`pci_device_prop_match`).
    for key in ["vendor_id", "product_id"] {
        if let Some(Value::String(id)) = object.get_mut(key) {
            *id = id.to_ascii_lowercase();
        }
    }
    Ok(AliasEntry {
        name,
        device_type,
        numa_policy,
        ids,
        spec: Value::Object(object).to_string(),
    })
}

/// An alias's `vendor_id` or `product_id`: `^[\da-fA-F]{4}$` (no `*`, unlike a device_spec).
fn alias_id(text: Option<&str>, key: &str) -> Result<Id, String> {
    match text {
        None => Ok(Id::Any),
        Some(id) if id.len() == 4 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u16::from_str_radix(id, 16)
                .map(Id::Exact)
                .map_err(|e| e.to_string())
        }
        Some(other) => Err(format!("{key} {other:?} is not four hexadecimal digits")),
    }
}

fn parse_id(object: &Map<String, Value>, key: &str) -> Result<Id, String> {
    match object.get(key) {
        None => Ok(Id::Any),
        Some(Value::String(text)) if text.trim() == "*" => Ok(Id::Any),
        Some(Value::String(text)) => u16::from_str_radix(text.trim(), 16)
            .map(Id::Exact)
            .map_err(|_| format!("{key} {text:?} is not a hexadecimal id up to ffff")),
        Some(other) => Err(format!("{key} must be a string, got {other}")),
    }
}

/// Nova's PciAddressGlobSpec: missing leading fields are `*`, empty fields are `*`.
fn parse_address_glob(glob: &str) -> Result<[Field; 4], String> {
    let invalid = |why: &str| format!("address {glob:?}: {why}");
    let (dbs, function) = match glob.split_once('.') {
        Some((dbs, function)) => (dbs, function),
        None => (glob, ""),
    };
    let fields: Vec<&str> = if dbs.is_empty() {
        Vec::new()
    } else {
        dbs.split(':').collect()
    };
    if fields.len() > 3 {
        return Err(invalid("too many ':'-separated fields"));
    }
    let mut all = vec![""; 3 - fields.len()];
    all.extend(fields);
    all.push(function);
    let maxima = [0xFFFF, 0xFF, 0x1F, 0x7];
    let mut parsed = [Field::Any; 4];
    for ((slot, text), max) in parsed.iter_mut().zip(all).zip(maxima) {
        let text = text.trim();
        if text.is_empty() || text == "*" {
            continue;
        }
        let value = u32::from_str_radix(text, 16).map_err(|_| invalid("not hexadecimal"))?;
        if value > max {
            return Err(invalid("a field is out of range"));
        }
        *slot = Field::Exact(value);
    }
    Ok(parsed)
}

fn parse_address_regexes(fields: &Map<String, Value>) -> Result<[Regex; 4], String> {
    let compile = |key: &str| -> Result<Regex, String> {
        let pattern = match fields.get(key) {
            None => ".*",
            Some(Value::String(pattern)) => pattern,
            Some(other) => return Err(format!("address {key} must be a string, got {other}")),
        };
        RegexBuilder::new(&format!("^(?:{pattern})"))
            .size_limit(MAX_REGEX_BYTES)
            .dfa_size_limit(MAX_REGEX_BYTES)
            .build()
            .map_err(|err| match err {
                regex::Error::CompiledTooBig(_) => {
                    format!("address {key} {pattern:?} is too large a regular expression")
                }
                _ => format!("address {key} {pattern:?} is not a regular expression"),
            })
    };
    Ok([
        compile("domain")?,
        compile("bus")?,
        compile("slot")?,
        compile("function")?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t4(address: &str) -> PciIdentity {
        PciIdentity {
            address: Address::parse(address).unwrap(),
            vendor: 0x10de,
            device: 0x1eb8,
            netdevs: Vec::new(),
        }
    }

    #[test]
    fn every_json_form_nova_accepts() {
        let config = parse_config(
            r#"
[DEFAULT]
debug = true
[pci]
# one object
device_spec = {"vendor_id": "10de", "product_id": "1eb8"}
# a list
device_spec = [{"vendor_id":"15b3","product_id":"1017"},
    {"address": "*:3b:00.*"}]
passthrough_whitelist = {"address": {"domain": ".*", "bus": "3[bc]", "slot": "00", "function": "[0-1]"}}
device_spec = '{"address": ":3b:00.", "vendor_id": "*"}'
alias = {"name": "t4", "vendor_id": "10de", "product_id": "1eb8", "device_type": "type-PF"}
alias = {"name": "any-nvidia", "vendor_id": "10de"}
"#,
        );
        assert!(config.errors.is_empty(), "{:?}", config.errors);
        assert_eq!(config.specs.len(), 5);
        let device = t4("0000:3b:00.0");
        assert!(config
            .specs
            .iter()
            .all(|spec| spec.matches(&device) || spec.text.contains("15b3")));
        let elsewhere = t4("0000:5e:00.0");
        assert_eq!(
            config
                .specs
                .iter()
                .filter(|s| s.matches(&elsewhere))
                .count(),
            1
        );
        assert_eq!(config.specs[3].option, "passthrough_whitelist");
        assert_eq!(
            config.aliases[0].device_type,
            Some(DeviceType::PhysicalFunction)
        );
        assert_eq!(config.aliases[1].device_type, None);
        assert!(config.aliases[1].names(&device));
    }

    #[test]
    fn what_nova_rejects_is_an_error_and_the_rest_still_counts() {
        let config = parse_config(
            r#"[pci]
device_spec = {"vendor_id": "10de", "product_id": "1eb8"
device_spec = {"vendor_id": "xyz"}
device_spec = {"address": "0000:3b:00.0", "devname": "ens1"}
device_spec = {"address": "1:2:3:4.0"}
alias = [{"name": "t4"}]
alias = {"vendor_id": "10de"}
alias = {"name": "t4", "device_type": "type-GPU"}
device_spec = {"vendor_id": "10de"}
"#,
        );
        assert_eq!(config.errors.len(), 7, "{:#?}", config.errors);
        assert!(config.errors[0].1.contains("[pci] device_spec (line 2)"));
        let problems: Vec<Problem> = config.errors.iter().map(|(p, _)| *p).collect();
        assert_eq!(
            problems,
            [
                [Problem::InvalidDeviceSpec; 4].as_slice(),
                &[Problem::InvalidAlias; 3]
            ]
            .concat()
        );
        assert_eq!(config.specs.len(), 1);
    }

    #[test]
    fn glob_fields_are_numbers_not_text() {
        let spec = &parse_config("[pci]\ndevice_spec={\"address\":\"0:3b:0.0\"}").specs[0];
        assert!(spec.matches(&t4("0000:3b:00.0")));
        assert!(!spec.matches(&t4("0000:3b:00.1")));
    }

    #[test]
    fn hostile_configs_are_bounded() {
        // Compiles to far more than MAX_REGEX_BYTES, which the regex crate's default allows.
        assert!(Regex::new(r"^(?:\w{200})").is_ok());
        let config = parse_config(
            r#"[pci]
device_spec = {"address": {"bus": "\\w{200}"}}
device_spec = {"address": {"bus": "[0-9a-fA-F]{2}", "domain": ".*", "function": "\\d"}}
"#,
        );
        assert_eq!(config.errors.len(), 1, "{:?}", config.errors);
        assert!(
            config.errors[0].1.contains("too large"),
            "{:?}",
            config.errors
        );
        assert_eq!(config.specs.len(), 1);
        assert!(config.specs[0].matches(&t4("0000:3b:00.0")));
        // Specs beyond the bound are not built, and said so once.
        let list = format!(
            "[{}]",
            vec![r#"{"address": {"bus": "3b"}}"#; MAX_DEVICE_SPECS + 10].join(",")
        );
        let config = parse_config(&format!(
            "[pci]\ndevice_spec = {list}\ndevice_spec = {{\"vendor_id\": \"10de\"}}\n"
        ));
        assert_eq!(config.specs.len(), MAX_DEVICE_SPECS);
        assert_eq!(config.errors.len(), 1, "{:?}", config.errors);
        assert_eq!(config.errors[0].0, Problem::TooManyValues);
        assert!(config.errors[0].1.contains("the rest ignored"));
        let aliases: String = (0..MAX_ALIASES + 10)
            .map(|i| format!("alias = {{\"name\": \"a{i}\"}}\n"))
            .collect();
        let config = parse_config(&format!("[pci]\n{aliases}"));
        assert_eq!(config.aliases.len(), MAX_ALIASES);
        assert_eq!(config.errors.len(), 1, "{:?}", config.errors);
        assert!(config.errors[0].1.contains("aliases, the rest ignored"));
    }

    #[test]
    fn an_alias_allocates_the_types_nova_allocates() {
        use DeviceType::{Pci, PhysicalFunction as Pf, VirtualFunction as Vf};
        let config = parse_config(
            r#"[pci]
alias = {"name": "untyped", "vendor_id": "15b3", "product_id": "1018"}
alias = {"name": "pci", "vendor_id": "15b3", "product_id": "1018", "device_type": "type-PCI"}
alias = {"name": "pf", "vendor_id": "15b3", "product_id": "1018", "device_type": "type-PF"}
alias = {"name": "vf", "vendor_id": "15b3", "product_id": "1018", "device_type": "type-VF"}
"#,
        );
        assert!(config.errors.is_empty(), "{:?}", config.errors);
        let allocates = |name: &str| -> Vec<DeviceType> {
            let alias = config.aliases.iter().find(|a| a.name == name).unwrap();
            [Pci, Pf, Vf]
                .into_iter()
                .filter(|t| alias.allocates(*t))
                .collect()
        };
        // No device_type: no dev_type in the request, and only the PF pools are dropped.
        assert_eq!(allocates("untyped"), [Pci, Vf]);
        assert_eq!(allocates("pci"), [Pci]);
        // Naming type-PF is the one way to get a PF.
        assert_eq!(allocates("pf"), [Pf]);
        assert_eq!(allocates("vf"), [Vf]);
        assert_eq!(config.aliases[0].device_type_label(), "");
        assert_eq!(config.aliases[3].device_type_label(), "type-VF");
    }

    #[test]
    fn entries_of_one_alias_name_are_joined_as_nova_joins_them() {
        let config = parse_config(
            r#"[pci]
alias = {"name": "gpu", "vendor_id": "10de", "product_id": "1eb8", "device_type": "type-PCI"}
alias = {"name": " gpu ", "vendor_id": "10de", "product_id": "1db4", "device_type": "type-PCI"}
alias = {"name": "gpu", "vendor_id": "10de", "product_id": "20b0", "device_type": "type-PF"}
alias = {"name": "gpu", "vendor_id": "10de", "product_id": "20b0", "device_type": "type-PCI", "numa_policy": "required"}
alias = {"name": "nic", "vendor_id": "15b3", "product_id": "1018"}
alias = {"name": "nic", "vendor_id": "15b3", "product_id": "1016"}
"#,
        );
        // Different device_type, different NUMA policy, and a repeated name without
        // device_type (Nova's KeyError): each entry refused, the first ones kept.
        let problems: Vec<Problem> = config.errors.iter().map(|(p, _)| *p).collect();
        assert_eq!(
            problems,
            [Problem::ConflictingAlias; 3],
            "{:?}",
            config.errors
        );
        assert!(config.errors[0].1.contains("device type mismatch"));
        assert!(config.errors[1].1.contains("NUMA policy mismatch"));
        assert!(config.errors[2].1.contains("needs a device_type"));
        assert_eq!(config.aliases.len(), 2);
        let gpu = &config.aliases[0];
        let id = |device| PciIdentity {
            device,
            ..t4("0000:3b:00.0")
        };
        assert!(gpu.names(&id(0x1eb8)) && gpu.names(&id(0x1db4)));
        assert!(!gpu.names(&id(0x20b0)));
    }

    #[test]
    fn an_alias_definition_ignores_key_order_case_and_entry_order() {
        let a = parse_config(
            r#"[pci]
alias = {"name": "t4", "vendor_id": "10DE", "product_id": "1eb8", "device_type": "type-PCI"}
alias = {"name": "t4", "vendor_id": "10de", "product_id": "1db4", "device_type": "type-PCI", "numa_policy": "legacy"}
"#,
        );
        let b = parse_config(
            r#"[PCI]
alias = {"device_type": "type-PCI", "product_id": "1db4", "vendor_id": "10de", "name": "t4"}
alias = {"product_id": "1eb8", "name": "t4", "vendor_id": "10de", "device_type": "type-PCI"}
"#,
        );
        let c = parse_config(
            "[pci]\nalias = {\"name\": \"t4\", \"vendor_id\": \"10de\", \"product_id\": \"1eb8\", \"device_type\": \"type-PCI\", \"numa_policy\": \"required\"}\n",
        );
        assert_eq!(a.aliases[0].definition, b.aliases[0].definition);
        assert_ne!(a.aliases[0].definition, c.aliases[0].definition);
    }

    #[test]
    fn an_alias_is_checked_against_nova_schema() {
        for (alias, why) in [
            (r#"{"name": "t4", "vendor": "10de"}"#, "unknown key"),
            (r#"{"name": "t4", "vendor_id": "*"}"#, "four hexadecimal"),
            (r#"{"name": "t4", "vendor_id": "10d"}"#, "four hexadecimal"),
            (
                r#"{"name": "t4", "product_id": "+eb8"}"#,
                "four hexadecimal",
            ),
            (r#"{"name": "t4", "numa_policy": "strict"}"#, "numa_policy"),
            (r#"{"name": "t4", "numa_policy": ""}"#, "numa_policy"),
            (
                r#"{"name": "t4", "capability_type": "pcie"}"#,
                "capability_type",
            ),
            (
                r#"{"name": "t4", "live_migratable": true}"#,
                "must be a string",
            ),
            (r#"{"name": ""}"#, "1 to 256"),
        ] {
            let config = parse_config(&format!("[pci]\nalias = {alias}\n"));
            assert_eq!(config.errors.len(), 1, "{alias}");
            assert_eq!(config.errors[0].0, Problem::InvalidAlias, "{alias}");
            assert!(
                config.errors[0].1.contains(why),
                "{alias}: {:?}",
                config.errors
            );
        }
        let long = "n".repeat(MAX_ALIAS_NAME_CHARS);
        let config = parse_config(&format!(
            "[pci]\nalias = {{\"name\": \"{long}\", \"resource_class\": \"CUSTOM_T4\", \"traits\": \"CUSTOM_A\", \"live_migratable\": \"yes\", \"numa_policy\": \"socket\", \"capability_type\": \"pci\"}}\n"
        ));
        assert!(config.errors.is_empty(), "{:?}", config.errors);
        assert_eq!(config.aliases[0].name.chars().count(), MAX_LABEL_CHARS);
    }

    #[test]
    fn scheduler_filters_as_oslo_config_reads_them() {
        let config = parse_config(
            r#"[DEFAULT]
scheduler_default_filters = ComputeFilter,PciPassthroughFilter
[Filter_Scheduler]
enabled_filters = ComputeFilter
enabled_filters = ComputeFilter,
    ImagePropertiesFilter , PciPassthroughFilter
"#,
        );
        assert!(config.errors.is_empty(), "{:?}", config.errors);
        assert_eq!(
            config.enabled_filters.unwrap(),
            [
                "ComputeFilter",
                "ImagePropertiesFilter",
                "PciPassthroughFilter"
            ]
        );
        assert!(config.sets_old_enabled_filters);
        let config = parse_config("[pci]\nalias = {\"name\": \"t4\"}\n");
        assert_eq!(config.enabled_filters, None);
        assert!(!config.sets_old_enabled_filters);
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies::text;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use serde_json::json;

    const NOVA_TOKENS: &[&str] = &[
        "[pci]",
        "[DEFAULT]",
        "\n",
        "\n  ",
        " ",
        "=",
        ":",
        "#",
        "'",
        "\"",
        "device_spec",
        "passthrough_whitelist",
        "alias",
        "{",
        "}",
        "[",
        "]",
        ",",
        "\"vendor_id\"",
        "\"10de\"",
        "\"*\"",
        "\"address\"",
        "\"0000:3b:00.*\"",
        "\"bus\"",
        "\"3[bc]\"",
        "\"(\\\\w{200})\"",
        "\"devname\"",
        "\"name\"",
        "\"device_type\"",
        "\"type-PF\"",
        "null",
        "1e999",
        "-",
    ];
    const SECTIONS: &[&str] = &["DEFAULT", "pci", "libvirt"];

    /// A device close to the generated specs (two values per field), so that some match.
    fn device() -> impl Strategy<Value = PciIdentity> {
        (
            0u32..2,
            0x3bu32..0x3d,
            0u32..2,
            0u32..2,
            0x10deu16..0x10e0,
            0x1eb8u16..0x1eba,
        )
            .prop_map(
                |(domain, bus, slot, function, vendor, device)| PciIdentity {
                    address: Address {
                        domain,
                        bus,
                        slot,
                        function,
                    },
                    vendor,
                    device,
                    netdevs: Vec::new(),
                },
            )
    }

    /// An id in a spec: absent, `*`, or a value as hex in either case and any padding.
    fn id(values: std::ops::Range<u16>) -> impl Strategy<Value = (Option<String>, Id)> {
        prop_oneof![
            Just((None, Id::Any)),
            Just((Some("*".to_string()), Id::Any)),
            (values, any::<bool>()).prop_map(|(id, upper)| {
                let text = if upper {
                    format!("{id:X}")
                } else {
                    format!("{id:04x}")
                };
                (Some(text), Id::Exact(id))
            }),
        ]
    }

    /// An id in an alias: absent or four hex digits (Nova's alias schema has no `*`).
    fn alias_id(values: std::ops::Range<u16>) -> impl Strategy<Value = (Option<String>, Id)> {
        id(values).prop_filter("an alias id is four hex digits", |(text, _)| {
            text.as_deref() != Some("*")
        })
    }

    /// A glob address field: `*`, empty, or the value in hex with or without padding.
    fn glob_field(
        values: std::ops::Range<u32>,
        width: usize,
    ) -> impl Strategy<Value = (String, Field)> {
        prop_oneof![
            Just(("*".to_string(), Field::Any)),
            Just((String::new(), Field::Any)),
            (values, any::<bool>()).prop_map(move |(value, pad)| {
                let text = if pad {
                    format!("{value:0width$x}")
                } else {
                    format!("{value:x}")
                };
                (text, Field::Exact(value))
            }),
        ]
    }

    fn glob_address() -> impl Strategy<Value = (String, [Field; 4])> {
        (
            glob_field(0..2, 4),
            glob_field(0x3b..0x3d, 2),
            glob_field(0..2, 2),
            glob_field(0..2, 1),
        )
            .prop_map(|(domain, bus, slot, function)| {
                let text = format!("{}:{}:{}.{}", domain.0, bus.0, slot.0, function.0);
                (text, [domain.1, bus.1, slot.1, function.1])
            })
    }

    /// An ini entry as written (with an indented continuation line or quotes) and its value.
    fn ini_entry() -> impl Strategy<Value = (String, String, String)> {
        let piece = "[!-~&&[^#;'\"]]([ -~&&[^'\"]]{0,12}[!-~&&[^'\"]])?";
        (
            "[a-z][a-z_-]{0,12}",
            prop::sample::select(&[" = ", "=", ": ", " :"][..]),
            piece,
            vec(piece, 0..3),
            prop::sample::select(&["", "'", "\""][..]),
        )
            .prop_map(|(key, separator, first, more, quote)| {
                let mut written = format!("{key}{separator}{quote}{first}");
                for line in &more {
                    written.push_str(&format!("\n    {line}"));
                }
                written.push_str(quote);
                let value = std::iter::once(first)
                    .chain(more)
                    .collect::<Vec<_>>()
                    .join("\n");
                (key, written, value)
            })
    }

    proptest! {
        #[test]
        fn any_config_is_specs_aliases_or_errors(text in text(NOVA_TOKENS)) {
            let config = parse_config(&text);
            prop_assert!(config.specs.len() <= MAX_DEVICE_SPECS);
            prop_assert!(config.aliases.len() <= MAX_ALIASES);
            for spec in &config.specs {
                prop_assert!(spec.text.chars().count() <= MAX_LABEL_CHARS);
            }
        }

        #[test]
        fn written_ini_entries_read_back(
            entries in vec((prop::sample::select(SECTIONS), ini_entry()), 0..10),
            comment in "[#;][ -~]{0,20}",
        ) {
            let mut text = String::new();
            let mut expected = Vec::new();
            let mut section = "";
            for (entry_section, (key, written, value)) in entries {
                if entry_section != section {
                    text.push_str(&format!("{comment}\n[{entry_section}]\n\n"));
                    section = entry_section;
                }
                let line = text.lines().count() + 1;
                text.push_str(&written);
                text.push('\n');
                expected.push((section.to_string(), key.replace('-', "_"), value, line));
            }
            let read: Vec<_> = parse_ini(&text)
                .into_iter()
                .map(|entry| (entry.section, entry.key, entry.value, entry.line))
                .collect();
            prop_assert_eq!(read, expected);
        }

        #[test]
        fn a_written_device_spec_matches_the_devices_it_names(
            vendor in id(0x10de..0x10e0),
            product in id(0x1eb8..0x1eba),
            (glob, fields) in glob_address(),
            as_regex in prop::option::of([0usize..3, 0..3, 0..3, 0..3]),
            option in prop::sample::select(&DEVICE_SPEC_OPTIONS[..]),
            devices in vec(device(), 1..8),
        ) {
            // A regex address: per field a literal prefix, the whole value, or none.
            let regex_fields = as_regex.map(|lengths| {
                let value = address_fields(devices[0].address);
                let mut fields = Map::new();
                for ((key, value), length) in ["domain", "bus", "slot", "function"].into_iter().zip(value).zip(lengths) {
                    if length > 0 {
                        fields.insert(key.to_string(), json!(value[..length.min(value.len())]));
                    }
                }
                fields
            });
            let mut spec = Map::new();
            if let Some(vendor) = &vendor.0 {
                spec.insert("vendor_id".to_string(), json!(vendor));
            }
            if let Some(product) = &product.0 {
                spec.insert("product_id".to_string(), json!(product));
            }
            match &regex_fields {
                Some(fields) => spec.insert("address".to_string(), json!(fields)),
                None => spec.insert("address".to_string(), json!(glob)),
            };
            let (section, key) = option;
            let config = parse_config(&format!("[{section}]\n{key} = {}\n", Value::Object(spec)));
            prop_assert!(config.errors.is_empty(), "{:?}", config.errors);
            prop_assert_eq!(config.specs.len(), 1);
            let spec = &config.specs[0];
            for device in &devices {
                let address = match &regex_fields {
                    Some(regexes) => ["domain", "bus", "slot", "function"]
                        .into_iter()
                        .zip(address_fields(device.address))
                        .all(|(key, value)| regexes.get(key).is_none_or(|prefix| value.starts_with(prefix.as_str().unwrap()))),
                    None => fields.iter().zip([
                        device.address.domain,
                        device.address.bus,
                        device.address.slot,
                        device.address.function,
                    ]).all(|(field, value)| *field == Field::Any || *field == Field::Exact(value)),
                };
                let expected = vendor.1.matches(device.vendor) && product.1.matches(device.device) && address;
                prop_assert_eq!(spec.matches(device), expected, "{} on {:?}", spec.text, device);
            }
        }

        #[test]
        fn a_written_alias_reads_back(
            // Names as operators write them: letters (any script), digits and punctuation.
            name in "[\\p{L}\\p{N}_.:-]{1,200}",
            device_type in prop::option::of(prop::sample::select(&[DeviceType::Pci, DeviceType::PhysicalFunction, DeviceType::VirtualFunction][..])),
            vendor in alias_id(0x10de..0x10e0),
            product in alias_id(0x1eb8..0x1eba),
            device in device(),
        ) {
            let mut alias = Map::new();
            alias.insert("name".to_string(), json!(name));
            if let Some(device_type) = device_type {
                alias.insert("device_type".to_string(), json!(device_type.as_str()));
            }
            if let Some(vendor) = &vendor.0 {
                alias.insert("vendor_id".to_string(), json!(vendor));
            }
            if let Some(product) = &product.0 {
                alias.insert("product_id".to_string(), json!(product));
            }
            let config = parse_config(&format!("[pci]\nalias = {}\n", Value::Object(alias)));
            prop_assert!(config.errors.is_empty(), "{:?}", config.errors);
            let alias = &config.aliases[0];
            prop_assert_eq!(&alias.name, &name.chars().take(MAX_LABEL_CHARS).collect::<String>());
            // No device_type: none asked for (Nova then takes type-PCI and type-VF devices).
            prop_assert_eq!(alias.device_type, device_type);
            prop_assert_eq!(alias.names(&device), vendor.1.matches(device.vendor) && product.1.matches(device.device));
        }
    }
}
