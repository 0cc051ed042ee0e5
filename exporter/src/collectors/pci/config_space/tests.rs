use super::*;

#[test]
fn walks_both_lists() {
    let space = parse(&t4_like(true));
    assert_eq!(space.memory_decode, Some(true));
    assert_eq!(
        space.bars_in_header,
        [true, true, false, false, false, false]
    );
    assert_eq!(space.power_state, Some(3));
    assert_eq!(space.msi, Some(false));
    assert_eq!(
        space.msix,
        Some(MsiX {
            enabled: true,
            table_size: 6
        })
    );
    assert_eq!(space.link_maximum.unwrap().speed_gts, Some(8.0));
    assert_eq!(space.link_maximum.unwrap().width, 16);
    assert_eq!(space.link_current.unwrap().speed_gts, Some(2.5));
    assert_eq!(space.link_current.unwrap().width, 8);
    assert_eq!(
        space.sriov,
        Some(Sriov {
            total_vfs: 16,
            num_vfs: 4
        })
    );
    assert!(!space.capabilities_unreadable);
    assert!(!parse(&t4_like(false)).msix.unwrap().enabled);
}

/// The T4's changing registers: command, the BARs, PM's control/status with MSI's
/// message control (a register apart: one read), the PCIe link registers, and MSI-X's
/// message control: 5 reads of 44 bytes, 12 registers of the 64.
#[test]
fn a_t4_changes_in_a_few_registers() {
    let config = t4_like(true);
    assert_eq!(
        changing_registers(&config[..256]),
        [0x04..0x06, 0x10..0x28, 0x64..0x6c, 0x84..0x8c, 0xca..0xcc]
    );
    assert_eq!(changing_registers(&config[..64]), [0x04..0x06, 0x10..0x28]);
    assert!(changing_registers(&[]).is_empty());
}

#[test]
fn non_root_sees_the_header_only() {
    let space = parse(&t4_like(true)[..64]);
    assert_eq!(space.readable_bytes, 64);
    assert_eq!(space.memory_decode, Some(true));
    assert!(space.capabilities_unreadable);
    assert_eq!(space.msix, None);
    assert_eq!(space.sriov, None);
}

#[test]
fn loops_and_garbage_end_the_walk() {
    let mut looped = t4_like(true);
    looped[0xc9] = 0x60; // MSI-X points back to PM
    looped[0x102] = 0x00; // SR-IOV's next points at itself (0x100)
    looped[0x103] = 0x10;
    let space = parse(&looped);
    assert!(space.msix.is_some());
    assert!(space.sriov.is_some());
    assert_eq!(parse(&[]), ConfigSpace::default());
    let ones = vec![0xFFu8; 4096];
    let space = parse(&ones);
    assert_eq!(space.sriov, None);
    assert_eq!(space.memory_decode, Some(true));
}
