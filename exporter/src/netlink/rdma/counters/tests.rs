use super::*;
use crate::netlink::rdma::message::encode as messages;
use crate::netlink::rdma::message::{request, Command, Device, Dump};

fn rxe0() -> Device {
    Device {
        index: 3,
        name: "rxe0".into(),
    }
}

/// The request's attributes, after the 16-byte header, as (type, u32 value).
fn words(request: &[u8]) -> Vec<(u16, u32)> {
    request[16..]
        .chunks(8)
        .map(|word| {
            assert_eq!(u16::from_ne_bytes([word[0], word[1]]), 8);
            let kind = u16::from_ne_bytes([word[2], word[3]]);
            (kind, u32::from_ne_bytes(word[4..8].try_into().unwrap()))
        })
        .collect()
}

fn header(request: &[u8]) -> (u16, u16) {
    let kind = u16::from_ne_bytes([request[4], request[5]]);
    (kind, u16::from_ne_bytes([request[6], request[7]]))
}

/// As iproute2's rdma/stat.c encodes `rdma statistic qp mode`, `qp set ... auto type,pid
/// on` and `qp show`.
#[test]
fn counter_requests_are_encoded_as_rdma_statistic() {
    let mode = request(Command::QpCounterMode { port: 1 }, Some(3), 1);
    assert_eq!(header(&mode), ((5 << 10) + 17, 0x1));
    assert_eq!(
        words(&mode),
        [(1, 3), (3, 1), (attr::STAT_MODE, 2), (attr::STAT_RES, 19)]
    );
    let set = Command::SetQpCounterAuto {
        port: 2,
        mask: MASK_QP_TYPE | MASK_PID,
    };
    let set = request(set, Some(3), 1);
    assert_eq!(header(&set), ((5 << 10) + 16, 0x1));
    assert_eq!(
        words(&set),
        [
            (1, 3),
            (3, 2),
            (attr::STAT_RES, 19),
            (attr::STAT_MODE, 1),
            (attr::STAT_AUTO_MODE_MASK, 3)
        ]
    );
    let dump = request(Command::QpCounters, Some(3), 1);
    assert_eq!(header(&dump), ((5 << 10) + 17, 0x301));
    assert_eq!(words(&dump), [(1, 3), (attr::STAT_RES, 19)]);
}

fn read(command: Command, bytes: &[u8]) -> Result<Dump, ReplyError> {
    let mut dump = Dump::new(command, Some(3), 1);
    dump.feed(bytes).map(|()| dump)
}

#[test]
fn port_modes_read_back() {
    let command = Command::QpCounterMode { port: 1 };
    for mode in [
        QpCounterMode::None,
        QpCounterMode::Auto {
            mask: MASK_QP_TYPE | MASK_PID,
        },
        QpCounterMode::Manual,
        QpCounterMode::Other(7),
    ] {
        let dump = read(command, &encode::mode(&rxe0(), 1, 1, mode)).unwrap();
        assert!(dump.is_done());
        assert_eq!(dump.qp_counter_mode, Some(mode));
    }
    assert_eq!(
        read(command, &encode::mode(&rxe0(), 2, 1, QpCounterMode::Manual)).unwrap_err(),
        ReplyError::OtherPort { got: 2, asked: 1 }
    );
    // Auto mode without its mask is not a reply of stat_get_doit_qp.
    let maskless = messages::message(
        command.message_type(),
        0,
        1,
        &[
            messages::u32(attr::DEV_INDEX, 3),
            messages::u32(attr::PORT_INDEX, 1),
            messages::u32(attr::STAT_MODE, MODE_AUTO),
        ]
        .concat(),
    );
    assert_eq!(
        read(command, &maskless).unwrap_err(),
        ReplyError::Missing(attr::STAT_AUTO_MODE_MASK)
    );
}

/// `rdma_counter_set_auto_mode` refuses a port without counter support with EOPNOTSUPP;
/// `RDMA_NL_ADMIN_PERM` refuses a caller without CAP_NET_ADMIN with EPERM.
#[test]
fn a_mode_set_is_acknowledged_or_refused_with_its_errno() {
    let command = Command::SetQpCounterAuto { port: 1, mask: 3 };
    assert!(read(command, &encode::set(&rxe0(), 1, 1))
        .unwrap()
        .is_done());
    assert!(read(command, &encode::set_5_10(1, 1)).unwrap().is_done());
    for errno in [libc::EOPNOTSUPP, libc::EPERM, libc::EBUSY] {
        assert_eq!(
            read(command, &messages::error(1, errno)).unwrap_err(),
            ReplyError::Kernel(errno)
        );
    }
}

/// mlx5's Q counters (`mlx5_ib_q_cnts`), one counter per process in auto mode, over two
/// datagrams; then a device without counters: DONE alone.
#[test]
fn a_counter_dump_reads_back() {
    let written = [
        encode::counter(
            1,
            Some(Holder::Process(812)),
            &[17, 18],
            &[("rx_write_requests", 1 << 33), ("out_of_sequence", 2)],
        ),
        encode::counter(2, None, &[], &[]),
        encode::counter(
            3,
            Some(Holder::Process(9)),
            &[40],
            &[("rx_read_requests", 5)],
        ),
    ];
    let first = encode::dump(&rxe0(), 1, &written[..2]);
    let second = [
        encode::dump(&rxe0(), 1, &written[2..]),
        messages::done(1, 0),
    ]
    .concat();
    let mut dump = Dump::new(Command::QpCounters, Some(3), 1);
    dump.feed(&first).unwrap();
    assert!(!dump.is_done());
    dump.feed(&second).unwrap();
    assert!(dump.is_done());
    assert_eq!(dump.qp_counters, written);
    let empty = read(Command::QpCounters, &messages::done(1, 0)).unwrap();
    assert!(empty.is_done() && empty.qp_counters.is_empty());
}

#[test]
fn a_counter_without_its_values_or_qp_numbers_is_refused() {
    let entry = |fields: &[Vec<u8>]| {
        let entry = messages::attribute(attr::STAT_COUNTER_ENTRY, &fields.concat());
        let payload = [
            messages::u32(attr::DEV_INDEX, 3),
            messages::attribute(attr::STAT_COUNTER, &entry),
        ]
        .concat();
        messages::message(Command::QpCounters.message_type(), 0x2, 1, &payload)
    };
    let handle = [
        messages::u32(attr::PORT_INDEX, 1),
        messages::u32(attr::STAT_COUNTER_ID, 1),
    ];
    assert_eq!(
        read(Command::QpCounters, &entry(&handle)).unwrap_err(),
        ReplyError::Missing(attr::STAT_HWCOUNTERS)
    );
    let numberless = messages::nested(attr::RES_QP, &[messages::nested(attr::RES_QP_ENTRY, &[])]);
    assert_eq!(
        read(
            Command::QpCounters,
            &entry(&[&handle[..], &[numberless]].concat())
        )
        .unwrap_err(),
        ReplyError::Missing(attr::RES_LQPN)
    );
}
