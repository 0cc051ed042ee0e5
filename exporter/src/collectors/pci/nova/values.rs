//! The JSON values of Nova's `device_spec` and `alias` options, checked as Nova checks them;
//! an error names what is wrong and where, never the file's text.

use regex::{Regex, RegexBuilder};
use serde_json::error::Category;
use serde_json::{Map, Value};

use super::*;

/// Why one `device_spec` or `alias` value was refused.
#[derive(Debug, thiserror::Error)]
pub(super) enum ValueError {
    #[error("{len} bytes, more than the {MAX_VALUE_BYTES} a value may have")]
    TooLong { len: usize },
    /// serde_json's words name the fault and its place, never the input.
    #[error("invalid JSON: {0}")]
    Syntax(serde_json::Error),
    #[error("invalid JSON at line {line} column {column}")]
    JsonAt { line: usize, column: usize },
    #[error("item {item} of the list is {kind}, not an object")]
    ListItem { item: usize, kind: &'static str },
    #[error("expected a JSON object or list, got {0}")]
    NotObjectOrList(&'static str),
    #[error("address must be a string or an object, got {0}")]
    AddressKind(&'static str),
    #[error("{key} must be a string, got {kind}")]
    NotString {
        key: &'static str,
        kind: &'static str,
    },
    #[error("address and devname cannot both be given")]
    AddressAndDevname,
    #[error("an alias is one JSON object (repeat the option for more), got {0}")]
    AliasNotObject(&'static str),
    #[error("an alias has an unknown key (known: {})", ALIAS_KEYS.join(", "))]
    UnknownAliasKey,
    #[error("an alias name has 1 to {MAX_ALIAS_NAME_CHARS} characters")]
    AliasNameLength,
    #[error("an alias needs a \"name\"")]
    AliasWithoutName,
    #[error("device_type is not type-PCI, type-PF or type-VF")]
    DeviceType,
    #[error("numa_policy is not one of {}", NUMA_POLICIES.join(", "))]
    NumaPolicy,
    #[error("capability_type is not \"pci\"")]
    CapabilityType,
    #[error("{0}")]
    Id(std::num::ParseIntError),
    #[error("{key} is not four hexadecimal digits")]
    AliasId { key: &'static str },
    #[error("{key} is not a hexadecimal id up to ffff")]
    SpecId { key: &'static str },
    #[error("address: {0}")]
    AddressGlob(&'static str),
    #[error("address {key} must be a string, got {kind}")]
    AddressFieldKind {
        key: &'static str,
        kind: &'static str,
    },
    #[error("address {key} is too large a regular expression")]
    RegexTooLarge { key: &'static str },
    #[error("address {key} is not a regular expression")]
    NotRegex { key: &'static str },
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
fn parse_json(value: &str) -> Result<Value, ValueError> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(ValueError::TooLong { len: value.len() });
    }
    serde_json::from_str(value).map_err(json_error)
}

/// A JSON syntax error in serde_json's words, which name the fault and its place (never the
/// input); any other kind by its place alone.
fn json_error(err: serde_json::Error) -> ValueError {
    match err.classify() {
        Category::Syntax | Category::Eof => ValueError::Syntax(err),
        Category::Io | Category::Data => ValueError::JsonAt {
            line: err.line(),
            column: err.column(),
        },
    }
}

/// At most `room` specs are built (each may compile regexes), and how many were left.
pub(super) fn parse_device_specs(
    option: &'static str,
    value: &str,
    room: usize,
) -> Result<(Vec<DeviceSpec>, usize), ValueError> {
    let objects: Vec<Map<String, Value>> = match parse_json(value)? {
        Value::Object(object) => vec![object],
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(index, item)| match item {
                Value::Object(object) => Ok(object),
                other => Err(ValueError::ListItem {
                    item: index + 1,
                    kind: json_kind(&other),
                }),
            })
            .collect::<Result<_, _>>()?,
        other => return Err(ValueError::NotObjectOrList(json_kind(&other))),
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
) -> Result<DeviceSpec, ValueError> {
    let address = match object.get("address") {
        None => AddressSpec::Any,
        Some(Value::String(glob)) => AddressSpec::Glob(parse_address_glob(glob)?),
        Some(Value::Object(fields)) => AddressSpec::Regex(Box::new(parse_address_regexes(fields)?)),
        Some(other) => return Err(ValueError::AddressKind(json_kind(other))),
    };
    let devname = match object.get("devname") {
        None => None,
        Some(Value::String(name)) => Some(name.clone()),
        Some(other) => {
            return Err(ValueError::NotString {
                key: "devname",
                kind: json_kind(other),
            })
        }
    };
    if devname.is_some() && !matches!(address, AddressSpec::Any) {
        return Err(ValueError::AddressAndDevname);
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
pub(super) fn parse_alias(value: &str, line: usize) -> Result<AliasEntry, ValueError> {
    let json = parse_json(value)?;
    let Value::Object(mut object) = json else {
        return Err(ValueError::AliasNotObject(json_kind(&json)));
    };
    for (key, value) in &object {
        // Named as the schema names it: a key unknown to it is the file's text.
        let Some(key) = ALIAS_KEYS.iter().find(|known| *known == key) else {
            return Err(ValueError::UnknownAliasKey);
        };
        if !value.is_string() {
            return Err(ValueError::NotString {
                key,
                kind: json_kind(value),
            });
        }
    }
    let text = |key: &str| object.get(key).and_then(Value::as_str);
    let name = match text("name") {
        Some(name) if (1..=MAX_ALIAS_NAME_CHARS).contains(&name.chars().count()) => {
            label_text(name.trim().to_string())
        }
        Some(_) => return Err(ValueError::AliasNameLength),
        None => return Err(ValueError::AliasWithoutName),
    };
    let device_type = text("device_type")
        .map(|t| DeviceType::parse(t).ok_or(ValueError::DeviceType))
        .transpose()?;
    let numa_policy = match text("numa_policy") {
        None => "legacy".to_string(),
        Some(policy) if NUMA_POLICIES.contains(&policy) => policy.to_string(),
        Some(_) => return Err(ValueError::NumaPolicy),
    };
    if text("capability_type").is_some_and(|t| t != "pci") {
        return Err(ValueError::CapabilityType);
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
fn alias_id(text: Option<&str>, key: &'static str) -> Result<Id, ValueError> {
    match text {
        None => Ok(Id::Any),
        Some(id) if id.len() == 4 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u16::from_str_radix(id, 16)
                .map(Id::Exact)
                .map_err(ValueError::Id)
        }
        Some(_) => Err(ValueError::AliasId { key }),
    }
}

fn parse_id(object: &Map<String, Value>, key: &'static str) -> Result<Id, ValueError> {
    match object.get(key) {
        None => Ok(Id::Any),
        Some(Value::String(text)) if text.trim() == "*" => Ok(Id::Any),
        Some(Value::String(text)) => u16::from_str_radix(text.trim(), 16)
            .map(Id::Exact)
            .map_err(|_| ValueError::SpecId { key }),
        Some(other) => Err(ValueError::NotString {
            key,
            kind: json_kind(other),
        }),
    }
}

/// Nova's PciAddressGlobSpec: missing leading fields are `*`, empty fields are `*`.
fn parse_address_glob(glob: &str) -> Result<[Field; 4], ValueError> {
    let invalid = ValueError::AddressGlob;
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

fn parse_address_regexes(fields: &Map<String, Value>) -> Result<[Regex; 4], ValueError> {
    let compile = |key: &'static str| -> Result<Regex, ValueError> {
        let pattern = match fields.get(key) {
            None => ".*",
            Some(Value::String(pattern)) => pattern,
            Some(other) => {
                return Err(ValueError::AddressFieldKind {
                    key,
                    kind: json_kind(other),
                })
            }
        };
        RegexBuilder::new(&format!("^(?:{pattern})"))
            .size_limit(MAX_REGEX_BYTES)
            .dfa_size_limit(MAX_REGEX_BYTES)
            .build()
            .map_err(|err| match err {
                regex::Error::CompiledTooBig(_) => ValueError::RegexTooLarge { key },
                _ => ValueError::NotRegex { key },
            })
    };
    Ok([
        compile("domain")?,
        compile("bus")?,
        compile("slot")?,
        compile("function")?,
    ])
}
