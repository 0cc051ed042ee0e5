use super::*;
use crate::test_strategies::text;
use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

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
        // One per value checked, and one for each kind's values past its bound.
        prop_assert!(config.errors.len() <= MAX_DEVICE_SPECS + MAX_ALIASES + 2);
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
        let read: Vec<_> = IniEntries::new(&text)
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
