//! A PCI device's configuration space (`config` in sysfs), read per the PCI Local Bus and
//! PCI Express Base specifications: the command register, the capability list and the
//! extended capability list. Only the first 64 bytes (the header) are readable without root;
//! everything found through the capability lists is then absent, not an error.

use std::ops::Range;

/// Command register: Memory Space Enable.
const COMMAND_MEMORY_SPACE: u16 = 1 << 1;
/// Status register: a capability list exists.
const STATUS_CAPABILITY_LIST: u16 = 1 << 4;
const COMMAND_OFFSET: usize = 0x04;
const STATUS_OFFSET: usize = 0x06;
const CAPABILITY_POINTER_OFFSET: usize = 0x34;
const BAR_OFFSET: usize = 0x10;
pub const BAR_COUNT: usize = 6;
/// The header every reader may see; capabilities live above it.
const HEADER_BYTES: usize = 0x40;
const EXTENDED_START: usize = 0x100;

const CAP_POWER_MANAGEMENT: u8 = 0x01;
const CAP_MSI: u8 = 0x05;
const CAP_PCI_EXPRESS: u8 = 0x10;
const CAP_MSIX: u8 = 0x11;
const EXT_CAP_SRIOV: u16 = 0x0010;

/// The registers the walk parses in a capability, as (offset in it, bytes). The device or the
/// kernel changes them while the device stays; the list itself (ids, pointers) is fixed when
/// the device is made (see [`changing_registers`]).
const PM_CONTROL_STATUS: (usize, usize) = (0x04, 2);
const MSI_CONTROL: (usize, usize) = (0x02, 2);
const MSIX_CONTROL: (usize, usize) = (0x02, 2);
/// Speed in bits 3:0, width in bits 9:4, in both.
const PCIE_LINK_CAPABILITIES: (usize, usize) = (0x0C, 4);
const PCIE_LINK_STATUS: (usize, usize) = (0x12, 2);

/// Upper bound on list entries walked: more than fit in the space, so a loop ends.
const MAX_CAPABILITIES: usize = 64;
const MAX_EXTENDED_CAPABILITIES: usize = (4096 - EXTENDED_START) / 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsiX {
    pub enabled: bool,
    pub table_size: u16,
}

/// Link speed in GT/s and width in lanes, from the PCIe capability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub speed_gts: Option<f64>,
    pub width: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sriov {
    pub total_vfs: u16,
    pub num_vfs: u16,
}

/// What the readable part of a configuration space says.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ConfigSpace {
    pub readable_bytes: usize,
    pub memory_decode: Option<bool>,
    /// BARs the device implements as far as their registers show: a register with an
    /// address or with its hard-wired type bits (I/O, 64-bit, prefetchable) set. A 32-bit
    /// non-prefetchable memory BAR that firmware left unassigned reads 0 and is not seen.
    pub bars_in_header: [bool; BAR_COUNT],
    /// `Some(enabled)` when the device has an MSI capability.
    pub msi: Option<bool>,
    pub msix: Option<MsiX>,
    pub link_maximum: Option<Link>,
    pub link_current: Option<Link>,
    /// D-state from the power management capability: 0 = D0 ... 3 = D3hot.
    pub power_state: Option<u8>,
    pub sriov: Option<Sriov>,
    /// True when the header is readable but the capability list lies beyond what could be
    /// read (a non-root reader gets 64 bytes).
    pub capabilities_unreadable: bool,
}

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&self, offset: usize) -> Option<u8> {
        self.0.get(offset).copied()
    }
    fn u16(&self, offset: usize) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8(offset)?, self.u8(offset + 1)?]))
    }
    fn u32(&self, offset: usize) -> Option<u32> {
        Some(u32::from(self.u16(offset)?) | u32::from(self.u16(offset + 2)?) << 16)
    }
}

pub fn parse(config: &[u8]) -> ConfigSpace {
    let bytes = Bytes(config);
    let mut space = ConfigSpace {
        readable_bytes: config.len(),
        memory_decode: bytes
            .u16(COMMAND_OFFSET)
            .map(|command| command & COMMAND_MEMORY_SPACE != 0),
        ..ConfigSpace::default()
    };
    let mut index = 0;
    while index < BAR_COUNT {
        let register = bytes.u32(BAR_OFFSET + 4 * index).unwrap_or(0);
        space.bars_in_header[index] = register != 0;
        // A 64-bit memory BAR takes the next register for its upper half.
        let is_64_bit = register & 0x1 == 0 && (register >> 1) & 0x3 == 0x2;
        index += if is_64_bit { 2 } else { 1 };
    }
    let has_list = bytes
        .u16(STATUS_OFFSET)
        .is_some_and(|status| status & STATUS_CAPABILITY_LIST != 0);
    if has_list {
        if config.len() <= HEADER_BYTES {
            space.capabilities_unreadable = true;
        } else {
            walk_capabilities(&bytes, &mut space);
        }
    }
    if config.len() > EXTENDED_START {
        walk_extended_capabilities(&bytes, &mut space);
    }
    space
}

/// The capabilities of the standard list, as (id, offset), in list order; a loop or a
/// pointer into the header ends it.
fn capabilities<'a>(bytes: &'a Bytes) -> impl Iterator<Item = (u8, usize)> + 'a {
    let mut pointer = bytes.u8(CAPABILITY_POINTER_OFFSET).unwrap_or(0);
    (0..MAX_CAPABILITIES).map_while(move |_| {
        // The two low bits are reserved; pointers below the header are the list's end.
        let at = usize::from(pointer & 0xFC);
        if at < HEADER_BYTES {
            return None;
        }
        let (id, next) = (bytes.u8(at)?, bytes.u8(at + 1)?);
        pointer = next;
        Some((id, at))
    })
}

/// The registers [`walk_capabilities`] parses in a capability with this id.
fn parsed_registers(id: u8) -> &'static [(usize, usize)] {
    match id {
        CAP_POWER_MANAGEMENT => &[PM_CONTROL_STATUS],
        CAP_MSI => &[MSI_CONTROL],
        CAP_MSIX => &[MSIX_CONTROL],
        CAP_PCI_EXPRESS => &[PCIE_LINK_CAPABILITIES, PCIE_LINK_STATUS],
        _ => &[],
    }
}

fn walk_capabilities(bytes: &Bytes, space: &mut ConfigSpace) {
    for (id, at) in capabilities(bytes) {
        let register = |(offset, _): (usize, usize)| at + offset;
        match id {
            CAP_POWER_MANAGEMENT => {
                // PMCSR bits 1:0.
                space.power_state =
                    (bytes.u16(register(PM_CONTROL_STATUS))).map(|pmcsr| (pmcsr & 0x3) as u8);
            }
            CAP_MSI => {
                space.msi = (bytes.u16(register(MSI_CONTROL))).map(|control| control & 1 != 0)
            }
            CAP_MSIX => {
                space.msix = bytes.u16(register(MSIX_CONTROL)).map(|control| MsiX {
                    enabled: control & 0x8000 != 0,
                    table_size: (control & 0x07FF) + 1,
                })
            }
            CAP_PCI_EXPRESS => {
                space.link_maximum =
                    (bytes.u32(register(PCIE_LINK_CAPABILITIES))).map(|cap| link(cap as u16));
                space.link_current = bytes.u16(register(PCIE_LINK_STATUS)).map(link);
            }
            _ => {}
        }
    }
}

/// Where the standard space (its first 256 bytes) changes while the device stays, as far as
/// [`parse`] reads it: the command register, the BARs, and the registers parsed in each
/// capability. The rest it reads (the status register's capability bit, the capability list)
/// is fixed when the device is made, so a copy of the space kept from an earlier read, with
/// these ranges read again, parses as a whole read now would. The kernel reads config space a
/// register at a time, each a config cycle: these are about 12 of the 64 registers. In
/// order, neighbours less than a register apart merged, within `standard`.
pub fn changing_registers(standard: &[u8]) -> Vec<Range<usize>> {
    let bytes = Bytes(standard);
    let mut ranges = vec![
        COMMAND_OFFSET..COMMAND_OFFSET + 2,
        BAR_OFFSET..BAR_OFFSET + 4 * BAR_COUNT,
    ];
    let has_list = bytes
        .u16(STATUS_OFFSET)
        .is_some_and(|status| status & STATUS_CAPABILITY_LIST != 0);
    if has_list && standard.len() > HEADER_BYTES {
        for (id, at) in capabilities(&bytes) {
            let registers = parsed_registers(id).iter();
            ranges.extend(registers.map(|(offset, len)| at + offset..at + offset + len));
        }
    }
    ranges.sort_by_key(|range| range.start);
    let mut merged: Vec<Range<usize>> = Vec::new();
    for range in ranges {
        let range = range.start.min(standard.len())..range.end.min(standard.len());
        match merged.last_mut() {
            _ if range.is_empty() => {}
            Some(last) if range.start <= last.end + 4 => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    merged
}

fn walk_extended_capabilities(bytes: &Bytes, space: &mut ConfigSpace) {
    let mut at = EXTENDED_START;
    for _ in 0..MAX_EXTENDED_CAPABILITIES {
        let Some(header) = bytes.u32(at) else {
            return;
        };
        // An all-zero or all-ones header: no extended capabilities (conventional PCI, or a
        // device that fell off the bus).
        if header == 0 || header == u32::MAX {
            return;
        }
        if header as u16 == EXT_CAP_SRIOV {
            if let (Some(total_vfs), Some(num_vfs)) = (bytes.u16(at + 0x0E), bytes.u16(at + 0x10)) {
                space.sriov = Some(Sriov { total_vfs, num_vfs });
            }
        }
        let next = (header >> 20) as usize & 0xFFC;
        if next < EXTENDED_START {
            return;
        }
        at = next;
    }
}

fn link(register: u16) -> Link {
    Link {
        speed_gts: speed_gts(register & 0xF),
        width: (register >> 4) & 0x3F,
    }
}

/// The link speed encodings of the PCIe specification (Link Capabilities and Link Status).
pub fn speed_gts(encoding: u16) -> Option<f64> {
    match encoding {
        1 => Some(2.5),
        2 => Some(5.0),
        3 => Some(8.0),
        4 => Some(16.0),
        5 => Some(32.0),
        6 => Some(64.0),
        _ => None,
    }
}

/// A type 0 header with a capability list: PM at 0x60, MSI at 0x68, PCIe at 0x78,
/// MSI-X at 0xc8 (the T4's layout in the shared lspci capture), SR-IOV at 0x100.
#[cfg(test)]
pub(super) fn t4_like(msix_enabled: bool) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    c[0..2].copy_from_slice(&0x10deu16.to_le_bytes());
    c[2..4].copy_from_slice(&0x1eb8u16.to_le_bytes());
    c[4..6].copy_from_slice(&0x0006u16.to_le_bytes()); // Mem+ BusMaster+
    c[6..8].copy_from_slice(&0x0010u16.to_le_bytes()); // Cap+
    c[0x10..0x14].copy_from_slice(&0xb700_0000u32.to_le_bytes());
    c[0x14..0x18].copy_from_slice(&0x0000_000cu32.to_le_bytes()); // 64-bit, unassigned
    c[0x34] = 0x60;
    c[0x60] = 0x01;
    c[0x61] = 0x68;
    c[0x64] = 0x03; // D3hot
    c[0x68] = 0x05;
    c[0x69] = 0x78;
    c[0x6a] = 0x80; // MSI control: 64-bit, disabled
    c[0x78] = 0x10;
    c[0x79] = 0xc8;
    // Link cap: 8 GT/s x16; link status: 2.5 GT/s x8.
    c[0x84..0x88].copy_from_slice(&(3u32 | 16 << 4).to_le_bytes());
    c[0x8a..0x8c].copy_from_slice(&(1u16 | 8 << 4).to_le_bytes());
    c[0xc8] = 0x11;
    c[0xc9] = 0x00;
    let control: u16 = 5 | if msix_enabled { 0x8000 } else { 0 };
    c[0xca..0xcc].copy_from_slice(&control.to_le_bytes());
    c[0x100..0x104].copy_from_slice(&(0x0010u32 | 1 << 16).to_le_bytes());
    c[0x10e..0x110].copy_from_slice(&16u16.to_le_bytes());
    c[0x110..0x112].copy_from_slice(&4u16.to_le_bytes());
    c
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
