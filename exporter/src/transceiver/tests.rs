//! Module images written field by field at the specifications' offsets (the offsets below are
//! the specifications' byte numbers, not the decoders' constants), decoded and checked in base
//! units.

use super::*;

/// A module's memory, written as the specifications number its bytes: 0-127 the lower page,
/// 128-255 the upper page named. The rdma collector's module tests read these images too.
pub(crate) struct Image(pub(crate) Memory);

impl Image {
    fn new(identifier: u8, upper: &[u8]) -> Self {
        let mut memory = Memory {
            lower: vec![0; HALF_PAGE],
            ..Memory::default()
        };
        memory.lower[0] = identifier;
        for &page in upper {
            memory.upper.insert(page, vec![0; HALF_PAGE]);
        }
        Self(memory)
    }

    fn put(&mut self, page: u8, byte: usize, bytes: &[u8]) -> &mut Self {
        let target = if byte < HALF_PAGE {
            &mut self.0.lower[byte..]
        } else {
            &mut self.0.upper.get_mut(&page).unwrap()[byte - HALF_PAGE..]
        };
        target[..bytes.len()].copy_from_slice(bytes);
        self
    }

    /// SFF-8472's A2h, bytes 0-127.
    fn put_a2(&mut self, byte: usize, bytes: &[u8]) -> &mut Self {
        self.0.a2.resize(HALF_PAGE, 0);
        self.0.a2[byte..byte + bytes.len()].copy_from_slice(bytes);
        self
    }

    fn decode(&self) -> Result<Module, DecodeError> {
        decode(&self.0)
    }
}

/// A 16-byte ASCII field padded with spaces.
fn field(text: &str) -> [u8; 16] {
    let mut bytes = [b' '; 16];
    bytes[..text.len()].copy_from_slice(text.as_bytes());
    bytes
}

fn reading(module: &Module, quantity: Quantity, lane: Option<u8>) -> f64 {
    let found: Vec<_> = module
        .readings
        .iter()
        .filter(|r| r.quantity == quantity && r.lane == lane)
        .collect();
    assert_eq!(found.len(), 1, "{quantity:?} lane {lane:?} in {module:?}");
    found[0].value
}

fn threshold(module: &Module, quantity: Quantity, level: Level) -> f64 {
    module
        .thresholds
        .iter()
        .find(|t| t.quantity == quantity && t.level == level)
        .unwrap_or_else(|| panic!("{quantity:?} {level:?}"))
        .value
}

fn raised(module: &Module) -> Vec<(Quantity, Option<u8>, Level)> {
    let mut raised: Vec<_> = module
        .flags
        .iter()
        .filter(|f| f.raised)
        .map(|f| (f.quantity, f.lane, f.level))
        .collect();
    raised.sort();
    raised
}

fn close(actual: f64, expected: f64) {
    assert!(
        (actual - expected).abs() <= expected.abs() * 1e-9,
        "{actual} != {expected}"
    );
}

/// An SFP with internally calibrated diagnostics and alarm flags.
pub(crate) fn sfp() -> Image {
    let mut image = Image::new(0x03, &[]);
    image
        .put(0, 20, &field("FINISAR CORP."))
        .put(0, 40, &field("FTLX8574D3BCL"))
        .put(0, 68, &field("ALB1234"))
        .put(0, 92, &[0x68]) // implemented, internally calibrated, average power
        .put(0, 93, &[0x80]) // alarm and warning flags implemented
        .put_a2(0, &[0x50, 0x00, 0xF6, 0x00]) // temperature high alarm 80 C, low alarm -10 C
        .put_a2(8, &[0x8C, 0xA0]) // VCC high alarm 36000 x 100 uV
        .put_a2(96, &[0x19, 0x80]) // temperature 25.5 C
        .put_a2(98, &[0x81, 0x00]) // VCC 33024 x 100 uV
        .put_a2(100, &[0x17, 0x70]) // bias 6000 x 2 uA
        .put_a2(102, &[0x1F, 0x40]) // TX power 8000 x 0.1 uW
        .put_a2(104, &[0x0F, 0xA0]) // RX power 4000 x 0.1 uW
        .put_a2(112, &[0x80, 0x40]) // temperature high alarm, RX power low alarm
        .put_a2(116, &[0x04, 0x00]); // bias low warning
    image
}

#[test]
fn sff8472_identity_monitors_thresholds_and_flags() {
    let module = sfp().decode().unwrap();
    assert_eq!(module.type_name, "sfp");
    assert_eq!(module.vendor, "FINISAR CORP.");
    assert_eq!(module.part_number, "FTLX8574D3BCL");
    assert_eq!(module.serial, "ALB1234");
    close(reading(&module, Quantity::Temperature, None), 25.5);
    close(reading(&module, Quantity::Voltage, None), 3.3024);
    close(reading(&module, Quantity::TxBias, Some(1)), 0.012);
    close(reading(&module, Quantity::TxPower, Some(1)), 0.0008);
    close(reading(&module, Quantity::RxPower, Some(1)), 0.0004);
    close(
        threshold(&module, Quantity::Temperature, Level::HighAlarm),
        80.0,
    );
    close(
        threshold(&module, Quantity::Temperature, Level::LowAlarm),
        -10.0,
    );
    close(threshold(&module, Quantity::Voltage, Level::HighAlarm), 3.6);
    assert_eq!(module.thresholds.len(), 20);
    assert_eq!(module.flags.len(), 20);
    assert_eq!(
        raised(&module),
        [
            (Quantity::Temperature, None, Level::HighAlarm),
            (Quantity::TxBias, Some(1), Level::LowWarning),
            (Quantity::RxPower, Some(1), Level::LowAlarm),
        ]
    );
}

#[test]
fn sff8472_external_calibration() {
    let mut image = sfp();
    image
        .put(0, 92, &[0x58]) // implemented, externally calibrated
        .put_a2(56, &[0; 12]) // RX power coefficients 4, 3, 2: 0
        .put_a2(68, &2.0f32.to_be_bytes()) // coefficient 1
        .put_a2(72, &100.0f32.to_be_bytes()) // coefficient 0
        .put_a2(84, &[0x02, 0x00, 0xFF, 0x00]) // temperature slope 2, offset -256
        .put_a2(96, &[0x0A, 0x00]) // temperature 2560
        .put_a2(104, &[0x03, 0xE8]); // RX power 1000
    let module = image.decode().unwrap();
    close(reading(&module, Quantity::Temperature, None), 19.0);
    close(reading(&module, Quantity::RxPower, Some(1)), 210e-6);
    // Slope 0, offset 0: the other quantities read 0.
    close(reading(&module, Quantity::Voltage, None), 0.0);
}

#[test]
fn sff8472_without_diagnostics_is_identity_only() {
    let mut image = sfp();
    image.put(0, 92, &[0x00]);
    image.0.a2.clear();
    assert!(!wanted(&image.0.lower).unwrap().a2);
    let module = image.decode().unwrap();
    assert!(module.readings.is_empty() && module.thresholds.is_empty());
    assert_eq!(module.vendor, "FINISAR CORP.");
}

/// A paged QSFP28 whose lanes read 1000, 2000, 3000 and 4000 units on each lane monitor.
pub(crate) fn qsfp28() -> Image {
    let mut image = Image::new(0x11, &[0, 3]);
    image
        .put(0, 22, &[0x23, 0x40]) // 35.25 C
        .put(0, 26, &[0x80, 0xE8]) // 33000 x 100 uV
        .put(0, 9, &[0x81]) // lane 1 RX power high alarm, lane 2 RX power low warning
        .put(0, 14, &[0x02]) // lane 4 TX power high warning (lane 3 in the high nibble)
        .put(0, 148, &field("Mellanox"))
        .put(0, 168, &field("MCP1600-C001"))
        .put(0, 196, &field("MT2012VS01234"))
        .put(0, 220, &[0x0C]) // average RX power, TX power measured
        .put(3, 128, &[0x4B, 0x00, 0xFB, 0x00, 0x46, 0x00, 0x00, 0x00])
        .put(3, 184, &[0x27, 0x10]); // bias high alarm 10000 x 2 uA
    for (lane, units) in [1000u16, 2000, 3000, 4000].iter().enumerate() {
        for first in [34, 42, 50] {
            image.put(0, first + 2 * lane, &units.to_be_bytes());
        }
    }
    image
}

#[test]
fn sff8636_lanes_thresholds_and_flags() {
    let module = qsfp28().decode().unwrap();
    assert_eq!(
        (
            module.type_name,
            module.vendor.as_str(),
            module.serial.as_str()
        ),
        ("qsfp28", "Mellanox", "MT2012VS01234")
    );
    assert_eq!(module.part_number, "MCP1600-C001");
    close(reading(&module, Quantity::Temperature, None), 35.25);
    close(reading(&module, Quantity::Voltage, None), 3.3);
    for lane in 1..=4u8 {
        let units = 1000.0 * f64::from(lane);
        close(
            reading(&module, Quantity::RxPower, Some(lane)),
            units * 0.1e-6,
        );
        close(reading(&module, Quantity::TxBias, Some(lane)), units * 2e-6);
        close(
            reading(&module, Quantity::TxPower, Some(lane)),
            units * 0.1e-6,
        );
    }
    close(
        threshold(&module, Quantity::Temperature, Level::HighAlarm),
        75.0,
    );
    close(
        threshold(&module, Quantity::Temperature, Level::LowAlarm),
        -5.0,
    );
    close(
        threshold(&module, Quantity::Temperature, Level::HighWarning),
        70.0,
    );
    close(threshold(&module, Quantity::TxBias, Level::HighAlarm), 0.02);
    assert_eq!(
        raised(&module),
        [
            (Quantity::TxPower, Some(4), Level::HighWarning),
            (Quantity::RxPower, Some(1), Level::HighAlarm),
            (Quantity::RxPower, Some(2), Level::LowWarning),
        ]
    );
}

#[test]
fn sff8636_flat_memory_has_no_thresholds_and_needs_no_page_3() {
    let mut image = qsfp28();
    image.put(0, 2, &[0x04]).put(0, 220, &[0x08]);
    image.0.upper.remove(&3);
    assert_eq!(wanted(&image.0.lower).unwrap().upper, [0]);
    let module = image.decode().unwrap();
    assert!(module.thresholds.is_empty());
    // TX power not measured: no TX power readings.
    assert!(module
        .readings
        .iter()
        .all(|r| r.quantity != Quantity::TxPower));
    assert_eq!(module.readings.len(), 2 + 4 + 4);
}

/// A paged QSFP-DD with every lane monitor and a TX bias multiplier of 2.
pub(crate) fn qsfp_dd() -> Image {
    let mut image = Image::new(0x18, &[0, 1, 2, 0x11]);
    image
        .put(0, 14, &[0x2A, 0x00]) // 42 C
        .put(0, 16, &[0x80, 0xE8]) // 3.3 V
        .put(0, 9, &[0x12]) // temperature low alarm, VCC high alarm
        .put(0, 129, &field("INNOLIGHT"))
        .put(0, 148, &field("T-DP4CNT-NOM"))
        .put(0, 166, &field("INKAO1234567"))
        .put(1, 160, &[0x0F]) // TX bias, TX power, RX power monitored; bias x2
        .put(2, 184, &[0x13, 0x88]) // bias high alarm 5000 units
        .put(2, 192, &[0x62, 0x1F]) // RX power high alarm 25119 units
        .put(0x11, 149, &[0x04]) // lane 3 RX power high alarm
        .put(0x11, 142, &[0x80]) // lane 8 TX power low warning
        .put(0x11, 170, &[0x03, 0xE8]) // lane 1 bias 1000 units
        .put(0x11, 186 + 14, &[0x07, 0xD0]); // lane 8 RX power 2000 units
    image
}

#[test]
fn cmis_lanes_bias_multiplier_thresholds_and_flags() {
    let module = qsfp_dd().decode().unwrap();
    assert_eq!(module.type_name, "qsfp-dd");
    assert_eq!(
        (module.vendor.as_str(), module.part_number.as_str()),
        ("INNOLIGHT", "T-DP4CNT-NOM")
    );
    assert_eq!(module.serial, "INKAO1234567");
    close(reading(&module, Quantity::Temperature, None), 42.0);
    close(reading(&module, Quantity::Voltage, None), 3.3);
    close(
        reading(&module, Quantity::TxBias, Some(1)),
        1000.0 * 2e-6 * 2.0,
    );
    close(
        reading(&module, Quantity::RxPower, Some(8)),
        2000.0 * 0.1e-6,
    );
    close(reading(&module, Quantity::TxPower, Some(5)), 0.0);
    assert_eq!(module.readings.len(), 2 + 3 * 8);
    close(threshold(&module, Quantity::TxBias, Level::HighAlarm), 0.02);
    close(
        threshold(&module, Quantity::RxPower, Level::HighAlarm),
        25119.0 * 0.1e-6,
    );
    assert_eq!(
        raised(&module),
        [
            (Quantity::Temperature, None, Level::LowAlarm),
            (Quantity::Voltage, None, Level::HighAlarm),
            (Quantity::TxPower, Some(8), Level::LowWarning),
            (Quantity::RxPower, Some(3), Level::HighAlarm),
        ]
    );
}

#[test]
fn cmis_only_advertised_lane_monitors() {
    let mut image = qsfp_dd();
    image.put(1, 160, &[0x04]); // RX power only
    let module = image.decode().unwrap();
    assert!(module.readings.iter().all(|r| matches!(
        r.quantity,
        Quantity::RxPower | Quantity::Temperature | Quantity::Voltage
    )));
    // The bias multiplier is 1 now.
    close(threshold(&module, Quantity::TxBias, Level::HighAlarm), 0.01);
}

#[test]
fn cmis_flat_memory_is_module_monitors_only() {
    let mut image = Image::new(0x19, &[0]);
    image.put(0, 2, &[0x80]).put(0, 14, &[0xFF, 0x00]); // -1 C
    assert_eq!(wanted(&image.0.lower).unwrap().upper, [0]);
    let module = image.decode().unwrap();
    assert_eq!(module.type_name, "osfp");
    close(reading(&module, Quantity::Temperature, None), -1.0);
    assert_eq!(module.readings.len(), 2);
    assert!(module.thresholds.is_empty());
}

#[test]
fn pages_wanted_follow_the_identifier() {
    assert_eq!(
        wanted(&qsfp_dd().0.lower),
        Ok(Wanted {
            upper: vec![0, 1, 2, 0x11],
            a2: false
        })
    );
    assert_eq!(wanted(&qsfp28().0.lower).unwrap().upper, [0, 3]);
    assert_eq!(
        wanted(&sfp().0.lower),
        Ok(Wanted {
            upper: vec![],
            a2: true
        })
    );
    assert_eq!(wanted(&[0x06]), Err(DecodeError::UnknownIdentifier(0x06)));
    assert_eq!(wanted(&[]), Err(DecodeError::Short { page: "lower" }));
}

#[test]
fn bad_memory_is_an_error() {
    let mut short = qsfp_dd();
    short.0.upper.get_mut(&0x11).unwrap().truncate(100);
    assert_eq!(short.decode(), Err(DecodeError::Short { page: "11h" }));
    let mut missing = sfp();
    missing.0.a2.clear();
    assert_eq!(missing.decode(), Err(DecodeError::Short { page: "A2h" }));
    let mut garbage = qsfp28();
    garbage.put(0, 150, &[0xFF]);
    assert_eq!(
        garbage.decode(),
        Err(DecodeError::NotAscii {
            field: "vendor name"
        })
    );
    let mut truncated = sfp();
    truncated.0.lower.truncate(64);
    assert_eq!(truncated.decode(), Err(DecodeError::Short { page: "A0h" }));
    assert_eq!(
        Image::new(0x0E, &[]).decode(),
        Err(DecodeError::UnknownIdentifier(0x0E))
    );
}
