//! OpenStack Nova's `[pci]` options, read as Nova reads them: `nova.conf` is an oslo.config
//! ini file where an option may repeat (each line one value, continuation lines indented),
//! `device_spec` (older name `passthrough_whitelist`) values are a JSON object or a JSON list
//! of objects, and `alias` values are one JSON object each (Nova refuses a list there).
//! Matching follows `nova/pci/devspec.py`: ids as hexadecimal or `*`, an address as a glob
//! string (`[[[domain]:]bus]:][slot][.[function]]`, `*` per field) or as a dict of regular
//! expressions matched from the start of each field.

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};

use super::identity::Address;
use crate::metrics::label_text;

/// The section and option names that carry device specs and aliases. The `[DEFAULT]` ones
/// are the names Nova used before the `[pci]` group (still read by Newton and older).
const DEVICE_SPEC_OPTIONS: [(&str, &str); 3] = [
    ("pci", "device_spec"),
    ("pci", "passthrough_whitelist"),
    ("DEFAULT", "pci_passthrough_whitelist"),
];
const ALIAS_OPTIONS: [(&str, &str); 2] = [("pci", "alias"), ("DEFAULT", "pci_alias")];

/// Compiled size allowed for one address field regex. Real ones (`3[bc]`, `[0-9a-f]{2}`,
/// `.*`) take a few KiB; the config is parsed on every scrape, so a hostile pattern such as
/// `(\w{100}){100}` must be refused, not built (the regex crate's default allows 10 MiB).
const MAX_REGEX_BYTES: usize = 64 << 10;
/// Device specs kept per file (real hosts have a handful): each may hold four regexes, so
/// their number bounds the memory and time a file costs.
const MAX_DEVICE_SPECS: usize = 256;
/// Aliases kept per file: each is a few series, so their number bounds the output.
const MAX_ALIASES: usize = 256;

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

#[derive(Debug, Clone)]
pub struct Alias {
    pub name: String,
    pub device_type: DeviceType,
    vendor: Id,
    product: Id,
}

impl Alias {
    /// Whether the alias names this device's vendor and product (whatever its type).
    pub fn names(&self, device: &PciIdentity) -> bool {
        self.vendor.matches(device.vendor) && self.product.matches(device.device)
    }
}

/// Everything read from one config file; `errors` name each value Nova would reject.
#[derive(Debug, Default)]
pub struct NovaConfig {
    pub specs: Vec<DeviceSpec>,
    pub aliases: Vec<Alias>,
    pub errors: Vec<String>,
}

pub fn parse_config(text: &str) -> NovaConfig {
    let mut config = NovaConfig::default();
    let mut too_many_specs = false;
    let mut too_many_aliases = false;
    for entry in parse_ini(text) {
        let place = || format!("[{}] {} (line {})", entry.section, entry.key, entry.line);
        if let Some((_, option)) = DEVICE_SPEC_OPTIONS
            .iter()
            .find(|(section, key)| *section == entry.section && *key == entry.key)
        {
            let room = MAX_DEVICE_SPECS - config.specs.len();
            match parse_device_specs(option, &entry.value, room) {
                Ok((specs, complete)) => {
                    config.specs.extend(specs);
                    if !complete && !too_many_specs {
                        too_many_specs = true;
                        config.errors.push(format!(
                            "{}: more than {MAX_DEVICE_SPECS} device specs, the rest ignored",
                            place()
                        ));
                    }
                }
                Err(reason) => config.errors.push(format!("{}: {reason}", place())),
            }
        } else if ALIAS_OPTIONS
            .iter()
            .any(|(section, key)| *section == entry.section && *key == entry.key)
        {
            match parse_alias(&entry.value) {
                Ok(_) if config.aliases.len() >= MAX_ALIASES => {
                    if !too_many_aliases {
                        too_many_aliases = true;
                        config.errors.push(format!(
                            "{}: more than {MAX_ALIASES} aliases, the rest ignored",
                            place()
                        ));
                    }
                }
                Ok(alias) => config.aliases.push(alias),
                Err(reason) => config.errors.push(format!("{}: {reason}", place())),
            }
        }
    }
    config
}

struct IniEntry {
    section: String,
    key: String,
    value: String,
    line: usize,
}

/// oslo.config's ini dialect: `#`/`;` comments, `key = value` or `key: value`, indented lines
/// continue the previous value, surrounding quotes are removed, `-` in keys reads as `_`.
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
            section = name.trim().to_string();
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

fn parse_alias(value: &str) -> Result<Alias, String> {
    let json: Value = serde_json::from_str(value).map_err(|e| format!("invalid JSON: {e}"))?;
    let Value::Object(object) = json else {
        return Err(format!(
            "an alias is one JSON object (repeat the option for more), got {json}"
        ));
    };
    let name = match object.get("name") {
        Some(Value::String(name)) if !name.is_empty() => label_text(name.clone()),
        _ => return Err("an alias needs a \"name\" string".to_string()),
    };
    let device_type = match object.get("device_type") {
        None => DeviceType::Pci,
        Some(Value::String(text)) => DeviceType::parse(text)
            .ok_or_else(|| format!("device_type {text:?} is not type-PCI, type-PF or type-VF"))?,
        Some(other) => return Err(format!("device_type must be a string, got {other}")),
    };
    Ok(Alias {
        name,
        device_type,
        vendor: parse_id(&object, "vendor_id")?,
        product: parse_id(&object, "product_id")?,
    })
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
        assert_eq!(config.aliases[0].device_type, DeviceType::PhysicalFunction);
        assert_eq!(config.aliases[1].device_type, DeviceType::Pci);
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
        assert!(config.errors[0].contains("[pci] device_spec (line 2)"));
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
            config.errors[0].contains("too large"),
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
        assert!(config.errors[0].contains("the rest ignored"));
        let aliases = "alias = {\"name\": \"a\"}\n".repeat(MAX_ALIASES + 10);
        let config = parse_config(&format!("[pci]\n{aliases}"));
        assert_eq!(config.aliases.len(), MAX_ALIASES);
        assert_eq!(config.errors.len(), 1, "{:?}", config.errors);
        assert!(config.errors[0].contains("aliases, the rest ignored"));
    }
}
