use super::encode;
use super::*;

fn rxe0() -> Device {
    Device {
        index: 3,
        name: "rxe0".to_string(),
    }
}

fn qp(holder: Holder, port: Option<u32>, qp_type: u8, state: u8) -> Entry {
    Entry {
        holder,
        port,
        qp_number: Some(port.unwrap_or(0) * 1000 + u32::from(state)),
        qp_type: Some(qp_type),
        qp_state: Some(state),
        mr_length: None,
    }
}

#[test]
fn a_resource_dump_request_names_command_and_device() {
    let bytes = request(Command::Resources(Resource::MemoryRegion), Some(3), 7);
    assert_eq!(bytes.len(), 24);
    assert_eq!(u32_at(&bytes, 0), 24);
    assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), (5 << 10) + 13);
    assert_eq!(u16::from_ne_bytes([bytes[6], bytes[7]]), 0x301);
    assert_eq!(u32_at(&bytes, 8), 7);
    assert_eq!(&bytes[16..], &encode::u32(attr::DEV_INDEX, 3)[..]);
    assert_eq!(request(Command::Devices, None, 1).len(), 16);
}

fn counters(pairs: &[(&str, u64)]) -> Vec<Counter> {
    pairs
        .iter()
        .map(|(name, value)| Counter {
            name: name.to_string(),
            value: *value,
        })
        .collect()
}

#[test]
fn a_port_counters_request_names_device_and_port() {
    let bytes = request(Command::PortCounters { port: 2 }, Some(3), 7);
    assert_eq!(bytes.len(), 32);
    assert_eq!(u32_at(&bytes, 0), 32);
    assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), (5 << 10) + 17);
    // NLM_F_REQUEST alone: a dump flag would ask the kernel for its counter dump.
    assert_eq!(u16::from_ne_bytes([bytes[6], bytes[7]]), 0x1);
    assert_eq!(&bytes[16..24], &encode::u32(attr::DEV_INDEX, 3)[..]);
    assert_eq!(&bytes[24..], &encode::u32(attr::PORT_INDEX, 2)[..]);
}

#[test]
fn port_counters_read_back_from_one_message() {
    let written = counters(&[("sent_pkts", 1 << 40), ("rcvd_pkts", 7), ("link_downed", 0)]);
    let command = Command::PortCounters { port: 1 };
    let reply = encode::port_counters(&rxe0(), 1, 4, &written);
    let mut read = Dump::new(command, Some(3), 4);
    read.feed(&reply).unwrap();
    assert!(read.is_done());
    assert_eq!(read.counters, written);
    // Anything after the one reply is not of this request.
    let mut twice = Dump::new(command, Some(3), 4);
    assert_eq!(
        twice.feed(&[reply.clone(), reply].concat()).unwrap_err(),
        ReplyError::AfterDone
    );
    // A driver without counters sends an empty table.
    let mut empty = Dump::new(command, Some(3), 4);
    empty
        .feed(&encode::port_counters(&rxe0(), 1, 4, &[]))
        .unwrap();
    assert!(empty.is_done() && empty.counters.is_empty());
}

#[test]
fn port_counters_of_another_port_or_without_table_or_value_are_refused() {
    let command = Command::PortCounters { port: 1 };
    let written = counters(&[("sent_pkts", 1)]);
    assert_eq!(
        refused(command, &encode::port_counters(&rxe0(), 2, 1, &written)),
        ReplyError::OtherPort { got: 2, asked: 1 }
    );
    let handle = [
        encode::u32(attr::DEV_INDEX, 3),
        encode::string(attr::DEV_NAME, "rxe0"),
        encode::u32(attr::PORT_INDEX, 1),
    ];
    let no_table = encode::message(command.message_type(), 0, 1, &handle.concat());
    assert_eq!(
        refused(command, &no_table),
        ReplyError::Missing(attr::STAT_HWCOUNTERS)
    );
    let nameless_value = encode::nested(
        attr::STAT_HWCOUNTERS,
        &[encode::nested(
            attr::STAT_HWCOUNTER_ENTRY,
            &[encode::string(attr::STAT_HWCOUNTER_ENTRY_NAME, "sent_pkts")],
        )],
    );
    let payload = [&handle[..], &[nameless_value]].concat().concat();
    assert_eq!(
        refused(
            command,
            &encode::message(command.message_type(), 0, 1, &payload)
        ),
        ReplyError::Missing(attr::STAT_HWCOUNTER_ENTRY_VALUE)
    );
    let short_value = encode::nested(
        attr::STAT_HWCOUNTERS,
        &[encode::nested(
            attr::STAT_HWCOUNTER_ENTRY,
            &[
                encode::string(attr::STAT_HWCOUNTER_ENTRY_NAME, "sent_pkts"),
                encode::u32(attr::STAT_HWCOUNTER_ENTRY_VALUE, 1),
            ],
        )],
    );
    let payload = [&handle[..], &[short_value]].concat().concat();
    assert!(matches!(
        refused(
            command,
            &encode::message(command.message_type(), 0, 1, &payload)
        ),
        ReplyError::AttributeSize {
            kind: attr::STAT_HWCOUNTER_ENTRY_VALUE,
            length: 4,
            ..
        }
    ));
    // A kernel before 5.3 (no STAT_GET) or a driver without port counters: EINVAL.
    assert_eq!(
        refused(command, &encode::error(1, libc::EINVAL)),
        ReplyError::Kernel(libc::EINVAL)
    );
}

/// Real kernels' replies (Debian 6.12 and 6.1 in the kernel lab, Soft-RoCE's rxe0 after
/// ib_write_bw ran), captured with rxe0's `hw_counters/` files read right after: the same
/// counters, the same values.
#[test]
fn captured_port_counters_are_the_hw_counters_files() {
    for release in ["6.12", "6.1"] {
        let dir = encode::fixtures(release);
        let devices = encode::replay(&dir.join("devices.bin"), Command::Devices, None);
        let rxe0 = devices.devices.iter().find(|device| device.name == "rxe0");
        let index = rxe0.expect("rxe0 listed").index;
        let port = Command::PortCounters { port: 1 };
        let reply = encode::replay(&dir.join("stat_port1.bin"), port, Some(index));
        assert_eq!(reply.devices[0].name, "rxe0");
        let mut read: Vec<(String, u64)> = (reply.counters.into_iter())
            .map(|counter| (counter.name, counter.value))
            .collect();
        let text = std::fs::read_to_string(dir.join("hw_counters_port1.txt")).unwrap();
        let mut files: Vec<(String, u64)> = (text.lines())
            .map(|line| {
                let (name, value) = line.split_once(' ').unwrap();
                (name.to_string(), value.parse().unwrap())
            })
            .collect();
        read.sort();
        files.sort();
        assert_eq!(read, files, "{release}");
        assert!(files
            .iter()
            .any(|(name, value)| name == "sent_pkts" && *value > 0));
    }
}

#[test]
fn a_queue_pair_dump_over_two_datagrams_reads_back() {
    let entries = [
        qp(Holder::Kernel("ib_core".into()), Some(1), 1, 3),
        qp(Holder::Process(812), None, 2, 0),
        qp(Holder::Process(812), Some(1), 2, 3),
    ];
    let mut dump = Dump::new(Command::Resources(Resource::QueuePair), Some(3), 9);
    let first = encode::resources(Resource::QueuePair, &rxe0(), 9, &entries[..2]);
    let second = [
        encode::resources(Resource::QueuePair, &rxe0(), 9, &entries[2..]),
        encode::done(9, 0),
    ]
    .concat();
    dump.feed(&first).unwrap();
    assert!(!dump.is_done());
    dump.feed(&second).unwrap();
    assert!(dump.is_done());
    assert_eq!(dump.entries, entries);
}

#[test]
fn memory_regions_carry_their_length() {
    let mr = Entry {
        holder: Holder::Process(5),
        port: None,
        qp_number: None,
        qp_type: None,
        qp_state: None,
        mr_length: Some(1 << 33),
    };
    let mut dump = Dump::new(Command::Resources(Resource::MemoryRegion), Some(3), 1);
    dump.feed(
        &[
            encode::resources(
                Resource::MemoryRegion,
                &rxe0(),
                1,
                std::slice::from_ref(&mr),
            ),
            encode::done(1, 0),
        ]
        .concat(),
    )
    .unwrap();
    assert_eq!(dump.entries, [mr]);
}

#[test]
fn the_device_list_reads_back() {
    let devices = [
        rxe0(),
        Device {
            index: 4,
            name: "mlx5_0".into(),
        },
    ];
    let mut dump = Dump::new(Command::Devices, None, 2);
    let bytes: Vec<u8> = devices
        .iter()
        .flat_map(|device| encode::device(device, 2))
        .chain(encode::done(2, 0))
        .collect();
    dump.feed(&bytes).unwrap();
    assert_eq!(dump.devices, devices);
}

fn refused(command: Command, bytes: &[u8]) -> ReplyError {
    Dump::new(command, Some(3), 1).feed(bytes).unwrap_err()
}

#[test]
fn kernel_errors_are_reported_with_their_errno() {
    let command = Command::Resources(Resource::CmId);
    assert_eq!(
        refused(command, &encode::error(1, libc::EOPNOTSUPP)),
        ReplyError::Kernel(libc::EOPNOTSUPP)
    );
    assert_eq!(
        refused(command, &encode::done(1, -libc::EINTR)),
        ReplyError::Kernel(libc::EINTR)
    );
    // An acknowledgement is no error.
    assert!(Dump::new(command, Some(3), 1)
        .feed(&encode::error(1, 0))
        .is_ok());
}

#[test]
fn malformed_replies_are_refused() {
    let command = Command::Resources(Resource::QueuePair);
    let good = encode::resources(
        Resource::QueuePair,
        &rxe0(),
        1,
        &[qp(Holder::Process(1), Some(1), 2, 3)],
    );
    // Cut inside the header, inside the message, or with a length beyond the datagram.
    assert!(matches!(
        refused(command, &good[..10]),
        ReplyError::MessageLength { .. }
    ));
    assert!(matches!(
        refused(command, &good[..good.len() - 8]),
        ReplyError::MessageLength { .. }
    ));
    let mut long = good.clone();
    long[..4].copy_from_slice(&(good.len() as u32 + 4).to_ne_bytes());
    assert!(matches!(
        refused(command, &long),
        ReplyError::MessageLength { .. }
    ));
    // An attribute longer than its message.
    let mut overlong = good.clone();
    overlong[16..18].copy_from_slice(&200u16.to_ne_bytes());
    assert!(matches!(
        refused(command, &overlong),
        ReplyError::AttributeLength { kind: 1, .. }
    ));
    // A u32 of 2 bytes, a u8 of 4, a string without its NUL.
    let short_index = encode::message(
        command.message_type(),
        0,
        1,
        &encode::attribute(attr::DEV_INDEX, &[1, 0]),
    );
    assert!(matches!(
        refused(command, &short_index),
        ReplyError::AttributeSize {
            kind: 1,
            length: 2,
            ..
        }
    ));
    let wide_state = [
        encode::u32(attr::DEV_INDEX, 3),
        encode::nested(
            attr::RES_QP,
            &[encode::nested(
                attr::RES_QP_ENTRY,
                &[encode::u32(attr::RES_STATE, 3)],
            )],
        ),
    ]
    .concat();
    assert!(matches!(
        refused(
            command,
            &encode::message(command.message_type(), 0, 1, &wide_state)
        ),
        ReplyError::AttributeSize {
            kind: attr::RES_STATE,
            length: 4,
            ..
        }
    ));
    let unterminated = [
        encode::u32(attr::DEV_INDEX, 3),
        encode::attribute(attr::DEV_NAME, b"rxe0"),
    ]
    .concat();
    let devices = Command::Devices;
    assert_eq!(
        Dump::new(devices, None, 1)
            .feed(&encode::message(
                devices.message_type(),
                0,
                1,
                &unterminated
            ))
            .unwrap_err(),
        ReplyError::BadString(attr::DEV_NAME)
    );
}

#[test]
fn replies_of_another_request_are_refused() {
    let command = Command::Resources(Resource::QueuePair);
    let entry = [qp(Holder::Process(1), Some(1), 2, 3)];
    assert_eq!(
        refused(
            command,
            &encode::resources(Resource::QueuePair, &rxe0(), 2, &entry)
        ),
        ReplyError::Sequence { got: 2, sent: 1 }
    );
    let other = Device {
        index: 9,
        name: "mlx5_0".into(),
    };
    assert_eq!(
        refused(
            command,
            &encode::resources(Resource::QueuePair, &other, 1, &entry)
        ),
        ReplyError::OtherDevice { got: 9, asked: 3 }
    );
    assert_eq!(
        refused(
            command,
            &encode::resources(Resource::CompletionQueue, &rxe0(), 1, &[])
        ),
        ReplyError::UnexpectedType(Command::Resources(Resource::CompletionQueue).message_type())
    );
    assert_eq!(
        refused(command, &[encode::done(1, 0), encode::done(1, 0)].concat()),
        ReplyError::AfterDone
    );
}
