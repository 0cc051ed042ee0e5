//! SFF-8636 (QSFP+, QSFP28): monitors and flags in the lower page, identity in page 00h,
//! thresholds in page 03h (absent from flat memory), four lanes. Offsets: SFF-8636 rev 2.10a
//! tables 6-2 to 6-8, 6-15 and 6-26; ethtool's `qsfp.h` (`SFF8636_*`).

use super::{
    flags, module, page, thresholds, word, DecodeError, Identity, Memory, Module, Quantity,
    Reading, HALF_PAGE,
};
use Quantity::{RxPower, Temperature, TxBias, TxPower, Voltage};

/// Lower page byte 2, status: bit 2 is Flat_mem (upper page 00h only).
const STATUS: usize = 2;
const FLAT_MEMORY: u8 = 1 << 2;
/// Page 00h byte 220, diagnostic monitoring type: bit 2 TX power measured.
const DIAG_TYPE: usize = 220;
const TX_POWER_MEASURED: u8 = 1 << 2;
const LANES: u8 = 4;

/// Page 00h, at the same offsets as SFF-8472's A0h plus 128.
const IDENTITY: Identity = Identity {
    vendor: 148 - HALF_PAGE,
    part_number: 168 - HALF_PAGE,
    serial: 196 - HALF_PAGE,
};

/// Each quantity: its monitor in the lower page (lane 1's, the next lanes follow), its flag
/// byte there (one nibble of high alarm, low alarm, high warning, low warning per lane, two
/// lanes a byte) and its thresholds in page 03h.
const LAYOUT: [(Quantity, usize, usize, usize); 5] = [
    (Temperature, 22, 6, 128),
    (Voltage, 26, 7, 144),
    (RxPower, 34, 9, 176),
    (TxBias, 42, 11, 184),
    (TxPower, 50, 13, 192),
];

pub(super) fn flat(lower: &[u8]) -> bool {
    lower
        .get(STATUS)
        .is_some_and(|&status| status & FLAT_MEMORY != 0)
}

pub(super) fn decode(memory: &Memory) -> Result<Module, DecodeError> {
    let lower = page(Some(&memory.lower), "lower")?;
    let page00 = page(memory.upper.get(&0), "00h")?;
    let page03 = if flat(lower) {
        None
    } else {
        Some(page(memory.upper.get(&3), "03h")?)
    };
    let mut module = module(lower[0], page00, IDENTITY)?;
    let tx_power = page00[DIAG_TYPE - HALF_PAGE] & TX_POWER_MEASURED != 0;
    for (quantity, monitor, flag_byte, limits) in LAYOUT {
        if quantity == TxPower && !tx_power {
            continue;
        }
        let lanes = if quantity.per_lane() {
            (1..=LANES).map(Some).collect()
        } else {
            vec![None]
        };
        for lane in lanes {
            let index = usize::from(lane.unwrap_or(1) - 1);
            module.readings.push(Reading {
                quantity,
                lane,
                value: quantity.convert(word(lower, monitor + 2 * index), 1.0),
            });
            let byte = lower[flag_byte + index / 2];
            let nibble = if index % 2 == 0 {
                byte >> 4
            } else {
                byte & 0x0f
            };
            // High alarm is the nibble's top bit here.
            module
                .flags
                .extend(flags(nibble.reverse_bits() >> 4, quantity, lane));
        }
        if let Some(page03) = page03 {
            module
                .thresholds
                .extend(thresholds(page03, limits - HALF_PAGE, quantity, 1.0));
        }
    }
    Ok(module)
}
