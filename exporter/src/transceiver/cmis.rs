//! CMIS (QSFP-DD, OSFP, QSFP+ with CMIS): module monitors and flags in the lower page,
//! identity in page 00h; where memory is paged, the lane monitors' advertisement in page 01h,
//! thresholds in page 02h and the lanes' monitors and flags in page 11h (bank 0: lanes 1-8).
//! Offsets: CMIS 5.2 tables 8-4, 8-9, 8-10, 8-29, 8-43, 8-71 and 8-78; ethtool's `cmis.h`
//! (`CMIS_*`).

use super::{
    flags, module, page, thresholds, word, DecodeError, Identity, Memory, Module, Quantity,
    Reading, HALF_PAGE,
};
use Quantity::{RxPower, Temperature, TxBias, TxPower, Voltage};

/// Lower page byte 2: bit 7 is flat memory (upper page 00h only).
const MEMORY_MODEL: usize = 2;
const FLAT_MEMORY: u8 = 1 << 7;
/// Lower page: temperature and supply voltage monitors; their flags in byte 9, temperature
/// in bits 0-3, voltage in bits 4-7, each as high alarm, low alarm, high warning, low warning
/// from the lowest bit up.
const MODULE_MONITORS: [(Quantity, usize, u8); 2] = [(Temperature, 14, 0), (Voltage, 16, 4)];
const MODULE_FLAGS: usize = 9;
/// Page 01h byte 160: lane monitors supported (bit 0 TX bias, 1 TX power, 2 RX power) and
/// the TX bias multiplier in bits 3-4 (1, 2 or 4). ethtool's `cmis_tx_bias_mul()` divides by
/// it; the specification multiplies the 2 uA unit.
const LANE_MONITORS: usize = 160;
const LANES: u8 = 8;

const IDENTITY: Identity = Identity {
    vendor: 129 - HALF_PAGE,
    part_number: 148 - HALF_PAGE,
    serial: 166 - HALF_PAGE,
};

/// Each quantity's thresholds in page 02h.
const THRESHOLDS: [(Quantity, usize); 5] = [
    (Temperature, 128),
    (Voltage, 136),
    (TxPower, 176),
    (TxBias, 184),
    (RxPower, 192),
];
/// Each lane quantity: its bit in byte 160 of page 01h, its lane 1 monitor in page 11h
/// (the other lanes follow) and its first flag byte there (high alarm, low alarm, high
/// warning, low warning: a byte each, bit n for lane n + 1).
const LANE_LAYOUT: [(Quantity, u8, usize, usize); 3] = [
    (TxPower, 1 << 1, 154, 139),
    (TxBias, 1 << 0, 170, 143),
    (RxPower, 1 << 2, 186, 149),
];

pub(super) fn flat(lower: &[u8]) -> bool {
    lower
        .get(MEMORY_MODEL)
        .is_some_and(|&model| model & FLAT_MEMORY != 0)
}

pub(super) fn decode(memory: &Memory) -> Result<Module, DecodeError> {
    let lower = page(Some(&memory.lower), "lower")?;
    let page00 = page(memory.upper.get(&0), "00h")?;
    let mut module = module(lower[0], page00, IDENTITY)?;
    for (quantity, monitor, first_bit) in MODULE_MONITORS {
        module.readings.push(Reading {
            quantity,
            lane: None,
            value: quantity.convert(word(lower, monitor), 1.0),
        });
        module
            .flags
            .extend(flags(lower[MODULE_FLAGS] >> first_bit, quantity, None));
    }
    if flat(lower) {
        return Ok(module);
    }
    let page01 = page(memory.upper.get(&1), "01h")?;
    let page02 = page(memory.upper.get(&2), "02h")?;
    let page11 = page(memory.upper.get(&0x11), "11h")?;
    let supported = page01[LANE_MONITORS - HALF_PAGE];
    let bias_scale = match (supported >> 3) & 0b11 {
        0b01 => 2.0,
        0b10 => 4.0,
        _ => 1.0,
    };
    for (quantity, limits) in THRESHOLDS {
        let scale = if quantity == TxBias { bias_scale } else { 1.0 };
        module
            .thresholds
            .extend(thresholds(page02, limits - HALF_PAGE, quantity, scale));
    }
    for (quantity, bit, monitor, flag_bytes) in LANE_LAYOUT {
        if supported & bit == 0 {
            continue;
        }
        let scale = if quantity == TxBias { bias_scale } else { 1.0 };
        for lane in 1..=LANES {
            let index = usize::from(lane - 1);
            module.readings.push(Reading {
                quantity,
                lane: Some(lane),
                value: quantity.convert(word(page11, monitor - HALF_PAGE + 2 * index), scale),
            });
            let bits = (0..4).fold(0, |bits, i| {
                bits | ((page11[flag_bytes - HALF_PAGE + i] >> index) & 1) << i
            });
            module.flags.extend(flags(bits, quantity, Some(lane)));
        }
    }
    Ok(module)
}
