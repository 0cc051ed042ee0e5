//! A PCI function's identity as sysfs shows it: the address that names its directory under
//! `bus/pci/devices` (`0000:3b:00.0`), and its `vendor`, `device` and `class` attributes,
//! which the kernel prints in hexadecimal (`0x10de`, `0x030200`). The one reader of these in
//! the crate: no other collector reads PCI ids or addresses from sysfs.

use std::fmt;

/// A PCI address split into its four fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    pub domain: u32,
    pub bus: u32,
    pub slot: u32,
    pub function: u32,
}

impl Address {
    /// `0000:3b:00.0`, in either case.
    pub fn parse(text: &str) -> Option<Address> {
        let (rest, function) = text.rsplit_once('.')?;
        let mut fields = rest.split(':');
        let (domain, bus, slot) = (fields.next()?, fields.next()?, fields.next()?);
        if fields.next().is_some() {
            return None;
        }
        let hex = |s: &str| u32::from_str_radix(s, 16).ok();
        Some(Address {
            domain: hex(domain)?,
            bus: hex(bus)?,
            slot: hex(slot)?,
            function: hex(function)?,
        })
    }
}

/// As the kernel names the device: `0000:3b:00.0`.
impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.slot, self.function
        )
    }
}

/// An id attribute's text: `0x10de` (the kernel's `0x%04x`; the class is `0x%06x`).
pub fn parse_id(text: &str) -> Option<u32> {
    u32::from_str_radix(text.strip_prefix("0x").unwrap_or(text), 16).ok()
}

/// A vendor or device id, which PCI makes 16 bits wide.
pub fn parse_id16(text: &str) -> Option<u16> {
    u16::try_from(parse_id(text)?).ok()
}

/// What the listing reads of every device: enough to choose it and to match Nova specs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub address: Address,
    pub vendor: u16,
    pub device: u16,
    pub class: u32,
}

/// The bytes [`kernel_hex`] writes at most: `0x` and eight digits.
pub const KERNEL_HEX_BYTES: usize = 10;

/// `value` as the kernel prints an id (`0x%04x`, the class `0x%06x`): `0x` and at least
/// `digits` lowercase hex digits, written into `buf` (no allocation: a label value made
/// once per unit is looked up by it every scrape).
pub fn kernel_hex(value: u32, digits: usize, buf: &mut [u8; KERNEL_HEX_BYTES]) -> &str {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let needed = value.checked_ilog(16).map_or(1, |top| top as usize + 1);
    let digits = digits.clamp(needed, KERNEL_HEX_BYTES - 2);
    buf[..2].copy_from_slice(b"0x");
    for (i, byte) in buf[2..2 + digits].iter_mut().enumerate() {
        let shift = 4 * (digits - 1 - i);
        *byte = HEX[(value >> shift) as usize & 0xF];
    }
    std::str::from_utf8(&buf[..2 + digits]).unwrap_or_default()
}

/// The identity of the device named `address`, its ids read by `id` (`vendor`, `device`,
/// `class`, as [`parse_id`] parses them); `None` when any part cannot be read or parsed (such a device is
/// not one this collector can choose).
pub fn read_identity(address: &str, mut id: impl FnMut(&str) -> Option<u32>) -> Option<Identity> {
    let (vendor, device) = (id("vendor")?, id("device")?);
    Some(Identity {
        class: id("class")?,
        address: Address::parse(address)?,
        vendor: u16::try_from(vendor).ok()?,
        device: u16::try_from(device).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::{AttributeReader, SysDir};

    #[test]
    fn kernel_hex_is_printf_hex() {
        for (value, digits) in [
            (0, 4),
            (0x10de, 4),
            (0x1eb8, 4),
            (0x30200, 6),
            (0xabcdef12, 4),
        ] {
            let expected = format!("{value:#0width$x}", width = digits + 2);
            assert_eq!(
                kernel_hex(value, digits, &mut [0; KERNEL_HEX_BYTES]),
                expected
            );
        }
    }

    #[test]
    fn addresses() {
        let address = Address::parse("0000:3B:00.1").unwrap();
        assert_eq!(
            address,
            Address {
                domain: 0,
                bus: 0x3b,
                slot: 0,
                function: 1
            }
        );
        assert_eq!(address.to_string(), "0000:3b:00.1");
        for bad in [
            "3b:00.0",
            "0000:3b:00",
            "0000:3b:00:00.0",
            "0000:3g:00.0",
            "",
        ] {
            assert_eq!(Address::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn ids_as_the_kernel_prints_them() {
        assert_eq!(parse_id("0x10de"), Some(0x10de));
        assert_eq!(parse_id("0x030200"), Some(0x030200));
        assert_eq!(parse_id16("0x15b3"), Some(0x15b3));
        assert_eq!(parse_id16("0x10000"), None);
        assert_eq!(parse_id("nvidia"), None);
        assert_eq!(parse_id(""), None);
    }

    #[test]
    fn identity_of_a_device_directory() {
        let tmp = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("vendor", "0x10de\n"),
            ("device", "0x1eb8\n"),
            ("class", "0x030200\n"),
        ] {
            std::fs::write(tmp.path().join(name), text).unwrap();
        }
        let dir = SysDir::open(tmp.path(), "").unwrap();
        let mut reader = AttributeReader::default();
        let identity = read_identity("0000:3b:00.0", |name| {
            parse_id(dir.read(name, &mut reader).ok()?)
        })
        .unwrap();
        assert_eq!((identity.vendor, identity.device), (0x10de, 0x1eb8));
        assert_eq!(identity.class >> 8, 0x0302);
        assert_eq!(identity.address.to_string(), "0000:3b:00.0");
        assert!(read_identity("nvidia0", |name| parse_id(
            dir.read(name, &mut reader).ok()?
        ))
        .is_none());
        std::fs::remove_file(tmp.path().join("class")).unwrap();
        assert!(read_identity("0000:3b:00.0", |name| parse_id(
            dir.read(name, &mut reader).ok()?
        ))
        .is_none());
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies::text;
    use proptest::prelude::*;

    const ID_TOKENS: &[&str] = &[
        "0000",
        "3b",
        "00",
        "0",
        "f",
        "ffffffff",
        "100000000",
        ":",
        ".",
        "0x",
        "+",
        "-",
        " ",
    ];

    fn address() -> impl Strategy<Value = Address> {
        (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
            |(domain, bus, slot, function)| Address {
                domain,
                bus,
                slot,
                function,
            },
        )
    }

    proptest! {
        #[test]
        fn any_text_is_an_address_or_none(text in text(ID_TOKENS)) {
            if let Some(address) = Address::parse(&text) {
                // Four fields, whatever their case and zero padding.
                prop_assert_eq!(Address::parse(&address.to_string()), Some(address));
            }
            if let Some(id) = parse_id(&text) {
                prop_assert_eq!(parse_id16(&text), u16::try_from(id).ok());
            }
        }

        #[test]
        fn a_printed_address_parses_back(address in address(), upper: bool) {
            let printed = address.to_string();
            let printed = if upper { printed.to_uppercase() } else { printed };
            prop_assert_eq!(Address::parse(&printed), Some(address));
        }

        /// The kernel prints `0x%04x` for vendor and device, `0x%06x` for the class.
        #[test]
        fn a_printed_id_parses_back(id: u32) {
            prop_assert_eq!(parse_id(&format!("0x{id:04x}")), Some(id));
            prop_assert_eq!(parse_id(&format!("0x{id:06x}")), Some(id));
            prop_assert_eq!(parse_id16(&format!("0x{id:04x}")), u16::try_from(id).ok());
        }
    }
}
