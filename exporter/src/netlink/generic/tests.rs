//! The family look-up and a dump's framing checked byte by byte against `linux/genetlink.h`
//! and `linux/netlink.h`; any datagram decoded without a panic.

use proptest::prelude::*;

use super::*;

/// An `NLMSG_ERROR` datagram as `netlink_ack()` writes it: the negative errno, then the
/// request's header echoed.
pub(crate) fn kernel_error(errno: i32) -> Vec<u8> {
    let mut error = Vec::new();
    error.extend(36u32.to_ne_bytes());
    error.extend(NLMSG_ERROR.to_ne_bytes());
    error.extend([0; 2]);
    error.extend(7u32.to_ne_bytes());
    error.extend([0; 4]);
    error.extend((-errno).to_ne_bytes());
    error.extend([0; NLMSG_HEADER_LEN]);
    error
}

/// A message of a kernel reply: netlink header with `flags`, command header, attributes.
fn kernel_message(kind: u16, command: u8, flags: u16, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let family = Family {
        id: kind,
        version: 1,
    };
    message(family, command, flags, 7, |out| {
        for &(kind, value) in attrs {
            attribute(out, kind, value);
        }
    })
}

#[test]
fn family_request_asks_by_name() {
    let request = family_request("devlink", 1);
    let mut expected = Vec::new();
    expected.extend(32u32.to_ne_bytes()); // length
    expected.extend(0x10u16.to_ne_bytes()); // GENL_ID_CTRL
    expected.extend(1u16.to_ne_bytes()); // NLM_F_REQUEST
    expected.extend(1u32.to_ne_bytes());
    expected.extend(0u32.to_ne_bytes());
    expected.extend([3, 1, 0, 0]); // CTRL_CMD_GETFAMILY
    expected.extend([12, 0, 2, 0]); // CTRL_ATTR_FAMILY_NAME
    expected.extend(b"devlink\0");
    assert_eq!(request, expected);
}

#[test]
fn family_reply_is_the_id() {
    let reply = kernel_message(
        GENL_ID_CTRL,
        CTRL_CMD_NEWFAMILY,
        0,
        &[
            (CTRL_ATTR_FAMILY_NAME, b"ethtool\0"),
            (CTRL_ATTR_FAMILY_ID, &0x15u16.to_ne_bytes()),
        ],
    );
    assert_eq!(family_reply(&reply), Ok(0x15));
    // A kernel without the family (CONFIG_NET_DEVLINK off) answers ENOENT.
    assert_eq!(family_reply(&kernel_error(2)), Err(ReplyError::Kernel(2)));
    let nameless = kernel_message(GENL_ID_CTRL, CTRL_CMD_NEWFAMILY, 0, &[]);
    assert_eq!(family_reply(&nameless), Err(ReplyError::NoFamily));
}

#[test]
fn a_dump_ends_at_done() {
    let multi = 0x2; // NLM_F_MULTI
    let mut datagram = kernel_message(0x14, 52, multi, &[(1, b"pci\0")]);
    datagram.extend(kernel_message(
        0x14,
        52,
        multi,
        &[(1, b"pci\0"), (2, b"x\0")],
    ));
    let (payloads, done) = dump_part(&datagram, 0x14, 52).unwrap();
    assert_eq!(payloads.len(), 2);
    assert!(!done);
    assert_eq!(payloads[1].len(), 16);
    // NLMSG_DONE carries the dump's result, 0.
    let mut end = kernel_message(NLMSG_DONE, 0, multi, &[]);
    end.truncate(NLMSG_HEADER_LEN);
    end.extend(0i32.to_ne_bytes());
    end[0..4].copy_from_slice(&20u32.to_ne_bytes());
    datagram.extend(&end);
    let (payloads, done) = dump_part(&datagram, 0x14, 52).unwrap();
    assert_eq!((payloads.len(), done), (2, true));
    let (payloads, done) = dump_part(&end, 0x14, 52).unwrap();
    assert_eq!((payloads.len(), done), (0, true));
    // A dump that failed in its course ends with the errno in NLMSG_DONE.
    end[16..20].copy_from_slice(&(-90i32).to_ne_bytes());
    assert_eq!(dump_part(&end, 0x14, 52), Err(ReplyError::Kernel(90)));
    // One that failed at its start is NLMSG_ERROR.
    assert_eq!(
        dump_part(&kernel_error(95), 0x14, 52),
        Err(ReplyError::Kernel(95))
    );
    let other = kernel_message(0x15, 52, multi, &[]);
    assert_eq!(dump_part(&other, 0x14, 52), Err(ReplyError::Malformed));
    let mut cut = datagram.clone();
    cut[0] = 200; // a message longer than the datagram
    assert_eq!(dump_part(&cut, 0x14, 52), Err(ReplyError::Malformed));
}

#[test]
fn values_decode() {
    assert_eq!(u64_value(&7u64.to_ne_bytes()), Ok(7));
    assert_eq!(u64_value(&[1, 2, 3]), Err(ReplyError::Malformed));
    assert_eq!(string_value(b"tx\0"), Ok("tx".to_string()));
    assert_eq!(string_value(b"rx"), Ok("rx".to_string()));
    assert_eq!(string_value(b"\xff\0"), Err(ReplyError::Malformed));
}

proptest! {
    #[test]
    fn any_datagram_decodes_or_fails_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = family_reply(&bytes);
        if let Ok((payloads, _)) = dump_part(&bytes, 0x14, 52) {
            prop_assert!(payloads.iter().all(|payload| payload.len() <= bytes.len()));
        }
    }
}
