//! PCIe Advanced Error Reporting counters the kernel keeps per device (4.19 and later, with
//! CONFIG_PCIEAER; drivers/pci/pcie/aer.c): `aer_dev_correctable`, `aer_dev_nonfatal` and
//! `aer_dev_fatal` on every device with an AER capability, `aer_rootport_total_err_*` on root
//! ports (and root complex event collectors). The counters are u64 and only grow until the
//! device is removed or the node reboots. A device without AER (no capability, an older
//! kernel, AER owned by the firmware) simply has no such files.

use std::path::Path;

use crate::metrics::{Labels, Value};
use crate::sysfs::{SysDir, SysfsError};

use super::identity::Address;
use super::{with_label, Read, AER_ERRORS, AER_MESSAGES, AER_ROOT_PORT_MESSAGES};

/// Each `aer_dev_*` file and the severity label of its counts.
const DEVICE_FILES: [(&str, &str); 3] = [
    ("aer_dev_correctable", "correctable"),
    ("aer_dev_nonfatal", "nonfatal"),
    ("aer_dev_fatal", "fatal"),
];
/// Each root port total and the severity label of its count.
const ROOT_PORT_FILES: [(&str, &str); 3] = [
    ("aer_rootport_total_err_cor", "correctable"),
    ("aer_rootport_total_err_nonfatal", "nonfatal"),
    ("aer_rootport_total_err_fatal", "fatal"),
];
/// An AER status register has 32 bits, so a kernel prints at most 32 error lines per file;
/// more is not the kernel's file, and would be that many series.
const MAX_ERROR_NAMES: usize = 32;
/// The line of each file that counts error messages rather than error bits.
const TOTAL_PREFIX: &str = "TOTAL_";

/// One `aer_dev_*` file: a count per error bit, by the name the kernel gives it (the names
/// differ between kernel versions; a bit without a name shows as `dev_cor_errs_bit[N]` once it
/// counted), and the error messages the device sent (`TOTAL_ERR_COR`, ...). One message can
/// carry several error bits.
#[derive(Debug, PartialEq, Eq)]
struct DeviceCounts {
    errors: Vec<(String, u64)>,
    messages: u64,
}

/// Parses `<name> <count>` lines and one `TOTAL_<...> <count>` line; the reason on failure.
fn parse_device_counts(text: &str) -> Result<DeviceCounts, &'static str> {
    let mut errors: Vec<(String, u64)> = Vec::new();
    let mut messages = None;
    for line in text.lines() {
        let (name, count) = line
            .split_once(' ')
            .ok_or("expected '<error name> <count>' lines")?;
        if name.is_empty() || name.chars().any(char::is_whitespace) {
            return Err("expected '<error name> <count>' lines");
        }
        let count: u64 = count
            .parse()
            .map_err(|_| "a count that is not an integer")?;
        if name.starts_with(TOTAL_PREFIX) {
            if messages.replace(count).is_some() {
                return Err("more than one TOTAL_ line");
            }
        } else if errors.iter().any(|(seen, _)| seen == name) {
            return Err("an error name twice");
        } else if errors.len() == MAX_ERROR_NAMES {
            return Err("more error names than an AER status register has bits");
        } else {
            errors.push((name.to_string(), count));
        }
    }
    Ok(DeviceCounts {
        errors,
        messages: messages.ok_or("no TOTAL_ line")?,
    })
}

/// The root port above a device, from the device's path under `/sys/devices` (its
/// `bus/pci/devices` link, `../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0` ->
/// `0000:00:01.0`): the PCI device right below the last host bridge (`pciDDDD:BB`; a VMD
/// domain's bridge sits below another's). `None` for a device on a root bus itself.
pub(super) fn root_port_of(device_path: &Path) -> Option<String> {
    let components: Vec<&str> = device_path.to_str()?.split('/').collect();
    let bridge = components.iter().rposition(|c| c.starts_with("pci"))?;
    let below = &components[bridge + 1..];
    // The device itself right below the bridge: on a root bus, no root port.
    if below.len() < 2 {
        return None;
    }
    Address::parse(below[0]).map(|address| address.to_string())
}

impl Read<'_> {
    /// The AER counters of one device: the `aer_dev_*` files, and on a root port its totals
    /// of messages received from itself and the devices below it.
    pub(super) fn aer(&mut self, dir: &SysDir, labels: &Labels) {
        for (file, severity) in DEVICE_FILES {
            let text = self.unit.optional_text(dir, file);
            let text = text.map(|text| text.map(str::to_string));
            let Some(text) = self.unit.reported(text).flatten() else {
                continue;
            };
            let counts = match parse_device_counts(&text) {
                Ok(counts) => counts,
                Err(reason) => {
                    self.error(SysfsError::parse(&dir.path(file), reason, &text));
                    continue;
                }
            };
            let severity_labels = || with_label(labels, ("severity", severity.into()));
            for (error, count) in counts.errors {
                let labels = severity_labels().chain([("error", error.into())]);
                self.push(&AER_ERRORS, labels, Value::Int(count));
            }
            self.push(
                &AER_MESSAGES,
                severity_labels(),
                Value::Int(counts.messages),
            );
        }
        for (file, severity) in ROOT_PORT_FILES {
            let count = self.unit.optional_u64(dir, file);
            if let Some(count) = self.unit.reported(count).flatten() {
                self.push(
                    &AER_ROOT_PORT_MESSAGES,
                    with_label(labels, ("severity", severity.into())),
                    Value::Int(count),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `aer_dev_correctable` as Debian's 6.1 and 6.12 kernels print it (aer.c's
    /// `aer_stats_dev_attr`: `"%s %llu\n"` per named bit, then `"TOTAL_%s %llu\n"`).
    const CORRECTABLE: &str = "RxErr 3\nBadTLP 1\nBadDLLP 0\nRollover 0\nTimeout 0\n\
                               NonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 4";

    #[test]
    fn kernel_format() {
        let counts = parse_device_counts(CORRECTABLE).unwrap();
        assert_eq!(counts.messages, 4);
        assert_eq!(counts.errors.len(), 8);
        assert_eq!(counts.errors[0], ("RxErr".to_string(), 3));
        assert_eq!(counts.errors[1], ("BadTLP".to_string(), 1));
        // A bit the kernel has no name for, once it counted; u64 counts.
        let unnamed =
            "Undefined 0\ndev_nonfatal_errs_bit[1] 2\nTOTAL_ERR_NONFATAL 18446744073709551615";
        let counts = parse_device_counts(unnamed).unwrap();
        assert_eq!(
            counts.errors[1],
            ("dev_nonfatal_errs_bit[1]".to_string(), 2)
        );
        assert_eq!(counts.messages, u64::MAX);
        // A device that never counted anything still has its total.
        assert_eq!(
            parse_device_counts("TOTAL_ERR_FATAL 0"),
            Ok(DeviceCounts {
                errors: Vec::new(),
                messages: 0
            })
        );
    }

    #[test]
    fn malformed_files_are_refused() {
        for (text, reason) in [
            ("RxErr 3", "no TOTAL_ line"),
            ("", "no TOTAL_ line"),
            (
                "RxErr\nTOTAL_ERR_COR 0",
                "expected '<error name> <count>' lines",
            ),
            (
                "RxErr  3\nTOTAL_ERR_COR 3",
                "a count that is not an integer",
            ),
            (
                "RxErr -1\nTOTAL_ERR_COR 0",
                "a count that is not an integer",
            ),
            ("RxErr 1\nRxErr 1\nTOTAL_ERR_COR 2", "an error name twice"),
            (
                "TOTAL_ERR_COR 1\nTOTAL_ERR_COR 1",
                "more than one TOTAL_ line",
            ),
        ] {
            assert_eq!(parse_device_counts(text), Err(reason), "{text:?}");
        }
        let many: String = (0..=MAX_ERROR_NAMES).map(|i| format!("E{i} 0\n")).collect();
        assert_eq!(
            parse_device_counts(&format!("{many}TOTAL_ERR_COR 0")),
            Err("more error names than an AER status register has bits")
        );
    }

    #[test]
    fn root_ports() {
        let root_port = |path: &str| root_port_of(Path::new(path));
        assert_eq!(
            root_port("../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0").as_deref(),
            Some("0000:00:01.0")
        );
        // Behind a switch: still the port below the host bridge.
        assert_eq!(
            root_port("../../../devices/pci0000:ad/0000:ad:00.0/0000:ae:00.0/0000:af:00.0")
                .as_deref(),
            Some("0000:ad:00.0")
        );
        // In a VMD domain: the root port inside the domain.
        assert_eq!(
            root_port(
                "../../../devices/pci0000:00/0000:00:0e.0/pci10000:00/10000:00:02.0/10000:01:00.0"
            )
            .as_deref(),
            Some("10000:00:02.0")
        );
        // On the root bus (an integrated device, qemu's pc machine): none.
        assert_eq!(root_port("../../../devices/pci0000:00/0000:00:02.0"), None);
        assert_eq!(root_port("../../../devices/platform/foo"), None);
        assert_eq!(
            root_port("../../../devices/pci0000:00/garbage/0000:01:00.0"),
            None
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies::text;
    use proptest::prelude::*;

    const TOKENS: &[&str] = &[
        "RxErr",
        "TOTAL_ERR_COR",
        "TOTAL_",
        "dev_cor_errs_bit[5]",
        " ",
        "\n",
        "0",
        "7",
        "18446744073709551615",
        "18446744073709551616",
        "-1",
    ];

    proptest! {
        #[test]
        fn never_panics(input in text(TOKENS)) {
            let _ = parse_device_counts(&input);
        }

        #[test]
        fn reads_back_what_it_encodes(
            names in proptest::collection::btree_set("[A-Za-z][A-Za-z0-9_]{0,15}", 0..MAX_ERROR_NAMES),
            total in any::<u64>(),
            count in any::<u64>(),
        ) {
            let names: Vec<String> = names.into_iter().filter(|n| !n.starts_with(TOTAL_PREFIX)).collect();
            let text: String = names.iter().map(|n| format!("{n} {count}\n")).collect::<String>()
                + &format!("TOTAL_ERR_COR {total}");
            let counts = parse_device_counts(&text).unwrap();
            prop_assert_eq!(counts.messages, total);
            prop_assert_eq!(counts.errors, names.into_iter().map(|n| (n, count)).collect::<Vec<_>>());
        }
    }
}
