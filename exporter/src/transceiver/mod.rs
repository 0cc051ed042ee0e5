//! Pluggable transceiver (cable and optical module) memory decoded: the identifier, vendor
//! strings, the module's monitors (temperature, supply voltage, per-lane RX power, TX power
//! and bias), its own alarm and warning thresholds, and its flags. Plain code, no I/O: the
//! reader hands over the pages it fetched (ethtool netlink `ETHTOOL_MSG_MODULE_EEPROM_GET`
//! answers 128-byte halves by I2C address, page and bank), in three layouts:
//! SFF-8472 (SFP: A0h and A2h, `sff8472.rs`), SFF-8636 (QSFP+/QSFP28: lower page, pages 00h
//! and 03h, `sff8636.rs`) and CMIS (QSFP-DD, OSFP: lower page, pages 00h, 01h, 02h and 11h,
//! `cmis.rs`). Offsets are the specifications', as ethtool's `sfpdiag.c`, `qsfp.h` and
//! `cmis.h` (ethtool commit e6cc6807) name them; values are converted to base units.

mod cmis;
mod sff8472;
mod sff8636;

use std::collections::BTreeMap;

/// One half of a page: what one module EEPROM request returns at most.
pub const HALF_PAGE: usize = 128;

/// SFF-8024's identifier (byte 0 of the lower page): which layout the rest follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Sff8472,
    Sff8636,
    Cmis,
}

impl Layout {
    /// The layout an identifier byte names (SFF-8024 table 4-1), or `None` for the types this
    /// decoder does not read (GBIC, XFP, CXP, vendor-specific).
    pub fn of(identifier: u8) -> Option<Self> {
        match identifier {
            0x03 => Some(Self::Sff8472),
            0x0C | 0x0D | 0x11 => Some(Self::Sff8636),
            0x18 | 0x19 | 0x1E => Some(Self::Cmis),
            _ => None,
        }
    }
}

/// The module's type as the `type` label says it (SFF-8024 names, lower case).
fn type_name(identifier: u8) -> &'static str {
    match identifier {
        0x03 => "sfp",
        0x0C => "qsfp",
        0x0D => "qsfp+",
        0x11 => "qsfp28",
        0x18 => "qsfp-dd",
        0x19 => "osfp",
        0x1E => "qsfp+cmis",
        _ => "other",
    }
}

/// What the reader fetched from one module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// I2C address 0x50, bytes 0-127.
    pub lower: Vec<u8>,
    /// I2C address 0x50, bytes 128-255 of each upper page read (bank 0), by page number.
    pub upper: BTreeMap<u8, Vec<u8>>,
    /// SFF-8472's diagnostics, I2C address 0x51 bytes 0-255; empty when not read.
    pub a2: Vec<u8>,
}

/// What to read after the lower page: upper pages of 0x50 and, for SFP, 0x51.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub upper: Vec<u8>,
    pub a2: bool,
}

/// The pages to read for a module whose lower page is `lower`.
pub fn wanted(lower: &[u8]) -> Result<Wanted, DecodeError> {
    let identifier = *lower.first().ok_or(DecodeError::Short { page: "lower" })?;
    let layout = Layout::of(identifier).ok_or(DecodeError::UnknownIdentifier(identifier))?;
    Ok(match layout {
        // Everything SFF-8472 identifies is in A0h's lower half.
        Layout::Sff8472 => Wanted {
            upper: Vec::new(),
            a2: sff8472::monitored(lower),
        },
        Layout::Sff8636 if sff8636::flat(lower) => Wanted {
            upper: vec![0],
            a2: false,
        },
        Layout::Sff8636 => Wanted {
            upper: vec![0, 3],
            a2: false,
        },
        Layout::Cmis if cmis::flat(lower) => Wanted {
            upper: vec![0],
            a2: false,
        },
        Layout::Cmis => Wanted {
            upper: vec![0, 1, 2, 0x11],
            a2: false,
        },
    })
}

/// A monitored quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Quantity {
    Temperature,
    Voltage,
    TxBias,
    TxPower,
    RxPower,
}

impl Quantity {
    pub const ALL: [Self; 5] = [
        Self::Temperature,
        Self::Voltage,
        Self::TxBias,
        Self::TxPower,
        Self::RxPower,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Temperature => "temperature",
            Self::Voltage => "supply_voltage",
            Self::TxBias => "tx_bias",
            Self::TxPower => "tx_power",
            Self::RxPower => "rx_power",
        }
    }

    /// Whether each lane has its own (bias and optical power), not the module as a whole.
    pub fn per_lane(self) -> bool {
        !matches!(self, Self::Temperature | Self::Voltage)
    }

    /// A raw 16-bit monitor word as a number of the specifications' units (temperature is
    /// two's complement, the rest unsigned).
    fn raw(self, word: u16) -> f64 {
        match self {
            Self::Temperature => f64::from(word as i16),
            _ => f64::from(word),
        }
    }

    /// A number of the specifications' units in base units: 1/256 degree Celsius, 100 uV,
    /// 0.1 uW, 2 uA (SFF-8472 9.2, SFF-8636 6.2.4, CMIS 8.2.5); `bias_scale` is CMIS's TX
    /// bias multiplier (1 elsewhere).
    fn base_units(self, raw: f64, bias_scale: f64) -> f64 {
        match self {
            Self::Temperature => raw / 256.0,
            Self::Voltage => raw * 100e-6,
            Self::TxPower | Self::RxPower => raw * 0.1e-6,
            Self::TxBias => raw * 2e-6 * bias_scale,
        }
    }

    /// A monitor word in base units.
    fn convert(self, word: u16, bias_scale: f64) -> f64 {
        self.base_units(self.raw(word), bias_scale)
    }
}

/// Which limit a threshold or flag is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    HighAlarm,
    LowAlarm,
    HighWarning,
    LowWarning,
}

impl Level {
    /// In the order every layout stores thresholds: high alarm, low alarm, high warning,
    /// low warning, two bytes each.
    pub const ALL: [Self; 4] = [
        Self::HighAlarm,
        Self::LowAlarm,
        Self::HighWarning,
        Self::LowWarning,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::HighAlarm => "high_alarm",
            Self::LowAlarm => "low_alarm",
            Self::HighWarning => "high_warning",
            Self::LowWarning => "low_warning",
        }
    }
}

/// A monitor's value now, in base units; `lane` is 1-based, `None` for module-wide ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reading {
    pub quantity: Quantity,
    pub lane: Option<u8>,
    pub value: f64,
}

/// A limit the module itself sets for a quantity (the same for all its lanes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold {
    pub quantity: Quantity,
    pub level: Level,
    pub value: f64,
}

/// Whether the module has raised an alarm or warning flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flag {
    pub quantity: Quantity,
    pub lane: Option<u8>,
    pub level: Level,
    pub raised: bool,
}

/// A module decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    pub identifier: u8,
    pub type_name: &'static str,
    pub vendor: String,
    pub part_number: String,
    pub serial: String,
    pub readings: Vec<Reading>,
    pub thresholds: Vec<Threshold>,
    pub flags: Vec<Flag>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("module EEPROM {page} page is missing or shorter than the layout needs")]
    Short { page: &'static str },
    #[error("module identifier {0:#04x} is not SFP, QSFP or CMIS")]
    UnknownIdentifier(u8),
    #[error("module EEPROM {field} is not printable ASCII")]
    NotAscii { field: &'static str },
}

/// Decodes what the reader fetched.
pub fn decode(memory: &Memory) -> Result<Module, DecodeError> {
    let identifier = *memory
        .lower
        .first()
        .ok_or(DecodeError::Short { page: "lower" })?;
    match Layout::of(identifier).ok_or(DecodeError::UnknownIdentifier(identifier))? {
        Layout::Sff8472 => sff8472::decode(memory),
        Layout::Sff8636 => sff8636::decode(memory),
        Layout::Cmis => cmis::decode(memory),
    }
}

/// Where a layout keeps its 16-byte identity fields.
struct Identity {
    vendor: usize,
    part_number: usize,
    serial: usize,
}

/// A page's first `HALF_PAGE` bytes, or `Short` naming it.
fn page<'a>(bytes: Option<&'a Vec<u8>>, name: &'static str) -> Result<&'a [u8], DecodeError> {
    match bytes {
        Some(bytes) if bytes.len() >= HALF_PAGE => Ok(&bytes[..HALF_PAGE]),
        _ => Err(DecodeError::Short { page: name }),
    }
}

/// A module with its identity read from `bytes` (a half page: `ids` are relative to it), and
/// nothing monitored yet.
fn module(identifier: u8, bytes: &[u8], ids: Identity) -> Result<Module, DecodeError> {
    Ok(Module {
        identifier,
        type_name: type_name(identifier),
        vendor: ascii(bytes, ids.vendor, "vendor name")?,
        part_number: ascii(bytes, ids.part_number, "part number")?,
        serial: ascii(bytes, ids.serial, "serial number")?,
        readings: Vec::new(),
        thresholds: Vec::new(),
        flags: Vec::new(),
    })
}

/// A 16-byte ASCII field padded with spaces (SFF-8472 4.1, SFF-8636 6.3, CMIS 8.3): the
/// padding (and NULs some vendors pad with) trimmed; anything else unprintable is garbage.
fn ascii(bytes: &[u8], offset: usize, field: &'static str) -> Result<String, DecodeError> {
    let raw = &bytes[offset..offset + 16];
    if raw.iter().any(|&b| b != 0 && !(0x20..0x7f).contains(&b)) {
        return Err(DecodeError::NotAscii { field });
    }
    let text: String = raw
        .iter()
        .filter(|&&b| b != 0)
        .map(|&b| char::from(b))
        .collect();
    Ok(text.trim().to_owned())
}

/// The big-endian word at `offset`.
fn word(bytes: &[u8], offset: usize) -> u16 {
    u16::from_be_bytes([bytes[offset], bytes[offset + 1]])
}

/// The four thresholds of `quantity` stored from `offset` on, high alarm first.
fn thresholds(bytes: &[u8], offset: usize, quantity: Quantity, bias_scale: f64) -> [Threshold; 4] {
    Level::ALL.map(|level| Threshold {
        quantity,
        level,
        value: quantity.convert(word(bytes, offset + 2 * level as usize), bias_scale),
    })
}

/// A quantity's four flags from the low four bits of `bits`: high alarm, low alarm, high
/// warning, low warning from bit 0 up (CMIS's order; the others are rearranged to it).
fn flags(bits: u8, quantity: Quantity, lane: Option<u8>) -> [Flag; 4] {
    std::array::from_fn(|i| Flag {
        quantity,
        lane,
        level: Level::ALL[i],
        raised: bits & (1 << i) != 0,
    })
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
pub(crate) mod tests;
