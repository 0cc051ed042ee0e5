//! OpenStack Nova's `[pci]` options, read as Nova reads them: `nova.conf` is an oslo.config
//! ini file where an option may repeat (each line one value, continuation lines indented),
//! `device_spec` (older name `passthrough_whitelist`) values are a JSON object or a JSON list
//! of objects, and `alias` values are one JSON object each (Nova refuses a list there).
//! Matching follows `nova/pci/devspec.py`: ids as hexadecimal or `*`, an address as a glob
//! string (`[[[domain]:]bus]:][slot][.[function]]`, `*` per field) or as a dict of regular
//! expressions matched from the start of each field. Aliases follow `nova/pci/request.py`
//! (`_ALIAS_SCHEMA`, `get_alias_from_config`) and the pool filters of `nova/pci/stats.py`.

use regex::{Regex, RegexBuilder};
use serde_json::error::Category;
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

struct IniEntry {
    section: String,
    key: String,
    value: String,
    line: usize,
}

/// oslo.config's ini dialect: `#`/`;` comments, `key = value` or `key: value`, indented lines
/// continue the previous value, surrounding quotes are removed, `-` in keys reads as `_`,
/// section names other than `DEFAULT` are read in lower case. Read one entry at a time, so
/// that a file of many lines holds no more memory than its longest value.
struct IniEntries<'a> {
    lines: std::iter::Peekable<std::iter::Enumerate<std::str::Lines<'a>>>,
    section: String,
}

impl<'a> IniEntries<'a> {
    fn new(text: &'a str) -> Self {
        IniEntries {
            lines: text.lines().enumerate().peekable(),
            section: String::new(),
        }
    }
}

/// A line that ends a value and holds none.
fn blank_or_comment(trimmed: &str) -> bool {
    trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';')
}

impl Iterator for IniEntries<'_> {
    type Item = IniEntry;

    fn next(&mut self) -> Option<IniEntry> {
        while let Some((index, line)) = self.lines.next() {
            let trimmed = line.trim();
            if blank_or_comment(trimmed) {
                continue;
            }
            if let Some(name) = trimmed.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
                let name = name.trim();
                self.section = match name {
                    "DEFAULT" => name.to_string(),
                    _ => name.to_lowercase(),
                };
                continue;
            }
            let Some(split) = trimmed.find(['=', ':']) else {
                continue;
            };
            let mut value = trimmed[split + 1..].trim().to_string();
            let continues = |(_, line): &(usize, &str)| {
                line.starts_with([' ', '\t']) && !blank_or_comment(line.trim())
            };
            while let Some((_, line)) = self.lines.next_if(continues) {
                value.push('\n');
                value.push_str(line.trim());
            }
            let value = value.trim();
            let unquoted = ['"', '\'']
                .into_iter()
                .find_map(|q| value.strip_prefix(q).and_then(|v| v.strip_suffix(q)));
            return Some(IniEntry {
                section: self.section.clone(),
                key: trimmed[..split].trim().replace('-', "_"),
                value: unquoted.unwrap_or(value).to_string(),
                line: index + 1,
            });
        }
        None
    }
}

/// How a JSON value is named in an error: its kind, never its text.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A device_spec or alias value as JSON, if it is not too long to parse.
fn parse_json(value: &str) -> Result<Value, String> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(format!(
            "{} bytes, more than the {MAX_VALUE_BYTES} a value may have",
            value.len()
        ));
    }
    serde_json::from_str(value).map_err(json_error)
}

/// A JSON syntax error in serde_json's words, which name the fault and its place (never the
/// input); any other kind by its place alone.
fn json_error(err: serde_json::Error) -> String {
    match err.classify() {
        Category::Syntax | Category::Eof => format!("invalid JSON: {err}"),
        Category::Io | Category::Data => format!(
            "invalid JSON at line {} column {}",
            err.line(),
            err.column()
        ),
    }
}

/// At most `room` specs are built (each may compile regexes), and how many were left.
fn parse_device_specs(
    option: &'static str,
    value: &str,
    room: usize,
) -> Result<(Vec<DeviceSpec>, usize), String> {
    let objects: Vec<Map<String, Value>> = match parse_json(value)? {
        Value::Object(object) => vec![object],
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(index, item)| match item {
                Value::Object(object) => Ok(object),
                other => Err(format!(
                    "item {} of the list is {}, not an object",
                    index + 1,
                    json_kind(&other)
                )),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(format!(
                "expected a JSON object or list, got {}",
                json_kind(&other)
            ))
        }
    };
    let left = objects.len().saturating_sub(room);
    let specs = objects
        .into_iter()
        .take(room)
        .map(|object| parse_device_spec(option, object))
        .collect::<Result<_, _>>()?;
    Ok((specs, left))
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
                "address must be a string or an object, got {}",
                json_kind(other)
            ))
        }
    };
    let devname = match object.get("devname") {
        None => None,
        Some(Value::String(name)) => Some(name.clone()),
        Some(other) => {
            return Err(format!(
                "devname must be a string, got {}",
                json_kind(other)
            ))
        }
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
fn parse_alias(value: &str, line: usize) -> Result<AliasEntry, String> {
    let json = parse_json(value)?;
    let Value::Object(mut object) = json else {
        return Err(format!(
            "an alias is one JSON object (repeat the option for more), got {}",
            json_kind(&json)
        ));
    };
    for (key, value) in &object {
        // Named as the schema names it: a key unknown to it is the file's text.
        let Some(key) = ALIAS_KEYS.iter().find(|known| *known == key) else {
            return Err(format!(
                "an alias has an unknown key (known: {})",
                ALIAS_KEYS.join(", ")
            ));
        };
        if !value.is_string() {
            return Err(format!("{key} must be a string, got {}", json_kind(value)));
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
                .ok_or_else(|| "device_type is not type-PCI, type-PF or type-VF".to_string())
        })
        .transpose()?;
    let numa_policy = match text("numa_policy") {
        None => "legacy".to_string(),
        Some(policy) if NUMA_POLICIES.contains(&policy) => policy.to_string(),
        Some(_) => {
            return Err(format!(
                "numa_policy is not one of {}",
                NUMA_POLICIES.join(", ")
            ))
        }
    };
    if text("capability_type").is_some_and(|t| t != "pci") {
        return Err("capability_type is not \"pci\"".to_string());
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
        line,
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
        Some(_) => Err(format!("{key} is not four hexadecimal digits")),
    }
}

fn parse_id(object: &Map<String, Value>, key: &str) -> Result<Id, String> {
    match object.get(key) {
        None => Ok(Id::Any),
        Some(Value::String(text)) if text.trim() == "*" => Ok(Id::Any),
        Some(Value::String(text)) => u16::from_str_radix(text.trim(), 16)
            .map(Id::Exact)
            .map_err(|_| format!("{key} is not a hexadecimal id up to ffff")),
        Some(other) => Err(format!("{key} must be a string, got {}", json_kind(other))),
    }
}

/// Nova's PciAddressGlobSpec: missing leading fields are `*`, empty fields are `*`.
fn parse_address_glob(glob: &str) -> Result<[Field; 4], String> {
    let invalid = |why: &str| format!("address: {why}");
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
            Some(other) => {
                return Err(format!(
                    "address {key} must be a string, got {}",
                    json_kind(other)
                ))
            }
        };
        RegexBuilder::new(&format!("^(?:{pattern})"))
            .size_limit(MAX_REGEX_BYTES)
            .dfa_size_limit(MAX_REGEX_BYTES)
            .build()
            .map_err(|err| match err {
                regex::Error::CompiledTooBig(_) => {
                    format!("address {key} is too large a regular expression")
                }
                _ => format!("address {key} is not a regular expression"),
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
mod tests;

#[cfg(test)]
mod proptests;
