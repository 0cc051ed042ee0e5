use super::*;
use proptest::collection::vec;
use proptest::prelude::*;

/// What a generated configuration space holds.
#[derive(Debug, Clone)]
struct Device {
    memory_decode: bool,
    power_state: Option<u8>,
    msi: Option<bool>,
    msix: Option<MsiX>,
    /// Link Capabilities and Link Status registers (speed and width fields, noise above).
    link: Option<(u32, u16)>,
    sriov: Option<Sriov>,
    /// Capabilities slot order and one register bit pattern of noise.
    slots: Vec<usize>,
    noise: u16,
}

const SLOT_BYTES: usize = 0x20;

fn device() -> impl Strategy<Value = Device> {
    (
        any::<bool>(),
        prop::option::of(0u8..4),
        prop::option::of(any::<bool>()),
        prop::option::of((any::<bool>(), 1u16..=2048)),
        prop::option::of((any::<u32>(), any::<u16>())),
        prop::option::of((any::<u16>(), any::<u16>())),
        Just((0..(EXTENDED_START - HEADER_BYTES) / SLOT_BYTES).collect::<Vec<_>>()).prop_shuffle(),
        any::<u16>(),
    )
        .prop_map(
            |(memory_decode, power_state, msi, msix, link, sriov, slots, noise)| Device {
                memory_decode,
                power_state,
                msi,
                msix: msix.map(|(enabled, table_size)| MsiX {
                    enabled,
                    table_size,
                }),
                link,
                sriov: sriov.map(|(total_vfs, num_vfs)| Sriov { total_vfs, num_vfs }),
                slots,
                noise,
            },
        )
}

fn put16(config: &mut [u8], at: usize, value: u16) {
    config[at..at + 2].copy_from_slice(&value.to_le_bytes());
}

/// The device's configuration space, capabilities in its slot order, the bits a field
/// does not use set from `noise`.
fn encode(device: &Device) -> Vec<u8> {
    let mut config = vec![0u8; 4096];
    put16(
        &mut config,
        COMMAND_OFFSET,
        (device.noise & !COMMAND_MEMORY_SPACE)
            | if device.memory_decode {
                COMMAND_MEMORY_SPACE
            } else {
                0
            },
    );
    let mut capabilities: Vec<(u8, Vec<(usize, u16)>)> = Vec::new();
    if let Some(state) = device.power_state {
        capabilities.push((
            CAP_POWER_MANAGEMENT,
            vec![(4, (device.noise & !0x3) | u16::from(state))],
        ));
    }
    if let Some(enabled) = device.msi {
        capabilities.push((CAP_MSI, vec![(2, (device.noise & !1) | u16::from(enabled))]));
    }
    if let Some(msix) = device.msix {
        let control =
            (device.noise & 0x7800) | (msix.table_size - 1) | if msix.enabled { 0x8000 } else { 0 };
        capabilities.push((CAP_MSIX, vec![(2, control)]));
    }
    if let Some((link_cap, link_status)) = device.link {
        capabilities.push((
            CAP_PCI_EXPRESS,
            vec![
                (0x0C, link_cap as u16),
                (0x0E, (link_cap >> 16) as u16),
                (0x12, link_status),
            ],
        ));
    }
    let at = |index: usize| HEADER_BYTES + SLOT_BYTES * device.slots[index];
    let mut pointer = CAPABILITY_POINTER_OFFSET;
    for (index, (id, registers)) in capabilities.iter().enumerate() {
        config[pointer] = at(index) as u8;
        config[at(index)] = *id;
        for (offset, value) in registers {
            put16(&mut config, at(index) + offset, *value);
        }
        pointer = at(index) + 1;
    }
    if !capabilities.is_empty() {
        put16(&mut config, STATUS_OFFSET, STATUS_CAPABILITY_LIST);
    }
    if let Some(sriov) = device.sriov {
        // After an AER capability, as on real devices.
        config[EXTENDED_START..EXTENDED_START + 4]
            .copy_from_slice(&(0x0001u32 | 0x1 << 16 | 0x140 << 20).to_le_bytes());
        config[0x140..0x144].copy_from_slice(&(u32::from(EXT_CAP_SRIOV) | 0x1 << 16).to_le_bytes());
        put16(&mut config, 0x140 + 0x0E, sriov.total_vfs);
        put16(&mut config, 0x140 + 0x10, sriov.num_vfs);
    }
    config
}

proptest! {
    #[test]
    fn a_generated_device_parses_to_what_it_holds(device in device()) {
        let link = |register: u16| Link {
            speed_gts: speed_gts(register & 0xF),
            width: (register >> 4) & 0x3F,
        };
        let space = parse(&encode(&device));
        prop_assert_eq!(space.readable_bytes, 4096);
        prop_assert_eq!(space.memory_decode, Some(device.memory_decode));
        prop_assert_eq!(space.power_state, device.power_state);
        prop_assert_eq!(space.msi, device.msi);
        prop_assert_eq!(space.msix, device.msix);
        prop_assert_eq!(space.link_maximum, device.link.map(|(cap, _)| link(cap as u16)));
        prop_assert_eq!(space.link_current, device.link.map(|(_, status)| link(status)));
        prop_assert_eq!(space.sriov, device.sriov);
        prop_assert!(!space.capabilities_unreadable);
    }

    /// All that `parse` reads of the standard space is the capability list's structure,
    /// fixed with the device, and the ranges `changing_registers` names: any other byte
    /// may hold anything. So a copy kept from an earlier read, with those ranges read again,
    /// parses as the space read whole.
    #[test]
    fn only_the_list_and_the_changing_registers_matter(
        device in device(),
        flips in vec((0usize..EXTENDED_START, any::<u8>()), 1..64),
    ) {
        let config = encode(&device);
        let ranges = changing_registers(&config[..EXTENDED_START]);
        let bytes = Bytes(&config);
        let mut structure = vec![STATUS_OFFSET, STATUS_OFFSET + 1, CAPABILITY_POINTER_OFFSET];
        structure.extend(capabilities(&bytes).flat_map(|(_, at)| [at, at + 1]));
        let mut flipped = config.clone();
        for (at, value) in flips {
            if !structure.contains(&at) && !ranges.iter().any(|range| range.contains(&at)) {
                flipped[at] = value;
            }
        }
        prop_assert_eq!(parse(&flipped), parse(&config));
    }

    /// What a reader short of root gets (64 bytes), or a device cut anywhere.
    #[test]
    fn a_cut_configuration_space_parses_what_is_there(device in device(), cut in 0usize..4096) {
        let config = encode(&device);
        let space = parse(&config[..cut]);
        prop_assert_eq!(space.readable_bytes, cut);
        prop_assert_eq!(space.memory_decode.is_some(), cut > COMMAND_OFFSET + 1);
        prop_assert_eq!(
            space.capabilities_unreadable,
            cut > STATUS_OFFSET + 1 && cut <= HEADER_BYTES && config[STATUS_OFFSET] != 0
        );
        if cut <= EXTENDED_START {
            prop_assert_eq!(space.sriov, None);
        }
    }

    /// Loops, pointers past the end, garbage ids: the walks end.
    #[test]
    fn a_corrupted_configuration_space_never_panics(
        device in device(),
        flips in vec((0usize..4096, any::<u8>()), 1..16),
        cut in 0usize..=4096,
    ) {
        let mut config = encode(&device);
        for (at, value) in flips {
            config[at] = value;
        }
        prop_assert_eq!(parse(&config[..cut]).readable_bytes, cut);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn arbitrary_bytes_never_panic(config in vec(any::<u8>(), 0..4200)) {
        prop_assert_eq!(parse(&config).readable_bytes, config.len());
    }
}
