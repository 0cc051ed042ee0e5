//! SFF-8472 (SFP, SFP+, SFP28): identity in A0h's lower half, diagnostics in A2h's lower
//! half, one lane. Offsets: SFF-8472 rev 12.4 tables 4-1, 9-5 to 9-17; ethtool's
//! `sfpdiag.c` (`SFF_A0_*`, `SFF_A2_*`).

use super::{
    flags, module, page, word, DecodeError, Identity, Level, Memory, Module, Quantity, Reading,
    Threshold,
};
use Quantity::{RxPower, Temperature, TxBias, TxPower, Voltage};

/// A0h byte 92, diagnostic monitoring type: bit 6 implemented, bit 4 externally calibrated.
const DIAG_TYPE: usize = 92;
const DIAG_IMPLEMENTED: u8 = 1 << 6;
const EXTERNALLY_CALIBRATED: u8 = 1 << 4;
/// A0h byte 93, enhanced options: bit 7 alarm and warning flags implemented.
const ENHANCED_OPTIONS: usize = 93;
const ALARM_WARNING_FLAGS: u8 = 1 << 7;

const IDENTITY: Identity = Identity {
    vendor: 20,
    part_number: 40,
    serial: 68,
};

/// A2h: each quantity's four thresholds (bytes 0-39) and its monitor (bytes 96-105).
const LAYOUT: [(Quantity, usize, usize); 5] = [
    (Temperature, 0, 96),
    (Voltage, 8, 98),
    (TxBias, 16, 100),
    (TxPower, 24, 102),
    (RxPower, 32, 104),
];
/// A2h bytes 112-113 alarm flags, 116-117 warning flags: (quantity, byte, bit of the high
/// flag); the low flag is the next bit down.
const ALARM_FLAGS: usize = 112;
const WARNING_FLAGS: usize = 116;
const FLAG_BITS: [(Quantity, usize, u8); 5] = [
    (Temperature, 0, 7),
    (Voltage, 0, 5),
    (TxBias, 0, 3),
    (TxPower, 0, 1),
    (RxPower, 1, 7),
];
/// A2h external calibration (SFF-8472 9.3): RX power's polynomial, coefficients 4 down to 0
/// as big-endian IEEE-754 singles from byte 56; the other quantities' slope (unsigned 8.8)
/// and signed offset words.
const RX_POWER_COEFFICIENTS: usize = 56;
const LINEAR_CALIBRATION: [(Quantity, usize); 4] = [
    (TxBias, 76),
    (TxPower, 80),
    (Temperature, 84),
    (Voltage, 88),
];

/// Whether A0h says A2h holds diagnostics.
pub(super) fn monitored(lower: &[u8]) -> bool {
    lower
        .get(DIAG_TYPE)
        .is_some_and(|&diag| diag & DIAG_IMPLEMENTED != 0)
}

pub(super) fn decode(memory: &Memory) -> Result<Module, DecodeError> {
    let a0 = page(Some(&memory.lower), "A0h")?;
    let mut module = module(a0[0], a0, IDENTITY)?;
    if !monitored(a0) {
        return Ok(module);
    }
    let a2 = page(Some(&memory.a2), "A2h")?;
    let external = a0[DIAG_TYPE] & EXTERNALLY_CALIBRATED != 0;
    let value = |quantity: Quantity, offset: usize| {
        let raw = quantity.raw(word(a2, offset));
        let raw = if external {
            calibrated(a2, quantity, raw)
        } else {
            raw
        };
        quantity.base_units(raw, 1.0)
    };
    let lane = |quantity: Quantity| quantity.per_lane().then_some(1);
    for (quantity, limits, monitor) in LAYOUT {
        module.readings.push(Reading {
            quantity,
            lane: lane(quantity),
            value: value(quantity, monitor),
        });
        if a0[ENHANCED_OPTIONS] & ALARM_WARNING_FLAGS != 0 {
            module.thresholds.extend(Level::ALL.map(|level| Threshold {
                quantity,
                level,
                value: value(quantity, limits + 2 * level as usize),
            }));
        }
    }
    if a0[ENHANCED_OPTIONS] & ALARM_WARNING_FLAGS != 0 {
        for (quantity, byte, high) in FLAG_BITS {
            let pair = |base: usize| (a2[base + byte] >> (high - 1)) & 0b11;
            // High then low alarm, high then low warning, from bit 0 up.
            let bits = pair(ALARM_FLAGS).reverse_bits() >> 6
                | (pair(WARNING_FLAGS).reverse_bits() >> 6) << 2;
            module.flags.extend(flags(bits, quantity, lane(quantity)));
        }
    }
    Ok(module)
}

/// An externally calibrated raw value in the internal units (SFF-8472 9.3): RX power through
/// the polynomial, the rest `slope * raw + offset`.
fn calibrated(a2: &[u8], quantity: Quantity, raw: f64) -> f64 {
    if quantity == RxPower {
        return (0..5).fold(0.0, |sum, i| {
            let at = RX_POWER_COEFFICIENTS + 4 * i;
            let coefficient = f32::from_be_bytes([a2[at], a2[at + 1], a2[at + 2], a2[at + 3]]);
            sum * raw + f64::from(coefficient)
        });
    }
    let (_, at) = LINEAR_CALIBRATION
        .into_iter()
        .find(|&(q, _)| q == quantity)
        .expect("every quantity but RX power has a linear calibration");
    let slope = f64::from(a2[at]) + f64::from(a2[at + 1]) / 256.0;
    let offset = f64::from(word(a2, at + 2) as i16);
    slope * raw + offset
}
