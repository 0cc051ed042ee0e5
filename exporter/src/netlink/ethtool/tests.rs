//! Requests checked byte by byte against the layout `net/ethtool/eeprom.c` parses; replies
//! written as the kernel writes them; any datagram decoded without a panic.

use proptest::prelude::*;

use super::*;

/// A reply datagram as the kernel writes it: netlink header, genetlink header, attributes.
fn kernel_reply(kind: u16, command: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    message(kind, command, 7, |out| {
        for &(kind, value) in attrs {
            attribute(out, kind, value);
        }
    })
}

#[test]
fn eeprom_request_names_netdev_page_and_address() {
    let half = HalfPage {
        i2c_address: ADDRESS_A0,
        page: 0x11,
        offset: 128,
    };
    let request = eeprom_request(0x15, "eth0", half, 9);
    let mut expected = Vec::new();
    expected.extend(68u32.to_ne_bytes()); // length
    expected.extend(0x15u16.to_ne_bytes()); // the family's id
    expected.extend(1u16.to_ne_bytes()); // NLM_F_REQUEST
    expected.extend(9u32.to_ne_bytes());
    expected.extend(0u32.to_ne_bytes());
    expected.extend([31, 1, 0, 0]); // ETHTOOL_MSG_MODULE_EEPROM_GET, version 1
    expected.extend([16, 0, 1, 0x80]); // nested header, 12 bytes of it
    expected.extend([9, 0, 2, 0]); // ETHTOOL_A_HEADER_DEV_NAME
    expected.extend(b"eth0\0\0\0\0");
    expected.extend([8, 0, 2, 0]);
    expected.extend(128u32.to_ne_bytes()); // offset
    expected.extend([8, 0, 3, 0]);
    expected.extend(128u32.to_ne_bytes()); // length
    expected.extend([5, 0, 4, 0, 0x11, 0, 0, 0]); // page
    expected.extend([5, 0, 6, 0, 0x50, 0, 0, 0]); // I2C address
    assert_eq!(request, expected);
}

#[test]
fn family_request_asks_for_ethtool() {
    let request = family_request(1);
    assert_eq!(&request[4..6], &GENL_ID_CTRL.to_ne_bytes());
    assert_eq!(request[16], CTRL_CMD_GETFAMILY);
    assert_eq!(&request[20..24], &[12, 0, 2, 0]);
    assert_eq!(&request[24..32], b"ethtool\0");
}

#[test]
fn replies_decode() {
    let family = kernel_reply(
        GENL_ID_CTRL,
        CTRL_CMD_NEWFAMILY,
        &[
            (CTRL_ATTR_FAMILY_NAME, b"ethtool\0"),
            (CTRL_ATTR_FAMILY_ID, &0x15u16.to_ne_bytes()),
        ],
    );
    assert_eq!(family_reply(&family), Ok(0x15));
    let page: Vec<u8> = (0..128).collect();
    let eeprom = kernel_reply(0x15, MODULE_EEPROM_GET_REPLY, &[(EEPROM_DATA, &page)]);
    assert_eq!(eeprom_reply(&eeprom, 0x15), Ok(page));
}

#[test]
fn a_refusal_is_the_kernels_errno() {
    // A driver without get_module_eeprom_by_page (mlx5i, netdevsim) gets EOPNOTSUPP (95).
    let mut error = message(NLMSG_ERROR, 0, 7, |_| {});
    error.truncate(NLMSG_HEADER_LEN);
    error.extend((-95i32).to_ne_bytes());
    error.extend([0; NLMSG_HEADER_LEN]);
    let length = error.len() as u32;
    error[0..4].copy_from_slice(&length.to_ne_bytes());
    assert_eq!(eeprom_reply(&error, 0x15), Err(ReplyError::Kernel(95)));
    assert_eq!(eeprom_reply(&error[..10], 0x15), Err(ReplyError::Malformed));
    let other = kernel_reply(0x16, MODULE_EEPROM_GET_REPLY, &[(EEPROM_DATA, &[1])]);
    assert_eq!(eeprom_reply(&other, 0x15), Err(ReplyError::Malformed));
    let wrong_command = kernel_reply(0x15, MODULE_EEPROM_GET, &[(EEPROM_DATA, &[1])]);
    assert_eq!(
        eeprom_reply(&wrong_command, 0x15),
        Err(ReplyError::Malformed)
    );
    let bad = kernel_reply(0x15, MODULE_EEPROM_GET_REPLY, &[(EEPROM_DATA, &[1])]);
    let mut cut = bad.clone();
    cut[20] = 200; // an attribute longer than the message
    assert_eq!(eeprom_reply(&cut, 0x15), Err(ReplyError::Malformed));
}

proptest! {
    #[test]
    fn any_datagram_decodes_or_fails_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = family_reply(&bytes);
        if let Ok(data) = eeprom_reply(&bytes, 0x15) {
            prop_assert!(data.len() <= bytes.len());
        }
    }
}

/// The running kernel answers: the family resolves, and loopback, which has no module,
/// is refused with EOPNOTSUPP rather than left unanswered or misread.
#[test]
fn the_running_kernel_refuses_loopbacks_module() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut socket = socket::Socket::open(deadline).expect("ethtool generic netlink");
    let err = socket.read_module("lo", deadline).unwrap_err();
    assert!(
        matches!(
            err,
            socket::ReadError::Reply(ReplyError::Kernel(libc::EOPNOTSUPP))
        ),
        "{err}"
    );
}
