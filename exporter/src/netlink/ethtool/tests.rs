//! Requests checked byte by byte against the layout `net/ethtool/eeprom.c` and `fec.c` parse;
//! replies written as the kernel writes them; any datagram decoded without a panic.

use proptest::prelude::*;

use super::*;
use crate::netlink::generic::socket::ExchangeError;
use crate::netlink::generic::tests::kernel_error;

/// The ethtool family as the tests' kernel numbers it.
const ETHTOOL: Family = Family {
    id: 0x15,
    version: VERSION,
};

/// A reply datagram as the kernel writes it: netlink header, genetlink header, attributes.
fn kernel_reply(kind: u16, command: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let family = Family {
        id: kind,
        version: VERSION,
    };
    message(family, command, 0, 7, |out| {
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
    let request = eeprom_request(ETHTOOL, "eth0", half, 9);
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
fn eeprom_reply_is_the_data() {
    let page: Vec<u8> = (0..128).collect();
    let eeprom = kernel_reply(0x15, MODULE_EEPROM_GET_REPLY, &[(EEPROM_DATA, &page)]);
    assert_eq!(eeprom_reply(&eeprom, 0x15), Ok(page));
}

#[test]
fn a_refusal_is_the_kernels_errno() {
    // A driver without get_module_eeprom_by_page (mlx5i, netdevsim) gets EOPNOTSUPP (95).
    let error = kernel_error(95);
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

#[test]
fn fec_request_names_netdev_and_asks_for_stats() {
    let request = fec_request(ETHTOOL, "ens1f0", 4);
    let mut expected = Vec::new();
    expected.extend(44u32.to_ne_bytes()); // length
    expected.extend(0x15u16.to_ne_bytes()); // the family's id
    expected.extend(1u16.to_ne_bytes()); // NLM_F_REQUEST
    expected.extend(4u32.to_ne_bytes());
    expected.extend(0u32.to_ne_bytes());
    expected.extend([29, 1, 0, 0]); // ETHTOOL_MSG_FEC_GET, version 1
    expected.extend([24, 0, 1, 0x80]); // nested ETHTOOL_A_FEC_HEADER, 20 bytes of it
    expected.extend([11, 0, 2, 0]); // ETHTOOL_A_HEADER_DEV_NAME
    expected.extend(b"ens1f0\0\0");
    expected.extend([8, 0, 3, 0]); // ETHTOOL_A_HEADER_FLAGS
    expected.extend(5u32.to_ne_bytes()); // COMPACT_BITSETS | STATS
    assert_eq!(request, expected);
}

/// `ETHTOOL_A_FEC_STATS` as `fec_put_stats()` nests it: each counter a `u64` array.
fn fec_stats_nest(corrected: &[u64], uncorrectable: &[u64], bits: &[u64]) -> Vec<u8> {
    let array = |values: &[u64]| {
        values
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect::<Vec<_>>()
    };
    let mut nest = Vec::new();
    attribute(&mut nest, FEC_STAT_CORRECTED, &array(corrected));
    attribute(&mut nest, FEC_STAT_UNCORR, &array(uncorrectable));
    attribute(&mut nest, FEC_STAT_CORR_BITS, &array(bits));
    nest
}

/// A FEC reply as `fec_fill_reply()` writes it: the modes (a compact bitset, here empty), AUTO,
/// ACTIVE, then the stats nest.
fn fec_reply_datagram(stats: Option<&[u8]>) -> Vec<u8> {
    let mut attrs: Vec<(u16, &[u8])> =
        vec![(2 | NLA_F_NESTED, &[]), (3, &[0]), (4, &[52, 0, 0, 0])];
    if let Some(stats) = stats {
        attrs.push((FEC_STATS | NLA_F_NESTED, stats));
    }
    kernel_reply(0x15, FEC_GET_REPLY, &attrs)
}

#[test]
fn fec_totals_come_first_in_each_array() {
    // mlx5e with RS-FEC: totals only (`fec_set_rs_stats()`, en_stats.c).
    let rs = fec_stats_nest(&[1200], &[3], &[4800]);
    assert_eq!(
        fec_reply(&fec_reply_datagram(Some(&rs)), 0x15),
        Ok(FecStats {
            corrected_blocks: Some(1200),
            uncorrectable_blocks: Some(3),
            corrected_bits: Some(4800),
        })
    );
    // BASE-R FEC per lane: `fec_stats_recalc()` puts the lanes' sum first; no bit count.
    let lanes = fec_stats_nest(&[10, 1, 2, 3, 4], &[6, 0, 6, 0, 0], &[]);
    assert_eq!(
        fec_reply(&fec_reply_datagram(Some(&lanes)), 0x15),
        Ok(FecStats {
            corrected_blocks: Some(10),
            uncorrectable_blocks: Some(6),
            corrected_bits: None,
        })
    );
}

#[test]
fn a_driver_without_fec_stats_gives_empty_arrays() {
    let empty = fec_stats_nest(&[], &[], &[]);
    let none = Ok(FecStats::default());
    assert_eq!(fec_reply(&fec_reply_datagram(Some(&empty)), 0x15), none);
    assert_eq!(fec_reply(&fec_reply_datagram(None), 0x15), none);
    let mut odd = Vec::new();
    attribute(&mut odd, FEC_STAT_UNCORR, &[1, 2, 3]);
    assert_eq!(
        fec_reply(&fec_reply_datagram(Some(&odd)), 0x15),
        Err(ReplyError::Malformed)
    );
}

proptest! {
    #[test]
    fn any_datagram_decodes_or_fails_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = fec_reply(&bytes, 0x15);
        if let Ok(data) = eeprom_reply(&bytes, 0x15) {
            prop_assert!(data.len() <= bytes.len());
        }
    }
}

/// The running kernel answers: the family resolves, and loopback, which has no module and no
/// FEC operation, is refused with EOPNOTSUPP rather than left unanswered or misread.
#[test]
fn the_running_kernel_refuses_loopbacks_module_and_fec() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut socket = socket::Socket::open(deadline).expect("ethtool generic netlink");
    let refused = |err: socket::ReadError| {
        assert!(
            matches!(
                err,
                socket::ReadError::Exchange(ExchangeError::Reply(ReplyError::Kernel(
                    libc::EOPNOTSUPP
                )))
            ),
            "{err}"
        );
    };
    refused(socket.read_module("lo", deadline).unwrap_err());
    refused(socket.read_fec("lo", deadline).unwrap_err());
}
