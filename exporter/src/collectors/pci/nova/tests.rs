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
    assert_eq!(
        config.errors,
        [(
            Problem::TooManyValues,
            "[pci] device_spec (line 2): 11 device specs past the first 256, ignored".to_string()
        )]
    );
    let aliases: String = (0..MAX_ALIASES + 10)
        .map(|i| format!("alias = {{\"name\": \"a{i}\"}}\n"))
        .collect();
    let config = parse_config(&format!("[pci]\n{aliases}"));
    assert_eq!(config.aliases.len(), MAX_ALIASES);
    assert_eq!(config.errors.len(), 1, "{:?}", config.errors);
    assert!(config.errors[0]
        .1
        .ends_with("10 aliases past the first 256, ignored"));
}

#[test]
fn a_value_too_long_to_parse_is_refused() {
    let specs = vec![r#"{"a":0}"#; MAX_VALUE_BYTES / 8].join(",");
    let aliases = format!(
        "{{{}}}",
        vec![r#""name":"a""#; MAX_VALUE_BYTES / 10].join(",")
    );
    let config = parse_config(&format!(
        "[pci]\ndevice_spec = [{specs}]\nalias = {aliases}\n"
    ));
    let length = |text: &str| text.len() + 2;
    assert_eq!(
        config.errors,
        [
            (
                Problem::InvalidDeviceSpec,
                format!(
                    "[pci] device_spec (line 2): {} bytes, more than the 65536 a value may have",
                    length(&specs)
                )
            ),
            (
                Problem::InvalidAlias,
                format!(
                    "[pci] alias (line 3): {} bytes, more than the 65536 a value may have",
                    aliases.len()
                )
            ),
        ]
    );
}

#[test]
fn values_nova_rejects_are_bounded_too() {
    // Each invalid value, or empty list, is work and an error: past the bound they are
    // counted, not parsed.
    let lines = 262_144;
    let mut text = "[pci]\ndevice_spec = []\n".to_string();
    text.push_str(&"device_spec = {\"vendor_id\": \"xyz\"}\n".repeat(lines - 1));
    text.push_str(&"alias = [{}]\n".repeat(lines));
    let config = parse_config(&text);
    let count = |problem| config.errors.iter().filter(|(p, _)| *p == problem).count();
    assert_eq!(count(Problem::InvalidDeviceSpec), MAX_DEVICE_SPECS - 1);
    assert_eq!(count(Problem::InvalidAlias), MAX_ALIASES);
    let first_ignored = MAX_DEVICE_SPECS + 2;
    let last = config.errors.len() - 2;
    assert_eq!(
        config.errors[last..],
        [
            (
                Problem::TooManyValues,
                format!("[pci] device_spec (line {first_ignored}): {} device specs past the first 256, ignored", lines - MAX_DEVICE_SPECS)
            ),
            (
                Problem::TooManyValues,
                format!("[pci] alias (line {}): {} aliases past the first 256, ignored", lines + 2 + MAX_ALIASES, lines - MAX_ALIASES)
            ),
        ]
    );
}

#[test]
fn errors_name_the_place_and_the_reason_never_the_text() {
    const MARKER: &str = "SECRET-7f3a";
    let config = parse_config(&format!(
        r#"[pci]
device_spec = {{"vendor_id": "{MARKER}"}}
device_spec = {{"product_id": ["{MARKER}"]}}
device_spec = ["{MARKER}"]
device_spec = "{MARKER}"
device_spec = {{"address": "{MARKER}"}}
device_spec = {{"address": {{"bus": "{MARKER}("}}}}
device_spec = {{"address": {{"bus": "{MARKER}{{99999}}"}}}}
device_spec = {{"address": ["{MARKER}"]}}
device_spec = {{"devname": ["{MARKER}"]}}
device_spec = {{"{MARKER}": 1
alias = ["{MARKER}"]
alias = {{"{MARKER}": "x"}}
alias = {{"name": ["{MARKER}"]}}
alias = {{"name": "{MARKER}", "device_type": "{MARKER}"}}
alias = {{"name": "{MARKER}", "numa_policy": "{MARKER}"}}
alias = {{"name": "{MARKER}", "capability_type": "{MARKER}"}}
alias = {{"name": "{MARKER}", "vendor_id": "{MARKER}"}}
alias = {{"name": "{MARKER}", "device_type": "type-PF"}}
alias = {{"name": "{MARKER}", "device_type": "type-VF"}}
alias = {{"name": "{MARKER}", "device_type": "type-PF", "numa_policy": "required"}}
alias = {{"name": "{MARKER}"}}
"#
    ));
    assert_eq!(config.errors.len(), 20, "{:#?}", config.errors);
    for (_, reason) in &config.errors {
        assert!(!reason.contains(MARKER), "{reason}");
    }
    assert!(
        config.errors[19].1.contains("on line 19"),
        "{:?}",
        config.errors[19]
    );
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
